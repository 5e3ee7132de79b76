/* The SAM mask decoder (SamMaskDecoder), run once per prompt set: the two-way transformer
 * (token self-attention, token->image and image->token cross-attention), transposed-conv
 * upscaling (kernel = stride = 2 as matmul + pixel shuffle), hypernetwork MLPs, the IoU
 * head, and the multimask slice (build-time input multimask_output, default 1). */
#include "sam_blocks.h"
#include <stdio.h>
#include <string.h>

#define DEC "mask_decoder."

/* SamAttention: q [Tq,H], k/v [Tk,H] -> [Tq,H] through internal dims H/down */
static int32_t attn(const blk_em *e, const sam_dims *s, const char *prefix, int32_t q, int32_t k, int32_t v,
                    int64_t down)
{
    int64_t H = s->d_hidden, I = H / down, nh = s->d_heads;
    int64_t qd[3] = {-1, nh, I / nh}, od[2] = {-1, I};
    int32_t in[3] = {sam_rs(e, sam_linear(e, q, prefix, "q_proj", I, 1), 3, qd),
                     sam_rs(e, sam_linear(e, k, prefix, "k_proj", I, 1), 3, qd),
                     sam_rs(e, sam_linear(e, v, prefix, "v_proj", I, 1), 3, qd)};
    if (in[0] < 0 || in[1] < 0 || in[2] < 0) return -1;
    int32_t o = e->h->emit_op(e->c, "rlx.attention", in, 3, NULL, 0);
    return sam_linear(e, sam_rs(e, o, 2, od), prefix, "out_proj", H, 1);
}

/* SamFeedForward prefix: proj_in, relu, (layers.i, relu)…, proj_out */
static int32_t ffn(const blk_em *e, int32_t x, const char *prefix, int64_t hidden, int64_t out, int64_t depth)
{
    x = blk_op1(e, "rlx.relu", sam_linear(e, x, prefix, "proj_in", hidden, 1));
    for (int64_t i = 0; i < depth - 2; i++) {
        char name[32];
        snprintf(name, sizeof name, "layers.%lld", (long long)i);
        x = blk_op1(e, "rlx.relu", sam_linear(e, x, prefix, name, hidden, 1));
    }
    return sam_linear(e, x, prefix, "proj_out", out, 1);
}

static int32_t add(const blk_em *e, int32_t a, int32_t b) { return blk_op2(e, "rlx.add", a, b); }

/* ConvTranspose2d(k=2, s=2) on channel-last x [h·w, C] -> [(2h)·(2w), co]: one matmul with
 * the [C, co, 2, 2] weight as [co·4, C], then each row's 2×2 block moved to its pixels */
static int32_t up2(const blk_em *e, int32_t x, int64_t h, int64_t w, int64_t C, int64_t co, const char *name)
{
    char wn[BLK_NAME_MAX], bn[BLK_NAME_MAX];
    if (blk_join(e, wn, name, ".weight") < 0 || blk_join(e, bn, name, ".bias") < 0) return -1;
    rlx_shape ws = {4, {C, co, 2, 2}};
    int64_t w2[2] = {C, co * 4}, t2[2] = {1, 0};
    int32_t wt = sam_tp(e, sam_rs(e, e->h->emit_weight(e->c, wn, &ws), 2, w2), 2, t2);
    int32_t in[2] = {x, wt};
    if (x < 0 || wt < 0) return -1;
    int32_t y = e->h->emit_op(e->c, "rlx.matmul", in, 2, NULL, 0); /* [h·w, co·2·2] */
    int64_t d5[5] = {h, w, co, 2, 2}, p5[5] = {0, 3, 1, 4, 2}, d2[2] = {4 * h * w, co};
    y = sam_rs(e, sam_tp(e, sam_rs(e, y, 5, d5), 5, p5), 2, d2);
    return add(e, y, blk_weight(e, "", bn, co, -1, 0));
}

/* one prompt set: tokens [Nt,H], image src [e·e,H], pos [e·e,H] -> masks [k, 4e·4e], iou [1,k] */
static int predict(const blk_em *e, const sam_dims *s, int32_t tokens, int32_t src, int32_t pos, int multimask,
                   int32_t *masks, int32_t *iou)
{
    int32_t q = tokens, k = src;
    char p[96], a[128];
    for (int64_t i = 0; i < s->d_layers; i++) {
        snprintf(p, sizeof p, DEC "transformer.layers.%lld.", (long long)i);
        snprintf(a, sizeof a, "%sself_attn.", p);
        if (i == 0) q = attn(e, s, a, q, q, q, 1); /* skip_first_layer_pe: no residual either */
        else {
            int32_t qq = add(e, q, tokens);
            q = add(e, q, attn(e, s, a, qq, qq, q, 1));
        }
        q = sam_ln(e, q, p, "layer_norm1", s->d_eps);
        snprintf(a, sizeof a, "%scross_attn_token_to_image.", p);
        q = sam_ln(e, add(e, q, attn(e, s, a, add(e, q, tokens), add(e, k, pos), k, s->d_down)), p, "layer_norm2",
                   s->d_eps);
        snprintf(a, sizeof a, "%smlp.", p);
        int32_t m = sam_linear(e, blk_op1(e, sam_act_op(s->d_act), sam_linear(e, q, a, "lin1", s->d_mlp, 1)), a,
                               "lin2", s->d_hidden, 1);
        q = sam_ln(e, add(e, q, m), p, "layer_norm3", s->d_eps);
        snprintf(a, sizeof a, "%scross_attn_image_to_token.", p);
        k = sam_ln(e, add(e, k, attn(e, s, a, add(e, k, pos), add(e, q, tokens), q, s->d_down)), p, "layer_norm4",
                   s->d_eps);
    }
    /* the final token->image attention; nn.LayerNorm's default eps here */
    q = add(e, q, attn(e, s, DEC "transformer.final_attn_token_to_image.", add(e, q, tokens), add(e, k, pos), k,
                       s->d_down));
    q = sam_ln(e, q, DEC "transformer.", "layer_norm_final_attn", 1e-5);
    int64_t nm = s->n_multimask + 1, H = s->d_hidden, E = s->emb;
    int32_t up = up2(e, k, E, E, H, H / 4, DEC "upscale_conv1");
    up = blk_op1(e, "rlx.gelu", sam_ln(e, up, DEC, "upscale_layer_norm", 1e-6));
    up = blk_op1(e, "rlx.gelu", up2(e, up, 2 * E, 2 * E, H / 4, H / 8, DEC "upscale_conv2"));
    int32_t hyper = -1;
    for (int64_t i = 0; i < nm; i++) {
        snprintf(p, sizeof p, DEC "output_hypernetworks_mlps.%lld.", (long long)i);
        int32_t t = ffn(e, sam_slice(e, q, 0, 1 + i, 2 + i), p, H, H / 8, 3);
        hyper = i ? sam_cat(e, hyper, t, 0) : t;
    }
    int32_t mm[2] = {hyper, up};
    if (hyper < 0 || up < 0) return RLX_ERR_INVALID;
    int32_t all = e->h->emit_op(e->c, "rlx.matmul", mm, 2, NULL, 0); /* [nm, 4e·4e] */
    int32_t scores = ffn(e, sam_slice(e, q, 0, 0, 1), DEC "iou_prediction_head.", s->iou_hidden, nm, s->iou_depth);
    *masks = multimask ? sam_slice(e, all, 0, 1, nm) : sam_slice(e, all, 0, 0, 1);
    *iou = multimask ? sam_slice(e, scores, 1, 1, nm) : sam_slice(e, scores, 1, 0, 1);
    return *masks < 0 || *iou < 0 ? RLX_ERR_INVALID : 0;
}

static int decoder_emit(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "sam.mask_decoder"};
    sam_dims s;
    int32_t dense = sam_slot_opt(&e, "sam.dense"), sparse = sam_slot_opt(&e, "sam.sparse");
    int32_t pos = sam_slot_opt(&e, "sam.image_pe"), img = sam_slot_opt(&e, "image_embeddings");
    if (dense < 0) return 0; /* no prompt: the image encoder alone */
    if (img < 0) return h->fail(c, "sam: a prompt needs pixel_values or image_embeddings");
    if (sam_dims_get(&e, &s)) return RLX_ERR_INVALID;
    double mm = 1;
    if (h->config_number(c, "input:multimask_output", &mm) == 0 && mm != 0 && mm != 1)
        return h->fail(c, "sam: multimask_output must be 0 or 1, got %g", mm);
    rlx_shape is;
    int32_t dt;
    int64_t H = s.d_hidden, E = s.emb;
    if (h->value_info(c, img, &is, &dt) || is.ndim != 3 || is.dims[0] != H || is.dims[1] != E || is.dims[2] != E)
        return h->fail(c, "sam: image_embeddings must be [%lld, %lld, %lld]", (long long)H, (long long)E, (long long)E);
    int64_t t2[2] = {1, 0}, cn[2] = {H, E * E};
    int32_t src = add(&e, sam_tp(&e, sam_rs(&e, img, 2, cn), 2, t2), dense);
    int32_t out_tok = sam_cat(&e, blk_weight(&e, DEC, "iou_token.weight", 1, H, 0),
                              blk_weight(&e, DEC, "mask_tokens.weight", s.n_multimask + 1, H, 0), 0);
    rlx_shape ss = {0, {0}};
    int64_t P = 1, n = 0;
    if (sparse >= 0 && !h->value_info(c, sparse, &ss, &dt) && ss.ndim == 3) P = ss.dims[0], n = ss.dims[1];
    int32_t masks = -1, iou = -1;
    for (int64_t i = 0; i < P; i++) {
        int32_t tok = out_tok, m, u;
        if (n) {
            int64_t d2[2] = {n, H};
            tok = sam_cat(&e, tok, sam_rs(&e, sam_slice(&e, sparse, 0, i, i + 1), 2, d2), 0);
        }
        if (predict(&e, &s, tok, src, pos, mm != 0, &m, &u)) return RLX_ERR_INVALID;
        masks = i ? sam_cat(&e, masks, m, 0) : m;
        iou = i ? sam_cat(&e, iou, u, 0) : u;
    }
    int64_t k = mm != 0 ? s.n_multimask : 1, md[4] = {P, k, 4 * E, 4 * E}, id[2] = {P, k};
    masks = sam_rs(&e, masks, 4, md);
    iou = sam_rs(&e, iou, 2, id);
    if (masks < 0 || iou < 0 || h->emit_output(c, "pred_masks", masks) || h->emit_output(c, "iou_scores", iou))
        return RLX_ERR_INVALID;
    return 0;
}

const rlx_block blk_sam_mask_decoder = {
    RLX_STRUCT_SIZE(rlx_block, emit), "sam.mask_decoder",
    "pred_masks [P,k,4e,4e], iou_scores [P,k] <- two-way transformer over each prompt set of sam.sparse",
    "(none; multimask_output is the build-time input of that name)", decoder_emit};
