/* safetensors writer: tensors are collected in memory and written in insertion order,
 * header padded with spaces to a multiple of 8 so every tensor stays aligned. */
#include "base/internal.h"
#include <errno.h>
#include <jansson.h>
#include <unistd.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct st_entry {
    char *name;
    int dtype;
    rlx_shape shape;
    void *data;
    size_t nbytes;
} st_entry;

struct rlx_st_writer {
    st_entry *e;
    size_t n, cap;
};

RLX_API rlx_st_writer *rlx_st_writer_new(void) { return calloc(1, sizeof(rlx_st_writer)); }

RLX_API void rlx_st_writer_free(rlx_st_writer *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) {
        free(w->e[i].name);
        free(w->e[i].data);
    }
    free(w->e);
    free(w);
}

RLX_API int rlx_st_writer_add(rlx_st_writer *w, const char *name, int dtype, const rlx_shape *shape,
                              const void *data, rlx_diag *d)
{
    if (!w || !name || !shape)
        return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_st_writer_add: NULL argument");
    if (!*name || strcmp(name, "__metadata__") == 0)
        return rlx_diag_set(d, RLX_ERR_INVALID, "safetensors writer: invalid tensor name '%s'", name);
    if (rlx_dtype_size(dtype) == 0)
        return rlx_diag_set(d, RLX_ERR_INVALID, "safetensors writer: tensor '%s': unknown dtype %d",
                            name, dtype);
    if (shape->ndim > RLX_MAX_DIMS)
        return rlx_diag_set(d, RLX_ERR_INVALID, "safetensors writer: tensor '%s': %u dimensions",
                            name, shape->ndim);
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->e[i].name, name) == 0)
            return rlx_diag_set(d, RLX_ERR_INVALID, "safetensors writer: tensor '%s' added twice",
                                name);
    int64_t numel = rlx_shape_numel(shape);
    size_t nbytes;
    if (numel < 0 || __builtin_mul_overflow((size_t)numel, rlx_dtype_size(dtype), &nbytes))
        return rlx_diag_set(d, RLX_ERR_INVALID, "safetensors writer: tensor '%s': bad shape", name);
    if (nbytes && !data)
        return rlx_diag_set(d, RLX_ERR_INVALID, "safetensors writer: tensor '%s': no data", name);
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 16;
        st_entry *e = realloc(w->e, cap * sizeof *e);
        if (!e) return rlx_diag_set(d, RLX_ERR_NOMEM, "safetensors writer: out of memory");
        w->e = e;
        w->cap = cap;
    }
    st_entry *e = &w->e[w->n];
    memset(e, 0, sizeof *e);
    e->name = malloc(strlen(name) + 1);
    e->data = malloc(nbytes ? nbytes : 1);
    if (!e->name || !e->data) {
        free(e->name);
        free(e->data);
        return rlx_diag_set(d, RLX_ERR_NOMEM, "safetensors writer: out of memory");
    }
    strcpy(e->name, name);
    if (nbytes) memcpy(e->data, data, nbytes);
    e->dtype = dtype;
    e->shape = *shape;
    e->nbytes = nbytes;
    w->n++;
    return RLX_OK;
}

static char *build_header(const rlx_st_writer *w)
{
    json_t *root = json_object();
    json_object_set_new(root, "__metadata__", json_pack("{s:s}", "format", "pt"));
    uint64_t off = 0;
    for (size_t i = 0; i < w->n; i++) {
        const st_entry *e = &w->e[i];
        json_t *shape = json_array();
        for (uint32_t k = 0; k < e->shape.ndim; k++)
            json_array_append_new(shape, json_integer(e->shape.dims[k]));
        json_t *t = json_pack("{s:s,s:o,s:[I,I]}", "dtype", rlx_dtype_name(e->dtype), "shape", shape,
                              "data_offsets", (json_int_t)off, (json_int_t)(off + e->nbytes));
        if (!t || json_object_set_new(root, e->name, t) != 0) {
            json_decref(root);
            return NULL;
        }
        off += e->nbytes;
    }
    char *s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(root);
    return s;
}

/* Written to a temp file beside path, flushed, fsync'ed and renamed over it: a failure
 * at any point leaves the previous file as it was and no partial file behind. */
RLX_API int rlx_st_writer_save(rlx_st_writer *w, const char *path, rlx_diag *d)
{
    if (!w || !path) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_st_writer_save: NULL argument");
    char tmp[4096];
    const char *slash = strrchr(path, '/');
    int dl = slash ? (int)(slash - path + 1) : 0;
    if (snprintf(tmp, sizeof tmp, "%.*s.%s.tmp-XXXXXX", dl, path, slash ? slash + 1 : path) >=
        (int)sizeof tmp)
        return rlx_diag_set(d, RLX_ERR_INVALID, "%s: path too long", path);
    char *hdr = build_header(w);
    if (!hdr) return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: cannot build the header", path);
    size_t hl = strlen(hdr), padded = (hl + 7) & ~(size_t)7;
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int err = errno;
        free(hdr);
        return rlx_diag_set(d, RLX_ERR_IO, "%s: cannot create a temp file beside it: %s", path,
                            strerror(err));
    }
    mode_t um = umask(0);
    umask(um);
    fchmod(fd, 0666 & ~um); /* what fopen would have made */
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        int err = errno;
        close(fd);
        unlink(tmp);
        free(hdr);
        return rlx_diag_set(d, RLX_ERR_IO, "%s: %s", path, strerror(err));
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(hdr, 1, hl, f) == hl;
    for (size_t i = hl; ok && i < padded; i++) ok = fputc(' ', f) != EOF;
    for (size_t i = 0; ok && i < w->n; i++)
        ok = w->e[i].nbytes == 0 || fwrite(w->e[i].data, 1, w->e[i].nbytes, f) == w->e[i].nbytes;
    free(hdr);
    int err = ok ? 0 : errno;
    if (ok && (fflush(f) != 0 || fsync(fileno(f)) != 0)) ok = 0, err = errno;
    if (fclose(f) != 0 && ok) ok = 0, err = errno;
    if (ok && rename(tmp, path) != 0) ok = 0, err = errno;
    if (!ok) {
        unlink(tmp);
        return rlx_diag_set(d, RLX_ERR_IO, "%s: write failed: %s", path,
                            err ? strerror(err) : "short write");
    }
    return RLX_OK;
}
