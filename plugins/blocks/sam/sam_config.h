/* SamConfig (transformers: vision_config, prompt_encoder_config, mask_decoder_config) read
 * from config.json with the class defaults for absent keys. Compiled into the SAM arch
 * and block plugins (plugins never link each other): one reader, both see the same dims. */
#ifndef RLX_BLOCKS_SAM_CONFIG_H
#define RLX_BLOCKS_SAM_CONFIG_H
#include "rlx/plugin.h"

typedef struct sam_dims {
    /* vision_config */
    int64_t v_hidden, v_layers, v_heads, v_mlp, v_out, image, patch, channels, window, pos_feats;
    int qkv_bias, abs_pos, rel_pos;
    uint8_t global[RLX_MAX_LAYERS]; /* layer i attends globally (global_attn_indexes) */
    double v_eps;
    char v_act[32];
    /* prompt_encoder_config */
    int64_t p_hidden, p_image, emb, mask_ch, n_point_embed;
    double p_eps;
    char p_act[32];
    /* mask_decoder_config */
    int64_t d_hidden, d_layers, d_heads, d_mlp, d_down, n_multimask, iou_depth, iou_hidden;
    double d_eps;
    char d_act[32];
} sam_dims;

/* 0, or fails through h->config_fail naming the key */
int sam_dims_read(const rlx_config *src, const rlx_host_api *h, sam_dims *s, rlx_diag *d);
/* the rlx op of a config activation ("gelu" -> "rlx.gelu"), NULL when unsupported */
const char *sam_act_op(const char *act);
#endif
