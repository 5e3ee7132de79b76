/* The CPU backend plugin, op by op, against naive double-precision references written
 * here: every op of docs/OPS.md (odd sizes, GQA, causal/window/softcap/mask/pos
 * attention, decode, long prompts), 1 vs 2 threads (bitwise equal), portable vs AVX2
 * kernels, and the execute-time errors. */
#define _GNU_SOURCE
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "rlx/rlx.h"
#include "ref_spatial.h"
#include "testutil.h"

#define TOL 1e-5

static void *so;
static const rlx_backend *BE;
/* 0: 1 thread, 1: 2 threads, 2: 2 threads with the portable kernels */
/* 1 and 2 threads with the best kernels, the portable ones, the AVX2 ones (OpenBLAS GEMM) */
#define NH 4
static void *HND[NH];

static const rlx_backend *load_backend(void)
{
    const char *bd = getenv("RLX_BUILDDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/plugins/backends/cpu/.libs/rlx-backend-cpu.so", bd ? bd : ".");
    so = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(so != NULL, "dlopen %s: %s", path, dlerror());
    rlx_plugin_init_fn init = (rlx_plugin_init_fn)(uintptr_t)dlsym(so, RLX_PLUGIN_ENTRY_NAME);
    ck_assert_ptr_nonnull(init);
    const rlx_plugin_desc *desc = init(rlx_host_api_get());
    ck_assert_ptr_nonnull(desc);
    ck_assert_uint_eq(desc->abi_major, RLX_ABI_MAJOR);
    ck_assert_uint_eq(desc->n_backends, 1);
    return desc->backends[0];
}

static void *init_handle(int threads, const char *isa)
{
    rlx_backend_options opt;
    memset(&opt, 0, sizeof opt);
    opt.struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_backend_options, graphs);
    opt.threads = threads;
    snprintf(opt.placement, sizeof opt.placement, "cores");
    if (isa) setenv("RLX_CPU_ISA", isa, 1);
    else unsetenv("RLX_CPU_ISA");
    void *h = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    int rc = BE->init(&opt, &h, &d);
    unsetenv("RLX_CPU_ISA");
    ck_assert_msg(rc == 0, "init: %s", d.msg);
    return h;
}

static void setup(void)
{
    BE = load_backend();
    HND[0] = init_handle(1, NULL);
    HND[1] = init_handle(2, NULL);
    HND[2] = init_handle(2, "generic");
    HND[3] = init_handle(2, "avx2");
}

static void teardown(void)
{
    for (int i = 0; i < NH; i++) BE->teardown(HND[i]);
    dlclose(so);
}

/* ---------------------------------------------------------------- a one-node program */

typedef struct tv {
    int dtype; /* -1: absent optional input (id -1) */
    rlx_shape shape;
    const void *data;
} tv;

typedef struct top {
    const char *op;
    tv in[5];
    int n_in;
    tv out[2];
    int n_out;
    rlx_attr attrs[6];
    int n_attrs;
    int out0_aliases_in0; /* cache_write: the output is the state's bytes */
} top;

static rlx_shape shp(int nd, ...)
{
    rlx_shape s;
    memset(&s, 0, sizeof s);
    s.ndim = (uint32_t)nd;
    va_list ap;
    va_start(ap, nd);
    for (int i = 0; i < nd; i++) s.dims[i] = va_arg(ap, int);
    va_end(ap);
    return s;
}

static tv F(const float *data, rlx_shape s)
{
    tv t = {RLX_F32, s, data};
    return t;
}

static tv TV(int dtype, const void *data, rlx_shape s)
{
    tv t = {dtype, s, data};
    return t;
}

static size_t esize(int dt)
{
    return dt == RLX_I64 ? 8 : (dt == RLX_F16 || dt == RLX_BF16) ? 2 : dt == RLX_U8 ? 1 : 4;
}

static size_t numel(const rlx_shape *s)
{
    size_t n = 1;
    for (uint32_t i = 0; i < s->ndim; i++) n *= (size_t)s->dims[i];
    return n;
}

/* Runs o on handle h; outs[i] receive malloc'd copies of the outputs. */
static int run_op(void *h, const top *o, void *outs[2], rlx_diag *d)
{
    rlx_value_desc v[8];
    void *ptrs[8] = {0};
    int32_t ins[5], outs_id[2];
    int nv = 0;
    memset(v, 0, sizeof v);
    for (int i = 0; i < o->n_in; i++) {
        if (o->in[i].dtype < 0) {
            ins[i] = -1;
            continue;
        }
        v[nv].struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_value_desc, alias_offset);
        v[nv].kind = (i == 0 && o->out0_aliases_in0) ? RLX_VALUE_STATE : RLX_VALUE_INPUT;
        v[nv].dtype = o->in[i].dtype;
        v[nv].shape = o->in[i].shape;
        v[nv].alias_of = -1;
        size_t bytes = numel(&o->in[i].shape) * esize(o->in[i].dtype);
        ptrs[nv] = BE->alloc(h, bytes, d);
        ck_assert_ptr_nonnull(ptrs[nv]);
        ck_assert_int_eq(BE->upload(h, ptrs[nv], o->in[i].data, bytes, d), 0);
        ins[i] = nv++;
    }
    for (int i = 0; i < o->n_out; i++) {
        v[nv].struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_value_desc, alias_offset);
        v[nv].kind = (i == 0 && o->out0_aliases_in0) ? RLX_VALUE_ALIAS : RLX_VALUE_OUTPUT;
        v[nv].dtype = o->out[i].dtype;
        v[nv].shape = o->out[i].shape;
        v[nv].alias_of = (i == 0 && o->out0_aliases_in0) ? 0 : -1;
        if (i == 0 && o->out0_aliases_in0) {
            ptrs[nv] = ptrs[0];
        } else {
            size_t bytes = numel(&o->out[i].shape) * esize(o->out[i].dtype);
            ptrs[nv] = BE->alloc(h, bytes, d);
            ck_assert_ptr_nonnull(ptrs[nv]);
            memset(ptrs[nv], 0xcd, bytes); /* garbage: every element must be written */
        }
        outs_id[i] = nv++;
    }
    rlx_node_desc node = {(uint32_t)RLX_STRUCT_SIZE(rlx_node_desc, n_attrs), o->op, ins,
                          (uint32_t)o->n_in, outs_id, (uint32_t)o->n_out, o->attrs,
                          (uint32_t)o->n_attrs};
    rlx_program p = {(uint32_t)RLX_STRUCT_SIZE(rlx_program, arena_bytes), v, (uint32_t)nv, &node, 1, 0, 0};
    void *exe = NULL;
    int rc = BE->compile(h, &p, &exe, d);
    if (rc == 0) {
        rc = BE->execute(h, exe, ptrs, d);
        if (rc == 0) ck_assert_int_eq(BE->sync(h, d), 0);
        BE->release(h, exe);
    }
    for (int i = 0; i < o->n_out; i++) {
        size_t bytes = numel(&o->out[i].shape) * esize(o->out[i].dtype);
        outs[i] = malloc(bytes ? bytes : 1);
        if (rc == 0) ck_assert_int_eq(BE->download(h, outs[i], ptrs[outs_id[i]], bytes, d), 0);
    }
    for (int i = 0; i < nv; i++)
        if (!(o->out0_aliases_in0 && i == outs_id[0])) BE->free(h, ptrs[i]);
    return rc;
}

static double rel_l2(const float *a, const double *ref, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
    }
    if (!(num == num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static double rel_l2_ff(const float *a, const float *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double e = (double)a[i] - (double)b[i];
        num += e * e;
        den += (double)b[i] * (double)b[i];
    }
    if (!(num == num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Runs o on the three handles and checks every f32 output against refs[i]: rel L2 < tol,
 * 1 thread and 2 threads bitwise equal, portable vs vector kernels within TOL (or tol where
 * that is wider: a bf16 GEMM rounds x to bf16, the portable path does not). */
static void check_op(const top *o, const double *const *refs, double tol)
{
    void *res[NH][2];
    for (int k = 0; k < NH; k++) {
        rlx_diag d;
        rlx_diag_init(&d);
        int rc = run_op(HND[k], o, res[k], &d);
        ck_assert_msg(rc == 0, "%s on handle %d: %s", o->op, k, d.msg);
    }
    for (int i = 0; i < o->n_out; i++) {
        size_t n = numel(&o->out[i].shape);
        for (int k = 0; k < NH; k++) {
            double e = rel_l2(res[k][i], refs[i], n);
            ck_assert_msg(e < tol, "%s output %d handle %d: rel L2 %.3g >= %.1g", o->op, i, k, e, tol);
        }
        ck_assert_msg(memcmp(res[0][i], res[1][i], n * sizeof(float)) == 0,
                      "%s output %d: 1 thread and 2 threads differ (rel %.3g)", o->op, i,
                      rel_l2_ff(res[1][i], res[0][i], n));
        double g = rel_l2_ff(res[2][i], res[1][i], n);
        ck_assert_msg(g < (tol > TOL ? tol : TOL), "%s output %d: portable vs vector rel L2 %.3g", o->op, i, g);
    }
    for (int k = 0; k < NH; k++)
        for (int i = 0; i < o->n_out; i++) free(res[k][i]);
}

static void check1(const top *o, const double *ref)
{
    const double *refs[1] = {ref};
    check_op(o, refs, TOL);
}

static uint64_t rng = 88172645463325252ull;
static float frand(void) /* [-1, 1) */
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static float *rnd(size_t n, float scale)
{
    float *p = malloc(n * sizeof *p + 4);
    for (size_t i = 0; i < n; i++) p[i] = frand() * scale;
    return p;
}

static double *dalloc(size_t n)
{
    return calloc(n ? n : 1, sizeof(double));
}

/* ---------------------------------------------------------------- the plugin itself */

START_TEST(test_descriptor)
{
    ck_assert_str_eq(BE->name, "cpu");
    ck_assert_int_eq(BE->priority, 0);
    ck_assert(BE->flags & RLX_BACKEND_HOST_MEMORY);
    ck_assert_str_eq(BE->dtypes[0], "f32");
    ck_assert_str_eq(BE->dtypes[1], "f16");
    ck_assert_str_eq(BE->dtypes[2], "bf16");
    ck_assert_ptr_null(BE->dtypes[3]);
    static const char *want[] = {
        "rlx.embedding", "rlx.matmul", "rlx.matmul_nn", "rlx.add", "rlx.sub", "rlx.mul",
        "rlx.scale", "rlx.add_scalar", "rlx.silu", "rlx.gelu", "rlx.gelu_tanh", "rlx.tanh",
        "rlx.softcap", "rlx.softmax", "rlx.rms_norm", "rlx.layer_norm", "rlx.rope",
        "rlx.attention", "rlx.cache_write", "rlx.transpose", "rlx.concat", "rlx.slice",
        "rlx.last_row", "rlx.copy", "rlx.cast", "rlx.swiglu", "rlx.geglu_tanh",
        "rlx.add_rms_norm", "rlx.linear_swiglu", "rlx.conv2d", "rlx.group_norm",
        "rlx.upsample_nearest2d", "rlx.bmm", "rlx.relu", "rlx.sin", "rlx.cos", "rlx.all_reduce",
        "rlx.all_gather", "rlx.attention_rows", "rlx.cache_write_rows", "rlx.argmax"};
    size_t n = 0;
    while (BE->ops[n]) {
        ck_assert_msg(strcmp(BE->ops[n], "rlx.reshape") != 0, "backends never see reshapes");
        n++;
    }
    ck_assert_uint_eq(n, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        int found = 0;
        for (size_t j = 0; j < n; j++) found |= strcmp(BE->ops[j], want[i]) == 0;
        ck_assert_msg(found, "op %s missing", want[i]);
    }
}
END_TEST

START_TEST(test_probe)
{
    rlx_backend_probe p;
    memset(&p, 0, sizeof p);
    p.struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_backend_probe, details);
    ck_assert_int_eq(BE->probe(&p), 0);
    ck_assert_int_eq(p.available, 1);
    ck_assert_uint_eq(p.n_devices, 1);
    ck_assert_msg(strncmp(p.devices[0], "cpu: ", 5) == 0 && strstr(p.devices[0], " core"),
                  "device line: %s", p.devices[0]);
    ck_assert_msg(strstr(p.details, "topology: ") && strstr(p.details, "package") &&
                      strstr(p.details, "PU") && strstr(p.details, "NUMA node") &&
                      strstr(p.details, "placement "),
                  "details: %s", p.details);
}
END_TEST

START_TEST(test_unknown_op)
{
    float x[4] = {1, 2, 3, 4};
    top o = {.op = "rlx.bogus", .n_in = 1, .n_out = 1};
    o.in[0] = F(x, shp(1, 4));
    o.out[0] = F(NULL, shp(1, 4));
    void *res[2];
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(run_op(HND[1], &o, res, &d), RLX_ERR_UNSUPPORTED);
    ck_assert_str_eq(d.msg, "cpu: node 0: op 'rlx.bogus' has no CPU kernel");
    free(res[0]);
    o.op = "rlx.reshape";
    rlx_diag_init(&d);
    ck_assert_int_eq(run_op(HND[1], &o, res, &d), RLX_ERR_UNSUPPORTED);
    ck_assert_str_eq(d.msg, "cpu: node 0: op 'rlx.reshape' has no CPU kernel");
    free(res[0]);
}
END_TEST

START_TEST(test_bad_shape_is_compile_error)
{
    float x[6] = {0}, w[6] = {0};
    top o = {.op = "rlx.matmul", .n_in = 2, .n_out = 1};
    o.in[0] = F(x, shp(2, 2, 3));
    o.in[1] = F(w, shp(2, 3, 2)); /* K 2 != 3 */
    o.out[0] = F(NULL, shp(2, 2, 3));
    void *res[2];
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(run_op(HND[1], &o, res, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "cpu: node 0 (rlx.matmul): inner dims differ: x has 3, weight 2");
    free(res[0]);
}
END_TEST

/* ---------------------------------------------------------------- matmuls */

static void ref_mm(const float *x, const float *w, const float *b, int M, int K, int N, double *y)
{
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = b ? b[n] : 0;
            for (int k = 0; k < K; k++) s += (double)x[m * K + k] * w[n * K + k];
            y[m * N + n] = s;
        }
}

static void matmul_case(int M, int K, int N, int bias, int three_d)
{
    float *x = rnd((size_t)(M * K), 1), *w = rnd((size_t)(N * K), 0.5f), *b = rnd((size_t)N, 1);
    double *y = dalloc((size_t)(M * N));
    ref_mm(x, w, bias ? b : NULL, M, K, N, y);
    top o = {.op = "rlx.matmul", .n_in = bias ? 3 : 2, .n_out = 1};
    o.in[0] = three_d && M % 2 == 0 ? F(x, shp(3, 2, M / 2, K)) : F(x, shp(2, M, K));
    o.in[1] = F(w, shp(2, N, K));
    o.in[2] = F(b, shp(1, N));
    o.out[0] = three_d && M % 2 == 0 ? F(NULL, shp(3, 2, M / 2, N)) : F(NULL, shp(2, M, N));
    check1(&o, y);
    free(x), free(w), free(b), free(y);
}

START_TEST(test_matmul_gemv)
{
    matmul_case(1, 1024, 37, 0, 0);
    matmul_case(1, 1024, 4096, 1, 0);
    matmul_case(2, 67, 45, 1, 1);
    matmul_case(3, 300, 129, 1, 0);
    matmul_case(4, 5, 300, 0, 1);
    matmul_case(1, 1, 3, 1, 0);
}
END_TEST

START_TEST(test_matmul_sgemm)
{
    matmul_case(5, 33, 7, 1, 0);
    matmul_case(17, 130, 300, 1, 0);   /* split over N */
    matmul_case(200, 64, 100, 1, 1);   /* split over M */
    matmul_case(64, 256, 1030, 0, 1);
    matmul_case(600, 40, 300, 1, 0);   /* our GEMM: two blocks of rows */
    matmul_case(1100, 24, 100, 0, 1);  /* three blocks, split over M */
}
END_TEST

/* 16-bit weights (x f32): against the f64 product with the weights as stored; a bf16 GEMM
 * also rounds x to bf16 once (unit roundoff 2^-8), f16 keeps f32 accuracy */
/* xbf: x holds bf16 values (bf16 compute), which few-row bf16 products may take on vdpbf16ps */
static void matmul_h_case_x(int dt, int M, int K, int N, int bias, int xbf)
{
    float *x = rnd((size_t)(M * K), 1), *w = rnd((size_t)(N * K), 0.5f), *b = rnd((size_t)N, 1);
    for (int i = 0; xbf && i < M * K; i++)
        x[i] = rlx_bf16_to_f32(rlx_f32_to_bf16(x[i]));
    uint16_t *wh = malloc((size_t)(N * K) * 2 + 2);
    for (int i = 0; i < N * K; i++) {
        wh[i] = dt == RLX_F16 ? rlx_f32_to_f16(w[i]) : rlx_f32_to_bf16(w[i]);
        w[i] = dt == RLX_F16 ? rlx_f16_to_f32(wh[i]) : rlx_bf16_to_f32(wh[i]);
    }
    double *y = dalloc((size_t)(M * N));
    ref_mm(x, w, bias ? b : NULL, M, K, N, y);
    top o = {.op = "rlx.matmul", .n_in = bias ? 3 : 2, .n_out = 1};
    o.in[0] = F(x, shp(2, M, K));
    o.in[1] = TV(dt, wh, shp(2, N, K));
    o.in[2] = F(b, shp(1, N));
    o.out[0] = F(NULL, shp(2, M, N));
    const double *refs[1] = {y};
    check_op(&o, refs, dt == RLX_BF16 && M > 4 ? 1.0 / 256 : TOL);
    free(x), free(w), free(wh), free(b), free(y);
}

static void matmul_h_case(int dt, int M, int K, int N, int bias) { matmul_h_case_x(dt, M, K, N, bias, 0); }

START_TEST(test_matmul_half)
{
    /* bf16 x and weights, few rows: every row count, K past and short of whole 32s, odd K */
    matmul_h_case_x(RLX_BF16, 1, 1024, 37, 1, 1);
    matmul_h_case_x(RLX_BF16, 1, 4099, 300, 0, 1);
    matmul_h_case_x(RLX_BF16, 2, 77, 19, 1, 1);
    matmul_h_case_x(RLX_BF16, 3, 67, 45, 0, 1);
    matmul_h_case_x(RLX_BF16, 4, 17, 66, 1, 1);
    matmul_h_case_x(RLX_BF16, 1, 8200, 9, 1, 1); /* K past the stack row: the widening tile */
    for (int dt = RLX_F16; dt <= RLX_BF16; dt++) {
        matmul_h_case(dt, 1, 1024, 37, 1);   /* streaming kernel */
        matmul_h_case(dt, 1, 256, 300, 1);   /* shrinking column slices, a short last one */
        matmul_h_case(dt, 3, 67, 45, 0);
        matmul_h_case(dt, 2, 300, 19, 1);
        matmul_h_case(dt, 4, 17, 66, 0);
        matmul_h_case(dt, 5, 33, 7, 1);      /* GEMM: one tile, odd K */
        matmul_h_case(dt, 37, 130, 300, 1);  /* split over N, a partial row panel */
        matmul_h_case(dt, 200, 64, 100, 0);  /* split over M */
        matmul_h_case(dt, 64, 255, 1030, 1); /* every column tile width */
        matmul_h_case(dt, 530, 33, 260, 1);  /* two blocks of rows */
    }
}
END_TEST

static void matmul_nn_case(int M, int K, int N)
{
    float *a = rnd((size_t)(M * K), 1), *b = rnd((size_t)(K * N), 1);
    double *y = dalloc((size_t)(M * N));
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double s = 0;
            for (int k = 0; k < K; k++) s += (double)a[m * K + k] * b[k * N + n];
            y[m * N + n] = s;
        }
    top o = {.op = "rlx.matmul_nn", .n_in = 2, .n_out = 1};
    o.in[0] = F(a, shp(2, M, K));
    o.in[1] = F(b, shp(2, K, N));
    o.out[0] = F(NULL, shp(2, M, N));
    check1(&o, y);
    free(a), free(b), free(y);
}

/* a [B,M,K] times b [B,N,K]ᵀ (trans_b 1) or b [B,K,N] (trans_b 0) */
static void bmm_case(int B, int M, int N, int K, int tb)
{
    float *a = rnd((size_t)(B * M * K), 1), *b = rnd((size_t)(B * N * K), 1);
    double *y = dalloc((size_t)(B * M * N));
    for (int z = 0; z < B; z++)
        for (int m = 0; m < M; m++)
            for (int n = 0; n < N; n++) {
                double s = 0;
                for (int k = 0; k < K; k++)
                    s += (double)a[(z * M + m) * K + k] * (tb ? b[(z * N + n) * K + k] : b[(z * K + k) * N + n]);
                y[(z * M + m) * N + n] = s;
            }
    top o = {.op = "rlx.bmm", .n_in = 2, .n_out = 1, .n_attrs = 1};
    o.in[0] = F(a, shp(3, B, M, K));
    o.in[1] = F(b, tb ? shp(3, B, N, K) : shp(3, B, K, N));
    o.out[0] = F(NULL, shp(3, B, M, N));
    rlx_attr at = RLX_ATTR_I("trans_b", tb);
    o.attrs[0] = at;
    check1(&o, y);
    free(a), free(b), free(y);
}

START_TEST(test_bmm)
{
    for (int tb = 0; tb < 2; tb++) {
        bmm_case(1, 1, 1, 1, tb);
        bmm_case(8, 16, 16, 16, tb);
        bmm_case(5, 19, 23, 37, tb);
        bmm_case(3, 7, 300, 2, tb);
    }
}
END_TEST

START_TEST(test_matmul_nn)
{
    matmul_nn_case(1, 40, 9);
    matmul_nn_case(5, 33, 70);
    matmul_nn_case(64, 128, 300);
    matmul_nn_case(130, 64, 40);
}
END_TEST

static double silu_d(double x) { return x / (1 + exp(-x)); }
static double gelu_tanh_d(double x)
{
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static void linear_swiglu_case(int M, int K, int N)
{
    float *x = rnd((size_t)(M * K), 1), *wg = rnd((size_t)(N * K), 0.3f), *wu = rnd((size_t)(N * K), 0.3f);
    double *g = dalloc((size_t)(M * N)), *u = dalloc((size_t)(M * N));
    ref_mm(x, wg, NULL, M, K, N, g);
    ref_mm(x, wu, NULL, M, K, N, u);
    for (int i = 0; i < M * N; i++) g[i] = silu_d(g[i]) * u[i];
    top o = {.op = "rlx.linear_swiglu", .n_in = 3, .n_out = 1};
    o.in[0] = F(x, shp(2, M, K));
    o.in[1] = F(wg, shp(2, N, K));
    o.in[2] = F(wu, shp(2, N, K));
    o.out[0] = F(NULL, shp(2, M, N));
    check1(&o, g);
    free(x), free(wg), free(wu), free(g), free(u);
}

START_TEST(test_linear_swiglu)
{
    linear_swiglu_case(1, 256, 77);
    linear_swiglu_case(3, 100, 300);
    linear_swiglu_case(9, 96, 300);
    linear_swiglu_case(130, 64, 40);
    linear_swiglu_case(530, 48, 300);
}
END_TEST

/* ---------------------------------------------------------------- elementwise */

static void binary_case(const char *op, rlx_shape as, rlx_shape bs)
{
    size_t na = numel(&as), nb = numel(&bs);
    float *a = rnd(na, 3), *b = rnd(nb, 3);
    double *y = dalloc(na);
    for (size_t i = 0; i < na; i++) {
        double x = a[i], z = b[i % nb];
        y[i] = strcmp(op, "rlx.add") == 0 ? x + z : strcmp(op, "rlx.sub") == 0 ? x - z : x * z;
    }
    top o = {.op = op, .n_in = 2, .n_out = 1};
    o.in[0] = F(a, as);
    o.in[1] = F(b, bs);
    o.out[0] = F(NULL, as);
    check1(&o, y);
    free(a), free(b), free(y);
}

START_TEST(test_binary)
{
    const char *ops[] = {"rlx.add", "rlx.sub", "rlx.mul"};
    for (int i = 0; i < 3; i++) {
        binary_case(ops[i], shp(1, 1037), shp(1, 1037));
        binary_case(ops[i], shp(2, 300, 301), shp(2, 300, 301));
        binary_case(ops[i], shp(2, 7, 13), shp(1, 13));
        binary_case(ops[i], shp(3, 3, 5, 11), shp(2, 1, 11));
        binary_case(ops[i], shp(3, 4, 5, 6), shp(2, 5, 6));
        binary_case(ops[i], shp(2, 5, 4), shp(1, 1));
    }
}
END_TEST

static void unary_case(const char *op, const char *attr, double av, size_t n, float range)
{
    float *x = rnd(n, range);
    double *y = dalloc(n);
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        if (!strcmp(op, "rlx.scale")) y[i] = v * (float)av;
        else if (!strcmp(op, "rlx.add_scalar")) y[i] = v + (float)av;
        else if (!strcmp(op, "rlx.silu")) y[i] = silu_d(v);
        else if (!strcmp(op, "rlx.gelu")) y[i] = 0.5 * v * (1 + erf(v / sqrt(2.0)));
        else if (!strcmp(op, "rlx.gelu_tanh")) y[i] = gelu_tanh_d(v);
        else if (!strcmp(op, "rlx.tanh")) y[i] = tanh(v);
        else if (!strcmp(op, "rlx.relu")) y[i] = v > 0 ? v : 0;
        else if (!strcmp(op, "rlx.sin")) y[i] = sin(v);
        else if (!strcmp(op, "rlx.cos")) y[i] = cos(v);
        else y[i] = av * tanh(v / av);
    }
    top o = {.op = op, .n_in = 1, .n_out = 1, .n_attrs = attr ? 1 : 0};
    o.in[0] = F(x, shp(2, 1, (int)n));
    o.out[0] = F(NULL, shp(2, 1, (int)n));
    rlx_attr a = RLX_ATTR_F(attr, av);
    o.attrs[0] = a;
    check1(&o, y);
    free(x), free(y);
}

START_TEST(test_unary)
{
    size_t sizes[] = {1, 7, 1001, 40000};
    for (int s = 0; s < 4; s++) {
        size_t n = sizes[s];
        unary_case("rlx.scale", "scale", 0.125, n, 4);
        unary_case("rlx.add_scalar", "value", -1.5, n, 4);
        unary_case("rlx.silu", NULL, 0, n, 12);
        unary_case("rlx.gelu", NULL, 0, n, 6);
        unary_case("rlx.gelu_tanh", NULL, 0, n, 6);
        unary_case("rlx.tanh", NULL, 0, n, 4);
        unary_case("rlx.softcap", "cap", 30.0, n, 100);
        unary_case("rlx.relu", NULL, 0, n, 4);
        unary_case("rlx.sin", NULL, 0, n, 20);
        unary_case("rlx.cos", NULL, 0, n, 20);
    }
}
END_TEST

/* far tails: no NaN, no cancellation to 0 where the value is not 0 */
START_TEST(test_activation_extremes)
{
    float x[13] = {-200, -100, -88.5f, -87, -20, -9, -5.5f, 0, 1e-30f, 20, 87, 89, 200};
    double y[13];
    for (int i = 0; i < 13; i++) y[i] = silu_d(x[i]);
    top o = {.op = "rlx.silu", .n_in = 1, .n_out = 1};
    o.in[0] = F(x, shp(1, 13));
    o.out[0] = F(NULL, shp(1, 13));
    check1(&o, y);
    float g[6] = {-9, -7, -6, -5.5f, -4, -3};
    double yg[6], yt[6];
    for (int i = 0; i < 6; i++) {
        double v = g[i], u = sqrt(2 / M_PI) * (v + 0.044715 * v * v * v);
        yg[i] = 0.5 * v * erfc(-v / sqrt(2.0));
        yt[i] = v / (1 + exp(-2 * u));
    }
    o.in[0] = F(g, shp(1, 6));
    o.out[0] = F(NULL, shp(1, 6));
    o.op = "rlx.gelu";
    check1(&o, yg);
    o.op = "rlx.gelu_tanh";
    check1(&o, yt);
}
END_TEST

static void gated_case(const char *op, size_t n)
{
    float *g = rnd(n, 5), *u = rnd(n, 2);
    double *y = dalloc(n);
    for (size_t i = 0; i < n; i++)
        y[i] = (strcmp(op, "rlx.swiglu") == 0 ? silu_d(g[i]) : gelu_tanh_d(g[i])) * u[i];
    top o = {.op = op, .n_in = 2, .n_out = 1};
    o.in[0] = F(g, shp(2, 3, (int)n / 3));
    o.in[1] = F(u, shp(2, 3, (int)n / 3));
    o.out[0] = F(NULL, shp(2, 3, (int)n / 3));
    check1(&o, y);
    free(g), free(u), free(y);
}

START_TEST(test_gated)
{
    gated_case("rlx.swiglu", 3 * 1001);
    gated_case("rlx.swiglu", 3 * 11000);
    gated_case("rlx.geglu_tanh", 3 * 1001);
}
END_TEST

/* ---------------------------------------------------------------- row ops */

static void softmax_case(int rows, int n, float range)
{
    float *x = rnd((size_t)(rows * n), range);
    double *y = dalloc((size_t)(rows * n));
    for (int r = 0; r < rows; r++) {
        double m = -INFINITY, s = 0;
        for (int i = 0; i < n; i++) m = fmax(m, x[r * n + i]);
        for (int i = 0; i < n; i++) s += exp(x[r * n + i] - m);
        for (int i = 0; i < n; i++) y[r * n + i] = exp(x[r * n + i] - m) / s;
    }
    top o = {.op = "rlx.softmax", .n_in = 1, .n_out = 1};
    o.in[0] = F(x, shp(2, rows, n));
    o.out[0] = F(NULL, shp(2, rows, n));
    check1(&o, y);
    free(x), free(y);
}

START_TEST(test_softmax)
{
    softmax_case(7, 1003, 10);
    softmax_case(3, 5, 2);
    softmax_case(1, 32000, 20);
    softmax_case(600, 33, 5);
}
END_TEST

/* the first largest of each row; a NaN loses to any number, and a row of NaN gives 0 */
START_TEST(test_argmax)
{
    enum { R = 5, N = 37 };
    float x[R * N];
    for (int i = 0; i < R * N; i++) x[i] = frand();
    x[0 * N + 9] = x[0 * N + 30] = 4; /* a tie: the first */
    x[1 * N + 0] = NAN, x[1 * N + 36] = 5; /* NaN first, the largest last */
    for (int i = 0; i < N; i++) x[2 * N + i] = NAN;
    x[3 * N + 20] = INFINITY, x[3 * N + 21] = NAN;
    for (int i = 0; i < N; i++) x[4 * N + i] = -INFINITY;
    int32_t want[R] = {9, 36, 0, 20, 0};
    top o = {.op = "rlx.argmax", .n_in = 1, .n_out = 1};
    o.in[0] = F(x, shp(2, R, N));
    o.out[0] = F(NULL, shp(1, R));
    o.out[0].dtype = RLX_I32;
    for (int k = 0; k < NH; k++) {
        void *res[2] = {NULL, NULL}; /* run_op's room for two outputs */
        rlx_diag d;
        rlx_diag_init(&d);
        ck_assert_msg(run_op(HND[k], &o, res, &d) == 0, "handle %d: %s", k, d.msg);
        for (int r = 0; r < R; r++)
            ck_assert_msg(((int32_t *)res[0])[r] == want[r], "handle %d row %d: %d, want %d", k, r,
                          ((int32_t *)res[0])[r], want[r]);
        free(res[0]);
    }
}
END_TEST

/* add_scalar on i32 positions: an integer add */
START_TEST(test_add_scalar_i32)
{
    int32_t x[4] = {0, 7, -3, 2147483646};
    top o = {.op = "rlx.add_scalar", .n_in = 1, .n_out = 1, .n_attrs = 1};
    o.in[0] = (tv){RLX_I32, shp(1, 4), x};
    o.out[0] = (tv){RLX_I32, shp(1, 4), NULL};
    rlx_attr a = RLX_ATTR_F("value", 1);
    o.attrs[0] = a;
    void *res[2] = {NULL, NULL};
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_msg(run_op(HND[0], &o, res, &d) == 0, "%s", d.msg);
    const int32_t *y = res[0], want[4] = {1, 8, -2, 2147483647};
    for (int i = 0; i < 4; i++) ck_assert_int_eq(y[i], want[i]);
    free(res[0]);
}
END_TEST

static void ref_rms(const float *x, const float *w, int H, double eps, int add_one, double *y)
{
    double ss = 0;
    for (int i = 0; i < H; i++) ss += (double)x[i] * x[i];
    double r = 1 / sqrt(ss / H + eps);
    for (int i = 0; i < H; i++) y[i] = x[i] * r * (add_one ? 1.0 + w[i] : w[i]);
}

static void rms_case(int rows, int H, int add_one)
{
    float *x = rnd((size_t)(rows * H), 3), *w = rnd((size_t)H, 1);
    double *y = dalloc((size_t)(rows * H));
    for (int r = 0; r < rows; r++) ref_rms(x + r * H, w, H, 1e-6, add_one, y + r * H);
    top o = {.op = "rlx.rms_norm", .n_in = 2, .n_out = 1, .n_attrs = 2};
    o.in[0] = F(x, shp(2, rows, H));
    o.in[1] = F(w, shp(1, H));
    o.out[0] = F(NULL, shp(2, rows, H));
    rlx_attr a0 = RLX_ATTR_F("eps", 1e-6), a1 = RLX_ATTR_I("add_one", add_one);
    o.attrs[0] = a0;
    o.attrs[1] = a1;
    check1(&o, y);
    free(x), free(w), free(y);
}

START_TEST(test_rms_norm)
{
    rms_case(5, 129, 0);
    rms_case(5, 129, 1);
    rms_case(300, 64, 0);
    rms_case(1, 1024, 1);
}
END_TEST

START_TEST(test_add_rms_norm)
{
    int rows = 9, H = 200;
    float *a = rnd((size_t)(rows * H), 2), *b = rnd((size_t)(rows * H), 2), *w = rnd((size_t)H, 1);
    double *s = dalloc((size_t)(rows * H)), *n = dalloc((size_t)(rows * H));
    float *sf = malloc(sizeof(float) * (size_t)(rows * H));
    for (int i = 0; i < rows * H; i++) {
        sf[i] = a[i] + b[i]; /* the sum is rounded to f32 before the norm, as add() then rms_norm() */
        s[i] = sf[i];
    }
    for (int r = 0; r < rows; r++) ref_rms(sf + r * H, w, H, 1e-5, 1, n + r * H);
    top o = {.op = "rlx.add_rms_norm", .n_in = 3, .n_out = 2, .n_attrs = 2};
    o.in[0] = F(a, shp(2, rows, H));
    o.in[1] = F(b, shp(2, rows, H));
    o.in[2] = F(w, shp(1, H));
    o.out[0] = F(NULL, shp(2, rows, H));
    o.out[1] = F(NULL, shp(2, rows, H));
    rlx_attr a0 = RLX_ATTR_F("eps", 1e-5), a1 = RLX_ATTR_I("add_one", 1);
    o.attrs[0] = a0;
    o.attrs[1] = a1;
    const double *refs[2] = {s, n};
    check_op(&o, refs, TOL);
    free(a), free(b), free(w), free(s), free(n), free(sf);
}
END_TEST

START_TEST(test_layer_norm)
{
    int rows = 6, H = 77;
    float *x = rnd((size_t)(rows * H), 3), *w = rnd((size_t)H, 1), *b = rnd((size_t)H, 1);
    for (int i = 0; i < rows * H; i++) x[i] += 5; /* a mean far from 0 */
    double *y = dalloc((size_t)(rows * H));
    for (int r = 0; r < rows; r++) {
        double mu = 0, var = 0;
        for (int i = 0; i < H; i++) mu += x[r * H + i];
        mu /= H;
        for (int i = 0; i < H; i++) var += (x[r * H + i] - mu) * (x[r * H + i] - mu);
        var /= H;
        for (int i = 0; i < H; i++) y[r * H + i] = (x[r * H + i] - mu) / sqrt(var + 1e-5) * w[i] + b[i];
    }
    top o = {.op = "rlx.layer_norm", .n_in = 3, .n_out = 1, .n_attrs = 1};
    o.in[0] = F(x, shp(2, rows, H));
    o.in[1] = F(w, shp(1, H));
    o.in[2] = F(b, shp(1, H));
    o.out[0] = F(NULL, shp(2, rows, H));
    rlx_attr a0 = RLX_ATTR_F("eps", 1e-5);
    o.attrs[0] = a0;
    check1(&o, y);
    free(x), free(w), free(b), free(y);
}
END_TEST

/* ---------------------------------------------------------------- rope */

static void rope_case(int T, int nh, int d, int rot, int pos0)
{
    int r = rot ? rot : d, half = r / 2;
    float *x = rnd((size_t)(T * nh * d), 2), *inv = malloc(sizeof(float) * (size_t)(d / 2));
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)T);
    for (int i = 0; i < d / 2; i++) inv[i] = (float)pow(10000.0, -2.0 * i / r);
    for (int t = 0; t < T; t++) pos[t] = pos0 + t * 3;
    double *y = dalloc((size_t)(T * nh * d));
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            const float *xr = x + (t * nh + h) * d;
            double *yr = y + (t * nh + h) * d;
            for (int i = 0; i < half; i++) {
                double th = (float)pos[t] * inv[i]; /* f32 angle, as transformers */
                th = (float)th;
                yr[i] = xr[i] * cos(th) - xr[i + half] * sin(th);
                yr[i + half] = xr[i + half] * cos(th) + xr[i] * sin(th);
            }
            for (int i = r; i < d; i++) yr[i] = xr[i];
        }
    top o = {.op = "rlx.rope", .n_in = 3, .n_out = 1, .n_attrs = 1};
    o.in[0] = F(x, shp(3, T, nh, d));
    o.in[1] = TV(RLX_I32, pos, shp(1, T));
    o.in[2] = F(inv, shp(1, d / 2));
    o.out[0] = F(NULL, shp(3, T, nh, d));
    rlx_attr a0 = RLX_ATTR_I("rot_dim", rot);
    o.attrs[0] = a0;
    check1(&o, y);
    free(x), free(inv), free(pos), free(y);
}

START_TEST(test_rope)
{
    rope_case(5, 3, 16, 0, 0);
    rope_case(7, 4, 64, 32, 100);
    rope_case(1, 8, 128, 0, 4000);
    rope_case(33, 2, 10, 4, 7);
}
END_TEST

/* ---------------------------------------------------------------- 16-bit rows */

static uint16_t to_h(int dt, float v)
{
    return dt == RLX_F16 ? rlx_f32_to_f16(v) : rlx_f32_to_bf16(v);
}

static float from_h(int dt, uint16_t v)
{
    return dt == RLX_F16 ? rlx_f16_to_f32(v) : rlx_bf16_to_f32(v);
}

/* o (f32 operands) with the float operands in mask (bit i: input i, bit 8 + i: output i)
 * in dtype dt: on every handle each 16-bit output is the f32 op's output rounded once,
 * bit for bit (the inputs are first rounded to values dt holds exactly, for both runs) */
static void half_io_case(const top *o, int dt, unsigned mask)
{
    top o32 = *o, o16 = *o;
    void *keep[5] = {0};
    for (int i = 0; i < o->n_in; i++) {
        if (!(mask & (1u << i))) continue;
        size_t n = numel(&o->in[i].shape);
        float *f = malloc(n * sizeof *f + 4);
        uint16_t *h = malloc(n * 2 + 2);
        for (size_t e = 0; e < n; e++) {
            h[e] = to_h(dt, ((const float *)o->in[i].data)[e]);
            f[e] = from_h(dt, h[e]);
        }
        o32.in[i].data = f;
        o16.in[i] = TV(dt, h, o->in[i].shape);
        keep[i] = f;
        o16.in[i].data = h;
    }
    for (int i = 0; i < o->n_out; i++)
        if (mask & (1u << (8 + i))) o16.out[i].dtype = dt;
    for (int k = 0; k < NH; k++) {
        void *r32[2], *r16[2];
        rlx_diag d;
        rlx_diag_init(&d);
        int rc = run_op(HND[k], &o32, r32, &d);
        ck_assert_msg(rc == 0, "%s f32 on handle %d: %s", o->op, k, d.msg);
        rc = run_op(HND[k], &o16, r16, &d);
        ck_assert_msg(rc == 0, "%s %s on handle %d: %s", o->op, dt == RLX_F16 ? "f16" : "bf16", k, d.msg);
        for (int i = 0; i < o->n_out; i++) {
            size_t n = numel(&o->out[i].shape);
            for (size_t e = 0; e < n; e++) {
                float v = ((const float *)r32[i])[e];
                if (mask & (1u << (8 + i))) {
                    uint16_t want = to_h(dt, v), got = ((const uint16_t *)r16[i])[e];
                    ck_assert_msg(got == want, "%s dt %d handle %d output %d [%zu]: 0x%04x, want 0x%04x (%g)", o->op,
                                  dt, k, i, e, got, want, (double)v);
                } else {
                    ck_assert_msg(memcmp(&v, (const float *)r16[i] + e, sizeof v) == 0,
                                  "%s dt %d handle %d output %d [%zu] differs", o->op, dt, k, i, e);
                }
            }
            free(r32[i]), free(r16[i]);
        }
    }
    for (int i = 0; i < o->n_in; i++)
        if (keep[i]) free(keep[i]), free((void *)o16.in[i].data);
}

START_TEST(test_rows_half)
{
    int rows = 9, H = 200, T = 7, nh = 4, d = 64;
    float *a = rnd((size_t)(rows * H), 2), *b = rnd((size_t)(rows * H), 2), *w = rnd((size_t)H, 1);
    float *x = rnd((size_t)(T * nh * d), 2), *inv = malloc(sizeof(float) * (size_t)(d / 2));
    int32_t pos[7] = {100, 103, 106, 109, 112, 115, 118};
    for (int i = 0; i < d / 2; i++) inv[i] = (float)pow(10000.0, -2.0 * i / 32);
    for (int dt = RLX_F16; dt <= RLX_BF16; dt++) {
        top rn = {.op = "rlx.rms_norm", .n_in = 2, .n_out = 1, .n_attrs = 2};
        rn.in[0] = F(a, shp(2, rows, H));
        rn.in[1] = F(w, shp(1, H));
        rn.out[0] = F(NULL, shp(2, rows, H));
        rlx_attr eps = RLX_ATTR_F("eps", 1e-5), one = RLX_ATTR_I("add_one", 1);
        rn.attrs[0] = eps;
        rn.attrs[1] = one;
        half_io_case(&rn, dt, 1u | 1u << 8);
        half_io_case(&rn, dt, 1u);      /* 16-bit in, f32 out */
        half_io_case(&rn, dt, 1u << 8); /* f32 in, 16-bit out */

        top an = {.op = "rlx.add_rms_norm", .n_in = 3, .n_out = 2, .n_attrs = 2};
        an.in[0] = F(a, shp(2, rows, H));
        an.in[1] = F(b, shp(2, rows, H));
        an.in[2] = F(w, shp(1, H));
        an.out[0] = F(NULL, shp(2, rows, H));
        an.out[1] = F(NULL, shp(2, rows, H));
        an.attrs[0] = eps;
        an.attrs[1] = one;
        half_io_case(&an, dt, 3u | 3u << 8); /* the norm reads the f32 sum, not the rounded one */
        an.in[1] = F(b, shp(1, H));          /* b broadcast over the rows */
        half_io_case(&an, dt, 3u | 1u << 9);

        top rp = {.op = "rlx.rope", .n_in = 3, .n_out = 1, .n_attrs = 1};
        rp.in[0] = F(x, shp(3, T, nh, d));
        rp.in[1] = TV(RLX_I32, pos, shp(1, T));
        rp.in[2] = F(inv, shp(1, d / 2));
        rp.out[0] = F(NULL, shp(3, T, nh, d));
        rlx_attr rot = RLX_ATTR_I("rot_dim", 32); /* a partial rotation: the rest copied */
        rp.attrs[0] = rot;
        half_io_case(&rp, dt, 1u | 1u << 8);

        const char *ops[] = {"rlx.add", "rlx.sub", "rlx.mul", "rlx.swiglu", "rlx.geglu_tanh"};
        for (int k = 0; k < 5; k++) {
            top e = {.op = ops[k], .n_in = 2, .n_out = 1};
            e.in[0] = F(a, shp(2, 5, 337)); /* 1,685 elements: a piece and a tail */
            e.in[1] = F(b, shp(2, 5, 337));
            e.out[0] = F(NULL, shp(2, 5, 337));
            half_io_case(&e, dt, 3u | 1u << 8);
            half_io_case(&e, dt, 1u); /* mixed: a 16-bit, b and the output f32 */
        }
    }
    /* a broadcast b stays f32: 16-bit operands there are refused, naming the rule */
    uint16_t ah[400] = {0}, bh[200] = {0};
    top bad = {.op = "rlx.add", .n_in = 2, .n_out = 1};
    bad.in[0] = TV(RLX_BF16, ah, shp(2, 2, 200));
    bad.in[1] = TV(RLX_BF16, bh, shp(1, 200));
    bad.out[0] = TV(RLX_BF16, NULL, shp(2, 2, 200));
    void *res[2];
    rlx_diag dg;
    rlx_diag_init(&dg);
    ck_assert_int_ne(run_op(HND[0], &bad, res, &dg), 0);
    ck_assert_msg(strstr(dg.msg, "16-bit operands need b of a's shape") != NULL, "%s", dg.msg);
    free(res[0]);
    free(a), free(b), free(w), free(x), free(inv);
}
END_TEST

/* ---------------------------------------------------------------- attention */

typedef struct attn_cfg {
    int T, S, nh, nkv, d, pos, causal, window, use_mask, use_pos, absent_slot;
    double softcap, scale;
} attn_cfg;

static void attention_case(attn_cfg c)
{
    float *q = rnd((size_t)(c.T * c.nh * c.d), 1), *k = rnd((size_t)(c.S * c.nkv * c.d), 1),
          *v = rnd((size_t)(c.S * c.nkv * c.d), 1), *mask = rnd((size_t)(c.T * c.S), 2);
    if (c.use_mask) /* a few keys masked out entirely */
        for (int i = 0; i < c.T * c.S; i += 7) mask[i] = -INFINITY;
    double scale = c.scale ? c.scale : 1 / sqrt((double)c.d);
    int p = c.use_pos ? c.pos : 0;
    double *y = dalloc((size_t)(c.T * c.nh * c.d)), *sc = dalloc((size_t)c.S);
    for (int t = 0; t < c.T; t++)
        for (int h = 0; h < c.nh; h++) {
            int kh = h / (c.nh / c.nkv);
            double m = -INFINITY;
            for (int j = 0; j < c.S; j++) {
                int valid = (!c.use_pos || j < p + c.T) && (!c.causal || j <= p + t) && (c.window <= 0 || j > p + t - c.window);
                if (!valid) {
                    sc[j] = -INFINITY;
                    continue;
                }
                double s = 0;
                for (int i = 0; i < c.d; i++)
                    s += (double)q[(t * c.nh + h) * c.d + i] * k[(j * c.nkv + kh) * c.d + i];
                s *= (float)scale;
                if (c.softcap > 0) s = c.softcap * tanh(s / c.softcap);
                if (c.use_mask) s += mask[t * c.S + j];
                sc[j] = s;
                m = fmax(m, s);
            }
            double l = 0;
            for (int j = 0; j < c.S; j++) l += sc[j] == -INFINITY ? 0 : exp(sc[j] - m);
            for (int i = 0; i < c.d; i++) {
                double acc = 0;
                for (int j = 0; j < c.S; j++)
                    if (sc[j] != -INFINITY) acc += exp(sc[j] - m) / l * v[(j * c.nkv + kh) * c.d + i];
                y[(t * c.nh + h) * c.d + i] = acc;
            }
        }
    int32_t posv[1] = {c.pos};
    top o = {.op = "rlx.attention", .n_in = 3, .n_out = 1};
    o.in[0] = F(q, shp(3, c.T, c.nh, c.d));
    o.in[1] = F(k, shp(3, c.S, c.nkv, c.d));
    o.in[2] = F(v, shp(3, c.S, c.nkv, c.d));
    if (c.use_pos) o.in[o.n_in++] = TV(RLX_I32, posv, shp(1, 1));
    else if (c.absent_slot) o.in[o.n_in++] = TV(-1, NULL, shp(1, 1));
    if (c.use_mask) o.in[o.n_in++] = F(mask, shp(2, c.T, c.S));
    o.out[0] = F(NULL, shp(3, c.T, c.nh, c.d));
    rlx_attr at[4] = {RLX_ATTR_F("scale", scale), RLX_ATTR_I("causal", c.causal),
                      RLX_ATTR_I("window", c.window), RLX_ATTR_F("softcap", c.softcap)};
    memcpy(o.attrs, at, sizeof at);
    o.n_attrs = 4;
    check1(&o, y);
    free(q), free(k), free(v), free(mask), free(y), free(sc);
}

START_TEST(test_attention_prefill)
{
    attention_case((attn_cfg){.T = 7, .S = 7, .nh = 4, .nkv = 2, .d = 16, .causal = 1});
    attention_case((attn_cfg){.T = 5, .S = 5, .nh = 3, .nkv = 3, .d = 24, .use_mask = 1, .absent_slot = 1});
    attention_case((attn_cfg){.T = 6, .S = 6, .nh = 2, .nkv = 1, .d = 8, .scale = 0.3});
    /* prefill into a longer cache: keys past pos + T are ignored */
    attention_case((attn_cfg){.T = 9, .S = 20, .nh = 4, .nkv = 2, .d = 32, .causal = 1, .use_pos = 1});
    /* without pos every key is valid, also when S differs from T (row and block paths) */
    attention_case((attn_cfg){.T = 3, .S = 11, .nh = 2, .nkv = 1, .d = 16});
    attention_case((attn_cfg){.T = 9, .S = 70, .nh = 4, .nkv = 2, .d = 32, .use_mask = 1});
    attention_case((attn_cfg){.T = 12, .S = 5, .nh = 2, .nkv = 2, .d = 8, .use_mask = 1, .absent_slot = 1});
}
END_TEST

START_TEST(test_attention_decode)
{
    attention_case((attn_cfg){.T = 1, .S = 40, .nh = 8, .nkv = 2, .d = 64, .pos = 23, .causal = 1, .use_pos = 1});
    attention_case((attn_cfg){.T = 1, .S = 300, .nh = 4, .nkv = 4, .d = 64, .pos = 299, .causal = 1, .use_pos = 1});
    attention_case((attn_cfg){.T = 1, .S = 16, .nh = 2, .nkv = 1, .d = 128, .pos = 0, .causal = 1, .use_pos = 1});
    /* 6 heads per kv head (groups of 4 and 2), head_dim and keys off the vector width */
    attention_case((attn_cfg){.T = 2, .S = 77, .nh = 12, .nkv = 2, .d = 40, .pos = 70, .causal = 1, .use_pos = 1,
                              .softcap = 30, .use_mask = 1});
    attention_case((attn_cfg){.T = 1, .S = 130, .nh = 3, .nkv = 1, .d = 72, .pos = 129, .causal = 1, .use_pos = 1});
    /* key chunks merged across tasks: a window that empties the first chunks, masked keys */
    attention_case((attn_cfg){.T = 1, .S = 300, .nh = 8, .nkv = 2, .d = 32, .pos = 290, .causal = 1, .use_pos = 1,
                              .window = 100, .use_mask = 1, .softcap = 10});
    attention_case((attn_cfg){.T = 3, .S = 200, .nh = 4, .nkv = 4, .d = 16, .pos = 150, .causal = 1, .use_pos = 1});
    /* more than 64 blocks of keys: chunks of several blocks each */
    attention_case((attn_cfg){.T = 1, .S = 4300, .nh = 2, .nkv = 1, .d = 16, .pos = 4299, .causal = 1, .use_pos = 1});
}
END_TEST

START_TEST(test_attention_everything)
{
    /* causal + window + softcap + mask + pos > 0, GQA */
    attention_case((attn_cfg){.T = 6, .S = 12, .nh = 4, .nkv = 1, .d = 24, .pos = 3, .causal = 1,
                              .window = 5, .softcap = 20, .use_mask = 1, .use_pos = 1});
    attention_case((attn_cfg){.T = 70, .S = 150, .nh = 6, .nkv = 2, .d = 40, .pos = 77, .causal = 1,
                              .window = 33, .softcap = 5, .use_mask = 1, .use_pos = 1});
    /* window without causal */
    attention_case((attn_cfg){.T = 10, .S = 10, .nh = 2, .nkv = 2, .d = 16, .window = 4});
}
END_TEST

START_TEST(test_attention_long)
{
    attention_case((attn_cfg){.T = 300, .S = 300, .nh = 4, .nkv = 2, .d = 64, .causal = 1});
    attention_case((attn_cfg){.T = 300, .S = 320, .nh = 2, .nkv = 1, .d = 64, .pos = 20, .causal = 1,
                              .window = 128, .use_pos = 1});
}
END_TEST

START_TEST(test_attention_pos_past_keys)
{
    float q[4 * 2] = {0}, k[4 * 2] = {0};
    int32_t pos[1] = {3};
    top o = {.op = "rlx.attention", .n_in = 4, .n_out = 1, .n_attrs = 1};
    o.in[0] = F(q, shp(3, 2, 1, 4));
    o.in[1] = F(k, shp(3, 2, 1, 4));
    o.in[2] = F(k, shp(3, 2, 1, 4));
    o.in[3] = TV(RLX_I32, pos, shp(1, 1));
    o.out[0] = F(NULL, shp(3, 2, 1, 4));
    rlx_attr a = RLX_ATTR_I("causal", 1);
    o.attrs[0] = a;
    void *res[2];
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(run_op(HND[1], &o, res, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "cpu: node 0 (rlx.attention): pos 3 + 2 query rows is past the 2 key rows");
    free(res[0]);
}
END_TEST

/* batched decode: row t is the new token of the sequence in slot slots[t] at pos[t] */
static void attention_rows_case(int T, int P, int S, int nh, int nkv, int d, const int32_t *pos,
                                const int32_t *slots, int window, double softcap)
{
    float *q = rnd((size_t)(T * nh * d), 1), *k = rnd((size_t)(P * S * nkv * d), 1),
          *v = rnd((size_t)(P * S * nkv * d), 1);
    double scale = 1 / sqrt((double)d), *y = dalloc((size_t)(T * nh * d)), *sc = dalloc((size_t)S);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            int kh = h / (nh / nkv), p = pos[t];
            const float *K = k + (size_t)slots[t] * S * nkv * d, *V = v + (size_t)slots[t] * S * nkv * d;
            double m = -INFINITY, l = 0;
            for (int j = 0; j <= p; j++) {
                if (window > 0 && j <= p - window) {
                    sc[j] = -INFINITY;
                    continue;
                }
                double s = 0;
                for (int i = 0; i < d; i++) s += (double)q[(t * nh + h) * d + i] * K[(j * nkv + kh) * d + i];
                s *= (float)scale;
                if (softcap > 0) s = softcap * tanh(s / softcap);
                sc[j] = s;
                m = fmax(m, s);
            }
            for (int j = 0; j <= p; j++) l += sc[j] == -INFINITY ? 0 : exp(sc[j] - m);
            for (int i = 0; i < d; i++) {
                double acc = 0;
                for (int j = 0; j <= p; j++)
                    if (sc[j] != -INFINITY) acc += exp(sc[j] - m) / l * V[(j * nkv + kh) * d + i];
                y[(t * nh + h) * d + i] = acc;
            }
        }
    top o = {.op = "rlx.attention_rows", .n_in = 5, .n_out = 1, .n_attrs = 3};
    o.in[0] = F(q, shp(3, T, nh, d));
    o.in[1] = F(k, shp(4, P, S, nkv, d));
    o.in[2] = F(v, shp(4, P, S, nkv, d));
    o.in[3] = TV(RLX_I32, pos, shp(1, T));
    o.in[4] = TV(RLX_I32, slots, shp(1, T));
    o.out[0] = F(NULL, shp(3, T, nh, d));
    rlx_attr at[3] = {RLX_ATTR_F("scale", scale), RLX_ATTR_I("window", window), RLX_ATTR_F("softcap", softcap)};
    memcpy(o.attrs, at, sizeof at);
    check1(&o, y);
    free(q), free(k), free(v), free(y), free(sc);
}

START_TEST(test_attention_rows)
{
    /* ragged: rows at different lengths, slots in any order, a slot left out, GQA */
    int32_t pos[5] = {0, 17, 5, 39, 1}, slots[5] = {3, 0, 5, 1, 2};
    attention_rows_case(5, 6, 40, 8, 2, 64, pos, slots, 0, 0);
    attention_rows_case(5, 6, 40, 4, 4, 24, pos, slots, 7, 20);
    int32_t one_pos[1] = {299}, one_slot[1] = {0};
    attention_rows_case(1, 1, 300, 4, 2, 128, one_pos, one_slot, 0, 0);

    /* a slot or position outside the pool is an execute error naming the row */
    float z[2 * 1 * 4] = {0};
    int32_t bp[2] = {1, 2}, bs[2] = {0, 2};
    top o = {.op = "rlx.attention_rows", .n_in = 5, .n_out = 1};
    o.in[0] = F(z, shp(3, 2, 1, 4));
    o.in[1] = F(z, shp(4, 2, 1, 1, 4));
    o.in[2] = F(z, shp(4, 2, 1, 1, 4));
    o.in[3] = TV(RLX_I32, bp, shp(1, 2));
    o.in[4] = TV(RLX_I32, bs, shp(1, 2));
    o.out[0] = F(NULL, shp(3, 2, 1, 4));
    void *res[2];
    rlx_diag dg;
    rlx_diag_init(&dg);
    ck_assert_int_eq(run_op(HND[1], &o, res, &dg), RLX_ERR_INVALID);
    ck_assert_str_eq(dg.msg, "cpu: node 0 (rlx.attention_rows): row 0: pos 1 outside [0, 1)");
    free(res[0]);
}
END_TEST

START_TEST(test_cache_write_rows)
{
    int P = 3, S = 6, nkv = 2, d = 4, T = 2, row = nkv * d;
    float *cache = rnd((size_t)(P * S * row), 1), *nw = rnd((size_t)(T * row), 1);
    int32_t pos[2] = {5, 0}, slots[2] = {2, 0};
    double *y = dalloc((size_t)(P * S * row));
    for (int i = 0; i < P * S * row; i++) y[i] = cache[i];
    for (int t = 0; t < T; t++)
        for (int i = 0; i < row; i++) y[((size_t)slots[t] * S + pos[t]) * row + i] = nw[t * row + i];
    top o = {.op = "rlx.cache_write_rows", .n_in = 4, .n_out = 1, .out0_aliases_in0 = 1};
    o.in[0] = F(cache, shp(4, P, S, nkv, d));
    o.in[1] = F(nw, shp(3, T, nkv, d));
    o.in[2] = TV(RLX_I32, pos, shp(1, T));
    o.in[3] = TV(RLX_I32, slots, shp(1, T));
    o.out[0] = F(NULL, shp(4, P, S, nkv, d));
    check1(&o, y);

    slots[1] = 3;
    void *res[2];
    rlx_diag dg;
    rlx_diag_init(&dg);
    ck_assert_int_eq(run_op(HND[1], &o, res, &dg), RLX_ERR_INVALID);
    ck_assert_str_eq(dg.msg, "cpu: node 0 (rlx.cache_write_rows): row 1: slot 3, pos 0 outside [0, 3) x [0, 6)");
    free(res[0]);
    free(cache), free(nw), free(y);
}
END_TEST

/* ---------------------------------------------------------------- data movement */

START_TEST(test_embedding)
{
    int V = 50, Hd = 33;
    float *tab = rnd((size_t)(V * Hd), 1);
    int32_t ids[5] = {3, 0, 49, 3, 17};
    double *y = dalloc(5 * (size_t)Hd);
    for (int t = 0; t < 5; t++)
        for (int i = 0; i < Hd; i++) y[t * Hd + i] = tab[ids[t] * Hd + i];
    top o = {.op = "rlx.embedding", .n_in = 2, .n_out = 1};
    o.in[0] = F(tab, shp(2, V, Hd));
    o.in[1] = TV(RLX_I32, ids, shp(1, 5));
    o.out[0] = F(NULL, shp(2, 5, Hd));
    check1(&o, y);

    int32_t bad[4] = {1, 2, 50, 0};
    o.in[1] = TV(RLX_I32, bad, shp(1, 4));
    o.out[0] = F(NULL, shp(2, 4, Hd));
    void *res[2];
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(run_op(HND[1], &o, res, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "cpu: node 0 (rlx.embedding): id 50 at position 2 is outside [0, 50)");
    free(res[0]);
    bad[2] = -1;
    rlx_diag_init(&d);
    ck_assert_int_eq(run_op(HND[0], &o, res, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "cpu: node 0 (rlx.embedding): id -1 at position 2 is outside [0, 50)");
    free(res[0]);
    free(tab), free(y);
}
END_TEST

START_TEST(test_cache_write)
{
    int S = 10, nkv = 2, d = 4, T = 3;
    float *cache = rnd((size_t)(S * nkv * d), 1), *nw = rnd((size_t)(T * nkv * d), 1);
    int32_t pos[1] = {4};
    double *y = dalloc((size_t)(S * nkv * d));
    for (int i = 0; i < S * nkv * d; i++) y[i] = cache[i];
    for (int i = 0; i < T * nkv * d; i++) y[4 * nkv * d + i] = nw[i];
    top o = {.op = "rlx.cache_write", .n_in = 3, .n_out = 1, .out0_aliases_in0 = 1};
    o.in[0] = F(cache, shp(3, S, nkv, d));
    o.in[1] = F(nw, shp(3, T, nkv, d));
    o.in[2] = TV(RLX_I32, pos, shp(1, 1));
    o.out[0] = F(NULL, shp(3, S, nkv, d));
    check1(&o, y);
    /* the last rows exactly */
    pos[0] = 7;
    for (int i = 0; i < S * nkv * d; i++) y[i] = cache[i];
    for (int i = 0; i < T * nkv * d; i++) y[7 * nkv * d + i] = nw[i];
    check1(&o, y);

    pos[0] = 8;
    void *res[2];
    rlx_diag dg;
    rlx_diag_init(&dg);
    ck_assert_int_eq(run_op(HND[1], &o, res, &dg), RLX_ERR_INVALID);
    ck_assert_str_eq(dg.msg, "cpu: node 0 (rlx.cache_write): pos 8 + 3 new rows is past the cache end (10 rows)");
    free(res[0]);
    pos[0] = -2;
    rlx_diag_init(&dg);
    ck_assert_int_eq(run_op(HND[1], &o, res, &dg), RLX_ERR_INVALID);
    ck_assert_str_eq(dg.msg, "cpu: node 0 (rlx.cache_write): pos -2 is negative");
    free(res[0]);
    free(cache), free(nw), free(y);
}
END_TEST

static void transpose_case(rlx_shape s, const int64_t *perm)
{
    size_t n = numel(&s);
    float *x = rnd(n, 1);
    double *y = dalloc(n);
    rlx_shape os = s;
    for (uint32_t i = 0; i < s.ndim; i++) os.dims[i] = s.dims[perm[i]];
    int64_t idx[RLX_MAX_DIMS];
    for (size_t o = 0; o < n; o++) {
        size_t rem = o;
        for (int i = (int)s.ndim - 1; i >= 0; i--) {
            idx[i] = (int64_t)(rem % (size_t)os.dims[i]);
            rem /= (size_t)os.dims[i];
        }
        size_t off = 0; /* input index: input axis perm[i] has coordinate idx[i] */
        int64_t in_idx[RLX_MAX_DIMS];
        for (uint32_t i = 0; i < s.ndim; i++) in_idx[perm[i]] = idx[i];
        for (uint32_t i = 0; i < s.ndim; i++) off = off * (size_t)s.dims[i] + (size_t)in_idx[i];
        y[o] = x[off];
    }
    top o = {.op = "rlx.transpose", .n_in = 1, .n_out = 1, .n_attrs = 1};
    o.in[0] = F(x, s);
    o.out[0] = F(NULL, os);
    rlx_attr a = RLX_ATTR_V("perm", perm, s.ndim);
    o.attrs[0] = a;
    check1(&o, y);
    free(x), free(y);
}

START_TEST(test_transpose)
{
    static const int64_t p1[] = {0, 2, 1, 3}, p2[] = {1, 0}, p3[] = {2, 0, 1}, p4[] = {0, 1, 2};
    transpose_case(shp(4, 2, 3, 4, 5), p1);
    transpose_case(shp(2, 37, 300), p2);
    transpose_case(shp(3, 2, 3, 5), p3);
    transpose_case(shp(3, 2, 3, 5), p4);
}
END_TEST

START_TEST(test_concat_slice_last_row_copy)
{
    float *a = rnd(2 * 3 * 4, 1), *b = rnd(2 * 5 * 4, 1);
    double y[2 * 8 * 4];
    for (int i = 0; i < 2; i++) {
        for (int j = 0; j < 12; j++) y[i * 32 + j] = a[i * 12 + j];
        for (int j = 0; j < 20; j++) y[i * 32 + 12 + j] = b[i * 20 + j];
    }
    top o = {.op = "rlx.concat", .n_in = 2, .n_out = 1, .n_attrs = 1};
    o.in[0] = F(a, shp(3, 2, 3, 4));
    o.in[1] = F(b, shp(3, 2, 5, 4));
    o.out[0] = F(NULL, shp(3, 2, 8, 4));
    rlx_attr ax = RLX_ATTR_I("axis", 1);
    o.attrs[0] = ax;
    check1(&o, y);
    /* last axis, negative */
    float *c = rnd(3 * 2, 1), *e = rnd(3 * 5, 1);
    double y2[3 * 7];
    for (int i = 0; i < 3; i++) {
        for (int j = 0; j < 2; j++) y2[i * 7 + j] = c[i * 2 + j];
        for (int j = 0; j < 5; j++) y2[i * 7 + 2 + j] = e[i * 5 + j];
    }
    top o2 = {.op = "rlx.concat", .n_in = 2, .n_out = 1, .n_attrs = 1};
    o2.in[0] = F(c, shp(2, 3, 2));
    o2.in[1] = F(e, shp(2, 3, 5));
    o2.out[0] = F(NULL, shp(2, 3, 7));
    rlx_attr ax2 = RLX_ATTR_I("axis", -1);
    o2.attrs[0] = ax2;
    check1(&o2, y2);

    /* slice [1, 4) of axis 1 of [3, 6, 5] */
    float *x = rnd(3 * 6 * 5, 1);
    double ys[3 * 3 * 5];
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int k = 0; k < 5; k++) ys[(i * 3 + j) * 5 + k] = x[(i * 6 + j + 1) * 5 + k];
    top o3 = {.op = "rlx.slice", .n_in = 1, .n_out = 1, .n_attrs = 3};
    o3.in[0] = F(x, shp(3, 3, 6, 5));
    o3.out[0] = F(NULL, shp(3, 3, 3, 5));
    rlx_attr s3[3] = {RLX_ATTR_I("axis", 1), RLX_ATTR_I("start", 1), RLX_ATTR_I("end", 4)};
    memcpy(o3.attrs, s3, sizeof s3);
    check1(&o3, ys);

    /* last_row of [5, 7] */
    double yl[7];
    for (int i = 0; i < 7; i++) yl[i] = x[4 * 7 + i];
    top o4 = {.op = "rlx.last_row", .n_in = 1, .n_out = 1};
    o4.in[0] = F(x, shp(2, 5, 7));
    o4.out[0] = F(NULL, shp(2, 1, 7));
    check1(&o4, yl);

    /* copy */
    double yc[90];
    for (int i = 0; i < 90; i++) yc[i] = x[i];
    top o5 = {.op = "rlx.copy", .n_in = 1, .n_out = 1};
    o5.in[0] = F(x, shp(2, 9, 10));
    o5.out[0] = F(NULL, shp(2, 9, 10));
    check1(&o5, yc);
    free(a), free(b), free(c), free(e), free(x);
}
END_TEST

/* collectives: over one rank a copy; over 2 ranks (two handles, one thread each, one
 * group) the sum in rank order / both ranks' rows side by side, the same on both */
typedef struct coll_rank {
    void *h;
    top o;
    void *res[2];
    rlx_diag d;
    int rc;
} coll_rank;

static void *coll_main(void *arg)
{
    coll_rank *r = arg;
    rlx_diag_init(&r->d);
    r->rc = run_op(r->h, &r->o, r->res, &r->d);
    return NULL;
}

static void coll_case(const char *op, int gather)
{
    float *x[2] = {rnd(3 * 4, 1), rnd(3 * 4, 1)};
    double one[12], want[2 * 12];
    for (int i = 0; i < 12; i++) one[i] = x[0][i];
    top o = {.op = op, .n_in = 1, .n_out = 1, .n_attrs = 0};
    o.in[0] = F(x[0], shp(2, 3, 4));
    o.out[0] = F(NULL, shp(2, 3, 4));
    check1(&o, one);
    coll_rank r[2];
    for (int k = 0; k < 2; k++) {
        r[k].h = HND[k];
        r[k].o = (top){.op = op, .n_in = 1, .n_out = 1, .n_attrs = 4};
        r[k].o.in[0] = F(x[k], shp(2, 3, 4));
        r[k].o.out[0] = F(NULL, shp(2, 3, gather ? 8 : 4));
        rlx_attr a[4] = {RLX_ATTR_I("ranks", 2), RLX_ATTR_I("rank", k), RLX_ATTR_I("group", 4242 + gather),
                         RLX_ATTR_I("axis", -1)};
        memcpy(r[k].o.attrs, a, sizeof a);
    }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++) {
            if (gather) {
                want[i * 8 + j] = x[0][i * 4 + j];
                want[i * 8 + 4 + j] = x[1][i * 4 + j];
            } else {
                want[i * 4 + j] = (double)(x[0][i * 4 + j] + x[1][i * 4 + j]);
            }
        }
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, coll_main, &r[1]), 0);
    coll_main(&r[0]);
    pthread_join(th, NULL);
    size_t n = gather ? 24 : 12;
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(r[k].rc == 0, "%s rank %d: %s", op, k, r[k].d.msg);
        ck_assert_msg(rel_l2(r[k].res[0], want, n) == 0, "%s rank %d differs", op, k);
    }
    free(r[0].res[0]), free(r[1].res[0]), free(x[0]), free(x[1]);
}

START_TEST(test_collectives)
{
    coll_case("rlx.all_reduce", 0);
    coll_case("rlx.all_gather", 1);
}
END_TEST

/* casts: outputs compared exactly on every handle */
static void cast_case(int from, const void *x, int to, const void *want, int n)
{
    top o = {.op = "rlx.cast", .n_in = 1, .n_out = 1, .n_attrs = 1};
    o.in[0] = TV(from, x, shp(1, n));
    o.out[0] = TV(to, NULL, shp(1, n));
    rlx_attr a = RLX_ATTR_I("dtype", to);
    o.attrs[0] = a;
    for (int k = 0; k < NH; k++) {
        void *res[2];
        rlx_diag d;
        rlx_diag_init(&d);
        ck_assert_msg(run_op(HND[k], &o, res, &d) == 0, "cast: %s", d.msg);
        ck_assert_msg(memcmp(res[0], want, (size_t)n * esize(to)) == 0, "cast %d -> %d differs", from, to);
        free(res[0]);
    }
}

START_TEST(test_cast)
{
    float f[8] = {-3.7f, 2.9f, 0.0f, 1e10f, -1e10f, 65504.0f, 1.0e-6f, 0.33333334f};
    int32_t i32[8] = {-3, 2, 0, INT32_MAX, INT32_MIN, 65504, 0, 0};
    cast_case(RLX_F32, f, RLX_I32, i32, 8);
    int64_t i64[8] = {-3, 2, 0, 10000000000LL, -10000000000LL, 65504, 0, 0};
    cast_case(RLX_F32, f, RLX_I64, i64, 8);
    int32_t ii[5] = {-7, 0, 5, 16777217, 123};
    float fi[5] = {-7.0f, 0.0f, 5.0f, 16777216.0f, 123.0f};
    cast_case(RLX_I32, ii, RLX_F32, fi, 5);
    int64_t li[4] = {5, -5, 4294967297LL, 0};
    int32_t lw[4] = {5, -5, 1, 0};
    cast_case(RLX_I64, li, RLX_I32, lw, 4);
    int64_t lb[5] = {-7, 0, 5, 16777217, 123};
    cast_case(RLX_I32, ii, RLX_I64, lb, 5);
    /* f16/bf16 against librlx's converters, and back */
    float g[12] = {-3.7f, 2.9f, 0.0f, -0.0f, 65504.0f, 65520.0f, 1e-6f, 6.1e-5f, 1e-8f, 0.33333334f,
                   INFINITY, 1.00048828125f};
    uint16_t h[12], bh[12];
    float hb[12], bb[12];
    for (int i = 0; i < 12; i++) {
        h[i] = rlx_f32_to_f16(g[i]);
        hb[i] = rlx_f16_to_f32(h[i]);
        bh[i] = rlx_f32_to_bf16(g[i]);
        bb[i] = rlx_bf16_to_f32(bh[i]);
    }
    cast_case(RLX_F32, g, RLX_F16, h, 12);
    cast_case(RLX_F16, h, RLX_F32, hb, 12);
    cast_case(RLX_F32, g, RLX_BF16, bh, 12);
    cast_case(RLX_BF16, bh, RLX_F32, bb, 12);
    /* every f16 bit pattern (but NaNs) round-trips through f32 */
    uint16_t *all = malloc(65536 * 2);
    float *allf = malloc(65536 * 4);
    int n = 0;
    for (uint32_t u = 0; u < 65536; u++) {
        if ((u & 0x7c00) == 0x7c00 && (u & 0x3ff)) continue;
        all[n] = (uint16_t)u;
        allf[n++] = rlx_f16_to_f32((uint16_t)u);
    }
    cast_case(RLX_F16, all, RLX_F32, allf, n);
    cast_case(RLX_F32, allf, RLX_F16, all, n);
    free(all), free(allf);
}
END_TEST

/* ---------------------------------------------------------------- image ops */

static void conv_case(ref_conv p, int bias)
{
    int64_t Ho, Wo, Cg = p.C / p.groups;
    ref_conv_out(&p, &Ho, &Wo);
    float *x = rnd((size_t)(p.C * p.H * p.W), 2), *w = rnd((size_t)(p.Co * Cg * p.kh * p.kw), 0.5f);
    float *b = rnd((size_t)p.Co, 1);
    double *y = dalloc((size_t)(p.Co * Ho * Wo));
    ref_conv2d(&p, x, w, bias ? b : NULL, y);
    top o = {.op = "rlx.conv2d", .n_in = bias ? 3 : 2, .n_out = 1, .n_attrs = 4};
    o.in[0] = F(x, shp(3, (int)p.C, (int)p.H, (int)p.W));
    o.in[1] = F(w, shp(4, (int)p.Co, (int)Cg, (int)p.kh, (int)p.kw));
    o.in[2] = F(b, shp(1, (int)p.Co));
    o.out[0] = F(NULL, shp(3, (int)p.Co, (int)Ho, (int)Wo));
    int64_t st[2] = {p.sh, p.sw}, pd[2] = {p.ph, p.pw}, dl[2] = {p.dh, p.dw};
    rlx_attr a0 = RLX_ATTR_V("stride", st, 2), a1 = RLX_ATTR_V("padding", pd, 2);
    rlx_attr a2 = RLX_ATTR_V("dilation", dl, 2), a3 = RLX_ATTR_I("groups", p.groups);
    o.attrs[0] = a0, o.attrs[1] = a1, o.attrs[2] = a2, o.attrs[3] = a3;
    check1(&o, y);
    free(x), free(w), free(b), free(y);
}

START_TEST(test_conv2d)
{
    /* C, H, W, Co, kh, kw, sh, sw, ph, pw, dh, dw, groups */
    conv_case((ref_conv){5, 9, 11, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1}, 1);   /* the VAE's 3x3 */
    conv_case((ref_conv){6, 5, 7, 4, 1, 1, 1, 1, 0, 0, 1, 1, 1}, 0);    /* 1x1 in place */
    conv_case((ref_conv){4, 10, 9, 6, 3, 2, 2, 1, 0, 1, 2, 1, 2}, 1);   /* strides, dilation, groups */
    conv_case((ref_conv){3, 16, 16, 8, 4, 4, 4, 4, 0, 0, 1, 1, 1}, 1);  /* patch embedding */
    conv_case((ref_conv){32, 40, 40, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1}, 1); /* several tiles */
    conv_case((ref_conv){3, 70, 70, 2, 1, 1, 1, 1, 0, 0, 1, 1, 1}, 1);  /* several 1x1 tiles */
    conv_case((ref_conv){4, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4}, 0);    /* depthwise */
}
END_TEST

START_TEST(test_conv2d_errors)
{
    float x[2 * 4 * 4] = {0}, w[3 * 2 * 5 * 5] = {0};
    top o = {.op = "rlx.conv2d", .n_in = 2, .n_out = 1};
    o.in[0] = F(x, shp(3, 2, 4, 4));
    o.in[1] = F(w, shp(4, 3, 2, 3, 3));
    o.out[0] = F(NULL, shp(3, 3, 4, 4)); /* no padding: 2x2 */
    void *res[2];
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(run_op(HND[1], &o, res, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "cpu: node 0 (rlx.conv2d): the output must be [3,2,2]");
    free(res[0]);
    o.in[1] = F(w, shp(4, 3, 1, 3, 3));
    rlx_diag_init(&d);
    ck_assert_int_eq(run_op(HND[1], &o, res, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "cpu: node 0 (rlx.conv2d): w has 1 input channels per group and 3 "
                            "outputs; x has 2 channels in 1 groups");
    free(res[0]);
}
END_TEST

static void group_norm_case(int C, int h, int w, int groups)
{
    int n = h * w;
    float *x = rnd((size_t)(C * n), 3), *gm = rnd((size_t)C, 1), *bt = rnd((size_t)C, 1);
    for (int i = 0; i < C * n; i++) x[i] += 4; /* a mean far from 0 */
    double *y = dalloc((size_t)(C * n));
    ref_group_norm(x, gm, bt, y, C, n, groups, 1e-6);
    top o = {.op = "rlx.group_norm", .n_in = 3, .n_out = 1, .n_attrs = 2};
    o.in[0] = F(x, shp(3, C, h, w));
    o.in[1] = F(gm, shp(1, C));
    o.in[2] = F(bt, shp(1, C));
    o.out[0] = o.in[0];
    o.out[0].data = NULL;
    rlx_attr a0 = RLX_ATTR_I("groups", groups), a1 = RLX_ATTR_F("eps", 1e-6);
    o.attrs[0] = a0, o.attrs[1] = a1;
    check1(&o, y);
    free(x), free(gm), free(bt), free(y);
}

START_TEST(test_group_norm)
{
    group_norm_case(8, 5, 7, 4);
    group_norm_case(12, 3, 3, 12);
    group_norm_case(6, 9, 13, 1);
    group_norm_case(64, 16, 16, 32);
}
END_TEST

START_TEST(test_upsample_nearest2d)
{
    for (int s = 1; s <= 3; s++) {
        int C = 3, H = 4, W = 5;
        float *x = rnd((size_t)(C * H * W), 1);
        double *y = dalloc((size_t)(C * H * W * s * s));
        ref_upsample_nearest(x, y, C, H, W, s);
        top o = {.op = "rlx.upsample_nearest2d", .n_in = 1, .n_out = 1, .n_attrs = 1};
        o.in[0] = F(x, shp(3, C, H, W));
        o.out[0] = F(NULL, shp(3, C, H * s, W * s));
        rlx_attr a0 = RLX_ATTR_I("scale", s);
        o.attrs[0] = a0;
        check1(&o, y);
        free(x), free(y);
    }
}
END_TEST

/* A two-node program: the same executable run twice, values kept in place. */
START_TEST(test_program_and_pool_reuse)
{
    for (int round = 0; round < 3; round++) {
        void *h = init_handle(2, NULL);
        float *x = rnd(64 * 96, 1), *w = rnd(96 * 96, 1);
        double *y = dalloc(64 * 96);
        ref_mm(x, w, NULL, 64, 96, 96, y);
        top o = {.op = "rlx.matmul", .n_in = 2, .n_out = 1};
        o.in[0] = F(x, shp(2, 64, 96));
        o.in[1] = F(w, shp(2, 96, 96));
        o.out[0] = F(NULL, shp(2, 64, 96));
        for (int rep = 0; rep < 20; rep++) {
            void *res[2];
            rlx_diag d;
            rlx_diag_init(&d);
            ck_assert_int_eq(run_op(h, &o, res, &d), 0);
            ck_assert(rel_l2(res[0], y, 64 * 96) < TOL);
            free(res[0]);
        }
        BE->teardown(h);
        free(x), free(w), free(y);
    }
}
END_TEST

START_TEST(test_init_options)
{
    rlx_backend_options opt;
    memset(&opt, 0, sizeof opt);
    opt.struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_backend_options, graphs);
    snprintf(opt.placement, sizeof opt.placement, "bogus");
    void *h = NULL;
    rlx_diag d;
    rlx_diag_init(&d);
    ck_assert_int_eq(BE->init(&opt, &h, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "cpu: backend.cpu.placement \"bogus\" is not one of cores, pus, none");
    opt.threads = -2;
    snprintf(opt.placement, sizeof opt.placement, "none");
    rlx_diag_init(&d);
    ck_assert_int_eq(BE->init(&opt, &h, &d), RLX_ERR_INVALID);
    ck_assert_str_eq(d.msg, "cpu: backend.cpu.threads -2 is outside 0..256");
    /* more workers than cores, unbound, and the default (one per core): same results */
    float *x = rnd(3 * 200, 1), *w = rnd(500 * 200, 1);
    double *y = dalloc(3 * 500);
    ref_mm(x, w, NULL, 3, 200, 500, y);
    top o = {.op = "rlx.matmul", .n_in = 2, .n_out = 1};
    o.in[0] = F(x, shp(2, 3, 200));
    o.in[1] = F(w, shp(2, 500, 200));
    o.out[0] = F(NULL, shp(2, 3, 500));
    int threads[3] = {3, 0, 0};
    const char *pl[3] = {"none", "pus", ""};
    for (int i = 0; i < 3; i++) {
        opt.threads = threads[i];
        snprintf(opt.placement, sizeof opt.placement, "%s", pl[i]);
        rlx_diag_init(&d);
        ck_assert_msg(BE->init(&opt, &h, &d) == 0, "init: %s", d.msg);
        void *res[2];
        ck_assert_int_eq(run_op(h, &o, res, &d), 0);
        ck_assert(rel_l2(res[0], y, 3 * 500) < TOL);
        free(res[0]);
        BE->teardown(h);
    }
    ck_assert_int_eq(BE->init(NULL, &h, &d), 0); /* no options: defaults */
    BE->teardown(h);
    free(x), free(w), free(y);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("cpu_ops");
    TCase *c = tcase_create("ops");
    tcase_add_checked_fixture(c, setup, teardown);
    tcase_set_timeout(c, 120);
    tcase_add_test(c, test_descriptor);
    tcase_add_test(c, test_rows_half);
    tcase_add_test(c, test_probe);
    tcase_add_test(c, test_unknown_op);
    tcase_add_test(c, test_bad_shape_is_compile_error);
    tcase_add_test(c, test_matmul_gemv);
    tcase_add_test(c, test_matmul_sgemm);
    tcase_add_test(c, test_matmul_half);
    tcase_add_test(c, test_matmul_nn);
    tcase_add_test(c, test_bmm);
    tcase_add_test(c, test_linear_swiglu);
    tcase_add_test(c, test_binary);
    tcase_add_test(c, test_unary);
    tcase_add_test(c, test_activation_extremes);
    tcase_add_test(c, test_gated);
    tcase_add_test(c, test_softmax);
    tcase_add_test(c, test_argmax);
    tcase_add_test(c, test_add_scalar_i32);
    tcase_add_test(c, test_rms_norm);
    tcase_add_test(c, test_add_rms_norm);
    tcase_add_test(c, test_layer_norm);
    tcase_add_test(c, test_rope);
    tcase_add_test(c, test_attention_prefill);
    tcase_add_test(c, test_attention_decode);
    tcase_add_test(c, test_attention_everything);
    tcase_add_test(c, test_attention_long);
    tcase_add_test(c, test_attention_pos_past_keys);
    tcase_add_test(c, test_embedding);
    tcase_add_test(c, test_cache_write);
    tcase_add_test(c, test_attention_rows);
    tcase_add_test(c, test_cache_write_rows);
    tcase_add_test(c, test_collectives);
    tcase_add_test(c, test_transpose);
    tcase_add_test(c, test_concat_slice_last_row_copy);
    tcase_add_test(c, test_cast);
    tcase_add_test(c, test_conv2d);
    tcase_add_test(c, test_conv2d_errors);
    tcase_add_test(c, test_group_norm);
    tcase_add_test(c, test_upsample_nearest2d);
    tcase_add_test(c, test_program_and_pool_reuse);
    tcase_add_test(c, test_init_options);
    suite_add_tcase(s, c);
    return s;
}

int main(void)
{
    return tu_run_suite(suite());
}
