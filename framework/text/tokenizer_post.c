/* Post-processors of tokenizer.json for a single sequence: TemplateProcessing,
 * BertProcessing, RobertaProcessing, ByteLevel (ids unchanged) and Sequence. */
#include "text/tokenizer_internal.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the "single" template flattened: runs of fixed ids with -1 standing for sequence A */
struct tk_post {
    int32_t *items;
    size_t n;
    tk_post **sub;
    size_t n_sub;
    int is_seq;
};

void tk_post_free(tk_post *p)
{
    if (!p) return;
    for (size_t i = 0; i < p->n_sub; i++) tk_post_free(p->sub[i]);
    free(p->sub);
    free(p->items);
    free(p);
}

static int push(tk_post *p, int32_t v)
{
    int32_t *q = realloc(p->items, (p->n + 1) * sizeof *q);
    if (!q) return -1;
    p->items = q;
    p->items[p->n++] = v;
    return 0;
}

static int load_template(const tk_jctx *c, json_t *j, const char *path, tk_post *p)
{
    json_t *single = json_object_get(j, "single"), *sp = json_object_get(j, "special_tokens");
    char ip[256];
    if (!json_is_array(single)) return tk_jerr(c, path, "\"single\" must be an array");
    for (size_t i = 0; i < json_array_size(single); i++) {
        json_t *it = json_array_get(single, i);
        snprintf(ip, sizeof ip, "%s.single[%zu]", path, i);
        json_t *tok = json_object_get(it, "SpecialToken"), *seq = json_object_get(it, "Sequence");
        if (json_is_object(seq)) {
            const char *id = json_string_value(json_object_get(seq, "id"));
            if (!id || strcmp(id, "A"))
                return tk_jerr(c, ip, "a single-sequence template can only hold sequence \"A\"");
            if (push(p, -1)) goto nomem;
        } else if (json_is_object(tok)) {
            const char *id = json_string_value(json_object_get(tok, "id"));
            if (!id) return tk_jerr(c, ip, "SpecialToken needs a string \"id\"");
            json_t *ent = json_object_get(sp, id), *ids = json_object_get(ent, "ids");
            if (!json_is_array(ids))
                return tk_jerr(c, ip, "special token '%s' is not in %s.special_tokens (with \"ids\")", id, path);
            for (size_t k = 0; k < json_array_size(ids); k++) {
                json_t *v = json_array_get(ids, k);
                if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= INT32_MAX)
                    return tk_jerr(c, path, "special_tokens.%s.ids[%zu] must be a token id", id, k);
                if (push(p, (int32_t)json_integer_value(v))) goto nomem;
            }
        } else {
            return tk_jerr(c, ip, "must be {\"SpecialToken\": …} or {\"Sequence\": …}");
        }
    }
    return 0;
nomem:
    return rlx_diag_set(c->d, RLX_ERR_NOMEM, "%s: out of memory", c->origin);
}

static int token_pair_id(const tk_jctx *c, json_t *j, const char *path, const char *key, int32_t *id)
{
    json_t *v = json_object_get(j, key);
    json_int_t n = json_integer_value(json_array_get(v, 1));
    /* a negative id would read as the -1 that marks sequence A */
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(json_array_get(v, 1)) || n < 0 ||
        n >= INT32_MAX)
        return tk_jerr(c, path, "\"%s\" must be [token, id]", key);
    *id = (int32_t)n;
    return 0;
}

/* one item of a Sequence */
static int load_sub(const tk_jctx *c, json_t *item, const char *path, size_t i, void *owner)
{
    tk_post *p = owner;
    int rc = tk_post_load(c, item, path, &p->sub[i]);
    if (!rc) p->n_sub++;
    return rc;
}

int tk_post_load(const tk_jctx *c, json_t *j, const char *path, tk_post **out)
{
    *out = NULL;
    const char *type;
    char tpath[256];
    int rc = tk_jtype(c, j, path, &type, tpath, sizeof tpath);
    if (rc) return rc;
    tk_post *p = calloc(1, sizeof *p);
    if (!p) return rlx_diag_set(c->d, RLX_ERR_NOMEM, "%s: out of memory", c->origin);
    if (!strcmp(type, "TemplateProcessing")) {
        if ((rc = load_template(c, j, path, p))) goto fail;
    } else if (!strcmp(type, "BertProcessing") || !strcmp(type, "RobertaProcessing")) {
        int32_t cls, sep;
        if ((rc = token_pair_id(c, j, path, "cls", &cls)) || (rc = token_pair_id(c, j, path, "sep", &sep)))
            goto fail;
        if (push(p, cls) || push(p, -1) || push(p, sep)) goto nomem;
    } else if (!strcmp(type, "ByteLevel")) {
        if (push(p, -1)) goto nomem; /* only offsets change */
    } else if (!strcmp(type, "Sequence")) {
        json_t *arr = tk_jarray(c, j, path, "processors", &rc);
        if (!arr) goto fail;
        p->is_seq = 1;
        if (!(p->sub = calloc(json_array_size(arr) + 1, sizeof *p->sub))) goto nomem;
        if ((rc = tk_jeach(c, arr, path, "processors", load_sub, p))) goto fail;
    } else {
        rc = rlx_diag_set(c->d, RLX_ERR_UNSUPPORTED,
                          "%s: %s: unsupported post-processor '%s' (supported: TemplateProcessing, "
                          "BertProcessing, RobertaProcessing, ByteLevel, Sequence)",
                          c->origin, tpath, type);
        goto fail;
    }
    *out = p;
    return 0;
nomem:
    rc = rlx_diag_set(c->d, RLX_ERR_NOMEM, "%s: out of memory", c->origin);
fail:
    tk_post_free(p);
    return rc;
}

int tk_post_apply(const tk_post *p, const int32_t *ids, size_t n, tk_ids *out)
{
    if (!p->is_seq) {
        for (size_t i = 0; i < p->n; i++) {
            if (p->items[i] >= 0) {
                if (tk_ids_push(out, p->items[i])) return -1;
            } else {
                for (size_t k = 0; k < n; k++)
                    if (tk_ids_push(out, ids[k])) return -1;
            }
        }
        return 0;
    }
    /* Sequence: each processor works on the previous one's output */
    tk_ids cur = {0}, next = {0};
    int rc = 0;
    for (size_t k = 0; k < n && !rc; k++) rc = tk_ids_push(&cur, ids[k]);
    for (size_t i = 0; !rc && i < p->n_sub; i++) {
        next.n = 0;
        rc = tk_post_apply(p->sub[i], cur.v, cur.n, &next);
        tk_ids t = cur; cur = next; next = t;
    }
    for (size_t k = 0; !rc && k < cur.n; k++) rc = tk_ids_push(out, cur.v[k]);
    free(cur.v);
    free(next.v);
    return rc;
}
