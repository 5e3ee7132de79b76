#define _GNU_SOURCE
#include "testutil.h"
#include "rlx/rlx.h"
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *join(const char *env, const char *fallback, const char *rel)
{
    static char bufs[8][4096];
    static int slot;
    char *b = bufs[slot++ % 8];
    const char *base = getenv(env);
    snprintf(b, 4096, "%s/%s", base ? base : fallback, rel);
    return b;
}
const char *tu_src(const char *rel) { return join("RLX_SRCDIR", ".", rel); }
const char *tu_build(const char *rel) { return join("RLX_BUILDDIR", ".", rel); }
const char *tu_fixture(const char *rel) { return join("RLX_FIXTURES", "tests/fixtures", rel); }
const char *tu_tool(const char *name) { return tu_build(name); }

char *tu_mkdtemp(void)
{
    const char *t = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/rlx-test-XXXXXX", t ? t : "/tmp");
    char *p = mkdtemp(tmpl);
    return p ? strdup(p) : NULL;
}

void tu_rmrf(const char *path)
{
    if (!path || !*path || strcmp(path, "/") == 0) return;
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) { /* best effort */ }
}

static void append(char **buf, size_t *len, size_t *cap, const char *src, size_t n)
{
    if (*len + n + 1 > *cap) {
        *cap = (*len + n + 1) * 2;
        *buf = realloc(*buf, *cap);
    }
    memcpy(*buf + *len, src, n);
    *len += n;
    (*buf)[*len] = 0;
}

/* closed_out: the command's stdout is a pipe whose reader has gone before it starts */
static tu_result run(const char *cmd, int timeout_s, int closed_out)
{
    tu_result r = {-1, calloc(1, 1), calloc(1, 1)};
    int po[2], pe[2];
    if (pipe(po) || pipe(pe)) return r;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(po[1], 1);
        dup2(pe[1], 2);
        close(po[0]); close(pe[0]); close(po[1]); close(pe[1]);
        setpgid(0, 0);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(po[1]); close(pe[1]);
    if (closed_out) {
        close(po[0]);
        po[0] = -1;
    }
    size_t ol = 0, oc = 1, el = 0, ec = 1;
    struct pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
    int open_fds = closed_out ? 1 : 2;
    time_t start = time(NULL);
    int killed = 0;
    while (open_fds > 0) {
        int left = timeout_s - (int)(time(NULL) - start);
        if (left <= 0) { kill(-pid, SIGKILL); killed = 1; break; }
        int n = poll(fds, 2, 1000);
        if (n < 0 && errno != EINTR) break;
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            char buf[65536];
            ssize_t k = read(fds[i].fd, buf, sizeof buf);
            if (k <= 0) { close(fds[i].fd); fds[i].fd = -1; open_fds--; continue; }
            if (i == 0) append(&r.out, &ol, &oc, buf, (size_t)k);
            else append(&r.err, &el, &ec, buf, (size_t)k);
        }
    }
    for (int i = 0; i < 2; i++) if (fds[i].fd >= 0) close(fds[i].fd);
    int st = 0;
    waitpid(pid, &st, 0);
    if (killed) r.status = 137;
    else if (WIFEXITED(st)) r.status = WEXITSTATUS(st);
    else if (WIFSIGNALED(st)) r.status = 128 + WTERMSIG(st);
    return r;
}

tu_result tu_run(const char *cmd, int timeout_s) { return run(cmd, timeout_s, 0); }

tu_result tu_run_closed_stdout(const char *cmd, int timeout_s) { return run(cmd, timeout_s, 1); }

void tu_result_free(tu_result *r)
{
    free(r->out);
    free(r->err);
    r->out = r->err = NULL;
}

double tu_rel_l2(const float *a, const float *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (den == 0) return sqrt(num);
    return sqrt(num / den);
}

char *tu_read_stream(FILE *f, size_t *len)
{
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) { free(b); b = NULL; }
    if (b) { b[n] = 0; if (len) *len = (size_t)n; }
    return b;
}

char *tu_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *b = tu_read_stream(f, len);
    fclose(f);
    return b;
}

int tu_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

rlx_model *tu_open_model(const char *dir, const char *backend, int threads)
{
    rlx_model_options o;
    rlx_model_options_init(&o);
    o.backend = backend;
    o.threads = threads;
    rlx_model *m = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_model_open(dir, &o, &m, &d) == 0, "%s: %s", dir, d.msg);
    return m;
}
