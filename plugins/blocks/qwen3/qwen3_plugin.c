/* rlx-blocks-qwen3: the Qwen3 decoder layer (qwen3_layer.c). */
#include "rlx/plugin_util.h"

extern const rlx_block blk_qwen3_decoder_layer;

static const rlx_block *const blocks[] = {&blk_qwen3_decoder_layer};

RLX_BLOCKS_PLUGIN("blocks-qwen3",
                  "Qwen3 decoder layer (q/k norms) over a preallocated KV cache",
                  blocks)
