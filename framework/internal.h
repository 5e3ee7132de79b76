/* Internal declarations shared by librlx's own files (never installed). */
#ifndef RLX_INTERNAL_H
#define RLX_INTERNAL_H
#include "rlx/rlx.h"

#ifdef RLX_BUILDING_LIB
#define RLX_API __attribute__((visibility("default")))
#else
#define RLX_API
#endif

/* host.c: host services table; each area fills its own part */
void rlx__host_log(int level, const char *who, const char *fmt, ...) RLX_PRINTF(3, 4);
void rlx__host_fill_core(rlx_host_api *h);   /* core.am: log, diag, topology, bind */
void rlx__host_fill_emit(rlx_host_api *h);   /* graph.am: emit_*, slots, params, flow_* */

/* topology.c */
int rlx__topology_query(rlx_topology *out, int threads, const char *placement);
int rlx__bind_thread(int pu_os_index);

#endif
