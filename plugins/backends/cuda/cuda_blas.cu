/* cuBLAS for rlx.matmul / rlx.matmul_nn (f32: cublasSgemm; f16/bf16: cublasGemmEx with
 * f32 compute). cuBLAS is column-major: a row-major [R,C]
 * buffer is its [C,R] matrix, so row-major C = A·Bᵀ is column-major Cᵀ = B·Aᵀ,
 * i.e. sgemm(op(B)=T, op(A)=N) with m=N, n=M. Full f32 math (no TF32).
 *
 * The plugin does not link against cuBLAS: libcublas (and the libcublasLt it pulls in)
 * costs ~300 ms and ~150 MB to map and relocate, so it is dlopen'ed the first time a
 * session creates a handle (backend init), never at plugin load or probe. Only the
 * header's types are used here; every entry point goes through the table below. */
#include "gpu_vendor.h"
#include <cublas_v2.h>
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

/* the soname of the cuBLAS major version this plugin was compiled against */
#define RLX_STR2(x) #x
#define RLX_STR(x) RLX_STR2(x)
#define CUBLAS_SONAME "libcublas.so." RLX_STR(CUBLAS_VER_MAJOR)

static struct {
    void *lib;
    decltype(&cublasCreate_v2) create;
    decltype(&cublasDestroy_v2) destroy;
    decltype(&cublasSetStream_v2) set_stream;
    decltype(&cublasSetWorkspace_v2) set_workspace;
    decltype(&cublasSetMathMode) set_math_mode;
    decltype(&cublasSgemm_v2) sgemm;
    /* cublasGemmEx is overloaded in C++: the C entry point, spelled out */
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                              const void *, const void *, cudaDataType, int, const void *,
                              cudaDataType, int, const void *, void *, cudaDataType, int,
                              cublasComputeType_t, cublasGemmAlgo_t);
    decltype(&cublasGetStatusString) status_string;
    char err[256];
    int state; /* 0 not tried, 1 loaded, -1 failed (err says why) */
} cublas_api;
static pthread_once_t cublas_once = PTHREAD_ONCE_INIT;

static void cublas_load(void)
{
    void *h = dlopen(CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(cublas_api.err, sizeof cublas_api.err, "cannot load %s (cuBLAS): %s", CUBLAS_SONAME,
                 e ? e : "not found");
        cublas_api.state = -1;
        return;
    }
#define SYM(field, name)                                                                          \
    do {                                                                                          \
        *(void **)&cublas_api.field = dlsym(h, name);                                             \
        if (!cublas_api.field) {                                                                  \
            snprintf(cublas_api.err, sizeof cublas_api.err, "%s: symbol %s not found", CUBLAS_SONAME, \
                     name);                                                                       \
            dlclose(h);                                                                           \
            cublas_api.state = -1;                                                                \
            return;                                                                               \
        }                                                                                         \
    } while (0)
    SYM(create, "cublasCreate_v2");
    SYM(destroy, "cublasDestroy_v2");
    SYM(set_stream, "cublasSetStream_v2");
    SYM(set_workspace, "cublasSetWorkspace_v2");
    SYM(set_math_mode, "cublasSetMathMode");
    SYM(sgemm, "cublasSgemm_v2");
    SYM(gemm_ex, "cublasGemmEx");
    SYM(status_string, "cublasGetStatusString");
#undef SYM
    cublas_api.lib = h; /* kept for the life of the process: handles may outlive a backend */
    cublas_api.state = 1;
}

struct gpu_blas {
    cublasHandle_t h;
    void *workspace; /* fixed, so that graph capture never allocates */
};

const char gpu_blas_name[] = "cuBLAS (" CUBLAS_SONAME ", loaded at init)";

#define BLAS_WORKSPACE (32u << 20)

int gpu_blas_create(gpu_blas **out, gpuStream_t s, char *err, size_t errlen)
{
    *out = NULL;
    pthread_once(&cublas_once, cublas_load);
    if (cublas_api.state != 1) {
        snprintf(err, errlen, "%s (RLX_GPU_GEMM=own runs without it)", cublas_api.err);
        return -1;
    }
    gpu_blas *b = new gpu_blas();
    cublasStatus_t st = cublas_api.create(&b->h);
    if (st != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "cublasCreate: %s", cublas_api.status_string(st));
        delete b;
        return -1;
    }
    cudaError_t ce = cudaMalloc(&b->workspace, BLAS_WORKSPACE);
    if (ce != cudaSuccess) {
        snprintf(err, errlen, "cuBLAS workspace: %s", cudaGetErrorString(ce));
        cublas_api.destroy(b->h);
        delete b;
        return -1;
    }
    cublas_api.set_stream(b->h, s);
    cublas_api.set_workspace(b->h, b->workspace, BLAS_WORKSPACE);
    cublas_api.set_math_mode(b->h, CUBLAS_DEFAULT_MATH);
    *out = b;
    return 0;
}

void gpu_blas_destroy(gpu_blas *b)
{
    if (!b)
        return;
    cublas_api.destroy(b->h);
    cudaFree(b->workspace);
    delete b;
}

static cudaDataType_t cuda_type(int dt)
{
    return dt == GDT_BF16 ? CUDA_R_16BF : dt == GDT_F16 ? CUDA_R_16F : CUDA_R_32F;
}

int gpu_blas_gemm_t(gpu_blas *b, int b_nk, gpu_ten a, gpu_ten bm, gpu_ten c, int64_t M, int64_t N,
                    int64_t K, char *err, size_t errlen)
{
    const float one = 1.0f, zero = 0.0f;
    if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) {
        snprintf(err, errlen, "cuBLAS: a dimension exceeds 2^31");
        return -1;
    }
    if (a.dt != bm.dt || (c.dt != GDT_F32 && c.dt != a.dt)) {
        snprintf(err, errlen, "cuBLAS: no GEMM for dtypes %d x %d -> %d", a.dt, bm.dt, c.dt);
        return -1;
    }
    cublasStatus_t st;
    const char *fn;
    cublasOperation_t opb = b_nk ? CUBLAS_OP_T : CUBLAS_OP_N;
    int ldb = b_nk ? (int)K : (int)N;
    if (a.dt == GDT_F32) { /* full f32 math (no TF32) */
        fn = "cublasSgemm";
        st = cublas_api.sgemm(b->h, opb, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one,
                              (const float *)bm.p, ldb, (const float *)a.p, (int)K, &zero,
                              (float *)c.p, (int)N);
    } else {
        fn = "cublasGemmEx";
        st = cublas_api.gemm_ex(b->h, opb, CUBLAS_OP_N, (int)N, (int)M, (int)K, &one, bm.p,
                                cuda_type(bm.dt), ldb, a.p, cuda_type(a.dt), (int)K, &zero, c.p,
                                cuda_type(c.dt), (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    }
    if (st != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "%s: %s", fn, cublas_api.status_string(st));
        return -1;
    }
    return 0;
}
