/* The core blocks: each reads its stage parameters and slots, then emits through the
 * shared emitters of core_emit.c. */
#include "core_blocks.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EM(name) blk_em e = {c, h, (name)}

static const char *pstr(const blk_em *e, const char *key, const char *def)
{
    return e->h->param_str(e->c, key, def);
}

static const rlx_model_config *cfg_of(const blk_em *e) { return e->h->model_config(e->c); }

/* output value into the stage's "out" slot (default: the input slot) */
static int put(const blk_em *e, const char *slot, int32_t v)
{
    if (v < 0) return RLX_ERR_INVALID;
    return e->h->slot_set(e->c, slot, v) == 0 ? 0 : RLX_ERR_INVALID;
}

/* A weight name: "weight" param, else prefix param + default suffix */
static int weight_name(const blk_em *e, char *out, const char *key, const char *suffix,
                       const char *fallback)
{
    const char *full = pstr(e, key, NULL);
    if (full && *full) return blk_join(e, out, full, "");
    const char *prefix = pstr(e, "prefix", NULL);
    if (prefix) return blk_join(e, out, prefix, suffix);
    if (fallback) return blk_join(e, out, fallback, "");
    e->h->fail(e->c, "%s: needs the parameter '%s' or 'prefix'", e->who, key);
    return -1;
}

static int token_embed(rlx_ctx *c, const rlx_host_api *h)
{
    EM("token_embed");
    char w[BLK_NAME_MAX];
    if (weight_name(&e, w, "weight", "embed_tokens.weight", "model.embed_tokens.weight") < 0)
        return RLX_ERR_INVALID;
    int32_t ids = blk_slot(&e, pstr(&e, "ids", "input_ids"));
    if (ids < 0) return RLX_ERR_INVALID;
    double scale = h->param_float(c, "scale", 0.0);
    return put(&e, pstr(&e, "out", "hidden"), blk_embed(&e, w, ids, scale));
}

static int norm_common(rlx_ctx *c, const rlx_host_api *h, const char *who, const char *fallback)
{
    EM(who);
    char w[BLK_NAME_MAX];
    if (weight_name(&e, w, "weight", "weight", fallback) < 0) return RLX_ERR_INVALID;
    const char *in = pstr(&e, "in", "hidden");
    int32_t x = blk_slot(&e, in);
    if (x < 0) return RLX_ERR_INVALID;
    double eps = h->param_float(c, "eps", cfg_of(&e)->norm_eps);
    int add_one = (int)h->param_int(c, "add_one", 0);
    return put(&e, pstr(&e, "out", in), blk_rms_norm(&e, x, w, eps, add_one));
}

static int rms_norm(rlx_ctx *c, const rlx_host_api *h) { return norm_common(c, h, "rms_norm", NULL); }

static int final_norm(rlx_ctx *c, const rlx_host_api *h)
{
    return norm_common(c, h, "final_norm", "model.norm.weight");
}

static int layer_norm(rlx_ctx *c, const rlx_host_api *h)
{
    EM("layer_norm");
    char w[BLK_NAME_MAX], b[BLK_NAME_MAX];
    if (weight_name(&e, w, "weight", "weight", NULL) < 0 ||
        weight_name(&e, b, "bias", "bias", NULL) < 0)
        return RLX_ERR_INVALID;
    const char *in = pstr(&e, "in", "hidden");
    int32_t x = blk_slot(&e, in);
    if (x < 0) return RLX_ERR_INVALID;
    double eps = h->param_float(c, "eps", cfg_of(&e)->norm_eps);
    return put(&e, pstr(&e, "out", in), blk_layer_norm(&e, x, w, b, eps));
}

static int linear(rlx_ctx *c, const rlx_host_api *h)
{
    EM("linear");
    char w[BLK_NAME_MAX], b[BLK_NAME_MAX];
    if (weight_name(&e, w, "weight", "weight", NULL) < 0) return RLX_ERR_INVALID;
    const char *bias = pstr(&e, "bias", NULL);
    const char *prefix = pstr(&e, "prefix", NULL);
    if (bias) {
        if (blk_join(&e, b, bias, "") < 0) return RLX_ERR_INVALID;
    } else if (prefix) {
        if (blk_join(&e, b, prefix, "bias") < 0) return RLX_ERR_INVALID;
    } else {
        b[0] = 0;
    }
    const char *in = pstr(&e, "in", "hidden");
    int32_t x = blk_slot(&e, in);
    if (x < 0) return RLX_ERR_INVALID;
    /* a bias named explicitly must exist; one derived from the prefix is optional */
    return put(&e, pstr(&e, "out", in), blk_linear(&e, x, w, b, -1, bias == NULL));
}

static int residual_save(rlx_ctx *c, const rlx_host_api *h)
{
    EM("residual_save");
    int32_t x = blk_slot(&e, pstr(&e, "in", "hidden"));
    return put(&e, pstr(&e, "out", "residual"), x);
}

static int residual_add(rlx_ctx *c, const rlx_host_api *h)
{
    EM("residual_add");
    const char *in = pstr(&e, "in", "hidden");
    int32_t x = blk_slot(&e, in);
    int32_t r = blk_slot(&e, pstr(&e, "residual", "residual"));
    return put(&e, pstr(&e, "out", in), blk_op2(&e, "rlx.add", x, r));
}

static int swiglu(rlx_ctx *c, const rlx_host_api *h)
{
    EM("swiglu");
    const char *prefix = pstr(&e, "prefix", NULL);
    if (!prefix) return h->fail(c, "swiglu: needs the parameter 'prefix' (e.g. model.layers.0.mlp.)");
    const char *in = pstr(&e, "in", "hidden");
    int32_t x = blk_slot(&e, in);
    if (x < 0) return RLX_ERR_INVALID;
    const rlx_model_config *cfg = cfg_of(&e);
    int64_t inter = h->param_int(c, "intermediate_size", cfg->intermediate_size);
    int bias = (int)h->param_int(c, "bias", cfg->mlp_bias);
    return put(&e, pstr(&e, "out", in), blk_swiglu_mlp(&e, x, prefix, inter, bias));
}

static int gelu_ffn(rlx_ctx *c, const rlx_host_api *h)
{
    EM("gelu_ffn");
    const char *up = pstr(&e, "up", NULL), *down = pstr(&e, "down", NULL);
    if (!up || !down) return h->fail(c, "gelu_ffn: needs the parameters 'up' and 'down' (weight names)");
    const char *in = pstr(&e, "in", "hidden");
    int32_t x = blk_slot(&e, in);
    if (x < 0) return RLX_ERR_INVALID;
    const char *act = pstr(&e, "act", "gelu");
    int32_t y = blk_gelu_ffn(&e, x, up, pstr(&e, "up_bias", NULL), down,
                             pstr(&e, "down_bias", NULL), act);
    return put(&e, pstr(&e, "out", in), y);
}

static int lm_head(rlx_ctx *c, const rlx_host_api *h)
{
    EM("lm_head");
    const rlx_model_config *cfg = cfg_of(&e);
    int32_t x = blk_slot(&e, pstr(&e, "in", "hidden"));
    if (x < 0) return RLX_ERR_INVALID;
    int64_t hid;
    if (blk_last_dim(&e, x, &hid, NULL) < 0) return RLX_ERR_INVALID;
    rlx_shape s = blk_shape2(cfg->vocab_size, hid);
    const char *name = pstr(&e, "weight", NULL);
    int32_t w = -1;
    if (name) {
        w = h->emit_weight(c, name, &s);
    } else {
        /* tied: the embedding table, when the config says so or the head is absent */
        if (!cfg->tie_word_embeddings) w = h->emit_weight_opt(c, "lm_head.weight", &s);
        if (w < 0) w = h->emit_weight(c, pstr(&e, "tied_weight", "model.embed_tokens.weight"), &s);
    }
    if (w < 0) return RLX_ERR_INVALID;
    double cap = h->param_float(c, "softcap", cfg->final_logit_softcap);
    int rc = blk_lm_head(&e, x, w, cap, pstr(&e, "output", "logits"));
    return rc == 0 ? 0 : RLX_ERR_INVALID;
}

static int gather_last_token(rlx_ctx *c, const rlx_host_api *h)
{
    EM("gather_last_token");
    const char *in = pstr(&e, "in", "hidden");
    return put(&e, pstr(&e, "out", in), blk_op1(&e, "rlx.last_row", blk_slot(&e, in)));
}

static int rope_tables(rlx_ctx *c, const rlx_host_api *h)
{
    EM("rope_tables");
    const rlx_model_config *cfg = cfg_of(&e);
    int64_t head_dim = h->param_int(c, "head_dim", cfg->head_dim);
    double partial = h->param_float(c, "partial_rotary_factor", 1.0);
    blk_rope_args a = {
        .rope_type = pstr(&e, "rope_type", cfg->rope_type),
        .theta = h->param_float(c, "theta", cfg->rope_theta),
        .dim = (int64_t)((double)head_dim * partial),
        .factor = h->param_float(c, "factor", cfg->rope_factor),
        .low_freq_factor = h->param_float(c, "low_freq_factor", cfg->rope_low_freq_factor),
        .high_freq_factor = h->param_float(c, "high_freq_factor", cfg->rope_high_freq_factor),
        .original_max_position =
            h->param_int(c, "original_max_position_embeddings", cfg->rope_original_max_position),
    };
    if (a.dim <= 0 || a.dim > 65536) return h->fail(c, "rope_tables: bad rotary dimension %lld", (long long)a.dim);
    double *f = malloc(sizeof(double) * (size_t)(a.dim / 2 + 1));
    float *f32 = malloc(sizeof(float) * (size_t)(a.dim / 2 + 1));
    char err[256];
    int rc = RLX_ERR_NOMEM;
    if (f && f32) {
        if (blk_rope_inv_freq(&a, f, err, sizeof err) != 0) {
            rc = h->fail(c, "rope_tables: %s", err);
        } else {
            /* computed in double, kept in f32 as transformers keeps the buffer */
            for (int64_t i = 0; i < a.dim / 2; i++) f32[i] = (float)f[i];
            rlx_shape s = blk_shape1(a.dim / 2);
            rc = put(&e, pstr(&e, "slot", "rope.inv_freq"), h->emit_const(c, RLX_F32, &s, f32));
        }
    }
    free(f);
    free(f32);
    return rc;
}

/* Self-attention of the HF layout: reads "hidden" (already normed), writes the attention
 * output (before the residual add). cache: the states' prefix (cache.{i}), NULL: none. */
static int attn_common(const blk_em *e, const char *cache)
{
    rlx_ctx *c = e->c;
    const rlx_host_api *h = e->h;
    const rlx_model_config *cfg = cfg_of(e);
    const char *prefix = pstr(e, "prefix", NULL);
    if (!prefix) return h->fail(c, "%s: needs the parameter 'prefix' (e.g. model.layers.{i}.self_attn.)", e->who);
    const char *in = pstr(e, "in", "hidden");
    int32_t x = blk_slot(e, in);
    if (x < 0) return RLX_ERR_INVALID;
    const char *rope = pstr(e, "rope", "rope.inv_freq");
    blk_attn_args a = {
        .prefix = prefix,
        .num_heads = h->param_int(c, "num_heads", cfg->num_heads),
        .num_kv_heads = h->param_int(c, "num_kv_heads", cfg->num_kv_heads),
        .head_dim = h->param_int(c, "head_dim", cfg->head_dim),
        .hidden = cfg->hidden_size,
        .bias = (int)h->param_int(c, "bias", cfg->attention_bias),
        .qk_norm = (int)h->param_int(c, "qk_norm", 0),
        .qk_norm_eps = h->param_float(c, "eps", cfg->norm_eps),
        .inv_freq_slot = rope && *rope ? rope : NULL,
        .scale = h->param_float(c, "scale", 0.0),
        .causal = (int)h->param_int(c, "causal", 1),
        .window = h->param_int(c, "window", 0),
        .softcap = h->param_float(c, "softcap", 0.0),
        .cache = cache,
    };
    if (a.num_heads <= 0 || a.num_kv_heads <= 0 || a.head_dim <= 0 || a.num_heads % a.num_kv_heads)
        return h->fail(c, "%s: num_heads %lld must be a positive multiple of num_kv_heads %lld (head_dim %lld)",
                       e->who, (long long)a.num_heads, (long long)a.num_kv_heads, (long long)a.head_dim);
    return put(e, pstr(e, "out", in), blk_self_attention(e, x, &a));
}

/* Attention without a KV cache (encoders, one-shot prefill) */
static int self_attn_prefill(rlx_ctx *c, const rlx_host_api *h)
{
    EM("self_attn_prefill");
    return attn_common(&e, NULL);
}

/* Attention over the layer's KV cache (states cache.{i}.k / .v, written at "pos"), the
 * same emission llama.decoder_layer uses: serves prefill and decode alike */
static int self_attn(rlx_ctx *c, const rlx_host_api *h)
{
    EM("self_attn");
    const char *cache = pstr(&e, "cache", NULL);
    if (!cache || !*cache) return h->fail(c, "self_attn: needs the parameter 'cache' (e.g. cache.{i})");
    return attn_common(&e, cache);
}

#define BLOCK(id, fn, sum, par)                                                              \
    const rlx_block id = {(uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), #fn, sum, par, fn}

BLOCK(blk_core_token_embed, token_embed, "embedding lookup: input_ids -> hidden",
      "weight: str (default model.embed_tokens.weight) | prefix: str; ids: slot; out: slot; scale: float (0 = none)");
BLOCK(blk_core_rms_norm, rms_norm, "RMSNorm of a slot",
      "weight: str | prefix: str (+weight); eps: float (config); add_one: int; in, out: slots");
BLOCK(blk_core_final_norm, final_norm, "RMSNorm with model.norm.weight by default",
      "weight: str (default model.norm.weight); eps: float; add_one: int; in, out: slots");
BLOCK(blk_core_layer_norm, layer_norm, "LayerNorm of a slot",
      "weight, bias: str | prefix: str; eps: float (config); in, out: slots");
BLOCK(blk_core_linear, linear, "x·Wᵀ + b of a slot",
      "weight, bias: str | prefix: str (+weight, optional +bias); in, out: slots");
BLOCK(blk_core_residual_save, residual_save, "copies the hidden slot's value into 'residual'",
      "in: slot (hidden); out: slot (residual)");
BLOCK(blk_core_residual_add, residual_add, "hidden = hidden + residual",
      "in: slot (hidden); residual: slot; out: slot");
BLOCK(blk_core_swiglu, swiglu, "gated SiLU MLP: down(silu(gate(x)) * up(x))",
      "prefix: str (holds gate_proj, up_proj, down_proj); intermediate_size: int; bias: int; in, out: slots");
BLOCK(blk_core_gelu_ffn, gelu_ffn, "GELU MLP: down(gelu(up(x)))",
      "up, down: str (weights); up_bias, down_bias: str; act: gelu|gelu_tanh; in, out: slots");
BLOCK(blk_core_lm_head, lm_head, "vocabulary projection to the output 'logits' (tied or not)",
      "weight: str (default lm_head.weight, else the tied embedding); softcap: float; output: str; in: slot");
BLOCK(blk_core_gather_last_token, gather_last_token, "keeps the last row of a slot",
      "in, out: slots");
BLOCK(blk_core_rope_tables, rope_tables, "rotary inverse frequencies (default, linear, llama3) as a constant",
      "theta, rope_type, factor, low_freq_factor, high_freq_factor, original_max_position_embeddings, "
      "head_dim, partial_rotary_factor (config); slot: str (rope.inv_freq)");
BLOCK(blk_core_self_attn_prefill, self_attn_prefill, "multi-head self-attention without a KV cache",
      "prefix: str (holds q_proj..o_proj); num_heads, num_kv_heads, head_dim, bias, qk_norm: int; "
      "rope: slot (empty: none); scale, softcap: float; causal, window: int; in, out: slots");
BLOCK(blk_core_self_attn, self_attn, "multi-head self-attention over the layer's KV cache (prefill and decode)",
      "prefix: str (holds q_proj..o_proj); cache: str (cache.{i}: states cache.{i}.k/.v); num_heads, "
      "num_kv_heads, head_dim, bias, qk_norm: int; rope: slot (empty: none); scale, softcap: float; "
      "causal, window: int; in, out: slots");
