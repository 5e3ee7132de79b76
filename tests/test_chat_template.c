/* Chat template rendering: LLaMA 3, Qwen (2.5 ChatML and Qwen3) and Gemma templates, a
 * 2-turn conversation with add_generation_prompt. The expected strings were rendered
 * from these very template sources with Python jinja2 (as transformers does), not by rlx. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rlx/rlx.h"
#include "testutil.h"

static const char *tpl_llama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";
static const char *tpl_qwen25 =
    "{%- if messages[0]['role'] == 'system' %}\n    {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n{%- else %}\n    {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\\n' }}\n{%- endif %}\n{%- for message in messages %}\n    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or (message.role == \"assistant\") %}\n        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n";
static const char *tpl_qwen3 =
    "{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}\n{%- for message in messages[::-1] %}\n    {%- set index = (messages|length - 1) - loop.index0 %}\n    {%- if ns.multi_step_tool and message.role == \"user\" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}\n        {%- set ns.multi_step_tool = false %}\n        {%- set ns.last_query_index = index %}\n    {%- endif %}\n{%- endfor %}\n{%- for message in messages %}\n    {%- if message.role == \"user\" or message.role == \"system\" %}\n        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n    {%- elif message.role == \"assistant\" %}\n        {%- set content = message.content %}\n        {%- set reasoning_content = '' %}\n        {%- if '</think>' in content %}\n            {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}\n            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}\n        {%- endif %}\n        {%- if loop.index0 > ns.last_query_index %}\n            {%- if loop.last or (not loop.last and reasoning_content) %}\n                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}\n            {%- else %}\n                {{- '<|im_start|>' + message.role + '\\n' + content }}\n            {%- endif %}\n        {%- else %}\n            {{- '<|im_start|>' + message.role + '\\n' + content }}\n        {%- endif %}\n        {{- '<|im_end|>\\n' }}\n    {%- endif %}\n{%- endfor %}\n{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}";
static const char *tpl_gemma =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}";
static const char *want_llama3 =
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello!<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi, how can I help?<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nTell me a joke.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
static const char *want_qwen25 =
    "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello! <|im_end|>\n<|im_start|>assistant\nHi, how can I help?<|im_end|>\n<|im_start|>user\n  Tell me a joke.\n<|im_end|>\n<|im_start|>assistant\n";
static const char *want_qwen3 =
    "<|im_start|>user\nHello! <|im_end|>\n<|im_start|>assistant\nHi, how can I help?<|im_end|>\n<|im_start|>user\n  Tell me a joke.\n<|im_end|>\n<|im_start|>assistant\n";
static const char *want_gemma =
    "<bos><start_of_turn>user\nHello!<end_of_turn>\n<start_of_turn>model\nHi, how can I help?<end_of_turn>\n<start_of_turn>user\nTell me a joke.<end_of_turn>\n<start_of_turn>model\n";
static const char *want_qwen3_last =
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\nok\n</think>\n\nHello there<|im_end|>\n";

static const rlx_chat_message conv[] = {
    {"user", "Hello! "},
    {"assistant", "Hi, how can I help?"},
    {"user", "  Tell me a joke.\n"},
};
static const rlx_chat_message conv_think[] = {
    {"user", "Hello! "},
    {"assistant", "<think>\nthinking it over\n</think>\n\nHi, how can I help?"},
    {"user", "  Tell me a joke.\n"},
};

static void render_eq(const char *tpl, const char *bos, const rlx_chat_message *m, size_t n, int gen,
                      const char *family, const char *want)
{
    rlx_diag d;
    rlx_diag_init(&d);
    rlx_chat_template *t = NULL;
    ck_assert_msg(rlx_chat_template_new(tpl, bos, NULL, "test", &t, &d) == 0, "%s", d.msg);
    ck_assert_str_eq(rlx_chat_template_family(t), family);
    char *out = NULL;
    ck_assert_msg(rlx_chat_template_render(t, m, n, gen, &out, &d) == 0, "%s", d.msg);
    ck_assert_str_eq(out, want);
    free(out);
    rlx_chat_template_free(t);
}

START_TEST(llama3)
{
    render_eq(tpl_llama3, "<|begin_of_text|>", conv, 3, 1, "llama3", want_llama3);
}
END_TEST

START_TEST(qwen25_default_system)
{
    render_eq(tpl_qwen25, NULL, conv, 3, 1, "chatml", want_qwen25);
}
END_TEST

START_TEST(qwen3_reasoning)
{
    /* earlier turns lose their reasoning; the final assistant turn keeps it */
    render_eq(tpl_qwen3, NULL, conv_think, 3, 1, "chatml", want_qwen3);
    static const rlx_chat_message last[] = {{"user", "Hi"}, {"assistant", "<think>\n\nok\n</think>\n\nHello there"}};
    render_eq(tpl_qwen3, NULL, last, 2, 0, "chatml", want_qwen3_last);
}
END_TEST

START_TEST(gemma)
{
    render_eq(tpl_gemma, "<bos>", conv, 3, 1, "gemma", want_gemma);
    rlx_diag d;
    rlx_diag_init(&d);
    rlx_chat_template *t = NULL;
    ck_assert(rlx_chat_template_new(tpl_gemma, "<bos>", "<eos>", "test", &t, &d) == 0);
    ck_assert_str_eq(rlx_chat_template_end_of_turn(t), "<end_of_turn>");
    char *out = NULL;
    static const rlx_chat_message sys[] = {{"system", "Be brief."}, {"user", "Hi"}};
    ck_assert_int_eq(rlx_chat_template_render(t, sys, 2, 1, &out, &d), RLX_ERR_INVALID);
    ck_assert_msg(strstr(d.msg, "System role not supported") != NULL, "%s", d.msg);
    static const rlx_chat_message twice[] = {{"user", "a"}, {"user", "b"}};
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_chat_template_render(t, twice, 2, 1, &out, &d), RLX_ERR_INVALID);
    ck_assert_msg(strstr(d.msg, "roles must alternate") != NULL, "%s", d.msg);
    ck_assert_ptr_null(out);
    rlx_chat_template_free(t);
}
END_TEST

START_TEST(unsupported_template)
{
    rlx_diag d;
    rlx_diag_init(&d);
    rlx_chat_template *t = NULL;
    int rc = rlx_chat_template_new("{% for m in messages %}### {{ m.role }}: {{ m.content }}\n{% endfor %}", NULL,
                                   NULL, "some/tokenizer_config.json", &t, &d);
    ck_assert_int_eq(rc, RLX_ERR_UNSUPPORTED);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(d.msg, "some/tokenizer_config.json: chat_template: unsupported template") != NULL, "%s",
                  d.msg);
}
END_TEST

START_TEST(load_from_model_dir)
{
    /* the demo model has a tokenizer_config.json without chat_template */
    rlx_diag d;
    rlx_diag_init(&d);
    rlx_chat_template *t = NULL;
    ck_assert_int_eq(rlx_chat_template_load(tu_src("models/tiny-llama-py"), &t, &d), RLX_ERR_NOT_FOUND);
    ck_assert_msg(strstr(d.msg, "tokenizer_config.json: the model has no chat_template") != NULL, "%s", d.msg);
    /* a folder with one: bos_token given as an object, as older configs do */
    char *dir = tu_mkdtemp();
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert(f != NULL);
    fprintf(f, "{\"bos_token\":{\"content\":\"<bos>\"},\"eos_token\":\"<eos>\",\"chat_template\":\"%s\"}",
            "{{ bos_token }}{% for message in messages %}<start_of_turn>{{ message['content'] | trim }}<end_of_turn>\\n{% endfor %}");
    fclose(f);
    rlx_diag_init(&d);
    ck_assert_msg(rlx_chat_template_load(dir, &t, &d) == 0, "%s", d.msg);
    char *out = NULL;
    static const rlx_chat_message one[] = {{"user", "Hi"}};
    ck_assert(rlx_chat_template_render(t, one, 1, 1, &out, &d) == 0);
    ck_assert_str_eq(out, "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n");
    free(out);
    rlx_chat_template_free(t);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("chat_template");
    TCase *tc = tcase_create("render");
    tcase_add_test(tc, llama3);
    tcase_add_test(tc, qwen25_default_system);
    tcase_add_test(tc, qwen3_reasoning);
    tcase_add_test(tc, gemma);
    tcase_add_test(tc, unsupported_template);
    tcase_add_test(tc, load_from_model_dir);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
