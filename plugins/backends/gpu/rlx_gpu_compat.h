/* One spelling for the CUDA and HIP runtimes: the shared kernels and backend code use
 * the gpu* names below; RLX_GPU_HIP (set by the ROCm build) selects HIP. Both compilers
 * accept the <<<grid, block, smem, stream>>> launch syntax, wrapped in RLX_LAUNCH. */
#ifndef RLX_GPU_COMPAT_H
#define RLX_GPU_COMPAT_H

#if defined(RLX_GPU_HIP)
#include <hip/hip_runtime.h>
typedef hipError_t gpuError_t;
typedef hipStream_t gpuStream_t;
typedef hipDeviceProp_t gpuDeviceProp;
typedef hipGraph_t gpuGraph_t;
typedef hipGraphExec_t gpuGraphExec_t;
#define gpuSuccess hipSuccess
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuGetDeviceProperties hipGetDeviceProperties
/* HIP 5.2's hipGetErrorString gives the enum name for some codes; the runtime's own
 * sentence for the no-device case is what users search for. */
static inline const char *rlx_hip_error_text(hipError_t e)
{
    return e == hipErrorNoDevice ? "no ROCm-capable device is detected" : hipGetErrorString(e);
}
#define gpuGetErrorString rlx_hip_error_text
#define gpuGetLastError hipGetLastError
#define gpuSetDevice hipSetDevice
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuHostAlloc(p, n) hipHostMalloc((p), (n), 0)
#define gpuFreeHost hipHostFree
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpyHostToDevice hipMemcpyHostToDevice
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice hipMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags hipStreamCreateWithFlags
#define gpuStreamNonBlocking hipStreamNonBlocking
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuDriverGetVersion hipDriverGetVersion
#define gpuRuntimeGetVersion hipRuntimeGetVersion
#define gpuStreamBeginCapture(s) hipStreamBeginCapture((s), hipStreamCaptureModeThreadLocal)
#define gpuStreamEndCapture hipStreamEndCapture
#define gpuGraphInstantiate(e, g) hipGraphInstantiate((e), (g), NULL, NULL, 0)
#define gpuGraphLaunch hipGraphLaunch
#define gpuGraphDestroy hipGraphDestroy
#define gpuGraphExecDestroy hipGraphExecDestroy
typedef hipEvent_t gpuEvent_t;
#define gpuEventCreate hipEventCreate
#define gpuEventDestroy hipEventDestroy
#define gpuEventRecord hipEventRecord
#define gpuEventSynchronize hipEventSynchronize
#define gpuEventElapsedTime hipEventElapsedTime
#define gpuMemGetInfo hipMemGetInfo
#define gpuGetDevice hipGetDevice
#define gpuOccupancyMaxActiveBlocksPerMultiprocessor(b, k, t, m) \
    hipOccupancyMaxActiveBlocksPerMultiprocessor((b), (const void *)(k), (t), (m))
#define gpuFuncSetMaxDynSmem(k, n) hipFuncSetAttribute((const void *)(k), hipFuncAttributeMaxDynamicSharedMemorySize, (n))
#define gpuDevAttrSmCount hipDeviceAttributeMultiprocessorCount
#define gpuDeviceGetAttribute hipDeviceGetAttribute
#define RLX_GPU_VENDOR "rocm"
#define RLX_GPU_COUNT_FN "hipGetDeviceCount"
#define RLX_SHFL_XOR(v, m, w) __shfl_xor((v), (m), (w))
#else
#include <cuda_runtime.h>
typedef cudaError_t gpuError_t;
typedef cudaStream_t gpuStream_t;
typedef cudaDeviceProp gpuDeviceProp;
typedef cudaGraph_t gpuGraph_t;
typedef cudaGraphExec_t gpuGraphExec_t;
#define gpuSuccess cudaSuccess
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuGetErrorString cudaGetErrorString
#define gpuGetLastError cudaGetLastError
#define gpuSetDevice cudaSetDevice
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuHostAlloc(p, n) cudaMallocHost((p), (n))
#define gpuFreeHost cudaFreeHost
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpyHostToDevice cudaMemcpyHostToDevice
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuMemcpyDeviceToDevice cudaMemcpyDeviceToDevice
#define gpuStreamCreateWithFlags cudaStreamCreateWithFlags
#define gpuStreamNonBlocking cudaStreamNonBlocking
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuDriverGetVersion cudaDriverGetVersion
#define gpuRuntimeGetVersion cudaRuntimeGetVersion
#define gpuStreamBeginCapture(s) cudaStreamBeginCapture((s), cudaStreamCaptureModeThreadLocal)
#define gpuStreamEndCapture cudaStreamEndCapture
#define gpuGraphInstantiate(e, g) cudaGraphInstantiate((e), (g), 0)
#define gpuGraphLaunch cudaGraphLaunch
#define gpuGraphDestroy cudaGraphDestroy
#define gpuGraphExecDestroy cudaGraphExecDestroy
typedef cudaEvent_t gpuEvent_t;
#define gpuEventCreate cudaEventCreate
#define gpuEventDestroy cudaEventDestroy
#define gpuEventRecord cudaEventRecord
#define gpuEventSynchronize cudaEventSynchronize
#define gpuEventElapsedTime cudaEventElapsedTime
#define gpuMemGetInfo cudaMemGetInfo
#define gpuGetDevice cudaGetDevice
#define gpuOccupancyMaxActiveBlocksPerMultiprocessor cudaOccupancyMaxActiveBlocksPerMultiprocessor
#define gpuFuncSetMaxDynSmem(k, n) cudaFuncSetAttribute((k), cudaFuncAttributeMaxDynamicSharedMemorySize, (n))
#define gpuDevAttrSmCount cudaDevAttrMultiProcessorCount
#define gpuDeviceGetAttribute cudaDeviceGetAttribute
#define RLX_GPU_VENDOR "cuda"
#define RLX_GPU_COUNT_FN "cudaGetDeviceCount"
#define RLX_SHFL_XOR(v, m, w) __shfl_xor_sync(0xffffffffu, (v), (m), (w))
#endif

#define RLX_LAUNCH(kernel, grid, block, smem, stream) kernel<<<(grid), (block), (smem), (stream)>>>

/* Programmatic dependent launch (CUDA, sm_90 on): a kernel launched programmatically
 * (rlx_launch_pdl) may start once every block of the kernel before it has run
 * RLX_PDL_TRIGGER; before RLX_PDL_WAIT (which returns when that kernel has finished and
 * its writes are visible) it may only read constant data, e.g. prefetch its weights into
 * L2 (RLX_PREFETCH_L2). On HIP and older GPUs these are no-ops and plain launches. */
#if !defined(RLX_GPU_HIP) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define RLX_PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define RLX_PDL_TRIGGER() asm volatile("griddepcontrol.launch_dependents;" ::: "memory")
#define RLX_PREFETCH_L2(p) asm volatile("prefetch.global.L2 [%0];" ::"l"(p))
#else
#define RLX_PDL_WAIT() ((void)0)
#define RLX_PDL_TRIGGER() ((void)0)
#define RLX_PREFETCH_L2(p) ((void)(p))
#endif
#if defined(__cplusplus)
#include <stdlib.h>
#include <string.h>
/* a comparison switch set to "0" (RLX_GPU_...=0: the path it replaced) */
static inline int rlx_env_off(const char *name)
{
    const char *e = getenv(name);
    return e && strcmp(e, "0") == 0;
}
/* programmatic launches on for a GEMV (gemv = 1) or another kernel (RLX_GPU_PDL=0: none,
 * =gemv: GEMVs only, to compare) */
static inline int rlx_pdl_on(int gemv)
{
    static int mode = -1; /* 0 none, 1 GEMVs, 2 all */
    if (mode < 0) {
        const char *e = getenv("RLX_GPU_PDL");
        mode = e && strcmp(e, "0") == 0 ? 0 : e && strcmp(e, "gemv") == 0 ? 1 : 2;
    }
    return mode >= (gemv ? 1 : 2);
}
/* kernel k may take bytes of dynamic shared memory (above 48 KiB it must ask): asked once a
 * device (the attribute is the device's), opted being that kernel's own flags; the host
 * threads of several GPUs may share them */
template <typename K> static inline void smem_opt_in(K k, int bytes, unsigned char (&opted)[64])
{
    int dev = 0;
    if (bytes > 48 * 1024 && gpuGetDevice(&dev) == gpuSuccess && (dev >= 64 || !__atomic_load_n(&opted[dev], __ATOMIC_RELAXED))) {
        (void)gpuFuncSetMaxDynSmem(k, bytes);
        if (dev < 64)
            __atomic_store_n(&opted[dev], 1, __ATOMIC_RELAXED);
    }
}
/* Programmatic launches overlap a kernel with the one before it on each SM; an SM whose
 * shared memory / L1 split suits a kernel with little shared memory takes a block needing
 * more (decode attention, the normed-row GEMVs) only once it has drained and been
 * reconfigured. So every programmatic launch carries a carveout preference: the most shared
 * memory (100), RLX_GPU_CARVEOUT=pct another, -1 none (the driver's own): measured +2 % on
 * 188m and +5 % on 1B bf16 decode (H100, perf-notes Change 61). */
static inline int rlx_carveout_pref(void)
{
    static int carve = -2;
    if (carve == -2) {
        const char *e = getenv("RLX_GPU_CARVEOUT");
        const int v = e && *e ? atoi(e) : 100;
        carve = v >= 0 && v <= 100 ? v : -1;
    }
    return carve;
}
/* k<<<grid, block, smem, s>>>(args...), marked programmatic when pdl is set (CUDA) */
template <typename... P, typename... A>
static inline void rlx_launch_pdl(int pdl, void (*k)(P...), dim3 grid, dim3 block, size_t smem, gpuStream_t s,
                                  A... args)
{
#if defined(RLX_GPU_HIP)
    (void)pdl;
    k<<<grid, block, smem, s>>>(args...);
#else
    cudaLaunchAttribute at[2];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    const int carve = rlx_carveout_pref();
    at[1].id = cudaLaunchAttributePreferredSharedMemoryCarveout;
    at[1].val.sharedMemCarveout = carve < 0 ? 0u : (unsigned)carve;
    cudaLaunchConfig_t c = {};
    c.gridDim = grid;
    c.blockDim = block;
    c.dynamicSmemBytes = smem;
    c.stream = s;
    c.attrs = at;
    c.numAttrs = !pdl ? 0 : carve < 0 ? 1 : 2;
    (void)cudaLaunchKernelEx(&c, k, args...);
#endif
}
#endif

#endif
