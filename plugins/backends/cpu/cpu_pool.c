/* Persistent worker pool. The calling thread is worker 0; the others sleep on a
 * condition variable between kernels, so nothing spins while OpenBLAS or another
 * process wants the cores. Tasks are handed out through an atomic counter. */
#include "cpu_backend.h"
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

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
    uint64_t gen;  /* bumped for every job */
    int stop;
    int pending;   /* helper threads still in the current job */
    cpu_task_fn fn;
    void *arg;
    int64_t n_tasks;
    atomic_int_fast64_t next;
};

static void drain(cpu_pool *p, cpu_task_fn fn, void *arg, int64_t n_tasks, int worker)
{
    for (;;) {
        int64_t t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= n_tasks) break;
        fn(arg, t, worker);
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
    uint64_t seen = 0;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->gen == seen && !p->stop) pthread_cond_wait(&p->cv_work, &p->mu);
        if (p->stop) break;
        seen = p->gen;
        cpu_task_fn fn = p->fn;
        void *arg = p->arg;
        int64_t n_tasks = p->n_tasks;
        pthread_mutex_unlock(&p->mu);
        drain(p, fn, arg, n_tasks, w->id);
        pthread_mutex_lock(&p->mu);
        if (--p->pending == 0) pthread_cond_signal(&p->cv_done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int cpu_pool_create(int n_workers, const int *pus, cpu_pool **out, rlx_diag *d)
{
    if (n_workers < 1) n_workers = 1;
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
    atomic_init(&p->next, 0);
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
    p->stop = 1;
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

void cpu_pool_run(cpu_pool *p, int64_t n_tasks, cpu_task_fn fn, void *arg)
{
    if (n_tasks <= 0) return;
    if (p->n == 1 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; t++) fn(arg, t, 0);
        return;
    }
    pthread_mutex_lock(&p->mu);
    p->fn = fn;
    p->arg = arg;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    p->pending = p->n - 1;
    p->gen++;
    pthread_cond_broadcast(&p->cv_work);
    pthread_mutex_unlock(&p->mu);
    drain(p, fn, arg, n_tasks, 0);
    pthread_mutex_lock(&p->mu);
    while (p->pending > 0) pthread_cond_wait(&p->cv_done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}
