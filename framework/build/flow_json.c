/* Flows as JSON files (rlx-run --flow FILE.json):
 *   {"name": "...", "inputs": [{"name": "input_ids", "dtype": "I32", "shape": [-1]}],
 *    "stages": [ {"block": "token_embed", "params": {...}},
 *                {"repeat": 4 | "config:num_hidden_layers", "stages": [...]},
 *                {"when": "phase=decode" | "layer=0" | ..., "stages": [...]},
 *                {"sequence": [...]} ]}
 * Strict: an unknown key or a wrong type fails with the file and the JSON path.
 * rg_flow_to_json writes the same form back. */
#include "build/flow.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef struct jctx {
    const char *file;
    rlx_diag *d;
    int repeats; /* repeats around the items being loaded (layer conditions need one) */
} jctx;

/* path + suffix into dst (cut when too deep; paths are for messages only) */
static void join3(char *dst, size_t len, const char *path, const char *a, const char *b)
{
    if (snprintf(dst, len, "%s%s%s", path, a, b) >= (int)len) dst[len - 1] = 0;
}

static void join(char *dst, size_t len, const char *path, const char *suffix)
{
    join3(dst, len, path, suffix, "");
}

static int err(jctx *j, const char *path, const char *fmt, const char *a)
{
    char msg[512];
    snprintf(msg, sizeof msg, fmt, a);
    return rlx_diag_set(j->d, RLX_ERR_INVALID, "%s: %s: %s", j->file, path, msg);
}

static int want(jctx *j, const char *path, json_t *v, int ok, const char *what)
{
    if (ok) return 0;
    char m[128];
    if (v) snprintf(m, sizeof m, "expected %s, got %s", what, rlx__json_type_name(v));
    else snprintf(m, sizeof m, "missing (expected %s)", what);
    return err(j, path, "%s", m);
}

static int only_keys(jctx *j, const char *path, json_t *o, const char *const *keys)
{
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        int found = 0;
        for (const char *const *p = keys; *p; p++) found |= !strcmp(*p, k);
        if (!found) {
            char sub[512];
            join3(sub, sizeof sub, path, ".", k);
            return err(j, sub, "%s", "unknown key");
        }
    }
    return 0;
}

static int load_items(jctx *j, const char *path, json_t *arr, rlx_flow *f);

static int body_of(jctx *j, const char *path, json_t *o, const char *key, rlx_flow **out)
{
    char sub[512];
    join3(sub, sizeof sub, path, ".", key);
    json_t *arr = json_object_get(o, key);
    if (!arr) return err(j, sub, "%s", "missing (an array of stages)");
    *out = rlx_flow_new("body");
    if (!*out) return rlx_diag_set(j->d, RLX_ERR_NOMEM, "out of memory");
    int rc = load_items(j, sub, arr, *out);
    if (rc) {
        rlx_flow_free(*out);
        *out = NULL;
    }
    return rc;
}

static int load_item(jctx *j, const char *path, json_t *it, rlx_flow *f)
{
    char sub[512];
    int rc = want(j, path, it, json_is_object(it), "an object");
    if (rc) return rc;
    json_t *v;
    rlx_flow *body = NULL;
    if ((v = json_object_get(it, "block"))) {
        static const char *const keys[] = {"block", "params", NULL};
        join(sub, sizeof sub, path, ".block");
        if ((rc = only_keys(j, path, it, keys)) || (rc = want(j, sub, v, json_is_string(v), "a string")))
            return rc;
        json_t *p = json_object_get(it, "params");
        join(sub, sizeof sub, path, ".params");
        if (p && (rc = want(j, sub, p, json_is_object(p), "an object"))) return rc;
        return rg_flow_stage_json(f, json_string_value(v), p);
    }
    if ((v = json_object_get(it, "repeat"))) {
        static const char *const keys[] = {"repeat", "stages", NULL};
        join(sub, sizeof sub, path, ".repeat");
        if ((rc = only_keys(j, path, it, keys))) return rc;
        int is_key = json_is_string(v) && !strncmp(json_string_value(v), "config:", 7) && json_string_value(v)[7];
        if ((rc = want(j, sub, v, (json_is_integer(v) && json_integer_value(v) >= 0) || is_key,
                       "a count >= 0 or \"config:KEY\"")))
            return rc;
        if (json_is_integer(v) && json_integer_value(v) > RG_FLOW_MAX_REPEAT) {
            char m[128];
            snprintf(m, sizeof m, "%lld is more than %d, the most a flow repeats",
                     (long long)json_integer_value(v), RG_FLOW_MAX_REPEAT);
            return err(j, sub, "%s", m);
        }
        j->repeats++;
        rc = body_of(j, path, it, "stages", &body);
        j->repeats--;
        if (rc) return rc;
        /* the body built here is handed over, not copied (deep nesting stays linear) */
        return rg_flow_adopt(f, FI_REPEAT, NULL, is_key ? 0 : (int64_t)json_integer_value(v),
                             is_key ? json_string_value(v) + 7 : NULL, body);
    } else if ((v = json_object_get(it, "when"))) {
        static const char *const keys[] = {"when", "stages", NULL};
        join(sub, sizeof sub, path, ".when");
        if ((rc = only_keys(j, path, it, keys)) || (rc = want(j, sub, v, json_is_string(v), "a string")))
            return rc;
        rg_cond k;
        if (rg_flow_cond_parse(json_string_value(v), &k)) {
            char m[400];
            snprintf(m, sizeof m, "bad condition \"%.200s\" (%s)", json_string_value(v), RG_COND_FORMS);
            return err(j, sub, "%s", m);
        }
        if (k.kind == FC_LAYER && !j->repeats)
            return err(j, sub, "condition \"%s\" is outside any repeat (layer is the innermost repeat's index)",
                       json_string_value(v));
        if ((rc = body_of(j, path, it, "stages", &body))) return rc;
        return rg_flow_adopt(f, FI_WHEN, json_string_value(v), 0, NULL, body);
    } else if ((v = json_object_get(it, "sequence"))) {
        static const char *const keys[] = {"sequence", NULL};
        if ((rc = only_keys(j, path, it, keys)) || (rc = body_of(j, path, it, "sequence", &body))) return rc;
        return rg_flow_adopt(f, FI_SEQ, body->name, 0, NULL, body);
    }
    return err(j, path, "%s", "a stage needs one of block, repeat, when, sequence");
}

static int load_items(jctx *j, const char *path, json_t *arr, rlx_flow *f)
{
    int rc = want(j, path, arr, json_is_array(arr), "an array");
    size_t i;
    json_t *it;
    json_array_foreach(arr, i, it) {
        if (rc) break;
        char sub[512];
        char idx[32];
        snprintf(idx, sizeof idx, "[%zu]", i);
        join(sub, sizeof sub, path, idx);
        rc = load_item(j, sub, it, f);
    }
    return rc;
}

static int load_input(jctx *j, const char *path, json_t *in, rlx_flow *f)
{
    static const char *const keys[] = {"name", "dtype", "shape", NULL};
    char sub[512];
    int rc = want(j, path, in, json_is_object(in), "an object");
    if (!rc) rc = only_keys(j, path, in, keys);
    if (rc) return rc;
    json_t *n = json_object_get(in, "name"), *dt = json_object_get(in, "dtype"), *sh = json_object_get(in, "shape");
    join(sub, sizeof sub, path, ".name");
    if ((rc = want(j, sub, n, json_is_string(n), "a string"))) return rc;
    join(sub, sizeof sub, path, ".dtype");
    if ((rc = want(j, sub, dt, json_is_string(dt), "a string"))) return rc;
    int dtype = rlx_dtype_from_name(json_string_value(dt));
    if (dtype < 0) return err(j, sub, "unknown dtype \"%s\"", json_string_value(dt));
    join(sub, sizeof sub, path, ".shape");
    if ((rc = want(j, sub, sh, json_is_array(sh) && json_array_size(sh) <= RLX_MAX_DIMS,
                   "an array of at most 6 dims")))
        return rc;
    int64_t dims[RLX_MAX_DIMS];
    size_t i;
    json_t *x;
    json_array_foreach(sh, i, x) {
        char s2[600];
        char idx[32];
        snprintf(idx, sizeof idx, "[%zu]", i);
        join(s2, sizeof s2, sub, idx);
        if ((rc = want(j, s2, x, json_is_integer(x) && json_integer_value(x) >= -2,
                       "a dim >= 0, -1 (T) or -2 (S)")))
            return rc;
        dims[i] = (int64_t)json_integer_value(x);
    }
    rc = rlx_flow_input(f, json_string_value(n), dtype, (uint32_t)json_array_size(sh), dims);
    if (rc) return rlx_diag_set(j->d, rc, "%s: %s: %s", j->file, path, f->err);
    return 0;
}

RLX_API int rlx_flow_load_json(const char *path, rlx_flow **out, rlx_diag *d)
{
    if (!out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_flow_load_json: out is NULL");
    *out = NULL;
    if (!path) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_flow_load_json: path is NULL");
    char *buf = NULL;
    size_t len = 0;
    int rc = rlx__read_small_file(path, RLX__MAX_JSON_FILE, &buf, &len, d);
    if (rc) return rc;
    json_t *root = NULL;
    rc = rlx__json_parse(buf, len, path, &root, d);
    free(buf);
    if (rc) return rc;
    jctx j = {path, d, 0};
    static const char *const keys[] = {"name", "inputs", "stages", NULL};
    rlx_flow *f = NULL;
    rc = want(&j, "$", root, json_is_object(root), "an object");
    if (!rc) rc = only_keys(&j, "$", root, keys);
    json_t *name = rc ? NULL : json_object_get(root, "name");
    if (!rc && name) rc = want(&j, "$.name", name, json_is_string(name), "a string");
    if (!rc && !(f = rlx_flow_new(name ? json_string_value(name) : "flow")))
        rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    json_t *inputs = rc ? NULL : json_object_get(root, "inputs");
    if (!rc && inputs) {
        rc = want(&j, "$.inputs", inputs, json_is_array(inputs), "an array");
        size_t i;
        json_t *in;
        json_array_foreach(inputs, i, in) {
            if (rc) break;
            char sub[64];
            snprintf(sub, sizeof sub, "$.inputs[%zu]", i);
            rc = load_input(&j, sub, in, f);
        }
    }
    if (!rc) {
        json_t *stages = json_object_get(root, "stages");
        if (!stages) rc = err(&j, "$.stages", "%s", "missing (an array of stages)");
        else rc = load_items(&j, "$.stages", stages, f);
    }
    json_decref(root);
    if (!rc && f->err[0]) rc = rlx_diag_set(d, RLX_ERR_INVALID, "%s: %s", path, f->err);
    if (!rc && !(f->origin = strdup(path))) rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    if (rc) {
        rlx_flow_free(f);
        return rc;
    }
    *out = f;
    return 0;
}

/* ---------------------------------------------------------------- writing */

/* o[key] = v (taken); -1 when v is NULL (allocation failed, or a name not UTF-8) */
static int put(json_t *o, const char *key, json_t *v)
{
    return v ? json_object_set_new(o, key, v) : -1;
}

static json_t *items_json(const rlx_flow *f, const char *root, rlx_diag *d);

static json_t *item_json(const rg_flow_item *it, const char *root, rlx_diag *d)
{
    if (it->kind == FI_CUSTOM) {
        rlx_diag_set(d, RLX_ERR_UNSUPPORTED,
                     "flow %s: stage \"%s\" is a custom emitter (C code), which a JSON flow file cannot hold",
                     root, it->name);
        return NULL;
    }
    json_t *o = json_object();
    int rc = o ? 0 : -1;
    if (!rc && it->kind == FI_STAGE) {
        rc = put(o, "block", json_string(it->name));
        if (!rc && it->params && json_object_size(it->params)) rc = json_object_set(o, "params", it->params);
    } else if (!rc && it->kind == FI_REPEAT && it->n_key) {
        size_t n = strlen(it->n_key) + 8;
        char *k = malloc(n);
        if (k) snprintf(k, n, "config:%s", it->n_key);
        rc = put(o, "repeat", k ? json_string(k) : NULL);
        free(k);
    } else if (!rc && it->kind == FI_REPEAT) {
        rc = put(o, "repeat", json_integer((json_int_t)it->n));
    } else if (!rc && it->kind == FI_WHEN) {
        rc = put(o, "when", json_string(it->name));
    }
    if (!rc && it->body) {
        json_t *b = items_json(it->body, root, d);
        if (!b) {
            json_decref(o);
            return NULL;
        }
        rc = put(o, it->kind == FI_SEQ ? "sequence" : "stages", b);
    }
    if (rc) {
        json_decref(o);
        rlx_diag_set(d, RLX_ERR_NOMEM, "flow %s: stage \"%s\" cannot be written as JSON (out of memory or a "
                     "name that is not UTF-8)", root, it->name ? it->name : "");
        return NULL;
    }
    return o;
}

static json_t *items_json(const rlx_flow *f, const char *root, rlx_diag *d)
{
    json_t *a = json_array();
    if (!a) {
        rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
        return NULL;
    }
    for (uint32_t i = 0; i < f->n_items; i++) {
        json_t *o = item_json(&f->items[i], root, d);
        if (!o || json_array_append_new(a, o)) {
            if (o && d && !d->code) rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
            json_decref(a);
            return NULL;
        }
    }
    return a;
}

json_t *rg_flow_to_json(const rlx_flow *f, rlx_diag *d)
{
    json_t *root = json_object(), *ins = json_array();
    int rc = root && ins ? put(root, "name", json_string(f->name)) : -1;
    for (uint32_t i = 0; i < f->n_inputs && !rc; i++) {
        const rg_flow_input *in = &f->inputs[i];
        json_t *o = json_object(), *sh = json_array();
        rc = o && sh ? 0 : -1;
        for (uint32_t k = 0; k < in->ndim && !rc; k++) rc = json_array_append_new(sh, json_integer(in->dims[k]));
        if (!rc) rc = put(o, "name", json_string(in->name));
        if (!rc) rc = put(o, "dtype", json_string(rlx_dtype_name(in->dtype)));
        if (!rc) rc = json_object_set(o, "shape", sh);
        if (!rc) rc = json_array_append(ins, o);
        json_decref(o);
        json_decref(sh);
    }
    if (!rc) rc = json_object_set(root, "inputs", ins);
    json_decref(ins);
    if (rc) {
        json_decref(root);
        rlx_diag_set(d, RLX_ERR_NOMEM, "flow %s: cannot be written as JSON (out of memory)", f->name);
        return NULL;
    }
    json_t *st = items_json(f, f->name, d);
    if (!st || put(root, "stages", st)) {
        json_decref(root);
        return NULL;
    }
    return root;
}

/* stages one to a line, bodies indented; a stage without a body is one compact line */
static int write_stages(json_t *arr, FILE *out, int depth)
{
    size_t i, n = json_array_size(arr);
    json_t *it;
    json_array_foreach(arr, i, it) {
        const char *bk = json_object_get(it, "stages") ? "stages" : "sequence";
        json_t *body = json_object_get(it, bk);
        fprintf(out, "%*s", 2 * depth, "");
        if (!json_array_size(body)) {
            if (json_dumpf(it, out, 0)) return -1;
        } else {
            fputc('{', out);
            const char *k;
            json_t *v;
            json_object_foreach(it, k, v) {
                if (v == body) continue;
                fprintf(out, "\"%s\": ", k);
                if (json_dumpf(v, out, JSON_ENCODE_ANY)) return -1;
                fputs(", ", out);
            }
            fprintf(out, "\"%s\": [\n", bk);
            if (write_stages(body, out, depth + 1)) return -1;
            fprintf(out, "%*s]}", 2 * depth, "");
        }
        fputs(i + 1 < n ? ",\n" : "\n", out);
    }
    return 0;
}

int rg_flow_json_write(json_t *root, FILE *out)
{
    json_t *ins = json_object_get(root, "inputs");
    size_t i, n = json_array_size(ins);
    json_t *in;
    fputs("{\n  \"name\": ", out);
    if (json_dumpf(json_object_get(root, "name"), out, JSON_ENCODE_ANY)) return -1;
    fputs(",\n  \"inputs\": [\n", out);
    json_array_foreach(ins, i, in) {
        fputs("    ", out);
        if (json_dumpf(in, out, 0)) return -1;
        fputs(i + 1 < n ? ",\n" : "\n", out);
    }
    fputs("  ],\n  \"stages\": [\n", out);
    if (write_stages(json_object_get(root, "stages"), out, 2)) return -1;
    fputs("  ]\n}\n", out);
    return ferror(out) ? -1 : 0;
}

RLX_API int rlx_flow_write_json(const rlx_flow *f, FILE *out, rlx_diag *d)
{
    if (!f || !out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_flow_write_json: no flow or stream");
    json_t *root = rg_flow_to_json(f, d);
    if (!root) return d && d->code ? d->code : RLX_ERR_NOMEM;
    int rc = rg_flow_json_write(root, out);
    json_decref(root);
    return rc ? rlx_diag_set(d, RLX_ERR_IO, "flow %s: writing the JSON failed", f->name) : 0;
}
