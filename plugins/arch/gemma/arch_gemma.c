/* rlx-arch-gemma: the Gemma 2 / Gemma 3 (text) recipe, config.json -> flow. Prefill and
 * decode share one flow:
 *   token_embed (· √hidden) -> rope_tables [-> local rope_tables (gemma3)]
 *     -> repeat(L, gemma.decoder_layer) -> final_norm (1 + w) -> lm_head (final softcap) */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "rlx/plugin.h"

/* v rounded to the checkpoint dtype: HF multiplies by the normalizer in the weight dtype */
static double round_to_dtype(double v, int32_t dtype)
{
    int bits = dtype == RLX_BF16 ? 8 : dtype == RLX_F16 ? 11 : 24;
    int ex;
    double m = frexp(v, &ex);
    return ldexp(nearbyint(ldexp(m, bits)), ex - bits);
}

static int check_config(const rlx_model_config *cfg, const rlx_host_api *host, rlx_diag *d)
{
    if (cfg->num_layers <= 0 || cfg->num_layers > RLX_MAX_LAYERS)
        return host->diag_set(d, RLX_ERR_INVALID, "config.json: num_hidden_layers %lld is out of range [1, %d]",
                              (long long)cfg->num_layers, RLX_MAX_LAYERS), RLX_ERR_INVALID;
    if (cfg->hidden_size <= 0 || cfg->vocab_size <= 0 || cfg->intermediate_size <= 0 ||
        cfg->num_heads <= 0)
        return host->diag_set(d, RLX_ERR_INVALID, "config.json: hidden_size, vocab_size, intermediate_size "
                              "and num_attention_heads must be positive"), RLX_ERR_INVALID;
    if (cfg->hidden_act[0] && strcmp(cfg->hidden_act, "gelu_pytorch_tanh") != 0 &&
        strcmp(cfg->hidden_act, "gelu_tanh") != 0)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "config.json: hidden_activation '%s' is not supported "
                              "by the gemma recipe (gelu_pytorch_tanh)", cfg->hidden_act), RLX_ERR_UNSUPPORTED;
    if (cfg->rope_type[0] && strcmp(cfg->rope_type, "default") != 0 &&
        strcmp(cfg->rope_type, "llama3") != 0 && strcmp(cfg->rope_type, "linear") != 0)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "config.json: rope_type '%s' is not supported "
                              "(default, linear, llama3)", cfg->rope_type), RLX_ERR_UNSUPPORTED;
    return 0;
}

static int build_flow(rlx_flow *flow, int phase, const rlx_model_config *cfg,
                      const rlx_host_api *host, rlx_diag *d)
{
    int gemma3 = strcmp(cfg->model_type, "gemma3_text") == 0;
    if (!gemma3 && strcmp(cfg->model_type, "gemma2") != 0)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "config.json: model_type '%s' is not a gemma2 or "
                              "gemma3_text model", cfg->model_type), RLX_ERR_UNSUPPORTED;
    if (phase != RLX_PHASE_PREFILL && phase != RLX_PHASE_DECODE)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "arch gemma: phase %d is not prefill or decode",
                              phase), RLX_ERR_UNSUPPORTED;
    int rc = check_config(cfg, host, d);
    if (rc) return rc;
    char embed[96], local[160], layer[256];
    snprintf(embed, sizeof embed, "{\"scale\":%.17g}",
             round_to_dtype(sqrt((double)cfg->hidden_size), cfg->dtype));
    /* gemma3's sliding layers use an unscaled table of the local base (the global one may
     * be scaled even when the bases agree) */
    double local_theta = cfg->rope_local_theta > 0 ? cfg->rope_local_theta : cfg->rope_theta;
    snprintf(local, sizeof local,
             "{\"theta\":%.17g,\"rope_type\":\"default\",\"slot\":\"rope.local.inv_freq\"}", local_theta);
    snprintf(layer, sizeof layer,
             "{\"prefix\":\"model.layers.{i}.\",\"cache\":\"cache.{i}\",\"layer\":\"{i}\"%s}",
             gemma3 ? ",\"rope_local\":\"rope.local.inv_freq\"" : "");
    if (host->flow_stage(flow, "token_embed", embed) != 0 ||
        host->flow_stage(flow, "rope_tables", "{}") != 0 ||
        (gemma3 && host->flow_stage(flow, "rope_tables", local) != 0) ||
        host->flow_repeat_begin(flow, cfg->num_layers) != 0 ||
        host->flow_stage(flow, "gemma.decoder_layer", layer) != 0 || host->flow_repeat_end(flow) != 0 ||
        host->flow_stage(flow, "final_norm", "{\"weight\":\"model.norm.weight\",\"add_one\":1}") != 0 ||
        host->flow_stage(flow, "lm_head", "{}") != 0)
        return host->diag_set(d, RLX_ERR_INTERNAL, "arch gemma: building the %s flow failed",
                              phase == RLX_PHASE_DECODE ? "decode" : "prefill"), RLX_ERR_INTERNAL;
    return 0;
}

static const char *const model_types[] = {"gemma2", "gemma3_text", NULL};

static const rlx_arch arch = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_arch, build_flow),
    .name = "gemma",
    .model_types = model_types,
    .default_profile = "gemma_prefill",
    .decode_profile = "gemma_decode",
    .build_flow = build_flow,
};

static const rlx_arch *const archs[] = {&arch};

static const rlx_plugin_desc desc = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_plugin_desc, n_archs),
    .abi_major = RLX_ABI_MAJOR,
    .abi_minor = RLX_ABI_MINOR,
    .name = "arch-gemma",
    .version = "0.1.0",
    .summary = "Gemma 2 / Gemma 3 (text) recipe: config.json -> prefill and decode flows",
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
