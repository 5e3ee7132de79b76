/* The few-row GEMV entry points of one ISA table, generated around the gemv_tile the
 * including file defines (its tile widths: GEMV_R3 and GEMV_R4 weight rows a tile for 3 and
 * 4 x rows; 2 x rows take 4): gemv_<dtype>_m<M> for M = 1..4 and dtypes f32, f16, bf16, and
 * GEMV_SWITCH(dtype) to call the one for M. Every entry runs the tile's FMA sequence, so
 * how rows are grouped never changes a value. One x row reads rows n, n+q, n+2q, n+3q at
 * once, a quarter of the task apart: a thread keeps 4 prefetch streams (docs/perf-notes.md,
 * "f32 decode: four rows a quarter of the task apart"). */
#ifndef RLX_CPU_GEMV_TILES_H
#define RLX_CPU_GEMV_TILES_H

/* columns [n0, n1) for MM x rows in the tiles' grouping, TILE(M, R, n, rs) one tile: one x
 * row takes 4 rows a quarter of the task apart, more x rows RR adjacent rows; the rest one
 * by one */
#define GEMV_GROUPS(TILE, MM, RR, n0, n1)                                  \
    do {                                                                  \
        int64_t n_ = (n0);                                                \
        if ((MM) == 1) {                                                  \
            const int64_t q_ = ((n1) - (n0)) / 4;                         \
            for (; n_ < (n0) + q_; n_++) TILE(MM, 4, n_, q_);             \
            n_ = (n0) + 4 * q_;                                           \
        } else {                                                          \
            for (; n_ + (RR) <= (n1); n_ += (RR)) TILE(MM, RR, n_, 1);    \
        }                                                                 \
        for (; n_ < (n1); n_++) TILE(MM, 1, n_, 1);                       \
    } while (0)
/* the same for any M <= 4, with each M's tile width */
#define GEMV_BY_M(TILE, M, n0, n1)                                              \
    switch (M) {                                                               \
    case 1: GEMV_GROUPS(TILE, 1, 4, n0, n1); break;                            \
    case 2: GEMV_GROUPS(TILE, 2, 4, n0, n1); break;                            \
    case 3: GEMV_GROUPS(TILE, 3, GEMV_R3, n0, n1); break;                      \
    default: GEMV_GROUPS(TILE, 4, GEMV_R4, n0, n1); break;                     \
    }
#define GEMV_TILE_H(MM_, R_, n_, rs_) gemv_tile(h_, x, ldx, MM_, R_, K, w, n_, rs_, bias, y, ldy)
#define GEMV_T(HN, H, MM, RR)                                                                  \
    static void gemv_##HN##_m##MM(const float *x, int64_t ldx, int64_t K, const void *w,      \
                                  int64_t n0, int64_t n1, const float *bias, float *y,         \
                                  int64_t ldy)                                                 \
    {                                                                                          \
        const int h_ = H;                                                                      \
        GEMV_GROUPS(GEMV_TILE_H, MM, RR, n0, n1);                                              \
    }
#define GEMV_ALL(HN, H) \
    GEMV_T(HN, H, 1, 4) GEMV_T(HN, H, 2, 4) GEMV_T(HN, H, 3, GEMV_R3) GEMV_T(HN, H, 4, GEMV_R4)
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
