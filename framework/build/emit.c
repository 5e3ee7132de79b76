/* Graph emission services of the host table (tier 2): blocks and custom stages add
 * inputs, weights, constants, states and ops through these; shapes are inferred and
 * checked here so a bad block fails with the stage, the op and the shapes. */
#include "build/emit.h"
#include "build/flow.h"
#include "ir/ops.h"
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int32_t rg_map_get(const rg_map *m, const char *name)
{
    for (uint32_t i = 0; i < m->n; i++)
        if (strcmp(m->e[i].name, name) == 0) return m->e[i].v;
    return -1;
}

int rg_map_set(rg_map *m, const char *name, int32_t v)
{
    for (uint32_t i = 0; i < m->n; i++)
        if (strcmp(m->e[i].name, name) == 0) {
            m->e[i].v = v;
            return 0;
        }
    rg_name_val *e = realloc(m->e, (m->n + 1) * sizeof *e);
    if (!e) return RLX_ERR_NOMEM;
    m->e = e;
    if (!(e[m->n].name = strdup(name))) return RLX_ERR_NOMEM;
    e[m->n++].v = v;
    return 0;
}

void rg_map_free(rg_map *m)
{
    for (uint32_t i = 0; i < m->n; i++) free(m->e[i].name);
    free(m->e);
    m->e = NULL;
    m->n = 0;
}

static int vfail(rlx_ctx *c, int code, int prefix, const char *fmt, va_list ap)
{
    if (c->failed) return code;
    char msg[900];
    vsnprintf(msg, sizeof msg, fmt, ap);
    c->failed = code;
    if (prefix) rlx_diag_set(c->d, code, "%s: %s", c->where, msg);
    else rlx_diag_set(c->d, code, "%s", msg);
    return code;
}

int rg_ctx_fail(rlx_ctx *c, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail(c, RLX_ERR_INVALID, 1, fmt, ap);
    va_end(ap);
    return rc;
}

int rg_ctx_fail_raw(rlx_ctx *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail(c, code, 0, fmt, ap);
    va_end(ap);
    return rc;
}

static int host_fail(rlx_ctx *c, const char *fmt, ...)
{
    if (!c) return RLX_ERR_INVALID;
    va_list ap;
    va_start(ap, fmt);
    int rc = vfail(c, RLX_ERR_INVALID, 1, fmt, ap);
    va_end(ap);
    return rc;
}

static int shape_ok(const rlx_shape *s)
{
    if (!s || s->ndim > RLX_MAX_DIMS) return 0;
    for (uint32_t i = 0; i < s->ndim; i++)
        if (s->dims[i] < 0) return 0;
    return 1;
}

static int32_t emit_input(rlx_ctx *c, const char *name, int32_t dtype, const rlx_shape *shape)
{
    if (!c || c->failed) return -1;
    if (!name || !*name) return rg_ctx_fail(c, "emit_input: a name is required"), -1;
    if (!shape || shape->ndim > RLX_MAX_DIMS || dtype < 0 || dtype >= RLX_DTYPE_COUNT)
        return rg_ctx_fail(c, "input %s: bad dtype or shape", name), -1;
    rlx_shape s = *shape;
    for (uint32_t i = 0; i < s.ndim; i++) {
        if (s.dims[i] == -1) s.dims[i] = c->T;
        if (s.dims[i] == -2) s.dims[i] = c->ctx_len; /* S: the second length (flux text) */
        if (s.dims[i] < 0) return rg_ctx_fail(c, "input %s: bad dim %lld", name, (long long)s.dims[i]), -1;
    }
    int32_t v = rg_map_get(&c->inputs, name);
    if (v >= 0) {
        char a[96], b[96];
        if (!rg_shape_eq(&c->g->values[v].shape, &s) || c->g->values[v].dtype != dtype)
            return rg_ctx_fail(c, "input %s: declared as %s %s, asked as %s %s", name,
                               rlx_dtype_name(c->g->values[v].dtype),
                               rlx_shape_str(&c->g->values[v].shape, a, sizeof a),
                               rlx_dtype_name(dtype), rlx_shape_str(&s, b, sizeof b)), -1;
        return v;
    }
    v = rg_add_value(c->g, RG_INPUT, dtype, &s, name);
    if (v < 0 || rg_map_set(&c->inputs, name, v)) return rg_ctx_fail_raw(c, RLX_ERR_NOMEM, "out of memory"), -1;
    return v;
}

static int32_t weight(rlx_ctx *c, const char *name, const rlx_shape *expect, int optional)
{
    if (!c || c->failed) return -1;
    if (!name || !*name) return rg_ctx_fail(c, "emit_weight: a name is required"), -1;
    int32_t v = rg_map_get(&c->weights, name);
    char a[96], b[96];
    if (v < 0) {
        const rlx_shape *shape = expect;
        if (c->env->record_weights) {
            /* no checkpoint to read a shape from: the block's expectation is the shape */
            if (!expect)
                return rg_ctx_fail_raw(c, RLX_ERR_UNSUPPORTED,
                                       "tensor %s: its block gives no expected shape, so it cannot be "
                                       "listed from the config alone", name), -1;
        } else {
            /* headers only: the runtime converts and uploads what survives the passes */
            const rlx_tensor_info *t = c->env->weights ? rlx_weights_find(c->env->weights, name) : NULL;
            if (!t && optional) return -1;
            if (!t)
                return rg_ctx_fail_raw(c, RLX_ERR_NOT_FOUND, "tensor %s: not in the checkpoint (%s)", name,
                                       rlx__weights_origin(c->env->weights, NULL)), -1;
            if (expect && !rg_shape_eq(expect, &t->shape))
                return rg_ctx_fail_raw(c, RLX_ERR_INVALID, "tensor %s: expected %s, found %s (%s)", name,
                                       rlx_shape_str(expect, a, sizeof a), rlx_shape_str(&t->shape, b, sizeof b),
                                       rlx__weights_origin(c->env->weights, t)), -1;
            shape = &t->shape;
        }
        v = rg_add_value(c->g, RG_WEIGHT, RLX_F32, shape, name);
        if (v < 0 || rg_map_set(&c->weights, name, v))
            return rg_ctx_fail_raw(c, RLX_ERR_NOMEM, "out of memory"), -1;
        return v;
    }
    /* emitted before in this graph (tied embeddings): one value, checked again */
    if (expect && !rg_shape_eq(expect, &c->g->values[v].shape)) {
        return rg_ctx_fail_raw(c, RLX_ERR_INVALID, "tensor %s: expected %s, found %s (%s)", name,
                               rlx_shape_str(expect, a, sizeof a),
                               rlx_shape_str(&c->g->values[v].shape, b, sizeof b),
                               rlx__weights_origin(c->env->weights, rlx_weights_find(c->env->weights, name))), -1;
    }
    return v;
}

static int32_t emit_weight(rlx_ctx *c, const char *name, const rlx_shape *expect)
{
    return weight(c, name, expect, 0);
}

static int32_t emit_weight_opt(rlx_ctx *c, const char *name, const rlx_shape *expect)
{
    return weight(c, name, expect, 1);
}

static int32_t emit_const(rlx_ctx *c, int32_t dtype, const rlx_shape *shape, const void *data)
{
    if (!c || c->failed) return -1;
    if (!shape_ok(shape) || dtype < 0 || dtype >= RLX_DTYPE_COUNT || !data)
        return rg_ctx_fail(c, "emit_const: bad dtype, shape or data"), -1;
    int32_t v = rg_add_value(c->g, RG_CONST, dtype, shape, NULL);
    if (v < 0) return rg_ctx_fail_raw(c, RLX_ERR_NOMEM, "out of memory"), -1;
    size_t bytes = rg_value_bytes(c->g, v);
    void *p = malloc(bytes ? bytes : 1);
    if (!p) return rg_ctx_fail_raw(c, RLX_ERR_NOMEM, "out of memory"), -1;
    memcpy(p, data, bytes);
    c->g->values[v].data = p;
    return v;
}

static int32_t emit_state(rlx_ctx *c, const char *name, int32_t dtype, const rlx_shape *shape)
{
    if (!c || c->failed) return -1;
    if (!name || !*name || !shape_ok(shape) || dtype < 0 || dtype >= RLX_DTYPE_COUNT)
        return rg_ctx_fail(c, "emit_state %s: bad name, dtype or shape", name ? name : ""), -1;
    int32_t v = rg_map_get(&c->states, name);
    if (v >= 0) {
        char a[96], b[96];
        rlx_shape want = *shape;
        if (c->batch && rg_batch_state_shape(c, name, &want)) return -1;
        if (!rg_shape_eq(&want, &c->g->values[v].shape) || dtype != c->g->values[v].dtype)
            return rg_ctx_fail(c, "state %s: emitted as %s and as %s", name,
                               rlx_shape_str(&c->g->values[v].shape, a, sizeof a),
                               rlx_shape_str(shape, b, sizeof b)), -1;
        return v;
    }
    rlx_shape bs = *shape;
    if (c->batch && rg_batch_state_shape(c, name, &bs)) return -1;
    v = rg_add_value(c->g, RG_STATE, dtype, &bs, name);
    if (v < 0 || rg_map_set(&c->states, name, v)) return rg_ctx_fail_raw(c, RLX_ERR_NOMEM, "out of memory"), -1;
    return v;
}

int32_t rg_emit_op_at(rlx_ctx *c, const char *opname, const int32_t *inputs, uint32_t n_in,
                      const rlx_attr *attrs, uint32_t n_attrs, int32_t *outs, uint32_t n_outs)
{
    if (!c || c->failed) return -1;
    const rg_op_def *op = rg_op_find(opname);
    if (!op) return rg_ctx_fail(c, "unknown op \"%s\" (docs/OPS.md lists the core ops)", opname ? opname : ""), -1;
    if (n_in < op->min_in || n_in > op->max_in || (n_in && !inputs))
        return rg_ctx_fail(c, "%s: takes %u to %u inputs, got %u", op->name, op->min_in, op->max_in, n_in), -1;
    if (n_attrs && !attrs) return rg_ctx_fail(c, "%s: attrs missing", op->name), -1;
    for (uint32_t i = 0; i < n_attrs; i++)
        if (!attrs[i].name || attrs[i].kind < 0 || attrs[i].kind > RLX_ATTR_INTS ||
            (attrs[i].kind == RLX_ATTR_INTS && attrs[i].n_ints && !attrs[i].ints))
            return rg_ctx_fail(c, "%s: attribute %u is malformed", op->name, i), -1;
    int32_t in[8];
    uint32_t skip = UINT32_MAX;
    /* attention (q, k, v, -1, mask): a mask without pos, node (q, k, v, mask); the F32
     * fourth input is told from an I32 pos by its dtype (docs/OPS.md) */
    if (n_in == 5 && inputs[3] == -1 && !strcmp(op->name, "rlx.attention")) skip = 3, n_in = 4;
    for (uint32_t i = 0; i < n_in; i++) {
        in[i] = inputs[i < skip ? i : i + 1];
        if (in[i] < 0 || (uint32_t)in[i] >= c->g->n_values)
            return rg_ctx_fail(c, "%s: input %u is not a value (%d)", op->name, i, in[i]), -1;
    }
    if (c->batch) {
        const char *bop = rg_batch_op(c, op->name, in, &n_in);
        if (!bop) return -1;
        op = rg_op_find(bop);
    }
    rg_node tmp;
    memset(&tmp, 0, sizeof tmp);
    tmp.op = (char *)op->name;
    tmp.in = in;
    tmp.n_in = n_in;
    tmp.attrs = (rlx_attr *)attrs;
    tmp.n_attrs = n_attrs;
    rlx_shape shapes[RG_MAX_OUT];
    int dtypes[RG_MAX_OUT];
    char err[600];
    memset(shapes, 0, sizeof shapes);
    if (op->infer(c->g, &tmp, shapes, dtypes, err, sizeof err))
        return rg_ctx_fail(c, "%s: %s", op->name, err), -1;
    int32_t out[RG_MAX_OUT];
    for (uint32_t i = 0; i < op->n_out; i++)
        if ((out[i] = rg_add_value(c->g, RG_TEMP, dtypes[i], &shapes[i], NULL)) < 0)
            return rg_ctx_fail_raw(c, RLX_ERR_NOMEM, "out of memory"), -1;
    int32_t node = rg_add_node(c->g, op->name, in, n_in, out, op->n_out, attrs, n_attrs, c->where);
    if (node < 0 || rg_op_normalize(c->g, (uint32_t)node))
        return rg_ctx_fail_raw(c, RLX_ERR_NOMEM, "out of memory"), -1;
    if (outs) {
        if (n_outs != op->n_out)
            return rg_ctx_fail(c, "%s: has %u outputs, asked for %u", op->name, op->n_out, n_outs), -1;
        for (uint32_t i = 0; i < n_outs; i++) outs[i] = out[i];
    }
    return out[0];
}

static int32_t emit_op(rlx_ctx *c, const char *op, const int32_t *inputs, uint32_t n_inputs,
                       const rlx_attr *attrs, uint32_t n_attrs)
{
    return rg_emit_op_at(c, op, inputs, n_inputs, attrs, n_attrs, NULL, 0);
}

static int emit_op_n(rlx_ctx *c, const char *op, const int32_t *inputs, uint32_t n_inputs,
                     const rlx_attr *attrs, uint32_t n_attrs, int32_t *outs, uint32_t n_outs)
{
    if (!outs) return c ? rg_ctx_fail(c, "emit_op_n: outs is NULL") : RLX_ERR_INVALID;
    return rg_emit_op_at(c, op, inputs, n_inputs, attrs, n_attrs, outs, n_outs) < 0 ? RLX_ERR_INVALID : 0;
}

static int valid_value(rlx_ctx *c, int32_t v) { return v >= 0 && (uint32_t)v < c->g->n_values; }

static int emit_output(rlx_ctx *c, const char *name, int32_t value)
{
    if (!c) return RLX_ERR_INVALID;
    if (c->failed) return c->failed;
    if (!name || !*name || !valid_value(c, value))
        return rg_ctx_fail(c, "output %s: not a value (%d)", name ? name : "", value);
    for (uint32_t i = 0; i < c->g->n_outputs; i++)
        if (strcmp(c->g->outputs[i].name, name) == 0)
            return rg_ctx_fail(c, "output %s: emitted twice", name);
    return rg_add_output(c->g, name, value) ? rg_ctx_fail_raw(c, RLX_ERR_NOMEM, "out of memory") : 0;
}

static int value_info(rlx_ctx *c, int32_t v, rlx_shape *shape, int32_t *dtype)
{
    if (!c || !valid_value(c, v)) return RLX_ERR_INVALID;
    if (shape) *shape = c->g->values[v].shape;
    if (dtype) *dtype = c->g->values[v].dtype;
    return 0;
}

static int32_t slot_get(rlx_ctx *c, const char *slot) { return c && slot ? rg_map_get(&c->slots, slot) : -1; }

static int slot_set(rlx_ctx *c, const char *slot, int32_t value)
{
    if (!c) return RLX_ERR_INVALID;
    if (c->failed) return c->failed;
    if (!slot || !*slot || !valid_value(c, value))
        return rg_ctx_fail(c, "slot %s: not a value (%d)", slot ? slot : "", value);
    return rg_map_set(&c->slots, slot, value);
}

static const rlx_model_config *model_config(rlx_ctx *c) { return c ? c->env->cfg : NULL; }

static int config_number(rlx_ctx *c, const char *key, double *out)
{
    if (!c || !key || !out) return RLX_ERR_INVALID;
    return rg_config_lookup(c->env, key, out);
}

static const char *fusion_policy(rlx_ctx *c)
{
    if (!c) return "direct";
    return c->env->policy ? c->env->policy : "direct";
}

static const rlx_config *ctx_config(rlx_ctx *c) { return c ? c->env->config : NULL; }

/* a block run inside the current stage with its own params; slots are shared */
static int emit_block(rlx_ctx *c, const char *name, const char *params_json)
{
    if (!c) return RLX_ERR_INVALID;
    if (c->failed) return c->failed;
    const rlx_block *b = c->env->registry && name ? rlx_registry_block(c->env->registry, name) : NULL;
    if (!b) return rg_ctx_fail(c, "emit_block: no block named \"%s\" in the loaded plugins", name ? name : "");
    json_t *params = NULL;
    const char *text = params_json && *params_json ? params_json : "{}";
    rlx_diag pd;
    rlx_diag_init(&pd);
    if (rlx__json_parse(text, strlen(text), name, &params, &pd) || !json_is_object(params)) {
        json_decref(params);
        return rg_ctx_fail(c, "emit_block %s: params are not a JSON object: %s", name, pd.msg);
    }
    json_t *saved = c->params;
    char where[sizeof c->where];
    memcpy(where, c->where, sizeof where);
    snprintf(c->where + strlen(c->where), sizeof c->where - strlen(c->where), " > %s", name);
    c->params = params;
    int rc = b->emit(c, rlx_host_api_get());
    c->params = saved;
    if (!c->failed) memcpy(c->where, where, sizeof where);
    json_decref(params);
    if (c->failed) return c->failed;
    return rc ? rg_ctx_fail(c, "emit_block %s failed (status %d) without saying why", name, rc) : 0;
}

static int phase(rlx_ctx *c) { return c ? c->phase : RLX_PHASE_PREFILL; }
static int64_t context_length(rlx_ctx *c) { return c ? c->ctx_len : 0; }

void rlx__host_fill_emit(rlx_host_api *h)
{
    h->emit_input = emit_input;
    h->emit_weight = emit_weight;
    h->emit_weight_opt = emit_weight_opt;
    h->emit_const = emit_const;
    h->emit_state = emit_state;
    h->emit_op = emit_op;
    h->emit_op_n = emit_op_n;
    h->emit_output = emit_output;
    h->value_info = value_info;
    h->slot_get = slot_get;
    h->slot_set = slot_set;
    h->param_int = rg_param_int;
    h->param_float = rg_param_float;
    h->param_str = rg_param_str;
    h->model_config = model_config;
    h->config_number = config_number;
    h->fusion_policy = fusion_policy;
    h->phase = phase;
    h->context_length = context_length;
    h->fail = host_fail;
    h->flow_stage = rg_host_flow_stage;
    h->flow_repeat_begin = rg_host_flow_repeat_begin;
    h->flow_repeat_end = rg_host_flow_repeat_end;
    h->flow_input = rg_host_flow_input;
    h->flow_config = rg_host_flow_config;
    h->ctx_config = ctx_config;
    h->emit_block = emit_block;
    h->flow_input_fill = rg_host_flow_input_fill;
}
