/* rlx-arch-flux: the diffusers FLUX transformers (FluxTransformer2DModel = FLUX.1,
 * Flux2Transformer2DModel = FLUX.2), config.json -> one encode flow:
 *   flux.embed -> repeat(num_layers, flux.double_block) -> flux.single_blocks -> flux.output
 * Inputs (declared here; T = image tokens, S = text tokens): hidden_states [T, C],
 * encoder_hidden_states [S, Dj], timestep [] (raw t; ×1000 inside), img_ids [T, A],
 * txt_ids [S, A], pooled_projections [P] (FLUX.1) | guidance [] (FLUX.2) -> output [T, C]. */
#include <stdio.h>
#include <string.h>
#include "../common/recipe_common.h"
#include "rlx/plugin_util.h"

static int inputs(rlx_flow *f, const rlx_model_config *cfg, const rlx_host_api *h, int flux2)
{
    int64_t hs[2] = {-1, cfg->in_channels}, enc[2] = {-2, cfg->context_dim};
    int64_t img[2] = {-1, cfg->rope_axes}, txt[2] = {-2, cfg->rope_axes}, pooled[1] = {cfg->pooled_dim};
    int rc = h->flow_input(f, "hidden_states", RLX_F32, 2, hs);
    if (!rc) rc = h->flow_input(f, "encoder_hidden_states", RLX_F32, 2, enc);
    if (!rc) rc = h->flow_input(f, "timestep", RLX_F32, 0, NULL);
    if (!rc) rc = h->flow_input(f, "img_ids", RLX_F32, 2, img);
    if (!rc) rc = h->flow_input(f, "txt_ids", RLX_F32, 2, txt);
    if (!rc) rc = flux2 ? h->flow_input(f, "guidance", RLX_F32, 0, NULL)
                        : h->flow_input(f, "pooled_projections", RLX_F32, 1, pooled);
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
    int flux2 = strncmp(cfg->architecture, "Flux2", 5) == 0;
    if (!flux2 && cfg->pooled_dim <= 0)
        return host->diag_set(d, RLX_ERR_INVALID, "config.json: pooled_projection_dim must be positive"),
               RLX_ERR_INVALID;
    int rc = inputs(flow, cfg, host, flux2);
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

/* FluxTransformer2DModel / Flux2Transformer2DModel defaults (diffusers) */
static int configure(const rlx_config *src, rlx_model_config *cfg, const rlx_host_api *h, rlx_diag *d)
{
    int flux2 = strncmp(cfg->architecture, "Flux2", 5) == 0;
    snprintf(cfg->model_type, sizeof cfg->model_type, "flux");
    int rc = h->config_int(src, "num_attention_heads", 24, &cfg->num_heads, d);
    if (!rc) rc = h->config_int(src, "attention_head_dim", 128, &cfg->head_dim, d);
    if (!rc) rc = recipe_check_size(src, "num_attention_heads", cfg->num_heads, h, d);
    if (!rc) rc = recipe_check_size(src, "attention_head_dim", cfg->head_dim, h, d);
    if (rc) return rc;
    cfg->num_kv_heads = cfg->num_heads;
    cfg->hidden_size = cfg->num_heads * cfg->head_dim;
    rc = h->config_int(src, "num_layers", 19, &cfg->num_layers, d);
    if (!rc) rc = recipe_check_size(src, "num_layers", cfg->num_layers, h, d);
    if (!rc && cfg->num_layers > RLX_MAX_LAYERS)
        return h->config_fail(src, d, RLX_ERR_UNSUPPORTED, "num_layers: %lld layers, at most %d supported",
                              (long long)cfg->num_layers, RLX_MAX_LAYERS);
    double mlp = 0;
    if (!rc) rc = ratio(src, "mlp_ratio", flux2 ? 3.0 : 4.0, &mlp, h, d);
    cfg->intermediate_size = (int64_t)(cfg->hidden_size * mlp);
    if (!rc) rc = h->config_num(src, "eps", 1e-6, &cfg->norm_eps, d);
    if (!rc) rc = h->config_num(src, "rope_theta", flux2 ? 2000.0 : 10000.0, &cfg->rope_theta, d);
    snprintf(cfg->rope_type, sizeof cfg->rope_type, "default");
    if (!rc) rc = h->config_int(src, "in_channels", flux2 ? 128 : 64, &cfg->in_channels, d);
    if (!rc) rc = h->config_int(src, "joint_attention_dim", flux2 ? 15360 : 4096, &cfg->context_dim, d);
    if (!rc && !flux2) rc = h->config_int(src, "pooled_projection_dim", 768, &cfg->pooled_dim, d);
    int64_t axes = h->config_len(src, "axes_dims_rope");
    cfg->rope_axes = (int32_t)(axes >= 0 ? axes : flux2 ? 4 : 3);
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
