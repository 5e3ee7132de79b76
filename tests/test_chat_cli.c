/* rlx-run chat on the demo model with each supported template family: a line that is not
 * UTF-8 is reported and skipped while the chat goes on, and every turn prefills only what
 * the KV cache does not hold already (the longest common prefix is reused), so a
 * conversation costs its length in prefill, not the sum of all its renderings. */
#include "testutil.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* the template sources test_chat_template renders against jinja2 */
static const char *const templates[][2] = {
    {"llama3", "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
               "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim "
               "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
               "{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
               "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"},
    {"chatml", "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
               "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' "
               "}}{% endif %}"},
    {"qwen25", "{%- if messages[0]['role'] == 'system' %}\\n    {{- '<|im_start|>system\\\\n' + "
               "messages[0]['content'] + '<|im_end|>\\\\n' }}\\n{%- else %}\\n    {{- "
               "'<|im_start|>system\\\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
               "assistant.<|im_end|>\\\\n' }}\\n{%- endif %}\\n{%- for message in messages %}\\n    {%- if "
               "(message.role == \\\"user\\\") or (message.role == \\\"system\\\" and not loop.first) or "
               "(message.role == \\\"assistant\\\") %}\\n        {{- '<|im_start|>' + message.role + '\\\\n' + "
               "message.content + '<|im_end|>' + '\\\\n' }}\\n    {%- endif %}\\n{%- endfor %}\\n{%- if "
               "add_generation_prompt %}\\n    {{- '<|im_start|>assistant\\\\n' }}\\n{%- endif %}\\n"},
    {"gemma", "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
              "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != "
              "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
              "user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set "
              "role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + "
              "'\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt "
              "%}{{'<start_of_turn>model\\n'}}{% endif %}"},
};

/* a model folder: links to the demo's files and a tokenizer_config.json with template t */
static char *chat_model(size_t t)
{
    static const char *const files[] = {"config.json", "generation_config.json", "model.safetensors",
                                        "tokenizer.json"};
    char *dir = tu_mkdtemp(), src[1024], dst[1024];
    for (size_t i = 0; i < 4; i++) {
        snprintf(src, sizeof src, "%s/%s", tu_src("models/tiny-llama-py"), files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        ck_assert_int_eq(symlink(src, dst), 0);
    }
    snprintf(dst, sizeof dst, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(dst, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"bos_token\":\"<|begin_of_text|>\",\"eos_token\":\"<|end_of_text|>\",\"chat_template\":\"%s\"}",
            templates[t][1]);
    ck_assert_int_eq(fclose(f), 0);
    return dir;
}

/* chat with the given stdin (printf format, no arguments), greedy, 8 tokens a reply */
static tu_result chat(const char *dir, const char *input)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "printf '%s' | RLX_LOG=info '%s' chat --model '%s' --greedy -n 8", input,
             tu_tool("tools/rlx-run"), dir);
    return tu_run(cmd, 120);
}

START_TEST(bad_line_skipped)
{
    char *dir = chat_model(0);
    tu_result bad = chat(dir, "hello there\\nbad \\377\\376 line\\n\\355\\240\\200x\\nhow are you\\n");
    tu_result good = chat(dir, "hello there\\nhow are you\\n");
    ck_assert_msg(bad.status == 0, "exit %d: %s", bad.status, bad.err);
    ck_assert_int_eq(good.status, 0);
    ck_assert_msg(strstr(bad.err, "rlx-run: chat: line 2 skipped: not valid UTF-8 (byte 5 is 0xFF)\n"), "%s", bad.err);
    /* a UTF-16 surrogate encoded in UTF-8 is not UTF-8 either */
    ck_assert_msg(strstr(bad.err, "rlx-run: chat: line 3 skipped: not valid UTF-8 (byte 1 is 0xED)\n"), "%s", bad.err);
    /* the conversation goes on as if the bad lines had not been typed */
    ck_assert_str_eq(bad.out, good.out);
    ck_assert_uint_gt(strlen(good.out), 2);
    tu_result_free(&bad);
    tu_result_free(&good);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* six turns: prefilled tokens stay within the last prompt's length plus one a turn (the
 * last token of each reply, which the cache never held); re-prefilling every rendering
 * would cost their sum (about 3.5 times as much here) */
START_TEST(cache_reused_every_template)
{
    static const char six[] = "line number 0 says hello\\nline number 1 says hello\\nline number 2 says hello\\n"
                              "line number 3 says hello\\nline number 4 says hello\\nline number 5 says hello\\n";
    size_t t = (size_t)_i;
    char *dir = chat_model(t);
    tu_result r = chat(dir, six);
    ck_assert_msg(r.status == 0, "%s: exit %d: %s", templates[t][0], r.status, r.err);
    unsigned long reused = 0, prefilled = 0, last = 0;
    const char *p = strstr(r.err, "rlx-run: chat: prompt tokens reused from the cache ");
    ck_assert_msg(p && sscanf(p, "rlx-run: chat: prompt tokens reused from the cache %lu, prefilled %lu; last prompt %lu",
                              &reused, &prefilled, &last) == 3,
                  "%s: %s", templates[t][0], r.err);
    printf("chat %s, 6 turns: prefilled %lu, reused %lu, last prompt %lu tokens\n", templates[t][0], prefilled,
           reused, last);
    ck_assert_msg(prefilled <= last + 6, "%s: prefilled %lu tokens for a last prompt of %lu", templates[t][0],
                  prefilled, last);
    ck_assert_msg(2 * (reused + prefilled) > 5 * last, "%s: %lu + %lu tokens over 6 turns of at most %lu",
                  templates[t][0], reused, prefilled, last);
    tu_result_free(&r);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("chat_cli");
    TCase *tc = tcase_create("chat");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, bad_line_skipped);
    tcase_add_loop_test(tc, cache_reused_every_template, 0, (int)(sizeof templates / sizeof templates[0]));
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
