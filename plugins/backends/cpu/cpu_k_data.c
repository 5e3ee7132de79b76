/* Data movement: embedding, cache_write, transpose, concat, slice, last_row, copy, cast.
 * Embedding ids and cache positions are checked at execute (they are data). */
#include "cpu_backend.h"
#include <math.h>
#include <string.h>

static int64_t read_index(const void *p, int dt, int64_t i)
{
    return dt == RLX_I64 ? ((const int64_t *)p)[i] : ((const int32_t *)p)[i];
}

static int same_dtype_out(const cpu_compile_ctx *c, cpu_node *nd, const rlx_value_desc *x)
{
    const rlx_value_desc *o = cpu_out(c, 0);
    nd->esize = cpu_dtype_size(x->dtype);
    if (!nd->esize) return cpu_bad(c, "unknown dtype %d", x->dtype);
    if (o->dtype != x->dtype) return cpu_bad(c, "output dtype %d differs from the input's %d", o->dtype, x->dtype);
    return 0;
}

/* copies n bytes in parallel slices of at least 256 KiB */
typedef struct bytes_job {
    char *dst;
    const char *src;
    size_t n, chunk;
} bytes_job;

static void bytes_task(void *arg, int64_t t, int worker)
{
    bytes_job *j = arg;
    size_t lo = (size_t)t * j->chunk, len = lo + j->chunk < j->n ? j->chunk : j->n - lo;
    memcpy(j->dst + lo, j->src + lo, len);
}

static void copy_bytes(const cpu_run *r, void *dst, const void *src, size_t n)
{
    if (!n || dst == src) return;
    bytes_job j = {dst, src, n, (size_t)cpu_chunk((int64_t)n, 256 << 10, 16, 64)};
    cpu_parallel(r, (int64_t)((n + j.chunk - 1) / j.chunk), bytes_task, &j);
}

/* ---------------------------------------------------------------- embedding */

int cpu_prep_embedding(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 2, 2, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *tab = cpu_val(c, 0), *ids = cpu_val(c, 1), *o = cpu_out(c, 0);
    if (tab->shape.ndim != 2) return cpu_bad(c, "table must be [V, H]");
    if (ids->dtype != RLX_I32 && ids->dtype != RLX_I64) return cpu_bad(c, "ids must be i32");
    if (cpu_is_float(tab->dtype) && cpu_is_float(o->dtype)) { /* rows converted if they differ */
        nd->esize = cpu_dtype_size(tab->dtype);
        nd->dt[0] = tab->dtype;
        nd->dt[3] = o->dtype;
    } else if (same_dtype_out(c, nd, tab)) {
        return RLX_ERR_INVALID;
    } else {
        nd->dt[0] = nd->dt[3] = tab->dtype;
    }
    nd->rows = tab->shape.dims[0];
    nd->cols = tab->shape.dims[1];
    nd->T = cpu_numel(&ids->shape);
    nd->in_dtype = ids->dtype;
    if (cpu_numel(&o->shape) != nd->T * nd->cols)
        return cpu_bad(c, "output must be [%lld, %lld]", (long long)nd->T, (long long)nd->cols);
    return 0;
}

int cpu_run_embedding(const cpu_run *r)
{
    const cpu_node *nd = r->nd;
    const void *ids = r->vp[nd->in[1]];
    const char *tab = r->vp[nd->in[0]];
    char *o = r->vp[nd->out[0]];
    size_t row = (size_t)nd->cols * nd->esize;
    for (int64_t t = 0; t < nd->T; t++) {
        int64_t id = read_index(ids, nd->in_dtype, t);
        if (id < 0 || id >= nd->rows)
            return cpu_fail(r->d, RLX_ERR_INVALID,
                            "cpu: node %u (rlx.embedding): id %lld at position %lld is outside [0, %lld)",
                            nd->index, (long long)id, (long long)t, (long long)nd->rows);
    }
    const cpu_isa *isa = r->be->isa;
    size_t orow = (size_t)nd->cols * cpu_dtype_size(nd->dt[3]);
    for (int64_t t = 0; t < nd->T; t++) {
        const char *src = tab + (size_t)read_index(ids, nd->in_dtype, t) * row;
        char *dst = o + (size_t)t * orow;
        if (nd->dt[0] == nd->dt[3]) {
            memcpy(dst, src, row);
        } else if (nd->dt[3] == RLX_F32) {
            isa->h_to_f32(nd->dt[0], (const uint16_t *)src, (float *)dst, nd->cols);
        } else if (nd->dt[0] == RLX_F32) {
            isa->f32_to_h(nd->dt[3], (const float *)src, (uint16_t *)dst, nd->cols);
        } else { /* f16 <-> bf16 */
            for (int64_t i = 0; i < nd->cols; i++)
                ((uint16_t *)dst)[i] = cpu_h_store(nd->dt[3], cpu_h_load(nd->dt[0], ((const uint16_t *)src)[i]));
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- cache_write */

int cpu_prep_cache_write(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 3, 3, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *cache = cpu_val(c, 0), *nw = cpu_val(c, 1), *pos = cpu_val(c, 2), *o = cpu_out(c, 0);
    if (same_dtype_out(c, nd, cache)) return RLX_ERR_INVALID;
    if (nw->dtype != cache->dtype) return cpu_bad(c, "new rows and the cache differ in dtype");
    if (pos->dtype != RLX_I32 && pos->dtype != RLX_I64) return cpu_bad(c, "pos must be i32");
    if (cpu_numel(&pos->shape) != 1) return cpu_bad(c, "pos must be [1]");
    if (cache->shape.ndim < 1 || nw->shape.ndim < 1) return cpu_bad(c, "cache and new rows need dims");
    nd->S = cache->shape.dims[0];
    nd->T = nw->shape.dims[0];
    nd->cols = nd->S ? cpu_numel(&cache->shape) / nd->S : 0;
    if (cpu_numel(&nw->shape) != nd->T * nd->cols)
        return cpu_bad(c, "new rows must be [T, ...] with rows of the cache's %lld elements",
                       (long long)nd->cols);
    if (cpu_numel(&o->shape) != cpu_numel(&cache->shape)) return cpu_bad(c, "output must have the cache's shape");
    nd->in_dtype = pos->dtype;
    return 0;
}

int cpu_run_cache_write(const cpu_run *r)
{
    const cpu_node *nd = r->nd;
    int64_t p = read_index(r->vp[nd->in[2]], nd->in_dtype, 0);
    if (p < 0)
        return cpu_fail(r->d, RLX_ERR_INVALID, "cpu: node %u (rlx.cache_write): pos %lld is negative",
                        nd->index, (long long)p);
    if (p + nd->T > nd->S)
        return cpu_fail(r->d, RLX_ERR_INVALID,
                        "cpu: node %u (rlx.cache_write): pos %lld + %lld new rows is past the cache end (%lld rows)",
                        nd->index, (long long)p, (long long)nd->T, (long long)nd->S);
    size_t row = (size_t)nd->cols * nd->esize;
    char *cache = r->vp[nd->in[0]];
    copy_bytes(r, cache + (size_t)p * row, r->vp[nd->in[1]], (size_t)nd->T * row);
    /* the output aliases the cache; should the host have given it its own buffer, fill it */
    copy_bytes(r, r->vp[nd->out[0]], cache, (size_t)nd->S * row);
    return 0;
}

/* cache [slots, S, ...] <- new [T, ...]: row b into slot slots[b] at pos[b] */
int cpu_prep_cache_write_rows(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 4, 4, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *cache = cpu_val(c, 0), *nw = cpu_val(c, 1), *o = cpu_out(c, 0);
    const rlx_value_desc *pos = cpu_val(c, 2), *slots = cpu_val(c, 3);
    if (same_dtype_out(c, nd, cache)) return RLX_ERR_INVALID;
    if (nw->dtype != cache->dtype) return cpu_bad(c, "new rows and the cache differ in dtype");
    if (cache->shape.ndim < 2 || nw->shape.ndim < 1) return cpu_bad(c, "cache must be [slots, S, ...], new [T, ...]");
    nd->nb = cache->shape.dims[0];
    nd->S = cache->shape.dims[1];
    nd->T = nw->shape.dims[0];
    nd->cols = nd->nb && nd->S ? cpu_numel(&cache->shape) / (nd->nb * nd->S) : 0;
    if (cpu_numel(&nw->shape) != nd->T * nd->cols)
        return cpu_bad(c, "new rows must be [T, ...] with rows of the cache's %lld elements", (long long)nd->cols);
    if (pos->dtype != RLX_I32 || slots->dtype != RLX_I32 || cpu_numel(&pos->shape) != nd->T ||
        cpu_numel(&slots->shape) != nd->T)
        return cpu_bad(c, "pos and slots must be i32 [%lld]", (long long)nd->T);
    if (cpu_numel(&o->shape) != cpu_numel(&cache->shape)) return cpu_bad(c, "output must have the cache's shape");
    return 0;
}

int cpu_run_cache_write_rows(const cpu_run *r)
{
    const cpu_node *nd = r->nd;
    const int32_t *pos = r->vp[nd->in[2]], *slots = r->vp[nd->in[3]];
    size_t row = (size_t)nd->cols * nd->esize;
    char *cache = r->vp[nd->in[0]];
    const char *nw = r->vp[nd->in[1]];
    for (int64_t b = 0; b < nd->T; b++) {
        if (slots[b] < 0 || slots[b] >= nd->nb || pos[b] < 0 || pos[b] >= nd->S)
            return cpu_fail(r->d, RLX_ERR_INVALID,
                            "cpu: node %u (rlx.cache_write_rows): row %lld: slot %d, pos %d outside [0, %lld) x [0, %lld)",
                            nd->index, (long long)b, slots[b], pos[b], (long long)nd->nb, (long long)nd->S);
        memcpy(cache + ((size_t)slots[b] * (size_t)nd->S + (size_t)pos[b]) * row, nw + (size_t)b * row, row);
    }
    copy_bytes(r, r->vp[nd->out[0]], cache, (size_t)(nd->nb * nd->S) * row);
    return 0;
}

/* ---------------------------------------------------------------- transpose */

int cpu_prep_transpose(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 1, 1, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *x = cpu_val(c, 0), *o = cpu_out(c, 0);
    if (same_dtype_out(c, nd, x)) return RLX_ERR_INVALID;
    const rlx_attr *a = cpu_attr_find(c, "perm");
    if (!a || a->kind != RLX_ATTR_INTS) return cpu_bad(c, "attribute perm (ints) is missing");
    if (a->n_ints != x->shape.ndim || (a->n_ints && !a->ints))
        return cpu_bad(c, "perm has %u entries, x has %u dims", a->n_ints, x->shape.ndim);
    nd->ndim = x->shape.ndim;
    int seen[RLX_MAX_DIMS] = {0};
    for (uint32_t i = 0; i < nd->ndim; i++) {
        int64_t p = a->ints[i];
        if (p < 0) p += nd->ndim;
        if (p < 0 || p >= (int64_t)nd->ndim || seen[p]++) return cpu_bad(c, "perm is not a permutation");
        nd->perm[i] = p;
        nd->in_dims[i] = x->shape.dims[i];
    }
    if (o->shape.ndim != nd->ndim) return cpu_bad(c, "output must have %u dims", nd->ndim);
    for (uint32_t i = 0; i < nd->ndim; i++)
        if (o->shape.dims[i] != x->shape.dims[nd->perm[i]])
            return cpu_bad(c, "output dim %u must be %lld", i, (long long)x->shape.dims[nd->perm[i]]);
    int64_t inner = nd->ndim ? o->shape.dims[nd->ndim - 1] : 1;
    nd->cols = inner;
    nd->rows = inner ? cpu_numel(&x->shape) / inner : 0;
    return 0;
}

typedef struct tr_job {
    const cpu_run *r;
    int64_t chunk;
} tr_job;

static void transpose_task(void *arg, int64_t task, int worker)
{
    tr_job *j = arg;
    const cpu_node *nd = j->r->nd;
    uint32_t nd_ = nd->ndim;
    int64_t in_stride[RLX_MAX_DIMS], odim[RLX_MAX_DIMS], ostr[RLX_MAX_DIMS], idx[RLX_MAX_DIMS];
    int64_t s = 1;
    for (int i = (int)nd_ - 1; i >= 0; i--) {
        in_stride[i] = s;
        s *= nd->in_dims[i];
    }
    for (uint32_t i = 0; i < nd_; i++) {
        odim[i] = nd->in_dims[nd->perm[i]];
        ostr[i] = in_stride[nd->perm[i]]; /* input stride of output axis i */
    }
    size_t es = nd->esize;
    const char *x = j->r->vp[nd->in[0]];
    char *o = j->r->vp[nd->out[0]];
    int64_t r0 = task * j->chunk, r1 = r0 + j->chunk < nd->rows ? r0 + j->chunk : nd->rows;
    /* odometer over the output's leading axes, starting at row r0 */
    int64_t rem = r0, off = 0;
    for (int i = (int)nd_ - 2; i >= 0; i--) {
        idx[i] = rem % odim[i];
        rem /= odim[i];
        off += idx[i] * ostr[i];
    }
    int64_t inner = nd->cols, istep = nd_ ? ostr[nd_ - 1] : 1;
    for (int64_t row = r0; row < r1; row++) {
        char *dst = o + (size_t)(row * inner) * es;
        if (istep == 1) {
            memcpy(dst, x + (size_t)off * es, (size_t)inner * es);
        } else {
            for (int64_t k = 0; k < inner; k++)
                memcpy(dst + (size_t)k * es, x + (size_t)(off + k * istep) * es, es);
        }
        for (int i = (int)nd_ - 2; i >= 0; i--) {
            off += ostr[i];
            if (++idx[i] < odim[i]) break;
            off -= idx[i] * ostr[i];
            idx[i] = 0;
        }
    }
}

int cpu_run_transpose(const cpu_run *r)
{
    const cpu_node *nd = r->nd;
    if (nd->rows == 0 || nd->cols == 0) return 0;
    if (nd->ndim == 0) {
        memcpy(r->vp[nd->out[0]], r->vp[nd->in[0]], nd->esize);
        return 0;
    }
    tr_job j = {r, cpu_chunk(nd->rows, 65536 / nd->cols + 1, 64, 1)};
    cpu_parallel(r, (nd->rows + j.chunk - 1) / j.chunk, transpose_task, &j);
    return 0;
}

/* ---------------------------------------------------------------- concat / slice / last_row */

static int norm_axis(const cpu_compile_ctx *c, int64_t axis, uint32_t ndim, int64_t *out)
{
    if (axis < 0) axis += ndim;
    if (axis < 0 || axis >= (int64_t)ndim) return cpu_bad(c, "axis %lld is outside the %u dims", (long long)axis, ndim);
    *out = axis;
    return 0;
}

static int64_t prod(const rlx_shape *s, uint32_t from, uint32_t to)
{
    int64_t p = 1;
    for (uint32_t i = from; i < to; i++) p *= s->dims[i];
    return p;
}

int cpu_prep_concat(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 2, 2, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *a = cpu_val(c, 0), *b = cpu_val(c, 1), *o = cpu_out(c, 0);
    if (same_dtype_out(c, nd, a)) return RLX_ERR_INVALID;
    if (b->dtype != a->dtype) return cpu_bad(c, "a and b differ in dtype");
    int64_t axis;
    if (cpu_attr_int(c, "axis", 0, &axis) || norm_axis(c, axis, a->shape.ndim, &axis)) return RLX_ERR_INVALID;
    if (b->shape.ndim != a->shape.ndim || o->shape.ndim != a->shape.ndim)
        return cpu_bad(c, "a, b and the output must have the same number of dims");
    for (uint32_t i = 0; i < a->shape.ndim; i++) {
        int64_t want = (int64_t)i == axis ? a->shape.dims[i] + b->shape.dims[i] : a->shape.dims[i];
        if (((int64_t)i != axis && b->shape.dims[i] != a->shape.dims[i]) || o->shape.dims[i] != want)
            return cpu_bad(c, "shapes disagree on dim %u", i);
    }
    nd->inner = prod(&a->shape, (uint32_t)axis + 1, a->shape.ndim);
    nd->outer = prod(&a->shape, 0, (uint32_t)axis);
    nd->a_ax = a->shape.dims[axis] * nd->inner;
    nd->b_ax = b->shape.dims[axis] * nd->inner;
    return 0;
}

int cpu_run_concat(const cpu_run *r)
{
    const cpu_node *nd = r->nd;
    size_t es = nd->esize, ab = (size_t)nd->a_ax * es, bb = (size_t)nd->b_ax * es;
    const char *a = r->vp[nd->in[0]], *b = r->vp[nd->in[1]];
    char *o = r->vp[nd->out[0]];
    for (int64_t i = 0; i < nd->outer; i++) {
        memcpy(o + (size_t)i * (ab + bb), a + (size_t)i * ab, ab);
        memcpy(o + (size_t)i * (ab + bb) + ab, b + (size_t)i * bb, bb);
    }
    return 0;
}

int cpu_prep_slice(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 1, 1, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *x = cpu_val(c, 0), *o = cpu_out(c, 0);
    if (same_dtype_out(c, nd, x)) return RLX_ERR_INVALID;
    int64_t axis, start, end;
    if (cpu_attr_int(c, "axis", 0, &axis) || norm_axis(c, axis, x->shape.ndim, &axis) ||
        cpu_attr_int(c, "start", 0, &start) || cpu_attr_int(c, "end", x->shape.dims[axis], &end))
        return RLX_ERR_INVALID;
    int64_t dim = x->shape.dims[axis];
    if (start < 0) start += dim;
    if (end < 0) end += dim;
    if (start < 0 || end > dim || start > end)
        return cpu_bad(c, "range [%lld, %lld) is outside dim %lld of size %lld", (long long)start,
                       (long long)end, (long long)axis, (long long)dim);
    if (o->shape.ndim != x->shape.ndim) return cpu_bad(c, "output must have x's dims");
    for (uint32_t i = 0; i < x->shape.ndim; i++)
        if (o->shape.dims[i] != ((int64_t)i == axis ? end - start : x->shape.dims[i]))
            return cpu_bad(c, "output dim %u has the wrong size", i);
    nd->inner = prod(&x->shape, (uint32_t)axis + 1, x->shape.ndim);
    nd->outer = prod(&x->shape, 0, (uint32_t)axis);
    nd->a_ax = dim * nd->inner;            /* input elements per outer index */
    nd->b_ax = (end - start) * nd->inner;  /* output elements per outer index */
    nd->start = start * nd->inner;
    return 0;
}

int cpu_run_slice(const cpu_run *r)
{
    const cpu_node *nd = r->nd;
    size_t es = nd->esize;
    const char *x = r->vp[nd->in[0]];
    char *o = r->vp[nd->out[0]];
    for (int64_t i = 0; i < nd->outer; i++)
        memcpy(o + (size_t)(i * nd->b_ax) * es, x + (size_t)(i * nd->a_ax + nd->start) * es,
               (size_t)nd->b_ax * es);
    return 0;
}

int cpu_prep_last_row(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 1, 2, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *x = cpu_val(c, 0), *o = cpu_out(c, 0);
    if (same_dtype_out(c, nd, x)) return RLX_ERR_INVALID;
    if (x->shape.ndim < 2) return cpu_bad(c, "x must be [T, H]");
    nd->T = x->shape.dims[x->shape.ndim - 2];
    nd->inner = x->shape.dims[x->shape.ndim - 1];
    nd->outer = prod(&x->shape, 0, x->shape.ndim - 2);
    if (nd->T < 1) return cpu_bad(c, "x has no rows");
    if (c->node->n_inputs == 2 && (cpu_val(c, 1)->dtype != RLX_I32 || nd->outer != 1))
        return cpu_bad(c, "row must be one i32 and x [T, H]");
    if (cpu_numel(&o->shape) != nd->outer * nd->inner)
        return cpu_bad(c, "output must be [1, %lld]", (long long)nd->inner);
    return 0;
}

int cpu_run_last_row(const cpu_run *r)
{
    const cpu_node *nd = r->nd;
    size_t row = (size_t)nd->inner * nd->esize;
    const char *x = r->vp[nd->in[0]];
    char *o = r->vp[nd->out[0]];
    int64_t t = nd->T - 1;
    if (nd->n_in == 2) {
        t = *(const int32_t *)r->vp[nd->in[1]];
        if (t < 0 || t >= nd->T)
            return cpu_fail(r->d, RLX_ERR_INVALID, "cpu: node %u (rlx.last_row): row %lld is outside [0, %lld)",
                            nd->index, (long long)t, (long long)nd->T);
    }
    for (int64_t i = 0; i < nd->outer; i++)
        memcpy(o + (size_t)i * row, x + ((size_t)i * (size_t)nd->T + (size_t)t) * row, row);
    return 0;
}

/* ---------------------------------------------------------------- copy / cast */

int cpu_prep_copy(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 1, 1, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *x = cpu_val(c, 0);
    if (same_dtype_out(c, nd, x)) return RLX_ERR_INVALID;
    nd->cols = cpu_numel(&x->shape);
    if (cpu_numel(&cpu_out(c, 0)->shape) != nd->cols) return cpu_bad(c, "output must have x's shape");
    return 0;
}

int cpu_run_copy(const cpu_run *r)
{
    copy_bytes(r, r->vp[r->nd->out[0]], r->vp[r->nd->in[0]], (size_t)r->nd->cols * r->nd->esize);
    return 0;
}

static int is_float(int dt)
{
    return dt == RLX_F32 || dt == RLX_F16 || dt == RLX_BF16;
}

int cpu_prep_cast(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 1, 1, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *x = cpu_val(c, 0), *o = cpu_out(c, 0);
    int64_t dt;
    if (cpu_attr_int(c, "dtype", o->dtype, &dt)) return RLX_ERR_INVALID;
    if (dt != o->dtype) return cpu_bad(c, "attribute dtype %lld differs from the output's dtype %d",
                                       (long long)dt, o->dtype);
    if (!cpu_dtype_size(x->dtype) || x->dtype >= RLX_DTYPE_COUNT) return cpu_bad(c, "unknown input dtype %d", x->dtype);
    if (!cpu_dtype_size(o->dtype) || o->dtype >= RLX_DTYPE_COUNT) return cpu_bad(c, "unknown output dtype %d", o->dtype);
    nd->in_dtype = x->dtype;
    nd->out_dtype = o->dtype;
    nd->cols = cpu_numel(&x->shape);
    if (cpu_numel(&o->shape) != nd->cols) return cpu_bad(c, "output must have x's shape");
    return 0;
}

static float load_f(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case RLX_F16:
    case RLX_BF16: return cpu_h_load(dt, ((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static int64_t load_i(const void *p, int dt, int64_t i)
{
    switch (dt) {
    case RLX_I64: return ((const int64_t *)p)[i];
    case RLX_U8: return ((const uint8_t *)p)[i];
    default: return ((const int32_t *)p)[i];
    }
}

/* float -> int: truncation toward zero, saturating, NaN -> 0 */
static int64_t f_to_i(float f, int dt)
{
    if (f != f) return 0;
    double lo = dt == RLX_I64 ? -9223372036854775808.0 : dt == RLX_U8 ? 0.0 : -2147483648.0;
    double hi = dt == RLX_I64 ? 9223372036854775807.0 : dt == RLX_U8 ? 255.0 : 2147483647.0;
    if ((double)f <= lo) return dt == RLX_I64 ? INT64_MIN : (int64_t)lo;
    if ((double)f >= hi) return dt == RLX_I64 ? INT64_MAX : (int64_t)hi;
    return (int64_t)f;
}

static void store(void *p, int dt, int64_t i, int from_float, float f, int64_t v)
{
    switch (dt) {
    case RLX_F32: ((float *)p)[i] = from_float ? f : (float)v; break;
    case RLX_F16:
    case RLX_BF16: ((uint16_t *)p)[i] = cpu_h_store(dt, from_float ? f : (float)v); break;
    case RLX_I64: ((int64_t *)p)[i] = from_float ? f_to_i(f, dt) : v; break;
    case RLX_U8: ((uint8_t *)p)[i] = (uint8_t)(from_float ? f_to_i(f, dt) : v); break;
    default: ((int32_t *)p)[i] = (int32_t)(uint32_t)(from_float ? f_to_i(f, dt) : v); break;
    }
}

typedef struct cast_job {
    const cpu_run *r;
    int64_t chunk;
} cast_job;

static void cast_task(void *arg, int64_t t, int worker)
{
    cast_job *j = arg;
    const cpu_node *nd = j->r->nd;
    const void *x = j->r->vp[nd->in[0]];
    void *o = j->r->vp[nd->out[0]];
    int64_t lo = t * j->chunk, hi = lo + j->chunk < nd->cols ? lo + j->chunk : nd->cols;
    int ff = is_float(nd->in_dtype), in = nd->in_dtype, out = nd->out_dtype;
    const cpu_isa *isa = j->r->be->isa;
    if (out == RLX_F32 && (in == RLX_F16 || in == RLX_BF16)) { /* the ISA's loops: same values */
        isa->h_to_f32(in, (const uint16_t *)x + lo, (float *)o + lo, hi - lo);
        return;
    }
    if (in == RLX_F32 && (out == RLX_F16 || out == RLX_BF16)) {
        isa->f32_to_h(out, (const float *)x + lo, (uint16_t *)o + lo, hi - lo);
        return;
    }
    for (int64_t i = lo; i < hi; i++) {
        if (ff) store(o, nd->out_dtype, i, 1, load_f(x, nd->in_dtype, i), 0);
        else store(o, nd->out_dtype, i, 0, 0.0f, load_i(x, nd->in_dtype, i));
    }
}

int cpu_run_cast(const cpu_run *r)
{
    if (r->nd->cols == 0) return 0;
    cast_job j = {r, cpu_chunk(r->nd->cols, 16384, 64, 64)};
    cpu_parallel(r, (r->nd->cols + j.chunk - 1) / j.chunk, cast_task, &j);
    return 0;
}
