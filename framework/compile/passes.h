/* Graph passes run between the build and planning, selected by the profile. */
#ifndef RLX_PASSES_H
#define RLX_PASSES_H
#include "ir/graph.h"

typedef struct rg_stats {
    uint32_t built_nodes;  /* as the flow emitted them */
    uint32_t dce_removed;
    uint32_t folded;
    uint32_t fused[4];     /* add_rms_norm, swiglu, geglu_tanh, linear_swiglu */
    uint32_t decomposed;
    uint32_t casts;        /* rlx.cast nodes the precision passes inserted */
} rg_stats;

extern const char *const rg_fused_names[4];

/* Every graph output becomes a node-produced value of its own (copy if needed). */
int rg_pass_outputs(rg_graph *g);
void rg_pass_dce(rg_graph *g, rg_stats *st);
int rg_pass_fold(rg_graph *g, rg_stats *st);
int rg_pass_fuse(rg_graph *g, rg_stats *st);
/* Fails if a pattern remains that the backend has a composite kernel for. */
int rg_pass_assert_clean(rg_graph *g, const rlx_backend *be, rlx_diag *d);
/* legalize.c: decompose composites the backend lacks (every composite with unfuse);
 * fail on a primitive it lacks. */
int rg_backend_supports(const rlx_backend *be, const rg_graph *g, const rlx_value_desc *vd,
                        const rg_node *n);
rlx_value_desc *rg_value_descs(const rg_graph *g);
/* precision.c: value dtypes from the profile's precision (compute, mixed), then casts
 * where the backend cannot run a node in its dtypes (must: fail naming the op and the
 * dtypes when it cannot run it in f32 either); graph outputs stay f32. */
int rg_precision_dtype(const rlx_profile *pr);
int rg_pass_precision(rg_graph *g, const rlx_profile *pr, rg_stats *st, rlx_diag *d);
int rg_pass_casts(rg_graph *g, const rlx_backend *be, int must, rg_stats *st, rlx_diag *d);
int rg_pass_f32_outputs(rg_graph *g, rg_stats *st, rlx_diag *d);
/* partition.c: the graph of rank `rank` of `ranks` (tensor parallelism, docs/multi-gpu.md)
 * from the tp hints on rlx.matmul: weights sliced, heads and KV caches split, rlx.all_reduce
 * after row-parallel and rlx.all_gather after vocab-parallel matmuls (attributes ranks,
 * rank, group). Run right after the build. Fails naming the tensor and the count that does
 * not divide. */
int rg_pass_partition(rg_graph *g, int rank, int ranks, int64_t group, rlx_diag *d);
/* last_row.c: output `output` [T, N] becomes its row out_row ([1] i32, a new input), taken
 * as early as row-local ops allow (so the last norm and projection see one row). */
int rg_pass_last_row(rg_graph *g, const char *output, int64_t T, rlx_diag *d);
/* greedy.c: a decode graph whose token id is the state rlx.next_id and whose logits'
 * argmax is written there and into the state rlx.generated [ctx, 1, 1] at row pos
 * (rlx_session_generate). Fails naming what the flow lacks (inputs input_ids, pos; a
 * one-row output logits). */
int rg_pass_greedy(rg_graph *g, int64_t ctx, rlx_diag *d);
int rg_legalize(rg_graph *g, const rlx_backend *be, int unfuse, rg_stats *st, rlx_diag *d);
#endif
