/* Emitters of the AutoencoderKL decoder: convs, group norms, ResNet blocks, attention. */
#include "vae_blocks.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

int vae_cfg_of(const blk_em *e, vae_cfg *v)
{
    const rlx_config *src = e->h->ctx_config ? e->h->ctx_config(e->c) : NULL;
    rlx_diag d = {(uint32_t)sizeof d, 0, {0}};
    if (!src) return e->h->fail(e->c, "%s: needs the model's config.json", e->who);
    if (vae_cfg_read(e->h, src, v, &d)) return e->h->fail(e->c, "%s: %s", e->who, d.msg);
    return 0;
}

/* prefix + "weight" / "bias" */
static int names(const blk_em *e, const char *prefix, char *w, char *b)
{
    return blk_join(e, w, prefix, "weight") < 0 || blk_join(e, b, prefix, "bias") < 0 ? -1 : 0;
}

int32_t vae_conv(const blk_em *e, int32_t x, const char *prefix, int64_t cin, int64_t cout, int64_t k)
{
    char wn[BLK_NAME_MAX], bn[BLK_NAME_MAX];
    if (x < 0 || names(e, prefix, wn, bn)) return -1;
    rlx_shape ws = {4, {cout, cin, k, k}}, bs = blk_shape1(cout);
    int32_t in[3] = {x, e->h->emit_weight(e->c, wn, &ws), e->h->emit_weight(e->c, bn, &bs)};
    if (in[1] < 0 || in[2] < 0) return -1;
    rlx_attr at[] = {RLX_ATTR_I("padding", k / 2)};
    return e->h->emit_op(e->c, "rlx.conv2d", in, 3, at, 1);
}

int32_t vae_group_norm(const blk_em *e, int32_t x, const char *prefix, int64_t c, int64_t groups)
{
    char wn[BLK_NAME_MAX], bn[BLK_NAME_MAX];
    if (x < 0 || names(e, prefix, wn, bn)) return -1;
    rlx_shape s = blk_shape1(c);
    int32_t in[3] = {x, e->h->emit_weight(e->c, wn, &s), e->h->emit_weight(e->c, bn, &s)};
    if (in[1] < 0 || in[2] < 0) return -1;
    rlx_attr at[] = {RLX_ATTR_I("groups", groups), RLX_ATTR_F("eps", VAE_EPS)};
    return e->h->emit_op(e->c, "rlx.group_norm", in, 3, at, 2);
}

/* prefix + part into out (BLK_NAME_MAX) */
static const char *sub(const blk_em *e, char *out, const char *prefix, const char *part)
{
    return blk_join(e, out, prefix, part) < 0 ? NULL : out;
}

int32_t vae_resnet(const blk_em *e, int32_t x, const char *prefix, int64_t cin, int64_t cout, int64_t groups)
{
    char n[BLK_NAME_MAX];
    int32_t h = x;
    if (!sub(e, n, prefix, "norm1.")) return -1;
    h = blk_op1(e, "rlx.silu", vae_group_norm(e, h, n, cin, groups));
    if (!sub(e, n, prefix, "conv1.")) return -1;
    h = vae_conv(e, h, n, cin, cout, 3);
    if (!sub(e, n, prefix, "norm2.")) return -1;
    h = blk_op1(e, "rlx.silu", vae_group_norm(e, h, n, cout, groups));
    if (!sub(e, n, prefix, "conv2.")) return -1;
    h = vae_conv(e, h, n, cout, cout, 3);
    if (cin != cout) {
        if (!sub(e, n, prefix, "conv_shortcut.")) return -1;
        x = vae_conv(e, x, n, cin, cout, 1);
    }
    return blk_op2(e, "rlx.add", x, h);
}

/* a linear layer prefix+part{weight,bias} of c -> c features */
static int32_t lin(const blk_em *e, int32_t x, const char *prefix, const char *part, int64_t c)
{
    char p[BLK_NAME_MAX], wn[BLK_NAME_MAX], bn[BLK_NAME_MAX];
    if (!sub(e, p, prefix, part) || names(e, p, wn, bn)) return -1;
    return blk_linear(e, x, wn, bn, c, 0);
}

int32_t vae_attention(const blk_em *e, int32_t x, const char *prefix, int64_t c, int64_t groups)
{
    rlx_shape s;
    int32_t dt;
    char n[BLK_NAME_MAX];
    if (x < 0 || e->h->value_info(e->c, x, &s, &dt) != 0 || s.ndim != 3)
        return e->h->fail(e->c, "%s: the attention input is not [C, H, W]", e->who), -1;
    int64_t hw = s.dims[1] * s.dims[2];
    if (!sub(e, n, prefix, "group_norm.")) return -1;
    int64_t flat[2] = {c, hw}, tok[3] = {hw, 1, c}, rows[2] = {hw, c}, img[3] = {c, s.dims[1], s.dims[2]};
    int64_t t01[2] = {1, 0};
    rlx_attr tr[] = {RLX_ATTR_V("perm", t01, 2)};
    int32_t h = vae_group_norm(e, x, n, c, groups);
    h = h < 0 ? -1 : blk_reshape(e, h, 2, flat);
    h = h < 0 ? -1 : e->h->emit_op(e->c, "rlx.transpose", &h, 1, tr, 1); /* [HW, C] tokens */
    int32_t q = lin(e, h, prefix, "to_q.", c), k = lin(e, h, prefix, "to_k.", c), v = lin(e, h, prefix, "to_v.", c);
    if (q < 0 || k < 0 || v < 0) return -1;
    int32_t qkv[3] = {blk_reshape(e, q, 3, tok), blk_reshape(e, k, 3, tok), blk_reshape(e, v, 3, tok)};
    if (qkv[0] < 0 || qkv[1] < 0 || qkv[2] < 0) return -1;
    rlx_attr at[] = {RLX_ATTR_F("scale", 1.0 / sqrt((double)c))}; /* one head of c dims */
    int32_t o = e->h->emit_op(e->c, "rlx.attention", qkv, 3, at, 1);
    o = o < 0 ? -1 : blk_reshape(e, o, 2, rows);
    o = lin(e, o, prefix, "to_out.0.", c);
    o = o < 0 ? -1 : e->h->emit_op(e->c, "rlx.transpose", &o, 1, tr, 1);
    o = o < 0 ? -1 : blk_reshape(e, o, 3, img);
    return blk_op2(e, "rlx.add", x, o);
}
