/* Memory before work: a session whose KV cache does not fit is refused with what it needs
 * and what the device has, before any weight is bound or program compiled; the figures
 * the model reports afterwards are the bytes it holds. llama32-tiny on the CPU backend,
 * whose "device" is host memory (RLX_MEM_LIMIT caps it). */
#include "rlx/rlx.h"
#include "testutil.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 3 layers x (k, v) x 2 kv heads x head_dim 16 x f32 */
#define KV_BYTES_PER_ROW (3 * 2 * 2 * 16 * 4)

static rlx_model *open_tiny(void) { return tu_open_model(tu_fixture("llama32-tiny"), "cpu", 1); }

START_TEST(refused_before_work)
{
    rlx_model *m = open_tiny();
    rlx_session *s = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_session_new(m, 1000000, &s, &d), 0);
    int32_t ids[3] = {1, 5, 9};
    float last[512];
    ck_assert_int_eq(setenv("RLX_MEM_LIMIT", "64M", 1), 0);
    ck_assert_int_eq(rlx_session_prefill(s, ids, 3, NULL, last, &d), RLX_ERR_NOMEM);
    unsetenv("RLX_MEM_LIMIT");
    /* 768,000,000 bytes of cache; the weights are f32 on disk, used in place */
    const char *want = "cpu (host memory): needs 732.4 MiB (KV cache 732.4 MiB + arena ";
    ck_assert_msg(strncmp(d.msg, want, strlen(want)) == 0, "%s", d.msg);
    ck_assert_msg(strstr(d.msg, "), 64.0 MiB available") && !strchr(d.msg, '\n'), "%s", d.msg);
    /* nothing ran: no program, no weight bound, no cache, the session where it was */
    ck_assert_int_eq(rlx_model_compiled_count(m), 0);
    rlx_memory mem;
    ck_assert_msg(rlx_model_memory(m, &mem, &d) == 0, "%s", d.msg);
    ck_assert_uint_eq(mem.weights_bytes, 0);
    ck_assert_uint_eq(mem.kv_cache_bytes, 0);
    ck_assert_uint_eq(mem.arena_bytes, 0);
    ck_assert_int_eq(rlx_session_pos(s), 0);
    rlx_session_free(s);
    rlx_model_close(m);
}
END_TEST

START_TEST(figures_after_a_run)
{
    rlx_model *m = open_tiny();
    rlx_session *a = NULL, *b = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_session_new(m, 100, &a, &d), 0);
    ck_assert_int_eq(rlx_session_new(m, 40, &b, &d), 0);
    int32_t ids[3] = {1, 5, 9};
    float last[512];
    ck_assert_msg(rlx_session_prefill(a, ids, 3, NULL, last, &d) == 0, "%s", d.msg);
    ck_assert_msg(rlx_session_decode(a, 7, last, &d) == 0, "%s", d.msg);
    rlx_memory mem;
    ck_assert_msg(rlx_model_memory(m, &mem, &d) == 0, "%s", d.msg);
    ck_assert_uint_eq(mem.kv_cache_bytes, 100 * KV_BYTES_PER_ROW);
    /* every tensor of the checkpoint, in f32: 512x64 embedding + 3 layers + final norm */
    ck_assert_uint_eq(mem.weights_bytes, 4 * (512 * 64 + 3 * (2 * 64 + 64 * 64 * 2 + 32 * 64 * 2 + 3 * 64 * 160) + 64));
    ck_assert_msg(mem.arena_bytes > 0 && mem.total_bytes > mem.free_bytes && mem.free_bytes > 0, "arena %llu",
                  (unsigned long long)mem.arena_bytes);
    ck_assert_str_eq(mem.device, "cpu (host memory)");
    /* a second session adds its cache; freeing it gives it back */
    ck_assert_msg(rlx_session_prefill(b, ids, 3, NULL, last, &d) == 0, "%s", d.msg);
    ck_assert_msg(rlx_model_memory(m, &mem, &d) == 0, "%s", d.msg);
    ck_assert_uint_eq(mem.kv_cache_bytes, 140 * KV_BYTES_PER_ROW);
    rlx_session_free(b);
    ck_assert_msg(rlx_model_memory(m, &mem, &d) == 0, "%s", d.msg);
    ck_assert_uint_eq(mem.kv_cache_bytes, 100 * KV_BYTES_PER_ROW);
    rlx_session_free(a);
    rlx_model_close(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("memory");
    TCase *tc = tcase_create("memory");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, refused_before_work);
    tcase_add_test(tc, figures_after_a_run);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
