/* ABI compatibility: plugins built against the frozen 1.0 headers (tests/abi-1.0) load
 * and run on this host: a 1.0 recipe + block run llama32-tiny to the reference logits, and
 * a 1.0 backend (no mem_info / measure_ceilings, ABI 1.2) runs it too without the host
 * reading past its struct. */
#include "rlx/rlx.h"
#include "parity_util.h"
#include "testutil.h"
#include "tp_files.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* llama32-tiny's case 1 prefilled on m matches transformers' logits; the session stays
 * open (its KV cache counts in the model's memory) */
static rlx_session *run_case1(rlx_model *m, const char *what)
{
    rlx_diag d;
    rlx_diag_init(&d);
    rlx_weights *ref = pu_open_ref("llama32-tiny");
    size_t t, n;
    int32_t *ids = pu_read_case_ids(ref, 1, &t);
    float *want = pu_read_case_f32(ref, 1, "logits", &n);
    float *got = malloc(n * sizeof *got);
    rlx_session *s = NULL;
    ck_assert_msg(rlx_session_new(m, 0, &s, &d) == 0, "%s", d.msg);
    ck_assert_msg(rlx_session_prefill(s, ids, (int64_t)t, got, NULL, &d) == 0, "%s", d.msg);
    double e = tu_rel_l2(got, want, n);
    ck_assert_msg(e < 1e-4, "%s: rel L2 %g", what, e);
    rlx_weights_close(ref);
    free(ids);
    free(want);
    free(got);
    return s;
}

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

    rlx_session *s = run_case1(m, "1.0 recipe");
    rlx_session_free(s);
    rlx_model_close(m);
    tu_rmrf(model);
    tu_rmrf(dir);
    free(model);
    free(dir);
}
END_TEST

/* the CPU backend behind a 1.0-sized rlx_backend (tests/plugins/tp-cpu10.c): the model
 * runs to the reference, its memory is reported from host memory, and no ceilings */
START_TEST(backend_1_0_runs)
{
    static const char *const names[] = {"tp-cpu10", NULL};
    char *dir = tp_dir(names), plugins[8192];
    snprintf(plugins, sizeof plugins, "%s:%s", getenv("RLX_PLUGIN_PATH"), dir);
    ck_assert_int_eq(setenv("RLX_TP_CPU_PLUGIN", tu_build("plugins/backends/cpu/.libs/rlx-backend-cpu.so"), 1), 0);
    rlx_model_options o;
    rlx_model_options_init(&o);
    o.plugin_path = plugins;
    o.backend = "cpu10";
    o.threads = 1;
    rlx_model *m = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_model_open(tu_fixture("llama32-tiny"), &o, &m, &d) == 0, "%s", d.msg);
    ck_assert_str_eq(rlx_model_backend_name(m), "cpu10");

    rlx_session *s = run_case1(m, "1.0 backend");

    rlx_memory mem;
    ck_assert_msg(rlx_model_memory(m, &mem, &d) == 0, "%s", d.msg);
    ck_assert_str_eq(mem.device, "cpu10 (host memory)");
    ck_assert_msg(mem.kv_cache_bytes > 0 && mem.free_bytes > 0 && mem.total_bytes == 0, "kv %llu free %llu total %llu",
                  (unsigned long long)mem.kv_cache_bytes, (unsigned long long)mem.free_bytes,
                  (unsigned long long)mem.total_bytes);
    rlx_ceiling_figures cf;
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_model_measure_ceilings(m, 8, 8, 8, RLX_F32, &cf, &d), RLX_ERR_UNSUPPORTED);
    ck_assert_str_eq(d.msg, "backend cpu10: measures no ceilings");
    rlx_session_free(s);
    rlx_model_close(m);
    unsetenv("RLX_TP_CPU_PLUGIN");
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* rlx_backend_options.graphs (tests/plugins/tp-graphs.c echoes it): each phase's profile
 * decides for its programs. The LLaMA presets replay graphs in decode only (2); one
 * profile for both phases gives all (1) or none (0). */
START_TEST(backend_graphs_by_phase)
{
    static const char *const names[] = {"tp-graphs", NULL};
    static const struct { const char *profile; const char *msg; } cases[] = {
        {NULL, "tp-graphs: given graphs 2"},
        {"llama32_decode", "tp-graphs: given graphs 1"},
        {"llama32_prefill", "tp-graphs: given graphs 0"},
    };
    char *dir = tp_dir(names), plugins[8192];
    snprintf(plugins, sizeof plugins, "%s:%s", getenv("RLX_PLUGIN_PATH"), dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        rlx_model_options o;
        rlx_model_options_init(&o);
        o.plugin_path = plugins;
        o.backend = "tp-graphs";
        o.profile = cases[i].profile;
        rlx_model *m = NULL;
        rlx_diag d;
        rlx_diag_init(&d);
        ck_assert_int_eq(rlx_model_open(tu_fixture("llama32-tiny"), &o, &m, &d), RLX_ERR_UNSUPPORTED);
        ck_assert_ptr_null(m);
        ck_assert_str_eq(d.msg, cases[i].msg);
    }
    tu_rmrf(dir);
    free(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("abi_compat");
    TCase *tc = tcase_create("abi_compat");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, recipe_1_0_runs);
    tcase_add_test(tc, backend_1_0_runs);
    tcase_add_test(tc, backend_graphs_by_phase);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
