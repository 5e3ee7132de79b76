/* Micro benchmark of the CPU backend's matmul against OpenBLAS, in one run (JSON out).
 *  - GEMV, M=1, K=1024, N=4096: GB/s of weights read, hot (one 16 MiB matrix, in L3) and
 *    cold (rotating over enough copies to leave the caches);
 *  - GEMM, M=128, K=2048, N=8192 (x·wᵀ): GFLOP/s.
 * Each figure: median of 5 rounds, by wall time. A third pass, 1 thread, times by the
 * process's CPU time: on a shared machine it stays meaningful when wall clock drifts.
 * With a weight dtype (f16 or bf16) the weights are stored in it and OpenBLAS, which has
 * no 16-bit matmul, is left out (its figures print as 0); GB/s are of the bytes stored.
 * Usage: cpu_kernels_bench [path/to/rlx-backend-cpu.so [f32|f16|bf16]] */
#define _GNU_SOURCE
#include "rlx/rlx.h"
#include <cblas.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define ROUNDS 5

static clockid_t clock_kind = CLOCK_MONOTONIC;

static double now(void)
{
    struct timespec ts;
    clock_gettime(clock_kind, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return v[n / 2];
}

static float *rnd(size_t n)
{
    float *p = malloc(n * sizeof *p);
    if (!p) {
        fprintf(stderr, "cpu_kernels_bench: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) p[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    return p;
}

typedef struct mm {
    const rlx_backend *be;
    void *h, *exe;
    rlx_value_desc v[3];
    rlx_node_desc node;
    int32_t in[2], out[1];
} mm;

/* n random 16-bit weights of dtype dt, magnitudes in [1/32, 1) with either sign */
static void *rnd_h(size_t n, int dt)
{
    uint16_t *p = malloc(n * sizeof *p);
    if (!p) {
        fprintf(stderr, "cpu_kernels_bench: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        unsigned r = (unsigned)rand();
        p[i] = dt == RLX_F16 ? (uint16_t)((r & 0x8000) | ((10u + r % 5u) << 10) | ((r >> 3) & 0x3ff))
                             : (uint16_t)((r & 0x8000) | ((122u + r % 5u) << 7) | ((r >> 3) & 0x7f));
    }
    return p;
}

static void mm_init(mm *m, const rlx_backend *be, void *h, int64_t M, int64_t K, int64_t N, int wdt)
{
    memset(m, 0, sizeof *m);
    m->be = be;
    m->h = h;
    int64_t dims[3][2] = {{M, K}, {N, K}, {M, N}};
    int kinds[3] = {RLX_VALUE_INPUT, RLX_VALUE_WEIGHT, RLX_VALUE_OUTPUT};
    for (int i = 0; i < 3; i++) {
        m->v[i].struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_value_desc, alias_offset);
        m->v[i].kind = kinds[i];
        m->v[i].dtype = RLX_F32;
        m->v[i].shape.ndim = 2;
        m->v[i].shape.dims[0] = dims[i][0];
        m->v[i].shape.dims[1] = dims[i][1];
        m->v[i].alias_of = -1;
    }
    m->v[1].dtype = wdt;
    m->in[0] = 0;
    m->in[1] = 1;
    m->out[0] = 2;
    m->node.struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_node_desc, n_attrs);
    m->node.op = "rlx.matmul";
    m->node.inputs = m->in;
    m->node.n_inputs = 2;
    m->node.outputs = m->out;
    m->node.n_outputs = 1;
    rlx_program p = {(uint32_t)RLX_STRUCT_SIZE(rlx_program, arena_bytes), m->v, 3, &m->node, 1, 0, 0};
    rlx_diag d;
    rlx_diag_init(&d);
    if (be->compile(h, &p, &m->exe, &d)) {
        fprintf(stderr, "cpu_kernels_bench: compile failed: %s\n", d.msg);
        exit(1);
    }
}

static void mm_run(mm *m, const float *x, const void *w, float *y)
{
    void *const ptrs[3] = {(void *)x, (void *)w, y};
    rlx_diag d;
    rlx_diag_init(&d);
    if (m->be->execute(m->h, m->exe, ptrs, &d)) {
        fprintf(stderr, "cpu_kernels_bench: execute failed: %s\n", d.msg);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    char path[4096];
    const char *bd = getenv("RLX_BUILDDIR");
    if (argc > 1) snprintf(path, sizeof path, "%s", argv[1]);
    else snprintf(path, sizeof path, "%s/plugins/backends/cpu/.libs/rlx-backend-cpu.so", bd ? bd : ".");
    void *so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!so) {
        fprintf(stderr, "cpu_kernels_bench: %s\n", dlerror());
        return 1;
    }
    rlx_plugin_init_fn init = (rlx_plugin_init_fn)(uintptr_t)dlsym(so, RLX_PLUGIN_ENTRY_NAME);
    const rlx_plugin_desc *desc = init ? init(rlx_host_api_get()) : NULL;
    if (!desc || desc->n_backends != 1) {
        fprintf(stderr, "cpu_kernels_bench: %s: no backend\n", path);
        return 1;
    }
    const rlx_backend *be = desc->backends[0];
    const char *wname = argc > 2 ? argv[2] : "f32";
    int wdt = !strcmp(wname, "f16") ? RLX_F16 : !strcmp(wname, "bf16") ? RLX_BF16 : RLX_F32;
    if (wdt == RLX_F32 && strcmp(wname, "f32")) {
        fprintf(stderr, "cpu_kernels_bench: weight dtype '%s' is not f32, f16 or bf16\n", wname);
        return 2;
    }
    size_t wes = wdt == RLX_F32 ? 4 : 2;

    const int64_t GK = 1024, GN = 4096, COLD = 12; /* 12 x 16 MiB: beyond L3 */
    const int64_t SM = 128, SK = 2048, SN = 8192;
    float *gx = rnd((size_t)GK), *gy = rnd((size_t)GN);
    void *gw[12];
    for (int i = 0; i < COLD; i++) gw[i] = wdt == RLX_F32 ? (void *)rnd((size_t)(GK * GN)) : rnd_h((size_t)(GK * GN), wdt);
    float *sx = rnd((size_t)(SM * SK)), *sy = rnd((size_t)(SM * SN));
    void *sw = wdt == RLX_F32 ? (void *)rnd((size_t)(SN * SK)) : rnd_h((size_t)(SN * SK), wdt);
    double gbytes = (double)GK * GN * (double)wes, sflop = 2.0 * SM * SK * SN;

    printf("{\n  \"weights\": \"%s\",\n  \"machine_threads\": [1, 2],\n", wname);
    printf("  \"gemv\": {\"M\": 1, \"K\": %lld, \"N\": %lld, \"unit\": \"GB/s\"},\n"
           "  \"sgemm\": {\"M\": %lld, \"K\": %lld, \"N\": %lld, \"unit\": \"GFLOP/s\"},\n  \"results\": [\n",
           (long long)GK, (long long)GN, (long long)SM, (long long)SK, (long long)SN);
    int first = 1;
    for (int pass = 0; pass < 3; pass++) {
        int threads = pass == 1 ? 2 : 1;
        clock_kind = pass == 2 ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC;
        rlx_backend_options opt;
        memset(&opt, 0, sizeof opt);
        opt.struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_backend_options, graphs);
        opt.threads = threads;
        snprintf(opt.placement, sizeof opt.placement, "cores");
        void *h = NULL;
        rlx_diag d;
        rlx_diag_init(&d);
        if (be->init(&opt, &h, &d)) {
            fprintf(stderr, "cpu_kernels_bench: init: %s\n", d.msg);
            return 1;
        }
        mm g, s;
        mm_init(&g, be, h, 1, GK, GN, wdt);
        mm_init(&s, be, h, SM, SK, SN, wdt);
        double r_hot[ROUNDS], r_cold[ROUNDS], r_sg[ROUNDS], b_hot[ROUNDS], b_cold[ROUNDS], b_sg[ROUNDS];
        for (int r = 0; r < ROUNDS; r++) {
            int reps = 50;
            double t0 = now();
            for (int i = 0; i < reps; i++) mm_run(&g, gx, gw[0], gy);
            r_hot[r] = gbytes * reps / (now() - t0) / 1e9;
            t0 = now();
            for (int i = 0; i < reps; i++) mm_run(&g, gx, gw[i % COLD], gy);
            r_cold[r] = gbytes * reps / (now() - t0) / 1e9;
            t0 = now();
            for (int i = 0; i < 3; i++) mm_run(&s, sx, sw, sy);
            r_sg[r] = sflop * 3 / (now() - t0) / 1e9;
        }
        /* OpenBLAS itself with the same thread count (the backend set it to 1 at init) */
        openblas_set_num_threads(threads);
        for (int r = 0; r < ROUNDS; r++) {
            int reps = 50;
            b_hot[r] = b_cold[r] = b_sg[r] = 0;
            if (wdt != RLX_F32) continue;
            double t0 = now();
            for (int i = 0; i < reps; i++)
                cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)GN, (int)GK, 1.0f, gw[0], (int)GK, gx, 1, 0.0f, gy, 1);
            b_hot[r] = gbytes * reps / (now() - t0) / 1e9;
            t0 = now();
            for (int i = 0; i < reps; i++)
                cblas_sgemv(CblasRowMajor, CblasNoTrans, (int)GN, (int)GK, 1.0f, gw[i % COLD], (int)GK, gx, 1,
                            0.0f, gy, 1);
            b_cold[r] = gbytes * reps / (now() - t0) / 1e9;
            t0 = now();
            for (int i = 0; i < 3; i++)
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)SM, (int)SN, (int)SK, 1.0f, sx, (int)SK,
                            sw, (int)SK, 0.0f, sy, (int)SN);
            b_sg[r] = sflop * 3 / (now() - t0) / 1e9;
        }
        openblas_set_num_threads(1);
        printf("%s    {\"threads\": %d, \"clock\": \"%s\", \"rlx_gemv_hot\": %.1f, \"openblas_sgemv_hot\": %.1f, "
               "\"rlx_gemv_cold\": %.1f, \"openblas_sgemv_cold\": %.1f, "
               "\"rlx_sgemm\": %.1f, \"openblas_sgemm\": %.1f}",
               first ? "" : ",\n", threads, pass == 2 ? "cpu" : "wall", median(r_hot, ROUNDS), median(b_hot, ROUNDS),
               median(r_cold, ROUNDS), median(b_cold, ROUNDS), median(r_sg, ROUNDS), median(b_sg, ROUNDS));
        first = 0;
        be->release(h, g.exe);
        be->release(h, s.exe);
        be->teardown(h);
    }
    printf("\n  ]\n}\n");
    for (int i = 0; i < COLD; i++) free(gw[i]);
    free(gx);
    free(gy);
    free(sx);
    free(sw);
    free(sy);
    return 0;
}
