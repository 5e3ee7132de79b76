/* rlx_model_forward: one pass of the prefill flow on named input tensors, without a
 * session (the KV cache is sized to the input), writing every flow output. */
#include "exec.h"
#include "flow.h"
#include <stdlib.h>
#include <string.h>

static void list_inputs(const rlx_flow *f, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = 0;
    for (uint32_t i = 0; i < f->n_inputs && o < len; i++) {
        int w = snprintf(buf + o, len - o, "%s%s", i ? ", " : "", f->inputs[i].name);
        if (w < 0) break;
        o += (size_t)w;
    }
}

/* a given tensor's shape with a leading batch dim of 1 dropped when the flow has none */
static rlx_shape unbatched(const rlx_shape *s, uint32_t flow_ndim, int *batched)
{
    rlx_shape r = *s;
    *batched = 0;
    if (r.ndim == flow_ndim + 1 && r.dims[0] == 1) {
        for (uint32_t i = 0; i + 1 < r.ndim; i++) r.dims[i] = r.dims[i + 1];
        r.ndim--;
        *batched = 1;
    }
    return r;
}

static int is_host_filled(const char *name) { return !strcmp(name, "positions") || !strcmp(name, "pos"); }

RLX_API int rlx_model_forward(rlx_model *m, const rlx_weights *inputs, rlx_st_writer *outputs, rlx_diag *d)
{
    if (!m || !inputs || !outputs) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_model_forward: NULL argument");
    const rlx_flow *f = m->flow[0];
    char names[512], a[96];
    list_inputs(f, names, sizeof names);
    size_t n_given = rlx_weights_count(inputs);
    for (size_t i = 0; i < n_given; i++) {
        const rlx_tensor_info *t = rlx_weights_at(inputs, i);
        uint32_t k = 0;
        while (k < f->n_inputs && strcmp(f->inputs[k].name, t->name)) k++;
        if (k == f->n_inputs)
            return rlx_diag_set(d, RLX_ERR_INVALID, "input tensor \"%s\": not an input of this model (inputs: %s)",
                                t->name, names);
    }
    /* T: from the first given input with a sequence dim */
    int64_t T = -1;
    int batched = 0;
    for (uint32_t k = 0; k < f->n_inputs && T < 0; k++) {
        const rg_flow_input *fi = &f->inputs[k];
        const rlx_tensor_info *t = rlx_weights_find(inputs, fi->name);
        if (!t) continue;
        int b;
        rlx_shape s = unbatched(&t->shape, fi->ndim, &b);
        for (uint32_t j = 0; j < fi->ndim && j < s.ndim; j++)
            if (fi->dims[j] == -1) {
                T = s.dims[j];
                batched = b;
                break;
            }
    }
    if (T < 1) {
        for (uint32_t k = 0; k < f->n_inputs; k++)
            if (!rlx_weights_find(inputs, f->inputs[k].name) && !is_host_filled(f->inputs[k].name))
                return rlx_diag_set(d, RLX_ERR_INVALID, "missing input tensor \"%s\"", f->inputs[k].name);
        return rlx_diag_set(d, RLX_ERR_INVALID, "input tensors: no sequence length (inputs: %s)", names);
    }
    rg_io *io = calloc(f->n_inputs + 1, sizeof *io);
    void **bufs = calloc(f->n_inputs + 1, sizeof *bufs);
    int rc = !io || !bufs ? rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory") : 0;
    for (uint32_t k = 0; k < f->n_inputs && !rc; k++) {
        const rg_flow_input *fi = &f->inputs[k];
        rlx_shape want = rg_shape(fi->ndim, fi->dims);
        for (uint32_t j = 0; j < want.ndim; j++)
            if (want.dims[j] == -1) want.dims[j] = T;
        size_t numel = (size_t)rlx_shape_numel(&want);
        bufs[k] = calloc(numel + 1, rlx_dtype_size(fi->dtype));
        if (!bufs[k]) {
            rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
            break;
        }
        io[k].name = fi->name;
        io[k].data = bufs[k];
        const rlx_tensor_info *t = rlx_weights_find(inputs, fi->name);
        if (!t) {
            if (!is_host_filled(fi->name)) rc = rlx_diag_set(d, RLX_ERR_INVALID, "missing input tensor \"%s\"", fi->name);
            else if (!strcmp(fi->name, "positions") && fi->dtype == RLX_I32)
                for (size_t j = 0; j < numel; j++) ((int32_t *)bufs[k])[j] = (int32_t)j;
            continue; /* pos: 0 */
        }
        int b;
        rlx_shape s = unbatched(&t->shape, fi->ndim, &b);
        int int_ok = fi->dtype != RLX_I32 || t->dtype == RLX_I32 || t->dtype == RLX_I64;
        if (!rg_shape_eq(&s, &want) || !int_ok) {
            char w[96];
            rc = rlx_diag_set(d, RLX_ERR_INVALID, "input tensor \"%s\": expected %s %s, found %s %s", fi->name,
                              rlx_dtype_name(fi->dtype), rlx_shape_str(&want, w, sizeof w),
                              rlx_dtype_name(t->dtype), rlx_shape_str(&t->shape, a, sizeof a));
            break;
        }
        rc = rlx_weights_read(t, fi->dtype, bufs[k], numel, d);
    }
    rg_exec *e = NULL;
    rg_states st = {0};
    if (!rc) rc = rg_model_exec(m, RLX_PHASE_PREFILL, T, T, &e, d);
    if (!rc) rc = rg_exec_run(m, e, &st, io, f->n_inputs, d);
    for (uint32_t i = 0; !rc && i < e->plan.n_values; i++) {
        const rlx_value_desc *vd = &e->plan.values[i];
        if (vd->kind != RLX_VALUE_OUTPUT) continue;
        size_t bytes = (size_t)rlx_shape_numel(&vd->shape) * rlx_dtype_size(vd->dtype);
        void *host = malloc(bytes + 1);
        if (!host) {
            rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
            break;
        }
        rc = rg_exec_output(m, e, vd->name, host, d);
        rlx_shape s = vd->shape;
        if (batched && s.ndim < RLX_MAX_DIMS) {
            memmove(&s.dims[1], &s.dims[0], s.ndim * sizeof s.dims[0]);
            s.dims[0] = 1;
            s.ndim++;
        }
        if (!rc) rc = rlx_st_writer_add(outputs, vd->name, vd->dtype, &s, host, d);
        free(host);
    }
    rg_states_free(m, &st);
    for (uint32_t k = 0; bufs && k < f->n_inputs; k++) free(bufs[k]);
    free(bufs);
    free(io);
    return rc;
}
