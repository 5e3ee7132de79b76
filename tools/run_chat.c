/* rlx-run chat: an interactive multi-turn chat with a model that has a chat template.
 * One user turn per stdin line (EOF ends). Each turn renders the whole conversation,
 * and only the tokens past what the KV cache already holds are prefilled; if the
 * rendering no longer extends the cached tokens (a template that rewrites history), the
 * session is reset and the conversation prefilled again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "rlx/rlx.h"
#include "run_cmds.h"
#include "run_common.h"

static const char usage[] =
    "usage: rlx-run chat [--model DIR] [--system TEXT] [-n N] [--greedy | --temperature T --top-k K\n"
    "       --top-p P --seed S] [--repetition-penalty R] [--ctx N] [--backend NAME]\n"
    "       [--profile NAME|FILE] [--threads N]\n"
    "  reads one user turn per line from stdin and streams each reply to stdout; needs a\n"
    "  chat_template (LLaMA 3, ChatML/Qwen or Gemma format) in tokenizer_config.json";

typedef struct chat_args {
    const char *model, *system;
    long long n, top_k, seed, ctx;
    double temperature, top_p, rep;
    int greedy, sampling;
    run_model_flags mf;
} chat_args;

static int parse(int argc, char **argv, chat_args *a)
{
    memset(a, 0, sizeof *a);
    a->n = 256;
    a->top_p = 1.0;
    a->rep = 1.0;
    a->temperature = -1; /* not given */
    for (int i = 0; i < argc; i++) {
        const char *v, *arg = argv[i];
        int r;
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) return 3;
        if ((r = run_model_flag(argc, argv, &i, &a->mf, usage)) < 0) goto bad;
        if (r > 0) continue;
#define VALUE(name) if ((r = run_opt(argc, argv, &i, name, &v)) < 0) goto bad; else if (r > 0)
#define CHECK(x) do { if ((x) != 0) goto bad; } while (0)
        VALUE("--model") { a->model = v; continue; }
        VALUE("--system") { a->system = v; continue; }
        VALUE("-n") { CHECK(run_int("-n", v, 1, 1 << 24, &a->n)); continue; }
        VALUE("--temperature") { CHECK(run_double(arg, v, 0, 1e6, &a->temperature)); a->sampling = 1; continue; }
        VALUE("--top-k") { CHECK(run_int(arg, v, 0, INT32_MAX, &a->top_k)); a->sampling = 1; continue; }
        VALUE("--top-p") { CHECK(run_double(arg, v, 0, 1, &a->top_p)); a->sampling = 1; continue; }
        VALUE("--seed") { CHECK(run_int(arg, v, 0, INT64_MAX, &a->seed)); a->sampling = 1; continue; }
        VALUE("--repetition-penalty") { CHECK(run_double(arg, v, 1e-6, 1e6, &a->rep)); continue; }
        VALUE("--ctx") { CHECK(run_int(arg, v, 1, 1 << 24, &a->ctx)); continue; }
#undef VALUE
#undef CHECK
        if (!strcmp(arg, "--greedy")) a->greedy = 1;
        else return run_usage(usage, "%s '%s'", arg[0] == '-' ? "unknown option" : "unexpected argument", arg);
    }
    if (a->greedy && a->sampling)
        return run_usage(usage, "--greedy excludes --temperature, --top-k, --top-p and --seed");
    if (!a->model) a->model = run_demo_model_dir();
    return 0;
bad:
    fprintf(stderr, "%s\n", usage);
    return 2;
}

typedef struct chat {
    rlx_model *model;
    rlx_session *sess;
    rlx_tokenizer *tok;
    rlx_chat_template *tpl;
    rlx_sampler *sampler;
    rlx_chat_message *msgs;
    size_t n_msgs;
    int32_t *cached; /* tokens the KV cache holds, in order */
    size_t n_cached, cap_cached;
    int32_t stop[RLX_MAX_EOS + 3];
    int n_stop;
    float *logits;
    int64_t vocab, ctx;
    size_t reused, prefilled; /* prompt tokens taken from the cache / run, all turns */
    size_t last_prompt;       /* tokens of the last turn's rendering */
} chat;

static void chat_free(chat *c)
{
    for (size_t i = 0; i < c->n_msgs; i++) free((char *)c->msgs[i].content);
    free(c->msgs);
    free(c->cached);
    free(c->logits);
    rlx_sampler_free(c->sampler);
    if (c->sess) rlx_session_free(c->sess);
    rlx_chat_template_free(c->tpl);
    rlx_tokenizer_free(c->tok);
    if (c->model) rlx_model_close(c->model);
}

static int add_msg(chat *c, const char *role, const char *content, size_t len)
{
    rlx_chat_message *m = realloc(c->msgs, (c->n_msgs + 1) * sizeof *m);
    if (!m) return -1;
    c->msgs = m;
    char *s = malloc(len + 1);
    if (!s) return -1;
    memcpy(s, content, len);
    s[len] = 0;
    c->msgs[c->n_msgs++] = (rlx_chat_message){role, s};
    return 0;
}

static int push_cached(chat *c, int32_t id)
{
    if (c->n_cached == c->cap_cached) {
        size_t nc = c->cap_cached ? c->cap_cached * 2 : 1024;
        int32_t *q = realloc(c->cached, nc * sizeof *q);
        if (!q) return -1;
        c->cached = q;
        c->cap_cached = nc;
    }
    c->cached[c->n_cached++] = id;
    return 0;
}

static int is_stop(const chat *c, int32_t id)
{
    for (int i = 0; i < c->n_stop; i++)
        if (c->stop[i] == id) return 1;
    return 0;
}

static void add_stop(chat *c, int32_t id)
{
    if (id < 0 || is_stop(c, id) || c->n_stop >= (int)(sizeof c->stop / sizeof *c->stop)) return;
    c->stop[c->n_stop++] = id;
}

/* bytes of s that are whole characters, holding back a trailing U+FFFD or an incomplete
 * sequence (the next byte-level token may complete it) */
static size_t stable_len(const char *s, size_t len)
{
    size_t k = len;
    while (k > 0 && len - k < 4 && ((unsigned char)s[k - 1] & 0xC0) == 0x80) k--;
    if (k > 0) {
        unsigned char lead = (unsigned char)s[k - 1];
        size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
        if (len - (k - 1) < need) len = k - 1;
    }
    while (len >= 3 && !memcmp(s + len - 3, "\xEF\xBF\xBD", 3)) len -= 3;
    return len;
}

/* offset of the first byte of s that is not well-formed UTF-8 (RFC 3629), or len */
static size_t utf8_bad(const unsigned char *s, size_t len)
{
    size_t i = 0;
    while (i < len) {
        unsigned char b = s[i];
        size_t n = b < 0x80 ? 1 : b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
        if (!n || i + n > len) return i;
        unsigned char lo = b == 0xE0 ? 0xA0 : b == 0xF0 ? 0x90 : 0x80; /* no overlong forms */
        unsigned char hi = b == 0xED ? 0x9F : b == 0xF4 ? 0x8F : 0xBF; /* no surrogates, <= U+10FFFF */
        if (n > 1 && (s[i + 1] < lo || s[i + 1] > hi)) return i;
        for (size_t k = 2; k < n; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        i += n;
    }
    return len;
}

/* Prefill the rendered conversation past the cached tokens; leaves c->logits ready. */
static int feed_prompt(chat *c, const int32_t *ids, size_t n, rlx_diag *d)
{
    size_t common = 0;
    while (common < n && common < c->n_cached && ids[common] == c->cached[common]) common++;
    if (common == n && n > 0) common--; /* nothing new: rerun the last token for its logits */
    for (size_t i = common; i < n; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab)
            return run_error("chat: tokenizer.json gives token id %d, outside the vocabulary [0, %lld) of config.json",
                             (int)ids[i], (long long)c->vocab);
    if ((int64_t)n >= c->ctx)
        return run_error("the conversation (%zu tokens) no longer fits the context of %lld tokens (--ctx)", n,
                         (long long)c->ctx);
    /* keep the longest common prefix of the cache and the new rendering, whatever the
     * template re-renders differently (an end-of-turn token, a reworded last reply) */
    if (rlx_session_rewind(c->sess, (int64_t)common, d) != 0) return run_fail(d);
    c->n_cached = common;
    c->reused += common;
    if (rlx_session_prefill(c->sess, ids + common, (int64_t)(n - common), NULL, c->logits, d) != 0)
        return run_fail(d);
    for (size_t i = common; i < n; i++)
        if (push_cached(c, ids[i])) return run_error("out of memory");
    c->prefilled += n - common;
    c->last_prompt = n;
    return 0;
}

/* Generate and stream one reply; appends it to the conversation. */
static int reply(chat *c, long long max_new, rlx_diag *d)
{
    size_t printed = 0;
    int32_t *gen = NULL;
    size_t ng = 0;
    int rc = 0;
    char *text = NULL;
    for (long long k = 0; k < max_new; k++) {
        if (run_check_logits(c->logits, c->vocab, k)) {
            rc = 1;
            break;
        }
        int32_t id = rlx_sampler_next(c->sampler, c->logits, c->cached, c->n_cached);
        if (id < 0 || id >= c->vocab) {
            rc = run_error("sampler returned token id %d", (int)id);
            break;
        }
        if (is_stop(c, id)) break;
        int32_t *q = realloc(gen, (ng + 1) * sizeof *q);
        if (!q) {
            free(gen);
            free(text);
            return run_error("out of memory");
        }
        gen = q;
        gen[ng++] = id;
        free(text);
        text = NULL;
        if (rlx_tokenizer_decode(c->tok, gen, ng, 1, &text, d) != 0) {
            rc = run_fail(d);
            break;
        }
        size_t upto = stable_len(text, strlen(text));
        if (upto > printed) {
            fwrite(text + printed, 1, upto - printed, stdout);
            run_flush_stdout();
            printed = upto;
        }
        if (ferror(stdout)) {
            rc = run_stdout_check();
            break;
        }
        if (k + 1 == max_new) break;
        if (c->n_cached + 2 > (size_t)c->ctx) {
            fprintf(stderr, "rlx-run: chat: context of %lld tokens full, reply cut\n", (long long)c->ctx);
            break;
        }
        /* only tokens the KV cache really holds count as cached: the last sampled
         * token of a reply is fed with the next turn's prompt */
        if (rlx_session_decode(c->sess, id, c->logits, d) != 0) {
            rc = run_fail(d);
            break;
        }
        if (push_cached(c, id)) {
            rc = run_error("out of memory");
            break;
        }
    }
    if (!rc) {
        free(text);
        text = NULL;
        if (rlx_tokenizer_decode(c->tok, gen, ng, 1, &text, d) != 0) rc = run_fail(d);
    }
    if (!rc) {
        size_t len = strlen(text);
        if (len > printed) fwrite(text + printed, 1, len - printed, stdout);
        fputc('\n', stdout);
        if (run_stdout_check()) rc = 1;
        else if (add_msg(c, "assistant", text, len)) rc = run_error("out of memory");
    }
    free(text);
    free(gen);
    return rc;
}

static int run(const chat_args *a, chat *c, rlx_diag *d)
{
    char path[4096];
    if (rlx_chat_template_load(a->model, &c->tpl, d) != 0) return run_fail(d);
    snprintf(path, sizeof path, "%s/tokenizer.json", a->model);
    if (rlx_tokenizer_load(path, &c->tok, d) != 0) return run_fail(d);
    rlx_model_options mo;
    run_model_options(&a->mf, &mo);
    if (rlx_model_open(a->model, &mo, &c->model, d) != 0) return run_fail(d);
    const rlx_model_config *cfg = rlx_model_get_config(c->model);
    c->vocab = cfg->vocab_size;

    rlx_generation_config gc;
    if (rlx_generation_config_load(a->model, cfg, &gc, d) != 0) return run_fail(d);
    for (int i = 0; i < gc.n_eos; i++) add_stop(c, (int32_t)gc.eos_token_ids[i]);
    add_stop(c, rlx_tokenizer_token_id(c->tok, rlx_chat_template_end_of_turn(c->tpl)));

    rlx_sampler_params sp = {.top_p = 1.0, .repetition_penalty = a->rep, .seed = (uint64_t)a->seed};
    if (a->greedy) {
        sp.greedy = 1;
    } else if (a->sampling && a->temperature == 0) {
        sp.greedy = 1; /* T -> 0 is the argmax */
    } else if (a->sampling) {
        sp.temperature = a->temperature > 0 ? a->temperature : 1.0;
        sp.top_k = a->top_k;
        sp.top_p = a->top_p;
    } else if (gc.do_sample && gc.temperature == 0) {
        sp.greedy = 1;
    } else if (gc.do_sample) {
        sp.temperature = gc.temperature > 0 ? gc.temperature : 1.0;
        sp.top_k = gc.top_k;
        sp.top_p = gc.top_p > 0 ? gc.top_p : 1.0;
        if (a->rep == 1.0 && gc.repetition_penalty > 0) sp.repetition_penalty = gc.repetition_penalty;
    } else {
        sp.greedy = 1;
    }
    if (!(c->sampler = rlx_sampler_new(&sp, c->vocab))) return run_error("sampler: bad parameters or out of memory");
    if (rlx_session_new(c->model, a->ctx, &c->sess, d) != 0) return run_fail(d);
    c->ctx = a->ctx > 0 ? a->ctx : (cfg->max_position_embeddings > 0 && cfg->max_position_embeddings < 4096
                                        ? cfg->max_position_embeddings : 4096);
    if (!(c->logits = malloc((size_t)c->vocab * sizeof(float)))) return run_error("out of memory");
    if (a->system && add_msg(c, "system", a->system, strlen(a->system))) return run_error("out of memory");

    int tty = isatty(0);
    char *line = NULL;
    size_t cap = 0;
    ssize_t got;
    size_t lineno = 0;
    int rc = 0;
    for (;;) {
        if (tty) fputs("> ", stderr);
        if ((got = getline(&line, &cap, stdin)) < 0) break;
        lineno++;
        while (got > 0 && (line[got - 1] == '\n' || line[got - 1] == '\r')) got--;
        if (got == 0) continue;
        size_t bad = utf8_bad((const unsigned char *)line, (size_t)got);
        if (bad < (size_t)got) { /* reported and dropped; the chat goes on */
            run_error("chat: line %zu skipped: not valid UTF-8 (byte %zu is 0x%02X)", lineno, bad + 1,
                      (unsigned char)line[bad]);
            continue;
        }
        if (add_msg(c, "user", line, (size_t)got)) {
            rc = run_error("out of memory");
            break;
        }
        char *prompt = NULL;
        int32_t *ids = NULL;
        size_t n = 0;
        if (rlx_chat_template_render(c->tpl, c->msgs, c->n_msgs, 1, &prompt, d) != 0 ||
            rlx_tokenizer_encode(c->tok, prompt, strlen(prompt), 0, &ids, &n, d) != 0) {
            /* one bad line (invalid UTF-8, say) is reported and dropped; the chat goes on */
            free(prompt);
            run_error("chat: line %zu skipped: %s", lineno, d->msg);
            rlx_diag_init(d);
            free((char *)c->msgs[--c->n_msgs].content);
            continue;
        }
        free(prompt);
        rc = feed_prompt(c, ids, n, d);
        free(ids);
        if (rc || (rc = reply(c, a->n, d))) break;
    }
    free(line);
    const char *lv = getenv("RLX_LOG");
    if (lv && (!strcmp(lv, "info") || !strcmp(lv, "debug")))
        fprintf(stderr, "rlx-run: chat: prompt tokens reused from the cache %zu, prefilled %zu; last prompt %zu\n",
                c->reused, c->prefilled, c->last_prompt);
    return rc;
}

int rlx_cmd_chat(int argc, char **argv)
{
    chat_args a;
    int rc = parse(argc, argv, &a);
    if (rc == 3) return printf("%s\n", usage), 0;
    if (rc) return rc;
    chat c;
    memset(&c, 0, sizeof c);
    rlx_diag d;
    rlx_diag_init(&d);
    rc = run(&a, &c, &d);
    chat_free(&c);
    return rc;
}
