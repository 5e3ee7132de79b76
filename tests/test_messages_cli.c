/* Errors name what is at fault: a prompt id the tokenizer made is blamed on tokenizer.json,
 * not on --ids; an id out of an embedding table's range is named by its input
 * (token_type_ids, positions), not by a kernel node; forward lists and takes only the
 * inputs a caller may give; a flow's repeat counts are bounded, the file and key named;
 * the README's example flow generates over the KV cache. Exact stderr, exit 1. */
#define _GNU_SOURCE
#include "rlx/rlx.h"
#include "testutil.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *rlx_run(void)
{
    static char p[4096];
    snprintf(p, sizeof p, "%s", tu_tool("tools/rlx-run"));
    return p;
}

/* cmd fails with status 1 and stderr exactly want */
static void expect_err(const char *cmd, const char *want)
{
    tu_result r = tu_run(cmd, 60);
    ck_assert_msg(r.status == 1, "exit %d (want 1)\n$ %s\nstderr: %s", r.status, cmd, r.err);
    ck_assert_msg(strcmp(r.err, want) == 0, "$ %s\nstderr: '%s'\nwant:   '%s'", cmd, r.err, want);
    tu_result_free(&r);
}

static void link_into(const char *dir, const char *src_dir, const char *file)
{
    char src[1024], dst[1024];
    snprintf(src, sizeof src, "%s/%s", src_dir, file);
    snprintf(dst, sizeof dst, "%s/%s", dir, file);
    ck_assert_int_eq(symlink(src, dst), 0);
}

/* a safetensors file of I32 tensors [1, n] */
static void write_ids(const char *path, const char *const *names, const int32_t *const *vals, const int64_t *n,
                      size_t k)
{
    rlx_st_writer *w = rlx_st_writer_new();
    for (size_t i = 0; i < k; i++) {
        rlx_shape s = {2, {1, n[i]}};
        ck_assert_int_eq(rlx_st_writer_add(w, names[i], RLX_I32, &s, vals[i], NULL), 0);
    }
    ck_assert_int_eq(rlx_st_writer_save(w, path, NULL), 0);
    rlx_st_writer_free(w);
}

static void write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* the micro model (vocabulary 16) with the demo's tokenizer (2048 tokens) */
START_TEST(prompt_ids_blame_the_tokenizer)
{
    char *m = tu_mkdtemp(), micro[1024], cmd[16384], want[16384];
    snprintf(micro, sizeof micro, "%s", tu_src("tests/bad-inputs/good-micro"));
    link_into(m, micro, "config.json");
    link_into(m, micro, "model.safetensors");
    link_into(m, tu_src("models/tiny-llama-py"), "tokenizer.json");
    snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --prompt 'def main' -n 2", rlx_run(), m);
    snprintf(want, sizeof want,
             "rlx-run: --prompt: %s/tokenizer.json gives token id 484, outside the vocabulary [0, 16) of "
             "%s/config.json\n", m, m);
    expect_err(cmd, want);
    snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids 1,16 -n 2", rlx_run(), m);
    snprintf(want, sizeof want, "rlx-run: --ids: token id 16 is outside the vocabulary [0, 16) of %s/config.json\n", m);
    expect_err(cmd, want);
    tu_rmrf(m);
    free(m);
}
END_TEST

/* bert-tiny: 2 token types, 64 positions */
START_TEST(embedding_ids_named_by_input)
{
    char *t = tu_mkdtemp(), in[1024], out[1024], cmd[16384];
    snprintf(in, sizeof in, "%s/in.safetensors", t);
    snprintf(out, sizeof out, "%s/out.safetensors", t);
    static const int32_t ids[70] = {1, 2, 3, 4}, types[4] = {0, 5, 0, 0}, neg[4] = {0, -1, 0, 0},
                         pos[4] = {0, 1, 64, 3};
    static const struct {
        const char *name;
        const int32_t *vals;
        int64_t n;
        const char *want;
    } cases[] = {
        {"token_type_ids", types, 4,
         "rlx-run: input tensor \"token_type_ids\": 5 at position 1 is outside [0, 2), the rows of "
         "embeddings.token_type_embeddings.weight\n"},
        {"token_type_ids", neg, 4,
         "rlx-run: input tensor \"token_type_ids\": -1 at position 1 is outside [0, 2), the rows of "
         "embeddings.token_type_embeddings.weight\n"},
        {"positions", pos, 4,
         "rlx-run: input tensor \"positions\": 64 at position 2 is outside [0, 64), the rows of "
         "embeddings.position_embeddings.weight\n"},
        /* 70 tokens and no positions: the default positions run past the table */
        {NULL, NULL, 70,
         "rlx-run: input tensor \"positions\" (not given: 0, 1, 2, ... one per token): 64 at position 64 is "
         "outside [0, 64), the rows of embeddings.position_embeddings.weight\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *names[2] = {"input_ids", cases[i].name};
        const int32_t *vals[2] = {ids, cases[i].vals};
        int64_t n[2] = {cases[i].n, cases[i].n};
        write_ids(in, names, vals, n, cases[i].name ? 2 : 1);
        snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s' --out '%s'", rlx_run(),
                 tu_fixture("bert-tiny"), in, out);
        expect_err(cmd, cases[i].want);
        ck_assert_msg(access(out, F_OK) != 0, "case %zu: an output was written", i);
    }
    tu_rmrf(t);
    free(t);
}
END_TEST

/* The demo through forward: pos is the runtime's, not listed and refused; positions is
 * honoured (0..T-1 given = not given; shifted = other logits). */
START_TEST(forward_inputs)
{
    char *t = tu_mkdtemp(), in[1024], out[3][1024], cmd[16384], demo[1024];
    snprintf(demo, sizeof demo, "%s", tu_src("models/tiny-llama-py"));
    snprintf(in, sizeof in, "%s/in.safetensors", t);
    static const int32_t ids[4] = {1, 2, 3, 4}, iota[4] = {0, 1, 2, 3}, shifted[4] = {5, 6, 7, 8}, zero[1] = {0};
    const char *names[2] = {"input_ids", "pos"};
    const int32_t *vals[2] = {ids, zero};
    int64_t n[2] = {4, 1};
    write_ids(in, names, vals, n, 2);
    snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s' --out '%s/o.safetensors'", rlx_run(), demo, in, t);
    expect_err(cmd, "rlx-run: input tensor \"pos\": the KV cache position, set by the runtime (forward starts "
                    "from an empty cache), not an input (inputs: input_ids, positions)\n");
    names[1] = "attention_mask";
    write_ids(in, names, vals, n, 2);
    expect_err(cmd, "rlx-run: input tensor \"attention_mask\": not an input of this model (inputs: input_ids, "
                    "positions)\n");
    const int32_t *const pv[3] = {NULL, iota, shifted};
    names[1] = "positions";
    for (int k = 0; k < 3; k++) {
        vals[1] = pv[k];
        n[1] = 4;
        write_ids(in, names, vals, n, k ? 2 : 1);
        snprintf(out[k], sizeof out[k], "%s/out%d.safetensors", t, k);
        snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s' --out '%s'", rlx_run(), demo, in, out[k]);
        tu_result r = tu_run(cmd, 60);
        ck_assert_msg(r.status == 0, "%s", r.err);
        tu_result_free(&r);
    }
    size_t l0, l1, l2;
    char *a = tu_read_file(out[0], &l0), *b = tu_read_file(out[1], &l1), *c = tu_read_file(out[2], &l2);
    ck_assert(a && b && c && l0 == l1 && l0 == l2);
    ck_assert_msg(memcmp(a, b, l0) == 0, "positions 0..3 given differ from positions not given");
    ck_assert_msg(memcmp(a, c, l0) != 0, "positions 5..8 were ignored");
    free(a);
    free(b);
    free(c);

    /* a flow input that no stage reads is refused when given, not ignored */
    char flow[1024];
    snprintf(flow, sizeof flow, "%s/extra.flow.json", t);
    write_text(flow, "{\"name\":\"extra\",\"inputs\":[{\"name\":\"input_ids\",\"dtype\":\"I32\",\"shape\":[-1]},"
                     "{\"name\":\"extra\",\"dtype\":\"I32\",\"shape\":[-1]}],"
                     "\"stages\":[{\"block\":\"token_embed\"},{\"block\":\"final_norm\"},{\"block\":\"lm_head\"}]}");
    names[1] = "extra";
    vals[1] = iota;
    write_ids(in, names, vals, n, 2);
    snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --flow '%s' --inputs '%s' --out '%s/o.safetensors'",
             rlx_run(), demo, flow, in, t);
    expect_err(cmd, "rlx-run: input tensor \"extra\": declared by the flow but read by none of its stages, so it "
                    "would be ignored\n");
    tu_rmrf(t);
    free(t);
}
END_TEST

/* "ids":[...] of a --json result */
static char *ids_of(const char *json)
{
    const char *p = strstr(json, "\"ids\":");
    ck_assert_ptr_nonnull(p);
    return strndup(p, strcspn(p, "]") + 1);
}

/* README: examples/flows/llama-core-blocks.flow.json is the LLaMA recipe in core blocks */
START_TEST(example_flow_generates)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids 0,484,582,264 -n 12 --greedy --json", rlx_run(),
             tu_src("models/tiny-llama-py"));
    tu_result recipe = tu_run(cmd, 60);
    snprintf(cmd + strlen(cmd), sizeof cmd - strlen(cmd), " --flow '%s'",
             tu_src("examples/flows/llama-core-blocks.flow.json"));
    tu_result flow = tu_run(cmd, 60);
    ck_assert_msg(recipe.status == 0, "%s", recipe.err);
    ck_assert_msg(flow.status == 0, "%s", flow.err);
    char *a = ids_of(recipe.out), *b = ids_of(flow.out);
    ck_assert_str_eq(a, b);
    free(a);
    free(b);
    tu_result_free(&recipe);
    tu_result_free(&flow);
}
END_TEST

/* repeat counts past the bound fail at once (no gigabytes of unrolled stages) */
START_TEST(repeat_bounded)
{
#define BODY "\"stages\":[{\"block\":\"residual_save\"}]}"
    static const struct {
        const char *stage, *want;
    } cases[] = {
        {"{\"repeat\":1000000000," BODY, ": $.stages[1].repeat: 1000000000 is more than 256, the most a flow repeats\n"},
        {"{\"repeat\":\"config:vocab_size\"," BODY,
         ": flow big: repeat count config:vocab_size is 2048, more than 256, the most a flow repeats\n"},
        {"{\"repeat\":256,\"stages\":[{\"repeat\":256,\"stages\":[{\"repeat\":256," BODY "]}]}",
         ": flow big: unrolls to more than 65536 stages (nested repeats)\n"},
    };
#undef BODY
    char *t = tu_mkdtemp(), flow[1024], text[2048], cmd[16384], want[8192];
    snprintf(flow, sizeof flow, "%s/big.flow.json", t);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(text, sizeof text,
                 "{\"name\":\"big\",\"inputs\":[{\"name\":\"input_ids\",\"dtype\":\"I32\",\"shape\":[-1]}],"
                 "\"stages\":[{\"block\":\"token_embed\"},%s,{\"block\":\"lm_head\"}]}",
                 cases[i].stage);
        write_text(flow, text);
        snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --flow '%s' --ids 1,2 -n 2", rlx_run(),
                 tu_src("models/tiny-llama-py"), flow);
        snprintf(want, sizeof want, "rlx-run: %s%s", flow, cases[i].want);
        expect_err(cmd, want);
    }
    tu_rmrf(t);
    free(t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("messages_cli");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, prompt_ids_blame_the_tokenizer);
    tcase_add_test(tc, embedding_ids_named_by_input);
    tcase_add_test(tc, forward_inputs);
    tcase_add_test(tc, example_flow_generates);
    tcase_add_test(tc, repeat_bounded);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
