/* What differs between the CUDA and ROCm plugins besides the runtime names: the matmul
 * library. cuda/cuda_blas.cu wraps cuBLAS; rocm/rocm_blas.cu has none (own GEMM). */
#ifndef RLX_GPU_VENDOR_H
#define RLX_GPU_VENDOR_H
#include "gpu_kernels.h"
#include <stddef.h>
#include <stdint.h>

typedef struct gpu_blas gpu_blas;
/* *out = NULL (and 0) when the vendor has no library: the own GEMM is used. */
int gpu_blas_create(gpu_blas **out, gpuStream_t s, char *err, size_t errlen);
void gpu_blas_destroy(gpu_blas *b);
/* Row-major as gpu_gemm: b_nk=1: C[M,N] = A·Bᵀ with B [N,K]; b_nk=0: B [K,N]. A and B in
 * one dtype (f32, f16 or bf16), C in f32 or that dtype; f32 accumulation (16-bit operands
 * on the tensor cores). */
int gpu_blas_gemm_t(gpu_blas *b, int b_nk, gpu_ten a, gpu_ten bm, gpu_ten c, int64_t M, int64_t N,
                    int64_t K, char *err, size_t errlen);
static inline int gpu_blas_gemm(gpu_blas *b, int b_nk, const float *a, const float *bm, float *c,
                                int64_t M, int64_t N, int64_t K, char *err, size_t errlen)
{
    return gpu_blas_gemm_t(b, b_nk, gpu_f32(a), gpu_f32(bm), gpu_f32(c), M, N, K, err, errlen);
}
extern const char gpu_blas_name[];
#endif
