/* rlx-plugins: list / info, table and JSON, exit codes; the build tree's real plugins. */
#define _GNU_SOURCE
#include "rlx/rlx.h"
#include "testutil.h"
#include "tp_files.h"
#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* good test plugins + a text file named junk.so + an ELF .so without the entry symbol */
static char *mixed_dir(void)
{
    static const char *const names[] = {"tp-block", "tp-backend", "tp-arch", NULL};
    char *dir = tp_dir(names);
    tp_write(dir, "junk.so", "just text\n", 10);
    tp_copy("tp-no-entry", dir, "empty.so");
    return dir;
}

static tu_result tool(const char *plugin_path, const char *args)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "RLX_PLUGIN_PATH='%s' '%s' %s", plugin_path,
             tu_tool("tools/rlx-plugins"), args);
    return tu_run(cmd, 120);
}

static json_t *parse(const char *text)
{
    json_error_t e;
    json_t *j = json_loads(text, 0, &e);
    ck_assert_msg(j != NULL, "invalid JSON (line %d: %s): %s", e.line, e.text, text);
    return j;
}

static json_t *find_plugin(json_t *plugins, const char *key, const char *value)
{
    size_t i;
    json_t *p;
    json_array_foreach(plugins, i, p)
    {
        const char *v = json_string_value(json_object_get(p, key));
        if (v && strcmp(v, value) == 0) return p;
    }
    return NULL;
}

static const char *str(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    ck_assert_msg(json_is_string(v), "key %s is not a string", key);
    return json_string_value(v);
}

/* Exactly the keys of CLI.md for one element of "plugins". */
static void assert_plugin_keys(json_t *p, int with_details)
{
    int loaded = strcmp(str(p, "status"), "loaded") == 0;
    ck_assert_uint_eq(json_object_size(p), loaded ? 8 : 9);
    static const char *const keys[] = {"name", "path", "version", "abi", "status",
                                       "blocks", "backends", "archs"};
    for (int i = 0; i < 8; i++) ck_assert_ptr_nonnull(json_object_get(p, keys[i]));
    ck_assert_int_eq(json_object_get(p, "reason") != NULL, !loaded);
    size_t i;
    json_t *b;
    json_array_foreach(json_object_get(p, "blocks"), i, b)
    {
        ck_assert_uint_eq(json_object_size(b), 2);
        str(b, "name");
        str(b, "summary");
    }
    json_array_foreach(json_object_get(p, "backends"), i, b)
    {
        ck_assert_uint_eq(json_object_size(b), with_details ? 7 : 6);
        str(b, "name");
        str(b, "reason");
        ck_assert(json_is_boolean(json_object_get(b, "available")));
        ck_assert(json_is_array(json_object_get(b, "devices")));
        ck_assert(json_is_array(json_object_get(b, "ops")));
        ck_assert(json_is_array(json_object_get(b, "dtypes")));
        if (with_details) str(b, "details");
    }
    json_array_foreach(json_object_get(p, "archs"), i, b)
    {
        ck_assert_uint_eq(json_object_size(b), 2);
        str(b, "name");
        ck_assert(json_is_array(json_object_get(b, "model_types")));
    }
}

static json_t *backend_named(json_t *plugin, const char *name)
{
    return find_plugin(json_object_get(plugin, "backends"), "name", name);
}

START_TEST(list_json_mixed)
{
    char *dir = mixed_dir();
    tu_result r = tool(dir, "list --json");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    json_t *j = parse(r.out);
    ck_assert_str_eq(str(j, "abi"), "1.3");
    /* the temp folder, then the default folders (this build's, as rlx-plugins runs
     * uninstalled, like this test) */
    json_t *sp = json_object_get(j, "search_path");
    ck_assert_int_eq(unsetenv("RLX_PLUGIN_PATH"), 0);
    rlx_registry *reg = NULL;
    ck_assert_int_eq(rlx_registry_open(NULL, &reg, NULL), 0);
    const char *const *defaults;
    size_t n_def = rlx_registry_search_dirs(reg, &defaults);
    ck_assert_uint_eq(json_array_size(sp), 1 + n_def);
    ck_assert_str_eq(json_string_value(json_array_get(sp, 0)), dir);
    for (size_t k = 0; k < n_def; k++)
        ck_assert_str_eq(json_string_value(json_array_get(sp, 1 + k)), defaults[k]);
    rlx_registry_close(reg);
    json_t *pl = json_object_get(j, "plugins");
    size_t i;
    json_t *p;
    json_array_foreach(pl, i, p) assert_plugin_keys(p, 0);

    char path[4200];
    snprintf(path, sizeof path, "%s/junk.so", dir);
    json_t *junk = find_plugin(pl, "path", path);
    ck_assert_ptr_nonnull(junk);
    ck_assert_str_eq(str(junk, "status"), "refused");
    ck_assert_str_eq(str(junk, "reason"), "not an ELF file");
    ck_assert_str_eq(str(junk, "name"), "junk");
    snprintf(path, sizeof path, "%s/empty.so", dir);
    json_t *empty = find_plugin(pl, "path", path);
    ck_assert_ptr_nonnull(empty);
    ck_assert_str_eq(str(empty, "status"), "refused");
    ck_assert_str_eq(str(empty, "reason"), "no entry symbol rlx_plugin_init");

    json_t *blk = find_plugin(pl, "name", "tp-block");
    ck_assert_ptr_nonnull(blk);
    ck_assert_str_eq(str(blk, "status"), "loaded");
    ck_assert_str_eq(str(blk, "version"), "1.2.3");
    ck_assert_str_eq(str(blk, "abi"), "1.0");
    json_t *blocks = json_object_get(blk, "blocks");
    ck_assert_uint_eq(json_array_size(blocks), 2);
    ck_assert_str_eq(str(json_array_get(blocks, 0), "name"), "tp.block");
    ck_assert_str_eq(str(json_array_get(blocks, 0), "summary"), "test block tp.block");

    json_t *be = find_plugin(pl, "name", "tp-backend");
    ck_assert_ptr_nonnull(be);
    ck_assert_uint_eq(json_array_size(json_object_get(be, "backends")), 3);
    json_t *hi = backend_named(be, "tp-high"), *av = backend_named(be, "tp-avail");
    ck_assert(json_is_false(json_object_get(hi, "available")));
    ck_assert_str_eq(str(hi, "reason"), "no tp device");
    ck_assert(json_is_true(json_object_get(av, "available")));
    ck_assert_str_eq(str(av, "reason"), "");
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(av, "devices"), 0)),
                     "tp device 0");
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(av, "ops"), 1)), "rlx.mul");
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(av, "dtypes"), 0)), "f32");

    json_t *ar = find_plugin(pl, "name", "tp-arch");
    ck_assert_ptr_nonnull(ar);
    json_t *a0 = json_array_get(json_object_get(ar, "archs"), 0);
    ck_assert_str_eq(str(a0, "name"), "tp-arch");
    ck_assert_uint_eq(json_array_size(json_object_get(a0, "model_types")), 2);

    /* the temp folder holds exactly these five (the installed folder may add more) */
    size_t in_dir = 0;
    json_array_foreach(pl, i, p) in_dir += strncmp(str(p, "path"), dir, strlen(dir)) == 0;
    ck_assert_uint_eq(in_dir, 5);
    json_decref(j);
    tu_result_free(&r);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

START_TEST(list_table)
{
    char *dir = mixed_dir();
    tu_result r = tool(dir, "list");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.out, "    refused: not an ELF file\n"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "    refused: no entry symbol rlx_plugin_init\n"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "loaded   2 blocks "), "%s", r.out);
    ck_assert_msg(strstr(r.out, "backend tp-high      priority 200  not available: no tp device"),
                  "%s", r.out);
    /* the totals line agrees with the JSON listing of the same search path */
    tu_result lj = tool(dir, "list --json");
    json_t *j = parse(lj.out);
    size_t i, np = 0, nref = 0, nb = 0, nbe = 0, na = 0;
    json_t *p;
    json_array_foreach(json_object_get(j, "plugins"), i, p)
    {
        if (strcmp(str(p, "status"), "loaded") != 0) { nref++; continue; }
        np++;
        nb += json_array_size(json_object_get(p, "blocks"));
        nbe += json_array_size(json_object_get(p, "backends"));
        na += json_array_size(json_object_get(p, "archs"));
    }
    ck_assert_uint_ge(np, 3);
    ck_assert_uint_ge(nref, 2);
    char want[256];
    snprintf(want, sizeof want, "\n%zu plugins loaded (%zu blocks, %zu backends, %zu arch%s), %zu refused\n",
             np, nb, nbe, na, na == 1 ? "" : "s", nref);
    ck_assert_msg(strstr(r.out, want), "no '%s' in:\n%s", want + 1, r.out);
    json_decref(j);
    tu_result_free(&lj);
    tu_result_free(&r);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

START_TEST(info_by_any_name)
{
    char *dir = mixed_dir();
    tu_result l = tool(dir, "list --json");
    ck_assert_int_eq(l.status, 0);
    json_t *list = parse(l.out);
    json_t *pl = json_object_get(list, "plugins");

    static const char *const lookups[][2] = {{"tp-block", "tp-block"}, {"tp.block2", "tp-block"},
                                             {"tp-avail", "tp-backend"}, {"tp-arch", "tp-arch"},
                                             {"junk", "junk"}, {"empty.so", "empty"}};
    for (size_t k = 0; k < sizeof lookups / sizeof lookups[0]; k++) {
        char args[256];
        snprintf(args, sizeof args, "info '%s' --json", lookups[k][0]);
        tu_result r = tool(dir, args);
        ck_assert_msg(r.status == 0, "%s: exit %d: %s", args, r.status, r.err);
        json_t *o = parse(r.out);
        assert_plugin_keys(o, 1);
        ck_assert_str_eq(str(o, "name"), lookups[k][1]);
        /* the same object as list's element, plus each backend's probe details */
        json_t *same = find_plugin(pl, "path", str(o, "path"));
        ck_assert_ptr_nonnull(same);
        size_t i;
        json_t *b;
        json_array_foreach(json_object_get(o, "backends"), i, b) json_object_del(b, "details");
        ck_assert_msg(json_equal(o, same), "info %s differs from list", lookups[k][0]);
        json_decref(o);
        tu_result_free(&r);
    }

    tu_result r = tool(dir, "info tp-high --json");
    json_t *o = parse(r.out);
    ck_assert_str_eq(str(backend_named(o, "tp-avail"), "details"), "tp details: nothing to see");
    json_decref(o);
    tu_result_free(&r);

    r = tool(dir, "info tp-backend");
    ck_assert_int_eq(r.status, 0);
    ck_assert_msg(strstr(r.out, "name:     tp-backend\n") &&
                      strstr(r.out, "  tp-high (priority 200): not available: no tp device\n") &&
                      strstr(r.out, "      details:\n        tp details: nothing to see\n"),
                  "%s", r.out);
    tu_result_free(&r);

    r = tool(dir, "info junk");
    ck_assert_int_eq(r.status, 0);
    ck_assert_msg(strstr(r.out, "status:   refused\nreason:   not an ELF file\n"), "%s", r.out);
    tu_result_free(&r);

    json_decref(list);
    tu_result_free(&l);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

START_TEST(exit_codes)
{
    char *dir = mixed_dir();
    tu_result r = tool(dir, "info no-such-thing");
    ck_assert_int_eq(r.status, 1);
    ck_assert_str_eq(r.out, "");
    /* one line naming the NAME (refusal warnings of the junk files come before it) */
    const char *last = strstr(r.err, "rlx-plugins: ");
    ck_assert_ptr_nonnull(last);
    ck_assert_str_eq(last, "rlx-plugins: no plugin, block, backend or arch named 'no-such-thing' "
                           "(see rlx-plugins list)\n");
    tu_result_free(&r);
    r = tool(dir, "info no-such-thing --json");
    ck_assert_int_eq(r.status, 1);
    ck_assert_str_eq(r.out, "");
    tu_result_free(&r);

    static const char *const bad[] = {"", "bogus", "list extra", "info", "info a b",
                                      "list --frob", "--json"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        r = tool(dir, bad[k]);
        ck_assert_msg(r.status == 2, "'%s': exit %d", bad[k], r.status);
        ck_assert_msg(strstr(r.err, "usage: rlx-plugins list [--json]"), "'%s': %s", bad[k], r.err);
        ck_assert_str_eq(r.out, "");
        tu_result_free(&r);
    }
    r = tool(dir, "--help");
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "usage: rlx-plugins"));
    tu_result_free(&r);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* --isolate: a plugin that exits or whose constructor runs code is refused, the tool
 * still lists everything; stdout that cannot be written is exit 1. */
START_TEST(isolate_flag)
{
    static const char *const names[] = {"tp-block", "tp-exit", "tp-ctor", NULL};
    char *dir = tp_dir(names);
    char cmd[16384];
    /* $$ is the shell that execs the tool (libtool's wrapper execs too): the host's pid */
    snprintf(cmd, sizeof cmd,
             "export TP_MARKER='%s/marker' TP_HOST_PID=$$ RLX_PLUGIN_PATH='%s'; exec '%s' list --isolate",
             dir, dir, tu_tool("tools/rlx-plugins"));
    tu_result r = tu_run(cmd, 120);
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "    refused: isolation: the process exited with status 0 "
                                        "in rlx_plugin_init\n"));
    ck_assert_ptr_nonnull(strstr(r.out, "    refused: rlx_plugin_init returned NULL\n"));
    ck_assert_ptr_nonnull(strstr(r.out, "), 2 refused\n"));
    char marker[4200];
    snprintf(marker, sizeof marker, "%s/marker", dir);
    ck_assert_msg(access(marker, F_OK) != 0, "tp-ctor's constructor ran in rlx-plugins");
    tu_result_free(&r);
    /* the same without isolation: the constructor does run in the tool */
    snprintf(cmd, sizeof cmd,
             "rm -f '%s/tp-exit.so'; export TP_MARKER='%s/marker' TP_HOST_PID=$$ "
             "RLX_PLUGIN_PATH='%s'; exec '%s' list",
             dir, dir, dir, tu_tool("tools/rlx-plugins"));
    r = tu_run(cmd, 120);
    ck_assert_int_eq(r.status, 0);
    ck_assert_int_eq(access(marker, F_OK), 0);
    tu_result_free(&r);
    /* results written to a full device */
    r = tool(dir, "list > /dev/full");
    ck_assert_int_eq(r.status, 1);
    ck_assert_ptr_nonnull(strstr(r.err, "rlx-plugins: writing standard output failed\n"));
    tu_result_free(&r);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* A folder of 500 foreign .so files: three refusal warnings and one summary line, not 500. */
START_TEST(many_refusals_one_summary)
{
    static const char *const names[] = {"tp-block", NULL};
    char *dir = tp_dir(names);
    for (int i = 0; i < 500; i++) {
        char f[32];
        snprintf(f, sizeof f, "junk%03d.so", i);
        tp_write(dir, f, "text\n", 5);
    }
    tu_result r = tool(dir, "list");
    ck_assert_int_eq(r.status, 0);
    size_t warn = 0;
    for (const char *p = r.err; (p = strstr(p, "registry: refused: not an ELF file")); p++) warn++;
    ck_assert_uint_eq(warn, 3);
    ck_assert_ptr_nonnull(strstr(r.err, "registry: 497 more plugin files refused (rlx-plugins list says why)\n"));
    ck_assert_ptr_nonnull(strstr(r.out, "), 500 refused\n"));
    tu_result_free(&r);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* The build tree's real plugins (whichever exist yet) all load, next to the test ones. */
START_TEST(real_plugins_load)
{
    const char *env = getenv("RLX_PLUGIN_PATH");
    ck_assert_msg(env && *env, "RLX_PLUGIN_PATH is not set by the test environment");
    char *dir = mixed_dir();
    char *both = NULL;
    ck_assert_int_ge(asprintf(&both, "%s:%s", dir, env), 0);
    tu_result r = tool(both, "list --json");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    json_t *j = parse(r.out);
    json_t *pl = json_object_get(j, "plugins");

    int want_block = 0, want_backend = 0, want_arch = 0, n_real = 0;
    char *copy = strdup(env);
    for (char *save = NULL, *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        DIR *dh = opendir(d);
        if (!dh) continue;
        struct dirent *e;
        while ((e = readdir(dh))) {
            size_t n = strlen(e->d_name);
            if (n < 4 || strcmp(e->d_name + n - 3, ".so") != 0) continue;
            char path[8192];
            snprintf(path, sizeof path, "%s/%s", d, e->d_name);
            json_t *p = find_plugin(pl, "path", path);
            ck_assert_msg(p != NULL, "%s not listed", path);
            ck_assert_msg(strcmp(str(p, "status"), "loaded") == 0, "%s refused: %s", path,
                          json_string_value(json_object_get(p, "reason")));
            assert_plugin_keys(p, 0);
            n_real++;
            if (strstr(d, "/plugins/blocks/")) want_block = 1;
            if (strstr(d, "/plugins/backends/")) want_backend = 1;
            if (strstr(d, "/plugins/arch/")) want_arch = 1;
        }
        closedir(dh);
    }
    free(copy);
    size_t i;
    json_t *p;
    size_t n_blocks = 0, n_backends = 0, n_archs = 0;
    json_array_foreach(pl, i, p)
    {
        if (strncmp(str(p, "path"), dir, strlen(dir)) == 0) continue;
        n_blocks += json_array_size(json_object_get(p, "blocks"));
        n_backends += json_array_size(json_object_get(p, "backends"));
        n_archs += json_array_size(json_object_get(p, "archs"));
    }
    if (want_block) ck_assert_uint_ge(n_blocks, 1);
    if (want_backend) ck_assert_uint_ge(n_backends, 1);
    if (want_arch) ck_assert_uint_ge(n_archs, 1);
    /* the test plugins still load beside them */
    ck_assert_str_eq(str(find_plugin(pl, "name", "tp-block"), "status"), "loaded");
    fprintf(stderr, "real plugins in the build tree: %d (%zu blocks, %zu backends, %zu archs)\n",
            n_real, n_blocks, n_backends, n_archs);
    json_decref(j);
    tu_result_free(&r);
    free(both);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rlx-plugins");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, list_json_mixed);
    tcase_add_test(tc, list_table);
    tcase_add_test(tc, info_by_any_name);
    tcase_add_test(tc, exit_codes);
    tcase_add_test(tc, real_plugins_load);
    tcase_add_test(tc, isolate_flag);
    tcase_add_test(tc, many_refusals_one_summary);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
