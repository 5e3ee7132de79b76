/* A good backend plugin: three backends ranked for "auto" (tp-high has no device). */
#include "tp.h"
TP_BACKEND(low, "tp-low", 0, tp_probe_yes);
TP_BACKEND(avail, "tp-avail", 10, tp_probe_yes);
TP_BACKEND(high, "tp-high", 200, tp_probe_no);
static const rlx_backend *const backends[] = {&low, &avail, &high};
static const rlx_plugin_desc desc = {TP_DESC_SIZE, RLX_ABI_MAJOR, RLX_ABI_MINOR, "tp-backend", "0.1",
                                     "test backends", NULL, 0, backends, 3, NULL, 0};
TP_EXPORT { (void)host; return &desc; }
