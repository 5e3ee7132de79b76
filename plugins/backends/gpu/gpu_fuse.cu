/* The GPU backend's fusions at compile time: which consecutive steps of a program one launch
 * can run (FUSE_*; model-agnostic, they match op sequences). gpu_run.cu checks at each
 * execute that a group may run fused (its buffers) and launches it. Also which steps may read
 * their fixed inputs before waiting on the kernel before (pre_steps). */
#include "gpu_exe.h"

#include <stdlib.h>
#include <string.h>

/* rlx.add_rms_norm (st, built) becomes an add step and an rms_norm step of its sum (st + 1),
 * both of its node: it fuses as the spelled-out pair does, and unfused the two kernels give
 * the add_rms_norm kernel's bits (the norm reads the sum as stored) */
void split_add_norm(gpu_step *st)
{
    gpu_step *nm = st + 1;
    int64_t n = st->rows * st->n;
    *nm = *st;
    nm->op = OP_RMS_NORM;
    nm->n_in = 2;
    nm->in[0] = st->out[0];
    nm->in[1] = st->in[2];
    nm->in[2] = 0;
    nm->dti[0] = st->dto[0];
    nm->dti[1] = st->dti[2];
    nm->dti[2] = 0;
    nm->out[0] = st->out[1];
    nm->dto[0] = st->dto[1];
    nm->out[1] = nm->dto[1] = 0;
    st->op = OP_ADD;
    st->n_in = 2;
    st->in[2] = st->dti[2] = 0;
    st->out[1] = st->dto[1] = 0;
    st->rows = 0;
    st->n = st->nb = n;
    st->f0 = 0;
    st->i0 = GB_ADD;
}

int value_root(const rlx_program *prog, int v)
{
    for (int i = 0; i < 64 && v >= 0 && (uint32_t)v < prog->n_values &&
                    prog->values[v].kind == RLX_VALUE_ALIAS;
         i++)
        v = prog->values[v].alias_of;
    return v;
}

/* is value v (or the value it aliases) written by a step of steps[g0..g1)? */
int made_in(const gpu_exe *x, int g0, int g1, int v)
{
    for (int j = g0; j < g1; j++)
        for (int o = 0; o < op_defs[x->steps[j].op].n_out; o++)
            if (x->root[x->steps[j].out[o]] == x->root[v])
                return 1;
    return 0;
}

static int rc_step_ok(const gpu_step *st)
{
    return st->op == OP_ROPE || (st->op == OP_CACHE_WRITE && is_flt(st->dti[0]));
}

static int is_gemv_of(const gpu_step *o, const gpu_step *a)
{
    return o->op == OP_MATMUL && o->gemv && o->in[0] == a->in[0] && o->rows == a->rows &&
           o->k == a->k && o->dti[1] == a->dti[1];
}

/* a prefill GEMM whose product one GEMM over side-by-side weights can make: no bias, x in
 * the weights' dtype and the product written as it comes (no scratch epilogue) */
static int plain_gemm(const gpu_step *a)
{
    return a->op == OP_MATMUL && !a->gemv && a->n_in == 2 && !a->a_cast && !a->c_scratch;
}

static int is_gemm_of(const gpu_step *o, const gpu_step *a)
{
    return plain_gemm(o) && o->in[0] == a->in[0] && o->rows == a->rows && o->k == a->k &&
           o->dti[1] == a->dti[1] && o->dto[0] == a->dto[0];
}

/* Does a FUSE_ATTN_IN group (decode GEMVs) or a FUSE_QKV_GEMM group (prefill GEMMs) start
 * at step i? Returns its end (exclusive) or 0. Members: 2-3 matmuls of the same x, ropes
 * of their products, cache writes (in place) of rope outputs or products; at most
 * GPU_RC_JOBS ropes and cache writes. */
static int attn_in_group(const gpu_exe *x, const rlx_program *prog, int i)
{
    const gpu_step *a = &x->steps[i];
    int n = (int)x->n_steps, nmm = 0, nrc = 0, j = i;
    (void)prog;
    if (a->op != OP_MATMUL || !(a->gemv || plain_gemm(a)))
        return 0;
    for (; j < n && j - i <= GPU_FUSE_PARTS; j++) {
        const gpu_step *o = &x->steps[j];
        int ok = 1;
        if ((a->gemv ? is_gemv_of(o, a) : is_gemm_of(o, a)) && nmm < GPU_GEMV_SEGS) {
            for (int q = 1; q < o->n_in; q++)
                ok = ok && !made_in(x, i, j, o->in[q]);
            nmm += ok;
        } else if (o->op == OP_ROPE && nrc < GPU_RC_JOBS) {
            ok = !made_in(x, i, j, o->in[1]) && !made_in(x, i, j, o->in[2]);
            for (int r = i; r < j && ok; r++) /* a rope reads a product, not a rope */
                if (x->steps[r].op != OP_MATMUL && x->root[x->steps[r].out[0]] == x->root[o->in[0]])
                    ok = 0;
            nrc += ok;
        } else if (o->op == OP_CACHE_WRITE && is_flt(o->dti[0]) && nrc < GPU_RC_JOBS) {
            ok = !made_in(x, i, j, o->in[0]) && !made_in(x, i, j, o->in[2]);
            for (int r = i; r < j && ok; r++) { /* a rope's output stored exactly, once */
                const gpu_step *p = &x->steps[r];
                if (p->op == OP_ROPE && x->root[p->out[0]] == x->root[o->in[1]])
                    ok = p->out[0] == o->in[1] && p->rows == o->nb && p->nb * p->n == o->n;
                if (p->op == OP_CACHE_WRITE && (p->in[1] == o->in[1] || x->root[p->out[0]] == x->root[o->in[1]]))
                    ok = 0;
            }
            nrc += ok;
        } else {
            ok = 0;
        }
        if (!ok)
            break;
    }
    return nmm >= 2 && nrc >= 1 ? j : 0;
}

/* Appends every value stored in root r's bytes (r and its aliases) to vs/offs, at base
 * plus its offset along the alias chain: they move together. */
int move_root(const gpu_exe *x, const rlx_program *prog, int r, size_t base, int **vs, size_t **offs,
                     int *n)
{
    for (uint32_t v = 0; v < prog->n_values; v++) {
        if (x->root[v] != r)
            continue;
        size_t ao = 0; /* bytes from the root along the alias chain */
        for (int w = (int)v, k = 0; k < 64 && prog->values[w].kind == RLX_VALUE_ALIAS; k++) {
            ao += prog->values[w].alias_offset;
            w = prog->values[w].alias_of;
        }
        int *nv = (int *)realloc(*vs, (size_t)(*n + 1) * sizeof(int));
        if (nv)
            *vs = nv;
        size_t *no = (size_t *)realloc(*offs, (size_t)(*n + 1) * sizeof(size_t));
        if (no)
            *offs = no;
        if (!nv || !no)
            return -1;
        (*vs)[*n] = (int)v;
        (*offs)[(*n)++] = base + ao;
    }
    return 0;
}

/* may root r's bytes move out of the arena (a temporary no program output shares)? */
int movable(const gpu_exe *x, const rlx_program *prog, int r)
{
    if (r < 0 || (uint32_t)r >= prog->n_values || prog->values[r].kind != RLX_VALUE_TEMP)
        return 0;
    for (uint32_t v = 0; v < prog->n_values; v++)
        if (x->root[v] == r && prog->values[v].kind == RLX_VALUE_OUTPUT)
            return 0;
    return 1;
}

/* Does every step that reads root r's bytes lie in [g0, g1)? *whole (if asked): 0 when one
 * of them reads a part of them (a value of another size) */
static int read_only_in(const gpu_exe *x, int r, int g0, int g1, int *whole)
{
    for (uint32_t s2 = 0; s2 < x->n_steps; s2++)
        for (int q = 0; q < x->steps[s2].n_in; q++) {
            int v = x->steps[s2].in[q];
            if (x->root[v] != r)
                continue;
            if ((int)s2 < g0 || (int)s2 >= g1)
                return 0;
            if (whole && x->vbytes[v] != x->vbytes[r])
                *whole = 0;
        }
    return 1;
}

/* Products and rope outputs of the group [g0, g1) that nothing outside it reads move to
 * private scratch (the group runs at its last step: in their arena bytes the schedule
 * may keep other values meanwhile); the rest are written where the arena put them. */
static int attn_in_scratch(gpu_exe *x, const rlx_program *prog, int g0, int g1)
{
    size_t off = 0;
    for (int m = g0; m < g1; m++) {
        gpu_step *st = &x->steps[m];
        if (st->op == OP_CACHE_WRITE)
            continue;
        int r = x->root[st->out[0]];
        st->priv = movable(x, prog, r) && read_only_in(x, r, g0, g1, NULL);
        if (!st->priv)
            continue;
        if (move_root(x, prog, r, off, &x->ovr_v, &x->ovr_off, &x->n_ovr))
            return -1;
        off += align256(x->vbytes[r]);
    }
    if (off > x->fs_bytes)
        x->fs_bytes = off;
    return 0;
}

/* The prefill group [g0, g1) from attn_in_group: its products go to scratch as one
 * [rows, sum of n] GEMM, so nothing outside it may read them, and what its ropes and cache
 * writes read of them must be a whole product (the value or a reshape of it). 1: it is a
 * FUSE_QKV_GEMM group (scratch sized), 0: not. */
static int qkv_gemm_group(gpu_exe *x, const rlx_program *prog, int g0, int g1)
{
    int64_t ntot = 0;
    for (int m = g0; m < g1; m++) {
        const gpu_step *st = &x->steps[m];
        if (st->op != OP_MATMUL)
            continue;
        int r = x->root[st->out[0]], whole = 1;
        if (!movable(x, prog, r) || !read_only_in(x, r, g0, g1, &whole) || !whole || r != st->out[0])
            return 0;
        ntot += st->n;
    }
    for (int m = g0; m < g1; m++)
        x->steps[m].priv = x->steps[m].op == OP_MATMUL;
    const gpu_step *a = &x->steps[g0];
    size_t need = (size_t)(a->rows * ntot) * (size_t)esize(a->dto[0]);
    if (need > x->fs_bytes)
        x->fs_bytes = need;
    return 1;
}

/* Gate and up GEMVs of one x then swiglu of their products (nothing else reads them)? */
static int glu_at(const gpu_exe *x, const int *uses, int i)
{
    int n = (int)x->n_steps;
    if (i + 2 >= n)
        return 0;
    const gpu_step *a = &x->steps[i], *b = &x->steps[i + 1], *c = &x->steps[i + 2];
    return a->op == OP_MATMUL && a->gemv && a->n_in == 2 && b->op == OP_MATMUL && b->gemv &&
           b->n_in == 2 && b->in[0] == a->in[0] && b->in[1] != a->out[0] && b->rows == a->rows &&
           b->n == a->n && b->k == a->k && b->dti[1] == a->dti[1] && c->op == OP_SWIGLU &&
           c->n == c->nb && c->n == a->rows * a->n &&
           ((c->in[0] == a->out[0] && c->in[1] == b->out[0]) ||
            (c->in[0] == b->out[0] && c->in[1] == a->out[0])) &&
           uses[a->out[0]] == 1 && uses[b->out[0]] == 1;
}

/* Is step i an add whose sum the next step rms-norms (one add_rms_norm kernel)? */
static int add_norm_at(const gpu_exe *x, int i)
{
    if (i + 1 >= (int)x->n_steps)
        return 0;
    const gpu_step *a = &x->steps[i], *b = &x->steps[i + 1];
    return a->op == OP_ADD && b->op == OP_RMS_NORM && b->in[0] == a->out[0] && b->in[1] != a->out[0] &&
           a->n == a->nb && a->n == b->rows * b->n;
}

static int norm_group_end(const gpu_exe *x, const rlx_program *prog, const int *uses, int i);

/* A decode GEMV then an add of its product and another value of the same size (the
 * residual): the add in the GEMV's epilogue. When an rms_norm of the sum follows, only if
 * the next group's GEMVs absorb that norm; else the add and the norm run as the
 * add_rms_norm kernel. Both spellings (rlx.add_rms_norm, add + rms_norm) are the same steps
 * here, so they fuse alike and compute the same bits. */
static int gemv_add_at(const gpu_exe *x, const rlx_program *prog, const int *uses, int i)
{
    if (i + 1 >= (int)x->n_steps)
        return 0;
    const gpu_step *a = &x->steps[i], *b = &x->steps[i + 1];
    return a->op == OP_MATMUL && a->gemv && b->op == OP_ADD && b->n == b->nb &&
           b->n == a->rows * a->n && (b->in[0] == a->out[0]) != (b->in[1] == a->out[0]) &&
           uses[a->out[0]] == 1 && (!add_norm_at(x, i + 1) || norm_group_end(x, prog, uses, i + 2));
}

/* Does the group [g0, g1) read rms_norm step i's output only as the x of its GEMVs, and
 * nothing else reads it? Then the GEMVs norm x themselves. */
static int norm_feeds(const gpu_exe *x, const rlx_program *prog, const int *uses, int i, int g0, int g1)
{
    const gpu_step *nm = &x->steps[i];
    int h = nm->out[0], cnt = 0;
    if (nm->op != OP_RMS_NORM || x->root[h] != h || prog->values[h].kind == RLX_VALUE_OUTPUT ||
        g1 - i - 1 > GPU_FUSE_PARTS || nm->rows > x->norm_rows)
        return 0;
    for (int j = g0; j < g1; j++) {
        const gpu_step *st = &x->steps[j];
        for (int q = 0; q < st->n_in; q++)
            if (x->root[st->in[q]] == h) {
                if (!((st->op == OP_MATMUL || st->op == OP_LINEAR_SWIGLU) && st->gemv && q == 0 && st->in[0] == h &&
                      st->k == nm->n && st->rows == nm->rows))
                    return 0;
                cnt++;
            }
    }
    return cnt > 0 && cnt == uses[h];
}

/* the end of the run of 1-3 decode GEMVs of one x from step i, or 0 */
static int gemvs_end(const gpu_exe *x, int i)
{
    int n = (int)x->n_steps, j = i + 1;
    if (i >= n || x->steps[i].op != OP_MATMUL || !x->steps[i].gemv)
        return 0;
    while (j < n && j - i < GPU_GEMV_SEGS && is_gemv_of(&x->steps[j], &x->steps[i]) &&
           !made_in(x, i, j, x->steps[j].in[1]) && !(x->steps[j].n_in == 3 && made_in(x, i, j, x->steps[j].in[2])))
        j++;
    return j;
}

/* The end of the group after rms_norm step i whose GEMVs take the norm in (q/k/v, gate/up,
 * GEMVs of one x; not a GEMV whose product is added), or 0 */
static int norm_group_end(const gpu_exe *x, const rlx_program *prog, const int *uses, int i)
{
    int i1 = i + 1, j1;
    if (i1 >= (int)x->n_steps || x->steps[i].op != OP_RMS_NORM)
        return 0;
    j1 = attn_in_group(x, prog, i1);
    if (!j1 && glu_at(x, uses, i1))
        j1 = i1 + 3;
    if (!j1 && x->steps[i1].op == OP_LINEAR_SWIGLU && x->steps[i1].gemv)
        j1 = i1 + 1; /* gate/up with the SwiGLU epilogue, as the fusable policy spells it */
    if (!j1 && !gemv_add_at(x, prog, uses, i1))
        j1 = gemvs_end(x, i1); /* a GEMV, or several of the same x */
    return j1 && norm_feeds(x, prog, uses, i, i1, j1) ? j1 : 0;
}

/* a step the argmax's last thread can run: a one-element 4-byte cache write in place, or
 * an add_scalar of one i32 (a greedy step's id and position bookkeeping) */
static int tail_step_ok(const gpu_step *st)
{
    if (st->op == OP_CACHE_WRITE)
        return st->nb * st->n == 1 && esize(st->dto[0]) == 4;
    return st->op == OP_ADD_SCALAR && st->dti[0] == RLX_I32 && st->n == 1;
}

/* Is an input of step i an all-reduce's output (the last write of its bytes before i)? */
static int reads_all_reduce(const gpu_exe *x, int i)
{
    const gpu_step *a = &x->steps[i];
    for (int q = 0; q < a->n_in; q++)
        for (int j = i - 1; j >= 0; j--)
            if (x->root[x->steps[j].out[0]] == x->root[a->in[q]]) {
                if (x->steps[j].op == OP_ALL_REDUCE)
                    return 1;
                break;
            }
    return 0;
}

/* The add before norm step nrm, whose sum the norm reads, when a GEMV + add group holds it
 * or it stands alone: head hi's one-row GEMVs may take it in at execute (add_now). */
static void pre_add_at(gpu_exe *x, int hi, int nrm, int64_t rows)
{
    if (nrm < 1 || rows != 1)
        return;
    gpu_step *ad = &x->steps[nrm - 1];
    if (ad->op != OP_ADD || ad->out[0] != x->steps[nrm].in[0] || ad->n != ad->nb)
        return;
    if (ad->head >= 0 ? x->steps[ad->head].fuse != FUSE_GEMV_ADD : ad->fuse != FUSE_NONE)
        return;
    x->steps[hi].pre_add = nrm - 1;
    ad->taker = hi;
}

/* Groups consecutive steps whose work one launch can do (see FUSE_*). Reads of each value
 * (aliases and program outputs count) keep a product that something else reads. An
 * rms_norm whose output only the next group's GEMVs read joins that group (h->nrm). */
int fuse_steps(gpu_exe *x, const rlx_program *prog)
{
    int n = (int)x->n_steps;
    int *uses = (int *)calloc(prog->n_values + 1, sizeof(int));
    if (!uses)
        return -1;
    for (uint32_t v = 0; v < prog->n_values; v++) {
        if (prog->values[v].kind == RLX_VALUE_OUTPUT)
            uses[v]++;
        int r = value_root(prog, (int)v);
        if (r != (int)v && r >= 0 && (uint32_t)r < prog->n_values)
            uses[r]++;
    }
    for (int i = 0; i < n; i++)
        for (int j = 0; j < x->steps[i].n_in; j++) {
            int r = value_root(prog, x->steps[i].in[j]);
            if (r >= 0 && (uint32_t)r < prog->n_values)
                uses[r]++;
        }
    for (int i = 0; i < n; i++)
        x->steps[i].head = x->steps[i].nrm = x->steps[i].pre_add = x->steps[i].taker = -1;
    for (int i = 0; i < n; i++) {
        int nrm = -1; /* a norm step before the group that the group absorbs */
        if (norm_group_end(x, prog, uses, i)) {
            nrm = i;
            x->n_norms++;
            i++;
        }
        gpu_step *a = &x->steps[i];
        int np = 0, j1 = attn_in_group(x, prog, i);
        if (j1 > 0 && !a->gemv) { /* prefill: one GEMM when the group's products allow */
            if (nrm < 0 && x->qkv_gemm && qkv_gemm_group(x, prog, i, j1)) {
                gpu_step *h = &x->steps[j1 - 1]; /* runs at the last step, as FUSE_ATTN_IN */
                h->fuse = FUSE_QKV_GEMM;
                h->g0 = i;
                h->g1 = j1;
                h->n_part = 0;
                for (int m = i; m < j1 - 1; m++) {
                    h->part[h->n_part++] = m;
                    x->steps[m].head = j1 - 1;
                }
                x->n_fused[FUSE_QKV_GEMM]++;
                i = j1 - 1;
                continue;
            }
            j1 = 0;
        }
        if (j1 > 0) {
            if (attn_in_scratch(x, prog, i, j1) != 0) {
                free(uses);
                return -1;
            }
            gpu_step *h = &x->steps[j1 - 1]; /* runs at the last step */
            h->fuse = FUSE_ATTN_IN;
            h->g0 = nrm >= 0 ? nrm : i;
            h->g1 = j1;
            h->nrm = nrm;
            h->n_part = 0;
            for (int m = h->g0; m < j1 - 1; m++) {
                h->part[h->n_part++] = m;
                x->steps[m].head = j1 - 1;
            }
            x->n_fused[FUSE_ATTN_IN]++;
            if (nrm >= 0)
                pre_add_at(x, j1 - 1, nrm, a->rows);
            i = j1 - 1;
            continue;
        }
        if (nrm < 0 && add_norm_at(x, i) && x->steps[i + 1].rows == 1 && reads_all_reduce(x, i) &&
            norm_group_end(x, prog, uses, i + 1)) {
            /* an all-reduced product has no GEMV before it to add it: the one-row GEMVs after
             * the norm take the add in too (other adds keep the add_rms_norm kernel, whose
             * 16-bit normed row the GEMVs read: Gemma 3's f16 logits drift past transformers'
             * yardstick when its norms are taken in) */
            a->g0 = i;
            a->g1 = i + 1;
            continue;
        }
        if (nrm < 0 && add_norm_at(x, i)) {
            a->fuse = FUSE_ADD_NORM;
            np = 1;
        } else if (glu_at(x, uses, i)) {
            a->fuse = FUSE_GLU;
            np = 2;
        } else if (nrm < 0 && gemv_add_at(x, prog, uses, i)) {
            a->fuse = FUSE_GEMV_ADD;
            np = 1;
        } else if (nrm < 0 && a->op == OP_ARGMAX && a->rows == 1 && x->argmax_tail) {
            while (np < GPU_FUSE_PARTS && i + np + 1 < n && tail_step_ok(&x->steps[i + np + 1]))
                np++;
            if (np)
                a->fuse = FUSE_ARGMAX_TAIL;
        } else if (a->op == OP_MATMUL && a->gemv) {
            while (np + 1 < GPU_GEMV_SEGS && i + np + 1 < n) {
                const gpu_step *o = &x->steps[i + np + 1];
                if (!is_gemv_of(o, a) || made_in(x, i, i + np + 1, o->in[1]) ||
                    (o->n_in == 3 && made_in(x, i, i + np + 1, o->in[2])))
                    break;
                np++;
            }
            if (np || nrm >= 0)
                a->fuse = FUSE_GEMVS;
        } else if (a->op == OP_LINEAR_SWIGLU && a->gemv && nrm >= 0) {
            a->fuse = FUSE_GEMVS; /* alone, with the norm */
        } else if (rc_step_ok(a)) {
            /* an input made earlier in the group must be a rope's output that a cache write
             * stores (the launch writes both from the same values) */
            while (np + 1 < GPU_RC_JOBS && i + np + 1 < n) {
                const gpu_step *o = &x->steps[i + np + 1];
                int ok = rc_step_ok(o);
                for (int j = 0; j < o->n_in && ok; j++)
                    if (made_in(x, i, i + np + 1, o->in[j]))
                        ok = o->op == OP_CACHE_WRITE && j == 1;
                if (ok && o->op == OP_CACHE_WRITE && made_in(x, i, i + np + 1, o->in[1])) {
                    ok = 1;
                    for (int r = i; r < i + np + 1; r++) /* one cache per rope */
                        if (x->steps[r].op == OP_CACHE_WRITE && x->steps[r].in[1] == o->in[1])
                            ok = 0;
                    if (!ok)
                        break;
                    ok = 0;
                    for (int r = i; r < i + np + 1; r++)
                        if (x->steps[r].op == OP_ROPE && x->steps[r].out[0] == o->in[1] &&
                            x->steps[r].rows == o->nb && x->steps[r].nb * x->steps[r].n == o->n)
                            ok = 1;
                }
                if (!ok)
                    break;
                np++;
            }
            if (np)
                a->fuse = FUSE_ROPE_CACHE;
        }
        a->n_part = 0;
        for (int j = 1; j <= np; j++) {
            a->part[a->n_part++] = i + j;
            x->steps[i + j].head = i;
        }
        if (nrm >= 0 && a->fuse) { /* the norm, last of the parts, runs in the head's launch */
            a->part[a->n_part++] = nrm;
            x->steps[nrm].head = i;
        } else if (nrm >= 0) { /* matched nothing after all: the norm runs alone */
            x->n_norms--;
            nrm = -1;
        }
        a->nrm = nrm;
        if (nrm > 0 && (a->fuse == FUSE_GLU || a->fuse == FUSE_GEMVS)) /* one row: k_gemv */
            pre_add_at(x, i, nrm, a->rows);
        a->g0 = nrm >= 0 ? nrm : i;
        a->g1 = i + np + 1;
        if (a->fuse)
            x->n_fused[a->fuse]++;
        i += np;
    }
    free(uses);
    return 0;
}

/* Is value v's content fixed before a graph-replayed program starts (the launch waits for
 * all earlier work) and still so at step upto: an input (uploaded or bound before the
 * launch), a weight or a constant that no step writes, or a session state that no step
 * before upto writes (greedy generation's positions, moved on by the step's last nodes)? */
static int fixed_at_start(const gpu_exe *x, const rlx_program *prog, int v, int upto)
{
    int r = x->root[v];
    if (r < 0 || (uint32_t)r >= prog->n_values)
        return 0;
    int kind = prog->values[r].kind;
    if (kind == RLX_VALUE_STATE)
        return !made_in(x, 0, upto, v);
    return (kind == RLX_VALUE_INPUT || kind == RLX_VALUE_WEIGHT || kind == RLX_VALUE_CONST) &&
           !made_in(x, 0, (int)x->n_steps, v);
}

/* Before its wait on the kernel before, a kernel may read only what no kernel of the step
 * writes before it. A matmul's weights qualify when fixed_at_start (wfix: its GEMV's first
 * weights load before the wait). Graph replays start after all earlier work, so a rope's positions and
 * inv_freq, and an attention's pos, qualify when fixed_at_start; an attention's cache rows
 * before pos do when every step before it that writes the cache is a cache write at the
 * same pos (rows pos on). */
void pre_steps(gpu_exe *x, const rlx_program *prog)
{
    const int on = !rlx_env_off("RLX_GPU_PRE"); /* =0: every read after the wait, to compare */
    for (uint32_t i = 0; i < x->n_steps; i++) {
        gpu_step *st = &x->steps[i];
        st->pre = 0;
        /* inputs are bound before any launch reads them, with or without a graph */
        const int n = (int)x->n_steps, at = (int)i;
        st->wfix = (st->op == OP_MATMUL || st->op == OP_LINEAR_SWIGLU) && fixed_at_start(x, prog, st->in[1], n) &&
                   (st->op != OP_LINEAR_SWIGLU || fixed_at_start(x, prog, st->in[2], n));
        if (!x->graphs || !on)
            continue;
        if (st->op == OP_ROPE) {
            st->pre = fixed_at_start(x, prog, st->in[1], at) && fixed_at_start(x, prog, st->in[2], at);
        } else if (st->op == OP_ATTENTION && st->i1 >= 0 && fixed_at_start(x, prog, st->i1, at)) {
            int ok = 1;
            for (uint32_t j = 0; j < i && ok; j++) {
                const gpu_step *w = &x->steps[j];
                for (int o = 0; o < op_defs[w->op].n_out; o++)
                    if (x->root[w->out[o]] == x->root[st->in[1]] || x->root[w->out[o]] == x->root[st->in[2]])
                        ok = ok && w->op == OP_CACHE_WRITE && w->in[2] == st->i1;
            }
            st->pre = ok;
        }
    }
}
