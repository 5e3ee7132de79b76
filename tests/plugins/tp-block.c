/* A good block plugin: two blocks. */
#include "tp.h"
TP_BLOCK(blk1, "tp.block");
TP_BLOCK(blk2, "tp.block2");
static const rlx_block *const blocks[] = {&blk1, &blk2};
static const rlx_plugin_desc desc = {TP_DESC_SIZE, RLX_ABI_MAJOR, RLX_ABI_MINOR, "tp-block", "1.2.3",
                                     "test blocks", blocks, 2, NULL, 0, NULL, 0};
TP_EXPORT { return host && host->abi_major == RLX_ABI_MAJOR ? &desc : NULL; }
