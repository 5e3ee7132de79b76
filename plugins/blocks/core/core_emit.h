/* Reusable emitters behind the core blocks. Compiled into rlx-blocks-core and into every
 * family plugin that composes layers from them (plugins never call each other), so a
 * family's composed layer emits exactly what the core blocks emit. Only plugin.h is used. */
#ifndef RLX_BLOCKS_CORE_EMIT_H
#define RLX_BLOCKS_CORE_EMIT_H
#include <stdint.h>
#include "rlx/plugin.h"

/* emission target of one stage: the context and the host's services */
typedef struct blk_em {
    rlx_ctx *c;
    const rlx_host_api *h;
    const char *who; /* block name, for failure messages */
} blk_em;

#define BLK_NAME_MAX 512

rlx_shape blk_shape1(int64_t a);
rlx_shape blk_shape2(int64_t a, int64_t b);
rlx_shape blk_shape3(int64_t a, int64_t b, int64_t c);
/* 1 when the profile's fusion policy is "direct" (emit composites), 0 for "fusable" */
int blk_direct(const blk_em *e);
/* heads, kv heads and head_dim of cfg (kv 0: = heads; head_dim 0: hidden / heads), checked:
 * a bad geometry fails naming the config keys */
int blk_heads(const blk_em *e, int64_t *heads, int64_t *kv, int64_t *head_dim);
/* A slot's value, failing the build naming the slot when it is unset */
int32_t blk_slot(const blk_em *e, const char *slot);
/* "prefix" + "suffix" into out; fails (returns -1) when it does not fit */
int blk_join(const blk_em *e, char *out, const char *prefix, const char *suffix);
/* A checkpoint tensor prefix+suffix, expected shape [a] / [a,b] (b < 0: 1-D) */
int32_t blk_weight(const blk_em *e, const char *prefix, const char *suffix, int64_t a, int64_t b,
                   int optional);
/* rlx.reshape to the given dims (one may be -1) */
int32_t blk_reshape(const blk_em *e, int32_t x, uint32_t n, const int64_t *dims);
int32_t blk_op1(const blk_em *e, const char *op, int32_t a);
int32_t blk_op2(const blk_em *e, const char *op, int32_t a, int32_t b);
/* last dimension and dtype of a value */
int blk_last_dim(const blk_em *e, int32_t v, int64_t *dim, int32_t *dtype);

/* token embedding: table[ids] (· scale when scale != 0 and != 1) */
int32_t blk_embed(const blk_em *e, const char *weight, int32_t ids, double scale);
/* rms_norm(x, w) with w = weight (full name) */
int32_t blk_rms_norm(const blk_em *e, int32_t x, const char *weight, double eps, int add_one);
/* sum = a + b, normed = rms_norm(sum, weight): rlx.add_rms_norm under "direct" */
int blk_add_rms_norm(const blk_em *e, int32_t a, int32_t b, const char *weight, double eps,
                     int add_one, int32_t *sum, int32_t *normed);
int32_t blk_layer_norm(const blk_em *e, int32_t x, const char *weight, const char *bias,
                       double eps);
/* x·wᵀ (+ bias, optional tensor name or NULL); out_features < 0: not checked */
int32_t blk_linear(const blk_em *e, int32_t x, const char *weight, const char *bias,
                   int64_t out_features, int optional_bias);
/* blk_linear with a tensor-parallel layout hint on the rlx.matmul (docs/OPS.md): tp
 * "col" (output features split over ranks in whole units of unit rows, e.g. heads of
 * head_dim), "col_rep" (the same, units replicated when fewer than ranks: GQA kv heads),
 * "row" (input features split: partial sums, all-reduced), "vocab" (col, gathered);
 * NULL: none */
int32_t blk_linear_tp(const blk_em *e, int32_t x, const char *weight, const char *bias,
                      int64_t out_features, int optional_bias, const char *tp, int64_t unit);
/* down(act(gate(x)) * up(x)); prefix holds gate_proj/up_proj/down_proj. Under "direct"
 * the fused op (act_mul_op, e.g. rlx.swiglu) replaces rlx.mul of act_op (e.g. rlx.silu). */
int32_t blk_gated_mlp(const blk_em *e, int32_t x, const char *prefix, int64_t intermediate,
                      int bias, const char *act_mul_op, const char *act_op);
/* blk_gated_mlp over one fused [2·intermediate, H] projection prefix+"gate_up_proj.weight"
 * (gate rows first, as Phi-3 stores it), split with rlx.slice; down_proj as usual */
int32_t blk_fused_gated_mlp(const blk_em *e, int32_t x, const char *prefix, int64_t intermediate,
                            const char *act_mul_op, const char *act_op);
/* x[..., start:end] (rlx.slice on the last axis) */
int32_t blk_slice_last(const blk_em *e, int32_t x, int64_t start, int64_t end);
/* down(silu(gate(x)) * up(x)): blk_gated_mlp with rlx.swiglu / rlx.silu */
int32_t blk_swiglu_mlp(const blk_em *e, int32_t x, const char *prefix, int64_t intermediate,
                       int bias);
/* down(act(up(x))): act "gelu" or "gelu_tanh"; biases optional */
int32_t blk_gelu_ffn(const blk_em *e, int32_t x, const char *up, const char *up_bias,
                     const char *down, const char *down_bias, const char *act);

/* Self-attention of the HF layout (q_proj, k_proj, v_proj, o_proj under prefix; or one
 * fused qkv projection). A rope table shorter than head_dim/2 rotates only the first
 * 2·len dims of each head (partial rotary). */
typedef struct blk_attn_args {
    const char *prefix; /* "model.layers.3.self_attn." */
    int64_t num_heads, num_kv_heads, head_dim, hidden;
    int bias;              /* q/k/v biases (attention_bias) */
    int qk_norm;           /* q_norm/k_norm RMSNorm over head_dim (qwen3, gemma3) */
    double qk_norm_eps;
    int qk_norm_add_one;
    const char *inv_freq_slot; /* "rope.inv_freq"; NULL: no rope */
    double scale;          /* 0: 1/sqrt(head_dim) */
    int causal;
    int64_t window;        /* 0: none */
    double softcap;        /* 0: none */
    const char *cache;     /* "cache.3": states cache.3.k / cache.3.v; NULL: no cache */
    const char *qkv;       /* fused [(nh+2·nkv)·d, hidden] weight under prefix, q rows
                              first ("qkv_proj.weight"); NULL: q_proj/k_proj/v_proj */
} blk_attn_args;
int32_t blk_self_attention(const blk_em *e, int32_t x, const blk_attn_args *a);

/* The LLaMA-shaped pre-norm decoder layer over the slot "hidden":
 *   h = x + attn(rms_norm(x)); hidden = h + swiglu_mlp(rms_norm(h))
 * with rlx.add_rms_norm for the middle add + norm under "direct". */
typedef struct blk_prenorm_args {
    const char *in_norm, *post_norm; /* full weight names */
    double eps;
    blk_attn_args attn;
    const char *mlp;      /* prefix of gate_proj/up_proj/down_proj (or gate_up_proj) */
    int fused_gate_up;    /* mlp holds one gate_up_proj (blk_fused_gated_mlp) */
    int64_t intermediate;
    int mlp_bias;
} blk_prenorm_args;
int blk_prenorm_layer(const blk_em *e, const blk_prenorm_args *L);

/* logits = x·wᵀ (softcap when cap > 0), emitted as output out_name; the matmul is hinted
 * vocab-parallel */
int blk_lm_head(const blk_em *e, int32_t x, int32_t w, double cap, const char *out_name);

/* Rotary inverse frequencies as transformers computes them (rope_type "default",
 * "linear", "llama3"), in double precision. n = dim/2 values into out.
 * Returns 0, or -1 with a reason in err. */
typedef struct blk_rope_args {
    const char *rope_type;
    double theta;
    int64_t dim; /* rotated dims (head_dim · partial factor) */
    double factor, low_freq_factor, high_freq_factor;
    int64_t original_max_position;
} blk_rope_args;
int blk_rope_inv_freq(const blk_rope_args *a, double *out, char *err, size_t err_len);
#endif
