/* SAM parity through the CLI: rlx-run forward on tests/fixtures/sam-tiny (transformers
 * SamModel, float64 reference): pixel_values + one point prompt -> image_embeddings,
 * pred_masks, iou_scores; the second stage alone from the reference image_embeddings; a
 * box prompt, several prompt sets and multimask_output 0 with transformers' shapes; bad
 * input combinations refused by name. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rlx/rlx.h"
#include "parity_util.h"
#include "testutil.h"

/* one tensor for an inputs file */
typedef struct in_t {
    const char *name;
    int dtype;
    rlx_shape shape;
    const void *data;
} in_t;

static void write_st(const char *path, const in_t *t, size_t n)
{
    rlx_st_writer *w = rlx_st_writer_new();
    rlx_diag d;
    rlx_diag_init(&d);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(rlx_st_writer_add(w, t[i].name, t[i].dtype, &t[i].shape, t[i].data, &d) == 0, "%s", d.msg);
    ck_assert_msg(rlx_st_writer_save(w, path, &d) == 0, "%s", d.msg);
    rlx_st_writer_free(w);
}

static tu_result forward(const char *in, const char *out, const char *extra)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s' --out '%s' %s", tu_tool("tools/rlx-run"),
             tu_fixture("sam-tiny"), in, out, extra);
    return tu_run(cmd, 240);
}

/* out's tensor name against the reference's, within 1e-4 relative L2 */
static void check_close(const char *out, const char *name, const char *what)
{
    rlx_weights *wo = pu_open_st(out), *wr = pu_open_ref("sam-tiny");
    rlx_shape so, sr;
    float *got = pu_read_tensor(wo, name, &so), *want = pu_read_tensor(wr, name, &sr);
    ck_assert_msg(so.ndim == sr.ndim, "%s: %s has %u dims, the reference %u", what, name, so.ndim, sr.ndim);
    for (uint32_t i = 0; i < sr.ndim; i++)
        ck_assert_msg(so.dims[i] == sr.dims[i], "%s: %s dim %u is %lld, the reference's %lld", what, name, i,
                      (long long)so.dims[i], (long long)sr.dims[i]);
    double e = tu_rel_l2(got, want, (size_t)rlx_shape_numel(&sr));
    printf("sam-tiny %s: %s rel L2 %.3g\n", what, name, e);
    ck_assert_msg(e < 1e-4, "%s: %s rel L2 %.3g >= 1e-4", what, name, e);
    free(got);
    free(want);
    rlx_weights_close(wo);
    rlx_weights_close(wr);
}

static void check_shape(const char *out, const char *name, uint32_t nd, const int64_t *dims)
{
    rlx_weights *w = pu_open_st(out);
    const rlx_tensor_info *t = rlx_weights_find(w, name);
    ck_assert_msg(t != NULL, "%s missing from the outputs", name);
    ck_assert_msg(t->shape.ndim == nd, "%s: %u dims, expected %u", name, t->shape.ndim, nd);
    for (uint32_t i = 0; i < nd; i++)
        ck_assert_msg(t->shape.dims[i] == dims[i], "%s dim %u: %lld, expected %lld", name, i,
                      (long long)t->shape.dims[i], (long long)dims[i]);
    rlx_weights_close(w);
}

static int has_tensor(const char *out, const char *name)
{
    rlx_weights *w = pu_open_st(out);
    int r = rlx_weights_find(w, name) != NULL;
    rlx_weights_close(w);
    return r;
}

typedef struct refs {
    rlx_weights *w;
    rlx_shape sp, spt, semb;
    float *px, *pts, *emb;
    int32_t lab[1];
} refs;

static void refs_open(refs *r)
{
    r->w = pu_open_ref("sam-tiny");
    r->px = pu_read_tensor(r->w, "pixel_values", &r->sp);
    r->pts = pu_read_tensor(r->w, "input_points", &r->spt);
    r->emb = pu_read_tensor(r->w, "image_embeddings", &r->semb);
    const rlx_tensor_info *t = rlx_weights_find(r->w, "input_labels");
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(t && rlx_weights_read(t, RLX_I32, r->lab, 1, &d) == 0, "input_labels: %s", d.msg);
}

static void refs_close(refs *r)
{
    free(r->px);
    free(r->pts);
    free(r->emb);
    rlx_weights_close(r->w);
}

static const char *const extras[2] = {"--policy fusable", "--policy direct --threads 2"};

/* forward on the reference's image input (pixel_values or image_embeddings) with its point
 * prompt; the outputs file into out, in a folder the caller removes (returned) */
static char *forward_point(const char *image, const char *extra, char *out, size_t len)
{
    refs r;
    refs_open(&r);
    char *tmp = tu_mkdtemp(), in[1024];
    snprintf(in, sizeof in, "%s/in.safetensors", tmp);
    snprintf(out, len, "%s/out.safetensors", tmp);
    int px = !strcmp(image, "pixel_values");
    rlx_shape ls = {3, {1, 1, 1}};
    in_t t[3] = {{image, RLX_F32, px ? r.sp : r.semb, px ? r.px : r.emb},
                 {"input_points", RLX_F32, r.spt, r.pts},
                 {"input_labels", RLX_I32, ls, r.lab}};
    write_st(in, t, 3);
    tu_result res = forward(in, out, extra);
    ck_assert_msg(res.status == 0, "forward from %s %s exited %d: %s", image, extra, res.status, res.err);
    tu_result_free(&res);
    refs_close(&r);
    return tmp;
}

/* the whole model: pixel_values and a point -> all three outputs */
START_TEST(test_full_parity)
{
    char out[1024], *tmp = forward_point("pixel_values", extras[_i], out, sizeof out);
    check_close(out, "image_embeddings", extras[_i]);
    check_close(out, "pred_masks", extras[_i]);
    check_close(out, "iou_scores", extras[_i]);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

/* the second stage: the reference's image_embeddings reused with the prompt */
START_TEST(test_embeddings_stage)
{
    char out[1024], *tmp = forward_point("image_embeddings", extras[_i], out, sizeof out);
    check_close(out, "pred_masks", "from image_embeddings");
    check_close(out, "iou_scores", "from image_embeddings");
    ck_assert_msg(!has_tensor(out, "image_embeddings"), "image_embeddings written without pixel_values");
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

/* two prompt sets for one image (the reference's point, then a box prompt with a point),
 * a box alone with multimask_output 0: transformers' shapes; set 0 equals the reference */
START_TEST(test_prompt_shapes)
{
    refs r;
    refs_open(&r);
    char *tmp = tu_mkdtemp(), in[1024], out[1024];
    snprintf(in, sizeof in, "%s/in.safetensors", tmp);
    snprintf(out, sizeof out, "%s/out.safetensors", tmp);
    /* two sets of one point each: [1, 2, 1, 2] */
    float pts2[4] = {r.pts[0], r.pts[1], 40.0f, 12.0f};
    int32_t lab2[2] = {r.lab[0], 0};
    rlx_shape ps = {4, {1, 2, 1, 2}}, ls = {3, {1, 2, 1}};
    in_t t[4] = {{"image_embeddings", RLX_F32, r.semb, r.emb},
                 {"input_points", RLX_F32, ps, pts2},
                 {"input_labels", RLX_I32, ls, lab2}};
    write_st(in, t, 3);
    tu_result res = forward(in, out, "");
    ck_assert_msg(res.status == 0, "forward exited %d: %s", res.status, res.err);
    tu_result_free(&res);
    int64_t md[5] = {1, 2, 3, 32, 32}, id[3] = {1, 2, 3};
    check_shape(out, "pred_masks", 5, md);
    check_shape(out, "iou_scores", 3, id);
    {
        rlx_weights *wo = pu_open_st(out);
        rlx_shape s, sr;
        float *got = pu_read_tensor(wo, "pred_masks", &s), *want = pu_read_tensor(r.w, "pred_masks", &sr);
        double e = tu_rel_l2(got, want, 3 * 32 * 32);
        ck_assert_msg(e < 1e-4, "prompt set 0 of two: pred_masks rel L2 %.3g", e);
        free(got);
        free(want);
        rlx_weights_close(wo);
    }
    /* a box alone, one mask: [1,1,1,32,32] and [1,1,1] */
    float box[4] = {8.0f, 10.0f, 50.0f, 41.0f};
    int32_t one = 0;
    rlx_shape bs = {3, {1, 1, 4}}, ss = {0, {0}};
    in_t tb[3] = {{"image_embeddings", RLX_F32, r.semb, r.emb},
                  {"input_boxes", RLX_F32, bs, box},
                  {"multimask_output", RLX_I32, ss, &one}};
    write_st(in, tb, 3);
    res = forward(in, out, "");
    ck_assert_msg(res.status == 0, "forward (box, single mask) exited %d: %s", res.status, res.err);
    tu_result_free(&res);
    int64_t md1[5] = {1, 1, 1, 32, 32}, id1[3] = {1, 1, 1};
    check_shape(out, "pred_masks", 5, md1);
    check_shape(out, "iou_scores", 3, id1);
    /* points and a box together (no padding point), multimask: [1,1,3,32,32] */
    in_t tpb[4] = {{"image_embeddings", RLX_F32, r.semb, r.emb},
                   {"input_points", RLX_F32, r.spt, r.pts},
                   {"input_labels", RLX_I32, ls, lab2},
                   {"input_boxes", RLX_F32, bs, box}};
    tpb[2].shape.dims[1] = 1;
    write_st(in, tpb, 4);
    res = forward(in, out, "");
    ck_assert_msg(res.status == 0, "forward (point + box) exited %d: %s", res.status, res.err);
    tu_result_free(&res);
    int64_t md3[5] = {1, 1, 3, 32, 32};
    check_shape(out, "pred_masks", 5, md3);
    refs_close(&r);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

/* inputs that do not go together are refused with one line naming them */
START_TEST(test_bad_inputs)
{
    refs r;
    refs_open(&r);
    char *tmp = tu_mkdtemp(), in[1024], out[1024];
    snprintf(in, sizeof in, "%s/in.safetensors", tmp);
    snprintf(out, sizeof out, "%s/out.safetensors", tmp);
    rlx_shape ls = {3, {1, 1, 1}};
    in_t both[3] = {{"pixel_values", RLX_F32, r.sp, r.px},
                    {"image_embeddings", RLX_F32, r.semb, r.emb},
                    {"input_points", RLX_F32, r.spt, r.pts}};
    in_t nopic[2] = {{"input_points", RLX_F32, r.spt, r.pts}, {"input_labels", RLX_I32, ls, r.lab}};
    int32_t two = 2;
    rlx_shape ss = {0, {0}};
    in_t badmm[3] = {{"image_embeddings", RLX_F32, r.semb, r.emb},
                     {"input_points", RLX_F32, r.spt, r.pts},
                     {"multimask_output", RLX_I32, ss, &two}};
    const struct {
        const in_t *t;
        size_t n;
        const char *msg;
    } cases[3] = {{both, 3, "sam: give pixel_values or image_embeddings, not both"},
                  {nopic, 2, "sam: a prompt needs pixel_values or image_embeddings"},
                  {badmm, 3, "sam: multimask_output must be 0 or 1, got 2"}};
    for (int i = 0; i < 3; i++) {
        write_st(in, cases[i].t, cases[i].n);
        tu_result res = forward(in, out, "");
        ck_assert_msg(res.status == 1, "case %d: exit %d, expected 1", i, res.status);
        ck_assert_msg(strstr(res.err, cases[i].msg) != NULL, "case %d: stderr: %s", i, res.err);
        tu_result_free(&res);
    }
    refs_close(&r);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("sam");
    TCase *c = tcase_create("parity");
    tcase_set_timeout(c, 300);
    tcase_add_loop_test(c, test_full_parity, 0, 2);
    tcase_add_loop_test(c, test_embeddings_stage, 0, 2);
    tcase_add_test(c, test_prompt_shapes);
    tcase_add_test(c, test_bad_inputs);
    suite_add_tcase(s, c);
    return s;
}

int main(void) { return tu_run_suite(suite()); }
