/* config.json -> the arch plugin that owns its model type (or diffusers class), which
 * fills the description: the core reads no family's keys. */
#include "base/internal.h"
#include <stdio.h>
#include <string.h>

/* "bert, flux (FluxTransformer2DModel), llama, …": what the loaded arch plugins claim */
static void installed_types(const rlx_registry *r, char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = 0;
    for (size_t i = 0; i < rlx_registry_count(r) && o < cap; i++) {
        const rlx_plugin_info *pi = rlx_registry_plugin(r, i);
        if (!pi->loaded) continue;
        for (uint32_t k = 0; k < pi->desc->n_archs; k++) {
            const rlx_arch *a = pi->desc->archs[k];
            for (const char *const *t = a->model_types; *t && o < cap; t++) {
                int w = snprintf(buf + o, cap - o, "%s%s", o ? ", " : "", *t);
                o += w > 0 ? (size_t)w : 0;
            }
        }
    }
    if (!buf[0]) snprintf(buf, cap, "none");
}

RLX_API int rlx_config_configure(rlx_config *c, const rlx_registry *r, const rlx_arch **arch, rlx_diag *d)
{
    if (arch) *arch = NULL;
    if (!c || !r) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_config_configure: no config or registry");
    rlx_model_config *mc = rlx__config_model_mut(c);
    const int diffusers = !mc->model_type[0];
    const rlx_arch *a = diffusers ? rlx_registry_arch_for_class(r, mc->architecture)
                                  : rlx_registry_arch_for(r, mc->model_type);
    if (!a) {
        char types[512];
        installed_types(r, types, sizeof types);
        if (diffusers)
            return rlx_diag_set(d, RLX_ERR_UNSUPPORTED,
                                "%s: no arch plugin handles _class_name \"%s\" (installed: %s)", rlx__config_origin(c),
                                mc->architecture, types);
        return rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "%s: no arch plugin handles model_type \"%s\" (installed: %s)",
                            rlx__config_origin(c), mc->model_type, types);
    }
    rlx_model_config fresh = *mc; /* what the host read; the arch fills the rest */
    int rc;
    if (a->struct_size >= RLX_STRUCT_SIZE(rlx_arch, configure) && a->configure) {
        rc = a->configure(c, &fresh, rlx_host_api_get(), d);
        if (rc && d && !d->code) rlx_diag_set(d, rc, "%s: arch %s: configure failed", rlx__config_origin(c), a->name);
    } else {
        /* a 1.0 arch: the common keys, no family defaults */
        static const rlx_config_defaults none = {sizeof none, 0, 0, 0, 0, 0, 0, 0, 0, NULL, 1e-6, 0,
                                                 NULL, NULL, 10000.0, -1, -1};
        rc = rlx__config_read_common(c, &none, &fresh, d);
    }
    if (rc) return rc;
    if (fresh.num_layers < 0 || fresh.num_layers > RLX_MAX_LAYERS)
        return rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "%s: arch %s: %lld layers, at most %d supported", rlx__config_origin(c),
                            a->name, (long long)fresh.num_layers, RLX_MAX_LAYERS);
    /* the type and class stay what the file says (a diffusers arch names its type) */
    if (!diffusers) memcpy(fresh.model_type, mc->model_type, sizeof fresh.model_type);
    else memcpy(fresh.architecture, mc->architecture, sizeof fresh.architecture);
    fresh.struct_size = mc->struct_size;
    *mc = fresh;
    if (arch) *arch = a;
    return 0;
}

RLX_API int rlx_config_load(const char *path, const rlx_registry *r, rlx_config **out, rlx_diag *d)
{
    int rc = rlx_config_open(path, out, d);
    if (rc) return rc;
    rc = rlx_config_configure(*out, r, NULL, d);
    if (rc) {
        rlx_config_free(*out);
        *out = NULL;
    }
    return rc;
}

