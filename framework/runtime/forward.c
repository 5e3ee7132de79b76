/* rlx_model_forward: one pass of the model's flow (prefill; encode for an encoder) on
 * named input tensors, without a session (the KV cache is sized to the input), writing
 * every flow output. The pipeline has no batch dim: a leading batch dim B is run one row
 * at a time, each row its own pass with its own inputs (its attention_mask row, say), and
 * every output is stacked back to [B, ...]. rlx_model_forward_mem takes the inputs from
 * memory and hands each output to a callback (a pipeline's loop). */
#include "runtime/exec.h"
#include "build/flow.h"
#include <stdlib.h>
#include <string.h>

/* pos (docs/CONVENTIONS.md) is where the KV cache is written: the runtime's to set, and
 * 0 here, where each row starts from an empty cache */
static int internal(const char *name) { return !strcmp(name, "pos"); }

/* the inputs a caller may give */
static void list_inputs(const rlx_flow *f, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = 0;
    for (uint32_t i = 0; i < f->n_inputs && o < len; i++) {
        if (internal(f->inputs[i].name)) continue;
        int w = snprintf(buf + o, len - o, "%s%s", o ? ", " : "", f->inputs[i].name);
        if (w < 0) break;
        o += (size_t)w;
    }
}

/* an input the flow may run without (RLX_FILL_OPTIONAL) */
static int is_optional(const rg_flow_input *fi) { return fi->fill == RLX_FILL_OPTIONAL; }

/* name is a build-time scalar input of f: compiled in, never read by the program */
static int scalar_input(const rlx_flow *f, const char *name)
{
    for (uint32_t k = 0; k < f->n_inputs; k++)
        if (!strcmp(f->inputs[k].name, name)) return rg_flow_input_scalar(&f->inputs[k]);
    return 0;
}

/* Inputs the flow says the host fills when not given (rlx_flow_input_fill). */
static int has_default(const rg_flow_input *fi) { return fi->fill != RLX_FILL_NONE && fi->dtype == RLX_I32; }

static void fill_default(const rg_flow_input *fi, int32_t *buf, size_t n)
{
    for (size_t j = 0; j < n; j++)
        buf[j] = fi->fill == RLX_FILL_IOTA ? (int32_t)j : fi->fill == RLX_FILL_ONES ? 1 : 0;
}

static const char *fill_how(const rg_flow_input *fi)
{
    return fi->fill == RLX_FILL_IOTA ? "not given: 0, 1, 2, ... one per token"
           : fi->fill == RLX_FILL_ONES ? "not given: all ones" : "not given: all zeros";
}

/* the batch rows of given tensor t for flow input fi: 0 when t has no batch dim */
static int batch_of(const rlx_tensor_info *t, const rg_flow_input *fi, int64_t *rows, rlx_shape *row)
{
    *row = t->shape;
    *rows = 0;
    if (t->shape.ndim != fi->ndim + 1) return 0;
    *rows = t->shape.dims[0];
    row->ndim--;
    memmove(&row->dims[0], &row->dims[1], row->ndim * sizeof row->dims[0]);
    return 1;
}

typedef struct fwd_out {
    const char *name;
    int dtype;
    rlx_shape shape;
    size_t bytes; /* one row */
    char *host;   /* rows × bytes */
} fwd_out;

/* every output of e, with room for B rows */
static int outputs_of(const rg_exec *e, int64_t B, fwd_out **out, uint32_t *n, rlx_diag *d)
{
    *n = 0;
    *out = calloc(e->plan.n_values + 1, sizeof **out);
    if (!*out) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < e->plan.n_values; i++) {
        const rlx_value_desc *vd = &e->plan.values[i];
        if (vd->kind != RLX_VALUE_OUTPUT) continue;
        fwd_out *o = &(*out)[(*n)++];
        o->name = vd->name;
        o->dtype = vd->dtype;
        o->shape = vd->shape;
        o->bytes = (size_t)rlx_shape_numel(&vd->shape) * rlx_dtype_size(vd->dtype);
        if (!(o->host = malloc(o->bytes * (size_t)B + 1))) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    }
    return 0;
}

/* the given input tensors, by name */
typedef struct fwd_given {
    const rlx_tensor_info *const *t;
    size_t n;
} fwd_given;

static const rlx_tensor_info *given_find(const fwd_given *g, const char *name)
{
    for (size_t i = 0; i < g->n; i++)
        if (!strcmp(g->t[i]->name, name)) return g->t[i];
    return NULL;
}

/* whether a node of e reads input name (directly or through a reshape of it) */
static int read_by_program(const rg_exec *e, const char *name)
{
    const rlx_value_desc *vd = rg_exec_find_io(e, name, 0);
    if (!vd) return 0;
    const rg_plan *p = &e->plan;
    int32_t vi = (int32_t)(vd - p->values);
    for (uint32_t i = 0; i < p->n_nodes; i++)
        for (uint32_t j = 0; j < p->nodes[i].n_inputs; j++) {
            int32_t id = p->nodes[i].inputs[j];
            for (int hops = 0; id >= 0 && hops < 64 && p->values[id].kind == RLX_VALUE_ALIAS; hops++)
                id = p->values[id].alias_of;
            if (id == vi) return 1;
        }
    return 0;
}

static int forward(rlx_model *m, const fwd_given *inputs, rlx_output_sink sink, void *user, rlx_diag *d)
{
    const rlx_flow *f = m->flow[0];
    char names[512], a[96];
    list_inputs(f, names, sizeof names);
    size_t n_given = inputs->n;
    for (size_t i = 0; i < n_given; i++) {
        const rlx_tensor_info *t = inputs->t[i];
        uint32_t k = 0;
        while (k < f->n_inputs && strcmp(f->inputs[k].name, t->name)) k++;
        if (k == f->n_inputs)
            return rlx_diag_set(d, RLX_ERR_INVALID, "input tensor \"%s\": not an input of this model (inputs: %s)",
                                t->name, names);
        if (internal(t->name))
            return rlx_diag_set(d, RLX_ERR_INVALID, "input tensor \"%s\": the KV cache position, set by the runtime "
                                "(forward starts from an empty cache), not an input (inputs: %s)", t->name, names);
    }
    /* the optional inputs left out and the build-time scalars given: one program each */
    rg_variant var;
    memset(&var, 0, sizeof var);
    for (uint32_t k = 0; k < f->n_inputs; k++) {
        const rg_flow_input *fi = &f->inputs[k];
        const rlx_tensor_info *t = given_find(inputs, fi->name);
        if (!is_optional(fi)) continue;
        if (k >= RG_VARIANT_INPUTS)
            return rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "input \"%s\": optional inputs must be among the first %d",
                                fi->name, RG_VARIANT_INPUTS);
        if (!t) var.absent |= 1ull << k;
        else if (rg_flow_input_scalar(fi)) {
            int32_t x = 0;
            if (rlx_shape_numel(&t->shape) != 1 || (t->dtype != RLX_I32 && t->dtype != RLX_I64 && t->dtype != RLX_U8))
                return rlx_diag_set(d, RLX_ERR_INVALID, "input tensor \"%s\": expected one integer, found %s %s",
                                    fi->name, rlx_dtype_name(t->dtype), rlx_shape_str(&t->shape, a, sizeof a));
            int rc = t->dtype == RLX_U8 ? (x = *(const uint8_t *)t->data, 0) : rlx_weights_read(t, RLX_I32, &x, 1, d);
            if (rc) return rc;
            var.scalar[k] = x;
        }
    }
    /* T from the first given input with a sequence dim. Inputs with a batch dim agree on
     * its rows; an input without one is shared by every row. */
    int64_t T = -1, S = -1, B = 1; /* S: a second length (dim -2), FLUX's text tokens */
    int batched = 0;
    const char *first = NULL;
    for (uint32_t k = 0; k < f->n_inputs; k++) {
        const rg_flow_input *fi = &f->inputs[k];
        const rlx_tensor_info *t = given_find(inputs, fi->name);
        if (!t || rg_flow_input_scalar(fi)) continue;
        int64_t rows;
        rlx_shape s;
        if (batch_of(t, fi, &rows, &s)) {
            if (rows < 1) return rlx_diag_set(d, RLX_ERR_INVALID, "input tensor \"%s\": an empty batch", fi->name);
            if (batched && rows != B)
                return rlx_diag_set(d, RLX_ERR_INVALID, "input tensor \"%s\": %lld batch rows, \"%s\" has %lld",
                                    fi->name, (long long)rows, first, (long long)B);
            batched = 1;
            B = rows;
            first = fi->name;
        }
        for (uint32_t j = 0; T < 0 && j < fi->ndim && j < s.ndim; j++)
            if (fi->dims[j] == -1) T = s.dims[j];
        for (uint32_t j = 0; S < 0 && j < fi->ndim && j < s.ndim; j++)
            if (fi->dims[j] == -2) S = s.dims[j];
    }
    /* a length no input that takes part has is 1 (SAM without points) */
    int wants_T = 0;
    for (uint32_t k = 0; k < f->n_inputs; k++)
        for (uint32_t j = 0; j < f->inputs[k].ndim && !(k < RG_VARIANT_INPUTS && (var.absent >> k & 1u)); j++)
            wants_T |= f->inputs[k].dims[j] == -1;
    if (!wants_T) T = 1;
    if (S < 0) S = T;
    if (T < 1) {
        for (uint32_t k = 0; k < f->n_inputs; k++)
            if (!given_find(inputs, f->inputs[k].name) && !has_default(&f->inputs[k]) && !is_optional(&f->inputs[k]))
                return rlx_diag_set(d, RLX_ERR_INVALID, "missing input tensor \"%s\"", f->inputs[k].name);
        return rlx_diag_set(d, RLX_ERR_INVALID, "input tensors: no sequence length (inputs: %s)", names);
    }
    if (S < 1) return rlx_diag_set(d, RLX_ERR_INVALID, "input tensors: an empty second sequence (inputs: %s)", names);
    /* per input: one row of host data (given tensors are read whole, rows × numel) */
    rg_io *io = calloc(f->n_inputs + 1, sizeof *io);
    char **bufs = calloc(f->n_inputs + 1, sizeof *bufs);
    size_t *row_bytes = calloc(f->n_inputs + 1, sizeof *row_bytes);
    int rc = !io || !bufs || !row_bytes ? rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory") : 0;
    for (uint32_t k = 0; k < f->n_inputs && !rc; k++) {
        const rg_flow_input *fi = &f->inputs[k];
        rlx_shape want = rg_shape(fi->ndim, fi->dims);
        for (uint32_t j = 0; j < want.ndim; j++)
            if (want.dims[j] == -1) want.dims[j] = T;
            else if (want.dims[j] == -2) want.dims[j] = S;
        size_t numel = (size_t)rlx_shape_numel(&want);
        const rlx_tensor_info *t = given_find(inputs, fi->name);
        if (is_optional(fi) && (!t || rg_flow_input_scalar(fi))) continue; /* not a program input */
        int64_t nrows = 0;
        rlx_shape s;
        int b = t ? batch_of(t, fi, &nrows, &s) : 0;
        size_t rows = b ? (size_t)nrows : 1; /* row_bytes 0: one row shared by all */
        io[k].name = fi->name;
        bufs[k] = calloc(numel * rows + 1, rlx_dtype_size(fi->dtype));
        if (!bufs[k]) {
            rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
            break;
        }
        if (!t) {
            if (has_default(fi)) fill_default(fi, (int32_t *)bufs[k], numel);
            else rc = rlx_diag_set(d, RLX_ERR_INVALID, "missing input tensor \"%s\"", fi->name);
            continue;
        }
        if (b) row_bytes[k] = numel * rlx_dtype_size(fi->dtype);
        int int_ok = fi->dtype != RLX_I32 || t->dtype == RLX_I32 || t->dtype == RLX_I64;
        if (!rg_shape_eq(&s, &want) || !int_ok) {
            char w[96];
            rc = rlx_diag_set(d, RLX_ERR_INVALID, "input tensor \"%s\": expected %s %s%s, found %s %s", fi->name,
                              rlx_dtype_name(fi->dtype), b ? "[B] + " : "", rlx_shape_str(&want, w, sizeof w),
                              rlx_dtype_name(t->dtype), rlx_shape_str(&t->shape, a, sizeof a));
            break;
        }
        rc = rlx_weights_read(t, fi->dtype, bufs[k], numel * rows, d);
    }
    rg_exec *e = NULL;
    fwd_out *outs = NULL;
    uint32_t n_outs = 0;
    pthread_mutex_lock(&m->mu);
    if (!rc) rc = rg_model_exec_v(m, m->encoder ? RLX_PHASE_ENCODE : RLX_PHASE_PREFILL, T, S, &var, &e, d);
    /* a given tensor the compiled program never reads would be silently ignored */
    for (size_t i = 0; i < n_given && !rc; i++)
        if (!read_by_program(e, inputs->t[i]->name) && !scalar_input(f, inputs->t[i]->name))
            rc = rlx_diag_set(d, RLX_ERR_INVALID, "input tensor \"%s\": declared by the flow but read by none of "
                              "its stages, so it would be ignored", inputs->t[i]->name);
    if (!rc) rc = outputs_of(e, B, &outs, &n_outs, d);
    for (int64_t b = 0; b < B && !rc; b++) {
        uint32_t n_io = 0; /* the inputs the program takes */
        for (uint32_t k = 0; k < f->n_inputs; k++) {
            if (!bufs[k]) continue;
            io[n_io].name = f->inputs[k].name;
            io[n_io].how = given_find(inputs, f->inputs[k].name) ? NULL : fill_how(&f->inputs[k]);
            io[n_io++].data = bufs[k] + row_bytes[k] * (size_t)b;
        }
        rg_states st = {0}; /* each row starts from an empty cache */
        rc = rg_exec_run(m, e, &st, io, n_io, d);
        for (uint32_t i = 0; i < n_outs && !rc; i++)
            rc = rg_exec_output(m, e, outs[i].name, outs[i].host + outs[i].bytes * (size_t)b, d);
        rg_states_free(m, &st);
    }
    pthread_mutex_unlock(&m->mu);
    for (uint32_t i = 0; i < n_outs && !rc; i++) {
        rlx_shape s = outs[i].shape;
        if (batched && s.ndim < RLX_MAX_DIMS) {
            memmove(&s.dims[1], &s.dims[0], s.ndim * sizeof s.dims[0]);
            s.dims[0] = B;
            s.ndim++;
        }
        rc = sink(user, outs[i].name, outs[i].dtype, &s, outs[i].host, d);
    }
    for (uint32_t i = 0; outs && i < n_outs; i++) free(outs[i].host);
    free(outs);
    for (uint32_t k = 0; bufs && k < f->n_inputs; k++) free(bufs[k]);
    free(bufs);
    free(row_bytes);
    free(io);
    return rc;
}

static int to_writer(void *user, const char *name, int dtype, const rlx_shape *shape, const void *data, rlx_diag *d)
{
    return rlx_st_writer_add(user, name, dtype, shape, data, d);
}

RLX_API int rlx_model_forward(rlx_model *m, const rlx_weights *inputs, rlx_st_writer *outputs, rlx_diag *d)
{
    if (!m || !inputs || !outputs) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_model_forward: NULL argument");
    size_t n = rlx_weights_count(inputs);
    const rlx_tensor_info **t = calloc(n + 1, sizeof *t);
    if (!t) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) t[i] = rlx_weights_at(inputs, i);
    fwd_given g = {t, n};
    int rc = forward(m, &g, to_writer, outputs, d);
    free(t);
    return rc;
}

RLX_API int rlx_model_forward_mem(rlx_model *m, const rlx_tensor_info *inputs, size_t n_inputs, rlx_output_sink sink,
                                  void *user, rlx_diag *d)
{
    if (!m || (!inputs && n_inputs) || !sink)
        return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_model_forward_mem: NULL argument");
    const rlx_tensor_info **t = calloc(n_inputs + 1, sizeof *t);
    if (!t) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < n_inputs; i++) {
        t[i] = &inputs[i];
        int64_t numel = rlx_shape_numel(&inputs[i].shape);
        if (!inputs[i].name || !inputs[i].data || inputs[i].dtype < 0 || inputs[i].dtype >= RLX_DTYPE_COUNT ||
            numel < 0 || inputs[i].nbytes != (size_t)numel * rlx_dtype_size(inputs[i].dtype)) {
            free(t);
            return rlx_diag_set(d, RLX_ERR_INVALID, "input tensor \"%s\": data, dtype and nbytes do not agree",
                                inputs[i].name ? inputs[i].name : "(null)");
        }
    }
    fwd_given g = {t, n_inputs};
    int rc = forward(m, &g, sink, user, d);
    free(t);
    return rc;
}
