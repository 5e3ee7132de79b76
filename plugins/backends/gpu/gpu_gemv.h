/* What the one-row and skinny GEMV kernels share (k_gemv.cu, k_gemv_stream.cu): x's 8-element
 * loads, the segments and norm as a launch takes them, a lane's round of weight vectors, the
 * in-place sum stored by the last block. */
#ifndef RLX_GPU_GEMV_H
#define RLX_GPU_GEMV_H
#include "gpu_dtype.h"

#define GV_U 4 /* weight vectors a lane loads a round */

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

/* the add's sum x + xres as the add kernel stores it, an element a thread over the grid */
__device__ __forceinline__ void gv_store_sum(const gpu_ten &x, const gv_segs &sg, int64_t K)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < K; i += (int64_t)gridDim.x * blockDim.x)
        stt(sg.xsum, i, ldt(x, i) + ldt(sg.xres, i));
}

/* column n of segment si, stored at i: SwiGLU of the gate and up products (a, u), or a plus
 * the bias; then the residual add over the product rounded as a matmul stores it */
template <bool GLU>
__device__ __forceinline__ void gv_store(const gv_segs &sg, int si, int64_t n, int64_t i, float a, float u)
{
    float v = a;
    if (GLU)
        v = silu_f(a) * u;
    else if (sg.bias[si].p)
        v += ldt(sg.bias[si], n);
    if (sg.res[si].p)
        v = ldt(sg.res[si], i) + round_to(sg.pdt[si], v);
    stt(sg.y[si], i, v);
}

/* x's row into xsm4 as floats by the whole block (NW warps at most): x + xres rounded as the
 * add stores it (xres.p set), times g (nrm); returns the block's sum of squares of the row
 * before g (0 without a norm). Ends in a block barrier: the row is whole. */
template <int NW>
__device__ __forceinline__ float gv_build_row(const gpu_ten &x, const gv_segs &sg, int64_t K, bool nrm, float4 *xsm4)
{
    __shared__ float wss[NW];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = (int)(blockDim.x >> 5);
    float ss = 0.0f;
    for (int64_t k = (int64_t)threadIdx.x * 8; k < K; k += (int64_t)blockDim.x * 8) {
        float xf[8], gf[8];
        x8_load_add(x, sg.xres, sg.xsum.dt, k, xf);
        if (nrm) {
            x8_load(sg.g, k, gf);
#pragma unroll
            for (int e = 0; e < 8; e++) {
                ss += xf[e] * xf[e];
                xf[e] *= sg.add_one ? 1.0f + gf[e] : gf[e];
            }
        }
        xsm4[k / 4] = make_float4(xf[0], xf[1], xf[2], xf[3]);
        xsm4[k / 4 + 1] = make_float4(xf[4], xf[5], xf[6], xf[7]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        ss += RLX_SHFL_XOR(ss, o, 32);
    if (lane == 0)
        wss[warp] = ss;
    __syncthreads();
    ss = 0.0f;
#pragma unroll
    for (int w = 0; w < NW; w++)
        ss += w < nw ? wss[w] : 0.0f;
    return ss;
}

/* k_gemv_stream.cu: one row of 16-bit weights (wdt) after a norm (sg.g set), VEC, K * 4 <=
 * GS_ROW_MAX; ks: its warps a column forced (0..3: 1, 2, 4, 8; -1: chosen) */
#define GS_ROW_MAX (64 << 10) /* bytes of x's row a block keeps (K <= 16,384) */
void gpu_gemv_stream(gpuStream_t s, int wdt, gpu_ten x, const gv_segs &sg, const void *wu, int64_t K, int ks);

#endif
