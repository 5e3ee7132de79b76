/* rlx-blocks-gemma: the Gemma 2 / Gemma 3 decoder layer (gemma_layer.c). The embedding
 * scale and the final logit softcap are parameters of the core token_embed and lm_head. */
#include "rlx/plugin_util.h"

extern const rlx_block blk_gemma_decoder_layer;

static const rlx_block *const blocks[] = {&blk_gemma_decoder_layer};

RLX_BLOCKS_PLUGIN("blocks-gemma",
                  "Gemma 2 / Gemma 3 decoder layer over a preallocated KV cache",
                  blocks)
