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
    uint64_t sum;
} read_job;

static void *read_worker(void *arg)
{
    read_job *j = arg;
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

double bench_ref_read_gbps(int threads, size_t bytes, int reps)
{
    if (threads < 1) threads = 1;
    if (reps < 1) reps = 1;
    size_t n = bytes / sizeof(uint64_t);
    uint64_t *buf = malloc(n * sizeof *buf);
    read_job *jobs = calloc((size_t)threads, sizeof *jobs);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    double *t = calloc((size_t)reps, sizeof *t);
    double gbps = 0;
    if (buf && jobs && tid && t) {
        for (size_t i = 0; i < n; i++) buf[i] = (uint64_t)i * 2654435761u;
        size_t per = n / (size_t)threads;
        for (int r = 0; r < reps; r++) {
            double t0 = now_s();
            for (int w = 0; w < threads; w++) {
                jobs[w].p = buf + per * (size_t)w;
                jobs[w].n = w == threads - 1 ? n - per * (size_t)w : per;
                pthread_create(&tid[w], NULL, read_worker, &jobs[w]);
            }
            for (int w = 0; w < threads; w++) pthread_join(tid[w], NULL);
            t[r] = now_s() - t0;
        }
        double m = median_of(t, reps);
        gbps = m > 0 ? (double)(n * sizeof(uint64_t)) / m / 1e9 : 0;
    }
    free(buf);
    free(jobs);
    free(tid);
    free(t);
    return gbps;
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
