/* Shape and dtype inference for every op of docs/OPS.md. Each function checks what
 * the op's contract says and, on a mismatch, names the operands and their shapes. */
#include "ir/ops.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define S(i) (&g->values[n->in[i]].shape)
#define DT(i) (g->values[n->in[i]].dtype)

typedef struct { char b[4][96]; } shape_bufs;

static const char *ss(const rlx_shape *s, char *buf) { return rlx_shape_str(s, buf, 96); }

static int bad(char *err, size_t len, const char *fmt, ...) RLX_PRINTF(3, 4);
static int bad(char *err, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return -1;
}

static int64_t last(const rlx_shape *s) { return s->ndim ? s->dims[s->ndim - 1] : 1; }

static int want_float(const rg_graph *g, const rg_node *n, uint32_t i, const char *what, char *err,
                      size_t len)
{
    int dt = DT(i);
    if (dt == RLX_F32 || dt == RLX_F16 || dt == RLX_BF16) return 0;
    return bad(err, len, "%s must be a float tensor, got %s", what, rlx_dtype_name(dt));
}

static int want_i32(const rg_graph *g, const rg_node *n, uint32_t i, const char *what, char *err,
                    size_t len)
{
    if (DT(i) == RLX_I32) return 0;
    return bad(err, len, "%s must be I32, got %s", what, rlx_dtype_name(DT(i)));
}

static int need_attr(const rg_node *n, const char *name, char *err, size_t len)
{
    if (rg_attr(n, name)) return 0;
    return bad(err, len, "missing attribute %s", name);
}

/* one output, same shape and dtype as input 0 */
static int inf_same(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                    size_t len)
{
    o[0] = *S(0);
    dt[0] = DT(0);
    return want_float(g, n, 0, "x", err, len);
}

static int inf_unary_attr(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                          size_t len, const char *attr)
{
    if (need_attr(n, attr, err, len)) return -1;
    return inf_same(g, n, o, dt, err, len);
}

static int inf_scale(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *e, size_t l)
{ return inf_unary_attr(g, n, o, dt, e, l, "scale"); }
/* float x + value; i32 x (a position) + an integer value */
static int inf_add_scalar(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *e,
                          size_t l)
{
    if (DT(0) != RLX_I32) return inf_unary_attr(g, n, o, dt, e, l, "value");
    if (need_attr(n, "value", e, l)) return -1;
    double v = rg_attr_float(n, "value", 0);
    if (v != floor(v) || fabs(v) > 2147483647.0) return bad(e, l, "value %g: an i32 x takes an integer value", v);
    o[0] = *S(0);
    dt[0] = RLX_I32;
    return 0;
}
static int inf_softcap(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *e, size_t l)
{ return inf_unary_attr(g, n, o, dt, e, l, "cap"); }

/* x [..., V] float -> [...] i32: the index of each row's largest value */
static int inf_argmax(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err, size_t len)
{
    shape_bufs B;
    if (S(0)->ndim < 2 || S(0)->dims[S(0)->ndim - 1] < 1)
        return bad(err, len, "x %s must be [..., V] with V >= 1 and at least two dims", ss(S(0), B.b[0]));
    o[0] = *S(0);
    o[0].ndim--;
    dt[0] = RLX_I32;
    return want_float(g, n, 0, "x", err, len);
}

static int inf_copy(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *e, size_t l)
{
    o[0] = *S(0);
    dt[0] = DT(0);
    return 0;
}

/* collectives over the ranks of a tensor-parallel group (docs/multi-gpu.md) */
static int inf_all_reduce(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err, size_t len)
{
    if (rg_attr_int(n, "ranks", 1) < 1) return bad(err, len, "attribute ranks must be >= 1");
    return inf_same(g, n, o, dt, err, len);
}

static int inf_all_gather(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err, size_t len)
{
    int64_t r = rg_attr_int(n, "ranks", 1), ax = rg_attr_int(n, "axis", -1);
    if (r < 1) return bad(err, len, "attribute ranks must be >= 1");
    if (inf_same(g, n, o, dt, err, len)) return -1;
    if (ax < 0) ax += o[0].ndim;
    if (ax < 0 || ax >= (int64_t)o[0].ndim) return bad(err, len, "axis %lld is outside x's %u dims",
                                                     (long long)rg_attr_int(n, "axis", -1), o[0].ndim);
    o[0].dims[ax] *= r;
    return 0;
}

static int is_suffix(const rlx_shape *a, const rlx_shape *b)
{
    if (b->ndim > a->ndim) return 0;
    for (uint32_t i = 0; i < b->ndim; i++)
        if (b->dims[b->ndim - 1 - i] != a->dims[a->ndim - 1 - i]) return 0;
    return 1;
}

static int inf_binary(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                      size_t len)
{
    shape_bufs B;
    if (!is_suffix(S(0), S(1)))
        return bad(err, len, "a %s and b %s: b must equal a or a suffix of it", ss(S(0), B.b[0]),
                   ss(S(1), B.b[1]));
    if (DT(0) != DT(1))
        return bad(err, len, "a is %s but b is %s", rlx_dtype_name(DT(0)), rlx_dtype_name(DT(1)));
    o[0] = *S(0);
    dt[0] = DT(0);
    return want_float(g, n, 0, "a", err, len);
}

static int inf_embedding(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                         size_t len)
{
    shape_bufs B;
    if (S(0)->ndim != 2)
        return bad(err, len, "table %s must be [V, H]", ss(S(0), B.b[0]));
    if (want_i32(g, n, 1, "ids", err, len)) return -1;
    if (S(1)->ndim + 1 > RLX_MAX_DIMS) return bad(err, len, "ids %s has too many dims", ss(S(1), B.b[0]));
    o[0] = *S(1);
    o[0].dims[o[0].ndim++] = S(0)->dims[1];
    dt[0] = DT(0);
    return 0;
}

static int inf_matmul(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                      size_t len)
{
    shape_bufs B;
    if (S(0)->ndim < 1 || S(1)->ndim != 2 || last(S(0)) != S(1)->dims[1])
        return bad(err, len, "x %s and w %s: w must be [N, K] with K = x's last dim",
                   ss(S(0), B.b[0]), ss(S(1), B.b[1]));
    if (n->n_in == 3 && (S(2)->ndim != 1 || S(2)->dims[0] != S(1)->dims[0]))
        return bad(err, len, "w %s and bias %s: bias must be [N]", ss(S(1), B.b[0]),
                   ss(S(2), B.b[1]));
    const rlx_attr *tp = rg_attr(n, "tp");
    if (tp && (tp->kind != RLX_ATTR_STR || rg_tp_kind(tp->s) < 0))
        return bad(err, len, "attribute tp must be \"col\", \"col_rep\", \"row\" or \"vocab\"");
    if (tp && rg_attr_int(n, "tp_unit", 1) < 1) return bad(err, len, "attribute tp_unit must be >= 1");
    o[0] = *S(0);
    o[0].dims[o[0].ndim - 1] = S(1)->dims[0];
    dt[0] = DT(0);
    return want_float(g, n, 0, "x", err, len) || want_float(g, n, 1, "w", err, len);
}

static int inf_matmul_nn(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                         size_t len)
{
    shape_bufs B;
    if (S(0)->ndim < 2 || S(1)->ndim != 2 || last(S(0)) != S(1)->dims[0])
        return bad(err, len, "a %s and b %s: b must be [K, N] with K = a's last dim",
                   ss(S(0), B.b[0]), ss(S(1), B.b[1]));
    o[0] = *S(0);
    o[0].dims[o[0].ndim - 1] = S(1)->dims[1];
    dt[0] = DT(0);
    return want_float(g, n, 0, "a", err, len);
}

/* a [B,M,K] times b [B,N,K]ᵀ (trans_b 1) or b [B,K,N] (trans_b 0), per batch */
static int inf_bmm(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err, size_t len)
{
    shape_bufs B;
    int tb = rg_attr_int(n, "trans_b", 1) != 0;
    const rlx_shape *a = S(0), *b = S(1);
    if (a->ndim != 3 || b->ndim != 3 || a->dims[0] != b->dims[0] || a->dims[2] != b->dims[tb ? 2 : 1])
        return bad(err, len, "a %s and b %s: expected a [B,M,K] and b %s", ss(a, B.b[0]), ss(b, B.b[1]),
                   tb ? "[B,N,K] (trans_b 1)" : "[B,K,N] (trans_b 0)");
    o[0] = *a;
    o[0].dims[2] = b->dims[tb ? 1 : 2];
    dt[0] = DT(0);
    return want_float(g, n, 0, "a", err, len) || want_float(g, n, 1, "b", err, len);
}

static int check_norm_weight(const rg_graph *g, const rg_node *n, uint32_t xi, uint32_t wi,
                             const char *wname, char *err, size_t len)
{
    shape_bufs B;
    if (S(wi)->ndim != 1 || S(wi)->dims[0] != last(S(xi)))
        return bad(err, len, "x %s and %s %s: %s must be [H] with H = x's last dim",
                   ss(S(xi), B.b[0]), wname, ss(S(wi), B.b[1]), wname);
    return 0;
}

static int inf_rms_norm(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                        size_t len)
{
    if (check_norm_weight(g, n, 0, 1, "w", err, len)) return -1;
    return inf_same(g, n, o, dt, err, len);
}

static int inf_layer_norm(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                          size_t len)
{
    if (check_norm_weight(g, n, 0, 1, "w", err, len) || check_norm_weight(g, n, 0, 2, "b", err, len))
        return -1;
    return inf_same(g, n, o, dt, err, len);
}

static int inf_rope(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                    size_t len)
{
    shape_bufs B;
    const rlx_shape *x = S(0), *p = S(1), *f = S(2);
    if (x->ndim != 3) return bad(err, len, "x %s must be [T, heads, head_dim]", ss(x, B.b[0]));
    if (p->ndim != 1 || p->dims[0] != x->dims[0])
        return bad(err, len, "x %s and positions %s: positions must be [T]", ss(x, B.b[0]),
                   ss(p, B.b[1]));
    if (want_i32(g, n, 1, "positions", err, len)) return -1;
    int64_t r = rg_attr_int(n, "rot_dim", 0);
    if (r == 0) r = x->dims[2];
    if (r < 0 || r > x->dims[2] || r % 2)
        return bad(err, len, "rot_dim %lld does not fit x %s", (long long)r, ss(x, B.b[0]));
    if (f->ndim != 1 || f->dims[0] != r / 2 || DT(2) != RLX_F32)
        return bad(err, len, "x %s and inv_freq %s: inv_freq must be F32 [%lld]", ss(x, B.b[0]),
                   ss(f, B.b[1]), (long long)(r / 2));
    return inf_same(g, n, o, dt, err, len);
}

static int inf_attention(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                         size_t len)
{
    shape_bufs B;
    const rlx_shape *q = S(0), *k = S(1), *v = S(2);
    if (q->ndim != 3 || k->ndim != 3 || v->ndim != 3 || k->dims[2] != q->dims[2] ||
        v->dims[0] != k->dims[0] || v->dims[1] != k->dims[1] || k->dims[1] == 0 ||
        q->dims[1] % k->dims[1])
        return bad(err, len,
                   "q %s, k %s, v %s: need q [T, nh, d], k and v [S, nkv, d] with nh a multiple of nkv",
                   ss(q, B.b[0]), ss(k, B.b[1]), ss(v, B.b[2]));
    /* the fourth input is pos (I32) or, without pos, the mask (float) */
    uint32_t has_pos = n->n_in == 5 || (n->n_in == 4 && (DT(3) == RLX_I32 || DT(3) == RLX_I64));
    if (has_pos) {
        if (S(3)->ndim != 1 || S(3)->dims[0] != 1)
            return bad(err, len, "pos %s must be [1]", ss(S(3), B.b[0]));
        if (want_i32(g, n, 3, "pos", err, len)) return -1;
    }
    if (n->n_in == 4 + has_pos) {
        const rlx_shape *m = S(3 + has_pos);
        if (m->ndim != 2 || m->dims[0] != q->dims[0] || m->dims[1] != k->dims[0])
            return bad(err, len, "q %s, k %s and mask %s: mask must be [T, S]", ss(q, B.b[0]),
                       ss(k, B.b[1]), ss(m, B.b[2]));
        if (want_float(g, n, 3 + has_pos, "mask", err, len)) return -1;
    }
    o[0] = *q;
    o[0].dims[2] = v->dims[2];
    dt[0] = DT(0);
    return want_float(g, n, 0, "q", err, len);
}

static int inf_cache_write(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                           size_t len)
{
    shape_bufs B;
    const rlx_shape *c = S(0), *x = S(1);
    if (c->ndim != 3 || x->ndim != 3 || c->dims[1] != x->dims[1] || c->dims[2] != x->dims[2] ||
        x->dims[0] > c->dims[0])
        return bad(err, len, "cache %s and new %s: need cache [S, nkv, d], new [T, nkv, d], T <= S",
                   ss(c, B.b[0]), ss(x, B.b[1]));
    if (DT(0) != DT(1))
        return bad(err, len, "cache is %s but new is %s", rlx_dtype_name(DT(0)), rlx_dtype_name(DT(1)));
    if (S(2)->ndim != 1 || S(2)->dims[0] != 1) return bad(err, len, "pos %s must be [1]", ss(S(2), B.b[0]));
    if (want_i32(g, n, 2, "pos", err, len)) return -1;
    o[0] = *c;
    dt[0] = DT(0);
    return 0;
}

/* batched decode (build/batch.c): row b of T sits in cache slot slots[b] at pos[b] */
static int rows_pos_slots(const rg_graph *g, const rg_node *n, uint32_t ip, int64_t T, char *err, size_t len)
{
    shape_bufs B;
    for (uint32_t k = ip; k < ip + 2; k++) {
        const char *what = k == ip ? "pos" : "slots";
        if (S(k)->ndim != 1 || S(k)->dims[0] != T)
            return bad(err, len, "%s %s must be [%lld], one per row", what, ss(S(k), B.b[0]), (long long)T);
        if (want_i32(g, n, k, what, err, len)) return -1;
    }
    return 0;
}

static int inf_cache_write_rows(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                                size_t len)
{
    shape_bufs B;
    const rlx_shape *c = S(0), *x = S(1);
    if (c->ndim != 4 || x->ndim != 3 || c->dims[2] != x->dims[1] || c->dims[3] != x->dims[2])
        return bad(err, len, "cache %s and new %s: need cache [slots, S, nkv, d], new [T, nkv, d]",
                   ss(c, B.b[0]), ss(x, B.b[1]));
    if (DT(0) != DT(1))
        return bad(err, len, "cache is %s but new is %s", rlx_dtype_name(DT(0)), rlx_dtype_name(DT(1)));
    if (rows_pos_slots(g, n, 2, x->dims[0], err, len)) return -1;
    o[0] = *c;
    dt[0] = DT(0);
    return 0;
}

static int inf_attention_rows(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                              size_t len)
{
    shape_bufs B;
    const rlx_shape *q = S(0), *k = S(1), *v = S(2);
    if (q->ndim != 3 || k->ndim != 4 || v->ndim != 4 || k->dims[3] != q->dims[2] || v->dims[0] != k->dims[0] ||
        v->dims[1] != k->dims[1] || v->dims[2] != k->dims[2] || k->dims[2] == 0 || q->dims[1] % k->dims[2])
        return bad(err, len,
                   "q %s, k %s, v %s: need q [T, nh, d], k and v [slots, S, nkv, d] with nh a multiple of nkv",
                   ss(q, B.b[0]), ss(k, B.b[1]), ss(v, B.b[2]));
    if (rows_pos_slots(g, n, 3, q->dims[0], err, len)) return -1;
    o[0] = *q;
    o[0].dims[2] = v->dims[3];
    dt[0] = DT(0);
    return want_float(g, n, 0, "q", err, len);
}

static int inf_reshape(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                       size_t len)
{
    shape_bufs B;
    const rlx_attr *a = rg_attr(n, "shape");
    if (!a || a->kind != RLX_ATTR_INTS || a->n_ints == 0 || a->n_ints > RLX_MAX_DIMS)
        return bad(err, len, "attribute shape must be 1 to %d ints", RLX_MAX_DIMS);
    int64_t known = 1, total = rlx_shape_numel(S(0));
    int neg = -1;
    for (uint32_t i = 0; i < a->n_ints; i++) {
        if (a->ints[i] == -1 && neg < 0) neg = (int)i;
        else if (a->ints[i] < 0) return bad(err, len, "shape has a bad dim %lld", (long long)a->ints[i]);
        else known *= a->ints[i];
    }
    o[0] = rg_shape(a->n_ints, a->ints);
    if (neg >= 0) o[0].dims[neg] = known ? total / known : 0;
    if (rlx_shape_numel(&o[0]) != total)
        return bad(err, len, "x %s cannot become %s", ss(S(0), B.b[0]), ss(&o[0], B.b[1]));
    dt[0] = DT(0);
    return 0;
}

static int inf_transpose(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                         size_t len)
{
    shape_bufs B;
    const rlx_attr *a = rg_attr(n, "perm");
    const rlx_shape *x = S(0);
    int seen[RLX_MAX_DIMS] = {0};
    if (!a || a->kind != RLX_ATTR_INTS || a->n_ints != x->ndim)
        return bad(err, len, "attribute perm must have one entry per dim of x %s", ss(x, B.b[0]));
    o[0] = *x;
    for (uint32_t i = 0; i < a->n_ints; i++) {
        int64_t p = a->ints[i];
        if (p < 0 || p >= x->ndim || seen[p]++)
            return bad(err, len, "perm is not a permutation of the %u dims of x %s", x->ndim, ss(x, B.b[0]));
        o[0].dims[i] = x->dims[p];
    }
    dt[0] = DT(0);
    return 0;
}

static int axis_of(const rg_node *n, const rlx_shape *x, int64_t *axis)
{
    int64_t a = rg_attr_int(n, "axis", 0);
    if (a < 0) a += x->ndim;
    *axis = a;
    return a >= 0 && a < x->ndim ? 0 : -1;
}

static int inf_concat(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                      size_t len)
{
    shape_bufs B;
    int64_t ax;
    if (need_attr(n, "axis", err, len)) return -1;
    int ok = axis_of(n, S(0), &ax) == 0 && S(0)->ndim == S(1)->ndim && DT(0) == DT(1);
    for (uint32_t i = 0; ok && i < S(0)->ndim; i++)
        if (i != ax && S(0)->dims[i] != S(1)->dims[i]) ok = 0;
    if (!ok)
        return bad(err, len, "a %s and b %s differ outside axis %lld", ss(S(0), B.b[0]),
                   ss(S(1), B.b[1]), (long long)rg_attr_int(n, "axis", 0));
    o[0] = *S(0);
    o[0].dims[ax] += S(1)->dims[ax];
    dt[0] = DT(0);
    return 0;
}

static int inf_slice(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                     size_t len)
{
    shape_bufs B;
    int64_t ax;
    if (need_attr(n, "axis", err, len) || need_attr(n, "start", err, len) || need_attr(n, "end", err, len))
        return -1;
    int64_t st = rg_attr_int(n, "start", 0), en = rg_attr_int(n, "end", 0);
    if (axis_of(n, S(0), &ax) || st < 0 || en <= st || en > S(0)->dims[ax])
        return bad(err, len, "range [%lld, %lld) on axis %lld does not fit x %s", (long long)st,
                   (long long)en, (long long)rg_attr_int(n, "axis", 0), ss(S(0), B.b[0]));
    o[0] = *S(0);
    o[0].dims[ax] = en - st;
    dt[0] = DT(0);
    return 0;
}

static int inf_last_row(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                        size_t len)
{
    shape_bufs B;
    if (S(0)->ndim != 2 || S(0)->dims[0] < 1) return bad(err, len, "x %s must be [T, H]", ss(S(0), B.b[0]));
    if (n->n_in == 2 && (DT(1) != RLX_I32 || rlx_shape_numel(S(1)) != 1))
        return bad(err, len, "row %s must be one i32", ss(S(1), B.b[0]));
    o[0] = *S(0);
    o[0].dims[0] = 1;
    dt[0] = DT(0);
    return 0;
}

static int inf_cast(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                    size_t len)
{
    int64_t d = rg_attr_int(n, "dtype", -1);
    if (d < 0 || d >= RLX_DTYPE_COUNT) return bad(err, len, "attribute dtype must be an rlx_dtype");
    o[0] = *S(0);
    dt[0] = (int)d;
    return 0;
}

static int inf_glu(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                   size_t len)
{
    shape_bufs B;
    if (!rg_shape_eq(S(0), S(1)) || DT(0) != DT(1))
        return bad(err, len, "gate %s and up %s must have the same shape", ss(S(0), B.b[0]),
                   ss(S(1), B.b[1]));
    return inf_same(g, n, o, dt, err, len);
}

static int inf_add_rms_norm(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                            size_t len)
{
    shape_bufs B;
    if (!rg_shape_eq(S(0), S(1)) || DT(0) != DT(1))
        return bad(err, len, "a %s and b %s must have the same shape", ss(S(0), B.b[0]),
                   ss(S(1), B.b[1]));
    if (check_norm_weight(g, n, 0, 2, "w", err, len)) return -1;
    o[1] = o[0] = *S(0);
    dt[1] = dt[0] = DT(0);
    return want_float(g, n, 0, "a", err, len);
}

static int inf_linear_swiglu(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                             size_t len)
{
    shape_bufs B;
    if (S(1)->ndim != 2 || !rg_shape_eq(S(1), S(2)) || last(S(0)) != S(1)->dims[1])
        return bad(err, len, "x %s, w_gate %s and w_up %s: both weights must be [N, K] with K = x's last dim",
                   ss(S(0), B.b[0]), ss(S(1), B.b[1]), ss(S(2), B.b[2]));
    o[0] = *S(0);
    o[0].dims[o[0].ndim - 1] = S(1)->dims[0];
    dt[0] = DT(0);
    return want_float(g, n, 0, "x", err, len);
}

/* an (h, w) pair: INTS of 2, or one INT for both, or def when absent */
static int attr_pair(const rg_node *n, const char *name, int64_t def, int64_t out[2])
{
    const rlx_attr *a = rg_attr(n, name);
    out[0] = out[1] = def;
    if (!a) return 0;
    if (a->kind == RLX_ATTR_INT) out[0] = out[1] = a->i;
    else if (a->kind == RLX_ATTR_INTS && a->n_ints == 2) out[0] = a->ints[0], out[1] = a->ints[1];
    else return -1;
    return 0;
}

static int inf_conv2d(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                      size_t len)
{
    shape_bufs B;
    const rlx_shape *x = S(0), *w = S(1);
    int64_t st[2], pd[2], dl[2], gr = rg_attr_int(n, "groups", 1);
    if (attr_pair(n, "stride", 1, st) || attr_pair(n, "padding", 0, pd) ||
        attr_pair(n, "dilation", 1, dl) || st[0] < 1 || st[1] < 1 || pd[0] < 0 || pd[1] < 0 ||
        dl[0] < 1 || dl[1] < 1 || gr < 1)
        return bad(err, len, "stride, padding, dilation must be (h, w) pairs (>= 1, >= 0, >= 1) "
                             "and groups >= 1");
    if (x->ndim != 3 || w->ndim != 4 || x->dims[0] % gr || w->dims[0] % gr ||
        w->dims[1] * gr != x->dims[0])
        return bad(err, len, "x %s and w %s: need x [C,H,W], w [Co,C/groups,kh,kw] with groups %lld "
                             "dividing C and Co", ss(x, B.b[0]), ss(w, B.b[1]), (long long)gr);
    if (n->n_in == 3 && (S(2)->ndim != 1 || S(2)->dims[0] != w->dims[0]))
        return bad(err, len, "w %s and bias %s: bias must be [Co]", ss(w, B.b[0]), ss(S(2), B.b[1]));
    int64_t ho = (x->dims[1] + 2 * pd[0] - dl[0] * (w->dims[2] - 1) - 1) / st[0] + 1;
    int64_t wo = (x->dims[2] + 2 * pd[1] - dl[1] * (w->dims[3] - 1) - 1) / st[1] + 1;
    if (ho < 1 || wo < 1 || x->dims[1] + 2 * pd[0] < dl[0] * (w->dims[2] - 1) + 1 ||
        x->dims[2] + 2 * pd[1] < dl[1] * (w->dims[3] - 1) + 1)
        return bad(err, len, "the kernel of w %s does not fit x %s (with its padding)",
                   ss(w, B.b[0]), ss(x, B.b[1]));
    int64_t od[3] = {w->dims[0], ho, wo};
    o[0] = rg_shape(3, od);
    dt[0] = DT(0);
    return want_float(g, n, 0, "x", err, len) || want_float(g, n, 1, "w", err, len);
}

static int inf_group_norm(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                          size_t len)
{
    shape_bufs B;
    int64_t gr = rg_attr_int(n, "groups", 0);
    if (need_attr(n, "groups", err, len)) return -1;
    if (S(0)->ndim < 1 || gr < 1 || S(0)->dims[0] % gr)
        return bad(err, len, "x %s must be [C, ...] with groups %lld dividing C", ss(S(0), B.b[0]),
                   (long long)gr);
    for (uint32_t i = 1; i < 3; i++)
        if (S(i)->ndim != 1 || S(i)->dims[0] != S(0)->dims[0])
            return bad(err, len, "x %s and %s %s: must be [C]", ss(S(0), B.b[0]),
                       i == 1 ? "gamma" : "beta", ss(S(i), B.b[1]));
    return inf_same(g, n, o, dt, err, len);
}

static int inf_upsample(const rg_graph *g, const rg_node *n, rlx_shape *o, int *dt, char *err,
                        size_t len)
{
    shape_bufs B;
    int64_t sc = rg_attr_int(n, "scale", 0);
    if (need_attr(n, "scale", err, len)) return -1;
    if (S(0)->ndim != 3 || sc < 1)
        return bad(err, len, "x %s must be [C,H,W] and scale %lld >= 1", ss(S(0), B.b[0]),
                   (long long)sc);
    o[0] = *S(0);
    o[0].dims[1] *= sc;
    o[0].dims[2] *= sc;
    dt[0] = DT(0);
    return want_float(g, n, 0, "x", err, len);
}

static const rg_op_def op_table[] = {
    {"rlx.embedding", 2, 2, 1, 0, inf_embedding, NULL},
    {"rlx.matmul", 2, 3, 1, 0, inf_matmul, NULL},
    {"rlx.matmul_nn", 2, 2, 1, 0, inf_matmul_nn, NULL},
    {"rlx.bmm", 2, 2, 1, 0, inf_bmm, NULL},
    {"rlx.add", 2, 2, 1, 0, inf_binary, NULL},
    {"rlx.sub", 2, 2, 1, 0, inf_binary, NULL},
    {"rlx.mul", 2, 2, 1, 0, inf_binary, NULL},
    {"rlx.scale", 1, 1, 1, 0, inf_scale, NULL},
    {"rlx.add_scalar", 1, 1, 1, 0, inf_add_scalar, NULL},
    {"rlx.silu", 1, 1, 1, 0, inf_same, NULL},
    {"rlx.gelu", 1, 1, 1, 0, inf_same, NULL},
    {"rlx.gelu_tanh", 1, 1, 1, 0, inf_same, NULL},
    {"rlx.tanh", 1, 1, 1, 0, inf_same, NULL},
    {"rlx.relu", 1, 1, 1, 0, inf_same, NULL},
    {"rlx.sin", 1, 1, 1, 0, inf_same, NULL},
    {"rlx.cos", 1, 1, 1, 0, inf_same, NULL},
    {"rlx.softcap", 1, 1, 1, 0, inf_softcap, NULL},
    {"rlx.softmax", 1, 1, 1, 0, inf_same, NULL},
    {"rlx.rms_norm", 2, 2, 1, 0, inf_rms_norm, NULL},
    {"rlx.layer_norm", 3, 3, 1, 0, inf_layer_norm, NULL},
    {"rlx.rope", 3, 3, 1, 0, inf_rope, NULL},
    {"rlx.attention", 3, 5, 1, 0, inf_attention, NULL},
    {"rlx.cache_write", 3, 3, 1, 0, inf_cache_write, NULL},
    {"rlx.attention_rows", 5, 5, 1, 0, inf_attention_rows, NULL},
    {"rlx.cache_write_rows", 4, 4, 1, 0, inf_cache_write_rows, NULL},
    {"rlx.reshape", 1, 1, 1, 0, inf_reshape, NULL},
    {"rlx.transpose", 1, 1, 1, 0, inf_transpose, NULL},
    {"rlx.concat", 2, 2, 1, 0, inf_concat, NULL},
    {"rlx.slice", 1, 1, 1, 0, inf_slice, NULL},
    {"rlx.last_row", 1, 2, 1, 0, inf_last_row, NULL},
    {"rlx.copy", 1, 1, 1, 0, inf_copy, NULL},
    {"rlx.argmax", 1, 1, 1, 0, inf_argmax, NULL},
    {"rlx.cast", 1, 1, 1, 0, inf_cast, NULL},
    {"rlx.conv2d", 2, 3, 1, 0, inf_conv2d, NULL},
    {"rlx.group_norm", 3, 3, 1, 0, inf_group_norm, NULL},
    {"rlx.upsample_nearest2d", 1, 1, 1, 0, inf_upsample, NULL},
    {"rlx.swiglu", 2, 2, 1, 1, inf_glu, rg_decompose_swiglu},
    {"rlx.geglu_tanh", 2, 2, 1, 1, inf_glu, rg_decompose_geglu_tanh},
    {"rlx.add_rms_norm", 3, 3, 2, 1, inf_add_rms_norm, rg_decompose_add_rms_norm},
    {"rlx.linear_swiglu", 3, 3, 1, 1, inf_linear_swiglu, rg_decompose_linear_swiglu},
    {"rlx.all_reduce", 1, 1, 1, 1, inf_all_reduce, rg_decompose_collective},
    {"rlx.all_gather", 1, 1, 1, 1, inf_all_gather, rg_decompose_collective},
};
#define N_OPS (sizeof op_table / sizeof op_table[0])

int rg_tp_kind(const char *s)
{
    static const char *const kinds[] = {"col", "col_rep", "row", "vocab"};
    for (int i = 0; s && i < 4; i++)
        if (!strcmp(s, kinds[i])) return i;
    return -1;
}

const rg_op_def *rg_op_find(const char *name)
{
    if (!name) return NULL;
    for (size_t i = 0; i < N_OPS; i++)
        if (strcmp(op_table[i].name, name) == 0) return &op_table[i];
    return NULL;
}

const char *const *rg_op_names(void)
{
    static const char *names[N_OPS + 1];
    for (size_t i = 0; i < N_OPS; i++) names[i] = op_table[i].name;
    names[N_OPS] = NULL;
    return names;
}

static int set_default_f(rg_node *n, const char *name, double v)
{
    if (rg_attr(n, name)) return 0;
    rlx_attr a = RLX_ATTR_F(name, v);
    return rg_set_attr(n, &a);
}

static int set_default_i(rg_node *n, const char *name, int64_t v)
{
    if (rg_attr(n, name)) return 0;
    rlx_attr a = RLX_ATTR_I(name, v);
    return rg_set_attr(n, &a);
}

int rg_op_reinfer(rg_graph *g, uint32_t node, char *err, size_t len)
{
    rg_node *n = &g->nodes[node];
    const rg_op_def *op = rg_op_find(n->op);
    if (!op) return snprintf(err, len, "unknown op %s", n->op), -2;
    rlx_shape shapes[RG_MAX_OUT];
    int dts[RG_MAX_OUT];
    char why[400];
    if (op->infer(g, n, shapes, dts, why, sizeof why)) return snprintf(err, len, "%s: %s", n->op, why), -1;
    for (uint32_t j = 0; j < n->n_out && j < RG_MAX_OUT; j++) g->values[n->out[j]].shape = shapes[j];
    return 0;
}

int rg_op_normalize(rg_graph *g, uint32_t node)
{
    rg_node *n = &g->nodes[node];
    const char *op = n->op;
    int rc = 0;
    if (!strcmp(op, "rlx.attention") || !strcmp(op, "rlx.attention_rows")) {
        double d = (double)g->values[n->in[0]].shape.dims[2];
        rc |= set_default_f(n, "scale", 1.0 / sqrt(d));
        rc |= set_default_i(n, "causal", 0);
        rc |= set_default_i(n, "window", 0);
        rc |= set_default_f(n, "softcap", 0.0);
    } else if (!strcmp(op, "rlx.rms_norm") || !strcmp(op, "rlx.add_rms_norm")) {
        rc |= set_default_f(n, "eps", 1e-6);
        rc |= set_default_i(n, "add_one", 0);
    } else if (!strcmp(op, "rlx.layer_norm") || !strcmp(op, "rlx.group_norm")) {
        rc |= set_default_f(n, "eps", 1e-5);
    } else if (!strcmp(op, "rlx.bmm")) {
        rc |= set_default_i(n, "trans_b", 1);
    } else if (!strcmp(op, "rlx.rope")) {
        rc |= set_default_i(n, "rot_dim", 0);
    } else if (!strcmp(op, "rlx.concat") || !strcmp(op, "rlx.slice")) {
        int64_t a = rg_attr_int(n, "axis", 0);
        if (a < 0) {
            rlx_attr at = RLX_ATTR_I("axis", a + (int64_t)g->values[n->in[0]].shape.ndim);
            rc |= rg_set_attr(n, &at);
        }
    }
    return rc ? -1 : 0;
}
