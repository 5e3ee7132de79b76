/* Program construction and arena planning. reshape disappears (its output aliases its
 * input); cache_write's (and cache_write_rows') output aliases the state it writes. Every TEMP gets a 64-byte
 * aligned offset in one arena, reused once its last reader has run (greedy best-fit
 * over the schedule). */
#include "compile/plan.h"
#include <stdlib.h>
#include <string.h>

typedef struct blk {
    size_t off, size;
} blk;

typedef struct freelist {
    blk *b;
    uint32_t n;
    size_t top; /* arena high-water mark */
} freelist;

static size_t align_up(size_t x) { return (x + RG_ARENA_ALIGN - 1) / RG_ARENA_ALIGN * RG_ARENA_ALIGN; }

static size_t fl_alloc(freelist *f, size_t size)
{
    int best = -1;
    for (uint32_t i = 0; i < f->n; i++)
        if (f->b[i].size >= size && (best < 0 || f->b[i].size < f->b[best].size)) best = (int)i;
    if (best >= 0) {
        size_t off = f->b[best].off;
        f->b[best].off += size;
        f->b[best].size -= size;
        if (!f->b[best].size) memmove(&f->b[best], &f->b[best + 1], (f->n-- - best - 1) * sizeof(blk));
        return off;
    }
    /* a free block touching the top grows into new space instead of leaving a gap */
    if (f->n && f->b[f->n - 1].off + f->b[f->n - 1].size == f->top) {
        size_t off = f->b[f->n - 1].off;
        f->n--;
        f->top = off + size;
        return off;
    }
    size_t off = f->top;
    f->top += size;
    return off;
}

static int fl_free(freelist *f, size_t off, size_t size)
{
    uint32_t i = 0;
    while (i < f->n && f->b[i].off < off) i++;
    blk *nb = realloc(f->b, (f->n + 1) * sizeof *nb);
    if (!nb) return -1;
    f->b = nb;
    memmove(&f->b[i + 1], &f->b[i], (f->n - i) * sizeof(blk));
    f->b[i] = (blk){off, size};
    f->n++;
    if (i + 1 < f->n && f->b[i].off + f->b[i].size == f->b[i + 1].off) {
        f->b[i].size += f->b[i + 1].size;
        memmove(&f->b[i + 1], &f->b[i + 2], (f->n - i - 2) * sizeof(blk));
        f->n--;
    }
    if (i > 0 && f->b[i - 1].off + f->b[i - 1].size == f->b[i].off) {
        f->b[i - 1].size += f->b[i].size;
        memmove(&f->b[i], &f->b[i + 1], (f->n - i - 1) * sizeof(blk));
        f->n--;
    }
    return 0;
}

void rg_plan_free(rg_plan *p)
{
    free(p->values);
    free(p->nodes);
    free(p->ids);
    free(p->p2g);
    memset(p, 0, sizeof *p);
}

static int is_reshape(const rg_node *n) { return strcmp(n->op, "rlx.reshape") == 0; }

int rg_plan_build(const rg_graph *g, rg_plan *p, rlx_diag *d)
{
    memset(p, 0, sizeof *p);
    uint32_t nv = g->n_values, nn = g->n_nodes;
    int32_t *root = malloc((nv + 1) * sizeof *root);   /* graph value whose bytes v uses */
    int32_t *g2p = malloc((nv + 1) * sizeof *g2p);
    uint8_t *is_out = calloc(nv + 1, 1), *ref = calloc(nv + 1, 1);
    int32_t *def = NULL, *last = NULL;
    freelist fl = {0};
    int rc = 0;
    if (!root || !g2p || !is_out || !ref) goto nomem;
    for (uint32_t v = 0; v < nv; v++) {
        root[v] = (int32_t)v;
        g2p[v] = -1;
        if (g->values[v].kind == RG_INPUT) ref[v] = 1;
    }
    for (uint32_t i = 0; i < g->n_outputs; i++) is_out[g->outputs[i].value] = ref[g->outputs[i].value] = 1;
    uint32_t n_ids = 0, n_prog_nodes = 0;
    for (uint32_t i = 0; i < nn; i++) {
        const rg_node *n = &g->nodes[i];
        for (uint32_t j = 0; j < n->n_in; j++) ref[n->in[j]] = 1;
        for (uint32_t j = 0; j < n->n_out; j++) ref[n->out[j]] = 1;
        if (is_reshape(n) || !strcmp(n->op, "rlx.cache_write") || !strcmp(n->op, "rlx.cache_write_rows"))
            root[n->out[0]] = root[n->in[0]];
        if (!is_reshape(n)) {
            n_ids += n->n_in + n->n_out;
            n_prog_nodes++;
        }
    }
    for (uint32_t v = 0; v < nv; v++)
        if (ref[v]) g2p[v] = (int32_t)p->n_values++;
    p->values = calloc(p->n_values + 1, sizeof *p->values);
    p->p2g = malloc((p->n_values + 1) * sizeof *p->p2g);
    p->nodes = calloc(n_prog_nodes + 1, sizeof *p->nodes);
    p->ids = malloc((n_ids + 1) * sizeof *p->ids);
    def = malloc((p->n_values + 1) * sizeof *def);
    last = malloc((p->n_values + 1) * sizeof *last);
    if (!p->values || !p->p2g || !p->nodes || !p->ids || !def || !last) goto nomem;
    static const int kinds[] = {[RG_TEMP] = RLX_VALUE_TEMP, [RG_INPUT] = RLX_VALUE_INPUT,
                                [RG_WEIGHT] = RLX_VALUE_WEIGHT, [RG_CONST] = RLX_VALUE_CONST,
                                [RG_STATE] = RLX_VALUE_STATE};
    for (uint32_t v = 0; v < nv; v++) {
        int32_t k = g2p[v];
        if (k < 0) continue;
        rlx_value_desc *vd = &p->values[k];
        vd->struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_value_desc, alias_offset);
        vd->dtype = g->values[v].dtype;
        vd->shape = g->values[v].shape;
        vd->name = g->values[v].name;
        vd->alias_of = -1;
        vd->kind = kinds[g->values[v].kind];
        if (root[v] != (int32_t)v) {
            vd->kind = RLX_VALUE_ALIAS;
            vd->alias_of = g2p[root[v]];
        } else if (is_out[v]) {
            vd->kind = RLX_VALUE_OUTPUT;
        }
        if (is_out[v]) /* outputs carry their flow name */
            for (uint32_t i = 0; i < g->n_outputs; i++)
                if (g->outputs[i].value == (int32_t)v) vd->name = g->outputs[i].name;
        p->p2g[k] = (int32_t)v;
        def[k] = last[k] = -1;
    }
    /* program nodes, and liveness of TEMPs in program-node numbering */
    uint32_t at = 0, k = 0;
    for (uint32_t i = 0; i < nn; i++) {
        const rg_node *n = &g->nodes[i];
        if (is_reshape(n)) continue;
        rlx_node_desc *nd = &p->nodes[k];
        nd->struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_node_desc, n_attrs);
        nd->op = n->op;
        nd->attrs = n->attrs;
        nd->n_attrs = n->n_attrs;
        nd->inputs = &p->ids[at];
        nd->n_inputs = n->n_in;
        for (uint32_t j = 0; j < n->n_in; j++) {
            int32_t pv = g2p[n->in[j]], rv = g2p[root[n->in[j]]];
            p->ids[at++] = pv;
            last[rv] = (int32_t)k;
        }
        nd->outputs = &p->ids[at];
        nd->n_outputs = n->n_out;
        for (uint32_t j = 0; j < n->n_out; j++) {
            int32_t pv = g2p[n->out[j]];
            p->ids[at++] = pv;
            if (def[pv] < 0) def[pv] = (int32_t)k;
            if (last[pv] < (int32_t)k) last[pv] = (int32_t)k;
        }
        k++;
    }
    p->n_nodes = k;
    /* arena: at node k allocate what it defines, then release what it read last */
    for (uint32_t step = 0; step < k; step++) {
        const rlx_node_desc *nd = &p->nodes[step];
        for (uint32_t j = 0; j < nd->n_outputs; j++) {
            rlx_value_desc *vd = &p->values[nd->outputs[j]];
            if (vd->kind != RLX_VALUE_TEMP || def[nd->outputs[j]] != (int32_t)step) continue;
            size_t bytes = (size_t)rlx_shape_numel(&vd->shape) * rlx_dtype_size(vd->dtype);
            vd->arena_offset = fl_alloc(&fl, align_up(bytes ? bytes : 1));
            p->temp_bytes += bytes;
            p->n_temps++;
        }
        for (uint32_t v = 0; v < p->n_values; v++) {
            rlx_value_desc *vd = &p->values[v];
            if (vd->kind != RLX_VALUE_TEMP || last[v] != (int32_t)step || def[v] < 0) continue;
            size_t bytes = (size_t)rlx_shape_numel(&vd->shape) * rlx_dtype_size(vd->dtype);
            if (fl_free(&fl, vd->arena_offset, align_up(bytes ? bytes : 1))) goto nomem;
        }
    }
    p->arena_bytes = fl.top;
    goto out;
nomem:
    rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    rg_plan_free(p);
out:
    free(root);
    free(g2p);
    free(is_out);
    free(ref);
    free(def);
    free(last);
    free(fl.b);
    return rc;
}
