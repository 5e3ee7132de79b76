/* AVX-512 GEMM for matmuls of many rows (prefill): y = x·wᵀ with w [N, K] read as stored.
 * x is packed once per call into panels of 32 rows, k-major (f32: [K][32]; bf16: [K/2][32]
 * pairs, the operand layout of vdpbf16ps), so one zmm load holds 16 rows at one k (pair)
 * and each weight is broadcast from its own row: the weights are never copied, whatever
 * their dtype. A tile is 32 rows × up to 12 columns (24 accumulators) over the whole K in
 * one pass, so every output is one f32 sum in k order however the work is sliced.
 * f32 and f16 weights (and bf16 on a CPU without AVX512-BF16): the tile's rows are copied
 * (widened by F16C) once into the worker's buffer and reused by every row panel. */
#include "cpu_isa.h"
#ifdef CPU_HAVE_AVX2_BUILD
#include <immintrin.h>
#include <pthread.h>
#include <string.h>

#if defined(__clang__) /* clang has no GCC target pragma: the same ISA a function */
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx2,fma,f16c")
#endif

#define AI static inline __attribute__((always_inline))
#define MR CPU_GEMM_MR
#define NR CPU_GEMM_NR

static int have_bf16_dot; /* set by cpu_isa_avx512_init */

/* x panels hold bf16 pairs when the weights are bf16 and the CPU multiplies them */
static int bf16_x(int wdt)
{
    return wdt == CPU_H_BF16 && have_bf16_dot;
}

static size_t x_floats(int wdt, int64_t M, int64_t K)
{
    int64_t mp = (M + MR - 1) / MR * MR;
    return (size_t)(mp * (bf16_x(wdt) ? (K + 1) / 2 : K));
}

/* 16×16 transpose of 32-bit lanes: r[i] (row i) becomes column i */
AI void tr16(__m512 r[16])
{
    __m512 t[16];
    #pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    #pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xee);
        r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xee);
    }
    #pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        t[j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0x88);
        t[4 + j] = _mm512_shuffle_f32x4(r[j], r[4 + j], 0xdd);
        t[8 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0x88);
        t[12 + j] = _mm512_shuffle_f32x4(r[8 + j], r[12 + j], 0xdd);
    }
    #pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        r[j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0x88);
        r[8 + j] = _mm512_shuffle_f32x4(t[j], t[8 + j], 0xdd);
        r[4 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(t[4 + j], t[12 + j], 0xdd);
    }
}

/* 16 bf16 pairs (32 floats from p, the last n < 32 of them zero-padded) as one zmm of
 * 32-bit units, round to nearest even */
AI __m512 bf16_pairs(const float *p, int64_t n)
{
    __m512 lo, hi;
    if (n >= 32) {
        lo = _mm512_loadu_ps(p);
        hi = _mm512_loadu_ps(p + 16);
    } else {
        __mmask16 ml = (__mmask16)(n >= 16 ? 0xffff : (1u << n) - 1);
        __mmask16 mh = (__mmask16)(n > 16 ? (1u << (n - 16)) - 1 : 0);
        lo = _mm512_maskz_loadu_ps(ml, p);
        hi = _mm512_maskz_loadu_ps(mh, p + 16);
    }
    return _mm512_castsi512_ps((__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

/* panel of rows [m0, m0+32) of x (rows >= M are zero) into xp, k-major */
static void pack_panel(int wdt, const float *x, int64_t M, int64_t K, int64_t m0, float *xp)
{
    int bf = bf16_x(wdt);
    int64_t units = bf ? (K + 1) / 2 : K; /* 32-bit units per row */
    int64_t rows = M - m0 < MR ? M - m0 : MR;
    for (int half = 0; half < 2; half++) {
        int64_t r0 = half * 16;
        for (int64_t u = 0; u < units; u += 16) {
            int64_t nu = units - u < 16 ? units - u : 16;
            __m512 r[16];
            for (int i = 0; i < 16; i++) {
                if (r0 + i >= rows) {
                    r[i] = _mm512_setzero_ps();
                    continue;
                }
                const float *row = x + (m0 + r0 + i) * K;
                if (bf) {
                    r[i] = bf16_pairs(row + 2 * u, K - 2 * u);
                } else {
                    __mmask16 mk = (__mmask16)(nu == 16 ? 0xffff : (1u << nu) - 1);
                    r[i] = _mm512_maskz_loadu_ps(mk, row + u);
                }
            }
            tr16(r);
            for (int64_t j = 0; j < nu; j++) _mm512_storeu_ps(xp + (u + j) * MR + r0, r[j]);
        }
    }
}

static void x_pack(int wdt, const float *x, int64_t M, int64_t K, int64_t m0, int64_t m1, float *xp)
{
    int64_t units = bf16_x(wdt) ? (K + 1) / 2 : K;
    for (int64_t m = m0; m < m1 && m < M; m += MR) pack_panel(wdt, x, M, K, m, xp + m * units);
}

/* acc (2 × nr zmm: rows 0-15 and 16-31 of each column) to y rows [0, rows), columns [n, n+nr) */
AI void store_tile(__m512 *a0, __m512 *a1, const int nr, int64_t rows, const float *bias, int64_t n,
                   float *y, int64_t ldy)
{
    __mmask16 mk = (__mmask16)((1u << nr) - 1);
    __m512 bv = bias ? _mm512_maskz_loadu_ps(mk, bias + n) : _mm512_setzero_ps();
    for (int half = 0; half < 2; half++) {
        __m512 r[16];
        #pragma GCC unroll 16
        for (int j = 0; j < 16; j++) r[j] = j < nr ? (half ? a1[j] : a0[j]) : _mm512_setzero_ps();
        tr16(r);
        int64_t lim = rows - half * 16 < 16 ? rows - half * 16 : 16;
        for (int64_t i = 0; i < lim; i++)
            _mm512_mask_storeu_ps(y + (half * 16 + i) * ldy + n, mk, _mm512_add_ps(r[i], bv));
    }
}

/* one tile: packed panel xp against nr weight rows w (stride ldw), f32 weights */
AI void tile_f32(const float *xp, int64_t K, const float *w, int64_t ldw, const int nr, int64_t rows,
                 const float *bias, int64_t n, float *y, int64_t ldy)
{
    __m512 a0[NR], a1[NR];
    const float *wr[NR];
    #pragma GCC unroll 12
    for (int j = 0; j < nr; j++) {
        a0[j] = a1[j] = _mm512_setzero_ps();
        wr[j] = w + j * ldw;
    }
    for (int64_t k = 0; k < K; k++) {
        __m512 x0 = _mm512_loadu_ps(xp + k * MR), x1 = _mm512_loadu_ps(xp + k * MR + 16);
        #pragma GCC unroll 12
        for (int j = 0; j < nr; j++) {
            __m512 b = _mm512_set1_ps(wr[j][k]);
            a0[j] = _mm512_fmadd_ps(x0, b, a0[j]);
            a1[j] = _mm512_fmadd_ps(x1, b, a1[j]);
        }
    }
    store_tile(a0, a1, nr, rows, bias, n, y, ldy);
}

/* the same with bf16 weights and bf16-pair panels: vdpbf16ps, two k per instruction */
AI void tile_bf16(const float *xp, int64_t K, const uint16_t *w, int64_t ldw, const int nr, int64_t rows,
                  const float *bias, int64_t n, float *y, int64_t ldy)
{
    __m512 a0[NR], a1[NR];
    const uint16_t *wr[NR];
    #pragma GCC unroll 12
    for (int j = 0; j < nr; j++) {
        a0[j] = a1[j] = _mm512_setzero_ps();
        wr[j] = w + j * ldw;
    }
    int64_t kp = 0, pairs = K / 2;
    for (; kp < pairs; kp++) {
        __m512bh x0 = (__m512bh)_mm512_loadu_ps(xp + kp * MR), x1 = (__m512bh)_mm512_loadu_ps(xp + kp * MR + 16);
        #pragma GCC unroll 12
        for (int j = 0; j < nr; j++) {
            int32_t v;
            memcpy(&v, wr[j] + 2 * kp, sizeof v);
            __m512bh b = (__m512bh)_mm512_set1_epi32(v);
            a0[j] = _mm512_dpbf16_ps(a0[j], x0, b);
            a1[j] = _mm512_dpbf16_ps(a1[j], x1, b);
        }
    }
    if (K & 1) { /* the last k pairs with a zero */
        __m512bh x0 = (__m512bh)_mm512_loadu_ps(xp + kp * MR), x1 = (__m512bh)_mm512_loadu_ps(xp + kp * MR + 16);
        #pragma GCC unroll 12
        for (int j = 0; j < nr; j++) {
            __m512bh b = (__m512bh)_mm512_set1_epi32((int32_t)wr[j][K - 1]);
            a0[j] = _mm512_dpbf16_ps(a0[j], x0, b);
            a1[j] = _mm512_dpbf16_ps(a1[j], x1, b);
        }
    }
    store_tile(a0, a1, nr, rows, bias, n, y, ldy);
}

/* columns [n, n+nr) for row panels [m0, m1) */
#define COLS(NAME, TILE, WT)                                                                      \
    static void NAME(const float *xp, int64_t M, int64_t K, int64_t units, int64_t m0, int64_t m1, \
                     const WT *w, int64_t ldw, const int nr, const float *bias, int64_t n, float *y, \
                     int64_t ldy)                                                                 \
    {                                                                                             \
        for (int64_t m = m0; m < m1 && m < M; m += MR) {                                          \
            int64_t rows = (m1 < M ? m1 : M) - m;                                                 \
            TILE(xp + m * units, K, w, ldw, nr, rows < MR ? rows : MR, bias, n, y + m * ldy, ldy); \
        }                                                                                         \
    }
#define COLS_N(NR_)                                                          \
    COLS(cols_f32_##NR_, tile_f32_##NR_, float)                              \
    COLS(cols_bf16_##NR_, tile_bf16_##NR_, uint16_t)
#define TILES_N(NR_)                                                                                  \
    static void tile_f32_##NR_(const float *xp, int64_t K, const float *w, int64_t ldw, int nr,        \
                               int64_t rows, const float *bias, int64_t n, float *y, int64_t ldy)      \
    {                                                                                                 \
        (void)nr;                                                                                     \
        tile_f32(xp, K, w, ldw, NR_, rows, bias, n, y, ldy);                                          \
    }                                                                                                 \
    static void tile_bf16_##NR_(const float *xp, int64_t K, const uint16_t *w, int64_t ldw, int nr,    \
                                int64_t rows, const float *bias, int64_t n, float *y, int64_t ldy)     \
    {                                                                                                 \
        (void)nr;                                                                                     \
        tile_bf16(xp, K, w, ldw, NR_, rows, bias, n, y, ldy);                                         \
    }                                                                                                 \
    COLS_N(NR_)
TILES_N(12)
TILES_N(8)
TILES_N(4)
TILES_N(2)
TILES_N(1)

/* 16 weights of a row at k (f32 when h == 0, else 16-bit widened in registers); the
 * masked form reads only the first lanes of mk and zeroes the rest */
AI __m512 w16(const int h, const void *row, int64_t k)
{
    if (h == 0) return _mm512_loadu_ps((const float *)row + k);
    __m256i v = _mm256_loadu_si256((const __m256i *)((const uint16_t *)row + k));
    if (h == CPU_H_F16) return _mm512_cvtph_ps(v);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

AI __m512 w16_mask(const int h, const void *row, int64_t k, __mmask16 mk)
{
    if (h == 0) return _mm512_maskz_loadu_ps(mk, (const float *)row + k);
    __m256i v = _mm256_maskz_loadu_epi16(mk, (const uint16_t *)row + k);
    if (h == CPU_H_F16) return _mm512_cvtph_ps(v);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

/* widest tile that fits the columns left */
static int tile_width(int64_t left)
{
    return left >= 12 ? 12 : left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
}

/* columns [n0, n1) for rows [m0, m1). bf16 weights on vdpbf16ps (read in place): column
 * tiles within blocks of rows whose panels stay in L2 (about 256 KiB), so x comes from L3
 * once per block of columns, not per tile. f32 and f16 weights: a tile is copied (widened)
 * once into wbuf, rows K + 16 floats apart (in place they are a multiple of 4 KiB apart: one
 * L1 set for the 12 rows a k reads), and every row runs against it; x comes from L3 per
 * tile (~3 bytes a cycle against ~24 FMA cycles a k). */
static void gemm(int wdt, const float *xp, int64_t M, int64_t K, int64_t m0, int64_t m1, const void *wv,
                 int64_t n0, int64_t n1, const float *bias, float *y, int64_t ldy, float *wbuf)
{
    int bf = bf16_x(wdt);
    int64_t units = bf ? (K + 1) / 2 : K;
    int64_t mc = (65536 / (units * MR) > 1 ? 65536 / (units * MR) : 1) * MR;
    if (m1 > M) m1 = M;
    if (!bf) mc = m1 - m0;
    for (int64_t mb = m0; mb < m1; mb += mc) {
        int64_t me = mb + mc < m1 ? mb + mc : m1;
        for (int64_t n = n0; n < n1;) {
            int nr = tile_width(n1 - n);
            if (bf) {
                const uint16_t *w = (const uint16_t *)wv + n * K;
                switch (nr) {
                case 12: cols_bf16_12(xp, M, K, units, mb, me, w, K, 12, bias, n, y, ldy); break;
                case 8: cols_bf16_8(xp, M, K, units, mb, me, w, K, 8, bias, n, y, ldy); break;
                case 4: cols_bf16_4(xp, M, K, units, mb, me, w, K, 4, bias, n, y, ldy); break;
                case 2: cols_bf16_2(xp, M, K, units, mb, me, w, K, 2, bias, n, y, ldy); break;
                default: cols_bf16_1(xp, M, K, units, mb, me, w, K, 1, bias, n, y, ldy); break;
                }
            } else {
                const int64_t ldw = cpu_gemm_ldw(K);
                for (int j = 0; j < nr; j++) { /* the tile's rows in f32, once for every row panel */
                    const void *row = (const char *)wv + (size_t)((n + j) * K) * (wdt ? 2u : 4u);
                    float *o = wbuf + j * ldw;
                    int64_t i = 0;
                    for (; i + 16 <= K; i += 16) _mm512_storeu_ps(o + i, w16(wdt, row, i));
                    if (i < K) {
                        __mmask16 mk = (__mmask16)((1u << (K - i)) - 1);
                        _mm512_mask_storeu_ps(o + i, mk, w16_mask(wdt, row, i, mk));
                    }
                }
                const float *w = wbuf;
                switch (nr) {
                case 12: cols_f32_12(xp, M, K, units, mb, me, w, ldw, 12, bias, n, y, ldy); break;
                case 8: cols_f32_8(xp, M, K, units, mb, me, w, ldw, 8, bias, n, y, ldy); break;
                case 4: cols_f32_4(xp, M, K, units, mb, me, w, ldw, 4, bias, n, y, ldy); break;
                case 2: cols_f32_2(xp, M, K, units, mb, me, w, ldw, 2, bias, n, y, ldy); break;
                default: cols_f32_1(xp, M, K, units, mb, me, w, ldw, 1, bias, n, y, ldy); break;
                }
            }
            n += nr;
        }
    }
}

/* ---- few-row matmuls (decode): the weights streamed once, 16 per zmm ---- */

/* a few-row tile's M x R accumulators, zeroed; then their sums to y[m][n + r·rs] (+ bias) */
AI void acc_zero(__m512 acc[4][8], const int M, const int R)
{
    #pragma GCC unroll 4
    for (int m = 0; m < M; m++)
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) acc[m][r] = _mm512_setzero_ps();
}

AI void acc_store(__m512 acc[4][8], const int M, const int R, int64_t n, int64_t rs, const float *bias, float *y,
                  int64_t ldy)
{
    #pragma GCC unroll 4
    for (int m = 0; m < M; m++)
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            float v = _mm512_reduce_add_ps(acc[m][r]);
            y[m * ldy + n + r * rs] = bias ? v + bias[n + r * rs] : v;
        }
}

/* f32 or 16-bit weights (h): M rows of x against R weight rows n, n + rs, .., one 16-lane
 * accumulator per (row, weight row), the same FMA sequence for every accumulator whatever
 * M, R and rs are. For one x row, 4 rows a quarter of the task apart (rs) keep 4 prefetch
 * streams a thread: f32 decode 0.89-0.91 -> 0.96-0.99 of the same-run read against 8
 * adjacent rows; for bf16 the tile runs 93-94 GB/s from L3 on 2 threads against 82 for the
 * per-row kernel with four accumulators it replaced (llama-188m shapes, 2026-11-26). */
AI void gemv_tile(const int h, const float *x, int64_t ldx, const int M, const int R, int64_t K,
                  const void *w, int64_t n, int64_t rs, const float *bias, float *y, int64_t ldy)
{
    __m512 acc[4][8];
    const void *wr[8];
    size_t es = h ? 2 : 4;
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) wr[r] = (const char *)w + (size_t)((n + r * rs) * K) * es;
    acc_zero(acc, M, R);
    int64_t k = 0;
    for (; k + 16 <= K; k += 16) {
        __m512 xv[4];
        #pragma GCC unroll 4
        for (int m = 0; m < M; m++) xv[m] = _mm512_loadu_ps(x + m * ldx + k);
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512 wv = w16(h, wr[r], k);
            #pragma GCC unroll 4
            for (int m = 0; m < M; m++) acc[m][r] = _mm512_fmadd_ps(xv[m], wv, acc[m][r]);
        }
    }
    if (k < K) {
        __mmask16 mk = (__mmask16)((1u << (K - k)) - 1);
        __m512 xv[4];
        #pragma GCC unroll 4
        for (int m = 0; m < M; m++) xv[m] = _mm512_maskz_loadu_ps(mk, x + m * ldx + k);
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512 wv = w16_mask(h, wr[r], k, mk);
            #pragma GCC unroll 4
            for (int m = 0; m < M; m++) acc[m][r] = _mm512_fmadd_ps(xv[m], wv, acc[m][r]);
        }
    }
    acc_store(acc, M, R, n, rs, bias, y, ldy);
}

#define GEMV_R3 4 /* weight rows a tile for 3 and 4 x rows */
#define GEMV_R4 4
#include "cpu_gemv_tiles.h"

static void gemv_f32(const float *x, int64_t ldx, int M, int64_t K, const float *w, int64_t n0,
                     int64_t n1, const float *bias, float *y, int64_t ldy)
{
    GEMV_SWITCH(f32)
}

/* bf16 weights on vdpbf16ps where x is bf16 already (bf16 compute): x narrowed once a call,
 * then 32 k an instruction with no widening, the products exact as the widening tile's (which
 * ran 52 GB/s from L3 on two threads: under the memory in its fast minutes). Same accumulator
 * sequence for every (x row, weight row) whatever M, R and rs, as gemv_tile. */
#define GEMV_DP_KMAX 8192 /* x rows of K bf16 on the stack: 4 x 16 KiB */
AI void gemv_tile_dp(const uint16_t *xb, const int M, const int R, int64_t K, const uint16_t *w, int64_t n,
                     int64_t rs, const float *bias, float *y, int64_t ldy)
{
    __m512 acc[4][8];
    const uint16_t *wr[8];
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) wr[r] = w + (n + r * rs) * K;
    acc_zero(acc, M, R);
    int64_t k = 0;
    for (; k + 32 <= K; k += 32) {
        __m512bh xv[4];
        #pragma GCC unroll 4
        for (int m = 0; m < M; m++) xv[m] = (__m512bh)_mm512_loadu_ps(xb + m * K + k);
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512bh wv = (__m512bh)_mm512_loadu_ps(wr[r] + k);
            #pragma GCC unroll 4
            for (int m = 0; m < M; m++) acc[m][r] = _mm512_dpbf16_ps(acc[m][r], xv[m], wv);
        }
    }
    if (k < K) { /* the last k, zero past K in x and w */
        __mmask32 mk = (__mmask32)((1ull << (K - k)) - 1);
        __m512bh xv[4];
        #pragma GCC unroll 4
        for (int m = 0; m < M; m++) xv[m] = (__m512bh)_mm512_castsi512_ps(_mm512_maskz_loadu_epi16(mk, xb + m * K + k));
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512bh wv = (__m512bh)_mm512_castsi512_ps(_mm512_maskz_loadu_epi16(mk, wr[r] + k));
            #pragma GCC unroll 4
            for (int m = 0; m < M; m++) acc[m][r] = _mm512_dpbf16_ps(acc[m][r], xv[m], wv);
        }
    }
    acc_store(acc, M, R, n, rs, bias, y, ldy);
}

/* 0 where x holds a value bf16 cannot (f32 activations): those keep the widening tile,
 * whose products are of x as given */
static int gemv_bf16_dp(const float *x, int64_t ldx, int M, int64_t K, const uint16_t *w, int64_t n0,
                        int64_t n1, const float *bias, float *y, int64_t ldy)
{
    uint16_t xb[4 * GEMV_DP_KMAX] __attribute__((aligned(64)));
    __mmask16 off = 0;
    for (int m = 0; m < M; m++)
        for (int64_t k = 0; k < K; k += 16) {
            __mmask16 mk = (__mmask16)(K - k >= 16 ? 0xffff : (1u << (K - k)) - 1);
            __m512 v = _mm512_maskz_loadu_ps(mk, x + m * ldx + k);
            __m256i b = (__m256i)_mm512_cvtneps_pbh(v);
            __m512 back = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(b), 16));
            off |= _mm512_cmp_ps_mask(v, back, _CMP_NEQ_UQ);
            _mm256_mask_storeu_epi16(xb + m * K + k, mk, b);
        }
    if (off) return 0;
#define GEMV_TILE_DP(MM_, R_, n_, rs_) gemv_tile_dp(xb, MM_, R_, K, w, n_, rs_, bias, y, ldy)
    GEMV_BY_M(GEMV_TILE_DP, M, n0, n1)
#undef GEMV_TILE_DP
    return 1;
}

static void gemv_h(int h, const float *x, int64_t ldx, int M, int64_t K, const uint16_t *w,
                   int64_t n0, int64_t n1, const float *bias, float *y, int64_t ldy)
{
    if (h == CPU_H_BF16 && have_bf16_dot && K <= GEMV_DP_KMAX && M <= 4 &&
        gemv_bf16_dp(x, ldx, M, K, w, n0, n1, bias, y, ldy))
        return;
    if (h == CPU_H_BF16) {
        GEMV_SWITCH(bf16)
    } else {
        GEMV_SWITCH(f16)
    }
}

/* ---- attention for few query rows (decode) ---- */

/* a[i] (16 vectors) to one vector of their 16 horizontal sums, lane i = sum of a[i] */
AI __m512 hsum16(__m512 a[16])
{
    __m512 c[8], e[4], f[2];
    #pragma GCC unroll 8
    for (int i = 0; i < 8; i++) /* 128-bit blocks: [a0+a2, a1+a3] of a[2i], then of a[2i+1] */
        c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xee));
    #pragma GCC unroll 4
    for (int i = 0; i < 4; i++) /* blocks: 4 partials of keys 4i .. 4i+3 */
        e[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0x88),
                             _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0xdd));
    #pragma GCC unroll 2
    for (int i = 0; i < 2; i++)
        f[i] = _mm512_add_ps(_mm512_shuffle_ps(e[2 * i], e[2 * i + 1], 0x88),
                             _mm512_shuffle_ps(e[2 * i], e[2 * i + 1], 0xdd));
    /* block b, lane l now holds key b + 4l */
    __m512 g = _mm512_add_ps(_mm512_shuffle_ps(f[0], f[1], 0x88), _mm512_shuffle_ps(f[0], f[1], 0xdd));
    const __m512i idx = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(idx, g);
}

/* row i of a key or value block of ld elements a row, in bytes of its dtype */
AI const void *kv_row(const int h, const void *k, int64_t i, int64_t ld)
{
    return (const char *)k + (size_t)(i * ld) * (h ? 2u : 4u);
}

/* G rows of q against KN keys (G·KN <= 16): accumulator g·KN + i is row g · key i, summed over
 * d in chunks of 16 in order (as one row against 16 keys), so each key chunk is loaded once for
 * the G rows and each q chunk once for the KN keys; rows past n repeat the tile's first key */
AI void qk_tile(const int h, const float *q, int64_t ldq, const int G, const int KN, const void *k, int64_t ldk,
                int64_t nk, int64_t d, __m512 sc, float *s, int64_t lds)
{
    const void *kr[8];
    __m512 a[16];
    #pragma GCC unroll 8
    for (int i = 0; i < KN; i++) kr[i] = kv_row(h, k, i < nk ? i : 0, ldk);
    #pragma GCC unroll 16
    for (int j = 0; j < 16; j++) a[j] = _mm512_setzero_ps();
    for (int64_t c = 0; c < d; c += 16) {
        __mmask16 mk = (__mmask16)(d - c >= 16 ? 0xffff : (1u << (d - c)) - 1);
        __m512 qv[4];
        #pragma GCC unroll 4
        for (int g = 0; g < G; g++) qv[g] = _mm512_maskz_loadu_ps(mk, q + g * ldq + c);
        #pragma GCC unroll 8
        for (int i = 0; i < KN; i++) {
            __m512 kv = w16_mask(h, kr[i], c, mk);
            #pragma GCC unroll 4
            for (int g = 0; g < G; g++) a[g * KN + i] = _mm512_fmadd_ps(qv[g], kv, a[g * KN + i]);
        }
    }
    __m512 r = _mm512_mul_ps(hsum16(a), sc);
    if (KN == 4) { /* literal block numbers: the immediate must be constant at every -O */
        __mmask8 m = (__mmask8)((1u << nk) - 1);
        _mm_mask_storeu_ps(s, m, _mm512_extractf32x4_ps(r, 0));
        _mm_mask_storeu_ps(s + lds, m, _mm512_extractf32x4_ps(r, 1));
        _mm_mask_storeu_ps(s + 2 * lds, m, _mm512_extractf32x4_ps(r, 2));
        if (G == 4) _mm_mask_storeu_ps(s + 3 * lds, m, _mm512_extractf32x4_ps(r, 3));
    } else {
        __mmask8 m = (__mmask8)((1u << nk) - 1);
        _mm256_mask_storeu_ps(s, m, _mm512_extractf32x8_ps(r, 0));
        _mm256_mask_storeu_ps(s + lds, m, _mm512_extractf32x8_ps(r, 1));
    }
}

AI void qk_h(const int h, const float *q, int64_t ldq, int G, const void *k, int64_t ldk, int64_t n, int64_t d,
             float scale, float *s, int64_t lds)
{
    __m512 sc = _mm512_set1_ps(scale);
    if (G >= 2) { /* query rows side by side: 4 keys (8 for two rows) a tile */
        int kn = G == 2 ? 8 : 4;
        for (int64_t i0 = 0; i0 < n; i0 += kn) {
            int64_t nk = n - i0 < kn ? n - i0 : kn;
            const void *ki = kv_row(h, k, i0, ldk);
            switch (G) {
            case 2: qk_tile(h, q, ldq, 2, 8, ki, ldk, nk, d, sc, s + i0, lds); break;
            case 3: qk_tile(h, q, ldq, 3, 4, ki, ldk, nk, d, sc, s + i0, lds); break;
            default: qk_tile(h, q, ldq, 4, 4, ki, ldk, nk, d, sc, s + i0, lds); break;
            }
        }
        return;
    }
    for (int64_t i0 = 0; i0 < n; i0 += 16) {
        int64_t nk = n - i0 < 16 ? n - i0 : 16;
        const void *kr[16];
        __m512 a[16];
        #pragma GCC unroll 16
        for (int i = 0; i < 16; i++) { /* rows past n repeat the first: computed, not stored */
            kr[i] = kv_row(h, k, i0 + (i < nk ? i : 0), ldk);
            a[i] = _mm512_setzero_ps();
        }
        for (int64_t c = 0; c < d; c += 16) {
            __mmask16 mk = (__mmask16)(d - c >= 16 ? 0xffff : (1u << (d - c)) - 1);
            __m512 qv = _mm512_maskz_loadu_ps(mk, q + c);
            #pragma GCC unroll 16
            for (int i = 0; i < 16; i++) a[i] = _mm512_fmadd_ps(qv, w16_mask(h, kr[i], c, mk), a[i]);
        }
        _mm512_mask_storeu_ps(s + i0, (__mmask16)((1u << nk) - 1), _mm512_mul_ps(hsum16(a), sc));
    }
}

static void attn_qk(int h, const float *q, int64_t ldq, int G, const void *k, int64_t ldk, int64_t n, int64_t d,
                    float scale, float *s, int64_t lds)
{
    switch (h) { /* one copy of the loops per key dtype: the load is resolved at compile time */
    case CPU_H_F16: qk_h(CPU_H_F16, q, ldq, G, k, ldk, n, d, scale, s, lds); break;
    case CPU_H_BF16: qk_h(CPU_H_BF16, q, ldq, G, k, ldk, n, d, scale, s, lds); break;
    default: qk_h(0, q, ldq, G, k, ldk, n, d, scale, s, lds); break;
    }
}

/* acc rows of G heads, 64 columns from c0 (masked past d), over keys [0, n) */
AI void pv_cols(const int h, const float *p, int64_t ldp, const int G, const void *v, int64_t ldv, int64_t n,
                int64_t d, int64_t c0, float *acc)
{
    __mmask16 mk[4];
    __m512 a[4][4];
    #pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        int64_t left = d - c0 - 16 * c;
        mk[c] = (__mmask16)(left >= 16 ? 0xffff : left <= 0 ? 0 : (1u << left) - 1);
    }
    #pragma GCC unroll 4
    for (int g = 0; g < G; g++)
        #pragma GCC unroll 4
        for (int c = 0; c < 4; c++) a[g][c] = _mm512_maskz_loadu_ps(mk[c], acc + g * d + c0 + 16 * c);
    for (int64_t i = 0; i < n; i++) {
        __m512 vv[4];
        const void *vr = kv_row(h, v, i, ldv);
        #pragma GCC unroll 4
        for (int c = 0; c < 4; c++) vv[c] = w16_mask(h, vr, c0 + 16 * c, mk[c]);
        #pragma GCC unroll 4
        for (int g = 0; g < G; g++) {
            __m512 pb = _mm512_set1_ps(p[g * ldp + i]);
            #pragma GCC unroll 4
            for (int c = 0; c < 4; c++) a[g][c] = _mm512_fmadd_ps(pb, vv[c], a[g][c]);
        }
    }
    #pragma GCC unroll 4
    for (int g = 0; g < G; g++)
        #pragma GCC unroll 4
        for (int c = 0; c < 4; c++) _mm512_mask_storeu_ps(acc + g * d + c0 + 16 * c, mk[c], a[g][c]);
}

AI void pv_h(const int h, const float *p, int64_t ldp, int G, const void *v, int64_t ldv, int64_t n, int64_t d,
             float *acc)
{
    for (int64_t c0 = 0; c0 < d; c0 += 64) {
        switch (G) {
        case 1: pv_cols(h, p, ldp, 1, v, ldv, n, d, c0, acc); break;
        case 2: pv_cols(h, p, ldp, 2, v, ldv, n, d, c0, acc); break;
        case 3: pv_cols(h, p, ldp, 3, v, ldv, n, d, c0, acc); break;
        default: pv_cols(h, p, ldp, 4, v, ldv, n, d, c0, acc); break;
        }
    }
}

static void attn_pv(int h, const float *p, int64_t ldp, int G, const void *v, int64_t ldv, int64_t n, int64_t d,
                    float *acc)
{
    switch (h) {
    case CPU_H_F16: pv_h(CPU_H_F16, p, ldp, G, v, ldv, n, d, acc); break;
    case CPU_H_BF16: pv_h(CPU_H_BF16, p, ldp, G, v, ldv, n, d, acc); break;
    default: pv_h(0, p, ldp, G, v, ldv, n, d, acc); break;
    }
}

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif

static cpu_isa table;
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void table_init(void)
{
    __builtin_cpu_init();
    have_bf16_dot = __builtin_cpu_supports("avx512bf16");
    table = cpu_isa_avx2;
    table.name = have_bf16_dot ? "avx512+bf16" : "avx512";
    table.gemm_x_floats = x_floats;
    table.gemm_pack = x_pack;
    table.gemm = gemm;
    table.gemv = gemv_f32;
    table.gemv_h = gemv_h;
    table.attn_qk = attn_qk;
    table.attn_pv = attn_pv;
}

const cpu_isa *cpu_isa_avx512_init(void)
{
    pthread_once(&table_once, table_init);
    return &table;
}
#endif
