/* Stage parameters: a JSON object per stage; "{i}" in string values becomes the
 * repeat index, and a string value used as a number is parsed after substitution. */
#include "build/emit.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* s with every "{i}" replaced by the repeat index; NULL on allocation failure */
static char *substitute(const rlx_ctx *c, const char *s)
{
    char idx[24];
    snprintf(idx, sizeof idx, "%lld", (long long)(c->rep < 0 ? 0 : c->rep));
    size_t n = 0, il = strlen(idx);
    for (const char *p = s; *p; p++) n += (strncmp(p, "{i}", 3) == 0) ? il : 1;
    char *o = malloc(n + 1), *q = o;
    if (!o) return NULL;
    while (*s) {
        if (c->rep >= 0 && strncmp(s, "{i}", 3) == 0) {
            memcpy(q, idx, il);
            q += il;
            s += 3;
        } else {
            *q++ = *s++;
        }
    }
    *q = 0;
    return o;
}

static json_t *lookup(rlx_ctx *c, const char *key)
{
    if (!c || !key || !c->params) return NULL;
    return json_object_get(c->params, key);
}

/* a string value as a number, after substitution; 0 on success */
static int str_number(rlx_ctx *c, const char *key, const char *s, double *out)
{
    char *t = substitute(c, s), *end = NULL;
    if (!t) return -1;
    double v = strtod(t, &end);
    int ok = end != t && *end == 0;
    if (!ok) rg_ctx_fail(c, "param %s: \"%s\" is not a number", key, t);
    free(t);
    *out = v;
    return ok ? 0 : -1;
}

int64_t rg_param_int(rlx_ctx *c, const char *key, int64_t def)
{
    json_t *v = lookup(c, key);
    if (!v) return def;
    if (json_is_integer(v)) return (int64_t)json_integer_value(v);
    if (json_is_real(v)) return (int64_t)json_real_value(v);
    if (json_is_boolean(v)) return json_is_true(v);
    double d;
    if (json_is_string(v) && str_number(c, key, json_string_value(v), &d) == 0) return (int64_t)d;
    if (!json_is_string(v)) rg_ctx_fail(c, "param %s: expected an integer", key);
    return def;
}

double rg_param_float(rlx_ctx *c, const char *key, double def)
{
    json_t *v = lookup(c, key);
    if (!v) return def;
    if (json_is_number(v)) return json_number_value(v);
    if (json_is_boolean(v)) return json_is_true(v);
    double d;
    if (json_is_string(v) && str_number(c, key, json_string_value(v), &d) == 0) return d;
    if (!json_is_string(v)) rg_ctx_fail(c, "param %s: expected a number", key);
    return def;
}

const char *rg_param_str(rlx_ctx *c, const char *key, const char *def)
{
    json_t *v = lookup(c, key);
    if (!v) return def;
    if (!json_is_string(v)) {
        rg_ctx_fail(c, "param %s: expected a string", key);
        return def;
    }
    char **strs = realloc(c->strs, (c->n_strs + 1) * sizeof *strs);
    if (!strs) return def;
    c->strs = strs;
    char *t = substitute(c, json_string_value(v));
    if (!t) return def;
    strs[c->n_strs++] = t;
    return t;
}
