/* rlx-run diffuse (the FLUX denoising loop) against diffusers: flux1-denoise is 3 Euler
 * steps of flux1-guidance-tiny (guidance 3.5) from its init_latents with FluxPipeline's
 * schedule; rlx-run diffuse --init-latents … --latents-out … with --height 48 --width 64
 * (no --vae: s = 8, a 3 × 4 token grid) must give its latents within 1e-4 rel L2, also with
 * FLUX.1-dev's scheduler_config.json given by --scheduler. Also:
 * seeded noise is reproducible, bad usage / missing inputs fail with one line, and a full
 * run through a VAE writes a PNG of the requested size (random-weight transformer and VAE
 * with matching shapes, written here: the tiny fixtures' shapes do not chain). */
#include <check.h>
#include <math.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "parity_util.h"
#include "testutil.h"

/* tensors names[] of the flux1-denoise reference into path */
static void extract(const char *path, const char *const *names, int n)
{
    char ref[1024];
    snprintf(ref, sizeof ref, "%s/ref.safetensors", tu_fixture("flux1-denoise"));
    rlx_weights *r = pu_open_st(ref);
    rlx_st_writer *w = rlx_st_writer_new();
    rlx_diag d;
    rlx_diag_init(&d);
    for (int i = 0; i < n; i++) {
        rlx_shape s;
        float *v = pu_read_tensor(r, names[i], &s);
        ck_assert_msg(rlx_st_writer_add(w, names[i], RLX_F32, &s, v, &d) == 0, "%s", d.msg);
        free(v);
    }
    ck_assert_msg(rlx_st_writer_save(w, path, &d) == 0, "%s", d.msg);
    rlx_st_writer_free(w);
    rlx_weights_close(r);
}

typedef struct files {
    char *tmp;
    char text[1024], pooled[1024], init[1024], out[1024];
} files;

static void setup_files(files *f)
{
    f->tmp = tu_mkdtemp();
    snprintf(f->text, sizeof f->text, "%s/text.safetensors", f->tmp);
    snprintf(f->pooled, sizeof f->pooled, "%s/pooled.safetensors", f->tmp);
    snprintf(f->init, sizeof f->init, "%s/init.safetensors", f->tmp);
    snprintf(f->out, sizeof f->out, "%s/latents.safetensors", f->tmp);
    const char *text[] = {"encoder_hidden_states"}, *pooled[] = {"pooled_projections"}, *init[] = {"init_latents"};
    extract(f->text, text, 1);
    extract(f->pooled, pooled, 1);
    extract(f->init, init, 1);
}

static tu_result diffuse(const char *args)
{
    char cmd[16384];
    snprintf(cmd, sizeof cmd, "'%s' diffuse --model '%s' %s", tu_tool("tools/rlx-run"),
             tu_fixture("flux1-guidance-tiny"), args);
    return tu_run(cmd, 240);
}

START_TEST(test_denoise_parity)
{
    files f;
    setup_files(&f);
    char args[8192], sched[2048] = "";
    if (_i == 2) { /* FLUX.1-dev's scheduler_config.json given explicitly */
        char fx[1024], path[1024];
        snprintf(fx, sizeof fx, "%s/flux-schedule.json", tu_fixture("."));
        json_t *root = pu_load_json(fx);
        snprintf(path, sizeof path, "%s/scheduler_config.json", f.tmp);
        ck_assert_int_eq(json_dump_file(json_object_get(root, "scheduler_config"), path, 0), 0);
        json_decref(root);
        snprintf(sched, sizeof sched, " --scheduler '%s'", path);
    }
    snprintf(args, sizeof args,
             "--text-embeddings '%s' --pooled '%s' --steps 3 --guidance 3.5 --seed 0 --height 48 --width 64 "
             "--init-latents '%s' --latents-out '%s'%s%s",
             f.text, f.pooled, f.init, f.out, _i == 1 ? " --policy fusable --threads 2" : "", sched);
    tu_result r = diffuse(args);
    ck_assert_msg(r.status == 0, "diffuse exited %d: %s", r.status, r.err);
    tu_result_free(&r);
    char ref[1024];
    snprintf(ref, sizeof ref, "%s/ref.safetensors", tu_fixture("flux1-denoise"));
    rlx_weights *wo = pu_open_st(f.out), *wr = pu_open_st(ref);
    rlx_shape so, sr;
    float *got = pu_read_tensor(wo, "latents", &so), *want = pu_read_tensor(wr, "latents", &sr);
    ck_assert_msg(so.ndim == 3 && sr.ndim == 3 && so.dims[0] == 1 && so.dims[1] == sr.dims[1] &&
                      so.dims[2] == sr.dims[2],
                  "latents shape differs from the reference");
    double e = tu_rel_l2(got, want, (size_t)rlx_shape_numel(&sr));
    printf("flux1-denoise (3 steps)%s: latents rel L2 %.3g\n", _i == 1 ? " fusable" : _i ? " --scheduler" : "", e);
    ck_assert_msg(e < 1e-4, "flux1-denoise: latents rel L2 %.3g >= 1e-4", e);
    free(got);
    free(want);
    rlx_weights_close(wo);
    rlx_weights_close(wr);
    tu_rmrf(f.tmp);
    free(f.tmp);
}
END_TEST

/* same seed, same latents; another seed, others; no temp file left behind */
START_TEST(test_seeded_noise)
{
    files f;
    setup_files(&f);
    char args[8192], out2[1024], out3[1024];
    snprintf(out2, sizeof out2, "%s/b.safetensors", f.tmp);
    snprintf(out3, sizeof out3, "%s/c.safetensors", f.tmp);
    const char *outs[3] = {f.out, out2, out3};
    const int seeds[3] = {7, 7, 8};
    float *lat[3];
    for (int k = 0; k < 3; k++) {
        snprintf(args, sizeof args,
                 "--text-embeddings '%s' --pooled '%s' --steps 2 --seed %d --height 48 --width 64 --latents-out '%s'",
                 f.text, f.pooled, seeds[k], outs[k]);
        tu_result r = diffuse(args);
        ck_assert_msg(r.status == 0, "diffuse exited %d: %s", r.status, r.err);
        tu_result_free(&r);
        rlx_weights *w = pu_open_st(outs[k]);
        rlx_shape s;
        lat[k] = pu_read_tensor(w, "latents", &s);
        ck_assert(s.ndim == 3 && s.dims[1] == 12 && s.dims[2] == 12);
        rlx_weights_close(w);
    }
    ck_assert_msg(memcmp(lat[0], lat[1], 144 * sizeof(float)) == 0, "seed 7 twice gave different latents");
    ck_assert_msg(memcmp(lat[0], lat[2], 144 * sizeof(float)) != 0, "seeds 7 and 8 gave the same latents");
    for (int k = 0; k < 3; k++) free(lat[k]);
    char ls[2048];
    snprintf(ls, sizeof ls, "ls '%s' | grep -c tmp", f.tmp);
    tu_result r = tu_run(ls, 10);
    ck_assert_msg(strncmp(r.out, "0", 1) == 0, "a temp file was left: %s", r.out);
    tu_result_free(&r);
    tu_rmrf(f.tmp);
    free(f.tmp);
}
END_TEST

START_TEST(test_bad_usage)
{
    files f;
    setup_files(&f);
    char args[8192];
    /* --out without --vae: usage */
    snprintf(args, sizeof args, "--text-embeddings '%s' --pooled '%s' --out '%s/x.png'", f.text, f.pooled, f.tmp);
    tu_result r = diffuse(args);
    ck_assert_msg(r.status == 2 && strstr(r.err, "--out needs --vae"), "exit %d: %s", r.status, r.err);
    tu_result_free(&r);
    /* FLUX.1 without pooled projections: names the tensor and the file */
    snprintf(args, sizeof args, "--text-embeddings '%s' --steps 1 --height 48 --width 64 --latents-out '%s'", f.text,
             f.out);
    r = diffuse(args);
    ck_assert_msg(r.status == 1 && strstr(r.err, "'pooled_projections' not found"), "exit %d: %s", r.status, r.err);
    tu_result_free(&r);
    /* init latents of another grid size */
    snprintf(args, sizeof args,
             "--text-embeddings '%s' --pooled '%s' --steps 1 --height 64 --width 64 --init-latents '%s' "
             "--latents-out '%s'",
             f.text, f.pooled, f.init, f.out);
    r = diffuse(args);
    ck_assert_msg(r.status == 1 && strstr(r.err, "init_latents") && strstr(r.err, "[1, 16, 12]"), "exit %d: %s",
                  r.status, r.err);
    tu_result_free(&r);
    /* a bad number */
    snprintf(args, sizeof args, "--text-embeddings '%s' --steps 0 --latents-out '%s'", f.text, f.out);
    r = diffuse(args);
    ck_assert_msg(r.status == 2, "exit %d: %s", r.status, r.err);
    tu_result_free(&r);
    /* a scheduler option this schedule does not implement: named with its file */
    char bad[1024];
    snprintf(bad, sizeof bad, "%s/scheduler_config.json", f.tmp);
    FILE *sf = fopen(bad, "w");
    ck_assert_ptr_nonnull(sf);
    fputs("{\"_class_name\": \"FlowMatchEulerDiscreteScheduler\", \"use_karras_sigmas\": true}", sf);
    ck_assert_int_eq(fclose(sf), 0);
    snprintf(args, sizeof args, "--text-embeddings '%s' --pooled '%s' --steps 1 --height 48 --width 64 "
             "--scheduler '%s' --latents-out '%s'", f.text, f.pooled, bad, f.out);
    r = diffuse(args);
    ck_assert_msg(r.status == 1 && strstr(r.err, "scheduler_config.json: use_karras_sigmas: only false is supported"),
                  "exit %d: %s", r.status, r.err);
    tu_result_free(&r);
    ck_assert_msg(access(f.out, F_OK) != 0, "a failed run wrote %s", f.out);
    tu_rmrf(f.tmp);
    free(f.tmp);
}
END_TEST

/* ---------------------------------------------------------------- a full run to a PNG */

static uint64_t rs = 0x9E3779B97F4A7C15ull;
static float urand(void) /* [-1, 1) */
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (float)((double)(rs >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

/* dir/config.json = config; dir/diffusion_pytorch_model.safetensors = random tensors with the
 * names and shapes of src's that start with keep ("" = all); conv_in (when named) takes
 * `latent` input channels. Matrices scaled by 1/sqrt(fan_in), norms around 1. */
static void random_model(const char *dir, const char *config, const char *src, const char *keep, const char *conv_in,
                         int64_t latent)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(config, f);
    ck_assert_int_eq(fclose(f), 0);
    rlx_weights *r = pu_open_st(src);
    rlx_st_writer *w = rlx_st_writer_new();
    rlx_diag d;
    rlx_diag_init(&d);
    for (size_t i = 0; i < rlx_weights_count(r); i++) {
        const rlx_tensor_info *t = rlx_weights_at(r, i);
        if (strncmp(t->name, keep, strlen(keep)) != 0) continue;
        rlx_shape s = t->shape;
        if (conv_in && !strcmp(t->name, conv_in)) s.dims[1] = latent;
        size_t n = (size_t)rlx_shape_numel(&s), fan = s.ndim > 1 ? n / (size_t)s.dims[0] : 1;
        float *v = malloc(n * sizeof *v + 1);
        int norm = s.ndim == 1 && strstr(t->name, "norm") && strstr(t->name, "weight");
        for (size_t k = 0; k < n; k++)
            v[k] = s.ndim > 1 ? urand() * (float)sqrt(3.0 / (double)fan) : norm ? 1.0f + 0.1f * urand() : 0.1f * urand();
        ck_assert_msg(rlx_st_writer_add(w, t->name, RLX_F32, &s, v, &d) == 0, "%s", d.msg);
        free(v);
    }
    snprintf(path, sizeof path, "%s/diffusion_pytorch_model.safetensors", dir);
    ck_assert_msg(rlx_st_writer_save(w, path, &d) == 0, "%s", d.msg);
    rlx_st_writer_free(w);
    rlx_weights_close(r);
}

/* flux1-guidance-tiny packs 3 latent channels (in_channels 12): a VAE of the vae-tiny layout
 * (block_out_channels [32, 48]: downsampling 2) with 3 latent channels decodes them */
static const char vae_config[] =
    "{\"_class_name\": \"AutoencoderKL\", \"act_fn\": \"silu\", \"block_out_channels\": [32, 48],\n"
    " \"latent_channels\": 3, \"layers_per_block\": 1, \"norm_num_groups\": 8, \"out_channels\": 3,\n"
    " \"scaling_factor\": 0.3611, \"shift_factor\": 0.1159, \"use_post_quant_conv\": false,\n"
    " \"use_quant_conv\": false, \"up_block_types\": [\"UpDecoderBlock2D\", \"UpDecoderBlock2D\"]}\n";

START_TEST(test_png)
{
    files f;
    setup_files(&f);
    char tdir[1024], vdir[1024], src[1024], png_path[1024], args[8192];
    snprintf(tdir, sizeof tdir, "%s/transformer", f.tmp);
    snprintf(vdir, sizeof vdir, "%s/vae", f.tmp);
    snprintf(png_path, sizeof png_path, "%s/image.png", f.tmp);
    ck_assert_int_eq(mkdir(tdir, 0755), 0);
    ck_assert_int_eq(mkdir(vdir, 0755), 0);
    size_t len;
    char *tcfg = tu_read_file(tu_fixture("flux1-guidance-tiny/config.json"), &len);
    ck_assert_ptr_nonnull(tcfg);
    snprintf(src, sizeof src, "%s", tu_fixture("flux1-guidance-tiny/diffusion_pytorch_model.safetensors"));
    random_model(tdir, tcfg, src, "", NULL, 0);
    free(tcfg);
    snprintf(src, sizeof src, "%s", tu_fixture("vae-tiny/diffusion_pytorch_model.safetensors"));
    random_model(vdir, vae_config, src, "decoder.", "decoder.conv_in.weight", 3);
    char cmd[16384];
    snprintf(cmd, sizeof cmd,
             "'%s' diffuse --model '%s' --vae '%s' --text-embeddings '%s' --pooled '%s' --steps 2 --seed 5 "
             "--height 48 --width 64 --out '%s'",
             tu_tool("tools/rlx-run"), tdir, vdir, f.text, f.pooled, png_path);
    tu_result r = tu_run(cmd, 240);
    ck_assert_msg(r.status == 0, "diffuse exited %d: %s", r.status, r.err);
    ck_assert_msg(strstr(r.err, "\r[") == NULL, "a progress bar on a non-terminal: %s", r.err);
    tu_result_free(&r);
    /* decode it: 64 × 48 RGB, not one flat colour */
    png_image img;
    memset(&img, 0, sizeof img);
    img.version = PNG_IMAGE_VERSION;
    ck_assert_msg(png_image_begin_read_from_file(&img, png_path) != 0, "%s: %s", png_path, img.message);
    ck_assert_uint_eq(img.width, 64);
    ck_assert_uint_eq(img.height, 48);
    img.format = PNG_FORMAT_RGB;
    unsigned char *px = malloc(PNG_IMAGE_SIZE(img));
    ck_assert_msg(png_image_finish_read(&img, NULL, px, 0, NULL) != 0, "%s: %s", png_path, img.message);
    int seen[256] = {0}, distinct = 0;
    for (size_t k = 0; k < (size_t)PNG_IMAGE_SIZE(img); k++) distinct += !seen[px[k]]++;
    printf("diffuse to PNG: 64 x 48, %d distinct channel values\n", distinct);
    ck_assert_msg(distinct >= 16, "the image is (nearly) constant: %d distinct values", distinct);
    free(px);
    snprintf(args, sizeof args, "ls '%s' | grep -c tmp", f.tmp);
    r = tu_run(args, 10);
    ck_assert_msg(strncmp(r.out, "0", 1) == 0, "a temp file was left: %s", r.out);
    tu_result_free(&r);
    /* a VAE whose latent channels do not match the transformer's: one line, no image */
    remove(png_path);
    snprintf(cmd, sizeof cmd,
             "'%s' diffuse --model '%s' --vae '%s' --text-embeddings '%s' --pooled '%s' --steps 1 "
             "--height 48 --width 64 --out '%s'",
             tu_tool("tools/rlx-run"), tdir, tu_fixture("vae-tiny"), f.text, f.pooled, png_path);
    r = tu_run(cmd, 240);
    ck_assert_msg(r.status == 1 && strstr(r.err, "latent_channels 16") && strstr(r.err, "in_channels 12"),
                  "exit %d: %s", r.status, r.err);
    ck_assert_msg(access(png_path, F_OK) != 0, "a failed run wrote %s", png_path);
    tu_result_free(&r);
    tu_rmrf(f.tmp);
    free(f.tmp);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("flux_diffuse");
    TCase *c = tcase_create("diffuse");
    tcase_set_timeout(c, 300);
    tcase_add_loop_test(c, test_denoise_parity, 0, 3);
    tcase_add_test(c, test_seeded_noise);
    tcase_add_test(c, test_bad_usage);
    tcase_add_test(c, test_png);
    suite_add_tcase(s, c);
    return s;
}

int main(void)
{
    return tu_run_suite(suite());
}
