/* Internal declarations of the CPU backend plugin (built against plugin.h only). */
#ifndef RLX_CPU_BACKEND_H
#define RLX_CPU_BACKEND_H
#include "rlx/plugin.h"
#include "cpu_isa.h"
#include <pthread.h>
#include <stddef.h>

RLX_EXPORT const rlx_plugin_desc *rlx_plugin_init(const rlx_host_api *host);

/* host table handed to rlx_plugin_init (never NULL once loaded) */
extern const rlx_host_api *cpu_host;
/* one-line diagnostic through host->diag_set; returns code */
int cpu_fail(rlx_diag *d, int code, const char *fmt, ...) RLX_PRINTF(3, 4);

/* ---- OpenBLAS, loaded by the first compile that may need it (cpu_blas.c) ---- */
/* NULL once cblas_sgemm can be called, else why not (one line) */
const char *cpu_blas_load(void);
/* 1 when a node of op may call cblas_sgemm with these kernels (cpu_compile loads it then) */
int cpu_blas_may_need(const char *op, const cpu_isa *isa);

/* ---- worker pool (cpu_pool.c) ---- */
typedef struct cpu_pool cpu_pool;
typedef void (*cpu_task_fn)(void *arg, int64_t task, int worker);
/* n_workers includes the calling thread (worker 0: execute binds it to pus[0] for the
 * call and restores its mask after); worker i >= 1 runs on its own thread, bound to
 * pus[i] unless pus is NULL or pus[i] < 0. */
int cpu_pool_create(int n_workers, const int *pus, cpu_pool **out, rlx_diag *d);
void cpu_pool_destroy(cpu_pool *p);
int cpu_pool_size(const cpu_pool *p);
/* Runs fn(arg, t, worker) for t in [0, n_tasks), spread over the workers; returns when
 * all are done. Workers spin briefly between calls, then sleep on a condition variable. */
void cpu_pool_run(cpu_pool *p, int64_t n_tasks, cpu_task_fn fn, void *arg);
/* RLX_CPU_PROFILE: jobs handed to the workers (more than one task) since start, and the
 * seconds the caller waited for other workers' tasks after running out of its own; zero
 * unless profiling (counting costs a clock read per job) */
void cpu_pool_stats(uint64_t *jobs, double *wait_s);

/* ---- backend instance ---- */
typedef struct cpu_backend {
    const cpu_isa *isa;
    cpu_pool *pool;
    int n_workers;
    int pu0;                 /* where worker 0 (the caller) runs during execute; -1: anywhere */
    pthread_mutex_t exec_mu; /* one execute at a time: the pool has one job slot */
} cpu_backend;

/* ---- compiled nodes ---- */
struct cpu_node;
typedef struct cpu_run {
    cpu_backend *be;
    const struct cpu_node *nd;
    void *const *vp;  /* value pointers of this execute */
    float *scratch;   /* n_workers * scratch_stride floats */
    size_t scratch_stride;
    rlx_diag *d;
    float *shared;    /* shared_floats of the node, one buffer for every worker */
} cpu_run;

typedef int (*cpu_kernel_fn)(const cpu_run *r);

/* conv2d geometry (one image, channels first); tile: output pixels per task */
typedef struct cpu_conv {
    int64_t C, H, W, Co, kh, kw, sh, sw, ph, pw, dh, dw, groups, Ho, Wo, tile;
} cpu_conv;

#define CPU_MAX_IN 5
typedef struct cpu_node {
    cpu_kernel_fn fn;
    const char *op;
    uint32_t index;
    int32_t in[CPU_MAX_IN];
    uint32_t n_in;
    int32_t out[2];
    uint32_t n_out;
    int32_t in_dtype, out_dtype;
    size_t esize;       /* element size of data-movement ops */
    int64_t rows, cols; /* 2-D view: leading dims flattened */
    int64_t M, N, K;    /* matmuls */
    int64_t nb;         /* broadcast operand length (elementwise) */
    int64_t T, S, nh, nkv, hd, rot; /* attention / rope / cache_write */
    int32_t pos_in, mask_in, bias_in; /* optional inputs (-1: absent) */
    int bin_op, flag, causal;
    int rows_mode; /* attention_rows: one query row per sequence, own cache slot and pos */
    int64_t window;
    float fa, fb;       /* scale / value / cap / eps / softcap */
    int64_t outer, inner, a_ax, b_ax, start; /* concat / slice / last_row */
    uint32_t ndim;      /* transpose */
    int64_t in_dims[RLX_MAX_DIMS], perm[RLX_MAX_DIMS];
    size_t scratch_floats; /* per worker */
    size_t shared_floats;  /* one buffer shared by the node's tasks (16-bit operands in f32) */
    int32_t dt[4];         /* dtypes of the operands a kernel converts (x, w, w2 / q, k, v, out) */
    cpu_conv cv;           /* conv2d; group_norm (H: values per channel); upsample (sh: scale) */
} cpu_node;

/* What an op needs at compile time: checks the node and fills nd (returns 0 or fails d). */
typedef struct cpu_compile_ctx {
    const rlx_program *prog;
    const rlx_node_desc *node;
    uint32_t index;
    rlx_diag *d;
    const cpu_isa *isa; /* the kernels the program will run with */
} cpu_compile_ctx;
typedef int (*cpu_prepare_fn)(const cpu_compile_ctx *c, cpu_node *nd);

typedef struct cpu_op_def {
    const char *name;
    cpu_prepare_fn prepare;
    cpu_kernel_fn run;
} cpu_op_def;

/* cpu_ops.c: the op table and shared compile helpers */
const cpu_op_def *cpu_op_find(const char *name);
extern const char *cpu_op_names[];
/* cpu_mem.c: MemAvailable / MemTotal */
int cpu_mem_info(void *be, rlx_mem_info *out, rlx_diag *d);
void cpu_ops_init(void); /* fills cpu_op_names; before the host reads the descriptor */
const rlx_value_desc *cpu_val(const cpu_compile_ctx *c, uint32_t input_slot); /* NULL if absent */
const rlx_value_desc *cpu_out(const cpu_compile_ctx *c, uint32_t output_slot);
int64_t cpu_numel(const rlx_shape *s);
size_t cpu_dtype_size(int dtype); /* 0 if unknown */
int cpu_bad(const cpu_compile_ctx *c, const char *fmt, ...) RLX_PRINTF(2, 3);
int cpu_need(const cpu_compile_ctx *c, uint32_t min_in, uint32_t max_in, uint32_t n_out);
int cpu_need_f32(const cpu_compile_ctx *c, const rlx_value_desc *v, const char *what);
/* f32, f16 or bf16 */
int cpu_need_float(const cpu_compile_ctx *c, const rlx_value_desc *v, const char *what);
int cpu_is_float(int dtype);
/* the backend's supports_op: which dtypes each kernel takes */
int cpu_supports_op(const rlx_node_desc *node, const rlx_value_desc *values);
/* converts n values between f32 and a 16-bit dtype, in parallel chunks */
void cpu_to_f32(const cpu_run *r, int dt, const void *x, float *o, int64_t n);
void cpu_from_f32(const cpu_run *r, int dt, const float *x, void *o, int64_t n);
/* row kernels on f32 or 16-bit rows of n elements: row i of input p (dtype dt) as f32, in
 * place or widened into buf; where output row i is computed (in place, or buf); and buf
 * rounded into it when the output is 16-bit */
const float *cpu_row_in(const cpu_isa *isa, int dt, const void *p, int64_t i, int64_t n, float *buf);
float *cpu_row_at(int dt, void *p, int64_t i, int64_t n, float *buf);
void cpu_row_out(const cpu_isa *isa, int dt, void *p, int64_t i, int64_t n, const float *buf);
int cpu_attr_int(const cpu_compile_ctx *c, const char *name, int64_t def, int64_t *out);
int cpu_attr_float(const cpu_compile_ctx *c, const char *name, double def, double *out);
const rlx_attr *cpu_attr_find(const cpu_compile_ctx *c, const char *name);
/* splits [0, n) in fixed chunks of a size that depends on n only (never on threads) */
int64_t cpu_chunk(int64_t n, int64_t min_chunk, int64_t max_chunks, int64_t align);
void cpu_parallel(const cpu_run *r, int64_t n_tasks, cpu_task_fn fn, void *arg);

#define CPU_F(r, slot) ((float *)(r)->vp[(r)->nd->in[slot]])
#define CPU_O(r, slot) ((float *)(r)->vp[(r)->nd->out[slot]])

/* cpu_prof.c: RLX_CPU_PROFILE=1 times every node; NULL when off */
typedef struct cpu_prof cpu_prof;
cpu_prof *cpu_prof_new(uint32_t n_nodes);
double cpu_prof_now(void);
void cpu_prof_add(cpu_prof *p, uint32_t node, double seconds, int last); /* last: a run ends */
void cpu_prof_free(cpu_prof *p, const cpu_node *nodes, uint32_t n_nodes); /* logs the totals */

/* prepare/run pairs, one family per file */
#define CPU_OP(name) \
    int cpu_prep_##name(const cpu_compile_ctx *c, cpu_node *nd); \
    int cpu_run_##name(const cpu_run *r);
/* cpu_k_matmul.c */
CPU_OP(matmul) CPU_OP(matmul_nn) CPU_OP(linear_swiglu)
/* cpu_k_bmm.c */
CPU_OP(bmm)
/* cpu_k_elementwise.c */
CPU_OP(binary) CPU_OP(unary) CPU_OP(gated)
/* cpu_k_norm.c */
CPU_OP(softmax) CPU_OP(argmax) CPU_OP(rms_norm) CPU_OP(layer_norm) CPU_OP(add_rms_norm)
/* cpu_k_attention.c */
CPU_OP(attention) CPU_OP(attention_rows) CPU_OP(rope)
/* cpu_k_data.c */
CPU_OP(embedding) CPU_OP(cache_write) CPU_OP(cache_write_rows) CPU_OP(transpose) CPU_OP(concat) CPU_OP(slice)
CPU_OP(last_row) CPU_OP(copy) CPU_OP(cast)
/* cpu_k_spatial.c */
CPU_OP(conv2d) CPU_OP(group_norm) CPU_OP(upsample)
/* cpu_k_collective.c: all_reduce and all_gather between ranks of this process */
CPU_OP(collective)
#undef CPU_OP

#endif
