/* Profiles: presets load by name and path, defaults merge, strict errors name the path. */
#include "rlx/rlx.h"
#include "testutil.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const presets[] = {
    "llama32_prefill", "llama32_decode", "qwen3_prefill", "qwen3_decode",
    "gemma_prefill",   "gemma_decode",   "encoder",       "flux2",
    "sam_encoder",     "sam2",           "sam2_memory_attention", "llada2_diffusion"};

START_TEST(presets_by_name)
{
    rlx_profile p;
    rlx_diag d;
    rlx_diag_init(&d);
    int rc = rlx_profile_load(presets[_i], &p, &d);
    ck_assert_msg(rc == 0, "%s: %s", presets[_i], d.msg);
    ck_assert_str_eq(p.name, presets[_i]);
    int skip = strcmp(presets[_i], "sam2_memory_attention") == 0 ||
               strcmp(presets[_i], "llada2_diffusion") == 0;
    ck_assert_int_eq(p.fusion.skip, skip);
    ck_assert_str_eq(p.precision.compute, "f32");
    ck_assert_int_eq(p.passes.dce, 1);
}
END_TEST

START_TEST(by_path_and_search_order)
{
    rlx_profile p;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_profile_load(tu_src("profiles/llama32_decode.rlx.json"), &p, &d), 0);
    ck_assert_str_eq(p.name, "llama32_decode");
    ck_assert_int_eq(p.backend.cuda.graphs, 1);

    /* $RLX_PROFILE_PATH: the first folder holding NAME.rlx.json wins */
    char *dir = tu_mkdtemp();
    char path[4200], env[8400];
    snprintf(path, sizeof path, "%s/llama32_decode.rlx.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"backend\": {\"cpu\": {\"threads\": 3}}}", f);
    fclose(f);
    const char *old = getenv("RLX_PROFILE_PATH");
    snprintf(env, sizeof env, "/nonexistent:%s:%s", dir, old ? old : "");
    setenv("RLX_PROFILE_PATH", env, 1);
    ck_assert_int_eq(rlx_profile_load("llama32_decode", &p, &d), 0);
    ck_assert_int_eq(p.backend.cpu.threads, 3);
    ck_assert_str_eq(p.fusion.policy, "direct"); /* absent: default */

    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_profile_load("no_such_preset", &p, &d), RLX_ERR_NOT_FOUND);
    ck_assert_msg(strstr(d.msg, "profile 'no_such_preset' not found"), "%s", d.msg);
    rlx_diag_init(&d);
    ck_assert_int_ne(rlx_profile_load("bad name!", &p, &d), 0);
    ck_assert_msg(strstr(d.msg, "not a preset name"), "%s", d.msg);
    if (old) setenv("RLX_PROFILE_PATH", old, 1);
    else unsetenv("RLX_PROFILE_PATH");
    tu_rmrf(dir);
    free(dir);
}
END_TEST

START_TEST(defaults_merge)
{
    rlx_profile a, b;
    rlx_profile_defaults(&a);
    ck_assert_str_eq(a.fusion.policy, "direct");
    ck_assert_str_eq(a.fusion.target, "auto");
    ck_assert_int_eq(a.fusion.assert_clean, 0);
    ck_assert_int_eq(a.fusion.skip, 0);
    ck_assert_int_eq(a.passes.dce, 1);
    ck_assert_int_eq(a.passes.constant_folding, 1);
    ck_assert_int_eq(a.passes.verbose, 0);
    ck_assert_str_eq(a.precision.compute, "f32");
    ck_assert_str_eq(a.precision.mixed, "none");
    ck_assert_int_eq(a.backend.cpu.threads, 0);
    ck_assert_str_eq(a.backend.cpu.placement, "cores");
    ck_assert_int_eq(a.backend.cpu.unfuse_regions, 0);
    ck_assert_int_eq(a.backend.cuda.device, 0);
    ck_assert_int_eq(a.backend.cuda.graphs, 1);

    rlx_diag d;
    rlx_diag_init(&d);
    const char *j = "{\"precision\": {\"compute\": \"bf16\"}, \"fusion\": {}, \"backend\": {\"cuda\": {\"graphs\": false}}}";
    ck_assert_int_eq(rlx_profile_parse(j, strlen(j), "x/mine.rlx.json", &b, &d), 0);
    ck_assert_str_eq(b.name, "mine");
    ck_assert_str_eq(b.precision.compute, "bf16");
    ck_assert_str_eq(b.precision.mixed, "none");
    ck_assert_int_eq(b.backend.cuda.graphs, 0);
    /* everything else exactly the defaults */
    strcpy(a.name, "mine");
    strcpy(a.precision.compute, "bf16");
    a.backend.cuda.graphs = 0;
    ck_assert_int_eq(memcmp(&a, &b, sizeof a), 0);
    /* the GPUs of a tensor-parallel run, in the order given */
    const char *tp = "{\"backend\": {\"cuda\": {\"devices\": [1, 0]}}}";
    ck_assert_int_eq(rlx_profile_parse(tp, strlen(tp), "tp.rlx.json", &b, &d), 0);
    ck_assert_int_eq(b.backend.cuda.n_devices, 2);
    ck_assert_int_eq(b.backend.cuda.devices[0], 1);
    ck_assert_int_eq(b.backend.cuda.devices[1], 0);
}
END_TEST

static void fails(const char *json, const char *expect)
{
    rlx_profile p;
    memset(&p, 0x5a, sizeof p);
    rlx_profile before = p;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_ne(rlx_profile_parse(json, strlen(json), "my.rlx.json", &p, &d), 0);
    ck_assert_msg(strcmp(d.msg, expect) == 0, "got '%s', want '%s'", d.msg, expect);
    ck_assert_int_eq(memcmp(&p, &before, sizeof p), 0); /* untouched on failure */
}

START_TEST(strict)
{
    fails("{\"precision\": {\"compute\": \"fp8\"}}",
          "my.rlx.json: precision.compute: expected one of f32|f16|bf16, got \"fp8\"");
    fails("{\"fusion\": {\"polcy\": \"direct\"}}", "my.rlx.json: fusion.polcy: unknown key");
    fails("{\"speed\": 1}", "my.rlx.json: speed: unknown key");
    fails("{\"passes\": {\"dce\": \"yes\"}}", "my.rlx.json: passes.dce: expected a boolean, got a string");
    fails("{\"backend\": {\"cpu\": {\"threads\": -1}}}",
          "my.rlx.json: backend.cpu.threads: expected an integer in 0..1048576, got -1");
    fails("{\"backend\": {\"cpu\": {\"threads\": 2.5}}}",
          "my.rlx.json: backend.cpu.threads: expected an integer, got a number");
    fails("{\"backend\": {\"cpu\": []}}", "my.rlx.json: backend.cpu: expected an object, got an array");
    fails("{\"backend\": {\"cpu\": {\"placement\": 1}}}",
          "my.rlx.json: backend.cpu.placement: expected one of cores|pus|none, got an integer");
    fails("{\"backend\": {\"tpu\": {}}}", "my.rlx.json: backend.tpu: unknown key");
    fails("{\"fusion\": {\"target\": \"auto\", \"target\": \"cpu\"}}",
          "my.rlx.json: invalid JSON at line 1 column 38: duplicate object key near '\"target\"'");
    fails("{\"backend\": {\"cuda\": {\"devices\": 1}}}",
          "my.rlx.json: backend.cuda.devices: expected an array of up to 16 device ordinals, got an integer");
    fails("{\"backend\": {\"cuda\": {\"devices\": [0, \"1\"]}}}",
          "my.rlx.json: backend.cuda.devices[1]: expected a device ordinal 0..15");
    fails("{\"backend\": {\"cuda\": {\"devices\": [1, 16]}}}",
          "my.rlx.json: backend.cuda.devices[1]: expected a device ordinal 0..15");
    fails("{\"backend\": {\"cuda\": {\"devices\": [1, 1]}}}", "my.rlx.json: backend.cuda.devices[1]: device 1 twice");
    fails("[]", "my.rlx.json: expected an object, got an array");
    fails("{\"fusion\": {\"policy\": \"fusable\",}}",
          "my.rlx.json: invalid JSON at line 1 column 33: string or '}' expected near '}'");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("profile");
    TCase *tc = tcase_create("profile");
    tcase_add_loop_test(tc, presets_by_name, 0, (int)(sizeof presets / sizeof presets[0]));
    tcase_add_test(tc, by_path_and_search_order);
    tcase_add_test(tc, defaults_merge);
    tcase_add_test(tc, strict);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
