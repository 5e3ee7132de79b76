/* rlx.all_reduce / rlx.all_gather between the ranks of a tensor-parallel group that run
 * in this process, one thread each (docs/multi-gpu.md): each rank publishes its input
 * buffer, waits for the others, reads them all (in rank order, so every rank gets the
 * same bits) and waits again before its input may be reused. Over one rank: a copy. */
#include "cpu_backend.h"
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TP_MAX_RANKS 64
/* a rank that never arrives failed or hangs: give up after RLX_TP_TIMEOUT_S seconds
 * (default 120), naming the group */
static int wait_s(void)
{
    const char *e = getenv("RLX_TP_TIMEOUT_S");
    int v = e && *e ? atoi(e) : 0;
    return v > 0 ? v : 120;
}

typedef struct tp_group {
    int64_t id;
    int ranks;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t gen;
    int arrived;
    int broken; /* a wait timed out: the group's step counts are lost */
    const void *buf[TP_MAX_RANKS];
    int64_t n[TP_MAX_RANKS]; /* values each rank publishes: ranks of one step must agree */
    struct tp_group *next;
} tp_group;

/* groups live as long as the plugin (ranks of later models may reuse an id) */
static pthread_mutex_t groups_mu = PTHREAD_MUTEX_INITIALIZER;
static tp_group *groups;

static tp_group *group_get(int64_t id, int ranks)
{
    pthread_mutex_lock(&groups_mu);
    tp_group *g = groups;
    while (g && g->id != id) g = g->next;
    if (!g && (g = calloc(1, sizeof *g))) {
        g->id = id;
        g->ranks = ranks;
        pthread_mutex_init(&g->mu, NULL);
        pthread_cond_init(&g->cv, NULL);
        g->next = groups;
        groups = g;
    }
    pthread_mutex_unlock(&groups_mu);
    return g;
}

/* the plugin may be unloaded (dlclose) before the process ends: free the groups then */
__attribute__((destructor)) static void groups_free(void)
{
    while (groups) {
        tp_group *g = groups;
        groups = g->next;
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
        free(g);
    }
}

/* every rank of g reaches this point (the caller holds g->mu) */
static int barrier(tp_group *g, const cpu_run *r)
{
    uint64_t gen = g->gen;
    if (++g->arrived == g->ranks) {
        g->arrived = 0;
        g->gen++;
        pthread_cond_broadcast(&g->cv);
        return 0;
    }
    int limit = wait_s();
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += limit;
    while (gen == g->gen && !g->broken)
        if (pthread_cond_timedwait(&g->cv, &g->mu, &until) == ETIMEDOUT) g->broken = 1;
    if (gen != g->gen) return 0;
    return cpu_fail(r->d, RLX_ERR_DEVICE, "%s (node %u): rank %d of %d waited %d s for the other ranks of group "
                    "%lld (one failed or hangs)", r->nd->op, r->nd->index, r->nd->flag, g->ranks, limit,
                    (long long)g->id);
}

int cpu_prep_collective(const cpu_compile_ctx *c, cpu_node *nd)
{
    if (cpu_need(c, 1, 1, 1)) return RLX_ERR_INVALID;
    const rlx_value_desc *x = cpu_val(c, 0), *o = cpu_out(c, 0);
    int gather = !strcmp(c->node->op, "rlx.all_gather");
    int64_t ranks, rank, group, axis;
    if (cpu_attr_int(c, "ranks", 1, &ranks) || cpu_attr_int(c, "rank", 0, &rank) ||
        cpu_attr_int(c, "group", 0, &group) || cpu_attr_int(c, "axis", -1, &axis))
        return RLX_ERR_INVALID;
    if (ranks < 1 || ranks > TP_MAX_RANKS || rank < 0 || rank >= ranks)
        return cpu_bad(c, "rank %lld of %lld ranks (1 to %d ranks)", (long long)rank, (long long)ranks, TP_MAX_RANKS);
    if (x->dtype != o->dtype || (!gather && x->dtype != RLX_F32))
        return cpu_bad(c, "%s", gather ? "output must have x's dtype" : "x and output must be f32");
    if (axis < 0) axis += x->shape.ndim;
    if (gather && axis != (int64_t)x->shape.ndim - 1) return cpu_bad(c, "gathers along the last axis only");
    nd->esize = cpu_dtype_size(x->dtype);
    nd->cols = gather && x->shape.ndim ? x->shape.dims[x->shape.ndim - 1] : cpu_numel(&x->shape);
    nd->rows = nd->cols ? cpu_numel(&x->shape) / nd->cols : 0;
    nd->N = ranks;
    nd->flag = (int)rank;
    nd->start = group;
    nd->bin_op = gather;
    if (cpu_numel(&o->shape) != cpu_numel(&x->shape) * (gather ? ranks : 1))
        return cpu_bad(c, "output must hold %s", gather ? "x of every rank" : "x's shape");
    return 0;
}

static void reduce(const cpu_node *nd, const void *const *buf, float *o)
{
    int64_t n = nd->rows * nd->cols;
    memcpy(o, buf[0], (size_t)n * sizeof *o);
    for (int k = 1; k < nd->N; k++) {
        const float *x = buf[k];
        for (int64_t i = 0; i < n; i++) o[i] += x[i];
    }
}

static void gather(const cpu_node *nd, const void *const *buf, char *o)
{
    size_t row = (size_t)nd->cols * nd->esize;
    for (int64_t i = 0; i < nd->rows; i++)
        for (int k = 0; k < nd->N; k++)
            memcpy(o + ((size_t)i * (size_t)nd->N + (size_t)k) * row, (const char *)buf[k] + (size_t)i * row, row);
}

int cpu_run_collective(const cpu_run *r)
{
    const cpu_node *nd = r->nd;
    const void *x = r->vp[nd->in[0]];
    void *o = r->vp[nd->out[0]];
    if (nd->N == 1) {
        memcpy(o, x, (size_t)(nd->rows * nd->cols) * nd->esize);
        return 0;
    }
    tp_group *g = group_get(nd->start, (int)nd->N);
    if (!g) return cpu_fail(r->d, RLX_ERR_NOMEM, "out of memory");
    pthread_mutex_lock(&g->mu);
    int rc = 0;
    if (g->ranks != nd->N || g->broken)
        rc = cpu_fail(r->d, RLX_ERR_DEVICE, "%s (node %u): group %lld %s", nd->op, nd->index, (long long)g->id,
                      g->broken ? "is broken: a rank did not arrive before" : "has a different number of ranks");
    if (!rc) {
        g->buf[nd->flag] = x;
        g->n[nd->flag] = nd->rows * nd->cols;
        rc = barrier(g, r);
    }
    /* ranks that compiled different programs would read past each other's buffers; every
     * rank sees the same counts, so all of them stop here together */
    for (int k = 0; !rc && k < nd->N; k++)
        if (g->n[k] != nd->rows * nd->cols)
            rc = cpu_fail(r->d, RLX_ERR_INVALID, "%s (node %u): rank %d gives %lld values, rank %d %lld (the ranks "
                          "run different programs)", nd->op, nd->index, k, (long long)g->n[k], nd->flag,
                          (long long)(nd->rows * nd->cols));
    if (!rc) { /* every input is published and stays put until the second barrier */
        pthread_mutex_unlock(&g->mu);
        if (nd->bin_op) gather(nd, g->buf, o);
        else reduce(nd, g->buf, o);
        pthread_mutex_lock(&g->mu);
        rc = barrier(g, r);
    }
    pthread_mutex_unlock(&g->mu);
    return rc;
}
