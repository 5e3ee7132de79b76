/* SamConfig from config.json: SamVisionConfig, SamPromptEncoderConfig and
 * SamMaskDecoderConfig defaults where a key is absent, then the checks every block
 * relies on (sizes that divide, embedding sizes that agree). */
#include "sam_config.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define SAM_MAX_DIM (1 << 20)

const char *sam_act_op(const char *act)
{
    if (!strcmp(act, "gelu")) return "rlx.gelu";
    if (!strcmp(act, "relu")) return "rlx.relu";
    if (!strcmp(act, "gelu_pytorch_tanh") || !strcmp(act, "gelu_new")) return "rlx.gelu_tanh";
    if (!strcmp(act, "silu")) return "rlx.silu";
    return NULL;
}

typedef struct rd {
    const rlx_config *src;
    const rlx_host_api *h;
    rlx_diag *d;
    int rc;
} rd;

static int64_t size_of(rd *r, const char *key, int64_t def)
{
    int64_t v = def;
    if (r->rc) return def;
    if ((r->rc = r->h->config_int(r->src, key, def, &v, r->d))) return def;
    if (v < 1 || v > SAM_MAX_DIM)
        r->rc = r->h->config_fail(r->src, r->d, RLX_ERR_INVALID, "%s: expected 1 to %d, got %lld", key, SAM_MAX_DIM,
                                  (long long)v);
    return v;
}

static double eps_of(rd *r, const char *key, double def)
{
    double v = def;
    if (r->rc) return def;
    if ((r->rc = r->h->config_num(r->src, key, def, &v, r->d))) return def;
    if (!(v > 0 && v < 1))
        r->rc = r->h->config_fail(r->src, r->d, RLX_ERR_INVALID, "%s: expected a value in (0, 1), got %g", key, v);
    return v;
}

static int flag_of(rd *r, const char *key, int def)
{
    int v = def;
    if (!r->rc) r->rc = r->h->config_bool(r->src, key, def, &v, r->d);
    return v;
}

static void act_of(rd *r, const char *key, const char *def, char *out)
{
    if (r->rc) return;
    if ((r->rc = r->h->config_str(r->src, key, def, out, 32, r->d))) return;
    if (!sam_act_op(out))
        r->rc = r->h->config_fail(r->src, r->d, RLX_ERR_UNSUPPORTED,
                                  "%s: \"%s\" is not supported (gelu, relu, gelu_pytorch_tanh, silu)", key, out);
}

/* fails with the message unless ok */
static void need(rd *r, int ok, const char *fmt, ...) RLX_PRINTF(3, 4);
static void need(rd *r, int ok, const char *fmt, ...)
{
    if (r->rc || ok) return;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->rc = r->h->config_fail(r->src, r->d, RLX_ERR_INVALID, "%s", msg);
}

/* global_attn_indexes: layer indexes in [0, layers) (default 2, 5, 8, 11) */
static void globals(rd *r, sam_dims *s)
{
    static const int64_t def[] = {2, 5, 8, 11};
    const char *key = "vision_config.global_attn_indexes";
    int64_t n = r->h->config_len(r->src, key);
    if (n < 0 && r->h->config_has(r->src, key)) {
        r->rc = r->h->config_fail(r->src, r->d, RLX_ERR_INVALID, "%s: expected an array of integers", key);
        return;
    }
    for (int64_t i = 0; i < (n < 0 ? 4 : n) && !r->rc; i++) {
        char k[96];
        int64_t v = def[i < 4 ? i : 0];
        snprintf(k, sizeof k, "%s.%lld", key, (long long)i);
        if (n >= 0 && (r->rc = r->h->config_int(r->src, k, 0, &v, r->d))) return;
        if (v < 0 || v >= s->v_layers) {
            if (n >= 0)
                r->rc = r->h->config_fail(r->src, r->d, RLX_ERR_INVALID, "%s: layer %lld is outside [0, %lld)", k,
                                          (long long)v, (long long)s->v_layers);
            continue; /* a default index past a smaller model */
        }
        s->global[v] = 1;
    }
}

int sam_dims_read(const rlx_config *src, const rlx_host_api *h, sam_dims *s, rlx_diag *d)
{
    rd r = {src, h, d, 0};
    memset(s, 0, sizeof *s);
    s->v_hidden = size_of(&r, "vision_config.hidden_size", 768);
    s->v_layers = size_of(&r, "vision_config.num_hidden_layers", 12);
    s->v_heads = size_of(&r, "vision_config.num_attention_heads", 12);
    s->v_out = size_of(&r, "vision_config.output_channels", 256);
    s->image = size_of(&r, "vision_config.image_size", 1024);
    s->patch = size_of(&r, "vision_config.patch_size", 16);
    s->channels = size_of(&r, "vision_config.num_channels", 3);
    s->pos_feats = size_of(&r, "vision_config.num_pos_feats", 128);
    double ratio = 4.0;
    if (!r.rc) r.rc = h->config_num(src, "vision_config.mlp_ratio", 4.0, &ratio, d);
    need(&r, ratio > 0 && ratio <= 64, "%s: expected a ratio in (0, 64]", "vision_config.mlp_ratio");
    s->v_mlp = size_of(&r, "vision_config.mlp_dim", (int64_t)(s->v_hidden * ratio));
    int64_t w = 14;
    if (!r.rc) r.rc = h->config_int(src, "vision_config.window_size", 14, &w, d);
    need(&r, w >= 0 && w <= SAM_MAX_DIM, "%s: expected 0 (none) to a size, got %lld", "vision_config.window_size",
         (long long)w);
    s->window = w;
    s->qkv_bias = flag_of(&r, "vision_config.qkv_bias", 1);
    s->abs_pos = flag_of(&r, "vision_config.use_abs_pos", 1);
    s->rel_pos = flag_of(&r, "vision_config.use_rel_pos", 1);
    s->v_eps = eps_of(&r, "vision_config.layer_norm_eps", 1e-6);
    act_of(&r, "vision_config.hidden_act", "gelu", s->v_act);
    need(&r, s->v_layers <= RLX_MAX_LAYERS, "%s: %lld layers, at most %lld supported", "vision_config.num_hidden_layers",
         (long long)s->v_layers, (long long)RLX_MAX_LAYERS);
    need(&r, s->v_hidden % s->v_heads == 0, "%s: %lld is not a multiple of num_attention_heads %lld",
         "vision_config.hidden_size", (long long)s->v_hidden, (long long)s->v_heads);
    need(&r, s->image % s->patch == 0, "%s: %lld is not a multiple of patch_size %lld", "vision_config.image_size",
         (long long)s->image, (long long)s->patch);
    if (!r.rc) globals(&r, s);

    s->p_hidden = size_of(&r, "prompt_encoder_config.hidden_size", 256);
    s->p_image = size_of(&r, "prompt_encoder_config.image_size", 1024);
    int64_t pp = size_of(&r, "prompt_encoder_config.patch_size", 16);
    s->emb = size_of(&r, "prompt_encoder_config.image_embedding_size", s->p_image / (pp ? pp : 1));
    s->mask_ch = size_of(&r, "prompt_encoder_config.mask_input_channels", 16);
    s->n_point_embed = size_of(&r, "prompt_encoder_config.num_point_embeddings", 4);
    s->p_eps = eps_of(&r, "prompt_encoder_config.layer_norm_eps", 1e-6);
    act_of(&r, "prompt_encoder_config.hidden_act", "gelu", s->p_act);
    need(&r, s->emb == s->image / s->patch, "%s: %lld, but the vision encoder gives %lld",
         "prompt_encoder_config.image_embedding_size", (long long)s->emb, (long long)(s->image / s->patch));
    need(&r, s->p_hidden == s->v_out, "%s: %lld, vision_config.output_channels is %lld",
         "prompt_encoder_config.hidden_size", (long long)s->p_hidden, (long long)s->v_out);
    need(&r, s->n_point_embed >= 4, "%s: %lld, SAM needs 4 (2 labels, 2 box corners)",
         "prompt_encoder_config.num_point_embeddings", (long long)s->n_point_embed);
    need(&r, s->mask_ch % 4 == 0, "%s: %lld is not a multiple of 4", "prompt_encoder_config.mask_input_channels",
         (long long)s->mask_ch);
    need(&r, 2 * s->pos_feats == s->p_hidden, "%s: %lld, half of prompt_encoder_config.hidden_size %lld",
         "vision_config.num_pos_feats", (long long)s->pos_feats, (long long)s->p_hidden);

    s->d_hidden = size_of(&r, "mask_decoder_config.hidden_size", 256);
    s->d_layers = size_of(&r, "mask_decoder_config.num_hidden_layers", 2);
    s->d_heads = size_of(&r, "mask_decoder_config.num_attention_heads", 8);
    s->d_mlp = size_of(&r, "mask_decoder_config.mlp_dim", 2048);
    s->d_down = size_of(&r, "mask_decoder_config.attention_downsample_rate", 2);
    s->n_multimask = size_of(&r, "mask_decoder_config.num_multimask_outputs", 3);
    s->iou_depth = size_of(&r, "mask_decoder_config.iou_head_depth", 3);
    s->iou_hidden = size_of(&r, "mask_decoder_config.iou_head_hidden_dim", 256);
    s->d_eps = eps_of(&r, "mask_decoder_config.layer_norm_eps", 1e-6);
    act_of(&r, "mask_decoder_config.hidden_act", "relu", s->d_act);
    need(&r, s->d_hidden == s->v_out, "%s: %lld, vision_config.output_channels is %lld", "mask_decoder_config.hidden_size",
         (long long)s->d_hidden, (long long)s->v_out);
    need(&r, s->d_hidden % 8 == 0 && (s->d_hidden / s->d_down) % s->d_heads == 0 && s->d_hidden % s->d_heads == 0,
         "%s: %lld does not split into num_attention_heads %lld (also after the downsample rate, and into 8)",
         "mask_decoder_config.hidden_size", (long long)s->d_hidden, (long long)s->d_heads);
    need(&r, s->iou_depth >= 2 && s->d_layers <= RLX_MAX_LAYERS, "%s: %lld, at least 2",
         "mask_decoder_config.iou_head_depth", (long long)s->iou_depth);
    return r.rc;
}
