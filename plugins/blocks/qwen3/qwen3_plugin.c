/* rlx-blocks-qwen3: the Qwen3 decoder layer (qwen3_layer.c). */
#include "rlx/plugin.h"

extern const rlx_block blk_qwen3_decoder_layer;

static const rlx_block *const blocks[] = {&blk_qwen3_decoder_layer};

static const rlx_plugin_desc desc = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_plugin_desc, n_archs),
    .abi_major = RLX_ABI_MAJOR,
    .abi_minor = RLX_ABI_MINOR,
    .name = "blocks-qwen3",
    .version = "0.1.0",
    .summary = "Qwen3 decoder layer (q/k norms) over a preallocated KV cache",
    .blocks = blocks,
    .n_blocks = sizeof blocks / sizeof blocks[0],
};

RLX_EXPORT const rlx_plugin_desc *rlx_plugin_init(const rlx_host_api *host);

RLX_EXPORT const rlx_plugin_desc *rlx_plugin_init(const rlx_host_api *host)
{
    if (!host || host->abi_major != RLX_ABI_MAJOR ||
        host->struct_size < RLX_STRUCT_SIZE(rlx_host_api, flow_repeat_end))
        return NULL;
    return &desc;
}
