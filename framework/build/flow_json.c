/* Flows as JSON files (rlx-run --flow FILE.json):
 *   {"name": "...", "inputs": [{"name": "input_ids", "dtype": "I32", "shape": [-1]}],
 *    "stages": [ {"block": "token_embed", "params": {...}},
 *                {"repeat": 4 | "config:num_hidden_layers", "stages": [...]},
 *                {"when": "phase=decode", "stages": [...]},
 *                {"sequence": [...]} ]}
 * Strict: an unknown key or a wrong type fails with the file and the JSON path. */
#include "build/flow.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

typedef struct jctx {
    const char *file;
    rlx_diag *d;
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
        if ((rc = body_of(j, path, it, "stages", &body))) return rc;
        rc = is_key ? rg_flow_repeat_key(f, json_string_value(v) + 7, body)
                    : rlx_flow_repeat(f, (int64_t)json_integer_value(v), body);
    } else if ((v = json_object_get(it, "when"))) {
        static const char *const keys[] = {"when", "stages", NULL};
        join(sub, sizeof sub, path, ".when");
        if ((rc = only_keys(j, path, it, keys)) || (rc = want(j, sub, v, json_is_string(v), "a string")))
            return rc;
        if (rg_flow_cond_valid(json_string_value(v)))
            return err(j, sub, "bad condition \"%s\" (phase=prefill|decode|encode, config:KEY, !config:KEY)",
                       json_string_value(v));
        if ((rc = body_of(j, path, it, "stages", &body))) return rc;
        rc = rlx_flow_when(f, json_string_value(v), body);
    } else if ((v = json_object_get(it, "sequence"))) {
        static const char *const keys[] = {"sequence", NULL};
        if ((rc = only_keys(j, path, it, keys)) || (rc = body_of(j, path, it, "sequence", &body))) return rc;
        rc = rlx_flow_sequence(f, body);
    } else {
        return err(j, path, "%s", "a stage needs one of block, repeat, when, sequence");
    }
    rlx_flow_free(body);
    return rc;
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
        if ((rc = want(j, s2, x, json_is_integer(x) && json_integer_value(x) >= -1, "a dim >= 0 or -1")))
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
    jctx j = {path, d};
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
    if (rc) {
        rlx_flow_free(f);
        return rc;
    }
    *out = f;
    return 0;
}
