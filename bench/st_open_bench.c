/* Opening a 2 GB safetensors must not read it: writes one (sparse data, random header
 * of many tensors) under $TMPDIR, then times rlx_weights_open + close, median of 5.
 * Prints one JSON object. Not part of make check. */
#define _GNU_SOURCE
#include "rlx/rlx.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char path[4096];
    snprintf(path, sizeof path, "%s/rlx-st-open-bench-%d.safetensors", tmp, (int)getpid());
    const uint64_t target = 2ull << 30;
    srand(42);
    /* random shapes: 2-D matrices of bf16/f32 until 2 GB is covered */
    size_t cap = 1 << 20, hl = 0;
    char *hdr = malloc(cap);
    uint64_t off = 0;
    int n = 0;
    hl += (size_t)snprintf(hdr + hl, cap - hl, "{\"__metadata__\":{\"format\":\"pt\"}");
    while (off < target) {
        int bf = rand() & 1;
        uint64_t r = 64 + (uint64_t)(rand() % 4096), c = 64 + (uint64_t)(rand() % 2048);
        uint64_t bytes = r * c * (bf ? 2 : 4);
        if (off + bytes > target) break;
        if (cap - hl < 256) hdr = realloc(hdr, cap *= 2);
        hl += (size_t)snprintf(hdr + hl, cap - hl,
                               ",\"model.layers.%d.w%d.weight\":{\"dtype\":\"%s\",\"shape\":[%llu,%llu],"
                               "\"data_offsets\":[%llu,%llu]}",
                               n / 7, n % 7, bf ? "BF16" : "F32", (unsigned long long)r,
                               (unsigned long long)c, (unsigned long long)off,
                               (unsigned long long)(off + bytes));
        off += bytes;
        n++;
    }
    hl += (size_t)snprintf(hdr + hl, cap - hl, "}");
    while (hl % 8) hdr[hl++] = ' ';
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        return 1;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(hdr, 1, hl, f);
    fclose(f);
    if (truncate(path, (off_t)(8 + hl + off)) != 0) { /* sparse data section */
        perror(path);
        return 1;
    }
    double t[5];
    size_t count = 0;
    for (int i = 0; i < 5; i++) {
        rlx_diag d;
        rlx_diag_init(&d);
        rlx_weights *w;
        double t0 = now_ms();
        if (rlx_weights_open(path, &w, &d) != 0) {
            fprintf(stderr, "%s\n", d.msg);
            unlink(path);
            return 1;
        }
        count = rlx_weights_count(w);
        rlx_weights_close(w);
        t[i] = now_ms() - t0;
    }
    unlink(path);
    qsort(t, 5, sizeof t[0], cmp_d);
    printf("{\"file_bytes\":%llu,\"header_bytes\":%zu,\"tensors\":%zu,\"open_close_ms_median\":%.3f,"
           "\"open_close_ms_min\":%.3f,\"open_close_ms_max\":%.3f,\"reps\":5}\n",
           (unsigned long long)(8 + hl + off), hl, count, t[2], t[0], t[4]);
    free(hdr);
    return 0;
}
