/* flux.single_blocks: every single-stream block (FluxSingleTransformerBlock /
 * Flux2SingleTransformerBlock), num_single_layers of them from config.json, over the
 * joined tokens x = cat(context, hidden) (joined once; diffusers' per-block join and split
 * computes the same). Attention and MLP run in parallel on one modulated input:
 *   x̂ = LN(x)·(1+scale)+shift;  x += gate · proj_out(cat(attn(x̂), mlp(x̂)))
 * FLUX.1: per-block norm.linear, proj_mlp + GELU-tanh, to_q/k/v, proj_out, biases.
 * FLUX.2: shared flux.mod.single, one fused to_qkv_mlp_proj, SwiGLU, attn.to_out. */
#include "flux_blocks.h"
#include <math.h>
#include <stdio.h>

static int32_t block(const blk_em *e, const flux_dims *fd, int32_t x, const char *pre)
{
    int64_t D = fd->D, I = fd->mlp;
    char p[BLK_NAME_MAX], nq[BLK_NAME_MAX], nk[BLK_NAME_MAX];
    if (blk_join(e, nq, pre, "attn.norm_q.weight") < 0 || blk_join(e, nk, pre, "attn.norm_k.weight") < 0)
        return -1;
    int32_t mod;
    if (fd->flux2) mod = blk_slot(e, "flux.mod.single");
    else mod = blk_join(e, p, pre, "norm.linear.") < 0 ? -1 : flux_mod_linear(e, p, 3 * D);
    int32_t xn = flux_modulate(e, x, flux_chunk(e, mod, 0, D), flux_chunk(e, mod, 1, D), fd->eps);
    int32_t q, k, v, mlp;
    if (fd->flux2) {
        if (blk_join(e, p, pre, "attn.to_qkv_mlp_proj.") < 0) return -1;
        int32_t all = flux_linear(e, xn, p, "", 3 * D + 2 * I);
        q = flux_cols(e, all, 0, D);
        k = flux_cols(e, all, D, 2 * D);
        v = flux_cols(e, all, 2 * D, 3 * D);
        mlp = blk_op2(e, "rlx.mul", blk_op1(e, "rlx.silu", flux_cols(e, all, 3 * D, 3 * D + I)),
                      flux_cols(e, all, 3 * D + I, 3 * D + 2 * I));
    } else {
        if (blk_join(e, p, pre, "attn.") < 0) return -1;
        q = flux_linear(e, xn, p, "to_q.", D);
        k = flux_linear(e, xn, p, "to_k.", D);
        v = flux_linear(e, xn, p, "to_v.", D);
        if (blk_join(e, p, pre, "proj_mlp.") < 0) return -1;
        mlp = blk_op1(e, "rlx.gelu_tanh", flux_linear(e, xn, p, "", I));
    }
    int32_t a = flux_attention(e, fd, flux_qk(e, fd, q, nq, 1), flux_qk(e, fd, k, nk, 1), flux_qk(e, fd, v, NULL, 0));
    int32_t cat[2] = {a, mlp};
    rlx_attr ax[] = {RLX_ATTR_I("axis", 1)};
    int32_t y = a < 0 || mlp < 0 ? -1 : e->h->emit_op(e->c, "rlx.concat", cat, 2, ax, 1);
    if (blk_join(e, p, pre, fd->flux2 ? "attn.to_out." : "proj_out.") < 0) return -1;
    y = flux_linear(e, y, p, "", D);
    return blk_op2(e, "rlx.add", x, blk_op2(e, "rlx.mul", y, flux_chunk(e, mod, 2, D)));
}

static int single_blocks(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "flux.single_blocks"};
    flux_dims fd;
    if (flux_dims_read(&e, &fd)) return RLX_ERR_INVALID;
    double n = 38;
    h->config_number(c, "num_single_layers", &n);
    if (n < 0 || n > RLX_MAX_LAYERS || n != floor(n))
        return h->fail(c, "flux.single_blocks: config.json: num_single_layers %g is out of range [0, %d]", n,
                       RLX_MAX_LAYERS);
    const char *pre = h->param_str(c, "prefix", "single_transformer_blocks.");
    int32_t cat[2] = {blk_slot(&e, "context"), blk_slot(&e, "hidden")};
    if (cat[0] < 0 || cat[1] < 0) return RLX_ERR_INVALID;
    rlx_shape s, t;
    int32_t dt;
    if (h->value_info(c, cat[0], &s, &dt) != 0 || h->value_info(c, cat[1], &t, &dt) != 0) return RLX_ERR_INVALID;
    rlx_attr ax[] = {RLX_ATTR_I("axis", 0)};
    int32_t x = h->emit_op(c, "rlx.concat", cat, 2, ax, 1);
    for (int i = 0; i < (int)n && x >= 0; i++) {
        char p[BLK_NAME_MAX];
        int w = snprintf(p, sizeof p, "%s%d.", pre, i);
        if (w < 0 || w >= (int)sizeof p) return h->fail(c, "flux.single_blocks: prefix '%s' is too long", pre);
        x = block(&e, &fd, x, p);
    }
    rlx_attr txt[] = {RLX_ATTR_I("axis", 0), RLX_ATTR_I("start", 0), RLX_ATTR_I("end", s.dims[0])};
    rlx_attr img[] = {RLX_ATTR_I("axis", 0), RLX_ATTR_I("start", s.dims[0]), RLX_ATTR_I("end", s.dims[0] + t.dims[0])};
    int32_t ctx = x < 0 ? -1 : h->emit_op(c, "rlx.slice", &x, 1, txt, 3);
    int32_t hid = x < 0 ? -1 : h->emit_op(c, "rlx.slice", &x, 1, img, 3);
    if (ctx < 0 || hid < 0 || h->slot_set(c, "context", ctx) != 0 || h->slot_set(c, "hidden", hid) != 0)
        return RLX_ERR_INVALID;
    return 0;
}

const rlx_block blk_flux_single_blocks = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), "flux.single_blocks",
    "FLUX single-stream blocks (config num_single_layers): parallel rope attention + MLP on cat(text, image)",
    "prefix: str (single_transformer_blocks.); reads and writes the slots hidden, context",
    single_blocks};
