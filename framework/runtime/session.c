/* Sessions: a KV cache sized for the context asked for, prefill in length buckets
 * (padded with id 0; causal attention keeps the real rows exact), decode one token
 * at a time through a program compiled once. */
#include "runtime/exec.h"
#include "build/flow.h"
#include <stdlib.h>
#include <string.h>

RLX_API int rlx_session_new(rlx_model *m, int64_t ctx_len, rlx_session **out, rlx_diag *d)
{
    if (!out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_session_new: out is NULL");
    *out = NULL;
    if (!m) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_session_new: no model");
    if (ctx_len < 0) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_session_new: context length %lld", (long long)ctx_len);
    rlx_session *s = calloc(1, sizeof *s);
    if (!s) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    s->m = m;
    s->ctx = ctx_len ? ctx_len : rg_default_ctx(m);
    *out = s;
    return 0;
}

RLX_API void rlx_session_free(rlx_session *s)
{
    if (!s) return;
    pthread_mutex_lock(&s->m->mu);
    rg_pool_leave(s);
    rg_states_free(s->m, &s->st);
    pthread_mutex_unlock(&s->m->mu);
    free(s);
}

/* the cache rows past pos are masked by attention, so they need no clearing */
RLX_API void rlx_session_reset(rlx_session *s)
{
    if (s) s->pos = 0;
}

RLX_API int64_t rlx_session_pos(const rlx_session *s) { return s ? s->pos : 0; }

/* the rows past pos are never read again before they are rewritten (attention reads
 * keys j < pos + T only), so dropping them is moving pos */
RLX_API int rlx_session_rewind(rlx_session *s, int64_t pos, rlx_diag *d)
{
    if (!s) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_session_rewind: no session");
    if (pos < 0 || pos > s->pos)
        return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_session_rewind: position %lld outside 0..%lld",
                            (long long)pos, (long long)s->pos);
    s->pos = pos;
    return 0;
}

static int64_t bucket(int64_t n, int64_t room)
{
    int64_t b = 1;
    while (b < n) b *= 2;
    return b < room ? b : room;
}

/* the program of a step of n tokens in T rows (last: the logits of row n - 1 only), its
 * logits output, their rows and vocabulary; -2 when the flow keeps only the last row of
 * logits and has no out_row input, so it needs an exact-length program (T = n) */
static int exec_rows(rlx_session *s, int phase, int64_t n, int64_t T, int last, rg_exec **e,
                     const rlx_value_desc **lo, int64_t *rows, int64_t *vocab, rlx_diag *d)
{
    rg_variant v;
    memset(&v, 0, sizeof v);
    v.last_row = last;
    int rc = rg_model_exec_v(s->m, phase, T, s->ctx, &v, e, d);
    if (rc) return rc;
    if (!(*lo = rg_exec_find_io(*e, "logits", 1)))
        return rlx_diag_set(d, RLX_ERR_INVALID, "flow %s: emits no output named logits",
                            s->m->flow[phase == RLX_PHASE_DECODE]->name);
    int64_t V = (*lo)->shape.ndim ? (*lo)->shape.dims[(*lo)->shape.ndim - 1] : 1;
    *vocab = V;
    *rows = V ? rlx_shape_numel(&(*lo)->shape) / V : 0;
    return *rows != T && !(*rows == 1 && (n == T || rg_exec_find_io(*e, "out_row", 0))) ? -2 : 0;
}

/* the program a step runs: T rows as asked, or exactly n where the flow needs that (*T
 * then says so). Call with s->m->mu held. */
static int step_exec(rlx_session *s, int phase, int64_t n, int64_t *T, int last, rg_exec **e,
                     const rlx_value_desc **lo, int64_t *rows, int64_t *vocab, rlx_diag *d)
{
    int rc = exec_rows(s, phase, n, *T, last, e, lo, rows, vocab, d);
    if (rc == -2) rc = exec_rows(s, phase, n, *T = n, last, e, lo, rows, vocab, d);
    return rc;
}

/* one step at a time per model: sessions on other threads wait here */
static void step_lock(rlx_session *s)
{
    pthread_mutex_lock(&s->m->mu);
    s->m->run_states = &s->st; /* a compile counts only the states this session lacks */
}

static void step_unlock(rlx_session *s)
{
    s->m->run_states = NULL;
    pthread_mutex_unlock(&s->m->mu);
}

/* runs *T positions from s->pos (ids padded to *T, or *T = n: step_exec); logits rows come
 * back in rows: all *T, or with last only row n - 1 (the program computes that row alone).
 * one_row set and the output one row: the logits go there (*logits NULL), with no copy
 * between (a decode step's host time is time the device waits) */
static int run_locked(rlx_session *s, int phase, const int32_t *ids, int64_t n, int64_t *Tp, int last,
                      float **logits, float *one_row, int64_t *rows, int64_t *vocab, rlx_diag *d)
{
    rlx_model *m = s->m;
    rg_exec *e;
    const rlx_value_desc *lo;
    *logits = NULL;
    int rc = step_exec(s, phase, n, Tp, last, &e, &lo, rows, vocab, d);
    if (rc) return rc;
    int64_t T = *Tp;
    int32_t *buf = calloc((size_t)(2 * T + 1), sizeof *buf);
    float *dst = one_row && *rows == 1 ? one_row
                                       : (*logits = malloc((size_t)rlx_shape_numel(&lo->shape) * sizeof(float) + 1));
    if (!buf || !dst) {
        free(buf);
        return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    }
    int32_t *pids = buf, *positions = buf + T, pos = (int32_t)s->pos, row = (int32_t)(n - 1);
    for (int64_t t = 0; t < T; t++) {
        pids[t] = t < n ? ids[t] : 0;
        positions[t] = (int32_t)(s->pos + t);
    }
    rg_io io[4] = {{"input_ids", pids, NULL}, {"positions", positions, "the session's token positions"},
                   {"pos", &pos, "the session's cache position"}, {"out_row", &row, "the session's last row"}};
    rc = rg_exec_run_read(m, e, &s->st, io, 4, "logits", dst, d);
    free(buf);
    return rc;
}

static int run(rlx_session *s, int phase, const int32_t *ids, int64_t n, int64_t *T, int last, float **logits,
               float *one_row, int64_t *rows, int64_t *vocab, rlx_diag *d)
{
    step_lock(s);
    int rc = run_locked(s, phase, ids, n, T, last, logits, one_row, rows, vocab, d);
    step_unlock(s);
    return rc;
}

RLX_API int rlx_session_prefill(rlx_session *s, const int32_t *ids, int64_t n, float *all_logits,
                                float *last_logits, rlx_diag *d)
{
    if (!s || !ids || n < 1) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_session_prefill: no tokens");
    if (s->pos + n > s->ctx)
        return rlx_diag_set(d, RLX_ERR_INVALID, "session: %lld tokens at position %lld exceed the context length %lld",
                            (long long)n, (long long)s->pos, (long long)s->ctx);
    float *lg = NULL;
    int64_t rows = 0, V = 0, T = bucket(n, s->ctx - s->pos);
    int last = !all_logits; /* then the logits of the other rows are never computed */
    int rc = run(s, RLX_PHASE_PREFILL, ids, n, &T, last, &lg, NULL, &rows, &V, d);
    if (rc) {
        free(lg);
        return rc;
    }
    if (all_logits) {
        if (rows != T) {
            free(lg);
            return rlx_diag_set(d, RLX_ERR_INVALID, "session: the prefill flow outputs only the last row of logits");
        }
        memcpy(all_logits, lg, (size_t)(n * V) * sizeof(float));
    }
    if (last_logits) memcpy(last_logits, lg + (rows == 1 ? 0 : (n - 1) * V), (size_t)V * sizeof(float));
    free(lg);
    s->pos += n;
    return 0;
}

RLX_API int rlx_session_program(rlx_session *s, int phase, int64_t pos, int64_t n, int all_logits,
                                rlx_program_info *info, FILE *dump, rlx_diag *d)
{
    if (!s) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_session_program: no session");
    if (phase != RLX_PHASE_PREFILL && phase != RLX_PHASE_DECODE)
        return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_session_program: phase %d is not prefill or decode", phase);
    const int batch = phase == RLX_PHASE_DECODE && n > 1; /* n sessions a step, one row each */
    if (n < 1 || n > INT32_MAX || pos < 0 || pos + (batch ? 1 : n) > s->ctx)
        return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_session_program: %lld tokens at position %lld outside the "
                            "context length %lld", (long long)n, (long long)pos, (long long)s->ctx);
    /* as rlx_session_prefill, rlx_session_decode and rlx_session_decode_batch choose it */
    int64_t T = phase == RLX_PHASE_DECODE ? n : bucket(n, s->ctx - pos), rows = T, V;
    int last = phase == RLX_PHASE_PREFILL && !all_logits;
    rg_exec *e;
    const rlx_value_desc *lo;
    step_lock(s);
    int rc;
    if (batch) { /* a pool of n slots, new: the compile counts all of it */
        s->m->run_states = NULL;
        rc = rg_batch_exec(s->m, n, n, s->ctx, &e, d);
    } else {
        rc = step_exec(s, phase, n, &T, last, &e, &lo, &rows, &V, d);
    }
    if (!rc) {
        rlx_program_info pi = {T, s->ctx, rows == 1 && T > 1, e->plan.n_nodes, 0, 0, 0};
        rg_program_flops(&e->prog, pos, &pi.matmul_flops, &pi.attention_flops);
        pi.flops = pi.matmul_flops + pi.attention_flops;
        if (dump) {
            rg_exec_dump(e, dump);
            fprintf(dump, "flops at position %lld: %llu (matmul %llu, attention %llu; elementwise not counted)\n",
                    (long long)pos, (unsigned long long)pi.flops, (unsigned long long)pi.matmul_flops,
                    (unsigned long long)pi.attention_flops);
        }
        if (info) *info = pi;
    }
    step_unlock(s);
    return rc;
}

RLX_API int rlx_session_decode(rlx_session *s, int32_t id, float *logits, rlx_diag *d)
{
    if (!s) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_session_decode: no session");
    if (s->pos + 1 > s->ctx)
        return rlx_diag_set(d, RLX_ERR_INVALID, "session: position %lld is past the context length %lld",
                            (long long)s->pos, (long long)s->ctx);
    float *lg = NULL;
    int64_t rows = 0, V = 0, T = 1;
    int rc = run(s, RLX_PHASE_DECODE, &id, 1, &T, 0, &lg, logits, &rows, &V, d);
    if (!rc && logits && lg) memcpy(logits, lg, (size_t)V * sizeof(float));
    free(lg);
    if (!rc) s->pos++;
    return rc;
}

RLX_API int rlx_session_generate(rlx_session *s, int32_t id, int64_t n, int32_t *out, float *logits, rlx_diag *d)
{
    if (!s || !out || n < 1)
        return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_session_generate: %s", !s ? "no session" : !out ? "out is NULL" : "n < 1");
    if (n > s->ctx - s->pos || s->pos + n > INT32_MAX)
        return rlx_diag_set(d, RLX_ERR_INVALID, "session: %lld tokens at position %lld exceed the context length %lld",
                            (long long)n, (long long)s->pos, (long long)s->ctx);
    rg_variant v;
    memset(&v, 0, sizeof v);
    v.greedy = 1;
    rg_exec *e;
    step_lock(s);
    int rc = rg_model_exec_v(s->m, RLX_PHASE_DECODE, 1, s->ctx, &v, &e, d);
    if (!rc) rc = rg_states_ensure(s->m, e, &s->st, d);
    int32_t pos = (int32_t)s->pos;
    rg_io first[3] = {{"rlx.next_id", &id, "the id rlx_session_generate was given"},
                      {"rlx.pos", &pos, NULL}, {"rlx.positions", &pos, NULL}};
    for (int i = 0; i < 3 && !rc; i++)
        if (i == 0 || rg_exec_find_state(e, first[i].name)) rc = rg_exec_state_set(s->m, e, &s->st, &first[i], d);
    /* each step reads the id and positions the step before wrote: the host only queues */
    for (int64_t k = 0; k < n && !rc; k++) rc = rg_exec_launch(s->m, e, &s->st, NULL, 0, d);
    rc = rg_exec_finish(s->m, rc, d);
    if (!rc)
        rc = rg_exec_state_get(s->m, e, &s->st, "rlx.generated", (size_t)s->pos * sizeof *out, out,
                               (size_t)n * sizeof *out, d);
    if (!rc && logits) rc = rg_exec_output(s->m, e, "logits", logits, d);
    if (!rc) s->pos += n;
    step_unlock(s);
    return rc;
}
