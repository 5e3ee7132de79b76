/* rlx-bench --devices (bench_tp.h). */
#include "bench_tp.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_reference.h"
#include "run_common.h"

/* What the ranks' programs do, summed over the ranks, counted as rlx-bench counts one
 * model's: the FLOPs of the last-row prefill program (rlx_session_program), and the bytes
 * a decode token streams: the matmul weights in the compute dtype (a one-row step does
 * one multiply-add per weight, so its matmul FLOPs / 2) and the KV cache slice read over
 * the decode, T + N/2 keys on average. A rank's slice of split weights and heads counts
 * once, what the partition replicates (kv heads fewer than ranks, a vocabulary that does
 * not divide, fused projections) on every rank that streams it. */
typedef struct tp_figures {
    double prefill_flops; /* FLOPs of one prefill of T tokens */
    double decode_bytes;  /* bytes one decode token streams (0 when N = 0) */
} tp_figures;

/* The programs are the ranks' own, already compiled by the first (untimed) round; the session made
 * here for each rank holds no KV cache (states are made at a session's first step). */
static int rank_figures(rlx_tp *t, int64_t ctx, int64_t T, int64_t N, tp_figures *f, rlx_diag *d)
{
    memset(f, 0, sizeof *f);
    int rc = 0;
    for (int r = 0; r < rlx_tp_ranks(t) && !rc; r++) {
        rlx_model *m = rlx_tp_model(t, r);
        rlx_session *s = NULL;
        rlx_program_info pi;
        if ((rc = rlx_session_new(m, ctx, &s, d)) != 0) break;
        rc = rlx_session_program(s, RLX_PHASE_PREFILL, 0, T, 0, &pi, NULL, d);
        if (!rc) f->prefill_flops += (double)pi.flops;
        if (!rc && N > 0) rc = rlx_session_program(s, RLX_PHASE_DECODE, T, 1, 0, &pi, NULL, d);
        rlx_session_free(s);
        rlx_memory mem;
        if (!rc && N > 0 && (rc = rlx_model_memory(m, &mem, d)) == 0) {
            /* the decode program's dtype as rlx-bench's one-model path takes it */
            int half = strcmp(rlx_model_get_profile(m, RLX_PHASE_DECODE)->precision.compute, "f32") != 0;
            /* the cache slice holds ctx rows of the rank's kv heads, in the dtype it stores */
            f->decode_bytes += (half ? 2.0 : 4.0) * (double)pi.matmul_flops / 2.0 +
                               (double)mem.kv_cache_bytes / (double)ctx * ((double)T + (double)N / 2.0);
        }
    }
    return rc;
}

/* gm: the decode's tokens generated again, greedy on the device (0: not run; why in gen_msg) */
static void report(const bench_tp_args *a, rlx_tp *t, rlx_tp_session *s, double pm, double dm, double gm,
                   const char *gen_msg, const tp_figures *f)
{
    int n = rlx_tp_ranks(t);
    rlx_model *m0 = rlx_tp_model(t, 0);
    const char *be = rlx_model_backend_name(m0);
    double p_tps = pm > 0 ? (double)a->prefill * 1e3 / pm : 0, d_tps = dm > 0 ? (double)a->decode * 1e3 / dm : 0;
    double gflops = pm > 0 ? f->prefill_flops / (pm * 1e6) : 0, gbs = d_tps * f->decode_bytes / 1e9;
    double g_tps = gm > 0 ? (double)a->decode * 1e3 / gm : 0;
    int threads = rlx_model_threads(m0); /* each rank's: every rank opens with the same options */
    if (a->json) {
        json_t *o = json_object(), *dev = json_array(), *bytes = json_array();
        int ids[RLX_MAX_DEVICES], k = 0;
        if (rlx_devices_parse(a->devices, ids, RLX_MAX_DEVICES, &k, NULL)) k = 0;
        for (int r = 0; r < n; r++) {
            json_array_append_new(dev, json_integer(r < k ? ids[r] : r));
            json_array_append_new(bytes, json_integer(rlx_tp_session_device_bytes(s, r)));
        }
        json_object_set_new(o, "prefill_tokens_per_s", json_real(p_tps));
        json_object_set_new(o, "decode_tokens_per_s", json_real(d_tps));
        json_object_set_new(o, "prefill_gflops", json_real(gflops));
        json_object_set_new(o, "prefill_flops", json_real(f->prefill_flops));
        json_object_set_new(o, "prefill_flops_source", json_string("program"));
        json_object_set_new(o, "decode_gb_per_s", json_real(gbs));
        if (gm > 0) json_object_set_new(o, "generate_tokens_per_s", json_real(g_tps));
        else if (gen_msg[0]) json_object_set_new(o, "generate_unsupported", json_string(gen_msg));
        json_object_set_new(o, "threads", json_integer(threads));
        json_object_set_new(o, "backend", json_string(be ? be : "?"));
        json_object_set_new(o, "ranks", json_integer(n));
        json_object_set_new(o, "devices", dev);
        json_object_set_new(o, "device_bytes", bytes);
        json_object_set_new(o, "reps", json_integer(a->reps));
        char *txt = json_dumps(o, JSON_COMPACT);
        puts(txt ? txt : "{}");
        free(txt);
        json_decref(o);
        return;
    }
    printf("prefill 1 x %lld tokens: %.1f ms median, %.1f tok/s, %.2f GFLOP/s (%.3f GFLOP, counted from the "
           "ranks' programs)\n", (long long)a->prefill, pm, p_tps, gflops, f->prefill_flops / 1e9);
    printf("decode  1 x %lld tokens: %.1f ms median, %.1f tok/s, %.2f GB/s (all ranks)\n", (long long)a->decode, dm,
           d_tps, gbs);
    if (gm > 0)
        printf("generate %lld tokens (greedy, on the device) from %lld keys: %.1f ms median, %.1f tok/s\n",
               (long long)a->decode, (long long)a->prefill, gm, g_tps);
    else if (gen_msg[0])
        printf("generate: not run (%s)\n", gen_msg);
    printf("backend %s, %d rank%s over --devices %s, %d thread%s a rank, %lld reps\n", be ? be : "?", n,
           n == 1 ? "" : "s", a->devices, threads, threads == 1 ? "" : "s", (long long)a->reps);
    for (int r = 0; r < n; r++)
        printf("rank %d: %.2f GiB (weights, activations, KV cache)\n", r,
               (double)rlx_tp_session_device_bytes(s, r) / (1024.0 * 1024.0 * 1024.0));
}

int bench_tp(const bench_tp_args *a, const rlx_model_options *mo, rlx_diag *d)
{
    int dev[RLX_MAX_DEVICES], n = 0;
    if (rlx_devices_parse(a->devices, dev, RLX_MAX_DEVICES, &n, d)) return 1;
    rlx_tp *t = NULL;
    rlx_tp_session *s = NULL;
    if (rlx_tp_open(a->dir, mo, n, &t, d)) return 1;
    int64_t T = a->prefill, N = a->decode, V = rlx_model_get_config(rlx_tp_model(t, 0))->vocab_size;
    int32_t *ids = malloc((size_t)T * sizeof *ids);
    float *logits = malloc((size_t)(V > 0 ? V : 1) * sizeof *logits);
    double *pre = calloc((size_t)a->reps, sizeof *pre), *dec = calloc((size_t)a->reps, sizeof *dec);
    double *gen = calloc((size_t)a->reps, sizeof *gen);
    int32_t *gen_ids = malloc((size_t)(N > 0 ? N : 1) * sizeof *gen_ids);
    int rc = ids && logits && pre && dec && gen && gen_ids && V > 0 ? 0 : rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    int gen_on = N > 0;
    char gen_msg[sizeof ((rlx_diag *)0)->msg] = "";
    uint64_t x = a->seed * 2654435761u + 1;
    for (int64_t i = 0; i < T && !rc; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ids[i] = (int32_t)(x % (uint64_t)V);
    }
    if (!rc) rc = rlx_tp_session_new(t, T + N + 1, &s, d); /* rank_figures: the same context */
    tp_figures f;
    /* round -1 compiles the programs and makes the communicators */
    for (int64_t r = -1; r < a->reps && !rc; r++) {
        rlx_tp_session_reset(s);
        double t0 = run_now_ms();
        rc = rlx_tp_session_prefill(s, ids, T, NULL, logits, d);
        double t1 = run_now_ms();
        for (int64_t k = 0; k < N && !rc; k++) rc = rlx_tp_session_decode(s, ids[k % T], logits, d);
        double t2 = run_now_ms();
        if (r >= 0) {
            pre[r] = t1 - t0;
            dec[r] = t2 - t1;
        }
        /* the caches' bytes before generate's session states (ids, positions) are made */
        if (r == -1 && !rc) rc = rank_figures(t, T + N + 1, T, N, &f, d);
        if (gen_on && !rc) { /* from the decode's start again: its rows are rewritten */
            rlx_diag gd;
            rlx_diag_init(&gd);
            double g0 = run_now_ms();
            int gr = rlx_tp_session_rewind(s, T, &gd);
            if (!gr) gr = rlx_tp_session_generate(s, ids[0], N, gen_ids, NULL, &gd);
            if (r >= 0) gen[r] = run_now_ms() - g0;
            rc = bench_generate_outcome(gr, &gd, &gen_on, gen_msg, sizeof gen_msg, d);
        }
    }
    if (!rc)
        report(a, t, s, bench_median(pre, (int)a->reps), bench_median(dec, (int)a->reps),
               gen_on ? bench_median(gen, (int)a->reps) : 0, gen_msg, &f);
    rlx_tp_session_free(s);
    rlx_tp_close(t);
    free(ids);
    free(logits);
    free(pre);
    free(dec);
    free(gen);
    free(gen_ids);
    return rc ? 1 : 0;
}
