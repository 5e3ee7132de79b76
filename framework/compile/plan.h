/* Scheduling and memory planning: graph -> rlx_program with one arena. */
#ifndef RLX_PLAN_H
#define RLX_PLAN_H
#include "ir/graph.h"

#define RG_ARENA_ALIGN 64

typedef struct rg_plan {
    rlx_value_desc *values;
    uint32_t n_values;
    rlx_node_desc *nodes;
    uint32_t n_nodes;
    int32_t *ids;       /* node inputs/outputs, program numbering */
    int32_t *p2g;       /* program value -> graph value */
    size_t arena_bytes;
    size_t temp_bytes;  /* sum of every TEMP value's size */
    uint32_t n_temps;
} rg_plan;

/* Reorders live nodes topologically, keeping emission order where free. */
int rg_schedule(rg_graph *g, rlx_diag *d);
/* Builds the program (aliases for reshape and cache_write, arena offsets by liveness).
 * The program borrows op names and attrs from g. */
int rg_plan_build(const rg_graph *g, rg_plan *p, rlx_diag *d);
void rg_plan_free(rg_plan *p);
/* flops.c: FLOPs of program p run at cache position pos: the matmul-class ops (matmul,
 * matmul_nn, bmm, linear_swiglu, conv2d) and attention (q·k and p·v over the keys each row
 * attends to), 2 per multiply-add; elementwise ops, norms, softmax and rope not counted */
void rg_program_flops(const rlx_program *p, int64_t pos, uint64_t *matmul_flops, uint64_t *attention_flops);
#endif
