/* A binary cache of a tokenizer.json's BPE tables, so that a second load of an unchanged
 * file maps them back instead of parsing megabytes of JSON and rebuilding hash tables.
 *
 * One file per source path in $RLX_CACHE_DIR, else $XDG_CACHE_HOME/rlx, else
 * ~/.cache/rlx (folder tokenizers/); RLX_NO_CACHE=1 turns it off. A cache is used only
 * when its header names the source as it is now, and everything in it checks out: magic,
 * version, byte order, a header checksum, section lengths against the file size, a
 * checksum over the payload, every table entry in bounds. Anything else is a miss: the
 * source is parsed and the cache rewritten (temp file + rename, so a reader never sees a
 * half-written one). The cache never makes a load fail.
 *
 * The source is named by its stat data (device, inode, size, mtime and ctime to the
 * nanosecond) and a hash of 16 blocks spread over it; the hash of the whole file is
 * checked as well while the entry is "racy": written less than TK_RACY_S after the
 * source's last change, when a change in the same time-stamp tick could still leave the
 * stat data as they were (git's "racily clean" index entries). Such an entry loses the
 * flag at the first load that finds the file unchanged and old enough.
 *
 * Layout (native byte order, every section 8-byte aligned):
 *   header  128 bytes: magic, version, byte-order tag, flags, source key, payload length
 *           and checksum, header checksum
 *   meta    16 x u64: lengths and counts below
 *   rest    the JSON without model.vocab / model.merges (tk_fast_bpe's text)
 *   vocab   strmap slots, then its key bytes
 *   merges, junctions   pairmap slots */
#define _GNU_SOURCE
#include "text/tokenizer_internal.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define MAGIC "RLXTOKC\n"
#define VERSION 2u
#define BYTE_ORDER_TAG 0x01020304u
#define HDR_BYTES 128u
#define F_RACY 1u
#define META_WORDS 16u
#define MAX_CAP (1ull << 28) /* slots of one table: far above any real vocabulary */
#define BLOCK (1u << 20)     /* the content hash is chained over 1 MiB blocks */
#define SAMPLES 16u          /* the sample: 16 blocks of 4 KiB, first and last included */
#define SAMPLE_B 4096u

enum { M_REST, M_VCAP, M_VN, M_KEYS, M_MCAP, M_MN, M_JCAP, M_JN, M_MAXID };

typedef struct hdr {
    char magic[8];
    uint32_t version, order, flags, zero;
    uint64_t src_size, src_dev, src_ino;
    int64_t mtime_s, mtime_ns, ctime_s, ctime_ns;
    uint64_t src_hash, src_sample, payload_len, payload_sum, reserved, hdr_sum;
} hdr;
_Static_assert(sizeof(hdr) == HDR_BYTES, "cache header layout");
_Static_assert(sizeof(struct tk_strent) == 16 && sizeof(struct tk_pairent) == 16, "table layout");

/* ---------------------------------------------------------------- hashing */

static uint64_t rotl(uint64_t x, int r) { return x << r | x >> (64 - r); }

/* 64-bit hash in four independent lanes (xxHash's round): several GB/s, so checking a
 * 30 MB source costs milliseconds */
static uint64_t hash_bytes(const void *p, size_t n, uint64_t seed)
{
    const uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full;
    const unsigned char *s = p;
    uint64_t a[4] = {seed + P1 + P2, seed + P2, seed, seed - P1};
    size_t i = 0;
    for (; i + 32 <= n; i += 32)
        for (int k = 0; k < 4; k++) {
            uint64_t w;
            memcpy(&w, s + i + 8 * k, 8);
            a[k] = rotl(a[k] + w * P2, 31) * P1;
        }
    uint64_t h = rotl(a[0], 1) + rotl(a[1], 7) + rotl(a[2], 12) + rotl(a[3], 18) + n;
    for (; i < n; i++) h = rotl(h ^ (s[i] * P1), 11) * P2;
    h ^= h >> 33;
    h *= P2;
    h ^= h >> 29;
    h *= P1;
    return h ^ (h >> 32);
}

uint64_t tk_cache_hash(const void *p, size_t n)
{
    uint64_t h = n;
    for (size_t o = 0; o < n; o += BLOCK) h = hash_bytes((const char *)p + o, n - o < BLOCK ? n - o : BLOCK, h);
    return h;
}

/* n bytes at offset o, or -1 (a read error, or the file is shorter now) */
static int pread_all(int fd, void *buf, size_t n, uint64_t o)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, (off_t)(o + got));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        got += (size_t)r;
    }
    return 0;
}

/* the same hash read from fd in blocks (no copy of the whole file); -1 on a read error or
 * a file whose length is not n any more */
static int hash_fd(int fd, uint64_t n, uint64_t *out)
{
    char *buf = malloc(BLOCK);
    if (!buf) return -1;
    uint64_t h = n, o = 0;
    int rc = 0;
    while (!rc && o < n) {
        size_t want = n - o < BLOCK ? (size_t)(n - o) : BLOCK;
        if (pread_all(fd, buf, want, o)) rc = -1;
        else h = hash_bytes(buf, want, h);
        o += want;
    }
    free(buf);
    *out = h;
    return rc;
}

/* offset of sample block i of a source of n bytes (n > SAMPLES * SAMPLE_B) */
static uint64_t sample_at(uint64_t n, unsigned i) { return i * ((n - SAMPLE_B) / (SAMPLES - 1)); }

uint64_t tk_cache_sample(const void *p, size_t n)
{
    if (n <= SAMPLES * SAMPLE_B) return tk_cache_hash(p, n);
    uint64_t h = n ^ 0x73616d70;
    for (unsigned i = 0; i < SAMPLES; i++) h = hash_bytes((const char *)p + sample_at(n, i), SAMPLE_B, h);
    return h;
}

/* tk_cache_sample read from fd: 16 small reads */
static int sample_fd(int fd, uint64_t n, uint64_t *out)
{
    char buf[SAMPLE_B];
    if (n <= SAMPLES * SAMPLE_B) return hash_fd(fd, n, out);
    uint64_t h = n ^ 0x73616d70;
    for (unsigned i = 0; i < SAMPLES; i++) {
        if (pread_all(fd, buf, SAMPLE_B, sample_at(n, i))) return -1;
        h = hash_bytes(buf, SAMPLE_B, h);
    }
    *out = h;
    return 0;
}

/* ---------------------------------------------------------------- source identity */

void tk_cache_stat_key(const struct stat *st, tk_cache_key *k)
{
    k->size = (uint64_t)st->st_size;
    k->dev = (uint64_t)st->st_dev;
    k->ino = (uint64_t)st->st_ino;
    k->mtime_s = (int64_t)st->st_mtim.tv_sec;
    k->mtime_ns = (int64_t)st->st_mtim.tv_nsec;
    k->ctime_s = (int64_t)st->st_ctim.tv_sec;
    k->ctime_ns = (int64_t)st->st_ctim.tv_nsec;
}

int tk_cache_racy(const tk_cache_key *k)
{
    struct timespec now;
    if (clock_gettime(CLOCK_REALTIME, &now)) return 1;
    /* the later of the two stamps, in whole seconds rounded up: within TK_RACY_S of now,
     * or ahead of it (a clock set back, a server's clock), the file may still change in
     * a tick that its stamps already show */
    int64_t last = k->mtime_s > k->ctime_s ? k->mtime_s : k->ctime_s;
    return (int64_t)now.tv_sec - last <= TK_RACY_S;
}

/* ---------------------------------------------------------------- location */

static int env_on(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

int tk_cache_path(const char *src, char *out, size_t cap)
{
    if (env_on("RLX_NO_CACHE")) return -1;
    const char *dir = getenv("RLX_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char base[PATH_MAX];
    int n;
    if (dir && *dir) n = snprintf(base, sizeof base, "%s", dir);
    else if (xdg && xdg[0] == '/') n = snprintf(base, sizeof base, "%s/rlx", xdg); /* relative: ignored (XDG spec) */
    else if (home && home[0] == '/') n = snprintf(base, sizeof base, "%s/.cache/rlx", home);
    else return -1;
    char real[PATH_MAX];
    if (n < 0 || (size_t)n >= sizeof base || !realpath(src, real)) return -1;
    n = snprintf(out, cap, "%s/tokenizers/%016llx.tkc", base,
                 (unsigned long long)hash_bytes(real, strlen(real), 0x726c78));
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

/* ---------------------------------------------------------------- reading */

static uint64_t pad8(uint64_t n) { return (n + 7) & ~(uint64_t)7; }

static int pow2_or_zero(uint64_t c) { return c <= MAX_CAP && (c & (c - 1)) == 0; }

/* What the slot checks need and count; each section is hashed and checked one block at a
 * time, so the tables are read from memory once */
typedef struct slots {
    const char *keys;
    uint64_t keys_n, used;
    int64_t max_id;
    uint64_t ids;         /* 1: a pairmap of token ids (merges), not of code points */
    const char **id_tok;  /* vocab: id -> key, filled in (n_ids + 1 entries, the last spare) */
    uint64_t n_ids;
} slots;

/* vocab slots: each key inside the key bytes (which end with a NUL: tk_cache_parse), each
 * id one the id table has. Half the slots are empty at random: the checks are computed
 * without branches (a mispredicted branch per slot would cost more than the rest of the
 * loop), and the key bytes, read in hash order, are not touched. */
static int check_vocab(const char *blk, size_t n, slots *c)
{
    const struct tk_strent *e = (const struct tk_strent *)(const void *)blk;
    uint64_t bad = 0, used = 0, nid = c->n_ids; /* id_tok[nid]: a spare entry */
    for (size_t i = 0; i < n / sizeof *e; i++) {
        uint64_t occ = e[i].off != 0, o = (uint64_t)e[i].off - occ, end = o + e[i].n;
        uint64_t in = end < c->keys_n, v = (uint64_t)(int64_t)e[i].v;
        uint64_t ok_id = v < nid; /* a negative id wraps far above */
        bad |= occ & (!in | !ok_id);
        used += occ;
        c->id_tok[occ & ok_id ? v : nid] = c->keys + (in ? o : 0);
    }
    c->used += used;
    return bad ? -1 : 0;
}

/* pairmap slots: with ids, the two halves and the merged id are ids in [0, max_id] and
 * ranks >= 0 (branch-free as above) */
static int check_pairs(const char *blk, size_t n, slots *c)
{
    const struct tk_pairent *e = (const struct tk_pairent *)(const void *)blk;
    uint64_t bad = 0, used = 0, max = (uint64_t)c->max_id;
    for (size_t i = 0; i < n / sizeof *e; i++) {
        uint64_t occ = e[i].key != 0, k = e[i].key - occ;
        uint64_t a = k >> 32, b = k & 0xffffffffu, m = (uint64_t)(int64_t)e[i].merged;
        used += occ;
        bad |= occ & c->ids & ((a > max) | (b > max) | (m > max) | (e[i].rank < 0));
    }
    c->used += used;
    return bad ? -1 : 0;
}

typedef int (*slot_check)(const char *blk, size_t n, slots *c);

/* one section: its tk_cache_hash (when sum) chained into *acc as the writer does, and its
 * slots checked (chk, when given) block by block while the block is in cache */
static int section(const char *p, uint64_t len, int sum, uint64_t *acc, slot_check chk, slots *c)
{
    uint64_t h = len;
    for (uint64_t o = 0; o < len; o += BLOCK) {
        size_t n = len - o < BLOCK ? (size_t)(len - o) : BLOCK;
        if (sum) h = hash_bytes(p + o, n, h);
        if (chk && chk(p + o, n, c)) return -1;
    }
    if (sum) {
        static const char zeros[8];
        size_t pad = (size_t)(pad8(len) - len);
        *acc = h ^ rotl(*acc, 17);
        if (pad) {
            if (memcmp(p + len, zeros, pad)) return -1;
            *acc = tk_cache_hash(zeros, pad) ^ rotl(*acc, 17);
        }
    }
    return 0;
}

/* a table's slot count is a power of two (or 0) with n < cap occupied: a lookup always
 * meets an empty slot */
static int table_ok(uint64_t cap, uint64_t n) { return pow2_or_zero(cap) && (cap ? n < cap : n == 0); }

static uint64_t hdr_sum(const hdr *h) { return tk_cache_hash(h, offsetof(hdr, hdr_sum)); }

/* the header is this build's, intact, and names the source of key's stat data */
static int hdr_ok(const hdr *h, const tk_cache_key *key)
{
    if (memcmp(h->magic, MAGIC, 8) || h->version != VERSION || h->order != BYTE_ORDER_TAG ||
        (h->flags & ~F_RACY) || h->zero || h->reserved || h->hdr_sum != hdr_sum(h))
        return 0;
    return !key || (h->src_size == key->size && h->src_dev == key->dev && h->src_ino == key->ino &&
                    h->mtime_s == key->mtime_s && h->mtime_ns == key->mtime_ns && h->ctime_s == key->ctime_s &&
                    h->ctime_ns == key->ctime_ns);
}

int tk_cache_parse(const void *img, size_t len, const tk_cache_key *key, int check_sum, tk_cache_view *v)
{
    memset(v, 0, sizeof *v);
    const char *base = img;
    hdr h;
    if (len < HDR_BYTES + META_WORDS * 8) return -1;
    memcpy(&h, base, sizeof h);
    if (!hdr_ok(&h, key)) return -1;
    if (key && (h.src_sample != key->sample || ((h.flags & F_RACY) && h.src_hash != key->hash))) return -1;
    if (h.payload_len != len - HDR_BYTES) return -1;
    const char *p = base + HDR_BYTES;
    uint64_t m[META_WORDS];
    memcpy(m, p, sizeof m);
    if (m[M_REST] > RLX__MAX_JSON_FILE || m[M_KEYS] >= UINT32_MAX || m[M_MAXID] >= INT32_MAX ||
        !table_ok(m[M_VCAP], m[M_VN]) || !table_ok(m[M_MCAP], m[M_MN]) || !table_ok(m[M_JCAP], m[M_JN]))
        return -1;
    /* every length is bounded above, so the sum cannot overflow */
    uint64_t need = META_WORDS * 8 + pad8(m[M_REST]) + m[M_VCAP] * 16 + pad8(m[M_KEYS]) + m[M_MCAP] * 16 +
                    m[M_JCAP] * 16;
    /* ids index arrays: as sparse as tk_bpe_finish_vocab allows, no more */
    if (need != h.payload_len || (m[M_VN] && m[M_MAXID] >= 4 * m[M_VN] + 65536)) return -1;
    const uint64_t lens[6] = {META_WORDS * 8, m[M_REST], m[M_VCAP] * 16, m[M_KEYS], m[M_MCAP] * 16, m[M_JCAP] * 16};
    const char *at[6];
    at[0] = p;
    for (int k = 1; k < 6; k++) at[k] = at[k - 1] + pad8(lens[k - 1]);
    v->rest = at[1];
    v->rest_len = (size_t)m[M_REST];
    v->max_id = (int32_t)m[M_MAXID];
    v->n_ids = m[M_VN] ? (size_t)m[M_MAXID] + 1 : 0;
    /* the key bytes end with a NUL, so every token string read from them ends inside */
    if (m[M_KEYS] && at[3][m[M_KEYS] - 1]) return -1;
    slots c = {.keys = at[3], .keys_n = m[M_KEYS], .max_id = (int64_t)m[M_MAXID], .n_ids = v->n_ids};
    if (!(c.id_tok = calloc(v->n_ids + 1, sizeof *c.id_tok))) return -1;
    uint64_t sum = 0x746b63;
    int rc = section(at[0], lens[0], check_sum, &sum, NULL, &c) || section(at[1], lens[1], check_sum, &sum, NULL, &c);
    if (!rc) rc = section(at[2], lens[2], check_sum, &sum, check_vocab, &c) || c.used != m[M_VN];
    if (!rc) rc = section(at[3], lens[3], check_sum, &sum, NULL, &c);
    c.ids = 1;
    c.used = 0;
    if (!rc) rc = section(at[4], lens[4], check_sum, &sum, check_pairs, &c) || c.used != m[M_MN];
    c.ids = 0;
    c.used = 0;
    if (!rc) rc = section(at[5], lens[5], check_sum, &sum, check_pairs, &c) || c.used != m[M_JN];
    if (rc || (check_sum && sum != h.payload_sum)) {
        free(c.id_tok);
        return -1;
    }
    v->id_tok = c.id_tok;
    v->vocab = (tk_strmap){(struct tk_strent *)(void *)at[2], (size_t)m[M_VCAP], (size_t)m[M_VN],
                           (char *)at[3], (size_t)m[M_KEYS], (size_t)m[M_KEYS], 1};
    v->merges = (tk_pairmap){(struct tk_pairent *)(void *)at[4], (size_t)m[M_MCAP], (size_t)m[M_MN], 1};
    v->junctions = (tk_pairmap){(struct tk_pairent *)(void *)at[5], (size_t)m[M_JCAP], (size_t)m[M_JN], 1};
    return 0;
}

/* a racy entry found valid, its source now old enough: the flag goes (the header
 * rewritten in place, one write of a 128-byte block; a reader sees the old or the new) */
static void unracy(const char *cpath, const struct stat *cst, hdr *h)
{
    int fd = open(cpath, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    struct stat st;
    if (fd < 0) return;
    if (fstat(fd, &st) == 0 && st.st_dev == cst->st_dev && st.st_ino == cst->st_ino) {
        h->flags &= ~F_RACY;
        h->hdr_sum = hdr_sum(h);
        if (pwrite(fd, h, sizeof *h, 0) != (ssize_t)sizeof *h)
            rlx__host_log(RLX_LOG_DEBUG, "tokenizer", "cache %s: header not updated", cpath);
    }
    close(fd);
}

int tk_cache_read(const char *cpath, int src_fd, tk_cache_key *k, tk_cache_view *v, void **map,
                  size_t *map_len)
{
    *map = NULL;
    *map_len = 0;
    int fd = open(cpath, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) return -1;
    struct stat st;
    hdr h;
    /* only a regular file of this user: another user's file could be made to say
     * anything; then the header, then the sample, and the whole source only when racy */
    int ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
             (uint64_t)st.st_size >= HDR_BYTES && (uint64_t)st.st_size < (4ull << 30) &&
             pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h && hdr_ok(&h, k) &&
             sample_fd(src_fd, k->size, &k->sample) == 0 && k->sample == h.src_sample &&
             (!(h.flags & F_RACY) || (hash_fd(src_fd, k->size, &k->hash) == 0 && k->hash == h.src_hash));
    void *p = ok ? mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0) : MAP_FAILED;
    close(fd);
    if (p == MAP_FAILED) return -1;
    if (tk_cache_parse(p, (size_t)st.st_size, k, 1, v)) {
        munmap(p, (size_t)st.st_size);
        return -1;
    }
    k->racy = (h.flags & F_RACY) != 0; /* as this read found it */
    if (k->racy && !tk_cache_racy(k)) unracy(cpath, &st, &h);
    *map = p;
    *map_len = (size_t)st.st_size;
    return 0;
}

/* ---------------------------------------------------------------- writing */

static int mkdirs(char *path) /* every folder of path (a file name) */
{
    for (char *s = strchr(path + 1, '/'); s; s = strchr(s + 1, '/')) {
        *s = 0;
        int rc = mkdir(path, 0700);
        *s = '/';
        if (rc && errno != EEXIST) return -1;
    }
    return 0;
}

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

void tk_cache_write(const char *cpath, const tk_cache_key *k, const tk_cache_view *v)
{
    static const char zeros[8];
    char tmp[PATH_MAX + 16];
    if (snprintf(tmp, sizeof tmp, "%s.XXXXXX", cpath) >= (int)sizeof tmp) return;
    char *slash = strrchr(tmp, '/');
    if (!slash || mkdirs(tmp)) return;
    int fd = mkstemp(tmp);
    if (fd < 0) return;
    uint64_t m[META_WORDS] = {0};
    m[M_REST] = v->rest_len;
    m[M_VCAP] = v->vocab.cap;
    m[M_VN] = v->vocab.n;
    m[M_KEYS] = v->vocab.keys_n;
    m[M_MCAP] = v->merges.cap;
    m[M_MN] = v->merges.n;
    m[M_JCAP] = v->junctions.cap;
    m[M_JN] = v->junctions.n;
    m[M_MAXID] = (uint64_t)v->max_id;
    const void *part[6] = {m, v->rest, v->vocab.e, v->vocab.keys, v->merges.e, v->junctions.e};
    const uint64_t lens[6] = {sizeof m, m[M_REST], m[M_VCAP] * 16, m[M_KEYS], m[M_MCAP] * 16, m[M_JCAP] * 16};
    hdr h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, MAGIC, 8);
    h.version = VERSION;
    h.order = BYTE_ORDER_TAG;
    h.flags = k->racy ? F_RACY : 0;
    h.src_size = k->size;
    h.src_dev = k->dev;
    h.src_ino = k->ino;
    h.mtime_s = k->mtime_s;
    h.mtime_ns = k->mtime_ns;
    h.ctime_s = k->ctime_s;
    h.ctime_ns = k->ctime_ns;
    h.src_hash = k->hash;
    h.src_sample = k->sample;
    h.payload_sum = 0x746b63;
    for (int s = 0; s < 6; s++) { /* the padding is hashed too: every payload byte counts */
        size_t pad = (size_t)(pad8(lens[s]) - lens[s]);
        h.payload_sum = tk_cache_hash(part[s], (size_t)lens[s]) ^ rotl(h.payload_sum, 17);
        if (pad) h.payload_sum = tk_cache_hash(zeros, pad) ^ rotl(h.payload_sum, 17);
        h.payload_len += pad8(lens[s]);
    }
    h.hdr_sum = hdr_sum(&h);
    int rc = write_all(fd, &h, sizeof h);
    for (int s = 0; s < 6 && !rc; s++)
        rc = write_all(fd, part[s], (size_t)lens[s]) || write_all(fd, zeros, (size_t)(pad8(lens[s]) - lens[s]));
    /* no fsync: a cache torn by a crash fails its checksum and is rebuilt */
    if (close(fd) || rc || rename(tmp, cpath)) {
        unlink(tmp);
        rlx__host_log(RLX_LOG_DEBUG, "tokenizer", "cache %s not written: %s", cpath, strerror(errno));
    }
}
