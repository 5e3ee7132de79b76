/* flux.output: AdaLayerNormContinuous (norm_out: linear(silu(temb)) = scale, shift — scale
 * first) of the image tokens, then proj_out -> the flow output "output"
 * [T, patch_size² · out_channels]. */
#include "flux_blocks.h"

static int output(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "flux.output"};
    flux_dims fd;
    if (flux_dims_read(&e, &fd)) return RLX_ERR_INVALID;
    int32_t mod = flux_mod_linear(&e, "norm_out.linear.", 2 * fd.D);
    int32_t x = flux_modulate(&e, blk_slot(&e, "hidden"), flux_chunk(&e, mod, 1, fd.D), flux_chunk(&e, mod, 0, fd.D),
                              fd.eps);
    x = flux_linear(&e, x, "proj_out.", "", fd.out);
    if (x < 0) return RLX_ERR_INVALID;
    return h->emit_output(c, h->param_str(c, "output", "output"), x) == 0 ? 0 : RLX_ERR_INVALID;
}

const rlx_block blk_flux_output = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), "flux.output",
    "FLUX output: continuous AdaLayerNorm of the image tokens and proj_out",
    "output: str (output); reads the slots hidden, temb", output};
