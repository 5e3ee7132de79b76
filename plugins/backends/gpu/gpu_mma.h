/* The m16n8k16 tensor-core product with f32 accumulators (mma.sync, sm_80 on): CUDA only.
 * HIP has no mma.sync; the kernels that use it say so to their callers, which keep a
 * SIMT path there. A holds rows (g, g+8) and C rows (g, g+8) of lane (g = lane / 4,
 * t = lane % 4); B holds column g; each register two 16-bit values, the lower index low. */
#ifndef RLX_GPU_MMA_H
#define RLX_GPU_MMA_H
#include "gpu_dtype.h"

#if !defined(RLX_GPU_HIP)
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

/* two values as 16-bit DT, the first in the low half (the lower address): one conversion
 * instruction, the bits of f_to_bf16 / f_to_f16 for every finite value */
template <int DT> __device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
    uint32_t r;
    if (DT == GDT_BF16)
        asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    else
        asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ uint32_t ld32(const uint16_t *p) { return *(const uint32_t *)p; }

/* 16 bytes global -> shared without a register round trip; n < 16 zero-fills the rest */
__device__ __forceinline__ void cp16(void *dst, const void *src, int n)
{
    unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(n));
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

/* B fragments of two 8-column tiles of row-major V (keys x dims) from shared memory,
 * transposed on the way (lanes 0-15 give the 16 key rows of columns c, 16-31 of c + 8) */
__device__ __forceinline__ void ldm_x4_trans(uint32_t r[4], const uint16_t *p)
{
    unsigned a = (unsigned)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}
/* Flash-attention steps on one tile of keys, for a lane of a warp whose A rows are g and
 * g + 8 (g = lane / 4, tg = lane % 4) and whose key rows sit in shared memory PITCH halves
 * apart. S = Q·Kᵀ for NT 8-key column tiles: */
template <int DT, int D, int NT, int PITCH>
__device__ __forceinline__ void fa_qk(float (&s)[NT][4], const uint32_t (&qf)[D / 16][4], const uint16_t *kt, int g,
                                      int tg)
{
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < D / 16; ks++) {
            const uint16_t *kr = &kt[(nt * 8 + g) * PITCH + ks * 16 + tg * 2];
            mma16816<DT>(s[nt], qf[ks], ld32(kr), ld32(kr + 8));
        }
    }
}

/* the online softmax over a tile's scores (masked ones -inf): each row's running max m and
 * sum l (this lane's part of it) move on, o is rescaled, s becomes P */
template <int NT, int ON>
__device__ __forceinline__ void fa_softmax(float (&s)[NT][4], float (&mx)[2], float (&m)[2], float (&l)[2],
                                           float (&o)[ON][4])
{
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
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float pv = s[nt][e] == -INFINITY ? 0.0f : expf(s[nt][e] - mn[e >> 1]);
            s[nt][e] = pv;
            l[e >> 1] += pv; /* this lane's part; the lanes are summed at the end */
        }
#pragma unroll
    for (int n = 0; n < ON; n++) {
        o[n][0] *= alpha[0];
        o[n][1] *= alpha[0];
        o[n][2] *= alpha[1];
        o[n][3] *= alpha[1];
    }
}

/* O += P·V over 16 keys: P as the A operand pf, V's 16 rows from vt */
template <int DT, int D, int PITCH>
__device__ __forceinline__ void fa_pv(float (&o)[D / 8][4], const uint32_t (&pf)[4], const uint16_t *vt, int lane)
{
    const uint16_t *vr = &vt[(lane & 15) * PITCH + (lane >> 4) * 8];
#pragma unroll
    for (int n = 0; n < D / 8; n += 2) {
        uint32_t b[4];
        ldm_x4_trans(b, vr + n * 8);
        mma16816<DT>(o[n], pf, b[0], b[1]);
        mma16816<DT>(o[n + 1], pf, b[2], b[3]);
    }
}
/* the same with P from the accumulators of the keys' two 8-key tiles (S's accumulator layout
 * is P's operand layout) */
template <int DT, int D, int PITCH>
__device__ __forceinline__ void fa_pv16(float (&o)[D / 8][4], const float (&s0)[4], const float (&s1)[4],
                                        const uint16_t *vt, int lane)
{
    const uint32_t pf[4] = {pack2<DT>(s0[0], s0[1]), pack2<DT>(s0[2], s0[3]), pack2<DT>(s1[0], s1[1]),
                            pack2<DT>(s1[2], s1[3])};
    fa_pv<DT, D, PITCH>(o, pf, vt, lane);
}
#endif
#endif
