/* rlx-run diffuse: the FLUX denoising loop as diffusers' FluxPipeline runs it, on a
 * transformer folder (FluxTransformer2DModel / Flux2Transformer2DModel):
 *   packed latents x [T, C] (T = h·w tokens of 2×2 latent patches; seeded Gaussian noise,
 *   or --init-latents), img_ids / txt_ids grids for the image size, the schedule of
 *   tools/flux_schedule.c (the scheduler_config.json of --scheduler or of the pipeline's
 *   scheduler/ folder beside the transformer's, else FLUX.1-dev's; mu from T as FluxPipeline
 *   computes it, or as Flux2Pipeline does for FLUX.2), then per step
 *     v = transformer(x, text, timestep = t / 1000, guidance, pooled, ids)
 *     x += (sigma_next - sigma) · v
 *   and the final latents written (--latents-out) and, with --vae, unpacked, decoded by
 *   the VAE folder's model (latents -> sample) and written as a PNG (--out).
 * The text encoders are separate models: their outputs are the --text-embeddings input. */
#include <errno.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "flux_schedule.h"
#include "run_cmds.h"
#include "run_common.h"

static const char usage[] =
    "usage: rlx-run diffuse --model TRANSFORMER_DIR [--vae VAE_DIR] --text-embeddings EMB.safetensors "
    "[--pooled POOLED.safetensors] [--steps N] [--guidance G] [--seed S] [--height H] [--width W] "
    "[--init-latents L0.safetensors] [--latents-out L.safetensors] [--out IMAGE.png] "
    "[--scheduler scheduler_config.json] [--backend NAME] [--profile NAME|FILE] [--threads N]";

static const char help[] =
    "usage: rlx-run diffuse --model TRANSFORMER_DIR --text-embeddings EMB.safetensors [options]\n"
    "FLUX text-to-image: flow-matching Euler steps with FLUX's scheduler (FlowMatchEulerDiscreteScheduler,\n"
    "dynamic shifting, as diffusers computes it), then the VAE decode and a PNG.\n"
    "The text encoders (CLIP + T5 for FLUX.1, a causal LM for FLUX.2) are separate models:\n"
    "their outputs are the embeddings given here.\n"
    "\n"
    "  --model DIR              transformer folder (diffusers FluxTransformer2DModel / Flux2Transformer2DModel)\n"
    "  --vae DIR                VAE folder (AutoencoderKL); needed for --out\n"
    "  --text-embeddings FILE   safetensors with encoder_hidden_states [1, S, joint_attention_dim]\n"
    "                           (and pooled_projections, unless --pooled gives them)\n"
    "  --pooled FILE            safetensors with pooled_projections [1, pooled_projection_dim] (FLUX.1)\n"
    "  --steps N                denoising steps (default 28)\n"
    "  --guidance G             guidance scale for guidance-distilled models (default 3.5)\n"
    "  --seed S                 seed of the initial noise (default 0)\n"
    "  --height H, --width W    image size in pixels (default 1024); the packed latent grid is\n"
    "                           H / (2·s) × W / (2·s) tokens, s the VAE's downsampling factor (8 without --vae)\n"
    "  --init-latents FILE      packed initial latents init_latents [1, h·w, C] instead of noise\n"
    "  --latents-out FILE       write the final packed latents (latents [1, h·w, C])\n"
    "  --out FILE.png           write the decoded image (needs --vae)\n"
    "  --scheduler FILE         the pipeline's scheduler_config.json (FlowMatchEulerDiscreteScheduler);\n"
    "                           default: TRANSFORMER_DIR/../scheduler/scheduler_config.json when it\n"
    "                           exists, else FLUX.1-dev's values\n"
    "  --backend, --profile, --threads, --policy, --precision, --mixed: as for forward\n"
    "  -h, --help               this help\n";

/* one named input tensor of the transformer, F32 */
static rlx_tensor_info tensor(const char *name, const float *data, uint32_t ndim, const int64_t *dims)
{
    rlx_tensor_info t;
    memset(&t, 0, sizeof t);
    t.name = name;
    t.dtype = RLX_F32;
    t.shape.ndim = ndim;
    for (uint32_t i = 0; i < ndim; i++) t.shape.dims[i] = dims[i];
    t.data = data;
    t.nbytes = (size_t)rlx_shape_numel(&t.shape) * sizeof(float);
    return t;
}

/* a tensor of a safetensors file as F32, with its shape; NULL (after the message) if absent */
static float *read_tensor(const rlx_weights *w, const char *file, const char *name, rlx_shape *shape, int need)
{
    const rlx_tensor_info *t = rlx_weights_find(w, name);
    if (!t) {
        if (need) run_error("%s: tensor '%s' not found", file, name);
        return NULL;
    }
    size_t n = (size_t)rlx_shape_numel(&t->shape);
    float *v = malloc(n * sizeof *v + 1);
    rlx_diag d;
    rlx_diag_init(&d);
    if (!v) return run_error("out of memory"), NULL;
    if (rlx_weights_read(t, RLX_F32, v, n, &d) != 0) {
        run_fail(&d);
        free(v);
        return NULL;
    }
    *shape = t->shape;
    return v;
}

/* drop a leading batch dim of 1 */
static int unbatch(rlx_shape *s, uint32_t ndim)
{
    if (s->ndim == ndim + 1 && s->dims[0] == 1) {
        memmove(&s->dims[0], &s->dims[1], ndim * sizeof s->dims[0]);
        s->ndim = ndim;
    }
    return s->ndim == ndim ? 0 : -1;
}

/* splitmix64 -> uniform (0, 1) -> Box-Muller: the documented seeded noise (not torch's stream) */
static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void gaussian(float *x, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i += 2) {
        double u1 = ((double)(splitmix(&s) >> 11) + 0.5) / 9007199254740992.0;
        double u2 = ((double)(splitmix(&s) >> 11) + 0.5) / 9007199254740992.0;
        double r = sqrt(-2.0 * log(u1));
        x[i] = (float)(r * cos(2 * 3.14159265358979323846 * u2));
        if (i + 1 < n) x[i + 1] = (float)(r * sin(2 * 3.14159265358979323846 * u2));
    }
}

/* "PATH.tmp-PID", renamed over PATH once written whole */
static int tmp_name(char *buf, size_t cap, const char *path)
{
    int n = snprintf(buf, cap, "%s.tmp-%ld", path, (long)getpid());
    return n < 0 || (size_t)n >= cap ? -1 : 0;
}

static int save_latents(const char *path, const float *x, int64_t T, int64_t C)
{
    char tmp[4096];
    if (tmp_name(tmp, sizeof tmp, path)) return run_error("%s: path too long", path);
    rlx_st_writer *w = rlx_st_writer_new();
    rlx_diag d;
    rlx_diag_init(&d);
    rlx_shape s = {3, {1, T, C}};
    int rc = !w ? run_error("out of memory") : 0;
    if (!rc && (rlx_st_writer_add(w, "latents", RLX_F32, &s, x, &d) || rlx_st_writer_save(w, tmp, &d)))
        rc = run_fail(&d);
    rlx_st_writer_free(w);
    if (!rc && rename(tmp, path) != 0) rc = run_error("%s: %s", path, strerror(errno));
    if (rc) remove(tmp);
    return rc;
}

/* sample [3, H, W] in [-1, 1] -> an 8-bit RGB PNG, as diffusers' VaeImageProcessor
 * postprocesses it ((x / 2 + 0.5) clamped to [0, 1], × 255, rounded) */
static int save_png(const char *path, const float *sample, int64_t H, int64_t W)
{
    char tmp[4096];
    if (tmp_name(tmp, sizeof tmp, path)) return run_error("%s: path too long", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return run_error("%s: %s", tmp, strerror(errno));
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    unsigned char *row = malloc((size_t)W * 3 + 1);
    if (!png || !info || !row) {
        png_destroy_write_struct(&png, info ? &info : NULL);
        free(row);
        fclose(f);
        remove(tmp);
        return run_error("out of memory");
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        free(row);
        fclose(f);
        remove(tmp);
        return run_error("%s: libpng failed writing the image", path);
    }
    png_init_io(png, f);
    png_set_IHDR(png, info, (png_uint_32)W, (png_uint_32)H, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
                 PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    png_write_info(png, info);
    for (int64_t y = 0; y < H; y++) {
        for (int64_t x = 0; x < W; x++)
            for (int c = 0; c < 3; c++) {
                double v = sample[((int64_t)c * H + y) * W + x] / 2.0 + 0.5;
                v = v < 0 ? 0 : v > 1 ? 1 : v;
                row[x * 3 + c] = (unsigned char)lrint(v * 255.0);
            }
        png_write_row(png, row);
    }
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(row);
    if (fclose(f) != 0) {
        remove(tmp);
        return run_error("%s: %s", path, strerror(errno));
    }
    if (rename(tmp, path) != 0) {
        remove(tmp);
        return run_error("%s: %s", path, strerror(errno));
    }
    return 0;
}

/* where the transformer's output goes */
typedef struct sink_buf {
    const char *name;
    float *data;
    size_t numel;
    int got;
} sink_buf;

static int sink(void *user, const char *name, int dtype, const rlx_shape *shape, const void *data, rlx_diag *d)
{
    sink_buf *b = user;
    if (strcmp(name, b->name) != 0) return 0;
    if (dtype != RLX_F32 || (size_t)rlx_shape_numel(shape) != b->numel)
        return rlx_diag_set(d, RLX_ERR_INVALID, "model output \"%s\": %lld values, expected %zu", name,
                            (long long)rlx_shape_numel(shape), b->numel);
    memcpy(b->data, data, b->numel * sizeof(float));
    b->got = 1;
    return 0;
}

static void progress(int step, int steps, double ms)
{
    if (!isatty(fileno(stderr))) return;
    int width = 30, done = steps ? step * width / steps : width;
    fprintf(stderr, "\r[%.*s%*s] step %d/%d  %.1f s", done, "##############################", width - done, "", step,
            steps, ms / 1000.0);
    if (step == steps) fputc('\n', stderr);
    fflush(stderr);
}

typedef struct diffuse_args {
    const char *model, *vae, *text, *pooled, *init, *latents_out, *out, *scheduler;
    long long steps, seed, height, width;
    double guidance;
} diffuse_args;

/* the number a config.json of dir gives for key (def when absent) */
static double dir_config_number(const char *dir, const char *key, double def)
{
    rlx_config *c = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    double v = def;
    if (rlx_config_open(dir, &c, &d) == 0 && rlx_config_number(c, key, &v) != 0) v = def;
    rlx_config_free(c);
    return v;
}

/* the VAE's downsampling factor 2^(len(block_out_channels) - 1) */
static int vae_scale(const char *dir, int64_t *s)
{
    *s = 8;
    if (!dir) return 0;
    rlx_config *c = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    if (rlx_config_open(dir, &c, &d) != 0) return run_fail(&d);
    int n = 0;
    double v;
    for (; n < 16; n++) {
        char key[64];
        snprintf(key, sizeof key, "block_out_channels.%d", n);
        if (rlx_config_number(c, key, &v) != 0) break;
    }
    rlx_config_free(c);
    if (n < 1) return run_error("%s/config.json: block_out_channels: expected a non-empty array", dir);
    *s = (int64_t)1 << (n - 1);
    return 0;
}

/* --scheduler, else the pipeline folder's scheduler/scheduler_config.json beside the
 * transformer's folder, else FLUX.1-dev's values */
static int schedule_config(const diffuse_args *a, flux_sched_config *sc)
{
    char path[4096], err[1024];
    flux_schedule_defaults(sc);
    if (a->scheduler) snprintf(path, sizeof path, "%s", a->scheduler);
    else if (snprintf(path, sizeof path, "%s/../scheduler/scheduler_config.json", a->model) >= (int)sizeof path ||
             access(path, F_OK) != 0)
        return 0;
    if (flux_schedule_load(path, sc, err, sizeof err) != 0) return run_error("%s", err);
    return 0;
}

static int diffuse(const diffuse_args *a, const run_model_flags *mf)
{
    rlx_diag d;
    rlx_diag_init(&d);
    int64_t s = 8;
    if (vae_scale(a->vae, &s)) return 1;
    int64_t h = a->height / (2 * s), w = a->width / (2 * s), T = h * w;
    if (h < 1 || w < 1)
        return run_error("--height %lld --width %lld: smaller than one latent patch (%lld pixels)", a->height,
                         a->width, (long long)(2 * s));
    rlx_model_options mo;
    run_model_options(mf, &mo);
    rlx_model *m = NULL, *vae = NULL;
    rlx_weights *tw = NULL, *pw = NULL, *iw = NULL;
    float *enc = NULL, *pooled = NULL, *x = NULL, *v = NULL, *img = NULL, *txt = NULL, *sample = NULL;
    float *ts = NULL, *sg = NULL;
    int rc = 0;
    if (rlx_model_open(a->model, &mo, &m, &d) != 0) {
        rc = run_fail(&d);
        goto done;
    }
    const rlx_model_config *cfg = rlx_model_get_config(m);
    int flux2 = strncmp(cfg->architecture, "Flux2", 5) == 0;
    int with_guidance = dir_config_number(a->model, "guidance_embeds", flux2) != 0;
    int64_t C = cfg->in_channels, A = cfg->rope_axes, P = cfg->pooled_dim, Dj = cfg->context_dim;
    if (strcmp(cfg->model_type, "flux") != 0 || C < 1 || A < 3) {
        rc = run_error("%s: diffuse needs a FLUX transformer folder (FluxTransformer2DModel / "
                       "Flux2Transformer2DModel)", a->model);
        goto done;
    }
    if (a->vae && rlx_model_open(a->vae, &mo, &vae, &d) != 0) {
        rc = run_fail(&d);
        goto done;
    }
    if (vae) { /* the VAE decodes the unpacked latents: C / 4 channels of 2×2 patches */
        const rlx_model_config *vc = rlx_model_get_config(vae);
        if (strcmp(vc->model_type, "autoencoder_kl") != 0) {
            rc = run_error("%s: --vae needs an AutoencoderKL folder", a->vae);
            goto done;
        }
        if (vc->in_channels * 4 != C) {
            rc = run_error("%s: latent_channels %lld do not match the transformer's in_channels %lld (4 per latent "
                           "channel)", a->vae, (long long)vc->in_channels, (long long)C);
            goto done;
        }
    }
    flux_sched_config sc;
    if ((rc = schedule_config(a, &sc)) != 0) goto done;
    /* text conditioning */
    rlx_shape es, ps;
    if (rlx_weights_open(a->text, &tw, &d) != 0) {
        rc = run_fail(&d);
        goto done;
    }
    if (!(enc = read_tensor(tw, a->text, "encoder_hidden_states", &es, 1))) {
        rc = 1;
        goto done;
    }
    if (unbatch(&es, 2) || es.dims[1] != Dj || es.dims[0] < 1) {
        rc = run_error("%s: tensor 'encoder_hidden_states': expected [1, S, %lld]", a->text, (long long)Dj);
        goto done;
    }
    int64_t S = es.dims[0];
    if (P > 0) {
        const char *pf = a->pooled ? a->pooled : a->text;
        if (a->pooled && rlx_weights_open(a->pooled, &pw, &d) != 0) {
            rc = run_fail(&d);
            goto done;
        }
        if (!(pooled = read_tensor(pw ? pw : tw, pf, "pooled_projections", &ps, 1))) {
            rc = 1;
            goto done;
        }
        if (unbatch(&ps, 1) || ps.dims[0] != P) {
            rc = run_error("%s: tensor 'pooled_projections': expected [1, %lld]", pf, (long long)P);
            goto done;
        }
    }
    /* latents */
    x = malloc((size_t)(T * C) * sizeof *x + 1);
    v = malloc((size_t)(T * C) * sizeof *v + 1);
    img = calloc((size_t)(T * A) + 1, sizeof *img);
    txt = calloc((size_t)(S * A) + 1, sizeof *txt);
    ts = calloc((size_t)a->steps + 1, sizeof *ts);
    sg = calloc((size_t)a->steps + 2, sizeof *sg);
    if (!x || !v || !img || !txt || !ts || !sg) {
        rc = run_error("out of memory");
        goto done;
    }
    if (a->init) {
        rlx_shape is;
        float *l0 = NULL;
        if (rlx_weights_open(a->init, &iw, &d) != 0) {
            rc = run_fail(&d);
            goto done;
        }
        if (!(l0 = read_tensor(iw, a->init, "init_latents", &is, 1))) {
            rc = 1;
            goto done;
        }
        if (unbatch(&is, 2) || is.dims[0] != T || is.dims[1] != C) {
            free(l0);
            rc = run_error("%s: tensor 'init_latents': expected [1, %lld, %lld] (%lld × %lld tokens for %lld × %lld "
                           "pixels)", a->init, (long long)T, (long long)C, (long long)h, (long long)w, a->height,
                           a->width);
            goto done;
        }
        memcpy(x, l0, (size_t)(T * C) * sizeof *x);
        free(l0);
    } else {
        gaussian(x, (size_t)(T * C), (uint64_t)a->seed);
    }
    /* rope ids: image (0, row, col[, 0]); text 0 (FLUX.1) | (0, 0, 0, index) (FLUX.2) */
    for (int64_t i = 0; i < T; i++) {
        img[i * A + 1] = (float)(i / w);
        img[i * A + 2] = (float)(i % w);
    }
    if (A >= 4)
        for (int64_t i = 0; i < S; i++) txt[i * A + 3] = (float)i;
    /* the schedule: FluxPipeline's calculate_shift, Flux2Pipeline's compute_empirical_mu */
    double mu = flux2 ? flux2_empirical_mu(T, (int)a->steps) : flux_calculate_shift(T, &sc);
    flux_set_timesteps(&sc, (int)a->steps, mu, ts, sg);
    float tstep = 0, guid = (float)a->guidance;
    int64_t hs_dims[3] = {1, T, C}, enc_dims[3] = {1, S, Dj}, one[1] = {1}, pd[2] = {1, P};
    int64_t img_dims[2] = {T, A}, txt_dims[2] = {S, A};
    rlx_tensor_info in[7];
    size_t n = 0;
    in[n++] = tensor("hidden_states", x, 3, hs_dims);
    in[n++] = tensor("encoder_hidden_states", enc, 3, enc_dims);
    in[n++] = tensor("timestep", &tstep, 1, one);
    in[n++] = tensor("img_ids", img, 2, img_dims);
    in[n++] = tensor("txt_ids", txt, 2, txt_dims);
    if (P > 0) in[n++] = tensor("pooled_projections", pooled, 2, pd);
    if (with_guidance) in[n++] = tensor("guidance", &guid, 1, one);
    double t0 = run_now_ms();
    for (int k = 0; k < (int)a->steps; k++) {
        tstep = (float)((double)ts[k] / 1000.0);
        sink_buf out = {"output", v, (size_t)(T * C), 0};
        if (rlx_model_forward_mem(m, in, n, sink, &out, &d) != 0) {
            rc = run_fail(&d);
            goto done;
        }
        if (!out.got) {
            rc = run_error("%s: the model has no output \"output\"", a->model);
            goto done;
        }
        flux_euler_step(x, v, (size_t)(T * C), sg[k], sg[k + 1]);
        progress(k + 1, (int)a->steps, run_now_ms() - t0);
    }
    if (a->latents_out && (rc = save_latents(a->latents_out, x, T, C)) != 0) goto done;
    if (vae && a->out) {
        /* unpack [h·w, c·2·2] -> [c, 2h, 2w] (FluxPipeline._unpack_latents) */
        int64_t c = C / 4, H2 = 2 * h, W2 = 2 * w;
        float *z = malloc((size_t)(T * C) * sizeof *z + 1);
        if (!z) {
            rc = run_error("out of memory");
            goto done;
        }
        for (int64_t i = 0; i < h; i++)
            for (int64_t j = 0; j < w; j++)
                for (int64_t ch = 0; ch < c; ch++)
                    for (int64_t p = 0; p < 2; p++)
                        for (int64_t q = 0; q < 2; q++)
                            z[(ch * H2 + 2 * i + p) * W2 + 2 * j + q] = x[(i * w + j) * C + ch * 4 + p * 2 + q];
        int64_t zd[4] = {1, c, H2, W2};
        rlx_tensor_info zi = tensor("latents", z, 4, zd);
        int64_t H = H2 * s, W = W2 * s;
        sample = malloc((size_t)(3 * H * W) * sizeof *sample + 1);
        sink_buf out = {"sample", sample, (size_t)(3 * H * W), 0};
        if (!sample) rc = run_error("out of memory");
        else if (rlx_model_forward_mem(vae, &zi, 1, sink, &out, &d) != 0) rc = run_fail(&d);
        else if (!out.got) rc = run_error("%s: the VAE gives no sample [1, 3, %lld, %lld]", a->vae, (long long)H,
                                          (long long)W);
        free(z);
        if (!rc) rc = save_png(a->out, sample, H, W);
    }
done:
    free(enc);
    free(pooled);
    free(x);
    free(v);
    free(img);
    free(txt);
    free(ts);
    free(sg);
    free(sample);
    rlx_weights_close(tw);
    rlx_weights_close(pw);
    rlx_weights_close(iw);
    rlx_model_close(vae);
    rlx_model_close(m);
    return rc;
}

int rlx_cmd_diffuse(int argc, char **argv)
{
    diffuse_args a = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, 28, 0, 1024, 1024, 3.5};
    run_model_flags mf;
    memset(&mf, 0, sizeof mf);
    for (int i = 0; i < argc; i++) {
        int r;
        const char *v;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(help, stdout);
            return 0;
        }
        if ((r = run_model_flag(argc, argv, &i, &mf, usage)) != 0) {
            if (r < 0) return fprintf(stderr, "%s\n", usage), 2;
            continue;
        }
        const char **slot = NULL, *opt = argv[i];
        long long *num = NULL, lo = 0, hi = 0;
        if ((r = run_opt(argc, argv, &i, "--model", &v)) != 0) slot = &a.model;
        else if ((r = run_opt(argc, argv, &i, "--vae", &v)) != 0) slot = &a.vae;
        else if ((r = run_opt(argc, argv, &i, "--text-embeddings", &v)) != 0) slot = &a.text;
        else if ((r = run_opt(argc, argv, &i, "--pooled", &v)) != 0) slot = &a.pooled;
        else if ((r = run_opt(argc, argv, &i, "--init-latents", &v)) != 0) slot = &a.init;
        else if ((r = run_opt(argc, argv, &i, "--latents-out", &v)) != 0) slot = &a.latents_out;
        else if ((r = run_opt(argc, argv, &i, "--out", &v)) != 0) slot = &a.out;
        else if ((r = run_opt(argc, argv, &i, "--scheduler", &v)) != 0) slot = &a.scheduler;
        else if ((r = run_opt(argc, argv, &i, "--steps", &v)) != 0) num = &a.steps, lo = 1, hi = 1000;
        else if ((r = run_opt(argc, argv, &i, "--seed", &v)) != 0) num = &a.seed, lo = 0, hi = INT64_MAX;
        else if ((r = run_opt(argc, argv, &i, "--height", &v)) != 0) num = &a.height, lo = 1, hi = 16384;
        else if ((r = run_opt(argc, argv, &i, "--width", &v)) != 0) num = &a.width, lo = 1, hi = 16384;
        else if ((r = run_opt(argc, argv, &i, "--guidance", &v)) != 0) {
            if (r < 0 || run_double("--guidance", v, -1000, 1000, &a.guidance) != 0)
                return fprintf(stderr, "%s\n", usage), 2;
            continue;
        } else
            return run_usage(usage, "%s '%s'", argv[i][0] == '-' ? "unknown option" : "unexpected argument",
                             argv[i]);
        if (r < 0) return fprintf(stderr, "%s\n", usage), 2;
        if (slot) *slot = v;
        else if (run_int(opt, v, lo, hi, num) != 0)
            return fprintf(stderr, "%s\n", usage), 2;
    }
    if (!a.model || !a.text) return run_usage(usage, "diffuse needs --model and --text-embeddings");
    if (a.out && !a.vae) return run_usage(usage, "--out needs --vae (the decoder that turns latents into pixels)");
    if (!a.out && !a.latents_out) return run_usage(usage, "diffuse needs --out or --latents-out");
    return diffuse(&a, &mf);
}
