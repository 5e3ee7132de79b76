/* Row-wise ops: softmax, rms_norm, layer_norm and the add_rms_norm composite. One row is
 * always reduced by one thread, so results do not depend on the thread count. */
#include "cpu_backend.h"
#include <math.h>

static int prep_rows(const cpu_compile_ctx *c, cpu_node *nd, uint32_t n_in, uint32_t n_out)
{
    if (cpu_need(c, n_in, n_in, n_out)) return RLX_ERR_INVALID;
    const rlx_value_desc *x = cpu_val(c, 0);
    if (cpu_need_f32(c, x, "x")) return RLX_ERR_INVALID;
    if (x->shape.ndim < 1) return cpu_bad(c, "x must have at least one dim");
    nd->cols = x->shape.dims[x->shape.ndim - 1];
    nd->rows = nd->cols ? cpu_numel(&x->shape) / nd->cols : 0;
    for (uint32_t i = 0; i < n_out; i++) {
        const rlx_value_desc *o = cpu_out(c, i);
        if (cpu_need_f32(c, o, "the output")) return RLX_ERR_INVALID;
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
    return prep_rows(c, nd, 1, 1);
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

/* ---------------------------------------------------------------- rms_norm */

int cpu_prep_rms_norm(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (prep_rows(c, nd, 2, 1) || prep_vec(c, nd, 1, "w") || prep_eps(c, nd, 1)) return RLX_ERR_INVALID;
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
    const float *x = CPU_F(j->r, 0), *w = CPU_F(j->r, 1);
    float *o = CPU_O(j->r, 0);
    for (int64_t row = lo; row < hi; row++)
        rms_row(isa, o + row * H, x + row * H, w, H, nd->fa, nd->flag);
}

int cpu_run_rms_norm(const cpu_run *r)
{
    run_rows(r, rms_task);
    return 0;
}

/* ---------------------------------------------------------------- add_rms_norm */

int cpu_prep_add_rms_norm(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (prep_rows(c, nd, 3, 2) || prep_vec(c, nd, 2, "w") || prep_eps(c, nd, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *b = cpu_val(c, 1);
    if (cpu_need_f32(c, b, "b")) return RLX_ERR_INVALID;
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
    const float *a = CPU_F(j->r, 0), *b = CPU_F(j->r, 1), *w = CPU_F(j->r, 2);
    float *s = CPU_O(j->r, 0), *n = CPU_O(j->r, 1);
    for (int64_t row = lo; row < hi; row++) {
        isa->binary(CPU_BIN_ADD, s + row * H, a + row * H, b + (row * H) % nd->nb, H);
        rms_row(isa, n + row * H, s + row * H, w, H, nd->fa, nd->flag);
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
    if (prep_rows(c, nd, 3, 1) || prep_vec(c, nd, 1, "w") || prep_vec(c, nd, 2, "b") ||
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
