/* Constant folding: a node whose inputs are all block constants is computed here once
 * and becomes a constant (elementwise f32 ops, reshape and copy). */
#include "compile/passes.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int all_const(const rg_graph *g, const rg_node *n)
{
    for (uint32_t i = 0; i < n->n_in; i++)
        if (g->values[n->in[i]].kind != RG_CONST) return 0;
    return n->n_in > 0;
}

/* computes node n into out (bytes of its output); 0 done, 1 not foldable */
static int eval(const rg_graph *g, const rg_node *n, void *out)
{
    const rg_value *x = &g->values[n->in[0]];
    size_t bytes = rg_value_bytes(g, n->out[0]);
    if (!strcmp(n->op, "rlx.reshape") || !strcmp(n->op, "rlx.copy")) {
        memcpy(out, x->data, bytes);
        return 0;
    }
    if (x->dtype != RLX_F32) return 1;
    const float *a = x->data;
    float *o = out;
    size_t cnt = bytes / 4;
    if (!strcmp(n->op, "rlx.scale") || !strcmp(n->op, "rlx.add_scalar")) {
        int sc = n->op[4] == 's';
        double k = rg_attr_float(n, sc ? "scale" : "value", sc ? 1.0 : 0.0);
        for (size_t i = 0; i < cnt; i++) o[i] = sc ? (float)(a[i] * k) : (float)(a[i] + k);
        return 0;
    }
    if (!strcmp(n->op, "rlx.add") || !strcmp(n->op, "rlx.sub") || !strcmp(n->op, "rlx.mul")) {
        const rg_value *y = &g->values[n->in[1]];
        const float *b = y->data;
        size_t bn = (size_t)rlx_shape_numel(&y->shape);
        if (y->dtype != RLX_F32 || bn == 0) return 1;
        char k = n->op[4];
        for (size_t i = 0; i < cnt; i++) {
            float bv = b[i % bn];
            o[i] = k == 'a' ? a[i] + bv : k == 's' ? a[i] - bv : a[i] * bv;
        }
        return 0;
    }
    return 1;
}

int rg_pass_fold(rg_graph *g, rg_stats *st)
{
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        rg_node *n = &g->nodes[i];
        if (n->dead || n->n_out != 1 || !all_const(g, n)) continue;
        size_t bytes = rg_value_bytes(g, n->out[0]);
        void *buf = malloc(bytes ? bytes : 1);
        if (!buf) return -1;
        if (eval(g, n, buf)) {
            free(buf);
            continue;
        }
        rg_value *o = &g->values[n->out[0]];
        o->kind = RG_CONST;
        o->data = buf;
        o->producer = -1;
        n->dead = 1;
        if (st) st->folded++;
    }
    rg_compact_nodes(g);
    return 0;
}
