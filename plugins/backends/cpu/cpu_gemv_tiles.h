/* The few-row GEMV entry points of one ISA table, generated around the gemv_tile the
 * including file defines (its tile widths: GEMV_R3 and GEMV_R4 weight rows a tile for 3 and
 * 4 x rows; 2 x rows take 4): gemv_<dtype>_m<M> for M = 1..4 and dtypes f32, f16, bf16, and
 * GEMV_SWITCH(dtype) to call the one for M. Every entry runs the tile's FMA sequence, so
 * how rows are grouped never changes a value. One x row reads rows n, n+q, n+2q, n+3q at
 * once, a quarter of the task apart: a thread keeps 4 prefetch streams (docs/perf-notes.md,
 * "f32 decode: four rows a quarter of the task apart"). */
#ifndef RLX_CPU_GEMV_TILES_H
#define RLX_CPU_GEMV_TILES_H

#define GEMV_T(HN, H, MM, RR)                                                                  \
    static void gemv_##HN##_m##MM(const float *x, int64_t ldx, int64_t K, const void *w,      \
                                  int64_t n0, int64_t n1, const float *bias, float *y,         \
                                  int64_t ldy)                                                 \
    {                                                                                          \
        int64_t n = n0;                                                                        \
        for (; n + RR <= n1; n += RR) gemv_tile(H, x, ldx, MM, RR, K, w, n, 1, bias, y, ldy);  \
        for (; n < n1; n++) gemv_tile(H, x, ldx, MM, 1, K, w, n, 1, bias, y, ldy);             \
    }
#define GEMV_T1(HN, H)                                                                         \
    static void gemv_##HN##_m1(const float *x, int64_t ldx, int64_t K, const void *w, int64_t n0, \
                               int64_t n1, const float *bias, float *y, int64_t ldy)             \
    {                                                                                          \
        const int64_t q = (n1 - n0) / 4;                                                       \
        for (int64_t n = n0; n < n0 + q; n++) gemv_tile(H, x, ldx, 1, 4, K, w, n, q, bias, y, ldy); \
        for (int64_t n = n0 + 4 * q; n < n1; n++) gemv_tile(H, x, ldx, 1, 1, K, w, n, 1, bias, y, ldy); \
    }
#define GEMV_ALL(HN, H) \
    GEMV_T1(HN, H) GEMV_T(HN, H, 2, 4) GEMV_T(HN, H, 3, GEMV_R3) GEMV_T(HN, H, 4, GEMV_R4)
GEMV_ALL(f32, 0)
GEMV_ALL(f16, CPU_H_F16)
GEMV_ALL(bf16, CPU_H_BF16)

#define GEMV_SWITCH(HN)                                                      \
    switch (M) {                                                             \
    case 1: gemv_##HN##_m1(x, ldx, K, w, n0, n1, bias, y, ldy); break;      \
    case 2: gemv_##HN##_m2(x, ldx, K, w, n0, n1, bias, y, ldy); break;      \
    case 3: gemv_##HN##_m3(x, ldx, K, w, n0, n1, bias, y, ldy); break;      \
    default: gemv_##HN##_m4(x, ldx, K, w, n0, n1, bias, y, ldy); break;     \
    }
#endif
