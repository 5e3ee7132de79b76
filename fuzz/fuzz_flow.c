/* libFuzzer: flow JSON loading (rlx_flow_load_json) and printing. */
#define _GNU_SOURCE
#include "fuzz_memfile.h"
#include "base/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static FILE *sink;
    if (!sink && !(sink = fopen("/dev/null", "w"))) abort();
    rlx_flow *f = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    if (rlx_flow_load_json(fuzz_memfile(data, size), &f, &d) == RLX_OK) {
        rlx_flow_print(f, sink);
        rlx_flow_free(f);
    } else if (d.msg[0] == 0 || f) {
        __builtin_trap();
    }
    return 0;
}
