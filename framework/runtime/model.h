/* Internal state of a model (rlx_model), its compiled programs and sessions. */
#ifndef RLX_MODEL_H
#define RLX_MODEL_H
#include "build/build.h"
#include <pthread.h>

/* A checkpoint tensor converted once for the backend, shared by every program. */
typedef struct rg_weight {
    char *name;
    rlx_shape shape;
    int dtype;   /* as bound: f32, f16 or bf16 (one entry per name, dtype and slice) */
    int split;   /* RG_SPLIT_*: a tensor-parallel rank's rows or columns [lo, hi) */
    int64_t lo, hi;
    void *ptr;   /* what the backend reads: host (mmapped or owned) or device */
    void *owned; /* host copy (owned_map: its mapping's length, else malloc'd), or NULL */
    size_t owned_map;
    int in_slab; /* owned lies in the model's weight slab (freed with it) */
    int device;  /* ptr came from backend->alloc */
    int in_block; /* ptr lies in one of the model's device weight blocks (freed with it) */
} rg_weight;

/* A compiled program for one (phase, sequence length, context length). */
typedef struct rg_exec rg_exec;

struct rlx_model {
    char *dir;              /* model folder, NULL for rlx_model_from_flow */
    rlx_config *config;     /* owned, NULL for rlx_model_from_flow */
    rlx_model_config cfg;   /* what blocks see */
    rlx_weights *weights_owned;
    const rlx_weights *weights;
    rlx_registry *registry_owned;
    const rlx_registry *registry;
    const rlx_arch *arch;
    rlx_profile profile[2]; /* prefill (and encode), decode */
    char policy[2][16];
    const rlx_backend *be;
    void *be_ctx;
    int threads;
    int verbose;
    void (*progress)(void *user, uint64_t done, uint64_t total); /* rlx_model_options */
    void *progress_user;
    uint64_t bytes_loaded, bytes_total; /* checkpoint bytes converted so far / in all */
    rlx_flow *flow[2]; /* prefill, decode */
    int encoder;       /* the arch builds an encode flow (flow[0], phase RLX_PHASE_ENCODE) */
    rg_weight *w;
    uint32_t n_w;
    char *slab; /* converted host weights, one huge-page mapping (model_weights.c) */
    size_t slab_len, slab_used;
    int slab_tried;
    /* device weight blocks (model_weights.c): a program's weights in one allocation, side by
     * side in the order its nodes read them; blk_cur/blk_end: the room left in the last */
    void **blocks;
    uint32_t n_blocks;
    char *blk_cur, *blk_end;
    uint64_t conv_avail; /* host memory known free for conversions (model_weights.c) */
    rg_exec **exec;
    uint32_t n_exec;
    void *arena;
    size_t arena_cap;
    uint64_t arena_gen;
    /* sessions may step from several threads: the compiled programs, the arena they
     * share and the backend run one step at a time (held from compile to output) */
    pthread_mutex_t mu;
    /* tensor parallelism (runtime/tp.c): this model is rank tp_rank of tp_ranks (1: none),
     * its collectives meet the other ranks' in group tp_group */
    int tp_rank, tp_ranks;
    int64_t tp_group;
    /* memory.c: what is on the device now, for rlx_model_memory and the checks */
    uint64_t state_bytes;   /* session states (KV caches) of every open session */
    uint64_t buffer_bytes;  /* constants and IO staging of the compiled programs */
    const struct rg_states *run_states; /* the states of the session being run (compile counts the rest) */
    struct rg_pool *pool; /* batch.c: the cache slots of sessions that decoded together */
    int tp_device; /* >= 0: this rank's GPU (its backend's device), else the profile's */
};

/* Session-owned persistent buffers (KV caches), by name. */
typedef struct rg_state {
    char *name;
    int dtype;
    rlx_shape shape;
    void *ptr;
    size_t bytes;
    int borrowed; /* ptr is the session's slot in the model's batch pool (batch.c) */
} rg_state;

typedef struct rg_states {
    rg_state *s;
    uint32_t n;
} rg_states;

struct rlx_session {
    rlx_model *m;
    int64_t ctx;
    int64_t pos;
    rg_states st;
    int64_t slot1; /* 1 + its slot in m->pool (batch.c), 0: none */
};

/* batch.c: a session leaves its pool slot (its states were borrowed from it); the pool
 * itself goes with the model */
void rg_pool_leave(rlx_session *s);
void rg_pool_free(rlx_model *m);
/* batch.c: the decode program of B rows, one sequence each, over a pool of cap cache
 * slots of ctx positions (rlx_session_decode_batch's; call with m->mu held) */
int rg_batch_exec(rlx_model *m, int64_t B, int64_t cap, int64_t ctx, rg_exec **e, rlx_diag *d);

/* min(max_position_embeddings, 4096) */
int64_t rg_default_ctx(const rlx_model *m);

/* model_weights.c: the weight the backend reads in dtype (f32, f16, bf16; f32 for
 * rg_model_weight), converted once at bind; one entry per name and dtype. */
int rg_model_weight_as(rlx_model *m, const char *name, int dtype, const rg_weight **out, rlx_diag *d);
/* the same for a rank's slice (split RG_SPLIT_ROWS / _COLS, [lo, hi)): rows of a tensor
 * stored as bound are used in place, columns are gathered; never the whole tensor */
int rg_model_weight_part(rlx_model *m, const char *name, int dtype, int split, int64_t lo, int64_t hi,
                         const rg_weight **out, rlx_diag *d);
/* Is this weight (name, dtype, slice) bound already? */
int rg_model_weight_bound(const rlx_model *m, const char *name, int dtype, int split, int64_t lo, int64_t hi);
/* A device block of bytes the next uploads take their memory from, 256-byte aligned, in
 * order (compile.c binds a program's weights so); when the backend refuses it, each weight
 * gets its own allocation, as without blocks. */
void rg_model_weight_block(rlx_model *m, size_t bytes);
#define RG_WEIGHT_ALIGN ((size_t)256)
/* the build's view of the model, for phase */
rg_build_env rg_model_build_env(const rlx_model *m, int phase);
int rg_model_weight(rlx_model *m, const char *name, const rlx_shape *expect, int optional,
                    const rg_weight **out, rlx_diag *d);
void rg_model_free_weights(rlx_model *m);


/* tp.c: --devices (or the profile's backend.cuda.devices) valid for the chosen backend */
int rg_model_check_devices(rlx_model *m, const char *devices, rlx_diag *d);
/* model.c: rlx_model_open as rank of ranks, its backend on GPU device (-1: the profile's
 * backend.cuda.devices[rank], else device rank when ranks > 1, else backend.cuda.device) */
int rg_model_open_on(const char *dir, const rlx_model_options *opt, int device, int rank, int ranks,
                     rlx_model **out, rlx_diag *d);

/* compile.c: build + passes + legalize + plan + backend compile, cached per shape */
int rg_model_exec(rlx_model *m, int phase, int64_t T, int64_t ctx, rg_exec **out, rlx_diag *d);
/* the same for a set of optional inputs given (v NULL: all of them) */
int rg_model_exec_v(rlx_model *m, int phase, int64_t T, int64_t ctx, const rg_variant *v, rg_exec **out,
                    rlx_diag *d);
void rg_exec_free(rlx_model *m, rg_exec *e);
/* exec.c */
typedef struct rg_io {
    const char *name;
    const void *data; /* host data in the value's dtype and shape */
    const char *how;  /* for messages: how the host made it (NULL: the caller gave it) */
} rg_io;
int rg_exec_run(rlx_model *m, rg_exec *e, rg_states *st, const rg_io *in, uint32_t n_in,
                rlx_diag *d);
/* rg_exec_run and then output name into dst (NULL: none), the output's download queued
 * right behind the program: a decode step waits for the device once, not twice */
int rg_exec_run_read(rlx_model *m, rg_exec *e, rg_states *st, const rg_io *in, uint32_t n_in, const char *name,
                     void *dst, rlx_diag *d);
/* rg_exec_run in two halves: inputs bound and uploaded and the program started, then (rc
 * the first half's) the wait for the device; a chain of launches waits once */
int rg_exec_launch(rlx_model *m, rg_exec *e, rg_states *st, const rg_io *in, uint32_t n_in, rlx_diag *d);
int rg_exec_finish(rlx_model *m, int rc, rlx_diag *d);
/* state in->name of the session (made: rg_states_ensure) set from in->data, ids checked
 * as an input's; bytes [off, off + bytes) of state name read into dst */
int rg_exec_state_set(rlx_model *m, rg_exec *e, rg_states *st, const rg_io *in, rlx_diag *d);
int rg_exec_state_get(rlx_model *m, rg_exec *e, rg_states *st, const char *name, size_t off, void *dst, size_t bytes,
                      rlx_diag *d);
/* host copy of output name (numel * dtype bytes) */
int rg_exec_output(rlx_model *m, rg_exec *e, const char *name, void *dst, rlx_diag *d);
/* the program's input / output / state value of that name; NULL: none */
const rlx_value_desc *rg_exec_find_io(const rg_exec *e, const char *name, int output);
const rlx_value_desc *rg_exec_find_state(const rg_exec *e, const char *name);
void rg_states_free(rlx_model *m, rg_states *st);
/* the index of state name, or st->n; tried at from first (a program's states come in the
 * order they were made, so a walk over its values passing the last index + 1 finds each at
 * once instead of comparing names with every state) */
uint32_t rg_states_find(const rg_states *st, const char *name, uint32_t from);
void rg_exec_dump(const rg_exec *e, FILE *out);
#endif
