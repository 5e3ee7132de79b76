/* Plugin isolation (isolate.c): check candidates in a forked child before the host
 * dlopens any of them. */
#ifndef RLX_ISOLATE_H
#define RLX_ISOLATE_H
#include <stddef.h>

/* Checks candidate i inside the child: 0 accepted, else nonzero with a one-line reason
 * in why. Calls rlx__isolate_phase before each step so a crash is attributed. */
typedef int (*rlx__isolate_check_fn)(size_t i, void *ctx, char *why, size_t len);

enum { RLX__PHASE_DLOPEN = 0, RLX__PHASE_INIT = 1, RLX__PHASE_VALIDATE = 2 };

/* Runs check on candidates 0..n-1 in forked children (one, unless one dies or stalls);
 * reasons[i] (zeroed by the caller) gets a malloc'd reason for each refused one.
 * Returns RLX_OK or RLX_ERR_NOMEM. */
int rlx__isolate_run(size_t n, rlx__isolate_check_fn check, void *ctx, char **reasons);
void rlx__isolate_phase(int phase); /* no-op outside the child */
int rlx__isolate_enabled(void);     /* RLX_PLUGIN_ISOLATE=1 */
long rlx__isolate_timeout_ms(void); /* RLX_PLUGIN_TIMEOUT_MS, default 5000 */
#endif
