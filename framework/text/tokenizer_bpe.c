/* The BPE model of tokenizer.json: vocab, merges by rank, byte fallback, unk, and a
 * per-word cache (words repeat a lot in text, merging is the expensive part). */
#include "text/tokenizer_internal.h"
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define CACHE_MAX_WORD 128         /* longer words are not cached */
#define CACHE_MAX_ENTRIES (1u << 17)
#define PUT_AHEAD 8 /* merges held back while their table slot is fetched */

typedef struct word_cache {
    pthread_mutex_t mu;
    struct centry { uint64_t h; uint32_t koff, klen, ioff, nids; } *e; /* klen 0: empty */
    size_t cap, n;
    tk_buf keys;
    tk_ids ids;
} word_cache;

struct tk_bpe {
    tk_strmap vocab;
    tk_pairmap merges;
    int32_t unk_id; /* -1: none */
    int32_t max_id; /* largest vocab id (while loading) */
    int byte_fallback, fuse_unk, ignore_merges;
    char *prefix, *suffix; /* continuing_subword_prefix, end_of_word_suffix */
    size_t prefix_len, suffix_len;
    int32_t byte_ids[256]; /* "<0xAB>" ids for byte fallback, -1 missing */
    const char **id_tok;
    size_t n_ids;
    /* (last char of left, first char of right) of every merge: a long word can be cut
     * between two in-vocabulary characters that form no such pair, since no merge can
     * ever cross there; the pieces are then merged (and cached) independently */
    tk_pairmap junctions;
    int can_cut;
    word_cache cache;
    int64_t merge_base; /* merged token id - merge index, last seen (guess_merged) */
    int guess_misses;   /* 32 x the misses among about the last 32 guesses (0..1024) */
    struct pendput { int32_t a, b, rank, merged; } put[PUT_AHEAD]; /* a ring: put_n from put_at */
    size_t put_at, put_n;
    void *map; /* the cache file the tables live in, or NULL */
    size_t map_len;
};

const tk_strmap *tk_bpe_vocab(const tk_bpe *b) { return &b->vocab; }

int tk_bpe_id_to_token(const tk_bpe *b, const char ***tokens, size_t *count)
{
    *tokens = b->id_tok;
    *count = b->n_ids;
    return 0;
}

void tk_bpe_take_ids(tk_bpe *b, const char ***tokens, size_t *count)
{
    tk_bpe_id_to_token(b, tokens, count);
    b->id_tok = NULL;
}

static int lookup(const tk_bpe *b, const char *s, size_t n, int32_t *id)
{
    return tk_strmap_get(&b->vocab, s, n, id);
}

/* id -> token string (after the vocab is complete); -1 when ids are too sparse for a
 * table (tk_bpe_finish_vocab reports that) or out of memory */
static int index_ids(tk_bpe *b)
{
    if (b->id_tok) return 0;
    int64_t max_id = b->vocab.n ? b->max_id : -1;
    if (max_id >= 4 * (int64_t)b->vocab.n + 65536) return -1;
    b->n_ids = (size_t)(max_id + 1);
    b->id_tok = calloc(b->n_ids ? b->n_ids : 1, sizeof *b->id_tok);
    if (!b->id_tok) return -1;
    for (size_t i = 0; i < b->vocab.cap; i++)
        if (b->vocab.e[i].off) b->id_tok[b->vocab.e[i].v] = b->vocab.keys + b->vocab.e[i].off - 1;
    return 0;
}

/* the id of l + r when it is the token guessed: byte-level vocabularies number merged
 * tokens in merge order, so id = merge index + a fixed offset, checked against the string
 * (one sequential read instead of a hash probe) */
static int guess_merged(tk_bpe *b, const char *l, size_t ln, const char *r, size_t rn, size_t i, int32_t *id)
{
    int64_t g = b->merge_base + (int64_t)i;
    if (!b->id_tok || g < 0 || g >= (int64_t)b->n_ids) return 0;
    const char *t = b->id_tok[g];
    if (!t || memcmp(t, l, ln) || memcmp(t + ln, r, rn) || t[ln + rn]) return 0;
    *id = (int32_t)g;
    return 1;
}

/* the oldest merge held back goes into the table (its slot fetched meanwhile) */
static int put_oldest(tk_bpe *b)
{
    const struct pendput *p = &b->put[b->put_at];
    if (tk_pairmap_put(&b->merges, p->a, p->b, p->rank, p->merged)) return -1;
    b->put_at = (b->put_at + 1) % PUT_AHEAD;
    b->put_n--;
    return 0;
}

/* merge i of rank i: l + r (both and their concatenation in the vocab); stored in the
 * table up to PUT_AHEAD merges later (tk_bpe_end_merges stores the rest) */
int tk_bpe_add_merge(const tk_jctx *c, tk_bpe *b, const char *l, size_t ln, const char *r, size_t rn,
                     size_t i)
{
    char path[64];
    int32_t a, bb, ab;
    if (!lookup(b, l, ln, &a) || !lookup(b, r, rn, &bb)) {
        int left = !lookup(b, l, ln, &a);
        snprintf(path, sizeof path, "model.merges[%zu]", i);
        return tk_jerr(c, path, "token '%.*s' is not in model.vocab", (int)(left ? ln : rn), left ? l : r);
    }
    if (i == 0) index_ids(b); /* the vocab is complete once merges come */
    int found = guess_merged(b, l, ln, r, rn, i, &ab);
    b->guess_misses += (found ? 0 : 32) - b->guess_misses / 32;
    if (!found) {
        char stackbuf[256];
        char *cat = ln + rn <= sizeof stackbuf ? stackbuf : malloc(ln + rn);
        if (!cat) return rlx_diag_set(c->d, RLX_ERR_NOMEM, "%s: out of memory", c->origin);
        memcpy(cat, l, ln);
        memcpy(cat + ln, r, rn);
        found = lookup(b, cat, ln + rn, &ab);
        if (cat != stackbuf) free(cat);
        if (found) b->merge_base = (int64_t)ab - (int64_t)i;
    }
    if (!found) {
        snprintf(path, sizeof path, "model.merges[%zu]", i);
        return tk_jerr(c, path, "merged token '%.*s%.*s' is not in model.vocab", (int)ln, l, (int)rn, r);
    }
    size_t adv, k = ln ? ln - 1 : 0;
    while (k > 0 && ((unsigned char)l[k] & 0xC0) == 0x80) k--;
    int32_t jl = (int32_t)tk_utf8_decode(l + k, ln - k, &adv), jr = (int32_t)tk_utf8_decode(r, rn, &adv);
    if (tk_pairmap_put(&b->junctions, jl, jr, 0, 0) || (b->put_n == PUT_AHEAD && put_oldest(b)))
        return rlx_diag_set(c->d, RLX_ERR_NOMEM, "%s: out of memory", c->origin);
    b->put[(b->put_at + b->put_n++) % PUT_AHEAD] = (struct pendput){a, bb, (int32_t)i, ab};
    tk_pairmap_prefetch(&b->merges, a, bb);
    return 0;
}

int tk_bpe_end_merges(const tk_jctx *c, tk_bpe *b)
{
    while (b->put_n)
        if (put_oldest(b)) return rlx_diag_set(c->d, RLX_ERR_NOMEM, "%s: out of memory", c->origin);
    return 0;
}

void tk_bpe_prefetch(const tk_bpe *b, const char *l, size_t ln, const char *r, size_t rn, int key)
{
    tk_strmap_prefetch(&b->vocab, l, ln, key);
    tk_strmap_prefetch(&b->vocab, r, rn, key);
    char cat[64];
    if (b->guess_misses > 256 && ln + rn <= sizeof cat) { /* guesses failing lately: looked up */
        memcpy(cat, l, ln);
        memcpy(cat + ln, r, rn);
        tk_strmap_prefetch(&b->vocab, cat, ln + rn, key);
    }
}

static int load_merge(const tk_jctx *c, tk_bpe *b, json_t *m, size_t i)
{
    char path[64];
    snprintf(path, sizeof path, "model.merges[%zu]", i);
    const char *l, *r;
    size_t ln, rn;
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        const char *sp = strchr(s, ' ');
        if (!sp || strchr(sp + 1, ' '))
            return tk_jerr(c, path, "a merge string must be two tokens separated by one space");
        l = s;
        ln = (size_t)(sp - s);
        r = sp + 1;
        rn = strlen(r);
    } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
               json_is_string(json_array_get(m, 1))) {
        l = json_string_value(json_array_get(m, 0));
        ln = json_string_length(json_array_get(m, 0));
        r = json_string_value(json_array_get(m, 1));
        rn = json_string_length(json_array_get(m, 1));
    } else {
        return tk_jerr(c, path, "a merge must be \"a b\" or [\"a\", \"b\"]");
    }
    return tk_bpe_add_merge(c, b, l, ln, r, rn, i);
}

tk_bpe *tk_bpe_new(void)
{
    tk_bpe *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    pthread_mutex_init(&b->cache.mu, NULL);
    b->unk_id = -1;
    return b;
}

int tk_bpe_reserve(tk_bpe *b, size_t n_vocab, size_t key_bytes, size_t n_merges)
{
    return tk_strmap_reserve(&b->vocab, n_vocab, key_bytes) || tk_pairmap_reserve(&b->merges, n_merges);
}

int tk_bpe_add_token(tk_bpe *b, const char *k, size_t n, int32_t id)
{
    size_t before = b->vocab.n;
    if (tk_strmap_put(&b->vocab, k, n, id)) return -1;
    if (b->vocab.n == before) return 1;
    if (id > b->max_id) b->max_id = id;
    return 0;
}

/* after the vocab: the id table and the model's options; then merges may be added */
int tk_bpe_finish_vocab(const tk_jctx *c, tk_bpe *b, json_t *model)
{
    int rc;
    int64_t max_id = b->vocab.n ? b->max_id : -1;
    /* ids index arrays: refuse absurdly sparse ones rather than allocate gigabytes */
    if (max_id >= 4 * (int64_t)b->vocab.n + 65536)
        return tk_jerr(c, "model.vocab", "ids are not dense (largest id %lld for %zu tokens)", (long long)max_id,
                       b->vocab.n);
    if (index_ids(b)) goto nomem;

    const char *unk = NULL, *pre = NULL, *suf = NULL;
    if ((rc = tk_jstr(c, model, "model", "unk_token", &unk)) ||
        (rc = tk_jstr(c, model, "model", "continuing_subword_prefix", &pre)) ||
        (rc = tk_jstr(c, model, "model", "end_of_word_suffix", &suf)) ||
        (rc = tk_jbool(c, model, "model", "byte_fallback", &b->byte_fallback)) ||
        (rc = tk_jbool(c, model, "model", "fuse_unk", &b->fuse_unk)) ||
        (rc = tk_jbool(c, model, "model", "ignore_merges", &b->ignore_merges)))
        return rc;
    json_t *dropout = json_object_get(model, "dropout");
    if (json_is_number(dropout) && json_number_value(dropout) > 0)
        return rlx_diag_set(c->d, RLX_ERR_UNSUPPORTED, "%s: model.dropout: BPE dropout is not supported",
                            c->origin);
    if (unk && !lookup(b, unk, strlen(unk), &b->unk_id))
        return tk_jerr(c, "model.unk_token", "'%s' is not in model.vocab", unk);
    if (pre && *pre) {
        if (!(b->prefix = strdup(pre))) goto nomem;
        b->prefix_len = strlen(pre);
    }
    if (suf && *suf) {
        if (!(b->suffix = strdup(suf))) goto nomem;
        b->suffix_len = strlen(suf);
    }
    for (int i = 0; i < 256; i++) {
        char tok[8];
        snprintf(tok, sizeof tok, "<0x%02X>", i);
        if (!lookup(b, tok, 6, &b->byte_ids[i])) b->byte_ids[i] = -1;
    }
    b->can_cut = !b->prefix && !b->suffix;
    return 0;
nomem:
    return rlx_diag_set(c->d, RLX_ERR_NOMEM, "%s: out of memory", c->origin);
}

int tk_bpe_load(const tk_jctx *c, json_t *model, tk_bpe **out)
{
    *out = NULL;
    tk_bpe *b = tk_bpe_new();
    if (!b) return rlx_diag_set(c->d, RLX_ERR_NOMEM, "%s: out of memory", c->origin);
    int rc = 0;
    json_t *vocab = json_object_get(model, "vocab");
    json_t *merges = json_object_get(model, "merges");
    if (!json_is_object(vocab)) {
        rc = tk_jerr(c, "model.vocab", "must be an object {token: id}");
        goto fail;
    }
    if (merges && !json_is_null(merges) && !json_is_array(merges)) {
        rc = tk_jerr(c, "model.merges", "must be an array");
        goto fail;
    }
    const char *key;
    json_t *v;
    json_object_foreach(vocab, key, v) {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= INT32_MAX) {
            rc = tk_jerr(c, "model.vocab", "id of '%s' must be a non-negative integer", key);
            goto fail;
        }
        if (tk_bpe_add_token(b, key, strlen(key), (int32_t)json_integer_value(v)) < 0) goto nomem;
    }
    if ((rc = tk_bpe_finish_vocab(c, b, model))) goto fail;
    for (size_t i = 0; merges && i < json_array_size(merges); i++)
        if ((rc = load_merge(c, b, json_array_get(merges, i), i))) goto fail;
    if ((rc = tk_bpe_end_merges(c, b))) goto fail;
    *out = b;
    return 0;
nomem:
    rc = rlx_diag_set(c->d, RLX_ERR_NOMEM, "%s: out of memory", c->origin);
fail:
    tk_bpe_free(b);
    return rc;
}

void tk_bpe_view(const tk_bpe *b, tk_cache_view *v)
{
    v->vocab = b->vocab;
    v->merges = b->merges;
    v->junctions = b->junctions;
    v->max_id = b->max_id;
}

tk_bpe *tk_bpe_from_view(const tk_cache_view *v, void *map, size_t map_len)
{
    tk_bpe *b = tk_bpe_new();
    if (!b) {
        free(v->id_tok);
        return NULL;
    }
    b->id_tok = v->id_tok;
    b->n_ids = v->n_ids;
    b->vocab = v->vocab;
    b->merges = v->merges;
    b->junctions = v->junctions;
    b->vocab.borrowed = b->merges.borrowed = b->junctions.borrowed = 1;
    b->max_id = v->max_id;
    b->map = map;
    b->map_len = map_len;
    return b;
}

void tk_bpe_free(tk_bpe *b)
{
    if (!b) return;
    tk_strmap_free(&b->vocab);
    tk_pairmap_free(&b->merges);
    tk_pairmap_free(&b->junctions);
    free(b->id_tok);
    free(b->prefix);
    free(b->suffix);
    free(b->cache.e);
    tk_buf_free(&b->cache.keys);
    free(b->cache.ids.v);
    pthread_mutex_destroy(&b->cache.mu);
    if (b->map) munmap(b->map, b->map_len);
    free(b);
}

/* ---------------------------------------------------------------- cache */
static int cache_get(word_cache *wc, const char *w, size_t n, uint64_t h, tk_ids *out)
{
    int hit = 0;
    pthread_mutex_lock(&wc->mu);
    if (wc->cap) {
        size_t j = h & (wc->cap - 1);
        while (wc->e[j].klen) {
            struct centry *e = &wc->e[j];
            if (e->h == h && e->klen == n && memcmp(wc->keys.p + e->koff, w, n) == 0) {
                hit = 1;
                for (uint32_t k = 0; k < e->nids; k++)
                    if (tk_ids_push(out, wc->ids.v[e->ioff + k])) hit = -1;
                break;
            }
            j = (j + 1) & (wc->cap - 1);
        }
    }
    pthread_mutex_unlock(&wc->mu);
    return hit;
}

static void cache_put(word_cache *wc, const char *w, size_t n, uint64_t h, const int32_t *ids,
                      size_t nids)
{
    pthread_mutex_lock(&wc->mu);
    if (wc->n >= CACHE_MAX_ENTRIES) { /* full: start over rather than track recency */
        memset(wc->e, 0, wc->cap * sizeof *wc->e);
        wc->n = 0;
        wc->keys.n = 0;
        wc->ids.n = 0;
    }
    if ((wc->n + 1) * 2 > wc->cap) {
        size_t nc = wc->cap ? wc->cap * 2 : 1024;
        struct centry *e = calloc(nc, sizeof *e);
        if (!e) goto out;
        for (size_t i = 0; i < wc->cap; i++) {
            if (!wc->e[i].klen) continue;
            size_t j = wc->e[i].h & (nc - 1);
            while (e[j].klen) j = (j + 1) & (nc - 1);
            e[j] = wc->e[i];
        }
        free(wc->e);
        wc->e = e;
        wc->cap = nc;
    }
    size_t koff = wc->keys.n, ioff = wc->ids.n;
    if (tk_buf_put(&wc->keys, w, n)) goto out;
    for (size_t k = 0; k < nids; k++)
        if (tk_ids_push(&wc->ids, ids[k])) {
            wc->ids.n = ioff;
            wc->keys.n = koff;
            goto out;
        }
    size_t j = h & (wc->cap - 1);
    while (wc->e[j].klen) {
        if (wc->e[j].h == h && wc->e[j].klen == n && memcmp(wc->keys.p + wc->e[j].koff, w, n) == 0)
            goto out; /* another thread got there first */
        j = (j + 1) & (wc->cap - 1);
    }
    wc->e[j] = (struct centry){h, (uint32_t)koff, (uint32_t)n, (uint32_t)ioff, (uint32_t)nids};
    wc->n++;
out:
    pthread_mutex_unlock(&wc->mu);
}

/* ---------------------------------------------------------------- merging */
typedef struct sym { int32_t id, prev, next, alive; } sym;

/* Candidate merges in a 4-ary min-heap of (rank << 32 | position): integer compares and
 * half the depth of a binary heap matter when a word is a whole document (no
 * pre-tokenizer, as in SentencePiece-style files). */
static void heap_push(uint64_t *h, size_t *n, uint64_t c)
{
    size_t i = (*n)++;
    while (i) {
        size_t p = (i - 1) / 4;
        if (h[p] <= c) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static uint64_t heap_pop(uint64_t *h, size_t *n)
{
    uint64_t top = h[0], last = h[--*n];
    size_t i = 0, len = *n;
    for (;;) {
        size_t c = 4 * i + 1;
        if (c >= len) break;
        size_t m = c;
        size_t e = c + 4 < len ? c + 4 : len;
        for (size_t k = c + 1; k < e; k++)
            if (h[k] < h[m]) m = k;
        if (h[m] >= last) break;
        h[i] = h[m];
        i = m;
    }
    if (len) h[i] = last;
    return top;
}

#define CAND(rank, pos) (((uint64_t)(uint32_t)(rank) << 32) | (uint32_t)(pos))

static int add_sym(sym **s, size_t *n, size_t *cap, int32_t id)
{
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        sym *q = realloc(*s, nc * sizeof *q);
        if (!q) return -1;
        *s = q;
        *cap = nc;
    }
    (*s)[*n] = (sym){id, (int32_t)*n - 1, (int32_t)*n + 1, 1};
    (*n)++;
    return 0;
}

/* Split the word into initial symbols (characters, byte fallback, unk). */
static int initial_symbols(const tk_bpe *b, const char *w, size_t n, sym **s, size_t *ns, size_t *cap)
{
    char stackbuf[64];
    int prev_unk = 0;
    for (size_t i = 0; i < n;) {
        size_t cl = tk_utf8_len((unsigned char)w[i]);
        if (cl > n - i) cl = n - i;
        int first = i == 0, last = i + cl == n;
        const char *key = w + i;
        size_t kn = cl;
        char *heap = NULL;
        if ((b->prefix && !first) || (b->suffix && last)) {
            size_t need = cl + (first ? 0 : b->prefix_len) + (last ? b->suffix_len : 0);
            char *k = need <= sizeof stackbuf ? stackbuf : (heap = malloc(need));
            if (!k) return -1;
            kn = 0;
            if (b->prefix && !first) { memcpy(k, b->prefix, b->prefix_len); kn += b->prefix_len; }
            memcpy(k + kn, w + i, cl);
            kn += cl;
            if (b->suffix && last) { memcpy(k + kn, b->suffix, b->suffix_len); kn += b->suffix_len; }
            key = k;
        }
        int32_t id;
        int found = lookup(b, key, kn, &id);
        free(heap);
        if (found) {
            if (add_sym(s, ns, cap, id)) return -1;
            prev_unk = 0;
        } else {
            int all = b->byte_fallback;
            for (size_t k = 0; all && k < cl; k++)
                if (b->byte_ids[(unsigned char)w[i + k]] < 0) all = 0;
            if (all) {
                for (size_t k = 0; k < cl; k++)
                    if (add_sym(s, ns, cap, b->byte_ids[(unsigned char)w[i + k]])) return -1;
                prev_unk = 0;
            } else if (b->unk_id >= 0) {
                if (!(b->fuse_unk && prev_unk) && add_sym(s, ns, cap, b->unk_id)) return -1;
                prev_unk = 1;
            }
            /* no unk token: the character is dropped, as tokenizers does */
        }
        i += cl;
    }
    return 0;
}

static int merge_word(const tk_bpe *b, sym *s, size_t ns)
{
    if (ns < 2) return 0;
    s[ns - 1].next = -1;
    /* one entry per live pair at most: ns - 1 at the start, each merge adds <= 1 net */
    uint64_t *heap = malloc(2 * ns * sizeof *heap);
    if (!heap) return -1;
    size_t hn = 0;
    int32_t rank, merged;
    for (size_t i = 0; i + 1 < ns; i++)
        if (tk_pairmap_get(&b->merges, s[i].id, s[i + 1].id, &rank, &merged))
            heap_push(heap, &hn, CAND(rank, i));
    while (hn) {
        uint64_t c = heap_pop(heap, &hn);
        int32_t crank = (int32_t)(c >> 32), pos = (int32_t)(uint32_t)c;
        sym *a = &s[pos];
        if (!a->alive || a->next < 0) continue;
        sym *nx = &s[a->next];
        if (!tk_pairmap_get(&b->merges, a->id, nx->id, &rank, &merged) || rank != crank)
            continue; /* stale: one side was merged since */
        a->id = merged;
        nx->alive = 0;
        a->next = nx->next;
        if (a->next >= 0) s[a->next].prev = pos;
        if (a->prev >= 0 && tk_pairmap_get(&b->merges, s[a->prev].id, a->id, &rank, &merged))
            heap_push(heap, &hn, CAND(rank, a->prev));
        if (a->next >= 0 && tk_pairmap_get(&b->merges, a->id, s[a->next].id, &rank, &merged))
            heap_push(heap, &hn, CAND(rank, pos));
    }
    free(heap);
    return 0;
}

static int encode_piece(tk_bpe *b, const char *w, size_t n, tk_ids *out)
{
    uint64_t h = 0;
    int cacheable = n <= CACHE_MAX_WORD;
    if (cacheable) {
        h = tk_hash(w, n);
        int hit = cache_get(&b->cache, w, n, h, out);
        if (hit) return hit < 0 ? -1 : 0;
    }
    int32_t id;
    if (b->ignore_merges && lookup(b, w, n, &id)) return tk_ids_push(out, id);
    sym *s = NULL;
    size_t ns = 0, cap = 0;
    int rc = initial_symbols(b, w, n, &s, &ns, &cap);
    if (!rc) rc = merge_word(b, s, ns);
    size_t start = out->n;
    for (size_t i = 0; !rc && i < ns; i++)
        if (s[i].alive && tk_ids_push(out, s[i].id)) rc = -1;
    free(s);
    /* a word of unknown characters (no unk, no byte fallback) adds no ids: out->v may be NULL */
    if (!rc && cacheable) cache_put(&b->cache, w, n, h, out->v ? out->v + start : NULL, out->n - start);
    return rc;
}

int tk_bpe_encode_word(tk_bpe *b, const char *w, size_t n, tk_ids *out)
{
    if (!n) return 0;
    if (n <= CACHE_MAX_WORD || !b->can_cut || (b->ignore_merges && tk_strmap_get(&b->vocab, w, n, &(int32_t){0})))
        return encode_piece(b, w, n, out);
    /* a long word (a whole document when there is no pre-tokenizer): cut it where no
     * merge can cross, see tk_bpe.junctions */
    size_t start = 0, pstart = 0, adv;
    uint32_t prev = tk_utf8_decode(w, n, &adv);
    size_t i = adv;
    int prev_in = -1; /* -1: not looked up yet */
    while (i < n) {
        uint32_t cur = tk_utf8_decode(w + i, n - i, &adv);
        int32_t r, m, id;
        int cur_in = -1;
        if (!tk_pairmap_get(&b->junctions, (int32_t)prev, (int32_t)cur, &r, &m)) {
            /* characters outside the vocabulary become byte-fallback or unk symbols,
             * whose merges the junction table does not describe: never cut next to them */
            if (prev_in < 0) prev_in = lookup(b, w + pstart, i - pstart, &id);
            cur_in = lookup(b, w + i, adv, &id);
            if (prev_in && cur_in) {
                if (encode_piece(b, w + start, i - start, out)) return -1;
                start = i;
            }
        }
        prev_in = cur_in;
        prev = cur;
        pstart = i;
        i += adv;
    }
    return encode_piece(b, w + start, n - start, out);
}
