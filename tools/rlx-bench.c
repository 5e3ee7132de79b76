/* rlx-bench: prefill and decode throughput of a causal LM. With --config, the weights are
 * random (seeded), the tensors the config's arch plugin reads (rlx_config_weights), written
 * to a temporary safetensors file next to a copy of the config, so any real shape of any
 * installed arch can be measured without a checkpoint. Medians over --reps. */
#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "rlx/rlx.h"
#include "bench_peer.h"
#include "bench_reference.h"
#include "bench_sessions.h"
#include "bench_tp.h"
#include "run_common.h"

static const char usage[] =
    "usage: rlx-bench (--model DIR | --config config.json) [--prefill T] [--decode N] [--batch B] [--ctx N] "
    "[--decode-depth D] [--backend NAME] [--threads N] [--profile NAME|FILE] [--reps R] [--sessions K] "
    "[--no-reference] [--json] "
    "[--peer-llamacpp LLAMA_BENCH --peer-gguf FILE] [--dump-graph]";

static const char help[] =
    "usage: rlx-bench (--model DIR | --config config.json) [options]\n"
    "Measures prefill and decode throughput (medians over reps).\n\n"
    "  --model DIR          model folder (config.json + safetensors)\n"
    "  --config FILE        config.json only: random seeded weights are generated, the tensors\n"
    "                       its arch plugin's flows read (any installed arch)\n"
    "  --prefill T          prompt length (default 128)\n"
    "  --decode N           decode steps (default 32)\n"
    "  --decode-depth D     keys in the cache when decode starts (default: T, right after the timed\n"
    "                       prefill); otherwise each rep resets the sessions and prefills D tokens\n"
    "                       untimed first. 0 is llama-bench's tg (an empty context), the peer's\n"
    "                       schedule; JSON \"decode_depth\" (batch 1)\n"
    "  --batch B            independent sequences (default 1): prefilled one after another, then\n"
    "                       decoded together, one step over B rows (rlx_session_decode_batch);\n"
    "                       decode tokens/s is the aggregate over the B sequences\n"
    "  --ctx N              KV cache rows per sequence (default prefill + decode + 1); a cache\n"
    "                       that does not fit is refused before any work, naming the device\n"
    "  --backend NAME       cpu, cuda, rocm or auto\n"
    "  --threads N          CPU worker threads (0: one per physical core)\n"
    "  --devices 0,1        GPUs of a tensor-parallel run, one rank each (docs/multi-gpu.md): prints\n"
    "                       tok/s, GFLOP/s and GB/s over all ranks, the decode's tokens generated\n"
    "                       again greedy on the device, and each rank's bytes (JSON adds \"devices\",\n"
    "                       \"device_bytes\", \"generate_tokens_per_s\"); batch 1\n"
    "  --profile NAME|FILE  compile profile\n"
    "  --policy direct|fusable fusion policy\n"
    "  --precision f32|f16|bf16 compute dtype, overriding the profile's precision.compute\n"
    "  --mixed none|auto      precision.mixed (auto: only matmul weights in 16 bits)\n"
    "  --reps R             repetitions (default 3)\n"
    "  --seed S             seed of the random weights and prompt (default 1)\n"
    "  --sessions K         then K sessions (own prompts, greedy) on the model from K threads:\n"
    "                       each must see the logits it sees alone (exit 1 if not); times both\n"
    "  --no-reference       skip the same-run ceilings (CPU: read GB/s, OpenBLAS sgemm; GPU: device\n"
    "                       copy GB/s, the vendor GEMM at [T, hidden, intermediate])\n"
    "  --peer-llamacpp BIN  after each of rlx's timed reps, run llama.cpp's llama-bench BIN once on\n"
    "                       --peer-gguf FILE (-p T -n N -t threads -r 1), so both are measured in the\n"
    "                       same minutes; prints its medians and rlx/llama.cpp as the median of the\n"
    "                       per-rep ratios (not with --devices)\n"
    "  --peer-gguf FILE     the GGUF with the same shapes (and 16-bit or f32 weights) as the model\n"
    "  --dump-graph         print the programs the run would time and exit, timing nothing: the\n"
    "                       prefill at T (last-row), then the decode step of one row, or of B\n"
    "                       rows with --batch B (rlx_session_program); not with --json,\n"
    "                       --peer-llamacpp, --sessions or --devices\n"
    "  --json               {\"prefill_tokens_per_s\",\"decode_tokens_per_s\",\"prefill_gflops\",\n"
    "                        \"decode_gb_per_s\",\"threads\",\"backend\",\"reps\",\"batch\",\"prefill_flops\",\n"
    "                        \"prefill_flops_source\"} plus, with one sequence, \"generate_tokens_per_s\"\n"
    "                       (the decode's tokens again, greedy on the device: rlx_session_generate)\n"
    "                       or \"generate_unsupported\" (why not); on the\n"
    "                       CPU, \"reference\":{\"read_gb_per_s\",\"read_gb_per_s_spread\",\"read_loop\",\n"
    "                       \"read_scalar_gb_per_s\",\"sgemm_gflops\",\"sgemm_mkn\"},\n"
    "                       \"decode_vs_read_bandwidth\", \"decode_floor_tokens_per_s\", \"floor_source\" and\n"
    "                       \"prefill_vs_sgemm\"; with a peer, \"peer\":{\"prefill_tokens_per_s\",\n"
    "                       \"decode_tokens_per_s\",\"gguf\",\"peer_schedule\"} (medians; \"interleaved\"),\n"
    "                       \"prefill_vs_peer\", \"decode_vs_peer\" (medians of per-rep ratios),\n"
    "                       \"prefill_vs_peer_reps\", \"decode_vs_peer_reps\" (the ratios in rep order); with\n"
    "                       --sessions, \"sessions\":{\"k\",\"identical\",\"threads_ms\",\"alone_ms\"}; on a GPU,\n"
    "                       \"reference\":{\"copy_gb_per_s\",\"gemm_gflops\",\"gemm_mkn\",\"gemm_dtype\",\n"
    "                       \"gemm_library\"}, \"decode_vs_copy_bandwidth\", \"generate_vs_copy_bandwidth\",\n"
    "                       \"decode_floor_tokens_per_s\",\n"
    "                       \"prefill_vs_gemm\"; always \"memory\":{\"weights_bytes\",\"kv_cache_bytes\",\n"
    "                       \"arena_bytes\",\"buffer_bytes\",\"device_free_bytes\",\"device_total_bytes\",\"device\"}\n"
    "Prefill GFLOP/s divides the FLOPs of the compiled prefill program (rlx_session_program:\n"
    "matmuls and attention, padding rows and the last-row lm_head as run; elementwise ops not\n"
    "counted) by its median time.\n"
    "Decode GB/s counts the weights in the compute dtype (--precision: 2 bytes for f16/bf16,\n"
    "4 for f32) and the KV cache in f32 unless 16-bit compute with --mixed none. The read\n"
    "reference sums 512 MiB with the widest vector loads in 1, 2 or 4 streams a thread and in 4\n"
    "streams of non-temporal loads, and takes the best loop (read_loop: the last reading's),\n"
    "measured right after each rep's decode (median of 2 passes a loop; floor_source\n"
    "\"interleaved\"): read_gb_per_s is\n"
    "the median over reps, read_gb_per_s_spread [min,max], decode_vs_read_bandwidth the median of\n"
    "each rep's decode GB/s over its own read, and the decode floor those bytes per token at the\n"
    "median read.\n";

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static float rng_normal(uint64_t *s)
{
    double u1 = ((double)(rng_next(s) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double)(rng_next(s) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
}

/* one random tensor (BF16 on disk: half the temp file); norms are ones */
static int add_random(rlx_st_writer *w, const char *name, int64_t a, int64_t b, int ones,
                      uint64_t *seed, rlx_diag *d)
{
    rlx_shape s = b > 0 ? (rlx_shape){2, {a, b}} : (rlx_shape){1, {a}};
    int64_t cols = b > 0 ? b : 1;
    if (a <= 0 || (int64_t)(SIZE_MAX / sizeof(uint16_t)) / cols < a) /* a size no buffer can hold */
        return rlx_diag_set(d, RLX_ERR_INVALID, "tensor %s: %lld x %lld elements cannot be made", name, (long long)a,
                            (long long)cols);
    size_t n = (size_t)a * (size_t)cols;
    uint16_t *v = malloc(n * sizeof *v);
    if (!v) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory for %s", name);
    for (size_t i = 0; i < n; i++) v[i] = rlx_f32_to_bf16(ones ? 1.0f : 0.02f * rng_normal(seed));
    int rc = rlx_st_writer_add(w, name, RLX_BF16, &s, v, d);
    free(v);
    return rc;
}

/* one weight the config's flows read: a matrix random, a vector (norm scale, bias) ones */
typedef struct random_sink {
    rlx_st_writer *w;
    uint64_t seed;
} random_sink;

static int add_listed(void *user, const char *name, const rlx_shape *s, rlx_diag *d)
{
    random_sink *r = user;
    if (s->ndim == 1) return add_random(r->w, name, s->dims[0], 0, 1, &r->seed, d);
    if (s->ndim == 2) return add_random(r->w, name, s->dims[0], s->dims[1], 0, &r->seed, d);
    char b[96];
    return rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "tensor %s: %s, --config makes 1-D and 2-D weights only", name,
                        rlx_shape_str(s, b, sizeof b));
}

/* A checkpoint of random weights for a config (the tensors its arch's flows read) at
 * model_path, and the config copied to config_path. */
static int write_random_model(const char *config, const char *model_path, const char *config_path, uint64_t seed,
                              rlx_diag *d)
{
    random_sink r = {rlx_st_writer_new(), seed};
    int rc = r.w ? rlx_config_weights(config, NULL, add_listed, &r, d) : rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    if (!rc) rc = rlx_st_writer_save(r.w, model_path, d);
    rlx_st_writer_free(r.w);
    if (rc) return rc;
    /* the config itself, copied */
    size_t len = 0;
    FILE *in = fopen(config, "rb");
    FILE *out = fopen(config_path, "wb");
    int ok = in && out;
    if (ok) {
        char buf[65536];
        while (ok && (len = fread(buf, 1, sizeof buf, in)) > 0) ok = fwrite(buf, 1, len, out) == len;
        ok = ok && !ferror(in); /* a short read or write: the copy would be cut, not the config */
    }
    rc = ok ? 0 : rlx_diag_set(d, RLX_ERR_IO, "%s: cannot copy to %s", config, config_path);
    if (in) fclose(in);
    if (out && fclose(out) != 0 && !rc) rc = rlx_diag_set(d, RLX_ERR_IO, "%s: write failed", config_path);
    return rc;
}

typedef struct bench_args {
    const char *model, *config;
    long long prefill, decode, batch, reps, seed, sessions, ctx;
    long long depth; /* keys in the cache when decode starts (-1: the prefill's) */
    int json;
    int dump_graph; /* print the programs, time nothing */
    int reference; /* measure machine ceilings in the same run */
    const char *peer_bin, *peer_gguf; /* llama.cpp's llama-bench and its model */
    run_model_flags mf;
} bench_args;

static int parse(int argc, char **argv, bench_args *a)
{
    memset(a, 0, sizeof *a);
    a->reference = 1;
    a->prefill = 128;
    a->decode = 32;
    a->batch = 1;
    a->reps = 3;
    a->seed = 1;
    a->depth = -1;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int r;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) return 3;
        if ((r = run_model_flag(argc, argv, &i, &a->mf, usage)) < 0) goto bad;
        if (r > 0) continue;
#define VALUE(name) if ((r = run_opt(argc, argv, &i, name, &v)) < 0) goto bad; else if (r > 0)
        VALUE("--model") { a->model = v; continue; }
        VALUE("--config") { a->config = v; continue; }
        VALUE("--prefill") { if (run_int("--prefill", v, 1, 1 << 20, &a->prefill)) goto bad; continue; }
        VALUE("--decode") { if (run_int("--decode", v, 0, 1 << 20, &a->decode)) goto bad; continue; }
        VALUE("--batch") { if (run_int("--batch", v, 1, 4096, &a->batch)) goto bad; continue; }
        VALUE("--decode-depth") { if (run_int("--decode-depth", v, 0, 1 << 20, &a->depth)) goto bad; continue; }
        VALUE("--ctx") { if (run_int("--ctx", v, 1, 1 << 30, &a->ctx)) goto bad; continue; }
        VALUE("--reps") { if (run_int("--reps", v, 1, 10000, &a->reps)) goto bad; continue; }
        VALUE("--peer-llamacpp") { a->peer_bin = v; continue; }
        VALUE("--peer-gguf") { a->peer_gguf = v; continue; }
        VALUE("--seed") { if (run_int("--seed", v, 0, INT64_MAX, &a->seed)) goto bad; continue; }
        VALUE("--sessions") { if (run_int("--sessions", v, 1, 256, &a->sessions)) goto bad; continue; }
#undef VALUE
        if (!strcmp(argv[i], "--json")) a->json = 1;
        else if (!strcmp(argv[i], "--dump-graph")) a->dump_graph = 1;
        else if (!strcmp(argv[i], "--no-reference")) a->reference = 0;
        else {
            fprintf(stderr, "rlx-bench: unknown option '%s'\n%s\n", argv[i], usage);
            return 2;
        }
    }
    if (!a->peer_bin != !a->peer_gguf) {
        fprintf(stderr, "rlx-bench: --peer-llamacpp and --peer-gguf go together\n%s\n", usage);
        return 2;
    }
    if (a->peer_bin && a->mf.devices) { /* llama-bench's -t runs one process's threads */
        fprintf(stderr, "rlx-bench: --peer-llamacpp does not run with --devices\n%s\n", usage);
        return 2;
    }
    if (a->depth >= 0 && a->batch > 1) {
        fprintf(stderr, "rlx-bench: --decode-depth runs with --batch 1\n%s\n", usage);
        return 2;
    }
    if (a->depth >= 0 && a->mf.devices) {
        fprintf(stderr, "rlx-bench: --decode-depth does not run with --devices\n%s\n", usage);
        return 2;
    }
    /* the dump is text and times nothing: options that shape or add to timings conflict */
    const char *clash = !a->dump_graph ? NULL : a->json ? "--json" : a->peer_bin ? "--peer-llamacpp"
                      : a->sessions ? "--sessions" : a->mf.devices ? "--devices" : NULL;
    if (clash) {
        fprintf(stderr, "rlx-bench: --dump-graph does not run with %s\n%s\n", clash, usage);
        return 2;
    }
    long long rows = a->depth > a->prefill ? a->depth : a->prefill; /* the cache rows before decode */
    if (a->ctx && a->ctx < rows + a->decode + 1) {
        fprintf(stderr, "rlx-bench: --ctx %lld is too small for %lld cache rows and --decode %lld\n%s\n", a->ctx,
                rows, a->decode, usage);
        return 2;
    }
    if (!a->model == !a->config) {
        fprintf(stderr, "rlx-bench: give exactly one of --model and --config\n%s\n", usage);
        return 2;
    }
    return 0;
bad:
    fprintf(stderr, "%s\n", usage);
    return 2;
}

/* matmul weights per token (elements), for FLOP and bandwidth estimates */
static double linear_params(const rlx_model_config *m)
{
    double H = (double)m->hidden_size, I = (double)m->intermediate_size;
    double hd = m->head_dim > 0 ? (double)m->head_dim : H / (double)m->num_heads;
    double q = (double)m->num_heads * hd;
    double kv = (double)(m->num_kv_heads > 0 ? m->num_kv_heads : m->num_heads) * hd;
    return (double)m->num_layers * (H * q * 2 + H * kv * 2 + 3 * H * I) + (double)m->vocab_size * H;
}

/* where decode starts (the cache rows then: --decode-depth, else the prefill's), the prompt
 * ids a run needs, and its sessions' context */
static void run_shape(const bench_args *a, int64_t *D, int64_t *P, int64_t *ctx)
{
    *D = a->depth >= 0 ? a->depth : a->prefill;
    *P = *D > a->prefill ? *D : a->prefill;
    *ctx = a->ctx ? a->ctx : *P + a->decode + 1;
}

/* --dump-graph: the programs bench() would time, each labelled, none run: a session's
 * prefill as bench() opens it, then its decode step (of B rows with --batch B) */
static int dump_programs(const bench_args *a, rlx_model *m, rlx_diag *d)
{
    int64_t T = a->prefill, N = a->decode, B = a->batch, D, P, ctx;
    run_shape(a, &D, &P, &ctx);
    rlx_session *s;
    if (rlx_session_new(m, ctx, &s, d) != 0) return 1;
    printf("# prefill: %lld prompt tokens, logits of the last row only", (long long)T);
    if (B > 1) printf(", each of %lld sequences in turn", (long long)B);
    printf("\n");
    int rc = rlx_session_program(s, RLX_PHASE_PREFILL, 0, T, 0, NULL, stdout, d);
    if (!rc && N > 0) {
        if (B == 1) printf("# decode: one token a step, the first at position %lld\n", (long long)D);
        else printf("# decode: %lld sequences a step, one row each (rlx_session_decode_batch), the first at "
                    "position %lld\n", (long long)B, (long long)D);
        rc = rlx_session_program(s, RLX_PHASE_DECODE, D, B, 0, NULL, stdout, d);
    }
    rlx_session_free(s);
    if (rc) return 1;
    return run_stdout_check() ? -1 : 0; /* -1: reported */
}

static int bench(const bench_args *a, const char *dir, rlx_diag *d)
{
    rlx_model_options mo;
    run_model_options(&a->mf, &mo);
    if (a->mf.devices) {
        bench_tp_args ta = {dir, a->mf.devices, a->prefill, a->decode, a->reps, (uint64_t)a->seed, a->json};
        return bench_tp(&ta, &mo, d);
    }
    rlx_model *m = NULL;
    if (rlx_model_open(dir, &mo, &m, d) != 0) return 1;
    if (a->dump_graph) {
        int rc = dump_programs(a, m, d);
        rlx_model_close(m);
        return rc;
    }
    const rlx_model_config *cfg = rlx_model_get_config(m);
    int64_t T = a->prefill, N = a->decode, B = a->batch, V = cfg->vocab_size;
    int64_t D, P, ctx; /* decode's start, prompt ids, the sessions' context */
    run_shape(a, &D, &P, &ctx);
    int32_t *ids = malloc((size_t)P * sizeof *ids);
    float *logits = malloc((size_t)(V * B) * sizeof *logits);
    int32_t *step_ids = malloc((size_t)B * sizeof *step_ids);
    double *pre = calloc((size_t)a->reps, sizeof *pre), *dec = calloc((size_t)a->reps, sizeof *dec);
    /* one session: the same tokens again as greedy generation on the device (no host step
     * between tokens); gen_msg says why not when the flow cannot */
    double *gen = calloc((size_t)a->reps, sizeof *gen);
    int32_t *gen_ids = malloc((size_t)(N > 0 ? N : 1) * sizeof *gen_ids);
    char gen_msg[sizeof ((rlx_diag *)0)->msg] = "";
    int gen_on = B == 1 && N > 0;
    rlx_session **s = calloc((size_t)B, sizeof *s);
    int rc = (!ids || !logits || !step_ids || !pre || !dec || !gen || !gen_ids || !s)
                 ? rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory") : 0;
    uint64_t seed = (uint64_t)a->seed * 2654435761u + 1;
    for (int64_t i = 0; i < P && !rc; i++) ids[i] = (int32_t)(rng_next(&seed) % (uint64_t)V);
    for (int64_t b = 0; b < B && !rc; b++) rc = rlx_session_new(m, ctx, &s[b], d);
    /* the FLOPs of the prefill program each session runs (its last-row variant) */
    rlx_program_info pi = {0};
    if (!rc) rc = rlx_session_program(s[0], RLX_PHASE_PREFILL, 0, T, 0, &pi, NULL, d);
    /* the read reference is measured right after each rep's decode: this host's bandwidth
     * drifts within minutes, so only a reading taken with the decode makes a floor of it */
    int cpu_ref = a->reference && !strcmp(rlx_model_backend_name(m), "cpu");
    bench_reader *rdr = NULL;
    double *rd_w = calloc((size_t)a->reps, sizeof *rd_w), *rd_s = calloc((size_t)a->reps, sizeof *rd_s);
    double *ratio = calloc((size_t)a->reps, sizeof *ratio); /* each rep's decode GB/s over its read */
    if (!rc && (!rd_w || !rd_s || !ratio)) rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    if (!rc && cpu_ref && !(rdr = bench_reader_new(rlx_model_threads(m), (size_t)512 << 20)))
        rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory for the 512 MiB read reference");
    bench_read rd_last = {0, 0, ""};
    /* the peer runs after each rep, in the minutes rlx's rep saw (this host's bandwidth drifts) */
    bench_peer *peer = NULL;
    if (!rc && a->peer_bin &&
        !(peer = bench_peer_new(a->peer_bin, a->peer_gguf, a->prefill, a->decode, rlx_model_threads(m), (int)a->reps)))
        rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    /* one warm-up round compiles both programs */
    for (long long r = -1; r < a->reps && !rc; r++) {
        double t0 = run_now_ms();
        for (int64_t b = 0; b < B && !rc; b++) {
            rlx_session_reset(s[b]);
            rc = rlx_session_prefill(s[b], ids, T, NULL, logits, d);
        }
        double t1 = run_now_ms();
        if (D != T && !rc) { /* decode from D keys: the cache refilled, untimed */
            rlx_session_reset(s[0]);
            if (D > 0) rc = rlx_session_prefill(s[0], ids, D, NULL, logits, d);
            t1 = run_now_ms();
        }
        for (int64_t k = 0; k < N && !rc; k++) {
            if (B == 1) {
                rc = rlx_session_decode(s[0], ids[k % T], logits, d);
                continue;
            }
            for (int64_t b = 0; b < B; b++) step_ids[b] = ids[(k + b) % T];
            rc = rlx_session_decode_batch(s, (int)B, step_ids, logits, d);
        }
        double t2 = run_now_ms();
        if (r >= 0) {
            pre[r] = t1 - t0;
            dec[r] = t2 - t1;
        }
        if (r >= 0 && rdr && !rc) { /* 2 reps: 10 passes of 512 MiB, ~0.2 s */
            bench_reader_run(rdr, 2, &rd_last);
            rd_w[r] = rd_last.gbps;
            rd_s[r] = rd_last.scalar_gbps;
        }
        if (gen_on && !rc) { /* from the decode's start again: its rows are rewritten */
            rlx_diag gd;
            rlx_diag_init(&gd);
            double g0 = run_now_ms();
            int gr = rlx_session_rewind(s[0], D, &gd);
            if (!gr) gr = rlx_session_generate(s[0], ids[0], N, gen_ids, NULL, &gd);
            if (r >= 0) gen[r] = run_now_ms() - g0;
            rc = bench_generate_outcome(gr, &gd, &gen_on, gen_msg, sizeof gen_msg, d);
        }
        if (r >= 0 && peer && !rc)
            rc = bench_peer_rep(peer, (int)r, pre[r] > 0 ? (double)(T * B) * 1e3 / pre[r] : 0,
                                dec[r] > 0 ? (double)(N * B) * 1e3 / dec[r] : 0, d);
    }
    if (!rc) {
        int nr = (int)a->reps;
        double lp = linear_params(cfg);
        double hd = cfg->head_dim > 0 ? (double)cfg->head_dim : (double)cfg->hidden_size / (double)cfg->num_heads;
        /* weights streamed once per decode token (in the compute dtype), plus the K/V cache read */
        double kv = 2.0 * (double)cfg->num_layers * (double)(cfg->num_kv_heads > 0 ? cfg->num_kv_heads : cfg->num_heads) *
                    hd * ((double)D + (double)N / 2.0);
        /* the decode programs' dtypes: --precision / --mixed, else the profile's */
        const rlx_profile *dp = rlx_model_get_profile(m, RLX_PHASE_DECODE);
        const char *pc = dp->precision.compute;
        int half = strcmp(pc, "f32") != 0, kv_half = half && strcmp(dp->precision.mixed, "auto") != 0;
        /* a batched step streams the weights once for its B tokens: bytes per token amortised */
        double bytes_tok = ((half ? 2.0 : 4.0) * lp + (double)B * (kv_half ? 2.0 : 4.0) * kv) / (double)B;
        /* each rep's decode against the read taken right after it, before bench_median() sorts dec */
        int ok = rdr != NULL;
        for (int r = 0; r < nr && rdr; r++) {
            double g = dec[r] > 0 ? (double)(N * B) * 1e3 / dec[r] * bytes_tok / 1e9 : 0;
            ratio[r] = rd_w[r] > 0 ? g / rd_w[r] : 0;
            ok = ok && rd_w[r] > 0;
        }
        double pm = bench_median(pre, nr), dm = bench_median(dec, nr), gm = gen_on ? bench_median(gen, nr) : 0;
        double p_tps = pm > 0 ? (double)(T * B) * 1e3 / pm : 0;
        double d_tps = dm > 0 ? (double)(N * B) * 1e3 / dm : 0;
        double g_tps = gm > 0 ? (double)N * 1e3 / gm : 0;
        double flops = (double)B * (double)pi.flops;
        double gflops = pm > 0 ? flops / (pm * 1e6) : 0;
        double gbs = d_tps * bytes_tok / 1e9;
        /* ceilings of this machine, measured now (CPU backend only) */
        struct { double read_gbps, read_min, read_max, ratio, sgemm_gflops; bench_read rd; } ref = {0};
        if (ok) {
            ref.rd = rd_last;
            ref.ratio = bench_median(ratio, nr);
            ref.rd.scalar_gbps = bench_median(rd_s, nr);
            ref.read_gbps = ref.rd.gbps = bench_median(rd_w, nr); /* sorts rd_w: min, max at the ends */
            ref.read_min = rd_w[0];
            ref.read_max = rd_w[nr - 1];
        }
        if (rdr)
            ref.sgemm_gflops = bench_ref_sgemm_gflops(rlx_model_threads(m), T, cfg->hidden_size,
                                                      cfg->intermediate_size, 5);
        /* a GPU backend's ceilings, measured by the backend (rlx-bench links no GPU runtime) */
        rlx_ceiling_figures dc = {0, 0, ""};
        const char *gemm_dt = !strcmp(pc, "bf16") ? "bf16" : !strcmp(pc, "f16") ? "f16" : "f32";
        if (a->reference && strcmp(rlx_model_backend_name(m), "cpu")) {
            int dt = !strcmp(gemm_dt, "bf16") ? RLX_BF16 : !strcmp(gemm_dt, "f16") ? RLX_F16 : RLX_F32;
            rlx_diag dd;
            rlx_diag_init(&dd);
            int r = rlx_model_measure_ceilings(m, T, cfg->hidden_size, cfg->intermediate_size, dt, &dc, &dd);
            if (r && r != RLX_ERR_UNSUPPORTED) {
                *d = dd;
                rc = r;
                goto done;
            }
        }
        rlx_memory mem;
        if ((rc = rlx_model_memory(m, &mem, d)) != 0) goto done;
        bench_sessions_result ss = {0};
        if (a->sessions && (rc = bench_sessions(m, T, N, (int)a->sessions, (uint64_t)a->seed, &ss, d)) != 0) goto done;
        if (a->json) {
            json_t *o = json_object();
            json_object_set_new(o, "prefill_tokens_per_s", json_real(p_tps));
            json_object_set_new(o, "decode_tokens_per_s", json_real(d_tps));
            json_object_set_new(o, "prefill_gflops", json_real(gflops));
            json_object_set_new(o, "prefill_flops", json_real(flops));
            json_object_set_new(o, "prefill_flops_source", json_string("program"));
            json_object_set_new(o, "decode_gb_per_s", json_real(gbs));
            if (gen_on) json_object_set_new(o, "generate_tokens_per_s", json_real(g_tps));
            else if (gen_msg[0]) json_object_set_new(o, "generate_unsupported", json_string(gen_msg));
            json_object_set_new(o, "threads", json_integer(rlx_model_threads(m)));
            json_object_set_new(o, "backend", json_string(rlx_model_backend_name(m)));
            json_object_set_new(o, "reps", json_integer(a->reps));
            json_object_set_new(o, "batch", json_integer(B));
            json_object_set_new(o, "decode_depth", json_integer(D));
            if (ref.read_gbps > 0) {
                json_t *r = json_object();
                json_object_set_new(r, "read_gb_per_s", json_real(ref.read_gbps));
                json_object_set_new(r, "read_gb_per_s_spread", json_pack("[ff]", ref.read_min, ref.read_max));
                json_object_set_new(r, "read_loop", json_string(ref.rd.loop));
                json_object_set_new(r, "read_scalar_gb_per_s", json_real(ref.rd.scalar_gbps));
                json_object_set_new(r, "sgemm_gflops", json_real(ref.sgemm_gflops));
                json_object_set_new(r, "sgemm_mkn", json_pack("[III]", (json_int_t)T, (json_int_t)cfg->hidden_size,
                                                              (json_int_t)cfg->intermediate_size));
                json_object_set_new(o, "reference", r);
                json_object_set_new(o, "decode_vs_read_bandwidth", json_real(ref.ratio));
                json_object_set_new(o, "decode_floor_tokens_per_s", json_real(ref.read_gbps * 1e9 / bytes_tok));
                json_object_set_new(o, "floor_source", json_string("interleaved"));
                json_object_set_new(o, "prefill_vs_sgemm", json_real(gflops / ref.sgemm_gflops));
            }
            if (dc.copy_gb_per_s > 0) {
                json_t *r = json_object();
                json_object_set_new(r, "copy_gb_per_s", json_real(dc.copy_gb_per_s));
                json_object_set_new(r, "gemm_gflops", json_real(dc.gemm_gflops));
                json_object_set_new(r, "gemm_mkn", json_pack("[III]", (json_int_t)T, (json_int_t)cfg->hidden_size,
                                                             (json_int_t)cfg->intermediate_size));
                json_object_set_new(r, "gemm_dtype", json_string(gemm_dt));
                json_object_set_new(r, "gemm_library", json_string(dc.gemm_library));
                json_object_set_new(o, "reference", r);
                json_object_set_new(o, "decode_vs_copy_bandwidth", json_real(gbs / dc.copy_gb_per_s));
                if (gen_on)
                    json_object_set_new(o, "generate_vs_copy_bandwidth",
                                        json_real(g_tps * bytes_tok / 1e9 / dc.copy_gb_per_s));
                json_object_set_new(o, "decode_floor_tokens_per_s", json_real(dc.copy_gb_per_s * 1e9 / bytes_tok));
                json_object_set_new(o, "prefill_vs_gemm", json_real(dc.gemm_gflops > 0 ? gflops / dc.gemm_gflops : 0));
            }
            json_object_set_new(o, "memory", json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:s}",
                                                       "weights_bytes", (json_int_t)mem.weights_bytes,
                                                       "kv_cache_bytes", (json_int_t)mem.kv_cache_bytes,
                                                       "arena_bytes", (json_int_t)mem.arena_bytes,
                                                       "buffer_bytes", (json_int_t)mem.buffer_bytes,
                                                       "device_free_bytes", (json_int_t)mem.free_bytes,
                                                       "device_total_bytes", (json_int_t)mem.total_bytes,
                                                       "device", mem.device));
            if (peer) bench_peer_json(peer, o);
            if (a->sessions)
                json_object_set_new(o, "sessions", json_pack("{s:i,s:i,s:f,s:f}", "k", ss.sessions, "identical",
                                                             ss.identical, "threads_ms", ss.together_ms,
                                                             "alone_ms", ss.alone_ms));
            char *txt = json_dumps(o, JSON_COMPACT);
            puts(txt ? txt : "{}");
            free(txt);
            json_decref(o);
        } else {
            printf("prefill %lld x %lld tokens: %.1f ms median, %.1f tok/s, %.2f GFLOP/s (%.3f GFLOP, counted "
                   "from the program)\n", (long long)B, (long long)T, pm, p_tps, gflops, flops / 1e9);
            printf("decode  %lld x %lld tokens from %lld keys: %.1f ms median, %.1f tok/s, %.2f GB/s\n", (long long)B,
                   (long long)N, (long long)D, dm, d_tps, gbs);
            if (gen_on)
                printf("generate %lld tokens (greedy, on the device) from %lld keys: %.1f ms median, %.1f tok/s, "
                       "%.2f GB/s\n", (long long)N, (long long)D, gm, g_tps, g_tps * bytes_tok / 1e9);
            else if (gen_msg[0])
                printf("generate: not run (%s)\n", gen_msg);
            printf("backend %s, %d threads, %lld reps\n", rlx_model_backend_name(m), rlx_model_threads(m),
                   a->reps);
            if (ref.read_gbps > 0)
                printf("reference (read after each decode rep): read %.1f GB/s median, %.1f-%.1f over %lld reps (best "
                       "loop %s; 8-byte loads: %.1f) -> decode at %.0f%% (median of the reps' "
                       "ratios); sgemm [%lld,%lld,%lld] %.1f GFLOP/s -> prefill at %.0f%%\n",
                       ref.read_gbps, ref.read_min, ref.read_max, a->reps, ref.rd.loop, ref.rd.scalar_gbps,
                       100.0 * ref.ratio, (long long)T, (long long)cfg->hidden_size,
                       (long long)cfg->intermediate_size, ref.sgemm_gflops, 100.0 * gflops / ref.sgemm_gflops);
            if (ref.read_gbps > 0)
                printf("decode floor (%.0f MB per token at the median read %.1f GB/s): %.1f tok/s -> decode median "
                       "at %.0f%% of it\n",
                       bytes_tok / 1e6, ref.read_gbps, ref.read_gbps * 1e9 / bytes_tok,
                       100.0 * d_tps / (ref.read_gbps * 1e9 / bytes_tok));
            if (dc.copy_gb_per_s > 0)
                printf("reference (same run, %s): copy %.1f GB/s -> decode at %.0f%% of it, floor %.1f tok/s; "
                       "GEMM %s [%lld,%lld,%lld] %.1f GFLOP/s (%s) -> prefill at %.0f%%\n",
                       rlx_model_backend_name(m), dc.copy_gb_per_s, 100.0 * gbs / dc.copy_gb_per_s,
                       dc.copy_gb_per_s * 1e9 / bytes_tok, gemm_dt, (long long)T, (long long)cfg->hidden_size,
                       (long long)cfg->intermediate_size, dc.gemm_gflops, dc.gemm_library,
                       dc.gemm_gflops > 0 ? 100.0 * gflops / dc.gemm_gflops : 0.0);
            run_print_memory(stdout, &mem);
            if (peer) bench_peer_print(peer, stdout);
            if (a->sessions)
                printf("sessions %d x (%lld + %lld tokens) from %d threads: %d identical to each alone; %.1f ms "
                       "(alone, one after another: %.1f ms)\n", ss.sessions, (long long)T, (long long)N, ss.sessions,
                       ss.identical, ss.together_ms, ss.alone_ms);
        }
        if (run_stdout_check()) rc = -1; /* reported */
    }
done:
    for (int64_t b = 0; s && b < B; b++) rlx_session_free(s[b]);
    free(s);
    free(ids);
    free(logits);
    free(step_ids);
    free(pre);
    free(dec);
    free(gen);
    free(gen_ids);
    free(rd_w);
    free(rd_s);
    free(ratio);
    bench_reader_free(rdr);
    bench_peer_free(peer);
    rlx_model_close(m);
    return rc < 0 ? -1 : rc ? 1 : 0;
}

/* --config's temporary folder: gone on exit and on a terminating signal (an 8B config's
 * random checkpoint is 16 GB); the paths are set before the handlers can run */
static char tmp_files[2][4200], tmp_dir[4096];

static void remove_tmp(void)
{
    unlink(tmp_files[0]);
    unlink(tmp_files[1]);
    rmdir(tmp_dir);
}

static void on_signal(int sig)
{
    remove_tmp(); /* unlink and rmdir are async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN); /* a reader gone is a failed write (exit 1), not a signal */
    bench_args a;
    run_prog_name = "rlx-bench";
    int rc = parse(argc, argv, &a);
    if (rc == 3) {
        fputs(help, stdout);
        return 0;
    }
    if (rc) return rc;
    rlx_diag d;
    rlx_diag_init(&d);
    const char *dir = a.model;
    if (a.config) {
        const char *t = getenv("TMPDIR");
        snprintf(tmp_dir, sizeof tmp_dir, "%s/rlx-bench-XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(tmp_dir)) {
            fprintf(stderr, "rlx-bench: %s: cannot create a temporary folder\n", tmp_dir);
            return 1;
        }
        snprintf(tmp_files[0], sizeof tmp_files[0], "%s/model.safetensors", tmp_dir);
        snprintf(tmp_files[1], sizeof tmp_files[1], "%s/config.json", tmp_dir);
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) sigaction(sigs[i], &sa, NULL);
        if (write_random_model(a.config, tmp_files[0], tmp_files[1], (uint64_t)a.seed, &d) != 0) rc = 1;
        dir = tmp_dir;
    }
    if (!rc) rc = bench(&a, dir, &d);
    if (rc > 0) fprintf(stderr, "rlx-bench: %s\n", d.msg[0] ? d.msg : "failed");
    if (rc < 0) rc = 1;
    if (tmp_dir[0]) remove_tmp();
    return rc;
}
