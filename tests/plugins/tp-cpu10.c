/* An old backend plugin: the CPU backend re-exported as "cpu10" through the frozen 1.0
 * headers, so its rlx_backend ends at teardown. The bytes after it hold a function that
 * aborts: a host that read the 1.2 members (mem_info, measure_ceilings) of a struct this
 * small would call it. The real CPU plugin is $RLX_TP_CPU_PLUGIN. */
#include "tp.h"
#include <dlfcn.h>
#include <stdlib.h>

static void trap(void) { abort(); }

static struct {
    rlx_backend be;
    void (*past_the_end[2])(void);
} old = {.past_the_end = {trap, trap}};

static const rlx_backend *const backends[] = {&old.be};
static const rlx_plugin_desc desc = {TP_DESC_SIZE, RLX_ABI_MAJOR, 0, "tp-cpu10", "0.1",
                                     "the CPU backend as a 1.0 plugin", NULL, 0, backends, 1, NULL, 0};

TP_EXPORT
{
    const char *path = getenv("RLX_TP_CPU_PLUGIN");
    void *h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    void *sym = h ? dlsym(h, "rlx_plugin_init") : NULL;
    rlx_plugin_init_fn init;
    memcpy(&init, &sym, sizeof init);
    const rlx_plugin_desc *cpu = sym ? init(host) : NULL;
    if (!cpu || cpu->n_backends != 1) return NULL;
    memcpy(&old.be, cpu->backends[0], sizeof old.be); /* the 1.0 fields only */
    old.be.struct_size = (uint32_t)sizeof old.be;
    old.be.name = "cpu10";
    return &desc;
}
