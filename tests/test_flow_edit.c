/* Editing a recipe's flow: `rlx-run --dump-flow --json` gives a file that --flow runs
 * bit-identically, and a `when: layer=…` stage swaps single layers (the example flow
 * composes layer 0 of llama32-tiny from core blocks over the KV cache). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "parity_util.h"
#include "rlx/rlx.h"
#include "testutil.h"

#define N_GEN 6

/* generate N_GEN greedy tokens after case 0's prompt; prefill and decode logits */
static void generate(const char *model, const char *tmp, const char *tag, const char *extra, float **pre,
                     size_t *npre, float **dec, size_t *ndec)
{
    rlx_weights *ref = pu_open_ref(model);
    size_t t;
    int32_t *ids = pu_read_case_ids(ref, 0, &t);
    char ids_arg[1024], out_path[1200], cmd[4096];
    pu_ids_arg(ids_arg, sizeof ids_arg, ids, t);
    snprintf(out_path, sizeof out_path, "%s/%s.safetensors", tmp, tag);
    snprintf(cmd, sizeof cmd, "'%s' --model '%s' --ids %s -n %d --greedy --json --threads 1 --logits-out '%s' %s",
             tu_tool("tools/rlx-run"), tu_fixture(model), ids_arg, N_GEN, out_path, extra);
    free(pu_run_ok(cmd, 240));
    rlx_weights *w = pu_open_st(out_path);
    *pre = pu_read_f32(w, "logits", npre);
    *dec = pu_read_f32(w, "decode_logits", ndec);
    rlx_weights_close(w);
    free(ids);
    rlx_weights_close(ref);
}

/* a's logits equal b's bit for bit (what names the pair) */
static void same_logits(const char *model, const char *tmp, const char *extra_a, const char *extra_b,
                        const char *what)
{
    float *pa, *da, *pb, *db;
    size_t npa, nda, npb, ndb;
    generate(model, tmp, "a", extra_a, &pa, &npa, &da, &nda);
    generate(model, tmp, "b", extra_b, &pb, &npb, &db, &ndb);
    ck_assert_uint_eq(npa, npb);
    ck_assert_uint_eq(nda, ndb);
    ck_assert_uint_gt(nda, 0);
    printf("%s %s: prefill rel L2 %.3g, decode rel L2 %.3g\n", model, what, tu_rel_l2(pb, pa, npa),
           tu_rel_l2(db, da, nda));
    ck_assert_msg(memcmp(pa, pb, npa * sizeof *pa) == 0, "%s %s: prefill logits differ (rel L2 %.3g)", model,
                  what, tu_rel_l2(pb, pa, npa));
    ck_assert_msg(memcmp(da, db, nda * sizeof *da) == 0, "%s %s: decode logits differ (rel L2 %.3g)", model,
                  what, tu_rel_l2(db, da, nda));
    free(pa);
    free(da);
    free(pb);
    free(db);
}

/* ---------------------------------------------------------------- round trip */

static const char *const rt_models[] = {"llama32-tiny", "qwen3-tiny", "gemma3-tiny"};

START_TEST(dump_json_round_trip)
{
    const char *model = rt_models[_i];
    char *tmp = tu_mkdtemp(), cmd[4096], extra[2048];
    snprintf(cmd, sizeof cmd, "'%s' --model '%s' --dump-flow --json", tu_tool("tools/rlx-run"), tu_fixture(model));
    char *dumped = pu_run_ok(cmd, 120);
    char *flow = pu_write_file(tmp, "recipe.flow.json", dumped);
    ck_assert_msg(strstr(dumped, "\"repeat\": ") && strstr(dumped, "{i}"), "%s: dumped flow:\n%s", model, dumped);
    /* the flow file dumps back to itself */
    snprintf(cmd, sizeof cmd, "'%s' --model '%s' --flow '%s' --dump-flow --json", tu_tool("tools/rlx-run"),
             tu_fixture(model), flow);
    char *again = pu_run_ok(cmd, 120);
    ck_assert_str_eq(again, dumped);
    /* --flow runs without the arch's profiles: the policy is given to both runs */
    for (int k = 0; k < 2; k++) {
        const char *policy = k ? "fusable" : "direct";
        char plain[64], what[64];
        snprintf(plain, sizeof plain, "--policy %s", policy);
        snprintf(extra, sizeof extra, "--policy %s --flow '%s'", policy, flow);
        snprintf(what, sizeof what, "dumped flow (%s)", policy);
        same_logits(model, tmp, plain, extra, what);
    }
    free(again);
    free(dumped);
    free(flow);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

/* ---------------------------------------------------------------- layer 0 swapped */

/* the "ops:" line of rlx-run --dump-graph (prefill) */
static char *ops_line(const char *extra)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' --model '%s' --ids 1,5 --dump-graph %s", tu_tool("tools/rlx-run"),
             tu_fixture("llama32-tiny"), extra);
    char *out = pu_run_ok(cmd, 120);
    char *ops = strstr(out, "\nops: ");
    ck_assert_msg(ops != NULL, "no ops line in:\n%s", out);
    ops = strdup(ops + 1);
    *strchr(ops, '\n') = 0;
    free(out);
    return ops;
}

START_TEST(layer0_from_core_blocks)
{
    const char *policy = _i ? "fusable" : "direct";
    char *tmp = tu_mkdtemp(), plain[64], extra[2048];
    const char *flow = tu_src("examples/flows/llama-layer0-core.flow.json");
    snprintf(plain, sizeof plain, "--policy %s", policy);
    snprintf(extra, sizeof extra, "--policy %s --flow '%s'", policy, flow);
    same_logits("llama32-tiny", tmp, plain, extra, "layer 0 from core blocks");
    if (!_i) {
        /* the swap happened: under "direct" the recipe's layers emit rlx.add_rms_norm (3
         * layers), the core blocks of layer 0 an rlx.add and an rlx.rms_norm instead */
        char *a = ops_line(plain), *b = ops_line(extra);
        ck_assert_msg(strstr(a, "rlx.add_rms_norm x3") && strstr(a, "rlx.rms_norm x4"), "recipe: %s", a);
        ck_assert_msg(strstr(b, "rlx.add_rms_norm x2") && strstr(b, "rlx.rms_norm x5"), "layer-0 flow: %s", b);
        free(a);
        free(b);
    }
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

/* ---------------------------------------------------------------- which layers */

/* llama.kv_tap under `when` exports the caches of the layers the condition picks */
START_TEST(layer_conditions_pick_layers)
{
    static const struct { const char *cond; const char *picked; } cases[] = {
        {"layer=0", "100"}, {"layer=1..2", "011"}, {"layer=1..", "011"}, {"layer=0..1", "110"},
        {"layer%2=1", "010"}, {"layer%2=0", "101"}, {"!layer=1", "101"}, {"layer=7", "000"}};
    char *tmp = tu_mkdtemp();
    char in_path[1200];
    snprintf(in_path, sizeof in_path, "%s/in.safetensors", tmp);
    const int32_t ids[4] = {1, 5, 9, 22};
    pu_write_ids(in_path, ids, 4);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[2048], out_path[1200], cmd[4096];
        snprintf(text, sizeof text,
                 "{\"stages\": [{\"block\": \"token_embed\"}, {\"block\": \"rope_tables\"},"
                 " {\"repeat\": \"config:num_hidden_layers\", \"stages\": ["
                 "  {\"block\": \"llama.decoder_layer\", \"params\": {\"prefix\": \"model.layers.{i}.\"}},"
                 "  {\"when\": \"%s\", \"stages\": [{\"block\": \"llama.kv_tap\", \"params\": {\"cache\": \"cache.{i}\"}}]}]},"
                 " {\"block\": \"final_norm\"}, {\"block\": \"lm_head\"}]}", cases[i].cond);
        char *flow = pu_write_file(tmp, "pick.json", text);
        snprintf(out_path, sizeof out_path, "%s/out%zu.safetensors", tmp, i);
        snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s' --out '%s' --flow '%s'",
                 tu_tool("tools/rlx-run"), tu_fixture("llama32-tiny"), in_path, out_path, flow);
        free(pu_run_ok(cmd, 120));
        rlx_weights *w = pu_open_st(out_path);
        char got[4] = "";
        for (int l = 0; l < 3; l++) {
            char name[32];
            snprintf(name, sizeof name, "cache.%d.k", l);
            got[l] = rlx_weights_find(w, name) ? '1' : '0';
        }
        ck_assert_msg(rlx_weights_find(w, "logits") != NULL, "%s: no logits", cases[i].cond);
        ck_assert_msg(strcmp(got, cases[i].picked) == 0, "when %s: layers %s tapped, want %s", cases[i].cond, got,
                      cases[i].picked);
        rlx_weights_close(w);
        free(flow);
    }
    /* a malformed condition: exit 1, one line naming the flow file and the condition */
    char *bad = pu_write_file(tmp, "bad.json",
                              "{\"stages\": [{\"repeat\": 2, \"stages\": [{\"when\": \"layer=x\", \"stages\": []}]}]}");
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s/in.safetensors' --out '%s/o.safetensors' --flow '%s'",
             tu_tool("tools/rlx-run"), tu_fixture("llama32-tiny"), tmp, tmp, bad);
    tu_result r = tu_run(cmd, 60);
    ck_assert_int_eq(r.status, 1);
    char want[2048];
    snprintf(want, sizeof want, "%s: $.stages[0].stages[0].when: bad condition \"layer=x\"", bad);
    ck_assert_msg(strstr(r.err, want) && strchr(r.err, '\n') == r.err + strlen(r.err) - 1, "stderr: %s", r.err);
    tu_result_free(&r);
    free(bad);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("flow_edit");
    TCase *tc = tcase_create("flow_edit");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, dump_json_round_trip, 0, (int)(sizeof rt_models / sizeof rt_models[0]));
    tcase_add_loop_test(tc, layer0_from_core_blocks, 0, 2);
    tcase_add_test(tc, layer_conditions_pick_layers);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run_suite(suite());
}
