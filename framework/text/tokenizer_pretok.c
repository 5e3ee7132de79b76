/* Pre-tokenizers of tokenizer.json: Split (regex or string, the five split behaviours,
 * invert), ByteLevel, Metaspace, Digits, Whitespace, WhitespaceSplit, CharDelimiterSplit
 * and Sequence. Each turns a list of pieces into a finer list; empty pieces vanish. */
#include "text/tokenizer_internal.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { B_REMOVED, B_ISOLATED, B_MERGED_PREV, B_MERGED_NEXT, B_CONTIGUOUS } behavior;
typedef enum { P_SPLIT, P_BYTELEVEL, P_METASPACE, P_SEQ } pkind;
typedef enum { PREPEND_ALWAYS, PREPEND_FIRST, PREPEND_NEVER } prepend;

/* GPT-2's split pattern, used by ByteLevel with use_regex */
static const char gpt2_re[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct tk_pretok {
    pkind kind;
    pcre2_code *re; /* Split, ByteLevel with use_regex */
    behavior beh;
    int invert;
    int add_prefix_space;           /* ByteLevel */
    char rep[8];                    /* Metaspace replacement, UTF-8 */
    size_t rep_len;
    prepend scheme;
    int msplit;
    tk_pretok **sub;
    size_t n_sub;
};

void tk_pretok_free(tk_pretok *p)
{
    if (!p) return;
    for (size_t i = 0; i < p->n_sub; i++) tk_pretok_free(p->sub[i]);
    free(p->sub);
    if (p->re) pcre2_code_free(p->re);
    free(p);
}

static int parse_behavior(const tk_jctx *c, json_t *j, const char *path, behavior *b)
{
    const char *s = NULL;
    int rc = tk_jstr(c, j, path, "behavior", &s);
    if (rc) return rc;
    if (!s) return tk_jerr(c, path, "\"behavior\" is missing");
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                  "Contiguous"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(s, names[i])) {
            *b = (behavior)i;
            return 0;
        }
    return tk_jerr(c, path, "unknown behavior '%s'", s);
}

static tk_pretok *new_split(const tk_jctx *c, const char *path, const char *pat, int literal,
                            behavior b, int invert)
{
    tk_pretok *p = calloc(1, sizeof *p);
    if (!p) {
        rlx_diag_set(c->d, RLX_ERR_NOMEM, "%s: out of memory", c->origin);
        return NULL;
    }
    p->kind = P_SPLIT;
    p->beh = b;
    p->invert = invert;
    if (!(p->re = tk_regex_compile(c, path, pat, literal))) {
        free(p);
        return NULL;
    }
    return p;
}

/* one item of a Sequence */
static int load_sub(const tk_jctx *c, json_t *item, const char *path, size_t i, void *owner)
{
    tk_pretok *p = owner;
    int rc = tk_pretok_load(c, item, path, &p->sub[i]);
    if (!rc) p->n_sub++;
    return rc;
}

int tk_pretok_load(const tk_jctx *c, json_t *j, const char *path, tk_pretok **out)
{
    *out = NULL;
    const char *type;
    char tpath[256];
    int rc = tk_jtype(c, j, path, &type, tpath, sizeof tpath);
    if (rc) return rc;
    tk_pretok *p = NULL;
    if (!strcmp(type, "Split")) {
        const char *pat;
        int is_re, inv = 0;
        behavior b = B_ISOLATED;
        if ((rc = tk_jpattern(c, j, path, &pat, &is_re)) || (rc = parse_behavior(c, j, path, &b)) ||
            (rc = tk_jbool(c, j, path, "invert", &inv)))
            return rc;
        if (!(p = new_split(c, path, pat, !is_re, b, inv))) return c->d ? c->d->code : RLX_ERR_INVALID;
    } else if (!strcmp(type, "Digits")) {
        int individual = 0;
        if ((rc = tk_jbool(c, j, path, "individual_digits", &individual))) return rc;
        if (!(p = new_split(c, path, "\\p{N}", 0, individual ? B_ISOLATED : B_CONTIGUOUS, 0)))
            return RLX_ERR_INVALID;
    } else if (!strcmp(type, "Whitespace")) {
        if (!(p = new_split(c, path, "\\w+|[^\\w\\s]+", 0, B_REMOVED, 1))) return RLX_ERR_INVALID;
    } else if (!strcmp(type, "WhitespaceSplit")) {
        if (!(p = new_split(c, path, "\\s+", 0, B_REMOVED, 0))) return RLX_ERR_INVALID;
    } else if (!strcmp(type, "CharDelimiterSplit")) {
        const char *d = NULL;
        if ((rc = tk_jstr(c, j, path, "delimiter", &d))) return rc;
        if (!d) return tk_jerr(c, path, "\"delimiter\" is missing");
        if (!(p = new_split(c, path, d, 1, B_REMOVED, 0))) return RLX_ERR_INVALID;
    } else if (!strcmp(type, "ByteLevel")) {
        int use_regex = 1, aps = 0;
        if ((rc = tk_jbool(c, j, path, "use_regex", &use_regex)) ||
            (rc = tk_jbool(c, j, path, "add_prefix_space", &aps)))
            return rc;
        if (!(p = calloc(1, sizeof *p))) return rlx_diag_set(c->d, RLX_ERR_NOMEM, "%s: out of memory", c->origin);
        p->kind = P_BYTELEVEL;
        p->beh = B_ISOLATED;
        p->add_prefix_space = aps;
        if (use_regex && !(p->re = tk_regex_compile(c, path, gpt2_re, 0))) {
            free(p);
            return RLX_ERR_INVALID;
        }
    } else if (!strcmp(type, "Metaspace")) {
        const char *rep = "\xE2\x96\x81", *scheme = NULL; /* U+2581 */
        int split = 1, aps = -1;
        if ((rc = tk_jstr(c, j, path, "replacement", &rep)) ||
            (rc = tk_jstr(c, j, path, "prepend_scheme", &scheme)) ||
            (rc = tk_jbool(c, j, path, "split", &split)) ||
            (rc = tk_jbool(c, j, path, "add_prefix_space", &aps)))
            return rc;
        size_t adv;
        if (!*rep || strlen(rep) >= 8 || (tk_utf8_decode(rep, strlen(rep), &adv), adv != strlen(rep)))
            return tk_jerr(c, path, "\"replacement\" must be one character");
        prepend ps = aps == 0 ? PREPEND_NEVER : PREPEND_ALWAYS;
        if (scheme) {
            if (!strcmp(scheme, "always")) ps = PREPEND_ALWAYS;
            else if (!strcmp(scheme, "first")) ps = PREPEND_FIRST;
            else if (!strcmp(scheme, "never")) ps = PREPEND_NEVER;
            else return tk_jerr(c, path, "unknown prepend_scheme '%s'", scheme);
        }
        if (!(p = calloc(1, sizeof *p))) return rlx_diag_set(c->d, RLX_ERR_NOMEM, "%s: out of memory", c->origin);
        p->kind = P_METASPACE;
        memcpy(p->rep, rep, strlen(rep) + 1);
        p->rep_len = strlen(rep);
        p->scheme = ps;
        p->msplit = split;
        if (!(p->re = tk_regex_compile(c, path, p->rep, 1))) {
            free(p);
            return RLX_ERR_INVALID;
        }
    } else if (!strcmp(type, "Sequence")) {
        json_t *arr = tk_jarray(c, j, path, "pretokenizers", &rc);
        if (!arr) return rc;
        if (!(p = calloc(1, sizeof *p)) || !(p->sub = calloc(json_array_size(arr) + 1, sizeof *p->sub))) {
            free(p);
            return rlx_diag_set(c->d, RLX_ERR_NOMEM, "%s: out of memory", c->origin);
        }
        p->kind = P_SEQ;
        if ((rc = tk_jeach(c, arr, path, "pretokenizers", load_sub, p))) {
            tk_pretok_free(p);
            return rc;
        }
    } else {
        return rlx_diag_set(c->d, RLX_ERR_UNSUPPORTED,
                            "%s: %s: unsupported pre-tokenizer '%s' (supported: Split, ByteLevel, "
                            "Metaspace, Digits, Whitespace, WhitespaceSplit, CharDelimiterSplit, "
                            "Sequence)",
                            c->origin, tpath, type);
    }
    *out = p;
    return 0;
}

/* ---------------------------------------------------------------- applying */
typedef struct span { size_t a, b; int match; } span;
typedef struct spans { span *v; size_t n, cap; } spans;

static int spans_push(spans *s, size_t a, size_t b, int m)
{
    if (s->n == s->cap) {
        size_t nc = s->cap ? s->cap * 2 : 64;
        span *q = realloc(s->v, nc * sizeof *q);
        if (!q) return -1;
        s->v = q;
        s->cap = nc;
    }
    s->v[s->n++] = (span){a, b, m};
    return 0;
}

/* Split one piece by re following behaviour b (tokenizers' NormalizedString::split). */
static int split_piece(const tk_pretok *p, pcre2_match_data *md, const char *s, size_t n,
                       spans *sp, tk_pieces *out)
{
    sp->n = 0;
    size_t pos = 0, ms, me;
    int m;
    while ((m = tk_regex_next(p->re, md, s, n, pos, &ms, &me)) == 1) {
        if (ms > pos && spans_push(sp, pos, ms, p->invert)) return -1;
        if (spans_push(sp, ms, me, !p->invert)) return -1;
        pos = me;
    }
    if (m < 0) return -1;
    if (pos < n && spans_push(sp, pos, n, p->invert)) return -1;

    /* apply the behaviour in place: merged spans grow, absorbed ones are marked b=a */
    size_t k = 0;
    switch (p->beh) {
    case B_REMOVED:
        for (size_t i = 0; i < sp->n; i++)
            if (!sp->v[i].match) sp->v[k++] = sp->v[i];
        break;
    case B_ISOLATED: k = sp->n; break;
    case B_MERGED_PREV: {
        int prev_match = 0;
        for (size_t i = 0; i < sp->n; i++) {
            span cur = sp->v[i];
            if (cur.match && !prev_match && k) sp->v[k - 1].b = cur.b;
            else sp->v[k++] = cur;
            prev_match = cur.match;
        }
        break;
    }
    case B_MERGED_NEXT: {
        /* walk backwards: a match joins the following piece unless that one is a match */
        int next_match = 0;
        size_t w = sp->n;
        for (size_t i = sp->n; i-- > 0;) {
            span cur = sp->v[i];
            if (cur.match && !next_match && w < sp->n) sp->v[w].a = cur.a;
            else sp->v[--w] = cur;
            next_match = cur.match;
        }
        if (w < sp->n) memmove(sp->v, sp->v + w, (sp->n - w) * sizeof *sp->v); /* v may be NULL when n is 0 */
        k = sp->n - w;
        break;
    }
    case B_CONTIGUOUS: {
        int prev_match = 0;
        for (size_t i = 0; i < sp->n; i++) {
            span cur = sp->v[i];
            if (cur.match == prev_match && k) sp->v[k - 1].b = cur.b;
            else sp->v[k++] = cur;
            prev_match = cur.match;
        }
        break;
    }
    }
    for (size_t i = 0; i < k; i++)
        if (sp->v[i].b > sp->v[i].a && tk_pieces_add(out, s + sp->v[i].a, sp->v[i].b - sp->v[i].a))
            return -1;
    return 0;
}

static int bytelevel_map(const char *s, size_t n, tk_pieces *out)
{
    if (tk_pieces_add(out, "", 0)) return -1;
    char tmp[512];
    size_t t = 0;
    for (size_t i = 0; i < n; i++) {
        t += tk_utf8_encode(tk_byte_cp((unsigned char)s[i]), tmp + t);
        if (t > sizeof tmp - 4) {
            if (tk_pieces_extend_last(out, tmp, t)) return -1;
            t = 0;
        }
    }
    return tk_pieces_extend_last(out, tmp, t);
}

static int apply_one(const tk_pretok *p, tk_pieces *in, tk_pieces *out, int is_first,
                     pcre2_match_data **md, spans *sp, tk_buf *tmp)
{
    tk_pieces_clear(out);
    switch (p->kind) {
    case P_SEQ: return -2; /* handled by the caller */
    case P_SPLIT:
        for (size_t i = 0; i < in->n; i++) {
            size_t len;
            const char *s = tk_piece(in, i, &len);
            if (split_piece(p, md[0], s, len, sp, out)) return -1;
        }
        return 0;
    case P_BYTELEVEL: {
        tk_pieces words;
        if (tk_pieces_init(&words)) return -1;
        int rc = 0;
        for (size_t i = 0; !rc && i < in->n; i++) {
            size_t len;
            const char *s = tk_piece(in, i, &len);
            if (p->add_prefix_space && (len == 0 || s[0] != ' ')) {
                tmp->n = 0;
                if (tk_buf_putc(tmp, ' ') || tk_buf_put(tmp, s, len)) rc = -1;
                s = tmp->p;
                len = tmp->n;
            }
            if (rc) break;
            if (p->re) {
                tk_pieces_clear(&words);
                rc = split_piece(p, md[1], s, len, sp, &words);
                for (size_t k = 0; !rc && k < words.n; k++) {
                    size_t wl;
                    const char *w = tk_piece(&words, k, &wl);
                    rc = bytelevel_map(w, wl, out);
                }
            } else if (len) {
                rc = bytelevel_map(s, len, out);
            }
        }
        tk_pieces_free(&words);
        return rc;
    }
    case P_METASPACE:
        for (size_t i = 0; i < in->n; i++) {
            size_t len;
            const char *s = tk_piece(in, i, &len);
            tmp->n = 0;
            int pre = p->scheme == PREPEND_ALWAYS || (p->scheme == PREPEND_FIRST && is_first && i == 0);
            /* prepended unless the piece, spaces replaced, already starts with it */
            if (pre && !(len && s[0] == ' ') && !(len >= p->rep_len && !memcmp(s, p->rep, p->rep_len)) &&
                tk_buf_put(tmp, p->rep, p->rep_len))
                return -1;
            for (size_t k = 0; k < len; k++)
                if (s[k] == ' ' ? tk_buf_put(tmp, p->rep, p->rep_len) : tk_buf_putc(tmp, s[k])) return -1;
            if (!p->msplit) {
                if (tmp->n && tk_pieces_add(out, tmp->p, tmp->n)) return -1;
            } else {
                tk_pretok sp_p = {.kind = P_SPLIT, .re = p->re, .beh = B_MERGED_NEXT};
                if (split_piece(&sp_p, md[0], tmp->p ? tmp->p : "", tmp->n, sp, out)) return -1;
            }
        }
        return 0;
    }
    return -1;
}

static int apply_rec(const tk_pretok *p, tk_pieces *in, tk_pieces *out, int is_first,
                     pcre2_match_data **md, spans *sp, tk_buf *tmp)
{
    if (p->kind != P_SEQ) return apply_one(p, in, out, is_first, md, sp, tmp);
    /* Sequence: ping-pong between in and out, ending in out */
    if (p->n_sub == 0) {
        tk_pieces_clear(out);
        for (size_t i = 0; i < in->n; i++) {
            size_t len;
            const char *s = tk_piece(in, i, &len);
            if (tk_pieces_add(out, s, len)) return -1;
        }
        return 0;
    }
    for (size_t k = 0; k < p->n_sub; k++) {
        if (apply_rec(p->sub[k], in, out, is_first, md, sp, tmp)) return -1;
        if (k + 1 < p->n_sub) {
            tk_pieces t = *in; *in = *out; *out = t;
        }
    }
    return 0;
}

static int need_md(const tk_pretok *p, pcre2_match_data **md)
{
    if (p->kind == P_SEQ) {
        for (size_t i = 0; i < p->n_sub; i++)
            if (need_md(p->sub[i], md)) return -1;
        return 0;
    }
    /* only the whole-match pair of the ovector is read */
    if (!md[0] && !(md[0] = pcre2_match_data_create(1, NULL))) return -1;
    if (!md[1] && !(md[1] = pcre2_match_data_create(1, NULL))) return -1;
    return 0;
}

int tk_pretok_apply(const tk_pretok *p, tk_pieces *in, tk_pieces *out, int is_first)
{
    pcre2_match_data *md[2] = {NULL, NULL};
    spans sp = {0};
    tk_buf tmp = {0};
    int rc = need_md(p, md);
    if (!rc) rc = apply_rec(p, in, out, is_first, md, &sp, &tmp);
    pcre2_match_data_free(md[0]);
    pcre2_match_data_free(md[1]);
    free(sp.v);
    tk_buf_free(&tmp);
    return rc;
}
