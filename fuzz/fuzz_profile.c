/* libFuzzer: the strict profile parser. */
#include "base/internal.h"
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rlx_profile p;
    rlx_diag d;
    rlx_diag_init(&d);
    if (rlx_profile_parse((const char *)data, size, "fuzz.rlx.json", &p, &d) == RLX_OK) {
        /* every string field stays NUL-terminated */
        if (!memchr(p.fusion.policy, 0, sizeof p.fusion.policy) ||
            !memchr(p.precision.compute, 0, sizeof p.precision.compute) ||
            !memchr(p.backend.cpu.placement, 0, sizeof p.backend.cpu.placement))
            __builtin_trap();
    } else if (d.msg[0] == 0) {
        __builtin_trap();
    }
    return 0;
}
