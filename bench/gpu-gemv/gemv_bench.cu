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

/* A prototype, not in the backend: the one-row product without a norm (o, down: the residual
 * in the epilogue) split stream-K. The N·R rounds of 1,024 elements (R a column) are cut into
 * one contiguous run a warp over the resident grid (SU vectors a lane a round), so every warp streams the same bytes
 * whatever N and K; two register sets keep a round in flight across the columns' ends. A
 * column whose rounds span several warps has each one's partial sum in its slot (its warp
 * less the column's first), and the warp whose rounds complete the column's count sums the
 * slots in order (deterministic), applies the epilogue and zeroes the count. */
template <int WD, int SU>
__global__ __launch_bounds__(256) void k_gemv_sk(gpu_ten x, const void *__restrict__ w, gpu_ten res, gpu_ten y,
                                                 int pdt, int64_t N, int64_t K, float *part, unsigned *cnt, int cmax)
{
    const int lane = threadIdx.x & 31;
    constexpr int64_t RE = 256 * SU; /* elements a round */
    const int64_t R = (K + RE - 1) / RE, T = N * R, W = (int64_t)gridDim.x * (blockDim.x >> 5);
    const int64_t gw = (int64_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    const int64_t t0 = gw * T / W, t1 = (gw + 1) * T / W;
    auto wof = [&](int64_t t) { return ((t + 1) * W - 1) / T; }; /* the warp whose run holds round t */
    pk8<WD> A[SU], B[SU];
    int64_t lt = t0;
    auto load = [&](pk8<WD> *S) {
        const int64_t n = lt / R, k0 = (lt % R) * RE + lane * 8;
#pragma unroll
        for (int u = 0; u < SU; u++)
            if (k0 + u * 256 < K)
                S[u] = pk8_load<WD>(w, n * K + k0 + u * 256);
        lt++;
    };
    if (t0 < t1)
        load(A);
    if (t0 + 1 < t1)
        load(B);
    float acc = 0.0f;
    int64_t cs = t0; /* the first round of the current column in this run */
    auto dots = [&](const pk8<WD> *S, int64_t t) {
        const int64_t n = t / R, k0 = (t % R) * RE + lane * 8;
#pragma unroll
        for (int u = 0; u < SU; u++) {
            const int64_t k = k0 + u * 256;
            if (k < K) {
                float wf[8], xf[8];
                pk8_unpack<WD>(S[u], wf);
                x8_load(x, k, xf);
#pragma unroll
                for (int e = 0; e < 8; e++)
                    acc += wf[e] * xf[e];
            }
        }
        if (t % R != R - 1 && t != t1 - 1)
            return;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1)
            acc += RLX_SHFL_XOR(acc, o, 32);
        const int64_t c0 = n * R, c1 = c0 + R;
        float v = acc;
        bool fin = cs == c0 && t == c1 - 1; /* the whole column in this run */
        if (!fin) {
            const int64_t wf0 = wof(c0);
            unsigned old = 0;
            if (lane == 0) {
                part[n * cmax + (gw - wf0)] = acc;
                __threadfence();
                old = atomicAdd(&cnt[n], (unsigned)(t + 1 - cs));
            }
            old = __shfl_sync(0xffffffffu, old, 0);
            fin = old + (unsigned)(t + 1 - cs) == (unsigned)R;
            if (fin) {
                __threadfence();
                v = 0.0f;
                const int64_t nc = wof(c1 - 1) - wf0 + 1;
                for (int64_t j = 0; j < nc; j++)
                    v += ((volatile float *)part)[n * cmax + j];
                if (lane == 0)
                    cnt[n] = 0;
            }
        }
        if (fin && lane == 0)
            stt(y, n, (res.p ? ldt(res, n) : 0.0f) + round_to(pdt, v));
        acc = 0.0f;
        cs = t + 1;
    };
    for (int64_t t = t0; t < t1; t += 2) {
        dots(A, t);
        if (t + 2 < t1)
            load(A);
        if (t + 1 >= t1)
            break;
        dots(B, t + 1);
        if (t + 3 < t1)
            load(B);
    }
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
        /* the stream-K prototype's grid, slots and counters (products without a norm) */
        int sk_mode = 0, sk_grid[2] = {0, 0}, sk_cmax = 1, occ = 0;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k_gemv_sk<GDT_BF16, 4>, 256, 0));
        sk_grid[0] = occ * pr.multiProcessorCount;
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, k_gemv_sk<GDT_BF16, 8>, 256, 0));
        sk_grid[1] = occ * pr.multiProcessorCount;
        for (int i = 0; i < 2; i++) {
            const int64_t R = (K + (1024 << i) - 1) / (1024 << i), T = Nt * R, W = (int64_t)sk_grid[i] * 8;
            for (int64_t n = 0; n < Nt; n++) {
                const int64_t a = ((n * R + 1) * W - 1) / T, b = (((n + 1) * R) * W - 1) / T;
                sk_cmax = (int)std::max<int64_t>(sk_cmax, b - a + 1);
            }
        }
        float *sk_part;
        unsigned *sk_cnt;
        CK(cudaMalloc(&sk_part, Nt * sk_cmax * 4));
        CK(cudaMalloc(&sk_cnt, Nt * 4));
        CK(cudaMemset(sk_cnt, 0, Nt * 4));
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
            if (sk_mode) {
                const gpu_ten xt = {x, GDT_BF16}, rt = {sh.res ? (void *)yr : NULL, GDT_BF16}, yt = {y, GDT_BF16};
                if (sk_mode == 1)
                    k_gemv_sk<GDT_BF16, 4><<<sk_grid[0], 256, 0, s>>>(xt, wc, rt, yt, GDT_BF16, Nt, K, sk_part, sk_cnt, sk_cmax);
                else
                    k_gemv_sk<GDT_BF16, 8><<<sk_grid[1], 256, 0, s>>>(xt, wc, rt, yt, GDT_BF16, Nt, K, sk_part, sk_cnt, sk_cmax);
                return;
            }
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
        static const char *mname[] = {"main", "stream", "stream-K", "stream-K8"};
        const int all = getenv("GEMVALL") != NULL;
        for (int mi = 0; mi < 4; mi++) {
            if ((mi == 1 && !sh.norm && !all) || (mi >= 2 && (sh.norm || sh.glu || sh.nseg > 1)))
                continue;
            sk_mode = mi >= 2 ? mi - 1 : 0;
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
            if (sk_mode)
                printf(" (grid %d)", sk_grid[sk_mode - 1]);
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
        for (void *p : {(void *)w, (void *)x, (void *)xr, (void *)xs, (void *)g, (void *)y, (void *)yr, (void *)sk_part,
                        (void *)sk_cnt})
            CK(cudaFree(p));
    }
    return 0;
}
