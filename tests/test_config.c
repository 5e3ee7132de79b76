/* config.json: both transformers spellings give the same description; HF defaults;
 * strict errors naming file and key; generation_config.json; the weights a config's flows
 * read (rlx_config_weights) against the checkpoints. */
#include "rlx/rlx.h"
#include "testutil.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* the build's plugins: the arch that owns a model type reads its config */
static rlx_registry *plugins(void)
{
    static rlx_registry *reg;
    rlx_diag d;
    rlx_diag_init(&d);
    if (!reg) ck_assert_msg(rlx_registry_open(NULL, &reg, &d) == 0, "%s", d.msg);
    return reg;
}

static rlx_config *open_ok(const char *path)
{
    rlx_config *c = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    int rc = rlx_config_load(path, plugins(), &c, &d);
    ck_assert_msg(rc == 0, "%s: %s", path, d.msg);
    return c;
}

static rlx_config *parse_ok(const char *json)
{
    rlx_config *c = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    int rc = rlx_config_parse(json, strlen(json), "inline/config.json", &c, &d);
    if (!rc) rc = rlx_config_configure(c, plugins(), NULL, &d);
    ck_assert_msg(rc == 0, "%s", d.msg);
    return c;
}

static void parse_fails(const char *json, const char *expect)
{
    rlx_config *c = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    int rc = rlx_config_parse(json, strlen(json), "bad/config.json", &c, &d);
    if (!rc) {
        rc = rlx_config_configure(c, plugins(), NULL, &d);
        if (rc) {
            rlx_config_free(c);
            c = NULL;
        }
    }
    ck_assert_int_ne(rc, 0);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(d.msg, expect) != NULL, "message '%s' lacks '%s'", d.msg, expect);
    ck_assert_msg(strncmp(d.msg, "bad/config.json: ", 17) == 0, "message '%s' does not name the file",
                  d.msg);
}

static const char *const both[] = {"llama32-tiny", "llama-untied-bf16", "qwen3-tiny",
                                   "qwen3-untied-bf16", "gemma2-tiny", "gemma3-tiny"};

START_TEST(spellings_agree)
{
    const char *name = both[_i];
    char p5[512], p4[512];
    snprintf(p5, sizeof p5, "%s", tu_fixture(name)); /* the folder: config.json inside */
    snprintf(p4, sizeof p4, "%s", tu_fixture("configs-4x/"));
    strncat(p4, name, sizeof p4 - strlen(p4) - 6);
    strcat(p4, ".json");
    rlx_config *a = open_ok(p5), *b = open_ok(p4);
    const rlx_model_config *x = rlx_config_model(a), *y = rlx_config_model(b);
    ck_assert_str_eq(x->model_type, y->model_type);
    ck_assert_int_eq(x->num_layers, y->num_layers);
    ck_assert_str_eq(x->rope_type, y->rope_type);
    ck_assert_msg(x->rope_theta == y->rope_theta, "%s rope_theta %g vs %g", name, x->rope_theta,
                  y->rope_theta);
    ck_assert_msg(x->rope_local_theta == y->rope_local_theta, "%s local theta", name);
    ck_assert_int_eq(x->sliding_window, y->sliding_window);
    for (int i = 0; i < x->num_layers; i++) ck_assert_int_eq(x->layer_types[i], y->layer_types[i]);
    ck_assert_int_eq(x->head_dim, y->head_dim);
    ck_assert_int_eq(x->num_kv_heads, y->num_kv_heads);
    ck_assert_int_eq(x->bos_token_id, y->bos_token_id);
    ck_assert_int_eq(x->n_eos, y->n_eos);
    ck_assert_int_eq(x->dtype, y->dtype);
    ck_assert_str_eq(x->hidden_act, y->hidden_act);
    /* and the whole struct (both were zeroed before filling) */
    ck_assert_msg(memcmp(x, y, sizeof *x) == 0, "%s: 4.x and 5.x descriptions differ", name);
    rlx_config_free(a);
    rlx_config_free(b);
}
END_TEST

START_TEST(fixture_values)
{
    rlx_config *c = open_ok(tu_fixture("llama32-tiny/config.json"));
    const rlx_model_config *m = rlx_config_model(c);
    ck_assert_str_eq(m->model_type, "llama");
    ck_assert_str_eq(m->architecture, "LlamaForCausalLM");
    ck_assert_uint_eq(m->struct_size, RLX_STRUCT_SIZE(rlx_model_config, rope_axes));
    ck_assert_int_eq(m->vocab_size, 512);
    ck_assert_int_eq(m->hidden_size, 64);
    ck_assert_int_eq(m->intermediate_size, 160);
    ck_assert_int_eq(m->num_layers, 3);
    ck_assert_int_eq(m->num_heads, 4);
    ck_assert_int_eq(m->num_kv_heads, 2);
    ck_assert_int_eq(m->head_dim, 16);
    ck_assert_int_eq(m->max_position_embeddings, 256);
    ck_assert_double_eq(m->norm_eps, 1e-5);
    ck_assert_int_eq(m->tie_word_embeddings, 1);
    ck_assert_str_eq(m->hidden_act, "silu");
    ck_assert_str_eq(m->rope_type, "llama3");
    ck_assert_double_eq(m->rope_theta, 500000.0);
    ck_assert_double_eq(m->rope_factor, 32.0);
    ck_assert_double_eq(m->rope_low_freq_factor, 1.0);
    ck_assert_double_eq(m->rope_high_freq_factor, 4.0);
    ck_assert_int_eq(m->rope_original_max_position, 64);
    ck_assert_int_eq(m->bos_token_id, 1);
    ck_assert_int_eq(m->n_eos, 1);
    ck_assert_int_eq(m->eos_token_ids[0], 2);
    ck_assert_int_eq(m->dtype, RLX_F32);
    ck_assert_int_eq(m->sliding_window, 0);
    rlx_config_free(c);

    c = open_ok(tu_fixture("llama-untied-bf16"));
    m = rlx_config_model(c);
    ck_assert_int_eq(m->dtype, RLX_BF16);
    ck_assert_int_eq(m->tie_word_embeddings, 0);
    ck_assert_str_eq(m->rope_type, "default");
    ck_assert_double_eq(m->rope_factor, 0);
    rlx_config_free(c);

    c = open_ok(tu_fixture("qwen3-tiny"));
    m = rlx_config_model(c);
    ck_assert_int_eq(m->head_dim, 32); /* != hidden / heads */
    ck_assert_int_eq(m->bos_token_id, -1);
    ck_assert_int_eq(m->n_eos, 0);
    ck_assert_int_eq(m->sliding_window, 0);
    ck_assert_double_eq(m->rope_theta, 1e6);
    rlx_config_free(c);

    c = open_ok(tu_fixture("gemma2-tiny"));
    m = rlx_config_model(c);
    ck_assert_str_eq(m->hidden_act, "gelu_pytorch_tanh");
    ck_assert_int_eq(m->sliding_window, 8);
    ck_assert_double_eq(m->attn_logit_softcap, 50.0);
    ck_assert_double_eq(m->final_logit_softcap, 30.0);
    ck_assert_double_eq(m->query_pre_attn_scalar, 16.0);
    ck_assert_int_eq(m->layer_types[0], RLX_LAYER_SLIDING);
    ck_assert_int_eq(m->layer_types[1], RLX_LAYER_FULL);
    ck_assert_int_eq(m->layer_types[2], RLX_LAYER_SLIDING);
    ck_assert_int_eq(m->layer_types[3], RLX_LAYER_FULL);
    ck_assert_int_eq(m->bos_token_id, 2);
    ck_assert_int_eq(m->eos_token_ids[0], 1);
    ck_assert_double_eq(m->rope_local_theta, 0);
    rlx_config_free(c);

    c = open_ok(tu_fixture("gemma3-tiny"));
    m = rlx_config_model(c);
    ck_assert_str_eq(m->model_type, "gemma3_text");
    for (int i = 0; i < 6; i++)
        ck_assert_int_eq(m->layer_types[i], i == 5 ? RLX_LAYER_FULL : RLX_LAYER_SLIDING);
    ck_assert_double_eq(m->rope_theta, 1e6);
    ck_assert_double_eq(m->rope_local_theta, 1e4);
    ck_assert_double_eq(m->attn_logit_softcap, 0);
    ck_assert_double_eq(m->final_logit_softcap, 0);
    ck_assert_int_eq(m->tie_word_embeddings, 1);
    rlx_config_free(c);
}
END_TEST

START_TEST(other_models)
{
    rlx_config *c = open_ok(tu_fixture("bert-tiny"));
    const rlx_model_config *m = rlx_config_model(c);
    ck_assert_str_eq(m->model_type, "bert");
    ck_assert_double_eq(m->norm_eps, 1e-12);
    ck_assert_int_eq(m->type_vocab_size, 2);
    ck_assert_str_eq(m->hidden_act, "gelu");
    ck_assert_int_eq(m->head_dim, 16);
    ck_assert_int_eq(m->max_position_embeddings, 64);
    rlx_config_free(c);

    /* sam: the arch plugin reads the nested configs; the vision tower's sizes land in
     * the shared description, the rest stays a raw lookup */
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_config_open(tu_fixture("sam-tiny"), &c, &d), 0);
    ck_assert_str_eq(rlx_config_model(c)->model_type, "sam");
    ck_assert_msg(rlx_config_configure(c, plugins(), NULL, &d) == 0, "%s", d.msg);
    m = rlx_config_model(c);
    ck_assert_int_eq(m->hidden_size, 32);
    ck_assert_int_eq(m->num_layers, 2);
    ck_assert_int_eq(m->num_heads, 2);
    ck_assert_int_eq(m->intermediate_size, 64);
    ck_assert_str_eq(m->hidden_act, "gelu");
    double x = 0;
    ck_assert_int_eq(rlx_config_number(c, "vision_config.window_size", &x), 0);
    ck_assert_double_eq(x, 4);
    ck_assert_int_eq(rlx_config_number(c, "vision_config.global_attn_indexes.0", &x), 0);
    ck_assert_double_eq(x, 1);
    ck_assert_int_eq(rlx_config_number(c, "prompt_encoder_config.image_embedding_size", &x), 0);
    ck_assert_double_eq(x, 8);
    ck_assert_int_eq(rlx_config_number(c, "vision_config.use_rel_pos", &x), 0);
    ck_assert_double_eq(x, 1);
    ck_assert_int_ne(rlx_config_number(c, "vision_config.nope", &x), 0);
    ck_assert_int_ne(rlx_config_number(c, "vision_config.", &x), 0);
    ck_assert_int_ne(rlx_config_number(c, "vision_config.hidden_act", &x), 0); /* a string */
    rlx_config_free(c);

    c = open_ok(tu_fixture("flux1-tiny"));
    m = rlx_config_model(c);
    ck_assert_str_eq(m->model_type, "flux");
    ck_assert_str_eq(m->architecture, "FluxTransformer2DModel");
    ck_assert_int_eq(m->num_heads, 2);
    ck_assert_int_eq(m->head_dim, 16);
    ck_assert_int_eq(m->hidden_size, 32);
    ck_assert_int_eq(m->num_layers, 2);
    ck_assert_int_eq(rlx_config_number(c, "num_single_layers", &x), 0);
    ck_assert_double_eq(x, 2);
    ck_assert_int_eq(rlx_config_number(c, "axes_dims_rope.2", &x), 0);
    ck_assert_double_eq(x, 6);
    ck_assert_int_ne(rlx_config_number(c, "out_channels", &x), 0); /* null */
    rlx_config_free(c);

    c = open_ok(tu_fixture("flux2-tiny"));
    m = rlx_config_model(c);
    ck_assert_str_eq(m->architecture, "Flux2Transformer2DModel");
    ck_assert_double_eq(m->rope_theta, 2000);
    ck_assert_int_eq(m->intermediate_size, 96);
    ck_assert_int_eq(rlx_config_number(c, "guidance_embeds", &x), 0);
    ck_assert_double_eq(x, 1);
    rlx_config_free(c);
}
END_TEST

START_TEST(hf_defaults)
{
    /* the keys HF fills in when absent */
    rlx_config *c = parse_ok("{\"model_type\":\"llama\",\"hidden_size\":64,\"num_attention_heads\":4,"
                             "\"num_hidden_layers\":2,\"vocab_size\":10}");
    const rlx_model_config *m = rlx_config_model(c);
    ck_assert_int_eq(m->head_dim, 16);
    ck_assert_int_eq(m->num_kv_heads, 4);
    ck_assert_int_eq(m->tie_word_embeddings, 0);
    ck_assert_int_eq(m->bos_token_id, 1);
    ck_assert_int_eq(m->eos_token_ids[0], 2);
    ck_assert_double_eq(m->rope_theta, 10000.0);
    ck_assert_int_eq(m->max_position_embeddings, 2048);
    ck_assert_double_eq(m->norm_eps, 1e-6);
    ck_assert_int_eq(m->dtype, RLX_F32);
    rlx_config_free(c);

    c = parse_ok("{\"model_type\":\"gemma2\",\"num_hidden_layers\":3}");
    m = rlx_config_model(c);
    ck_assert_int_eq(m->head_dim, 256);
    ck_assert_int_eq(m->tie_word_embeddings, 1);
    ck_assert_double_eq(m->final_logit_softcap, 30.0);
    ck_assert_double_eq(m->query_pre_attn_scalar, 256);
    ck_assert_int_eq(m->sliding_window, 4096);
    rlx_config_free(c);

    /* HF's gemma ignores the legacy hidden_act: hidden_activation or its default */
    c = parse_ok("{\"model_type\":\"gemma2\",\"hidden_act\":\"gelu\",\"hidden_activation\":null}");
    ck_assert_str_eq(rlx_config_model(c)->hidden_act, "gelu_pytorch_tanh");
    rlx_config_free(c);

    c = parse_ok("{\"model_type\":\"gemma3_text\",\"num_hidden_layers\":12,"
                 "\"sliding_window_pattern\":4}");
    m = rlx_config_model(c);
    for (int i = 0; i < 12; i++)
        ck_assert_int_eq(m->layer_types[i], (i + 1) % 4 ? RLX_LAYER_SLIDING : RLX_LAYER_FULL);
    ck_assert_double_eq(m->rope_theta, 1e6);
    ck_assert_double_eq(m->rope_local_theta, 1e4);
    rlx_config_free(c);

    /* qwen3 with sliding window on: layers from max_window_layers slide */
    c = parse_ok("{\"model_type\":\"qwen3\",\"num_hidden_layers\":4,\"use_sliding_window\":true,"
                 "\"sliding_window\":128,\"max_window_layers\":2}");
    m = rlx_config_model(c);
    ck_assert_int_eq(m->sliding_window, 128);
    ck_assert_int_eq(m->layer_types[1], RLX_LAYER_FULL);
    ck_assert_int_eq(m->layer_types[2], RLX_LAYER_SLIDING);
    rlx_config_free(c);

    /* 4.x "type" spelling of rope_scaling; eos as a list; torch.dtype prefix */
    c = parse_ok("{\"model_type\":\"llama\",\"rope_scaling\":{\"type\":\"linear\",\"factor\":2.0},"
                 "\"eos_token_id\":[128001,128008,128009],\"torch_dtype\":\"float16\"}");
    m = rlx_config_model(c);
    ck_assert_str_eq(m->rope_type, "linear");
    ck_assert_double_eq(m->rope_factor, 2.0);
    ck_assert_int_eq(m->n_eos, 3);
    ck_assert_int_eq(m->eos_token_ids[2], 128009);
    ck_assert_int_eq(m->dtype, RLX_F16);
    rlx_config_free(c);
}
END_TEST

START_TEST(strict_errors)
{
    parse_fails("{\"model_type\":\"mamba\"}", "no arch plugin handles model_type \"mamba\" (installed: ");
    parse_fails("{\"model_type\":\"sam\",\"vision_config\":{\"window_size\":-1}}",
                "vision_config.window_size: expected 0 (none) to a size, got -1");
    parse_fails("{\"model_type\":\"sam\",\"prompt_encoder_config\":{\"image_embedding_size\":32}}",
                "prompt_encoder_config.image_embedding_size: 32, but the vision encoder gives 64");
    parse_fails("{\"hidden_size\":4}", "model_type: missing");
    parse_fails("{\"model_type\":\"llama\",\"hidden_size\":\"64\"}",
                "hidden_size: expected an integer, got a string");
    parse_fails("{\"model_type\":\"llama\",\"num_hidden_layers\":1000}",
                "num_hidden_layers: 1000 layers, at most 256");
    parse_fails("{\"model_type\":\"llama\",\"num_attention_heads\":0}",
                "num_attention_heads: must be positive, got 0");
    parse_fails("{\"model_type\":\"llama\",\"num_attention_heads\":4,\"num_key_value_heads\":3}",
                "num_key_value_heads: 3 does not divide num_attention_heads 4");
    parse_fails("{\"model_type\":\"llama\",\"torch_dtype\":\"float8\"}",
                "torch_dtype: \"float8\" is not a supported dtype");
    parse_fails("{\"model_type\":\"llama\",\"rope_scaling\":{\"rope_type\":\"llama3\",\"factor\":8}}",
                "rope_scaling.low_freq_factor: missing for rope type \"llama3\"");
    parse_fails("{\"model_type\":\"llama\",\"rope_parameters\":{\"rope_type\":\"linear\"}}",
                "rope_parameters.factor: missing");
    parse_fails("{\"model_type\":\"llama\",\"rope_parameters\":[]}",
                "rope_parameters: expected an object, got an array");
    parse_fails("{\"model_type\":\"gemma2\",\"num_hidden_layers\":2,\"layer_types\":[\"full_attention\"]}",
                "layer_types: 1 entries, num_hidden_layers is 2");
    parse_fails("{\"model_type\":\"gemma2\",\"num_hidden_layers\":1,\"layer_types\":[\"chunked\"]}",
                "layer_types[0]: expected one of full_attention|sliding_attention, got \"chunked\"");
    parse_fails("{\"_class_name\":\"UNet2DConditionModel\"}",
                "no arch plugin handles _class_name \"UNet2DConditionModel\" (installed: ");
    parse_fails("{\"model_type\":\"llama\",\"model_type\":\"qwen3\"}", "duplicate object key");
    parse_fails("[1,2]", "expected an object, got an array");
    parse_fails("{\"model_type\":\"llama\"", "invalid JSON");
    parse_fails("{\"model_type\":\"llama\",\"eos_token_id\":[1,2,3,4,5,6,7,8,9]}",
                "eos_token_id: 9 ids, at most 8");
    /* found by fuzz_config (tests/bad-inputs/fuzz-regressions/config-*): no UB on huge values */
    parse_fails("{\"_class_name\":\"Flux2Transformer2DModel\",\"mlp_ratio\":3333333333333333333.0}",
                "mlp_ratio: expected a ratio in (0, 64], got 3.33333e+18");
    parse_fails("{\"_class_name\":\"FluxTransformer2DModel\",\"num_attention_heads\":4294967296,"
                "\"attention_head_dim\":4294967296}",
                "num_attention_heads: 4294967296 is larger than 16777216");
    parse_fails("{\"model_type\":\"bert\",\"num_hidden_layers\":1001.0}",
                "num_hidden_layers: 1001 layers, at most 256 supported");
    parse_fails("{\"_class_name\":\"FluxTransformer2DModel\",\"num_layers\":0}",
                "num_layers: must be positive, got 0");
    parse_fails("{\"model_type\":\"llama\",\"hidden_size\":1e300}",
                "hidden_size: expected an integer, got a number");
    /* deep nesting is refused by the parser, not by the stack */
    size_t n = 200000;
    char *deep = malloc(2 * n + 32);
    strcpy(deep, "{\"a\":");
    size_t o = strlen(deep);
    for (size_t i = 0; i < n; i++) deep[o++] = '[';
    for (size_t i = 0; i < n; i++) deep[o++] = ']';
    deep[o++] = '}';
    deep[o] = 0;
    parse_fails(deep, "maximum parsing depth");
    free(deep);

    rlx_config *c = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_config_open("/nonexistent/dir/config.json", &c, &d), RLX_ERR_NOT_FOUND);
    ck_assert_ptr_nonnull(strstr(d.msg, "/nonexistent/dir/config.json"));
}
END_TEST

START_TEST(generation_config)
{
    rlx_config *c = open_ok(tu_fixture("llama32-tiny"));
    rlx_generation_config g;
    rlx_diag d;
    rlx_diag_init(&d);
    /* no generation_config.json in the fixture: HF defaults + the model's ids */
    ck_assert_int_eq(rlx_generation_config_load(tu_fixture("llama32-tiny"), rlx_config_model(c), &g, &d), 0);
    ck_assert_int_eq(g.bos_token_id, 1);
    ck_assert_int_eq(g.n_eos, 1);
    ck_assert_int_eq(g.eos_token_ids[0], 2);
    ck_assert_int_eq(g.do_sample, 0);
    ck_assert_double_eq(g.temperature, 1.0);
    ck_assert_double_eq(g.top_p, 1.0);
    ck_assert_int_eq(g.top_k, 50);

    char *dir = tu_mkdtemp();
    char path[4200];
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"bos_token_id\": 128000, \"eos_token_id\": [128001, 128009], \"do_sample\": true,"
          " \"temperature\": 0.6, \"top_p\": 0.9, \"top_k\": null, \"transformers_version\": \"4.45\"}",
          f);
    fclose(f);
    ck_assert_int_eq(rlx_generation_config_load(dir, rlx_config_model(c), &g, &d), 0);
    ck_assert_int_eq(g.bos_token_id, 128000);
    ck_assert_int_eq(g.n_eos, 2);
    ck_assert_int_eq(g.eos_token_ids[1], 128009);
    ck_assert_int_eq(g.do_sample, 1);
    ck_assert_double_eq(g.temperature, 0.6);
    ck_assert_double_eq(g.top_p, 0.9);
    ck_assert_int_eq(g.top_k, 50);

    f = fopen(path, "w");
    fputs("{\"temperature\": \"hot\"}", f);
    fclose(f);
    ck_assert_int_ne(rlx_generation_config_load(dir, rlx_config_model(c), &g, &d), 0);
    ck_assert_msg(strstr(d.msg, "generation_config.json: temperature: expected a number, got a string"),
                  "%s", d.msg);
    /* values no sampler can use, each refused naming its key */
    static const char *const invalid[][2] = {
        {"{\"temperature\": -1}", "temperature: must be >= 0, got -1"},
        {"{\"top_p\": 2}", "top_p: must be in (0, 1], got 2"},
        {"{\"top_p\": 0}", "top_p: must be in (0, 1], got 0"},
        {"{\"top_k\": -3}", "top_k: must be >= 0, got -3"},
        {"{\"repetition_penalty\": -1}", "repetition_penalty: must be > 0, got -1"},
        {"{\"repetition_penalty\": 0}", "repetition_penalty: must be > 0, got 0"},
    };
    for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
        f = fopen(path, "w");
        fputs(invalid[i][0], f);
        fclose(f);
        rlx_diag_init(&d);
        ck_assert_int_eq(rlx_generation_config_load(dir, rlx_config_model(c), &g, &d), RLX_ERR_INVALID);
        char want[4400];
        snprintf(want, sizeof want, "%s: %s", path, invalid[i][1]);
        ck_assert_str_eq(d.msg, want);
    }
    tu_rmrf(dir);
    free(dir);
    rlx_config_free(c);
}
END_TEST

/* rlx_config_weights into a list, for comparing with a checkpoint */
typedef struct listed {
    char name[256][128];
    rlx_shape shape[256];
    int n, stop_at; /* stop_at > 0: the sink fails on that tensor */
} listed;

static int list_sink(void *user, const char *name, const rlx_shape *s, rlx_diag *d)
{
    listed *l = user;
    if (l->stop_at && l->n + 1 == l->stop_at) return rlx_diag_set(d, RLX_ERR_IO, "sink stops at %s", name);
    ck_assert_int_lt(l->n, 256);
    snprintf(l->name[l->n], sizeof l->name[0], "%s", name);
    l->shape[l->n++] = *s;
    return 0;
}

static const char *const causal[] = {"llama32-tiny", "llama-untied-bf16", "qwen3-tiny", "qwen3-untied-bf16",
                                     "gemma2-tiny", "gemma3-tiny", "phi3-tiny"};

/* from config.json alone, the tensors the transformers checkpoint of each causal fixture
 * holds: the same names, each once, with the same shapes */
START_TEST(config_weights_match_checkpoints)
{
    const char *name = causal[_i];
    static listed l;
    memset(&l, 0, sizeof l);
    rlx_diag d;
    rlx_diag_init(&d);
    int rc = rlx_config_weights(tu_fixture(name), NULL, list_sink, &l, &d);
    ck_assert_msg(rc == 0, "%s: %s", name, d.msg);
    rlx_weights *w = NULL;
    ck_assert_msg(rlx_weights_open(tu_fixture(name), &w, &d) == 0, "%s", d.msg);
    ck_assert_msg((size_t)l.n == rlx_weights_count(w), "%s: %d listed, the checkpoint holds %zu", name, l.n,
                  rlx_weights_count(w));
    char a[96], b[96];
    for (int i = 0; i < l.n; i++) {
        const rlx_tensor_info *t = rlx_weights_find(w, l.name[i]);
        ck_assert_msg(t != NULL, "%s: listed %s is not in the checkpoint", name, l.name[i]);
        int same = t->shape.ndim == l.shape[i].ndim;
        for (uint32_t k = 0; same && k < t->shape.ndim; k++) same = t->shape.dims[k] == l.shape[i].dims[k];
        ck_assert_msg(same, "%s: %s listed as %s, stored as %s", name, l.name[i],
                      rlx_shape_str(&l.shape[i], a, sizeof a), rlx_shape_str(&t->shape, b, sizeof b));
        for (int j = 0; j < i; j++) ck_assert_msg(strcmp(l.name[i], l.name[j]) != 0, "%s listed twice", l.name[i]);
    }
    rlx_weights_close(w);
}
END_TEST

START_TEST(config_weights_errors)
{
    static listed l;
    memset(&l, 0, sizeof l);
    rlx_diag d;
    rlx_diag_init(&d);
    /* the first flow reads the embedding table first; the sink's error is returned as is */
    l.stop_at = 1;
    ck_assert_int_eq(rlx_config_weights(tu_fixture("llama32-tiny"), NULL, list_sink, &l, &d), RLX_ERR_IO);
    ck_assert_str_eq(d.msg, "sink stops at model.embed_tokens.weight");
    ck_assert_int_eq(l.n, 0);
    /* a block that leaves a weight's shape to the checkpoint cannot be listed */
    rlx_diag_init(&d);
    l.stop_at = 0;
    ck_assert_int_eq(rlx_config_weights(tu_fixture("bert-tiny"), NULL, list_sink, &l, &d), RLX_ERR_UNSUPPORTED);
    ck_assert_str_eq(d.msg, "tensor encoder.layer.0.intermediate.dense.weight: its block gives no expected shape, "
                            "so it cannot be listed from the config alone");
    rlx_diag_init(&d);
    ck_assert_int_ne(rlx_config_weights(tu_fixture("no-such-model"), NULL, list_sink, &l, &d), 0);
    ck_assert_msg(strstr(d.msg, "no-such-model") != NULL, "message '%s' does not name the path", d.msg);
    rlx_diag_init(&d);
    ck_assert_int_eq(rlx_config_weights(NULL, NULL, list_sink, &l, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "rlx_config_weights: no config or no sink");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("config");
    tcase_add_loop_test(tc, spellings_agree, 0, (int)(sizeof both / sizeof both[0]));
    tcase_add_test(tc, fixture_values);
    tcase_add_test(tc, other_models);
    tcase_add_test(tc, hf_defaults);
    tcase_add_test(tc, strict_errors);
    tcase_add_test(tc, generation_config);
    tcase_add_loop_test(tc, config_weights_match_checkpoints, 0, (int)(sizeof causal / sizeof causal[0]));
    tcase_add_test(tc, config_weights_errors);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
