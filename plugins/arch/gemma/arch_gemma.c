/* rlx-arch-gemma: the Gemma 2 / Gemma 3 (text) recipe, config.json -> flow. Prefill and
 * decode share one flow:
 *   token_embed (· √hidden) -> rope_tables [-> local rope_tables (gemma3)]
 *     -> repeat(L, gemma.decoder_layer) -> final_norm (1 + w) -> lm_head (final softcap) */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "../common/recipe_common.h"
#include "../../common/rlx_plugin_boilerplate.h"

/* v rounded to the checkpoint dtype: HF multiplies by the normalizer in the weight dtype */
static double round_to_dtype(double v, int32_t dtype)
{
    int bits = dtype == RLX_BF16 ? 8 : dtype == RLX_F16 ? 11 : 24;
    int ex;
    double m = frexp(v, &ex);
    return ldexp(nearbyint(ldexp(m, bits)), ex - bits);
}

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
             round_to_dtype(sqrt((double)cfg->hidden_size), cfg->dtype));
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

static const char *const model_types[] = {"gemma2", "gemma3_text", NULL};

static const rlx_arch arch = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_arch, build_flow),
    .name = "gemma",
    .model_types = model_types,
    .default_profile = "gemma_prefill",
    .decode_profile = "gemma_decode",
    .build_flow = build_flow,
};

RLX_ARCH_PLUGIN("arch-gemma",
                "Gemma 2 / Gemma 3 (text) recipe: config.json -> prefill and decode flows",
                arch)
