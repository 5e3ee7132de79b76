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
    void *comm;
} gpu_tp_link;

/* from the node's attributes (ranks, rank, group, axis) and shapes: rows x cols per rank
 * (gather: cols is x's last axis); 0, or -1 with one line in err */
int gpu_coll_plan(const rlx_node_desc *nd, const rlx_value_desc *x, const rlx_value_desc *y, int gather,
                  int64_t *rows, int64_t *cols, gpu_tp_link *l, char *err, size_t len);
/* Sets l->comm. The first rank of a group to arrive waits (at most 120 s) for the others;
 * the last creates every rank's communicator (NCCL_NVLS_ENABLE=0). Call outside a graph
 * capture. 0, or -1 with one line in err naming the library, group or device. */
int gpu_tp_connect(gpu_tp_link *l, char *err, size_t len);
/* drops l's hold on its group's communicators: the last one destroys them all */
void gpu_tp_release(gpu_tp_link *l);
/* enqueues the collective on s (capturable); scratch holds rows*cols*ranks elements when a
 * gather has rows > 1 (NCCL gathers whole buffers; the rows are interleaved after) */
int gpu_coll_run(gpuStream_t s, const gpu_tp_link *l, int gather, const void *x, void *y, void *scratch,
                 int64_t rows, int64_t cols, int dt, char *err, size_t len);
/* "peer access 0->1 yes, 1->0 yes" over the first n devices (empty under 2) */
void gpu_tp_peers(int n, char *out, size_t len);
#endif
