/* The build stage: a flow and what it reads (the model's description, its checkpoint
 * headers, the loaded plugins) -> a graph. Nothing here converts or uploads a weight:
 * emission records names and shapes; the runtime binds what survives the passes. */
#ifndef RLX_BUILD_H
#define RLX_BUILD_H
#include "ir/graph.h"

/* Which optional flow inputs a caller left out (bit k: flow input k) and the values of the
 * build-time scalars given (rg_flow_input_scalar), by input index: one program each. */
#define RG_VARIANT_INPUTS 64
typedef struct rg_variant {
    uint64_t absent;
    int64_t scalar[RG_VARIANT_INPUTS];
    int64_t last_row; /* 1: the caller reads one row of output logits (rg_pass_last_row) */
    /* batched decode (runtime/batch.c): > 0: the T rows are T sequences, each in its own
     * cache slot of a pool of this many (states get a leading slot dim, pos is [T], input
     * batch_slots [T] says each row's slot; build/batch.c); 0: one sequence */
    int64_t batch;
    /* 1: greedy decode on the device (rlx_session_generate, compile/greedy.c) */
    int64_t greedy;
} rg_variant;

typedef struct rg_build_env {
    const rlx_model_config *cfg;
    const rlx_config *config;     /* raw config.json; NULL for flows built in code */
    const rlx_weights *weights;   /* checkpoint headers; NULL: no weights */
    const rlx_registry *registry; /* blocks; NULL: custom stages only */
    const char *policy;           /* fusion policy of the phase built */
    const rg_variant *variant;    /* NULL: every input given */
    const rlx_flow *flow;         /* set by rg_build: the flow whose inputs variant describes */
    int record_weights;           /* 1: no checkpoint; each weight asked for (optional ones too)
                                   * is present with the shape its block expects (rlx_config_weights) */
} rg_build_env;

int rg_build(const rg_build_env *env, const rlx_flow *f, int phase, int64_t T, int64_t ctx,
             rg_graph **out, rlx_diag *d);
/* a config number: fields the loader defaulted first, then config.json by dotted key */
int rg_config_lookup(const rg_build_env *env, const char *key, double *out);
#endif
