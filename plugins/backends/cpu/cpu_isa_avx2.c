/* AVX2/FMA versions of the inner loops, chosen at init when the CPU has them.
 * Tails go through masked loads/stores so every element of a range gets the same
 * arithmetic wherever a thread's slice happens to start or end. */
#include "cpu_isa.h"
#ifdef CPU_HAVE_AVX2_BUILD
#include <immintrin.h>
#include <math.h>

#if defined(__clang__) /* clang has no GCC target pragma: the same ISA a function */
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#define AI static inline __attribute__((always_inline))

static const int32_t mask_table[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

AI __m256i tail_mask(int64_t r) /* first r (< 8) lanes */
{
    return _mm256_loadu_si256((const __m256i *)(mask_table + 8 - r));
}

AI float hsum(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

AI float hmax(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* exp with Cody-Waite range reduction and a degree-6 polynomial (about 1 ulp). The input
 * is clamped to [-87.33, 88] so 2^n stays a normal float; NaN passes through. */
AI __m256 exp8(__m256 x)
{
    x = _mm256_max_ps(_mm256_set1_ps(-87.33654f), x);
    x = _mm256_min_ps(_mm256_set1_ps(88.0f), x);
    __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    __m256 y = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(y, _mm256_castsi256_ps(e));
}

/* 8 halves (f16: F16C; bf16: the high half of an f32) to 8 floats */
AI __m256 load_h8(int h, const uint16_t *p)
{
    __m128i v = _mm_loadu_si128((const __m128i *)p);
    if (h == CPU_H_BF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
    return _mm256_cvtph_ps(v);
}

AI __m256 load_h8_tail(int h, const uint16_t *p, int64_t r)
{
    uint16_t t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < r; i++) t[i] = p[i];
    return load_h8(h, t);
}

/* 8 weights of a row at k: f32 (h == 0) or 16-bit (h a CPU_H_*), and the first r < 8 */
AI __m256 load_w8(int h, const void *row, int64_t k)
{
    if (h == 0) return _mm256_loadu_ps((const float *)row + k);
    return load_h8(h, (const uint16_t *)row + k);
}

AI __m256 load_w8_tail(int h, const void *row, int64_t k, int64_t r)
{
    if (h == 0) return _mm256_maskload_ps((const float *)row + k, tail_mask(r));
    return load_h8_tail(h, (const uint16_t *)row + k, r);
}

/* One tile of the streaming kernel: M rows of x against R rows n, n + rs, .. of w (f32 when
 * h == 0, else 16-bit converted in registers). Each accumulator sees the same sequence of
 * FMAs whatever M, R and rs are, so tiling never changes a value. */
AI void gemv_tile(const int h, const float *x, int64_t ldx, const int M, const int R, int64_t K,
                  const void *w, int64_t n, int64_t rs, const float *bias, float *y, int64_t ldy)
{
    __m256 acc[4][8];
    const void *wr[8];
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        wr[r] = h ? (const void *)((const uint16_t *)w + (n + r * rs) * K)
                  : (const void *)((const float *)w + (n + r * rs) * K);
    #pragma GCC unroll 8
    for (int m = 0; m < M; m++)
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) acc[m][r] = _mm256_setzero_ps();
    int64_t k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 xv[4];
        #pragma GCC unroll 8
        for (int m = 0; m < M; m++) xv[m] = _mm256_loadu_ps(x + m * ldx + k);
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m256 wv = load_w8(h, wr[r], k);
            #pragma GCC unroll 8
            for (int m = 0; m < M; m++) acc[m][r] = _mm256_fmadd_ps(xv[m], wv, acc[m][r]);
        }
    }
    if (k < K) {
        __m256i mk = tail_mask(K - k);
        __m256 xv[4];
        #pragma GCC unroll 8
        for (int m = 0; m < M; m++) xv[m] = _mm256_maskload_ps(x + m * ldx + k, mk);
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m256 wv = load_w8_tail(h, wr[r], k, K - k);
            #pragma GCC unroll 8
            for (int m = 0; m < M; m++) acc[m][r] = _mm256_fmadd_ps(xv[m], wv, acc[m][r]);
        }
    }
    #pragma GCC unroll 8
    for (int m = 0; m < M; m++)
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            float v = hsum(acc[m][r]);
            y[m * ldy + n + r * rs] = bias ? v + bias[n + r * rs] : v;
        }
}

#define GEMV_R3 2 /* weight rows a tile for 3 and 4 x rows */
#define GEMV_R4 2
#include "cpu_gemv_tiles.h"

static void a_gemv(const float *x, int64_t ldx, int M, int64_t K, const float *w, int64_t n0,
                   int64_t n1, const float *bias, float *y, int64_t ldy)
{
    GEMV_SWITCH(f32)
}

static float a_dot(const float *a, const float *b, int64_t n)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    if (i < n) {
        __m256i mk = tail_mask(n - i);
        s1 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, mk), _mm256_maskload_ps(b + i, mk), s1);
    }
    return hsum(_mm256_add_ps(s0, s1));
}

static void a_axpy(float *y, float a, const float *x, int64_t n)
{
    __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    if (i < n) {
        __m256i mk = tail_mask(n - i);
        _mm256_maskstore_ps(y + i, mk, _mm256_fmadd_ps(av, _mm256_maskload_ps(x + i, mk),
                                                       _mm256_maskload_ps(y + i, mk)));
    }
}

static void a_scal(float *y, float a, int64_t n)
{
    __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_loadu_ps(y + i), av));
    if (i < n) {
        __m256i mk = tail_mask(n - i);
        _mm256_maskstore_ps(y + i, mk, _mm256_mul_ps(_mm256_maskload_ps(y + i, mk), av));
    }
}

AI __m256 bin8(int op, __m256 a, __m256 b)
{
    return op == CPU_BIN_ADD ? _mm256_add_ps(a, b)
           : op == CPU_BIN_SUB ? _mm256_sub_ps(a, b)
                               : _mm256_mul_ps(a, b);
}

AI void binary_op(const int op, float *o, const float *a, const float *b, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(o + i, bin8(op, _mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
    if (i < n) {
        __m256i mk = tail_mask(n - i);
        _mm256_maskstore_ps(o + i, mk, bin8(op, _mm256_maskload_ps(a + i, mk), _mm256_maskload_ps(b + i, mk)));
    }
}

static void a_binary(int op, float *o, const float *a, const float *b, int64_t n)
{
    switch (op) {
    case CPU_BIN_ADD: binary_op(CPU_BIN_ADD, o, a, b, n); break;
    case CPU_BIN_SUB: binary_op(CPU_BIN_SUB, o, a, b, n); break;
    default: binary_op(CPU_BIN_MUL, o, a, b, n); break;
    }
}

static void a_affine(float *o, const float *x, float mul, float add, int64_t n)
{
    __m256 mv = _mm256_set1_ps(mul), av = _mm256_set1_ps(add);
    int64_t i = 0;
    /* x*mul+add rounded twice, as the portable path does */
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(o + i, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), mv), av));
    if (i < n) {
        __m256i mk = tail_mask(n - i);
        _mm256_maskstore_ps(o + i, mk, _mm256_add_ps(_mm256_mul_ps(_mm256_maskload_ps(x + i, mk), mv), av));
    }
}

AI __m256 silu8(__m256 x)
{
    __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

static void a_silu(float *o, const float *x, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, silu8(_mm256_loadu_ps(x + i)));
    if (i < n) {
        __m256i mk = tail_mask(n - i);
        _mm256_maskstore_ps(o + i, mk, silu8(_mm256_maskload_ps(x + i, mk)));
    }
}

static void a_swiglu(float *o, const float *g, const float *u, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(o + i, _mm256_mul_ps(silu8(_mm256_loadu_ps(g + i)), _mm256_loadu_ps(u + i)));
    if (i < n) {
        __m256i mk = tail_mask(n - i);
        _mm256_maskstore_ps(o + i, mk, _mm256_mul_ps(silu8(_mm256_maskload_ps(g + i, mk)),
                                                     _mm256_maskload_ps(u + i, mk)));
    }
}

static float a_sumsq(const float *x, int64_t n)
{
    return a_dot(x, x, n);
}

static float a_maxv(const float *x, int64_t n)
{
    __m256 m = _mm256_set1_ps(-INFINITY);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
    if (i < n) {
        __m256i mk = tail_mask(n - i);
        __m256 v = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), _mm256_maskload_ps(x + i, mk),
                                    _mm256_castsi256_ps(mk));
        m = _mm256_max_ps(m, v);
    }
    return hmax(m);
}

static float a_exp_shift(float *o, const float *x, float m, int64_t n)
{
    __m256 mv = _mm256_set1_ps(m), s = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv));
        _mm256_storeu_ps(o + i, e);
        s = _mm256_add_ps(s, e);
    }
    if (i < n) {
        __m256i mk = tail_mask(n - i);
        __m256 e = exp8(_mm256_sub_ps(_mm256_maskload_ps(x + i, mk), mv));
        e = _mm256_and_ps(e, _mm256_castsi256_ps(mk));
        _mm256_maskstore_ps(o + i, mk, e);
        s = _mm256_add_ps(s, e);
    }
    return hsum(s);
}

static void a_rms_apply(float *o, const float *x, const float *w, float r, int add_one, int64_t n)
{
    __m256 rv = _mm256_set1_ps(r), one = _mm256_set1_ps(add_one ? 1.0f : 0.0f);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 wv = _mm256_add_ps(one, _mm256_loadu_ps(w + i));
        _mm256_storeu_ps(o + i, _mm256_mul_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), rv), wv));
    }
    if (i < n) {
        __m256i mk = tail_mask(n - i);
        __m256 wv = _mm256_add_ps(one, _mm256_maskload_ps(w + i, mk));
        _mm256_maskstore_ps(o + i, mk, _mm256_mul_ps(_mm256_mul_ps(_mm256_maskload_ps(x + i, mk), rv), wv));
    }
}

/* ---- 16-bit storage ---- */

/* 8 floats to 8 halves, round to nearest even (bf16: NaN kept quiet) */
AI __m128i store_h8(int h, __m256 f)
{
    if (h == CPU_H_F16) return _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256i u = _mm256_castps_si256(f);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    __m256i nan = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
    __m256 isnan = _mm256_cmp_ps(f, f, _CMP_UNORD_Q);
    r = _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r), _mm256_castsi256_ps(nan), isnan));
    r = _mm256_srli_epi32(r, 16);
    __m128i lo = _mm256_castsi256_si128(r), hi = _mm256_extracti128_si256(r, 1);
    return _mm_packus_epi32(lo, hi);
}

static void a_h_to_f32(int h, const uint16_t *x, float *o, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(o + i, load_h8(h, x + i));
    for (; i < n; i++) o[i] = cpu_h_load(h, x[i]);
}

static void a_f32_to_h(int h, const float *x, uint16_t *o, int64_t n)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm_storeu_si128((__m128i *)(o + i), store_h8(h, _mm256_loadu_ps(x + i)));
    for (; i < n; i++) o[i] = cpu_h_store(h, x[i]);
}

static void a_gemv_h(int h, const float *x, int64_t ldx, int M, int64_t K, const uint16_t *w,
                     int64_t n0, int64_t n1, const float *bias, float *y, int64_t ldy)
{
    if (h == CPU_H_BF16) {
        GEMV_SWITCH(bf16)
    } else {
        GEMV_SWITCH(f16)
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

const cpu_isa cpu_isa_avx2 = {
    "avx2+fma", a_gemv, a_dot, a_axpy, a_scal, a_binary, a_affine,
    a_silu, a_swiglu, a_sumsq, a_maxv, a_exp_shift, a_rms_apply,
    a_h_to_f32, a_f32_to_h, a_gemv_h, NULL, NULL, NULL, NULL, NULL,
};
#endif
