/* Tensor parallelism over ranks of this process (docs/multi-gpu.md): one model per rank,
 * each compiled through the partition pass for its rank (its slice of the weights, heads
 * and KV cache) and run on its own thread; their collectives meet in the backend under
 * one group id. Rank 0's outputs are the caller's (every rank ends with the same ones). */
#include "runtime/model.h"
#include <stdlib.h>
#include <string.h>

#define TP_MAX_RANKS 64

struct rlx_tp {
    int ranks;
    rlx_model **m;
};

struct rlx_tp_session {
    rlx_tp *t;
    rlx_session **s;
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

RLX_API void rlx_tp_close(rlx_tp *t)
{
    if (!t) return;
    for (int r = 0; t->m && r < t->ranks; r++) rlx_model_close(t->m[r]);
    free(t->m);
    free(t);
}

RLX_API int rlx_tp_open(const char *dir, const rlx_model_options *opt, int ranks, rlx_tp **out, rlx_diag *d)
{
    if (!out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_tp_open: out is NULL");
    *out = NULL;
    if (ranks < 1 || ranks > TP_MAX_RANKS)
        return rlx_diag_set(d, RLX_ERR_INVALID, "tensor parallelism: %d ranks (1 to %d)", ranks, TP_MAX_RANKS);
    rlx_tp *t = calloc(1, sizeof *t);
    if (!t || !(t->m = calloc((size_t)ranks, sizeof *t->m))) {
        free(t);
        return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    }
    t->ranks = ranks;
    int64_t group = __atomic_fetch_add(&next_group, 1, __ATOMIC_RELAXED);
    int rc = 0, dev[RLX_MAX_DEVICES], n_dev = 0;
    rlx_model_options o;
    rlx_model_options_init(&o);
    if (opt) o = *opt;
    /* rank r on devices[r] (a GPU backend; the CPU backend ignores it), else on device r */
    if (o.devices && (rc = rlx_devices_parse(o.devices, dev, RLX_MAX_DEVICES, &n_dev, d)) == 0 && n_dev != ranks)
        rc = rlx_diag_set(d, RLX_ERR_INVALID, "--devices %s: %d device%s for %d ranks", o.devices, n_dev,
                          n_dev == 1 ? "" : "s", ranks);
    o.devices = NULL; /* the ranks are this process's threads */
    for (int r = 0; r < ranks && !rc; r++) {
        rc = rg_model_open_on(dir, &o, n_dev ? dev[r] : ranks > 1 ? r : -1, &t->m[r], d);
        if (rc) break;
        if (ranks > 1 && !runs_collectives(t->m[r]->be))
            rc = rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "backend %s: tensor parallelism needs rlx.all_reduce and "
                              "rlx.all_gather, which it does not run yet (docs/multi-gpu.md)", t->m[r]->be->name);
        t->m[r]->tp_rank = r;
        t->m[r]->tp_ranks = ranks;
        t->m[r]->tp_group = group;
    }
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

/* ---------------------------------------------------------------- one step on every rank */

typedef struct rank_job {
    int (*fn)(struct rank_job *j);
    int rank;
    const void *args; /* the step's arguments, shared */
    void *own;        /* the rank's own object (model or session) */
    void *sink;       /* rank 0: the caller's outputs; others: scratch */
    rlx_diag d;
    int rc;
} rank_job;

static void *rank_main(void *arg)
{
    rank_job *j = arg;
    j->rc = j->fn(j);
    return NULL;
}

/* runs jobs[1..] on threads and jobs[0] here; the error of the lowest rank that did not
 * merely wait for another (RLX_ERR_DEVICE from a collective) wins */
static int on_ranks(rank_job *jobs, int n, rlx_diag *d)
{
    pthread_t *th = calloc((size_t)n, sizeof *th);
    int *started = calloc((size_t)n, sizeof *started);
    if (!th || !started) {
        free(th);
        free(started);
        return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    }
    for (int r = 0; r < n; r++) rlx_diag_init(&jobs[r].d);
    for (int r = 1; r < n; r++) started[r] = pthread_create(&th[r], NULL, rank_main, &jobs[r]) == 0;
    int missing = 0;
    for (int r = 1; r < n; r++) missing |= !started[r];
    if (missing) { /* the started ranks would wait on it: theirs time out, the error says why */
        jobs[0].rc = rlx_diag_set(&jobs[0].d, RLX_ERR_INTERNAL, "tensor parallelism: a rank thread did not start");
    } else {
        rank_main(&jobs[0]);
    }
    for (int r = 1; r < n; r++)
        if (started[r]) pthread_join(th[r], NULL);
    int pick = -1;
    for (int r = 0; r < n; r++)
        if (jobs[r].rc && (pick < 0 || (jobs[pick].rc == RLX_ERR_DEVICE && jobs[r].rc != RLX_ERR_DEVICE))) pick = r;
    free(th);
    free(started);
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

static int fwd_job(rank_job *j) { return rlx_model_forward(j->own, j->args, j->sink, &j->d); }

RLX_API int rlx_tp_forward(rlx_tp *t, const rlx_weights *inputs, rlx_st_writer *outputs, rlx_diag *d)
{
    if (!t || !inputs || !outputs) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_tp_forward: a NULL argument");
    rank_job *jobs = calloc((size_t)t->ranks, sizeof *jobs);
    if (!jobs) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    int rc = 0;
    for (int r = 0; r < t->ranks && !rc; r++) {
        jobs[r] = (rank_job){fwd_job, r, inputs, t->m[r], r ? rlx_st_writer_new() : outputs, {0}, 0};
        if (!jobs[r].sink) rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    }
    if (!rc) rc = on_ranks(jobs, t->ranks, d);
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
    free(s);
}

RLX_API void rlx_tp_session_reset(rlx_tp_session *s)
{
    for (int r = 0; s && r < s->t->ranks; r++) rlx_session_reset(s->s[r]);
}

RLX_API int rlx_tp_session_new(rlx_tp *t, int64_t ctx_len, rlx_tp_session **out, rlx_diag *d)
{
    if (!t || !out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_tp_session_new: a NULL argument");
    *out = NULL;
    rlx_tp_session *s = calloc(1, sizeof *s);
    if (!s || !(s->s = calloc((size_t)t->ranks, sizeof *s->s))) {
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

static int session_step(rlx_tp_session *s, int (*fn)(rank_job *), const step_args *a, rlx_diag *d)
{
    int n = s->t->ranks;
    int64_t vocab = s->t->m[0]->cfg.vocab_size;
    rank_job *jobs = calloc((size_t)n, sizeof *jobs);
    float *scratch = calloc((size_t)(vocab > 0 ? vocab : 1) * (size_t)n, sizeof *scratch);
    int rc = jobs && scratch ? 0 : rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    for (int r = 0; r < n && !rc; r++) jobs[r] = (rank_job){fn, r, a, s->s[r], scratch + (size_t)r * (size_t)vocab, {0}, 0};
    if (!rc) rc = on_ranks(jobs, n, d);
    free(jobs);
    free(scratch);
    return rc;
}

RLX_API int rlx_tp_session_prefill(rlx_tp_session *s, const int32_t *ids, int64_t n, float *all_logits,
                                   float *last_logits, rlx_diag *d)
{
    if (!s) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_tp_session_prefill: no session");
    int64_t V = s->t->m[0]->cfg.vocab_size;
    step_args a = {ids, n, all_logits, last_logits, NULL, V};
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
    step_args a = {&id, 1, NULL, logits, NULL, 0};
    return session_step(s, decode_job, &a, d);
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
        if (n == 1) return 0;
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
    if (n > 1 && devices) /* one model is one rank: the tensor-parallel runtime opens one per device */
        return rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "backend %s: %s: a model runs on one device; several run "
                            "tensor-parallel through rlx_tp_open (rlx-bench --devices)", m->be->name, list);
    return 0;
}
