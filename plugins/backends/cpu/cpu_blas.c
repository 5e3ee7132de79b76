/* OpenBLAS, loaded at the backend's first init instead of with the plugin: loading it
 * (relocating a ~36 MB library, starting its threads) costs ~20-30 ms that every
 * rlx-plugins list, probe and run on another backend would pay for nothing. The kernels
 * call cblas_sgemm as usual; the definitions here (hidden, like every plugin symbol but
 * the entry point) forward to the library's. */
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
}

const char *cpu_blas_load(void)
{
    pthread_once(&load_once, load);
    return sgemm ? NULL : load_error;
}

/* only reached after a successful init, which loaded the library */
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
    if (!sgemm) need_blas();
    sgemm(Order, TransA, TransB, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void openblas_set_num_threads(int num_threads)
{
    if (!set_threads) need_blas();
    set_threads(num_threads);
}
