/* Hostile plugins for isolation tests; TP_HOSTILE picks the misbehaviour:
 * 1 exit(0) in rlx_plugin_init, 2 loops forever there, 3 aborts there,
 * 4 a descriptor claiming 2 blocks whose array has 1 with an unmapped page after it,
 * 5 a constructor that writes $TP_MARKER when it runs in the process $TP_HOST_PID
 *   (and an entry point that declines, so the plugin is always refused). */
#define _GNU_SOURCE
#include "tp.h"
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#if TP_HOSTILE == 4
TP_BLOCK(blk, "tp.hostile");
#endif

#if TP_HOSTILE == 5
__attribute__((constructor)) static void tp_ctor(void)
{
    const char *pid = getenv("TP_HOST_PID"), *marker = getenv("TP_MARKER");
    if (!pid || !marker || atol(pid) != (long)getpid()) return;
    FILE *f = fopen(marker, "w");
    if (f) fclose(f);
}
#endif

TP_EXPORT
{
    (void)host;
#if TP_HOSTILE == 1
    exit(0);
#elif TP_HOSTILE == 2
    for (;;) pause();
#elif TP_HOSTILE == 3
    abort();
#elif TP_HOSTILE == 4
    /* the second entry would sit on a page that is not mapped */
    long pg = sysconf(_SC_PAGESIZE);
    char *m = mmap(NULL, (size_t)pg * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return NULL;
    munmap(m + pg, (size_t)pg);
    const rlx_block **arr = (const rlx_block **)(m + pg - sizeof(void *));
    arr[0] = &blk;
    static rlx_plugin_desc desc = {TP_DESC_SIZE, RLX_ABI_MAJOR, RLX_ABI_MINOR, "tp-lying", "0.1",
                                   "", NULL, 2, NULL, 0, NULL, 0};
    desc.blocks = arr;
    return &desc;
#else
    return NULL;
#endif
}
