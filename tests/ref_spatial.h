/* Float64 references of the image ops (conv2d, group_norm, upsample_nearest2d), shared
 * by the CPU and GPU conformance tests (libm only: the GPU test is standalone). */
#ifndef RLX_TEST_REF_SPATIAL_H
#define RLX_TEST_REF_SPATIAL_H
#include <stdint.h>

typedef struct ref_conv {
    int64_t C, H, W, Co, kh, kw, sh, sw, ph, pw, dh, dw, groups;
} ref_conv;

/* output height and width, PyTorch's formula */
void ref_conv_out(const ref_conv *p, int64_t *Ho, int64_t *Wo);
/* y [Co,Ho,Wo] = conv(x [C,H,W], w [Co,C/groups,kh,kw]) + bias (may be NULL) */
void ref_conv2d(const ref_conv *p, const float *x, const float *w, const float *bias, double *y);
/* x [C, n] per channel; groups of C/groups channels normalised together */
void ref_group_norm(const float *x, const float *gamma, const float *beta, double *y, int64_t C,
                    int64_t n, int64_t groups, double eps);
/* y [C,H*s,W*s] */
void ref_upsample_nearest(const float *x, double *y, int64_t C, int64_t H, int64_t W, int64_t s);
#endif
