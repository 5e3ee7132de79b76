/* rlx/plugin.h — the plugin ABI of rlx.
 *
 * Everything a block, backend or arch plugin may see of the host. Plain C types only:
 * no jansson, hwloc or BLAS type crosses this boundary.
 *
 * Stability rules (see docs/ABI.md):
 *  - one exported symbol per plugin: rlx_plugin_init (RLX_PLUGIN_ENTRY_NAME);
 *  - every struct that crosses the boundary starts with uint32_t struct_size, computed
 *    with RLX_STRUCT_SIZE(T, last_field); fields are only ever appended; a reader checks
 *    struct_size before touching a field added in a later minor version;
 *  - ABI major must match exactly; a plugin's minor may be older than the host's;
 *  - optional function pointers may be NULL and the host supplies a default;
 *  - what each minor added is grouped at the end of its struct under a "ABI 1.N" label.
 *
 * ABI 1.1: arch plugins own their model types (rlx_arch.configure, class_names); the
 * host hands plugins raw config.json lookups (config_*), the config of the flow being
 * built (flow_config / ctx_config) and block composition (emit_block).
 * ABI 1.2: backends may report device memory (rlx_backend.mem_info) and measure their
 * ceilings (rlx_backend.measure_ceilings), both optional.
 */
#ifndef RLX_PLUGIN_H
#define RLX_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RLX_ABI_MAJOR 1
#define RLX_ABI_MINOR 3

#define RLX_PLUGIN_ENTRY rlx_plugin_init
#define RLX_PLUGIN_ENTRY_NAME "rlx_plugin_init"

/* Size of a struct up to and including its last field (trailing padding excluded). */
#define RLX_STRUCT_SIZE(T, last) (offsetof(T, last) + sizeof(((T *)0)->last))

#if defined(__GNUC__)
#define RLX_EXPORT __attribute__((visibility("default")))
#define RLX_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define RLX_EXPORT
#define RLX_PRINTF(f, a)
#endif

/* ---------------------------------------------------------------- basic types */

typedef enum rlx_status {
    RLX_OK = 0,
    RLX_ERR_INVALID = 1,     /* bad input: file, tensor, key, shape */
    RLX_ERR_IO = 2,
    RLX_ERR_NOMEM = 3,
    RLX_ERR_UNSUPPORTED = 4, /* op / dtype / model type not handled */
    RLX_ERR_NOT_FOUND = 5,
    RLX_ERR_DEVICE = 6,      /* device missing or failed */
    RLX_ERR_INTERNAL = 7
} rlx_status;

typedef enum rlx_dtype {
    RLX_F32 = 0,
    RLX_F16 = 1,
    RLX_BF16 = 2,
    RLX_I32 = 3,
    RLX_I64 = 4,
    RLX_U8 = 5,
    RLX_DTYPE_COUNT
} rlx_dtype;

#define RLX_MAX_DIMS 6

typedef struct rlx_shape {
    uint32_t ndim;
    int64_t dims[RLX_MAX_DIMS];
} rlx_shape;

/* A diagnostic: filled by whoever fails; msg is one line naming the thing at fault. */
typedef struct rlx_diag {
    uint32_t struct_size;
    int32_t code; /* rlx_status */
    char msg[1024];
} rlx_diag;

/* Op attributes: named, typed. Strings and arrays are borrowed for the call. */
typedef enum rlx_attr_kind {
    RLX_ATTR_INT = 0,
    RLX_ATTR_FLOAT = 1,
    RLX_ATTR_STR = 2,
    RLX_ATTR_INTS = 3
} rlx_attr_kind;

typedef struct rlx_attr {
    const char *name;
    int32_t kind; /* rlx_attr_kind */
    int64_t i;
    double f;
    const char *s;
    const int64_t *ints;
    uint32_t n_ints;
} rlx_attr;

#define RLX_ATTR_I(n, v) {(n), RLX_ATTR_INT, (int64_t)(v), 0.0, NULL, NULL, 0}
#define RLX_ATTR_F(n, v) {(n), RLX_ATTR_FLOAT, 0, (double)(v), NULL, NULL, 0}
#define RLX_ATTR_S(n, v) {(n), RLX_ATTR_STR, 0, 0.0, (v), NULL, 0}
#define RLX_ATTR_V(n, p, c) {(n), RLX_ATTR_INTS, 0, 0.0, NULL, (p), (uint32_t)(c)}

/* ---------------------------------------------------------------- model description */

#define RLX_MAX_LAYERS 256
#define RLX_MAX_EOS 8

enum { RLX_LAYER_FULL = 0, RLX_LAYER_SLIDING = 1 };

/* A parsed config.json, opaque; read through host->config_* (ABI 1.1). */
typedef struct rlx_config rlx_config;

/* What a model's config.json says, with HF's defaults applied by the arch plugin that
 * owns the model type (rlx_arch.configure). Fields a model type does not use are 0 /
 * empty. Only fields every family shares belong here: a family's own keys are read
 * from the raw config (host->config_*). Appended to, never reordered. */
typedef struct rlx_model_config {
    uint32_t struct_size;
    char model_type[32];   /* "llama", "qwen3", "gemma2", "gemma3_text", "bert", "sam", "flux" */
    char architecture[64]; /* architectures[0] or diffusers _class_name */
    int32_t dtype;         /* rlx_dtype of the checkpoint (torch_dtype / dtype) */
    int64_t vocab_size;
    int64_t hidden_size;
    int64_t intermediate_size;
    int64_t num_layers;
    int64_t num_heads;
    int64_t num_kv_heads;
    int64_t head_dim;
    int64_t max_position_embeddings;
    double norm_eps; /* rms_norm_eps or layer_norm_eps */
    int32_t tie_word_embeddings;
    int32_t attention_bias;
    int32_t mlp_bias;
    char hidden_act[32]; /* "silu", "gelu", "gelu_pytorch_tanh", ... */
    /* rope: global (full-attention) layers */
    double rope_theta;
    char rope_type[16]; /* "default", "llama3", "linear", ... */
    double rope_factor;
    double rope_low_freq_factor;
    double rope_high_freq_factor;
    int64_t rope_original_max_position;
    /* rope for sliding (local) layers, gemma3; 0 when the same as global */
    double rope_local_theta;
    /* attention variants */
    int64_t sliding_window;              /* 0: none */
    uint8_t layer_types[RLX_MAX_LAYERS]; /* RLX_LAYER_FULL / RLX_LAYER_SLIDING */
    double attn_logit_softcap;           /* 0: none */
    double final_logit_softcap;          /* 0: none */
    double query_pre_attn_scalar;        /* 0: use head_dim */
    /* tokens */
    int64_t bos_token_id; /* -1: none */
    int64_t eos_token_ids[RLX_MAX_EOS];
    int32_t n_eos;
    /* encoders (bert) */
    int64_t type_vocab_size;
    /* appended: diffusion transformers (flux), for the recipe's input shapes */
    int64_t in_channels;   /* in_channels */
    int64_t context_dim;   /* joint_attention_dim */
    int64_t pooled_dim;    /* pooled_projection_dim; 0: none (FLUX.2) */
    int32_t rope_axes;     /* entries of axes_dims_rope */
} rlx_model_config;

/* ---------------------------------------------------------------- topology */

typedef struct rlx_topology {
    uint32_t struct_size;
    int32_t packages;
    int32_t cores;     /* physical cores in the allowed cpuset */
    int32_t pus;       /* hardware threads in the allowed cpuset */
    int32_t numa_nodes;
    int32_t n_workers; /* placement chosen: one entry per worker */
    int32_t worker_pu[256]; /* OS index of the PU each worker is bound to (-1: unbound) */
    char placement[16];     /* "cores", "pus", "none" */
    char summary[512];      /* one readable line */
} rlx_topology;

/* ---------------------------------------------------------------- graph, as backends see it */

/* Where a value lives. Every value is dense, row-major, contiguous. */
typedef enum rlx_value_kind {
    RLX_VALUE_TEMP = 0,   /* intermediate: lives in the arena at arena_offset */
    RLX_VALUE_INPUT = 1,  /* bound at execute */
    RLX_VALUE_OUTPUT = 2, /* bound at execute (also written by a node) */
    RLX_VALUE_WEIGHT = 3, /* uploaded once, bound at execute */
    RLX_VALUE_CONST = 4,  /* host constant (rope tables), uploaded once */
    RLX_VALUE_STATE = 5,  /* persistent session buffer (KV cache), bound at execute */
    RLX_VALUE_ALIAS = 6   /* same bytes as value alias_of (+ alias_offset bytes) */
} rlx_value_kind;

typedef struct rlx_value_desc {
    uint32_t struct_size;
    int32_t kind; /* rlx_value_kind */
    int32_t dtype;
    rlx_shape shape;
    const char *name;   /* inputs, outputs, weights, states; may be NULL for temps */
    size_t arena_offset; /* RLX_VALUE_TEMP */
    int32_t alias_of;    /* RLX_VALUE_ALIAS */
    size_t alias_offset;
} rlx_value_desc;

typedef struct rlx_node_desc {
    uint32_t struct_size;
    const char *op; /* "rlx.matmul", ... (docs/OPS.md) */
    const int32_t *inputs;
    uint32_t n_inputs;
    const int32_t *outputs;
    uint32_t n_outputs;
    const rlx_attr *attrs;
    uint32_t n_attrs;
} rlx_node_desc;

/* A scheduled, planned graph: nodes run in order. */
typedef struct rlx_program {
    uint32_t struct_size;
    const rlx_value_desc *values;
    uint32_t n_values;
    const rlx_node_desc *nodes;
    uint32_t n_nodes;
    size_t arena_bytes;

    /* ---- ABI 1.3 ---- */
    /* RLX_PHASE_* the host built the program for (decode: one step of one or more
     * sequences, a row each), so a backend need not guess it from shapes; a 1.2 host's
     * program ends at arena_bytes (check struct_size) */
    int32_t phase;
} rlx_program;

/* ---------------------------------------------------------------- backends */

#define RLX_MAX_DEVICES 16

typedef struct rlx_backend_probe {
    uint32_t struct_size;
    int32_t available;   /* 1: can run now */
    char reason[256];    /* why not, when available == 0 */
    uint32_t n_devices;
    char devices[RLX_MAX_DEVICES][128];
    char details[1024];  /* topology / placement / driver, readable */
} rlx_backend_probe;

typedef struct rlx_backend_options {
    uint32_t struct_size;
    int32_t threads;       /* cpu: 0 = one per physical core */
    char placement[16];    /* cpu: "cores", "pus", "none" */
    int32_t device;        /* gpu ordinal */
    int32_t graphs;        /* cuda: capture graphs (RLX_GRAPHS_*; any nonzero value captured every
                            * program before value 2 existed, which stays a safe reading) */
} rlx_backend_options;

/* rlx_backend_options.graphs: which programs a backend captures and replays. Decode
 * programs: every matmul has at most 16 rows (one step over few sequences). */
enum { RLX_GRAPHS_NONE = 0, RLX_GRAPHS_ALL = 1, RLX_GRAPHS_DECODE = 2, RLX_GRAPHS_PREFILL = 3 };

enum {
    RLX_BACKEND_HOST_MEMORY = 1u << 0 /* buffers are host pointers: weights may be used in place */
};

/* Device memory now (ABI 1.2, rlx_backend.mem_info). */
typedef struct rlx_mem_info {
    uint32_t struct_size;
    uint64_t free_bytes;  /* what an allocation may still take */
    uint64_t total_bytes;
    char device[128];     /* the device named as users know it: "cuda:0 NVIDIA H100 80GB HBM3" */
} rlx_mem_info;

/* Ceilings of the device measured now (ABI 1.2, rlx_backend.measure_ceilings). The caller
 * sets the GEMM shape C[m,n] = A[m,k]·B[k,n] and dtype; the backend fills the rates it
 * measured (0: not measured). */
typedef struct rlx_ceilings {
    uint32_t struct_size;
    int64_t gemm_m, gemm_k, gemm_n;
    int32_t dtype;        /* rlx_dtype of A and B (accumulation in f32) */
    double copy_gb_per_s; /* device-to-device copy, bytes read + written per second / 1e9 */
    double gemm_gflops;
    char gemm_library[64]; /* "cuBLAS (libcublas.so.13, ...)", "own" */
} rlx_ceilings;

typedef struct rlx_backend {
    uint32_t struct_size;
    const char *name; /* "cpu", "cuda", "rocm" */
    const char *summary;
    int32_t priority;          /* --backend auto picks the highest available: cpu 0, gpus 100 */
    uint32_t flags;            /* RLX_BACKEND_* */
    const char *const *ops;    /* NULL-terminated: op names with a kernel here */
    const char *const *dtypes; /* NULL-terminated: "f32", "f16", "bf16" */
    /* No side effects; safe to call on any machine. */
    int (*probe)(rlx_backend_probe *out);
    /* Optional (NULL: an op is supported iff it is in ops). 1 = yes. */
    int (*supports_op)(const rlx_node_desc *node, const rlx_value_desc *values);
    int (*init)(const rlx_backend_options *opt, void **be, rlx_diag *d);
    void *(*alloc)(void *be, size_t bytes, rlx_diag *d);
    void (*free)(void *be, void *ptr);
    int (*upload)(void *be, void *dst, const void *src, size_t bytes, rlx_diag *d);
    int (*download)(void *be, void *dst, const void *src, size_t bytes, rlx_diag *d);
    int (*compile)(void *be, const rlx_program *prog, void **exe, rlx_diag *d);
    /* value_ptrs[i]: device address of value i (the host resolves arena offsets,
     * aliases, bound inputs/outputs, weights, constants and states). */
    int (*execute)(void *be, void *exe, void *const *value_ptrs, rlx_diag *d);
    int (*sync)(void *be, rlx_diag *d);
    void (*release)(void *be, void *exe);
    void (*teardown)(void *be);

    /* ---- ABI 1.2 ---- */
    /* Optional (NULL: unknown; the host then checks only host memory). Free and total
     * bytes of the device be runs on, and its name. */
    int (*mem_info)(void *be, rlx_mem_info *out, rlx_diag *d);
    /* Optional (NULL: none reported). Copy bandwidth and GEMM rate, measured now. */
    int (*measure_ceilings)(void *be, rlx_ceilings *io, rlx_diag *d);
} rlx_backend;

/* ---------------------------------------------------------------- blocks */

typedef struct rlx_ctx rlx_ctx; /* emission context of one stage (opaque) */
typedef struct rlx_host_api rlx_host_api;

typedef struct rlx_block {
    uint32_t struct_size;
    const char *name;    /* unique across plugins: "token_embed", "llama.decoder_layer" */
    const char *summary; /* one line */
    const char *params;  /* readable: "prefix: str (weight name prefix), eps: float" */
    /* Emit graph nodes through host->emit_*; return 0 or a nonzero rlx_status after
     * host->fail(). Reads and writes named slots ("hidden", "residual", ...). */
    int (*emit)(rlx_ctx *ctx, const rlx_host_api *host);
} rlx_block;

/* ---------------------------------------------------------------- arch recipes */

typedef struct rlx_flow rlx_flow; /* opaque, see rlx.h */

enum { RLX_PHASE_PREFILL = 0, RLX_PHASE_DECODE = 1, RLX_PHASE_ENCODE = 2 };

/* What the host puts in a flow input a caller did not give (ABI 1.1, flow_input_fill).
 * RLX_FILL_OPTIONAL: nothing; the program is built without the input (its slot is unset,
 * so blocks emit the variant without it), one program per set of inputs given. An
 * optional I32 input of shape [] is a build-time scalar: its value is compiled in and
 * blocks read it as host->config_number(ctx, "input:NAME"). */
enum { RLX_FILL_NONE = 0, RLX_FILL_ZEROS = 1, RLX_FILL_ONES = 2, RLX_FILL_IOTA = 3 /* 0, 1, … */,
       RLX_FILL_OPTIONAL = 4 };

typedef struct rlx_arch {
    uint32_t struct_size;
    const char *name;
    const char *const *model_types; /* NULL-terminated: config.json model_type values */
    const char *default_profile;    /* preset name for prefill, e.g. "llama32_prefill" */
    const char *decode_profile;     /* preset name for decode, or NULL */
    /* Fill an empty flow for this config and phase with host->flow_* calls. */
    int (*build_flow)(rlx_flow *flow, int phase, const rlx_model_config *cfg,
                      const rlx_host_api *host, rlx_diag *d);
    /* appended: the phases build_flow builds, bits 1u << RLX_PHASE_*. 0 (or a struct
     * without it): prefill and decode. An encoder sets 1u << RLX_PHASE_ENCODE: the host
     * builds one flow with the encoder inputs (docs/CONVENTIONS.md) and runs it as is. */
    uint32_t phases;

    /* ---- ABI 1.1 ---- */
    /* Fill cfg from config.json: the host has set model_type, architecture and dtype;
     * the arch applies its family's defaults and checks, typically through
     * host->config_read_common plus host->config_* for its own keys, and fails naming
     * the key. NULL (or a 1.0 arch): the host reads the common keys with no defaults. */
    int (*configure)(const rlx_config *src, rlx_model_config *cfg, const rlx_host_api *host,
                     rlx_diag *d);
    /* diffusers configs have no model_type: the _class_name values this arch handles
     * (NULL-terminated), or NULL */
    const char *const *class_names;
} rlx_arch;

/* ---------------------------------------------------------------- config defaults (ABI 1.1) */

/* A family's defaults for the keys every Hugging Face transformer config shares, as its
 * PretrainedConfig subclass declares them; host->config_read_common applies them. */
typedef struct rlx_config_defaults {
    uint32_t struct_size;
    int64_t vocab_size, hidden_size, intermediate_size, num_layers, num_heads;
    int64_t num_kv_heads; /* 0: = num_heads */
    int64_t head_dim;     /* 0: hidden_size / num_heads */
    int64_t max_position_embeddings;
    const char *eps_key; /* "rms_norm_eps", "layer_norm_eps"; NULL: whichever is present */
    double eps;
    int32_t tie_word_embeddings;
    const char *act_key; /* "hidden_act" (NULL), "hidden_activation" */
    const char *act;
    double rope_theta;
    int64_t bos_token_id, eos_token_id; /* -1: none */
} rlx_config_defaults;

/* ---------------------------------------------------------------- plugin descriptor */

typedef struct rlx_plugin_desc {
    uint32_t struct_size;
    uint32_t abi_major;
    uint32_t abi_minor;
    const char *name;
    const char *version;
    const char *summary;
    const rlx_block *const *blocks;
    uint32_t n_blocks;
    const rlx_backend *const *backends;
    uint32_t n_backends;
    const rlx_arch *const *archs;
    uint32_t n_archs;
} rlx_plugin_desc;

/* ---------------------------------------------------------------- host services */

enum { RLX_LOG_ERROR = 0, RLX_LOG_WARN = 1, RLX_LOG_INFO = 2, RLX_LOG_DEBUG = 3 };

struct rlx_host_api {
    uint32_t struct_size;
    uint32_t abi_major;
    uint32_t abi_minor;

    /* logging and diagnostics */
    void (*log)(int level, const char *who, const char *fmt, ...) RLX_PRINTF(3, 4);
    void (*diag_set)(rlx_diag *d, int code, const char *fmt, ...) RLX_PRINTF(3, 4);

    /* topology (hwloc, behind the host) */
    int (*topology)(rlx_topology *out, int threads, const char *placement);
    /* bind the calling thread to PU os_index; 0 on success */
    int (*bind_thread)(int pu_os_index);

    /* ---- graph emission (tier 2): values are int32 ids, -1 on error ---- */
    int32_t (*emit_input)(rlx_ctx *c, const char *name, int32_t dtype, const rlx_shape *shape);
    /* A checkpoint tensor by its HF name, converted to the compute dtype. A missing
     * tensor or a shape other than *expect (when non-NULL) fails naming both. */
    int32_t (*emit_weight)(rlx_ctx *c, const char *name, const rlx_shape *expect);
    /* As emit_weight, but a missing tensor returns -1 without failing (biases). */
    int32_t (*emit_weight_opt)(rlx_ctx *c, const char *name, const rlx_shape *expect);
    /* A constant computed by the block (copied). */
    int32_t (*emit_const)(rlx_ctx *c, int32_t dtype, const rlx_shape *shape, const void *data);
    /* A persistent session buffer (KV cache), zeroed at session reset. */
    int32_t (*emit_state)(rlx_ctx *c, const char *name, int32_t dtype, const rlx_shape *shape);
    /* One node; shape inference by the host. Returns the (first) output id. */
    int32_t (*emit_op)(rlx_ctx *c, const char *op, const int32_t *inputs, uint32_t n_inputs,
                       const rlx_attr *attrs, uint32_t n_attrs);
    /* A node with several outputs; ids written to outs. 0 on success. */
    int (*emit_op_n)(rlx_ctx *c, const char *op, const int32_t *inputs, uint32_t n_inputs,
                     const rlx_attr *attrs, uint32_t n_attrs, int32_t *outs, uint32_t n_outs);
    int (*emit_output)(rlx_ctx *c, const char *name, int32_t value);
    int (*value_info)(rlx_ctx *c, int32_t value, rlx_shape *shape, int32_t *dtype);

    /* named slots carry values between stages ("hidden", "residual", "positions") */
    int32_t (*slot_get)(rlx_ctx *c, const char *slot); /* -1 if unset */
    int (*slot_set)(rlx_ctx *c, const char *slot, int32_t value);

    /* stage parameters (from the flow; "{i}" already replaced by the repeat index) */
    int64_t (*param_int)(rlx_ctx *c, const char *key, int64_t def);
    double (*param_float)(rlx_ctx *c, const char *key, double def);
    const char *(*param_str)(rlx_ctx *c, const char *key, const char *def);

    /* what is being built */
    const rlx_model_config *(*model_config)(rlx_ctx *c);
    /* raw config.json lookups by key (for fields rlx_model_config lacks) */
    int (*config_number)(rlx_ctx *c, const char *key, double *out);
    const char *(*fusion_policy)(rlx_ctx *c); /* "direct" or "fusable" */
    int (*phase)(rlx_ctx *c);                 /* RLX_PHASE_* */
    int64_t (*context_length)(rlx_ctx *c);    /* KV cache rows to allocate */

    /* fail the build with one line naming what is wrong; returns RLX_ERR_INVALID */
    int (*fail)(rlx_ctx *c, const char *fmt, ...) RLX_PRINTF(2, 3);

    /* ---- flow building (arch recipes) ---- */
    int (*flow_stage)(rlx_flow *f, const char *block, const char *params_json);
    /* stages added between repeat_begin and repeat_end run n times with {i} = 0..n-1 */
    int (*flow_repeat_begin)(rlx_flow *f, int64_t n);
    int (*flow_repeat_end)(rlx_flow *f);
    /* appended (flux): declare a flow input, as rlx_flow_input (dims: -1 = T, the sequence
     * length; -2 = S, a second length: an encode flow's other sequence, FLUX's text).
     * An encoder recipe that declares none gets the default encoder inputs. */
    int (*flow_input)(rlx_flow *f, const char *name, int32_t dtype, uint32_t ndim, const int64_t *dims);

    /* ---- ABI 1.1 ---- */
    /* Raw config.json lookups. key may be dotted ("rope_parameters.rope_theta",
     * "axes_dims_rope.0"); the getters read a JSON null as absent: they store
     * def when the key is absent and fail (RLX_ERR_INVALID, d: "FILE: KEY: expected an
     * integer, got a string") when it has another type. */
    int (*config_has)(const rlx_config *c, const char *key); /* 1: present (a null too) */
    int (*config_int)(const rlx_config *c, const char *key, int64_t def, int64_t *out, rlx_diag *d);
    int (*config_num)(const rlx_config *c, const char *key, double def, double *out, rlx_diag *d);
    int (*config_bool)(const rlx_config *c, const char *key, int def, int *out, rlx_diag *d);
    /* copies the string (or def) into out[cap]; too long fails naming the key */
    int (*config_str)(const rlx_config *c, const char *key, const char *def, char *out, size_t cap,
                      rlx_diag *d);
    int64_t (*config_len)(const rlx_config *c, const char *key); /* array entries; -1: no array */
    /* fail naming the file: "FILE: <message>" */
    int (*config_fail)(const rlx_config *c, rlx_diag *d, int code, const char *fmt, ...) RLX_PRINTF(4, 5);
    /* The keys every HF transformer config shares (sizes, heads, eps, activation, tied
     * embeddings, biases, bos/eos, rope_theta / rope_parameters / rope_scaling, an explicit
     * layer_types), with the family's defaults df; checks sizes and head counts. */
    int (*config_read_common)(const rlx_config *c, const rlx_config_defaults *df,
                              rlx_model_config *mc, rlx_diag *d);
    /* the raw config of the model a flow is built for (build_flow), of a stage (blocks);
     * NULL for flows built in code without a config */
    const rlx_config *(*flow_config)(rlx_flow *f);
    const rlx_config *(*ctx_config)(rlx_ctx *c);
    /* Emit the block named block (from any loaded plugin) as part of the current stage,
     * with its own params (JSON object text; "{i}" is the repeat index): blocks compose
     * through the host instead of compiling each other's code. Slots are shared. */
    int (*emit_block)(rlx_ctx *c, const char *block, const char *params_json);
    /* the value of declared input name when a caller does not give it (RLX_FILL_*) */
    int (*flow_input_fill)(rlx_flow *f, const char *name, int32_t fill);
};

/* The one exported symbol. Returns NULL on failure (after host->log). */
typedef const rlx_plugin_desc *(*rlx_plugin_init_fn)(const rlx_host_api *host);

#ifdef __cplusplus
}
#endif
#endif /* RLX_PLUGIN_H */
