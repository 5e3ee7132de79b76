/* The NCCL loader of the GPU backends (plugins/backends/gpu/nccl_loader.c): on a machine
 * without the library, one line naming it; a library without NCCL's symbols names the
 * first missing one; where NCCL is installed, every symbol resolves. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include "../plugins/backends/gpu/nccl_loader.h"
#include "testutil.h"

START_TEST(test_missing_library)
{
    rlx_nccl n;
    char err[512];
    setenv("RLX_NCCL_LIBRARY", "/nonexistent/libnccl.so.2", 1);
    ck_assert_int_eq(rlx_nccl_load(&n, 0, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "/nonexistent/libnccl.so.2: cannot load it (") == err, "%s", err);
    ck_assert_msg(strstr(err, "); tensor parallelism over GPUs needs NCCL (set RLX_NCCL_LIBRARY"), "%s", err);
    ck_assert_ptr_null(strchr(err, '\n'));
    ck_assert_int_eq(rlx_nccl_init_all(&n, NULL, 2, NULL, err, sizeof err), -1);
    ck_assert_str_eq(err, "NCCL is not loaded");
}
END_TEST

START_TEST(test_not_nccl)
{
    rlx_nccl n;
    char err[512];
    setenv("RLX_NCCL_LIBRARY", "libm.so.6", 1);
    ck_assert_int_eq(rlx_nccl_load(&n, 1, err, sizeof err), -1);
    ck_assert_str_eq(err, "libm.so.6: no symbol ncclCommInitAll (an NCCL older than 2.4?)");
}
END_TEST

START_TEST(test_default_names)
{
    rlx_nccl n;
    char err[512];
    unsetenv("RLX_NCCL_LIBRARY");
    for (int rocm = 0; rocm < 2; rocm++) {
        const char *want = rocm ? "librccl.so" : "libnccl.so.2";
        if (rlx_nccl_load(&n, rocm, err, sizeof err) == 0) { /* installed here */
            ck_assert_ptr_nonnull(n.all_reduce);
            ck_assert_ptr_nonnull(n.get_error_string);
            ck_assert_ptr_nonnull(n.comm_abort);
            ck_assert_ptr_nonnull(n.comm_get_async_error);
            continue;
        }
        ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "%s", err);
        ck_assert_msg(strstr(err, rocm ? "needs RCCL" : "needs NCCL"), "%s", err);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("nccl_loader");
    TCase *c = tcase_create("load");
    tcase_add_test(c, test_missing_library);
    tcase_add_test(c, test_not_nccl);
    tcase_add_test(c, test_default_names);
    suite_add_tcase(s, c);
    return tu_run_suite(s);
}
