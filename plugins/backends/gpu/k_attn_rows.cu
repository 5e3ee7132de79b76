/* Batched decode (rlx.attention_rows, rlx.cache_write_rows): T rows, each the one new
 * token of its own sequence, cached in slot slots[t] of a pool [P, S, nkv, d] at position
 * pos[t]. Attention: one block per (row, head); its warps take keys 0..pos[t] of the
 * row's slot in turn (one key per warp step, the dot product reduced over the lanes),
 * keep an online softmax each and merge at the end. Slots and positions are read on the
 * device (a captured graph stays valid); a bad one is recorded in err. With key splits
 * planned (nsplit), the rows go to the decode kernel instead (k_attn_decode.cu: GQA heads
 * a block, keys split over blocks), which this kernel stays the fallback of. */
#include "gpu_dtype.h"

#define AR_WARPS 4

template <int ND>
__global__ static void k_attn_rows(gpu_attn a)
{
    __shared__ float s_m[AR_WARPS], s_l[AR_WARPS], s_acc[AR_WARPS][32 * ND];
    const int b = blockIdx.x / a.nh, h = blockIdx.x % a.nh;
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32, d = a.d;
    const int64_t p = a.pos[b], sl = a.slots[b];
    const int64_t oq = ((int64_t)b * a.nh + h) * d;
    if (p < 0 || p >= a.S || sl < 0 || sl >= a.P) {
        if (threadIdx.x == 0 && h == 0)
            rows_error(a.err, b, a.node);
        for (int i = threadIdx.x; i < d; i += blockDim.x)
            stt(a.o, oq + i, 0.0f);
        return;
    }
    const int kvh = h / (a.nh / a.nkv);
    const int64_t stride = (int64_t)a.nkv * d, base = sl * a.S * stride + (int64_t)kvh * d;
    float q[ND], acc[ND];
#pragma unroll
    for (int k = 0; k < ND; k++) {
        int i = lane * ND + k;
        q[k] = i < d ? ldt(a.q, oq + i) : 0.0f;
        acc[k] = 0.0f;
    }
    int64_t lo = a.window > 0 && p - a.window + 1 > 0 ? p - a.window + 1 : 0;
    float m = -INFINITY, l = 0.0f;
    for (int64_t j = lo + w; j <= p; j += AR_WARPS) {
        const int64_t r = base + j * stride;
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < ND; k++) {
            int i = lane * ND + k;
            if (i < d)
                s += q[k] * ldt(a.k, r + i);
        }
        for (int o = 16; o > 0; o >>= 1)
            s += RLX_SHFL_XOR(s, o, 32);
        s *= a.scale;
        if (a.softcap > 0)
            s = a.softcap * tanhf(s / a.softcap);
        float mn = s > m ? s : m, alpha = m == -INFINITY ? 0.0f : __expf(m - mn), e = __expf(s - mn);
        l = l * alpha + e;
#pragma unroll
        for (int k = 0; k < ND; k++) {
            int i = lane * ND + k;
            acc[k] = acc[k] * alpha + (i < d ? e * ldt(a.v, r + i) : 0.0f);
        }
        m = mn;
    }
    if (lane == 0) {
        s_m[w] = m;
        s_l[w] = l;
    }
#pragma unroll
    for (int k = 0; k < ND; k++)
        s_acc[w][lane * ND + k] = acc[k];
    __syncthreads();
    float M = -INFINITY;
    for (int k = 0; k < AR_WARPS; k++)
        M = s_m[k] > M ? s_m[k] : M;
    float L = 0.0f;
    for (int k = 0; k < AR_WARPS; k++)
        L += s_m[k] == -INFINITY ? 0.0f : s_l[k] * __expf(s_m[k] - M);
    for (int i = threadIdx.x; i < d; i += blockDim.x) {
        float v = 0.0f;
        for (int k = 0; k < AR_WARPS; k++)
            v += s_m[k] == -INFINITY ? 0.0f : s_acc[k][i] * __expf(s_m[k] - M);
        stt(a.o, oq + i, L > 0 ? v / L : 0.0f);
    }
}

void gpu_attention_rows(gpuStream_t s, const gpu_attn *a)
{
    unsigned grid = (unsigned)a->T * (unsigned)a->nh;
    if (!grid)
        return;
    if (a->nsplit > 0 && a->part && a->cnt && ((uintptr_t)a->k.p | (uintptr_t)a->v.p) % 8 == 0) {
        gpu_attn_decode(s, a);
        return;
    }
    if (a->d <= 64)
        RLX_LAUNCH(k_attn_rows<2>, grid, 32 * AR_WARPS, 0, s)(*a);
    else if (a->d <= 128)
        RLX_LAUNCH(k_attn_rows<4>, grid, 32 * AR_WARPS, 0, s)(*a);
    else
        RLX_LAUNCH(k_attn_rows<8>, grid, 32 * AR_WARPS, 0, s)(*a);
}

template <typename E>
__global__ static void k_cache_write_rows(E *cache, const E *x, const int32_t *pos, const int32_t *slots,
                                          int64_t P, int64_t S, int64_t T, int64_t row, int *err, int node)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < T * row;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t b = i / row, c = i - b * row, p = pos[b], sl = slots[b];
        if (p < 0 || p >= S || sl < 0 || sl >= P) {
            if (c == 0)
                rows_error(err, (int)b, node);
            continue;
        }
        cache[(sl * S + p) * row + c] = x[i];
    }
}

void gpu_cache_write_rows(gpuStream_t s, void *cache, const void *x, const int32_t *pos, const int32_t *slots,
                          int64_t P, int64_t S, int64_t T, int64_t row_elems, int esize, int *err, int node)
{
    int64_t n = T * row_elems, blocks = (n + 255) / 256;
    unsigned g = (unsigned)(blocks < 1 ? 1 : blocks > 4096 ? 4096 : blocks);
    if (esize == 2)
        RLX_LAUNCH(k_cache_write_rows<uint16_t>, g, 256, 0, s)((uint16_t *)cache, (const uint16_t *)x, pos, slots,
                                                                  P, S, T, row_elems, err, node);
    else
        RLX_LAUNCH(k_cache_write_rows<uint32_t>, g, 256, 0, s)((uint32_t *)cache, (const uint32_t *)x, pos, slots,
                                                                  P, S, T, row_elems, err, node);
}
