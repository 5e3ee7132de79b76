/* The tokenizer cache: a second load of an unchanged tokenizer.json comes from the cache
 * (the file is not rewritten); a corrupted, truncated or stale cache is detected and
 * rebuilt; every load gives Hugging Face's ids (tests/fixtures/tokenizers/ref.json);
 * RLX_NO_CACHE=1 and an unusable cache folder load without one. */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "rlx/rlx.h"
#include "testutil.h"

static const char *const FILES[] = {"bytelevel-bpe.json", "spm-bpe-bytefallback.json"};

typedef struct env {
    char *dir;            /* temp folder: the tokenizer copy and the cache */
    char src[4096];       /* the tokenizer.json loaded */
    char cache[4096];     /* RLX_CACHE_DIR */
    char entry[8192];     /* the one cache file, once written */
} env;

static void copy_to(const char *from, const char *to)
{
    size_t n;
    char *b = tu_read_file(from, &n);
    ck_assert_ptr_nonnull(b);
    FILE *f = fopen(to, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
    free(b);
}

static void env_new(env *e, const char *fixture)
{
    memset(e, 0, sizeof *e);
    e->dir = tu_mkdtemp();
    char rel[256];
    snprintf(rel, sizeof rel, "tokenizers/%s", fixture);
    snprintf(e->src, sizeof e->src, "%s/tokenizer.json", e->dir);
    snprintf(e->cache, sizeof e->cache, "%s/cache", e->dir);
    copy_to(tu_fixture(rel), e->src);
    setenv("RLX_CACHE_DIR", e->cache, 1);
    unsetenv("RLX_NO_CACHE");
}

static void env_free(env *e)
{
    tu_rmrf(e->dir);
    free(e->dir);
}

/* the cache folder's files: 0 or 1 expected; the one's path in e->entry */
static int cache_files(env *e)
{
    char sub[4200];
    snprintf(sub, sizeof sub, "%s/tokenizers", e->cache);
    DIR *d = opendir(sub);
    if (!d) return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.') {
            n++;
            snprintf(e->entry, sizeof e->entry, "%s/%s", sub, de->d_name);
        }
    closedir(d);
    return n;
}

static ino_t inode(const char *p)
{
    struct stat st;
    ck_assert_int_eq(stat(p, &st), 0);
    return st.st_ino;
}

/* loads path and checks every case of ref.json[fixture] (ids with and without specials,
 * decoded text) */
static void check_against_hf(const char *path, const char *fixture)
{
    json_error_t je;
    json_t *ref = json_load_file(tu_fixture("tokenizers/ref.json"), 0, &je);
    ck_assert_msg(ref != NULL, "ref.json: %s", je.text);
    json_t *cases = json_object_get(ref, fixture);
    ck_assert_uint_ge(json_array_size(cases), 8);
    rlx_diag d;
    rlx_diag_init(&d);
    rlx_tokenizer *t = NULL;
    ck_assert_msg(rlx_tokenizer_load(path, &t, &d) == 0, "%s", d.msg);
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i), *want = json_object_get(c, "ids");
        const char *text = json_string_value(json_object_get(c, "text"));
        int32_t *ids = NULL;
        size_t n = 0;
        ck_assert_int_eq(rlx_tokenizer_encode(t, text, strlen(text), 0, &ids, &n, &d), 0);
        ck_assert_msg(n == json_array_size(want), "%s case %zu: %zu ids, want %zu", fixture, i, n,
                      json_array_size(want));
        for (size_t k = 0; k < n; k++)
            ck_assert_int_eq(ids[k], (int32_t)json_integer_value(json_array_get(want, k)));
        char *dec = NULL;
        ck_assert_int_eq(rlx_tokenizer_decode(t, ids, n, 1, &dec, &d), 0); /* specials skipped */
        ck_assert_str_eq(dec, json_string_value(json_object_get(c, "decoded")));
        free(dec);
        free(ids);
    }
    rlx_tokenizer_free(t);
    json_decref(ref);
}

/* loads e->src: HF's ids, and the cache holds one valid file afterwards */
static void load_checked(env *e, const char *fixture)
{
    check_against_hf(e->src, fixture);
    ck_assert_int_eq(cache_files(e), 1);
}

START_TEST(second_load_comes_from_the_cache)
{
    env e;
    env_new(&e, FILES[_i]);
    setenv("RLX_NO_CACHE", "1", 1);
    check_against_hf(e.src, FILES[_i]);
    ck_assert_int_eq(cache_files(&e), 0); /* off: nothing written */
    unsetenv("RLX_NO_CACHE");
    load_checked(&e, FILES[_i]);        /* a miss: parsed, cache written */
    ino_t first = inode(e.entry);
    load_checked(&e, FILES[_i]);        /* a hit: read, not rewritten */
    ck_assert_msg(inode(e.entry) == first, "a valid cache was rebuilt");
    env_free(&e);
}
END_TEST

/* the cache file is damaged at one byte (or cut); the next load must rebuild it (a new
 * file replaces it) and still give HF's ids, and the load after that must use it */
static void damage_and_reload(const char *fixture, long at, int truncate_to_at)
{
    env e;
    env_new(&e, fixture);
    load_checked(&e, fixture);
    struct stat st;
    ck_assert_int_eq(stat(e.entry, &st), 0);
    long pos = at >= 0 ? at : st.st_size + at;
    ck_assert(pos >= 0 && pos < st.st_size);
    int fd = open(e.entry, O_RDWR);
    ck_assert_int_ge(fd, 0);
    if (truncate_to_at) {
        ck_assert_int_eq(ftruncate(fd, pos), 0);
    } else {
        unsigned char b;
        ck_assert_int_eq(pread(fd, &b, 1, pos), 1);
        b ^= 0x5a;
        ck_assert_int_eq(pwrite(fd, &b, 1, pos), 1);
    }
    close(fd);
    ino_t damaged = inode(e.entry);
    load_checked(&e, fixture);
    ino_t rebuilt = inode(e.entry);
    ck_assert_msg(rebuilt != damaged, "%s: damage at %ld (%s) went unnoticed", fixture, pos,
                  truncate_to_at ? "cut" : "flipped");
    load_checked(&e, fixture);
    ck_assert_msg(inode(e.entry) == rebuilt, "the rebuilt cache was not used");
    env_free(&e);
}

/* header (magic, version, source key), meta, payload start, middle and last byte */
static const long FLIP_AT[] = {0, 9, 20, 60, 70, 200, -4000, -1};

START_TEST(flipped_byte_is_detected)
{
    for (size_t i = 0; i < sizeof FLIP_AT / sizeof *FLIP_AT; i++) damage_and_reload(FILES[_i], FLIP_AT[i], 0);
    env e;
    env_new(&e, FILES[_i]);
    load_checked(&e, FILES[_i]);
    struct stat st;
    ck_assert_int_eq(stat(e.entry, &st), 0);
    env_free(&e);
    damage_and_reload(FILES[_i], st.st_size / 2, 0);
}
END_TEST

START_TEST(truncated_cache_is_detected)
{
    damage_and_reload(FILES[_i], 0, 1);
    damage_and_reload(FILES[_i], 63, 1);
    damage_and_reload(FILES[_i], 200, 1);
    damage_and_reload(FILES[_i], -8, 1);
    damage_and_reload(FILES[_i], -1, 1);
}
END_TEST

/* the source replaced by another tokenizer: the old cache must not answer for it */
START_TEST(stale_cache_after_source_change)
{
    env e;
    env_new(&e, FILES[0]);
    load_checked(&e, FILES[0]);
    ino_t old = inode(e.entry);
    copy_to(tu_fixture("tokenizers/spm-bpe-bytefallback.json"), e.src);
    load_checked(&e, FILES[1]);
    ck_assert_msg(inode(e.entry) != old, "the stale cache was not rebuilt");
    env_free(&e);
}
END_TEST

/* same size, same mtime, one byte different: only the content hash can tell */
START_TEST(stale_cache_same_size_and_mtime)
{
    env e;
    env_new(&e, FILES[_i]);
    load_checked(&e, FILES[_i]);
    ino_t old = inode(e.entry);
    struct stat st;
    ck_assert_int_eq(stat(e.src, &st), 0);
    size_t n;
    char *b = tu_read_file(e.src, &n);
    char *v = strstr(b, "\"version\": \"1.0\"");
    ck_assert_ptr_nonnull(v);
    v[14] = '9'; /* "1.9": the same length, nothing that changes tokens */
    FILE *f = fopen(e.src, "wb");
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    ck_assert_int_eq(fclose(f), 0);
    free(b);
    struct timespec ts[2] = {st.st_atim, st.st_mtim};
    ck_assert_int_eq(utimensat(AT_FDCWD, e.src, ts, 0), 0);
    load_checked(&e, FILES[_i]);
    ck_assert_msg(inode(e.entry) != old, "a cache of other bytes was trusted");
    env_free(&e);
}
END_TEST

/* RLX_CACHE_DIR is a file, so no folder can be made there: loads work, nothing written */
START_TEST(unusable_cache_folder_is_ignored)
{
    env e;
    env_new(&e, FILES[_i]);
    copy_to(e.src, e.cache);
    check_against_hf(e.src, FILES[_i]);
    check_against_hf(e.src, FILES[_i]);
    struct stat st;
    ck_assert_int_eq(stat(e.cache, &st), 0);
    ck_assert(S_ISREG(st.st_mode));
    env_free(&e);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tokenizer_cache");
    TCase *tc = tcase_create("cache");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, second_load_comes_from_the_cache, 0, 2);
    tcase_add_loop_test(tc, flipped_byte_is_detected, 0, 2);
    tcase_add_loop_test(tc, truncated_cache_is_detected, 0, 2);
    tcase_add_test(tc, stale_cache_after_source_change);
    tcase_add_loop_test(tc, stale_cache_same_size_and_mtime, 0, 2);
    tcase_add_loop_test(tc, unusable_cache_folder_is_ignored, 0, 2);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
