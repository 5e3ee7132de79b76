/* Persistent worker pool. The calling thread is worker 0. Tasks are claimed through one
 * atomic word: the job number in its high half, the tasks not yet handed out in its low
 * half. A worker that wakes late thus never runs a task of another job (it needs no other
 * field to decide), and the caller waits only for tasks actually
 * claimed: on a crowded machine it finishes the job alone instead of waiting for a
 * descheduled worker to wake up. Between the kernels of one execute, workers and the
 * caller spin briefly (the gaps are microseconds), then sleep on a condition variable, so
 * nothing keeps spinning between executes. OpenBLAS runs single-threaded inside our
 * tasks, so no other pool spins at the same time. */
#include "cpu_backend.h"
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* about 50-200 µs of pause instructions: longer than the gap between two kernels of one
 * token, far shorter than the gap between two executes */
#define SPIN_ITERS 2048

/* RLX_CPU_PROFILE counters, for every pool of the process (profiling is a whole-process
 * switch); read at pool creation */
static atomic_int prof_on = -1;
static atomic_uint_fast64_t prof_jobs, prof_wait_ns;

void cpu_pool_stats(uint64_t *jobs, double *wait_s)
{
    *jobs = atomic_load(&prof_jobs);
    *wait_s = (double)atomic_load(&prof_wait_ns) * 1e-9;
}

static uint64_t mono_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

typedef struct cpu_worker {
    cpu_pool *pool;
    int id;
    int pu;
    pthread_t th;
} cpu_worker;

struct cpu_pool {
    int n;
    cpu_worker *w;
    int n_started;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    atomic_int stop;
    atomic_int n_sleeping;    /* workers asleep (or about to be) on cv_work */
    atomic_int caller_asleep; /* the caller sleeps on cv_done */
    /* the current job; written by the caller before it publishes gen */
    _Atomic(cpu_task_fn) fn;
    _Atomic(void *) arg;
    atomic_int_fast64_t n_tasks;
    atomic_uint_fast64_t gen;  /* job number, bumped for every job */
    atomic_uint_fast64_t next; /* (job number << 32) | tasks not yet handed out */
    atomic_int_fast64_t done;  /* tasks of the current job finished */
};

/* The next task of job `job` (tasks go out in increasing order), or -1 when that job has
 * none left or is over. The check uses the counter alone: n_tasks, read before, may belong
 * to a newer job when this one is over, but is only used once a claim succeeded, and then
 * the job is still running so its fields cannot have been rewritten. */
static int64_t claim(cpu_pool *p, uint32_t job, int64_t n_tasks)
{
    uint_fast64_t v = atomic_load_explicit(&p->next, memory_order_relaxed);
    for (;;) {
        if ((uint32_t)(v >> 32) != job) return -1;
        int64_t left = (int64_t)(v & 0xffffffffu);
        if (left == 0) return -1;
        if (atomic_compare_exchange_weak_explicit(&p->next, &v, v - 1, memory_order_acquire,
                                                  memory_order_relaxed))
            return n_tasks - left;
    }
}

/* runs tasks of job `job` until none is left; wakes a sleeping caller after the last */
static void drain(cpu_pool *p, uint32_t job, cpu_task_fn fn, void *arg, int64_t n_tasks, int worker)
{
    int64_t t;
    while ((t = claim(p, job, n_tasks)) >= 0) {
        fn(arg, t, worker);
        if (atomic_fetch_add(&p->done, 1) + 1 == n_tasks && worker != 0 &&
            atomic_load(&p->caller_asleep)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->cv_done);
            pthread_mutex_unlock(&p->mu);
        }
    }
}

static void *worker_main(void *a)
{
    cpu_worker *w = a;
    cpu_pool *p = w->pool;
    if (w->pu >= 0 && cpu_host &&
        cpu_host->struct_size >= RLX_STRUCT_SIZE(rlx_host_api, bind_thread) &&
        cpu_host->bind_thread && cpu_host->bind_thread(w->pu) != 0 && cpu_host->log)
        cpu_host->log(RLX_LOG_WARN, "cpu", "could not bind worker %d to PU %d; it runs unbound",
                      w->id, w->pu);
    uint_fast64_t seen = 0;
    for (;;) {
        uint_fast64_t g = atomic_load_explicit(&p->gen, memory_order_acquire);
        for (int i = 0; i < SPIN_ITERS && g == seen && !atomic_load_explicit(&p->stop, memory_order_relaxed); i++) {
            cpu_relax();
            g = atomic_load_explicit(&p->gen, memory_order_acquire);
        }
        if (g == seen) {
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->n_sleeping, 1);
            while ((g = atomic_load(&p->gen)) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv_work, &p->mu);
            atomic_fetch_sub(&p->n_sleeping, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->stop)) break;
        seen = g;
        /* may be a newer job's fields if this one is already over: claim() then fails */
        cpu_task_fn fn = atomic_load_explicit(&p->fn, memory_order_relaxed);
        void *arg = atomic_load_explicit(&p->arg, memory_order_relaxed);
        int64_t n_tasks = atomic_load_explicit(&p->n_tasks, memory_order_relaxed);
        drain(p, (uint32_t)g, fn, arg, n_tasks, w->id);
    }
    return NULL;
}

int cpu_pool_create(int n_workers, const int *pus, cpu_pool **out, rlx_diag *d)
{
    if (n_workers < 1) n_workers = 1;
    if (prof_on < 0) {
        const char *e = getenv("RLX_CPU_PROFILE");
        prof_on = e && *e && strcmp(e, "0") != 0;
    }
    cpu_pool *p = calloc(1, sizeof *p);
    if (!p) return cpu_fail(d, RLX_ERR_NOMEM, "cpu: out of memory creating the worker pool");
    p->n = n_workers;
    p->w = calloc((size_t)n_workers, sizeof *p->w);
    if (!p->w) {
        free(p);
        return cpu_fail(d, RLX_ERR_NOMEM, "cpu: out of memory creating the worker pool");
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv_work, NULL);
    pthread_cond_init(&p->cv_done, NULL);
    atomic_init(&p->stop, 0);
    atomic_init(&p->n_sleeping, 0);
    atomic_init(&p->caller_asleep, 0);
    atomic_init(&p->fn, NULL);
    atomic_init(&p->arg, NULL);
    atomic_init(&p->n_tasks, 0);
    atomic_init(&p->gen, 0);
    atomic_init(&p->next, 0);
    atomic_init(&p->done, 0);
    for (int i = 1; i < n_workers; i++) {
        cpu_worker *w = &p->w[i];
        w->pool = p;
        w->id = i;
        w->pu = pus ? pus[i] : -1;
        int e = pthread_create(&w->th, NULL, worker_main, w);
        if (e != 0) {
            p->n = i; /* the ones started so far are joined */
            cpu_pool_destroy(p);
            return cpu_fail(d, RLX_ERR_INTERNAL, "cpu: could not start worker thread %d of %d: %s",
                            i, n_workers, strerror(e));
        }
        p->n_started = i;
    }
    *out = p;
    return 0;
}

void cpu_pool_destroy(cpu_pool *p)
{
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, 1);
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i <= p->n_started; i++) pthread_join(p->w[i].th, NULL);
    pthread_cond_destroy(&p->cv_work);
    pthread_cond_destroy(&p->cv_done);
    pthread_mutex_destroy(&p->mu);
    free(p->w);
    free(p);
}

int cpu_pool_size(const cpu_pool *p)
{
    return p->n;
}

/* waits for the tasks other workers claimed: spin first, then sleep */
static void wait_done(cpu_pool *p, int64_t n_tasks)
{
    for (int i = 0; i < SPIN_ITERS; i++) {
        if (atomic_load_explicit(&p->done, memory_order_acquire) == n_tasks) return;
        cpu_relax();
    }
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_asleep, 1);
    while (atomic_load(&p->done) != n_tasks) pthread_cond_wait(&p->cv_done, &p->mu);
    atomic_store(&p->caller_asleep, 0);
    pthread_mutex_unlock(&p->mu);
}

void cpu_pool_run(cpu_pool *p, int64_t n_tasks, cpu_task_fn fn, void *arg)
{
    if (n_tasks <= 0) return;
    if (p->n == 1 || n_tasks == 1 || n_tasks > (int64_t)0xffffffffu) {
        for (int64_t t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    /* the previous job is over (all its tasks done), so no worker can claim from it */
    uint_fast64_t g = atomic_load_explicit(&p->gen, memory_order_relaxed) + 1;
    atomic_store_explicit(&p->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&p->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&p->n_tasks, n_tasks, memory_order_relaxed);
    atomic_store_explicit(&p->done, 0, memory_order_relaxed);
    atomic_store_explicit(&p->next, (uint_fast64_t)(uint32_t)g << 32 | (uint_fast64_t)n_tasks,
                          memory_order_relaxed);
    atomic_store(&p->gen, g); /* publishes the fields above */
    if (atomic_load(&p->n_sleeping) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv_work);
        pthread_mutex_unlock(&p->mu);
    }
    drain(p, (uint32_t)g, fn, arg, n_tasks, 0);
    uint64_t t0 = prof_on > 0 ? mono_ns() : 0;
    wait_done(p, n_tasks);
    if (prof_on > 0) {
        atomic_fetch_add(&prof_jobs, 1);
        atomic_fetch_add(&prof_wait_ns, mono_ns() - t0);
    }
}
