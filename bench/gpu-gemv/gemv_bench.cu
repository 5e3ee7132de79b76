/* One-row GEMVs of the decode shapes, main's k_gemv against k_gemv_stream, beside a plain read
 * of the same bytes: µs a launch inside a CUDA graph of back-to-back programmatic launches over
 * enough weight copies that L2 holds none of them, and each output against a double-precision
 * reference. Built and run on the GPU machine by `tools/gpu-ab.sh … gemv`:
 *   nvcc -std=c++17 -O3 -gencode arch=compute_90,code=sm_90 -I plugins/backends/gpu \
 *        -I framework/include -o gemv_bench bench/gpu-gemv/gemv_bench.cu */
#include "k_gemv.cu"
#include "k_gemv_stream.cu"

#include <math.h>
#include <stdio.h>
#include <vector>

int gpu_gemv_mma(gpuStream_t, gpu_ten, gpu_ten, const gpu_gemv_seg *, int, int64_t, int64_t) { return 0; }
void gpu_binary_t(gpuStream_t, int, gpu_ten, gpu_ten, gpu_ten, int64_t, int64_t) {}

#define CK(e)                                                                                                      \
    do {                                                                                                           \
        cudaError_t r_ = (e);                                                                                      \
        if (r_ != cudaSuccess) {                                                                                   \
            fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(r_));                          \
            exit(1);                                                                                               \
        }                                                                                                          \
    } while (0)

__global__ void k_fill(uint16_t *p, int64_t n, uint32_t seed, float scale)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
        p[i] = f_to_bf16(((float)(h & 0xffff) / 32768.0f - 1.0f) * scale);
    }
}

/* every 16 bytes of n read once, 8 loads a thread in flight */
__global__ void k_read(const uint4 *p, int64_t n, unsigned *sink)
{
    uint32_t a = 0;
    const int64_t st = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += 8 * st) {
        uint4 v[8];
#pragma unroll
        for (int u = 0; u < 8; u++)
            v[u] = i + u * st < n ? p[i + u * st] : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int u = 0; u < 8; u++)
            a ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (a == 0x9e3779b9u)
        *sink = a;
}

static float bf(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

struct shape {
    const char *name;
    int64_t K, N[3];
    int nseg, glu, norm, res; /* norm: x + xres rms-normed; res: y = res + product */
};

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    static const shape shapes[] = {
        {"8b.qkv", 4096, {4096, 1024, 1024}, 3, 0, 1, 0},   {"8b.o", 4096, {4096}, 1, 0, 0, 1},
        {"8b.gateup", 4096, {14336}, 1, 1, 1, 0},           {"8b.down", 14336, {4096}, 1, 0, 0, 1},
        {"8b-tp2.qkv", 4096, {2048, 512, 512}, 3, 0, 1, 0}, {"8b-tp2.o", 2048, {4096}, 1, 0, 0, 0},
        {"8b-tp2.gateup", 4096, {7168}, 1, 1, 1, 0},        {"8b-tp2.down", 7168, {4096}, 1, 0, 0, 0},
        {"1b.qkv", 2048, {2048, 512, 512}, 3, 0, 1, 0},     {"1b.o", 2048, {2048}, 1, 0, 0, 1},
        {"1b.gateup", 2048, {8192}, 1, 1, 1, 0},            {"1b.down", 8192, {2048}, 1, 0, 0, 1},
        {"1b.lmhead", 2048, {32000}, 1, 0, 1, 0},           {"188m.qkv", 1024, {1024, 256, 256}, 3, 0, 1, 0},
        {"188m.o", 1024, {1024}, 1, 0, 0, 1},               {"188m.gateup", 1024, {4096}, 1, 1, 1, 0},
        {"188m.down", 4096, {1024}, 1, 0, 0, 1},
    };
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    unsigned *sink;
    CK(cudaMalloc(&sink, 4));
    int dev = 0;
    cudaDeviceProp pr;
    CK(cudaGetDeviceProperties(&pr, dev));
    printf("device %s, %d SMs, L2 %d MB\n", pr.name, pr.multiProcessorCount, pr.l2CacheSize >> 20);
    for (const shape &sh : shapes) {
        if (only && !strstr(sh.name, only))
            continue;
        const int64_t K = sh.K;
        int64_t Nt = 0;
        for (int i = 0; i < sh.nseg; i++)
            Nt += sh.N[i];
        const int64_t welems = Nt * K * (sh.glu ? 2 : 1), wbytes = welems * 2;
        const int C = (int)std::max<int64_t>(2, (400ll << 20) / wbytes + 1); /* copies: 400 MB, past L2 */
        const int L = std::max(C, 24);                                        /* launches a graph */
        uint16_t *w, *x, *xr, *g, *xs, *y, *yr;
        CK(cudaMalloc(&w, wbytes * C));
        CK(cudaMalloc(&x, K * 2));
        CK(cudaMalloc(&xr, K * 2));
        CK(cudaMalloc(&xs, K * 2));
        CK(cudaMalloc(&g, K * 2));
        CK(cudaMalloc(&y, Nt * 2));
        CK(cudaMalloc(&yr, Nt * 2));
        k_fill<<<1024, 256, 0, s>>>(w, welems * C, 1, 0.05f);
        k_fill<<<64, 256, 0, s>>>(x, K, 2, 1.0f);
        k_fill<<<64, 256, 0, s>>>(xr, K, 3, 1.0f);
        k_fill<<<64, 256, 0, s>>>(g, K, 4, 1.0f);
        k_fill<<<64, 256, 0, s>>>(yr, Nt, 5, 1.0f);
        CK(cudaStreamSynchronize(s));
        auto launch = [&](int c) {
            const uint16_t *wc = w + (int64_t)c * welems;
            gpu_gemv_seg seg[3];
            int64_t off = 0;
            for (int i = 0; i < sh.nseg; i++) {
                seg[i] = gpu_gemv_seg{{(void *)(wc + off * K), GDT_BF16}, {NULL, GDT_F32}, {y + off, GDT_BF16}, sh.N[i],
                                      {sh.res ? (void *)(yr + off) : NULL, GDT_BF16}, GDT_BF16, 1};
                off += sh.N[i];
            }
            gpu_gemv_norm nr = {{g, GDT_BF16}, 1e-5f, 0, {xr, GDT_BF16}, {xs, GDT_BF16}, NULL};
            gpu_ten wu = {sh.glu ? (void *)(wc + Nt * K) : NULL, GDT_BF16};
            gpu_gemv_multi(s, {x, GDT_BF16}, wu, seg, sh.nseg, 1, K, sh.norm ? &nr : NULL);
        };
        /* the reference: double sums over the bf16 values, as the kernels round x + xres */
        std::vector<uint16_t> hw(welems), hx(K), hxr(K), hg(K), hyr(Nt), hy(Nt);
        CK(cudaMemcpy(hw.data(), w, wbytes, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hx.data(), x, K * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hxr.data(), xr, K * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hg.data(), g, K * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hyr.data(), yr, Nt * 2, cudaMemcpyDeviceToHost));
        std::vector<double> xv(K), ref(Nt);
        double ss = 0;
        for (int64_t k = 0; k < K; k++) {
            float v = bf(hx[k]);
            if (sh.norm) {
                uint32_t u;
                float f = v + bf(hxr[k]);
                memcpy(&u, &f, 4);
                u += 0x7fffu + ((u >> 16) & 1u);
                v = bf((uint16_t)(u >> 16));
            }
            xv[k] = v, ss += (double)v * v;
        }
        const double rn = sh.norm ? 1.0 / sqrt(ss / K + 1e-5) : 1.0;
        for (int64_t k = 0; k < K; k++)
            xv[k] *= sh.norm ? bf(hg[k]) * rn : 1.0;
        for (int64_t n = 0; n < Nt; n++) {
            double a = 0, b = 0;
            for (int64_t k = 0; k < K; k++) {
                a += bf(hw[n * K + k]) * xv[k];
                if (sh.glu)
                    b += bf(hw[Nt * K + n * K + k]) * xv[k];
            }
            ref[n] = sh.glu ? a / (1 + exp(-a)) * b : a + (sh.res ? bf(hyr[n]) : 0.0);
        }
        printf("%-14s K %6lld N %6lld  %7.2f MB", sh.name, (long long)K, (long long)Nt, wbytes / 1e6);
        /* k_gemv, then the streaming form (its parts a column as chosen, or forced: GEMVKS=1|2|4|8;
         * GEMVALL=1: also the products without a norm, which do not take it in the backend) */
        const char *ks = getenv("GEMVKS");
        const int ksv = ks ? atoi(ks) : 0, ksi = ksv == 1 ? 0 : ksv == 2 ? 1 : ksv == 4 ? 2 : ksv == 8 ? 3 : -1;
        static const char *mname[] = {"main", "stream"};
        const int all = getenv("GEMVALL") != NULL;
        for (int mi = 0; mi < (sh.norm || all ? 2 : 1); mi++) {
            ((gv_opts *)gv_opt())->stream = mi ? 2 : 0;
            ((gv_opts *)gv_opt())->stream_ks = ksi;
            CK(cudaMemsetAsync(y, 0, Nt * 2, s));
            launch(0);
            CK(cudaStreamSynchronize(s));
            CK(cudaGetLastError());
            CK(cudaMemcpy(hy.data(), y, Nt * 2, cudaMemcpyDeviceToHost));
            double err = 0, mx = 0;
            for (int64_t n = 0; n < Nt; n++)
                err = fmax(err, fabs(bf(hy[n]) - ref[n])), mx = fmax(mx, fabs(ref[n]));
            cudaGraph_t gr;
            cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            for (int i = 0; i < L; i++)
                launch(i % C);
            CK(cudaStreamEndCapture(s, &gr));
            CK(cudaGraphInstantiate(&ge, gr, 0));
            for (int r = 0; r < 3; r++)
                CK(cudaGraphLaunch(ge, s));
            const int reps = 10;
            CK(cudaEventRecord(e0, s));
            for (int r = 0; r < reps; r++)
                CK(cudaGraphLaunch(ge, s));
            CK(cudaEventRecord(e1, s));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            const double us = ms * 1e3 / (reps * L);
            printf("\n    %-10s %7.2f us %5.2f TB/s err %.1e", mname[mi], us, wbytes / us / 1e6, err / mx);
            CK(cudaGraphExecDestroy(ge));
            CK(cudaGraphDestroy(gr));
        }
        /* the plain read of the same bytes, copy by copy */
        CK(cudaEventRecord(e0, s));
        for (int i = 0; i < L; i++)
            k_read<<<pr.multiProcessorCount * 4, 512, 0, s>>>((const uint4 *)(w + (int64_t)(i % C) * welems),
                                                                wbytes / 16, sink);
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        const double us = ms * 1e3 / L;
        printf("\n    read       %7.2f us %5.2f TB/s\n", us, wbytes / us / 1e6);
        fflush(stdout);
        for (void *p : {(void *)w, (void *)x, (void *)xr, (void *)xs, (void *)g, (void *)y, (void *)yr})
            CK(cudaFree(p));
    }
    return 0;
}
