/* Machine ceilings measured in the same run as a benchmark, so rlx-bench reports its
 * figures as ratios against them rather than as bare numbers. */
#ifndef RLX_BENCH_REFERENCE_H
#define RLX_BENCH_REFERENCE_H
#include <stddef.h>
#include <stdint.h>

/* Read bandwidth: a read-only sum over a buffer split across threads, four sequential
 * streams a thread, median of reps (the two loops alternate, same buffer). The buffer is
 * allocated and first-touched once, so runs between a benchmark's reps time reads only. */
typedef struct bench_read {
    double gbps;        /* with the widest vector loads the CPU has: the floor's reference */
    double scalar_gbps; /* with 8-byte scalar loads (the reference before 2026-11-23) */
    const char *loop;   /* "avx512", "avx2" or "scalar": what gbps used */
} bench_read;
typedef struct bench_reader bench_reader;
bench_reader *bench_reader_new(int threads, size_t bytes); /* NULL: out of memory */
void bench_reader_run(bench_reader *r, int reps, bench_read *out);
void bench_reader_free(bench_reader *r);
/* OpenBLAS sgemm C[M,N] = A[M,K]·B[N,K]ᵀ on threads threads (median of reps), GFLOP/s. */
double bench_ref_sgemm_gflops(int threads, int64_t m, int64_t k, int64_t n, int reps);
#endif
