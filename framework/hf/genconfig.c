/* generation_config.json: optional; HF GenerationConfig defaults when absent. */
#include "base/internal.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int bad(rlx_diag *d, const char *file, const char *key, const char *want, json_t *v)
{
    return rlx_diag_set(d, RLX_ERR_INVALID, "%s: %s: expected %s, got %s", file, key, want,
                        rlx__json_type_name(v));
}

static int read_num(json_t *root, const char *file, const char *key, double *out, rlx_diag *d)
{
    json_t *v = json_object_get(root, key);
    if (!v || json_is_null(v)) return RLX_OK;
    if (!json_is_number(v)) return bad(d, file, key, "a number", v);
    *out = json_number_value(v);
    return RLX_OK;
}

RLX_API int rlx_generation_config_load(const char *dir, const rlx_model_config *mc,
                                       rlx_generation_config *out, rlx_diag *d)
{
    if (!out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_generation_config_load: out is NULL");
    memset(out, 0, sizeof *out);
    out->bos_token_id = mc ? mc->bos_token_id : -1;
    if (mc) {
        out->n_eos = mc->n_eos > RLX_MAX_EOS ? RLX_MAX_EOS : mc->n_eos;
        memcpy(out->eos_token_ids, mc->eos_token_ids, sizeof out->eos_token_ids);
    }
    out->temperature = 1.0;
    out->top_p = 1.0;
    out->top_k = 50;
    out->repetition_penalty = 1.0;
    if (!dir) return RLX_OK;

    char file[4096];
    snprintf(file, sizeof file, "%s/generation_config.json", dir);
    struct stat st;
    if (lstat(file, &st) != 0) return RLX_OK; /* optional; a dangling link is reported */
    char *buf;
    size_t len;
    int rc = rlx__read_small_file(file, RLX__MAX_JSON_FILE, &buf, &len, d);
    if (rc) return rc;
    json_t *root;
    rc = rlx__json_parse(buf, len, file, &root, d);
    free(buf);
    if (rc) return rc;
    if (!json_is_object(root)) {
        rc = rlx_diag_set(d, RLX_ERR_INVALID, "%s: expected an object, got %s", file,
                          rlx__json_type_name(root));
        json_decref(root);
        return rc;
    }
    json_t *v = json_object_get(root, "bos_token_id");
    if (json_is_integer(v)) out->bos_token_id = json_integer_value(v);
    else if (v && !json_is_null(v)) rc = bad(d, file, "bos_token_id", "an integer", v);

    v = json_object_get(root, "eos_token_id");
    if (!rc && json_is_integer(v)) {
        out->n_eos = 1;
        out->eos_token_ids[0] = json_integer_value(v);
    } else if (!rc && json_is_array(v)) {
        if (json_array_size(v) > RLX_MAX_EOS)
            rc = rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "%s: eos_token_id: %zu ids, at most %d supported",
                              file, json_array_size(v), RLX_MAX_EOS);
        for (size_t i = 0; !rc && i < json_array_size(v); i++) {
            json_t *x = json_array_get(v, i);
            if (!json_is_integer(x)) rc = bad(d, file, "eos_token_id", "integers", x);
            else out->eos_token_ids[i] = json_integer_value(x);
        }
        if (!rc) out->n_eos = (int32_t)json_array_size(v);
    } else if (!rc && v && !json_is_null(v)) {
        rc = bad(d, file, "eos_token_id", "an integer or an array", v);
    }

    v = json_object_get(root, "do_sample");
    if (!rc && json_is_boolean(v)) out->do_sample = json_is_true(v);
    else if (!rc && v && !json_is_null(v)) rc = bad(d, file, "do_sample", "a boolean", v);

    if (!rc) rc = read_num(root, file, "temperature", &out->temperature, d);
    if (!rc) rc = read_num(root, file, "top_p", &out->top_p, d);
    if (!rc) rc = read_num(root, file, "repetition_penalty", &out->repetition_penalty, d);
    v = json_object_get(root, "top_k");
    if (!rc && json_is_integer(v)) out->top_k = json_integer_value(v);
    else if (!rc && v && !json_is_null(v)) rc = bad(d, file, "top_k", "an integer", v);
    /* values no sampler can use: refused here, naming the key, not silently clamped */
    if (!rc && out->temperature < 0)
        rc = rlx_diag_set(d, RLX_ERR_INVALID, "%s: temperature: must be >= 0, got %g", file,
                          out->temperature);
    if (!rc && !(out->top_p > 0 && out->top_p <= 1))
        rc = rlx_diag_set(d, RLX_ERR_INVALID, "%s: top_p: must be in (0, 1], got %g", file,
                          out->top_p);
    if (!rc && out->top_k < 0)
        rc = rlx_diag_set(d, RLX_ERR_INVALID, "%s: top_k: must be >= 0, got %lld", file,
                          (long long)out->top_k);
    if (!rc && !(out->repetition_penalty > 0))
        rc = rlx_diag_set(d, RLX_ERR_INVALID, "%s: repetition_penalty: must be > 0, got %g", file,
                          out->repetition_penalty);
    json_decref(root);
    return rc;
}
