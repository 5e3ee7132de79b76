/* Helpers shared by the causal-LM parity tests (see parity_util.h). */
#include "parity_util.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "testutil.h"

rlx_weights *pu_open_st(const char *path)
{
    rlx_weights *w = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_weights_open(path, &w, &d) == 0, "%s", d.msg);
    return w;
}

rlx_weights *pu_open_ref(const char *model)
{
    char rel[256];
    snprintf(rel, sizeof rel, "%s/ref.safetensors", model);
    return pu_open_st(tu_fixture(rel));
}

float *pu_read_tensor(const rlx_weights *w, const char *name, rlx_shape *shape)
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

float *pu_read_f32(const rlx_weights *w, const char *name, size_t *numel)
{
    rlx_shape s;
    float *v = pu_read_tensor(w, name, &s);
    *numel = (size_t)rlx_shape_numel(&s);
    return v;
}

int32_t *pu_read_ids(const rlx_weights *w, const char *name, size_t *n)
{
    const rlx_tensor_info *t = rlx_weights_find(w, name);
    ck_assert_msg(t != NULL, "tensor %s missing", name);
    *n = (size_t)rlx_shape_numel(&t->shape);
    int32_t *v = malloc(*n * sizeof *v);
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_weights_read(t, RLX_I32, v, *n, &d) == 0, "%s", d.msg);
    return v;
}

json_t *pu_load_json(const char *path)
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);
    ck_assert_msg(j != NULL, "%s: %s", path, e.text);
    return j;
}

char *pu_run_ok(const char *cmd, int timeout_s)
{
    tu_result r = tu_run(cmd, timeout_s);
    ck_assert_msg(r.status == 0, "`%s` exited %d: %s", cmd, r.status, r.err);
    char *out = r.out;
    r.out = NULL;
    tu_result_free(&r);
    return out;
}

void pu_write_ids(const char *path, const int32_t *ids, size_t t)
{
    rlx_st_writer *w = rlx_st_writer_new();
    rlx_shape s = {2, {1, (int64_t)t}};
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_st_writer_add(w, "input_ids", RLX_I32, &s, ids, &d) == 0, "%s", d.msg);
    ck_assert_msg(rlx_st_writer_save(w, path, &d) == 0, "%s", d.msg);
    rlx_st_writer_free(w);
}

char *pu_write_file(const char *dir, const char *name, const char *text)
{
    char *path = malloc(1200);
    snprintf(path, 1200, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
    return path;
}

void pu_ids_arg(char *out, size_t len, const int32_t *ids, size_t t)
{
    out[0] = 0;
    for (size_t i = 0; i < t; i++)
        snprintf(out + strlen(out), len - strlen(out), "%s%d", i ? "," : "", (int)ids[i]);
}

void pu_check_ids(json_t *arr, const int32_t *want, size_t n, const char *what)
{
    ck_assert_msg(json_is_array(arr) && json_array_size(arr) == n, "%s: expected %zu ids", what, n);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(json_integer_value(json_array_get(arr, i)) == want[i], "%s[%zu] = %lld, expected %d",
                      what, i, (long long)json_integer_value(json_array_get(arr, i)), (int)want[i]);
}

json_t *pu_check_generated(char *out, const int32_t *ids, size_t t, json_t *greedy, json_t *margins,
                           size_t n_gen, const char *what)
{
    json_error_t je;
    json_t *o = json_loads(out, 0, &je);
    ck_assert_msg(o != NULL, "%s: stdout is not JSON (%s): %s", what, je.text, out);
    free(out);
    pu_check_ids(json_object_get(o, "prompt_ids"), ids, t, "prompt_ids");
    json_t *gen = json_object_get(o, "ids");
    ck_assert_msg(json_array_size(gen) == n_gen, "%s: %zu ids generated", what, json_array_size(gen));
    for (size_t j = 0; j < n_gen; j++) {
        if (json_real_value(json_array_get(margins, j)) <= 1e-2) continue;
        ck_assert_msg(json_integer_value(json_array_get(gen, j)) == json_integer_value(json_array_get(greedy, j)),
                      "%s: generated id %zu is %lld, greedy reference %lld", what, j,
                      (long long)json_integer_value(json_array_get(gen, j)),
                      (long long)json_integer_value(json_array_get(greedy, j)));
    }
    return o;
}

void pu_check_generate_logits(const char *out_path, const float *want_prefill, size_t nlog,
                              const float *full, size_t t, size_t vocab, size_t n_gen,
                              float **first, const char *first_name, const char *what)
{
    rlx_weights *lw = pu_open_st(out_path);
    size_t n;
    float *pre = pu_read_f32(lw, "logits", &n);
    ck_assert_uint_eq(n, nlog);
    double err = tu_rel_l2(pre, want_prefill, n);
    ck_assert_msg(err < 1e-4, "%s: prefill logits rel L2 %.3g", what, err);
    float *dec = pu_read_f32(lw, "decode_logits", &n);
    ck_assert_msg(n == (n_gen - 1) * vocab, "%s: decode_logits has %zu values, expected %zu", what, n,
                  (size_t)(n_gen - 1) * vocab);
    double worst = 0;
    for (size_t j = 0; j + 1 < n_gen; j++) {
        double e = tu_rel_l2(dec + j * vocab, full + (t + j) * vocab, vocab);
        if (e > worst) worst = e;
        ck_assert_msg(e < 1e-4, "%s: decode step %zu (position %zu) rel L2 %.3g", what, j, t + j, e);
    }
    printf("generate %s: prefill rel L2 %.3g, worst decode step %.3g\n", what, err, worst);
    if (!*first) {
        *first = dec;
    } else {
        double diff = tu_rel_l2(dec, *first, n);
        ck_assert_msg(diff < 1e-5, "%s: decode logits differ from %s by %.3g", what, first_name, diff);
        free(dec);
    }
    free(pre);
    rlx_weights_close(lw);
}

int32_t *pu_read_case_ids(const rlx_weights *ref, int c, size_t *t)
{
    char name[64];
    snprintf(name, sizeof name, "case%d.input_ids", c);
    return pu_read_ids(ref, name, t);
}

float *pu_read_case_f32(const rlx_weights *ref, int c, const char *what, size_t *numel)
{
    char name[64];
    snprintf(name, sizeof name, "case%d.%s", c, what);
    return pu_read_f32(ref, name, numel);
}

void pu_gen_case_open(pu_gen_case *k, const char *model, int c, size_t n_gen)
{
    k->ref = pu_open_ref(model);
    k->ids = pu_read_case_ids(k->ref, c, &k->t);
    k->full = pu_read_case_f32(k->ref, c, "full_logits", &k->nfull);
    k->prefill = pu_read_case_f32(k->ref, c, "logits", &k->nlog);
    k->vocab = k->nlog / k->t;
    ck_assert_uint_ge(k->nfull / k->vocab, k->t + n_gen - 1);
    char rel[256];
    snprintf(rel, sizeof rel, "%s/ref.json", model);
    k->rj = pu_load_json(tu_fixture(rel));
    json_t *rc = json_array_get(json_object_get(k->rj, "cases"), (size_t)c);
    k->greedy = json_object_get(rc, "greedy_continuation");
    k->margins = json_object_get(rc, "top2_margins");
    ck_assert(json_array_size(k->greedy) == n_gen && json_array_size(k->margins) == n_gen);
}

void pu_gen_case_close(pu_gen_case *k)
{
    json_decref(k->rj);
    free(k->full);
    free(k->prefill);
    free(k->ids);
    rlx_weights_close(k->ref);
}

void pu_check_forward_logits(const char *out_path, const float *want, size_t nref, const char *model,
                             int c, const char *label, const char *as, const char *first_as,
                             float **first)
{
    rlx_weights *out = pu_open_st(out_path);
    size_t n;
    float *got = pu_read_f32(out, "logits", &n);
    ck_assert_msg(n == nref, "%s case %d: logits have %zu values, reference %zu", model, c, n, nref);
    double err = tu_rel_l2(got, want, n);
    printf("forward %s case %d %s: logits rel L2 %.3g\n", model, c, label, err);
    ck_assert_msg(err < 1e-4, "%s case %d %s: logits rel L2 %.3g >= 1e-4", model, c, label, err);
    if (!*first) {
        *first = got;
    } else {
        double diff = tu_rel_l2(got, *first, n);
        ck_assert_msg(diff < 1e-5, "%s case %d: %s differs from %s by %.3g", model, c, as, first_as, diff);
        free(got);
    }
    rlx_weights_close(out);
}
