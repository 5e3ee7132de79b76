/* RLX_CPU_PROFILE=1: wall time per op of each compiled program, logged (info) when the
 * program is released. A tool for finding where a run spends its time; off by default. */
#include "cpu_backend.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct cpu_prof {
    double *s;     /* seconds per node */
    uint64_t runs; /* executes of the program */
};

cpu_prof *cpu_prof_new(uint32_t n_nodes)
{
    const char *e = getenv("RLX_CPU_PROFILE");
    if (!e || !*e || !strcmp(e, "0")) return NULL;
    cpu_prof *p = calloc(1, sizeof *p);
    if (p && !(p->s = calloc(n_nodes ? n_nodes : 1, sizeof *p->s))) {
        free(p);
        return NULL;
    }
    return p;
}

double cpu_prof_now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

void cpu_prof_add(cpu_prof *p, uint32_t node, double seconds, int last)
{
    p->s[node] += seconds;
    if (last) p->runs++;
}

void cpu_prof_free(cpu_prof *p, const cpu_node *nodes, uint32_t n_nodes)
{
    if (!p) return;
    /* totals per op name (the names are the op table's own strings) */
    const char *name[64];
    double tot[64], all = 0;
    int n = 0;
    for (uint32_t i = 0; i < n_nodes; i++) {
        int k = 0;
        while (k < n && name[k] != nodes[i].op) k++;
        if (k == n && n < 64) {
            name[n] = nodes[i].op;
            tot[n++] = 0;
        }
        if (k < n) tot[k] += p->s[i];
        all += p->s[i];
    }
    char line[2048];
    int len = snprintf(line, sizeof line, "profile of a %u-node program, %llu runs, %.1f ms per run:", n_nodes,
                       (unsigned long long)p->runs, p->runs ? all * 1e3 / (double)p->runs : 0.0);
    while (n > 0 && len > 0 && (size_t)len < sizeof line) {
        int b = 0;
        for (int k = 1; k < n; k++)
            if (tot[k] > tot[b]) b = k;
        len += snprintf(line + len, sizeof line - (size_t)len, " %s %.1f%%", name[b],
                        all > 0 ? 100.0 * tot[b] / all : 0.0);
        name[b] = name[n - 1];
        tot[b] = tot[--n];
    }
    if (cpu_host && cpu_host->log) cpu_host->log(RLX_LOG_INFO, "cpu", "%s", line);
    free(p->s);
    free(p);
}
