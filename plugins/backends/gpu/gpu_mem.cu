/* Free device memory (cudaMemGetInfo / hipMemGetInfo) named with the device, and the
 * ceilings rlx-bench compares a run with, measured on the backend's own stream: the
 * device-to-device copy bandwidth (the decode floor: weights are streamed once per token)
 * and the GEMM rate at the caller's shape (the prefill MLP's). */
#include "gpu_mem.h"
#include <stdio.h>
#include <string.h>

int gpu_mem_query(int device, rlx_mem_info *out, char *err, size_t errlen)
{
    size_t fr = 0, tot = 0;
    gpuDeviceProp pr;
    gpuError_t e = gpuSetDevice(device);
    if (e == gpuSuccess) e = gpuMemGetInfo(&fr, &tot);
    if (e == gpuSuccess) e = gpuGetDeviceProperties(&pr, device);
    if (e != gpuSuccess) {
        snprintf(err, errlen, "device %d: memory query: %s", device, gpuGetErrorString(e));
        (void)gpuGetLastError();
        return RLX_ERR_DEVICE;
    }
    out->free_bytes = fr;
    out->total_bytes = tot;
    snprintf(out->device, sizeof out->device, "%s:%d %.100s", RLX_GPU_VENDOR, device, pr.name);
    return 0;
}

/* ms of reps launches of what, after one untimed launch */
template <typename F> static float timed(gpuStream_t s, int reps, F what, gpuError_t *e)
{
    gpuEvent_t a = NULL, b = NULL;
    float ms = 0;
    *e = gpuEventCreate(&a);
    if (*e == gpuSuccess) *e = gpuEventCreate(&b);
    if (*e == gpuSuccess) *e = what();
    if (*e == gpuSuccess) *e = gpuEventRecord(a, s);
    for (int r = 0; r < reps && *e == gpuSuccess; r++) *e = what();
    if (*e == gpuSuccess) *e = gpuEventRecord(b, s);
    if (*e == gpuSuccess) *e = gpuEventSynchronize(b);
    if (*e == gpuSuccess) *e = gpuEventElapsedTime(&ms, a, b);
    if (a) (void)gpuEventDestroy(a);
    if (b) (void)gpuEventDestroy(b);
    return ms;
}

static int copy_rate(gpuStream_t s, double *gbps, char *err, size_t errlen)
{
    const size_t bytes = (size_t)512 << 20; /* well past any cache */
    void *x = NULL, *y = NULL;
    gpuError_t e = gpuMalloc(&x, bytes);
    if (e == gpuSuccess) e = gpuMalloc(&y, bytes);
    if (e == gpuSuccess) e = gpuMemsetAsync(x, 0, bytes, s);
    float ms = 0;
    const int reps = 20;
    if (e == gpuSuccess)
        ms = timed(s, reps, [&] { return gpuMemcpyAsync(y, x, bytes, gpuMemcpyDeviceToDevice, s); }, &e);
    if (x) (void)gpuFree(x);
    if (y) (void)gpuFree(y);
    if (e != gpuSuccess) {
        snprintf(err, errlen, "copy bandwidth: %s", gpuGetErrorString(e));
        (void)gpuGetLastError();
        return RLX_ERR_DEVICE;
    }
    *gbps = ms > 0 ? 2.0 * (double)bytes * reps / ((double)ms * 1e6) : 0; /* read + write */
    return 0;
}

static int gemm_rate(gpuStream_t s, gpu_blas *blas, rlx_ceilings *io, char *err, size_t errlen)
{
    int64_t M = io->gemm_m, K = io->gemm_k, N = io->gemm_n;
    int dt = io->dtype == RLX_F16 ? GDT_F16 : io->dtype == RLX_BF16 ? GDT_BF16 : GDT_F32;
    size_t es = dt == GDT_F32 ? 4 : 2;
    void *a = NULL, *b = NULL, *c = NULL;
    gpuError_t e = gpuMalloc(&a, (size_t)(M * K) * es);
    if (e == gpuSuccess) e = gpuMalloc(&b, (size_t)(N * K) * es);
    if (e == gpuSuccess) e = gpuMalloc(&c, (size_t)(M * N) * es);
    if (e == gpuSuccess) e = gpuMemsetAsync(a, 0, (size_t)(M * K) * es, s);
    if (e == gpuSuccess) e = gpuMemsetAsync(b, 0, (size_t)(N * K) * es, s);
    gpu_ten ta = {a, dt}, tb = {b, dt}, tc = {c, dt};
    char berr[256] = "";
    int bad = 0;
    float ms = 0;
    const int reps = 20;
    /* weights are [N, K] (b_nk = 1), the output in the operands' dtype, as the matmuls run */
    if (e == gpuSuccess)
        ms = timed(s, reps, [&] {
            if (blas) bad = bad || gpu_blas_gemm_t(blas, 1, ta, tb, tc, M, N, K, berr, sizeof berr);
            else gpu_gemm_t(s, 1, ta, tb, tc, M, N, K);
            return bad ? gpuSuccess : gpuGetLastError();
        }, &e);
    if (a) (void)gpuFree(a);
    if (b) (void)gpuFree(b);
    if (c) (void)gpuFree(c);
    if (bad || e != gpuSuccess) {
        snprintf(err, errlen, "GEMM rate [%lld,%lld,%lld]: %s", (long long)M, (long long)K, (long long)N,
                 bad ? berr : gpuGetErrorString(e));
        (void)gpuGetLastError();
        return RLX_ERR_DEVICE;
    }
    io->gemm_gflops = ms > 0 ? 2.0 * (double)M * (double)N * (double)K * reps / ((double)ms * 1e6) : 0;
    snprintf(io->gemm_library, sizeof io->gemm_library, "%s", blas ? gpu_blas_name : "own");
    return 0;
}

int gpu_ceilings(int device, gpuStream_t s, gpu_blas *blas, rlx_ceilings *io, char *err, size_t errlen)
{
    if (!io || io->struct_size < RLX_STRUCT_SIZE(rlx_ceilings, gemm_library)) {
        snprintf(err, errlen, "measure_ceilings: struct too small");
        return RLX_ERR_INVALID;
    }
    gpuError_t e = gpuSetDevice(device);
    if (e != gpuSuccess) {
        snprintf(err, errlen, "device %d: %s", device, gpuGetErrorString(e));
        return RLX_ERR_DEVICE;
    }
    int rc = copy_rate(s, &io->copy_gb_per_s, err, errlen);
    if (!rc && io->gemm_m > 0 && io->gemm_k > 0 && io->gemm_n > 0) rc = gemm_rate(s, blas, io, err, errlen);
    return rc;
}
