/* persist.cu: how fast can ONE persistent ("megakernel") launch run a LLaMA decode step?
 *
 * A token runs as one cooperative launch of SMs x 1 blocks of 512 threads that walks the
 * layers as phases separated by grid-wide barriers:
 *   qkv   every block norms x itself into shared memory, streams its rows of [Wq;Wk;Wv]
 *   att   flash-decoding: the keys of a KV head split over blocks (128 a block), each block
 *         serves the 4 query heads of its KV head, ropes q and the new k, writes partials;
 *         the block holding the newest key writes k, v into the caches
 *   o     every block merges the partials into the attention row (its prologue), streams its
 *         rows of Wo, adds the residual
 *   gu    norm again, gate and up rows of the same outputs, SwiGLU epilogue into h
 *   down  h into shared memory, rows of Wdown, adds the residual
 *   lm    final norm, rows of the LM head into the logits
 * A GEMV phase gives block b the outputs [N*b/G, N*(b+1)/G) (whole rows: epilogues see whole
 * sums, no atomics to global memory) and splits those rows' 512-byte chunks evenly over its
 * 16 warps (partial sums meet in shared memory). Weights stream with 16-byte no-L1 loads,
 * GV_U (8) a lane a batch, two batches in flight; a warp about to issue its last loads
 * prefetches its slice of the block's next PF bytes of weights into L2
 * (cp.async.bulk.prefetch), so DRAM keeps streaming through the phase's tail, the barrier
 * and the next phase's prologue.
 * Barriers (a template argument, all three built and timed): cooperative_groups grid sync,
 * a monotonic counter, or per-block flags; each split into arrive / wait, warp 0 planning
 * the next prefetches in between. The embedding table is the LM head (tied).
 * A reference path (one simple kernel an op) checks the logits; both accumulate in f32.
 *
 * v2 (--stream ring, the default; --stream regs is v1 above): v1's short phases were bound by
 * each warp's chain of dependent load batches, not by DRAM. In v2 weights stream through a
 * ring of S stages in dynamic shared memory, filled by 1D bulk TMA copies (cp.async.bulk ...
 * complete_tx) that one producer thread (an extra, 17th warp) issues. Each block's weights for a token are
 * one fixed sequence of contiguous byte ranges (phase by phase: its rows of Wqkv, Wo, Wgate,
 * Wup, Wdown for each layer, then the LM head), cut into stages; the producer walks it up to S
 * stages ahead of the consumers and never waits on anything but "empty" stage barriers, so the
 * next phase's first stages load while the block finishes a phase, waits at the grid barrier,
 * runs attention and builds its next x row. The 16 consumer warps wait a stage's "full"
 * mbarrier, dot its 512-byte chunks with x in shared memory, and each arrive once on the
 * stage's "empty" mbarrier. Consumers synchronize with a named barrier (bar.sync 1, NT) that the
 * producer warp is not part of; grid barriers count blocks (counter, flags; cg's grid sync needs
 * every thread, so the ring path has no cg variant). Deadlock freedom: see ring_produce().
 * No L2 prefetch of weights (the ring replaces it); the o prologue keeps the attention
 * partials in registers, not shared memory, to leave room for the ring. 17 warps get 96
 * registers a thread (a scheduler quadrant holds 5 warps); the ring consumers need fewer.
 *
 * Build: nvcc -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 [-DPHASE_TIMING] persist.cu
 *        (-DGV_U=6: shallower load batches; -DPF_LINES: prefetch.global.L2 per line, not bulk;
 *         -DNTHREADS=256: 8 consumer warps instead of 16)
 * Run:   persist --shape 1b|1b32k|188m [--stream ring|regs] [--stages S] [--stage-kb KB] [--grid N]
 *                [--ctx 512] [--tokens 200] [--pf KB] [--barrier all|cg|counter|flags]
 */
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace cg = cooperative_groups;

#define CK(x)                                                                                                          \
    do {                                                                                                               \
        cudaError_t e_ = (x);                                                                                          \
        if (e_ != cudaSuccess) {                                                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));                        \
            exit(2);                                                                                                   \
        }                                                                                                              \
    } while (0)

#ifndef NTHREADS
#define NTHREADS 512
#endif
constexpr int NT = NTHREADS; /* compute threads a block: 16 warps x 8..16 loads in flight x 16 B = 64-128 KB a SM */
constexpr int NW = NT / 32;  /* compute warps a block (the ring's producer warp comes on top) */
static_assert(NT >= 256 && NT <= 1024 && NT % 32 == 0, "attention's thread roles need >= 256 threads");
constexpr int RING_SMAX = 16; /* most ring stages (mbarriers are static shared memory) */
#ifndef GV_U
#define GV_U 8 /* 16-byte weight loads a lane issues at once, two batches in flight (128 registers, no spill) */
#endif
constexpr int ATT_G = 4;                 /* query heads per KV head (both shapes) */
constexpr int ATT_D = 64;                /* head dim (both shapes): 8 lanes x 8 dims cover a key row */
constexpr int ATT_R = 2;                 /* rounds of 4 keys a warp: a block takes NW*4*ATT_R keys */
constexpr int ATT_KEYS = NW * 4 * ATT_R; /* 128 keys a block: few partials for the o prologue to merge */
constexpr int MAXG = 1024;               /* most blocks the barrier state serves */
constexpr int NORM_MAXV = 4;             /* float4s of a normed row a thread holds: rows up to 4*4*NT */
constexpr int MERGE_U = 6; /* ring path's o prologue: partials a thread loads at once (6: ctx <= 768 in one
                            * round trip; 8 spills at the 96 registers a 17-warp block gets) */
constexpr int BK_CG = 0, BK_COUNTER = 1, BK_FLAGS = 2;
constexpr int PH_QKV = 0, PH_ATT = 1, PH_O = 2, PH_GU = 3, PH_DOWN = 4, PH_LM = 5; /* phase kinds, in layer order */
static const char *bk_name[3] = {"cg", "counter", "flags"};

/* ------------------------------------------------------------------ small helpers */

/* min/max usable on both sides (std::min is host-only in device code) */
template <class T> __host__ __device__ __forceinline__ T tmin(T a, T b) { return a < b ? a : b; }
template <class T> __host__ __device__ __forceinline__ T tmax(T a, T b) { return a > b ? a : b; }

__host__ __device__ inline uint32_t hash32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* the token fed at a position: a function of pos, so a launch needs no per-token argument
 * (back-to-back launches and graph replays stay valid) */
__host__ __device__ inline int tok_of(int pos, int V)
{
    return (int)(hash32((uint32_t)pos * 2654435761u + 12345u) % (uint32_t)V);
}

__device__ __forceinline__ float bf_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float bf2f(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }
/* round to nearest even (finite inputs only): both paths round the cached k, v the same way */
__device__ __forceinline__ uint16_t f2bf(float f)
{
    uint32_t u = __float_as_uint(f);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* the compute threads' barrier: named barrier 1 over NT threads, so that the ring's producer
 * warp (threads NT.., never at a barrier after the start) is not needed; with NT threads a
 * block (v1) it is __syncthreads */
__device__ __forceinline__ void csync() { asm volatile("bar.sync 1, %0;" ::"n"(NT) : "memory"); }

/* sum over the block; red holds NW floats; callers in uniform control flow */
__device__ __forceinline__ float block_sum(float v, float *red)
{
    v = warp_sum(v);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = v;
    csync();
    float t = 0.0f;
#pragma unroll
    for (int w = 0; w < NW; w++)
        t += red[w];
    csync(); /* red may be reused right after */
    return t;
}

__device__ __forceinline__ unsigned long long gtime()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* a weight vector read once: no L1 allocation (weights never repeat within a token) */
__device__ __forceinline__ uint4 ld_stream(const void *p)
{
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

/* bytes [p, p+n) into L2 without waiting (n a multiple of 16, p 16-byte aligned) */
__device__ __forceinline__ void l2_prefetch(const void *p, unsigned n)
{
#ifdef PF_LINES
    for (unsigned o = 0; o < n; o += 128) /* one request a 128-byte line, in case bulk misbehaves */
        asm volatile("prefetch.global.L2 [%0];" ::"l"((const char *)p + o));
#else
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(n) : "memory");
#endif
}

__device__ __forceinline__ void l2_prefetch_line(const void *p) { asm volatile("prefetch.global.L2 [%0];" ::"l"(p)); }

__device__ __forceinline__ unsigned ld_relaxed(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* rotate-half rope angle of pair (i, i + d/2) at pos; one function for both paths */
__device__ __forceinline__ void rope_cs(int pos, int i, int d, float theta, float &c, float &s)
{
    const float inv = powf(theta, -2.0f * (float)i / (float)d);
    sincosf((float)pos * inv, &s, &c);
}

__device__ __forceinline__ float silu(float x) { return x / (1.0f + expf(-x)); }

/* the normed / gathered row in shared memory, stored in the order the GEMV lanes read it:
 * chunk kc (256 elements), half hh, lane: one conflict-free float4 a lane per read */
__host__ __device__ __forceinline__ int xidx(int k)
{
    return (k & ~255) + ((k >> 2) & 1) * 128 + ((k >> 3) & 31) * 4 + (k & 3);
}

/* ------------------------------------------------------------------ model, parameters */

struct Shape {
    const char *name;
    int H, I, nh, nkv, d, L, V;
};
/* 1b: LLaMA 3.2 1B (vocab 128256); 1b32k: rlx-bench's llama-1b-config.json (vocab 32000) */
static const Shape SHAPES[] = {{"1b", 2048, 8192, 32, 8, 64, 16, 128256},
                               {"1b32k", 2048, 8192, 32, 8, 64, 16, 32000},
                               {"188m", 1024, 4096, 16, 4, 64, 8, 32000}};

struct Ctl {
    int pos;   /* position of the next token (advanced by the kernel: no per-launch argument) */
    int tslot; /* PHASE_TIMING slot of the next token */
};

/* barrier state; every variant reads only its own fields, so they never need resetting */
struct BarState {
    unsigned count;       /* counter: arrivals, monotonic across launches */
    unsigned pad[31];     /* flags on other lines than the counter */
    unsigned flags[MAXG]; /* flags: block b's last barrier epoch */
    unsigned base[MAXG];  /* counter: block b's count at the end of its last launch */
};

struct Params {
    int H, I, nh, nkv, d, L, V, ctx_max, ns_max, nqkv;
    int lgH, lgI, lgA; /* log2 of H/256, I/256, nh*d/256: chunks a row, as shifts */
    float eps, theta, att_scale;
    long long pf_bytes; /* weight bytes a block keeps prefetched ahead (0: none) */
    const uint16_t *wl; /* layer weights: L blocks of lstride elements */
    size_t lstride, off_an, off_fn, off_qkv, off_o, off_gu, off_down;
    const uint16_t *lm;     /* [V, H] LM head, also the embedding table (tied) */
    const uint16_t *norm_f; /* [H] */
    uint16_t *kc, *vc;      /* [L][ctx_max][nkv][d] */
    float *x, *qkv, *pacc, *pml, *h, *logits;
    Ctl *ctl;
    BarState *bar;
    int sm_xs, sm_acc; /* floats of the normed row and of the row sums in dynamic shared memory */
    int ring_s;        /* ring: stages (<= RING_SMAX) */
    unsigned ring_sb;  /* ring: bytes a stage (a multiple of 512) */
    unsigned ring_off; /* ring: byte offset of stage 0 in dynamic shared memory (128-aligned) */
    unsigned long long *ts_arr, *ts_exit;
    int ts_slots;
};

__host__ __device__ inline int nsplit_of(int S) { return (S + ATT_KEYS - 1) / ATT_KEYS; }

/* one GEMV phase: rows of w0 (and the same rows of w1: gate/up), K = 256 << lg */
struct GemvJob {
    const uint16_t *w0, *w1;
    int N, K, lg;
};

__host__ __device__ inline int ilog2(int v)
{
    int l = 0;
    while ((1 << (l + 1)) <= v)
        l++;
    return l;
}

__host__ __device__ inline void split_range(long long n, int parts, int i, long long &a, long long &b)
{
    a = n * i / parts;
    b = n * (i + 1) / parts;
}

/* weight phases in streaming order: 4 per layer (qkv, o, gu, down), the LM head at 4L and
 * the next token's layer-0 qkv at 4L+1 (the last prefetch target). Their kinds (which split
 * of the outputs over blocks applies): 0 qkv, 1 o, 2 gu, 3 down, 4 lm. */
constexpr int NWK = 5;
__host__ __device__ inline int wkind(const Params &P, int p) { return p == 4 * P.L ? 4 : p > 4 * P.L ? 0 : p % 4; }

__host__ __device__ inline GemvJob job_of(const Params &P, int p)
{
    if (p == 4 * P.L)
        return GemvJob{P.lm, nullptr, P.V, P.H, P.lgH};
    if (p > 4 * P.L)
        p = 0;
    const uint16_t *W = P.wl + (size_t)(p / 4) * P.lstride;
    switch (p % 4) {
    case 0:
        return GemvJob{W + P.off_qkv, nullptr, P.nqkv, P.H, P.lgH};
    case 1:
        return GemvJob{W + P.off_o, nullptr, P.H, P.nh * P.d, P.lgA};
    case 2:
        return GemvJob{W + P.off_gu, W + P.off_gu + (size_t)P.I * P.H, P.I, P.H, P.lgH};
    default:
        return GemvJob{W + P.off_down, nullptr, P.H, P.I, P.lgI};
    }
}

/* block b's outputs of weight kind k start at range_bound(k, b) and end at range_bound(k,
 * b + 1): N * b / G in 32 bits (N * G < 2^32), no 64-bit division chain */
__host__ __device__ inline int range_bound(const Params &P, int k, int i, int G)
{
    const unsigned N = k == 0 ? P.nqkv : k == 2 ? P.I : k == 4 ? P.V : P.H;
    return (int)(N * (unsigned)i / (unsigned)G);
}

__host__ __device__ inline void block_ranges(const Params &P, int G, int b, int (*rng)[2])
{
    for (int k = 0; k < NWK; k++) {
        rng[k][0] = range_bound(P, k, b, G);
        rng[k][1] = range_bound(P, k, b + 1, G);
    }
}

/* Block-local chunk j (512 bytes) of a GEMV phase: chunks run along the block's rows n0..
 * of w0, then the same rows of w1. Since K = 256 << lg, chunk j of a half starts 256*j
 * elements past the half's first row: two bases and a select, no division. */
struct ChunkMap {
    const uint16_t *b0, *b1;
    int jm; /* chunks in the first half */
};

__host__ __device__ __forceinline__ ChunkMap chunk_map(const GemvJob &jb, int n0, int m, int lane)
{
    return ChunkMap{jb.w0 + (size_t)n0 * jb.K + lane * 8, jb.w1 ? jb.w1 + (size_t)n0 * jb.K + lane * 8 : nullptr,
                    m << jb.lg};
}

__host__ __device__ __forceinline__ const uint16_t *chunk_at(const ChunkMap &c, int j)
{
    return j < c.jm ? c.b0 + (size_t)j * 256 : c.b1 + (size_t)(j - c.jm) * 256;
}

/* The prefetch frontier: phase fp is prefetched up to byte foff of this block's share, all
 * earlier phases fully. Warp 0 keeps it; lane w plans warp w's slice of the bytes between
 * the frontier and its new place, so every warp issues its own part without meeting. */
struct Pf {
    int fp, foff; /* a block's share of one phase is < 2 GB */
};

constexpr int PF_SEGS = 6; /* contiguous ranges a warp prefetches at one point (3 phases x 2 halves) */

/* Bring the frontier up to pf_bytes past the start of phase next_p: emit(ptr, bytes) for
 * each contiguous range of this warp's slice (128-byte cuts) of the bytes between. */
#pragma nv_exec_check_disable /* host_check instantiates it with a host-only callback */
template <class Emit>
__host__ __device__ inline void pf_plan(const Params &P, Pf &f, int next_p, const int (*rng)[2], int warp, Emit emit)
{
    if (P.pf_bytes <= 0)
        return;
    long long cum = 0;
    int nph = 0; /* phases planned: stops alike for every warp (the frontier is shared) */
    for (int q = next_p; q <= 4 * P.L + 1 && cum < P.pf_bytes && nph < PF_SEGS / 2; q++) {
        const GemvJob jb = job_of(P, q);
        const long long n0 = rng[wkind(P, q)][0], n1 = rng[wkind(P, q)][1];
        const long long halfb = (n1 - n0) * jb.K * 2, sh = halfb * (jb.w1 ? 2 : 1);
        const long long hi = tmin(sh, P.pf_bytes - cum);
        const long long lo = q < f.fp ? sh : (q == f.fp ? f.foff : 0);
        if (hi > lo) {
            const long long a = lo + (((hi - lo) * warp / NW) & ~127LL);
            const long long e = warp == NW - 1 ? hi : lo + (((hi - lo) * (warp + 1) / NW) & ~127LL);
            for (int hf = 0; hf < 2; hf++) {
                const long long ha = tmax(a, hf * halfb), hb = tmin(e, (hf + 1) * halfb);
                if (hb > ha)
                    emit((const char *)(hf ? jb.w1 : jb.w0) + n0 * jb.K * 2 + (ha - hf * halfb), (unsigned)(hb - ha));
            }
            f.fp = q;
            f.foff = (int)hi;
            nph++;
        }
        cum += sh;
    }
}

/* the weight phase whose first pf_bytes the warps of phase ph (5 a layer, then lm) prefetch
 * as they finish: qkv the o projection's, attention and o gate/up's, gate/up down's, down
 * the next qkv's, lm the next token's first qkv (the frontier skips what is already done) */
__host__ __device__ inline int pf_target(const Params &P, int ph)
{
    const int l = ph / 5, k = ph == 5 * P.L ? PH_LM : ph % 5;
    return k == PH_LM ? 4 * P.L + 1 : k == PH_QKV ? 4 * l + 1 : k == PH_ATT ? 4 * l + 2 : 4 * l + k;
}

/* the warps' planned ranges: planned by warp 0 (lane w for warp w: one warp's instructions,
 * not sixteen) between arriving at a barrier and waiting on it, issued by each warp in the
 * next phase */
struct PfPlan {
    const char *p[NW][PF_SEGS];
    unsigned n[NW][PF_SEGS];
    int cnt[NW];
};

/* warp 0 only; the barrier's closing csync publishes the plan to the other warps */
__device__ __forceinline__ void pf_plan_block(const Params &P, Pf &f, int next_p, const int (*rng)[2], PfPlan &pl)
{
    const int lane = threadIdx.x & 31, w = lane < NW ? lane : 0;
    int c = 0;
    pf_plan(P, f, next_p, rng, w, [&](const char *p, unsigned n) {
        if (lane < NW) {
            pl.p[w][c] = p;
            pl.n[w][c] = n;
        }
        c++;
    });
    if (lane < NW)
        pl.cnt[w] = c;
}

/* lanes take 4 KB pieces of the warp's ranges */
__device__ __forceinline__ void pf_issue_warp(const PfPlan &pl)
{
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int i = 0; i < pl.cnt[warp]; i++) {
        const char *p = pl.p[warp][i];
        const unsigned n = pl.n[warp][i];
        for (unsigned o = lane * 4096u; o < n; o += 32 * 4096u)
            l2_prefetch(p + o, tmin(4096u, n - o));
    }
}

/* spin guard: a hang (a bug, or a grid that is not co-resident) ends in a trap, not a hung GPU */
__device__ __forceinline__ void spin_watchdog(unsigned &spins, unsigned long long t0, const char *what)
{
    if (++spins & 1023u)
        return;
    if (gtime() - t0 > 4000000000ull) {
        printf("persist: %s watchdog (block %d thread %d)\n", what, (int)blockIdx.x, (int)threadIdx.x);
        __trap();
    }
}

/* ------------------------------------------------------------------ grid barriers */

/* One grid-wide barrier kind a kernel instantiation:
 *   cg:      cooperative_groups grid.sync() (atom.add.release on one word, whose top bit
 *            flips when all arrive; ld.acquire polling of that same word)
 *   counter: red.release.add (no return, no round trip) on a monotonic counter; thread 0
 *            polls until it reaches this barrier's target; targets continue across launches
 *   flags:   each block stores its epoch to its own word (st.release, no atomics at all);
 *            warp 0 polls all G words (relaxed loads, 4-5 a lane, then one acquire fence)
 * PHASE_TIMING: thread 0 stamps arrival (after the block's work), block 0 stamps the exit.
 * All three are split into arrive and wait, so that a block can work in between. */
template <int BK> struct GridBar {
    unsigned base, n;                    /* counter / flags: this block's value before the launch; barriers passed */
    cg::grid_group::arrival_token token; /* cg: thread 0's arrival */
#ifdef PHASE_TIMING
    unsigned long long *arr, *ext;
    int slot, nb;
#endif

    __device__ void init(BarState *bs, unsigned long long *a, unsigned long long *x, int sl, int nbar)
    {
        n = 0;
        base = 0;
        token = 0;
        if (BK == BK_COUNTER && threadIdx.x == 0)
            base = *(volatile unsigned *)&bs->base[blockIdx.x]; /* written by this block last launch */
        if (BK == BK_FLAGS && threadIdx.x < 32)
            base = *(volatile unsigned *)&bs->flags[blockIdx.x];
#ifdef PHASE_TIMING
        arr = a;
        ext = x;
        slot = sl;
        nb = nbar;
        if (slot >= 0 && blockIdx.x == 0 && threadIdx.x == 0)
            ext[(size_t)slot * (nb + 1)] = gtime();
#else
        (void)a, (void)x, (void)sl, (void)nbar;
#endif
    }

    __device__ static void watchdog(unsigned &spins, unsigned long long t0) { spin_watchdog(spins, t0, "barrier"); }

    /* arrive and wait are split so that a block can do independent work between them
     * (warp 0 plans the next prefetches there) */
    __device__ void arrive(BarState *bs)
    {
#ifdef PHASE_TIMING
        csync(); /* the whole block's work before the stamp */
        if (slot >= 0 && threadIdx.x == 0)
            arr[((size_t)slot * (nb + 1) + n) * gridDim.x + blockIdx.x] = gtime();
#else
        if (BK != BK_CG)
            csync(); /* the whole block's writes before thread 0's release (cg's arrive has its own) */
#endif
        n++;
        if (BK == BK_CG) {
            token =
                cg::this_grid().barrier_arrive(); /* its own __syncthreads first, then thread 0's atom.add.release */
        } else if (BK == BK_COUNTER) {
            if (threadIdx.x == 0)
                asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(&bs->count), "r"(1u) : "memory");
        } else {
            if (threadIdx.x == 0)
                asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(&bs->flags[blockIdx.x]), "r"(base + n)
                             : "memory");
        }
    }

    __device__ void wait(BarState *bs)
    {
        if (BK == BK_CG) {
            cg::this_grid().barrier_wait(std::move(token));
        } else if (BK == BK_COUNTER) {
            if (threadIdx.x == 0) {
                const unsigned target = base + n * gridDim.x;
                const unsigned long long t0 = gtime();
                unsigned spins = 0;
                while ((int)(ld_acquire(&bs->count) - target) < 0)
                    watchdog(spins, t0);
            }
            csync();
        } else {
            if (threadIdx.x < 32) {
                const unsigned target = base + n;
                const unsigned long long t0 = gtime();
                unsigned spins = 0;
                for (;;) { /* relaxed loads all in flight at once (acquire loads would serialize) */
                    bool ok = true;
                    for (int i = threadIdx.x; i < (int)gridDim.x; i += 32)
                        ok &= (int)(ld_relaxed(&bs->flags[i]) - target) >= 0;
                    if (__all_sync(0xffffffffu, ok))
                        break;
                    watchdog(spins, t0);
                }
                asm volatile("fence.acq_rel.gpu;" ::: "memory"); /* with the relaxed loads: an acquire */
            }
            csync();
        }
#ifdef PHASE_TIMING
        if (slot >= 0 && blockIdx.x == 0 && threadIdx.x == 0)
            ext[(size_t)slot * (nb + 1) + n] = gtime();
#endif
    }

    __device__ void sync(BarState *bs)
    {
        arrive(bs);
        wait(bs);
    }

    /* the end of the block's last phase (PHASE_TIMING), and the counter's next base */
    __device__ void fini(BarState *bs)
    {
#ifdef PHASE_TIMING
        csync();
        if (slot >= 0 && threadIdx.x == 0)
            arr[((size_t)slot * (nb + 1) + nb) * gridDim.x + blockIdx.x] = gtime();
#endif
        if (BK == BK_COUNTER && threadIdx.x == 0)
            bs->base[blockIdx.x] = base + n * gridDim.x;
    }
};

/* ------------------------------------------------------------------ GEMV phase */

/* 8 weights (one 16-byte vector) dotted with the lane's 8 x values */
__device__ __forceinline__ float dot8(uint4 w, float4 a, float4 b, float s)
{
    s = fmaf(bf_lo(w.x), a.x, s);
    s = fmaf(bf_hi(w.x), a.y, s);
    s = fmaf(bf_lo(w.y), a.z, s);
    s = fmaf(bf_hi(w.y), a.w, s);
    s = fmaf(bf_lo(w.z), b.x, s);
    s = fmaf(bf_hi(w.z), b.y, s);
    s = fmaf(bf_lo(w.w), b.z, s);
    s = fmaf(bf_hi(w.w), b.w, s);
    return s;
}

/* this lane's 16 bytes of chunks [s, s + GV_U) that the warp owns (j < j1) */
__device__ __forceinline__ void load_batch(const ChunkMap &cm, int s, int j1, uint4 (&w)[GV_U])
{
#pragma unroll
    for (int u = 0; u < GV_U; u++)
        if (s + u < j1)
            w[u] = ld_stream(chunk_at(cm, s + u));
}

/* dot a batch with x; a finished row's sum goes (warp-reduced) into the block's row sums */
__device__ __forceinline__ void consume(const uint4 (&w)[GV_U], int s, int j1, int lg, const float4 *xs4, int lane,
                                        int &cur, float &run, float *accs)
{
#pragma unroll
    for (int u = 0; u < GV_U; u++) {
        const int j = s + u;
        if (j < j1) {
            const int lr = j >> lg, kc = j & ((1 << lg) - 1);
            if (lr != cur) { /* warp-uniform: j is */
                if (cur >= 0) {
                    const float t = warp_sum(run);
                    if (lane == 0)
                        atomicAdd(&accs[cur], t);
                }
                cur = lr;
                run = 0.0f;
            }
            run = dot8(w[u], xs4[kc * 64 + lane], xs4[kc * 64 + 32 + lane], run);
        }
    }
}

/* One GEMV phase of this block, rows [n0, n1). Order: the warp's first weight batch is
 * issued, then the block builds its x row (pro: norm, merge or copy; its reads overlap the
 * weights' round trip), then the warp streams its chunks. `hook` (the next phases'
 * prefetch, planned during the barrier before this phase, or in the first phase's pro())
 * runs once the warp is about to issue its last loads. resid: the row sums start from
 * resid[n] (fused residual add). epi(n, sum, sum of the second half) for each row. */
template <class Pro, class Epi, class Hook>
__device__ __forceinline__ void gemv_phase(const GemvJob jb, int n0, int n1, const float *resid, float *xs, float *accs,
                                           Pro pro, Epi epi, Hook hook)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int m = n1 - n0, rows = m * (jb.w1 ? 2 : 1);
    const int C = rows << jb.lg;
    const int j0 = (int)((long long)C * warp / NW), j1 = (int)((long long)C * (warp + 1) / NW);
    uint4 wa[GV_U], wb[GV_U];
#pragma unroll
    for (int u = 0; u < GV_U; u++)
        wa[u] = wb[u] = make_uint4(0, 0, 0, 0);
    bool hooked = false;
    const ChunkMap cm = chunk_map(jb, n0, m, lane);
    load_batch(cm, j0, j1, wa);
    /* the residual (o, down: m <= NT rows) is loaded now but stored after pro(), so its round
     * trip overlaps pro()'s instead of preceding it */
    const float rv = resid && (int)threadIdx.x < m ? __ldcg(resid + n0 + threadIdx.x) : 0.0f;
    pro();
    for (int r = threadIdx.x; r < rows; r += NT)
        accs[r] = r == (int)threadIdx.x ? rv : 0.0f;
    csync();
    if (j0 + GV_U >= j1) { /* every load already issued (after the sync: a plan made in pro() is visible) */
        hook();
        hooked = true;
    }
    const float4 *xs4 = (const float4 *)xs;
    int cur = -1;
    float run = 0.0f;
    /* the hook runs just before the warp's last batch is issued, where only one buffer is live */
    for (int s = j0; s < j1; s += 2 * GV_U) {
        if (!hooked && s + 2 * GV_U >= j1) {
            hook();
            hooked = true;
        }
        load_batch(cm, s + GV_U, j1, wb);
        consume(wa, s, j1, jb.lg, xs4, lane, cur, run, accs);
        if (!hooked && s + 3 * GV_U >= j1) {
            hook();
            hooked = true;
        }
        load_batch(cm, s + 2 * GV_U, j1, wa);
        consume(wb, s + GV_U, j1, jb.lg, xs4, lane, cur, run, accs);
    }
    if (cur >= 0) {
        const float t = warp_sum(run);
        if (lane == 0)
            atomicAdd(&accs[cur], t);
    }
    csync();
    for (int r = threadIdx.x; r < m; r += NT)
        epi(n0 + r, accs[r], jb.w1 ? accs[m + r] : 0.0f);
}

/* RMSNorm of x (f32; the bf16 embedding row instead when xb is set) into xs; x0 set: the
 * row is also stored there in f32 (layer 0 seeds the residual stream) */
__device__ void norm_to_xs(const float *x, const uint16_t *xb, const uint16_t *g, int K, float eps, float *xs,
                           float *red, float *x0)
{
    float4 v[NORM_MAXV];
    uint2 gw[NORM_MAXV]; /* the norm weights, loaded with x: one round trip, not two */
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < NORM_MAXV; i++) {
        const int k = (threadIdx.x + i * NT) * 4;
        v[i] = make_float4(0.f, 0.f, 0.f, 0.f);
        gw[i] = make_uint2(0, 0);
        if (k < K) {
            if (xb) {
                const uint2 u = *(const uint2 *)(xb + k);
                v[i] = make_float4(bf_lo(u.x), bf_hi(u.x), bf_lo(u.y), bf_hi(u.y));
            } else {
                v[i] = __ldcg((const float4 *)(x + k));
            }
            gw[i] = *(const uint2 *)(g + k);
        }
    }
#pragma unroll
    for (int i = 0; i < NORM_MAXV; i++)
        ss += v[i].x * v[i].x + v[i].y * v[i].y + v[i].z * v[i].z + v[i].w * v[i].w;
    ss = block_sum(ss, red);
    const float inv = rsqrtf(ss / (float)K + eps);
#pragma unroll
    for (int i = 0; i < NORM_MAXV; i++) {
        const int k = (threadIdx.x + i * NT) * 4;
        if (k < K) {
            const uint2 gg = gw[i];
            ((float4 *)xs)[xidx(k) >> 2] = make_float4(v[i].x * inv * bf_lo(gg.x), v[i].y * inv * bf_hi(gg.x),
                                                       v[i].z * inv * bf_lo(gg.y), v[i].w * inv * bf_hi(gg.y));
            if (x0)
                *(float4 *)(x0 + k) = v[i];
        }
    }
}

/* 16 bytes global -> shared without registers (cp.async, L2 only: data other blocks wrote) */
__device__ __forceinline__ void cp_async16(void *smem, const void *gmem)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((unsigned)__cvta_generic_to_shared(smem)), "l"(gmem)
                 : "memory");
}

__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

/* h (f32, K elements, written by other blocks) into xs: every copy in flight at once */
__device__ void copy_to_xs(const float *h, int K, float *xs)
{
    for (int k = threadIdx.x * 4; k < K; k += NT * 4)
        cp_async16(xs + xidx(k), h + k);
    cp_async_wait_all(); /* the caller's csync publishes xs */
}

/* wg[s][head]: split s's weight in the merged softmax, from the staged [s][head][max, sum];
 * both syncs are the caller's: ml staged before, wg published after */
__device__ __forceinline__ void merge_weights(const Params &P, int ns, const float *ml, float *wg)
{
    for (int hh = threadIdx.x; hh < P.nh; hh += NT) {
        float M = -INFINITY, L = 0.0f;
        for (int s = 0; s < ns; s++)
            M = fmaxf(M, ml[(s * P.nh + hh) * 2]);
        for (int s = 0; s < ns; s++)
            L += expf(ml[(s * P.nh + hh) * 2] - M) * ml[(s * P.nh + hh) * 2 + 1];
        for (int s = 0; s < ns; s++)
            wg[s * P.nh + hh] = expf(ml[(s * P.nh + hh) * 2] - M) / L;
    }
    csync();
}

/* the o projection's prologue: merge the attention partials of every head into xs.
 * Partials are [split][head][d] (+ [split][head][max, sum]); every split holds >= 1 key. */
__device__ void merge_to_xs(const Params &P, int pos, float *xs, float *scr)
{
    const int ns = nsplit_of(pos + 1), nhd = P.nh * ATT_D, nacc = ns * nhd;
    float *st = scr, *ml = scr + (size_t)P.ns_max * nhd, *wg = ml + 2 * P.ns_max * P.nh;
    const int nml = 2 * ns * P.nh;                      /* a multiple of 4: nh is even */
    for (int i = threadIdx.x * 4; i < nml; i += NT * 4) /* all of it in flight at once: one round trip */
        cp_async16(ml + i, P.pml + i);
    for (int b = threadIdx.x * 4; b < nacc; b += NT * 4)
        cp_async16(st + b, P.pacc + b);
    cp_async_wait_all();
    csync();
    merge_weights(P, ns, ml, wg);
    for (int e = threadIdx.x * 4; e < nhd; e += NT * 4) {
        const int hh = e / ATT_D;
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int s = 0; s < ns; s++) {
            const float w = wg[s * P.nh + hh];
            const float4 v = *(const float4 *)(st + (size_t)s * nhd + e);
            o.x = fmaf(w, v.x, o.x);
            o.y = fmaf(w, v.y, o.y);
            o.z = fmaf(w, v.z, o.z);
            o.w = fmaf(w, v.w, o.w);
        }
        ((float4 *)xs)[xidx(e) >> 2] = o;
    }
}

/* The ring path's merge: the same sums, but the partials go to registers (MERGE_U splits a
 * thread at once, the first batch issued before the maxima's round trip so both overlap)
 * instead of shared memory, which the ring needs; only maxima, sums and weights use scr. */
__device__ void merge_to_xs_direct(const Params &P, int pos, float *xs, float *scr)
{
    const int ns = nsplit_of(pos + 1), nhd = P.nh * ATT_D, e0 = threadIdx.x * 4;
    float *ml = scr, *wg = ml + 2 * P.ns_max * P.nh;
    float4 v[MERGE_U];
#pragma unroll
    for (int u = 0; u < MERGE_U; u++)
        v[u] = e0 < nhd && u < ns ? __ldcg((const float4 *)(P.pacc + (size_t)u * nhd + e0))
                                  : make_float4(0.f, 0.f, 0.f, 0.f);
    for (int i = e0; i < 2 * ns * P.nh; i += NT * 4)
        cp_async16(ml + i, P.pml + i);
    cp_async_wait_all();
    csync();
    merge_weights(P, ns, ml, wg);
    for (int e = e0; e < nhd; e += NT * 4) {
        const int hh = e / ATT_D;
        float4 o = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int s0 = 0; s0 < ns; s0 += MERGE_U) { /* batches of MERGE_U splits, each one round trip */
            if (s0 > 0 || e != e0) {               /* the first batch was loaded above */
#pragma unroll
                for (int u = 0; u < MERGE_U; u++)
                    v[u] = s0 + u < ns ? __ldcg((const float4 *)(P.pacc + (size_t)(s0 + u) * nhd + e))
                                       : make_float4(0.f, 0.f, 0.f, 0.f);
            }
#pragma unroll
            for (int u = 0; u < MERGE_U; u++) {
                if (s0 + u < ns) {
                    const float w = wg[(s0 + u) * P.nh + hh];
                    o.x = fmaf(w, v[u].x, o.x);
                    o.y = fmaf(w, v[u].y, o.y);
                    o.z = fmaf(w, v[u].z, o.z);
                    o.w = fmaf(w, v[u].w, o.w);
                }
            }
        }
        ((float4 *)xs)[xidx(e) >> 2] = o;
    }
}

/* ------------------------------------------------------------------ v2: the shared-memory weight ring */

/* The ring's plan: weight phase wp (0..4L, in streaming order) of a block is one contiguous
 * byte range a matrix it reads (its whole rows; gate/up: two, gate's rows then up's), cut into
 * stages of at most ring_sb bytes. Producer and consumers both walk this, so their stage
 * sequences agree by construction; host_check() checks it covers every byte once. */
struct RingSeg {
    const char *src; /* first byte (16-byte aligned: rows are 512-byte multiples) */
    unsigned bytes;  /* m K 2: a multiple of 512 */
    int j0;          /* block-local 512-byte chunk index of its first byte (v1's: row j >> lg) */
};

__host__ __device__ inline int nseg_of(const Params &P, int wp) { return wkind(P, wp) == 2 ? 2 : 1; }

__host__ __device__ inline RingSeg ring_seg(const Params &P, int wp, int hf, const int (*rng)[2])
{
    const GemvJob jb = job_of(P, wp);
    const int k = wkind(P, wp), n0 = rng[k][0], m = rng[k][1] - n0;
    return RingSeg{(const char *)((hf ? jb.w1 : jb.w0) + (size_t)n0 * jb.K), (unsigned)m * (unsigned)jb.K * 2u,
                   hf * (m << jb.lg)};
}

__device__ __forceinline__ void mbar_init(uint32_t bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

/* the producer's arrival on a full barrier, with the bytes its copy will complete */
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

/* release semantics (CTA scope): the warp's reads of the stage come before it */
__device__ __forceinline__ void mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, unsigned parity)
{
    uint32_t ok;
    asm volatile("{\n\t.reg .pred p;\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                 "selp.u32 %0, 1, 0, p;\n\t}"
                 : "=r"(ok)
                 : "r"(bar), "r"(parity)
                 : "memory");
    return ok != 0;
}

/* until the barrier's phase of this parity has completed (acquire: the stage's bytes, or the
 * consumers' release, are visible after it); try_wait itself suspends a while in hardware */
__device__ __forceinline__ void mbar_wait(uint32_t bar, unsigned parity, const char *what)
{
    if (mbar_try_wait(bar, parity))
        return;
    const unsigned long long t0 = gtime();
    unsigned spins = 0;
    while (!mbar_try_wait(bar, parity))
        spin_watchdog(spins, t0, what);
}

/* bytes [src, src + n) -> shared dst by the TMA unit; completes n bytes of bar's transaction */
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void *src, unsigned n, uint32_t bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                 "l"(src), "r"(n), "r"(bar)
                 : "memory");
}

/* one side's place in the ring: both sides step through the same stage sequence. Only the
 * slot and parity live in registers (the rest comes from P and shared addresses), so the
 * state costs the whole kernel two registers. */
struct Ring {
    int slot;     /* the next stage's slot */
    unsigned par; /* the parity of that slot's current use (use u: u & 1) */
    __device__ void next(int s)
    {
        if (++slot == s) {
            slot = 0;
            par ^= 1;
        }
    }
};

extern __shared__ float4 smem4[];                      /* dynamic: xs, accs, scr, ring */
__shared__ unsigned long long ring_bar[2 * RING_SMAX]; /* full barriers, then empty barriers */

__device__ __forceinline__ uint32_t ring_full(int slot) { return (uint32_t)__cvta_generic_to_shared(&ring_bar[slot]); }
__device__ __forceinline__ uint32_t ring_empty(int slot)
{
    return (uint32_t)__cvta_generic_to_shared(&ring_bar[RING_SMAX + slot]);
}
__device__ __forceinline__ const char *ring_stage(const Params &P, int slot)
{
    return (const char *)smem4 + P.ring_off + (size_t)slot * P.ring_sb;
}

/* The producer: one thread (of the extra warp) issues every stage of the block's token, in
 * the plan's order, into slot (c mod S), after waiting for that slot's previous use to be
 * released. Why nothing deadlocks:
 *   - it waits only on "empty" barriers, never on a grid barrier or a csync;
 *   - the consumers release stage c (each of the NW warps arrives once) before they wait on
 *     stage c + 1, so its wait for stage c - S ends once they are past stage c - S, which in
 *     turn needed only stages <= c - S, all issued before;
 *   - the consumers wait on "full" barriers (met by its copies, issued in the order they are
 *     waited on) and on grid barriers, which count blocks (consumer thread 0 arrives), so no
 *     grid barrier waits on a producer;
 *   - it issues exactly the stages the consumers wait on: no copy is in flight at exit.
 * A stage's previous bytes were read by the consumers (generic proxy) before their release
 * (mbarrier.arrive, release) that this thread acquires (try_wait) before the async-proxy write:
 * the pattern CUTLASS's TMA pipelines use for this write-after-read, with no proxy fence. */
__device__ void ring_produce(const Params &P, const int (*rng)[2])
{
    Ring r{0, 0};
    bool wrapped = false; /* every slot used once: from now on each copy waits for a release */
    for (int wp = 0; wp <= 4 * P.L; wp++)
        for (int hf = 0; hf < nseg_of(P, wp); hf++) {
            const RingSeg sg = ring_seg(P, wp, hf, rng);
            for (unsigned off = 0; off < sg.bytes; off += P.ring_sb) {
                const unsigned n = tmin(P.ring_sb, sg.bytes - off);
                if (wrapped)
                    mbar_wait(ring_empty(r.slot), r.par ^ 1u, "ring empty"); /* the release of its previous use */
                mbar_expect_tx(ring_full(r.slot), n);
                bulk_g2s((uint32_t)__cvta_generic_to_shared(ring_stage(P, r.slot)), sg.src + off, n, ring_full(r.slot));
                wrapped |= r.slot == P.ring_s - 1;
                r.next(P.ring_s);
            }
        }
}

/* One GEMV phase of the consumers (v2): rows [n0, n1) of weight phase wp, streamed from the
 * ring. pro() builds x in xs (its loads overlap the stages already in flight), hook() runs once
 * the block is past pro(), epi(n, sum, sum of the second half) for each row. A stage's chunks
 * are split over the warps in contiguous runs (mostly one row: one warp reduction a run);
 * x comes from shared memory, so nothing depends on how chunks fall on warps from stage to stage. */
template <class Pro, class Epi, class Hook>
__device__ __forceinline__ void gemv_ring(const Params &P, int wp, const int (*rng)[2], Ring &r, const float *resid,
                                          float *xs, float *accs, Pro pro, Epi epi, Hook hook)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const GemvJob jb = job_of(P, wp);
    const int k = wkind(P, wp), n0 = rng[k][0], m = rng[k][1] - n0, nseg = nseg_of(P, wp);
    const float rv = resid && (int)threadIdx.x < m ? __ldcg(resid + n0 + threadIdx.x) : 0.0f; /* m <= NT (host) */
    pro();
    for (int rr = threadIdx.x; rr < m * nseg; rr += NT)
        accs[rr] = rr == (int)threadIdx.x ? rv : 0.0f;
    csync();
    hook();
    const float4 *xs4 = (const float4 *)xs;
    const int lg = jb.lg, kmask = (1 << lg) - 1;
    int cur = -1;
    float run = 0.0f;
    auto flush = [&] {
        const float t = warp_sum(run);
        if (lane == 0)
            atomicAdd(&accs[cur], t);
    };
    for (int hf = 0; hf < nseg; hf++) {
        const RingSeg sg = ring_seg(P, wp, hf, rng);
        for (unsigned off = 0; off < sg.bytes; off += P.ring_sb) {
            const int nch = (int)(tmin(P.ring_sb, sg.bytes - off) >> 9), jbase = sg.j0 + (int)(off >> 9);
            const int a = nch * warp / NW, b = nch * (warp + 1) / NW;
            const uint4 *stg = (const uint4 *)ring_stage(P, r.slot) + lane;
            mbar_wait(ring_full(r.slot), r.par, "ring full"); /* every warp, chunks or not (see ring_produce) */
            for (int jj = a; jj < b; jj += 4) {
                uint4 w[4];
#pragma unroll
                for (int u = 0; u < 4; u++)
                    w[u] = jj + u < b ? stg[(jj + u) * 32] : make_uint4(0, 0, 0, 0);
#pragma unroll
                for (int u = 0; u < 4; u++) {
                    if (jj + u < b) {
                        const int j = jbase + jj + u, lr = j >> lg, kc = j & kmask;
                        if (lr != cur) { /* warp-uniform */
                            if (cur >= 0)
                                flush();
                            cur = lr;
                            run = 0.0f;
                        }
                        run = dot8(w[u], xs4[kc * 64 + lane], xs4[kc * 64 + 32 + lane], run);
                    }
                }
            }
            __syncwarp(); /* every lane's reads of the stage done (their values are used above) */
            if (lane == 0)
                mbar_arrive(ring_empty(r.slot));
            r.next(P.ring_s);
        }
    }
    if (cur >= 0)
        flush();
    csync();
    for (int rr = threadIdx.x; rr < m; rr += NT)
        epi(n0 + rr, accs[rr], nseg == 2 ? accs[m + rr] : 0.0f);
}

/* ------------------------------------------------------------------ attention phase */

__device__ __forceinline__ void unpack8(uint4 u, float *f)
{
    f[0] = bf_lo(u.x), f[1] = bf_hi(u.x), f[2] = bf_lo(u.y), f[3] = bf_hi(u.y);
    f[4] = bf_lo(u.z), f[5] = bf_hi(u.z), f[6] = bf_lo(u.w), f[7] = bf_hi(u.w);
}

/* block b < nkv * nsplit: KV head j = b / nsplit, keys [s0, s1) of split s = b % nsplit;
 * key k of a round goes to lanes 8*kq .. 8*kq+7 (kq = k % 4), each lane 8 dims (dq) */
__device__ __forceinline__ int att_key(int s0, int r, int warp, int kq) { return s0 + (r * NW + warp) * 4 + kq; }

/* the K/V lines a block's attention will read, into L2 (at the end of the qkv phase) */
__device__ void att_prefetch(const Params &P, int l, int pos)
{
    const int S = pos + 1, ns = nsplit_of(S), b = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (b >= P.nkv * ns || lane >= 8 * ATT_R)
        return;
    const int j = b / ns, s0 = (b % ns) * ATT_KEYS, s1 = tmin(S, s0 + ATT_KEYS);
    const int r = (lane & (4 * ATT_R - 1)) >> 2, key = att_key(s0, r, warp, lane & 3);
    if (key < s1 && key != pos) {
        const size_t off = (((size_t)l * P.ctx_max + key) * P.nkv + j) * ATT_D;
        l2_prefetch_line((lane < 4 * ATT_R ? P.kc : P.vc) + off);
    }
}

template <class Issue>
__device__ void phase_att(const Params &P, int l, int pos, const float2 *rope, float *scr, Issue issue)
{
    const int S = pos + 1, ns = nsplit_of(S), b = blockIdx.x, tid = threadIdx.x;
    const int lane = tid & 31, warp = tid >> 5;
    if (b >= P.nkv * ns) { /* no keys for this block: it only prefetches */
        issue();
        return;
    }
    const int j = b / ns, s = b % ns, s0 = s * ATT_KEYS, s1 = tmin(S, s0 + ATT_KEYS);
    const int kq = lane >> 3, dq = lane & 7, nhd = P.nh * ATT_D;
    const size_t lbase = (size_t)l * P.ctx_max * P.nkv * ATT_D;
    /* the cached keys and values first: nothing they need comes from this phase */
    uint4 kr[ATT_R], vr[ATT_R];
#pragma unroll
    for (int r = 0; r < ATT_R; r++) {
        const int key = att_key(s0, r, warp, kq);
        kr[r] = vr[r] = make_uint4(0, 0, 0, 0);
        if (key < s1 && key != pos) {
            const size_t off = lbase + ((size_t)key * P.nkv + j) * ATT_D + dq * 8;
            kr[r] = __ldcg((const uint4 *)(P.kc + off));
            vr[r] = __ldcg((const uint4 *)(P.vc + off));
        }
    }
    issue();         /* behind this block's K/V loads, ahead of the next phases' weights */
    float *qs = scr; /* [G][d] roped q, times 1/sqrt(d) */
    uint16_t *kn = (uint16_t *)(qs + ATT_G * ATT_D); /* [d] new key as cached (bf16) */
    uint16_t *vn = kn + ATT_D;                       /* [d] new value as cached */
    float *redm = qs + ATT_G * ATT_D + ATT_D;        /* [NW][G] warp maxima */
    float *redl = redm + NW * ATT_G;                 /* [NW][G] warp sums */
    float *sacc = redl + NW * ATT_G;                 /* [NW][G][d] warp outputs */
    const float *qkv = P.qkv;
    if (tid < ATT_G * ATT_D / 2) { /* q of the G heads: pairs (i, i + d/2) */
        const int g = tid / (ATT_D / 2), i = tid % (ATT_D / 2), hq = j * ATT_G + g;
        const float x0 = __ldcg(qkv + hq * ATT_D + i), x1 = __ldcg(qkv + hq * ATT_D + i + ATT_D / 2);
        const float c = rope[i].x, sn = rope[i].y;
        qs[g * ATT_D + i] = (x0 * c - x1 * sn) * P.att_scale;
        qs[g * ATT_D + i + ATT_D / 2] = (x0 * sn + x1 * c) * P.att_scale;
    }
    const size_t pbase = lbase + ((size_t)pos * P.nkv + j) * ATT_D;
    if (s1 == S && tid >= 128 && tid < 128 + ATT_D / 2) { /* the split holding pos ropes and caches k */
        const int i = tid - 128;
        const float x0 = __ldcg(qkv + nhd + j * ATT_D + i), x1 = __ldcg(qkv + nhd + j * ATT_D + i + ATT_D / 2);
        const float c = rope[i].x, sn = rope[i].y;
        const uint16_t k0 = f2bf(x0 * c - x1 * sn), k1 = f2bf(x0 * sn + x1 * c);
        kn[i] = k0;
        kn[i + ATT_D / 2] = k1;
        P.kc[pbase + i] = k0;
        P.kc[pbase + i + ATT_D / 2] = k1;
    }
    if (s1 == S && tid >= 192 && tid < 192 + ATT_D) { /* ... and v */
        const int i = tid - 192;
        const uint16_t v = f2bf(__ldcg(qkv + nhd + P.nkv * ATT_D + j * ATT_D + i));
        vn[i] = v;
        P.vc[pbase + i] = v;
    }
    csync();
    float sc[ATT_R][ATT_G];
#pragma unroll
    for (int r = 0; r < ATT_R; r++) {
        const int key = att_key(s0, r, warp, kq);
        if (key == pos) { /* the new key and value from shared memory, as cached */
            kr[r] = *(const uint4 *)(kn + dq * 8);
            vr[r] = *(const uint4 *)(vn + dq * 8);
        }
        float kf[8];
        unpack8(kr[r], kf);
#pragma unroll
        for (int g = 0; g < ATT_G; g++) {
            const float4 qa = *(const float4 *)(qs + g * ATT_D + dq * 8);
            const float4 qb = *(const float4 *)(qs + g * ATT_D + dq * 8 + 4);
            float p = kf[0] * qa.x + kf[1] * qa.y + kf[2] * qa.z + kf[3] * qa.w + kf[4] * qb.x + kf[5] * qb.y +
                      kf[6] * qb.z + kf[7] * qb.w;
            p += __shfl_xor_sync(0xffffffffu, p, 1);
            p += __shfl_xor_sync(0xffffffffu, p, 2);
            p += __shfl_xor_sync(0xffffffffu, p, 4);
            sc[r][g] = key < s1 ? p : -INFINITY;
        }
    }
#pragma unroll
    for (int g = 0; g < ATT_G; g++) {
        float mx = sc[0][g];
#pragma unroll
        for (int r = 1; r < ATT_R; r++)
            mx = fmaxf(mx, sc[r][g]);
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 8));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 16));
        if (lane == 0)
            redm[warp * ATT_G + g] = mx;
    }
    csync();
    float M[ATT_G], ls[ATT_G], acc[ATT_G][8];
#pragma unroll
    for (int g = 0; g < ATT_G; g++) {
        M[g] = -INFINITY;
        for (int w = 0; w < NW; w++)
            M[g] = fmaxf(M[g], redm[w * ATT_G + g]);
        ls[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; e++)
            acc[g][e] = 0.0f;
    }
#pragma unroll
    for (int r = 0; r < ATT_R; r++) {
        float vf[8];
        unpack8(vr[r], vf);
#pragma unroll
        for (int g = 0; g < ATT_G; g++) {
            const float p = sc[r][g] == -INFINITY ? 0.0f : expf(sc[r][g] - M[g]);
            ls[g] += p;
#pragma unroll
            for (int e = 0; e < 8; e++)
                acc[g][e] = fmaf(p, vf[e], acc[g][e]);
        }
    }
    /* sum the 4 key groups of the warp (lanes 8 apart) */
#pragma unroll
    for (int g = 0; g < ATT_G; g++) {
        ls[g] += __shfl_xor_sync(0xffffffffu, ls[g], 8);
        ls[g] += __shfl_xor_sync(0xffffffffu, ls[g], 16);
#pragma unroll
        for (int e = 0; e < 8; e++) {
            acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], 8);
            acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], 16);
        }
    }
    if (kq == 0) {
#pragma unroll
        for (int g = 0; g < ATT_G; g++) {
            *(float4 *)(sacc + (warp * ATT_G + g) * ATT_D + dq * 8) =
                make_float4(acc[g][0], acc[g][1], acc[g][2], acc[g][3]);
            *(float4 *)(sacc + (warp * ATT_G + g) * ATT_D + dq * 8 + 4) =
                make_float4(acc[g][4], acc[g][5], acc[g][6], acc[g][7]);
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int g = 0; g < ATT_G; g++)
            redl[warp * ATT_G + g] = ls[g];
    }
    csync();
    for (int t = tid; t < ATT_G * ATT_D; t += NT) { /* the block's partial: sum of its warps */
        const int g = t / ATT_D, dd = t % ATT_D;
        float o = 0.0f;
        for (int w = 0; w < NW; w++)
            o += sacc[(w * ATT_G + g) * ATT_D + dd];
        P.pacc[((size_t)s * P.nh + j * ATT_G + g) * ATT_D + dd] = o;
    }
    if (tid < ATT_G) {
        float mx = -INFINITY, L = 0.0f;
        for (int w = 0; w < NW; w++) {
            mx = fmaxf(mx, redm[w * ATT_G + tid]);
            L += redl[w * ATT_G + tid];
        }
        P.pml[((size_t)s * P.nh + j * ATT_G + tid) * 2] = mx;
        P.pml[((size_t)s * P.nh + j * ATT_G + tid) * 2 + 1] = L;
    }
}

/* ------------------------------------------------------------------ the persistent kernel */

/* RING: v2 (NT compute threads and one producer warp; BK counter or flags), else v1 */
template <int BK, bool RING> __global__ __launch_bounds__(RING ? NT + 32 : NT, 1) void k_persist(const Params P)
{
    static_assert(!(RING && BK == BK_CG), "cg's grid sync needs every thread of the block: the producer too");
    __shared__ float red[NW];
    __shared__ PfPlan plan; /* v1 */
    float *xs = (float *)smem4, *accs = xs + P.sm_xs, *scr = accs + P.sm_acc;
    /* every block reads pos before the first barrier; block 0 advances it after the last one */
    const int pos = __ldcg(&P.ctl->pos), slot = __ldcg(&P.ctl->tslot);
    const int nb = 5 * P.L;
    GridBar<BK> bar;
    bar.init(P.bar, P.ts_arr, P.ts_exit, slot < P.ts_slots ? slot : -1, nb);
    __shared__ int rng[NWK][2];
    __shared__ float2 rope[ATT_D / 2]; /* this position's (cos, sin) of each pair: the same in every layer */
    if (threadIdx.x < 2 * NWK)         /* a bound a thread */
        rng[threadIdx.x >> 1][threadIdx.x & 1] =
            range_bound(P, threadIdx.x >> 1, blockIdx.x + (threadIdx.x & 1), gridDim.x);
    [[maybe_unused]] Ring ring{0, 0}; /* v2: the consumers' place */
    if constexpr (RING) {
        if (threadIdx.x == NT) {
            for (int i = 0; i < P.ring_s; i++) {
                mbar_init(ring_full(i), 1);   /* the producer's expect_tx arrival (and the bytes) */
                mbar_init(ring_empty(i), NW); /* one arrival a compute warp */
            }
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); /* visible to the async proxy */
        }
    }
    __syncthreads(); /* the only barrier of all threads (v2: the producer's last one) */
    if constexpr (RING) {
        if (threadIdx.x >= NT) { /* the producer warp: one thread streams, the rest are done */
            if (threadIdx.x == NT)
                ring_produce(P, rng);
            return;
        }
    }
    [[maybe_unused]] Pf pf{0, 0}; /* v1: kept by warp 0 only */
    /* One loop over the token's phases with a single GEMV body: the compiler allocates the
     * streaming loop's registers once (five inlined copies kept each copy's loop-invariant
     * split values live across the layer loop and spilled). */
    for (int ph = 0; ph <= 5 * P.L; ph++) {
        const int l = ph / 5, kind = ph == 5 * P.L ? PH_LM : ph % 5;
        if (kind == PH_ATT) {
            phase_att(P, l, pos, rope, scr, [&] {
                if constexpr (!RING)
                    pf_issue_warp(plan);
            });
        } else {
            const int wk = kind == PH_LM ? 4 : kind == PH_QKV ? 0 : kind - 1; /* weight kind */
            const int wp = kind == PH_LM ? 4 * P.L : 4 * l + wk;              /* weight phase */
            const uint16_t *W = P.wl + (size_t)l * P.lstride;
            const float *resid = kind == PH_O || kind == PH_DOWN ? P.x : nullptr;
            auto pro = [&] {
                if (kind == PH_O) { /* the attention partials merged */
                    if constexpr (RING)
                        merge_to_xs_direct(P, pos, xs, scr);
                    else
                        merge_to_xs(P, pos, xs, scr);
                } else if (kind == PH_DOWN) {
                    copy_to_xs(P.h, P.I, xs);
                } else { /* layer 0's qkv norms the embedding row, and block 0 seeds x with it */
                    const bool emb = kind == PH_QKV && l == 0;
                    /* v1: the first phase's prefetch plan (later ones: in the barriers); the rope
                     * table (here, so that pos's load overlaps the weights') */
                    if constexpr (!RING)
                        if (emb && threadIdx.x < 32)
                            pf_plan_block(P, pf, pf_target(P, 0), rng, plan);
                    const int i = threadIdx.x - 32;
                    if (emb && i >= 0 && i < ATT_D / 2)
                        rope_cs(pos, i, ATT_D, P.theta, rope[i].x, rope[i].y);
                    norm_to_xs(P.x, emb ? P.lm + (size_t)tok_of(pos, P.V) * P.H : nullptr,
                               kind == PH_QKV  ? W + P.off_an
                               : kind == PH_GU ? W + P.off_fn
                                               : P.norm_f,
                               P.H, P.eps, xs, red, emb && blockIdx.x == 0 ? P.x : nullptr);
                }
            };
            auto epi = [&](int n, float v, float u) {
                if (kind == PH_QKV)
                    P.qkv[n] = v;
                else if (kind == PH_GU)
                    P.h[n] = silu(v) * u;
                else if (kind == PH_LM)
                    P.logits[n] = v;
                else /* o, down: the residual was the sum's start */
                    P.x[n] = v;
            };
            if constexpr (RING) {
                /* the K/V lines into L2 at the start of qkv: attention's loads then hit L2 */
                gemv_ring(P, wp, rng, ring, resid, xs, accs, pro, epi, [&] {
                    if (kind == PH_QKV)
                        att_prefetch(P, l, pos);
                });
            } else {
                gemv_phase(job_of(P, wp), rng[wk][0], rng[wk][1], resid, xs, accs, pro, epi, [&] {
                    pf_issue_warp(plan);
                    if (kind == PH_QKV)
                        att_prefetch(P, l, pos);
                });
            }
        }
        if (ph < 5 * P.L) { /* v1: warp 0 plans the next phase's prefetches while the grid arrives */
            bar.arrive(P.bar);
            if constexpr (!RING)
                if (threadIdx.x < 32)
                    pf_plan_block(P, pf, pf_target(P, ph + 1), rng, plan);
            bar.wait(P.bar);
        }
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) { /* every block read ctl before barrier 0 */
        P.ctl->pos = pos + 1;
        P.ctl->tslot = slot + 1;
    }
    bar.fini(P.bar);
}

/* barrier cost alone: n barriers, no work, the same grid */
template <int BK> __global__ __launch_bounds__(NT, 1) void k_barbench(BarState *bs, int n)
{
    GridBar<BK> bar;
    bar.init(bs, nullptr, nullptr, -1, n);
    for (int i = 0; i < n; i++)
        bar.sync(bs);
    bar.fini(bs);
}

/* smallest step of %globaltimer seen by one thread (its resolution on this GPU) */
__global__ void k_gtime_res(unsigned long long *out)
{
    unsigned long long prev = gtime(), best = ~0ull;
    for (int i = 0; i < 20000; i++) {
        const unsigned long long t = gtime();
        if (t != prev && t - prev < best)
            best = t - prev;
        prev = t;
    }
    *out = best;
}

/* ------------------------------------------------------------------ reference kernels (clarity first) */

__global__ void k_fill(uint16_t *p, size_t n, uint32_t seed, float scale, float offset)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint32_t h = hash32((uint32_t)i ^ hash32(seed + (uint32_t)(i >> 32) * 0x9e3779b9u));
        const float u = (float)h * (1.0f / 4294967296.0f) * 2.0f - 1.0f;
        p[i] = f2bf(offset + scale * u);
    }
}

__global__ void k_ref_embed(const uint16_t *emb, const Ctl *ctl, float *x, int H, int V)
{
    const int tok = tok_of(ctl->pos, V);
    for (int k = threadIdx.x; k < H; k += blockDim.x)
        x[k] = bf2f(emb[(size_t)tok * H + k]);
}

__global__ void k_ref_rmsnorm(const float *x, const uint16_t *g, float *out, int K, float eps)
{
    __shared__ float red[32];
    float ss = 0.0f;
    for (int k = threadIdx.x; k < K; k += blockDim.x)
        ss += x[k] * x[k];
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = ss;
    __syncthreads();
    float t = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
        t += red[w];
    const float inv = rsqrtf(t / (float)K + eps);
    for (int k = threadIdx.x; k < K; k += blockDim.x)
        out[k] = x[k] * inv * bf2f(g[k]);
}

/* y[n] (+)= W[n, :] . x, a warp a row */
__global__ void k_ref_gemv(const uint16_t *W, const float *x, float *y, int N, int K, int add)
{
    const int n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    if (n >= N)
        return;
    const uint32_t *w = (const uint32_t *)(W + (size_t)n * K);
    float s = 0.0f;
    for (int k2 = lane; k2 < K / 2; k2 += 32) {
        const uint32_t u = w[k2];
        s += bf_lo(u) * x[2 * k2] + bf_hi(u) * x[2 * k2 + 1];
    }
    s = warp_sum(s);
    if (lane == 0)
        y[n] = add ? y[n] + s : s;
}

/* rope q (in place) and k; k and v rounded to bf16 into the caches at pos */
__global__ void k_ref_rope_cache(float *q, const float *k, const float *v, uint16_t *kc, uint16_t *vc, const Ctl *ctl,
                                 int l, int nh, int nkv, int d, int ctx_max, float theta)
{
    const int pos = ctl->pos, t = blockIdx.x * blockDim.x + threadIdx.x, half = d / 2;
    const size_t cbase = ((size_t)l * ctx_max + pos) * nkv * d;
    if (t < nh * half) {
        const int hh = t / half, i = t % half;
        float c, s;
        rope_cs(pos, i, d, theta, c, s);
        const float x0 = q[hh * d + i], x1 = q[hh * d + i + half];
        q[hh * d + i] = x0 * c - x1 * s;
        q[hh * d + i + half] = x0 * s + x1 * c;
    } else if (t < (nh + nkv) * half) {
        const int hh = t / half - nh, i = t % half;
        float c, s;
        rope_cs(pos, i, d, theta, c, s);
        const float x0 = k[hh * d + i], x1 = k[hh * d + i + half];
        kc[cbase + hh * d + i] = f2bf(x0 * c - x1 * s);
        kc[cbase + hh * d + i + half] = f2bf(x0 * s + x1 * c);
        vc[cbase + hh * d + i] = f2bf(v[hh * d + i]);
        vc[cbase + hh * d + i + half] = f2bf(v[hh * d + i + half]);
    }
}

/* one block a query head over keys 0..pos: scores, softmax, weighted values */
__global__ void k_ref_attn(const float *q, const uint16_t *kc, const uint16_t *vc, const Ctl *ctl, int l, int nh,
                           int nkv, int d, int ctx_max, float scale, float *out)
{
    extern __shared__ float p[];
    __shared__ float red[32], part[4][128];
    const int hh = blockIdx.x, kvh = hh / (nh / nkv), S = ctl->pos + 1;
    const size_t lb = (size_t)l * ctx_max * nkv * d;
    for (int s = threadIdx.x; s < S; s += blockDim.x) {
        float dot = 0.0f;
        for (int i = 0; i < d; i++)
            dot += q[hh * d + i] * bf2f(kc[lb + ((size_t)s * nkv + kvh) * d + i]);
        p[s] = dot * scale;
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int s = threadIdx.x; s < S; s += blockDim.x)
        mx = fmaxf(mx, p[s]);
    for (int o = 16; o > 0; o >>= 1)
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = mx;
    __syncthreads();
    mx = -INFINITY;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
        mx = fmaxf(mx, red[w]);
    __syncthreads();
    float sum = 0.0f;
    for (int s = threadIdx.x; s < S; s += blockDim.x) {
        p[s] = expf(p[s] - mx);
        sum += p[s];
    }
    sum = warp_sum(sum);
    if ((threadIdx.x & 31) == 0)
        red[threadIdx.x >> 5] = sum;
    __syncthreads();
    sum = 0.0f;
    for (int w = 0; w < (int)(blockDim.x >> 5); w++)
        sum += red[w];
    /* 4 groups of d threads: group g takes keys s = g mod 4 */
    const int g = threadIdx.x / d, i = threadIdx.x % d;
    if (g < 4) {
        float o = 0.0f;
        for (int s = g; s < S; s += 4)
            o += p[s] * bf2f(vc[lb + ((size_t)s * nkv + kvh) * d + i]);
        part[g][i] = o;
    }
    __syncthreads();
    if (threadIdx.x < d)
        out[hh * d + threadIdx.x] =
            (part[0][threadIdx.x] + part[1][threadIdx.x] + part[2][threadIdx.x] + part[3][threadIdx.x]) / sum;
}

__global__ void k_ref_swiglu(const float *g, const float *u, float *h, int I)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < I)
        h[i] = silu(g[i]) * u[i];
}

__global__ void k_ref_next(Ctl *ctl) { ctl->pos++; }

/* ------------------------------------------------------------------ host */

struct RefBufs {
    float *x, *xn, *q, *k, *v, *att, *g, *u, *h, *logits;
};

static void ref_gemv(const uint16_t *W, const float *x, float *y, int N, int K, int add, cudaStream_t st)
{
    k_ref_gemv<<<(N + 7) / 8, 256, 0, st>>>(W, x, y, N, K, add);
}

/* one reference token: a kernel an op */
static void ref_token(const Params &P, const RefBufs &R, cudaStream_t st)
{
    const int H = P.H, I = P.I, nhd = P.nh * P.d, nkd = P.nkv * P.d;
    k_ref_embed<<<1, 256, 0, st>>>(P.lm, P.ctl, R.x, H, P.V);
    for (int l = 0; l < P.L; l++) {
        const uint16_t *W = P.wl + (size_t)l * P.lstride, *Wqkv = W + P.off_qkv;
        k_ref_rmsnorm<<<1, 1024, 0, st>>>(R.x, W + P.off_an, R.xn, H, P.eps);
        ref_gemv(Wqkv, R.xn, R.q, nhd, H, 0, st);
        ref_gemv(Wqkv + (size_t)nhd * H, R.xn, R.k, nkd, H, 0, st);
        ref_gemv(Wqkv + (size_t)(nhd + nkd) * H, R.xn, R.v, nkd, H, 0, st);
        k_ref_rope_cache<<<(P.nh + P.nkv) * P.d / 2 / 128 + 1, 128, 0, st>>>(R.q, R.k, R.v, P.kc, P.vc, P.ctl, l, P.nh,
                                                                             P.nkv, P.d, P.ctx_max, P.theta);
        k_ref_attn<<<P.nh, 256, P.ctx_max * sizeof(float), st>>>(R.q, P.kc, P.vc, P.ctl, l, P.nh, P.nkv, P.d, P.ctx_max,
                                                                 P.att_scale, R.att);
        ref_gemv(W + P.off_o, R.att, R.x, H, nhd, 1, st);
        k_ref_rmsnorm<<<1, 1024, 0, st>>>(R.x, W + P.off_fn, R.xn, H, P.eps);
        ref_gemv(W + P.off_gu, R.xn, R.g, I, H, 0, st);
        ref_gemv(W + P.off_gu + (size_t)I * H, R.xn, R.u, I, H, 0, st);
        k_ref_swiglu<<<(I + 255) / 256, 256, 0, st>>>(R.g, R.u, R.h, I);
        ref_gemv(W + P.off_down, R.h, R.x, H, I, 1, st);
    }
    k_ref_rmsnorm<<<1, 1024, 0, st>>>(R.x, P.norm_f, R.xn, H, P.eps);
    ref_gemv(P.lm, R.xn, R.logits, P.V, H, 0, st);
    k_ref_next<<<1, 1, 0, st>>>(P.ctl);
}

typedef void (*PersistFn)(const Params);
static PersistFn persist_fn(int bk, bool ring) /* nullptr: no such variant (cg with the ring) */
{
    if (ring)
        return bk == BK_COUNTER ? k_persist<BK_COUNTER, true> : bk == BK_FLAGS ? k_persist<BK_FLAGS, true> : nullptr;
    return bk == BK_CG        ? k_persist<BK_CG, false>
           : bk == BK_COUNTER ? k_persist<BK_COUNTER, false>
                              : k_persist<BK_FLAGS, false>;
}
typedef void (*BenchFn)(BarState *, int);
static BenchFn bench_fn(int bk)
{
    return bk == BK_CG ? k_barbench<BK_CG> : bk == BK_COUNTER ? k_barbench<BK_COUNTER> : k_barbench<BK_FLAGS>;
}

static int persist_threads(bool ring) { return ring ? NT + 32 : NT; }

static cudaError_t launch_persist(int bk, bool ring, int grid, size_t smem, const Params &P, cudaStream_t st)
{
    void *args[] = {(void *)&P};
    return cudaLaunchCooperativeKernel((const void *)persist_fn(bk, ring), dim3(grid), dim3(persist_threads(ring)),
                                       args, smem, st);
}

static void set_pos(Ctl *ctl, int pos, int tslot, cudaStream_t st)
{
    static Ctl h; /* static: the async copy reads it after return */
    CK(cudaStreamSynchronize(st));
    h.pos = pos;
    h.tslot = tslot;
    CK(cudaMemcpyAsync(ctl, &h, sizeof(Ctl), cudaMemcpyHostToDevice, st));
    CK(cudaStreamSynchronize(st));
}

static double rel_l2(const std::vector<float> &a, const std::vector<float> &b)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); i++) {
        const double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

/* Host-side check of the work split and the prefetch plan (no GPU needed): every weight
 * chunk of every phase is streamed by exactly one (block, warp), and every prefetched byte
 * lies in the block's own share of the phase it belongs to. */
static bool host_check(const Params &P, int G)
{
    bool ok = true;
    for (int p = 0; p <= 4 * P.L && ok; p++) {
        const GemvJob jb = job_of(P, p);
        const int cpr = jb.K / 256, halves = jb.w1 ? 2 : 1;
        std::vector<uint8_t> seen((size_t)jb.N * cpr * halves, 0);
        for (int b = 0; b < G; b++) {
            int rng[NWK][2];
            block_ranges(P, G, b, rng);
            const int n0 = rng[wkind(P, p)][0], m = rng[wkind(P, p)][1] - n0, C = (m * halves) << jb.lg;
            const ChunkMap cmap = chunk_map(jb, n0, m, 0);
            for (int w = 0; w < NW; w++) {
                const int j0 = (int)((long long)C * w / NW), j1 = (int)((long long)C * (w + 1) / NW);
                for (int j = j0; j < j1; j++) {
                    const uint16_t *c = chunk_at(cmap, j);
                    const bool second = jb.w1 && c >= jb.w1;
                    const size_t off = (size_t)(c - (second ? jb.w1 : jb.w0));
                    if (off % 256) {
                        ok = false;
                        break;
                    }
                    const size_t idx = (second ? (size_t)jb.N * cpr : 0) + off / 256;
                    if (idx >= seen.size() || seen[idx]++) {
                        fprintf(stderr, "host check: phase %d chunk %zu streamed twice or out of range\n", p, idx);
                        ok = false;
                        break;
                    }
                }
            }
        }
        for (size_t i = 0; ok && i < seen.size(); i++)
            if (seen[i] != 1) {
                fprintf(stderr, "host check: phase %d chunk %zu never streamed\n", p, i);
                ok = false;
            }
    }
    /* the prefetch plan of a few blocks over one token: inside their shares, 16-byte units */
    long long pf_b0 = 0, share_b0 = 0; /* block 0: bytes prefetched, bytes streamed */
    {
        int rng[NWK][2];
        block_ranges(P, G, 0, rng);
        for (int p = 0; p <= 4 * P.L; p++) {
            const GemvJob jb = job_of(P, p);
            share_b0 += (long long)(rng[wkind(P, p)][1] - rng[wkind(P, p)][0]) * jb.K * 2 * (jb.w1 ? 2 : 1);
        }
    }
    for (int b = 0; b < G && ok; b += std::max(1, G / 7)) {
        for (int w = 0; w < NW && ok; w++) {
            Pf f{0, 0};
            long long total = 0;
            int rng[NWK][2];
            block_ranges(P, G, b, rng);
            for (int ph = 0; ph <= 5 * P.L && ok; ph++) /* the kernel's sequence of plans */
                pf_plan(P, f, pf_target(P, ph), rng, w, [&](const char *ptr, unsigned n) {
                    total += n;
                    if (b == 0)
                        pf_b0 += n;
                    const bool in = n % 16 == 0 && ((uintptr_t)ptr & 15) == 0;
                    bool found = false;
                    for (int q = 0; q <= 4 * P.L && !found; q++) {
                        const GemvJob jb = job_of(P, q);
                        long long a, e;
                        split_range(jb.N, G, b, a, e);
                        for (int hf = 0; hf < (jb.w1 ? 2 : 1); hf++) {
                            const char *lo = (const char *)((hf ? jb.w1 : jb.w0) + (size_t)a * jb.K);
                            const char *hi = (const char *)((hf ? jb.w1 : jb.w0) + (size_t)e * jb.K);
                            if (ptr >= lo && ptr + n <= hi)
                                found = true;
                        }
                    }
                    if (!in || !found) {
                        fprintf(stderr, "host check: block %d warp %d prefetch %p+%u outside its share\n", b, w,
                                (const void *)ptr, n);
                        ok = false;
                    }
                });
            if (P.pf_bytes > 0 && total == 0 && w == 0) {
                fprintf(stderr, "host check: block %d prefetches nothing\n", b);
                ok = false;
            }
        }
    }
    if (ok)
        printf("prefetch plan: block 0 prefetches %.0f of the %.0f KB it streams a token (%.0f%%)\n", pf_b0 / 1024.0,
               share_b0 / 1024.0, 100.0 * pf_b0 / share_b0);
    return ok;
}

/* Host-side check of v2's ring plan (no GPU needed): for every block, the producer's sequence
 * of copies (ring_seg cut into stages, the walk ring_produce makes) covers every 512-byte chunk
 * of every matrix exactly once over the grid, phase by phase in the consumers' order (qkv, o,
 * gate/up, down a layer, then the LM head) and in ascending address order within a segment;
 * each copy is 16-byte aligned, a 512-byte multiple, at most a stage; and the consumers' map
 * of a stage's chunk (block-local chunk j -> row j >> lg, k-chunk j & mask) names the very
 * bytes the producer copied there. */
static bool ring_check(const Params &P, int G, long long *stages_b0)
{
    if (P.ring_s < 1 || P.ring_s > RING_SMAX || P.ring_sb < 512 || P.ring_sb % 512) {
        fprintf(stderr, "ring check: %d stages of %u B: need 1..%d stages, a multiple of 512 B\n", P.ring_s, P.ring_sb,
                RING_SMAX);
        return false;
    }
    std::vector<std::vector<uint8_t>> seen(4 * P.L + 1);
    for (int p = 0; p <= 4 * P.L; p++) {
        const GemvJob jb = job_of(P, p);
        seen[p].assign((size_t)jb.N * (jb.K / 256) * (jb.w1 ? 2 : 1), 0);
    }
    *stages_b0 = 0;
    for (int b = 0; b < G; b++) {
        int rng[NWK][2];
        block_ranges(P, G, b, rng);
        int next_wp = 0;                        /* ring_produce walks wp = 0, 1, ..., 4L */
        for (int ph = 0; ph <= 5 * P.L; ph++) { /* the consumers' phase walk (k_persist's) */
            const int l = ph / 5, kind = ph == 5 * P.L ? PH_LM : ph % 5;
            if (kind == PH_ATT)
                continue;
            const int wk = kind == PH_LM ? 4 : kind == PH_QKV ? 0 : kind - 1;
            const int wp = kind == PH_LM ? 4 * P.L : 4 * l + wk;
            if (wp != next_wp++ || wk != wkind(P, wp)) {
                fprintf(stderr, "ring check: the consumers' phase %d reads weight phase %d, the producer's is %d\n", ph,
                        wp, next_wp - 1);
                return false;
            }
            const GemvJob jb = job_of(P, wp);
            const int n0 = rng[wk][0], m = rng[wk][1] - n0, cpr = jb.K / 256;
            for (int hf = 0; hf < nseg_of(P, wp); hf++) {
                const RingSeg sg = ring_seg(P, wp, hf, rng);
                if (sg.bytes != (unsigned)m * jb.K * 2u || sg.j0 != hf * m * cpr) {
                    fprintf(stderr, "ring check: block %d phase %d half %d: segment of %u B at chunk %d\n", b, wp, hf,
                            sg.bytes, sg.j0);
                    return false;
                }
                for (unsigned off = 0; off < sg.bytes; off += P.ring_sb) { /* ring_produce's cut */
                    const unsigned n = std::min(P.ring_sb, sg.bytes - off);
                    const char *src = sg.src + off;
                    if (n == 0 || n % 512 || ((uintptr_t)src & 15)) {
                        fprintf(stderr, "ring check: block %d phase %d: copy %p+%u\n", b, wp, (const void *)src, n);
                        return false;
                    }
                    if (b == 0)
                        ++*stages_b0;
                    for (unsigned i = 0; i < n / 512; i++) { /* gemv_ring's map of chunk i of the stage */
                        const int j = sg.j0 + (int)(off / 512) + (int)i, lr = j >> jb.lg, kc = j & ((1 << jb.lg) - 1);
                        const bool second = lr >= m;
                        const uint16_t *want =
                            (second ? jb.w1 : jb.w0) + (size_t)(n0 + lr - (second ? m : 0)) * jb.K + (size_t)kc * 256;
                        if ((const char *)want != src + (size_t)i * 512 || second != (hf == 1) ||
                            lr >= m * nseg_of(P, wp)) {
                            fprintf(stderr,
                                    "ring check: block %d phase %d: stage chunk %u maps to row %d chunk %d, not the "
                                    "bytes copied\n",
                                    b, wp, i, lr, kc);
                            return false;
                        }
                        const size_t idx =
                            (second ? (size_t)jb.N * cpr : 0) + (size_t)(n0 + lr - (second ? m : 0)) * cpr + kc;
                        if (idx >= seen[wp].size() || seen[wp][idx]++) {
                            fprintf(stderr, "ring check: phase %d chunk %zu streamed twice or out of range\n", wp, idx);
                            return false;
                        }
                    }
                }
            }
        }
    }
    for (int p = 0; p <= 4 * P.L; p++)
        for (size_t i = 0; i < seen[p].size(); i++)
            if (seen[p][i] != 1) {
                fprintf(stderr, "ring check: phase %d chunk %zu never streamed\n", p, i);
                return false;
            }
    return true;
}

#ifdef PHASE_TIMING
/* averages over the timed tokens: per phase kind the span from block 0 leaving the previous
 * barrier to the last block arriving (work + imbalance), and per barrier the span from the
 * last arrival to block 0 leaving (the barrier's own latency) */
static std::string phase_json(const Params &P, int G, int ntok, const double *bytes)
{
    const int nb = 5 * P.L, st = nb + 1;
    std::vector<unsigned long long> arr((size_t)ntok * st * G), ext((size_t)ntok * st);
    CK(cudaMemcpy(arr.data(), P.ts_arr, arr.size() * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ext.data(), P.ts_exit, ext.size() * 8, cudaMemcpyDeviceToHost));
    double work[6] = {0}, spread[6] = {0}, bar = 0, gap = 0, tok = 0;
    int cnt[6] = {0}, nbar = 0, ngap = 0;
    for (int t = 0; t < ntok; t++) {
        for (int i = 0; i <= nb; i++) {
            const unsigned long long *a = &arr[((size_t)t * st + i) * G];
            unsigned long long last = 0;
            double mean = 0;
            for (int b = 0; b < G; b++) {
                last = std::max(last, a[b]);
                mean += (double)a[b] / G;
            }
            const int kind = i < nb ? i % 5 : 5;
            work[kind] += (double)(last - ext[(size_t)t * st + i]);
            spread[kind] += (double)last - mean;
            cnt[kind]++;
            if (i < nb) {
                bar += (double)(ext[(size_t)t * st + i + 1] - last);
                nbar++;
            } else {
                tok += (double)(last - ext[(size_t)t * st]);
                if (t + 1 < ntok) {
                    gap += (double)(ext[(size_t)(t + 1) * st] - last);
                    ngap++;
                }
            }
        }
    }
    static const char *names[6] = {"qkv", "att", "o", "gu", "down", "lm"};
    std::string s = "{";
    char buf[256];
    printf("phase   us (a layer)  tail us   MB streamed  TB/s\n");
    for (int k = 0; k < 6; k++) { /* bytes: the whole grid's for one occurrence (att: K and V read) */
        const double us = work[k] / cnt[k] / 1e3;
        printf("%-6s %12.2f %9.2f %12.2f %5.2f\n", names[k], us, spread[k] / cnt[k] / 1e3, bytes[k] / 1e6,
               bytes[k] / us / 1e6);
        snprintf(buf, sizeof buf, "\"%s_us\":%.3f,\"%s_tail_us\":%.3f,\"%s_MB\":%.3f,\"%s_TBps\":%.3f,", names[k], us,
                 names[k], spread[k] / cnt[k] / 1e3, names[k], bytes[k] / 1e6, names[k], bytes[k] / us / 1e6);
        s += buf;
    }
    snprintf(buf, sizeof buf, "\"barrier_us\":%.3f,\"kernel_us\":%.2f,\"launch_gap_us\":%.2f}", bar / nbar / 1e3,
             tok / ntok / 1e3, ngap ? gap / ngap / 1e3 : 0.0);
    s += buf;
    return s;
}
#endif

static void usage()
{
    fprintf(stderr, "usage: persist --shape 1b|1b32k|188m [--stream ring|regs] [--stages S (8)] [--stage-kb KB (16)] "
                    "[--grid N (SMs x bps)] [--ctx 512] [--tokens 200] [--pf KB (96, regs only)] "
                    "[--barrier all|cg|counter|flags] [--bps 1] [--ref-tokens N] [--host-check GRID]\n"
                    "  ring: no cg barrier (the producer warp takes no part in grid barriers)\n");
    exit(1);
}

int main(int argc, char **argv)
{
    std::string shape = "1b", barrier = "all", stream = "ring";
    int ctx = 512, tokens = 200, pf_kb = 96, bps = 1, host_only = 0, ref_tokens = -1, stages = 8, stage_kb = 16,
        grid_opt = 0;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (i + 1 >= argc)
            usage();
        if (a == "--shape")
            shape = argv[++i];
        else if (a == "--ctx")
            ctx = atoi(argv[++i]);
        else if (a == "--tokens")
            tokens = atoi(argv[++i]);
        else if (a == "--pf")
            pf_kb = atoi(argv[++i]);
        else if (a == "--barrier")
            barrier = argv[++i];
        else if (a == "--bps")
            bps = atoi(argv[++i]);
        else if (a == "--ref-tokens")
            ref_tokens = atoi(argv[++i]);
        else if (a == "--host-check")
            host_only = atoi(argv[++i]);
        else if (a == "--stream")
            stream = argv[++i];
        else if (a == "--stages")
            stages = atoi(argv[++i]);
        else if (a == "--stage-kb")
            stage_kb = atoi(argv[++i]);
        else if (a == "--grid")
            grid_opt = atoi(argv[++i]);
        else
            usage();
    }
    const Shape *S = nullptr;
    for (const Shape &s : SHAPES)
        if (shape == s.name)
            S = &s;
    if (ref_tokens < 0 || ref_tokens > tokens) /* the cache holds ctx + warm-up + tokens positions */
        ref_tokens = tokens;
    const bool ring = stream == "ring";
    if (!S || ctx < 1 || tokens < 1 || pf_kb < 0 || bps < 1 || ref_tokens < 1 || (!ring && stream != "regs") ||
        stages < 1 || stages > RING_SMAX || stage_kb < 1 || stage_kb > 64 || grid_opt < 0 || grid_opt > MAXG)
        usage();
    if (ring && barrier == "cg") {
        fprintf(stderr, "the ring path has no cg barrier\n");
        return 1;
    }
    const int warm = 10;
    Params P{};
    P.H = S->H, P.I = S->I, P.nh = S->nh, P.nkv = S->nkv, P.d = S->d, P.L = S->L, P.V = S->V;
    P.ctx_max = ctx + warm + tokens + 8;
    P.ns_max = nsplit_of(P.ctx_max);
    P.nqkv = (P.nh + 2 * P.nkv) * P.d;
    P.lgH = ilog2(P.H / 256), P.lgI = ilog2(P.I / 256), P.lgA = ilog2(P.nh * P.d / 256);
    P.eps = 1e-5f, P.theta = 500000.0f, P.att_scale = 1.0f / sqrtf((float)P.d);
    P.pf_bytes = ring ? 0 : (long long)pf_kb * 1024 / 512 * 512; /* the ring replaces the L2 prefetch */
    P.ring_s = stages;
    P.ring_sb = (unsigned)stage_kb * 1024u;
    /* what this prototype's kernels assume */
    auto pow2 = [](int v) { return v > 0 && (v & (v - 1)) == 0; };
    if (P.d != ATT_D || P.nh != ATT_G * P.nkv || !pow2(P.H / 256) || !pow2(P.I / 256) || !pow2(P.nh * P.d / 256) ||
        P.H % 256 || P.I % 256 || P.H > 4 * NORM_MAXV * NT) {
        fprintf(stderr, "shape outside what this prototype supports\n");
        return 1;
    }
    /* layer layout (elements): norms, [Wq;Wk;Wv], Wo, [Wgate;Wup], Wdown: each a multiple of 512 B */
    P.off_an = 0;
    P.off_fn = P.H;
    P.off_qkv = 2 * (size_t)P.H;
    P.off_o = P.off_qkv + (size_t)P.nqkv * P.H;
    P.off_gu = P.off_o + (size_t)P.H * P.nh * P.d;
    P.off_down = P.off_gu + 2 * (size_t)P.I * P.H;
    P.lstride = P.off_down + (size_t)P.H * P.I;
    const size_t lm_n = (size_t)P.V * P.H, cache_n = (size_t)P.L * P.ctx_max * P.nkv * P.d;

    if (host_only > 0) { /* the split and prefetch checks with fake addresses: runs without a GPU */
        P.wl = (const uint16_t *)(uintptr_t)0x100000000ull;
        P.lm = P.wl + (size_t)P.L * P.lstride + 4096;
        P.pf_bytes = (long long)pf_kb * 1024 / 512 * 512; /* the v1 plan is checked too */
        bool ok = host_check(P, host_only);
        printf("host check (%s, grid %d, pf %lld B): %s\n", S->name, host_only, P.pf_bytes, ok ? "ok" : "FAILED");
        long long nst = 0;
        const bool rok = ring_check(P, host_only, &nst);
        printf("ring check (%s, grid %d, %d stages x %u B): %s; block 0 streams %lld stages a token\n", S->name,
               host_only, P.ring_s, P.ring_sb, rok ? "ok" : "FAILED", nst);
        return ok && rok ? 0 : 1;
    }

    int dev = 0;
    CK(cudaSetDevice(dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    if (!prop.cooperativeLaunch) {
        fprintf(stderr, "device has no cooperative launch\n");
        return 1;
    }
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    /* weights and caches, random on the device (fixed seeds) */
    uint16_t *wl, *lm, *normf, *kc, *vc;
    CK(cudaMalloc(&wl, (size_t)P.L * P.lstride * 2));
    CK(cudaMalloc(&lm, lm_n * 2));
    CK(cudaMalloc(&normf, (size_t)P.H * 2));
    CK(cudaMalloc(&kc, cache_n * 2));
    CK(cudaMalloc(&vc, cache_n * 2));
    auto fill = [&](uint16_t *p, size_t n, uint32_t seed, float scale, float offset) {
        k_fill<<<4 * prop.multiProcessorCount, 256, 0, st>>>(p, n, seed, scale, offset);
        CK(cudaGetLastError());
    };
    for (int l = 0; l < P.L; l++) {
        uint16_t *W = wl + (size_t)l * P.lstride;
        const uint32_t sd = 1000u * (l + 1);
        fill(W + P.off_an, P.H, sd + 1, 0.1f, 1.0f);
        fill(W + P.off_fn, P.H, sd + 2, 0.1f, 1.0f);
        fill(W + P.off_qkv, (size_t)P.nqkv * P.H, sd + 3, sqrtf(3.0f / P.H), 0.0f); /* unit-variance outputs */
        fill(W + P.off_o, (size_t)P.H * P.nh * P.d, sd + 4, sqrtf(3.0f / (P.nh * P.d)), 0.0f);
        fill(W + P.off_gu, 2 * (size_t)P.I * P.H, sd + 5, sqrtf(3.0f / P.H), 0.0f);
        fill(W + P.off_down, (size_t)P.H * P.I, sd + 6, sqrtf(3.0f / P.I), 0.0f);
    }
    fill(lm, lm_n, 7, sqrtf(3.0f / P.H), 0.0f);
    fill(normf, P.H, 8, 0.1f, 1.0f);
    fill(kc, cache_n, 9, 1.7f, 0.0f); /* positions < ctx are the prefilled context; later ones get written */
    fill(vc, cache_n, 10, 1.7f, 0.0f);
    P.wl = wl, P.lm = lm, P.norm_f = normf, P.kc = kc, P.vc = vc;

    /* activations */
    CK(cudaMalloc(&P.x, P.H * 4));
    CK(cudaMalloc(&P.qkv, P.nqkv * 4));
    CK(cudaMalloc(&P.pacc, (size_t)P.ns_max * P.nh * P.d * 4));
    CK(cudaMalloc(&P.pml, (size_t)P.ns_max * P.nh * 2 * 4));
    CK(cudaMalloc(&P.h, P.I * 4));
    CK(cudaMalloc(&P.logits, (size_t)P.V * 4));
    CK(cudaMalloc(&P.ctl, sizeof(Ctl)));
    CK(cudaMalloc(&P.bar, sizeof(BarState)));
    CK(cudaMemset(P.bar, 0, sizeof(BarState)));
    RefBufs R;
    for (float **p : {&R.x, &R.xn, &R.q, &R.k, &R.v, &R.att, &R.g, &R.u, &R.h})
        CK(cudaMalloc(p, (size_t)std::max(P.I, P.nh * P.d) * 4));
    CK(cudaMalloc(&R.logits, (size_t)P.V * 4));

    /* grid: one block a SM (see the occupancy printed), or --grid blocks */
    const int sms = prop.multiProcessorCount;
    const int gmin = grid_opt > 0 ? grid_opt : sms; /* the fewest blocks the grid can have */
    int rows_max = 0;
    for (int p = 0; p <= 4 * P.L; p++) {
        const GemvJob jb = job_of(P, p);
        rows_max = std::max(rows_max, (jb.N + gmin - 1) / gmin * (jb.w1 ? 2 : 1));
    }
    P.sm_xs = std::max(std::max(P.H, P.I), P.nh * P.d);
    P.sm_acc = (rows_max + 4) / 4 * 4;
    const int att_f = ATT_G * ATT_D + ATT_D + 2 * NW * ATT_G + NW * ATT_G * ATT_D;
    const int merge_f = ring ? 3 * P.ns_max * P.nh                          /* merge_to_xs_direct */
                             : P.ns_max * P.nh * P.d + 3 * P.ns_max * P.nh; /* merge_to_xs */
    size_t smem = (size_t)(P.sm_xs + P.sm_acc + std::max(att_f, merge_f)) * 4;
    if (ring) { /* the ring after the rest, 128-byte aligned */
        P.ring_off = (unsigned)((smem + 127) / 128 * 128);
        smem = P.ring_off + (size_t)P.ring_s * P.ring_sb;
    }
    int occ = 1 << 30;
    cudaFuncAttributes fa[3] = {};
    for (int bk = 0; bk < 3; bk++) {
        const PersistFn fn = persist_fn(bk, ring);
        if (!fn)
            continue;
        CK(cudaFuncGetAttributes(&fa[bk], (const void *)fn));
        if (smem + fa[bk].sharedSizeBytes > prop.sharedMemPerBlockOptin) {
            fprintf(stderr, "shared memory: %zu B dynamic (ring %d x %u B) + %zu B static > %zu B a block\n", smem,
                    ring ? P.ring_s : 0, ring ? P.ring_sb : 0u, fa[bk].sharedSizeBytes, prop.sharedMemPerBlockOptin);
            return 1;
        }
        CK(cudaFuncSetAttribute((const void *)fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        int o = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o, fn, persist_threads(ring), smem));
        occ = std::min(occ, o);
    }
    if (occ < 1) {
        fprintf(stderr, "persistent kernel does not fit a SM (smem %zu B)\n", smem);
        return 1;
    }
    const int bpsm = std::min(occ, bps), G = grid_opt > 0 ? grid_opt : sms * bpsm;
    if (G > MAXG || G > sms * occ) {
        fprintf(stderr, "grid %d: more than MAXG %d or than fit at once (%d)\n", G, MAXG, sms * occ);
        return 1;
    }
    if (P.nkv * P.ns_max > G) { /* every (KV head, split) needs its own block */
        fprintf(stderr, "ctx too long for this prototype: %d KV heads x %d splits > %d blocks\n", P.nkv, P.ns_max, G);
        return 1;
    }
    if ((P.H + G - 1) / G > NT) { /* o, down: a thread a row seeds the residual */
        fprintf(stderr, "grid %d too small: > %d rows of o / down a block\n", G, NT);
        return 1;
    }
    if (!host_check(P, G)) {
        fprintf(stderr, "host check of the work split FAILED\n");
        return 1;
    }
    long long ring_stages_b0 = 0;
    if (ring && !ring_check(P, G, &ring_stages_b0)) {
        fprintf(stderr, "host check of the ring plan FAILED\n");
        return 1;
    }
    printf(
        "device %s, %d SMs, L2 %d MB; shape %s, ctx %d, tokens %d; stream %s; grid %d x %d threads (occupancy %d/SM, "
        "using %d), smem %zu B dynamic + %zu static, regs %d/%d/%d (cg/counter/flags), local %zu B, ",
        prop.name, sms, prop.l2CacheSize >> 20, S->name, ctx, tokens, ring ? "ring" : "regs", G, persist_threads(ring),
        occ, bpsm, smem, fa[1].sharedSizeBytes, fa[0].numRegs, fa[1].numRegs, fa[2].numRegs, fa[1].localSizeBytes);
    if (ring)
        printf("ring %d x %u B at %u (%lld stages a token in block 0)\n", P.ring_s, P.ring_sb, P.ring_off,
               ring_stages_b0);
    else
        printf("pf %lld B a block\n", P.pf_bytes);

    unsigned long long *gres;
    CK(cudaMalloc(&gres, 8));
    k_gtime_res<<<1, 1, 0, st>>>(gres);
    unsigned long long gres_h = 0;
    CK(cudaMemcpyAsync(&gres_h, gres, 8, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
#ifdef PHASE_TIMING
    P.ts_slots = tokens;
    CK(cudaMalloc(&P.ts_arr, (size_t)tokens * (5 * P.L + 1) * G * 8));
    CK(cudaMalloc(&P.ts_exit, (size_t)tokens * (5 * P.L + 1) * 8));
#else
    P.ts_slots = 0;
#endif

    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    const int never = 1 << 30; /* tslot that records nothing */

    /* reference: 3 tokens from pos = ctx, keeping each token's logits */
    const int ncheck = 3;
    std::vector<std::vector<float>> ref_logits(ncheck, std::vector<float>(P.V)), got(ncheck, std::vector<float>(P.V));
    set_pos(P.ctl, ctx, never, st);
    for (int t = 0; t < ncheck; t++) {
        ref_token(P, R, st);
        CK(cudaGetLastError());
        CK(cudaMemcpyAsync(ref_logits[t].data(), R.logits, (size_t)P.V * 4, cudaMemcpyDeviceToHost, st));
    }
    CK(cudaStreamSynchronize(st));

    /* copy bandwidth: D2D of 1 GiB, best of 5; counted as read + write traffic (2 x size / time) */
    double copy_gbs = 0;
    {
        const size_t n = 1ull << 30;
        void *a, *b;
        CK(cudaMalloc(&a, n));
        CK(cudaMalloc(&b, n));
        CK(cudaMemsetAsync(a, 1, n, st));
        float best = 1e30f;
        for (int i = 0; i < 6; i++) {
            CK(cudaEventRecord(e0, st));
            CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, st));
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            if (i > 0)
                best = std::min(best, ms);
        }
        copy_gbs = 2.0 * n / (best * 1e-3) / 1e9;
        CK(cudaFree(a));
        CK(cudaFree(b));
    }

    /* bytes a token must read: all weights once, the embedding row, K and V of the keys seen
     * (averaged over the timed tokens); activations (< 1 MB) left out */
    const double wbytes = 2.0 * ((double)P.L * P.lstride + lm_n + P.H + P.H);
    const double keys_avg = ctx + warm + (tokens - 1) / 2.0 + 1;
    const double kvbytes = 2.0 * 2.0 * P.L * keys_avg * P.nkv * P.d;
    const double bytes_tok = wbytes + kvbytes;
    const double floor_us = bytes_tok / (copy_gbs * 1e9) * 1e6;

    /* the reference's speed, for context */
    set_pos(P.ctl, ctx, never, st);
    for (int t = 0; t < warm; t++)
        ref_token(P, R, st);
    CK(cudaEventRecord(e0, st));
    for (int t = 0; t < ref_tokens; t++)
        ref_token(P, R, st);
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float ref_ms;
    CK(cudaEventElapsedTime(&ref_ms, e0, e1));
    const double ref_us = ref_ms * 1e3 / ref_tokens;

    std::string kinds_json;
    bool all_ok = true;
    double best_us = 1e30;
    const char *best_kind = "";
    for (int bk = 0; bk < 3; bk++) {
        if ((barrier != "all" && barrier != bk_name[bk]) || !persist_fn(bk, ring))
            continue;
        /* check: 3 tokens from the same start as the reference */
        set_pos(P.ctl, ctx, never, st);
        for (int t = 0; t < ncheck; t++) {
            CK(launch_persist(bk, ring, G, smem, P, st));
            CK(cudaMemcpyAsync(got[t].data(), P.logits, (size_t)P.V * 4, cudaMemcpyDeviceToHost, st));
        }
        CK(cudaStreamSynchronize(st));
        double err[ncheck];
        for (int t = 0; t < ncheck; t++)
            err[t] = rel_l2(got[t], ref_logits[t]);
        const bool ok = err[ncheck - 1] < 1e-3;
        all_ok &= ok;
        printf("[%s] rel L2 error of the logits vs reference, tokens 1..3: %.3g %.3g %.3g -> %s\n", bk_name[bk], err[0],
               err[1], err[2], ok ? "ok" : "FAILED");

        /* timing: warm-up, then back-to-back launches, no host sync between tokens */
        set_pos(P.ctl, ctx, never, st);
        for (int t = 0; t < warm; t++)
            CK(launch_persist(bk, ring, G, smem, P, st));
        set_pos(P.ctl, ctx + warm, 0, st);
        CK(cudaEventRecord(e0, st));
        for (int t = 0; t < tokens; t++)
            CK(launch_persist(bk, ring, G, smem, P, st));
        CK(cudaEventRecord(e1, st));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        const double us = ms * 1e3 / tokens;
        std::string phases = "null";
#ifdef PHASE_TIMING
        const double kv_layer = kvbytes / P.L, pb[6] = {2.0 * P.nqkv * P.H, kv_layer,        2.0 * P.H * P.nh * P.d,
                                                        4.0 * P.I * P.H,    2.0 * P.H * P.I, 2.0 * lm_n};
        phases = phase_json(P, G, tokens, pb);
#endif

        /* the same launches captured in a CUDA graph, if cooperative launches capture */
        double graph_us = -1;
        std::string graph_err;
        {
            cudaGraph_t gr = nullptr;
            cudaGraphExec_t ge = nullptr;
            cudaError_t e = cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal);
            for (int t = 0; e == cudaSuccess && t < tokens; t++)
                e = launch_persist(bk, ring, G, smem, P, st);
            cudaError_t e2 = cudaStreamEndCapture(st, &gr);
            if (e == cudaSuccess)
                e = e2;
            if (e == cudaSuccess)
                e = cudaGraphInstantiate(&ge, gr, 0);
            if (e == cudaSuccess) {
                set_pos(P.ctl, ctx + warm, never, st);
                e = cudaGraphLaunch(ge, st); /* warm-up replay (uploads the graph) */
                if (e == cudaSuccess)
                    e = cudaStreamSynchronize(st);
                set_pos(P.ctl, ctx + warm, never, st);
                CK(cudaEventRecord(e0, st));
                if (e == cudaSuccess)
                    e = cudaGraphLaunch(ge, st);
                CK(cudaEventRecord(e1, st));
                CK(cudaEventSynchronize(e1));
                if (e == cudaSuccess) {
                    CK(cudaEventElapsedTime(&ms, e0, e1));
                    graph_us = ms * 1e3 / tokens;
                }
            }
            if (e != cudaSuccess)
                graph_err = cudaGetErrorString(e);
            (void)cudaGetLastError(); /* a refused capture is reported, not fatal */
            if (ge)
                cudaGraphExecDestroy(ge);
            if (gr)
                cudaGraphDestroy(gr);
        }

        /* the barrier alone: 2000 back to back in one launch, best of 3; and an empty launch */
        double bar_us = 1e30, launch_us = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            int n = 2000;
            void *args[] = {(void *)&P.bar, (void *)&n};
            CK(cudaEventRecord(e0, st));
            CK(cudaLaunchCooperativeKernel((const void *)bench_fn(bk), dim3(G), dim3(NT), args, 0, st));
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms, e0, e1));
            bar_us = std::min(bar_us, ms * 1e3 / n);
            n = 0;
            CK(cudaEventRecord(e0, st));
            for (int i = 0; i < 100; i++)
                CK(cudaLaunchCooperativeKernel((const void *)bench_fn(bk), dim3(G), dim3(NT), args, 0, st));
            CK(cudaEventRecord(e1, st));
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms, e0, e1));
            launch_us = std::min(launch_us, ms * 1e3 / 100);
        }
        CK(cudaGetLastError());

        printf("[%s] %.1f us/token (%.0f tok/s), graph %s, %.1f%% of the copy floor; barrier %.3f us, empty "
               "cooperative launch %.2f us\n",
               bk_name[bk], us, 1e6 / us, graph_us > 0 ? (std::to_string(graph_us) + " us").c_str() : graph_err.c_str(),
               100.0 * floor_us / us, bar_us, launch_us);
#ifdef PHASE_TIMING
        printf("[%s] phases: %s\n", bk_name[bk], phases.c_str());
#endif
        if (us < best_us) {
            best_us = us;
            best_kind = bk_name[bk];
        }
        char buf[512];
        snprintf(buf, sizeof buf,
                 "%s\"%s\":{\"ok\":%s,\"rel_l2\":%.3g,\"us_per_token\":%.2f,\"tok_s\":%.1f,\"graph_us_per_token\":%s,"
                 "\"frac_of_floor\":%.4f,\"barrier_us\":%.3f,\"empty_launch_us\":%.2f,\"phases\":",
                 kinds_json.empty() ? "" : ",", bk_name[bk], ok ? "true" : "false", err[ncheck - 1], us, 1e6 / us,
                 graph_us > 0 ? std::to_string(graph_us).c_str() : "null", floor_us / us, bar_us, launch_us);
        kinds_json += buf;
        kinds_json += phases + "}";
    }

    printf("reference (a kernel an op): %.1f us/token; bytes a token %.4g (weights %.4g, KV %.4g); copy %.0f GB/s "
           "(read+write) -> floor %.1f us\n",
           ref_us, bytes_tok, wbytes, kvbytes, copy_gbs, floor_us);
#ifdef PHASE_TIMING
    const char *phase_timing = "true";
#else
    const char *phase_timing = "false";
#endif
#ifdef PF_LINES
    const char *pf_kind = "lines";
#else
    const char *pf_kind = "bulk";
#endif
    printf(
        "{\"shape\":\"%s\",\"device\":\"%s\",\"phase_timing\":%s,\"stream\":\"%s\",\"ring_stages\":%d,"
        "\"stage_bytes\":%u,\"gv_u\":%d,\"prefetch\":\"%s\",\"ctx\":%d,\"tokens\":%d,\"sms\":%d,\"grid\":%d,"
        "\"threads\":%d,\"compute_threads\":%d,\"occupancy\":%d,\"regs\":[%d,%d,%d],\"local_bytes\":%zu,"
        "\"smem_bytes\":%zu,\"pf_bytes\":%lld,"
        "\"bytes_per_token\":%.6g,\"weight_bytes\":%.6g,\"kv_bytes\":%.6g,\"copy_GBps_read_plus_write\":%.1f,"
        "\"floor_us\":%.2f,\"globaltimer_res_ns\":%llu,\"ref_us_per_token\":%.1f,\"best\":\"%s\",\"persistent\":{%s}}"
        "\n",
        S->name, prop.name, phase_timing, ring ? "ring" : "regs", ring ? P.ring_s : 0, ring ? P.ring_sb : 0u, GV_U,
        pf_kind, ctx, tokens, sms, G, persist_threads(ring), NT, occ, fa[0].numRegs, fa[1].numRegs, fa[2].numRegs,
        fa[1].localSizeBytes, smem, P.pf_bytes, bytes_tok, wbytes, kvbytes, copy_gbs, floor_us, gres_h, ref_us,
        best_kind, kinds_json.c_str());
    return all_ok ? 0 : 3;
}
