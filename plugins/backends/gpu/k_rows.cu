/* Row kernels: one block per row, reductions in f32 through shared memory (no warp-size
 * assumption, so the same code runs on 32- and 64-wide AMD waves). */
#include "gpu_dtype.h"

#define ROW_THREADS 256

/* Sum (or max) of v over the block; every thread gets the result. */
__device__ static float block_reduce(float v, int is_max)
{
    __shared__ float red[ROW_THREADS];
    red[threadIdx.x] = v;
    __syncthreads();
    for (int w = ROW_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) {
            float o = red[threadIdx.x + w];
            red[threadIdx.x] = is_max ? fmaxf(red[threadIdx.x], o) : red[threadIdx.x] + o;
        }
        __syncthreads();
    }
    float r = red[0];
    __syncthreads(); /* red is reused by the next call */
    return r;
}

/* The sum a + b is stored in sum_out's dtype and the norm reads it back as stored, as a
 * framework that keeps the residual stream in that dtype does. A thread takes its elements
 * RN_KEEP at a time into registers, every load of a tile issued before its first store (a
 * loop that stores between loads waits a memory round trip per element, since sum_out and
 * y may sit on a or b); a row of one tile (up to ROW_THREADS * RN_KEEP) is not read again. */
#define RN_KEEP 16
__global__ static void k_rms_norm(gpu_ten a, gpu_ten b, gpu_ten w, gpu_ten sum_out, gpu_ten y,
                                  int64_t H, float eps, int add_one)
{
    const int64_t base = (int64_t)blockIdx.x * H, tile = (int64_t)ROW_THREADS * RN_KEEP;
    float v[RN_KEEP], ss = 0.0f;
    for (int64_t t0 = 0; t0 < H; t0 += tile) {
#pragma unroll
        for (int k = 0; k < RN_KEEP; k++) {
            int64_t i = t0 + threadIdx.x + (int64_t)k * ROW_THREADS;
            v[k] = i < H ? ldt(a, base + i) : 0.0f;
            if (b.p && i < H)
                v[k] = round_to(sum_out.dt, v[k] + ldt(b, base + i));
        }
#pragma unroll
        for (int k = 0; k < RN_KEEP; k++) {
            int64_t i = t0 + threadIdx.x + (int64_t)k * ROW_THREADS;
            if (i < H) {
                if (b.p)
                    stt(sum_out, base + i, v[k]);
                ss += v[k] * v[k];
            }
        }
    }
    float r = rsqrtf(block_reduce(ss, 0) / (float)H + eps);
    for (int64_t t0 = 0; t0 < H; t0 += tile) {
        float g[RN_KEEP];
#pragma unroll
        for (int k = 0; k < RN_KEEP; k++) {
            int64_t i = t0 + threadIdx.x + (int64_t)k * ROW_THREADS;
            if (H > tile && i < H) /* the tile's values as stored */
                v[k] = b.p ? ldt(sum_out, base + i) : ldt(a, base + i);
            g[k] = i < H ? (add_one ? 1.0f + ldt(w, i) : ldt(w, i)) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < RN_KEEP; k++) {
            int64_t i = t0 + threadIdx.x + (int64_t)k * ROW_THREADS;
            if (i < H)
                stt(y, base + i, v[k] * r * g[k]);
        }
    }
}

void gpu_rms_norm(gpuStream_t s, gpu_ten a, gpu_ten b, gpu_ten w, gpu_ten sum_out, gpu_ten y,
                  int64_t rows, int64_t H, float eps, int add_one)
{
    RLX_LAUNCH(k_rms_norm, (unsigned)rows, ROW_THREADS, 0, s)(a, b, w, sum_out, y, H, eps,
                                                              add_one);
}

__global__ static void k_layer_norm(gpu_ten x, gpu_ten w, gpu_ten b, gpu_ten y, int64_t H,
                                    float eps)
{
    int64_t base = (int64_t)blockIdx.x * H;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < H; i += ROW_THREADS)
        s += ldt(x, base + i);
    float mean = block_reduce(s, 0) / (float)H;
    float q = 0.0f;
    for (int64_t i = threadIdx.x; i < H; i += ROW_THREADS) {
        float c = ldt(x, base + i) - mean;
        q += c * c;
    }
    float r = rsqrtf(block_reduce(q, 0) / (float)H + eps);
    for (int64_t i = threadIdx.x; i < H; i += ROW_THREADS)
        stt(y, base + i, (ldt(x, base + i) - mean) * r * ldt(w, i) + ldt(b, i));
}

void gpu_layer_norm(gpuStream_t s, gpu_ten x, gpu_ten w, gpu_ten b, gpu_ten y, int64_t rows,
                    int64_t H, float eps)
{
    RLX_LAUNCH(k_layer_norm, (unsigned)rows, ROW_THREADS, 0, s)(x, w, b, y, H, eps);
}

__global__ static void k_softmax(gpu_ten x, gpu_ten y, int64_t n)
{
    int64_t base = (int64_t)blockIdx.x * n;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS)
        m = fmaxf(m, ldt(x, base + i));
    m = block_reduce(m, 1);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS)
        s += expf(ldt(x, base + i) - m);
    float inv = 1.0f / block_reduce(s, 0);
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS)
        stt(y, base + i, expf(ldt(x, base + i) - m) * inv);
}

void gpu_softmax(gpuStream_t s, gpu_ten x, gpu_ten y, int64_t rows, int64_t n)
{
    RLX_LAUNCH(k_softmax, (unsigned)rows, ROW_THREADS, 0, s)(x, y, n);
}

/* One thread per output element. The angle and its sine/cosine are taken in double:
 * positions reach 1e5 and an f32 angle would lose most of its fraction there. */
__global__ static void k_rope(gpu_ten x, const int32_t *pos, gpu_ten inv_freq, gpu_ten y,
                              int64_t T, int64_t nh, int64_t d, int64_t rot)
{
    int64_t half = rot / 2, n = T * nh * d;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < n;
         e += (int64_t)gridDim.x * blockDim.x) {
        int64_t j = e % d, t = e / (nh * d), row = e - j;
        if (j >= 2 * half) {
            stt(y, e, ldt(x, e));
            continue;
        }
        int64_t i = j < half ? j : j - half;
        double th = (double)pos[t] * (double)ldt(inv_freq, i), sn, cs;
        sincos(th, &sn, &cs);
        double x1 = ldt(x, row + i), x2 = ldt(x, row + i + half);
        stt(y, e, (float)(j < half ? x1 * cs - x2 * sn : x2 * cs + x1 * sn));
    }
}

void gpu_rope(gpuStream_t s, gpu_ten x, const int32_t *pos, gpu_ten inv_freq, gpu_ten y,
              int64_t T, int64_t nh, int64_t d, int64_t rot)
{
    int64_t n = T * nh * d, b = (n + 255) / 256;
    RLX_LAUNCH(k_rope, (unsigned)(b < 1 ? 1 : (b > 524280 ? 524280 : b)), 256, 0, s)(
        x, pos, inv_freq, y, T, nh, d, rot);
}
