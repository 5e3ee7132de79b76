/* The tokenizer cache's idea of "the same source" (tokenizer_cache.c, compiled in): stat
 * data and a sampled hash, and the whole file's hash while an entry is racy. A rewrite
 * that keeps every stat field (one in the time-stamp tick of the last change) is played
 * here by reading the cache with the old stat data over new bytes. */
#define _GNU_SOURCE
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "../fuzz/fuzz_host_log.h"
#include "text/tokenizer_internal.h"
#include "testutil.h"

#define SRC_BYTES (256u << 10) /* above the sample's 16 x 4 KiB: only blocks are sampled */
#define UNSAMPLED 10000u       /* between sampled blocks 0 ([0, 4096)) and 1 (at 17203) */

typedef struct env {
    char *dir;
    char src[4096], cache[4096];
    char *bytes;
} env;

static void put_file(const char *p, const char *b, size_t n)
{
    int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, b, n), (ssize_t)n);
    ck_assert_int_eq(close(fd), 0);
}

/* a source file and the key of it as it is now; racy as given */
static void env_new(env *e, tk_cache_key *k, int racy)
{
    e->dir = tu_mkdtemp();
    snprintf(e->src, sizeof e->src, "%s/tokenizer.json", e->dir);
    snprintf(e->cache, sizeof e->cache, "%s/c.tkc", e->dir);
    e->bytes = malloc(SRC_BYTES);
    for (size_t i = 0; i < SRC_BYTES; i++) e->bytes[i] = (char)('a' + i * 7 % 26);
    put_file(e->src, e->bytes, SRC_BYTES);
    struct stat st;
    ck_assert_int_eq(stat(e->src, &st), 0);
    memset(k, 0, sizeof *k);
    tk_cache_stat_key(&st, k);
    k->hash = tk_cache_hash(e->bytes, SRC_BYTES);
    k->sample = tk_cache_sample(e->bytes, SRC_BYTES);
    k->racy = racy;
    tk_cache_view v = {.rest = "{}", .rest_len = 2};
    tk_cache_write(e->cache, k, &v);
}

static void env_free(env *e)
{
    tu_rmrf(e->dir);
    free(e->dir);
    free(e->bytes);
}

/* tk_cache_read of e->cache for the source's current bytes, described by the stat data of k */
static int read_with(env *e, const tk_cache_key *k, int *racy_after)
{
    tk_cache_key q = *k;
    q.hash = q.sample = 0;
    int fd = open(e->src, O_RDONLY);
    ck_assert_int_ge(fd, 0);
    tk_cache_view v;
    void *map;
    size_t len;
    int rc = tk_cache_read(e->cache, fd, &q, &v, &map, &len);
    close(fd);
    if (!rc) {
        ck_assert_uint_eq(v.rest_len, 2);
        ck_assert(!memcmp(v.rest, "{}", 2));
        free(v.id_tok);
        munmap(map, len);
    }
    if (racy_after) *racy_after = q.racy;
    return rc;
}

/* the same bytes but one, outside every sampled block (between blocks 0 and 1) */
static void flip_at(env *e, size_t at)
{
    e->bytes[at] ^= 1;
    put_file(e->src, e->bytes, SRC_BYTES);
}

/* racy: a byte changed where no block is sampled, stat data as before: a miss */
START_TEST(racy_entry_hashes_the_whole_file)
{
    env e;
    tk_cache_key k;
    env_new(&e, &k, 1);
    int racy;
    ck_assert_int_eq(read_with(&e, &k, &racy), 0);
    ck_assert_int_eq(racy, 1);
    flip_at(&e, UNSAMPLED);
    ck_assert_msg(read_with(&e, &k, NULL) != 0, "a racy entry served other bytes");
    env_free(&e);
}
END_TEST

/* settled (written TK_RACY_S after the last change): the stat data are trusted with the
 * sample, so only a change in a sampled block is seen when they are unchanged; any change
 * of stat data is a miss */
START_TEST(settled_entry_trusts_stat_data_and_sample)
{
    env e;
    tk_cache_key k;
    env_new(&e, &k, 0);
    int racy;
    ck_assert_int_eq(read_with(&e, &k, &racy), 0);
    ck_assert_int_eq(racy, 0);
    flip_at(&e, UNSAMPLED);
    ck_assert_int_eq(read_with(&e, &k, NULL), 0); /* the documented limit */
    flip_at(&e, 0);
    ck_assert_msg(read_with(&e, &k, NULL) != 0, "a change in a sampled block went unseen");
    flip_at(&e, 0);
    ck_assert_int_eq(read_with(&e, &k, NULL), 0);
    tk_cache_key o;
    uint64_t *u[] = {&o.size, &o.dev, &o.ino};
    int64_t *s[] = {&o.mtime_s, &o.mtime_ns, &o.ctime_s, &o.ctime_ns};
    for (int i = 0; i < 7; i++) {
        o = k;
        if (i < 3) ++*u[i];
        else ++*s[i - 3];
        ck_assert_msg(read_with(&e, &o, NULL) != 0, "stat field %d changed, still a hit", i);
    }
    env_free(&e);
}
END_TEST

/* a racy entry found valid once its source is old enough loses the flag; a young one keeps it */
START_TEST(racy_flag_dropped_once_settled)
{
    env e;
    tk_cache_key k;
    env_new(&e, &k, 1);
    int racy;
    ck_assert_int_eq(read_with(&e, &k, &racy), 0);
    ck_assert_int_eq(read_with(&e, &k, &racy), 0);
    ck_assert_int_eq(racy, 1); /* written just now: still racy */
    env_free(&e);
    env_new(&e, &k, 1);
    tk_cache_key old = k;
    old.mtime_s -= 3600;
    old.ctime_s -= 3600;
    tk_cache_view v = {.rest = "{}", .rest_len = 2};
    tk_cache_write(e.cache, &old, &v);
    ck_assert_int_eq(read_with(&e, &old, &racy), 0);
    ck_assert_int_eq(racy, 1);
    ck_assert_int_eq(read_with(&e, &old, &racy), 0);
    ck_assert_int_eq(racy, 0);
    flip_at(&e, UNSAMPLED); /* settled now: the documented limit again */
    ck_assert_int_eq(read_with(&e, &old, NULL), 0);
    env_free(&e);
}
END_TEST

START_TEST(racy_window)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    tk_cache_key k = {.mtime_s = now.tv_sec, .ctime_s = now.tv_sec};
    ck_assert_int_eq(tk_cache_racy(&k), 1);
    k.mtime_s = k.ctime_s = now.tv_sec - TK_RACY_S;
    ck_assert_int_eq(tk_cache_racy(&k), 1);
    k.mtime_s = k.ctime_s = now.tv_sec - TK_RACY_S - 2;
    ck_assert_int_eq(tk_cache_racy(&k), 0);
    k.ctime_s = now.tv_sec; /* chmod, a rename or a rewrite with an old mtime set back */
    ck_assert_int_eq(tk_cache_racy(&k), 1);
    k.mtime_s = k.ctime_s = now.tv_sec + 3600; /* ahead of this clock */
    ck_assert_int_eq(tk_cache_racy(&k), 1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tokenizer_racy");
    TCase *tc = tcase_create("racy");
    tcase_add_test(tc, racy_entry_hashes_the_whole_file);
    tcase_add_test(tc, settled_entry_trusts_stat_data_and_sample);
    tcase_add_test(tc, racy_flag_dropped_once_settled);
    tcase_add_test(tc, racy_window);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
