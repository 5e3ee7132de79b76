/* rlx-run tokenize / detokenize output formats and exit codes, and rlx-run chat end to
 * end on the demo model given a ChatML template (its second reply, prefilled on top of
 * the KV cache, must equal a full-prompt greedy generate). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <jansson.h>
#include "rlx/rlx.h"
#include "testutil.h"

static tu_result run(const char *args)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s", tu_tool("tools/rlx-run"), args);
    return tu_run(cmd, 120);
}

#define DEMO "--model \"$RLX_SRCDIR/models/tiny-llama-py\""

START_TEST(tokenize_plain_and_json)
{
    tu_result r = run("tokenize " DEMO " --text 'class Node:\n    def __init__(self'");
    ck_assert_msg(r.status == 0, "%s", r.err);
    /* prompt_ids of the demo model's reference.json, case 3 (BOS from the post-processor) */
    ck_assert_str_eq(r.out, "0 501 376 481 27 266 354 511 673 553 282\n");
    tu_result_free(&r);
    r = run("tokenize " DEMO " --text 'def ' --json");
    ck_assert_int_eq(r.status, 0);
    ck_assert_str_eq(r.out, "{\"ids\":[0,484,222]}\n");
    tu_result_free(&r);
    r = run("tokenize " DEMO " --text 'def ' --no-special");
    ck_assert_str_eq(r.out, "484 222\n");
    tu_result_free(&r);
    r = run("tokenize --tokenizer \"$RLX_FIXTURES/tokenizers/bytelevel-bpe.json\" --text 'Hello world!' --json");
    ck_assert_str_eq(r.out, "{\"ids\":[41,70,77,319,312,261,77,69,2]}\n");
    tu_result_free(&r);
    r = run("tokenize " DEMO " --text '' --json");
    ck_assert_str_eq(r.out, "{\"ids\":[0]}\n");
    tu_result_free(&r);
}
END_TEST

START_TEST(detokenize_text)
{
    tu_result r = run("detokenize " DEMO " --ids 0,784,725,200,784,813,200");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_str_eq(r.out, "import os\nimport sys\n\n");
    tu_result_free(&r);
    r = run("detokenize " DEMO " --ids 0,484 --keep-special");
    ck_assert_str_eq(r.out, "<|begin_of_text|>def\n");
    tu_result_free(&r);
    r = run("detokenize --tokenizer \"$RLX_FIXTURES/tokenizers/spm-bpe-bytefallback.json\" --ids 300,593,425,362,347,376,336,328,261");
    ck_assert_str_eq(r.out, "Hello world!\n");
    tu_result_free(&r);
}
END_TEST

START_TEST(errors_and_usage)
{
    tu_result r = run("tokenize --text x");
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.err, "needs --model DIR or --tokenizer FILE") != NULL, "%s", r.err);
    tu_result_free(&r);
    r = run("tokenize " DEMO " --text x --bogus");
    ck_assert_int_eq(r.status, 2);
    tu_result_free(&r);
    r = run("detokenize " DEMO " --ids 1,x");
    ck_assert_int_eq(r.status, 2);
    tu_result_free(&r);
    r = run("tokenize --model /nonexistent/model --text x");
    ck_assert_int_eq(r.status, 1);
    ck_assert_str_eq(r.err, "rlx-run: /nonexistent/model/tokenizer.json: No such file or directory\n");
    tu_result_free(&r);
    r = run("detokenize " DEMO " --ids 5,99999");
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "token id 99999 is outside the vocabulary [0, 2048)") != NULL, "%s", r.err);
    ck_assert_msg(strchr(r.err, '\n') == r.err + strlen(r.err) - 1, "one line: %s", r.err);
    tu_result_free(&r);
    r = run("tokenize --tokenizer \"$RLX_SRCDIR/models/tiny-llama-py/config.json\" --text x");
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "config.json: model: must be an object") != NULL, "%s", r.err);
    tu_result_free(&r);
    /* the demo model has no chat template */
    r = run("chat " DEMO " </dev/null");
    ck_assert_int_eq(r.status, 1);
    ck_assert_msg(strstr(r.err, "tokenizer_config.json: the model has no chat_template") != NULL, "%s", r.err);
    tu_result_free(&r);
}
END_TEST

START_TEST(chat_reuses_kv_cache)
{
    char *dir = tu_mkdtemp();
    const char *files[] = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"};
    char a[2048], b[2048];
    for (int i = 0; i < 4; i++) {
        snprintf(a, sizeof a, "%s", tu_src("models/tiny-llama-py"));
        snprintf(b, sizeof b, "%s/%s", dir, files[i]);
        strncat(a, "/", sizeof a - strlen(a) - 1);
        strncat(a, files[i], sizeof a - strlen(a) - 1);
        ck_assert(symlink(a, b) == 0);
    }
    snprintf(b, sizeof b, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(b, "w");
    ck_assert(f != NULL);
    fputs("{\"bos_token\":\"<|begin_of_text|>\",\"eos_token\":\"<|end_of_text|>\",\"chat_template\":"
          "\"{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}\"}",
          f);
    fclose(f);
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "printf 'import os\\nclass A:\\n' | %s chat --model %s --greedy -n 12",
             tu_tool("tools/rlx-run"), dir);
    tu_result r = tu_run(cmd, 120);
    ck_assert_msg(r.status == 0, "%s", r.err);
    char *nl = strchr(r.out, '\n');
    ck_assert(nl != NULL);
    char reply1[512];
    snprintf(reply1, sizeof reply1, "%.*s", (int)(nl - r.out), r.out);
    char *reply2 = nl + 1;
    char *nl2 = strchr(reply2, '\n');
    ck_assert(nl2 != NULL && nl2[1] == 0);
    *nl2 = 0;
    /* the whole second prompt, tokenized without special tokens, then a greedy generate */
    char prompt[2048];
    snprintf(prompt, sizeof prompt,
             "<|im_start|>user\nimport os<|im_end|>\n<|im_start|>assistant\n%s<|im_end|>\n"
             "<|im_start|>user\nclass A:<|im_end|>\n<|im_start|>assistant\n",
             reply1);
    rlx_diag d;
    rlx_diag_init(&d);
    rlx_tokenizer *t = NULL;
    ck_assert(rlx_tokenizer_load(tu_src("models/tiny-llama-py/tokenizer.json"), &t, &d) == 0);
    int32_t *ids;
    size_t n;
    ck_assert(rlx_tokenizer_encode(t, prompt, strlen(prompt), 0, &ids, &n, &d) == 0);
    rlx_tokenizer_free(t);
    char list[8192] = "";
    for (size_t i = 0; i < n; i++) snprintf(list + strlen(list), sizeof list - strlen(list), i ? ",%d" : "%d", ids[i]);
    free(ids);
    snprintf(cmd, sizeof cmd, "%s generate --model %s --ids %s -n 12 --greedy --json", tu_tool("tools/rlx-run"),
             dir, list);
    tu_result g = tu_run(cmd, 120);
    ck_assert_msg(g.status == 0, "%s", g.err);
    json_error_t je;
    json_t *j = json_loads(g.out, 0, &je);
    ck_assert_msg(j != NULL, "%s", g.out);
    ck_assert_str_eq(reply2, json_string_value(json_object_get(j, "text")));
    json_decref(j);
    tu_result_free(&g);
    tu_result_free(&r);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tokenizer_cli");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, tokenize_plain_and_json);
    tcase_add_test(tc, detokenize_text);
    tcase_add_test(tc, errors_and_usage);
    tcase_add_test(tc, chat_reuses_kv_cache);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
