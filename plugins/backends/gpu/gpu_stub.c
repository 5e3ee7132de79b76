/* A thin backend plugin for a GPU runtime (one source, built once for CUDA and once for
 * ROCm by plugins/backends/gpu.am). The real backend, same name, lives in impl/ beside
 * this file, where the registry does not look; loading it maps the CUDA or HIP runtime and
 * registers every kernel (tens of milliseconds, megabytes), so it is loaded only when it
 * can be used: at the first probe that finds the driver's device node, or at init. Until
 * then the probe needs no GPU library and says which node is missing; ops and dtypes are
 * empty lists, and become the implementation's when it loads (name, priority and flags
 * must match) (a host reads them after a
 * probe that found the backend available, docs/ABI.md). Every other entry point forwards.
 *
 * Build-time parameters: RLX_STUB_NAME ("cuda"), RLX_STUB_SUMMARY, RLX_STUB_DRIVER (for
 * messages: "NVIDIA"), RLX_STUB_NODES (device nodes, ':'-separated; one is enough). */
#define _GNU_SOURCE
#include "rlx/plugin.h"
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

RLX_EXPORT const rlx_plugin_desc *rlx_plugin_init(const rlx_host_api *h);

static const rlx_host_api *host;
static const char *const none[] = {NULL};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int tried;             /* resolve ran (its answer is final) */
static const rlx_backend *impl; /* the loaded implementation's backend */
static char why[256];         /* why impl is NULL */

static int host_has(size_t field_end) { return host && host->struct_size >= field_end; }

static int fail(rlx_diag *d, int code, const char *fmt, ...) RLX_PRINTF(3, 4);
static int fail(rlx_diag *d, int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!d) return code;
    if (host_has(RLX_STRUCT_SIZE(rlx_host_api, diag_set)) && host->diag_set) {
        host->diag_set(d, code, "%s", msg);
    } else {
        d->code = code;
        snprintf(d->msg, sizeof d->msg, "%s", msg);
    }
    return code;
}

/* one of RLX_STUB_NODES exists: the driver is there */
static int driver_present(void)
{
    const char *p = RLX_STUB_NODES;
    while (*p) {
        size_t n = strcspn(p, ":");
        char node[256];
        snprintf(node, sizeof node, "%.*s", (int)n, p);
        if (access(node, F_OK) == 0) return 1;
        p += n + (p[n] == ':');
    }
    return 0;
}

/* the implementation file, and a refusal of any place another user could write to (the
 * registry checked this file's folder; impl/ is below it) */
static int impl_path(char *out, size_t cap)
{
    Dl_info info;
    char self[PATH_MAX];
    if (!dladdr((void *)&driver_present, &info) || !info.dli_fname || !realpath(info.dli_fname, self)) {
        snprintf(why, sizeof why, "cannot locate the plugin file to find impl/");
        return -1;
    }
    char *slash = strrchr(self, '/');
    *slash = 0;
    char rel[PATH_MAX + 64], real[PATH_MAX];
    snprintf(rel, sizeof rel, "%s/impl/rlx-backend-%s.so", self, RLX_STUB_NAME);
    if (!realpath(rel, real)) {
        snprintf(why, sizeof why, "the implementation %.180s is missing", rel);
        return -1;
    }
    const char *unsafe = getenv("RLX_PLUGIN_ALLOW_UNSAFE");
    struct stat st;
    for (int k = 0; !(unsafe && !strcmp(unsafe, "1")) && k < 2; k++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s", real);
        if (k) *strrchr(p, '/') = 0;
        if (stat(p, &st) || (st.st_mode & (S_IWGRP | S_IWOTH)) || (st.st_uid != 0 && st.st_uid != geteuid())) {
            snprintf(why, sizeof why, "unsafe location: %.*s is writable by others or owned by another user "
                                      "(RLX_PLUGIN_ALLOW_UNSAFE=1 skips this check)", (int)(sizeof why - 140), p);
            return -1;
        }
    }
    snprintf(out, cap, "%s", real);
    return 0;
}

static rlx_backend stub; /* defined below; ops and dtypes become the implementation's */

/* loads the implementation and checks that it is the backend this stub stands for */
static const rlx_backend *load(void)
{
    char path[PATH_MAX];
    if (impl_path(path, sizeof path)) return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(why, sizeof why, "cannot load %.120s: %.100s", path, e ? e : "unknown error");
        return NULL;
    }
    rlx_plugin_init_fn init;
    void *sym = dlsym(h, RLX_PLUGIN_ENTRY_NAME);
    memcpy(&init, &sym, sizeof init); /* object pointer to function pointer */
    const rlx_plugin_desc *d = init ? init(host) : NULL;
    const rlx_backend *b = d && d->struct_size >= RLX_STRUCT_SIZE(rlx_plugin_desc, n_archs) &&
                                   d->abi_major == RLX_ABI_MAJOR && d->n_backends == 1 && d->backends
                               ? d->backends[0]
                               : NULL;
    /* h stays open even when refused: its constructors ran (GPU runtimes must not unload) */
    if (!b || b->struct_size < RLX_STRUCT_SIZE(rlx_backend, teardown) || !b->name ||
        strcmp(b->name, RLX_STUB_NAME) || b->priority != stub.priority || b->flags != stub.flags ||
        !b->probe || !b->init || !b->alloc || !b->free || !b->upload || !b->download || !b->compile ||
        !b->execute || !b->sync || !b->release || !b->teardown) {
        snprintf(why, sizeof why, "%.160s is not a '%s' backend plugin of ABI %d (priority %d, flags %u)",
                 path, RLX_STUB_NAME, RLX_ABI_MAJOR, (int)stub.priority, (unsigned)stub.flags);
        return NULL;
    }
    stub.ops = b->ops;
    stub.dtypes = b->dtypes;
    if (host_has(RLX_STRUCT_SIZE(rlx_host_api, log)) && host->log) host->log(RLX_LOG_DEBUG, RLX_STUB_NAME, "loaded %s", path);
    return b;
}

/* the implementation, loaded the first time the driver is found; NULL: why says why */
static const rlx_backend *resolve(void)
{
    pthread_mutex_lock(&mu);
    if (!tried) {
        tried = 1;
        if (!driver_present()) {
            char list[sizeof RLX_STUB_NODES * 2];
            size_t o = 0;
            for (const char *c = RLX_STUB_NODES; *c && o + 3 < sizeof list; c++)
                o += (size_t)snprintf(list + o, sizeof list - o, *c == ':' ? ", " : "%c", *c);
            snprintf(why, sizeof why, "no %s device node (%s)", RLX_STUB_DRIVER, list);
        } else {
            impl = load();
        }
    }
    const rlx_backend *b = impl;
    pthread_mutex_unlock(&mu);
    return b;
}

/* ---------------------------------------------------------------- entry points */

static int stub_probe(rlx_backend_probe *out)
{
    if (!out) return RLX_ERR_INVALID;
    const rlx_backend *b = resolve();
    if (b) return b->probe(out);
    rlx_backend_probe p;
    memset(&p, 0, sizeof p);
    snprintf(p.reason, sizeof p.reason, "%s", why);
    uint32_t n = out->struct_size && out->struct_size < sizeof p ? out->struct_size : (uint32_t)sizeof p;
    p.struct_size = n;
    memcpy(out, &p, n);
    return 0;
}

static int stub_supports_op(const rlx_node_desc *node, const rlx_value_desc *values)
{
    const rlx_backend *b = resolve();
    if (!b || !node || !node->op) return 0;
    if (b->supports_op) return b->supports_op(node, values);
    for (const char *const *o = b->ops; o && *o; o++)
        if (!strcmp(*o, node->op)) return 1;
    return 0;
}

static int stub_init(const rlx_backend_options *opt, void **be, rlx_diag *d)
{
    if (be) *be = NULL;
    const rlx_backend *b = resolve();
    if (!b) return fail(d, RLX_ERR_DEVICE, "%s: %s", RLX_STUB_NAME, why);
    return b->init(opt, be, d);
}

/* after a successful init impl is set for good */
static void *stub_alloc(void *be, size_t bytes, rlx_diag *d)
{
    if (!impl) return fail(d, RLX_ERR_DEVICE, "%s: not initialised", RLX_STUB_NAME), NULL;
    return impl->alloc(be, bytes, d);
}

static void stub_free(void *be, void *ptr)
{
    if (impl) impl->free(be, ptr);
}

static int stub_upload(void *be, void *dst, const void *src, size_t bytes, rlx_diag *d)
{
    return impl ? impl->upload(be, dst, src, bytes, d) : fail(d, RLX_ERR_DEVICE, "%s: not initialised", RLX_STUB_NAME);
}

static int stub_download(void *be, void *dst, const void *src, size_t bytes, rlx_diag *d)
{
    return impl ? impl->download(be, dst, src, bytes, d) : fail(d, RLX_ERR_DEVICE, "%s: not initialised", RLX_STUB_NAME);
}

static int stub_compile(void *be, const rlx_program *prog, void **exe, rlx_diag *d)
{
    return impl ? impl->compile(be, prog, exe, d) : fail(d, RLX_ERR_DEVICE, "%s: not initialised", RLX_STUB_NAME);
}

static int stub_execute(void *be, void *exe, void *const *value_ptrs, rlx_diag *d)
{
    return impl ? impl->execute(be, exe, value_ptrs, d) : fail(d, RLX_ERR_DEVICE, "%s: not initialised", RLX_STUB_NAME);
}

static int stub_sync(void *be, rlx_diag *d)
{
    return impl ? impl->sync(be, d) : fail(d, RLX_ERR_DEVICE, "%s: not initialised", RLX_STUB_NAME);
}

static void stub_release(void *be, void *exe)
{
    if (impl) impl->release(be, exe);
}

static void stub_teardown(void *be)
{
    if (impl) impl->teardown(be);
}

/* ABI 1.2 members: forwarded when the implementation has them */
static int impl_has(size_t field_end) { return impl && impl->struct_size >= field_end; }

static int stub_mem_info(void *be, rlx_mem_info *out, rlx_diag *d)
{
    if (!impl_has(RLX_STRUCT_SIZE(rlx_backend, mem_info)) || !impl->mem_info)
        return fail(d, RLX_ERR_UNSUPPORTED, "%s: the implementation reports no memory", RLX_STUB_NAME);
    return impl->mem_info(be, out, d);
}

static int stub_measure_ceilings(void *be, rlx_ceilings *io, rlx_diag *d)
{
    if (!impl_has(RLX_STRUCT_SIZE(rlx_backend, measure_ceilings)) || !impl->measure_ceilings)
        return fail(d, RLX_ERR_UNSUPPORTED, "%s: the implementation measures no ceilings", RLX_STUB_NAME);
    return impl->measure_ceilings(be, io, d);
}

static rlx_backend stub = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_backend, measure_ceilings),
    .name = RLX_STUB_NAME,
    .summary = RLX_STUB_SUMMARY,
    .priority = 100,
    .flags = 0,
    .ops = none,
    .dtypes = none,
    .probe = stub_probe,
    .supports_op = stub_supports_op,
    .init = stub_init,
    .alloc = stub_alloc,
    .free = stub_free,
    .upload = stub_upload,
    .download = stub_download,
    .compile = stub_compile,
    .execute = stub_execute,
    .sync = stub_sync,
    .release = stub_release,
    .teardown = stub_teardown,
    .mem_info = stub_mem_info,
    .measure_ceilings = stub_measure_ceilings,
};

static const rlx_backend *const backends[] = {&stub};

static const rlx_plugin_desc desc = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_plugin_desc, n_archs),
    .abi_major = RLX_ABI_MAJOR,
    .abi_minor = RLX_ABI_MINOR,
    .name = RLX_STUB_NAME,
    .version = RLX_VERSION,
    .summary = RLX_STUB_SUMMARY,
    .backends = backends,
    .n_backends = 1,
};

RLX_EXPORT const rlx_plugin_desc *rlx_plugin_init(const rlx_host_api *h)
{
    if (!h || h->abi_major != RLX_ABI_MAJOR) return NULL;
    host = h;
    return &desc;
}
