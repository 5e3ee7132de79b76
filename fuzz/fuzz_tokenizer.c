/* libFuzzer: tokenizer.json loading, then encode/decode of fixed texts and of the
 * input's own bytes read as ids. */
#define _GNU_SOURCE
#include "fuzz_memfile.h"
#include "fuzz_host_log.h"
#include "base/internal.h"
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *s;
    size_t n;
} texts[] = {
    {"Hello, world! The year 2024: it's 3.14 apples.\n\tTabs  and   spaces ", 0},
    {"h\xc3\xa9llo \xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x98\x80 caf\xc3\xa9 \xe2\x80\x94 \xd0\x9f\xd1\x80\xd0\xb8", 0},
    {"bad \xff\xfe utf8 \xc3 cut \xe4\xb8 and \xed\xa0\x80 surrogate \xf4\x90\x80\x80 end\xf0\x9f", 0},
    {"", 0},
    {"<s></s><unk><|endoftext|><|im_start|>user\n hi<|im_end|>", 0},
    {"a\0b", 3}, /* an embedded NUL */
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    setenv("RLX_NO_CACHE", "1", 1); /* no cache file per input (fuzz_tokcache covers the reader) */
    rlx_tokenizer *t = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    if (rlx_tokenizer_load(fuzz_memfile(data, size), &t, &d) != RLX_OK) {
        if (d.msg[0] == 0 || t) __builtin_trap();
        return 0;
    }
    int64_t vocab = rlx_tokenizer_vocab_size(t);
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        size_t n = texts[i].n ? texts[i].n : strlen(texts[i].s);
        for (int special = 0; special < 2; special++) {
            int32_t *ids = NULL;
            size_t n_ids = 0;
            if (rlx_tokenizer_encode(t, texts[i].s, n, special, &ids, &n_ids, &d) != RLX_OK) {
                if (d.msg[0] == 0) __builtin_trap();
                continue;
            }
            for (size_t k = 0; k < n_ids; k++)
                if (ids[k] < 0) __builtin_trap();
            char *back = NULL;
            if (rlx_tokenizer_decode(t, ids, n_ids, special, &back, &d) == RLX_OK) free(back);
            free(ids);
        }
    }
    /* the input's bytes as ids: in range, past the vocabulary, and negative */
    size_t n_rand = size / 4 < 64 ? size / 4 : 64;
    int32_t rnd[64 + 4] = {-1, INT32_MAX, (int32_t)vocab, (int32_t)(vocab ? vocab - 1 : 0)};
    for (size_t k = 0; k < n_rand; k++) {
        uint32_t v;
        memcpy(&v, data + size - 4 * (k + 1), 4);
        rnd[4 + k] = vocab > 0 && (v & 1) ? (int32_t)((v >> 1) % (uint64_t)(vocab + 8)) : (int32_t)v;
    }
    for (int skip = 0; skip < 2; skip++) {
        char *s = NULL;
        if (rlx_tokenizer_decode(t, rnd, 4 + n_rand, skip, &s, &d) == RLX_OK) free(s);
        else if (d.msg[0] == 0) __builtin_trap();
    }
    rlx_tokenizer_token_id(t, "<s>");
    rlx_tokenizer_token_id(t, "");
    rlx_tokenizer_free(t);
    return 0;
}
