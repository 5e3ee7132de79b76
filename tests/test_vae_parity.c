/* AutoencoderKL decoder parity through the CLI: rlx-run forward on tests/fixtures/vae-tiny
 * (FLUX.1 VAE layout: 16 latent channels, scaling and shift factors, no quant convs) gives
 * diffusers' float64 `sample` = decode(latents / scaling_factor + shift_factor) from
 * `latents` [1, 16, 6, 5]; a wrong latent channel count or a missing input is exit 1
 * naming the tensor. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "parity_util.h"
#include "testutil.h"

static const char *const extras[3] = {"--policy fusable", "--policy direct --threads 2", "--threads 1"};

/* latents [1, c, 6, 5] (the reference's when c = 16) into path under the name `name` */
static void write_latents(const char *path, const char *name, int64_t c)
{
    rlx_weights *r = pu_open_ref("vae-tiny");
    size_t n;
    float *lat = pu_read_f32(r, "latents", &n);
    rlx_shape s = {4, {1, c, 6, 5}};
    float *v = calloc((size_t)(c * 30), sizeof *v);
    memcpy(v, lat, (size_t)(c < 16 ? c : 16) * 30 * sizeof *v);
    rlx_st_writer *w = rlx_st_writer_new();
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_st_writer_add(w, name, RLX_F32, &s, v, &d) == 0, "%s", d.msg);
    ck_assert_msg(rlx_st_writer_save(w, path, &d) == 0, "%s", d.msg);
    rlx_st_writer_free(w);
    free(v);
    free(lat);
    rlx_weights_close(r);
}

static tu_result forward(const char *in, const char *out, const char *extra)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s' --out '%s' %s", tu_tool("tools/rlx-run"),
             tu_fixture("vae-tiny"), in, out, extra);
    return tu_run(cmd, 240);
}

START_TEST(test_decode_parity)
{
    char *tmp = tu_mkdtemp(), in[1024], out[1024];
    snprintf(in, sizeof in, "%s/in.safetensors", tmp);
    snprintf(out, sizeof out, "%s/out.safetensors", tmp);
    write_latents(in, "latents", 16);
    tu_result r = forward(in, out, extras[_i]);
    ck_assert_msg(r.status == 0, "forward %s exited %d: %s", extras[_i], r.status, r.err);
    tu_result_free(&r);
    rlx_weights *wo = pu_open_st(out), *wr = pu_open_ref("vae-tiny");
    const rlx_tensor_info *t = rlx_weights_find(wo, "sample");
    ck_assert_msg(t != NULL, "no sample in the output");
    rlx_shape want = {4, {1, 3, 12, 10}};
    ck_assert_msg(t->shape.ndim == 4 && !memcmp(t->shape.dims, want.dims, 4 * sizeof want.dims[0]),
                  "sample is not [1, 3, 12, 10]");
    size_t ng, nr;
    float *got = pu_read_f32(wo, "sample", &ng), *ref = pu_read_f32(wr, "sample", &nr);
    ck_assert_uint_eq(ng, nr);
    double e = tu_rel_l2(got, ref, nr);
    printf("vae-tiny %s: sample rel L2 %.3g\n", extras[_i], e);
    ck_assert_msg(e < 1e-4, "vae-tiny %s: sample rel L2 %.3g >= 1e-4", extras[_i], e);
    free(got);
    free(ref);
    rlx_weights_close(wo);
    rlx_weights_close(wr);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

START_TEST(test_bad_inputs)
{
    char *tmp = tu_mkdtemp(), in[1024], out[1024];
    snprintf(in, sizeof in, "%s/in.safetensors", tmp);
    snprintf(out, sizeof out, "%s/out.safetensors", tmp);
    write_latents(in, "latents", 4);
    tu_result r = forward(in, out, "");
    ck_assert_msg(r.status == 1, "exit %d, expected 1", r.status);
    ck_assert_msg(strstr(r.err, "input tensor \"latents\": expected F32 [B] + [16, 6, 5], found F32 [1, 4, 6, 5]"),
                  "stderr: %s", r.err);
    tu_result_free(&r);
    write_latents(in, "latent", 16);
    r = forward(in, out, "");
    ck_assert_msg(r.status == 1, "exit %d, expected 1", r.status);
    ck_assert_msg(strstr(r.err, "input tensor \"latent\": not an input of this model (inputs: latents)"),
                  "stderr: %s", r.err);
    tu_result_free(&r);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("vae");
    TCase *c = tcase_create("parity");
    tcase_set_timeout(c, 300);
    tcase_add_loop_test(c, test_decode_parity, 0, 3);
    tcase_add_test(c, test_bad_inputs);
    suite_add_tcase(s, c);
    return s;
}

int main(void)
{
    return tu_run_suite(suite());
}
