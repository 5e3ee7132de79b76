/* JSON flow files: the accepted form (printed back) and exact errors with JSON paths. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rlx/rlx.h"
#include "testutil.h"

static char *dir;

static const char *write_json(const char *name, const char *text)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    return path;
}

static void expect_error(const char *text, const char *suffix)
{
    const char *p = write_json("bad.json", text);
    rlx_flow *f = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_ne(rlx_flow_load_json(p, &f, &d), 0);
    ck_assert_ptr_null(f);
    char want[4096];
    snprintf(want, sizeof want, "%s: %s", p, suffix);
    ck_assert_str_eq(d.msg, want);
}

static void setup(void) { dir = tu_mkdtemp(); }
static void teardown(void)
{
    tu_rmrf(dir);
    free(dir);
}

START_TEST(loads_and_prints)
{
    const char *p = write_json("ok.json",
        "{\"name\": \"tiny\", \"inputs\": [{\"name\": \"input_ids\", \"dtype\": \"I32\", \"shape\": [-1]},"
        " {\"name\": \"pos\", \"dtype\": \"I32\", \"shape\": [1]}],"
        " \"stages\": [{\"block\": \"token_embed\", \"params\": {\"prefix\": \"model.\"}},"
        "  {\"repeat\": \"config:num_hidden_layers\", \"stages\": [{\"block\": \"llama.decoder_layer\","
        "     \"params\": {\"prefix\": \"model.layers.{i}.\", \"layer\": \"{i}\"}}]},"
        "  {\"repeat\": 2, \"stages\": [{\"block\": \"noop\"}]},"
        "  {\"when\": \"phase=decode\", \"stages\": [{\"sequence\": [{\"block\": \"lm_head\"}]}]}]}");
    rlx_flow *f = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_flow_load_json(p, &f, &d) == 0, "%s", d.msg);
    FILE *out = tmpfile();
    rlx_flow_print(f, out);
    rewind(out);
    char text[4096];
    size_t n = fread(text, 1, sizeof text - 1, out);
    text[n] = 0;
    fclose(out);
    ck_assert_str_eq(text,
        "flow tiny\n"
        "  input input_ids I32 [T]\n"
        "  input pos I32 [1]\n"
        "  stage token_embed {\"prefix\":\"model.\"}\n"
        "  repeat config:num_hidden_layers (i = 0..n-1)\n"
        "    stage llama.decoder_layer {\"layer\":\"{i}\",\"prefix\":\"model.layers.{i}.\"}\n"
        "  repeat 2 (i = 0..1)\n"
        "    stage noop {}\n"
        "  when phase=decode\n"
        "    sequence body\n"
        "      stage lm_head {}\n");
    rlx_flow_free(f);
}
END_TEST

START_TEST(errors_name_the_json_path)
{
    expect_error("[]", "$: expected an object, got an array");
    expect_error("{\"stages\": [], \"extra\": 1}", "$.extra: unknown key");
    expect_error("{\"name\": \"x\"}", "$.stages: missing (an array of stages)");
    expect_error("{\"stages\": {}}", "$.stages: expected an array, got an object");
    expect_error("{\"stages\": [{\"block\": 3}]}", "$.stages[0].block: expected a string, got an integer");
    expect_error("{\"stages\": [{\"block\": \"a\"}, {\"block\": \"b\", \"params\": []}]}",
                 "$.stages[1].params: expected an object, got an array");
    expect_error("{\"stages\": [{\"block\": \"a\", \"parms\": {}}]}", "$.stages[0].parms: unknown key");
    expect_error("{\"stages\": [{\"repeat\": -1, \"stages\": []}]}",
                 "$.stages[0].repeat: expected a count >= 0 or \"config:KEY\", got an integer");
    expect_error("{\"stages\": [{\"repeat\": 2}]}", "$.stages[0].stages: missing (an array of stages)");
    expect_error("{\"stages\": [{\"repeat\": 2, \"stages\": [{\"when\": \"phase=later\", \"stages\": []}]}]}",
                 "$.stages[0].stages[0].when: bad condition \"phase=later\" (phase=prefill|decode|encode, config:KEY, !config:KEY)");
    expect_error("{\"stages\": [{\"nothing\": 1}]}", "$.stages[0]: a stage needs one of block, repeat, when, sequence");
    expect_error("{\"inputs\": [{\"name\": \"x\", \"dtype\": \"F33\", \"shape\": [1]}], \"stages\": []}",
                 "$.inputs[0].dtype: unknown dtype \"F33\"");
    expect_error("{\"inputs\": [{\"name\": \"x\", \"dtype\": \"F32\", \"shape\": [1, -2]}], \"stages\": []}",
                 "$.inputs[0].shape[1]: expected a dim >= 0 or -1, got an integer");
    expect_error("{\"inputs\": [{\"dtype\": \"F32\", \"shape\": [1]}], \"stages\": []}",
                 "$.inputs[0].name: missing (expected a string)");
}
END_TEST

START_TEST(syntax_error_and_missing_file)
{
    const char *p = write_json("broken.json", "{\"stages\": [");
    rlx_flow *f = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_flow_load_json(p, &f, &d), RLX_ERR_INVALID);
    ck_assert_ptr_nonnull(strstr(d.msg, p));
    rlx_diag_init(&d);
    char missing[4096];
    snprintf(missing, sizeof missing, "%s/nope.json", dir);
    ck_assert_int_eq(rlx_flow_load_json(missing, &f, &d), RLX_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(d.msg, missing));
}
END_TEST

START_TEST(flow_api_rejects_bad_calls)
{
    rlx_flow *f = rlx_flow_new("t");
    rlx_flow *b = rlx_flow_new("b");
    ck_assert_int_eq(rlx_flow_stage(f, "x", "[1]"), RLX_ERR_INVALID);
    ck_assert_int_eq(rlx_flow_stage(f, "x", "{bad"), RLX_ERR_INVALID);
    ck_assert_int_eq(rlx_flow_when(f, "phase=sometimes", b), RLX_ERR_INVALID);
    ck_assert_int_eq(rlx_flow_repeat(f, -1, b), RLX_ERR_INVALID);
    int64_t dims[1] = {-1};
    ck_assert_int_eq(rlx_flow_input(f, "ids", RLX_I32, 1, dims), 0);
    ck_assert_int_eq(rlx_flow_input(f, "ids", RLX_I32, 1, dims), RLX_ERR_INVALID);
    ck_assert_int_eq(rlx_flow_stage(f, "ok", "{\"a\": 1}"), 0);
    rlx_flow_free(b);
    rlx_flow_free(f);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("flow_json");
    TCase *t = tcase_create("json");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, loads_and_prints);
    tcase_add_test(t, errors_name_the_json_path);
    tcase_add_test(t, syntax_error_and_missing_file);
    tcase_add_test(t, flow_api_rejects_bad_calls);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return tu_run_suite(suite());
}
