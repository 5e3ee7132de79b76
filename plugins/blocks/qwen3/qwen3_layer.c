/* qwen3.decoder_layer: the LLaMA layer shape (pre-norm attention + SwiGLU MLP) with the
 * Qwen3 differences: q_norm/k_norm (RMSNorm over head_dim, per head, before rope), an
 * explicit head_dim, and a sliding window on the layers config.layer_types marks.
 * Reads "hidden", writes "hidden"; K/V live in the layer's cache states cache.{i}.k/.v
 * (rlx.cache_write), so the same layer serves prefill and KV-cache decode.
 * Composites (rlx.add_rms_norm, rlx.swiglu) under "direct", primitives under "fusable". */
#include "../core/core_emit.h"
#include <stdio.h>
#include <string.h>

extern const rlx_block blk_qwen3_decoder_layer; /* listed by qwen3_plugin.c */

static int decoder_layer(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "qwen3.decoder_layer"};
    const rlx_model_config *cfg = h->model_config(c);
    const char *prefix = h->param_str(c, "prefix", NULL);
    const char *cache = h->param_str(c, "cache", NULL);
    if (!prefix || !cache)
        return h->fail(c, "qwen3.decoder_layer: needs the parameters 'prefix' (model.layers.{i}.) "
                          "and 'cache' (cache.{i})");
    int64_t layer = h->param_int(c, "layer", -1);
    if (layer < -1 || layer >= cfg->num_layers || layer >= RLX_MAX_LAYERS)
        return h->fail(c, "qwen3.decoder_layer: layer %lld is out of range [0, %lld)",
                       (long long)layer, (long long)cfg->num_layers);
    char attn[BLK_NAME_MAX], mlp[BLK_NAME_MAX], in_norm[BLK_NAME_MAX], post_norm[BLK_NAME_MAX],
        cache_name[BLK_NAME_MAX];
    if (blk_join(&e, attn, prefix, "self_attn.") < 0 || blk_join(&e, mlp, prefix, "mlp.") < 0 ||
        blk_join(&e, in_norm, prefix, "input_layernorm.weight") < 0 ||
        blk_join(&e, post_norm, prefix, "post_attention_layernorm.weight") < 0 ||
        blk_join(&e, cache_name, cache, "") < 0)
        return RLX_ERR_INVALID;
    double eps = h->param_float(c, "eps", cfg->norm_eps);
    int64_t nkv = cfg->num_kv_heads > 0 ? cfg->num_kv_heads : cfg->num_heads;
    int64_t head_dim = cfg->head_dim > 0 ? cfg->head_dim
                       : cfg->num_heads > 0 ? cfg->hidden_size / cfg->num_heads : 0;
    if (cfg->num_heads <= 0 || head_dim <= 0 || nkv <= 0 || cfg->num_heads % nkv)
        return h->fail(c, "qwen3.decoder_layer: config.json: num_attention_heads %lld is not a "
                          "multiple of num_key_value_heads %lld", (long long)cfg->num_heads,
                       (long long)nkv);
    int sliding = layer >= 0 && cfg->layer_types[layer] == RLX_LAYER_SLIDING;
    const char *rope = h->param_str(c, "rope", "rope.inv_freq");
    blk_prenorm_args L = {
        .in_norm = in_norm,
        .post_norm = post_norm,
        .eps = eps,
        .mlp = mlp,
        .intermediate = cfg->intermediate_size,
        .mlp_bias = cfg->mlp_bias,
        .attn = {
            .prefix = attn,
            .num_heads = cfg->num_heads,
            .num_kv_heads = nkv,
            .head_dim = head_dim,
            .hidden = cfg->hidden_size,
            .bias = cfg->attention_bias,
            .qk_norm = (int)h->param_int(c, "qk_norm", 1),
            .qk_norm_eps = eps,
            .inv_freq_slot = rope && *rope ? rope : NULL,
            .causal = 1,
            .window = sliding ? cfg->sliding_window : 0,
            .cache = cache_name,
        },
    };
    return blk_prenorm_layer(&e, &L);
}

const rlx_block blk_qwen3_decoder_layer = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), "qwen3.decoder_layer",
    "Qwen3 decoder layer (q/k RMSNorm, SwiGLU MLP) over the layer's KV cache",
    "prefix: str (model.layers.{i}.); cache: str (cache.{i}: states cache.{i}.k/.v); "
    "layer: int ({i}: selects layer_types / sliding_window); eps: float (config); "
    "rope: slot (rope.inv_freq); qk_norm: int (1)",
    decoder_layer};
