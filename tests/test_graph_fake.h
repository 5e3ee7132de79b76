/* A fake backend for the graph tests: lists the ops a test chooses, records the
 * program it is asked to compile, and runs nothing. */
#ifndef TEST_GRAPH_FAKE_H
#define TEST_GRAPH_FAKE_H
#include "rlx/rlx.h"

#define FAKE_MAX 512
typedef struct fake_record {
    int compiled;
    uint32_t n_values, n_nodes;
    rlx_value_desc values[FAKE_MAX];
    char ops[FAKE_MAX][32];
    int32_t in[FAKE_MAX][5], out[FAKE_MAX][2];
    uint32_t n_in[FAKE_MAX], n_out[FAKE_MAX];
    int64_t dtype_attr[FAKE_MAX]; /* a node's int attribute dtype, -1 without one */
    size_t arena_bytes;
    int32_t phase; /* the program's RLX_PHASE_*, -1 when its struct_size lacks it */
} fake_record;

extern fake_record fake_rec;
/* ops: NULL-terminated list the backend claims */
const rlx_backend *fake_backend(const char *const *ops);
/* the same backend as a device one (no host memory: weights are uploaded), its
 * allocations and uploads recorded in order */
const rlx_backend *fake_device_backend(const char *const *ops);
typedef struct fake_mem {
    int n_alloc, n_upload;
    size_t alloc_bytes[FAKE_MAX];
    void *alloc_ptr[FAKE_MAX];
    void *upload_dst[FAKE_MAX];
    size_t upload_bytes[FAKE_MAX];
} fake_mem;
extern fake_mem fake_mem_rec;
int fake_count(const char *op);
#endif
