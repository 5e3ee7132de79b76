/* rlx-bench --devices (bench_tp.h). */
#include "bench_tp.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bench_reference.h"
#include "run_common.h"

static void report(const bench_tp_args *a, rlx_tp *t, rlx_tp_session *s, double p_tps, double d_tps)
{
    int n = rlx_tp_ranks(t);
    const char *be = rlx_model_backend_name(rlx_tp_model(t, 0));
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
    printf("prefill 1 x %lld tokens: %.1f tok/s\ndecode  1 x %lld tokens: %.1f tok/s\n", (long long)a->prefill, p_tps,
           (long long)a->decode, d_tps);
    printf("backend %s, %d rank%s over --devices %s, %lld reps\n", be ? be : "?", n, n == 1 ? "" : "s", a->devices,
           (long long)a->reps);
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
    int rc = ids && logits && pre && dec && V > 0 ? 0 : rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    uint64_t x = a->seed * 2654435761u + 1;
    for (int64_t i = 0; i < T && !rc; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ids[i] = (int32_t)(x % (uint64_t)V);
    }
    if (!rc) rc = rlx_tp_session_new(t, T + N + 1, &s, d);
    /* round -1 compiles both programs and makes the communicators */
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
    }
    if (!rc) {
        double pm = bench_median(pre, (int)a->reps), dm = bench_median(dec, (int)a->reps);
        report(a, t, s, pm > 0 ? (double)T * 1e3 / pm : 0, dm > 0 ? (double)N * 1e3 / dm : 0);
    }
    rlx_tp_session_free(s);
    rlx_tp_close(t);
    free(ids);
    free(logits);
    free(pre);
    free(dec);
    return rc ? 1 : 0;
}
