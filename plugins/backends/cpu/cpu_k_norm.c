/* Row-wise ops: softmax, argmax, rms_norm, layer_norm and the add_rms_norm composite. One row is
 * always reduced by one thread, so results do not depend on the thread count. rms_norm and
 * add_rms_norm also read and write 16-bit rows: each row is widened to f32, computed as the
 * f32 kernel computes it and rounded once on the store (what casts around it would give). */
#include "cpu_backend.h"
#include <math.h>

/* half: x and the outputs may be f16 or bf16 (dtypes in nd->dt: x 0, outputs 2 and 3) */
static int prep_rows(const cpu_compile_ctx *c, cpu_node *nd, uint32_t n_in, uint32_t n_out, int half)
{
    if (cpu_need(c, n_in, n_in, n_out)) return RLX_ERR_INVALID;
    const rlx_value_desc *x = cpu_val(c, 0);
    if (half ? cpu_need_float(c, x, "x") : cpu_need_f32(c, x, "x")) return RLX_ERR_INVALID;
    if (x->shape.ndim < 1) return cpu_bad(c, "x must have at least one dim");
    nd->dt[0] = x->dtype;
    nd->cols = x->shape.dims[x->shape.ndim - 1];
    nd->rows = nd->cols ? cpu_numel(&x->shape) / nd->cols : 0;
    for (uint32_t i = 0; i < n_out; i++) {
        const rlx_value_desc *o = cpu_out(c, i);
        if (half ? cpu_need_float(c, o, "the output") : cpu_need_f32(c, o, "the output")) return RLX_ERR_INVALID;
        nd->dt[3 - (int)(n_out - 1 - i)] = o->dtype; /* the last output in dt[3] */
        if (cpu_numel(&o->shape) != nd->rows * nd->cols)
            return cpu_bad(c, "output %u must have x's %lld elements", i,
                           (long long)(nd->rows * nd->cols));
    }
    return 0;
}

static int prep_vec(const cpu_compile_ctx *c, cpu_node *nd, uint32_t slot, const char *what)
{
    const rlx_value_desc *w = cpu_val(c, slot);
    if (cpu_need_f32(c, w, what)) return RLX_ERR_INVALID;
    if (cpu_numel(&w->shape) != nd->cols)
        return cpu_bad(c, "%s must have %lld elements (the last dim of x)", what, (long long)nd->cols);
    return 0;
}

static int prep_eps(const cpu_compile_ctx *c, cpu_node *nd, int with_add_one)
{
    double eps;
    if (cpu_attr_float(c, "eps", 1e-6, &eps)) return RLX_ERR_INVALID;
    if (!(eps >= 0)) return cpu_bad(c, "eps must be >= 0");
    nd->fa = (float)eps;
    if (with_add_one) {
        int64_t a;
        if (cpu_attr_int(c, "add_one", 0, &a)) return RLX_ERR_INVALID;
        if (a != 0 && a != 1) return cpu_bad(c, "add_one must be 0 or 1");
        nd->flag = (int)a;
    }
    return 0;
}

typedef struct row_job {
    const cpu_run *r;
    int64_t chunk;
} row_job;

static void run_rows(const cpu_run *r, cpu_task_fn fn)
{
    const cpu_node *nd = r->nd;
    if (nd->rows == 0 || nd->cols == 0) return;
    row_job j = {r, cpu_chunk(nd->rows, 8192 / nd->cols + 1, 64, 1)};
    cpu_parallel(r, (nd->rows + j.chunk - 1) / j.chunk, fn, &j);
}

#define ROW_RANGE(j, t)                                                                        \
    const cpu_node *nd = (j)->r->nd;                                                           \
    const cpu_isa *isa = (j)->r->be->isa;                                                      \
    int64_t H = nd->cols, lo = (t) * (j)->chunk;                                               \
    int64_t hi = lo + (j)->chunk < nd->rows ? lo + (j)->chunk : nd->rows;                      \
    (void)isa

/* ---------------------------------------------------------------- softmax */

int cpu_prep_softmax(const cpu_compile_ctx *c, cpu_node *nd)
{
    return prep_rows(c, nd, 1, 1, 0);
}

static void softmax_task(void *arg, int64_t t, int worker)
{
    row_job *j = arg;
    ROW_RANGE(j, t);
    const float *x = CPU_F(j->r, 0);
    float *o = CPU_O(j->r, 0);
    for (int64_t row = lo; row < hi; row++) {
        float m = isa->maxv(x + row * H, H);
        float s = isa->exp_shift(o + row * H, x + row * H, m, H);
        isa->scal(o + row * H, 1.0f / s, H);
    }
}

int cpu_run_softmax(const cpu_run *r)
{
    run_rows(r, softmax_task);
    return 0;
}

/* ---------------------------------------------------------------- argmax */

int cpu_prep_argmax(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 1, 1, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *x = cpu_val(c, 0), *o = cpu_out(c, 0);
    if (cpu_need_f32(c, x, "x")) return RLX_ERR_INVALID;
    if (x->shape.ndim < 1 || o->dtype != RLX_I32) return cpu_bad(c, "x must have dims and the output be i32");
    nd->cols = x->shape.dims[x->shape.ndim - 1];
    nd->rows = nd->cols ? cpu_numel(&x->shape) / nd->cols : 0;
    if (cpu_numel(&o->shape) != nd->rows) return cpu_bad(c, "output must have one element per row of x");
    return 0;
}

static void argmax_task(void *arg, int64_t t, int worker)
{
    row_job *j = arg;
    ROW_RANGE(j, t);
    const float *x = CPU_F(j->r, 0);
    int32_t *o = (int32_t *)j->r->vp[nd->out[0]];
    (void)worker;
    for (int64_t row = lo; row < hi; row++) {
        const float *v = x + row * H;
        int64_t best = 0; /* the first largest; a NaN only while nothing else was seen */
        for (int64_t i = 1; i < H; i++)
            if (v[i] > v[best] || (isnan(v[best]) && !isnan(v[i]))) best = i;
        o[row] = (int32_t)best;
    }
}

int cpu_run_argmax(const cpu_run *r)
{
    run_rows(r, argmax_task);
    return 0;
}

/* ---------------------------------------------------------------- rms_norm */

int cpu_prep_rms_norm(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (prep_rows(c, nd, 2, 1, 1) || prep_vec(c, nd, 1, "w") || prep_eps(c, nd, 1)) return RLX_ERR_INVALID;
    nd->scratch_floats = (size_t)(2 * nd->cols); /* a 16-bit row in and out */
    return 0;
}

static void rms_row(const cpu_isa *isa, float *o, const float *x, const float *w, int64_t H,
                    float eps, int add_one)
{
    float ss = isa->sumsq(x, H);
    float r = 1.0f / sqrtf(ss / (float)H + eps);
    isa->rms_apply(o, x, w, r, add_one, H);
}

static void rms_task(void *arg, int64_t t, int worker)
{
    row_job *j = arg;
    ROW_RANGE(j, t);
    const void *x = j->r->vp[nd->in[0]];
    const float *w = CPU_F(j->r, 1);
    void *o = j->r->vp[nd->out[0]];
    float *xb = j->r->scratch + (size_t)worker * j->r->scratch_stride, *ob = xb + H;
    for (int64_t row = lo; row < hi; row++) {
        float *orow = cpu_row_at(nd->dt[3], o, row, H, ob);
        rms_row(isa, orow, cpu_row_in(isa, nd->dt[0], x, row, H, xb), w, H, nd->fa, nd->flag);
        cpu_row_out(isa, nd->dt[3], o, row, H, orow);
    }
}

int cpu_run_rms_norm(const cpu_run *r)
{
    run_rows(r, rms_task);
    return 0;
}

/* ---------------------------------------------------------------- add_rms_norm */

int cpu_prep_add_rms_norm(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (prep_rows(c, nd, 3, 2, 1) || prep_vec(c, nd, 2, "w") || prep_eps(c, nd, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *b = cpu_val(c, 1);
    if (cpu_need_float(c, b, "b")) return RLX_ERR_INVALID;
    nd->dt[1] = b->dtype;
    nd->scratch_floats = (size_t)(4 * nd->cols); /* 16-bit rows of a, b, the sum and the norm */
    nd->nb = cpu_numel(&b->shape);
    if (nd->nb == 0 || nd->nb % (nd->cols ? nd->cols : 1) != 0 ||
        (nd->rows * nd->cols) % nd->nb != 0)
        return cpu_bad(c, "b must have a's shape or a suffix of it (whole rows of %lld)",
                       (long long)nd->cols);
    return 0;
}

static void add_rms_task(void *arg, int64_t t, int worker)
{
    row_job *j = arg;
    ROW_RANGE(j, t);
    const void *a = j->r->vp[nd->in[0]], *b = j->r->vp[nd->in[1]];
    const float *w = CPU_F(j->r, 2);
    void *s = j->r->vp[nd->out[0]], *n = j->r->vp[nd->out[1]];
    float *ab = j->r->scratch + (size_t)worker * j->r->scratch_stride, *bb = ab + H, *sb = bb + H, *nb = sb + H;
    for (int64_t row = lo; row < hi; row++) {
        /* the sum in f32 is what the norm reads; it is rounded only where it is stored */
        float *srow = cpu_row_at(nd->dt[2], s, row, H, sb), *nrow = cpu_row_at(nd->dt[3], n, row, H, nb);
        isa->binary(CPU_BIN_ADD, srow, cpu_row_in(isa, nd->dt[0], a, row, H, ab),
                    cpu_row_in(isa, nd->dt[1], b, (row * H) % nd->nb / H, H, bb), H);
        rms_row(isa, nrow, srow, w, H, nd->fa, nd->flag);
        cpu_row_out(isa, nd->dt[2], s, row, H, srow);
        cpu_row_out(isa, nd->dt[3], n, row, H, nrow);
    }
}

int cpu_run_add_rms_norm(const cpu_run *r)
{
    run_rows(r, add_rms_task);
    return 0;
}

/* ---------------------------------------------------------------- layer_norm */

int cpu_prep_layer_norm(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (prep_rows(c, nd, 3, 1, 0) || prep_vec(c, nd, 1, "w") || prep_vec(c, nd, 2, "b") ||
        prep_eps(c, nd, 0))
        return RLX_ERR_INVALID;
    return 0;
}

static void layer_norm_task(void *arg, int64_t t, int worker)
{
    row_job *j = arg;
    ROW_RANGE(j, t);
    const float *x = CPU_F(j->r, 0), *w = CPU_F(j->r, 1), *b = CPU_F(j->r, 2);
    float *o = CPU_O(j->r, 0);
    for (int64_t row = lo; row < hi; row++) {
        const float *xr = x + row * H;
        float *orow = o + row * H;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < H; i++) mean += xr[i];
        mean /= (double)H;
        for (int64_t i = 0; i < H; i++) var += (xr[i] - mean) * (xr[i] - mean);
        var /= (double)H;
        float mu = (float)mean, inv = (float)(1.0 / sqrt(var + (double)nd->fa));
        for (int64_t i = 0; i < H; i++) orow[i] = (xr[i] - mu) * inv * w[i] + b[i];
    }
}

int cpu_run_layer_norm(const cpu_run *r)
{
    run_rows(r, layer_norm_task);
    return 0;
}
