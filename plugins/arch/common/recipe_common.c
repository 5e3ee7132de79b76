/* The config checks and the decoder-LM flow the arch recipes share (recipe_common.h). */
#include <string.h>
#include "recipe_common.h"

int recipe_check_size(const rlx_config *src, const char *key, int64_t v, const rlx_host_api *host,
                      rlx_diag *d)
{
    if (v <= 0) return host->config_fail(src, d, RLX_ERR_INVALID, "%s: must be positive, got %lld", key, (long long)v);
    if (v > (1ll << 24))
        return host->config_fail(src, d, RLX_ERR_UNSUPPORTED, "%s: %lld is larger than %lld", key, (long long)v,
                                 1ll << 24);
    return 0;
}

int recipe_session_inputs(rlx_flow *flow, const rlx_host_api *host)
{
    int64_t t[1] = {-1}, one[1] = {1};
    int rc = host->flow_input(flow, "input_ids", RLX_I32, 1, t);
    if (!rc) rc = host->flow_input(flow, "positions", RLX_I32, 1, t);
    if (!rc) rc = host->flow_input(flow, "pos", RLX_I32, 1, one);
    if (!rc) rc = host->flow_input_fill(flow, "positions", RLX_FILL_IOTA);
    if (!rc) rc = host->flow_input_fill(flow, "pos", RLX_FILL_ZEROS);
    return rc;
}

int recipe_check_layers(const rlx_model_config *cfg, const rlx_host_api *host, rlx_diag *d)
{
    if (cfg->num_layers <= 0 || cfg->num_layers > RLX_MAX_LAYERS)
        return host->diag_set(d, RLX_ERR_INVALID, "config.json: num_hidden_layers %lld is out of range [1, %d]",
                              (long long)cfg->num_layers, RLX_MAX_LAYERS), RLX_ERR_INVALID;
    return 0;
}

int recipe_check_act(const rlx_model_config *cfg, const char *arch, const recipe_act *act,
                     const rlx_host_api *host, rlx_diag *d)
{
    if (!cfg->hidden_act[0]) return 0;
    for (const char *const *a = act->accepted; *a; a++)
        if (strcmp(cfg->hidden_act, *a) == 0) return 0;
    return host->diag_set(d, RLX_ERR_UNSUPPORTED, "config.json: %s '%s' is not supported by the %s recipe (%s)",
                          act->key, cfg->hidden_act, arch, act->shown), RLX_ERR_UNSUPPORTED;
}

/* What a decoder recipe cannot run, named by its config.json key */
static int check_decoder_config(const rlx_model_config *cfg, const recipe_decoder *r,
                                const rlx_host_api *host, rlx_diag *d)
{
    int rc = recipe_check_layers(cfg, host, d);
    if (rc) return rc;
    if (cfg->hidden_size <= 0 || cfg->vocab_size <= 0 || cfg->intermediate_size <= 0 ||
        cfg->num_heads <= 0)
        return host->diag_set(d, RLX_ERR_INVALID, "config.json: hidden_size, vocab_size, intermediate_size "
                              "and num_attention_heads must be positive"), RLX_ERR_INVALID;
    rc = recipe_check_act(cfg, r->arch, &r->act, host, d);
    if (rc) return rc;
    if (cfg->rope_type[0] && strcmp(cfg->rope_type, "default") != 0 &&
        strcmp(cfg->rope_type, "llama3") != 0 && strcmp(cfg->rope_type, "linear") != 0)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "config.json: rope_type '%s' is not supported "
                              "(default, linear, llama3)", cfg->rope_type), RLX_ERR_UNSUPPORTED;
    return 0;
}

int recipe_decoder_flow(rlx_flow *flow, int phase, const rlx_model_config *cfg,
                        const recipe_decoder *r, const rlx_host_api *host, rlx_diag *d)
{
    if (phase != RLX_PHASE_PREFILL && phase != RLX_PHASE_DECODE)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "arch %s: phase %d is not prefill or decode",
                              r->arch, phase), RLX_ERR_UNSUPPORTED;
    int rc = check_decoder_config(cfg, r, host, d);
    if (rc) return rc;
    if (recipe_session_inputs(flow, host) != 0 || host->flow_stage(flow, "token_embed", r->embed) != 0 ||
        host->flow_stage(flow, "rope_tables", r->rope ? r->rope : "{}") != 0 ||
        (r->local_rope && host->flow_stage(flow, "rope_tables", r->local_rope) != 0) ||
        host->flow_repeat_begin(flow, cfg->num_layers) != 0 ||
        host->flow_stage(flow, r->layer_block, r->layer) != 0 || host->flow_repeat_end(flow) != 0 ||
        host->flow_stage(flow, "final_norm", r->final_norm) != 0 ||
        host->flow_stage(flow, "lm_head", "{}") != 0)
        return host->diag_set(d, RLX_ERR_INTERNAL, "arch %s: building the %s flow failed", r->arch,
                              phase == RLX_PHASE_DECODE ? "decode" : "prefill"), RLX_ERR_INTERNAL;
    return 0;
}
