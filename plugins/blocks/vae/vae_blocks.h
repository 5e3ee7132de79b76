/* The blocks of rlx-blocks-vae (diffusers AutoencoderKL decoder) and the emitters they share.
 * The image travels in the slot "hidden" as [C, H, W] (channels first, one image). */
#ifndef RLX_BLOCKS_VAE_BLOCKS_H
#define RLX_BLOCKS_VAE_BLOCKS_H
#include "../core/core_emit.h"
#include "vae_config.h"

extern const rlx_block blk_vae_decode_in, blk_vae_mid_block, blk_vae_up_block, blk_vae_decode_out;

/* the stage's vae_cfg (fails the build naming the file and key) */
int vae_cfg_of(const blk_em *e, vae_cfg *v);
/* Conv2d prefix{weight,bias} [cout, cin, k, k], stride 1, padding k/2 */
int32_t vae_conv(const blk_em *e, int32_t x, const char *prefix, int64_t cin, int64_t cout, int64_t k);
/* GroupNorm prefix{weight,bias} over c channels in `groups` groups */
int32_t vae_group_norm(const blk_em *e, int32_t x, const char *prefix, int64_t c, int64_t groups);
/* ResnetBlock2D: norm1, silu, conv1, norm2, silu, conv2, plus x (through conv_shortcut 1×1
 * when cin != cout) */
int32_t vae_resnet(const blk_em *e, int32_t x, const char *prefix, int64_t cin, int64_t cout, int64_t groups);
/* the mid block's single-head spatial self-attention (group_norm, to_q/k/v, to_out.0) plus x */
int32_t vae_attention(const blk_em *e, int32_t x, const char *prefix, int64_t c, int64_t groups);
#endif
