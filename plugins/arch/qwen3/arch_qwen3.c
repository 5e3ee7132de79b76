/* rlx-arch-qwen3: the Qwen3 recipe, config.json -> flow. Prefill and decode share one
 * flow (the decoder layer reads and writes the KV cache in both phases):
 *   token_embed -> rope_tables -> repeat(L, qwen3.decoder_layer) -> final_norm -> lm_head */
#include <stdio.h>
#include <string.h>
#include "rlx/plugin.h"

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
                              "the qwen3 recipe (silu)", cfg->hidden_act), RLX_ERR_UNSUPPORTED;
    if (cfg->rope_type[0] && strcmp(cfg->rope_type, "default") != 0 &&
        strcmp(cfg->rope_type, "llama3") != 0 && strcmp(cfg->rope_type, "linear") != 0)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "config.json: rope_type '%s' is not supported "
                              "(default, linear, llama3)", cfg->rope_type), RLX_ERR_UNSUPPORTED;
    return 0;
}

static int build_flow(rlx_flow *flow, int phase, const rlx_model_config *cfg,
                      const rlx_host_api *host, rlx_diag *d)
{
    if (strcmp(cfg->model_type, "qwen3") != 0)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "config.json: model_type '%s' is not a qwen3 model",
                              cfg->model_type), RLX_ERR_UNSUPPORTED;
    if (phase != RLX_PHASE_PREFILL && phase != RLX_PHASE_DECODE)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "arch qwen3: phase %d is not prefill or decode",
                              phase), RLX_ERR_UNSUPPORTED;
    int rc = check_config(cfg, host, d);
    if (rc) return rc;
    if (host->flow_stage(flow, "token_embed", "{}") != 0 ||
        host->flow_stage(flow, "rope_tables", "{}") != 0 ||
        host->flow_repeat_begin(flow, cfg->num_layers) != 0 ||
        host->flow_stage(flow, "qwen3.decoder_layer",
                         "{\"prefix\":\"model.layers.{i}.\",\"cache\":\"cache.{i}\",\"layer\":\"{i}\"}") != 0 ||
        host->flow_repeat_end(flow) != 0 ||
        host->flow_stage(flow, "final_norm", "{\"weight\":\"model.norm.weight\"}") != 0 ||
        host->flow_stage(flow, "lm_head", "{}") != 0)
        return host->diag_set(d, RLX_ERR_INTERNAL, "arch qwen3: building the %s flow failed",
                              phase == RLX_PHASE_DECODE ? "decode" : "prefill"), RLX_ERR_INTERNAL;
    return 0;
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

static const rlx_arch *const archs[] = {&arch};

static const rlx_plugin_desc desc = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_plugin_desc, n_archs),
    .abi_major = RLX_ABI_MAJOR,
    .abi_minor = RLX_ABI_MINOR,
    .name = "arch-qwen3",
    .version = "0.1.0",
    .summary = "Qwen3 recipe: config.json -> prefill and decode flows",
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
