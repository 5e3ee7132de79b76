/* The CPU backend's memory is the host's: MemAvailable and MemTotal from /proc/meminfo
 * (the host applies its cgroup and RLX_MEM_LIMIT caps on top). */
#include "cpu_backend.h"
#include <stdio.h>
#include <string.h>

static uint64_t meminfo_kb(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "re");
    if (!f) return 0;
    char line[256];
    unsigned long long v = 0;
    size_t kl = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && sscanf(line + kl, "%llu", &v) == 1) break;
    fclose(f);
    return (uint64_t)v;
}

int cpu_mem_info(void *be, rlx_mem_info *out, rlx_diag *d)
{
    (void)be;
    if (!out || out->struct_size < RLX_STRUCT_SIZE(rlx_mem_info, device))
        return cpu_fail(d, RLX_ERR_INVALID, "cpu: mem_info: struct too small");
    out->free_bytes = meminfo_kb("MemAvailable:") * 1024;
    out->total_bytes = meminfo_kb("MemTotal:") * 1024;
    snprintf(out->device, sizeof out->device, "cpu (host memory)");
    return 0;
}
