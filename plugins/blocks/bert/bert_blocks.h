/* The blocks of rlx-blocks-bert, listed by bert_plugin.c. They share the slots
 * "hidden" [T,H] and "attention.mask" [T,T] F32 (additive, from attention_mask). */
#ifndef RLX_BLOCKS_BERT_BLOCKS_H
#define RLX_BLOCKS_BERT_BLOCKS_H
#include "../core/core_emit.h"

#define BERT_MASK_SLOT "attention.mask"

extern const rlx_block blk_bert_embeddings, blk_bert_encoder_layer, blk_bert_pooler;
#endif
