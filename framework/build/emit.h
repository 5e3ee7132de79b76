/* The emission context a stage's block writes through (rlx_ctx, opaque to plugins). */
#ifndef RLX_EMIT_H
#define RLX_EMIT_H
#include "build/build.h"

typedef struct rg_name_val {
    char *name;
    int32_t v;
} rg_name_val;

typedef struct rg_map {
    rg_name_val *e;
    uint32_t n;
} rg_map;

struct rlx_ctx {
    const rg_build_env *env;
    rg_graph *g;
    int phase;
    int64_t T, ctx_len;
    rg_map slots, weights, states, inputs;
    struct json_t *params; /* the stage's params object (borrowed) */
    int64_t rep;           /* innermost repeat index, -1 outside repeats */
    char where[192];       /* "stage 3 (llama.decoder_layer, i=0)" */
    char **strs;           /* strings handed out by param_str, freed after the build */
    uint32_t n_strs;
    int failed;
    rlx_diag *d;
    int64_t batch;       /* slots of a batched decode (rg_variant.batch), 0: none */
    int32_t batch_slots; /* its input batch_slots [T] */
};

int32_t rg_map_get(const rg_map *m, const char *name);
int rg_map_set(rg_map *m, const char *name, int32_t v);
void rg_map_free(rg_map *m);
/* fail with the stage prefix / without it (messages that name a tensor) */
int rg_ctx_fail(rlx_ctx *c, const char *fmt, ...) RLX_PRINTF(2, 3);
int rg_ctx_fail_raw(rlx_ctx *c, int code, const char *fmt, ...) RLX_PRINTF(3, 4);
int32_t rg_emit_op_at(rlx_ctx *c, const char *op, const int32_t *inputs, uint32_t n_inputs,
                      const rlx_attr *attrs, uint32_t n_attrs, int32_t *outs, uint32_t n_outs);
/* batch.c: in a batched decode, the state shape with its leading slot dim, and the op
 * a block emitted as the op that runs each row on its own slot (cache_write ->
 * cache_write_rows, attention with pos -> attention_rows; in[] gets batch_slots). NULL
 * after failing when the op cannot run rows apart. */
int rg_batch_state_shape(rlx_ctx *c, const char *name, rlx_shape *s);
const char *rg_batch_op(rlx_ctx *c, const char *op, int32_t *in, uint32_t *n_in);
/* params.c: stage parameter lookups with {i} substitution */
int64_t rg_param_int(rlx_ctx *c, const char *key, int64_t def);
double rg_param_float(rlx_ctx *c, const char *key, double def);
const char *rg_param_str(rlx_ctx *c, const char *key, const char *def);
#endif
