/* Decode attention (flash-decoding, GQA-grouped): few query rows against a long KV cache,
 * one launch. A block serves up to AD_GH query heads that share one KV head, so each key
 * and value row is read once for all of them. The keys of a row are split over as many
 * blocks as its length needs (AD_MIN_KEYS each, at most nsplit: decided on the device
 * from pos, so a captured graph stays valid as the cache grows). A row that one block
 * covers is written by that block; otherwise each block writes a partial (max, sum,
 * acc[d]) per head, and the last block of the row to finish (a counter) merges them.
 * Within a block, 8 warps take groups of KU keys (every load of a group in flight before
 * the first use) with an online softmax per warp and head. Each lane owns ND consecutive
 * head dims (head dim <= 32*ND). */
#include "gpu_mma.h"

#define AD_WARPS 8 /* a block's warps: the latency of one warp's chain is what a block costs */
#define AD_GH 4         /* query heads a block serves */
#define AD_MIN_KEYS 32  /* keys a block takes before a row is split over more blocks */
#define AD_MAX_SPLITS 64

static int dp_of(int d) { return d <= 64 ? 64 : d <= 128 ? 128 : 256; }
static int groups_of(int nh, int nkv) { return nkv * ((nh / nkv + AD_GH - 1) / AD_GH); }

int gpu_attn_splits(int T, int S, int nh, int nkv, int d, int sms, int min_keys)
{
    return T > GPU_ATTN_DECODE_T ? 0 : gpu_attn_key_splits(T, S, nh, nkv, d, sms, min_keys);
}

int gpu_attn_key_splits(int T, int S, int nh, int nkv, int d, int sms, int min_keys)
{
    const int mk = min_keys > 0 ? min_keys : AD_MIN_KEYS;
    /* a lane's dims are loaded as pairs: the head dim must split evenly over the lanes */
    if (T <= 0 || S <= 0 || d > 256 || d % (dp_of(d) / 32) != 0 || nkv <= 0 || nh % nkv != 0)
        return 0;
    int n = (S + mk - 1) / mk, bl = groups_of(nh, nkv) * T;
    int want = (2 * sms + bl - 1) / bl; /* about two blocks per SM at full length */
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

int64_t gpu_attn_counters(int T, int nh, int nkv) { return (int64_t)T * groups_of(nh, nkv); }

/* the valid keys [lo, hi) of row t (batched rows: its own position, keys 0..pos) */
__device__ static void key_range(const gpu_attn &a, int t, int64_t *lo, int64_t *hi)
{
    if (a.slots) {
        const int64_t p = a.pos[t];
        *lo = a.window > 0 && p - a.window + 1 > 0 ? p - a.window + 1 : 0;
        *hi = p + 1;
        return;
    }
    const int64_t p = a.pos ? a.pos[0] : 0, at = p + t;
    int64_t h = a.pos && p + a.T < a.S ? p + a.T : a.S, l = 0;
    if (a.causal && at + 1 < h)
        h = at + 1;
    if (a.window > 0 && at - a.window + 1 > l)
        l = at - a.window + 1;
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

/* partials other blocks wrote during this launch: read from L2, never a stale L1 line */
__device__ __forceinline__ float ld_l2(const float *p)
{
#if defined(RLX_GPU_HIP)
    return __builtin_nontemporal_load(p);
#else
    return __ldcg(p);
#endif
}

/* After every warp stored its (max, sum, acc) per head in sm_*: merge the warps, then
 * write the output (a row one block covers) or a partial; the last block of the row and
 * head group to finish merges every block's partial. */
template <int DP>
__device__ static void finish(const gpu_attn &a, unsigned *cnt, int t, int hg, int sp, int h0, int gn, int ns,
                              const float (*sm_m)[AD_GH], const float (*sm_l)[AD_GH],
                              const float (*sm_acc)[AD_GH][DP])
{
    __shared__ float sw[AD_GH][AD_MAX_SPLITS], sl[AD_GH][AD_MAX_SPLITS], sinv[AD_GH];
    __shared__ int s_last;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, d = a.d;
    __syncthreads();
    /* the warps' results merged: one (max, sum, acc) per head, written out or as a partial */
    for (int e = threadIdx.x; e < gn * DP; e += AD_WARPS * 32) {
        const int g = e / DP, dd = e % DP;
        float M = -INFINITY, L = 0.0f, o = 0.0f;
#pragma unroll
        for (int w = 0; w < AD_WARPS; w++)
            M = fmaxf(M, sm_m[w][g]);
#pragma unroll
        for (int w = 0; w < AD_WARPS; w++) {
            float c = sm_m[w][g] == -INFINITY ? 0.0f : expf(sm_m[w][g] - M);
            L += sm_l[w][g] * c;
            o += sm_acc[w][g][dd] * c;
        }
        if (ns == 1) {
            if (dd < d)
                stt(a.o, ((int64_t)t * a.nh + h0 + g) * d + dd, L > 0.0f ? o / L : 0.0f);
            continue;
        }
        float *part = a.part + (((int64_t)t * a.nh + h0 + g) * a.nsplit + sp) * (DP + 2);
        if (dd == 0) {
            part[0] = M;
            part[1] = L;
        }
        part[2 + dd] = o;
    }
    if (ns == 1)
        return;
    /* the last block of this row and head group to finish merges every block's partial */
    __threadfence();
    __syncthreads();
    unsigned *c = cnt + (int64_t)t * gridDim.x + hg;
    if (threadIdx.x == 0)
        s_last = atomicAdd(c, 1u) == (unsigned)ns - 1;
    __syncthreads();
    if (!s_last)
        return;
    __threadfence();
    /* every partial's max and sum at once (a thread each: independent loads), then the
     * weights in shared memory, then each output a sum of independent loads */
    for (int e = threadIdx.x; e < gn * ns; e += AD_WARPS * 32) {
        const int g = e / ns, p = e % ns;
        const float *part = a.part + (((int64_t)t * a.nh + h0 + g) * a.nsplit + p) * (DP + 2);
        sw[g][p] = ld_l2(part);
        sl[g][p] = ld_l2(part + 1);
    }
    __syncthreads();
    if (warp < gn) { /* warp g weighs head g's partials: lanes over the splits */
        const int g = warp;
        float M = -INFINITY, L = 0.0f;
        for (int p = lane; p < ns; p += 32)
            M = fmaxf(M, sw[g][p]);
#pragma unroll
        for (int w = 16; w > 0; w >>= 1)
            M = fmaxf(M, RLX_SHFL_XOR(M, w, 32));
        for (int p = lane; p < ns; p += 32) {
            float w = sw[g][p] == -INFINITY ? 0.0f : expf(sw[g][p] - M);
            L += sl[g][p] * w;
            sw[g][p] = w;
        }
#pragma unroll
        for (int w = 16; w > 0; w >>= 1)
            L += RLX_SHFL_XOR(L, w, 32);
        if (lane == 0)
            sinv[g] = L > 0.0f ? 1.0f / L : 0.0f;
    }
    if (threadIdx.x == 0)
        *c = 0; /* ready for the next launch (graph replays reuse the counters) */
    __syncthreads();
    for (int e = threadIdx.x; e < gn * d; e += AD_WARPS * 32) {
        const int g = e / d, dd = e % d;
        const float *part = a.part + ((int64_t)t * a.nh + h0 + g) * a.nsplit * (DP + 2) + 2 + dd;
        float o = 0.0f;
        /* unconditional loads, so they issue back to back (a block with no keys wrote a
         * zero acc and gets weight 0) */
#pragma unroll 16
        for (int p = 0; p < ns; p++)
            o += ld_l2(part + (int64_t)p * (DP + 2)) * sw[g][p];
        stt(a.o, ((int64_t)t * a.nh + h0 + g) * d + dd, o * sinv[g]);
    }
}

template <int ND, int KU>
__global__ __launch_bounds__(AD_WARPS * 32) static void k_attn_gqa(gpu_attn a, unsigned *cnt)
{
    constexpr int DP = 32 * ND;
    __shared__ float sm_m[AD_WARPS][AD_GH], sm_l[AD_WARPS][AD_GH], sm_acc[AD_WARPS][AD_GH][DP];
    RLX_PDL_TRIGGER(); /* the output projection after this may launch and fetch its weights */
    const int G = a.nh / a.nkv, ngk = (G + AD_GH - 1) / AD_GH;
    const int hg = blockIdx.x, sp = blockIdx.y, t = blockIdx.z, kvh = hg / ngk;
    const int h0 = kvh * G + (hg % ngk) * AD_GH, gn = min(AD_GH, G - (hg % ngk) * AD_GH);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, d = a.d;
    const bool mine = lane * ND < d; /* d is even and a multiple of ND or padded past */
    if (!a.early)
        RLX_PDL_WAIT(); /* pos, k and v may come from the kernels before */
    int64_t kvb = 0; /* batched rows: the first element of the row's slot */
    if (a.slots) {
        const int64_t p = a.pos[t], sl = a.slots[t];
        if (p < 0 || p >= a.S || sl < 0 || sl >= a.P) { /* uniform over the row's blocks */
            if (threadIdx.x == 0 && hg == 0 && sp == 0)
                rows_error(a.err, t, a.node);
            for (int e = threadIdx.x; sp == 0 && e < gn * d; e += AD_WARPS * 32)
                stt(a.o, ((int64_t)t * a.nh + h0 + e / d) * d + e % d, 0.0f);
            return;
        }
        kvb = sl * a.S * a.nkv * d;
    }
    int64_t lo, hi;
    key_range(a, t, &lo, &hi);
    const int len = (int)(hi - lo); /* 32-bit: a 64-bit division is a long dependent chain */
    const int mk = a.min_keys > 0 ? a.min_keys : AD_MIN_KEYS;
    int ns = (len + mk - 1) / mk; /* blocks this row needs */
    ns = ns < 1 ? 1 : ns > a.nsplit ? a.nsplit : ns;
    if (sp >= ns)
        return;
    const int chunk = (len + ns - 1) / ns;
    const int64_t j0 = lo + (int64_t)sp * chunk, j1 = j0 + chunk < hi ? j0 + chunk : hi;
    /* early: the rows before pos were written by earlier steps (this step's cache writes
     * store rows pos on), so the warp's first group of them loads before the wait */
    const int64_t fixed = a.early && a.pos ? a.pos[0] : 0;
    float kf[KU][ND], vf[KU][ND];
    int64_t j = j0 + (int64_t)warp * KU;
#pragma unroll
    for (int u = 0; u < KU; u++) {
        int64_t off = kvb + ((j + u) * a.nkv + kvh) * d + lane * ND;
        if (j + u < j1 && j + u < fixed && mine) {
            load_nd<ND>(a.k, off, kf[u]);
            load_nd<ND>(a.v, off, vf[u]);
        }
    }
    if (a.early)
        RLX_PDL_WAIT(); /* q and this step's cache rows come from the kernels before */
    float q[AD_GH][ND], acc[AD_GH][ND], m[AD_GH], l[AD_GH];
#pragma unroll
    for (int g = 0; g < AD_GH; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int i = 0; i < ND; i++) {
            int dd = lane * ND + i;
            q[g][i] = g < gn && dd < d ? ldt(a.q, ((int64_t)t * a.nh + h0 + g) * d + dd) : 0.0f;
            acc[g][i] = 0.0f;
        }
    }

    for (bool first = true; j < j1; j += AD_WARPS * KU, first = false) {
        float s[AD_GH][KU];
#pragma unroll
        for (int u = 0; u < KU; u++) {
            int64_t off = kvb + ((j + u) * a.nkv + kvh) * d + lane * ND;
            if (first && j + u < fixed) {
                /* loaded before the wait (or past j1 / not this lane's: zeroed below) */
            } else if (j + u < j1 && mine) {
                load_nd<ND>(a.k, off, kf[u]);
                load_nd<ND>(a.v, off, vf[u]);
            }
            if (!(j + u < j1 && mine)) {
#pragma unroll
                for (int i = 0; i < ND; i++)
                    kf[u][i] = vf[u][i] = 0.0f;
            }
        }
#pragma unroll
        for (int g = 0; g < AD_GH; g++)
#pragma unroll
            for (int u = 0; u < KU; u++) {
                float p = 0.0f;
#pragma unroll
                for (int i = 0; i < ND; i++)
                    p += q[g][i] * kf[u][i];
                s[g][u] = p;
            }
#pragma unroll
        for (int w = 16; w > 0; w >>= 1)
#pragma unroll
            for (int g = 0; g < AD_GH; g++)
#pragma unroll
                for (int u = 0; u < KU; u++)
                    s[g][u] += RLX_SHFL_XOR(s[g][u], w, 32);
        float mk[KU]; /* the additive mask of each key (one per row, shared by the heads) */
#pragma unroll
        for (int u = 0; u < KU; u++)
            mk[u] = j + u < j1 && a.mask.p ? ldt(a.mask, (int64_t)t * a.S + j + u) : 0.0f;
#pragma unroll
        for (int g = 0; g < AD_GH; g++) {
            float mx = -INFINITY;
#pragma unroll
            for (int u = 0; u < KU; u++) {
                float v = s[g][u] * a.scale;
                if (a.softcap > 0.0f)
                    v = a.softcap * tanhf(v / a.softcap);
                s[g][u] = j + u < j1 ? v + mk[u] : -INFINITY;
                mx = fmaxf(mx, s[g][u]);
            }
            if (mx == -INFINITY)
                continue; /* every key of the group masked out */
            float mn = fmaxf(m[g], mx), corr = expf(m[g] - mn); /* m = -inf: corr 0 */
            l[g] *= corr;
#pragma unroll
            for (int i = 0; i < ND; i++)
                acc[g][i] *= corr;
#pragma unroll
            for (int u = 0; u < KU; u++) {
                float p = s[g][u] == -INFINITY ? 0.0f : expf(s[g][u] - mn);
                l[g] += p;
#pragma unroll
                for (int i = 0; i < ND; i++)
                    acc[g][i] += p * vf[u][i];
            }
            m[g] = mn;
        }
    }
#pragma unroll
    for (int g = 0; g < AD_GH; g++) {
        if (lane == 0) {
            sm_m[warp][g] = m[g];
            sm_l[warp][g] = l[g];
        }
#pragma unroll
        for (int i = 0; i < ND; i++)
            sm_acc[warp][g][lane * ND + i] = acc[g][i];
    }
    finish<DP>(a, cnt, t, hg, sp, h0, gn, ns, sm_m, sm_l, sm_acc);
}

#if !defined(RLX_GPU_HIP)
/* The same work on tensor cores (16-bit q, k, v of one dtype, d 64 or 128): a block's keys
 * are split into tiles of DM_BK, warp w taking tiles w, w + 8, ...; each warp copies its
 * tiles into its own NS shared-memory stages (cp.async; the rows before pos before the wait,
 * as above), then runs S = Q·Kᵀ and O += P·V as m16n8k16 MMAs with the block's query heads
 * as the A rows (up to AD_GH of the 16; the rest zero) and an online softmax of rows g only
 * (scores in log2 units; rows g + 8 are never heads), P rounded to the input dtype as the
 * prefill kernel does. A block takes NS tiles a warp, so one block covers a row of up to
 * 8 * NS * DM_BK keys and no partial leaves it; longer rows split over blocks and merge as
 * above (finish). Each warp's (max, sum, acc) per head goes through shared memory to finish. */
#define DM_BK 16 /* keys a tile: one k-step of P·V */
static int dm_stages_max(int d) { return d <= 64 ? 6 : 3; } /* 8 warps' stages within 227 KB */
/* a warp's stage: DM_BK K rows, then DM_BK V rows, each D + 8 halves apart (+16 bytes: the
 * MMA operand loads are free of bank conflicts) */
template <int D> __host__ __device__ static constexpr int dm_stage_halves() { return 2 * DM_BK * (D + 8); }

/* wait until at most n of this thread's copy groups are in flight (n < 6) */
__device__ __forceinline__ void cp_wait_n(int n)
{
    switch (n) {
    case 5: cp_wait<5>(); break;
    case 4: cp_wait<4>(); break;
    case 3: cp_wait<3>(); break;
    case 2: cp_wait<2>(); break;
    case 1: cp_wait<1>(); break;
    default: cp_wait<0>(); break;
    }
}

template <int DT, int D>
__global__ __launch_bounds__(AD_WARPS * 32) static void k_attn_dmma(gpu_attn a, unsigned *cnt, int NS)
{
    constexpr int P = D + 8, STAGE = dm_stage_halves<D>();
    static_assert(AD_GH <= 8, "a block's heads are the A rows g < 8");
    extern __shared__ __align__(16) uint16_t dm_sm[];
    RLX_PDL_TRIGGER(); /* the output projection after this may launch and fetch its weights */
    const int G = a.nh / a.nkv, ngk = (G + AD_GH - 1) / AD_GH;
    const int hg = blockIdx.x, sp = blockIdx.y, t = blockIdx.z, kvh = hg / ngk;
    const int h0 = kvh * G + (hg % ngk) * AD_GH, gn = min(AD_GH, G - (hg % ngk) * AD_GH);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tg = lane & 3;
    if (!a.early)
        RLX_PDL_WAIT();
    int64_t lo, hi;
    key_range(a, t, &lo, &hi);
    const int len = (int)(hi - lo);
    const int mk = a.min_keys > 0 ? a.min_keys : AD_WARPS * DM_BK * NS;
    int ns = (len + mk - 1) / mk;
    ns = ns < 1 ? 1 : ns > a.nsplit ? a.nsplit : ns;
    if (sp >= ns)
        return;
    const int chunk = (len + ns - 1) / ns;
    const int64_t j0 = lo + (int64_t)sp * chunk, j1 = j0 + chunk < hi ? j0 + chunk : hi;
    const int ntile = (int)((j1 - j0 + DM_BK - 1) / DM_BK);
    const int nw = warp < ntile ? (ntile - warp + AD_WARPS - 1) / AD_WARPS : 0; /* this warp's tiles */
    uint16_t *wsm = dm_sm + (size_t)warp * NS * STAGE;
    const uint16_t *K = (const uint16_t *)a.k.p, *V = (const uint16_t *)a.v.p, *Q = (const uint16_t *)a.q.p;
    /* the warp's i-th tile, its rows in [flo, fhi) only; rows at or past j1 are zeros (P·V
     * multiplies them by 0, and 0 times a stale NaN would not be 0) */
    auto load = [&](int i, int64_t flo, int64_t fhi) {
        const int64_t kb = j0 + (int64_t)(warp + i * AD_WARPS) * DM_BK;
        uint16_t *st = wsm + (i % NS) * STAGE;
        for (int idx = lane; idx < DM_BK * D / 8; idx += 32) {
            const int rr = idx / (D / 8), cc = (idx % (D / 8)) * 8;
            const int64_t j = kb + rr;
            if (j < flo || j >= fhi)
                continue;
            const int64_t off = j < j1 ? (j * a.nkv + kvh) * D + cc : 0;
            cp16(&st[rr * P + cc], K + off, j < j1 ? 16 : 0);
            cp16(&st[(DM_BK + rr) * P + cc], V + off, j < j1 ? 16 : 0);
        }
    };
    const int pre = nw < NS ? nw : NS;
    /* early: the rows before pos were written by earlier steps; this step's from pos on */
    const int64_t fixed = a.early && a.pos ? (a.pos[0] < j1 ? a.pos[0] : j1) : INT64_MIN;
    for (int i = 0; i < pre && a.early; i++)
        load(i, INT64_MIN, fixed);
    cp_commit();
    if (a.early)
        RLX_PDL_WAIT(); /* q and this step's cache rows come from the kernels before */
    for (int i = 0; i < pre; i++)
        load(i, fixed, INT64_MAX);
    cp_commit();
    uint32_t qf[D / 16][4]; /* A: row g and g + 8 are heads h0 + g, h0 + g + 8 (past gn: zero) */
#pragma unroll
    for (int ks = 0; ks < D / 16; ks++)
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int r = g + (i & 1) * 8, c = ks * 16 + tg * 2 + (i >> 1) * 8;
            qf[ks][i] = r < gn ? ld32(Q + ((int64_t)t * a.nh + h0 + r) * D + c) : 0u;
        }
    /* row g's running max (log2 units: exp2 is one instruction) and this lane's part of its
     * sum; rows g + 8 stay zero */
    float o[D / 8][4], m = -INFINITY, l = 0.0f;
    const float l2e = 1.44269504f, sl2 = a.scale * l2e;
    const bool plain = !a.mask.p && a.softcap <= 0.0f;
#pragma unroll
    for (int n = 0; n < D / 8; n++)
        o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    cp_wait<0>();
    __syncwarp();
    for (int i = 0; i < nw; i++) {
        if (i >= NS) { /* loaded after tile i - NS was used; NS - 1 groups since */
            cp_wait_n(NS - 1);
            __syncwarp();
        }
        const int64_t kb = j0 + (int64_t)(warp + i * AD_WARPS) * DM_BK;
        const uint16_t *Kt = wsm + (i % NS) * STAGE, *Vt = Kt + DM_BK * P;
        float s[2][4]; /* [nt][0..1]: row g, keys kb + nt * 8 + tg * 2 (+1); [2..3]: rows g + 8 */
        fa_qk<DT, D, 2, P>(s, qf, Kt, g, tg);
        const bool whole = plain && kb + DM_BK <= j1; /* the same for the whole warp */
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int64_t j = kb + nt * 8 + tg * 2 + e;
                float v = s[nt][e] * sl2;
                if (!whole) { /* rows past gn need no -inf: their q is zero and nothing reads them */
                    v = s[nt][e] * a.scale;
                    if (a.softcap > 0.0f)
                        v = a.softcap * tanhf(v / a.softcap);
                    if (j < j1 && a.mask.p)
                        v += ldt(a.mask, (int64_t)t * a.S + j);
                    v = j < j1 ? v * l2e : -INFINITY;
                }
                s[nt][e] = v;
                mx = fmaxf(mx, v);
            }
        mx = fmaxf(mx, RLX_SHFL_XOR(mx, 1, 32)); /* the 4 lanes of a group hold row g */
        mx = fmaxf(mx, RLX_SHFL_XOR(mx, 2, 32));
        const float mn = fmaxf(m, mx), alpha = mn == -INFINITY ? 1.0f : exp2f(m - mn);
        m = mn;
        l *= alpha;
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                s[nt][e] = s[nt][e] == -INFINITY ? 0.0f : exp2f(s[nt][e] - mn);
                l += s[nt][e];
            }
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            o[n][0] *= alpha;
            o[n][1] *= alpha;
        }
        /* P as the A operand: row g, keys tg * 2 (+1) and 8 + tg * 2 (+1); rows g + 8 zero */
        const uint32_t pf[4] = {pack2<DT>(s[0][0], s[0][1]), 0u, pack2<DT>(s[1][0], s[1][1]), 0u};
        fa_pv<DT, D, P>(o, pf, Vt, lane);
        __syncwarp(); /* every lane is done with this stage before it is refilled */
        if (i + NS < nw)
            load(i + NS, INT64_MIN, INT64_MAX);
        cp_commit(); /* a group each tile, empty or not, so the wait above counts in tiles */
    }
    l += RLX_SHFL_XOR(l, 1, 32);
    l += RLX_SHFL_XOR(l, 2, 32);
    /* the stages are free once every warp is done: each warp's (max, sum, acc) per head there */
    __syncthreads();
    float(*sm_acc)[AD_GH][D] = (float(*)[AD_GH][D])dm_sm;
    float(*sm_m)[AD_GH] = (float(*)[AD_GH])((float *)dm_sm + AD_WARPS * AD_GH * D);
    float(*sm_l)[AD_GH] = sm_m + AD_WARPS;
    if (g < AD_GH) { /* rows g (e = 0, 1); rows g + 8 are past AD_GH */
        if (tg == 0) {
            sm_m[warp][g] = m * 0.693147181f; /* natural units, as finish merges */
            sm_l[warp][g] = l;
        }
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            sm_acc[warp][g][n * 8 + tg * 2] = o[n][0];
            sm_acc[warp][g][n * 8 + tg * 2 + 1] = o[n][1];
        }
    }
    finish<D>(a, cnt, t, hg, sp, h0, gn, ns, sm_m, sm_l, sm_acc);
}

/* the tensor-core kernel takes this decode: T rows of one sequence, what the prefill kernel
 * takes (q, k, v of one 16-bit dtype, 16-byte aligned) at d 64 or 128 */
static int dm_ok(const gpu_attn *a) { return a->mma && !a->slots && a->d != 256 && gpu_attn_mma_ok(a); }

template <int DT, int D> static void launch_dmma(gpuStream_t s, const gpu_attn *a)
{
    const int per = AD_WARPS * DM_BK, smax = dm_stages_max(D);
    /* stages enough for a block's keys (RLX_GPU_ATTN_KEYS, else the whole cache) */
    int ns = ((a->min_keys > 0 ? a->min_keys : a->S) + per - 1) / per;
    ns = ns < 1 ? 1 : ns > smax ? smax : ns;
    const size_t sm = (size_t)AD_WARPS * ns * dm_stage_halves<D>() * sizeof(uint16_t);
    static unsigned char opted[64]; /* the most any cache length asks for */
    smem_opt_in(k_attn_dmma<DT, D>, (int)((size_t)AD_WARPS * smax * dm_stage_halves<D>() * sizeof(uint16_t)), opted);
    dim3 g((unsigned)groups_of(a->nh, a->nkv), (unsigned)a->nsplit, (unsigned)a->T);
    rlx_launch_pdl(rlx_pdl_on(0), k_attn_dmma<DT, D>, g, dim3(AD_WARPS * 32), sm, s, *a, a->cnt, ns);
}
#endif

template <int ND, int KU> static void launch_decode(gpuStream_t s, const gpu_attn *a)
{
    dim3 g((unsigned)groups_of(a->nh, a->nkv), (unsigned)a->nsplit, (unsigned)a->T);
    rlx_launch_pdl(rlx_pdl_on(0), k_attn_gqa<ND, KU>, g, dim3(AD_WARPS * 32), 0, s, *a, a->cnt);
}

void gpu_attn_decode(gpuStream_t s, const gpu_attn *a)
{
#if !defined(RLX_GPU_HIP)
    if (dm_ok(a)) {
        if (a->q.dt == GDT_BF16)
            a->d == 64 ? launch_dmma<GDT_BF16, 64>(s, a) : launch_dmma<GDT_BF16, 128>(s, a);
        else
            a->d == 64 ? launch_dmma<GDT_F16, 64>(s, a) : launch_dmma<GDT_F16, 128>(s, a);
        return;
    }
#endif
    if (a->d <= 64)
        launch_decode<2, 4>(s, a);
    else if (a->d <= 128)
        launch_decode<4, 4>(s, a);
    else
        launch_decode<8, 2>(s, a);
}
