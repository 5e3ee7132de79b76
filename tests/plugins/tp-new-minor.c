/* Refused: built for ABI 1.4, a minor this host (1.3) does not speak. */
#include "tp.h"
TP_BLOCK(blk, "tp.new_minor");
static const rlx_block *const blocks[] = {&blk};
static const rlx_plugin_desc desc = {TP_DESC_SIZE, RLX_ABI_MAJOR, 4, "tp-new-minor", "0.1",
                                     "newer minor", blocks, 1, NULL, 0, NULL, 0};
TP_EXPORT { (void)host; return &desc; }
