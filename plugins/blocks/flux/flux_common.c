/* Emitters shared by the FLUX blocks: config dims, modulation, q/k heads with the FLUX
 * rope, joint attention. */
#include "flux_blocks.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* an integer key of the stage's config.json, def when absent; fails naming it */
static int cfg_int(const blk_em *e, const rlx_config *src, const char *key, int64_t def, int64_t *out)
{
    rlx_diag d = {(uint32_t)sizeof d, 0, {0}};
    *out = def;
    if (src && e->h->config_int(src, key, def, out, &d) != 0)
        return e->h->fail(e->c, "%s: %s", e->who, d.msg);
    return 0;
}

int flux_dims_read(const blk_em *e, flux_dims *fd)
{
    const rlx_model_config *cfg = e->h->model_config(e->c);
    const rlx_config *src = e->h->ctx_config ? e->h->ctx_config(e->c) : NULL;
    fd->flux2 = strncmp(cfg->architecture, "Flux2", 5) == 0;
    fd->heads = cfg->num_heads;
    fd->head_dim = cfg->head_dim;
    fd->D = cfg->hidden_size;
    fd->mlp = cfg->intermediate_size;
    fd->eps = cfg->norm_eps > 0 ? cfg->norm_eps : 1e-6;
    fd->theta = cfg->rope_theta;
    fd->pooled = fd->flux2 ? 0 : cfg->pooled_dim;
    if (fd->heads <= 0 || fd->head_dim <= 0 || fd->D != fd->heads * fd->head_dim || fd->mlp <= 0)
        return e->h->fail(e->c, "%s: config.json: num_attention_heads / attention_head_dim / mlp_ratio "
                          "give no valid dims", e->who);
    fd->guidance = fd->flux2;
    if (src) {
        rlx_diag d = {(uint32_t)sizeof d, 0, {0}};
        if (e->h->config_bool(src, "guidance_embeds", fd->flux2, &fd->guidance, &d) != 0)
            return e->h->fail(e->c, "%s: %s", e->who, d.msg);
    }
    int64_t ch = 256, out = 0, patch = 1;
    if (fd->flux2 && cfg_int(e, src, "timestep_guidance_channels", 256, &ch)) return RLX_ERR_INVALID;
    if (cfg_int(e, src, "out_channels", cfg->in_channels, &out) || cfg_int(e, src, "patch_size", 1, &patch))
        return RLX_ERR_INVALID;
    if (ch <= 0 || ch % 2 || out <= 0 || patch <= 0)
        return e->h->fail(e->c, "%s: config.json: timestep_guidance_channels / out_channels / patch_size give "
                          "no valid dims", e->who);
    fd->time_ch = ch;
    fd->out = patch * patch * out;
    /* axes_dims_rope, diffusers' defaults when absent */
    static const int64_t def1[] = {16, 56, 56}, def2[] = {32, 32, 32, 32};
    int64_t sum = 0;
    fd->n_axes = 0;
    if (!src || e->h->config_len(src, "axes_dims_rope") < 0) {
        fd->n_axes = fd->flux2 ? 4 : 3;
        for (int a = 0; a < fd->n_axes; a++) sum += fd->axes[a] = fd->flux2 ? def2[a] : def1[a];
    } else {
        for (int a = 0; a < FLUX_MAX_AXES; a++) {
            char key[32];
            double v;
            snprintf(key, sizeof key, "axes_dims_rope.%d", a);
            if (e->h->config_number(e->c, key, &v) != 0) break;
            if (v <= 0 || v != floor(v) || (int64_t)v % 2)
                return e->h->fail(e->c, "%s: config.json: %s = %g is not a positive even integer", e->who, key, v);
            fd->axes[fd->n_axes++] = (int64_t)v;
            sum += (int64_t)v;
        }
    }
    if (fd->n_axes == 0 || sum != fd->head_dim)
        return e->h->fail(e->c, "%s: config.json: axes_dims_rope must sum to attention_head_dim %lld", e->who,
                          (long long)fd->head_dim);
    return 0;
}

int32_t flux_linear(const blk_em *e, int32_t x, const char *prefix, const char *base, int64_t n)
{
    char w[BLK_NAME_MAX], b[BLK_NAME_MAX], tmp[BLK_NAME_MAX];
    if (x < 0 || blk_join(e, tmp, prefix, base) < 0 || blk_join(e, w, tmp, "weight") < 0 ||
        blk_join(e, b, tmp, "bias") < 0)
        return -1;
    /* FLUX.1 has biases, FLUX.2 none */
    return blk_linear(e, x, w, b, n, 1);
}

int32_t flux_cols(const blk_em *e, int32_t x, int64_t a, int64_t b)
{
    if (x < 0) return -1;
    rlx_attr at[] = {RLX_ATTR_I("axis", 1), RLX_ATTR_I("start", a), RLX_ATTR_I("end", b)};
    return e->h->emit_op(e->c, "rlx.slice", &x, 1, at, 3);
}

int32_t flux_chunk(const blk_em *e, int32_t mod, int k, int64_t D)
{
    int32_t y = flux_cols(e, mod, k * D, (k + 1) * D);
    int64_t dims[1] = {D};
    return y < 0 ? -1 : blk_reshape(e, y, 1, dims);
}

/* ones / zeros [n] for a LayerNorm without affine */
static int32_t filled(const blk_em *e, int64_t n, float v)
{
    float *buf = malloc((size_t)n * sizeof *buf + 1);
    if (!buf) {
        e->h->fail(e->c, "%s: out of memory", e->who);
        return -1;
    }
    for (int64_t i = 0; i < n; i++) buf[i] = v;
    rlx_shape s = blk_shape1(n);
    int32_t c = e->h->emit_const(e->c, RLX_F32, &s, buf);
    free(buf);
    return c;
}

int32_t flux_modulate(const blk_em *e, int32_t x, int32_t shift, int32_t scale, double eps)
{
    int64_t n;
    if (x < 0 || shift < 0 || scale < 0 || blk_last_dim(e, x, &n, NULL) < 0) return -1;
    int32_t in[3] = {x, filled(e, n, 1.0f), filled(e, n, 0.0f)};
    if (in[1] < 0 || in[2] < 0) return -1;
    rlx_attr at[] = {RLX_ATTR_F("eps", eps)}, one[] = {RLX_ATTR_F("value", 1.0)};
    int32_t y = e->h->emit_op(e->c, "rlx.layer_norm", in, 3, at, 1);
    int32_t s1 = e->h->emit_op(e->c, "rlx.add_scalar", &scale, 1, one, 1);
    return blk_op2(e, "rlx.add", blk_op2(e, "rlx.mul", y, s1), shift);
}

int32_t flux_mod_linear(const blk_em *e, const char *prefix, int64_t n)
{
    int32_t t = blk_slot(e, "temb");
    return flux_linear(e, blk_op1(e, "rlx.silu", t), prefix, "", n);
}

/* [d, d] permutation: de-interleave the pairs (x[2i], x[2i+1]) into halves (x[i], x[i+d/2]),
 * so rlx.rope's rotate_half rotation is FLUX's interleaved one. q and k get the same
 * permutation, so their dot products (the attention scores) are unchanged. */
static int32_t deinterleave(const blk_em *e, int32_t x, int64_t d)
{
    float *p = calloc((size_t)(d * d) + 1, sizeof *p);
    if (!p) {
        e->h->fail(e->c, "%s: out of memory", e->who);
        return -1;
    }
    for (int64_t i = 0; i < d / 2; i++) {
        p[i * d + 2 * i] = 1.0f;
        p[(i + d / 2) * d + 2 * i + 1] = 1.0f;
    }
    rlx_shape s = blk_shape2(d, d);
    int32_t w = e->h->emit_const(e->c, RLX_F32, &s, p);
    free(p);
    return blk_op2(e, "rlx.matmul", x, w);
}

/* each axis a rotates its own head dims by its own positions (flux.pos.{a}) */
static int32_t flux_rope(const blk_em *e, const flux_dims *fd, int32_t x)
{
    int32_t out = -1;
    int64_t off = 0;
    for (int a = 0; a < fd->n_axes && x >= 0; a++) {
        int64_t d = fd->axes[a];
        char slot[32];
        snprintf(slot, sizeof slot, "flux.pos.%d", a);
        int32_t pos = blk_slot(e, slot);
        rlx_attr sl[] = {RLX_ATTR_I("axis", 2), RLX_ATTR_I("start", off), RLX_ATTR_I("end", off + d)};
        int32_t seg = pos < 0 ? -1 : e->h->emit_op(e->c, "rlx.slice", &x, 1, sl, 3);
        seg = seg < 0 ? -1 : deinterleave(e, seg, d);
        float inv[FLUX_MAX_AXES * 64];
        if (d / 2 > (int64_t)(sizeof inv / sizeof inv[0])) {
            e->h->fail(e->c, "%s: rope axis of %lld dims is too large", e->who, (long long)d);
            return -1;
        }
        for (int64_t i = 0; i < d / 2; i++) inv[i] = (float)(1.0 / pow(fd->theta, (double)(2 * i) / (double)d));
        rlx_shape s = blk_shape1(d / 2);
        int32_t in[3] = {seg, pos, e->h->emit_const(e->c, RLX_F32, &s, inv)};
        rlx_attr at[] = {RLX_ATTR_I("rot_dim", 0)};
        seg = seg < 0 || in[2] < 0 ? -1 : e->h->emit_op(e->c, "rlx.rope", in, 3, at, 1);
        if (seg < 0) return -1;
        if (out < 0) {
            out = seg;
        } else {
            int32_t cat[2] = {out, seg};
            rlx_attr ax[] = {RLX_ATTR_I("axis", 2)};
            out = e->h->emit_op(e->c, "rlx.concat", cat, 2, ax, 1);
        }
        off += d;
    }
    return out;
}

int32_t flux_qk(const blk_em *e, const flux_dims *fd, int32_t x, const char *norm, int rope)
{
    int64_t dims[3] = {-1, fd->heads, fd->head_dim};
    int32_t y = x < 0 ? -1 : blk_reshape(e, x, 3, dims);
    if (y >= 0 && norm) y = blk_rms_norm(e, y, norm, fd->eps, 0);
    if (y >= 0 && rope) y = flux_rope(e, fd, y);
    return y;
}

int32_t flux_attention(const blk_em *e, const flux_dims *fd, int32_t q, int32_t k, int32_t v)
{
    if (q < 0 || k < 0 || v < 0) return -1;
    int32_t in[3] = {q, k, v};
    rlx_attr at[] = {RLX_ATTR_F("scale", 1.0 / sqrt((double)fd->head_dim)), RLX_ATTR_I("causal", 0)};
    int32_t o = e->h->emit_op(e->c, "rlx.attention", in, 3, at, 2);
    int64_t flat[2] = {-1, fd->D};
    return o < 0 ? -1 : blk_reshape(e, o, 2, flat);
}
