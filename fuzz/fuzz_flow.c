/* libFuzzer: flow JSON loading (rlx_flow_load_json), printing, and writing back
 * (rlx_flow_write_json): what loads, written and reloaded, prints the same. */
#define _GNU_SOURCE
#include <string.h>
#include "fuzz_memfile.h"
#include "base/internal.h"

static char *printed(const rlx_flow *f)
{
    char *t = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&t, &n);
    if (!m) abort();
    rlx_flow_print(f, m);
    fclose(m);
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rlx_flow *f = NULL, *g = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    if (rlx_flow_load_json(fuzz_memfile(data, size), &f, &d) != RLX_OK) {
        if (d.msg[0] == 0 || f) __builtin_trap();
        return 0;
    }
    char *w = NULL;
    size_t n = 0;
    FILE *m = open_memstream(&w, &n);
    if (!m || rlx_flow_write_json(f, m, &d) != RLX_OK) __builtin_trap();
    fclose(m);
    if (rlx_flow_load_json(fuzz_memfile((const uint8_t *)w, n), &g, &d) != RLX_OK) __builtin_trap();
    char *a = printed(f), *b = printed(g);
    if (strcmp(a, b)) __builtin_trap();
    free(a);
    free(b);
    free(w);
    rlx_flow_free(g);
    rlx_flow_free(f);
    return 0;
}
