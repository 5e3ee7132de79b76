/* Topology and placement through the host services (host->topology, host->bind_thread),
 * checked against the process's affinity mask and hwloc's own view of cores. */
#define _GNU_SOURCE
#include "rlx/rlx.h"
#include <check.h>
#include "testutil.h"
#include <hwloc.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

static const rlx_host_api *H(void) { return rlx_host_api_get(); }

static int in_mask(int pu)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
    return pu >= 0 && pu < CPU_SETSIZE && CPU_ISSET(pu, &set);
}

static int mask_count(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
    return CPU_COUNT(&set);
}

START_TEST(default_is_one_worker_per_core)
{
    rlx_topology t;
    ck_assert_int_eq(H()->topology(&t, 0, NULL), RLX_OK);
    ck_assert_uint_eq(t.struct_size, RLX_STRUCT_SIZE(rlx_topology, summary));
    ck_assert_str_eq(t.placement, "cores");
    ck_assert_int_ge(t.packages, 1);
    ck_assert_int_ge(t.numa_nodes, 1);
    ck_assert_int_ge(t.cores, 1);
    ck_assert_int_ge(t.pus, t.cores);
    ck_assert_int_le(t.pus, mask_count());
    ck_assert_int_eq(t.n_workers, t.cores);

    /* every worker on a usable PU of a different physical core */
    hwloc_topology_t topo;
    ck_assert_int_eq(hwloc_topology_init(&topo), 0);
    ck_assert_int_eq(hwloc_topology_load(topo), 0);
    hwloc_obj_t cores[256] = {0};
    for (int i = 0; i < t.n_workers; i++) {
        ck_assert_msg(in_mask(t.worker_pu[i]), "worker %d on PU %d outside the affinity mask", i,
                      t.worker_pu[i]);
        hwloc_obj_t pu = hwloc_get_pu_obj_by_os_index(topo, (unsigned)t.worker_pu[i]);
        ck_assert_ptr_nonnull(pu);
        cores[i] = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_CORE, pu);
        for (int j = 0; j < i; j++)
            ck_assert_msg(cores[j] != cores[i] || !cores[i], "workers %d and %d share a core", j, i);
    }
    hwloc_topology_destroy(topo);
    ck_assert_ptr_nonnull(strstr(t.summary, "placement cores:"));
    ck_assert_ptr_null(strchr(t.summary, '\n'));
}
END_TEST

START_TEST(pus_none_and_caps)
{
    rlx_topology t, c;
    ck_assert_int_eq(H()->topology(&c, 0, "cores"), RLX_OK);
    ck_assert_int_eq(H()->topology(&t, 0, "pus"), RLX_OK);
    ck_assert_str_eq(t.placement, "pus");
    ck_assert_int_eq(t.n_workers, t.pus);
    for (int i = 0; i < t.n_workers; i++) {
        ck_assert(in_mask(t.worker_pu[i]));
        if (i) ck_assert_int_gt(t.worker_pu[i], t.worker_pu[i - 1]);
    }

    ck_assert_int_eq(H()->topology(&t, 0, "none"), RLX_OK);
    ck_assert_int_eq(t.n_workers, c.cores);
    for (int i = 0; i < t.n_workers; i++) ck_assert_int_eq(t.worker_pu[i], -1);
    ck_assert_int_eq(H()->topology(&t, 5, "none"), RLX_OK);
    ck_assert_int_eq(t.n_workers, 5);
    ck_assert_ptr_nonnull(strstr(t.summary, "5 workers unbound"));

    ck_assert_int_eq(H()->topology(&t, 1, "cores"), RLX_OK);
    ck_assert_int_eq(t.n_workers, 1);
    ck_assert_int_eq(t.worker_pu[0], c.worker_pu[0]);
    ck_assert_int_eq(H()->topology(&t, 1000, "cores"), RLX_OK);
    ck_assert_int_eq(t.n_workers, c.cores); /* threads caps, never adds */
}
END_TEST

START_TEST(bad_arguments)
{
    rlx_topology t;
    ck_assert_int_eq(H()->topology(&t, 0, "sockets"), RLX_ERR_INVALID);
    ck_assert_str_eq(t.summary, "placement 'sockets' is not one of cores, pus, none");
    ck_assert_int_eq(H()->topology(&t, -2, "cores"), RLX_ERR_INVALID);
    ck_assert_str_eq(t.summary, "threads -2 is negative");
    ck_assert_int_eq(H()->topology(NULL, 0, "cores"), RLX_ERR_INVALID);
}
END_TEST

/* Cores outside the affinity mask (taskset) are excluded. Needs a fresh process, which
 * Check's fork gives; the topology is read once per process. */
START_TEST(affinity_mask_respected)
{
    const char *fork_env = getenv("CK_FORK");
    if (fork_env && strcmp(fork_env, "no") == 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
    int last = -1;
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &set)) last = i;
    ck_assert_int_ge(last, 0);
    CPU_ZERO(&set);
    CPU_SET(last, &set);
    ck_assert_int_eq(sched_setaffinity(0, sizeof set, &set), 0);
    rlx_topology t;
    ck_assert_int_eq(H()->topology(&t, 0, "cores"), RLX_OK);
    ck_assert_int_eq(t.pus, 1);
    ck_assert_int_eq(t.cores, 1);
    ck_assert_int_eq(t.n_workers, 1);
    ck_assert_int_eq(t.worker_pu[0], last);
    ck_assert_int_eq(H()->topology(&t, 0, "pus"), RLX_OK);
    ck_assert_int_eq(t.n_workers, 1);
}
END_TEST

START_TEST(bind_thread)
{
    rlx_topology t;
    ck_assert_int_eq(H()->topology(&t, 0, "cores"), RLX_OK);
    int pu = t.worker_pu[t.n_workers - 1];
    ck_assert_int_eq(H()->bind_thread(pu), 0);
    cpu_set_t set;
    CPU_ZERO(&set);
    ck_assert_int_eq(sched_getaffinity(0, sizeof set, &set), 0);
    ck_assert_int_eq(CPU_COUNT(&set), 1);
    ck_assert(CPU_ISSET(pu, &set));
    ck_assert_int_eq(H()->bind_thread(-1), 0); /* unbound: nothing to do */
    ck_assert_int_ne(H()->bind_thread(1 << 20), 0);
    /* a query after binding still sees the whole machine (read once, before) */
    rlx_topology t2;
    ck_assert_int_eq(H()->topology(&t2, 0, "cores"), RLX_OK);
    ck_assert_int_eq(t2.n_workers, t.n_workers);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("topology");
    TCase *tc = tcase_create("topology");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, default_is_one_worker_per_core);
    tcase_add_test(tc, pus_none_and_caps);
    tcase_add_test(tc, bad_arguments);
    tcase_add_test(tc, affinity_mask_respected);
    tcase_add_test(tc, bind_thread);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
