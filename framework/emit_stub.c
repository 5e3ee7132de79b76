/* Placeholder until the graph area lands: no emission services yet. */
#include "internal.h"
void rlx__host_fill_emit(rlx_host_api *h) { (void)h; }
