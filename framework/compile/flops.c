/* FLOPs of a compiled program, counted from its nodes and shapes: 2 per multiply-add of
 * the matmul-class ops and of attention's q·k and p·v over the keys each row attends to.
 * Elementwise ops, norms, softmax, rope, casts and data movement are not counted. */
#include "compile/plan.h"
#include <string.h>

static int64_t attr_int(const rlx_node_desc *n, const char *name, int64_t def)
{
    for (uint32_t i = 0; i < n->n_attrs; i++)
        if (n->attrs[i].kind == RLX_ATTR_INT && !strcmp(n->attrs[i].name, name)) return n->attrs[i].i;
    return def;
}

static const rlx_shape *in_shape(const rlx_program *p, const rlx_node_desc *n, uint32_t k)
{
    return &p->values[n->inputs[k]].shape;
}

static int64_t last_dim(const rlx_shape *s) { return s->ndim ? s->dims[s->ndim - 1] : 1; }

/* keys row t of T (absolute position pos + t) attends to: the cpu kernel's valid range */
static int64_t keys(int64_t t, int64_t T, int64_t S, int64_t pos, int has_pos, int causal, int64_t window)
{
    int64_t hi = has_pos ? pos + T : S, p = has_pos ? pos : 0;
    if (causal && p + t + 1 < hi) hi = p + t + 1;
    if (hi > S) hi = S;
    int64_t lo = window > 0 && p + t - window + 1 > 0 ? p + t - window + 1 : 0;
    return hi > lo ? hi - lo : 0;
}

/* q [T,nh,d], v [...,dv]: 2·(d + dv) flops per head and key */
static uint64_t attention(const rlx_program *p, const rlx_node_desc *n, int64_t pos)
{
    const rlx_shape *q = in_shape(p, n, 0), *k = in_shape(p, n, 1), *v = in_shape(p, n, 2);
    if (q->ndim != 3) return 0;
    int64_t T = q->dims[0], nh = q->dims[1], d = q->dims[2], dv = last_dim(v);
    int rows = !strcmp(n->op, "rlx.attention_rows"); /* one decode row per sequence, each at pos */
    int64_t S = rows ? k->dims[1] : k->dims[0], window = attr_int(n, "window", 0);
    int has_pos = rows, causal = rows || attr_int(n, "causal", 0);
    for (uint32_t j = 3; !rows && j < n->n_inputs; j++)
        if (p->values[n->inputs[j]].dtype == RLX_I32) has_pos = 1;
    uint64_t total = 0;
    for (int64_t t = 0; t < T; t++)
        total += (uint64_t)keys(rows ? 0 : t, rows ? 1 : T, S, pos, has_pos, causal, window);
    return total * (uint64_t)(2 * nh * (d + dv));
}

static uint64_t matmul(const rlx_program *p, const rlx_node_desc *n)
{
    const rlx_shape *a = in_shape(p, n, 0), *b = in_shape(p, n, 1);
    int64_t K = last_dim(a), M = K ? rlx_shape_numel(a) / K : 0;
    if (!strcmp(n->op, "rlx.matmul")) return 2ull * (uint64_t)(M * b->dims[0] * K);
    if (!strcmp(n->op, "rlx.matmul_nn")) return 2ull * (uint64_t)(M * last_dim(b) * K);
    if (!strcmp(n->op, "rlx.linear_swiglu")) /* gate and up projections */
        return 4ull * (uint64_t)(M * b->dims[0] * K);
    if (!strcmp(n->op, "rlx.bmm") && a->ndim == 3 && b->ndim == 3) {
        int64_t N = attr_int(n, "trans_b", 1) ? b->dims[1] : b->dims[2];
        return 2ull * (uint64_t)(a->dims[0] * a->dims[1] * N * K);
    }
    if (!strcmp(n->op, "rlx.conv2d") && b->ndim == 4) { /* per output element: C/groups·kh·kw */
        const rlx_shape *o = &p->values[n->outputs[0]].shape;
        return 2ull * (uint64_t)(rlx_shape_numel(o) * b->dims[1] * b->dims[2] * b->dims[3]);
    }
    return 0;
}

void rg_program_flops(const rlx_program *p, int64_t pos, uint64_t *matmul_flops, uint64_t *attention_flops)
{
    *matmul_flops = *attention_flops = 0;
    for (uint32_t i = 0; i < p->n_nodes; i++) {
        const rlx_node_desc *n = &p->nodes[i];
        if (!strncmp(n->op, "rlx.attention", 13)) *attention_flops += attention(p, n, pos);
        else if (n->n_inputs >= 2) *matmul_flops += matmul(p, n);
    }
}
