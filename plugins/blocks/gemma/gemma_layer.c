/* gemma.decoder_layer: Gemma 2 and Gemma 3 (text) decoder layers.
 *   x -> input_layernorm -> attention -> post_attention_layernorm -> + x
 *     -> pre_feedforward_layernorm -> GeGLU (tanh GELU) -> post_feedforward_layernorm -> +
 * Every norm is the (1 + w) RMSNorm. The attention scale is query_pre_attn_scalar^-0.5,
 * scores are soft-capped by attn_logit_softcapping (gemma2), and layers marked
 * sliding_attention in config.layer_types see only the last sliding_window keys.
 * Gemma 3 adds q_norm/k_norm ((1 + w), before rope) and rotates sliding layers with the
 * local rope table (parameter rope_local). Reads and writes "hidden"; K/V live in the
 * layer's cache states (cache.{i}.k/.v) so prefill and decode share the layer.
 * Composites (rlx.add_rms_norm, rlx.geglu_tanh) under "direct", primitives under "fusable". */
#include "../core/core_emit.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

extern const rlx_block blk_gemma_decoder_layer; /* listed by gemma_plugin.c */

typedef struct names {
    char attn[BLK_NAME_MAX], mlp[BLK_NAME_MAX], cache[BLK_NAME_MAX];
    char in_norm[BLK_NAME_MAX], post_attn[BLK_NAME_MAX], pre_ff[BLK_NAME_MAX], post_ff[BLK_NAME_MAX];
} names;

static int name_all(const blk_em *e, names *n, const char *prefix, const char *cache)
{
    return blk_join(e, n->attn, prefix, "self_attn.") < 0 || blk_join(e, n->mlp, prefix, "mlp.") < 0 ||
                   blk_join(e, n->cache, cache, "") < 0 ||
                   blk_join(e, n->in_norm, prefix, "input_layernorm.weight") < 0 ||
                   blk_join(e, n->post_attn, prefix, "post_attention_layernorm.weight") < 0 ||
                   blk_join(e, n->pre_ff, prefix, "pre_feedforward_layernorm.weight") < 0 ||
                   blk_join(e, n->post_ff, prefix, "post_feedforward_layernorm.weight") < 0
               ? -1
               : 0;
}

static int decoder_layer(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "gemma.decoder_layer"};
    const rlx_model_config *cfg = h->model_config(c);
    const char *prefix = h->param_str(c, "prefix", NULL);
    const char *cache = h->param_str(c, "cache", NULL);
    int64_t layer = h->param_int(c, "layer", -1);
    if (!prefix || !cache || layer < 0)
        return h->fail(c, "gemma.decoder_layer: needs the parameters 'prefix' (model.layers.{i}.), "
                          "'cache' (cache.{i}) and 'layer' ({i})");
    if (layer >= cfg->num_layers || layer >= RLX_MAX_LAYERS)
        return h->fail(c, "gemma.decoder_layer: layer %lld is out of range [0, %lld)", (long long)layer,
                       (long long)cfg->num_layers);
    names n;
    if (name_all(&e, &n, prefix, cache) < 0) return RLX_ERR_INVALID;
    double eps = h->param_float(c, "eps", cfg->norm_eps);
    int64_t heads, nkv, head_dim;
    if (blk_heads(&e, &heads, &nkv, &head_dim)) return RLX_ERR_INVALID;
    int sliding = cfg->layer_types[layer] == RLX_LAYER_SLIDING;
    if (sliding && cfg->sliding_window <= 0)
        return h->fail(c, "gemma.decoder_layer: config.json: layer %lld is sliding_attention but "
                          "sliding_window is not set", (long long)layer);
    const char *rope = h->param_str(c, "rope", "rope.inv_freq");
    if (sliding) rope = h->param_str(c, "rope_local", rope);
    double qpas = cfg->query_pre_attn_scalar > 0 ? cfg->query_pre_attn_scalar : (double)head_dim;
    blk_attn_args a = {
        .prefix = n.attn,
        .num_heads = cfg->num_heads,
        .num_kv_heads = nkv,
        .head_dim = head_dim,
        .hidden = cfg->hidden_size,
        .bias = cfg->attention_bias,
        .qk_norm = (int)h->param_int(c, "qk_norm", strcmp(cfg->model_type, "gemma3_text") == 0),
        .qk_norm_eps = eps,
        .qk_norm_add_one = 1,
        .inv_freq_slot = rope && *rope ? rope : NULL,
        .scale = 1.0 / sqrt(qpas),
        .causal = 1,
        .window = sliding ? cfg->sliding_window : 0,
        .softcap = cfg->attn_logit_softcap,
        .cache = n.cache,
    };

    int32_t x = blk_slot(&e, "hidden");
    if (x < 0) return RLX_ERR_INVALID;
    int32_t y = blk_rms_norm(&e, x, n.in_norm, eps, 1);
    y = y < 0 ? -1 : blk_self_attention(&e, y, &a);
    y = y < 0 ? -1 : blk_rms_norm(&e, y, n.post_attn, eps, 1);
    int32_t s, n2;
    if (y < 0 || blk_add_rms_norm(&e, x, y, n.pre_ff, eps, 1, &s, &n2) != 0) return RLX_ERR_INVALID;
    int32_t m = blk_gated_mlp(&e, n2, n.mlp, cfg->intermediate_size, cfg->mlp_bias,
                              "rlx.geglu_tanh", "rlx.gelu_tanh");
    m = m < 0 ? -1 : blk_rms_norm(&e, m, n.post_ff, eps, 1);
    int32_t out = blk_op2(&e, "rlx.add", s, m);
    if (out < 0) return RLX_ERR_INVALID;
    return h->slot_set(c, "hidden", out) == 0 ? 0 : RLX_ERR_INVALID;
}

const rlx_block blk_gemma_decoder_layer = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), "gemma.decoder_layer",
    "Gemma 2 / Gemma 3 decoder layer ((1+w) pre/post norms, GeGLU, softcap, sliding window) "
    "over the layer's KV cache",
    "prefix: str (model.layers.{i}.); cache: str (cache.{i}); layer: int ({i}: selects "
    "layer_types); eps: float (config); rope: slot (rope.inv_freq); rope_local: slot (for "
    "sliding layers; default: rope); qk_norm: int (1 for gemma3_text)",
    decoder_layer};
