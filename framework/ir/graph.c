/* Graph IR storage: growing arrays of values and nodes, attribute copies. */
#include "ir/graph.h"
#include <stdlib.h>
#include <string.h>

rg_graph *rg_new(void) { return calloc(1, sizeof(rg_graph)); }

static void free_attrs(rlx_attr *a, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        free((char *)a[i].name);
        free((char *)a[i].s);
        free((int64_t *)a[i].ints);
    }
    free(a);
}

static void free_node(rg_node *n)
{
    free(n->op);
    free(n->in);
    free(n->out);
    free(n->where);
    free_attrs(n->attrs, n->n_attrs);
}

void rg_free(rg_graph *g)
{
    if (!g) return;
    for (uint32_t i = 0; i < g->n_values; i++) {
        free(g->values[i].name);
        free(g->values[i].data);
    }
    for (uint32_t i = 0; i < g->n_nodes; i++) free_node(&g->nodes[i]);
    for (uint32_t i = 0; i < g->n_outputs; i++) free(g->outputs[i].name);
    free(g->values);
    free(g->nodes);
    free(g->outputs);
    free(g);
}

static char *dup_or_null(const char *s) { return s ? strdup(s) : NULL; }

int32_t rg_add_value(rg_graph *g, int kind, int dtype, const rlx_shape *shape, const char *name)
{
    if (g->n_values == g->cap_values) {
        uint32_t cap = g->cap_values ? g->cap_values * 2 : 64;
        rg_value *v = realloc(g->values, cap * sizeof *v);
        if (!v) return -1;
        g->values = v;
        g->cap_values = cap;
    }
    rg_value *v = &g->values[g->n_values];
    memset(v, 0, sizeof *v);
    v->kind = kind;
    v->dtype = dtype;
    if (shape) v->shape = *shape;
    v->name = dup_or_null(name);
    if (name && !v->name) return -1;
    v->producer = -1;
    return (int32_t)g->n_values++;
}

/* all or nothing: on failure dst holds no memory */
static int copy_attr(rlx_attr *dst, const rlx_attr *src)
{
    *dst = *src;
    dst->name = dup_or_null(src->name);
    dst->s = dup_or_null(src->s);
    dst->ints = NULL;
    const int ints = src->kind == RLX_ATTR_INTS && src->n_ints;
    int64_t *p = ints ? malloc(src->n_ints * sizeof *p) : NULL;
    if (p) memcpy(p, src->ints, src->n_ints * sizeof *p);
    if ((src->name && !dst->name) || (src->s && !dst->s) || (ints && !p)) {
        free((char *)dst->name);
        free((char *)dst->s);
        free(p);
        return -1;
    }
    dst->ints = p;
    return 0;
}

int32_t rg_add_node(rg_graph *g, const char *op, const int32_t *in, uint32_t n_in,
                    const int32_t *out, uint32_t n_out, const rlx_attr *attrs,
                    uint32_t n_attrs, const char *where)
{
    if (g->n_nodes == g->cap_nodes) {
        uint32_t cap = g->cap_nodes ? g->cap_nodes * 2 : 64;
        rg_node *nn = realloc(g->nodes, cap * sizeof *nn);
        if (!nn) return -1;
        g->nodes = nn;
        g->cap_nodes = cap;
    }
    rg_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->op = strdup(op);
    n->in = malloc((n_in ? n_in : 1) * sizeof(int32_t));
    n->out = malloc((n_out ? n_out : 1) * sizeof(int32_t));
    n->attrs = calloc(n_attrs ? n_attrs : 1, sizeof(rlx_attr));
    n->where = dup_or_null(where);
    if (!n->op || !n->in || !n->out || !n->attrs || (where && !n->where)) {
        free_node(n);
        return -1;
    }
    if (n_in) memcpy(n->in, in, n_in * sizeof(int32_t));
    if (n_out) memcpy(n->out, out, n_out * sizeof(int32_t));
    n->n_in = n_in;
    n->n_out = n_out;
    for (uint32_t i = 0; i < n_attrs; i++) {
        if (copy_attr(&n->attrs[i], &attrs[i]) != 0) {
            n->n_attrs = i;
            free_node(n);
            return -1;
        }
    }
    n->n_attrs = n_attrs;
    n->pos = g->n_nodes;
    for (uint32_t i = 0; i < n_out; i++) g->values[out[i]].producer = (int32_t)g->n_nodes;
    return (int32_t)g->n_nodes++;
}

int rg_add_output(rg_graph *g, const char *name, int32_t value)
{
    rg_output *o = realloc(g->outputs, (g->n_outputs + 1) * sizeof *o);
    if (!o) return -1;
    g->outputs = o;
    o[g->n_outputs].name = strdup(name);
    o[g->n_outputs].value = value;
    if (!o[g->n_outputs].name) return -1;
    g->n_outputs++;
    return 0;
}

size_t rg_value_bytes(const rg_graph *g, int32_t v)
{
    return (size_t)rlx_shape_numel(&g->values[v].shape) * rlx_dtype_size(g->values[v].dtype);
}

const rlx_attr *rg_attr(const rg_node *n, const char *name)
{
    for (uint32_t i = 0; i < n->n_attrs; i++)
        if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
    return NULL;
}

int64_t rg_attr_int(const rg_node *n, const char *name, int64_t def)
{
    const rlx_attr *a = rg_attr(n, name);
    if (!a) return def;
    return a->kind == RLX_ATTR_FLOAT ? (int64_t)a->f : a->i;
}

double rg_attr_float(const rg_node *n, const char *name, double def)
{
    const rlx_attr *a = rg_attr(n, name);
    if (!a) return def;
    return a->kind == RLX_ATTR_INT ? (double)a->i : a->f;
}

int rg_set_attr(rg_node *n, const rlx_attr *a)
{
    for (uint32_t i = 0; i < n->n_attrs; i++) {
        if (strcmp(n->attrs[i].name, a->name) == 0) {
            rlx_attr tmp;
            if (copy_attr(&tmp, a) != 0) return -1;
            free((char *)n->attrs[i].name);
            free((char *)n->attrs[i].s);
            free((int64_t *)n->attrs[i].ints);
            n->attrs[i] = tmp;
            return 0;
        }
    }
    rlx_attr *na = realloc(n->attrs, (n->n_attrs + 1) * sizeof *na);
    if (!na) return -1;
    n->attrs = na;
    if (copy_attr(&na[n->n_attrs], a) != 0) return -1;
    n->n_attrs++;
    return 0;
}

uint32_t *rg_use_counts(const rg_graph *g)
{
    uint32_t *u = calloc(g->n_values ? g->n_values : 1, sizeof *u);
    if (!u) return NULL;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].dead) continue;
        for (uint32_t j = 0; j < g->nodes[i].n_in; j++)
            if (g->nodes[i].in[j] >= 0) u[g->nodes[i].in[j]]++;
    }
    for (uint32_t i = 0; i < g->n_outputs; i++) u[g->outputs[i].value]++;
    return u;
}

void rg_compact_nodes(rg_graph *g)
{
    uint32_t k = 0;
    for (uint32_t i = 0; i < g->n_nodes; i++) {
        if (g->nodes[i].dead) {
            free_node(&g->nodes[i]);
            continue;
        }
        g->nodes[k++] = g->nodes[i];
    }
    g->n_nodes = k;
    for (uint32_t v = 0; v < g->n_values; v++) g->values[v].producer = -1;
    for (uint32_t i = 0; i < g->n_nodes; i++)
        for (uint32_t j = 0; j < g->nodes[i].n_out; j++)
            g->values[g->nodes[i].out[j]].producer = (int32_t)i;
}

int rg_shape_eq(const rlx_shape *a, const rlx_shape *b)
{
    if (a->ndim != b->ndim) return 0;
    for (uint32_t i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i]) return 0;
    return 1;
}

rlx_shape rg_shape(uint32_t ndim, const int64_t *dims)
{
    rlx_shape s;
    memset(&s, 0, sizeof s);
    s.ndim = ndim;
    for (uint32_t i = 0; i < ndim && i < RLX_MAX_DIMS; i++) s.dims[i] = dims[i];
    return s;
}
