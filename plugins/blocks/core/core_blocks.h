/* The blocks of rlx-blocks-core (core_blocks.c), listed by core_plugin.c. */
#ifndef RLX_BLOCKS_CORE_BLOCKS_H
#define RLX_BLOCKS_CORE_BLOCKS_H
#include "core_emit.h"

extern const rlx_block blk_core_token_embed, blk_core_rms_norm, blk_core_final_norm,
    blk_core_layer_norm, blk_core_linear, blk_core_residual_save, blk_core_residual_add,
    blk_core_swiglu, blk_core_gelu_ffn, blk_core_lm_head, blk_core_gather_last_token,
    blk_core_rope_tables, blk_core_self_attn_prefill, blk_core_self_attn;
#endif
