/* Emitters shared by the SAM blocks: config dims, layout ops, linear / LayerNorm over
 * checkpoint names, kernel = stride convolutions as patchify + matmul, Fourier features. */
#include "sam_blocks.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

int sam_dims_get(const blk_em *e, sam_dims *s)
{
    const rlx_config *src = e->h->ctx_config ? e->h->ctx_config(e->c) : NULL;
    if (!src) return e->h->fail(e->c, "%s: needs the model's config.json (a flow built in code has none)", e->who);
    rlx_diag d = {(uint32_t)sizeof d, 0, {0}};
    if (sam_dims_read(src, e->h, s, &d)) return e->h->fail(e->c, "%s: %s", e->who, d.msg);
    return 0;
}

int32_t sam_slot_opt(const blk_em *e, const char *name) { return e->h->slot_get(e->c, name); }

int32_t sam_tp(const blk_em *e, int32_t x, uint32_t n, const int64_t *perm)
{
    if (x < 0) return -1;
    rlx_attr at[] = {RLX_ATTR_V("perm", perm, n)};
    return e->h->emit_op(e->c, "rlx.transpose", &x, 1, at, 1);
}

int32_t sam_rs(const blk_em *e, int32_t x, uint32_t n, const int64_t *dims)
{
    return x < 0 ? -1 : blk_reshape(e, x, n, dims);
}

int32_t sam_slice(const blk_em *e, int32_t x, int64_t axis, int64_t a, int64_t b)
{
    if (x < 0) return -1;
    rlx_attr at[] = {RLX_ATTR_I("axis", axis), RLX_ATTR_I("start", a), RLX_ATTR_I("end", b)};
    return e->h->emit_op(e->c, "rlx.slice", &x, 1, at, 3);
}

int32_t sam_cat(const blk_em *e, int32_t a, int32_t b, int64_t axis)
{
    if (a < 0 || b < 0) return -1;
    int32_t in[2] = {a, b};
    rlx_attr at[] = {RLX_ATTR_I("axis", axis)};
    return e->h->emit_op(e->c, "rlx.concat", in, 2, at, 1);
}

int32_t sam_scale(const blk_em *e, int32_t x, double s)
{
    if (x < 0) return -1;
    rlx_attr at[] = {RLX_ATTR_F("scale", s)};
    return e->h->emit_op(e->c, "rlx.scale", &x, 1, at, 1);
}

int32_t sam_addc(const blk_em *e, int32_t x, double v)
{
    if (x < 0) return -1;
    rlx_attr at[] = {RLX_ATTR_F("value", v)};
    return e->h->emit_op(e->c, "rlx.add_scalar", &x, 1, at, 1);
}

int32_t sam_fill(const blk_em *e, uint32_t n, const int64_t *dims, float v)
{
    rlx_shape s = {n, {0}};
    int64_t numel = 1;
    for (uint32_t i = 0; i < n; i++) numel *= s.dims[i] = dims[i];
    float *buf = malloc((size_t)(numel > 0 ? numel : 1) * sizeof *buf);
    if (!buf) return e->h->fail(e->c, "%s: out of memory", e->who), -1;
    for (int64_t i = 0; i < numel; i++) buf[i] = v;
    int32_t c = e->h->emit_const(e->c, RLX_F32, &s, buf);
    free(buf);
    return c;
}

int32_t sam_linear(const blk_em *e, int32_t x, const char *prefix, const char *name, int64_t out, int bias)
{
    char w[BLK_NAME_MAX], b[BLK_NAME_MAX], base[BLK_NAME_MAX];
    if (x < 0 || blk_join(e, base, prefix, name) < 0 || blk_join(e, w, base, ".weight") < 0 ||
        blk_join(e, b, base, ".bias") < 0)
        return -1;
    return blk_linear(e, x, w, bias ? b : NULL, out, 0);
}

int32_t sam_ln(const blk_em *e, int32_t x, const char *prefix, const char *name, double eps)
{
    char w[BLK_NAME_MAX], b[BLK_NAME_MAX], base[BLK_NAME_MAX];
    if (x < 0 || blk_join(e, base, prefix, name) < 0 || blk_join(e, w, base, ".weight") < 0 ||
        blk_join(e, b, base, ".bias") < 0)
        return -1;
    return blk_layer_norm(e, x, w, b, eps);
}

int32_t sam_patchify_conv(const blk_em *e, int32_t x, int64_t H, int64_t W, int64_t C, int64_t k, int64_t co,
                          const char *prefix, int bias)
{
    char wn[BLK_NAME_MAX], bn[BLK_NAME_MAX];
    if (x < 0 || blk_join(e, wn, prefix, ".weight") < 0 || blk_join(e, bn, prefix, ".bias") < 0) return -1;
    if (H % k || W % k) return e->h->fail(e->c, "%s: %s: %lldx%lld is not a multiple of the stride %lld", e->who, wn,
                                          (long long)H, (long long)W, (long long)k), -1;
    /* [H,W,C] -> [H/k, k, W/k, k, C] -> [H/k, W/k, C, k, k]: rows in the weight's (c, kh, kw) order */
    int64_t d5[5] = {H / k, k, W / k, k, C}, p5[5] = {0, 2, 4, 1, 3}, d2[2] = {(H / k) * (W / k), C * k * k};
    int32_t p = sam_rs(e, sam_tp(e, sam_rs(e, x, 5, d5), 5, p5), 2, d2);
    rlx_shape ws = {4, {co, C, k, k}};
    int32_t w = e->h->emit_weight(e->c, wn, &ws);
    int64_t wd[2] = {co, C * k * k};
    int32_t in[3] = {p, sam_rs(e, w, 2, wd), -1};
    uint32_t n = 2;
    if (bias) {
        in[2] = blk_weight(e, "", bn, co, -1, 0);
        n = 3;
    }
    if (in[0] < 0 || in[1] < 0 || (bias && in[2] < 0)) return -1;
    return e->h->emit_op(e->c, "rlx.matmul", in, n, NULL, 0);
}

int32_t sam_fourier(const blk_em *e, int32_t coords)
{
    rlx_shape s;
    int32_t dt;
    const char *name = "shared_image_embedding.positional_embedding";
    int32_t pe = e->h->emit_weight(e->c, name, NULL);
    if (coords < 0 || pe < 0) return -1;
    if (e->h->value_info(e->c, pe, &s, &dt) || s.ndim != 2 || s.dims[0] != 2)
        return e->h->fail(e->c, "%s: tensor '%s' is not a [2, F] matrix", e->who, name), -1;
    int32_t a = sam_scale(e, blk_op2(e, "rlx.matmul_nn", coords, pe), 2.0 * 3.14159265358979323846);
    return sam_cat(e, blk_op1(e, "rlx.sin", a), blk_op1(e, "rlx.cos", a), 1);
}
