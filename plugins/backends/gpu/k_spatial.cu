/* Image kernels: a direct conv2d (a block = 256 output pixels x CONV_CO output channels of
 * one group, the taps of one input channel staged in shared memory), group_norm (one block
 * per group, statistics in double) and nearest upsampling. */
#include "gpu_spatial.h"
#include <stdio.h>
#include <string.h>

#define CONV_PIX 256
#define CONV_CO 8
#define GN_THREADS 1024

static const rlx_attr *attr(const rlx_node_desc *n, const char *name)
{
    for (uint32_t i = 0; i < n->n_attrs; i++)
        if (n->attrs[i].name && strcmp(n->attrs[i].name, name) == 0)
            return &n->attrs[i];
    return NULL;
}

static int attr_i(const rlx_node_desc *n, const char *name, int64_t def, int64_t *v)
{
    const rlx_attr *a = attr(n, name);
    *v = def;
    if (!a)
        return 0;
    if (a->kind != RLX_ATTR_INT)
        return -1;
    *v = a->i;
    return 0;
}

/* an (h, w) pair: 2 ints, or one int for both */
static int attr_pair(const rlx_node_desc *n, const char *name, int64_t def, int64_t *h,
                     int64_t *w)
{
    const rlx_attr *a = attr(n, name);
    *h = *w = def;
    if (!a)
        return 0;
    if (a->kind == RLX_ATTR_INT)
        *h = *w = a->i;
    else if (a->kind == RLX_ATTR_INTS && a->n_ints == 2)
        *h = a->ints[0], *w = a->ints[1];
    else
        return -1;
    return 0;
}

static int64_t count(const rlx_value_desc *v)
{
    int64_t n = 1;
    for (uint32_t i = 0; i < v->shape.ndim; i++)
        n *= v->shape.dims[i];
    return n;
}

#define BAD(...)                                                                               \
    do {                                                                                       \
        snprintf(err, len, __VA_ARGS__);                                                       \
        return -1;                                                                             \
    } while (0)

static int plan_conv(const rlx_node_desc *nd, const rlx_value_desc *const *ins, int n_in,
                     const rlx_value_desc *y, gpu_conv *c, char *err, size_t len)
{
    const rlx_value_desc *x = ins[0], *w = ins[1];
    if (attr_pair(nd, "stride", 1, &c->sh, &c->sw) || attr_pair(nd, "padding", 0, &c->ph, &c->pw) ||
        attr_pair(nd, "dilation", 1, &c->dh, &c->dw) || attr_i(nd, "groups", 1, &c->groups) ||
        c->sh < 1 || c->sw < 1 || c->ph < 0 || c->pw < 0 || c->dh < 1 || c->dw < 1 || c->groups < 1)
        BAD("stride, padding, dilation must be (h, w) pairs (>= 1, >= 0, >= 1), groups >= 1");
    if (x->shape.ndim != 3 || w->shape.ndim != 4 || y->shape.ndim != 3)
        BAD("x must be [C,H,W], w [Co,C/groups,kh,kw], the output [Co,Ho,Wo]");
    c->C = x->shape.dims[0], c->H = x->shape.dims[1], c->W = x->shape.dims[2];
    c->Co = w->shape.dims[0], c->kh = w->shape.dims[2], c->kw = w->shape.dims[3];
    if (c->C % c->groups || c->Co % c->groups || w->shape.dims[1] * c->groups != c->C)
        BAD("w [%lld,%lld,..] does not fit x's %lld channels in %lld groups", (long long)c->Co,
            (long long)w->shape.dims[1], (long long)c->C, (long long)c->groups);
    if (n_in == 3 && count(ins[2]) != c->Co)
        BAD("bias is not [%lld]", (long long)c->Co);
    if (c->kh * c->kw > GPU_CONV_MAX_TAPS)
        BAD("kernel %lldx%lld has more than %d taps", (long long)c->kh, (long long)c->kw,
            GPU_CONV_MAX_TAPS);
    int64_t eh = c->dh * (c->kh - 1) + 1, ew = c->dw * (c->kw - 1) + 1;
    c->Ho = c->H + 2 * c->ph >= eh ? (c->H + 2 * c->ph - eh) / c->sh + 1 : 0;
    c->Wo = c->W + 2 * c->pw >= ew ? (c->W + 2 * c->pw - ew) / c->sw + 1 : 0;
    if (y->shape.dims[0] != c->Co || y->shape.dims[1] != c->Ho || y->shape.dims[2] != c->Wo)
        BAD("the output must be [%lld,%lld,%lld]", (long long)c->Co, (long long)c->Ho,
            (long long)c->Wo);
    if ((c->Co / c->groups + CONV_CO - 1) / CONV_CO > 65535 || c->groups > 65535)
        BAD("too many output channels per group or groups for the grid");
    return 0;
}

int gpu_spatial_plan(int op, const rlx_node_desc *nd, const rlx_value_desc *const *ins, int n_in,
                     const rlx_value_desc *y, gpu_conv *c, float *eps, char *err, size_t len)
{
    memset(c, 0, sizeof *c);
    const rlx_value_desc *x = ins[0];
    if (op == GS_CONV2D)
        return plan_conv(nd, ins, n_in, y, c, err, len);
    if (op == GS_GROUP_NORM) {
        const rlx_attr *e = attr(nd, "eps");
        if (attr_i(nd, "groups", 0, &c->groups) || x->shape.ndim < 1 || c->groups < 1 ||
            x->shape.dims[0] % c->groups)
            BAD("x must be [C, ...] with groups dividing C");
        c->C = x->shape.dims[0];
        c->H = c->C ? count(x) / c->C : 0;
        if (count(ins[1]) != c->C || count(ins[2]) != c->C)
            BAD("gamma and beta must be [%lld]", (long long)c->C);
        if (count(y) != count(x))
            BAD("the output must have x's shape");
        *eps = (float)(!e ? 1e-5 : e->kind == RLX_ATTR_INT ? (double)e->i : e->f);
        if (!(*eps >= 0))
            BAD("eps must be >= 0");
        return 0;
    }
    if (attr_i(nd, "scale", 0, &c->sh) || c->sh < 1 || x->shape.ndim != 3 || y->shape.ndim != 3)
        BAD("x must be [C,H,W] and scale an int >= 1");
    c->C = x->shape.dims[0], c->H = x->shape.dims[1], c->W = x->shape.dims[2];
    if (y->shape.dims[0] != c->C || y->shape.dims[1] != c->H * c->sh ||
        y->shape.dims[2] != c->W * c->sh)
        BAD("the output must be [%lld,%lld,%lld]", (long long)c->C, (long long)(c->H * c->sh),
            (long long)(c->W * c->sh));
    return 0;
}

/* ---------------------------------------------------------------- conv2d */

__global__ static void k_conv2d(gpu_conv c, const float *x, const float *w, const float *bias,
                                float *y)
{
    extern __shared__ float taps[]; /* [CONV_CO][kh*kw] of the current input channel */
    int64_t Cg = c.C / c.groups, Cog = c.Co / c.groups, T = c.kh * c.kw, P = c.Ho * c.Wo;
    int64_t g = blockIdx.z, co0 = (int64_t)blockIdx.y * CONV_CO;
    int64_t p = (int64_t)blockIdx.x * CONV_PIX + threadIdx.x;
    int64_t oy = p / (c.Wo ? c.Wo : 1), ox = p - oy * c.Wo;
    float acc[CONV_CO];
    for (int j = 0; j < CONV_CO; j++)
        acc[j] = 0.0f;
    for (int64_t ci = 0; ci < Cg; ci++) {
        __syncthreads();
        for (int64_t k = threadIdx.x; k < CONV_CO * T; k += CONV_PIX) {
            int64_t j = k / T, co = co0 + j;
            taps[k] = co < Cog ? w[((g * Cog + co) * Cg + ci) * T + k % T] : 0.0f;
        }
        __syncthreads();
        if (p >= P)
            continue;
        const float *xc = x + (g * Cg + ci) * c.H * c.W;
        for (int64_t ky = 0; ky < c.kh; ky++) {
            int64_t iy = oy * c.sh - c.ph + ky * c.dh;
            if (iy < 0 || iy >= c.H)
                continue;
            for (int64_t kx = 0; kx < c.kw; kx++) {
                int64_t ix = ox * c.sw - c.pw + kx * c.dw;
                if (ix < 0 || ix >= c.W)
                    continue;
                float v = xc[iy * c.W + ix];
                for (int j = 0; j < CONV_CO; j++)
                    acc[j] += v * taps[j * T + ky * c.kw + kx];
            }
        }
    }
    if (p >= P)
        return;
    for (int j = 0; j < CONV_CO && co0 + j < Cog; j++) {
        int64_t co = g * Cog + co0 + j;
        y[co * P + p] = acc[j] + (bias ? bias[co] : 0.0f);
    }
}

void gpu_conv2d(gpuStream_t s, const gpu_conv *c, const float *x, const float *w,
                const float *bias, float *y)
{
    int64_t P = c->Ho * c->Wo, Cog = c->Co / c->groups;
    if (P == 0 || Cog == 0)
        return;
    dim3 grid((unsigned)((P + CONV_PIX - 1) / CONV_PIX), (unsigned)((Cog + CONV_CO - 1) / CONV_CO),
              (unsigned)c->groups);
    size_t smem = sizeof(float) * CONV_CO * (size_t)(c->kh * c->kw);
    RLX_LAUNCH(k_conv2d, grid, CONV_PIX, smem, s)(*c, x, w, bias, y);
}

/* ---------------------------------------------------------------- group_norm */

__device__ static double block_sum(double v)
{
    __shared__ double red[GN_THREADS];
    red[threadIdx.x] = v;
    __syncthreads();
    for (int w = GN_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w)
            red[threadIdx.x] += red[threadIdx.x + w];
        __syncthreads();
    }
    double r = red[0];
    __syncthreads();
    return r;
}

__global__ static void k_group_norm(const float *x, const float *gamma, const float *beta,
                                    float *y, int64_t cg, int64_t n, float eps)
{
    int64_t m = cg * n, base = (int64_t)blockIdx.x * m;
    double s = 0;
    for (int64_t i = threadIdx.x; i < m; i += GN_THREADS)
        s += x[base + i];
    double mean = block_sum(s) / (double)m, q = 0;
    for (int64_t i = threadIdx.x; i < m; i += GN_THREADS) {
        double d = x[base + i] - mean;
        q += d * d;
    }
    float inv = (float)(1.0 / sqrt(block_sum(q) / (double)m + (double)eps)), mu = (float)mean;
    for (int64_t i = threadIdx.x; i < m; i += GN_THREADS) {
        int64_t ch = blockIdx.x * cg + i / n;
        y[base + i] = (x[base + i] - mu) * inv * gamma[ch] + beta[ch];
    }
}

void gpu_group_norm(gpuStream_t s, const gpu_conv *c, const float *x, const float *gamma,
                    const float *beta, float *y, float eps)
{
    if (c->C == 0 || c->H == 0)
        return;
    RLX_LAUNCH(k_group_norm, (unsigned)c->groups, GN_THREADS, 0, s)(x, gamma, beta, y,
                                                                    c->C / c->groups, c->H, eps);
}

/* ---------------------------------------------------------------- upsample_nearest2d */

__global__ static void k_upsample(const float *x, float *y, int64_t H, int64_t W, int64_t sc,
                                  int64_t n)
{
    int64_t Wo = W * sc, Ho = H * sc;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t ox = i % Wo, r = i / Wo, oy = r % Ho, ch = r / Ho;
        y[i] = x[(ch * H + oy / sc) * W + ox / sc];
    }
}

void gpu_upsample_nearest(gpuStream_t s, const gpu_conv *c, const float *x, float *y)
{
    int64_t n = c->C * c->H * c->W * c->sh * c->sh;
    if (n == 0)
        return;
    int64_t b = (n + 255) / 256;
    RLX_LAUNCH(k_upsample, (unsigned)(b > 65535 * 8 ? 65535 * 8 : b), 256, 0, s)(x, y, c->H, c->W,
                                                                                 c->sh, n);
}
