/* qwen3.decoder_layer: the LLaMA layer (pre-norm attention + SwiGLU MLP, K/V in the
 * layer's cache states, a sliding window where config.layer_types says) with Qwen3's
 * q_norm/k_norm (RMSNorm over head_dim, per head, before rope): llama.decoder_layer
 * with qk_norm 1, emitted through the host. */
#include "rlx/plugin.h"
#include <stdio.h>
#include <string.h>

extern const rlx_block blk_qwen3_decoder_layer; /* listed by qwen3_plugin.c */

/* LLaMA's layer with q/k norms, made by name through the host (blocks compose; the
 * qwen3 plugin does not compile the llama plugin's code) */
static int decoder_layer(rlx_ctx *c, const rlx_host_api *h)
{
    const rlx_model_config *cfg = h->model_config(c);
    const char *prefix = h->param_str(c, "prefix", NULL);
    const char *cache = h->param_str(c, "cache", NULL);
    if (!prefix || !cache)
        return h->fail(c, "qwen3.decoder_layer: needs the parameters 'prefix' (model.layers.{i}.) "
                          "and 'cache' (cache.{i})");
    const char *rope = h->param_str(c, "rope", "rope.inv_freq");
    char params[768];
    int n = snprintf(params, sizeof params,
                     "{\"prefix\":\"%s\",\"cache\":\"%s\",\"rope\":\"%s\",\"layer\":%lld,"
                     "\"eps\":%.17g,\"qk_norm\":%lld}",
                     prefix, cache, rope ? rope : "", (long long)h->param_int(c, "layer", -1),
                     h->param_float(c, "eps", cfg->norm_eps), (long long)h->param_int(c, "qk_norm", 1));
    if (n < 0 || n >= (int)sizeof params || strpbrk(prefix, "\"\\") || strpbrk(cache, "\"\\"))
        return h->fail(c, "qwen3.decoder_layer: prefix or cache too long or not plain text");
    return h->emit_block(c, "llama.decoder_layer", params);
}

const rlx_block blk_qwen3_decoder_layer = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), "qwen3.decoder_layer",
    "Qwen3 decoder layer (q/k RMSNorm, SwiGLU MLP) over the layer's KV cache",
    "prefix: str (model.layers.{i}.); cache: str (cache.{i}: states cache.{i}.k/.v); "
    "layer: int ({i}: selects layer_types / sliding_window); eps: float (config); "
    "rope: slot (rope.inv_freq); qk_norm: int (1)",
    decoder_layer};
