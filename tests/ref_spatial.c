/* Float64 references of the image ops: the plain loops of their definitions. */
#include "ref_spatial.h"
#include <math.h>

void ref_conv_out(const ref_conv *p, int64_t *Ho, int64_t *Wo)
{
    *Ho = (p->H + 2 * p->ph - p->dh * (p->kh - 1) - 1) / p->sh + 1;
    *Wo = (p->W + 2 * p->pw - p->dw * (p->kw - 1) - 1) / p->sw + 1;
}

void ref_conv2d(const ref_conv *p, const float *x, const float *w, const float *bias, double *y)
{
    int64_t Ho, Wo, Cg = p->C / p->groups, Cog = p->Co / p->groups;
    ref_conv_out(p, &Ho, &Wo);
    for (int64_t co = 0; co < p->Co; co++)
        for (int64_t oy = 0; oy < Ho; oy++)
            for (int64_t ox = 0; ox < Wo; ox++) {
                double s = bias ? bias[co] : 0;
                int64_t g = co / Cog;
                for (int64_t ci = 0; ci < Cg; ci++)
                    for (int64_t ky = 0; ky < p->kh; ky++)
                        for (int64_t kx = 0; kx < p->kw; kx++) {
                            int64_t iy = oy * p->sh - p->ph + ky * p->dh;
                            int64_t ix = ox * p->sw - p->pw + kx * p->dw;
                            if (iy < 0 || iy >= p->H || ix < 0 || ix >= p->W) continue;
                            s += (double)x[((g * Cg + ci) * p->H + iy) * p->W + ix] *
                                 w[((co * Cg + ci) * p->kh + ky) * p->kw + kx];
                        }
                y[(co * Ho + oy) * Wo + ox] = s;
            }
}

void ref_group_norm(const float *x, const float *gamma, const float *beta, double *y, int64_t C,
                    int64_t n, int64_t groups, double eps)
{
    int64_t cg = C / groups, m = cg * n;
    for (int64_t g = 0; g < groups; g++) {
        const float *xg = x + g * m;
        double mean = 0, var = 0;
        for (int64_t i = 0; i < m; i++) mean += xg[i];
        mean /= (double)m;
        for (int64_t i = 0; i < m; i++) var += (xg[i] - mean) * (xg[i] - mean);
        var /= (double)m;
        for (int64_t i = 0; i < m; i++) {
            int64_t c = g * cg + i / n;
            y[g * m + i] = (xg[i] - mean) / sqrt(var + eps) * gamma[c] + beta[c];
        }
    }
}

void ref_upsample_nearest(const float *x, double *y, int64_t C, int64_t H, int64_t W, int64_t s)
{
    for (int64_t c = 0; c < C; c++)
        for (int64_t oy = 0; oy < H * s; oy++)
            for (int64_t ox = 0; ox < W * s; ox++)
                y[(c * H * s + oy) * W * s + ox] = x[(c * H + oy / s) * W + ox / s];
}
