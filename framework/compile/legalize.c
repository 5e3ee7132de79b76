/* Legalize: a composite the backend does not list (or refuses in supports_op) is
 * replaced by its decomposition; a primitive it cannot run fails the compile. */
#include "compile/passes.h"
#include "ir/ops.h"
#include <stdlib.h>
#include <string.h>
#include <strings.h>

rlx_value_desc *rg_value_descs(const rg_graph *g)
{
    static const int kinds[] = {[RG_TEMP] = RLX_VALUE_TEMP, [RG_INPUT] = RLX_VALUE_INPUT,
                                [RG_WEIGHT] = RLX_VALUE_WEIGHT, [RG_CONST] = RLX_VALUE_CONST,
                                [RG_STATE] = RLX_VALUE_STATE};
    rlx_value_desc *vd = calloc(g->n_values + 1, sizeof *vd);
    if (!vd) return NULL;
    for (uint32_t i = 0; i < g->n_values; i++) {
        vd[i].struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_value_desc, alias_offset);
        vd[i].kind = kinds[g->values[i].kind];
        vd[i].dtype = g->values[i].dtype;
        vd[i].shape = g->values[i].shape;
        vd[i].name = g->values[i].name;
        vd[i].alias_of = -1;
    }
    return vd;
}

int rg_backend_supports(const rlx_backend *be, const rg_graph *g, const rlx_value_desc *vd,
                        const rg_node *n)
{
    (void)g;
    int listed = 0;
    for (const char *const *o = be->ops; o && *o; o++)
        if (!strcmp(*o, n->op)) listed = 1;
    if (!listed) return 0;
    if (!be->supports_op && !strcmp(n->op, "rlx.cast")) return 1;
    if (!be->supports_op) { /* every float operand in a dtype it lists */
        for (uint32_t j = 0; j < n->n_in + n->n_out; j++) {
            int32_t v = j < n->n_in ? n->in[j] : n->out[j - n->n_in];
            if (v < 0) continue;
            int dt = vd[v].dtype, ok = !(dt == RLX_F32 || dt == RLX_F16 || dt == RLX_BF16);
            for (const char *const *t = be->dtypes; !ok && t && *t; t++)
                ok = !strcasecmp(*t, rlx_dtype_name(dt));
            if (!ok && !(dt == RLX_F32 && !be->dtypes)) return 0;
        }
        return 1;
    }
    rlx_node_desc nd = {(uint32_t)RLX_STRUCT_SIZE(rlx_node_desc, n_attrs), n->op, n->in, n->n_in,
                        n->out, n->n_out, n->attrs, n->n_attrs};
    return be->supports_op(&nd, vd) == 1;
}

int rg_legalize(rg_graph *g, const rlx_backend *be, int unfuse, rg_stats *st, rlx_diag *d)
{
    int rc = 0;
    rlx_value_desc *vd = NULL;
    uint32_t n_vd = 0;
    /* appended decompositions are visited too (a composite may decompose to another) */
    for (uint32_t i = 0; i < g->n_nodes && !rc; i++) {
        if (g->nodes[i].dead || !strcmp(g->nodes[i].op, "rlx.reshape")) continue;
        if (!vd || n_vd != g->n_values) {
            free(vd);
            if (!(vd = rg_value_descs(g))) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
            n_vd = g->n_values;
        }
        const rg_op_def *op = rg_op_find(g->nodes[i].op);
        /* unfuse: run every composite as its primitives, even where a kernel exists */
        /* a collective over several ranks is never its one-rank identity */
        int multi = rg_attr_int(&g->nodes[i], "ranks", 1) > 1;
        if (!(unfuse && op && op->composite && !multi) && rg_backend_supports(be, g, vd, &g->nodes[i])) continue;
        if (!op || !op->composite || multi) {
            rc = rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "backend %s cannot run %s (%s)", be->name,
                              g->nodes[i].op, g->nodes[i].where ? g->nodes[i].where : "?");
            break;
        }
        uint32_t first = g->n_nodes, pos = g->nodes[i].pos;
        if (op->decompose(g, i)) {
            rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
            break;
        }
        g->nodes[i].dead = 1;
        for (uint32_t k = first; k < g->n_nodes; k++) g->nodes[k].pos = pos;
        if (st) st->decomposed++;
    }
    free(vd);
    if (!rc) rg_compact_nodes(g);
    return rc;
}
