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

float *pu_read_f32(const rlx_weights *w, const char *name, size_t *numel)
{
    const rlx_tensor_info *t = rlx_weights_find(w, name);
    ck_assert_msg(t != NULL, "tensor %s missing", name);
    size_t n = (size_t)rlx_shape_numel(&t->shape);
    float *v = malloc(n * sizeof *v);
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_weights_read(t, RLX_F32, v, n, &d) == 0, "%s", d.msg);
    *numel = n;
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
