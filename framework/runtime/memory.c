/* Device memory: what a program and its KV cache still need, checked against what the
 * backend's device has left before any of it is taken, and what a model holds. */
#include "runtime/exec.h"
#include "base/internal.h"
#include <stdio.h>
#include <string.h>

static int has_mem_info(const rlx_backend *be)
{
    return be->struct_size >= RLX_STRUCT_SIZE(rlx_backend, mem_info) && be->mem_info;
}

/* free/total of the device and its name; host-memory backends are also capped by the
 * cgroup limit and RLX_MEM_LIMIT. 0: known, 1: unknown (a backend of ABI < 1.2 on a
 * device), else an error from the backend. */
static int device_mem(rlx_model *m, rlx_mem_info *mi, rlx_diag *d)
{
    memset(mi, 0, sizeof *mi);
    mi->struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_mem_info, device);
    int host = (m->be->flags & RLX_BACKEND_HOST_MEMORY) != 0;
    int known = has_mem_info(m->be);
    if (known) {
        int rc = m->be->mem_info(m->be_ctx, mi, d);
        if (rc == RLX_ERR_UNSUPPORTED) { /* a thin plugin whose implementation cannot say */
            rlx_diag_init(d);
            known = 0;
        } else if (rc) {
            return d && d->code ? d->code : rlx_diag_set(d, rc, "backend %s: mem_info failed", m->be->name);
        }
    }
    if (known) {
    } else if (!host) {
        return 1;
    } else {
        snprintf(mi->device, sizeof mi->device, "%s (host memory)", m->be->name);
    }
    if (!mi->device[0]) snprintf(mi->device, sizeof mi->device, "%s", m->be->name);
    if (host) {
        uint64_t a = rlx__mem_available();
        if (!known || a < mi->free_bytes) mi->free_bytes = a;
    }
    return 0;
}

static uint64_t vbytes(const rlx_value_desc *vd)
{
    return (uint64_t)rlx_shape_numel(&vd->shape) * rlx_dtype_size(vd->dtype);
}

/* a weight is new unless bound already (same name, dtype and slice); on host memory only
 * a converted copy costs memory (the rest is used in place) */
static uint64_t weight_need(const rlx_model *m, const rlx_value_desc *vd, const rg_value *gv)
{
    for (uint32_t k = 0; k < m->n_w; k++) {
        const rg_weight *w = &m->w[k];
        if (!strcmp(w->name, gv->name) && w->dtype == vd->dtype && w->split == gv->split &&
            (!w->split || (w->lo == gv->split_lo && w->hi == gv->split_hi)))
            return 0;
    }
    if (!(m->be->flags & RLX_BACKEND_HOST_MEMORY)) return vbytes(vd);
    const rlx_tensor_info *t = m->weights ? rlx_weights_find(m->weights, gv->name) : NULL;
    return t && t->dtype == vd->dtype && gv->split != RG_SPLIT_COLS ? 0 : vbytes(vd);
}

/* GiB from 1 GiB up, MiB from 1 MiB up, else KiB */
static void size_str(uint64_t b, char *buf, size_t len)
{
    const double mib = 1024.0 * 1024.0;
    if (b >= (1ull << 30)) snprintf(buf, len, "%.2f GiB", (double)b / (mib * 1024.0));
    else if (b >= (1ull << 20)) snprintf(buf, len, "%.1f MiB", (double)b / mib);
    else snprintf(buf, len, "%.1f KiB", (double)b / 1024.0);
}

int rg_mem_check(rlx_model *m, const rg_plan *p, const rg_graph *g, const rg_states *st, int fixed,
                 rlx_diag *d)
{
    int host = (m->be->flags & RLX_BACKEND_HOST_MEMORY) != 0;
    uint64_t need[4] = {0, 0, 0, 0}; /* weights, KV cache, arena, buffers */
    uint32_t next = 0;
    for (uint32_t i = 0; i < p->n_values; i++) {
        const rlx_value_desc *vd = &p->values[i];
        if (vd->kind == RLX_VALUE_STATE) {
            uint32_t k = rg_states_find(st, vd->name, next);
            if (!st || k == st->n)
                need[1] += vbytes(vd);
            else
                next = k + 1;
        } else if (fixed && vd->kind == RLX_VALUE_WEIGHT && g) {
            need[0] += weight_need(m, vd, &g->values[p->p2g[i]]);
        } else if (fixed && ((!host && vd->kind == RLX_VALUE_CONST) || vd->kind == RLX_VALUE_INPUT ||
                                      vd->kind == RLX_VALUE_OUTPUT)) {
            need[3] += vbytes(vd);
        }
    }
    /* ensure_arena frees the smaller arena before taking the larger one */
    if (!m->arena || m->arena_cap < p->arena_bytes) need[2] = p->arena_bytes - (m->arena ? m->arena_cap : 0);
    uint64_t total = need[0] + need[1] + need[2] + need[3];
    if (!total) return 0;
    rlx_mem_info mi;
    int rc = device_mem(m, &mi, d);
    if (rc == 1) return 0; /* a device that cannot say: its allocations report failures */
    if (rc || total <= mi.free_bytes) return rc;
    static const char *const what[4] = {"weights", "KV cache", "arena", "buffers"};
    char parts[256] = "", a[32], b[32];
    size_t o = 0;
    for (int k = 0; k < 4; k++) {
        if (!need[k]) continue;
        size_str(need[k], a, sizeof a);
        o += (size_t)snprintf(parts + o, sizeof parts - o, "%s%s %s", o ? " + " : "", what[k], a);
    }
    size_str(total, a, sizeof a);
    size_str(mi.free_bytes, b, sizeof b);
    return rlx_diag_set(d, RLX_ERR_NOMEM, "%s: needs %s (%s), %s available", mi.device, a, parts, b);
}

RLX_API int rlx_model_memory(rlx_model *m, rlx_memory *out, rlx_diag *d)
{
    if (!m || !out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_model_memory: no model or output");
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&m->mu);
    for (uint32_t k = 0; k < m->n_w; k++)
        out->weights_bytes += (uint64_t)rlx_shape_numel(&m->w[k].shape) * rlx_dtype_size(m->w[k].dtype);
    out->kv_cache_bytes = m->state_bytes;
    out->arena_bytes = m->arena ? m->arena_cap : 0;
    out->buffer_bytes = m->buffer_bytes;
    rlx_mem_info mi;
    int rc = device_mem(m, &mi, d);
    pthread_mutex_unlock(&m->mu);
    if (rc > 1) return rc;
    if (!rc) {
        out->free_bytes = mi.free_bytes == UINT64_MAX ? 0 : mi.free_bytes;
        out->total_bytes = mi.total_bytes;
    }
    snprintf(out->device, sizeof out->device, "%s", rc ? m->be->name : mi.device);
    return 0;
}

RLX_API int rlx_model_measure_ceilings(rlx_model *m, int64_t M, int64_t K, int64_t N, int dtype, rlx_ceiling_figures *out,
                                       rlx_diag *d)
{
    if (!m || !out) return rlx_diag_set(d, RLX_ERR_INVALID, "rlx_model_measure_ceilings: no model or output");
    memset(out, 0, sizeof *out);
    if (m->be->struct_size < RLX_STRUCT_SIZE(rlx_backend, measure_ceilings) || !m->be->measure_ceilings)
        return rlx_diag_set(d, RLX_ERR_UNSUPPORTED, "backend %s: measures no ceilings", m->be->name);
    rlx_ceilings c;
    memset(&c, 0, sizeof c);
    c.struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_ceilings, gemm_library);
    c.gemm_m = M;
    c.gemm_k = K;
    c.gemm_n = N;
    c.dtype = dtype;
    pthread_mutex_lock(&m->mu); /* the backend's stream is the programs' */
    int rc = m->be->measure_ceilings(m->be_ctx, &c, d);
    pthread_mutex_unlock(&m->mu);
    if (rc) return d && d->code ? d->code : rlx_diag_set(d, rc, "backend %s: measure_ceilings failed", m->be->name);
    out->copy_gb_per_s = c.copy_gb_per_s;
    out->gemm_gflops = c.gemm_gflops;
    snprintf(out->gemm_library, sizeof out->gemm_library, "%s", c.gemm_library);
    return 0;
}
