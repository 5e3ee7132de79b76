/* LLaMA decoder layers. Both read "hidden", write "hidden", and keep K/V in the layer's
 * cache states (cache.{i}.k / cache.{i}.v) through rlx.cache_write, so the same layer
 * serves prefill (which fills the cache) and decode (which extends it).
 *  - llama.decoder_layer: one block; composites (rlx.add_rms_norm, rlx.swiglu) under the
 *    "direct" policy, primitives under "fusable". Its parameters cover the relatives of
 *    that shape: q/k norms, a sliding window by layer_types, fused qkv / gate_up weights.
 *  - llama.decoder_layer_composed: the same layer as the sequence of core blocks
 *    (residual_save, rms_norm, attention, residual_add, ...), always primitives.
 *  - llama.kv_tap: exposes a layer's written cache as outputs (prefill cache export).
 * The attention leaves the written cache values in the slots "cache.{i}.k"/".v". */
#include "llama_blocks.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct layer_args {
    const char *prefix;
    char cache[BLK_NAME_MAX];
    char attn_prefix[BLK_NAME_MAX], mlp_prefix[BLK_NAME_MAX];
    char in_norm[BLK_NAME_MAX], post_norm[BLK_NAME_MAX];
    blk_prenorm_args p;
} layer_args;

/* "model.layers.12." -> 12: the layer index when the flow gives no "cache" parameter */
static int index_from_prefix(const char *prefix)
{
    const char *end = prefix + strlen(prefix);
    while (end > prefix && (end[-1] < '0' || end[-1] > '9')) end--;
    const char *start = end;
    while (start > prefix && start[-1] >= '0' && start[-1] <= '9') start--;
    if (start == end || end - start > 6) return -1;
    return atoi(start);
}

static int layer_setup(const blk_em *e, layer_args *L)
{
    const rlx_host_api *h = e->h;
    const rlx_model_config *cfg = h->model_config(e->c);
    L->prefix = h->param_str(e->c, "prefix", NULL);
    if (!L->prefix) return h->fail(e->c, "%s: needs the parameter 'prefix' (e.g. model.layers.{i}.)", e->who);
    const char *cache = h->param_str(e->c, "cache", NULL);
    if (cache) {
        if (blk_join(e, L->cache, cache, "") < 0) return RLX_ERR_INVALID;
    } else {
        int i = index_from_prefix(L->prefix);
        if (i < 0)
            return h->fail(e->c, "%s: needs the parameter 'cache' (no layer index in prefix '%s')",
                           e->who, L->prefix);
        snprintf(L->cache, sizeof L->cache, "cache.%d", i);
    }
    if (blk_join(e, L->attn_prefix, L->prefix, "self_attn.") < 0 ||
        blk_join(e, L->mlp_prefix, L->prefix, "mlp.") < 0 ||
        blk_join(e, L->in_norm, L->prefix, "input_layernorm.weight") < 0 ||
        blk_join(e, L->post_norm, L->prefix, "post_attention_layernorm.weight") < 0)
        return RLX_ERR_INVALID;
    int64_t heads, nkv, head_dim;
    if (blk_heads(e, &heads, &nkv, &head_dim)) return RLX_ERR_INVALID;
    /* the layer index picks layer_types' sliding window (Qwen3, Mistral, Phi-3) */
    int64_t layer = h->param_int(e->c, "layer", -1);
    if (layer < -1 || layer >= cfg->num_layers || layer >= RLX_MAX_LAYERS)
        return h->fail(e->c, "%s: layer %lld is out of range [0, %lld)", e->who, (long long)layer,
                       (long long)cfg->num_layers);
    int sliding = layer >= 0 && cfg->layer_types[layer] == RLX_LAYER_SLIDING;
    if (sliding && cfg->sliding_window <= 0)
        return h->fail(e->c, "%s: config.json: layer %lld is sliding_attention but sliding_window is not set",
                       e->who, (long long)layer);
    double eps = h->param_float(e->c, "eps", cfg->norm_eps);
    const char *rope = h->param_str(e->c, "rope", "rope.inv_freq");
    L->p = (blk_prenorm_args){
        .in_norm = L->in_norm,
        .post_norm = L->post_norm,
        .eps = eps,
        .mlp = L->mlp_prefix,
        .fused_gate_up = (int)h->param_int(e->c, "fused_gate_up", 0),
        .intermediate = cfg->intermediate_size,
        .mlp_bias = cfg->mlp_bias,
        .attn = {
            .prefix = L->attn_prefix,
            .num_heads = heads,
            .num_kv_heads = nkv,
            .head_dim = head_dim,
            .hidden = cfg->hidden_size,
            .bias = cfg->attention_bias,
            .qk_norm = (int)h->param_int(e->c, "qk_norm", 0),
            .qk_norm_eps = eps,
            .inv_freq_slot = rope && *rope ? rope : NULL,
            .causal = 1,
            .window = sliding ? cfg->sliding_window : 0,
            .cache = L->cache,
            .qkv = h->param_int(e->c, "fused_qkv", 0) ? "qkv_proj.weight" : NULL,
        },
    };
    return 0;
}

static int decoder_layer(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "llama.decoder_layer"};
    layer_args L;
    int rc = layer_setup(&e, &L);
    if (rc) return rc;
    return blk_prenorm_layer(&e, &L.p);
}

/* The steps of core blocks, through the same slots the core blocks use. */
static int decoder_layer_composed(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "llama.decoder_layer_composed"};
    layer_args L;
    int rc = layer_setup(&e, &L);
    if (rc) return rc;
    /* residual_save; rms_norm(input_layernorm); attention; residual_add */
    int32_t x = blk_slot(&e, "hidden");
    if (x < 0 || h->slot_set(c, "residual", x) != 0) return RLX_ERR_INVALID;
    int32_t y = blk_rms_norm(&e, x, L.in_norm, L.p.eps, 0);
    y = y < 0 ? -1 : blk_self_attention(&e, y, &L.p.attn);
    y = blk_op2(&e, "rlx.add", y, blk_slot(&e, "residual"));
    /* residual_save; rms_norm(post_attention_layernorm); swiglu; residual_add */
    if (y < 0 || h->slot_set(c, "residual", y) != 0) return RLX_ERR_INVALID;
    y = blk_rms_norm(&e, y, L.post_norm, L.p.eps, 0);
    y = y < 0                ? -1
        : L.p.fused_gate_up ? blk_fused_gated_mlp(&e, y, L.mlp_prefix, L.p.intermediate, "rlx.swiglu", "rlx.silu")
                             : blk_swiglu_mlp(&e, y, L.mlp_prefix, L.p.intermediate, L.p.mlp_bias);
    y = blk_op2(&e, "rlx.add", y, blk_slot(&e, "residual"));
    if (y < 0) return RLX_ERR_INVALID;
    return h->slot_set(c, "hidden", y) == 0 ? 0 : RLX_ERR_INVALID;
}

const rlx_block blk_llama_decoder_layer = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), "llama.decoder_layer",
    "LLaMA decoder layer (pre-norm attention + SwiGLU MLP) over the layer's KV cache",
    "prefix: str (model.layers.{i}.); cache: str (cache.{i}: states cache.{i}.k/.v); "
    "layer: int ({i}: selects layer_types / sliding_window; default none); eps: float (config); "
    "rope: slot (rope.inv_freq); qk_norm: int (0); fused_qkv: int (0: q/k/v_proj, 1: one qkv_proj); "
    "fused_gate_up: int (0: gate/up_proj, 1: one gate_up_proj)",
    decoder_layer};

const rlx_block blk_llama_decoder_layer_composed = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), "llama.decoder_layer_composed",
    "the LLaMA decoder layer composed from the core blocks' emitters (always primitives)",
    "prefix: str (model.layers.{i}.); cache: str (cache.{i}); layer: int; eps: float; rope: slot; "
    "qk_norm, fused_qkv, fused_gate_up: int",
    decoder_layer_composed};

/* Outputs a layer's written K/V cache (rows past the tokens seen are zeros). */
static int kv_tap(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "llama.kv_tap"};
    const char *cache = h->param_str(c, "cache", NULL);
    if (!cache) return h->fail(c, "llama.kv_tap: needs the parameter 'cache' (e.g. cache.{i})");
    char ks[BLK_NAME_MAX], vs[BLK_NAME_MAX];
    if (blk_join(&e, ks, cache, ".k") < 0 || blk_join(&e, vs, cache, ".v") < 0)
        return RLX_ERR_INVALID;
    int32_t k = blk_slot(&e, ks), v = blk_slot(&e, vs);
    if (k < 0 || v < 0) return RLX_ERR_INVALID;
    if (h->emit_output(c, h->param_str(c, "k_out", ks), k) != 0 ||
        h->emit_output(c, h->param_str(c, "v_out", vs), v) != 0)
        return RLX_ERR_INVALID;
    return 0;
}

const rlx_block blk_llama_kv_tap = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), "llama.kv_tap",
    "exports a layer's KV cache (after this flow's writes) as two outputs",
    "cache: str (cache.{i}); k_out, v_out: str (output names; default cache.{i}.k / .v)",
    kv_tap};
