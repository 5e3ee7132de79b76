/* Own GEMM (the ROCm backend's matmul, and CUDA's with RLX_GPU_GEMM=own): operands in any
 * float dtype, f32 accumulation, 64×64
 * output tiles, K in steps of 16 through shared memory, 256 threads with a 4×4 micro
 * tile each. Rows and columns of a thread are strided by 16 so that a warp's shared
 * reads hit distinct banks or broadcast. */
#include "gpu_dtype.h"

#define TM 64
#define TN 64
#define TK 16

template <int B_NK>
__global__ __launch_bounds__(256) static void k_gemm(gpu_ten A, gpu_ten B, gpu_ten C, int64_t M,
                                                      int64_t N, int64_t K)
{
    __shared__ float As[TK][TM + 4];
    __shared__ float Bs[TK][TN + 4];
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int64_t m0 = (int64_t)blockIdx.y * TM, n0 = (int64_t)blockIdx.x * TN;
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
            acc[i][j] = 0.0f;

    for (int64_t k0 = 0; k0 < K; k0 += TK) {
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int idx = tid + 256 * i, row = idx / TK, col = idx % TK;
            int64_t gm = m0 + row, gk = k0 + col;
            As[col][row] = (gm < M && gk < K) ? ldt(A, gm * K + gk) : 0.0f;
            if (B_NK) {
                int64_t gn = n0 + row;
                Bs[col][row] = (gn < N && gk < K) ? ldt(B, gn * K + gk) : 0.0f;
            } else {
                int kr = idx / TN, nc = idx % TN;
                int64_t gk2 = k0 + kr, gn = n0 + nc;
                Bs[kr][nc] = (gk2 < K && gn < N) ? ldt(B, gk2 * N + gn) : 0.0f;
            }
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < TK; k++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) {
                a[i] = As[k][ty + 16 * i];
                b[i] = Bs[k][tx + 16 * i];
            }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++)
                    acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int64_t gm = m0 + ty + 16 * i;
        if (gm >= M)
            continue;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            int64_t gn = n0 + tx + 16 * j;
            if (gn < N)
                stt(C, gm * N + gn, acc[i][j]);
        }
    }
}

void gpu_gemm_t(gpuStream_t s, int b_nk, gpu_ten a, gpu_ten b, gpu_ten c, int64_t M, int64_t N,
                int64_t K)
{
    dim3 grid((unsigned)((N + TN - 1) / TN), (unsigned)((M + TM - 1) / TM));
    if (b_nk)
        RLX_LAUNCH(k_gemm<1>, grid, 256, 0, s)(a, b, c, M, N, K);
    else
        RLX_LAUNCH(k_gemm<0>, grid, 256, 0, s)(a, b, c, M, N, K);
}
