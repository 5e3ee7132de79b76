/* libFuzzer: config.json parsing (both transformers spellings, diffusers). */
#include "base/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rlx_config *c = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    if (rlx_config_parse((const char *)data, size, "fuzz/config.json", &c, &d) == RLX_OK) {
        double x;
        rlx_config_number(c, "vision_config.hidden_size", &x);
        rlx_config_number(c, "axes_dims_rope.1", &x);
        const rlx_model_config *mc = rlx_config_model(c);
        if (mc->num_layers > RLX_MAX_LAYERS || mc->n_eos > RLX_MAX_EOS) __builtin_trap();
        rlx_config_free(c);
    } else if (d.msg[0] == 0) {
        __builtin_trap();
    }
    return 0;
}
