/* rlx-arch-qwen3: the Qwen3 recipe, config.json -> flow. Prefill and decode share one
 * flow (the decoder layer reads and writes the KV cache in both phases):
 *   token_embed -> rope_tables -> repeat(L, qwen3.decoder_layer) -> final_norm -> lm_head */
#include <string.h>
#include "../common/recipe_common.h"
#include "rlx/plugin_util.h"

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

/* Qwen3Config's defaults */
static const rlx_config_defaults qwen3_defaults = {
    .struct_size = sizeof(rlx_config_defaults), .vocab_size = 151936, .hidden_size = 4096,
    .intermediate_size = 22016, .num_layers = 32, .num_heads = 32, .num_kv_heads = 32, .head_dim = 128,
    .max_position_embeddings = 32768, .eps_key = "rms_norm_eps", .eps = 1e-6, .act_key = "hidden_act",
    .act = "silu", .rope_theta = 10000.0, .bos_token_id = -1, .eos_token_id = -1};

/* the common keys, then Qwen's sliding window: only with use_sliding_window, on the
 * layers from max_window_layers on (4.x; 5.x writes layer_types) */
static int configure(const rlx_config *src, rlx_model_config *cfg, const rlx_host_api *host, rlx_diag *d)
{
    int rc = host->config_read_common(src, &qwen3_defaults, cfg, d);
    int on = 0;
    if (!rc) rc = host->config_bool(src, "use_sliding_window", 0, &on, d);
    if (rc || !on) return rc;
    rc = host->config_int(src, "sliding_window", 4096, &cfg->sliding_window, d);
    if (!rc && cfg->sliding_window < 0) return host->config_fail(src, d, RLX_ERR_INVALID, "sliding_window: negative");
    int64_t mwl = 28;
    if (!rc && !host->config_has(src, "layer_types")) {
        rc = host->config_int(src, "max_window_layers", 28, &mwl, d);
        for (int64_t i = 0; !rc && i < cfg->num_layers; i++)
            cfg->layer_types[i] = i >= mwl ? RLX_LAYER_SLIDING : RLX_LAYER_FULL;
    }
    return rc;
}

static const char *const model_types[] = {"qwen3", NULL};

static const rlx_arch arch = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_arch, class_names),
    .name = "qwen3",
    .model_types = model_types,
    .default_profile = "qwen3_prefill",
    .decode_profile = "qwen3_decode",
    .build_flow = build_flow,
    .configure = configure,
};

RLX_ARCH_PLUGIN("arch-qwen3",
                "Qwen3 recipe: config.json -> prefill and decode flows",
                arch)
