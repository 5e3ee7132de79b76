/* Batched decode, built from any flow that keeps its sequence in KV-cache states: the T
 * rows are T sequences. Each state gets a leading slot dim (a pool of c->batch caches)
 * and the ops that touch a cache run each row against its own slot and position
 * (rlx.cache_write_rows, rlx.attention_rows: docs/OPS.md), so blocks need not know. */
#include "build/emit.h"
#include <string.h>

int rg_batch_state_shape(rlx_ctx *c, const char *name, rlx_shape *s)
{
    if (s->ndim + 1 > RLX_MAX_DIMS)
        return rg_ctx_fail(c, "state %s: no room for the slot dim of a batched decode", name);
    memmove(&s->dims[1], &s->dims[0], s->ndim * sizeof s->dims[0]);
    s->dims[0] = c->batch;
    s->ndim++;
    return 0;
}

static int is_i32(const rlx_ctx *c, int32_t v) { return c->g->values[v].dtype == RLX_I32; }

const char *rg_batch_op(rlx_ctx *c, const char *op, int32_t *in, uint32_t *n_in)
{
    if (!strcmp(op, "rlx.cache_write")) {
        in[(*n_in)++] = c->batch_slots;
        return "rlx.cache_write_rows";
    }
    if (strcmp(op, "rlx.attention")) return op;
    if (*n_in == 4 && is_i32(c, in[3])) {
        in[(*n_in)++] = c->batch_slots;
        return "rlx.attention_rows";
    }
    rg_ctx_fail(c, "rlx.attention %s: a batched decode runs attention over each row's own cache only",
                *n_in == 3 ? "without pos" : "with a mask");
    return NULL;
}
