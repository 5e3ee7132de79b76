/* Image ops on one channels-first image: conv2d (im2col of a tile of output pixels, then
 * one sgemm per tile and group; a 1x1 stride-1 conv reads x in place), group_norm and
 * nearest upsampling. Tiles depend on the shapes only, so results do not depend on the
 * thread count. */
#include "cpu_backend.h"
#include <cblas.h>
#include <math.h>
#include <string.h>

/* col buffer of a tile: at most this many floats per worker (fits a big L2) */
#define COL_FLOATS (1 << 18)

/* an (h, w) pair attribute: INTS of 2, one INT for both, or def when absent */
static int attr_pair(const cpu_compile_ctx *c, const char *name, int64_t def, int64_t *h, int64_t *w)
{
    const rlx_attr *a = cpu_attr_find(c, name);
    *h = *w = def;
    if (!a) return 0;
    if (a->kind == RLX_ATTR_INT) *h = *w = a->i;
    else if (a->kind == RLX_ATTR_INTS && a->n_ints == 2) *h = a->ints[0], *w = a->ints[1];
    else return cpu_bad(c, "attribute %s must be an int or 2 ints (h, w)", name);
    return 0;
}

/* ---------------------------------------------------------------- conv2d */

int cpu_prep_conv2d(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 2, 3, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *x = cpu_val(c, 0), *w = cpu_val(c, 1), *b = cpu_val(c, 2), *o = cpu_out(c, 0);
    if (cpu_need_f32(c, x, "x") || cpu_need_f32(c, w, "w") || cpu_need_f32(c, o, "the output") ||
        (b && cpu_need_f32(c, b, "bias")))
        return RLX_ERR_INVALID;
    cpu_conv *v = &nd->cv;
    if (attr_pair(c, "stride", 1, &v->sh, &v->sw) || attr_pair(c, "padding", 0, &v->ph, &v->pw) ||
        attr_pair(c, "dilation", 1, &v->dh, &v->dw) || cpu_attr_int(c, "groups", 1, &v->groups))
        return RLX_ERR_INVALID;
    if (v->sh < 1 || v->sw < 1 || v->ph < 0 || v->pw < 0 || v->dh < 1 || v->dw < 1 || v->groups < 1)
        return cpu_bad(c, "stride and dilation must be >= 1, padding >= 0, groups >= 1");
    if (x->shape.ndim != 3 || w->shape.ndim != 4 || o->shape.ndim != 3)
        return cpu_bad(c, "x must be [C,H,W], w [Co,C/groups,kh,kw], the output [Co,Ho,Wo]");
    v->C = x->shape.dims[0], v->H = x->shape.dims[1], v->W = x->shape.dims[2];
    v->Co = w->shape.dims[0], v->kh = w->shape.dims[2], v->kw = w->shape.dims[3];
    if (v->C % v->groups || v->Co % v->groups || w->shape.dims[1] * v->groups != v->C)
        return cpu_bad(c, "w has %lld input channels per group and %lld outputs; x has %lld "
                          "channels in %lld groups", (long long)w->shape.dims[1],
                       (long long)v->Co, (long long)v->C, (long long)v->groups);
    if (b && cpu_numel(&b->shape) != v->Co)
        return cpu_bad(c, "bias must have %lld elements", (long long)v->Co);
    int64_t eh = v->dh * (v->kh - 1) + 1, ew = v->dw * (v->kw - 1) + 1;
    v->Ho = v->H + 2 * v->ph >= eh ? (v->H + 2 * v->ph - eh) / v->sh + 1 : 0;
    v->Wo = v->W + 2 * v->pw >= ew ? (v->W + 2 * v->pw - ew) / v->sw + 1 : 0;
    if (o->shape.dims[0] != v->Co || o->shape.dims[1] != v->Ho || o->shape.dims[2] != v->Wo)
        return cpu_bad(c, "the output must be [%lld,%lld,%lld]", (long long)v->Co,
                       (long long)v->Ho, (long long)v->Wo);
    int64_t K = v->C / v->groups * v->kh * v->kw, P = v->Ho * v->Wo;
    if (K > INT32_MAX || P > INT32_MAX || v->Co > INT32_MAX)
        return cpu_bad(c, "dims beyond 2^31 are not supported");
    nd->bias_in = b ? nd->in[2] : -1;
    int direct = v->kh == 1 && v->kw == 1 && v->sh == 1 && v->sw == 1 && v->ph == 0 && v->pw == 0;
    v->tile = K ? COL_FLOATS / K : P;
    if (v->tile < 64) v->tile = 64;
    if (v->tile > P) v->tile = P;
    if (direct) v->tile = P > 4096 ? 4096 : P;
    if (v->tile < 1) v->tile = 1;
    nd->scratch_floats = direct ? 0 : (size_t)(K * v->tile);
    return 0;
}

typedef struct conv_job {
    const cpu_run *r;
    int64_t n_tiles;
} conv_job;

/* col[K, np]: the receptive fields of output pixels p0..p0+np-1 of group g */
static void im2col(const cpu_conv *v, const float *x, int64_t g, int64_t p0, int64_t np, float *col)
{
    int64_t Cg = v->C / v->groups;
    for (int64_t ci = 0; ci < Cg; ci++) {
        const float *xc = x + (g * Cg + ci) * v->H * v->W;
        for (int64_t ky = 0; ky < v->kh; ky++)
            for (int64_t kx = 0; kx < v->kw; kx++) {
                float *row = col + ((ci * v->kh + ky) * v->kw + kx) * np;
                for (int64_t j = 0; j < np; j++) {
                    int64_t p = p0 + j, oy = p / v->Wo, ox = p % v->Wo;
                    int64_t iy = oy * v->sh - v->ph + ky * v->dh, ix = ox * v->sw - v->pw + kx * v->dw;
                    row[j] = iy >= 0 && iy < v->H && ix >= 0 && ix < v->W ? xc[iy * v->W + ix] : 0.0f;
                }
            }
    }
}

static void conv_task(void *arg, int64_t t, int worker)
{
    conv_job *j = arg;
    const cpu_node *nd = j->r->nd;
    const cpu_conv *v = &nd->cv;
    int64_t g = t / j->n_tiles, p0 = (t % j->n_tiles) * v->tile, P = v->Ho * v->Wo;
    int64_t np = P - p0 < v->tile ? P - p0 : v->tile;
    int64_t Cog = v->Co / v->groups, K = v->C / v->groups * v->kh * v->kw;
    const float *x = CPU_F(j->r, 0), *w = CPU_F(j->r, 1) + g * Cog * K;
    float *y = CPU_O(j->r, 0) + g * Cog * P + p0;
    const float *bm;
    int64_t ldb;
    if (nd->scratch_floats == 0) { /* 1x1, stride 1, no padding: x is already [K, P] */
        bm = x + g * K * P + p0;
        ldb = P;
    } else {
        float *col = j->r->scratch + (size_t)worker * j->r->scratch_stride;
        im2col(v, x, g, p0, np, col);
        bm = col;
        ldb = np;
    }
    if (K > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)Cog, (int)np, (int)K, 1.0f, w,
                    (int)K, bm, (int)ldb, 0.0f, y, (int)P);
    const float *bias = nd->bias_in >= 0 ? (const float *)j->r->vp[nd->bias_in] + g * Cog : NULL;
    for (int64_t co = 0; co < Cog; co++) {
        float bv = bias ? bias[co] : 0.0f;
        if (K == 0) for (int64_t i = 0; i < np; i++) y[co * P + i] = bv;
        else if (bias) for (int64_t i = 0; i < np; i++) y[co * P + i] += bv;
    }
}

int cpu_run_conv2d(const cpu_run *r)
{
    const cpu_conv *v = &r->nd->cv;
    int64_t P = v->Ho * v->Wo;
    if (P == 0 || v->Co == 0) return 0;
    conv_job j = {r, (P + v->tile - 1) / v->tile};
    cpu_parallel(r, v->groups * j.n_tiles, conv_task, &j);
    return 0;
}

/* ---------------------------------------------------------------- group_norm */

int cpu_prep_group_norm(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 3, 3, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *x = cpu_val(c, 0), *o = cpu_out(c, 0);
    if (cpu_need_f32(c, x, "x") || cpu_need_f32(c, cpu_val(c, 1), "gamma") ||
        cpu_need_f32(c, cpu_val(c, 2), "beta") || cpu_need_f32(c, o, "the output"))
        return RLX_ERR_INVALID;
    if (x->shape.ndim < 1) return cpu_bad(c, "x must be [C, ...]");
    cpu_conv *v = &nd->cv;
    v->C = x->shape.dims[0];
    double eps;
    if (cpu_attr_int(c, "groups", 0, &v->groups) || cpu_attr_float(c, "eps", 1e-5, &eps))
        return RLX_ERR_INVALID;
    if (v->groups < 1 || v->C % v->groups)
        return cpu_bad(c, "groups %lld must be >= 1 and divide the %lld channels",
                       (long long)v->groups, (long long)v->C);
    if (!(eps >= 0)) return cpu_bad(c, "eps must be >= 0");
    nd->fa = (float)eps;
    for (uint32_t i = 1; i < 3; i++)
        if (cpu_numel(&cpu_val(c, i)->shape) != v->C)
            return cpu_bad(c, "%s must have %lld elements (the channels of x)", i == 1 ? "gamma" : "beta",
                           (long long)v->C);
    v->H = v->C ? cpu_numel(&x->shape) / v->C : 0; /* elements per channel */
    if (cpu_numel(&o->shape) != v->C * v->H) return cpu_bad(c, "the output must have x's shape");
    return 0;
}

/* one group: statistics in double, then the affine per channel */
static void group_norm_task(void *arg, int64_t g, int worker)
{
    (void)worker;
    const cpu_run *r = arg;
    const cpu_conv *v = &r->nd->cv;
    int64_t cg = v->C / v->groups, n = cg * v->H, base = g * n;
    const float *x = CPU_F(r, 0) + base, *gm = CPU_F(r, 1), *bt = CPU_F(r, 2);
    float *y = CPU_O(r, 0) + base;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; i++) mean += x[i];
    mean /= (double)(n ? n : 1);
    for (int64_t i = 0; i < n; i++) var += (x[i] - mean) * (x[i] - mean);
    var /= (double)(n ? n : 1);
    float mu = (float)mean, inv = (float)(1.0 / sqrt(var + (double)r->nd->fa));
    for (int64_t c = 0; c < cg; c++) {
        float a = inv * gm[g * cg + c], b = bt[g * cg + c];
        for (int64_t i = 0; i < v->H; i++) y[c * v->H + i] = (x[c * v->H + i] - mu) * a + b;
    }
}

int cpu_run_group_norm(const cpu_run *r)
{
    if (r->nd->cv.C && r->nd->cv.H) cpu_parallel(r, r->nd->cv.groups, group_norm_task, (void *)r);
    return 0;
}

/* ---------------------------------------------------------------- upsample_nearest2d */

int cpu_prep_upsample(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 1, 1, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *x = cpu_val(c, 0), *o = cpu_out(c, 0);
    if (cpu_need_f32(c, x, "x") || cpu_need_f32(c, o, "the output")) return RLX_ERR_INVALID;
    cpu_conv *v = &nd->cv;
    if (cpu_attr_int(c, "scale", 0, &v->sh)) return RLX_ERR_INVALID;
    if (v->sh < 1) return cpu_bad(c, "scale must be an int >= 1");
    if (x->shape.ndim != 3 || o->shape.ndim != 3) return cpu_bad(c, "x and the output must be [C,H,W]");
    v->C = x->shape.dims[0], v->H = x->shape.dims[1], v->W = x->shape.dims[2];
    if (o->shape.dims[0] != v->C || o->shape.dims[1] != v->H * v->sh || o->shape.dims[2] != v->W * v->sh)
        return cpu_bad(c, "the output must be [%lld,%lld,%lld]", (long long)v->C,
                       (long long)(v->H * v->sh), (long long)(v->W * v->sh));
    return 0;
}

/* task: one output row of one channel per (c, oy) pair, chunks of rows */
static void upsample_task(void *arg, int64_t t, int worker)
{
    (void)worker;
    const cpu_run *r = arg;
    const cpu_conv *v = &r->nd->cv;
    int64_t s = v->sh, Wo = v->W * s, rows = v->C * v->H * s;
    int64_t lo = t * 64, hi = lo + 64 < rows ? lo + 64 : rows;
    const float *x = CPU_F(r, 0);
    float *y = CPU_O(r, 0);
    for (int64_t row = lo; row < hi; row++) {
        int64_t c = row / (v->H * s), oy = row % (v->H * s);
        const float *xr = x + (c * v->H + oy / s) * v->W;
        float *yr = y + row * Wo;
        for (int64_t ox = 0; ox < Wo; ox++) yr[ox] = xr[ox / s];
    }
}

int cpu_run_upsample(const cpu_run *r)
{
    const cpu_conv *v = &r->nd->cv;
    int64_t rows = v->C * v->H * v->sh;
    if (rows && v->W) cpu_parallel(r, (rows + 63) / 64, upsample_task, (void *)r);
    return 0;
}
