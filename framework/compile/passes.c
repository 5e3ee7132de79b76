/* Graph passes: output materialisation, dead-code elimination, fusion of primitive
 * patterns into composites, and the assert_clean check. */
#include "compile/passes.h"
#include "ir/ops.h"
#include <stdlib.h>
#include <string.h>

const char *const rg_fused_names[4] = {"rlx.add_rms_norm", "rlx.swiglu", "rlx.geglu_tanh",
                                       "rlx.linear_swiglu"};

static int is_op(const rg_node *n, const char *op) { return strcmp(n->op, op) == 0; }

int rg_pass_outputs(rg_graph *g)
{
    for (uint32_t i = 0; i < g->n_outputs; i++) {
        int32_t v = g->outputs[i].value;
        int need = g->values[v].kind != RG_TEMP || g->values[v].producer < 0;
        if (!need) {
            const rg_node *p = &g->nodes[g->values[v].producer];
            need = is_op(p, "rlx.reshape") || is_op(p, "rlx.cache_write") || is_op(p, "rlx.cache_write_rows");
        }
        for (uint32_t j = 0; j < i && !need; j++) need = g->outputs[j].value == v;
        if (!need) continue;
        rlx_shape s = g->values[v].shape;
        int32_t nv = rg_add_value(g, RG_TEMP, g->values[v].dtype, &s, NULL);
        if (nv < 0 || rg_add_node(g, "rlx.copy", &v, 1, &nv, 1, NULL, 0, "output") < 0) return -1;
        g->outputs[i].value = nv;
    }
    return 0;
}

/* a node whose effect is not its output: keep it even when nothing reads it */
static int has_side_effect(const rg_node *n)
{
    return is_op(n, "rlx.cache_write") || is_op(n, "rlx.cache_write_rows");
}

void rg_pass_dce(rg_graph *g, rg_stats *st)
{
    uint8_t *live = calloc(g->n_nodes + 1, 1);
    int32_t *stack = malloc((g->n_values + 1) * sizeof *stack);
    uint8_t *seen = calloc(g->n_values + 1, 1);
    if (!live || !stack || !seen) goto out;
    uint32_t sp = 0;
#define PUSH(v) do { if ((v) >= 0 && !seen[v]) { seen[v] = 1; stack[sp++] = (v); } } while (0)
    for (uint32_t i = 0; i < g->n_outputs; i++) PUSH(g->outputs[i].value);
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].dead || !has_side_effect(&g->nodes[i])) continue;
        for (uint32_t j = 0; j < g->nodes[i].n_out; j++) PUSH(g->nodes[i].out[j]);
    }
    while (sp) {
        int32_t v = stack[--sp];
        int32_t p = g->values[v].producer;
        if (p < 0 || g->nodes[p].dead || live[p]) continue;
        live[p] = 1;
        for (uint32_t j = 0; j < g->nodes[p].n_in; j++) PUSH(g->nodes[p].in[j]);
    }
#undef PUSH
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        if (!g->nodes[i].dead && !live[i]) {
            g->nodes[i].dead = 1;
            if (st) st->dce_removed++;
        }
    }
    rg_compact_nodes(g);
out:
    free(live);
    free(stack);
    free(seen);
}

/* ---------------------------------------------------------------- fusion */

typedef struct match {
    int kind;           /* index into rg_fused_names */
    uint32_t a, b, c;   /* nodes replaced (c only for linear_swiglu) */
    int32_t in[3];
    uint32_t n_in;
} match;

static const rg_node *producer(const rg_graph *g, int32_t v, const char *op)
{
    int32_t p = g->values[v].producer;
    if (p < 0 || g->nodes[p].dead || !is_op(&g->nodes[p], op)) return NULL;
    return &g->nodes[p];
}

/* Does node i close a fusable pattern? uses: live use counts. */
static int match_at(const rg_graph *g, const uint32_t *uses, uint32_t i, match *m)
{
    const rg_node *n = &g->nodes[i];
    if (n->dead) return 0;
    if (is_op(n, "rlx.mul")) {
        for (int k = 0; k < 2; k++) {
            int32_t x = n->in[k], y = n->in[1 - k];
            const rg_node *p = producer(g, x, "rlx.silu");
            int kind = 1;
            if (!p) p = producer(g, x, "rlx.gelu_tanh"), kind = 2;
            if (!p || uses[x] != 1 || !rg_shape_eq(&g->values[x].shape, &g->values[y].shape)) continue;
            *m = (match){kind, (uint32_t)(p - g->nodes), i, 0, {p->in[0], y, 0}, 2};
            return 1;
        }
    } else if (is_op(n, "rlx.rms_norm")) {
        int32_t s = n->in[0];
        const rg_node *p = producer(g, s, "rlx.add");
        if (p && rg_shape_eq(&g->values[p->in[0]].shape, &g->values[p->in[1]].shape)) {
            *m = (match){0, (uint32_t)(p - g->nodes), i, 0, {p->in[0], p->in[1], n->in[1]}, 3};
            return 1;
        }
    } else if (is_op(n, "rlx.swiglu")) {
        const rg_node *a = producer(g, n->in[0], "rlx.matmul");
        const rg_node *b = producer(g, n->in[1], "rlx.matmul");
        if (a && b && a != b && a->n_in == 2 && b->n_in == 2 && a->in[0] == b->in[0] &&
            uses[n->in[0]] == 1 && uses[n->in[1]] == 1 &&
            rg_shape_eq(&g->values[a->in[1]].shape, &g->values[b->in[1]].shape)) {
            *m = (match){3, (uint32_t)(a - g->nodes), (uint32_t)(b - g->nodes), i,
                         {a->in[0], a->in[1], b->in[1]}, 3};
            return 1;
        }
    }
    return 0;
}

static int apply(rg_graph *g, uint32_t i, const match *m)
{
    rg_node *n = &g->nodes[i];
    uint32_t pos = g->nodes[m->a].pos;
    int32_t out[2];
    uint32_t n_out = 1;
    rlx_attr at[2];
    uint32_t n_at = 0;
    if (m->kind == 0) { /* add_rms_norm: s = add output, y = norm output */
        out[0] = g->nodes[m->a].out[0];
        out[1] = n->out[0];
        n_out = 2;
        at[0] = (rlx_attr)RLX_ATTR_F("eps", rg_attr_float(n, "eps", 1e-6));
        at[1] = (rlx_attr)RLX_ATTR_I("add_one", rg_attr_int(n, "add_one", 0));
        n_at = 2;
    } else {
        out[0] = n->out[0];
    }
    char *where = strdup(n->where ? n->where : "");
    if (!where) return -1;
    g->nodes[m->a].dead = 1;
    g->nodes[m->b].dead = 1;
    if (m->kind == 3) g->nodes[m->c].dead = 1;
    int32_t k = rg_add_node(g, rg_fused_names[m->kind], m->in, m->n_in, out, n_out, at, n_at, where);
    free(where);
    if (k < 0) return -1;
    g->nodes[k].fused = 1;
    g->nodes[k].pos = pos;
    return 0;
}

/* one sweep for the patterns of the given kinds; returns fusions made or -1 */
static int sweep(rg_graph *g, rg_stats *st, int linear)
{
    uint32_t *uses = rg_use_counts(g);
    if (!uses) return -1;
    int made = 0;
    uint32_t n = g->n_nodes;
    for (uint32_t i = 0; i < n; i++) {
        match m;
        if (!match_at(g, uses, i, &m) || (m.kind == 3) != linear) continue;
        if (apply(g, i, &m)) {
            free(uses);
            return -1;
        }
        if (st) st->fused[m.kind]++;
        made++;
    }
    free(uses);
    return made;
}

int rg_pass_fuse(rg_graph *g, rg_stats *st)
{
    if (sweep(g, st, 0) < 0 || sweep(g, st, 1) < 0) return -1;
    rg_compact_nodes(g);
    return 0;
}

static int backend_has(const rlx_backend *be, const char *op)
{
    for (const char *const *o = be->ops; o && *o; o++)
        if (!strcmp(*o, op)) return 1;
    return 0;
}

int rg_pass_assert_clean(rg_graph *g, const rlx_backend *be, rlx_diag *d)
{
    uint32_t *uses = rg_use_counts(g);
    if (!uses) return RLX_ERR_NOMEM;
    int rc = 0;
    for (uint32_t i = 0; i < g->n_nodes && !rc; i++) {
        match m;
        if (!match_at(g, uses, i, &m) || !backend_has(be, rg_fused_names[m.kind])) continue;
        rc = rlx_diag_set(d, RLX_ERR_INVALID,
                          "assert_clean: unfused %s pattern (%s + %s) in %s; backend %s has %s",
                          rg_fused_names[m.kind], g->nodes[m.a].op, g->nodes[m.b].op,
                          g->nodes[i].where ? g->nodes[i].where : "?", be->name,
                          rg_fused_names[m.kind]);
    }
    free(uses);
    return rc;
}
