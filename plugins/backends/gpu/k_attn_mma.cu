/* Prefill attention on tensor cores (FlashAttention-2 style) for 16-bit q, k, v of one dtype
 * and head dim 64, 128 or 256: a block of 4 warps (or two key groups of 4, fa_smem) takes 64
 * query rows of one head, each warp 16 of them; K and V tiles of BK keys are copied into
 * shared memory asynchronously, two stages deep (V read back transposed by ldmatrix), S = Q·Kᵀ
 * and O += P·V run as m16n8k16 MMAs with f32 accumulators held in registers, the softmax is
 * online (running max and sum per row), so no T×S matrix exists. P is rounded to the input
 * dtype for the second product, as FlashAttention does. HIP has no mma.sync: there
 * gpu_attn_mma_ok says no and the SIMT kernel (k_attention.cu) runs. */
#include "gpu_mma.h"

#define FA_WARPS 4
#define FA_BQ (16 * FA_WARPS)

int gpu_attn_mma_groups(int T, int nh, int sms)
{
    const int64_t blocks = (int64_t)nh * ((T + FA_BQ - 1) / FA_BQ);
    return blocks <= 2 * (int64_t)sms ? 2 : 1;
}

#if defined(RLX_GPU_HIP)
int gpu_attn_mma_ok(const gpu_attn *a)
{
    (void)a;
    return 0;
}
void gpu_attn_mma(gpuStream_t s, const gpu_attn *a)
{
    (void)s;
    (void)a;
}
#else

/* K and V tiles of BK keys, two stages a key group: the next tile's copies run under this
 * one's MMAs. KS key groups of 4 warps share the block's 64 rows and split its key tiles:
 * with few blocks (a prompt of a few hundred rows, or a rank's half of the heads) the block
 * with the most keys sets the launch's time, and KS = 2 halves its chain of tiles. Group
 * g > 0 leaves (m, l, o) a thread in its own stages (freed once its tiles are done), and
 * group 0 merges them. */
template <int D, int BK, int KS> struct fa_smem {
    static constexpr int P = D + 8; /* row pitch in halves: +16 bytes, conflict-free rows */
    static constexpr size_t group = (size_t)2 * 2 * BK * P * sizeof(uint16_t);
    static constexpr size_t bytes = KS * group;
    /* a thread's partial: o (D/2 floats), m and l of its two rows */
    static_assert((size_t)FA_WARPS * 32 * (D / 2 + 4) * sizeof(float) <= group, "a partial fits its group's stages");
};

/* the key group's 4 warps meet (named barrier 1 + group; 0 is __syncthreads) */
template <int KS> __device__ __forceinline__ void fa_gsync(int grp)
{
    if (KS == 1)
        __syncthreads();
    else
        asm volatile("bar.sync %0, %1;" ::"r"(1 + grp), "n"(FA_WARPS * 32) : "memory");
}

template <int DT, int D, int BK, int KS>
__global__ __launch_bounds__(FA_WARPS * 32 * KS) static void k_attn_mma(gpu_attn a)
{
    constexpr int P = fa_smem<D, BK, KS>::P;
    extern __shared__ __align__(16) uint16_t fa_sm[];
    constexpr int STAGE = 2 * BK * P; /* a stage: K rows, then V rows */

    /* heads vary fastest and the last query tiles (the most keys) go first: the light
     * tiles fill the tail */
    const int h = blockIdx.x, q0 = (gridDim.y - 1 - blockIdx.y) * FA_BQ;
    const int grp = (int)threadIdx.x / (FA_WARPS * 32), tid = (int)threadIdx.x % (FA_WARPS * 32);
    const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, tg = lane & 3;
    uint16_t *gsm = fa_sm + (size_t)grp * 2 * STAGE; /* this key group's two stages */
    const int kvh = h / (a.nh / a.nkv);
    const int64_t p = a.pos ? a.pos[0] : 0;
    const int64_t kv_len = a.pos && p + a.T < a.S ? p + a.T : a.S;
    const int rw[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8}; /* this thread's rows */
    const uint16_t *Q = (const uint16_t *)a.q.p, *K = (const uint16_t *)a.k.p,
                   *V = (const uint16_t *)a.v.p;

    int64_t hi = kv_len, lo = 0;
    if (a.causal) {
        int64_t last = p + (q0 + FA_BQ < a.T ? q0 + FA_BQ : a.T) - 1;
        if (last + 1 < hi)
            hi = last + 1;
    }
    if (a.window > 0 && p + q0 - a.window + 1 > 0)
        lo = p + q0 - a.window + 1;
    if (KS > 1 && lo < hi) { /* this group's share of the key tiles, the first groups the larger */
        const int64_t nt = (hi - lo + BK - 1) / BK;
        const int64_t a0 = (nt * grp + KS - 1) / KS, a1 = (nt * (grp + 1) + KS - 1) / KS;
        const int64_t glo = lo + a0 * BK, ghi = lo + a1 * BK < hi ? lo + a1 * BK : hi;
        lo = glo;
        hi = ghi;
    }

    /* tile kb's K and V rows into stage st; rows at or past hi are zeros */
    auto load = [&](int st, int64_t kb) {
        for (int idx = tid; idx < BK * D / 8; idx += FA_WARPS * 32) {
            int rr = idx / (D / 8), cc = (idx % (D / 8)) * 8;
            int64_t j = kb + rr;
            int64_t off = j < hi ? (j * a.nkv + kvh) * D + cc : 0;
            int n = j < hi ? 16 : 0;
            cp16(&gsm[st * STAGE + rr * P + cc], K + off, n);
            cp16(&gsm[st * STAGE + (BK + rr) * P + cc], V + off, n);
        }
        cp_commit();
    };
    if (lo < hi)
        load(0, lo);

    uint32_t qf[D / 16][4];
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int r = rw[i & 1], c = ks * 16 + tg * 2 + (i >> 1) * 8;
            qf[ks][i] = r < a.T ? ld32(Q + ((int64_t)r * a.nh + h) * D + c) : 0u;
        }
    float o[D / 8][4], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int n = 0; n < D / 8; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;

    int st = 0;
    for (int64_t kb = lo; kb < hi; kb += BK, st ^= 1) {
        if (kb + BK < hi) {
            load(st ^ 1, kb + BK); /* its stage was consumed before the last barrier */
            cp_wait<1>();
        } else {
            cp_wait<0>();
        }
        fa_gsync<KS>(grp); /* this tile landed for every thread of the group */
        const uint16_t *Kt = gsm + st * STAGE, *Vt = Kt + BK * P;

        float s[BK / 8][4];
        fa_qk<DT, D, BK / 8, P>(s, qf, Kt, g, tg);
        float mx[2] = {-INFINITY, -INFINITY};
        /* a tile every row of the block sees whole: no per-key tests */
        const bool whole = !a.mask.p && a.softcap <= 0.0f && q0 + FA_BQ <= a.T && kb + BK <= kv_len &&
                           (!a.causal || kb + BK - 1 <= p + q0) &&
                           (a.window <= 0 || kb > p + q0 + FA_BQ - 1 - a.window);
        if (whole) {
#pragma unroll
            for (int nt = 0; nt < BK / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    s[nt][e] *= a.scale;
                    mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
                }
        } else {
#pragma unroll
        for (int nt = 0; nt < BK / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int r = rw[e >> 1];
                int64_t j = kb + nt * 8 + tg * 2 + (e & 1), at = p + r;
                bool ok = r < a.T && j < kv_len && (!a.causal || j <= at) &&
                          (a.window <= 0 || j > at - a.window);
                float v = s[nt][e] * a.scale;
                if (a.softcap > 0.0f)
                    v = a.softcap * tanhf(v / a.softcap);
                if (ok && a.mask.p)
                    v += ldt(a.mask, (int64_t)r * a.S + j);
                s[nt][e] = ok ? v : -INFINITY;
                mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
            }
        }
        fa_softmax<BK / 8, D / 8>(s, mx, m, l, o);
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++)
            fa_pv16<DT, D, P>(o, s[2 * kk], s[2 * kk + 1], Vt + kk * 16 * P, lane);
        fa_gsync<KS>(grp); /* every warp is done with stage st before it is refilled */
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += RLX_SHFL_XOR(l[r], 1, 32);
        l[r] += RLX_SHFL_XOR(l[r], 2, 32);
    }
    if (KS > 1) { /* the groups' partials of the same rows, in the same fragment places, merged */
        float *part = (float *)gsm + (size_t)tid * (D / 2 + 4);
        if (grp > 0) {
#pragma unroll
            for (int n = 0; n < D / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    part[n * 4 + e] = o[n][e];
            part[D / 2] = m[0], part[D / 2 + 1] = m[1], part[D / 2 + 2] = l[0], part[D / 2 + 3] = l[1];
        }
        __syncthreads();
        if (grp > 0)
            return;
#pragma unroll
        for (int gi = 1; gi < KS; gi++) {
            const float *q = (const float *)(fa_sm + (size_t)gi * 2 * STAGE) + (size_t)tid * (D / 2 + 4);
            float a0[2], a1[2];
#pragma unroll
            for (int r = 0; r < 2; r++) { /* a row no key reached has m -inf: weight 0 */
                const float m1 = q[D / 2 + r], mn = fmaxf(m[r], m1);
                a0[r] = m[r] == -INFINITY ? 0.0f : expf(m[r] - mn);
                a1[r] = m1 == -INFINITY ? 0.0f : expf(m1 - mn);
                l[r] = l[r] * a0[r] + q[D / 2 + 2 + r] * a1[r];
                m[r] = mn;
            }
#pragma unroll
            for (int n = 0; n < D / 8; n++)
#pragma unroll
                for (int e = 0; e < 4; e++)
                    o[n][e] = o[n][e] * a0[e >> 1] + q[n * 4 + e] * a1[e >> 1];
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++)
        l[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
#pragma unroll
    for (int n = 0; n < D / 8; n++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int r = rw[e >> 1];
            if (r < a.T)
                stt(a.o, ((int64_t)r * a.nh + h) * D + n * 8 + tg * 2 + (e & 1), o[n][e] * l[e >> 1]);
        }
}

int gpu_attn_mma_ok(const gpu_attn *a)
{
    int dt = a->q.dt;
    uintptr_t al = (uintptr_t)a->q.p | (uintptr_t)a->k.p | (uintptr_t)a->v.p;
    return (dt == GDT_BF16 || dt == GDT_F16) && a->k.dt == dt && a->v.dt == dt &&
           (a->d == 64 || a->d == 128 || a->d == 256) && al % 16 == 0;
}

template <int DT, int D, int BK, int KS> static void launch_k(gpuStream_t s, const gpu_attn *a, dim3 grid)
{
    constexpr size_t sm = fa_smem<D, BK, KS>::bytes;
    static unsigned char opted[64];
    smem_opt_in(k_attn_mma<DT, D, BK, KS>, (int)sm, opted);
    RLX_LAUNCH((k_attn_mma<DT, D, BK, KS>), grid, FA_WARPS * 32 * KS, sm, s)(*a);
}

template <int DT, int D, int BK> static void launch_d(gpuStream_t s, const gpu_attn *a)
{
    dim3 grid((unsigned)a->nh, (unsigned)((a->T + FA_BQ - 1) / FA_BQ));
    if (a->kgroups > 1)
        launch_k<DT, D, BK, 2>(s, a, grid);
    else
        launch_k<DT, D, BK, 1>(s, a, grid);
}

template <int DT> static void launch_dt(gpuStream_t s, const gpu_attn *a)
{
    if (a->d == 64)
        launch_d<DT, 64, 64>(s, a);
    else if (a->d == 128)
        launch_d<DT, 128, 64>(s, a);
    else
        launch_d<DT, 256, 32>(s, a);
}

void gpu_attn_mma(gpuStream_t s, const gpu_attn *a)
{
    if (a->q.dt == GDT_BF16)
        launch_dt<GDT_BF16>(s, a);
    else
        launch_dt<GDT_F16>(s, a);
}
#endif
