/* rlx-bench --peer-llamacpp runs the peer once (-r 1) after each of its reps, so both are
 * measured in the same minutes, and reports the median of the per-rep ratios. A fake
 * llama-bench (a shell script) logs its calls and prints llama-bench's JSON, other
 * figures each call: llama.cpp itself is not needed. Also rlx-bench's other schedules
 * (--decode-depth), --dump-graph and the --devices JSON's figures. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "testutil.h"

/* dir/name, executable, with body after the #! line */
static const char *script(const char *dir, const char *name, const char *body)
{
    static char path[2][4200];
    static int slot;
    char *p = path[slot++ % 2];
    snprintf(p, 4200, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    ck_assert_msg(f != NULL, "cannot write %s", p);
    fprintf(f, "#!/bin/sh\n%s", body);
    ck_assert_int_eq(fclose(f), 0);
    ck_assert_int_eq(chmod(p, 0755), 0);
    return p;
}

/* call n (1, 2, 3, ...): pp 100n + 0.5 and tg 10n^2 + 0.25 tok/s; each call's args logged */
static const char fake_body[] =
    "d=$(dirname \"$0\")\n"
    "echo \"$*\" >> \"$d/calls.log\"\n"
    "n=$(( $(cat \"$d/count\" 2>/dev/null || echo 0) + 1 ))\n"
    "echo $n > \"$d/count\"\n"
    "printf '[{\"n_prompt\":8,\"n_gen\":0,\"avg_ts\":%d.5},{\"n_prompt\":0,\"n_gen\":4,\"avg_ts\":%d.25}]\\n' "
    "$((100 * n)) $((10 * n * n))\n";

static tu_result bench(const char *fake)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s' --config '%s' --prefill 8 --decode 4 --reps 3 --threads 1 --json "
             "--peer-llamacpp '%s' --peer-gguf x.gguf", tu_tool("tools/rlx-bench"),
             tu_fixture("llama32-tiny/config.json"), fake);
    return tu_run(cmd, 300);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

START_TEST(peer_runs_after_each_rep)
{
    char *tmp = tu_mkdtemp();
    tu_result r = bench(script(tmp, "llama-bench", fake_body));
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    json_error_t e;
    json_t *o = json_loads(r.out, 0, &e);
    ck_assert_msg(o != NULL, "no JSON: %s", r.out);

    /* three calls, each one rep with rlx's lengths and threads */
    char log[4200];
    snprintf(log, sizeof log, "%s/calls.log", tmp);
    char *calls = tu_read_file(log, NULL);
    ck_assert_msg(calls != NULL, "the fake llama-bench never ran");
    int n = 0;
    for (char *line = strtok(calls, "\n"); line; line = strtok(NULL, "\n"), n++)
        ck_assert_msg(strstr(line, "-m x.gguf -p 8 -n 4 -t 1 -r 1 -o json") != NULL, "call %d: %s", n + 1, line);
    ck_assert_msg(n == 3, "llama-bench ran %d times, want once after each of 3 reps", n);
    free(calls);

    char *js = json_dumps(o, JSON_COMPACT);
    json_t *peer = json_object_get(o, "peer");
    ck_assert_msg(json_is_string(json_object_get(peer, "peer_schedule")), "no peer.peer_schedule: %s", js);
    ck_assert_str_eq(json_string_value(json_object_get(peer, "peer_schedule")), "interleaved");
    ck_assert_msg(json_is_integer(json_object_get(peer, "decode_depth")) &&
                      json_integer_value(json_object_get(peer, "decode_depth")) == 0, "no peer.decode_depth 0: %s", js);
    ck_assert_msg(json_integer_value(json_object_get(o, "decode_depth")) == 8, "rlx decodes after its prefill: %s", js);
    /* the peer's figures are the medians of its three calls: pp 200.5, tg 40.25 */
    ck_assert_msg(json_number_value(json_object_get(peer, "prefill_tokens_per_s")) == 200.5, "%s", js);
    ck_assert_msg(json_number_value(json_object_get(peer, "decode_tokens_per_s")) == 40.25, "%s", js);

    /* the ratios are the medians of the per-rep ratios, kept in rep order */
    const char *keys[2][2] = {{"decode_vs_peer_reps", "decode_vs_peer"}, {"prefill_vs_peer_reps", "prefill_vs_peer"}};
    for (int k = 0; k < 2; k++) {
        json_t *reps = json_object_get(o, keys[k][0]);
        ck_assert_msg(json_is_array(reps) && json_array_size(reps) == 3, "%s: not 3 entries: %s", keys[k][0], js);
        double v[3];
        for (int i = 0; i < 3; i++) {
            v[i] = json_number_value(json_array_get(reps, (size_t)i));
            ck_assert_msg(v[i] > 0, "%s[%d] = %g", keys[k][0], i, v[i]);
        }
        qsort(v, 3, sizeof *v, cmp);
        double got = json_number_value(json_object_get(o, keys[k][1]));
        ck_assert_msg(got == v[1], "%s %.17g, the median of %s is %.17g: %s", keys[k][1], got, keys[k][0], v[1], js);
    }
    free(js);
    json_decref(o);
    tu_result_free(&r);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

/* a llama-bench that fails fails the bench, in one line naming it */
START_TEST(peer_failure_fails_the_bench)
{
    char *tmp = tu_mkdtemp();
    const char *fake = script(tmp, "failing-llama-bench", "exit 1\n");
    tu_result r = bench(fake);
    ck_assert_msg(r.status != 0, "exit 0 with a failing peer: %s", r.out);
    ck_assert_msg(strstr(r.err, fake) != NULL, "the error does not name %s: %s", fake, r.err);
    char *nl = strchr(r.err, '\n');
    ck_assert_msg(nl && nl[1] == 0, "not one line: %s", r.err);
    tu_result_free(&r);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

/* a tensor-parallel run has no peer: refused as bad usage before anything runs */
START_TEST(peer_refused_with_devices)
{
    char *tmp = tu_mkdtemp(), cmd[16384], log[4200];
    const char *fake = script(tmp, "fake-llama-bench", fake_body);
    snprintf(cmd, sizeof cmd, "'%s' --config '%s' --devices 0,1 --peer-llamacpp '%s' --peer-gguf x.gguf",
             tu_tool("tools/rlx-bench"), tu_fixture("llama32-tiny/config.json"), fake);
    tu_result r = tu_run(cmd, 60);
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strncmp(r.err, "rlx-bench: --peer-llamacpp does not run with --devices\n", 55) == 0, "%s", r.err);
    snprintf(log, sizeof log, "%s/calls.log", tmp);
    struct stat st;
    ck_assert_msg(stat(log, &st) != 0, "the peer ran");
    tu_result_free(&r);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

/* rlx-bench [args]: its JSON (exit 0 asserted) */
static json_t *bench_json(const char *args)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s' --config '%s' --prefill 8 --decode 4 --reps 1 --threads 1 --no-reference --json %s",
             tu_tool("tools/rlx-bench"), tu_fixture("llama32-tiny/config.json"), args);
    tu_result r = tu_run(cmd, 300);
    ck_assert_msg(r.status == 0, "%s: exit %d: %s", args, r.status, r.err);
    json_error_t e;
    json_t *o = json_loads(r.out, 0, &e);
    ck_assert_msg(o != NULL, "%s: no JSON: %s", args, r.out);
    tu_result_free(&r);
    return o;
}

/* decode starts after the timed prefill (T keys) unless --decode-depth D says how many
 * keys: 0 is llama-bench's tg schedule, which the peer's JSON names */
START_TEST(decode_depth_schedules)
{
    const struct { const char *args; long long depth; } ok[] = {{"", 8}, {"--decode-depth 0", 0}, {"--decode-depth 12", 12}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        json_t *o = bench_json(ok[i].args);
        ck_assert_msg(json_integer_value(json_object_get(o, "decode_depth")) == ok[i].depth, "'%s': decode_depth %lld",
                      ok[i].args, (long long)json_integer_value(json_object_get(o, "decode_depth")));
        ck_assert_msg(json_number_value(json_object_get(o, "decode_tokens_per_s")) > 0, "'%s': no decode", ok[i].args);
        /* the same tokens again from the same depth, generated greedily on the device */
        ck_assert_msg(json_number_value(json_object_get(o, "generate_tokens_per_s")) > 0, "'%s': no generate (%s)",
                      ok[i].args, json_string_value(json_object_get(o, "generate_unsupported")));
        json_decref(o);
    }
    const struct { const char *args, *err; } bad[] = {
        {"--decode-depth 0 --batch 2", "rlx-bench: --decode-depth runs with --batch 1\n"},
        {"--decode-depth 12 --ctx 16", "rlx-bench: --ctx 16 is too small for 12 cache rows and --decode 4\n"},
        {"--decode-depth -1", "rlx-bench: --decode-depth"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[16384];
        snprintf(cmd, sizeof cmd, "'%s' --config '%s' --prefill 8 --decode 4 --reps 1 %s", tu_tool("tools/rlx-bench"),
                 tu_fixture("llama32-tiny/config.json"), bad[i].args);
        tu_result r = tu_run(cmd, 60);
        ck_assert_msg(r.status == 2, "'%s': exit %d", bad[i].args, r.status);
        ck_assert_msg(strncmp(r.err, bad[i].err, strlen(bad[i].err)) == 0, "'%s': %s", bad[i].args, r.err);
        tu_result_free(&r);
    }
}
END_TEST

/* a number of o, asserted present and a number */
static double num(json_t *o, const char *key, const char *run)
{
    json_t *v = json_object_get(o, key);
    ck_assert_msg(json_is_number(v), "%s: no number \"%s\"", run, key);
    return json_number_value(v);
}

static int near(double a, double b) { return a == b || (a - b) * (a - b) <= 1e-18 * b * b; }

/* rlx-bench --devices --json carries the contract's keys (CLI.md: prefill_gflops,
 * decode_gb_per_s, threads, ...) counted as the one-model run counts them, summed over the
 * ranks: llama32-tiny over 2 ranks splits every weight and kv head, so the prefill's FLOPs
 * and a decode token's bytes are the unsplit model's exactly; over 4 ranks its 2 kv heads
 * are replicated (each rank keeps one), so k/v projections and the KV cache count twice */
START_TEST(devices_json_figures)
{
    static const char *const keys[] = {"prefill_tokens_per_s", "decode_tokens_per_s", "prefill_gflops",
                                       "decode_gb_per_s", "threads", "backend", "reps", "generate_tokens_per_s"};
    json_t *one = bench_json("--backend cpu"), *two = bench_json("--backend cpu --devices 0,1"),
           *four = bench_json("--backend cpu --devices 0,1,2,3");
    /* llama32-tiny, f32: 3 layers, hidden 64, intermediate 160, vocab 512 (tied), 4 q and
     * 2 kv heads of 16; T 8, N 4: decode reads 8 + 4/2 keys on average */
    const double L = 3, H = 64, I = 160, V = 512, q = 4 * 16, kv = 2 * 16, T = 8, keys_avg = 8 + 4 / 2.0;
    const double weights = L * (2 * H * q + 2 * H * kv + 3 * H * I) + V * H, cache = 2 * L * kv * keys_avg;
    const double bytes[3] = {4 * (weights + cache), 4 * (weights + cache), 4 * (weights + L * 2 * H * kv + 2 * cache)};
    json_t *runs[3] = {one, two, four};
    const char *name[3] = {"one model", "--devices 0,1", "--devices 0,1,2,3"};
    for (int k = 0; k < 3; k++) {
        json_t *o = runs[k];
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
            ck_assert_msg(json_object_get(o, keys[i]) != NULL, "%s: no \"%s\"", name[k], keys[i]);
        ck_assert_str_eq(json_string_value(json_object_get(o, "backend")), "cpu");
        ck_assert_int_eq(json_integer_value(json_object_get(o, "threads")), 1); /* --threads 1: each rank's */
        ck_assert_int_eq(json_integer_value(json_object_get(o, "reps")), 1);
        double p = num(o, "prefill_tokens_per_s", name[k]), g = num(o, "prefill_gflops", name[k]);
        double dt = num(o, "decode_tokens_per_s", name[k]), gb = num(o, "decode_gb_per_s", name[k]);
        double flops = num(o, "prefill_flops", name[k]), gen = num(o, "generate_tokens_per_s", name[k]);
        ck_assert_msg(p > 0 && g > 0 && dt > 0 && gb > 0 && flops > 0 && gen > 0, "%s: %g tok/s %g GFLOP/s, %g tok/s %g GB/s",
                      name[k], p, g, dt, gb);
        /* GFLOP/s: the prefill's FLOPs over its time; GB/s: a token's bytes at decode's rate */
        ck_assert_msg(near(g, flops * p / T / 1e9), "%s: %.17g GFLOP/s, %.17g FLOP at %.17g tok/s", name[k], g,
                      flops, p);
        ck_assert_msg(near(gb / dt, bytes[k] / 1e9), "%s: %.17g bytes a token, expected %.17g", name[k],
                      gb / dt * 1e9, bytes[k]);
        if (k == 1) /* the same FLOPs as the unsplit model's program */
            ck_assert_msg(near(flops, num(one, "prefill_flops", name[0])), "%.17g FLOP over 2 ranks, %.17g on one",
                          flops, num(one, "prefill_flops", name[0]));
    }
    /* 4 ranks: the replicated k/v projections' 2 FLOPs a multiply-add on every prompt row */
    ck_assert_msg(near(num(four, "prefill_flops", name[2]), num(one, "prefill_flops", name[0]) + 2 * T * L * 2 * H * kv),
                  "%.17g FLOP over 4 ranks", num(four, "prefill_flops", name[2]));
    json_decref(one);
    json_decref(two);
    json_decref(four);
}
END_TEST

/* rlx-bench --dump-graph [args] on the tiny config: its result */
static tu_result bench_dump(const char *args)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s' --config '%s' --prefill 8 --decode 4 --threads 1 --dump-graph %s",
             tu_tool("tools/rlx-bench"), tu_fixture("llama32-tiny/config.json"), args);
    return tu_run(cmd, 120);
}

/* --dump-graph prints the programs the run would time, labelled, and times nothing: the
 * prefill every sequence runs, then the decode step of one row or of the --batch B rows */
START_TEST(dump_graph_times_nothing)
{
    static const char pre[] = "# prefill: 8 prompt tokens, logits of the last row only";
    tu_result r = bench_dump("--batch 4");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_str_eq(r.err, "");
    ck_assert_msg(!strncmp(r.out, pre, strlen(pre)), "%.3000s", r.out);
    ck_assert_msg(strstr(r.out, ", each of 4 sequences in turn\ngraph prefill T=8 ctx=13 last-row: ") ==
                      r.out + strlen(pre), "%.3000s", r.out);
    const char *dec = strstr(r.out, "\n# decode: 4 sequences a step, one row each (rlx_session_decode_batch), the "
                                    "first at position 8\ngraph decode T=4 ctx=13 slots=4: ");
    ck_assert_msg(dec != NULL, "no batched decode program: %.3000s", r.out);
    ck_assert_msg(strstr(dec, " rlx.attention_rows x3") && strstr(dec, " rlx.cache_write_rows x6"), "%.3000s", dec);
    ck_assert_msg(!strstr(r.out, "_rows") || strstr(r.out, "_rows") > dec, "rows ops in the prefill: %.3000s", r.out);
    ck_assert_msg(strstr(dec, "\nflops at position 8: "), "no FLOPs line: %.3000s", dec);
    ck_assert_msg(!strstr(r.out, "tok/s") && !strstr(r.out, "median") && !strstr(r.out, "reps"), "timed: %.3000s",
                  r.out);
    tu_result_free(&r);
    /* one sequence: the single decode step, at the position after the prompt */
    r = bench_dump("");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.out, "\n# decode: one token a step, the first at position 8\ngraph decode T=1 ctx=13: "),
                  "%.3000s", r.out);
    ck_assert_msg(strstr(r.out, " rlx.attention x3") && !strstr(r.out, "_rows") && !strstr(r.out, "tok/s"), "%.3000s",
                  r.out);
    tu_result_free(&r);
    /* a dump times nothing and is text */
    const struct { const char *args, *err; } bad[] = {
        {"--json", "rlx-bench: --dump-graph does not run with --json\n"},
        {"--peer-llamacpp ./nowhere --peer-gguf x.gguf", "rlx-bench: --dump-graph does not run with --peer-llamacpp\n"},
        {"--sessions 2", "rlx-bench: --dump-graph does not run with --sessions\n"},
        {"--devices 0,1", "rlx-bench: --dump-graph does not run with --devices\n"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        r = bench_dump(bad[i].args);
        ck_assert_msg(r.status == 2, "'%s': exit %d", bad[i].args, r.status);
        ck_assert_msg(strncmp(r.err, bad[i].err, strlen(bad[i].err)) == 0, "'%s': %s", bad[i].args, r.err);
        ck_assert_str_eq(r.out, "");
        tu_result_free(&r);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bench_peer");
    TCase *tc = tcase_create("peer");
    tcase_add_test(tc, peer_runs_after_each_rep);
    tcase_add_test(tc, peer_failure_fails_the_bench);
    tcase_add_test(tc, peer_refused_with_devices);
    tcase_add_test(tc, decode_depth_schedules);
    tcase_add_test(tc, dump_graph_times_nothing);
    tcase_add_test(tc, devices_json_figures);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
