/* A prefill whose caller wants only the next token's logits computes the final norm and
 * the vocabulary projection on that one row (rg_pass_last_row): the logits still match
 * transformers' row n-1 for padded and exact buckets, the KV cache is still written for
 * every row, and the compiled program really projects one row. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "parity_util.h"
#include "testutil.h"

static void check_model(const char *model)
{
    rlx_weights *ref = pu_open_ref(model);
    size_t nid = 0, nfull = 0;
    int32_t *ids = pu_read_ids(ref, "case1.full_ids", &nid);
    float *full = pu_read_f32(ref, "case1.full_logits", &nfull);
    size_t V = nfull / nid;
    char dir[512];
    snprintf(dir, sizeof dir, "%s", tu_fixture(model));
    rlx_model_options o;
    rlx_model_options_init(&o);
    o.backend = "cpu";
    o.verbose = 1; /* every compiled program is dumped on stderr */
    char *tmp = tu_mkdtemp(), log[600];
    snprintf(log, sizeof log, "%s/compile.log", tmp);
    fflush(stderr);
    int saved = dup(2);
    ck_assert(freopen(log, "w", stderr) != NULL);
    rlx_diag d = {0};
    rlx_model *m = NULL;
    int rc = rlx_model_open(dir, &o, &m, &d);
    float *all = malloc(nid * V * sizeof *all), *last = malloc(V * sizeof *last);
    /* n = 6 and 11 are padded to buckets 8 and 16; 16 fills its bucket */
    static const size_t lens[] = {6, 11, 16};
    for (size_t c = 0; !rc && c < 3; c++) {
        size_t n = lens[c];
        rlx_session *a = NULL, *b = NULL;
        ck_assert_msg(rlx_session_new(m, 32, &a, &d) == 0 && rlx_session_new(m, 32, &b, &d) == 0, "%s", d.msg);
        ck_assert_msg(rlx_session_prefill(a, ids, (int64_t)n, all, NULL, &d) == 0, "%s: %s", model, d.msg);
        ck_assert_msg(rlx_session_prefill(b, ids, (int64_t)n, NULL, last, &d) == 0, "%s: %s", model, d.msg);
        double e_self = tu_rel_l2(last, all + (n - 1) * V, V), e_ref = tu_rel_l2(last, full + (n - 1) * V, V);
        ck_assert_msg(e_self < 1e-5, "%s n=%zu: last-row logits vs the all-rows run: %g", model, n, e_self);
        ck_assert_msg(e_ref < 1e-4, "%s n=%zu: last-row logits vs transformers: %g", model, n, e_ref);
        if (n < nid) { /* the cache holds every prompt row: the next step matches */
            ck_assert_msg(rlx_session_decode(b, ids[n], last, &d) == 0, "%s", d.msg);
            double e = tu_rel_l2(last, full + n * V, V);
            ck_assert_msg(e < 1e-4, "%s n=%zu: decode after a last-row prefill vs transformers: %g", model, n, e);
        }
        rlx_session_free(a);
        rlx_session_free(b);
    }
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ck_assert_msg(!rc, "%s: %s", model, d.msg);
    /* the last-row program for T=8: one rlx.last_row, and the projection to V on one row */
    size_t len = 0;
    char *txt = tu_read_file(log, &len), want[64], bad[64];
    ck_assert(txt != NULL);
    snprintf(want, sizeof want, "[1, %zu]", V);
    snprintf(bad, sizeof bad, "[8, %zu]", V);
    char *prog = NULL; /* the T=8 prefill program that takes a row */
    for (const char *p = strstr(txt, "graph prefill T=8"); p && !prog; p = strstr(p + 1, "graph prefill T=8")) {
        const char *end = strstr(p + 1, "graph ");
        char *blk = strndup(p, end ? (size_t)(end - p) : strlen(p));
        if (strstr(blk, "rlx.last_row")) prog = blk;
        else free(blk);
    }
    ck_assert_msg(prog != NULL, "%s: no T=8 prefill program takes the last row:\n%s", model, txt);
    ck_assert_msg(strstr(prog, want) && !strstr(prog, bad), "%s: the last-row program still projects 8 rows:\n%s",
                  model, prog);
    free(prog);
    free(txt);
    rlx_model_close(m);
    tu_rmrf(tmp);
    free(tmp);
    free(all);
    free(last);
    free(ids);
    free(full);
    rlx_weights_close(ref);
}

START_TEST(test_llama) { check_model("llama32-tiny"); }
END_TEST
START_TEST(test_qwen3) { check_model("qwen3-tiny"); }
END_TEST
START_TEST(test_gemma2_softcap) { check_model("gemma2-tiny"); }
END_TEST
START_TEST(test_gemma3) { check_model("gemma3-tiny"); }
END_TEST
START_TEST(test_phi3) { check_model("phi3-tiny"); }
END_TEST

int main(void)
{
    Suite *s = suite_create("last_row");
    TCase *tc = tcase_create("prefill");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_llama);
    tcase_add_test(tc, test_qwen3);
    tcase_add_test(tc, test_gemma2_softcap);
    tcase_add_test(tc, test_gemma3);
    tcase_add_test(tc, test_phi3);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
