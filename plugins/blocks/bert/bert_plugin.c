/* rlx-blocks-bert: BERT (BertModel) embeddings, encoder layer and pooler. */
#include "rlx/plugin_util.h"
#include "bert_blocks.h"

static const rlx_block *const blocks[] = {
    &blk_bert_embeddings,
    &blk_bert_encoder_layer,
    &blk_bert_pooler,
};

RLX_BLOCKS_PLUGIN("blocks-bert",
                  "BERT encoder blocks: embeddings + additive mask, post-norm layer, pooler",
                  blocks)
