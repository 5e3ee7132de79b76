/* The vectorisable inner loops of the CPU backend, behind one table per instruction set.
 * Every function handles any n (tails included) with the same arithmetic for every
 * element, so splitting a range across threads never changes a result. */
#ifndef RLX_CPU_ISA_H
#define RLX_CPU_ISA_H
#include <stdint.h>

enum { CPU_BIN_ADD = 0, CPU_BIN_SUB = 1, CPU_BIN_MUL = 2 };

typedef struct cpu_isa {
    const char *name; /* "avx2+fma", "generic" */
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
} cpu_isa;

extern const cpu_isa cpu_isa_generic;
#if defined(__x86_64__) || defined(__i386__)
#define CPU_HAVE_AVX2_BUILD 1
extern const cpu_isa cpu_isa_avx2;
#endif

#endif
