/* rlx-arch-bert: the BertModel recipe, config.json -> one encode flow:
 *   bert.embeddings -> repeat(L, bert.encoder_layer) -> bert.pooler
 * Inputs (the host's encoder inputs): input_ids, token_type_ids, positions,
 * attention_mask; outputs last_hidden_state and pooler_output. Checkpoints of the
 * task heads (BertForMaskedLM, ...) keep the encoder under "bert.". */
#include <stdio.h>
#include <string.h>
#include "rlx/plugin.h"

static int check_config(const rlx_model_config *cfg, const rlx_host_api *host, rlx_diag *d)
{
    if (cfg->num_layers <= 0 || cfg->num_layers > RLX_MAX_LAYERS)
        return host->diag_set(d, RLX_ERR_INVALID, "config.json: num_hidden_layers %lld is out of range [1, %d]",
                              (long long)cfg->num_layers, RLX_MAX_LAYERS), RLX_ERR_INVALID;
    if (cfg->hidden_act[0] && strcmp(cfg->hidden_act, "gelu") != 0 &&
        strcmp(cfg->hidden_act, "gelu_pytorch_tanh") != 0)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "config.json: hidden_act '%s' is not supported by "
                              "the bert recipe (gelu, gelu_pytorch_tanh)", cfg->hidden_act), RLX_ERR_UNSUPPORTED;
    return 0;
}

static int build_flow(rlx_flow *flow, int phase, const rlx_model_config *cfg,
                      const rlx_host_api *host, rlx_diag *d)
{
    if (phase != RLX_PHASE_ENCODE)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "arch bert: phase %d is not encode", phase),
               RLX_ERR_UNSUPPORTED;
    int rc = check_config(cfg, host, d);
    if (rc) return rc;
    /* BertModel's own checkpoints name embeddings.*, the task models bert.embeddings.* */
    const char *root = strcmp(cfg->architecture, "BertModel") == 0 || !cfg->architecture[0] ? "" : "bert.";
    char emb[96], layer[128], pool[96];
    snprintf(emb, sizeof emb, "{\"prefix\":\"%sembeddings.\"}", root);
    snprintf(layer, sizeof layer, "{\"prefix\":\"%sencoder.layer.{i}.\"}", root);
    snprintf(pool, sizeof pool, "{\"prefix\":\"%spooler.\"}", root);
    if (host->flow_stage(flow, "bert.embeddings", emb) != 0 ||
        host->flow_repeat_begin(flow, cfg->num_layers) != 0 ||
        host->flow_stage(flow, "bert.encoder_layer", layer) != 0 || host->flow_repeat_end(flow) != 0 ||
        host->flow_stage(flow, "bert.pooler", pool) != 0)
        return host->diag_set(d, RLX_ERR_INTERNAL, "arch bert: building the encode flow failed"),
               RLX_ERR_INTERNAL;
    return 0;
}

static const char *const model_types[] = {"bert", NULL};

static const rlx_arch arch = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_arch, phases),
    .name = "bert",
    .model_types = model_types,
    .default_profile = "encoder",
    .decode_profile = NULL,
    .build_flow = build_flow,
    .phases = 1u << RLX_PHASE_ENCODE,
};

static const rlx_arch *const archs[] = {&arch};

static const rlx_plugin_desc desc = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_plugin_desc, n_archs),
    .abi_major = RLX_ABI_MAJOR,
    .abi_minor = RLX_ABI_MINOR,
    .name = "arch-bert",
    .version = "0.1.0",
    .summary = "BERT recipe: config.json -> encode flow (last_hidden_state, pooler_output)",
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
