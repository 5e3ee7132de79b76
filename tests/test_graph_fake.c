#include "test_graph_fake.h"
#include <stdlib.h>
#include <string.h>

fake_record fake_rec;
static rlx_backend fake;

static int f_probe(rlx_backend_probe *p) { p->available = 1; return 0; }
static int f_init(const rlx_backend_options *o, void **be, rlx_diag *d) { (void)o; (void)d; *be = &fake; return 0; }
fake_mem fake_mem_rec;

static void *f_alloc(void *be, size_t n, rlx_diag *d)
{
    (void)be;
    (void)d;
    void *p = calloc(1, n);
    if (fake_mem_rec.n_alloc < FAKE_MAX) {
        fake_mem_rec.alloc_bytes[fake_mem_rec.n_alloc] = n;
        fake_mem_rec.alloc_ptr[fake_mem_rec.n_alloc++] = p;
    }
    return p;
}
static int f_upload(void *be, void *dst, const void *src, size_t n, rlx_diag *d)
{
    (void)be;
    (void)d;
    memcpy(dst, src, n);
    if (fake_mem_rec.n_upload < FAKE_MAX) {
        fake_mem_rec.upload_bytes[fake_mem_rec.n_upload] = n;
        fake_mem_rec.upload_dst[fake_mem_rec.n_upload++] = dst;
    }
    return 0;
}
static void f_free(void *be, void *p) { (void)be; free(p); }
static int f_compile(void *be, const rlx_program *p, void **exe, rlx_diag *d)
{
    (void)be;
    (void)d;
    memset(&fake_rec, 0, sizeof fake_rec);
    fake_rec.compiled = 1;
    fake_rec.n_values = p->n_values;
    fake_rec.n_nodes = p->n_nodes;
    fake_rec.arena_bytes = p->arena_bytes;
    fake_rec.phase = p->struct_size >= RLX_STRUCT_SIZE(rlx_program, phase) ? p->phase : -1;
    for (uint32_t i = 0; i < p->n_values && i < FAKE_MAX; i++) {
        fake_rec.values[i] = p->values[i];
        fake_rec.values[i].name = NULL; /* borrowed strings do not outlive the model */
    }
    for (uint32_t i = 0; i < p->n_nodes && i < FAKE_MAX; i++) {
        snprintf(fake_rec.ops[i], sizeof fake_rec.ops[i], "%s", p->nodes[i].op);
        fake_rec.n_in[i] = p->nodes[i].n_inputs;
        fake_rec.n_out[i] = p->nodes[i].n_outputs;
        for (uint32_t k = 0; k < p->nodes[i].n_inputs && k < 5; k++) fake_rec.in[i][k] = p->nodes[i].inputs[k];
        for (uint32_t k = 0; k < p->nodes[i].n_outputs && k < 2; k++) fake_rec.out[i][k] = p->nodes[i].outputs[k];
        fake_rec.dtype_attr[i] = -1;
        for (uint32_t k = 0; k < p->nodes[i].n_attrs; k++)
            if (!strcmp(p->nodes[i].attrs[k].name, "dtype")) fake_rec.dtype_attr[i] = p->nodes[i].attrs[k].i;
    }
    *exe = &fake_rec;
    return 0;
}
static int f_execute(void *be, void *exe, void *const *ptrs, rlx_diag *d) { (void)be; (void)exe; (void)ptrs; (void)d; return 0; }
static void f_release(void *be, void *exe) { (void)be; (void)exe; }
static void f_teardown(void *be) { (void)be; }

const rlx_backend *fake_backend(const char *const *ops)
{
    static const char *const dtypes[] = {"f32", NULL};
    memset(&fake, 0, sizeof fake);
    fake.struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_backend, teardown);
    fake.name = "fake";
    fake.summary = "records programs";
    fake.flags = RLX_BACKEND_HOST_MEMORY;
    fake.ops = ops;
    fake.dtypes = dtypes;
    fake.probe = f_probe;
    fake.init = f_init;
    fake.alloc = f_alloc;
    fake.free = f_free;
    fake.compile = f_compile;
    fake.execute = f_execute;
    fake.release = f_release;
    fake.teardown = f_teardown;
    return &fake;
}

int fake_count(const char *op)
{
    int n = 0;
    for (uint32_t i = 0; i < fake_rec.n_nodes; i++) n += strcmp(fake_rec.ops[i], op) == 0;
    return n;
}

const rlx_backend *fake_device_backend(const char *const *ops)
{
    fake_backend(ops);
    memset(&fake_mem_rec, 0, sizeof fake_mem_rec);
    fake.flags = 0;
    fake.upload = f_upload;
    return &fake;
}
