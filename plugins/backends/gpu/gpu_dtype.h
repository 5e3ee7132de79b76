/* Device-side loads and stores of f32 / f16 / bf16 elements by run-time dtype (GDT_*):
 * kernels read any float dtype into f32, compute in f32 and round once when they store. */
#ifndef RLX_GPU_DTYPE_H
#define RLX_GPU_DTYPE_H
#include "gpu_kernels.h"
#if defined(RLX_GPU_HIP)
#include <hip/hip_fp16.h>
#else
#include <cuda_fp16.h>
#endif

__device__ __forceinline__ float bf16_to_f(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }

/* round to nearest even; NaN stays a (quiet) NaN */
__device__ __forceinline__ uint16_t f_to_bf16(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

__device__ __forceinline__ float f16_to_f(uint16_t b) { return __half2float(__ushort_as_half(b)); }
__device__ __forceinline__ uint16_t f_to_f16(float f) { return __half_as_ushort(__float2half_rn(f)); }

/* up to GPU_GEMV_SEGS weights over one x, as the GEMV kernels take them: the columns of
 * segment i are [end[i-1], end[i]); res[i].p set: y = res + (x·Wᵀ rounded to pdt[i]) */
struct gemv_segs {
    const void *w[GPU_GEMV_SEGS];
    gpu_ten bias[GPU_GEMV_SEGS], y[GPU_GEMV_SEGS], res[GPU_GEMV_SEGS];
    int pdt[GPU_GEMV_SEGS];
    int64_t end[GPU_GEMV_SEGS];
    int n;
};

/* sg's segments from seg[0..n) (1 <= n <= GPU_GEMV_SEGS); returns the weights' addresses
 * or'ed together (their alignment) and sets *fixed when every segment's weights are fixed */
static inline uintptr_t gemv_segs_fill(gemv_segs *sg, const gpu_gemv_seg *seg, int n, bool *fixed)
{
    uintptr_t al = 0;
    int64_t end = 0;
    *fixed = true;
    sg->n = n;
    for (int i = 0; i < n; i++) {
        sg->w[i] = seg[i].w.p;
        sg->bias[i] = seg[i].bias;
        sg->y[i] = seg[i].y;
        sg->res[i] = seg[i].res;
        sg->pdt[i] = seg[i].pdt;
        sg->end[i] = end += seg[i].N;
        al |= (uintptr_t)seg[i].w.p;
        *fixed = *fixed && seg[i].fixed;
    }
    return al;
}

/* the segment of a GEMV's column *n; *n becomes the column within it and *N its width */
__device__ __forceinline__ int gemv_seg(const gemv_segs &sg, int64_t *n, int64_t *N)
{
    int si = 0;
#pragma unroll
    for (int i = 1; i < GPU_GEMV_SEGS; i++)
        if (i < sg.n && *n >= sg.end[i - 1])
            si = i;
    *N = si ? sg.end[si] - sg.end[si - 1] : sg.end[0];
    if (si)
        *n -= sg.end[si - 1];
    return si;
}

__device__ __forceinline__ float silu_f(float x) { return x / (1.0f + expf(-x)); }

/* the first execute error of a launch: its code, value and node, for the host's message */
__device__ __forceinline__ void record_error(int *err, int code, int value, int node)
{
    if (atomicCAS(&err[0], 0, code) == 0) {
        err[1] = value;
        err[2] = node;
    }
}

/* the first bad row of a batched step: its index and the node */
__device__ __forceinline__ void rows_error(int *err, int value, int node)
{
    record_error(err, GPU_ERR_ROW_SLOT, value, node);
}

__device__ __forceinline__ float h_to_f(uint16_t b, int dt)
{
    return dt == GDT_BF16 ? bf16_to_f(b) : f16_to_f(b);
}

__device__ __forceinline__ float ldt(const gpu_ten &t, int64_t i)
{
    if (t.dt == GDT_BF16)
        return bf16_to_f(((const uint16_t *)t.p)[i]);
    if (t.dt == GDT_F16)
        return f16_to_f(((const uint16_t *)t.p)[i]);
    return ((const float *)t.p)[i];
}

__device__ __forceinline__ void stt(const gpu_ten &t, int64_t i, float v)
{
    if (t.dt == GDT_BF16)
        ((uint16_t *)t.p)[i] = f_to_bf16(v);
    else if (t.dt == GDT_F16)
        ((uint16_t *)t.p)[i] = f_to_f16(v);
    else
        ((float *)t.p)[i] = v;
}

/* v as it reads back after a store in dtype dt */
__device__ __forceinline__ float round_to(int dt, float v)
{
    if (dt == GDT_BF16)
        return bf16_to_f(f_to_bf16(v));
    if (dt == GDT_F16)
        return f16_to_f(f_to_f16(v));
    return v;
}

/* Compile-time dtype DT (GDT_F32/F16/BF16), for kernels specialised on it: the same
 * conversions as ldt/stt, so a specialised kernel stores the same bits. */
template <int DT> __device__ __forceinline__ float ld_dt(const void *p, int64_t i)
{
    if (DT == GDT_F32)
        return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return DT == GDT_BF16 ? bf16_to_f(h) : f16_to_f(h);
}

template <int DT> __device__ __forceinline__ void st_dt(void *p, int64_t i, float v)
{
    if (DT == GDT_F32)
        ((float *)p)[i] = v;
    else
        ((uint16_t *)p)[i] = DT == GDT_BF16 ? f_to_bf16(v) : f_to_f16(v);
}

/* 8 consecutive elements of dtype DT as loaded: one 16-byte access in 16 bits, two in f32
 * (the address 16-byte aligned) */
template <int DT> struct pk8 {
    uint4 v[DT == GDT_F32 ? 2 : 1];
};

template <int DT> __device__ __forceinline__ pk8<DT> pk8_load(const void *p, int64_t i)
{
    const uint4 *q = (const uint4 *)((const char *)p + i * (DT == GDT_F32 ? 4 : 2));
    pk8<DT> r;
#pragma unroll
    for (int k = 0; k < (DT == GDT_F32 ? 2 : 1); k++)
        r.v[k] = q[k];
    return r;
}

template <int DT> __device__ __forceinline__ void pk8_store(void *p, int64_t i, const pk8<DT> &r)
{
    uint4 *q = (uint4 *)((char *)p + i * (DT == GDT_F32 ? 4 : 2));
#pragma unroll
    for (int k = 0; k < (DT == GDT_F32 ? 2 : 1); k++)
        q[k] = r.v[k];
}

template <int DT> __device__ __forceinline__ void pk8_unpack(const pk8<DT> &r, float *f)
{
#pragma unroll
    for (int k = 0; k < (DT == GDT_F32 ? 2 : 1); k++) {
        const uint32_t w[4] = {r.v[k].x, r.v[k].y, r.v[k].z, r.v[k].w};
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if (DT == GDT_F32) {
                f[4 * k + j] = __uint_as_float(w[j]);
            } else {
                uint16_t lo = (uint16_t)(w[j] & 0xffffu), hi = (uint16_t)(w[j] >> 16);
                f[2 * j] = DT == GDT_BF16 ? bf16_to_f(lo) : f16_to_f(lo);
                f[2 * j + 1] = DT == GDT_BF16 ? bf16_to_f(hi) : f16_to_f(hi);
            }
        }
    }
}

template <int DT> __device__ __forceinline__ pk8<DT> pk8_pack(const float *f)
{
    pk8<DT> r;
#pragma unroll
    for (int k = 0; k < (DT == GDT_F32 ? 2 : 1); k++) {
        uint32_t w[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
            if (DT == GDT_F32) {
                w[j] = __float_as_uint(f[4 * k + j]);
            } else {
                uint16_t lo = DT == GDT_BF16 ? f_to_bf16(f[2 * j]) : f_to_f16(f[2 * j]);
                uint16_t hi = DT == GDT_BF16 ? f_to_bf16(f[2 * j + 1]) : f_to_f16(f[2 * j + 1]);
                w[j] = (uint32_t)lo | (uint32_t)hi << 16;
            }
        }
        r.v[k] = make_uint4(w[0], w[1], w[2], w[3]);
    }
    return r;
}

/* p is 16-byte aligned */
__device__ __host__ __forceinline__ bool al16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

#endif
