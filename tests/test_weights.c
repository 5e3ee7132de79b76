/* dtypes, safetensors reading (zero-copy, conversion, shards, tied embeddings), the
 * writer, and the bad-input corpus at the library level. */
#define _GNU_SOURCE
#include "rlx/rlx.h"
#include "testutil.h"
#include <check.h>
#include <dirent.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static rlx_weights *open_ok(const char *path)
{
    rlx_weights *w = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    int rc = rlx_weights_open(path, &w, &d);
    ck_assert_msg(rc == 0, "%s: %s", path, d.msg);
    return w;
}

/* ---------------------------------------------------------------- dtypes */

START_TEST(dtype_names_sizes)
{
    ck_assert_int_eq(rlx_dtype_size(RLX_F32), 4);
    ck_assert_int_eq(rlx_dtype_size(RLX_BF16), 2);
    ck_assert_int_eq(rlx_dtype_size(RLX_I64), 8);
    ck_assert_int_eq(rlx_dtype_size(RLX_U8), 1);
    ck_assert_int_eq(rlx_dtype_size(99), 0);
    for (int i = 0; i < RLX_DTYPE_COUNT; i++) ck_assert_int_eq(rlx_dtype_from_name(rlx_dtype_name(i)), i);
    ck_assert_int_eq(rlx_dtype_from_name("F64"), -1);
    ck_assert_int_eq(rlx_dtype_from_name("f32"), -1); /* safetensors names are upper case */
    rlx_shape s = {3, {2, 3, 4}};
    char b[64];
    ck_assert_str_eq(rlx_shape_str(&s, b, sizeof b), "[2, 3, 4]");
    ck_assert_int_eq(rlx_shape_numel(&s), 24);
    rlx_shape z = {0, {0}};
    ck_assert_str_eq(rlx_shape_str(&z, b, sizeof b), "[]");
    ck_assert_int_eq(rlx_shape_numel(&z), 1);
    rlx_shape big = {2, {INT64_MAX / 2, 3}};
    ck_assert_int_eq(rlx_shape_numel(&big), -1);
}
END_TEST

START_TEST(half_conversions)
{
    /* every f16 survives f16 -> f32 -> f16 (NaNs stay NaN) */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = rlx_f16_to_f32((uint16_t)h);
        uint16_t back = rlx_f32_to_f16(f);
        if (isnan(f)) ck_assert(isnan(rlx_f16_to_f32(back)));
        else ck_assert_uint_eq(back, h);
    }
    ck_assert_float_eq(rlx_f16_to_f32(0x3c00), 1.0f);
    ck_assert_float_eq(rlx_f16_to_f32(0xc000), -2.0f);
    ck_assert_float_eq(rlx_f16_to_f32(0x7bff), 65504.0f);
    ck_assert_float_eq(rlx_f16_to_f32(0x0001), 0x1p-24f);
    ck_assert_uint_eq(rlx_f32_to_f16(65520.0f), 0x7c00); /* rounds to inf */
    ck_assert_uint_eq(rlx_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie to even */
    ck_assert_uint_eq(rlx_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    ck_assert_uint_eq(rlx_f32_to_f16(0x1p-25f), 0x0000);  /* half the smallest subnormal: even */
    ck_assert_uint_eq(rlx_f32_to_f16(0x1.8p-25f), 0x0001);
    ck_assert_uint_eq(rlx_f32_to_f16(-0.0f), 0x8000);

    ck_assert_float_eq(rlx_bf16_to_f32(0x3f80), 1.0f);
    ck_assert_uint_eq(rlx_f32_to_bf16(1.0f), 0x3f80);
    ck_assert_uint_eq(rlx_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);             /* tie to even */
    ck_assert_uint_eq(rlx_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);         /* tie to even, up */
    ck_assert_uint_eq(rlx_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);  /* above half */
    ck_assert(isnan(rlx_bf16_to_f32(rlx_f32_to_bf16(NAN))));
    ck_assert(isinf(rlx_bf16_to_f32(rlx_f32_to_bf16(INFINITY))));
    for (uint32_t b = 0; b < 65536; b++) {
        float f = rlx_bf16_to_f32((uint16_t)b);
        if (!isnan(f)) ck_assert_uint_eq(rlx_f32_to_bf16(f), b);
    }
}
END_TEST

/* ---------------------------------------------------------------- reading */

START_TEST(fixture_models_zero_copy)
{
    static const char *const names[] = {"llama32-tiny", "llama-untied-bf16", "qwen3-tiny",
                                        "qwen3-untied-bf16", "gemma2-tiny", "gemma3-tiny",
                                        "bert-tiny", "sam-tiny", "flux1-tiny", "flux2-tiny"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        rlx_weights *w = open_ok(tu_fixture(names[k]));
        ck_assert_uint_gt(rlx_weights_count(w), 0);
        const char *file = rlx_weights_file_of(w, rlx_weights_at(w, 0));
        size_t len;
        char *raw = tu_read_file(file, &len);
        ck_assert_ptr_nonnull(raw);
        uint64_t hl;
        memcpy(&hl, raw, 8);
        for (size_t i = 0; i < rlx_weights_count(w); i++) {
            const rlx_tensor_info *t = rlx_weights_at(w, i);
            ck_assert_ptr_eq(rlx_weights_find(w, t->name), t);
            ck_assert_uint_eq(t->nbytes, (size_t)rlx_shape_numel(&t->shape) * rlx_dtype_size(t->dtype));
        }
        /* zero copy: every tensor sits in one mapping of the file, at the header's offset */
        json_t *h = json_loadb(raw + 8, (size_t)hl, 0, NULL);
        ck_assert_ptr_nonnull(h);
        const uint8_t *map = NULL;
        for (size_t i = 0; i < rlx_weights_count(w); i++) {
            const rlx_tensor_info *t = rlx_weights_at(w, i);
            json_t *e = json_object_get(h, t->name);
            ck_assert_ptr_nonnull(e);
            size_t begin = (size_t)json_integer_value(json_array_get(json_object_get(e, "data_offsets"), 0));
            size_t at = 8 + (size_t)hl + begin;
            if (!map) map = (const uint8_t *)t->data - at;
            ck_assert_ptr_eq(t->data, map + at);
            ck_assert_int_eq(memcmp(t->data, raw + at, t->nbytes), 0);
        }
        json_decref(h);
        ck_assert_ptr_null(rlx_weights_find(w, "no.such.tensor"));
        free(raw);
        rlx_weights_close(w);
    }
}
END_TEST

START_TEST(exact_bytes_and_conversion)
{
    /* llama-untied-bf16: read BF16 -> F32 and compare with the file's bytes converted here */
    rlx_weights *w = open_ok(tu_fixture("llama-untied-bf16/model.safetensors"));
    const rlx_tensor_info *t = rlx_weights_find(w, "model.embed_tokens.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_int_eq(t->dtype, RLX_BF16);
    ck_assert_uint_eq(t->shape.ndim, 2);
    ck_assert_int_eq(t->shape.dims[0], 512);
    ck_assert_int_eq(t->shape.dims[1], 64);
    ck_assert_ptr_nonnull(rlx_weights_find(w, "lm_head.weight"));

    size_t len;
    char *raw = tu_read_file(tu_fixture("llama-untied-bf16/model.safetensors"), &len);
    uint64_t hl;
    memcpy(&hl, raw, 8);
    /* locate the tensor in the file through the map's own layout */
    const rlx_tensor_info *first = t;
    for (size_t i = 0; i < rlx_weights_count(w); i++)
        if ((const char *)rlx_weights_at(w, i)->data < (const char *)first->data) first = rlx_weights_at(w, i);
    size_t n = 512 * 64;
    float *f = malloc(n * sizeof *f);
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_weights_read(t, RLX_F32, f, n, &d), 0);
    const uint16_t *b = t->data;
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)b[i] << 16;
        float want;
        memcpy(&want, &u, 4);
        ck_assert_float_eq(f[i], want);
    }
    /* and F32 -> BF16 back gives the stored bits */
    uint16_t *back = malloc(n * 2);
    rlx_tensor_info tf = *t;
    tf.dtype = RLX_F32;
    tf.data = f;
    tf.nbytes = n * 4;
    ck_assert_int_eq(rlx_weights_read(&tf, RLX_BF16, back, n, &d), 0);
    ck_assert_int_eq(memcmp(back, t->data, n * 2), 0);
    /* F16 too */
    ck_assert_int_eq(rlx_weights_read(t, RLX_F16, back, n, &d), 0);
    ck_assert_float_eq_tol(rlx_f16_to_f32(back[5]), f[5], fabsf(f[5]) * 1e-3f + 1e-7f);

    /* wrong count / kind */
    ck_assert_int_ne(rlx_weights_read(t, RLX_F32, f, n - 1, &d), 0);
    ck_assert_msg(strstr(d.msg, "tensor 'model.embed_tokens.weight': has 32768 elements, caller expects 32767"),
                  "%s", d.msg);
    rlx_diag_init(&d);
    ck_assert_int_ne(rlx_weights_read(t, RLX_I32, f, n, &d), 0);
    ck_assert_msg(strstr(d.msg, "cannot convert BF16 to I32"), "%s", d.msg);

    /* the mapped bytes equal the file's bytes at the same place */
    const char *p = memmem(raw + 8 + hl, len - 8 - hl, t->data, 256);
    ck_assert_ptr_nonnull(p);
    free(back);
    free(f);
    free(raw);
    rlx_weights_close(w);
}
END_TEST

START_TEST(ints)
{
    rlx_st_writer *sw = rlx_st_writer_new();
    int64_t v[4] = {1, -2, 3, (int64_t)1 << 40};
    rlx_shape s = {1, {3}}, s4 = {1, {4}};
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_st_writer_add(sw, "ok", RLX_I64, &s, v, &d), 0);
    ck_assert_int_eq(rlx_st_writer_add(sw, "big", RLX_I64, &s4, v, &d), 0);
    char *dir = tu_mkdtemp();
    char path[4200];
    snprintf(path, sizeof path, "%s/ids.safetensors", dir);
    ck_assert_int_eq(rlx_st_writer_save(sw, path, &d), 0);
    rlx_st_writer_free(sw);
    rlx_weights *w = open_ok(path);
    int32_t out[4];
    ck_assert_int_eq(rlx_weights_read(rlx_weights_find(w, "ok"), RLX_I32, out, 3, &d), 0);
    ck_assert_int_eq(out[1], -2);
    ck_assert_int_ne(rlx_weights_read(rlx_weights_find(w, "big"), RLX_I32, out, 4, &d), 0);
    ck_assert_msg(strstr(d.msg, "tensor 'big': element 3 (1099511627776) does not fit in I32"), "%s", d.msg);
    rlx_weights_close(w);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

START_TEST(tied_embeddings)
{
    rlx_diag d;
    rlx_diag_init(&d);
    rlx_weights *w = open_ok(tu_fixture("llama32-tiny"));
    ck_assert_ptr_null(rlx_weights_find(w, "lm_head.weight"));
    size_t n = rlx_weights_count(w);
    ck_assert_int_eq(rlx_weights_tie(w, "lm_head.weight", "model.embed_tokens.weight", &d), 0);
    const rlx_tensor_info *h = rlx_weights_find(w, "lm_head.weight");
    const rlx_tensor_info *e = rlx_weights_find(w, "model.embed_tokens.weight");
    ck_assert_ptr_nonnull(h);
    ck_assert_ptr_eq(h->data, e->data); /* same bytes, no copy */
    ck_assert_int_eq(h->shape.dims[0], 512);
    ck_assert_uint_eq(rlx_weights_count(w), n + 1);
    rlx_weights_close(w);

    /* a stored alias is replaced by the target; a missing target names both */
    w = open_ok(tu_fixture("qwen3-untied-bf16"));
    const void *emb = rlx_weights_find(w, "model.embed_tokens.weight")->data;
    ck_assert_int_eq(rlx_weights_tie(w, "lm_head.weight", "model.embed_tokens.weight", &d), 0);
    ck_assert_ptr_eq(rlx_weights_find(w, "lm_head.weight")->data, emb);
    ck_assert_int_eq(rlx_weights_tie(w, "lm_head.weight", "nope.weight", &d), RLX_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(d.msg, "tensor 'nope.weight' not found (tied to 'lm_head.weight')"));
    rlx_weights_close(w);
}
END_TEST

START_TEST(expect_shape)
{
    rlx_weights *w = open_ok(tu_fixture("llama32-tiny"));
    rlx_diag d;
    rlx_diag_init(&d);
    const rlx_tensor_info *t;
    rlx_shape ok = {2, {64, 64}}, bad = {2, {64, 32}};
    ck_assert_int_eq(rlx_weights_expect(w, "model.layers.0.self_attn.q_proj.weight", &ok, &t, &d), 0);
    ck_assert_ptr_nonnull(t);
    ck_assert_int_ne(rlx_weights_expect(w, "model.layers.0.self_attn.q_proj.weight", &bad, &t, &d), 0);
    ck_assert_msg(strstr(d.msg, "model.safetensors: tensor 'model.layers.0.self_attn.q_proj.weight': "
                                "expected shape [64, 32], found [64, 64]"),
                  "%s", d.msg);
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_weights_expect(w, "model.layers.9.mlp.up_proj.weight", &ok, &t, &d),
                     RLX_ERR_NOT_FOUND);
    ck_assert_msg(strstr(d.msg, "tensor 'model.layers.9.mlp.up_proj.weight' not found (expected shape [64, 64])"),
                  "%s", d.msg);
    rlx_weights_close(w);
}
END_TEST

/* ---------------------------------------------------------------- writer and shards */

START_TEST(writer_roundtrip_and_shards)
{
    rlx_weights *src = open_ok(tu_fixture("llama32-tiny"));
    char *dir = tu_mkdtemp();
    size_t n = rlx_weights_count(src);
    /* split the checkpoint into two shards + an index, as HF does */
    rlx_st_writer *a = rlx_st_writer_new(), *b = rlx_st_writer_new();
    rlx_diag d;
    rlx_diag_init(&d);
    char idx[65536];
    size_t o = (size_t)snprintf(idx, sizeof idx, "{\"metadata\":{\"total_size\":1},\"weight_map\":{");
    for (size_t i = 0; i < n; i++) {
        const rlx_tensor_info *t = rlx_weights_at(src, i);
        int second = i % 2;
        ck_assert_int_eq(rlx_st_writer_add(second ? b : a, t->name, t->dtype, &t->shape, t->data, &d), 0);
        o += (size_t)snprintf(idx + o, sizeof idx - o, "%s\"%s\":\"model-0000%d-of-00002.safetensors\"",
                              i ? "," : "", t->name, second + 1);
    }
    snprintf(idx + o, sizeof idx - o, "}}");
    const rlx_tensor_info *t0 = rlx_weights_at(src, 0);
    ck_assert_int_ne(rlx_st_writer_add(a, t0->name, t0->dtype, &t0->shape, t0->data, &d), 0);
    ck_assert_msg(strstr(d.msg, "added twice"), "%s", d.msg);
    char p1[4200], p2[4200], pi[4200];
    snprintf(p1, sizeof p1, "%s/model-00001-of-00002.safetensors", dir);
    snprintf(p2, sizeof p2, "%s/model-00002-of-00002.safetensors", dir);
    snprintf(pi, sizeof pi, "%s/model.safetensors.index.json", dir);
    ck_assert_int_eq(rlx_st_writer_save(a, p1, &d), 0);
    ck_assert_int_eq(rlx_st_writer_save(b, p2, &d), 0);
    rlx_st_writer_free(a);
    rlx_st_writer_free(b);
    FILE *f = fopen(pi, "w");
    fputs(idx, f);
    fclose(f);

    for (int via = 0; via < 2; via++) {
        rlx_weights *w = open_ok(via ? pi : dir);
        ck_assert_uint_eq(rlx_weights_count(w), n);
        for (size_t i = 0; i < n; i++) {
            const rlx_tensor_info *s = rlx_weights_at(src, i), *t = rlx_weights_find(w, s->name);
            ck_assert_ptr_nonnull(t);
            ck_assert_int_eq(t->dtype, s->dtype);
            ck_assert_int_eq(memcmp(&t->shape, &s->shape, sizeof s->shape), 0);
            ck_assert_int_eq(memcmp(t->data, s->data, s->nbytes), 0);
            ck_assert_uint_eq(((uintptr_t)t->data) % 8, 0); /* header padded: aligned data */
            ck_assert_ptr_nonnull(strstr(rlx_weights_file_of(w, t), i % 2 ? "00002-of" : "00001-of"));
        }
        rlx_weights_close(w);
    }

    /* a tensor the index puts in the wrong shard */
    char *bad = strdup(idx);
    char *q = strstr(bad, "model-00001");
    q[10] = '2';
    f = fopen(pi, "w");
    fputs(bad, f);
    fclose(f);
    free(bad);
    rlx_weights *w = NULL;
    rlx_diag_init(&d);
    ck_assert_int_ne(rlx_weights_open(dir, &w, &d), 0);
    ck_assert_ptr_null(w);
    ck_assert_msg(strstr(d.msg, "is listed in model-00002-of-00002.safetensors but stored in "
                                "model-00001-of-00002.safetensors"),
                  "%s", d.msg);

    /* the same tensor in both shards */
    rlx_st_writer *c = rlx_st_writer_new();
    ck_assert_int_eq(rlx_st_writer_add(c, t0->name, t0->dtype, &t0->shape, t0->data, &d), 0);
    ck_assert_int_eq(rlx_st_writer_save(c, p2, &d), 0);
    rlx_st_writer_free(c);
    f = fopen(pi, "w");
    fprintf(f, "{\"weight_map\":{\"%s\":\"model-00001-of-00002.safetensors\",\"x\":\"model-00002-of-00002.safetensors\"}}",
            t0->name);
    fclose(f);
    rlx_diag_init(&d);
    ck_assert_int_ne(rlx_weights_open(dir, &w, &d), 0);
    ck_assert_msg(strstr(d.msg, "is stored twice"), "%s", d.msg);

    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_weights_open("/nonexistent-folder/x.safetensors", &w, &d), RLX_ERR_NOT_FOUND);
    ck_assert_msg(strstr(d.msg, "/nonexistent-folder/x.safetensors: No such file"), "%s", d.msg);
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_weights_open(tu_src("profiles"), &w, &d), RLX_ERR_NOT_FOUND);
    ck_assert_msg(strstr(d.msg, "no model.safetensors"), "%s", d.msg);
    tu_rmrf(dir);
    free(dir);
    rlx_weights_close(src);
}
END_TEST

/* ---------------------------------------------------------------- bad-input corpus */

static char *read_line_value(const char *text, const char *key)
{
    const char *p = strstr(text, key);
    if (!p) return NULL;
    p += strlen(key);
    const char *e = strchr(p, '\n');
    return strndup(p, e ? (size_t)(e - p) : strlen(p));
}

START_TEST(bad_input_corpus)
{
    const char *root = tu_src("tests/bad-inputs");
    char rootbuf[4096];
    snprintf(rootbuf, sizeof rootbuf, "%s", root);
    DIR *dir = opendir(rootbuf);
    ck_assert_ptr_nonnull(dir);
    struct dirent *de;
    int cases = 0;
    rlx_registry *reg = NULL; /* the arch that owns a model type reads its config */
    rlx_diag rd;
    rlx_diag_init(&rd);
    ck_assert_msg(rlx_registry_open(NULL, &reg, &rd) == 0, "%s", rd.msg);
    while ((de = readdir(dir)) != NULL) {
        char cdir[4400], ef[4500];
        snprintf(cdir, sizeof cdir, "%s/%s", rootbuf, de->d_name);
        snprintf(ef, sizeof ef, "%s/expect.txt", cdir);
        size_t len;
        char *exp = tu_read_file(ef, &len);
        if (!exp) continue;
        char *stage = read_line_value(exp, "stage: "), *want = read_line_value(exp, "expect: ");
        rlx_diag d;
        rlx_diag_init(&d);
        rlx_config *c = NULL;
        rlx_weights *w = NULL;
        int rc = rlx_config_load(cdir, reg, &c, &d);
        if (strcmp(stage, "config") == 0) {
            ck_assert_msg(rc != 0, "%s: config accepted", de->d_name);
        } else {
            ck_assert_msg(rc == 0, "%s: %s", de->d_name, d.msg);
            rc = rlx_weights_open(cdir, &w, &d);
            if (strcmp(stage, "weights") == 0) {
                ck_assert_msg(rc != 0, "%s: weights accepted", de->d_name);
                ck_assert_ptr_null(w);
            } else {
                ck_assert_msg(rc == 0, "%s: %s", de->d_name, d.msg);
            }
        }
        if (strcmp(stage, "model") == 0) {
            char *chk = read_line_value(exp, "check: ");
            char *sp = strchr(chk, ' ');
            *sp = 0;
            rlx_shape s = {0, {0}};
            for (char *t = strtok(sp + 1, ","); t; t = strtok(NULL, ",")) s.dims[s.ndim++] = atoll(t);
            ck_assert_int_ne(rlx_weights_expect(w, chk, &s, NULL, &d), 0);
            free(chk);
        }
        /* "runtime": config and weights load; rlx_model_open refuses (the CLI test checks) */
        if (strcmp(stage, "none") != 0 && strcmp(stage, "runtime") != 0) {
            ck_assert_msg(strstr(d.msg, want) != NULL, "%s: message '%s' lacks '%s'", de->d_name, d.msg,
                          want);
            ck_assert_msg(strchr(d.msg, '\n') == NULL, "%s: not one line", de->d_name);
            cases++;
        }
        rlx_weights_close(w);
        rlx_config_free(c);
        free(stage);
        free(want);
        free(exp);
    }
    closedir(dir);
    rlx_registry_close(reg);
    ck_assert_int_ge(cases, 29);

    /* bad files for forward --inputs */
    const char *ins[] = {"garbage", "truncated", "f64-ids"};
    for (size_t i = 0; i < 3; i++) {
        char p[4200], e[4200];
        snprintf(p, sizeof p, "%s/inputs/%s.safetensors", rootbuf, ins[i]);
        snprintf(e, sizeof e, "%s/inputs/%s.expect", rootbuf, ins[i]);
        size_t len;
        char *want = tu_read_file(e, &len);
        want[strcspn(want, "\n")] = 0;
        rlx_weights *w = NULL;
        rlx_diag d;
        rlx_diag_init(&d);
        ck_assert_int_ne(rlx_weights_open(p, &w, &d), 0);
        ck_assert_msg(strstr(d.msg, want) && strstr(d.msg, p), "%s: '%s'", ins[i], d.msg);
        free(want);
    }
}
END_TEST

/* Crashers the fuzzers found: each file goes through its parser again. */
START_TEST(fuzz_regressions)
{
    char rootbuf[4096];
    snprintf(rootbuf, sizeof rootbuf, "%s", tu_src("tests/bad-inputs/fuzz-regressions"));
    DIR *dir = opendir(rootbuf);
    ck_assert_ptr_nonnull(dir);
    struct dirent *de;
    while ((de = readdir(dir)) != NULL) {
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", rootbuf, de->d_name);
        struct stat st;
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode) || de->d_name[0] == '.') continue;
        size_t len;
        char *buf = tu_read_file(p, &len);
        rlx_diag d;
        rlx_diag_init(&d);
        if (strncmp(de->d_name, "st-", 3) == 0) {
            rlx_weights *w = NULL;
            if (rlx_weights_open(p, &w, &d) == 0) rlx_weights_close(w);
            else ck_assert(d.msg[0]);
        } else if (strncmp(de->d_name, "config-", 7) == 0) {
            rlx_config *c = NULL;
            if (rlx_config_parse(buf, len, p, &c, &d) == 0) rlx_config_free(c);
            else ck_assert(d.msg[0]);
        } else if (strncmp(de->d_name, "profile-", 8) == 0) {
            rlx_profile pr;
            if (rlx_profile_parse(buf, len, p, &pr, &d) != 0) ck_assert(d.msg[0]);
        }
        free(buf);
    }
    closedir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("weights");
    TCase *tc = tcase_create("weights");
    tcase_add_test(tc, dtype_names_sizes);
    tcase_add_test(tc, half_conversions);
    tcase_add_test(tc, fixture_models_zero_copy);
    tcase_add_test(tc, exact_bytes_and_conversion);
    tcase_add_test(tc, ints);
    tcase_add_test(tc, tied_embeddings);
    tcase_add_test(tc, expect_shape);
    tcase_add_test(tc, writer_roundtrip_and_shards);
    tcase_add_test(tc, bad_input_corpus);
    tcase_add_test(tc, fuzz_regressions);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
