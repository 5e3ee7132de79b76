/* 16-bit compute against the causal-LM fixtures: with precision.compute bf16 and f16
 * (mixed none: weights, activations and KV cache in 16 bits; mixed auto: weights only),
 * forward logits of every case and the KV-decode logits (teacher-forced along the
 * reference's greedy continuation) must land within 1.5x of how far transformers itself
 * lands from the float64 reference in that dtype (half.json), and the greedy ids must
 * agree wherever the reference's top-2 margin exceeds 0.1. The cases' KV decodes also run
 * as one batch (rlx_session_decode_batch: one step over the cases' rows) to the same bound.
 * mistral-tiny runs through the out-of-tree arch example (examples/out-of-tree-arch, built
 * by make check). */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rlx/rlx.h"
#include "parity_util.h"
#include "testutil.h"

static const char *const models[] = {"llama32-tiny", "llama-untied-bf16", "qwen3-tiny",
                                      "qwen3-untied-bf16", "gemma2-tiny", "gemma3-tiny", "phi3-tiny",
                                      "mistral-tiny"};
#define N_MODELS (sizeof models / sizeof models[0])
#define N_CASES 3
#define N_GEN 10
static const struct { const char *compute, *mixed, *half_key; } precs[] = {
    {"bf16", "none", "bfloat16"}, {"f16", "none", "float16"},
    {"bf16", "auto", "bfloat16"}, {"f16", "auto", "float16"}};
#define N_PRECS (sizeof precs / sizeof precs[0])

static int argmax(const float *x, size_t n)
{
    size_t b = 0;
    for (size_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return (int)b;
}

/* the cases' teacher-forced decodes as one batch of N_CASES rows a step, each row against
 * the full forward's logits to the case's bound */
static void batched_decode(rlx_model *m, rlx_weights *ref, json_t *hv, const char *model, const char *compute,
                           const char *mixed)
{
    size_t vocab = (size_t)rlx_model_get_config(m)->vocab_size, t[N_CASES];
    rlx_session *s[N_CASES];
    int32_t *ids[N_CASES], *full_ids[N_CASES];
    float *full[N_CASES], *dec[N_CASES], *row = malloc(N_CASES * vocab * sizeof *row);
    rlx_diag d;
    rlx_diag_init(&d);
    for (int c = 0; c < N_CASES; c++) {
        size_t nf, nfull;
        char name[64];
        ids[c] = pu_read_case_ids(ref, c, &t[c]);
        full[c] = pu_read_case_f32(ref, c, "full_logits", &nfull);
        snprintf(name, sizeof name, "case%d.full_ids", c);
        full_ids[c] = pu_read_ids(ref, name, &nf);
        dec[c] = malloc((N_GEN - 1) * vocab * sizeof *dec[c]);
        ck_assert_msg(rlx_session_new(m, 0, &s[c], &d) == 0, "%s", d.msg);
        ck_assert_msg(rlx_session_prefill(s[c], ids[c], (int64_t)t[c], NULL, NULL, &d) == 0, "%s %s: %s", model,
                      compute, d.msg);
    }
    for (int k = 0; k < N_GEN - 1; k++) {
        int32_t next[N_CASES];
        for (int c = 0; c < N_CASES; c++)
            next[c] = full_ids[c][t[c] + (size_t)k];
        ck_assert_msg(rlx_session_decode_batch(s, N_CASES, next, row, &d) == 0, "%s %s batched decode: %s", model,
                      compute, d.msg);
        for (int c = 0; c < N_CASES; c++)
            memcpy(dec[c] + (size_t)k * vocab, row + (size_t)c * vocab, vocab * sizeof *row);
    }
    for (int c = 0; c < N_CASES; c++) {
        double bound = 1.5 * json_real_value(json_array_get(hv, (size_t)c));
        double de = tu_rel_l2(dec[c], full[c] + t[c] * vocab, (N_GEN - 1) * vocab);
        fprintf(stderr, "half-parity %-18s %-4s mixed %-4s case %d: batched decode %.5f (bound %.5f)\n", model,
                compute, mixed, c, de, bound);
        ck_assert_msg(de <= bound, "%s compute %s mixed %s case %d: batched KV-decode logits rel L2 %.5f > 1.5 x transformers' %.5f",
                      model, compute, mixed, c, de, bound / 1.5);
        rlx_session_free(s[c]);
        free(ids[c]);
        free(full[c]);
        free(full_ids[c]);
        free(dec[c]);
    }
    free(row);
}

START_TEST(test_half_parity)
{
    const char *model = models[_i / N_PRECS];
    const char *compute = precs[_i % N_PRECS].compute, *mixed = precs[_i % N_PRECS].mixed;
    char rel[256];
    snprintf(rel, sizeof rel, "%s/half.json", model);
    json_t *half = pu_load_json(tu_fixture(rel));
    json_t *hv = json_object_get(half, precs[_i % N_PRECS].half_key);
    ck_assert_msg(json_is_array(hv) && json_array_size(hv) == N_CASES, "%s: no %s list", rel,
                  precs[_i % N_PRECS].half_key);
    snprintf(rel, sizeof rel, "%s/ref.json", model);
    json_t *rj = pu_load_json(tu_fixture(rel));
    rlx_weights *ref = pu_open_ref(model);

    rlx_model_options o;
    rlx_model_options_init(&o);
    /* the CPU in make check; tools/gpu-check.sh sets RLX_TEST_BACKEND=cuda */
    const char *be = getenv("RLX_TEST_BACKEND");
    o.backend = be && *be ? be : "cpu";
    o.precision = compute;
    o.mixed = mixed;
    o.threads = 2;
    char path[8192], prof[8192];
    if (!strcmp(model, "mistral-tiny")) { /* the plugin in the build tree, its profiles in the source */
        const char *pp = getenv("RLX_PLUGIN_PATH"), *pf = getenv("RLX_PROFILE_PATH");
        snprintf(path, sizeof path, "%s:%s", pp && *pp ? pp : ".", tu_build("examples/out-of-tree-arch/.libs"));
        snprintf(prof, sizeof prof, "%s:%s", pf && *pf ? pf : ".", tu_src("examples/out-of-tree-arch"));
        o.plugin_path = path;
        setenv("RLX_PROFILE_PATH", prof, 1);
    }
    rlx_model *m = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_model_open(tu_fixture(model), &o, &m, &d) == 0, "%s: %s", model, d.msg);
    size_t vocab = (size_t)rlx_model_get_config(m)->vocab_size;
    for (int c = 0; c < N_CASES; c++) {
        double bound = 1.5 * json_real_value(json_array_get(hv, (size_t)c));
        size_t t, nref, nfull;
        int32_t *ids = pu_read_case_ids(ref, c, &t);
        float *want = pu_read_case_f32(ref, c, "logits", &nref);
        float *full = pu_read_case_f32(ref, c, "full_logits", &nfull);
        size_t nf;
        char name[64];
        snprintf(name, sizeof name, "case%d.full_ids", c);
        int32_t *full_ids = pu_read_ids(ref, name, &nf);
        ck_assert_uint_eq(nref, t * vocab);
        ck_assert_uint_eq(nf, t + N_GEN);
        json_t *cj = json_array_get(json_object_get(rj, "cases"), (size_t)c);
        json_t *greedy = json_object_get(cj, "greedy_continuation"), *margins = json_object_get(cj, "top2_margins");

        rlx_session *s = NULL;
        ck_assert_msg(rlx_session_new(m, 0, &s, &d) == 0, "%s", d.msg);
        float *got = malloc(nref * sizeof *got), *dec = malloc((N_GEN - 1) * vocab * sizeof *dec);
        ck_assert_msg(rlx_session_prefill(s, ids, (int64_t)t, got, NULL, &d) == 0, "%s %s: %s", model, compute, d.msg);
        double fe = tu_rel_l2(got, want, nref);
        /* decode: feed the reference continuation, compare with the full forward's rows */
        for (int k = 0; k < N_GEN - 1; k++)
            ck_assert_msg(rlx_session_decode(s, full_ids[t + (size_t)k], dec + (size_t)k * vocab, &d) == 0,
                          "%s %s decode: %s", model, compute, d.msg);
        double de = tu_rel_l2(dec, full + t * vocab, (N_GEN - 1) * vocab);
        fprintf(stderr, "half-parity %-18s %-4s mixed %-4s case %d: forward %.5f decode %.5f (bound %.5f)\n",
                model, compute, mixed, c, fe, de, bound);
        ck_assert_msg(fe <= bound, "%s compute %s mixed %s case %d: forward logits rel L2 %.5f > 1.5 x transformers' %.5f",
                      model, compute, mixed, c, fe, bound / 1.5);
        ck_assert_msg(de <= bound, "%s compute %s mixed %s case %d: KV-decode logits rel L2 %.5f > 1.5 x transformers' %.5f",
                      model, compute, mixed, c, de, bound / 1.5);
        /* greedy ids where the reference is clear */
        for (int k = 0; k < N_GEN; k++) {
            if (json_real_value(json_array_get(margins, (size_t)k)) <= 0.1) continue;
            const float *row = k == 0 ? got + (t - 1) * vocab : dec + (size_t)(k - 1) * vocab;
            int want_id = (int)json_integer_value(json_array_get(greedy, (size_t)k));
            ck_assert_msg(argmax(row, vocab) == want_id, "%s compute %s mixed %s case %d: greedy token %d is %d, reference %d (margin %.3f)",
                          model, compute, mixed, c, k, argmax(row, vocab), want_id,
                          json_real_value(json_array_get(margins, (size_t)k)));
        }
        rlx_session_free(s);
        free(got);
        free(dec);
        free(ids);
        free(want);
        free(full);
        free(full_ids);
    }
    batched_decode(m, ref, hv, model, compute, mixed);
    rlx_model_close(m);
    rlx_weights_close(ref);
    json_decref(rj);
    json_decref(half);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("half");
    TCase *tc = tcase_create("parity");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_half_parity, 0, (int)(N_MODELS * N_PRECS));
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
