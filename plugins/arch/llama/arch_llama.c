/* rlx-arch-llama: the LLaMA recipe, config.json -> flow. Prefill and decode share one
 * flow (the decoder layer reads and writes the KV cache in both phases):
 *   token_embed -> rope_tables -> repeat(L, llama.decoder_layer) -> final_norm -> lm_head
 * A variant table keeps room for relatives (qwen3: q/k norms) that reuse the recipe. */
#include <stdio.h>
#include <string.h>
#include "../common/recipe_common.h"
#include "rlx/plugin_util.h"

typedef struct llama_variant {
    const char *model_type;
    const char *layer_block;
    int qk_norm;
} llama_variant;

static const llama_variant variants[] = {
    {"llama", "llama.decoder_layer", 0},
};

static const llama_variant *variant_for(const char *model_type)
{
    for (size_t i = 0; i < sizeof variants / sizeof variants[0]; i++)
        if (strcmp(variants[i].model_type, model_type) == 0) return &variants[i];
    return NULL;
}

static const char *const silu[] = {"silu", NULL};

static int build_flow(rlx_flow *flow, int phase, const rlx_model_config *cfg,
                      const rlx_host_api *host, rlx_diag *d)
{
    const llama_variant *v = variant_for(cfg->model_type);
    if (!v)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "config.json: model_type '%s' is not a llama model",
                              cfg->model_type), RLX_ERR_UNSUPPORTED;
    char layer[160];
    snprintf(layer, sizeof layer,
             "{\"prefix\":\"model.layers.{i}.\",\"cache\":\"cache.{i}\",\"qk_norm\":%d}", v->qk_norm);
    const recipe_decoder r = {
        .arch = "llama",
        .act = {"hidden_act", silu, "silu"},
        .embed = "{}",
        .layer_block = v->layer_block,
        .layer = layer,
        .final_norm = "{\"weight\":\"model.norm.weight\"}",
    };
    return recipe_decoder_flow(flow, phase, cfg, &r, host, d);
}

static const char *const model_types[] = {"llama", NULL};

/* LlamaConfig's defaults */
static const rlx_config_defaults llama_defaults = {
    .struct_size = sizeof(rlx_config_defaults), .vocab_size = 32000, .hidden_size = 4096,
    .intermediate_size = 11008, .num_layers = 32, .num_heads = 32, .max_position_embeddings = 2048,
    .eps_key = "rms_norm_eps", .eps = 1e-6, .act_key = "hidden_act", .act = "silu", .rope_theta = 10000.0,
    .bos_token_id = 1, .eos_token_id = 2};

static int configure(const rlx_config *src, rlx_model_config *cfg, const rlx_host_api *host, rlx_diag *d)
{
    return host->config_read_common(src, &llama_defaults, cfg, d);
}

static const rlx_arch arch = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_arch, class_names),
    .name = "llama",
    .model_types = model_types,
    .default_profile = "llama32_prefill",
    .decode_profile = "llama32_decode",
    .build_flow = build_flow,
    .configure = configure,
};

RLX_ARCH_PLUGIN("arch-llama",
                "LLaMA recipe: config.json -> prefill and decode flows",
                arch)
