/* Precision: the profile's precision.compute (f32 | f16 | bf16) and precision.mixed
 * (none | auto) turned into value dtypes, then casts (rlx.cast) wherever the backend
 * cannot run a node in the dtypes it was given.
 *
 * compute f32: nothing changes (the exact reference path).
 * compute f16/bf16, mixed auto: the matmul and embedding weights are bound in the
 *   compute dtype; every activation, state and the rest of the weights stay f32.
 * compute f16/bf16, mixed none: as auto, and every float intermediate and state (the
 *   KV cache) is in the compute dtype too; graph outputs (logits) stay f32. Norm and
 *   bias vectors stay f32. Kernels accumulate in f32 whatever they read.
 * A node a block marks with the int attribute "f32" = 1 keeps its float outputs in f32
 * whatever the compute dtype (what the reference computes in f32: sinusoidal timestep
 * angles, position ids, additive masks). An rlx.cast a block emitted converts to the
 * dtype its output ends up with.
 * Blocks emit in f32; this pass runs after fusion, before legalisation. */
#include "compile/passes.h"
#include "ir/ops.h"
#include <stdlib.h>
#include <string.h>

static int is_float(int dt) { return dt == RLX_F32 || dt == RLX_F16 || dt == RLX_BF16; }

int rg_precision_dtype(const rlx_profile *pr)
{
    if (!strcmp(pr->precision.compute, "bf16")) return RLX_BF16;
    if (!strcmp(pr->precision.compute, "f16")) return RLX_F16;
    return RLX_F32;
}

/* weight v is read only as a matmul/linear_swiglu weight or an embedding table */
static int matrix_weight(const rg_graph *g, int32_t v)
{
    if (g->values[v].shape.ndim != 2) return 0;
    int used = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        const rg_node *n = &g->nodes[i];
        if (n->dead) continue;
        for (uint32_t j = 0; j < n->n_in; j++) {
            if (n->in[j] != v) continue;
            int ok = (!strcmp(n->op, "rlx.matmul") && j == 1) ||
                     (!strcmp(n->op, "rlx.linear_swiglu") && (j == 1 || j == 2)) ||
                     (!strcmp(n->op, "rlx.embedding") && j == 0);
            if (!ok) return 0;
            used = 1;
        }
    }
    return used;
}

int rg_pass_precision(rg_graph *g, const rlx_profile *pr, rg_stats *st, rlx_diag *d)
{
    int c = rg_precision_dtype(pr);
    if (c == RLX_F32) return 0;
    int all = strcmp(pr->precision.mixed, "auto") != 0;
    uint8_t *keep = calloc(g->n_values + 1, 1); /* stays f32: a graph output or pinned */
    if (!keep) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < g->n_outputs; i++) keep[g->outputs[i].value] = 1;
    for (uint32_t i = 0; i < g->n_nodes; i++)
        for (uint32_t j = 0; !g->nodes[i].dead && rg_attr_int(&g->nodes[i], "f32", 0) && j < g->nodes[i].n_out; j++)
            keep[g->nodes[i].out[j]] = 1;
    for (uint32_t v = 0; v < g->n_values; v++) {
        rg_value *x = &g->values[v];
        if (x->dtype != RLX_F32) continue;
        if (x->kind == RG_WEIGHT && matrix_weight(g, (int32_t)v)) x->dtype = c;
        else if (all && (x->kind == RG_STATE || (x->kind == RG_TEMP && !keep[v]))) x->dtype = c;
    }
    free(keep);
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        rg_node *n = &g->nodes[i];
        if (n->dead || !n->n_out) continue;
        /* a reshape is an alias: its output has its input's dtype */
        if (!strcmp(n->op, "rlx.reshape")) g->values[n->out[0]].dtype = g->values[n->in[0]].dtype;
        /* an emitted cast converts to what its output became */
        int dt = g->values[n->out[0]].dtype;
        rlx_attr a = RLX_ATTR_I("dtype", dt);
        if (!strcmp(n->op, "rlx.cast") && rg_attr_int(n, "dtype", dt) != dt && rg_set_attr(n, &a))
            return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    }
    (void)st;
    return 0;
}

/* a new value of v's shape in dtype dt, written by a cast node at schedule position pos */
static int32_t add_cast(rg_graph *g, int32_t v, int dt, uint32_t pos, const char *where, int32_t into)
{
    rlx_shape s = g->values[v].shape;
    int32_t o = into >= 0 ? into : rg_add_value(g, RG_TEMP, dt, &s, NULL);
    if (o < 0) return -1;
    rlx_attr a = RLX_ATTR_I("dtype", dt);
    int32_t k = rg_add_node(g, "rlx.cast", &v, 1, &o, 1, &a, 1, where);
    if (k < 0) return -1;
    g->nodes[k].pos = pos;
    return o;
}

static void dtypes_str(const rg_graph *g, const rg_node *n, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = 0;
    for (uint32_t j = 0; j < n->n_in + n->n_out && o + 1 < len; j++) {
        int32_t v = j < n->n_in ? n->in[j] : n->out[j - n->n_in];
        int w = snprintf(buf + o, len - o, "%s%s", j == n->n_in ? " -> " : j ? "," : "",
                         v >= 0 ? rlx_dtype_name(g->values[v].dtype) : "-");
        if (w < 0) break;
        o += (size_t)w;
    }
}

int rg_pass_casts(rg_graph *g, const rlx_backend *be, int must, rg_stats *st, rlx_diag *d)
{
    rlx_value_desc *vd = NULL;
    uint32_t n_vd = 0;
    int rc = 0;
    uint32_t n_nodes = g->n_nodes; /* the casts appended here need no visit */
    for (uint32_t i = 0; i < n_nodes && !rc; i++) {
        rg_node *n = &g->nodes[i];
        if (n->dead || !strcmp(n->op, "rlx.reshape") || !strcmp(n->op, "rlx.cast")) continue;
        if (!vd || n_vd != g->n_values) {
            free(vd);
            if (!(vd = rg_value_descs(g))) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
            n_vd = g->n_values;
        }
        if (rg_backend_supports(be, g, vd, n)) continue;
        int any = 0;
        for (uint32_t j = 0; j < n->n_in + n->n_out; j++) {
            int32_t v = j < n->n_in ? n->in[j] : n->out[j - n->n_in];
            if (v >= 0 && is_float(g->values[v].dtype) && g->values[v].dtype != RLX_F32) any = 1;
        }
        if (!any) {
            if (must && rg_op_find(n->op) && !rg_op_find(n->op)->composite)
                rc = rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "backend %s cannot run %s (%s)", be->name, n->op,
                                  n->where ? n->where : "?");
            continue; /* a composite the backend lacks: legalisation decomposes it */
        }
        /* try it in f32: vd copies the graph's dtypes, so flip them there first */
        rlx_value_desc *tv = rg_value_descs(g);
        if (!tv) {
            rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
            break;
        }
        for (uint32_t j = 0; j < n->n_in + n->n_out; j++) {
            int32_t v = j < n->n_in ? n->in[j] : n->out[j - n->n_in];
            if (v >= 0 && is_float(tv[v].dtype)) tv[v].dtype = RLX_F32;
        }
        int ok32 = rg_backend_supports(be, g, tv, n), has_cast = 0;
        free(tv);
        for (const char *const *o = be->ops; o && *o; o++) has_cast |= !strcmp(*o, "rlx.cast");
        if (ok32 && !has_cast) {
            char dt[256];
            dtypes_str(g, n, dt, sizeof dt);
            rc = rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "backend %s cannot run %s in %s and has no rlx.cast to run it in F32 (%s)",
                              be->name, n->op, dt, n->where ? n->where : "?");
            break;
        }
        if (!ok32) {
            if (must) {
                char dt[256];
                dtypes_str(g, n, dt, sizeof dt);
                rc = rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "backend %s cannot run %s in %s, nor in f32 (%s)",
                                  be->name, n->op, dt, n->where ? n->where : "?");
            }
            continue;
        }
        uint32_t pos = n->pos;
        const char *where = n->where;
        for (uint32_t j = 0; j < g->nodes[i].n_in && !rc; j++) { /* n dangles once add_cast grows the nodes */
            int32_t v = g->nodes[i].in[j];
            if (v < 0 || !is_float(g->values[v].dtype) || g->values[v].dtype == RLX_F32) continue;
            int32_t c = add_cast(g, v, RLX_F32, pos, where, -1);
            if (c < 0) rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
            else g->nodes[i].in[j] = c, st->casts++;
        }
        for (uint32_t j = 0; j < g->nodes[i].n_out && !rc; j++) {
            int32_t v = g->nodes[i].out[j];
            if (!is_float(g->values[v].dtype) || g->values[v].dtype == RLX_F32) continue;
            rlx_shape s = g->values[v].shape;
            int32_t t = rg_add_value(g, RG_TEMP, RLX_F32, &s, NULL);
            if (t < 0) {
                rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
                break;
            }
            g->nodes[i].out[j] = t;
            g->values[t].producer = (int32_t)i;
            if (add_cast(g, t, g->values[v].dtype, pos, where, v) < 0) rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
            else st->casts++;
        }
    }
    free(vd);
    return rc;
}

/* graph outputs are f32 whatever the compute dtype (logits, hidden states) */
int rg_pass_f32_outputs(rg_graph *g, rg_stats *st, rlx_diag *d)
{
    for (uint32_t i = 0; i < g->n_outputs; i++) {
        int32_t v = g->outputs[i].value;
        if (!is_float(g->values[v].dtype) || g->values[v].dtype == RLX_F32) continue;
        int32_t p = g->values[v].producer;
        uint32_t pos = p >= 0 ? g->nodes[p].pos : g->n_nodes;
        int32_t c = add_cast(g, v, RLX_F32, pos, p >= 0 ? g->nodes[p].where : NULL, -1);
        if (c < 0) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
        g->outputs[i].value = c;
        st->casts++;
    }
    return 0;
}
