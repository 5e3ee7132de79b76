/* Tensor parallelism over ranks of this process (docs/multi-gpu.md): one model per rank,
 * each compiled through the partition pass for its rank (its slice of the weights, heads
 * and KV cache) and run on a thread of its own, started once; their collectives meet in
 * the backend under one group id. Rank 0's outputs are the caller's (every rank ends with
 * the same ones). */
#include "runtime/model.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TP_MAX_RANKS 64

/* RLX_TP_PROFILE=1: per phase, each step's host wall time and each rank's start delay and
 * run time, printed at rlx_tp_close (where a step's time goes between the ranks) */
typedef struct tp_prof {
    long n[3];
    double wall[3], start[3][TP_MAX_RANKS], run[3][TP_MAX_RANKS], tail[3];
} tp_prof;

typedef struct tp_pool tp_pool;

struct rlx_tp {
    int ranks;
    rlx_model **m;
    tp_prof *prof;
    tp_pool *pool; /* the threads of ranks 1.. (NULL for one rank) */
};

static double tp_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static void prof_print(const rlx_tp *t)
{
    static const char *ph[3] = {"forward", "prefill", "decode"};
    for (int k = 0; k < 3; k++) {
        double n = (double)t->prof->n[k];
        if (!t->prof->n[k]) continue;
        fprintf(stderr, "tp profile %s: %ld steps, %.3f ms wall each, %.3f ms from the last rank's end to the "
                "step's\n", ph[k], t->prof->n[k], t->prof->wall[k] / n, t->prof->tail[k] / n);
        for (int r = 0; r < t->ranks; r++)
            fprintf(stderr, "  rank %d: starts %.3f ms after the step, runs %.3f ms\n", r, t->prof->start[k][r] / n,
                    t->prof->run[k][r] / n);
    }
}

struct rlx_tp_session {
    rlx_tp *t;
    rlx_session **s;
    float *scratch; /* vocab floats per rank: the logits of ranks 1.. land there */
};

static int64_t next_group = 1;

static int runs_collectives(const rlx_backend *be)
{
    int ar = 0, ag = 0;
    for (const char *const *o = be->ops; o && *o; o++) {
        ar |= !strcmp(*o, "rlx.all_reduce");
        ag |= !strcmp(*o, "rlx.all_gather");
    }
    return ar && ag;
}

/* ---------------------------------------------------------------- one step on every rank */

typedef struct rank_job {
    int (*fn)(struct rank_job *j);
    int rank;
    const void *args; /* the step's arguments, shared */
    void *own;        /* the rank's own object (model or session) */
    void *sink;       /* rank 0: the caller's outputs; others: scratch */
    rlx_diag d;
    int rc;
    double t0, t1; /* RLX_TP_PROFILE */
} rank_job;

static void rank_run(rank_job *j)
{
    j->t0 = tp_now_ms();
    j->rc = j->fn(j);
    j->t1 = tp_now_ms();
}

/* Ranks 1.. run on threads started once (rlx_tp_open) and woken per step; rank 0 runs on
 * the caller's thread. A waiting side spins briefly before it sleeps: the next step (or
 * the other ranks' end) usually comes within microseconds, a futex wake-up costs tens.
 * One step at a time per rlx_tp (run_mu): every rank runs the steps in the same order,
 * so their collectives pair up even when several threads drive its sessions. */
#define TP_SPIN_MS 0.2

struct tp_pool {
    int n;
    pthread_t *th;
    int *started;
    pthread_mutex_t mu, run_mu;
    pthread_cond_t go, done;
    unsigned gen; /* bumped per step (atomic) */
    unsigned pending; /* rank threads still running this step (atomic) */
    int quit;
    rank_job *jobs;
};

typedef struct pool_arg {
    tp_pool *p;
    int rank;
} pool_arg;

/* spins until *x != not (gen) or *x == 0 (pending), for at most TP_SPIN_MS; 1 if so */
static int spin(const unsigned *x, unsigned not, int zero)
{
    double t0 = 0;
    for (unsigned i = 0;; i++) {
        unsigned v = __atomic_load_n(x, __ATOMIC_ACQUIRE);
        if (zero ? v == 0 : v != not) return 1;
        if ((i & 63) == 0) {
            double t = tp_now_ms();
            if (!t0) t0 = t;
            else if (t - t0 > TP_SPIN_MS) return 0;
        }
    }
}

static void *rank_thread(void *arg)
{
    tp_pool *p = ((pool_arg *)arg)->p;
    int r = ((pool_arg *)arg)->rank;
    free(arg);
    unsigned seen = 0;
    for (;;) {
        spin(&p->gen, seen, 0);
        pthread_mutex_lock(&p->mu);
        while (__atomic_load_n(&p->gen, __ATOMIC_ACQUIRE) == seen && !p->quit) pthread_cond_wait(&p->go, &p->mu);
        int quit = __atomic_load_n(&p->gen, __ATOMIC_ACQUIRE) == seen;
        seen = p->gen;
        rank_job *j = quit ? NULL : &p->jobs[r];
        pthread_mutex_unlock(&p->mu);
        if (!j) return NULL;
        rank_run(j);
        if (__atomic_sub_fetch(&p->pending, 1, __ATOMIC_ACQ_REL) == 0) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

static void pool_stop(tp_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    p->quit = 1;
    pthread_cond_broadcast(&p->go);
    pthread_mutex_unlock(&p->mu);
    for (int r = 1; r < p->n; r++)
        if (p->started[r]) pthread_join(p->th[r], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->run_mu);
    pthread_cond_destroy(&p->go);
    pthread_cond_destroy(&p->done);
    free(p->th);
    free(p->started);
    free(p);
}

static int pool_start(int n, tp_pool **out, rlx_diag *d)
{
    tp_pool *p = calloc(1, sizeof *p);
    if (p) {
        p->th = calloc((size_t)n, sizeof *p->th);
        p->started = calloc((size_t)n, sizeof *p->started);
    }
    if (!p || !p->th || !p->started) {
        if (p) free(p->th), free(p->started);
        free(p);
        return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    }
    p->n = n;
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->run_mu, NULL);
    pthread_cond_init(&p->go, NULL);
    pthread_cond_init(&p->done, NULL);
    int rc = 0;
    for (int r = 1; r < n && !rc; r++) {
        pool_arg *a = malloc(sizeof *a);
        if (a) *a = (pool_arg){p, r};
        int e = a ? pthread_create(&p->th[r], NULL, rank_thread, a) : ENOMEM;
        if (e) {
            free(a);
            rc = rlx_diag_set(d, RLX_ERR_INTERNAL, "tensor parallelism: the thread of rank %d did not start (%s)", r,
                              strerror(e));
        }
        p->started[r] = !e;
    }
    if (rc) {
        pool_stop(p);
        return rc;
    }
    *out = p;
    return 0;
}

/* runs jobs[1..] on the rank threads and jobs[0] here; the error of the lowest rank that
 * did not merely wait for another (RLX_ERR_DEVICE from a collective) wins */
static int on_ranks(rlx_tp *t, int phase, rank_job *jobs, int n, rlx_diag *d)
{
    tp_pool *p = t->pool;
    for (int r = 0; r < n; r++) rlx_diag_init(&jobs[r].d);
    if (p) pthread_mutex_lock(&p->run_mu);
    double t0 = tp_now_ms();
    if (p) {
        p->jobs = jobs;
        __atomic_store_n(&p->pending, (unsigned)(n - 1), __ATOMIC_RELEASE);
        pthread_mutex_lock(&p->mu);
        __atomic_add_fetch(&p->gen, 1, __ATOMIC_ACQ_REL);
        pthread_cond_broadcast(&p->go);
        pthread_mutex_unlock(&p->mu);
    }
    rank_run(&jobs[0]);
    if (p && !spin(&p->pending, 0, 1)) {
        pthread_mutex_lock(&p->mu);
        while (__atomic_load_n(&p->pending, __ATOMIC_ACQUIRE)) pthread_cond_wait(&p->done, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }
    if (t->prof) {
        double t1 = tp_now_ms(), last = 0;
        t->prof->n[phase]++;
        t->prof->wall[phase] += t1 - t0;
        for (int r = 0; r < n; r++) {
            t->prof->start[phase][r] += jobs[r].t0 - t0;
            t->prof->run[phase][r] += jobs[r].t1 - jobs[r].t0;
            last = jobs[r].t1 > last ? jobs[r].t1 : last;
        }
        t->prof->tail[phase] += t1 - last;
    }
    if (p) pthread_mutex_unlock(&p->run_mu);
    int pick = -1;
    for (int r = 0; r < n; r++)
        if (jobs[r].rc && (pick < 0 || (jobs[pick].rc == RLX_ERR_DEVICE && jobs[r].rc != RLX_ERR_DEVICE))) pick = r;
    if (pick < 0) return 0;
    if (d) *d = jobs[pick].d;
    if (n > 1 && d) { /* "rank R: " before the rank's line, which loses its end when long */
        char head[16];
        int k = snprintf(head, sizeof head, "rank %d: ", pick);
        memcpy(d->msg, head, (size_t)k);
        memcpy(d->msg + k, jobs[pick].d.msg, sizeof d->msg - (size_t)k - 1);
        d->msg[sizeof d->msg - 1] = 0;
    }
    return jobs[pick].rc;
}

RLX_API void rlx_tp_close(rlx_tp *t)
{
    if (!t) return;
    pool_stop(t->pool);
    if (t->prof) prof_print(t);
    free(t->prof);
    for (int r = 0; t->m && r < t->ranks; r++) rlx_model_close(t->m[r]);
    free(t->m);
    free(t);
}

RLX_API int rlx_tp_open(const char *dir, const rlx_model_options *opt, int ranks, rlx_tp **out, rlx_diag *d)
{
    if (!out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_tp_open: out is NULL");
    *out = NULL;
    if (ranks < 0 || ranks > TP_MAX_RANKS)
        return rlx_diag_set(d, RLX_ERR_INVALID, "tensor parallelism: %d ranks (1 to %d; 0: one per device listed)",
                            ranks, TP_MAX_RANKS);
    int rc = 0, dev[RLX_MAX_DEVICES], n_dev = 0;
    rlx_model_options o;
    rlx_model_options_init(&o);
    if (opt) o = *opt;
    /* rank r on devices[r] (a GPU backend; the CPU backend ignores it), else on the profile's
     * backend.cuda.devices[r], else on device r */
    if (o.devices && (rc = rlx_devices_parse(o.devices, dev, RLX_MAX_DEVICES, &n_dev, d)) != 0) return rc;
    if (o.devices && ranks && n_dev != ranks)
        return rlx_diag_set(d, RLX_ERR_INVALID, "--devices %s: %d device%s for %d ranks", o.devices, n_dev,
                            n_dev == 1 ? "" : "s", ranks);
    rlx_tp *t = calloc(1, sizeof *t);
    if (!t || !(t->m = calloc(TP_MAX_RANKS, sizeof *t->m))) {
        free(t);
        return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    }
    const char *pf = getenv("RLX_TP_PROFILE");
    if (pf && !strcmp(pf, "1")) t->prof = calloc(1, sizeof *t->prof);
    int64_t group = __atomic_fetch_add(&next_group, 1, __ATOMIC_RELAXED);
    t->ranks = 1; /* rank 0 first: its profile may list the devices */
    rc = rg_model_open_on(dir, &o, n_dev ? dev[0] : -1, 0, ranks ? ranks : n_dev, &t->m[0], d);
    if (!rc) {
        const int nl = t->m[0]->profile[0].backend.cuda.n_devices;
        int gpu = strcmp(t->m[0]->be->name, "cpu") != 0;
        if (!ranks) ranks = n_dev ? n_dev : gpu && nl ? nl : 1;
        if (!n_dev && gpu && nl && nl != ranks)
            rc = rlx_diag_set(d, RLX_ERR_INVALID, "profile backend.cuda.devices: %d device%s for %d ranks", nl,
                              nl == 1 ? "" : "s", ranks);
        t->m[0]->tp_ranks = ranks;
    }
    for (int r = 0; r < ranks && !rc; r++) {
        if (r) rc = rg_model_open_on(dir, &o, n_dev ? dev[r] : -1, r, ranks, &t->m[r], d);
        if (rc) break;
        t->ranks = r + 1;
        if (ranks > 1 && !runs_collectives(t->m[r]->be))
            rc = rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "backend %s: tensor parallelism needs rlx.all_reduce and "
                              "rlx.all_gather, which it does not run yet (docs/multi-gpu.md)", t->m[r]->be->name);
        t->m[r]->tp_group = group;
    }
    /* A rank's decode runs the fusable policy unless one was asked for: there the gate/up
     * GEMVs and SwiGLU become one rlx.linear_swiglu node. Left to the backend's own fusion,
     * the arena gives the rank's narrower SwiGLU output the bytes of its input and the
     * fused launch is refused: 96 more launches a token (docs/perf-notes.md). */
    for (int r = 0; r < ranks && !rc && ranks > 1 && !o.policy; r++)
        snprintf(t->m[r]->policy[1], sizeof t->m[r]->policy[1], "fusable");
    if (!rc && ranks > 1) rc = pool_start(ranks, &t->pool, d);
    if (rc) {
        rlx_tp_close(t);
        return rc;
    }
    *out = t;
    return 0;
}

RLX_API int rlx_tp_ranks(const rlx_tp *t) { return t ? t->ranks : 0; }

RLX_API int64_t rlx_tp_session_device_bytes(const rlx_tp_session *s, int rank)
{
    if (!s || rank < 0 || rank >= s->t->ranks) return -1;
    const rlx_model *m = s->t->m[rank];
    const rlx_session *ss = s->s[rank];
    int64_t n = (int64_t)m->arena_cap;
    for (uint32_t i = 0; i < m->n_w; i++) {
        int64_t e = m->w[i].device ? (int64_t)rlx_dtype_size(m->w[i].dtype) : 0;
        for (uint32_t k = 0; e && k < m->w[i].shape.ndim; k++) e *= m->w[i].shape.dims[k];
        n += e;
    }
    for (uint32_t i = 0; i < ss->st.n; i++) n += (int64_t)ss->st.s[i].bytes;
    return n;
}
RLX_API rlx_model *rlx_tp_model(rlx_tp *t, int rank) { return t && rank >= 0 && rank < t->ranks ? t->m[rank] : NULL; }

static int fwd_job(rank_job *j) { return rlx_model_forward(j->own, j->args, j->sink, &j->d); }

RLX_API int rlx_tp_forward(rlx_tp *t, const rlx_weights *inputs, rlx_st_writer *outputs, rlx_diag *d)
{
    if (!t || !inputs || !outputs) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_tp_forward: a NULL argument");
    rank_job *jobs = calloc((size_t)t->ranks, sizeof *jobs);
    if (!jobs) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    int rc = 0;
    for (int r = 0; r < t->ranks && !rc; r++) {
        jobs[r] = (rank_job){fwd_job, r, inputs, t->m[r], r ? rlx_st_writer_new() : outputs, {0}, 0, 0, 0};
        if (!jobs[r].sink) rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    }
    if (!rc) rc = on_ranks(t, 0, jobs, t->ranks, d);
    for (int r = 1; r < t->ranks; r++) rlx_st_writer_free(jobs[r].sink);
    free(jobs);
    return rc;
}

/* ---------------------------------------------------------------- sessions */

RLX_API void rlx_tp_session_free(rlx_tp_session *s)
{
    if (!s) return;
    for (int r = 0; s->s && r < s->t->ranks; r++) rlx_session_free(s->s[r]);
    free(s->s);
    free(s->scratch);
    free(s);
}

RLX_API void rlx_tp_session_reset(rlx_tp_session *s)
{
    for (int r = 0; s && r < s->t->ranks; r++) rlx_session_reset(s->s[r]);
}

RLX_API int rlx_tp_session_rewind(rlx_tp_session *s, int64_t pos, rlx_diag *d)
{
    if (!s) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_tp_session_rewind: no session");
    int rc = 0;
    for (int r = 0; r < s->t->ranks && !rc; r++) rc = rlx_session_rewind(s->s[r], pos, d);
    return rc;
}

RLX_API int rlx_tp_session_new(rlx_tp *t, int64_t ctx_len, rlx_tp_session **out, rlx_diag *d)
{
    if (!t || !out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_tp_session_new: a NULL argument");
    *out = NULL;
    rlx_tp_session *s = calloc(1, sizeof *s);
    int64_t V = t->m[0]->cfg.vocab_size > 0 ? t->m[0]->cfg.vocab_size : 1;
    if (!s || !(s->s = calloc((size_t)t->ranks, sizeof *s->s)) ||
        !(s->scratch = calloc((size_t)V * (size_t)t->ranks, sizeof *s->scratch))) {
        if (s) free(s->s);
        free(s);
        return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    }
    s->t = t;
    int rc = 0;
    for (int r = 0; r < t->ranks && !rc; r++) rc = rlx_session_new(t->m[r], ctx_len, &s->s[r], d);
    if (rc) {
        rlx_tp_session_free(s);
        return rc;
    }
    *out = s;
    return 0;
}

typedef struct step_args {
    const int32_t *ids;
    int64_t n;
    int32_t *out, *out_sink; /* generate: rank 0's ids, then n per other rank */
    float *all, *last; /* rank 0's */
    float *all_sink;   /* n x vocab per other rank when rank 0 wants every row: every rank
                        * must compile the same program, or their collectives differ */
    int64_t vocab;
} step_args;

static int prefill_job(rank_job *j)
{
    const step_args *a = j->args;
    float *all = j->rank ? (a->all ? a->all_sink + (size_t)(j->rank - 1) * (size_t)(a->n * a->vocab) : NULL) : a->all;
    float *last = j->rank ? NULL : a->last;
    return rlx_session_prefill(j->own, a->ids, a->n, all, last, &j->d);
}

static int decode_job(rank_job *j)
{
    const step_args *a = j->args;
    return rlx_session_decode(j->own, a->ids[0], j->rank ? j->sink : a->last, &j->d);
}

static int generate_job(rank_job *j)
{
    const step_args *a = j->args;
    int32_t *out = j->rank ? a->out_sink + (size_t)(j->rank - 1) * (size_t)a->n : a->out;
    return rlx_session_generate(j->own, a->ids[0], a->n, out, j->rank ? NULL : a->last, &j->d);
}

static int session_step(rlx_tp_session *s, int (*fn)(rank_job *), const step_args *a, rlx_diag *d)
{
    int n = s->t->ranks;
    size_t vocab = (size_t)(s->t->m[0]->cfg.vocab_size > 0 ? s->t->m[0]->cfg.vocab_size : 1);
    rank_job jobs[TP_MAX_RANKS];
    for (int r = 0; r < n; r++) jobs[r] = (rank_job){fn, r, a, s->s[r], s->scratch + (size_t)r * vocab, {0}, 0, 0, 0};
    return on_ranks(s->t, fn == prefill_job ? 1 : 2, jobs, n, d);
}

RLX_API int rlx_tp_session_prefill(rlx_tp_session *s, const int32_t *ids, int64_t n, float *all_logits,
                                   float *last_logits, rlx_diag *d)
{
    if (!s) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_tp_session_prefill: no session");
    int64_t V = s->t->m[0]->cfg.vocab_size;
    step_args a = {ids, n, NULL, NULL, all_logits, last_logits, NULL, V};
    if (all_logits && n > 0 && V > 0 &&
        !(a.all_sink = malloc((size_t)(s->t->ranks - 1) * (size_t)(n * V) * sizeof *a.all_sink + 1)))
        return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    int rc = session_step(s, prefill_job, &a, d);
    free(a.all_sink);
    return rc;
}

RLX_API int rlx_tp_session_decode(rlx_tp_session *s, int32_t id, float *logits, rlx_diag *d)
{
    if (!s) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_tp_session_decode: no session");
    step_args a = {&id, 1, NULL, NULL, NULL, logits, NULL, 0};
    return session_step(s, decode_job, &a, d);
}

RLX_API int rlx_tp_session_generate(rlx_tp_session *s, int32_t id, int64_t n, int32_t *out, float *logits,
                                    rlx_diag *d)
{
    if (!s) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_tp_session_generate: no session");
    if (s->t->ranks == 1) return rlx_session_generate(s->s[0], id, n, out, logits, d);
    const rlx_session *s0 = s->s[0];
    if (!out || n < 1 || n > s0->ctx - s0->pos) /* every rank refuses alike: let rank 0 say it, alone */
        return rlx_session_generate(s->s[0], id, n, out, logits, d);
    step_args a = {&id, n, out, malloc((size_t)(s->t->ranks - 1) * (size_t)n * sizeof(int32_t)), NULL, logits, NULL, 0};
    if (!a.out_sink) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    int rc = session_step(s, generate_job, &a, d);
    free(a.out_sink);
    return rc;
}

/* ---------------------------------------------------------------- --devices */

RLX_API int rlx_devices_parse(const char *s, int *out, int max, int *n, rlx_diag *d)
{
    if (!n) return rlx_diag_set(d, RLX_ERR_INVALID, "--devices: n is NULL");
    *n = 0;
    if (!s || !*s) return rlx_diag_set(d, RLX_ERR_INVALID, "--devices: empty (expected GPU ordinals such as 0,1)");
    const char *p = s;
    while (*p) {
        char *end;
        long v = *p >= '0' && *p <= '9' ? strtol(p, &end, 10) : -1;
        if (v < 0 || (*end && *end != ',') || v >= RLX_MAX_DEVICES)
            return rlx_diag_set(d, RLX_ERR_INVALID, "--devices %s: \"%.*s\" is not a device ordinal 0..%d", s,
                                (int)strcspn(p, ","), p, RLX_MAX_DEVICES - 1);
        for (int k = 0; k < *n; k++)
            if (out[k] == (int)v) return rlx_diag_set(d, RLX_ERR_INVALID, "--devices %s: device %ld twice", s, v);
        if (*n >= max) return rlx_diag_set(d, RLX_ERR_INVALID, "--devices %s: more than %d devices", s, max);
        out[(*n)++] = (int)v;
        p = *end ? end + 1 : end;
        if (*end && !*p) return rlx_diag_set(d, RLX_ERR_INVALID, "--devices %s: a trailing comma", s);
    }
    return 0;
}

/* --devices / backend.cuda.devices against the chosen backend and what its probe found */
int rg_model_check_devices(rlx_model *m, const char *devices, rlx_diag *d)
{
    int dev[RLX_MAX_DEVICES], n = 0, gpu = strcmp(m->be->name, "cpu") != 0;
    char list[64] = "";
    if (devices) {
        int rc = rlx_devices_parse(devices, dev, RLX_MAX_DEVICES, &n, d);
        if (rc) return rc;
        snprintf(list, sizeof list, "--devices %s", devices);
    } else if (gpu && m->profile[0].backend.cuda.n_devices) {
        n = m->profile[0].backend.cuda.n_devices;
        memcpy(dev, m->profile[0].backend.cuda.devices, (size_t)n * sizeof *dev);
        snprintf(list, sizeof list, "backend.cuda.devices");
    }
    if (!n) return 0;
    if (!gpu) {
        if (n == 1 || m->tp_ranks > 1) return 0; /* CPU ranks are threads: the list counts them */
        rlx_diag why;
        rlx_diag_init(&why);
        const rlx_backend *cuda = rlx_registry_backend(m->registry, "cuda", &why);
        return rlx_diag_set(d, RLX_ERR_DEVICE, "%s: no GPU backend runs here (%s)", list,
                            cuda ? "backend cpu was asked for" : why.msg);
    }
    const rlx_backend_probe *pb = rlx_registry_probe(m->registry, m->be);
    uint32_t have = pb ? pb->n_devices : 0;
    for (int k = 0; k < n; k++)
        if (dev[k] < 0 || (uint32_t)dev[k] >= have)
            return rlx_diag_set(d, RLX_ERR_DEVICE, "backend %s: %s: device %d is not present (%u device%s)",
                                m->be->name, list, dev[k], have, have == 1 ? "" : "s");
    if (n > 1 && !runs_collectives(m->be))
        return rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "backend %s: %s: tensor parallelism over GPUs is not wired into "
                            "this backend yet (docs/multi-gpu.md)", m->be->name, list);
    /* one model is one rank: the tensor-parallel runtime opens one per device */
    if (n > 1 && devices && m->tp_ranks <= 1)
        return rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "backend %s: %s: a model runs on one device; several run "
                            "tensor-parallel through rlx_tp_open (rlx-run generate, rlx-bench --devices)",
                            m->be->name, list);
    return 0;
}
