/* ABI compatibility: plugins built against the frozen 1.0 headers (tests/abi-1.0) load
 * and run on this host: a 1.0 recipe + block run llama32-tiny to the reference logits. */
#include "rlx/rlx.h"
#include "parity_util.h"
#include "testutil.h"
#include "tp_files.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

START_TEST(recipe_1_0_runs)
{
    static const char *const names[] = {"tp-llama10", NULL};
    char *dir = tp_dir(names);
    /* the fixture, claiming the 1.0 recipe's model type */
    char *model = tu_mkdtemp(), path[4200];
    size_t len;
    char *cfg = tu_read_file(tu_fixture("llama32-tiny/config.json"), &len);
    ck_assert_ptr_nonnull(cfg);
    char *mt = strstr(cfg, "\"llama\"");
    ck_assert_ptr_nonnull(mt);
    *mt = 0;
    FILE *f = fopen((snprintf(path, sizeof path, "%s/config.json", model), path), "w");
    fprintf(f, "%s\"tp10_llama\"%s", cfg, mt + strlen("\"llama\""));
    fclose(f);
    free(cfg);
    snprintf(path, sizeof path, "%s/model.safetensors", model);
    ck_assert_int_eq(symlink(tu_fixture("llama32-tiny/model.safetensors"), path), 0);

    char plugins[8192];
    snprintf(plugins, sizeof plugins, "%s:%s", getenv("RLX_PLUGIN_PATH"), dir);
    rlx_model_options o;
    rlx_model_options_init(&o);
    o.plugin_path = plugins;
    o.backend = "cpu";
    rlx_model *m = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_model_open(model, &o, &m, &d) == 0, "%s", d.msg);
    ck_assert_int_eq(rlx_model_get_config(m)->num_layers, 3);

    rlx_weights *ref = pu_open_ref("llama32-tiny");
    size_t t, n;
    int32_t *ids = pu_read_case_ids(ref, 1, &t);
    float *want = pu_read_case_f32(ref, 1, "logits", &n);
    float *got = malloc(n * sizeof *got);
    rlx_session *s = NULL;
    ck_assert_msg(rlx_session_new(m, 0, &s, &d) == 0, "%s", d.msg);
    ck_assert_msg(rlx_session_prefill(s, ids, (int64_t)t, got, NULL, &d) == 0, "%s", d.msg);
    double e = tu_rel_l2(got, want, n);
    ck_assert_msg(e < 1e-4, "1.0 recipe: rel L2 %g", e);
    rlx_session_free(s);
    rlx_model_close(m);
    rlx_weights_close(ref);
    free(ids);
    free(want);
    free(got);
    tu_rmrf(model);
    tu_rmrf(dir);
    free(model);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("abi_compat");
    TCase *tc = tcase_create("abi_compat");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, recipe_1_0_runs);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
