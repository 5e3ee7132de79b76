/* The FLUX schedule (tools/flux_schedule.c) against diffusers: for every case of
 * tests/fixtures/flux-schedule.json (FLUX.1-dev's scheduler config; steps and image
 * sequence length), mu from calculate_shift, the timesteps and the sigmas of
 * FlowMatchEulerDiscreteScheduler.set_timesteps, each within 1e-6 (relative for the
 * timesteps, which run to 1000); the fixture's scheduler_config read as a
 * scheduler_config.json; FLUX.2's compute_empirical_mu; time_shift_type "linear" and
 * shift_terminal; unsupported scheduler options refused naming the file and key. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"
#include "../tools/flux_schedule.h"

static double num(json_t *o, const char *key)
{
    json_t *v = json_object_get(o, key);
    ck_assert_msg(json_is_number(v), "flux-schedule.json: %s is not a number", key);
    return json_number_value(v);
}

START_TEST(test_schedule_cases)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/flux-schedule.json", tu_fixture("."));
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    ck_assert_msg(root != NULL, "%s: %s", path, err.text);
    json_t *sc = json_object_get(root, "scheduler_config"), *cases = json_object_get(root, "cases");
    ck_assert(json_is_object(sc) && json_is_array(cases) && json_array_size(cases) >= 4);
    flux_sched_config c;
    flux_schedule_defaults(&c);
    /* the fixture's config is FLUX.1-dev's: the defaults must be it */
    ck_assert(num(sc, "shift") == c.shift && num(sc, "base_shift") == c.base_shift &&
              num(sc, "max_shift") == c.max_shift && num(sc, "base_image_seq_len") == (double)c.base_image_seq_len &&
              num(sc, "max_image_seq_len") == (double)c.max_image_seq_len);
    ck_assert(json_is_true(json_object_get(sc, "use_dynamic_shifting")) && c.use_dynamic_shifting);
    size_t i;
    json_t *cs;
    json_array_foreach(cases, i, cs) {
        int steps = (int)num(cs, "steps");
        int64_t seq = (int64_t)num(cs, "image_seq_len");
        double mu = flux_calculate_shift(seq, &c), want_mu = num(cs, "mu");
        ck_assert_msg(fabs(mu - want_mu) <= 1e-6, "case %zu: mu %.9g, diffusers %.9g", i, mu, want_mu);
        float *ts = calloc((size_t)steps + 1, sizeof *ts), *sg = calloc((size_t)steps + 2, sizeof *sg);
        ck_assert(flux_set_timesteps(&c, steps, mu, ts, sg) == 0);
        json_t *wt = json_object_get(cs, "timesteps"), *ws = json_object_get(cs, "sigmas");
        ck_assert_msg(json_array_size(wt) == (size_t)steps && json_array_size(ws) == (size_t)steps + 1,
                      "case %zu: %d steps, the fixture lists %zu timesteps and %zu sigmas", i, steps,
                      json_array_size(wt), json_array_size(ws));
        double worst_t = 0, worst_s = 0;
        for (int k = 0; k <= steps; k++) {
            double s = json_number_value(json_array_get(ws, (size_t)k));
            double es = fabs(sg[k] - s);
            ck_assert_msg(es <= 1e-6, "case %zu: sigmas[%d] %.9g, diffusers %.9g", i, k, sg[k], s);
            if (es > worst_s) worst_s = es;
            if (k == steps) break;
            double t = json_number_value(json_array_get(wt, (size_t)k));
            double et = fabs(ts[k] - t) / fmax(fabs(t), 1.0);
            ck_assert_msg(et <= 1e-6, "case %zu: timesteps[%d] %.9g, diffusers %.9g", i, k, ts[k], t);
            if (et > worst_t) worst_t = et;
        }
        printf("schedule steps %d seq %lld: mu %.9g, max sigma error %.3g, max timestep rel error %.3g\n", steps,
               (long long)seq, mu, worst_s, worst_t);
        free(ts);
        free(sg);
    }
    json_decref(root);
}
END_TEST

/* the schedule flux1-denoise was made with: 3 steps, a 3 × 4 token grid */
START_TEST(test_denoise_schedule)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/ref.json", tu_fixture("flux1-denoise"));
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    ck_assert_msg(root != NULL, "%s: %s", path, err.text);
    flux_sched_config c;
    flux_schedule_defaults(&c);
    int steps = (int)num(root, "steps");
    int64_t seq = (int64_t)num(root, "height_tokens") * (int64_t)num(root, "width_tokens");
    double mu = flux_calculate_shift(seq, &c);
    ck_assert_msg(fabs(mu - num(root, "mu")) <= 1e-6, "mu %.9g, diffusers %.9g", mu, num(root, "mu"));
    float ts[8], sg[9];
    ck_assert(steps == 3 && flux_set_timesteps(&c, steps, mu, ts, sg) == 0);
    for (int k = 0; k <= steps; k++) {
        double s = json_number_value(json_array_get(json_object_get(root, "sigmas"), (size_t)k));
        ck_assert_msg(fabs(sg[k] - s) <= 1e-6, "sigmas[%d] %.9g, diffusers %.9g", k, sg[k], s);
        if (k == steps) break;
        double t = json_number_value(json_array_get(json_object_get(root, "timesteps"), (size_t)k));
        ck_assert_msg(fabs(ts[k] - t) <= 1e-6 * fabs(t), "timesteps[%d] %.9g, diffusers %.9g", k, ts[k], t);
    }
    json_decref(root);
}
END_TEST

START_TEST(test_euler_and_static_shift)
{
    flux_sched_config c;
    flux_schedule_defaults(&c);
    float ts[2], sg[3];
    ck_assert(flux_set_timesteps(&c, 0, 0.5, ts, sg) == -1);
    /* without dynamic shifting: shift·s / (1 + (shift-1)·s); s = 1 stays 1, s = 0.5 -> 0.75 */
    c.use_dynamic_shifting = 0;
    ck_assert(flux_set_timesteps(&c, 2, 0, ts, sg) == 0);
    ck_assert(sg[0] == 1.0f && fabsf(sg[1] - 0.75f) < 1e-7f && sg[2] == 0.0f && ts[0] == 1000.0f);
    float x[2] = {1.0f, -2.0f}, v[2] = {0.5f, 4.0f};
    flux_euler_step(x, v, 2, 1.0f, 0.75f);
    ck_assert(fabsf(x[0] - 0.875f) < 1e-7f && fabsf(x[1] + 3.0f) < 1e-7f);
}
END_TEST

/* text into a temp file; returns its path (static buffer) */
static const char *write_tmp(char *dir, const char *text)
{
    static char path[1024];
    snprintf(path, sizeof path, "%s/scheduler_config.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    ck_assert_int_eq(fclose(f), 0);
    return path;
}

START_TEST(test_load_config)
{
    char fx[1024], err[512];
    snprintf(fx, sizeof fx, "%s/flux-schedule.json", tu_fixture("."));
    json_error_t je;
    json_t *root = json_load_file(fx, 0, &je);
    ck_assert_msg(root != NULL, "%s: %s", fx, je.text);
    char *text = json_dumps(json_object_get(root, "scheduler_config"), 0), *dir = tu_mkdtemp();
    flux_sched_config c, want;
    memset(&want, 0, sizeof want); /* padding compared too */
    flux_schedule_defaults(&want);
    memset(&c, 0, sizeof c);
    c.num_train_timesteps = 1000;
    c.shift = 9; /* every key of the fixture's config overrides these */
    c.base_shift = c.max_shift = 7;
    c.base_image_seq_len = 1;
    c.max_image_seq_len = 2;
    ck_assert_msg(flux_schedule_load(write_tmp(dir, text), &c, err, sizeof err) == 0, "%s", err);
    ck_assert(memcmp(&c, &want, sizeof c) == 0);
    free(text);
    json_decref(root);
    /* "linear" time shift: mu / (mu + 1/s - 1); shift_terminal: the last sigma lands on it */
    ck_assert_msg(flux_schedule_load(write_tmp(dir, "{\"time_shift_type\": \"linear\", \"shift_terminal\": 0.02}"),
                                     &c, err, sizeof err) == 0, "%s", err);
    ck_assert(c.time_shift_linear == 1 && c.shift_terminal == 0.02);
    float ts[5], sg[6];
    c.shift_terminal = 0;
    ck_assert(flux_set_timesteps(&c, 4, 0.8, ts, sg) == 0);
    for (int k = 0; k < 4; k++) {
        double s = 1.0 - 0.25 * k, want_s = 0.8 / (0.8 + 1.0 / s - 1.0);
        ck_assert_msg(fabs(sg[k] - want_s) <= 1e-6, "linear shift: sigmas[%d] %.9g, want %.9g", k, sg[k], want_s);
    }
    c.shift_terminal = 0.02;
    ck_assert(flux_set_timesteps(&c, 4, 0.8, ts, sg) == 0);
    ck_assert_msg(fabs(sg[3] - 0.02) <= 1e-6 && fabs(ts[3] - 20.0) <= 1e-4 && sg[4] == 0.0f && sg[0] == 1.0f,
                  "shift_terminal: sigmas %.9g .. %.9g", sg[0], sg[3]);
    /* refused: a sigma option not implemented, a wrong type */
    const char *bad[3][2] = {{"{\"use_karras_sigmas\": true}", "use_karras_sigmas: only false is supported"},
                             {"{\"shift\": \"3\"}", "shift: expected a number"},
                             {"{\"_class_name\": \"EulerDiscreteScheduler\"}", "_class_name: only FlowMatch"}};
    for (int i = 0; i < 3; i++) {
        const char *p = write_tmp(dir, bad[i][0]);
        ck_assert(flux_schedule_load(p, &c, err, sizeof err) == -1);
        ck_assert_msg(strstr(err, p) == err && strstr(err, bad[i][1]), "%s: %s", bad[i][0], err);
    }
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* Flux2Pipeline's compute_empirical_mu (pure Python floats: the values Python gives) */
START_TEST(test_flux2_mu)
{
    static const struct { int64_t seq; int steps; double mu; } cases[] = {
        {4096, 28, 2.151443161774889}, {4096, 4, 2.291179894115571}, {1024, 50, 1.7019562073086316},
        {16, 4, 1.9452163656143495},   {4301, 28, 1.18469693},      {12, 3, 1.9524597330603874}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        double mu = flux2_empirical_mu(cases[i].seq, cases[i].steps);
        ck_assert_msg(fabs(mu - cases[i].mu) <= 1e-12, "seq %lld steps %d: mu %.17g, Python %.17g",
                      (long long)cases[i].seq, cases[i].steps, mu, cases[i].mu);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("flux_schedule");
    TCase *c = tcase_create("schedule");
    tcase_add_test(c, test_schedule_cases);
    tcase_add_test(c, test_denoise_schedule);
    tcase_add_test(c, test_euler_and_static_shift);
    tcase_add_test(c, test_load_config);
    tcase_add_test(c, test_flux2_mu);
    suite_add_tcase(s, c);
    return s;
}

int main(void)
{
    return tu_run_suite(suite());
}
