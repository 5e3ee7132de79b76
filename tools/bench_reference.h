/* Machine ceilings measured in the same run as a benchmark, so rlx-bench reports its
 * figures as ratios against them rather than as bare numbers. */
#ifndef RLX_BENCH_REFERENCE_H
#define RLX_BENCH_REFERENCE_H
#include <stddef.h>
#include <stdint.h>

/* Read-only sum over bytes of memory split across threads (median of reps), GB/s. */
double bench_ref_read_gbps(int threads, size_t bytes, int reps);
/* OpenBLAS sgemm C[M,N] = A[M,K]·B[N,K]ᵀ on threads threads (median of reps), GFLOP/s. */
double bench_ref_sgemm_gflops(int threads, int64_t m, int64_t k, int64_t n, int reps);
#endif
