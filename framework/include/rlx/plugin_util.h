/* rlx/plugin_util.h — installed helpers for plugin authors (part of the ABI, versioned
 * with it): the descriptor and the exported rlx_plugin_init that every block and arch
 * plugin carries, in one place. Built only against rlx/plugin.h: plugins never link
 * librlx. Each macro expands to complete definitions; use it at file scope with no
 * trailing ';'. (Backends keep their own entry: they also remember the host table.)
 *
 *   static const rlx_arch arch = {...};
 *   RLX_ARCH_PLUGIN("arch-mistral", "Mistral recipe", arch)
 */
#ifndef RLX_PLUGIN_UTIL_H
#define RLX_PLUGIN_UTIL_H
#include "rlx/plugin.h"

/* The last rlx_host_api field the plugin calls (default: the newest, ABI 1.1's); a
 * plugin that must run on older hosts names an earlier one before including this
 * header, and a host without that field is then refused. */
#ifndef RLX_PLUGIN_HOST_NEEDS
#define RLX_PLUGIN_HOST_NEEDS flow_input_fill
#endif

/* The host must speak our ABI major and offer the services the plugin calls. */
#define RLX_PLUGIN_DEFINE(...)                                                                \
    static const rlx_plugin_desc rlx_plugin_desc_ = {                                         \
        .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_plugin_desc, n_archs),                   \
        .abi_major = RLX_ABI_MAJOR,                                                           \
        .abi_minor = RLX_ABI_MINOR,                                                           \
        .version = "0.1.0",                                                                   \
        __VA_ARGS__};                                                                         \
    RLX_EXPORT const rlx_plugin_desc *rlx_plugin_init(const rlx_host_api *host);              \
    RLX_EXPORT const rlx_plugin_desc *rlx_plugin_init(const rlx_host_api *host)               \
    {                                                                                         \
        if (!host || host->abi_major != RLX_ABI_MAJOR ||                                      \
            host->struct_size < RLX_STRUCT_SIZE(rlx_host_api, RLX_PLUGIN_HOST_NEEDS))         \
            return NULL;                                                                      \
        return &rlx_plugin_desc_;                                                             \
    }

/* A plugin offering the blocks of the array blocks_ (of const rlx_block *). */
#define RLX_BLOCKS_PLUGIN(name_, summary_, blocks_)                                           \
    RLX_PLUGIN_DEFINE(.name = (name_), .summary = (summary_), .blocks = (blocks_),            \
                      .n_blocks = sizeof(blocks_) / sizeof((blocks_)[0]))

/* A plugin offering the one recipe arch_ (an rlx_arch). */
#define RLX_ARCH_PLUGIN(name_, summary_, arch_)                                               \
    static const rlx_arch *const rlx_plugin_archs_[] = {&(arch_)};                            \
    RLX_PLUGIN_DEFINE(.name = (name_), .summary = (summary_), .archs = rlx_plugin_archs_,     \
                      .n_archs = 1)

#endif
