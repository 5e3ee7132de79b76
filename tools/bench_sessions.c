/* rlx-bench --sessions K: the outputs of K sessions stepping at once from K threads must
 * be those of each session run alone (the runtime serialises steps on one model; this
 * measures what that costs and checks nothing is shared that should not be). */
#include "bench_sessions.h"
#include "run_common.h"
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct sess_job {
    rlx_model *m;
    int64_t T, N, V;
    uint64_t seed;
    uint64_t hash; /* FNV-1a over the generated ids and every logits row */
    int rc;
    rlx_diag d;
} sess_job;

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

static void *run_one(void *arg)
{
    sess_job *j = arg;
    int32_t *ids = malloc((size_t)j->T * sizeof *ids);
    float *lg = malloc((size_t)j->V * sizeof *lg);
    rlx_session *s = NULL;
    rlx_diag_init(&j->d);
    j->rc = !ids || !lg ? rlx_diag_set(&j->d, RLX_ERR_NOMEM, "out of memory") : 0;
    uint64_t x = j->seed;
    for (int64_t i = 0; i < j->T && !j->rc; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ids[i] = (int32_t)((x >> 33) % (uint64_t)j->V);
    }
    j->hash = 1469598103934665603ull;
    if (!j->rc) j->rc = rlx_session_new(j->m, j->T + j->N + 1, &s, &j->d);
    if (!j->rc) j->rc = rlx_session_prefill(s, ids, j->T, NULL, lg, &j->d);
    for (int64_t k = 0; k < j->N && !j->rc; k++) {
        int32_t best = 0; /* greedy: a differing logit changes what follows */
        for (int64_t v = 1; v < j->V; v++)
            if (lg[v] > lg[best]) best = (int32_t)v;
        j->hash = fnv(fnv(j->hash, lg, (size_t)j->V * sizeof *lg), &best, sizeof best);
        j->rc = rlx_session_decode(s, best, lg, &j->d);
    }
    rlx_session_free(s);
    free(ids);
    free(lg);
    return NULL;
}

int bench_sessions(rlx_model *m, int64_t T, int64_t N, int K, uint64_t seed, bench_sessions_result *out,
                   rlx_diag *d)
{
    memset(out, 0, sizeof *out);
    out->sessions = K;
    out->tokens = T + N;
    sess_job *alone = calloc((size_t)K, sizeof *alone), *together = calloc((size_t)K, sizeof *together);
    pthread_t *th = calloc((size_t)K, sizeof *th);
    int rc = !alone || !together || !th ? rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory") : 0;
    for (int k = 0; k < K && !rc; k++) {
        sess_job j = {m, T, N, rlx_model_get_config(m)->vocab_size, seed * 2654435761u + (uint64_t)k + 1, 0, 0, {0}};
        alone[k] = together[k] = j;
    }
    double t0 = run_now_ms();
    for (int k = 0; k < K && !rc; k++) {
        run_one(&alone[k]);
        if (alone[k].rc) rc = rlx_diag_set(d, alone[k].rc, "session %d alone: %s", k, alone[k].d.msg);
    }
    double t1 = run_now_ms();
    int started = 0;
    for (; started < K && !rc; started++)
        if (pthread_create(&th[started], NULL, run_one, &together[started]) != 0)
            rc = rlx_diag_set(d, RLX_ERR_NOMEM, "--sessions: cannot start thread %d", started);
    for (int k = 0; k < started; k++) pthread_join(th[k], NULL);
    double t2 = run_now_ms();
    for (int k = 0; k < K && !rc; k++) {
        if (together[k].rc) rc = rlx_diag_set(d, together[k].rc, "session %d of %d: %s", k, K, together[k].d.msg);
        else out->identical += together[k].hash == alone[k].hash;
    }
    if (!rc && out->identical != K)
        rc = rlx_diag_set(d, RLX_ERR_INVALID, "--sessions: %d of %d sessions run from %d threads differ from the "
                          "same sessions run alone", K - out->identical, K, K);
    out->alone_ms = t1 - t0;
    out->together_ms = t2 - t1;
    free(alone);
    free(together);
    free(th);
    return rc ? 1 : 0;
}
