/* Tensor parallelism on two GPUs (tools/gpu-check.sh, RLX_TEST_BACKEND=cuda or rocm):
 * every causal-LM fixture with an arch plugin split over --devices 0,1 (NCCL / RCCL
 * collectives, graphs capturing the decode step) against the same model on GPU 0 alone.
 * f32: the prefill's logits of every row, 5 greedy decode steps and 6 greedy steps chained
 * on the device (rlx_tp_session_generate: the same ids) within 1e-5 relative L2. bf16: 10 decode steps teacher-forced along GPU 0's greedy ids pick the same ids.
 * The profile's backend.cuda.devices picks the ranks' devices; a rank whose peer never
 * comes fails in bounded time (RLX_TP_TIMEOUT_S) instead of hanging in NCCL.
 * Exits 77 (skipped) where the backend finds fewer than 2 devices. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>
#include "parity_util.h"
#include "rlx/rlx.h"
#include "testutil.h"

static const char *const models[] = {"llama32-tiny", "llama-untied-bf16", "qwen3-tiny", "qwen3-untied-bf16",
                                      "gemma2-tiny", "gemma3-tiny", "phi3-tiny"};
/* the longest prompt (19 tokens): the vocab-parallel head gathers several rows */
#define CASE 2
#define N_MODELS (sizeof models / sizeof models[0])
#define N_GEN 10

static const char *backend(void)
{
    const char *be = getenv("RLX_TEST_BACKEND");
    return be && *be ? be : "cuda";
}

static int argmax(const float *x, int64_t n)
{
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return (int)b;
}

/* one GPU (rlx_model_open) and two (rlx_tp_open over 0,1) side by side */
typedef struct pair {
    rlx_model *m;
    rlx_tp *tp;
    rlx_session *s;
    rlx_tp_session *ts;
    int64_t V;
} pair;

static void pair_open(pair *p, const char *model, const char *prec, int64_t ctx)
{
    rlx_model_options o;
    rlx_model_options_init(&o);
    o.backend = backend();
    o.precision = prec;
    rlx_diag d;
    rlx_diag_init(&d);
    memset(p, 0, sizeof *p);
    ck_assert_msg(rlx_model_open(tu_fixture(model), &o, &p->m, &d) == 0, "%s: %s", model, d.msg);
    o.devices = "0,1";
    ck_assert_msg(rlx_tp_open(tu_fixture(model), &o, 2, &p->tp, &d) == 0, "%s: %s", model, d.msg);
    ck_assert_str_eq(rlx_model_backend_name(rlx_tp_model(p->tp, 1)), backend());
    p->V = rlx_model_get_config(p->m)->vocab_size;
    ck_assert_msg(rlx_session_new(p->m, ctx, &p->s, &d) == 0, "%s: %s", model, d.msg);
    ck_assert_msg(rlx_tp_session_new(p->tp, ctx, &p->ts, &d) == 0, "%s: %s", model, d.msg);
}

static void pair_close(pair *p)
{
    rlx_tp_session_free(p->ts);
    rlx_session_free(p->s);
    rlx_tp_close(p->tp);
    rlx_model_close(p->m);
}

START_TEST(test_f32)
{
    const char *model = models[_i];
    rlx_weights *ref = pu_open_ref(model);
    size_t t;
    int32_t *ids = pu_read_case_ids(ref, CASE, &t);
    pair p;
    pair_open(&p, model, "f32", 64);
    rlx_diag d;
    rlx_diag_init(&d);
    size_t n = t * (size_t)p.V;
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    float *la = malloc((size_t)p.V * sizeof *la), *lb = malloc((size_t)p.V * sizeof *lb);
    ck_assert_msg(rlx_session_prefill(p.s, ids, (int64_t)t, a, la, &d) == 0, "%s: %s", model, d.msg);
    ck_assert_msg(rlx_tp_session_prefill(p.ts, ids, (int64_t)t, b, lb, &d) == 0, "%s: %s", model, d.msg);
    double e = tu_rel_l2(b, a, n), worst = e;
    printf("%s f32: prefill (%zu rows) rel L2 %.3g", model, t, e);
    ck_assert_msg(e < 1e-5, "%s f32 prefill: rel L2 %.3g between 2 GPUs and 1", model, e);
    for (int step = 0; step < 5; step++) {
        int32_t next = argmax(la, p.V);
        ck_assert_msg(rlx_session_decode(p.s, next, la, &d) == 0, "%s: %s", model, d.msg);
        ck_assert_msg(rlx_tp_session_decode(p.ts, next, lb, &d) == 0, "%s: %s", model, d.msg);
        e = tu_rel_l2(lb, la, (size_t)p.V);
        worst = e > worst ? e : worst;
        ck_assert_msg(e < 1e-5, "%s f32 decode step %d: rel L2 %.3g between 2 GPUs and 1", model, step, e);
    }
    /* greedy steps chained on the device, on each GPU: GPU 0's ids and last logits */
    int32_t ga[6], gb[6], first = argmax(la, p.V);
    ck_assert_msg(rlx_session_generate(p.s, first, 6, ga, la, &d) == 0, "%s: %s", model, d.msg);
    ck_assert_msg(rlx_tp_session_generate(p.ts, first, 6, gb, lb, &d) == 0, "%s: %s", model, d.msg);
    for (int k = 0; k < 6; k++)
        ck_assert_msg(gb[k] == ga[k], "%s f32 generated token %d: 2 GPUs %d, GPU 0 %d", model, k, gb[k], ga[k]);
    e = tu_rel_l2(lb, la, (size_t)p.V);
    worst = e > worst ? e : worst;
    ck_assert_msg(e < 1e-5, "%s f32 generate: last logits rel L2 %.3g between 2 GPUs and 1", model, e);
    printf(", worst with 5 decode and 6 generated steps %.3g\n", worst);
    free(a);
    free(b);
    free(la);
    free(lb);
    free(ids);
    pair_close(&p);
    rlx_weights_close(ref);
}
END_TEST

START_TEST(test_bf16_greedy)
{
    const char *model = models[_i];
    rlx_weights *ref = pu_open_ref(model);
    size_t t;
    int32_t *ids = pu_read_case_ids(ref, CASE, &t);
    pair p;
    pair_open(&p, model, "bf16", 64);
    rlx_diag d;
    rlx_diag_init(&d);
    float *la = malloc((size_t)p.V * sizeof *la), *lb = malloc((size_t)p.V * sizeof *lb);
    ck_assert_msg(rlx_session_prefill(p.s, ids, (int64_t)t, NULL, la, &d) == 0, "%s: %s", model, d.msg);
    ck_assert_msg(rlx_tp_session_prefill(p.ts, ids, (int64_t)t, NULL, lb, &d) == 0, "%s: %s", model, d.msg);
    double worst = 0;
    for (int step = 0; step <= N_GEN; step++) {
        int32_t ia = argmax(la, p.V), ib = argmax(lb, p.V);
        double e = tu_rel_l2(lb, la, (size_t)p.V);
        worst = e > worst ? e : worst;
        ck_assert_msg(ia == ib, "%s bf16 step %d: GPU 0 picks %d (logit %.4f), 2 GPUs %d (GPU 0's logit of it %.4f)",
                      model, step, ia, (double)la[ia], ib, (double)la[ib]);
        if (step == N_GEN) break;
        ck_assert_msg(rlx_session_decode(p.s, ia, la, &d) == 0, "%s: %s", model, d.msg);
        ck_assert_msg(rlx_tp_session_decode(p.ts, ia, lb, &d) == 0, "%s: %s", model, d.msg);
    }
    printf("%s bf16: %d greedy ids equal, logits rel L2 at most %.3g\n", model, N_GEN + 1, worst);
    free(la);
    free(lb);
    free(ids);
    pair_close(&p);
    rlx_weights_close(ref);
}
END_TEST

/* the profile's backend.cuda.devices [1, 0] chooses the ranks and their devices: rank 0 on
 * GPU 1, rank 1 on GPU 0, and the logits still equal GPU 0 alone's */
START_TEST(test_profile_devices)
{
    char *tmp = tu_mkdtemp(), prof[1200];
    snprintf(prof, sizeof prof, "%s/two.rlx.json", tmp);
    FILE *f = fopen(prof, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"backend\": {\"cuda\": {\"devices\": [1, 0], \"graphs\": true}}}\n", f);
    fclose(f);
    rlx_model_options o;
    rlx_model_options_init(&o);
    o.backend = backend();
    o.profile = prof;
    rlx_diag d;
    rlx_diag_init(&d);
    rlx_tp *tp = NULL;
    rlx_model *m = NULL;
    ck_assert_msg(rlx_tp_open(tu_fixture("llama32-tiny"), &o, 0, &tp, &d) == 0, "%s", d.msg);
    ck_assert_int_eq(rlx_tp_ranks(tp), 2);
    for (int r = 0; r < 2; r++) {
        rlx_memory mem;
        ck_assert_msg(rlx_model_memory(rlx_tp_model(tp, r), &mem, &d) == 0, "%s", d.msg);
        ck_assert_msg(strncmp(mem.device, r ? "cuda:0" : "cuda:1", 6) == 0 || strcmp(backend(), "cuda"),
                      "rank %d on %s", r, mem.device);
    }
    o.profile = NULL;
    ck_assert_msg(rlx_model_open(tu_fixture("llama32-tiny"), &o, &m, &d) == 0, "%s", d.msg);
    rlx_tp_session *ts = NULL;
    rlx_session *s = NULL;
    ck_assert_msg(rlx_tp_session_new(tp, 32, &ts, &d) == 0, "%s", d.msg);
    ck_assert_msg(rlx_session_new(m, 32, &s, &d) == 0, "%s", d.msg);
    int64_t V = rlx_model_get_config(m)->vocab_size;
    float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
    static const int32_t ids[] = {1, 2, 3, 4, 5};
    ck_assert_msg(rlx_session_prefill(s, ids, 5, NULL, a, &d) == 0, "%s", d.msg);
    ck_assert_msg(rlx_tp_session_prefill(ts, ids, 5, NULL, b, &d) == 0, "%s", d.msg);
    for (int step = 0; step < 3; step++) {
        ck_assert_msg(rlx_session_decode(s, 7, a, &d) == 0, "%s", d.msg);
        ck_assert_msg(rlx_tp_session_decode(ts, 7, b, &d) == 0, "%s", d.msg);
    }
    double e = tu_rel_l2(b, a, (size_t)V);
    printf("profile devices [1, 0]: rel L2 %.3g against GPU 0 alone\n", e);
    ck_assert_msg(e < 1e-5, "rel L2 %.3g", e);
    free(a);
    free(b);
    rlx_tp_session_free(ts);
    rlx_session_free(s);
    rlx_tp_close(tp);
    rlx_model_close(m);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* rank 1 stepped alone: its graph would wait inside NCCL for rank 0, which never comes (and
 * NCCL's symmetric kernels cannot be aborted), so a rank launches a step only when every rank
 * is ready to. In RLX_TP_TIMEOUT_S (2 s) the step fails with one line and the group stops;
 * the next step of the pair fails at once; closing does not hang */
START_TEST(test_dead_peer)
{
    rlx_model_options o;
    rlx_model_options_init(&o);
    o.backend = backend();
    o.devices = "0,1";
    rlx_diag d;
    rlx_diag_init(&d);
    rlx_tp *tp = NULL;
    ck_assert_msg(rlx_tp_open(tu_fixture("llama32-tiny"), &o, 2, &tp, &d) == 0, "%s", d.msg);
    rlx_tp_session *ts = NULL;
    rlx_session *alone = NULL;
    ck_assert_msg(rlx_tp_session_new(tp, 32, &ts, &d) == 0, "%s", d.msg);
    ck_assert_msg(rlx_session_new(rlx_tp_model(tp, 1), 32, &alone, &d) == 0, "%s", d.msg);
    float lg[4096];
    static const int32_t ids[] = {1, 2, 3};
    ck_assert_msg(rlx_tp_session_prefill(ts, ids, 3, NULL, lg, &d) == 0, "%s", d.msg);
    ck_assert_msg(rlx_tp_session_decode(ts, 4, lg, &d) == 0, "%s", d.msg);
    setenv("RLX_TP_TIMEOUT_S", "2", 1);
    double t0 = now_ms();
    ck_assert_int_eq(rlx_session_decode(alone, 4, lg, &d), RLX_ERR_DEVICE);
    double ms = now_ms() - t0;
    printf("dead peer: failed after %.0f ms: %s\n", ms, d.msg);
    ck_assert_msg(ms > 1900 && ms < 30000, "%.0f ms", ms);
    ck_assert_msg(strstr(d.msg, "stopped: rank 1 of 2 waited 2 s for the other ranks to launch a step (one failed, "
                                "hangs or runs another program)") && !strchr(d.msg, '\n'), "%s", d.msg);
    t0 = now_ms();
    ck_assert_int_eq(rlx_tp_session_decode(ts, 4, lg, &d), RLX_ERR_DEVICE);
    ck_assert_msg(now_ms() - t0 < 1000 && strstr(d.msg, " was stopped: rank 1 of 2 waited 2 s for the other ranks"),
                  "%.0f ms: %s", now_ms() - t0, d.msg);
    rlx_session_free(alone);
    rlx_tp_session_free(ts);
    rlx_tp_close(tp);
}
END_TEST

/* the devices the backend's probe lists (0 without the backend), probed in a child: the
 * tests run forked, and CUDA made ready before a fork does not work in the child */
static int probe_devices(void)
{
    rlx_registry *r = NULL;
    if (rlx_registry_open(NULL, &r, NULL)) return 0;
    const rlx_backend *be = rlx_registry_backend(r, backend(), NULL);
    const rlx_backend_probe *pb = be ? rlx_registry_probe(r, be) : NULL;
    int n = pb && pb->available ? (int)pb->n_devices : 0;
    rlx_registry_close(r);
    return n;
}

static int devices(void)
{
    pid_t pid = fork();
    if (pid == 0) _exit(probe_devices());
    int st = 0;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) ? WEXITSTATUS(st) : 0;
}

int main(void)
{
    int n = devices();
    if (n < 2) {
        printf("backend %s: %d device%s, tensor parallelism needs 2: skipped\n", backend(), n, n == 1 ? "" : "s");
        return 77;
    }
    Suite *s = suite_create("tp_gpu");
    TCase *c = tcase_create("two");
    tcase_set_timeout(c, 600);
    tcase_add_loop_test(c, test_f32, 0, (int)N_MODELS);
    tcase_add_loop_test(c, test_bf16_greedy, 0, (int)N_MODELS);
    suite_add_tcase(s, c);
    TCase *f = tcase_create("function"); /* a hang here fails in a minute, not the whole run */
    tcase_set_timeout(f, 60);
    tcase_add_test(f, test_profile_devices);
    tcase_add_test(f, test_dead_peer);
    suite_add_tcase(s, f);
    return tu_run_suite(s);
}
