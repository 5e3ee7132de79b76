/* startup_bench: start-up costs, each the median (and min) of N repetitions, as JSON:
 *   registry: rlx_registry_open over the plugin path and a probe of every backend, in a
 *             fresh child process each time (wall ms, and the child's peak RSS in MB);
 *   tokenizer: rlx_tokenizer_load of each tokenizer.json given (wall ms, in process);
 *   run:      fork+exec of a command line (e.g. rlx-run --prompt ... -n 1), wall ms.
 * Usage: startup_bench [-r N] [--run 'CMD ...'] [tokenizer.json ...]
 * (RLX_PLUGIN_PATH as for every rlx program; a shared machine makes single figures noisy:
 * read the medians.) */
#define _GNU_SOURCE
#include "rlx/rlx.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void stats(const char *key, double *v, int n, int last)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
    printf("\"%s\":{\"median\":%.2f,\"min\":%.2f,\"max\":%.2f}%s", key, med, v[0], v[n - 1], last ? "" : ",");
}

/* the registry in a child: wall time to open + probe all, the child's peak RSS */
static int registry_once(double *ms, double *rss_mb)
{
    fflush(stdout); /* nothing buffered may be written twice */
    double t0 = now_ms();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        rlx_registry *r = NULL;
        rlx_diag d;
        rlx_diag_init(&d);
        if (rlx_registry_open(NULL, &r, &d)) _exit(1);
        for (size_t i = 0; i < rlx_registry_count(r); i++) {
            const rlx_plugin_info *p = rlx_registry_plugin(r, i);
            for (uint32_t k = 0; p->loaded && k < p->desc->n_backends; k++)
                (void)rlx_registry_probe(r, p->desc->backends[k]);
        }
        _exit(rlx_registry_count(r) ? 0 : 2);
    }
    int st;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) return -1;
    *ms = now_ms() - t0;
    *rss_mb = ru.ru_maxrss / 1024.0;
    return 0;
}

static int run_once(const char *cmd, double *ms)
{
    fflush(stdout); /* nothing buffered may be written twice */
    double t0 = now_ms();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        if (!freopen("/dev/null", "w", stdout) || !freopen("/dev/null", "w", stderr)) _exit(126);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) return -1;
    *ms = now_ms() - t0;
    return 0;
}

int main(int argc, char **argv)
{
    int reps = 11, a = 1;
    const char *run = NULL;
    for (; a < argc && argv[a][0] == '-'; a++) {
        if (!strcmp(argv[a], "-r") && a + 1 < argc) reps = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--run") && a + 1 < argc) run = argv[++a];
        else {
            fprintf(stderr, "usage: startup_bench [-r N] [--run 'CMD'] [tokenizer.json ...]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 1000) reps = 11;
    double *v = calloc((size_t)reps, sizeof *v), *m = calloc((size_t)reps, sizeof *m);
    if (!v || !m) return 1;
    printf("{\"repetitions\":%d,\"registry\":{", reps);
    for (int i = 0; i < reps; i++)
        if (registry_once(&v[i], &m[i])) {
            fprintf(stderr, "startup_bench: registry open failed (RLX_PLUGIN_PATH?)\n");
            return 1;
        }
    stats("open_probe_ms", v, reps, 0);
    stats("peak_rss_mb", m, reps, 1);
    printf("},\"tokenizers\":[");
    for (int f = a; f < argc; f++) {
        for (int i = 0; i < reps; i++) {
            rlx_diag d;
            rlx_diag_init(&d);
            rlx_tokenizer *t = NULL;
            double t0 = now_ms();
            if (rlx_tokenizer_load(argv[f], &t, &d)) {
                fprintf(stderr, "startup_bench: %s\n", d.msg);
                return 1;
            }
            v[i] = now_ms() - t0;
            rlx_tokenizer_free(t);
        }
        printf("%s{\"file\":\"%s\",", f > a ? "," : "", argv[f]);
        stats("load_ms", v, reps, 1);
        printf("}");
    }
    printf("]");
    if (run) {
        for (int i = 0; i < reps; i++)
            if (run_once(run, &v[i])) {
                fprintf(stderr, "startup_bench: '%s' failed\n", run);
                return 1;
            }
        printf(",\"run\":{\"cmd\":\"");
        for (const char *p = run; *p; p++) printf(*p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
        printf("\",");
        stats("wall_ms", v, reps, 1);
        printf("}");
    }
    printf("}\n");
    free(v);
    free(m);
    return 0;
}
