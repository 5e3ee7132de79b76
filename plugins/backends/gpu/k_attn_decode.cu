/* Decode attention (flash-decoding): few query rows against a long KV cache. The keys of
 * each (row, head) are split over nsplit blocks; a block's 4 warps take groups of KU keys
 * (all loads of a group in flight before the first use), keep an online softmax per warp,
 * merge them and write one partial (max, sum, acc[d]); a second kernel merges the nsplit
 * partials. Key ranges come from pos on the device, so a captured graph stays valid as
 * the cache grows. Each lane owns ND consecutive head dims (head dim <= 32*ND). */
#include "gpu_dtype.h"

#define AD_WARPS 4
#define AD_KU 8
#define AD_KEYS_PER_SPLIT 32
#define AD_MAX_SPLITS 64

static int dp_of(int d) { return d <= 64 ? 64 : d <= 128 ? 128 : 256; }

int gpu_attn_splits(int T, int S, int nh, int d, int sms)
{
    /* a lane's dims are loaded as pairs: the head dim must split evenly over the lanes */
    if (T > GPU_ATTN_DECODE_T || S <= 0 || d > 256 || d % (dp_of(d) / 32) != 0)
        return 0;
    int n = (S + AD_KEYS_PER_SPLIT - 1) / AD_KEYS_PER_SPLIT;
    int want = (4 * sms + nh * T - 1) / (nh * T); /* about four blocks per SM at full length */
    if (n > want)
        n = want;
    if (n > AD_MAX_SPLITS)
        n = AD_MAX_SPLITS;
    return n < 1 ? 1 : n;
}

int64_t gpu_attn_part_floats(int T, int nh, int d, int nsplit)
{
    return (int64_t)T * nh * nsplit * (dp_of(d) + 2);
}

/* the valid keys [lo, hi) of row t */
__device__ static void key_range(const gpu_attn &a, int t, int64_t *lo, int64_t *hi, int64_t *at)
{
    const int64_t p = a.pos ? a.pos[0] : 0;
    int64_t h = a.pos && p + a.T < a.S ? p + a.T : a.S, l = 0;
    *at = p + t;
    if (a.causal && *at + 1 < h)
        h = *at + 1;
    if (a.window > 0 && *at - a.window + 1 > l)
        l = *at - a.window + 1;
    *lo = l;
    *hi = h > l ? h : l;
}

/* ND consecutive elements from t at i (16-bit: ND/2 words; i is a multiple of ND) */
template <int ND> __device__ __forceinline__ void load_nd(const gpu_ten &t, int64_t i, float *f)
{
    if (t.dt == GDT_F32) {
#pragma unroll
        for (int k = 0; k < ND; k += 2) {
            float2 v = *(const float2 *)((const float *)t.p + i + k);
            f[k] = v.x;
            f[k + 1] = v.y;
        }
    } else {
#pragma unroll
        for (int k = 0; k < ND; k += 2) {
            uint32_t w = *(const uint32_t *)((const uint16_t *)t.p + i + k);
            f[k] = h_to_f((uint16_t)(w & 0xffffu), t.dt);
            f[k + 1] = h_to_f((uint16_t)(w >> 16), t.dt);
        }
    }
}

template <int ND>
__global__ __launch_bounds__(AD_WARPS * 32) static void k_attn_split(gpu_attn a)
{
    constexpr int DP = 32 * ND;
    __shared__ float sm_m[AD_WARPS], sm_l[AD_WARPS], sm_acc[AD_WARPS][DP];
    const int h = blockIdx.x, sp = blockIdx.y, t = blockIdx.z;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int kvh = h / (a.nh / a.nkv), d = a.d;
    const bool mine = lane * ND < d; /* d is even and a multiple of ND or padded past */
    int64_t lo, hi, at;
    key_range(a, t, &lo, &hi, &at);
    const int64_t chunk = (hi - lo + a.nsplit - 1) / a.nsplit;
    const int64_t j0 = lo + sp * chunk, j1 = j0 + chunk < hi ? j0 + chunk : hi;

    float q[ND], acc[ND], m = -INFINITY, l = 0.0f;
#pragma unroll
    for (int i = 0; i < ND; i++) {
        int dd = lane * ND + i;
        q[i] = dd < d ? ldt(a.q, ((int64_t)t * a.nh + h) * d + dd) : 0.0f;
        acc[i] = 0.0f;
    }
    for (int64_t g = j0 + (int64_t)warp * AD_KU; g < j1; g += AD_WARPS * AD_KU) {
        float kf[AD_KU][ND], vf[AD_KU][ND], s[AD_KU];
#pragma unroll
        for (int u = 0; u < AD_KU; u++) {
            int64_t j = g + u, off = (j * a.nkv + kvh) * d + lane * ND;
            if (j < j1 && mine) {
                load_nd<ND>(a.k, off, kf[u]);
                load_nd<ND>(a.v, off, vf[u]);
            } else {
#pragma unroll
                for (int i = 0; i < ND; i++)
                    kf[u][i] = vf[u][i] = 0.0f;
            }
        }
#pragma unroll
        for (int u = 0; u < AD_KU; u++) {
            float p = 0.0f;
#pragma unroll
            for (int i = 0; i < ND; i++)
                p += q[i] * kf[u][i];
            s[u] = p;
        }
#pragma unroll
        for (int w = 16; w > 0; w >>= 1)
#pragma unroll
            for (int u = 0; u < AD_KU; u++)
                s[u] += RLX_SHFL_XOR(s[u], w, 32);
        float mx = -INFINITY;
#pragma unroll
        for (int u = 0; u < AD_KU; u++) {
            int64_t j = g + u;
            float v = s[u] * a.scale;
            if (a.softcap > 0.0f)
                v = a.softcap * tanhf(v / a.softcap);
            if (j < j1 && a.mask.p)
                v += ldt(a.mask, (int64_t)t * a.S + j);
            s[u] = j < j1 ? v : -INFINITY;
            mx = fmaxf(mx, s[u]);
        }
        if (mx == -INFINITY)
            continue; /* every key of the group masked out */
        float mn = fmaxf(m, mx), corr = expf(m - mn); /* m = -inf: corr 0 */
        l *= corr;
#pragma unroll
        for (int i = 0; i < ND; i++)
            acc[i] *= corr;
#pragma unroll
        for (int u = 0; u < AD_KU; u++) {
            float p = s[u] == -INFINITY ? 0.0f : expf(s[u] - mn);
            l += p;
#pragma unroll
            for (int i = 0; i < ND; i++)
                acc[i] += p * vf[u][i];
        }
        m = mn;
    }
    if (lane == 0) {
        sm_m[warp] = m;
        sm_l[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < ND; i++)
        sm_acc[warp][lane * ND + i] = acc[i];
    __syncthreads();
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < AD_WARPS; w++)
        M = fmaxf(M, sm_m[w]);
    float *part = a.part + (((int64_t)t * a.nh + h) * a.nsplit + sp) * (DP + 2);
    float L = 0.0f;
#pragma unroll
    for (int w = 0; w < AD_WARPS; w++)
        L += sm_m[w] == -INFINITY ? 0.0f : sm_l[w] * expf(sm_m[w] - M);
    if (threadIdx.x == 0) {
        part[0] = M;
        part[1] = L;
    }
    for (int dd = threadIdx.x; dd < DP; dd += AD_WARPS * 32) {
        float o = 0.0f;
#pragma unroll
        for (int w = 0; w < AD_WARPS; w++)
            o += sm_m[w] == -INFINITY ? 0.0f : sm_acc[w][dd] * expf(sm_m[w] - M);
        part[2 + dd] = o;
    }
}

/* one block of AD_MERGE threads per (row, head): the splits' maxima and sums are read at
 * once (a thread each), their weights computed in shared memory, then each thread sums one
 * head dim over the splits with those loads independent of each other */
#define AD_MERGE 64
template <int DP> __global__ __launch_bounds__(AD_MERGE) static void k_attn_merge(gpu_attn a)
{
    __shared__ float sm[AD_MAX_SPLITS], sl[AD_MAX_SPLITS], sw[AD_MAX_SPLITS], sinv;
    RLX_PDL_TRIGGER(); /* the output projection after this may launch and fetch its weights */
    const int h = blockIdx.x, t = blockIdx.y, ns = a.nsplit;
    const float *part = a.part + ((int64_t)t * a.nh + h) * ns * (DP + 2);
    for (int sp = threadIdx.x; sp < ns; sp += AD_MERGE) {
        sm[sp] = part[sp * (DP + 2)];
        sl[sp] = part[sp * (DP + 2) + 1];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float M = -INFINITY, L = 0.0f;
        for (int sp = 0; sp < ns; sp++)
            M = fmaxf(M, sm[sp]);
        for (int sp = 0; sp < ns; sp++) {
            sw[sp] = sm[sp] == -INFINITY ? 0.0f : expf(sm[sp] - M);
            L += sl[sp] * sw[sp];
        }
        sinv = L > 0.0f ? 1.0f / L : 0.0f;
    }
    __syncthreads();
    for (int dd = threadIdx.x; dd < a.d; dd += AD_MERGE) {
        float o = 0.0f;
#pragma unroll 8
        for (int sp = 0; sp < ns; sp++)
            o += sw[sp] == 0.0f ? 0.0f : part[sp * (DP + 2) + 2 + dd] * sw[sp];
        stt(a.o, ((int64_t)t * a.nh + h) * a.d + dd, o * sinv);
    }
}

template <int ND> static void launch_decode(gpuStream_t s, const gpu_attn *a)
{
    dim3 g1((unsigned)a->nh, (unsigned)a->nsplit, (unsigned)a->T), g2((unsigned)a->nh, (unsigned)a->T);
    RLX_LAUNCH(k_attn_split<ND>, g1, AD_WARPS * 32, 0, s)(*a);
    RLX_LAUNCH(k_attn_merge<32 * ND>, g2, AD_MERGE, 0, s)(*a);
}

void gpu_attn_decode(gpuStream_t s, const gpu_attn *a)
{
    if (a->d <= 64)
        launch_decode<2>(s, a);
    else if (a->d <= 128)
        launch_decode<4>(s, a);
    else
        launch_decode<8>(s, a);
}
