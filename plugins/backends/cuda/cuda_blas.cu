/* cuBLAS for rlx.matmul / rlx.matmul_nn. cuBLAS is column-major: a row-major [R,C]
 * buffer is its [C,R] matrix, so row-major C = A·Bᵀ is column-major Cᵀ = B·Aᵀ,
 * i.e. sgemm(op(B)=T, op(A)=N) with m=N, n=M. Full f32 math (no TF32). */
#include "gpu_vendor.h"
#include <cublas_v2.h>
#include <stdio.h>

struct gpu_blas {
    cublasHandle_t h;
    void *workspace; /* fixed, so that graph capture never allocates */
};

const char gpu_blas_name[] = "cuBLAS";

#define BLAS_WORKSPACE (32u << 20)

int gpu_blas_create(gpu_blas **out, gpuStream_t s, char *err, size_t errlen)
{
    *out = NULL;
    gpu_blas *b = new gpu_blas();
    cublasStatus_t st = cublasCreate(&b->h);
    if (st != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cublasCreate: %s", cublasGetStatusString(st));
        delete b;
        return -1;
    }
    cudaError_t ce = cudaMalloc(&b->workspace, BLAS_WORKSPACE);
    if (ce != cudaSuccess) {
        snprintf(err, errlen, "cuBLAS workspace: %s", cudaGetErrorString(ce));
        cublasDestroy(b->h);
        delete b;
        return -1;
    }
    cublasSetStream(b->h, s);
    cublasSetWorkspace(b->h, b->workspace, BLAS_WORKSPACE);
    cublasSetMathMode(b->h, CUBLAS_DEFAULT_MATH);
    *out = b;
    return 0;
}

void gpu_blas_destroy(gpu_blas *b)
{
    if (!b)
        return;
    cublasDestroy(b->h);
    cudaFree(b->workspace);
    delete b;
}

int gpu_blas_gemm(gpu_blas *b, int b_nk, const float *a, const float *bm, float *c, int64_t M,
                  int64_t N, int64_t K, char *err, size_t errlen)
{
    const float one = 1.0f, zero = 0.0f;
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) {
        snprintf(err, errlen, "cublasSgemm: a dimension exceeds 2^31");
        return -1;
    }
    cublasStatus_t st;
    if (b_nk)
        st = cublasSgemm(b->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, bm, (int)K,
                         a, (int)K, &zero, c, (int)N);
    else
        st = cublasSgemm(b->h, CUBLAS_OP_N, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, bm, (int)N,
                         a, (int)K, &zero, c, (int)N);
    if (st != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cublasSgemm: %s", cublasGetStatusString(st));
        return -1;
    }
    return 0;
}
