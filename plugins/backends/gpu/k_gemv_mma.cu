/* Batched decode's skinny products (2 <= M <= GPU_GEMV_MAX_M rows) on tensor cores. The SIMT
 * GEMV (k_gemv.cu) loads, beside every 16 bytes of weights, 16 bytes of x for each row and
 * does M FMAs a weight: at 8 rows that is L1- and FMA-bound, 5-7x its one-row time. Here
 * one block takes 16 columns, its warps split K in 32-wide steps: a lane loads 8 weights of
 * columns g and g + 8 and 8 elements of row g of x (16 bytes each), and the step is two
 * m16n8k16 MMAs (columns as A's rows, x's rows as B's columns; the 8 elements of a lane
 * stand in for its fragment's k indices, the same order for A and B, so any k order is a
 * valid one). A lane's weights for U steps load before it waits on the kernel before
 * (weights are constant), and with one n8 tile of rows its x for those U steps loads with
 * them (x is read from L2 by every block: loaded right before each step's MMAs it added a
 * second round trip to every round); the warps' partial sums meet in shared memory and
 * warp 0 applies gpu_gemv_multi's epilogues: bias, SwiGLU (wu: the up weights), the
 * residual add. */
#include "gpu_mma.h"

#define GM_WARPS 8 /* a block's warps, each every 8th step of K */

int gpu_gemv_mma_ok(int wdt, int xdt, int64_t N, int64_t K)
{
#if defined(RLX_GPU_HIP)
    (void)wdt, (void)xdt, (void)N, (void)K;
    return 0;
#else
    return (wdt == GDT_BF16 || wdt == GDT_F16) && xdt == wdt && N > 0 && N % 16 == 0 && K > 0 && K % 32 == 0;
#endif
}

#if defined(RLX_GPU_HIP)
int gpu_gemv_mma(gpuStream_t s, gpu_ten x, gpu_ten wu, const gpu_gemv_seg *seg, int nseg, int64_t M, int64_t K)
{
    (void)s, (void)x, (void)wu, (void)seg, (void)nseg, (void)M, (void)K;
    return 0;
}
#else

/* a lane's weights for the U steps s0, s0 + GM_WARPS, ...: 8 of column g (ra) and of g + 8 (rb) */
template <bool GLU, int U>
__device__ __forceinline__ void gm_load(uint4 *wa, uint4 *wb, uint4 *ua, uint4 *ub, const uint16_t *w,
                                        const uint16_t *wu, int64_t ra, int64_t rb, int s0, int steps, int t)
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int s = s0 + u * GM_WARPS;
        if (s < steps) {
            const int64_t k = (int64_t)s * 32 + t * 8;
            wa[u] = *(const uint4 *)(w + ra + k);
            wb[u] = *(const uint4 *)(w + rb + k);
            if (GLU) {
                ua[GLU ? u : 0] = *(const uint4 *)(wu + ra + k);
                ub[GLU ? u : 0] = *(const uint4 *)(wu + rb + k);
            }
        }
    }
}

/* a lane's 16 bytes of x's row m at step s (zeros past the M rows) */
__device__ __forceinline__ uint4 gm_x(const uint16_t *__restrict__ x, int m, int M, int K, int s, int t)
{
    return m < M ? *(const uint4 *)(x + (int64_t)m * K + (int64_t)s * 32 + t * 8) : make_uint4(0, 0, 0, 0);
}

/* a lane's x of row g (of each n8 tile) for the U steps s0, s0 + GM_WARPS, ... */
template <int MT, int U>
__device__ __forceinline__ void gm_load_x(uint4 (*xr)[MT], const uint16_t *__restrict__ x, int M, int K, int s0,
                                          int steps, int g, int t)
{
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int s = s0 + u * GM_WARPS;
        if (s < steps)
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                xr[u][mt] = gm_x(x, mt * 8 + g, M, K, s, t);
    }
}

/* MT n8 tiles of x's rows (M <= 8 MT); U steps of weights in flight a lane (XR: and of x,
 * loaded with them instead of right before each step's MMAs: x comes from L2) */
template <int DT, bool GLU, int MT, int U, bool XR>
__global__ __launch_bounds__(GM_WARPS * 32) static void k_gemv_mma(const uint16_t *__restrict__ x, gemv_segs sg,
                                                                   const uint16_t *__restrict__ wu, int M, int K,
                                                                   int early)
{
    constexpr int NC = MT * 4; /* a lane's accumulators a product */
    __shared__ float red[GM_WARPS - 1][GLU ? 2 * NC : NC][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    int64_t n0 = (int64_t)blockIdx.x * 16;
    int64_t N;
    const int si = gemv_seg(sg, &n0, &N);
    const uint16_t *w = (const uint16_t *)sg.w[si];
    const int64_t ra = (n0 + g) * K, rb = ra + 8 * (int64_t)K;
    const int steps = K / 32;
    float c[MT][4], cu[GLU ? MT : 1][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            c[mt][e] = 0.0f;
            if (GLU)
                cu[GLU ? mt : 0][e] = 0.0f;
        }
    uint4 wa[U], wb[U], ua[GLU ? U : 1], ub[GLU ? U : 1];
    RLX_PDL_TRIGGER(); /* the kernel after may launch and fetch its weights */
    if (early) /* fixed weights: their first round overlaps the kernel before */
        gm_load<GLU, U>(wa, wb, ua, ub, w, wu, ra, rb, warp, steps, t);
    RLX_PDL_WAIT(); /* x (and weights that are not fixed) may come from the kernel before */
    uint4 xr[XR ? U : 1][MT];
    for (int s0 = warp; s0 < steps; s0 += GM_WARPS * U) {
        if (s0 != warp || !early)
            gm_load<GLU, U>(wa, wb, ua, ub, w, wu, ra, rb, s0, steps, t);
        if (XR)
            gm_load_x<MT, XR ? U : 1>(xr, x, M, K, s0, steps, g, t);
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int s = s0 + u * GM_WARPS;
            if (s >= steps)
                break;
            uint4 xb[MT];
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                xb[mt] = XR ? xr[XR ? u : 0][mt] : gm_x(x, mt * 8 + g, M, K, s, t);
            const uint32_t a0[4] = {wa[u].x, wb[u].x, wa[u].y, wb[u].y};
            const uint32_t a1[4] = {wa[u].z, wb[u].z, wa[u].w, wb[u].w};
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                mma16816<DT>(c[mt], a0, xb[mt].x, xb[mt].y);
                mma16816<DT>(c[mt], a1, xb[mt].z, xb[mt].w);
            }
            if (GLU) {
                const uint32_t b0[4] = {ua[GLU ? u : 0].x, ub[GLU ? u : 0].x, ua[GLU ? u : 0].y, ub[GLU ? u : 0].y};
                const uint32_t b1[4] = {ua[GLU ? u : 0].z, ub[GLU ? u : 0].z, ua[GLU ? u : 0].w, ub[GLU ? u : 0].w};
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    mma16816<DT>(cu[GLU ? mt : 0], b0, xb[mt].x, xb[mt].y);
                    mma16816<DT>(cu[GLU ? mt : 0], b1, xb[mt].z, xb[mt].w);
                }
            }
        }
    }
    if (warp > 0)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                red[warp - 1][mt * 4 + e][lane] = c[mt][e];
                if (GLU)
                    red[warp - 1][NC + mt * 4 + e][lane] = cu[GLU ? mt : 0][e];
            }
    __syncthreads();
    if (warp > 0)
        return;
    const gpu_ten bias = sg.bias[si], y = sg.y[si], res = sg.res[si];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float v = c[mt][e], vu = GLU ? cu[GLU ? mt : 0][e] : 0.0f;
#pragma unroll
            for (int p = 0; p < GM_WARPS - 1; p++) {
                v += red[p][mt * 4 + e][lane];
                if (GLU)
                    vu += red[p][NC + mt * 4 + e][lane];
            }
            /* C's element e of lane (g, t): column g (+ 8 for e >= 2), x's row 2t (+ 1 for odd e) */
            const int m = mt * 8 + 2 * t + (e & 1);
            const int64_t n = n0 + g + (e >> 1) * 8;
            if (m >= M)
                continue;
            if (GLU)
                v = silu_f(v) * vu;
            else if (bias.p)
                v += ldt(bias, n);
            if (res.p) /* the product as a matmul stores it, then the add */
                v = ldt(res, (int64_t)m * N + n) + round_to(sg.pdt[si], v);
            stt(y, (int64_t)m * N + n, v);
        }
}

template <int DT, bool GLU>
static void gm_launch(gpuStream_t s, const uint16_t *x, const gemv_segs &sg, const uint16_t *wu, int M, int K,
                      int early)
{
    const unsigned grid = (unsigned)(sg.end[sg.n - 1] / 16);
    constexpr int U = GLU ? 4 : 8; /* 64 registers of weights a lane either way */
    static const int xr = !rlx_env_off("RLX_GPU_MMA_XR"); /* 0: x read right before each step's MMAs */
    if (M > 8) /* two tiles' x a round: ~64 more registers, one block an SM instead of two */
        rlx_launch_pdl(rlx_pdl_on(1), k_gemv_mma<DT, GLU, 2, U, false>, dim3(grid), dim3(GM_WARPS * 32), 0, s, x, sg,
                       wu, M, K, early);
    else if (xr)
        rlx_launch_pdl(rlx_pdl_on(1), k_gemv_mma<DT, GLU, 1, U, true>, dim3(grid), dim3(GM_WARPS * 32), 0, s, x, sg,
                       wu, M, K, early);
    else
        rlx_launch_pdl(rlx_pdl_on(1), k_gemv_mma<DT, GLU, 1, U, false>, dim3(grid), dim3(GM_WARPS * 32), 0, s, x, sg,
                       wu, M, K, early);
}

int gpu_gemv_mma(gpuStream_t s, gpu_ten x, gpu_ten wu, const gpu_gemv_seg *seg, int nseg, int64_t M, int64_t K)
{
    if (M < 2 || M > GPU_GEMV_MAX_M || nseg < 1 || nseg > GPU_GEMV_SEGS || K > INT32_MAX)
        return 0;
    const int dt = seg[0].w.dt;
    for (int i = 0; i < nseg; i++)
        if (seg[i].w.dt != dt || !gpu_gemv_mma_ok(dt, x.dt, seg[i].N, K))
            return 0;
    gemv_segs sg{};
    bool fixed;
    const uintptr_t al = (uintptr_t)x.p | (uintptr_t)wu.p | gemv_segs_fill(&sg, seg, nseg, &fixed);
    const int early = fixed;
    if (al % 16 || (wu.p && wu.dt != dt) || sg.end[nseg - 1] / 16 > INT32_MAX)
        return 0;
    const uint16_t *xp = (const uint16_t *)x.p, *up = (const uint16_t *)wu.p;
    if (dt == GDT_BF16)
        wu.p ? gm_launch<GDT_BF16, true>(s, xp, sg, up, (int)M, (int)K, early)
             : gm_launch<GDT_BF16, false>(s, xp, sg, up, (int)M, (int)K, early);
    else
        wu.p ? gm_launch<GDT_F16, true>(s, xp, sg, up, (int)M, (int)K, early)
             : gm_launch<GDT_F16, false>(s, xp, sg, up, (int)M, (int)K, early);
    return 1;
}
#endif
