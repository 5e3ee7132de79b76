/* The vectorisable inner loops of the CPU backend, behind one table per instruction set.
 * Every function handles any n (tails included) with the same arithmetic for every
 * element, so splitting a range across threads never changes a result. */
#ifndef RLX_CPU_ISA_H
#define RLX_CPU_ISA_H
#include <stddef.h>
#include <stdint.h>

enum { CPU_BIN_ADD = 0, CPU_BIN_SUB = 1, CPU_BIN_MUL = 2 };

typedef struct cpu_isa {
    const char *name; /* "avx512+bf16", "avx512", "avx2+fma", "generic" */
    /* y[m*ldy + n] = dot(x[m*ldx .. +K], w[n*K .. +K]) (+ bias[n]) for m < M (M <= 4),
     * n in [n0, n1): the streaming kernel for few-row matmuls. */
    void (*gemv)(const float *x, int64_t ldx, int M, int64_t K, const float *w, int64_t n0,
                 int64_t n1, const float *bias, float *y, int64_t ldy);
    float (*dot)(const float *a, const float *b, int64_t n);
    void (*axpy)(float *y, float a, const float *x, int64_t n); /* y += a*x */
    void (*scal)(float *y, float a, int64_t n);                 /* y *= a */
    void (*binary)(int op, float *o, const float *a, const float *b, int64_t n);
    void (*affine)(float *o, const float *x, float mul, float add, int64_t n); /* x*mul+add */
    void (*silu)(float *o, const float *x, int64_t n);
    void (*swiglu)(float *o, const float *g, const float *u, int64_t n); /* silu(g)*u */
    float (*sumsq)(const float *x, int64_t n);
    float (*maxv)(const float *x, int64_t n); /* -inf for n == 0 */
    /* o = exp(x - m); returns the sum of o */
    float (*exp_shift)(float *o, const float *x, float m, int64_t n);
    /* o = x * r * (add_one ? 1 + w : w) */
    void (*rms_apply)(float *o, const float *x, const float *w, float r, int add_one, int64_t n);
    /* 16-bit storage (h is CPU_H_F16 or CPU_H_BF16): conversions (round to nearest even,
     * NaN stays NaN) and the streaming kernel with 16-bit weights, f32 x and accumulation */
    void (*h_to_f32)(int h, const uint16_t *x, float *o, int64_t n);
    void (*f32_to_h)(int h, const float *x, uint16_t *o, int64_t n);
    void (*gemv_h)(int h, const float *x, int64_t ldx, int M, int64_t K, const uint16_t *w,
                   int64_t n0, int64_t n1, const float *bias, float *y, int64_t ldy);
    /* Our GEMM for many rows (NULL: the backend uses OpenBLAS sgemm). wdt is the weights'
     * dtype (0: f32, or CPU_H_*). gemm_pack packs rows [m0, m1) of x [M, K] (m0 a multiple
     * of CPU_GEMM_MR) into xp, gemm_x_floats(wdt, M, K) floats for all rows; gemm computes
     * y[m*ldy + n] = sum_k x[m,k] w[n*K + k] (+ bias[n]) for m in [m0, m1), n in [n0, n1),
     * with wbuf cpu_gemm_wbuf(K) floats of the worker's own. */
    size_t (*gemm_x_floats)(int wdt, int64_t M, int64_t K);
    void (*gemm_pack)(int wdt, const float *x, int64_t M, int64_t K, int64_t m0, int64_t m1, float *xp);
    void (*gemm)(int wdt, const float *xp, int64_t M, int64_t K, int64_t m0, int64_t m1, const void *w,
                 int64_t n0, int64_t n1, const float *bias, float *y, int64_t ldy, float *wbuf);
    /* Attention of G <= 4 query rows against a block of n keys (NULL: loops of dot and
     * axpy). attn_qk: s[g*lds + i] = dot(q[g*ldq ..], k[i*ldk ..]) * scale over d;
     * attn_pv: acc[g*d + j] += p[g*ldp + i] * v[i*ldv + j], one FMA per key in key order.
     * k and v are f32 (h 0) or 16-bit (h CPU_H_*, converted exactly as they are loaded: the
     * same sums as over converted copies), ldk and ldv in elements. */
    void (*attn_qk)(int h, const float *q, int64_t ldq, int G, const void *k, int64_t ldk, int64_t n, int64_t d,
                    float scale, float *s, int64_t lds);
    void (*attn_pv)(int h, const float *p, int64_t ldp, int G, const void *v, int64_t ldv, int64_t n, int64_t d,
                    float *acc);
} cpu_isa;

enum { CPU_GEMM_MR = 32, CPU_GEMM_NR = 12 }; /* rows of a packed panel, widest column tile */

/* a tile's weight rows in f32 (copied, or widened from 16 bits) sit K + 16 floats apart:
 * rows a multiple of 4 KiB apart would share one L1 set, and a tile reads 12 of them at
 * every k */
static inline int64_t cpu_gemm_ldw(int64_t K) { return K + 16; }
static inline int64_t cpu_gemm_wbuf(int64_t K) { return CPU_GEMM_NR * cpu_gemm_ldw(K); }

enum { CPU_H_F16 = 1, CPU_H_BF16 = 2 }; /* = RLX_F16, RLX_BF16 */

/* scalar conversions shared by every table */
static inline float cpu_h_load(int h, uint16_t v)
{
    union { uint32_t u; float f; } x;
    if (h == CPU_H_BF16) {
        x.u = (uint32_t)v << 16;
        return x.f;
    }
    uint32_t sign = (uint32_t)(v & 0x8000) << 16, e = (v >> 10) & 0x1f, m = v & 0x3ff;
    if (e == 0) {
        float f = (float)m * (1.0f / 16777216.0f);
        return sign ? -f : f;
    }
    x.u = e == 31 ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e + 112u) << 23) | (m << 13));
    return x.f;
}

static inline uint16_t cpu_h_store(int h, float f)
{
    union { uint32_t u; float f; } x;
    x.f = f;
    uint32_t u = x.u;
    if (h == CPU_H_BF16) {
        if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
        u += 0x7fffu + ((u >> 16) & 1u);
        return (uint16_t)(u >> 16);
    }
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t ax = u & 0x7fffffffu;
    if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00);
    if (ax < 0x38800000u) { /* a subnormal half: m * 2^-24, rounded to nearest even */
        x.u = ax;
        float a = x.f * 16777216.0f;
        float r = (float)(int32_t)(a + 0.5f);
        if (r - a == 0.5f && ((int32_t)r & 1)) r -= 1.0f;
        return (uint16_t)(sign | (uint16_t)r);
    }
    uint32_t hv = (((ax >> 23) - 112u) << 10) | ((ax & 0x7fffffu) >> 13);
    uint32_t rest = ax & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (hv & 1u))) hv++;
    return (uint16_t)(sign | hv);
}

extern const cpu_isa cpu_isa_generic;
#if defined(__x86_64__) || defined(__i386__)
#define CPU_HAVE_AVX2_BUILD 1
extern const cpu_isa cpu_isa_avx2;
/* the AVX2 table plus the AVX-512 GEMM (vdpbf16ps for bf16 weights where the CPU has it);
 * call only on a CPU with AVX-512 F/BW/VL/DQ */
const cpu_isa *cpu_isa_avx512_init(void);
#endif

#endif
