/* Tensor parallelism on the CPU backend: the partition pass splits llama32-tiny and
 * qwen3-tiny over 2 ranks (and llama32-tiny over 4, replicating its 2 kv heads), the
 * ranks run as threads with the CPU all-reduce, and the logits equal the unsplit model's
 * (rel L2 < 1e-5) and Hugging Face's (< 1e-4), in a forward and in a session's prefill,
 * decode and greedy generate steps; head counts that do not divide fail naming the count; --devices. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "parity_util.h"
#include "rlx/rlx.h"
#include "testutil.h"

static const char *const models[] = {"llama32-tiny", "qwen3-tiny"};

static rlx_model_options opts(void)
{
    rlx_model_options o;
    rlx_model_options_init(&o);
    o.backend = "cpu";
    o.threads = 1;
    return o;
}

/* logits of one forward of ids through the unsplit model (ranks 0) or the split one */
static float *forward(const char *dir, const char *tmp, int ranks, const int32_t *ids, size_t t, size_t *n)
{
    char in_path[1200], out_path[1200];
    snprintf(in_path, sizeof in_path, "%s/in.safetensors", tmp);
    snprintf(out_path, sizeof out_path, "%s/out%d.safetensors", tmp, ranks);
    pu_write_ids(in_path, ids, t);
    rlx_weights *in = pu_open_st(in_path);
    rlx_st_writer *w = rlx_st_writer_new();
    rlx_model_options o = opts();
    rlx_diag d;
    rlx_diag_init(&d);
    if (ranks) {
        rlx_tp *tp = NULL;
        ck_assert_msg(rlx_tp_open(dir, &o, ranks, &tp, &d) == 0, "%s", d.msg);
        ck_assert_int_eq(rlx_tp_ranks(tp), ranks);
        ck_assert_ptr_null(rlx_tp_model(tp, ranks));
        ck_assert_msg(rlx_tp_forward(tp, in, w, &d) == 0, "%d ranks: %s", ranks, d.msg);
        rlx_tp_close(tp);
    } else {
        rlx_model *m = NULL;
        ck_assert_msg(rlx_model_open(dir, &o, &m, &d) == 0, "%s", d.msg);
        ck_assert_msg(rlx_model_forward(m, in, w, &d) == 0, "%s", d.msg);
        rlx_model_close(m);
    }
    ck_assert_msg(rlx_st_writer_save(w, out_path, &d) == 0, "%s", d.msg);
    rlx_st_writer_free(w);
    rlx_weights_close(in);
    rlx_weights *out = pu_open_st(out_path);
    float *logits = pu_read_f32(out, "logits", n);
    rlx_weights_close(out);
    return logits;
}

static void check_split(const char *model, int ranks)
{
    char *tmp = tu_mkdtemp();
    const char *dir = tu_fixture(model);
    char mdir[1024];
    snprintf(mdir, sizeof mdir, "%s", dir);
    rlx_weights *ref = pu_open_ref(model);
    size_t t, nref, n0, n1;
    int32_t *ids = pu_read_case_ids(ref, 0, &t);
    float *want = pu_read_case_f32(ref, 0, "logits", &nref);
    float *whole = forward(mdir, tmp, 0, ids, t, &n0);
    float *split = forward(mdir, tmp, ranks, ids, t, &n1);
    ck_assert_uint_eq(n0, nref);
    ck_assert_uint_eq(n1, nref);
    double e = tu_rel_l2(split, whole, n0), h = tu_rel_l2(split, want, nref);
    printf("%s over %d ranks: rel L2 %.3g against the unsplit model, %.3g against transformers\n", model, ranks, e, h);
    ck_assert_msg(e < 1e-5, "%s over %d ranks: rel L2 %.3g against the unsplit model", model, ranks, e);
    ck_assert_msg(h < 1e-4, "%s over %d ranks: rel L2 %.3g against transformers", model, ranks, h);
    free(whole);
    free(split);
    free(want);
    free(ids);
    rlx_weights_close(ref);
    tu_rmrf(tmp);
    free(tmp);
}

START_TEST(test_forward_two_ranks) { check_split(models[_i], 2); }
END_TEST

/* 4 ranks: one q head each, the 2 kv heads replicated (each pair of ranks reads one) */
START_TEST(test_forward_four_ranks_gqa) { check_split("llama32-tiny", 4); }
END_TEST

START_TEST(test_heads_do_not_divide)
{
    char mdir[1024];
    snprintf(mdir, sizeof mdir, "%s", tu_fixture("llama32-tiny"));
    rlx_model_options o = opts();
    rlx_tp *tp = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_tp_open(mdir, &o, 3, &tp, &d), 0);
    rlx_tp_session *s = NULL;
    ck_assert_int_eq(rlx_tp_session_new(tp, 16, &s, &d), 0);
    static const int32_t ids[] = {1, 2, 3};
    float last[512];
    int rc = rlx_tp_session_prefill(s, ids, 3, NULL, last, &d);
    ck_assert_int_eq(rc, RLX_ERR_INVALID);
    ck_assert_msg(strstr(d.msg, "rank 0: partition over 3 ranks: ") == d.msg, "%s", d.msg);
    ck_assert_msg(strstr(d.msg, "(llama.decoder_layer, i=0): tensor model.layers.0.self_attn.q_proj.weight: "
                                "4 heads do not divide over 3 ranks"), "%s", d.msg);
    rlx_tp_session_free(s);
    rlx_tp_close(tp);
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_tp_open(mdir, &o, -1, &tp, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "tensor parallelism: -1 ranks (1 to 64; 0: one per device listed)");
}
END_TEST

/* a session over 2 ranks (each its half of the KV cache): prefill, then greedy decode
 * steps, against the unsplit session */
START_TEST(test_session_two_ranks)
{
    const char *model = models[_i];
    char mdir[1024];
    snprintf(mdir, sizeof mdir, "%s", tu_fixture(model));
    rlx_weights *ref = pu_open_ref(model);
    size_t t;
    int32_t *ids = pu_read_case_ids(ref, 1, &t); /* 6 tokens: a padded bucket, several rows */
    rlx_model_options o = opts();
    rlx_diag d;
    rlx_diag_init(&d);
    rlx_model *m = NULL;
    rlx_tp *tp = NULL;
    ck_assert_msg(rlx_model_open(mdir, &o, &m, &d) == 0, "%s", d.msg);
    ck_assert_msg(rlx_tp_open(mdir, &o, 2, &tp, &d) == 0, "%s", d.msg);
    int64_t V = rlx_model_get_config(m)->vocab_size;
    rlx_session *s = NULL;
    rlx_tp_session *ts = NULL;
    ck_assert_msg(rlx_session_new(m, 64, &s, &d) == 0, "%s", d.msg);
    ck_assert_msg(rlx_tp_session_new(tp, 64, &ts, &d) == 0, "%s", d.msg);
    float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
    float *all_a = malloc(t * (size_t)V * sizeof *all_a), *all_b = malloc(t * (size_t)V * sizeof *all_b);
    /* every row: each rank must compile the all-rows program, or their gathers differ */
    ck_assert_msg(rlx_session_prefill(s, ids, (int64_t)t, all_a, a, &d) == 0, "%s", d.msg);
    ck_assert_msg(rlx_tp_session_prefill(ts, ids, (int64_t)t, all_b, b, &d) == 0, "%s", d.msg);
    double e_all = tu_rel_l2(all_b, all_a, t * (size_t)V);
    ck_assert_msg(e_all < 1e-5, "%s: all %zu rows of prefill logits: rel L2 %.3g against the unsplit session", model, t, e_all);
    free(all_a);
    free(all_b);
    for (int step = 0; step < 5; step++) {
        double e = tu_rel_l2(b, a, (size_t)V);
        ck_assert_msg(e < 1e-5, "%s step %d: rel L2 %.3g against the unsplit session", model, step, e);
        int32_t next = 0;
        for (int64_t k = 1; k < V; k++)
            if (a[k] > a[next]) next = (int32_t)k;
        ck_assert_msg(rlx_session_decode(s, next, a, &d) == 0, "%s", d.msg);
        ck_assert_msg(rlx_tp_session_decode(ts, next, b, &d) == 0, "%s", d.msg);
    }
    /* greedy steps chained on each rank pick the unsplit session's ids */
    int32_t first = 0, ga[6], gb[6];
    for (int64_t k = 1; k < V; k++)
        if (a[k] > a[first]) first = (int32_t)k;
    ck_assert_msg(rlx_session_generate(s, first, 6, ga, a, &d) == 0, "%s", d.msg);
    ck_assert_msg(rlx_tp_session_generate(ts, first, 6, gb, b, &d) == 0, "%s", d.msg);
    for (int k = 0; k < 6; k++) ck_assert_msg(gb[k] == ga[k], "%s generated token %d: %d, unsplit %d", model, k, gb[k], ga[k]);
    double eg = tu_rel_l2(b, a, (size_t)V);
    ck_assert_msg(eg < 1e-5, "%s: generate's last logits: rel L2 %.3g against the unsplit session", model, eg);
    /* back to before the chain on every rank: the next decode is the first chained step's */
    ck_assert_msg(rlx_tp_session_rewind(ts, (int64_t)t + 5, &d) == 0, "%s", d.msg);
    ck_assert_msg(rlx_tp_session_decode(ts, first, b, &d) == 0, "%s", d.msg);
    int32_t again = 0;
    for (int64_t k = 1; k < V; k++)
        if (b[k] > b[again]) again = (int32_t)k;
    ck_assert_int_eq(again, ga[0]);
    ck_assert_int_eq(rlx_tp_session_rewind(ts, 1000, &d), RLX_ERR_INVALID);
    char want[96];
    snprintf(want, sizeof want, "rlx_session_rewind: position 1000 outside 0..%lld", (long long)t + 6);
    ck_assert_str_eq(d.msg, want);
    free(a);
    free(b);
    rlx_tp_session_free(ts);
    rlx_session_free(s);
    rlx_tp_close(tp);
    rlx_model_close(m);
    free(ids);
    rlx_weights_close(ref);
}
END_TEST

/* devices name each rank's device (the CPU backend ignores them), one per rank; a
 * session's bytes per rank; a reset session starts over */
START_TEST(test_devices_ranks)
{
    char mdir[1024];
    snprintf(mdir, sizeof mdir, "%s", tu_fixture("llama32-tiny"));
    rlx_model_options o = opts();
    rlx_tp *tp = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    o.devices = "0,1";
    ck_assert_int_eq(rlx_tp_open(mdir, &o, 3, &tp, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "--devices 0,1: 2 devices for 3 ranks");
    /* 0 ranks: one per device listed, else one */
    ck_assert_msg(rlx_tp_open(mdir, &o, 0, &tp, &d) == 0, "%s", d.msg);
    ck_assert_int_eq(rlx_tp_ranks(tp), 2);
    rlx_tp_close(tp);
    rlx_model_options one = opts();
    ck_assert_msg(rlx_tp_open(mdir, &one, 0, &tp, &d) == 0, "%s", d.msg);
    ck_assert_int_eq(rlx_tp_ranks(tp), 1);
    rlx_tp_close(tp);
    ck_assert_msg(rlx_tp_open(mdir, &o, 2, &tp, &d) == 0, "%s", d.msg);
    rlx_tp_session *s = NULL;
    ck_assert_msg(rlx_tp_session_new(tp, 16, &s, &d) == 0, "%s", d.msg);
    static const int32_t ids[] = {1, 2, 3};
    float a[512], b[512];
    ck_assert_msg(rlx_tp_session_prefill(s, ids, 3, NULL, a, &d) == 0, "%s", d.msg);
    ck_assert_msg(rlx_tp_session_decode(s, 4, a, &d) == 0, "%s", d.msg);
    rlx_tp_session_reset(s);
    ck_assert_msg(rlx_tp_session_prefill(s, ids, 3, NULL, b, &d) == 0, "%s", d.msg);
    ck_assert_msg(rlx_tp_session_decode(s, 4, b, &d) == 0, "%s", d.msg);
    ck_assert(memcmp(a, b, sizeof a) == 0);
    /* at least the KV cache slice: 3 layers x k,v x 1 kv head x 16 dims x 16 positions x 4 bytes */
    int64_t n0 = rlx_tp_session_device_bytes(s, 0), n1 = rlx_tp_session_device_bytes(s, 1);
    ck_assert_msg(n0 >= 3 * 2 * 16 * 16 * 4 && n0 == n1, "%lld %lld bytes", (long long)n0, (long long)n1);
    ck_assert_int_eq(rlx_tp_session_device_bytes(s, 2), -1);
    rlx_tp_session_free(s);
    rlx_tp_close(tp);
}
END_TEST

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* a rank whose peer never comes (rank 1 stepped alone) fails in RLX_TP_TIMEOUT_S seconds
 * with one line naming the group; the group is broken after, so later steps fail at once */
START_TEST(test_dead_peer)
{
    char mdir[1024];
    snprintf(mdir, sizeof mdir, "%s", tu_fixture("llama32-tiny"));
    rlx_model_options o = opts();
    rlx_tp *tp = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_tp_open(mdir, &o, 2, &tp, &d) == 0, "%s", d.msg);
    rlx_tp_session *s = NULL;
    rlx_session *alone = NULL;
    ck_assert_msg(rlx_tp_session_new(tp, 16, &s, &d) == 0, "%s", d.msg);
    ck_assert_msg(rlx_session_new(rlx_tp_model(tp, 1), 16, &alone, &d) == 0, "%s", d.msg);
    static const int32_t ids[] = {1, 2, 3};
    float a[512];
    ck_assert_msg(rlx_tp_session_prefill(s, ids, 3, NULL, a, &d) == 0, "%s", d.msg);
    setenv("RLX_TP_TIMEOUT_S", "1", 1);
    double t0 = now_ms();
    ck_assert_int_eq(rlx_session_decode(alone, 4, a, &d), RLX_ERR_DEVICE);
    double ms = now_ms() - t0;
    ck_assert_msg(ms > 900 && ms < 10000, "%.0f ms", ms);
    ck_assert_msg(strstr(d.msg, "rlx.all_reduce (node ") == d.msg && strstr(d.msg, "): rank 1 of 2 waited 1 s for the "
                  "other ranks of group ") && strstr(d.msg, " (one failed or hangs)") && !strchr(d.msg, '\n'),
                  "%s", d.msg);
    t0 = now_ms();
    ck_assert_int_eq(rlx_tp_session_decode(s, 4, a, &d), RLX_ERR_DEVICE);
    ck_assert_msg(now_ms() - t0 < 900, "%.0f ms", now_ms() - t0);
    ck_assert_msg(strstr(d.msg, "rank 0: rlx.all_reduce (node ") == d.msg &&
                  strstr(d.msg, " is broken: a rank did not arrive before"), "%s", d.msg);
    unsetenv("RLX_TP_TIMEOUT_S");
    rlx_session_free(alone);
    rlx_tp_session_free(s);
    rlx_tp_close(tp);
}
END_TEST

START_TEST(test_devices_parse)
{
    int dev[4], n = 0;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_devices_parse("1,0", dev, 4, &n, &d), 0);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(dev[0], 1);
    ck_assert_int_eq(dev[1], 0);
    static const struct { const char *in, *msg; } bad[] = {
        {"0,0", "--devices 0,0: device 0 twice"},
        {"0,x", "--devices 0,x: \"x\" is not a device ordinal 0..15"},
        {"0,", "--devices 0,: a trailing comma"},
        {"-1", "--devices -1: \"-1\" is not a device ordinal 0..15"},
        {"16", "--devices 16: \"16\" is not a device ordinal 0..15"},
        {"0,1,2,3,4", "--devices 0,1,2,3,4: more than 4 devices"},
        {"", "--devices: empty (expected GPU ordinals such as 0,1)"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        rlx_diag_init(&d);
        ck_assert_int_eq(rlx_devices_parse(bad[i].in, dev, 4, &n, &d), RLX_ERR_INVALID);
        ck_assert_str_eq(d.msg, bad[i].msg);
    }
}
END_TEST

/* --devices on rlx-run: validated (exit 2), and on a machine without a GPU backend
 * refused in one line naming the devices (exit 1) */
START_TEST(test_devices_cli)
{
    char *tmp = tu_mkdtemp(), in_path[1200], cmd[4096];
    snprintf(in_path, sizeof in_path, "%s/in.safetensors", tmp);
    static const int32_t ids[] = {1, 2, 3};
    pu_write_ids(in_path, ids, 3);
    const char *run = tu_tool("tools/rlx-run");
    snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s' --out '%s/o.st' --devices 0,0", run,
             tu_fixture("llama32-tiny"), in_path, tmp);
    tu_result r = tu_run(cmd, 120);
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strncmp(r.err, "rlx-run: --devices 0,0: device 0 twice\n", 39) == 0, "%s", r.err);
    tu_result_free(&r);
    snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s' --out '%s/o.st' --devices 0,1 --backend cpu",
             run, tu_fixture("llama32-tiny"), in_path, tmp);
    r = tu_run(cmd, 120);
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strncmp(r.err, "rlx-run: --devices 0,1: no GPU backend runs here (", 50) == 0, "%s", r.err);
    ck_assert_msg(strchr(r.err, '\n') == r.err + strlen(r.err) - 1, "one line: %s", r.err);
    tu_result_free(&r);
    /* generate over 2 ranks (the CPU backend's ranks are threads) gives the unsplit ids */
    char *ids1 = NULL;
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids 1,2,3 -n 6 --greedy --json --backend cpu%s", run,
                 tu_fixture("llama32-tiny"), k ? " --devices 0,1" : "");
        r = tu_run(cmd, 120);
        ck_assert_msg(r.status == 0, "%s", r.err);
        const char *at = strstr(r.out, "\"ids\":[");
        ck_assert_ptr_nonnull(at);
        ck_assert_msg((strstr(r.err, ", 2 ranks (tensor-parallel)") != NULL) == k, "%s", r.err);
        if (!k) ids1 = strndup(at, strcspn(at, "]"));
        else ck_assert_msg(strncmp(at, ids1, strlen(ids1)) == 0, "%s against %s", at, ids1);
        tu_result_free(&r);
    }
    free(ids1);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tp");
    TCase *c = tcase_create("cpu");
    tcase_set_timeout(c, 600);
    tcase_add_loop_test(c, test_forward_two_ranks, 0, 2);
    tcase_add_test(c, test_forward_four_ranks_gqa);
    tcase_add_test(c, test_heads_do_not_divide);
    tcase_add_loop_test(c, test_session_two_ranks, 0, 2);
    tcase_add_test(c, test_devices_ranks);
    tcase_add_test(c, test_dead_peer);
    tcase_add_test(c, test_devices_parse);
    tcase_add_test(c, test_devices_cli);
    suite_add_tcase(s, c);
    return tu_run_suite(s);
}
