/* The GPU backend's compiled-program types, shared by its translation units. */
#ifndef RLX_GPU_EXE_H
#define RLX_GPU_EXE_H
#include "gpu_kernels.h"
#include "gpu_spatial.h"
#include "gpu_tp.h"
#include "gpu_vendor.h"
#include "rlx/plugin.h"

#include <stddef.h>
#include <stdint.h>

enum gpu_op {
    OP_EMBEDDING, OP_MATMUL, OP_MATMUL_NN, OP_ADD, OP_SUB, OP_MUL, OP_SCALE, OP_ADD_SCALAR,
    OP_SILU, OP_GELU, OP_GELU_TANH, OP_TANH, OP_SOFTCAP, OP_SOFTMAX, OP_RMS_NORM,
    OP_LAYER_NORM, OP_ROPE, OP_ATTENTION, OP_CACHE_WRITE, OP_TRANSPOSE, OP_CONCAT, OP_SLICE,
    OP_LAST_ROW, OP_COPY, OP_CAST, OP_SWIGLU, OP_GEGLU_TANH, OP_ADD_RMS_NORM, OP_LINEAR_SWIGLU,
    OP_CONV2D, OP_GROUP_NORM, OP_UPSAMPLE,
    OP_BMM, OP_RELU, OP_SIN, OP_COS, /* k_bmm.cu */
    OP_ATTN_ROWS, OP_CACHE_ROWS,     /* k_attn_rows.cu: batched decode */
    OP_ALL_REDUCE, OP_ALL_GATHER,    /* gpu_tp.cu */
    OP_ARGMAX,
    OP_COUNT
};

/* scratch and window offsets: 256-byte aligned, as cudaMalloc's */
static inline size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* a matmul step: run_matmul's (cuBLAS, the own GEMM or the skinny GEMV) */
static inline int op_is_matmul(int op)
{
    return op == OP_MATMUL || op == OP_MATMUL_NN || op == OP_LINEAR_SWIGLU;
}

/* What the compiler needs to know of each op, one row per op in enum order (checked
 * below, at compile time): adding an op is one enum entry, one row here, and its cases in
 * gpu_backend.cu's step_build and gpu_run.cu's run_step (switches over the enum: a missing case is a
 * warning). */
enum {
    OPF_HALF = 1,     /* float operands in f32, f16 or bf16 (else f32 only) */
    OPF_LAYOUT = 2,   /* moves 2- or 4-byte elements, all operands in one dtype */
    OPF_OWN_SIZE = 4, /* output size is not input 0's: step_build checks it */
    OPF_CHECKS = 8,   /* reports execute errors through the error word */
};
typedef struct gpu_opdef {
    int op;
    const char *name;
    int8_t min_in, max_in, n_out;
    uint8_t flags;
} gpu_opdef;
#define H OPF_HALF
#define L OPF_LAYOUT
#define S OPF_OWN_SIZE
static constexpr gpu_opdef op_defs[] = {
    {OP_EMBEDDING, "rlx.embedding", 2, 2, 1, H | S | OPF_CHECKS},
    {OP_MATMUL, "rlx.matmul", 2, 3, 1, H | S},
    {OP_MATMUL_NN, "rlx.matmul_nn", 2, 2, 1, H | S},
    {OP_ADD, "rlx.add", 2, 2, 1, H},
    {OP_SUB, "rlx.sub", 2, 2, 1, H},
    {OP_MUL, "rlx.mul", 2, 2, 1, H},
    {OP_SCALE, "rlx.scale", 1, 1, 1, H},
    {OP_ADD_SCALAR, "rlx.add_scalar", 1, 1, 1, H},
    {OP_SILU, "rlx.silu", 1, 1, 1, H},
    {OP_GELU, "rlx.gelu", 1, 1, 1, H},
    {OP_GELU_TANH, "rlx.gelu_tanh", 1, 1, 1, H},
    {OP_TANH, "rlx.tanh", 1, 1, 1, H},
    {OP_SOFTCAP, "rlx.softcap", 1, 1, 1, H},
    {OP_SOFTMAX, "rlx.softmax", 1, 1, 1, H},
    {OP_RMS_NORM, "rlx.rms_norm", 2, 2, 1, H},
    {OP_LAYER_NORM, "rlx.layer_norm", 3, 3, 1, H},
    {OP_ROPE, "rlx.rope", 3, 3, 1, H},
    {OP_ATTENTION, "rlx.attention", 3, 5, 1, H},
    {OP_CACHE_WRITE, "rlx.cache_write", 3, 3, 1, L | S | OPF_CHECKS},
    {OP_TRANSPOSE, "rlx.transpose", 1, 1, 1, L | S},
    {OP_CONCAT, "rlx.concat", 2, 2, 1, L | S},
    {OP_SLICE, "rlx.slice", 1, 1, 1, L | S},
    {OP_LAST_ROW, "rlx.last_row", 1, 2, 1, L | S},
    {OP_COPY, "rlx.copy", 1, 1, 1, L},
    {OP_CAST, "rlx.cast", 1, 1, 1, 0},
    {OP_SWIGLU, "rlx.swiglu", 2, 2, 1, H},
    {OP_GEGLU_TANH, "rlx.geglu_tanh", 2, 2, 1, H},
    {OP_ADD_RMS_NORM, "rlx.add_rms_norm", 3, 3, 2, H | S},
    {OP_LINEAR_SWIGLU, "rlx.linear_swiglu", 3, 3, 1, H | S},
    {OP_CONV2D, "rlx.conv2d", 2, 3, 1, S},
    {OP_GROUP_NORM, "rlx.group_norm", 3, 3, 1, 0},
    {OP_UPSAMPLE, "rlx.upsample_nearest2d", 1, 1, 1, S},
    {OP_BMM, "rlx.bmm", 2, 2, 1, S},
    {OP_RELU, "rlx.relu", 1, 1, 1, 0},
    {OP_SIN, "rlx.sin", 1, 1, 1, 0},
    {OP_COS, "rlx.cos", 1, 1, 1, 0},
    {OP_ATTN_ROWS, "rlx.attention_rows", 5, 5, 1, H | S | OPF_CHECKS},
    {OP_CACHE_ROWS, "rlx.cache_write_rows", 4, 4, 1, L | S | OPF_CHECKS},
    {OP_ALL_REDUCE, "rlx.all_reduce", 1, 1, 1, L},
    {OP_ALL_GATHER, "rlx.all_gather", 1, 1, 1, L | S},
    {OP_ARGMAX, "rlx.argmax", 1, 1, 1, H | S},
};
#undef H
#undef L
#undef S
static constexpr int op_defs_keyed(int i)
{
    return i == OP_COUNT || (op_defs[i].op == i && op_defs[i].min_in <= op_defs[i].max_in &&
                             op_defs_keyed(i + 1));
}
static_assert(sizeof op_defs / sizeof op_defs[0] == OP_COUNT && op_defs_keyed(0),
              "op_defs has one row per op, in enum order");

#define GPU_FUSE_PARTS 8 /* steps a fused group absorbs besides its head */

/* One launch (or a few) with everything resolved from shapes and attributes. */
typedef struct gpu_step {
    int op, node;
    int in[5], n_in;
    int out[2];
    int64_t rows, n, k, nb; /* meaning per op, see step_build */
    float f0, f1;
    int i0, i1, i2;
    gpu_perm perm;
    gpu_attn attn; /* pointers filled at execute */
    gpu_conv conv; /* image ops (gpu_spatial.h) */
    int dti[5], dto[2]; /* dtypes of the inputs and outputs */
    /* matmuls: the skinny kernel, or the GEMM with x cast to the weight's dtype in scratch
     * at a_off and/or the f32 product in scratch at c_off (bias, SwiGLU, dtype) */
    int gemv, a_cast, c_scratch, c_half; /* c_half: a linear_swiglu's gate and up in scratch in 16 bits */
    size_t a_off, c_off;
    /* fuse_steps: the head of a group of consecutive steps runs their work in one launch
     * (fuse = FUSE_*, the absorbed steps in part) when nothing it writes overlaps what it
     * reads (checked at execute: the arena may reuse a dead input for a later output) */
    int fuse, part[GPU_FUSE_PARTS], n_part;
    int g0, g1;    /* of a head: its group is steps [g0, g1) */
    int fused_now; /* this execute: the head ran fused, its parts are skipped */
    int head;      /* of an absorbed step, else -1 */
    int priv;      /* in a FUSE_ATTN_IN or FUSE_QKV_GEMM group: out[0] lives in the group's
                    * private scratch */
    int nrm;       /* of a head: the rms_norm step whose output only the group's GEMVs read
                    * (they norm x themselves; the output is never stored), else -1 */
    /* of a head with nrm: the add step whose sum that norm reads, when the add belongs to a
     * GEMV + add group; if that group is refused at execute the head takes the add in
     * (add_now: its GEMVs add, store the sum and norm it), else -1. taker: of that add
     * step, the head, else -1 */
    int pre_add, add_now, taker;
    /* a graph-replayed rope or attention whose positions (and rope's inv_freq, attention's
     * cache rows before pos) nothing in the program writes before it: its kernel reads
     * them before waiting on the kernel before (pre_steps) */
    int pre;
    int wfix; /* a matmul's weights (in[1], and linear_swiglu's in[2]) are fixed during the
               * program (pre_steps): its GEMV may load them before its wait */
    gpu_tp_link tp; /* collectives: the rank, its group and communicator */
} gpu_step;

/* backend-level fusions (model-agnostic: they match op sequences in the program) */
enum {
    FUSE_NONE,
    FUSE_ADD_NORM, /* add(a,b) -> rms_norm: one kernel writes the sum and its norm */
    FUSE_GLU,      /* matmul(x,Wg), matmul(x,Wu), swiglu: one GEMV with the SwiGLU epilogue */
    FUSE_GEMVS,    /* 2-3 decode matmuls of the same x (q/k/v): one GEMV launch */
    FUSE_ROPE_CACHE, /* ropes and in-place cache writes of one attention: one launch */
    FUSE_ATTN_IN,  /* decode GEMVs of one x interleaved with ropes of their products and cache
                    * writes: two launches at the last step, the products in private scratch */
    FUSE_GEMV_ADD, /* decode matmul then add of its product (a residual): one GEMV epilogue */
    FUSE_QKV_GEMM, /* prefill GEMMs of one x interleaved with ropes of their products and cache
                    * writes: one GEMM over the weights side by side (checked at execute) into
                    * scratch, then one rope + cache launch reading it with a row stride */
    FUSE_ARGMAX_TAIL, /* one-row argmax then one-element cache writes and i32 add_scalars (a
                       * greedy step's id and position bookkeeping): the argmax's last block
                       * runs them, in order, on one thread */
    FUSE_COUNT
};

typedef struct gpu_exe {
    gpu_step *steps;
    uint32_t n_steps;
    uint32_t n_values;
    int checks;       /* has kernels that report execute errors */
    char *scratch;    /* per-step temporaries (steps run in order on one stream) */
    size_t scratch_bytes;
    unsigned *attn_cnt; /* decode attention's and argmax's counters: zero between launches, so kept apart */
    int64_t n_cnt;
    /* graph replay: the pointers it was captured with */
    void **graph_ptrs;
    gpuGraphExec_t graph;
    int has_graph;
    int decode; /* the profile's phase: the program's (rlx_program.phase, ABI 1.3), else guessed:
                 * every matmul has <= GPU_GEMV_MAX_M rows, or the program is a batched decode
                 * step (it runs rows ops: one row a sequence, any count) */
    int norm_rows; /* most rows whose GEMVs absorb an rms_norm (be->norm_rows) */
    int qkv_gemm;  /* FUSE_QKV_GEMM groups allowed (be->qkv_gemm) */
    int argmax_tail; /* FUSE_ARGMAX_TAIL groups allowed (be->argmax_tail) */
    size_t *vbytes; /* each value's size, for the fusion overlap checks */
    int *root;      /* each value's storage value (aliases resolved) */
    /* FUSE_ATTN_IN groups: values moved to private scratch (fscratch + ovr_off), and the
     * value pointers with them applied (vp2) */
    char *fscratch;
    int *ovr_v, n_ovr;
    size_t *ovr_off, fs_bytes;
    void **vp2;
    int n_fused[FUSE_COUNT], n_norms; /* groups fused; rms_norms absorbed by GEMVs */
    long runs;  /* executes so far (the profile leaves out the first: lazy kernel loading) */
    int coll;   /* has collectives: connected at the first execute, before a capture */
    int graphs; /* replays a captured graph (the backend's RLX_GRAPHS_* for this kind of program) */
    /* a graph-replayed program's collective buffers in one NCCL symmetric window a rank
     * (gpu_tp_window_open): the values (win_v, with their aliases) at win_off, each buffer
     * its own bytes; the value pointers with them applied (vpw). win_state: 0 not tried,
     * 1 open, -1 none (the arena's) */
    int *win_v, n_win, win_state;
    size_t *win_off, win_bytes;
    void *win, *win_h, **vpw;
} gpu_exe;

typedef struct gpu_be {
    int device;
    gpuStream_t stream;
    gpu_blas *blas;
    int own_gemm;
    int graphs; /* RLX_GRAPHS_* (rlx_backend_options): which programs replay a captured graph */
    int fuse; /* fuse_steps on (RLX_GPU_FUSE=0: off, to compare) */
    int late_add; /* a GEMV group may take the add its norm reads (RLX_GPU_LATE_ADD=0: off) */
    /* most rows whose GEMVs absorb an rms_norm (RLX_GPU_NORM_ROWS, default 1): above one
     * row the multi-row GEMV would reload the norm weight per row beside every weight
     * vector (L1-bound); a separate norm kernel is cheaper there */
    int norm_rows;
    int sms; /* multiprocessors: sizes the decode attention split and the prefill key groups */
    int fa_split; /* prefill attention may split a block's keys in two groups (RLX_GPU_FA_SPLIT=0: off) */
    int glu_f32; /* a prefill linear_swiglu keeps gate and up in f32 scratch (RLX_GPU_GLU_F32=1) */
    int qkv_gemm; /* prefill q/k/v GEMMs of one x as one (FUSE_QKV_GEMM; RLX_GPU_QKV_GEMM=0: off) */
    /* most rows a product takes the SIMT GEMV for (RLX_GPU_GEMV_ROWS, 1..GPU_GEMV_MAX_M, default
     * 1: above one row it loads x once per row beside every weight vector); up to
     * GPU_GEMV_MAX_M rows of 16-bit products take the tensor-core GEMV (k_gemv_mma.cu;
     * RLX_GPU_GEMV_MMA=0: off), the rest cuBLAS */
    int gemv_rows;
    int gemv_mma;
    int rows_split; /* batched decode attention on the key-split decode kernel (RLX_GPU_ROWS_SPLIT=0: off) */
    int *err_dev;  /* {code, value, node} */
    unsigned *sum_last; /* zero between launches: a GEMV storing an add's sum in place counts its blocks */
    int *err_host; /* pinned copy */
    char *stage;   /* pinned staging for downloads (NULL: copy straight to the caller) */
    /* a program whose error words are unread: the next sync or execute reads them (so a
     * download right after a step waits once, for both). err_queued: their copy to err_host
     * is on the stream (queued by the run itself with RLX_GPU_ERR_AT_SYNC=0, else by the
     * first download or sync after it: a chain of runs copies them once) */
    struct gpu_exe *pending;
    int err_queued, err_at_sync;
    /* pinned bytes small uploads go through (a step's token id and positions): one async
     * copy each, no staging by the driver; reused from the start by gpu_sync */
    char *up_ring;
    size_t up_off;
    /* uploads of at most GPU_UP_BYTES held until the stream's next work, then written by one
     * kernel that carries them (gpu_up_flush; RLX_GPU_UP_BATCH=0: a copy each) */
    int up_batch;
    gpu_up_batch upb;
    int defer_checks; /* RLX_GPU_DEFER_CHECK=0: read them in execute, as before */
    int attn_keys;    /* RLX_GPU_ATTN_KEYS: keys a decode attention block takes (0: the kernel's) */
    int attn_mma;     /* 16-bit decode attention on tensor cores (RLX_GPU_ATTN_MMA=0: off) */
    int argmax_split; /* RLX_GPU_ARGMAX_SPLIT=0: one block an argmax row */
    int argmax_tail;  /* FUSE_ARGMAX_TAIL (RLX_GPU_ARGMAX_TAIL=0: off) */
    struct gpu_prof *prof; /* RLX_GPU_PROFILE=1 */
} gpu_be;

/* RLX_GPU_PROFILE=1: each step timed with events (graphs off), the host calls timed; a
 * table per phase (decode: every matmul has <= 16 rows) on stderr at teardown. A program's
 * first execute is left out of the per-op times (it loads each kernel lazily). Event pairs
 * around each launch count its launch latency too: small kernels read high. */
#define GPU_PROF_SHAPES 32
typedef struct gpu_prof_shape { /* an op at rows x n x k (a matmul's M, N, K) */
    int op;
    int64_t rows, n, k;
    double ms;
    long cnt;
} gpu_prof_shape;
typedef struct gpu_prof {
    double op_ms[2][OP_COUNT + FUSE_COUNT]; /* ops, then fused groups by FUSE_* */
    long op_n[2][OP_COUNT + FUSE_COUNT];
    double exec_ms[2], up_ms, down_ms, alloc_ms, compile_ms, first_ms[2];
    long exec_n[2], up_n, down_n, alloc_n, compile_n, first_n[2], launches[2];
    double up_b, down_b, alloc_b;
    gpuEvent_t e0, e1;
    gpu_prof_shape shp[2][GPU_PROF_SHAPES]; /* the unfused matmuls: which shapes take the time */
    int n_shp[2];
} gpu_prof;

/* gpu_backend.cu */
/* the held small uploads written, on the stream before anything queued after: 0 or a device error */
int gpu_up_flush(gpu_be *be, rlx_diag *d);
/* "<vendor>: " and the message into d, with code (d NULL: nothing) */
void set_diag(rlx_diag *d, int code, const char *fmt, ...) RLX_PRINTF(3, 4);
/* f32, f16 or bf16 */
int is_flt(int dt);
/* bytes of an element of dtype dt */
int esize(int dt);
/* a monotonic clock in ms (the profile) */
double now_ms(void);
/* the FUSE_* groups, as the profile and diags name them */
extern const char *const fuse_names[FUSE_COUNT];

/* gpu_run.cu: the backend's execute (rlx_backend.execute) */
int gpu_execute(void *bep, void *exep, void *const *vp, rlx_diag *d);
/* the error words of the last program run (be->pending), once it is done (idle: the caller
 * has just synchronized the stream): 0 or its error */
int gpu_check_pending(gpu_be *be, int idle, rlx_diag *d);
/* queues the pending program's error words' copy to err_host unless queued: 0 or a device error */
int gpu_queue_err_copy(gpu_be *be, rlx_diag *d);

/* gpu_fuse.cu: fusion matching at compile time, and the steps that may read early */
/* rlx.add_rms_norm step st (built) becomes an add (st) and an rms_norm of its sum (st + 1) */
void split_add_norm(gpu_step *st);
/* the value whose bytes v is (its alias chain followed) */
int value_root(const rlx_program *prog, int v);
/* 1 when a step of steps[g0..g1) writes v's bytes (its root's) */
int made_in(const gpu_exe *x, int g0, int g1, int v);
/* appends root r and its aliases to vs/offs, at base plus their offsets; -1: out of memory */
int move_root(const gpu_exe *x, const rlx_program *prog, int r, size_t base, int **vs, size_t **offs,
              int *n);
/* 1 when root r is a temporary no program output shares: its bytes may leave the arena */
int movable(const gpu_exe *x, const rlx_program *prog, int r);
/* groups the steps one launch can run (FUSE_*); -1: out of memory */
int fuse_steps(gpu_exe *x, const rlx_program *prog);
/* marks the ropes and attentions that may read their constant inputs early (gpu_step.pre) */
void pre_steps(gpu_exe *x, const rlx_program *prog);

/* gpu_coll.cu: the program's side of its collectives (gpu_tp.cu) */
/* the program's first connected collective's link, or NULL */
const gpu_tp_link *coll_link(const gpu_exe *x);
/* a graph-replayed program's collective buffers in one symmetric window; -1: out of memory */
int coll_window_plan(gpu_exe *x, const rlx_program *prog);
/* the ranks launch a step's graph together (rc: this rank's so far); rc, or an error */
int coll_launch(const gpu_exe *x, int rc, rlx_diag *d);
/* a program's first execute: its collectives match the other ranks' */
int coll_check(const gpu_exe *x, rlx_diag *d);
/* opens the planned window at the first execute (x->win_state) */
void coll_window_open(gpu_be *be, gpu_exe *x);
/* the end of a step with collectives: its stream drained, or the peers told of rc */
int coll_end(gpu_be *be, const gpu_exe *x, int rc, rlx_diag *d);
#endif
