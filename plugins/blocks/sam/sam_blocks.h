/* The blocks of rlx-blocks-sam (transformers SamModel), listed by sam_plugin.c. Every
 * image-shaped value is channel-last, [H·W, C] rows, one image per pass. Slots:
 *   pixel_values [C,S,S] / image_embeddings [C,e,e]: the flow inputs (one of them);
 *   sam.vision [N,Cv] the vision tokens (absent without pixel_values);
 *   image_embeddings: set by sam.neck when the encoder ran;
 *   sam.sparse [P,n,H] prompt tokens (absent without points and boxes), sam.dense [e·e,H]
 *   or [H] (no mask: no_mask_embed), sam.image_pe [e·e,H]. */
#ifndef RLX_BLOCKS_SAM_BLOCKS_H
#define RLX_BLOCKS_SAM_BLOCKS_H
#include "../core/core_emit.h"
#include "sam_config.h"

extern const rlx_block blk_sam_patch_embed, blk_sam_vision_layer, blk_sam_neck, blk_sam_prompt_encoder,
    blk_sam_mask_decoder;

/* the model's SamConfig dims (fails naming the key) */
int sam_dims_get(const blk_em *e, sam_dims *s);
/* the value of slot name, or -1 when unset (never fails) */
int32_t sam_slot_opt(const blk_em *e, const char *name);
/* rlx.transpose with perm; rlx.reshape to dims */
int32_t sam_tp(const blk_em *e, int32_t x, uint32_t n, const int64_t *perm);
int32_t sam_rs(const blk_em *e, int32_t x, uint32_t n, const int64_t *dims);
/* rlx.slice [a, b) on axis; rlx.concat on axis; rlx.scale; rlx.add_scalar */
int32_t sam_slice(const blk_em *e, int32_t x, int64_t axis, int64_t a, int64_t b);
int32_t sam_cat(const blk_em *e, int32_t a, int32_t b, int64_t axis);
int32_t sam_scale(const blk_em *e, int32_t x, double s);
int32_t sam_addc(const blk_em *e, int32_t x, double v);
/* an F32 constant of shape dims filled with v */
int32_t sam_fill(const blk_em *e, uint32_t n, const int64_t *dims, float v);
/* prefix+name+".weight" (and ".bias" when bias) as nn.Linear on x; out < 0: unchecked */
int32_t sam_linear(const blk_em *e, int32_t x, const char *prefix, const char *name, int64_t out, int bias);
/* nn.LayerNorm prefix+name over the last dim (LayerNorm2d on channel-last rows too) */
int32_t sam_ln(const blk_em *e, int32_t x, const char *prefix, const char *name, double eps);
/* a conv of kernel = stride = k on channel-last x [H·W, C] (an image H×W): patchify + matmul
 * with the [Co, C, k, k] weight prefix+".weight" (+ ".bias" when bias) -> [(H/k)·(W/k), Co] */
int32_t sam_patchify_conv(const blk_em *e, int32_t x, int64_t H, int64_t W, int64_t C, int64_t k, int64_t co,
                          const char *prefix, int bias);
/* random-Fourier features of coords [n,2] already in [-1,1]: [sin, cos] of 2π·coords·pe */
int32_t sam_fourier(const blk_em *e, int32_t coords);
#endif
