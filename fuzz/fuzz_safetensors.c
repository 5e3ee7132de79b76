/* libFuzzer: the safetensors header parser on arbitrary bytes. */
#include "base/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    rlx_weights *w = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    if (rlx__st_parse(data, size, "fuzz.safetensors", &w, &d) == RLX_OK) {
        /* touch what a loader would: every tensor, converted */
        for (size_t i = 0; i < rlx_weights_count(w); i++) {
            const rlx_tensor_info *t = rlx_weights_at(w, i);
            if (rlx_weights_find(w, t->name) == NULL) __builtin_trap();
            float tmp[16];
            int64_t n = rlx_shape_numel(&t->shape);
            if (n > 0 && n <= 16) rlx_weights_read(t, RLX_F32, tmp, (size_t)n, &d);
        }
        rlx_weights_close(w);
    } else if (d.msg[0] == 0) {
        __builtin_trap(); /* a failure must say why */
    }
    return 0;
}
