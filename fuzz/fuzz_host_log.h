/* The harnesses link the parsers, not librlx's host table (framework/plugin/host.c): its
 * log is a no-op here. */
#ifndef RLX_FUZZ_HOST_LOG_H
#define RLX_FUZZ_HOST_LOG_H
#include "base/internal.h"

void rlx__host_log(int level, const char *who, const char *fmt, ...)
{
    (void)level;
    (void)who;
    (void)fmt;
}
#endif
