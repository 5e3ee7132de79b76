/* Portable C versions of the inner loops: any CPU, and the reference the AVX2 path is
 * checked against (RLX_CPU_ISA=generic). */
#include "cpu_isa.h"
#include <math.h>

static float g_dot(const float *a, const float *b, int64_t n)
{
    float s[4] = {0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int j = 0; j < 4; j++) s[j] += a[i + j] * b[i + j];
    for (; i < n; i++) s[0] += a[i] * b[i];
    return (s[0] + s[1]) + (s[2] + s[3]);
}

static void g_gemv(const float *x, int64_t ldx, int M, int64_t K, const float *w, int64_t n0,
                   int64_t n1, const float *bias, float *y, int64_t ldy)
{
    for (int64_t n = n0; n < n1; n++)
        for (int m = 0; m < M; m++) {
            float v = g_dot(x + m * ldx, w + n * K, K);
            y[m * ldy + n] = bias ? v + bias[n] : v;
        }
}

static void g_axpy(float *y, float a, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static void g_scal(float *y, float a, int64_t n)
{
    for (int64_t i = 0; i < n; i++) y[i] *= a;
}

static void g_binary(int op, float *o, const float *a, const float *b, int64_t n)
{
    switch (op) {
    case CPU_BIN_ADD:
        for (int64_t i = 0; i < n; i++) o[i] = a[i] + b[i];
        break;
    case CPU_BIN_SUB:
        for (int64_t i = 0; i < n; i++) o[i] = a[i] - b[i];
        break;
    default:
        for (int64_t i = 0; i < n; i++) o[i] = a[i] * b[i];
        break;
    }
}

static void g_affine(float *o, const float *x, float mul, float add, int64_t n)
{
    for (int64_t i = 0; i < n; i++) o[i] = x[i] * mul + add;
}

static void g_silu(float *o, const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++) o[i] = x[i] / (1.0f + expf(-x[i]));
}

static void g_swiglu(float *o, const float *g, const float *u, int64_t n)
{
    for (int64_t i = 0; i < n; i++) o[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static float g_sumsq(const float *x, int64_t n)
{
    return g_dot(x, x, n);
}

static float g_maxv(const float *x, int64_t n)
{
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > m) m = x[i];
    return m;
}

static float g_exp_shift(float *o, const float *x, float m, int64_t n)
{
    double s = 0; /* long rows (a vocabulary) would lose digits in a single f32 sum */
    for (int64_t i = 0; i < n; i++) {
        o[i] = expf(x[i] - m);
        s += o[i];
    }
    return (float)s;
}

static void g_rms_apply(float *o, const float *x, const float *w, float r, int add_one, int64_t n)
{
    if (add_one)
        for (int64_t i = 0; i < n; i++) o[i] = x[i] * r * (1.0f + w[i]);
    else
        for (int64_t i = 0; i < n; i++) o[i] = x[i] * r * w[i];
}

static void g_h_to_f32(int h, const uint16_t *x, float *o, int64_t n)
{
    for (int64_t i = 0; i < n; i++) o[i] = cpu_h_load(h, x[i]);
}

static void g_f32_to_h(int h, const float *x, uint16_t *o, int64_t n)
{
    for (int64_t i = 0; i < n; i++) o[i] = cpu_h_store(h, x[i]);
}

static void g_gemv_h(int h, const float *x, int64_t ldx, int M, int64_t K, const uint16_t *w,
                     int64_t n0, int64_t n1, const float *bias, float *y, int64_t ldy)
{
    for (int64_t n = n0; n < n1; n++) {
        const uint16_t *wr = w + n * K;
        for (int m = 0; m < M; m++) {
            const float *xr = x + m * ldx;
            float s[4] = {0, 0, 0, 0};
            int64_t k = 0;
            for (; k + 4 <= K; k += 4)
                for (int j = 0; j < 4; j++) s[j] += xr[k + j] * cpu_h_load(h, wr[k + j]);
            for (; k < K; k++) s[0] += xr[k] * cpu_h_load(h, wr[k]);
            float v = (s[0] + s[1]) + (s[2] + s[3]);
            y[m * ldy + n] = bias ? v + bias[n] : v;
        }
    }
}

const cpu_isa cpu_isa_generic = {
    "generic", g_gemv, g_dot, g_axpy, g_scal, g_binary, g_affine,
    g_silu, g_swiglu, g_sumsq, g_maxv, g_exp_shift, g_rms_apply,
    g_h_to_f32, g_f32_to_h, g_gemv_h, NULL, NULL, NULL, NULL, NULL,
};
