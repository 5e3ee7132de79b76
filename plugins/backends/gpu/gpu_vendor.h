/* What differs between the CUDA and ROCm plugins besides the runtime names: the matmul
 * library. cuda/cuda_blas.cu wraps cuBLAS; rocm/rocm_blas.cu has none (own GEMM). */
#ifndef RLX_GPU_VENDOR_H
#define RLX_GPU_VENDOR_H
#include "rlx_gpu_compat.h"
#include <stddef.h>
#include <stdint.h>

typedef struct gpu_blas gpu_blas;
/* *out = NULL (and 0) when the vendor has no library: the own GEMM is used. */
int gpu_blas_create(gpu_blas **out, gpuStream_t s, char *err, size_t errlen);
void gpu_blas_destroy(gpu_blas *b);
/* Row-major as gpu_gemm: b_nk=1: C[M,N] = A·Bᵀ with B [N,K]; b_nk=0: B [K,N]. */
int gpu_blas_gemm(gpu_blas *b, int b_nk, const float *a, const float *bm, float *c, int64_t M,
                  int64_t N, int64_t K, char *err, size_t errlen);
extern const char gpu_blas_name[];
#endif
