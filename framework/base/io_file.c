/* Reading small JSON files (configs, profiles, shard indexes) with a size bound:
 * every one of them is user input and must never be read unbounded. */
#include "base/internal.h"
#include <jansson.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int rlx__read_small_file(const char *path, size_t max_bytes, char **out, size_t *len, rlx_diag *d)
{
    *out = NULL;
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return rlx_diag_set(d, errno == ENOENT ? RLX_ERR_NOT_FOUND : RLX_ERR_IO, "%s: %s", path,
                            strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        fclose(f);
        return rlx_diag_set(d, RLX_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)st.st_size > max_bytes) {
        fclose(f);
        return rlx_diag_set(d, RLX_ERR_INVALID, "%s: file is %lld bytes, more than the %zu allowed",
                            path, (long long)st.st_size, max_bytes);
    }
    size_t n = (size_t)st.st_size;
    char *buf = malloc(n + 1);
    if (!buf) {
        fclose(f);
        return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", path);
    }
    size_t got = fread(buf, 1, n, f);
    int err = ferror(f);
    fclose(f);
    if (err || got != n) {
        free(buf);
        return rlx_diag_set(d, RLX_ERR_IO, "%s: read error", path);
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
