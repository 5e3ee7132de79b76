/* Internal declarations shared by librlx's own files (never installed). */
#ifndef RLX_INTERNAL_H
#define RLX_INTERNAL_H
#include "rlx/rlx.h"

#ifdef RLX_BUILDING_LIB
#define RLX_API __attribute__((visibility("default")))
#else
#define RLX_API
#endif

/* host.c: host services table; each part of the core fills its own entries */
void rlx__host_log(int level, const char *who, const char *fmt, ...) RLX_PRINTF(3, 4);
void rlx__host_fill_core(rlx_host_api *h);   /* base/: log, diag, topology, bind */
void rlx__host_fill_config(rlx_host_api *h); /* hf/config.c: config_* */
/* hf/config.c for hf/config_arch.c */
int rlx__config_read_common(const rlx_config *c, const rlx_config_defaults *df, rlx_model_config *mc,
                            rlx_diag *d);
rlx_model_config *rlx__config_model_mut(rlx_config *c);
const char *rlx__config_origin(const rlx_config *c);
void rlx__host_fill_emit(rlx_host_api *h);   /* graph.am: emit_*, slots, params, flow_* */

/* mem.c: MemAvailable, the cgroup v2 limit and RLX_MEM_LIMIT (bytes, K/M/G/T), the
 * least of them; UINT64_MAX when none is known. */
uint64_t rlx__mem_available(void);
/* "<what>: needs X GiB, Y GiB available" (RLX_ERR_NOMEM) when bytes do not fit. */
int rlx__mem_check(const char *what, uint64_t bytes, rlx_diag *d);

/* topology.c */
int rlx__topology_query(rlx_topology *out, int threads, const char *placement);
int rlx__bind_thread(int pu_os_index);

/* ---- registry.c ---- */
/* 1 when this librlx is the one in its build tree (an uninstalled program run through
 * libtool's wrapper): look for plugins/profiles in the build/source tree, not the
 * installed folders. RLX_BUILD_PLUGIN_PATH and RLX_BUILD_PROFILE_DIR (srcdir/profiles)
 * are defined for librlx's sources by framework/core.am. */
int rlx__running_uninstalled(void);


/* ---- files: weights, config, profiles ---- */
struct json_t; /* jansson, kept out of every other area's includes */
struct stat;
/* Opens a file for reading without blocking on a FIFO or device; refuses anything but
 * a regular file after links ("x: a FIFO, not a regular file"). fd is blocking then. */
int rlx__open_regular(const char *path, int *fd, struct stat *st, rlx_diag *d);
/* Reads a whole file of at most max_bytes (NUL-terminated copy). */
int rlx__read_small_file(const char *path, size_t max_bytes, char **out, size_t *len, rlx_diag *d);
/* jansson with duplicate keys rejected; error names origin, line and column. */
int rlx__json_parse(const char *buf, size_t len, const char *origin, struct json_t **out,
                    rlx_diag *d);
const char *rlx__json_type_name(const struct json_t *v); /* "a string", "an object", ... */
/* Parses a safetensors image held in memory (not owned; must outlive the result). */
/* the file name a tensor comes from, or the checkpoint's when t is NULL (for messages) */
const char *rlx__weights_origin(const rlx_weights *w, const rlx_tensor_info *t);
int rlx__st_parse(const void *buf, size_t len, const char *origin, rlx_weights **out, rlx_diag *d);
#define RLX__MAX_JSON_FILE (100u << 20) /* configs, indexes and headers: 100 MB */

#endif
