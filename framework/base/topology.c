/* CPU topology and thread placement (hwloc), behind the host services table.
 *
 * The topology and the process's affinity mask are read once, at the first query:
 * worker threads bind themselves later, and a mask read after that would shrink. The
 * usable PUs are those hwloc allows (cgroups) AND the affinity mask (taskset). */
#include "base/internal.h"
#include <hwloc.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static hwloc_topology_t topo;
static hwloc_bitmap_t usable; /* allowed cpuset ∩ affinity mask at first query */
static int topo_ok;
static pthread_once_t topo_once = PTHREAD_ONCE_INIT;

static void topo_load(void)
{
    if (hwloc_topology_init(&topo) != 0) return;
    /* placement needs packages, cores, PUs and NUMA nodes only: caches, groups and dies
     * are not discovered (on a large machine their sysfs walk is most of the load) */
    hwloc_topology_set_cache_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
    hwloc_topology_set_icache_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
    hwloc_topology_set_type_filter(topo, HWLOC_OBJ_GROUP, HWLOC_TYPE_FILTER_KEEP_NONE);
    hwloc_topology_set_type_filter(topo, HWLOC_OBJ_DIE, HWLOC_TYPE_FILTER_KEEP_NONE);
    hwloc_topology_set_type_filter(topo, HWLOC_OBJ_MISC, HWLOC_TYPE_FILTER_KEEP_NONE);
#if HWLOC_API_VERSION >= 0x00020100
    /* the x86 component moves this thread onto every PU in turn to run CPUID (a migration
     * per PU); Linux's sysfs gives the same packages, cores and PUs */
    hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "x86");
#endif
    if (hwloc_topology_load(topo) != 0) {
        hwloc_topology_destroy(topo);
        return;
    }
    usable = hwloc_bitmap_dup(hwloc_topology_get_allowed_cpuset(topo));
    hwloc_bitmap_t mask = hwloc_bitmap_alloc();
    if (usable && mask && hwloc_get_cpubind(topo, mask, HWLOC_CPUBIND_PROCESS) == 0 &&
        hwloc_bitmap_intersects(mask, usable))
        hwloc_bitmap_and(usable, usable, mask);
    hwloc_bitmap_free(mask);
    if (!usable || hwloc_bitmap_iszero(usable)) {
        hwloc_bitmap_free(usable);
        usable = NULL;
        hwloc_topology_destroy(topo);
        return;
    }
    topo_ok = 1;
}

/* Objects of a type whose cpuset meets the usable set. */
static int count_usable(hwloc_obj_type_t type)
{
    int n = 0, total = hwloc_get_nbobjs_by_type(topo, type);
    for (int i = 0; i < total; i++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, type, (unsigned)i);
        if (o && o->cpuset && hwloc_bitmap_intersects(o->cpuset, usable)) n++;
    }
    return n;
}

/* "0-3,8,10-11" for the workers' PUs (sorted run-length), truncated to fit. */
static void pu_list(const rlx_topology *t, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < t->n_workers && o + 16 < len;) {
        int j = i;
        while (j + 1 < t->n_workers && t->worker_pu[j + 1] == t->worker_pu[j] + 1) j++;
        int w = (j > i) ? snprintf(buf + o, len - o, "%s%d-%d", o ? "," : "", t->worker_pu[i],
                                   t->worker_pu[j])
                        : snprintf(buf + o, len - o, "%s%d", o ? "," : "", t->worker_pu[i]);
        if (w < 0) break;
        o += (size_t)w;
        i = j + 1;
    }
}

int rlx__topology_query(rlx_topology *out, int threads, const char *placement)
{
    if (!out) return RLX_ERR_INVALID;
    memset(out, 0, sizeof *out);
    out->struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_topology, summary);
    if (!placement || !*placement) placement = "cores";
    int by_core = strcmp(placement, "cores") == 0, by_pu = strcmp(placement, "pus") == 0;
    int unbound = strcmp(placement, "none") == 0;
    if (!by_core && !by_pu && !unbound) {
        snprintf(out->summary, sizeof out->summary,
                 "placement '%.32s' is not one of cores, pus, none", placement);
        return RLX_ERR_INVALID;
    }
    if (threads < 0) {
        snprintf(out->summary, sizeof out->summary, "threads %d is negative", threads);
        return RLX_ERR_INVALID;
    }
    pthread_once(&topo_once, topo_load);
    if (!topo_ok) {
        snprintf(out->summary, sizeof out->summary, "hwloc could not read the CPU topology");
        return RLX_ERR_DEVICE;
    }
    snprintf(out->placement, sizeof out->placement, "%s", placement);
    out->packages = count_usable(HWLOC_OBJ_PACKAGE);
    out->pus = hwloc_bitmap_weight(usable);
    out->numa_nodes = count_usable(HWLOC_OBJ_NUMANODE);
    out->cores = count_usable(HWLOC_OBJ_CORE);
    if (out->packages < 1) out->packages = 1;
    if (out->numa_nodes < 1) out->numa_nodes = 1;

    const int cap = (int)(sizeof out->worker_pu / sizeof out->worker_pu[0]);
    int n = 0;
    if (by_core && out->cores > 0) {
        /* the first usable PU of each core: SMT siblings stay idle */
        int total = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
        for (int i = 0; i < total && n < cap; i++) {
            hwloc_obj_t c = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, (unsigned)i);
            if (!c || !c->cpuset) continue;
            int pu = -1;
            hwloc_bitmap_foreach_begin(pu, c->cpuset) {
                if (hwloc_bitmap_isset(usable, (unsigned)pu)) break;
            }
            hwloc_bitmap_foreach_end();
            if (pu >= 0 && hwloc_bitmap_isset(usable, (unsigned)pu)) out->worker_pu[n++] = pu;
        }
    } else if (by_core || by_pu) {
        /* "pus", or a machine where hwloc reports no cores: one worker per PU */
        if (out->cores == 0) out->cores = out->pus;
        int pu;
        hwloc_bitmap_foreach_begin(pu, usable) {
            if (n < cap) out->worker_pu[n++] = pu;
        }
        hwloc_bitmap_foreach_end();
    }
    if (out->cores == 0) out->cores = out->pus;

    if (unbound) {
        n = threads > 0 ? threads : out->cores;
        if (n > cap) n = cap;
        for (int i = 0; i < n; i++) out->worker_pu[i] = -1;
    } else if (threads > 0 && threads < n) {
        n = threads;
    }
    out->n_workers = n;

    char pus[200];
    if (unbound)
        snprintf(pus, sizeof pus, "unbound");
    else {
        char list[190];
        pu_list(out, list, sizeof list);
        snprintf(pus, sizeof pus, "on PU%s %s", n == 1 ? "" : "s", list);
    }
    snprintf(out->summary, sizeof out->summary,
             "%d package%s, %d core%s, %d PU%s, %d NUMA node%s; placement %s: %d worker%s %s",
             out->packages, out->packages == 1 ? "" : "s", out->cores, out->cores == 1 ? "" : "s",
             out->pus, out->pus == 1 ? "" : "s", out->numa_nodes, out->numa_nodes == 1 ? "" : "s",
             out->placement, n, n == 1 ? "" : "s", pus);
    return RLX_OK;
}

int rlx__bind_thread(int pu_os_index)
{
    if (pu_os_index < 0) return 0; /* unbound placement */
    pthread_once(&topo_once, topo_load);
    if (!topo_ok) return RLX_ERR_DEVICE;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (!set) return RLX_ERR_NOMEM;
    hwloc_bitmap_only(set, (unsigned)pu_os_index);
    int rc = hwloc_set_cpubind(topo, set, HWLOC_CPUBIND_THREAD) == 0 ? 0 : RLX_ERR_DEVICE;
    hwloc_bitmap_free(set);
    return rc;
}
