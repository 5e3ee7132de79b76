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
    rg_build_env env = {&m->cfg, m->config, m->weights, m->registry,
                        m->policy[phase == RLX_PHASE_DECODE ? 1 : 0], NULL, NULL};
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

static void owned_free(rg_weight *w)
{
    if (w->owned_map) munmap(w->owned, w->owned_map);
    else free(w->owned);
    w->owned = NULL;
    w->owned_map = 0;
}

static int upload(rlx_model *m, rg_weight *w, const void *src, size_t bytes, rlx_diag *d)
{
    w->ptr = m->be->alloc(m->be_ctx, bytes ? bytes : 4, d);
    if (!w->ptr) return d && d->code ? d->code : rlx_diag_set(d, RLX_ERR_DEVICE, "tensor %s: device allocation failed", w->name);
    w->device = 1;
    if (m->be->upload) return m->be->upload(m->be_ctx, w->ptr, src, bytes, d);
    memcpy(w->ptr, src, bytes);
    return 0;
}

int rg_model_weight_as(rlx_model *m, const char *name, int dtype, const rg_weight **out, rlx_diag *d)
{
    *out = NULL;
    for (uint32_t i = 0; i < m->n_w; i++)
        if (m->w[i].dtype == dtype && strcmp(m->w[i].name, name) == 0) {
            *out = &m->w[i];
            return 0;
        }
    if (dtype != RLX_F32 && dtype != RLX_F16 && dtype != RLX_BF16)
        return rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "tensor %s: weights are bound as f32, f16 or bf16, not %s",
                            name, rlx_dtype_name(dtype));
    const rlx_tensor_info *t = m->weights ? rlx_weights_find(m->weights, name) : NULL;
    if (!t)
        return rlx_diag_set(d, RLX_ERR_NOT_FOUND, "tensor %s: not in the checkpoint (%s)", name,
                            rlx__weights_origin(m->weights, t));
    rg_weight *nw = realloc(m->w, (m->n_w + 1) * sizeof *nw);
    if (!nw) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    m->w = nw;
    rg_weight *w = &m->w[m->n_w];
    memset(w, 0, sizeof *w);
    if (!(w->name = strdup(name))) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    w->shape = t->shape;
    w->dtype = dtype;
    size_t es = rlx_dtype_size(dtype);
    size_t numel = (size_t)rlx_shape_numel(&t->shape), bytes = numel * es;
    int host = (m->be->flags & RLX_BACKEND_HOST_MEMORY) != 0;
    int rc = 0;
    /* stored as bound: used in place (mmapped) or uploaded as is; else converted once */
    if (t->dtype == dtype && ((uintptr_t)t->data % es) == 0 && t->nbytes == bytes) {
        if (host) w->ptr = (void *)t->data;
        else rc = upload(m, w, t->data, bytes, d);
    } else {
        char what[600];
        snprintf(what, sizeof what, "tensor %s converted to %s", name, rlx_dtype_name(dtype));
        rc = rlx__mem_check(what, bytes, d); /* a conversion is host memory before any upload */
        if (!rc) w->owned = owned_alloc(bytes, &w->owned_map);
        if (!rc && !w->owned)
            rc = rlx_diag_set(d, RLX_ERR_NOMEM, "tensor %s: out of memory converting it to %s", name, rlx_dtype_name(dtype));
        if (!rc) rc = rlx_weights_read(t, dtype, w->owned, numel, d);
        if (!rc && host) w->ptr = w->owned;
        if (!rc && !host) {
            rc = upload(m, w, w->owned, bytes, d);
            owned_free(w);
        }
    }
    if (rc) {
        if (w->device && w->ptr) m->be->free(m->be_ctx, w->ptr);
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
        m->bytes_loaded += t->nbytes;
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
        if (m->w[i].device && m->be && m->be->free) m->be->free(m->be_ctx, m->w[i].ptr);
        owned_free(&m->w[i]);
        free(m->w[i].name);
    }
    free(m->w);
    m->w = NULL;
    m->n_w = 0;
}
