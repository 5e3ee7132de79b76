/* LLaMA parity through the CLI: rlx-run forward and generate on the Hugging Face
 * fixtures (tests/fixtures/llama32-tiny, llama-untied-bf16), under both fusion policies
 * and 1 or 2 threads; plus the CLI's exit-status contract. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "parity_util.h"
#include "rlx/rlx.h"
#include "testutil.h"

static const char *const models[] = {"llama32-tiny", "llama-untied-bf16"};
#define N_CASES 3
#define N_GEN 10

typedef struct config {
    const char *policy;
    int threads;
} config;
static const config configs[] = {{"direct", 1}, {"fusable", 1}, {"direct", 2}, {"fusable", 2}};
#define N_CONFIGS (sizeof configs / sizeof configs[0])

/* ---------------------------------------------------------------- forward */

START_TEST(test_forward_parity)
{
    const char *model = models[_i / N_CASES];
    int c = _i % N_CASES;
    char mdir[1024], *tmp = tu_mkdtemp();
    snprintf(mdir, sizeof mdir, "%s", tu_fixture(model));
    rlx_weights *ref = pu_open_ref(model);
    size_t t, nref;
    int32_t *ids = pu_read_case_ids(ref, c, &t);
    float *want = pu_read_case_f32(ref, c, "logits", &nref);

    /* the case's ids as the HF name input_ids, [1, T] I32 */
    char in_path[1200];
    snprintf(in_path, sizeof in_path, "%s/in.safetensors", tmp);
    pu_write_ids(in_path, ids, t);

    float *first = NULL;
    for (size_t k = 0; k < N_CONFIGS; k++) {
        char out_path[1200], cmd[4096];
        snprintf(out_path, sizeof out_path, "%s/out%zu.safetensors", tmp, k);
        snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s' --out '%s' --policy %s --threads %d",
                 tu_tool("tools/rlx-run"), mdir, in_path, out_path, configs[k].policy, configs[k].threads);
        free(pu_run_ok(cmd, 240));
        char label[64], as[64], first_as[64];
        snprintf(label, sizeof label, "(%s, %d threads)", configs[k].policy, configs[k].threads);
        snprintf(as, sizeof as, "%s/%d threads", configs[k].policy, configs[k].threads);
        snprintf(first_as, sizeof first_as, "%s/%d", configs[0].policy, configs[0].threads);
        pu_check_forward_logits(out_path, want, nref, model, c, label, as, first_as, &first);
    }
    free(first);
    free(want);
    free(ids);
    rlx_weights_close(ref);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

/* ---------------------------------------------------------------- generate */

START_TEST(test_generate_parity)
{
    const char *model = models[_i / N_CASES];
    int c = _i % N_CASES;
    char mdir[1024], *tmp = tu_mkdtemp();
    snprintf(mdir, sizeof mdir, "%s", tu_fixture(model));
    rlx_weights *ref = pu_open_ref(model);
    size_t t, nfull, nlog;
    int32_t *ids = pu_read_case_ids(ref, c, &t);
    float *full = pu_read_case_f32(ref, c, "full_logits", &nfull);
    float *want_prefill = pu_read_case_f32(ref, c, "logits", &nlog);
    size_t vocab = nlog / t;
    ck_assert_uint_ge(nfull / vocab, t + N_GEN - 1);

    char rel[256];
    snprintf(rel, sizeof rel, "%s/ref.json", model);
    json_t *rj = pu_load_json(tu_fixture(rel));
    json_t *rc = json_array_get(json_object_get(rj, "cases"), (size_t)c);
    json_t *greedy = json_object_get(rc, "greedy_continuation");
    json_t *margins = json_object_get(rc, "top2_margins");
    ck_assert(json_array_size(greedy) == N_GEN && json_array_size(margins) == N_GEN);

    char ids_arg[1024] = "";
    for (size_t i = 0; i < t; i++)
        snprintf(ids_arg + strlen(ids_arg), sizeof ids_arg - strlen(ids_arg), "%s%d", i ? "," : "", (int)ids[i]);

    float *first = NULL;
    for (size_t k = 0; k < N_CONFIGS; k++) {
        char out_path[1200], cmd[4096], what[160];
        snprintf(what, sizeof what, "%s case %d (%s, %d threads)", model, c, configs[k].policy, configs[k].threads);
        snprintf(out_path, sizeof out_path, "%s/logits%zu.safetensors", tmp, k);
        snprintf(cmd, sizeof cmd,
                 "'%s' generate --model '%s' --ids %s -n %d --greedy --json --logits-out '%s' --policy %s --threads %d",
                 tu_tool("tools/rlx-run"), mdir, ids_arg, N_GEN, out_path, configs[k].policy, configs[k].threads);
        char *out = pu_run_ok(cmd, 240);
        json_t *o = pu_check_generated(out, ids, t, greedy, margins, N_GEN, what);
        ck_assert_msg(json_is_null(json_object_get(o, "text")), "%s: text must be null without tokenizer.json", what);
        /* the backend auto picks: cpu here, cuda under tools/gpu-check.sh */
        const char *want_be = getenv("RLX_TEST_BACKEND");
        ck_assert_str_eq(json_string_value(json_object_get(o, "backend")), want_be ? want_be : "cpu");
        ck_assert_int_eq(json_integer_value(json_object_get(o, "prefill_tokens")), (json_int_t)t);
        ck_assert_int_eq(json_integer_value(json_object_get(o, "decode_tokens")), N_GEN);
        ck_assert(json_is_number(json_object_get(o, "prefill_ms")) && json_is_number(json_object_get(o, "decode_ms")));
        json_decref(o);

        pu_check_generate_logits(out_path, want_prefill, nlog, full, t, vocab, N_GEN, &first,
                                 "the first configuration", what);
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

/* ---------------------------------------------------------------- flows of other blocks */

#define FLOW_INPUTS                                                                               \
    "\"inputs\":[{\"name\":\"input_ids\",\"dtype\":\"I32\",\"shape\":[-1]},"                      \
    "{\"name\":\"positions\",\"dtype\":\"I32\",\"shape\":[-1]},{\"name\":\"pos\",\"dtype\":\"I32\",\"shape\":[1]}]"

/* The layer spelled out in core blocks (attention without a cache: forward only) */
static const char core_flow[] =
    "{\"name\":\"llama-core-blocks\"," FLOW_INPUTS ",\"stages\":["
    "{\"block\":\"token_embed\"},{\"block\":\"rope_tables\"},"
    "{\"repeat\":\"config:num_hidden_layers\",\"stages\":["
    " {\"block\":\"residual_save\"},"
    " {\"block\":\"rms_norm\",\"params\":{\"weight\":\"model.layers.{i}.input_layernorm.weight\"}},"
    " {\"block\":\"self_attn_prefill\",\"params\":{\"prefix\":\"model.layers.{i}.self_attn.\"}},"
    " {\"block\":\"residual_add\"},{\"block\":\"residual_save\"},"
    " {\"block\":\"rms_norm\",\"params\":{\"prefix\":\"model.layers.{i}.post_attention_layernorm.\"}},"
    " {\"block\":\"swiglu\",\"params\":{\"prefix\":\"model.layers.{i}.mlp.\"}},"
    " {\"block\":\"residual_add\"}]},"
    "{\"block\":\"final_norm\"},{\"block\":\"lm_head\"}]}";

/* llama.decoder_layer_composed over the KV cache, plus llama.kv_tap on every layer */
static const char composed_flow[] =
    "{\"name\":\"llama-composed\"," FLOW_INPUTS ",\"stages\":["
    "{\"block\":\"token_embed\"},{\"block\":\"rope_tables\"},"
    "{\"repeat\":\"config:num_hidden_layers\",\"stages\":["
    " {\"block\":\"llama.decoder_layer_composed\",\"params\":{\"prefix\":\"model.layers.{i}.\",\"cache\":\"cache.{i}\"}},"
    " {\"block\":\"llama.kv_tap\",\"params\":{\"cache\":\"cache.{i}\"}}]},"
    "{\"block\":\"final_norm\"},{\"block\":\"lm_head\"}]}";

/* forward through the core-blocks flow and the composed-layer flow: HF logits */
START_TEST(test_flow_core_blocks_forward)
{
    const char *model = models[_i / N_CASES];
    int c = _i % N_CASES;
    char *tmp = tu_mkdtemp();
    rlx_weights *ref = pu_open_ref(model);
    size_t t, nref;
    int32_t *ids = pu_read_case_ids(ref, c, &t);
    float *want = pu_read_case_f32(ref, c, "logits", &nref);
    char in_path[1200];
    snprintf(in_path, sizeof in_path, "%s/in.safetensors", tmp);
    pu_write_ids(in_path, ids, t);

    char *flows[2] = {pu_write_file(tmp, "core.json", core_flow), pu_write_file(tmp, "composed.json", composed_flow)};
    for (int k = 0; k < 2; k++) {
        char out_path[1200], cmd[4096];
        snprintf(out_path, sizeof out_path, "%s/out%d.safetensors", tmp, k);
        snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s' --out '%s' --flow '%s' --policy %s",
                 tu_tool("tools/rlx-run"), tu_fixture(model), in_path, out_path, flows[k], k ? "direct" : "fusable");
        free(pu_run_ok(cmd, 240));
        rlx_weights *out = pu_open_st(out_path);
        size_t n;
        float *got = pu_read_f32(out, "logits", &n);
        ck_assert_uint_eq(n, nref);
        double err = tu_rel_l2(got, want, n);
        printf("flow %s %s case %d: logits rel L2 %.3g\n", flows[k], model, c, err);
        ck_assert_msg(err < 1e-4, "%s case %d, flow %s: logits rel L2 %.3g", model, c, flows[k], err);
        if (k == 1) {
            /* kv_tap: each layer's cache, one row per token here (forward sizes it T) */
            const rlx_tensor_info *kt = rlx_weights_find(out, "cache.0.k");
            ck_assert_msg(kt != NULL, "llama.kv_tap output cache.0.k missing");
            /* [T, nkv, head_dim] (forward may add the batch dim): both fixtures have head_dim 16 */
            int64_t nkv = _i / N_CASES == 0 ? 2 : 4;
            char sb[64];
            ck_assert_msg(kt->shape.ndim >= 3 && kt->shape.dims[kt->shape.ndim - 1] == 16 &&
                              rlx_shape_numel(&kt->shape) == (int64_t)t * nkv * 16,
                          "cache.0.k has shape %s", rlx_shape_str(&kt->shape, sb, sizeof sb));
            ck_assert(rlx_weights_find(out, "cache.2.v") != NULL);
        }
        free(got);
        rlx_weights_close(out);
        free(flows[k]);
    }
    free(want);
    free(ids);
    rlx_weights_close(ref);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

/* generate through the composed layer: same decode parity as the fused one */
START_TEST(test_flow_composed_generate)
{
    const char *model = models[_i];
    char *tmp = tu_mkdtemp();
    rlx_weights *ref = pu_open_ref(model);
    size_t t, nfull, nlog;
    int32_t *ids = pu_read_ids(ref, "case2.input_ids", &t);
    float *full = pu_read_f32(ref, "case2.full_logits", &nfull);
    float *pre_ref = pu_read_f32(ref, "case2.logits", &nlog);
    size_t vocab = nlog / t;
    char ids_arg[1024] = "", out_path[1200], cmd[4096];
    for (size_t i = 0; i < t; i++)
        snprintf(ids_arg + strlen(ids_arg), sizeof ids_arg - strlen(ids_arg), "%s%d", i ? "," : "", (int)ids[i]);
    char *flow = pu_write_file(tmp, "composed.json", composed_flow);
    snprintf(out_path, sizeof out_path, "%s/logits.safetensors", tmp);
    snprintf(cmd, sizeof cmd, "'%s' --model '%s' --ids %s -n %d --greedy --json --logits-out '%s' --flow '%s'",
             tu_tool("tools/rlx-run"), tu_fixture(model), ids_arg, N_GEN, out_path, flow);
    free(pu_run_ok(cmd, 240));
    rlx_weights *lw = pu_open_st(out_path);
    size_t n;
    float *pre = pu_read_f32(lw, "logits", &n);
    ck_assert_msg(tu_rel_l2(pre, pre_ref, nlog) < 1e-4, "%s: composed prefill logits", model);
    float *dec = pu_read_f32(lw, "decode_logits", &n);
    ck_assert_uint_eq(n, (N_GEN - 1) * vocab);
    for (size_t j = 0; j + 1 < N_GEN; j++) {
        double e = tu_rel_l2(dec + j * vocab, full + (t + j) * vocab, vocab);
        ck_assert_msg(e < 1e-4, "%s: composed decode step %zu rel L2 %.3g", model, j, e);
    }
    free(pre);
    free(dec);
    rlx_weights_close(lw);
    free(flow);
    free(full);
    free(pre_ref);
    free(ids);
    rlx_weights_close(ref);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

/* ---------------------------------------------------------------- CLI contract */

static tu_result run_cli(const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s", tu_tool("tools/rlx-run"), args);
    return tu_run(cmd, 120);
}

static int one_line(const char *s)
{
    const char *nl = strchr(s, '\n');
    return nl && nl[1] == 0;
}

START_TEST(test_cli_usage_errors)
{
    static const char *const bad[] = {
        "--bogus",
        "generate --ids 1,x",
        "generate --model /nonexistent/model --ids 1,x",
        "generate --ids",
        "generate -n -3 --ids 1",
        "generate --policy sideways --ids 1",
        "generate --prompt a --ids 1",
        "generate --greedy --temperature 0.5 --ids 1",
        "frobnicate",
        "forward --model x",
        "forward --model x --inputs y --out z --threads many",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        tu_result r = run_cli(bad[i]);
        ck_assert_msg(r.status == 2, "rlx-run %s: exit %d, expected 2 (stderr: %s)", bad[i], r.status, r.err);
        ck_assert_msg(strncmp(r.err, "rlx-run: ", 9) == 0 && strstr(r.err, "usage: rlx-run"),
                      "rlx-run %s: stderr lacks the error and the usage line: %s", bad[i], r.err);
        tu_result_free(&r);
    }
}
END_TEST

START_TEST(test_cli_errors)
{
    char args[2048];
    tu_result r = run_cli("generate --model /nonexistent/model --ids 1");
    ck_assert_msg(r.status == 1, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strncmp(r.err, "rlx-run: ", 9) == 0 && strstr(r.err, "/nonexistent/model") && one_line(r.err),
                  "stderr: %s", r.err);
    tu_result_free(&r);

    /* no tokenizer.json: --prompt is an error naming the file */
    snprintf(args, sizeof args, "generate --model '%s' --prompt hello", tu_fixture("llama32-tiny"));
    r = run_cli(args);
    ck_assert_msg(r.status == 1 && strstr(r.err, "tokenizer.json") && one_line(r.err), "exit %d: %s", r.status, r.err);
    tu_result_free(&r);

    /* an id outside the vocabulary */
    snprintf(args, sizeof args, "generate --model '%s' --ids 1,99999 -n 2", tu_fixture("llama32-tiny"));
    r = run_cli(args);
    ck_assert_msg(r.status == 1 && strstr(r.err, "99999") && one_line(r.err), "exit %d: %s", r.status, r.err);
    tu_result_free(&r);

    /* forward with an inputs file that does not exist */
    snprintf(args, sizeof args, "forward --model '%s' --inputs /nonexistent/in.safetensors --out /tmp/x.st",
             tu_fixture("llama32-tiny"));
    r = run_cli(args);
    ck_assert_msg(r.status == 1 && strstr(r.err, "/nonexistent/in.safetensors") && one_line(r.err), "exit %d: %s",
                  r.status, r.err);
    tu_result_free(&r);

    /* a profile asking for bf16 compute is honoured: --dump-graph shows the dtypes */
    char *dir = tu_mkdtemp(), prof[1024];
    snprintf(prof, sizeof prof, "%s/bf16.rlx.json", dir);
    FILE *f = fopen(prof, "w");
    ck_assert(f != NULL);
    fputs("{\"precision\": {\"compute\": \"bf16\"}}", f);
    fclose(f);
    snprintf(args, sizeof args, "generate --model '%s' --ids 1,2 -n 2 --profile '%s' --dump-graph", tu_fixture("llama32-tiny"),
             prof);
    r = run_cli(args);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    /* every kernel of a LLaMA step reads and writes bf16 (CPU and GPU): the legaliser needs no casts */
    ck_assert_msg(strstr(r.out, "precision: weights F32 1792 bytes BF16 ") && strstr(r.out, "rlx.matmul") &&
                      strstr(r.out, " BF16[") && !strstr(r.out, "rlx.cast") && strstr(r.out, "casts 0"),
                  "%.300s", r.out);
    tu_result_free(&r);
    /* and a bad precision enum is refused naming it */
    f = fopen(prof, "w");
    ck_assert(f != NULL);
    fputs("{\"precision\": {\"compute\": \"fp8\"}}", f);
    fclose(f);
    r = run_cli(args);
    ck_assert_msg(r.status == 1 && one_line(r.err) && strstr(r.err, "precision.compute") && strstr(r.err, "fp8"),
                  "exit %d: %s", r.status, r.err);
    tu_result_free(&r);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

START_TEST(test_cli_help)
{
    static const char *const flags[] = {"--model", "--prompt", "--ids", "-n", "--greedy", "--temperature",
                                        "--top-k", "--top-p", "--seed", "--repetition-penalty", "--backend",
                                        "--profile", "--threads", "--policy", "--flow", "--dump-flow",
                                        "--dump-graph", "--json", "--logits-out", "--ctx"};
    tu_result r = run_cli("--help");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++)
        ck_assert_msg(strstr(r.out, flags[i]), "--help does not document %s", flags[i]);
    tu_result_free(&r);
    r = run_cli("forward --help");
    ck_assert_int_eq(r.status, 0);
    ck_assert(strstr(r.out, "--inputs") && strstr(r.out, "--out"));
    tu_result_free(&r);
}
END_TEST

/* writes a profile JSON into dir/name and returns its path (static buffer) */
static const char *write_profile(const char *dir, const char *name, const char *json)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    fputs(json, f);
    fclose(f);
    return path;
}

/* backend.cpu.unfuse_regions runs the CPU backend's composites as primitives; passes.verbose prints the
 * compiled graphs on stderr; both keep the logits exact */
START_TEST(test_profile_switches)
{
    char *dir = tu_mkdtemp(), args[2048];
    const char *p = write_profile(dir, "unfuse.rlx.json", "{\"backend\": {\"cpu\": {\"unfuse_regions\": true}}}");
    snprintf(args, sizeof args, "generate --backend cpu --model '%s' --ids 1,2,3 -n 2 --dump-graph --profile '%s'",
             tu_fixture("llama32-tiny"), p);
    tu_result r = run_cli(args);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.out, "decomposed 0") == NULL && strstr(r.out, "rlx.add_rms_norm x") == NULL &&
                      strstr(r.out, "rlx.swiglu x") == NULL && strstr(r.out, "rlx.rms_norm x"),
                  "unfused graph still has composites: %s", r.out);
    tu_result_free(&r);
    snprintf(args, sizeof args, "generate --backend cpu --model '%s' --ids 1,2,3 -n 2 --json --profile '%s'",
             tu_fixture("llama32-tiny"), p);
    tu_result a = run_cli(args);
    snprintf(args, sizeof args, "generate --backend cpu --model '%s' --ids 1,2,3 -n 2 --json", tu_fixture("llama32-tiny"));
    tu_result b = run_cli(args);
    ck_assert_msg(a.status == 0 && b.status == 0, "exit %d / %d: %s %s", a.status, b.status, a.err, b.err);
    ck_assert_msg(strstr(a.out, "\"ids\":[") && strstr(b.out, "\"ids\":["), "%s / %s", a.out, b.out);
    /* the generated ids agree with and without unfusing */
    {
        const char *ia = strstr(a.out, "\"ids\":["), *ib = strstr(b.out, "\"ids\":[");
        size_t la = (size_t)(strchr(ia, ']') - ia), lb = (size_t)(strchr(ib, ']') - ib);
        ck_assert_msg(la == lb && !strncmp(ia, ib, la), "ids differ: %s vs %s", a.out, b.out);
    }
    tu_result_free(&a);
    tu_result_free(&b);

    p = write_profile(dir, "verbose.rlx.json", "{\"passes\": {\"verbose\": true}}");
    snprintf(args, sizeof args, "generate --backend cpu --model '%s' --ids 1,2,3 -n 2 --profile '%s'", tu_fixture("llama32-tiny"), p);
    r = run_cli(args);
    ck_assert_msg(r.status == 0 && strstr(r.err, "graph prefill T=") && strstr(r.err, "graph decode T=1"),
                  "exit %d: %s", r.status, r.err);
    tu_result_free(&r);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("llama_parity");
    TCase *tc = tcase_create("parity");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_forward_parity, 0, 2 * N_CASES);
    tcase_add_loop_test(tc, test_generate_parity, 0, 2 * N_CASES);
    tcase_add_loop_test(tc, test_flow_core_blocks_forward, 0, 2 * N_CASES);
    tcase_add_loop_test(tc, test_flow_composed_generate, 0, 2);
    suite_add_tcase(s, tc);
    TCase *cli = tcase_create("cli");
    tcase_set_timeout(cli, 120);
    tcase_add_test(cli, test_cli_usage_errors);
    tcase_add_test(cli, test_cli_errors);
    tcase_add_test(cli, test_cli_help);
    tcase_add_test(cli, test_profile_switches);
    suite_add_tcase(s, cli);
    return s;
}

int main(void)
{
    return tu_run_suite(suite());
}
