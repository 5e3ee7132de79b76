/* rlx.bmm (a tiled GEMM per batch entry, blockIdx.z) and the pointwise maps rlx.relu,
 * rlx.sin, rlx.cos. */
#include "gpu_kernels.h"

#define BT 16

/* c[z] = a[z] [M,K] · (b[z] [N,K]ᵀ when tb, else b[z] [K,N]) */
__global__ static void k_bmm(const float *a, const float *b, float *c, int64_t M, int64_t N, int64_t K, int tb)
{
    __shared__ float as[BT][BT + 1], bs[BT][BT + 1];
    int64_t z = blockIdx.z, row = (int64_t)blockIdx.y * BT + threadIdx.y, col = (int64_t)blockIdx.x * BT + threadIdx.x;
    a += z * M * K;
    b += z * N * K;
    c += z * M * N;
    float acc = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += BT) {
        int64_t ka = k0 + threadIdx.x, kb = k0 + threadIdx.y;
        as[threadIdx.y][threadIdx.x] = row < M && ka < K ? a[row * K + ka] : 0.0f;
        bs[threadIdx.y][threadIdx.x] = col < N && kb < K ? (tb ? b[col * K + kb] : b[kb * N + col]) : 0.0f;
        __syncthreads();
        for (int kk = 0; kk < BT; kk++) acc += as[threadIdx.y][kk] * bs[kk][threadIdx.x];
        __syncthreads();
    }
    if (row < M && col < N) c[row * N + col] = acc;
}

void gpu_bmm(gpuStream_t s, int tb, const float *a, const float *b, float *c, int64_t B, int64_t M, int64_t N,
             int64_t K)
{
    dim3 block(BT, BT, 1);
    for (int64_t z0 = 0; z0 < B; z0 += 65535) { /* gridDim.z is at most 65535 */
        int64_t nz = B - z0 < 65535 ? B - z0 : 65535;
        dim3 grid((unsigned)((N + BT - 1) / BT), (unsigned)((M + BT - 1) / BT), (unsigned)nz);
        RLX_LAUNCH(k_bmm, grid, block, 0, s)(a + z0 * M * K, b + z0 * N * K, c + z0 * M * N, M, N, K, tb);
    }
}

__global__ static void k_map(int op, const float *x, float *y, int64_t n)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = x[i];
        y[i] = op == GM_RELU ? (v > 0.0f ? v : 0.0f) : op == GM_SIN ? sinf(v) : cosf(v);
    }
}

void gpu_map(gpuStream_t s, int op, const float *x, float *y, int64_t n)
{
    int64_t b = (n + 255) / 256;
    b = b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b;
    RLX_LAUNCH(k_map, (unsigned)b, 256, 0, s)(op, x, y, n);
}
