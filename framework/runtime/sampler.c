/* Token sampling as transformers' generate() does it: repetition penalty, then greedy
 * (argmax) or temperature -> top-k -> top-p -> a draw from a seeded generator. */
#include "base/internal.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct rlx_sampler {
    rlx_sampler_params p;
    int64_t vocab;
    uint64_t rng[4];   /* xoshiro256** state */
    int32_t *idx;      /* scratch: candidate ids sorted by logit */
    double *prob;
    uint32_t *seen;    /* repetition penalty: stamp per id */
    uint32_t stamp;
};

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t next_u64(rlx_sampler *s)
{
    uint64_t *r = s->rng, out = rotl(r[1] * 5, 7) * 9, t = r[1] << 17;
    r[2] ^= r[0];
    r[3] ^= r[1];
    r[1] ^= r[2];
    r[0] ^= r[3];
    r[2] ^= t;
    r[3] = rotl(r[3], 45);
    return out;
}

static double uniform01(rlx_sampler *s) { return (double)(next_u64(s) >> 11) * 0x1.0p-53; }

RLX_API rlx_sampler *rlx_sampler_new(const rlx_sampler_params *p, int64_t vocab)
{
    if (!p || vocab <= 0 || vocab > INT32_MAX) return NULL;
    rlx_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->p = *p;
    s->vocab = vocab;
    s->idx = malloc((size_t)vocab * sizeof *s->idx);
    s->prob = malloc((size_t)vocab * sizeof *s->prob);
    s->seen = calloc((size_t)vocab, sizeof *s->seen);
    if (!s->idx || !s->prob || !s->seen) {
        rlx_sampler_free(s);
        return NULL;
    }
    uint64_t x = p->seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix64(&x);
    return s;
}

RLX_API void rlx_sampler_free(rlx_sampler *s)
{
    if (!s) return;
    free(s->idx);
    free(s->prob);
    free(s->seen);
    free(s);
}

/* transformers' RepetitionPenaltyLogitsProcessor: each distinct id seen once */
static void repetition_penalty(rlx_sampler *s, float *logits, const int32_t *h, size_t n)
{
    double pen = s->p.repetition_penalty;
    if (!(pen > 0) || pen == 1.0 || !h || !n) return;
    if (++s->stamp == 0) {
        memset(s->seen, 0, (size_t)s->vocab * sizeof *s->seen);
        s->stamp = 1;
    }
    for (size_t i = 0; i < n; i++) {
        int32_t id = h[i];
        if (id < 0 || id >= s->vocab || s->seen[id] == s->stamp) continue;
        s->seen[id] = s->stamp;
        float v = logits[id];
        logits[id] = v > 0 ? (float)(v / pen) : (float)(v * pen);
    }
}

static int32_t argmax(const float *x, int64_t n)
{
    int32_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best] || (isnan(x[best]) && !isnan(x[i]))) best = (int32_t)i;
    return best;
}

/* qsort has no context argument: the logits being sorted, per thread */
static _Thread_local const float *tl_logits;
static int by_logit_desc(const void *a, const void *b)
{
    float x = tl_logits[*(const int32_t *)a], y = tl_logits[*(const int32_t *)b];
    if (x > y) return -1;
    if (x < y) return 1;
    return *(const int32_t *)a - *(const int32_t *)b;
}

RLX_API int32_t rlx_sampler_next(rlx_sampler *s, float *logits, const int32_t *history, size_t n_history)
{
    if (!s || !logits) return -1;
    repetition_penalty(s, logits, history, n_history);
    if (s->p.greedy || !(s->p.temperature > 0)) return argmax(logits, s->vocab);
    int64_t V = s->vocab;
    float t = (float)s->p.temperature;
    for (int64_t i = 0; i < V; i++) logits[i] /= t;

    /* candidates sorted by logit, descending (ties by id) */
    int64_t n = 0;
    for (int64_t i = 0; i < V; i++)
        if (!isnan(logits[i]) && logits[i] != -INFINITY) s->idx[n++] = (int32_t)i;
    if (n == 0) return argmax(logits, V);
    tl_logits = logits;
    qsort(s->idx, (size_t)n, sizeof *s->idx, by_logit_desc);

    /* top-k keeps every candidate tied with the k-th logit, as transformers does */
    if (s->p.top_k > 0 && s->p.top_k < n) {
        float kth = logits[s->idx[s->p.top_k - 1]];
        int64_t k = s->p.top_k;
        while (k < n && logits[s->idx[k]] >= kth) k++;
        n = k;
    }
    double mx = logits[s->idx[0]], sum = 0;
    for (int64_t i = 0; i < n; i++) sum += s->prob[i] = exp((double)logits[s->idx[i]] - mx);
    for (int64_t i = 0; i < n; i++) s->prob[i] /= sum;

    /* top-p: the smallest head whose mass reaches top_p (at least one token) */
    if (s->p.top_p < 1.0) {
        double cum = 0;
        int64_t k = 0;
        while (k < n && (k == 0 || cum < s->p.top_p)) cum += s->prob[k++];
        n = k;
        sum = cum;
        for (int64_t i = 0; i < n; i++) s->prob[i] /= sum;
    }
    double u = uniform01(s), acc = 0;
    for (int64_t i = 0; i < n; i++) {
        acc += s->prob[i];
        if (u < acc) return s->idx[i];
    }
    return s->idx[n - 1];
}
