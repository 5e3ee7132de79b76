/* Small building blocks of the tokenizer: buffers, hash maps, UTF-8, the GPT-2 byte
 * table, JSON field readers that name the path at fault, and PCRE2 wrappers. */
#include "text/tokenizer_internal.h"
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---------------------------------------------------------------- buffers */
static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 16;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q) return -1;
    *p = q;
    *cap = nc;
    return 0;
}

int tk_buf_put(tk_buf *b, const void *s, size_t n)
{
    if (grow((void **)&b->p, &b->cap, b->n + n + 1, 1)) return -1;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int tk_buf_putc(tk_buf *b, char c) { return tk_buf_put(b, &c, 1); }

void tk_buf_free(tk_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

int tk_pieces_init(tk_pieces *ps)
{
    memset(ps, 0, sizeof *ps);
    if (grow((void **)&ps->off, &ps->cap, 16, sizeof(size_t))) return -1;
    ps->off[0] = 0;
    return 0;
}

int tk_pieces_add(tk_pieces *ps, const char *s, size_t n)
{
    if (grow((void **)&ps->off, &ps->cap, ps->n + 2, sizeof(size_t))) return -1;
    if (tk_buf_put(&ps->buf, s, n)) return -1;
    ps->n++;
    ps->off[ps->n] = ps->buf.n;
    return 0;
}

int tk_pieces_extend_last(tk_pieces *ps, const char *s, size_t n)
{
    if (tk_buf_put(&ps->buf, s, n)) return -1;
    ps->off[ps->n] = ps->buf.n;
    return 0;
}

void tk_pieces_clear(tk_pieces *ps)
{
    ps->n = 0;
    ps->buf.n = 0;
    if (ps->off) ps->off[0] = 0;
}

void tk_pieces_free(tk_pieces *ps)
{
    tk_buf_free(&ps->buf);
    free(ps->off);
    memset(ps, 0, sizeof *ps);
}

int tk_ids_push(tk_ids *a, int32_t id)
{
    if (grow((void **)&a->v, &a->cap, a->n + 1, sizeof(int32_t))) return -1;
    a->v[a->n++] = id;
    return 0;
}

/* ---------------------------------------------------------------- hashing */
uint64_t tk_hash(const void *s, size_t n)
{
    /* FNV-1a over 8-byte words then a final mix: fast enough and well spread */
    const unsigned char *p = s;
    uint64_t h = 1469598103934665603ull ^ (n * 0x9E3779B97F4A7C15ull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
        p += 8;
        n -= 8;
    }
    while (n--) h = (h ^ *p++) * 0x100000001b3ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

/* Zeroed table memory. A big table is probed at random (hundreds of thousands of inserts
 * while loading): on huge pages those probes miss the TLB far less often. */
static void *table_alloc(size_t n, size_t size)
{
    if (n > SIZE_MAX / size) return NULL;
    size_t bytes = n * size;
    if (bytes < (4u << 20)) return calloc(n, size);
    void *p = NULL;
    if (posix_memalign(&p, 2u << 20, bytes)) return NULL;
    madvise(p, bytes, MADV_HUGEPAGE); /* a hint: fine if refused */
    memset(p, 0, bytes);
    return p;
}

/* the capacity (a power of two) keeping n entries at a load factor <= 1/2 */
static size_t cap_for(size_t n, size_t min)
{
    size_t c = min;
    while (c < 2 * n) c *= 2;
    return c;
}

static int strmap_resize(tk_strmap *m, size_t nc)
{
    struct tk_strent *e = table_alloc(nc, sizeof *e);
    if (!e) return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->e[i].off) continue;
        size_t j = m->e[i].h & (nc - 1);
        while (e[j].off) j = (j + 1) & (nc - 1);
        e[j] = m->e[i];
    }
    free(m->e);
    m->e = e;
    m->cap = nc;
    return 0;
}

int tk_strmap_reserve(tk_strmap *m, size_t n, size_t key_bytes)
{
    if (m->borrowed) return -1;
    size_t nc = cap_for(n, 64);
    if (nc > m->cap && strmap_resize(m, nc)) return -1;
    if (key_bytes > m->keys_cap) {
        char *q = realloc(m->keys, key_bytes);
        if (!q) return -1;
        m->keys = q;
        m->keys_cap = key_bytes;
    }
    return 0;
}

int tk_strmap_put(tk_strmap *m, const char *k, size_t n, int32_t v)
{
    if (m->borrowed) return -1; /* a cache image is read-only */
    if ((m->n + 1) * 2 > m->cap && strmap_resize(m, m->cap ? m->cap * 2 : 64)) return -1;
    uint32_t h = (uint32_t)tk_hash(k, n);
    size_t j = h & (m->cap - 1);
    while (m->e[j].off) {
        if (m->e[j].h == h && m->e[j].n == n && memcmp(m->keys + m->e[j].off - 1, k, n) == 0) {
            m->e[j].v = v;
            return 0;
        }
        j = (j + 1) & (m->cap - 1);
    }
    /* offsets are 32-bit, one past the key (0 marks an empty slot) */
    if (n >= UINT32_MAX - 1 - m->keys_n) return -1;
    if (m->keys_n + n + 1 > m->keys_cap) {
        size_t nc = m->keys_cap ? m->keys_cap : 4096;
        while (nc < m->keys_n + n + 1) nc *= 2;
        char *q = realloc(m->keys, nc);
        if (!q) return -1;
        m->keys = q;
        m->keys_cap = nc;
    }
    memcpy(m->keys + m->keys_n, k, n);
    m->keys[m->keys_n + n] = 0;
    m->e[j] = (struct tk_strent){h, (uint32_t)m->keys_n + 1, (uint32_t)n, v};
    m->keys_n += n + 1;
    m->n++;
    return 0;
}

int tk_strmap_get(const tk_strmap *m, const char *k, size_t n, int32_t *v)
{
    if (!m->cap) return 0;
    uint32_t h = (uint32_t)tk_hash(k, n);
    size_t j = h & (m->cap - 1);
    while (m->e[j].off) {
        if (m->e[j].h == h && m->e[j].n == n && memcmp(m->keys + m->e[j].off - 1, k, n) == 0) {
            *v = m->e[j].v;
            return 1;
        }
        j = (j + 1) & (m->cap - 1);
    }
    return 0;
}

void tk_strmap_prefetch(const tk_strmap *m, const char *k, size_t n, int key)
{
    if (!m->cap) return;
    const struct tk_strent *e = &m->e[(uint32_t)tk_hash(k, n) & (m->cap - 1)];
    if (!key) __builtin_prefetch(e);
    else if (e->off) __builtin_prefetch(m->keys + e->off - 1);
}

void tk_strmap_free(tk_strmap *m)
{
    if (!m->borrowed) {
        free(m->e);
        free(m->keys);
    }
    memset(m, 0, sizeof *m);
}

static uint64_t pair_key(int32_t a, int32_t b)
{
    return (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
}

/* a full 64-bit mix (murmur3's finalizer): id pairs and code-point pairs are far from
 * random, and a weak mix makes long probe runs. Changing it changes the table layout, which
 * the tokenizer cache stores: bump its VERSION. */
static size_t pair_slot(uint64_t k, size_t cap)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    k ^= k >> 33;
    return (size_t)k & (cap - 1);
}

static int pairmap_resize(tk_pairmap *m, size_t nc)
{
    struct tk_pairent *e = table_alloc(nc, sizeof *e);
    if (!e) return -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->e[i].key) continue;
        size_t j = pair_slot(m->e[i].key, nc);
        while (e[j].key) j = (j + 1) & (nc - 1);
        e[j] = m->e[i];
    }
    free(m->e);
    m->e = e;
    m->cap = nc;
    return 0;
}

int tk_pairmap_reserve(tk_pairmap *m, size_t n)
{
    if (m->borrowed) return -1;
    size_t nc = cap_for(n, 256);
    return nc > m->cap ? pairmap_resize(m, nc) : 0;
}

int tk_pairmap_put(tk_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t merged)
{
    if (m->borrowed) return -1; /* a cache image is read-only */
    if ((m->n + 1) * 2 > m->cap && pairmap_resize(m, m->cap ? m->cap * 2 : 256)) return -1;
    uint64_t k = pair_key(a, b);
    size_t j = pair_slot(k, m->cap);
    while (m->e[j].key) {
        if (m->e[j].key == k) return 0; /* first (lowest) rank wins, as in tokenizers */
        j = (j + 1) & (m->cap - 1);
    }
    m->e[j] = (struct tk_pairent){k, rank, merged};
    m->n++;
    return 0;
}

int tk_pairmap_get(const tk_pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *merged)
{
    if (!m->cap) return 0;
    uint64_t k = pair_key(a, b);
    size_t j = pair_slot(k, m->cap);
    while (m->e[j].key) {
        if (m->e[j].key == k) {
            *rank = m->e[j].rank;
            *merged = m->e[j].merged;
            return 1;
        }
        j = (j + 1) & (m->cap - 1);
    }
    return 0;
}

void tk_pairmap_prefetch(const tk_pairmap *m, int32_t a, int32_t b)
{
    if (m->cap) __builtin_prefetch(&m->e[pair_slot(pair_key(a, b), m->cap)], 1);
}

void tk_pairmap_free(tk_pairmap *m)
{
    if (!m->borrowed) free(m->e);
    memset(m, 0, sizeof *m);
}

/* ---------------------------------------------------------------- UTF-8 */
size_t tk_utf8_encode(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* s must be valid UTF-8 (checked once at the API boundary) */
uint32_t tk_utf8_decode(const char *s, size_t n, size_t *adv)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t l = tk_utf8_len(p[0]);
    if (l > n) l = 1;
    *adv = l;
    switch (l) {
    case 1: return p[0];
    case 2: return ((uint32_t)(p[0] & 0x1F) << 6) | (p[1] & 0x3F);
    case 3: return ((uint32_t)(p[0] & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
    default:
        return ((uint32_t)(p[0] & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) |
               ((uint32_t)(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
    }
}

/* Rust's char::is_whitespace (the Unicode White_Space property) */
int tk_is_space_cp(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

/* GPT-2's bytes_to_unicode: printable bytes map to themselves, the other 68 to
 * U+0100.. in byte order. */
static pthread_once_t byte_once = PTHREAD_ONCE_INIT;
static uint16_t byte_cp[256];
static int16_t cp_byte[0x200];

static void byte_table_init(void)
{
    uint16_t next = 0x100;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        byte_cp[b] = printable ? (uint16_t)b : next++;
    }
    for (int i = 0; i < 0x200; i++) cp_byte[i] = -1;
    for (int b = 0; b < 256; b++) cp_byte[byte_cp[b]] = (int16_t)b;
}

uint32_t tk_byte_cp(unsigned char b)
{
    pthread_once(&byte_once, byte_table_init);
    return byte_cp[b];
}

int tk_cp_to_byte(uint32_t cp)
{
    pthread_once(&byte_once, byte_table_init);
    return cp < 0x200 ? cp_byte[cp] : -1;
}

/* ---------------------------------------------------------------- JSON */
int tk_jerr(const tk_jctx *c, const char *path, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return rlx_diag_set(c->d, RLX_ERR_INVALID, "%s: %s: %s", c->origin, path, msg);
}

int tk_jtype(const tk_jctx *c, json_t *j, const char *path, const char **type, char *tpath,
             size_t tpath_len)
{
    *type = NULL;
    if (!json_is_object(j)) return tk_jerr(c, path, "must be an object or null");
    snprintf(tpath, tpath_len, "%s.type", path);
    int rc = tk_jstr(c, j, path, "type", type);
    if (rc) return rc;
    if (!*type) return tk_jerr(c, tpath, "missing");
    return 0;
}

json_t *tk_jarray(const tk_jctx *c, json_t *obj, const char *path, const char *key, int *rc)
{
    json_t *arr = json_object_get(obj, key);
    *rc = json_is_array(arr) ? 0 : tk_jerr(c, path, "\"%s\" must be an array", key);
    return *rc ? NULL : arr;
}

int tk_jeach(const tk_jctx *c, json_t *arr, const char *path, const char *key, tk_item_load load,
             void *owner)
{
    for (size_t i = 0; i < json_array_size(arr); i++) {
        char sp[256];
        snprintf(sp, sizeof sp, "%s.%s[%zu]", path, key, i);
        int rc = load(c, json_array_get(arr, i), sp, i, owner);
        if (rc) return rc;
    }
    return 0;
}

int tk_jstr(const tk_jctx *c, json_t *obj, const char *path, const char *key, const char **out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_string(v))
        return tk_jerr(c, path, "\"%s\" must be a string, not %s", key, rlx__json_type_name(v));
    *out = json_string_value(v);
    return 0;
}

int tk_jbool(const tk_jctx *c, json_t *obj, const char *path, const char *key, int *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v))
        return tk_jerr(c, path, "\"%s\" must be a boolean, not %s", key, rlx__json_type_name(v));
    *out = json_is_true(v);
    return 0;
}

int tk_jint(const tk_jctx *c, json_t *obj, const char *path, const char *key, int64_t *out)
{
    json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v))
        return tk_jerr(c, path, "\"%s\" must be an integer, not %s", key, rlx__json_type_name(v));
    *out = json_integer_value(v);
    return 0;
}

int tk_jpattern(const tk_jctx *c, json_t *obj, const char *path, const char **pat, int *is_regex)
{
    json_t *p = json_object_get(obj, "pattern");
    if (!json_is_object(p))
        return tk_jerr(c, path, "\"pattern\" must be an object {\"String\": …} or {\"Regex\": …}");
    json_t *s = json_object_get(p, "String"), *r = json_object_get(p, "Regex");
    if (json_is_string(s)) {
        *pat = json_string_value(s);
        *is_regex = 0;
        return 0;
    }
    if (json_is_string(r)) {
        *pat = json_string_value(r);
        *is_regex = 1;
        return 0;
    }
    return tk_jerr(c, path, "\"pattern\" must hold a \"String\" or a \"Regex\" string");
}

/* ---------------------------------------------------------------- PCRE2 */
/* The pattern with \s and \S spelled \p{White_Space} and \P{White_Space} (malloc'ed;
 * NULL: out of memory). Hugging Face's regex engine (Oniguruma / the regex crate) gives \s
 * the Unicode White_Space property; PCRE2's \s (with UCP) also matches U+180E MONGOLIAN
 * VOWEL SEPARATOR, which left White_Space in Unicode 6.3. The property form works inside
 * and outside a character class. \Q...\E quoting and escaped backslashes are kept. */
char *tk_regex_white_space(const char *pat)
{
    size_t n = strlen(pat), extra = 0;
    for (size_t i = 0; i + 1 < n; i++)
        if (pat[i] == '\\') {
            if (pat[i + 1] == 's' || pat[i + 1] == 'S') extra += 14;
            i++;
        }
    char *out = malloc(n + extra + 1);
    if (!out) return NULL;
    size_t o = 0;
    int quoted = 0;
    for (size_t i = 0; i < n; i++) {
        if (pat[i] != '\\' || i + 1 == n) {
            out[o++] = pat[i];
            continue;
        }
        char e = pat[i + 1];
        if (quoted) {
            if (e == 'E') quoted = 0;
        } else if (e == 'Q') {
            quoted = 1;
        } else if (e == 's' || e == 'S') {
            memcpy(out + o, e == 's' ? "\\p{White_Space}" : "\\P{White_Space}", 15);
            o += 15;
            i++;
            continue;
        }
        out[o++] = pat[i];
        out[o++] = pat[++i];
    }
    out[o] = 0;
    return out;
}

pcre2_code *tk_regex_compile(const tk_jctx *c, const char *path, const char *pat, int literal)
{
    int err;
    PCRE2_SIZE erroff;
    /* PCRE2_LITERAL refuses PCRE2_UCP, which only matters for patterns anyway */
    uint32_t opt = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code *re = NULL;
    char *ws = literal ? NULL : tk_regex_white_space(pat);
    if (!literal && !ws) {
        rlx_diag_set(c->d, RLX_ERR_NOMEM, "%s: out of memory", c->origin);
        return NULL;
    }
    re = pcre2_compile((PCRE2_SPTR)(ws ? ws : pat), PCRE2_ZERO_TERMINATED, opt, &err, &erroff, NULL);
    free(ws);
    if (!re && !literal) /* report the offset in the pattern as written */
        re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, opt, &err, &erroff, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        tk_jerr(c, path, "regex does not compile at offset %zu: %s", (size_t)erroff, (char *)msg);
        return NULL;
    }
    /* JIT is an optimisation: without it (no JIT support) matching still works */
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
    return re;
}

int tk_regex_next(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t n,
                  size_t start, size_t *ms, size_t *me)
{
    for (;;) {
        if (start > n) return 0;
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md,
                             NULL);
        if (rc == PCRE2_ERROR_NOMATCH) return 0;
        if (rc < 0) return rc;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] > ov[0]) {
            *ms = ov[0];
            *me = ov[1];
            return 1;
        }
        /* empty match: tokenizers skips it; move on by one character */
        if (ov[0] >= n) return 0;
        start = ov[0] + tk_utf8_len((unsigned char)s[ov[0]]);
    }
}
