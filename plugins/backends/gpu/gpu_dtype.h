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

#endif
