/* Shared pieces of the registry's test plugins: a block, a backend, an arch that do
 * nothing but are complete, so each test plugin differs from a good one in one way. */
#ifndef RLX_TP_H
#define RLX_TP_H
#include "../abi-1.0/rlx/plugin.h" /* frozen ABI 1.0: the host must keep loading these */
#include <stdio.h>
#include <string.h>

RLX_EXPORT const rlx_plugin_desc *rlx_plugin_init(const rlx_host_api *host);
#define TP_EXPORT RLX_EXPORT const rlx_plugin_desc *rlx_plugin_init(const rlx_host_api *host)
#define TP_STR_(x) #x
#define TP_STR(x) TP_STR_(x)

static inline int tp_emit(rlx_ctx *c, const rlx_host_api *h) { (void)c; (void)h; return 0; }

static inline int tp_probe_yes(rlx_backend_probe *o)
{
    o->available = 1;
    o->n_devices = 1;
    snprintf(o->devices[0], sizeof o->devices[0], "tp device 0");
    snprintf(o->details, sizeof o->details, "tp details: nothing to see");
    return 0;
}

static inline int tp_probe_no(rlx_backend_probe *o)
{
    o->available = 0;
    snprintf(o->reason, sizeof o->reason, "no tp device");
    return 0;
}

static inline int tp_init(const rlx_backend_options *o, void **be, rlx_diag *d)
{ (void)o; (void)d; *be = NULL; return 0; }
static inline void *tp_alloc(void *be, size_t n, rlx_diag *d) { (void)be; (void)n; (void)d; return NULL; }
static inline void tp_free(void *be, void *p) { (void)be; (void)p; }
static inline int tp_copy(void *be, void *dst, const void *src, size_t n, rlx_diag *d)
{ (void)be; (void)d; memcpy(dst, src, n); return 0; }
static inline int tp_compile(void *be, const rlx_program *p, void **exe, rlx_diag *d)
{ (void)be; (void)p; (void)d; *exe = NULL; return 0; }
static inline int tp_execute(void *be, void *exe, void *const *v, rlx_diag *d)
{ (void)be; (void)exe; (void)v; (void)d; return 0; }
static inline int tp_sync(void *be, rlx_diag *d) { (void)be; (void)d; return 0; }
static inline void tp_release(void *be, void *exe) { (void)be; (void)exe; }
static inline void tp_teardown(void *be) { (void)be; }

static const char *const tp_ops[] = {"rlx.add", "rlx.mul", NULL};
static const char *const tp_dtypes[] = {"f32", NULL};

#define TP_BACKEND(var, nm, prio, probe_fn)                                               \
    static const rlx_backend var = {                                                       \
        (uint32_t)RLX_STRUCT_SIZE(rlx_backend, teardown), nm, "test backend", prio, 0, \
        tp_ops, tp_dtypes, probe_fn, NULL, tp_init, tp_alloc, tp_free, tp_copy, tp_copy,  \
        tp_compile, tp_execute, tp_sync, tp_release, tp_teardown}

#define TP_BLOCK(var, nm) \
    static const rlx_block var = {(uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), nm, "test block " nm, "", tp_emit}

#define TP_DESC_SIZE ((uint32_t)RLX_STRUCT_SIZE(rlx_plugin_desc, n_archs))
#endif
