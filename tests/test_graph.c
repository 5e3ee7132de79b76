/* Graph pipeline: shape errors, DCE, fusion, assert_clean, legalize, arena planning,
 * weight emission — through rlx_model_from_flow with custom (tier-2) stages and a fake
 * backend that records the program it is handed. */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rlx/rlx.h"
#include "test_graph_fake.h"
#include "testutil.h"

static const char *const ALL_OPS[] = {
    "rlx.embedding", "rlx.matmul", "rlx.matmul_nn", "rlx.add", "rlx.sub", "rlx.mul", "rlx.scale",
    "rlx.add_scalar", "rlx.silu", "rlx.gelu", "rlx.gelu_tanh", "rlx.tanh", "rlx.softcap",
    "rlx.softmax", "rlx.rms_norm", "rlx.layer_norm", "rlx.rope", "rlx.attention",
    "rlx.cache_write", "rlx.transpose", "rlx.concat", "rlx.slice", "rlx.last_row", "rlx.copy",
    "rlx.cast", "rlx.swiglu", "rlx.geglu_tanh", "rlx.add_rms_norm", "rlx.linear_swiglu", NULL};
static const char *const NO_LINEAR[] = {
    "rlx.matmul", "rlx.add", "rlx.mul", "rlx.scale", "rlx.silu", "rlx.rms_norm", "rlx.copy",
    "rlx.swiglu", "rlx.add_rms_norm", NULL};
static const char *const PRIMS[] = {"rlx.matmul", "rlx.add", "rlx.mul", "rlx.scale", "rlx.silu",
                                    "rlx.rms_norm", "rlx.copy", NULL};
static const char *const PRIMS_NO_SILU[] = {"rlx.matmul", "rlx.add", "rlx.mul", "rlx.scale",
                                            "rlx.rms_norm", "rlx.copy", NULL};

static rlx_shape shp(uint32_t n, ...)
{
    rlx_shape s;
    memset(&s, 0, sizeof s);
    va_list ap;
    va_start(ap, n);
    for (uint32_t i = 0; i < n; i++) s.dims[i] = va_arg(ap, int64_t);
    va_end(ap);
    s.ndim = n;
    return s;
}

static int32_t cfill(rlx_ctx *c, const rlx_host_api *h, rlx_shape s, float v)
{
    int64_t n = rlx_shape_numel(&s);
    float *buf = malloc((size_t)n * sizeof *buf);
    for (int64_t i = 0; i < n; i++) buf[i] = v + 0.01f * (float)(i % 7);
    int32_t id = h->emit_const(c, RLX_F32, &s, buf);
    free(buf);
    return id;
}

static rlx_flow *flow_x(int64_t H)
{
    rlx_flow *f = rlx_flow_new("test");
    int64_t dims[2] = {-1, H};
    ck_assert_int_eq(rlx_flow_input(f, "x", RLX_F32, 2, dims), 0);
    return f;
}

static rlx_model *model_on(const rlx_backend *be, rlx_flow *f, const char *policy, const rlx_profile *pr,
                           const rlx_weights *w)
{
    rlx_model_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.prefill = f;
    spec.backend = be;
    spec.profile = pr;
    spec.weights = w;
    rlx_model_options o;
    rlx_model_options_init(&o);
    o.policy = policy;
    rlx_model *m = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_model_from_flow(&spec, &o, &m, &d) == 0, "%s", d.msg);
    return m;
}

static rlx_model *model(rlx_flow *f, const char *const *ops, const char *policy, const rlx_profile *pr,
                        const rlx_weights *w)
{
    return model_on(fake_backend(ops), f, policy, pr, w);
}

/* compile the prefill graph for T; returns the status, message in d */
static int compile(rlx_model *m, int64_t T, rlx_diag *d)
{
    rlx_diag_init(d);
    FILE *null = fopen("/dev/null", "w");
    int rc = rlx_model_dump_graph(m, RLX_PHASE_PREFILL, T, null, d);
    fclose(null);
    return rc;
}

/* ---------------------------------------------------------------- shape errors */

static int emit_bad_matmul(rlx_ctx *c, const rlx_host_api *h, void *u)
{
    (void)u;
    int32_t x = h->slot_get(c, "x");
    int32_t w = cfill(c, h, shp(2, (int64_t)16, (int64_t)4), 0.1f);
    int32_t in[2] = {x, w};
    int32_t y = h->emit_op(c, "rlx.matmul", in, 2, NULL, 0);
    return y < 0 ? 1 : h->emit_output(c, "y", y);
}

static int emit_bad_add(rlx_ctx *c, const rlx_host_api *h, void *u)
{
    (void)u;
    int32_t x = h->slot_get(c, "x");
    int32_t b = cfill(c, h, shp(1, (int64_t)3), 0.1f);
    int32_t in[2] = {x, b};
    int32_t y = h->emit_op(c, "rlx.add", in, 2, NULL, 0);
    if (y < 0) return 1;
    h->slot_set(c, "x", y);
    return 0;
}

START_TEST(shape_error_names_stage_op_and_shapes)
{
    rlx_flow *f = flow_x(8);
    ck_assert_int_eq(rlx_flow_custom(f, "bad_mlp", emit_bad_matmul, NULL), 0);
    rlx_model *m = model(f, ALL_OPS, "direct", NULL, NULL);
    rlx_diag d;
    ck_assert_int_eq(compile(m, 4, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "stage 1 (bad_mlp): rlx.matmul: x [4, 8] and w [16, 4]: w must be [N, K] with K = x's last dim");
    rlx_model_close(m);
    rlx_flow_free(f);

    /* inside a repeat the index is named too */
    f = flow_x(8);
    rlx_flow *body = rlx_flow_new("layer");
    rlx_flow_custom(body, "layer", emit_bad_add, NULL);
    ck_assert_int_eq(rlx_flow_repeat(f, 2, body), 0);
    m = model(f, ALL_OPS, "direct", NULL, NULL);
    ck_assert_int_eq(compile(m, 4, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "stage 1 (layer, i=0): rlx.add: a [4, 8] and b [3]: b must equal a or a suffix of it");
    rlx_model_close(m);
    rlx_flow_free(body);
    rlx_flow_free(f);
}
END_TEST

static int emit_unknown(rlx_ctx *c, const rlx_host_api *h, void *u)
{
    (void)u;
    int32_t x = h->slot_get(c, "x");
    return h->emit_op(c, "rlx.frobnicate", &x, 1, NULL, 0) < 0;
}

static int emit_nothing(rlx_ctx *c, const rlx_host_api *h, void *u)
{
    (void)c, (void)h, (void)u;
    return 0;
}

START_TEST(unknown_op_and_no_output)
{
    rlx_flow *f = flow_x(8);
    rlx_flow_custom(f, "weird", emit_unknown, NULL);
    rlx_model *m = model(f, ALL_OPS, "direct", NULL, NULL);
    rlx_diag d;
    ck_assert_int_eq(compile(m, 2, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "stage 1 (weird): unknown op \"rlx.frobnicate\" (docs/OPS.md lists the core ops)");
    rlx_model_close(m);
    rlx_flow_free(f);
    f = flow_x(8);
    rlx_flow_custom(f, "idle", emit_nothing, NULL);
    m = model(f, ALL_OPS, "direct", NULL, NULL);
    ck_assert_int_eq(compile(m, 2, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "flow test: no stage emitted an output");
    rlx_model_close(m);
    rlx_flow_free(f);
}
END_TEST

/* ---------------------------------------------------------------- when layer */

static int emit_silu(rlx_ctx *c, const rlx_host_api *h, void *u)
{
    (void)u;
    int32_t x = h->slot_get(c, "x");
    int32_t y = h->emit_op(c, "rlx.silu", &x, 1, NULL, 0);
    return y < 0 ? 1 : h->slot_set(c, "x", y);
}

static int emit_out(rlx_ctx *c, const rlx_host_api *h, void *u)
{
    (void)u;
    return h->emit_output(c, "y", h->slot_get(c, "x"));
}

/* rlx.silu nodes compiled for repeat(outer, repeat(inner, when(cond, silu))) */
static int silus_when(int64_t outer, int64_t inner, const char *cond, rlx_diag *d)
{
    rlx_flow *f = flow_x(8), *in = rlx_flow_new("inner"), *rep = rlx_flow_new("rep"),
             *sel = rlx_flow_new("sel");
    rlx_flow_custom(sel, "silu", emit_silu, NULL);
    ck_assert_int_eq(rlx_flow_when(in, cond, sel), 0);
    ck_assert_int_eq(rlx_flow_repeat(rep, inner, in), 0);
    ck_assert_int_eq(rlx_flow_repeat(f, outer, rep), 0);
    rlx_flow_custom(f, "out", emit_out, NULL);
    rlx_model *m = model(f, ALL_OPS, "direct", NULL, NULL);
    int rc = compile(m, 2, d);
    rlx_model_close(m);
    rlx_flow_free(sel);
    rlx_flow_free(rep);
    rlx_flow_free(in);
    rlx_flow_free(f);
    return rc ? -rc : fake_count("rlx.silu");
}

START_TEST(when_selects_by_innermost_repeat_index)
{
    static const struct { const char *cond; int silus; } cases[] = {
        {"layer=0", 2},    {"layer=3", 2},     {"layer=4", 0},   {"layer=1..2", 4}, {"layer=2..", 4},
        {"layer%2=1", 4},  {"layer%3=0", 4},   {"!layer=0", 6},  {"!layer%2=0", 4}, {"layer=0..0", 2}};
    rlx_diag d;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int n = silus_when(2, 4, cases[i].cond, &d); /* inner indices 0..3, twice */
        ck_assert_msg(n == cases[i].silus, "%s: %d silu nodes (want %d) %s", cases[i].cond, n,
                      cases[i].silus, d.msg);
    }
    /* a layer condition needs a repeat around it when the flow is built */
    rlx_flow *f = flow_x(8), *sel = rlx_flow_new("sel");
    rlx_flow_custom(sel, "silu", emit_silu, NULL);
    ck_assert_int_eq(rlx_flow_when(f, "layer=0", sel), 0);
    rlx_flow_custom(f, "out", emit_out, NULL);
    rlx_model *m = model(f, ALL_OPS, "direct", NULL, NULL);
    ck_assert_int_eq(compile(m, 2, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "flow test: when \"layer=0\" is outside any repeat (layer is the innermost repeat's index)");
    rlx_model_close(m);
    rlx_flow_free(sel);
    rlx_flow_free(f);
}
END_TEST

/* prefill and decode flows that differ are written as one file, each under its phase */
START_TEST(dump_flow_json_keeps_each_phase)
{
    rlx_flow *pre = flow_x(8), *dec = flow_x(8);
    ck_assert_int_eq(rlx_flow_stage(pre, "a", "{\"k\": 1}"), 0);
    ck_assert_int_eq(rlx_flow_stage(dec, "b", NULL), 0);
    rlx_model_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.prefill = pre;
    spec.decode = dec;
    spec.backend = fake_backend(ALL_OPS);
    rlx_model *m = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(rlx_model_from_flow(&spec, NULL, &m, &d) == 0, "%s", d.msg);
    char *text = NULL;
    size_t n = 0;
    FILE *out = open_memstream(&text, &n);
    ck_assert_msg(rlx_model_dump_flow_json(m, out, &d) == 0, "%s", d.msg);
    fclose(out);
    ck_assert_str_eq(text,
        "{\n  \"name\": \"test\",\n  \"inputs\": [\n"
        "    {\"name\": \"x\", \"dtype\": \"F32\", \"shape\": [-1, 8]}\n  ],\n  \"stages\": [\n"
        "    {\"when\": \"phase=prefill\", \"stages\": [\n      {\"block\": \"a\", \"params\": {\"k\": 1}}\n    ]},\n"
        "    {\"when\": \"phase=decode\", \"stages\": [\n      {\"block\": \"b\"}\n    ]}\n  ]\n}\n");
    free(text);
    rlx_model_close(m);
    rlx_flow_free(pre);
    rlx_flow_free(dec);
}
END_TEST

/* ---------------------------------------------------------------- DCE */

static int emit_dead_branch(rlx_ctx *c, const rlx_host_api *h, void *u)
{
    (void)u;
    int32_t x = h->slot_get(c, "x");
    h->emit_op(c, "rlx.silu", &x, 1, NULL, 0); /* nobody reads it */
    rlx_attr a = RLX_ATTR_F("scale", 2.0);
    int32_t y = h->emit_op(c, "rlx.scale", &x, 1, &a, 1);
    return h->emit_output(c, "y", y);
}

/* x [T, 8] through emit_dead_branch */
static rlx_flow *flow_dead(void)
{
    rlx_flow *f = flow_x(8);
    rlx_flow_custom(f, "dead", emit_dead_branch, NULL);
    return f;
}

START_TEST(dce_removes_unused_nodes)
{
    rlx_profile pr;
    rlx_profile_defaults(&pr);
    rlx_flow *f = flow_dead();
    rlx_model *m = model(f, ALL_OPS, "direct", &pr, NULL);
    rlx_diag d;
    ck_assert_msg(compile(m, 4, &d) == 0, "%s", d.msg);
    ck_assert_int_eq(fake_rec.n_nodes, 1);
    ck_assert_int_eq(fake_count("rlx.silu"), 0);
    rlx_model_close(m);
    pr.passes.dce = 0;
    m = model(f, ALL_OPS, "direct", &pr, NULL);
    ck_assert_msg(compile(m, 4, &d) == 0, "%s", d.msg);
    ck_assert_int_eq(fake_rec.n_nodes, 2);
    ck_assert_int_eq(fake_count("rlx.silu"), 1);
    rlx_model_close(m);
    rlx_flow_free(f);
}
END_TEST

/* a backend is told which phase a program was built for (ABI 1.3): a decode step of few
 * rows and a prefill of as few look alike to it otherwise */
START_TEST(program_names_its_phase)
{
    rlx_flow *f = flow_dead();
    rlx_model *m = model(f, ALL_OPS, "direct", NULL, NULL);
    FILE *null = fopen("/dev/null", "w");
    static const int phases[] = {RLX_PHASE_DECODE, RLX_PHASE_PREFILL, RLX_PHASE_ENCODE};
    for (int i = 0; i < 3; i++) { /* one row each: only the phase tells them apart */
        rlx_diag d;
        rlx_diag_init(&d);
        fake_rec.compiled = 0;
        fake_rec.phase = -2;
        ck_assert_msg(rlx_model_dump_graph(m, phases[i], 1, null, &d) == 0, "%s", d.msg);
        ck_assert_int_eq(fake_rec.compiled, 1);
        ck_assert_int_eq(fake_rec.phase, phases[i]);
    }
    fclose(null);
    rlx_model_close(m);
    rlx_flow_free(f);
}
END_TEST

/* ---------------------------------------------------------------- fusion */

/* a pre-norm MLP block in primitives: s = x + 2x; n = rms_norm(s); y = s + down(silu(gate n) * up n) */
static int emit_mlp_prims(rlx_ctx *c, const rlx_host_api *h, void *u)
{
    (void)u;
    int32_t x = h->slot_get(c, "x");
    rlx_attr sc = RLX_ATTR_F("scale", 2.0), eps = RLX_ATTR_F("eps", 1e-5);
    int32_t x2 = h->emit_op(c, "rlx.scale", &x, 1, &sc, 1);
    int32_t in[2] = {x, x2};
    int32_t s = h->emit_op(c, "rlx.add", in, 2, NULL, 0);
    int32_t w = cfill(c, h, shp(1, (int64_t)8), 1.0f);
    int32_t in2[2] = {s, w};
    int32_t n = h->emit_op(c, "rlx.rms_norm", in2, 2, &eps, 1);
    int32_t wg = cfill(c, h, shp(2, (int64_t)16, (int64_t)8), 0.1f);
    int32_t wu = cfill(c, h, shp(2, (int64_t)16, (int64_t)8), 0.2f);
    int32_t wd = cfill(c, h, shp(2, (int64_t)8, (int64_t)16), 0.3f);
    int32_t ig[2] = {n, wg}, iu[2] = {n, wu};
    int32_t g = h->emit_op(c, "rlx.matmul", ig, 2, NULL, 0);
    int32_t up = h->emit_op(c, "rlx.matmul", iu, 2, NULL, 0);
    int32_t a = h->emit_op(c, "rlx.silu", &g, 1, NULL, 0);
    int32_t im[2] = {a, up};
    int32_t hh = h->emit_op(c, "rlx.mul", im, 2, NULL, 0);
    int32_t idn[2] = {hh, wd};
    int32_t dn = h->emit_op(c, "rlx.matmul", idn, 2, NULL, 0);
    int32_t ir[2] = {s, dn};
    int32_t y = h->emit_op(c, "rlx.add", ir, 2, NULL, 0);
    return y < 0 ? 1 : h->emit_output(c, "y", y);
}

START_TEST(fusion_forms_composites_under_fusable)
{
    rlx_flow *f = flow_x(8);
    rlx_flow_custom(f, "mlp", emit_mlp_prims, NULL);
    rlx_diag d;
    /* direct: blocks own the fusion, the pass does not run */
    rlx_model *m = model(f, ALL_OPS, "direct", NULL, NULL);
    ck_assert_msg(compile(m, 4, &d) == 0, "%s", d.msg);
    ck_assert_int_eq(fake_count("rlx.add_rms_norm"), 0);
    ck_assert_int_eq(fake_count("rlx.silu"), 1);
    ck_assert_int_eq(fake_rec.n_nodes, 9);
    rlx_model_close(m);
    /* fusable, a target with every composite */
    m = model(f, ALL_OPS, "fusable", NULL, NULL);
    ck_assert_msg(compile(m, 4, &d) == 0, "%s", d.msg);
    ck_assert_int_eq(fake_count("rlx.add_rms_norm"), 1);
    ck_assert_int_eq(fake_count("rlx.linear_swiglu"), 1);
    ck_assert_int_eq(fake_count("rlx.silu"), 0);
    ck_assert_int_eq(fake_count("rlx.mul"), 0);
    ck_assert_int_eq(fake_count("rlx.rms_norm"), 0);
    ck_assert_int_eq(fake_count("rlx.matmul"), 1);
    ck_assert_int_eq(fake_rec.n_nodes, 5);
    FILE *out = tmpfile();
    ck_assert_int_eq(rlx_model_dump_graph(m, RLX_PHASE_PREFILL, 4, out, &d), 0);
    rewind(out);
    char text[8192];
    size_t len = fread(text, 1, sizeof text - 1, out);
    text[len] = 0;
    fclose(out);
    ck_assert_ptr_nonnull(strstr(text, "fusion formed: rlx.add_rms_norm x1 rlx.swiglu x1 rlx.linear_swiglu x1\n"));
    ck_assert_ptr_nonnull(strstr(text, "fused regions: 2\n"));
    ck_assert_ptr_nonnull(strstr(text, "arena: "));
    rlx_model_close(m);
    /* a target without linear_swiglu: fused then legalized back to swiglu + matmuls */
    m = model(f, NO_LINEAR, "fusable", NULL, NULL);
    ck_assert_msg(compile(m, 4, &d) == 0, "%s", d.msg);
    ck_assert_int_eq(fake_count("rlx.swiglu"), 1);
    ck_assert_int_eq(fake_count("rlx.matmul"), 3);
    ck_assert_int_eq(fake_count("rlx.add_rms_norm"), 1);
    rlx_model_close(m);
    rlx_flow_free(f);
}
END_TEST

START_TEST(assert_clean_fails_on_unfused_pattern)
{
    rlx_profile pr;
    rlx_profile_defaults(&pr);
    pr.fusion.assert_clean = 1;
    pr.fusion.skip = 1;
    rlx_flow *f = flow_x(8);
    rlx_flow_custom(f, "mlp", emit_mlp_prims, NULL);
    rlx_model *m = model(f, ALL_OPS, "fusable", &pr, NULL);
    rlx_diag d;
    ck_assert_int_eq(compile(m, 4, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "assert_clean: unfused rlx.add_rms_norm pattern (rlx.add + rlx.rms_norm) in stage 1 (mlp); backend fake has rlx.add_rms_norm");
    rlx_model_close(m);
    /* the same with the pass on is clean */
    pr.fusion.skip = 0;
    m = model(f, ALL_OPS, "fusable", &pr, NULL);
    ck_assert_msg(compile(m, 4, &d) == 0, "%s", d.msg);
    rlx_model_close(m);
    /* a target that has no composite cannot be blamed */
    pr.fusion.skip = 1;
    m = model(f, PRIMS, "fusable", &pr, NULL);
    ck_assert_msg(compile(m, 4, &d) == 0, "%s", d.msg);
    rlx_model_close(m);
    rlx_flow_free(f);
}
END_TEST

/* ---------------------------------------------------------------- legalize */

static int emit_composites(rlx_ctx *c, const rlx_host_api *h, void *u)
{
    (void)u;
    int32_t x = h->slot_get(c, "x");
    rlx_attr eps = RLX_ATTR_F("eps", 1e-5);
    int32_t w = cfill(c, h, shp(1, (int64_t)8), 1.0f);
    int32_t in[3] = {x, x, w}, sn[2];
    if (h->emit_op_n(c, "rlx.add_rms_norm", in, 3, &eps, 1, sn, 2)) return 1;
    int32_t wg = cfill(c, h, shp(2, (int64_t)8, (int64_t)8), 0.1f);
    int32_t wu = cfill(c, h, shp(2, (int64_t)8, (int64_t)8), 0.2f);
    int32_t il[3] = {sn[1], wg, wu};
    int32_t a = h->emit_op(c, "rlx.linear_swiglu", il, 3, NULL, 0);
    int32_t is[2] = {a, sn[0]};
    int32_t b = h->emit_op(c, "rlx.swiglu", is, 2, NULL, 0);
    return b < 0 ? 1 : h->emit_output(c, "y", b);
}

START_TEST(legalize_decomposes_what_backend_lacks)
{
    rlx_flow *f = flow_x(8);
    rlx_flow_custom(f, "mlp", emit_composites, NULL);
    rlx_diag d;
    rlx_model *m = model(f, ALL_OPS, "direct", NULL, NULL);
    ck_assert_msg(compile(m, 3, &d) == 0, "%s", d.msg);
    ck_assert_int_eq(fake_rec.n_nodes, 3);
    rlx_model_close(m);
    m = model(f, PRIMS, "direct", NULL, NULL);
    ck_assert_msg(compile(m, 3, &d) == 0, "%s", d.msg);
    ck_assert_int_eq(fake_count("rlx.add_rms_norm") + fake_count("rlx.swiglu") + fake_count("rlx.linear_swiglu"), 0);
    ck_assert_int_eq(fake_count("rlx.add"), 1);
    ck_assert_int_eq(fake_count("rlx.rms_norm"), 1);
    ck_assert_int_eq(fake_count("rlx.matmul"), 2);
    ck_assert_int_eq(fake_count("rlx.silu"), 2);
    ck_assert_int_eq(fake_count("rlx.mul"), 2);
    /* decomposed nodes are scheduled in dependency order */
    uint8_t ready[FAKE_MAX] = {0};
    for (uint32_t v = 0; v < fake_rec.n_values; v++)
        if (fake_rec.values[v].kind != RLX_VALUE_TEMP && fake_rec.values[v].kind != RLX_VALUE_OUTPUT) ready[v] = 1;
    for (uint32_t i = 0; i < fake_rec.n_nodes; i++) {
        for (uint32_t k = 0; k < fake_rec.n_in[i]; k++) ck_assert_msg(ready[fake_rec.in[i][k]], "node %u reads an unwritten value", i);
        for (uint32_t k = 0; k < fake_rec.n_out[i]; k++) ready[fake_rec.out[i][k]] = 1;
    }
    rlx_model_close(m);
    /* a primitive the backend lacks is an error naming it */
    m = model(f, PRIMS_NO_SILU, "direct", NULL, NULL);
    ck_assert_int_eq(compile(m, 3, &d), RLX_ERR_UNSUPPORTED);
    ck_assert_str_eq(d.msg, "backend fake cannot run rlx.silu (stage 1 (mlp))");
    rlx_model_close(m);
    rlx_flow_free(f);
}
END_TEST

/* ---------------------------------------------------------------- arena */

static int emit_chain(rlx_ctx *c, const rlx_host_api *h, void *u)
{
    int n = *(int *)u;
    int32_t x = h->slot_get(c, "x");
    for (int i = 0; i < n; i++) {
        rlx_attr a = RLX_ATTR_F("scale", 1.5);
        x = h->emit_op(c, "rlx.scale", &x, 1, &a, 1);
        if (i == 3) { /* a reshape round trip: aliases, no copy */
            rlx_attr s1 = RLX_ATTR_V("shape", ((int64_t[]){-1, 2, 32}), 3);
            x = h->emit_op(c, "rlx.reshape", &x, 1, &s1, 1);
            rlx_attr s2 = RLX_ATTR_V("shape", ((int64_t[]){-1, 64}), 2);
            x = h->emit_op(c, "rlx.reshape", &x, 1, &s2, 1);
        }
    }
    return h->emit_output(c, "y", x);
}

static size_t vbytes(const rlx_value_desc *v) { return (size_t)rlx_shape_numel(&v->shape) * 4; }

static int32_t root_of(int32_t v)
{
    while (fake_rec.values[v].kind == RLX_VALUE_ALIAS) v = fake_rec.values[v].alias_of;
    return v;
}

/* no two TEMPs live at the same time share bytes; all inside the arena, aligned */
static void check_no_overlap(void)
{
    int def[FAKE_MAX], last[FAKE_MAX];
    for (uint32_t v = 0; v < fake_rec.n_values; v++) def[v] = last[v] = -1;
    for (uint32_t i = 0; i < fake_rec.n_nodes; i++) {
        for (uint32_t k = 0; k < fake_rec.n_out[i]; k++) {
            int32_t v = fake_rec.out[i][k];
            if (def[v] < 0) def[v] = (int)i;
            if (last[v] < (int)i) last[v] = (int)i;
        }
        for (uint32_t k = 0; k < fake_rec.n_in[i]; k++) last[root_of(fake_rec.in[i][k])] = (int)i;
    }
    for (uint32_t a = 0; a < fake_rec.n_values; a++) {
        const rlx_value_desc *va = &fake_rec.values[a];
        if (va->kind != RLX_VALUE_TEMP) continue;
        ck_assert_int_eq(va->arena_offset % 64, 0);
        ck_assert(va->arena_offset + vbytes(va) <= fake_rec.arena_bytes);
        for (uint32_t b = a + 1; b < fake_rec.n_values; b++) {
            const rlx_value_desc *vb = &fake_rec.values[b];
            if (vb->kind != RLX_VALUE_TEMP) continue;
            int live_together = def[a] <= last[b] && def[b] <= last[a];
            int share = va->arena_offset < vb->arena_offset + vbytes(vb) && vb->arena_offset < va->arena_offset + vbytes(va);
            ck_assert_msg(!(live_together && share), "values %u and %u overlap while both live", a, b);
        }
    }
}

START_TEST(arena_reuses_memory_without_overlap)
{
    int n = 10;
    rlx_flow *f = flow_x(64);
    rlx_flow_custom(f, "chain", emit_chain, &n);
    rlx_model *m = model(f, ALL_OPS, "direct", NULL, NULL);
    rlx_diag d;
    ck_assert_msg(compile(m, 64, &d) == 0, "%s", d.msg);
    ck_assert_int_eq(fake_rec.n_nodes, 10); /* reshapes never reach the backend */
    size_t sum = 0;
    uint32_t aliases = 0;
    for (uint32_t v = 0; v < fake_rec.n_values; v++) {
        if (fake_rec.values[v].kind == RLX_VALUE_TEMP) sum += vbytes(&fake_rec.values[v]);
        aliases += fake_rec.values[v].kind == RLX_VALUE_ALIAS;
    }
    ck_assert_int_eq(aliases, 2);
    ck_assert_uint_eq(sum, 9 * 64 * 64 * 4);
    ck_assert_uint_eq(fake_rec.arena_bytes, 2 * 64 * 64 * 4); /* ping-pong */
    check_no_overlap();
    rlx_model_close(m);
    rlx_flow_free(f);
    /* and on the fused MLP (two outputs per node, values read late) */
    f = flow_x(8);
    rlx_flow_custom(f, "mlp", emit_mlp_prims, NULL);
    m = model(f, ALL_OPS, "fusable", NULL, NULL);
    ck_assert_msg(compile(m, 5, &d) == 0, "%s", d.msg);
    check_no_overlap();
    rlx_model_close(m);
    rlx_flow_free(f);
}
END_TEST

/* ---------------------------------------------------------------- weights */

static int32_t tied[3];

static int emit_tied(rlx_ctx *c, const rlx_host_api *h, void *u)
{
    (void)u;
    rlx_shape e = shp(2, (int64_t)6, (int64_t)4);
    tied[0] = h->emit_weight(c, "model.embed_tokens.weight", &e);
    tied[1] = h->emit_weight(c, "model.embed_tokens.weight", &e);
    tied[2] = h->emit_weight_opt(c, "lm_head.weight", &e);
    int32_t x = h->slot_get(c, "x");
    int32_t in[2] = {x, tied[1]};
    int32_t y = h->emit_op(c, "rlx.matmul", in, 2, NULL, 0);
    return y < 0 ? 1 : h->emit_output(c, "y", y);
}

static int emit_wrong_shape(rlx_ctx *c, const rlx_host_api *h, void *u)
{
    (void)u;
    rlx_shape e = shp(2, (int64_t)160, (int64_t)64);
    return h->emit_weight(c, "model.layers.0.mlp.up_proj.weight", &e) < 0;
}

static int emit_missing(rlx_ctx *c, const rlx_host_api *h, void *u)
{
    (void)u;
    return h->emit_weight(c, "model.norm.weight", NULL) < 0;
}

/* a weight whose only consumer is dead: emitted, then dropped by DCE */
static int emit_dead(rlx_ctx *c, const rlx_host_api *h, void *u)
{
    (void)u;
    int32_t up = h->emit_weight(c, "model.layers.0.mlp.up_proj.weight", NULL);
    int32_t in[2] = {up, up};
    if (h->emit_op(c, "rlx.add", in, 2, NULL, 0) < 0) return 1;
    return emit_tied(c, h, u);
}

static uint64_t bound_bytes;
static void count_bound(void *user, uint64_t done, uint64_t total)
{
    (void)user;
    (void)total;
    bound_bytes = done;
}

START_TEST(weights_tied_once_and_shape_checked)
{
    char *dir = tu_mkdtemp();
    char path[4096];
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    rlx_st_writer *sw = rlx_st_writer_new();
    rlx_diag d;
    rlx_diag_init(&d);
    static float emb[24], up[64 * 160];
    rlx_shape se = shp(2, (int64_t)6, (int64_t)4), su = shp(2, (int64_t)64, (int64_t)160);
    ck_assert_int_eq(rlx_st_writer_add(sw, "model.embed_tokens.weight", RLX_F32, &se, emb, &d), 0);
    ck_assert_int_eq(rlx_st_writer_add(sw, "model.layers.0.mlp.up_proj.weight", RLX_F32, &su, up, &d), 0);
    ck_assert_msg(rlx_st_writer_save(sw, path, &d) == 0, "%s", d.msg);
    rlx_st_writer_free(sw);
    rlx_weights *w = NULL;
    ck_assert_msg(rlx_weights_open(path, &w, &d) == 0, "%s", d.msg);

    rlx_flow *f = flow_x(4);
    rlx_flow_custom(f, "head", emit_tied, NULL);
    rlx_model *m = model(f, ALL_OPS, "direct", NULL, w);
    ck_assert_msg(compile(m, 2, &d) == 0, "%s", d.msg);
    ck_assert_int_eq(tied[0], tied[1]);
    ck_assert_int_eq(tied[2], -1);
    uint32_t weights = 0;
    for (uint32_t v = 0; v < fake_rec.n_values; v++) weights += fake_rec.values[v].kind == RLX_VALUE_WEIGHT;
    ck_assert_int_eq(weights, 1);
    rlx_model_close(m);
    rlx_flow_free(f);

    /* one-way pipeline: only weights the passes keep are converted and bound */
    f = flow_x(4);
    rlx_flow_custom(f, "dead", emit_dead, NULL);
    rlx_model_spec spec;
    memset(&spec, 0, sizeof spec);
    spec.prefill = f;
    spec.backend = fake_backend(ALL_OPS);
    spec.weights = w;
    rlx_model_options o;
    rlx_model_options_init(&o);
    o.progress = count_bound;
    bound_bytes = 0;
    ck_assert_msg(rlx_model_from_flow(&spec, &o, &m, &d) == 0, "%s", d.msg);
    ck_assert_msg(compile(m, 2, &d) == 0, "%s", d.msg);
    ck_assert_int_eq(bound_bytes, sizeof emb); /* the embedding only, not up_proj */
    rlx_model_close(m);
    rlx_flow_free(f);

    f = flow_x(4);
    rlx_flow_custom(f, "mlp", emit_wrong_shape, NULL);
    m = model(f, ALL_OPS, "direct", NULL, w);
    ck_assert_int_eq(compile(m, 2, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "tensor model.layers.0.mlp.up_proj.weight: expected [160, 64], found [64, 160] (w.safetensors)");
    rlx_model_close(m);
    rlx_flow_free(f);

    f = flow_x(4);
    rlx_flow_custom(f, "norm", emit_missing, NULL);
    m = model(f, ALL_OPS, "direct", NULL, w);
    ck_assert_int_eq(compile(m, 2, &d), RLX_ERR_NOT_FOUND);
    ck_assert_str_eq(d.msg, "tensor model.norm.weight: not in the checkpoint (w.safetensors)");
    rlx_model_close(m);
    rlx_flow_free(f);
    rlx_weights_close(w);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* q, k and v of one x, then q again (one tensor read by two nodes) */
static int emit_qkv(rlx_ctx *c, const rlx_host_api *h, void *u)
{
    (void)u;
    static const char *const names[4] = {"q.weight", "k.weight", "v.weight", "q.weight"};
    static const char *const outs[4] = {"q", "k", "v", "q2"};
    int32_t x = h->slot_get(c, "x");
    for (int i = 0; i < 4; i++) {
        rlx_shape s = shp(2, (int64_t)(i % 3 == 0 ? 8 : 2), (int64_t)4);
        int32_t in[2] = {x, h->emit_weight(c, names[i], &s)};
        int32_t y = in[1] < 0 ? -1 : h->emit_op(c, "rlx.matmul", in, 2, NULL, 0);
        if (y < 0 || h->emit_output(c, outs[i], y) < 0) return 1;
    }
    return 0;
}

START_TEST(device_weights_side_by_side_in_node_order)
{
    char *dir = tu_mkdtemp();
    char path[4096];
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    rlx_st_writer *sw = rlx_st_writer_new();
    rlx_diag d;
    rlx_diag_init(&d);
    static float q[32], kv[8];
    rlx_shape sq = shp(2, (int64_t)8, (int64_t)4), skv = shp(2, (int64_t)2, (int64_t)4);
    /* the file lists them v, k, q: the block follows the nodes, not the file */
    ck_assert_int_eq(rlx_st_writer_add(sw, "v.weight", RLX_F32, &skv, kv, &d), 0);
    ck_assert_int_eq(rlx_st_writer_add(sw, "k.weight", RLX_F32, &skv, kv, &d), 0);
    ck_assert_int_eq(rlx_st_writer_add(sw, "q.weight", RLX_F32, &sq, q, &d), 0);
    ck_assert_msg(rlx_st_writer_save(sw, path, &d) == 0, "%s", d.msg);
    rlx_st_writer_free(sw);
    rlx_weights *w = NULL;
    ck_assert_msg(rlx_weights_open(path, &w, &d) == 0, "%s", d.msg);

    rlx_flow *f = flow_x(4);
    rlx_flow_custom(f, "qkv", emit_qkv, NULL);
    rlx_model *m = model_on(fake_device_backend(ALL_OPS), f, "direct", NULL, w);
    ck_assert_msg(compile(m, 2, &d) == 0, "%s", d.msg);
    /* three uploads (q once), each 256-byte aligned right after the one before, in one
     * allocation of exactly their padded sizes */
    ck_assert_int_eq(fake_mem_rec.n_upload, 3);
    char *at = fake_mem_rec.upload_dst[0];
    ck_assert_uint_eq(fake_mem_rec.upload_bytes[0], sizeof q);
    ck_assert_ptr_eq(fake_mem_rec.upload_dst[1], at + 256);
    ck_assert_ptr_eq(fake_mem_rec.upload_dst[2], at + 512);
    int blocks = 0;
    for (int i = 0; i < fake_mem_rec.n_alloc; i++)
        if (fake_mem_rec.alloc_ptr[i] == at) {
            ck_assert_uint_eq(fake_mem_rec.alloc_bytes[i], 3 * 256);
            blocks++;
        }
    ck_assert_int_eq(blocks, 1);
    /* another program of the same weights binds nothing new */
    int allocs = fake_mem_rec.n_alloc;
    ck_assert_msg(compile(m, 3, &d) == 0, "%s", d.msg);
    ck_assert_int_eq(fake_mem_rec.n_upload, 3);
    for (int i = allocs; i < fake_mem_rec.n_alloc; i++) ck_assert_uint_ne(fake_mem_rec.alloc_bytes[i], 3 * 256);
    rlx_model_close(m);
    rlx_flow_free(f);
    rlx_weights_close(w);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* ---------------------------------------------------------------- precision */

static const char *const F32_NO_CAST[] = {"rlx.matmul", "rlx.copy", NULL};

START_TEST(precision_casts_or_names_op_and_dtype)
{
    char *dir = tu_mkdtemp();
    char path[4096];
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    rlx_st_writer *sw = rlx_st_writer_new();
    rlx_diag d;
    rlx_diag_init(&d);
    static float emb[24];
    rlx_shape se = shp(2, (int64_t)6, (int64_t)4);
    ck_assert_int_eq(rlx_st_writer_add(sw, "model.embed_tokens.weight", RLX_F32, &se, emb, &d), 0);
    ck_assert_msg(rlx_st_writer_save(sw, path, &d) == 0, "%s", d.msg);
    rlx_st_writer_free(sw);
    rlx_weights *w = NULL;
    ck_assert_msg(rlx_weights_open(path, &w, &d) == 0, "%s", d.msg);
    rlx_profile pr;
    rlx_profile_defaults(&pr);
    strcpy(pr.precision.compute, "bf16");

    /* the fake backend lists f32 only: the bf16 weight reaches its matmul through a cast */
    rlx_flow *f = flow_x(4);
    rlx_flow_custom(f, "head", emit_tied, NULL);
    rlx_model *m = model(f, ALL_OPS, "direct", &pr, w);
    ck_assert_msg(compile(m, 2, &d) == 0, "%s", d.msg);
    ck_assert_int_eq(fake_count("rlx.cast"), 1);
    for (uint32_t v = 0; v < fake_rec.n_values; v++) {
        if (fake_rec.values[v].kind == RLX_VALUE_WEIGHT) ck_assert_int_eq(fake_rec.values[v].dtype, RLX_BF16);
        if (fake_rec.values[v].kind == RLX_VALUE_OUTPUT) ck_assert_int_eq(fake_rec.values[v].dtype, RLX_F32);
    }
    rlx_model_close(m);
    /* without rlx.cast it cannot: the error names the op and the dtypes */
    m = model(f, F32_NO_CAST, "direct", &pr, w);
    ck_assert_int_eq(compile(m, 2, &d), RLX_ERR_UNSUPPORTED);
    ck_assert_str_eq(d.msg, "backend fake cannot run rlx.matmul in F32,BF16 -> F32 and has no rlx.cast to run it in F32 (stage 1 (head))");
    rlx_model_close(m);
    /* f32 compute: no cast at all */
    strcpy(pr.precision.compute, "f32");
    m = model(f, F32_NO_CAST, "direct", &pr, w);
    ck_assert_msg(compile(m, 2, &d) == 0, "%s", d.msg);
    ck_assert_int_eq(fake_count("rlx.cast"), 0);
    rlx_model_close(m);
    rlx_flow_free(f);
    rlx_weights_close(w);
    tu_rmrf(dir);
    free(dir);
}
END_TEST

/* x -> rlx.cast to F32 (as a block converting an input) -> scale, then a scale the block
 * pins to f32 (attribute f32 = 1), summed into the output */
static int emit_cast_pin(rlx_ctx *c, const rlx_host_api *h, void *u)
{
    (void)u;
    int32_t x = h->slot_get(c, "x");
    rlx_attr cast[] = {RLX_ATTR_I("dtype", RLX_F32)}, two[] = {RLX_ATTR_F("scale", 2.0)},
             pin[] = {RLX_ATTR_F("scale", 3.0), RLX_ATTR_I("f32", 1)};
    int32_t y = h->emit_op(c, "rlx.cast", &x, 1, cast, 1);
    int32_t a = y < 0 ? -1 : h->emit_op(c, "rlx.scale", &y, 1, two, 1);
    int32_t b = a < 0 ? -1 : h->emit_op(c, "rlx.scale", &a, 1, pin, 2);
    int32_t in[2] = {a, b};
    int32_t s = b < 0 ? -1 : h->emit_op(c, "rlx.add", in, 2, NULL, 0);
    return s < 0 ? 1 : h->emit_output(c, "y", s);
}

/* mixed none: an emitted cast converts to what its output became (bf16), and a pinned
 * node writes f32 that its consumer reads without a cast */
START_TEST(precision_follows_emitted_casts_and_pins)
{
    rlx_profile pr;
    rlx_profile_defaults(&pr);
    strcpy(pr.precision.compute, "bf16");
    strcpy(pr.precision.mixed, "none");
    rlx_flow *f = flow_x(4);
    rlx_flow_custom(f, "cast_pin", emit_cast_pin, NULL);
    rlx_model *m = model(f, ALL_OPS, "direct", &pr, NULL);
    rlx_diag d;
    ck_assert_msg(compile(m, 2, &d) == 0, "%s", d.msg);
    int32_t first_cast = -1, last_scale = -1, add = -1;
    for (uint32_t i = 0; i < fake_rec.n_nodes; i++) {
        if (!strcmp(fake_rec.ops[i], "rlx.cast") && first_cast < 0) first_cast = (int32_t)i;
        if (!strcmp(fake_rec.ops[i], "rlx.scale")) last_scale = (int32_t)i;
        if (!strcmp(fake_rec.ops[i], "rlx.add")) add = (int32_t)i;
    }
    ck_assert(first_cast >= 0 && last_scale >= 0 && add >= 0);
    ck_assert_int_eq(fake_rec.values[fake_rec.in[first_cast][0]].kind, RLX_VALUE_INPUT);
    ck_assert_int_eq(fake_rec.values[fake_rec.out[first_cast][0]].dtype, RLX_BF16);
    ck_assert_int_eq(fake_rec.dtype_attr[first_cast], RLX_BF16);
    int32_t pinned = fake_rec.out[last_scale][0];
    ck_assert_int_eq(fake_rec.values[pinned].dtype, RLX_F32);
    ck_assert_msg(fake_rec.in[add][0] == pinned || fake_rec.in[add][1] == pinned,
                  "the pinned scale's f32 output does not reach rlx.add directly");
    rlx_model_close(m);
    rlx_flow_free(f);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("graph");
    TCase *t = tcase_create("pipeline");
    tcase_add_test(t, shape_error_names_stage_op_and_shapes);
    tcase_add_test(t, unknown_op_and_no_output);
    tcase_add_test(t, when_selects_by_innermost_repeat_index);
    tcase_add_test(t, dump_flow_json_keeps_each_phase);
    tcase_add_test(t, dce_removes_unused_nodes);
    tcase_add_test(t, program_names_its_phase);
    tcase_add_test(t, fusion_forms_composites_under_fusable);
    tcase_add_test(t, assert_clean_fails_on_unfused_pattern);
    tcase_add_test(t, legalize_decomposes_what_backend_lacks);
    tcase_add_test(t, arena_reuses_memory_without_overlap);
    tcase_add_test(t, weights_tied_once_and_shape_checked);
    tcase_add_test(t, device_weights_side_by_side_in_node_order);
    tcase_add_test(t, precision_casts_or_names_op_and_dtype);
    tcase_add_test(t, precision_follows_emitted_casts_and_pins);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    return tu_run_suite(suite());
}
