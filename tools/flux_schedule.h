/* The FLUX sampling schedule as diffusers computes it: FlowMatchEulerDiscreteScheduler
 * with dynamic (exponential) shifting, the sigmas FluxPipeline passes
 * (np.linspace(1, 1/N, N)), mu from calculate_shift on the image sequence length, and
 * the Euler step. Model-agnostic pipeline arithmetic: the core knows nothing of it. */
#ifndef RLX_FLUX_SCHEDULE_H
#define RLX_FLUX_SCHEDULE_H
#include <stddef.h>
#include <stdint.h>

/* FlowMatchEulerDiscreteScheduler's config (scheduler_config.json); FLUX.1-dev's values
 * from flux_schedule_defaults */
typedef struct flux_sched_config {
    int64_t num_train_timesteps; /* 1000 */
    double shift;                /* 3.0: static shifting, used when use_dynamic_shifting is 0 */
    int use_dynamic_shifting;    /* 1 */
    double base_shift, max_shift;            /* 0.5, 1.15 */
    int64_t base_image_seq_len, max_image_seq_len; /* 256, 4096 */
    int time_shift_linear;       /* time_shift_type "linear" (0: "exponential") */
    double shift_terminal;       /* stretch the shifted sigmas to end there; 0: off (null) */
} flux_sched_config;

void flux_schedule_defaults(flux_sched_config *c);

/* Reads a scheduler_config.json over c (absent keys keep c's values). Keys that change the
 * sigmas in ways not implemented (karras / exponential / beta sigmas, invert_sigmas,
 * stochastic_sampling, use_flow_sigmas, another _class_name) are refused. 0, or -1 with one
 * line in err naming the file and the key. */
int flux_schedule_load(const char *path, flux_sched_config *c, char *err, size_t len);

/* diffusers.pipelines.flux2.pipeline_flux2.compute_empirical_mu: Flux2Pipeline's mu (it
 * does not use calculate_shift) */
double flux2_empirical_mu(int64_t image_seq_len, int steps);

/* diffusers.pipelines.flux.pipeline_flux.calculate_shift (in double, as Python) */
double flux_calculate_shift(int64_t image_seq_len, const flux_sched_config *c);

/* set_timesteps(sigmas=linspace(1, 1/steps, steps), mu): timesteps[steps] and
 * sigmas[steps + 1] (the last 0), in float32 exactly as numpy/torch round them.
 * mu is ignored without dynamic shifting. 0, or -1 when steps < 1. */
int flux_set_timesteps(const flux_sched_config *c, int steps, double mu, float *timesteps, float *sigmas);

/* scheduler.step: x += (sigma_next - sigma) · v, in float32 */
void flux_euler_step(float *x, const float *v, size_t n, float sigma, float sigma_next);
#endif
