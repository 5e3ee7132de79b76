/* Batched decode: sessions of one model at different lengths step together (one program
 * over B rows, each row on its own KV cache slot) and get, row by row, the logits each
 * gets decoding alone; a session keeps its slot when it steps alone or joins a larger
 * batch (the pool grows). llama32-tiny on the CPU backend (tools/gpu-check.sh sets
 * RLX_TEST_BACKEND=cuda). */
#include "rlx/rlx.h"
#include "testutil.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define V 512
#define NS 20 /* more rows than the GPU's GEMVs take (16): cuBLAS, still one graph a step */
/* The CPU runs each row's attention through the decode row kernel itself, so only the
 * matmuls' summation order differs (one GEMM over B rows against a GEMV); on a GPU a row's
 * keys split over as many blocks as its own length needs, not as the single decode's, a
 * different f32 summation order of the softmax and the values */
static double TOL = 1e-6;
static const char *backend = "cpu";

static rlx_model *m;

static void pick_backend(void)
{
    const char *tb = getenv("RLX_TEST_BACKEND");
    if (tb && *tb) backend = tb;
    if (strcmp(backend, "cpu")) TOL = 1e-5;
}
static rlx_session *bat[NS], *ref[NS];
static const int lens[NS] = {3, 7, 1, 12, 5, 2, 9, 4, 6, 8, 1, 3, 10, 2, 5, 7, 4, 11, 6, 3};

static void setup(void)
{
    pick_backend();
    m = tu_open_model(tu_fixture("llama32-tiny"), backend, 1);
    rlx_diag d;
    rlx_diag_init(&d);
    float last[V];
    for (int b = 0; b < NS; b++) {
        int32_t ids[16];
        for (int i = 0; i < lens[b]; i++) ids[i] = (int32_t)((b * 37 + i * 11 + 3) % V);
        ck_assert_int_eq(rlx_session_new(m, 64, &bat[b], &d), 0);
        ck_assert_int_eq(rlx_session_new(m, 64, &ref[b], &d), 0);
        ck_assert_msg(rlx_session_prefill(bat[b], ids, lens[b], NULL, last, &d) == 0, "%s", d.msg);
        ck_assert_msg(rlx_session_prefill(ref[b], ids, lens[b], NULL, last, &d) == 0, "%s", d.msg);
    }
}

static void teardown(void)
{
    for (int b = 0; b < NS; b++) {
        rlx_session_free(bat[b]);
        rlx_session_free(ref[b]);
    }
    rlx_model_close(m);
}

/* one batched step of sessions idx[0..n) against each reference decoding alone */
static void step(const int *idx, int n, int k)
{
    rlx_session *s[NS];
    int32_t ids[NS];
    float got[NS * V], want[V];
    rlx_diag d;
    rlx_diag_init(&d);
    for (int i = 0; i < n; i++) {
        s[i] = bat[idx[i]];
        ids[i] = (int32_t)((idx[i] * 13 + k * 29 + 1) % V);
    }
    ck_assert_msg(rlx_session_decode_batch(s, n, ids, got, &d) == 0, "%s", d.msg);
    for (int i = 0; i < n; i++) {
        ck_assert_msg(rlx_session_decode(ref[idx[i]], ids[i], want, &d) == 0, "%s", d.msg);
        double e = tu_rel_l2(got + (size_t)i * V, want, V);
        ck_assert_msg(e < TOL, "step %d, row %d (session %d at %lld): rel L2 %g", k, i, idx[i],
                      (long long)rlx_session_pos(ref[idx[i]]), e);
        ck_assert_int_eq(rlx_session_pos(bat[idx[i]]), rlx_session_pos(ref[idx[i]]));
    }
}

START_TEST(rows_match_alone)
{
    static const int two[2] = {3, 1}, mixed[3] = {4, 0, 2};
    int all[NS];
    for (int i = 0; i < NS; i++) all[i] = i;
    step(two, 2, 0); /* a pool of 2 slots */
    step(two, 2, 1);
    step(all, NS, 2); /* the rest join: the pool grows, the first two keep their rows */
    step(mixed, 3, 3);
    step(all, NS, 4);
    /* a pooled session steps alone and in a batch again */
    float a[V], b[V];
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_session_decode(bat[2], 77, a, &d) == 0, "%s", d.msg);
    ck_assert_msg(rlx_session_decode(ref[2], 77, b, &d) == 0, "%s", d.msg);
    ck_assert_msg(tu_rel_l2(a, b, V) < TOL, "alone after batching: %g", tu_rel_l2(a, b, V));
    step(all, NS, 5);
    /* and after a rewind, from its slot */
    ck_assert_int_eq(rlx_session_rewind(bat[3], 6, &d), 0);
    ck_assert_int_eq(rlx_session_rewind(ref[3], 6, &d), 0);
    step(all, NS, 6);
}
END_TEST

START_TEST(bad_batches)
{
    rlx_session *s[2] = {bat[0], bat[0]}, *other = NULL;
    int32_t ids[2] = {1, 2};
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_session_decode_batch(s, 2, ids, NULL, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "rlx_session_decode_batch: sessions 0 and 1 are the same");
    ck_assert_int_eq(rlx_session_new(m, 32, &other, &d), 0);
    s[1] = other;
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_session_decode_batch(s, 2, ids, NULL, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "rlx_session_decode_batch: session 1 has context 32, session 0 64 (one pool, one length)");
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_session_decode_batch(s, 0, ids, NULL, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "rlx_session_decode_batch: no sessions or ids (B = 0)");
    rlx_session_free(other);
    ck_assert_int_eq(rlx_session_pos(bat[0]), lens[0]); /* nothing ran */
}
END_TEST

/* rlx_model_dump_graph's text of the fixture model's decode program of n rows */
static char *dump_decode(int64_t n)
{
    FILE *out = tmpfile();
    ck_assert_ptr_nonnull(out);
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_model_dump_graph(m, RLX_PHASE_DECODE, n, out, &d) == 0, "n = %lld: %s", (long long)n, d.msg);
    size_t len = 0;
    char *text = tu_read_stream(out, &len);
    ck_assert(text && len > 0);
    fclose(out);
    return text;
}

static int ends_with(const char *text, const char *tail)
{
    size_t n = strlen(text), k = strlen(tail);
    return n >= k && !strcmp(text + n - k, tail);
}

/* does the dump's first node line of op end with tail (its output's dtype and shape)? */
static int node_ends(const char *text, const char *op, const char *tail)
{
    char key[64];
    snprintf(key, sizeof key, " %s ", op);
    const char *at = text;
    while ((at = strstr(at, key))) { /* a node line: the op, padded, then its inputs */
        const char *in = at + strlen(key);
        while (*in == ' ') in++;
        if (*in == '%') break;
        at = in;
    }
    const char *end = at ? strchr(at, '\n') : NULL;
    size_t n = strlen(tail);
    return end && (size_t)(++end - at) >= n && !memcmp(end - n, tail, n);
}

/* the dump of 4 decode rows is the program 4 sessions decoding together run: the rows ops
 * on a pool of 4 cache slots, every row's shape [4, ...]; 1 row is the single decode, as
 * before. Op counts as the CPU's legalize leaves them (a GPU's may fuse otherwise). */
START_TEST(dump_batched_decode)
{
    char *one = dump_decode(1), *four = dump_decode(4);
    ck_assert_msg(strstr(four, "graph decode T=4 ctx=256 slots=4: ") == four, "%.3000s", four);
    ck_assert_msg(strstr(four, " rlx.cache_write_rows x6") && strstr(four, " rlx.attention_rows x3"), "%.3000s", four);
    /* 4 times one's states: a pool of 4 slots of 256 rows */
    ck_assert_msg(strstr(four, "; states F32 786432 bytes\n"), "%.3000s", four);
    ck_assert_msg(node_ends(four, "rlx.attention_rows", " F32[4, 4, 16]\n"), "%.3000s", four);
    ck_assert_msg(node_ends(four, "rlx.cache_write_rows", " F32[4, 256, 2, 16]\n"), "%.3000s", four);
    ck_assert_msg(ends_with(four, " F32[4, 512]\n"), "no 4-row logits: %.3000s", four);
    ck_assert_msg(strstr(one, "graph decode T=1 ctx=256: ") == one, "%.3000s", one);
    ck_assert_msg(strstr(one, " rlx.attention x3") && strstr(one, "; states F32 196608 bytes\n"), "%.3000s", one);
    ck_assert_msg(node_ends(one, "rlx.attention", " F32[1, 4, 16]\n"), "%.3000s", one);
    ck_assert_msg(!strstr(one, "_rows") && !strstr(one, "slots=") && !strstr(one, "F32[4, "), "%.3000s", one);
    ck_assert_msg(ends_with(one, " F32[1, 512]\n"), "no 1-row logits: %.3000s", one);
    if (!strcmp(backend, "cpu"))
        ck_assert_msg(strstr(four, "\nops: rlx.embedding x1 rlx.rms_norm x4 rlx.matmul x22 rlx.rope x6 "
                                   "rlx.cache_write_rows x6 rlx.attention_rows x3 rlx.add_rms_norm x3 rlx.swiglu x3 "
                                   "rlx.add x3\n"), "%.3000s", four);
    free(one);
    free(four);
    rlx_diag d;
    rlx_diag_init(&d);
    FILE *null = fopen("/dev/null", "w");
    ck_assert_ptr_nonnull(null);
    ck_assert_int_eq(rlx_model_dump_graph(m, RLX_PHASE_DECODE, 0, null, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "rlx_model_dump_graph: sequence length 0");
    fclose(null);
}
END_TEST

/* any family whose decode flow keeps its sequence in cache states batches: qk-norm
 * (qwen3), softcapping and sliding windows (gemma2, gemma3), fused qkv (phi3) */
START_TEST(families)
{
    static const char *const fixtures[] = {"qwen3-tiny", "gemma2-tiny", "gemma3-tiny", "phi3-tiny"};
    const char *name = fixtures[_i];
    pick_backend();
    rlx_model *fm = tu_open_model(tu_fixture(name), backend, 1);
    rlx_diag d;
    rlx_diag_init(&d);
    int64_t nv = rlx_model_get_config(fm)->vocab_size;
    enum { B = 3 };
    rlx_session *sb[B], *sr[B];
    float *got = malloc((size_t)(B * nv) * sizeof *got), *want = malloc((size_t)nv * sizeof *want);
    for (int b = 0; b < B; b++) {
        int32_t ids[8];
        int n = 2 + 3 * b;
        for (int i = 0; i < n; i++) ids[i] = (int32_t)((b * 7 + i * 5 + 1) % nv);
        ck_assert_int_eq(rlx_session_new(fm, 32, &sb[b], &d), 0);
        ck_assert_int_eq(rlx_session_new(fm, 32, &sr[b], &d), 0);
        ck_assert_msg(rlx_session_prefill(sb[b], ids, n, NULL, want, &d) == 0, "%s: %s", name, d.msg);
        ck_assert_msg(rlx_session_prefill(sr[b], ids, n, NULL, want, &d) == 0, "%s: %s", name, d.msg);
    }
    for (int k = 0; k < 3; k++) {
        int32_t ids[B];
        for (int b = 0; b < B; b++) ids[b] = (int32_t)((k * 11 + b * 3 + 2) % nv);
        ck_assert_msg(rlx_session_decode_batch(sb, B, ids, got, &d) == 0, "%s: %s", name, d.msg);
        for (int b = 0; b < B; b++) {
            ck_assert_msg(rlx_session_decode(sr[b], ids[b], want, &d) == 0, "%s: %s", name, d.msg);
            double e = tu_rel_l2(got + (size_t)b * (size_t)nv, want, (size_t)nv);
            ck_assert_msg(e < TOL, "%s step %d row %d: rel L2 %g", name, k, b, e);
        }
    }
    for (int b = 0; b < B; b++) {
        rlx_session_free(sb[b]);
        rlx_session_free(sr[b]);
    }
    free(got);
    free(want);
    rlx_model_close(fm);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("batch");
    TCase *tc = tcase_create("batch");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, rows_match_alone);
    tcase_add_test(tc, bad_batches);
    tcase_add_test(tc, dump_batched_decode);
    suite_add_tcase(s, tc);
    TCase *fam = tcase_create("families");
    tcase_set_timeout(fam, 120);
    tcase_add_loop_test(fam, families, 0, 4);
    suite_add_tcase(s, fam);
    return tu_run_suite(s);
}
