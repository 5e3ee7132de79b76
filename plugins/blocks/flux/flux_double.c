/* flux.double_block: a dual-stream block (FluxTransformerBlock / Flux2TransformerBlock).
 * Image and text tokens keep their own weights and modulation (shift, scale, gate for the
 * attention, then for the MLP) and meet in one attention over cat(text, image):
 *   x += gate_msa · attn_out(x̂),  x̂ = LN(x)·(1+scale_msa)+shift_msa
 *   x += gate_mlp · ff(LN(x)·(1+scale_mlp)+shift_mlp)
 * FLUX.1: per-block AdaLayerNormZero (norm1.linear), GELU-tanh MLP, biases. FLUX.2: the
 * shared modulations flux.mod.img/txt, SwiGLU MLP (linear_in/linear_out), no biases. */
#include "flux_blocks.h"
#include <stdio.h>

typedef struct stream {
    int32_t x, mod;                        /* [L, D], [1, 6D] */
    const char *q, *k, *v, *nq, *nk, *out; /* attention names under prefix */
    const char *ff, *norm1;                /* "ff." / "ff_context.", "norm1.linear." */
} stream;

static int32_t ffn(const blk_em *e, const flux_dims *fd, int32_t x, const char *prefix)
{
    char p[BLK_NAME_MAX];
    if (!fd->flux2) {
        char up[BLK_NAME_MAX], upb[BLK_NAME_MAX], dn[BLK_NAME_MAX], dnb[BLK_NAME_MAX];
        if (blk_join(e, up, prefix, "net.0.proj.weight") < 0 || blk_join(e, upb, prefix, "net.0.proj.bias") < 0 ||
            blk_join(e, dn, prefix, "net.2.weight") < 0 || blk_join(e, dnb, prefix, "net.2.bias") < 0)
            return -1;
        return blk_gelu_ffn(e, x, up, upb, dn, dnb, "gelu_tanh");
    }
    if (blk_join(e, p, prefix, "") < 0) return -1;
    int32_t h = flux_linear(e, x, p, "linear_in.", 2 * fd->mlp);
    int32_t a = blk_op2(e, "rlx.mul", blk_op1(e, "rlx.silu", flux_cols(e, h, 0, fd->mlp)),
                        flux_cols(e, h, fd->mlp, 2 * fd->mlp));
    return flux_linear(e, a, p, "linear_out.", fd->D);
}

static int32_t named(const blk_em *e, char *buf, const char *prefix, const char *name)
{
    return blk_join(e, buf, prefix, name);
}

static int double_block(rlx_ctx *c, const rlx_host_api *h)
{
    blk_em e = {c, h, "flux.double_block"};
    flux_dims fd;
    if (flux_dims_read(&e, &fd)) return RLX_ERR_INVALID;
    const char *pre = h->param_str(c, "prefix", NULL);
    if (!pre) return h->fail(c, "flux.double_block: needs the parameter 'prefix' (transformer_blocks.{i}.)");
    int64_t D = fd.D;
    stream s[2] = {
        {blk_slot(&e, "context"), -1, "attn.add_q_proj.", "attn.add_k_proj.", "attn.add_v_proj.",
         "attn.norm_added_q.weight", "attn.norm_added_k.weight", "attn.to_add_out.", "ff_context.",
         "norm1_context.linear."},
        {blk_slot(&e, "hidden"), -1, "attn.to_q.", "attn.to_k.", "attn.to_v.", "attn.norm_q.weight",
         "attn.norm_k.weight", "attn.to_out.0.", "ff.", "norm1.linear."},
    };
    char p[BLK_NAME_MAX], n[BLK_NAME_MAX];
    int32_t q[2], k[2], v[2], xn[2];
    for (int i = 0; i < 2; i++) {
        if (s[i].x < 0) return RLX_ERR_INVALID;
        if (fd.flux2) s[i].mod = blk_slot(&e, i ? "flux.mod.img" : "flux.mod.txt");
        else if (named(&e, p, pre, s[i].norm1) == 0) s[i].mod = flux_mod_linear(&e, p, 6 * D);
        xn[i] = flux_modulate(&e, s[i].x, flux_chunk(&e, s[i].mod, 0, D), flux_chunk(&e, s[i].mod, 1, D), fd.eps);
        if (named(&e, p, pre, s[i].q) < 0) return RLX_ERR_INVALID;
        q[i] = named(&e, n, pre, s[i].nq) < 0 ? -1 : flux_qk(&e, &fd, flux_linear(&e, xn[i], p, "", D), n, 0);
        if (named(&e, p, pre, s[i].k) < 0) return RLX_ERR_INVALID;
        k[i] = named(&e, n, pre, s[i].nk) < 0 ? -1 : flux_qk(&e, &fd, flux_linear(&e, xn[i], p, "", D), n, 0);
        if (named(&e, p, pre, s[i].v) < 0) return RLX_ERR_INVALID;
        v[i] = flux_qk(&e, &fd, flux_linear(&e, xn[i], p, "", D), NULL, 0);
    }
    /* joint attention over cat(text, image); rope on the joined q, k */
    rlx_attr ax[] = {RLX_ATTR_I("axis", 0)};
    int32_t jq = q[0] < 0 || q[1] < 0 ? -1 : h->emit_op(c, "rlx.concat", q, 2, ax, 1);
    int32_t jk = k[0] < 0 || k[1] < 0 ? -1 : h->emit_op(c, "rlx.concat", k, 2, ax, 1);
    int32_t jv = v[0] < 0 || v[1] < 0 ? -1 : h->emit_op(c, "rlx.concat", v, 2, ax, 1);
    jq = jq < 0 ? -1 : flux_qk(&e, &fd, jq, NULL, 1);
    jk = jk < 0 ? -1 : flux_qk(&e, &fd, jk, NULL, 1);
    int32_t o = flux_attention(&e, &fd, jq, jk, jv);
    rlx_shape ts;
    int32_t dt;
    if (o < 0 || h->value_info(c, s[0].x, &ts, &dt) != 0) return RLX_ERR_INVALID;
    int64_t S = ts.dims[0];
    for (int i = 0; i < 2; i++) {
        rlx_shape xs;
        if (h->value_info(c, s[i].x, &xs, &dt) != 0) return RLX_ERR_INVALID;
        rlx_attr rows[] = {RLX_ATTR_I("axis", 0), RLX_ATTR_I("start", i ? S : 0),
                           RLX_ATTR_I("end", i ? S + xs.dims[0] : S)};
        int32_t a = h->emit_op(c, "rlx.slice", &o, 1, rows, 3);
        if (a < 0 || named(&e, p, pre, s[i].out) < 0) return RLX_ERR_INVALID;
        a = flux_linear(&e, a, p, "", D);
        int32_t x = blk_op2(&e, "rlx.add", s[i].x, blk_op2(&e, "rlx.mul", a, flux_chunk(&e, s[i].mod, 2, D)));
        int32_t m = flux_modulate(&e, x, flux_chunk(&e, s[i].mod, 3, D), flux_chunk(&e, s[i].mod, 4, D), fd.eps);
        if (named(&e, p, pre, s[i].ff) < 0) return RLX_ERR_INVALID;
        m = ffn(&e, &fd, m, p);
        x = blk_op2(&e, "rlx.add", x, blk_op2(&e, "rlx.mul", m, flux_chunk(&e, s[i].mod, 5, D)));
        if (x < 0 || h->slot_set(c, i ? "hidden" : "context", x) != 0) return RLX_ERR_INVALID;
    }
    return 0;
}

const rlx_block blk_flux_double_block = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), "flux.double_block",
    "FLUX dual-stream block: modulated image and text streams, joint rope attention, MLPs",
    "prefix: str (transformer_blocks.{i}.); reads and writes the slots hidden, context",
    double_block};
