/* `make install` works, and plugins built out of tree against only the installed headers
 * (`pkg-config --cflags rlx-plugin`, their own Makefiles) load and run: the block example
 * loads in rlx-plugins, and the Mistral arch example runs the unmodified mistral-tiny
 * folder through the installed rlx-run, forward and KV-cache decode, at parity, and the
 * installed rlx-bench benchmarks it from its config alone. */
#define _GNU_SOURCE
#include "parity_util.h"
#include "rlx/rlx.h"
#include "testutil.h"
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Nested makes must not inherit the outer `make check`'s jobserver or flags. */
#define CLEAN_MAKE "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL -u MAKEOVERRIDES make"

static void run_ok(const char *what, const char *cmd, tu_result *out)
{
    *out = tu_run(cmd, 600);
    ck_assert_msg(out->status == 0, "%s failed (exit %d):\n%s\n%s", what, out->status, out->out,
                  out->err);
}

/* one install for the whole suite: the temp folder and the environment that makes
 * pkg-config see only it */
static char *inst;
static char env[8192];

static void install_setup(void)
{
    inst = tu_mkdtemp();
    ck_assert_ptr_nonnull(inst);
    char *t = inst;
    char cmd[16384];
    tu_result r;

    snprintf(cmd, sizeof cmd, CLEAN_MAKE " -s -C '%s' install DESTDIR='%s/dest' 2>&1",
             tu_build(""), t);
    run_ok("make install", cmd, &r);
    tu_result_free(&r);

    /* where the install put things (the configured prefix lives under DESTDIR) */
    snprintf(cmd, sizeof cmd,
             "cd '%s/dest' && for f in $(find . -name rlx-plugin.pc) $(find . -name plugin.h "
             "-path '*/rlx/*') $(find . -name 'librlx.so') $(find . -name rlx-plugins -type f) "
             "$(find . -name rlx.pc); do echo \"$f\"; done",
             t);
    run_ok("find installed files", cmd, &r);
    ck_assert_msg(strstr(r.out, "/pkgconfig/rlx-plugin.pc\n") && strstr(r.out, "/pkgconfig/rlx.pc\n") &&
                      strstr(r.out, "/include/rlx/plugin.h\n") && strstr(r.out, "/librlx.so\n") &&
                      strstr(r.out, "/bin/rlx-plugins\n"),
                  "missing from the install:\n%s", r.out);
    tu_result_free(&r);

    /* only the temp install is visible to pkg-config; the sysroot maps its paths there */
    snprintf(env, sizeof env,
             "PKG_CONFIG_LIBDIR=\"$(dirname \"$(find '%s/dest' -name rlx-plugin.pc | head -n1)\")\" "
             "PKG_CONFIG_SYSROOT_DIR='%s/dest'",
             t, t);
    snprintf(cmd, sizeof cmd, "export %s; pkg-config --cflags rlx-plugin", env);
    run_ok("pkg-config", cmd, &r);
    char want[4300];
    snprintf(want, sizeof want, "-I%s/dest/", t);
    ck_assert_msg(strstr(r.out, want) && strstr(r.out, "-fvisibility=hidden"),
                  "cflags '%s' do not point into the install", r.out);
    tu_result_free(&r);
}

static void install_teardown(void)
{
    if (inst) tu_rmrf(inst);
    free(inst);
    inst = NULL;
}

/* The installed tools with the installed plugins and the folder oot on the plugin path */
static void installed(char *out, size_t len, const char *tool, const char *oot)
{
    snprintf(out, len,
             "d='%s/dest'; bin=$(find \"$d\" -name %s -type f -path '*/bin/*'); "
             "lib=$(dirname \"$(find \"$d\" -name librlx.so | head -n1)\"); "
             "pl=$(find \"$d\" -type d -name plugins -path '*/rlx/*' | head -n1); "
             "LD_LIBRARY_PATH=\"$lib\" RLX_PLUGIN_PATH=\"$pl:%s\" \"$bin\"",
             inst, tool, oot);
}

START_TEST(example_builds_and_loads)
{
    char *t = inst;
    char cmd[16384];
    tu_result r;

    /* the example, copied out of the source tree, with its own Makefile */
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s/oot' && cp '%s/Makefile' '%s/scale.c' '%s/oot/' && export %s && "
             CLEAN_MAKE " -C '%s/oot' CFLAGS='-O2 -g -Werror' 2>&1",
             t, tu_src("examples/out-of-tree-block"), tu_src("examples/out-of-tree-block"), t, env,
             t);
    run_ok("building the example", cmd, &r);
    tu_result_free(&r);

    snprintf(cmd, sizeof cmd, "RLX_PLUGIN_PATH='%s/oot' '%s' info example.scale --json", t,
             tu_tool("tools/rlx-plugins"));
    run_ok("rlx-plugins info example.scale", cmd, &r);
    json_error_t e;
    json_t *j = json_loads(r.out, 0, &e);
    ck_assert_msg(j != NULL, "bad JSON: %s", r.out);
    char path[4300];
    snprintf(path, sizeof path, "%s/oot/rlx-blocks-example.so", t);
    ck_assert_str_eq(json_string_value(json_object_get(j, "path")), path);
    ck_assert_str_eq(json_string_value(json_object_get(j, "status")), "loaded");
    ck_assert_str_eq(json_string_value(json_object_get(j, "name")), "example-blocks");
    ck_assert_str_eq(json_string_value(json_object_get(j, "version")), "1.0.0");
    ck_assert_str_eq(json_string_value(json_object_get(j, "abi")), "1.3");
    json_t *b = json_array_get(json_object_get(j, "blocks"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(b, "name")), "example.scale");
    json_decref(j);
    tu_result_free(&r);

    /* the installed tool loads the installed plugins */
    char pre[12000], oot[4200];
    snprintf(oot, sizeof oot, "%s/oot", t);
    installed(pre, sizeof pre, "rlx-plugins", oot);
    snprintf(cmd, sizeof cmd, "%s list --json", pre);
    run_ok("installed rlx-plugins", cmd, &r);
    j = json_loads(r.out, 0, &e);
    ck_assert_msg(j != NULL, "bad JSON: %s", r.out);
    size_t i, n_loaded = 0;
    json_t *p;
    json_array_foreach(json_object_get(j, "plugins"), i, p)
    {
        const char *st = json_string_value(json_object_get(p, "status"));
        if (strncmp(json_string_value(json_object_get(p, "path")), t, strlen(t)) != 0)
            continue; /* the machine's own installed folder is not under test */
        ck_assert_msg(strcmp(st, "loaded") == 0, "installed %s refused: %s",
                      json_string_value(json_object_get(p, "path")),
                      json_string_value(json_object_get(p, "reason")));
        n_loaded++;
    }
    ck_assert_uint_ge(n_loaded, 1);
    json_decref(j);
    tu_result_free(&r);
}
END_TEST

#define MISTRAL "mistral-tiny"
#define N_CASES 3
#define N_GEN 10

/* the Mistral arch example, built out of tree into the install's temp folder */
static const char *mistral_plugin(void)
{
    static char oot[4200];
    static char cmd[65536];
    char ex[4096];
    snprintf(oot, sizeof oot, "%s/oot-arch", inst);
    snprintf(ex, sizeof ex, "%s", tu_src("examples/out-of-tree-arch"));
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && cp '%s/Makefile' '%s/mistral.c' '%s'/*.rlx.json '%s/' && export %s && "
             CLEAN_MAKE " -C '%s' CFLAGS='-O2 -g -Werror' 2>&1",
             oot, ex, ex, ex, oot, env, oot);
    tu_result r;
    run_ok("building the arch example", cmd, &r);
    tu_result_free(&r);
    return oot;
}

START_TEST(arch_example_lists)
{
    const char *oot = mistral_plugin();
    char cmd[16384], pre[12000];
    installed(pre, sizeof pre, "rlx-plugins", oot);
    snprintf(cmd, sizeof cmd, "%s list --json", pre);
    tu_result r;
    run_ok("installed rlx-plugins list", cmd, &r);
    json_error_t e;
    json_t *j = json_loads(r.out, 0, &e), *p;
    ck_assert_msg(j != NULL, "bad JSON: %s", r.out);
    size_t i;
    int found = 0;
    json_array_foreach(json_object_get(j, "plugins"), i, p)
    {
        if (strcmp(json_string_value(json_object_get(p, "name")), "arch-mistral") != 0) continue;
        ck_assert_str_eq(json_string_value(json_object_get(p, "status")), "loaded");
        json_t *a = json_array_get(json_object_get(p, "archs"), 0);
        ck_assert_str_eq(json_string_value(json_object_get(a, "name")), "mistral");
        ck_assert_str_eq(json_string_value(json_array_get(json_object_get(a, "model_types"), 0)), "mistral");
        found = 1;
    }
    ck_assert_msg(found, "arch-mistral is not listed:\n%s", r.out);
    json_decref(j);
    tu_result_free(&r);
}
END_TEST

/* forward logits of every case, through the installed rlx-run and the example plugin */
START_TEST(arch_example_forward)
{
    const char *oot = mistral_plugin();
    int c = _i;
    char in_path[4300], out_path[4300], cmd[40000], pre[12000];
    rlx_weights *ref = pu_open_ref(MISTRAL);
    size_t t, nref;
    int32_t *ids = pu_read_case_ids(ref, c, &t);
    float *want = pu_read_case_f32(ref, c, "logits", &nref);
    snprintf(in_path, sizeof in_path, "%s/in%d.safetensors", oot, c);
    snprintf(out_path, sizeof out_path, "%s/out%d.safetensors", oot, c);
    pu_write_ids(in_path, ids, t);
    installed(pre, sizeof pre, "rlx-run", oot);
    snprintf(cmd, sizeof cmd, "%s forward --model '%s' --inputs '%s' --out '%s'", pre, tu_fixture(MISTRAL), in_path,
             out_path);
    free(pu_run_ok(cmd, 240));
    float *first = NULL;
    pu_check_forward_logits(out_path, want, nref, MISTRAL, c, "(out of tree)", "out of tree", "out of tree",
                            &first);
    free(first);
    free(want);
    free(ids);
    rlx_weights_close(ref);
}
END_TEST

/* greedy generation and every KV-cache decode step's logits against the reference */
START_TEST(arch_example_decode)
{
    const char *oot = mistral_plugin();
    int c = _i;
    char out_path[4300], cmd[40000], pre[12000], what[96], ids_arg[1024];
    pu_gen_case k;
    pu_gen_case_open(&k, MISTRAL, c, N_GEN);
    pu_ids_arg(ids_arg, sizeof ids_arg, k.ids, k.t);
    snprintf(what, sizeof what, MISTRAL " case %d (out of tree)", c);
    snprintf(out_path, sizeof out_path, "%s/logits%d.safetensors", oot, c);
    installed(pre, sizeof pre, "rlx-run", oot);
    snprintf(cmd, sizeof cmd, "%s generate --model '%s' --ids %s -n %d --greedy --json --logits-out '%s'", pre,
             tu_fixture(MISTRAL), ids_arg, N_GEN, out_path);
    json_decref(pu_check_generated(pu_run_ok(cmd, 240), k.ids, k.t, k.greedy, k.margins, N_GEN, what));
    /* decode steps reach position t + 8: past the window of 7 in every case */
    float *first = NULL;
    pu_check_generate_logits(out_path, k.prefill, k.nlog, k.full, k.t, k.vocab, N_GEN, &first, "out of tree", what);
    free(first);
    pu_gen_case_close(&k);
}
END_TEST

/* an out-of-tree arch is benchmarked from its config alone: the installed rlx-bench makes
 * the random checkpoint from the tensors the plugin's flows read */
START_TEST(arch_example_bench_config)
{
    const char *oot = mistral_plugin();
    char cmd[16384], pre[12000];
    installed(pre, sizeof pre, "rlx-bench", oot);
    snprintf(cmd, sizeof cmd, "%s --config '%s' --prefill 8 --decode 4 --reps 1 --threads 1 --no-reference --json",
             pre, tu_fixture(MISTRAL "/config.json"));
    tu_result r;
    run_ok("installed rlx-bench --config", cmd, &r);
    json_error_t e;
    json_t *j = json_loads(r.out, 0, &e);
    ck_assert_msg(j != NULL, "bad JSON: %s", r.out);
    ck_assert_msg(json_real_value(json_object_get(j, "decode_tokens_per_s")) > 0, "%s", r.out);
    ck_assert_msg(json_real_value(json_object_get(j, "prefill_flops")) > 0, "%s", r.out);
    json_decref(j);
    tu_result_free(&r);
}
END_TEST

/* the transformers 4.x spelling of the config (rope_theta, torch_dtype): the same logits */
START_TEST(arch_example_config_4x)
{
    const char *oot = mistral_plugin();
    char dir[4300], in_path[4400], out_path[4400], cmd[40000], pre[12000];
    snprintf(dir, sizeof dir, "%s/mistral-4x", oot);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s' && ln -sf '%s' '%s/model.safetensors' && cp '%s' '%s/config.json'", dir,
             tu_fixture(MISTRAL "/model.safetensors"), dir, tu_fixture("configs-4x/" MISTRAL ".json"), dir);
    tu_result r;
    run_ok("the 4.x folder", cmd, &r);
    tu_result_free(&r);
    rlx_weights *ref = pu_open_ref(MISTRAL);
    size_t t, nref;
    int32_t *ids = pu_read_case_ids(ref, 2, &t);
    float *want = pu_read_case_f32(ref, 2, "logits", &nref);
    snprintf(in_path, sizeof in_path, "%s/in.safetensors", dir);
    snprintf(out_path, sizeof out_path, "%s/out.safetensors", dir);
    pu_write_ids(in_path, ids, t);
    installed(pre, sizeof pre, "rlx-run", oot);
    snprintf(cmd, sizeof cmd, "%s forward --model '%s' --inputs '%s' --out '%s'", pre, dir, in_path, out_path);
    free(pu_run_ok(cmd, 240));
    float *first = NULL;
    pu_check_forward_logits(out_path, want, nref, MISTRAL, 2, "(4.x config)", "4.x config", "4.x config", &first);
    free(first);
    free(want);
    free(ids);
    rlx_weights_close(ref);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("out-of-tree");
    TCase *tc = tcase_create("out-of-tree");
    tcase_set_timeout(tc, 900);
    tcase_add_unchecked_fixture(tc, install_setup, install_teardown);
    tcase_add_test(tc, example_builds_and_loads);
    tcase_add_test(tc, arch_example_lists);
    tcase_add_loop_test(tc, arch_example_forward, 0, N_CASES);
    tcase_add_loop_test(tc, arch_example_decode, 0, N_CASES);
    tcase_add_test(tc, arch_example_config_4x);
    tcase_add_test(tc, arch_example_bench_config);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
