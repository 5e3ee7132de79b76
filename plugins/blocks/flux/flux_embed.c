/* flux.embed: the inputs of the FLUX transformers into the slots the blocks share.
 *   hidden = x_embedder(hidden_states), context = context_embedder(encoder_hidden_states)
 *   temb = timestep_embedder(sinusoid(1000·timestep))
 *          [+ guidance_embedder(sinusoid(1000·guidance))]   where guidance_embeds is true
 *          [+ text_embedder(pooled_projections)]            FLUX.1 (pooled_projection_dim)
 *   flux.pos.{a} = column a of cat(txt_ids, img_ids), as I32 (FLUX pipelines give integer
 *   ids; a fractional id would be truncated)
 * FLUX.2 also computes its shared modulations once (flux.mod.img/txt/single). */
#include "flux_blocks.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

/* diffusers Timesteps(C, flip_sin_to_cos=True, downscale_freq_shift=0) of 1000·t, then
 * the TimestepEmbedding MLP at prefix. The angles 1000·t·f_j are the inv_freq of an
 * rlx.rope at position 1 applied to [1…1, 0…0]: its output is [cos, sin]. */
static int32_t time_embed(const blk_em *e, const char *input, int64_t C, const char *prefix, int64_t D)
{
    int32_t t = blk_slot(e, input);
    int64_t one[2] = {1, 1}, half = C / 2;
    t = t < 0 ? -1 : blk_reshape(e, t, 2, one);
    /* 1000·t in f32 too: diffusers rounds it to the model dtype first (3500 -> 3504 in
     * bf16), which alone moves a guidance-embedding output 5 % from the f32 reference */
    rlx_attr k[] = {RLX_ATTR_F("scale", 1000.0), RLX_ATTR_I("f32", 1)};
    t = t < 0 ? -1 : e->h->emit_op(e->c, "rlx.scale", &t, 1, k, 2);
    float *buf = calloc((size_t)C + 1, sizeof *buf);
    if (!buf) return e->h->fail(e->c, "%s: out of memory", e->who), -1;
    for (int64_t j = 0; j < half; j++) buf[j] = (float)exp(-log(10000.0) * (double)j / (double)half);
    rlx_shape fs = blk_shape2(half, 1);
    int32_t freqs = e->h->emit_const(e->c, RLX_F32, &fs, buf);
    /* angles and sinusoid in f32 whatever the compute dtype ("f32": 1), as diffusers'
     * get_timestep_embedding; only the MLP after it has 16-bit weights */
    rlx_attr pin[] = {RLX_ATTR_I("f32", 1), RLX_ATTR_I("rot_dim", 0)};
    int32_t mm[2] = {t, freqs};
    int32_t ang = t < 0 || freqs < 0 ? -1 : e->h->emit_op(e->c, "rlx.matmul", mm, 2, pin, 1); /* [1, half] */
    int64_t flat[1] = {half};
    ang = ang < 0 ? -1 : blk_reshape(e, ang, 1, flat);
    for (int64_t j = 0; j < C; j++) buf[j] = j < half ? 1.0f : 0.0f;
    rlx_shape xs = blk_shape3(1, 1, C), ps = blk_shape1(1);
    int32_t pos1 = 1;
    int32_t in[3] = {e->h->emit_const(e->c, RLX_F32, &xs, buf), e->h->emit_const(e->c, RLX_I32, &ps, &pos1), ang};
    free(buf);
    if (in[0] < 0 || in[1] < 0 || in[2] < 0) return -1;
    int32_t s = e->h->emit_op(e->c, "rlx.rope", in, 3, pin, 2);
    int64_t row[2] = {1, C};
    s = s < 0 ? -1 : blk_reshape(e, s, 2, row);
    s = flux_linear(e, s, prefix, "linear_1.", D);
    return flux_linear(e, blk_op1(e, "rlx.silu", s), prefix, "linear_2.", D);
}

static int32_t text_embed(const blk_em *e, const char *prefix, int64_t D)
{
    int32_t p = blk_slot(e, "pooled_projections");
    int64_t row[2] = {1, -1};
    p = p < 0 ? -1 : blk_reshape(e, p, 2, row);
    p = flux_linear(e, p, prefix, "linear_1.", D);
    return flux_linear(e, blk_op1(e, "rlx.silu", p), prefix, "linear_2.", D);
}

static int positions(const blk_em *e, const flux_dims *fd)
{
    int32_t cat[2] = {blk_slot(e, "txt_ids"), blk_slot(e, "img_ids")};
    if (cat[0] < 0 || cat[1] < 0) return -1;
    int64_t A;
    if (blk_last_dim(e, cat[0], &A, NULL) < 0) return -1;
    if (A != fd->n_axes)
        return e->h->fail(e->c, "%s: txt_ids/img_ids have %lld columns, axes_dims_rope %d", e->who,
                          (long long)A, fd->n_axes), -1;
    /* ids in f32 whatever the compute dtype ("f32": 1): bf16 holds integers to 256 only */
    rlx_attr ax[] = {RLX_ATTR_I("axis", 0), RLX_ATTR_I("f32", 1)};
    int32_t ids = e->h->emit_op(e->c, "rlx.concat", cat, 2, ax, 2);
    for (int a = 0; a < fd->n_axes && ids >= 0; a++) {
        int64_t flat[1] = {-1};
        rlx_attr col[] = {RLX_ATTR_I("axis", 1), RLX_ATTR_I("start", a), RLX_ATTR_I("end", a + 1), ax[1]};
        int32_t p = e->h->emit_op(e->c, "rlx.slice", &ids, 1, col, 4);
        p = p < 0 ? -1 : blk_reshape(e, p, 1, flat);
        rlx_attr to[] = {RLX_ATTR_I("dtype", RLX_I32)};
        p = p < 0 ? -1 : e->h->emit_op(e->c, "rlx.cast", &p, 1, to, 1);
        char slot[32];
        snprintf(slot, sizeof slot, "flux.pos.%d", a);
        if (p < 0 || e->h->slot_set(e->c, slot, p) != 0) return -1;
    }
    return ids < 0 ? -1 : 0;
}

static int set(const blk_em *e, const char *slot, int32_t v)
{
    return v < 0 || e->h->slot_set(e->c, slot, v) != 0 ? -1 : 0;
}

static int embed(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "flux.embed"};
    flux_dims fd;
    if (flux_dims_read(&e, &fd)) return RLX_ERR_INVALID;
    int64_t D = fd.D, ch = fd.time_ch;
    const char *pre = fd.flux2 ? "time_guidance_embed." : "time_text_embed.";
    char name[BLK_NAME_MAX];
    if (blk_join(&e, name, pre, "timestep_embedder.") < 0) return RLX_ERR_INVALID;
    int32_t temb = time_embed(&e, "timestep", ch, name, D);
    if (fd.guidance) {
        if (blk_join(&e, name, pre, "guidance_embedder.") < 0) return RLX_ERR_INVALID;
        temb = blk_op2(&e, "rlx.add", temb, time_embed(&e, "guidance", ch, name, D));
    }
    if (fd.pooled > 0) {
        if (blk_join(&e, name, pre, "text_embedder.") < 0) return RLX_ERR_INVALID;
        temb = blk_op2(&e, "rlx.add", temb, text_embed(&e, name, D));
    }
    if (set(&e, "temb", temb)) return RLX_ERR_INVALID;
    if (set(&e, "hidden", flux_linear(&e, blk_slot(&e, "hidden_states"), "x_embedder.", "", D)) ||
        set(&e, "context", flux_linear(&e, blk_slot(&e, "encoder_hidden_states"), "context_embedder.", "", D)) ||
        positions(&e, &fd))
        return RLX_ERR_INVALID;
    if (fd.flux2 && (set(&e, "flux.mod.img", flux_mod_linear(&e, "double_stream_modulation_img.linear.", 6 * D)) ||
                     set(&e, "flux.mod.txt", flux_mod_linear(&e, "double_stream_modulation_txt.linear.", 6 * D)) ||
                     set(&e, "flux.mod.single", flux_mod_linear(&e, "single_stream_modulation.linear.", 3 * D))))
        return RLX_ERR_INVALID;
    return 0;
}

const rlx_block blk_flux_embed = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), "flux.embed",
    "FLUX.1/FLUX.2 inputs: x/context embedders, timestep (+ guidance, + pooled text) conditioning, rope ids",
    "none (reads the flow inputs hidden_states, encoder_hidden_states, timestep, img_ids, txt_ids, "
    "pooled_projections (FLUX.1), guidance (guidance_embeds); writes hidden, context, temb, flux.pos.{a}, flux.mod.*)",
    embed};
