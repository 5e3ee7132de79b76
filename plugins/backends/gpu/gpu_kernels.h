/* Launchers of the shared CUDA/HIP kernels. Float tensors are passed as gpu_ten (address and
 * dtype: f32, f16 or bf16; kernels read any of them and compute in f32), ids and positions
 * as I32. Each launcher enqueues on stream s and returns; the caller checks gpuGetLastError. */
#ifndef RLX_GPU_KERNELS_H
#define RLX_GPU_KERNELS_H
#include "rlx_gpu_compat.h"
#include <stdint.h>

/* the rlx_dtype codes the kernels read (gpu_backend.cu checks they match) */
enum { GDT_F32 = 0, GDT_F16 = 1, GDT_BF16 = 2, GDT_I32 = 3 };

typedef struct gpu_ten {
    void *p;
    int dt; /* GDT_* */
} gpu_ten;

static inline gpu_ten gpu_f32(const float *p)
{
    gpu_ten t = {(void *)p, GDT_F32};
    return t;
}

enum gpu_unary_op { GU_SCALE, GU_ADD_SCALAR, GU_SILU, GU_GELU, GU_GELU_TANH, GU_TANH, GU_SOFTCAP };
enum gpu_binary_op { GB_ADD, GB_SUB, GB_MUL, GB_SWIGLU, GB_GEGLU_TANH };

/* Device-side execute errors: the first failing kernel records {code, value, node}. */
enum { GPU_ERR_NONE = 0, GPU_ERR_EMBED_ID = 1, GPU_ERR_CACHE_ROWS = 2, GPU_ERR_ROW_SLOT = 3 };

void gpu_unary_t(gpuStream_t s, int op, gpu_ten x, gpu_ten y, int64_t n, float p);
/* small uploads (a decode step's token id and positions) carried as one kernel's parameters:
 * one launch where each would be a copy of its own on the stream before the step */
#define GPU_UP_N 8      /* uploads a batch holds */
#define GPU_UP_BYTES 56 /* bytes an upload may have */
typedef struct gpu_up_batch {
    int n;
    struct {
        void *dst;
        int bytes;
        unsigned char b[GPU_UP_BYTES];
    } e[GPU_UP_N];
} gpu_up_batch;
void gpu_up_scatter(gpuStream_t s, const gpu_up_batch *b);
void gpu_add_i32(gpuStream_t s, const int32_t *x, int32_t *y, int64_t n, int32_t v); /* positions */
/* b has nb elements and broadcasts over the leading dims of a (n % nb == 0) */
void gpu_binary_t(gpuStream_t s, int op, gpu_ten a, gpu_ten b, gpu_ten y, int64_t n, int64_t nb);
/* y[r, c] = x[r, c] + bias[c] (bias.p may be NULL), converted to y's dtype */
void gpu_bias_cast(gpuStream_t s, gpu_ten x, gpu_ten bias, gpu_ten y, int64_t rows, int64_t n);
static inline void gpu_unary(gpuStream_t s, int op, const float *x, float *y, int64_t n, float p)
{
    gpu_unary_t(s, op, gpu_f32(x), gpu_f32(y), n, p);
}
static inline void gpu_binary(gpuStream_t s, int op, const float *a, const float *b, float *y,
                              int64_t n, int64_t nb)
{
    gpu_binary_t(s, op, gpu_f32(a), gpu_f32(b), gpu_f32(y), n, nb);
}
static inline void gpu_bias_add(gpuStream_t s, float *y, const float *bias, int64_t rows, int64_t n)
{
    gpu_bias_cast(s, gpu_f32(y), gpu_f32(bias), gpu_f32(y), rows, n);
}
/* any of f32, f16, bf16, i32 to any (float -> i32 truncates, as C) */
void gpu_cast_t(gpuStream_t s, gpu_ten x, gpu_ten y, int64_t n);
void gpu_embedding(gpuStream_t s, gpu_ten table, const int32_t *ids, gpu_ten y, int64_t T,
                   int64_t V, int64_t H, int *err, int node);
/* rows pos[0]..pos[0]+T-1 of cache [S, row_elems] <- x [T, row_elems]; esize 2 or 4 bytes */
void gpu_cache_write(gpuStream_t s, void *cache, const void *x, const int32_t *pos, int64_t S,
                     int64_t T, int64_t row_elems, int esize, int *err, int node);

/* rope and cache writes of one attention step in one launch (gpu_rope_cache): a rope job
 * (inv_freq.p set) rotates x [T,nh,d] by rpos[t] into y (y.p may be NULL) and, with a
 * cache, writes the same values to rows cpos[0].. of cache [S, nh*d]; a copy job only writes
 * x to the cache. Float dtypes; the cache in y's dtype. Bad rows: GPU_ERR_CACHE_ROWS for node. */
#define GPU_RC_JOBS 4
typedef struct gpu_rc_job {
    gpu_ten x, y, inv_freq, cache;
    const int32_t *rpos, *cpos;
    int64_t T, nh, d, rot, S;
    int node;
    int early; /* rpos and inv_freq are fixed before the step: angles before the wait */
    int64_t xld; /* elements between x's rows (a column range of a wider product); 0: nh * d */
} gpu_rc_job;
typedef struct gpu_rc_jobs {
    gpu_rc_job j[GPU_RC_JOBS];
    int n;
} gpu_rc_jobs;
void gpu_rope_cache(gpuStream_t s, const gpu_rc_job *jobs, int n, int *err);

#define GPU_MAX_DIMS 6
typedef struct gpu_perm {
    int ndim;
    int64_t out_dims[GPU_MAX_DIMS];
    int64_t in_strides[GPU_MAX_DIMS]; /* input stride of the axis that is output axis i */
} gpu_perm;
/* layout ops move elements of esize bytes (2: f16/bf16, 4: f32/i32) */
void gpu_transpose(gpuStream_t s, const void *x, void *y, int64_t n, const gpu_perm *p, int esize);
void gpu_concat(gpuStream_t s, const void *a, const void *b, void *y, int64_t outer, int64_t ia,
                int64_t ib, int esize);
void gpu_slice(gpuStream_t s, const void *x, void *y, int64_t outer, int64_t in_inner,
               int64_t start_off, int64_t out_inner, int esize);
/* y[0:n] = x[row[0]] of x [T, n]; row is read on the device (graph replays see new rows)
 * and clamped into [0, T) */
void gpu_take_row(gpuStream_t s, const void *x, const int32_t *row, void *y, int64_t T, int64_t n,
                  int esize);

/* a (+ b when b.p != NULL, the sum also stored to sum_out) then rms_norm with w */
void gpu_rms_norm(gpuStream_t s, gpu_ten a, gpu_ten b, gpu_ten w, gpu_ten sum_out, gpu_ten y,
                  int64_t rows, int64_t H, float eps, int add_one);
void gpu_layer_norm(gpuStream_t s, gpu_ten x, gpu_ten w, gpu_ten b, gpu_ten y, int64_t rows,
                    int64_t H, float eps);
void gpu_softmax(gpuStream_t s, gpu_ten x, gpu_ten y, int64_t rows, int64_t n);
/* y[r] = the index of row r's largest value (first on ties, NaN never wins), n < 2^31.
 * A row over nb blocks (gpu_argmax_blocks(n), or 1); when more than one: part, 2 * rows *
 * nb floats of scratch, and cnt, rows counters that are zero (and left zero) */
int gpu_argmax_blocks(int64_t n);
/* steps a one-row argmax's last thread runs after it, in order (FUSE_ARGMAX_TAIL): a cache
 * write of one 4-byte element in place (dst[pos[0]] = src[0] when 0 <= pos[0] < S, else
 * error GPU_ERR_CACHE_ROWS naming node), or an i32 add (dst[0] = src[0] + add) */
#define GPU_TAIL_MAX 8
typedef struct gpu_tail_op {
    uint32_t *dst;
    const uint32_t *src;
    const int32_t *pos; /* NULL: the add */
    int64_t S;
    int32_t add;
    int node;
} gpu_tail_op;
typedef struct gpu_tail {
    gpu_tail_op op[GPU_TAIL_MAX];
    int n;
    int *err;
} gpu_tail;
void gpu_argmax(gpuStream_t s, gpu_ten x, int32_t *y, int64_t rows, int64_t n, int nb, float *part, unsigned *cnt,
                const gpu_tail *tail);
/* xld: elements between x's rows (a column range of a wider product); 0: nh * d */
void gpu_rope(gpuStream_t s, gpu_ten x, const int32_t *pos, gpu_ten inv_freq, gpu_ten y,
              int64_t T, int64_t nh, int64_t d, int64_t rot, int64_t xld);

typedef struct gpu_attn {
    gpu_ten q, k, v, mask; /* mask.p may be NULL */
    const int32_t *pos;    /* may be NULL: position 0 */
    gpu_ten o;
    int T, S, nh, nkv, d;
    float scale, softcap;
    int causal, window;
    /* split-key decode: up to nsplit partial results per row and head in part, and one
     * counter per row and head group in cnt (zero between launches) */
    int nsplit;
    float *part;
    unsigned *cnt;
    /* pos and the cache rows before it are fixed before the step (only cache writes at pos
     * write the cache): a warp's first keys load before the wait on the kernel before */
    int early;
    int kgroups; /* the tensor-core prefill's key groups a block (gpu_attn_mma_groups; 0: 1) */
    /* batched decode rows (set: row t is one sequence's new token in slot slots[t] of a pool
     * [P, S, nkv, d] at position pos[t]); a bad slot or position records GPU_ERR_ROW_SLOT */
    const int32_t *slots;
    int P, node;
    int *err;
    int min_keys; /* decode: keys a block takes before a row splits over more (0: the kernel's) */
    int mma;      /* decode on tensor cores where it can (RLX_GPU_ATTN_MMA=0: the SIMT kernel) */
} gpu_attn;
#define GPU_ATTN_MAX_D 512
/* decode rows (T <= GPU_ATTN_DECODE_T) split the keys over up to nsplit blocks */
#define GPU_ATTN_DECODE_T 8
void gpu_attention(gpuStream_t s, const gpu_attn *a);
void gpu_attn_decode(gpuStream_t s, const gpu_attn *a); /* gpu_attention's decode path */
/* gpu_attention's tensor-core path (k_attn_mma.cu): 16-bit q/k/v of one dtype, d 64/128/256 */
int gpu_attn_mma_ok(const gpu_attn *a);
void gpu_attn_mma(gpuStream_t s, const gpu_attn *a);
/* its key groups a block for T rows of nh heads on sms multiprocessors: 2 when the launch
 * has at most two blocks an SM (its time is then the longest block's chain of key tiles) */
int gpu_attn_mma_groups(int T, int nh, int sms);
/* splits for a decode attention of T rows over up to S keys (0: not the decode path);
 * floats of scratch it needs; counters it needs (zeroed once, kept zero by the kernel) */
int gpu_attn_splits(int T, int S, int nh, int nkv, int d, int sms, int min_keys);
/* the same for T batched rows (any T): 0 when the head dim does not fit the decode kernel */
int gpu_attn_key_splits(int T, int S, int nh, int nkv, int d, int sms, int min_keys);
int64_t gpu_attn_part_floats(int T, int nh, int d, int nsplit);
int64_t gpu_attn_counters(int T, int nh, int nkv);

/* k_attn_rows.cu: batched decode, a gpu_attn with slots set. Row t of q [T, nh, d] is the new
 * token of the sequence in slot slots[t] of k, v [P, S, nkv, d], at position pos[t] (keys
 * 0..pos[t]); a slot or position out of range records GPU_ERR_ROW_SLOT with the row in err
 * for node. nsplit > 0 (gpu_attn_key_splits) with part and cnt: the decode kernel's key
 * splits; 0: a block per row and head. */
void gpu_attention_rows(gpuStream_t s, const gpu_attn *a);
void gpu_cache_write_rows(gpuStream_t s, void *cache, const void *x, const int32_t *pos, const int32_t *slots,
                          int64_t P, int64_t S, int64_t T, int64_t row_elems, int esize, int *err, int node);

/* Own tiled GEMM, row-major, any float dtypes. b_nk=1: C[M,N] = A[M,K]·B[N,K]ᵀ;
 * b_nk=0: C = A·B[K,N]. */
void gpu_gemm_t(gpuStream_t s, int b_nk, gpu_ten a, gpu_ten b, gpu_ten c, int64_t M, int64_t N,
                int64_t K);
static inline void gpu_gemm(gpuStream_t s, int b_nk, const float *a, const float *b, float *c,
                            int64_t M, int64_t N, int64_t K)
{
    gpu_gemm_t(s, b_nk, gpu_f32(a), gpu_f32(b), gpu_f32(c), M, N, K);
}

/* Skinny product for M <= GPU_GEMV_MAX_M rows: y[M,N] = x[M,K]·W[N,K]ᵀ (+ bias), or with
 * wu: y = silu(x·Wᵀ) * (x·Wuᵀ). Streams W once with 16-byte loads, one warp per column. */
#define GPU_GEMV_MAX_M 16
void gpu_gemv(gpuStream_t s, gpu_ten x, gpu_ten w, gpu_ten wu, gpu_ten bias, gpu_ten y, int fixed, int64_t M,
              int64_t N, int64_t K);
/* one launch for up to GPU_GEMV_SEGS products of the same x (weights in one dtype, each
 * [N_i,K] with its own bias and output): q/k/v projections in decode; wu only with one.
 * res.p set: y = res + the product rounded to pdt (a residual add; res may be y);
 * nrm set: x is rms-normed with g first (the norm's output never stored) */
#define GPU_GEMV_SEGS 3
typedef struct gpu_gemv_seg {
    gpu_ten w, bias, y;
    int64_t N;
    gpu_ten res;
    int pdt;
    /* w (and a SwiGLU's up weights) no kernel of the program writes: the GEMV loads its first
     * weights before waiting on the kernel before (else they may be that kernel's output) */
    int fixed;
} gpu_gemv_seg;
typedef struct gpu_gemv_norm {
    gpu_ten g;
    float eps;
    int add_one;
    /* res.p set (M = 1 only): x is x + res first, rounded to sum's dtype and stored in sum.
     * sum may be stored exactly over x or res (in place): then the launch's last block to
     * have read the row stores it (last: a zeroed counter the launch leaves zero), or, where
     * the row is not kept in shared memory or last is NULL, an add kernel runs first */
    gpu_ten res, sum;
    unsigned *last;
} gpu_gemv_norm;
void gpu_gemv_multi(gpuStream_t s, gpu_ten x, gpu_ten wu, const gpu_gemv_seg *seg, int nseg,
                    int64_t M, int64_t K, const gpu_gemv_norm *nrm);
/* k_gemv_mma.cu: gpu_gemv_multi without a norm for 2..GPU_GEMV_MAX_M rows on tensor cores
 * (CUDA): 16-bit weights, x in their dtype, every segment's N a multiple of 16 and K of 32.
 * gpu_gemv_mma_ok: whether a product of these dtypes and sizes can take it; gpu_gemv_mma:
 * 1 when it ran, 0 when the operands do not allow it (then nothing was launched). */
int gpu_gemv_mma_ok(int wdt, int xdt, int64_t N, int64_t K);
int gpu_gemv_mma(gpuStream_t s, gpu_ten x, gpu_ten wu, const gpu_gemv_seg *seg, int nseg, int64_t M, int64_t K);

/* k_bmm.cu: c[z] = a[z]·b[z]ᵀ (tb, b [B,N,K]) or a[z]·b[z] (b [B,K,N]) for z < B;
 * y = relu / sin / cos of x */
enum gpu_map_op { GM_RELU, GM_SIN, GM_COS };
void gpu_bmm(gpuStream_t s, int tb, const float *a, const float *b, float *c, int64_t B, int64_t M, int64_t N,
             int64_t K);
void gpu_map(gpuStream_t s, int op, const float *x, float *y, int64_t n);

#endif
