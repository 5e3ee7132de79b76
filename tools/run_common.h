/* Shared pieces of the rlx-run subcommands: strict option parsing, error reporting with
 * the exit-status contract (1: one line naming the thing at fault; 2: bad usage), the
 * demo model's location, timing. */
#ifndef RLX_RUN_COMMON_H
#define RLX_RUN_COMMON_H
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include "rlx/rlx.h"

/* program name in messages ("rlx-run"; rlx-bench sets its own) */
extern const char *run_prog_name;

/* Option value: "--name VALUE" or "--name=VALUE" at argv[*i]; advances *i past it.
 * Returns 1 when argv[*i] is this option (value set), 0 when it is not, -1 when the
 * value is missing (usage message printed). */
int run_opt(int argc, char **argv, int *i, const char *name, const char **value);
/* Strict numbers: whole string, in range. 0 ok, -1 bad (usage message printed). */
int run_int(const char *opt, const char *s, long long min, long long max, long long *out);
int run_double(const char *opt, const char *s, double min, double max, double *out);
/* "1,2,3" -> ids (malloc); 0 ok, -1 bad (usage message printed) */
int run_ids(const char *opt, const char *s, int32_t **ids, size_t *n);

/* "rlx-run: <message>" + the usage line on stderr; returns 2 */
int run_usage(const char *usage, const char *fmt, ...) RLX_PRINTF(2, 3);
/* "rlx-run: <diag message>" on stderr; returns 1 */
int run_fail(const rlx_diag *d);
/* "rlx-run: <message>" on stderr; returns 1 */
int run_error(const char *fmt, ...) RLX_PRINTF(1, 2);

/* Flushes stdout; 0 when every write so far succeeded, else "rlx-run: standard output:
 * write failed: ..." on stderr and 1 (results that never arrived are an error). */
int run_stdout_check(void);
/* fflush(stdout), keeping the errno of the first failure for run_stdout_check. */
void run_flush_stdout(void);

/* the first NaN or Inf of a logits row, its token id; -1 when all are finite */
int64_t run_nonfinite_at(const float *logits, int64_t vocab);
/* A logits row with NaN or Inf (broken weights, overflow): "step S (prefill|decode):
 * logits contain NaN at token id K; generation stopped" and 1; else 0. */
int run_check_logits(const float *logits, int64_t vocab, int64_t step);

/* The bundled demo model: $RLX_MODEL_DIR, else the installed copy, else the source tree's */
const char *run_demo_model_dir(void);
/* Common model options (--backend, --profile, --threads, --policy, --flow, --devices). */
typedef struct run_model_flags {
    const char *backend, *profile, *policy, *flow, *precision, *mixed;
    const char *devices; /* --devices 0,1 (checked by rlx_devices_parse) */
    long long threads;
} run_model_flags;
/* Returns 1 when argv[*i] was one of them, 0 if not, -1 on a bad value (printed). */
int run_model_flag(int argc, char **argv, int *i, run_model_flags *f, const char *usage);
void run_model_options(const run_model_flags *f, rlx_model_options *o);

/* "memory on DEVICE: weights X, KV cache Y, arena Z, buffers W; F free of T" */
void run_print_memory(FILE *out, const rlx_memory *m);

double run_now_ms(void);
int run_file_exists(const char *path);
#endif
