/* Last-row output: when the caller reads only one row of an output [T, N] (a prefill that
 * wants the next token's logits), take that row as early as the graph allows. The row
 * is moved up through row-local ops (output row t depends on input row t and on
 * row-free operands: weights, constants and what is computed from them only), so the
 * final norm and the vocabulary projection run on one row instead of T. The row index is
 * the input out_row ([1] i32): prefills padded to a length bucket keep their last real row. */
#include "compile/passes.h"
#include "ir/ops.h"
#include <stdlib.h>
#include <string.h>

/* ops whose output row t reads row t of input 0 (and row-free other inputs) only */
static int row_local(const rg_graph *g, const rg_node *n)
{
    static const char *const ops[] = {"rlx.matmul", "rlx.matmul_nn", "rlx.rms_norm", "rlx.layer_norm",
                                      "rlx.softcap", "rlx.scale", "rlx.add_scalar", "rlx.silu",
                                      "rlx.gelu", "rlx.gelu_tanh", "rlx.tanh", "rlx.relu",
                                      "rlx.cast", "rlx.copy", "rlx.softmax", "rlx.all_reduce",
                                      "rlx.add", "rlx.sub", "rlx.mul", NULL};
    for (int i = 0; ops[i]; i++)
        if (!strcmp(n->op, ops[i])) return 1;
    /* gathering ranks' slices along the last axis keeps rows apart */
    if (!strcmp(n->op, "rlx.all_gather")) {
        int64_t ax = rg_attr_int(n, "axis", -1), nd = g->values[n->in[0]].shape.ndim;
        return ax == -1 || ax == nd - 1;
    }
    return 0;
}

/* rowfree[v]: v does not depend on any input or state (so it has no token rows) */
static uint8_t *row_free(const rg_graph *g)
{
    uint8_t *rf = calloc(g->n_values + 1, 1);
    if (!rf) return NULL;
    for (uint32_t v = 0; v < g->n_values; v++)
        rf[v] = g->values[v].kind == RG_WEIGHT || g->values[v].kind == RG_CONST;
    /* built nodes are in emission order, which is topological */
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const rg_node *n = &g->nodes[i];
        if (n->dead) continue;
        int free_ = 1;
        for (uint32_t j = 0; j < n->n_in && free_; j++) free_ = rf[n->in[j]];
        for (uint32_t j = 0; j < n->n_out; j++) rf[n->out[j]] = (uint8_t)free_;
    }
    return rf;
}

/* the row operand of n (the one input with token rows) when every other input is row-free
 * and broadcasts along rows; -1 otherwise */
static int row_operand(const rg_graph *g, const rg_node *n, const uint8_t *rf)
{
    int r = -1;
    for (uint32_t j = 0; j < n->n_in; j++) {
        if (rf[n->in[j]]) {
            const rlx_shape *s = &g->values[n->in[j]].shape;
            /* a [T, N] constant would pair row t with row t: not a broadcast */
            if (s->ndim >= 2 && s->dims[0] != 1 && strstr(n->op, "matmul") == NULL) return -1;
            continue;
        }
        if (r >= 0) return -1;
        r = (int)j;
    }
    /* matmul's weight is input 1: only x (input 0) carries rows */
    if (r != 0 && strstr(n->op, "matmul")) return -1;
    return r;
}

static int has_rows(const rg_graph *g, int32_t v, int64_t T)
{
    const rg_value *x = &g->values[v];
    return x->kind == RG_TEMP && x->shape.ndim == 2 && x->shape.dims[0] == T;
}

int rg_pass_last_row(rg_graph *g, const char *output, int64_t T, rlx_diag *d)
{
    uint32_t k = 0;
    while (k < g->n_outputs && strcmp(g->outputs[k].name, output)) k++;
    if (k == g->n_outputs || T < 2 || !has_rows(g, g->outputs[k].value, T)) return 0;
    uint32_t *uses = rg_use_counts(g);
    uint8_t *rf = row_free(g);
    uint32_t *chain = malloc((g->n_nodes + 1) * sizeof *chain);
    int rc = 0;
    if (!uses || !rf || !chain) {
        rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
        goto out;
    }
    /* walk up from the output while the producer is row-local and its row operand has no
     * other reader; chain[] lists the nodes from the output upwards */
    uint32_t n_chain = 0;
    /* the output itself must have no reader but the caller to shrink */
    int32_t top = uses[g->outputs[k].value] == 1 ? g->values[g->outputs[k].value].producer : -1;
    int32_t x = g->outputs[k].value; /* the value the row is taken from */
    while (top >= 0) {
        const rg_node *n = &g->nodes[top];
        if (n->n_out != 1 || !row_local(g, n)) break;
        int r = row_operand(g, n, rf);
        if (r < 0 || !has_rows(g, n->in[r], T)) break;
        chain[n_chain++] = (uint32_t)top;
        x = n->in[r];
        if (uses[x] != 1) break;
        top = g->values[x].producer;
    }
    rlx_shape one = rg_shape(1, (int64_t[]){1});
    int32_t idx = rg_add_value(g, RG_INPUT, RLX_I32, &one, "out_row");
    rlx_shape rs = g->values[x].shape;
    rs.dims[0] = 1;
    int32_t row = idx < 0 ? -1 : rg_add_value(g, RG_TEMP, g->values[x].dtype, &rs, NULL);
    int32_t lin[2] = {x, idx};
    uint32_t pos = n_chain ? g->nodes[chain[n_chain - 1]].pos : g->n_nodes;
    int32_t ln = row < 0 ? -1 : rg_add_node(g, "rlx.last_row", lin, 2, &row, 1, NULL, 0, "last_row");
    if (ln < 0) {
        rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
        goto out;
    }
    g->nodes[ln].pos = pos;
    if (!n_chain) {
        g->outputs[k].value = row;
        goto out;
    }
    /* the top node reads the row; every node down the chain shrinks to one row */
    rg_node *t = &g->nodes[chain[n_chain - 1]];
    for (uint32_t j = 0; j < t->n_in; j++)
        if (t->in[j] == x) t->in[j] = row;
    for (uint32_t c = n_chain; c-- > 0;) {
        char err[480];
        if (rg_op_reinfer(g, chain[c], err, sizeof err)) {
            const char *where = g->nodes[chain[c]].where;
            rc = rlx_diag_set(d, RLX_ERR_INTERNAL, "last-row pass (%s): %s", where ? where : "?", err);
            goto out;
        }
    }
out:
    free(uses);
    free(rf);
    free(chain);
    return rc;
}
