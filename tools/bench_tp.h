/* rlx-bench --devices: prefill and decode throughput of a tensor-parallel run, its prefill
 * GFLOP/s and decode GB/s summed over the ranks (counted as the one-model run counts them),
 * and the bytes each device holds (docs/multi-gpu.md). */
#ifndef RLX_BENCH_TP_H
#define RLX_BENCH_TP_H
#include <stdint.h>
#include "rlx/rlx.h"

typedef struct bench_tp_args {
    const char *dir, *devices; /* model folder; "0,1" (one rank per device) */
    int64_t prefill, decode, reps;
    uint64_t seed;
    int json;
} bench_tp_args;

/* one warm-up round, then reps rounds of prefill + decode (medians); prints the result
 * (text or one JSON line). 0, or 1 with d set. */
int bench_tp(const bench_tp_args *a, const rlx_model_options *mo, rlx_diag *d);
#endif
