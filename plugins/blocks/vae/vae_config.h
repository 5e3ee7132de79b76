/* The AutoencoderKL decoder's config.json keys (diffusers' class defaults when absent),
 * read and checked once: compiled into the vae arch plugin and the vae blocks plugin. */
#ifndef RLX_VAE_CONFIG_H
#define RLX_VAE_CONFIG_H
#include <stdint.h>
#include "rlx/plugin.h"

#define VAE_MAX_BLOCKS 8
#define VAE_EPS 1e-6 /* the decoder's GroupNorm eps (fixed by diffusers' Decoder) */

typedef struct vae_cfg {
    int64_t latent;                /* latent_channels */
    int64_t out;                   /* out_channels */
    int64_t groups;                /* norm_num_groups */
    int64_t layers;                /* layers_per_block (up blocks have layers + 1 resnets) */
    int n_blocks;                  /* len(block_out_channels) */
    int64_t ch[VAE_MAX_BLOCKS];    /* block_out_channels */
    double scaling, shift;         /* latents / scaling_factor + shift_factor */
    int post_quant;                /* use_post_quant_conv */
    int mid_attn;                  /* mid_block_add_attention */
} vae_cfg;

/* fills v from src; fails through d naming the file and key */
int vae_cfg_read(const rlx_host_api *h, const rlx_config *src, vae_cfg *v, rlx_diag *d);
#endif
