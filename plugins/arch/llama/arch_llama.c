/* rlx-arch-llama: the LLaMA recipe, config.json -> flow. Prefill and decode share one
 * flow (the decoder layer reads and writes the KV cache in both phases):
 *   token_embed -> rope_tables -> repeat(L, llama.decoder_layer) -> final_norm -> lm_head
 * A variant table keeps room for relatives (qwen3: q/k norms) that reuse the recipe. */
#include <stdio.h>
#include <string.h>
#include "rlx/plugin.h"

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

/* What the recipe cannot run, named by its config.json key */
static int check_config(const rlx_model_config *cfg, const rlx_host_api *host, rlx_diag *d)
{
    if (cfg->num_layers <= 0 || cfg->num_layers > RLX_MAX_LAYERS)
        return host->diag_set(d, RLX_ERR_INVALID, "config.json: num_hidden_layers %lld is out of range [1, %d]",
                              (long long)cfg->num_layers, RLX_MAX_LAYERS), RLX_ERR_INVALID;
    if (cfg->hidden_size <= 0 || cfg->vocab_size <= 0 || cfg->intermediate_size <= 0 ||
        cfg->num_heads <= 0)
        return host->diag_set(d, RLX_ERR_INVALID, "config.json: hidden_size, vocab_size, intermediate_size "
                              "and num_attention_heads must be positive"), RLX_ERR_INVALID;
    if (cfg->hidden_act[0] && strcmp(cfg->hidden_act, "silu") != 0)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "config.json: hidden_act '%s' is not supported by "
                              "the llama recipe (silu)", cfg->hidden_act), RLX_ERR_UNSUPPORTED;
    if (cfg->rope_type[0] && strcmp(cfg->rope_type, "default") != 0 &&
        strcmp(cfg->rope_type, "llama3") != 0 && strcmp(cfg->rope_type, "linear") != 0)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "config.json: rope_type '%s' is not supported "
                              "(default, linear, llama3)", cfg->rope_type), RLX_ERR_UNSUPPORTED;
    return 0;
}

static int build_flow(rlx_flow *flow, int phase, const rlx_model_config *cfg,
                      const rlx_host_api *host, rlx_diag *d)
{
    const llama_variant *v = variant_for(cfg->model_type);
    if (!v)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "config.json: model_type '%s' is not a llama model",
                              cfg->model_type), RLX_ERR_UNSUPPORTED;
    if (phase != RLX_PHASE_PREFILL && phase != RLX_PHASE_DECODE)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "arch llama: phase %d is not prefill or decode",
                              phase), RLX_ERR_UNSUPPORTED;
    int rc = check_config(cfg, host, d);
    if (rc) return rc;
    char layer[160];
    snprintf(layer, sizeof layer,
             "{\"prefix\":\"model.layers.{i}.\",\"cache\":\"cache.{i}\",\"qk_norm\":%d}", v->qk_norm);
    if (host->flow_stage(flow, "token_embed", "{}") != 0 ||
        host->flow_stage(flow, "rope_tables", "{}") != 0 ||
        host->flow_repeat_begin(flow, cfg->num_layers) != 0 ||
        host->flow_stage(flow, v->layer_block, layer) != 0 || host->flow_repeat_end(flow) != 0 ||
        host->flow_stage(flow, "final_norm", "{\"weight\":\"model.norm.weight\"}") != 0 ||
        host->flow_stage(flow, "lm_head", "{}") != 0)
        return host->diag_set(d, RLX_ERR_INTERNAL, "arch llama: building the %s flow failed",
                              phase == RLX_PHASE_DECODE ? "decode" : "prefill"), RLX_ERR_INTERNAL;
    return 0;
}

static const char *const model_types[] = {"llama", NULL};

static const rlx_arch arch = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_arch, build_flow),
    .name = "llama",
    .model_types = model_types,
    .default_profile = "llama32_prefill",
    .decode_profile = "llama32_decode",
    .build_flow = build_flow,
};

static const rlx_arch *const archs[] = {&arch};

static const rlx_plugin_desc desc = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_plugin_desc, n_archs),
    .abi_major = RLX_ABI_MAJOR,
    .abi_minor = RLX_ABI_MINOR,
    .name = "arch-llama",
    .version = "0.1.0",
    .summary = "LLaMA recipe: config.json -> prefill and decode flows",
    .archs = archs,
    .n_archs = 1,
};

RLX_EXPORT const rlx_plugin_desc *rlx_plugin_init(const rlx_host_api *host);

RLX_EXPORT const rlx_plugin_desc *rlx_plugin_init(const rlx_host_api *host)
{
    if (!host || host->abi_major != RLX_ABI_MAJOR ||
        host->struct_size < RLX_STRUCT_SIZE(rlx_host_api, flow_repeat_end))
        return NULL;
    return &desc;
}
