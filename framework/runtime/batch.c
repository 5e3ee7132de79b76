/* Batched decode: sessions of one model step together, one program over B rows (one
 * GEMM over B rows per matmul). Their KV caches live in a pool the model owns, one slot
 * per session ([slots, S, ...] per state): a session joins at its first batched step
 * (its cached rows are copied into its slot once) and from then on reads and writes its
 * slot whether it steps alone or in a batch, so batching costs no copies per step. The
 * program is the decode flow built with batch rows (build/batch.c), so any flow that
 * keeps its sequence in cache states batches. */
#include "runtime/exec.h"
#include "build/flow.h"
#include <stdlib.h>
#include <string.h>

typedef struct rg_pool {
    int64_t cap, ctx;    /* slots, positions per slot */
    rg_states st;        /* [cap, ctx, ...] per state */
    rlx_session **owner; /* [cap] */
} rg_pool;

/* one slot's bytes of a pool state */
static size_t slice_bytes(const rg_pool *p, const rg_state *ps) { return ps->bytes / (size_t)p->cap; }

/* n bytes from src to dst, both the backend's: in place on host memory, else through a
 * host buffer (the ABI has no device-to-device copy; this runs once per join or growth) */
static int dev_copy(rlx_model *m, void *dst, const void *src, size_t n, rlx_diag *d)
{
    if (!n) return 0;
    if (m->be->flags & RLX_BACKEND_HOST_MEMORY || !m->be->download || !m->be->upload) {
        memmove(dst, src, n);
        return 0;
    }
    const size_t chunk = (size_t)64 << 20;
    void *buf = malloc(n < chunk ? n : chunk);
    if (!buf) return rlx_diag_set(d, RLX_ERR_NOMEM, "batched decode: out of memory for a %zu-byte copy", n);
    int rc = 0;
    for (size_t o = 0; o < n && !rc; o += chunk) {
        size_t k = n - o < chunk ? n - o : chunk;
        rc = m->be->download(m->be_ctx, buf, (const char *)src + o, k, d);
        if (!rc) rc = m->be->upload(m->be_ctx, (char *)dst + o, buf, k, d);
    }
    free(buf);
    return rc;
}

static rg_state *find_state(rg_states *st, const char *name)
{
    uint32_t i = rg_states_find(st, name, 0);
    return i < st->n ? &st->s[i] : NULL;
}

/* s's states become borrowed views of slot k: every pool state, its cached rows copied in */
static int join(rlx_model *m, rg_pool *p, rlx_session *s, int64_t k, rlx_diag *d)
{
    rg_state *v = calloc(p->st.n + 1, sizeof *v);
    if (!v) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    int rc = 0;
    uint32_t n = 0;
    for (uint32_t i = 0; i < p->st.n && !rc; i++, n++) {
        const rg_state *ps = &p->st.s[i];
        rg_state *o = &v[i];
        o->dtype = ps->dtype;
        o->shape.ndim = ps->shape.ndim - 1;
        memcpy(o->shape.dims, ps->shape.dims + 1, o->shape.ndim * sizeof o->shape.dims[0]);
        o->bytes = slice_bytes(p, ps);
        o->ptr = (char *)ps->ptr + (size_t)k * o->bytes;
        o->borrowed = 1;
        if (!(o->name = strdup(ps->name))) rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
        const rg_state *own = rc ? NULL : find_state(&s->st, ps->name);
        if (own && own->bytes != o->bytes)
            rc = rlx_diag_set(d, RLX_ERR_INVALID, "batched decode: state %s has %zu bytes in the session, %zu in a slot",
                              ps->name, own->bytes, o->bytes);
        /* rows past pos are never read before they are written */
        if (own && !rc) rc = dev_copy(m, o->ptr, own->ptr, (size_t)s->pos * (o->bytes / (size_t)p->ctx), d);
    }
    if (rc) {
        rg_states tmp = {v, n};
        rg_states_free(m, &tmp);
        return rc;
    }
    rg_states_free(m, &s->st);
    s->st.s = v;
    s->st.n = p->st.n;
    s->slot1 = k + 1;
    p->owner[k] = s;
    return 0;
}

void rg_pool_leave(rlx_session *s)
{
    rg_pool *p = s->m->pool;
    if (!s->slot1 || !p) return;
    p->owner[s->slot1 - 1] = NULL;
    s->slot1 = 0;
}

void rg_pool_free(rlx_model *m)
{
    rg_pool *p = m->pool;
    if (!p) return;
    for (int64_t k = 0; k < p->cap; k++)
        if (p->owner[k]) { /* a session that outlives its model keeps nothing of the pool */
            p->owner[k]->slot1 = 0;
            for (uint32_t i = 0; i < p->owner[k]->st.n; i++) p->owner[k]->st.s[i].ptr = NULL;
        }
    rg_states_free(m, &p->st);
    free(p->owner);
    free(p);
    m->pool = NULL;
}

/* A pool of cap slots whose states are those of e; the members of old (if any) keep
 * their slot numbers, their bytes copied over. */
static int grow(rlx_model *m, rg_exec *e, int64_t cap, int64_t ctx, rlx_diag *d)
{
    rg_pool *np = calloc(1, sizeof *np), *old = m->pool;
    if (!np || !(np->owner = calloc((size_t)cap, sizeof *np->owner))) {
        free(np);
        return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    }
    np->cap = cap;
    np->ctx = ctx;
    int rc = rg_states_ensure(m, e, &np->st, d);
    for (uint32_t i = 0; old && !rc && i < old->st.n; i++) {
        const rg_state *os = &old->st.s[i];
        rg_state *ns = find_state(&np->st, os->name);
        if (!ns) rc = rlx_diag_set(d, RLX_ERR_INVALID, "batched decode: state %s is not in the batched program", os->name);
        else rc = dev_copy(m, ns->ptr, os->ptr, os->bytes, d); /* slot-major: old slots are a prefix */
    }
    if (rc) {
        rg_states_free(m, &np->st);
        free(np->owner);
        free(np);
        return rc;
    }
    for (int64_t k = 0; old && k < old->cap; k++) {
        rlx_session *s = old->owner[k];
        if (!s) continue;
        np->owner[k] = s;
        for (uint32_t i = 0; i < s->st.n; i++) {
            rg_state *ns = find_state(&np->st, s->st.s[i].name);
            s->st.s[i].ptr = ns ? (char *)ns->ptr + (size_t)k * slice_bytes(np, ns) : NULL;
        }
    }
    if (old) {
        rg_states_free(m, &old->st);
        free(old->owner);
        free(old);
    }
    m->pool = np;
    return 0;
}

int rg_batch_exec(rlx_model *m, int64_t B, int64_t cap, int64_t ctx, rg_exec **e, rlx_diag *d)
{
    rg_variant v;
    memset(&v, 0, sizeof v);
    v.batch = cap;
    return rg_model_exec_v(m, RLX_PHASE_DECODE, B, ctx, &v, e, d);
}

static int check_args(rlx_session **s, int B, const int32_t *ids, rlx_diag *d)
{
    if (!s || B < 1 || !ids)
        return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_session_decode_batch: no sessions or ids (B = %d)", B);
    for (int b = 0; b < B; b++) {
        if (!s[b]) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_session_decode_batch: session %d is NULL", b);
        if (s[b]->m != s[0]->m)
            return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_session_decode_batch: session %d belongs to another model", b);
        if (s[b]->ctx != s[0]->ctx)
            return rlx_diag_set(d, RLX_ERR_INVALID,
                                "rlx_session_decode_batch: session %d has context %lld, session 0 %lld (one pool, one length)",
                                b, (long long)s[b]->ctx, (long long)s[0]->ctx);
        if (s[b]->pos + 1 > s[b]->ctx)
            return rlx_diag_set(d, RLX_ERR_INVALID, "session %d: position %lld is past the context length %lld", b,
                                (long long)s[b]->pos, (long long)s[b]->ctx);
        for (int c = 0; c < b; c++)
            if (s[c] == s[b])
                return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_session_decode_batch: sessions %d and %d are the same", c, b);
    }
    return 0;
}

static int step_locked(rlx_session **s, int B, const int32_t *ids, float *logits, rlx_diag *d)
{
    rlx_model *m = s[0]->m;
    int64_t ctx = s[0]->ctx, joining = 0, used = 0;
    rg_pool *p = m->pool;
    if (p && p->ctx != ctx) {
        for (int64_t k = 0; k < p->cap; k++) used += p->owner[k] != NULL;
        if (used)
            return rlx_diag_set(d, RLX_ERR_INVALID,
                                "rlx_session_decode_batch: context %lld, but sessions of context %lld hold the batch slots",
                                (long long)ctx, (long long)p->ctx);
        rg_pool_free(m);
        p = NULL;
    }
    for (int b = 0; b < B; b++) joining += !s[b]->slot1;
    for (int64_t k = 0; p && k < p->cap; k++) used += p->owner[k] != NULL;
    int64_t cap = p ? p->cap : 0;
    if (used + joining > cap) cap = used + joining > 2 * cap ? used + joining : 2 * cap;
    rg_exec *e;
    m->run_states = p && p->cap == cap ? &p->st : NULL; /* a compile counts the pool only when it is new */
    int rc = rg_batch_exec(m, B, cap, ctx, &e, d);
    m->run_states = NULL;
    if (!rc && (!p || cap != p->cap)) rc = grow(m, e, cap, ctx, d);
    p = m->pool;
    for (int b = 0, k = 0; b < B && !rc; b++) {
        if (s[b]->slot1) continue;
        while (p->owner[k]) k++;
        rc = join(m, p, s[b], k, d);
    }
    if (rc) return rc;
    const rlx_value_desc *lo = rg_exec_find_io(e, "logits", 1);
    if (!lo || lo->dtype != RLX_F32 || !lo->shape.ndim || rlx_shape_numel(&lo->shape) % B)
        return rlx_diag_set(d, RLX_ERR_INVALID, "flow %s: batched decode needs F32 logits with one row per sequence",
                            m->flow[1]->name);
    int32_t *buf = malloc((size_t)(2 * B) * sizeof *buf + 1);
    if (!buf) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    int32_t *pos = buf, *slots = buf + B;
    for (int b = 0; b < B; b++) {
        pos[b] = (int32_t)s[b]->pos;
        slots[b] = (int32_t)(s[b]->slot1 - 1);
    }
    rg_io io[4] = {{"input_ids", ids, NULL}, {"positions", pos, "the sessions' token positions"},
                   {"pos", pos, "the sessions' cache positions"}, {"batch_slots", slots, "the sessions' cache slots"}};
    rc = rg_exec_run_read(m, e, &p->st, io, 4, "logits", logits, d);
    free(buf);
    if (!rc)
        for (int b = 0; b < B; b++) s[b]->pos++;
    return rc;
}

RLX_API int rlx_session_decode_batch(rlx_session **s, int B, const int32_t *ids, float *logits, rlx_diag *d)
{
    int rc = check_args(s, B, ids, d);
    if (rc) return rc;
    rlx_model *m = s[0]->m;
    pthread_mutex_lock(&m->mu);
    rc = step_locked(s, B, ids, logits, d);
    pthread_mutex_unlock(&m->mu);
    return rc;
}
