/* rlx-blocks-bert: BERT (BertModel) embeddings, encoder layer and pooler. */
#include "bert_blocks.h"

static const rlx_block *const blocks[] = {
    &blk_bert_embeddings,
    &blk_bert_encoder_layer,
    &blk_bert_pooler,
};

static const rlx_plugin_desc desc = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_plugin_desc, n_archs),
    .abi_major = RLX_ABI_MAJOR,
    .abi_minor = RLX_ABI_MINOR,
    .name = "blocks-bert",
    .version = "0.1.0",
    .summary = "BERT encoder blocks: embeddings + additive mask, post-norm layer, pooler",
    .blocks = blocks,
    .n_blocks = sizeof blocks / sizeof blocks[0],
};

RLX_EXPORT const rlx_plugin_desc *rlx_plugin_init(const rlx_host_api *host);

RLX_EXPORT const rlx_plugin_desc *rlx_plugin_init(const rlx_host_api *host)
{
    if (!host || host->abi_major != RLX_ABI_MAJOR ||
        host->struct_size < RLX_STRUCT_SIZE(rlx_host_api, flow_repeat_end))
        return NULL;
    return &desc;
}
