#include "bench_peer.h"
#include "bench_reference.h"
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

struct bench_peer {
    const char *bin, *gguf;
    long long prefill, decode;
    int threads, reps;
    double *pp, *tg;         /* llama.cpp's tok/s, per rep */
    double *rlx_pp, *rlx_tg; /* rlx's tok/s, per rep */
    double *tmp;             /* medians sort a copy: the per-rep arrays stay in rep order */
};

bench_peer *bench_peer_new(const char *bin, const char *gguf, long long prefill, long long decode, int threads,
                           int reps)
{
    bench_peer *p = calloc(1, sizeof *p);
    double *v = calloc((size_t)reps * 5, sizeof *v); /* one block for the five arrays */
    if (!p || !v) {
        free(p);
        free(v);
        return NULL;
    }
    *p = (bench_peer){bin, gguf, prefill, decode, threads, reps, v, v + reps, v + 2 * reps, v + 3 * reps, v + 4 * reps};
    return p;
}

void bench_peer_free(bench_peer *p)
{
    if (p) free(p->pp);
    free(p);
}

/* all of f (llama-bench's JSON); NULL: out of memory */
static char *read_all(FILE *f)
{
    size_t cap = 1 << 16, len = 0, got;
    char *buf = malloc(cap);
    while (buf && (got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (len + 1 < cap) continue;
        char *nb = realloc(buf, cap * 2);
        if (!nb) free(buf);
        buf = nb;
        cap *= 2;
    }
    if (buf) buf[len] = 0;
    return buf;
}

/* one llama-bench run (-o json: one object per test with n_prompt, n_gen, avg_ts) */
int bench_peer_rep(bench_peer *p, int r, double rlx_pp, double rlx_tg, rlx_diag *d)
{
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' -m '%s' -p %lld -n %lld -t %d -r 1 -o json 2>/dev/null", p->bin, p->gguf,
             p->prefill, p->decode, p->threads);
    FILE *f = popen(cmd, "r");
    if (!f) return rlx_diag_set(d, RLX_ERR_IO, "%s: cannot run", p->bin);
    char *out = read_all(f);
    int st = pclose(f);
    int code = st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (!out) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory for the output of %s", p->bin);
    json_error_t e;
    json_t *j = json_loads(out, 0, &e);
    free(out);
    int arr = json_is_array(j);
    double pp = 0, tg = 0;
    for (size_t i = 0; i < json_array_size(j); i++) {
        json_t *o = json_array_get(j, i);
        double ts = json_number_value(json_object_get(o, "avg_ts"));
        if (json_integer_value(json_object_get(o, "n_prompt")) > 0) pp = ts;
        else if (json_integer_value(json_object_get(o, "n_gen")) > 0) tg = ts;
    }
    json_decref(j);
    if (!arr)
        return rlx_diag_set(d, RLX_ERR_IO, "%s on %s: exit %d, no JSON array on stdout (rep %d of %d)", p->bin,
                            p->gguf, code, r + 1, p->reps);
    if (code)
        return rlx_diag_set(d, RLX_ERR_IO, "%s on %s: exit %d (rep %d of %d)", p->bin, p->gguf, code, r + 1, p->reps);
    if (pp <= 0 || (p->decode > 0 && tg <= 0))
        return rlx_diag_set(d, RLX_ERR_IO, "%s on %s: no pp%lld or tg%lld result in its JSON (rep %d of %d)", p->bin,
                            p->gguf, p->prefill, p->decode, r + 1, p->reps);
    p->pp[r] = pp;
    p->tg[r] = tg;
    p->rlx_pp[r] = rlx_pp;
    p->rlx_tg[r] = rlx_tg;
    return 0;
}

static double ratio(double a, double b) { return b > 0 ? a / b : 0; }

/* the median over reps of num[r] (den NULL) or of num[r] / den[r] */
static double median(const bench_peer *p, const double *num, const double *den)
{
    int n = p->reps;
    for (int r = 0; r < n; r++) p->tmp[r] = den ? ratio(num[r], den[r]) : num[r];
    return bench_median(p->tmp, n);
}

void bench_peer_json(const bench_peer *p, json_t *o)
{
    json_t *pr = json_array(), *tr = json_array();
    for (int r = 0; r < p->reps; r++) {
        json_array_append_new(pr, json_real(ratio(p->rlx_pp[r], p->pp[r])));
        json_array_append_new(tr, json_real(ratio(p->rlx_tg[r], p->tg[r])));
    }
    /* llama-bench's tg decodes from an empty context */
    json_object_set_new(o, "peer", json_pack("{s:f,s:f,s:i,s:s,s:s}", "prefill_tokens_per_s", median(p, p->pp, NULL),
                                             "decode_tokens_per_s", median(p, p->tg, NULL), "decode_depth", 0,
                                             "gguf", p->gguf, "peer_schedule", "interleaved"));
    json_object_set_new(o, "prefill_vs_peer", json_real(median(p, p->rlx_pp, p->pp)));
    json_object_set_new(o, "decode_vs_peer", json_real(median(p, p->rlx_tg, p->tg)));
    json_object_set_new(o, "prefill_vs_peer_reps", pr);
    json_object_set_new(o, "decode_vs_peer_reps", tr);
}

void bench_peer_print(const bench_peer *p, FILE *f)
{
    fprintf(f, "peer llama.cpp (%s, -r 1 after each of rlx's %d reps): pp%lld %.1f tok/s, tg%lld (from 0 keys) %.1f tok/s (medians) "
            "-> rlx/llama.cpp prefill %.2fx, decode %.2fx (medians of the per-rep ratios; decode per rep:",
            p->gguf, p->reps, p->prefill, median(p, p->pp, NULL), p->decode, median(p, p->tg, NULL),
            median(p, p->rlx_pp, p->pp), median(p, p->rlx_tg, p->tg));
    for (int r = 0; r < p->reps; r++) fprintf(f, " %.2f", ratio(p->rlx_tg[r], p->tg[r]));
    fputs(")\n", f);
}
