/* rlx/rlx.h — public API of librlx for model authors and tools.
 * Every function that can fail returns 0 (RLX_OK) or an rlx_status and fills the
 * rlx_diag it is given (may be NULL) with one line naming the file, tensor, key or
 * plugin at fault. */
#ifndef RLX_RLX_H
#define RLX_RLX_H

#include <stdio.h>
#include "rlx/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------- diagnostics */
void rlx_diag_init(rlx_diag *d);
int rlx_diag_set(rlx_diag *d, int code, const char *fmt, ...) RLX_PRINTF(3, 4); /* returns code */
const char *rlx_status_name(int code);

/* ---------------------------------------------------------------- dtypes */
size_t rlx_dtype_size(int dtype);
const char *rlx_dtype_name(int dtype); /* "F32", "F16", "BF16", "I32", "I64", "U8" */
int rlx_dtype_from_name(const char *safetensors_name); /* -1 if unknown */
float rlx_f16_to_f32(uint16_t h);
uint16_t rlx_f32_to_f16(float f);
float rlx_bf16_to_f32(uint16_t b);
uint16_t rlx_f32_to_bf16(float f); /* round to nearest even */
int64_t rlx_shape_numel(const rlx_shape *s);
/* "[2, 3, 4]" into buf */
const char *rlx_shape_str(const rlx_shape *s, char *buf, size_t len);

/* ---------------------------------------------------------------- registry */
typedef struct rlx_registry rlx_registry;

typedef struct rlx_plugin_info {
    const char *path;
    const char *name;    /* descriptor name, or file stem when refused */
    const char *version; /* "" when refused */
    uint32_t abi_major, abi_minor;
    int loaded;          /* 1 loaded, 0 refused */
    const char *reason;  /* refusal reason (one line), NULL when loaded */
    const rlx_plugin_desc *desc; /* NULL when refused */
} rlx_plugin_info;

/* search_path: colon-separated folders, or NULL for $RLX_PLUGIN_PATH then the
 * installed plugin folder. Never fails because one plugin is bad. */
int rlx_registry_open(const char *search_path, rlx_registry **out, rlx_diag *d);
void rlx_registry_close(rlx_registry *r);
size_t rlx_registry_count(const rlx_registry *r);
const rlx_plugin_info *rlx_registry_plugin(const rlx_registry *r, size_t i);
size_t rlx_registry_search_dirs(const rlx_registry *r, const char *const **dirs);
const rlx_block *rlx_registry_block(const rlx_registry *r, const char *name);
/* name "auto" (or NULL): the available backend of highest priority. Fills d when the
 * named backend is missing or has no device (with the probe's reason). */
const rlx_backend *rlx_registry_backend(const rlx_registry *r, const char *name, rlx_diag *d);
const rlx_arch *rlx_registry_arch_for(const rlx_registry *r, const char *model_type);
/* the arch claiming a diffusers _class_name (rlx_arch.class_names) */
const rlx_arch *rlx_registry_arch_for_class(const rlx_registry *r, const char *class_name);
const rlx_host_api *rlx_host_api_get(void);
const char *rlx_default_plugin_dir(void);
/* An arch by its own name (rlx_registry_arch_for looks up by config model_type). */
const rlx_arch *rlx_registry_arch(const rlx_registry *r, const char *name);
/* The backend's probe, run once per registry (thread-safe) and cached; NULL when be
 * is not a backend of r. */
const rlx_backend_probe *rlx_registry_probe(const rlx_registry *r, const rlx_backend *be);

/* ---------------------------------------------------------------- weights (safetensors) */
typedef struct rlx_weights rlx_weights;

typedef struct rlx_tensor_info {
    const char *name;
    int32_t dtype;
    rlx_shape shape;
    const void *data; /* mmapped, read-only */
    size_t nbytes;
} rlx_tensor_info;

/* path: a .safetensors file, a .safetensors.index.json, or a model folder
 * (model.safetensors.index.json, model.safetensors, diffusion_pytorch_model.safetensors).
 * Validates every header fully; reads no tensor data. */
int rlx_weights_open(const char *path, rlx_weights **out, rlx_diag *d);
void rlx_weights_close(rlx_weights *w);
size_t rlx_weights_count(const rlx_weights *w);
const rlx_tensor_info *rlx_weights_at(const rlx_weights *w, size_t i);
const rlx_tensor_info *rlx_weights_find(const rlx_weights *w, const char *name);
/* Convert a float tensor (F32/F16/BF16) or int tensor (I32/I64) to dst_dtype into dst
 * (numel elements). Fails naming the tensor on dtype/size mismatch. */
int rlx_weights_read(const rlx_tensor_info *t, int dst_dtype, void *dst, size_t numel, rlx_diag *d);

typedef struct rlx_st_writer rlx_st_writer;
rlx_st_writer *rlx_st_writer_new(void);
/* data is copied */
int rlx_st_writer_add(rlx_st_writer *w, const char *name, int dtype, const rlx_shape *shape,
                      const void *data, rlx_diag *d);
int rlx_st_writer_save(rlx_st_writer *w, const char *path, rlx_diag *d);
void rlx_st_writer_free(rlx_st_writer *w);

/* The file a tensor is stored in (for messages); the opened path when t is NULL. */
const char *rlx_weights_file_of(const rlx_weights *w, const rlx_tensor_info *t);
/* Finds name and checks its shape against *expect (when non-NULL). Fails with
 * "FILE: tensor 'NAME' not found (expected shape [..])" or
 * "FILE: tensor 'NAME': expected shape [..], found [..]". */
int rlx_weights_expect(const rlx_weights *w, const char *name, const rlx_shape *expect,
                       const rlx_tensor_info **out, rlx_diag *d);
/* Tied weights as HF applies them: alias (say "lm_head.weight") becomes the bytes of
 * target ("model.embed_tokens.weight"), replacing a stored one. Which tensors a family
 * ties is its arch plugin's business. Call right after open: it invalidates earlier
 * rlx_tensor_info pointers. */
int rlx_weights_tie(rlx_weights *w, const char *alias, const char *target, rlx_diag *d);

/* ---------------------------------------------------------------- config.json */
/* rlx_config (opaque) is declared in plugin.h.
 * path: config.json or the folder holding it. Opening reads only what every config
 * has (model_type or _class_name, architectures, dtype); rlx_config_configure hands it
 * to the arch plugin that owns the model type, which fills the rest. */
int rlx_config_open(const char *path, rlx_config **out, rlx_diag *d);
int rlx_config_parse(const char *json, size_t len, const char *origin, rlx_config **out, rlx_diag *d);
const rlx_model_config *rlx_config_model(const rlx_config *c);
/* Finds the arch plugin for the config's model_type (or diffusers _class_name) in r and
 * lets it fill the description: "FILE: no arch plugin handles model_type "X" (installed:
 * ...)" when none does. *arch (may be NULL) receives the arch. */
int rlx_config_configure(rlx_config *c, const rlx_registry *r, const rlx_arch **arch, rlx_diag *d);
/* rlx_config_open + rlx_config_configure */
int rlx_config_load(const char *path, const rlx_registry *r, rlx_config **out, rlx_diag *d);
int rlx_config_number(const rlx_config *c, const char *key, double *out); /* 0 found */
/* The tensors a checkpoint for a config must hold, as its arch's flows read them: each
 * weight's name and the shape its block expects, in the order the flows first read them
 * (prefill, then decode), each once; optional ones (an untied lm_head) included, a tied
 * one not. What a stand-in checkpoint made from config.json alone needs (rlx-bench
 * --config), for any arch plugin installed. path: config.json or its folder; plugin_path
 * as rlx_registry_open. A weight whose block gives no expected shape fails naming it; a
 * nonzero return from sink stops the listing and is returned. */
typedef int (*rlx_weight_sink)(void *user, const char *name, const rlx_shape *shape, rlx_diag *d);
int rlx_config_weights(const char *path, const char *plugin_path, rlx_weight_sink sink, void *user, rlx_diag *d);
void rlx_config_free(rlx_config *c);
/* generation_config.json (optional file): eos ids, sampling defaults */
typedef struct rlx_generation_config {
    int64_t bos_token_id; /* -1: none */
    int64_t eos_token_ids[RLX_MAX_EOS];
    int32_t n_eos;
    int32_t do_sample;
    double temperature, top_p, repetition_penalty;
    int64_t top_k;
} rlx_generation_config;
int rlx_generation_config_load(const char *dir, const rlx_model_config *mc,
                               rlx_generation_config *out, rlx_diag *d);

/* ---------------------------------------------------------------- profiles */
typedef struct rlx_profile {
    char name[64];
    struct { char policy[16]; char target[16]; int assert_clean; int skip; } fusion;
    struct { int dce; int constant_folding; int verbose; } passes;
    struct { char compute[8]; char mixed[8]; } precision;
    struct {
        struct { int threads; char placement[8]; int unfuse_regions; } cpu;
        /* devices: a tensor-parallel run over these GPUs (docs/multi-gpu.md) */
        struct { int device; int graphs; int devices[RLX_MAX_DEVICES]; int n_devices; } cuda;
    } backend;
} rlx_profile;

void rlx_profile_defaults(rlx_profile *p);
/* name_or_path: a preset name (searched in $RLX_PROFILE_PATH, then the installed
 * profiles folder) or a path to a .rlx.json file. Strict: unknown key, wrong type or
 * bad enum fails with the JSON path. Keys absent keep rlx_profile_defaults(). */
int rlx_profile_load(const char *name_or_path, rlx_profile *out, rlx_diag *d);
int rlx_profile_parse(const char *json, size_t len, const char *origin, rlx_profile *out, rlx_diag *d);

/* ---------------------------------------------------------------- flows */
/* rlx_flow (opaque) is declared in plugin.h */
rlx_flow *rlx_flow_new(const char *name);
void rlx_flow_free(rlx_flow *f);
/* dims: -1 stands for the sequence length given at build */
int rlx_flow_input(rlx_flow *f, const char *name, int dtype, uint32_t ndim, const int64_t *dims);
/* what the host gives input name when a caller does not (RLX_FILL_*, plugin.h) */
int rlx_flow_input_fill(rlx_flow *f, const char *name, int fill);
int rlx_flow_stage(rlx_flow *f, const char *block, const char *params_json);
int rlx_flow_repeat(rlx_flow *f, int64_t n, const rlx_flow *body); /* {i} = 0..n-1 */
int rlx_flow_sequence(rlx_flow *f, const rlx_flow *sub);
/* cond: "phase=prefill|decode|encode", "config:KEY" (truthy), or the index of the
 * innermost enclosing repeat (the {i} of its params) named layer: "layer=N",
 * "layer=A..B" (A to B inclusive), "layer=A.." (A to the last), "layer%M=R".
 * A leading "!" negates any of them ("!layer=0": every layer but the first). */
int rlx_flow_when(rlx_flow *f, const char *cond, const rlx_flow *body);
typedef int (*rlx_custom_emit_fn)(rlx_ctx *c, const rlx_host_api *host, void *user);
int rlx_flow_custom(rlx_flow *f, const char *name, rlx_custom_emit_fn fn, void *user);
int rlx_flow_load_json(const char *path, rlx_flow **out, rlx_diag *d);
/* the flow as a JSON flow file that rlx_flow_load_json reads back (fails naming a
 * custom stage: C code has no JSON form) */
int rlx_flow_write_json(const rlx_flow *f, FILE *out, rlx_diag *d);
void rlx_flow_print(const rlx_flow *f, FILE *out);

/* ---------------------------------------------------------------- models and sessions */
typedef struct rlx_model rlx_model;
typedef struct rlx_session rlx_session;

typedef struct rlx_model_options {
    const char *backend;      /* "auto" (NULL), "cpu", "cuda", "rocm" */
    const char *profile;      /* preset or path; NULL: the arch's default */
    const char *flow_file;    /* JSON flow overriding the arch recipe; NULL */
    const char *plugin_path;  /* NULL: $RLX_PLUGIN_PATH + installed */
    int threads;              /* 0: profile / one per core */
    const char *policy;       /* NULL: profile's; "direct" | "fusable" overrides */
    int verbose;
    /* Called as weights are converted / uploaded for the backend (the slow part of
     * loading a large checkpoint): bytes of checkpoint done out of total. NULL: silent. */
    void (*progress)(void *user, uint64_t done_bytes, uint64_t total_bytes);
    void *progress_user;
    /* override the profile's precision.compute ("f32" | "f16" | "bf16") and
     * precision.mixed ("none" | "auto"); NULL: the profile's */
    const char *precision;
    const char *mixed;
    /* "0,1": the GPUs of a tensor-parallel run (rlx_tp_open: rank r on the r-th; profile
     * backend.cuda.devices); NULL: the profile's. rlx_model_open validates it and refuses
     * several (one model is one rank; docs/multi-gpu.md) */
    const char *devices;
} rlx_model_options;

void rlx_model_options_init(rlx_model_options *o);
int rlx_model_open(const char *dir, const rlx_model_options *opt, rlx_model **out, rlx_diag *d);
void rlx_model_close(rlx_model *m);
const rlx_model_config *rlx_model_get_config(const rlx_model *m);
const char *rlx_model_backend_name(const rlx_model *m);
/* the profile a phase's programs compile with, the options' overrides applied (precision,
 * mixed, devices); RLX_PHASE_ENCODE: the prefill one */
const rlx_profile *rlx_model_get_profile(const rlx_model *m, int phase);
int rlx_model_threads(const rlx_model *m);
/* print the flow / the compiled graph after passes (op counts, fused regions, arena) */
int rlx_model_dump_flow(rlx_model *m, FILE *out, rlx_diag *d);
/* the prefill and decode flows as one JSON flow file for rlx_model_options.flow_file
 * (one flow when they are the same, else each under a phase= condition) */
int rlx_model_dump_flow_json(rlx_model *m, FILE *out, rlx_diag *d);
/* seq_len: the prompt rows of a prefill or encode; for RLX_PHASE_DECODE the rows of a step:
 * 1 the single-session decode, B > 1 that of B sessions in rlx_session_decode_batch */
int rlx_model_dump_graph(rlx_model *m, int phase, int64_t seq_len, FILE *out, rlx_diag *d);

/* ctx_len: KV cache rows (0: min(max_position_embeddings, 4096)). Sessions of one model
 * may be used from different threads (each session by one thread at a time); their
 * steps run one after another on the model's shared programs and arena. */
int rlx_session_new(rlx_model *m, int64_t ctx_len, rlx_session **out, rlx_diag *d);
void rlx_session_free(rlx_session *s);
void rlx_session_reset(rlx_session *s);
int64_t rlx_session_pos(const rlx_session *s);
/* Keeps the first pos cached positions and drops the rest (pos <= the current one), so a
 * new prompt sharing a prefix with the cached tokens is prefilled only past it. */
int rlx_session_rewind(rlx_session *s, int64_t pos, rlx_diag *d);
/* Appends n tokens at the current position. all_logits: [n, vocab] or NULL;
 * last_logits: [vocab] or NULL. */
int rlx_session_prefill(rlx_session *s, const int32_t *ids, int64_t n, float *all_logits,
                        float *last_logits, rlx_diag *d);
/* One token through the decode graph (length 1, KV cache). logits: [vocab] */
int rlx_session_decode(rlx_session *s, int32_t id, float *logits, rlx_diag *d);

/* Greedy decoding on the device: id goes in at the session's position, then n tokens are
 * picked one after another, each the argmax of the logits before it (the first on ties,
 * NaN never, as rlx_sampler with greedy) and fed to the next step without a round trip
 * to the host, which waits once, for all n. out[k]: the k-th token picked; equal to n
 * calls of rlx_session_decode, each fed the argmax of the one before. The session's
 * position p moves by n (out[n - 1] is not fed yet: pass it as the next call's id). Should
 * out[j] end the text, rlx_session_rewind(s, p + j + 1) leaves the cache as if the steps
 * had stopped there (generate in chunks to waste few steps). logits: [vocab], those
 * out[n - 1] was picked from (to check them, e.g. for NaN), or NULL. */
int rlx_session_generate(rlx_session *s, int32_t id, int64_t n, int32_t *out, float *logits, rlx_diag *d);

/* B sessions of one model (same context length, distinct) decode one token each in one
 * step: one program over B rows, each row attending to its own KV cache at its own
 * position (lengths may differ). ids: [B]; logits: [B, vocab] or NULL. Row b equals what
 * rlx_session_decode(s[b], ids[b]) gives. A session's cache moves into a slot of the
 * model's batch pool at its first batched step and stays there (single steps use it too). */
int rlx_session_decode_batch(rlx_session **s, int B, const int32_t *ids, float *logits, rlx_diag *d);

/* The program a step of s would run, compiled (and cached) but not run: with phase
 * RLX_PHASE_PREFILL, rlx_session_prefill of n tokens at position pos (all_logits nonzero:
 * the caller wants every row's logits, else the last row's only); with RLX_PHASE_DECODE,
 * rlx_session_decode at pos (n = 1), or rlx_session_decode_batch of n sessions of s's
 * context length, each row at pos (n > 1). dump: prints it as passes.verbose does (NULL: no
 * print); info: its figures (NULL: none). FLOPs count 2 per multiply-add of the matmul-class
 * ops (matmul, matmul_nn, bmm, linear_swiglu, conv2d) and of attention's q·k and p·v over
 * the keys each row attends to at pos; elementwise ops, norms, softmax and rope are not
 * counted. A prefill's padding rows (n padded to its length bucket) run, so they count. */
typedef struct rlx_program_info {
    int64_t seq_len;          /* rows the program runs (n, or its length bucket) */
    int64_t ctx_len;          /* KV cache rows */
    int32_t last_row;         /* 1: the logits of one row only (the final norm and the
                                 vocabulary projection run on that row) */
    uint32_t n_nodes;
    uint64_t matmul_flops;
    uint64_t attention_flops;
    uint64_t flops;           /* matmul_flops + attention_flops */
} rlx_program_info;
int rlx_session_program(rlx_session *s, int phase, int64_t pos, int64_t n, int all_logits, rlx_program_info *info,
                        FILE *dump, rlx_diag *d);

/* What a model holds on its backend's device now, and what the device has left. The
 * same figures decide, before any weight is uploaded or kernel runs, whether a program
 * and its KV cache fit: "DEVICE: needs X GiB (...), Y GiB available" otherwise. */
typedef struct rlx_memory {
    uint64_t weights_bytes;   /* bound weights (host backends: mmapped ones included) */
    uint64_t kv_cache_bytes;  /* session states (KV caches) of the open sessions */
    uint64_t arena_bytes;     /* intermediates, shared by the programs */
    uint64_t buffer_bytes;    /* constants and input/output staging */
    uint64_t free_bytes;      /* what the device has left (0: unknown) */
    uint64_t total_bytes;     /* 0: unknown */
    char device[128];         /* "cuda:0 NVIDIA H100 80GB HBM3", "cpu (host memory)" */
} rlx_memory;
int rlx_model_memory(rlx_model *m, rlx_memory *out, rlx_diag *d);
/* The device's ceilings measured now by the model's backend (rlx-bench's same-run
 * reference on GPUs): device-to-device copy bandwidth (read + written bytes / s, in GB/s)
 * and the GEMM rate of C[M,N] = A[M,K]·W[N,K]ᵀ in dtype (GFLOP/s), and the library that
 * ran it. RLX_ERR_UNSUPPORTED when the backend measures none (the CPU: rlx-bench measures
 * the host itself). */
typedef struct rlx_ceiling_figures {
    double copy_gb_per_s;
    double gemm_gflops;
    char gemm_library[64];
} rlx_ceiling_figures;
int rlx_model_measure_ceilings(rlx_model *m, int64_t M, int64_t K, int64_t N, int dtype, rlx_ceiling_figures *out,
                               rlx_diag *d);

/* One forward pass with named inputs (a safetensors file's tensors) to named outputs
 * (HF names: logits, last_hidden_state, ...). */
int rlx_model_forward(rlx_model *m, const rlx_weights *inputs, rlx_st_writer *outputs, rlx_diag *d);
/* The same with the inputs in memory (name, dtype, shape, data, nbytes of each; read
 * during the call) and each output handed to sink (data valid during the callback; a
 * nonzero return stops the pass and is returned). For loops that call a model many times
 * (a diffusion pipeline's denoising steps): the compiled program is reused. */
typedef int (*rlx_output_sink)(void *user, const char *name, int dtype, const rlx_shape *shape,
                               const void *data, rlx_diag *d);
int rlx_model_forward_mem(rlx_model *m, const rlx_tensor_info *inputs, size_t n_inputs, rlx_output_sink sink,
                          void *user, rlx_diag *d);

/* ---- a flow built in code, compiled without a model folder ---- */
typedef struct rlx_model_spec {
    const rlx_flow *prefill;        /* required (copied) */
    const rlx_flow *decode;         /* NULL: the prefill flow, built for the decode phase */
    const rlx_model_config *config; /* NULL: all zero (copied) */
    const rlx_weights *weights;     /* borrowed, must outlive the model; NULL: none */
    const rlx_registry *registry;   /* borrowed, for block stages; NULL: custom stages only */
    const rlx_backend *backend;     /* required; initialised by the model */
    const rlx_profile *profile;     /* NULL: rlx_profile_defaults() */
} rlx_model_spec;
int rlx_model_from_flow(const rlx_model_spec *spec, const rlx_model_options *opt, rlx_model **out,
                        rlx_diag *d);
/* programs compiled so far (prefill buckets + decode): stays flat while decoding */
int rlx_model_compiled_count(const rlx_model *m);

/* ---- tensor parallelism (docs/multi-gpu.md) ----
 * The model in dir split over `ranks` ranks, Megatron-LM style, from the layout hints its
 * blocks put on rlx.matmul: each rank is a model of its own (its slice of the weights,
 * heads and KV cache, bound from the mmapped checkpoint; its own backend instance and
 * threads) and runs each step on a thread of its own; the ranks' rlx.all_reduce /
 * rlx.all_gather meet in the backend. The CPU backend runs it today (ranks are threads of
 * this process), and the CUDA / ROCm ones through NCCL / RCCL; a backend without those ops
 * is refused naming it. A head count that does
 * not divide by ranks fails naming the tensor and the count (GQA kv heads fewer than
 * ranks are replicated). Outputs are rank 0's, which equal the unsplit model's.
 * ranks 0: one per device of opt->devices, else of the profile's backend.cuda.devices
 * (GPU backends), else 1. Rank r runs on the r-th device listed (else on device r); each
 * rank's steps run on a thread started once. A rank whose peers never come (one failed,
 * or hangs) fails the step after RLX_TP_TIMEOUT_S seconds (default 120), naming the group. */
typedef struct rlx_tp rlx_tp;
typedef struct rlx_tp_session rlx_tp_session;
int rlx_tp_open(const char *dir, const rlx_model_options *opt, int ranks, rlx_tp **out, rlx_diag *d);
void rlx_tp_close(rlx_tp *t);
int rlx_tp_ranks(const rlx_tp *t);
rlx_model *rlx_tp_model(rlx_tp *t, int rank); /* NULL outside [0, ranks) */
/* rlx_model_forward on every rank */
int rlx_tp_forward(rlx_tp *t, const rlx_weights *inputs, rlx_st_writer *outputs, rlx_diag *d);
/* rlx_session_* on every rank (one KV cache slice each) */
int rlx_tp_session_new(rlx_tp *t, int64_t ctx_len, rlx_tp_session **out, rlx_diag *d);
void rlx_tp_session_free(rlx_tp_session *s);
int rlx_tp_session_prefill(rlx_tp_session *s, const int32_t *ids, int64_t n, float *all_logits,
                           float *last_logits, rlx_diag *d);
int rlx_tp_session_decode(rlx_tp_session *s, int32_t id, float *logits, rlx_diag *d);
/* rlx_session_generate on every rank: each picks the same ids from the same gathered logits */
int rlx_tp_session_generate(rlx_tp_session *s, int32_t id, int64_t n, int32_t *out, float *logits, rlx_diag *d);
void rlx_tp_session_reset(rlx_tp_session *s); /* rlx_session_reset on every rank */
int rlx_tp_session_rewind(rlx_tp_session *s, int64_t pos, rlx_diag *d); /* on every rank */
/* bytes rank's backend holds for the model and this session: weights, the activations'
 * arena, the KV cache slice (-1 outside [0, ranks)) */
int64_t rlx_tp_session_device_bytes(const rlx_tp_session *s, int rank);
/* "0,1" (a --devices argument) into out[0..n): distinct ordinals 0..RLX_MAX_DEVICES-1 in
 * the order given; fails naming the bad entry */
int rlx_devices_parse(const char *s, int *out, int max, int *n, rlx_diag *d);
/* ---- end tensor parallelism ---- */

/* ---------------------------------------------------------------- tokenizer */
typedef struct rlx_tokenizer rlx_tokenizer;
int rlx_tokenizer_load(const char *tokenizer_json, rlx_tokenizer **out, rlx_diag *d);
void rlx_tokenizer_free(rlx_tokenizer *t);
/* add_special: apply the post-processor (BOS etc.) as tokenizers' encode() does */
int rlx_tokenizer_encode(const rlx_tokenizer *t, const char *text, size_t len, int add_special,
                         int32_t **ids, size_t *n_ids, rlx_diag *d);
/* skip_special: drop special tokens as decode(skip_special_tokens=True) does */
int rlx_tokenizer_decode(const rlx_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                         char **text, rlx_diag *d);
int64_t rlx_tokenizer_vocab_size(const rlx_tokenizer *t);
int32_t rlx_tokenizer_token_id(const rlx_tokenizer *t, const char *token); /* -1 if absent */

/* ---------------------------------------------------------------- sampling */
typedef struct rlx_sampler_params {
    int greedy;
    double temperature; /* <= 0: greedy */
    int64_t top_k;      /* 0: off */
    double top_p;       /* 1: off */
    double repetition_penalty; /* 1: off */
    uint64_t seed;
} rlx_sampler_params;
typedef struct rlx_sampler rlx_sampler;
rlx_sampler *rlx_sampler_new(const rlx_sampler_params *p, int64_t vocab);
void rlx_sampler_free(rlx_sampler *s);
/* logits may be modified in place */
int32_t rlx_sampler_next(rlx_sampler *s, float *logits, const int32_t *history, size_t n_history);

/* ---- chat templates (framework/text/chat_template.c) ----
 * rlx renders the LLaMA 3, ChatML (Qwen 2/2.5/3) and Gemma 2/3 chat formats natively,
 * recognising them by their turn markers; any other template is RLX_ERR_UNSUPPORTED. */
typedef struct rlx_chat_message {
    const char *role;    /* "system", "user", "assistant" */
    const char *content;
} rlx_chat_message;
typedef struct rlx_chat_template rlx_chat_template;
/* src: the Jinja source (tokenizer_config.json's chat_template); origin names it in errors */
int rlx_chat_template_new(const char *src, const char *bos_token, const char *eos_token,
                          const char *origin, rlx_chat_template **out, rlx_diag *d);
/* dir: a model folder: tokenizer_config.json (chat_template, bos_token, eos_token), else
 * chat_template.jinja. RLX_ERR_NOT_FOUND when the model has no chat template. */
int rlx_chat_template_load(const char *dir, rlx_chat_template **out, rlx_diag *d);
void rlx_chat_template_free(rlx_chat_template *t);
/* *out: malloc'd text, to be tokenized without adding special tokens */
int rlx_chat_template_render(const rlx_chat_template *t, const rlx_chat_message *msgs, size_t n,
                             int add_generation_prompt, char **out, rlx_diag *d);
const char *rlx_chat_template_family(const rlx_chat_template *t);      /* "llama3" | "chatml" | "gemma" */
const char *rlx_chat_template_end_of_turn(const rlx_chat_template *t); /* "<|eot_id|>", ... */
/* ---- end chat templates ---- */

#ifdef __cplusplus
}
#endif
#endif /* RLX_RLX_H */
