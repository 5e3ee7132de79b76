/* FlowMatchEulerDiscreteScheduler (diffusers) as FluxPipeline drives it. The float32
 * roundings follow diffusers: the sigmas are cast to float32 before the shift, the shift
 * runs in float32 (numpy keeps a float32 array float32 against Python floats), and the
 * timesteps are the float32 sigmas × 1000 in float32. */
#include "flux_schedule.h"
#include <math.h>

void flux_schedule_defaults(flux_sched_config *c)
{
    c->num_train_timesteps = 1000;
    c->shift = 3.0;
    c->use_dynamic_shifting = 1;
    c->base_shift = 0.5;
    c->max_shift = 1.15;
    c->base_image_seq_len = 256;
    c->max_image_seq_len = 4096;
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
            /* exp(mu) / (exp(mu) + (1 / t - 1) ** 1.0) */
            float r = one / s - one;
            sh = e / (e + r);
        } else {
            /* shift · s / (1 + (shift - 1) · s) */
            sh = shift * s / (one + (shift - one) * s);
        }
        sigmas[i] = sh;
        timesteps[i] = sh * (float)c->num_train_timesteps;
    }
    sigmas[steps] = 0.0f;
    return 0;
}

void flux_euler_step(float *x, const float *v, size_t n, float sigma, float sigma_next)
{
    float dt = sigma_next - sigma;
    for (size_t i = 0; i < n; i++) x[i] = x[i] + dt * v[i];
}
