/* rlx-bench --peer-llamacpp: llama.cpp's llama-bench as a same-run peer. It runs once
 * (-r 1) after each of rlx's timed reps, so both engines are measured in the same minutes
 * on a host whose memory bandwidth drifts; the ratios are medians of per-rep ratios. */
#ifndef RLX_BENCH_PEER_H
#define RLX_BENCH_PEER_H
#include <jansson.h>
#include <stdio.h>
#include "rlx/rlx.h"

typedef struct bench_peer bench_peer;
/* llama-bench bin on gguf with -p prefill -n decode -t threads; NULL: out of memory */
bench_peer *bench_peer_new(const char *bin, const char *gguf, long long prefill, long long decode, int threads,
                           int reps);
/* after rlx's rep r (its prefill and decode tok/s): one llama-bench -r 1, both kept.
 * 0, or an error code with d naming the binary. */
int bench_peer_rep(bench_peer *p, int r, double rlx_pp, double rlx_tg, rlx_diag *d);
/* adds "peer" {medians, gguf, peer_schedule}, "prefill_vs_peer", "decode_vs_peer" (medians of
 * per-rep ratios) and "prefill_vs_peer_reps", "decode_vs_peer_reps" (rep order) to o */
void bench_peer_json(const bench_peer *p, json_t *o);
void bench_peer_print(const bench_peer *p, FILE *f); /* the same in one line */
void bench_peer_free(bench_peer *p);
#endif
