/* The m16n8k16 tensor-core product with f32 accumulators (mma.sync, sm_80 on): CUDA only.
 * HIP has no mma.sync; the kernels that use it say so to their callers, which keep a
 * SIMT path there. A holds rows (g, g+8) and C rows (g, g+8) of lane (g = lane / 4,
 * t = lane % 4); B holds column g; each register two 16-bit values, the lower index low. */
#ifndef RLX_GPU_MMA_H
#define RLX_GPU_MMA_H
#include "gpu_dtype.h"

#if !defined(RLX_GPU_HIP)
template <int DT>
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    if (DT == GDT_BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
#endif
#endif
