/* rlx-blocks-phi3: phi3.decoder_layer, the Phi-3 decoder layer. It is the LLaMA layer
 * over Phi-3's fused weights: self_attn.qkv_proj [(nh + 2·nkv)·d, hidden] (q rows, then
 * k, then v) and mlp.gate_up_proj [2·I, hidden] (gate rows first). The block composes
 * through the host: it emits llama.decoder_layer with fused_qkv / fused_gate_up, which
 * splits the one projection with rlx.slice, so no layer code is repeated here.
 * Reads and writes "hidden"; K/V live in cache.{i}.k/.v (prefill and decode share it). */
#include <stdio.h>
#include <string.h>
#include "rlx/plugin_util.h"

/* a string the JSON text below can hold as is */
static int plain(const char *s) { return !strpbrk(s, "\"\\"); }

static int decoder_layer(rlx_ctx *c, const rlx_host_api *h)
{
    const rlx_model_config *cfg = h->model_config(c);
    const char *prefix = h->param_str(c, "prefix", NULL);
    const char *cache = h->param_str(c, "cache", NULL);
    const char *rope = h->param_str(c, "rope", "rope.inv_freq");
    int64_t layer = h->param_int(c, "layer", -1);
    if (!prefix || !cache || layer < 0)
        return h->fail(c, "phi3.decoder_layer: needs the parameters 'prefix' (model.layers.{i}.), "
                          "'cache' (cache.{i}) and 'layer' ({i})");
    if (!plain(prefix) || !plain(cache) || !plain(rope))
        return h->fail(c, "phi3.decoder_layer: 'prefix', 'cache' and 'rope' must not hold quotes or backslashes");
    char params[2048];
    int n = snprintf(params, sizeof params,
                     "{\"prefix\":\"%s\",\"cache\":\"%s\",\"layer\":%lld,\"rope\":\"%s\",\"eps\":%.17g,"
                     "\"fused_qkv\":1,\"fused_gate_up\":1}",
                     prefix, cache, (long long)layer, rope, h->param_float(c, "eps", cfg->norm_eps));
    if (n < 0 || n >= (int)sizeof params) return h->fail(c, "phi3.decoder_layer: parameters are too long");
    return h->emit_block(c, "llama.decoder_layer", params);
}

static const rlx_block phi3_decoder_layer = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), "phi3.decoder_layer",
    "Phi-3 decoder layer (fused qkv_proj and gate_up_proj) over the layer's KV cache; "
    "emits llama.decoder_layer",
    "prefix: str (model.layers.{i}.); cache: str (cache.{i}); layer: int ({i}: selects "
    "layer_types / sliding_window); eps: float (config); rope: slot (rope.inv_freq)",
    decoder_layer};

static const rlx_block *const blocks[] = {&phi3_decoder_layer};

RLX_BLOCKS_PLUGIN("blocks-phi3",
                  "Phi-3 decoder layer (fused projections), composed from llama.decoder_layer",
                  blocks)
