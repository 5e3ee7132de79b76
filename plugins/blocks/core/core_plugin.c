/* rlx-blocks-core: the architecture-neutral blocks every recipe composes. */
#include "rlx/plugin_util.h"
#include "core_blocks.h"

static const rlx_block *const blocks[] = {
    &blk_core_token_embed,   &blk_core_rms_norm,         &blk_core_final_norm,
    &blk_core_layer_norm,    &blk_core_linear,           &blk_core_residual_save,
    &blk_core_residual_add,  &blk_core_swiglu,           &blk_core_gelu_ffn,
    &blk_core_lm_head,       &blk_core_gather_last_token, &blk_core_rope_tables,
    &blk_core_self_attn_prefill, &blk_core_self_attn,
};

RLX_BLOCKS_PLUGIN("blocks-core",
                  "core blocks: embeddings, norms, linear, residuals, MLPs, rope tables, attention, LM head",
                  blocks)
