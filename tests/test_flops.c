/* The FLOPs of the programs sessions run (rlx_session_program), counted from the compiled
 * program against figures worked out by hand for the demo model; rlx-bench's prefill
 * GFLOP/s is that count over its time; rlx-run --dump-graph shows the programs generate
 * runs (the last-row prefill, the decode step), labelled, with their FLOPs. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rlx/rlx.h"
#include "testutil.h"

/* models/tiny-llama-py: hidden 256, intermediate 704, 4 layers, 4 heads and 2 KV heads of
 * 64, vocabulary 2048. Per layer and row: q 2·256·256 = 131072, k and v 2·256·128 = 65536
 * each, o 131072, gate and up 2·2·256·704 = 720896, down 2·704·256 = 360448, in all
 * 1474560. The lm_head is 2·256·2048 = 1048576 per row. Attention is 2·(64 + 64) = 256 per
 * head and key, x 4 heads x 4 layers = 4096 per key a row attends to. */
#define ROW 1474560ull
#define HEAD 1048576ull
#define KEY 4096ull

static rlx_model *open_demo(void) { return tu_open_model(tu_src("models/tiny-llama-py"), "cpu", 1); }

static rlx_program_info program(rlx_session *s, int phase, int64_t pos, int64_t n, int all)
{
    rlx_program_info pi;
    rlx_diag d;
    rlx_diag_init(&d);
    memset(&pi, 0xff, sizeof pi);
    ck_assert_msg(rlx_session_program(s, phase, pos, n, all, &pi, NULL, &d) == 0, "%s", d.msg);
    ck_assert_uint_eq(pi.flops, pi.matmul_flops + pi.attention_flops);
    return pi;
}

START_TEST(counts_match_hand_figures)
{
    rlx_model *m = open_demo();
    rlx_session *s = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_session_new(m, 9, &s, &d) == 0, "%s", d.msg);

    /* 6 tokens at 0 run in the 8-row bucket; the lm_head on the last row only; row t of 8
     * attends to t + 1 keys: 36 in all */
    rlx_program_info pi = program(s, RLX_PHASE_PREFILL, 0, 6, 0);
    ck_assert_int_eq(pi.seq_len, 8);
    ck_assert_int_eq(pi.ctx_len, 9);
    ck_assert_int_eq(pi.last_row, 1);
    ck_assert_uint_eq(pi.matmul_flops, 4 * 8 * ROW + HEAD);
    ck_assert_uint_eq(pi.matmul_flops, 48234496ull);
    ck_assert_uint_eq(pi.attention_flops, 36 * KEY);
    ck_assert_uint_eq(pi.flops, 48381952ull);

    /* what rlx_session_prefill then runs is that program: nothing new is compiled */
    int compiled = rlx_model_compiled_count(m);
    int32_t ids[6] = {1, 2, 3, 4, 5, 6};
    float *logits = malloc(2048 * sizeof *logits);
    ck_assert_msg(rlx_session_prefill(s, ids, 6, NULL, logits, &d) == 0, "%s", d.msg);
    ck_assert_int_eq(rlx_model_compiled_count(m), compiled);

    /* every row's logits (--logits-out): the lm_head on all 8 rows */
    pi = program(s, RLX_PHASE_PREFILL, 0, 6, 1);
    ck_assert_int_eq(pi.last_row, 0);
    ck_assert_uint_eq(pi.matmul_flops, 4 * 8 * ROW + 8 * HEAD);
    ck_assert_uint_eq(pi.attention_flops, 36 * KEY);

    /* 4 tokens at position 2 (bucket 4, room 7): rows attend to 3, 4, 5 and 6 keys */
    pi = program(s, RLX_PHASE_PREFILL, 2, 4, 0);
    ck_assert_int_eq(pi.seq_len, 4);
    ck_assert_uint_eq(pi.matmul_flops, 4 * 4 * ROW + HEAD);
    ck_assert_uint_eq(pi.attention_flops, 18 * KEY);

    /* the decode step at position 6 attends to 7 keys; it is the program decode runs */
    pi = program(s, RLX_PHASE_DECODE, 6, 1, 0);
    ck_assert_int_eq(pi.seq_len, 1);
    ck_assert_uint_eq(pi.matmul_flops, 4 * ROW + HEAD);
    ck_assert_uint_eq(pi.attention_flops, 7 * KEY);
    compiled = rlx_model_compiled_count(m);
    ck_assert_msg(rlx_session_decode(s, 7, logits, &d) == 0, "%s", d.msg);
    ck_assert_int_eq(rlx_model_compiled_count(m), compiled);

    /* 3 sessions of this context decoding together at position 7: one row each, each
     * with its lm_head and 8 keys; it is the program rlx_session_decode_batch runs */
    pi = program(s, RLX_PHASE_DECODE, 7, 3, 0);
    ck_assert_int_eq(pi.seq_len, 3);
    ck_assert_int_eq(pi.ctx_len, 9);
    ck_assert_int_eq(pi.last_row, 0);
    ck_assert_uint_eq(pi.matmul_flops, 3 * (4 * ROW + HEAD));
    ck_assert_uint_eq(pi.attention_flops, 3 * 8 * KEY);
    rlx_session *t[3] = {s, NULL, NULL};
    for (int i = 1; i < 3; i++) {
        ck_assert_msg(rlx_session_new(m, 9, &t[i], &d) == 0, "%s", d.msg);
        ck_assert_msg(rlx_session_prefill(t[i], ids, 2 + i, NULL, NULL, &d) == 0, "%s", d.msg);
    }
    compiled = rlx_model_compiled_count(m);
    float *rows = malloc(3 * 2048 * sizeof *rows);
    ck_assert_msg(rlx_session_decode_batch(t, 3, ids, rows, &d) == 0, "%s", d.msg);
    ck_assert_int_eq(rlx_model_compiled_count(m), compiled);
    free(rows);
    rlx_session_free(t[1]);
    rlx_session_free(t[2]);

    /* bad requests name what is wrong */
    ck_assert_int_eq(rlx_session_program(s, RLX_PHASE_DECODE, 9, 2, 0, NULL, NULL, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "rlx_session_program: 2 tokens at position 9 outside the context length 9");
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_session_program(s, RLX_PHASE_PREFILL, 4, 6, 0, NULL, NULL, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "rlx_session_program: 6 tokens at position 4 outside the context length 9");
    free(logits);
    rlx_session_free(s);
    rlx_model_close(m);
}
END_TEST

/* rlx-bench on the demo model, the CPU, one thread, 6 prompt tokens, with args: its JSON */
static json_t *bench_json(const char *args)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' --model '%s' --backend cpu --threads 1 --prefill 6 %s --json",
             tu_tool("tools/rlx-bench"), tu_src("models/tiny-llama-py"), args);
    tu_result r = tu_run(cmd, 300);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    json_error_t e;
    json_t *o = json_loads(r.out, 0, &e);
    ck_assert_msg(o != NULL, "no JSON: %s", r.out);
    tu_result_free(&r);
    return o;
}

/* rlx-bench: the prefill count is the program's, and GFLOP/s is it over the median time */
START_TEST(bench_counts_the_program)
{
    json_t *o = bench_json("--decode 2 --reps 1 --no-reference");
    ck_assert_str_eq(json_string_value(json_object_get(o, "prefill_flops_source")), "program");
    double flops = json_number_value(json_object_get(o, "prefill_flops"));
    ck_assert_msg(flops == 48381952.0, "prefill_flops %.0f, want the 8-row last-row program's 48381952", flops);
    double tps = json_number_value(json_object_get(o, "prefill_tokens_per_s"));
    double gf = json_number_value(json_object_get(o, "prefill_gflops"));
    /* tokens/s = 6 / t, GFLOP/s = flops / t / 1e9 */
    ck_assert_msg(gf > 0 && fabs(gf - flops * tps / 6 / 1e9) <= 1e-9 * gf, "prefill_gflops %g, tokens/s %g", gf, tps);
    ck_assert_ptr_null(json_object_get(o, "reference"));
    ck_assert_ptr_null(json_object_get(o, "floor_source"));
    json_decref(o);
}
END_TEST

/* rlx-bench on the CPU reads the bandwidth reference after each decode rep: the median
 * read lies in its spread, and the floor is the decode's bytes per token at that median */
START_TEST(bench_reads_with_the_decode)
{
    json_t *o = bench_json("--decode 4 --reps 3");
    char *js = json_dumps(o, JSON_COMPACT);
    ck_assert_str_eq(json_string_value(json_object_get(o, "floor_source")), "interleaved");
    json_t *ref = json_object_get(o, "reference"), *sp = json_object_get(ref, "read_gb_per_s_spread");
    ck_assert_msg(json_is_array(sp) && json_array_size(sp) == 2, "no [min,max] spread: %s", js);
    double lo = json_number_value(json_array_get(sp, 0)), hi = json_number_value(json_array_get(sp, 1));
    double rd = json_number_value(json_object_get(ref, "read_gb_per_s"));
    ck_assert_msg(lo > 0 && lo <= rd && rd <= hi, "read %g GB/s outside its spread [%g, %g]", rd, lo, hi);
    ck_assert_msg(json_number_value(json_object_get(ref, "read_scalar_gb_per_s")) > 0, "%s", js);
    ck_assert_msg(json_number_value(json_object_get(ref, "sgemm_gflops")) > 0, "%s", js);
    double ratio = json_number_value(json_object_get(o, "decode_vs_read_bandwidth"));
    ck_assert_msg(ratio > 0 && isfinite(ratio), "decode_vs_read_bandwidth %g", ratio);
    /* bytes per token = decode GB/s / decode tokens/s; floor = median read / bytes per token */
    double tps = json_number_value(json_object_get(o, "decode_tokens_per_s"));
    double gbs = json_number_value(json_object_get(o, "decode_gb_per_s"));
    double floor = json_number_value(json_object_get(o, "decode_floor_tokens_per_s"));
    ck_assert_msg(tps > 0 && gbs > 0 && fabs(floor - rd * tps / gbs) <= 1e-9 * floor,
                  "floor %g tok/s, read %g GB/s, decode %g tok/s at %g GB/s", floor, rd, tps, gbs);
    free(js);
    json_decref(o);
}
END_TEST

/* bytes a decode token streams, as rlx-bench counts them: decode GB/s over tokens/s */
static double bench_bytes(const char *args)
{
    json_t *o = bench_json(args);
    double gbs = json_number_value(json_object_get(o, "decode_gb_per_s"));
    double tps = json_number_value(json_object_get(o, "decode_tokens_per_s"));
    json_decref(o);
    ck_assert_msg(gbs > 0 && tps > 0, "%s: decode %g GB/s at %g tok/s", args, gbs, tps);
    return gbs * 1e9 / tps;
}

/* the bytes follow the dtype the model runs in, whether --precision or a profile set it */
START_TEST(bench_bytes_follow_the_profile)
{
    char *dir = tu_mkdtemp(), path[4096], args[8192];
    snprintf(path, sizeof path, "%s/bf16.rlx.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"precision\": {\"compute\": \"bf16\"}}\n", f);
    ck_assert_int_eq(fclose(f), 0);
    snprintf(args, sizeof args, "--decode 2 --reps 1 --no-reference --profile '%s'", path);
    double by_profile = bench_bytes(args);
    double by_option = bench_bytes("--decode 2 --reps 1 --no-reference --precision bf16");
    double f32 = bench_bytes("--decode 2 --reps 1 --no-reference");
    ck_assert_msg(fabs(by_profile - by_option) <= 1e-9 * by_option, "bf16 by profile %.1f bytes, by option %.1f",
                  by_profile, by_option);
    ck_assert_msg(fabs(f32 - 2 * by_option) <= 1e-9 * f32, "f32 %.1f bytes a token, bf16 %.1f", f32, by_option);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

static void expect(const char *out, const char *fragment)
{
    ck_assert_msg(strstr(out, fragment) != NULL, "no \"%s\" in:\n%s", fragment, out);
}

static void starts(const char *out, const char *prefix)
{
    ck_assert_msg(!strncmp(out, prefix, strlen(prefix)), "does not start with \"%s\":\n%s", prefix, out);
}

/* rlx-run --dump-graph prints the programs generate runs, labelled */
START_TEST(dump_graph_shows_what_runs)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' --model '%s' --backend cpu --ids 1,2,3,4,5,6 -n 3 --dump-graph",
             tu_tool("tools/rlx-run"), tu_src("models/tiny-llama-py"));
    tu_result r = tu_run(cmd, 300);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    starts(r.out, "# prefill: 6 prompt tokens, logits of the last row only\ngraph prefill T=8 ctx=9 last-row: ");
    expect(r.out, " rlx.last_row x1\n");
    expect(r.out, "\nprecision: weights F32 13902848 bytes; states F32 36864 bytes\n");
    expect(r.out, " rlx.matmul         %127,%3 -> %128 F32[1, 2048]\n"); /* dtypes; the lm_head on one row */
    expect(r.out, "\nflops at position 0: 48381952 (matmul 48234496, attention 147456; elementwise not counted)\n"
                  "# decode: one token a step, the first at position 6\ngraph decode T=1 ctx=9: ");
    expect(r.out, "\nflops at position 6: 6975488 (matmul 6946816, attention 28672; elementwise not counted)\n");
    tu_result_free(&r);

    /* with --logits-out the prefill keeps every row; -n 1 runs no decode step */
    char *tmp = tu_mkdtemp();
    snprintf(cmd, sizeof cmd, "'%s' --model '%s' --backend cpu --ids 1,2,3,4,5,6 -n 1 --logits-out '%s/l.safetensors' "
             "--dump-graph", tu_tool("tools/rlx-run"), tu_src("models/tiny-llama-py"), tmp);
    r = tu_run(cmd, 300);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    starts(r.out, "# prefill: 6 prompt tokens, logits of every row (--logits-out)\ngraph prefill T=7 ctx=7: ");
    expect(r.out, "\nflops at position 0: 48742400 (matmul 48627712, attention 114688; elementwise not counted)\n");
    ck_assert_msg(!strstr(r.out, "# decode") && !strstr(r.out, "last-row") && !strstr(r.out, "rlx.last_row"),
                  "%s", r.out);
    tu_result_free(&r);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("flops");
    TCase *tc = tcase_create("flops");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, counts_match_hand_figures);
    tcase_add_test(tc, bench_counts_the_program);
    tcase_add_test(tc, bench_reads_with_the_decode);
    tcase_add_test(tc, bench_bytes_follow_the_profile);
    tcase_add_test(tc, dump_graph_shows_what_runs);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
