/* An rlx block plugin built outside the rlx tree, against the installed headers only.
 *
 * Block "example.scale": multiplies the "hidden" slot by the stage parameter "factor"
 * (default 1.0), e.g. {"block":"example.scale","params":{"factor":0.5}} in a flow.
 * It talks to rlx only through the host services table it is handed at init. */
#include <rlx/plugin.h>

static int scale_emit(rlx_ctx *c, const rlx_host_api *host)
{
    int32_t x = host->slot_get(c, "hidden");
    if (x < 0) return host->fail(c, "example.scale: slot 'hidden' is not set");
    rlx_attr attrs[] = {RLX_ATTR_F("scale", host->param_float(c, "factor", 1.0))};
    int32_t y = host->emit_op(c, "rlx.scale", &x, 1, attrs, 1);
    if (y < 0) return RLX_ERR_INVALID; /* the host already said why */
    return host->slot_set(c, "hidden", y);
}

static const rlx_block scale_block = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_block, emit),
    "example.scale",
    "hidden <- hidden * factor",
    "factor: float (default 1.0)",
    scale_emit,
};

static const rlx_block *const blocks[] = {&scale_block};

static const rlx_plugin_desc desc = {
    (uint32_t)RLX_STRUCT_SIZE(rlx_plugin_desc, n_archs),
    RLX_ABI_MAJOR,
    RLX_ABI_MINOR,
    "example-blocks",
    "1.0.0",
    "an out-of-tree block plugin",
    blocks, 1,
    NULL, 0,
    NULL, 0,
};

RLX_EXPORT const rlx_plugin_desc *rlx_plugin_init(const rlx_host_api *host);

RLX_EXPORT const rlx_plugin_desc *rlx_plugin_init(const rlx_host_api *host)
{
    /* the host table must be of our major and large enough for what we call */
    if (!host || host->abi_major != RLX_ABI_MAJOR ||
        host->struct_size < RLX_STRUCT_SIZE(rlx_host_api, fail))
        return NULL;
    return &desc;
}
