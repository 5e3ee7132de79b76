/* Refused when loaded after tp-block / tp-backend / tp-arch: it reuses one of their
 * names. TP_DUP_KIND: 0 plugin name, 1 block, 2 backend, 3 arch, 4 a model_type. */
#include "tp.h"
static int build(rlx_flow *f, int phase, const rlx_model_config *c, const rlx_host_api *h, rlx_diag *d)
{ (void)f; (void)phase; (void)c; (void)h; (void)d; return 0; }
#if TP_DUP_KIND == 4
static const char *const types[] = {"tp_model2", NULL};
#else
static const char *const types[] = {"tp_other_model" TP_STR(TP_DUP_KIND), NULL};
#endif
#if TP_DUP_KIND == 1
TP_BLOCK(blk, "tp.block");
#else
TP_BLOCK(blk, "tp.unique_block" TP_STR(TP_DUP_KIND));
#endif
TP_BACKEND(be, TP_DUP_KIND == 2 ? "tp-avail" : "tp-unique" TP_STR(TP_DUP_KIND), 5, tp_probe_yes);
static const rlx_arch arch = {(uint32_t)RLX_STRUCT_SIZE(rlx_arch, build_flow),
                              TP_DUP_KIND == 3 ? "tp-arch" : "tp-unique-arch" TP_STR(TP_DUP_KIND), types, NULL, NULL,
                              build, 0};
static const rlx_block *const blocks[] = {&blk};
static const rlx_backend *const backends[] = {&be};
static const rlx_arch *const archs[] = {&arch};
static const rlx_plugin_desc desc = {TP_DESC_SIZE, RLX_ABI_MAJOR, RLX_ABI_MINOR,
                                     TP_DUP_KIND == 0 ? "tp-block" : "tp-dup" TP_STR(TP_DUP_KIND), "0.1", "",
                                     blocks, 1, backends, 1, archs, 1};
TP_EXPORT { (void)host; return &desc; }
