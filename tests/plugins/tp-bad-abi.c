/* Refused: built for the next ABI major. */
#include "tp.h"
TP_BLOCK(blk, "tp.bad_abi");
static const rlx_block *const blocks[] = {&blk};
static const rlx_plugin_desc desc = {TP_DESC_SIZE, RLX_ABI_MAJOR + 1, 0, "tp-bad-abi", "0.1",
                                     "wrong major", blocks, 1, NULL, 0, NULL, 0};
TP_EXPORT { (void)host; return &desc; }
