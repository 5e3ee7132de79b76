/* Decoders of tokenizer.json: ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace,
 * BPEDecoder and Sequence. Each maps a list of token strings to a new list; the
 * final list is concatenated. */
#include "text/tokenizer_internal.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { D_BYTELEVEL, D_REPLACE, D_BYTEFALLBACK, D_FUSE, D_STRIP, D_METASPACE, D_BPE, D_SEQ } dkind;

struct tk_decoder {
    dkind kind;
    pcre2_code *re;      /* Replace */
    char *content;       /* Replace: content; Strip: the char; Metaspace: replacement; BPE: suffix */
    int64_t start, stop; /* Strip */
    int prepend;         /* Metaspace: prepend_scheme != never */
    tk_decoder **sub;
    size_t n_sub;
};

void tk_decoder_free(tk_decoder *d)
{
    if (!d) return;
    for (size_t i = 0; i < d->n_sub; i++) tk_decoder_free(d->sub[i]);
    free(d->sub);
    if (d->re) pcre2_code_free(d->re);
    free(d->content);
    free(d);
}

/* one item of a Sequence */
static int load_sub(const tk_jctx *c, json_t *item, const char *path, size_t i, void *owner)
{
    tk_decoder *d = owner;
    int rc = tk_decoder_load(c, item, path, &d->sub[i]);
    if (!rc) d->n_sub++;
    return rc;
}

int tk_decoder_load(const tk_jctx *c, json_t *j, const char *path, tk_decoder **out)
{
    *out = NULL;
    const char *type;
    char tpath[256];
    int rc = tk_jtype(c, j, path, &type, tpath, sizeof tpath);
    if (rc) return rc;
    tk_decoder *d = calloc(1, sizeof *d);
    if (!d) return rlx_diag_set(c->d, RLX_ERR_NOMEM, "%s: out of memory", c->origin);
    const char *s = NULL;
    if (!strcmp(type, "ByteLevel")) d->kind = D_BYTELEVEL;
    else if (!strcmp(type, "ByteFallback")) d->kind = D_BYTEFALLBACK;
    else if (!strcmp(type, "Fuse")) d->kind = D_FUSE;
    else if (!strcmp(type, "Replace")) {
        d->kind = D_REPLACE;
        const char *pat;
        int is_re;
        if ((rc = tk_jpattern(c, j, path, &pat, &is_re)) || (rc = tk_jstr(c, j, path, "content", &s)))
            goto fail;
        if (!s) {
            rc = tk_jerr(c, path, "\"content\" is missing");
            goto fail;
        }
        if (!(d->re = tk_regex_compile(c, path, pat, !is_re))) {
            rc = RLX_ERR_INVALID;
            goto fail;
        }
    } else if (!strcmp(type, "Strip")) {
        d->kind = D_STRIP;
        if ((rc = tk_jstr(c, j, path, "content", &s)) || (rc = tk_jint(c, j, path, "start", &d->start)) ||
            (rc = tk_jint(c, j, path, "stop", &d->stop)))
            goto fail;
        if (!s) s = " ";
        /* tokenizers' content is one char; an empty one would make decode loop start times */
        if (!*s || tk_utf8_len((unsigned char)*s) != strlen(s)) {
            rc = tk_jerr(c, path, "\"content\" must be one character");
            goto fail;
        }
    } else if (!strcmp(type, "Metaspace")) {
        d->kind = D_METASPACE;
        const char *scheme = NULL;
        int aps = 1;
        s = "\xE2\x96\x81";
        if ((rc = tk_jstr(c, j, path, "replacement", &s)) ||
            (rc = tk_jstr(c, j, path, "prepend_scheme", &scheme)) ||
            (rc = tk_jbool(c, j, path, "add_prefix_space", &aps)))
            goto fail;
        d->prepend = scheme ? strcmp(scheme, "never") != 0 : aps;
    } else if (!strcmp(type, "BPEDecoder")) {
        d->kind = D_BPE;
        s = "</w>";
        if ((rc = tk_jstr(c, j, path, "suffix", &s))) goto fail;
    } else if (!strcmp(type, "Sequence")) {
        d->kind = D_SEQ;
        json_t *arr = tk_jarray(c, j, path, "decoders", &rc);
        if (!arr) goto fail;
        if (!(d->sub = calloc(json_array_size(arr) + 1, sizeof *d->sub))) goto nomem;
        if ((rc = tk_jeach(c, arr, path, "decoders", load_sub, d))) goto fail;
    } else {
        rc = rlx_diag_set(c->d, RLX_ERR_UNSUPPORTED,
                          "%s: %s: unsupported decoder '%s' (supported: ByteLevel, Replace, "
                          "ByteFallback, Fuse, Strip, Metaspace, BPEDecoder, Sequence)",
                          c->origin, tpath, type);
        goto fail;
    }
    if (s && !(d->content = strdup(s))) goto nomem;
    *out = d;
    return 0;
nomem:
    rc = rlx_diag_set(c->d, RLX_ERR_NOMEM, "%s: out of memory", c->origin);
fail:
    tk_decoder_free(d);
    return rc;
}

/* Length of the valid UTF-8 sequence at s (0 if invalid); *sub: bytes of its maximal
 * invalid prefix (what one U+FFFD replaces, as Rust's from_utf8_lossy does). */
static size_t utf8_valid_at(const unsigned char *s, size_t n, size_t *sub)
{
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else {
        *sub = 1;
        return 0;
    }
    size_t i = 1;
    for (; i < need && i < n; i++) {
        unsigned char l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (s[i] < l || s[i] > h) break;
    }
    if (i == need) return need;
    *sub = i;
    return 0;
}

static int utf8_lossy(const char *s, size_t n, tk_buf *out)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        size_t sub = 1, l = utf8_valid_at(u + i, n - i, &sub);
        if (l) {
            if (tk_buf_put(out, s + i, l)) return -1;
            i += l;
        } else {
            if (tk_buf_put(out, "\xEF\xBF\xBD", 3)) return -1;
            i += sub;
        }
    }
    return tk_buf_put(out, "", 0);
}

static int utf8_valid(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t sub, l = utf8_valid_at((const unsigned char *)s + i, n - i, &sub);
        if (!l) return 0;
        i += l;
    }
    return 1;
}

static int byte_token(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char ch = s[k];
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'A' && ch <= 'F' ? ch - 'A' + 10
              : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static int replace_str(const pcre2_code *re, pcre2_match_data *md, const char *content,
                       const char *s, size_t n, tk_buf *out)
{
    size_t pos = 0, ms, me;
    int m;
    while ((m = tk_regex_next(re, md, s, n, pos, &ms, &me)) == 1) {
        if (tk_buf_put(out, s + pos, ms - pos) || tk_buf_put(out, content, strlen(content))) return -1;
        pos = me;
    }
    if (m < 0) return -1;
    return tk_buf_put(out, s + pos, n - pos);
}

static int apply_one(const tk_decoder *d, tk_pieces *in, tk_pieces *out, tk_buf *tmp)
{
    tk_pieces_clear(out);
    size_t n = 0;
    const char *s = NULL;
    switch (d->kind) {
    case D_SEQ: return -2;
    case D_BYTELEVEL: {
        tmp->n = 0;
        for (size_t i = 0; i < in->n; i++) {
            s = tk_piece(in, i, &n);
            size_t mark = tmp->n, adv;
            int ok = 1;
            for (size_t k = 0; k < n && ok; k += adv) {
                int b = tk_cp_to_byte(tk_utf8_decode(s + k, n - k, &adv));
                if (b < 0) ok = 0;
                else if (tk_buf_putc(tmp, (char)b)) return -1;
            }
            if (!ok) { /* a token outside the byte alphabet keeps its own bytes */
                tmp->n = mark;
                if (tk_buf_put(tmp, s, n)) return -1;
            }
        }
        tk_buf lossy = {0};
        int rc = utf8_lossy(tmp->p ? tmp->p : "", tmp->n, &lossy);
        if (!rc) rc = tk_pieces_add(out, lossy.p, lossy.n);
        tk_buf_free(&lossy);
        return rc;
    }
    case D_BYTEFALLBACK: {
        tmp->n = 0; /* pending bytes */
        for (size_t i = 0; i <= in->n; i++) {
            int b = -1;
            if (i < in->n) {
                s = tk_piece(in, i, &n);
                b = byte_token(s, n);
            }
            if (b >= 0) {
                if (tk_buf_putc(tmp, (char)b)) return -1;
                continue;
            }
            if (tmp->n) {
                if (utf8_valid(tmp->p, tmp->n)) {
                    if (tk_pieces_add(out, tmp->p, tmp->n)) return -1;
                } else {
                    for (size_t k = 0; k < tmp->n; k++)
                        if (tk_pieces_add(out, "\xEF\xBF\xBD", 3)) return -1;
                }
                tmp->n = 0;
            }
            if (i < in->n && tk_pieces_add(out, s, n)) return -1;
        }
        return 0;
    }
    case D_FUSE:
        if (tk_pieces_add(out, "", 0)) return -1;
        for (size_t i = 0; i < in->n; i++) {
            s = tk_piece(in, i, &n);
            if (tk_pieces_extend_last(out, s, n)) return -1;
        }
        return 0;
    case D_REPLACE: {
        pcre2_match_data *md = pcre2_match_data_create(1, NULL);
        if (!md) return -1;
        int rc = 0;
        for (size_t i = 0; !rc && i < in->n; i++) {
            s = tk_piece(in, i, &n);
            tmp->n = 0;
            rc = replace_str(d->re, md, d->content, s, n, tmp);
            if (!rc) rc = tk_pieces_add(out, tmp->p ? tmp->p : "", tmp->n);
        }
        pcre2_match_data_free(md);
        return rc;
    }
    case D_STRIP: {
        size_t cl = strlen(d->content);
        for (size_t i = 0; i < in->n; i++) {
            s = tk_piece(in, i, &n);
            size_t a = 0, b = n;
            for (int64_t k = 0; k < d->start && b - a >= cl && !memcmp(s + a, d->content, cl); k++) a += cl;
            for (int64_t k = 0; k < d->stop && b - a >= cl && !memcmp(s + b - cl, d->content, cl); k++) b -= cl;
            if (tk_pieces_add(out, s + a, b - a)) return -1;
        }
        return 0;
    }
    case D_METASPACE: {
        size_t rl = strlen(d->content);
        for (size_t i = 0; i < in->n; i++) {
            s = tk_piece(in, i, &n);
            tmp->n = 0;
            for (size_t k = 0; k < n;) {
                if (rl && n - k >= rl && !memcmp(s + k, d->content, rl)) {
                    if (tk_buf_putc(tmp, ' ')) return -1;
                    k += rl;
                } else if (tk_buf_putc(tmp, s[k++])) return -1;
            }
            size_t skip = i == 0 && d->prepend && tmp->n && tmp->p[0] == ' ';
            if (tk_pieces_add(out, tmp->p ? tmp->p + skip : "", tmp->n - skip)) return -1;
        }
        return 0;
    }
    case D_BPE: {
        size_t sl = strlen(d->content);
        for (size_t i = 0; i < in->n; i++) {
            s = tk_piece(in, i, &n);
            tmp->n = 0;
            const char *rep = i + 1 == in->n ? "" : " ";
            for (size_t k = 0; k < n;) {
                if (sl && n - k >= sl && !memcmp(s + k, d->content, sl)) {
                    if (tk_buf_put(tmp, rep, strlen(rep))) return -1;
                    k += sl;
                } else if (tk_buf_putc(tmp, s[k++])) return -1;
            }
            if (tk_pieces_add(out, tmp->p ? tmp->p : "", tmp->n)) return -1;
        }
        return 0;
    }
    }
    return -1;
}

static int apply_rec(const tk_decoder *d, tk_pieces *in, tk_pieces *out, tk_buf *tmp)
{
    if (d->kind != D_SEQ) return apply_one(d, in, out, tmp);
    if (d->n_sub == 0) {
        tk_pieces t = *in; *in = *out; *out = t;
        return 0;
    }
    for (size_t k = 0; k < d->n_sub; k++) {
        if (apply_rec(d->sub[k], in, out, tmp)) return -1;
        if (k + 1 < d->n_sub) {
            tk_pieces t = *in; *in = *out; *out = t;
        }
    }
    return 0;
}

int tk_decoder_apply(const tk_decoder *d, tk_pieces *tokens, tk_buf *out)
{
    tk_pieces res;
    tk_buf tmp = {0};
    if (tk_pieces_init(&res)) return -1;
    int rc = 0;
    out->n = 0;
    if (tk_buf_put(out, "", 0)) rc = -1;
    if (!rc && d) {
        rc = apply_rec(d, tokens, &res, &tmp);
        for (size_t i = 0; !rc && i < res.n; i++) {
            size_t n;
            const char *s = tk_piece(&res, i, &n);
            rc = tk_buf_put(out, s, n);
        }
    } else if (!rc) { /* no decoder: tokens joined by spaces, as tokenizers does */
        for (size_t i = 0; !rc && i < tokens->n; i++) {
            size_t n;
            const char *s = tk_piece(tokens, i, &n);
            rc = (i && tk_buf_putc(out, ' ')) || tk_buf_put(out, s, n);
        }
    }
    tk_pieces_free(&res);
    tk_buf_free(&tmp);
    return rc;
}
