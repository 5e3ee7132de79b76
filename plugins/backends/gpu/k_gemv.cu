/* Skinny products for decode (M <= 16 rows): the weight is read once, at full bandwidth.
 * One warp per output column n streams W's row n (16-byte loads, GV_U of them in flight
 * per lane), dots it with the M rows of x (read through L1: every warp of a block reads
 * the same x), reduces across the warp and writes M outputs with the bias or the SwiGLU
 * epilogue applied. 4 warps a block, N/4 blocks: every SM gets work for N >= 528. */
#include "gpu_dtype.h"

#include <string.h>

#define GV_WARPS 4
#define GV_U 4

/* 8 consecutive weights: one 16-byte load in 16 bits, two in f32 */
template <int WD> struct w8 {
    uint4 v[WD == GDT_F32 ? 2 : 1];
};

template <int WD> __device__ __forceinline__ void w8_load(w8<WD> &r, const void *base, int64_t i)
{
    const uint4 *p = (const uint4 *)((const char *)base + i * (WD == GDT_F32 ? 4 : 2));
#pragma unroll
    for (int k = 0; k < (WD == GDT_F32 ? 2 : 1); k++)
        r.v[k] = p[k];
}

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

template <int WD> __device__ __forceinline__ void w8_unpack(const w8<WD> &r, float *f)
{
    if (WD == GDT_F32) {
#pragma unroll
        for (int k = 0; k < 2; k++) {
            f[4 * k + 0] = __uint_as_float(r.v[k].x);
            f[4 * k + 1] = __uint_as_float(r.v[k].y);
            f[4 * k + 2] = __uint_as_float(r.v[k].z);
            f[4 * k + 3] = __uint_as_float(r.v[k].w);
        }
    } else {
        half2x(r.v[0].x, WD, f + 0);
        half2x(r.v[0].y, WD, f + 2);
        half2x(r.v[0].z, WD, f + 4);
        half2x(r.v[0].w, WD, f + 6);
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

__device__ __forceinline__ float gv_silu(float x) { return x / (1.0f + expf(-x)); }

/* up to GPU_GEMV_SEGS weights over one x: the columns of segment i are [end[i-1], end[i]) */
typedef struct gv_segs {
    const void *w[GPU_GEMV_SEGS];
    gpu_ten bias[GPU_GEMV_SEGS], y[GPU_GEMV_SEGS];
    int64_t end[GPU_GEMV_SEGS];
    int n;
} gv_segs;

/* VEC: K % 8 == 0 and every row 16-byte aligned; else one element per lane per step */
template <int WD, int MB, bool GLU, bool VEC>
__global__ __launch_bounds__(GV_WARPS * 32) static void k_gemv(gpu_ten x, gv_segs sg,
                                                              const void *__restrict__ wu, int M,
                                                              int64_t K)
{
    const int lane = threadIdx.x & 31;
    int64_t n = (int64_t)blockIdx.x * GV_WARPS + (threadIdx.x >> 5);
    if (n >= sg.end[sg.n - 1])
        return;
    int si = 0;
#pragma unroll
    for (int i = 1; i < GPU_GEMV_SEGS; i++)
        if (i < sg.n && n >= sg.end[i - 1])
            si = i;
    const int64_t N = si ? sg.end[si] - sg.end[si - 1] : sg.end[0];
    if (si)
        n -= sg.end[si - 1];
    const void *__restrict__ w = sg.w[si];
    const gpu_ten bias = sg.bias[si], y = sg.y[si];
    float acc[MB], accu[GLU ? MB : 1];
#pragma unroll
    for (int m = 0; m < MB; m++) {
        acc[m] = 0.0f;
        if (GLU)
            accu[GLU ? m : 0] = 0.0f;
    }
    const int64_t row = n * K;
    if (VEC) {
        for (int64_t k0 = (int64_t)lane * 8; k0 < K; k0 += 256 * GV_U) {
            w8<WD> wv[GV_U], uv[GLU ? GV_U : 1];
#pragma unroll
            for (int u = 0; u < GV_U; u++)
                if (k0 + u * 256 < K) {
                    w8_load<WD>(wv[u], w, row + k0 + u * 256);
                    if (GLU)
                        w8_load<WD>(uv[GLU ? u : 0], wu, row + k0 + u * 256);
                }
#pragma unroll
            for (int u = 0; u < GV_U; u++) {
                int64_t k = k0 + u * 256;
                if (k < K) {
                    float wf[8], uf[8];
                    w8_unpack<WD>(wv[u], wf);
                    if (GLU)
                        w8_unpack<WD>(uv[GLU ? u : 0], uf);
#pragma unroll
                    for (int m = 0; m < MB; m++) {
                        if (m < M) {
                            float xf[8];
                            x8_load(x, (int64_t)m * K + k, xf);
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
        for (int64_t k = lane; k < K; k += 32) {
            float wf = ldt(wt, row + k), uf = GLU ? ldt(ut, row + k) : 0.0f;
#pragma unroll
            for (int m = 0; m < MB; m++) {
                if (m < M) {
                    float xv = ldt(x, (int64_t)m * K + k);
                    acc[m] += wf * xv;
                    if (GLU)
                        accu[GLU ? m : 0] += uf * xv;
                }
            }
        }
    }
#pragma unroll
    for (int m = 0; m < MB; m++) {
        if (m >= M)
            continue;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            acc[m] += RLX_SHFL_XOR(acc[m], o, 32);
            if (GLU)
                accu[GLU ? m : 0] += RLX_SHFL_XOR(accu[GLU ? m : 0], o, 32);
        }
        if (lane == 0) {
            float v = acc[m];
            if (GLU)
                v = gv_silu(v) * accu[GLU ? m : 0];
            else if (bias.p)
                v += ldt(bias, n);
            stt(y, (int64_t)m * N + n, v);
        }
    }
}

template <int WD, int MB, bool GLU>
static void launch_mb(gpuStream_t s, bool vec, gpu_ten x, const gv_segs &sg, const void *wu,
                      int64_t M, int64_t K)
{
    unsigned grid = (unsigned)((sg.end[sg.n - 1] + GV_WARPS - 1) / GV_WARPS);
    if (vec)
        RLX_LAUNCH((k_gemv<WD, MB, GLU, true>), grid, GV_WARPS * 32, 0, s)(x, sg, wu, (int)M, K);
    else
        RLX_LAUNCH((k_gemv<WD, MB, GLU, false>), grid, GV_WARPS * 32, 0, s)(x, sg, wu, (int)M, K);
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

void gpu_gemv_multi(gpuStream_t s, gpu_ten x, gpu_ten wu, const gpu_gemv_seg *seg, int nseg,
                    int64_t M, int64_t K)
{
    gv_segs sg;
    memset(&sg, 0, sizeof sg);
    uintptr_t al = (uintptr_t)x.p | (uintptr_t)wu.p;
    int64_t end = 0;
    sg.n = nseg < 1 ? 1 : nseg > GPU_GEMV_SEGS ? GPU_GEMV_SEGS : nseg;
    for (int i = 0; i < sg.n; i++) {
        sg.w[i] = seg[i].w.p;
        sg.bias[i] = seg[i].bias;
        sg.y[i] = seg[i].y;
        sg.end[i] = end += seg[i].N;
        al |= (uintptr_t)seg[i].w.p;
    }
    if (end <= 0)
        return;
    bool vec = K % 8 == 0 && al % 16 == 0;
    if (wu.p)
        launch_glu<true>(s, vec, seg[0].w.dt, x, sg, wu.p, M, K);
    else
        launch_glu<false>(s, vec, seg[0].w.dt, x, sg, wu.p, M, K);
}

void gpu_gemv(gpuStream_t s, gpu_ten x, gpu_ten w, gpu_ten wu, gpu_ten bias, gpu_ten y, int64_t M,
              int64_t N, int64_t K)
{
    gpu_gemv_seg sg = {w, bias, y, N};
    gpu_gemv_multi(s, x, wu, &sg, 1, M, K);
}
