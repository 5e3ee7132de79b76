/* Shared pieces of the rlx-run subcommands (see run_common.h). */
#include "run_common.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *run_prog_name = "rlx-run";

int run_opt(int argc, char **argv, int *i, const char *name, const char **value)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return 0;
    if (a[n] == '=') {
        *value = a + n + 1;
        return 1;
    }
    if (a[n] != 0) return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "%s: option %s needs a value\n", run_prog_name, name);
        return -1;
    }
    *value = argv[++*i];
    return 1;
}

int run_int(const char *opt, const char *s, long long min, long long max, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno || v < min || v > max) {
        fprintf(stderr, "%s: %s: '%s' is not an integer in [%lld, %lld]\n", run_prog_name, opt, s, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

int run_double(const char *opt, const char *s, double min, double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!*s || *end || errno || !isfinite(v) || v < min || v > max) {
        fprintf(stderr, "%s: %s: '%s' is not a number in [%g, %g]\n", run_prog_name, opt, s, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

int run_ids(const char *opt, const char *s, int32_t **ids, size_t *n)
{
    size_t cap = 1;
    for (const char *p = s; *p; p++) cap += *p == ',';
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) {
        fprintf(stderr, "rlx-run: out of memory\n");
        return -1;
    }
    size_t k = 0;
    const char *p = s;
    for (;;) {
        char *end;
        while (*p == ' ') p++;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX) {
            fprintf(stderr, "rlx-run: %s: '%s' is not a comma-separated list of token ids\n", opt, s);
            free(v);
            return -1;
        }
        v[k++] = (int32_t)x;
        p = end;
        while (*p == ' ') p++;
        if (!*p) break;
        if (*p++ != ',') {
            fprintf(stderr, "rlx-run: %s: '%s' is not a comma-separated list of token ids\n", opt, s);
            free(v);
            return -1;
        }
    }
    *ids = v;
    *n = k;
    return 0;
}

int run_usage(const char *usage, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", run_prog_name);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n%s\n", usage);
    return 2;
}

int run_fail(const rlx_diag *d)
{
    fprintf(stderr, "%s: %s\n", run_prog_name, d && d->msg[0] ? d->msg : "failed (no diagnostic)");
    return 1;
}

int run_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", run_prog_name);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

static int stdout_err; /* errno of the first failed flush of stdout */

void run_flush_stdout(void)
{
    errno = 0;
    if (fflush(stdout) != 0 && !stdout_err) stdout_err = errno ? errno : EIO;
}

int run_stdout_check(void)
{
    run_flush_stdout();
    if (!ferror(stdout) && !stdout_err) return 0;
    int err = stdout_err ? stdout_err : EIO;
    clearerr(stdout); /* report once */
    stdout_err = 0;
    return run_error("standard output: write failed: %s", strerror(err));
}

int64_t run_nonfinite_at(const float *logits, int64_t vocab)
{
    for (int64_t i = 0; i < vocab; i++)
        if (!isfinite(logits[i])) return i;
    return -1;
}

int run_check_logits(const float *logits, int64_t vocab, int64_t step)
{
    int64_t i = run_nonfinite_at(logits, vocab);
    if (i >= 0)
        return run_error("step %lld (%s): logits contain %s at token id %lld; generation stopped",
                         (long long)step, step == 0 ? "prefill" : "decode",
                         isnan(logits[i]) ? "NaN" : "Inf", (long long)i);
    return 0;
}

int run_file_exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0; /* a dangling link or a FIFO "exists": its loader says why it is unusable */
}

const char *run_demo_model_dir(void)
{
    const char *env = getenv("RLX_MODEL_DIR");
    if (env && *env) return env;
#ifdef RLX_DEMO_MODEL_DIR
    if (run_file_exists(RLX_DEMO_MODEL_DIR "/config.json")) return RLX_DEMO_MODEL_DIR;
#endif
#ifdef RLX_SRC_DEMO_MODEL_DIR
    return RLX_SRC_DEMO_MODEL_DIR;
#else
    return "models/tiny-llama-py";
#endif
}

int run_model_flag(int argc, char **argv, int *i, run_model_flags *f, const char *usage)
{
    const char *v;
    int r;
    if ((r = run_opt(argc, argv, i, "--backend", &v)) != 0) {
        if (r > 0) f->backend = v;
        return r;
    }
    if ((r = run_opt(argc, argv, i, "--devices", &v)) != 0) {
        if (r < 0) return r;
        int dev[RLX_MAX_DEVICES], n;
        rlx_diag d;
        rlx_diag_init(&d);
        if (rlx_devices_parse(v, dev, RLX_MAX_DEVICES, &n, &d)) {
            run_usage(usage, "%s", d.msg);
            return -1;
        }
        f->devices = v;
        return 1;
    }
    if ((r = run_opt(argc, argv, i, "--profile", &v)) != 0) {
        if (r > 0) f->profile = v;
        return r;
    }
    if ((r = run_opt(argc, argv, i, "--flow", &v)) != 0) {
        if (r > 0) f->flow = v;
        return r;
    }
    if ((r = run_opt(argc, argv, i, "--policy", &v)) != 0) {
        if (r < 0) return r;
        if (strcmp(v, "direct") != 0 && strcmp(v, "fusable") != 0) {
            run_usage(usage, "--policy: '%s' is not direct or fusable", v);
            return -1;
        }
        f->policy = v;
        return 1;
    }
    if ((r = run_opt(argc, argv, i, "--precision", &v)) != 0) {
        if (r < 0) return r;
        if (strcmp(v, "f32") && strcmp(v, "f16") && strcmp(v, "bf16")) {
            run_usage(usage, "--precision: '%s' is not f32, f16 or bf16", v);
            return -1;
        }
        f->precision = v;
        return 1;
    }
    if ((r = run_opt(argc, argv, i, "--mixed", &v)) != 0) {
        if (r < 0) return r;
        if (strcmp(v, "none") && strcmp(v, "auto")) {
            run_usage(usage, "--mixed: '%s' is not none or auto", v);
            return -1;
        }
        f->mixed = v;
        return 1;
    }
    if ((r = run_opt(argc, argv, i, "--threads", &v)) != 0) {
        if (r < 0) return r;
        return run_int("--threads", v, 0, 4096, &f->threads) == 0 ? 1 : -1;
    }
    return 0;
}

/* A one-line progress meter on a terminal while a large checkpoint is converted and
 * uploaded; silent for small models and when stderr is not a TTY. */
static void progress_meter(void *user, uint64_t done, uint64_t total)
{
    static int last = -1;
    (void)user;
    if (total < ((uint64_t)64 << 20)) return;
    int pct = (int)(100.0 * (double)done / (double)total);
    if (pct == last) return;
    last = pct;
    if (done >= total) fprintf(stderr, "\r\033[K");
    else fprintf(stderr, "\r%s: loading weights %3d%% (%llu / %llu MB)", run_prog_name, pct,
                 (unsigned long long)(done >> 20), (unsigned long long)(total >> 20));
    fflush(stderr);
}

void run_model_options(const run_model_flags *f, rlx_model_options *o)
{
    rlx_model_options_init(o);
    if (isatty(2)) o->progress = progress_meter;
    if (f->backend) o->backend = f->backend;
    if (f->profile) o->profile = f->profile;
    if (f->flow) o->flow_file = f->flow;
    if (f->policy) o->policy = f->policy;
    if (f->precision) o->precision = f->precision;
    if (f->mixed) o->mixed = f->mixed;
    o->devices = f->devices;
    o->threads = (int)f->threads;
}

double run_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* KiB below 1 MiB, MiB below 1 GiB, else GiB */
static void mem_str(uint64_t b, char *buf, size_t len)
{
    if (b >= (1ull << 30)) snprintf(buf, len, "%.2f GiB", (double)b / (1024.0 * 1024.0 * 1024.0));
    else if (b >= (1ull << 20)) snprintf(buf, len, "%.1f MiB", (double)b / (1024.0 * 1024.0));
    else snprintf(buf, len, "%.1f KiB", (double)b / 1024.0);
}

void run_print_memory(FILE *out, const rlx_memory *m)
{
    char w[32], k[32], a[32], b[32], f[32], t[32];
    mem_str(m->weights_bytes, w, sizeof w);
    mem_str(m->kv_cache_bytes, k, sizeof k);
    mem_str(m->arena_bytes, a, sizeof a);
    mem_str(m->buffer_bytes, b, sizeof b);
    mem_str(m->free_bytes, f, sizeof f);
    mem_str(m->total_bytes, t, sizeof t);
    fprintf(out, "%s: memory on %s: weights %s, KV cache %s, arena %s, buffers %s; %s free of %s\n", run_prog_name,
            m->device, w, k, a, b, m->total_bytes ? f : "?", m->total_bytes ? t : "?");
}
