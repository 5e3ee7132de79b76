#include "tp_files.h"
#include "testutil.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tp_write(const char *dir, const char *file_name, const void *data, unsigned long len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file_name);
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    ck_assert_uint_eq(fwrite(data, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

void tp_copy(const char *name, const char *dir, const char *file_name)
{
    char rel[256], dst[512];
    snprintf(rel, sizeof rel, "tests/plugins/.libs/%s.so", name);
    snprintf(dst, sizeof dst, "%s.so", name);
    size_t len = 0;
    char *data = tu_read_file(tu_build(rel), &len);
    ck_assert_msg(data != NULL, "test plugin %s not built", tu_build(rel));
    tp_write(dir, file_name ? file_name : dst, data, len);
    free(data);
}

char *tp_dir(const char *const *names)
{
    char *dir = tu_mkdtemp();
    ck_assert_msg(dir != NULL, "mkdtemp failed");
    for (; names && *names; names++) tp_copy(*names, dir, NULL);
    return dir;
}
