/* BERT (BertModel) parity through the CLI: rlx-run forward on tests/fixtures/bert-tiny
 * (batch 2, row 1 padded from position 7) against transformers' last_hidden_state and
 * pooler_output, every position included; integer inputs as I64 and I32, both fusion
 * policies. A missing attention_mask means all ones (as HF); a wrong input name or a
 * missing input_ids is exit 1 naming the tensor. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rlx/rlx.h"
#include "parity_util.h"
#include "testutil.h"

#define B 2
#define T 11
#define H 64

/* tensor name of w as dtype (F32 or I32) into a malloc'd buffer; its shape in *shape */
static void *read_as(const rlx_weights *w, const char *name, int dtype, rlx_shape *shape)
{
    const rlx_tensor_info *t = rlx_weights_find(w, name);
    ck_assert_msg(t != NULL, "tensor %s missing", name);
    size_t n = (size_t)rlx_shape_numel(&t->shape);
    void *v = malloc(n * 4 + 1);
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_weights_read(t, dtype, v, n, &d) == 0, "%s", d.msg);
    if (shape) *shape = t->shape;
    return v;
}

typedef struct ref {
    int32_t ids[B * T], mask[B * T], types[B * T];
    float hidden[B * T * H], pooled[B * H];
} ref;

static ref *load_ref(void)
{
    ref *r = calloc(1, sizeof *r);
    rlx_weights *w = pu_open_st(tu_fixture("bert-tiny/ref.safetensors"));
    static const char *const names[5] = {"input_ids", "attention_mask", "token_type_ids", "last_hidden_state",
                                         "pooler_output"};
    void *dst[5] = {r->ids, r->mask, r->types, r->hidden, r->pooled};
    size_t bytes[5] = {sizeof r->ids, sizeof r->mask, sizeof r->types, sizeof r->hidden, sizeof r->pooled};
    for (int i = 0; i < 5; i++) {
        rlx_shape s;
        void *v = read_as(w, names[i], i < 3 ? RLX_I32 : RLX_F32, &s);
        ck_assert_msg((size_t)rlx_shape_numel(&s) * 4 == bytes[i], "ref %s: unexpected size", names[i]);
        memcpy(dst[i], v, bytes[i]);
        free(v);
    }
    rlx_weights_close(w);
    return r;
}

/* writes the first `rows` batch rows of the given inputs (NULL: left out) as dtype */
static void write_inputs(const char *path, int dtype, int rows, const char *const *names,
                         const int32_t *const *vals, int n)
{
    rlx_st_writer *w = rlx_st_writer_new();
    rlx_diag d;
    rlx_diag_init(&d);
    int64_t wide[B * T];
    for (int i = 0; i < n; i++) {
        if (!vals[i]) continue;
        rlx_shape s = {2, {rows, T}};
        for (int j = 0; j < rows * T; j++) wide[j] = vals[i][j];
        const void *data = dtype == RLX_I64 ? (const void *)wide : (const void *)vals[i];
        ck_assert_msg(rlx_st_writer_add(w, names[i], dtype, &s, data, &d) == 0, "%s", d.msg);
    }
    ck_assert_msg(rlx_st_writer_save(w, path, &d) == 0, "%s", d.msg);
    rlx_st_writer_free(w);
}

static const char *const input_names[3] = {"input_ids", "attention_mask", "token_type_ids"};

static tu_result forward(const char *in, const char *out, const char *extra)
{
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' forward --model '%s' --inputs '%s' --out '%s' %s", tu_tool("tools/rlx-run"),
             tu_fixture("bert-tiny"), in, out, extra);
    return tu_run(cmd, 120);
}

/* runs forward, requires exit 0; the outputs as F32 with their expected shapes */
static void forward_ok(const char *in, const char *out, const char *extra, int rows, float *hidden, float *pooled)
{
    tu_result r = forward(in, out, extra);
    ck_assert_msg(r.status == 0, "forward %s exited %d: %s", extra, r.status, r.err);
    tu_result_free(&r);
    rlx_weights *w = pu_open_st(out);
    rlx_shape s;
    float *v = read_as(w, "last_hidden_state", RLX_F32, &s);
    ck_assert_msg(s.ndim == 3 && s.dims[0] == rows && s.dims[1] == T && s.dims[2] == H,
                  "last_hidden_state is not [%d, %d, %d]", rows, T, H);
    memcpy(hidden, v, sizeof(float) * (size_t)(rows * T * H));
    free(v);
    v = read_as(w, "pooler_output", RLX_F32, &s);
    ck_assert_msg(s.ndim == 2 && s.dims[0] == rows && s.dims[1] == H, "pooler_output is not [%d, %d]", rows, H);
    memcpy(pooled, v, sizeof(float) * (size_t)(rows * H));
    free(v);
    rlx_weights_close(w);
}

static const int dtypes[2] = {RLX_I64, RLX_I32};
static const char *const policies[2] = {"--policy fusable", "--policy direct --threads 2"};

START_TEST(test_forward_parity)
{
    int dtype = dtypes[_i / 2];
    const char *extra = policies[_i % 2];
    ref *r = load_ref();
    char *tmp = tu_mkdtemp(), in[1024], out[1024];
    snprintf(in, sizeof in, "%s/in.safetensors", tmp);
    snprintf(out, sizeof out, "%s/out.safetensors", tmp);
    const int32_t *vals[3] = {r->ids, r->mask, r->types};
    write_inputs(in, dtype, B, input_names, vals, 3);
    static float hidden[B * T * H], pooled[B * H];
    forward_ok(in, out, extra, B, hidden, pooled);
    double eh = tu_rel_l2(hidden, r->hidden, B * T * H), ep = tu_rel_l2(pooled, r->pooled, B * H);
    /* the padded row alone, padded positions included */
    double e1 = tu_rel_l2(hidden + T * H, r->hidden + T * H, T * H);
    printf("bert-tiny %s %s: last_hidden_state rel L2 %.3g (padded row %.3g), pooler_output %.3g\n",
           dtype == RLX_I64 ? "I64" : "I32", extra, eh, e1, ep);
    ck_assert_msg(eh < 1e-4, "last_hidden_state rel L2 %.3g >= 1e-4", eh);
    ck_assert_msg(e1 < 1e-4, "last_hidden_state of the padded row: rel L2 %.3g >= 1e-4", e1);
    ck_assert_msg(ep < 1e-4, "pooler_output rel L2 %.3g >= 1e-4", ep);
    free(r);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

/* no attention_mask: all ones, as transformers. Row 0 is unpadded, so it matches the
 * reference; the padded row 1 then differs from it (the mask is really applied). */
START_TEST(test_missing_mask_means_ones)
{
    ref *r = load_ref();
    char *tmp = tu_mkdtemp(), in[1024], out[1024];
    snprintf(in, sizeof in, "%s/in.safetensors", tmp);
    snprintf(out, sizeof out, "%s/out.safetensors", tmp);
    for (int j = 0; j < T; j++) ck_assert_int_eq(r->mask[j], 1);
    const int32_t *vals[3] = {r->ids, NULL, r->types};
    static float hidden[B * T * H], pooled[B * H];
    write_inputs(in, RLX_I32, 1, input_names, vals, 3);
    forward_ok(in, out, "", 1, hidden, pooled);
    double e0 = tu_rel_l2(hidden, r->hidden, T * H), p0 = tu_rel_l2(pooled, r->pooled, H);
    ck_assert_msg(e0 < 1e-4 && p0 < 1e-4, "row 0 without a mask: rel L2 %.3g / %.3g", e0, p0);
    write_inputs(in, RLX_I32, B, input_names, vals, 3);
    forward_ok(in, out, "", B, hidden, pooled);
    double e1 = tu_rel_l2(hidden + T * H, r->hidden + T * H, T * H);
    ck_assert_msg(e1 > 1e-3, "row 1 without its padding mask still matches the reference (%.3g)", e1);
    free(r);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

START_TEST(test_bad_inputs)
{
    ref *r = load_ref();
    char *tmp = tu_mkdtemp(), in[1024], out[1024];
    snprintf(in, sizeof in, "%s/in.safetensors", tmp);
    snprintf(out, sizeof out, "%s/out.safetensors", tmp);
    /* a misspelled input name */
    static const char *const wrong[3] = {"input_ids", "attention_masks", "token_type_ids"};
    const int32_t *vals[3] = {r->ids, r->mask, r->types};
    write_inputs(in, RLX_I64, B, wrong, vals, 3);
    tu_result res = forward(in, out, "");
    ck_assert_msg(res.status == 1, "exit %d, expected 1", res.status);
    ck_assert_msg(strstr(res.err, "input tensor \"attention_masks\": not an input of this model") != NULL,
                  "stderr: %s", res.err);
    tu_result_free(&res);
    /* input_ids missing */
    const int32_t *no_ids[3] = {NULL, r->mask, r->types};
    write_inputs(in, RLX_I64, B, input_names, no_ids, 3);
    res = forward(in, out, "");
    ck_assert_msg(res.status == 1, "exit %d, expected 1", res.status);
    ck_assert_msg(strstr(res.err, "missing input tensor \"input_ids\"") != NULL, "stderr: %s", res.err);
    tu_result_free(&res);
    /* batch rows that disagree */
    rlx_st_writer *w = rlx_st_writer_new();
    rlx_diag d;
    rlx_diag_init(&d);
    rlx_shape two = {2, {2, T}}, one = {2, {1, T}};
    ck_assert(rlx_st_writer_add(w, "input_ids", RLX_I32, &two, r->ids, &d) == 0);
    ck_assert(rlx_st_writer_add(w, "attention_mask", RLX_I32, &one, r->mask, &d) == 0);
    ck_assert(rlx_st_writer_save(w, in, &d) == 0);
    rlx_st_writer_free(w);
    res = forward(in, out, "");
    ck_assert_msg(res.status == 1, "exit %d, expected 1", res.status);
    ck_assert_msg(strstr(res.err, "attention_mask") != NULL && strstr(res.err, "batch rows") != NULL,
                  "stderr: %s", res.err);
    tu_result_free(&res);
    free(r);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

/* precision.compute bf16 against the f32 reference: mixed auto (matmul weights in bf16; the
 * CPU GEMM also rounds their inputs to bf16) and mixed none (every activation in bf16 too,
 * the additive mask pinned to f32). There is no transformers bf16 figure for BERT to hold it
 * to, so the bounds are bf16's own scale (unit roundoff 2^-8), about twice what the CPU
 * measures (README): 2 roundoffs for mixed auto, 3 for mixed none. */
static const char *const bf16_runs[2] = {"--precision bf16 --mixed auto", "--precision bf16 --mixed none"};

START_TEST(test_forward_bf16)
{
    ref *r = load_ref();
    char *tmp = tu_mkdtemp(), in[1024], out[1024];
    snprintf(in, sizeof in, "%s/in.safetensors", tmp);
    snprintf(out, sizeof out, "%s/out.safetensors", tmp);
    const int32_t *vals[3] = {r->ids, r->mask, r->types};
    write_inputs(in, RLX_I64, B, input_names, vals, 3);
    static float hidden[B * T * H], pooled[B * H];
    forward_ok(in, out, bf16_runs[_i], B, hidden, pooled);
    double eh = tu_rel_l2(hidden, r->hidden, B * T * H), ep = tu_rel_l2(pooled, r->pooled, B * H);
    printf("bert-tiny %s: last_hidden_state rel L2 %.3g, pooler_output %.3g\n", bf16_runs[_i], eh, ep);
    double bound = (_i ? 3.0 : 2.0) / 256;
    ck_assert_msg(eh < bound && ep < bound, "%s: rel L2 %.3g / %.3g >= %.3g", bf16_runs[_i], eh, ep, bound);
    ck_assert_msg(eh > 1e-4, "%s: rel L2 %.3g is f32's: is the precision honoured?", bf16_runs[_i], eh);
    free(r);
    tu_rmrf(tmp);
    free(tmp);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("bert");
    TCase *c = tcase_create("parity");
    tcase_set_timeout(c, 240);
    tcase_add_loop_test(c, test_forward_parity, 0, 4);
    tcase_add_loop_test(c, test_forward_bf16, 0, 2);
    tcase_add_test(c, test_missing_mask_means_ones);
    tcase_add_test(c, test_bad_inputs);
    suite_add_tcase(s, c);
    return s;
}

int main(void)
{
    return tu_run_suite(suite());
}
