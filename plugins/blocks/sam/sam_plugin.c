/* rlx-blocks-sam: the blocks of transformers' SamModel (image encoder, prompt encoder,
 * mask decoder). */
#include "sam_blocks.h"
#include "rlx/plugin_util.h"

static const rlx_block *const blocks[] = {
    &blk_sam_patch_embed, &blk_sam_vision_layer, &blk_sam_neck, &blk_sam_prompt_encoder, &blk_sam_mask_decoder,
};

RLX_BLOCKS_PLUGIN("blocks-sam", "SAM blocks: ViT image encoder with windowed attention, prompt encoder, mask decoder",
                  blocks)
