/* Emitters shared by the core blocks and the family layers composed from them. */
#include "core_emit.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

rlx_shape blk_shape1(int64_t a)
{
    rlx_shape s = {1, {a}};
    return s;
}

rlx_shape blk_shape2(int64_t a, int64_t b)
{
    rlx_shape s = {2, {a, b}};
    return s;
}

rlx_shape blk_shape3(int64_t a, int64_t b, int64_t c)
{
    rlx_shape s = {3, {a, b, c}};
    return s;
}

int blk_direct(const blk_em *e)
{
    const char *p = e->h->fusion_policy ? e->h->fusion_policy(e->c) : NULL;
    return p && strcmp(p, "direct") == 0;
}

int blk_heads(const blk_em *e, int64_t *heads, int64_t *kv, int64_t *head_dim)
{
    const rlx_model_config *cfg = e->h->model_config(e->c);
    *heads = cfg->num_heads;
    *kv = cfg->num_kv_heads > 0 ? cfg->num_kv_heads : cfg->num_heads;
    *head_dim = cfg->head_dim > 0 ? cfg->head_dim : cfg->num_heads > 0 ? cfg->hidden_size / cfg->num_heads : 0;
    if (*heads <= 0 || *head_dim <= 0 || *kv <= 0 || *heads % *kv)
        return e->h->fail(e->c, "%s: config.json: num_attention_heads %lld is not a multiple of "
                                "num_key_value_heads %lld", e->who, (long long)*heads, (long long)*kv);
    return 0;
}

int32_t blk_slot(const blk_em *e, const char *slot)
{
    int32_t v = e->h->slot_get(e->c, slot);
    if (v < 0) e->h->fail(e->c, "%s: slot '%s' is not set by an earlier stage", e->who, slot);
    return v;
}

int blk_join(const blk_em *e, char *out, const char *prefix, const char *suffix)
{
    int n = snprintf(out, BLK_NAME_MAX, "%s%s", prefix ? prefix : "", suffix ? suffix : "");
    if (n < 0 || n >= BLK_NAME_MAX) {
        e->h->fail(e->c, "%s: tensor name '%s%s' is too long", e->who, prefix ? prefix : "",
                   suffix ? suffix : "");
        return -1;
    }
    return 0;
}

int32_t blk_weight(const blk_em *e, const char *prefix, const char *suffix, int64_t a, int64_t b,
                   int optional)
{
    char name[BLK_NAME_MAX];
    if (blk_join(e, name, prefix, suffix) < 0) return -1;
    rlx_shape s = b < 0 ? blk_shape1(a) : blk_shape2(a, b);
    return optional ? e->h->emit_weight_opt(e->c, name, &s) : e->h->emit_weight(e->c, name, &s);
}

int32_t blk_reshape(const blk_em *e, int32_t x, uint32_t n, const int64_t *dims)
{
    rlx_attr at[] = {RLX_ATTR_V("shape", dims, n)};
    return e->h->emit_op(e->c, "rlx.reshape", &x, 1, at, 1);
}

int32_t blk_op1(const blk_em *e, const char *op, int32_t a)
{
    if (a < 0) return -1;
    return e->h->emit_op(e->c, op, &a, 1, NULL, 0);
}

int32_t blk_op2(const blk_em *e, const char *op, int32_t a, int32_t b)
{
    if (a < 0 || b < 0) return -1;
    int32_t in[2] = {a, b};
    return e->h->emit_op(e->c, op, in, 2, NULL, 0);
}

int blk_last_dim(const blk_em *e, int32_t v, int64_t *dim, int32_t *dtype)
{
    rlx_shape s;
    int32_t dt = 0;
    if (v < 0 || e->h->value_info(e->c, v, &s, &dt) != 0 || s.ndim == 0) {
        e->h->fail(e->c, "%s: cannot read the shape of value %d", e->who, (int)v);
        return -1;
    }
    if (dim) *dim = s.dims[s.ndim - 1];
    if (dtype) *dtype = dt;
    return 0;
}

int32_t blk_embed(const blk_em *e, const char *weight, int32_t ids, double scale)
{
    const rlx_model_config *cfg = e->h->model_config(e->c);
    rlx_shape s = blk_shape2(cfg->vocab_size, cfg->hidden_size);
    int32_t table = e->h->emit_weight(e->c, weight, &s);
    int32_t x = blk_op2(e, "rlx.embedding", table, ids);
    if (x >= 0 && scale != 0.0 && scale != 1.0) {
        rlx_attr at[] = {RLX_ATTR_F("scale", scale)};
        x = e->h->emit_op(e->c, "rlx.scale", &x, 1, at, 1);
    }
    return x;
}

int32_t blk_rms_norm(const blk_em *e, int32_t x, const char *weight, double eps, int add_one)
{
    int64_t h;
    if (blk_last_dim(e, x, &h, NULL) < 0) return -1;
    int32_t w = blk_weight(e, "", weight, h, -1, 0);
    if (w < 0) return -1;
    int32_t in[2] = {x, w};
    rlx_attr at[] = {RLX_ATTR_F("eps", eps), RLX_ATTR_I("add_one", add_one)};
    return e->h->emit_op(e->c, "rlx.rms_norm", in, 2, at, 2);
}

int blk_add_rms_norm(const blk_em *e, int32_t a, int32_t b, const char *weight, double eps,
                     int add_one, int32_t *sum, int32_t *normed)
{
    if (!blk_direct(e)) {
        *sum = blk_op2(e, "rlx.add", a, b);
        if (*sum < 0) return -1;
        *normed = blk_rms_norm(e, *sum, weight, eps, add_one);
        return *normed < 0 ? -1 : 0;
    }
    int64_t h;
    if (blk_last_dim(e, a, &h, NULL) < 0) return -1;
    int32_t w = blk_weight(e, "", weight, h, -1, 0);
    if (w < 0 || b < 0) return -1;
    int32_t in[3] = {a, b, w}, out[2];
    rlx_attr at[] = {RLX_ATTR_F("eps", eps), RLX_ATTR_I("add_one", add_one)};
    if (e->h->emit_op_n(e->c, "rlx.add_rms_norm", in, 3, at, 2, out, 2) != 0) return -1;
    *sum = out[0];
    *normed = out[1];
    return 0;
}

int32_t blk_layer_norm(const blk_em *e, int32_t x, const char *weight, const char *bias,
                       double eps)
{
    int64_t h;
    if (blk_last_dim(e, x, &h, NULL) < 0) return -1;
    int32_t w = blk_weight(e, "", weight, h, -1, 0);
    int32_t b = blk_weight(e, "", bias, h, -1, 0);
    if (w < 0 || b < 0) return -1;
    int32_t in[3] = {x, w, b};
    rlx_attr at[] = {RLX_ATTR_F("eps", eps)};
    return e->h->emit_op(e->c, "rlx.layer_norm", in, 3, at, 1);
}

int32_t blk_linear(const blk_em *e, int32_t x, const char *weight, const char *bias,
                   int64_t out_features, int optional_bias)
{
    return blk_linear_tp(e, x, weight, bias, out_features, optional_bias, NULL, 0);
}

int32_t blk_linear_tp(const blk_em *e, int32_t x, const char *weight, const char *bias,
                      int64_t out_features, int optional_bias, const char *tp, int64_t unit)
{
    int64_t k;
    if (blk_last_dim(e, x, &k, NULL) < 0) return -1;
    int32_t in[3] = {x, -1, -1};
    uint32_t n = 2;
    if (out_features >= 0) {
        in[1] = blk_weight(e, "", weight, out_features, k, 0);
    } else {
        /* shape known only to the checkpoint: check the input dim after the fact */
        in[1] = e->h->emit_weight(e->c, weight, NULL);
        rlx_shape s;
        int32_t dt;
        if (in[1] >= 0 && (e->h->value_info(e->c, in[1], &s, &dt) != 0 || s.ndim != 2 ||
                           s.dims[1] != k)) {
            e->h->fail(e->c, "%s: tensor '%s' is not a [N, %lld] matrix", e->who, weight,
                       (long long)k);
            return -1;
        }
        if (in[1] >= 0) out_features = s.dims[0];
    }
    if (in[1] < 0) return -1;
    if (bias && *bias) {
        in[2] = blk_weight(e, "", bias, out_features, -1, optional_bias);
        if (in[2] >= 0) n = 3;
        else if (!optional_bias) return -1;
    }
    rlx_attr at[2] = {RLX_ATTR_S("tp", tp), RLX_ATTR_I("tp_unit", unit > 0 ? unit : 1)};
    return e->h->emit_op(e->c, "rlx.matmul", in, n, tp ? at : NULL, tp ? 2 : 0);
}

/* down(act(g) * u), the tail every gated MLP shares */
static int32_t gated_tail(const blk_em *e, int32_t g, int32_t u, const char *down, const char *down_bias,
                          int64_t h, const char *act_mul_op, const char *act_op)
{
    int32_t a;
    if (blk_direct(e)) a = blk_op2(e, act_mul_op, g, u);
    else a = blk_op2(e, "rlx.mul", blk_op1(e, act_op, g), u);
    if (a < 0) return -1;
    return blk_linear_tp(e, a, down, down_bias, h, 0, "row", 1);
}

int32_t blk_gated_mlp(const blk_em *e, int32_t x, const char *prefix, int64_t intermediate,
                      int bias, const char *act_mul_op, const char *act_op)
{
    char wg[BLK_NAME_MAX], wu[BLK_NAME_MAX], wd[BLK_NAME_MAX];
    char bg[BLK_NAME_MAX], bu[BLK_NAME_MAX], bd[BLK_NAME_MAX];
    if (blk_join(e, wg, prefix, "gate_proj.weight") < 0 ||
        blk_join(e, wu, prefix, "up_proj.weight") < 0 ||
        blk_join(e, wd, prefix, "down_proj.weight") < 0 ||
        blk_join(e, bg, prefix, "gate_proj.bias") < 0 ||
        blk_join(e, bu, prefix, "up_proj.bias") < 0 || blk_join(e, bd, prefix, "down_proj.bias") < 0)
        return -1;
    int64_t h;
    if (blk_last_dim(e, x, &h, NULL) < 0) return -1;
    int32_t g = blk_linear_tp(e, x, wg, bias ? bg : NULL, intermediate, 0, "col", 1);
    int32_t u = blk_linear_tp(e, x, wu, bias ? bu : NULL, intermediate, 0, "col", 1);
    return gated_tail(e, g, u, wd, bias ? bd : NULL, h, act_mul_op, act_op);
}

int32_t blk_slice_last(const blk_em *e, int32_t x, int64_t start, int64_t end)
{
    rlx_shape s;
    int32_t dt;
    if (x < 0 || e->h->value_info(e->c, x, &s, &dt) != 0 || s.ndim == 0) return -1;
    rlx_attr at[] = {RLX_ATTR_I("axis", s.ndim - 1), RLX_ATTR_I("start", start), RLX_ATTR_I("end", end)};
    return e->h->emit_op(e->c, "rlx.slice", &x, 1, at, 3);
}

int32_t blk_fused_gated_mlp(const blk_em *e, int32_t x, const char *prefix, int64_t intermediate,
                            const char *act_mul_op, const char *act_op)
{
    char wgu[BLK_NAME_MAX], wd[BLK_NAME_MAX];
    if (blk_join(e, wgu, prefix, "gate_up_proj.weight") < 0 || blk_join(e, wd, prefix, "down_proj.weight") < 0)
        return -1;
    int64_t h;
    if (blk_last_dim(e, x, &h, NULL) < 0) return -1;
    int32_t gu = blk_linear(e, x, wgu, NULL, 2 * intermediate, 0);
    int32_t g = blk_slice_last(e, gu, 0, intermediate);
    int32_t u = blk_slice_last(e, gu, intermediate, 2 * intermediate);
    return gated_tail(e, g, u, wd, NULL, h, act_mul_op, act_op);
}

int32_t blk_swiglu_mlp(const blk_em *e, int32_t x, const char *prefix, int64_t intermediate,
                       int bias)
{
    return blk_gated_mlp(e, x, prefix, intermediate, bias, "rlx.swiglu", "rlx.silu");
}

int32_t blk_gelu_ffn(const blk_em *e, int32_t x, const char *up, const char *up_bias,
                     const char *down, const char *down_bias, const char *act)
{
    const char *op;
    if (!act || strcmp(act, "gelu") == 0) op = "rlx.gelu";
    else if (strcmp(act, "gelu_tanh") == 0 || strcmp(act, "gelu_pytorch_tanh") == 0)
        op = "rlx.gelu_tanh";
    else {
        e->h->fail(e->c, "%s: unsupported activation '%s' (gelu, gelu_tanh)", e->who, act);
        return -1;
    }
    int64_t h;
    if (blk_last_dim(e, x, &h, NULL) < 0) return -1;
    int32_t u = blk_linear(e, x, up, up_bias, -1, 1);
    int32_t a = blk_op1(e, op, u);
    if (a < 0) return -1;
    return blk_linear(e, a, down, down_bias, h, 1);
}

/* x·Wᵀ of prefix+proj ("q_proj.weight"), with its bias when the attention has biases */
static int32_t attn_proj(const blk_em *e, int32_t x, const blk_attn_args *a, const char *proj, int64_t out,
                         const char *tp)
{
    char w[BLK_NAME_MAX], b[BLK_NAME_MAX];
    if (blk_join(e, w, a->prefix, proj) < 0) return -1;
    snprintf(b, sizeof b, "%.*s.bias", (int)(strlen(w) - strlen(".weight")), w);
    return blk_linear_tp(e, x, w, a->bias ? b : NULL, out, 0, tp, a->head_dim);
}

/* q, k or v: columns [lo, hi) of the fused projection qkv, else its own projection */
static int32_t attn_part(const blk_em *e, int32_t x, const blk_attn_args *a, int32_t qkv, const char *proj,
                         int64_t lo, int64_t hi, const char *tp)
{
    return a->qkv ? blk_slice_last(e, qkv, lo, hi) : attn_proj(e, x, a, proj, hi - lo, tp);
}

/* a projection [T, heads·d] reshaped to heads, optionally normed, then rotated (the
 * first rot dims; 0: all) */
static int32_t attn_heads(const blk_em *e, int32_t y, const blk_attn_args *a, const char *norm,
                          int64_t heads, int rope, int64_t rot, int32_t positions, int32_t inv_freq)
{
    char n[BLK_NAME_MAX];
    int64_t dims[3] = {-1, heads, a->head_dim};
    y = y < 0 ? -1 : blk_reshape(e, y, 3, dims);
    if (y >= 0 && norm) {
        if (blk_join(e, n, a->prefix, norm) < 0) return -1;
        y = blk_rms_norm(e, y, n, a->qk_norm_eps, a->qk_norm_add_one);
    }
    if (y >= 0 && rope) {
        int32_t in[3] = {y, positions, inv_freq};
        rlx_attr at[] = {RLX_ATTR_I("rot_dim", rot)};
        y = e->h->emit_op(e->c, "rlx.rope", in, 3, at, 1);
    }
    return y;
}

/* K/V written into the layer's cache states; the attention reads the written cache,
 * which is also left in the slot of the state's name (llama.kv_tap exports it) */
static int32_t cache_through(const blk_em *e, const char *cache, const char *kind, int32_t v,
                             int32_t pos, int64_t nkv, int64_t d)
{
    char name[BLK_NAME_MAX];
    if (blk_join(e, name, cache, kind) < 0) return -1;
    int32_t dt;
    if (blk_last_dim(e, v, NULL, &dt) < 0) return -1;
    int64_t ctx_len = e->h->context_length(e->c);
    if (ctx_len <= 0) {
        e->h->fail(e->c, "%s: the host gave no KV cache length", e->who);
        return -1;
    }
    rlx_shape s = blk_shape3(ctx_len, nkv, d);
    int32_t st = e->h->emit_state(e->c, name, dt, &s);
    if (st < 0) return -1;
    int32_t in[3] = {st, v, pos};
    int32_t w = e->h->emit_op(e->c, "rlx.cache_write", in, 3, NULL, 0);
    if (w >= 0 && e->h->slot_set(e->c, name, w) != 0) return -1;
    return w;
}

int32_t blk_self_attention(const blk_em *e, int32_t x, const blk_attn_args *a)
{
    int rope = a->inv_freq_slot != NULL;
    int32_t positions = -1, inv_freq = -1, pos = e->h->slot_get(e->c, "pos");
    if (rope) {
        positions = blk_slot(e, "positions");
        inv_freq = blk_slot(e, a->inv_freq_slot);
        if (positions < 0 || inv_freq < 0) return -1;
    }
    if (a->cache && pos < 0) {
        e->h->fail(e->c, "%s: a KV cache needs the flow input 'pos'", e->who);
        return -1;
    }
    /* a table of rot/2 frequencies rotates the first rot dims (partial rotary) */
    int64_t rot = 0;
    if (rope) {
        int64_t half;
        if (blk_last_dim(e, inv_freq, &half, NULL) < 0) return -1;
        if (2 * half > a->head_dim) {
            e->h->fail(e->c, "%s: the rope table has %lld frequencies, more than head_dim %lld / 2", e->who,
                       (long long)half, (long long)a->head_dim);
            return -1;
        }
        rot = 2 * half == a->head_dim ? 0 : 2 * half;
    }
    int64_t nq = a->num_heads * a->head_dim, nkv = a->num_kv_heads * a->head_dim;
    /* tensor parallelism: q over heads, k/v over kv heads (replicated when fewer than
     * ranks); a fused qkv projection stays whole (the partition leaves o_proj whole too) */
    int32_t qkv = a->qkv ? attn_proj(e, x, a, a->qkv, nq + 2 * nkv, NULL) : -1;
    if (a->qkv && qkv < 0) return -1;
    int32_t q = attn_heads(e, attn_part(e, x, a, qkv, "q_proj.weight", 0, nq, "col"), a,
                           a->qk_norm ? "q_norm.weight" : NULL, a->num_heads, rope, rot, positions, inv_freq);
    int32_t k = attn_heads(e, attn_part(e, x, a, qkv, "k_proj.weight", nq, nq + nkv, "col_rep"), a,
                           a->qk_norm ? "k_norm.weight" : NULL, a->num_kv_heads, rope, rot, positions, inv_freq);
    int32_t v = attn_heads(e, attn_part(e, x, a, qkv, "v_proj.weight", nq + nkv, nq + 2 * nkv, "col_rep"), a, NULL,
                           a->num_kv_heads, 0, 0, -1, -1);
    if (q < 0 || k < 0 || v < 0) return -1;
    if (a->cache) {
        k = cache_through(e, a->cache, ".k", k, pos, a->num_kv_heads, a->head_dim);
        v = cache_through(e, a->cache, ".v", v, pos, a->num_kv_heads, a->head_dim);
        if (k < 0 || v < 0) return -1;
    }
    int32_t in[4] = {q, k, v, pos};
    uint32_t n_in = pos >= 0 ? 4 : 3;
    rlx_attr at[4];
    uint32_t n_at = 0;
    double scale = a->scale > 0 ? a->scale : 1.0 / sqrt((double)a->head_dim);
    at[n_at++] = (rlx_attr)RLX_ATTR_F("scale", scale);
    at[n_at++] = (rlx_attr)RLX_ATTR_I("causal", a->causal);
    if (a->window > 0) at[n_at++] = (rlx_attr)RLX_ATTR_I("window", a->window);
    if (a->softcap > 0) at[n_at++] = (rlx_attr)RLX_ATTR_F("softcap", a->softcap);
    int32_t o = e->h->emit_op(e->c, "rlx.attention", in, n_in, at, n_at);
    if (o < 0) return -1;
    int64_t flat[2] = {-1, a->num_heads * a->head_dim};
    o = blk_reshape(e, o, 2, flat);
    char wo[BLK_NAME_MAX], bo[BLK_NAME_MAX];
    if (o < 0 || blk_join(e, wo, a->prefix, "o_proj.weight") < 0 ||
        blk_join(e, bo, a->prefix, "o_proj.bias") < 0)
        return -1;
    /* HF llama gives o_proj the same bias flag as q/k/v */
    return blk_linear_tp(e, o, wo, a->bias ? bo : NULL, a->hidden, 0, "row", 1);
}

int blk_prenorm_layer(const blk_em *e, const blk_prenorm_args *L)
{
    int32_t x = blk_slot(e, "hidden");
    if (x < 0) return RLX_ERR_INVALID;
    int32_t n1 = blk_rms_norm(e, x, L->in_norm, L->eps, 0);
    int32_t a = n1 < 0 ? -1 : blk_self_attention(e, n1, &L->attn);
    int32_t s, n2;
    if (a < 0 || blk_add_rms_norm(e, x, a, L->post_norm, L->eps, 0, &s, &n2) != 0) return RLX_ERR_INVALID;
    int32_t m = L->fused_gate_up ? blk_fused_gated_mlp(e, n2, L->mlp, L->intermediate, "rlx.swiglu", "rlx.silu")
                                 : blk_swiglu_mlp(e, n2, L->mlp, L->intermediate, L->mlp_bias);
    int32_t out = blk_op2(e, "rlx.add", s, m);
    if (out < 0) return RLX_ERR_INVALID;
    return e->h->slot_set(e->c, "hidden", out) == 0 ? 0 : RLX_ERR_INVALID;
}

int blk_lm_head(const blk_em *e, int32_t x, int32_t w, double cap, const char *out_name)
{
    /* vocab-parallel under tensor parallelism: each rank a slice of rows, then gathered */
    int32_t in[2] = {x, w};
    rlx_attr hint[] = {RLX_ATTR_S("tp", "vocab"), RLX_ATTR_I("tp_unit", 1)};
    int32_t y = x < 0 || w < 0 ? -1 : e->h->emit_op(e->c, "rlx.matmul", in, 2, hint, 2);
    if (y >= 0 && cap > 0) {
        rlx_attr at[] = {RLX_ATTR_F("cap", cap)};
        y = e->h->emit_op(e->c, "rlx.softcap", &y, 1, at, 1);
    }
    if (y < 0) return -1;
    return e->h->emit_output(e->c, out_name, y);
}

int blk_rope_inv_freq(const blk_rope_args *a, double *out, char *err, size_t err_len)
{
    if (a->dim <= 0 || a->dim % 2 || a->theta <= 0) {
        snprintf(err, err_len, "rope needs an even positive dimension and theta > 0 (dim %lld, theta %g)",
                 (long long)a->dim, a->theta);
        return -1;
    }
    int64_t half = a->dim / 2;
    for (int64_t i = 0; i < half; i++)
        out[i] = 1.0 / pow(a->theta, (double)(2 * i) / (double)a->dim);
    const char *type = a->rope_type && *a->rope_type ? a->rope_type : "default";
    if (strcmp(type, "default") == 0) return 0;
    if (strcmp(type, "linear") == 0) {
        if (a->factor <= 0) {
            snprintf(err, err_len, "rope_type linear needs factor > 0");
            return -1;
        }
        for (int64_t i = 0; i < half; i++) out[i] /= a->factor;
        return 0;
    }
    if (strcmp(type, "llama3") == 0) {
        /* transformers' _compute_llama3_parameters: long wavelengths scaled by 1/factor,
         * short ones kept, the band between smoothly interpolated */
        double f = a->factor, lo = a->low_freq_factor, hi = a->high_freq_factor;
        double old = (double)a->original_max_position;
        if (f <= 0 || lo <= 0 || hi <= lo || old <= 0) {
            snprintf(err, err_len,
                     "rope_type llama3 needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
                     "original_max_position_embeddings > 0");
            return -1;
        }
        double low_wavelen = old / lo, high_wavelen = old / hi;
        for (int64_t i = 0; i < half; i++) {
            double wavelen = 2.0 * M_PI / out[i];
            double scaled = wavelen > low_wavelen ? out[i] / f : out[i];
            int medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
            if (medium) {
                double smooth = (old / wavelen - lo) / (hi - lo);
                scaled = (1.0 - smooth) * scaled / f + smooth * scaled;
            }
            out[i] = scaled;
        }
        return 0;
    }
    snprintf(err, err_len, "unsupported rope_type '%s' (default, linear, llama3)", type);
    return -1;
}
