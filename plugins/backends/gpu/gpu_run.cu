/* The GPU backend's execute: a compiled program's steps enqueued on the backend's stream, or
 * replayed as the graph captured from them; fused groups (gpu_fuse.cu) launched when their
 * buffers allow at this execute. */
#include "gpu_exe.h"
#include "gpu_kernels.h"
#include "gpu_spatial.h"
#include "gpu_tp.h"
#include "gpu_vendor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void rows_run(gpu_be *be, const gpu_exe *x, const gpu_step *st, void *const *vp, gpuError_t *e);

/* ---------------------------------------------------------------- execute */

static int run_gemm(gpu_be *be, const gpu_step *st, int b_nk, gpu_ten a, gpu_ten b, gpu_ten c,
                    char *err, size_t errlen)
{
    if (be->blas && !be->own_gemm)
        return gpu_blas_gemm_t(be->blas, b_nk, a, b, c, st->rows, st->n, st->k, err, errlen);
    gpu_gemm_t(be->stream, b_nk, a, b, c, st->rows, st->n, st->k);
    return 0;
}

/* matmul, matmul_nn, linear_swiglu as plan_matmul decided */
static int run_matmul(gpu_be *be, gpu_exe *x, const gpu_step *st, void *const *vp, char *err,
                      size_t errlen)
{
    gpuStream_t s = be->stream;
    gpu_ten a = {vp[st->in[0]], st->dti[0]}, w = {vp[st->in[1]], st->dti[1]};
    gpu_ten y = {vp[st->out[0]], st->dto[0]}, none = {NULL, GDT_F32};
    int glu = st->op == OP_LINEAR_SWIGLU;
    gpu_ten third = st->n_in == 3 ? gpu_ten{vp[st->in[2]], st->dti[2]} : none;
    if (st->gemv) {
        gpu_gemv(s, a, w, glu ? third : none, glu ? none : third, y, st->wfix, st->rows, st->n, st->k);
        return 0;
    }
    if (st->a_cast) {
        gpu_ten ac = {x->scratch + st->a_off, w.dt};
        gpu_cast_t(s, a, ac, st->rows * st->k);
        a = ac;
    }
    int b_nk = st->op != OP_MATMUL_NN, cdt = st->c_half ? w.dt : GDT_F32;
    gpu_ten c = st->c_scratch ? gpu_ten{x->scratch + st->c_off, cdt} : y;
    int rc = run_gemm(be, st, b_nk, a, w, c, err, errlen);
    if (rc || !st->c_scratch)
        return rc;
    if (glu) { /* up beside gate (plan_matmul's two 256-byte aligned halves) */
        gpu_ten up = {x->scratch + st->c_off + align256((size_t)(st->rows * st->n) * (size_t)esize(cdt)), cdt};
        rc = run_gemm(be, st, 1, a, third, up, err, errlen);
        if (!rc)
            gpu_binary_t(s, GB_SWIGLU, c, up, y, st->rows * st->n, st->rows * st->n);
        return rc;
    }
    gpu_bias_cast(s, c, third, y, st->rows, st->n);
    return 0;
}

/* ---------------------------------------------------------------- fused groups */

static gpu_ten tin(const gpu_step *st, void *const *vp, int i) { return gpu_ten{vp[st->in[i]], st->dti[i]}; }
static gpu_ten tout(const gpu_step *st, void *const *vp, int i) { return gpu_ten{vp[st->out[i]], st->dto[i]}; }

static int overlap(void *const *vp, const size_t *vb, int a, int b)
{
    const char *pa = (const char *)vp[a], *pb = (const char *)vp[b];
    return pa < pb + vb[b] && pb < pa + vb[a];
}

/* add + rms_norm: a thread reads each element of its row before it writes that element
 * (same index, same element size), so an output stored exactly over an input is safe (the
 * arena gives the norm the bytes of the product the add consumed); GEMV + add: the thread
 * that writes an output element reads the residual's element first */
static int same_bytes(const gpu_exe *x, const gpu_step *h, void *const *vp, int w, int r)
{
    if (vp[w] != vp[r] || x->vbytes[w] != x->vbytes[r])
        return 0;
    if (h->fuse == FUSE_ADD_NORM)
        return 1;
    const gpu_step *ad = h->fuse == FUSE_GEMV_ADD ? &x->steps[h->part[0]] : NULL;
    if (ad)
        return w == ad->out[0] && r == ad->in[ad->in[0] == h->out[0] ? 1 : 0];
    /* a taken add's sum over its x or residual: gpu_gemv_multi stores it once every block
     * has read both (or adds first) */
    ad = h->pre_add >= 0 ? &x->steps[h->pre_add] : NULL;
    return ad && w == ad->out[0] && (r == ad->in[0] || r == ad->in[1]);
}

/* May head h run steps [g0, h->g1) in one launch now (g0: its group's, or its pre_add)?
 * Nothing the launch writes may overlap a value it reads from outside those steps, and
 * cache writes must be in place. */
static int fuse_safe_from(const gpu_exe *x, const gpu_step *h, void *const *vp, int g0)
{
    int g1 = h->g1;
    int wr[2 * (GPU_FUSE_PARTS + 2)], rd[5 * (GPU_FUSE_PARTS + 2)], nw = 0, nr = 0;
    for (int j = g0; j < g1; j++) {
        const gpu_step *st = &x->steps[j];
        if (st->op == OP_CACHE_WRITE) {
            if (vp[st->out[0]] != vp[st->in[0]])
                return 0;
        } else if (!((h->fuse == FUSE_GLU || h->fuse == FUSE_GEMV_ADD) && st->op == OP_MATMUL) &&
                   !st->priv && j != h->nrm) {
            /* GLU, GEMV_ADD: products unwritten; ATTN_IN: private ones in scratch; an
             * absorbed norm's output unwritten */
            for (int o = 0; o < op_defs[st->op].n_out; o++)
                wr[nw++] = st->out[o];
        }
        for (int i = 0; i < st->n_in; i++)
            if (!(st->op == OP_CACHE_WRITE && i == 0) && !made_in(x, g0, g1, st->in[i]))
                rd[nr++] = st->in[i];
    }
    for (int a = 0; a < nw; a++)
        for (int b = 0; b < nr; b++)
            if (overlap(vp, x->vbytes, wr[a], rd[b]) && !same_bytes(x, h, vp, wr[a], rd[b]))
                return 0;
    return 1;
}

/* a FUSE_QKV_GEMM group's weights, in its order, each right after the one before: one
 * [sum of n, k] matrix (the core binds a program's weights side by side in node order) */
static int weights_side_by_side(const gpu_exe *x, const gpu_step *h, void *const *vp)
{
    const char *next = NULL;
    for (int m = h->g0; m < h->g1; m++) {
        const gpu_step *st = &x->steps[m];
        if (st->op != OP_MATMUL)
            continue;
        const char *w = (const char *)vp[st->in[1]];
        if (next && w != next)
            return 0;
        next = w + (size_t)(st->n * st->k) * (size_t)esize(st->dti[1]);
    }
    return 1;
}

static int fuse_safe(const gpu_exe *x, const gpu_step *h, void *const *vp)
{
    if (h->fuse == FUSE_QKV_GEMM && !weights_side_by_side(x, h, vp))
        return 0;
    return fuse_safe_from(x, h, vp, h->g0);
}

/* The columns of a FUSE_QKV_GEMM group's one GEMM (the sum of its matmuls' n), and in *at
 * the first column of value v's product (v a product or its reshape), -1 when v is none */
static int64_t qkv_cols(const gpu_exe *x, const gpu_step *h, int v, int64_t *at)
{
    int64_t col = 0;
    *at = -1;
    for (int m = h->g0; m < h->g1; m++) {
        const gpu_step *st = &x->steps[m];
        if (st->op != OP_MATMUL)
            continue;
        if (v >= 0 && x->root[v] == st->out[0])
            *at = col;
        col += st->n;
    }
    return col;
}

/* In a FUSE_QKV_GEMM group, where value v (a product of the group, or its reshape) lies in
 * the GEMM's scratch: *xld its row stride; else v's own bytes, rows packed */
static gpu_ten qkv_part(const gpu_exe *x, const gpu_step *h, void *const *vp, int v, int dt, int64_t *xld)
{
    *xld = 0;
    if (h->fuse != FUSE_QKV_GEMM)
        return gpu_ten{vp[v], dt};
    int64_t at, ntot = qkv_cols(x, h, v, &at);
    if (at < 0)
        return gpu_ten{vp[v], dt};
    *xld = ntot;
    return gpu_ten{x->fscratch + (size_t)at * (size_t)esize(dt), dt};
}

/* the ropes and cache writes of group [h->g0, h->g1) in one launch (other steps skipped);
 * without ropes (they ran before) every cache write is a copy job */
static void run_rope_cache(gpu_be *be, const gpu_exe *x, const gpu_step *h, void *const *vp, int ropes = 1)
{
    const gpu_ten none = {NULL, GDT_F32};
    gpu_rc_job jb[GPU_RC_JOBS];
    int64_t xld = 0;
    int nj = 0, of[GPU_RC_JOBS]; /* the job of each rope step (by its output value) */
    for (int m = h->g0; m < h->g1 && nj < GPU_RC_JOBS; m++) {
        const gpu_step *st = &x->steps[m];
        if ((st->op != OP_ROPE || !ropes) && st->op != OP_CACHE_WRITE)
            continue;
        gpu_rc_job *r = NULL;
        if (st->op == OP_CACHE_WRITE)
            for (int q = 0; q < nj; q++)
                if (of[q] == st->in[1])
                    r = &jb[q];
        if (st->op == OP_ROPE || !r) {
            r = &jb[nj];
            memset(r, 0, sizeof *r);
            of[nj++] = st->op == OP_ROPE ? st->out[0] : -1;
        }
        if (st->op == OP_ROPE) {
            gpu_ten xs = qkv_part(x, h, vp, st->in[0], st->dti[0], &xld);
            *r = gpu_rc_job{xs, tout(st, vp, 0), tin(st, vp, 2), none,
                            (const int32_t *)vp[st->in[1]], NULL, st->rows, st->nb, st->n, st->k, 0, st->node,
                            st->pre, xld};
        } else {
            if (!r->inv_freq.p) { /* a copy job: rows of x */
                r->x = qkv_part(x, h, vp, st->in[1], st->dti[1], &xld);
                r->xld = xld;
                r->T = st->nb;
                r->nh = 1;
                r->d = st->n;
            }
            r->cache = tout(st, vp, 0);
            r->cpos = (const int32_t *)vp[st->in[2]];
            r->S = st->rows;
            r->node = st->node;
        }
    }
    gpu_rope_cache(be->stream, jb, nj, be->err_dev);
}

static gpu_gemv_seg gv_seg(const gpu_step *st, void *const *vp)
{
    const gpu_ten none = {NULL, GDT_F32};
    return gpu_gemv_seg{tin(st, vp, 1), st->n_in == 3 ? tin(st, vp, 2) : none, tout(st, vp, 0), st->n,
                        none, GDT_F32, st->wfix};
}

/* steps [j0, j1): gate, up, swiglu (one GEMV with the SwiGLU epilogue), a linear_swiglu,
 * or 1-3 GEMVs of one x, over xin (normed first with pn) */
static void norm_gemvs(gpuStream_t s, const gpu_exe *x, int j0, int j1, gpu_ten xin, const gpu_gemv_norm *pn,
                       void *const *vp)
{
    const gpu_ten none = {NULL, GDT_F32};
    gpu_gemv_seg sg[GPU_GEMV_SEGS];
    const gpu_step *a = &x->steps[j0], *c = &x->steps[j1 - 1];
    if (c->op == OP_SWIGLU) {
        const gpu_step *b = &x->steps[j0 + 1];
        const gpu_step *gate = c->in[0] == a->out[0] ? a : b, *up = gate == a ? b : a;
        sg[0] = gv_seg(gate, vp);
        sg[0].bias = none;
        sg[0].y = tout(c, vp, 0);
        sg[0].fixed = gate->wfix && up->wfix;
        gpu_gemv_multi(s, xin, tin(up, vp, 1), sg, 1, a->rows, a->k, pn);
        return;
    }
    if (a->op == OP_LINEAR_SWIGLU) { /* in[2] is w_up, not a bias */
        sg[0] = gv_seg(a, vp);
        sg[0].bias = none;
        gpu_gemv_multi(s, xin, tin(a, vp, 2), sg, 1, a->rows, a->k, pn);
        return;
    }
    int ns = 0;
    for (int j = j0; j < j1 && ns < GPU_GEMV_SEGS; j++)
        sg[ns++] = gv_seg(&x->steps[j], vp);
    gpu_gemv_multi(s, xin, none, sg, ns, a->rows, a->k, pn);
}

/* the group of head h in one launch (fuse_safe said it may) */
static int run_fused(gpu_be *be, gpu_exe *x, const gpu_step *h, void *const *vp, char *err, size_t errlen)
{
    int rc = 0;
    gpuStream_t s = be->stream;
    const gpu_ten none = {NULL, GDT_F32};
    const gpu_step *nm = h->nrm >= 0 ? &x->steps[h->nrm] : NULL;
    void *const *vx = h->fuse == FUSE_ATTN_IN ? x->vp2 : vp;
    gpu_gemv_norm gn = {nm ? tin(nm, vx, 1) : none, nm ? nm->f0 : 0.0f, nm ? nm->i0 : 0, none, none, be->sum_last};
    const gpu_gemv_norm *pn = nm ? &gn : NULL;
    const int hi = (int)(h - x->steps);
    gpu_ten xn = nm ? tin(nm, vp, 0) : none; /* the x a norm of the group reads */
    if (h->add_now) { /* the add before that norm, its sum stored by the GEMV launch */
        const gpu_step *ad = &x->steps[h->pre_add];
        xn = tin(ad, vp, 0);
        gn.res = tin(ad, vp, 1);
        gn.sum = tout(ad, vp, 0);
    }
    switch (h->fuse) {
    case FUSE_ADD_NORM: {
        const gpu_step *rn = &x->steps[h->part[0]];
        gpu_rms_norm(s, tin(h, vp, 0), tin(h, vp, 1), tin(rn, vp, 1), tout(h, vp, 0), tout(rn, vp, 0),
                     rn->rows, rn->n, rn->f0, rn->i0);
        break;
    }
    case FUSE_GLU: /* gate, up, swiglu: three steps from the head */
    case FUSE_GEMVS: /* the head and the GEMVs after it (the norm, if any, before it) */
        norm_gemvs(s, x, hi, hi + (h->fuse == FUSE_GLU ? 3 : 1 + h->n_part - (nm ? 1 : 0)),
                   nm ? xn : tin(h, vp, 0), pn, vp);
        break;
    case FUSE_GEMV_ADD: {
        const gpu_step *ad = &x->steps[h->part[0]];
        gpu_gemv_seg sg = gv_seg(h, vp);
        sg.y = tout(ad, vp, 0);
        sg.res = tin(ad, vp, ad->in[0] == h->out[0] ? 1 : 0);
        sg.pdt = h->dto[0];
        gpu_gemv_multi(s, tin(h, vp, 0), none, &sg, 1, h->rows, h->k, NULL);
        break;
    }
    case FUSE_ROPE_CACHE:
        run_rope_cache(be, x, h, vp);
        break;
    case FUSE_ARGMAX_TAIL: {
        gpu_tail t;
        t.n = 0;
        t.err = be->err_dev;
        for (int k = 0; k < h->n_part && k < GPU_TAIL_MAX; k++) {
            const gpu_step *o = &x->steps[h->part[k]];
            gpu_tail_op &op = t.op[t.n++];
            op.dst = (uint32_t *)vp[o->out[0]]; /* a cache write's is its cache (fuse_safe) */
            op.src = (const uint32_t *)vp[o->in[o->op == OP_CACHE_WRITE ? 1 : 0]];
            op.pos = o->op == OP_CACHE_WRITE ? (const int32_t *)vp[o->in[2]] : NULL;
            op.S = o->rows;
            op.add = (int32_t)o->f0;
            op.node = o->node;
        }
        gpu_argmax(s, tin(h, vp, 0), (int32_t *)vp[h->out[0]], h->rows, h->n, (int)h->k, (float *)(void *)x->scratch,
                   x->attn_cnt, &t);
        break;
    }
    case FUSE_QKV_GEMM: { /* one GEMM over the side-by-side weights into scratch, then the ropes and caches */
        gpu_step g = x->steps[h->g0];
        int64_t at;
        g.n = qkv_cols(x, h, -1, &at);
        rc = run_gemm(be, &g, 1, tin(&g, vp, 0), tin(&g, vp, 1), gpu_ten{x->fscratch, g.dto[0]}, err, errlen);
        /* many rows: each rope as k_rope_tok (a token's angles once, not an element's), then
         * the cache writes as copies */
        for (int m = h->g0; m < h->g1 && !rc; m++) {
            const gpu_step *st = &x->steps[m];
            if (st->op != OP_ROPE)
                continue;
            int64_t xld; /* set by qkv_part before the launch reads it (argument order is unspecified) */
            gpu_ten xs = qkv_part(x, h, vp, st->in[0], st->dti[0], &xld);
            gpu_rope(s, xs, (const int32_t *)vp[st->in[1]], tin(st, vp, 2), tout(st, vp, 0), st->rows, st->nb,
                     st->n, st->k, xld);
        }
        if (!rc)
            run_rope_cache(be, x, h, vp, 0);
        break;
    }
    case FUSE_ATTN_IN: { /* the products (private ones in scratch: vp2), then ropes and caches */
        gpu_gemv_seg sg[GPU_GEMV_SEGS];
        const gpu_step *first = NULL;
        int ns = 0;
        for (int m = h->g0; m < h->g1; m++) {
            const gpu_step *st = &x->steps[m];
            if (st->op != OP_MATMUL)
                continue;
            first = first ? first : st;
            sg[ns++] = gv_seg(st, x->vp2);
        }
        gpu_gemv_multi(s, h->add_now ? xn : nm ? tin(nm, x->vp2, 0) : tin(first, x->vp2, 0), none, sg, ns,
                       first->rows, first->k, pn);
        run_rope_cache(be, x, h, x->vp2);
        break;
    }
    }
    return rc;
}

/* Enqueues one step; 0 or a diag naming the op, the node and the error text. */
static int run_step(gpu_be *be, gpu_exe *x, gpu_step *st, void *const *vp, rlx_diag *d)
{
    gpuStream_t s = be->stream;
#define TI(i) (gpu_ten{vp[st->in[i]], st->dti[i]})
#define TO(i) (gpu_ten{vp[st->out[i]], st->dto[i]})
    const void *a = vp[st->in[0]];
    const void *b = st->n_in > 1 ? vp[st->in[1]] : NULL;
    void *y = vp[st->out[0]];
    const gpu_ten none = {NULL, GDT_F32};
    const int es = esize(st->dto[0]);
    char err[384];
    err[0] = 0;
    int rc = 0;
    gpuError_t e = gpuSuccess;
    switch ((gpu_op)st->op) {
    case OP_COUNT: /* never: step_build set a valid op */
        break;
    case OP_EMBEDDING:
        gpu_embedding(s, TI(0), (const int32_t *)b, TO(0), st->rows, st->nb, st->n, be->err_dev,
                      st->node);
        break;
    case OP_MATMUL:
    case OP_MATMUL_NN:
    case OP_LINEAR_SWIGLU:
        rc = run_matmul(be, x, st, vp, err, sizeof err);
        break;
    case OP_ADD:
    case OP_SUB:
    case OP_MUL:
    case OP_SWIGLU:
    case OP_GEGLU_TANH:
        gpu_binary_t(s, st->i0, TI(0), TI(1), TO(0), st->n, st->nb);
        break;
    case OP_ADD_SCALAR:
        if (st->dti[0] == RLX_I32) { /* positions */
            gpu_add_i32(s, (const int32_t *)a, (int32_t *)y, st->n, (int32_t)st->f0);
            break;
        }
        gpu_unary_t(s, st->i0, TI(0), TO(0), st->n, st->f0);
        break;
    case OP_SCALE:
    case OP_SILU:
    case OP_GELU:
    case OP_GELU_TANH:
    case OP_TANH:
    case OP_SOFTCAP:
        gpu_unary_t(s, st->i0, TI(0), TO(0), st->n, st->f0);
        break;
    case OP_SOFTMAX:
        gpu_softmax(s, TI(0), TO(0), st->rows, st->n);
        break;
    case OP_ARGMAX:
        gpu_argmax(s, TI(0), (int32_t *)y, st->rows, st->n, (int)st->k, (float *)(void *)x->scratch, x->attn_cnt,
                   NULL);
        break;
    case OP_BMM:
        gpu_bmm(s, st->i0, (const float *)a, (const float *)b, (float *)y, st->nb, st->rows, st->n, st->k);
        break;
    case OP_RELU:
    case OP_SIN:
    case OP_COS:
        gpu_map(s, st->i0, (const float *)a, (float *)y, st->n);
        break;
    case OP_RMS_NORM:
        gpu_rms_norm(s, TI(0), none, TI(1), none, TO(0), st->rows, st->n, st->f0, st->i0);
        break;
    case OP_ADD_RMS_NORM: /* never: compile made it an add and an rms_norm (split_add_norm) */
        break;
    case OP_LAYER_NORM:
        gpu_layer_norm(s, TI(0), TI(1), TI(2), TO(0), st->rows, st->n, st->f0);
        break;
    case OP_ROPE:
        gpu_rope(s, TI(0), (const int32_t *)b, TI(2), TO(0), st->rows, st->nb, st->n, st->k, 0);
        break;
    case OP_ATTENTION: {
        gpu_attn at = st->attn;
        at.q = TI(0);
        at.k = TI(1);
        at.v = TI(2);
        at.pos = st->i1 >= 0 ? (const int32_t *)vp[st->i1] : NULL;
        at.mask = none;
        for (int i = 3; i < st->n_in; i++)
            if (st->in[i] == st->i2)
                at.mask = TI(i);
        at.o = TO(0);
        at.part = (float *)(void *)x->scratch;
        at.cnt = x->attn_cnt;
        at.early = st->pre;
        gpu_attention(s, &at);
        break;
    }
    case OP_CACHE_WRITE:
        if ((const void *)y != a)
            e = gpuMemcpyAsync(y, a, (size_t)(st->rows * st->n) * es, gpuMemcpyDeviceToDevice, s);
        if (e == gpuSuccess)
            gpu_cache_write(s, y, b, (const int32_t *)vp[st->in[2]], st->rows, st->nb, st->n, es,
                            be->err_dev, st->node);
        break;
    case OP_ATTN_ROWS:
    case OP_CACHE_ROWS:
        rows_run(be, x, st, vp, &e);
        break;
    case OP_TRANSPOSE:
        gpu_transpose(s, a, y, st->n, &st->perm, es);
        break;
    case OP_CONCAT:
        gpu_concat(s, a, b, y, st->rows, st->n, st->nb, es);
        break;
    case OP_SLICE:
        gpu_slice(s, a, y, st->rows, st->nb, st->k, st->n, es);
        break;
    case OP_LAST_ROW:
        if (st->n_in == 2)
            gpu_take_row(s, a, (const int32_t *)b, y, st->rows, st->n, es);
        else
            e = gpuMemcpyAsync(y, (const char *)a + (size_t)st->k * es, (size_t)st->n * es,
                               gpuMemcpyDeviceToDevice, s);
        break;
    case OP_COPY:
        if (st->n)
            e = gpuMemcpyAsync(y, a, (size_t)st->n * es, gpuMemcpyDeviceToDevice, s);
        break;
    case OP_CAST:
        gpu_cast_t(s, TI(0), TO(0), st->n);
        break;
    case OP_CONV2D:
        gpu_conv2d(s, &st->conv, (const float *)a, (const float *)b,
                   st->n_in > 2 ? (const float *)vp[st->in[2]] : NULL, (float *)y);
        break;
    case OP_GROUP_NORM:
        gpu_group_norm(s, &st->conv, (const float *)a, (const float *)b, (const float *)vp[st->in[2]],
                       (float *)y, st->f0);
        break;
    case OP_UPSAMPLE:
        gpu_upsample_nearest(s, &st->conv, (const float *)a, (float *)y);
        break;
    case OP_ALL_REDUCE:
    case OP_ALL_GATHER:
        rc = gpu_coll_run(s, &st->tp, st->op == OP_ALL_GATHER, a, y, x->scratch, st->rows, st->n, st->dto[0],
                          err, sizeof err);
        break;
    }
#undef TI
#undef TO
    if (rc) {
        set_diag(d, RLX_ERR_DEVICE, "%s (node %d): %s", op_defs[st->op].name, st->node, err);
        return RLX_ERR_DEVICE;
    }
    if (e == gpuSuccess)
        e = gpuGetLastError();
    if (e != gpuSuccess) {
        set_diag(d, RLX_ERR_DEVICE, "%s (node %d): %s", op_defs[st->op].name, st->node,
                 gpuGetErrorString(e));
        return RLX_ERR_DEVICE;
    }
    return 0;
}

/* RLX_GPU_PROFILE: an unfused matmul's time under its shape (the first GPU_PROF_SHAPES) */
static void prof_shape(gpu_prof *pf, int ph, const gpu_step *st, float ms)
{
    int i = 0;
    while (i < pf->n_shp[ph] && !(pf->shp[ph][i].op == st->op && pf->shp[ph][i].rows == st->rows &&
                                  pf->shp[ph][i].n == st->n && pf->shp[ph][i].k == st->k))
        i++;
    if (i == GPU_PROF_SHAPES)
        return;
    if (i == pf->n_shp[ph]) {
        const gpu_prof_shape z = {st->op, st->rows, st->n, st->k, 0.0, 0};
        pf->shp[ph][i] = z;
        pf->n_shp[ph]++;
    }
    pf->shp[ph][i].ms += ms;
    pf->shp[ph][i].cnt++;
}

/* a stream call of the error words' bookkeeping failed: its message, the error cleared */
static int exec_fail(gpuError_t e, rlx_diag *d)
{
    set_diag(d, RLX_ERR_DEVICE, "execute: %s", gpuGetErrorString(e));
    (void)gpuGetLastError();
    return RLX_ERR_DEVICE;
}

/* the error words' copy to err_host, queued on the stream */
static int copy_err_words(gpu_be *be, rlx_diag *d)
{
    gpuError_t e = gpuMemcpyAsync(be->err_host, be->err_dev, 4 * sizeof(int), gpuMemcpyDeviceToHost, be->stream);
    return e == gpuSuccess ? 0 : exec_fail(e, d);
}

/* The error words are cleared when read (gpu_check_pending), not by each run: runs of one
 * program chained without a read keep the first error (kernels set them once, from 0). */
static int enqueue_all(gpu_be *be, gpu_exe *x, void *const *vp, rlx_diag *d)
{
    gpu_prof *pf = be->prof;
    int count = pf && x->runs > 0;
    if (x->win) { /* the collectives' values in the symmetric window */
        memcpy(x->vpw, vp, (size_t)x->n_values * sizeof(void *));
        for (int k = 0; k < x->n_win; k++)
            x->vpw[x->win_v[k]] = (char *)x->win + x->win_off[k];
        vp = x->vpw;
    }
    if (x->vp2) { /* value pointers with the private scratch of FUSE_ATTN_IN groups */
        memcpy(x->vp2, vp, (size_t)x->n_values * sizeof(void *));
        for (int k = 0; k < x->n_ovr; k++)
            x->vp2[x->ovr_v[k]] = x->fscratch + x->ovr_off[k];
    }
    for (uint32_t i = 0; i < x->n_steps; i++) /* before the loop: a head may be a group's last */
        x->steps[i].fused_now = x->steps[i].fuse && fuse_safe(x, &x->steps[i], vp);
    for (uint32_t i = 0; i < x->n_steps; i++) { /* an add its GEMV could not take, taken after */
        gpu_step *h = &x->steps[i];
        const gpu_step *ad = h->pre_add >= 0 ? &x->steps[h->pre_add] : NULL;
        h->add_now = be->late_add && ad && h->fused_now && (ad->head < 0 || !x->steps[ad->head].fused_now) &&
                     fuse_safe_from(x, h, vp, h->pre_add);
    }
    for (uint32_t i = 0; i < x->n_steps; i++) {
        gpu_step *st = &x->steps[i];
        if ((st->head >= 0 && x->steps[st->head].fused_now) || (st->taker >= 0 && x->steps[st->taker].add_now))
            continue;
        if (count)
            (void)gpuEventRecord(pf->e0, be->stream);
        int rc = 0;
        if (st->fused_now) {
            char err[384] = "";
            rc = run_fused(be, x, st, vp, err, sizeof err);
            gpuError_t e = gpuGetLastError();
            if (rc) {
                set_diag(d, RLX_ERR_DEVICE, "%s (node %d, %s): %s", op_defs[st->op].name, st->node,
                         fuse_names[st->fuse], err);
                rc = RLX_ERR_DEVICE;
            } else if (e != gpuSuccess) {
                set_diag(d, RLX_ERR_DEVICE, "%s (node %d, %s): %s", op_defs[st->op].name, st->node,
                         fuse_names[st->fuse], gpuGetErrorString(e));
                rc = RLX_ERR_DEVICE;
            }
        } else {
            rc = run_step(be, x, st, vp, d);
        }
        if (rc)
            return rc;
        if (count) {
            float ms = 0;
            int key = st->fused_now ? OP_COUNT + st->fuse : st->op;
            (void)gpuEventRecord(pf->e1, be->stream);
            (void)gpuEventSynchronize(pf->e1);
            (void)gpuEventElapsedTime(&ms, pf->e0, pf->e1);
            pf->op_ms[x->decode][key] += ms;
            pf->op_n[x->decode][key]++;
            pf->launches[x->decode]++;
            if (!st->fused_now && op_is_matmul(st->op))
                prof_shape(pf, x->decode, st, ms);
        }
    }
    return x->checks && !be->err_at_sync ? copy_err_words(be, d) : 0;
}

/* Captures the launches once per set of value addresses; replays while they stay. */
static int graph_ready(gpu_be *be, gpu_exe *x, void *const *vp, rlx_diag *d)
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
    return 0;
}

static int run_graph(gpu_be *be, gpu_exe *x, void *const *vp, rlx_diag *d)
{
    int rc = graph_ready(be, x, vp, d);
    if (x->coll)
        rc = coll_launch(x, rc, d);
    if (rc)
        return rc;
    gpuError_t e = gpuGraphLaunch(x->graph, be->stream);
    if (e != gpuSuccess) {
        set_diag(d, RLX_ERR_DEVICE, "graph launch: %s", gpuGetErrorString(e));
        return RLX_ERR_DEVICE;
    }
    return 0;
}

int gpu_execute(void *bep, void *exep, void *const *vp, rlx_diag *d)
{
    gpu_be *be = (gpu_be *)bep;
    gpu_exe *x = (gpu_exe *)exep;
    (void)gpuSetDevice(be->device); /* ranks of a tensor-parallel run share a thread at times */
    if (gpu_up_flush(be, d)) /* the step's token id and positions: one launch before it */
        return RLX_ERR_DEVICE;
    /* this run's copy of the words overwrites what another program left; runs of the same
     * program chain on (greedy generation queues its steps), their first error kept */
    int prc = be->pending != x ? gpu_check_pending(be, 0, d) : 0;
    if (prc)
        return prc;
    for (uint32_t i = 0; x->coll && i < x->n_steps; i++) { /* gpu_tp.cu: outside any capture */
        char m[384];
        if (x->steps[i].tp.ranks && gpu_tp_connect(&x->steps[i].tp, m, sizeof m)) {
            set_diag(d, RLX_ERR_DEVICE, "%s (node %d): %s", op_defs[x->steps[i].op].name, x->steps[i].node, m);
            return RLX_ERR_DEVICE;
        }
    }
    if (x->coll && x->runs == 0 && coll_check(x, d))
        return RLX_ERR_DEVICE;
    if (x->n_win && !x->win_state) /* planned for graph-replayed programs: one launch a rank, all or none */
        coll_window_open(be, x);
    double t0 = be->prof ? now_ms() : 0;
    int rc = x->graphs ? run_graph(be, x, vp, d) : enqueue_all(be, x, vp, d);
    if (x->coll)
        rc = coll_end(be, x, rc, d);
    if (be->prof) {
        (void)gpuStreamSynchronize(be->stream);
        if (x->runs > 0) {
            be->prof->exec_ms[x->decode] += now_ms() - t0;
            be->prof->exec_n[x->decode]++;
        } else {
            be->prof->first_ms[x->decode] += now_ms() - t0;
            be->prof->first_n[x->decode]++;
        }
    }
    x->runs++;
    if (rc || !x->checks)
        return rc;
    /* ids and cache positions live on the device: their errors are known after the run,
     * read by the next sync (gpu_sync) unless checks are not deferred */
    be->pending = x;
    be->err_queued = !be->err_at_sync;
    return be->defer_checks ? 0 : gpu_check_pending(be, 0, d);
}

int gpu_queue_err_copy(gpu_be *be, rlx_diag *d)
{
    if (!be->pending || be->err_queued)
        return 0;
    int rc = copy_err_words(be, d);
    be->err_queued = !rc;
    return rc;
}

int gpu_check_pending(gpu_be *be, int idle, rlx_diag *d)
{
    gpu_exe *x = be->pending;
    if (!x)
        return 0;
    if (!be->err_queued) { /* a caller that synchronized before queuing them: one more wait */
        if (gpu_queue_err_copy(be, d))
            return RLX_ERR_DEVICE;
        idle = 0;
    }
    be->pending = NULL;
    gpuError_t e = idle ? gpuSuccess : gpuStreamSynchronize(be->stream);
    if (e != gpuSuccess)
        return exec_fail(e, d);
    int *w = be->err_host;
    if (w[0] == GPU_ERR_NONE)
        return 0;
    /* read: cleared for the runs after (queued behind everything before on the stream) */
    if ((e = gpuMemsetAsync(be->err_dev, 0, 4 * sizeof(int), be->stream)) != gpuSuccess)
        return exec_fail(e, d);
    int code = w[0];
    w[0] = GPU_ERR_NONE;
    const gpu_step *st = NULL;
    for (uint32_t i = 0; i < x->n_steps; i++)
        if (x->steps[i].node == w[2])
            st = &x->steps[i];
    if (code == GPU_ERR_EMBED_ID)
        set_diag(d, RLX_ERR_INVALID, "rlx.embedding (node %d): id %d outside [0, %lld)", w[2],
                 w[1], st ? (long long)st->nb : -1LL);
    else if (code == GPU_ERR_ROW_SLOT)
        set_diag(d, RLX_ERR_INVALID, "%s (node %d): row %d: its slot or position is outside the %lld slots of %lld rows",
                 st && st->op == OP_ATTN_ROWS ? "rlx.attention_rows" : "rlx.cache_write_rows", w[2], w[1],
                 st ? (long long)st->nb : -1LL, st ? (long long)(st->op == OP_ATTN_ROWS ? st->attn.S : st->rows) : -1LL);
    else
        set_diag(d, RLX_ERR_INVALID,
                 "rlx.cache_write (node %d): rows %d..%lld are outside the cache's %lld rows",
                 w[2], w[1], st ? (long long)w[1] + st->nb - 1 : -1LL,
                 st ? (long long)st->rows : -1LL);
    return RLX_ERR_INVALID;
}

/* ---------------------------------------------------------------- batched decode rows */

static void rows_run(gpu_be *be, const gpu_exe *x, const gpu_step *st, void *const *vp, gpuError_t *e)
{
    if (st->op == OP_ATTN_ROWS) {
        gpu_attn a = st->attn; /* shapes, scale, window, softcap, P and nsplit from the build */
        a.q = gpu_ten{vp[st->in[0]], st->dti[0]};
        a.k = gpu_ten{vp[st->in[1]], st->dti[1]};
        a.v = gpu_ten{vp[st->in[2]], st->dti[2]};
        a.o = gpu_ten{vp[st->out[0]], st->dto[0]};
        a.pos = (const int32_t *)vp[st->in[3]];
        a.slots = (const int32_t *)vp[st->in[4]];
        a.part = (float *)(void *)x->scratch;
        a.cnt = x->attn_cnt;
        a.err = be->err_dev;
        a.node = st->node;
        gpu_attention_rows(be->stream, &a);
        return;
    }
    int es = esize(st->dto[0]);
    void *y = vp[st->out[0]];
    if (y != vp[st->in[0]]) /* the output aliases the cache; a separate buffer gets a copy */
        *e = gpuMemcpyAsync(y, vp[st->in[0]], (size_t)(st->nb * st->rows * st->n) * es, gpuMemcpyDeviceToDevice,
                            be->stream);
    if (*e == gpuSuccess)
        gpu_cache_write_rows(be->stream, y, vp[st->in[1]], (const int32_t *)vp[st->in[2]],
                             (const int32_t *)vp[st->in[3]], st->nb, st->rows, st->k, st->n, es, be->err_dev,
                             st->node);
}

