/* rlx-blocks-vae: the stages of diffusers' AutoencoderKL decoder (Decoder in
 * diffusers/models/autoencoders/vae.py) over the slot "hidden" [C, H, W]. */
#include <stdio.h>
#include "vae_blocks.h"
#include "rlx/plugin_util.h"

static int set_hidden(const blk_em *e, int32_t v)
{
    return v < 0 || e->h->slot_set(e->c, "hidden", v) != 0 ? RLX_ERR_INVALID : 0;
}

/* latents / scaling_factor + shift_factor, post_quant_conv (if any), conv_in */
static int decode_in(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "vae.decode_in"};
    vae_cfg v;
    if (vae_cfg_of(&e, &v)) return RLX_ERR_INVALID;
    int32_t x = blk_slot(&e, "latents");
    rlx_attr sc[] = {RLX_ATTR_F("scale", 1.0 / v.scaling)}, sh[] = {RLX_ATTR_F("value", v.shift)};
    x = x < 0 ? -1 : h->emit_op(c, "rlx.scale", &x, 1, sc, 1);
    if (v.shift != 0) x = x < 0 ? -1 : h->emit_op(c, "rlx.add_scalar", &x, 1, sh, 1);
    if (v.post_quant) x = vae_conv(&e, x, "post_quant_conv.", v.latent, v.latent, 1);
    return set_hidden(&e, vae_conv(&e, x, "decoder.conv_in.", v.latent, v.ch[v.n_blocks - 1], 3));
}

/* UNetMidBlock2D: resnet, attention (mid_block_add_attention), resnet */
static int mid_block(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "vae.mid_block"};
    vae_cfg v;
    if (vae_cfg_of(&e, &v)) return RLX_ERR_INVALID;
    int64_t ch = v.ch[v.n_blocks - 1];
    int32_t x = vae_resnet(&e, blk_slot(&e, "hidden"), "decoder.mid_block.resnets.0.", ch, ch, v.groups);
    if (v.mid_attn) x = vae_attention(&e, x, "decoder.mid_block.attentions.0.", ch, v.groups);
    return set_hidden(&e, vae_resnet(&e, x, "decoder.mid_block.resnets.1.", ch, ch, v.groups));
}

/* UpDecoderBlock2D `index` (param): layers_per_block + 1 resnets from the previous block's
 * channels to reversed(block_out_channels)[index], then (all but the last) nearest ×2
 * upsampling and a 3×3 conv */
static int up_block(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "vae.up_block"};
    vae_cfg v;
    if (vae_cfg_of(&e, &v)) return RLX_ERR_INVALID;
    int64_t i = h->param_int(c, "index", -1);
    if (i < 0 || i >= v.n_blocks)
        return h->fail(c, "%s: param index %lld is not a block of block_out_channels (%d)", e.who, (long long)i,
                       v.n_blocks);
    int64_t cin = v.ch[v.n_blocks - (i ? i : 1)], cout = v.ch[v.n_blocks - 1 - i];
    int32_t x = blk_slot(&e, "hidden");
    char p[BLK_NAME_MAX];
    for (int64_t r = 0; r <= v.layers && x >= 0; r++) {
        snprintf(p, sizeof p, "decoder.up_blocks.%lld.resnets.%lld.", (long long)i, (long long)r);
        x = vae_resnet(&e, x, p, r ? cout : cin, cout, v.groups);
    }
    if (i < v.n_blocks - 1 && x >= 0) {
        rlx_attr up[] = {RLX_ATTR_I("scale", 2)};
        x = h->emit_op(c, "rlx.upsample_nearest2d", &x, 1, up, 1);
        snprintf(p, sizeof p, "decoder.up_blocks.%lld.upsamplers.0.conv.", (long long)i);
        x = vae_conv(&e, x, p, cout, cout, 3);
    }
    return set_hidden(&e, x);
}

/* conv_norm_out, SiLU, conv_out -> the output "sample" */
static int decode_out(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "vae.decode_out"};
    vae_cfg v;
    if (vae_cfg_of(&e, &v)) return RLX_ERR_INVALID;
    int32_t x = vae_group_norm(&e, blk_slot(&e, "hidden"), "decoder.conv_norm_out.", v.ch[0], v.groups);
    x = vae_conv(&e, blk_op1(&e, "rlx.silu", x), "decoder.conv_out.", v.ch[0], v.out, 3);
    if (x < 0) return RLX_ERR_INVALID;
    return h->emit_output(c, h->param_str(c, "output", "sample"), x) == 0 ? 0 : RLX_ERR_INVALID;
}

const rlx_block blk_vae_decode_in = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), "vae.decode_in",
    "AutoencoderKL decoder input: latents / scaling_factor + shift_factor, post_quant_conv, conv_in",
    "none (reads the flow input latents [latent_channels, h, w]; writes hidden)", decode_in};
const rlx_block blk_vae_mid_block = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), "vae.mid_block",
    "AutoencoderKL mid block: ResNet, GroupNorm spatial self-attention, ResNet",
    "none (reads and writes hidden)", mid_block};
const rlx_block blk_vae_up_block = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), "vae.up_block",
    "AutoencoderKL UpDecoderBlock2D: ResNet blocks, nearest x2 upsampling and a conv",
    "index: int (the up block, 0 first); reads and writes hidden", up_block};
const rlx_block blk_vae_decode_out = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), "vae.decode_out",
    "AutoencoderKL decoder output: conv_norm_out, SiLU, conv_out",
    "output: str (sample); reads hidden", decode_out};

static const rlx_block *const blocks[] = {&blk_vae_decode_in, &blk_vae_mid_block, &blk_vae_up_block,
                                          &blk_vae_decode_out};

RLX_BLOCKS_PLUGIN("blocks-vae", "AutoencoderKL decoder blocks: input convs, mid block, up blocks, output", blocks)
