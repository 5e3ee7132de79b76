/* What the arch recipes share, compiled into each arch plugin (plugins never link each
 * other): the config.json checks and the decoder-LM flow
 *   token_embed -> rope_tables [-> rope_tables (local)] -> repeat(L, layer) -> final_norm
 *   -> lm_head
 * Each recipe keeps its model_type check and the parameters that differ. */
#ifndef RLX_ARCH_RECIPE_COMMON_H
#define RLX_ARCH_RECIPE_COMMON_H
#include "rlx/plugin.h"

/* The activations a recipe runs, named as config.json names them */
typedef struct recipe_act {
    const char *key;              /* config.json key in messages: "hidden_act" */
    const char *const *accepted;  /* NULL-terminated */
    const char *shown;            /* the list the message gives: "silu" */
} recipe_act;

/* A decoder LM: one flow serves prefill and decode (the layer reads and writes the KV cache) */
typedef struct recipe_decoder {
    const char *arch;         /* "llama": names the recipe in messages */
    recipe_act act;
    const char *embed;        /* token_embed parameters */
    const char *rope;         /* rope_tables parameters; NULL: "{}" */
    const char *local_rope;   /* a second rope_tables stage's parameters, or NULL */
    const char *layer_block;  /* the repeated layer */
    const char *layer;        /* its parameters */
    const char *final_norm;   /* final_norm parameters */
} recipe_decoder;

/* v must be in [1, 2^24] (so products of two sizes cannot overflow); fails naming key */
int recipe_check_size(const rlx_config *src, const char *key, int64_t v, const rlx_host_api *host,
                      rlx_diag *d);

/* the session inputs of a decoder LM: input_ids [T], positions [T] (default 0..T-1),
 * pos [1] (default 0) */
int recipe_session_inputs(rlx_flow *flow, const rlx_host_api *host);

/* num_hidden_layers in [1, RLX_MAX_LAYERS] */
int recipe_check_layers(const rlx_model_config *cfg, const rlx_host_api *host, rlx_diag *d);

/* hidden_act empty or one of act->accepted */
int recipe_check_act(const rlx_model_config *cfg, const char *arch, const recipe_act *act,
                     const rlx_host_api *host, rlx_diag *d);

/* Checks phase and config (layers, sizes, activation, rope_type), then appends the stages */
int recipe_decoder_flow(rlx_flow *flow, int phase, const rlx_model_config *cfg,
                        const recipe_decoder *r, const rlx_host_api *host, rlx_diag *d);
#endif
