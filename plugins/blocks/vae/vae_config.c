/* AutoencoderKL config.json -> vae_cfg, with diffusers' defaults and the checks that
 * keep the decoder's shapes consistent. */
#include "vae_config.h"
#include <stdio.h>
#include <string.h>

/* a channel count in [1, 2^16] */
static int size_key(const rlx_host_api *h, const rlx_config *src, const char *key, int64_t def, int64_t *out,
                    rlx_diag *d)
{
    if (h->config_int(src, key, def, out, d)) return RLX_ERR_INVALID;
    if (*out < 1 || *out > 65536)
        return h->config_fail(src, d, RLX_ERR_INVALID, "%s: expected 1 to 65536, got %lld", key, (long long)*out);
    return 0;
}

static int blocks(const rlx_host_api *h, const rlx_config *src, vae_cfg *v, rlx_diag *d)
{
    int64_t n = h->config_len(src, "block_out_channels");
    if (n < 0 && h->config_has(src, "block_out_channels"))
        return h->config_fail(src, d, RLX_ERR_INVALID, "block_out_channels: expected an array of integers");
    if (n < 0) { /* diffusers' default (64,) */
        v->n_blocks = 1;
        v->ch[0] = 64;
    } else {
        if (n < 1 || n > VAE_MAX_BLOCKS)
            return h->config_fail(src, d, RLX_ERR_UNSUPPORTED, "block_out_channels: %lld blocks, 1 to %d supported",
                                  (long long)n, VAE_MAX_BLOCKS);
        v->n_blocks = (int)n;
        for (int i = 0; i < v->n_blocks; i++) {
            char key[40];
            snprintf(key, sizeof key, "block_out_channels.%d", i);
            if (size_key(h, src, key, 0, &v->ch[i], d)) return RLX_ERR_INVALID;
            if (v->ch[i] % v->groups)
                return h->config_fail(src, d, RLX_ERR_INVALID, "%s: %lld channels are not a multiple of "
                                      "norm_num_groups %lld", key, (long long)v->ch[i], (long long)v->groups);
        }
    }
    /* up_block_types: one UpDecoderBlock2D per block (the only kind the decoder builds) */
    int64_t nu = h->config_len(src, "up_block_types");
    if (nu >= 0 && nu != v->n_blocks)
        return h->config_fail(src, d, RLX_ERR_INVALID, "up_block_types: %lld entries, block_out_channels has %d",
                              (long long)nu, v->n_blocks);
    for (int64_t i = 0; i < nu; i++) {
        char key[40], type[64];
        snprintf(key, sizeof key, "up_block_types.%lld", (long long)i);
        if (h->config_str(src, key, "UpDecoderBlock2D", type, sizeof type, d)) return RLX_ERR_INVALID;
        if (strcmp(type, "UpDecoderBlock2D") != 0)
            return h->config_fail(src, d, RLX_ERR_UNSUPPORTED, "%s: \"%s\" is not supported (UpDecoderBlock2D)", key,
                                  type);
    }
    return 0;
}

int vae_cfg_read(const rlx_host_api *h, const rlx_config *src, vae_cfg *v, rlx_diag *d)
{
    memset(v, 0, sizeof *v);
    char act[32];
    if (size_key(h, src, "latent_channels", 4, &v->latent, d) || size_key(h, src, "out_channels", 3, &v->out, d) ||
        size_key(h, src, "norm_num_groups", 32, &v->groups, d) ||
        h->config_int(src, "layers_per_block", 1, &v->layers, d))
        return RLX_ERR_INVALID;
    if (v->layers < 0 || v->layers > 64)
        return h->config_fail(src, d, RLX_ERR_INVALID, "layers_per_block: expected 0 to 64, got %lld",
                              (long long)v->layers);
    if (blocks(h, src, v, d)) return RLX_ERR_INVALID;
    if (h->config_str(src, "act_fn", "silu", act, sizeof act, d)) return RLX_ERR_INVALID;
    if (strcmp(act, "silu") != 0)
        return h->config_fail(src, d, RLX_ERR_UNSUPPORTED, "act_fn: \"%s\" is not supported (silu)", act);
    if (h->config_num(src, "scaling_factor", 0.18215, &v->scaling, d) ||
        h->config_num(src, "shift_factor", 0.0, &v->shift, d) ||
        h->config_bool(src, "use_post_quant_conv", 1, &v->post_quant, d) ||
        h->config_bool(src, "mid_block_add_attention", 1, &v->mid_attn, d))
        return RLX_ERR_INVALID;
    if (!(v->scaling > 0 || v->scaling < 0))
        return h->config_fail(src, d, RLX_ERR_INVALID, "scaling_factor: must not be 0");
    return 0;
}
