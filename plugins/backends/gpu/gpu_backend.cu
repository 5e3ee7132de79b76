/* The rlx backend vtable shared by the CUDA and ROCm plugins: probe, device memory, and
 * compile: a program becomes a list of kernel launches resolved from the graph (steps),
 * which gpu_run.cu runs in order on one stream (optionally captured once as a CUDA/HIP
 * graph). Its types are in gpu_exe.h, the fusion matching in gpu_fuse.cu, the collectives'
 * side in gpu_coll.cu. */
#include "gpu_exe.h"
#include "gpu_kernels.h"
#include "gpu_mem.h"
#include "gpu_spatial.h"
#include "gpu_tp.h"
#include "gpu_vendor.h"
#include "rlx/plugin.h"

#include <math.h>
#include <new>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef RLX_VERSION
#define RLX_VERSION "0"
#endif

void set_diag(rlx_diag *d, int code, const char *fmt, ...)
{
    if (!d)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = snprintf(d->msg, sizeof d->msg, "%s: ", RLX_GPU_VENDOR);
    vsnprintf(d->msg + n, sizeof d->msg - (size_t)n, fmt, ap);
    va_end(ap);
    d->code = code;
}

/* ---------------------------------------------------------------- ops */

static const char *const dtype_names[] = {"f32", "f16", "bf16", NULL};
static_assert((int)GDT_F32 == (int)RLX_F32 && (int)GDT_F16 == (int)RLX_F16 &&
                  (int)GDT_BF16 == (int)RLX_BF16 && (int)GDT_I32 == (int)RLX_I32,
              "kernel dtype codes are rlx_dtype's");

/* the NULL-terminated name list of the backend vtable, from the table */
struct gpu_op_names {
    const char *v[OP_COUNT + 1];
};
static constexpr gpu_op_names make_op_names()
{
    gpu_op_names n{};
    for (int i = 0; i < OP_COUNT; i++)
        n.v[i] = op_defs[i].name;
    n.v[OP_COUNT] = nullptr;
    return n;
}
static constexpr gpu_op_names op_list = make_op_names();
#define op_names op_list.v

/* the FUSE_* groups, as the profile and diags name them */
const char *const fuse_names[FUSE_COUNT] = {
    "", "fused add+norm", "fused gemv+swiglu", "fused gemvs", "fused rope+cache", "fused qkv+rope+cache",
    "fused gemv+add", "fused qkv gemm+rope+cache", "fused argmax+tail"};

#define GPU_STAGE_BYTES ((size_t)8 << 20)
#define GPU_UP_RING ((size_t)64 << 10)
#define GPU_UP_SMALL ((size_t)4 << 10) /* larger uploads go straight from the caller */

double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void prof_print(const gpu_prof *p)
{
    fprintf(stderr, "%s profile: compile %ld x %.2f ms, alloc %ld x (%.1f MB) %.2f ms, upload %ld x "
            "(%.1f MB) %.2f ms, download %ld x (%.1f MB) %.2f ms\n", RLX_GPU_VENDOR, p->compile_n,
            p->compile_n ? p->compile_ms / (double)p->compile_n : 0.0, p->alloc_n, p->alloc_b / 1e6,
            p->alloc_ms, p->up_n, p->up_b / 1e6, p->up_ms, p->down_n, p->down_b / 1e6, p->down_ms);
    for (int ph = 0; ph < 2; ph++) {
        if (!p->exec_n[ph])
            continue;
        double n = (double)p->exec_n[ph], ker = 0;
        for (int o = 0; o < OP_COUNT + FUSE_COUNT; o++)
            ker += p->op_ms[ph][o];
        fprintf(stderr, "%s profile %s: %ld executes, %.3f ms each (host), kernels %.3f ms each, "
                "%.1f launches each; first executes %ld x %.3f ms (not counted)\n",
                RLX_GPU_VENDOR, ph ? "decode" : "prefill", p->exec_n[ph], p->exec_ms[ph] / n, ker / n,
                (double)p->launches[ph] / n, p->first_n[ph],
                p->first_n[ph] ? p->first_ms[ph] / (double)p->first_n[ph] : 0.0);
        for (int o = 0; o < OP_COUNT + FUSE_COUNT; o++)
            if (p->op_n[ph][o])
                fprintf(stderr, "  %-22s %6.1f per execute %9.4f ms each execute\n",
                        o < OP_COUNT ? op_names[o] : fuse_names[o - OP_COUNT],
                        (double)p->op_n[ph][o] / n, p->op_ms[ph][o] / n);
        for (int i = 0; i < p->n_shp[ph]; i++) {
            const gpu_prof_shape *q = &p->shp[ph][i];
            fprintf(stderr, "    %-18s %6lld x %6lld x %6lld %6.1f per execute %9.4f ms each execute\n",
                    op_names[q->op], (long long)q->rows, (long long)q->n, (long long)q->k, (double)q->cnt / n,
                    q->ms / n);
        }
    }
}

static int64_t numel(const rlx_value_desc *v)
{
    int64_t n = 1;
    for (uint32_t i = 0; i < v->shape.ndim; i++)
        n *= v->shape.dims[i];
    return n;
}

static int64_t last_dim(const rlx_value_desc *v)
{
    return v->shape.ndim ? v->shape.dims[v->shape.ndim - 1] : 1;
}

static const rlx_attr *find_attr(const rlx_node_desc *n, const char *name)
{
    for (uint32_t i = 0; i < n->n_attrs; i++)
        if (n->attrs[i].name && strcmp(n->attrs[i].name, name) == 0)
            return &n->attrs[i];
    return NULL;
}

static int64_t attr_int(const rlx_node_desc *n, const char *name, int64_t def)
{
    const rlx_attr *a = find_attr(n, name);
    if (!a)
        return def;
    return a->kind == RLX_ATTR_FLOAT ? (int64_t)a->f : a->i;
}

static double attr_float(const rlx_node_desc *n, const char *name, double def)
{
    const rlx_attr *a = find_attr(n, name);
    if (!a)
        return def;
    return a->kind == RLX_ATTR_INT ? (double)a->i : a->f;
}

int esize(int dt)
{
    return dt == RLX_F32 || dt == RLX_I32 ? 4 : dt == RLX_F16 || dt == RLX_BF16 ? 2 : 0;
}

int is_flt(int dt) { return dt == RLX_F32 || dt == RLX_F16 || dt == RLX_BF16; }

static const char *dt_name(int dt)
{
    static const char *const n[] = {"f32", "f16", "bf16", "i32", "i64", "u8"};
    return dt >= 0 && dt < 6 ? n[dt] : "unknown";
}

/* ops whose kernels take f16/bf16 as well as f32 for every float operand, each operand
 * in its own dtype (an op added later is f32-only until its kernel reads 16 bits) */
static int half_ok(int op) { return (op_defs[op].flags & OPF_HALF) != 0; }

/* ---------------------------------------------------------------- batched decode rows */

/* rlx.attention_rows: q [T,nh,d], k/v [P,S,nkv,d] (attn.T/nh/d/S/nkv, nb = P);
 * rlx.cache_write_rows: cache [P,S,...] (nb = P, rows = S, n = row elements), new [T,...]
 * (k = T); pos and slots [T] I32 in both */
static int rows_build(const rlx_node_desc *nd, const rlx_value_desc *vals, gpu_step *st, rlx_diag *d)
{
    const rlx_value_desc *x = &vals[st->in[0]], *k = &vals[st->in[1]], *y = &vals[st->out[0]];
    int att = st->op == OP_ATTN_ROWS, ip = att ? 3 : 2;
    const rlx_value_desc *c = att ? k : x;
    char why[160] = "";
    for (int i = 0; i < st->n_in; i++)
        st->dti[i] = vals[st->in[i]].dtype;
    st->dto[0] = y->dtype;
    for (int i = ip; i < ip + 2; i++)
        if (vals[st->in[i]].dtype != RLX_I32 || numel(&vals[st->in[i]]) != (att ? x->shape.dims[0] : k->shape.dims[0]))
            snprintf(why, sizeof why, "pos and slots must be I32 with one entry per row");
    if (c->shape.ndim < 2 || !c->shape.dims[0] || !c->shape.dims[1])
        snprintf(why, sizeof why, "the cache is not [slots, S, ...]");
    if (!why[0] && att) {
        const rlx_value_desc *v = &vals[st->in[2]];
        gpu_attn *a = &st->attn;
        a->T = (int)x->shape.dims[0];
        a->nh = (int)x->shape.dims[1];
        a->d = (int)x->shape.dims[2];
        st->nb = k->shape.dims[0];
        a->P = (int)st->nb;
        a->S = (int)k->shape.dims[1];
        a->nkv = (int)k->shape.dims[2];
        if (x->shape.ndim != 3 || k->shape.ndim != 4 || v->shape.ndim != 4 || k->shape.dims[3] != a->d ||
            memcmp(v->shape.dims, k->shape.dims, 4 * sizeof k->shape.dims[0]) || a->nkv <= 0 || a->nh % a->nkv)
            snprintf(why, sizeof why, "q, k, v are not [T,nh,d], [slots,S,nkv,d] (nh a multiple of nkv)");
        else if (a->d > GPU_ATTN_MAX_D)
            snprintf(why, sizeof why, "head dim %d > %d", a->d, GPU_ATTN_MAX_D);
        else if (!is_flt(x->dtype) || !is_flt(k->dtype) || !is_flt(v->dtype) || !is_flt(y->dtype))
            snprintf(why, sizeof why, "q, k, v and the output must be f32, f16 or bf16");
        a->scale = (float)attr_float(nd, "scale", 1.0 / sqrt((double)a->d));
        a->window = (int)attr_int(nd, "window", 0);
        a->softcap = (float)attr_float(nd, "softcap", 0);
    } else if (!why[0]) {
        st->nb = x->shape.dims[0];
        st->rows = x->shape.dims[1];
        st->n = numel(x) / (st->nb * st->rows);
        st->k = k->shape.ndim ? k->shape.dims[0] : 0;
        if (st->k * st->n != numel(k) || numel(y) != numel(x))
            snprintf(why, sizeof why, "new rows are not cache rows");
        else if (!esize(x->dtype) || k->dtype != x->dtype || y->dtype != x->dtype)
            snprintf(why, sizeof why, "cache, new rows and output must share one dtype");
    }
    if (!why[0])
        return 0;
    set_diag(d, RLX_ERR_INVALID, "%s (node %d): %s", nd->op, st->node, why);
    return -1;
}


/* Validates node idx and fills st; 0 on success, else a diag naming the op and node. */
static int step_build(const rlx_node_desc *nd, int idx, const rlx_value_desc *vals,
                      uint32_t n_vals, gpu_step *st, rlx_diag *d)
{
    memset(st, 0, sizeof *st);
    st->node = idx;
    st->op = -1;
    for (int o = 0; o < OP_COUNT; o++)
        if (nd->op && strcmp(nd->op, op_names[o]) == 0)
            st->op = o;
    const char *on = nd->op ? nd->op : "(null)";
#define FAIL(code, ...)                                                                        \
    do {                                                                                       \
        char m_[512];                                                                          \
        snprintf(m_, sizeof m_, __VA_ARGS__);                                                  \
        set_diag(d, code, "%s (node %d): %s", on, idx, m_);                                    \
        return -1;                                                                             \
    } while (0)
    if (st->op < 0)
        FAIL(RLX_ERR_UNSUPPORTED, "no kernel for this op");
    /* present inputs in order; absent optional inputs (id < 0) are dropped */
    for (uint32_t i = 0; i < nd->n_inputs; i++) {
        int v = nd->inputs[i];
        if (v < 0)
            continue;
        if ((uint32_t)v >= n_vals)
            FAIL(RLX_ERR_INVALID, "input %u is value %d of %u", i, v, n_vals);
        if (st->n_in == 5)
            FAIL(RLX_ERR_INVALID, "too many inputs");
        st->in[st->n_in++] = v;
    }
    const gpu_opdef *od = &op_defs[st->op];
    int n_out = od->n_out;
    if ((int)nd->n_outputs != n_out)
        FAIL(RLX_ERR_INVALID, "%u outputs, expected %d", nd->n_outputs, n_out);
    for (int i = 0; i < n_out; i++) {
        if (nd->outputs[i] < 0 || (uint32_t)nd->outputs[i] >= n_vals)
            FAIL(RLX_ERR_INVALID, "output %d is value %d of %u", i, nd->outputs[i], n_vals);
        st->out[i] = nd->outputs[i];
    }
    if (st->n_in < od->min_in || st->n_in > od->max_in)
        FAIL(RLX_ERR_INVALID, "%d inputs, expected %d to %d", st->n_in, od->min_in, od->max_in);
    if (st->op == OP_ATTN_ROWS || st->op == OP_CACHE_ROWS)
        return rows_build(nd, vals, st, d);
    const rlx_value_desc *x = &vals[st->in[0]], *y = &vals[st->out[0]];
    const rlx_value_desc *in1 = st->n_in > 1 ? &vals[st->in[1]] : NULL;
    /* dtypes: ids and positions i32; layout ops (cache_write's rows too) move 2- or 4-byte
     * elements, all operands in one dtype; cast converts among f32/f16/bf16/i32; the rest
     * take each float operand in f32, f16 or bf16 (half_ok) or in f32 */
    int layout = (od->flags & OPF_LAYOUT) != 0;
    const char *flt = half_ok(st->op) ? "f32, f16 or bf16" : "f32";
    for (int i = 0; i < st->n_in; i++) {
        int dt = vals[st->in[i]].dtype;
        st->dti[i] = dt;
        int want_i32 = (st->op == OP_EMBEDDING && i == 1) || (st->op == OP_ROPE && i == 1) ||
                       (st->op == OP_CACHE_WRITE && i == 2) || (st->op == OP_ADD_SCALAR && dt == RLX_I32);
        if (st->op == OP_ATTENTION && i >= 3) {
            if (dt != RLX_I32 && !is_flt(dt))
                FAIL(RLX_ERR_UNSUPPORTED, "input %d has dtype %s, not i32 (pos) or a float mask", i,
                     dt_name(dt));
            continue; /* pos or mask, told apart by dtype below */
        }
        if (want_i32 ? dt != RLX_I32
                     : st->op == OP_CAST || layout ? !esize(dt)
                                                   : !(half_ok(st->op) ? is_flt(dt) : dt == RLX_F32))
            FAIL(RLX_ERR_UNSUPPORTED, "input %d has dtype %s, not %s", i, dt_name(dt),
                 want_i32 ? "i32" : st->op == OP_CAST || layout ? "f32, f16, bf16 or i32" : flt);
    }
    for (int i = 0; i < n_out; i++) {
        int dt = vals[st->out[i]].dtype;
        st->dto[i] = dt;
        if (st->op == OP_ARGMAX || (st->op == OP_ADD_SCALAR && st->dti[0] == RLX_I32)) {
            if (dt != RLX_I32)
                FAIL(RLX_ERR_UNSUPPORTED, "output %d has dtype %s, not i32", i, dt_name(dt));
            continue;
        }
        if (st->op == OP_CAST || layout ? !esize(dt)
                                        : !(half_ok(st->op) ? is_flt(dt) : dt == RLX_F32))
            FAIL(RLX_ERR_UNSUPPORTED, "output %d has dtype %s, not %s", i, dt_name(dt),
                 st->op == OP_CAST || layout ? "f32, f16, bf16 or i32" : flt);
    }
    if (layout && (vals[st->out[0]].dtype != x->dtype ||
                   ((st->op == OP_CONCAT || st->op == OP_CACHE_WRITE) && in1->dtype != x->dtype)))
        FAIL(RLX_ERR_INVALID, "operands differ in dtype (%s, %s -> %s)", dt_name(x->dtype),
             in1 ? dt_name(in1->dtype) : "-", dt_name(vals[st->out[0]].dtype));

    switch ((gpu_op)st->op) {
    case OP_ATTN_ROWS:
    case OP_CACHE_ROWS: /* rows_build, above */
        break;
    case OP_COUNT: /* step_build set a valid op above */
        break;
    case OP_EMBEDDING:
        if (x->shape.ndim != 2)
            FAIL(RLX_ERR_INVALID, "table is not [V,H]");
        st->rows = numel(in1);
        st->nb = x->shape.dims[0];
        st->n = x->shape.dims[1];
        break;
    case OP_MATMUL:
    case OP_LINEAR_SWIGLU: {
        st->k = last_dim(x);
        if (in1->shape.ndim != 2 || in1->shape.dims[1] != st->k)
            FAIL(RLX_ERR_INVALID, "weight is not [N,%lld]", (long long)st->k);
        st->n = in1->shape.dims[0];
        st->rows = st->k ? numel(x) / st->k : 0;
        if (st->op == OP_LINEAR_SWIGLU) {
            const rlx_value_desc *wu = &vals[st->in[2]];
            if (wu->shape.ndim != 2 || wu->shape.dims[0] != st->n || wu->shape.dims[1] != st->k)
                FAIL(RLX_ERR_INVALID, "w_up is not [%lld,%lld]", (long long)st->n,
                     (long long)st->k);
        } else if (st->n_in == 3 && numel(&vals[st->in[2]]) != st->n) {
            FAIL(RLX_ERR_INVALID, "bias is not [%lld]", (long long)st->n);
        }
        if (numel(y) != st->rows * st->n)
            FAIL(RLX_ERR_INVALID, "output has %lld elements, expected %lld",
                 (long long)numel(y), (long long)(st->rows * st->n));
        break;
    }
    case OP_MATMUL_NN:
        if (x->shape.ndim != 2 || in1->shape.ndim != 2 || in1->shape.dims[0] != x->shape.dims[1])
            FAIL(RLX_ERR_INVALID, "shapes are not [M,K]·[K,N]");
        st->rows = x->shape.dims[0];
        st->k = x->shape.dims[1];
        st->n = in1->shape.dims[1];
        break;
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
    case OP_SWIGLU:
    case OP_GEGLU_TANH:
        st->n = numel(x);
        st->nb = numel(in1);
        if (st->nb == 0 || st->n % st->nb != 0 ||
            ((st->op == OP_SWIGLU || st->op == OP_GEGLU_TANH) && st->nb != st->n))
            FAIL(RLX_ERR_INVALID, "b (%lld elements) does not broadcast over a (%lld)",
                 (long long)st->nb, (long long)st->n);
        st->i0 = st->op == OP_ADD ? GB_ADD : st->op == OP_SUB ? GB_SUB : st->op == OP_MUL ? GB_MUL
                 : st->op == OP_SWIGLU ? GB_SWIGLU : GB_GEGLU_TANH;
        break;
    case OP_SCALE:
    case OP_ADD_SCALAR:
    case OP_SILU:
    case OP_GELU:
    case OP_GELU_TANH:
    case OP_TANH:
    case OP_SOFTCAP:
        st->n = numel(x);
        st->i0 = st->op == OP_SCALE ? GU_SCALE : st->op == OP_ADD_SCALAR ? GU_ADD_SCALAR
                 : st->op == OP_SILU ? GU_SILU : st->op == OP_GELU ? GU_GELU
                 : st->op == OP_GELU_TANH ? GU_GELU_TANH : st->op == OP_TANH ? GU_TANH : GU_SOFTCAP;
        if (st->op == OP_SCALE && !find_attr(nd, "scale"))
            FAIL(RLX_ERR_INVALID, "missing attribute scale");
        if (st->op == OP_ADD_SCALAR && !find_attr(nd, "value"))
            FAIL(RLX_ERR_INVALID, "missing attribute value");
        st->f0 = (float)(st->op == OP_SCALE ? attr_float(nd, "scale", 1)
                         : st->op == OP_ADD_SCALAR ? attr_float(nd, "value", 0)
                                                   : attr_float(nd, "cap", 0));
        if (st->op == OP_SOFTCAP && !(st->f0 > 0))
            FAIL(RLX_ERR_INVALID, "cap must be > 0");
        break;
    case OP_SOFTMAX:
        st->n = last_dim(x);
        st->rows = st->n ? numel(x) / st->n : 0;
        break;
    case OP_ARGMAX:
        st->n = last_dim(x);
        st->rows = st->n ? numel(x) / st->n : 0;
        if (st->n < 1 || st->n > 0x7fffffff || numel(y) != st->rows)
            FAIL(RLX_ERR_INVALID, "x is not [..., V] with 1 <= V < 2^31 and one output per row");
        break;
    case OP_BMM:
        st->i0 = attr_int(nd, "trans_b", 1) != 0;
        if (x->shape.ndim != 3 || in1->shape.ndim != 3 || y->shape.ndim != 3 ||
            in1->shape.dims[0] != x->shape.dims[0] || in1->shape.dims[st->i0 ? 2 : 1] != x->shape.dims[2])
            FAIL(RLX_ERR_INVALID, "a, b are not [B,M,K], [B,N,K] (trans_b) or [B,K,N]");
        st->nb = x->shape.dims[0];
        st->rows = x->shape.dims[1];
        st->k = x->shape.dims[2];
        st->n = in1->shape.dims[st->i0 ? 1 : 2];
        break;
    case OP_RELU:
    case OP_SIN:
    case OP_COS:
        st->n = numel(x);
        st->i0 = st->op == OP_RELU ? GM_RELU : st->op == OP_SIN ? GM_SIN : GM_COS;
        break;
    case OP_RMS_NORM:
    case OP_LAYER_NORM:
    case OP_ADD_RMS_NORM: {
        st->n = last_dim(x);
        st->rows = st->n ? numel(x) / st->n : 0;
        const rlx_value_desc *w = &vals[st->in[st->op == OP_ADD_RMS_NORM ? 2 : 1]];
        if (numel(w) != st->n || (st->op == OP_LAYER_NORM && numel(&vals[st->in[2]]) != st->n))
            FAIL(RLX_ERR_INVALID, "weight is not [%lld]", (long long)st->n);
        if (st->op == OP_ADD_RMS_NORM && numel(in1) != numel(x))
            FAIL(RLX_ERR_INVALID, "a and b differ in size");
        st->f0 = (float)attr_float(nd, "eps", 1e-6);
        st->i0 = (int)attr_int(nd, "add_one", 0);
        break;
    }
    case OP_ROPE: {
        if (x->shape.ndim != 3)
            FAIL(RLX_ERR_INVALID, "x is not [T,nh,d]");
        st->rows = x->shape.dims[0];
        st->nb = x->shape.dims[1];
        st->n = x->shape.dims[2];
        st->k = attr_int(nd, "rot_dim", 0);
        if (st->k == 0)
            st->k = st->n;
        if (st->k < 0 || st->k > st->n || st->k % 2 || numel(in1) != st->rows ||
            numel(&vals[st->in[2]]) < st->k / 2)
            FAIL(RLX_ERR_INVALID, "rot_dim %lld, positions or inv_freq do not fit x",
                 (long long)st->k);
        break;
    }
    case OP_ATTENTION: {
        const rlx_value_desc *k = in1, *v = &vals[st->in[2]];
        if (x->shape.ndim != 3 || k->shape.ndim != 3 || v->shape.ndim != 3)
            FAIL(RLX_ERR_INVALID, "q, k, v are not [T,nh,d], [S,nkv,d]");
        gpu_attn *a = &st->attn;
        a->T = (int)x->shape.dims[0];
        a->nh = (int)x->shape.dims[1];
        a->d = (int)x->shape.dims[2];
        a->S = (int)k->shape.dims[0];
        a->nkv = (int)k->shape.dims[1];
        if (k->shape.dims[2] != a->d || v->shape.dims[0] != a->S || v->shape.dims[1] != a->nkv ||
            v->shape.dims[2] != a->d || a->nkv <= 0 || a->nh % a->nkv != 0)
            FAIL(RLX_ERR_INVALID, "k/v shapes do not match q (GQA needs nh %% nkv == 0)");
        if (a->d > GPU_ATTN_MAX_D)
            FAIL(RLX_ERR_UNSUPPORTED, "head dim %d > %d", a->d, GPU_ATTN_MAX_D);
        st->i1 = st->i2 = -1; /* pos, mask value ids */
        for (int i = 3; i < st->n_in; i++) {
            const rlx_value_desc *o = &vals[st->in[i]];
            if (o->dtype == RLX_I32 && st->i1 < 0 && numel(o) >= 1)
                st->i1 = st->in[i];
            else if (is_flt(o->dtype) && st->i2 < 0 && numel(o) == (int64_t)a->T * a->S)
                st->i2 = st->in[i];
            else
                FAIL(RLX_ERR_INVALID, "input %d is neither pos [1] I32 nor mask [%d,%d] float", i,
                     a->T, a->S);
        }
        a->scale = (float)attr_float(nd, "scale", 1.0 / sqrt((double)a->d));
        a->causal = (int)attr_int(nd, "causal", 0);
        a->window = (int)attr_int(nd, "window", 0);
        a->softcap = (float)attr_float(nd, "softcap", 0);
        break;
    }
    case OP_CACHE_WRITE:
        if (x->shape.ndim < 1 || in1->shape.ndim < 1 || numel(&vals[st->in[2]]) < 1)
            FAIL(RLX_ERR_INVALID, "cache, new or pos is empty");
        st->rows = x->shape.dims[0];      /* S */
        st->nb = in1->shape.dims[0];      /* T */
        st->n = st->rows ? numel(x) / st->rows : 0;
        if (st->nb * st->n != numel(in1) || numel(y) != numel(x))
            FAIL(RLX_ERR_INVALID, "new rows are not cache rows");
        break;
    case OP_TRANSPOSE: {
        const rlx_attr *pa = find_attr(nd, "perm");
        uint32_t nd_ = x->shape.ndim;
        if (!pa || pa->kind != RLX_ATTR_INTS || pa->n_ints != nd_ || nd_ > GPU_MAX_DIMS)
            FAIL(RLX_ERR_INVALID, "perm is not %u ints", nd_);
        int64_t strides[GPU_MAX_DIMS];
        int64_t s = 1;
        for (int i = (int)nd_ - 1; i >= 0; i--) {
            strides[i] = s;
            s *= x->shape.dims[i];
        }
        unsigned seen = 0;
        st->perm.ndim = (int)nd_;
        for (uint32_t i = 0; i < nd_; i++) {
            int64_t p = pa->ints[i];
            if (p < 0)
                p += nd_;
            if (p < 0 || p >= (int64_t)nd_ || (seen & (1u << p)))
                FAIL(RLX_ERR_INVALID, "perm is not a permutation");
            seen |= 1u << p;
            st->perm.out_dims[i] = x->shape.dims[p];
            st->perm.in_strides[i] = strides[p];
        }
        st->n = numel(x);
        break;
    }
    case OP_CONCAT: {
        int64_t ax = attr_int(nd, "axis", 0), r = x->shape.ndim;
        if (ax < 0)
            ax += r;
        if (ax < 0 || ax >= r || in1->shape.ndim != (uint32_t)r)
            FAIL(RLX_ERR_INVALID, "axis or ranks do not fit");
        int64_t outer = 1;
        for (int64_t i = 0; i < ax; i++)
            outer *= x->shape.dims[i];
        st->rows = outer;
        st->n = outer ? numel(x) / outer : 0;
        st->nb = outer ? numel(in1) / outer : 0;
        if (numel(y) != numel(x) + numel(in1))
            FAIL(RLX_ERR_INVALID, "output size is not the sum of the inputs'");
        break;
    }
    case OP_SLICE: {
        int64_t ax = attr_int(nd, "axis", 0), r = x->shape.ndim;
        if (ax < 0)
            ax += r;
        if (ax < 0 || ax >= r)
            FAIL(RLX_ERR_INVALID, "axis out of range");
        int64_t dim = x->shape.dims[ax], s0 = attr_int(nd, "start", 0), e0 = attr_int(nd, "end", dim);
        if (s0 < 0)
            s0 += dim;
        if (e0 < 0)
            e0 += dim;
        if (e0 > dim)
            e0 = dim;
        if (s0 < 0 || s0 > e0)
            FAIL(RLX_ERR_INVALID, "range [%lld,%lld) outside axis of %lld", (long long)s0,
                 (long long)e0, (long long)dim);
        int64_t outer = 1, inner = 1;
        for (int64_t i = 0; i < ax; i++)
            outer *= x->shape.dims[i];
        for (int64_t i = ax + 1; i < r; i++)
            inner *= x->shape.dims[i];
        st->rows = outer;
        st->nb = dim * inner;      /* in inner */
        st->k = s0 * inner;        /* start offset */
        st->n = (e0 - s0) * inner; /* out inner */
        if (numel(y) != outer * st->n)
            FAIL(RLX_ERR_INVALID, "output size does not match the range");
        break;
    }
    case OP_LAST_ROW:
        st->n = last_dim(x);
        if (numel(x) < st->n || numel(y) != st->n)
            FAIL(RLX_ERR_INVALID, "x is not [T,H] with T >= 1");
        st->k = numel(x) - st->n;
        st->rows = st->n ? numel(x) / st->n : 0;
        if (in1 && (in1->dtype != RLX_I32 || numel(in1) != 1))
            FAIL(RLX_ERR_INVALID, "row is not one i32");
        break;
    case OP_COPY:
    case OP_CAST:
        st->i0 = x->dtype == RLX_I32;
        st->i1 = y->dtype == RLX_I32;
        st->n = numel(x);
        if (numel(y) != st->n)
            FAIL(RLX_ERR_INVALID, "output size differs");
        break;
    case OP_ALL_REDUCE:
    case OP_ALL_GATHER: {
        char m[256];
        if (gpu_coll_plan(nd, x, y, st->op == OP_ALL_GATHER, &st->rows, &st->n, &st->tp, m, sizeof m))
            FAIL(RLX_ERR_INVALID, "%s", m);
        break;
    }
    case OP_CONV2D:
    case OP_GROUP_NORM:
    case OP_UPSAMPLE: {
        const rlx_value_desc *iv[3] = {x, in1, st->n_in > 2 ? &vals[st->in[2]] : NULL};
        char m[384];
        int so = st->op == OP_CONV2D ? GS_CONV2D : st->op == OP_GROUP_NORM ? GS_GROUP_NORM : GS_UPSAMPLE;
        if (gpu_spatial_plan(so, nd, iv, st->n_in, y, &st->conv, &st->f0, m, sizeof m))
            FAIL(RLX_ERR_INVALID, "%s", m);
        break;
    }
    }
    if (!(od->flags & OPF_OWN_SIZE) && numel(y) != numel(x))
        FAIL(RLX_ERR_INVALID, "output has %lld elements, input %lld", (long long)numel(y),
             (long long)numel(x));
    if ((st->op == OP_EMBEDDING && numel(y) != st->rows * st->n) ||
        (st->op == OP_MATMUL_NN && numel(y) != st->rows * st->n) ||
        (st->op == OP_BMM && numel(y) != st->nb * st->rows * st->n) ||
        (st->op == OP_ADD_RMS_NORM && (numel(y) != numel(x) || numel(&vals[st->out[1]]) != numel(x))))
        FAIL(RLX_ERR_INVALID, "output size does not match");
#undef FAIL
    return 0;
}

/* ---------------------------------------------------------------- probe / init */

static int gpu_probe(rlx_backend_probe *out)
{
    rlx_backend_probe p;
    memset(&p, 0, sizeof p);
    p.struct_size = (uint32_t)sizeof p;
    int count = 0;
    gpuError_t e = gpuGetDeviceCount(&count);
    if (e != gpuSuccess) {
        snprintf(p.reason, sizeof p.reason, "%s: %s", RLX_GPU_COUNT_FN, gpuGetErrorString(e));
        (void)gpuGetLastError(); /* leave no sticky error behind */
    } else if (count <= 0) {
        snprintf(p.reason, sizeof p.reason, "%s: no device", RLX_GPU_COUNT_FN);
    } else {
        p.available = 1;
        for (int i = 0; i < count && i < RLX_MAX_DEVICES; i++) {
            gpuDeviceProp pr;
            if (gpuGetDeviceProperties(&pr, i) != gpuSuccess)
                continue;
            double gb = (double)pr.totalGlobalMem / (1024.0 * 1024.0 * 1024.0);
#if defined(RLX_GPU_HIP)
            snprintf(p.devices[p.n_devices++], sizeof p.devices[0], "rocm:%d %.64s (%.24s), %.0f GB", i,
                     pr.name, pr.gcnArchName, gb);
#else
            snprintf(p.devices[p.n_devices++], sizeof p.devices[0], "cuda:%d %.64s, %.0f GB, sm_%d%d",
                     i, pr.name, gb, pr.major, pr.minor);
#endif
        }
        int drv = 0, rt = 0;
        (void)gpuDriverGetVersion(&drv);
        (void)gpuRuntimeGetVersion(&rt);
        int k = snprintf(p.details, sizeof p.details, "%d device(s); driver %d.%d, runtime %d.%d; matmul: %s",
                         count, drv / 1000, (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10, gpu_blas_name);
        if (count > 1 && k > 0 && (size_t)k + 2 < sizeof p.details) { /* gpu_tp.cu: for tensor parallelism */
            p.details[k++] = ';';
            p.details[k++] = ' ';
            gpu_tp_peers(count, p.details + k, sizeof p.details - (size_t)k);
        }
    }
    uint32_t n = out->struct_size && out->struct_size < sizeof p ? out->struct_size : (uint32_t)sizeof p;
    memcpy(out, &p, n);
    out->struct_size = n;
    return 0;
}

#define GPU_TRY(call, what)                                                                    \
    do {                                                                                       \
        gpuError_t e_ = (call);                                                                \
        if (e_ != gpuSuccess) {                                                                \
            set_diag(d, RLX_ERR_DEVICE, "%s: %s", what, gpuGetErrorString(e_));               \
            (void)gpuGetLastError();                                                           \
            goto fail;                                                                         \
        }                                                                                      \
    } while (0)

static void gpu_teardown(void *bep);

static int gpu_init(const rlx_backend_options *opt, void **out, rlx_diag *d)
{
    *out = NULL;
    gpu_be *be = (gpu_be *)calloc(1, sizeof *be);
    int count = 0;
    char err[256];
    if (!be) {
        set_diag(d, RLX_ERR_NOMEM, "out of memory");
        return RLX_ERR_NOMEM;
    }
    if (opt && opt->struct_size >= RLX_STRUCT_SIZE(rlx_backend_options, device))
        be->device = opt->device;
    if (opt && opt->struct_size >= RLX_STRUCT_SIZE(rlx_backend_options, graphs))
        be->graphs = opt->graphs;
    {
        be->fuse = !rlx_env_off("RLX_GPU_FUSE");
        be->late_add = !rlx_env_off("RLX_GPU_LATE_ADD");
        be->fa_split = !rlx_env_off("RLX_GPU_FA_SPLIT");
        const char *gf = getenv("RLX_GPU_GLU_F32");
        be->glu_f32 = gf && strcmp(gf, "1") == 0;
        be->qkv_gemm = !rlx_env_off("RLX_GPU_QKV_GEMM");
        be->rows_split = !rlx_env_off("RLX_GPU_ROWS_SPLIT");
        const char *gr = getenv("RLX_GPU_GEMV_ROWS");
        be->gemv_rows = gr && *gr ? atoi(gr) : 1;
        be->gemv_rows = be->gemv_rows < 1 ? 1 : be->gemv_rows > GPU_GEMV_MAX_M ? GPU_GEMV_MAX_M : be->gemv_rows;
        be->gemv_mma = !rlx_env_off("RLX_GPU_GEMV_MMA");
        be->defer_checks = !rlx_env_off("RLX_GPU_DEFER_CHECK");
        be->up_batch = !rlx_env_off("RLX_GPU_UP_BATCH");
        be->err_at_sync = !rlx_env_off("RLX_GPU_ERR_AT_SYNC");
        const char *mk = getenv("RLX_GPU_ATTN_KEYS"); /* keys a decode attention block takes */
        be->attn_keys = mk && *mk ? atoi(mk) : 0;
        be->attn_keys = be->attn_keys < 8 ? 0 : be->attn_keys > 1024 ? 1024 : be->attn_keys;
        be->argmax_split = !rlx_env_off("RLX_GPU_ARGMAX_SPLIT");
        be->attn_mma = !rlx_env_off("RLX_GPU_ATTN_MMA");
        be->argmax_tail = !rlx_env_off("RLX_GPU_ARGMAX_TAIL");
        const char *nr = getenv("RLX_GPU_NORM_ROWS");
        be->norm_rows = nr && *nr ? atoi(nr) : 1;
        const char *g = getenv("RLX_GPU_GEMM");
        be->own_gemm = g && strcmp(g, "own") == 0;
        const char *pf = getenv("RLX_GPU_PROFILE");
        if (pf && strcmp(pf, "1") == 0 && (be->prof = (gpu_prof *)calloc(1, sizeof(gpu_prof))))
            be->graphs = 0;
    }
    {
        gpuError_t e = gpuGetDeviceCount(&count);
        if (e != gpuSuccess) {
            set_diag(d, RLX_ERR_DEVICE, "no device: %s: %s", RLX_GPU_COUNT_FN, gpuGetErrorString(e));
            (void)gpuGetLastError();
            free(be->prof);
            free(be);
            return RLX_ERR_DEVICE;
        }
    }
    if (be->device < 0 || be->device >= count) {
        set_diag(d, RLX_ERR_DEVICE, "device %d does not exist (%d found)", be->device, count);
        free(be->prof);
        free(be);
        return RLX_ERR_DEVICE;
    }
    GPU_TRY(gpuSetDevice(be->device), "set device");
    {
        gpuDeviceProp pr;
        GPU_TRY(gpuGetDeviceProperties(&pr, be->device), "device properties");
        be->sms = pr.multiProcessorCount > 0 ? pr.multiProcessorCount : 1;
    }
    GPU_TRY(gpuStreamCreateWithFlags(&be->stream, gpuStreamNonBlocking), "stream create");
    GPU_TRY(gpuMalloc((void **)&be->err_dev, 4 * sizeof(int)), "error word alloc");
    GPU_TRY(gpuMemsetAsync(be->err_dev, 0, 4 * sizeof(int), be->stream), "error word zero"); /* cleared when read */
    GPU_TRY(gpuMalloc((void **)&be->sum_last, sizeof(unsigned)), "counter alloc");
    GPU_TRY(gpuMemsetAsync(be->sum_last, 0, sizeof(unsigned), be->stream), "counter zero");
    GPU_TRY(gpuHostAlloc((void **)&be->err_host, 4 * sizeof(int)), "pinned alloc");
    memset(be->err_host, 0, 4 * sizeof(int));
    if (gpuHostAlloc((void **)&be->stage, GPU_STAGE_BYTES) != gpuSuccess) {
        be->stage = NULL; /* downloads go straight to pageable memory, slower */
        (void)gpuGetLastError();
    }
    if (!rlx_env_off("RLX_GPU_PINNED_UP") && gpuHostAlloc((void **)&be->up_ring, GPU_UP_RING) != gpuSuccess) {
        be->up_ring = NULL; /* uploads from the caller's memory, as the driver stages them */
        (void)gpuGetLastError();
    }
    if (be->prof) {
        GPU_TRY(gpuEventCreate(&be->prof->e0), "event create");
        GPU_TRY(gpuEventCreate(&be->prof->e1), "event create");
    }
    /* the vendor library (cuBLAS) is loaded here, by the first session that needs it */
    if (!be->own_gemm && gpu_blas_create(&be->blas, be->stream, err, sizeof err) != 0) {
        set_diag(d, RLX_ERR_DEVICE, "%s", err);
        goto fail;
    }
    *out = be;
    return 0;
fail:
    gpu_teardown(be);
    return RLX_ERR_DEVICE;
}

static void gpu_teardown(void *bep)
{
    gpu_be *be = (gpu_be *)bep;
    if (!be)
        return;
    (void)gpuSetDevice(be->device);
    if (be->stream) {
        (void)gpu_up_flush(be, NULL);
        (void)gpuStreamSynchronize(be->stream);
    }
    gpu_blas_destroy(be->blas);
    if (be->prof) {
        prof_print(be->prof);
        (void)gpuEventDestroy(be->prof->e0);
        (void)gpuEventDestroy(be->prof->e1);
        free(be->prof);
    }
    if (be->err_dev)
        (void)gpuFree(be->err_dev);
    if (be->sum_last)
        (void)gpuFree(be->sum_last);
    if (be->err_host)
        (void)gpuFreeHost(be->err_host);
    if (be->stage)
        (void)gpuFreeHost(be->stage);
    if (be->up_ring)
        (void)gpuFreeHost(be->up_ring);
    if (be->stream)
        (void)gpuStreamDestroy(be->stream);
    free(be);
}

/* ---------------------------------------------------------------- memory */

static void *gpu_alloc(void *bep, size_t bytes, rlx_diag *d)
{
    gpu_prof *pf = ((gpu_be *)bep)->prof;
    double t0 = pf ? now_ms() : 0;
    void *p = NULL;
    (void)gpuSetDevice(((gpu_be *)bep)->device);
    gpuError_t e = gpuMalloc(&p, bytes ? bytes : 256);
    if (pf) {
        pf->alloc_ms += now_ms() - t0;
        pf->alloc_n++;
        pf->alloc_b += (double)bytes;
    }
    if (e != gpuSuccess) {
        size_t fr = 0, tot = 0;
        (void)gpuGetLastError();
        const double gib = 1024.0 * 1024.0 * 1024.0;
        if (gpuMemGetInfo(&fr, &tot) == gpuSuccess)
            set_diag(d, RLX_ERR_NOMEM, "alloc of %zu bytes (%.2f GiB): %s; %.2f GiB free of %.2f GiB on device %d",
                     bytes, (double)bytes / gib, gpuGetErrorString(e), (double)fr / gib, (double)tot / gib,
                     ((gpu_be *)bep)->device);
        else
            set_diag(d, RLX_ERR_NOMEM, "alloc of %zu bytes: %s", bytes, gpuGetErrorString(e));
        (void)gpuGetLastError();
        return NULL;
    }
    return p;
}

static void gpu_free(void *bep, void *ptr)
{
    (void)gpuSetDevice(((gpu_be *)bep)->device);
    (void)gpu_up_flush((gpu_be *)bep, NULL); /* held uploads land before the memory goes */
    if (ptr)
        (void)gpuFree(ptr);
}

int gpu_up_flush(gpu_be *be, rlx_diag *d)
{
    if (!be->upb.n)
        return 0;
    const int n = be->upb.n;
    gpu_up_scatter(be->stream, &be->upb); /* the launch copies the batch, count included */
    be->upb.n = 0;
    gpuError_t e = gpuGetLastError();
    if (e != gpuSuccess) {
        set_diag(d, RLX_ERR_DEVICE, "upload of %d small values: %s", n, gpuGetErrorString(e));
        return RLX_ERR_DEVICE;
    }
    return 0;
}

static int copy_sync(gpu_be *be, void *dst, const void *src, size_t bytes, int kind,
                     const char *what, rlx_diag *d)
{
    if (gpu_up_flush(be, d))
        return RLX_ERR_DEVICE;
    gpuError_t e = gpuMemcpyAsync(dst, src, bytes, (decltype(gpuMemcpyHostToDevice))kind, be->stream);
    if (e == gpuSuccess)
        e = gpuStreamSynchronize(be->stream);
    if (e != gpuSuccess) {
        set_diag(d, RLX_ERR_DEVICE, "%s of %zu bytes: %s", what, bytes, gpuGetErrorString(e));
        (void)gpuGetLastError();
        return RLX_ERR_DEVICE;
    }
    return 0;
}

static int gpu_upload_(void *bep, void *dst, const void *src, size_t bytes, rlx_diag *d)
{
#if defined(RLX_GPU_HIP)
    return copy_sync((gpu_be *)bep, dst, src, bytes, gpuMemcpyHostToDevice, "upload", d);
#else
    /* from pageable memory CUDA returns once src is staged, so src may change at once: no
     * stream sync per upload (a decode step uploads its token id and positions) */
    gpu_be *be = (gpu_be *)bep;
    if (be->up_batch && bytes <= GPU_UP_BYTES && be->upb.n < GPU_UP_N) {
        be->upb.e[be->upb.n].dst = dst;
        be->upb.e[be->upb.n].bytes = (int)bytes;
        memcpy(be->upb.e[be->upb.n].b, src, bytes);
        be->upb.n++;
        return 0;
    }
    if (gpu_up_flush(be, d)) /* the held ones first: uploads land in the order made */
        return RLX_ERR_DEVICE;
    if (be->up_ring && bytes <= GPU_UP_SMALL && be->up_off + bytes <= GPU_UP_RING) {
        char *p = be->up_ring + be->up_off;
        memcpy(p, src, bytes);
        be->up_off += (bytes + 15) & ~(size_t)15;
        src = p;
    }
    gpuError_t e = gpuMemcpyAsync(dst, src, bytes, gpuMemcpyHostToDevice, be->stream);
    if (e != gpuSuccess) {
        set_diag(d, RLX_ERR_DEVICE, "upload of %zu bytes: %s", bytes, gpuGetErrorString(e));
        (void)gpuGetLastError();
        return RLX_ERR_DEVICE;
    }
    return 0;
#endif
}

static int gpu_upload(void *bep, void *dst, const void *src, size_t bytes, rlx_diag *d)
{
    gpu_prof *pf = ((gpu_be *)bep)->prof;
    double t0 = pf ? now_ms() : 0;
    (void)gpuSetDevice(((gpu_be *)bep)->device);
    int rc = gpu_upload_(bep, dst, src, bytes, d);
    if (pf) {
        pf->up_ms += now_ms() - t0;
        pf->up_n++;
        pf->up_b += (double)bytes;
    }
    return rc;
}

static int gpu_download(void *bep, void *dst, const void *src, size_t bytes, rlx_diag *d)
{
    gpu_prof *pf = ((gpu_be *)bep)->prof;
    double t0 = pf ? now_ms() : 0;
    gpu_be *be = (gpu_be *)bep;
    (void)gpuSetDevice(be->device);
    int rc = gpu_up_flush(be, d);
    if (!rc)
        rc = gpu_queue_err_copy(be, d); /* a step's output: its error words ride the same wait */
    if (!be->stage && !rc)
        rc = copy_sync(be, dst, src, bytes, gpuMemcpyDeviceToHost, "download", d);
    /* through pinned memory: a copy into pageable memory (fresh pages most of all) runs at
     * a fraction of the bus's rate */
    for (size_t off = 0; be->stage && off < bytes && !rc; off += GPU_STAGE_BYTES) {
        size_t n = bytes - off < GPU_STAGE_BYTES ? bytes - off : GPU_STAGE_BYTES;
        rc = copy_sync(be, be->stage, (const char *)src + off, n, gpuMemcpyDeviceToHost, "download", d);
        if (!rc)
            memcpy((char *)dst + off, be->stage, n);
    }
    if (pf) {
        pf->down_ms += now_ms() - t0;
        pf->down_n++;
        pf->down_b += (double)bytes;
    }
    return rc;
}

static int gpu_sync(void *bep, rlx_diag *d)
{
    gpu_be *be = (gpu_be *)bep;
    (void)gpuSetDevice(be->device);
    if (gpu_up_flush(be, d) || gpu_queue_err_copy(be, d))
        return RLX_ERR_DEVICE;
    gpuError_t e = gpuStreamSynchronize(be->stream);
    if (e != gpuSuccess) {
        set_diag(d, RLX_ERR_DEVICE, "sync: %s", gpuGetErrorString(e));
        (void)gpuGetLastError();
        return RLX_ERR_DEVICE;
    }
    be->up_off = 0; /* the stream is idle: every upload has read its ring bytes */
    return gpu_check_pending(be, 1, d);
}

/* ---------------------------------------------------------------- compile */

static void gpu_release(void *bep, void *exep)
{
    (void)gpuSetDevice(((gpu_be *)bep)->device);
    gpu_exe *x = (gpu_exe *)exep;
    if (!x)
        return;
    (void)gpu_up_flush((gpu_be *)bep, NULL);
    if (((gpu_be *)bep)->pending == x) /* its words are not read any more */
        ((gpu_be *)bep)->pending = NULL;
    if (x->has_graph)
        (void)gpuGraphExecDestroy(x->graph);
    if (x->win && coll_link(x)) /* before the links: it needs their communicator */
        gpu_tp_window_close(coll_link(x), x->win, x->win_h);
    for (uint32_t i = 0; x->coll && i < x->n_steps; i++) /* gpu_tp.cu */
        gpu_tp_release(&x->steps[i].tp);
    if (x->scratch)
        (void)gpuFree(x->scratch);
    if (x->attn_cnt)
        (void)gpuFree(x->attn_cnt);
    free(x->graph_ptrs);
    free(x->vbytes);
    free(x->root);
    free(x->ovr_v);
    free(x->ovr_off);
    free(x->vp2);
    free(x->win_v);
    free(x->win_off);
    free(x->vpw);
    if (x->fscratch)
        (void)gpuFree(x->fscratch);
    free(x->steps);
    free(x);
}

static int gpu_supports_op(const rlx_node_desc *node, const rlx_value_desc *values)
{
    gpu_step st;
    uint32_t n = 0;
    /* the values array is the program's: any id the node names is inside it */
    for (uint32_t i = 0; i < node->n_inputs; i++)
        if (node->inputs[i] >= 0 && (uint32_t)node->inputs[i] + 1 > n)
            n = (uint32_t)node->inputs[i] + 1;
    for (uint32_t i = 0; i < node->n_outputs; i++)
        if (node->outputs[i] >= 0 && (uint32_t)node->outputs[i] + 1 > n)
            n = (uint32_t)node->outputs[i] + 1;
    return step_build(node, 0, values, n, &st, NULL) == 0;
}

/* How a matmul step runs, and the scratch bytes it needs. cuBLAS takes A and B in one
 * dtype and C in f32 or that dtype: x is cast to the weight's dtype when they differ; the
 * own kernels read any mix. The product goes through f32 scratch when an epilogue (bias,
 * SwiGLU) or the output dtype needs it. */
static size_t plan_matmul(const gpu_be *be, gpu_step *st)
{
    int blas = be->blas && !be->own_gemm, wdt = st->dti[1], ydt = st->dto[0];
    int glu = st->op == OP_LINEAR_SWIGLU, bias = st->op == OP_MATMUL && st->n_in == 3;
    int mma = be->gemv_mma && st->rows > 1 && gpu_gemv_mma_ok(wdt, st->dti[0], st->n, st->k);
    st->gemv = st->op != OP_MATMUL_NN && (st->rows <= be->gemv_rows || (mma && st->rows <= GPU_GEMV_MAX_M));
    if (st->gemv)
        return 0;
    st->a_cast = blas && st->dti[0] != wdt;
    st->c_scratch = glu || bias || (blas && ydt != RLX_F32 && ydt != wdt);
    /* gate and up in the 16-bit dtype of the weights and the output, as the model's own
     * bf16 run rounds them: half the scratch traffic of f32 products */
    st->c_half = glu && blas && !be->glu_f32 && ydt == wdt && wdt != RLX_F32;
    size_t a = st->a_cast ? align256((size_t)(st->rows * st->k) * (size_t)esize(wdt)) : 0;
    st->a_off = 0;
    st->c_off = a;
    return a + (st->c_scratch ? (glu ? 2 : 1) * align256((size_t)(st->rows * st->n) * (st->c_half ? esize(wdt) : 4)) : 0);
}

static int gpu_compile_(void *bep, const rlx_program *prog, void **out, rlx_diag *d)
{
    gpu_be *be = (gpu_be *)bep;
    *out = NULL;
    uint32_t cap = prog->n_nodes; /* steps: one a node, two for rlx.add_rms_norm */
    for (uint32_t i = 0; i < prog->n_nodes; i++)
        cap += prog->nodes[i].op && strcmp(prog->nodes[i].op, op_names[OP_ADD_RMS_NORM]) == 0;
    gpu_exe *x = (gpu_exe *)calloc(1, sizeof *x);
    if (!x || (cap && !(x->steps = (gpu_step *)calloc(cap, sizeof(gpu_step))))) {
        free(x);
        set_diag(d, RLX_ERR_NOMEM, "out of memory");
        return RLX_ERR_NOMEM;
    }
    x->n_values = prog->n_values;
    for (uint32_t i = 0; i < prog->n_nodes; i++) {
        gpu_step *st = &x->steps[x->n_steps];
        if (step_build(&prog->nodes[i], (int)i, prog->values, prog->n_values, st, d) != 0) {
            gpu_release(bep, x);
            return d ? d->code : RLX_ERR_INVALID;
        }
        x->n_steps++;
        if (st->op == OP_ADD_RMS_NORM) {
            split_add_norm(st);
            x->n_steps++;
        }
        if (op_defs[st->op].flags & OPF_CHECKS)
            x->checks = 1;
        size_t need = 0;
        if (op_is_matmul(st->op)) {
            need = plan_matmul(be, st);
            x->decode = x->decode >= 0 && st->rows <= GPU_GEMV_MAX_M ? 1 : -1;
        }
        if (st->op == OP_ALL_REDUCE || st->op == OP_ALL_GATHER) { /* gpu_tp.cu */
            st->tp.device = be->device;
            x->coll = 1;
            if (st->op == OP_ALL_GATHER && st->rows > 1)
                need = (size_t)(st->rows * st->n * st->tp.ranks * esize(st->dto[0]));
        }
        if (st->op == OP_ATTENTION || st->op == OP_ATTN_ROWS) {
            gpu_attn *a = &st->attn;
            a->min_keys = be->attn_keys;
            a->mma = be->attn_mma;
            if (st->op == OP_ATTENTION)
                a->nsplit = gpu_attn_splits(a->T, a->S, a->nh, a->nkv, a->d, be->sms, a->min_keys);
            else
                a->nsplit = be->rows_split ? gpu_attn_key_splits(a->T, a->S, a->nh, a->nkv, a->d, be->sms, a->min_keys) : 0;
            a->kgroups = be->fa_split ? gpu_attn_mma_groups(a->T, a->nh, be->sms) : 1;
            need = (size_t)gpu_attn_part_floats(a->T, a->nh, a->d, a->nsplit) * 4;
            if (a->nsplit > 0 && gpu_attn_counters(a->T, a->nh, a->nkv) > x->n_cnt)
                x->n_cnt = gpu_attn_counters(a->T, a->nh, a->nkv);
        }
        if (st->op == OP_ARGMAX)
            st->k = be->argmax_split ? gpu_argmax_blocks(st->n) : 1;
        if (st->op == OP_ARGMAX && st->k > 1) { /* each block's best, then a counter a row */
            need = (size_t)(st->rows * st->k) * 8;
            if (st->rows > x->n_cnt)
                x->n_cnt = st->rows;
        }
        if (need > x->scratch_bytes)
            x->scratch_bytes = need;
    }
    if (x->scratch_bytes) {
        gpuError_t e = gpuMalloc((void **)&x->scratch, x->scratch_bytes);
        if (e != gpuSuccess) {
            set_diag(d, RLX_ERR_NOMEM, "scratch of %zu bytes: %s", x->scratch_bytes,
                     gpuGetErrorString(e));
            (void)gpuGetLastError();
            gpu_release(bep, x);
            return RLX_ERR_NOMEM;
        }
    }
    if (x->n_cnt) {
        size_t nb = (size_t)x->n_cnt * sizeof(unsigned);
        gpuError_t e = gpuMalloc((void **)&x->attn_cnt, nb);
        if (e == gpuSuccess)
            e = gpuMemsetAsync(x->attn_cnt, 0, nb, be->stream); /* ordered before any launch */
        if (e != gpuSuccess) {
            set_diag(d, RLX_ERR_NOMEM, "attention counters of %zu bytes: %s", nb, gpuGetErrorString(e));
            (void)gpuGetLastError();
            gpu_release(bep, x);
            return RLX_ERR_NOMEM;
        }
    }
    if (prog->struct_size >= RLX_STRUCT_SIZE(rlx_program, phase)) { /* the host says (ABI 1.3) */
        x->decode = prog->phase == RLX_PHASE_DECODE;
    } else { /* an older host: every product of few rows, or a batched step's rows ops */
        for (uint32_t i = 0; i < x->n_steps; i++)
            if (x->steps[i].op == OP_ATTN_ROWS || x->steps[i].op == OP_CACHE_ROWS)
                x->decode = 1;
        x->decode = x->decode > 0;
    }
    x->graphs = be->graphs == RLX_GRAPHS_DECODE ? x->decode : be->graphs == RLX_GRAPHS_PREFILL ? !x->decode : be->graphs != 0;
    x->vbytes = (size_t *)calloc(prog->n_values + 1, sizeof(size_t));
    x->root = (int *)calloc(prog->n_values + 1, sizeof(int));
    if (x->vbytes && x->root) {
        for (uint32_t v = 0; v < prog->n_values; v++) {
            int es = esize(prog->values[v].dtype);
            x->vbytes[v] = (size_t)numel(&prog->values[v]) * (size_t)(es ? es : 8);
            x->root[v] = value_root(prog, (int)v);
        }
    }
    x->norm_rows = be->norm_rows;
    x->qkv_gemm = be->qkv_gemm;
    x->argmax_tail = be->argmax_tail;
    if (x->vbytes && x->root)
        pre_steps(x, prog);
    if (!x->vbytes || !x->root || (be->fuse && fuse_steps(x, prog) != 0) ||
        (x->n_ovr && !(x->vp2 = (void **)calloc(prog->n_values + 1, sizeof(void *))))) {
        set_diag(d, RLX_ERR_NOMEM, "out of memory");
        gpu_release(bep, x);
        return RLX_ERR_NOMEM;
    }
    if (x->fs_bytes) {
        gpuError_t e = gpuMalloc((void **)&x->fscratch, x->fs_bytes);
        if (e != gpuSuccess) {
            set_diag(d, RLX_ERR_NOMEM, "fusion scratch of %zu bytes: %s", x->fs_bytes,
                     gpuGetErrorString(e));
            (void)gpuGetLastError();
            gpu_release(bep, x);
            return RLX_ERR_NOMEM;
        }
    }
    if (!be->fuse)
        for (uint32_t i = 0; i < x->n_steps; i++)
            x->steps[i].head = x->steps[i].pre_add = x->steps[i].taker = -1;
    if (x->coll && x->graphs && coll_window_plan(x, prog) != 0) {
        set_diag(d, RLX_ERR_NOMEM, "out of memory");
        gpu_release(bep, x);
        return RLX_ERR_NOMEM;
    }
    if (be->prof)
        fprintf(stderr, "%s profile: %s program of %u steps; %d add+norm, %d gemv+swiglu, %d gemv groups, "
                "%d rope+cache groups, %d qkv+rope+cache groups, %d gemv+add fused, %d qkv gemm groups, "
                "%d argmax tails; %d norms into gemvs\n",
                RLX_GPU_VENDOR, x->decode ? "decode" : "prefill", x->n_steps, x->n_fused[FUSE_ADD_NORM],
                x->n_fused[FUSE_GLU], x->n_fused[FUSE_GEMVS], x->n_fused[FUSE_ROPE_CACHE],
                x->n_fused[FUSE_ATTN_IN], x->n_fused[FUSE_GEMV_ADD], x->n_fused[FUSE_QKV_GEMM],
                x->n_fused[FUSE_ARGMAX_TAIL], x->n_norms);
    *out = x;
    return 0;
}

static int gpu_compile(void *bep, const rlx_program *prog, void **out, rlx_diag *d)
{
    gpu_prof *pf = ((gpu_be *)bep)->prof;
    double t0 = pf ? now_ms() : 0;
    (void)gpuSetDevice(((gpu_be *)bep)->device);
    int rc = gpu_compile_(bep, prog, out, d);
    if (pf) {
        pf->compile_ms += now_ms() - t0;
        pf->compile_n++;
    }
    return rc;
}

/* ---------------------------------------------------------------- ABI 1.2 (gpu_mem.cu) */

static int gpu_mem_info(void *bep, rlx_mem_info *out, rlx_diag *d)
{
    char err[256];
    int rc = gpu_mem_query(((gpu_be *)bep)->device, out, err, sizeof err);
    if (rc) set_diag(d, rc, "%s", err);
    return rc;
}

static int gpu_measure_ceilings(void *bep, rlx_ceilings *io, rlx_diag *d)
{
    gpu_be *be = (gpu_be *)bep;
    char err[256];
    if (gpu_up_flush(be, d))
        return RLX_ERR_DEVICE;
    int rc = gpu_ceilings(be->device, be->stream, be->blas, io, err, sizeof err);
    if (rc) set_diag(d, rc, "%s", err);
    return rc;
}

/* ---------------------------------------------------------------- plugin */

#if defined(RLX_GPU_HIP)
#define BE_SUMMARY "AMD GPUs through HIP (own kernels and GEMM)"
#else
#define BE_SUMMARY "NVIDIA GPUs through CUDA (cuBLAS matmul, own kernels)"
#endif

static const rlx_backend backend = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_backend, measure_ceilings),
    RLX_GPU_VENDOR,
    BE_SUMMARY,
    100,
    0,
    op_names,
    dtype_names,
    gpu_probe,
    gpu_supports_op,
    gpu_init,
    gpu_alloc,
    gpu_free,
    gpu_upload,
    gpu_download,
    gpu_compile,
    gpu_execute,
    gpu_sync,
    gpu_release,
    gpu_teardown,
    gpu_mem_info,
    gpu_measure_ceilings,
};

static const rlx_backend *const backends[] = {&backend};

static const rlx_plugin_desc desc = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_plugin_desc, n_archs),
    RLX_ABI_MAJOR,
    RLX_ABI_MINOR,
    RLX_GPU_VENDOR,
    RLX_VERSION,
    BE_SUMMARY,
    NULL,
    0,
    backends,
    1,
    NULL,
    0,
};

extern "C" RLX_EXPORT const rlx_plugin_desc *rlx_plugin_init(const rlx_host_api *host)
{
    if (!host || host->abi_major != RLX_ABI_MAJOR)
        return NULL;
    return &desc;
}
