/* The bad-input corpus through the command line: every case makes rlx-run forward and
 * rlx-run generate exit 1 with one stderr line naming the problem; never a signal or
 * a hang. Error texts come from the loaders (tests/bad-inputs/<case>/expect.txt). */
#define _GNU_SOURCE
#include "testutil.h"
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *tmp;

static char *value_of(const char *text, const char *key)
{
    const char *p = strstr(text, key);
    if (!p) return NULL;
    p += strlen(key);
    return strndup(p, strcspn(p, "\n"));
}

static void expect_failure(const char *what, const char *cmd, const char *want)
{
    tu_result r = tu_run(cmd, 60);
    ck_assert_msg(r.status == 1, "%s: exit status %d (want 1)\n$ %s\nstderr: %s", what, r.status, cmd,
                  r.err);
    ck_assert_msg(strstr(r.err, want) != NULL, "%s: stderr lacks '%s'\n$ %s\nstderr: %s", what, want,
                  cmd, r.err);
    tu_result_free(&r);
}

static const char *rlx_run(void)
{
    static char p[4096];
    snprintf(p, sizeof p, "%s", tu_tool("tools/rlx-run"));
    return p;
}

START_TEST(control_good_model_runs)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s' --out '%s/out.safetensors'",
             rlx_run(), tu_src("tests/bad-inputs/good-micro"),
             tu_src("tests/bad-inputs/inputs/good.safetensors"), tmp);
    tu_result r = tu_run(cmd, 60);
    ck_assert_msg(r.status == 0, "good model: exit %d: %s", r.status, r.err);
    tu_result_free(&r);
    snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids 1,2 -n 2", rlx_run(),
             tu_src("tests/bad-inputs/good-micro"));
    r = tu_run(cmd, 60);
    ck_assert_msg(r.status == 0, "good model generate: exit %d: %s", r.status, r.err);
    tu_result_free(&r);
}
END_TEST

START_TEST(bad_models)
{
    char root[4096];
    snprintf(root, sizeof root, "%s", tu_src("tests/bad-inputs"));
    const char *good_in = tu_src("tests/bad-inputs/inputs/good.safetensors");
    char good_inputs[4096];
    snprintf(good_inputs, sizeof good_inputs, "%s", good_in);
    DIR *dir = opendir(root);
    ck_assert_ptr_nonnull(dir);
    struct dirent *de;
    int cases = 0;
    while ((de = readdir(dir)) != NULL) {
        char cdir[4400], ef[4500], cmd[16384];
        snprintf(cdir, sizeof cdir, "%s/%s", root, de->d_name);
        snprintf(ef, sizeof ef, "%s/expect.txt", cdir);
        size_t len;
        char *exp = tu_read_file(ef, &len);
        if (!exp) continue;
        char *stage = value_of(exp, "stage: "), *want = value_of(exp, "expect: ");
        if (strcmp(stage, "none") != 0) {
            snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s' --out '%s/out.safetensors'",
                     rlx_run(), cdir, good_inputs, tmp);
            expect_failure(de->d_name, cmd, want);
            snprintf(cmd, sizeof cmd, "'%s' generate --model '%s' --ids 1,2 -n 2", rlx_run(), cdir);
            expect_failure(de->d_name, cmd, want);
            cases++;
        }
        free(stage);
        free(want);
        free(exp);
    }
    closedir(dir);
    ck_assert_int_ge(cases, 29);
}
END_TEST

START_TEST(bad_inputs_files)
{
    static const char *const ins[] = {"garbage", "truncated", "f64-ids"};
    for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++) {
        char in[4200], ef[4200], model[4096], cmd[16384];
        snprintf(in, sizeof in, "%s/%s.safetensors", tu_src("tests/bad-inputs/inputs"), ins[i]);
        snprintf(ef, sizeof ef, "%s/%s.expect", tu_src("tests/bad-inputs/inputs"), ins[i]);
        snprintf(model, sizeof model, "%s", tu_src("tests/bad-inputs/good-micro"));
        size_t len;
        char *want = tu_read_file(ef, &len);
        ck_assert_ptr_nonnull(want);
        want[strcspn(want, "\n")] = 0;
        snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s' --out '%s/out.safetensors'",
                 rlx_run(), model, in, tmp);
        expect_failure(ins[i], cmd, want);
        free(want);
    }
}
END_TEST

int main(void)
{
    tmp = tu_mkdtemp();
    Suite *s = suite_create("bad_inputs_cli");
    TCase *tc = tcase_create("cli");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, control_good_model_runs);
    tcase_add_test(tc, bad_models);
    tcase_add_test(tc, bad_inputs_files);
    suite_add_tcase(s, tc);
    int failed = tu_run_suite(s) != 0;
    tu_rmrf(tmp);
    free(tmp);
    return failed ? 1 : 0;
}
