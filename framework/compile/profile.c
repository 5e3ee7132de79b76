/* Compile profiles (*.rlx.json): strict, schema-driven; every error names the JSON path. */
#include "base/internal.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#ifndef RLX_PROFILE_DIR
#define RLX_PROFILE_DIR "/usr/local/share/rlx/profiles"
#endif

enum { F_BOOL, F_INT, F_ENUM, F_DEVICES };

typedef struct field {
    const char *path;
    int kind;
    size_t off, cap;     /* cap: size of the char array (F_ENUM) */
    const char *choices; /* F_ENUM: "a|b|c" */
    int min;             /* F_INT */
} field;

#define OFF(m) offsetof(rlx_profile, m)
#define CAP(m) sizeof(((rlx_profile *)0)->m)
static const field schema[] = {
    {"fusion.policy", F_ENUM, OFF(fusion.policy), CAP(fusion.policy), "direct|fusable", 0},
    {"fusion.target", F_ENUM, OFF(fusion.target), CAP(fusion.target), "auto|cpu|cuda|rocm", 0},
    {"fusion.assert_clean", F_BOOL, OFF(fusion.assert_clean), 0, NULL, 0},
    {"fusion.skip", F_BOOL, OFF(fusion.skip), 0, NULL, 0},
    {"passes.dce", F_BOOL, OFF(passes.dce), 0, NULL, 0},
    {"passes.constant_folding", F_BOOL, OFF(passes.constant_folding), 0, NULL, 0},
    {"passes.verbose", F_BOOL, OFF(passes.verbose), 0, NULL, 0},
    {"precision.compute", F_ENUM, OFF(precision.compute), CAP(precision.compute), "f32|f16|bf16", 0},
    {"precision.mixed", F_ENUM, OFF(precision.mixed), CAP(precision.mixed), "none|auto", 0},
    {"backend.cpu.threads", F_INT, OFF(backend.cpu.threads), 0, NULL, 0},
    {"backend.cpu.placement", F_ENUM, OFF(backend.cpu.placement), CAP(backend.cpu.placement),
     "cores|pus|none", 0},
    {"backend.cpu.unfuse_regions", F_BOOL, OFF(backend.cpu.unfuse_regions), 0, NULL, 0},
    {"backend.cuda.device", F_INT, OFF(backend.cuda.device), 0, NULL, 0},
    {"backend.cuda.graphs", F_BOOL, OFF(backend.cuda.graphs), 0, NULL, 0},
    {"backend.cuda.devices", F_DEVICES, OFF(backend.cuda.devices), 0, NULL, 0},
};
#define N_FIELDS (sizeof schema / sizeof schema[0])

RLX_API void rlx_profile_defaults(rlx_profile *p)
{
    if (!p) return;
    memset(p, 0, sizeof *p);
    strcpy(p->name, "default");
    strcpy(p->fusion.policy, "direct");
    strcpy(p->fusion.target, "auto");
    p->passes.dce = 1;
    p->passes.constant_folding = 1;
    strcpy(p->precision.compute, "f32");
    strcpy(p->precision.mixed, "none");
    strcpy(p->backend.cpu.placement, "cores");
    p->backend.cuda.graphs = 1;
}

static int enum_ok(const char *choices, const char *s)
{
    size_t n = strlen(s);
    for (const char *c = choices; *c;) {
        const char *bar = strchr(c, '|');
        size_t len = bar ? (size_t)(bar - c) : strlen(c);
        if (len == n && strncmp(c, s, n) == 0) return 1;
        c += len + (bar ? 1 : 0);
    }
    return 0;
}

static int set_field(const field *f, json_t *v, const char *origin, rlx_profile *p, rlx_diag *d)
{
    char *base = (char *)p + f->off;
    switch (f->kind) {
    case F_BOOL:
        if (!json_is_boolean(v))
            return rlx_diag_set(d, RLX_ERR_INVALID, "%s: %s: expected a boolean, got %s", origin,
                                f->path, rlx__json_type_name(v));
        *(int *)base = json_is_true(v);
        return RLX_OK;
    case F_INT:
        if (!json_is_integer(v))
            return rlx_diag_set(d, RLX_ERR_INVALID, "%s: %s: expected an integer, got %s", origin,
                                f->path, rlx__json_type_name(v));
        if (json_integer_value(v) < f->min || json_integer_value(v) > 1 << 20)
            return rlx_diag_set(d, RLX_ERR_INVALID, "%s: %s: expected an integer in %d..%d, got %lld",
                                origin, f->path, f->min, 1 << 20,
                                (long long)json_integer_value(v));
        *(int *)base = (int)json_integer_value(v);
        return RLX_OK;
    case F_DEVICES: { /* distinct GPU ordinals: the devices of a tensor-parallel run */
        int *dev = (int *)base, *n = &p->backend.cuda.n_devices;
        if (!json_is_array(v) || json_array_size(v) > RLX_MAX_DEVICES)
            return rlx_diag_set(d, RLX_ERR_INVALID, "%s: %s: expected an array of up to %d device ordinals, got %s",
                                origin, f->path, RLX_MAX_DEVICES, rlx__json_type_name(v));
        *n = 0;
        for (size_t k = 0; k < json_array_size(v); k++) {
            json_t *e = json_array_get(v, k);
            json_int_t x = json_is_integer(e) ? json_integer_value(e) : -1;
            if (x < 0 || x >= RLX_MAX_DEVICES)
                return rlx_diag_set(d, RLX_ERR_INVALID, "%s: %s[%zu]: expected a device ordinal 0..%d", origin,
                                    f->path, k, RLX_MAX_DEVICES - 1);
            for (int j = 0; j < *n; j++)
                if (dev[j] == (int)x)
                    return rlx_diag_set(d, RLX_ERR_INVALID, "%s: %s[%zu]: device %d twice", origin, f->path, k,
                                        (int)x);
            dev[(*n)++] = (int)x;
        }
        return RLX_OK;
    }
    default:
        if (!json_is_string(v))
            return rlx_diag_set(d, RLX_ERR_INVALID, "%s: %s: expected one of %s, got %s", origin,
                                f->path, f->choices, rlx__json_type_name(v));
        if (!enum_ok(f->choices, json_string_value(v)))
            return rlx_diag_set(d, RLX_ERR_INVALID, "%s: %s: expected one of %s, got \"%.64s\"",
                                origin, f->path, f->choices, json_string_value(v));
        memset(base, 0, f->cap);
        strcpy(base, json_string_value(v)); /* every choice fits its field */
        return RLX_OK;
    }
}

/* Is path a section, i.e. a prefix "path." of some field? */
static int is_section(const char *path)
{
    size_t n = strlen(path);
    for (size_t i = 0; i < N_FIELDS; i++)
        if (strncmp(schema[i].path, path, n) == 0 && schema[i].path[n] == '.') return 1;
    return 0;
}

static int walk(json_t *obj, const char *prefix, const char *origin, rlx_profile *p, rlx_diag *d)
{
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) {
        char path[128];
        if (snprintf(path, sizeof path, "%s%s%s", prefix, *prefix ? "." : "", key) >= (int)sizeof path)
            return rlx_diag_set(d, RLX_ERR_INVALID, "%s: %s%s%.40s...: unknown key", origin, prefix,
                                *prefix ? "." : "", key);
        const field *f = NULL;
        for (size_t i = 0; i < N_FIELDS && !f; i++)
            if (strcmp(schema[i].path, path) == 0) f = &schema[i];
        int rc;
        if (f) {
            rc = set_field(f, v, origin, p, d);
        } else if (is_section(path)) {
            if (!json_is_object(v))
                return rlx_diag_set(d, RLX_ERR_INVALID, "%s: %s: expected an object, got %s", origin,
                                    path, rlx__json_type_name(v));
            rc = walk(v, path, origin, p, d);
        } else {
            rc = rlx_diag_set(d, RLX_ERR_INVALID, "%s: %s: unknown key", origin, path);
        }
        if (rc) return rc;
    }
    return RLX_OK;
}

/* "dir/llama32_decode.rlx.json" -> "llama32_decode" */
static void name_from_origin(const char *origin, char *name, size_t cap)
{
    const char *b = strrchr(origin, '/');
    b = b ? b + 1 : origin;
    size_t n = strlen(b);
    if (n > 9 && strcmp(b + n - 9, ".rlx.json") == 0) n -= 9;
    else if (n > 5 && strcmp(b + n - 5, ".json") == 0) n -= 5;
    if (n >= cap) n = cap - 1;
    memcpy(name, b, n);
    name[n] = 0;
}

RLX_API int rlx_profile_parse(const char *json, size_t len, const char *origin, rlx_profile *out,
                              rlx_diag *d)
{
    if (!out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_profile_parse: out is NULL");
    if (!origin) origin = "profile";
    if (!json) return rlx_diag_set(d, RLX_ERR_INVALID, "%s: no data", origin);
    rlx_profile p;
    rlx_profile_defaults(&p);
    name_from_origin(origin, p.name, sizeof p.name);
    json_t *root;
    int rc = rlx__json_parse(json, len, origin, &root, d);
    if (rc) return rc;
    if (!json_is_object(root))
        rc = rlx_diag_set(d, RLX_ERR_INVALID, "%s: expected an object, got %s", origin,
                          rlx__json_type_name(root));
    else
        rc = walk(root, "", origin, &p, d);
    json_decref(root);
    if (!rc) *out = p;
    return rc;
}

static int parse_file(const char *path, rlx_profile *out, rlx_diag *d)
{
    char *buf;
    size_t len;
    int rc = rlx__read_small_file(path, 1u << 20, &buf, &len, d);
    if (rc) return rc;
    rc = rlx_profile_parse(buf, len, path, out, d);
    free(buf);
    return rc;
}

static int name_ok(const char *s)
{
    if (!*s || strlen(s) > 63) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-'))
            return 0;
    return 1;
}

static int try_dir(const char *dir, size_t dlen, const char *name, rlx_profile *out, rlx_diag *d,
                   int *found)
{
    char path[4096];
    if (dlen == 0) return RLX_OK;
    snprintf(path, sizeof path, "%.*s/%s.rlx.json", (int)dlen, dir, name);
    struct stat st;
    if (lstat(path, &st) != 0) return RLX_OK; /* present in any form: parse_file says what is wrong */
    *found = 1;
    return parse_file(path, out, d);
}

RLX_API int rlx_profile_load(const char *name_or_path, rlx_profile *out, rlx_diag *d)
{
    if (!name_or_path || !out)
        return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_profile_load: NULL argument");
    size_t n = strlen(name_or_path);
    if (strchr(name_or_path, '/') || (n > 5 && strcmp(name_or_path + n - 5, ".json") == 0))
        return parse_file(name_or_path, out, d);
    if (!name_ok(name_or_path))
        return rlx_diag_set(d, RLX_ERR_INVALID,
                            "profile '%.64s': not a preset name ([A-Za-z0-9_-]) nor a path to a .json file",
                            name_or_path);
    int found = 0, rc;
    const char *env = getenv("RLX_PROFILE_PATH");
    for (const char *p = env; p && *p;) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        rc = try_dir(p, len, name_or_path, out, d, &found);
        if (found) return rc;
        p += len + (colon ? 1 : 0);
    }
    /* an uninstalled librlx (build tree) reads the source tree's presets, as the
     * registry reads the build tree's plugins */
    const char *dir = RLX_PROFILE_DIR;
#ifdef RLX_BUILD_PROFILE_DIR
    if (rlx__running_uninstalled()) dir = RLX_BUILD_PROFILE_DIR;
#endif
    rc = try_dir(dir, strlen(dir), name_or_path, out, d, &found);
    if (found) return rc;
    return rlx_diag_set(d, RLX_ERR_NOT_FOUND, "profile '%s' not found (searched $RLX_PROFILE_PATH=%s, %s)",
                        name_or_path, env ? env : "", dir);
}
