/* rlx-arch-qwen3: the Qwen3 recipe, config.json -> flow. Prefill and decode share one
 * flow (the decoder layer reads and writes the KV cache in both phases):
 *   token_embed -> rope_tables -> repeat(L, qwen3.decoder_layer) -> final_norm -> lm_head */
#include <string.h>
#include "../common/recipe_common.h"
#include "../../common/rlx_plugin_boilerplate.h"

static const char *const silu[] = {"silu", NULL};

static const recipe_decoder recipe = {
    .arch = "qwen3",
    .act = {"hidden_act", silu, "silu"},
    .embed = "{}",
    .layer_block = "qwen3.decoder_layer",
    .layer = "{\"prefix\":\"model.layers.{i}.\",\"cache\":\"cache.{i}\",\"layer\":\"{i}\"}",
    .final_norm = "{\"weight\":\"model.norm.weight\"}",
};

static int build_flow(rlx_flow *flow, int phase, const rlx_model_config *cfg,
                      const rlx_host_api *host, rlx_diag *d)
{
    if (strcmp(cfg->model_type, "qwen3") != 0)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "config.json: model_type '%s' is not a qwen3 model",
                              cfg->model_type), RLX_ERR_UNSUPPORTED;
    return recipe_decoder_flow(flow, phase, cfg, &recipe, host, d);
}

static const char *const model_types[] = {"qwen3", NULL};

static const rlx_arch arch = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_arch, build_flow),
    .name = "qwen3",
    .model_types = model_types,
    .default_profile = "qwen3_prefill",
    .decode_profile = "qwen3_decode",
    .build_flow = build_flow,
};

RLX_ARCH_PLUGIN("arch-qwen3",
                "Qwen3 recipe: config.json -> prefill and decode flows",
                arch)
