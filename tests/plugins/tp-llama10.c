/* A block and an arch recipe built against the frozen ABI 1.0 headers (tp.h): LLaMA's
 * flow under model_type "tp10_llama", its final norm a 1.0 block of its own. The 1.1
 * host must run it end to end: it adds the session inputs a 1.0 recipe could not declare
 * and reads the common config keys for an arch without configure. */
#include "tp.h"

/* hidden = rms_norm(hidden) * model.norm.weight, through 1.0 host services only */
static int final_norm10(rlx_ctx *c, const rlx_host_api *h)
{
    const rlx_model_config *cfg = h->model_config(c);
    rlx_shape s = {1, {cfg->hidden_size}};
    int32_t in[2] = {h->slot_get(c, "hidden"), h->emit_weight(c, "model.norm.weight", &s)};
    rlx_attr eps[1] = {RLX_ATTR_F("eps", cfg->norm_eps)};
    int32_t y = h->emit_op(c, "rlx.rms_norm", in, 2, eps, 1);
    return y < 0 ? RLX_ERR_INVALID : h->slot_set(c, "hidden", y);
}

static int build(rlx_flow *f, int phase, const rlx_model_config *c, const rlx_host_api *h, rlx_diag *d)
{
    (void)phase;
    (void)d;
    if (h->flow_stage(f, "token_embed", "{}") || h->flow_stage(f, "rope_tables", "{}") ||
        h->flow_repeat_begin(f, c->num_layers) ||
        h->flow_stage(f, "llama.decoder_layer", "{\"prefix\":\"model.layers.{i}.\",\"cache\":\"cache.{i}\"}") ||
        h->flow_repeat_end(f) || h->flow_stage(f, "tp10.final_norm", "{}") || h->flow_stage(f, "lm_head", "{}"))
        return RLX_ERR_INTERNAL;
    return 0;
}

static const rlx_block blk = {(uint32_t)RLX_STRUCT_SIZE(rlx_block, emit), "tp10.final_norm",
                              "RMSNorm with model.norm.weight (ABI 1.0)", "", final_norm10};
static const rlx_block *const blocks[] = {&blk};
static const char *const types[] = {"tp10_llama", NULL};
static const rlx_arch arch = {(uint32_t)RLX_STRUCT_SIZE(rlx_arch, phases), "tp10-llama", types, NULL, NULL,
                              build, 0};
static const rlx_arch *const archs[] = {&arch};
static const rlx_plugin_desc desc = {TP_DESC_SIZE, 1, 0, "tp-llama10", "0.1", "ABI 1.0 recipe and block",
                                     blocks, 1, NULL, 0, archs, 1};
TP_EXPORT { (void)host; return &desc; }
