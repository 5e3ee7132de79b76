/* rlx-blocks-llama: LLaMA-family decoder layers. */
#include "rlx/plugin_util.h"
#include "llama_blocks.h"

static const rlx_block *const blocks[] = {
    &blk_llama_decoder_layer,
    &blk_llama_decoder_layer_composed,
    &blk_llama_kv_tap,
};

RLX_BLOCKS_PLUGIN("blocks-llama",
                  "LLaMA decoder layers (fused and composed) over a preallocated KV cache",
                  blocks)
