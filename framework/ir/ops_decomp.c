/* Decompositions of the composite ops into primitives (docs/OPS.md). New nodes are
 * appended and write the composite's own output values, so consumers are unchanged;
 * the scheduler restores a topological order afterwards. */
#include "ir/ops.h"
#include <string.h>

static int32_t temp_like(rg_graph *g, int32_t like)
{
    rlx_shape s = g->values[like].shape;
    return rg_add_value(g, RG_TEMP, g->values[like].dtype, &s, NULL);
}

static int glu(rg_graph *g, uint32_t node, const char *act)
{
    int32_t gate = g->nodes[node].in[0], up = g->nodes[node].in[1], out = g->nodes[node].out[0];
    char *where = g->nodes[node].where;
    int32_t t = temp_like(g, out);
    if (t < 0 || rg_add_node(g, act, &gate, 1, &t, 1, NULL, 0, where) < 0) return -1;
    int32_t in2[2] = {t, up};
    where = g->nodes[node].where; /* the node array may have moved */
    return rg_add_node(g, "rlx.mul", in2, 2, &out, 1, NULL, 0, where) < 0 ? -1 : 0;
}

int rg_decompose_swiglu(rg_graph *g, uint32_t node) { return glu(g, node, "rlx.silu"); }
int rg_decompose_geglu_tanh(rg_graph *g, uint32_t node) { return glu(g, node, "rlx.gelu_tanh"); }

int rg_decompose_add_rms_norm(rg_graph *g, uint32_t node)
{
    rg_node *n = &g->nodes[node];
    int32_t ab[2] = {n->in[0], n->in[1]}, w = n->in[2], s = n->out[0], y = n->out[1];
    rlx_attr at[2] = {RLX_ATTR_F("eps", rg_attr_float(n, "eps", 1e-6)),
                      RLX_ATTR_I("add_one", rg_attr_int(n, "add_one", 0))};
    char *where = n->where;
    if (rg_add_node(g, "rlx.add", ab, 2, &s, 1, NULL, 0, where) < 0) return -1;
    int32_t sw[2] = {s, w};
    where = g->nodes[node].where;
    return rg_add_node(g, "rlx.rms_norm", sw, 2, &y, 1, at, 2, where) < 0 ? -1 : 0;
}

int rg_decompose_linear_swiglu(rg_graph *g, uint32_t node)
{
    int32_t x = g->nodes[node].in[0], wg = g->nodes[node].in[1], wu = g->nodes[node].in[2];
    int32_t out = g->nodes[node].out[0];
    int32_t a = temp_like(g, out), b = temp_like(g, out);
    if (a < 0 || b < 0) return -1;
    int32_t i1[2] = {x, wg}, i2[2] = {x, wu}, i3[2] = {a, b};
    if (rg_add_node(g, "rlx.matmul", i1, 2, &a, 1, NULL, 0, g->nodes[node].where) < 0) return -1;
    if (rg_add_node(g, "rlx.matmul", i2, 2, &b, 1, NULL, 0, g->nodes[node].where) < 0) return -1;
    /* swiglu stays a composite here: legalize decomposes it too if the backend lacks it */
    return rg_add_node(g, "rlx.swiglu", i3, 2, &out, 1, NULL, 0, g->nodes[node].where) < 0 ? -1 : 0;
}

int rg_decompose_collective(rg_graph *g, uint32_t node)
{
    int32_t x = g->nodes[node].in[0], out = g->nodes[node].out[0];
    return rg_add_node(g, "rlx.copy", &x, 1, &out, 1, NULL, 0, g->nodes[node].where) < 0 ? -1 : 0;
}
