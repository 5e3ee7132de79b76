/* Diagnostics: one line naming what is wrong, plus a status code. */
#include "base/internal.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

RLX_API void rlx_diag_init(rlx_diag *d)
{
    if (!d) return;
    memset(d, 0, sizeof *d);
    d->struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_diag, msg);
}

RLX_API int rlx_diag_set(rlx_diag *d, int code, const char *fmt, ...)
{
    if (!d) return code;
    /* the first error wins: later ones are usually consequences */
    if (d->code != 0 && d->msg[0]) return code;
    d->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->msg, sizeof d->msg, fmt, ap);
    va_end(ap);
    for (char *p = d->msg; *p; p++)
        if (*p == '\n') *p = ' ';
    return code;
}

RLX_API const char *rlx_status_name(int code)
{
    switch (code) {
    case RLX_OK: return "ok";
    case RLX_ERR_INVALID: return "invalid input";
    case RLX_ERR_IO: return "i/o error";
    case RLX_ERR_NOMEM: return "out of memory";
    case RLX_ERR_UNSUPPORTED: return "unsupported";
    case RLX_ERR_NOT_FOUND: return "not found";
    case RLX_ERR_DEVICE: return "device error";
    default: return "internal error";
    }
}
