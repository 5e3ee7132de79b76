/* The core op table (docs/OPS.md): arity, shape and dtype inference, attribute
 * defaults, and the decompositions of composite ops into primitives. */
#ifndef RLX_OPS_H
#define RLX_OPS_H
#include "ir/graph.h"

#define RG_MAX_OUT 2

typedef struct rg_op_def {
    const char *name;
    uint32_t min_in, max_in;
    uint32_t n_out;
    int composite;
    /* Fills out shapes/dtypes from the node's inputs and attrs; on a bad shape writes
     * a detail naming both shapes into err and returns nonzero. */
    int (*infer)(const rg_graph *g, const rg_node *n, rlx_shape *shapes, int *dtypes,
                 char *err, size_t errlen);
    /* Composites: appends primitive nodes writing the node's outputs; the caller marks
     * the node dead. Returns 0 or -1 (allocation). */
    int (*decompose)(rg_graph *g, uint32_t node);
} rg_op_def;

const rg_op_def *rg_op_find(const char *name);
/* rlx.matmul's tensor-parallel hint (attribute tp): RG_TP_* or -1 when s is none of them */
enum { RG_TP_COL = 0, RG_TP_COL_REP = 1, RG_TP_ROW = 2, RG_TP_VOCAB = 3 };
int rg_tp_kind(const char *s);
/* Adds the attributes a backend may rely on (attention scale, causal, ...) and makes
 * negative axes positive. */
int rg_op_normalize(rg_graph *g, uint32_t node);
/* Recomputes the output shapes of node after a pass changed its inputs' shapes; on a bad
 * shape writes "op: detail" into err and returns -1 (-2: the op is unknown). */
int rg_op_reinfer(rg_graph *g, uint32_t node, char *err, size_t len);
/* All op names, NULL-terminated. */
const char *const *rg_op_names(void);

/* ops_decomp.c: the decompositions the table points at */
int rg_decompose_swiglu(rg_graph *g, uint32_t node);
int rg_decompose_geglu_tanh(rg_graph *g, uint32_t node);
int rg_decompose_add_rms_norm(rg_graph *g, uint32_t node);
int rg_decompose_linear_swiglu(rg_graph *g, uint32_t node);
/* all_reduce / all_gather over one rank: rlx.copy (the partition pass checks that the
 * backend runs them before it emits them over several ranks) */
int rg_decompose_collective(rg_graph *g, uint32_t node);
#endif
