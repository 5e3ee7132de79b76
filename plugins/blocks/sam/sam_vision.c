/* The SAM vision encoder (SamVisionEncoder): patch embedding + absolute positions, ViT
 * layers with windowed (or global) attention and decomposed relative positions, and the
 * neck. Each block does nothing when the pass has no pixel_values (image_embeddings given). */
#include "sam_blocks.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VISION "vision_encoder."

/* pixel_values [C,S,S] -> sam.vision [g·g, Cv] (+ pos_embed) */
static int patch_embed_emit(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "sam.patch_embed"};
    sam_dims s;
    int32_t px = sam_slot_opt(&e, "pixel_values");
    if (px < 0) return 0;
    if (sam_slot_opt(&e, "image_embeddings") >= 0)
        return h->fail(c, "sam: give pixel_values or image_embeddings, not both");
    if (sam_dims_get(&e, &s)) return RLX_ERR_INVALID;
    int64_t g = s.image / s.patch, d5[5] = {s.channels, g, s.patch, g, s.patch}, p5[5] = {1, 3, 0, 2, 4};
    int64_t d2[2] = {g * g, s.channels * s.patch * s.patch};
    /* channel-first image -> patches in the weight's (c, kh, kw) order */
    int32_t p = sam_rs(&e, sam_tp(&e, sam_rs(&e, px, 5, d5), 5, p5), 2, d2);
    rlx_shape ws = {4, {s.v_hidden, s.channels, s.patch, s.patch}};
    int32_t w = h->emit_weight(c, VISION "patch_embed.projection.weight", &ws);
    int64_t wd[2] = {s.v_hidden, d2[1]};
    int32_t in[3] = {p, sam_rs(&e, w, 2, wd), blk_weight(&e, VISION, "patch_embed.projection.bias", s.v_hidden, -1, 0)};
    if (in[0] < 0 || in[1] < 0 || in[2] < 0) return RLX_ERR_INVALID;
    int32_t x = h->emit_op(c, "rlx.matmul", in, 3, NULL, 0);
    if (s.abs_pos) {
        rlx_shape ps = {4, {1, g, g, s.v_hidden}};
        int64_t pd[2] = {g * g, s.v_hidden};
        x = blk_op2(&e, "rlx.add", x, sam_rs(&e, h->emit_weight(c, VISION "pos_embed", &ps), 2, pd));
    }
    return x < 0 ? RLX_ERR_INVALID : h->slot_set(c, "sam.vision", x);
}

/* Relative-position table of one axis for a window of n: rel_pos[q - k + n - 1] as [n, n, hd] */
static int32_t rel_table(const blk_em *e, const char *prefix, const char *name, int64_t n, int64_t hd)
{
    char wn[BLK_NAME_MAX];
    if (blk_join(e, wn, prefix, name) < 0) return -1;
    int32_t t = blk_weight(e, "", wn, 2 * n - 1, hd, 0);
    int32_t *idx = malloc((size_t)(n * n) * sizeof *idx);
    if (!idx) return e->h->fail(e->c, "%s: out of memory", e->who), -1;
    for (int64_t q = 0; q < n; q++)
        for (int64_t k = 0; k < n; k++) idx[q * n + k] = (int32_t)(q - k + n - 1);
    rlx_shape is = {1, {n * n}};
    int32_t ids = e->h->emit_const(e->c, RLX_I32, &is, idx);
    free(idx);
    int64_t d3[3] = {n, n, hd};
    return sam_rs(e, blk_op2(e, "rlx.embedding", t, ids), 3, d3);
}

/* einsum("bhwc,hkc->bhwk") of q [BH, wh, ww, hd] along axis 1 (h) or 2 (w) -> [BH·wh·ww, n] */
static int32_t rel_scores(const blk_em *e, int32_t q, int32_t table, int64_t BH, int64_t wh, int64_t ww, int64_t hd,
                          int axis)
{
    int64_t n = axis == 1 ? wh : ww, other = axis == 1 ? ww : wh;
    int64_t p_in[4] = {1, 0, 2, 3}, p_in_w[4] = {2, 0, 1, 3};
    int64_t d3[3] = {n, BH * other, hd}, d4[4] = {n, BH, other, n};
    int64_t p_out[4] = {1, 0, 2, 3}, p_out_w[4] = {1, 2, 0, 3}, d2[2] = {BH * wh * ww, n};
    int32_t r = sam_rs(e, sam_tp(e, q, 4, axis == 1 ? p_in : p_in_w), 3, d3);
    int32_t in[2] = {r, table};
    if (r < 0 || table < 0) return -1;
    int32_t s = e->h->emit_op(e->c, "rlx.bmm", in, 2, NULL, 0);
    return sam_rs(e, sam_tp(e, sam_rs(e, s, 4, d4), 4, axis == 1 ? p_out : p_out_w), 2, d2);
}

/* [rel_h, rel_w] [R, wh+ww] -> bias [R, wh·ww] with bias[a·ww+b] = rel_h[a] + rel_w[b]: one
 * matmul with a 0/1 matrix, exact (each output sums two products by 1) */
static int32_t expand_rel(const blk_em *e, int32_t rel, int64_t wh, int64_t ww)
{
    int64_t rows = wh + ww, cols = wh * ww;
    float *m = calloc((size_t)(rows * cols), sizeof *m);
    if (!m) return e->h->fail(e->c, "%s: out of memory", e->who), -1;
    for (int64_t a = 0; a < wh; a++)
        for (int64_t b = 0; b < ww; b++) {
            m[a * cols + a * ww + b] = 1.0f;
            m[(wh + b) * cols + a * ww + b] = 1.0f;
        }
    rlx_shape ms = {2, {rows, cols}};
    int32_t mc = e->h->emit_const(e->c, RLX_F32, &ms, m);
    free(m);
    return blk_op2(e, "rlx.matmul_nn", rel, mc);
}

/* SamVisionAttention on windows x [nw·wh·ww, C] -> same shape */
static int32_t vision_attention(const blk_em *e, const sam_dims *s, const char *prefix, int32_t x, int64_t nw,
                                int64_t wh, int64_t ww)
{
    int64_t C = s->v_hidden, nh = s->v_heads, hd = C / nh, T = wh * ww, BH = nw * nh;
    int32_t qkv = sam_linear(e, x, prefix, "qkv", 3 * C, s->qkv_bias);
    int64_t d5[5] = {nw, T, 3, nh, hd}, p5[5] = {2, 0, 3, 1, 4}, d2[2] = {3, BH * T * hd}, d3[3] = {BH, T, hd};
    int32_t all = sam_rs(e, sam_tp(e, sam_rs(e, qkv, 5, d5), 5, p5), 2, d2);
    int32_t q = sam_rs(e, sam_slice(e, all, 0, 0, 1), 3, d3);
    int32_t k = sam_rs(e, sam_slice(e, all, 0, 1, 2), 3, d3);
    int32_t v = sam_rs(e, sam_slice(e, all, 0, 2, 3), 3, d3);
    int32_t in[2] = {sam_scale(e, q, 1.0 / sqrt((double)hd)), k};
    if (in[0] < 0 || k < 0 || v < 0) return -1;
    int32_t sc = e->h->emit_op(e->c, "rlx.bmm", in, 2, NULL, 0); /* [BH, T, T] */
    int64_t flat[2] = {BH * T, T};
    sc = sam_rs(e, sc, 2, flat);
    if (s->rel_pos) {
        int64_t d4[4] = {BH, wh, ww, hd};
        int32_t q4 = sam_rs(e, q, 4, d4);
        int32_t rh = rel_scores(e, q4, rel_table(e, prefix, "rel_pos_h", wh, hd), BH, wh, ww, hd, 1);
        int32_t rw = rel_scores(e, q4, rel_table(e, prefix, "rel_pos_w", ww, hd), BH, wh, ww, hd, 2);
        sc = blk_op2(e, "rlx.add", sc, expand_rel(e, sam_cat(e, rh, rw, 1), wh, ww));
    }
    int64_t dp[3] = {BH, T, T};
    int32_t p = sam_rs(e, blk_op1(e, "rlx.softmax", sc), 3, dp);
    rlx_attr tb[] = {RLX_ATTR_I("trans_b", 0)};
    int32_t pv[2] = {p, v};
    if (p < 0) return -1;
    int32_t o = e->h->emit_op(e->c, "rlx.bmm", pv, 2, tb, 1); /* [BH, T, hd] */
    int64_t o4[4] = {nw, nh, T, hd}, op[4] = {0, 2, 1, 3}, o2[2] = {nw * T, C};
    o = sam_rs(e, sam_tp(e, sam_rs(e, o, 4, o4), 4, op), 2, o2);
    return sam_linear(e, o, prefix, "proj", C, 1);
}

/* [g·g, C] -> windows [nH·nW·ws·ws, C] (zero-padded to a multiple of ws) and back */
static int32_t partition(const blk_em *e, int32_t x, int64_t g, int64_t C, int64_t ws, int64_t gp)
{
    int64_t d3[3] = {g, g, C};
    x = sam_rs(e, x, 3, d3);
    if (gp > g) {
        int64_t zr[3] = {gp - g, g, C}, zc[3] = {gp, gp - g, C};
        x = sam_cat(e, sam_cat(e, x, sam_fill(e, 3, zr, 0.0f), 0), sam_fill(e, 3, zc, 0.0f), 1);
    }
    int64_t n = gp / ws, d5[5] = {n, ws, n, ws, C}, p5[5] = {0, 2, 1, 3, 4}, d2[2] = {gp * gp, C};
    return sam_rs(e, sam_tp(e, sam_rs(e, x, 5, d5), 5, p5), 2, d2);
}

static int32_t unpartition(const blk_em *e, int32_t x, int64_t g, int64_t C, int64_t ws, int64_t gp)
{
    int64_t n = gp / ws, d5[5] = {n, n, ws, ws, C}, p5[5] = {0, 2, 1, 3, 4}, d3[3] = {gp, gp, C}, d2[2] = {g * g, C};
    x = sam_rs(e, sam_tp(e, sam_rs(e, x, 5, d5), 5, p5), 3, d3);
    if (gp > g) x = sam_slice(e, sam_slice(e, x, 0, 0, g), 1, 0, g);
    return sam_rs(e, x, 2, d2);
}

/* SamVisionLayer "layer" of sam.vision: x + attn(ln1(x)), then h + mlp(ln2(h)) */
static int vision_layer_emit(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "sam.vision_layer"};
    sam_dims s;
    int32_t x = sam_slot_opt(&e, "sam.vision");
    if (x < 0) return 0;
    if (sam_dims_get(&e, &s)) return RLX_ERR_INVALID;
    int64_t i = h->param_int(c, "layer", -1);
    if (i < 0 || i >= s.v_layers) return h->fail(c, "sam.vision_layer: parameter layer %lld is outside [0, %lld)",
                                                 (long long)i, (long long)s.v_layers);
    char prefix[96], attn[112];
    snprintf(prefix, sizeof prefix, VISION "layers.%lld.", (long long)i);
    snprintf(attn, sizeof attn, "%sattn.", prefix);
    int64_t g = s.image / s.patch, C = s.v_hidden, ws = s.global[i] || s.window == 0 ? 0 : s.window;
    int32_t y = sam_ln(&e, x, prefix, "layer_norm1", s.v_eps);
    if (ws) {
        int64_t gp = (g + ws - 1) / ws * ws;
        y = partition(&e, y, g, C, ws, gp);
        y = unpartition(&e, vision_attention(&e, &s, attn, y, (gp / ws) * (gp / ws), ws, ws), g, C, ws, gp);
    } else {
        y = vision_attention(&e, &s, attn, y, 1, g, g);
    }
    x = blk_op2(&e, "rlx.add", x, y);
    y = sam_ln(&e, x, prefix, "layer_norm2", s.v_eps);
    char mlp[128];
    snprintf(mlp, sizeof mlp, "%smlp.", prefix);
    y = sam_linear(&e, blk_op1(&e, sam_act_op(s.v_act), sam_linear(&e, y, mlp, "lin1", s.v_mlp, 1)), mlp, "lin2", C, 1);
    x = blk_op2(&e, "rlx.add", x, y);
    return x < 0 ? RLX_ERR_INVALID : h->slot_set(c, "sam.vision", x);
}

/* neck: 1×1 conv, LayerNorm2d, 3×3 conv (rlx.conv2d), LayerNorm2d -> image_embeddings [Co,g,g] */
static int neck_emit(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "sam.neck"};
    sam_dims s;
    int32_t x = sam_slot_opt(&e, "sam.vision");
    if (x < 0) return 0;
    if (sam_dims_get(&e, &s)) return RLX_ERR_INVALID;
    int64_t g = s.image / s.patch, C = s.v_out;
    rlx_shape w1s = {4, {C, s.v_hidden, 1, 1}}, w2s = {4, {C, C, 3, 3}};
    int64_t w1d[2] = {C, s.v_hidden}, t2[2] = {1, 0}, chw[3] = {C, g, g}, cn[2] = {C, g * g};
    int32_t w1 = sam_rs(&e, h->emit_weight(c, VISION "neck.conv1.weight", &w1s), 2, w1d);
    int32_t in[2] = {x, w1};
    if (w1 < 0) return RLX_ERR_INVALID;
    x = sam_ln(&e, h->emit_op(c, "rlx.matmul", in, 2, NULL, 0), VISION, "neck.layer_norm1", 1e-6);
    int32_t cv[2] = {sam_rs(&e, sam_tp(&e, x, 2, t2), 3, chw), h->emit_weight(c, VISION "neck.conv2.weight", &w2s)};
    if (cv[0] < 0 || cv[1] < 0) return RLX_ERR_INVALID;
    rlx_attr at[] = {RLX_ATTR_I("stride", 1), RLX_ATTR_I("padding", 1), RLX_ATTR_I("dilation", 1),
                     RLX_ATTR_I("groups", 1)};
    x = h->emit_op(c, "rlx.conv2d", cv, 2, at, 4);
    x = sam_ln(&e, sam_tp(&e, sam_rs(&e, x, 2, cn), 2, t2), VISION, "neck.layer_norm2", 1e-6);
    x = sam_rs(&e, sam_tp(&e, x, 2, t2), 3, chw);
    if (x < 0 || h->emit_output(c, "image_embeddings", x)) return RLX_ERR_INVALID;
    return h->slot_set(c, "image_embeddings", x);
}

const rlx_block blk_sam_patch_embed = {RLX_STRUCT_SIZE(rlx_block, emit), "sam.patch_embed",
                                       "sam.vision <- patch conv of pixel_values + pos_embed (nothing without pixel_values)",
                                       "(none)", patch_embed_emit};
const rlx_block blk_sam_vision_layer = {RLX_STRUCT_SIZE(rlx_block, emit), "sam.vision_layer",
                                        "sam.vision <- ViT layer: windowed or global attention with relative positions, MLP",
                                        "layer: int (index; global_attn_indexes picks global attention)",
                                        vision_layer_emit};
const rlx_block blk_sam_neck = {RLX_STRUCT_SIZE(rlx_block, emit), "sam.neck",
                                "image_embeddings <- neck(sam.vision): 1x1 conv, LayerNorm2d, 3x3 conv, LayerNorm2d",
                                "(none)", neck_emit};
