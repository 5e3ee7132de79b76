/* Running a compiled program: bind the arena, session states and inputs, execute,
 * read outputs back. Everything fixed per program was bound at compile. */
#include "runtime/exec.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t value_bytes(const rlx_value_desc *vd)
{
    return (size_t)rlx_shape_numel(&vd->shape) * rlx_dtype_size(vd->dtype);
}

static int put(rlx_model *m, void *dst, const void *src, size_t bytes, rlx_diag *d)
{
    if (m->be->upload) return m->be->upload(m->be_ctx, dst, src, bytes, d);
    memcpy(dst, src, bytes);
    return 0;
}

static int ensure_arena(rlx_model *m, size_t bytes, rlx_diag *d)
{
    if (m->arena && m->arena_cap >= bytes) return 0;
    if (m->arena) m->be->free(m->be_ctx, m->arena);
    m->arena = m->be->alloc(m->be_ctx, bytes ? bytes : RG_ARENA_ALIGN, d);
    m->arena_cap = m->arena ? bytes : 0;
    m->arena_gen++;
    if (!m->arena)
        return d && d->code ? d->code : rlx_diag_set(d, RLX_ERR_NOMEM, "backend %s: arena of %zu bytes: allocation failed", m->be->name, bytes);
    return 0;
}

uint32_t rg_states_find(const rg_states *st, const char *name, uint32_t from)
{
    if (!st) return 0;
    if (from < st->n && !strcmp(st->s[from].name, name)) return from;
    for (uint32_t i = 0; i < st->n; i++)
        if (!strcmp(st->s[i].name, name)) return i;
    return st->n;
}

/* the bytes of state vd in the session (made now if new); *next: where the next is tried */
static int state_ptr(rlx_model *m, rg_states *st, const rlx_value_desc *vd, void **out, uint32_t *next,
                     rlx_diag *d)
{
    char a[96], b[96];
    uint32_t i = rg_states_find(st, vd->name, *next);
    if (i < st->n) {
        rg_state *s = &st->s[i];
        *next = i + 1;
        if (!rg_shape_eq(&s->shape, &vd->shape) || s->dtype != vd->dtype)
            return rlx_diag_set(d, RLX_ERR_INVALID, "state %s: %s in this program but %s in the session",
                                vd->name, rlx_shape_str(&vd->shape, a, sizeof a),
                                rlx_shape_str(&s->shape, b, sizeof b));
        *out = s->ptr;
        return 0;
    }
    rg_state *ns = realloc(st->s, (st->n + 1) * sizeof *ns);
    if (!ns) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    st->s = ns;
    rg_state *s = &st->s[st->n];
    memset(s, 0, sizeof *s);
    s->bytes = value_bytes(vd);
    s->dtype = vd->dtype;
    s->shape = vd->shape;
    if (!(s->name = strdup(vd->name))) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    /* not cleared: a state is a KV cache, whose rows are read only after they are written
     * (attention reads keys j < pos + T, cache_write fills rows pos..pos+T-1 first), so a
     * long context costs no time or resident memory until it is used */
    s->ptr = m->be->alloc(m->be_ctx, s->bytes ? s->bytes : 4, d);
    int rc = s->ptr ? 0 : RLX_ERR_NOMEM;
    if (rc) {
        if (s->ptr) m->be->free(m->be_ctx, s->ptr);
        free(s->name);
        return d && d->code ? d->code : rlx_diag_set(d, rc, "state %s: allocation of %zu bytes failed", vd->name, s->bytes);
    }
    st->n++;
    *next = st->n;
    m->state_bytes += s->bytes;
    *out = s->ptr;
    return 0;
}

int rg_states_ensure(rlx_model *m, rg_exec *e, rg_states *st, rlx_diag *d)
{
    uint32_t next = 0;
    for (uint32_t i = 0; i < e->plan.n_values; i++) {
        void *p;
        int rc = e->plan.values[i].kind == RLX_VALUE_STATE ? state_ptr(m, st, &e->plan.values[i], &p, &next, d) : 0;
        if (rc) return rc;
    }
    return 0;
}

void rg_states_free(rlx_model *m, rg_states *st)
{
    for (uint32_t i = 0; i < st->n; i++) {
        if (!st->s[i].borrowed) {
            m->be->free(m->be_ctx, st->s[i].ptr);
            m->state_bytes -= st->s[i].bytes;
        }
        free(st->s[i].name);
    }
    free(st->s);
    st->s = NULL;
    st->n = 0;
}

static const rlx_value_desc *find_value(const rg_exec *e, const char *name, int kind)
{
    for (uint32_t i = 0; i < e->plan.n_values; i++) {
        const rlx_value_desc *vd = &e->plan.values[i];
        if (vd->kind == kind && vd->name && !strcmp(vd->name, name)) return vd;
    }
    return NULL;
}

const rlx_value_desc *rg_exec_find_io(const rg_exec *e, const char *name, int output)
{
    return find_value(e, name, output ? RLX_VALUE_OUTPUT : RLX_VALUE_INPUT);
}

const rlx_value_desc *rg_exec_find_state(const rg_exec *e, const char *name)
{
    return find_value(e, name, RLX_VALUE_STATE);
}

/* An I32 input that an embedding reads as its ids is checked against the table's rows
 * before it is uploaded, so an id out of range is named by the input that holds it
 * (token_type_ids, positions), not by a kernel node. Reshapes alias their input. */
static int check_ids(const rg_plan *p, uint32_t vi, const rg_io *in, rlx_diag *d)
{
    const rlx_value_desc *vd = &p->values[vi];
    if (vd->dtype != RLX_I32) return 0;
    for (uint32_t i = 0; i < p->n_nodes; i++) {
        const rlx_node_desc *n = &p->nodes[i];
        if (n->n_inputs < 2 || strcmp(n->op, "rlx.embedding")) continue;
        int32_t id = n->inputs[1];
        while (id >= 0 && (uint32_t)id < p->n_values && p->values[id].kind == RLX_VALUE_ALIAS &&
               p->values[id].alias_offset == 0)
            id = p->values[id].alias_of;
        if (id != (int32_t)vi || n->inputs[0] < 0 || (uint32_t)n->inputs[0] >= p->n_values) continue;
        const rlx_value_desc *t = &p->values[n->inputs[0]];
        int64_t rows = t->shape.ndim ? t->shape.dims[0] : 0, numel = rlx_shape_numel(&vd->shape);
        const int32_t *x = in->data;
        for (int64_t j = 0; j < numel; j++) {
            if (x[j] >= 0 && x[j] < rows) continue;
            char how[160] = "";
            if (in->how) snprintf(how, sizeof how, " (%s)", in->how);
            return rlx_diag_set(d, RLX_ERR_INVALID, "input tensor \"%s\"%s: %d at position %lld is outside [0, %lld), the rows of %s",
                                vd->name, how, (int)x[j], (long long)j, (long long)rows,
                                t->name ? t->name : "its embedding table");
        }
    }
    return 0;
}

int rg_exec_launch(rlx_model *m, rg_exec *e, rg_states *st, const rg_io *in, uint32_t n_in, rlx_diag *d)
{
    const rg_plan *p = &e->plan;
    int rc = rg_mem_check(m, p, e->g, st, 0, d); /* a new session's states, a larger arena */
    if (!rc) rc = ensure_arena(m, p->arena_bytes, d);
    if (rc) return rc;
    if (e->arena_gen != m->arena_gen) {
        for (uint32_t i = 0; i < p->n_values; i++)
            if (p->values[i].kind == RLX_VALUE_TEMP) e->ptrs[i] = (char *)m->arena + p->values[i].arena_offset;
        e->arena_gen = m->arena_gen;
    }
    uint32_t next = 0;
    for (uint32_t i = 0; i < p->n_values; i++) {
        const rlx_value_desc *vd = &p->values[i];
        if (vd->kind == RLX_VALUE_STATE && (rc = state_ptr(m, st, vd, &e->ptrs[i], &next, d))) return rc;
        if (vd->kind != RLX_VALUE_INPUT) continue;
        uint32_t k = 0;
        while (k < n_in && strcmp(in[k].name, vd->name)) k++;
        if (k == n_in) return rlx_diag_set(d, RLX_ERR_INVALID, "input %s: not given", vd->name);
        if ((rc = check_ids(p, i, &in[k], d)) || (rc = put(m, e->ptrs[i], in[k].data, value_bytes(vd), d))) return rc;
    }
    for (uint32_t i = 0; i < p->n_values; i++)
        if (p->values[i].kind == RLX_VALUE_ALIAS)
            e->ptrs[i] = (char *)e->ptrs[p->values[i].alias_of] + p->values[i].alias_offset;
    rc = m->be->execute(m->be_ctx, e->exe, (void *const *)e->ptrs, d);
    if (rc && d && !d->code) rlx_diag_set(d, rc, "backend %s: execute failed", m->be->name);
    return rc;
}

int rg_exec_finish(rlx_model *m, int rc, rlx_diag *d)
{
    if (!rc && m->be->sync) rc = m->be->sync(m->be_ctx, d);
    if (rc && d && !d->code) rlx_diag_set(d, rc, "backend %s: execute failed", m->be->name);
    return rc;
}

int rg_exec_run(rlx_model *m, rg_exec *e, rg_states *st, const rg_io *in, uint32_t n_in, rlx_diag *d)
{
    return rg_exec_finish(m, rg_exec_launch(m, e, st, in, n_in, d), d);
}

int rg_exec_run_read(rlx_model *m, rg_exec *e, rg_states *st, const rg_io *in, uint32_t n_in, const char *name,
                     void *dst, rlx_diag *d)
{
    int rc = rg_exec_launch(m, e, st, in, n_in, d);
    int out = rc || !dst ? 0 : rg_exec_output(m, e, name, dst, d);
    rc = rg_exec_finish(m, rc, d); /* the step's own errors first: they explain a bad output */
    return rc ? rc : out;
}

/* the session's bytes of state name (made by rg_states_ensure) */
static int state_of(rg_exec *e, rg_states *st, const char *name, uint32_t *vi, rg_state **s, rlx_diag *d)
{
    uint32_t i = rg_states_find(st, name, 0);
    const rlx_value_desc *vd = rg_exec_find_state(e, name);
    if (i == st->n || !vd) return rlx_diag_set(d, RLX_ERR_INTERNAL, "state %s: not in the program or the session", name);
    *vi = (uint32_t)(vd - e->plan.values);
    *s = &st->s[i];
    return 0;
}

int rg_exec_state_set(rlx_model *m, rg_exec *e, rg_states *st, const rg_io *in, rlx_diag *d)
{
    uint32_t vi;
    rg_state *s;
    int rc = state_of(e, st, in->name, &vi, &s, d);
    if (!rc) rc = check_ids(&e->plan, vi, in, d);
    return rc ? rc : put(m, s->ptr, in->data, s->bytes, d);
}

int rg_exec_state_get(rlx_model *m, rg_exec *e, rg_states *st, const char *name, size_t off, void *dst, size_t bytes,
                      rlx_diag *d)
{
    uint32_t vi;
    rg_state *s;
    int rc = state_of(e, st, name, &vi, &s, d);
    if (rc) return rc;
    if (off > s->bytes || bytes > s->bytes - off)
        return rlx_diag_set(d, RLX_ERR_INTERNAL, "state %s: bytes %zu..%zu outside its %zu", name, off, off + bytes, s->bytes);
    if (m->be->download) return m->be->download(m->be_ctx, dst, (char *)s->ptr + off, bytes, d);
    memcpy(dst, (char *)s->ptr + off, bytes);
    return 0;
}

int rg_exec_output(rlx_model *m, rg_exec *e, const char *name, void *dst, rlx_diag *d)
{
    const rlx_value_desc *vd = rg_exec_find_io(e, name, 1);
    if (!vd) return rlx_diag_set(d, RLX_ERR_NOT_FOUND, "output %s: the flow does not emit it", name);
    void *src = e->ptrs[vd - e->plan.values];
    if (m->be->download) return m->be->download(m->be_ctx, dst, src, value_bytes(vd), d);
    memcpy(dst, src, value_bytes(vd));
    return 0;
}

void rg_exec_dump(const rg_exec *e, FILE *out)
{
    static const char *phases[] = {"prefill", "decode", "encode"};
    const rg_plan *p = &e->plan;
    char slots[40] = ""; /* a batched decode: T sequences on a pool of this many cache slots */
    if (e->variant.batch > 0) snprintf(slots, sizeof slots, " slots=%lld", (long long)e->variant.batch);
    fprintf(out, "graph %s T=%lld ctx=%lld%s%s%s: %u nodes (built %u, dce removed %u, folded %u, decomposed %u, casts %u)\n",
            phases[e->phase], (long long)e->T, (long long)e->ctx, slots,
            e->variant.last_row && e->T > 1 ? " last-row" : "", e->variant.greedy ? " greedy" : "",
            p->n_nodes, e->stats.built_nodes,
            e->stats.dce_removed, e->stats.folded, e->stats.decomposed, e->stats.casts);
    /* bytes per dtype: what the precision pass chose */
    size_t wb[RLX_DTYPE_COUNT] = {0}, sb_[RLX_DTYPE_COUNT] = {0};
    for (uint32_t i = 0; i < p->n_values; i++) {
        const rlx_value_desc *v = &p->values[i];
        if (v->dtype < 0 || v->dtype >= RLX_DTYPE_COUNT) continue;
        size_t b = (size_t)rlx_shape_numel(&v->shape) * rlx_dtype_size(v->dtype);
        if (v->kind == RLX_VALUE_WEIGHT) wb[v->dtype] += b;
        if (v->kind == RLX_VALUE_STATE) sb_[v->dtype] += b;
    }
    fprintf(out, "precision: weights");
    for (int k = 0; k < RLX_DTYPE_COUNT; k++)
        if (wb[k]) fprintf(out, " %s %zu bytes", rlx_dtype_name(k), wb[k]);
    fprintf(out, "; states");
    for (int k = 0; k < RLX_DTYPE_COUNT; k++)
        if (sb_[k]) fprintf(out, " %s %zu bytes", rlx_dtype_name(k), sb_[k]);
    fprintf(out, "\n");
    fprintf(out, "fusion formed:");
    int any = 0;
    for (int k = 0; k < 4; k++)
        if (e->stats.fused[k]) fprintf(out, " %s x%u", rg_fused_names[k], e->stats.fused[k]), any = 1;
    fprintf(out, "%s\n", any ? "" : " none");
    /* op counts, in first-seen order */
    const char *ops[64];
    uint32_t cnt[64], n_ops = 0, regions = 0;
    for (uint32_t i = 0; i < p->n_nodes; i++) {
        uint32_t k = 0;
        while (k < n_ops && strcmp(ops[k], p->nodes[i].op)) k++;
        if (k == n_ops && n_ops < 64) ops[n_ops] = p->nodes[i].op, cnt[n_ops++] = 0;
        if (k < 64) cnt[k]++;
        for (int f = 0; f < 4; f++)
            if (!strcmp(p->nodes[i].op, rg_fused_names[f])) regions++;
    }
    fprintf(out, "ops:");
    for (uint32_t k = 0; k < n_ops; k++) fprintf(out, " %s x%u", ops[k], cnt[k]);
    fprintf(out, "\nfused regions: %u\n", regions);
    uint32_t kinds[7] = {0};
    for (uint32_t i = 0; i < p->n_values; i++) kinds[p->values[i].kind]++;
    fprintf(out, "values: %u temps, %u inputs, %u outputs, %u weights, %u consts, %u states, %u aliases\n",
            kinds[RLX_VALUE_TEMP], kinds[RLX_VALUE_INPUT], kinds[RLX_VALUE_OUTPUT],
            kinds[RLX_VALUE_WEIGHT], kinds[RLX_VALUE_CONST], kinds[RLX_VALUE_STATE], kinds[RLX_VALUE_ALIAS]);
    fprintf(out, "arena: %zu bytes vs %zu bytes of intermediates (%u temps, %.1f%%)\n", p->arena_bytes,
            p->temp_bytes, p->n_temps, p->temp_bytes ? 100.0 * (double)p->arena_bytes / (double)p->temp_bytes : 0.0);
    for (uint32_t i = 0; i < p->n_nodes; i++) {
        const rlx_node_desc *n = &p->nodes[i];
        char sb[96];
        fprintf(out, "  %3u %-18s", i, n->op);
        for (uint32_t j = 0; j < n->n_inputs; j++) fprintf(out, "%s%%%d", j ? "," : " ", n->inputs[j]);
        fprintf(out, " ->");
        for (uint32_t j = 0; j < n->n_outputs; j++)
            fprintf(out, " %%%d %s%s", n->outputs[j], rlx_dtype_name(p->values[n->outputs[j]].dtype),
                    rlx_shape_str(&p->values[n->outputs[j]].shape, sb, sizeof sb));
        fprintf(out, "\n");
    }
}
