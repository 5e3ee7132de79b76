/* rlx-blocks-gemma: the Gemma 2 / Gemma 3 decoder layer (gemma_layer.c). The embedding
 * scale and the final logit softcap are parameters of the core token_embed and lm_head. */
#include "rlx/plugin.h"

extern const rlx_block blk_gemma_decoder_layer;

static const rlx_block *const blocks[] = {&blk_gemma_decoder_layer};

static const rlx_plugin_desc desc = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_plugin_desc, n_archs),
    .abi_major = RLX_ABI_MAJOR,
    .abi_minor = RLX_ABI_MINOR,
    .name = "blocks-gemma",
    .version = "0.1.0",
    .summary = "Gemma 2 / Gemma 3 decoder layer over a preallocated KV cache",
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
