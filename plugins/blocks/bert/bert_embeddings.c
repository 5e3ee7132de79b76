/* bert.embeddings: hidden = LayerNorm(word[input_ids] + position[positions] +
 * token_type[token_type_ids]), and the additive attention mask every layer adds to its
 * scores, as transformers builds it: (1 - attention_mask) · finfo(float32).min, the same
 * row for every query. A masked key then weighs exactly 0 after the softmax. */
#include "bert_blocks.h"
#include <float.h>
#include <stdlib.h>

/* table[ids] for table prefix+suffix of shape [rows, H] */
static int32_t lookup(const blk_em *e, const char *prefix, const char *suffix, int64_t rows,
                      int64_t hidden, const char *ids_slot)
{
    int32_t ids = blk_slot(e, ids_slot);
    int32_t table = ids < 0 ? -1 : blk_weight(e, prefix, suffix, rows, hidden, 0);
    return blk_op2(e, "rlx.embedding", table, ids);
}

/* [T] I32 attention_mask -> [T, T] F32 additive mask */
static int32_t additive_mask(const blk_em *e, const char *mask_slot)
{
    int32_t m = blk_slot(e, mask_slot);
    rlx_shape s;
    int32_t dt;
    if (m < 0 || e->h->value_info(e->c, m, &s, &dt) != 0 || s.ndim != 1) {
        if (m >= 0) e->h->fail(e->c, "%s: slot '%s' is not a [T] mask", e->who, mask_slot);
        return -1;
    }
    /* f32 whatever the compute dtype ("f32": 1): FLT_MAX is no 16-bit number */
    rlx_attr cast[] = {RLX_ATTR_I("dtype", RLX_F32), RLX_ATTR_I("f32", 1)};
    m = e->h->emit_op(e->c, "rlx.cast", &m, 1, cast, 2);
    /* (m - 1) · FLT_MAX = (1 - m) · finfo.min */
    rlx_attr sub1[] = {RLX_ATTR_F("value", -1.0), RLX_ATTR_I("f32", 1)},
             big[] = {RLX_ATTR_F("scale", (double)FLT_MAX), RLX_ATTR_I("f32", 1)};
    m = m < 0 ? -1 : e->h->emit_op(e->c, "rlx.add_scalar", &m, 1, sub1, 2);
    m = m < 0 ? -1 : e->h->emit_op(e->c, "rlx.scale", &m, 1, big, 2);
    if (m < 0) return -1;
    /* the same key row for every query: broadcast onto zeros [T, T] */
    int64_t T = s.dims[0];
    rlx_shape tt = blk_shape2(T, T);
    float *zeros = T > 0 ? calloc((size_t)(T * T), sizeof *zeros) : NULL;
    if (T > 0 && !zeros) {
        e->h->fail(e->c, "%s: out of memory for a [%lld, %lld] mask", e->who, (long long)T, (long long)T);
        return -1;
    }
    int32_t z = e->h->emit_const(e->c, RLX_F32, &tt, zeros);
    free(zeros);
    int32_t in[2] = {z, m};
    return z < 0 ? -1 : e->h->emit_op(e->c, "rlx.add", in, 2, cast + 1, 1);
}

static int embeddings(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "bert.embeddings"};
    const rlx_model_config *cfg = h->model_config(c);
    const char *p = h->param_str(c, "prefix", "embeddings.");
    int64_t H = cfg->hidden_size;
    if (H <= 0 || cfg->vocab_size <= 0 || cfg->max_position_embeddings <= 0 || cfg->type_vocab_size <= 0)
        return h->fail(c, "bert.embeddings: config.json: hidden_size, vocab_size, max_position_embeddings "
                       "and type_vocab_size must be positive");
    int32_t x = lookup(&e, p, "word_embeddings.weight", cfg->vocab_size, H, h->param_str(c, "ids", "input_ids"));
    int32_t ps = lookup(&e, p, "position_embeddings.weight", cfg->max_position_embeddings, H,
                        h->param_str(c, "positions", "positions"));
    int32_t tt = lookup(&e, p, "token_type_embeddings.weight", cfg->type_vocab_size, H,
                        h->param_str(c, "token_type_ids", "token_type_ids"));
    /* HF order: (word + token_type) + position */
    x = blk_op2(&e, "rlx.add", blk_op2(&e, "rlx.add", x, tt), ps);
    char w[BLK_NAME_MAX], b[BLK_NAME_MAX];
    if (x < 0 || blk_join(&e, w, p, "LayerNorm.weight") < 0 || blk_join(&e, b, p, "LayerNorm.bias") < 0)
        return RLX_ERR_INVALID;
    x = blk_layer_norm(&e, x, w, b, h->param_float(c, "eps", cfg->norm_eps));
    int32_t mask = additive_mask(&e, h->param_str(c, "attention_mask", "attention_mask"));
    if (x < 0 || mask < 0 || h->slot_set(c, h->param_str(c, "mask", BERT_MASK_SLOT), mask) != 0)
        return RLX_ERR_INVALID;
    return h->slot_set(c, h->param_str(c, "out", "hidden"), x) == 0 ? 0 : RLX_ERR_INVALID;
}

const rlx_block blk_bert_embeddings = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), "bert.embeddings",
    "BERT embeddings (word + token type + position, LayerNorm) and the additive attention mask",
    "prefix: str (embeddings.); eps: float (config); ids, positions, token_type_ids, attention_mask: "
    "slots; out: slot (hidden); mask: slot (attention.mask)",
    embeddings};
