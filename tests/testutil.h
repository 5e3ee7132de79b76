/* Shared helpers for the Check test programs: paths, running the CLI, comparing. */
#ifndef RLX_TESTUTIL_H
#define RLX_TESTUTIL_H
#include <stddef.h>
#include <stdio.h>

/* $RLX_SRCDIR / $RLX_BUILDDIR / $RLX_FIXTURES joined with rel (static buffer per call slot) */
const char *tu_src(const char *rel);
const char *tu_build(const char *rel);
const char *tu_fixture(const char *rel);
/* A fresh temp folder under $TMPDIR (removed by tu_rmrf). */
char *tu_mkdtemp(void);
void tu_rmrf(const char *path);

typedef struct tu_result {
    int status;    /* exit code, or 128+signal */
    char *out;     /* stdout (NUL-terminated) */
    char *err;     /* stderr */
} tu_result;
/* Runs `sh -c cmd` (cmd may use $RLX_BUILDDIR etc.), captures both streams.
 * timeout_s: SIGKILL after that many seconds (status 137). */
tu_result tu_run(const char *cmd, int timeout_s);
/* tu_run with stdout a pipe nobody reads (its reader closed before cmd starts): out stays "" */
tu_result tu_run_closed_stdout(const char *cmd, int timeout_s);
void tu_result_free(tu_result *r);
/* builddir tool path: "tools/rlx-run" -> "$RLX_BUILDDIR/tools/rlx-run" */
const char *tu_tool(const char *name);

/* Runs every test of s (Check's SRunner, CK_NORMAL), frees it; the exit status for main:
 * EXIT_FAILURE when a test failed. */
struct Suite;
int tu_run_suite(struct Suite *s);

/* The model in dir on backend with threads (0: the default), asserted to open (the
 * failure names dir and the diag). */
struct rlx_model;
struct rlx_model *tu_open_model(const char *dir, const char *backend, int threads);

double tu_rel_l2(const float *a, const float *ref, size_t n);
char *tu_read_file(const char *path, size_t *len);
/* the whole of a seekable stream (a tmpfile a dump went to), NUL-terminated; NULL on failure */
char *tu_read_stream(FILE *f, size_t *len);
#endif
