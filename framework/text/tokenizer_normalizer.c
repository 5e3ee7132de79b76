/* Normalizers of tokenizer.json: NFC/NFD/NFKC/NFKD (libunistring), Lowercase, Replace,
 * Prepend, Strip and Sequence. */
#include "text/tokenizer_internal.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unicase.h>
#include <uninorm.h>

typedef enum { N_NFC, N_NFD, N_NFKC, N_NFKD, N_LOWER, N_REPLACE, N_PREPEND, N_STRIP, N_SEQ } nkind;

struct tk_normalizer {
    nkind kind;
    pcre2_code *re;    /* Replace */
    char *content;     /* Replace, Prepend */
    int left, right;   /* Strip */
    tk_normalizer **sub;
    size_t n_sub;
};

void tk_normalizer_free(tk_normalizer *n)
{
    if (!n) return;
    for (size_t i = 0; i < n->n_sub; i++) tk_normalizer_free(n->sub[i]);
    free(n->sub);
    if (n->re) pcre2_code_free(n->re);
    free(n->content);
    free(n);
}

/* one item of a Sequence */
static int load_sub(const tk_jctx *c, json_t *item, const char *path, size_t i, void *owner)
{
    tk_normalizer *n = owner;
    int rc = tk_normalizer_load(c, item, path, &n->sub[i]);
    if (!rc) n->n_sub++;
    return rc;
}

int tk_normalizer_load(const tk_jctx *c, json_t *j, const char *path, tk_normalizer **out)
{
    *out = NULL;
    const char *type;
    char tpath[256];
    int rc = tk_jtype(c, j, path, &type, tpath, sizeof tpath);
    if (rc) return rc;
    tk_normalizer *n = calloc(1, sizeof *n);
    if (!n) return rlx_diag_set(c->d, RLX_ERR_NOMEM, "%s: out of memory", c->origin);
    if (!strcmp(type, "NFC")) n->kind = N_NFC;
    else if (!strcmp(type, "NFD")) n->kind = N_NFD;
    else if (!strcmp(type, "NFKC")) n->kind = N_NFKC;
    else if (!strcmp(type, "NFKD")) n->kind = N_NFKD;
    else if (!strcmp(type, "Lowercase")) n->kind = N_LOWER;
    else if (!strcmp(type, "Replace")) {
        n->kind = N_REPLACE;
        const char *pat, *content = NULL;
        int is_re;
        if ((rc = tk_jpattern(c, j, path, &pat, &is_re)) ||
            (rc = tk_jstr(c, j, path, "content", &content)))
            goto fail;
        if (!content) {
            rc = tk_jerr(c, path, "\"content\" is missing");
            goto fail;
        }
        if (!(n->re = tk_regex_compile(c, path, pat, !is_re))) {
            rc = RLX_ERR_INVALID;
            goto fail;
        }
        if (!(n->content = strdup(content))) goto nomem;
    } else if (!strcmp(type, "Prepend")) {
        n->kind = N_PREPEND;
        const char *p = NULL;
        if ((rc = tk_jstr(c, j, path, "prepend", &p))) goto fail;
        if (!p) {
            rc = tk_jerr(c, path, "\"prepend\" is missing");
            goto fail;
        }
        if (!(n->content = strdup(p))) goto nomem;
    } else if (!strcmp(type, "Strip")) {
        n->kind = N_STRIP;
        n->left = n->right = 1;
        if ((rc = tk_jbool(c, j, path, "strip_left", &n->left)) ||
            (rc = tk_jbool(c, j, path, "strip_right", &n->right)))
            goto fail;
    } else if (!strcmp(type, "Sequence")) {
        n->kind = N_SEQ;
        json_t *arr = tk_jarray(c, j, path, "normalizers", &rc);
        if (!arr) goto fail;
        if (!(n->sub = calloc(json_array_size(arr) + 1, sizeof *n->sub))) goto nomem;
        if ((rc = tk_jeach(c, arr, path, "normalizers", load_sub, n))) goto fail;
    } else {
        rc = rlx_diag_set(c->d, RLX_ERR_UNSUPPORTED,
                          "%s: %s: unsupported normalizer '%s' (supported: NFC, NFD, NFKC, NFKD, "
                          "Lowercase, Replace, Prepend, Strip, Sequence)",
                          c->origin, tpath, type);
        goto fail;
    }
    *out = n;
    return 0;
nomem:
    rc = rlx_diag_set(c->d, RLX_ERR_NOMEM, "%s: out of memory", c->origin);
fail:
    tk_normalizer_free(n);
    return rc;
}

static int replace_all(const pcre2_code *re, const char *content, const char *s, size_t len,
                       tk_buf *out)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md) return -1;
    size_t pos = 0, ms, me, cl = strlen(content);
    int rc = 0, m;
    while ((m = tk_regex_next(re, md, s, len, pos, &ms, &me)) == 1) {
        if (tk_buf_put(out, s + pos, ms - pos) || tk_buf_put(out, content, cl)) {
            rc = -1;
            break;
        }
        pos = me;
    }
    if (m < 0) rc = -1;
    if (!rc && tk_buf_put(out, s + pos, len - pos)) rc = -1;
    pcre2_match_data_free(md);
    return rc;
}

static int apply_one(const tk_normalizer *n, const char *s, size_t len, tk_buf *out)
{
    switch (n->kind) {
    case N_NFC: case N_NFD: case N_NFKC: case N_NFKD: {
        uninorm_t nf = n->kind == N_NFC ? UNINORM_NFC : n->kind == N_NFD ? UNINORM_NFD
                     : n->kind == N_NFKC ? UNINORM_NFKC : UNINORM_NFKD;
        size_t rl = 0;
        uint8_t *r = u8_normalize(nf, (const uint8_t *)s, len, NULL, &rl);
        if (!r && len) return -1;
        int rc = tk_buf_put(out, r, rl);
        free(r);
        return rc;
    }
    case N_LOWER: {
        size_t rl = 0;
        uint8_t *r = u8_tolower((const uint8_t *)s, len, NULL, NULL, NULL, &rl);
        if (!r && len) return -1;
        int rc = tk_buf_put(out, r, rl);
        free(r);
        return rc;
    }
    case N_REPLACE: return replace_all(n->re, n->content, s, len, out);
    case N_PREPEND:
        /* tokenizers prepends only to non-empty strings */
        if (len && tk_buf_put(out, n->content, strlen(n->content))) return -1;
        return tk_buf_put(out, s, len);
    case N_STRIP: {
        size_t a = 0, b = len, adv;
        while (n->left && a < b && tk_is_space_cp(tk_utf8_decode(s + a, b - a, &adv))) a += adv;
        while (n->right && b > a) {
            size_t k = b - 1;
            while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
            if (!tk_is_space_cp(tk_utf8_decode(s + k, b - k, &adv))) break;
            b = k;
        }
        return tk_buf_put(out, s + a, b - a);
    }
    case N_SEQ: {
        tk_buf cur = {0}, next = {0};
        if (tk_buf_put(&cur, s, len)) return -1;
        for (size_t i = 0; i < n->n_sub; i++) {
            next.n = 0;
            if (apply_one(n->sub[i], cur.p, cur.n, &next) || tk_buf_put(&next, "", 0)) {
                tk_buf_free(&cur);
                tk_buf_free(&next);
                return -1;
            }
            tk_buf t = cur; cur = next; next = t;
        }
        int rc = tk_buf_put(out, cur.p, cur.n);
        tk_buf_free(&cur);
        tk_buf_free(&next);
        return rc;
    }
    }
    return -1;
}

int tk_normalizer_apply(const tk_normalizer *n, const char *s, size_t len, tk_buf *out)
{
    out->n = 0;
    if (tk_buf_put(out, "", 0)) return -1;
    return apply_one(n, s, len, out);
}
