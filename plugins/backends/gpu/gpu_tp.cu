/* rlx.all_reduce / rlx.all_gather over NCCL / RCCL (gpu_tp.h). */
#include "gpu_tp.h"
#include "nccl_loader.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(RLX_GPU_HIP)
#define gpuMemcpy2DAsync hipMemcpy2DAsync
#define gpuDeviceCanAccessPeer hipDeviceCanAccessPeer
#define gpuStreamQuery hipStreamQuery
#define gpuErrorNotReady hipErrorNotReady
#define TP_ROCM 1
#else
#define gpuMemcpy2DAsync cudaMemcpy2DAsync
#define gpuDeviceCanAccessPeer cudaDeviceCanAccessPeer
#define gpuStreamQuery cudaStreamQuery
#define gpuErrorNotReady cudaErrorNotReady
#define TP_ROCM 0
#endif

#define TP_MAX_RANKS 64

/* a rank that never arrives, or a collective that never completes, failed or hangs: give
 * up after RLX_TP_TIMEOUT_S seconds (default 120), naming the group */
static int wait_s(void)
{
    const char *e = getenv("RLX_TP_TIMEOUT_S");
    int v = e && *e ? atoi(e) : 0;
    return v > 0 ? v : 120;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct tp_group {
    int64_t id;
    int ranks, joined, ready, refs;
    char err[256]; /* set when the communicators could not be made */
    int dev[TP_MAX_RANKS];
    unsigned char in[TP_MAX_RANKS];
    rlx_nccl_comm comm[TP_MAX_RANKS];
    int aborted;                    /* (atomic) a rank failed: every collective of the group stops */
    char why[256];                  /* the first failure, for the other ranks' lines */
    unsigned char gone[TP_MAX_RANKS]; /* communicators aborted (freed by NCCL) */
    /* programs' first steps: every rank publishes its collectives, the last compares */
    uint64_t chk_gen;
    int chk_in;
    int64_t chk_n[TP_MAX_RANKS], chk_vals[TP_MAX_RANKS];
    uint64_t chk_sig[TP_MAX_RANKS];
    /* symmetric windows: every rank says whether its step succeeded, all go on or none */
    uint64_t ok_gen;
    int ok_in, ok_bad, ok_last;
    struct tp_group *next;
} tp_group;

/* a group's communicators live while a compiled program of one of its ranks does */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static tp_group *groups;
static rlx_nccl nccl;
static int nccl_state; /* 0 not tried, 1 loaded, -1 failed (nccl_err says why) */
static char nccl_err[256];

static int64_t attr_i(const rlx_node_desc *n, const char *name, int64_t def)
{
    for (uint32_t i = 0; i < n->n_attrs; i++)
        if (n->attrs[i].name && !strcmp(n->attrs[i].name, name))
            return n->attrs[i].kind == RLX_ATTR_FLOAT ? (int64_t)n->attrs[i].f : n->attrs[i].i;
    return def;
}

static int64_t count(const rlx_value_desc *v)
{
    int64_t n = 1;
    for (uint32_t i = 0; i < v->shape.ndim; i++)
        n *= v->shape.dims[i];
    return n;
}

static int esz(int dt) { return dt == RLX_F32 || dt == RLX_I32 ? 4 : dt == RLX_F16 || dt == RLX_BF16 ? 2 : 0; }

int gpu_coll_plan(const rlx_node_desc *nd, const rlx_value_desc *x, const rlx_value_desc *y, int gather,
                  int64_t *rows, int64_t *cols, gpu_tp_link *l, char *err, size_t len)
{
    int64_t ranks = attr_i(nd, "ranks", 1), rank = attr_i(nd, "rank", 0), axis = attr_i(nd, "axis", -1);
    memset(l, 0, sizeof *l);
    if (ranks < 1 || ranks > TP_MAX_RANKS || rank < 0 || rank >= ranks) {
        snprintf(err, len, "rank %lld of %lld ranks (1 to %d ranks)", (long long)rank, (long long)ranks, TP_MAX_RANKS);
        return -1;
    }
    if (x->dtype != y->dtype || !esz(x->dtype) || (!gather && x->dtype == RLX_I32)) {
        snprintf(err, len, "x and output must have one dtype (%s)", gather ? "f32, f16, bf16 or i32" : "f32, f16 or bf16");
        return -1;
    }
    if (axis < 0)
        axis += x->shape.ndim;
    if (gather && axis != (int64_t)x->shape.ndim - 1) {
        snprintf(err, len, "gathers along the last axis only");
        return -1;
    }
    *cols = gather && x->shape.ndim ? x->shape.dims[x->shape.ndim - 1] : count(x);
    *rows = *cols ? count(x) / *cols : 0;
    if (count(y) != count(x) * (gather ? ranks : 1)) {
        snprintf(err, len, "output must hold %s", gather ? "x of every rank" : "x's shape");
        return -1;
    }
    l->group = attr_i(nd, "group", 0);
    l->rank = (int)rank;
    l->ranks = (int)ranks;
    return 0;
}

static tp_group *group_get(int64_t id, int ranks)
{
    tp_group *g = groups;
    while (g && g->id != id)
        g = g->next;
    if (!g && (g = (tp_group *)calloc(1, sizeof *g))) {
        g->id = id;
        g->ranks = ranks;
        g->next = groups;
        groups = g;
    }
    return g;
}

/* the last rank to arrive makes every rank's communicator (mu held) */
static void make_comms(tp_group *g, int my_device)
{
    if (!nccl_state) {
        nccl_state = rlx_nccl_load(&nccl, TP_ROCM, nccl_err, sizeof nccl_err) ? -1 : 1;
        /* every connection at init: a first collective inside a graph capture must not connect */
        setenv("NCCL_RUNTIME_CONNECT", "0", 0);
    }
    if (nccl_state < 0)
        snprintf(g->err, sizeof g->err, "%s", nccl_err);
    else if (rlx_nccl_init_all(&nccl, g->comm, g->ranks, g->dev, g->err, sizeof g->err) == 0)
        g->ready = 1;
    (void)gpuSetDevice(my_device); /* ncclCommInitAll visits every device */
    if (!g->ready && !g->err[0])
        snprintf(g->err, sizeof g->err, "no communicators");
}

int gpu_tp_connect(gpu_tp_link *l, char *err, size_t len)
{
    if (l->comm && __atomic_load_n(&((tp_group *)l->grp)->aborted, __ATOMIC_ACQUIRE)) {
        pthread_mutex_lock(&mu);
        snprintf(err, len, "group %lld was stopped: %s", (long long)l->group, ((tp_group *)l->grp)->why);
        pthread_mutex_unlock(&mu);
        return -1;
    }
    if (l->comm || l->ranks == 1)
        return 0;
    pthread_mutex_lock(&mu);
    tp_group *g = group_get(l->group, l->ranks);
    int rc = 0;
    if (!g) {
        snprintf(err, len, "out of memory");
        rc = -1;
    } else if (g->ranks != l->ranks) {
        snprintf(err, len, "group %lld has %d ranks, this rank counts %d", (long long)l->group, g->ranks, l->ranks);
        rc = -1;
    } else if (g->in[l->rank] && g->dev[l->rank] != l->device) {
        snprintf(err, len, "group %lld: rank %d is on device %d and %d", (long long)l->group, l->rank,
                 g->dev[l->rank], l->device);
        rc = -1;
    }
    if (!rc && !g->in[l->rank]) {
        g->in[l->rank] = 1;
        g->dev[l->rank] = l->device;
        if (++g->joined == g->ranks) {
            make_comms(g, l->device);
            pthread_cond_broadcast(&cv);
        }
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wait_s();
    while (!rc && !g->ready && !g->err[0])
        if (pthread_cond_timedwait(&cv, &mu, &until) == ETIMEDOUT) {
            snprintf(err, len, "rank %d of %d waited %d s for the other ranks of group %lld (one failed or hangs)",
                     l->rank, l->ranks, wait_s(), (long long)l->group);
            rc = -1;
        }
    if (!rc && g->err[0]) {
        snprintf(err, len, "group %lld over %d devices: %s", (long long)l->group, g->ranks, g->err);
        rc = -1;
    }
    if (!rc) {
        l->comm = g->comm[l->rank];
        l->grp = g;
        g->refs++;
    }
    pthread_mutex_unlock(&mu);
    return rc;
}

/* marks g stopped (the first reason wins) and aborts rank's communicator (mu held) */
static void stop_locked(tp_group *g, int rank, const char *why)
{
    if (!g->aborted) {
        snprintf(g->why, sizeof g->why, "%s", why);
        __atomic_store_n(&g->aborted, 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&cv);
    }
    if (!g->gone[rank]) {
        g->gone[rank] = 1;
        (void)gpuSetDevice(g->dev[rank]);
        (void)nccl.comm_abort(g->comm[rank]);
    }
}

void gpu_tp_fail(const gpu_tp_link *l, const char *why)
{
    if (!l->comm)
        return;
    char line[256];
    snprintf(line, sizeof line, "rank %d failed: %s", l->rank, why);
    pthread_mutex_lock(&mu);
    stop_locked((tp_group *)l->grp, l->rank, line);
    pthread_mutex_unlock(&mu);
    (void)gpuSetDevice(l->device);
}

int gpu_tp_check_program(const gpu_tp_link *l, int64_t n_coll, int64_t n_vals, uint64_t sig, char *err, size_t len)
{
    tp_group *g = (tp_group *)l->grp;
    if (!l->comm || l->ranks == 1)
        return 0;
    pthread_mutex_lock(&mu);
    uint64_t gen = g->chk_gen;
    g->chk_n[l->rank] = n_coll;
    g->chk_vals[l->rank] = n_vals;
    g->chk_sig[l->rank] = sig;
    if (++g->chk_in == g->ranks) {
        g->chk_in = 0;
        g->chk_gen++;
        pthread_cond_broadcast(&cv);
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wait_s();
    int rc = 0;
    while (gen == g->chk_gen && !g->aborted)
        if (pthread_cond_timedwait(&cv, &mu, &until) == ETIMEDOUT) {
            char line[256];
            snprintf(line, sizeof line, "rank %d of %d waited %d s for the other ranks of group %lld at a program's "
                     "first step (one failed, hangs or runs another program)", l->rank, l->ranks, wait_s(),
                     (long long)l->group);
            snprintf(err, len, "%s", line);
            stop_locked(g, l->rank, line);
            rc = -1;
            break;
        }
    if (!rc && gen == g->chk_gen) {
        snprintf(err, len, "group %lld was stopped: %s", (long long)l->group, g->why);
        rc = -1;
    }
    for (int r = 0; !rc && r < g->ranks; r++) /* the published values stay until the next round */
        if (g->chk_sig[r] != sig) {
            snprintf(err, len, "rank %d's program has %lld collectives of %lld values, rank %d's %lld of %lld: the "
                     "ranks run different programs, so their NCCL calls would not pair up", l->rank,
                     (long long)n_coll, (long long)n_vals, r, (long long)g->chk_n[r], (long long)g->chk_vals[r]);
            rc = -1;
        }
    pthread_mutex_unlock(&mu);
    (void)gpuSetDevice(l->device);
    return rc;
}

int gpu_tp_wait(gpuStream_t s, const gpu_tp_link *l, char *err, size_t len)
{
    if (!l->comm || l->ranks == 1)
        return 0;
    tp_group *g = (tp_group *)l->grp;
    double t0 = now_s(), limit = wait_s();
    for (unsigned i = 0;; i++) {
        gpuError_t e = gpuStreamQuery(s);
        if (e == gpuSuccess)
            return 0;
        char line[256] = "";
        int async = RLX_NCCL_SUCCESS;
        if (e != gpuErrorNotReady) {
            snprintf(line, sizeof line, "rank %d: %s", l->rank, gpuGetErrorString(e));
            (void)gpuGetLastError();
        } else if (nccl.comm_get_async_error((rlx_nccl_comm)l->comm, &async) == RLX_NCCL_SUCCESS &&
                   async != RLX_NCCL_SUCCESS && async != RLX_NCCL_IN_PROGRESS) {
            snprintf(line, sizeof line, "rank %d: %s: %s", l->rank, nccl.name, nccl.get_error_string(async));
        } else if (now_s() - t0 > limit) {
            snprintf(line, sizeof line, "rank %d: its collectives did not complete within %d s (a rank failed or "
                     "hangs, or the ranks run different programs)", l->rank, (int)limit);
        }
        if (line[0] || __atomic_load_n(&g->aborted, __ATOMIC_ACQUIRE)) {
            pthread_mutex_lock(&mu);
            stop_locked(g, l->rank, line[0] ? line : g->why);
            snprintf(err, len, "group %lld stopped: %s", (long long)l->group, g->why);
            pthread_mutex_unlock(&mu);
            (void)gpuSetDevice(l->device);
            return -1;
        }
        if (i > 2000) { /* past the usual step: poll gently */
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
        }
    }
}

void gpu_tp_release(gpu_tp_link *l)
{
    if (!l->comm)
        return;
    l->comm = NULL;
    pthread_mutex_lock(&mu);
    tp_group **pg = &groups;
    while (*pg && (*pg)->id != l->group)
        pg = &(*pg)->next;
    tp_group *g = *pg;
    if (g && --g->refs == 0) { /* every rank's programs are gone: so are its collectives */
        *pg = g->next;
        for (int r = 0; r < g->ranks; r++) {
            (void)gpuSetDevice(g->dev[r]);
            if (g->aborted && !g->gone[r]) /* a stopped group may still have a collective pending */
                (void)nccl.comm_abort(g->comm[r]);
            else if (!g->gone[r])
                (void)nccl.comm_destroy(g->comm[r]);
        }
        (void)gpuSetDevice(l->device);
        free(g);
    }
    pthread_mutex_unlock(&mu);
}

/* Every rank of g reports ok: 1 when all of them did, 0 when one did not, -1 when the group
 * was stopped or a rank did not come within RLX_TP_TIMEOUT_S. Spins a little first: the
 * ranks of a step arrive within microseconds of each other. */
static int all_ok(tp_group *g, int ok)
{
    pthread_mutex_lock(&mu);
    uint64_t gen = g->ok_gen;
    g->ok_bad |= !ok;
    if (++g->ok_in == g->ranks) {
        g->ok_last = !g->ok_bad;
        g->ok_in = g->ok_bad = 0;
        __atomic_store_n(&g->ok_gen, gen + 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&cv);
        int all = g->ok_last;
        pthread_mutex_unlock(&mu);
        return all;
    }
    pthread_mutex_unlock(&mu);
    double t0 = now_s();
    while (__atomic_load_n(&g->ok_gen, __ATOMIC_ACQUIRE) == gen && !__atomic_load_n(&g->aborted, __ATOMIC_ACQUIRE) &&
           now_s() - t0 < 2e-4) {
    }
    pthread_mutex_lock(&mu);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += wait_s();
    int timed_out = 0;
    while (gen == g->ok_gen && !g->aborted && !timed_out)
        timed_out = pthread_cond_timedwait(&cv, &mu, &until) == ETIMEDOUT;
    int all = gen != g->ok_gen ? g->ok_last : -1;
    pthread_mutex_unlock(&mu);
    return all;
}

int gpu_tp_launch_barrier(const gpu_tp_link *l, int ok, char *err, size_t len)
{
    if (!l->comm || l->ranks == 1)
        return ok ? 0 : -1;
    tp_group *g = (tp_group *)l->grp;
    int all = all_ok(g, ok);
    if (all > 0)
        return 0;
    pthread_mutex_lock(&mu);
    if (all < 0 && !g->aborted) {
        char line[256];
        snprintf(line, sizeof line, "rank %d of %d waited %d s for the other ranks to launch a step (one failed, hangs "
                 "or runs another program)", l->rank, l->ranks, wait_s());
        stop_locked(g, l->rank, line);
    }
    if (all < 0)
        snprintf(err, len, "group %lld stopped: %s", (long long)l->group, g->why);
    else
        snprintf(err, len, "group %lld: another rank failed before launching this step", (long long)l->group);
    pthread_mutex_unlock(&mu);
    (void)gpuSetDevice(l->device);
    return -1;
}

int gpu_tp_window_open(const gpu_tp_link *l, size_t bytes, void **ptr, void **win, char *err, size_t len)
{
    *ptr = *win = NULL;
    err[0] = 0;
    if (!l->comm || l->ranks == 1 || !bytes) {
        snprintf(err, len, "no collectives");
        return -1;
    }
    tp_group *g = (tp_group *)l->grp;
    void *p = NULL;
    rlx_nccl_win w = NULL;
    int rc = -1;
    (void)gpuSetDevice(l->device);
    if (!nccl.mem_alloc)
        snprintf(err, len, "%s has no ncclCommWindowRegister (NCCL 2.27 or later has)", nccl.name);
    else if ((rc = nccl.mem_alloc(&p, bytes)) != RLX_NCCL_SUCCESS)
        snprintf(err, len, "%s: ncclMemAlloc of %zu bytes: %s", nccl.name, bytes, nccl.get_error_string(rc));
    /* registering is collective: only when every rank has its buffer */
    if (all_ok(g, nccl.mem_alloc && rc == RLX_NCCL_SUCCESS) > 0) {
        rc = nccl.window_register((rlx_nccl_comm)l->comm, p, bytes, &w, RLX_NCCL_WIN_COLL_SYMMETRIC);
        if (rc != RLX_NCCL_SUCCESS)
            snprintf(err, len, "%s: ncclCommWindowRegister of %zu bytes: %s", nccl.name, bytes, nccl.get_error_string(rc));
        else if (!w)
            snprintf(err, len, "%s: no symmetric memory between these devices", nccl.name);
        /* a rank that ran its collectives on a window while another did not would hang */
        if (all_ok(g, rc == RLX_NCCL_SUCCESS && w) <= 0) {
            if (w)
                (void)nccl.window_deregister((rlx_nccl_comm)l->comm, w);
            w = NULL;
            if (rc == RLX_NCCL_SUCCESS && !err[0])
                snprintf(err, len, "another rank has no symmetric window");
        }
    } else if (nccl.mem_alloc && rc == RLX_NCCL_SUCCESS) {
        snprintf(err, len, "another rank has no buffer for a symmetric window");
    }
    if (!w) {
        if (p)
            (void)nccl.mem_free(p);
        (void)gpuSetDevice(l->device);
        return -1;
    }
    *ptr = p;
    *win = w;
    (void)gpuSetDevice(l->device);
    return 0;
}

void gpu_tp_window_close(const gpu_tp_link *l, void *ptr, void *win)
{
    if (!ptr)
        return;
    tp_group *g = (tp_group *)l->grp;
    pthread_mutex_lock(&mu);
    int gone = !l->comm || g->gone[l->rank]; /* an aborted communicator took its windows */
    pthread_mutex_unlock(&mu);
    (void)gpuSetDevice(l->device);
    if (gone)
        return;
    (void)nccl.window_deregister((rlx_nccl_comm)l->comm, (rlx_nccl_win)win);
    (void)nccl.mem_free(ptr);
}

static int nccl_dtype(int dt)
{
    return dt == RLX_F32 ? RLX_NCCL_FLOAT32 : dt == RLX_F16 ? RLX_NCCL_FLOAT16 : dt == RLX_BF16 ? RLX_NCCL_BFLOAT16
                                                                                            : RLX_NCCL_INT32;
}

int gpu_coll_run(gpuStream_t s, const gpu_tp_link *l, int gather, const void *x, void *y, void *scratch,
                 int64_t rows, int64_t cols, int dt, char *err, size_t len)
{
    size_t es = (size_t)esz(dt), n = (size_t)(rows * cols);
    gpuError_t e = gpuSuccess;
    int rc = RLX_NCCL_SUCCESS;
    if (l->ranks == 1) {
        if (x != y && n)
            e = gpuMemcpyAsync(y, x, n * es, gpuMemcpyDeviceToDevice, s);
    } else if (!l->comm) {
        snprintf(err, len, "rank %d of group %lld has no communicator", l->rank, (long long)l->group);
        return -1;
    } else if (!gather) {
        rc = nccl.all_reduce(x, y, n, nccl_dtype(dt), RLX_NCCL_SUM, (rlx_nccl_comm)l->comm, (void *)s);
    } else if (rows <= 1) {
        rc = nccl.all_gather(x, y, n, nccl_dtype(dt), (rlx_nccl_comm)l->comm, (void *)s);
    } else {
        /* [ranks][rows][cols] in scratch, then each rank's block into its columns */
        rc = nccl.all_gather(x, scratch, n, nccl_dtype(dt), (rlx_nccl_comm)l->comm, (void *)s);
        size_t w = (size_t)cols * es;
        for (int k = 0; k < l->ranks && rc == RLX_NCCL_SUCCESS && e == gpuSuccess; k++)
            e = gpuMemcpy2DAsync((char *)y + (size_t)k * w, w * (size_t)l->ranks, (const char *)scratch + (size_t)k * n * es,
                                 w, w, (size_t)rows, gpuMemcpyDeviceToDevice, s);
    }
    if (rc != RLX_NCCL_SUCCESS) {
        snprintf(err, len, "%s: %s", nccl.name, nccl.get_error_string(rc));
        return -1;
    }
    if (e != gpuSuccess) {
        snprintf(err, len, "%s", gpuGetErrorString(e));
        (void)gpuGetLastError();
        return -1;
    }
    return 0;
}

void gpu_tp_peers(int n, char *out, size_t len)
{
    size_t k = 0;
    out[0] = 0;
    for (int a = 0; a < n && a < TP_MAX_RANKS; a++)
        for (int b = 0; b < n && b < TP_MAX_RANKS; b++) {
            int can = 0;
            if (a == b || k + 32 >= len)
                continue;
            if (gpuDeviceCanAccessPeer(&can, a, b) != gpuSuccess) {
                (void)gpuGetLastError();
                can = -1;
            }
            k += (size_t)snprintf(out + k, len - k, "%s%d->%d %s", k ? ", " : "peer access ", a, b,
                                  can < 0 ? "?" : can ? "yes" : "no");
        }
}
