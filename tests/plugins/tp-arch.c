/* A good arch plugin. */
#include "tp.h"
static int build(rlx_flow *f, int phase, const rlx_model_config *c, const rlx_host_api *h, rlx_diag *d)
{ (void)f; (void)phase; (void)c; (void)h; (void)d; return 0; }
static const char *const types[] = {"tp_model", "tp_model2", NULL};
static const rlx_arch arch = {(uint32_t)RLX_STRUCT_SIZE(rlx_arch, build_flow), "tp-arch", types,
                              "tp_prefill", NULL, build, 0};
static const rlx_arch *const archs[] = {&arch};
static const rlx_plugin_desc desc = {TP_DESC_SIZE, RLX_ABI_MAJOR, RLX_ABI_MINOR, "tp-arch", "0.1",
                                     "test arch", NULL, 0, NULL, 0, archs, 1};
TP_EXPORT { (void)host; return &desc; }
