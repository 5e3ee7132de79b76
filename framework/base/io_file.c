/* Opening every file rlx reads (configs, tokenizers, profiles, flows, safetensors):
 * O_NONBLOCK so a FIFO or a device never blocks the open, then fstat on the open file
 * (after links are followed) so only a regular file is ever read. Small JSON files are
 * read whole with a size bound: every one of them is user input. */
#define _GNU_SOURCE
#include "base/internal.h"
#include <jansson.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *kind_of(mode_t m)
{
    return S_ISDIR(m)    ? "a directory"
           : S_ISFIFO(m) ? "a FIFO"
           : S_ISCHR(m)  ? "a character device"
           : S_ISBLK(m)  ? "a block device"
           : S_ISSOCK(m) ? "a socket"
                         : "not a plain file";
}

int rlx__open_regular(const char *path, int *fd_out, struct stat *st, rlx_diag *d)
{
    *fd_out = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        int err = errno;
        struct stat lst;
        if (err == ENOENT && lstat(path, &lst) == 0 && S_ISLNK(lst.st_mode))
            return rlx_diag_set(d, RLX_ERR_NOT_FOUND, "%s: a dangling symbolic link", path);
        if (err == EISDIR) return rlx_diag_set(d, RLX_ERR_IO, "%s: a directory, not a regular file", path);
        return rlx_diag_set(d, err == ENOENT ? RLX_ERR_NOT_FOUND : RLX_ERR_IO, "%s: %s", path,
                            strerror(err));
    }
    if (fstat(fd, st) != 0) {
        int err = errno;
        close(fd);
        return rlx_diag_set(d, RLX_ERR_IO, "%s: %s", path, strerror(err));
    }
    if (!S_ISREG(st->st_mode)) {
        close(fd);
        return rlx_diag_set(d, RLX_ERR_IO, "%s: %s, not a regular file", path, kind_of(st->st_mode));
    }
    /* a regular file never blocks; plain blocking reads from here on */
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    *fd_out = fd;
    return RLX_OK;
}

/* malloc'ed memory; tens of MB (a tokenizer.json) on huge pages where the system gives
 * them: read into fresh 4 KiB pages, every page costs a fault (a third of such a load) */
static void *big_buffer(size_t n)
{
    void *p = NULL;
    if (n < (4u << 20)) return malloc(n);
    if (posix_memalign(&p, 2u << 20, n)) return NULL;
    madvise(p, n, MADV_HUGEPAGE); /* a hint: fine if refused */
    return p;
}

int rlx__read_small_file(const char *path, size_t max_bytes, char **out, size_t *len, rlx_diag *d)
{
    *out = NULL;
    *len = 0;
    int fd;
    struct stat st;
    int rc = rlx__open_regular(path, &fd, &st, d);
    if (rc) return rc;
    if ((uint64_t)st.st_size > max_bytes) {
        close(fd);
        return rlx_diag_set(d, RLX_ERR_INVALID, "%s: file is %lld bytes, more than the %zu allowed",
                            path, (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = big_buffer(n + 1);
    if (!buf) {
        close(fd);
        return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break; /* an error, or the file shrank under us */
        got += (size_t)r;
    }
    close(fd);
    if (got != n) {
        free(buf);
        return rlx_diag_set(d, RLX_ERR_IO, "%s: read error (%zu of %zu bytes)", path, got, n);
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return RLX_OK;
}

const char *rlx__json_type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_INTEGER: return "an integer";
    case JSON_REAL: return "a number";
    case JSON_TRUE:
    case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    }
    return "?";
}

int rlx__json_parse(const char *buf, size_t len, const char *origin, json_t **out, rlx_diag *d)
{
    json_error_t je;
    *out = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &je);
    if (!*out)
        return rlx_diag_set(d, RLX_ERR_INVALID, "%s: invalid JSON at line %d column %d: %s", origin,
                            je.line, je.column, je.text);
    return RLX_OK;
}
