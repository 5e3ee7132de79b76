/* Sampling: greedy, top-k, top-p, seeds, and transformers' repetition penalty. */
#include <check.h>
#include "testutil.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "rlx/rlx.h"

#define V 1000

static void random_logits(float *x, int n, uint32_t seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) / 16777216.0 * 20.0 - 10.0);
    }
}

static int argmax_ref(const float *x, int n)
{
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static rlx_sampler_params params(double temp, int64_t k, double p, uint64_t seed)
{
    rlx_sampler_params sp = {.greedy = 0, .temperature = temp, .top_k = k, .top_p = p,
                             .repetition_penalty = 1.0, .seed = seed};
    return sp;
}

START_TEST(greedy_is_argmax)
{
    float x[V], y[V];
    rlx_sampler_params p = params(1.0, 0, 1.0, 1);
    p.greedy = 1;
    rlx_sampler *s = rlx_sampler_new(&p, V);
    rlx_sampler_params p0 = params(0.0, 0, 1.0, 1); /* temperature 0 is greedy too */
    rlx_sampler *s0 = rlx_sampler_new(&p0, V);
    ck_assert(s && s0);
    for (uint32_t k = 0; k < 50; k++) {
        random_logits(x, V, k + 1);
        memcpy(y, x, sizeof x);
        int want = argmax_ref(x, V);
        ck_assert_int_eq(rlx_sampler_next(s, x, NULL, 0), want);
        ck_assert_int_eq(rlx_sampler_next(s0, y, NULL, 0), want);
    }
    rlx_sampler_free(s);
    rlx_sampler_free(s0);
}
END_TEST

START_TEST(top_k_1_is_greedy)
{
    float x[V];
    rlx_sampler_params p = params(1.5, 1, 1.0, 99);
    rlx_sampler *s = rlx_sampler_new(&p, V);
    for (uint32_t k = 0; k < 100; k++) {
        random_logits(x, V, 7 * k + 3);
        int want = argmax_ref(x, V);
        ck_assert_int_eq(rlx_sampler_next(s, x, NULL, 0), want);
    }
    rlx_sampler_free(s);
}
END_TEST

static void draw(uint64_t seed, int32_t *out, int n)
{
    float x[V];
    rlx_sampler_params p = params(0.8, 50, 0.9, seed);
    rlx_sampler *s = rlx_sampler_new(&p, V);
    for (int i = 0; i < n; i++) {
        random_logits(x, V, 1000 + (uint32_t)i);
        out[i] = rlx_sampler_next(s, x, out, (size_t)i);
        ck_assert(out[i] >= 0 && out[i] < V);
    }
    rlx_sampler_free(s);
}

START_TEST(same_seed_same_sequence)
{
    int32_t a[200], b[200], c[200];
    draw(1234, a, 200);
    draw(1234, b, 200);
    draw(4321, c, 200);
    ck_assert(memcmp(a, b, sizeof a) == 0);
    ck_assert(memcmp(a, c, sizeof a) != 0);
}
END_TEST

/* probabilities 0.5, 0.3, 0.2 for ids 0, 1, 2 (the rest -inf) */
static void three_way(float *x)
{
    for (int i = 0; i < V; i++) x[i] = -INFINITY;
    x[0] = logf(0.5f);
    x[1] = logf(0.3f);
    x[2] = logf(0.2f);
}

static void count(double top_p, int n, int *hist)
{
    float x[V];
    rlx_sampler_params p = params(1.0, 0, top_p, 5);
    rlx_sampler *s = rlx_sampler_new(&p, V);
    memset(hist, 0, 3 * sizeof *hist);
    for (int i = 0; i < n; i++) {
        three_way(x);
        int32_t id = rlx_sampler_next(s, x, NULL, 0);
        ck_assert(id >= 0 && id < 3);
        hist[id]++;
    }
    rlx_sampler_free(s);
}

START_TEST(top_p_edges)
{
    int h[3];
    /* tiny top_p keeps only the most likely token (at least one is always kept) */
    count(1e-9, 500, h);
    ck_assert_int_eq(h[0], 500);
    count(0.0, 200, h);
    ck_assert_int_eq(h[0], 200);
    /* 0.6: transformers drops tokens whose ascending cumulative mass is <= 0.4: id 2 only */
    count(0.6, 4000, h);
    ck_assert_int_eq(h[2], 0);
    ck_assert(h[1] > 0);
    ck_assert_msg(fabs(h[0] / 4000.0 - 0.625) < 0.04, "p(0) = %f", h[0] / 4000.0);
    /* 1.0: off, all three appear with their probabilities */
    count(1.0, 4000, h);
    ck_assert_msg(fabs(h[2] / 4000.0 - 0.2) < 0.03, "p(2) = %f", h[2] / 4000.0);
}
END_TEST

START_TEST(repetition_penalty_like_transformers)
{
    float x[4] = {3.0f, -2.0f, 2.0f, 0.5f};
    rlx_sampler_params p = params(1.0, 0, 1.0, 0);
    p.greedy = 1;
    p.repetition_penalty = 2.0;
    rlx_sampler *s = rlx_sampler_new(&p, 4);
    int32_t hist[] = {0, 1, 1}; /* a repeated id is penalised once */
    ck_assert_int_eq(rlx_sampler_next(s, x, hist, 3), 2);
    ck_assert(x[0] == 1.5f);  /* positive: divided */
    ck_assert(x[1] == -4.0f); /* negative: multiplied */
    ck_assert(x[2] == 2.0f && x[3] == 0.5f);
    rlx_sampler_free(s);
    ck_assert_ptr_null(rlx_sampler_new(&p, 0));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("sampling");
    tcase_add_test(tc, greedy_is_argmax);
    tcase_add_test(tc, top_k_1_is_greedy);
    tcase_add_test(tc, same_seed_same_sequence);
    tcase_add_test(tc, top_p_edges);
    tcase_add_test(tc, repetition_penalty_like_transformers);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
