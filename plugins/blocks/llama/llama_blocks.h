/* The blocks of rlx-blocks-llama (llama_layer.c), listed by llama_plugin.c. */
#ifndef RLX_BLOCKS_LLAMA_BLOCKS_H
#define RLX_BLOCKS_LLAMA_BLOCKS_H
#include "../core/core_emit.h"

extern const rlx_block blk_llama_decoder_layer, blk_llama_decoder_layer_composed,
    blk_llama_kv_tap;
#endif
