/* rlx-run diffuse (the FLUX denoising loop) against diffusers: flux1-denoise is 3 Euler
 * steps of flux1-guidance-tiny (guidance 3.5) from its init_latents with FluxPipeline's
 * schedule; rlx-run diffuse --init-latents … --latents-out … with --height 48 --width 64
 * (no --vae: s = 8, a 3 × 4 token grid) must give its latents within 1e-4 rel L2. Also:
 * seeded noise is reproducible, and bad usage / missing inputs fail with one line. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "rlx/rlx.h"
#include "testutil.h"

static rlx_weights *open_st(const char *path)
{
    rlx_weights *w = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_weights_open(path, &w, &d) == 0, "%s", d.msg);
    return w;
}

static float *read_f32(const rlx_weights *w, const char *name, rlx_shape *shape)
{
    const rlx_tensor_info *t = rlx_weights_find(w, name);
    ck_assert_msg(t != NULL, "tensor %s missing", name);
    size_t n = (size_t)rlx_shape_numel(&t->shape);
    float *v = malloc(n * sizeof *v + 1);
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_weights_read(t, RLX_F32, v, n, &d) == 0, "%s", d.msg);
    *shape = t->shape;
    return v;
}

/* tensors names[] of the flux1-denoise reference into path */
static void extract(const char *path, const char *const *names, int n)
{
    char ref[1024];
    snprintf(ref, sizeof ref, "%s/ref.safetensors", tu_fixture("flux1-denoise"));
    rlx_weights *r = open_st(ref);
    rlx_st_writer *w = rlx_st_writer_new();
    rlx_diag d;
    rlx_diag_init(&d);
    for (int i = 0; i < n; i++) {
        rlx_shape s;
        float *v = read_f32(r, names[i], &s);
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
    char args[8192];
    snprintf(args, sizeof args,
             "--text-embeddings '%s' --pooled '%s' --steps 3 --guidance 3.5 --seed 0 --height 48 --width 64 "
             "--init-latents '%s' --latents-out '%s'%s",
             f.text, f.pooled, f.init, f.out, _i ? " --policy fusable --threads 2" : "");
    tu_result r = diffuse(args);
    ck_assert_msg(r.status == 0, "diffuse exited %d: %s", r.status, r.err);
    tu_result_free(&r);
    char ref[1024];
    snprintf(ref, sizeof ref, "%s/ref.safetensors", tu_fixture("flux1-denoise"));
    rlx_weights *wo = open_st(f.out), *wr = open_st(ref);
    rlx_shape so, sr;
    float *got = read_f32(wo, "latents", &so), *want = read_f32(wr, "latents", &sr);
    ck_assert_msg(so.ndim == 3 && sr.ndim == 3 && so.dims[0] == 1 && so.dims[1] == sr.dims[1] &&
                      so.dims[2] == sr.dims[2],
                  "latents shape differs from the reference");
    double e = tu_rel_l2(got, want, (size_t)rlx_shape_numel(&sr));
    printf("flux1-denoise (3 steps)%s: latents rel L2 %.3g\n", _i ? " fusable" : "", e);
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
        rlx_weights *w = open_st(outs[k]);
        rlx_shape s;
        lat[k] = read_f32(w, "latents", &s);
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
    ck_assert_msg(access(f.out, F_OK) != 0, "a failed run wrote %s", f.out);
    tu_rmrf(f.tmp);
    free(f.tmp);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("flux_diffuse");
    TCase *c = tcase_create("diffuse");
    tcase_set_timeout(c, 300);
    tcase_add_loop_test(c, test_denoise_parity, 0, 2);
    tcase_add_test(c, test_seeded_noise);
    tcase_add_test(c, test_bad_usage);
    suite_add_tcase(s, c);
    return s;
}

int main(void)
{
    return tu_run_suite(suite());
}
