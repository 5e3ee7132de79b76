/* The op table (name -> compile-time check + kernel) and helpers shared by the kernels'
 * prepare functions. */
#include "cpu_backend.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const cpu_op_def op_table[] = {
    {"rlx.embedding", cpu_prep_embedding, cpu_run_embedding},
    {"rlx.matmul", cpu_prep_matmul, cpu_run_matmul},
    {"rlx.matmul_nn", cpu_prep_matmul_nn, cpu_run_matmul_nn},
    {"rlx.bmm", cpu_prep_bmm, cpu_run_bmm},
    {"rlx.add", cpu_prep_binary, cpu_run_binary},
    {"rlx.sub", cpu_prep_binary, cpu_run_binary},
    {"rlx.mul", cpu_prep_binary, cpu_run_binary},
    {"rlx.scale", cpu_prep_unary, cpu_run_unary},
    {"rlx.add_scalar", cpu_prep_unary, cpu_run_unary},
    {"rlx.silu", cpu_prep_unary, cpu_run_unary},
    {"rlx.gelu", cpu_prep_unary, cpu_run_unary},
    {"rlx.gelu_tanh", cpu_prep_unary, cpu_run_unary},
    {"rlx.tanh", cpu_prep_unary, cpu_run_unary},
    {"rlx.relu", cpu_prep_unary, cpu_run_unary},
    {"rlx.sin", cpu_prep_unary, cpu_run_unary},
    {"rlx.cos", cpu_prep_unary, cpu_run_unary},
    {"rlx.softcap", cpu_prep_unary, cpu_run_unary},
    {"rlx.softmax", cpu_prep_softmax, cpu_run_softmax},
    {"rlx.argmax", cpu_prep_argmax, cpu_run_argmax},
    {"rlx.rms_norm", cpu_prep_rms_norm, cpu_run_rms_norm},
    {"rlx.layer_norm", cpu_prep_layer_norm, cpu_run_layer_norm},
    {"rlx.rope", cpu_prep_rope, cpu_run_rope},
    {"rlx.attention", cpu_prep_attention, cpu_run_attention},
    {"rlx.cache_write", cpu_prep_cache_write, cpu_run_cache_write},
    {"rlx.attention_rows", cpu_prep_attention_rows, cpu_run_attention_rows},
    {"rlx.cache_write_rows", cpu_prep_cache_write_rows, cpu_run_cache_write_rows},
    {"rlx.transpose", cpu_prep_transpose, cpu_run_transpose},
    {"rlx.concat", cpu_prep_concat, cpu_run_concat},
    {"rlx.slice", cpu_prep_slice, cpu_run_slice},
    {"rlx.last_row", cpu_prep_last_row, cpu_run_last_row},
    {"rlx.copy", cpu_prep_copy, cpu_run_copy},
    {"rlx.cast", cpu_prep_cast, cpu_run_cast},
    {"rlx.conv2d", cpu_prep_conv2d, cpu_run_conv2d},
    {"rlx.group_norm", cpu_prep_group_norm, cpu_run_group_norm},
    {"rlx.upsample_nearest2d", cpu_prep_upsample, cpu_run_upsample},
    {"rlx.swiglu", cpu_prep_gated, cpu_run_gated},
    {"rlx.geglu_tanh", cpu_prep_gated, cpu_run_gated},
    {"rlx.add_rms_norm", cpu_prep_add_rms_norm, cpu_run_add_rms_norm},
    {"rlx.linear_swiglu", cpu_prep_linear_swiglu, cpu_run_linear_swiglu},
    {"rlx.all_reduce", cpu_prep_collective, cpu_run_collective},
    {"rlx.all_gather", cpu_prep_collective, cpu_run_collective},
};

#define N_OPS (sizeof op_table / sizeof op_table[0])

/* the backend's op list, read from the table (one home for the names) */
const char *cpu_op_names[N_OPS + 1];

void cpu_ops_init(void)
{
    for (size_t i = 0; i < N_OPS; i++) cpu_op_names[i] = op_table[i].name;
}

const cpu_op_def *cpu_op_find(const char *name)
{
    if (!name) return NULL;
    for (size_t i = 0; i < N_OPS; i++)
        if (strcmp(op_table[i].name, name) == 0) return &op_table[i];
    return NULL;
}

int64_t cpu_numel(const rlx_shape *s)
{
    int64_t n = 1;
    for (uint32_t i = 0; i < s->ndim && i < RLX_MAX_DIMS; i++) n *= s->dims[i];
    return n;
}

size_t cpu_dtype_size(int dtype)
{
    switch (dtype) {
    case RLX_F32: case RLX_I32: return 4;
    case RLX_F16: case RLX_BF16: return 2;
    case RLX_I64: return 8;
    case RLX_U8: return 1;
    default: return 0;
    }
}

int cpu_bad(const cpu_compile_ctx *c, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return cpu_fail(c->d, RLX_ERR_INVALID, "cpu: node %u (%s): %s", c->index, c->node->op, msg);
}

const rlx_value_desc *cpu_val(const cpu_compile_ctx *c, uint32_t slot)
{
    if (slot >= c->node->n_inputs) return NULL;
    int32_t id = c->node->inputs[slot];
    if (id < 0 || (uint32_t)id >= c->prog->n_values) return NULL;
    return &c->prog->values[id];
}

const rlx_value_desc *cpu_out(const cpu_compile_ctx *c, uint32_t slot)
{
    if (slot >= c->node->n_outputs) return NULL;
    int32_t id = c->node->outputs[slot];
    if (id < 0 || (uint32_t)id >= c->prog->n_values) return NULL;
    return &c->prog->values[id];
}

int cpu_need(const cpu_compile_ctx *c, uint32_t min_in, uint32_t max_in, uint32_t n_out)
{
    const rlx_node_desc *n = c->node;
    if (n->n_inputs < min_in || n->n_inputs > max_in)
        return min_in == max_in ? cpu_bad(c, "takes %u inputs, got %u", min_in, n->n_inputs)
                                : cpu_bad(c, "takes %u to %u inputs, got %u", min_in, max_in,
                                          n->n_inputs);
    if (n->n_outputs != n_out)
        return cpu_bad(c, "has %u outputs, got %u", n_out, n->n_outputs);
    for (uint32_t i = 0; i < n->n_inputs; i++) {
        int32_t id = n->inputs[i];
        if (i < min_in && (id < 0 || (uint32_t)id >= c->prog->n_values))
            return cpu_bad(c, "input %u is value %d, outside the program's %u values", i, id,
                           c->prog->n_values);
        if (id >= 0 && (uint32_t)id >= c->prog->n_values)
            return cpu_bad(c, "input %u is value %d, outside the program's %u values", i, id,
                           c->prog->n_values);
    }
    for (uint32_t i = 0; i < n_out; i++) {
        int32_t id = n->outputs[i];
        if (id < 0 || (uint32_t)id >= c->prog->n_values)
            return cpu_bad(c, "output %u is value %d, outside the program's %u values", i, id,
                           c->prog->n_values);
    }
    return 0;
}

int cpu_need_f32(const cpu_compile_ctx *c, const rlx_value_desc *v, const char *what)
{
    if (v->dtype != RLX_F32) return cpu_bad(c, "%s must be f32 (dtype %d)", what, v->dtype);
    return 0;
}

int cpu_is_float(int dt)
{
    return dt == RLX_F32 || dt == RLX_F16 || dt == RLX_BF16;
}

const float *cpu_row_in(const cpu_isa *isa, int dt, const void *p, int64_t i, int64_t n, float *buf)
{
    if (dt == RLX_F32) return (const float *)p + i * n;
    isa->h_to_f32(dt, (const uint16_t *)p + i * n, buf, n);
    return buf;
}

float *cpu_row_at(int dt, void *p, int64_t i, int64_t n, float *buf)
{
    return dt == RLX_F32 ? (float *)p + i * n : buf;
}

void cpu_row_out(const cpu_isa *isa, int dt, void *p, int64_t i, int64_t n, const float *buf)
{
    if (dt != RLX_F32) isa->f32_to_h(dt, buf, (uint16_t *)p + i * n, n);
}

int cpu_need_float(const cpu_compile_ctx *c, const rlx_value_desc *v, const char *what)
{
    if (!cpu_is_float(v->dtype)) return cpu_bad(c, "%s must be f32, f16 or bf16 (dtype %d)", what, v->dtype);
    return 0;
}

/* Which float dtypes each kernel takes (ints are the kernels' own business):
 *  - matmul, linear_swiglu: x, weights and output each f32, f16 or bf16; bias f32;
 *  - embedding: table and output each f32, f16 or bf16;
 *  - attention (and attention_rows): q, k, v, output each f32, f16 or bf16; mask f32;
 *  - rms_norm, add_rms_norm, rope: x (a, b) and outputs each f32, f16 or bf16; the norm's
 *    weight and rope's inv_freq f32;
 *  - swiglu, geglu_tanh, and add/sub/mul of same-shape operands: each f32, f16 or bf16
 *    (a broadcast b: f32 only);
 *  - data movement (cache_write(_rows), transpose, concat, slice, last_row, copy, all_gather): any one
 *    dtype for all operands; cast: anything;
 *  - the rest: f32. */
int cpu_supports_op(const rlx_node_desc *n, const rlx_value_desc *vals)
{
    if (!n || !n->op || !cpu_op_find(n->op)) return 0;
    static const char *const any_in[] = {"rlx.matmul", "rlx.linear_swiglu", "rlx.embedding", "rlx.attention",
                                         "rlx.attention_rows", "rlx.rms_norm", "rlx.add_rms_norm", "rlx.rope",
                                         "rlx.swiglu", "rlx.geglu_tanh", NULL};
    static const char *const binary[] = {"rlx.add", "rlx.sub", "rlx.mul", NULL};
    static const char *const same[] = {"rlx.cache_write", "rlx.cache_write_rows", "rlx.transpose", "rlx.concat", "rlx.slice",
                                       "rlx.last_row", "rlx.copy", "rlx.all_gather", NULL};
    if (!strcmp(n->op, "rlx.cast")) return 1;
    int kind = 0;
    for (int i = 0; any_in[i]; i++) if (!strcmp(n->op, any_in[i])) kind = 1;
    for (int i = 0; same[i]; i++) if (!strcmp(n->op, same[i])) kind = 2;
    for (int i = 0; binary[i]; i++) /* same-shape operands: as any_in */
        if (!strcmp(n->op, binary[i]) && n->n_inputs == 2 && n->inputs[0] >= 0 && n->inputs[1] >= 0 &&
            cpu_numel(&vals[n->inputs[0]].shape) == cpu_numel(&vals[n->inputs[1]].shape))
            kind = 1;
    int first = -1;
    for (uint32_t j = 0; j < n->n_inputs + n->n_outputs; j++) {
        int32_t v = j < n->n_inputs ? n->inputs[j] : n->outputs[j - n->n_inputs];
        if (v < 0) continue;
        int dt = vals[v].dtype;
        if (!cpu_is_float(dt)) continue;
        if (kind == 1) {
            /* bias of a matmul, mask of attention, a norm's weight, rope's inv_freq: f32 */
            int f32_only = (!strcmp(n->op, "rlx.matmul") && j == 2 && j < n->n_inputs) ||
                           (!strcmp(n->op, "rlx.attention") && j >= 3 && j < n->n_inputs) ||
                           (!strcmp(n->op, "rlx.rms_norm") && j == 1) || (!strcmp(n->op, "rlx.add_rms_norm") && j == 2) ||
                           (!strcmp(n->op, "rlx.rope") && j == 2);
            if (f32_only && dt != RLX_F32) return 0;
        } else if (kind == 2) {
            if (first < 0) first = dt;
            else if (dt != first) return 0;
        } else if (dt != RLX_F32) {
            return 0;
        }
    }
    return 1;
}

const rlx_attr *cpu_attr_find(const cpu_compile_ctx *c, const char *name)
{
    for (uint32_t i = 0; i < c->node->n_attrs; i++)
        if (c->node->attrs[i].name && strcmp(c->node->attrs[i].name, name) == 0)
            return &c->node->attrs[i];
    return NULL;
}

int cpu_attr_int(const cpu_compile_ctx *c, const char *name, int64_t def, int64_t *out)
{
    const rlx_attr *a = cpu_attr_find(c, name);
    if (!a) {
        *out = def;
        return 0;
    }
    if (a->kind != RLX_ATTR_INT) return cpu_bad(c, "attribute %s must be an int", name);
    *out = a->i;
    return 0;
}

int cpu_attr_float(const cpu_compile_ctx *c, const char *name, double def, double *out)
{
    const rlx_attr *a = cpu_attr_find(c, name);
    if (!a) {
        *out = def;
        return 0;
    }
    if (a->kind == RLX_ATTR_FLOAT) *out = a->f;
    else if (a->kind == RLX_ATTR_INT) *out = (double)a->i;
    else return cpu_bad(c, "attribute %s must be a float", name);
    return 0;
}

int64_t cpu_chunk(int64_t n, int64_t min_chunk, int64_t max_chunks, int64_t align)
{
    if (n <= 0) return 1;
    int64_t chunks = n / min_chunk;
    if (chunks > max_chunks) chunks = max_chunks;
    if (chunks < 1) chunks = 1;
    int64_t size = (n + chunks - 1) / chunks;
    size = (size + align - 1) / align * align;
    return size < 1 ? 1 : size;
}

void cpu_parallel(const cpu_run *r, int64_t n_tasks, cpu_task_fn fn, void *arg)
{
    cpu_pool_run(r->be->pool, n_tasks, fn, arg);
}

typedef struct cvt_job {
    const cpu_run *r;
    int dt, to;
    const void *x;
    void *o;
    int64_t n, chunk;
} cvt_job;

static void cvt_task(void *arg, int64_t t, int worker)
{
    (void)worker;
    cvt_job *j = arg;
    int64_t lo = t * j->chunk, hi = lo + j->chunk < j->n ? lo + j->chunk : j->n;
    if (j->to) j->r->be->isa->f32_to_h(j->dt, (const float *)j->x + lo, (uint16_t *)j->o + lo, hi - lo);
    else j->r->be->isa->h_to_f32(j->dt, (const uint16_t *)j->x + lo, (float *)j->o + lo, hi - lo);
}

static void cvt(const cpu_run *r, int dt, int to, const void *x, void *o, int64_t n)
{
    if (n <= 0) return;
    if (dt == RLX_F32) {
        memcpy(o, x, (size_t)n * sizeof(float));
        return;
    }
    cvt_job j = {r, dt, to, x, o, n, cpu_chunk(n, 16384, 64, 64)};
    cpu_parallel(r, (n + j.chunk - 1) / j.chunk, cvt_task, &j);
}

void cpu_to_f32(const cpu_run *r, int dt, const void *x, float *o, int64_t n) { cvt(r, dt, 0, x, o, n); }
void cpu_from_f32(const cpu_run *r, int dt, const float *x, void *o, int64_t n) { cvt(r, dt, 1, x, o, n); }
