/* Tensor-parallel partition (Megatron-LM layout, docs/multi-gpu.md): the built graph
 * becomes the graph of one rank of N from the layout hints blocks put on rlx.matmul.
 *  - "col" / "col_rep" / "vocab": the rank keeps its rows of w (whole units: heads of
 *    tp_unit rows), so its output is its slice of features; "col_rep" replicates units
 *    when there are fewer than ranks (GQA kv heads); "vocab" is gathered after.
 *  - "row": the rank keeps the columns of w matching its slice of the input; the
 *    partial sums are all-reduced (a bias is added once, after).
 * Every other op is re-inferred with its new input shapes: reshapes carry the split
 * (their shape attribute is rewritten), KV cache states shrink to the rank's heads.
 * The graph outputs must keep their shapes; hints that do not pair up fail here. */
#include "compile/passes.h"
#include "ir/ops.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct part {
    rg_graph *g;
    int rank, ranks;
    int64_t group;
    rlx_shape *orig; /* every value's shape as built */
    rlx_diag *d;
} part;

static int fail(const part *p, uint32_t node, const char *fmt, ...) RLX_PRINTF(3, 4);
static int fail(const part *p, uint32_t node, const char *fmt, ...)
{
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *where = node < p->g->n_nodes && p->g->nodes[node].where ? p->g->nodes[node].where : "?";
    return rlx_diag_set(p->d, RLX_ERR_INVALID, "partition over %d ranks: %s: %s", p->ranks, where, msg);
}

static int nomem(const part *p) { return rlx_diag_set(p->d, RLX_ERR_NOMEM, "out of memory"); }

/* a new weight value: rows or columns [lo, hi) of weight w */
static int32_t slice_of(part *p, int32_t w, int axis, int64_t lo, int64_t hi)
{
    rg_value v = p->g->values[w];
    rlx_shape s = v.shape;
    s.dims[axis] = hi - lo;
    int32_t nv = rg_add_value(p->g, RG_WEIGHT, v.dtype, &s, v.name);
    if (nv < 0) return -1;
    p->g->values[nv].split = axis ? RG_SPLIT_COLS : RG_SPLIT_ROWS;
    p->g->values[nv].split_lo = lo;
    p->g->values[nv].split_hi = hi;
    return nv;
}

static int32_t temp(part *p, int32_t like, int64_t last_dim)
{
    rg_value v = p->g->values[like];
    rlx_shape s = v.shape;
    if (last_dim >= 0) s.dims[s.ndim - 1] = last_dim;
    return rg_add_value(p->g, RG_TEMP, v.dtype, &s, NULL);
}

/* appends op(in) -> out after node at (same schedule priority), with the group's attrs */
static int collective(part *p, uint32_t at, const char *op, int32_t in, int32_t out, int gather)
{
    int64_t axis = (int64_t)p->g->values[in].shape.ndim - 1;
    rlx_attr a[4] = {RLX_ATTR_I("ranks", p->ranks), RLX_ATTR_I("rank", p->rank), RLX_ATTR_I("group", p->group),
                     RLX_ATTR_I("axis", axis)};
    uint32_t pos = p->g->nodes[at].pos;
    int32_t k = rg_add_node(p->g, op, &in, 1, &out, 1, a, gather ? 4 : 3, p->g->nodes[at].where);
    if (k < 0) return -1;
    p->g->nodes[k].pos = pos;
    p->g->values[out].producer = k;
    return 0;
}

/* column-parallel (col, col_rep, vocab): the rank's rows of w and of the bias */
static int split_cols_out(part *p, uint32_t i, int kind)
{
    rg_node *n = &p->g->nodes[i];
    int32_t w = n->in[1];
    const rg_value *wv = &p->g->values[w];
    if (wv->kind != RG_WEIGHT || wv->split) return 0; /* not a checkpoint tensor: stays whole */
    int64_t N = wv->shape.dims[0], u = rg_attr_int(n, "tp_unit", 1), lo, hi;
    const char *unit = u > 1 ? "heads" : "rows";
    if (N % u) return fail(p, i, "tensor %s: %lld rows are not whole units of %lld", wv->name, (long long)N, (long long)u);
    int64_t units = N / u;
    if (units % p->ranks == 0) {
        lo = p->rank * (N / p->ranks);
        hi = lo + N / p->ranks;
    } else if (kind == RG_TP_VOCAB) {
        return 0; /* a vocabulary that does not divide: every rank computes all of it */
    } else if (kind == RG_TP_COL_REP && p->ranks % units == 0) {
        lo = (int64_t)p->rank * units / p->ranks * u; /* the unit this rank's share reads */
        hi = lo + u;
    } else {
        return fail(p, i, "tensor %s: %lld %s do not divide over %d ranks", wv->name, (long long)units, unit,
                    p->ranks);
    }
    int32_t nw = slice_of(p, w, 0, lo, hi);
    if (nw < 0) return nomem(p);
    n = &p->g->nodes[i];
    n->in[1] = nw;
    if (n->n_in == 3 && p->g->values[n->in[2]].kind == RG_WEIGHT) {
        int32_t nb = slice_of(p, n->in[2], 0, lo, hi);
        if (nb < 0) return nomem(p);
        n->in[2] = nb;
    } else if (n->n_in == 3) {
        return fail(p, i, "tensor %s: its bias is not a checkpoint tensor, so it cannot be split", wv->name);
    }
    if (kind != RG_TP_VOCAB) return 0;
    /* vocab: the rank's logits, gathered into the output value consumers read */
    int32_t out = n->out[0], t = temp(p, out, hi - lo);
    if (t < 0) return nomem(p);
    n = &p->g->nodes[i];
    n->out[0] = t;
    p->g->values[t].producer = (int32_t)i;
    return collective(p, i, "rlx.all_gather", t, out, 1) ? nomem(p) : 0;
}

/* row-parallel: the columns of w matching the rank's slice of x, then all_reduce (+ bias) */
static int split_rows_in(part *p, uint32_t i)
{
    rg_node *n = &p->g->nodes[i];
    int32_t x = n->in[0], w = n->in[1];
    const rg_value *wv = &p->g->values[w];
    const rlx_shape *xs = &p->g->values[x].shape;
    int64_t K = wv->shape.dims[1], k = xs->ndim ? xs->dims[xs->ndim - 1] : 1;
    if (wv->kind != RG_WEIGHT || wv->split || k == K) return 0; /* its input is whole: so is it */
    if (k * p->ranks != K)
        return fail(p, i, "tensor %s: its input holds %lld of %lld features, not 1/%d of them (the projections "
                    "before it are split differently)", wv->name, (long long)k, (long long)K, p->ranks);
    int32_t nw = slice_of(p, w, 1, p->rank * k, (p->rank + 1) * k);
    int32_t out = p->g->nodes[i].out[0], t = nw < 0 ? -1 : temp(p, out, -1);
    if (t < 0) return nomem(p);
    n = &p->g->nodes[i];
    int32_t bias = n->n_in == 3 ? n->in[2] : -1;
    n->in[1] = nw;
    n->n_in = 2;
    n->out[0] = t;
    p->g->values[t].producer = (int32_t)i;
    int32_t red = out;
    if (bias >= 0 && (red = temp(p, out, -1)) < 0) return nomem(p);
    if (collective(p, i, "rlx.all_reduce", t, red, 0)) return nomem(p);
    if (bias < 0) return 0;
    int32_t in2[2] = {red, bias};
    uint32_t pos = p->g->nodes[i].pos;
    int32_t a = rg_add_node(p->g, "rlx.add", in2, 2, &out, 1, NULL, 0, p->g->nodes[i].where);
    if (a < 0) return nomem(p);
    p->g->nodes[a].pos = pos;
    p->g->values[out].producer = a;
    return 0;
}

static int64_t tail_numel(const rlx_shape *s, uint32_t from)
{
    int64_t n = 1;
    for (uint32_t j = from; j < s->ndim; j++) n *= s->dims[j];
    return n;
}

/* a reshape of a split value: the split moves to the output dim whose trailing block
 * matches the input's, and the shape attribute is written out for this rank */
static int fix_reshape(part *p, uint32_t i)
{
    rg_node *n = &p->g->nodes[i];
    int32_t x = n->in[0], y = n->out[0];
    const rlx_shape *was = &p->orig[x], *now = &p->g->values[x].shape;
    if (rg_shape_eq(was, now)) return 0;
    int a = -1;
    for (uint32_t j = 0; j < now->ndim; j++)
        if (now->dims[j] != was->dims[j]) a = a < 0 ? (int)j : -2;
    rlx_shape o = p->orig[y];
    int b = -1;
    int64_t block = a >= 0 ? tail_numel(was, (uint32_t)a) : -1;
    for (int j = (int)o.ndim - 1; a >= 0 && j >= 0 && b < 0; j--)
        if (tail_numel(&o, (uint32_t)j) == block) b = j;
    if (b < 0 || (o.dims[b] * now->dims[a]) % was->dims[a])
        return fail(p, i, "rlx.reshape cannot carry the split of its input to its output");
    o.dims[b] = o.dims[b] * now->dims[a] / was->dims[a];
    rlx_attr at = RLX_ATTR_V("shape", o.dims, o.ndim);
    return rg_set_attr(n, &at) ? nomem(p) : 0;
}

/* a KV cache written with the rank's heads holds only those */
static void fix_cache(part *p, uint32_t i)
{
    rg_node *n = &p->g->nodes[i];
    rg_value *st = &p->g->values[n->in[0]];
    const rlx_shape *nw = &p->g->values[n->in[1]].shape;
    if (st->kind != RG_STATE || st->shape.ndim != nw->ndim) return;
    for (uint32_t j = 1; j < nw->ndim; j++) st->shape.dims[j] = nw->dims[j];
}

static int reinfer(part *p, uint32_t i)
{
    char err[480];
    int rc = rg_op_reinfer(p->g, i, err, sizeof err);
    return rc ? fail(p, i, "%s%s", err, rc == -1 ? " (the tp hints of this model do not pair up)" : "") : 0;
}

int rg_pass_partition(rg_graph *g, int rank, int ranks, int64_t group, rlx_diag *d)
{
    if (ranks <= 1) return 0;
    if (rank < 0 || rank >= ranks) return rlx_diag_set(d, RLX_ERR_INVALID, "partition: rank %d of %d", rank, ranks);
    part p = {g, rank, ranks, group, malloc((g->n_values + 1) * sizeof(rlx_shape)), d};
    if (!p.orig) return nomem(&p);
    for (uint32_t v = 0; v < g->n_values; v++) p.orig[v] = g->values[v].shape;
    int rc = 0;
    /* built nodes are in emission order, which is topological; appended ones need no pass */
    uint32_t nn = g->n_nodes;
    for (uint32_t i = 0; i < nn && !rc; i++) {
        if (g->nodes[i].dead) continue;
        const char *op = g->nodes[i].op;
        const rlx_attr *tp = rg_attr(&g->nodes[i], "tp");
        int kind = !strcmp(op, "rlx.matmul") && tp && tp->kind == RLX_ATTR_STR ? rg_tp_kind(tp->s) : -1;
        if (kind == RG_TP_ROW) rc = split_rows_in(&p, i);
        else if (kind >= 0) rc = split_cols_out(&p, i, kind);
        else if (!strcmp(op, "rlx.reshape")) rc = fix_reshape(&p, i);
        else if (!strcmp(op, "rlx.cache_write")) fix_cache(&p, i);
        if (!rc) rc = reinfer(&p, i);
    }
    for (uint32_t k = 0; k < g->n_outputs && !rc; k++) {
        int32_t v = g->outputs[k].value;
        char a[96], b[96];
        if (!rg_shape_eq(&g->values[v].shape, &p.orig[v]))
            rc = rlx_diag_set(d, RLX_ERR_INVALID,
                              "partition over %d ranks: output %s would be %s, not %s (a column-parallel "
                              "projection without a row-parallel one after it)", ranks, g->outputs[k].name,
                              rlx_shape_str(&g->values[v].shape, a, sizeof a), rlx_shape_str(&p.orig[v], b, sizeof b));
    }
    free(p.orig);
    return rc;
}
