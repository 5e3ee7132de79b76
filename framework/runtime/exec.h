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
#endif
