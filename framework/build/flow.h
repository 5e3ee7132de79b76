/* Flows: a tree of stages (blocks with JSON params), repeats, sequences, conditions and
 * custom emitters; built into a graph by build.c. */
#ifndef RLX_FLOW_H
#define RLX_FLOW_H
#include "base/internal.h"

struct json_t;

enum { FI_STAGE, FI_REPEAT, FI_SEQ, FI_WHEN, FI_CUSTOM };

typedef struct rg_flow_item {
    int kind;
    char *name;             /* block / custom name / condition */
    struct json_t *params;  /* FI_STAGE: an object (owned reference) */
    int64_t n;              /* FI_REPEAT count */
    char *n_key;            /* FI_REPEAT from JSON "config:KEY": count read at build */
    rlx_flow *body;         /* FI_REPEAT / FI_SEQ / FI_WHEN */
    rlx_custom_emit_fn fn;  /* FI_CUSTOM */
    void *user;
} rg_flow_item;

typedef struct rg_flow_input {
    char *name;
    int dtype;
    uint32_t ndim;
    int64_t dims[RLX_MAX_DIMS];
    int fill; /* RLX_FILL_*: what the host gives when a caller does not */
} rg_flow_input;

struct rlx_flow {
    char *name;
    rg_flow_input *inputs;
    uint32_t n_inputs;
    rg_flow_item *items;
    uint32_t n_items;
    rlx_flow *open[16]; /* repeat bodies opened by host->flow_repeat_begin */
    int n_open;
    char err[512]; /* first error of a flow_* call */
    const rlx_config *config; /* the model's raw config while a recipe builds it (borrowed) */
    char *origin;             /* the JSON file it was read from, for messages; NULL if built in code */
};

/* Bounds on what a flow unrolls to, so that a repeat count from a file or a config cannot
 * grow a build without end: one repeat runs at most RLX_MAX_LAYERS times (the layer bound
 * of config.json), and one build emits at most RG_FLOW_MAX_STAGES stages (nested repeats). */
#define RG_FLOW_MAX_REPEAT RLX_MAX_LAYERS
#define RG_FLOW_MAX_STAGES (1 << 16)

/* an optional I32 input of shape []: its value is compiled in (RLX_FILL_OPTIONAL) */
static inline int rg_flow_input_scalar(const rg_flow_input *fi)
{
    return fi->fill == RLX_FILL_OPTIONAL && fi->dtype == RLX_I32 && fi->ndim == 0;
}

/* A `when` condition, parsed: [!]phase=P | [!]config:KEY | [!]layer=N | [!]layer=A..B |
 * [!]layer=A.. | [!]layer%M=R, where layer is the innermost repeat's index ({i}). */
enum { FC_PHASE, FC_CONFIG, FC_LAYER };
typedef struct rg_cond {
    int kind, neg;
    int phase;             /* FC_PHASE: RLX_PHASE_* */
    const char *key;       /* FC_CONFIG: points into the parsed string */
    int64_t lo, hi, mod;   /* FC_LAYER: lo <= i <= hi (hi < 0: no end), or i % mod == lo */
} rg_cond;
#define RG_COND_FORMS \
    "phase=prefill|decode|encode, config:KEY, layer=N, layer=A..B, layer=A.., layer%M=R; ! negates"
/* 0 and *out filled when cond is one of the forms above, else -1 */
int rg_flow_cond_parse(const char *cond, rg_cond *out);
/* 0 if cond is one of the forms rlx_flow_when accepts */
int rg_flow_cond_valid(const char *cond);
rlx_flow *rg_flow_clone(const rlx_flow *f);
/* repeat (n_key NULL: n times) / when / sequence item that takes over body (freed on
 * failure too): the JSON loader hands over what it built instead of copying it */
int rg_flow_adopt(rlx_flow *f, int kind, const char *name, int64_t n, const char *n_key,
                  rlx_flow *body);
/* the flow as a JSON flow file's root object (rlx_flow_load_json reads it back);
 * NULL with d set when the flow holds what a file cannot (a custom emitter) */
struct json_t *rg_flow_to_json(const rlx_flow *f, rlx_diag *d);
/* such a root object as a flow file: one stage a line, bodies indented; -1 on a write error */
int rg_flow_json_write(struct json_t *root, FILE *out);
int rg_flow_set_err(rlx_flow *f, const char *fmt, ...) RLX_PRINTF(2, 3);
/* stage with an already-parsed params object (a new reference is taken) */
int rg_flow_stage_json(rlx_flow *f, const char *block, struct json_t *params);


/* host services for arch recipes (plugin.h flow_*) */
int rg_host_flow_stage(rlx_flow *f, const char *block, const char *params_json);
int rg_host_flow_repeat_begin(rlx_flow *f, int64_t n);
int rg_host_flow_repeat_end(rlx_flow *f);
const rlx_config *rg_host_flow_config(rlx_flow *f);
int rg_host_flow_input_fill(rlx_flow *f, const char *name, int32_t fill);
int rg_host_flow_input(rlx_flow *f, const char *name, int32_t dtype, uint32_t ndim, const int64_t *dims);
#endif
