/* Attention (flash-style: online softmax over blocks of keys, never a T×S matrix) and
 * rotary embeddings. Work is split over heads × query blocks; each query row is computed
 * start to finish by one thread. */
#include "cpu_backend.h"
#include <cblas.h>
#include <math.h>
#include <string.h>

#define KEY_BLOCK 64   /* keys scored at once */
#define QUERY_BLOCK 64 /* query rows of one head per task */
#define GEMM_MIN_ROWS 8 /* fewer rows in a task (decode): one row at a time */
/* a row task's scores and accumulators (4 heads), before its k/v buffers */
#define ROWS_FLOATS(d) (4 * KEY_BLOCK + 4 * (d))
#define SPLIT_MAX 64 /* key chunks of a decode row at most (bounds the partials) */

static int is_index_dtype(int dt)
{
    return dt == RLX_I32 || dt == RLX_I64;
}

static int64_t read_index(const void *p, int dt, int64_t i)
{
    return dt == RLX_I64 ? ((const int64_t *)p)[i] : ((const int32_t *)p)[i];
}

/* ---------------------------------------------------------------- attention */

int cpu_prep_attention(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 3, 5, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *q = cpu_val(c, 0), *k = cpu_val(c, 1), *v = cpu_val(c, 2), *o = cpu_out(c, 0);
    if (cpu_need_float(c, q, "q") || cpu_need_float(c, k, "k") || cpu_need_float(c, v, "v") ||
        cpu_need_float(c, o, "the output"))
        return RLX_ERR_INVALID;
    nd->dt[0] = q->dtype;
    nd->dt[1] = k->dtype;
    nd->dt[2] = v->dtype;
    nd->dt[3] = o->dtype;
    if (q->shape.ndim != 3 || k->shape.ndim != 3 || v->shape.ndim != 3)
        return cpu_bad(c, "q, k and v must be [T, heads, head_dim]");
    nd->T = q->shape.dims[0];
    nd->nh = q->shape.dims[1];
    nd->hd = q->shape.dims[2];
    nd->S = k->shape.dims[0];
    nd->nkv = k->shape.dims[1];
    if (k->shape.dims[2] != nd->hd || v->shape.dims[0] != nd->S || v->shape.dims[1] != nd->nkv ||
        v->shape.dims[2] != nd->hd)
        return cpu_bad(c, "k and v must both be [%lld, kv_heads, %lld]", (long long)nd->S,
                       (long long)nd->hd);
    if (nd->nkv <= 0 || nd->nh % nd->nkv != 0)
        return cpu_bad(c, "%lld query heads are not a multiple of %lld kv heads", (long long)nd->nh,
                       (long long)nd->nkv);
    if (cpu_numel(&o->shape) != nd->T * nd->nh * nd->hd)
        return cpu_bad(c, "output must be [%lld, %lld, %lld]", (long long)nd->T, (long long)nd->nh,
                       (long long)nd->hd);
    for (uint32_t i = 3; i < c->node->n_inputs; i++) {
        const rlx_value_desc *x = cpu_val(c, i);
        if (!x) continue;
        if (is_index_dtype(x->dtype)) {
            if (nd->pos_in >= 0 || cpu_numel(&x->shape) != 1) return cpu_bad(c, "pos must be one [1] int");
            nd->pos_in = c->node->inputs[i];
            nd->in_dtype = x->dtype;
        } else {
            if (nd->mask_in >= 0 || x->dtype != RLX_F32) return cpu_bad(c, "mask must be one f32 [T, S]");
            if (cpu_numel(&x->shape) != nd->T * nd->S)
                return cpu_bad(c, "mask must be [%lld, %lld]", (long long)nd->T, (long long)nd->S);
            nd->mask_in = c->node->inputs[i];
        }
    }
    double scale, softcap;
    int64_t causal;
    if (cpu_attr_float(c, "scale", nd->hd > 0 ? 1.0 / sqrt((double)nd->hd) : 1.0, &scale) ||
        cpu_attr_int(c, "causal", 0, &causal) || cpu_attr_int(c, "window", 0, &nd->window) ||
        cpu_attr_float(c, "softcap", 0.0, &softcap))
        return RLX_ERR_INVALID;
    if (nd->window < 0) return cpu_bad(c, "window must be >= 0");
    if (softcap < 0) return cpu_bad(c, "softcap must be >= 0");
    nd->causal = causal != 0;
    nd->fa = (float)scale;
    nd->fb = (float)softcap;
    /* block path: scores [QB×KB], accumulators [QB×d], max and sum per row */
    nd->scratch_floats = (size_t)(QUERY_BLOCK * KEY_BLOCK + QUERY_BLOCK * nd->hd + 2 * QUERY_BLOCK);
    /* 16-bit k, v: a block of key rows and of value rows in f32; q, output: f32 copies */
    if (nd->dt[1] != RLX_F32 || nd->dt[2] != RLX_F32) nd->scratch_floats += (size_t)(2 * KEY_BLOCK * nd->hd);
    nd->shared_floats = (size_t)((nd->dt[0] != RLX_F32) + (nd->dt[3] != RLX_F32)) * (size_t)(nd->T * nd->nh * nd->hd);
    if (nd->T < GEMM_MIN_ROWS) /* decode: the partials of every key chunk */
        nd->shared_floats += (size_t)(nd->T * SPLIT_MAX * nd->nh * (nd->hd + 2));
    return 0;
}

/* Keys [lo, hi) of query row t: with pos, j < p+T (the rest of a cache is unwritten);
 * without pos, all S keys (encoders, cross-attention); causal and window narrow it. */
static void row_range(const cpu_node *nd, int64_t p, int64_t t, int64_t *lo, int64_t *hi)
{
    /* attention_rows: one query row per sequence (T of the row is 1) */
    *hi = nd->pos_in >= 0 ? p + (nd->rows_mode ? 1 : nd->T) : nd->S;
    if (nd->causal && p + t + 1 < *hi) *hi = p + t + 1;
    *lo = nd->window > 0 && p + t - nd->window + 1 > 0 ? p + t - nd->window + 1 : 0;
}

typedef struct attn_job {
    const cpu_run *r;
    int64_t p, q_blocks;
    int64_t kv_base; /* first key row: the slot's cache in attention_rows, else 0 */
    const float *q; /* f32 (a copy when q is 16-bit) */
    float *o;       /* f32 (converted after when the output is 16-bit) */
    int64_t split, n_split; /* decode: keys per task, tasks per query row */
    float *part;            /* decode: per task and head, max, sum and acc[d] */
} attn_job;

/* rows jb..jb+nk of kv head kvh of k (slot 1) or v (slot 2): in place when they are f32
 * or when as16 (the ISA's kernels read 16-bit rows; *h their dtype, 0 for f32: row stride
 * nkv*d), else converted into buf (stride d, *h 0) */
static const void *kv_rows(const cpu_run *r, int slot, int64_t jb, int64_t nk, int64_t kvh, int as16,
                           float *buf, int64_t *ld, int *h)
{
    const cpu_node *nd = r->nd;
    int64_t d = nd->hd, stride = nd->nkv * d;
    int dt = nd->dt[slot];
    *h = 0;
    if (dt == RLX_F32) {
        *ld = stride;
        return CPU_F(r, slot) + jb * stride + kvh * d;
    }
    const uint16_t *src = (const uint16_t *)r->vp[nd->in[slot]] + jb * stride + kvh * d;
    if (as16) {
        *h = dt;
        *ld = stride;
        return src;
    }
    for (int64_t i = 0; i < nk; i++) r->be->isa->h_to_f32(dt, src + i * stride, buf + i * d, d);
    *ld = d;
    return buf;
}

/* scores of G query rows against nk keys, then acc += P·V: the ISA's kernels (k and v in
 * their dtype h) or dot/axpy (f32 only: h is 0 without the kernels) */
static void qk_rows(const cpu_isa *isa, const float *q, int64_t ldq, int G, int h, const void *k, int64_t ldk,
                    int64_t nk, int64_t d, float scale, float *s)
{
    if (isa->attn_qk) {
        isa->attn_qk(h, q, ldq, G, k, ldk, nk, d, scale, s, KEY_BLOCK);
        return;
    }
    for (int g = 0; g < G; g++)
        for (int64_t i = 0; i < nk; i++)
            s[g * KEY_BLOCK + i] = isa->dot(q + g * ldq, (const float *)k + i * ldk, d) * scale;
}

static void pv_rows(const cpu_isa *isa, const float *p, int G, int h, const void *v, int64_t ldv, int64_t nk,
                    int64_t d, float *acc)
{
    if (isa->attn_pv) {
        isa->attn_pv(h, p, KEY_BLOCK, G, v, ldv, nk, d, acc);
        return;
    }
    for (int g = 0; g < G; g++)
        for (int64_t i = 0; i < nk; i++) isa->axpy(acc + g * d, p[g * KEY_BLOCK + i], (const float *)v + i * ldv, d);
}

/* Query row t of heads h0 .. h0+G-1 (G <= 4, one kv head) over keys [jlo, jhi): each block
 * of keys is read once for the G heads. ws: scores [4×KEY_BLOCK], acc [4×d], then the f32
 * k/v buffers. part NULL: the normalised rows go to the output; else the unnormalised
 * partial of each head g goes to part + g·(d+2): max, sum, acc[d] (merged by the caller). */
static void attn_rows(const attn_job *j, int64_t t, int64_t h0, int G, int64_t jlo, int64_t jhi, float *ws,
                      float *kvbuf, float *part)
{
    const cpu_run *r = j->r;
    const cpu_node *nd = r->nd;
    const cpu_isa *isa = r->be->isa;
    int64_t d = nd->hd, nkv = nd->nkv, kvh = h0 / (nd->nh / nkv);
    const float *q = j->q + (t * nd->nh + h0) * d;
    const float *mask = nd->mask_in >= 0 ? (const float *)r->vp[nd->mask_in] + t * nd->S : NULL;
    float *sc = ws, *acc = ws + 4 * KEY_BLOCK;
    float m[4], l[4], cap = nd->fb;
    int as16 = isa->attn_qk && isa->attn_pv; /* one query row: each key row is read once, so no copy */
    for (int g = 0; g < G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    memset(acc, 0, (size_t)(G * d) * sizeof *acc);
    for (int64_t jb = jlo; jb < jhi; jb += KEY_BLOCK) {
        int64_t nbk = jhi - jb < KEY_BLOCK ? jhi - jb : KEY_BLOCK, ldk, ldv;
        int hk, hv;
        const void *K = kv_rows(r, 1, j->kv_base + jb, nbk, kvh, as16, kvbuf, &ldk, &hk);
        qk_rows(isa, q, d, G, hk, K, ldk, nbk, d, nd->fa, sc);
        int live = 0;
        for (int g = 0; g < G; g++) {
            float *s = sc + g * KEY_BLOCK;
            for (int64_t i = 0; i < nbk && (cap > 0 || mask); i++) {
                if (cap > 0) s[i] = cap * tanhf(s[i] / cap);
                if (mask) s[i] += mask[jb + i];
            }
            float mb = isa->maxv(s, nbk);
            if (mb == -INFINITY) { /* every key of the block masked out for this head */
                memset(s, 0, (size_t)nbk * sizeof *s);
                continue;
            }
            live = 1;
            float m_new = mb > m[g] ? mb : m[g];
            float alpha = m[g] == -INFINITY ? 0.0f : expf(m[g] - m_new);
            float ps = isa->exp_shift(s, s, m_new, nbk);
            if (alpha != 1.0f) isa->scal(acc + g * d, alpha, d);
            l[g] = l[g] * alpha + ps;
            m[g] = m_new;
        }
        if (!live) continue;
        const void *V = kv_rows(r, 2, j->kv_base + jb, nbk, kvh, as16, kvbuf + KEY_BLOCK * d, &ldv, &hv);
        pv_rows(isa, sc, G, hv, V, ldv, nbk, d, acc);
    }
    for (int g = 0; g < G && part; g++) {
        float *pg = part + g * (d + 2);
        pg[0] = m[g];
        pg[1] = l[g];
        memcpy(pg + 2, acc + g * d, (size_t)d * sizeof *acc);
    }
    for (int g = 0; g < G && !part; g++) {
        float *out = j->o + (t * nd->nh + h0 + g) * d;
        if (l[g] > 0) {
            float inv = 1.0f / l[g];
            for (int64_t i = 0; i < d; i++) out[i] = acc[g * d + i] * inv;
        } else {
            memset(out, 0, (size_t)d * sizeof *out);
        }
    }
}

/* Query rows t0..t1 of head h: scores of a block of keys (Q·Kᵀ), online softmax per row,
 * then O += P·V, by the ISA's attention kernels where it has them, else sgemm. Rows and
 * keys are read in place (strided). */
static void attn_block(const attn_job *job, int64_t t0, int64_t t1, int64_t h, float *ws)
{
    const cpu_run *r = job->r;
    int64_t p = job->p;
    const cpu_node *nd = r->nd;
    const cpu_isa *isa = r->be->isa;
    int64_t d = nd->hd, nkv = nd->nkv, kvh = h / (nd->nh / nkv), nq = t1 - t0;
    const float *Q = job->q + (t0 * nd->nh + h) * d;
    const float *mask = nd->mask_in >= 0 ? (const float *)r->vp[nd->mask_in] : NULL;
    float *sc = ws, *acc = sc + QUERY_BLOCK * KEY_BLOCK, *mrow = acc + QUERY_BLOCK * d, *lrow = mrow + QUERY_BLOCK;
    float *kvbuf = lrow + QUERY_BLOCK;
    float cap = nd->fb;
    int64_t blo, bhi, lo, hi;
    row_range(nd, p, t0, &blo, &hi);
    row_range(nd, p, t1 - 1, &lo, &bhi);
    memset(acc, 0, (size_t)(nq * d) * sizeof *acc);
    for (int64_t i = 0; i < nq; i++) {
        mrow[i] = -INFINITY;
        lrow[i] = 0.0f;
    }
    for (int64_t jb = blo; jb < bhi; jb += KEY_BLOCK) {
        int64_t nk = bhi - jb < KEY_BLOCK ? bhi - jb : KEY_BLOCK, ldk, ldv;
        int hk, hv; /* many query rows: 16-bit rows converted once, read by every row */
        const float *K = kv_rows(r, 1, jb, nk, kvh, 0, kvbuf, &ldk, &hk);
        if (isa->attn_qk) /* the ISA's kernel, 4 query rows per call */
            for (int64_t g = 0; g < nq; g += 4)
                isa->attn_qk(0, Q + g * nd->nh * d, nd->nh * d, (int)(nq - g < 4 ? nq - g : 4), K, ldk, nk, d, nd->fa,
                             sc + g * KEY_BLOCK, KEY_BLOCK);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)nq, (int)nk, (int)d, nd->fa, Q,
                        (int)(nd->nh * d), K, (int)ldk, 0.0f, sc, KEY_BLOCK);
        for (int64_t i = 0; i < nq; i++) {
            float *s = sc + i * KEY_BLOCK;
            row_range(nd, p, t0 + i, &lo, &hi);
            int64_t a = lo > jb ? lo - jb : 0, b = hi < jb + nk ? hi - jb : nk; /* valid [a, b) */
            if (a >= b) {
                memset(s, 0, (size_t)nk * sizeof *s);
                continue;
            }
            for (int64_t j = a; j < b; j++) {
                float v = s[j];
                if (cap > 0) v = cap * tanhf(v / cap);
                if (mask) v += mask[(t0 + i) * nd->S + jb + j];
                s[j] = v;
            }
            float mb = isa->maxv(s + a, b - a);
            if (mb == -INFINITY) { /* every valid key of this block masked out */
                memset(s, 0, (size_t)nk * sizeof *s);
                continue;
            }
            float m_new = mb > mrow[i] ? mb : mrow[i];
            float alpha = mrow[i] == -INFINITY ? 0.0f : expf(mrow[i] - m_new);
            float ps = isa->exp_shift(s + a, s + a, m_new, b - a);
            memset(s, 0, (size_t)a * sizeof *s);
            memset(s + b, 0, (size_t)(nk - b) * sizeof *s);
            if (alpha != 1.0f) isa->scal(acc + i * d, alpha, d);
            lrow[i] = lrow[i] * alpha + ps;
            mrow[i] = m_new;
        }
        const float *V = kv_rows(r, 2, jb, nk, kvh, 0, kvbuf + KEY_BLOCK * d, &ldv, &hv);
        if (isa->attn_pv)
            for (int64_t g = 0; g < nq; g += 4)
                isa->attn_pv(0, sc + g * KEY_BLOCK, KEY_BLOCK, (int)(nq - g < 4 ? nq - g : 4), V, ldv, nk, d, acc + g * d);
        else
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)nq, (int)d, (int)nk, 1.0f, sc,
                        KEY_BLOCK, V, (int)ldv, 1.0f, acc, (int)d);
    }
    float *out = job->o;
    for (int64_t i = 0; i < nq; i++) {
        float *o = out + ((t0 + i) * nd->nh + h) * d;
        if (lrow[i] > 0) {
            float inv = 1.0f / lrow[i];
            for (int64_t k = 0; k < d; k++) o[k] = acc[i * d + k] * inv;
        } else {
            memset(o, 0, (size_t)d * sizeof *o);
        }
    }
}

static void attn_task(void *arg, int64_t task, int worker)
{
    attn_job *j = arg;
    const cpu_node *nd = j->r->nd;
    int64_t h = task / j->q_blocks, qb = task % j->q_blocks;
    int64_t t0 = qb * QUERY_BLOCK, t1 = t0 + QUERY_BLOCK < nd->T ? t0 + QUERY_BLOCK : nd->T;
    float *ws = j->r->scratch + (size_t)worker * j->r->scratch_stride;
    if (t1 - t0 >= GEMM_MIN_ROWS) {
        attn_block(j, t0, t1, h, ws);
        return;
    }
    for (int64_t t = t0; t < t1; t++) {
        int64_t lo, hi;
        row_range(nd, j->p, t, &lo, &hi);
        attn_rows(j, t, h, 1, lo, hi, ws, ws + ROWS_FLOATS(nd->hd), NULL);
    }
}

/* few query rows (decode): one task per query row and chunk of keys (split_keys), for every
 * head, so a task reads its keys' rows whole and in order (all kv heads: one stream) and a
 * short cache still spreads over the workers; the caller merges the chunks' partials */
static void attn_split_task(void *arg, int64_t task, int worker)
{
    attn_job *j = arg;
    const cpu_node *nd = j->r->nd;
    int64_t t = task / j->n_split, c = task % j->n_split, d = nd->hd, per_kv = nd->nh / nd->nkv;
    int64_t lo, hi;
    row_range(nd, j->p, t, &lo, &hi);
    int64_t a = c * j->split > lo ? c * j->split : lo, b = (c + 1) * j->split < hi ? (c + 1) * j->split : hi;
    float *ws = j->r->scratch + (size_t)worker * j->r->scratch_stride;
    float *part = j->part + (task * nd->nh) * (d + 2);
    if (a >= b) { /* no key of this row in the chunk */
        for (int64_t h = 0; h < nd->nh; h++) {
            part[h * (d + 2)] = -INFINITY;
            part[h * (d + 2) + 1] = 0.0f;
        }
        return;
    }
    /* the chunk's key and value rows are contiguous (every kv head): ask for all their lines
     * now, so the per-head passes below (each a strided quarter of a row) find them on the way */
    size_t es = nd->dt[1] == RLX_F32 ? 4 : 2, row = (size_t)(nd->nkv * d);
    for (int slot = 1; slot <= 2; slot++) {
        const char *base = (const char *)j->r->vp[nd->in[slot]] + (size_t)(j->kv_base + a) * row * es;
        for (size_t off = 0; off < (size_t)(b - a) * row * es; off += 64) __builtin_prefetch(base + off, 0, 2);
    }
    for (int64_t h0 = 0, G; h0 < nd->nh; h0 += G) { /* groups of up to 4 heads of one kv head */
        G = per_kv - h0 % per_kv < 4 ? per_kv - h0 % per_kv : 4;
        attn_rows(j, t, h0, (int)G, a, b, ws, ws + ROWS_FLOATS(d), part + h0 * (d + 2));
    }
}

/* keys per decode task: whole blocks, at most SPLIT_MAX chunks over the S keys (the
 * shape alone decides, so the result does not depend on the thread count) */
static int64_t split_keys(const cpu_node *nd)
{
    int64_t blocks = (nd->S + KEY_BLOCK - 1) / KEY_BLOCK, per = (blocks + SPLIT_MAX - 1) / SPLIT_MAX;
    return (per < 1 ? 1 : per) * KEY_BLOCK;
}

/* out[t, h] = Σ_c e^(m_c - M) acc_c / Σ_c e^(m_c - M) l_c over the chunks c, in order */
static void merge_split(const attn_job *j)
{
    const cpu_node *nd = j->r->nd;
    const cpu_isa *isa = j->r->be->isa;
    int64_t d = nd->hd, row = nd->nh * (d + 2);
    for (int64_t t = 0; t < nd->T; t++)
        for (int64_t h = 0; h < nd->nh; h++) {
            const float *p0 = j->part + t * j->n_split * row + h * (d + 2);
            float *out = j->o + (t * nd->nh + h) * d, M = -INFINITY, L = 0.0f;
            for (int64_t c = 0; c < j->n_split; c++)
                if (p0[c * row + 1] > 0 && p0[c * row] > M) M = p0[c * row];
            memset(out, 0, (size_t)d * sizeof *out);
            if (M == -INFINITY) continue;
            for (int64_t c = 0; c < j->n_split; c++) {
                const float *pc = p0 + c * row;
                if (!(pc[1] > 0)) continue;
                float e = expf(pc[0] - M);
                L += e * pc[1];
                isa->axpy(out, e, pc + 2, d);
            }
            isa->scal(out, 1.0f / L, d);
        }
}

int cpu_run_attention(const cpu_run *r)
{
    const cpu_node *nd = r->nd;
    int64_t p = 0;
    if (nd->pos_in >= 0) p = read_index(r->vp[nd->pos_in], nd->in_dtype, 0);
    if (p < 0)
        return cpu_fail(r->d, RLX_ERR_INVALID, "cpu: node %u (rlx.attention): pos %lld is negative",
                        nd->index, (long long)p);
    if (nd->pos_in >= 0 && p + nd->T > nd->S)
        return cpu_fail(r->d, RLX_ERR_INVALID,
                        "cpu: node %u (rlx.attention): pos %lld + %lld query rows is past the %lld key rows",
                        nd->index, (long long)p, (long long)nd->T, (long long)nd->S);
    if (nd->T == 0 || nd->nh == 0 || nd->hd == 0) return 0;
    attn_job j = {r, p, (nd->T + QUERY_BLOCK - 1) / QUERY_BLOCK, 0, CPU_F(r, 0), CPU_O(r, 0), 0, 0, NULL};
    int64_t n = nd->T * nd->nh * nd->hd;
    float *sh = r->shared;
    if (nd->dt[0] != RLX_F32) {
        cpu_to_f32(r, nd->dt[0], r->vp[nd->in[0]], sh, n);
        j.q = sh;
        sh += n;
    }
    if (nd->dt[3] != RLX_F32) j.o = sh;
    if (nd->T < GEMM_MIN_ROWS) {
        int64_t lo, hi;
        row_range(nd, p, nd->T - 1, &lo, &hi); /* the last row sees the most keys */
        j.split = split_keys(nd);
        j.n_split = hi > 0 ? (hi + j.split - 1) / j.split : 1;
        j.part = sh + (nd->dt[3] != RLX_F32 ? n : 0);
        cpu_parallel(r, nd->T * j.n_split, attn_split_task, &j);
        merge_split(&j);
    } else
        cpu_parallel(r, nd->nh * j.q_blocks, attn_task, &j);
    if (nd->dt[3] != RLX_F32) cpu_from_f32(r, nd->dt[3], j.o, r->vp[nd->out[0]], n);
    return 0;
}

/* ---------------------------------------------------------------- attention_rows */

/* q [T, nh, d], k and v [slots, S, nkv, d], pos and slots [T]: query row b attends to keys
 * 0..pos[b] of cache slot slots[b], each (row, head) exactly as rlx.attention's decode row */
int cpu_prep_attention_rows(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 5, 5, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *q = cpu_val(c, 0), *k = cpu_val(c, 1), *v = cpu_val(c, 2), *o = cpu_out(c, 0);
    const rlx_value_desc *pos = cpu_val(c, 3), *slots = cpu_val(c, 4);
    if (cpu_need_float(c, q, "q") || cpu_need_float(c, k, "k") || cpu_need_float(c, v, "v") ||
        cpu_need_float(c, o, "the output"))
        return RLX_ERR_INVALID;
    if (q->shape.ndim != 3 || k->shape.ndim != 4 || v->shape.ndim != 4)
        return cpu_bad(c, "q must be [T, heads, head_dim], k and v [slots, S, kv_heads, head_dim]");
    nd->T = q->shape.dims[0];
    nd->nh = q->shape.dims[1];
    nd->hd = q->shape.dims[2];
    nd->nb = k->shape.dims[0]; /* slots */
    nd->S = k->shape.dims[1];
    nd->nkv = k->shape.dims[2];
    for (int i = 0; i < 4; i++)
        if (v->shape.dims[i] != k->shape.dims[i] || (i == 3 && k->shape.dims[3] != nd->hd))
            return cpu_bad(c, "k and v must both be [%lld, %lld, kv_heads, %lld]", (long long)nd->nb,
                           (long long)nd->S, (long long)nd->hd);
    if (nd->nkv <= 0 || nd->nh % nd->nkv != 0)
        return cpu_bad(c, "%lld query heads are not a multiple of %lld kv heads", (long long)nd->nh,
                       (long long)nd->nkv);
    if (cpu_numel(&o->shape) != nd->T * nd->nh * nd->hd) return cpu_bad(c, "output must have q's shape");
    if (pos->dtype != RLX_I32 || slots->dtype != RLX_I32 || cpu_numel(&pos->shape) != nd->T ||
        cpu_numel(&slots->shape) != nd->T)
        return cpu_bad(c, "pos and slots must be i32 [%lld]", (long long)nd->T);
    nd->dt[0] = q->dtype;
    nd->dt[1] = k->dtype;
    nd->dt[2] = v->dtype;
    nd->dt[3] = o->dtype;
    nd->pos_in = c->node->inputs[3];
    nd->in_dtype = RLX_I32;
    nd->rows_mode = 1;
    nd->causal = 1;
    double scale, softcap;
    if (cpu_attr_float(c, "scale", nd->hd > 0 ? 1.0 / sqrt((double)nd->hd) : 1.0, &scale) ||
        cpu_attr_int(c, "window", 0, &nd->window) || cpu_attr_float(c, "softcap", 0.0, &softcap))
        return RLX_ERR_INVALID;
    if (nd->window < 0) return cpu_bad(c, "window must be >= 0");
    if (softcap < 0) return cpu_bad(c, "softcap must be >= 0");
    nd->fa = (float)scale;
    nd->fb = (float)softcap;
    /* attn_row's scores, accumulator and 16-bit key/value rows, as rlx.attention sizes them */
    nd->scratch_floats = (size_t)(QUERY_BLOCK * KEY_BLOCK + QUERY_BLOCK * nd->hd + 2 * QUERY_BLOCK);
    if (nd->dt[1] != RLX_F32 || nd->dt[2] != RLX_F32) nd->scratch_floats += (size_t)(2 * KEY_BLOCK * nd->hd);
    nd->shared_floats = (size_t)((nd->dt[0] != RLX_F32) + (nd->dt[3] != RLX_F32)) * (size_t)(nd->T * nd->nh * nd->hd);
    return 0;
}

typedef struct rows_job {
    attn_job base;
    const int32_t *pos, *slots;
} rows_job;

static void rows_task(void *arg, int64_t task, int worker)
{
    const rows_job *rj = arg;
    const cpu_node *nd = rj->base.r->nd;
    int64_t b = task / nd->nh, h = task % nd->nh;
    attn_job j = rj->base;
    j.p = rj->pos[b];
    j.kv_base = (int64_t)rj->slots[b] * nd->S;
    j.q += b * nd->nh * nd->hd;
    j.o += b * nd->nh * nd->hd;
    float *ws = j.r->scratch + (size_t)worker * j.r->scratch_stride;
    int64_t lo, hi;
    row_range(nd, j.p, 0, &lo, &hi);
    attn_rows(&j, 0, h, 1, lo, hi, ws, ws + ROWS_FLOATS(nd->hd), NULL);
}

int cpu_run_attention_rows(const cpu_run *r)
{
    const cpu_node *nd = r->nd;
    const int32_t *pos = r->vp[nd->in[3]], *slots = r->vp[nd->in[4]];
    for (int64_t b = 0; b < nd->T; b++) {
        if (slots[b] < 0 || slots[b] >= nd->nb)
            return cpu_fail(r->d, RLX_ERR_INVALID, "cpu: node %u (rlx.attention_rows): row %lld: slot %d outside [0, %lld)",
                            nd->index, (long long)b, slots[b], (long long)nd->nb);
        if (pos[b] < 0 || pos[b] >= nd->S)
            return cpu_fail(r->d, RLX_ERR_INVALID, "cpu: node %u (rlx.attention_rows): row %lld: pos %d outside [0, %lld)",
                            nd->index, (long long)b, pos[b], (long long)nd->S);
    }
    if (nd->T == 0 || nd->nh == 0 || nd->hd == 0) return 0;
    rows_job j = {{r, 0, 1, 0, CPU_F(r, 0), CPU_O(r, 0), 0, 0, NULL}, pos, slots};
    int64_t n = nd->T * nd->nh * nd->hd;
    float *sh = r->shared;
    if (nd->dt[0] != RLX_F32) {
        cpu_to_f32(r, nd->dt[0], r->vp[nd->in[0]], sh, n);
        j.base.q = sh;
        sh += n;
    }
    if (nd->dt[3] != RLX_F32) j.base.o = sh;
    cpu_parallel(r, nd->T * nd->nh, rows_task, &j);
    if (nd->dt[3] != RLX_F32) cpu_from_f32(r, nd->dt[3], j.base.o, r->vp[nd->out[0]], n);
    return 0;
}

/* ---------------------------------------------------------------- rope */

int cpu_prep_rope(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 3, 3, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *x = cpu_val(c, 0), *pos = cpu_val(c, 1), *f = cpu_val(c, 2), *o = cpu_out(c, 0);
    if (cpu_need_float(c, x, "x") || cpu_need_f32(c, f, "inv_freq") || cpu_need_float(c, o, "the output"))
        return RLX_ERR_INVALID;
    nd->dt[0] = x->dtype; /* 16-bit rows are widened, rotated in f32 and rounded once */
    nd->dt[3] = o->dtype;
    if (!is_index_dtype(pos->dtype)) return cpu_bad(c, "positions must be i32");
    if (x->shape.ndim < 2) return cpu_bad(c, "x must be [T, heads, head_dim]");
    nd->T = x->shape.dims[0];
    nd->hd = x->shape.dims[x->shape.ndim - 1];
    nd->nh = nd->T && nd->hd ? cpu_numel(&x->shape) / (nd->T * nd->hd) : 0;
    if (cpu_numel(&pos->shape) != nd->T) return cpu_bad(c, "positions must have %lld entries", (long long)nd->T);
    if (cpu_numel(&o->shape) != cpu_numel(&x->shape)) return cpu_bad(c, "output must have x's shape");
    if (cpu_attr_int(c, "rot_dim", 0, &nd->rot)) return RLX_ERR_INVALID;
    if (nd->rot == 0) nd->rot = nd->hd;
    if (nd->rot < 0 || nd->rot > nd->hd || nd->rot % 2)
        return cpu_bad(c, "rot_dim %lld must be even and at most head_dim %lld", (long long)nd->rot,
                       (long long)nd->hd);
    if (cpu_numel(&f->shape) < nd->rot / 2)
        return cpu_bad(c, "inv_freq has %lld entries, rot_dim %lld needs %lld",
                       (long long)cpu_numel(&f->shape), (long long)nd->rot, (long long)(nd->rot / 2));
    nd->in_dtype = pos->dtype;
    nd->scratch_floats = (size_t)(nd->rot + 2 * nd->hd); /* angles, then a 16-bit row in and out */
    return 0;
}

typedef struct rope_job {
    const cpu_run *r;
    int64_t chunk;
} rope_job;

static void rope_task(void *arg, int64_t task, int worker)
{
    rope_job *j = arg;
    const cpu_node *nd = j->r->nd;
    int64_t d = nd->hd, half = nd->rot / 2;
    const float *inv = CPU_F(j->r, 2);
    const void *pos = j->r->vp[nd->in[1]], *x = j->r->vp[nd->in[0]];
    void *o = j->r->vp[nd->out[0]];
    const cpu_isa *isa = j->r->be->isa;
    float *cs = j->r->scratch + (size_t)worker * j->r->scratch_stride, *sn = cs + half;
    float *xb = cs + nd->rot, *ob = xb + d;
    int64_t t0 = task * j->chunk, t1 = t0 + j->chunk < nd->T ? t0 + j->chunk : nd->T;
    for (int64_t t = t0; t < t1; t++) {
        float p = (float)read_index(pos, nd->in_dtype, t);
        for (int64_t i = 0; i < half; i++) {
            float th = p * inv[i]; /* in f32, as transformers computes it */
            cs[i] = cosf(th);
            sn[i] = sinf(th);
        }
        for (int64_t h = 0; h < nd->nh; h++) {
            int64_t row = t * nd->nh + h;
            const float *xr = cpu_row_in(isa, nd->dt[0], x, row, d, xb);
            float *orow = cpu_row_at(nd->dt[3], o, row, d, ob);
            for (int64_t i = 0; i < half; i++) {
                float a = xr[i], b = xr[i + half];
                orow[i] = a * cs[i] - b * sn[i];
                orow[i + half] = b * cs[i] + a * sn[i];
            }
            if (orow != xr)
                for (int64_t i = nd->rot; i < d; i++) orow[i] = xr[i];
            cpu_row_out(isa, nd->dt[3], o, row, d, orow);
        }
    }
}

int cpu_run_rope(const cpu_run *r)
{
    const cpu_node *nd = r->nd;
    if (nd->T == 0 || nd->nh == 0 || nd->hd == 0) return 0;
    rope_job j = {r, cpu_chunk(nd->T, 4, 64, 1)};
    cpu_parallel(r, (nd->T + j.chunk - 1) / j.chunk, rope_task, &j);
    return 0;
}
