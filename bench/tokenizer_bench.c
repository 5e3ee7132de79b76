/* tokenizer_bench: encodes 1 MB of mixed text (prose, code, numbers, accents, CJK,
 * emoji, whitespace runs) with each tokenizer on one thread and prints JSON with MB/s
 * (per thread CPU time; first run with a cold word cache, and the best of 3).
 * Usage: tokenizer_bench [SRCDIR] [MB]   (SRCDIR: the rlx source tree) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "rlx/rlx.h"

#ifndef RLX_BENCH_SRCDIR
#define RLX_BENCH_SRCDIR "."
#endif

static const char *pieces[] = {
    "the ", "quick ", "brown ", "fox ", "jumps ", "over ", "lazy ", "dog", ". ", ", ", "and ",
    "tokenizer ", "performance ", "of ", "a ", "model ", "is ", "measured ", "in ", "megabytes ",
    "per ", "second", "\n", "\n\n", "    ", "\t", "def f(x):\n    return x**2  # ", "for i in range(10):\n",
    "if (a[i] != b[j]) { c += 1; }\n", "12345", "3.14159", "2024-06-01 ", "naïve ", "café ", "Ünïcödé ",
    "日本語のテキスト ", "中文字符 ", "🙂", "🚀 ", "I'm ", "you're ", "they'll've ", "\"quoted\" ",
    "<html><body>", "</body></html>\n", "   leading", "trailing   ", "ALLCAPS ", "MiXeD ", "e\xcc\x81 ",
};

/* thread CPU time: the figure stays meaningful on a loaded shared machine */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    const char *src = argc > 1 ? argv[1] : RLX_BENCH_SRCDIR;
    double mb = argc > 2 ? atof(argv[2]) : 1.0;
    size_t target = (size_t)(mb * 1024 * 1024);
    char *text = malloc(target + 64);
    if (!text) return 1;
    size_t n = 0;
    uint64_t x = 42;
    const size_t np = sizeof pieces / sizeof *pieces;
    while (n < target) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        const char *p = pieces[(x >> 33) % np];
        size_t l = strlen(p);
        if (n + l > target) break;
        memcpy(text + n, p, l);
        n += l;
    }
    text[n] = 0;
    const char *files[] = {"tests/fixtures/tokenizers/bytelevel-bpe.json",
                           "tests/fixtures/tokenizers/spm-bpe-bytefallback.json",
                           "models/tiny-llama-py/tokenizer.json"};
    printf("{\"bytes\":%zu,\"results\":[", n);
    for (size_t f = 0; f < 3; f++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", src, files[f]);
        rlx_diag d;
        rlx_diag_init(&d);
        rlx_tokenizer *t;
        if (rlx_tokenizer_load(path, &t, &d)) {
            fprintf(stderr, "tokenizer_bench: %s\n", d.msg);
            return 1;
        }
        double first = 0, best = 1e30;
        size_t ntok = 0;
        for (int rep = 0; rep < 3; rep++) {
            int32_t *ids;
            double t0 = now_s();
            if (rlx_tokenizer_encode(t, text, n, 0, &ids, &ntok, &d)) {
                fprintf(stderr, "tokenizer_bench: %s\n", d.msg);
                return 1;
            }
            double dt = now_s() - t0;
            free(ids);
            if (rep == 0) first = dt;
            if (dt < best) best = dt;
        }
        rlx_tokenizer_free(t);
        printf("%s{\"tokenizer\":\"%s\",\"tokens\":%zu,\"first_s\":%.4f,\"best_s\":%.4f,"
               "\"mb_per_s_first\":%.2f,\"mb_per_s\":%.2f}",
               f ? "," : "", files[f], ntok, first, best, n / 1048576.0 / first, n / 1048576.0 / best);
    }
    printf("]}\n");
    free(text);
    return 0;
}
