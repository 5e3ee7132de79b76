/* Collectives of a tensor-parallel group on the GPU (docs/multi-gpu.md): rlx.all_reduce and
 * rlx.all_gather through NCCL / RCCL, loaded at run time. The ranks are backend instances
 * of this process, one host thread and one device each; their communicators come from one
 * ncclCommInitAll per group, made when every rank has reached its first collective. */
#ifndef RLX_GPU_TP_H
#define RLX_GPU_TP_H
#include "rlx_gpu_compat.h"
#include "rlx/plugin.h"
#include <stddef.h>
#include <stdint.h>

/* one rank's place in its group; comm is set by gpu_tp_connect */
typedef struct gpu_tp_link {
    int64_t group;
    int rank, ranks, device;
    void *comm, *grp;
} gpu_tp_link;

/* from the node's attributes (ranks, rank, group, axis) and shapes: rows x cols per rank
 * (gather: cols is x's last axis); 0, or -1 with one line in err */
int gpu_coll_plan(const rlx_node_desc *nd, const rlx_value_desc *x, const rlx_value_desc *y, int gather,
                  int64_t *rows, int64_t *cols, gpu_tp_link *l, char *err, size_t len);
/* Sets l->comm. The first rank of a group to arrive waits (at most RLX_TP_TIMEOUT_S, 120 s)
 * for the others; the last creates every rank's communicator (NCCL_NVLS_ENABLE=0). Call
 * outside a graph capture, before each execute: fails at once once the group was stopped.
 * 0, or -1 with one line in err naming the library, group or device. */
int gpu_tp_connect(gpu_tp_link *l, char *err, size_t len);
/* A program's first execute: the ranks publish their program's collectives (count, values,
 * a hash of each one's op, shape and dtype) and wait for each other; ranks that compiled
 * different programs fail here, naming both, instead of hanging inside NCCL. */
int gpu_tp_check_program(const gpu_tp_link *l, int64_t n_coll, int64_t n_vals, uint64_t sig, char *err, size_t len);
/* Waits (polling) for s to drain after a program with collectives. A collective that does
 * not complete within RLX_TP_TIMEOUT_S, an NCCL error, or another rank's failure stops the
 * group: this rank's communicator is aborted (ncclCommAbort ends its pending kernels), the
 * other ranks stop at their next poll, later steps fail at once. 0, or -1 with one line. */
int gpu_tp_wait(gpuStream_t s, const gpu_tp_link *l, char *err, size_t len);
/* this rank failed a step: stop the group so the other ranks do not wait for it */
void gpu_tp_fail(const gpu_tp_link *l, const char *why);
/* drops l's hold on its group's communicators: the last one destroys them all */
void gpu_tp_release(gpu_tp_link *l);
/* enqueues the collective on s (capturable); scratch holds rows*cols*ranks elements when a
 * gather has rows > 1 (NCCL gathers whole buffers; the rows are interleaved after) */
int gpu_coll_run(gpuStream_t s, const gpu_tp_link *l, int gather, const void *x, void *y, void *scratch,
                 int64_t rows, int64_t cols, int dt, char *err, size_t len);
/* A graph step with collectives: every rank says whether it is ready to launch (ok) or
 * failed before launching; they launch only when all are ready, so no rank's kernels wait
 * inside NCCL for a rank that will not come (its symmetric kernels cannot be aborted). A
 * rank that does not come within RLX_TP_TIMEOUT_S stops the group. 0 to launch, or -1
 * (with one line in err unless this rank was the one that failed). */
int gpu_tp_launch_barrier(const gpu_tp_link *l, int ok, char *err, size_t len);
/* bytes of memory on every rank of l's group, registered with NCCL as one symmetric window
 * (ncclMemAlloc + ncclCommWindowRegister, NCCL 2.27 or later): collectives whose buffers lie
 * in it run NCCL's low-latency symmetric kernels. Every rank calls it at the same point (a
 * program's first execute, outside a capture); all ranks get a window or none does. 0, or -1
 * with the reason in err (the collectives then run on the arena's buffers as before). */
int gpu_tp_window_open(const gpu_tp_link *l, size_t bytes, void **ptr, void **win, char *err, size_t len);
/* deregisters and frees it (before the link's release: the window needs its communicator) */
void gpu_tp_window_close(const gpu_tp_link *l, void *ptr, void *win);
/* "peer access 0->1 yes, 1->0 yes" over the first n devices (empty under 2) */
void gpu_tp_peers(int n, char *out, size_t len);
#endif
