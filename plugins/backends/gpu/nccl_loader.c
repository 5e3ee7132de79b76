/* Run-time loading of NCCL / RCCL (nccl_loader.h). */
#include "nccl_loader.h"
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*any_fn)(void);

static int sym(rlx_nccl *n, const char *name, void *slot, char *err, size_t len)
{
    void *p = dlsym(n->lib, name);
    if (!p) {
        snprintf(err, len, "%s: no symbol %s (an NCCL older than 2.4?)", n->name, name);
        return -1;
    }
    any_fn f = (any_fn)(size_t)p; /* object to function pointer through an integer (ISO C) */
    memcpy(slot, &f, sizeof f);
    return 0;
}

int rlx_nccl_load(rlx_nccl *n, int rocm, char *err, size_t len)
{
    memset(n, 0, sizeof *n);
    const char *env = getenv("RLX_NCCL_LIBRARY");
    n->name = env && *env ? env : rocm ? "librccl.so" : "libnccl.so.2";
    n->lib = dlopen(n->name, RTLD_NOW | RTLD_LOCAL);
    if (!n->lib) {
        const char *why = dlerror();
        snprintf(err, len, "%s: cannot load it (%s); tensor parallelism over GPUs needs %s (set RLX_NCCL_LIBRARY "
                 "to its path, e.g. PyTorch's nvidia/nccl/lib/libnccl.so.2)", n->name, why ? why : "not found",
                 rocm ? "RCCL" : "NCCL");
        return -1;
    }
    if (sym(n, "ncclCommInitAll", &n->comm_init_all, err, len) || sym(n, "ncclAllReduce", &n->all_reduce, err, len) ||
        sym(n, "ncclAllGather", &n->all_gather, err, len) || sym(n, "ncclGroupStart", &n->group_start, err, len) ||
        sym(n, "ncclGroupEnd", &n->group_end, err, len) || sym(n, "ncclCommDestroy", &n->comm_destroy, err, len) ||
        sym(n, "ncclGetErrorString", &n->get_error_string, err, len) ||
        sym(n, "ncclCommAbort", &n->comm_abort, err, len) ||
        sym(n, "ncclCommGetAsyncError", &n->comm_get_async_error, err, len)) {
        n->lib = NULL; /* left mapped: dlclose of a half-checked runtime gains nothing */
        return -1;
    }
    char skip[256];
    if (sym(n, "ncclMemAlloc", &n->mem_alloc, skip, sizeof skip) || sym(n, "ncclMemFree", &n->mem_free, skip, sizeof skip) ||
        sym(n, "ncclCommWindowRegister", &n->window_register, skip, sizeof skip) ||
        sym(n, "ncclCommWindowDeregister", &n->window_deregister, skip, sizeof skip))
        n->mem_alloc = NULL; /* no symmetric windows: collectives run on the arena's buffers */
    return 0;
}

int rlx_nccl_init_all(const rlx_nccl *n, rlx_nccl_comm *comms, int ndev, const int *devlist, char *err, size_t len)
{
    if (!n->lib) {
        snprintf(err, len, "NCCL is not loaded");
        return -1;
    }
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    int rc = n->comm_init_all(comms, ndev, devlist);
    if (rc != RLX_NCCL_SUCCESS) {
        snprintf(err, len, "%s: ncclCommInitAll over %d devices: %s", n->name, ndev, n->get_error_string(rc));
        return -1;
    }
    return 0;
}
