/* A backend whose init refuses and says which rlx_backend_options.graphs the host gave it:
 * the host decides it from both phases' profiles (RLX_GRAPHS_*: 0 none, 1 every program,
 * 2 decode programs only, 3 prefill programs only). */
#include "tp.h"

static int graphs_init(const rlx_backend_options *o, void **be, rlx_diag *d)
{
    *be = NULL;
    d->code = RLX_ERR_UNSUPPORTED;
    snprintf(d->msg, sizeof d->msg, "tp-graphs: given graphs %d", o->graphs);
    return d->code;
}

static const rlx_backend graphs_be = {(uint32_t)RLX_STRUCT_SIZE(rlx_backend, teardown), "tp-graphs", "test backend", 0,
                                      0, tp_ops, tp_dtypes, tp_probe_yes, NULL, graphs_init, tp_alloc, tp_free,
                                      tp_copy, tp_copy, tp_compile, tp_execute, tp_sync, tp_release, tp_teardown};
static const rlx_backend *const backends[] = {&graphs_be};
static const rlx_plugin_desc desc = {TP_DESC_SIZE, RLX_ABI_MAJOR, RLX_ABI_MINOR, "tp-graphs", "0.1",
                                     "reports the graphs option", NULL, 0, backends, 1, NULL, 0};

TP_EXPORT
{
    (void)host;
    return &desc;
}
