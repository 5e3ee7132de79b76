/* rlx-arch-flux: the diffusers FLUX transformers (FluxTransformer2DModel = FLUX.1,
 * Flux2Transformer2DModel = FLUX.2), config.json -> one encode flow:
 *   flux.embed -> repeat(num_layers, flux.double_block) -> flux.single_blocks -> flux.output
 * Inputs (declared here; T = image tokens, S = text tokens): hidden_states [T, C],
 * encoder_hidden_states [S, Dj], timestep [] (raw t; ×1000 inside), img_ids [T, A],
 * txt_ids [S, A], pooled_projections [P] (FLUX.1) | guidance [] (FLUX.2) -> output [T, C]. */
#include <stdio.h>
#include <string.h>
#include "rlx/plugin.h"
/* recipes that declare their own inputs need host->flow_input */
#define RLX_PLUGIN_HOST_NEEDS flow_input
#include "../../common/rlx_plugin_boilerplate.h"

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

static const char *const model_types[] = {"flux", NULL};

static const rlx_arch arch = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_arch, phases),
    .name = "flux",
    .model_types = model_types,
    .default_profile = "flux2",
    .decode_profile = NULL,
    .build_flow = build_flow,
    .phases = 1u << RLX_PHASE_ENCODE,
};

RLX_ARCH_PLUGIN("arch-flux", "FLUX.1 / FLUX.2 transformer recipe: config.json -> encode flow (output)", arch)
