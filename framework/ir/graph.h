/* The graph IR: values (tensors with shape, dtype and a kind) and nodes (named ops),
 * as blocks emit them and as the passes rewrite them before planning. */
#ifndef RLX_GRAPH_H
#define RLX_GRAPH_H
#include "base/internal.h"

/* What a graph value is before planning (the program's kinds are derived from it). */
enum {
    RG_TEMP = 0,   /* produced by a node */
    RG_INPUT = 1,  /* flow input, bound per call */
    RG_WEIGHT = 2, /* checkpoint tensor, by name */
    RG_CONST = 3,  /* block constant, data owned by the graph */
    RG_STATE = 4   /* session buffer (KV cache), by name */
};

typedef struct rg_value {
    int kind;
    int dtype;
    rlx_shape shape;
    char *name;     /* inputs, weights, states; NULL for temps and consts */
    void *data;     /* RG_CONST: owned bytes */
    int32_t producer; /* node index for RG_TEMP, -1 otherwise */
    /* RG_WEIGHT of one tensor-parallel rank: RG_SPLIT_ROWS / _COLS binds only rows or
     * columns [split_lo, split_hi) of the checkpoint tensor (0: all of it) */
    int split;
    int64_t split_lo, split_hi;
} rg_value;

enum { RG_SPLIT_NONE = 0, RG_SPLIT_ROWS = 1, RG_SPLIT_COLS = 2 };

typedef struct rg_node {
    char *op;
    int32_t *in;
    uint32_t n_in;
    int32_t *out;
    uint32_t n_out;
    rlx_attr *attrs; /* owned deep copies (names, strings, int arrays) */
    uint32_t n_attrs;
    char *where;  /* the stage that emitted it, for messages */
    int dead;     /* removed by a pass */
    int fused;    /* formed by the fusion pass */
    uint32_t pos; /* schedule priority: emission position of what it replaces */
} rg_node;

typedef struct rg_output {
    char *name;
    int32_t value;
} rg_output;

typedef struct rg_graph {
    rg_value *values;
    uint32_t n_values, cap_values;
    rg_node *nodes;
    uint32_t n_nodes, cap_nodes;
    rg_output *outputs;
    uint32_t n_outputs;
} rg_graph;

rg_graph *rg_new(void);
void rg_free(rg_graph *g);
/* Returns the new value id, -1 on allocation failure. name is copied. */
int32_t rg_add_value(rg_graph *g, int kind, int dtype, const rlx_shape *shape, const char *name);
/* Appends a node; outputs must already exist (their producer is set). Returns the
 * node index or -1. attrs are deep-copied. */
int32_t rg_add_node(rg_graph *g, const char *op, const int32_t *in, uint32_t n_in,
                    const int32_t *out, uint32_t n_out, const rlx_attr *attrs,
                    uint32_t n_attrs, const char *where);
int rg_add_output(rg_graph *g, const char *name, int32_t value);
size_t rg_value_bytes(const rg_graph *g, int32_t v);
const rlx_attr *rg_attr(const rg_node *n, const char *name);
int64_t rg_attr_int(const rg_node *n, const char *name, int64_t def);
double rg_attr_float(const rg_node *n, const char *name, double def);
/* Sets (adds or replaces) an attribute on a node. */
int rg_set_attr(rg_node *n, const rlx_attr *a);
/* uses[v] = number of live nodes reading v (plus graph outputs); caller frees. */
uint32_t *rg_use_counts(const rg_graph *g);
/* Drops dead nodes, keeping order. */
void rg_compact_nodes(rg_graph *g);
int rg_shape_eq(const rlx_shape *a, const rlx_shape *b);
rlx_shape rg_shape(uint32_t ndim, const int64_t *dims);
#endif
