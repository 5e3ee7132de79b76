/* Matmuls. Few rows (M <= 4, decode): our streaming kernel, parallel over N. More rows:
 * our GEMM where the ISA table has one (x packed once per block of rows, weights read as stored),
 * else OpenBLAS sgemm (one thread) on slices of N (or M), one slice per task. Slices depend
 * on the shape only, so a value is computed the same way whatever the thread count.
 * 16-bit operands (matmul, linear_swiglu): weights are read as stored by the streaming
 * kernel (converted in registers, f32 accumulation); for sgemm each task converts its
 * weight slice to f32 in its scratch. A 16-bit x is converted to f32 once per call and
 * a 16-bit output is written from f32 once the matmul is done. */
#include "cpu_backend.h"
#include <cblas.h>
#include <stdint.h>
#include <string.h>

#define GEMV_MAX_M 4
#define GUIDED_MAX 64 /* slices of one few-row matmul at most */
/* our GEMM packs x this many rows at a time: the packed copy stays 512·K floats
 * whatever the prompt length (a multiple of CPU_GEMM_MR) */
#define OWN_ROWS 512

typedef struct mm_plan {
    int split_n;   /* 1: tasks are column slices, 0: row slices */
    int64_t chunk; /* columns or rows per task */
    int64_t n_tasks;
} mm_plan;

static mm_plan plan_of(int64_t M, int64_t N, int64_t K, int own)
{
    mm_plan p = {1, N > 0 ? N : 1, 1};
    if (M <= GEMV_MAX_M) {
        p.chunk = cpu_chunk(N, 128, 64, 16);
    } else if ((double)M * (double)N * (double)K < 64.0 * 64 * 64) {
        p.chunk = N > 0 ? N : 1; /* too small to split */
    } else if (N >= 256) {
        /* our GEMM: whole column tiles per task */
        p.chunk = own ? cpu_chunk(N, 96, 16, CPU_GEMM_NR) : cpu_chunk(N, 128, 16, 16);
    } else if (M >= 64) {
        p.split_n = 0;
        /* our GEMM: whole packed row panels per task */
        p.chunk = own ? cpu_chunk(M, CPU_GEMM_MR, 16, CPU_GEMM_MR) : cpu_chunk(M, 32, 16, 8);
    }
    int64_t extent = p.split_n ? N : M;
    p.n_tasks = extent > 0 ? (extent + p.chunk - 1) / p.chunk : 0;
    return p;
}

/* our GEMM (not OpenBLAS) for this node: x·wᵀ with enough rows, where the ISA has one */
static int own_gemm(const cpu_isa *isa, const cpu_node *nd, int nn)
{
    return !nn && isa->gemm && nd->M > GEMV_MAX_M;
}

/* x [..., K] (flattened to M rows), w [N, K] or [K, N], output [..., N] */
static int prep_common(const cpu_compile_ctx *c, cpu_node *nd, int transposed_w, int n_w)
{
    const rlx_value_desc *x = cpu_val(c, 0), *o = cpu_out(c, 0);
    if (transposed_w ? cpu_need_float(c, x, "x") || cpu_need_float(c, o, "the output")
                     : cpu_need_f32(c, x, "x") || cpu_need_f32(c, o, "the output"))
        return RLX_ERR_INVALID;
    nd->dt[0] = x->dtype;
    nd->dt[3] = o->dtype;
    if (x->shape.ndim < 1) return cpu_bad(c, "x must have at least one dim");
    nd->K = x->shape.dims[x->shape.ndim - 1];
    nd->M = nd->K ? cpu_numel(&x->shape) / nd->K : 0;
    for (int i = 1; i <= n_w; i++) {
        const rlx_value_desc *w = cpu_val(c, (uint32_t)i);
        if (transposed_w ? cpu_need_float(c, w, "the weight") : cpu_need_f32(c, w, "the weight"))
            return RLX_ERR_INVALID;
        if (i == 2 && w->dtype != nd->dt[1]) return cpu_bad(c, "the two weights differ in dtype");
        nd->dt[i] = w->dtype;
        if (w->shape.ndim != 2) return cpu_bad(c, "weight %d must be 2-D", i);
        int64_t wk = transposed_w ? w->shape.dims[1] : w->shape.dims[0];
        int64_t wn = transposed_w ? w->shape.dims[0] : w->shape.dims[1];
        if (wk != nd->K) return cpu_bad(c, "inner dims differ: x has %lld, weight %lld",
                                        (long long)nd->K, (long long)wk);
        if (i == 1) nd->N = wn;
        else if (wn != nd->N) return cpu_bad(c, "the two weights have %lld and %lld outputs",
                                             (long long)nd->N, (long long)wn);
    }
    if (nd->M > INT32_MAX || nd->N > INT32_MAX || nd->K > INT32_MAX)
        return cpu_bad(c, "dims beyond 2^31 are not supported");
    if (cpu_numel(&o->shape) != nd->M * nd->N || o->shape.ndim < 1 ||
        o->shape.dims[o->shape.ndim - 1] != nd->N)
        return cpu_bad(c, "output must be [..., %lld] with %lld elements", (long long)nd->N,
                       (long long)(nd->M * nd->N));
    /* f32 copies of a 16-bit x and output (and x packed for our GEMM); per worker, the
     * weights in f32: a slice for sgemm, or one column tile for our GEMM */
    nd->shared_floats = (size_t)((nd->dt[0] != RLX_F32 ? nd->M * nd->K : 0) +
                                 (nd->dt[3] != RLX_F32 ? nd->M * nd->N : 0));
    int own = own_gemm(c->isa, nd, !transposed_w);
    int64_t rows = own && nd->M > OWN_ROWS ? OWN_ROWS : nd->M; /* rows of one GEMM call */
    if (own) nd->shared_floats += c->isa->gemm_x_floats(nd->dt[1], rows, nd->K);
    if ((nd->dt[1] != RLX_F32 || own) && nd->M > GEMV_MAX_M) {
        mm_plan p = plan_of(rows, nd->N, nd->K, own);
        nd->scratch_floats = (size_t)(own ? cpu_gemm_wbuf(nd->K) : (p.split_n ? p.chunk : nd->N) * nd->K);
    }
    return 0;
}

int cpu_prep_matmul(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 2, 3, 1) || prep_common(c, nd, 1, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *b = cpu_val(c, 2);
    if (b) {
        if (cpu_need_f32(c, b, "bias")) return RLX_ERR_INVALID;
        if (cpu_numel(&b->shape) != nd->N) return cpu_bad(c, "bias must have %lld elements", (long long)nd->N);
        nd->bias_in = nd->in[2];
    }
    return 0;
}

int cpu_prep_matmul_nn(const cpu_compile_ctx *c, cpu_node *nd)
{
    return cpu_need(c, 2, 2, 1) || prep_common(c, nd, 0, 1) ? RLX_ERR_INVALID : 0;
}

int cpu_prep_linear_swiglu(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 3, 3, 1) || prep_common(c, nd, 1, 2)) return RLX_ERR_INVALID;
    int own = own_gemm(c->isa, nd, 0);
    int64_t rows = own && nd->M > OWN_ROWS ? OWN_ROWS : nd->M;
    mm_plan p = plan_of(rows, nd->N, nd->K, own);
    nd->scratch_floats += (size_t)(p.split_n ? rows * p.chunk : p.chunk * nd->N);
    return 0;
}

/* y[rows, n0:n1) = x · w[n0:n1)ᵀ (+ bias) into y with row stride ldy; w in dtype wdt
 * (a 16-bit w goes through wbuf, (n1-n0)·K floats, on the sgemm path) */
static void slice_nt(const cpu_isa *isa, const float *x, int64_t M, int64_t K, const void *wv,
                     int wdt, int64_t n0, int64_t n1, const float *bias, float *y, int64_t ldy,
                     int gemv, float *wbuf)
{
    const float *w = wv;
    if (n1 <= n0 || M <= 0) return;
    if (K == 0) {
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = n0; n < n1; n++) y[m * ldy + n] = bias ? bias[n] : 0.0f;
        return;
    }
    if (gemv) {
        for (int64_t m = 0; m < M; m += GEMV_MAX_M) {
            int mm = (int)(M - m < GEMV_MAX_M ? M - m : GEMV_MAX_M);
            if (wdt == RLX_F32) isa->gemv(x + m * K, K, mm, K, w, n0, n1, bias, y + m * ldy, ldy);
            else isa->gemv_h(wdt, x + m * K, K, mm, K, wv, n0, n1, bias, y + m * ldy, ldy);
        }
        return;
    }
    if (wdt != RLX_F32) {
        isa->h_to_f32(wdt, (const uint16_t *)wv + n0 * K, wbuf, (n1 - n0) * K);
        w = wbuf - n0 * K;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)M, (int)(n1 - n0), (int)K, 1.0f, x,
                (int)K, w + n0 * K, (int)K, 0.0f, y + n0, (int)ldy);
    if (bias)
        for (int64_t m = 0; m < M; m++)
            isa->binary(CPU_BIN_ADD, y + m * ldy + n0, y + m * ldy + n0, bias + n0, n1 - n0);
}

typedef struct mm_job {
    const cpu_run *r;
    mm_plan p;
    const float *x;
    const void *w, *w2;
    const float *bias;
    float *y;
    int nn;          /* matmul_nn */
    const float *xp; /* rows [r0, r0+rows) of x packed for our GEMM (NULL: OpenBLAS) */
    int64_t r0, rows;
    const int64_t *bounds; /* few-row matmul: task t is columns [bounds[t], bounds[t+1]) */
} mm_job;

/* Column slices of a few-row matmul, shrinking towards the end ("guided"): the first task
 * of each worker streams a quarter (2 workers) of the weights, each next one 1/(2W) of
 * what is left, down to about 32 KiB of weights: when the last slice is handed out the
 * other worker is at most that far from done, so the wait at the job's end stays ~1 µs
 * where equal slices of 128 rows left up to a slice (256 KiB-1 MiB) to wait for. A row's
 * result does not depend on the slicing. Returns the number of tasks. */
static int64_t gemv_bounds(int64_t N, int64_t K, size_t es, int workers, int64_t *b, int64_t cap)
{
    int64_t min = (int64_t)(32768 / ((size_t)K * es + 1)), n = 0, at = 0;
    min = min < 8 ? 8 : (min + 7) / 8 * 8;
    b[0] = 0;
    while (at < N) {
        int64_t size = (N - at) / (2 * (int64_t)workers);
        size = size < min ? min : (size + 7) / 8 * 8;
        if (n + 2 == cap || at + size > N) size = N - at; /* the table is full: the rest in one */
        at += size;
        b[++n] = at;
    }
    return n;
}

/* our GEMM on rows [m0, m1) of the packed block, columns [n0, n1) (matmul, linear_swiglu) */
static void own_task(const mm_job *j, int64_t m0, int64_t m1, int64_t n0, int64_t n1, float *ws)
{
    const cpu_node *nd = j->r->nd;
    const cpu_isa *isa = j->r->be->isa;
    int64_t M = j->rows, N = nd->N, K = nd->K;
    int wdt = nd->dt[1];
    float *wbuf = ws, *up = ws + cpu_gemm_wbuf(K), *y = j->y + j->r0 * N;
    isa->gemm(wdt, j->xp, M, K, m0, m1, j->w, n0, n1, j->bias, y, N, wbuf);
    if (!j->w2) return;
    /* linear_swiglu: up [m1-m0, n1-n0] into this worker's scratch, then combine */
    int64_t w = n1 - n0;
    size_t es = wdt == RLX_F32 ? 4 : 2;
    isa->gemm(wdt, j->xp, M, K, m0, m1, (const char *)j->w2 + (size_t)(n0 * K) * es, 0, w, NULL, up - m0 * w, w,
              wbuf);
    for (int64_t m = m0; m < m1; m++) isa->swiglu(y + m * N + n0, y + m * N + n0, up + (m - m0) * w, w);
}

static void mm_task(void *arg, int64_t t, int worker)
{
    mm_job *j = arg;
    const cpu_node *nd = j->r->nd;
    const cpu_isa *isa = j->r->be->isa;
    int64_t M = nd->M, N = nd->N, K = nd->K;
    int gemv = M <= GEMV_MAX_M, wdt = nd->dt[1];
    int64_t lo = t * j->p.chunk, ext = j->p.split_n ? N : j->xp ? j->rows : M;
    int64_t hi = lo + j->p.chunk < ext ? lo + j->p.chunk : ext;
    if (j->bounds) {
        lo = j->bounds[t];
        hi = j->bounds[t + 1];
    }
    if (j->xp) {
        float *ws = j->r->scratch + (size_t)worker * j->r->scratch_stride;
        if (j->p.split_n) own_task(j, 0, j->rows, lo, hi, ws);
        else own_task(j, lo, hi, 0, N, ws);
        return;
    }
    if (j->nn) {
        const float *w = j->w;
        if (j->p.split_n)
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)M, (int)(hi - lo), (int)K,
                        1.0f, j->x, (int)K, w + lo, (int)N, 0.0f, j->y + lo, (int)N);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)(hi - lo), (int)N, (int)K,
                        1.0f, j->x + lo * K, (int)K, w, (int)N, 0.0f, j->y + lo * N, (int)N);
        return;
    }
    /* scratch: [weight slice in f32 (16-bit weights, sgemm path)][up (linear_swiglu)] */
    float *ws = j->r->scratch + (size_t)worker * j->r->scratch_stride;
    float *wbuf = ws;
    if (wdt != RLX_F32 && !gemv) ws += (j->p.split_n ? j->p.chunk : N) * K;
    size_t es = wdt == RLX_F32 ? 4 : 2;
    if (!j->w2) {
        if (j->p.split_n) slice_nt(isa, j->x, M, K, j->w, wdt, lo, hi, j->bias, j->y, N, gemv, wbuf);
        else slice_nt(isa, j->x + lo * K, hi - lo, K, j->w, wdt, 0, N, j->bias, j->y + lo * N, N, gemv, wbuf);
        return;
    }
    /* linear_swiglu: gate into y, up into this worker's scratch, then combine */
    float *up = ws;
    if (j->p.split_n) {
        int64_t w = hi - lo;
        slice_nt(isa, j->x, M, K, j->w, wdt, lo, hi, NULL, j->y, N, gemv, wbuf);
        slice_nt(isa, j->x, M, K, (const char *)j->w2 + (size_t)(lo * K) * es, wdt, 0, w, NULL, up, w, gemv, wbuf);
        for (int64_t m = 0; m < M; m++)
            isa->swiglu(j->y + m * N + lo, j->y + m * N + lo, up + m * w, w);
    } else {
        int64_t rows = hi - lo;
        slice_nt(isa, j->x + lo * K, rows, K, j->w, wdt, 0, N, NULL, j->y + lo * N, N, gemv, wbuf);
        slice_nt(isa, j->x + lo * K, rows, K, j->w2, wdt, 0, N, NULL, up, N, gemv, wbuf);
        isa->swiglu(j->y + lo * N, j->y + lo * N, up, rows * N);
    }
}

typedef struct pack_job {
    const cpu_run *r;
    const float *x; /* the block's first row */
    int64_t rows;
    float *xp;
} pack_job;

static void pack_task(void *arg, int64_t t, int worker)
{
    (void)worker;
    pack_job *j = arg;
    const cpu_node *nd = j->r->nd;
    int64_t m0 = t * CPU_GEMM_MR;
    j->r->be->isa->gemm_pack(nd->dt[1], j->x, j->rows, nd->K, m0, m0 + CPU_GEMM_MR, j->xp);
}

static int run_mm(const cpu_run *r, int nn, int two)
{
    const cpu_node *nd = r->nd;
    if (nd->M == 0 || nd->N == 0) return 0;
    int own = own_gemm(r->be->isa, nd, nn);
    mm_job j = {r, plan_of(nd->M, nd->N, nd->K, own), CPU_F(r, 0), r->vp[nd->in[1]],
                two ? r->vp[nd->in[2]] : NULL, nd->bias_in >= 0 ? (const float *)r->vp[nd->bias_in] : NULL,
                CPU_O(r, 0), nn, NULL, 0, nd->M, NULL};
    int64_t bounds[GUIDED_MAX + 1];
    if (nn && nd->K == 0) {
        memset(j.y, 0, (size_t)(nd->M * nd->N) * sizeof(float));
        return 0;
    }
    float *sh = r->shared;
    if (nd->dt[0] != RLX_F32) { /* x in f32, once */
        cpu_to_f32(r, nd->dt[0], r->vp[nd->in[0]], sh, nd->M * nd->K);
        j.x = sh;
        sh += nd->M * nd->K;
    }
    if (nd->dt[3] != RLX_F32) {
        j.y = sh;
        sh += nd->M * nd->N;
    }
    if (own) { /* blocks of OWN_ROWS rows: x packed once per block (panels in parallel), then the GEMM */
        for (j.r0 = 0; j.r0 < nd->M; j.r0 += OWN_ROWS) {
            j.rows = nd->M - j.r0 < OWN_ROWS ? nd->M - j.r0 : OWN_ROWS;
            pack_job pj = {r, j.x + j.r0 * nd->K, j.rows, sh};
            cpu_parallel(r, (j.rows + CPU_GEMM_MR - 1) / CPU_GEMM_MR, pack_task, &pj);
            j.xp = sh;
            j.p = plan_of(j.rows, nd->N, nd->K, 1);
            cpu_parallel(r, j.p.n_tasks, mm_task, &j);
        }
    } else {
        if (nd->M <= GEMV_MAX_M && !two && !nn && j.p.split_n && r->be->n_workers > 1) {
            j.p.n_tasks = gemv_bounds(nd->N, nd->K, nd->dt[1] == RLX_F32 ? 4 : 2, r->be->n_workers, bounds,
                                      GUIDED_MAX);
            j.bounds = bounds;
        }
        cpu_parallel(r, j.p.n_tasks, mm_task, &j);
    }
    if (nd->dt[3] != RLX_F32) cpu_from_f32(r, nd->dt[3], j.y, r->vp[nd->out[0]], nd->M * nd->N);
    return 0;
}

int cpu_run_matmul(const cpu_run *r) { return run_mm(r, 0, 0); }
int cpu_run_matmul_nn(const cpu_run *r) { return run_mm(r, 1, 0); }
int cpu_run_linear_swiglu(const cpu_run *r) { return run_mm(r, 0, 1); }
