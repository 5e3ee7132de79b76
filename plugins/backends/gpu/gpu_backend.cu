/* The rlx backend vtable shared by the CUDA and ROCm plugins: probe, device memory, and a
 * compiled program = a list of kernel launches resolved from the graph at compile time,
 * run in order on one stream (optionally captured once as a CUDA/HIP graph). */
#include "gpu_kernels.h"
#include "gpu_spatial.h"
#include "gpu_vendor.h"
#include "rlx/plugin.h"

#include <math.h>
#include <new>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef RLX_VERSION
#define RLX_VERSION "0"
#endif

static void set_diag(rlx_diag *d, int code, const char *fmt, ...) RLX_PRINTF(3, 4);
static void set_diag(rlx_diag *d, int code, const char *fmt, ...)
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

enum gpu_op {
    OP_EMBEDDING, OP_MATMUL, OP_MATMUL_NN, OP_ADD, OP_SUB, OP_MUL, OP_SCALE, OP_ADD_SCALAR,
    OP_SILU, OP_GELU, OP_GELU_TANH, OP_TANH, OP_SOFTCAP, OP_SOFTMAX, OP_RMS_NORM,
    OP_LAYER_NORM, OP_ROPE, OP_ATTENTION, OP_CACHE_WRITE, OP_TRANSPOSE, OP_CONCAT, OP_SLICE,
    OP_LAST_ROW, OP_COPY, OP_CAST, OP_SWIGLU, OP_GEGLU_TANH, OP_ADD_RMS_NORM, OP_LINEAR_SWIGLU,
    OP_CONV2D, OP_GROUP_NORM, OP_UPSAMPLE,
    OP_BMM, OP_RELU, OP_SIN, OP_COS, /* k_bmm.cu */
    OP_COUNT
};

static const char *const op_names[OP_COUNT + 1] = {
    "rlx.embedding", "rlx.matmul", "rlx.matmul_nn", "rlx.add", "rlx.sub", "rlx.mul",
    "rlx.scale", "rlx.add_scalar", "rlx.silu", "rlx.gelu", "rlx.gelu_tanh", "rlx.tanh",
    "rlx.softcap", "rlx.softmax", "rlx.rms_norm", "rlx.layer_norm", "rlx.rope",
    "rlx.attention", "rlx.cache_write", "rlx.transpose", "rlx.concat", "rlx.slice",
    "rlx.last_row", "rlx.copy", "rlx.cast", "rlx.swiglu", "rlx.geglu_tanh", "rlx.add_rms_norm",
    "rlx.linear_swiglu", "rlx.conv2d", "rlx.group_norm", "rlx.upsample_nearest2d",
    "rlx.bmm", "rlx.relu", "rlx.sin", "rlx.cos", NULL};

static const char *const dtype_names[] = {"f32", NULL};

/* One launch (or a few) with everything resolved from shapes and attributes. */
typedef struct gpu_step {
    int op, node;
    int in[5], n_in;
    int out[2];
    int64_t rows, n, k, nb; /* meaning per op, see step_build */
    float f0, f1;
    int i0, i1, i2;
    gpu_perm perm;
    gpu_attn attn; /* pointers filled at execute */
    gpu_conv conv; /* image ops (gpu_spatial.h) */
} gpu_step;

typedef struct gpu_exe {
    gpu_step *steps;
    uint32_t n_steps;
    uint32_t n_values;
    int checks;       /* has kernels that report execute errors */
    float *scratch;   /* linear_swiglu's second product */
    size_t scratch_elems;
    /* graph replay: the pointers it was captured with */
    void **graph_ptrs;
    gpuGraphExec_t graph;
    int has_graph;
} gpu_exe;

typedef struct gpu_be {
    int device;
    gpuStream_t stream;
    gpu_blas *blas;
    int own_gemm;
    int graphs;
    int *err_dev;  /* {code, value, node} */
    int *err_host; /* pinned copy */
} gpu_be;

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

static int is4(int dt) { return dt == RLX_F32 || dt == RLX_I32; }

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
    int n_out = st->op == OP_ADD_RMS_NORM ? 2 : 1;
    if ((int)nd->n_outputs != n_out)
        FAIL(RLX_ERR_INVALID, "%u outputs, expected %d", nd->n_outputs, n_out);
    for (int i = 0; i < n_out; i++) {
        if (nd->outputs[i] < 0 || (uint32_t)nd->outputs[i] >= n_vals)
            FAIL(RLX_ERR_INVALID, "output %d is value %d of %u", i, nd->outputs[i], n_vals);
        st->out[i] = nd->outputs[i];
    }
    static const int8_t min_in[OP_COUNT] = {
        2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 2, 3, 3, 3, 3, 1, 2, 1, 1, 1, 1, 2, 2, 3, 3, 2, 3, 1};
    static const int8_t max_in[OP_COUNT] = {
        2, 3, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 2, 3, 3, 5, 3, 1, 2, 1, 1, 1, 1, 2, 2, 3, 3, 3, 3, 1};
    if (st->n_in < min_in[st->op] || st->n_in > max_in[st->op])
        FAIL(RLX_ERR_INVALID, "%d inputs, expected %d to %d", st->n_in, min_in[st->op],
             max_in[st->op]);
    const rlx_value_desc *x = &vals[st->in[0]], *y = &vals[st->out[0]];
    const rlx_value_desc *in1 = st->n_in > 1 ? &vals[st->in[1]] : NULL;
    /* dtypes: f32 everywhere except ids/positions and the 4-byte layout ops */
    int layout = st->op == OP_TRANSPOSE || st->op == OP_CONCAT || st->op == OP_SLICE ||
                 st->op == OP_LAST_ROW || st->op == OP_COPY || st->op == OP_CAST;
    for (int i = 0; i < st->n_in; i++) {
        int dt = vals[st->in[i]].dtype;
        int want_i32 = (st->op == OP_EMBEDDING && i == 1) || (st->op == OP_ROPE && i == 1) ||
                       (st->op == OP_CACHE_WRITE && i == 2);
        if (st->op == OP_ATTENTION && i >= 3)
            continue; /* pos (I32) or mask (F32), told apart by dtype below */
        if (layout ? !is4(dt) : dt != (want_i32 ? RLX_I32 : RLX_F32))
            FAIL(RLX_ERR_UNSUPPORTED, "input %d has dtype %d, not %s", i, dt,
                 layout ? "f32 or i32" : (want_i32 ? "i32" : "f32"));
    }
    for (int i = 0; i < n_out; i++)
        if (layout ? !is4(vals[st->out[i]].dtype) : vals[st->out[i]].dtype != RLX_F32)
            FAIL(RLX_ERR_UNSUPPORTED, "output %d has dtype %d", i, vals[st->out[i]].dtype);
    if (layout && st->op != OP_CAST && vals[st->out[0]].dtype != x->dtype)
        FAIL(RLX_ERR_INVALID, "output dtype differs from the input's");

    switch (st->op) {
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
            else if (o->dtype == RLX_F32 && st->i2 < 0 && numel(o) == (int64_t)a->T * a->S)
                st->i2 = st->in[i];
            else
                FAIL(RLX_ERR_INVALID, "input %d is neither pos [1] I32 nor mask [%d,%d] F32", i,
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
        if (ax < 0 || ax >= r || in1->shape.ndim != (uint32_t)r || in1->dtype != x->dtype)
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
        break;
    case OP_COPY:
    case OP_CAST:
        st->i0 = x->dtype == RLX_I32;
        st->i1 = y->dtype == RLX_I32;
        st->n = numel(x);
        if (numel(y) != st->n)
            FAIL(RLX_ERR_INVALID, "output size differs");
        break;
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
    if (st->op != OP_CACHE_WRITE && st->op != OP_ADD_RMS_NORM && st->op != OP_TRANSPOSE &&
        st->op != OP_CONCAT && st->op != OP_SLICE && st->op != OP_LAST_ROW &&
        st->op != OP_EMBEDDING && st->op != OP_MATMUL && st->op != OP_MATMUL_NN &&
        st->op != OP_LINEAR_SWIGLU && st->op != OP_CONV2D && st->op != OP_UPSAMPLE &&
        numel(y) != numel(x))
        FAIL(RLX_ERR_INVALID, "output has %lld elements, input %lld", (long long)numel(y),
             (long long)numel(x));
    if ((st->op == OP_EMBEDDING && numel(y) != st->rows * st->n) ||
        (st->op == OP_MATMUL_NN && numel(y) != st->rows * st->n) ||
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
        snprintf(p.details, sizeof p.details, "%d device(s); driver %d.%d, runtime %d.%d; matmul: %s",
                 count, drv / 1000, (drv % 1000) / 10, rt / 1000, (rt % 1000) / 10, gpu_blas_name);
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
        const char *g = getenv("RLX_GPU_GEMM");
        be->own_gemm = g && strcmp(g, "own") == 0;
    }
    {
        gpuError_t e = gpuGetDeviceCount(&count);
        if (e != gpuSuccess) {
            set_diag(d, RLX_ERR_DEVICE, "no device: %s: %s", RLX_GPU_COUNT_FN, gpuGetErrorString(e));
            (void)gpuGetLastError();
            free(be);
            return RLX_ERR_DEVICE;
        }
    }
    if (be->device < 0 || be->device >= count) {
        set_diag(d, RLX_ERR_DEVICE, "device %d does not exist (%d found)", be->device, count);
        free(be);
        return RLX_ERR_DEVICE;
    }
    GPU_TRY(gpuSetDevice(be->device), "set device");
    GPU_TRY(gpuStreamCreateWithFlags(&be->stream, gpuStreamNonBlocking), "stream create");
    GPU_TRY(gpuMalloc((void **)&be->err_dev, 4 * sizeof(int)), "error word alloc");
    GPU_TRY(gpuHostAlloc((void **)&be->err_host, 4 * sizeof(int)), "pinned alloc");
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
    if (be->stream)
        (void)gpuStreamSynchronize(be->stream);
    gpu_blas_destroy(be->blas);
    if (be->err_dev)
        (void)gpuFree(be->err_dev);
    if (be->err_host)
        (void)gpuFreeHost(be->err_host);
    if (be->stream)
        (void)gpuStreamDestroy(be->stream);
    free(be);
}

/* ---------------------------------------------------------------- memory */

static void *gpu_alloc(void *bep, size_t bytes, rlx_diag *d)
{
    (void)bep;
    void *p = NULL;
    gpuError_t e = gpuMalloc(&p, bytes ? bytes : 256);
    if (e != gpuSuccess) {
        set_diag(d, RLX_ERR_NOMEM, "alloc of %zu bytes: %s", bytes, gpuGetErrorString(e));
        (void)gpuGetLastError();
        return NULL;
    }
    return p;
}

static void gpu_free(void *bep, void *ptr)
{
    (void)bep;
    if (ptr)
        (void)gpuFree(ptr);
}

static int copy_sync(gpu_be *be, void *dst, const void *src, size_t bytes, int kind,
                     const char *what, rlx_diag *d)
{
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

static int gpu_upload(void *bep, void *dst, const void *src, size_t bytes, rlx_diag *d)
{
    return copy_sync((gpu_be *)bep, dst, src, bytes, gpuMemcpyHostToDevice, "upload", d);
}

static int gpu_download(void *bep, void *dst, const void *src, size_t bytes, rlx_diag *d)
{
    return copy_sync((gpu_be *)bep, dst, src, bytes, gpuMemcpyDeviceToHost, "download", d);
}

static int gpu_sync(void *bep, rlx_diag *d)
{
    gpu_be *be = (gpu_be *)bep;
    gpuError_t e = gpuStreamSynchronize(be->stream);
    if (e != gpuSuccess) {
        set_diag(d, RLX_ERR_DEVICE, "sync: %s", gpuGetErrorString(e));
        (void)gpuGetLastError();
        return RLX_ERR_DEVICE;
    }
    return 0;
}

/* ---------------------------------------------------------------- compile */

static void gpu_release(void *bep, void *exep)
{
    (void)bep;
    gpu_exe *x = (gpu_exe *)exep;
    if (!x)
        return;
    if (x->has_graph)
        (void)gpuGraphExecDestroy(x->graph);
    if (x->scratch)
        (void)gpuFree(x->scratch);
    free(x->graph_ptrs);
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

static int gpu_compile(void *bep, const rlx_program *prog, void **out, rlx_diag *d)
{
    (void)bep;
    *out = NULL;
    gpu_exe *x = (gpu_exe *)calloc(1, sizeof *x);
    if (!x || (prog->n_nodes && !(x->steps = (gpu_step *)calloc(prog->n_nodes, sizeof(gpu_step))))) {
        free(x);
        set_diag(d, RLX_ERR_NOMEM, "out of memory");
        return RLX_ERR_NOMEM;
    }
    x->n_values = prog->n_values;
    for (uint32_t i = 0; i < prog->n_nodes; i++) {
        gpu_step *st = &x->steps[i];
        if (step_build(&prog->nodes[i], (int)i, prog->values, prog->n_values, st, d) != 0) {
            gpu_release(bep, x);
            return d ? d->code : RLX_ERR_INVALID;
        }
        x->n_steps++;
        if (st->op == OP_EMBEDDING || st->op == OP_CACHE_WRITE)
            x->checks = 1;
        if (st->op == OP_LINEAR_SWIGLU && (size_t)(st->rows * st->n) > x->scratch_elems)
            x->scratch_elems = (size_t)(st->rows * st->n);
    }
    if (x->scratch_elems) {
        gpuError_t e = gpuMalloc((void **)&x->scratch, x->scratch_elems * sizeof(float));
        if (e != gpuSuccess) {
            set_diag(d, RLX_ERR_NOMEM, "linear_swiglu scratch: %s", gpuGetErrorString(e));
            (void)gpuGetLastError();
            gpu_release(bep, x);
            return RLX_ERR_NOMEM;
        }
    }
    *out = x;
    return 0;
}

/* ---------------------------------------------------------------- execute */

static int run_gemm(gpu_be *be, const gpu_step *st, int b_nk, const float *a, const float *b,
                    float *c, char *err, size_t errlen)
{
    if (be->blas && !be->own_gemm)
        return gpu_blas_gemm(be->blas, b_nk, a, b, c, st->rows, st->n, st->k, err, errlen);
    gpu_gemm(be->stream, b_nk, a, b, c, st->rows, st->n, st->k);
    return 0;
}

/* Enqueues one step; 0 or a diag naming the op, the node and the error text. */
static int run_step(gpu_be *be, gpu_exe *x, gpu_step *st, void *const *vp, rlx_diag *d)
{
    gpuStream_t s = be->stream;
    const float *a = (const float *)vp[st->in[0]];
    const float *b = st->n_in > 1 ? (const float *)vp[st->in[1]] : NULL;
    float *y = (float *)vp[st->out[0]];
    char err[384];
    err[0] = 0;
    int rc = 0;
    gpuError_t e = gpuSuccess;
    switch (st->op) {
    case OP_EMBEDDING:
        gpu_embedding(s, a, (const int32_t *)b, y, st->rows, st->nb, st->n, be->err_dev, st->node);
        break;
    case OP_MATMUL:
        rc = run_gemm(be, st, 1, a, b, y, err, sizeof err);
        if (!rc && st->n_in == 3)
            gpu_bias_add(s, y, (const float *)vp[st->in[2]], st->rows, st->n);
        break;
    case OP_MATMUL_NN:
        rc = run_gemm(be, st, 0, a, b, y, err, sizeof err);
        break;
    case OP_LINEAR_SWIGLU:
        rc = run_gemm(be, st, 1, a, b, y, err, sizeof err);
        if (!rc)
            rc = run_gemm(be, st, 1, a, (const float *)vp[st->in[2]], x->scratch, err, sizeof err);
        if (!rc)
            gpu_binary(s, GB_SWIGLU, y, x->scratch, y, st->rows * st->n, st->rows * st->n);
        break;
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
    case OP_SWIGLU:
    case OP_GEGLU_TANH:
        gpu_binary(s, st->i0, a, b, y, st->n, st->nb);
        break;
    case OP_SCALE:
    case OP_ADD_SCALAR:
    case OP_SILU:
    case OP_GELU:
    case OP_GELU_TANH:
    case OP_TANH:
    case OP_SOFTCAP:
        gpu_unary(s, st->i0, a, y, st->n, st->f0);
        break;
    case OP_SOFTMAX:
        gpu_softmax(s, a, y, st->rows, st->n);
        break;
    case OP_BMM:
        gpu_bmm(s, st->i0, a, b, y, st->nb, st->rows, st->n, st->k);
        break;
    case OP_RELU:
    case OP_SIN:
    case OP_COS:
        gpu_map(s, st->i0, a, y, st->n);
        break;
    case OP_RMS_NORM:
        gpu_rms_norm(s, a, NULL, b, NULL, y, st->rows, st->n, st->f0, st->i0);
        break;
    case OP_ADD_RMS_NORM:
        gpu_rms_norm(s, a, b, (const float *)vp[st->in[2]], y, (float *)vp[st->out[1]], st->rows,
                     st->n, st->f0, st->i0);
        break;
    case OP_LAYER_NORM:
        gpu_layer_norm(s, a, b, (const float *)vp[st->in[2]], y, st->rows, st->n, st->f0);
        break;
    case OP_ROPE:
        gpu_rope(s, a, (const int32_t *)b, (const float *)vp[st->in[2]], y, st->rows, st->nb,
                 st->n, st->k);
        break;
    case OP_ATTENTION: {
        gpu_attn at = st->attn;
        at.q = a;
        at.k = b;
        at.v = (const float *)vp[st->in[2]];
        at.pos = st->i1 >= 0 ? (const int32_t *)vp[st->i1] : NULL;
        at.mask = st->i2 >= 0 ? (const float *)vp[st->i2] : NULL;
        at.o = y;
        gpu_attention(s, &at);
        break;
    }
    case OP_CACHE_WRITE:
        if ((const void *)y != (const void *)a)
            e = gpuMemcpyAsync(y, a, (size_t)(st->rows * st->n) * 4, gpuMemcpyDeviceToDevice, s);
        if (e == gpuSuccess)
            gpu_cache_write(s, y, b, (const int32_t *)vp[st->in[2]], st->rows, st->nb, st->n,
                            be->err_dev, st->node);
        break;
    case OP_TRANSPOSE:
        gpu_transpose(s, a, y, st->n, &st->perm);
        break;
    case OP_CONCAT:
        gpu_concat(s, a, b, y, st->rows, st->n, st->nb);
        break;
    case OP_SLICE:
        gpu_slice(s, a, y, st->rows, st->nb, st->k, st->n);
        break;
    case OP_LAST_ROW:
        e = gpuMemcpyAsync(y, (const uint32_t *)(const void *)a + st->k, (size_t)st->n * 4,
                           gpuMemcpyDeviceToDevice, s);
        break;
    case OP_COPY:
        if (st->n)
            e = gpuMemcpyAsync(y, a, (size_t)st->n * 4, gpuMemcpyDeviceToDevice, s);
        break;
    case OP_CAST:
        gpu_cast(s, a, st->i0, y, st->i1, st->n);
        break;
    case OP_CONV2D:
        gpu_conv2d(s, &st->conv, a, b, st->n_in > 2 ? (const float *)vp[st->in[2]] : NULL, y);
        break;
    case OP_GROUP_NORM:
        gpu_group_norm(s, &st->conv, a, b, (const float *)vp[st->in[2]], y, st->f0);
        break;
    case OP_UPSAMPLE:
        gpu_upsample_nearest(s, &st->conv, a, y);
        break;
    }
    if (rc) {
        set_diag(d, RLX_ERR_DEVICE, "%s (node %d): %s", op_names[st->op], st->node, err);
        return RLX_ERR_DEVICE;
    }
    if (e == gpuSuccess)
        e = gpuGetLastError();
    if (e != gpuSuccess) {
        set_diag(d, RLX_ERR_DEVICE, "%s (node %d): %s", op_names[st->op], st->node,
                 gpuGetErrorString(e));
        return RLX_ERR_DEVICE;
    }
    return 0;
}

static int enqueue_all(gpu_be *be, gpu_exe *x, void *const *vp, rlx_diag *d)
{
    if (x->checks) {
        gpuError_t e = gpuMemsetAsync(be->err_dev, 0, 4 * sizeof(int), be->stream);
        if (e != gpuSuccess) {
            set_diag(d, RLX_ERR_DEVICE, "execute: %s", gpuGetErrorString(e));
            return RLX_ERR_DEVICE;
        }
    }
    for (uint32_t i = 0; i < x->n_steps; i++) {
        int rc = run_step(be, x, &x->steps[i], vp, d);
        if (rc)
            return rc;
    }
    if (x->checks) {
        gpuError_t e = gpuMemcpyAsync(be->err_host, be->err_dev, 4 * sizeof(int),
                                      gpuMemcpyDeviceToHost, be->stream);
        if (e != gpuSuccess) {
            set_diag(d, RLX_ERR_DEVICE, "execute: %s", gpuGetErrorString(e));
            return RLX_ERR_DEVICE;
        }
    }
    return 0;
}

/* Captures the launches once per set of value addresses; replays while they stay. */
static int run_graph(gpu_be *be, gpu_exe *x, void *const *vp, rlx_diag *d)
{
    size_t pbytes = (size_t)x->n_values * sizeof(void *);
    if (!x->has_graph || !x->graph_ptrs || memcmp(x->graph_ptrs, vp, pbytes) != 0) {
        if (x->has_graph) {
            (void)gpuGraphExecDestroy(x->graph);
            x->has_graph = 0;
        }
        if (!x->graph_ptrs && !(x->graph_ptrs = (void **)malloc(pbytes ? pbytes : 1))) {
            set_diag(d, RLX_ERR_NOMEM, "out of memory");
            return RLX_ERR_NOMEM;
        }
        gpuGraph_t g;
        gpuError_t e = gpuStreamBeginCapture(be->stream);
        if (e != gpuSuccess) {
            set_diag(d, RLX_ERR_DEVICE, "graph capture: %s", gpuGetErrorString(e));
            return RLX_ERR_DEVICE;
        }
        int rc = enqueue_all(be, x, vp, d);
        e = gpuStreamEndCapture(be->stream, &g);
        if (rc)
            return rc;
        if (e == gpuSuccess) {
            e = gpuGraphInstantiate(&x->graph, g);
            (void)gpuGraphDestroy(g);
        }
        if (e != gpuSuccess) {
            set_diag(d, RLX_ERR_DEVICE, "graph capture: %s", gpuGetErrorString(e));
            (void)gpuGetLastError();
            return RLX_ERR_DEVICE;
        }
        x->has_graph = 1;
        memcpy(x->graph_ptrs, vp, pbytes);
    }
    gpuError_t e = gpuGraphLaunch(x->graph, be->stream);
    if (e != gpuSuccess) {
        set_diag(d, RLX_ERR_DEVICE, "graph launch: %s", gpuGetErrorString(e));
        return RLX_ERR_DEVICE;
    }
    return 0;
}

static int gpu_execute(void *bep, void *exep, void *const *vp, rlx_diag *d)
{
    gpu_be *be = (gpu_be *)bep;
    gpu_exe *x = (gpu_exe *)exep;
    int rc = be->graphs ? run_graph(be, x, vp, d) : enqueue_all(be, x, vp, d);
    if (rc || !x->checks)
        return rc;
    /* ids and cache positions live on the device: their errors are known after the run */
    gpuError_t e = gpuStreamSynchronize(be->stream);
    if (e != gpuSuccess) {
        set_diag(d, RLX_ERR_DEVICE, "execute: %s", gpuGetErrorString(e));
        (void)gpuGetLastError();
        return RLX_ERR_DEVICE;
    }
    const int *w = be->err_host;
    if (w[0] == GPU_ERR_NONE)
        return 0;
    const gpu_step *st = NULL;
    for (uint32_t i = 0; i < x->n_steps; i++)
        if (x->steps[i].node == w[2])
            st = &x->steps[i];
    if (w[0] == GPU_ERR_EMBED_ID)
        set_diag(d, RLX_ERR_INVALID, "rlx.embedding (node %d): id %d outside [0, %lld)", w[2],
                 w[1], st ? (long long)st->nb : -1LL);
    else
        set_diag(d, RLX_ERR_INVALID,
                 "rlx.cache_write (node %d): rows %d..%lld are outside the cache's %lld rows",
                 w[2], w[1], st ? (long long)w[1] + st->nb - 1 : -1LL,
                 st ? (long long)st->rows : -1LL);
    return RLX_ERR_INVALID;
}

/* ---------------------------------------------------------------- plugin */

#if defined(RLX_GPU_HIP)
#define BE_SUMMARY "AMD GPUs through HIP (own kernels and GEMM)"
#else
#define BE_SUMMARY "NVIDIA GPUs through CUDA (cuBLAS matmul, own kernels)"
#endif

static const rlx_backend backend = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_backend, teardown),
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
