/* JSON flow files: the accepted form (printed back) and exact errors with JSON paths. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rlx/rlx.h"
#include "testutil.h"

static char *dir;
#define FORMS "phase=prefill|decode|encode, config:KEY, layer=N, layer=A..B, layer=A.., layer%M=R; ! negates"

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

/* what rlx_flow_print writes for f (caller frees) */
static char *printed(const rlx_flow *f)
{
    FILE *out = tmpfile();
    ck_assert_ptr_nonnull(out);
    rlx_flow_print(f, out);
    char *t = tu_read_stream(out, NULL);
    ck_assert_ptr_nonnull(t);
    fclose(out);
    return t;
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
    char *text = printed(f);
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
    free(text);
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
                 "$.stages[0].stages[0].when: bad condition \"phase=later\" (" FORMS ")");
    expect_error("{\"stages\": [{\"nothing\": 1}]}", "$.stages[0]: a stage needs one of block, repeat, when, sequence");
    expect_error("{\"inputs\": [{\"name\": \"x\", \"dtype\": \"F33\", \"shape\": [1]}], \"stages\": []}",
                 "$.inputs[0].dtype: unknown dtype \"F33\"");
    expect_error("{\"inputs\": [{\"name\": \"x\", \"dtype\": \"F32\", \"shape\": [1, -3]}], \"stages\": []}",
                 "$.inputs[0].shape[1]: expected a dim >= 0, -1 (T) or -2 (S), got an integer");
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

START_TEST(layer_conditions)
{
    const char *p = write_json("layers.json",
        "{\"stages\": [{\"repeat\": 4, \"stages\": ["
        "  {\"when\": \"layer=0\", \"stages\": [{\"block\": \"a\"}]},"
        "  {\"when\": \"layer=1..2\", \"stages\": [{\"block\": \"b\"}]},"
        "  {\"when\": \"layer=2..\", \"stages\": [{\"block\": \"c\"}]},"
        "  {\"when\": \"layer%2=1\", \"stages\": [{\"block\": \"d\"}]},"
        "  {\"sequence\": [{\"when\": \"!layer=0\", \"stages\": [{\"block\": \"e\"}]}]}]}]}");
    rlx_flow *f = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_flow_load_json(p, &f, &d) == 0, "%s", d.msg);
    char *t = printed(f);
    ck_assert_str_eq(t,
        "flow flow\n"
        "  repeat 4 (i = 0..3)\n"
        "    when layer=0\n      stage a {}\n"
        "    when layer=1..2\n      stage b {}\n"
        "    when layer=2..\n      stage c {}\n"
        "    when layer%2=1\n      stage d {}\n"
        "    sequence body\n      when !layer=0\n        stage e {}\n");
    free(t);
    rlx_flow_free(f);

    static const char *const bad[] = {"layer=x", "layer=", "layer=1..0", "layer=-1", "layer%0=0",
                                      "layer%2=2", "layer%2", "layer=1...2", "layer==1", "!!layer=0",
                                      "layers=1", "layer=1234567890", "!phase=later"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[256], want[512];
        snprintf(text, sizeof text, "{\"stages\": [{\"repeat\": 2, \"stages\": [{\"when\": \"%s\", \"stages\": []}]}]}",
                 bad[i]);
        snprintf(want, sizeof want, "$.stages[0].stages[0].when: bad condition \"%s\" (%s)", bad[i], FORMS);
        expect_error(text, want);
    }
    /* the index is a repeat's: a layer condition outside every repeat is refused */
    expect_error("{\"stages\": [{\"when\": \"layer=0\", \"stages\": []}]}",
                 "$.stages[0].when: condition \"layer=0\" is outside any repeat (layer is the innermost repeat's index)");

    rlx_flow *g = rlx_flow_new("g"), *b = rlx_flow_new("b");
    static const char *const good[] = {"layer=0", "layer=0..3", "layer=2..", "layer%2=1", "!layer=0",
                                       "!phase=decode", "!config:tie_word_embeddings", "config:x"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ck_assert_msg(rlx_flow_when(g, good[i], b) == 0, "%s refused", good[i]);
    ck_assert_int_eq(rlx_flow_when(g, "layer=x", b), RLX_ERR_INVALID);
    rlx_flow_free(b);
    rlx_flow_free(g);
}
END_TEST

static int custom_noop(rlx_ctx *c, const rlx_host_api *h, void *u)
{
    (void)c, (void)h, (void)u;
    return 0;
}

/* written back as JSON, a flow loads into the same flow; C code has no JSON form */
START_TEST(writes_json_that_loads_back)
{
    const char *p = write_json("src.json",
        "{\"name\": \"rt\", \"inputs\": [{\"name\": \"ids\", \"dtype\": \"I32\", \"shape\": [-1]},"
        " {\"name\": \"txt\", \"dtype\": \"F32\", \"shape\": [-2, 4]}, {\"name\": \"t\", \"dtype\": \"F32\", \"shape\": []}],"
        " \"stages\": [{\"block\": \"embed\", \"params\": {\"scale\": 0.1, \"w\": \"x.{i}\", \"n\": [1, 2]}},"
        "  {\"repeat\": \"config:num_hidden_layers\", \"stages\": [{\"repeat\": 0, \"stages\": []},"
        "    {\"when\": \"layer%3=2\", \"stages\": [{\"block\": \"l\", \"params\": {\"p\": \"m.{i}.\"}}]}]},"
        "  {\"sequence\": [{\"when\": \"phase=decode\", \"stages\": [{\"block\": \"head\"}]}]}]}");
    rlx_flow *f = NULL, *g = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_flow_load_json(p, &f, &d) == 0, "%s", d.msg);
    char q[4096];
    snprintf(q, sizeof q, "%s/written.json", dir);
    FILE *out = fopen(q, "w");
    ck_assert_msg(rlx_flow_write_json(f, out, &d) == 0, "%s", d.msg);
    fclose(out);
    ck_assert_msg(rlx_flow_load_json(q, &g, &d) == 0, "%s", d.msg);
    char *a = printed(f), *b = printed(g);
    ck_assert_str_eq(a, b);
    ck_assert_ptr_nonnull(strstr(a, "stage embed {\"n\":[1,2],\"scale\":0.10000000000000001,\"w\":\"x.{i}\"}"));
    free(a);
    free(b);
    /* a stage without a body is one line of the file */
    char *text = tu_read_file(q, NULL);
    ck_assert_ptr_nonnull(strstr(text, "\n        {\"block\": \"l\", \"params\": {\"p\": \"m.{i}.\"}}\n"));
    free(text);
    rlx_flow_free(g);

    ck_assert_int_eq(rlx_flow_custom(f, "mine", custom_noop, NULL), 0);
    out = tmpfile();
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_flow_write_json(f, out, &d), RLX_ERR_UNSUPPORTED);
    fclose(out);
    ck_assert_str_eq(d.msg, "flow rt: stage \"mine\" is a custom emitter (C code), which a JSON flow file cannot hold");
    rlx_flow_free(f);
}
END_TEST

/* nesting as deep as the JSON parser takes loads, prints and writes back */
START_TEST(deep_nesting)
{
    enum { DEPTH = 900 };
    size_t cap = DEPTH * 40 + 64, n = 0;
    char *t = malloc(cap);
    n += (size_t)snprintf(t + n, cap - n, "{\"stages\": ");
    for (int i = 0; i < DEPTH; i++) n += (size_t)snprintf(t + n, cap - n, "[{\"repeat\": 1, \"stages\": ");
    n += (size_t)snprintf(t + n, cap - n, "[{\"block\": \"x\"}]");
    for (int i = 0; i < DEPTH; i++) n += (size_t)snprintf(t + n, cap - n, "}]");
    snprintf(t + n, cap - n, "}");
    const char *p = write_json("deep.json", t);
    free(t);
    rlx_flow *f = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_flow_load_json(p, &f, &d) == 0, "%s", d.msg);
    FILE *out = tmpfile();
    ck_assert_msg(rlx_flow_write_json(f, out, &d) == 0, "%s", d.msg);
    ck_assert_int_gt(ftell(out), DEPTH * 20);
    fclose(out);
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
    tcase_add_test(t, layer_conditions);
    tcase_add_test(t, writes_json_that_loads_back);
    tcase_add_test(t, deep_nesting);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return tu_run_suite(suite());
}
