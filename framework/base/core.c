/* Core host services handed to plugins: logging, diagnostics, topology, thread binding.
 * The log level comes from $RLX_LOG (error|warn|info|debug, or 0..3; default warn) so a
 * user can see why a plugin was refused or which placement was chosen. */
#include "base/internal.h"
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int log_level = RLX_LOG_WARN;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void log_level_init(void)
{
    const char *e = getenv("RLX_LOG");
    if (!e || !*e) return;
    static const char *const names[] = {"error", "warn", "info", "debug"};
    for (int i = 0; i < 4; i++)
        if (strcmp(e, names[i]) == 0) { log_level = i; return; }
    if (e[0] >= '0' && e[0] <= '3' && e[1] == 0) log_level = e[0] - '0';
}

static void host_vlog(int level, const char *who, const char *fmt, va_list ap)
{
    pthread_once(&log_once, log_level_init);
    if (level > log_level) return;
    static const char *const tags[] = {"error", "warning", "info", "debug"};
    const char *tag = (level >= 0 && level <= 3) ? tags[level] : "log";
    char line[1024];
    vsnprintf(line, sizeof line, fmt, ap);
    for (char *p = line; *p; p++)
        if (*p == '\n') *p = ' ';
    /* one write per line so concurrent workers do not interleave */
    fprintf(stderr, "rlx: %s: %s%s%s\n", tag, who ? who : "", who && *who ? ": " : "", line);
}

void rlx__host_log(int level, const char *who, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    host_vlog(level, who, fmt, ap);
    va_end(ap);
}

/* Same first-error-wins rule as rlx_diag_set, for plugins (which cannot link librlx). */
static void host_diag_set(rlx_diag *d, int code, const char *fmt, ...)
{
    if (!d) return;
    if (d->code != 0 && d->msg[0]) return;
    d->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->msg, sizeof d->msg, fmt, ap);
    va_end(ap);
    for (char *p = d->msg; *p; p++)
        if (*p == '\n') *p = ' ';
}

void rlx__host_fill_core(rlx_host_api *h)
{
    h->log = rlx__host_log;
    h->diag_set = host_diag_set;
    h->topology = rlx__topology_query;
    h->bind_thread = rlx__bind_thread;
}
