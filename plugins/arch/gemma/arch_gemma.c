/* rlx-arch-gemma: the Gemma 2 / Gemma 3 (text) recipe, config.json -> flow. Prefill and
 * decode share one flow:
 *   token_embed (· √hidden) -> rope_tables [-> local rope_tables (gemma3)]
 *     -> repeat(L, gemma.decoder_layer) -> final_norm (1 + w) -> lm_head (final softcap) */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "../common/recipe_common.h"
#include "rlx/plugin_util.h"

static const char *const gelu_tanh[] = {"gelu_pytorch_tanh", "gelu_tanh", NULL};

static int build_flow(rlx_flow *flow, int phase, const rlx_model_config *cfg,
                      const rlx_host_api *host, rlx_diag *d)
{
    int gemma3 = strcmp(cfg->model_type, "gemma3_text") == 0;
    if (!gemma3 && strcmp(cfg->model_type, "gemma2") != 0)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "config.json: model_type '%s' is not a gemma2 or "
                              "gemma3_text model", cfg->model_type), RLX_ERR_UNSUPPORTED;
    char embed[96], local[160], layer[256];
    snprintf(embed, sizeof embed, "{\"scale\":%.17g}",
             sqrt((double)cfg->hidden_size)); /* in the compute dtype, as HF computes it */
    /* gemma3's sliding layers use an unscaled table of the local base (the global one may
     * be scaled even when the bases agree) */
    double local_theta = cfg->rope_local_theta > 0 ? cfg->rope_local_theta : cfg->rope_theta;
    snprintf(local, sizeof local,
             "{\"theta\":%.17g,\"rope_type\":\"default\",\"slot\":\"rope.local.inv_freq\"}", local_theta);
    snprintf(layer, sizeof layer,
             "{\"prefix\":\"model.layers.{i}.\",\"cache\":\"cache.{i}\",\"layer\":\"{i}\"%s}",
             gemma3 ? ",\"rope_local\":\"rope.local.inv_freq\"" : "");
    const recipe_decoder r = {
        .arch = "gemma",
        .act = {"hidden_activation", gelu_tanh, "gelu_pytorch_tanh"},
        .embed = embed,
        .local_rope = gemma3 ? local : NULL,
        .layer_block = "gemma.decoder_layer",
        .layer = layer,
        .final_norm = "{\"weight\":\"model.norm.weight\",\"add_one\":1}",
    };
    return recipe_decoder_flow(flow, phase, cfg, &r, host, d);
}

/* Gemma2Config / Gemma3TextConfig defaults */
static const rlx_config_defaults gemma2_defaults = {
    .struct_size = sizeof(rlx_config_defaults), .vocab_size = 256000, .hidden_size = 2304,
    .intermediate_size = 9216, .num_layers = 26, .num_heads = 8, .num_kv_heads = 4, .head_dim = 256,
    .max_position_embeddings = 8192, .eps_key = "rms_norm_eps", .eps = 1e-6, .tie_word_embeddings = 1,
    /* HF reads hidden_activation only (gemma's hidden_act is legacy and ignored) */
    .act_key = "hidden_activation", .act = "gelu_pytorch_tanh", .rope_theta = 10000.0, .bos_token_id = 2,
    .eos_token_id = 1};
static const rlx_config_defaults gemma3_defaults = {
    .struct_size = sizeof(rlx_config_defaults), .vocab_size = 262208, .hidden_size = 2304,
    .intermediate_size = 9216, .num_layers = 26, .num_heads = 8, .num_kv_heads = 4, .head_dim = 256,
    .max_position_embeddings = 131072, .eps_key = "rms_norm_eps", .eps = 1e-6, .tie_word_embeddings = 1,
    .act_key = "hidden_activation", .act = "gelu_pytorch_tanh", .rope_theta = 1000000.0,
    .bos_token_id = 2, .eos_token_id = 1};

/* a key present (null: 0, "none"), else the family default */
static int num_or(const rlx_config *src, const char *key, double def, double *out, const rlx_host_api *host,
                  rlx_diag *d)
{
    return host->config_num(src, key, host->config_has(src, key) ? 0 : def, out, d);
}

static int configure(const rlx_config *src, rlx_model_config *cfg, const rlx_host_api *host, rlx_diag *d)
{
    int gemma3 = strcmp(cfg->model_type, "gemma3_text") == 0;
    int rc = host->config_read_common(src, gemma3 ? &gemma3_defaults : &gemma2_defaults, cfg, d);
    if (!rc) rc = host->config_num(src, "query_pre_attn_scalar", 256, &cfg->query_pre_attn_scalar, d);
    if (!rc) rc = num_or(src, "attn_logit_softcapping", gemma3 ? 0 : 50.0, &cfg->attn_logit_softcap, host, d);
    if (!rc) rc = num_or(src, "final_logit_softcapping", gemma3 ? 0 : 30.0, &cfg->final_logit_softcap, host, d);
    double sw = 0;
    if (!rc) rc = num_or(src, "sliding_window", 4096, &sw, host, d);
    cfg->sliding_window = (int64_t)sw;
    if (!rc && (sw < 0 || sw != (double)cfg->sliding_window))
        return host->config_fail(src, d, RLX_ERR_INVALID, "sliding_window: expected a non-negative integer");
    if (rc || host->config_has(src, "layer_types")) return rc;
    /* 4.x: derive the layer types as transformers does */
    int64_t every = 2;
    const char *key = host->config_has(src, "sliding_window_pattern") ? "sliding_window_pattern"
                                                                      : "_sliding_window_pattern";
    if (gemma3) rc = host->config_int(src, key, 6, &every, d);
    if (!rc && every <= 0) return host->config_fail(src, d, RLX_ERR_INVALID, "%s: must be positive", key);
    for (int64_t i = 0; !rc && i < cfg->num_layers; i++)
        cfg->layer_types[i] = (i + 1) % every ? RLX_LAYER_SLIDING : RLX_LAYER_FULL;
    /* 4.x: gemma3's local layers rotate with their own base */
    double local = 10000.0;
    if (!rc && gemma3 && !host->config_has(src, "rope_parameters")) {
        rc = host->config_num(src, "rope_local_base_freq", 10000.0, &local, d);
        cfg->rope_local_theta = local != cfg->rope_theta ? local : 0;
    }
    return rc;
}

static const char *const model_types[] = {"gemma2", "gemma3_text", NULL};

static const rlx_arch arch = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_arch, class_names),
    .name = "gemma",
    .model_types = model_types,
    .default_profile = "gemma_prefill",
    .decode_profile = "gemma_decode",
    .build_flow = build_flow,
    .configure = configure,
};

RLX_ARCH_PLUGIN("arch-gemma",
                "Gemma 2 / Gemma 3 (text) recipe: config.json -> prefill and decode flows",
                arch)
