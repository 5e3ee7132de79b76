/* safetensors reader: files are mmapped and every header is validated in full before
 * any tensor is handed out; tensor data stays in the map (zero copies). */
#include "base/internal.h"
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct st_file {
    char *path;
    void *map; /* NULL when the image is not ours (rlx__st_parse) */
    size_t map_len;
} st_file;

struct rlx_weights {
    char *origin; /* what the caller opened */
    int indexed;  /* opened through a .safetensors.index.json */
    st_file *files;
    size_t n_files;
    rlx_tensor_info *t;
    uint32_t *t_file; /* file index of each tensor */
    size_t n, cap;
    size_t *by_name; /* tensor indices sorted by name */
};

/* ---------------------------------------------------------------- small helpers */

static char *xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

static char *path_join(const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    char *p = malloc(a + b + 2);
    if (!p) return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int push_tensor(rlx_weights *w, uint32_t file, rlx_diag *d)
{
    if (w->n == w->cap) {
        size_t cap = w->cap ? w->cap * 2 : 64;
        rlx_tensor_info *t = realloc(w->t, cap * sizeof *t);
        if (!t) return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", w->origin);
        w->t = t;
        uint32_t *tf = realloc(w->t_file, cap * sizeof *tf);
        if (!tf) return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", w->origin);
        w->t_file = tf;
        w->cap = cap;
    }
    memset(&w->t[w->n], 0, sizeof w->t[w->n]);
    w->t_file[w->n] = file;
    w->n++;
    return RLX_OK;
}

static int add_file(rlx_weights *w, const char *path, rlx_diag *d)
{
    st_file *f = realloc(w->files, (w->n_files + 1) * sizeof *f);
    if (!f) return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", path);
    w->files = f;
    memset(&f[w->n_files], 0, sizeof f[0]);
    f[w->n_files].path = xstrdup(path);
    if (!f[w->n_files].path) return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", path);
    w->n_files++;
    return RLX_OK;
}

static rlx_weights *weights_new(const char *origin)
{
    rlx_weights *w = calloc(1, sizeof *w);
    if (!w) return NULL;
    w->origin = xstrdup(origin);
    if (!w->origin) {
        free(w);
        return NULL;
    }
    return w;
}

/* ---------------------------------------------------------------- header validation */

typedef struct span {
    uint64_t begin, end;
    size_t tensor;
} span;

static int span_cmp(const void *a, const void *b)
{
    const span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int get_u64(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0) return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

static int parse_entry(rlx_weights *w, uint32_t file, const char *path, const char *name,
                       json_t *e, size_t data_len, const uint8_t *data, rlx_diag *d)
{
    if (!json_is_object(e))
        return rlx_diag_set(d, RLX_ERR_INVALID, "%s: tensor '%s': expected an object, got %s", path,
                            name, rlx__json_type_name(e));
    const char *key;
    json_t *v;
    json_object_foreach(e, key, v) {
        if (strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"))
            return rlx_diag_set(d, RLX_ERR_INVALID, "%s: tensor '%s': unknown key '%s'", path, name,
                                key);
    }
    json_t *jdt = json_object_get(e, "dtype"), *jsh = json_object_get(e, "shape"),
           *joff = json_object_get(e, "data_offsets");
    if (!json_is_string(jdt))
        return rlx_diag_set(d, RLX_ERR_INVALID, "%s: tensor '%s': dtype missing or not a string",
                            path, name);
    int dtype = rlx_dtype_from_name(json_string_value(jdt));
    if (dtype < 0)
        return rlx_diag_set(d, RLX_ERR_UNSUPPORTED,
                            "%s: tensor '%s': dtype %.16s is not supported (F32, F16, BF16, I32, I64, U8)",
                            path, name, json_string_value(jdt));
    if (!json_is_array(jsh))
        return rlx_diag_set(d, RLX_ERR_INVALID, "%s: tensor '%s': shape missing or not an array",
                            path, name);
    size_t ndim = json_array_size(jsh);
    if (ndim > RLX_MAX_DIMS)
        return rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "%s: tensor '%s': %zu dimensions, at most %d",
                            path, name, ndim, RLX_MAX_DIMS);
    rlx_shape shape;
    memset(&shape, 0, sizeof shape);
    shape.ndim = (uint32_t)ndim;
    size_t bytes = rlx_dtype_size(dtype);
    int overflow = 0;
    for (size_t i = 0; i < ndim; i++) {
        uint64_t dim;
        if (get_u64(json_array_get(jsh, i), &dim) != 0)
            return rlx_diag_set(d, RLX_ERR_INVALID,
                                "%s: tensor '%s': shape[%zu] is not a non-negative integer", path,
                                name, i);
        shape.dims[i] = (int64_t)dim;
        if (__builtin_mul_overflow(bytes, (size_t)dim, &bytes)) overflow = 1;
    }
    if (!json_is_array(joff) || json_array_size(joff) != 2)
        return rlx_diag_set(d, RLX_ERR_INVALID,
                            "%s: tensor '%s': data_offsets missing or not [begin, end]", path, name);
    uint64_t begin, end;
    if (get_u64(json_array_get(joff, 0), &begin) || get_u64(json_array_get(joff, 1), &end) ||
        begin > end)
        return rlx_diag_set(d, RLX_ERR_INVALID,
                            "%s: tensor '%s': data_offsets must be two integers 0 <= begin <= end",
                            path, name);
    char sb[160];
    if (overflow)
        return rlx_diag_set(d, RLX_ERR_INVALID, "%s: tensor '%s': shape %s overflows the address space",
                            path, name, rlx_shape_str(&shape, sb, sizeof sb));
    if (end > data_len)
        return rlx_diag_set(d, RLX_ERR_INVALID,
                            "%s: tensor '%s': data_offsets [%llu, %llu] past the end of the data "
                            "section (%zu bytes)",
                            path, name, (unsigned long long)begin, (unsigned long long)end, data_len);
    if (end - begin != bytes)
        return rlx_diag_set(d, RLX_ERR_INVALID,
                            "%s: tensor '%s': %s %s needs %zu bytes, data_offsets give %llu", path,
                            name, rlx_dtype_name(dtype), rlx_shape_str(&shape, sb, sizeof sb), bytes,
                            (unsigned long long)(end - begin));
    int rc = push_tensor(w, file, d);
    if (rc) return rc;
    rlx_tensor_info *t = &w->t[w->n - 1];
    t->name = xstrdup(name);
    if (!t->name) return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", path);
    t->dtype = dtype;
    t->shape = shape;
    t->data = data + begin;
    t->nbytes = bytes;
    return RLX_OK;
}

static int check_metadata(const char *path, json_t *m, rlx_diag *d)
{
    if (!json_is_object(m))
        return rlx_diag_set(d, RLX_ERR_INVALID, "%s: __metadata__: expected an object, got %s", path,
                            rlx__json_type_name(m));
    const char *k;
    json_t *v;
    json_object_foreach(m, k, v) {
        if (!json_is_string(v))
            return rlx_diag_set(d, RLX_ERR_INVALID, "%s: __metadata__.%s: expected a string, got %s",
                                path, k, rlx__json_type_name(v));
    }
    return RLX_OK;
}

/* Validates one safetensors image and appends its tensors to w. */
static int parse_image(rlx_weights *w, uint32_t file, const uint8_t *buf, size_t len, rlx_diag *d)
{
    const char *path = w->files[file].path;
    if (len < 8)
        return rlx_diag_set(d, RLX_ERR_INVALID,
                            "%s: file is %zu bytes, too small for a safetensors header", path, len);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | buf[i];
    if (hlen > len - 8)
        return rlx_diag_set(d, RLX_ERR_INVALID,
                            "%s: header length %llu exceeds the file size (%zu bytes)", path,
                            (unsigned long long)hlen, len);
    if (hlen > RLX__MAX_JSON_FILE)
        return rlx_diag_set(d, RLX_ERR_INVALID, "%s: header length %llu exceeds the %u byte limit",
                            path, (unsigned long long)hlen, (unsigned)RLX__MAX_JSON_FILE);
    if (hlen < 2)
        return rlx_diag_set(d, RLX_ERR_INVALID, "%s: header length %llu is too short for a header",
                            path, (unsigned long long)hlen);
    json_t *root;
    char origin[4200];
    snprintf(origin, sizeof origin, "%s: header", path);
    int rc = rlx__json_parse((const char *)buf + 8, (size_t)hlen, origin, &root, d);
    if (rc) return rc;
    if (!json_is_object(root)) {
        rc = rlx_diag_set(d, RLX_ERR_INVALID, "%s: header: expected an object, got %s", path,
                          rlx__json_type_name(root));
        json_decref(root);
        return rc;
    }
    const uint8_t *data = buf + 8 + hlen;
    size_t data_len = len - 8 - (size_t)hlen;
    size_t first = w->n;
    const char *name;
    json_t *e;
    json_object_foreach(root, name, e) {
        if (strcmp(name, "__metadata__") == 0)
            rc = check_metadata(path, e, d);
        else
            rc = parse_entry(w, file, path, name, e, data_len, data, d);
        if (rc) break;
    }
    json_decref(root);
    if (rc) return rc;

    /* no two tensors of this file may share bytes */
    size_t n = w->n - first;
    if (n < 2) return RLX_OK;
    span *s = malloc(n * sizeof *s);
    if (!s) return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", path);
    size_t k = 0;
    for (size_t i = first; i < w->n; i++) {
        if (w->t[i].nbytes == 0) continue;
        uint64_t b = (uint64_t)((const uint8_t *)w->t[i].data - data);
        s[k++] = (span){b, b + w->t[i].nbytes, i};
    }
    qsort(s, k, sizeof *s, span_cmp);
    for (size_t i = 1; i < k; i++) {
        if (s[i].begin < s[i - 1].end) {
            rc = rlx_diag_set(d, RLX_ERR_INVALID,
                              "%s: tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap", path,
                              w->t[s[i - 1].tensor].name, (unsigned long long)s[i - 1].begin,
                              (unsigned long long)s[i - 1].end, w->t[s[i].tensor].name,
                              (unsigned long long)s[i].begin, (unsigned long long)s[i].end);
            break;
        }
    }
    free(s);
    return rc;
}

typedef struct name_ref {
    const char *name;
    size_t idx;
} name_ref;

static int name_cmp(const void *a, const void *b)
{
    return strcmp(((const name_ref *)a)->name, ((const name_ref *)b)->name);
}

/* Builds the name index; a name present twice (across shards) is an error. */
static int index_names(rlx_weights *w, rlx_diag *d)
{
    free(w->by_name);
    w->by_name = malloc((w->n ? w->n : 1) * sizeof *w->by_name);
    name_ref *r = malloc((w->n ? w->n : 1) * sizeof *r);
    if (!w->by_name || !r) {
        free(r);
        return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", w->origin);
    }
    for (size_t i = 0; i < w->n; i++) r[i] = (name_ref){w->t[i].name, i};
    qsort(r, w->n, sizeof *r, name_cmp);
    for (size_t i = 0; i < w->n; i++) w->by_name[i] = r[i].idx;
    free(r);
    for (size_t i = 1; i < w->n; i++) {
        const rlx_tensor_info *a = &w->t[w->by_name[i - 1]], *b = &w->t[w->by_name[i]];
        if (strcmp(a->name, b->name) == 0)
            return rlx_diag_set(d, RLX_ERR_INVALID, "%s: tensor '%s' is stored twice (%s and %s)",
                                w->origin, a->name, w->files[w->t_file[w->by_name[i - 1]]].path,
                                w->files[w->t_file[w->by_name[i]]].path);
    }
    return RLX_OK;
}

/* ---------------------------------------------------------------- opening */

static int map_file(rlx_weights *w, uint32_t file, rlx_diag *d)
{
    st_file *f = &w->files[file];
    int fd;
    struct stat st;
    int rc = rlx__open_regular(f->path, &fd, &st, d);
    if (rc) return rc;
    size_t len = (size_t)st.st_size;
    if (len < 8) {
        close(fd);
        return rlx_diag_set(d, RLX_ERR_INVALID,
                            "%s: file is %zu bytes, too small for a safetensors header", f->path, len);
    }
    void *m = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (m == MAP_FAILED) return rlx_diag_set(d, RLX_ERR_IO, "%s: mmap: %s", f->path, strerror(err));
    f->map = m;
    f->map_len = len;
    return parse_image(w, file, m, len, d);
}

static int open_single(rlx_weights *w, const char *path, rlx_diag *d)
{
    int rc = add_file(w, path, d);
    if (rc) return rc;
    return map_file(w, (uint32_t)(w->n_files - 1), d);
}

/* A shard name from an index must stay inside the index's folder. */
static int shard_name_ok(const char *s)
{
    return *s && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

static int open_index(rlx_weights *w, const char *index_path, rlx_diag *d)
{
    w->indexed = 1;
    char *buf;
    size_t len;
    int rc = rlx__read_small_file(index_path, RLX__MAX_JSON_FILE, &buf, &len, d);
    if (rc) return rc;
    json_t *root;
    rc = rlx__json_parse(buf, len, index_path, &root, d);
    free(buf);
    if (rc) return rc;
    json_t *map = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(map)) {
        json_decref(root);
        return rlx_diag_set(d, RLX_ERR_INVALID, "%s: weight_map: missing or not an object",
                            index_path);
    }
    char *dir = xstrdup(index_path);
    if (!dir) {
        json_decref(root);
        return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", index_path);
    }
    char *slash = strrchr(dir, '/');
    if (slash) *slash = 0;
    else strcpy(dir, ".");

    const char *name;
    json_t *v;
    /* first pass: check entries and open every distinct shard once */
    json_object_foreach(map, name, v) {
        if (!json_is_string(v) || !shard_name_ok(json_string_value(v))) {
            rc = rlx_diag_set(d, RLX_ERR_INVALID,
                              "%s: weight_map.%s: expected a shard file name in the same folder",
                              index_path, name);
            break;
        }
        char *sp = path_join(dir, json_string_value(v));
        if (!sp) {
            rc = rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", index_path);
            break;
        }
        int seen = 0;
        for (size_t i = 0; i < w->n_files && !seen; i++) seen = strcmp(w->files[i].path, sp) == 0;
        if (!seen) rc = open_single(w, sp, d);
        free(sp);
        if (rc) break;
    }
    if (!rc) rc = index_names(w, d);
    /* second pass: every listed tensor is in the shard the index names */
    if (!rc) {
        json_object_foreach(map, name, v) {
            const rlx_tensor_info *t = rlx_weights_find(w, name);
            if (!t) {
                rc = rlx_diag_set(d, RLX_ERR_NOT_FOUND, "%s: tensor '%s' is listed but not in %s",
                                  index_path, name, json_string_value(v));
                break;
            }
            const char *fp = w->files[w->t_file[t - w->t]].path;
            const char *base = strrchr(fp, '/');
            base = base ? base + 1 : fp;
            if (strcmp(base, json_string_value(v)) != 0) {
                rc = rlx_diag_set(d, RLX_ERR_INVALID, "%s: tensor '%s' is listed in %s but stored in %s",
                                  index_path, name, json_string_value(v), base);
                break;
            }
        }
    }
    free(dir);
    json_decref(root);
    return rc;
}

static int open_path(rlx_weights *w, const char *path, rlx_diag *d)
{
    if (is_dir(path)) {
        static const char *const candidates[] = {
            "model.safetensors.index.json", "model.safetensors",
            "diffusion_pytorch_model.safetensors.index.json", "diffusion_pytorch_model.safetensors"};
        for (size_t i = 0; i < sizeof candidates / sizeof candidates[0]; i++) {
            char *p = path_join(path, candidates[i]);
            if (!p) return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", path);
            struct stat lst;
            /* present in any form: open it and say precisely what is wrong with it */
            if (lstat(p, &lst) == 0) {
                int rc = ends_with(p, ".json") ? open_index(w, p, d) : open_single(w, p, d);
                free(p);
                return rc;
            }
            free(p);
        }
        return rlx_diag_set(d, RLX_ERR_NOT_FOUND,
                            "%s: no model.safetensors(.index.json) or "
                            "diffusion_pytorch_model.safetensors(.index.json) in this folder",
                            path);
    }
    if (ends_with(path, ".json")) return open_index(w, path, d);
    return open_single(w, path, d);
}

RLX_API int rlx_weights_open(const char *path, rlx_weights **out, rlx_diag *d)
{
    if (!out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_weights_open: out is NULL");
    *out = NULL;
    if (!path) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_weights_open: path is NULL");
    rlx_weights *w = weights_new(path);
    if (!w) return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", path);
    int rc = open_path(w, path, d);
    if (!rc && !w->by_name) rc = index_names(w, d);
    if (rc) {
        rlx_weights_close(w);
        return rc;
    }
    *out = w;
    return RLX_OK;
}

int rlx__st_parse(const void *buf, size_t len, const char *origin, rlx_weights **out, rlx_diag *d)
{
    *out = NULL;
    rlx_weights *w = weights_new(origin);
    if (!w) return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", origin);
    int rc = add_file(w, origin, d);
    if (!rc) rc = parse_image(w, 0, buf, len, d);
    if (!rc) rc = index_names(w, d);
    if (rc) {
        rlx_weights_close(w);
        return rc;
    }
    *out = w;
    return RLX_OK;
}

RLX_API void rlx_weights_close(rlx_weights *w)
{
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) free((char *)w->t[i].name);
    for (size_t i = 0; i < w->n_files; i++) {
        if (w->files[i].map) munmap(w->files[i].map, w->files[i].map_len);
        free(w->files[i].path);
    }
    free(w->files);
    free(w->t);
    free(w->t_file);
    free(w->by_name);
    free(w->origin);
    free(w);
}

/* ---------------------------------------------------------------- lookups */

RLX_API size_t rlx_weights_count(const rlx_weights *w) { return w ? w->n : 0; }

RLX_API const rlx_tensor_info *rlx_weights_at(const rlx_weights *w, size_t i)
{
    return w && i < w->n ? &w->t[i] : NULL;
}

RLX_API const rlx_tensor_info *rlx_weights_find(const rlx_weights *w, const char *name)
{
    if (!w || !name || !w->by_name) return NULL;
    size_t lo = 0, hi = w->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(w->t[w->by_name[mid]].name, name);
        if (c == 0) return &w->t[w->by_name[mid]];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

RLX_API const char *rlx_weights_file_of(const rlx_weights *w, const rlx_tensor_info *t)
{
    if (!w) return "";
    if (!t || t < w->t || t >= w->t + w->n) return w->origin;
    return w->files[w->t_file[t - w->t]].path;
}

static const char *base_name(const char *p)
{
    const char *s = strrchr(p, '/');
    return s ? s + 1 : p;
}

const char *rlx__weights_origin(const rlx_weights *w, const rlx_tensor_info *t)
{
    if (!w) return "weights";
    if (t && t >= w->t && t < w->t + w->n) return base_name(w->files[w->t_file[t - w->t]].path);
    if (w->indexed) return "model.safetensors.index.json";
    return w->n_files == 1 ? base_name(w->files[0].path) : base_name(w->origin);
}

RLX_API int rlx_weights_expect(const rlx_weights *w, const char *name, const rlx_shape *expect,
                               const rlx_tensor_info **out, rlx_diag *d)
{
    if (out) *out = NULL;
    const rlx_tensor_info *t = rlx_weights_find(w, name);
    char a[160], b[160];
    if (!t) {
        if (expect)
            return rlx_diag_set(d, RLX_ERR_NOT_FOUND, "%s: tensor '%s' not found (expected shape %s)",
                                w ? w->origin : "weights", name, rlx_shape_str(expect, a, sizeof a));
        return rlx_diag_set(d, RLX_ERR_NOT_FOUND, "%s: tensor '%s' not found",
                            w ? w->origin : "weights", name);
    }
    if (expect) {
        int same = expect->ndim == t->shape.ndim;
        for (uint32_t i = 0; same && i < expect->ndim && i < RLX_MAX_DIMS; i++)
            same = expect->dims[i] == t->shape.dims[i];
        if (!same)
            return rlx_diag_set(d, RLX_ERR_INVALID, "%s: tensor '%s': expected shape %s, found %s",
                                rlx_weights_file_of(w, t), name, rlx_shape_str(expect, a, sizeof a),
                                rlx_shape_str(&t->shape, b, sizeof b));
    }
    if (out) *out = t;
    return RLX_OK;
}

RLX_API int rlx_weights_tie(rlx_weights *w, const char *alias, const char *target, rlx_diag *d)
{
    if (!w || !alias || !target) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_weights_tie: no weights or names");
    const rlx_tensor_info *emb = rlx_weights_find(w, target);
    if (!emb)
        return rlx_diag_set(d, RLX_ERR_NOT_FOUND, "%s: tensor '%s' not found (tied to '%s')", w->origin, target,
                            alias);
    size_t ei = (size_t)(emb - w->t);
    char *name = xstrdup(alias);
    if (!name) return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", w->origin);
    /* HF ties after loading: a stored alias is replaced by the target */
    const rlx_tensor_info *head = rlx_weights_find(w, alias);
    size_t hi;
    if (head) {
        hi = (size_t)(head - w->t);
        free((char *)w->t[hi].name);
    } else {
        int rc = push_tensor(w, w->t_file[ei], d);
        if (rc) {
            free(name);
            return rc;
        }
        hi = w->n - 1;
    }
    w->t[hi] = w->t[ei];
    w->t_file[hi] = w->t_file[ei];
    w->t[hi].name = name;
    return index_names(w, d);
}

/* ---------------------------------------------------------------- conversion */

static int is_float(int dt) { return dt == RLX_F32 || dt == RLX_F16 || dt == RLX_BF16; }
static int is_int(int dt) { return dt == RLX_I32 || dt == RLX_I64 || dt == RLX_U8; }

static float load_f(const uint8_t *p, int dt)
{
    uint16_t h;
    float f;
    switch (dt) {
    case RLX_F16: memcpy(&h, p, 2); return rlx_f16_to_f32(h);
    case RLX_BF16: memcpy(&h, p, 2); return rlx_bf16_to_f32(h);
    default: memcpy(&f, p, 4); return f;
    }
}

static void store_f(uint8_t *p, int dt, float f)
{
    uint16_t h;
    switch (dt) {
    case RLX_F16: h = rlx_f32_to_f16(f); memcpy(p, &h, 2); break;
    case RLX_BF16: h = rlx_f32_to_bf16(f); memcpy(p, &h, 2); break;
    default: memcpy(p, &f, 4); break;
    }
}

static int64_t load_i(const uint8_t *p, int dt)
{
    int32_t a;
    int64_t b;
    switch (dt) {
    case RLX_I32: memcpy(&a, p, 4); return a;
    case RLX_I64: memcpy(&b, p, 8); return b;
    default: return *p;
    }
}

RLX_API int rlx_weights_read(const rlx_tensor_info *t, int dst_dtype, void *dst, size_t numel,
                             rlx_diag *d)
{
    if (!t || !dst) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_weights_read: NULL argument");
    int64_t n = rlx_shape_numel(&t->shape);
    if (n < 0 || (uint64_t)n != numel)
        return rlx_diag_set(d, RLX_ERR_INVALID, "tensor '%s': has %lld elements, caller expects %zu",
                            t->name, (long long)n, numel);
    int src = t->dtype;
    if (src == dst_dtype) {
        memcpy(dst, t->data, t->nbytes);
        return RLX_OK;
    }
    const uint8_t *s = t->data;
    uint8_t *o = dst;
    size_t ss = rlx_dtype_size(src), ds = rlx_dtype_size(dst_dtype);
    if (src == RLX_BF16 && dst_dtype == RLX_F32) { /* the common one at model load: a shift */
        for (size_t i = 0; i < numel; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            uint32_t u = (uint32_t)h << 16;
            memcpy(o + 4 * i, &u, 4);
        }
        return RLX_OK;
    }
    if (is_float(src) && is_float(dst_dtype)) {
        for (size_t i = 0; i < numel; i++) store_f(o + i * ds, dst_dtype, load_f(s + i * ss, src));
        return RLX_OK;
    }
    if (is_int(src) && (dst_dtype == RLX_I32 || dst_dtype == RLX_I64)) {
        for (size_t i = 0; i < numel; i++) {
            int64_t v = load_i(s + i * ss, src);
            if (dst_dtype == RLX_I64) {
                memcpy(o + i * 8, &v, 8);
            } else {
                if (v < INT32_MIN || v > INT32_MAX)
                    return rlx_diag_set(d, RLX_ERR_INVALID,
                                        "tensor '%s': element %zu (%lld) does not fit in I32", t->name,
                                        i, (long long)v);
                int32_t v32 = (int32_t)v;
                memcpy(o + i * 4, &v32, 4);
            }
        }
        return RLX_OK;
    }
    return rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "tensor '%s': cannot convert %s to %s", t->name,
                        rlx_dtype_name(src), rlx_dtype_name(dst_dtype));
}
