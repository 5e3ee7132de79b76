/* RLX_CPU_PROFILE=1: per op of each compiled program, its wall time, the pool jobs it
 * handed out and how long the caller waited for other workers' tasks in them (straggler
 * and wake-up time); logged (info) when the program is released, with the caller's thread
 * CPU time per run (below the wall time when it was descheduled). A tool for finding where
 * a run spends its time; off by default. */
#include "cpu_backend.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct prof_snap {
    double cpu, wait;
    uint64_t jobs;
} prof_snap;

struct cpu_prof {
    double *s, *wait; /* seconds per node: wall, caller waiting for workers */
    uint64_t *jobs;   /* pool jobs per node */
    double cpu;       /* caller thread CPU seconds, all nodes */
    uint64_t runs;    /* executes of the program */
};

/* the counters at the last two cpu_prof_now calls of this thread (a node's start, end) */
static _Thread_local prof_snap snap_prev, snap_cur;

cpu_prof *cpu_prof_new(uint32_t n_nodes)
{
    const char *e = getenv("RLX_CPU_PROFILE");
    if (!e || !*e || !strcmp(e, "0")) return NULL;
    cpu_prof *p = calloc(1, sizeof *p);
    size_t n = n_nodes ? n_nodes : 1;
    if (p && (!(p->s = calloc(n, sizeof *p->s)) || !(p->wait = calloc(n, sizeof *p->wait)) ||
              !(p->jobs = calloc(n, sizeof *p->jobs)))) {
        free(p->s);
        free(p->wait);
        free(p->jobs);
        free(p);
        return NULL;
    }
    return p;
}

double cpu_prof_now(void)
{
    struct timespec t, c;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c);
    snap_prev = snap_cur;
    snap_cur.cpu = (double)c.tv_sec + (double)c.tv_nsec * 1e-9;
    cpu_pool_stats(&snap_cur.jobs, &snap_cur.wait);
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void cpu_prof_add(cpu_prof *p, uint32_t node, double seconds, int last)
{
    p->s[node] += seconds;
    p->wait[node] += snap_cur.wait - snap_prev.wait;
    p->jobs[node] += snap_cur.jobs - snap_prev.jobs;
    p->cpu += snap_cur.cpu - snap_prev.cpu;
    if (last) p->runs++;
}

void cpu_prof_free(cpu_prof *p, const cpu_node *nodes, uint32_t n_nodes)
{
    if (!p) return;
    /* totals per op name (the names are the op table's own strings) */
    const char *name[64];
    double tot[64], wt[64], all = 0, wall = 0;
    uint64_t jb[64], jall = 0;
    int n = 0;
    for (uint32_t i = 0; i < n_nodes; i++) {
        int k = 0;
        while (k < n && name[k] != nodes[i].op) k++;
        if (k == n && n < 64) {
            name[n] = nodes[i].op;
            tot[n] = wt[n] = 0;
            jb[n++] = 0;
        }
        if (k < n) {
            tot[k] += p->s[i];
            wt[k] += p->wait[i];
            jb[k] += p->jobs[i];
        }
        all += p->s[i];
        wall += p->wait[i];
        jall += p->jobs[i];
    }
    double runs = p->runs ? (double)p->runs : 1.0;
    char line[4096];
    int len = snprintf(line, sizeof line,
                       "profile of a %u-node program, %llu runs, per run: %.3f ms (caller CPU %.3f ms), %.1f pool "
                       "jobs, caller waited %.3f ms for workers; per op: %% of time, ms, jobs, wait ms:",
                       n_nodes, (unsigned long long)p->runs, all * 1e3 / runs, p->cpu * 1e3 / runs,
                       (double)jall / runs, wall * 1e3 / runs);
    while (n > 0 && len > 0 && (size_t)len < sizeof line) {
        int b = 0;
        for (int k = 1; k < n; k++)
            if (tot[k] > tot[b]) b = k;
        len += snprintf(line + len, sizeof line - (size_t)len, " %s %.1f%% %.3f %.1f %.3f", name[b],
                        all > 0 ? 100.0 * tot[b] / all : 0.0, tot[b] * 1e3 / runs, (double)jb[b] / runs,
                        wt[b] * 1e3 / runs);
        name[b] = name[n - 1];
        tot[b] = tot[n - 1];
        wt[b] = wt[n - 1];
        jb[b] = jb[--n];
    }
    if (cpu_host && cpu_host->log) cpu_host->log(RLX_LOG_INFO, "cpu", "%s", line);
    free(p->s);
    free(p->wait);
    free(p->jobs);
    free(p);
}
