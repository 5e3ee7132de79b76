/* rlx-run generate: prompt -> prefill -> sampled decode steps over the KV cache, text
 * streamed as it is produced (or one JSON object), optional logits dump. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "run_cmds.h"
#include "run_common.h"

static const char usage[] =
    "usage: rlx-run [generate] [--model DIR] (--prompt TEXT | --ids 1,2,3) [-n N] [--greedy | "
    "--temperature T --top-k K --top-p P --seed S] [--backend NAME] [--profile NAME|FILE] "
    "[--threads N] [--json] [--logits-out FILE] (--help for all options)";

static const char help[] =
    "usage: rlx-run [generate] [options]\n"
    "Generates text from a causal language model (default: the bundled demo model).\n"
    "\n"
    "  --model DIR            model folder: config.json, *.safetensors, tokenizer.json\n"
    "                         (default: $RLX_MODEL_DIR, else the bundled tiny-llama-py)\n"
    "  --prompt TEXT          prompt text (needs tokenizer.json; BOS added as the tokenizer's\n"
    "                         post-processor does). Default with the demo model: \"def \"\n"
    "  --ids 1,2,3            prompt token ids instead of text\n"
    "  -n, --max-new-tokens N tokens to generate (default 32); stops earlier at EOS\n"
    "  --greedy               always take the most likely token\n"
    "  --temperature T        sample with temperature T (0: greedy)\n"
    "  --top-k K              sample among the K most likely tokens (0: off)\n"
    "  --top-p P              nucleus sampling mass (1: off)\n"
    "  --repetition-penalty R penalise tokens already seen (1: off)\n"
    "  --seed S               sampling seed (default 0)\n"
    "                         (no sampling flag: generation_config.json decides, else greedy)\n"
    "  --backend NAME         cpu, cuda, rocm or auto (default auto)\n"
    "  --profile NAME|FILE    compile profile preset or .rlx.json file (default: the arch's)\n"
    "  --threads N            CPU worker threads (0: one per physical core)\n"
    "  --devices 0,1          GPUs to run on, tensor-parallel over several (one rank each;\n"
    "                         default: the profile's backend.cuda.devices; docs/multi-gpu.md)\n"
    "  --policy direct|fusable fusion policy, overriding the profile's\n"
    "  --precision f32|f16|bf16 compute dtype, overriding the profile's precision.compute\n"
    "  --mixed none|auto      precision.mixed (auto: only matmul weights in 16 bits)\n"
    "  --flow FILE.json       flow file replacing the architecture's recipe\n"
    "  --ctx N                KV cache rows (default: prompt + N)\n"
    "  --dump-flow            print the flow and exit (with --json: as a flow file that\n"
    "                         --flow loads back, to edit a layer and run it)\n"
    "  --dump-graph           print the programs this command runs (prefill: last-row unless\n"
    "                         --logits-out; decode when -n > 1), with their FLOPs, and exit\n"
    "  --json                 print one JSON object instead of streaming text:\n"
    "                         {\"prompt_ids\",\"ids\",\"text\",\"backend\",\"prefill_tokens\",\n"
    "                          \"prefill_ms\",\"decode_tokens\",\"decode_ms\"}\n"
    "  --logits-out FILE      write logits F32 [T,vocab] (prefill) and decode_logits F32\n"
    "                         [n-1,vocab] (one per decode step) to a safetensors file\n"
    "  --verbose              also print what the model holds on the device (weights, KV\n"
    "                         cache, arena) and what the device has left, to stderr\n"
    "  -h, --help             this help\n"
    "A summary with prefill and decode tokens/s goes to stderr.\n";

typedef struct gen_args {
    const char *model, *prompt, *ids, *logits_out;
    long long n, top_k, seed, ctx;
    double temperature, top_p, rep_penalty;
    int greedy, sampling, json, dump_flow, dump_graph, demo, verbose;
    run_model_flags mf;
} gen_args;

/* 0 parsed, 2 bad usage, 3 help printed */
static int parse(int argc, char **argv, gen_args *a)
{
    memset(a, 0, sizeof *a);
    a->n = -1;
    a->top_p = 1.0;
    a->rep_penalty = 1.0;
    a->temperature = -1; /* not given */
    for (int i = 0; i < argc; i++) {
        const char *v, *arg = argv[i];
        int r;
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) return 3;
        if ((r = run_model_flag(argc, argv, &i, &a->mf, usage)) < 0) goto bad;
        if (r > 0) continue;
/* "if (option NAME matched) { body; continue; }", a missing or bad value -> bad usage */
#define VALUE(name) if ((r = run_opt(argc, argv, &i, name, &v)) < 0) goto bad; else if (r > 0)
#define CHECK(x) do { if ((x) != 0) goto bad; } while (0)
        VALUE("--model") { a->model = v; continue; }
        VALUE("--prompt") { a->prompt = v; continue; }
        VALUE("--ids") { a->ids = v; continue; }
        VALUE("--logits-out") { a->logits_out = v; continue; }
        VALUE("-n") { CHECK(run_int("-n", v, 0, 1 << 24, &a->n)); continue; }
        VALUE("--max-new-tokens") { CHECK(run_int("-n", v, 0, 1 << 24, &a->n)); continue; }
        VALUE("--temperature") { CHECK(run_double(arg, v, 0, 1e6, &a->temperature)); a->sampling = 1; continue; }
        VALUE("--top-k") { CHECK(run_int("--top-k", v, 0, INT32_MAX, &a->top_k)); a->sampling = 1; continue; }
        VALUE("--top-p") { CHECK(run_double("--top-p", v, 0, 1, &a->top_p)); a->sampling = 1; continue; }
        VALUE("--seed") { CHECK(run_int("--seed", v, 0, INT64_MAX, &a->seed)); a->sampling = 1; continue; }
        VALUE("--repetition-penalty") { CHECK(run_double("--repetition-penalty", v, 1e-6, 1e6, &a->rep_penalty)); continue; }
        VALUE("--ctx") { CHECK(run_int("--ctx", v, 1, 1 << 24, &a->ctx)); continue; }
#undef VALUE
#undef CHECK
        if (strcmp(arg, "--greedy") == 0) a->greedy = 1;
        else if (strcmp(arg, "--json") == 0) a->json = 1;
        else if (strcmp(arg, "--verbose") == 0) a->verbose = 1;
        else if (strcmp(arg, "--dump-flow") == 0) a->dump_flow = 1;
        else if (strcmp(arg, "--dump-graph") == 0) a->dump_graph = 1;
        else return run_usage(usage, "%s '%s'", arg[0] == '-' ? "unknown option" : "unexpected argument", arg);
    }
    if (a->prompt && a->ids) return run_usage(usage, "--prompt and --ids exclude each other");
    if (a->greedy && a->sampling)
        return run_usage(usage, "--greedy excludes --temperature, --top-k, --top-p and --seed");
    if (!a->model) {
        a->model = run_demo_model_dir();
        a->demo = 1;
        if (!a->prompt && !a->ids) a->prompt = "def ";
    }
    if (!a->prompt && !a->ids && !a->dump_flow && !a->dump_graph)
        return run_usage(usage, "needs --prompt TEXT or --ids 1,2,3");
    if (a->n < 0) a->n = 32;
    return 0;
bad:
    fprintf(stderr, "%s\n", usage);
    return 2;
}

/* Length of the prefix of s that is whole UTF-8 characters, holding back a trailing
 * U+FFFD (a byte-level token may complete it later). */
static size_t stable_prefix(const char *s, size_t len)
{
    size_t end = len;
    /* an incomplete trailing sequence */
    size_t k = end;
    while (k > 0 && end - k < 4 && ((unsigned char)s[k - 1] & 0xC0) == 0x80) k--;
    if (k > 0) {
        unsigned char lead = (unsigned char)s[k - 1];
        size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
        if (end - (k - 1) < need) end = k - 1;
    }
    while (end >= 3 && memcmp(s + end - 3, "\xEF\xBF\xBD", 3) == 0) end -= 3;
    return end;
}

typedef struct streamer {
    const rlx_tokenizer *tok;
    int ids;        /* no tokenizer: the ids stream instead, space-separated */
    size_t printed; /* bytes of text, or ids */
} streamer;

static int stream_text(streamer *st, const int32_t *ids, size_t n, int final, rlx_diag *d)
{
    if (st->ids) {
        for (; st->printed < n; st->printed++) printf(st->printed ? " %d" : "%d", (int)ids[st->printed]);
        run_flush_stdout();
        return 0;
    }
    if (!st->tok) return 0;
    char *text = NULL;
    if (rlx_tokenizer_decode(st->tok, ids, n, 1, &text, d) != 0) return -1;
    size_t len = strlen(text);
    size_t upto = final ? len : stable_prefix(text, len);
    if (upto > st->printed) {
        fwrite(text + st->printed, 1, upto - st->printed, stdout);
        run_flush_stdout();
        st->printed = upto;
    }
    free(text);
    return 0;
}

static int is_eos(const rlx_generation_config *gc, int32_t id)
{
    for (int i = 0; i < gc->n_eos; i++)
        if (gc->eos_token_ids[i] == id) return 1;
    return 0;
}

static json_t *ids_json(const int32_t *ids, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    return a;
}

typedef struct gen_state {
    rlx_tp *tp;       /* one rank, or one per device of --devices / backend.cuda.devices */
    rlx_model *model; /* rank 0's */
    rlx_tp_session *sess;
    rlx_tokenizer *tok;
    rlx_sampler *sampler;
    int32_t *prompt, *hist;
    size_t n_prompt, n_hist;
    float *logits, *all_logits, *dec_logits;
} gen_state;

static void gen_free(gen_state *g)
{
    rlx_sampler_free(g->sampler);
    rlx_tp_session_free(g->sess);
    rlx_tokenizer_free(g->tok);
    rlx_tp_close(g->tp);
    free(g->prompt);
    free(g->hist);
    free(g->logits);
    free(g->all_logits);
    free(g->dec_logits);
}

static int save_logits(const char *path, const float *all, int64_t t, const float *dec,
                       int64_t rows, int64_t vocab, rlx_diag *d)
{
    rlx_st_writer *w = rlx_st_writer_new();
    if (!w) return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: out of memory", path);
    rlx_shape s1 = {2, {t, vocab}}, s2 = {2, {rows, vocab}};
    int rc = rlx_st_writer_add(w, "logits", RLX_F32, &s1, all, d);
    if (rc == 0) rc = rlx_st_writer_add(w, "decode_logits", RLX_F32, &s2, dec, d); /* -n 1: [0, vocab] */
    if (rc == 0) rc = rlx_st_writer_save(w, path, d);
    rlx_st_writer_free(w);
    return rc;
}

static void sampler_params(const gen_args *a, const rlx_generation_config *gc,
                           rlx_sampler_params *p)
{
    memset(p, 0, sizeof *p);
    p->top_p = 1.0;
    p->repetition_penalty = a->rep_penalty;
    p->seed = (uint64_t)a->seed;
    if (a->greedy) {
        p->greedy = 1;
    } else if (a->sampling && a->temperature == 0) {
        p->greedy = 1; /* T -> 0 is the argmax, as every peer treats it */
    } else if (a->sampling) {
        p->temperature = a->temperature > 0 ? a->temperature : 1.0;
        p->top_k = a->top_k;
        p->top_p = a->top_p;
    } else if (gc->do_sample && gc->temperature == 0) {
        p->greedy = 1;
    } else if (gc->do_sample) {
        p->temperature = gc->temperature > 0 ? gc->temperature : 1.0;
        p->top_k = gc->top_k;
        p->top_p = gc->top_p > 0 ? gc->top_p : 1.0;
        if (a->rep_penalty == 1.0 && gc->repetition_penalty > 0)
            p->repetition_penalty = gc->repetition_penalty;
    } else {
        p->greedy = 1;
    }
}

/* ", 2 ranks (tensor-parallel)" after the summary when the model is split */
static const char *ranks_note(const rlx_tp *t)
{
    static char buf[48];
    int n = rlx_tp_ranks(t);
    buf[0] = 0;
    if (n > 1) snprintf(buf, sizeof buf, ", %d ranks (tensor-parallel)", n);
    return buf;
}

/* Greedy picks with no repetition penalty and no per-step logits asked for: the steps
 * chain on the device (rlx_tp_session_generate), in chunks that double, up to CHAIN_MAX,
 * while one takes under CHAIN_MS, so text still streams often where a step is slow.
 * RLX_RUN_HOST_STEPS=1: every step through the host (the sampler's loop). */
#define CHAIN_MS 50.0
#define CHAIN_MAX 64
static int chained(const gen_args *a, const rlx_sampler_params *sp)
{
    const char *e = getenv("RLX_RUN_HOST_STEPS");
    double pen = sp->repetition_penalty;
    return sp->greedy && (!(pen > 0) || pen == 1.0) && !a->logits_out && !(e && !strcmp(e, "1"));
}

/* ", greedy steps chained on the device (chunks of up to K)" after the summary */
static const char *chain_note(int64_t widest)
{
    static char buf[80];
    buf[0] = 0;
    if (widest > 0) snprintf(buf, sizeof buf, ", greedy steps chained on the device (chunks of up to %lld)", (long long)widest);
    return buf;
}

/* --dump-graph: the programs generate runs for this prompt (prefill, then decode when a
 * second token is asked for), each labelled, at the positions it runs them */
static int dump_programs(const gen_args *a, rlx_model *m, int64_t t, int64_t ctx, rlx_diag *d)
{
    rlx_session *s;
    if (rlx_session_new(m, ctx, &s, d) != 0) return 1;
    int all = a->logits_out != NULL;
    printf("# prefill: %lld prompt tokens, logits of %s\n", (long long)t,
           all ? "every row (--logits-out)" : "the last row only");
    int rc = rlx_session_program(s, RLX_PHASE_PREFILL, 0, t, all, NULL, stdout, d);
    if (!rc && a->n > 1) {
        printf("# decode: one token a step, the first at position %lld\n", (long long)t);
        rc = rlx_session_program(s, RLX_PHASE_DECODE, t, 1, 0, NULL, stdout, d);
    }
    rlx_session_free(s);
    return rc;
}

static int run(const gen_args *a, gen_state *g, rlx_diag *d)
{
    char path[4096];
    rlx_model_options mo;
    /* bad usage is exit 2 whatever the model: the ids are read before it is opened */
    if (!a->prompt && a->ids && run_ids("--ids", a->ids, &g->prompt, &g->n_prompt) != 0)
        return fprintf(stderr, "%s\n", usage), 2;
    run_model_options(&a->mf, &mo);
    if (rlx_tp_open(a->model, &mo, 0, &g->tp, d) != 0) return run_fail(d);
    g->model = rlx_tp_model(g->tp, 0);
    if (a->dump_flow && (a->json ? rlx_model_dump_flow_json(g->model, stdout, d)
                                 : rlx_model_dump_flow(g->model, stdout, d)) != 0)
        return run_fail(d);
    const rlx_model_config *cfg = rlx_model_get_config(g->model);
    int64_t vocab = cfg->vocab_size;

    snprintf(path, sizeof path, "%s/tokenizer.json", a->model);
    int have_tok = run_file_exists(path);
    if (a->prompt && !have_tok)
        return run_error("%s: no tokenizer.json for --prompt (give --ids instead)", path);
    if (have_tok && (a->prompt || !a->dump_flow) && rlx_tokenizer_load(path, &g->tok, d) != 0)
        return run_fail(d);
    if (a->prompt) {
        size_t n = 0;
        if (rlx_tokenizer_encode(g->tok, a->prompt, strlen(a->prompt), 1, &g->prompt, &n, d) != 0)
            return run_fail(d);
        g->n_prompt = n;
        if (n == 0) return run_error("--prompt: the prompt encodes to no tokens");
    }
    if (a->dump_flow && !a->dump_graph) return 0;
    /* without a prompt, --dump-graph shows the programs of a one-token one */
    int64_t t = g->n_prompt ? (int64_t)g->n_prompt : 1, n = a->n;
    int64_t ctx = a->ctx > 0 ? a->ctx : t + (n > 0 ? n : 1);
    if (ctx < t + n - 1 || ctx < t)
        return run_error("--ctx %lld is too small for %lld prompt tokens and -n %lld",
                         (long long)ctx, (long long)t, (long long)n);
    if (a->dump_graph) return dump_programs(a, g->model, t, ctx, d) ? run_fail(d) : 0;
    for (size_t i = 0; i < g->n_prompt; i++)
        if (g->prompt[i] >= vocab) {
            if (a->prompt) /* the tokenizer and the model disagree, not the user */
                return run_error("--prompt: %s/tokenizer.json gives token id %d, outside the vocabulary "
                                 "[0, %lld) of %s/config.json", a->model, (int)g->prompt[i],
                                 (long long)vocab, a->model);
            return run_error("--ids: token id %d is outside the vocabulary [0, %lld) of %s/config.json",
                             (int)g->prompt[i], (long long)vocab, a->model);
        }

    rlx_generation_config gc;
    if (rlx_generation_config_load(a->model, cfg, &gc, d) != 0) return run_fail(d);
    rlx_sampler_params sp;
    sampler_params(a, &gc, &sp);
    g->sampler = rlx_sampler_new(&sp, vocab);
    if (!g->sampler) return run_error("sampler: bad parameters or out of memory");

    if (rlx_tp_session_new(g->tp, ctx, &g->sess, d) != 0) return run_fail(d);

    size_t vb = (size_t)vocab * sizeof(float);
    g->logits = malloc(vb);
    g->hist = malloc((size_t)(t + n + 1) * sizeof(int32_t));
    if (a->logits_out) {
        g->all_logits = malloc(vb * (size_t)t);
        g->dec_logits = malloc(vb * (size_t)(n > 1 ? n - 1 : 1));
    }
    if (!g->logits || !g->hist || (a->logits_out && (!g->all_logits || !g->dec_logits)))
        return run_error("out of memory for %lld x %lld logits", (long long)t, (long long)vocab);
    memcpy(g->hist, g->prompt, (size_t)t * sizeof(int32_t));
    g->n_hist = (size_t)t;

    streamer st = {a->json ? NULL : g->tok, !a->json && !g->tok, 0};
    if (!a->json && g->tok && a->prompt) {
        fputs(a->prompt, stdout);
        run_flush_stdout();
    }
    double t0 = run_now_ms();
    if (rlx_tp_session_prefill(g->sess, g->prompt, t, g->all_logits, g->logits, d) != 0)
        return run_fail(d);
    double t1 = run_now_ms();
    int64_t generated = 0, steps = 0, chunk = 1, widest = 0;
    int chain = chained(a, &sp), eos = 0;
    int64_t host_left = 0; /* steps a rejected chunk takes again through the host */
    while (generated < n && !eos) {
        if (generated > 0 && chain && !host_left) { /* at position t + generated - 1, as after a host step */
            int64_t k = n - generated < chunk ? n - generated : chunk;
            double c0 = run_now_ms();
            int32_t *out = g->hist + g->n_hist;
            if (rlx_tp_session_generate(g->sess, g->hist[g->n_hist - 1], k, out, g->logits, d) != 0)
                return run_fail(d);
            /* logits with no number pick id 0: a chunk whose last logits are not finite, or that
             * picked 0, steps again through the host, which names the first bad step */
            int again = run_nonfinite_at(g->logits, vocab) >= 0;
            for (int64_t j = 0; j < k && !again; j++) again = out[j] == 0;
            if (again) {
                if (rlx_tp_session_rewind(g->sess, t + generated - 1, d) != 0) return run_fail(d);
                host_left = k;
                continue;
            }
            widest = k > widest ? k : widest;
            for (int64_t j = 0; j < k && !eos; j++) {
                g->n_hist++;
                generated++;
                eos = is_eos(&gc, out[j]);
            }
            if (stream_text(&st, g->hist + t, (size_t)generated, 0, d) != 0) return run_fail(d);
            if (ferror(stdout)) return run_stdout_check();
            if (run_now_ms() - c0 < CHAIN_MS && chunk < CHAIN_MAX) chunk *= 2;
            continue;
        }
        if (generated > 0) {
            if (rlx_tp_session_decode(g->sess, g->hist[g->n_hist - 1], g->logits, d) != 0)
                return run_fail(d);
            host_left -= host_left > 0;
            if (g->dec_logits) memcpy(g->dec_logits + (size_t)steps * (size_t)vocab, g->logits, vb);
            steps++;
        }
        if (run_check_logits(g->logits, vocab, generated)) return 1;
        int32_t id = rlx_sampler_next(g->sampler, g->logits, g->hist, g->n_hist);
        if (id < 0 || id >= vocab) return run_error("sampler returned token id %d", (int)id);
        g->hist[g->n_hist++] = id;
        generated++;
        if (stream_text(&st, g->hist + t, (size_t)generated, 0, d) != 0) return run_fail(d);
        if (ferror(stdout)) return run_stdout_check(); /* no reader for the rest */
        eos = is_eos(&gc, id);
    }
    double t2 = run_now_ms();
    if (stream_text(&st, g->hist + t, (size_t)generated, 1, d) != 0) return run_fail(d);
    if (!a->json) fputc('\n', stdout);

    if (a->logits_out &&
        save_logits(a->logits_out, g->all_logits, t, g->dec_logits, steps, vocab, d) != 0)
        return run_fail(d);

    double pre_ms = t1 - t0, dec_ms = t2 - t1;
    if (a->json) {
        json_t *o = json_object();
        json_object_set_new(o, "prompt_ids", ids_json(g->prompt, (size_t)t));
        json_object_set_new(o, "ids", ids_json(g->hist + t, (size_t)generated));
        char *text = NULL;
        if (g->tok && rlx_tokenizer_decode(g->tok, g->hist + t, (size_t)generated, 1, &text, d) != 0) {
            json_decref(o);
            return run_fail(d);
        }
        json_object_set_new(o, "text", text ? json_string(text) : json_null());
        free(text);
        json_object_set_new(o, "backend", json_string(rlx_model_backend_name(g->model)));
        json_object_set_new(o, "prefill_tokens", json_integer(t));
        json_object_set_new(o, "prefill_ms", json_real(pre_ms));
        json_object_set_new(o, "decode_tokens", json_integer(generated));
        json_object_set_new(o, "decode_ms", json_real(dec_ms));
        char *s = json_dumps(o, JSON_COMPACT | JSON_ENSURE_ASCII);
        json_decref(o);
        if (!s) return run_error("out of memory writing JSON");
        puts(s);
        free(s);
    }
    if (run_stdout_check()) return 1;
    fprintf(stderr,
            "rlx-run: prefill %lld tokens in %.1f ms (%.1f tok/s), decode %lld tokens in %.1f ms "
            "(%.1f tok/s), backend %s, %d threads%s%s\n",
            (long long)t, pre_ms, pre_ms > 0 ? (double)t * 1e3 / pre_ms : 0.0,
            (long long)generated, dec_ms, dec_ms > 0 ? (double)generated * 1e3 / dec_ms : 0.0,
            rlx_model_backend_name(g->model), rlx_model_threads(g->model), ranks_note(g->tp), chain_note(widest));
    if (a->verbose) {
        rlx_memory mem;
        if (rlx_model_memory(g->model, &mem, d) != 0) return run_fail(d);
        run_print_memory(stderr, &mem);
    }
    return 0;
}

int rlx_cmd_generate(int argc, char **argv)
{
    gen_args a;
    int rc = parse(argc, argv, &a);
    if (rc == 3) {
        fputs(help, stdout);
        return 0;
    }
    if (rc) return rc;
    gen_state g;
    memset(&g, 0, sizeof g);
    rlx_diag d;
    rlx_diag_init(&d);
    rc = run(&a, &g, &d);
    gen_free(&g);
    return rc;
}
