/* FlowMatchEulerDiscreteScheduler (diffusers) as FluxPipeline drives it. The float32
 * roundings follow diffusers: the sigmas are cast to float32 before the shift, the shift
 * runs in float32 (numpy keeps a float32 array float32 against Python floats), and the
 * timesteps are the float32 sigmas × 1000 in float32. scheduler_config.json is read with
 * jansson (the keys diffusers' set_timesteps uses for flow-matching sigmas). */
#include "flux_schedule.h"
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

void flux_schedule_defaults(flux_sched_config *c)
{
    c->num_train_timesteps = 1000;
    c->shift = 3.0;
    c->use_dynamic_shifting = 1;
    c->base_shift = 0.5;
    c->max_shift = 1.15;
    c->base_image_seq_len = 256;
    c->max_image_seq_len = 4096;
    c->time_shift_linear = 0;
    c->shift_terminal = 0.0;
}

#define BAD(...) (snprintf(err, len, __VA_ARGS__), -1)

/* a number key (JSON null: absent); 1 found, 0 absent, -1 bad */
static int jnum(json_t *o, const char *key, double *v)
{
    json_t *j = json_object_get(o, key);
    if (!j || json_is_null(j)) return 0;
    if (!json_is_number(j)) return -1;
    *v = json_number_value(j);
    return 1;
}

/* keys that would change the schedule in ways this implementation does not follow */
static const char *const refused[] = {"use_karras_sigmas", "use_exponential_sigmas", "use_beta_sigmas",
                                      "invert_sigmas", "stochastic_sampling", "use_flow_sigmas", NULL};

int flux_schedule_load(const char *path, flux_sched_config *c, char *err, size_t len)
{
    json_error_t je;
    json_t *o = json_load_file(path, JSON_REJECT_DUPLICATES, &je);
    if (!o) return BAD("%s: %s", path, je.text);
    int rc = 0;
    json_t *cls = json_object_get(o, "_class_name"), *tst = json_object_get(o, "time_shift_type");
    if (!json_is_object(o)) rc = BAD("%s: not a JSON object", path);
    else if (cls && (!json_is_string(cls) || strcmp(json_string_value(cls), "FlowMatchEulerDiscreteScheduler")))
        rc = BAD("%s: _class_name: only FlowMatchEulerDiscreteScheduler is supported", path);
    for (int i = 0; !rc && refused[i]; i++) {
        json_t *j = json_object_get(o, refused[i]);
        if (j && !json_is_null(j) && !json_is_false(j))
            rc = BAD("%s: %s: only false is supported", path, refused[i]);
    }
    if (!rc && tst && !json_is_null(tst)) {
        const char *t = json_is_string(tst) ? json_string_value(tst) : "";
        if (!strcmp(t, "exponential") || !strcmp(t, "linear")) c->time_shift_linear = !strcmp(t, "linear");
        else rc = BAD("%s: time_shift_type: expected \"exponential\" or \"linear\"", path);
    }
    json_t *dyn = json_object_get(o, "use_dynamic_shifting");
    if (!rc && dyn && !json_is_null(dyn)) {
        if (!json_is_boolean(dyn)) rc = BAD("%s: use_dynamic_shifting: expected true or false", path);
        else c->use_dynamic_shifting = json_is_true(dyn);
    }
    static const char *const nums[] = {"num_train_timesteps", "shift", "base_shift", "max_shift",
                                       "base_image_seq_len", "max_image_seq_len", "shift_terminal", NULL};
    for (int i = 0; !rc && nums[i]; i++) {
        double v = 0;
        int f = jnum(o, nums[i], &v);
        if (f < 0) rc = BAD("%s: %s: expected a number", path, nums[i]);
        if (f <= 0 || rc) continue;
        int whole = i == 0 || i == 4 || i == 5;
        if (whole && !(v >= 1 && v <= 1e9 && v == floor(v)))
            rc = BAD("%s: %s: expected a positive integer, got %g", path, nums[i], v);
        else if (!whole && !(v > -1e6 && v < 1e6))
            rc = BAD("%s: %s: %g is out of range", path, nums[i], v);
        else if (i == 0) c->num_train_timesteps = (int64_t)v;
        else if (i == 1) c->shift = v;
        else if (i == 2) c->base_shift = v;
        else if (i == 3) c->max_shift = v;
        else if (i == 4) c->base_image_seq_len = (int64_t)v;
        else if (i == 5) c->max_image_seq_len = (int64_t)v;
        else c->shift_terminal = v;
    }
    if (!rc && c->max_image_seq_len == c->base_image_seq_len)
        rc = BAD("%s: base_image_seq_len and max_image_seq_len must differ", path);
    if (!rc && (c->shift_terminal >= 1 || c->shift_terminal < 0))
        rc = BAD("%s: shift_terminal: expected a value in [0, 1), got %g", path, c->shift_terminal);
    json_decref(o);
    return rc;
}

double flux2_empirical_mu(int64_t image_seq_len, int steps)
{
    const double a1 = 8.73809524e-05, b1 = 1.89833333, a2 = 0.00016927, b2 = 0.45666666;
    double L = (double)image_seq_len;
    if (image_seq_len > 4300) return a2 * L + b2;
    double m_200 = a2 * L + b2, m_10 = a1 * L + b1;
    double a = (m_200 - m_10) / 190.0, b = m_200 - 200.0 * a;
    return a * (double)steps + b;
}

double flux_calculate_shift(int64_t image_seq_len, const flux_sched_config *c)
{
    double m = (c->max_shift - c->base_shift) / (double)(c->max_image_seq_len - c->base_image_seq_len);
    double b = c->base_shift - m * (double)c->base_image_seq_len;
    return (double)image_seq_len * m + b;
}

int flux_set_timesteps(const flux_sched_config *c, int steps, double mu, float *timesteps, float *sigmas)
{
    if (steps < 1) return -1;
    /* np.linspace(1.0, 1/steps, steps): start + i·step, the last one exactly stop */
    double start = 1.0, stop = 1.0 / steps, step = steps > 1 ? (stop - start) / (steps - 1) : 0;
    float e = (float)exp(mu), shift = (float)c->shift, one = 1.0f;
    for (int i = 0; i < steps; i++) {
        double lin = i == steps - 1 && steps > 1 ? stop : (double)i * step + start;
        float s = (float)lin, sh;
        if (c->use_dynamic_shifting) {
            /* exp(mu) / (exp(mu) + (1 / t - 1) ** 1.0), or mu / (mu + …) ("linear") */
            float r = one / s - one, m = c->time_shift_linear ? (float)mu : e;
            sh = m / (m + r);
        } else {
            /* shift · s / (1 + (shift - 1) · s) */
            sh = shift * s / (one + (shift - one) * s);
        }
        sigmas[i] = sh;
        timesteps[i] = sh * (float)c->num_train_timesteps;
    }
    if (c->shift_terminal > 0) {
        /* stretch_shift_to_terminal: 1 - (1 - s) / ((1 - s_last) / (1 - shift_terminal)) */
        float scale = (one - sigmas[steps - 1]) / (float)(1.0 - c->shift_terminal);
        for (int i = 0; i < steps; i++) {
            sigmas[i] = one - (one - sigmas[i]) / scale;
            timesteps[i] = sigmas[i] * (float)c->num_train_timesteps;
        }
    }
    sigmas[steps] = 0.0f;
    return 0;
}

void flux_euler_step(float *x, const float *v, size_t n, float sigma, float sigma_next)
{
    float dt = sigma_next - sigma;
    for (size_t i = 0; i < n; i++) x[i] = x[i] + dt * v[i];
}
