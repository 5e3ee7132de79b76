/* Qwen3, Gemma 2, Gemma 3 (text) and Phi-3 parity through the CLI: rlx-run forward and
 * generate on the Hugging Face fixtures (tests/fixtures/qwen3-tiny, qwen3-untied-bf16,
 * gemma2-tiny, gemma3-tiny, phi3-tiny) under both fusion policies; plus the recipes'
 * config errors. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "parity_util.h"
#include "rlx/rlx.h"
#include "testutil.h"

#define N_CASES 3
#define N_GEN 10

#define FLOW_INPUTS                                                                               \
    "\"inputs\":[{\"name\":\"input_ids\",\"dtype\":\"I32\",\"shape\":[-1]},"                      \
    "{\"name\":\"positions\",\"dtype\":\"I32\",\"shape\":[-1]},{\"name\":\"pos\",\"dtype\":\"I32\",\"shape\":[1]}]"

typedef struct fixture {
    const char *model;
    const char *flow; /* NULL: the architecture's recipe */
} fixture;
static const fixture fixtures[] = {
    {"qwen3-tiny", NULL},
    {"qwen3-untied-bf16", NULL},
    {"gemma2-tiny", NULL},
    {"gemma3-tiny", NULL},
    {"phi3-tiny", NULL},
};
#define N_FIXTURES (sizeof fixtures / sizeof fixtures[0])

typedef struct config {
    const char *policy;
    int threads;
} config;
static const config configs[] = {{"direct", 1}, {"fusable", 2}};
#define N_CONFIGS (sizeof configs / sizeof configs[0])

/* " --flow 'path'" for a fixture that needs one, else "" (written into tmp) */
static void flow_arg(const fixture *fx, const char *tmp, char *out, size_t len)
{
    out[0] = 0;
    if (!fx->flow) return;
    char *path = pu_write_file(tmp, "flow.json", fx->flow);
    snprintf(out, len, " --flow '%s'", path);
    free(path);
}

START_TEST(test_forward_parity)
{
    const fixture *fx = &fixtures[_i / N_CASES];
    int c = _i % N_CASES;
    char in_path[1200], flow[1300], *tmp = tu_mkdtemp();
    rlx_weights *ref = pu_open_ref(fx->model);
    size_t t, nref;
    int32_t *ids = pu_read_case_ids(ref, c, &t);
    float *want = pu_read_case_f32(ref, c, "logits", &nref);
    snprintf(in_path, sizeof in_path, "%s/in.safetensors", tmp);
    pu_write_ids(in_path, ids, t);
    flow_arg(fx, tmp, flow, sizeof flow);

    float *first = NULL;
    for (size_t k = 0; k < N_CONFIGS; k++) {
        char out_path[1200], cmd[4096];
        snprintf(out_path, sizeof out_path, "%s/out%zu.safetensors", tmp, k);
        snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s' --out '%s' --policy %s --threads %d%s",
                 tu_tool("tools/rlx-run"), tu_fixture(fx->model), in_path, out_path, configs[k].policy,
                 configs[k].threads, flow);
        free(pu_run_ok(cmd, 240));
        char label[64];
        snprintf(label, sizeof label, "(%s)", configs[k].policy);
        pu_check_forward_logits(out_path, want, nref, fx->model, c, label, configs[k].policy,
                                configs[0].policy, &first);
    }
    if (fx->flow && t == 1) {
        /* one token sits at position 0, where the rope tables do not matter: the
         * architecture's own recipe must match there too */
        char out_path[1200], cmd[4096];
        snprintf(out_path, sizeof out_path, "%s/recipe.safetensors", tmp);
        snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s' --out '%s'", tu_tool("tools/rlx-run"),
                 tu_fixture(fx->model), in_path, out_path);
        free(pu_run_ok(cmd, 240));
        rlx_weights *out = pu_open_st(out_path);
        size_t n;
        float *got = pu_read_f32(out, "logits", &n);
        ck_assert_uint_eq(n, nref);
        double err = tu_rel_l2(got, want, n);
        ck_assert_msg(err < 1e-4, "%s case %d (recipe): logits rel L2 %.3g >= 1e-4", fx->model, c, err);
        free(got);
        rlx_weights_close(out);
    }
    free(first);
    free(want);
    free(ids);
    rlx_weights_close(ref);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

START_TEST(test_generate_parity)
{
    const fixture *fx = &fixtures[_i / N_CASES];
    int c = _i % N_CASES;
    char flow[1300], *tmp = tu_mkdtemp();
    rlx_weights *ref = pu_open_ref(fx->model);
    size_t t, nfull, nlog;
    int32_t *ids = pu_read_case_ids(ref, c, &t);
    float *full = pu_read_case_f32(ref, c, "full_logits", &nfull);
    float *want_prefill = pu_read_case_f32(ref, c, "logits", &nlog);
    size_t vocab = nlog / t;
    ck_assert_uint_ge(nfull / vocab, t + N_GEN - 1);
    flow_arg(fx, tmp, flow, sizeof flow);

    char rel[256];
    snprintf(rel, sizeof rel, "%s/ref.json", fx->model);
    json_t *rj = pu_load_json(tu_fixture(rel));
    json_t *rc = json_array_get(json_object_get(rj, "cases"), (size_t)c);
    json_t *greedy = json_object_get(rc, "greedy_continuation");
    json_t *margins = json_object_get(rc, "top2_margins");
    ck_assert(json_array_size(greedy) == N_GEN && json_array_size(margins) == N_GEN);
    char ids_arg[1024];
    pu_ids_arg(ids_arg, sizeof ids_arg, ids, t);

    float *first = NULL;
    for (size_t k = 0; k < N_CONFIGS; k++) {
        char out_path[1200], cmd[4096], what[160];
        snprintf(what, sizeof what, "%s case %d (%s)", fx->model, c, configs[k].policy);
        snprintf(out_path, sizeof out_path, "%s/logits%zu.safetensors", tmp, k);
        snprintf(cmd, sizeof cmd,
                 "'%s' generate --model '%s' --ids %s -n %d --greedy --json --logits-out '%s' --policy %s "
                 "--threads %d%s",
                 tu_tool("tools/rlx-run"), tu_fixture(fx->model), ids_arg, N_GEN, out_path, configs[k].policy,
                 configs[k].threads, flow);
        char *out = pu_run_ok(cmd, 240);
        json_t *o = pu_check_generated(out, ids, t, greedy, margins, N_GEN, what);
        json_decref(o);

        /* decode steps see positions t..t+8: past gemma's window of 8 in every case */
        pu_check_generate_logits(out_path, want_prefill, nlog, full, t, vocab, N_GEN, &first,
                                 configs[0].policy, what);
    }
    free(first);
    json_decref(rj);
    free(full);
    free(want_prefill);
    free(ids);
    rlx_weights_close(ref);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

/* ---------------------------------------------------------------- errors */

/* a model folder in tmp: cfg (taken) as config.json, the fixture's weights linked */
static char *model_dir(const char *tmp, const char *model, json_t *cfg)
{
    char rel[256], *dir = malloc(1200), path[1300], cmd[3000];
    snprintf(dir, 1200, "%s/%s", tmp, model);
    snprintf(rel, sizeof rel, "%s/model.safetensors", model);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && ln -s '%s' '%s/model.safetensors'", dir, tu_fixture(rel), dir);
    tu_result r = tu_run(cmd, 30);
    ck_assert_msg(r.status == 0, "%s: %s", cmd, r.err);
    tu_result_free(&r);
    snprintf(path, sizeof path, "%s/config.json", dir);
    ck_assert(json_dump_file(cfg, path, 0) == 0);
    json_decref(cfg);
    return dir;
}

/* the fixture's model with one config.json key replaced */
static char *model_with(const char *tmp, const char *model, const char *key, json_t *value)
{
    char rel[256];
    snprintf(rel, sizeof rel, "%s/config.json", model);
    json_t *cfg = pu_load_json(tu_fixture(rel));
    json_object_set_new(cfg, key, value);
    return model_dir(tmp, model, cfg);
}

/* the transformers 4.x spelling of each config (rope_theta, rope_scaling,
 * rope_local_base_freq, sliding_window_pattern, torch_dtype): the same logits */
START_TEST(test_configs_4x)
{
    const fixture *fx = &fixtures[_i];
    char rel[256], in_path[1200], out_path[1200], flow[1300], cmd[4096], *tmp = tu_mkdtemp();
    snprintf(rel, sizeof rel, "configs-4x/%s.json", fx->model);
    char *dir = model_dir(tmp, fx->model, pu_load_json(tu_fixture(rel)));
    rlx_weights *ref = pu_open_ref(fx->model);
    size_t t, nref, n;
    int32_t *ids = pu_read_ids(ref, "case2.input_ids", &t);
    float *want = pu_read_f32(ref, "case2.logits", &nref);
    snprintf(in_path, sizeof in_path, "%s/in.safetensors", tmp);
    snprintf(out_path, sizeof out_path, "%s/out.safetensors", tmp);
    pu_write_ids(in_path, ids, t);
    flow_arg(fx, tmp, flow, sizeof flow);
    snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s' --out '%s'%s", tu_tool("tools/rlx-run"), dir,
             in_path, out_path, flow);
    free(pu_run_ok(cmd, 240));
    rlx_weights *out = pu_open_st(out_path);
    float *got = pu_read_f32(out, "logits", &n);
    ck_assert_uint_eq(n, nref);
    double err = tu_rel_l2(got, want, n);
    ck_assert_msg(err < 1e-4, "%s with its 4.x config: logits rel L2 %.3g", fx->model, err);
    free(got);
    rlx_weights_close(out);
    free(want);
    free(ids);
    rlx_weights_close(ref);
    free(dir);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

static int one_line(const char *s)
{
    const char *nl = strchr(s, '\n');
    return nl && nl[1] == 0;
}

static void expect_fail(const char *args, const char *needle)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s", tu_tool("tools/rlx-run"), args);
    tu_result r = tu_run(cmd, 120);
    ck_assert_msg(r.status == 1 && strstr(r.err, needle) && one_line(r.err),
                  "`%s`: exit %d, expected 1 and one line naming '%s': %s", cmd, r.status, needle, r.err);
    tu_result_free(&r);
}

START_TEST(test_recipe_config_errors)
{
    char *tmp = tu_mkdtemp(), args[2048];
    char *g = model_with(tmp, "gemma2-tiny", "hidden_activation", json_string("relu"));
    snprintf(args, sizeof args, "generate --model '%s' --ids 1,2 -n 1", g);
    expect_fail(args, "hidden_activation 'relu'");
    char *q = model_with(tmp, "qwen3-tiny", "hidden_act", json_string("gelu"));
    snprintf(args, sizeof args, "generate --model '%s' --ids 1,2 -n 1", q);
    expect_fail(args, "hidden_act 'gelu'");
    /* Phi-3's long-context rope (4.x "su", 5.x "longrope") is refused naming the key */
    json_t *lr = json_pack("{s:s,s:[f],s:[f]}", "type", "su", "short_factor", 1.0, "long_factor", 1.0);
    char *p = model_with(tmp, "phi3-tiny", "rope_scaling", lr);
    snprintf(args, sizeof args, "generate --model '%s' --ids 1,2 -n 1", p);
    expect_fail(args, "rope_scaling.type: \"su\" is not supported by the phi3 recipe");
    free(p);
    json_t *pr = json_pack("{s:s,s:f}", "rope_type", "longrope", "rope_theta", 10000.0);
    char *tmp2 = tu_mkdtemp();
    p = model_with(tmp2, "phi3-tiny", "rope_parameters", pr);
    snprintf(args, sizeof args, "generate --model '%s' --ids 1,2 -n 1", p);
    expect_fail(args, "rope_parameters.rope_type: \"longrope\"");
    free(p);
    tu_rmrf(tmp2);
    free(tmp2);
    free(g);
    free(q);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

START_TEST(test_block_param_errors)
{
    char *tmp = tu_mkdtemp(), args[4096];
    /* gemma.decoder_layer needs its layer index (it picks the layer's type) */
    char *f1 = pu_write_file(tmp, "nolayer.json",
                             "{\"name\":\"g\"," FLOW_INPUTS ",\"stages\":[{\"block\":\"token_embed\"},"
                             "{\"block\":\"rope_tables\"},{\"block\":\"gemma.decoder_layer\","
                             "\"params\":{\"prefix\":\"model.layers.0.\",\"cache\":\"cache.0\"}},"
                             "{\"block\":\"final_norm\"},{\"block\":\"lm_head\"}]}");
    snprintf(args, sizeof args, "generate --model '%s' --ids 1,2 -n 1 --flow '%s'", tu_fixture("gemma2-tiny"), f1);
    expect_fail(args, "gemma.decoder_layer: needs the parameters");
    free(f1);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("qwen_gemma_parity");
    TCase *tc = tcase_create("parity");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_forward_parity, 0, (int)N_FIXTURES * N_CASES);
    tcase_add_loop_test(tc, test_generate_parity, 0, (int)N_FIXTURES * N_CASES);
    tcase_add_loop_test(tc, test_configs_4x, 0, (int)N_FIXTURES);
    suite_add_tcase(s, tc);
    TCase *err = tcase_create("errors");
    tcase_set_timeout(err, 120);
    tcase_add_test(err, test_recipe_config_errors);
    tcase_add_test(err, test_block_param_errors);
    suite_add_tcase(s, err);
    return s;
}

int main(void)
{
    return tu_run_suite(suite());
}
