/* rlx-arch-sam: transformers' SamModel (model_type sam), config.json -> one encode flow
 *   sam.patch_embed -> repeat(layers, sam.vision_layer) -> sam.neck -> sam.prompt_encoder
 *   -> sam.mask_decoder
 * Every input is optional (one program per set given); P prompt sets, N points each:
 *   pixel_values [C,S,S] or image_embeddings [H,e,e] (the first stage's output, reused);
 *   input_points [P,N,2] (input-image pixels), input_labels I32 [P,N] (default 1),
 *   input_boxes [P,4] (x0,y0,x1,y1), input_masks [1,4e,4e], multimask_output [] (default 1)
 *   -> image_embeddings (from pixel_values), pred_masks [P,k,4e,4e], iou_scores [P,k]
 *   (k = 3, or 1 without multimask); no prompt at all: the image encoder alone. */
#include <stdio.h>
#include <string.h>
#include "../../blocks/sam/sam_config.h"
#include "rlx/plugin_util.h"

static int inputs(rlx_flow *f, const sam_dims *s, const rlx_host_api *h)
{
    int64_t px[3] = {s->channels, s->image, s->image}, emb[3] = {s->d_hidden, s->emb, s->emb};
    int64_t pts[3] = {-2, -1, 2}, lab[2] = {-2, -1}, box[2] = {-2, 4}, mask[3] = {1, 4 * s->emb, 4 * s->emb};
    static const char *const names[] = {"pixel_values", "image_embeddings", "input_points", "input_labels",
                                        "input_boxes",  "input_masks",      "multimask_output"};
    int rc = h->flow_input(f, names[0], RLX_F32, 3, px);
    if (!rc) rc = h->flow_input(f, names[1], RLX_F32, 3, emb);
    if (!rc) rc = h->flow_input(f, names[2], RLX_F32, 3, pts);
    if (!rc) rc = h->flow_input(f, names[3], RLX_I32, 2, lab);
    if (!rc) rc = h->flow_input(f, names[4], RLX_F32, 2, box);
    if (!rc) rc = h->flow_input(f, names[5], RLX_F32, 3, mask);
    if (!rc) rc = h->flow_input(f, names[6], RLX_I32, 0, NULL);
    for (size_t i = 0; i < sizeof names / sizeof names[0] && !rc; i++) rc = h->flow_input_fill(f, names[i], RLX_FILL_OPTIONAL);
    return rc;
}

static int build_flow(rlx_flow *flow, int phase, const rlx_model_config *cfg, const rlx_host_api *host, rlx_diag *d)
{
    (void)cfg;
    if (phase != RLX_PHASE_ENCODE)
        return host->diag_set(d, RLX_ERR_UNSUPPORTED, "arch sam: phase %d is not encode", phase), RLX_ERR_UNSUPPORTED;
    const rlx_config *src = host->flow_config ? host->flow_config(flow) : NULL;
    if (!src) return host->diag_set(d, RLX_ERR_INVALID, "arch sam: no config.json"), RLX_ERR_INVALID;
    sam_dims s;
    if (sam_dims_read(src, host, &s, d)) return RLX_ERR_INVALID;
    int rc = inputs(flow, &s, host);
    if (!rc) rc = host->flow_stage(flow, "sam.patch_embed", NULL);
    if (!rc) rc = host->flow_repeat_begin(flow, s.v_layers);
    if (!rc) rc = host->flow_stage(flow, "sam.vision_layer", "{\"layer\":\"{i}\"}");
    if (!rc) rc = host->flow_repeat_end(flow);
    if (!rc) rc = host->flow_stage(flow, "sam.neck", NULL);
    if (!rc) rc = host->flow_stage(flow, "sam.prompt_encoder", NULL);
    if (!rc) rc = host->flow_stage(flow, "sam.mask_decoder", NULL);
    if (rc) return host->diag_set(d, RLX_ERR_INTERNAL, "arch sam: building the encode flow failed"), RLX_ERR_INTERNAL;
    return 0;
}

/* the vision tower's sizes in the shared description; the blocks read the rest */
static int configure(const rlx_config *src, rlx_model_config *cfg, const rlx_host_api *h, rlx_diag *d)
{
    sam_dims s;
    if (sam_dims_read(src, h, &s, d)) return RLX_ERR_INVALID;
    cfg->hidden_size = s.v_hidden;
    cfg->num_layers = s.v_layers;
    cfg->num_heads = cfg->num_kv_heads = s.v_heads;
    cfg->head_dim = s.v_hidden / s.v_heads;
    cfg->intermediate_size = s.v_mlp;
    cfg->norm_eps = s.v_eps;
    snprintf(cfg->hidden_act, sizeof cfg->hidden_act, "%s", s.v_act);
    return 0;
}

static const char *const model_types[] = {"sam", NULL};

static const rlx_arch arch = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_arch, class_names),
    .name = "sam",
    .model_types = model_types,
    .default_profile = "sam_encoder",
    .decode_profile = NULL,
    .build_flow = build_flow,
    .phases = 1u << RLX_PHASE_ENCODE,
    .configure = configure,
    .class_names = NULL,
};

RLX_ARCH_PLUGIN("arch-sam", "SAM (SamModel) recipe: config.json -> encode flow (image encoder, prompts, masks)", arch)
