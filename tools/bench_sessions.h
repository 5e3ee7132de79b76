/* rlx-bench --sessions K: K sessions on one compiled model from K threads. */
#ifndef RLX_BENCH_SESSIONS_H
#define RLX_BENCH_SESSIONS_H
#include <stdint.h>
#include "rlx/rlx.h"

typedef struct bench_sessions_result {
    int sessions;
    int identical;       /* sessions whose ids and logits equal the same session run alone */
    double together_ms;  /* wall time of the K threads */
    double alone_ms;     /* the K sessions one after another, on this thread */
    int64_t tokens;      /* per session: prompt + decoded */
} bench_sessions_result;

/* Session k prefills its own T random ids (seeded by seed and k) and decodes N greedy
 * tokens, first alone (one session after another), then all K at once from K threads;
 * every logits row of a session is compared. 0, or 1 with d set on a failed step. */
int bench_sessions(rlx_model *m, int64_t T, int64_t N, int K, uint64_t seed, bench_sessions_result *out,
                   rlx_diag *d);
#endif
