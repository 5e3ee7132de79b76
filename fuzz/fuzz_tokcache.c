/* libFuzzer: the tokenizer cache reader on any image (checksum not required, so the
 * fuzzer reaches the table checks), then BPE lookups through whatever tables passed. */
#define _GNU_SOURCE
#include "fuzz_host_log.h"
#include "text/tokenizer_internal.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static const char *const words[] = {"hello", "\xc4\xa0the", "a", "\xe4\xb8\x96\xe7\x95\x8c", "zzzzzzzzzzzzzzzzzz"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t *img = malloc(size / 8 * 8 + 8); /* the reader expects an aligned image */
    if (!img) return 0;
    memcpy(img, data, size);
    tk_cache_view v;
    for (int sum = 0; sum < 2; sum++) {
        if (tk_cache_parse(img, size, NULL, sum, &v)) continue;
        tk_bpe *b = tk_bpe_from_view(&v, NULL, 0);
        json_t *model = json_object();
        rlx_diag d;
        rlx_diag_init(&d);
        tk_jctx c = {"fuzz", &d};
        if (b && model && tk_bpe_finish_vocab(&c, b, model) == 0)
            for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
                tk_ids ids = {0};
                if (tk_bpe_encode_word(b, words[i], strlen(words[i]), &ids) == 0)
                    for (size_t k = 0; k < ids.n; k++)
                        if (ids.v[k] < 0 || ids.v[k] > v.max_id) __builtin_trap();
                free(ids.v);
            }
        json_decref(model);
        tk_bpe_free(b);
    }
    free(img);
    return 0;
}
