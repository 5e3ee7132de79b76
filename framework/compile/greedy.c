/* Greedy decode on the device (rlx_session_generate): the decode program of a chain of
 * steps that needs nothing from the host between them. Its input input_ids becomes the
 * session state rlx.next_id, and the argmax of its logits is written back there (the
 * next step's token) and into the state rlx.generated [ctx, 1, 1] at row pos (the ids
 * the host reads back once, after the last step). Its input pos (and positions, read as
 * pos when it has pos's shape) becomes the state rlx.pos (and rlx.positions), which the
 * step's last nodes move on by one. The logits stay an output. */
#include "compile/passes.h"
#include "ir/ops.h"
#include <stdlib.h>
#include <string.h>

static int32_t find_input(const rg_graph *g, const char *name)
{
    for (uint32_t v = 0; v < g->n_values; v++)
        if (g->values[v].kind == RG_INPUT && g->values[v].name && !strcmp(g->values[v].name, name)) return (int32_t)v;
    return -1;
}

/* op(in) into a new value of dtype dt and shape s; -1 when out of memory */
static int32_t add(rg_graph *g, const char *op, const int32_t *in, uint32_t n_in, int dt, const rlx_shape *s,
                   const rlx_attr *a, uint32_t n_a)
{
    int32_t v = rg_add_value(g, RG_TEMP, dt, s, NULL);
    if (v < 0 || rg_add_node(g, op, in, n_in, &v, 1, a, n_a, "greedy decode") < 0) return -1;
    return v;
}

static int32_t reshape(rg_graph *g, int32_t x, uint32_t ndim, const int64_t *dims)
{
    rlx_attr a = RLX_ATTR_V("shape", dims, ndim);
    rlx_shape s = rg_shape(ndim, dims);
    return x < 0 ? -1 : add(g, "rlx.reshape", &x, 1, g->values[x].dtype, &s, &a, 1);
}

static const int64_t one3[3] = {1, 1, 1};

/* input v becomes the session state name */
static int as_state(rg_graph *g, int32_t v, const char *name, rlx_diag *d)
{
    char *nm = strdup(name);
    if (!nm) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    free(g->values[v].name);
    g->values[v].name = nm;
    g->values[v].kind = RG_STATE;
    return 0;
}

/* state (one i32) <- x (one i32): a cache write of one row at row 0, appended last */
static int set_one(rg_graph *g, int32_t state, int32_t x, rlx_diag *d)
{
    rlx_shape one = rg_shape(1, one3), s3 = rg_shape(3, one3);
    int32_t x3 = reshape(g, x, 3, one3), c3 = reshape(g, state, 3, one3);
    int32_t zero = rg_add_value(g, RG_CONST, RLX_I32, &one, NULL);
    if (x3 < 0 || c3 < 0 || zero < 0 || !(g->values[zero].data = calloc(1, sizeof(int32_t))))
        return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    int32_t w[3] = {c3, x3, zero};
    return add(g, "rlx.cache_write", w, 3, RLX_I32, &s3, NULL, 0) < 0 ? rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory") : 0;
}

/* input name (one i32 position) -> state state, written with its value + 1 by the step's
 * last node (schedule priority after every other: its readers all run before it) */
static int own_position(rg_graph *g, const char *name, const char *state, rlx_diag *d)
{
    int32_t v = find_input(g, name);
    if (v < 0) return 0;
    char b[96];
    if (g->values[v].dtype != RLX_I32 || rlx_shape_numel(&g->values[v].shape) != 1)
        return rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "greedy decode on the device: input %s is %s %s, not one i32 position",
                            name, rlx_dtype_name(g->values[v].dtype), rlx_shape_str(&g->values[v].shape, b, sizeof b));
    int rc = as_state(g, v, state, d);
    if (rc) return rc;
    rlx_shape vs = g->values[v].shape;
    rlx_attr a = RLX_ATTR_F("value", 1);
    int32_t next = add(g, "rlx.add_scalar", &v, 1, RLX_I32, &vs, &a, 1);
    if ((rc = set_one(g, v, next, d))) return rc;
    g->nodes[g->n_nodes - 1].pos = UINT32_MAX;
    return 0;
}

int rg_pass_greedy(rg_graph *g, int64_t ctx, rlx_diag *d)
{
    int32_t ids = find_input(g, "input_ids"), pos = find_input(g, "pos");
    uint32_t k = 0;
    while (k < g->n_outputs && strcmp(g->outputs[k].name, "logits")) k++;
    const char *missing = ids < 0 ? "input input_ids" : pos < 0 ? "input pos" : k == g->n_outputs ? "output logits" : NULL;
    if (missing)
        return rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "greedy decode on the device: the decode flow has no %s", missing);
    int32_t lg = g->outputs[k].value;
    const rlx_shape *ls = &g->values[lg].shape;
    int64_t V = ls->ndim ? ls->dims[ls->ndim - 1] : 0;
    char b[96];
    if (g->values[ids].dtype != RLX_I32 || rlx_shape_numel(&g->values[ids].shape) != 1)
        return rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "greedy decode on the device: input input_ids is %s %s, not one i32 id",
                            rlx_dtype_name(g->values[ids].dtype), rlx_shape_str(&g->values[ids].shape, b, sizeof b));
    if (V < 1 || rlx_shape_numel(ls) != V)
        return rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "greedy decode on the device: output logits is %s, not one row",
                            rlx_shape_str(ls, b, sizeof b));
    int rc = as_state(g, ids, "rlx.next_id", d);
    if (rc) return rc;
    rlx_shape one = rg_shape(1, one3), hs = rg_shape(3, (int64_t[]){ctx, 1, 1});
    int32_t row = reshape(g, lg, 2, (int64_t[]){1, V});
    int32_t nid = row < 0 ? -1 : add(g, "rlx.argmax", &row, 1, RLX_I32, &one, NULL, 0);
    int32_t n3 = reshape(g, nid, 3, one3);
    int32_t hist = rg_add_value(g, RG_STATE, RLX_I32, &hs, "rlx.generated");
    int32_t w[3] = {hist, n3, pos};
    if (n3 < 0 || hist < 0 || add(g, "rlx.cache_write", w, 3, RLX_I32, &hs, NULL, 0) < 0)
        return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    if ((rc = set_one(g, ids, nid, d))) return rc;
    /* one token a step: positions holds pos, so its readers read pos (one state to move on) */
    int32_t q = find_input(g, "positions");
    if (q >= 0 && g->values[q].dtype == RLX_I32 && rg_shape_eq(&g->values[q].shape, &g->values[pos].shape)) {
        for (uint32_t i = 0; i < g->n_nodes; i++)
            for (uint32_t j = 0; j < g->nodes[i].n_in; j++)
                if (g->nodes[i].in[j] == q) g->nodes[i].in[j] = pos;
        if (!(g->values[q].data = calloc(1, rg_value_bytes(g, q)))) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
        g->values[q].kind = RG_CONST; /* read by none: left out of the plan */
    }
    if ((rc = own_position(g, "pos", "rlx.pos", d))) return rc;
    return own_position(g, "positions", "rlx.positions", d);
}
