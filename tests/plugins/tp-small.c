/* Refused: a struct smaller than ABI minor 0 requires.
 * TP_SMALL_DESC: the descriptor stops before n_archs; otherwise one block does. */
#include "tp.h"
static const rlx_block blk = {(uint32_t)offsetof(rlx_block, emit), "tp.small", "", "", tp_emit};
static const rlx_block *const blocks[] = {&blk};
#ifdef TP_SMALL_DESC
static const rlx_plugin_desc desc = {(uint32_t)offsetof(rlx_plugin_desc, archs), RLX_ABI_MAJOR,
                                     RLX_ABI_MINOR, "tp-small-desc", "0.1", "", NULL, 0, NULL, 0,
                                     NULL, 0};
#else
static const rlx_plugin_desc desc = {TP_DESC_SIZE, RLX_ABI_MAJOR, RLX_ABI_MINOR, "tp-small-block",
                                     "0.1", "", blocks, 1, NULL, 0, NULL, 0};
#endif
TP_EXPORT { (void)host; (void)blocks; return &desc; }
