/* rlx-arch-vae: the decoder of diffusers' AutoencoderKL (the FLUX.1 VAE layout), config.json
 * -> one encode flow:
 *   vae.decode_in -> vae.mid_block -> repeat(len(block_out_channels), vae.up_block)
 *   -> vae.decode_out
 * Input latents [latent_channels, h, w] (the unpacked latents, before scaling: the flow
 * applies latents / scaling_factor + shift_factor as FluxPipeline does before decoding)
 *   -> output sample [out_channels, h·2^(n-1), w·2^(n-1)], n = len(block_out_channels). */
#include <stdio.h>
#include <string.h>
#include "../../blocks/vae/vae_config.h"
#include "rlx/plugin_util.h"

static int build_flow(rlx_flow *flow, int phase, const rlx_model_config *cfg, const rlx_host_api *host,
                      rlx_diag *d)
{
    if (phase != RLX_PHASE_ENCODE)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "arch vae: phase %d is not encode", phase),
               RLX_ERR_UNSUPPORTED;
    const rlx_config *src = host->flow_config ? host->flow_config(flow) : NULL;
    if (!src)
        return host->diag_set(d, RLX_ERR_INVALID, "arch vae: the flow needs the model's config.json"),
               RLX_ERR_INVALID;
    vae_cfg v;
    if (vae_cfg_read(host, src, &v, d)) return RLX_ERR_INVALID;
    (void)cfg;
    /* h and w: the flow's two free lengths */
    int64_t dims[3] = {v.latent, -1, -2};
    int rc = host->flow_input(flow, "latents", RLX_F32, 3, dims);
    if (!rc) rc = host->flow_stage(flow, "vae.decode_in", NULL);
    if (!rc) rc = host->flow_stage(flow, "vae.mid_block", NULL);
    if (!rc) rc = host->flow_repeat_begin(flow, v.n_blocks);
    if (!rc) rc = host->flow_stage(flow, "vae.up_block", "{\"index\":\"{i}\"}");
    if (!rc) rc = host->flow_repeat_end(flow);
    if (!rc) rc = host->flow_stage(flow, "vae.decode_out", NULL);
    if (rc)
        return host->diag_set(d, RLX_ERR_INTERNAL, "arch vae: building the decode flow failed"), RLX_ERR_INTERNAL;
    return 0;
}

static int configure(const rlx_config *src, rlx_model_config *cfg, const rlx_host_api *h, rlx_diag *d)
{
    vae_cfg v;
    if (vae_cfg_read(h, src, &v, d)) return RLX_ERR_INVALID;
    snprintf(cfg->model_type, sizeof cfg->model_type, "autoencoder_kl");
    cfg->in_channels = v.latent;
    cfg->hidden_size = v.ch[v.n_blocks - 1];
    cfg->num_layers = v.n_blocks;
    cfg->norm_eps = VAE_EPS;
    return 0;
}

static const char *const model_types[] = {"autoencoder_kl", NULL};
static const char *const classes[] = {"AutoencoderKL", NULL};

static const rlx_arch arch = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_arch, class_names),
    .name = "vae",
    .model_types = model_types,
    .default_profile = "encoder",
    .decode_profile = NULL,
    .build_flow = build_flow,
    .phases = 1u << RLX_PHASE_ENCODE,
    .configure = configure,
    .class_names = classes,
};

RLX_ARCH_PLUGIN("arch-vae", "AutoencoderKL decoder recipe: config.json -> decode flow (latents -> sample)", arch)
