/* Greedy decoding on the device (rlx_session_generate): the ids it picks are those of a
 * decode loop that takes the argmax of each step's logits on the host, chunks continue one
 * another, and the cache it leaves decodes on as the loop's does. Every causal family on
 * the CPU backend (tools/gpu-check.sh sets RLX_TEST_BACKEND=cuda). */
#include "rlx/rlx.h"
#include "testutil.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 12 /* tokens generated */
static const char *backend = "cpu";
static double TOL = 1e-6;

static void pick_backend(void)
{
    const char *tb = getenv("RLX_TEST_BACKEND");
    if (tb && *tb) backend = tb;
    if (strcmp(backend, "cpu")) TOL = 1e-5;
}

static int32_t host_argmax(const float *x, int64_t n)
{
    int32_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = (int32_t)i;
    return b;
}

static const char *const fixtures[] = {"llama32-tiny", "qwen3-tiny", "gemma2-tiny", "gemma3-tiny", "phi3-tiny"};

START_TEST(generate_matches_host_argmax)
{
    const char *name = fixtures[_i];
    pick_backend();
    rlx_model *m = tu_open_model(tu_fixture(name), backend, 1);
    rlx_diag d;
    rlx_diag_init(&d);
    int64_t V = rlx_model_get_config(m)->vocab_size;
    float *lg = malloc((size_t)V * sizeof *lg), *lg2 = malloc((size_t)V * sizeof *lg2);
    float *lgen = malloc((size_t)V * sizeof *lgen);
    ck_assert_ptr_nonnull(lg);
    ck_assert_ptr_nonnull(lg2);
    ck_assert_ptr_nonnull(lgen);
    int32_t prompt[5] = {1, (int32_t)(7 % V), (int32_t)(31 % V), (int32_t)(5 % V), (int32_t)(19 % V)};
    rlx_session *ref, *gen, *chunk;
    ck_assert_int_eq(rlx_session_new(m, 64, &ref, &d), 0);
    ck_assert_int_eq(rlx_session_new(m, 64, &gen, &d), 0);
    ck_assert_int_eq(rlx_session_new(m, 64, &chunk, &d), 0);
    ck_assert_msg(rlx_session_prefill(ref, prompt, 5, NULL, lg, &d) == 0, "%s: %s", name, d.msg);
    ck_assert_msg(rlx_session_prefill(gen, prompt, 5, NULL, lg2, &d) == 0, "%s: %s", name, d.msg);
    ck_assert_msg(rlx_session_prefill(chunk, prompt, 5, NULL, lg2, &d) == 0, "%s: %s", name, d.msg);
    /* the loop a host runs: feed the argmax of the logits before */
    int32_t want[N + 1], got[N], got2[N];
    want[0] = host_argmax(lg, V);
    for (int k = 0; k < N; k++) {
        ck_assert_msg(rlx_session_decode(ref, want[k], lg, &d) == 0, "%s: %s", name, d.msg);
        want[k + 1] = host_argmax(lg, V);
    }
    ck_assert_msg(rlx_session_generate(gen, want[0], N, got, lgen, &d) == 0, "%s: %s", name, d.msg);
    for (int k = 0; k < N; k++) ck_assert_msg(got[k] == want[k + 1], "%s: token %d: %d, the host loop's %d", name, k, got[k], want[k + 1]);
    ck_assert_int_eq(rlx_session_pos(gen), 5 + N);
    /* the logits the last id was picked from: the loop's last step's */
    double el = tu_rel_l2(lgen, lg, (size_t)V);
    ck_assert_msg(el < TOL, "%s: generate's last logits: rel L2 %g", name, el);
    ck_assert_int_eq(host_argmax(lgen, V), got[N - 1]);
    /* in two chunks, the second fed the first's last id */
    ck_assert_msg(rlx_session_generate(chunk, want[0], 5, got2, NULL, &d) == 0, "%s: %s", name, d.msg);
    ck_assert_msg(rlx_session_generate(chunk, got2[4], N - 5, got2 + 5, NULL, &d) == 0, "%s: %s", name, d.msg);
    for (int k = 0; k < N; k++) ck_assert_msg(got2[k] == want[k + 1], "%s: chunked token %d: %d, not %d", name, k, got2[k], want[k + 1]);
    /* the cache holds what the loop's holds: the next decode's logits agree */
    ck_assert_msg(rlx_session_decode(ref, want[N], lg, &d) == 0, "%s: %s", name, d.msg);
    ck_assert_msg(rlx_session_decode(gen, got[N - 1], lg2, &d) == 0, "%s: %s", name, d.msg);
    double e = tu_rel_l2(lg2, lg, (size_t)V);
    ck_assert_msg(e < TOL, "%s: logits after generate: rel L2 %g", name, e);
    rlx_session_free(ref);
    rlx_session_free(gen);
    rlx_session_free(chunk);
    free(lg);
    free(lg2);
    free(lgen);
    rlx_model_close(m);
}
END_TEST

START_TEST(generate_errors)
{
    pick_backend();
    rlx_model *m = tu_open_model(tu_fixture("llama32-tiny"), backend, 1);
    rlx_diag d;
    rlx_diag_init(&d);
    rlx_session *s;
    int32_t out[8], one = 3;
    ck_assert_int_eq(rlx_session_new(m, 8, &s, &d), 0);
    ck_assert_int_eq(rlx_session_prefill(s, &one, 1, NULL, NULL, &d), 0);
    ck_assert_int_eq(rlx_session_generate(s, 3, 8, out, NULL, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "session: 8 tokens at position 1 exceed the context length 8");
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_session_generate(s, 3, 0, out, NULL, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "rlx_session_generate: n < 1");
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_session_generate(s, 3, 2, NULL, NULL, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "rlx_session_generate: out is NULL");
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_session_generate(s, 512, 2, out, NULL, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "input tensor \"rlx.next_id\" (the id rlx_session_generate was given): 512 at position 0 "
                            "is outside [0, 512), the rows of model.embed_tokens.weight");
    ck_assert_int_eq(rlx_session_pos(s), 1); /* nothing ran */
    rlx_diag_init(&d);
    ck_assert_msg(rlx_session_generate(s, 3, 7, out, NULL, &d) == 0, "%s", d.msg); /* fills the context exactly */
    ck_assert_int_eq(rlx_session_pos(s), 8);
    for (int k = 0; k < 7; k++) ck_assert(out[k] >= 0 && out[k] < 512);
    rlx_session_free(s);
    rlx_model_close(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("generate");
    TCase *tc = tcase_create("generate");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, generate_matches_host_argmax, 0, (int)(sizeof fixtures / sizeof fixtures[0]));
    tcase_add_test(tc, generate_errors);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
