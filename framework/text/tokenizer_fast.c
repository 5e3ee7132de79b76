/* A fast path for the two big members of tokenizer.json, model.vocab and model.merges
 * (LLaMA 3 / Qwen3: ~130-150 k tokens and ~150-280 k merges; Gemma 3: 262 k tokens in
 * 33 MB). Building a jansson tree for them costs ~0.5-2 s; here they are read straight
 * from the text into the BPE tables. Only the plain shapes are handled: an object of
 * "token": non-negative integer, an array of "a b" strings or ["a", "b"] pairs. Anything
 * else (an escape that is not valid, a duplicate, a float id, a control character,
 * invalid UTF-8, ...) returns "not handled", and the caller parses the whole file with
 * jansson as before, so every error message stays the one the full parse gives. */
#include "text/tokenizer_internal.h"
#include <stdlib.h>
#include <string.h>
#include <unistr.h>

typedef struct cur {
    const char *p, *e;
} cur;

static void ws(cur *c)
{
    while (c->p < c->e && (*c->p == ' ' || *c->p == '\n' || *c->p == '\r' || *c->p == '\t')) c->p++;
}

/* at '"': *s, *n the raw contents, past the closing quote; *esc: holds a backslash */
static int raw_str(cur *c, const char **s, size_t *n, int *esc)
{
    if (c->p >= c->e || *c->p != '"') return -1;
    const char *p = c->p + 1;
    *esc = 0;
    for (;;) {
        const char *q = memchr(p, '"', (size_t)(c->e - p));
        if (!q) return -1;
        const char *b = memchr(p, '\\', (size_t)(q - p));
        if (!b) {
            *s = c->p + 1;
            *n = (size_t)(q - *s);
            c->p = q + 1;
            return 0;
        }
        *esc = 1;
        if (b + 1 >= c->e) return -1;
        p = b + 2; /* skips the escaped character, '"' and '\\' included */
    }
}

/* past one value; *items (when given) gets the number of members or elements of an
 * object or array */
static int skip_value(cur *c, int depth, size_t *items)
{
    if (depth > 64) return -1;
    ws(c);
    if (c->p >= c->e) return -1;
    const char *s;
    size_t n;
    int esc;
    if (*c->p == '"') return raw_str(c, &s, &n, &esc);
    if (*c->p == '{' || *c->p == '[') {
        char close = *c->p == '{' ? '}' : ']';
        int obj = close == '}';
        c->p++;
        ws(c);
        if (c->p < c->e && *c->p == close) {
            c->p++;
            return 0;
        }
        for (;;) {
            if (obj) {
                ws(c);
                if (raw_str(c, &s, &n, &esc)) return -1;
                ws(c);
                if (c->p >= c->e || *c->p++ != ':') return -1;
            }
            if (skip_value(c, depth + 1, NULL)) return -1;
            if (items) ++*items;
            ws(c);
            if (c->p >= c->e) return -1;
            if (*c->p == ',') {
                c->p++;
                continue;
            }
            if (*c->p++ != close) return -1;
            return 0;
        }
    }
    const char *st = c->p; /* number, true, false, null */
    while (c->p < c->e && !strchr(",]} \t\r\n", *c->p)) c->p++;
    return c->p > st ? 0 : -1;
}

static int hex4(const char *p, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char h = p[i];
        int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        if (d < 0) return -1;
        *v = *v << 4 | (uint32_t)d;
    }
    return 0;
}

/* the string's value as jansson gives it: in place when it has no escape, else in *tmp.
 * -1: a control character, a bad escape, a lone surrogate or \u0000 (jansson refuses) */
static int str_value(const char *s, size_t n, int esc, tk_buf *tmp, const char **out, size_t *on)
{
    if (!esc) {
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)s[i] < 0x20) return -1;
        *out = s;
        *on = n;
        return 0;
    }
    tmp->n = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch < 0x20) return -1;
        if (ch != '\\') {
            if (tk_buf_putc(tmp, (char)ch)) return -1;
            continue;
        }
        if (++i >= n) return -1;
        char e = s[i], o;
        switch (e) {
        case '"': o = '"'; break;
        case '\\': o = '\\'; break;
        case '/': o = '/'; break;
        case 'b': o = '\b'; break;
        case 'f': o = '\f'; break;
        case 'n': o = '\n'; break;
        case 'r': o = '\r'; break;
        case 't': o = '\t'; break;
        case 'u': {
            uint32_t cp, lo;
            if (n - i - 1 < 4 || hex4(s + i + 1, &cp)) return -1;
            i += 4;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return -1;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                if (n - i - 1 < 6 || s[i + 1] != '\\' || s[i + 2] != 'u' || hex4(s + i + 3, &lo) ||
                    lo < 0xDC00 || lo > 0xDFFF)
                    return -1;
                i += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
            }
            if (cp == 0) return -1;
            char u[4];
            if (tk_buf_put(tmp, u, tk_utf8_encode(cp, u))) return -1;
            continue;
        }
        default: return -1;
        }
        if (tk_buf_putc(tmp, o)) return -1;
    }
    *out = tmp->p;
    *on = tmp->n;
    return 0;
}

/* model.vocab's text: {"token": id, ...} into the BPE vocab, each token VOCAB_AHEAD
 * entries after it is parsed (its table slot fetched meanwhile) */
#define VOCAB_AHEAD 8

typedef struct vpending {
    const char *k;
    size_t n;
    int32_t id;
    tk_buf buf; /* the unescaped token when the text has escapes */
} vpending;

/* one "token": id member at c */
static int parse_token(cur *c, vpending *t)
{
    const char *k;
    size_t kn;
    int esc;
    ws(c);
    if (raw_str(c, &k, &kn, &esc) || str_value(k, kn, esc, &t->buf, &t->k, &t->n)) return -1;
    ws(c);
    if (c->p >= c->e || *c->p++ != ':') return -1;
    ws(c);
    const char *d0 = c->p;
    int64_t id = 0;
    while (c->p < c->e && *c->p >= '0' && *c->p <= '9' && c->p - d0 < 11) id = id * 10 + (*c->p++ - '0');
    if (c->p == d0 || (*d0 == '0' && c->p - d0 > 1) || id >= INT32_MAX) return -1;
    t->id = (int32_t)id;
    return 0;
}

static int read_vocab(tk_bpe *b, const char *s, size_t n)
{
    vpending ring[VOCAB_AHEAD];
    memset(ring, 0, sizeof ring);
    cur c = {s, s + n};
    size_t parsed = 0, added = 0;
    int rc = -1, done = 0;
    ws(&c);
    if (c.p >= c.e || *c.p++ != '{') goto out;
    ws(&c);
    if (c.p < c.e && *c.p == '}') {
        c.p++;
        done = 1;
    }
    while (!done || added < parsed) {
        if (!done) {
            vpending *t = &ring[parsed % VOCAB_AHEAD];
            if (parse_token(&c, t)) goto out;
            tk_strmap_prefetch(tk_bpe_vocab(b), t->k, t->n, 0);
            parsed++;
            ws(&c);
            if (c.p >= c.e) goto out;
            if (*c.p == '}') c.p++, done = 1;
            else if (*c.p++ != ',') goto out;
        }
        if (parsed - added == VOCAB_AHEAD || done) {
            vpending *t = &ring[added % VOCAB_AHEAD];
            if (tk_bpe_add_token(b, t->k, t->n, t->id)) goto out; /* out of memory or a duplicate */
            added++;
        }
    }
    ws(&c);
    rc = c.p == c.e ? 0 : -1;
out:
    for (int i = 0; i < VOCAB_AHEAD; i++) tk_buf_free(&ring[i].buf);
    return rc;
}

/* Merges are parsed RING - 1 ahead of the one added, and the vocab slots (then the key
 * bytes, AHEAD_KEYS ahead) of their halves fetched meanwhile: adding one is mostly
 * memory latency, a few cache misses in tables of tens of MB */
#define RING 16
#define AHEAD_KEYS 8

typedef struct pending {
    const char *l, *r;
    size_t ln, rn;
    tk_buf bl, br; /* the unescaped halves when the text has escapes */
} pending;

/* one merge at c into *m: "a b" or ["a", "b"] */
static int parse_merge(cur *c, pending *m)
{
    const char *raw;
    size_t rawn;
    int esc;
    ws(c);
    if (c->p >= c->e) return -1;
    if (*c->p == '"') {
        const char *v, *sp;
        size_t vn;
        if (raw_str(c, &raw, &rawn, &esc) || str_value(raw, rawn, esc, &m->bl, &v, &vn)) return -1;
        if (!(sp = memchr(v, ' ', vn)) || memchr(sp + 1, ' ', vn - (size_t)(sp - v) - 1)) return -1;
        m->l = v;
        m->ln = (size_t)(sp - v);
        m->r = sp + 1;
        m->rn = vn - m->ln - 1;
        return 0;
    }
    if (*c->p != '[') return -1;
    c->p++;
    ws(c);
    if (raw_str(c, &raw, &rawn, &esc) || str_value(raw, rawn, esc, &m->bl, &m->l, &m->ln)) return -1;
    ws(c);
    if (c->p >= c->e || *c->p++ != ',') return -1;
    ws(c);
    if (raw_str(c, &raw, &rawn, &esc) || str_value(raw, rawn, esc, &m->br, &m->r, &m->rn)) return -1;
    ws(c);
    return c->p < c->e && *c->p++ == ']' ? 0 : -1;
}

/* model.merges' text: ["a b", ...] or [["a", "b"], ...] added in rank order */
static int read_merges(const tk_jctx *jc, tk_bpe *b, const char *s, size_t n)
{
    pending ring[RING];
    memset(ring, 0, sizeof ring);
    cur c = {s, s + n};
    size_t parsed = 0, added = 0;
    int rc = -1, done = 0;
    ws(&c);
    if (c.p >= c.e || *c.p++ != '[') goto out;
    ws(&c);
    if (c.p < c.e && *c.p == ']') {
        c.p++;
        done = 1;
    }
    while (!done || added < parsed) {
        if (!done) {
            pending *m = &ring[parsed % RING];
            if (parse_merge(&c, m)) goto out;
            tk_bpe_prefetch(b, m->l, m->ln, m->r, m->rn, 0);
            parsed++;
            ws(&c);
            if (c.p >= c.e) goto out;
            if (*c.p == ']') c.p++, done = 1;
            else if (*c.p++ != ',') goto out;
        }
        if (parsed - added > AHEAD_KEYS || (done && parsed - added > 0)) {
            if (parsed - added > AHEAD_KEYS) {
                pending *k = &ring[(parsed - AHEAD_KEYS) % RING];
                tk_bpe_prefetch(b, k->l, k->ln, k->r, k->rn, 1);
            }
            if (parsed - added == RING - 1 || done) {
                pending *m = &ring[added % RING];
                if (tk_bpe_add_merge(jc, b, m->l, m->ln, m->r, m->rn, added)) goto out;
                added++;
            }
        }
    }
    ws(&c);
    rc = c.p == c.e ? tk_bpe_end_merges(jc, b) : -1;
out:
    for (int i = 0; i < RING; i++) {
        tk_buf_free(&ring[i].bl);
        tk_buf_free(&ring[i].br);
    }
    return rc;
}

/* Finds model.vocab and model.merges (offset, length and item count of each value;
 * length 0: absent). */
static int find_spans(const char *buf, size_t len, size_t span[2][3])
{
    cur c = {buf, buf + len};
    const char *s;
    size_t n;
    int esc, seen_model = 0;
    memset(span, 0, 6 * sizeof(size_t));
    ws(&c);
    if (c.p >= c.e || *c.p++ != '{') return -1;
    for (;;) {
        ws(&c);
        if (raw_str(&c, &s, &n, &esc) || esc) return -1;
        ws(&c);
        if (c.p >= c.e || *c.p++ != ':') return -1;
        ws(&c);
        if (n == 5 && memcmp(s, "model", 5) == 0) {
            if (seen_model++ || c.p >= c.e || *c.p != '{') return -1;
            c.p++;
            for (;;) {
                ws(&c);
                if (c.p < c.e && *c.p == '}') break;
                if (raw_str(&c, &s, &n, &esc) || esc) return -1;
                ws(&c);
                if (c.p >= c.e || *c.p++ != ':') return -1;
                ws(&c);
                int which = n == 5 && memcmp(s, "vocab", 5) == 0    ? 0
                            : n == 6 && memcmp(s, "merges", 6) == 0 ? 1
                                                                    : -1;
                const char *v0 = c.p;
                size_t items = 0;
                if (skip_value(&c, 1, &items)) return -1;
                if (which >= 0) {
                    if (span[which][1]) return -1; /* a duplicate: jansson's error */
                    span[which][2] = items;
                    span[which][0] = (size_t)(v0 - buf);
                    span[which][1] = (size_t)(c.p - v0);
                }
                ws(&c);
                if (c.p < c.e && *c.p == ',') {
                    c.p++;
                    continue;
                }
                if (c.p >= c.e || *c.p != '}') return -1;
                break;
            }
            c.p++;
        } else if (skip_value(&c, 1, NULL)) {
            return -1;
        }
        ws(&c);
        if (c.p < c.e && *c.p == ',') {
            c.p++;
            continue;
        }
        break;
    }
    return span[0][1] ? 0 : -1;
}

int tk_fast_bpe(const tk_jctx *c, const char *buf, size_t len, tk_bpe **bpe, char **rest,
                size_t *rest_len)
{
    *bpe = NULL;
    *rest = NULL;
    *rest_len = 0;
    size_t span[2][3];
    if (find_spans(buf, len, span)) return -1;
    for (int k = 0; k < 2; k++)
        if (span[k][1] && u8_check((const uint8_t *)buf + span[k][0], span[k][1])) return -1;
    rlx_diag quiet; /* the fast path's errors are never shown: the full parse reports */
    rlx_diag_init(&quiet);
    tk_jctx qc = {c->origin, &quiet};
    tk_bpe *b = tk_bpe_new();
    int rc = -1;
    if (!b || tk_bpe_reserve(b, span[0][2], span[0][1], span[1][2]) ||
        read_vocab(b, buf + span[0][0], span[0][1]))
        goto out;
    if (span[1][1] && read_merges(&qc, b, buf + span[1][0], span[1][1])) goto out;
    /* the rest of the document with the two values replaced by {} and []: a few KB for
     * jansson instead of megabytes of blanks (its messages are never shown: any error
     * sends the caller to the full parse of the file) */
    size_t ord[2] = {0, 1}, rn = 0;
    if (span[1][1] && span[1][0] < span[0][0]) ord[0] = 1, ord[1] = 0;
    char *r = malloc(len + 1);
    if (!r) goto out;
    size_t at = 0;
    for (int i = 0; i < 2; i++) {
        size_t k = ord[i];
        if (!span[k][1]) continue;
        memcpy(r + rn, buf + at, span[k][0] - at);
        rn += span[k][0] - at;
        memcpy(r + rn, k ? "[]" : "{}", 2);
        rn += 2;
        at = span[k][0] + span[k][1];
    }
    memcpy(r + rn, buf + at, len - at);
    rn += len - at;
    r[rn] = 0;
    *rest_len = rn;
    *rest = r;
    *bpe = b;
    b = NULL;
    rc = 0;
out:
    tk_bpe_free(b);
    return rc;
}

/* "true", "false" or "null" at c (null: *v kept) */
static int read_bool(cur *c, int *v)
{
    size_t left = (size_t)(c->e - c->p);
    if (left >= 4 && !memcmp(c->p, "true", 4)) *v = 1, c->p += 4;
    else if (left >= 5 && !memcmp(c->p, "false", 5)) *v = 0, c->p += 5;
    else if (left >= 4 && !memcmp(c->p, "null", 4)) c->p += 4;
    else return -1;
    return 0;
}

/* one added token object, its keys each at most once (an unknown key: not handled) */
static int read_added_one(cur *c, tk_buf *tmp, tk_added *a)
{
    static const char *const keys[] = {"content", "id", "special", "normalized", "lstrip", "rstrip", "single_word"};
    static const size_t klen[] = {7, 2, 7, 10, 6, 6, 11};
    int *flags[] = {NULL, NULL, &a->special, &a->normalized, &a->lstrip, &a->rstrip, &a->single_word};
    unsigned seen = 0;
    int64_t id = -1;
    a->normalized = 1; /* tokenizers' default for non-special tokens, as load_added */
    ws(c);
    if (c->p >= c->e || *c->p++ != '{') return -1;
    ws(c);
    if (c->p < c->e && *c->p == '}') return -1; /* no content: the full parse reports */
    for (;;) {
        const char *k, *v;
        size_t kn, vn;
        int esc, w = -1;
        ws(c);
        if (raw_str(c, &k, &kn, &esc) || esc) return -1;
        for (int i = 0; i < 7; i++)
            if (klen[i] == kn && !memcmp(keys[i], k, kn)) w = i;
        if (w < 0 || (seen & 1u << w)) return -1;
        seen |= 1u << w;
        ws(c);
        if (c->p >= c->e || *c->p++ != ':') return -1;
        ws(c);
        if (w == 0) {
            if (raw_str(c, &k, &kn, &esc) || str_value(k, kn, esc, tmp, &v, &vn) || !vn) return -1;
            if (!(a->content = malloc(vn + 1))) return -1;
            memcpy(a->content, v, vn);
            a->content[vn] = 0;
            a->len = vn;
        } else if (w == 1) {
            const char *d0 = c->p;
            id = 0;
            while (c->p < c->e && *c->p >= '0' && *c->p <= '9' && c->p - d0 < 11) id = id * 10 + (*c->p++ - '0');
            if (c->p == d0 || (*d0 == '0' && c->p - d0 > 1) || id >= INT32_MAX) return -1;
            if (c->p < c->e && (*c->p == '.' || *c->p == 'e' || *c->p == 'E')) return -1;
        } else if (read_bool(c, flags[w])) {
            return -1;
        }
        ws(c);
        if (c->p >= c->e) return -1;
        if (*c->p == ',') {
            c->p++;
            continue;
        }
        if (*c->p++ != '}') return -1;
        break;
    }
    if (!a->content || id < 0) return -1;
    a->id = (int32_t)id;
    return 0;
}

static void free_added(tk_added *a, size_t n)
{
    for (size_t i = 0; i < n; i++) free(a[i].content);
    free(a);
}

int tk_fast_added(const char *buf, size_t len, tk_added **added, size_t *n, char **cut, size_t *cut_len)
{
    *added = NULL;
    *n = 0;
    *cut = NULL;
    cur c = {buf, buf + len};
    const char *s;
    size_t sn;
    int esc;
    ws(&c);
    if (c.p >= c.e || *c.p++ != '{') return -1;
    for (;;) { /* the top-level members up to "added_tokens" */
        ws(&c);
        if (raw_str(&c, &s, &sn, &esc) || esc) return -1;
        ws(&c);
        if (c.p >= c.e || *c.p++ != ':') return -1;
        ws(&c);
        if (sn == 12 && !memcmp(s, "added_tokens", 12)) break;
        if (skip_value(&c, 1, NULL)) return -1;
        ws(&c);
        if (c.p >= c.e || *c.p++ != ',') return -1;
    }
    const char *v0 = c.p;
    if (c.p >= c.e || *c.p != '[') return -1;
    size_t cap = 16, k = 0;
    tk_added *a = calloc(cap, sizeof *a);
    tk_buf tmp = {0};
    int rc = a ? 0 : -1;
    c.p++;
    ws(&c);
    if (!rc && c.p < c.e && *c.p == ']') c.p++;
    else
        while (!rc) {
            if (k + 1 >= cap) {
                tk_added *q = realloc(a, 2 * cap * sizeof *q);
                if (!q) {
                    rc = -1;
                    break;
                }
                a = q;
                memset(a + cap, 0, cap * sizeof *a);
                cap *= 2;
            }
            rc = read_added_one(&c, &tmp, &a[k]);
            k++;
            ws(&c);
            if (rc || c.p >= c.e) rc = -1;
            else if (*c.p == ',') c.p++;
            else if (*c.p++ == ']') break;
            else rc = -1;
        }
    tk_buf_free(&tmp);
    /* valid UTF-8 as jansson requires, and no second "added_tokens" later in the file
     * (jansson's duplicate error) */
    if (!rc && u8_check((const uint8_t *)v0, (size_t)(c.p - v0))) rc = -1;
    for (cur r = c; !rc;) {
        ws(&r);
        if (r.p >= r.e || *r.p != ',') break;
        r.p++;
        ws(&r);
        if (raw_str(&r, &s, &sn, &esc) || (!esc && sn == 12 && !memcmp(s, "added_tokens", 12))) rc = -1;
        ws(&r);
        if (rc || r.p >= r.e || *r.p++ != ':' || skip_value(&r, 1, NULL)) rc = -1;
    }
    char *r = rc ? NULL : malloc(len - (size_t)(c.p - v0) + 3);
    if (!r) {
        free_added(a, k);
        return -1;
    }
    size_t at = (size_t)(v0 - buf);
    memcpy(r, buf, at);
    memcpy(r + at, "[]", 2);
    memcpy(r + at + 2, c.p, (size_t)(c.e - c.p));
    *cut_len = at + 2 + (size_t)(c.e - c.p);
    r[*cut_len] = 0;
    *cut = r;
    *added = a;
    *n = k;
    return 0;
}
