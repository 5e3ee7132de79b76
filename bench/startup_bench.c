/* startup_bench: start-up costs, each the median (and min, max) of N repetitions, as JSON.
 * Wall times on a shared machine grow with its load; the CPU times (user + system) beside
 * them do not, much.
 *   registry:   rlx_registry_open over the plugin path and a probe of every backend, in a
 *               fresh child process each time: wall ms, the child's CPU ms and peak RSS MB;
 *   tokenizers: rlx_tokenizer_load of each tokenizer.json given, in process: "first" with
 *               an empty cache folder (parse + cache write), "cached" (the second load of
 *               the unchanged file), "no_cache" (RLX_NO_CACHE=1); the cache folder is a
 *               temporary one, removed at the end;
 *   compile:    --compile config.json (a LLaMA config): the prefill (T tokens, --seq) and
 *               decode programs compiled for the CPU backend, over a sparse f32 checkpoint
 *               of the config's shapes (no weight data is read); then 32 more decode
 *               lookups, which must compile nothing ("recompiled" counts them);
 *   phases:     --phases MODEL_DIR: what rlx-run generate does before its first token, in a
 *               fresh child each time, wall ms per step: model open (registry, config,
 *               checkpoint, CPU backend init), tokenizer load (cached), encode, session,
 *               first prefill (compile, weight binding, run), one decode step;
 *   run:        a command line (e.g. rlx-run --prompt ... -n 1) started by posix_spawn,
 *               exec to exit: wall and CPU ms of the child (no shell unless the line
 *               needs one: "shell" says which; a libtool wrapper script is reported).
 * Usage: startup_bench [-r N] [--run 'CMD ...'] [--compile CONFIG [--seq T]] [--phases DIR]
 *                      [tokenizer.json ...]
 * (RLX_PLUGIN_PATH as for every rlx program) */
#define _GNU_SOURCE
#include "rlx/rlx.h"
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static double clock_ms(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static double now_ms(void) { return clock_ms(CLOCK_MONOTONIC); }

static double ru_cpu_ms(const struct rusage *ru)
{
    return (ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1e3 + (ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) * 1e-3;
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

/* fork + wait: the child's wall and CPU ms; child() returns its exit status */
static int in_child(int (*child)(const void *), const void *arg, double *ms, double *cpu, double *rss_mb)
{
    fflush(stdout); /* nothing buffered may be written twice */
    double t0 = now_ms();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) _exit(child(arg));
    int st;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) return -1;
    *ms = now_ms() - t0;
    *cpu = ru_cpu_ms(&ru);
    if (rss_mb) *rss_mb = ru.ru_maxrss / 1024.0;
    return 0;
}

static int registry_child(const void *arg)
{
    (void)arg;
    rlx_registry *r = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    if (rlx_registry_open(NULL, &r, &d)) return 1;
    for (size_t i = 0; i < rlx_registry_count(r); i++) {
        const rlx_plugin_info *p = rlx_registry_plugin(r, i);
        for (uint32_t k = 0; p->loaded && k < p->desc->n_backends; k++)
            (void)rlx_registry_probe(r, p->desc->backends[k]);
    }
    return rlx_registry_count(r) ? 0 : 2;
}

/* ---------------------------------------------------------------- run */

/* cmd split into words ('...' and "..." quote): 0, or -1 when it needs a shell
 * (metacharacters outside quotes, a leading VAR=value, unbalanced quotes) */
static int split_words(const char *cmd, char *buf, size_t len, char **argv, int max)
{
    int n = 0;
    size_t o = 0;
    for (const char *p = cmd;;) {
        while (*p == ' ' || *p == '\t') p++;
        if (!*p) break;
        if (n + 1 >= max) return -1;
        argv[n++] = buf + o;
        while (*p && *p != ' ' && *p != '\t') {
            if (strchr("|&;<>()$`\\*?[]~#=\n", *p) && !(p > cmd && n > 1 && *p == '=')) return -1;
            if (*p == '\'' || *p == '"') {
                char q = *p++;
                while (*p && *p != q) {
                    if (o + 1 >= len) return -1;
                    buf[o++] = *p++;
                }
                if (*p++ != q) return -1;
            } else {
                if (o + 1 >= len) return -1;
                buf[o++] = *p++;
            }
        }
        buf[o++] = 0;
    }
    argv[n] = NULL;
    return n ? 0 : -1;
}

/* A program started by posix_spawn (no fork of this process, whose pages a fork would
 * copy on write, and no shell unless the command line needs one): exec to exit, wall
 * and CPU ms of the child */
static int spawn_once(char *const *argv, double *ms, double *cpu)
{
    posix_spawn_file_actions_t fa;
    if (posix_spawn_file_actions_init(&fa)) return -1;
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    pid_t pid;
    double t0 = now_ms();
    int e = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (e) return -1;
    int st;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) return -1;
    *ms = now_ms() - t0;
    *cpu = ru_cpu_ms(&ru);
    return 0;
}

/* a script (a libtool wrapper in a build tree) is measured with its interpreter */
static void warn_script(const char *prog)
{
    char path[4200];
    if (strchr(prog, '/')) snprintf(path, sizeof path, "%s", prog);
    else {
        const char *p = getenv("PATH");
        for (path[0] = 0; p && *p;) {
            const char *e = strchr(p, ':');
            size_t n = e ? (size_t)(e - p) : strlen(p);
            snprintf(path, sizeof path, "%.*s/%s", (int)n, p, prog);
            if (access(path, X_OK) == 0) break;
            path[0] = 0;
            p = e ? e + 1 : NULL;
        }
    }
    char head[2] = {0};
    FILE *f = path[0] ? fopen(path, "rb") : NULL;
    if (f && fread(head, 1, 2, f) == 2 && head[0] == '#' && head[1] == '!')
        fprintf(stderr, "startup_bench: %s is a script (a libtool wrapper?): its interpreter is timed too; "
                        "time the installed program (or the build's .libs one, LD_LIBRARY_PATH set)\n", path);
    if (f) fclose(f);
}

/* ---------------------------------------------------------------- phases */

enum { PH_OPEN, PH_TOK, PH_ENC, PH_SESS, PH_PREFILL, PH_DECODE, PH_N };
static const char *const ph_names[PH_N] = {"model_open_ms", "tokenizer_ms", "encode_ms", "session_ms",
                                            "first_prefill_ms", "decode_ms"};

/* in a child: one generate's start, each step's wall ms written to the pipe */
static int phases_child(const void *arg)
{
    const char *const *a = arg;
    const char *dir = a[0];
    int fd = (int)(intptr_t)a[1];
    double t[PH_N + 1], c[PH_N + 1];
    rlx_diag d;
    rlx_diag_init(&d);
    rlx_model_options o;
    rlx_model_options_init(&o);
    o.backend = "cpu";
    rlx_model *m = NULL;
    rlx_tokenizer *tk = NULL;
    rlx_session *s = NULL;
    char tp[4200];
    snprintf(tp, sizeof tp, "%s/tokenizer.json", dir);
    int32_t *ids = NULL;
    size_t n = 0;
    t[0] = now_ms();
    c[0] = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
    int rc = rlx_model_open(dir, &o, &m, &d);
    t[1] = now_ms();
    c[1] = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
    if (!rc) rc = rlx_tokenizer_load(tp, &tk, &d);
    t[2] = now_ms();
    c[2] = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
    if (!rc) rc = rlx_tokenizer_encode(tk, "def main():", 11, 1, &ids, &n, &d);
    t[3] = now_ms();
    c[3] = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
    if (!rc) rc = rlx_session_new(m, 0, &s, &d);
    t[4] = now_ms();
    c[4] = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
    float *logits = rc ? NULL : malloc((size_t)rlx_model_get_config(m)->vocab_size * sizeof *logits);
    if (!rc) rc = !logits || rlx_session_prefill(s, ids, (int64_t)n, NULL, logits, &d);
    t[5] = now_ms();
    c[5] = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
    if (!rc) rc = rlx_session_decode(s, ids[0], logits, &d);
    t[6] = now_ms();
    c[6] = clock_ms(CLOCK_PROCESS_CPUTIME_ID);
    if (rc) fprintf(stderr, "startup_bench: phases: %s\n", d.msg);
    double ms[2 * PH_N];
    for (int i = 0; i < PH_N; i++) {
        ms[i] = t[i + 1] - t[i];
        ms[PH_N + i] = c[i + 1] - c[i];
    }
    return rc || write(fd, ms, sizeof ms) != (ssize_t)sizeof ms; /* the rest is freed by _exit */
}

static int phases_bench(const char *dir, int reps)
{
    double *v[2 * PH_N], wall, cpu;
    int rc = 0;
    for (int k = 0; k < 2 * PH_N; k++) rc |= !(v[k] = calloc((size_t)reps, sizeof(double)));
    for (int i = 0; !rc && i < reps; i++) {
        int p[2];
        if (pipe(p)) return -1;
        const void *arg[2] = {dir, (void *)(intptr_t)p[1]};
        double ms[2 * PH_N];
        rc = in_child(phases_child, arg, &wall, &cpu, NULL) || read(p[0], ms, sizeof ms) != (ssize_t)sizeof ms;
        close(p[0]);
        close(p[1]);
        for (int k = 0; !rc && k < 2 * PH_N; k++) v[k][i] = ms[k];
    }
    if (!rc) {
        printf(",\"phases\":{\"model\":\"%s\",", dir);
        for (int k = 0; k < PH_N; k++) stats(ph_names[k], v[k], reps, 0);
        printf("\"cpu\":{"); /* the process's CPU time per step: steadier than wall on a loaded host */
        for (int k = 0; k < PH_N; k++) stats(ph_names[k], v[PH_N + k], reps, k == PH_N - 1);
        printf("}}");
    }
    for (int k = 0; k < 2 * PH_N; k++) free(v[k]);
    return rc;
}

/* ---------------------------------------------------------------- tokenizers */

static void clear_dir(const char *dir)
{
    DIR *dh = opendir(dir);
    struct dirent *e;
    char p[4200];
    while (dh && (e = readdir(dh)))
        if (e->d_name[0] != '.' && snprintf(p, sizeof p, "%s/%s", dir, e->d_name) < (int)sizeof p) unlink(p);
    if (dh) closedir(dh);
}

static int tok_once(const char *file, double *ms, double *cpu)
{
    rlx_diag d;
    rlx_diag_init(&d);
    rlx_tokenizer *t = NULL;
    double t0 = now_ms(), c0 = clock_ms(CLOCK_THREAD_CPUTIME_ID);
    if (rlx_tokenizer_load(file, &t, &d)) {
        fprintf(stderr, "startup_bench: %s\n", d.msg);
        return -1;
    }
    *ms = now_ms() - t0;
    *cpu = clock_ms(CLOCK_THREAD_CPUTIME_ID) - c0;
    rlx_tokenizer_free(t);
    return 0;
}

/* kind 0: first load (cache emptied), 1: cached, 2: caching off */
static int tok_series(const char *file, int kind, const char *cache_sub, int reps, double *v, double *c)
{
    if (kind == 2) setenv("RLX_NO_CACHE", "1", 1);
    else unsetenv("RLX_NO_CACHE");
    double w, cc;
    if (kind == 1 && tok_once(file, &w, &cc)) return -1; /* writes the cache */
    for (int i = 0; i < reps; i++) {
        if (kind == 0) clear_dir(cache_sub);
        if (tok_once(file, &v[i], &c[i])) return -1;
    }
    unsetenv("RLX_NO_CACHE");
    return 0;
}

/* ---------------------------------------------------------------- compile */

/* the checkpoint of a LLaMA config: f32 tensors of the right shapes, all holes */
static int sparse_checkpoint(const char *config, const char *dir, rlx_diag *d)
{
    rlx_registry *reg = NULL;
    rlx_config *c = NULL;
    int rc = rlx_registry_open(NULL, &reg, d);
    if (!rc) rc = rlx_config_load(config, reg, &c, d);
    rlx_registry_close(reg);
    if (rc) return rc;
    const rlx_model_config *m = rlx_config_model(c);
    int64_t H = m->hidden_size, I = m->intermediate_size, V = m->vocab_size;
    int64_t hd = m->head_dim > 0 ? m->head_dim : H / m->num_heads;
    int64_t q = m->num_heads * hd, kv = (m->num_kv_heads > 0 ? m->num_kv_heads : m->num_heads) * hd;
    size_t cap = 1 << 20, n = 0;
    char *hdr = malloc(cap);
    uint64_t off = 0;
    if (!hdr) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
#define T(name, a, b)                                                                                   \
    do {                                                                                                \
        int64_t a_ = (a), b_ = (b);                                                                     \
        uint64_t bytes = (uint64_t)a_ * (b_ ? (uint64_t)b_ : 1) * 4;                                    \
        n += (size_t)snprintf(hdr + n, cap - n, "%s\"%s\":{\"dtype\":\"F32\",\"shape\":[%lld%s%.0lld]," \
                              "\"data_offsets\":[%llu,%llu]}", n > 1 ? "," : "", name, (long long)a_,   \
                              b_ ? "," : "", (long long)b_, (unsigned long long)off,                    \
                              (unsigned long long)(off + bytes));                                       \
        off += bytes;                                                                                   \
    } while (0)
    n = (size_t)snprintf(hdr, cap, "{");
    T("model.embed_tokens.weight", V, H);
    char nm[256];
    for (int64_t i = 0; i < m->num_layers && n + 4096 < cap; i++) {
        static const char *const sfx[] = {"input_layernorm", "post_attention_layernorm", "self_attn.q_proj",
                                          "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
        const int64_t dims[9][2] = {{H, 0}, {H, 0}, {q, H}, {kv, H}, {kv, H}, {H, q}, {I, H}, {I, H}, {H, I}};
        for (int k = 0; k < 9; k++) {
            snprintf(nm, sizeof nm, "model.layers.%lld.%s.weight", (long long)i, sfx[k]);
            T(nm, dims[k][0], dims[k][1]);
        }
    }
    T("model.norm.weight", H, 0);
    if (!m->tie_word_embeddings) T("lm_head.weight", V, H);
#undef T
    n += (size_t)snprintf(hdr + n, cap - n, "}");
    while (n % 8) hdr[n++] = ' ';
    rlx_config_free(c);
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    uint64_t hl = n;
    rc = fd < 0 || write(fd, &hl, 8) != 8 || write(fd, hdr, n) != (ssize_t)n || ftruncate(fd, (off_t)(8 + n + off));
    if (fd >= 0) close(fd);
    free(hdr);
    return rc ? rlx_diag_set(d, RLX_ERR_IO, "%s: cannot write the sparse checkpoint", path) : 0;
}

static int copy_file(const char *src, const char *dst)
{
    FILE *in = fopen(src, "rb"), *out = fopen(dst, "wb");
    char buf[8192];
    size_t k;
    int rc = in && out ? 0 : -1;
    while (!rc && (k = fread(buf, 1, sizeof buf, in)) > 0) rc = fwrite(buf, 1, k, out) == k ? 0 : -1;
    if (in) fclose(in);
    if (out && fclose(out)) rc = -1;
    return rc;
}

/* one fresh model: ms to compile prefill (T) and decode; programs added by 32 more
 * decode lookups */
static int compile_once(const char *dir, int64_t T, double *pre, double *dec, double *cpu, int *recompiled)
{
    rlx_model_options o;
    rlx_model_options_init(&o);
    o.backend = "cpu";
    rlx_model *m = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    FILE *null = fopen("/dev/null", "w");
    int rc = null ? rlx_model_open(dir, &o, &m, &d) : -1;
    double c0 = clock_ms(CLOCK_THREAD_CPUTIME_ID), t0 = now_ms();
    if (!rc) rc = rlx_model_dump_graph(m, RLX_PHASE_PREFILL, T, null, &d);
    double t1 = now_ms();
    if (!rc) rc = rlx_model_dump_graph(m, RLX_PHASE_DECODE, 1, null, &d);
    *pre = t1 - t0;
    *dec = now_ms() - t1;
    *cpu = clock_ms(CLOCK_THREAD_CPUTIME_ID) - c0;
    int before = rlx_model_compiled_count(m);
    for (int i = 0; !rc && i < 32; i++) rc = rlx_model_dump_graph(m, RLX_PHASE_DECODE, 1, null, &d);
    *recompiled = rlx_model_compiled_count(m) - before;
    if (rc) fprintf(stderr, "startup_bench: compile: %s\n", d.msg);
    rlx_model_close(m);
    if (null) fclose(null);
    return rc;
}

static int compile_bench(const char *config, int64_t T, int reps)
{
    char dir[] = "/tmp/rlx-startup-XXXXXX", p[4200];
    if (!mkdtemp(dir)) return -1;
    rlx_diag d;
    rlx_diag_init(&d);
    snprintf(p, sizeof p, "%s/config.json", dir);
    int rc = copy_file(config, p) ? (fprintf(stderr, "startup_bench: cannot copy %s\n", config), 1)
                                  : sparse_checkpoint(config, dir, &d);
    if (rc && d.msg[0]) fprintf(stderr, "startup_bench: %s\n", d.msg);
    double *pre = calloc((size_t)reps, sizeof *pre), *dec = calloc((size_t)reps, sizeof *dec),
           *cpu = calloc((size_t)reps, sizeof *cpu);
    int recompiled = 0;
    for (int i = 0; !rc && i < reps; i++) {
        int r = 0;
        rc = !pre || !dec || !cpu || compile_once(dir, T, &pre[i], &dec[i], &cpu[i], &r);
        recompiled += r;
    }
    if (!rc) {
        printf(",\"compile\":{\"config\":\"%s\",\"prefill_tokens\":%lld,", config, (long long)T);
        stats("prefill_ms", pre, reps, 0);
        stats("decode_ms", dec, reps, 0);
        stats("both_cpu_ms", cpu, reps, 0);
        printf("\"recompiled\":%d}", recompiled);
    }
    free(pre);
    free(dec);
    free(cpu);
    unlink(p);
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    unlink(p);
    rmdir(dir);
    return rc;
}

int main(int argc, char **argv)
{
    int reps = 11, a = 1;
    const char *run = NULL, *config = NULL, *phases = NULL;
    int64_t seq = 128;
    for (; a < argc && argv[a][0] == '-'; a++) {
        if (!strcmp(argv[a], "-r") && a + 1 < argc) reps = atoi(argv[++a]);
        else if (!strcmp(argv[a], "--run") && a + 1 < argc) run = argv[++a];
        else if (!strcmp(argv[a], "--compile") && a + 1 < argc) config = argv[++a];
        else if (!strcmp(argv[a], "--seq") && a + 1 < argc) seq = atoll(argv[++a]);
        else if (!strcmp(argv[a], "--phases") && a + 1 < argc) phases = argv[++a];
        else {
            fprintf(stderr, "usage: startup_bench [-r N] [--run 'CMD'] [--compile CONFIG [--seq T]] "
                            "[--phases MODEL_DIR] [tokenizer.json ...]\n");
            return 2;
        }
    }
    if (reps < 1 || reps > 1000) reps = 11;
    if (seq < 1) seq = 128;
    double *v = calloc((size_t)reps, sizeof *v), *c = calloc((size_t)reps, sizeof *c),
           *m = calloc((size_t)reps, sizeof *m);
    if (!v || !c || !m) return 1;
    printf("{\"repetitions\":%d,\"registry\":{", reps);
    for (int i = 0; i < reps; i++)
        if (in_child(registry_child, NULL, &v[i], &c[i], &m[i])) {
            fprintf(stderr, "startup_bench: registry open failed (RLX_PLUGIN_PATH?)\n");
            return 1;
        }
    stats("open_probe_ms", v, reps, 0);
    stats("open_probe_cpu_ms", c, reps, 0);
    stats("peak_rss_mb", m, reps, 1);
    printf("},\"tokenizers\":[");
    char cache[] = "/tmp/rlx-startup-cache-XXXXXX", sub[sizeof cache + 16];
    if (a < argc && !mkdtemp(cache)) return 1;
    setenv("RLX_CACHE_DIR", cache, 1);
    snprintf(sub, sizeof sub, "%s/tokenizers", cache);
    static const char *const kinds[] = {"first", "cached", "no_cache"};
    for (int f = a; f < argc; f++) {
        printf("%s{\"file\":\"%s\"", f > a ? "," : "", argv[f]);
        for (int k = 0; k < 3; k++) {
            if (tok_series(argv[f], k, sub, reps, v, c)) return 1;
            printf(",\"%s\":{", kinds[k]);
            stats("ms", v, reps, 0);
            stats("cpu_ms", c, reps, 1);
            printf("}");
        }
        printf("}");
        clear_dir(sub);
    }
    if (a < argc) {
        rmdir(sub);
        rmdir(cache);
    }
    printf("]");
    if (config && compile_bench(config, seq, reps)) return 1;
    if (phases && phases_bench(phases, reps)) {
        fprintf(stderr, "startup_bench: --phases %s failed\n", phases);
        return 1;
    }
    if (run) {
        char words[4096], *argv_run[128];
        char *const sh[] = {"/bin/sh", "-c", (char *)run, NULL};
        char *const *av = split_words(run, words, sizeof words, argv_run, 128) ? sh : argv_run;
        if (av != sh) warn_script(av[0]);
        for (int i = 0; i < reps; i++)
            if (spawn_once(av, &v[i], &c[i])) {
                fprintf(stderr, "startup_bench: '%s' failed\n", run);
                return 1;
            }
        printf(",\"run\":{\"cmd\":\"");
        for (const char *p = run; *p; p++) printf(*p == '"' || *p == '\\' ? "\\%c" : "%c", *p);
        printf("\",\"shell\":%s,", av == sh ? "true" : "false");
        stats("wall_ms", v, reps, 0);
        stats("cpu_ms", c, reps, 1);
        printf("}");
    }
    printf("}\n");
    free(v);
    free(c);
    free(m);
    return 0;
}
