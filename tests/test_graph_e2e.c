/* End to end on the CPU backend: a tiny attention model emitted by a custom stage,
 * compared with a direct C computation — forward, bucketed prefill, KV-cache decode,
 * reset, and the forward input errors. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rlx/rlx.h"
#include "testutil.h"

enum { V = 11, H = 8, NH = 2, NKV = 1, D = 4 };
static float emb[V * H], wq[H * H], wk[NKV * D * H], wv[NKV * D * H], wn[H], wo[V * H];
static const float inv_freq[D / 2] = {1.0f, 0.1f};

static void init_weights(void)
{
    unsigned s = 12345;
#define RND() ((float)((s = s * 1103515245u + 12345u) >> 16 & 0x7fff) / 32768.0f - 0.5f)
    for (int i = 0; i < V * H; i++) emb[i] = RND();
    for (int i = 0; i < H * H; i++) wq[i] = RND();
    for (int i = 0; i < NKV * D * H; i++) wk[i] = RND(), wv[i] = RND();
    for (int i = 0; i < H; i++) wn[i] = 1.0f + 0.1f * RND();
    for (int i = 0; i < V * H; i++) wo[i] = RND();
#undef RND
}

static void matvec(const float *x, const float *w, int n, int k, float *y)
{
    for (int i = 0; i < n; i++) {
        double acc = 0;
        for (int j = 0; j < k; j++) acc += (double)x[j] * w[i * k + j];
        y[i] = (float)acc;
    }
}

static void rope(float *x, int pos)
{
    for (int i = 0; i < D / 2; i++) {
        double t = pos * (double)inv_freq[i], c = cos(t), sn = sin(t);
        float a = x[i], b = x[i + D / 2];
        x[i] = (float)(a * c - b * sn);
        x[i + D / 2] = (float)(b * c + a * sn);
    }
}

/* logits [n, V] for ids at positions 0..n-1 */
static void reference(const int32_t *ids, int n, float *logits)
{
    float (*h)[H] = calloc((size_t)n, sizeof *h), (*q)[H] = calloc((size_t)n, sizeof *q);
    float (*k)[D] = calloc((size_t)n, sizeof *k), (*v)[D] = calloc((size_t)n, sizeof *v);
    for (int t = 0; t < n; t++) {
        memcpy(h[t], &emb[ids[t] * H], sizeof h[t]);
        matvec(h[t], wq, H, H, q[t]);
        matvec(h[t], wk, D, H, k[t]);
        matvec(h[t], wv, D, H, v[t]);
        for (int hd = 0; hd < NH; hd++) rope(&q[t][hd * D], t);
        rope(k[t], t);
    }
    for (int t = 0; t < n; t++) {
        float r[H];
        for (int hd = 0; hd < NH; hd++) {
            double sc[64], mx = -1e30, sum = 0;
            for (int j = 0; j <= t; j++) {
                double s = 0;
                for (int e = 0; e < D; e++) s += (double)q[t][hd * D + e] * k[j][e];
                sc[j] = s * 0.5;
                if (sc[j] > mx) mx = sc[j];
            }
            for (int j = 0; j <= t; j++) sum += (sc[j] = exp(sc[j] - mx));
            for (int e = 0; e < D; e++) {
                double o = 0;
                for (int j = 0; j <= t; j++) o += sc[j] / sum * v[j][e];
                r[hd * D + e] = h[t][hd * D + e] + (float)o;
            }
        }
        double ms = 0;
        for (int e = 0; e < H; e++) ms += (double)r[e] * r[e];
        float nr[H];
        for (int e = 0; e < H; e++) nr[e] = (float)(r[e] / sqrt(ms / H + 1e-5)) * wn[e];
        matvec(nr, wo, V, H, &logits[t * V]);
    }
    free(h), free(q), free(k), free(v);
}

static rlx_shape shp2(int64_t a, int64_t b)
{
    rlx_shape s = {2, {a, b}};
    return s;
}

static int32_t reshape(rlx_ctx *c, const rlx_host_api *h, int32_t x, int64_t a, int64_t b, int64_t cc)
{
    int64_t dims[3] = {a, b, cc};
    rlx_attr at = RLX_ATTR_V("shape", dims, cc ? 3 : 2);
    return h->emit_op(c, "rlx.reshape", &x, 1, &at, 1);
}

static int emit_model(rlx_ctx *c, const rlx_host_api *h, void *u)
{
    (void)u;
    rlx_shape s;
    int32_t ids = h->slot_get(c, "input_ids"), positions = h->slot_get(c, "positions"), pos = h->slot_get(c, "pos");
    s = shp2(V, H);
    int32_t table = h->emit_const(c, RLX_F32, &s, emb);
    int32_t in[5] = {table, ids};
    int32_t x = h->emit_op(c, "rlx.embedding", in, 2, NULL, 0);
    s = shp2(H, H);
    int32_t q_w = h->emit_const(c, RLX_F32, &s, wq);
    s = shp2(NKV * D, H);
    int32_t k_w = h->emit_const(c, RLX_F32, &s, wk), v_w = h->emit_const(c, RLX_F32, &s, wv);
    rlx_shape fs = {1, {D / 2}};
    int32_t freq = h->emit_const(c, RLX_F32, &fs, inv_freq);
    int32_t mq[2] = {x, q_w}, mk[2] = {x, k_w}, mv[2] = {x, v_w};
    int32_t q = reshape(c, h, h->emit_op(c, "rlx.matmul", mq, 2, NULL, 0), -1, NH, D);
    int32_t k = reshape(c, h, h->emit_op(c, "rlx.matmul", mk, 2, NULL, 0), -1, NKV, D);
    int32_t v = reshape(c, h, h->emit_op(c, "rlx.matmul", mv, 2, NULL, 0), -1, NKV, D);
    int32_t rq[3] = {q, positions, freq}, rk[3] = {k, positions, freq};
    q = h->emit_op(c, "rlx.rope", rq, 3, NULL, 0);
    k = h->emit_op(c, "rlx.rope", rk, 3, NULL, 0);
    rlx_shape cs = {3, {h->context_length(c), NKV, D}};
    int32_t ck = h->emit_state(c, "cache.0.k", RLX_F32, &cs), cv = h->emit_state(c, "cache.0.v", RLX_F32, &cs);
    int32_t wk_in[3] = {ck, k, pos}, wv_in[3] = {cv, v, pos};
    int32_t k2 = h->emit_op(c, "rlx.cache_write", wk_in, 3, NULL, 0);
    int32_t v2 = h->emit_op(c, "rlx.cache_write", wv_in, 3, NULL, 0);
    rlx_attr causal = RLX_ATTR_I("causal", 1);
    int32_t ai[4] = {q, k2, v2, pos};
    int32_t a = reshape(c, h, h->emit_op(c, "rlx.attention", ai, 4, &causal, 1), -1, H, 0);
    int32_t ri[2] = {x, a};
    int32_t r = h->emit_op(c, "rlx.add", ri, 2, NULL, 0);
    rlx_shape ns = {1, {H}};
    int32_t nw = h->emit_const(c, RLX_F32, &ns, wn);
    rlx_attr eps = RLX_ATTR_F("eps", 1e-5);
    int32_t ni[2] = {r, nw};
    int32_t n = h->emit_op(c, "rlx.rms_norm", ni, 2, &eps, 1);
    s = shp2(V, H);
    int32_t ow = h->emit_const(c, RLX_F32, &s, wo);
    int32_t oi[2] = {n, ow};
    int32_t logits = h->emit_op(c, "rlx.matmul", oi, 2, NULL, 0);
    return logits < 0 ? 1 : h->emit_output(c, "logits", logits);
}

static rlx_registry *reg;
static rlx_model *m;

static void setup(void)
{
    init_weights();
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_registry_open(NULL, &reg, &d) == 0, "%s", d.msg);
    const rlx_backend *be = rlx_registry_backend(reg, "cpu", &d);
    ck_assert_msg(be != NULL, "%s", d.msg);
    rlx_flow *f = rlx_flow_new("tiny");
    int64_t t[1] = {-1}, one[1] = {1};
    rlx_flow_input(f, "input_ids", RLX_I32, 1, t);
    rlx_flow_input(f, "positions", RLX_I32, 1, t);
    rlx_flow_input(f, "pos", RLX_I32, 1, one);
    rlx_flow_custom(f, "tiny", emit_model, NULL);
    rlx_model_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.prefill = f;
    spec.backend = be;
    rlx_model_options o;
    rlx_model_options_init(&o);
    o.threads = 1;
    ck_assert_msg(rlx_model_from_flow(&spec, &o, &m, &d) == 0, "%s", d.msg);
    rlx_flow_free(f);
}

static void teardown(void)
{
    rlx_model_close(m);
    rlx_registry_close(reg);
}

static const int32_t IDS[8] = {3, 7, 1, 10, 0, 5, 5, 2};

START_TEST(session_prefill_decode_match_reference)
{
    float ref[8 * V], all[5 * V], last[V], step[V];
    reference(IDS, 8, ref);
    rlx_session *s = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_session_new(m, 32, &s, &d), 0);
    ck_assert_msg(rlx_session_prefill(s, IDS, 5, all, last, &d) == 0, "%s", d.msg); /* bucket 8, padded */
    ck_assert_double_lt(tu_rel_l2(all, ref, 5 * V), 1e-5);
    ck_assert_double_lt(tu_rel_l2(last, &ref[4 * V], V), 1e-5);
    for (int t = 5; t < 8; t++) {
        ck_assert_msg(rlx_session_decode(s, IDS[t], step, &d) == 0, "%s", d.msg);
        ck_assert_double_lt(tu_rel_l2(step, &ref[t * V], V), 1e-5);
    }
    ck_assert_int_eq(rlx_session_pos(s), 8);
    ck_assert_int_eq(rlx_model_compiled_count(m), 2); /* one prefill bucket, one decode */
    rlx_session_reset(s);
    ck_assert_msg(rlx_session_prefill(s, IDS, 3, all, NULL, &d) == 0, "%s", d.msg); /* bucket 4 */
    ck_assert_double_lt(tu_rel_l2(all, ref, 3 * V), 1e-5);
    ck_assert_msg(rlx_session_decode(s, IDS[3], step, &d) == 0, "%s", d.msg);
    ck_assert_double_lt(tu_rel_l2(step, &ref[3 * V], V), 1e-5);
    ck_assert_int_eq(rlx_model_compiled_count(m), 3);
    /* the context is a hard limit */
    rlx_session_free(s);
    ck_assert_int_eq(rlx_session_new(m, 4, &s, &d), 0);
    ck_assert_int_eq(rlx_session_prefill(s, IDS, 5, NULL, last, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "session: 5 tokens at position 0 exceed the context length 4");
    rlx_session_free(s);
}
END_TEST

static rlx_weights *inputs_file(const char *dir, const char *name, int dtype, const rlx_shape *sh, const void *data)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/in.safetensors", dir);
    rlx_st_writer *w = rlx_st_writer_new();
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_st_writer_add(w, name, dtype, sh, data, &d), 0);
    ck_assert_msg(rlx_st_writer_save(w, path, &d) == 0, "%s", d.msg);
    rlx_st_writer_free(w);
    rlx_weights *in = NULL;
    ck_assert_msg(rlx_weights_open(path, &in, &d) == 0, "%s", d.msg);
    return in;
}

START_TEST(forward_matches_reference_and_checks_inputs)
{
    char *dir = tu_mkdtemp();
    int64_t ids64[6];
    for (int i = 0; i < 6; i++) ids64[i] = IDS[i];
    rlx_shape sh = {2, {1, 6}};
    rlx_weights *in = inputs_file(dir, "input_ids", RLX_I64, &sh, ids64);
    rlx_st_writer *out = rlx_st_writer_new();
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_model_forward(m, in, out, &d) == 0, "%s", d.msg);
    char path[4096];
    snprintf(path, sizeof path, "%s/out.safetensors", dir);
    ck_assert_int_eq(rlx_st_writer_save(out, path, &d), 0);
    rlx_st_writer_free(out);
    rlx_weights_close(in);
    rlx_weights *res = NULL;
    ck_assert_int_eq(rlx_weights_open(path, &res, &d), 0);
    const rlx_tensor_info *lg = rlx_weights_find(res, "logits");
    ck_assert_ptr_nonnull(lg);
    ck_assert_int_eq(lg->shape.ndim, 3);
    ck_assert_int_eq(lg->shape.dims[0], 1);
    ck_assert_int_eq(lg->shape.dims[1], 6);
    ck_assert_int_eq(lg->shape.dims[2], V);
    float ref[6 * V], got[6 * V];
    reference(IDS, 6, ref);
    ck_assert_int_eq(rlx_weights_read(lg, RLX_F32, got, 6 * V, &d), 0);
    ck_assert_double_lt(tu_rel_l2(got, ref, 6 * V), 1e-5);
    rlx_weights_close(res);

    in = inputs_file(dir, "input_idz", RLX_I64, &sh, ids64);
    out = rlx_st_writer_new();
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_model_forward(m, in, out, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "input tensor \"input_idz\": not an input of this model (inputs: input_ids, positions)");
    rlx_weights_close(in);
    rlx_shape one = {1, {1}};
    int32_t zero = 0;
    in = inputs_file(dir, "pos", RLX_I32, &one, &zero);
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_model_forward(m, in, out, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "input tensor \"pos\": the KV cache position, set by the runtime (forward starts from "
                            "an empty cache), not an input (inputs: input_ids, positions)");
    rlx_weights_close(in);
    float f[6] = {0};
    rlx_shape s6 = {1, {6}};
    in = inputs_file(dir, "input_ids", RLX_F32, &s6, f);
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_model_forward(m, in, out, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "input tensor \"input_ids\": expected I32 [6], found F32 [6]");
    rlx_weights_close(in);
    rlx_st_writer_free(out);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* rlx_model_open on the demo model, by the arch recipe and by a JSON flow file: greedy
 * ids through prefill + decode equal transformers' (models/tiny-llama-py/reference.json) */
static void greedy_demo(const char *flow_file)
{
    rlx_model_options o;
    rlx_model_options_init(&o);
    o.flow_file = flow_file;
    o.threads = 1;
    rlx_model *lm = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_model_open(tu_src("models/tiny-llama-py"), &o, &lm, &d) == 0, "%s", d.msg);
    int64_t vocab = rlx_model_get_config(lm)->vocab_size;
    float *lg = malloc((size_t)vocab * sizeof *lg);
    rlx_session *s = NULL;
    ck_assert_int_eq(rlx_session_new(lm, 64, &s, &d), 0);
    const int32_t prompt[3] = {0, 484, 222}, want[6] = {268, 74, 1177, 459, 8, 222};
    ck_assert_msg(rlx_session_prefill(s, prompt, 3, NULL, lg, &d) == 0, "%s", d.msg);
    for (int k = 0; k < 6; k++) {
        int32_t best = 0;
        for (int64_t i = 1; i < vocab; i++)
            if (lg[i] > lg[best]) best = (int32_t)i;
        ck_assert_int_eq(best, want[k]);
        ck_assert_msg(rlx_session_decode(s, best, lg, &d) == 0, "%s", d.msg);
    }
    rlx_session_free(s);
    free(lg);
    rlx_model_close(lm);
}

START_TEST(demo_model_by_recipe_and_by_json_flow)
{
    greedy_demo(NULL);
    char *dir = tu_mkdtemp();
    char path[4096];
    snprintf(path, sizeof path, "%s/llama.flow.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"name\": \"llama-json\", \"stages\": [{\"block\": \"token_embed\"}, {\"block\": \"rope_tables\"},"
          " {\"repeat\": \"config:num_hidden_layers\", \"stages\": [{\"block\": \"llama.decoder_layer\","
          " \"params\": {\"prefix\": \"model.layers.{i}.\", \"cache\": \"cache.{i}\"}}]},"
          " {\"block\": \"final_norm\", \"params\": {\"weight\": \"model.norm.weight\"}}, {\"block\": \"lm_head\"}]}", f);
    fclose(f);
    greedy_demo(path);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("graph_e2e");
    TCase *t = tcase_create("cpu");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, session_prefill_decode_match_reference);
    tcase_add_test(t, forward_matches_reference_and_checks_inputs);
    suite_add_tcase(s, t);
    TCase *demo = tcase_create("demo");
    tcase_add_test(demo, demo_model_by_recipe_and_by_json_flow);
    suite_add_tcase(s, demo);
    return s;
}

int main(void)
{
    return tu_run_suite(suite());
}
