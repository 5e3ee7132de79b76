/* One row, VEC, 16-bit weights: the streaming form. The grid is at most what the GPU holds at
 * once; a block builds x's row (the residual added, normed) in shared memory once, then takes the
 * column groups blockIdx.x, blockIdx.x + gridDim.x, ... and its warps stream their weights without
 * a pause: two register sets of GV_U vectors, each set's next round loaded right after its dots,
 * across the columns' ends, so a warp always has a round in flight while it computes the other
 * (k_gemv waits for each round and rebuilds the row in every block of its columns). KS warps of a
 * block share a column where the columns alone would leave the last groups' blocks idle. */
#include "gpu_gemv.h"

#define GS_WARPS 8

template <int WD, bool GLU> struct gs_set {
    pk8<WD> w[GV_U], u[GLU ? GV_U : 1];
};

template <int WD, bool GLU, int KS>
__global__ __launch_bounds__(GS_WARPS * 32) static void k_gemv_stream(gpu_ten x, gv_segs sg,
                                                                      const void *__restrict__ wu,
                                                                      int64_t K, int64_t groups)
{
    constexpr int CPG = GS_WARPS / KS; /* columns a group */
    __shared__ float red[KS > 1 ? 2 : 1][KS > 1 ? GS_WARPS : 1][GLU ? 2 : 1];
    extern __shared__ float4 xsm4[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % KS;
    const int64_t Nt = sg.end[sg.n - 1], kst = (int64_t)(part * 32 + lane) * 8;
    const int64_t step = (int64_t)256 * KS * GV_U, R = (K + step - 1) / step; /* rounds a column */
    const int64_t iters = (groups - blockIdx.x + gridDim.x - 1) / gridDim.x, T = iters * R;
    const bool nrm = sg.g.p != NULL;
    gs_set<WD, GLU> A, B;
    int64_t li = 0, lr = 0; /* the next round to load: its iteration and round */
    auto col = [&](int64_t i) { return ((int64_t)blockIdx.x + i * gridDim.x) * CPG + warp / KS; };
    auto load = [&](gs_set<WD, GLU> &S) {
        int64_t n = col(li), N;
        if (n < Nt) {
            const int si = gemv_seg(sg, &n, &N);
            gv_round<WD, GLU, KS>(S.w, S.u, sg.w[si], wu, n * K, kst + lr * step, K);
        }
        if (++lr == R)
            lr = 0, li++;
    };
    RLX_PDL_TRIGGER(); /* the next GEMV may launch now and prefetch its weights */
    if (sg.early) { /* constant weights: both sets before the wait */
        load(A);
        if (T > 1)
            load(B);
    }
    RLX_PDL_WAIT(); /* x, bias and residual may come from the kernel before */
    if (!sg.early) {
        load(A);
        if (T > 1)
            load(B);
    }
    if (sg.xres.p && !sg.last)
        gv_store_sum(x, sg, K);
    const float ssb = gv_build_row<GS_WARPS>(x, sg, K, nrm, xsm4); /* the row is whole */
    if (sg.last) /* the sum over x or the residual: stored once every block has read both */
        gv_sum_last(x, sg);
    const float rn = nrm ? rsqrtf(ssb / (float)K + sg.eps) : 1.0f;
    float acc = 0.0f, accu = 0.0f;
    int64_t ci = 0, cr = 0; /* the round to compute */
    auto dots = [&](gs_set<WD, GLU> &S) {
        const int64_t n0 = col(ci);
        if (n0 < Nt) {
            const int64_t k0 = kst + cr * step;
#pragma unroll
            for (int u = 0; u < GV_U; u++) {
                const int64_t k = k0 + u * 256 * KS;
                if (k < K) {
                    float wf[8], uf[8], xf[8];
                    pk8_unpack<WD>(S.w[u], wf);
                    if (GLU)
                        pk8_unpack<WD>(S.u[GLU ? u : 0], uf);
                    const float4 a = xsm4[k / 4], b = xsm4[k / 4 + 1];
                    xf[0] = a.x, xf[1] = a.y, xf[2] = a.z, xf[3] = a.w;
                    xf[4] = b.x, xf[5] = b.y, xf[6] = b.z, xf[7] = b.w;
#pragma unroll
                    for (int e = 0; e < 8; e++) {
                        acc += wf[e] * xf[e];
                        if (GLU)
                            accu += uf[e] * xf[e];
                    }
                }
            }
        }
        if (cr == R - 1) { /* the column's last round: reduce it and store */
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                acc += RLX_SHFL_XOR(acc, o, 32);
                if (GLU)
                    accu += RLX_SHFL_XOR(accu, o, 32);
            }
            if (KS > 1) { /* the parts of a column: summed by the first warp */
                const int par = KS > 1 ? (int)(ci & 1) : 0;
                if (lane == 0) {
                    red[par][KS > 1 ? warp : 0][0] = acc;
                    if (GLU)
                        red[par][KS > 1 ? warp : 0][GLU ? 1 : 0] = accu;
                }
                __syncthreads();
                if (part == 0)
#pragma unroll
                    for (int p = 1; p < KS; p++) {
                        acc += red[par][KS > 1 ? warp + p : 0][0];
                        if (GLU)
                            accu += red[par][KS > 1 ? warp + p : 0][GLU ? 1 : 0];
                    }
            }
            if (part == 0 && lane == 0 && n0 < Nt) {
                int64_t n = n0, N;
                const int si = gemv_seg(sg, &n, &N);
                gv_store<GLU>(sg, si, n, n, acc * rn, accu * rn);
            }
            acc = accu = 0.0f;
        }
        if (++cr == R)
            cr = 0, ci++;
    };
    for (int64_t t = 0; t < T; t += 2) {
        dots(A);
        if (t + 2 < T)
            load(A);
        if (t + 1 >= T)
            break;
        dots(B);
        if (t + 3 < T)
            load(B);
    }
}

/* the row's shared memory asked for on this device */
template <int WD, bool GLU, int KS> static void gs_opt_in()
{
    static unsigned char opted[64];
    smem_opt_in(k_gemv_stream<WD, GLU, KS>, GS_ROW_MAX, opted);
}

/* blocks of k_gemv_stream an SM holds with a row of K: a few K's remembered per instance
 * (one word each, so the host threads of several GPUs may share them) */
template <int WD, bool GLU, int KS> static int gs_resident(int64_t K)
{
    static uint64_t memo[4];
    uint64_t *m = &memo[(K >> 8) & 3], v = __atomic_load_n(m, __ATOMIC_RELAXED);
    if (v && (int64_t)(v >> 8) == K)
        return (int)(v & 0xff);
    void (*k)(gpu_ten, gv_segs, const void *, int64_t, int64_t) = k_gemv_stream<WD, GLU, KS>;
    gs_opt_in<WD, GLU, KS>(); /* a row past 48 KiB counts only once asked for */
    int b = 0;
    if (gpuOccupancyMaxActiveBlocksPerMultiprocessor(&b, k, GS_WARPS * 32, (size_t)K * 4) !=
            gpuSuccess ||
        b < 1)
        b = 1;
    b = b > 255 ? 255 : b;
    __atomic_store_n(m, (uint64_t)K << 8 | (uint64_t)b, __ATOMIC_RELAXED);
    return b;
}

template <int WD, bool GLU, int KS>
static void gs_launch_ks(gpuStream_t s, gpu_ten x, const gv_segs &sg, const void *wu, int64_t K, int64_t grid)
{
    const int64_t groups = (sg.end[sg.n - 1] + GS_WARPS / KS - 1) / (GS_WARPS / KS);
    gs_opt_in<WD, GLU, KS>(); /* gs_resident's memo may come from another device */
    rlx_launch_pdl(rlx_pdl_on(1), k_gemv_stream<WD, GLU, KS>, dim3((unsigned)(grid < groups ? grid : groups)),
                   dim3(GS_WARPS * 32), (size_t)K * 4, s, x, sg, wu, K, groups);
}

/* blocks an SM holds of the instance with 1 << i warps a column */
template <int WD, bool GLU> static int gs_resident_i(int i, int64_t K)
{
    return i == 0 ? gs_resident<WD, GLU, 1>(K) : i == 1 ? gs_resident<WD, GLU, 2>(K)
         : i == 2 ? gs_resident<WD, GLU, 4>(K) : gs_resident<WD, GLU, 8>(K);
}

/* KS = 1 << i: the fewest parts a column whose last round of groups keeps >= 90 % of the
 * resident blocks busy (else the best of 1, 2, 4, 8), unless ks forces it; the grid: the
 * resident blocks */
template <int WD, bool GLU>
static void gs_launch(gpuStream_t s, gpu_ten x, const gv_segs &sg, const void *wu, int64_t K, int ks)
{
    int dev = 0, sms = 1;
    (void)gpuGetDevice(&dev);
    if (gpuDeviceGetAttribute(&sms, gpuDevAttrSmCount, dev) != gpuSuccess || sms < 1)
        sms = 1;
    const int64_t Nt = sg.end[sg.n - 1];
    int best = ks < 0 ? 0 : ks;
    double beff = -1.0;
    for (int i = 0; ks < 0 && i < 4 && (i == 0 || K >= (int64_t)256 << i); i++) {
        const int64_t cpg = GS_WARPS >> i, groups = (Nt + cpg - 1) / cpg;
        const int64_t gmax = (int64_t)gs_resident_i<WD, GLU>(i, K) * sms, iters = (groups + gmax - 1) / gmax;
        const double eff = (double)groups / (double)(gmax * iters);
        if (eff > beff + 1e-9)
            best = i, beff = eff;
        if (eff >= 0.9)
            break;
    }
    const int64_t grid = (int64_t)gs_resident_i<WD, GLU>(best, K) * sms;
    if (best == 0)
        gs_launch_ks<WD, GLU, 1>(s, x, sg, wu, K, grid);
    else if (best == 1)
        gs_launch_ks<WD, GLU, 2>(s, x, sg, wu, K, grid);
    else if (best == 2)
        gs_launch_ks<WD, GLU, 4>(s, x, sg, wu, K, grid);
    else
        gs_launch_ks<WD, GLU, 8>(s, x, sg, wu, K, grid);
}

template <bool GLU>
static void gs_launch_w(gpuStream_t s, int wdt, gpu_ten x, const gv_segs &sg, const void *wu, int64_t K, int ks)
{
    if (wdt == GDT_BF16)
        gs_launch<GDT_BF16, GLU>(s, x, sg, wu, K, ks);
    else
        gs_launch<GDT_F16, GLU>(s, x, sg, wu, K, ks);
}

void gpu_gemv_stream(gpuStream_t s, int wdt, gpu_ten x, const gv_segs &sg, const void *wu, int64_t K, int ks)
{
    if (wu)
        gs_launch_w<true>(s, wdt, x, sg, wu, K, ks);
    else
        gs_launch_w<false>(s, wdt, x, sg, NULL, K, ks);
}
