/* Refused: a backend without its required execute function. */
#include "tp.h"
static const rlx_backend be = {(uint32_t)RLX_STRUCT_SIZE(rlx_backend, teardown), "tp-no-fn", "", 0, 0,
                               tp_ops, tp_dtypes, tp_probe_yes, NULL, tp_init, tp_alloc, tp_free,
                               tp_copy, tp_copy, tp_compile, NULL, tp_sync, tp_release, tp_teardown};
static const rlx_backend *const backends[] = {&be};
static const rlx_plugin_desc desc = {TP_DESC_SIZE, RLX_ABI_MAJOR, RLX_ABI_MINOR, "tp-no-fn", "0.1", "",
                                     NULL, 0, backends, 1, NULL, 0};
TP_EXPORT { (void)host; return &desc; }
