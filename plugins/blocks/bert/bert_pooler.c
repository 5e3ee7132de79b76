/* bert.pooler: the outputs of BertModel. last_hidden_state = hidden;
 * pooler_output = tanh(dense(hidden[0])), the first token's row, as a [H] vector. */
#include "bert_blocks.h"

static int pooler(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "bert.pooler"};
    const char *p = h->param_str(c, "prefix", "pooler.");
    int32_t x = blk_slot(&e, h->param_str(c, "in", "hidden"));
    if (x < 0 || h->emit_output(c, h->param_str(c, "hidden_output", "last_hidden_state"), x) != 0)
        return RLX_ERR_INVALID;
    int64_t H;
    char w[BLK_NAME_MAX], b[BLK_NAME_MAX];
    if (blk_last_dim(&e, x, &H, NULL) < 0 || blk_join(&e, w, p, "dense.weight") < 0 ||
        blk_join(&e, b, p, "dense.bias") < 0)
        return RLX_ERR_INVALID;
    rlx_attr first[] = {RLX_ATTR_I("axis", 0), RLX_ATTR_I("start", 0), RLX_ATTR_I("end", 1)};
    int32_t y = h->emit_op(c, "rlx.slice", &x, 1, first, 3);
    y = y < 0 ? -1 : blk_op1(&e, "rlx.tanh", blk_linear(&e, y, w, b, H, 0));
    int64_t flat[1] = {H};
    y = y < 0 ? -1 : blk_reshape(&e, y, 1, flat);
    if (y < 0) return RLX_ERR_INVALID;
    return h->emit_output(c, h->param_str(c, "output", "pooler_output"), y) == 0 ? 0 : RLX_ERR_INVALID;
}

const rlx_block blk_bert_pooler = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), "bert.pooler",
    "BERT outputs: last_hidden_state and pooler_output = tanh(dense(first token))",
    "prefix: str (pooler.); in: slot (hidden); hidden_output: str (last_hidden_state); "
    "output: str (pooler_output)",
    pooler};
