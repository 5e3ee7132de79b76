/* The services table handed to every plugin at init. Areas fill their own parts so the
 * table has one home and one definition of its layout. */
#include "base/internal.h"
#include <pthread.h>

static rlx_host_api host_table;
static pthread_once_t host_once = PTHREAD_ONCE_INIT;

static void host_init(void)
{
    host_table.struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_host_api, flow_input_fill);
    host_table.abi_major = RLX_ABI_MAJOR;
    host_table.abi_minor = RLX_ABI_MINOR;
    rlx__host_fill_core(&host_table);
    rlx__host_fill_emit(&host_table);
    rlx__host_fill_config(&host_table);
}

RLX_API const rlx_host_api *rlx_host_api_get(void)
{
    pthread_once(&host_once, host_init);
    return &host_table;
}
