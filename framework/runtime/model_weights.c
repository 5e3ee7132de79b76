/* Model weights as the backend reads them: looked up by Hugging Face name, checked
 * against the expected shape, bound in the dtype the compiled program asks for (f32, f16
 * or bf16): used in place when stored so and the backend reads host memory, else
 * converted once; uploaded once when the backend does not read host memory. */
#include "runtime/model.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int file_exists(const char *dir, const char *name)
{
    char p[4096];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &st) == 0;
}

const char *rg_weight_origin(rlx_model *m, const char *name)
{
    if (!m->dir) return "weights";
    if (file_exists(m->dir, "model.safetensors.index.json")) {
        if (!m->weight_map) {
            char p[4096];
            snprintf(p, sizeof p, "%s/model.safetensors.index.json", m->dir);
            json_t *j = json_load_file(p, 0, NULL);
            json_t *wm = j ? json_object_get(j, "weight_map") : NULL;
            if (wm) m->weight_map = json_incref(wm);
            if (j) json_decref(j);
        }
        json_t *f = m->weight_map ? json_object_get(m->weight_map, name) : NULL;
        return f && json_is_string(f) ? json_string_value(f) : "model.safetensors.index.json";
    }
    if (file_exists(m->dir, "model.safetensors")) return "model.safetensors";
    if (file_exists(m->dir, "diffusion_pytorch_model.safetensors")) return "diffusion_pytorch_model.safetensors";
    return "weights";
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

/* the checkpoint tensor name, checked against *expect; NULL when optional and absent */
int rg_model_weight_info(rlx_model *m, const char *name, const rlx_shape *expect, int optional,
                         const rlx_tensor_info **out, rlx_diag *d)
{
    *out = NULL;
    const rlx_tensor_info *t = m->weights ? rlx_weights_find(m->weights, name) : NULL;
    if (!t) {
        if (optional) return 0;
        return rlx_diag_set(d, RLX_ERR_NOT_FOUND, "tensor %s: not in the checkpoint (%s)", name,
                            rg_weight_origin(m, name));
    }
    char a[96], b[96];
    if (expect && !rg_shape_eq(expect, &t->shape))
        return rlx_diag_set(d, RLX_ERR_INVALID, "tensor %s: expected %s, found %s (%s)", name,
                            rlx_shape_str(expect, a, sizeof a), rlx_shape_str(&t->shape, b, sizeof b),
                            rg_weight_origin(m, name));
    *out = t;
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
    const rlx_tensor_info *t;
    int rc = rg_model_weight_info(m, name, NULL, 0, &t, d);
    if (rc) return rc;
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
    /* stored as bound: used in place (mmapped) or uploaded as is; else converted once */
    if (t->dtype == dtype && ((uintptr_t)t->data % es) == 0 && t->nbytes == bytes) {
        if (host) w->ptr = (void *)t->data;
        else rc = upload(m, w, t->data, bytes, d);
    } else {
        w->owned = malloc(bytes ? bytes : 4);
        if (!w->owned) rc = rlx_diag_set(d, RLX_ERR_NOMEM, "tensor %s: out of memory converting it to %s", name, rlx_dtype_name(dtype));
        if (!rc) rc = rlx_weights_read(t, dtype, w->owned, numel, d);
        if (!rc && host) w->ptr = w->owned;
        if (!rc && !host) {
            rc = upload(m, w, w->owned, bytes, d);
            free(w->owned);
            w->owned = NULL;
        }
    }
    if (rc) {
        if (w->device && w->ptr) m->be->free(m->be_ctx, w->ptr);
        free(w->owned);
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
        if (m->bytes_loaded > m->bytes_total) m->bytes_loaded = m->bytes_total;
        m->progress(m->progress_user, m->bytes_loaded, m->bytes_total);
    }
    return 0;
}

int rg_model_weight(rlx_model *m, const char *name, const rlx_shape *expect, int optional,
                    const rg_weight **out, rlx_diag *d)
{
    const rlx_tensor_info *t;
    *out = NULL;
    int rc = rg_model_weight_info(m, name, expect, optional, &t, d);
    if (rc || !t) return rc;
    return rg_model_weight_as(m, name, RLX_F32, out, d);
}

void rg_model_free_weights(rlx_model *m)
{
    for (uint32_t i = 0; i < m->n_w; i++) {
        if (m->w[i].device && m->be && m->be->free) m->be->free(m->be_ctx, m->w[i].ptr);
        free(m->w[i].owned);
        free(m->w[i].name);
    }
    free(m->w);
    m->w = NULL;
    m->n_w = 0;
    if (m->weight_map) json_decref(m->weight_map);
    m->weight_map = NULL;
}
