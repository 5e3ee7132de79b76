/* Skinny products for decode (M <= 16 rows): the weight is read once, at full bandwidth.
 * One warp per output column n streams W's row n (16-byte loads, GV_U of them in flight
 * per lane), dots it with the M rows of x (read through L1: every warp of a block reads
 * the same x), reduces across the warp and writes M outputs with the bias or the SwiGLU
 * epilogue applied. 8 warps a block for one row (4 for more). Few columns over a long
 * row (o and down projections: N <= 4096) split the row over KS = 2 or 4 warps of one block, summed through
 * shared memory: 2-4x the warps, so enough loads in flight to stream at full bandwidth. */
#include "gpu_dtype.h"

#include <stdlib.h>
#include <string.h>

#define GV_WARPS 4      /* a block's warps (more rows than one: always) */
#define GV_WARPS_MAX 16 /* one row: up to this many (RLX_GPU_GEMV_WARPS, default 8), so fewer
                         * blocks each build the normed row */
#define GV_U 4
#define GV_XSM_MAX (32 << 10) /* bytes of the normed row a block keeps (K <= 8192) */

/* two 16-bit values of dtype dt (bf16 or f16), the low half first */
__device__ __forceinline__ void half2x(uint32_t w, int dt, float *f)
{
    if (dt == GDT_BF16) {
        f[0] = __uint_as_float(w << 16);
        f[1] = __uint_as_float(w & 0xffff0000u);
    } else {
        f[0] = f16_to_f((uint16_t)(w & 0xffffu));
        f[1] = f16_to_f((uint16_t)(w >> 16));
    }
}

/* 8 consecutive x elements at i (16-byte aligned), any float dtype */
__device__ __forceinline__ void x8_load(const gpu_ten &x, int64_t i, float *f)
{
    if (x.dt == GDT_F32) {
        const float4 *p = (const float4 *)((const float *)x.p + i);
        float4 a = p[0], b = p[1];
        f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
        f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
    } else {
        uint4 u = *(const uint4 *)((const uint16_t *)x.p + i);
        half2x(u.x, x.dt, f + 0);
        half2x(u.y, x.dt, f + 2);
        half2x(u.z, x.dt, f + 4);
        half2x(u.w, x.dt, f + 6);
    }
}

/* x8_load of x, plus res rounded to dt as an add stores it when res.p is set */
__device__ __forceinline__ void x8_load_add(const gpu_ten &x, const gpu_ten &res, int dt, int64_t i, float *f)
{
    x8_load(x, i, f);
    if (res.p) {
        float r[8];
        x8_load(res, i, r);
#pragma unroll
        for (int e = 0; e < 8; e++)
            f[e] = round_to(dt, f[e] + r[e]);
    }
}

/* the segments (gemv_segs) and the norm: g.p set: x is rms-normed with g first */
struct gv_segs : gemv_segs {
    gpu_ten g, xres, xsum; /* xres.p: x + xres, rounded to xsum.dt, is the x (stored there too) */
    unsigned *last;        /* set: xsum is stored by the last block past the prologue (in place) */
    int64_t xsum_n;        /* K */
    float eps;
    int add_one;
    int xsm; /* one row, VEC, a norm: the block builds the normed row in K floats of dynamic
              * shared memory once, its warps read it there (else each warp loads x, the
              * norm weight and the residual beside every weight it streams) */
    int early; /* VEC: a warp's first GV_U weight vectors loaded before waiting on the kernel
                * before (constant data), so that round trip overlaps its tail and the prologue */
};

/* a lane's GV_U weight vectors (and GLU's up vectors) from k0 on */
template <int WD, bool GLU, int KS>
__device__ __forceinline__ void gv_round(pk8<WD> *wv, pk8<WD> *uv, const void *w, const void *wu, int64_t row,
                                         int64_t k0, int64_t K)
{
#pragma unroll
    for (int u = 0; u < GV_U; u++)
        if (k0 + u * 256 * KS < K) {
            wv[u] = pk8_load<WD>(w, row + k0 + u * 256 * KS);
            if (GLU)
                uv[GLU ? u : 0] = pk8_load<WD>(wu, row + k0 + u * 256 * KS);
        }
}

/* The block that arrives last (every block has read x and the residual into its normed
 * row) stores their sum, then leaves the counter zero for the next launch. */
__device__ __forceinline__ void gv_sum_last(const gpu_ten &x, const gv_segs &sg)
{
    __shared__ unsigned arrived;
    if (threadIdx.x == 0) {
        __threadfence();
        arrived = atomicAdd(sg.last, 1u);
    }
    __syncthreads();
    if (arrived != gridDim.x - 1)
        return;
    for (int64_t i = threadIdx.x; i < sg.xsum_n; i += blockDim.x)
        stt(sg.xsum, i, ldt(x, i) + ldt(sg.xres, i));
    if (threadIdx.x == 0)
        *sg.last = 0;
}

/* VEC: K % 8 == 0 and every row 16-byte aligned; else one element per lane per step.
 * KS warps share a column: warp part p takes the 256-element chunks p, p + KS, ... */
template <int WD, int MB, bool GLU, bool VEC, int KS>
__global__ __launch_bounds__((MB == 1 ? GV_WARPS_MAX : GV_WARPS) * 32) static void k_gemv(gpu_ten x, gv_segs sg,
                                                              const void *__restrict__ wu, int M,
                                                              int64_t K)
{
    constexpr int NA = 3 * MB; /* acc, accu, the squares of x (norm) */
    __shared__ float red[KS > 1 ? (MB == 1 ? GV_WARPS_MAX : GV_WARPS) : 1][KS > 1 ? NA : 1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % KS;
    const int nw = (int)(blockDim.x >> 5);
    int64_t n = (int64_t)blockIdx.x * (nw / KS) + warp / KS;
    const bool live = n < sg.end[sg.n - 1];
    const bool pre = MB == 1 && VEC && sg.xsm; /* every warp meets the prologue's barrier */
    if (KS == 1 && !live && !pre)
        return;
    int64_t N;
    const int si = gemv_seg(sg, &n, &N);
    const void *__restrict__ w = sg.w[si];
    const bool nrm = sg.g.p != NULL;
    float acc[MB], accu[GLU ? MB : 1], ss[MB];
#pragma unroll
    for (int m = 0; m < MB; m++) {
        acc[m] = ss[m] = 0.0f;
        if (GLU)
            accu[GLU ? m : 0] = 0.0f;
    }
    const int64_t row = n * K;
    const int64_t kst = (int64_t)(part * 32 + lane) * 8, step = (int64_t)256 * KS * GV_U;
    pk8<WD> wv[GV_U], uv[GLU ? GV_U : 1]; /* 8 weights a vector as loaded (gpu_dtype.h) */
    const bool early = VEC && live && sg.early;
    RLX_PDL_TRIGGER(); /* the next GEMV may launch now and prefetch its weights */
    if (early)
        gv_round<WD, GLU, KS>(wv, uv, w, wu, row, kst, K);
    /* the weights do not depend on the kernel before: fetch a warp's share into L2 while
     * that kernel finishes; not over 8 KB a warp (every resident warp of a large K would
     * prefetch more than L2 holds) */
    if (live && VEC && K * (WD == GDT_F32 ? 4 : 2) <= 8192 * KS) {
        constexpr int lpl = 128 / (8 * (WD == GDT_F32 ? 4 : 2)); /* lanes per 128-byte line */
        for (int64_t k0 = kst + (early ? step : 0); lane % lpl == 0 && k0 < K; k0 += 256 * KS) {
            RLX_PREFETCH_L2((const char *)w + (row + k0) * (WD == GDT_F32 ? 4 : 2));
            if (GLU)
                RLX_PREFETCH_L2((const char *)wu + (row + k0) * (WD == GDT_F32 ? 4 : 2));
        }
    }
    RLX_PDL_WAIT(); /* x, bias and residual may come from the kernel before */
    if (MB == 1 && sg.xres.p && !(pre && sg.last)) /* the add's sum as the add kernel stores it, an element a thread */
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < K; i += (int64_t)gridDim.x * blockDim.x)
            stt(sg.xsum, i, ldt(x, i) + ldt(sg.xres, i));
    extern __shared__ float4 xsm4[];
    float ssb = 0.0f; /* pre: the row's sum of squares (the normed row: xsm4) */
    if (pre) {
        __shared__ float wss[GV_WARPS_MAX];
        for (int64_t k = (int64_t)threadIdx.x * 8; k < K; k += (int64_t)blockDim.x * 8) {
            float xf[8], gf[8];
            x8_load_add(x, sg.xres, sg.xsum.dt, k, xf);
            x8_load(sg.g, k, gf);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                ssb += xf[e] * xf[e];
                xf[e] *= sg.add_one ? 1.0f + gf[e] : gf[e];
            }
            xsm4[k / 4] = make_float4(xf[0], xf[1], xf[2], xf[3]);
            xsm4[k / 4 + 1] = make_float4(xf[4], xf[5], xf[6], xf[7]);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            ssb += RLX_SHFL_XOR(ssb, o, 32);
        if (lane == 0)
            wss[warp] = ssb;
        __syncthreads();
        ssb = 0.0f;
#pragma unroll
        for (int w = 0; w < GV_WARPS_MAX; w++)
            ssb += w < nw ? wss[w] : 0.0f;
        if (sg.last) /* the sum over x or the residual: stored once every block has read both */
            gv_sum_last(x, sg);
    }
    if (!live) {
    } else if (VEC) {
        for (int64_t k0 = kst; k0 < K; k0 += step) {
            if (!early || k0 != kst)
                gv_round<WD, GLU, KS>(wv, uv, w, wu, row, k0, K);
#pragma unroll
            for (int u = 0; u < GV_U; u++) {
                int64_t k = k0 + u * 256 * KS;
                if (k < K) {
                    float wf[8], uf[8];
                    pk8_unpack<WD>(wv[u], wf);
                    if (GLU)
                        pk8_unpack<WD>(uv[GLU ? u : 0], uf);
#pragma unroll
                    for (int m = 0; m < MB; m++) {
                        if (m < M) {
                            float xf[8];
                            if (pre) {
                                const float4 a = xsm4[k / 4], b = xsm4[k / 4 + 1];
                                xf[0] = a.x, xf[1] = a.y, xf[2] = a.z, xf[3] = a.w;
                                xf[4] = b.x, xf[5] = b.y, xf[6] = b.z, xf[7] = b.w;
                            } else if (MB == 1) { /* the residual one row only: MB 16 would not unroll */
                                x8_load_add(x, sg.xres, sg.xsum.dt, k, xf);
                            } else {
                                x8_load(x, (int64_t)m * K + k, xf);
                            }
                            if (nrm && !pre) { /* x * g, its rms applied in the epilogue */
                                float gf[8];
                                x8_load(sg.g, k, gf);
#pragma unroll
                                for (int e = 0; e < 8; e++) {
                                    ss[m] += xf[e] * xf[e];
                                    xf[e] *= sg.add_one ? 1.0f + gf[e] : gf[e];
                                }
                            }
#pragma unroll
                            for (int e = 0; e < 8; e++) {
                                acc[m] += wf[e] * xf[e];
                                if (GLU)
                                    accu[GLU ? m : 0] += uf[e] * xf[e];
                            }
                        }
                    }
                }
            }
        }
    } else {
        const gpu_ten wt = {(void *)w, WD}, ut = {(void *)wu, WD};
        for (int64_t k = part * 32 + lane; k < K; k += 32 * KS) {
            float wf = ldt(wt, row + k), uf = GLU ? ldt(ut, row + k) : 0.0f;
            float gk = nrm ? ldt(sg.g, k) + (sg.add_one ? 1.0f : 0.0f) : 1.0f;
#pragma unroll
            for (int m = 0; m < MB; m++) {
                if (m < M) {
                    float xv = ldt(x, (int64_t)m * K + k);
                    if (MB == 1 && sg.xres.p)
                        xv = round_to(sg.xsum.dt, xv + ldt(sg.xres, (int64_t)m * K + k));
                    ss[m] += xv * xv;
                    xv *= gk;
                    acc[m] += wf * xv;
                    if (GLU)
                        accu[GLU ? m : 0] += uf * xv;
                }
            }
        }
    }
#pragma unroll
    for (int m = 0; m < MB; m++) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            acc[m] += RLX_SHFL_XOR(acc[m], o, 32);
            if (nrm)
                ss[m] += RLX_SHFL_XOR(ss[m], o, 32);
            if (GLU)
                accu[GLU ? m : 0] += RLX_SHFL_XOR(accu[GLU ? m : 0], o, 32);
        }
    }
    if (KS > 1) { /* the parts of a column: sum in the first warp */
        if (lane == 0)
#pragma unroll
            for (int m = 0; m < MB; m++) {
                red[KS > 1 ? warp : 0][KS > 1 ? m : 0] = acc[m];
                red[KS > 1 ? warp : 0][KS > 1 ? 2 * MB + m : 0] = ss[m];
                if (GLU)
                    red[KS > 1 ? warp : 0][KS > 1 ? MB + m : 0] = accu[GLU ? m : 0];
            }
        __syncthreads();
        if (part != 0 || !live)
            return;
#pragma unroll
        for (int p = 1; p < KS; p++)
#pragma unroll
            for (int m = 0; m < MB; m++) {
                acc[m] += red[KS > 1 ? warp + p : 0][KS > 1 ? m : 0];
                ss[m] += red[KS > 1 ? warp + p : 0][KS > 1 ? 2 * MB + m : 0];
                if (GLU)
                    accu[GLU ? m : 0] += red[KS > 1 ? warp + p : 0][KS > 1 ? MB + m : 0];
            }
    }
    if (!live) /* a warp past the columns that stayed for the prologue's barrier */
        return;
    const gpu_ten bias = sg.bias[si], y = sg.y[si], res = sg.res[si];
    if (lane == 0)
#pragma unroll
        for (int m = 0; m < MB; m++) {
            if (m >= M)
                continue;
            const float r = nrm ? rsqrtf((pre ? ssb : ss[m]) / (float)K + sg.eps) : 1.0f;
            float v = acc[m] * r;
            if (GLU)
                v = silu_f(v) * (accu[GLU ? m : 0] * r);
            else if (bias.p)
                v += ldt(bias, n);
            if (res.p) /* the product as a matmul stores it, then the add */
                v = ldt(res, (int64_t)m * N + n) + round_to(sg.pdt[si], v);
            stt(y, (int64_t)m * N + n, v);
        }
}

/* One row, VEC, 16-bit weights: the streaming form. The grid is at most what the GPU holds at
 * once; a block builds x's row (the residual added, normed) in shared memory once, then takes the
 * column groups blockIdx.x, blockIdx.x + gridDim.x, ... and its warps stream their weights without
 * a pause: two register sets of GV_U vectors, each set's next round loaded right after its dots,
 * across the columns' ends, so a warp always has a round in flight while it computes the other
 * (k_gemv waits for each round and rebuilds the row in every block of its columns). KS warps of a
 * block share a column where the columns alone would leave the last groups' blocks idle. */
#define GS_WARPS 8
#define GS_ROW_MAX (64 << 10) /* bytes of x's row a block keeps (K <= 16,384) */

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
    if (sg.xres.p && !sg.last) /* the add's sum as the add kernel stores it */
        for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < K; i += (int64_t)gridDim.x * blockDim.x)
            stt(sg.xsum, i, ldt(x, i) + ldt(sg.xres, i));
    float ssb = 0.0f;
    for (int64_t k = (int64_t)threadIdx.x * 8; k < K; k += (int64_t)blockDim.x * 8) {
        float xf[8], gf[8];
        x8_load_add(x, sg.xres, sg.xsum.dt, k, xf);
        if (nrm) {
            x8_load(sg.g, k, gf);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                ssb += xf[e] * xf[e];
                xf[e] *= sg.add_one ? 1.0f + gf[e] : gf[e];
            }
        }
        xsm4[k / 4] = make_float4(xf[0], xf[1], xf[2], xf[3]);
        xsm4[k / 4 + 1] = make_float4(xf[4], xf[5], xf[6], xf[7]);
    }
    {
        __shared__ float wss[GS_WARPS];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            ssb += RLX_SHFL_XOR(ssb, o, 32);
        if (lane == 0)
            wss[warp] = ssb;
        __syncthreads(); /* the row is whole */
        ssb = 0.0f;
#pragma unroll
        for (int w = 0; w < GS_WARPS; w++)
            ssb += wss[w];
    }
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
                const gpu_ten bias = sg.bias[si], y = sg.y[si], res = sg.res[si];
                float v = acc * rn;
                if (GLU)
                    v = silu_f(v) * (accu * rn);
                else if (bias.p)
                    v += ldt(bias, n);
                if (res.p) /* the product as a matmul stores it, then the add */
                    v = ldt(res, n) + round_to(sg.pdt[si], v);
                stt(y, n, v);
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

/* the switches, read once (each to compare with the path it replaced) */
typedef struct gv_opts {
    int warps; /* a one-row block's: RLX_GPU_GEMV_WARPS=4|8|16 (default 8: half the blocks
                * build the normed row; 16 leaves too few blocks to spread) */
    int xsm;   /* the normed row in shared memory (RLX_GPU_GEMV_SMEM=0: off) */
    int early; /* the first weights loaded before the wait (RLX_GPU_GEMV_EARLY=0: off) */
    int stream; /* a norm's one row of 16-bit weights through k_gemv_stream (RLX_GPU_GEMV_STREAM=0:
                 * off, =all: every one-row 16-bit GEMV) */
    int stream_ks; /* its parts a column, forced (RLX_GPU_GEMV_STREAM_KS=1|2|4|8; else chosen) */
} gv_opts;

static const gv_opts *gv_opt(void)
{
    static gv_opts o;
    static int done;
    if (!done) {
        const char *e = getenv("RLX_GPU_GEMV_WARPS");
        int v = e ? atoi(e) : 0;
        o.warps = v == 4 || v == 16 ? v : 8;
        o.xsm = !rlx_env_off("RLX_GPU_GEMV_SMEM");
        o.early = !rlx_env_off("RLX_GPU_GEMV_EARLY");
        e = getenv("RLX_GPU_GEMV_STREAM");
        o.stream = rlx_env_off("RLX_GPU_GEMV_STREAM") ? 0 : e && strcmp(e, "all") == 0 ? 2 : 1;
        e = getenv("RLX_GPU_GEMV_STREAM_KS");
        v = e ? atoi(e) : 0;
        o.stream_ks = v == 1 ? 0 : v == 2 ? 1 : v == 4 ? 2 : v == 8 ? 3 : -1;
        done = 1;
    }
    return &o;
}

template <int WD, int MB, bool GLU, int KS>
static void launch_ks(gpuStream_t s, bool vec, gpu_ten x, const gv_segs &sg, const void *wu,
                      int64_t M, int64_t K)
{
    const int w = MB == 1 ? gv_opt()->warps : GV_WARPS, cols = w / KS;
    unsigned grid = (unsigned)((sg.end[sg.n - 1] + cols - 1) / cols);
    rlx_launch_pdl(rlx_pdl_on(1), vec ? k_gemv<WD, MB, GLU, true, KS> : k_gemv<WD, MB, GLU, false, KS>,
                   dim3(grid), dim3(w * 32), sg.xsm ? (size_t)K * 4 : 0, s, x, sg, wu, (int)M, K);
}

/* K split over KS warps when the columns alone leave SMs short of loads in flight */
template <int WD, int MB, bool GLU>
static void launch_mb(gpuStream_t s, bool vec, gpu_ten x, const gv_segs &sg, const void *wu,
                      int64_t M, int64_t K)
{
    int64_t N = sg.end[sg.n - 1];
    if (MB > 1) /* batched rows: more work a warp already */
        launch_ks<WD, MB, GLU, 1>(s, vec, x, sg, wu, M, K);
    else if (N <= 4096 && K >= 4096)
        launch_ks<WD, MB, GLU, 4>(s, vec, x, sg, wu, M, K);
    else if (N <= 4096 && K >= 1024)
        launch_ks<WD, MB, GLU, 2>(s, vec, x, sg, wu, M, K);
    else
        launch_ks<WD, MB, GLU, 1>(s, vec, x, sg, wu, M, K);
}
template <int WD, bool GLU>
static void launch_w(gpuStream_t s, bool vec, gpu_ten x, const gv_segs &sg, const void *wu,
                     int64_t M, int64_t K)
{
    if (M <= 1)
        launch_mb<WD, 1, GLU>(s, vec, x, sg, wu, M, K);
    else if (M <= 4)
        launch_mb<WD, 4, GLU>(s, vec, x, sg, wu, M, K);
    else
        launch_mb<WD, GPU_GEMV_MAX_M, GLU>(s, vec, x, sg, wu, M, K);
}

template <bool GLU>
static void launch_glu(gpuStream_t s, bool vec, int wdt, gpu_ten x, const gv_segs &sg,
                       const void *wu, int64_t M, int64_t K)
{
    if (wdt == GDT_BF16)
        launch_w<GDT_BF16, GLU>(s, vec, x, sg, wu, M, K);
    else if (wdt == GDT_F16)
        launch_w<GDT_F16, GLU>(s, vec, x, sg, wu, M, K);
    else
        launch_w<GDT_F32, GLU>(s, vec, x, sg, wu, M, K);
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
    static int raised;
    if (!__atomic_load_n(&raised, __ATOMIC_RELAXED)) {
        (void)gpuFuncSetMaxDynSmem(k, GS_ROW_MAX);
        __atomic_store_n(&raised, 1, __ATOMIC_RELAXED);
    }
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
    rlx_launch_pdl(rlx_pdl_on(1), k_gemv_stream<WD, GLU, KS>, dim3((unsigned)(grid < groups ? grid : groups)),
                   dim3(GS_WARPS * 32), (size_t)K * 4, s, x, sg, wu, K, groups);
}

/* KS: the fewest parts a column whose last round of groups keeps >= 90 % of the resident
 * blocks busy (else the best of 1, 2, 4, 8); the grid: the resident blocks */
template <int WD, bool GLU>
static void gs_launch(gpuStream_t s, gpu_ten x, const gv_segs &sg, const void *wu, int64_t K)
{
    int dev = 0, sms = 1;
    (void)gpuGetDevice(&dev);
    if (gpuDeviceGetAttribute(&sms, gpuDevAttrSmCount, dev) != gpuSuccess || sms < 1)
        sms = 1;
    const int64_t Nt = sg.end[sg.n - 1];
    const int res[4] = {gs_resident<WD, GLU, 1>(K), gs_resident<WD, GLU, 2>(K), gs_resident<WD, GLU, 4>(K),
                        gs_resident<WD, GLU, 8>(K)};
    int best = gv_opt()->stream_ks;
    double beff = best >= 0 ? 2.0 : -1.0;
    best = best < 0 ? 0 : best;
    for (int i = 0; i < 4 && beff < 1.5 && (i == 0 || K >= (int64_t)256 << i); i++) {
        const int64_t cpg = GS_WARPS >> i, groups = (Nt + cpg - 1) / cpg, gmax = (int64_t)res[i] * sms;
        const int64_t iters = (groups + gmax - 1) / gmax;
        const double eff = (double)groups / (double)(gmax * iters);
        if (eff > beff + 1e-9)
            best = i, beff = eff;
        if (eff >= 0.9)
            break;
    }
    const int64_t grid = (int64_t)res[best] * sms;
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
static void gs_launch_w(gpuStream_t s, int wdt, gpu_ten x, const gv_segs &sg, const void *wu, int64_t K)
{
    if (wdt == GDT_BF16)
        gs_launch<GDT_BF16, GLU>(s, x, sg, wu, K);
    else
        gs_launch<GDT_F16, GLU>(s, x, sg, wu, K);
}

/* do K elements of a and b share bytes? */
static bool gv_overlap(gpu_ten a, gpu_ten b, int64_t K)
{
    const char *pa = (const char *)a.p, *pb = (const char *)b.p;
    const int64_t na = K * (a.dt == GDT_F32 ? 4 : 2), nb = K * (b.dt == GDT_F32 ? 4 : 2);
    return pa && pb && pa < pb + nb && pb < pa + na;
}

void gpu_gemv_multi(gpuStream_t s, gpu_ten x, gpu_ten wu, const gpu_gemv_seg *seg, int nseg,
                    int64_t M, int64_t K, const gpu_gemv_norm *nrm)
{
    if (M > 1 && !nrm && gpu_gemv_mma(s, x, wu, seg, nseg, M, K))
        return;
    gv_segs sg{};
    bool fixed;
    uintptr_t al = (uintptr_t)x.p | (uintptr_t)wu.p |
                   gemv_segs_fill(&sg, seg, nseg < 1 ? 1 : nseg > GPU_GEMV_SEGS ? GPU_GEMV_SEGS : nseg, &fixed);
    if (nrm) {
        sg.g = nrm->g;
        sg.eps = nrm->eps;
        sg.add_one = nrm->add_one;
        sg.xres = nrm->res;
        sg.xsum = nrm->sum;
        sg.xsum_n = K;
        al |= (uintptr_t)nrm->g.p | (uintptr_t)nrm->res.p;
    }
    if (sg.end[sg.n - 1] <= 0)
        return;
    bool vec = K % 8 == 0 && al % 16 == 0;
    sg.xsm = nrm && vec && M == 1 && K * 4 <= GV_XSM_MAX && gv_opt()->xsm;
    /* the streaming form where it measured faster: a norm's row (q/k/v, gate/up, the LM head) */
    bool stream = (nrm || gv_opt()->stream == 2) && M == 1 && vec && seg[0].w.dt != GDT_F32 && K * 4 <= GS_ROW_MAX && gv_opt()->stream;
    if (nrm && nrm->res.p && M == 1 && (gv_overlap(nrm->sum, x, K) || gv_overlap(nrm->sum, nrm->res, K))) {
        if ((sg.xsm || stream) && nrm->last) { /* in place: the last block stores the sum */
            sg.last = nrm->last;
        } else { /* in place and the row not kept: the add first, then the GEMVs read its sum */
            gpu_binary_t(s, GB_ADD, x, nrm->res, nrm->sum, K, K);
            x = nrm->sum;
            sg.xres = sg.xsum = gpu_ten{NULL, GDT_F32};
            vec = vec && (uintptr_t)x.p % 16 == 0;
            sg.xsm = sg.xsm && vec;
            stream = stream && vec;
        }
    }
    sg.early = vec && gv_opt()->early && fixed;
    if (stream && wu.p)
        gs_launch_w<true>(s, seg[0].w.dt, x, sg, wu.p, K);
    else if (stream)
        gs_launch_w<false>(s, seg[0].w.dt, x, sg, NULL, K);
    else if (wu.p)
        launch_glu<true>(s, vec, seg[0].w.dt, x, sg, wu.p, M, K);
    else
        launch_glu<false>(s, vec, seg[0].w.dt, x, sg, wu.p, M, K);
}

void gpu_gemv(gpuStream_t s, gpu_ten x, gpu_ten w, gpu_ten wu, gpu_ten bias, gpu_ten y, int fixed, int64_t M,
              int64_t N, int64_t K)
{
    gpu_gemv_seg sg = {w, bias, y, N, {NULL, GDT_F32}, GDT_F32, fixed};
    gpu_gemv_multi(s, x, wu, &sg, 1, M, K, NULL);
}
