/* rlx-blocks-flux: diffusers FLUX.1 / FLUX.2 transformer blocks. */
#include "flux_blocks.h"
#include "rlx/plugin_util.h"

static const rlx_block *const blocks[] = {
    &blk_flux_embed,
    &blk_flux_double_block,
    &blk_flux_single_blocks,
    &blk_flux_output,
};

RLX_BLOCKS_PLUGIN("blocks-flux",
                  "FLUX.1 / FLUX.2 transformer blocks: embeddings, dual- and single-stream blocks, output",
                  blocks)
