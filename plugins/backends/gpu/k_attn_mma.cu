/* Prefill attention on tensor cores (FlashAttention-2 style) for 16-bit q, k, v of one dtype
 * and head dim 64, 128 or 256: a block of 4 warps takes 64 query rows of one head, each warp
 * 16 of them; K and V tiles of BK keys go through shared memory (V transposed), S = Q·Kᵀ
 * and O += P·V run as m16n8k16 MMAs with f32 accumulators held in registers, the softmax is
 * online (running max and sum per row), so no T×S matrix exists. P is rounded to the input
 * dtype for the second product, as FlashAttention does. HIP has no mma.sync: there
 * gpu_attn_mma_ok says no and the SIMT kernel (k_attention.cu) runs. */
#include "gpu_dtype.h"

#define FA_WARPS 4
#define FA_BQ (16 * FA_WARPS)

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

template <int DT>
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1)
{
    if (DT == GDT_BF16)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* two values as 16-bit DT, the first in the low half (the lower address) */
template <int DT> __device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    uint32_t l = DT == GDT_BF16 ? f_to_bf16(lo) : f_to_f16(lo);
    uint32_t h = DT == GDT_BF16 ? f_to_bf16(hi) : f_to_f16(hi);
    return l | (h << 16);
}

__device__ __forceinline__ uint32_t ld32(const uint16_t *p) { return *(const uint32_t *)p; }

template <int DT, int D, int BK>
__global__ __launch_bounds__(FA_WARPS * 32) static void k_attn_mma(gpu_attn a)
{
    constexpr int KP = D + 8;  /* row pitches in halves: +16 bytes keeps the fragment */
    constexpr int VP = BK + 8; /* loads of a warp on 32 different banks */
    __shared__ __align__(16) uint16_t Ks[BK * KP];
    __shared__ __align__(16) uint16_t Vt[D * VP];

    const int h = blockIdx.y, q0 = blockIdx.x * FA_BQ, tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5, g = lane >> 2, tg = lane & 3;
    const int kvh = h / (a.nh / a.nkv);
    const int64_t p = a.pos ? a.pos[0] : 0;
    const int64_t kv_len = a.pos && p + a.T < a.S ? p + a.T : a.S;
    const int rw[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8}; /* this thread's rows */
    const uint16_t *Q = (const uint16_t *)a.q.p, *K = (const uint16_t *)a.k.p,
                   *V = (const uint16_t *)a.v.p;

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

    int64_t hi = kv_len, lo = 0;
    if (a.causal) {
        int64_t last = p + (q0 + FA_BQ < a.T ? q0 + FA_BQ : a.T) - 1;
        if (last + 1 < hi)
            hi = last + 1;
    }
    if (a.window > 0 && p + q0 - a.window + 1 > 0)
        lo = p + q0 - a.window + 1;

    for (int64_t kb = lo; kb < hi; kb += BK) {
        __syncthreads(); /* the previous tiles are consumed */
        for (int idx = tid; idx < BK * D / 8; idx += FA_WARPS * 32) {
            int rr = idx / (D / 8), cc = (idx % (D / 8)) * 8;
            int64_t j = kb + rr;
            uint4 kv = make_uint4(0, 0, 0, 0), vv = kv;
            if (j < hi) {
                int64_t off = (j * a.nkv + kvh) * D + cc;
                kv = *(const uint4 *)(K + off);
                vv = *(const uint4 *)(V + off);
            }
            *(uint4 *)&Ks[rr * KP + cc] = kv;
            const uint32_t vw[4] = {vv.x, vv.y, vv.z, vv.w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                Vt[(cc + 2 * e) * VP + rr] = (uint16_t)(vw[e] & 0xffffu);
                Vt[(cc + 2 * e + 1) * VP + rr] = (uint16_t)(vw[e] >> 16);
            }
        }
        __syncthreads();

        float s[BK / 8][4];
#pragma unroll
        for (int nt = 0; nt < BK / 8; nt++) {
            s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < D / 16; ks++) {
                const uint16_t *kr = &Ks[(nt * 8 + g) * KP + ks * 16 + tg * 2];
                mma16816<DT>(s[nt], qf[ks], ld32(kr), ld32(kr + 8));
            }
        }
        float mx[2] = {-INFINITY, -INFINITY};
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
        float alpha[2], mn[2];
#pragma unroll
        for (int r = 0; r < 2; r++) { /* the 4 lanes of a group hold one row */
            mx[r] = fmaxf(mx[r], RLX_SHFL_XOR(mx[r], 1, 32));
            mx[r] = fmaxf(mx[r], RLX_SHFL_XOR(mx[r], 2, 32));
            mn[r] = fmaxf(m[r], mx[r]);
            alpha[r] = mn[r] == -INFINITY ? 1.0f : expf(m[r] - mn[r]);
            m[r] = mn[r];
            l[r] *= alpha[r];
        }
#pragma unroll
        for (int nt = 0; nt < BK / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                float pv = s[nt][e] == -INFINITY ? 0.0f : expf(s[nt][e] - mn[e >> 1]);
                s[nt][e] = pv;
                l[e >> 1] += pv; /* this lane's part; the lanes are summed at the end */
            }
#pragma unroll
        for (int n = 0; n < D / 8; n++) {
            o[n][0] *= alpha[0];
            o[n][1] *= alpha[0];
            o[n][2] *= alpha[1];
            o[n][3] *= alpha[1];
        }
#pragma unroll
        for (int kk = 0; kk < BK / 16; kk++) {
            /* S's accumulator layout is P's operand layout (keys 16kk..16kk+15) */
            const uint32_t pf[4] = {pack2<DT>(s[2 * kk][0], s[2 * kk][1]),
                                    pack2<DT>(s[2 * kk][2], s[2 * kk][3]),
                                    pack2<DT>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                    pack2<DT>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int n = 0; n < D / 8; n++) {
                const uint16_t *vr = &Vt[(n * 8 + g) * VP + kk * 16 + tg * 2];
                mma16816<DT>(o[n], pf, ld32(vr), ld32(vr + 8));
            }
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        l[r] += RLX_SHFL_XOR(l[r], 1, 32);
        l[r] += RLX_SHFL_XOR(l[r], 2, 32);
        l[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    }
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

template <int DT> static void launch_dt(gpuStream_t s, const gpu_attn *a)
{
    dim3 grid((unsigned)((a->T + FA_BQ - 1) / FA_BQ), (unsigned)a->nh);
    if (a->d == 64)
        RLX_LAUNCH((k_attn_mma<DT, 64, 64>), grid, FA_WARPS * 32, 0, s)(*a);
    else if (a->d == 128)
        RLX_LAUNCH((k_attn_mma<DT, 128, 64>), grid, FA_WARPS * 32, 0, s)(*a);
    else
        RLX_LAUNCH((k_attn_mma<DT, 256, 32>), grid, FA_WARPS * 32, 0, s)(*a);
}

void gpu_attn_mma(gpuStream_t s, const gpu_attn *a)
{
    if (a->q.dt == GDT_BF16)
        launch_dt<GDT_BF16>(s, a);
    else
        launch_dt<GDT_F16>(s, a);
}
#endif
