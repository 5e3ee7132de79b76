/* Plugin isolation: each candidate is opened, initialised and validated first in one
 * forked child, so a plugin that crashes, exits, hangs or lies about its descriptor is
 * refused before the host ever maps it. The child walks all candidates in order and
 * reports each step over a pipe; when it dies or stalls on candidate i, that one is
 * refused (signal, exit status or timeout) and a new child goes on from i + 1. */
#define _GNU_SOURCE
#include "plugin/isolate.h"
#include "base/internal.h"
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_TIMEOUT_MS 5000

static int child_fd = -1; /* the report pipe, only inside the child */
static size_t child_cur;

static const char *const phase_names[] = {"dlopen (constructors)", "rlx_plugin_init",
                                          "descriptor validation"};

/* Writes all of s, retrying short writes; the child has nothing else to do. */
static void put(const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(child_fd, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) _exit(3);
        s += w;
        n -= (size_t)w;
    }
}

void rlx__isolate_phase(int phase)
{
    if (child_fd < 0) return;
    char line[64];
    int n = snprintf(line, sizeof line, "P %zu %d\n", child_cur, phase);
    put(line, (size_t)n);
}

long rlx__isolate_timeout_ms(void)
{
    const char *e = getenv("RLX_PLUGIN_TIMEOUT_MS");
    char *end;
    long v = e && *e ? strtol(e, &end, 10) : 0;
    return e && *e && *end == 0 && v > 0 && v <= 3600000 ? v : DEFAULT_TIMEOUT_MS;
}

int rlx__isolate_enabled(void)
{
    const char *e = getenv("RLX_PLUGIN_ISOLATE");
    return e && strcmp(e, "1") == 0;
}

static long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A plugin calling exit() in the child: leave with its status at once, before other exit
 * handlers (a sanitizer's leak check, the parent's stdio buffers) can change or add to it. */
static void child_on_exit(int status, void *arg)
{
    (void)arg;
    _exit(status);
}

/* Child: checks candidates from..n-1, one "R i reason" line each ("R i" = accepted). */
static void child_main(int fd, size_t from, size_t n, rlx__isolate_check_fn check, void *ctx)
{
    child_fd = fd;
    on_exit(child_on_exit, NULL); /* registered last, so it runs first */
    for (size_t i = from; i < n; i++) {
        child_cur = i;
        char why[1024] = "";
        int bad = check(i, ctx, why, sizeof why);
        char line[1100];
        for (char *c = why; *c; c++)
            if (*c == '\n' || *c == '\r') *c = ' ';
        int len = bad ? snprintf(line, sizeof line, "R %zu %s\n", i, why[0] ? why : "refused")
                      : snprintf(line, sizeof line, "R %zu\n", i);
        put(line, (size_t)(len < (int)sizeof line ? len : (int)sizeof line - 1));
    }
    _exit(0); /* no atexit handlers or stdio flushes of the parent's buffers */
}

static char *fmt_dup(const char *fmt, ...) RLX_PRINTF(1, 2);
static char *fmt_dup(const char *fmt, ...)
{
    char buf[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return strdup(buf);
}

/* Parses one report line; updates *phase or stores a verdict. Returns the index the
 * line speaks about, or (size_t)-1 for garbage. */
static size_t take_line(char *line, size_t n, int *phase, char **reasons, int *done)
{
    char *end;
    if ((line[0] != 'P' && line[0] != 'R') || line[1] != ' ') return (size_t)-1;
    unsigned long long i = strtoull(line + 2, &end, 10);
    if (end == line + 2 || i >= n) return (size_t)-1;
    if (line[0] == 'P') {
        *phase = (int)strtol(end, NULL, 10);
        return (size_t)i;
    }
    done[i] = 1;
    if (*end == ' ') reasons[i] = strdup(end + 1);
    return (size_t)i;
}

int rlx__isolate_run(size_t n, rlx__isolate_check_fn check, void *ctx, char **reasons)
{
    int *done = calloc(n ? n : 1, sizeof *done);
    if (!done) return RLX_ERR_NOMEM;
    const long timeout = rlx__isolate_timeout_ms();
    size_t from = 0;
    while (from < n) {
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) != 0) break;
        fflush(NULL); /* the child must not inherit unwritten output */
        pid_t pid = fork();
        if (pid < 0) {
            close(fds[0]);
            close(fds[1]);
            break;
        }
        if (pid == 0) {
            close(fds[0]);
            child_main(fds[1], from, n, check, ctx);
        }
        close(fds[1]);
        size_t cur = from;
        int phase = 0, timed_out = 0;
        long deadline = now_ms() + timeout;
        char buf[4096];
        size_t have = 0;
        for (;;) {
            long left = deadline - now_ms();
            if (left <= 0) { timed_out = 1; break; }
            struct pollfd pf = {fds[0], POLLIN, 0};
            int pr = poll(&pf, 1, (int)left);
            if (pr < 0 && errno == EINTR) continue;
            if (pr == 0) { timed_out = 1; break; }
            ssize_t got = read(fds[0], buf + have, sizeof buf - 1 - have);
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) break; /* the child is gone */
            have += (size_t)got;
            char *nl;
            while ((nl = memchr(buf, '\n', have))) {
                *nl = 0;
                size_t i = take_line(buf, n, &phase, reasons, done);
                if (i != (size_t)-1) {
                    if (done[i]) { cur = i + 1; phase = 0; deadline = now_ms() + timeout; }
                    else if (i != cur) { cur = i; deadline = now_ms() + timeout; }
                }
                size_t used = (size_t)(nl + 1 - buf);
                memmove(buf, nl + 1, have - used);
                have -= used;
            }
            if (have == sizeof buf - 1) have = 0; /* an overlong line: drop it */
        }
        close(fds[0]);
        if (timed_out) kill(pid, SIGKILL);
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {}
        if (cur >= n) break;
        const char *ph = phase >= 0 && phase < 3 ? phase_names[phase] : "?";
        if (timed_out)
            reasons[cur] = fmt_dup("isolation: no answer within %ld ms (hung in %s)", timeout, ph);
        else if (WIFSIGNALED(st))
            reasons[cur] = fmt_dup("isolation: killed by signal %d (%s) in %s", WTERMSIG(st),
                                   strsignal(WTERMSIG(st)), ph);
        else if (WIFEXITED(st))
            reasons[cur] = fmt_dup("isolation: the process exited with status %d in %s",
                                   WEXITSTATUS(st), ph);
        else
            reasons[cur] = fmt_dup("isolation: the check process ended in %s", ph);
        if (!reasons[cur]) { free(done); return RLX_ERR_NOMEM; }
        done[cur] = 1;
        from = cur + 1;
    }
    /* fork or pipe failed: whatever was not checked is refused, never loaded unchecked */
    for (size_t i = 0; i < n; i++)
        if (!done[i] && !reasons[i] &&
            !(reasons[i] = fmt_dup("isolation: could not start the check process: %s",
                                   strerror(errno)))) {
            free(done);
            return RLX_ERR_NOMEM;
        }
    free(done);
    return RLX_OK;
}
