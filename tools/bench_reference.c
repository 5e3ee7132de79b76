#define _GNU_SOURCE
#include "bench_reference.h"
#include <cblas.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int bench_generate_outcome(int gr, const rlx_diag *gd, int *on, char *msg, size_t len, rlx_diag *d)
{
    if (gr == RLX_ERR_UNSUPPORTED) {
        *on = 0;
        snprintf(msg, len, "%s", gd->msg);
        return 0;
    }
    if (gr && d)
        *d = *gd;
    return gr;
}

double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct {
    const uint64_t *p;
    size_t n;
    int wide;    /* 2: avx512, 1: avx2, 0: scalar (8-byte loads, 4 streams) */
    int streams; /* vector loops: 1, 2 or 4 streams */
    int nt;      /* vector loops: 4 streams of non-temporal loads */
    uint64_t sum;
} read_job;

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* S streams of vector loads (nt: non-temporal loads), q vectors a stream: which of these
 * reads fastest differs by machine and by minute (one prefetcher stream per load stream,
 * the other engines' traffic), so the reference is the best of them. A plain 8-byte loop
 * reads ~15 % slower on Zen 4 (61-68 against 73-80 GB/s, 2 threads), which would make the
 * floor look closer than it is. */
__attribute__((target("avx512f"), always_inline)) static inline uint64_t
sumk_avx512(const __m512i *p, size_t q, const int S, const int nt)
{
    __m512i s[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
    for (size_t i = 0; i < q; i++)
        for (int k = 0; k < S; k++)
            s[k] = _mm512_add_epi64(s[k], nt ? _mm512_stream_load_si512((void *)(p + k * q + i))
                                             : _mm512_load_si512(p + k * q + i));
    /* summed as unsigned: _mm512_reduce_add_epi64 adds signed long longs, and these sums wrap */
    uint64_t v[8], t = 0;
    _mm512_storeu_si512((__m512i *)v, _mm512_add_epi64(_mm512_add_epi64(s[0], s[1]), _mm512_add_epi64(s[2], s[3])));
    for (int k = 0; k < 8; k++)
        t += v[k];
    return t;
}

__attribute__((target("avx512f"))) static uint64_t sum_avx512(const uint64_t *a, size_t q, int S, int nt)
{
    const __m512i *p = (const __m512i *)a;
    if (nt)
        return sumk_avx512(p, q, 4, 1);
    return S == 1 ? sumk_avx512(p, q, 1, 0) : S == 2 ? sumk_avx512(p, q, 2, 0) : sumk_avx512(p, q, 4, 0);
}

__attribute__((target("avx2"), always_inline)) static inline uint64_t
sumk_avx2(const __m256i *p, size_t q, const int S, const int nt)
{
    __m256i s[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    for (size_t i = 0; i < q; i++)
        for (int k = 0; k < S; k++)
            s[k] = _mm256_add_epi64(s[k], nt ? _mm256_stream_load_si256((void *)(p + k * q + i))
                                             : _mm256_load_si256(p + k * q + i));
    uint64_t v[4];
    _mm256_storeu_si256((__m256i *)v, _mm256_add_epi64(_mm256_add_epi64(s[0], s[1]), _mm256_add_epi64(s[2], s[3])));
    return v[0] + v[1] + v[2] + v[3];
}

__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *a, size_t q, int S, int nt)
{
    const __m256i *p = (const __m256i *)a;
    if (nt)
        return sumk_avx2(p, q, 4, 1);
    return S == 1 ? sumk_avx2(p, q, 1, 0) : S == 2 ? sumk_avx2(p, q, 2, 0) : sumk_avx2(p, q, 4, 0);
}

static int widest(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
}
#else
static int widest(void)
{
    return 0;
}
#endif

static void *read_worker(void *arg)
{
    read_job *j = arg;
#if defined(__x86_64__) && defined(__GNUC__)
    if (j->wide) {
        const int S = j->nt ? 4 : j->streams, vw = j->wide == 2 ? 8 : 4; /* words a vector */
        size_t q = j->n / ((size_t)S * vw); /* whole vectors a stream; the tail below */
        uint64_t s = j->wide == 2 ? sum_avx512(j->p, q, S, j->nt) : sum_avx2(j->p, q, S, j->nt);
        for (size_t i = (size_t)S * vw * q; i < j->n; i++) s += j->p[i];
        j->sum = s;
        return NULL;
    }
#endif
    /* four streams at once (as a GEMV reads several weight rows) with independent integer
     * adds: the loop is bound by memory, not by one prefetch stream or an FP add chain */
    size_t q = j->n / 4;
    const uint64_t *a = j->p, *b = a + q, *c = b + q, *e = c + q;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t i = 0; i < q; i++) {
        s0 += a[i];
        s1 += b[i];
        s2 += c[i];
        s3 += e[i];
    }
    for (size_t i = 4 * q; i < j->n; i++) s0 += j->p[i];
    j->sum = s0 + s1 + s2 + s3;
    return NULL;
}

struct bench_reader {
    int threads, wide;
    size_t n;
    uint64_t *buf;
    read_job *jobs;
    pthread_t *tid;
};

bench_reader *bench_reader_new(int threads, size_t bytes)
{
    bench_reader *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    r->threads = threads < 1 ? 1 : threads;
    r->wide = widest();
    r->n = bytes / sizeof(uint64_t);
    /* whole lines: a vector load never straddles two */
    if (posix_memalign((void **)&r->buf, 64, r->n * sizeof *r->buf) != 0) r->buf = NULL;
    r->jobs = calloc((size_t)r->threads, sizeof *r->jobs);
    r->tid = calloc((size_t)r->threads, sizeof *r->tid);
    if (!r->buf || !r->jobs || !r->tid) {
        bench_reader_free(r);
        return NULL;
    }
    /* first touch once here, so a later run times reads, not page faults */
    for (size_t i = 0; i < r->n; i++) r->buf[i] = (uint64_t)i * 2654435761u;
    return r;
}

/* the loops a run alternates: the vector ones (the reference is the best) and the scalar */
static const struct { int streams, nt; const char *name[2]; /* avx2, avx512 */ } read_loops[] = {
    {4, 0, {"avx2, 4 streams", "avx512, 4 streams"}},
    {2, 0, {"avx2, 2 streams", "avx512, 2 streams"}},
    {1, 0, {"avx2, 1 stream", "avx512, 1 stream"}},
    {4, 1, {"avx2, 4 non-temporal streams", "avx512, 4 non-temporal streams"}}};
enum { N_READ_LOOPS = sizeof read_loops / sizeof read_loops[0] };

void bench_reader_run(bench_reader *rd, int reps, bench_read *out)
{
    if (reps < 1) reps = 1;
    out->gbps = out->scalar_gbps = 0;
    out->loop = "scalar";
    const int nv = rd->wide ? N_READ_LOOPS : 0, nl = nv + 1; /* the last: scalar */
    double *t = calloc((size_t)(nl * reps), sizeof *t);
    if (!t) return;
    int threads = rd->threads;
    size_t n = rd->n, per = n / (size_t)threads / 8 * 8; /* each thread's part starts on a line */
    for (int r = 0; r < nl * reps; r++) { /* the loops alternate, so each sees the same minutes */
        const int l = r % nl;
        double t0 = now_s();
        for (int w = 0; w < threads; w++) {
            rd->jobs[w].p = rd->buf + per * (size_t)w;
            rd->jobs[w].n = w == threads - 1 ? n - per * (size_t)w : per;
            rd->jobs[w].wide = l < nv ? rd->wide : 0;
            rd->jobs[w].streams = l < nv ? read_loops[l].streams : 4;
            rd->jobs[w].nt = l < nv ? read_loops[l].nt : 0;
            pthread_create(&rd->tid[w], NULL, read_worker, &rd->jobs[w]);
        }
        for (int w = 0; w < threads; w++) pthread_join(rd->tid[w], NULL);
        t[l * reps + r / nl] = now_s() - t0;
    }
    const double bytes = (double)(n * sizeof(uint64_t));
    for (int l = 0; l < nl; l++) {
        double m = bench_median(t + l * reps, reps), g = m > 0 ? bytes / m / 1e9 : 0;
        if (l == nv) {
            out->scalar_gbps = g;
        } else if (g > out->gbps) {
            out->gbps = g;
            out->loop = read_loops[l].name[rd->wide - 1];
        }
    }
    if (!nv)
        out->gbps = out->scalar_gbps;
    free(t);
}

void bench_reader_free(bench_reader *r)
{
    if (!r) return;
    free(r->buf);
    free(r->jobs);
    free(r->tid);
    free(r);
}

double bench_ref_sgemm_gflops(int threads, int64_t m, int64_t k, int64_t n, int reps)
{
    if (reps < 1) reps = 1;
    float *a = malloc((size_t)(m * k) * sizeof *a), *b = malloc((size_t)(n * k) * sizeof *b);
    float *c = malloc((size_t)(m * n) * sizeof *c);
    double *t = calloc((size_t)reps + 1, sizeof *t);
    double gf = 0;
    if (a && b && c && t) {
        for (int64_t i = 0; i < m * k; i++) a[i] = (float)(i % 7) * 0.1f;
        for (int64_t i = 0; i < n * k; i++) b[i] = (float)(i % 5) * 0.1f;
        openblas_set_num_threads(threads < 1 ? 1 : threads);
        for (int r = -1; r < reps; r++) { /* r = -1 warms OpenBLAS's buffers up */
            double t0 = now_s();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)n, (int)k, 1.0f, a, (int)k, b,
                        (int)k, 0.0f, c, (int)n);
            if (r >= 0) t[r] = now_s() - t0;
        }
        /* the CPU backend parallelises OpenBLAS calls itself: give it back one thread */
        openblas_set_num_threads(1);
        double med = bench_median(t, reps);
        gf = med > 0 ? 2.0 * (double)m * (double)k * (double)n / med / 1e9 : 0;
    }
    free(a);
    free(b);
    free(c);
    free(t);
    return gf;
}
