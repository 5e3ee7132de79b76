/* The compile pipeline for one (phase, sequence length, context length): build the
 * flow, run the profile's passes, legalize for the backend, schedule, plan the arena,
 * hand the program to the backend. Results are cached on the model. */
#include "runtime/exec.h"
#include <stdlib.h>
#include <string.h>

static int passes(rlx_model *m, rg_exec *e, rlx_diag *d)
{
    const rlx_profile *pr = &m->profile[e->phase == RLX_PHASE_DECODE ? 1 : 0];
    const char *policy = m->policy[e->phase == RLX_PHASE_DECODE ? 1 : 0];
    rg_graph *g = e->g;
    e->stats.built_nodes = g->n_nodes;
    int rc = rg_pass_partition(g, m->tp_rank, m->tp_ranks, m->tp_group, d);
    if (!rc && e->variant.last_row) rc = rg_pass_last_row(g, "logits", e->T, d);
    if (!rc && e->variant.greedy) rc = rg_pass_greedy(g, e->ctx, d);
    if (rc) return rc;
    if (rg_pass_outputs(g)) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    if (pr->passes.constant_folding && rg_pass_fold(g, &e->stats))
        return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    if (!pr->fusion.skip && !strcmp(policy, "fusable") && rg_pass_fuse(g, &e->stats))
        return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    if (pr->passes.dce) rg_pass_dce(g, &e->stats);
    if (pr->fusion.assert_clean && (rc = rg_pass_assert_clean(g, m->be, d))) return rc;
    /* profile backend.cpu.unfuse_regions: decompose composites the CPU kernels fuse */
    int unfuse = pr->backend.cpu.unfuse_regions && !strcmp(m->be->name, "cpu");
    rc = rg_pass_precision(g, pr, &e->stats, d);
    if (!rc) rc = rg_pass_f32_outputs(g, &e->stats, d);
    if (!rc) rc = rg_pass_casts(g, m->be, 0, &e->stats, d);
    if (!rc) rc = rg_legalize(g, m->be, unfuse, &e->stats, d);
    if (!rc) rc = rg_pass_casts(g, m->be, 1, &e->stats, d);
    if (rc) return rc;
    if (pr->passes.dce) rg_pass_dce(g, &e->stats);
    return rg_schedule(g, d);
}

/* weight value v of the program, or NULL when v is something else */
static const rg_value *weight_of(const rg_exec *e, int32_t v)
{
    const rg_plan *p = &e->plan;
    if (v < 0 || (uint32_t)v >= p->n_values || p->values[v].kind != RLX_VALUE_WEIGHT) return NULL;
    return &e->g->values[p->p2g[v]];
}

/* A device backend gets the weights this program binds first in one block, in the order
 * its nodes read them: one allocation instead of hundreds, and the weights of a run of
 * nodes (q, k, v of one x) lie side by side, so a backend may read them as one matrix. */
static int bind_weights_in_order(rlx_model *m, rg_exec *e, rlx_diag *d)
{
    const rg_plan *p = &e->plan;
    uint8_t *seen = calloc(p->n_values + 1, 1);
    if (!seen) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    size_t need = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (uint32_t n = 0; n < p->n_nodes; n++)
            for (uint32_t k = 0; k < p->nodes[n].n_inputs; k++) {
                int32_t v = p->nodes[n].inputs[k];
                const rg_value *gv = weight_of(e, v);
                if (!gv || seen[v] == pass + 1) continue;
                seen[v] = (uint8_t)(pass + 1);
                const rlx_value_desc *vd = &p->values[v];
                if (pass == 0) {
                    /* a value bound already, or another value of the same tensor counted */
                    int dup = rg_model_weight_bound(m, gv->name, vd->dtype, gv->split, gv->split_lo, gv->split_hi);
                    for (uint32_t u = 0; u < p->n_values && !dup; u++) {
                        const rg_value *gu = seen[u] == 1 && u != (uint32_t)v ? weight_of(e, (int32_t)u) : NULL;
                        dup = gu && p->values[u].dtype == vd->dtype && gu->split == gv->split &&
                              gu->split_lo == gv->split_lo && gu->split_hi == gv->split_hi && !strcmp(gu->name, gv->name);
                    }
                    size_t bytes = (size_t)rlx_shape_numel(&vd->shape) * rlx_dtype_size(vd->dtype);
                    if (!dup) need += (bytes + RG_WEIGHT_ALIGN - 1) & ~(RG_WEIGHT_ALIGN - 1);
                } else {
                    const rg_weight *w;
                    int rc = rg_model_weight_part(m, gv->name, vd->dtype, gv->split, gv->split_lo, gv->split_hi, &w, d);
                    if (rc) {
                        free(seen);
                        m->blk_cur = m->blk_end = NULL;
                        return rc;
                    }
                }
            }
        if (pass == 0) rg_model_weight_block(m, need);
    }
    free(seen);
    m->blk_cur = m->blk_end = NULL; /* what is left of the block stays unused */
    return 0;
}

/* weights, constants and IO staging buffers: everything fixed for this program */
static int bind_fixed(rlx_model *m, rg_exec *e, rlx_diag *d)
{
    const rg_plan *p = &e->plan;
    int host = (m->be->flags & RLX_BACKEND_HOST_MEMORY) != 0;
    if (!host) {
        int rc = bind_weights_in_order(m, e, d);
        if (rc) return rc;
    }
    for (uint32_t i = 0; i < p->n_values; i++) {
        const rlx_value_desc *vd = &p->values[i];
        const rg_value *gv = &e->g->values[p->p2g[i]];
        size_t bytes = (size_t)rlx_shape_numel(&vd->shape) * rlx_dtype_size(vd->dtype);
        if (vd->kind == RLX_VALUE_WEIGHT) {
            const rg_weight *w;
            int rc = rg_model_weight_part(m, gv->name, vd->dtype, gv->split, gv->split_lo, gv->split_hi, &w, d);
            if (rc) return rc;
            e->ptrs[i] = w->ptr;
        } else if (vd->kind == RLX_VALUE_CONST && host) {
            e->ptrs[i] = gv->data;
        } else if (vd->kind == RLX_VALUE_CONST || vd->kind == RLX_VALUE_INPUT ||
                   vd->kind == RLX_VALUE_OUTPUT) {
            void *buf = m->be->alloc(m->be_ctx, bytes ? bytes : 4, d);
            if (!buf) return d && d->code ? d->code : rlx_diag_set(d, RLX_ERR_DEVICE, "backend %s: allocation of %zu bytes failed", m->be->name, bytes);
            e->owned[i] = e->ptrs[i] = buf;
            m->buffer_bytes += bytes;
            if (vd->kind == RLX_VALUE_CONST) {
                int rc = m->be->upload ? m->be->upload(m->be_ctx, buf, gv->data, bytes, d) : (memcpy(buf, gv->data, bytes), 0);
                if (rc) return rc;
            }
        }
    }
    return 0;
}

void rg_exec_free(rlx_model *m, rg_exec *e)
{
    if (!e) return;
    if (e->exe && m->be->release) m->be->release(m->be_ctx, e->exe);
    for (uint32_t i = 0; e->owned && i < e->plan.n_values; i++)
        if (e->owned[i]) {
            m->be->free(m->be_ctx, e->owned[i]);
            m->buffer_bytes -= (size_t)rlx_shape_numel(&e->plan.values[i].shape) * rlx_dtype_size(e->plan.values[i].dtype);
        }
    free(e->owned);
    free(e->ptrs);
    rg_plan_free(&e->plan);
    rg_free(e->g);
    free(e);
}

static int compile(rlx_model *m, int phase, int64_t T, int64_t ctx, const rg_variant *v, rg_exec **out,
                   rlx_diag *d)
{
    rg_exec *e = calloc(1, sizeof *e);
    if (!e) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    e->phase = phase;
    e->T = T;
    e->ctx = ctx;
    e->variant = *v;
    const rlx_flow *f = m->flow[phase == RLX_PHASE_DECODE ? 1 : 0];
    rg_build_env env = rg_model_build_env(m, phase);
    env.variant = &e->variant;
    int rc = rg_build(&env, f, phase, T, ctx, &e->g, d);
    if (!rc) rc = passes(m, e, d);
    if (!rc) rc = rg_plan_build(e->g, &e->plan, d);
    if (!rc) {
        e->n_nodes_final = e->plan.n_nodes;
        e->prog.struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_program, phase);
        e->prog.values = e->plan.values;
        e->prog.n_values = e->plan.n_values;
        e->prog.nodes = e->plan.nodes;
        e->prog.n_nodes = e->plan.n_nodes;
        e->prog.arena_bytes = e->plan.arena_bytes;
        e->prog.phase = phase;
        e->ptrs = calloc(e->plan.n_values + 1, sizeof *e->ptrs);
        e->owned = calloc(e->plan.n_values + 1, sizeof *e->owned);
        if (!e->ptrs || !e->owned) rc = rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    }
    /* everything this program and the running session's KV cache still need, against what
     * the device has, before the first weight is uploaded */
    if (!rc) rc = rg_mem_check(m, &e->plan, e->g, m->run_states, 1, d);
    if (!rc) rc = bind_fixed(m, e, d);
    if (!rc) {
        rc = m->be->compile(m->be_ctx, &e->prog, &e->exe, d);
        if (rc && d && !d->code) rlx_diag_set(d, rc, "backend %s: compile failed", m->be->name);
    }
    if (rc) {
        rg_exec_free(m, e);
        return rc;
    }
    *out = e;
    return 0;
}

int rg_model_exec(rlx_model *m, int phase, int64_t T, int64_t ctx, rg_exec **out, rlx_diag *d)
{
    return rg_model_exec_v(m, phase, T, ctx, NULL, out, d);
}

int rg_model_exec_v(rlx_model *m, int phase, int64_t T, int64_t ctx, const rg_variant *v, rg_exec **out,
                    rlx_diag *d)
{
    static const rg_variant all; /* every input given */
    if (!v) v = &all;
    for (uint32_t i = 0; i < m->n_exec; i++) {
        rg_exec *e = m->exec[i];
        if (e->phase == phase && e->T == T && e->ctx == ctx && !memcmp(&e->variant, v, sizeof *v)) {
            *out = e;
            return 0;
        }
    }
    rg_exec **arr = realloc(m->exec, (m->n_exec + 1) * sizeof *arr);
    if (!arr) return rlx_diag_set(d, RLX_ERR_NOMEM, "out of memory");
    m->exec = arr;
    int rc = compile(m, phase, T, ctx, v, out, d);
    if (rc) return rc;
    m->exec[m->n_exec++] = *out;
    if (m->verbose || m->profile[phase == RLX_PHASE_DECODE ? 1 : 0].passes.verbose) rg_exec_dump(*out, stderr);
    return 0;
}
