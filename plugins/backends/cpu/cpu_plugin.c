/* rlx-backend-cpu: the plugin descriptor and the rlx_backend entry points (probe, init,
 * memory, compile, execute). Kernels live in cpu_k_*.c. */
#define _GNU_SOURCE
#include "cpu_backend.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <unistd.h>
#ifdef CPU_HAVE_AVX2_BUILD
#include <cpuid.h>
#endif

const rlx_host_api *cpu_host;

int cpu_fail(rlx_diag *d, int code, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!d) return code;
    if (cpu_host && cpu_host->diag_set) {
        cpu_host->diag_set(d, code, "%s", msg);
    } else {
        d->code = code;
        snprintf(d->msg, sizeof d->msg, "%s", msg);
    }
    return code;
}

/* ---------------------------------------------------------------- topology */

static int host_has(size_t field_end)
{
    return cpu_host && cpu_host->struct_size >= field_end;
}

/* The placement the host's hwloc view gives (returns 1), or every online CPU unbound
 * without it (returns 0). */
static int query_topology(rlx_topology *t, int threads, const char *placement)
{
    memset(t, 0, sizeof *t);
    t->struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_topology, summary);
    if (host_has(RLX_STRUCT_SIZE(rlx_host_api, topology)) && cpu_host->topology &&
        cpu_host->topology(t, threads, placement) == 0 && t->n_workers > 0) {
        if (t->n_workers > 256) t->n_workers = 256;
        return 1;
    }
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > 256) n = 256;
    memset(t, 0, sizeof *t);
    t->struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_topology, summary);
    t->packages = 1;
    t->cores = (int32_t)n;
    t->pus = (int32_t)n;
    t->numa_nodes = 1;
    t->n_workers = threads > 0 ? (threads > 256 ? 256 : threads) : (int32_t)n;
    for (int i = 0; i < t->n_workers; i++) t->worker_pu[i] = -1;
    snprintf(t->placement, sizeof t->placement, "none");
    snprintf(t->summary, sizeof t->summary,
             "%ld online CPUs (no topology from the host: sysconf, threads unbound)", n);
    return 0;
}

#ifdef CPU_HAVE_AVX2_BUILD
/* CPUID.1:ECX bit 29; clang's __builtin_cpu_supports knows no "f16c" (gcc's does). The
 * caller checks AVX2 first, which covers the OS's saving of the YMM state F16C needs. */
static int have_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
#endif

static const cpu_isa *pick_isa(const char **why)
{
    const char *env = getenv("RLX_CPU_ISA");
    int have_avx2 = 0, have_avx512 = 0;
#ifdef CPU_HAVE_AVX2_BUILD
    __builtin_cpu_init();
    have_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && have_f16c();
    have_avx512 = have_avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
#endif
    *why = NULL;
    if (env && strcmp(env, "generic") == 0) return &cpu_isa_generic;
    if (env && *env && strcmp(env, "avx2") != 0 && strcmp(env, "avx512") != 0 && strcmp(env, "auto") != 0)
        *why = "RLX_CPU_ISA is not one of generic, avx2, avx512, auto: using auto";
#ifdef CPU_HAVE_AVX2_BUILD
    if (have_avx512 && !(env && strcmp(env, "avx2") == 0)) return cpu_isa_avx512_init();
    if (env && strcmp(env, "avx512") == 0 && !have_avx512 && have_avx2)
        *why = "RLX_CPU_ISA=avx512 but this CPU lacks AVX-512 F/BW/VL/DQ: using avx2";
    if (have_avx2) return &cpu_isa_avx2;
#endif
    if (env && strcmp(env, "avx2") == 0) *why = "RLX_CPU_ISA=avx2 but this CPU lacks AVX2/FMA/F16C";
    return &cpu_isa_generic;
}

/* appends to a NUL-terminated buffer, truncating quietly */
static void cat(char *buf, size_t len, const char *fmt, ...) RLX_PRINTF(3, 4);
static void cat(char *buf, size_t len, const char *fmt, ...)
{
    size_t o = strlen(buf);
    if (o + 1 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + o, len - o, fmt, ap);
    va_end(ap);
}

static const char *plural(int n)
{
    return n == 1 ? "" : "s";
}

static void placement_line(const rlx_topology *t, int n, char *buf, size_t len)
{
    buf[0] = 0;
    cat(buf, len, "placement %s: %d worker%s", t->placement, n, plural(n));
    int bound = 0;
    for (int i = 0; i < n && i < t->n_workers; i++)
        if (t->worker_pu[i] >= 0) bound = 1;
    if (!bound) {
        cat(buf, len, ", unbound");
        return;
    }
    cat(buf, len, " on PUs");
    for (int i = 0; i < n; i++) {
        int pu = i < t->n_workers ? t->worker_pu[i] : -1;
        if (pu >= 0) cat(buf, len, "%s%d", i ? "," : " ", pu);
        else cat(buf, len, "%s-", i ? "," : " ");
    }
    /* worker 0 is whoever calls execute: bound for the call only */
    if (n > 0) cat(buf, len, " (worker 0: the thread calling execute)");
}

/* ---------------------------------------------------------------- backend entry points */

static int cpu_probe(rlx_backend_probe *out)
{
    if (!out) return RLX_ERR_INVALID;
    uint32_t sz = out->struct_size;
    memset(out, 0, sizeof *out);
    out->struct_size = sz ? sz : (uint32_t)RLX_STRUCT_SIZE(rlx_backend_probe, details);
    rlx_topology t;
    int from_host = query_topology(&t, 0, "cores");
    const char *why;
    const cpu_isa *isa = pick_isa(&why);
    out->available = 1;
    out->n_devices = 1;
    snprintf(out->devices[0], sizeof out->devices[0], "cpu: %d core%s, %s", t.cores,
             plural(t.cores), isa == &cpu_isa_generic ? "portable C kernels" : isa->name);
    char pl[512];
    placement_line(&t, t.n_workers, pl, sizeof pl);
    out->details[0] = 0;
    cat(out->details, sizeof out->details,
        "topology: %d package%s, %d core%s, %d PU%s, %d NUMA node%s%s; %s; kernels %s; "
        "GEMM OpenBLAS sgemm, 1 thread per worker",
        t.packages, plural(t.packages), t.cores, plural(t.cores), t.pus, plural(t.pus),
        t.numa_nodes, plural(t.numa_nodes),
        from_host ? "" : " (no topology from the host: sysconf, unbound)", pl, isa->name);
    return 0;
}

static int cpu_init(const rlx_backend_options *opt, void **out, rlx_diag *d)
{
    if (!out) return cpu_fail(d, RLX_ERR_INVALID, "cpu: init without an output pointer");
    *out = NULL;
    int threads = 0;
    char placement[16] = "cores";
    if (opt && opt->struct_size >= RLX_STRUCT_SIZE(rlx_backend_options, threads))
        threads = opt->threads;
    if (opt && opt->struct_size >= RLX_STRUCT_SIZE(rlx_backend_options, placement) &&
        opt->placement[0]) {
        memcpy(placement, opt->placement, sizeof placement);
        placement[sizeof placement - 1] = 0;
    }
    if (threads < 0 || threads > 256)
        return cpu_fail(d, RLX_ERR_INVALID, "cpu: backend.cpu.threads %d is outside 0..256", threads);
    if (strcmp(placement, "cores") != 0 && strcmp(placement, "pus") != 0 &&
        strcmp(placement, "none") != 0)
        return cpu_fail(d, RLX_ERR_INVALID,
                        "cpu: backend.cpu.placement \"%s\" is not one of cores, pus, none", placement);

    rlx_topology t;
    query_topology(&t, threads, placement);
    int n = threads > 0 ? threads : t.n_workers;
    int pus[256];
    for (int i = 0; i < n; i++)
        pus[i] = (strcmp(placement, "none") != 0 && i < t.n_workers) ? t.worker_pu[i] : -1;

    cpu_backend *be = calloc(1, sizeof *be);
    if (!be) return cpu_fail(d, RLX_ERR_NOMEM, "cpu: out of memory");
    const char *why;
    be->isa = pick_isa(&why);
    if (why && cpu_host && cpu_host->log) cpu_host->log(RLX_LOG_WARN, "cpu", "%s", why);
    be->n_workers = n;
    be->pu0 = pus[0];
    pthread_mutex_init(&be->exec_mu, NULL);
    int rc = cpu_pool_create(n, pus, &be->pool, d);
    if (rc) {
        pthread_mutex_destroy(&be->exec_mu);
        free(be);
        return rc;
    }
    if (cpu_host && cpu_host->log) {
        char pl[512];
        placement_line(&t, n, pl, sizeof pl);
        cpu_host->log(RLX_LOG_DEBUG, "cpu", "%s; kernels %s", pl, be->isa->name);
    }
    *out = be;
    return 0;
}

static void *cpu_alloc(void *be, size_t bytes, rlx_diag *d)
{
    (void)be;
    void *p = NULL;
    size_t sz = (bytes + 63) / 64 * 64;
    if (sz == 0) sz = 64;
    if (sz < bytes || posix_memalign(&p, 64, sz) != 0) {
        cpu_fail(d, RLX_ERR_NOMEM, "cpu: cannot allocate %zu bytes", bytes);
        return NULL;
    }
    return p;
}

static void cpu_free(void *be, void *ptr)
{
    (void)be;
    free(ptr);
}

static int cpu_copy(void *be, void *dst, const void *src, size_t bytes, rlx_diag *d)
{
    (void)be;
    if (bytes && (!dst || !src)) return cpu_fail(d, RLX_ERR_INVALID, "cpu: copy with a NULL buffer");
    if (bytes && dst != src) memcpy(dst, src, bytes);
    return 0;
}

typedef struct cpu_exe {
    cpu_node *nodes;
    uint32_t n_nodes;
    float *scratch;
    size_t scratch_stride;
    float *shared;
    uint32_t n_values;
    uint8_t *nonempty; /* per value: numel > 0 (its pointer must be set) */
    cpu_prof *prof;
} cpu_exe;

static void exe_free(cpu_exe *x)
{
    if (!x) return;
    cpu_prof_free(x->prof, x->nodes, x->n_nodes);
    free(x->nodes);
    free(x->scratch);
    free(x->shared);
    free(x->nonempty);
    free(x);
}

static int cpu_compile(void *bep, const rlx_program *prog, void **out, rlx_diag *d)
{
    cpu_backend *be = bep;
    if (!be || !prog || !out) return cpu_fail(d, RLX_ERR_INVALID, "cpu: compile without a program");
    *out = NULL;
    if (prog->n_nodes && !prog->nodes)
        return cpu_fail(d, RLX_ERR_INVALID, "cpu: program has %u nodes but no node array", prog->n_nodes);
    if (prog->n_values && !prog->values)
        return cpu_fail(d, RLX_ERR_INVALID, "cpu: program has %u values but no value array", prog->n_values);
    cpu_exe *x = calloc(1, sizeof *x);
    if (!x) return cpu_fail(d, RLX_ERR_NOMEM, "cpu: out of memory compiling");
    x->n_nodes = prog->n_nodes;
    x->n_values = prog->n_values;
    x->nodes = calloc(prog->n_nodes ? prog->n_nodes : 1, sizeof *x->nodes);
    x->nonempty = calloc(prog->n_values ? prog->n_values : 1, 1);
    if (!x->nodes || !x->nonempty) {
        exe_free(x);
        return cpu_fail(d, RLX_ERR_NOMEM, "cpu: out of memory compiling");
    }
    for (uint32_t v = 0; v < prog->n_values; v++) {
        const rlx_shape *s = &prog->values[v].shape;
        if (s->ndim > RLX_MAX_DIMS) {
            exe_free(x);
            return cpu_fail(d, RLX_ERR_INVALID, "cpu: value %u has %u dims (at most %d)", v,
                            s->ndim, RLX_MAX_DIMS);
        }
        for (uint32_t i = 0; i < s->ndim; i++)
            if (s->dims[i] < 0) {
                exe_free(x);
                return cpu_fail(d, RLX_ERR_INVALID, "cpu: value %u has a negative dim", v);
            }
        x->nonempty[v] = cpu_numel(s) > 0;
    }
    size_t scratch = 0, shared = 0;
    for (uint32_t i = 0; i < prog->n_nodes; i++) {
        const rlx_node_desc *n = &prog->nodes[i];
        const cpu_op_def *def = cpu_op_find(n->op);
        if (!def) {
            exe_free(x);
            return cpu_fail(d, RLX_ERR_UNSUPPORTED, "cpu: node %u: op '%s' has no CPU kernel", i,
                            n->op ? n->op : "(null)");
        }
        if ((n->n_inputs && !n->inputs) || (n->n_outputs && !n->outputs) ||
            (n->n_attrs && !n->attrs) || n->n_inputs > CPU_MAX_IN || n->n_outputs > 2) {
            exe_free(x);
            return cpu_fail(d, RLX_ERR_INVALID, "cpu: node %u (%s): malformed inputs/outputs/attrs", i,
                            n->op);
        }
        const char *blas = cpu_blas_may_need(def->name, be->isa) ? cpu_blas_load() : NULL;
        if (blas) {
            exe_free(x);
            return cpu_fail(d, RLX_ERR_DEVICE, "cpu: node %u (%s): %s", i, def->name, blas);
        }
        cpu_node *nd = &x->nodes[i];
        nd->op = def->name;
        nd->fn = def->run;
        nd->index = i;
        nd->n_in = n->n_inputs;
        nd->n_out = n->n_outputs;
        for (uint32_t k = 0; k < CPU_MAX_IN; k++) nd->in[k] = k < n->n_inputs ? n->inputs[k] : -1;
        for (uint32_t k = 0; k < 2; k++) nd->out[k] = k < n->n_outputs ? n->outputs[k] : -1;
        nd->pos_in = nd->mask_in = nd->bias_in = -1;
        cpu_compile_ctx cc = {prog, n, i, d, be->isa};
        int rc = def->prepare(&cc, nd);
        if (rc) {
            exe_free(x);
            return rc;
        }
        if (nd->scratch_floats > scratch) scratch = nd->scratch_floats;
        if (nd->shared_floats > shared) shared = nd->shared_floats;
    }
    if (shared) {
        void *p = NULL;
        if (posix_memalign(&p, 64, shared * sizeof(float)) != 0) {
            exe_free(x);
            return cpu_fail(d, RLX_ERR_NOMEM, "cpu: cannot allocate %zu bytes of kernel buffers", shared * sizeof(float));
        }
        x->shared = p;
    }
    if (scratch) {
        x->scratch_stride = (scratch + 15) / 16 * 16;
        size_t bytes = x->scratch_stride * sizeof(float) * (size_t)be->n_workers;
        void *p = NULL;
        if (posix_memalign(&p, 64, bytes) != 0) {
            exe_free(x);
            return cpu_fail(d, RLX_ERR_NOMEM, "cpu: cannot allocate %zu bytes of kernel scratch", bytes);
        }
        x->scratch = p;
    }
    x->prof = cpu_prof_new(x->n_nodes);
    *out = x;
    return 0;
}

static int cpu_execute(void *bep, void *exep, void *const *vp, rlx_diag *d)
{
    cpu_backend *be = bep;
    cpu_exe *x = exep;
    if (!be || !x || (!vp && x->n_values))
        return cpu_fail(d, RLX_ERR_INVALID, "cpu: execute without a compiled program or value pointers");
    pthread_mutex_lock(&be->exec_mu);
    /* the caller's thread is worker 0: place it like the others for this call */
    cpu_set_t saved;
    int rebound = be->pu0 >= 0 && be->n_workers > 1 &&
                  cpu_host->struct_size >= RLX_STRUCT_SIZE(rlx_host_api, bind_thread) &&
                  cpu_host->bind_thread &&
                  pthread_getaffinity_np(pthread_self(), sizeof saved, &saved) == 0 &&
                  cpu_host->bind_thread(be->pu0) == 0;
    int rc = 0;
    for (uint32_t i = 0; i < x->n_nodes && !rc; i++) {
        const cpu_node *nd = &x->nodes[i];
        for (uint32_t k = 0; k < nd->n_in + nd->n_out && !rc; k++) {
            int32_t id = k < nd->n_in ? nd->in[k] : nd->out[k - nd->n_in];
            if (id >= 0 && x->nonempty[id] && !vp[id])
                rc = cpu_fail(d, RLX_ERR_INVALID, "cpu: node %u (%s): value %d has no buffer", i,
                              nd->op, id);
        }
        if (rc) break;
        cpu_run r = {be, nd, vp, x->scratch, x->scratch_stride, d, x->shared};
        double t0 = x->prof ? cpu_prof_now() : 0;
        rc = nd->fn(&r);
        if (x->prof) cpu_prof_add(x->prof, i, cpu_prof_now() - t0, i + 1 == x->n_nodes);
    }
    if (rebound) pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
    pthread_mutex_unlock(&be->exec_mu);
    return rc;
}

static int cpu_sync(void *be, rlx_diag *d)
{
    (void)be;
    (void)d;
    return 0;
}

static void cpu_release(void *be, void *exe)
{
    (void)be;
    exe_free(exe);
}

static void cpu_teardown(void *bep)
{
    cpu_backend *be = bep;
    if (!be) return;
    cpu_pool_destroy(be->pool);
    pthread_mutex_destroy(&be->exec_mu);
    free(be);
}

static const char *const cpu_dtypes[] = {"f32", "f16", "bf16", NULL};

static const rlx_backend cpu_backend_desc = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_backend, measure_ceilings),
    .name = "cpu",
    .summary = "host CPU: OpenBLAS sgemm, own AVX2/FMA kernels, hwloc-placed worker pool",
    .priority = 0,
    .flags = RLX_BACKEND_HOST_MEMORY,
    .ops = cpu_op_names,
    .dtypes = cpu_dtypes,
    .probe = cpu_probe,
    .supports_op = cpu_supports_op,
    .init = cpu_init,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .compile = cpu_compile,
    .execute = cpu_execute,
    .sync = cpu_sync,
    .release = cpu_release,
    .teardown = cpu_teardown,
    .mem_info = cpu_mem_info,
    .measure_ceilings = NULL, /* rlx-bench measures the host's itself */
};

static const rlx_backend *const cpu_backends[] = {&cpu_backend_desc};

static const rlx_plugin_desc cpu_plugin_desc = {
    .struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_plugin_desc, n_archs),
    .abi_major = RLX_ABI_MAJOR,
    .abi_minor = RLX_ABI_MINOR,
    .name = "cpu",
    .version = "0.1.0",
    .summary = "CPU backend (OpenBLAS + hwloc worker pool)",
    .blocks = NULL,
    .n_blocks = 0,
    .backends = cpu_backends,
    .n_backends = 1,
    .archs = NULL,
    .n_archs = 0,
};

RLX_EXPORT const rlx_plugin_desc *rlx_plugin_init(const rlx_host_api *host)
{
    if (!host || host->struct_size < RLX_STRUCT_SIZE(rlx_host_api, abi_minor))
        return NULL;
    if (host->abi_major != RLX_ABI_MAJOR) {
        if (host->struct_size >= RLX_STRUCT_SIZE(rlx_host_api, log) && host->log)
            host->log(RLX_LOG_ERROR, "cpu", "host ABI %u.%u, plugin built for %d.%d", host->abi_major,
                      host->abi_minor, RLX_ABI_MAJOR, RLX_ABI_MINOR);
        return NULL;
    }
    /* every registry passes the same table: no write while another model's workers read it */
    if (cpu_host != host) cpu_host = host;
    cpu_ops_init();
    return &cpu_plugin_desc;
}
