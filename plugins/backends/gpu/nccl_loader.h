/* NCCL (NVIDIA) / RCCL (AMD, same API) loaded at run time: no build dependency, a
 * one-line error naming the library when it is missing. Only the calls tensor
 * parallelism needs (docs/multi-gpu.md); the GPU backends call them from gpu_tp.cu. */
#ifndef RLX_NCCL_LOADER_H
#define RLX_NCCL_LOADER_H
#include <stddef.h>

/* the few NCCL types used, with nccl.h's values (stable since NCCL 2.0) */
typedef struct ncclComm *rlx_nccl_comm;
typedef struct ncclWindow_vidmem *rlx_nccl_win;
enum { RLX_NCCL_SUCCESS = 0, RLX_NCCL_IN_PROGRESS = 7 };
enum { RLX_NCCL_INT32 = 2, RLX_NCCL_FLOAT16 = 6, RLX_NCCL_FLOAT32 = 7, RLX_NCCL_BFLOAT16 = 9 }; /* ncclDataType_t */
enum { RLX_NCCL_SUM = 0 };                                                /* ncclRedOp_t */
enum { RLX_NCCL_WIN_COLL_SYMMETRIC = 1 };                                 /* window flags (2.27) */

typedef struct rlx_nccl {
    void *lib; /* stays loaded: a communication runtime is never unloaded */
    const char *name;
    int (*comm_init_all)(rlx_nccl_comm *comms, int ndev, const int *devlist);
    int (*all_reduce)(const void *send, void *recv, size_t count, int dtype, int op, rlx_nccl_comm comm,
                      void *stream);
    int (*all_gather)(const void *send, void *recv, size_t send_count, int dtype, rlx_nccl_comm comm, void *stream);
    int (*group_start)(void);
    int (*group_end)(void);
    int (*comm_destroy)(rlx_nccl_comm comm);
    int (*comm_abort)(rlx_nccl_comm comm); /* stops its pending collectives, frees it */
    int (*comm_get_async_error)(rlx_nccl_comm comm, int *async_error);
    const char *(*get_error_string)(int result);
    /* optional (NULL when the library is older): memory every rank of a communicator maps
     * (ncclMemAlloc, 2.19) registered as a symmetric window (2.27), over which collectives
     * run NCCL's low-latency symmetric kernels */
    int (*mem_alloc)(void **ptr, size_t size);
    int (*mem_free)(void *ptr);
    int (*window_register)(rlx_nccl_comm comm, void *buf, size_t size, rlx_nccl_win *win, int flags);
    int (*window_deregister)(rlx_nccl_comm comm, rlx_nccl_win win);
} rlx_nccl;

/* The library: $RLX_NCCL_LIBRARY when set (e.g. the one inside PyTorch's
 * nvidia/nccl/lib), else rocm ? "librccl.so" : "libnccl.so.2" through the loader's
 * search path. On failure err gets one line naming the library (dlerror's reason, or
 * the missing symbol). */
int rlx_nccl_load(rlx_nccl *n, int rocm, char *err, size_t len);
/* One communicator per device of devlist, all in this process (ncclCommInitAll), with
 * NCCL_NVLS_ENABLE=0 set first (NVLink multicast stays off on the GPU machines). */
int rlx_nccl_init_all(const rlx_nccl *n, rlx_nccl_comm *comms, int ndev, const int *devlist, char *err, size_t len);
#endif
