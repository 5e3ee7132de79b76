/* The GPU backend plugins on any machine: loadable through the real host table, the
 * vtable as documented, and without a device a probe that says why (the runtime's own
 * words) and an init that fails with a message instead of crashing. The registry loads a
 * thin plugin (gpu/gpu_stub.c) whose probe, without the driver's device node, names the
 * node and loads nothing; the real backend is in impl/ and is checked directly too. */
#include "rlx/rlx.h"
#include "testutil.h"

#include <check.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 1 if a mapping of this process names a file containing `lib` */
static int mapped(const char *lib)
{
    FILE *f = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(f);
    char line[4096];
    int found = 0;
    while (!found && fgets(line, sizeof line, f)) found = strstr(line, lib) != NULL;
    fclose(f);
    return found;
}

static const rlx_backend *load_plugin(const char *rel, const char *name)
{
    const char *path = tu_build(rel);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(h != NULL, "dlopen %s: %s", path, dlerror());
    rlx_plugin_init_fn init = (rlx_plugin_init_fn)dlsym(h, RLX_PLUGIN_ENTRY_NAME);
    ck_assert_msg(init != NULL, "%s lacks %s", path, RLX_PLUGIN_ENTRY_NAME);
    const rlx_plugin_desc *desc = init(rlx_host_api_get());
    ck_assert_ptr_nonnull(desc);
    ck_assert_uint_eq(desc->abi_major, RLX_ABI_MAJOR);
    ck_assert_uint_eq(desc->n_backends, 1);
    const rlx_backend *b = desc->backends[0];
    ck_assert_str_eq(b->name, name);
    ck_assert_int_eq(b->priority, 100);
    ck_assert_uint_eq(b->flags, 0); /* device memory: the host uploads weights */
    return b;
}

/* the real backend (impl/): its op list as documented */
static const rlx_backend *load_backend(const char *rel, const char *name)
{
    const rlx_backend *b = load_plugin(rel, name);
    int has_attn = 0, has_mm = 0, has_reshape = 0;
    for (const char *const *o = b->ops; *o; o++) {
        has_attn |= strcmp(*o, "rlx.attention") == 0;
        has_mm |= strcmp(*o, "rlx.matmul") == 0;
        has_reshape |= strcmp(*o, "rlx.reshape") == 0;
    }
    ck_assert(has_attn && has_mm && !has_reshape);
    ck_assert_str_eq(b->dtypes[0], "f32");
    return b;
}

/* reasons[]: the exact texts that mean "no device here" for this runtime */
static void check_probe_and_init(const rlx_backend *b, const char *const *reasons,
                                 const char *dev_prefix)
{
    rlx_backend_probe pr;
    memset(&pr, 0xab, sizeof pr);
    pr.struct_size = sizeof pr;
    ck_assert_int_eq(b->probe(&pr), 0);
    rlx_backend_options opt;
    memset(&opt, 0, sizeof opt);
    opt.struct_size = sizeof opt;
    rlx_diag d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    void *be = (void *)&opt;
    if (pr.available) { /* a machine with a device: it must be described and usable */
        ck_assert_uint_ge(pr.n_devices, 1);
        ck_assert_msg(strncmp(pr.devices[0], dev_prefix, strlen(dev_prefix)) == 0, "%s",
                      pr.devices[0]);
        ck_assert_int_eq(b->init(&opt, &be, &d), 0);
        b->teardown(be);
        return;
    }
    int known = 0;
    for (const char *const *r = reasons; *r; r++)
        known |= strcmp(pr.reason, *r) == 0;
    ck_assert_msg(known, "unexpected probe reason '%s'", pr.reason);
    ck_assert_uint_eq(pr.n_devices, 0);
    int rc = b->init(&opt, &be, &d);
    ck_assert_int_eq(rc, RLX_ERR_DEVICE);
    ck_assert_int_eq(d.code, RLX_ERR_DEVICE);
    ck_assert_ptr_null(be);
    ck_assert_msg(strstr(d.msg, pr.reason) != NULL, "init message '%s'", d.msg);
    ck_assert_msg(strncmp(d.msg, b->name, strlen(b->name)) == 0, "init message '%s'", d.msg);
    /* a second probe answers the same: nothing sticky was left behind */
    rlx_backend_probe p2;
    memset(&p2, 0, sizeof p2);
    p2.struct_size = sizeof p2;
    b->probe(&p2);
    ck_assert_str_eq(p2.reason, pr.reason);
}

#ifdef RLX_TEST_CUDA
START_TEST(cuda_probe_without_device)
{
    static const char *const reasons[] = {
        "cudaGetDeviceCount: CUDA driver version is insufficient for CUDA runtime version",
        "cudaGetDeviceCount: no CUDA-capable device is detected", NULL};
    const rlx_backend *b =
        load_backend("plugins/backends/cuda/impl/.libs/rlx-backend-cuda.so", "cuda");
    check_probe_and_init(b, reasons, "cuda:0 ");
}
END_TEST
#endif

#ifdef RLX_TEST_CUDA
/* Opening the registry over every built plugin and probing every backend maps neither
 * cuBLAS nor cuBLASLt: they load at the CUDA backend's init only. */
START_TEST(cuda_probe_leaves_cublas_unloaded)
{
    const char *path = getenv("RLX_PLUGIN_PATH");
    ck_assert_ptr_nonnull(path);
    rlx_registry *r = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_registry_open(path, &r, &d), RLX_OK);
    int n_backends = 0, saw_cuda = 0;
    for (size_t i = 0; i < rlx_registry_count(r); i++) {
        const rlx_plugin_info *p = rlx_registry_plugin(r, i);
        for (uint32_t k = 0; p->loaded && k < p->desc->n_backends; k++) {
            const rlx_backend *b = p->desc->backends[k];
            ck_assert_ptr_nonnull(rlx_registry_probe(r, b));
            saw_cuda |= strcmp(b->name, "cuda") == 0;
            n_backends++;
        }
    }
    ck_assert_int_ge(n_backends, 2);
    ck_assert(saw_cuda);
    ck_assert_msg(mapped("rlx-backend-cuda.so"), "the CUDA plugin is not loaded");
    ck_assert_msg(!mapped("libcublas"), "cuBLAS was mapped by plugin load or probe");
    rlx_registry_close(r);
}
END_TEST
#endif

/* 1 when one of the ':'-separated device nodes exists */
static int any_node(const char *nodes)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", nodes);
    for (char *t = strtok(buf, ":"); t; t = strtok(NULL, ":"))
        if (access(t, F_OK) == 0) return 1;
    return 0;
}

/* The thin plugin: without the driver's node its probe names the node, init fails with
 * that reason, and neither the implementation nor the GPU runtime is mapped; with the
 * node it is the real backend (ops filled in, the device described). */
static void check_stub(const char *rel, const char *name, const char *nodes, const char *reason,
                       const char *impl_file, const char *runtime, const char *dev_prefix)
{
    const rlx_backend *b = load_plugin(rel, name);
    ck_assert_msg(!mapped(runtime), "%s mapped by plugin load", runtime);
    if (any_node(nodes)) { /* a machine with the driver: the real backend answers */
        rlx_backend_probe pr;
        memset(&pr, 0, sizeof pr);
        pr.struct_size = sizeof pr;
        ck_assert_int_eq(b->probe(&pr), 0);
        ck_assert(mapped(impl_file));
        ck_assert_ptr_nonnull(b->ops[0]);
        if (pr.available) ck_assert_msg(strncmp(pr.devices[0], dev_prefix, strlen(dev_prefix)) == 0, "%s", pr.devices[0]);
        return;
    }
    ck_assert_ptr_null(b->ops[0]); /* nothing known before the implementation loads */
    const char *const reasons[] = {reason, NULL};
    check_probe_and_init(b, reasons, dev_prefix);
    ck_assert_msg(!mapped(impl_file), "the implementation was loaded without a device node");
    ck_assert_msg(!mapped(runtime), "%s was mapped without a device node", runtime);
}

#ifdef RLX_TEST_CUDA
START_TEST(cuda_stub_without_driver)
{
    check_stub("plugins/backends/cuda/.libs/rlx-backend-cuda.so", "cuda", "/dev/nvidiactl:/dev/dxg",
               "no NVIDIA device node (/dev/nvidiactl, /dev/dxg)", "impl/.libs/rlx-backend-cuda.so",
               "libcudart", "cuda:0 ");
}
END_TEST
#endif

#ifdef RLX_TEST_ROCM
START_TEST(rocm_stub_without_driver)
{
    check_stub("plugins/backends/rocm/.libs/rlx-backend-rocm.so", "rocm", "/dev/kfd",
               "no AMD KFD device node (/dev/kfd)", "impl/.libs/rlx-backend-rocm.so", "libamdhip64",
               "rocm:0 ");
}
END_TEST
#endif

#ifdef RLX_TEST_ROCM
START_TEST(rocm_probe_without_device)
{
    static const char *const reasons[] = {"hipGetDeviceCount: no ROCm-capable device is detected",
                                          NULL};
    const rlx_backend *b =
        load_backend("plugins/backends/rocm/impl/.libs/rlx-backend-rocm.so", "rocm");
    check_probe_and_init(b, reasons, "rocm:0 ");
}
END_TEST
#endif

int main(void)
{
#if !defined(RLX_TEST_CUDA) && !defined(RLX_TEST_ROCM)
    return 77; /* no GPU plugin configured */
#else
    Suite *s = suite_create("gpu_probe");
    TCase *tc = tcase_create("probe");
#ifdef RLX_TEST_CUDA
    tcase_add_test(tc, cuda_probe_without_device);
    tcase_add_test(tc, cuda_probe_leaves_cublas_unloaded);
    tcase_add_test(tc, cuda_stub_without_driver);
#endif
#ifdef RLX_TEST_ROCM
    tcase_add_test(tc, rocm_probe_without_device);
    tcase_add_test(tc, rocm_stub_without_driver);
#endif
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
#endif
}
