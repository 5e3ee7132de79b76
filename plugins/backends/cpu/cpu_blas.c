/* OpenBLAS, loaded when a compiled program may call it instead of with the plugin or at
 * init: loading it (relocating a ~36 MB library and its Fortran runtime, starting its
 * threads) costs ~13 ms of CPU that rlx-plugins list, probes, runs on another backend and
 * programs whose kernels are all our own (AVX2/AVX-512 GEMM and attention) would pay for
 * nothing. The kernels call cblas_sgemm as usual; the definitions here (hidden, like
 * every plugin symbol but the entry point) forward to the library's. */
#include "cpu_backend.h"
#include <cblas.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef RLX_OPENBLAS_SONAME
#define RLX_OPENBLAS_SONAME "libopenblas.so.0"
#endif

typedef void (*sgemm_fn)(const enum CBLAS_ORDER, const enum CBLAS_TRANSPOSE, const enum CBLAS_TRANSPOSE,
                         const blasint, const blasint, const blasint, const float, const float *,
                         const blasint, const float *, const blasint, const float, float *, const blasint);
typedef void (*threads_fn)(int);

static sgemm_fn sgemm;
static threads_fn set_threads;
static char load_error[512];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static void load(void)
{
    void *h = dlopen(RLX_OPENBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
    const char *e = h ? NULL : dlerror();
    void *s = h ? dlsym(h, "cblas_sgemm") : NULL, *t = h ? dlsym(h, "openblas_set_num_threads") : NULL;
    if (!s || !t) {
        snprintf(load_error, sizeof load_error, "cannot load OpenBLAS (%s): %s", RLX_OPENBLAS_SONAME,
                 e ? e : "no cblas_sgemm / openblas_set_num_threads in it");
        return; /* the handle stays open: nothing is ever unloaded */
    }
    memcpy(&sgemm, &s, sizeof s); /* object pointer to function pointer */
    memcpy(&set_threads, &t, sizeof t);
    set_threads(1); /* our workers parallelise GEMMs by slices: one OpenBLAS thread per call */
}

const char *cpu_blas_load(void)
{
    pthread_once(&load_once, load);
    return sgemm ? NULL : load_error;
}

/* 1 when a node of this op may call cblas_sgemm with these kernels: a program with one
 * loads OpenBLAS at compile time, where a failure is an error; a kernel that calls it
 * anyway loads it on that call */
int cpu_blas_may_need(const char *op, const cpu_isa *isa)
{
    if (!strcmp(op, "rlx.matmul_nn") || !strcmp(op, "rlx.bmm") || !strcmp(op, "rlx.conv2d")) return 1;
    if (!strcmp(op, "rlx.matmul") || !strcmp(op, "rlx.linear_swiglu")) return !isa->gemm;
    if (!strcmp(op, "rlx.attention") || !strcmp(op, "rlx.attention_rows")) return !isa->attn_qk || !isa->attn_pv;
    return 0;
}

/* pthread_once orders the loader's writes before every caller's reads; a kernel that
 * calls sgemm without a compile that loaded it (one cpu_blas_may_need does not know of)
 * loads it here */
static void need_blas(void)
{
    if (cpu_blas_load()) {
        fprintf(stderr, "rlx-backend-cpu: %s\n", load_error);
        abort();
    }
}

void cblas_sgemm(OPENBLAS_CONST enum CBLAS_ORDER Order, OPENBLAS_CONST enum CBLAS_TRANSPOSE TransA,
                 OPENBLAS_CONST enum CBLAS_TRANSPOSE TransB, OPENBLAS_CONST blasint M, OPENBLAS_CONST blasint N,
                 OPENBLAS_CONST blasint K, OPENBLAS_CONST float alpha, OPENBLAS_CONST float *A,
                 OPENBLAS_CONST blasint lda, OPENBLAS_CONST float *B, OPENBLAS_CONST blasint ldb,
                 OPENBLAS_CONST float beta, float *C, OPENBLAS_CONST blasint ldc)
{
    need_blas();
    sgemm(Order, TransA, TransB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void openblas_set_num_threads(int num_threads)
{
    need_blas();
    set_threads(num_threads);
}
