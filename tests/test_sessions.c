/* Sessions on one compiled model from several threads: each thread's greedy continuation
 * of a reference prompt is transformers' (models/tiny-llama-py/reference.json), and every
 * logit it saw is bit for bit what a single session saw alone. Prompts of different
 * lengths make the threads compile (on a fresh model) and share programs of different
 * shapes. Built with
 * -fsanitize=thread in CI (.ci/run). */
#include <check.h>
#include <jansson.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rlx/rlx.h"
#include "testutil.h"

#define THREADS 4
#define ROUNDS 3
#define STEPS 24

static rlx_model *model;
static json_t *cases;

typedef struct job {
    size_t which;                 /* reference case */
    int32_t ids[STEPS];           /* greedy continuation */
    uint64_t hash;                /* FNV-1a over every logits row seen */
    int rc;
    char err[sizeof ((rlx_diag *)0)->msg];
} job;

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static int32_t argmax(const float *x, int64_t n)
{
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return (int32_t)best;
}

/* ROUNDS times: a fresh session, prefill the prompt, STEPS greedy tokens */
static void *run_job(void *arg)
{
    job *j = arg;
    json_t *c = json_array_get(cases, j->which), *p = json_object_get(c, "prompt_ids");
    size_t n = json_array_size(p);
    int64_t V = rlx_model_get_config(model)->vocab_size;
    int32_t prompt[64];
    float *logits = malloc((size_t)V * sizeof *logits);
    rlx_diag d;
    rlx_diag_init(&d);
    for (size_t i = 0; i < n && i < 64; i++) prompt[i] = (int32_t)json_integer_value(json_array_get(p, i));
    j->hash = 1469598103934665603ull;
    for (int r = 0; r < ROUNDS && !j->rc; r++) {
        rlx_session *s = NULL;
        uint64_t h = 1469598103934665603ull;
        j->rc = rlx_session_new(model, (int64_t)n + STEPS, &s, &d);
        if (!j->rc) j->rc = rlx_session_prefill(s, prompt, (int64_t)n, NULL, logits, &d);
        for (int k = 0; k < STEPS && !j->rc; k++) {
            h = fnv(h, logits, (size_t)V * sizeof *logits);
            j->ids[k] = argmax(logits, V);
            if (k + 1 < STEPS) j->rc = rlx_session_decode(s, j->ids[k], logits, &d);
        }
        if (r && !j->rc && h != j->hash) j->rc = -1, snprintf(d.msg, sizeof d.msg, "round %d saw other logits", r);
        j->hash = h;
        rlx_session_free(s);
    }
    if (j->rc) snprintf(j->err, sizeof j->err, "%s", d.msg);
    free(logits);
    return NULL;
}

START_TEST(threads_match_single_sessions)
{
    json_error_t e;
    json_t *ref = json_load_file(tu_src("models/tiny-llama-py/reference.json"), 0, &e);
    ck_assert_msg(ref != NULL, "%s", e.text);
    cases = json_object_get(ref, "cases");
    size_t n_cases = json_array_size(cases);
    ck_assert_uint_ge(n_cases, 3);
    model = tu_open_model(tu_src("models/tiny-llama-py"), "cpu", 0);

    /* alone, one case after another */
    job alone[THREADS], together[THREADS];
    memset(alone, 0, sizeof alone);
    memset(together, 0, sizeof together);
    for (size_t t = 0; t < THREADS; t++) {
        alone[t].which = together[t].which = t % n_cases;
        if (t < n_cases) run_job(&alone[t]);
        else alone[t] = alone[t % n_cases];
        ck_assert_msg(alone[t].rc == 0, "case %zu alone: %s", t, alone[t].err);
        json_t *want = json_object_get(json_array_get(cases, alone[t].which), "generated_ids");
        for (size_t k = 0; k < STEPS && k < json_array_size(want); k++)
            ck_assert_msg(alone[t].ids[k] == (int32_t)json_integer_value(json_array_get(want, k)),
                          "case %zu alone: id %zu is %d, transformers %lld", t, k, alone[t].ids[k],
                          (long long)json_integer_value(json_array_get(want, k)));
    }
    int compiled = rlx_model_compiled_count(model);
    rlx_model_close(model);

    /* together: THREADS threads on one fresh model, compiling its programs as they go */
    model = tu_open_model(tu_src("models/tiny-llama-py"), "cpu", 0);
    pthread_t th[THREADS];
    for (size_t t = 0; t < THREADS; t++) ck_assert_int_eq(pthread_create(&th[t], NULL, run_job, &together[t]), 0);
    for (size_t t = 0; t < THREADS; t++) ck_assert_int_eq(pthread_join(th[t], NULL), 0);
    for (size_t t = 0; t < THREADS; t++) {
        ck_assert_msg(together[t].rc == 0, "thread %zu: %s", t, together[t].err);
        ck_assert_msg(memcmp(together[t].ids, alone[t].ids, sizeof alone[t].ids) == 0,
                      "thread %zu: ids differ from a single session", t);
        ck_assert_msg(together[t].hash == alone[t].hash, "thread %zu: logits differ from a single session", t);
    }
    /* one program per shape, shared by the threads */
    ck_assert_int_eq(rlx_model_compiled_count(model), compiled);
    printf("%d threads x %d rounds x %d tokens: ids and logits identical to single sessions (%d programs)\n",
           THREADS, ROUNDS, STEPS, compiled);
    rlx_model_close(model);
    json_decref(ref);
}
END_TEST

/* the same through rlx-bench --sessions: random prompts, every session identical */
START_TEST(bench_sessions_identical)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "'%s' --model '%s' --backend cpu --prefill 9 --decode 12 --reps 1 --no-reference --sessions 4 --json",
             tu_tool("tools/rlx-bench"), tu_src("models/tiny-llama-py"));
    tu_result r = tu_run(cmd, 300);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    json_error_t e;
    json_t *o = json_loads(r.out, 0, &e), *ss = json_object_get(o, "sessions");
    ck_assert_msg(ss != NULL, "no \"sessions\" in %s", r.out);
    ck_assert_int_eq(json_integer_value(json_object_get(ss, "k")), 4);
    ck_assert_int_eq(json_integer_value(json_object_get(ss, "identical")), 4);
    printf("rlx-bench --sessions 4: %s\n", r.out);
    json_decref(o);
    tu_result_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sessions");
    TCase *tc = tcase_create("threads");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, threads_match_single_sessions);
    tcase_add_test(tc, bench_sessions_identical);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
