/* Tokenizer tests: Hugging Face ground truth (tests/fixtures/tokenizers/ref.json, the demo
 * model's reference.json), error messages naming the JSON path, normalizers. */
#include <check.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rlx/rlx.h"
#include "testutil.h"

static rlx_tokenizer *load_ok(const char *path)
{
    rlx_diag d;
    rlx_diag_init(&d);
    rlx_tokenizer *t = NULL;
    int rc = rlx_tokenizer_load(path, &t, &d);
    ck_assert_msg(rc == 0, "load %s: %s", path, d.msg);
    return t;
}

static int32_t *json_ids(json_t *arr, size_t *n)
{
    *n = json_array_size(arr);
    int32_t *v = malloc((*n + 1) * sizeof *v);
    for (size_t i = 0; i < *n; i++) v[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return v;
}

static void check_ids(const char *what, const int32_t *got, size_t ng, const int32_t *want, size_t nw)
{
    char g[4096] = "", w[4096] = "";
    for (size_t i = 0; i < ng && strlen(g) < 4000; i++) snprintf(g + strlen(g), sizeof g - strlen(g), "%d ", got[i]);
    for (size_t i = 0; i < nw && strlen(w) < 4000; i++) snprintf(w + strlen(w), sizeof w - strlen(w), "%d ", want[i]);
    ck_assert_msg(ng == nw && (nw == 0 || memcmp(got, want, nw * sizeof *got) == 0),
                  "%s: got [%s] want [%s]", what, g, w);
}

static json_t *load_json(const char *path)
{
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    ck_assert_msg(j != NULL, "%s: %s", path, je.text);
    return j;
}

static void check_ref_file(const char *name)
{
    json_t *ref = load_json(tu_fixture("tokenizers/ref.json"));
    char rel[256];
    snprintf(rel, sizeof rel, "tokenizers/%s", name);
    rlx_tokenizer *t = load_ok(tu_fixture(rel));
    json_t *cases = json_object_get(ref, name);
    ck_assert(json_array_size(cases) >= 8);
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        const char *text = json_string_value(json_object_get(c, "text"));
        const char *decoded = json_string_value(json_object_get(c, "decoded"));
        size_t nw;
        int32_t *want = json_ids(json_object_get(c, "ids"), &nw);
        for (int add = 0; add < 2; add++) { /* these files have no post-processor */
            rlx_diag d;
            rlx_diag_init(&d);
            int32_t *ids = NULL;
            size_t n = 0;
            ck_assert_msg(rlx_tokenizer_encode(t, text, strlen(text), add, &ids, &n, &d) == 0, "%s", d.msg);
            char what[512];
            snprintf(what, sizeof what, "%s case %zu (%s)", name, i, text);
            check_ids(what, ids, n, want, nw);
            free(ids);
        }
        char *out = NULL;
        rlx_diag d;
        rlx_diag_init(&d);
        ck_assert_msg(rlx_tokenizer_decode(t, want, nw, 1, &out, &d) == 0, "%s", d.msg);
        ck_assert_msg(strcmp(out, decoded) == 0, "%s case %zu decode: got '%s' want '%s'", name, i, out, decoded);
        free(out);
        free(want);
    }
    rlx_tokenizer_free(t);
    json_decref(ref);
}

START_TEST(ref_bytelevel) { check_ref_file("bytelevel-bpe.json"); }
END_TEST

START_TEST(ref_spm_bytefallback) { check_ref_file("spm-bpe-bytefallback.json"); }
END_TEST

START_TEST(demo_model_reference)
{
    rlx_tokenizer *t = load_ok(tu_src("models/tiny-llama-py/tokenizer.json"));
    json_t *ref = load_json(tu_src("models/tiny-llama-py/reference.json"));
    json_t *cases = json_object_get(ref, "cases");
    ck_assert(json_array_size(cases) == 3);
    for (size_t i = 0; i < json_array_size(cases); i++) {
        json_t *c = json_array_get(cases, i);
        const char *prompt = json_string_value(json_object_get(c, "prompt"));
        size_t np, ng;
        int32_t *pid = json_ids(json_object_get(c, "prompt_ids"), &np);
        int32_t *gid = json_ids(json_object_get(c, "generated_ids"), &ng);
        rlx_diag d;
        rlx_diag_init(&d);
        int32_t *ids;
        size_t n;
        ck_assert_msg(rlx_tokenizer_encode(t, prompt, strlen(prompt), 1, &ids, &n, &d) == 0, "%s", d.msg);
        check_ids(prompt, ids, n, pid, np);
        free(ids);
        /* without special tokens: the same ids minus BOS */
        ck_assert(rlx_tokenizer_encode(t, prompt, strlen(prompt), 0, &ids, &n, &d) == 0);
        check_ids(prompt, ids, n, pid + 1, np - 1);
        free(ids);
        char *text;
        ck_assert(rlx_tokenizer_decode(t, gid, ng, 1, &text, &d) == 0);
        ck_assert_str_eq(text, json_string_value(json_object_get(c, "generated_text")));
        free(text);
        int32_t *all = malloc((np + ng) * sizeof *all);
        memcpy(all, pid, np * sizeof *all);
        memcpy(all + np, gid, ng * sizeof *all);
        ck_assert(rlx_tokenizer_decode(t, all, np + ng, 1, &text, &d) == 0);
        ck_assert_str_eq(text, json_string_value(json_object_get(c, "full_text")));
        free(text);
        /* not skipping special tokens keeps BOS */
        ck_assert(rlx_tokenizer_decode(t, all, 1, 0, &text, &d) == 0);
        ck_assert_str_eq(text, "<|begin_of_text|>");
        free(text);
        free(all);
        free(pid);
        free(gid);
    }
    ck_assert_int_eq(rlx_tokenizer_vocab_size(t), 2048);
    ck_assert_int_eq(rlx_tokenizer_token_id(t, "<|end_of_text|>"), 1);
    ck_assert_int_eq(rlx_tokenizer_token_id(t, "no such token"), -1);
    json_decref(ref);
    rlx_tokenizer_free(t);
}
END_TEST

START_TEST(empty_and_invalid_text)
{
    rlx_tokenizer *t = load_ok(tu_src("models/tiny-llama-py/tokenizer.json"));
    rlx_diag d;
    rlx_diag_init(&d);
    int32_t *ids = NULL;
    size_t n = 99;
    ck_assert(rlx_tokenizer_encode(t, "", 0, 0, &ids, &n, &d) == 0);
    ck_assert_uint_eq(n, 0);
    free(ids);
    ck_assert(rlx_tokenizer_encode(t, "", 0, 1, &ids, &n, &d) == 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(ids[0], 0);
    free(ids);
    char *text = NULL;
    ck_assert(rlx_tokenizer_decode(t, NULL, 0, 1, &text, &d) == 0);
    ck_assert_str_eq(text, "");
    free(text);
    /* invalid UTF-8 is refused with the byte offset */
    ck_assert(rlx_tokenizer_encode(t, "ab\xff", 3, 0, &ids, &n, &d) == RLX_ERR_INVALID);
    ck_assert_msg(strstr(d.msg, "not valid UTF-8 (byte 2)") != NULL, "%s", d.msg);
    /* ids outside the vocabulary are skipped on decode, as tokenizers does */
    int32_t odd[] = {-5, 99999, 484};
    rlx_diag_init(&d);
    ck_assert(rlx_tokenizer_decode(t, odd, 3, 1, &text, &d) == 0);
    ck_assert_str_eq(text, "def");
    free(text);
    rlx_tokenizer_free(t);
}
END_TEST

/* a tokenizer.json written into a temp folder; returns the rc of loading it */
static int load_text(const char *json, rlx_tokenizer **t, rlx_diag *d)
{
    char *dir = tu_mkdtemp();
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert(f != NULL);
    fputs(json, f);
    fclose(f);
    rlx_diag_init(d);
    *t = NULL;
    int rc = rlx_tokenizer_load(path, t, d);
    tu_rmrf(dir);
    free(dir);
    return rc;
}

#define VOCAB "\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"e\":3,\"\\u00e9\":4,\"\\u0301\":5,\" \":6},\"merges\":[\"a b\"]"

START_TEST(error_unknown_model_type)
{
    rlx_tokenizer *t;
    rlx_diag d;
    int rc = load_text("{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", &t, &d);
    ck_assert_int_eq(rc, RLX_ERR_UNSUPPORTED);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(d.msg, "tokenizer.json: model.type: unsupported model type 'WordPiece'") != NULL,
                  "%s", d.msg);
}
END_TEST

START_TEST(error_unknown_pretokenizer)
{
    rlx_tokenizer *t;
    rlx_diag d;
    int rc = load_text("{\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\","
                       "\"individual_digits\":true},{\"type\":\"Frobnicate\"}]},"
                       "\"model\":{\"type\":\"BPE\"," VOCAB "}}",
                       &t, &d);
    ck_assert_int_eq(rc, RLX_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(d.msg, "pre_tokenizer.pretokenizers[1].type: unsupported pre-tokenizer 'Frobnicate'") !=
                      NULL,
                  "%s", d.msg);
    rc = load_text("{\"decoder\":{\"type\":\"CTC\"},\"model\":{\"type\":\"BPE\"," VOCAB "}}", &t, &d);
    ck_assert_int_eq(rc, RLX_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(d.msg, "decoder.type: unsupported decoder 'CTC'") != NULL, "%s", d.msg);
    rc = load_text("{\"normalizer\":{\"type\":\"Precompiled\"},\"model\":{\"type\":\"BPE\"," VOCAB "}}", &t, &d);
    ck_assert_int_eq(rc, RLX_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(d.msg, "normalizer.type: unsupported normalizer 'Precompiled'") != NULL, "%s", d.msg);
    rc = load_text("{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a z\"]}}", &t, &d);
    ck_assert_int_eq(rc, RLX_ERR_INVALID);
    ck_assert_msg(strstr(d.msg, "model.merges[0]: token 'z' is not in model.vocab") != NULL, "%s", d.msg);
    rc = load_text("{\"model\":", &t, &d);
    ck_assert_int_eq(rc, RLX_ERR_INVALID);
    ck_assert_msg(strstr(d.msg, "tokenizer.json") != NULL, "%s", d.msg);
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_tokenizer_load("/nonexistent/tokenizer.json", &t, &d), RLX_ERR_NOT_FOUND);
    ck_assert_msg(strstr(d.msg, "/nonexistent/tokenizer.json") != NULL, "%s", d.msg);
}
END_TEST

static void expect_encode(rlx_tokenizer *t, const char *text, const int32_t *want, size_t nw)
{
    rlx_diag d;
    rlx_diag_init(&d);
    int32_t *ids;
    size_t n;
    ck_assert_msg(rlx_tokenizer_encode(t, text, strlen(text), 1, &ids, &n, &d) == 0, "%s", d.msg);
    check_ids(text, ids, n, want, nw);
    free(ids);
}

START_TEST(normalizers_nfc_nfd)
{
    rlx_tokenizer *t;
    rlx_diag d;
    /* "é" precomposed (U+00E9) and decomposed (e + U+0301) */
    const char *nfc_in = "\xc3\xa9", *nfd_in = "e\xcc\x81";
    ck_assert(load_text("{\"normalizer\":{\"type\":\"NFC\"},\"model\":{\"type\":\"BPE\"," VOCAB "}}", &t, &d) == 0);
    expect_encode(t, nfd_in, (int32_t[]){4}, 1);
    expect_encode(t, nfc_in, (int32_t[]){4}, 1);
    rlx_tokenizer_free(t);
    ck_assert(load_text("{\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFD\"}]},"
                        "\"model\":{\"type\":\"BPE\"," VOCAB "}}",
                        &t, &d) == 0);
    expect_encode(t, nfc_in, (int32_t[]){3, 5}, 2);
    expect_encode(t, "ab", (int32_t[]){2}, 1);
    rlx_tokenizer_free(t);
}
END_TEST

START_TEST(split_behaviours_and_metaspace)
{
    rlx_tokenizer *t;
    rlx_diag d;
    /* "ab ab": whitespace split removed -> words "ab","ab" */
    ck_assert(load_text("{\"pre_tokenizer\":{\"type\":\"WhitespaceSplit\"},\"model\":{\"type\":\"BPE\"," VOCAB "}}",
                        &t, &d) == 0);
    expect_encode(t, "ab  ab", (int32_t[]){2, 2}, 2);
    rlx_tokenizer_free(t);
    /* MergedWithPrevious on " ": "ab ab" -> "ab " + "ab"; no merge "b " so [a b]->ab, ' ' */
    ck_assert(load_text("{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"String\":\" \"},"
                        "\"behavior\":\"MergedWithPrevious\",\"invert\":false},\"model\":{\"type\":\"BPE\"," VOCAB "}}",
                        &t, &d) == 0);
    expect_encode(t, "ab ab", (int32_t[]){2, 6, 2}, 3);
    rlx_tokenizer_free(t);
    /* Metaspace (prepend always, split) with a vocab holding the U+2581 forms */
    ck_assert(load_text("{\"pre_tokenizer\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\","
                        "\"prepend_scheme\":\"always\",\"split\":true},"
                        "\"decoder\":{\"type\":\"Metaspace\",\"replacement\":\"\\u2581\",\"prepend_scheme\":\"always\",\"split\":true},"
                        "\"model\":{\"type\":\"BPE\",\"vocab\":{\"\\u2581\":0,\"a\":1,\"b\":2,\"\\u2581a\":3,\"\\u2581ab\":4},"
                        "\"merges\":[\"\\u2581 a\",\"\\u2581a b\"]}}",
                        &t, &d) == 0);
    expect_encode(t, "ab a", (int32_t[]){4, 3}, 2);
    char *text;
    ck_assert(rlx_tokenizer_decode(t, (int32_t[]){4, 3}, 2, 1, &text, &d) == 0);
    ck_assert_str_eq(text, "ab a");
    free(text);
    rlx_tokenizer_free(t);
}
END_TEST

/* \s in a split pattern means Unicode White_Space, as in Hugging Face's regex engine:
 * U+180E MONGOLIAN VOWEL SEPARATOR (White_Space until Unicode 6.3, still \s in PCRE2)
 * stays inside the word, so the merge "a U+180E" applies. Inside and outside a class,
 * and \S alike. */
START_TEST(split_white_space_excludes_u180e)
{
    static const char *const patterns[] = {"\\\\s+|[^\\\\s]+", "\\\\S+|\\\\s+"};
    for (int i = 0; i < 2; i++) {
        char json[1024];
        snprintf(json, sizeof json,
                 "{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"%s\"},"
                 "\"behavior\":\"Isolated\",\"invert\":false},"
                 "\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"\\u180e\":2,\" \":3,"
                 "\"a\\u180e\":4,\"\\u2003\":5},\"merges\":[\"a \\u180e\"]}}",
                 patterns[i]);
        rlx_tokenizer *t;
        rlx_diag d;
        ck_assert_msg(load_text(json, &t, &d) == 0, "%s", d.msg);
        expect_encode(t, "a\xe1\xa0\x8e" "b", (int32_t[]){4, 1}, 2); /* one word: a+U+180E merged */
        expect_encode(t, "a b", (int32_t[]){0, 3, 1}, 3);               /* a space still splits */
        expect_encode(t, "a\xe2\x80\x83" "b", (int32_t[]){0, 5, 1}, 3); /* U+2003 EM SPACE too */
        rlx_tokenizer_free(t);
    }
}
END_TEST

START_TEST(added_tokens_normalized_and_rstrip)
{
    rlx_tokenizer *t;
    rlx_diag d;
    /* "<SEP>" is matched in lowercased text (its normalized form); "[B]" in the raw
     * text, swallowing the spaces after it (rstrip) */
    ck_assert(load_text("{\"added_tokens\":[{\"id\":7,\"content\":\"<SEP>\",\"normalized\":true,\"special\":false},"
                        "{\"id\":8,\"content\":\"[B]\",\"normalized\":false,\"rstrip\":true,\"special\":true}],"
                        "\"normalizer\":{\"type\":\"Lowercase\"},\"model\":{\"type\":\"BPE\"," VOCAB "}}",
                        &t, &d) == 0);
    expect_encode(t, "A<sep>b[B]  a", (int32_t[]){0, 7, 1, 8, 0}, 5);
    expect_encode(t, "AB", (int32_t[]){2}, 1);
    ck_assert_int_eq(rlx_tokenizer_token_id(t, "[B]"), 8);
    rlx_tokenizer_free(t);
}
END_TEST

/* tests/bad-inputs/fuzz-regressions/tokenizer-*: inputs that hung or misbehaved under
 * fuzz/fuzz_tokenizer; each must now fail to load with exactly this one-line error */
static const struct {
    const char *file, *err;
} fuzz_cases[] = {
    /* an empty Strip decoder content made decode spin start (9e18) times: a timeout */
    {"tokenizer-strip-empty-content.json", "decoder: \"content\" must be one character"},
    /* found by review: a cls id of 2^32-1 wrapped to -1, the "sequence A" marker */
    {"tokenizer-bert-cls-id-wraps.json", "post_processor: \"cls\" must be [token, id]"},
};

START_TEST(fuzz_regressions)
{
    for (size_t i = 0; i < sizeof fuzz_cases / sizeof fuzz_cases[0]; i++) {
        char path[1024], want[1200];
        snprintf(path, sizeof path, "%s/%s", tu_src("tests/bad-inputs/fuzz-regressions"), fuzz_cases[i].file);
        snprintf(want, sizeof want, "%s: %s", path, fuzz_cases[i].err);
        rlx_tokenizer *t = NULL;
        rlx_diag d;
        rlx_diag_init(&d);
        ck_assert_int_eq(rlx_tokenizer_load(path, &t, &d), RLX_ERR_INVALID);
        ck_assert_ptr_null(t);
        ck_assert_str_eq(d.msg, want);
    }
}
END_TEST

/* fuzz_tokenizer (UBSan, clang): a first word of characters outside the vocabulary (no unk,
 * no byte fallback) yields no ids, and caching it computed NULL + 0. The characters are
 * dropped, as tokenizers does; gcc's UBSan does not flag NULL + 0, so only the clang
 * harness replaying this file catches the old code. */
START_TEST(fuzz_regression_unknown_word)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer-unknown-word-no-ids.json", tu_src("tests/bad-inputs/fuzz-regressions"));
    rlx_tokenizer *t = load_ok(path);
    rlx_diag d;
    rlx_diag_init(&d);
    int32_t *ids;
    size_t n;
    static const int32_t want[] = {0, 0};
    ck_assert_msg(rlx_tokenizer_encode(t, "Hello a xyz a", 13, 1, &ids, &n, &d) == 0, "%s", d.msg);
    check_ids("Hello a xyz a", ids, n, want, 2);
    char *text;
    ck_assert_msg(rlx_tokenizer_decode(t, ids, n, 0, &text, &d) == 0, "%s", d.msg);
    ck_assert_str_eq(text, "a a");
    free(text);
    free(ids);
    rlx_tokenizer_free(t);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, ref_bytelevel);
    tcase_add_test(tc, ref_spm_bytefallback);
    tcase_add_test(tc, demo_model_reference);
    tcase_add_test(tc, empty_and_invalid_text);
    tcase_add_test(tc, error_unknown_model_type);
    tcase_add_test(tc, error_unknown_pretokenizer);
    tcase_add_test(tc, normalizers_nfc_nfd);
    tcase_add_test(tc, split_behaviours_and_metaspace);
    tcase_add_test(tc, split_white_space_excludes_u180e);
    tcase_add_test(tc, added_tokens_normalized_and_rstrip);
    tcase_add_test(tc, fuzz_regressions);
    tcase_add_test(tc, fuzz_regression_unknown_word);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return tu_run_suite(suite());
}
