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
    const char *prefix; /* "" or "vision_config." */
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

static int64_t get_int(rd *r, const char *key, int64_t def)
{
    json_t *v = get(r, key);
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

/* ---------------------------------------------------------------- per-type defaults */

typedef struct defaults {
    const char *type;
    int64_t vocab, hidden, inter, layers, heads, kv, head_dim, max_pos;
    double eps;
    int tie;
    const char *act_key, *act;
    double theta;
    int64_t bos, eos;
    double qpas, attn_cap, final_cap;
    int64_t sliding;
} defaults;

/* transformers' class defaults (LlamaConfig, Qwen3Config, Gemma2Config, Gemma3TextConfig,
 * BertConfig); kv = 0 means "= heads", head_dim = 0 means "= hidden / heads". */
static const defaults type_defaults[] = {
    {"llama", 32000, 4096, 11008, 32, 32, 0, 0, 2048, 1e-6, 0, "hidden_act", "silu", 10000.0, 1, 2,
     0, 0, 0, 0},
    {"qwen3", 151936, 4096, 22016, 32, 32, 32, 128, 32768, 1e-6, 0, "hidden_act", "silu", 10000.0, -1,
     -1, 0, 0, 0, 4096},
    {"gemma2", 256000, 2304, 9216, 26, 8, 4, 256, 8192, 1e-6, 1, "hidden_activation",
     "gelu_pytorch_tanh", 10000.0, 2, 1, 256, 50.0, 30.0, 4096},
    {"gemma3_text", 262208, 2304, 9216, 26, 8, 4, 256, 131072, 1e-6, 1, "hidden_activation",
     "gelu_pytorch_tanh", 1000000.0, 2, 1, 256, 0, 0, 4096},
    {"bert", 30522, 768, 3072, 12, 12, 0, 0, 512, 1e-12, 1, "hidden_act", "gelu", 0, -1, -1, 0, 0, 0,
     0},
};

static const defaults *find_defaults(const char *type)
{
    for (size_t i = 0; i < sizeof type_defaults / sizeof type_defaults[0]; i++)
        if (strcmp(type_defaults[i].type, type) == 0) return &type_defaults[i];
    return NULL;
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

static void read_rope(rd *r, rlx_model_config *mc, const defaults *df, int local_rope)
{
    char local_type[16] = "default";
    double local_theta = 10000.0;
    mc->rope_theta = get_num(r, "rope_theta", df->theta); /* 4.x, and a fallback for 5.x */
    snprintf(mc->rope_type, sizeof mc->rope_type, "default");
    json_t *p = get(r, "rope_parameters");
    if (p) {
        json_t *full = json_is_object(p) ? json_object_get(p, "full_attention") : NULL;
        json_t *slide = json_is_object(p) ? json_object_get(p, "sliding_attention") : NULL;
        if (full || slide) {
            if (full)
                read_rope_dict(r, full, "rope_parameters.full_attention.", &mc->rope_theta,
                               mc->rope_type, sizeof mc->rope_type, mc);
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
        local_theta = get_num(r, "rope_local_base_freq", local_theta);
    }
    if (local_rope && local_theta != mc->rope_theta) mc->rope_local_theta = local_theta;
}

static void read_layer_types(rd *r, rlx_model_config *mc, const char *type)
{
    json_t *lt = get(r, "layer_types");
    int64_t n = mc->num_layers;
    if (lt) {
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
        return;
    }
    /* 4.x: derive as transformers does */
    if (strcmp(type, "gemma2") == 0) {
        for (int64_t i = 0; i < n; i++) mc->layer_types[i] = (i + 1) % 2 ? RLX_LAYER_SLIDING : RLX_LAYER_FULL;
    } else if (strcmp(type, "gemma3_text") == 0) {
        const char *k = get(r, "sliding_window_pattern") ? "sliding_window_pattern" : "_sliding_window_pattern";
        int64_t pat = get_int(r, k, 6);
        if (pat <= 0) {
            fail(r, RLX_ERR_INVALID, "%s: must be positive", k);
            return;
        }
        for (int64_t i = 0; i < n; i++)
            mc->layer_types[i] = (i + 1) % pat ? RLX_LAYER_SLIDING : RLX_LAYER_FULL;
    } else if (strcmp(type, "qwen3") == 0 && mc->sliding_window > 0) {
        int64_t mwl = get_int(r, "max_window_layers", 28);
        for (int64_t i = 0; i < n; i++) mc->layer_types[i] = i >= mwl ? RLX_LAYER_SLIDING : RLX_LAYER_FULL;
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

static double get_ratio(rd *r, const char *key, double def)
{
    double x = get_num(r, key, def);
    if (!(x > 0 && x <= 64)) {
        fail(r, RLX_ERR_INVALID, "%s%s: expected a ratio in (0, 64], got %g", r->prefix, key, x);
        return def;
    }
    return x;
}

static void read_causal(rd *r, rlx_model_config *mc, const defaults *df)
{
    mc->vocab_size = get_int(r, "vocab_size", df->vocab);
    mc->hidden_size = get_int(r, "hidden_size", df->hidden);
    mc->intermediate_size = get_int(r, "intermediate_size", df->inter);
    mc->num_layers = get_int(r, "num_hidden_layers", df->layers);
    mc->num_heads = get_int(r, "num_attention_heads", df->heads);
    mc->num_kv_heads = get_int(r, "num_key_value_heads", df->kv ? df->kv : mc->num_heads);
    check_positive(r, "vocab_size", mc->vocab_size);
    check_positive(r, "hidden_size", mc->hidden_size);
    check_positive(r, "intermediate_size", mc->intermediate_size);
    check_layers(r, "num_hidden_layers", mc->num_layers);
    check_positive(r, "num_attention_heads", mc->num_heads);
    check_positive(r, "num_key_value_heads", mc->num_kv_heads);
    if (r->rc) return;
    mc->head_dim = get_int(r, "head_dim", df->head_dim ? df->head_dim : mc->hidden_size / mc->num_heads);
    check_positive(r, "head_dim", mc->head_dim);
    mc->max_position_embeddings = get_int(r, "max_position_embeddings", df->max_pos);
    if (!r->rc && mc->num_heads % mc->num_kv_heads != 0)
        fail(r, RLX_ERR_INVALID, "num_key_value_heads: %lld does not divide num_attention_heads %lld",
             (long long)mc->num_kv_heads, (long long)mc->num_heads);
    /* gemma reads hidden_activation only (its hidden_act is legacy and ignored by HF) */
    get_str(r, df->act_key, df->act, mc->hidden_act, sizeof mc->hidden_act);
    mc->attention_bias = get_bool(r, "attention_bias", 0);
    mc->mlp_bias = get_bool(r, "mlp_bias", 0);
}

static void read_bert(rd *r, rlx_model_config *mc, const defaults *df)
{
    mc->vocab_size = get_int(r, "vocab_size", df->vocab);
    mc->hidden_size = get_int(r, "hidden_size", df->hidden);
    mc->intermediate_size = get_int(r, "intermediate_size", df->inter);
    mc->num_layers = get_int(r, "num_hidden_layers", df->layers);
    mc->num_heads = get_int(r, "num_attention_heads", df->heads);
    check_positive(r, "hidden_size", mc->hidden_size);
    check_positive(r, "num_attention_heads", mc->num_heads);
    check_layers(r, "num_hidden_layers", mc->num_layers);
    if (r->rc) return;
    mc->num_kv_heads = mc->num_heads;
    mc->head_dim = mc->hidden_size / mc->num_heads;
    mc->max_position_embeddings = get_int(r, "max_position_embeddings", df->max_pos);
    mc->norm_eps = get_num(r, "layer_norm_eps", df->eps);
    mc->type_vocab_size = get_int(r, "type_vocab_size", 2);
    get_str(r, "hidden_act", df->act, mc->hidden_act, sizeof mc->hidden_act);
    mc->attention_bias = 1; /* BERT's linear layers all carry biases */
    mc->mlp_bias = 1;
}

/* SAM: the description is the vision encoder's (SamVisionConfig defaults). */
static void read_sam(rd *r, rlx_model_config *mc)
{
    json_t *vc = get(r, "vision_config");
    if (vc && !json_is_object(vc)) {
        type_error(r, "vision_config", "an object", vc);
        return;
    }
    rd v = {r->origin, vc, "vision_config.", r->d, r->rc};
    mc->hidden_size = get_int(&v, "hidden_size", 768);
    mc->num_layers = get_int(&v, "num_hidden_layers", 12);
    mc->num_heads = get_int(&v, "num_attention_heads", 12);
    check_positive(&v, "hidden_size", mc->hidden_size);
    check_positive(&v, "num_attention_heads", mc->num_heads);
    check_layers(&v, "num_hidden_layers", mc->num_layers);
    if (!v.rc) {
        mc->num_kv_heads = mc->num_heads;
        mc->head_dim = mc->hidden_size / mc->num_heads;
        double ratio = get_ratio(&v, "mlp_ratio", 4.0);
        mc->intermediate_size = get_int(&v, "mlp_dim", (int64_t)(mc->hidden_size * ratio));
        mc->norm_eps = get_num(&v, "layer_norm_eps", 1e-6);
        get_str(&v, "hidden_act", "gelu", mc->hidden_act, sizeof mc->hidden_act);
        mc->attention_bias = get_bool(&v, "qkv_bias", 1);
    }
    r->rc = v.rc;
}

/* diffusers FLUX transformers: FluxTransformer2DModel / Flux2Transformer2DModel. */
static void read_flux(rd *r, rlx_model_config *mc)
{
    int flux2 = strncmp(mc->architecture, "Flux2", 5) == 0;
    mc->num_heads = get_int(r, "num_attention_heads", 24);
    mc->head_dim = get_int(r, "attention_head_dim", 128);
    check_positive(r, "num_attention_heads", mc->num_heads);
    check_positive(r, "attention_head_dim", mc->head_dim);
    if (r->rc) return;
    mc->num_kv_heads = mc->num_heads;
    mc->hidden_size = mc->num_heads * mc->head_dim;
    mc->num_layers = get_int(r, "num_layers", 19);
    check_layers(r, "num_layers", mc->num_layers);
    mc->intermediate_size = (int64_t)(mc->hidden_size * get_ratio(r, "mlp_ratio", flux2 ? 3.0 : 4.0));
    mc->norm_eps = get_num(r, "eps", 1e-6);
    mc->rope_theta = get_num(r, "rope_theta", flux2 ? 2000.0 : 10000.0);
    snprintf(mc->rope_type, sizeof mc->rope_type, "default");
    mc->in_channels = get_int(r, "in_channels", flux2 ? 128 : 64);
    mc->context_dim = get_int(r, "joint_attention_dim", flux2 ? 15360 : 4096);
    mc->pooled_dim = flux2 ? 0 : get_int(r, "pooled_projection_dim", 768);
    json_t *axes = get(r, "axes_dims_rope");
    mc->rope_axes = json_is_array(axes) ? (int32_t)json_array_size(axes) : flux2 ? 4 : 3;
}

static const char supported_types[] = "llama, qwen3, gemma2, gemma3_text, bert, sam, flux";

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
        const char *c = json_string_value(cls);
        if (strncmp(c, "Flux", 4) != 0 || strlen(c) >= sizeof mc->architecture)
            return fail(r, RLX_ERR_UNSUPPORTED,
                        "_class_name \"%.64s\" is not a supported diffusers model (Flux*)", c);
        strcpy(mc->architecture, c);
        strcpy(mc->model_type, "flux");
        read_dtype(r, mc);
        read_flux(r, mc);
        return r->rc;
    }
    if (!mt) return fail(r, RLX_ERR_INVALID, "model_type: missing");
    if (!json_is_string(mt)) return type_error(r, "model_type", "a string", mt);
    const char *type = json_string_value(mt);
    const defaults *df = find_defaults(type);
    if (!df && strcmp(type, "sam") != 0)
        return fail(r, RLX_ERR_UNSUPPORTED, "model_type \"%.64s\" is not supported (%s)", type,
                    supported_types);
    strcpy(mc->model_type, type);
    read_dtype(r, mc);
    if (strcmp(type, "sam") == 0) {
        mc->tie_word_embeddings = get_bool(r, "tie_word_embeddings", 1);
        read_sam(r, mc);
        return r->rc;
    }
    mc->tie_word_embeddings = get_bool(r, "tie_word_embeddings", df->tie);
    read_tokens(r, mc, df->bos, df->eos);
    if (strcmp(type, "bert") == 0) {
        read_bert(r, mc, df);
        return r->rc;
    }
    read_causal(r, mc, df);
    if (r->rc) return r->rc;
    mc->norm_eps = get_num(r, "rms_norm_eps", df->eps);
    int gemma = strncmp(type, "gemma", 5) == 0;
    if (gemma) {
        mc->query_pre_attn_scalar = get_num(r, "query_pre_attn_scalar", df->qpas);
        mc->attn_logit_softcap = json_object_get(r->obj, "attn_logit_softcapping")
                                     ? get_num(r, "attn_logit_softcapping", 0)
                                     : df->attn_cap;
        mc->final_logit_softcap = json_object_get(r->obj, "final_logit_softcapping")
                                      ? get_num(r, "final_logit_softcapping", 0)
                                      : df->final_cap;
    }
    if (gemma) {
        mc->sliding_window = json_object_get(r->obj, "sliding_window")
                                 ? get_int(r, "sliding_window", 0)
                                 : df->sliding;
    } else if (strcmp(type, "qwen3") == 0 && get_bool(r, "use_sliding_window", 0)) {
        mc->sliding_window = json_object_get(r->obj, "sliding_window")
                                 ? get_int(r, "sliding_window", 0)
                                 : df->sliding;
    }
    if (mc->sliding_window < 0) fail(r, RLX_ERR_INVALID, "sliding_window: negative");
    read_rope(r, mc, df, strcmp(type, "gemma3_text") == 0);
    if (!r->rc) read_layer_types(r, mc, type);
    return r->rc;
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

/* "a.b.2.c": object members by name, array elements by index. */
static json_t *lookup_dotted(json_t *root, const char *key)
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
