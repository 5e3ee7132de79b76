/* config.json (Hugging Face transformers 4.x and 5.x spellings, diffusers) into
 * rlx_model_config, applying the defaults HF applies when a key is absent. */
#include "base/internal.h"
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct rlx_config {
    json_t *root;
    char *origin;
    rlx_model_config mc;
};

/* Reader state: origin for messages, the object read and its JSON path prefix. */
typedef struct rd {
    const char *origin;
    json_t *obj;
    const char *prefix; /* "" or a nested object's "rope_parameters." */
    rlx_diag *d;
    int rc;
} rd;

static json_t *get(rd *r, const char *key)
{
    json_t *v = r->obj ? json_object_get(r->obj, key) : NULL;
    return json_is_null(v) ? NULL : v;
}

static int type_error(rd *r, const char *key, const char *want, json_t *v)
{
    if (!r->rc)
        r->rc = rlx_diag_set(r->d, RLX_ERR_INVALID, "%s: %s%s: expected %s, got %s", r->origin,
                             r->prefix, key, want, rlx__json_type_name(v));
    return r->rc;
}

/* v read as an integer (key names it in messages) */
static int64_t int_value(rd *r, const char *key, json_t *v, int64_t def)
{
    if (!v) return def;
    if (json_is_integer(v)) return json_integer_value(v);
    /* 16.0 is an integer in Python's eyes too */
    if (json_is_real(v)) {
        double x = json_real_value(v);
        if (x > -9.2e18 && x < 9.2e18 && x == (double)(int64_t)x) return (int64_t)x;
    }
    type_error(r, key, "an integer", v);
    return def;
}

static int64_t get_int(rd *r, const char *key, int64_t def) { return int_value(r, key, get(r, key), def); }

static double get_num(rd *r, const char *key, double def)
{
    json_t *v = get(r, key);
    if (!v) return def;
    if (json_is_number(v)) return json_number_value(v);
    type_error(r, key, "a number", v);
    return def;
}

static int get_bool(rd *r, const char *key, int def)
{
    json_t *v = get(r, key);
    if (!v) return def;
    if (json_is_boolean(v)) return json_is_true(v);
    type_error(r, key, "a boolean", v);
    return def;
}

static void get_str(rd *r, const char *key, const char *def, char *out, size_t cap)
{
    json_t *v = get(r, key);
    const char *s = def;
    if (v && !json_is_string(v)) type_error(r, key, "a string", v);
    else if (v) s = json_string_value(v);
    if (strlen(s) >= cap) {
        if (!r->rc)
            r->rc = rlx_diag_set(r->d, RLX_ERR_INVALID, "%s: %s%s: \"%.64s\" is longer than %zu bytes",
                                 r->origin, r->prefix, key, s, cap - 1);
        return;
    }
    memset(out, 0, cap);
    strcpy(out, s);
}

static int fail(rd *r, int code, const char *fmt, ...) RLX_PRINTF(3, 4);
static int fail(rd *r, int code, const char *fmt, ...)
{
    if (r->rc) return r->rc;
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->rc = rlx_diag_set(r->d, code, "%s: %s", r->origin, msg);
    return r->rc;
}

/* ---------------------------------------------------------------- pieces */

static void read_dtype(rd *r, rlx_model_config *mc)
{
    const char *key = get(r, "dtype") ? "dtype" : "torch_dtype";
    json_t *v = get(r, key);
    mc->dtype = RLX_F32;
    if (!v) return;
    if (!json_is_string(v)) {
        type_error(r, key, "a string", v);
        return;
    }
    const char *s = json_string_value(v);
    if (strncmp(s, "torch.", 6) == 0) s += 6;
    if (strcmp(s, "float32") == 0) mc->dtype = RLX_F32;
    else if (strcmp(s, "float16") == 0) mc->dtype = RLX_F16;
    else if (strcmp(s, "bfloat16") == 0) mc->dtype = RLX_BF16;
    else
        fail(r, RLX_ERR_UNSUPPORTED, "%s: \"%s\" is not a supported dtype (float32, float16, bfloat16)",
             key, json_string_value(v));
}

static void read_tokens(rd *r, rlx_model_config *mc, int64_t bos_def, int64_t eos_def)
{
    json_t *b = json_object_get(r->obj, "bos_token_id");
    mc->bos_token_id = b ? (json_is_null(b) ? -1 : get_int(r, "bos_token_id", -1)) : bos_def;
    json_t *e = json_object_get(r->obj, "eos_token_id");
    mc->n_eos = 0;
    if (!e) {
        if (eos_def >= 0) mc->eos_token_ids[mc->n_eos++] = eos_def;
    } else if (json_is_array(e)) {
        if (json_array_size(e) > RLX_MAX_EOS) {
            fail(r, RLX_ERR_UNSUPPORTED, "eos_token_id: %zu ids, at most %d supported",
                 json_array_size(e), RLX_MAX_EOS);
            return;
        }
        for (size_t i = 0; i < json_array_size(e); i++) {
            json_t *x = json_array_get(e, i);
            if (!json_is_integer(x)) {
                type_error(r, "eos_token_id", "integers", x);
                return;
            }
            mc->eos_token_ids[mc->n_eos++] = json_integer_value(x);
        }
    } else if (!json_is_null(e)) {
        int64_t x = get_int(r, "eos_token_id", -1);
        if (x >= 0) mc->eos_token_ids[mc->n_eos++] = x;
    }
}

/* One rope dict (5.x rope_parameters or a per-layer-type entry, or 4.x rope_scaling). */
static void read_rope_dict(rd *r, json_t *o, const char *path, double *theta, char *type,
                           size_t type_cap, rlx_model_config *mc)
{
    rd sub = {r->origin, o, path, r->d, r->rc};
    if (!json_is_object(o)) {
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)strlen(path) - 1, path); /* without the dot */
        sub.prefix = "";
        type_error(&sub, name, "an object", o);
        r->rc = sub.rc;
        return;
    }
    /* transformers 4.x wrote "type", later "rope_type" */
    const char *tkey = get(&sub, "rope_type") ? "rope_type" : "type";
    get_str(&sub, tkey, "default", type, type_cap);
    if (theta) *theta = get_num(&sub, "rope_theta", *theta);
    if (mc) {
        int scaled = strcmp(type, "default") != 0;
        json_t *f = get(&sub, "factor");
        if (scaled && !f && !sub.rc)
            sub.rc = rlx_diag_set(r->d, RLX_ERR_INVALID, "%s: %sfactor: missing for rope type \"%s\"",
                                  r->origin, path, type);
        mc->rope_factor = get_num(&sub, "factor", 0);
        if (strcmp(type, "llama3") == 0) {
            static const char *const need[] = {"low_freq_factor", "high_freq_factor",
                                               "original_max_position_embeddings"};
            for (int i = 0; i < 3 && !sub.rc; i++)
                if (!get(&sub, need[i]))
                    sub.rc = rlx_diag_set(r->d, RLX_ERR_INVALID,
                                          "%s: %s%s: missing for rope type \"llama3\"", r->origin, path,
                                          need[i]);
        }
        mc->rope_low_freq_factor = get_num(&sub, "low_freq_factor", 0);
        mc->rope_high_freq_factor = get_num(&sub, "high_freq_factor", 0);
        mc->rope_original_max_position = get_int(&sub, "original_max_position_embeddings", 0);
    }
    r->rc = sub.rc;
}

/* rope_theta (4.x), rope_scaling (4.x), rope_parameters (5.x, possibly per layer type:
 * a sliding_attention entry with another base lands in rope_local_theta) */
static void read_rope(rd *r, rlx_model_config *mc, double theta_def)
{
    char local_type[16] = "default";
    double local_theta = 0;
    mc->rope_theta = get_num(r, "rope_theta", theta_def);
    snprintf(mc->rope_type, sizeof mc->rope_type, "default");
    json_t *p = get(r, "rope_parameters");
    if (p) {
        json_t *full = json_is_object(p) ? json_object_get(p, "full_attention") : NULL;
        json_t *slide = json_is_object(p) ? json_object_get(p, "sliding_attention") : NULL;
        if (full || slide) {
            if (full)
                read_rope_dict(r, full, "rope_parameters.full_attention.", &mc->rope_theta,
                               mc->rope_type, sizeof mc->rope_type, mc);
            local_theta = mc->rope_theta;
            if (slide)
                read_rope_dict(r, slide, "rope_parameters.sliding_attention.", &local_theta,
                               local_type, sizeof local_type, NULL);
        } else {
            read_rope_dict(r, p, "rope_parameters.", &mc->rope_theta, mc->rope_type,
                           sizeof mc->rope_type, mc);
        }
    } else {
        json_t *s = get(r, "rope_scaling");
        if (s) read_rope_dict(r, s, "rope_scaling.", NULL, mc->rope_type, sizeof mc->rope_type, mc);
    }
    if (local_theta > 0 && local_theta != mc->rope_theta) mc->rope_local_theta = local_theta;
}

/* layer_types as 5.x writes it; absent: every layer full (a family derives its own) */
static void read_layer_types(rd *r, rlx_model_config *mc)
{
    json_t *lt = get(r, "layer_types");
    int64_t n = mc->num_layers;
    if (!lt) return;
    if (!json_is_array(lt)) {
        type_error(r, "layer_types", "an array", lt);
        return;
    }
    if ((int64_t)json_array_size(lt) != n) {
        fail(r, RLX_ERR_INVALID, "layer_types: %zu entries, num_hidden_layers is %lld",
             json_array_size(lt), (long long)n);
        return;
    }
    for (int64_t i = 0; i < n; i++) {
        json_t *x = json_array_get(lt, (size_t)i);
        const char *s = json_is_string(x) ? json_string_value(x) : NULL;
        if (s && strcmp(s, "full_attention") == 0) mc->layer_types[i] = RLX_LAYER_FULL;
        else if (s && strcmp(s, "sliding_attention") == 0) mc->layer_types[i] = RLX_LAYER_SLIDING;
        else {
            fail(r, RLX_ERR_UNSUPPORTED,
                 "layer_types[%lld]: expected one of full_attention|sliding_attention, got %s%s%s",
                 (long long)i, s ? "\"" : "", s ? s : rlx__json_type_name(x), s ? "\"" : "");
            return;
        }
    }
}

/* Sizes are bounded so that products of two of them cannot overflow. */
#define MAX_DIM (1ll << 24)
static void check_positive(rd *r, const char *key, int64_t v)
{
    if (v <= 0)
        fail(r, RLX_ERR_INVALID, "%s%s: must be positive, got %lld", r->prefix, key, (long long)v);
    else if (v > MAX_DIM)
        fail(r, RLX_ERR_UNSUPPORTED, "%s%s: %lld is larger than %lld", r->prefix, key, (long long)v,
             MAX_DIM);
}

/* layer_types has RLX_MAX_LAYERS entries: every model type stays within it */
static void check_layers(rd *r, const char *key, int64_t n)
{
    check_positive(r, key, n);
    if (n > RLX_MAX_LAYERS)
        fail(r, RLX_ERR_UNSUPPORTED, "%s%s: %lld layers, at most %d supported", r->prefix, key,
             (long long)n, RLX_MAX_LAYERS);
}

static void read_common(rd *r, const rlx_config_defaults *df, rlx_model_config *mc)
{
    mc->vocab_size = get_int(r, "vocab_size", df->vocab_size);
    mc->hidden_size = get_int(r, "hidden_size", df->hidden_size);
    mc->intermediate_size = get_int(r, "intermediate_size", df->intermediate_size);
    mc->num_layers = get_int(r, "num_hidden_layers", df->num_layers);
    mc->num_heads = get_int(r, "num_attention_heads", df->num_heads);
    mc->num_kv_heads = get_int(r, "num_key_value_heads", df->num_kv_heads ? df->num_kv_heads : mc->num_heads);
    check_positive(r, "vocab_size", mc->vocab_size);
    check_positive(r, "hidden_size", mc->hidden_size);
    check_positive(r, "intermediate_size", mc->intermediate_size);
    check_layers(r, "num_hidden_layers", mc->num_layers);
    check_positive(r, "num_attention_heads", mc->num_heads);
    check_positive(r, "num_key_value_heads", mc->num_kv_heads);
    if (r->rc) return;
    mc->head_dim = get_int(r, "head_dim", df->head_dim ? df->head_dim : mc->hidden_size / mc->num_heads);
    check_positive(r, "head_dim", mc->head_dim);
    mc->max_position_embeddings = get_int(r, "max_position_embeddings", df->max_position_embeddings);
    if (!r->rc && mc->num_heads % mc->num_kv_heads != 0)
        fail(r, RLX_ERR_INVALID, "num_key_value_heads: %lld does not divide num_attention_heads %lld",
             (long long)mc->num_kv_heads, (long long)mc->num_heads);
    const char *eps_key = df->eps_key;
    if (!eps_key) eps_key = get(r, "layer_norm_eps") && !get(r, "rms_norm_eps") ? "layer_norm_eps" : "rms_norm_eps";
    mc->norm_eps = get_num(r, eps_key, df->eps);
    if (!r->rc && !(mc->norm_eps >= 0)) /* the norm kernels would refuse it, naming no key */
        fail(r, RLX_ERR_INVALID, "%s%s: must be >= 0, got %g", r->prefix, eps_key, mc->norm_eps);
    mc->tie_word_embeddings = get_bool(r, "tie_word_embeddings", df->tie_word_embeddings);
    get_str(r, df->act_key ? df->act_key : "hidden_act", df->act ? df->act : "", mc->hidden_act,
            sizeof mc->hidden_act);
    mc->attention_bias = get_bool(r, "attention_bias", 0);
    mc->mlp_bias = get_bool(r, "mlp_bias", 0);
    read_tokens(r, mc, df->bos_token_id, df->eos_token_id);
    if (!r->rc) read_rope(r, mc, df->rope_theta);
    if (!r->rc) read_layer_types(r, mc);
}

/* What every config has: the architecture, the model type (or a diffusers class), dtype */
static int fill_model(rd *r, rlx_model_config *mc)
{
    memset(mc, 0, sizeof *mc);
    mc->struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_model_config, rope_axes);
    mc->bos_token_id = -1;
    json_t *archs = get(r, "architectures");
    if (archs && json_is_array(archs) && json_is_string(json_array_get(archs, 0))) {
        const char *a = json_string_value(json_array_get(archs, 0));
        if (strlen(a) >= sizeof mc->architecture)
            return fail(r, RLX_ERR_INVALID, "architectures[0]: \"%.64s\" is too long", a);
        strcpy(mc->architecture, a);
    } else if (archs && !json_is_array(archs)) {
        return type_error(r, "architectures", "an array", archs);
    }
    json_t *mt = get(r, "model_type");
    json_t *cls = get(r, "_class_name");
    if (!mt && cls) {
        if (!json_is_string(cls)) return type_error(r, "_class_name", "a string", cls);
        get_str(r, "_class_name", "", mc->architecture, sizeof mc->architecture);
    } else if (!mt) {
        return fail(r, RLX_ERR_INVALID, "model_type: missing");
    } else {
        get_str(r, "model_type", "", mc->model_type, sizeof mc->model_type);
    }
    read_dtype(r, mc);
    return r->rc;
}

/* ---------------------------------------------------------------- host services (ABI 1.1) */

/* "a.b.2.c": object members by name, array elements by index (a JSON null is returned) */
static json_t *lookup_raw(json_t *root, const char *key)
{
    json_t *v = json_object_get(root, key);
    if (v) return v;
    char part[256];
    const char *p = key;
    v = root;
    while (*p && v) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (n == 0 || n >= sizeof part) return NULL;
        memcpy(part, p, n);
        part[n] = 0;
        if (json_is_object(v)) {
            v = json_object_get(v, part);
        } else if (json_is_array(v)) {
            char *end;
            unsigned long long i = strtoull(part, &end, 10);
            if (*end || part[0] < '0' || part[0] > '9') return NULL;
            v = json_array_get(v, (size_t)i);
        } else {
            return NULL;
        }
        p = dot ? dot + 1 : p + n;
        if (dot && !*p) return NULL;
    }
    return v;
}

/* as lookup_raw, with a JSON null read as absent */
static json_t *lookup_dotted(json_t *root, const char *key)
{
    json_t *v = lookup_raw(root, key);
    return json_is_null(v) ? NULL : v;
}

/* a reader over the whole config whose lookups are dotted */
static rd whole(const rlx_config *c, rlx_diag *d)
{
    rd r = {c->origin, c->root, "", d, 0};
    return r;
}

static int cfg_has(const rlx_config *c, const char *key)
{
    return c && key && lookup_raw(c->root, key) != NULL;
}

static int cfg_int(const rlx_config *c, const char *key, int64_t def, int64_t *out, rlx_diag *d)
{
    if (!c || !key || !out) return rlx_diag_set(d, RLX_ERR_INVALID, "config_int: no config, key or out");
    rd r = whole(c, d);
    *out = int_value(&r, key, lookup_dotted(c->root, key), def);
    return r.rc;
}

static int cfg_num(const rlx_config *c, const char *key, double def, double *out, rlx_diag *d)
{
    if (!c || !key || !out) return rlx_diag_set(d, RLX_ERR_INVALID, "config_num: no config, key or out");
    json_t *v = lookup_dotted(c->root, key);
    *out = def;
    if (!v) return 0;
    if (json_is_number(v)) return *out = json_number_value(v), 0;
    rd r = whole(c, d);
    return type_error(&r, key, "a number", v);
}

static int cfg_bool(const rlx_config *c, const char *key, int def, int *out, rlx_diag *d)
{
    if (!c || !key || !out) return rlx_diag_set(d, RLX_ERR_INVALID, "config_bool: no config, key or out");
    json_t *v = lookup_dotted(c->root, key);
    *out = def;
    if (!v) return 0;
    if (json_is_boolean(v)) return *out = json_is_true(v), 0;
    rd r = whole(c, d);
    return type_error(&r, key, "a boolean", v);
}

static int cfg_str(const rlx_config *c, const char *key, const char *def, char *out, size_t cap, rlx_diag *d)
{
    if (!c || !key || !out || !cap) return rlx_diag_set(d, RLX_ERR_INVALID, "config_str: no config, key or out");
    json_t *v = lookup_dotted(c->root, key);
    rd r = whole(c, d);
    if (v && !json_is_string(v)) return type_error(&r, key, "a string", v);
    const char *s = v ? json_string_value(v) : def ? def : "";
    if (strlen(s) >= cap)
        return rlx_diag_set(d, RLX_ERR_INVALID, "%s: %s: \"%.64s\" is longer than %zu bytes", c->origin, key, s,
                            cap - 1);
    strcpy(out, s);
    return 0;
}

static int64_t cfg_len(const rlx_config *c, const char *key)
{
    json_t *v = c && key ? lookup_dotted(c->root, key) : NULL;
    return json_is_array(v) ? (int64_t)json_array_size(v) : -1;
}

static int cfg_fail(const rlx_config *c, rlx_diag *d, int code, const char *fmt, ...)
{
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rlx_diag_set(d, code ? code : RLX_ERR_INVALID, "%s: %s", c ? c->origin : "config.json", msg);
}

static int cfg_read_common(const rlx_config *c, const rlx_config_defaults *df, rlx_model_config *mc,
                           rlx_diag *d)
{
    if (!c || !df || !mc) return rlx_diag_set(d, RLX_ERR_INVALID, "config_read_common: no config, defaults or out");
    rd r = whole(c, d);
    read_common(&r, df, mc);
    return r.rc;
}

int rlx__config_read_common(const rlx_config *c, const rlx_config_defaults *df, rlx_model_config *mc, rlx_diag *d)
{
    return cfg_read_common(c, df, mc, d);
}

void rlx__host_fill_config(rlx_host_api *h)
{
    h->config_has = cfg_has;
    h->config_int = cfg_int;
    h->config_num = cfg_num;
    h->config_bool = cfg_bool;
    h->config_str = cfg_str;
    h->config_len = cfg_len;
    h->config_fail = cfg_fail;
    h->config_read_common = cfg_read_common;
}

/* ---------------------------------------------------------------- public API */

RLX_API int rlx_config_parse(const char *json, size_t len, const char *origin, rlx_config **out,
                             rlx_diag *d)
{
    if (!out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_config_parse: out is NULL");
    *out = NULL;
    if (!origin) origin = "config.json";
    if (!json) return rlx_diag_set(d, RLX_ERR_INVALID, "%s: no data", origin);
    if (len > RLX__MAX_JSON_FILE)
        return rlx_diag_set(d, RLX_ERR_INVALID, "%s: %zu bytes, more than the allowed %u", origin, len,
                            (unsigned)RLX__MAX_JSON_FILE);
    rlx_config *c = calloc(1, sizeof *c);
    if (!c) return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", origin);
    c->origin = malloc(strlen(origin) + 1);
    if (!c->origin) {
        free(c);
        return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", origin);
    }
    strcpy(c->origin, origin);
    int rc = rlx__json_parse(json, len, origin, &c->root, d);
    if (!rc && !json_is_object(c->root))
        rc = rlx_diag_set(d, RLX_ERR_INVALID, "%s: expected an object, got %s", origin,
                          rlx__json_type_name(c->root));
    if (!rc) {
        rd r = {origin, c->root, "", d, 0};
        rc = fill_model(&r, &c->mc);
    }
    if (rc) {
        rlx_config_free(c);
        return rc;
    }
    *out = c;
    return RLX_OK;
}

RLX_API int rlx_config_open(const char *path, rlx_config **out, rlx_diag *d)
{
    if (!out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_config_open: out is NULL");
    *out = NULL;
    if (!path) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_config_open: path is NULL");
    struct stat st;
    char file[4096];
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(file, sizeof file, "%s/config.json", path);
    else
        snprintf(file, sizeof file, "%s", path);
    char *buf;
    size_t len;
    int rc = rlx__read_small_file(file, RLX__MAX_JSON_FILE, &buf, &len, d);
    if (rc) return rc;
    rc = rlx_config_parse(buf, len, file, out, d);
    free(buf);
    return rc;
}

RLX_API const rlx_model_config *rlx_config_model(const rlx_config *c) { return c ? &c->mc : NULL; }

rlx_model_config *rlx__config_model_mut(rlx_config *c) { return &c->mc; }
const char *rlx__config_origin(const rlx_config *c) { return c->origin; }

RLX_API int rlx_config_number(const rlx_config *c, const char *key, double *out)
{
    if (!c || !key) return RLX_ERR_INVALID;
    json_t *v = lookup_dotted(c->root, key);
    double x;
    if (json_is_number(v)) x = json_number_value(v);
    else if (json_is_boolean(v)) x = json_is_true(v) ? 1.0 : 0.0;
    else return RLX_ERR_NOT_FOUND;
    if (out) *out = x;
    return RLX_OK;
}

RLX_API void rlx_config_free(rlx_config *c)
{
    if (!c) return;
    json_decref(c->root);
    free(c->origin);
    free(c);
}
