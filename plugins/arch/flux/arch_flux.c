/* rlx-arch-flux: the diffusers FLUX transformers (FluxTransformer2DModel = FLUX.1,
 * Flux2Transformer2DModel = FLUX.2), config.json -> one encode flow:
 *   flux.embed -> repeat(num_layers, flux.double_block) -> flux.single_blocks -> flux.output
 * Inputs (declared here; T = image tokens, S = text tokens): hidden_states [T, in_channels],
 * encoder_hidden_states [S, joint_attention_dim], timestep [] (raw t; ×1000 inside),
 * img_ids [T, A], txt_ids [S, A] (A = len(axes_dims_rope)), pooled_projections [P] where the
 * model has a pooled text embedder (FLUX.1: pooled_projection_dim), guidance [] where
 * guidance_embeds is true (FLUX.1-dev, FLUX.2-dev; not FLUX.1-schnell, FLUX.2-klein)
 *   -> output [T, patch_size² · (out_channels or in_channels)]. */
#include <stdio.h>
#include <string.h>
#include "../common/recipe_common.h"
#include "rlx/plugin_util.h"

#define FLUX_MAX_AXES 8

static int is_flux2(const rlx_model_config *cfg) { return strncmp(cfg->architecture, "Flux2", 5) == 0; }

/* guidance_embeds, with the class default (FLUX.1 false, FLUX.2 true) */
static int guidance_embeds(const rlx_config *src, int flux2, int *out, const rlx_host_api *h, rlx_diag *d)
{
    return h->config_bool(src, "guidance_embeds", flux2, out, d);
}

static int inputs(rlx_flow *f, const rlx_model_config *cfg, const rlx_host_api *h, int guidance)
{
    int64_t hs[2] = {-1, cfg->in_channels}, enc[2] = {-2, cfg->context_dim};
    int64_t img[2] = {-1, cfg->rope_axes}, txt[2] = {-2, cfg->rope_axes}, pooled[1] = {cfg->pooled_dim};
    int rc = h->flow_input(f, "hidden_states", RLX_F32, 2, hs);
    if (!rc) rc = h->flow_input(f, "encoder_hidden_states", RLX_F32, 2, enc);
    if (!rc) rc = h->flow_input(f, "timestep", RLX_F32, 0, NULL);
    if (!rc) rc = h->flow_input(f, "img_ids", RLX_F32, 2, img);
    if (!rc) rc = h->flow_input(f, "txt_ids", RLX_F32, 2, txt);
    if (!rc && cfg->pooled_dim > 0) rc = h->flow_input(f, "pooled_projections", RLX_F32, 1, pooled);
    if (!rc && guidance) rc = h->flow_input(f, "guidance", RLX_F32, 0, NULL);
    return rc;
}

static int build_flow(rlx_flow *flow, int phase, const rlx_model_config *cfg,
                      const rlx_host_api *host, rlx_diag *d)
{
    if (phase != RLX_PHASE_ENCODE)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "arch flux: phase %d is not encode", phase),
               RLX_ERR_UNSUPPORTED;
    if (cfg->struct_size < RLX_STRUCT_SIZE(rlx_model_config, rope_axes) || cfg->in_channels <= 0 ||
        cfg->context_dim <= 0 || cfg->rope_axes <= 0)
        return host->diag_set(d, RLX_ERR_INVALID, "config.json: in_channels, joint_attention_dim and "
                              "axes_dims_rope are required by the flux recipe"), RLX_ERR_INVALID;
    if (cfg->num_layers < 0 || cfg->num_layers > RLX_MAX_LAYERS)
        return host->diag_set(d, RLX_ERR_INVALID, "config.json: num_layers %lld is out of range [0, %d]",
                              (long long)cfg->num_layers, RLX_MAX_LAYERS), RLX_ERR_INVALID;
    int flux2 = is_flux2(cfg), guidance = flux2;
    const rlx_config *src = host->flow_config ? host->flow_config(flow) : NULL;
    if (src && guidance_embeds(src, flux2, &guidance, host, d)) return RLX_ERR_INVALID;
    if (!flux2 && cfg->pooled_dim <= 0)
        return host->diag_set(d, RLX_ERR_INVALID, "config.json: pooled_projection_dim must be positive"),
               RLX_ERR_INVALID;
    int rc = inputs(flow, cfg, host, guidance);
    if (!rc) rc = host->flow_stage(flow, "flux.embed", NULL);
    if (!rc && cfg->num_layers > 0) {
        rc = host->flow_repeat_begin(flow, cfg->num_layers);
        if (!rc) rc = host->flow_stage(flow, "flux.double_block", "{\"prefix\":\"transformer_blocks.{i}.\"}");
        if (!rc) rc = host->flow_repeat_end(flow);
    }
    if (!rc) rc = host->flow_stage(flow, "flux.single_blocks", NULL);
    if (!rc) rc = host->flow_stage(flow, "flux.output", NULL);
    if (rc)
        return host->diag_set(d, RLX_ERR_INTERNAL, "arch flux: building the encode flow failed"), RLX_ERR_INTERNAL;
    return 0;
}

/* a ratio in (0, 64] (mlp_ratio), so sizes derived from it stay small */
static int ratio(const rlx_config *src, const char *key, double def, double *out, const rlx_host_api *h,
                 rlx_diag *d)
{
    int rc = h->config_num(src, key, def, out, d);
    if (!rc && !(*out > 0 && *out <= 64))
        return h->config_fail(src, d, RLX_ERR_INVALID, "%s: expected a ratio in (0, 64], got %g", key, *out);
    return rc;
}

/* a positive even size (rope axes, sinusoid channels) */
static int even_size(const rlx_config *src, const char *key, int64_t v, const rlx_host_api *h, rlx_diag *d)
{
    if (v <= 0 || v % 2 || v > (1 << 20))
        return h->config_fail(src, d, RLX_ERR_INVALID, "%s: expected a positive even integer, got %lld", key,
                              (long long)v);
    return 0;
}

/* axes_dims_rope: 1 to FLUX_MAX_AXES positive even sizes summing to attention_head_dim
 * (diffusers' defaults (16, 56, 56) / (32, 32, 32, 32) when absent) */
static int rope_axes(const rlx_config *src, rlx_model_config *cfg, int flux2, const rlx_host_api *h, rlx_diag *d)
{
    int64_t n = h->config_len(src, "axes_dims_rope"), sum = 0;
    if (n < 0 && h->config_has(src, "axes_dims_rope"))
        return h->config_fail(src, d, RLX_ERR_INVALID, "axes_dims_rope: expected an array of integers");
    if (n < 0) {
        cfg->rope_axes = flux2 ? 4 : 3;
        sum = 128;
    } else {
        if (n < 1 || n > FLUX_MAX_AXES)
            return h->config_fail(src, d, RLX_ERR_UNSUPPORTED, "axes_dims_rope: %lld axes, 1 to %d supported",
                                  (long long)n, FLUX_MAX_AXES);
        cfg->rope_axes = (int32_t)n;
        for (int64_t a = 0; a < n; a++) {
            char key[32];
            int64_t v;
            snprintf(key, sizeof key, "axes_dims_rope.%lld", (long long)a);
            if (h->config_int(src, key, 0, &v, d) || even_size(src, key, v, h, d)) return RLX_ERR_INVALID;
            sum += v;
        }
    }
    if (sum != cfg->head_dim)
        return h->config_fail(src, d, RLX_ERR_INVALID, "axes_dims_rope: the axes sum to %lld, attention_head_dim "
                              "is %lld", (long long)sum, (long long)cfg->head_dim);
    return 0;
}

/* FluxTransformer2DModel / Flux2Transformer2DModel defaults (diffusers). The blocks read
 * the keys again (flux_dims_read): this checks them once, naming the file and key. */
static int configure(const rlx_config *src, rlx_model_config *cfg, const rlx_host_api *h, rlx_diag *d)
{
    int flux2 = is_flux2(cfg);
    snprintf(cfg->model_type, sizeof cfg->model_type, "flux");
    int rc = h->config_int(src, "num_attention_heads", flux2 ? 48 : 24, &cfg->num_heads, d);
    if (!rc) rc = h->config_int(src, "attention_head_dim", 128, &cfg->head_dim, d);
    if (!rc) rc = recipe_check_size(src, "num_attention_heads", cfg->num_heads, h, d);
    if (!rc) rc = recipe_check_size(src, "attention_head_dim", cfg->head_dim, h, d);
    if (rc) return rc;
    cfg->num_kv_heads = cfg->num_heads;
    cfg->hidden_size = cfg->num_heads * cfg->head_dim;
    rc = h->config_int(src, "num_layers", flux2 ? 8 : 19, &cfg->num_layers, d);
    if (!rc) rc = recipe_check_size(src, "num_layers", cfg->num_layers, h, d);
    if (!rc && cfg->num_layers > RLX_MAX_LAYERS)
        return h->config_fail(src, d, RLX_ERR_UNSUPPORTED, "num_layers: %lld layers, at most %d supported",
                              (long long)cfg->num_layers, RLX_MAX_LAYERS);
    int64_t single = 0;
    if (!rc) rc = h->config_int(src, "num_single_layers", flux2 ? 48 : 38, &single, d);
    if (!rc && (single < 0 || single > RLX_MAX_LAYERS))
        return h->config_fail(src, d, RLX_ERR_UNSUPPORTED, "num_single_layers: %lld is out of range [0, %d]",
                              (long long)single, RLX_MAX_LAYERS);
    /* FluxTransformer2DModel fixes what Flux2Transformer2DModel configures (and ignores the
     * keys): mlp_ratio 4, eps 1e-6, rope theta 10000 */
    double mlp = 4.0;
    cfg->norm_eps = 1e-6;
    cfg->rope_theta = 10000.0;
    if (!rc && flux2) rc = ratio(src, "mlp_ratio", 3.0, &mlp, h, d);
    cfg->intermediate_size = (int64_t)(cfg->hidden_size * mlp);
    if (!rc && flux2) rc = h->config_num(src, "eps", 1e-6, &cfg->norm_eps, d);
    if (!rc && !(cfg->norm_eps > 0 && cfg->norm_eps < 1))
        return h->config_fail(src, d, RLX_ERR_INVALID, "eps: expected a value in (0, 1), got %g", cfg->norm_eps);
    if (!rc && flux2) rc = h->config_num(src, "rope_theta", 2000.0, &cfg->rope_theta, d);
    if (!rc && !(cfg->rope_theta > 1))
        return h->config_fail(src, d, RLX_ERR_INVALID, "rope_theta: expected a value > 1, got %g", cfg->rope_theta);
    snprintf(cfg->rope_type, sizeof cfg->rope_type, "default");
    if (!rc) rc = h->config_int(src, "in_channels", flux2 ? 128 : 64, &cfg->in_channels, d);
    if (!rc) rc = recipe_check_size(src, "in_channels", cfg->in_channels, h, d);
    int64_t out = 0, patch = 0, tch = 256;
    if (!rc) rc = h->config_int(src, "out_channels", cfg->in_channels, &out, d);
    if (!rc) rc = recipe_check_size(src, "out_channels", out, h, d);
    if (!rc) rc = h->config_int(src, "patch_size", 1, &patch, d);
    if (!rc && (patch < 1 || patch > 64))
        return h->config_fail(src, d, RLX_ERR_INVALID, "patch_size: expected 1 to 64, got %lld", (long long)patch);
    if (!rc) rc = h->config_int(src, "joint_attention_dim", flux2 ? 15360 : 4096, &cfg->context_dim, d);
    if (!rc) rc = recipe_check_size(src, "joint_attention_dim", cfg->context_dim, h, d);
    /* FLUX.1 always has the pooled text embedder (class default 768); FLUX.2 has none */
    if (!rc && !flux2) rc = h->config_int(src, "pooled_projection_dim", 768, &cfg->pooled_dim, d);
    if (!rc && !flux2) rc = recipe_check_size(src, "pooled_projection_dim", cfg->pooled_dim, h, d);
    if (!rc && flux2) rc = h->config_int(src, "timestep_guidance_channels", 256, &tch, d);
    if (!rc && flux2) rc = even_size(src, "timestep_guidance_channels", tch, h, d);
    int guidance = 0;
    if (!rc) rc = guidance_embeds(src, flux2, &guidance, h, d);
    if (!rc) rc = rope_axes(src, cfg, flux2, h, d);
    return rc;
}

static const char *const model_types[] = {"flux", NULL};
static const char *const classes[] = {"FluxTransformer2DModel", "Flux2Transformer2DModel", NULL};

static const rlx_arch arch = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_arch, class_names),
    .name = "flux",
    .model_types = model_types,
    .default_profile = "flux2",
    .decode_profile = NULL,
    .build_flow = build_flow,
    .phases = 1u << RLX_PHASE_ENCODE,
    .configure = configure,
    .class_names = classes,
};

RLX_ARCH_PLUGIN("arch-flux", "FLUX.1 / FLUX.2 transformer recipe: config.json -> encode flow (output)", arch)
