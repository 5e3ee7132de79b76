#define _GNU_SOURCE
#include "bench_reference.h"
#include <cblas.h>
#include <pthread.h>
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

static double median_of(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct {
    const uint64_t *p;
    size_t n;
    int wide; /* 2: avx512, 1: avx2, 0: scalar */
    uint64_t sum;
} read_job;

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* four streams of 64-byte loads: a plain 8-byte loop reads ~15 % slower on Zen 4 (61-68
 * against 73-80 GB/s, 2 threads), which would make the floor look closer than it is */
__attribute__((target("avx512f"))) static uint64_t sum4_avx512(const uint64_t *a, size_t q)
{
    const __m512i *p0 = (const __m512i *)a, *p1 = p0 + q / 8, *p2 = p1 + q / 8, *p3 = p2 + q / 8;
    __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < q / 8; i++) {
        s0 = _mm512_add_epi64(s0, _mm512_loadu_si512(p0 + i));
        s1 = _mm512_add_epi64(s1, _mm512_loadu_si512(p1 + i));
        s2 = _mm512_add_epi64(s2, _mm512_loadu_si512(p2 + i));
        s3 = _mm512_add_epi64(s3, _mm512_loadu_si512(p3 + i));
    }
    /* summed as unsigned: _mm512_reduce_add_epi64 adds signed long longs, and these sums wrap */
    uint64_t v[8], t = 0;
    _mm512_storeu_si512((__m512i *)v, _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
    for (int k = 0; k < 8; k++)
        t += v[k];
    return t;
}

__attribute__((target("avx2"))) static uint64_t sum4_avx2(const uint64_t *a, size_t q)
{
    const __m256i *p0 = (const __m256i *)a, *p1 = p0 + q / 4, *p2 = p1 + q / 4, *p3 = p2 + q / 4;
    __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
    for (size_t i = 0; i < q / 4; i++) {
        s0 = _mm256_add_epi64(s0, _mm256_loadu_si256(p0 + i));
        s1 = _mm256_add_epi64(s1, _mm256_loadu_si256(p1 + i));
        s2 = _mm256_add_epi64(s2, _mm256_loadu_si256(p2 + i));
        s3 = _mm256_add_epi64(s3, _mm256_loadu_si256(p3 + i));
    }
    __m256i s = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
    uint64_t v[4];
    _mm256_storeu_si256((__m256i *)v, s);
    return v[0] + v[1] + v[2] + v[3];
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
    /* four streams at once (as a GEMV reads several weight rows) with independent integer
     * adds: the loop is bound by memory, not by one prefetch stream or an FP add chain */
    size_t q = j->n / 4;
#if defined(__x86_64__) && defined(__GNUC__)
    if (j->wide) {
        q = j->n / 32 * 8; /* whole vectors per stream; the tail below */
        uint64_t s = j->wide == 2 ? sum4_avx512(j->p, q) : sum4_avx2(j->p, q);
        for (size_t i = 4 * q; i < j->n; i++) s += j->p[i];
        j->sum = s;
        return NULL;
    }
#endif
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

void bench_reader_run(bench_reader *rd, int reps, bench_read *out)
{
    if (reps < 1) reps = 1;
    out->gbps = out->scalar_gbps = 0;
    out->loop = rd->wide == 2 ? "avx512" : rd->wide == 1 ? "avx2" : "scalar";
    double *t = calloc((size_t)(2 * reps), sizeof *t);
    if (!t) return;
    int threads = rd->threads;
    size_t n = rd->n, per = n / (size_t)threads / 8 * 8; /* each thread's part starts on a line */
    for (int r = 0; r < 2 * reps; r++) { /* the wide and the scalar loop alternate */
        double t0 = now_s();
        for (int w = 0; w < threads; w++) {
            rd->jobs[w].p = rd->buf + per * (size_t)w;
            rd->jobs[w].n = w == threads - 1 ? n - per * (size_t)w : per;
            rd->jobs[w].wide = r % 2 ? 0 : rd->wide;
            pthread_create(&rd->tid[w], NULL, read_worker, &rd->jobs[w]);
        }
        for (int w = 0; w < threads; w++) pthread_join(rd->tid[w], NULL);
        t[r % 2 * reps + r / 2] = now_s() - t0;
    }
    double mw = median_of(t, reps), ms = median_of(t + reps, reps);
    out->gbps = mw > 0 ? (double)(n * sizeof(uint64_t)) / mw / 1e9 : 0;
    out->scalar_gbps = ms > 0 ? (double)(n * sizeof(uint64_t)) / ms / 1e9 : 0;
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
        double med = median_of(t, reps);
        gf = med > 0 ? 2.0 * (double)m * (double)k * (double)n / med / 1e9 : 0;
    }
    free(a);
    free(b);
    free(c);
    free(t);
    return gf;
}
