/* The SAM prompt encoder (SamPromptEncoder) and the image-wide positional encoding:
 * points with labels (a padding point when there is no box), boxes (two corners), an
 * optional low-resolution mask; random-Fourier features of shared_image_embedding. */
#include "sam_blocks.h"
#include <stdlib.h>
#include <string.h>

#define PROMPT "prompt_encoder."
/* labels -10 .. 3 index the tables below (label + LABEL0) */
#define LABEL0 10
#define LABELS 14

/* pixel coords [n,2] -> [-1,1]: ((c + 0.5) / image) · 2 - 1 */
static int32_t normalize(const blk_em *e, int32_t xy, int64_t image)
{
    return sam_addc(e, sam_scale(e, sam_addc(e, xy, 0.5), 2.0 / (double)image), -1.0);
}

/* one [1,H] embedding row of the checkpoint */
static int32_t row(const blk_em *e, const char *name, int64_t H) { return blk_weight(e, PROMPT, name, 1, H, 0); }

/* _embed_points: points [P,N,2], labels [P,N] I32 (pad: one more, label -1) -> [P, N(+1), H]:
 * pe·keep[label] + add[label], keep 0 for -10 and -1, add = not_a_point (-1), point_embed.0
 * (0), point_embed.1 (1); other labels up to 3 keep the Fourier features */
static int32_t embed_points(const blk_em *e, const sam_dims *s, int32_t pts, int32_t lab, int64_t P, int64_t N,
                            int pad)
{
    int64_t H = s->p_hidden, n = N + (pad ? 1 : 0);
    if (pad) {
        int64_t zp[3] = {P, 1, 2};
        int32_t *neg = malloc((size_t)P * sizeof *neg);
        if (!neg) return e->h->fail(e->c, "%s: out of memory", e->who), -1;
        for (int64_t i = 0; i < P; i++) neg[i] = -1;
        rlx_shape ls = {2, {P, 1}};
        int32_t nl = e->h->emit_const(e->c, RLX_I32, &ls, neg);
        free(neg);
        pts = sam_cat(e, pts, sam_fill(e, 3, zp, -0.5f), 1); /* (0,0) after the half-pixel shift */
        lab = sam_cat(e, lab, nl, 1);
    }
    int64_t d2[2] = {P * n, 2}, dl[1] = {P * n}, d3[3] = {P, n, H};
    int32_t pe = sam_fourier(e, normalize(e, sam_rs(e, pts, 2, d2), s->p_image));
    /* label + 10 as an index: through f32, exact for small integers */
    rlx_attr tf[] = {RLX_ATTR_I("dtype", RLX_F32)}, ti[] = {RLX_ATTR_I("dtype", RLX_I32)};
    int32_t l = sam_rs(e, lab, 1, dl);
    if (l < 0) return -1;
    l = e->h->emit_op(e->c, "rlx.cast", &l, 1, tf, 1);
    l = sam_addc(e, l, LABEL0);
    if (l < 0) return -1;
    l = e->h->emit_op(e->c, "rlx.cast", &l, 1, ti, 1);
    float *keep = malloc((size_t)(LABELS * H) * sizeof *keep);
    if (!keep) return e->h->fail(e->c, "%s: out of memory", e->who), -1;
    for (int64_t i = 0; i < LABELS; i++)
        for (int64_t j = 0; j < H; j++) keep[i * H + j] = i == LABEL0 - 10 || i == LABEL0 - 1 ? 0.0f : 1.0f;
    rlx_shape ks = {2, {LABELS, H}};
    int32_t kt = e->h->emit_const(e->c, RLX_F32, &ks, keep);
    free(keep);
    int64_t z9[2] = {LABEL0 - 1, H}, z2[2] = {LABELS - LABEL0 - 2, H};
    int32_t add = sam_cat(e, sam_fill(e, 2, z9, 0.0f), row(e, "not_a_point_embed.weight", H), 0);
    add = sam_cat(e, sam_cat(e, add, row(e, "point_embed.0.weight", H), 0), row(e, "point_embed.1.weight", H), 0);
    add = sam_cat(e, add, sam_fill(e, 2, z2, 0.0f), 0);
    int32_t out = blk_op2(e, "rlx.mul", pe, blk_op2(e, "rlx.embedding", kt, l));
    out = blk_op2(e, "rlx.add", out, blk_op2(e, "rlx.embedding", add, l));
    return sam_rs(e, out, 3, d3);
}

/* _embed_boxes: boxes [P,4] -> corners [P,2,H] + point_embed.2 / point_embed.3 */
static int32_t embed_boxes(const blk_em *e, const sam_dims *s, int32_t box, int64_t P)
{
    int64_t H = s->p_hidden, d2[2] = {2 * P, 2}, d3[3] = {P, 2, H};
    int32_t pe = sam_rs(e, sam_fourier(e, normalize(e, sam_rs(e, box, 2, d2), s->p_image)), 3, d3);
    int32_t corner = sam_cat(e, row(e, "point_embed.2.weight", H), row(e, "point_embed.3.weight", H), 0);
    return blk_op2(e, "rlx.add", pe, corner);
}

/* SamMaskEmbedding: mask [1, 4e, 4e] -> dense [e·e, H] */
static int32_t embed_mask(const blk_em *e, const sam_dims *s, int32_t m)
{
    int64_t E = 4 * s->emb, c4 = s->mask_ch / 4, d2[2] = {E * E, 1};
    const char *act = sam_act_op(s->p_act);
    int32_t x = sam_patchify_conv(e, sam_rs(e, m, 2, d2), E, E, 1, 2, c4, PROMPT "mask_embed.conv1", 1);
    x = blk_op1(e, act, sam_ln(e, x, PROMPT, "mask_embed.layer_norm1", s->p_eps));
    x = sam_patchify_conv(e, x, E / 2, E / 2, c4, 2, s->mask_ch, PROMPT "mask_embed.conv2", 1);
    x = blk_op1(e, act, sam_ln(e, x, PROMPT, "mask_embed.layer_norm2", s->p_eps));
    return sam_patchify_conv(e, x, E / 4, E / 4, s->mask_ch, 1, s->p_hidden, PROMPT "mask_embed.conv3", 1);
}

/* get_image_wide_positional_embeddings: the e×e grid of cell centres -> [e·e, H] */
static int32_t image_pe(const blk_em *e, const sam_dims *s)
{
    int64_t n = s->emb;
    float *xy = malloc((size_t)(n * n * 2) * sizeof *xy);
    if (!xy) return e->h->fail(e->c, "%s: out of memory", e->who), -1;
    for (int64_t y = 0; y < n; y++)
        for (int64_t x = 0; x < n; x++) {
            xy[(y * n + x) * 2] = 2.0f * (((float)x + 0.5f) / (float)n) - 1.0f;
            xy[(y * n + x) * 2 + 1] = 2.0f * (((float)y + 0.5f) / (float)n) - 1.0f;
        }
    rlx_shape cs = {2, {n * n, 2}};
    int32_t c = e->h->emit_const(e->c, RLX_F32, &cs, xy);
    free(xy);
    return sam_fourier(e, c);
}

static int64_t dim0(const blk_em *e, int32_t v)
{
    rlx_shape s;
    int32_t dt;
    return v >= 0 && e->h->value_info(e->c, v, &s, &dt) == 0 && s.ndim ? s.dims[0] : -1;
}

static int prompt_emit(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "sam.prompt_encoder"};
    sam_dims s;
    int32_t pts = sam_slot_opt(&e, "input_points"), lab = sam_slot_opt(&e, "input_labels");
    int32_t box = sam_slot_opt(&e, "input_boxes"), mask = sam_slot_opt(&e, "input_masks");
    if (pts < 0 && box < 0 && mask < 0) {
        if (lab >= 0) return h->fail(c, "sam: input_labels without input_points");
        return 0; /* the image encoder alone */
    }
    if (sam_dims_get(&e, &s)) return RLX_ERR_INVALID;
    int64_t P = pts >= 0 ? dim0(&e, pts) : box >= 0 ? dim0(&e, box) : 1;
    if (pts >= 0 && box >= 0 && dim0(&e, box) != P)
        return h->fail(c, "sam: input_points has %lld prompt sets, input_boxes %lld", (long long)P,
                       (long long)dim0(&e, box));
    int32_t sparse = -1;
    if (pts >= 0) {
        rlx_shape ps;
        int32_t dt;
        if (h->value_info(c, pts, &ps, &dt) || ps.ndim != 3) return h->fail(c, "sam: input_points must be [P, N, 2]");
        if (lab < 0) { /* transformers' default: every point a foreground point */
            int32_t *ones = malloc((size_t)(P * ps.dims[1]) * sizeof *ones);
            if (!ones) return h->fail(c, "sam.prompt_encoder: out of memory");
            for (int64_t i = 0; i < P * ps.dims[1]; i++) ones[i] = 1;
            rlx_shape ls = {2, {P, ps.dims[1]}};
            lab = h->emit_const(c, RLX_I32, &ls, ones);
            free(ones);
        }
        sparse = embed_points(&e, &s, pts, lab, P, ps.dims[1], box < 0);
        if (sparse < 0) return RLX_ERR_INVALID;
    } else if (lab >= 0) {
        return h->fail(c, "sam: input_labels without input_points");
    }
    if (box >= 0) {
        int32_t b = embed_boxes(&e, &s, box, P);
        sparse = sparse < 0 ? b : sam_cat(&e, sparse, b, 1);
        if (sparse < 0) return RLX_ERR_INVALID;
    }
    int32_t dense = mask >= 0 ? embed_mask(&e, &s, mask) : sam_rs(&e, row(&e, "no_mask_embed.weight", s.p_hidden), 1,
                                                                  &s.p_hidden);
    int32_t pe = image_pe(&e, &s);
    if (dense < 0 || pe < 0) return RLX_ERR_INVALID;
    int rc = sparse >= 0 ? h->slot_set(c, "sam.sparse", sparse) : 0;
    if (!rc) rc = h->slot_set(c, "sam.dense", dense);
    if (!rc) rc = h->slot_set(c, "sam.image_pe", pe);
    return rc;
}

const rlx_block blk_sam_prompt_encoder = {
    RLX_STRUCT_SIZE(rlx_block, emit), "sam.prompt_encoder",
    "sam.sparse, sam.dense, sam.image_pe <- input_points/input_labels, input_boxes, input_masks (none given: nothing)",
    "(none)", prompt_emit};
