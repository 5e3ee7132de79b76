/* Skinny products for decode (M <= 16 rows): the weight is read once, at full bandwidth.
 * One warp per output column n streams W's row n (16-byte loads, GV_U of them in flight
 * per lane), dots it with the M rows of x (read through L1: every warp of a block reads
 * the same x), reduces across the warp and writes M outputs with the bias or the SwiGLU
 * epilogue applied. 8 warps a block for one row (4 for more). Few columns over a long
 * row (o and down projections: N <= 4096) split the row over KS = 2 or 4 warps of one block, summed through
 * shared memory: 2-4x the warps, so enough loads in flight to stream at full bandwidth. */
#include "gpu_gemv.h"

#include <stdlib.h>
#include <string.h>

#define GV_WARPS 4      /* a block's warps (more rows than one: always) */
#define GV_WARPS_MAX 16 /* one row: up to this many (RLX_GPU_GEMV_WARPS, default 8), so fewer
                         * blocks each build the normed row */
#define GV_XSM_MAX (32 << 10) /* bytes of the normed row a block keeps (K <= 8192) */

/* VEC: K % 8 == 0 and every row 16-byte aligned; else one element per lane per step.
 * KS warps share a column: warp part p takes the 256-element chunks p, p + KS, ... */
template <int WD, int MB, bool GLU, bool VEC, int KS>
__global__ __launch_bounds__((MB == 1 ? GV_WARPS_MAX : GV_WARPS) * 32) static void k_gemv(gpu_ten x, gv_segs sg,
                                                              const void *__restrict__ wu, int M,
                                                              int64_t K)
{
    constexpr int NA = 3 * MB; /* acc, accu, the squares of x (norm) */
    __shared__ float red[KS > 1 ? (MB == 1 ? GV_WARPS_MAX : GV_WARPS) : 1][KS > 1 ? NA : 1];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, part = warp % KS;
    const int nw = (int)(blockDim.x >> 5);
    int64_t n = (int64_t)blockIdx.x * (nw / KS) + warp / KS;
    const bool live = n < sg.end[sg.n - 1];
    const bool pre = MB == 1 && VEC && sg.xsm; /* every warp meets the prologue's barrier */
    if (KS == 1 && !live && !pre)
        return;
    int64_t N;
    const int si = gemv_seg(sg, &n, &N);
    const void *__restrict__ w = sg.w[si];
    const bool nrm = sg.g.p != NULL;
    float acc[MB], accu[GLU ? MB : 1], ss[MB];
#pragma unroll
    for (int m = 0; m < MB; m++) {
        acc[m] = ss[m] = 0.0f;
        if (GLU)
            accu[GLU ? m : 0] = 0.0f;
    }
    const int64_t row = n * K;
    const int64_t kst = (int64_t)(part * 32 + lane) * 8, step = (int64_t)256 * KS * GV_U;
    pk8<WD> wv[GV_U], uv[GLU ? GV_U : 1]; /* 8 weights a vector as loaded (gpu_dtype.h) */
    const bool early = VEC && live && sg.early;
    RLX_PDL_TRIGGER(); /* the next GEMV may launch now and prefetch its weights */
    if (early)
        gv_round<WD, GLU, KS>(wv, uv, w, wu, row, kst, K);
    /* the weights do not depend on the kernel before: fetch a warp's share into L2 while
     * that kernel finishes; not over 8 KB a warp (every resident warp of a large K would
     * prefetch more than L2 holds) */
    if (live && VEC && K * (WD == GDT_F32 ? 4 : 2) <= 8192 * KS) {
        constexpr int lpl = 128 / (8 * (WD == GDT_F32 ? 4 : 2)); /* lanes per 128-byte line */
        for (int64_t k0 = kst + (early ? step : 0); lane % lpl == 0 && k0 < K; k0 += 256 * KS) {
            RLX_PREFETCH_L2((const char *)w + (row + k0) * (WD == GDT_F32 ? 4 : 2));
            if (GLU)
                RLX_PREFETCH_L2((const char *)wu + (row + k0) * (WD == GDT_F32 ? 4 : 2));
        }
    }
    RLX_PDL_WAIT(); /* x, bias and residual may come from the kernel before */
    if (MB == 1 && sg.xres.p && !(pre && sg.last))
        gv_store_sum(x, sg, K);
    extern __shared__ float4 xsm4[];
    float ssb = 0.0f; /* pre: the row's sum of squares (the normed row: xsm4) */
    if (pre) {
        ssb = gv_build_row<GV_WARPS_MAX>(x, sg, K, true, xsm4);
        if (sg.last) /* the sum over x or the residual: stored once every block has read both */
            gv_sum_last(x, sg);
    }
    if (!live) {
    } else if (VEC) {
        for (int64_t k0 = kst; k0 < K; k0 += step) {
            if (!early || k0 != kst)
                gv_round<WD, GLU, KS>(wv, uv, w, wu, row, k0, K);
#pragma unroll
            for (int u = 0; u < GV_U; u++) {
                int64_t k = k0 + u * 256 * KS;
                if (k < K) {
                    float wf[8], uf[8];
                    pk8_unpack<WD>(wv[u], wf);
                    if (GLU)
                        pk8_unpack<WD>(uv[GLU ? u : 0], uf);
#pragma unroll
                    for (int m = 0; m < MB; m++) {
                        if (m < M) {
                            float xf[8];
                            if (pre) {
                                const float4 a = xsm4[k / 4], b = xsm4[k / 4 + 1];
                                xf[0] = a.x, xf[1] = a.y, xf[2] = a.z, xf[3] = a.w;
                                xf[4] = b.x, xf[5] = b.y, xf[6] = b.z, xf[7] = b.w;
                            } else if (MB == 1) { /* the residual one row only: MB 16 would not unroll */
                                x8_load_add(x, sg.xres, sg.xsum.dt, k, xf);
                            } else {
                                x8_load(x, (int64_t)m * K + k, xf);
                            }
                            if (nrm && !pre) { /* x * g, its rms applied in the epilogue */
                                float gf[8];
                                x8_load(sg.g, k, gf);
#pragma unroll
                                for (int e = 0; e < 8; e++) {
                                    ss[m] += xf[e] * xf[e];
                                    xf[e] *= sg.add_one ? 1.0f + gf[e] : gf[e];
                                }
                            }
#pragma unroll
                            for (int e = 0; e < 8; e++) {
                                acc[m] += wf[e] * xf[e];
                                if (GLU)
                                    accu[GLU ? m : 0] += uf[e] * xf[e];
                            }
                        }
                    }
                }
            }
        }
    } else {
        const gpu_ten wt = {(void *)w, WD}, ut = {(void *)wu, WD};
        for (int64_t k = part * 32 + lane; k < K; k += 32 * KS) {
            float wf = ldt(wt, row + k), uf = GLU ? ldt(ut, row + k) : 0.0f;
            float gk = nrm ? ldt(sg.g, k) + (sg.add_one ? 1.0f : 0.0f) : 1.0f;
#pragma unroll
            for (int m = 0; m < MB; m++) {
                if (m < M) {
                    float xv = ldt(x, (int64_t)m * K + k);
                    if (MB == 1 && sg.xres.p)
                        xv = round_to(sg.xsum.dt, xv + ldt(sg.xres, (int64_t)m * K + k));
                    ss[m] += xv * xv;
                    xv *= gk;
                    acc[m] += wf * xv;
                    if (GLU)
                        accu[GLU ? m : 0] += uf * xv;
                }
            }
        }
    }
#pragma unroll
    for (int m = 0; m < MB; m++) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            acc[m] += RLX_SHFL_XOR(acc[m], o, 32);
            if (nrm)
                ss[m] += RLX_SHFL_XOR(ss[m], o, 32);
            if (GLU)
                accu[GLU ? m : 0] += RLX_SHFL_XOR(accu[GLU ? m : 0], o, 32);
        }
    }
    if (KS > 1) { /* the parts of a column: sum in the first warp */
        if (lane == 0)
#pragma unroll
            for (int m = 0; m < MB; m++) {
                red[KS > 1 ? warp : 0][KS > 1 ? m : 0] = acc[m];
                red[KS > 1 ? warp : 0][KS > 1 ? 2 * MB + m : 0] = ss[m];
                if (GLU)
                    red[KS > 1 ? warp : 0][KS > 1 ? MB + m : 0] = accu[GLU ? m : 0];
            }
        __syncthreads();
        if (part != 0 || !live)
            return;
#pragma unroll
        for (int p = 1; p < KS; p++)
#pragma unroll
            for (int m = 0; m < MB; m++) {
                acc[m] += red[KS > 1 ? warp + p : 0][KS > 1 ? m : 0];
                ss[m] += red[KS > 1 ? warp + p : 0][KS > 1 ? 2 * MB + m : 0];
                if (GLU)
                    accu[GLU ? m : 0] += red[KS > 1 ? warp + p : 0][KS > 1 ? MB + m : 0];
            }
    }
    if (!live) /* a warp past the columns that stayed for the prologue's barrier */
        return;
    if (lane == 0)
#pragma unroll
        for (int m = 0; m < MB; m++) {
            if (m >= M)
                continue;
            const float r = nrm ? rsqrtf((pre ? ssb : ss[m]) / (float)K + sg.eps) : 1.0f;
            gv_store<GLU>(sg, si, n, (int64_t)m * N + n, acc[m] * r, GLU ? accu[GLU ? m : 0] * r : 0.0f);
        }
}

/* the switches, read once (each to compare with the path it replaced) */
typedef struct gv_opts {
    int warps; /* a one-row block's: RLX_GPU_GEMV_WARPS=4|8|16 (default 8: half the blocks
                * build the normed row; 16 leaves too few blocks to spread) */
    int xsm;   /* the normed row in shared memory (RLX_GPU_GEMV_SMEM=0: off) */
    int early; /* the first weights loaded before the wait (RLX_GPU_GEMV_EARLY=0: off) */
    int stream; /* a norm's one row of 16-bit weights through k_gemv_stream (RLX_GPU_GEMV_STREAM=0:
                 * off, =all: every one-row 16-bit GEMV) */
    int stream_ks; /* its parts a column, forced (RLX_GPU_GEMV_STREAM_KS=1|2|4|8; else chosen) */
} gv_opts;

static const gv_opts *gv_opt(void)
{
    static gv_opts o;
    static int done;
    if (!done) {
        const char *e = getenv("RLX_GPU_GEMV_WARPS");
        int v = e ? atoi(e) : 0;
        o.warps = v == 4 || v == 16 ? v : 8;
        o.xsm = !rlx_env_off("RLX_GPU_GEMV_SMEM");
        o.early = !rlx_env_off("RLX_GPU_GEMV_EARLY");
        e = getenv("RLX_GPU_GEMV_STREAM");
        o.stream = rlx_env_off("RLX_GPU_GEMV_STREAM") ? 0 : e && strcmp(e, "all") == 0 ? 2 : 1;
        e = getenv("RLX_GPU_GEMV_STREAM_KS");
        v = e ? atoi(e) : 0;
        o.stream_ks = v == 1 ? 0 : v == 2 ? 1 : v == 4 ? 2 : v == 8 ? 3 : -1;
        done = 1;
    }
    return &o;
}

template <int WD, int MB, bool GLU, int KS>
static void launch_ks(gpuStream_t s, bool vec, gpu_ten x, const gv_segs &sg, const void *wu,
                      int64_t M, int64_t K)
{
    const int w = MB == 1 ? gv_opt()->warps : GV_WARPS, cols = w / KS;
    unsigned grid = (unsigned)((sg.end[sg.n - 1] + cols - 1) / cols);
    rlx_launch_pdl(rlx_pdl_on(1), vec ? k_gemv<WD, MB, GLU, true, KS> : k_gemv<WD, MB, GLU, false, KS>,
                   dim3(grid), dim3(w * 32), sg.xsm ? (size_t)K * 4 : 0, s, x, sg, wu, (int)M, K);
}

/* K split over KS warps when the columns alone leave SMs short of loads in flight */
template <int WD, int MB, bool GLU>
static void launch_mb(gpuStream_t s, bool vec, gpu_ten x, const gv_segs &sg, const void *wu,
                      int64_t M, int64_t K)
{
    int64_t N = sg.end[sg.n - 1];
    if (MB > 1) /* batched rows: more work a warp already */
        launch_ks<WD, MB, GLU, 1>(s, vec, x, sg, wu, M, K);
    else if (N <= 4096 && K >= 4096)
        launch_ks<WD, MB, GLU, 4>(s, vec, x, sg, wu, M, K);
    else if (N <= 4096 && K >= 1024)
        launch_ks<WD, MB, GLU, 2>(s, vec, x, sg, wu, M, K);
    else
        launch_ks<WD, MB, GLU, 1>(s, vec, x, sg, wu, M, K);
}
template <int WD, bool GLU>
static void launch_w(gpuStream_t s, bool vec, gpu_ten x, const gv_segs &sg, const void *wu,
                     int64_t M, int64_t K)
{
    if (M <= 1)
        launch_mb<WD, 1, GLU>(s, vec, x, sg, wu, M, K);
    else if (M <= 4)
        launch_mb<WD, 4, GLU>(s, vec, x, sg, wu, M, K);
    else
        launch_mb<WD, GPU_GEMV_MAX_M, GLU>(s, vec, x, sg, wu, M, K);
}

template <bool GLU>
static void launch_glu(gpuStream_t s, bool vec, int wdt, gpu_ten x, const gv_segs &sg,
                       const void *wu, int64_t M, int64_t K)
{
    if (wdt == GDT_BF16)
        launch_w<GDT_BF16, GLU>(s, vec, x, sg, wu, M, K);
    else if (wdt == GDT_F16)
        launch_w<GDT_F16, GLU>(s, vec, x, sg, wu, M, K);
    else
        launch_w<GDT_F32, GLU>(s, vec, x, sg, wu, M, K);
}

/* do K elements of a and b share bytes? */
static bool gv_overlap(gpu_ten a, gpu_ten b, int64_t K)
{
    const char *pa = (const char *)a.p, *pb = (const char *)b.p;
    const int64_t na = K * (a.dt == GDT_F32 ? 4 : 2), nb = K * (b.dt == GDT_F32 ? 4 : 2);
    return pa && pb && pa < pb + nb && pb < pa + na;
}

void gpu_gemv_multi(gpuStream_t s, gpu_ten x, gpu_ten wu, const gpu_gemv_seg *seg, int nseg,
                    int64_t M, int64_t K, const gpu_gemv_norm *nrm)
{
    if (M > 1 && !nrm && gpu_gemv_mma(s, x, wu, seg, nseg, M, K))
        return;
    gv_segs sg{};
    bool fixed;
    uintptr_t al = (uintptr_t)x.p | (uintptr_t)wu.p |
                   gemv_segs_fill(&sg, seg, nseg < 1 ? 1 : nseg > GPU_GEMV_SEGS ? GPU_GEMV_SEGS : nseg, &fixed);
    if (nrm) {
        sg.g = nrm->g;
        sg.eps = nrm->eps;
        sg.add_one = nrm->add_one;
        sg.xres = nrm->res;
        sg.xsum = nrm->sum;
        sg.xsum_n = K;
        al |= (uintptr_t)nrm->g.p | (uintptr_t)nrm->res.p;
    }
    if (sg.end[sg.n - 1] <= 0)
        return;
    bool vec = K % 8 == 0 && al % 16 == 0;
    sg.xsm = nrm && vec && M == 1 && K * 4 <= GV_XSM_MAX && gv_opt()->xsm;
    /* the streaming form where it measured faster: a norm's row (q/k/v, gate/up, the LM head) */
    bool stream = (nrm || gv_opt()->stream == 2) && M == 1 && vec && seg[0].w.dt != GDT_F32 && K * 4 <= GS_ROW_MAX && gv_opt()->stream;
    if (nrm && nrm->res.p && M == 1 && (gv_overlap(nrm->sum, x, K) || gv_overlap(nrm->sum, nrm->res, K))) {
        if ((sg.xsm || stream) && nrm->last) { /* in place: the last block stores the sum */
            sg.last = nrm->last;
        } else { /* in place and the row not kept: the add first, then the GEMVs read its sum */
            gpu_binary_t(s, GB_ADD, x, nrm->res, nrm->sum, K, K);
            x = nrm->sum;
            sg.xres = sg.xsum = gpu_ten{NULL, GDT_F32};
            vec = vec && (uintptr_t)x.p % 16 == 0;
            sg.xsm = sg.xsm && vec;
            stream = stream && vec;
        }
    }
    sg.early = vec && gv_opt()->early && fixed;
    if (stream)
        gpu_gemv_stream(s, seg[0].w.dt, x, sg, wu.p, K, gv_opt()->stream_ks);
    else if (wu.p)
        launch_glu<true>(s, vec, seg[0].w.dt, x, sg, wu.p, M, K);
    else
        launch_glu<false>(s, vec, seg[0].w.dt, x, sg, wu.p, M, K);
}

void gpu_gemv(gpuStream_t s, gpu_ten x, gpu_ten w, gpu_ten wu, gpu_ten bias, gpu_ten y, int fixed, int64_t M,
              int64_t N, int64_t K)
{
    gpu_gemv_seg sg = {w, bias, y, N, {NULL, GDT_F32}, GDT_F32, fixed};
    gpu_gemv_multi(s, x, wu, &sg, 1, M, K, NULL);
}
