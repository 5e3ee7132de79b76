/* rlx-arch-bert: the BertModel recipe, config.json -> one encode flow:
 *   bert.embeddings -> repeat(L, bert.encoder_layer) -> bert.pooler
 * Inputs: input_ids, token_type_ids (default 0), positions (default 0..T-1),
 * attention_mask (default 1); outputs last_hidden_state and pooler_output. Checkpoints of the
 * task heads (BertForMaskedLM, ...) keep the encoder under "bert.". */
#include <stdio.h>
#include <string.h>
#include "../common/recipe_common.h"
#include "rlx/plugin_util.h"

static const char *const gelus[] = {"gelu", "gelu_pytorch_tanh", NULL};
static const recipe_act bert_act = {"hidden_act", gelus, "gelu, gelu_pytorch_tanh"};

static int check_config(const rlx_model_config *cfg, const rlx_host_api *host, rlx_diag *d)
{
    int rc = recipe_check_layers(cfg, host, d);
    return rc ? rc : recipe_check_act(cfg, "bert", &bert_act, host, d);
}

static int build_flow(rlx_flow *flow, int phase, const rlx_model_config *cfg,
                      const rlx_host_api *host, rlx_diag *d)
{
    if (phase != RLX_PHASE_ENCODE)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "arch bert: phase %d is not encode", phase),
               RLX_ERR_UNSUPPORTED;
    int rc = check_config(cfg, host, d);
    if (rc) return rc;
    static const char *const names[] = {"input_ids", "token_type_ids", "positions", "attention_mask"};
    static const int fills[] = {RLX_FILL_NONE, RLX_FILL_ZEROS, RLX_FILL_IOTA, RLX_FILL_ONES};
    int64_t t[1] = {-1};
    for (int i = 0; i < 4 && !rc; i++) {
        rc = host->flow_input(flow, names[i], RLX_I32, 1, t);
        if (!rc) rc = host->flow_input_fill(flow, names[i], fills[i]);
    }
    if (rc) return host->diag_set(d, RLX_ERR_INTERNAL, "arch bert: declaring the inputs failed"), RLX_ERR_INTERNAL;
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

/* BertConfig's defaults: every linear layer carries a bias */
static const rlx_config_defaults bert_defaults = {
    .struct_size = sizeof(rlx_config_defaults), .vocab_size = 30522, .hidden_size = 768,
    .intermediate_size = 3072, .num_layers = 12, .num_heads = 12, .max_position_embeddings = 512,
    .eps_key = "layer_norm_eps", .eps = 1e-12, .tie_word_embeddings = 1, .act_key = "hidden_act",
    .act = "gelu", .bos_token_id = -1, .eos_token_id = -1};

static int configure(const rlx_config *src, rlx_model_config *cfg, const rlx_host_api *host, rlx_diag *d)
{
    int rc = host->config_read_common(src, &bert_defaults, cfg, d);
    if (!rc) rc = host->config_int(src, "type_vocab_size", 2, &cfg->type_vocab_size, d);
    cfg->head_dim = cfg->num_heads ? cfg->hidden_size / cfg->num_heads : 0;
    cfg->num_kv_heads = cfg->num_heads;
    cfg->attention_bias = cfg->mlp_bias = 1;
    return rc;
}

static const char *const model_types[] = {"bert", NULL};

static const rlx_arch arch = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_arch, class_names),
    .name = "bert",
    .model_types = model_types,
    .default_profile = "encoder",
    .decode_profile = NULL,
    .build_flow = build_flow,
    .phases = 1u << RLX_PHASE_ENCODE,
    .configure = configure,
};

RLX_ARCH_PLUGIN("arch-bert",
                "BERT recipe: config.json -> encode flow (last_hidden_state, pooler_output)",
                arch)
