/* Image ops of the shared CUDA/HIP backend (k_spatial.cu): conv2d, group_norm and
 * upsample_nearest2d on one channels-first f32 image. */
#ifndef RLX_GPU_SPATIAL_H
#define RLX_GPU_SPATIAL_H
#include "rlx_gpu_compat.h"
#include "rlx/plugin.h"
#include <stddef.h>
#include <stdint.h>

/* conv2d geometry (PyTorch weight layout [Co,C/groups,kh,kw]); group_norm uses C, groups
 * and H = elements per channel; upsample uses C, H, W and sh = the scale */
typedef struct gpu_conv {
    int64_t C, H, W, Co, kh, kw, sh, sw, ph, pw, dh, dw, groups, Ho, Wo;
} gpu_conv;
#define GPU_CONV_MAX_TAPS 1024 /* kh*kw: a block's weight taps sit in shared memory */
enum gpu_spatial_op { GS_CONV2D, GS_GROUP_NORM, GS_UPSAMPLE };

/* Checks a node of op `op` (operands f32; ins: the present inputs in order) and fills c and
 * eps (group_norm's). 0, or -1 with the reason in err. */
int gpu_spatial_plan(int op, const rlx_node_desc *nd, const rlx_value_desc *const *ins, int n_in,
                     const rlx_value_desc *y, gpu_conv *c, float *eps, char *err, size_t len);
/* Enqueue on stream s; the caller checks gpuGetLastError. */
void gpu_conv2d(gpuStream_t s, const gpu_conv *c, const float *x, const float *w,
                const float *bias, float *y);
void gpu_group_norm(gpuStream_t s, const gpu_conv *c, const float *x, const float *gamma,
                    const float *beta, float *y, float eps);
void gpu_upsample_nearest(gpuStream_t s, const gpu_conv *c, const float *x, float *y);

#endif
