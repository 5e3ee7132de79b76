/* Flow -> graph: declares the flow's inputs, then runs every stage's emitter in order
 * (repeats unrolled with {i}, conditions evaluated for the phase and config). */
#include "build/emit.h"
#include "build/flow.h"
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* 1: flow input k was left out by the caller (an optional input) */
static int input_absent(const rg_build_env *env, uint32_t k)
{
    return env->variant && k < RG_VARIANT_INPUTS && (env->variant->absent >> k & 1u);
}

/* "input:NAME": the value of a build-time scalar input the caller gave */
static int input_scalar(const rg_build_env *env, const char *name, double *out)
{
    for (uint32_t k = 0; env->flow && k < env->flow->n_inputs && k < RG_VARIANT_INPUTS; k++) {
        const rg_flow_input *fi = &env->flow->inputs[k];
        if (strcmp(fi->name, name) || !rg_flow_input_scalar(fi) || !env->variant || input_absent(env, k)) continue;
        *out = (double)env->variant->scalar[k];
        return 0;
    }
    return RLX_ERR_NOT_FOUND;
}

int rg_config_lookup(const rg_build_env *env, const char *key, double *out)
{
    const rlx_model_config *c = env->cfg;
    if (!strncmp(key, "input:", 6)) return input_scalar(env, key + 6, out);
    /* fields whose defaults the config loader applied, so a missing key still answers */
    if (!strcmp(key, "tie_word_embeddings")) return *out = c->tie_word_embeddings, 0;
    if (!strcmp(key, "attention_bias")) return *out = c->attention_bias, 0;
    if (!strcmp(key, "mlp_bias")) return *out = c->mlp_bias, 0;
    if (!strcmp(key, "num_hidden_layers") || !strcmp(key, "num_layers"))
        return *out = (double)c->num_layers, 0;
    if (env->config && rlx_config_number(env->config, key, out) == 0) return 0;
    return RLX_ERR_NOT_FOUND;
}

/* *holds: whether the `when` condition holds; fails for layer outside any repeat */
static int eval_cond(rlx_ctx *c, const char *root, const char *cond, int *holds)
{
    rg_cond k;
    if (rg_flow_cond_parse(cond, &k))
        return rlx_diag_set(c->d, RLX_ERR_INVALID, "flow %s: bad condition \"%s\" (%s)", root,
                            cond, RG_COND_FORMS);
    int v = 0;
    double x = 0;
    switch (k.kind) {
    case FC_PHASE: v = c->phase == k.phase; break;
    case FC_CONFIG: v = rg_config_lookup(c->env, k.key, &x) == 0 && x != 0; break;
    case FC_LAYER:
        if (c->rep < 0)
            return rlx_diag_set(c->d, RLX_ERR_INVALID,
                                "flow %s: when \"%s\" is outside any repeat (layer is the innermost "
                                "repeat's index)", root, cond);
        v = k.mod ? c->rep % k.mod == k.lo : c->rep >= k.lo && (k.hi < 0 || c->rep <= k.hi);
        break;
    }
    *holds = v != k.neg;
    return 0;
}

typedef struct walk {
    rlx_ctx *c;
    uint32_t stage;
    const char *root;   /* the flow's name, for messages */
    const char *origin; /* its file, or NULL */
} walk;

static int run_items(walk *w, const rlx_flow *f);

static int run_stage(walk *w, const rg_flow_item *it)
{
    rlx_ctx *c = w->c;
    const rlx_host_api *host = rlx_host_api_get();
    if (++w->stage > RG_FLOW_MAX_STAGES)
        return rlx_diag_set(c->d, RLX_ERR_INVALID, "%s%sflow %s: unrolls to more than %d stages (nested repeats)",
                            w->origin ? w->origin : "", w->origin ? ": " : "", w->root, RG_FLOW_MAX_STAGES);
    if (c->rep >= 0)
        snprintf(c->where, sizeof c->where, "stage %u (%s, i=%lld)", w->stage, it->name, (long long)c->rep);
    else
        snprintf(c->where, sizeof c->where, "stage %u (%s)", w->stage, it->name);
    int rc;
    if (it->kind == FI_CUSTOM) {
        c->params = NULL;
        rc = it->fn(c, host, it->user);
    } else {
        const rlx_block *b = c->env->registry ? rlx_registry_block(c->env->registry, it->name) : NULL;
        if (!b) return rg_ctx_fail(c, "no block named \"%s\" in the loaded plugins", it->name);
        c->params = it->params;
        rc = b->emit(c, host);
    }
    c->params = NULL;
    if (c->failed) return c->failed;
    if (rc) return rg_ctx_fail(c, "the stage failed (status %d) without saying why", rc);
    return 0;
}

static int run_items(walk *w, const rlx_flow *f)
{
    rlx_ctx *c = w->c;
    for (uint32_t i = 0; i < f->n_items; i++) {
        const rg_flow_item *it = &f->items[i];
        int rc = 0;
        switch (it->kind) {
        case FI_STAGE:
        case FI_CUSTOM: rc = run_stage(w, it); break;
        case FI_SEQ: rc = run_items(w, it->body); break;
        case FI_WHEN:
        {
            int holds = 0;
            rc = eval_cond(c, w->root, it->name, &holds);
            if (!rc && holds) rc = run_items(w, it->body);
            break;
        }
        case FI_REPEAT: {
            int64_t n = it->n;
            if (it->n_key) {
                double v;
                if (rg_config_lookup(c->env, it->n_key, &v) != 0 || v < 0)
                    return rlx_diag_set(c->d, RLX_ERR_INVALID,
                                        "%s%sflow %s: repeat count config:%s is not a number in the model config",
                                        w->origin ? w->origin : "", w->origin ? ": " : "", w->root, it->n_key);
                if (v > RG_FLOW_MAX_REPEAT)
                    return rlx_diag_set(c->d, RLX_ERR_INVALID,
                                        "%s%sflow %s: repeat count config:%s is %g, more than %d, the most a flow "
                                        "repeats", w->origin ? w->origin : "", w->origin ? ": " : "", w->root,
                                        it->n_key, v, RG_FLOW_MAX_REPEAT);
                n = (int64_t)v;
            }
            int64_t saved = c->rep;
            for (int64_t k = 0; k < n && !rc; k++) {
                c->rep = k;
                rc = run_items(w, it->body);
            }
            c->rep = saved;
            break;
        }
        }
        if (rc) return rc;
    }
    return 0;
}

int rg_build(const rg_build_env *env, const rlx_flow *f, int phase, int64_t T, int64_t ctx, rg_graph **out,
             rlx_diag *d)
{
    *out = NULL;
    if (f->err[0]) return rlx_diag_set(d, RLX_ERR_INVALID, "%s", f->err);
    rg_build_env own = *env; /* with the flow the variant's input bits refer to */
    own.flow = f;
    env = &own;
    rlx_ctx c;
    memset(&c, 0, sizeof c);
    c.env = env;
    c.phase = phase;
    c.T = T;
    c.ctx_len = ctx;
    c.rep = -1;
    c.d = d;
    c.batch = env->variant ? env->variant->batch : 0;
    c.batch_slots = -1;
    c.g = rg_new();
    if (!c.g) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    snprintf(c.where, sizeof c.where, "flow %s", f->name);
    const rlx_host_api *host = rlx_host_api_get();
    int rc = 0;
    for (uint32_t i = 0; i < f->n_inputs && !rc; i++) {
        const rg_flow_input *in = &f->inputs[i];
        rlx_shape s = rg_shape(in->ndim, in->dims);
        if (input_absent(env, i)) continue; /* its slot stays unset */
        if (c.batch && !strcmp(in->name, "pos")) s.dims[0] = -1; /* each row's own position: [T] */
        int32_t sv = env->variant && i < RG_VARIANT_INPUTS ? (int32_t)env->variant->scalar[i] : 0;
        int32_t v = rg_flow_input_scalar(in) ? host->emit_const(&c, RLX_I32, &s, &sv)
                                             : host->emit_input(&c, in->name, in->dtype, &s);
        if (v < 0 || rg_map_set(&c.slots, in->name, v)) rc = c.failed ? c.failed : RLX_ERR_NOMEM;
    }
    if (!rc && c.batch) {
        rlx_shape bs = {1, {T}};
        if ((c.batch_slots = host->emit_input(&c, "batch_slots", RLX_I32, &bs)) < 0) rc = c.failed ? c.failed : RLX_ERR_NOMEM;
    }
    if (!rc) {
        walk w = {&c, 0, f->name, f->origin};
        rc = run_items(&w, f);
    }
    if (!rc && c.g->n_outputs == 0)
        rc = rlx_diag_set(d, RLX_ERR_INVALID, "flow %s: no stage emitted an output", f->name);
    for (uint32_t i = 0; i < c.n_strs; i++) free(c.strs[i]);
    free(c.strs);
    rg_map_free(&c.slots);
    rg_map_free(&c.weights);
    rg_map_free(&c.states);
    rg_map_free(&c.inputs);
    if (rc) {
        if (d && !d->code) rlx_diag_set(d, rc, "flow %s: build failed", f->name);
        rg_free(c.g);
        return rc;
    }
    *out = c.g;
    return 0;
}
