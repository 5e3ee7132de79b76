/* Flash-style attention in f32 arithmetic (16-bit inputs of head dim 64/128/256 go to the
 * tensor-core kernel, k_attn_mma.cu): a block holds BQ query rows of one head and streams the keys in
 * blocks of BK, keeping a running max and sum per row (online softmax), so no T×S matrix
 * exists. TPR = 128/BQ consecutive threads share a row: each scores BK/TPR keys and owns
 * DP/TPR output dims. DP is the head dim rounded up (zero padded). */
#include "gpu_dtype.h"

template <int DP, int BQ, int BK, int ATTN_THREADS>
__global__ __launch_bounds__(ATTN_THREADS) static void k_attention(gpu_attn a)
{
    constexpr int TPR = ATTN_THREADS / BQ, NJ = BK / TPR, ND = DP / TPR;
    __shared__ float Qs[BQ][DP + 1];
    __shared__ float Ks[BK][DP + 1];
    __shared__ float Vs[BK][DP];
    __shared__ float Ps[BQ][BK + 1];

    const int h = blockIdx.y, q0 = blockIdx.x * BQ, tid = threadIdx.x;
    const int kvh = h / (a.nh / a.nkv), d = a.d;
    const int64_t p = a.pos ? a.pos[0] : 0;
    /* with pos: the keys written so far (j < p+T); without pos: all S keys (encoders) */
    const int64_t kv_len = a.pos && p + a.T < a.S ? p + a.T : a.S;

    for (int idx = tid; idx < BQ * DP; idx += ATTN_THREADS) {
        int r = idx / DP, c = idx % DP, t = q0 + r;
        Qs[r][c] = (t < a.T && c < d) ? ldt(a.q, ((int64_t)t * a.nh + h) * d + c) : 0.0f;
    }

    const int r = tid / TPR, lane = tid % TPR, t = q0 + r;
    const int64_t at = p + t; /* absolute position of this row */
    int64_t hi = kv_len, lo = 0;
    if (a.causal) {
        int64_t last = p + (q0 + BQ < a.T ? q0 + BQ : a.T) - 1;
        if (last + 1 < hi)
            hi = last + 1;
    }
    if (a.window > 0 && p + q0 - a.window + 1 > 0)
        lo = p + q0 - a.window + 1;

    float m = -INFINITY, l = 0.0f, acc[ND];
#pragma unroll
    for (int i = 0; i < ND; i++)
        acc[i] = 0.0f;

    for (int64_t kb = lo; kb < hi; kb += BK) {
        __syncthreads(); /* previous tiles fully consumed (and Qs written, first time) */
        for (int idx = tid; idx < BK * DP; idx += ATTN_THREADS) {
            int c = idx / DP, dd = idx % DP;
            int64_t j = kb + c;
            bool ok = j < hi && dd < d;
            int64_t off = (j * a.nkv + kvh) * d + dd;
            Ks[c][dd] = ok ? ldt(a.k, off) : 0.0f;
            Vs[c][dd] = ok ? ldt(a.v, off) : 0.0f;
        }
        __syncthreads();

        float sc[NJ];
#pragma unroll
        for (int jj = 0; jj < NJ; jj++)
            sc[jj] = 0.0f;
#pragma unroll 8
        for (int k = 0; k < DP; k++) {
            float qv = Qs[r][k];
#pragma unroll
            for (int jj = 0; jj < NJ; jj++)
                sc[jj] += qv * Ks[lane + TPR * jj][k];
        }
        float mx = -INFINITY;
#pragma unroll
        for (int jj = 0; jj < NJ; jj++) {
            int64_t j = kb + lane + TPR * jj;
            bool ok = t < a.T && j < kv_len && (!a.causal || j <= at) &&
                      (a.window <= 0 || j > at - a.window);
            float s = sc[jj] * a.scale;
            if (a.softcap > 0.0f)
                s = a.softcap * tanhf(s / a.softcap);
            if (ok && a.mask.p)
                s += ldt(a.mask, (int64_t)t * a.S + j);
            sc[jj] = ok ? s : -INFINITY;
            mx = fmaxf(mx, sc[jj]);
        }
#pragma unroll
        for (int w = TPR / 2; w > 0; w >>= 1)
            mx = fmaxf(mx, RLX_SHFL_XOR(mx, w, TPR));
        float mn = fmaxf(m, mx);
        float alpha = (mn == -INFINITY) ? 1.0f : expf(m - mn);
        float ps = 0.0f;
#pragma unroll
        for (int jj = 0; jj < NJ; jj++) {
            float pj = (sc[jj] == -INFINITY) ? 0.0f : expf(sc[jj] - mn);
            Ps[r][lane + TPR * jj] = pj;
            ps += pj;
        }
#pragma unroll
        for (int w = TPR / 2; w > 0; w >>= 1)
            ps += RLX_SHFL_XOR(ps, w, TPR);
        l = l * alpha + ps;
        m = mn;
        __syncthreads();
#pragma unroll
        for (int i = 0; i < ND; i++)
            acc[i] *= alpha;
        for (int c = 0; c < BK; c++) {
            float pc = Ps[r][c];
#pragma unroll
            for (int i = 0; i < ND; i++)
                acc[i] += pc * Vs[c][lane + TPR * i];
        }
    }
    if (t >= a.T)
        return;
    float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
    for (int i = 0; i < ND; i++) {
        int dd = lane + TPR * i;
        if (dd < d)
            stt(a.o, ((int64_t)t * a.nh + h) * d + dd, acc[i] * inv);
    }
}

/* NT threads a block; shared memory (BQ + 2 BK) × DP floats stays under 48 KB */
template <int DP, int BQ, int BK, int NT = 128> static void launch(gpuStream_t s, const gpu_attn *a)
{
    dim3 grid((unsigned)((a->T + BQ - 1) / BQ), (unsigned)a->nh);
    RLX_LAUNCH((k_attention<DP, BQ, BK, NT>), grid, NT, 0, s)(*a);
}

void gpu_attention(gpuStream_t s, const gpu_attn *a)
{
    /* the decode path loads pairs of elements: 8-byte aligned k and v */
    if (a->T <= GPU_ATTN_DECODE_T && a->nsplit > 0 && a->part && a->cnt &&
        ((uintptr_t)a->k.p | (uintptr_t)a->v.p) % 8 == 0) {
        gpu_attn_decode(s, a);
        return;
    }
    if (gpu_attn_mma_ok(a)) {
        gpu_attn_mma(s, a);
        return;
    }
    if (a->d <= 64)
        launch<64, 64, 32>(s, a);
    else if (a->d <= 128)
        launch<128, 32, 16>(s, a);
    else if (a->d <= 256)
        launch<256, 16, 8>(s, a);
    else
        launch<512, 4, 8, 32>(s, a);
}
