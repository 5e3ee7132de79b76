/* rlx_tokenizer_*: loading tokenizer.json, added tokens, and the encode/decode
 * pipelines (the parts live in tokenizer_{bpe,normalizer,pretok,decoder,post}.c). */
#define _GNU_SOURCE
#include "text/tokenizer_internal.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <limits.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <unistr.h>

#define NOMEM(d, t) rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", (t)->origin)

/* frees what loading filled in, leaving t as calloc'ed but for its origin */
static void clear_parts(rlx_tokenizer *t)
{
    if (t->writing) pthread_join(t->writer, NULL);
    tk_bpe_free(t->bpe);
    tk_normalizer_free(t->normalizer);
    tk_pretok_free(t->pretok);
    tk_decoder_free(t->decoder);
    tk_post_free(t->post);
    for (size_t i = 0; i < t->n_added; i++) {
        if (t->added[i].match != t->added[i].content) free(t->added[i].match);
        free(t->added[i].content);
    }
    free(t->added);
    for (int k = 0; k < 2; k++)
        for (int b = 0; b < 256; b++) free(t->first_idx[k][b]);
    free(t->id_tok);
    free(t->id_special);
    char *origin = t->origin;
    memset(t, 0, sizeof *t);
    t->origin = origin;
}

RLX_API void rlx_tokenizer_free(rlx_tokenizer *t)
{
    if (!t) return;
    clear_parts(t);
    free(t->origin);
    free(t);
}

static int load_added(const tk_jctx *c, rlx_tokenizer *t, json_t *arr)
{
    if (!arr || json_is_null(arr)) return 0;
    if (!json_is_array(arr)) return tk_jerr(c, "added_tokens", "must be an array");
    t->added = calloc(json_array_size(arr) + 1, sizeof *t->added);
    if (!t->added) return NOMEM(c->d, t);
    for (size_t i = 0; i < json_array_size(arr); i++) {
        json_t *e = json_array_get(arr, i);
        char path[64];
        snprintf(path, sizeof path, "added_tokens[%zu]", i);
        if (!json_is_object(e)) return tk_jerr(c, path, "must be an object");
        const char *content = NULL;
        int64_t id = -1;
        tk_added *a = &t->added[t->n_added];
        a->normalized = 1; /* tokenizers' default for non-special tokens */
        int rc;
        if ((rc = tk_jstr(c, e, path, "content", &content)) || (rc = tk_jint(c, e, path, "id", &id)) ||
            (rc = tk_jbool(c, e, path, "special", &a->special)) ||
            (rc = tk_jbool(c, e, path, "normalized", &a->normalized)) ||
            (rc = tk_jbool(c, e, path, "lstrip", &a->lstrip)) ||
            (rc = tk_jbool(c, e, path, "rstrip", &a->rstrip)) ||
            (rc = tk_jbool(c, e, path, "single_word", &a->single_word)))
            return rc;
        if (!content || !*content) return tk_jerr(c, path, "\"content\" must be a non-empty string");
        if (id < 0 || id >= INT32_MAX) return tk_jerr(c, path, "\"id\" must be a non-negative integer");
        const char **mt;
        size_t mn;
        tk_bpe_id_to_token(t->bpe, &mt, &mn);
        if ((uint64_t)id >= 4 * (uint64_t)(mn + json_array_size(arr)) + 65536)
            return tk_jerr(c, path, "id %lld is far beyond the vocabulary (%zu ids)", (long long)id, mn);
        if (!(a->content = strdup(content))) return NOMEM(c->d, t);
        a->len = strlen(content);
        a->id = (int32_t)id;
        t->n_added++;
    }
    return 0;
}

/* an added token's place in the match tables: table k, first byte, length */
typedef struct aref {
    uint32_t kb; /* k << 8 | first byte */
    int32_t i;
    size_t len;
} aref;

/* by table and first byte, then longest first (so the first hit at a position is the
 * leftmost-longest match), then in file order (the first of equal matches wins) */
static int aref_cmp(const void *x, const void *y)
{
    const aref *a = x, *b = y;
    if (a->kb != b->kb) return a->kb < b->kb ? -1 : 1;
    if (a->len != b->len) return a->len > b->len ? -1 : 1;
    return (a->i > b->i) - (a->i < b->i);
}

static int index_added(rlx_tokenizer *t)
{
    aref *r = malloc((t->n_added ? t->n_added : 1) * sizeof *r);
    if (!r) return -1;
    size_t n = 0;
    for (size_t i = 0; i < t->n_added; i++) {
        tk_added *a = &t->added[i];
        int k = t->normalizer && a->normalized ? 1 : 0;
        a->match = a->content;
        a->match_len = a->len;
        if (k) { /* tokenizers matches these against normalized text, in normalized form */
            tk_buf nb = {0};
            if (tk_normalizer_apply(t->normalizer, a->content, a->len, &nb)) {
                tk_buf_free(&nb);
                free(r);
                return -1;
            }
            if (nb.n == 0) { /* normalized away: it can never match */
                tk_buf_free(&nb);
                continue;
            }
            a->match = nb.p;
            a->match_len = nb.n;
        }
        r[n++] = (aref){(uint32_t)k << 8 | (unsigned char)a->match[0], (int32_t)i, a->match_len};
    }
    qsort(r, n, sizeof *r, aref_cmp);
    int rc = 0;
    for (size_t s = 0, e; !rc && s < n; s = e) {
        for (e = s + 1; e < n && r[e].kb == r[s].kb; e++) {}
        int k = (int)(r[s].kb >> 8), b = (int)(r[s].kb & 255);
        int32_t *q = malloc((e - s) * sizeof *q);
        if (!q) rc = -1;
        for (size_t j = s; q && j < e; j++) q[j - s] = r[j].i;
        t->first_idx[k][b] = q;
        t->first_n[k][b] = q ? e - s : 0;
    }
    free(r);
    return rc;
}

static int build_id_table(rlx_tokenizer *t)
{
    const char **mt;
    size_t mn;
    tk_bpe_take_ids(t->bpe, &mt, &mn); /* the model's table, grown for the added ids */
    size_t n = mn;
    for (size_t i = 0; i < t->n_added; i++)
        if ((size_t)t->added[i].id + 1 > n) n = (size_t)t->added[i].id + 1;
    t->id_tok = realloc(mt, (n ? n : 1) * sizeof *t->id_tok);
    if (!t->id_tok) {
        free(mt);
        return -1;
    }
    memset(t->id_tok + mn, 0, (n - mn) * sizeof *t->id_tok);
    t->id_special = calloc(n ? n : 1, 1);
    if (!t->id_special) return -1;
    for (size_t i = 0; i < t->n_added; i++) {
        t->id_tok[t->added[i].id] = t->added[i].content;
        t->id_special[t->added[i].id] = (uint8_t)t->added[i].special;
    }
    t->n_ids = n;
    return 0;
}

static int load_json(rlx_tokenizer *t, json_t *root, rlx_diag *d)
{
    tk_jctx c = {t->origin, d};
    if (!json_is_object(root)) return tk_jerr(&c, "(root)", "must be an object");
    json_t *model = json_object_get(root, "model");
    if (!json_is_object(model)) return tk_jerr(&c, "model", "must be an object");
    const char *type = NULL;
    int rc = tk_jstr(&c, model, "model", "type", &type);
    if (rc) return rc;
    if (!type && json_object_get(model, "merges")) type = "BPE"; /* old files omit the type */
    if (!type || strcmp(type, "BPE"))
        return rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "%s: model.type: unsupported model type '%s' (supported: BPE)",
                            t->origin, type ? type : "(missing)");
    if (t->bpe) { /* vocab and merges came from tk_fast_bpe */
        if ((rc = tk_bpe_finish_vocab(&c, t->bpe, model))) return rc;
    } else if ((rc = tk_bpe_load(&c, model, &t->bpe))) {
        return rc;
    }
    if (t->added_fast) { /* what load_added checks beyond the shape */
        const char **mt;
        size_t mn;
        tk_bpe_id_to_token(t->bpe, &mt, &mn);
        for (size_t i = 0; i < t->n_added; i++)
            if ((uint64_t)t->added[i].id >= 4 * (uint64_t)(mn + t->n_added) + 65536)
                return tk_jerr(&c, "added_tokens", "an id is far beyond the vocabulary");
    } else if ((rc = load_added(&c, t, json_object_get(root, "added_tokens")))) {
        return rc;
    }
    json_t *j;
    if ((j = json_object_get(root, "normalizer")) && !json_is_null(j) &&
        (rc = tk_normalizer_load(&c, j, "normalizer", &t->normalizer)))
        return rc;
    if ((j = json_object_get(root, "pre_tokenizer")) && !json_is_null(j) &&
        (rc = tk_pretok_load(&c, j, "pre_tokenizer", &t->pretok)))
        return rc;
    if ((j = json_object_get(root, "post_processor")) && !json_is_null(j) &&
        (rc = tk_post_load(&c, j, "post_processor", &t->post)))
        return rc;
    if ((j = json_object_get(root, "decoder")) && !json_is_null(j) &&
        (rc = tk_decoder_load(&c, j, "decoder", &t->decoder)))
        return rc;
    if (index_added(t) || build_id_table(t)) return NOMEM(d, t);
    return 0;
}

/* the rest of the file (everything but vocab and merges, already in t->bpe) by jansson;
 * nonzero: t reset, nothing reported */
static int load_rest(rlx_tokenizer *t, const char *rest, size_t rest_len)
{
    rlx_diag quiet;
    rlx_diag_init(&quiet);
    json_t *root = NULL;
    char *cut = NULL;
    size_t cut_len;
    if (tk_fast_added(rest, rest_len, &t->added, &t->n_added, &cut, &cut_len) == 0) {
        t->added_fast = 1; /* jansson gets the few KB left */
        rest = cut;
        rest_len = cut_len;
    }
    int rc = rlx__json_parse(rest, rest_len, t->origin, &root, &quiet);
    if (!rc) rc = load_json(t, root, &quiet);
    json_decref(root);
    free(cut);
    if (rc) clear_parts(t);
    return rc;
}

/* a cache file to write: the source bytes (for their hash) and the rest text are the
 * job's, the tables stay the tokenizer's */
typedef struct cache_job {
    char *cpath, *rest, *buf;
    size_t len;
    tk_cache_key key;
    tk_cache_view view;
} cache_job;

static void *write_job(void *arg)
{
    cache_job *j = arg;
    j->key.size = j->len;
    j->key.hash = tk_cache_hash(j->buf, j->len);
    j->key.sample = tk_cache_sample(j->buf, j->len);
    j->view.rest = j->rest;
    tk_cache_write(j->cpath, &j->key, &j->view);
    free(j->cpath);
    free(j->rest);
    free(j->buf);
    free(j);
    return NULL;
}

/* vocab and merges by tk_fast_bpe, the rest by jansson. On success with cpath, the cache
 * is written by a thread (the load returns without waiting for tens of MB of writes),
 * which takes *bufp. Nonzero: t reset, nothing reported (parse it all the ordinary way). */
static int load_fast(rlx_tokenizer *t, char **bufp, size_t len, const char *cpath, const tk_cache_key *key)
{
    rlx_diag quiet;
    rlx_diag_init(&quiet);
    tk_jctx c = {t->origin, &quiet};
    char *rest = NULL;
    size_t rest_len;
    if (tk_fast_bpe(&c, *bufp, len, &t->bpe, &rest, &rest_len)) return -1;
    int rc = load_rest(t, rest, rest_len);
    cache_job *j = !rc && cpath ? calloc(1, sizeof *j) : NULL;
    if (j && (j->cpath = strdup(cpath))) {
        j->rest = rest;
        j->buf = *bufp;
        j->len = len;
        j->key = *key;
        tk_bpe_view(t->bpe, &j->view);
        j->view.rest_len = rest_len;
        rest = NULL;
        *bufp = NULL;
        if (pthread_create(&t->writer, NULL, write_job, j) == 0) t->writing = 1;
        else write_job(j);
    } else {
        free(j);
    }
    free(rest);
    return rc;
}

/* A valid cache of path: 0 and t loaded. *key gets the source's stat data (before its
 * bytes are read on a miss: a change after this is a miss next time). */
static int load_cached(rlx_tokenizer *t, const char *path, const char *cpath, tk_cache_key *key)
{
    int fd;
    struct stat st;
    rlx_diag quiet;
    rlx_diag_init(&quiet);
    if (rlx__open_regular(path, &fd, &st, &quiet)) return -1;
    tk_cache_stat_key(&st, key);
    tk_cache_view v;
    void *map;
    size_t map_len;
    int rc = key->size <= RLX__MAX_JSON_FILE ? tk_cache_read(cpath, fd, key, &v, &map, &map_len) : -1;
    close(fd);
    if (rc) return -1;
    if (!(t->bpe = tk_bpe_from_view(&v, map, map_len))) {
        munmap(map, map_len);
        return -1;
    }
    rc = load_rest(t, v.rest, v.rest_len);
    rlx__host_log(RLX_LOG_DEBUG, "tokenizer", "%s: %s cache %s", path, rc ? "rejected" : "loaded from", cpath);
    return rc;
}

RLX_API int rlx_tokenizer_load(const char *path, rlx_tokenizer **out, rlx_diag *d)
{
    if (!out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_tokenizer_load: out is NULL");
    *out = NULL;
    if (!path) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_tokenizer_load: path is NULL");
    rlx_tokenizer *t = calloc(1, sizeof *t);
    if (!t || !(t->origin = strdup(path))) {
        free(t);
        return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", path);
    }
    char cpath[PATH_MAX + 64];
    tk_cache_key key = {0};
    int cached = tk_cache_path(path, cpath, sizeof cpath) == 0;
    if (cached && load_cached(t, path, cpath, &key) == 0) {
        *out = t;
        return 0;
    }
    char *buf = NULL;
    size_t len = 0;
    int rc = rlx__read_small_file(path, RLX__MAX_JSON_FILE, &buf, &len, d);
    if (rc) {
        rlx_tokenizer_free(t);
        return rc;
    }
    /* the stat data were taken before the bytes: a file changed in between is a miss
     * next time, or (changed in the same time-stamp tick) racy, checked by its hash */
    key.racy = tk_cache_racy(&key);
    rc = load_fast(t, &buf, len, cached && key.size ? cpath : NULL, &key);
    if (rc) { /* the whole file through jansson: also the path that reports every error */
        json_t *root = NULL;
        rc = rlx__json_parse(buf, len, path, &root, d);
        if (!rc) rc = load_json(t, root, d);
        json_decref(root);
    }
    free(buf);
    if (rc) {
        rlx_tokenizer_free(t);
        return rc;
    }
    *out = t;
    return 0;
}

/* ---------------------------------------------------------------- added tokens */
static int is_word_cp(uint32_t c)
{
    if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    return !tk_is_space_cp(c);
}

static uint32_t cp_before(const char *s, size_t at)
{
    size_t k = at - 1, adv;
    while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    return tk_utf8_decode(s + k, at - k, &adv);
}

/* Leftmost-longest added token in s[from..n) from table k; the match [*ms, *me) includes
 * the whitespace that lstrip / rstrip swallow (never before `from`). */
static int find_added(const rlx_tokenizer *t, int k, const char *s, size_t n, size_t from, size_t *ms,
                      size_t *me, int32_t *id)
{
    for (size_t pos = from; pos < n; pos++) {
        unsigned char b = (unsigned char)s[pos];
        size_t cnt = t->first_n[k][b];
        if (!cnt) continue;
        for (size_t i = 0; i < cnt; i++) {
            const tk_added *a = &t->added[t->first_idx[k][b][i]];
            if (a->match_len > n - pos || memcmp(s + pos, a->match, a->match_len)) continue;
            size_t st = pos, en = pos + a->match_len, adv;
            if (a->single_word) {
                if ((st > 0 && is_word_cp(cp_before(s, st))) ||
                    (en < n && is_word_cp(tk_utf8_decode(s + en, n - en, &adv))))
                    break; /* the longest match at this position decides, as tokenizers does */
            }
            if (a->lstrip)
                while (st > from && tk_is_space_cp(cp_before(s, st))) {
                    size_t k2 = st - 1;
                    while (k2 > from && ((unsigned char)s[k2] & 0xC0) == 0x80) k2--;
                    st = k2;
                }
            if (a->rstrip)
                while (en < n && tk_is_space_cp(tk_utf8_decode(s + en, n - en, &adv))) en += adv;
            *ms = st;
            *me = en;
            *id = a->id;
            return 1;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- encode */
typedef struct enc_state {
    const rlx_tokenizer *t;
    tk_ids *ids;
    tk_buf norm;
    tk_pieces in, words;
} enc_state;

static int encode_words(enc_state *st, const char *s, size_t n, int is_first)
{
    if (!n) return 0;
    if (!st->t->pretok) return tk_bpe_encode_word(st->t->bpe, s, n, st->ids);
    tk_pieces_clear(&st->in);
    if (tk_pieces_add(&st->in, s, n) || tk_pretok_apply(st->t->pretok, &st->in, &st->words, is_first))
        return -1;
    for (size_t i = 0; i < st->words.n; i++) {
        size_t wl;
        const char *w = tk_piece(&st->words, i, &wl);
        if (tk_bpe_encode_word(st->t->bpe, w, wl, st->ids)) return -1;
    }
    return 0;
}

/* a stretch of text free of raw added tokens: normalize, cut normalized added tokens */
static int encode_segment(enc_state *st, const char *s, size_t n, int is_first)
{
    const rlx_tokenizer *t = st->t;
    if (!n) return 0;
    if (!t->normalizer) return encode_words(st, s, n, is_first);
    if (tk_normalizer_apply(t->normalizer, s, n, &st->norm)) return -1;
    /* the words reuse st->in, so keep the normalized text in a buffer of its own */
    tk_buf norm = st->norm;
    st->norm = (tk_buf){0};
    size_t pos = 0, ms, me;
    int32_t id;
    int rc = 0;
    while (!rc && find_added(t, 1, norm.p, norm.n, pos, &ms, &me, &id)) {
        rc = encode_words(st, norm.p + pos, ms - pos, is_first && pos == 0);
        if (!rc) rc = tk_ids_push(st->ids, id);
        pos = me;
    }
    if (!rc) rc = encode_words(st, norm.p + pos, norm.n - pos, is_first && pos == 0);
    tk_buf_free(&st->norm);
    st->norm = norm;
    return rc;
}

RLX_API int rlx_tokenizer_encode(const rlx_tokenizer *t, const char *text, size_t len, int add_special,
                                 int32_t **ids, size_t *n_ids, rlx_diag *d)
{
    if (!ids || !n_ids) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_tokenizer_encode: NULL output");
    *ids = NULL;
    *n_ids = 0;
    if (!t || (!text && len)) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_tokenizer_encode: NULL argument");
    if (!text) text = "";
    const uint8_t *bad = u8_check((const uint8_t *)text, len);
    if (bad)
        return rlx_diag_set(d, RLX_ERR_INVALID, "%s: text to encode is not valid UTF-8 (byte %zu)", t->origin,
                            (size_t)(bad - (const uint8_t *)text));
    tk_ids out = {0};
    enc_state st = {.t = t, .ids = &out};
    int rc = tk_pieces_init(&st.in) || tk_pieces_init(&st.words);
    size_t pos = 0, ms, me;
    int32_t id;
    while (!rc && find_added(t, 0, text, len, pos, &ms, &me, &id)) {
        rc = encode_segment(&st, text + pos, ms - pos, pos == 0);
        if (!rc) rc = tk_ids_push(&out, id);
        pos = me;
    }
    if (!rc) rc = encode_segment(&st, text + pos, len - pos, pos == 0);
    tk_pieces_free(&st.in);
    tk_pieces_free(&st.words);
    tk_buf_free(&st.norm);
    if (!rc && add_special && t->post) {
        tk_ids post = {0};
        rc = tk_post_apply(t->post, out.v, out.n, &post);
        free(out.v);
        out = post;
    }
    if (rc) {
        free(out.v);
        return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: encoding failed: out of memory or a regex match limit",
                            t->origin);
    }
    if (!out.v && !(out.v = malloc(sizeof(int32_t)))) return NOMEM(d, t);
    *ids = out.v;
    *n_ids = out.n;
    return 0;
}

/* ---------------------------------------------------------------- decode */
RLX_API int rlx_tokenizer_decode(const rlx_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                                 char **text, rlx_diag *d)
{
    if (!text) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_tokenizer_decode: NULL output");
    *text = NULL;
    if (!t || (!ids && n)) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_tokenizer_decode: NULL argument");
    tk_pieces toks;
    tk_buf out = {0};
    if (tk_pieces_init(&toks)) return NOMEM(d, t);
    int rc = 0;
    for (size_t i = 0; !rc && i < n; i++) {
        int32_t id = ids[i];
        /* ids the vocabulary lacks are skipped, as tokenizers' decode does */
        if (id < 0 || (size_t)id >= t->n_ids || !t->id_tok[id]) continue;
        if (skip_special && t->id_special[id]) continue;
        rc = tk_pieces_add(&toks, t->id_tok[id], strlen(t->id_tok[id]));
    }
    if (!rc) rc = tk_decoder_apply(t->decoder, &toks, &out);
    tk_pieces_free(&toks);
    if (rc) {
        tk_buf_free(&out);
        return NOMEM(d, t);
    }
    if (!out.p && tk_buf_put(&out, "", 0)) return NOMEM(d, t);
    *text = out.p;
    return 0;
}

RLX_API int64_t rlx_tokenizer_vocab_size(const rlx_tokenizer *t) { return t ? (int64_t)t->n_ids : 0; }

RLX_API int32_t rlx_tokenizer_token_id(const rlx_tokenizer *t, const char *token)
{
    if (!t || !token) return -1;
    size_t n = strlen(token);
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].len == n && !memcmp(t->added[i].content, token, n)) return t->added[i].id;
    int32_t id;
    return tk_strmap_get(tk_bpe_vocab(t->bpe), token, n, &id) ? id : -1;
}
