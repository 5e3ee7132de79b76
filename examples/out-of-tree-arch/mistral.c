/* An rlx architecture plugin built outside the rlx tree, against the installed headers only:
 * Mistral (MistralForCausalLM, model_type "mistral").
 *
 * Mistral is LLaMA with a sliding window on every layer, so this plugin needs no blocks of
 * its own. configure() reads config.json with MistralConfig's defaults and marks every
 * layer sliding; build_flow() declares the session inputs and strings installed blocks
 * together:
 *   token_embed -> rope_tables -> repeat(L, llama.decoder_layer) -> final_norm -> lm_head
 * llama.decoder_layer reads its layer's type ("layer": "{i}") and the window from the
 * config. The plugin talks to rlx only through the host table it is handed at init. */
#include <rlx/plugin_util.h> /* rlx/plugin.h and the plugin-definition macros */
#include <string.h>

/* MistralConfig's defaults (transformers), for keys config.json leaves out */
static const rlx_config_defaults mistral_defaults = {
    .struct_size = sizeof(rlx_config_defaults),
    .vocab_size = 32000,
    .hidden_size = 4096,
    .intermediate_size = 14336,
    .num_layers = 32,
    .num_heads = 32,
    .num_kv_heads = 8,
    .max_position_embeddings = 4096 * 32,
    .eps_key = "rms_norm_eps",
    .eps = 1e-6,
    .act_key = "hidden_act",
    .act = "silu",
    .rope_theta = 10000.0,
    .bos_token_id = 1,
    .eos_token_id = 2,
};

static int configure(const rlx_config *src, rlx_model_config *cfg, const rlx_host_api *host, rlx_diag *d)
{
    /* the keys every HF config shares, in the 4.x and 5.x spellings (rope_theta or
     * rope_parameters, torch_dtype or dtype) */
    int rc = host->config_read_common(src, &mistral_defaults, cfg, d);
    if (rc) return rc;
    int64_t v;
    /* num_key_value_heads: absent is 8, null is one per query head */
    if (host->config_has(src, "num_key_value_heads") &&
        host->config_int(src, "num_key_value_heads", -1, &v, d) == 0 && v < 0)
        cfg->num_kv_heads = cfg->num_heads;
    if (strcmp(cfg->hidden_act, "silu") != 0)
        return host->config_fail(src, d, RLX_ERR_UNSUPPORTED, "hidden_act: \"%s\" is not supported (silu)",
                                 cfg->hidden_act);
    if (strcmp(cfg->rope_type, "default") && strcmp(cfg->rope_type, "linear") && strcmp(cfg->rope_type, "llama3"))
        return host->config_fail(src, d, RLX_ERR_UNSUPPORTED,
                                 "rope type \"%s\" is not supported (default, linear, llama3)", cfg->rope_type);
    /* sliding_window: absent is 4096, null is none; Mistral applies it to every layer */
    int64_t w = 4096;
    if (host->config_has(src, "sliding_window") && (rc = host->config_int(src, "sliding_window", 0, &w, d)) != 0)
        return rc;
    if (w < 0) return host->config_fail(src, d, RLX_ERR_INVALID, "sliding_window: %lld is negative", (long long)w);
    cfg->sliding_window = w;
    for (int64_t i = 0; i < cfg->num_layers; i++)
        cfg->layer_types[i] = w > 0 ? RLX_LAYER_SLIDING : RLX_LAYER_FULL;
    return 0;
}

static int build_flow(rlx_flow *f, int phase, const rlx_model_config *cfg, const rlx_host_api *host,
                      rlx_diag *d)
{
    if (phase != RLX_PHASE_PREFILL && phase != RLX_PHASE_DECODE)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "arch mistral: phase %d is not prefill or decode", phase),
               RLX_ERR_UNSUPPORTED;
    /* the session inputs: T token ids, their positions (default 0..T-1) and the KV cache
     * row they start at (default 0); one flow serves prefill and decode */
    int64_t t[1] = {-1}, one[1] = {1};
    if (host->flow_input(f, "input_ids", RLX_I32, 1, t) || host->flow_input(f, "positions", RLX_I32, 1, t) ||
        host->flow_input(f, "pos", RLX_I32, 1, one) || host->flow_input_fill(f, "positions", RLX_FILL_IOTA) ||
        host->flow_input_fill(f, "pos", RLX_FILL_ZEROS))
        return host->diag_set(d, RLX_ERR_INTERNAL, "arch mistral: declaring the inputs failed"), RLX_ERR_INTERNAL;
    if (host->flow_stage(f, "token_embed", "{}") || host->flow_stage(f, "rope_tables", "{}") ||
        host->flow_repeat_begin(f, cfg->num_layers) ||
        host->flow_stage(f, "llama.decoder_layer",
                         "{\"prefix\":\"model.layers.{i}.\",\"cache\":\"cache.{i}\",\"layer\":\"{i}\"}") ||
        host->flow_repeat_end(f) || host->flow_stage(f, "final_norm", "{}") || host->flow_stage(f, "lm_head", "{}"))
        return host->diag_set(d, RLX_ERR_INTERNAL, "arch mistral: building the flow failed"), RLX_ERR_INTERNAL;
    return 0;
}

static const char *const model_types[] = {"mistral", NULL};

static const rlx_arch mistral_arch = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_arch, class_names),
    .name = "mistral",
    .model_types = model_types,
    .default_profile = "mistral_prefill", /* shipped next to the .so */
    .decode_profile = "mistral_decode",
    .build_flow = build_flow,
    .configure = configure,
};

/* the descriptor and rlx_plugin_init, which refuses a host of another ABI major or one
 * without the services we call */
RLX_ARCH_PLUGIN("arch-mistral", "Mistral recipe (out of tree): config.json -> prefill and decode flows",
                mistral_arch)
