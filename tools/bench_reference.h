/* Machine ceilings measured in the same run as a benchmark, so rlx-bench reports its
 * figures as ratios against them rather than as bare numbers. */
#ifndef RLX_BENCH_REFERENCE_H
#define RLX_BENCH_REFERENCE_H
#include <stddef.h>
#include <stdint.h>
#include "rlx/rlx.h"

/* Read bandwidth: a read-only sum over a buffer split across threads, median of reps. The
 * loops alternate over the same buffer: the widest vector loads in 1, 2 or 4 sequential
 * streams a thread, 4 streams of non-temporal loads, and 8-byte loads in 4 streams; the
 * reference is the best vector loop's median. The buffer is allocated and first-touched
 * once, so runs between a benchmark's reps time reads only. */
typedef struct bench_read {
    double gbps;        /* the best vector loop's (no vector unit: the scalar loop's): the floor's reference */
    double scalar_gbps; /* with 8-byte scalar loads (the reference before 2026-11-23) */
    const char *loop;   /* which loop gbps is, e.g. "avx512, 2 streams", or "scalar" */
} bench_read;
typedef struct bench_reader bench_reader;
bench_reader *bench_reader_new(int threads, size_t bytes); /* NULL: out of memory */
void bench_reader_run(bench_reader *r, int reps, bench_read *out);
void bench_reader_free(bench_reader *r);
/* the median of v[0..n), n > 0 (sorts v): every rlx-bench figure over reps */
double bench_median(double *v, int n);
/* a generate rep's outcome gr (its diag gd): RLX_ERR_UNSUPPORTED turns the figure off
 * (*on = 0, why kept in msg), another error becomes the run's (*d = *gd); returns the run's rc */
int bench_generate_outcome(int gr, const rlx_diag *gd, int *on, char *msg, size_t len, rlx_diag *d);
/* OpenBLAS sgemm C[M,N] = A[M,K]·B[N,K]ᵀ on threads threads (median of reps), GFLOP/s. */
double bench_ref_sgemm_gflops(int threads, int64_t m, int64_t k, int64_t n, int reps);
#endif
