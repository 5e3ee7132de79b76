/* `make install` works, and a plugin built out of tree against only the installed
 * headers (`pkg-config --cflags rlx-plugin`, its own Makefile) loads in rlx-plugins. */
#define _GNU_SOURCE
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

START_TEST(example_builds_and_loads)
{
    char *t = tu_mkdtemp();
    ck_assert_ptr_nonnull(t);
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
    char env[8192];
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
    ck_assert_str_eq(json_string_value(json_object_get(j, "abi")), "1.1");
    json_t *b = json_array_get(json_object_get(j, "blocks"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(b, "name")), "example.scale");
    json_decref(j);
    tu_result_free(&r);

    /* the installed tool loads the installed plugins */
    snprintf(cmd, sizeof cmd,
             "d='%s/dest'; bin=$(find \"$d\" -name rlx-plugins -type f -path '*/bin/*'); "
             "lib=$(dirname \"$(find \"$d\" -name librlx.so | head -n1)\"); "
             "pl=$(find \"$d\" -type d -name plugins -path '*/rlx/*' | head -n1); "
             "LD_LIBRARY_PATH=\"$lib\" RLX_PLUGIN_PATH=\"$pl:%s/oot\" \"$bin\" list --json",
             t, t);
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

    tu_rmrf(t);
    free(t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("out-of-tree");
    TCase *tc = tcase_create("out-of-tree");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, example_builds_and_loads);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
