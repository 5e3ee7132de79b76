/* The bundled demo model (models/tiny-llama-py): rlx-run's greedy continuations equal
 * the ids transformers generated (reference.json), chained on the device or stepped
 * through the host, and rlx-run with no arguments generates text from it. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "testutil.h"

static json_t *reference(void)
{
    json_error_t e;
    const char *path = tu_src("models/tiny-llama-py/reference.json");
    json_t *j = json_load_file(path, 0, &e);
    ck_assert_msg(j != NULL, "%s: %s", path, e.text);
    return j;
}

static json_t *run_json(const char *args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s", tu_tool("tools/rlx-run"), args);
    tu_result r = tu_run(cmd, 240);
    ck_assert_msg(r.status == 0, "`%s` exited %d: %s", cmd, r.status, r.err);
    json_error_t e;
    json_t *o = json_loads(r.out, 0, &e);
    ck_assert_msg(o != NULL, "`%s`: stdout is not JSON (%s): %s", cmd, e.text, r.out);
    tu_result_free(&r);
    return o;
}

static void ids_equal(json_t *got, json_t *want, const char *what)
{
    ck_assert_msg(json_array_size(got) == json_array_size(want), "%s: %zu ids, reference %zu", what,
                  json_array_size(got), json_array_size(want));
    for (size_t i = 0; i < json_array_size(want); i++)
        ck_assert_msg(json_integer_value(json_array_get(got, i)) == json_integer_value(json_array_get(want, i)),
                      "%s: id %zu is %lld, reference %lld", what, i,
                      (long long)json_integer_value(json_array_get(got, i)),
                      (long long)json_integer_value(json_array_get(want, i)));
}

static void ids_arg(json_t *arr, char *buf, size_t len)
{
    buf[0] = 0;
    for (size_t i = 0; i < json_array_size(arr); i++)
        snprintf(buf + strlen(buf), len - strlen(buf), "%s%lld", i ? "," : "",
                 (long long)json_integer_value(json_array_get(arr, i)));
}

/* --ids prompt_ids -n 24 --greedy --json: the listed continuation, exactly */
START_TEST(test_demo_reference_ids)
{
    json_t *ref = reference();
    json_t *c = json_array_get(json_object_get(ref, "cases"), (size_t)_i);
    ck_assert(c != NULL);
    char ids[1024], args[2048], what[64];
    ids_arg(json_object_get(c, "prompt_ids"), ids, sizeof ids);
    snprintf(args, sizeof args, "--ids %s -n 24 --greedy --json", ids);
    snprintf(what, sizeof what, "demo case %d", _i);
    json_t *o = run_json(args);
    ids_equal(json_object_get(o, "prompt_ids"), json_object_get(c, "prompt_ids"), what);
    ids_equal(json_object_get(o, "ids"), json_object_get(c, "generated_ids"), what);
    json_decref(o);
    json_decref(ref);
}
END_TEST

/* --prompt TEXT: encoded with BOS as the reference did, decoded to the reference text */
START_TEST(test_demo_reference_text)
{
    json_t *ref = reference();
    json_t *c = json_array_get(json_object_get(ref, "cases"), (size_t)_i);
    char args[2048], what[64];
    const char *prompt = json_string_value(json_object_get(c, "prompt"));
    ck_assert(prompt && !strchr(prompt, '\''));
    snprintf(args, sizeof args, "--prompt '%s' -n 24 --greedy --json", prompt);
    snprintf(what, sizeof what, "demo case %d (--prompt)", _i);
    json_t *o = run_json(args);
    ids_equal(json_object_get(o, "prompt_ids"), json_object_get(c, "prompt_ids"), what);
    ids_equal(json_object_get(o, "ids"), json_object_get(c, "generated_ids"), what);
    ck_assert_str_eq(json_string_value(json_object_get(o, "text")),
                     json_string_value(json_object_get(c, "generated_text")));
    json_decref(o);
    json_decref(ref);
}
END_TEST

/* no arguments at all: text from the bundled model on stdout, a summary on stderr */
START_TEST(test_demo_no_args)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "unset RLX_MODEL_DIR; '%s'", tu_tool("tools/rlx-run"));
    tu_result r = tu_run(cmd, 240);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strlen(r.out) > 8, "no text generated: '%s'", r.out);
    ck_assert_msg(strstr(r.err, "tok/s"), "no tokens/s summary on stderr: %s", r.err);
    tu_result_free(&r);
}
END_TEST

/* $RLX_MODEL_DIR picks the default model: a wrong one is an error naming it */
START_TEST(test_demo_model_dir_env)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "RLX_MODEL_DIR=/nonexistent/demo '%s' --ids 0 -n 1", tu_tool("tools/rlx-run"));
    tu_result r = tu_run(cmd, 60);
    ck_assert_msg(r.status == 1 && strstr(r.err, "/nonexistent/demo"), "exit %d: %s", r.status, r.err);
    tu_result_free(&r);
}
END_TEST

/* greedy steps chain on the device unless RLX_RUN_HOST_STEPS=1 or a repetition penalty
 * needs the host: the same reference ids every way, the summary says which ran */
START_TEST(test_demo_chain_and_host_steps)
{
    json_t *ref = reference();
    json_t *c = json_array_get(json_object_get(ref, "cases"), 0);
    char ids[1024], cmd[4096];
    ids_arg(json_object_get(c, "prompt_ids"), ids, sizeof ids);
    static const char *const how[] = {"", "RLX_RUN_HOST_STEPS=1 "};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s'%s' --ids %s -n 24 --greedy --json", how[k], tu_tool("tools/rlx-run"), ids);
        tu_result r = tu_run(cmd, 240);
        ck_assert_msg(r.status == 0, "`%s` exited %d: %s", cmd, r.status, r.err);
        json_t *o = json_loads(r.out, 0, NULL);
        ck_assert_msg(o != NULL, "`%s`: %s", cmd, r.out);
        ids_equal(json_object_get(o, "ids"), json_object_get(c, "generated_ids"), cmd);
        ck_assert_msg((strstr(r.err, "greedy steps chained on the device") == NULL) == k, "`%s`: %s", cmd, r.err);
        json_decref(o);
        tu_result_free(&r);
    }
    snprintf(cmd, sizeof cmd, "'%s' --ids %s -n 8 --greedy --repetition-penalty 1.3", tu_tool("tools/rlx-run"), ids);
    tu_result r = tu_run(cmd, 240);
    ck_assert_msg(r.status == 0 && !strstr(r.err, "chained"), "`%s` exited %d: %s", cmd, r.status, r.err);
    tu_result_free(&r);
    json_decref(ref);
}
END_TEST

/* an EOS inside a chained chunk ends the text there, as a step at a time does: the demo
 * model with generation_config.json's eos_token_id set to its 7th greedy id */
START_TEST(test_demo_chain_stops_at_eos)
{
    json_t *ref = reference();
    json_t *c = json_array_get(json_object_get(ref, "cases"), 0);
    json_t *want = json_object_get(c, "generated_ids");
    ck_assert_int_ge(json_array_size(want), 12);
    long long eos = json_integer_value(json_array_get(want, 6));
    size_t stop = 0;
    while (json_integer_value(json_array_get(want, stop)) != eos) stop++; /* its first place */
    char *dir = tu_mkdtemp(), ids[1024], cmd[8192], path[4096], src[4096];
    static const char *const files[] = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, files[i]);
        snprintf(src, sizeof src, "%s/%s", tu_src("models/tiny-llama-py"), files[i]);
        ck_assert_msg(symlink(src, path) == 0, "symlink %s", path);
    }
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"bos_token_id\": 0, \"eos_token_id\": %lld}\n", eos);
    fclose(f);
    ids_arg(json_object_get(c, "prompt_ids"), ids, sizeof ids);
    static const char *const how[] = {"", "RLX_RUN_HOST_STEPS=1 "};
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof cmd, "%s'%s' --model '%s' --ids %s -n 24 --json", how[k], tu_tool("tools/rlx-run"), dir, ids);
        tu_result r = tu_run(cmd, 240);
        ck_assert_msg(r.status == 0, "`%s` exited %d: %s", cmd, r.status, r.err);
        json_t *o = json_loads(r.out, 0, NULL), *got = o ? json_object_get(o, "ids") : NULL;
        ck_assert_msg(got != NULL, "`%s`: %s", cmd, r.out);
        ck_assert_msg(json_array_size(got) == stop + 1, "`%s`: %zu ids, want %zu (up to the EOS %lld)", cmd,
                      json_array_size(got), stop + 1, eos);
        for (size_t i = 0; i <= stop; i++)
            ck_assert_int_eq(json_integer_value(json_array_get(got, i)), json_integer_value(json_array_get(want, i)));
        ck_assert_int_eq(json_integer_value(json_object_get(o, "decode_tokens")), (json_int_t)(stop + 1));
        json_decref(o);
        tu_result_free(&r);
    }
    json_decref(ref);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("demo");
    TCase *tc = tcase_create("demo");
    tcase_set_timeout(tc, 300);
    tcase_add_loop_test(tc, test_demo_reference_ids, 0, 3);
    tcase_add_loop_test(tc, test_demo_reference_text, 0, 3);
    tcase_add_test(tc, test_demo_no_args);
    tcase_add_test(tc, test_demo_model_dir_env);
    tcase_add_test(tc, test_demo_chain_and_host_steps);
    tcase_add_test(tc, test_demo_chain_stops_at_eos);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run_suite(suite());
}
