/* Tokenizer internals shared by framework/tokenizer*.c (never installed).
 * The pipeline mirrors Hugging Face tokenizers: added tokens are cut out first, the
 * rest is normalized, pre-tokenized into words, and each word goes through the model
 * (BPE); a post-processor adds BOS & co; decoding maps ids to token strings and runs
 * the decoder chain. */
#ifndef RLX_TOKENIZER_INTERNAL_H
#define RLX_TOKENIZER_INTERNAL_H
#include "base/internal.h"
#include <pthread.h>
#include <stdint.h>
#include <stddef.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

struct json_t;

/* ---- growable byte buffer and a list of strings held in one buffer ---- */
typedef struct tk_buf {
    char *p;
    size_t n, cap;
} tk_buf;
int tk_buf_put(tk_buf *b, const void *s, size_t n);    /* 0 ok, -1 out of memory */
int tk_buf_putc(tk_buf *b, char c);
void tk_buf_free(tk_buf *b);

/* piece i is buf.p[off[i] .. off[i+1]) ; n pieces use n+1 offsets */
typedef struct tk_pieces {
    tk_buf buf;
    size_t *off;
    size_t n, cap;
} tk_pieces;
int tk_pieces_init(tk_pieces *ps);
int tk_pieces_add(tk_pieces *ps, const char *s, size_t n);
/* append bytes to the last piece (the piece must be the last one added) */
int tk_pieces_extend_last(tk_pieces *ps, const char *s, size_t n);
void tk_pieces_clear(tk_pieces *ps);
void tk_pieces_free(tk_pieces *ps);
static inline const char *tk_piece(const tk_pieces *ps, size_t i, size_t *len)
{
    *len = ps->off[i + 1] - ps->off[i];
    return ps->buf.p + ps->off[i];
}

/* ---- hash maps ---- */
uint64_t tk_hash(const void *s, size_t n);
/* string -> int32 (open addressing, load factor <= 1/2; keys copied, NUL-terminated, into
 * one buffer). Plain data without pointers, so a table can be saved and mapped back
 * whole (tokenizer_cache.c); borrowed: e and keys belong to such a mapping. */
struct tk_strent {
    uint32_t h;   /* low half of tk_hash */
    uint32_t off; /* key offset in keys + 1; 0: empty slot */
    uint32_t n;   /* key length */
    int32_t v;
};
typedef struct tk_strmap {
    struct tk_strent *e;
    size_t cap, n;
    char *keys;
    size_t keys_n, keys_cap;
    int borrowed;
} tk_strmap;
/* room for n entries and key_bytes of keys (NULs included) without regrowing */
int tk_strmap_reserve(tk_strmap *m, size_t n, size_t key_bytes);
int tk_strmap_put(tk_strmap *m, const char *k, size_t n, int32_t v); /* replaces */
int tk_strmap_get(const tk_strmap *m, const char *k, size_t n, int32_t *v); /* 1 found */
/* a hint that k is looked up soon: its home slot (key 0), then that slot's key bytes (key 1) */
void tk_strmap_prefetch(const tk_strmap *m, const char *k, size_t n, int key);
void tk_strmap_free(tk_strmap *m);

/* (left id, right id) -> (rank, merged id) */
struct tk_pairent {
    uint64_t key; /* (a << 32 | b) + 1; 0: empty */
    int32_t rank, merged;
};
typedef struct tk_pairmap {
    struct tk_pairent *e;
    size_t cap, n;
    int borrowed; /* e belongs to a cache mapping */
} tk_pairmap;
int tk_pairmap_reserve(tk_pairmap *m, size_t n); /* room for n entries */
int tk_pairmap_put(tk_pairmap *m, int32_t a, int32_t b, int32_t rank, int32_t merged);
int tk_pairmap_get(const tk_pairmap *m, int32_t a, int32_t b, int32_t *rank, int32_t *merged);
void tk_pairmap_prefetch(const tk_pairmap *m, int32_t a, int32_t b); /* a put or get soon */
void tk_pairmap_free(tk_pairmap *m);

/* ---- UTF-8 ---- */
/* length of the UTF-8 sequence starting with byte c (1 for invalid lead bytes) */
static inline size_t tk_utf8_len(unsigned char c)
{
    return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
}
size_t tk_utf8_encode(uint32_t cp, char *out); /* returns 1..4 */
uint32_t tk_utf8_decode(const char *s, size_t n, size_t *adv);
int tk_is_space_cp(uint32_t cp);
/* GPT-2 byte <-> printable code point table (ByteLevel) */
uint32_t tk_byte_cp(unsigned char b);
int tk_cp_to_byte(uint32_t cp); /* -1 if cp is not in the table */

/* ---- JSON helpers: errors name the JSON path ---- */
typedef struct tk_jctx {
    const char *origin; /* file name for messages */
    rlx_diag *d;
} tk_jctx;
/* path printf-style; returns the error code */
int tk_jerr(const tk_jctx *c, const char *path, const char *fmt, ...) RLX_PRINTF(3, 4);
/* optional string / bool / int fields; missing (or null) keeps *out */
int tk_jstr(const tk_jctx *c, struct json_t *obj, const char *path, const char *key,
            const char **out);
int tk_jbool(const tk_jctx *c, struct json_t *obj, const char *path, const char *key, int *out);
int tk_jint(const tk_jctx *c, struct json_t *obj, const char *path, const char *key,
            int64_t *out);
/* A component object's "type" (borrowed): errors if j is not an object or has none;
 * tpath gets "<path>.type" for the caller's unsupported-type message */
int tk_jtype(const tk_jctx *c, struct json_t *j, const char *path, const char **type, char *tpath,
             size_t tpath_len);
/* A Sequence's obj[key], which must be an array (NULL after the error, code in *rc) */
struct json_t *tk_jarray(const tk_jctx *c, struct json_t *obj, const char *path, const char *key,
                         int *rc);
/* Loads each item of arr (obj[key]) with load(c, item, "<path>.<key>[i]", i, owner), stopping at
 * the first error (returned) */
typedef int (*tk_item_load)(const tk_jctx *c, struct json_t *item, const char *path, size_t i,
                            void *owner);
int tk_jeach(const tk_jctx *c, struct json_t *arr, const char *path, const char *key,
             tk_item_load load, void *owner);
/* {"String": s} or {"Regex": r}: *is_regex set, *pat borrowed from the json */
int tk_jpattern(const tk_jctx *c, struct json_t *obj, const char *path, const char **pat,
                int *is_regex);

/* the pattern with \s / \S as \p{White_Space} / \P{White_Space} (malloc'ed, NULL: no memory) */
char *tk_regex_white_space(const char *pat);
/* compile a regex (PCRE2_UTF|PCRE2_UCP, \s meaning White_Space, JIT when available) or a
 * literal */
pcre2_code *tk_regex_compile(const tk_jctx *c, const char *path, const char *pat, int literal);
/* next match in s[start..n): 1 found (*ms, *me), 0 none, <0 error */
int tk_regex_next(const pcre2_code *re, pcre2_match_data *md, const char *s, size_t n,
                  size_t start, size_t *ms, size_t *me);

/* ---- normalizers (tokenizer_normalizer.c) ---- */
typedef struct tk_normalizer tk_normalizer;
int tk_normalizer_load(const tk_jctx *c, struct json_t *j, const char *path, tk_normalizer **out);
void tk_normalizer_free(tk_normalizer *n);
int tk_normalizer_apply(const tk_normalizer *n, const char *s, size_t len, tk_buf *out);

/* ---- pre-tokenizers (tokenizer_pretok.c) ---- */
typedef struct tk_pretok tk_pretok;
int tk_pretok_load(const tk_jctx *c, struct json_t *j, const char *path, tk_pretok **out);
void tk_pretok_free(tk_pretok *p);
/* in: the pieces of one added-token-free segment (is_first: the segment starts the
 * text); out: words. tmp is scratch. */
int tk_pretok_apply(const tk_pretok *p, tk_pieces *in, tk_pieces *out, int is_first);

/* ---- BPE model (tokenizer_bpe.c) ---- */
typedef struct tk_bpe tk_bpe;
int tk_bpe_load(const tk_jctx *c, struct json_t *model, tk_bpe **out);
void tk_bpe_free(tk_bpe *b);
/* piecewise loading (tokenizer_fast.c): new, the vocab token by token (0 added, 1 a
 * duplicate, -1 out of memory), finish_vocab with the model object for its options, then
 * the merges in rank order; errors name the JSON path as tk_bpe_load's do */
tk_bpe *tk_bpe_new(void);
/* sizes the tables for what is coming (optional: they grow anyway) */
int tk_bpe_reserve(tk_bpe *b, size_t n_vocab, size_t key_bytes, size_t n_merges);
int tk_bpe_add_token(tk_bpe *b, const char *k, size_t n, int32_t id);
int tk_bpe_finish_vocab(const tk_jctx *c, tk_bpe *b, struct json_t *model);
int tk_bpe_add_merge(const tk_jctx *c, tk_bpe *b, const char *l, size_t ln, const char *r, size_t rn,
                     size_t i);
/* after the last tk_bpe_add_merge: the merges it still held back are stored */
int tk_bpe_end_merges(const tk_jctx *c, tk_bpe *b);
/* tk_strmap_prefetch of a coming merge's halves (and of their concatenation, when the
 * merged ids do not follow merge order) */
void tk_bpe_prefetch(const tk_bpe *b, const char *l, size_t ln, const char *r, size_t rn, int key);
/* tokenizer.json's model.vocab and model.merges read without jansson: 0 and *bpe (vocab
 * and merges loaded, tk_bpe_finish_vocab still to call) and *rest (a NUL-terminated copy
 * of the file with those two values replaced by {} and [], *rest_len bytes, for jansson);
 * -1: not handled, nothing reported (the caller parses the whole file) */
int tk_fast_bpe(const tk_jctx *c, const char *buf, size_t len, tk_bpe **bpe, char **rest,
                size_t *rest_len);
typedef struct tk_added tk_added;
/* tokenizer.json's top-level added_tokens read without jansson: 0, *added (n entries, each
 * with content and id, flags as in the file or tokenizers' defaults; nothing else checked)
 * and *cut (a NUL-terminated copy of the text with that value replaced by [], *cut_len
 * bytes); -1: not handled, nothing reported (no such member, or anything but the plain
 * shape: the caller parses it with jansson) */
int tk_fast_added(const char *buf, size_t len, tk_added **added, size_t *n, char **cut, size_t *cut_len);
/* appends the ids of one word */
typedef struct tk_ids {
    int32_t *v;
    size_t n, cap;
} tk_ids;
int tk_ids_push(tk_ids *a, int32_t id);
int tk_bpe_encode_word(tk_bpe *b, const char *w, size_t n, tk_ids *out);
const tk_strmap *tk_bpe_vocab(const tk_bpe *b);
/* the token strings indexed by id (NULL holes), count = max id + 1 */
int tk_bpe_id_to_token(const tk_bpe *b, const char ***tokens, size_t *count);
/* the same table handed over (the caller frees it; b has none left): after loading */
void tk_bpe_take_ids(tk_bpe *b, const char ***tokens, size_t *count);

/* ---- binary cache of the BPE tables (tokenizer_cache.c) ---- */
/* The source's identity: its stat data, a hash of sampled blocks, and (for a "racy"
 * entry, one whose stat data could still change without showing it) the whole file's
 * hash; README, "Tokenizer cache", gives the reasoning */
typedef struct tk_cache_key {
    uint64_t size, dev, ino;
    int64_t mtime_s, mtime_ns, ctime_s, ctime_ns;
    uint64_t hash;   /* tk_cache_hash of the whole source (when known) */
    uint64_t sample; /* tk_cache_sample of the source (when known) */
    int racy;        /* written < TK_RACY_S after the source's last change: hash every load */
} tk_cache_key;
#define TK_RACY_S 2 /* coarsest file time stamps kept by a common file system (FAT: 2 s) */
struct stat;
/* the stat part of a key */
void tk_cache_stat_key(const struct stat *st, tk_cache_key *k);
/* 1 if the source's time stamps are too close to now (or ahead of it) to be trusted */
int tk_cache_racy(const tk_cache_key *k);
/* what a cache holds; the tables borrow their memory (a mapping or a live tk_bpe) */
typedef struct tk_cache_view {
    const char *rest; /* tk_fast_bpe's JSON text */
    size_t rest_len;
    tk_strmap vocab;
    tk_pairmap merges, junctions;
    int32_t max_id;
    const char **id_tok; /* id -> key, n_ids of them (tk_cache_parse's, malloc'ed) */
    size_t n_ids;
} tk_cache_view;
uint64_t tk_cache_hash(const void *p, size_t n);
/* the hash of a few blocks spread over the source (all of it when small) */
uint64_t tk_cache_sample(const void *p, size_t n);
/* the cache file of source src; -1: caching is off (RLX_NO_CACHE) or has no folder */
int tk_cache_path(const char *src, char *out, size_t cap);
/* 0 and *v over a mapping (*map, *map_len) of a valid cache of the source read through
 * src_fd, whose stat part is in k (k->sample, and k->hash for a racy entry, are computed
 * here when the header's stat data match); -1: none */
int tk_cache_read(const char *cpath, int src_fd, tk_cache_key *k, tk_cache_view *v, void **map,
                  size_t *map_len);
/* the checks of tk_cache_read on an image in memory (key NULL: any source; else its stat
 * data and sample, and its hash when the image is racy; check_sum 0: skip the payload
 * checksum, for the fuzzer) */
int tk_cache_parse(const void *img, size_t len, const tk_cache_key *key, int check_sum, tk_cache_view *v);
/* writes v for source key k (temp file + rename); failures are logged at debug level */
void tk_cache_write(const char *cpath, const tk_cache_key *k, const tk_cache_view *v);
/* the tables of b as a view (rest and id_tok unset), and a tk_bpe over a view's tables that
 * unmaps map (may be NULL) when freed and takes v->id_tok (freed, when it returns NULL);
 * tk_bpe_finish_vocab still to call */
void tk_bpe_view(const tk_bpe *b, tk_cache_view *v);
tk_bpe *tk_bpe_from_view(const tk_cache_view *v, void *map, size_t map_len);

/* ---- decoders (tokenizer_decoder.c) ---- */
typedef struct tk_decoder tk_decoder;
int tk_decoder_load(const tk_jctx *c, struct json_t *j, const char *path, tk_decoder **out);
void tk_decoder_free(tk_decoder *d);
/* tokens in, final text out */
int tk_decoder_apply(const tk_decoder *d, tk_pieces *tokens, tk_buf *out);

/* ---- post-processors (tokenizer_post.c) ---- */
typedef struct tk_post tk_post;
int tk_post_load(const tk_jctx *c, struct json_t *j, const char *path, tk_post **out);
void tk_post_free(tk_post *p);
int tk_post_apply(const tk_post *p, const int32_t *ids, size_t n, tk_ids *out);

/* ---- added tokens (tokenizer.c) ---- */
struct tk_added {
    char *content;
    size_t len;
    char *match;      /* what is searched for: content, normalized when "normalized" */
    size_t match_len;
    int32_t id;
    int special, normalized, lstrip, rstrip, single_word;
};

struct rlx_tokenizer {
    char *origin;
    /* the cache file being written by a thread after the first load (tokenizer.c); it
     * only reads the BPE tables, and is joined before they are freed */
    pthread_t writer;
    int writing;
    tk_bpe *bpe;
    tk_normalizer *normalizer;
    tk_pretok *pretok;
    tk_decoder *decoder;
    tk_post *post;
    tk_added *added;
    size_t n_added;
    int added_fast; /* added[] came from tk_fast_added (ids still to check) */
    /* per first byte: indices into added[] sorted by length descending, for the
     * leftmost-longest match; one table for raw text, one for normalized text */
    int32_t *first_idx[2][256];
    size_t first_n[2][256];
    const char **id_tok;    /* id -> token string */
    uint8_t *id_special;    /* id -> 1 if a special added token */
    size_t n_ids;
};

#endif
