/* Helpers shared by the causal-LM parity tests (test_llama_parity, test_qwen_gemma_parity):
 * reading reference tensors, running rlx-run, writing inputs and flows. They assert with
 * Check, so call them inside a test. */
#ifndef RLX_PARITY_UTIL_H
#define RLX_PARITY_UTIL_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include "rlx/rlx.h"

rlx_weights *pu_open_st(const char *path);
/* tests/fixtures/<model>/ref.safetensors */
rlx_weights *pu_open_ref(const char *model);
/* a float tensor as F32 (malloc), its value count in *numel */
float *pu_read_f32(const rlx_weights *w, const char *name, size_t *numel);
/* the same, with its shape */
float *pu_read_tensor(const rlx_weights *w, const char *name, rlx_shape *shape);
/* an integer tensor as I32 (malloc), its value count in *n */
int32_t *pu_read_ids(const rlx_weights *w, const char *name, size_t *n);
json_t *pu_load_json(const char *path);
/* runs a command, requires exit 0, returns stdout (caller frees) */
char *pu_run_ok(const char *cmd, int timeout_s);
/* ids as the HF input "input_ids" [1, T] I32 in path */
void pu_write_ids(const char *path, const int32_t *ids, size_t t);
/* text into dir/name; returns the path (caller frees) */
char *pu_write_file(const char *dir, const char *name, const char *text);
/* "1,2,3" into out */
void pu_ids_arg(char *out, size_t len, const int32_t *ids, size_t t);
/* a JSON array of n integers equal to want (what names it in the failure) */
void pu_check_ids(json_t *arr, const int32_t *want, size_t n, const char *what);
/* the reference's "case<c>.input_ids" / "case<c>.<what>" (malloc) */
int32_t *pu_read_case_ids(const rlx_weights *ref, int c, size_t *t);
float *pu_read_case_f32(const rlx_weights *ref, int c, const char *what, size_t *numel);
/* One case of a causal-LM fixture for a generate test: prompt ids [t], prefill logits
 * [nlog], full-sequence logits [nfull] (checked to cover t + n_gen - 1 rows), and ref.json's
 * greedy ids and margins (n_gen each). pu_gen_case_close frees it. */
typedef struct pu_gen_case {
    rlx_weights *ref;
    int32_t *ids;
    size_t t, nlog, nfull, vocab;
    float *prefill, *full;
    json_t *rj, *greedy, *margins;
} pu_gen_case;
void pu_gen_case_open(pu_gen_case *k, const char *model, int c, size_t n_gen);
void pu_gen_case_close(pu_gen_case *k);
/* rlx-run forward's logits file against want [nref]: rel L2 < 1e-4. The first run's logits
 * are kept in *first (caller frees); later runs must match them (< 1e-5). Messages name
 * the run by label ("(direct, 1 threads)"), as ("direct/1 threads") and first_as. */
void pu_check_forward_logits(const char *out_path, const float *want, size_t nref, const char *model,
                             int c, const char *label, const char *as, const char *first_as,
                             float **first);
/* rlx-run generate's stdout (out, freed): prompt_ids are ids, n_gen ids that match the greedy
 * reference wherever its margin exceeds 1e-2. Returns the parsed object (json_decref it). */
json_t *pu_check_generated(char *out, const int32_t *ids, size_t t, json_t *greedy, json_t *margins,
                           size_t n_gen, const char *what);
/* rlx-run generate's logits file: prefill logits [nlog] and each decode step against the
 * full-forward reference rows (full, [t + n_gen - 1, vocab]), rel L2 < 1e-4. The first run's
 * decode logits are kept in *first (caller frees); later runs must match them (< 1e-5). */
void pu_check_generate_logits(const char *out_path, const float *want_prefill, size_t nlog,
                              const float *full, size_t t, size_t vocab, size_t n_gen,
                              float **first, const char *first_name, const char *what);
#endif
