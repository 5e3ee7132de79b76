/* How much memory this process may still take, so large buffers (KV cache, arena) are
 * refused with "needs X GiB, Y GiB available" before any work instead of being killed. */
#include "base/internal.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One number from a file of the form "key value" lines, or the whole file when key is
 * NULL; 0 when absent or "max". */
static uint64_t read_num(const char *path, const char *key)
{
    FILE *f = fopen(path, "re");
    if (!f) return 0;
    char line[256];
    uint64_t v = 0;
    size_t kl = key ? strlen(key) : 0;
    while (fgets(line, sizeof line, f)) {
        if (key && strncmp(line, key, kl) != 0) continue;
        char *p = line + kl, *end;
        unsigned long long x = strtoull(p, &end, 10);
        if (end != p) v = (uint64_t)x;
        break;
    }
    fclose(f);
    return v;
}

/* "123", "4K", "2G" (powers of 1024); 0 when unset or invalid */
static uint64_t env_limit(void)
{
    const char *e = getenv("RLX_MEM_LIMIT");
    if (!e || !*e) return 0;
    char *end;
    unsigned long long v = strtoull(e, &end, 10);
    int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : *end == 'T' ? 40 : 0;
    if (shift) end++;
    if (*end || v == 0 || v > (UINT64_MAX >> shift)) return 0;
    return (uint64_t)v << shift;
}

uint64_t rlx__mem_available(void)
{
    uint64_t avail = read_num("/proc/meminfo", "MemAvailable:") * 1024;
    if (!avail) avail = UINT64_MAX; /* unknown: do not refuse */
    /* cgroup v2: the limit minus what the group already uses */
    uint64_t max = read_num("/sys/fs/cgroup/memory.max", NULL);
    uint64_t cur = read_num("/sys/fs/cgroup/memory.current", NULL);
    if (max && max - (cur < max ? cur : max) < avail) avail = max - (cur < max ? cur : max);
    uint64_t lim = env_limit();
    if (lim && lim < avail) avail = lim;
    return avail;
}

/* GiB from 1 GiB up, else MiB: a small buffer does not read as "0.00 GiB" */
static void size_str(uint64_t bytes, char *buf, size_t len)
{
    const double mib = 1024.0 * 1024.0;
    if (bytes >= (1ull << 30)) snprintf(buf, len, "%.2f GiB", (double)bytes / (mib * 1024.0));
    else snprintf(buf, len, "%.1f MiB", (double)bytes / mib);
}

int rlx__mem_check(const char *what, uint64_t bytes, rlx_diag *d)
{
    uint64_t avail = rlx__mem_available();
    if (bytes <= avail) return RLX_OK;
    char need[32], have[32];
    size_str(bytes, need, sizeof need);
    size_str(avail, have, sizeof have);
    return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: needs %s, %s available", what, need, have);
}
