/* rlx-run tokenize / detokenize: text <-> token ids with a model's tokenizer.json. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rlx/rlx.h"
#include "run_cmds.h"
#include "run_common.h"

static const char tok_usage[] =
    "usage: rlx-run tokenize (--model DIR | --tokenizer tokenizer.json) --text TEXT [--json] [--no-special]\n"
    "  prints the token ids, space-separated (--json: {\"ids\":[...]}); the tokenizer's\n"
    "  post-processor adds BOS & co. unless --no-special is given";
static const char detok_usage[] =
    "usage: rlx-run detokenize (--model DIR | --tokenizer tokenizer.json) --ids 1,2,3 [--keep-special]\n"
    "  prints the text, special tokens skipped unless --keep-special is given";

typedef struct tok_args {
    const char *model, *file, *text, *ids;
    int json, flag; /* flag: --no-special (tokenize) / --keep-special (detokenize) */
} tok_args;

/* 0 ok, 2 usage error (printed), 3 help */
static int parse(int argc, char **argv, int detok, tok_args *a)
{
    const char *usage = detok ? detok_usage : tok_usage;
    memset(a, 0, sizeof *a);
    for (int i = 0; i < argc; i++) {
        const char *v, *arg = argv[i];
        int r;
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) return 3;
#define VALUE(name) if ((r = run_opt(argc, argv, &i, name, &v)) < 0) goto bad; else if (r > 0)
        VALUE("--model") { a->model = v; continue; }
        VALUE("--tokenizer") { a->file = v; continue; }
        if (!detok) {
            VALUE("--text") { a->text = v; continue; }
        } else {
            VALUE("--ids") { a->ids = v; continue; }
        }
#undef VALUE
        if (!detok && !strcmp(arg, "--json")) a->json = 1;
        else if (!detok && !strcmp(arg, "--no-special")) a->flag = 1;
        else if (detok && !strcmp(arg, "--keep-special")) a->flag = 1;
        else return run_usage(usage, "%s '%s'", arg[0] == '-' ? "unknown option" : "unexpected argument", arg);
    }
    if (a->model && a->file) return run_usage(usage, "--model and --tokenizer exclude each other");
    if (!a->model && !a->file) return run_usage(usage, "needs --model DIR or --tokenizer FILE");
    if (!detok && !a->text) return run_usage(usage, "needs --text TEXT");
    if (detok && !a->ids) return run_usage(usage, "needs --ids 1,2,3");
    return 0;
bad:
    fprintf(stderr, "%s\n", usage);
    return 2;
}

static int load(const tok_args *a, rlx_tokenizer **t, char *path, size_t cap)
{
    if (a->file) snprintf(path, cap, "%s", a->file);
    else snprintf(path, cap, "%s/tokenizer.json", a->model);
    rlx_diag d;
    rlx_diag_init(&d);
    if (rlx_tokenizer_load(path, t, &d) != 0) return run_fail(&d);
    return 0;
}

int rlx_cmd_tokenize(int argc, char **argv)
{
    tok_args a;
    int rc = parse(argc, argv, 0, &a);
    if (rc == 3) return printf("%s\n", tok_usage), 0;
    if (rc) return rc;
    char path[4096];
    rlx_tokenizer *t = NULL;
    if ((rc = load(&a, &t, path, sizeof path))) return rc;
    rlx_diag d;
    rlx_diag_init(&d);
    int32_t *ids = NULL;
    size_t n = 0;
    if (rlx_tokenizer_encode(t, a.text, strlen(a.text), !a.flag, &ids, &n, &d) != 0) {
        rlx_tokenizer_free(t);
        return run_fail(&d);
    }
    if (a.json) fputs("{\"ids\":[", stdout);
    for (size_t i = 0; i < n; i++) printf(i ? (a.json ? ",%d" : " %d") : "%d", (int)ids[i]);
    fputs(a.json ? "]}\n" : "\n", stdout);
    free(ids);
    rlx_tokenizer_free(t);
    return run_stdout_check();
}

int rlx_cmd_detokenize(int argc, char **argv)
{
    tok_args a;
    int rc = parse(argc, argv, 1, &a);
    if (rc == 3) return printf("%s\n", detok_usage), 0;
    if (rc) return rc;
    int32_t *ids = NULL;
    size_t n = 0;
    if (run_ids("--ids", a.ids, &ids, &n) != 0) return fprintf(stderr, "%s\n", detok_usage), 2;
    char path[4096];
    rlx_tokenizer *t = NULL;
    if ((rc = load(&a, &t, path, sizeof path))) {
        free(ids);
        return rc;
    }
    int64_t vocab = rlx_tokenizer_vocab_size(t);
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= vocab) {
            rc = run_error("--ids: token id %d is outside the vocabulary [0, %lld) of %s", (int)ids[i],
                           (long long)vocab, path);
            free(ids);
            rlx_tokenizer_free(t);
            return rc;
        }
    rlx_diag d;
    rlx_diag_init(&d);
    char *text = NULL;
    rc = rlx_tokenizer_decode(t, ids, n, !a.flag, &text, &d);
    free(ids);
    rlx_tokenizer_free(t);
    if (rc != 0) return run_fail(&d);
    fputs(text, stdout);
    fputc('\n', stdout);
    free(text);
    return run_stdout_check();
}
