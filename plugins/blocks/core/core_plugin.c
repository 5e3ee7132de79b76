/* rlx-blocks-core: the architecture-neutral blocks every recipe composes. */
#include "core_blocks.h"

static const rlx_block *const blocks[] = {
    &blk_core_token_embed,   &blk_core_rms_norm,         &blk_core_final_norm,
    &blk_core_layer_norm,    &blk_core_linear,           &blk_core_residual_save,
    &blk_core_residual_add,  &blk_core_swiglu,           &blk_core_gelu_ffn,
    &blk_core_lm_head,       &blk_core_gather_last_token, &blk_core_rope_tables,
    &blk_core_self_attn_prefill,
};

static const rlx_plugin_desc desc = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_plugin_desc, n_archs),
    .abi_major = RLX_ABI_MAJOR,
    .abi_minor = RLX_ABI_MINOR,
    .name = "blocks-core",
    .version = "0.1.0",
    .summary = "core blocks: embeddings, norms, linear, residuals, MLPs, rope tables, attention, LM head",
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
