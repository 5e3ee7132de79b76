/* bert.encoder_layer: a post-norm transformer layer with the HF BertLayer names,
 *   a = LayerNorm(x + dense(attention(query(x), key(x), value(x)) + mask))
 *   hidden = LayerNorm(a + output.dense(gelu(intermediate.dense(a))))
 * Bidirectional: no causal mask, no rope, no KV cache, no pos (all keys valid). */
#include "bert_blocks.h"
#include <math.h>

typedef struct bert_layer {
    const char *prefix;
    int64_t heads, head_dim, hidden;
    double eps;
} bert_layer;

/* prefix + name, e.g. "encoder.layer.0." + "attention.self.query.weight" */
static int name(const blk_em *e, char *out, const bert_layer *L, const char *suffix)
{
    return blk_join(e, out, L->prefix, suffix);
}

/* x·Wᵀ + b of the linear prefix+base (".weight" / ".bias"), n outputs (< 0: any) */
static int32_t dense(const blk_em *e, const bert_layer *L, int32_t x, const char *base, int64_t n)
{
    char w[BLK_NAME_MAX], b[BLK_NAME_MAX], tmp[BLK_NAME_MAX];
    if (x < 0 || blk_join(e, tmp, base, ".weight") < 0 || name(e, w, L, tmp) < 0 ||
        blk_join(e, tmp, base, ".bias") < 0 || name(e, b, L, tmp) < 0)
        return -1;
    return blk_linear(e, x, w, b, n, 0);
}

/* LayerNorm(a + b) with the norm prefix+base */
static int32_t add_norm(const blk_em *e, const bert_layer *L, int32_t a, int32_t b, const char *base)
{
    char w[BLK_NAME_MAX], bb[BLK_NAME_MAX], tmp[BLK_NAME_MAX];
    int32_t s = blk_op2(e, "rlx.add", a, b);
    if (s < 0 || blk_join(e, tmp, base, ".weight") < 0 || name(e, w, L, tmp) < 0 ||
        blk_join(e, tmp, base, ".bias") < 0 || name(e, bb, L, tmp) < 0)
        return -1;
    return blk_layer_norm(e, s, w, bb, L->eps);
}

static int32_t heads(const blk_em *e, const bert_layer *L, int32_t x, const char *base)
{
    int64_t dims[3] = {-1, L->heads, L->head_dim};
    int32_t y = dense(e, L, x, base, L->heads * L->head_dim);
    return y < 0 ? -1 : blk_reshape(e, y, 3, dims);
}

static int32_t self_attention(const blk_em *e, const bert_layer *L, int32_t x, int32_t mask)
{
    /* no pos (-1): every key is valid; the mask removes the padding */
    int32_t in[5] = {heads(e, L, x, "attention.self.query"), heads(e, L, x, "attention.self.key"),
                     heads(e, L, x, "attention.self.value"), -1, mask};
    if (in[0] < 0 || in[1] < 0 || in[2] < 0) return -1;
    rlx_attr at[] = {RLX_ATTR_F("scale", 1.0 / sqrt((double)L->head_dim)), RLX_ATTR_I("causal", 0)};
    int32_t o = e->h->emit_op(e->c, "rlx.attention", in, 5, at, 2);
    int64_t flat[2] = {-1, L->heads * L->head_dim};
    o = o < 0 ? -1 : blk_reshape(e, o, 2, flat);
    return dense(e, L, o, "attention.output.dense", L->hidden);
}

static int encoder_layer(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "bert.encoder_layer"};
    const rlx_model_config *cfg = h->model_config(c);
    bert_layer L = {
        .prefix = h->param_str(c, "prefix", NULL),
        .heads = cfg->num_heads,
        .hidden = cfg->hidden_size,
        .eps = h->param_float(c, "eps", cfg->norm_eps),
    };
    if (!L.prefix) return h->fail(c, "bert.encoder_layer: needs the parameter 'prefix' (e.g. encoder.layer.{i}.)");
    L.head_dim = cfg->head_dim > 0 ? cfg->head_dim : L.heads > 0 ? L.hidden / L.heads : 0;
    if (L.heads <= 0 || L.hidden <= 0 || L.head_dim <= 0 || L.heads * L.head_dim != L.hidden)
        return h->fail(c, "bert.encoder_layer: config.json: hidden_size %lld is not a multiple of "
                       "num_attention_heads %lld", (long long)L.hidden, (long long)L.heads);
    const char *act = h->param_str(c, "act", cfg->hidden_act[0] ? cfg->hidden_act : "gelu");
    int32_t x = blk_slot(&e, h->param_str(c, "in", "hidden"));
    int32_t mask = blk_slot(&e, h->param_str(c, "mask", BERT_MASK_SLOT));
    if (x < 0 || mask < 0) return RLX_ERR_INVALID;
    int32_t a = add_norm(&e, &L, self_attention(&e, &L, x, mask), x, "attention.output.LayerNorm");
    char up[BLK_NAME_MAX], up_b[BLK_NAME_MAX], down[BLK_NAME_MAX], down_b[BLK_NAME_MAX];
    if (a < 0 || name(&e, up, &L, "intermediate.dense.weight") < 0 ||
        name(&e, up_b, &L, "intermediate.dense.bias") < 0 || name(&e, down, &L, "output.dense.weight") < 0 ||
        name(&e, down_b, &L, "output.dense.bias") < 0)
        return RLX_ERR_INVALID;
    int32_t f = blk_gelu_ffn(&e, a, up, up_b, down, down_b, act);
    int32_t y = add_norm(&e, &L, f, a, "output.LayerNorm");
    if (y < 0) return RLX_ERR_INVALID;
    return h->slot_set(c, h->param_str(c, "out", "hidden"), y) == 0 ? 0 : RLX_ERR_INVALID;
}

const rlx_block blk_bert_encoder_layer = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), "bert.encoder_layer",
    "BERT encoder layer: post-LayerNorm bidirectional attention (with biases) + GELU FFN",
    "prefix: str (encoder.layer.{i}.); eps: float (config); act: gelu|gelu_tanh (config hidden_act); "
    "mask: slot (attention.mask); in, out: slots (hidden)",
    encoder_layer};
