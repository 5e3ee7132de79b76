/* rlx-arch-phi3: the Phi-3 recipe (Phi3ForCausalLM), config.json -> flow. Prefill and
 * decode share one flow:
 *   token_embed -> rope_tables (partial_rotary_factor) -> repeat(L, phi3.decoder_layer)
 *     -> final_norm -> lm_head
 * Phi-3's sliding_window (null by default) applies to every layer. Only the default rope:
 * longrope (4.x "su"/"yarn") is refused naming the key. */
#include <stdio.h>
#include <string.h>
#include "../common/recipe_common.h"
#include "rlx/plugin_util.h"

static const char *const silu[] = {"silu", NULL};

/* rope_parameters.partial_rotary_factor (5.x), else partial_rotary_factor (4.x), else 1 */
static int partial_factor(const rlx_config *src, const rlx_host_api *host, double *f, const char **key,
                          rlx_diag *d)
{
    *key = host->config_has(src, "rope_parameters.partial_rotary_factor") ? "rope_parameters.partial_rotary_factor"
                                                                          : "partial_rotary_factor";
    return host->config_num(src, *key, 1.0, f, d);
}

static int build_flow(rlx_flow *flow, int phase, const rlx_model_config *cfg,
                      const rlx_host_api *host, rlx_diag *d)
{
    if (strcmp(cfg->model_type, "phi3") != 0)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "config.json: model_type '%s' is not a phi3 model",
                              cfg->model_type), RLX_ERR_UNSUPPORTED;
    const rlx_config *src = host->flow_config(flow);
    double f = 1.0;
    const char *key;
    if (src && partial_factor(src, host, &f, &key, d) != 0) return d->code;
    char rope[96];
    snprintf(rope, sizeof rope, "{\"partial_rotary_factor\":%.17g}", f);
    const recipe_decoder r = {
        .arch = "phi3",
        .act = {"hidden_act", silu, "silu"},
        .embed = "{}",
        .rope = rope,
        .layer_block = "phi3.decoder_layer",
        .layer = "{\"prefix\":\"model.layers.{i}.\",\"cache\":\"cache.{i}\",\"layer\":\"{i}\"}",
        .final_norm = "{\"weight\":\"model.norm.weight\"}",
    };
    return recipe_decoder_flow(flow, phase, cfg, &r, host, d);
}

/* Phi3Config's defaults */
static const rlx_config_defaults phi3_defaults = {
    .struct_size = sizeof(rlx_config_defaults), .vocab_size = 32064, .hidden_size = 3072,
    .intermediate_size = 8192, .num_layers = 32, .num_heads = 32, .max_position_embeddings = 4096,
    .eps_key = "rms_norm_eps", .eps = 1e-5, .act_key = "hidden_act", .act = "silu", .rope_theta = 10000.0,
    .bos_token_id = 1, .eos_token_id = 32000};

/* any rope type but "default", under either spelling of either dict, is refused */
static int check_rope_type(const rlx_config *src, const rlx_host_api *host, rlx_diag *d)
{
    static const char *const keys[] = {"rope_parameters.rope_type", "rope_parameters.type",
                                       "rope_scaling.rope_type", "rope_scaling.type"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char type[32];
        int rc = host->config_str(src, keys[i], "default", type, sizeof type, d);
        if (rc) return rc;
        if (strcmp(type, "default") != 0)
            return host->config_fail(src, d, RLX_ERR_UNSUPPORTED,
                                     "%s: \"%s\" is not supported by the phi3 recipe (default rope only; "
                                     "longrope's short_factor/long_factor are not implemented)",
                                     keys[i], type);
    }
    return 0;
}

static int configure(const rlx_config *src, rlx_model_config *cfg, const rlx_host_api *host, rlx_diag *d)
{
    int rc = check_rope_type(src, host, d);
    if (!rc) rc = host->config_read_common(src, &phi3_defaults, cfg, d);
    if (rc) return rc;
    double f;
    const char *key;
    if ((rc = partial_factor(src, host, &f, &key, d)) != 0) return rc;
    int64_t rot = (int64_t)((double)cfg->head_dim * f);
    if (!(f > 0 && f <= 1) || rot <= 0 || rot % 2)
        return host->config_fail(src, d, RLX_ERR_INVALID,
                                 "%s: %g gives %lld rotary dims of head_dim %lld (must be even, in (0, 1])", key,
                                 f, (long long)rot, (long long)cfg->head_dim);
    /* null (the default): full attention; a window applies to every layer */
    rc = host->config_int(src, "sliding_window", 0, &cfg->sliding_window, d);
    if (!rc && cfg->sliding_window < 0)
        return host->config_fail(src, d, RLX_ERR_INVALID, "sliding_window: negative");
    for (int64_t i = 0; !rc && i < cfg->num_layers; i++)
        cfg->layer_types[i] = cfg->sliding_window > 0 ? RLX_LAYER_SLIDING : RLX_LAYER_FULL;
    return rc;
}

static const char *const model_types[] = {"phi3", NULL};

static const rlx_arch arch = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_arch, class_names),
    .name = "phi3",
    .model_types = model_types,
    .default_profile = "llama32_prefill", /* the same layer shape as LLaMA's */
    .decode_profile = "llama32_decode",
    .build_flow = build_flow,
    .configure = configure,
};

RLX_ARCH_PLUGIN("arch-phi3",
                "Phi-3 recipe: config.json -> prefill and decode flows",
                arch)
