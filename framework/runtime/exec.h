/* A compiled program and what it needs at execute time. */
#ifndef RLX_EXEC_H
#define RLX_EXEC_H
#include "runtime/model.h"
#include "compile/passes.h"
#include "compile/plan.h"

struct rg_exec {
    int phase;
    int64_t T, ctx;
    rg_variant variant; /* the optional inputs it was built for */
    rg_graph *g;       /* owns op names, attrs and constant data the program points at */
    rg_plan plan;
    rlx_program prog;
    void *exe;         /* backend executable */
    void **ptrs;       /* value_ptrs handed to execute */
    void **owned;      /* per value: buffer this exec allocated (IO staging, uploaded consts) */
    uint64_t arena_gen; /* arena the TEMP pointers were computed for */
    rg_stats stats;
    uint32_t n_nodes_final;
};
/* every state of e's plan in st (allocated where missing) */
int rg_states_ensure(rlx_model *m, rg_exec *e, rg_states *st, rlx_diag *d);
/* memory.c: what plan p still needs (fixed: its weights, constants and IO buffers too;
 * states not in st, or all when st is NULL; a larger arena) against what the device has:
 * "DEVICE: needs X GiB (weights A + KV cache B + arena C), Y GiB available" before any
 * of it is taken. Backends without mem_info (ABI < 1.2) are checked on host memory only
 * when their buffers are host memory. */
int rg_mem_check(rlx_model *m, const rg_plan *p, const rg_graph *g, const rg_states *st, int fixed,
                 rlx_diag *d);
#endif
