/* The flow API for model authors (rlx.h "flows") and the host's flow_* services. */
#include "build/flow.h"
#include <jansson.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int rg_flow_set_err(rlx_flow *f, const char *fmt, ...)
{
    if (f && !f->err[0]) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(f->err, sizeof f->err, fmt, ap);
        va_end(ap);
    }
    return RLX_ERR_INVALID;
}

RLX_API rlx_flow *rlx_flow_new(const char *name)
{
    rlx_flow *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->name = strdup(name ? name : "flow");
    if (!f->name) {
        free(f);
        return NULL;
    }
    return f;
}

RLX_API void rlx_flow_free(rlx_flow *f)
{
    if (!f) return;
    for (uint32_t i = 0; i < f->n_items; i++) {
        rg_flow_item *it = &f->items[i];
        free(it->name);
        free(it->n_key);
        if (it->params) json_decref(it->params);
        rlx_flow_free(it->body);
    }
    for (uint32_t i = 0; i < f->n_inputs; i++) free(f->inputs[i].name);
    free(f->inputs);
    free(f->items);
    free(f->name);
    free(f->origin);
    free(f);
}

/* the flow that new items go to: the innermost open repeat body */
static rlx_flow *target(rlx_flow *f) { return f->n_open ? f->open[f->n_open - 1] : f; }

static rg_flow_item *add_item(rlx_flow *f, int kind, const char *name)
{
    rg_flow_item *it = realloc(f->items, (f->n_items + 1) * sizeof *it);
    if (!it) return NULL;
    f->items = it;
    it = &f->items[f->n_items];
    memset(it, 0, sizeof *it);
    it->kind = kind;
    if (name && !(it->name = strdup(name))) return NULL;
    f->n_items++;
    return it;
}

RLX_API int rlx_flow_input(rlx_flow *f, const char *name, int dtype, uint32_t ndim, const int64_t *dims)
{
    if (!f || !name || !*name) return rg_flow_set_err(f, "flow input: a name is required");
    if (ndim > RLX_MAX_DIMS || (ndim && !dims))
        return rg_flow_set_err(f, "flow input %s: at most %d dims", name, RLX_MAX_DIMS);
    if (dtype < 0 || dtype >= RLX_DTYPE_COUNT)
        return rg_flow_set_err(f, "flow input %s: unknown dtype %d", name, dtype);
    for (uint32_t i = 0; i < f->n_inputs; i++)
        if (strcmp(f->inputs[i].name, name) == 0)
            return rg_flow_set_err(f, "flow input %s: declared twice", name);
    for (uint32_t i = 0; i < ndim; i++)
        if (dims[i] < -2) return rg_flow_set_err(f, "flow input %s: bad dim %lld", name, (long long)dims[i]);
    rg_flow_input *in = realloc(f->inputs, (f->n_inputs + 1) * sizeof *in);
    if (!in) return RLX_ERR_NOMEM;
    f->inputs = in;
    in = &f->inputs[f->n_inputs];
    memset(in, 0, sizeof *in);
    if (!(in->name = strdup(name))) return RLX_ERR_NOMEM;
    in->dtype = dtype;
    in->ndim = ndim;
    for (uint32_t i = 0; i < ndim; i++) in->dims[i] = dims[i];
    f->n_inputs++;
    return 0;
}

RLX_API int rlx_flow_input_fill(rlx_flow *f, const char *name, int fill)
{
    if (!f || !name) return RLX_ERR_INVALID;
    if (fill < RLX_FILL_NONE || fill > RLX_FILL_OPTIONAL)
        return rg_flow_set_err(f, "flow input %s: unknown fill %d", name, fill);
    for (uint32_t i = 0; i < f->n_inputs; i++)
        if (strcmp(f->inputs[i].name, name) == 0) return f->inputs[i].fill = fill, 0;
    return rg_flow_set_err(f, "flow input %s: not declared", name);
}

int rg_flow_stage_json(rlx_flow *f, const char *block, json_t *params)
{
    rlx_flow *t = target(f);
    rg_flow_item *it = add_item(t, FI_STAGE, block);
    if (!it) return RLX_ERR_NOMEM;
    it->params = params ? json_incref(params) : json_object();
    return it->params ? 0 : RLX_ERR_NOMEM;
}

RLX_API int rlx_flow_stage(rlx_flow *f, const char *block, const char *params_json)
{
    if (!f) return RLX_ERR_INVALID;
    if (!block || !*block) return rg_flow_set_err(f, "flow %s: a stage needs a block name", f->name);
    json_t *p = NULL;
    if (params_json && *params_json) {
        json_error_t e;
        p = json_loads(params_json, JSON_REJECT_DUPLICATES, &e);
        if (!p)
            return rg_flow_set_err(f, "stage %s: params are not valid JSON: %s (column %d)", block,
                                   e.text, e.column);
        if (!json_is_object(p)) {
            json_decref(p);
            return rg_flow_set_err(f, "stage %s: params must be a JSON object", block);
        }
    }
    int rc = rg_flow_stage_json(f, block, p);
    if (p) json_decref(p);
    return rc;
}

int rg_flow_adopt(rlx_flow *f, int kind, const char *name, int64_t n, const char *n_key,
                  rlx_flow *body)
{
    char *key = n_key ? strdup(n_key) : NULL;
    rg_flow_item *it = body && (key || !n_key) ? add_item(target(f), kind, name) : NULL;
    if (!it) {
        free(key);
        rlx_flow_free(body);
        return RLX_ERR_NOMEM;
    }
    it->n = n;
    it->n_key = key;
    it->body = body;
    return 0;
}

/* the public calls leave body with the caller: the item holds a copy */
static int add_body(rlx_flow *f, int kind, const char *name, int64_t n, const rlx_flow *body)
{
    rlx_flow *b = body ? rg_flow_clone(body) : rlx_flow_new("body");
    return b ? rg_flow_adopt(f, kind, name, n, NULL, b) : RLX_ERR_NOMEM;
}

RLX_API int rlx_flow_repeat(rlx_flow *f, int64_t n, const rlx_flow *body)
{
    if (!f) return RLX_ERR_INVALID;
    if (n < 0) return rg_flow_set_err(f, "flow %s: repeat count %lld is negative", f->name, (long long)n);
    if (n > RG_FLOW_MAX_REPEAT)
        return rg_flow_set_err(f, "flow %s: repeat count %lld is more than %d, the most a flow repeats",
                               f->name, (long long)n, RG_FLOW_MAX_REPEAT);
    return add_body(f, FI_REPEAT, NULL, n, body);
}

RLX_API int rlx_flow_sequence(rlx_flow *f, const rlx_flow *sub)
{
    if (!f) return RLX_ERR_INVALID;
    if (!sub) return rg_flow_set_err(f, "flow %s: sequence of nothing", f->name);
    return add_body(f, FI_SEQ, sub->name, 0, sub);
}

/* a decimal count (no sign, at most 9 digits) at *s; advances *s */
static int parse_count(const char **s, int64_t *out)
{
    const char *p = *s;
    int64_t v = 0;
    while (*p >= '0' && *p <= '9' && p - *s < 9) v = v * 10 + (*p++ - '0');
    if (p == *s || (*p >= '0' && *p <= '9')) return -1;
    *s = p;
    *out = v;
    return 0;
}

static int parse_layer(const char *c, rg_cond *o)
{
    o->kind = FC_LAYER;
    o->hi = -1;
    if (*c == '%') { /* layer%M=R */
        c++;
        if (parse_count(&c, &o->mod) || o->mod < 1 || *c++ != '=' || parse_count(&c, &o->lo) ||
            o->lo >= o->mod)
            return -1;
        return *c ? -1 : 0;
    }
    if (*c++ != '=' || parse_count(&c, &o->lo)) return -1;
    if (!*c) { /* layer=N */
        o->hi = o->lo;
        return 0;
    }
    if (strncmp(c, "..", 2)) return -1;
    c += 2;
    if (!*c) return 0; /* layer=A.. : A to the last */
    return parse_count(&c, &o->hi) || *c || o->hi < o->lo ? -1 : 0;
}

int rg_flow_cond_parse(const char *c, rg_cond *o)
{
    if (!c || !o) return -1;
    memset(o, 0, sizeof *o);
    if (*c == '!') {
        o->neg = 1;
        c++;
    }
    if (!strncmp(c, "phase=", 6)) {
        static const struct { const char *name; int phase; } ph[] = {
            {"prefill", RLX_PHASE_PREFILL}, {"decode", RLX_PHASE_DECODE}, {"encode", RLX_PHASE_ENCODE}};
        o->kind = FC_PHASE;
        for (size_t i = 0; i < sizeof ph / sizeof ph[0]; i++)
            if (!strcmp(c + 6, ph[i].name)) return o->phase = ph[i].phase, 0;
        return -1;
    }
    if (!strncmp(c, "config:", 7) && c[7]) {
        o->kind = FC_CONFIG;
        o->key = c + 7;
        return 0;
    }
    if (!strncmp(c, "layer", 5)) return parse_layer(c + 5, o);
    return -1;
}

int rg_flow_cond_valid(const char *c)
{
    rg_cond k;
    return rg_flow_cond_parse(c, &k);
}

RLX_API int rlx_flow_when(rlx_flow *f, const char *cond, const rlx_flow *body)
{
    if (!f) return RLX_ERR_INVALID;
    if (rg_flow_cond_valid(cond))
        return rg_flow_set_err(f, "flow %s: bad condition \"%s\" (%s)", f->name,
                               cond ? cond : "", RG_COND_FORMS);
    return add_body(f, FI_WHEN, cond, 0, body);
}

RLX_API int rlx_flow_custom(rlx_flow *f, const char *name, rlx_custom_emit_fn fn, void *user)
{
    if (!f) return RLX_ERR_INVALID;
    if (!fn) return rg_flow_set_err(f, "flow %s: custom stage %s has no function", f->name, name ? name : "");
    rg_flow_item *it = add_item(target(f), FI_CUSTOM, name ? name : "custom");
    if (!it) return RLX_ERR_NOMEM;
    it->fn = fn;
    it->user = user;
    return 0;
}

rlx_flow *rg_flow_clone(const rlx_flow *src)
{
    rlx_flow *f = rlx_flow_new(src->name);
    if (!f) return NULL;
    for (uint32_t i = 0; i < src->n_inputs; i++) {
        const rg_flow_input *in = &src->inputs[i];
        if (rlx_flow_input(f, in->name, in->dtype, in->ndim, in->dims)) goto fail;
        f->inputs[f->n_inputs - 1].fill = in->fill;
    }
    for (uint32_t i = 0; i < src->n_items; i++) {
        const rg_flow_item *s = &src->items[i];
        rg_flow_item *it = add_item(f, s->kind, s->name);
        if (!it) goto fail;
        it->n = s->n;
        it->fn = s->fn;
        it->user = s->user;
        if (s->params) it->params = json_deep_copy(s->params);
        if (s->n_key) it->n_key = strdup(s->n_key);
        if (s->body) it->body = rg_flow_clone(s->body);
        if ((s->params && !it->params) || (s->n_key && !it->n_key) || (s->body && !it->body))
            goto fail;
    }
    memcpy(f->err, src->err, sizeof f->err);
    if (src->origin && !(f->origin = strdup(src->origin))) goto fail;
    return f;
fail:
    rlx_flow_free(f);
    return NULL;
}

int rg_host_flow_stage(rlx_flow *f, const char *block, const char *params_json)
{
    return rlx_flow_stage(f, block, params_json);
}

int rg_host_flow_input_fill(rlx_flow *f, const char *name, int32_t fill) { return rlx_flow_input_fill(f, name, fill); }

const rlx_config *rg_host_flow_config(rlx_flow *f) { return f ? f->config : NULL; }

int rg_host_flow_input(rlx_flow *f, const char *name, int32_t dtype, uint32_t ndim, const int64_t *dims)
{
    return rlx_flow_input(f, name, dtype, ndim, dims);
}

int rg_host_flow_repeat_begin(rlx_flow *f, int64_t n)
{
    if (!f) return RLX_ERR_INVALID;
    if (f->n_open == (int)(sizeof f->open / sizeof f->open[0]))
        return rg_flow_set_err(f, "flow %s: repeats nested too deeply", f->name);
    int rc = rlx_flow_repeat(f, n, NULL);
    if (rc) return rc;
    rlx_flow *t = target(f);
    f->open[f->n_open++] = t->items[t->n_items - 1].body;
    return 0;
}

int rg_host_flow_repeat_end(rlx_flow *f)
{
    if (!f) return RLX_ERR_INVALID;
    if (!f->n_open) return rg_flow_set_err(f, "flow %s: flow_repeat_end without flow_repeat_begin", f->name);
    f->n_open--;
    return 0;
}

static void print_items(const rlx_flow *f, FILE *out, int depth)
{
    for (uint32_t i = 0; i < f->n_items; i++) {
        const rg_flow_item *it = &f->items[i];
        fprintf(out, "%*s", 2 * depth, "");
        switch (it->kind) {
        case FI_STAGE: {
            char *p = json_dumps(it->params, JSON_COMPACT | JSON_SORT_KEYS);
            fprintf(out, "stage %s %s\n", it->name, p ? p : "{}");
            free(p);
            break;
        }
        case FI_CUSTOM: fprintf(out, "custom %s\n", it->name); break;
        case FI_REPEAT:
            if (it->n_key) fprintf(out, "repeat config:%s (i = 0..n-1)\n", it->n_key);
            else fprintf(out, "repeat %lld (i = 0..%lld)\n", (long long)it->n, (long long)it->n - 1);
            break;
        case FI_SEQ: fprintf(out, "sequence %s\n", it->name ? it->name : ""); break;
        case FI_WHEN: fprintf(out, "when %s\n", it->name); break;
        }
        if (it->body) print_items(it->body, out, depth + 1);
    }
}

RLX_API void rlx_flow_print(const rlx_flow *f, FILE *out)
{
    if (!f || !out) return;
    fprintf(out, "flow %s\n", f->name);
    for (uint32_t i = 0; i < f->n_inputs; i++) {
        const rg_flow_input *in = &f->inputs[i];
        fprintf(out, "  input %s %s [", in->name, rlx_dtype_name(in->dtype));
        for (uint32_t d = 0; d < in->ndim; d++) {
            if (d) fputs(", ", out);
            if (in->dims[d] == -1) fputs("T", out);
            else if (in->dims[d] == -2) fputs("S", out);
            else fprintf(out, "%lld", (long long)in->dims[d]);
        }
        fprintf(out, "]\n");
    }
    print_items(f, out, 1);
}
