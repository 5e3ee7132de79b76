/* Launchers of the shared CUDA/HIP kernels (f32 values, I32 ids and positions).
 * Each enqueues on stream s and returns; the caller checks gpuGetLastError. */
#ifndef RLX_GPU_KERNELS_H
#define RLX_GPU_KERNELS_H
#include "rlx_gpu_compat.h"
#include <stdint.h>

enum gpu_unary_op { GU_SCALE, GU_ADD_SCALAR, GU_SILU, GU_GELU, GU_GELU_TANH, GU_TANH, GU_SOFTCAP };
enum gpu_binary_op { GB_ADD, GB_SUB, GB_MUL, GB_SWIGLU, GB_GEGLU_TANH };

/* Device-side execute errors: the first failing kernel records {code, value, node}. */
enum { GPU_ERR_NONE = 0, GPU_ERR_EMBED_ID = 1, GPU_ERR_CACHE_ROWS = 2 };

void gpu_unary(gpuStream_t s, int op, const float *x, float *y, int64_t n, float p);
/* b has nb elements and broadcasts over the leading dims of a (n % nb == 0) */
void gpu_binary(gpuStream_t s, int op, const float *a, const float *b, float *y, int64_t n,
                int64_t nb);
void gpu_cast(gpuStream_t s, const void *x, int from_i32, void *y, int to_i32, int64_t n);
void gpu_bias_add(gpuStream_t s, float *y, const float *bias, int64_t rows, int64_t n);
void gpu_embedding(gpuStream_t s, const float *table, const int32_t *ids, float *y, int64_t T,
                   int64_t V, int64_t H, int *err, int node);
/* rows pos[0]..pos[0]+T-1 of cache [S, row_elems] <- x [T, row_elems] */
void gpu_cache_write(gpuStream_t s, float *cache, const float *x, const int32_t *pos, int64_t S,
                     int64_t T, int64_t row_elems, int *err, int node);

#define GPU_MAX_DIMS 6
typedef struct gpu_perm {
    int ndim;
    int64_t out_dims[GPU_MAX_DIMS];
    int64_t in_strides[GPU_MAX_DIMS]; /* input stride of the axis that is output axis i */
} gpu_perm;
/* 4-byte elements (f32 or i32) for the layout ops */
void gpu_transpose(gpuStream_t s, const void *x, void *y, int64_t n, const gpu_perm *p);
void gpu_concat(gpuStream_t s, const void *a, const void *b, void *y, int64_t outer, int64_t ia,
                int64_t ib);
void gpu_slice(gpuStream_t s, const void *x, void *y, int64_t outer, int64_t in_inner,
               int64_t start_off, int64_t out_inner);

/* a (+ b when b != NULL, the sum also stored to sum_out) then rms_norm with w */
void gpu_rms_norm(gpuStream_t s, const float *a, const float *b, const float *w, float *sum_out,
                  float *y, int64_t rows, int64_t H, float eps, int add_one);
void gpu_layer_norm(gpuStream_t s, const float *x, const float *w, const float *b, float *y,
                    int64_t rows, int64_t H, float eps);
void gpu_softmax(gpuStream_t s, const float *x, float *y, int64_t rows, int64_t n);
void gpu_rope(gpuStream_t s, const float *x, const int32_t *pos, const float *inv_freq, float *y,
              int64_t T, int64_t nh, int64_t d, int64_t rot);

typedef struct gpu_attn {
    const float *q, *k, *v, *mask; /* mask may be NULL */
    const int32_t *pos;            /* may be NULL: position 0 */
    float *o;
    int T, S, nh, nkv, d;
    float scale, softcap;
    int causal, window;
} gpu_attn;
#define GPU_ATTN_MAX_D 256
void gpu_attention(gpuStream_t s, const gpu_attn *a);

/* Own tiled GEMM, row-major. b_nk=1: C[M,N] = A[M,K]·B[N,K]ᵀ; b_nk=0: C = A·B[K,N]. */
void gpu_gemm(gpuStream_t s, int b_nk, const float *a, const float *b, float *c, int64_t M,
              int64_t N, int64_t K);

/* k_bmm.cu: c[z] = a[z]·b[z]ᵀ (tb, b [B,N,K]) or a[z]·b[z] (b [B,K,N]) for z < B;
 * y = relu / sin / cos of x */
enum gpu_map_op { GM_RELU, GM_SIN, GM_COS };
void gpu_bmm(gpuStream_t s, int tb, const float *a, const float *b, float *c, int64_t B, int64_t M, int64_t N,
             int64_t K);
void gpu_map(gpuStream_t s, int op, const float *x, float *y, int64_t n);

#endif
