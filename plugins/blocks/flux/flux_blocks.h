/* The blocks of rlx-blocks-flux (diffusers FluxTransformer2DModel = FLUX.1 and
 * Flux2Transformer2DModel = FLUX.2), listed by flux_plugin.c. Slots shared between them:
 *   hidden [T,D] image tokens, context [S,D] text tokens, temb [1,D] conditioning,
 *   flux.pos.{a} I32 [S+T] rope positions of axis a (text first, as diffusers joins them),
 *   flux.mod.img / flux.mod.txt [1,6D], flux.mod.single [1,3D] (FLUX.2's shared modulation). */
#ifndef RLX_BLOCKS_FLUX_BLOCKS_H
#define RLX_BLOCKS_FLUX_BLOCKS_H
#include "../core/core_emit.h"

#define FLUX_MAX_AXES 8

typedef struct flux_dims {
    int flux2;        /* Flux2Transformer2DModel */
    int64_t D;        /* inner dim = heads × head_dim */
    int64_t heads, head_dim, mlp;
    double eps;
    int n_axes;
    int64_t axes[FLUX_MAX_AXES];
    double theta;
    int guidance;      /* guidance_embeds: a guidance input and embedder */
    int64_t pooled;    /* pooled_projection_dim (FLUX.1's text embedder); 0: none */
    int64_t time_ch;   /* sinusoid channels of the timestep / guidance embedders */
    int64_t out;       /* proj_out features: patch_size² · (out_channels or in_channels) */
} flux_dims;

extern const rlx_block blk_flux_embed, blk_flux_double_block, blk_flux_single_blocks, blk_flux_output;

/* the model's dims from config.json (diffusers' class defaults for absent keys); fails
 * naming the key */
int flux_dims_read(const blk_em *e, flux_dims *fd);
/* prefix+suffix weight (and its optional prefix+bias) as a linear layer */
int32_t flux_linear(const blk_em *e, int32_t x, const char *prefix, const char *base, int64_t n);
/* x[:, k·D : (k+1)·D] of a [1, n·D] modulation, as a [D] vector */
int32_t flux_chunk(const blk_em *e, int32_t mod, int k, int64_t D);
/* columns [a, b) of a [rows, cols] value */
int32_t flux_cols(const blk_em *e, int32_t x, int64_t a, int64_t b);
/* LayerNorm without affine (eps), then ·(1 + scale) + shift */
int32_t flux_modulate(const blk_em *e, int32_t x, int32_t shift, int32_t scale, double eps);
/* linear(silu(temb)) of the modulation layer prefix ("norm1.linear.") */
int32_t flux_mod_linear(const blk_em *e, const char *prefix, int64_t n);
/* [L, D] -> heads [L, h, d], RMS-normed with norm (weight name), rotated by the rope slots */
int32_t flux_qk(const blk_em *e, const flux_dims *fd, int32_t x, const char *norm, int rope);
/* attention over all keys of q, k, v [L, h, d] -> [L, D] */
int32_t flux_attention(const blk_em *e, const flux_dims *fd, int32_t q, int32_t k, int32_t v);
#endif
