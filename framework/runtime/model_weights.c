/* Model weights as the backend reads them: looked up by Hugging Face name, checked
 * against the expected shape, bound in the dtype the compiled program asks for (f32, f16
 * or bf16): used in place when stored so and the backend reads host memory, else
 * converted once; uploaded once when the backend does not read host memory. */
#include "runtime/model.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

rg_build_env rg_model_build_env(const rlx_model *m, int phase)
{
    rg_build_env env = {.cfg = &m->cfg, .config = m->config, .weights = m->weights, .registry = m->registry,
                        .policy = m->policy[phase == RLX_PHASE_DECODE ? 1 : 0]};
    return env;
}

/* Host memory for a converted weight. A large one is mapped and populated in one call
 * (huge pages from 2 MiB): faulting it in page by page costs more than the conversion
 * itself on a virtual machine, and a small model is a few thousand such pages. */
static void *owned_alloc(size_t bytes, size_t *map_len)
{
    *map_len = 0;
    if (bytes < (256u << 10)) return malloc(bytes ? bytes : 4);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return NULL;
    if (bytes >= (2u << 20)) madvise(p, bytes, MADV_HUGEPAGE); /* hints: fine if refused */
#ifdef MADV_POPULATE_WRITE
    madvise(p, bytes, MADV_POPULATE_WRITE);
#endif
    *map_len = bytes;
    return p;
}

#define SLAB_ALIGN ((size_t)2 << 20) /* a huge page */

/* The weight slab: room for every checkpoint tensor in f32, reserved (not committed) in one
 * mapping aligned to a huge page. Converted weights are packed into it, so a model's
 * many small tensors share huge pages instead of each faulting in its own 4 KiB pages (on
 * a virtual machine the first touch of a page costs more than converting its data). */
static void slab_open(rlx_model *m)
{
    m->slab_tried = 1;
    size_t len = 0;
    for (size_t i = 0; m->weights && i < rlx_weights_count(m->weights); i++) {
        int64_t n = rlx_shape_numel(&rlx_weights_at(m->weights, i)->shape);
        if (n < 0 || (uint64_t)n > (SIZE_MAX >> 3) / 4) return;
        len += ((size_t)n * 4 + 63) & ~(size_t)63;
        if (len > (SIZE_MAX >> 2)) return;
    }
    len = (len + SLAB_ALIGN - 1) & ~(SLAB_ALIGN - 1);
    if (!len) return;
    char *p = mmap(NULL, len + SLAB_ALIGN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) return; /* each weight gets its own memory, as before */
    char *a = (char *)(((uintptr_t)p + SLAB_ALIGN - 1) & ~(uintptr_t)(SLAB_ALIGN - 1));
    if (a > p) munmap(p, (size_t)(a - p));
    if (a + len < p + len + SLAB_ALIGN) munmap(a + len, (size_t)(p + len + SLAB_ALIGN - (a + len)));
    madvise(a, len, MADV_HUGEPAGE); /* a hint: fine if refused */
    m->slab = a;
    m->slab_len = len;
    m->slab_used = 0;
}

#if defined(__SANITIZE_ADDRESS__)
#define SLAB_OFF 1 /* AddressSanitizer sees a read past a weight only in its own allocation */
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SLAB_OFF 1
#endif
#endif

/* bytes from the slab (64-byte aligned), populated in one call; NULL when it has no room */
static void *slab_alloc(rlx_model *m, size_t bytes)
{
#ifdef SLAB_OFF
    m->slab_tried = 1;
#endif
    if (!m->slab_tried) slab_open(m);
    size_t need = (bytes + 63) & ~(size_t)63;
    if (!m->slab || need > m->slab_len - m->slab_used) return NULL;
    char *p = m->slab + m->slab_used;
    m->slab_used += need;
#ifdef MADV_POPULATE_WRITE
    uintptr_t lo = (uintptr_t)p & ~(uintptr_t)4095, hi = ((uintptr_t)p + need + 4095) & ~(uintptr_t)4095;
    madvise((void *)lo, (size_t)(hi - lo), MADV_POPULATE_WRITE);
#endif
    return p;
}

/* A conversion's host memory, checked against MemAvailable read once and counted down
 * (a /proc/meminfo read per tensor was ~20 µs, hundreds of tensors): read again when
 * the count would not cover this one, so a refusal is always a fresh reading's. */
static int conv_mem_check(rlx_model *m, const char *what, uint64_t bytes, rlx_diag *d)
{
    if (bytes > m->conv_avail) {
        m->conv_avail = rlx__mem_available();
        if (bytes > m->conv_avail) return rlx__mem_check(what, bytes, d);
    }
    m->conv_avail -= bytes;
    return 0;
}

static void owned_free(rg_weight *w)
{
    if (w->in_slab) { /* the slab is unmapped with the model */
    } else if (w->owned_map) {
        munmap(w->owned, w->owned_map);
    } else {
        free(w->owned);
    }
    w->owned = NULL;
    w->owned_map = 0;
    w->in_slab = 0;
}

void rg_model_weight_block(rlx_model *m, size_t bytes)
{
    m->blk_cur = m->blk_end = NULL;
    void **nb = bytes ? realloc(m->blocks, (m->n_blocks + 1) * sizeof *nb) : NULL;
    if (!nb) return;
    m->blocks = nb;
    rlx_diag quiet; /* a refusal only means one allocation a weight, as without blocks */
    rlx_diag_init(&quiet);
    char *p = m->be->alloc(m->be_ctx, bytes, &quiet);
    if (!p) return;
    m->blocks[m->n_blocks++] = p;
    m->blk_cur = p;
    m->blk_end = p + bytes;
}

static int upload(rlx_model *m, rg_weight *w, const void *src, size_t bytes, rlx_diag *d)
{
    size_t need = (bytes + RG_WEIGHT_ALIGN - 1) & ~(RG_WEIGHT_ALIGN - 1);
    if (need && m->blk_cur && need <= (size_t)(m->blk_end - m->blk_cur)) {
        w->ptr = m->blk_cur;
        m->blk_cur += need;
        w->in_block = 1;
    } else {
        w->ptr = m->be->alloc(m->be_ctx, bytes ? bytes : 4, d);
    }
    if (!w->ptr) return d && d->code ? d->code : rlx_diag_set(d, RLX_ERR_DEVICE, "tensor %s: device allocation failed", w->name);
    w->device = 1;
    if (m->be->upload) return m->be->upload(m->be_ctx, w->ptr, src, bytes, d);
    if (bytes) memcpy(w->ptr, src, bytes); /* an empty tensor may have no source */
    return 0;
}

/* t's rows or columns [lo, hi) converted to dtype into dst: only the slice is read */
static int read_part(const rlx_tensor_info *t, int split, int64_t lo, int64_t hi, int dtype, void *dst,
                     rlx_diag *d)
{
    if (!split) return rlx_weights_read(t, dtype, dst, (size_t)rlx_shape_numel(&t->shape), d);
    size_t ses = rlx_dtype_size(t->dtype), des = rlx_dtype_size(dtype);
    int64_t rows = t->shape.dims[0], cols = t->shape.ndim > 1 ? rlx_shape_numel(&t->shape) / rows : 1;
    rlx_tensor_info part = *t;
    if (split == RG_SPLIT_ROWS) {
        part.shape.dims[0] = hi - lo;
        part.data = (const char *)t->data + (size_t)(lo * cols) * ses;
        part.nbytes = (size_t)((hi - lo) * cols) * ses;
        return rlx_weights_read(&part, dtype, dst, (size_t)((hi - lo) * cols), d);
    }
    part.shape = (rlx_shape){1, {hi - lo}};
    part.nbytes = (size_t)(hi - lo) * ses;
    for (int64_t r = 0; r < rows; r++) { /* one row's columns at a time */
        part.data = (const char *)t->data + (size_t)(r * cols + lo) * ses;
        int rc = rlx_weights_read(&part, dtype, (char *)dst + (size_t)(r * (hi - lo)) * des, (size_t)(hi - lo), d);
        if (rc) return rc;
    }
    return 0;
}

int rg_model_weight_as(rlx_model *m, const char *name, int dtype, const rg_weight **out, rlx_diag *d)
{
    return rg_model_weight_part(m, name, dtype, RG_SPLIT_NONE, 0, 0, out, d);
}

static int find_bound(const rlx_model *m, const char *name, int dtype, int split, int64_t lo, int64_t hi)
{
    for (uint32_t i = 0; i < m->n_w; i++)
        if (m->w[i].dtype == dtype && m->w[i].split == split && (!split || (m->w[i].lo == lo && m->w[i].hi == hi)) &&
            strcmp(m->w[i].name, name) == 0)
            return (int)i;
    return -1;
}

int rg_model_weight_bound(const rlx_model *m, const char *name, int dtype, int split, int64_t lo, int64_t hi)
{
    return find_bound(m, name, dtype, split, lo, hi) >= 0;
}

int rg_model_weight_part(rlx_model *m, const char *name, int dtype, int split, int64_t lo, int64_t hi,
                         const rg_weight **out, rlx_diag *d)
{
    *out = NULL;
    int at = find_bound(m, name, dtype, split, lo, hi);
    if (at >= 0) {
        *out = &m->w[at];
        return 0;
    }
    if (dtype != RLX_F32 && dtype != RLX_F16 && dtype != RLX_BF16)
        return rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "tensor %s: weights are bound as f32, f16 or bf16, not %s",
                            name, rlx_dtype_name(dtype));
    const rlx_tensor_info *t = m->weights ? rlx_weights_find(m->weights, name) : NULL;
    if (!t)
        return rlx_diag_set(d, RLX_ERR_NOT_FOUND, "tensor %s: not in the checkpoint (%s)", name,
                            rlx__weights_origin(m->weights, t));
    uint32_t axis = split == RG_SPLIT_COLS ? 1 : 0;
    if (split && (t->shape.ndim <= axis || lo < 0 || hi <= lo || hi > t->shape.dims[axis]))
        return rlx_diag_set(d, RLX_ERR_INVALID, "tensor %s: no %s [%lld, %lld) in it", name,
                            split == RG_SPLIT_COLS ? "columns" : "rows", (long long)lo, (long long)hi);
    rg_weight *nw = realloc(m->w, (m->n_w + 1) * sizeof *nw);
    if (!nw) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    m->w = nw;
    rg_weight *w = &m->w[m->n_w];
    memset(w, 0, sizeof *w);
    if (!(w->name = strdup(name))) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    w->shape = t->shape;
    if (split) w->shape.dims[axis] = hi - lo;
    w->dtype = dtype;
    w->split = split;
    w->lo = lo;
    w->hi = hi;
    size_t es = rlx_dtype_size(dtype);
    size_t numel = (size_t)rlx_shape_numel(&w->shape), bytes = numel * es;
    size_t skip = split == RG_SPLIT_ROWS ? (size_t)lo * (numel / (size_t)(hi - lo)) * es : 0;
    int host = (m->be->flags & RLX_BACKEND_HOST_MEMORY) != 0;
    int rc = 0;
    /* stored as bound (a row slice too): used in place (mmapped) or uploaded as is; else
     * converted once */
    if (t->dtype == dtype && ((uintptr_t)t->data % es) == 0 && split != RG_SPLIT_COLS &&
        (split ? skip + bytes <= t->nbytes : t->nbytes == bytes)) {
        const char *src = (const char *)t->data + skip;
        if (host) w->ptr = (void *)src;
        else rc = upload(m, w, src, bytes, d);
    } else {
        char what[600];
        snprintf(what, sizeof what, "tensor %s converted to %s", name, rlx_dtype_name(dtype));
        rc = conv_mem_check(m, what, bytes, d); /* a conversion is host memory before any upload */
        /* a host backend keeps the copy: packed into the slab (a device one frees it after upload) */
        if (!rc && host) w->in_slab = (w->owned = slab_alloc(m, bytes)) != NULL;
        if (!rc && !w->owned) w->owned = owned_alloc(bytes, &w->owned_map);
        if (!rc && !w->owned)
            rc = rlx_diag_set(d, RLX_ERR_NOMEM, "tensor %s: out of memory converting it to %s", name, rlx_dtype_name(dtype));
        if (!rc) rc = read_part(t, split, lo, hi, dtype, w->owned, d);
        if (!rc && host) w->ptr = w->owned;
        if (!rc && !host) {
            rc = upload(m, w, w->owned, bytes, d);
            owned_free(w);
        }
    }
    if (rc) {
        if (w->device && w->ptr && !w->in_block) m->be->free(m->be_ctx, w->ptr);
        owned_free(w);
        free(w->name);
        return rc;
    }
    m->n_w++;
    *out = w;
    if (m->progress) {
        if (!m->bytes_total)
            for (size_t i = 0; i < rlx_weights_count(m->weights); i++)
                m->bytes_total += rlx_weights_at(m->weights, i)->nbytes;
        m->bytes_loaded += split ? numel * rlx_dtype_size(t->dtype) : t->nbytes;
        if (m->bytes_loaded > m->bytes_total) m->bytes_loaded = m->bytes_total; /* a tensor bound in two dtypes */
        m->progress(m->progress_user, m->bytes_loaded, m->bytes_total);
    }
    return 0;
}

int rg_model_weight(rlx_model *m, const char *name, const rlx_shape *expect, int optional,
                    const rg_weight **out, rlx_diag *d)
{
    *out = NULL;
    const rlx_tensor_info *t = m->weights ? rlx_weights_find(m->weights, name) : NULL;
    if (!t && optional) return 0;
    char a[96], b[96];
    if (t && expect && !rg_shape_eq(expect, &t->shape))
        return rlx_diag_set(d, RLX_ERR_INVALID, "tensor %s: expected %s, found %s (%s)", name,
                            rlx_shape_str(expect, a, sizeof a), rlx_shape_str(&t->shape, b, sizeof b),
                            rlx__weights_origin(m->weights, t));
    return rg_model_weight_as(m, name, RLX_F32, out, d);
}

void rg_model_free_weights(rlx_model *m)
{
    for (uint32_t i = 0; i < m->n_w; i++) {
        if (m->w[i].device && !m->w[i].in_block && m->be && m->be->free) m->be->free(m->be_ctx, m->w[i].ptr);
        owned_free(&m->w[i]);
        free(m->w[i].name);
    }
    free(m->w);
    m->w = NULL;
    m->n_w = 0;
    for (uint32_t i = 0; i < m->n_blocks; i++)
        if (m->be && m->be->free) m->be->free(m->be_ctx, m->blocks[i]);
    free(m->blocks);
    m->blocks = NULL;
    m->n_blocks = 0;
    m->blk_cur = m->blk_end = NULL;
    if (m->slab) munmap(m->slab, m->slab_len);
    m->slab = NULL;
    m->slab_len = m->slab_used = 0;
    m->slab_tried = 0;
}
