/* Placeholder until the core area lands. */
#include "internal.h"
void rlx__host_fill_core(rlx_host_api *h) { (void)h; }
