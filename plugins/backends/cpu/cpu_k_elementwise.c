/* Elementwise ops: add/sub/mul with suffix broadcasting, the unary maps (scale,
 * add_scalar, activations, softcap) and the gated composites (swiglu, geglu_tanh).
 * add/sub/mul of two same-shape operands and the gated ops also take f16/bf16 operands:
 * widened a piece at a time, computed in f32 as the f32 kernel does and rounded once on the
 * store (what casts around them would give). */
#include "cpu_backend.h"
#include <math.h>
#include <string.h>

enum { U_ADD_I32 = -1, U_SCALE, U_ADD_SCALAR, U_SILU, U_GELU, U_GELU_TANH, U_TANH, U_SOFTCAP, U_RELU, U_SIN, U_COS };

#define FLAT_CHUNK(n) cpu_chunk((n), 16384, 64, 64)
#define PIECE 1024 /* elements widened at a time (16-bit operands): three rows of scratch */

/* two float operands (named an, bn in errors) and the output: their dtypes in nd->dt[0],
 * [1], [3], and the scratch 16-bit ones are widened into */
static int prep_half3(const cpu_compile_ctx *c, cpu_node *nd, const rlx_value_desc *a, const char *an,
                      const rlx_value_desc *b, const char *bn, const rlx_value_desc *o)
{
    if (cpu_need_float(c, a, an) || cpu_need_float(c, b, bn) || cpu_need_float(c, o, "the output"))
        return RLX_ERR_INVALID;
    nd->dt[0] = a->dtype;
    nd->dt[1] = b->dtype;
    nd->dt[3] = o->dtype;
    nd->scratch_floats = 3 * PIECE;
    return 0;
}

static int any_half(const cpu_node *nd)
{
    return nd->dt[0] != RLX_F32 || nd->dt[1] != RLX_F32 || nd->dt[3] != RLX_F32;
}

/* ---------------------------------------------------------------- binary */

int cpu_prep_binary(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 2, 2, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *a = cpu_val(c, 0), *b = cpu_val(c, 1), *o = cpu_out(c, 0);
    if (prep_half3(c, nd, a, "a", b, "b", o)) return RLX_ERR_INVALID;
    if (any_half(nd) && cpu_numel(&b->shape) != cpu_numel(&a->shape))
        return cpu_bad(c, "16-bit operands need b of a's shape (b broadcasts in f32 only)");
    const char *op = c->node->op;
    nd->bin_op = strcmp(op, "rlx.add") == 0 ? CPU_BIN_ADD : strcmp(op, "rlx.sub") == 0 ? CPU_BIN_SUB
                                                                                     : CPU_BIN_MUL;
    /* b (leading 1s dropped) must be a suffix of a */
    uint32_t bs = 0;
    while (bs + 1 < b->shape.ndim && b->shape.dims[bs] == 1) bs++;
    uint32_t bn = b->shape.ndim - bs;
    if (cpu_numel(&b->shape) == 1) bn = 0; /* a scalar broadcasts everywhere */
    if (bn > a->shape.ndim) return cpu_bad(c, "b has more dims than a");
    for (uint32_t i = 0; i < bn; i++)
        if (b->shape.dims[bs + i] != a->shape.dims[a->shape.ndim - bn + i])
            return cpu_bad(c, "b's shape is not a suffix of a's (dim %u: %lld vs %lld)", i,
                           (long long)b->shape.dims[bs + i],
                           (long long)a->shape.dims[a->shape.ndim - bn + i]);
    nd->cols = cpu_numel(&a->shape);
    nd->nb = cpu_numel(&b->shape);
    if (cpu_numel(&o->shape) != nd->cols) return cpu_bad(c, "output must have a's %lld elements",
                                                         (long long)nd->cols);
    return 0;
}

typedef struct ew_job {
    const cpu_run *r;
    const float *a, *b;
    float *o;
    int64_t n, chunk;
} ew_job;

typedef void (*piece_fn)(const cpu_run *r, float *o, const float *a, const float *b, int64_t n);

/* elements [lo, hi) of two same-shape operands: in place when all three are f32, else in
 * pieces widened into the worker's scratch */
static void flat_range(const ew_job *j, int64_t lo, int64_t hi, int worker, piece_fn fn)
{
    const cpu_run *r = j->r;
    const cpu_node *nd = r->nd;
    if (!any_half(nd)) {
        fn(r, j->o + lo, j->a + lo, j->b + lo, hi - lo);
        return;
    }
    const cpu_isa *isa = r->be->isa;
    const char *a = r->vp[nd->in[0]], *b = r->vp[nd->in[1]];
    char *o = r->vp[nd->out[0]];
    size_t ea = cpu_dtype_size(nd->dt[0]), eb = cpu_dtype_size(nd->dt[1]), eo = cpu_dtype_size(nd->dt[3]);
    float *ab = r->scratch + (size_t)worker * r->scratch_stride, *bb = ab + PIECE, *ob = bb + PIECE;
    for (int64_t p = lo; p < hi; p += PIECE) {
        int64_t n = hi - p < PIECE ? hi - p : PIECE;
        float *op = cpu_row_at(nd->dt[3], o + p * eo, 0, n, ob);
        fn(r, op, cpu_row_in(isa, nd->dt[0], a + p * ea, 0, n, ab), cpu_row_in(isa, nd->dt[1], b + p * eb, 0, n, bb), n);
        cpu_row_out(isa, nd->dt[3], o + p * eo, 0, n, op);
    }
}

static void binary_piece(const cpu_run *r, float *o, const float *a, const float *b, int64_t n)
{
    r->be->isa->binary(r->nd->bin_op, o, a, b, n);
}

static void binary_same_task(void *arg, int64_t t, int worker)
{
    ew_job *j = arg;
    int64_t lo = t * j->chunk, hi = lo + j->chunk < j->n ? lo + j->chunk : j->n;
    flat_range(j, lo, hi, worker, binary_piece);
}

static void binary_rows_task(void *arg, int64_t t, int worker)
{
    ew_job *j = arg;
    int64_t nb = j->r->nd->nb, rows = j->n / nb;
    int64_t lo = t * j->chunk, hi = lo + j->chunk < rows ? lo + j->chunk : rows;
    int op = j->r->nd->bin_op;
    for (int64_t row = lo; row < hi; row++) {
        const float *a = j->a + row * nb;
        float *o = j->o + row * nb;
        if (nb == 1) {
            float b = j->b[0];
            o[0] = op == CPU_BIN_ADD ? a[0] + b : op == CPU_BIN_SUB ? a[0] - b : a[0] * b;
        } else {
            j->r->be->isa->binary(op, o, a, j->b, nb);
        }
    }
}

int cpu_run_binary(const cpu_run *r)
{
    const cpu_node *nd = r->nd;
    ew_job j = {r, CPU_F(r, 0), CPU_F(r, 1), CPU_O(r, 0), nd->cols, 0};
    if (j.n == 0) return 0;
    if (nd->nb == nd->cols) {
        j.chunk = FLAT_CHUNK(j.n);
        cpu_parallel(r, (j.n + j.chunk - 1) / j.chunk, binary_same_task, &j);
    } else {
        int64_t rows = j.n / nd->nb;
        j.chunk = cpu_chunk(rows, 16384 / nd->nb + 1, 64, 1);
        cpu_parallel(r, (rows + j.chunk - 1) / j.chunk, binary_rows_task, &j);
    }
    return 0;
}

/* ---------------------------------------------------------------- unary */

int cpu_prep_unary(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 1, 1, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *x = cpu_val(c, 0), *o = cpu_out(c, 0);
    nd->cols = cpu_numel(&x->shape);
    if (x->dtype == RLX_I32 && o->dtype == RLX_I32 && !strcmp(c->node->op, "rlx.add_scalar")) { /* positions */
        double v = 0;
        if (!cpu_attr_find(c, "value")) return cpu_bad(c, "attribute value is missing");
        if (cpu_attr_float(c, "value", 0.0, &v)) return RLX_ERR_INVALID;
        if (cpu_numel(&o->shape) != nd->cols) return cpu_bad(c, "output must have x's %lld elements", (long long)nd->cols);
        nd->flag = U_ADD_I32;
        nd->start = (int64_t)v;
        return 0;
    }
    if (cpu_need_f32(c, x, "x") || cpu_need_f32(c, o, "the output")) return RLX_ERR_INVALID;
    if (cpu_numel(&o->shape) != nd->cols) return cpu_bad(c, "output must have x's %lld elements",
                                                         (long long)nd->cols);
    const char *op = c->node->op + 4; /* after "rlx." */
    double v = 0;
    if (strcmp(op, "scale") == 0) {
        nd->flag = U_SCALE;
        const rlx_attr *a = cpu_attr_find(c, "scale");
        if (!a) return cpu_bad(c, "attribute scale is missing");
        if (cpu_attr_float(c, "scale", 1.0, &v)) return RLX_ERR_INVALID;
    } else if (strcmp(op, "add_scalar") == 0) {
        nd->flag = U_ADD_SCALAR;
        if (!cpu_attr_find(c, "value")) return cpu_bad(c, "attribute value is missing");
        if (cpu_attr_float(c, "value", 0.0, &v)) return RLX_ERR_INVALID;
    } else if (strcmp(op, "softcap") == 0) {
        nd->flag = U_SOFTCAP;
        if (!cpu_attr_find(c, "cap")) return cpu_bad(c, "attribute cap is missing");
        if (cpu_attr_float(c, "cap", 0.0, &v)) return RLX_ERR_INVALID;
        if (!(v > 0)) return cpu_bad(c, "cap must be > 0 (got %g)", v);
    } else if (strcmp(op, "silu") == 0) {
        nd->flag = U_SILU;
    } else if (strcmp(op, "gelu") == 0) {
        nd->flag = U_GELU;
    } else if (strcmp(op, "gelu_tanh") == 0) {
        nd->flag = U_GELU_TANH;
    } else if (strcmp(op, "relu") == 0) {
        nd->flag = U_RELU;
    } else if (strcmp(op, "sin") == 0) {
        nd->flag = U_SIN;
    } else if (strcmp(op, "cos") == 0) {
        nd->flag = U_COS;
    } else {
        nd->flag = U_TANH;
    }
    nd->fa = (float)v;
    return 0;
}

/* 0.5·x·(1+tanh(u)) written as x·σ(2u): no cancellation for very negative x */
static inline float gelu_tanh1(float x)
{
    float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
}

static void unary_task(void *arg, int64_t t, int worker)
{
    ew_job *j = arg;
    const cpu_node *nd = j->r->nd;
    const cpu_isa *isa = j->r->be->isa;
    int64_t lo = t * j->chunk, hi = lo + j->chunk < j->n ? lo + j->chunk : j->n;
    const float *x = j->a + lo;
    float *o = j->o + lo;
    int64_t n = hi - lo;
    float cap = nd->fa;
    switch (nd->flag) {
    case U_SCALE: isa->affine(o, x, nd->fa, 0.0f, n); break;
    case U_ADD_SCALAR:
        for (int64_t i = 0; i < n; i++) o[i] = x[i] + nd->fa;
        break;
    case U_SILU: isa->silu(o, x, n); break;
    case U_GELU:
        /* 1+erf(z) as erfc(-z): exact down to the far negative tail */
        for (int64_t i = 0; i < n; i++) o[i] = 0.5f * x[i] * erfcf(-x[i] * 0.70710678118654752f);
        break;
    case U_GELU_TANH:
        for (int64_t i = 0; i < n; i++) o[i] = gelu_tanh1(x[i]);
        break;
    case U_TANH:
        for (int64_t i = 0; i < n; i++) o[i] = tanhf(x[i]);
        break;
    case U_RELU:
        for (int64_t i = 0; i < n; i++) o[i] = x[i] > 0.0f ? x[i] : 0.0f;
        break;
    case U_SIN:
        for (int64_t i = 0; i < n; i++) o[i] = sinf(x[i]);
        break;
    case U_COS:
        for (int64_t i = 0; i < n; i++) o[i] = cosf(x[i]);
        break;
    default:
        for (int64_t i = 0; i < n; i++) o[i] = cap * tanhf(x[i] / cap);
        break;
    }
}

int cpu_run_unary(const cpu_run *r)
{
    if (r->nd->flag == U_ADD_I32) { /* a few positions: no tasks */
        const int32_t *x = r->vp[r->nd->in[0]];
        int32_t *o = r->vp[r->nd->out[0]];
        for (int64_t i = 0; i < r->nd->cols; i++) o[i] = (int32_t)((int64_t)x[i] + r->nd->start);
        return 0;
    }
    ew_job j = {r, CPU_F(r, 0), NULL, CPU_O(r, 0), r->nd->cols, 0};
    if (j.n == 0) return 0;
    j.chunk = FLAT_CHUNK(j.n);
    cpu_parallel(r, (j.n + j.chunk - 1) / j.chunk, unary_task, &j);
    return 0;
}

/* ---------------------------------------------------------------- gated composites */

int cpu_prep_gated(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 2, 2, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *g = cpu_val(c, 0), *u = cpu_val(c, 1), *o = cpu_out(c, 0);
    if (prep_half3(c, nd, g, "gate", u, "up", o)) return RLX_ERR_INVALID;
    nd->cols = cpu_numel(&g->shape);
    if (cpu_numel(&u->shape) != nd->cols || cpu_numel(&o->shape) != nd->cols)
        return cpu_bad(c, "gate, up and the output must have the same %lld elements",
                       (long long)nd->cols);
    nd->flag = strcmp(c->node->op, "rlx.swiglu") == 0 ? U_SILU : U_GELU_TANH;
    return 0;
}

static void gated_piece(const cpu_run *r, float *o, const float *g, const float *u, int64_t n)
{
    if (r->nd->flag == U_SILU) {
        r->be->isa->swiglu(o, g, u, n);
        return;
    }
    for (int64_t i = 0; i < n; i++) o[i] = gelu_tanh1(g[i]) * u[i];
}

static void gated_task(void *arg, int64_t t, int worker)
{
    ew_job *j = arg;
    int64_t lo = t * j->chunk, hi = lo + j->chunk < j->n ? lo + j->chunk : j->n;
    flat_range(j, lo, hi, worker, gated_piece);
}

int cpu_run_gated(const cpu_run *r)
{
    ew_job j = {r, CPU_F(r, 0), CPU_F(r, 1), CPU_O(r, 0), r->nd->cols, 0};
    if (j.n == 0) return 0;
    j.chunk = FLAT_CHUNK(j.n);
    cpu_parallel(r, (j.n + j.chunk - 1) / j.chunk, gated_task, &j);
    return 0;
}
