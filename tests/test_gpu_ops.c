/* Every op of a GPU backend plugin against a naive double-precision reference.
 *
 * Standalone on purpose (no librlx, no Check): the device machines lack the project's
 * dev packages, so this program carries a minimal host table and only dlopens the
 * plugin. Exit 77 (skip) only when the plugin's probe reports no device; 0 when every
 * check passes; 1 otherwise. RLX_GPU_BENCH=1 also times sgemm and attention.
 * Usage: test_gpu_ops [plugin.so ...] (default: the plugins configure built). */
#define _GNU_SOURCE
#include "rlx/plugin.h"
#include "ref_spatial.h"

#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int failures, checks;
static uint64_t rng_state;
/* op programs as a 1.2 host hands them (no phase): the backend infers decode from rows, as
 * for any older host; the models' tests cover the phase the host states */
#define PROG_SIZE ((uint32_t)RLX_STRUCT_SIZE(rlx_program, arena_bytes))

static double rnd(void) /* uniform in [-1, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) / (double)(1ull << 53) * 2.0 - 1.0;
}

static void host_log(int level, const char *who, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "[%d %s] ", level, who ? who : "?");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static void host_diag_set(rlx_diag *d, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->msg, sizeof d->msg, fmt, ap);
    va_end(ap);
    d->code = code;
}

/* ---------------------------------------------------------------- tensors */

typedef struct tens {
    int dtype; /* RLX_F32, RLX_I32, RLX_F16 or RLX_BF16 */
    rlx_shape shape;
    float *f;    /* f32, and the values of a 16-bit tensor (exactly representable) */
    int32_t *i;
    uint16_t *h; /* f16 / bf16 bits */
} tens;

static int64_t tnumel(const tens *t)
{
    int64_t n = 1;
    for (uint32_t k = 0; k < t->shape.ndim; k++)
        n *= t->shape.dims[k];
    return n;
}

static int is_half(int dt) { return dt == RLX_F16 || dt == RLX_BF16; }

static size_t tbytes(const tens *t) { return (size_t)tnumel(t) * (is_half(t->dtype) ? 2 : 4); }

/* host conversions, round to nearest even (the device's rounding) */
static uint16_t f2bf(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf2f(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static float h2f(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(m + 1024, e - 25);
    return (float)((h & 0x8000) ? -v : v);
}

static uint16_t f2h(float f) /* finite values in range (the tests' data) */
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (a < ldexp(1, -24) / 2)
        return sign;
    int e;
    frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    int ex = e - 1 < -14 ? -14 : e - 1;
    double q = nearbyint(a / ldexp(1, ex - 10)); /* significand in units of the last place */
    if (q >= 2048) {
        q /= 2;
        ex++;
    }
    if (q < 1024)
        return (uint16_t)(sign | (uint16_t)q); /* subnormal */
    return (uint16_t)(sign | (uint16_t)((ex + 15) << 10) | (uint16_t)((int)q - 1024));
}

static float half_val(int dt, uint16_t h) { return dt == RLX_BF16 ? bf2f(h) : h2f(h); }

static tens mk(int dtype, int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    tens t;
    memset(&t, 0, sizeof t);
    t.dtype = dtype;
    t.shape.ndim = (uint32_t)ndim;
    int64_t dd[3] = {d0, d1, d2};
    for (int k = 0; k < ndim; k++)
        t.shape.dims[k] = dd[k];
    int64_t n = tnumel(&t);
    if (dtype == RLX_I32)
        t.i = calloc((size_t)n + 1, 4);
    else
        t.f = calloc((size_t)n + 1, 4);
    if (is_half(dtype))
        t.h = calloc((size_t)n + 1, 2);
    return t;
}

/* t's values rounded to dt, kept in f (the reference reads them) and as bits in h */
static tens as_half(const tens *t, int dt)
{
    tens o = mk(dt, (int)t->shape.ndim, t->shape.dims[0], t->shape.dims[1], t->shape.dims[2]);
    o.shape = t->shape;
    for (int64_t k = 0; k < tnumel(t); k++) {
        o.h[k] = dt == RLX_BF16 ? f2bf(t->f[k]) : f2h(t->f[k]);
        o.f[k] = half_val(dt, o.h[k]);
    }
    return o;
}

static tens rand_f(int ndim, int64_t d0, int64_t d1, int64_t d2, double amp)
{
    tens t = mk(RLX_F32, ndim, d0, d1, d2);
    for (int64_t k = 0; k < tnumel(&t); k++)
        t.f[k] = (float)(rnd() * amp);
    return t;
}

static void tfree(tens *t)
{
    free(t->f);
    free(t->i);
    free(t->h);
}

static void *tdata(const tens *t)
{
    return t->dtype == RLX_I32 ? (void *)t->i : is_half(t->dtype) ? (void *)t->h : (void *)t->f;
}

/* ---------------------------------------------------------------- plugin */

typedef struct gpu {
    const rlx_backend *b;
    void *be;
    const char *label;
} gpu;

/* Runs one node: ins uploaded, outs poisoned with NaN, executed, outs downloaded.
 * alias0: output 0 uses input 0's buffer (cache_write). Returns the execute status. */
static int run_node(gpu *g, const char *op, tens *ins, int n_in, tens *outs, int n_out,
                    const rlx_attr *attrs, int n_attrs, int alias0, rlx_diag *d)
{
    rlx_value_desc vals[12];
    int32_t in_ids[8], out_ids[2];
    void *ptrs[12];
    int nv = n_in + n_out, rc;
    memset(vals, 0, sizeof vals);
    memset(d, 0, sizeof *d);
    d->struct_size = sizeof *d;
    for (int k = 0; k < nv; k++) {
        tens *t = k < n_in ? &ins[k] : &outs[k - n_in];
        vals[k].struct_size = sizeof vals[k];
        vals[k].kind = k < n_in ? RLX_VALUE_INPUT : RLX_VALUE_OUTPUT;
        vals[k].dtype = t->dtype;
        vals[k].shape = t->shape;
        vals[k].name = "v";
        if (k < n_in)
            in_ids[k] = k;
        else
            out_ids[k - n_in] = k;
    }
    rlx_node_desc node = {sizeof node, op, in_ids, (uint32_t)n_in, out_ids, (uint32_t)n_out,
                          attrs, (uint32_t)n_attrs};
    rlx_program prog = {PROG_SIZE, vals, (uint32_t)nv, &node, 1, 0, 0};
    void *exe = NULL;
    if ((rc = g->b->compile(g->be, &prog, &exe, d)) != 0)
        return rc;
    for (int k = 0; k < nv; k++) {
        tens *t = k < n_in ? &ins[k] : &outs[k - n_in];
        size_t bytes = tbytes(t);
        if (k == n_in && alias0) {
            ptrs[k] = ptrs[0];
            continue;
        }
        ptrs[k] = g->b->alloc(g->be, bytes, d);
        if (!ptrs[k]) {
            fprintf(stderr, "alloc failed: %s\n", d->msg);
            exit(1);
        }
        if (k < n_in) {
            rc = g->b->upload(g->be, ptrs[k], tdata(t), bytes, d);
        } else {
            void *poison = malloc(bytes + 4);
            memset(poison, 0xff, bytes + 4); /* NaN: an unwritten element fails the check */
            rc = g->b->upload(g->be, ptrs[k], poison, bytes, d);
            free(poison);
        }
        if (rc) {
            fprintf(stderr, "upload failed: %s\n", d->msg);
            exit(1);
        }
    }
    /* twice, outputs poisoned again in between: the second run replays a captured graph */
    for (int rep = 0; rep < 2 && !rc; rep++) {
        for (int k = n_in + (alias0 ? 1 : 0); rep && k < nv; k++) {
            size_t bytes = tbytes(&outs[k - n_in]);
            void *poison = malloc(bytes + 4);
            memset(poison, 0xff, bytes + 4);
            rc = g->b->upload(g->be, ptrs[k], poison, bytes, d);
            free(poison);
        }
        if (!rc)
            rc = g->b->execute(g->be, exe, ptrs, d);
        if (!rc)
            rc = g->b->sync(g->be, d);
    }
    for (int k = 0; !rc && k < n_out; k++)
        rc = g->b->download(g->be, tdata(&outs[k]), ptrs[n_in + k], tbytes(&outs[k]), d);
    for (int k = 0; !rc && k < n_out; k++) /* 16-bit outputs read back as their values */
        for (int64_t e = 0; is_half(outs[k].dtype) && e < tnumel(&outs[k]); e++)
            outs[k].f[e] = half_val(outs[k].dtype, outs[k].h[e]);
    for (int k = 0; k < nv; k++)
        if (!(k == n_in && alias0))
            g->b->free(g->be, ptrs[k]);
    g->b->release(g->be, exe);
    return rc;
}

static double rel_l2(const tens *out, const double *ref)
{
    double num = 0, den = 0;
    for (int64_t k = 0; k < tnumel(out); k++) {
        double v = out->dtype == RLX_I32 ? (double)out->i[k] : (double)out->f[k];
        num += (v - ref[k]) * (v - ref[k]);
        den += ref[k] * ref[k];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void report(gpu *g, const char *what, double err, double tol)
{
    checks++;
    int ok = err < tol; /* NaN fails */
    if (!ok)
        failures++;
    printf("%-6s %-44s rel_l2 %.3e  %s\n", g->label, what, err, ok ? "ok" : "FAIL");
}

static void fail_msg(gpu *g, const char *what, const char *msg)
{
    checks++;
    failures++;
    printf("%-6s %-44s FAIL: %s\n", g->label, what, msg);
}

/* Runs and compares output k against ref[k] (each numel doubles). */
static void check(gpu *g, const char *what, const char *op, tens *ins, int n_in, tens *outs,
                  int n_out, const rlx_attr *attrs, int n_attrs, int alias0, double **ref,
                  double tol)
{
    rlx_diag d;
    int rc = run_node(g, op, ins, n_in, outs, n_out, attrs, n_attrs, alias0, &d);
    if (rc) {
        fail_msg(g, what, d.msg);
        return;
    }
    double worst = 0;
    for (int k = 0; k < n_out; k++) {
        double e = rel_l2(&outs[k], ref[k]);
        if (!(e <= worst))
            worst = e;
    }
    report(g, what, worst, tol);
}

/* a run that must fail (rc != 0) with a message holding needle */
static void error_verdict(gpu *g, const char *what, int rc, const char *msg, const char *needle)
{
    checks++;
    if (rc && strstr(msg, needle)) {
        printf("%-6s %-44s error ok: %s\n", g->label, what, msg);
    } else {
        failures++;
        printf("%-6s %-44s FAIL: rc %d, message '%s' lacks '%s'\n", g->label, what, rc, msg, needle);
    }
}

static void expect_error(gpu *g, const char *what, const char *op, tens *ins, int n_in,
                         tens *outs, int n_out, int alias0, const char *needle)
{
    rlx_diag d;
    int rc = run_node(g, op, ins, n_in, outs, n_out, NULL, 0, alias0, &d);
    error_verdict(g, what, rc, d.msg, needle);
}

#define TOL 1e-5

/* ---------------------------------------------------------------- references */

static double *dalloc(int64_t n) { return calloc((size_t)n + 1, sizeof(double)); }

static double silu_d(double x) { return x / (1 + exp(-x)); }
static double gelu_tanh_d(double x)
{
    return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
}

static void ref_matmul(const float *x, const float *w, const float *bias, double *y, int64_t M,
                       int64_t N, int64_t K, int w_nk)
{
    for (int64_t m = 0; m < M; m++)
        for (int64_t n = 0; n < N; n++) {
            double s = bias ? bias[n] : 0;
            for (int64_t k = 0; k < K; k++)
                s += (double)x[m * K + k] * (w_nk ? w[n * K + k] : w[k * N + n]);
            y[m * N + n] = s;
        }
}

static void test_matmul(gpu *g)
{
    int64_t M = 37, K = 129, N = 70;
    tens in[3] = {rand_f(3, 1, M, K, 1), rand_f(2, N, K, 0, 1), rand_f(1, N, 0, 0, 1)};
    tens out = mk(RLX_F32, 3, 1, M, N);
    double *r = dalloc(M * N);
    ref_matmul(in[0].f, in[1].f, in[2].f, r, M, N, K, 1);
    check(g, "matmul [1,37,129]x[70,129]^T + bias", "rlx.matmul", in, 3, &out, 1, NULL, 0, 0,
          &r, TOL);
    ref_matmul(in[0].f, in[1].f, NULL, r, M, N, K, 1);
    check(g, "matmul no bias", "rlx.matmul", in, 2, &out, 1, NULL, 0, 0, &r, TOL);
    tens b = rand_f(2, K, N, 0, 1), a2 = rand_f(2, M, K, 0, 1);
    tens nn[2] = {a2, b};
    tens o2 = mk(RLX_F32, 2, M, N, 0);
    ref_matmul(a2.f, b.f, NULL, r, M, N, K, 0);
    check(g, "matmul_nn [37,129]x[129,70]", "rlx.matmul_nn", nn, 2, &o2, 1, NULL, 0, 0, &r, TOL);
    /* linear_swiglu on the same shapes */
    tens wu = rand_f(2, N, K, 0, 1);
    tens ls[3] = {in[0], in[1], wu};
    double *gt = dalloc(M * N), *up = dalloc(M * N);
    ref_matmul(in[0].f, in[1].f, NULL, gt, M, N, K, 1);
    ref_matmul(in[0].f, wu.f, NULL, up, M, N, K, 1);
    for (int64_t k = 0; k < M * N; k++)
        r[k] = silu_d(gt[k]) * up[k];
    check(g, "linear_swiglu", "rlx.linear_swiglu", ls, 3, &out, 1, NULL, 0, 0, &r, TOL);
    free(gt);
    free(up);
    for (int k = 0; k < 3; k++)
        tfree(&in[k]);
    tfree(&out);
    tfree(&b);
    tfree(&a2);
    tfree(&o2);
    tfree(&wu);
    free(r);
}

static void test_elementwise(gpu *g)
{
    int64_t R = 33, H = 257, n = R * H;
    tens a = rand_f(2, R, H, 0, 3), bfull = rand_f(2, R, H, 0, 3), brow = rand_f(1, H, 0, 0, 3);
    tens out = mk(RLX_F32, 2, R, H, 0);
    double *r = dalloc(n);
    const char *bops[] = {"rlx.add", "rlx.sub", "rlx.mul", "rlx.swiglu", "rlx.geglu_tanh"};
    for (int o = 0; o < 5; o++)
        for (int bc = 0; bc < (o < 3 ? 2 : 1); bc++) {
            tens *b = bc ? &brow : &bfull;
            for (int64_t k = 0; k < n; k++) {
                double x = a.f[k], y = b->f[bc ? k % H : k];
                r[k] = o == 0 ? x + y : o == 1 ? x - y : o == 2 ? x * y
                       : o == 3 ? silu_d(x) * y : gelu_tanh_d(x) * y;
            }
            tens ins[2] = {a, *b};
            char what[64];
            snprintf(what, sizeof what, "%s%s", bops[o], bc ? " (broadcast [H])" : "");
            check(g, what, bops[o], ins, 2, &out, 1, NULL, 0, 0, &r, TOL);
        }
    struct {
        const char *op;
        rlx_attr at;
        int has;
    } uops[] = {
        {"rlx.scale", RLX_ATTR_F("scale", 0.37), 1}, {"rlx.add_scalar", RLX_ATTR_F("value", -1.25), 1},
        {"rlx.silu", RLX_ATTR_I("x", 0), 0},        {"rlx.gelu", RLX_ATTR_I("x", 0), 0},
        {"rlx.gelu_tanh", RLX_ATTR_I("x", 0), 0},   {"rlx.tanh", RLX_ATTR_I("x", 0), 0},
        {"rlx.softcap", RLX_ATTR_F("cap", 2.5), 1},
    };
    for (int o = 0; o < 7; o++) {
        for (int64_t k = 0; k < n; k++) {
            double x = a.f[k];
            r[k] = o == 0 ? x * (float)0.37 : o == 1 ? x - 1.25 : o == 2 ? silu_d(x)
                   : o == 3 ? 0.5 * x * (1 + erf(x / sqrt(2.0))) : o == 4 ? gelu_tanh_d(x)
                   : o == 5 ? tanh(x) : 2.5 * tanh(x / 2.5);
        }
        check(g, uops[o].op, uops[o].op, &a, 1, &out, 1, &uops[o].at, uops[o].has, 0, &r, TOL);
    }
    /* softmax over rows of 1000 */
    tens sx = rand_f(2, 13, 1000, 0, 8), so = mk(RLX_F32, 2, 13, 1000, 0);
    double *sr = dalloc(13000);
    for (int rr = 0; rr < 13; rr++) {
        double m = -INFINITY, s = 0;
        for (int k = 0; k < 1000; k++)
            m = fmax(m, sx.f[rr * 1000 + k]);
        for (int k = 0; k < 1000; k++)
            s += exp(sx.f[rr * 1000 + k] - m);
        for (int k = 0; k < 1000; k++)
            sr[rr * 1000 + k] = exp(sx.f[rr * 1000 + k] - m) / s;
    }
    check(g, "softmax [13,1000]", "rlx.softmax", &sx, 1, &so, 1, NULL, 0, 0, &sr, TOL);
    /* argmax over rows of a vocabulary: the first largest; a NaN never wins (a row of NaN: 0) */
    {
        enum { AR = 6, AN = 128256 };
        tens ax = rand_f(2, AR, AN, 0, 8), ay = mk(RLX_I32, 1, AR, 0, 0);
        ax.f[0 * AN + 70001] = ax.f[0 * AN + 127000] = 9; /* a tie */
        ax.f[1 * AN + 0] = NAN, ax.f[1 * AN + AN - 1] = 10;
        for (int k = 0; k < AN; k++)
            ax.f[2 * AN + k] = NAN;
        ax.f[3 * AN + 5] = INFINITY, ax.f[3 * AN + 6] = NAN;
        for (int k = 0; k < AN; k++)
            ax.f[4 * AN + k] = -INFINITY;
        double *ar = dalloc(AR);
        ar[0] = 70001, ar[1] = AN - 1, ar[2] = 0, ar[3] = 5, ar[4] = 0;
        for (int k = 1; k < AN; k++) /* row 5: plain random */
            if (ax.f[5 * AN + k] > ax.f[5 * AN + (int)ar[5]])
                ar[5] = k;
        check(g, "argmax [6,128256]", "rlx.argmax", &ax, 1, &ay, 1, NULL, 0, 0, &ar, 1e-12);
        /* a row wider than the most blocks cover at once (Qwen's vocabulary: threads loop), its
         * largest last and a tie inside it; rows of one block's width */
        static const int64_t shapes[2][2] = {{1, 151936}, {3, 100}};
        for (int c = 0; c < 2; c++) {
            const int64_t r_ = shapes[c][0], n_ = shapes[c][1];
            tens bx = rand_f(2, r_, n_, 0, 8), by = mk(RLX_I32, 1, r_, 0, 0);
            double *br = dalloc((size_t)r_);
            bx.f[n_ - 1] = 11, bx.f[n_ / 3] = 11; /* row 0: the earlier of the two */
            for (int64_t rr = 0; rr < r_; rr++)
                for (int64_t k = 1; k < n_; k++)
                    if (bx.f[rr * n_ + k] > bx.f[rr * n_ + (int64_t)br[rr]])
                        br[rr] = (double)k;
            char what[48];
            snprintf(what, sizeof what, "argmax [%lld,%lld]", (long long)r_, (long long)n_);
            check(g, what, "rlx.argmax", &bx, 1, &by, 1, NULL, 0, 0, &br, 1e-12);
            free(br);
            tfree(&bx);
            tfree(&by);
        }
        /* add_scalar on i32 positions */
        tens px = mk(RLX_I32, 1, 3, 0, 0), py = mk(RLX_I32, 1, 3, 0, 0);
        px.i[0] = 0, px.i[1] = 41, px.i[2] = -5;
        double pr[3] = {1, 42, -4}, *prp = pr;
        rlx_attr one = RLX_ATTR_F("value", 1);
        check(g, "add_scalar i32 [3]", "rlx.add_scalar", &px, 1, &py, 1, &one, 1, 0, &prp, 1e-12);
        tfree(&px);
        tfree(&py);
        free(ar);
        tfree(&ax);
        tfree(&ay);
    }
    /* norms */
    tens w = rand_f(1, H, 0, 0, 1), bb = rand_f(1, H, 0, 0, 1);
    for (int add_one = 0; add_one < 2; add_one++) {
        rlx_attr at[2] = {RLX_ATTR_F("eps", 1e-6), RLX_ATTR_I("add_one", add_one)};
        for (int64_t rr = 0; rr < R; rr++) {
            double ss = 0;
            for (int64_t k = 0; k < H; k++)
                ss += (double)a.f[rr * H + k] * a.f[rr * H + k];
            double inv = 1 / sqrt(ss / H + (double)(float)1e-6);
            for (int64_t k = 0; k < H; k++)
                r[rr * H + k] = a.f[rr * H + k] * inv * (add_one ? 1.0 + w.f[k] : w.f[k]);
        }
        tens ins[2] = {a, w};
        check(g, add_one ? "rms_norm add_one=1" : "rms_norm", "rlx.rms_norm", ins, 2, &out, 1, at,
              2, 0, &r, TOL);
    }
    {
        rlx_attr at[1] = {RLX_ATTR_F("eps", 1e-5)};
        for (int64_t rr = 0; rr < R; rr++) {
            double mu = 0, var = 0;
            for (int64_t k = 0; k < H; k++)
                mu += a.f[rr * H + k];
            mu /= H;
            for (int64_t k = 0; k < H; k++)
                var += (a.f[rr * H + k] - mu) * (a.f[rr * H + k] - mu);
            var /= H;
            for (int64_t k = 0; k < H; k++)
                r[rr * H + k] = (a.f[rr * H + k] - mu) / sqrt(var + (double)(float)1e-5) * w.f[k] + bb.f[k];
        }
        tens ins[3] = {a, w, bb};
        check(g, "layer_norm", "rlx.layer_norm", ins, 3, &out, 1, at, 1, 0, &r, TOL);
    }
    {
        rlx_attr at[2] = {RLX_ATTR_F("eps", 1e-6), RLX_ATTR_I("add_one", 0)};
        double *rs = dalloc(n);
        for (int64_t rr = 0; rr < R; rr++) {
            double ss = 0;
            for (int64_t k = 0; k < H; k++) {
                rs[rr * H + k] = (double)(a.f[rr * H + k] + bfull.f[rr * H + k]);
                ss += rs[rr * H + k] * rs[rr * H + k];
            }
            double inv = 1 / sqrt(ss / H + (double)(float)1e-6);
            for (int64_t k = 0; k < H; k++)
                r[rr * H + k] = rs[rr * H + k] * inv * w.f[k];
        }
        tens ins[3] = {a, bfull, w};
        tens outs[2] = {mk(RLX_F32, 2, R, H, 0), mk(RLX_F32, 2, R, H, 0)};
        double *refs[2] = {rs, r};
        check(g, "add_rms_norm (sum and norm outputs)", "rlx.add_rms_norm", ins, 3, outs, 2, at, 2,
              0, refs, TOL);
        tfree(&outs[0]);
        tfree(&outs[1]);
        free(rs);
    }
    tfree(&a);
    tfree(&bfull);
    tfree(&brow);
    tfree(&out);
    tfree(&sx);
    tfree(&so);
    tfree(&w);
    tfree(&bb);
    free(r);
    free(sr);
}

/* rlx.bmm both ways (odd sizes, several tiles) and the maps relu, sin, cos */
static void test_bmm_maps(gpu *g)
{
    int64_t B = 5, M = 19, N = 23, K = 37;
    for (int tb = 0; tb < 2; tb++) {
        tens a = rand_f(3, B, M, K, 1), b = tb ? rand_f(3, B, N, K, 1) : rand_f(3, B, K, N, 1);
        tens out = mk(RLX_F32, 3, B, M, N);
        double *r = dalloc(B * M * N);
        for (int64_t z = 0; z < B; z++)
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double s = 0;
                    for (int64_t k = 0; k < K; k++)
                        s += (double)a.f[(z * M + i) * K + k] *
                             (tb ? b.f[(z * N + j) * K + k] : b.f[(z * K + k) * N + j]);
                    r[(z * M + i) * N + j] = s;
                }
        tens ins[2] = {a, b};
        rlx_attr at = RLX_ATTR_I("trans_b", tb);
        check(g, tb ? "bmm [5,19,37]x[5,23,37]^T" : "bmm [5,19,37]x[5,37,23]", "rlx.bmm", ins, 2, &out, 1, &at, 1,
              0, &r, TOL);
        free(r);
        tfree(&a);
        tfree(&b);
        tfree(&out);
    }
    int64_t n = 33 * 257;
    tens x = rand_f(2, 33, 257, 0, 6), o = mk(RLX_F32, 2, 33, 257, 0);
    double *r = dalloc(n);
    const char *ops[3] = {"rlx.relu", "rlx.sin", "rlx.cos"};
    for (int k = 0; k < 3; k++) {
        for (int64_t i = 0; i < n; i++) r[i] = k == 0 ? fmax(x.f[i], 0.0) : k == 1 ? sin(x.f[i]) : cos(x.f[i]);
        check(g, ops[k], ops[k], &x, 1, &o, 1, NULL, 0, 0, &r, TOL);
    }
    free(r);
    tfree(&x);
    tfree(&o);
}

static void test_rope(gpu *g)
{
    int64_t T = 6, nh = 3, d = 64;
    for (int rot = 0; rot <= 32; rot += 32) {
        tens x = rand_f(3, T, nh, d, 1), pos = mk(RLX_I32, 1, T, 0, 0),
             inv = mk(RLX_F32, 1, d / 2, 0, 0), out = mk(RLX_F32, 3, T, nh, d);
        int64_t r = rot ? rot : d;
        for (int64_t t = 0; t < T; t++)
            pos.i[t] = (int32_t)(t == 0 ? 0 : 997 * t + 3);
        for (int64_t i = 0; i < d / 2; i++)
            inv.f[i] = (float)pow(10000.0, -2.0 * (double)i / (double)r);
        double *ref = dalloc(T * nh * d);
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < nh; h++) {
                const float *xr = x.f + (t * nh + h) * d;
                double *yr = ref + (t * nh + h) * d;
                for (int64_t j = 0; j < d; j++)
                    yr[j] = xr[j];
                for (int64_t i = 0; i < r / 2; i++) {
                    double th = (double)pos.i[t] * inv.f[i];
                    yr[i] = xr[i] * cos(th) - xr[i + r / 2] * sin(th);
                    yr[i + r / 2] = xr[i + r / 2] * cos(th) + xr[i] * sin(th);
                }
            }
        tens ins[3] = {x, pos, inv};
        rlx_attr at = RLX_ATTR_I("rot_dim", rot);
        check(g, rot ? "rope rot_dim=32 of 64, positions to 5k" : "rope full, positions to 5k",
              "rlx.rope", ins, 3, &out, 1, &at, 1, 0, &ref, TOL);
        tfree(&x);
        tfree(&pos);
        tfree(&inv);
        tfree(&out);
        free(ref);
    }
}

/* Naive attention per OPS.md, in double. */
static void ref_attention(const tens *q, const tens *k, const tens *v, int p, const float *mask,
                          double scale, int causal, int window, double cap, double *o)
{
    int T = (int)q->shape.dims[0], nh = (int)q->shape.dims[1], d = (int)q->shape.dims[2];
    int S = (int)k->shape.dims[0], nkv = (int)k->shape.dims[1];
    double *s = dalloc(S);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++) {
            int kh = h / (nh / nkv), at = (p < 0 ? 0 : p) + t; /* p < 0: no pos, all S keys valid */
            double m = -INFINITY, sum = 0;
            for (int j = 0; j < S; j++) {
                int ok = (p < 0 || j < p + T) && (!causal || j <= at) && (window <= 0 || j > at - window);
                if (!ok) {
                    s[j] = -INFINITY;
                    continue;
                }
                double acc = 0;
                for (int c = 0; c < d; c++)
                    acc += (double)q->f[((int64_t)t * nh + h) * d + c] *
                           k->f[((int64_t)j * nkv + kh) * d + c];
                acc *= scale;
                if (cap > 0)
                    acc = cap * tanh(acc / cap);
                if (mask)
                    acc += mask[(int64_t)t * S + j];
                s[j] = acc;
                m = fmax(m, acc);
            }
            for (int j = 0; j < S; j++)
                sum += s[j] == -INFINITY ? 0 : exp(s[j] - m);
            for (int c = 0; c < d; c++) {
                double acc = 0;
                for (int j = 0; j < S; j++)
                    if (s[j] != -INFINITY)
                        acc += exp(s[j] - m) / sum * v->f[((int64_t)j * nkv + kh) * d + c];
                o[((int64_t)t * nh + h) * d + c] = acc;
            }
        }
    free(s);
}

static void attn_case(gpu *g, const char *what, int T, int S, int nh, int nkv, int d, int p,
                      int causal, int window, double cap, int with_mask)
{
    tens in[5];
    int n = 0;
    in[n++] = rand_f(3, T, nh, d, 1);
    in[n++] = rand_f(3, S, nkv, d, 1);
    in[n++] = rand_f(3, S, nkv, d, 1);
    if (p >= 0) {
        in[n] = mk(RLX_I32, 1, 1, 0, 0);
        in[n++].i[0] = p;
    }
    if (with_mask) {
        in[n] = rand_f(2, T, S, 0, 2);
        for (int64_t k = 0; k < (int64_t)T * S; k += 7)
            in[n].f[k] = -INFINITY; /* some keys masked out entirely */
        for (int t = 0; t < T; t++)
            in[n].f[(int64_t)t * S] = 0.5f; /* every row keeps key 0 */
        n++;
    }
    double scale = 1.0 / sqrt((double)d) * 1.3;
    rlx_attr at[4] = {RLX_ATTR_F("scale", scale), RLX_ATTR_I("causal", causal),
                      RLX_ATTR_I("window", window), RLX_ATTR_F("softcap", cap)};
    tens out = mk(RLX_F32, 3, T, nh, d);
    double *ref = dalloc((int64_t)T * nh * d);
    ref_attention(&in[0], &in[1], &in[2], p, with_mask ? in[n - 1].f : NULL,
                  (double)(float)scale, causal, window, (double)(float)cap, ref);
    check(g, what, "rlx.attention", in, n, &out, 1, at, 4, 0, &ref, TOL);
    for (int k = 0; k < n; k++)
        tfree(&in[k]);
    tfree(&out);
    free(ref);
}

/* batched decode: row t of q is the token of the sequence in slot slots[t] of a pool of P
 * caches [P, S, nkv, d], at position pos[t]; each row against ref_attention on its slot */
static void attn_rows_case(gpu *g, const char *what, int T, int P, int S, int nh, int nkv, int d,
                           const int32_t *pos, const int32_t *slots, int window, double cap)
{
    tens in[5];
    in[0] = rand_f(3, T, nh, d, 1);
    in[1] = rand_f(3, (int64_t)P * S, nkv, d, 1);
    in[2] = rand_f(3, (int64_t)P * S, nkv, d, 1);
    for (int k = 1; k < 3; k++) {
        in[k].shape.ndim = 4;
        in[k].shape.dims[0] = P;
        in[k].shape.dims[1] = S;
        in[k].shape.dims[2] = nkv;
        in[k].shape.dims[3] = d;
    }
    in[3] = mk(RLX_I32, 1, T, 0, 0);
    in[4] = mk(RLX_I32, 1, T, 0, 0);
    memcpy(in[3].i, pos, (size_t)T * 4);
    memcpy(in[4].i, slots, (size_t)T * 4);
    double scale = 1.0 / sqrt((double)d);
    rlx_attr at[3] = {RLX_ATTR_F("scale", scale), RLX_ATTR_I("window", window), RLX_ATTR_F("softcap", cap)};
    tens out = mk(RLX_F32, 3, T, nh, d);
    double *ref = dalloc((int64_t)T * nh * d);
    for (int t = 0; t < T; t++) { /* one decode row of rlx.attention on the row's slot */
        tens q = mk(RLX_F32, 3, 1, nh, d), k = mk(RLX_F32, 3, S, nkv, d), v = mk(RLX_F32, 3, S, nkv, d);
        memcpy(q.f, in[0].f + (int64_t)t * nh * d, (size_t)nh * d * 4);
        memcpy(k.f, in[1].f + (int64_t)slots[t] * S * nkv * d, (size_t)S * nkv * d * 4);
        memcpy(v.f, in[2].f + (int64_t)slots[t] * S * nkv * d, (size_t)S * nkv * d * 4);
        ref_attention(&q, &k, &v, pos[t], NULL, (double)(float)scale, 1, window, (double)(float)cap,
                      ref + (int64_t)t * nh * d);
        tfree(&q);
        tfree(&k);
        tfree(&v);
    }
    check(g, what, "rlx.attention_rows", in, 5, &out, 1, at, 3, 0, &ref, TOL);
    in[4].i[0] = P; /* a slot outside the pool */
    expect_error(g, "attention_rows slot outside the pool", "rlx.attention_rows", in, 5, &out, 1, 0, "row 0");
    for (int k = 0; k < 5; k++)
        tfree(&in[k]);
    tfree(&out);
    free(ref);
}

static void cache_write_rows_case(gpu *g)
{
    int64_t P = 3, S = 6, nkv = 2, d = 8, T = 2, row = nkv * d;
    tens in[4];
    in[0] = rand_f(3, P * S, nkv, d, 1);
    in[0].shape.ndim = 4;
    in[0].shape.dims[0] = P;
    in[0].shape.dims[1] = S;
    in[0].shape.dims[2] = nkv;
    in[0].shape.dims[3] = d;
    in[1] = rand_f(3, T, nkv, d, 1);
    in[2] = mk(RLX_I32, 1, T, 0, 0);
    in[3] = mk(RLX_I32, 1, T, 0, 0);
    in[2].i[0] = 5, in[2].i[1] = 0, in[3].i[0] = 2, in[3].i[1] = 0;
    tens out = in[0];
    out.f = calloc((size_t)(P * S * row) + 1, 4);
    out.i = NULL, out.h = NULL;
    double *r = dalloc(P * S * row);
    for (int64_t k = 0; k < P * S * row; k++)
        r[k] = in[0].f[k];
    for (int64_t t = 0; t < T; t++)
        for (int64_t k = 0; k < row; k++)
            r[(in[3].i[t] * S + in[2].i[t]) * row + k] = in[1].f[t * row + k];
    check(g, "cache_write_rows (output aliases cache)", "rlx.cache_write_rows", in, 4, &out, 1, NULL, 0, 1, &r,
          1e-12);
    check(g, "cache_write_rows into a separate output", "rlx.cache_write_rows", in, 4, &out, 1, NULL, 0, 0, &r,
          1e-12);
    in[2].i[1] = 6; /* past the slot's rows */
    expect_error(g, "cache_write_rows past a slot's end", "rlx.cache_write_rows", in, 4, &out, 1, 1, "row 1");
    for (int k = 0; k < 4; k++)
        tfree(&in[k]);
    tfree(&out);
    free(r);
}

static void test_attention_rows(gpu *g)
{
    static const int32_t pos[5] = {0, 17, 5, 39, 1}, slots[5] = {3, 0, 5, 1, 2};
    attn_rows_case(g, "attention_rows ragged T=5 P=6 GQA 4:1 d=64", 5, 6, 40, 8, 2, 64, pos, slots, 0, 0);
    attn_rows_case(g, "attention_rows window=7 softcap=20 d=24", 5, 6, 40, 4, 4, 24, pos, slots, 7, 20);
    static const int32_t p1[1] = {299}, s1[1] = {0};
    attn_rows_case(g, "attention_rows T=1 pos=299 d=128", 1, 1, 300, 4, 2, 128, p1, s1, 0, 0);
    int32_t p64[64], s64[64];
    for (int t = 0; t < 64; t++)
        p64[t] = (t * 37) % 200, s64[t] = 63 - t;
    attn_rows_case(g, "attention_rows T=64 P=64 d=64 (1B shape)", 64, 64, 200, 32, 8, 64, p64, s64, 0, 0);
    cache_write_rows_case(g);
}

/* ABI 1.2: free memory of the device, named; copy and GEMM rates measured now */
static void test_abi12(gpu *g)
{
    rlx_diag d;
    memset(&d, 0, sizeof d);
    checks += 2;
    rlx_mem_info mi;
    memset(&mi, 0, sizeof mi);
    mi.struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_mem_info, device);
    int rc = g->b->struct_size >= RLX_STRUCT_SIZE(rlx_backend, mem_info) && g->b->mem_info
                 ? g->b->mem_info(g->be, &mi, &d) : -1;
    int ok = rc == 0 && mi.free_bytes > 0 && mi.total_bytes >= mi.free_bytes && !strncmp(mi.device, g->b->name, strlen(g->b->name));
    failures += !ok;
    printf("%-6s %-44s %s: %s, %.2f GiB free of %.2f GiB %s\n", g->label, "mem_info", ok ? "ok" : "FAIL", mi.device,
           (double)mi.free_bytes / 1073741824.0, (double)mi.total_bytes / 1073741824.0, rc ? d.msg : "");
    rlx_ceilings c;
    memset(&c, 0, sizeof c);
    c.struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_ceilings, gemm_library);
    c.gemm_m = 512, c.gemm_k = 2048, c.gemm_n = 8192, c.dtype = RLX_BF16;
    rc = g->b->struct_size >= RLX_STRUCT_SIZE(rlx_backend, measure_ceilings) && g->b->measure_ceilings
             ? g->b->measure_ceilings(g->be, &c, &d) : -1;
    ok = rc == 0 && c.copy_gb_per_s > 100 && c.gemm_gflops > 1000;
    failures += !ok;
    printf("%-6s %-44s %s: copy %.0f GB/s, GEMM bf16 [512,2048,8192] %.0f GFLOP/s (%s) %s\n", g->label,
           "measure_ceilings", ok ? "ok" : "FAIL", c.copy_gb_per_s, c.gemm_gflops, c.gemm_library, rc ? d.msg : "");
}

static void test_attention(gpu *g)
{
    attn_case(g, "attention T=300 causal nh=8 nkv=2 d=64", 300, 300, 8, 2, 64, -1, 1, 0, 0, 0);
    attn_case(g, "attention T=300 pos=100 S=512 GQA 4:1 d=128", 300, 512, 4, 1, 128, 100, 1, 0, 0,
              0);
    attn_case(g, "attention window=64 softcap=50 pos=20 d=256", 70, 128, 4, 2, 256, 20, 1, 64,
              50.0, 0);
    attn_case(g, "attention mask, not causal, d=80", 50, 50, 6, 3, 80, -1, 0, 0, 0, 1);
    attn_case(g, "attention no pos, S=90 > T=20, mask, d=64", 20, 90, 4, 2, 64, -1, 0, 0, 0, 1);
    attn_case(g, "attention T=1 pos=300 S=512 d=128", 1, 512, 8, 2, 128, 300, 1, 0, 0, 0);
    attn_case(g, "attention T=1 pos=0 d=64 window=4", 1, 16, 2, 2, 64, 0, 1, 4, 0, 0);
    attn_case(g, "attention T=37 pos=200 window=50 d=32", 37, 300, 4, 4, 32, 200, 1, 50, 0, 0);
    attn_case(g, "attention d=512 not causal (VAE mid-block)", 40, 40, 1, 1, 512, -1, 0, 0, 0, 0);
    /* decode: 6 query heads on one KV head (blocks of 4 and 2 heads), rows split over blocks
     * that merge in the last one; one query head per KV head; a row one block covers */
    attn_case(g, "attention T=1 pos=1400 S=1500 6:1 d=64", 1, 1500, 6, 1, 64, 1400, 1, 0, 0, 0);
    attn_case(g, "attention T=2 pos=2900 S=3000 4:4 d=128 mask", 2, 3000, 4, 4, 128, 2900, 1, 0, 0, 1);
    attn_case(g, "attention T=1 pos=40 S=2048 8:2 d=64", 1, 2048, 8, 2, 64, 40, 1, 0, 0, 0);
    test_attention_rows(g);
}

static void test_layout(gpu *g)
{
    /* embedding */
    {
        int64_t V = 50, H = 64, T = 7;
        tens tab = rand_f(2, V, H, 0, 1), ids = mk(RLX_I32, 1, T, 0, 0), out = mk(RLX_F32, 2, T, H, 0);
        for (int64_t t = 0; t < T; t++)
            ids.i[t] = (int32_t)((t * 13 + 5) % V);
        ids.i[T - 1] = (int32_t)(V - 1);
        double *r = dalloc(T * H);
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H; h++)
                r[t * H + h] = tab.f[ids.i[t] * H + h];
        tens ins[2] = {tab, ids};
        check(g, "embedding", "rlx.embedding", ins, 2, &out, 1, NULL, 0, 0, &r, 1e-12);
        ids.i[3] = (int32_t)V;
        expect_error(g, "embedding id out of range", "rlx.embedding", ins, 2, &out, 1, 0, "id 50");
        tfree(&tab);
        tfree(&ids);
        tfree(&out);
        free(r);
    }
    /* cache_write */
    {
        int64_t S = 16, nkv = 2, d = 8, T = 3;
        tens cache = rand_f(3, S, nkv, d, 1), nw = rand_f(3, T, nkv, d, 1),
             pos = mk(RLX_I32, 1, 1, 0, 0), out = mk(RLX_F32, 3, S, nkv, d);
        pos.i[0] = 5;
        double *r = dalloc(S * nkv * d);
        for (int64_t k = 0; k < S * nkv * d; k++)
            r[k] = cache.f[k];
        for (int64_t k = 0; k < T * nkv * d; k++)
            r[5 * nkv * d + k] = nw.f[k];
        tens ins[3] = {cache, nw, pos};
        check(g, "cache_write rows 5..7 (output aliases cache)", "rlx.cache_write", ins, 3, &out,
              1, NULL, 0, 1, &r, 1e-12);
        check(g, "cache_write into a separate output", "rlx.cache_write", ins, 3, &out, 1, NULL, 0,
              0, &r, 1e-12);
        pos.i[0] = 14;
        expect_error(g, "cache_write past the end", "rlx.cache_write", ins, 3, &out, 1, 1,
                     "rows 14..16");
        tfree(&cache);
        tfree(&nw);
        tfree(&pos);
        tfree(&out);
        free(r);
    }
    /* transpose */
    {
        tens x = rand_f(3, 3, 4, 5, 1), out = mk(RLX_F32, 3, 5, 3, 4);
        int64_t perm[3] = {2, 0, 1};
        rlx_attr at = RLX_ATTR_V("perm", perm, 3);
        double *r = dalloc(60);
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 4; b++)
                for (int c = 0; c < 5; c++)
                    r[(c * 3 + a) * 4 + b] = x.f[(a * 4 + b) * 5 + c];
        check(g, "transpose [3,4,5] perm 2,0,1", "rlx.transpose", &x, 1, &out, 1, &at, 1, 0, &r,
              1e-12);
        tfree(&x);
        tfree(&out);
        free(r);
    }
    /* concat, slice, last_row, copy, cast */
    {
        tens a = rand_f(3, 2, 3, 4, 1), b = rand_f(3, 2, 5, 4, 1), out = mk(RLX_F32, 3, 2, 8, 4);
        rlx_attr at = RLX_ATTR_I("axis", 1);
        double *r = dalloc(64);
        for (int o = 0; o < 2; o++)
            for (int k = 0; k < 32; k++)
                r[o * 32 + k] = k < 12 ? a.f[o * 12 + k] : b.f[o * 20 + k - 12];
        tens ins[2] = {a, b};
        check(g, "concat axis 1", "rlx.concat", ins, 2, &out, 1, &at, 1, 0, &r, 1e-12);
        tens s_out = mk(RLX_F32, 3, 2, 4, 4);
        rlx_attr sat[3] = {RLX_ATTR_I("axis", 1), RLX_ATTR_I("start", 2), RLX_ATTR_I("end", 6)};
        for (int o = 0; o < 2; o++)
            for (int k = 0; k < 16; k++)
                r[o * 16 + k] = out.f[o * 32 + 8 + k];
        /* slices the concat result (already checked) */
        check(g, "slice axis 1 [2,6)", "rlx.slice", &out, 1, &s_out, 1, sat, 3, 0, &r, 1e-12);
        tens lr = mk(RLX_F32, 2, 1, 4, 0), x2 = rand_f(2, 6, 4, 0, 1);
        for (int k = 0; k < 4; k++)
            r[k] = x2.f[20 + k];
        check(g, "last_row [6,4]", "rlx.last_row", &x2, 1, &lr, 1, NULL, 0, 0, &r, 1e-12);
        tens cp = mk(RLX_F32, 2, 6, 4, 0);
        for (int k = 0; k < 24; k++)
            r[k] = x2.f[k];
        check(g, "copy", "rlx.copy", &x2, 1, &cp, 1, NULL, 0, 0, &r, 1e-12);
        /* the collectives over one rank are copies (over several: tests/test_tp_gpu) */
        tens ar = mk(RLX_F32, 2, 6, 4, 0), ag = mk(RLX_F32, 2, 6, 4, 0);
        rlx_attr one[3] = {RLX_ATTR_I("ranks", 1), RLX_ATTR_I("rank", 0), RLX_ATTR_I("group", 7)};
        check(g, "all_reduce over 1 rank", "rlx.all_reduce", &x2, 1, &ar, 1, one, 3, 0, &r, 1e-12);
        check(g, "all_gather over 1 rank", "rlx.all_gather", &x2, 1, &ag, 1, one, 3, 0, &r, 1e-12);
        tens ci = mk(RLX_I32, 2, 6, 4, 0);
        rlx_attr cat = RLX_ATTR_I("dtype", RLX_I32);
        for (int k = 0; k < 24; k++) {
            x2.f[k] *= 100;
            r[k] = (double)(int32_t)x2.f[k];
        }
        check(g, "cast f32 -> i32", "rlx.cast", &x2, 1, &ci, 1, &cat, 1, 0, &r, 1e-12);
        tens cf = mk(RLX_F32, 2, 6, 4, 0);
        rlx_attr cat2 = RLX_ATTR_I("dtype", RLX_F32);
        check(g, "cast i32 -> f32", "rlx.cast", &ci, 1, &cf, 1, &cat2, 1, 0, &r, 1e-12);
        tfree(&a);
        tfree(&b);
        tfree(&out);
        tfree(&s_out);
        tfree(&lr);
        tfree(&x2);
        tfree(&cp);
        tfree(&ar);
        tfree(&ag);
        tfree(&ci);
        tfree(&cf);
        free(r);
    }
}

/* ---------------------------------------------------------------- 16-bit */

/* a 16-bit output holds its value rounded once: bf16 has 8 significant bits, f16 11 */
#define TOL_BF16 6e-3
#define TOL_F16 1e-3
static double tol_of(int dt) { return dt == RLX_BF16 ? TOL_BF16 : dt == RLX_F16 ? TOL_F16 : TOL; }
static const char *dtn(int dt) { return dt == RLX_BF16 ? "bf16" : dt == RLX_F16 ? "f16" : "f32"; }

/* rand_f, in dtype dt (rounded values) */
static tens rand_t(int dt, int ndim, int64_t d0, int64_t d1, int64_t d2, double amp)
{
    tens t = rand_f(ndim, d0, d1, d2, amp);
    if (!is_half(dt))
        return t;
    tens h = as_half(&t, dt);
    tfree(&t);
    return h;
}

/* y = x·wᵀ (+ bias) or silu(x·wᵀ)·(x·wuᵀ) with x, w, y in the given dtypes */
static void mm_case(gpu *g, int64_t M, int64_t K, int64_t N, int xdt, int wdt, int ydt, int bias,
                    int glu)
{
    tens in[3] = {rand_t(xdt, 2, M, K, 0, 1), rand_t(wdt, 2, N, K, 0, 1),
                  glu ? rand_t(wdt, 2, N, K, 0, 1) : rand_f(1, N, 0, 0, 1)};
    tens out = mk(ydt, 2, M, N, 0);
    double *r = dalloc(M * N), *u = dalloc(M * N);
    ref_matmul(in[0].f, in[1].f, bias && !glu ? in[2].f : NULL, r, M, N, K, 1);
    if (glu) {
        ref_matmul(in[0].f, in[2].f, NULL, u, M, N, K, 1);
        for (int64_t k = 0; k < M * N; k++)
            r[k] = silu_d(r[k]) * u[k];
    }
    /* an f32 product of 16-bit x through cuBLAS rounds x to the weight's dtype */
    double tol = fmax(tol_of(ydt), xdt != wdt ? tol_of(is_half(xdt) ? xdt : wdt) : 0);
    char what[96];
    snprintf(what, sizeof what, "%s M=%lld K=%lld N=%lld %s.%s->%s%s", glu ? "linear_swiglu" : "matmul",
             (long long)M, (long long)K, (long long)N, dtn(xdt), dtn(wdt), dtn(ydt),
             bias && !glu ? " +bias" : "");
    check(g, what, glu ? "rlx.linear_swiglu" : "rlx.matmul", in, glu || bias ? 3 : 2, &out, 1, NULL,
          0, 0, &r, tol);
    for (int k = 0; k < 3; k++)
        tfree(&in[k]);
    tfree(&out);
    free(r);
    free(u);
}

static void attn_case_t(gpu *g, int dt, int T, int S, int nh, int nkv, int d, int p, int window,
                        double cap, int with_mask)
{
    tens in[5];
    int n = 0;
    in[n++] = rand_t(dt, 3, T, nh, d, 1);
    in[n++] = rand_t(dt, 3, S, nkv, d, 1);
    in[n++] = rand_t(dt, 3, S, nkv, d, 1);
    in[n] = mk(RLX_I32, 1, 1, 0, 0);
    in[n++].i[0] = p;
    if (with_mask) {
        in[n] = rand_f(2, T, S, 0, 2);
        for (int64_t k = 0; k < (int64_t)T * S; k += 5)
            in[n].f[k] = -INFINITY;
        n++;
    }
    double scale = 1.0 / sqrt((double)d);
    rlx_attr at[4] = {RLX_ATTR_F("scale", scale), RLX_ATTR_I("causal", 1),
                      RLX_ATTR_I("window", window), RLX_ATTR_F("softcap", cap)};
    tens out = mk(dt, 3, T, nh, d);
    double *ref = dalloc((int64_t)T * nh * d);
    ref_attention(&in[0], &in[1], &in[2], p, with_mask ? in[n - 1].f : NULL, (double)(float)scale,
                  1, window, (double)(float)cap, ref);
    char what[96];
    snprintf(what, sizeof what, "attention %s T=%d pos=%d S=%d %d:%d d=%d%s%s%s", dtn(dt), T, p, S,
             nh, nkv, d, window ? " window" : "", cap > 0 ? " softcap" : "", with_mask ? " mask" : "");
    check(g, what, "rlx.attention", in, n, &out, 1, at, 4, 0, &ref, tol_of(dt));
    for (int k = 0; k < n; k++)
        tfree(&in[k]);
    tfree(&out);
    free(ref);
}

static void test_half(gpu *g)
{
    /* casts: exact against the host's rounding */
    for (int dt = RLX_F16; dt <= RLX_BF16; dt++) {
        tens x = rand_f(2, 31, 65, 0, 40), h = mk(dt, 2, 31, 65, 0), back = mk(RLX_F32, 2, 31, 65, 0);
        tens hr = as_half(&x, dt);
        double *r = dalloc(31 * 65);
        for (int64_t k = 0; k < 31 * 65; k++)
            r[k] = hr.f[k];
        rlx_attr a1 = RLX_ATTR_I("dtype", dt), a2 = RLX_ATTR_I("dtype", RLX_F32);
        char what[64];
        snprintf(what, sizeof what, "cast f32 -> %s (round to nearest even)", dtn(dt));
        check(g, what, "rlx.cast", &x, 1, &h, 1, &a1, 1, 0, &r, 1e-12);
        snprintf(what, sizeof what, "cast %s -> f32", dtn(dt));
        check(g, what, "rlx.cast", &hr, 1, &back, 1, &a2, 1, 0, &r, 1e-12);
        tfree(&x);
        tfree(&h);
        tfree(&back);
        tfree(&hr);
        free(r);
    }
    /* matmuls: the skinny kernel (M <= 16; K % 8 == 0 vectorised, else per element) and GEMM */
    mm_case(g, 1, 1024, 300, RLX_F32, RLX_F32, RLX_F32, 0, 0);
    mm_case(g, 1, 2048, 517, RLX_BF16, RLX_BF16, RLX_BF16, 0, 0);
    mm_case(g, 5, 1024, 260, RLX_F32, RLX_BF16, RLX_F32, 1, 0);
    mm_case(g, 16, 512, 129, RLX_F16, RLX_F16, RLX_F16, 1, 0);
    mm_case(g, 3, 129, 70, RLX_F32, RLX_F32, RLX_F32, 1, 0);
    mm_case(g, 2, 200, 64, RLX_BF16, RLX_F32, RLX_BF16, 0, 0);
    mm_case(g, 1, 1024, 300, RLX_BF16, RLX_BF16, RLX_BF16, 0, 1);
    mm_case(g, 7, 256, 100, RLX_F32, RLX_F32, RLX_F32, 0, 1);
    mm_case(g, 37, 136, 70, RLX_BF16, RLX_BF16, RLX_BF16, 1, 0);
    mm_case(g, 37, 129, 70, RLX_F32, RLX_BF16, RLX_F32, 0, 0);
    mm_case(g, 64, 256, 96, RLX_F16, RLX_F16, RLX_F16, 0, 0);
    mm_case(g, 40, 128, 72, RLX_F16, RLX_F16, RLX_F32, 1, 0);
    mm_case(g, 37, 136, 70, RLX_BF16, RLX_BF16, RLX_BF16, 0, 1);
    /* batched rows, 16-bit x in the weights' dtype, N % 16 and K % 32 zero: tensor cores
     * (k_gemv_mma.cu), 2..16 rows (one or two n8 tiles), bias, SwiGLU, K over 1..32 steps a warp;
     * 17..32 rows (a batched step of more sequences) on cuBLAS */
    mm_case(g, 8, 2048, 528, RLX_BF16, RLX_BF16, RLX_BF16, 1, 0);
    mm_case(g, 9, 1024, 256, RLX_F16, RLX_F16, RLX_F32, 0, 0);
    mm_case(g, 16, 8192, 64, RLX_BF16, RLX_BF16, RLX_BF16, 0, 0);
    mm_case(g, 2, 288, 48, RLX_F16, RLX_F16, RLX_F16, 0, 1);
    mm_case(g, 13, 512, 128, RLX_BF16, RLX_BF16, RLX_BF16, 0, 1);
    mm_case(g, 3, 32, 16, RLX_BF16, RLX_BF16, RLX_F32, 1, 0);
    mm_case(g, 32, 2048, 256, RLX_BF16, RLX_BF16, RLX_BF16, 1, 0);
    mm_case(g, 24, 1024, 96, RLX_F16, RLX_F16, RLX_F32, 0, 1);
    mm_case(g, 17, 512, 64, RLX_BF16, RLX_BF16, RLX_BF16, 0, 0);
    /* the same over K of several load rounds a warp: 4 (8192), 2.5 (5120: the last one
     * half full), 2 with warp 0 one step more (4128), 2 (4096); one and two n8 tiles of
     * rows, a bias, 16-bit and f32 outputs */
    mm_case(g, 8, 8192, 2048, RLX_BF16, RLX_BF16, RLX_BF16, 0, 0);
    mm_case(g, 6, 5120, 1024, RLX_F16, RLX_F16, RLX_F32, 1, 0);
    mm_case(g, 12, 4128, 256, RLX_BF16, RLX_BF16, RLX_BF16, 1, 0);
    mm_case(g, 2, 4096, 16, RLX_F16, RLX_F16, RLX_F16, 0, 0);
    /* one row, few columns over a long K: the skinny kernel splits K over 2 or 4 warps */
    mm_case(g, 1, 4104, 70, RLX_BF16, RLX_BF16, RLX_BF16, 1, 0);
    mm_case(g, 1, 1031, 90, RLX_F32, RLX_F16, RLX_F32, 0, 0);
    mm_case(g, 1, 4096, 33, RLX_F32, RLX_F32, RLX_F32, 0, 1);
    /* attention: the split-key decode path (T <= 8) and the tiled one */
    attn_case_t(g, RLX_BF16, 1, 512, 8, 2, 64, 300, 0, 0, 0);
    attn_case_t(g, RLX_F16, 4, 700, 8, 2, 128, 600, 0, 30.0, 1);
    attn_case_t(g, RLX_F32, 3, 600, 4, 4, 80, 400, 100, 0, 0);
    attn_case_t(g, RLX_F32, 1, 2048, 32, 8, 64, 2000, 0, 0, 0);
    attn_case_t(g, RLX_BF16, 1, 300, 2, 1, 256, 5, 0, 0, 0);
    attn_case_t(g, RLX_BF16, 100, 256, 4, 2, 64, 50, 0, 0, 0);
    attn_case_t(g, RLX_BF16, 8, 1000, 8, 2, 64, 600, 300, 0, 0);
    attn_case_t(g, RLX_F16, 4, 2000, 16, 2, 64, 1900, 0, 20.0, 0);
    attn_case_t(g, RLX_BF16, 2, 900, 4, 4, 128, 800, 0, 0, 1);
    attn_case_t(g, RLX_F16, 1, 1500, 6, 1, 64, 1400, 0, 0, 0);
    attn_case_t(g, RLX_BF16, 3, 9000, 8, 2, 64, 8500, 0, 0, 0);
    /* prefill on tensor cores (k_attn_mma.cu): head dims 64/128/256, partial tiles */
    attn_case_t(g, RLX_BF16, 300, 300, 8, 2, 128, 0, 0, 0, 0);
    attn_case_t(g, RLX_F16, 70, 200, 4, 2, 256, 100, 64, 30.0, 1);
    attn_case_t(g, RLX_BF16, 129, 129, 8, 2, 64, 0, 0, 0, 1);
    attn_case_t(g, RLX_F16, 530, 600, 2, 1, 64, 60, 0, 0, 0);
    /* norms, rope, elementwise and data movement in 16 bits (weights and tables f32 or 16-bit) */
    int64_t R = 9, H = 320;
    for (int dt = RLX_F16; dt <= RLX_BF16; dt++) {
        tens a = rand_t(dt, 2, R, H, 0, 3), b = rand_t(dt, 2, R, H, 0, 3), w = rand_f(1, H, 0, 0, 1);
        tens out = mk(dt, 2, R, H, 0), sum = mk(dt, 2, R, H, 0);
        double *r = dalloc(16 * H * 2), *rs = dalloc(R * H); /* r: up to the cache's rows */
        rlx_attr at[2] = {RLX_ATTR_F("eps", 1e-6), RLX_ATTR_I("add_one", 0)};
        for (int64_t rr = 0; rr < R; rr++) {
            double ss = 0;
            for (int64_t k = 0; k < H; k++) {
                ss += (double)a.f[rr * H + k] * a.f[rr * H + k];
                rs[rr * H + k] = (double)a.f[rr * H + k] + b.f[rr * H + k];
            }
            for (int64_t k = 0; k < H; k++)
                r[rr * H + k] = a.f[rr * H + k] / sqrt(ss / H + 1e-6) * w.f[k];
        }
        char what[64];
        tens ins[3] = {a, w};
        snprintf(what, sizeof what, "rms_norm %s (weight f32)", dtn(dt));
        check(g, what, "rlx.rms_norm", ins, 2, &out, 1, at, 2, 0, &r, tol_of(dt));
        for (int64_t rr = 0; rr < R; rr++) {
            double ss = 0;
            for (int64_t k = 0; k < H; k++)
                ss += rs[rr * H + k] * rs[rr * H + k];
            for (int64_t k = 0; k < H; k++)
                r[rr * H + k] = rs[rr * H + k] / sqrt(ss / H + 1e-6) * w.f[k];
        }
        tens ins3[3] = {a, b, w}, outs[2] = {sum, out};
        double *refs[2] = {rs, r};
        snprintf(what, sizeof what, "add_rms_norm %s", dtn(dt));
        check(g, what, "rlx.add_rms_norm", ins3, 3, outs, 2, at, 2, 0, refs, tol_of(dt));
        for (int64_t k = 0; k < R * H; k++)
            r[k] = silu_d(a.f[k]) * b.f[k];
        tens ins2[2] = {a, b};
        snprintf(what, sizeof what, "swiglu %s", dtn(dt));
        check(g, what, "rlx.swiglu", ins2, 2, &out, 1, NULL, 0, 0, &r, tol_of(dt));
        for (int64_t k = 0; k < R * H; k++)
            r[k] = (double)a.f[k] + b.f[k];
        snprintf(what, sizeof what, "add %s", dtn(dt));
        check(g, what, "rlx.add", ins2, 2, &out, 1, NULL, 0, 0, &r, tol_of(dt));
        for (int64_t rr = 0; rr < R; rr++) {
            double m = -INFINITY, sm = 0;
            for (int64_t k = 0; k < H; k++)
                m = fmax(m, a.f[rr * H + k]);
            for (int64_t k = 0; k < H; k++)
                sm += exp(a.f[rr * H + k] - m);
            for (int64_t k = 0; k < H; k++)
                r[rr * H + k] = exp(a.f[rr * H + k] - m) / sm;
        }
        snprintf(what, sizeof what, "softmax %s", dtn(dt));
        check(g, what, "rlx.softmax", &a, 1, &out, 1, NULL, 0, 0, &r, tol_of(dt));
        /* layout: exact */
        int64_t perm[2] = {1, 0};
        rlx_attr pat = RLX_ATTR_V("perm", perm, 2);
        tens tr = mk(dt, 2, H, R, 0);
        for (int64_t rr = 0; rr < R; rr++)
            for (int64_t k = 0; k < H; k++)
                r[k * R + rr] = a.f[rr * H + k];
        snprintf(what, sizeof what, "transpose %s", dtn(dt));
        check(g, what, "rlx.transpose", &a, 1, &tr, 1, &pat, 1, 0, &r, 1e-12);
        tens cat = mk(dt, 2, R, 2 * H, 0);
        rlx_attr cax = RLX_ATTR_I("axis", 1);
        for (int64_t rr = 0; rr < R; rr++)
            for (int64_t k = 0; k < 2 * H; k++)
                r[rr * 2 * H + k] = k < H ? a.f[rr * H + k] : b.f[rr * H + k - H];
        snprintf(what, sizeof what, "concat %s", dtn(dt));
        check(g, what, "rlx.concat", ins2, 2, &cat, 1, &cax, 1, 0, &r, 1e-12);
        tens cache = rand_t(dt, 2, 16, H, 0, 1), pos = mk(RLX_I32, 1, 1, 0, 0), co = mk(dt, 2, 16, H, 0);
        pos.i[0] = 6;
        for (int64_t k = 0; k < 16 * H; k++)
            r[k] = k >= 6 * H && k < 15 * H ? a.f[k - 6 * H] : cache.f[k];
        tens cw[3] = {cache, a, pos};
        snprintf(what, sizeof what, "cache_write %s", dtn(dt));
        check(g, what, "rlx.cache_write", cw, 3, &co, 1, NULL, 0, 1, &r, 1e-12);
        /* rope: x in dt, inv_freq f32 */
        int64_t T = 5, nh = 2, d = 64;
        tens x = rand_t(dt, 3, T, nh, d, 1), ps = mk(RLX_I32, 1, T, 0, 0), inv = mk(RLX_F32, 1, d / 2, 0, 0),
             ro = mk(dt, 3, T, nh, d);
        for (int64_t t = 0; t < T; t++)
            ps.i[t] = (int32_t)(t * 311 + 7);
        for (int64_t i = 0; i < d / 2; i++)
            inv.f[i] = (float)pow(10000.0, -2.0 * (double)i / (double)d);
        for (int64_t t = 0; t < T; t++)
            for (int64_t hh = 0; hh < nh; hh++)
                for (int64_t i = 0; i < d / 2; i++) {
                    const float *xr = x.f + (t * nh + hh) * d;
                    double th = (double)ps.i[t] * inv.f[i], *yr = r + (t * nh + hh) * d;
                    yr[i] = xr[i] * cos(th) - xr[i + d / 2] * sin(th);
                    yr[i + d / 2] = xr[i + d / 2] * cos(th) + xr[i] * sin(th);
                }
        tens ri[3] = {x, ps, inv};
        snprintf(what, sizeof what, "rope %s", dtn(dt));
        check(g, what, "rlx.rope", ri, 3, &ro, 1, NULL, 0, 0, &r, tol_of(dt));
        /* embedding: a 16-bit table into 16 bits (exact) and into f32 */
        tens tab = rand_t(dt, 2, 40, H, 0, 1), ids = mk(RLX_I32, 1, 3, 0, 0);
        tens e16 = mk(dt, 2, 3, H, 0), e32 = mk(RLX_F32, 2, 3, H, 0);
        for (int t = 0; t < 3; t++)
            ids.i[t] = 39 - 13 * t;
        for (int t = 0; t < 3; t++)
            for (int64_t k = 0; k < H; k++)
                r[t * H + k] = tab.f[ids.i[t] * H + k];
        tens ei[2] = {tab, ids};
        snprintf(what, sizeof what, "embedding %s -> %s", dtn(dt), dtn(dt));
        check(g, what, "rlx.embedding", ei, 2, &e16, 1, NULL, 0, 0, &r, 1e-12);
        snprintf(what, sizeof what, "embedding %s -> f32", dtn(dt));
        check(g, what, "rlx.embedding", ei, 2, &e32, 1, NULL, 0, 0, &r, 1e-12);
        tens all[] = {a, b, w, out, sum, tr, cat, cache, pos, co, x, ps, inv, ro, tab, ids, e16, e32};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
            tfree(&all[k]);
        free(r);
        free(rs);
    }
}

/* ---------------------------------------------------------------- timing */

/* ---------------------------------------------------------------- image ops */

static tens rand_4(int64_t d0, int64_t d1, int64_t d2, int64_t d3, double amp)
{
    tens t = rand_f(3, d0, d1, d2 * d3, amp);
    t.shape.ndim = 4;
    t.shape.dims[2] = d2;
    t.shape.dims[3] = d3;
    return t;
}

static void conv_case(gpu *g, const char *what, ref_conv p, int bias)
{
    int64_t Ho, Wo;
    ref_conv_out(&p, &Ho, &Wo);
    tens in[3] = {rand_f(3, p.C, p.H, p.W, 2), rand_4(p.Co, p.C / p.groups, p.kh, p.kw, 0.5),
                  rand_f(1, p.Co, 0, 0, 1)};
    tens out = mk(RLX_F32, 3, p.Co, Ho, Wo);
    double *r = dalloc(p.Co * Ho * Wo);
    ref_conv2d(&p, in[0].f, in[1].f, bias ? in[2].f : NULL, r);
    int64_t st[2] = {p.sh, p.sw}, pd[2] = {p.ph, p.pw}, dl[2] = {p.dh, p.dw};
    rlx_attr at[4] = {RLX_ATTR_V("stride", st, 2), RLX_ATTR_V("padding", pd, 2),
                      RLX_ATTR_V("dilation", dl, 2), RLX_ATTR_I("groups", p.groups)};
    check(g, what, "rlx.conv2d", in, bias ? 3 : 2, &out, 1, at, 4, 0, &r, TOL);
    for (int k = 0; k < 3; k++)
        tfree(&in[k]);
    tfree(&out);
    free(r);
}

static void test_spatial(gpu *g)
{
    /* C, H, W, Co, kh, kw, sh, sw, ph, pw, dh, dw, groups */
    conv_case(g, "conv2d 3x3 pad 1 + bias", (ref_conv){5, 9, 11, 7, 3, 3, 1, 1, 1, 1, 1, 1, 1}, 1);
    conv_case(g, "conv2d 1x1", (ref_conv){6, 5, 7, 4, 1, 1, 1, 1, 0, 0, 1, 1, 1}, 0);
    conv_case(g, "conv2d stride/dilation/groups", (ref_conv){4, 10, 9, 6, 3, 2, 2, 1, 0, 1, 2, 1, 2},
              1);
    conv_case(g, "conv2d 32->20 ch 3x3 on 40x40", (ref_conv){32, 40, 40, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1},
              1);
    conv_case(g, "conv2d depthwise", (ref_conv){4, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4}, 0);
    /* group_norm on [C, h, w] */
    int64_t C = 64, h = 16, w = 16, groups = 32;
    tens gx = rand_f(3, C, h, w, 3), gm = rand_f(1, C, 0, 0, 1), bt = rand_f(1, C, 0, 0, 1);
    for (int64_t k = 0; k < C * h * w; k++)
        gx.f[k] += 4.0f;
    tens gin[3] = {gx, gm, bt}, gout = mk(RLX_F32, 3, C, h, w);
    double *r = dalloc(C * h * w);
    ref_group_norm(gx.f, gm.f, bt.f, r, C, h * w, groups, 1e-6);
    rlx_attr ga[2] = {RLX_ATTR_I("groups", groups), RLX_ATTR_F("eps", 1e-6)};
    check(g, "group_norm [64,16,16] 32 groups", "rlx.group_norm", gin, 3, &gout, 1, ga, 2, 0, &r,
          TOL);
    free(r);
    /* upsample_nearest2d x2 */
    tens ux = rand_f(3, 3, 4, 5, 1), uout = mk(RLX_F32, 3, 3, 8, 10);
    r = dalloc(3 * 8 * 10);
    ref_upsample_nearest(ux.f, r, 3, 4, 5, 2);
    rlx_attr ua = RLX_ATTR_I("scale", 2);
    check(g, "upsample_nearest2d x2", "rlx.upsample_nearest2d", &ux, 1, &uout, 1, &ua, 1, 0, &r, TOL);
    free(r);
    tfree(&gx), tfree(&gm), tfree(&bt), tfree(&gout), tfree(&ux), tfree(&uout);
}

/* ---------------------------------------------------------------- fused groups */

/* one node of a multi-node program (value ids index the program's values) */
typedef struct pnode {
    const char *op;
    int32_t in[5], out[2];
    int n_in, n_out;
    const rlx_attr *at;
    int n_at;
} pnode;

/* Runs nodes over values t (kind[k]: RLX_VALUE_*; share[k] >= 0: value k is stored in value
 * share[k]'s buffer, a cache written in place; share[k] = -2 - j: right after value j's
 * bytes, in j's allocation, as the core binds weights side by side), twice as run_node
 * does, and downloads every value that is not an input. The backend may run consecutive
 * nodes as one launch. */
static int run_prog(gpu *g, tens *t, const int *kind, const int *share, int nv, const pnode *nodes,
                    int nn, rlx_diag *d)
{
    rlx_value_desc vals[24];
    rlx_node_desc nd[10];
    void *ptrs[24];
    int rc;
    memset(vals, 0, sizeof vals);
    memset(d, 0, sizeof *d);
    d->struct_size = sizeof *d;
    for (int k = 0; k < nv; k++) {
        vals[k].struct_size = sizeof vals[k];
        vals[k].kind = kind[k];
        vals[k].dtype = t[k].dtype;
        vals[k].shape = t[k].shape;
        vals[k].name = "v";
    }
    for (int i = 0; i < nn; i++)
        nd[i] = (rlx_node_desc){sizeof nd[i], nodes[i].op, nodes[i].in, (uint32_t)nodes[i].n_in,
                                nodes[i].out, (uint32_t)nodes[i].n_out, nodes[i].at,
                                (uint32_t)nodes[i].n_at};
    rlx_program prog = {PROG_SIZE, vals, (uint32_t)nv, nd, (uint32_t)nn, 0, 0};
    void *exe = NULL;
    if ((rc = g->b->compile(g->be, &prog, &exe, d)) != 0)
        return rc;
    size_t after[24] = {0}; /* bytes of the values placed right after value k */
    for (int k = 0; k < nv; k++) {
        int j = k;
        while (share[j] <= -2)
            j = -2 - share[j];
        if (j != k)
            after[j] += tbytes(&t[k]);
    }
    memset(ptrs, 0, sizeof ptrs);
    for (int pass = 0; pass < nv && !rc; pass++) /* a value once the one it follows is placed */
        for (int k = 0; k < nv && !rc; k++) {
            int j = share[k] >= 0 ? share[k] : share[k] <= -2 ? -2 - share[k] : -1;
            if (ptrs[k] || (j >= 0 && !ptrs[j]))
                continue;
            if (share[k] >= 0) { /* the same bytes */
                ptrs[k] = ptrs[j];
                continue;
            }
            if (j >= 0) {
                ptrs[k] = (char *)ptrs[j] + tbytes(&t[j]);
            } else if (!(ptrs[k] = g->b->alloc(g->be, tbytes(&t[k]) + after[k], d))) {
                fprintf(stderr, "alloc failed: %s\n", d->msg);
                exit(1);
            }
            if (kind[k] == RLX_VALUE_INPUT)
                rc = g->b->upload(g->be, ptrs[k], tdata(&t[k]), tbytes(&t[k]), d);
        }
    for (int rep = 0; rep < 2 && !rc; rep++) {
        for (int k = 0; k < nv && !rc; k++) {
            if (kind[k] == RLX_VALUE_INPUT || share[k] != -1)
                continue;
            void *poison = malloc(tbytes(&t[k]) + 4);
            memset(poison, 0xff, tbytes(&t[k]) + 4);
            rc = g->b->upload(g->be, ptrs[k], poison, tbytes(&t[k]), d);
            free(poison);
        }
        if (!rc)
            rc = g->b->execute(g->be, exe, ptrs, d);
        if (!rc)
            rc = g->b->sync(g->be, d);
    }
    for (int k = 0; k < nv && !rc; k++) {
        if (kind[k] == RLX_VALUE_INPUT)
            continue;
        rc = g->b->download(g->be, tdata(&t[k]), ptrs[k], tbytes(&t[k]), d);
        for (int64_t e = 0; !rc && is_half(t[k].dtype) && e < tnumel(&t[k]); e++)
            t[k].f[e] = half_val(t[k].dtype, t[k].h[e]);
    }
    for (int k = 0; k < nv; k++)
        if (share[k] == -1 && ptrs[k])
            g->b->free(g->be, ptrs[k]);
    g->b->release(g->be, exe);
    return rc;
}

/* rounds v to dt as the device stores it */
static double as_dt(int dt, double v)
{
    return dt == RLX_BF16 ? bf2f(f2bf((float)v)) : dt == RLX_F16 ? h2f(f2h((float)v)) : (float)v;
}

/* add then rms_norm (one launch: the sum and its norm) */
static void fused_add_norm(gpu *g, int dt)
{
    const int64_t R = 3, H = 320;
    tens t[5] = {rand_t(dt, 2, R, H, 0, 1), rand_t(dt, 2, R, H, 0, 1), rand_f(1, H, 0, 0, 1),
                 mk(dt, 2, R, H, 0), mk(dt, 2, R, H, 0)};
    const int kind[5] = {RLX_VALUE_INPUT, RLX_VALUE_INPUT, RLX_VALUE_INPUT, RLX_VALUE_OUTPUT,
                         RLX_VALUE_OUTPUT};
    const int share[5] = {-1, -1, -1, -1, -1};
    rlx_attr at = RLX_ATTR_F("eps", 1e-5);
    pnode nodes[2] = {{"rlx.add", {0, 1}, {3}, 2, 1, NULL, 0}, {"rlx.rms_norm", {3, 2}, {4}, 2, 1, &at, 1}};
    double *rs = dalloc(R * H), *ry = dalloc(R * H);
    for (int64_t r = 0; r < R; r++) {
        double ss = 0;
        for (int64_t h = 0; h < H; h++) { /* the norm reads the sum as stored */
            rs[r * H + h] = as_dt(dt, (double)t[0].f[r * H + h] + t[1].f[r * H + h]);
            ss += rs[r * H + h] * rs[r * H + h];
        }
        double inv = 1 / sqrt(ss / (double)H + 1e-5);
        for (int64_t h = 0; h < H; h++)
            ry[r * H + h] = rs[r * H + h] * inv * t[2].f[h];
    }
    rlx_diag d;
    char what[64];
    snprintf(what, sizeof what, "fused add + rms_norm %s", dtn(dt));
    if (run_prog(g, t, kind, share, 5, nodes, 2, &d))
        fail_msg(g, what, d.msg);
    else
        report(g, what, fmax(rel_l2(&t[3], rs), rel_l2(&t[4], ry)), tol_of(dt));
    for (int k = 0; k < 5; k++)
        tfree(&t[k]);
    free(rs);
    free(ry);
}

/* x = rms_norm(s) with g (1 + g with add_one) per row of K, unrounded: a norm the GEMVs
 * after it absorb is never stored */
static float *ref_rms(const tens *s, const tens *g, int add_one, int64_t M, int64_t K)
{
    float *x = calloc((size_t)(M * K), sizeof(float));
    for (int64_t m = 0; m < M; m++) {
        double ss = 0;
        for (int64_t k = 0; k < K; k++)
            ss += (double)s->f[m * K + k] * s->f[m * K + k];
        double inv = 1 / sqrt(ss / (double)K + 1e-5);
        for (int64_t k = 0; k < K; k++)
            x[m * K + k] = (float)(s->f[m * K + k] * inv * (add_one ? 1 + g->f[k] : g->f[k]));
    }
    return x;
}

/* float64 reference of a decode MLP entry's head: x = x1·x2 and the residual r1·r2 as the
 * program makes them in dt, p = x·Woᵀ, the sum r + p rounded to dt (rs); returns the
 * rms-normed sum */
static float *ref_entry_norm(int dt, const tens *x1, const tens *x2, const tens *wo, const tens *r1,
                             const tens *r2, const tens *g, int64_t K, int64_t H, double *p, double *rs)
{
    float *x = calloc((size_t)K, sizeof(float));
    for (int64_t k = 0; k < K; k++)
        x[k] = (float)as_dt(dt, (double)x1->f[k] * x2->f[k]);
    ref_matmul(x, wo->f, NULL, p, 1, H, K, 1);
    tens sum = mk(RLX_F32, 2, 1, H, 0);
    for (int64_t h = 0; h < H; h++)
        sum.f[h] = (float)(rs[h] = as_dt(dt, as_dt(dt, (double)r1->f[h] * r2->f[h]) + as_dt(dt, p[h])));
    float *xn = ref_rms(&sum, g, 0, 1, H);
    tfree(&sum);
    free(x);
    return xn;
}

/* y = xn·Wgᵀ, or silu(xn·Wgᵀ) * (xn·Wuᵀ) when glu: the reference of a gate/up product */
static void ref_gate_up(const float *xn, const tens *wg, const tens *wu, double *ry, int64_t N, int64_t H, int glu)
{
    double *u = dalloc(N);
    ref_matmul(xn, wg->f, NULL, ry, 1, N, H, 1);
    ref_matmul(xn, wu->f, NULL, u, 1, N, H, 1);
    for (int64_t n = 0; glu && n < N; n++)
        ry[n] = silu_d(ry[n]) * u[n];
    free(u);
}

/* The decode MLP's entry as the llama flow emits it: o projection, add_rms_norm of its
 * product and the residual, gate and up + swiglu (glu: one fused GEMV) or one product of the
 * norm, with outputs over inputs that are dead by then, as the arena may place them. x and
 * the residual are made in the program (mul of two inputs). over = 1: the sum over the
 * residual; 2: the last output over x; 3: the sum over x. */
static void decode_mlp_entry(gpu *g, int dt, int glu, int over)
{
    const int64_t K = 1032, H = 1032, N = 72;
    enum { X1, X2, WO, R1, R2, G, WG, WU, X, R, P, S, NN, GT, UP, Y, NV };
    tens t[NV] = {rand_t(dt, 2, 1, K, 0, 1), rand_t(dt, 2, 1, K, 0, 1), rand_t(dt, 2, H, K, 0, 1),
                  rand_t(dt, 2, 1, H, 0, 3), rand_t(dt, 2, 1, H, 0, 1), rand_t(dt, 1, H, 0, 0, 1),
                  rand_t(dt, 2, N, H, 0, 1), rand_t(dt, 2, N, H, 0, 1), mk(dt, 2, 1, K, 0), mk(dt, 2, 1, H, 0),
                  mk(dt, 2, 1, H, 0), mk(dt, 2, 1, H, 0), mk(dt, 2, 1, H, 0), mk(dt, 2, 1, N, 0),
                  mk(dt, 2, 1, N, 0), mk(dt, 2, 1, N, 0)};
    int kind[NV], share[NV];
    for (int k = 0; k < NV; k++) {
        kind[k] = k < X ? RLX_VALUE_INPUT : k == S || k == Y ? RLX_VALUE_OUTPUT : RLX_VALUE_TEMP;
        share[k] = -1;
    }
    if (over == 1)
        share[S] = R;
    else if (over)
        share[over == 2 ? Y : S] = X;
    rlx_attr at = RLX_ATTR_F("eps", 1e-5);
    pnode nodes[7] = {{"rlx.mul", {X1, X2}, {X}, 2, 1, NULL, 0},
                      {"rlx.mul", {R1, R2}, {R}, 2, 1, NULL, 0},
                      {"rlx.matmul", {X, WO}, {P}, 2, 1, NULL, 0},
                      {"rlx.add_rms_norm", {R, P, G}, {S, NN}, 3, 2, &at, 1},
                      {"rlx.matmul", {NN, WG}, {glu ? GT : Y}, 2, 1, NULL, 0},
                      {"rlx.matmul", {NN, WU}, {UP}, 2, 1, NULL, 0},
                      {"rlx.swiglu", {GT, UP}, {Y}, 2, 1, NULL, 0}};
    double *p = dalloc(H), *rs = dalloc(H), *ry = dalloc(N);
    float *xn = ref_entry_norm(dt, &t[X1], &t[X2], &t[WO], &t[R1], &t[R2], &t[G], K, H, p, rs);
    ref_gate_up(xn, &t[WG], &t[WU], ry, N, H, glu);
    rlx_diag d;
    char what[96];
    snprintf(what, sizeof what, "gemv, add_rms_norm, %s %s%s", glu ? "gate/up + swiglu" : "gemv", dtn(dt),
             over == 1 ? ", sum over residual" : over == 2 ? ", output over x" : over == 3 ? ", sum over x" : "");
    if (run_prog(g, t, kind, share, NV, nodes, glu ? 7 : 5, &d))
        fail_msg(g, what, d.msg);
    else
        report(g, what, fmax(rel_l2(&t[S], rs), rel_l2(&t[Y], ry)), tol_of(dt));
    for (int k = 0; k < NV; k++)
        tfree(&t[k]);
    free(xn);
    free(p);
    free(rs);
    free(ry);
}

/* elements of a and b (one shape and dtype) whose stored bits differ */
static int64_t bits_differ(const tens *a, const tens *b)
{
    int64_t n = tnumel(a), diff = 0;
    for (int64_t e = 0; e < n; e++)
        diff += is_half(a->dtype) ? a->h[e] != b->h[e] : memcmp(&a->f[e], &b->f[e], 4) != 0;
    return diff;
}

/* A decode product, the residual add of it, an rms_norm of the sum and a product of the
 * norm, spelled as one rlx.add_rms_norm or as rlx.add then rlx.rms_norm: the two programs
 * must store the same bits (the backend fuses both alike), and each must match the float64
 * reference. x and the residual are made in the program (mul of two inputs); over = 1: the
 * sum over the residual; 2: the sum over x (the GEMV may not take the add); nout: the norm
 * is also a program output (no GEMV may absorb it). */
static void decode_norm_spellings(gpu *g, int dt, int over, int nout)
{
    const int64_t K = 1032, H = 1032, N = 72;
    enum { X1, X2, WO, R1, R2, G, W2, X, R, P, S, NN, Y, NV };
    tens t[NV] = {rand_t(dt, 2, 1, K, 0, 1), rand_t(dt, 2, 1, K, 0, 1), rand_t(dt, 2, H, K, 0, 1),
                  rand_t(dt, 2, 1, H, 0, 3), rand_t(dt, 2, 1, H, 0, 1), rand_t(dt, 1, H, 0, 0, 1),
                  rand_t(dt, 2, N, H, 0, 1), mk(dt, 2, 1, K, 0), mk(dt, 2, 1, H, 0), mk(dt, 2, 1, H, 0),
                  mk(dt, 2, 1, H, 0), mk(dt, 2, 1, H, 0), mk(dt, 2, 1, N, 0)};
    tens first[3] = {mk(dt, 2, 1, H, 0), mk(dt, 2, 1, H, 0), mk(dt, 2, 1, N, 0)}; /* S, NN, Y */
    const int keep[3] = {S, NN, Y};
    int kind[NV], share[NV];
    for (int k = 0; k < NV; k++) {
        kind[k] = k < X ? RLX_VALUE_INPUT : k == S || k == Y || (k == NN && nout) ? RLX_VALUE_OUTPUT
                                                                                  : RLX_VALUE_TEMP;
        share[k] = k == S && over ? (over == 1 ? R : X) : -1;
    }
    rlx_attr at = RLX_ATTR_F("eps", 1e-5);
    const pnode head[3] = {{"rlx.mul", {X1, X2}, {X}, 2, 1, NULL, 0},
                           {"rlx.mul", {R1, R2}, {R}, 2, 1, NULL, 0},
                           {"rlx.matmul", {X, WO}, {P}, 2, 1, NULL, 0}};
    const pnode tail = {"rlx.matmul", {NN, W2}, {Y}, 2, 1, NULL, 0};
    pnode one[5] = {head[0], head[1], head[2], {"rlx.add_rms_norm", {R, P, G}, {S, NN}, 3, 2, &at, 1}, tail};
    pnode two[6] = {head[0], head[1], head[2], {"rlx.add", {R, P}, {S}, 2, 1, NULL, 0},
                    {"rlx.rms_norm", {S, G}, {NN}, 2, 1, &at, 1}, tail};
    double *p = dalloc(H), *rs = dalloc(H), *rn = dalloc(H), *ry = dalloc(N);
    float *xn = ref_entry_norm(dt, &t[X1], &t[X2], &t[WO], &t[R1], &t[R2], &t[G], K, H, p, rs);
    for (int64_t h = 0; h < H; h++)
        rn[h] = xn[h];
    ref_matmul(xn, t[W2].f, NULL, ry, 1, N, H, 1);
    const char *sfx = over == 1 ? ", sum over residual" : over == 2 ? ", sum over x" : nout ? ", norm out" : "";
    int64_t diff = -1;
    for (int spell = 0; spell < 2; spell++) {
        rlx_diag d;
        char what[96];
        snprintf(what, sizeof what, "gemv, %s, gemv %s%s", spell ? "add, rms_norm" : "add_rms_norm", dtn(dt), sfx);
        if (run_prog(g, t, kind, share, NV, spell ? two : one, spell ? 6 : 5, &d)) {
            fail_msg(g, what, d.msg);
            break;
        }
        report(g, what, fmax(fmax(rel_l2(&t[S], rs), rel_l2(&t[Y], ry)), nout ? rel_l2(&t[NN], rn) : 0),
               tol_of(dt));
        for (int q = 0; q < 3; q++) {
            if (spell == 0) {
                memcpy(first[q].f, t[keep[q]].f, (size_t)tnumel(&first[q]) * sizeof(float));
                if (is_half(dt))
                    memcpy(first[q].h, t[keep[q]].h, (size_t)tnumel(&first[q]) * 2);
            } else if (keep[q] != NN || nout) { /* an absorbed norm is never stored */
                diff = (diff < 0 ? 0 : diff) + bits_differ(&first[q], &t[keep[q]]);
            }
        }
    }
    if (diff >= 0) {
        checks++;
        failures += diff != 0;
        char what[96];
        snprintf(what, sizeof what, "add_rms_norm = add, rms_norm %s%s", dtn(dt), sfx);
        printf("%-6s %-44s %lld elements differ  %s\n", g->label, what, (long long)diff, diff ? "FAIL" : "ok");
    }
    for (int k = 0; k < NV; k++)
        tfree(&t[k]);
    for (int q = 0; q < 3; q++)
        tfree(&first[q]);
    free(xn);
    free(p);
    free(rs);
    free(rn);
    free(ry);
}

/* A collective's entry into the next GEMVs (tensor parallelism: an all-reduce makes the
 * product, so no GEMV before the add can take it): add_rms_norm of the residual and an
 * all-reduce's output (one rank: a copy), then one product of the norm, a GEMV or gate/up
 * as one rlx.linear_swiglu. The
 * GEMVs take the add and the norm in; over = 1: the sum stored over the residual, 2: over
 * x (in place: stored once every block has read the row), else its own bytes. H past the
 * normed row's shared memory (8200) takes the add kernel first when in place. */
static void decode_sum_entry(gpu *g, int dt, int lsw, int over, int64_t H)
{
    const int64_t N = 72;
    enum { X1, X2, R1, R2, G, WG, WU, M, X, R, S, NN, Y, NV };
    tens t[NV] = {rand_t(dt, 2, 1, H, 0, 1), rand_t(dt, 2, 1, H, 0, 1), rand_t(dt, 2, 1, H, 0, 3),
                  rand_t(dt, 2, 1, H, 0, 1), rand_t(dt, 1, H, 0, 0, 1), rand_t(dt, 2, N, H, 0, 1),
                  rand_t(dt, 2, N, H, 0, 1), mk(dt, 2, 1, H, 0), mk(dt, 2, 1, H, 0), mk(dt, 2, 1, H, 0),
                  mk(dt, 2, 1, H, 0), mk(dt, 2, 1, H, 0), mk(dt, 2, 1, N, 0)};
    int kind[NV], share[NV];
    for (int k = 0; k < NV; k++) {
        kind[k] = k < M ? RLX_VALUE_INPUT : k == S || k == Y ? RLX_VALUE_OUTPUT : RLX_VALUE_TEMP;
        share[k] = -1;
    }
    if (over)
        share[S] = over == 1 ? R : X;
    rlx_attr at = RLX_ATTR_F("eps", 1e-5);
    rlx_attr one[3] = {RLX_ATTR_I("ranks", 1), RLX_ATTR_I("rank", 0), RLX_ATTR_I("group", 7)};
    pnode nodes[5] = {{"rlx.mul", {X1, X2}, {M}, 2, 1, NULL, 0},
                      {"rlx.all_reduce", {M}, {X}, 1, 1, one, 3},
                      {"rlx.mul", {R1, R2}, {R}, 2, 1, NULL, 0},
                      {"rlx.add_rms_norm", {R, X, G}, {S, NN}, 3, 2, &at, 1},
                      lsw ? (pnode){"rlx.linear_swiglu", {NN, WG, WU}, {Y}, 3, 1, NULL, 0}
                          : (pnode){"rlx.matmul", {NN, WG}, {Y}, 2, 1, NULL, 0}};
    double *rs = dalloc(H), *ry = dalloc(N);
    tens sum = mk(RLX_F32, 2, 1, H, 0);
    for (int64_t h = 0; h < H; h++)
        sum.f[h] = (float)(rs[h] = as_dt(dt, as_dt(dt, (double)t[R1].f[h] * t[R2].f[h]) +
                                                 as_dt(dt, (double)t[X1].f[h] * t[X2].f[h])));
    float *xn = ref_rms(&sum, &t[G], 0, 1, H);
    ref_gate_up(xn, &t[WG], &t[WU], ry, N, H, lsw);
    rlx_diag d;
    char what[96];
    snprintf(what, sizeof what, "add_rms_norm, %s %s K=%lld%s", lsw ? "linear_swiglu" : "gemv", dtn(dt),
             (long long)H, over == 1 ? ", sum over residual" : over == 2 ? ", sum over x" : "");
    if (run_prog(g, t, kind, share, NV, nodes, 5, &d))
        fail_msg(g, what, d.msg);
    else
        report(g, what, fmax(rel_l2(&t[S], rs), rel_l2(&t[Y], ry)), tol_of(dt));
    for (int k = 0; k < NV; k++)
        tfree(&t[k]);
    tfree(&sum);
    free(xn);
    free(rs);
    free(ry);
}

/* add then rms_norm, the norm's output stored exactly over the add's second input (a TEMP
 * the program makes: mul of two inputs), as the arena places it in decode */
static void fused_add_norm_over(gpu *g, int dt)
{
    const int64_t R = 2, H = 2048;
    enum { A, B1, B2, G, B, S, Y, NV };
    tens t[NV] = {rand_t(dt, 2, R, H, 0, 1), rand_t(dt, 2, R, H, 0, 1), rand_t(dt, 2, R, H, 0, 1),
                  rand_f(1, H, 0, 0, 1), mk(dt, 2, R, H, 0), mk(dt, 2, R, H, 0), mk(dt, 2, R, H, 0)};
    const int kind[NV] = {RLX_VALUE_INPUT, RLX_VALUE_INPUT, RLX_VALUE_INPUT, RLX_VALUE_INPUT,
                          RLX_VALUE_TEMP, RLX_VALUE_OUTPUT, RLX_VALUE_OUTPUT};
    const int share[NV] = {-1, -1, -1, -1, -1, -1, B};
    rlx_attr at = RLX_ATTR_F("eps", 1e-5);
    pnode nodes[3] = {{"rlx.mul", {B1, B2}, {B}, 2, 1, NULL, 0},
                      {"rlx.add", {A, B}, {S}, 2, 1, NULL, 0},
                      {"rlx.rms_norm", {S, G}, {Y}, 2, 1, &at, 1}};
    double *rs = dalloc(R * H), *ry = dalloc(R * H);
    for (int64_t r = 0; r < R; r++) {
        double ss = 0;
        for (int64_t h = 0; h < H; h++) {
            int64_t e = r * H + h;
            rs[e] = as_dt(dt, (double)t[A].f[e] + as_dt(dt, (double)t[B1].f[e] * t[B2].f[e]));
            ss += rs[e] * rs[e];
        }
        double inv = 1 / sqrt(ss / (double)H + 1e-5);
        for (int64_t h = 0; h < H; h++)
            ry[r * H + h] = rs[r * H + h] * inv * t[G].f[h];
    }
    rlx_diag d;
    char what[64];
    snprintf(what, sizeof what, "fused add + rms_norm %s, norm over input", dtn(dt));
    if (run_prog(g, t, kind, share, NV, nodes, 3, &d))
        fail_msg(g, what, d.msg);
    else
        report(g, what, fmax(rel_l2(&t[S], rs), rel_l2(&t[Y], ry)), tol_of(dt));
    for (int k = 0; k < NV; k++)
        tfree(&t[k]);
    free(rs);
    free(ry);
}

/* decode gate/up products then swiglu (one GEMV with the SwiGLU epilogue); norm: x is
 * the rms_norm of an input, which the GEMV computes itself */
static void fused_glu(gpu *g, int64_t M, int64_t N, int64_t K, int wdt, int norm)
{
    tens t[8] = {rand_f(2, M, K, 0, 1), rand_t(wdt, 2, N, K, 0, 1), rand_t(wdt, 2, N, K, 0, 1),
                 mk(RLX_F32, 2, M, N, 0), mk(RLX_F32, 2, M, N, 0), mk(wdt, 2, M, N, 0),
                 rand_t(wdt, 2, M, K, 0, 3), rand_t(wdt, 1, K, 0, 0, 1)};
    const int kind[8] = {norm ? RLX_VALUE_TEMP : RLX_VALUE_INPUT, RLX_VALUE_INPUT, RLX_VALUE_INPUT,
                         RLX_VALUE_TEMP, RLX_VALUE_TEMP, RLX_VALUE_OUTPUT, RLX_VALUE_INPUT, RLX_VALUE_INPUT};
    const int share[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    rlx_attr at = RLX_ATTR_F("eps", 1e-5);
    /* up first, gate second: the epilogue takes the gate from swiglu's first input */
    pnode nodes[4] = {{"rlx.rms_norm", {6, 7}, {0}, 2, 1, &at, 1},
                      {"rlx.matmul", {0, 2}, {4}, 2, 1, NULL, 0},
                      {"rlx.matmul", {0, 1}, {3}, 2, 1, NULL, 0},
                      {"rlx.swiglu", {3, 4}, {5}, 2, 1, NULL, 0}};
    float *x = norm ? ref_rms(&t[6], &t[7], 0, M, K) : t[0].f;
    double *r = dalloc(M * N), *u = dalloc(M * N);
    ref_matmul(x, t[1].f, NULL, r, M, N, K, 1);
    ref_matmul(x, t[2].f, NULL, u, M, N, K, 1);
    for (int64_t k = 0; k < M * N; k++)
        r[k] = silu_d(r[k]) * u[k];
    rlx_diag d;
    char what[80];
    snprintf(what, sizeof what, "fused %sgate/up + swiglu M=%lld N=%lld K=%lld %s", norm ? "rms_norm + " : "",
             (long long)M, (long long)N, (long long)K, dtn(wdt));
    if (run_prog(g, t, kind, share, 8, norm ? nodes : nodes + 1, norm ? 4 : 3, &d))
        fail_msg(g, what, d.msg);
    else
        report(g, what, rel_l2(&t[5], r), tol_of(wdt));
    for (int k = 0; k < 8; k++)
        tfree(&t[k]);
    if (norm)
        free(x);
    free(r);
    free(u);
}

/* rms_norm then one decode product of M rows (the final norm and the LM head): one row's
 * GEMV norms x itself, several 16-bit rows run the norm kernel then the tensor-core GEMV;
 * out: the norm's output is also a program output, so it stays a launch */
static void fused_norm_gemv(gpu *g, int64_t M, int64_t N, int64_t K, int dt, int add_one, int out)
{
    enum { S, G, W, H, Y, NV };
    tens t[NV] = {rand_t(dt, 2, M, K, 0, 3), rand_t(dt, 1, K, 0, 0, 1), rand_t(dt, 2, N, K, 0, 1),
                  mk(dt, 2, M, K, 0), mk(RLX_F32, 2, M, N, 0)};
    const int kind[NV] = {RLX_VALUE_INPUT, RLX_VALUE_INPUT, RLX_VALUE_INPUT,
                          out ? RLX_VALUE_OUTPUT : RLX_VALUE_TEMP, RLX_VALUE_OUTPUT};
    const int share[NV] = {-1, -1, -1, -1, -1};
    rlx_attr at[2] = {RLX_ATTR_F("eps", 1e-5), RLX_ATTR_I("add_one", add_one)};
    pnode nodes[2] = {{"rlx.rms_norm", {S, G}, {H}, 2, 1, at, 2}, {"rlx.matmul", {H, W}, {Y}, 2, 1, NULL, 0}};
    float *x = ref_rms(&t[S], &t[G], add_one, M, K);
    double *r = dalloc(M * N), *rh = dalloc(M * K);
    ref_matmul(x, t[W].f, NULL, r, M, N, K, 1);
    for (int64_t k = 0; k < M * K; k++)
        rh[k] = x[k];
    rlx_diag d;
    char what[80];
    snprintf(what, sizeof what, "fused rms_norm%s + gemv M=%lld N=%lld K=%lld %s%s", add_one ? "(1+g)" : "",
             (long long)M, (long long)N, (long long)K, dtn(dt), out ? " (norm also out)" : "");
    if (run_prog(g, t, kind, share, NV, nodes, 2, &d))
        fail_msg(g, what, d.msg);
    else
        report(g, what, fmax(rel_l2(&t[Y], r), out ? rel_l2(&t[H], rh) : 0), tol_of(dt));
    for (int k = 0; k < NV; k++)
        tfree(&t[k]);
    free(x);
    free(r);
    free(rh);
}

/* a decode product then its residual add (one GEMV, the add in its epilogue). x and the
 * residual are made in the program (mul of two inputs) so an output may take their bytes:
 * over = 1: the sum over the residual (allowed: each element read before it is written);
 * over = 2: the sum over x (N = K; other warps still read x: the steps run one by one) */
static void fused_gemv_add(gpu *g, int dt, int swap, int over)
{
    const int64_t K = 1032, N = 1032;
    enum { X1, X2, W, R1, R2, X, R, P, S, NV };
    tens t[NV] = {rand_t(dt, 2, 1, K, 0, 1), rand_t(dt, 2, 1, K, 0, 1), rand_t(dt, 2, N, K, 0, 1),
                  rand_t(dt, 2, 1, N, 0, 3), rand_t(dt, 2, 1, N, 0, 1), mk(dt, 2, 1, K, 0),
                  mk(dt, 2, 1, N, 0), mk(dt, 2, 1, N, 0), mk(dt, 2, 1, N, 0)};
    int kind[NV], share[NV];
    for (int k = 0; k < NV; k++) {
        kind[k] = k < X ? RLX_VALUE_INPUT : k == S ? RLX_VALUE_OUTPUT : RLX_VALUE_TEMP;
        share[k] = k == S && over ? (over == 1 ? R : X) : -1;
    }
    pnode nodes[4] = {{"rlx.mul", {X1, X2}, {X}, 2, 1, NULL, 0},
                      {"rlx.mul", {R1, R2}, {R}, 2, 1, NULL, 0},
                      {"rlx.matmul", {X, W}, {P}, 2, 1, NULL, 0},
                      {"rlx.add", {swap ? P : R, swap ? R : P}, {S}, 2, 1, NULL, 0}};
    float *x = calloc((size_t)K, sizeof(float));
    double *p = dalloc(N), *r = dalloc(N);
    for (int64_t k = 0; k < K; k++)
        x[k] = (float)as_dt(dt, (double)t[X1].f[k] * t[X2].f[k]);
    ref_matmul(x, t[W].f, NULL, p, 1, N, K, 1);
    for (int64_t n = 0; n < N; n++)
        r[n] = as_dt(dt, as_dt(dt, (double)t[R1].f[n] * t[R2].f[n]) + as_dt(dt, p[n]));
    rlx_diag d;
    char what[80];
    snprintf(what, sizeof what, "fused gemv + add%s %s%s", swap ? " (product first)" : "", dtn(dt),
             over == 1 ? ", sum over residual" : over == 2 ? ", sum over x" : "");
    if (run_prog(g, t, kind, share, NV, nodes, 4, &d))
        fail_msg(g, what, d.msg);
    else
        report(g, what, rel_l2(&t[S], r), tol_of(dt));
    for (int k = 0; k < NV; k++)
        tfree(&t[k]);
    free(x);
    free(p);
    free(r);
}

/* three decode products of one x, of different widths, one with a bias (one launch); x in
 * xdt (16 bits and N multiples of 16: the batched rows' tensor-core GEMV takes them) */
static void fused_gemvs(gpu *g, int64_t M, int xdt, int wdt, int64_t n0, int64_t n1, int64_t n2)
{
    const int64_t K = 192, N[3] = {n0, n1, n2};
    tens t[8] = {rand_t(xdt, 2, M, K, 0, 1), rand_t(wdt, 2, N[0], K, 0, 1), rand_t(wdt, 2, N[1], K, 0, 1),
                 rand_f(1, N[1], 0, 0, 1), rand_t(wdt, 2, N[2], K, 0, 1), mk(RLX_F32, 2, M, N[0], 0),
                 mk(wdt, 2, M, N[1], 0), mk(RLX_F32, 2, M, N[2], 0)};
    const int kind[8] = {RLX_VALUE_INPUT, RLX_VALUE_INPUT, RLX_VALUE_INPUT, RLX_VALUE_INPUT,
                         RLX_VALUE_INPUT, RLX_VALUE_OUTPUT, RLX_VALUE_OUTPUT, RLX_VALUE_OUTPUT};
    const int share[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
    pnode nodes[3] = {{"rlx.matmul", {0, 1}, {5}, 2, 1, NULL, 0},
                      {"rlx.matmul", {0, 2, 3}, {6}, 3, 1, NULL, 0},
                      {"rlx.matmul", {0, 4}, {7}, 2, 1, NULL, 0}};
    double *r[3] = {dalloc(M * N[0]), dalloc(M * N[1]), dalloc(M * N[2])};
    ref_matmul(t[0].f, t[1].f, NULL, r[0], M, N[0], K, 1);
    ref_matmul(t[0].f, t[2].f, t[3].f, r[1], M, N[1], K, 1);
    ref_matmul(t[0].f, t[4].f, NULL, r[2], M, N[2], K, 1);
    rlx_diag d;
    char what[80];
    snprintf(what, sizeof what, "fused gemvs %lld+%lld(+bias)+%lld M=%lld %s.%s", (long long)N[0], (long long)N[1],
             (long long)N[2], (long long)M, dtn(xdt), dtn(wdt));
    if (run_prog(g, t, kind, share, 8, nodes, 3, &d))
        fail_msg(g, what, d.msg);
    else
        report(g, what, fmax(fmax(rel_l2(&t[5], r[0]), rel_l2(&t[6], r[1])), rel_l2(&t[7], r[2])),
               tol_of(wdt));
    for (int k = 0; k < 8; k++)
        tfree(&t[k]);
    for (int k = 0; k < 3; k++)
        free(r[k]);
}

static void ref_rope_row(const float *x, const float *inv, int64_t d, int32_t p, double *y)
{
    for (int64_t i = 0; i < d / 2; i++) {
        double th = (double)p * inv[i];
        y[i] = x[i] * cos(th) - x[i + d / 2] * sin(th);
        y[i + d / 2] = x[i + d / 2] * cos(th) + x[i] * sin(th);
    }
}

/* a program's verdict: want set, it must fail with that message; else it must run, its
 * outputs within tol (err: their worst relative L2, read only when it ran) */
static void prog_verdict(gpu *g, const char *what, int rc, const char *msg, const char *want, double err,
                         double tol)
{
    if (want)
        error_verdict(g, what, rc, msg, want);
    else if (rc)
        fail_msg(g, what, msg);
    else
        report(g, what, err, tol);
}

/* a rope + cache program's verdict (its roped q and both caches, t[qr], t[ko], t[vo],
 * against rq, rk, rv), then its nv tensors and references freed */
static void rope_cache_done(gpu *g, const char *what, int rc, const char *msg, const char *want, int dt, tens *t,
                            int nv, int qr, int ko, int vo, double *rq, double *rk, double *rv)
{
    prog_verdict(g, what, rc, msg, want, fmax(rel_l2(&t[qr], rq), fmax(rel_l2(&t[ko], rk), rel_l2(&t[vo], rv))),
                 tol_of(dt));
    for (int k = 0; k < nv; k++)
        tfree(&t[k]);
    free(rq);
    free(rk);
    free(rv);
}

/* rope q, rope k, write k and v into their caches in place (one launch); at = S: the cache
 * write must fail with the rows it names */
static void fused_rope_cache(gpu *g, int dt, int32_t at)
{
    const int64_t T = 1, nh = 4, nkv = 2, d = 32, S = 16;
    enum { Q, K, V, POS, INV, KC, VC, QR, KR, KO, VO, NV };
    tens t[NV] = {rand_t(dt, 3, T, nh, d, 1), rand_t(dt, 3, T, nkv, d, 1), rand_t(dt, 3, T, nkv, d, 1),
                  mk(RLX_I32, 1, T, 0, 0), mk(RLX_F32, 1, d / 2, 0, 0), rand_t(dt, 3, S, nkv, d, 1),
                  rand_t(dt, 3, S, nkv, d, 1), mk(dt, 3, T, nh, d), mk(dt, 3, T, nkv, d),
                  mk(dt, 3, S, nkv, d), mk(dt, 3, S, nkv, d)};
    int kind[NV], share[NV];
    for (int k = 0; k < NV; k++) {
        kind[k] = k < QR ? RLX_VALUE_INPUT : k == KR ? RLX_VALUE_TEMP : RLX_VALUE_OUTPUT;
        share[k] = k == KO ? KC : k == VO ? VC : -1;
    }
    t[POS].i[0] = at;
    for (int64_t i = 0; i < d / 2; i++)
        t[INV].f[i] = (float)pow(10000.0, -2.0 * (double)i / (double)d);
    pnode nodes[4] = {{"rlx.rope", {Q, POS, INV}, {QR}, 3, 1, NULL, 0},
                      {"rlx.rope", {K, POS, INV}, {KR}, 3, 1, NULL, 0},
                      {"rlx.cache_write", {KC, KR, POS}, {KO}, 3, 1, NULL, 0},
                      {"rlx.cache_write", {VC, V, POS}, {VO}, 3, 1, NULL, 0}};
    double *rq = dalloc(nh * d), *rk = dalloc(S * nkv * d), *rv = dalloc(S * nkv * d);
    for (int64_t h = 0; h < nh; h++)
        ref_rope_row(t[Q].f + h * d, t[INV].f, d, at, rq + h * d);
    for (int64_t e = 0; e < S * nkv * d; e++) {
        rk[e] = t[KC].f[e];
        rv[e] = t[VC].f[e];
    }
    if (at >= 0 && at < S)
        for (int64_t h = 0; h < nkv; h++) {
            ref_rope_row(t[K].f + h * d, t[INV].f, d, at, rk + (at * nkv + h) * d);
            for (int64_t j = 0; j < d; j++) {
                rk[(at * nkv + h) * d + j] = as_dt(dt, rk[(at * nkv + h) * d + j]);
                rv[(at * nkv + h) * d + j] = t[V].f[h * d + j];
            }
        }
    rlx_diag d_;
    char what[80];
    snprintf(what, sizeof what, "fused rope q,k + cache_write k,v %s%s", dtn(dt), at >= S ? " past the end" : "");
    int rc = run_prog(g, t, kind, share, NV, nodes, 4, &d_);
    char want[96];
    snprintf(want, sizeof want, "rlx.cache_write (node 2): rows %d..%d are outside the cache's %d rows", at, at,
             (int)S);
    rope_cache_done(g, what, rc, d_.msg, at >= S ? want : NULL, dt, t, NV, QR, KO, VO, rq, rk, rv);
}

/* a greedy step's tail (compile/greedy.c): argmax of one row of logits, stored at row pos
 * of a history and into a one-row id, and pos moved on by one, run twice (the backend may
 * run the writes in the argmax's launch: FUSE_ARGMAX_TAIL); at = S - 1 makes the second
 * run's history write fall past the end, which must fail naming that cache write */
static void fused_argmax_tail(gpu *g, int32_t at)
{
    const int64_t V = 32000, S = 8;
    enum { LG, ID, H, HO, POS, IDC, IDO, ZERO, NXT, PC, PO, NV };
    tens t[NV] = {rand_f(2, 1, V, 0, 8), mk(RLX_I32, 3, 1, 1, 1), mk(RLX_I32, 3, S, 1, 1), mk(RLX_I32, 3, S, 1, 1),
                  mk(RLX_I32, 1, 1, 0, 0), mk(RLX_I32, 3, 1, 1, 1), mk(RLX_I32, 3, 1, 1, 1), mk(RLX_I32, 1, 1, 0, 0),
                  mk(RLX_I32, 3, 1, 1, 1), mk(RLX_I32, 3, 1, 1, 1), mk(RLX_I32, 3, 1, 1, 1)};
    int kind[NV], share[NV];
    for (int k = 0; k < NV; k++) {
        kind[k] = k == ID || k == NXT ? RLX_VALUE_TEMP : k == HO || k == IDO || k == PO ? RLX_VALUE_OUTPUT
                                                                                     : RLX_VALUE_INPUT;
        share[k] = k == HO ? H : k == IDO ? IDC : k == PC || k == PO ? POS : -1;
    }
    t[LG].f[31000] = t[LG].f[20001] = 9; /* a tie: the first wins */
    t[POS].i[0] = at;
    rlx_attr one = RLX_ATTR_F("value", 1);
    pnode nodes[5] = {{"rlx.argmax", {LG}, {ID}, 1, 1, NULL, 0},
                      {"rlx.cache_write", {H, ID, POS}, {HO}, 3, 1, NULL, 0},
                      {"rlx.cache_write", {IDC, ID, ZERO}, {IDO}, 3, 1, NULL, 0},
                      {"rlx.add_scalar", {PC}, {NXT}, 1, 1, &one, 1},
                      {"rlx.cache_write", {PC, NXT, ZERO}, {PO}, 3, 1, NULL, 0}};
    rlx_diag d_;
    int rc = run_prog(g, t, kind, share, NV, nodes, 5, &d_);
    char what[64], want[96];
    snprintf(what, sizeof what, "argmax + id and position writes at %d%s", (int)at, at + 1 >= S ? " past the end" : "");
    snprintf(want, sizeof want, "rlx.cache_write (node 1): rows %d..%d are outside the cache's %d rows", (int)S,
             (int)S, (int)S);
    double err = 0;
    if (!rc) { /* both runs stored 20001 at at and at + 1; pos moved on twice */
        for (int64_t r = 0; r < S; r++)
            err += t[HO].i[r] != (r == at || r == at + 1 ? 20001 : 0);
        err += (t[IDO].i[0] != 20001) + (t[PO].i[0] != at + 2);
    }
    prog_verdict(g, what, rc, d_.msg, at + 1 >= S ? want : NULL, err, 0.5); /* err: wrong ids */
    for (int k = 0; k < NV; k++)
        tfree(&t[k]);
}

/* the same for a batched decode step: T rows, each roped at its own position and stored in
 * its own slot of the k and v caches [P, S, nkv, d] (rlx.cache_write_rows, in place); bad:
 * row 1's slot is outside the pool, which must fail naming the row */
static void fused_rope_cache_rows(gpu *g, int dt, int bad)
{
    const int64_t T = 3, nh = 4, nkv = 2, d = 32, S = 16, P = 4, row = nkv * d;
    enum { Q, K, V, POS, SL, INV, KC, VC, QR, KR, KO, VO, NV };
    tens t[NV] = {rand_t(dt, 3, T, nh, d, 1), rand_t(dt, 3, T, nkv, d, 1), rand_t(dt, 3, T, nkv, d, 1),
                  mk(RLX_I32, 1, T, 0, 0), mk(RLX_I32, 1, T, 0, 0), mk(RLX_F32, 1, d / 2, 0, 0),
                  rand_t(dt, 3, P * S, nkv, d, 1), rand_t(dt, 3, P * S, nkv, d, 1), mk(dt, 3, T, nh, d),
                  mk(dt, 3, T, nkv, d), mk(dt, 3, P * S, nkv, d), mk(dt, 3, P * S, nkv, d)};
    int kind[NV], share[NV];
    for (int k = 0; k < NV; k++) {
        kind[k] = k < QR ? RLX_VALUE_INPUT : k == KR ? RLX_VALUE_TEMP : RLX_VALUE_OUTPUT;
        share[k] = k == KO ? KC : k == VO ? VC : -1;
        if (k == KC || k == VC || k == KO || k == VO) { /* [P, S, nkv, d] */
            t[k].shape.ndim = 4;
            t[k].shape.dims[0] = P, t[k].shape.dims[1] = S, t[k].shape.dims[2] = nkv, t[k].shape.dims[3] = d;
        }
    }
    const int32_t pos[3] = {7, 0, 15}, slot[3] = {2, 0, 3};
    for (int64_t r = 0; r < T; r++)
        t[POS].i[r] = pos[r], t[SL].i[r] = slot[r];
    if (bad)
        t[SL].i[1] = (int32_t)P;
    for (int64_t i = 0; i < d / 2; i++)
        t[INV].f[i] = (float)pow(10000.0, -2.0 * (double)i / (double)d);
    pnode nodes[4] = {{"rlx.rope", {Q, POS, INV}, {QR}, 3, 1, NULL, 0},
                      {"rlx.rope", {K, POS, INV}, {KR}, 3, 1, NULL, 0},
                      {"rlx.cache_write_rows", {KC, KR, POS, SL}, {KO}, 4, 1, NULL, 0},
                      {"rlx.cache_write_rows", {VC, V, POS, SL}, {VO}, 4, 1, NULL, 0}};
    double *rq = dalloc(T * nh * d), *rk = dalloc(P * S * row), *rv = dalloc(P * S * row);
    for (int64_t e = 0; e < P * S * row; e++) {
        rk[e] = t[KC].f[e];
        rv[e] = t[VC].f[e];
    }
    for (int64_t r = 0; r < T; r++) {
        for (int64_t h = 0; h < nh; h++)
            ref_rope_row(t[Q].f + (r * nh + h) * d, t[INV].f, d, pos[r], rq + (r * nh + h) * d);
        const int64_t at = ((int64_t)slot[r] * S + pos[r]) * row;
        for (int64_t h = 0; h < nkv; h++)
            ref_rope_row(t[K].f + (r * nkv + h) * d, t[INV].f, d, pos[r], rk + at + h * d);
        for (int64_t j = 0; j < row; j++) {
            rk[at + j] = as_dt(dt, rk[at + j]);
            rv[at + j] = t[V].f[r * row + j];
        }
    }
    rlx_diag d_;
    char what[80];
    snprintf(what, sizeof what, "fused rope q,k + cache_write_rows k,v %s%s", dtn(dt), bad ? " bad slot" : "");
    int rc = run_prog(g, t, kind, share, NV, nodes, 4, &d_);
    const char *want = "rlx.cache_write_rows (node 2): row 1: its slot or position is outside the 4 slots of 16 rows";
    rope_cache_done(g, what, rc, d_.msg, bad ? want : NULL, dt, t, NV, QR, KO, VO, rq, rk, rv);
}

/* The attention inputs of T rows in the schedule's order: q, rope q, k, rope k, v, cache
 * writes (one row: decode's GEMVs, the last two fuse; more than GPU_GEMV_MAX_M rows: a
 * prefill, whose q/k/v may run as one GEMM over weights side by side, the ropes reading its
 * columns). clobber: k's product is stored where q's was (dead after rope q, as the arena
 * plans it): a backend that ran k's product before q's rope would overwrite q. norm: x is
 * the rms_norm of an input (the layer's input norm, which the GEMVs then compute). attn:
 * the attention of the new rows over the caches follows; its output is checked too. side:
 * wq, wk, wv one after the other, as the core binds a program's weights; else wq, wv, wk
 * (no q/k/v matrix). d >= 64: the roped q is a temporary only the attention reads (a
 * backend could rope q and k and store the new rows in the attention's launch); at: the
 * rows' first position (the caches hold at + T + 5 rows: at 150, keys over several decode
 * blocks); bad: pos is past the cache, which must fail naming the k cache write. */
typedef struct attn_in_args {
    int dt;
    int64_t T;
    int clobber, norm, attn, side;
    int64_t d;
    int32_t at;
    int bad;
} attn_in_args;

static void attn_inputs_case(gpu *g, attn_in_args c)
{
    const int dt = c.dt, clobber = c.clobber, norm = c.norm, attn = c.attn, side = c.side;
    const int64_t T = c.T, K = 64, nh = 4, nkv = 2, d = c.d, S = c.at + T + 5;
    const int32_t at = c.at, pos0 = c.bad ? (int32_t)S : at;
    enum { X, WQ, WK, WV, POS, INV, KC, VC, QM, QR, KM, KR, VM, KO, VO, XS, XG, AO, NV };
    tens t[NV] = {rand_t(dt, 2, T, K, 0, 1), rand_t(dt, 2, nh * d, K, 0, 0.5),
                  rand_t(dt, 2, nkv * d, K, 0, 0.5), rand_t(dt, 2, nkv * d, K, 0, 0.5),
                  mk(RLX_I32, 1, T, 0, 0), mk(RLX_F32, 1, d / 2, 0, 0), rand_t(dt, 3, S, nkv, d, 1),
                  rand_t(dt, 3, S, nkv, d, 1), mk(dt, 3, T, nh, d), mk(dt, 3, T, nh, d),
                  mk(dt, 3, T, nkv, d), mk(dt, 3, T, nkv, d), mk(dt, 3, T, nkv, d),
                  mk(dt, 3, S, nkv, d), mk(dt, 3, S, nkv, d), rand_t(dt, 2, T, K, 0, 3),
                  rand_t(dt, 1, K, 0, 0, 1), mk(dt, 3, T, nh, d)};
    int kind[NV], share[NV];
    for (int k = 0; k < NV; k++) {
        kind[k] = k < QM || (k >= XS && k < AO) ? RLX_VALUE_INPUT
                  : (k == QR && d < 64) || k == KO || k == VO || k == AO ? RLX_VALUE_OUTPUT : RLX_VALUE_TEMP;
        share[k] = k == KO ? KC : k == VO ? VC : k == KM && clobber ? QM : -1;
    }
    share[side ? WK : WV] = -2 - WQ; /* one allocation: q, k, v, or q, v, k (not one matrix) */
    share[side ? WV : WK] = -2 - (side ? WK : WV);
    rlx_attr eps = RLX_ATTR_F("eps", 1e-5);
    if (norm) { /* x in dt, made by the norm */
        kind[X] = RLX_VALUE_TEMP;
        tfree(&t[X]);
        t[X] = mk(dt, 2, T, K, 0);
        float *xn = ref_rms(&t[XS], &t[XG], 0, T, K);
        memcpy(t[X].f, xn, (size_t)(T * K) * sizeof(float));
        free(xn);
    }
    for (int64_t r = 0; r < T; r++)
        t[POS].i[r] = pos0 + (int32_t)r;
    for (int64_t i = 0; i < d / 2; i++)
        t[INV].f[i] = (float)pow(10000.0, -2.0 * (double)i / (double)d);
    const double scale = 1.0 / sqrt((double)d);
    rlx_attr sc[2] = {RLX_ATTR_F("scale", scale), RLX_ATTR_I("causal", 1)};
    pnode nodes[9] = {{"rlx.rms_norm", {XS, XG}, {X}, 2, 1, &eps, 1},
                      {"rlx.matmul", {X, WQ}, {QM}, 2, 1, NULL, 0},
                      {"rlx.rope", {QM, POS, INV}, {QR}, 3, 1, NULL, 0},
                      {"rlx.matmul", {X, WK}, {KM}, 2, 1, NULL, 0},
                      {"rlx.rope", {KM, POS, INV}, {KR}, 3, 1, NULL, 0},
                      {"rlx.matmul", {X, WV}, {VM}, 2, 1, NULL, 0},
                      {"rlx.cache_write", {KC, KR, POS}, {KO}, 3, 1, NULL, 0},
                      {"rlx.cache_write", {VC, VM, POS}, {VO}, 3, 1, NULL, 0},
                      {"rlx.attention", {QR, KO, VO, POS}, {AO}, 4, 1, sc, 2}};
    const int64_t qn = nh * d, kn = nkv * d; /* a row's q and k/v widths */
    double *q = dalloc(T * qn), *k = dalloc(T * kn), *v = dalloc(T * kn);
    double *rq = dalloc(T * qn), *rk = dalloc(S * kn), *rv = dalloc(S * kn);
    float *qf = calloc((size_t)(T * qn), sizeof(float)), *kf = calloc((size_t)(T * kn), sizeof(float));
    ref_matmul(t[X].f, t[WQ].f, NULL, q, T, qn, K, 1);
    ref_matmul(t[X].f, t[WK].f, NULL, k, T, kn, K, 1);
    ref_matmul(t[X].f, t[WV].f, NULL, v, T, kn, K, 1);
    for (int64_t e = 0; e < T * qn; e++) /* the products are stored in dt before the ropes */
        qf[e] = (float)as_dt(dt, q[e]);
    for (int64_t e = 0; e < T * kn; e++)
        kf[e] = (float)as_dt(dt, k[e]);
    for (int64_t e = 0; e < S * kn; e++) {
        rk[e] = t[KC].f[e];
        rv[e] = t[VC].f[e];
    }
    for (int64_t r = 0; r < T; r++) {
        for (int64_t h = 0; h < nh; h++)
            ref_rope_row(qf + r * qn + h * d, t[INV].f, d, at + (int32_t)r, rq + r * qn + h * d);
        for (int64_t h = 0; h < nkv; h++)
            ref_rope_row(kf + r * kn + h * d, t[INV].f, d, at + (int32_t)r, rk + (at + r) * kn + h * d);
        for (int64_t e = 0; e < kn; e++) {
            rk[(at + r) * kn + e] = as_dt(dt, rk[(at + r) * kn + e]);
            rv[(at + r) * kn + e] = as_dt(dt, v[r * kn + e]);
        }
    }
    /* the attention reads q as the rope stored it and the caches as written */
    tens aq = mk(RLX_F32, 3, T, nh, d), ak = mk(RLX_F32, 3, S, nkv, d), av = mk(RLX_F32, 3, S, nkv, d);
    double *ra = dalloc(T * qn);
    for (int64_t e = 0; e < T * qn; e++)
        aq.f[e] = (float)as_dt(dt, rq[e]);
    for (int64_t e = 0; e < S * kn; e++) {
        ak.f[e] = (float)rk[e];
        av.f[e] = (float)rv[e];
    }
    ref_attention(&aq, &ak, &av, at, NULL, (double)(float)scale, 1, 0, 0, ra);
    rlx_diag d_;
    char what[128];
    snprintf(what, sizeof what, "%s %sq,rope,k,rope,v,cache writes%s %s d %lld%s%s%s", T == 1 ? "decode" : "prefill",
             norm ? "norm," : "", attn ? ",attention" : "", dtn(dt), (long long)d, clobber ? " (k over q)" : "",
             side ? " (weights side by side)" : "", c.bad ? " past the end" : "");
    int rc = run_prog(g, t, kind, share, attn ? NV : NV - 1, norm ? nodes : nodes + 1, (norm ? 8 : 7) + attn, &d_);
    char want[96];
    snprintf(want, sizeof want, "rlx.cache_write (node %d): rows %d..%d are outside the cache's %d rows",
             norm ? 6 : 5, pos0, pos0 + (int)T - 1, (int)S);
    prog_verdict(g, what, rc, d_.msg, c.bad ? want : NULL,
                 fmax(fmax(d < 64 ? rel_l2(&t[QR], rq) : 0.0, attn ? rel_l2(&t[AO], ra) : 0.0),
                      fmax(rel_l2(&t[KO], rk), rel_l2(&t[VO], rv))),
                 tol_of(dt));
    tfree(&aq);
    tfree(&ak);
    tfree(&av);
    free(ra);
    for (int e = 0; e < NV; e++)
        tfree(&t[e]);
    free(q);
    free(k);
    free(v);
    free(rq);
    free(rk);
    free(rv);
    free(qf);
    free(kf);
}

static void test_fused(gpu *g)
{
    for (int k = 0; k < 3; k++) {
        int dt = k == 0 ? RLX_F32 : k == 1 ? RLX_BF16 : RLX_F16;
        fused_add_norm(g, dt);
        fused_add_norm_over(g, dt);
        fused_glu(g, k == 2 ? 5 : 1, 72, 256, dt, 0);
        fused_glu(g, k == 2 ? 3 : 1, 72, 1024, dt, 1); /* one row: K over 2 warps */
        fused_gemvs(g, k == 1 ? 1 : 3, RLX_F32, dt, 64, 40, 24);
        fused_gemvs(g, k == 0 ? 2 : 4 * k + 3, dt, dt, 64, 32, 48); /* 11 rows: two n8 tiles */
        fused_gemvs(g, 29, dt, dt, 64, 32, 48); /* more rows than the GEMVs take: cuBLAS */
        fused_rope_cache(g, dt, 5);
        fused_rope_cache_rows(g, dt, 0);
        if (k == 0) {
            fused_argmax_tail(g, 3);
            fused_argmax_tail(g, 7);
        }
        fused_norm_gemv(g, 1, 72, k == 1 ? 4104 : 520, dt, k == 2, 0);
        /* batched rows: the norm, then in 16 bits the tensor-core GEMV (N % 16, K % 32) */
        fused_norm_gemv(g, k == 1 ? 8 : 13, 80, k == 1 ? 2048 : 544, dt, k == 2, 0);
        fused_glu(g, k == 1 ? 6 : 16, 96, 1024, dt, 1);
        for (int over = 0; over < 3; over++)
            fused_gemv_add(g, dt, over == 1 && k == 1, over);
        for (int over = 0; over < 4; over++)
            decode_mlp_entry(g, dt, over != 2 || k != 1, over);
        for (int c = 0; c < 4; c++)
            decode_norm_spellings(g, dt, c % 3, c == 3);
        for (int c = 0; c < 6; c++)
            decode_sum_entry(g, dt, c % 2, c / 2, 1032);
        decode_sum_entry(g, dt, k == 1, 1 + k % 2, 8200);
    }
    fused_norm_gemv(g, 1, 72, 1024, RLX_BF16, 0, 1);
    /* one-row 16-bit GEMVs over many waves of blocks (up to 33,000 columns, K split over 1
     * or 2 warps) and rows that are not a multiple of 256 elements (2056) */
    fused_glu(g, 1, 2304, 2048, RLX_BF16, 1);
    fused_glu(g, 1, 1000, 2056, RLX_F16, 0);
    fused_norm_gemv(g, 1, 4100, 2056, RLX_BF16, 1, 0);
    fused_norm_gemv(g, 1, 33000, 1024, RLX_F16, 0, 1);
    fused_rope_cache(g, RLX_BF16, 16);
    fused_rope_cache_rows(g, RLX_F16, 1);
    for (int c = 0; c < 12; c++)
        attn_inputs_case(g, (attn_in_args){.dt = c % 6 < 2 || c % 6 == 4 ? RLX_BF16 : RLX_F32, .T = 1,
                                           .clobber = c % 2, .norm = c % 6 >= 4, .attn = c >= 6, .d = 16, .at = 3});
    /* a prefill of 24 rows: weights side by side (one q/k/v GEMM) and apart, every dtype */
    for (int c = 0; c < 12; c++)
        attn_inputs_case(g, (attn_in_args){.dt = c % 3 == 0 ? RLX_F32 : c % 3 == 1 ? RLX_BF16 : RLX_F16, .T = 24,
                                           .clobber = c / 3 % 2, .attn = c >= 6, .side = c % 2 == 0, .d = 16,
                                           .at = 3});
    /* one row whose roped q only the attention reads, at the head dims of the models, keys
     * over several decode blocks; and a position past the cache */
    for (int c = 0; c < 8; c++)
        attn_inputs_case(g, (attn_in_args){.dt = c % 3 == 0 ? RLX_F32 : c % 3 == 1 ? RLX_BF16 : RLX_F16, .T = 1,
                                           .clobber = c % 2, .norm = c / 2 % 2, .attn = 1,
                                           .d = c < 4 ? 64 : c < 7 ? 128 : 256, .at = c < 6 ? 150 : 37});
    attn_inputs_case(g, (attn_in_args){.dt = RLX_BF16, .T = 1, .norm = 1, .attn = 1, .d = 64, .at = 40, .bad = 1});
    attn_inputs_case(g, (attn_in_args){.dt = RLX_F32, .T = 1, .attn = 1, .d = 128, .at = 9, .bad = 1});
}

/* ---------------------------------------------------------------- row kernels */

/* y = s * rsqrt(mean(s^2) + eps) * (add_one ? 1 + g : g) per row of H, in double */
static void ref_rms_rows(const float *s, const float *g, int add_one, float eps, int64_t R, int64_t H, double *y)
{
    for (int64_t r = 0; r < R; r++) {
        double ss = 0;
        for (int64_t h = 0; h < H; h++)
            ss += (double)s[r * H + h] * s[r * H + h];
        double inv = 1 / sqrt(ss / (double)H + (double)eps);
        for (int64_t h = 0; h < H; h++)
            y[r * H + h] = s[r * H + h] * inv * (add_one ? 1.0 + g[h] : g[h]);
    }
}

/* rms_norm and add_rms_norm over the kernel's shapes in 16-byte packs (H % 8 == 0): short
 * rows (several a block), a block's row, rows longer than one register tile (read twice);
 * weights in dt (bf16) or f32 */
static void rms_rows_case(gpu *g, int dt, int64_t R, int64_t H, int add_one)
{
    int wdt = dt == RLX_BF16 ? RLX_BF16 : RLX_F32;
    tens a = rand_t(dt, 2, R, H, 0, 3), b = rand_t(dt, 2, R, H, 0, 3), w = rand_t(wdt, 1, H, 0, 0, 1);
    tens outs[2] = {mk(dt, 2, R, H, 0), mk(dt, 2, R, H, 0)}, sum = mk(RLX_F32, 2, R, H, 0);
    double *r = dalloc(R * H), *rs = dalloc(R * H);
    rlx_attr at[2] = {RLX_ATTR_F("eps", 1e-5), RLX_ATTR_I("add_one", add_one)};
    char what[96];
    ref_rms_rows(a.f, w.f, add_one, 1e-5f, R, H, r);
    tens ins[3] = {a, w};
    snprintf(what, sizeof what, "rms_norm %s [%lld,%lld] weight %s%s", dtn(dt), (long long)R, (long long)H,
             dtn(wdt), add_one ? " (1+g)" : "");
    check(g, what, "rlx.rms_norm", ins, 2, &outs[1], 1, at, 2, 0, &r, tol_of(dt));
    for (int64_t k = 0; k < R * H; k++) /* the norm reads the sum as stored */
        sum.f[k] = (float)(rs[k] = as_dt(dt, (double)a.f[k] + b.f[k]));
    ref_rms_rows(sum.f, w.f, add_one, 1e-5f, R, H, r);
    tens ins3[3] = {a, b, w};
    double *refs[2] = {rs, r};
    snprintf(what, sizeof what, "add_rms_norm %s [%lld,%lld]%s", dtn(dt), (long long)R, (long long)H,
             add_one ? " (1+g)" : "");
    check(g, what, "rlx.add_rms_norm", ins3, 3, outs, 2, at, 2, 0, refs, tol_of(dt));
    tens all[] = {a, b, w, outs[0], outs[1], sum};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++)
        tfree(&all[k]);
    free(r);
    free(rs);
}

/* Outputs stored over inputs (the arena reuses a dead input's bytes): over = 0: rms_norm's
 * output over its x (an add reads x first); 1: add then rms_norm, the sum over the add's
 * second input; 2: the same, the norm's output over it. The overwritten input is a
 * product of two inputs. */
static void rms_rows_over(gpu *g, int dt, int64_t R, int64_t H, int over)
{
    enum { A, B1, B2, G, B, S, Y, NV };
    tens t[NV] = {rand_t(dt, 2, R, H, 0, 1), rand_t(dt, 2, R, H, 0, 1), rand_t(dt, 2, R, H, 0, 2),
                  rand_f(1, H, 0, 0, 1), mk(dt, 2, R, H, 0), mk(dt, 2, R, H, 0), mk(dt, 2, R, H, 0)};
    const int kind[NV] = {RLX_VALUE_INPUT, RLX_VALUE_INPUT, RLX_VALUE_INPUT, RLX_VALUE_INPUT,
                          RLX_VALUE_TEMP,  RLX_VALUE_OUTPUT, RLX_VALUE_OUTPUT};
    const int share[NV] = {-1, -1, -1, -1, -1, over == 1 ? B : -1, over != 1 ? B : -1};
    rlx_attr at = RLX_ATTR_F("eps", 1e-5);
    pnode nodes[3] = {{"rlx.mul", {B1, B2}, {B}, 2, 1, NULL, 0},
                      {"rlx.add", {A, B}, {S}, 2, 1, NULL, 0},
                      {"rlx.rms_norm", {over ? S : B, G}, {Y}, 2, 1, &at, 1}};
    tens sum = mk(RLX_F32, 2, R, H, 0);
    double *rs = dalloc(R * H), *ry = dalloc(R * H);
    for (int64_t e = 0; e < R * H; e++) {
        double p = as_dt(dt, (double)t[B1].f[e] * t[B2].f[e]);
        rs[e] = as_dt(dt, t[A].f[e] + p);
        sum.f[e] = (float)(over ? rs[e] : p);
    }
    ref_rms_rows(sum.f, t[G].f, 0, 1e-5f, R, H, ry);
    rlx_diag d;
    char what[96];
    snprintf(what, sizeof what, "%s %s [%lld,%lld], %s", over ? "add + rms_norm" : "rms_norm", dtn(dt),
             (long long)R, (long long)H, over == 0 ? "norm over x" : over == 1 ? "sum over input" : "norm over input");
    if (run_prog(g, t, kind, share, NV, nodes, 3, &d))
        fail_msg(g, what, d.msg);
    else
        report(g, what, fmax(rel_l2(&t[Y], ry), rel_l2(&t[S], rs)), tol_of(dt));
    for (int k = 0; k < NV; k++)
        tfree(&t[k]);
    tfree(&sum);
    free(rs);
    free(ry);
}

/* rope of x [T, nh, d] (rot of d rotated) against double; over: x is a product the rope
 * stores over */
static void rope_rows_case(gpu *g, int dt, int64_t T, int64_t nh, int64_t d, int64_t rot, int over)
{
    enum { X1, X2, POS, INV, X, Y, NV };
    tens t[NV] = {rand_t(dt, 3, T, nh, d, 1), rand_t(dt, 3, T, nh, d, 1), mk(RLX_I32, 1, T, 0, 0),
                  mk(RLX_F32, 1, d / 2, 0, 0), mk(dt, 3, T, nh, d), mk(dt, 3, T, nh, d)};
    int64_t r = rot ? rot : d, n = T * nh * d;
    for (int64_t k = 0; k < T; k++)
        t[POS].i[k] = (int32_t)(k * 3119 % 100000);
    for (int64_t i = 0; i < d / 2; i++)
        t[INV].f[i] = (float)pow(500000.0, -2.0 * (double)i / (double)r);
    tens xs = mk(RLX_F32, 3, T, nh, d); /* x as the rope reads it */
    for (int64_t e = 0; e < n; e++)
        xs.f[e] = over ? (float)as_dt(dt, (double)t[X1].f[e] * t[X2].f[e]) : t[X1].f[e];
    double *ref = dalloc(n);
    for (int64_t row = 0; row < T * nh; row++) {
        const float *xr = xs.f + row * d;
        double *yr = ref + row * d;
        for (int64_t j = 0; j < d; j++)
            yr[j] = xr[j];
        for (int64_t i = 0; i < r / 2; i++) {
            double th = (double)t[POS].i[row / nh] * t[INV].f[i];
            yr[i] = xr[i] * cos(th) - xr[i + r / 2] * sin(th);
            yr[i + r / 2] = xr[i + r / 2] * cos(th) + xr[i] * sin(th);
        }
    }
    rlx_attr at = RLX_ATTR_I("rot_dim", rot);
    char what[96];
    snprintf(what, sizeof what, "rope %s [%lld,%lld,%lld] rot %lld%s", dtn(dt), (long long)T, (long long)nh,
             (long long)d, (long long)r, over ? ", over x" : "");
    if (!over) {
        tens ins[3] = {t[X1], t[POS], t[INV]};
        check(g, what, "rlx.rope", ins, 3, &t[Y], 1, &at, 1, 0, &ref, tol_of(dt));
    } else {
        const int kind[NV] = {RLX_VALUE_INPUT, RLX_VALUE_INPUT, RLX_VALUE_INPUT, RLX_VALUE_INPUT,
                              RLX_VALUE_TEMP, RLX_VALUE_OUTPUT};
        const int share[NV] = {-1, -1, -1, -1, -1, X};
        pnode nodes[2] = {{"rlx.mul", {X1, X2}, {X}, 2, 1, NULL, 0},
                          {"rlx.rope", {X, POS, INV}, {Y}, 3, 1, &at, 1}};
        rlx_diag dg;
        if (run_prog(g, t, kind, share, NV, nodes, 2, &dg))
            fail_msg(g, what, dg.msg);
        else
            report(g, what, rel_l2(&t[Y], ref), tol_of(dt));
    }
    for (int k = 0; k < NV; k++)
        tfree(&t[k]);
    tfree(&xs);
    free(ref);
}

/* swiglu / add / mul of [R, H] in one dtype (n % 8 != 0: the last elements one by one);
 * over: the output stored over the first input (a product) */
static void binary_rows_case(gpu *g, int dt, int op, int64_t R, int64_t H, int over)
{
    static const char *ops[3] = {"rlx.swiglu", "rlx.add", "rlx.mul"};
    enum { A1, A2, B, A, Y, NV };
    int64_t n = R * H;
    tens t[NV] = {rand_t(dt, 2, R, H, 0, 3), rand_t(dt, 2, R, H, 0, 1), rand_t(dt, 2, R, H, 0, 3),
                  mk(dt, 2, R, H, 0), mk(dt, 2, R, H, 0)};
    double *r = dalloc(n);
    for (int64_t k = 0; k < n; k++) {
        double u = over ? as_dt(dt, (double)t[A1].f[k] * t[A2].f[k]) : t[A1].f[k], v = t[B].f[k];
        r[k] = op == 0 ? silu_d(u) * v : op == 1 ? u + v : u * v;
    }
    char what[96];
    snprintf(what, sizeof what, "%s %s [%lld,%lld]%s", ops[op], dtn(dt), (long long)R, (long long)H,
             over ? ", over a" : "");
    if (!over) {
        tens ins[2] = {t[A1], t[B]};
        check(g, what, ops[op], ins, 2, &t[Y], 1, NULL, 0, 0, &r, tol_of(dt));
    } else {
        const int kind[NV] = {RLX_VALUE_INPUT, RLX_VALUE_INPUT, RLX_VALUE_INPUT, RLX_VALUE_TEMP, RLX_VALUE_OUTPUT};
        const int share[NV] = {-1, -1, -1, -1, A};
        pnode nodes[2] = {{"rlx.mul", {A1, A2}, {A}, 2, 1, NULL, 0}, {ops[op], {A, B}, {Y}, 2, 1, NULL, 0}};
        rlx_diag dg;
        if (run_prog(g, t, kind, share, NV, nodes, 2, &dg))
            fail_msg(g, what, dg.msg);
        else
            report(g, what, rel_l2(&t[Y], r), tol_of(dt));
    }
    for (int k = 0; k < NV; k++)
        tfree(&t[k]);
    free(r);
}

/* The row kernels' specialised paths (16-byte packs of one dtype) and their fallbacks */
static void test_rows(gpu *g)
{
    for (int k = 0; k < 3; k++) {
        int dt = k == 0 ? RLX_F32 : k == 1 ? RLX_BF16 : RLX_F16;
        rms_rows_case(g, dt, 37, 128, 0);   /* 4 lanes a row, 32 rows a block, the last part full */
        rms_rows_case(g, dt, 70, 1024, 0);  /* a warp a row */
        rms_rows_case(g, dt, 5, 4096, 1);   /* a block a row */
        rms_rows_case(g, dt, 3, 20480, 0);  /* two tiles: read again after the sum */
        rms_rows_case(g, dt, 4, 1000, 0);   /* H % 8 == 0, packs not a multiple of the lanes */
        for (int over = 0; over < 3; over++) {
            rms_rows_over(g, dt, 37, 128, over);
            rms_rows_over(g, dt, 5, 4096, over);
            rms_rows_over(g, dt, 3, 20480, over);
        }
        rope_rows_case(g, dt, 33, 8, 128, 0, 0);  /* 16 pairs' packs a head */
        rope_rows_case(g, dt, 33, 8, 128, 0, 1);
        rope_rows_case(g, dt, 5, 3, 640, 0, 0);   /* angles in two chunks */
        rope_rows_case(g, dt, 7, 3, 96, 48, 1);   /* partial: the rest copied */
        rope_rows_case(g, dt, 7, 3, 20, 12, 0);   /* half % 8 != 0: a pair a thread */
        rope_rows_case(g, dt, 6, 5, 72, 0, 1);
        for (int op = 0; op < 3; op++) {
            binary_rows_case(g, dt, op, 37, 1001, 0);
            binary_rows_case(g, dt, op, 16, 4096, 1);
        }
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Median seconds of one execute over reps runs of 10 executes and a sync (a single-node program). */
static double time_node(gpu *g, const char *op, tens *ins, int n_in, tens *out,
                        const rlx_attr *attrs, int n_attrs, int reps)
{
    rlx_value_desc vals[8];
    int32_t in_ids[6], out_id = n_in;
    void *ptrs[8];
    rlx_diag d;
    memset(vals, 0, sizeof vals);
    memset(&d, 0, sizeof d);
    for (int k = 0; k <= n_in; k++) {
        tens *t = k < n_in ? &ins[k] : out;
        vals[k].struct_size = sizeof vals[k];
        vals[k].kind = k < n_in ? RLX_VALUE_INPUT : RLX_VALUE_OUTPUT;
        vals[k].dtype = t->dtype;
        vals[k].shape = t->shape;
        if (k < n_in)
            in_ids[k] = k;
        ptrs[k] = g->b->alloc(g->be, tbytes(t), &d);
        if (k < n_in)
            g->b->upload(g->be, ptrs[k], tdata(t), tbytes(t), &d);
    }
    rlx_node_desc node = {sizeof node, op, in_ids, (uint32_t)n_in, &out_id, 1, attrs,
                          (uint32_t)n_attrs};
    rlx_program prog = {PROG_SIZE, vals, (uint32_t)n_in + 1, &node, 1, 0, 0};
    void *exe = NULL;
    double best = -1;
    if (g->b->compile(g->be, &prog, &exe, &d) == 0) {
        double *ts = calloc((size_t)reps, sizeof *ts);
        for (int w = 0; w < 3; w++)
            g->b->execute(g->be, exe, ptrs, &d);
        g->b->sync(g->be, &d);
        for (int r = 0; r < reps; r++) { /* 10 back to back: one sync's round trip shared */
            double t0 = now_s();
            for (int k = 0; k < 10; k++)
                g->b->execute(g->be, exe, ptrs, &d);
            g->b->sync(g->be, &d);
            ts[r] = (now_s() - t0) / 10;
        }
        for (int a = 0; a < reps; a++) /* median by insertion sort */
            for (int b = a; b > 0 && ts[b] < ts[b - 1]; b--) {
                double t = ts[b];
                ts[b] = ts[b - 1];
                ts[b - 1] = t;
            }
        best = ts[reps / 2];
        free(ts);
        g->b->release(g->be, exe);
    } else {
        printf("bench compile failed: %s\n", d.msg);
    }
    for (int k = 0; k <= n_in; k++)
        g->b->free(g->be, ptrs[k]);
    return best;
}

static void bench(gpu *g)
{
    int64_t M = 128, K = 2048, N = 8192;
    tens x = rand_f(2, M, K, 0, 1), w = rand_f(2, N, K, 0, 1), y = mk(RLX_F32, 2, M, N, 0);
    tens ins[2] = {x, w};
    double t = time_node(g, "rlx.matmul", ins, 2, &y, NULL, 0, 50);
    printf("BENCH %-6s sgemm M=128 K=2048 N=8192: %.3f ms, %.0f GFLOP/s\n", g->label, t * 1e3,
           2.0 * M * N * K / t * 1e-9);
    tfree(&x);
    tfree(&w);
    tfree(&y);
    /* 16-bit: tensor-core GEMM, the skinny kernel's bandwidth, decode attention */
    {
        int64_t M2 = 512, K2 = 2048, N2 = 8192;
        tens xb = rand_t(RLX_BF16, 2, M2, K2, 0, 1), wb = rand_t(RLX_BF16, 2, N2, K2, 0, 1),
             yb = mk(RLX_BF16, 2, M2, N2, 0);
        tens ib[2] = {xb, wb};
        t = time_node(g, "rlx.matmul", ib, 2, &yb, NULL, 0, 50);
        printf("BENCH %-6s bf16 gemm M=512 K=2048 N=8192: %.3f ms, %.0f GFLOP/s\n", g->label, t * 1e3,
               2.0 * M2 * N2 * K2 / t * 1e-9);
        tfree(&xb);
        tfree(&yb);
        /* the 1B decode shapes: o (and q), down, gate, LM head; then 8192 x 8192 in f32 and bf16;
         * the first three again as a batched step of 8 rows */
        const int64_t shp[9][4] = {{RLX_BF16, 2048, 2048, 1}, {RLX_BF16, 8192, 2048, 1}, {RLX_BF16, 2048, 8192, 1},
                                   {RLX_BF16, 2048, 32000, 1}, {RLX_F32, 8192, 8192, 1}, {RLX_BF16, 8192, 8192, 1},
                                   {RLX_BF16, 2048, 2048, 8}, {RLX_BF16, 8192, 2048, 8}, {RLX_BF16, 2048, 8192, 8}};
        for (int c = 0; c < 9; c++) {
            int dt = (int)shp[c][0];
            int64_t Kv = shp[c][1], Nv = shp[c][2], Mv = shp[c][3];
            tens xv = rand_t(dt, 2, Mv, Kv, 0, 1), wv = rand_t(dt, 2, Nv, Kv, 0, 1), yv = mk(dt, 2, Mv, Nv, 0);
            tens iv[2] = {xv, wv};
            t = time_node(g, "rlx.matmul", iv, 2, &yv, NULL, 0, 50);
            printf("BENCH %-6s gemv %s M=%lld K=%lld N=%lld: %.4f ms, %.0f GB/s of weights\n", g->label,
                   dtn(dt), (long long)Mv, (long long)Kv, (long long)Nv, t * 1e3, (double)tbytes(&wv) / t * 1e-9);
            tfree(&xv);
            tfree(&wv);
            tfree(&yv);
        }
        tfree(&wb);
        tens q = rand_t(RLX_BF16, 3, 1, 32, 64, 1), k = rand_t(RLX_BF16, 3, 2048, 8, 64, 1),
             v = rand_t(RLX_BF16, 3, 2048, 8, 64, 1), pos = mk(RLX_I32, 1, 1, 0, 0),
             o = mk(RLX_BF16, 3, 1, 32, 64);
        tens ai[4] = {q, k, v, pos};
        rlx_attr at[2] = {RLX_ATTR_F("scale", 0.125), RLX_ATTR_I("causal", 1)};
        for (int c = 0; c < 2; c++) { /* the cache full, and at the bench's decode length */
            pos.i[0] = c ? 639 : 2047;
            t = time_node(g, "rlx.attention", ai, 4, &o, at, 2, 50);
            printf("BENCH %-6s decode attention bf16 S=2048 pos=%d nh=32 nkv=8 d=64: %.1f us, %.0f GB/s of KV\n",
                   g->label, pos.i[0], t * 1e6, (double)(pos.i[0] + 1) * (tbytes(&k) + tbytes(&v)) / 2048 / t * 1e-9);
        }
        tens all[] = {q, k, v, pos, o};
        for (int j = 0; j < 5; j++)
            tfree(&all[j]);
    }
    /* f32 (SIMT kernel) and bf16 (tensor cores); the last: the 1B shape's prefill-512 */
    for (int c = 0; c < 5; c++) {
        int T = c < 4 ? 2048 : 512, nh = 32, d = c < 4 ? 128 : 64, nkv = c % 2 ? 8 : 32;
        int dt = c < 2 ? RLX_F32 : RLX_BF16;
        tens q = rand_t(dt, 3, T, nh, d, 1), k = rand_t(dt, 3, T, nkv, d, 1), v = rand_t(dt, 3, T, nkv, d, 1),
             o = mk(dt, 3, T, nh, d);
        tens ai[3] = {q, k, v};
        rlx_attr at[2] = {RLX_ATTR_F("scale", 1.0 / sqrt(d)), RLX_ATTR_I("causal", 1)};
        t = time_node(g, "rlx.attention", ai, 3, &o, at, 2, 20);
        double fl = 4.0 * nh * d * ((double)T * (T + 1) / 2); /* causal: QK and PV */
        printf("BENCH %-6s attention %s T=%d nh=32 nkv=%d d=%d causal: %.3f ms, %.0f GFLOP/s\n",
               g->label, dtn(dt), T, nkv, d, t * 1e3, fl / t * 1e-9);
        tfree(&q);
        tfree(&k);
        tfree(&v);
        tfree(&o);
    }
    /* the FLUX VAE's widest conv: 512 -> 512 channels, 3x3, on a 128x128 latent (1024 px) */
    tens cx = rand_f(3, 512, 128, 128, 1), cw = rand_4(512, 512, 3, 3, 0.05), cb = rand_f(1, 512, 0, 0, 1),
         cy = mk(RLX_F32, 3, 512, 128, 128);
    tens ci[3] = {cx, cw, cb};
    rlx_attr pad = RLX_ATTR_I("padding", 1);
    t = time_node(g, "rlx.conv2d", ci, 3, &cy, &pad, 1, 10);
    printf("BENCH %-6s conv2d 512->512 3x3 on 128x128: %.3f ms, %.0f GFLOP/s\n", g->label, t * 1e3,
           2.0 * 512 * 512 * 9 * 128 * 128 / t * 1e-9);
    tfree(&cx);
    tfree(&cw);
    tfree(&cb);
    tfree(&cy);
}

/* ---------------------------------------------------------------- main */

static int run_plugin(const char *path, rlx_host_api *host)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("FAIL dlopen %s: %s\n", path, dlerror());
        return 1;
    }
    rlx_plugin_init_fn init = (rlx_plugin_init_fn)dlsym(h, RLX_PLUGIN_ENTRY_NAME);
    const rlx_plugin_desc *desc = init ? init(host) : NULL;
    if (!desc || desc->n_backends != 1) {
        printf("FAIL %s: no backend descriptor\n", path);
        return 1;
    }
    const rlx_backend *b = desc->backends[0];
    rlx_backend_probe pr;
    memset(&pr, 0, sizeof pr);
    pr.struct_size = sizeof pr;
    b->probe(&pr);
    if (!pr.available) {
        printf("SKIP %s: no device: %s\n", b->name, pr.reason);
        return 77;
    }
    printf("%s: %s | %s\n", b->name, pr.n_devices ? pr.devices[0] : "?", pr.details);
    int own_runs = strcmp(b->name, "cuda") == 0 ? 2 : 1; /* cuda: cuBLAS, then own GEMM */
    for (int pass = 0; pass < own_runs; pass++) {
        for (int graphs = 0; graphs < 2; graphs++) {
            if (pass == 1)
                setenv("RLX_GPU_GEMM", "own", 1);
            else
                unsetenv("RLX_GPU_GEMM");
            rlx_backend_options opt;
            memset(&opt, 0, sizeof opt);
            opt.struct_size = sizeof opt;
            opt.graphs = graphs;
            rlx_diag d;
            memset(&d, 0, sizeof d);
            gpu g = {b, NULL, NULL};
            char label[32];
            snprintf(label, sizeof label, "%s%s%s", b->name, pass ? "+own" : "", graphs ? "+g" : "");
            g.label = label;
            if (b->init(&opt, &g.be, &d) != 0) {
                printf("FAIL %s init: %s\n", label, d.msg);
                return 1;
            }
            if (graphs) { /* graphs: the ops whose launches differ most */
                test_matmul(&g);
                test_attention(&g);
                test_layout(&g);
                test_bmm_maps(&g);
                test_half(&g);
                test_rows(&g);
                test_fused(&g);
            } else {
                test_matmul(&g);
                if (pass == 0) {
                    test_abi12(&g);
                    test_elementwise(&g);
                    test_bmm_maps(&g);
                    test_rope(&g);
                    test_layout(&g);
                    test_spatial(&g);
                }
                test_attention(&g);
                test_half(&g);
                test_rows(&g);
                test_fused(&g);
                if (getenv("RLX_GPU_BENCH") && strcmp(getenv("RLX_GPU_BENCH"), "1") == 0)
                    bench(&g);
            }
            b->teardown(g.be);
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    rlx_host_api host;
    memset(&host, 0, sizeof host);
    host.struct_size = (uint32_t)RLX_STRUCT_SIZE(rlx_host_api, flow_repeat_end);
    host.abi_major = RLX_ABI_MAJOR;
    host.abi_minor = RLX_ABI_MINOR;
    host.log = host_log;
    host.diag_set = host_diag_set;
    rng_state = (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
    if (getenv("RLX_TEST_SEED"))
        rng_state = strtoull(getenv("RLX_TEST_SEED"), NULL, 10);
    printf("seed %llu\n", (unsigned long long)rng_state);
    setvbuf(stdout, NULL, _IOLBF, 0);

    const char *paths[4];
    int n = 0;
    static char buf[2][4096];
    const char *bd = getenv("RLX_BUILDDIR") ? getenv("RLX_BUILDDIR") : ".";
    for (int k = 1; k < argc && n < 4; k++)
        paths[n++] = argv[k];
#ifdef RLX_TEST_CUDA
    if (argc < 2) {
        snprintf(buf[0], sizeof buf[0], "%s/plugins/backends/cuda/.libs/rlx-backend-cuda.so", bd);
        paths[n++] = buf[0];
    }
#endif
#ifdef RLX_TEST_ROCM
    if (argc < 2) {
        snprintf(buf[1], sizeof buf[1], "%s/plugins/backends/rocm/.libs/rlx-backend-rocm.so", bd);
        paths[n++] = buf[1];
    }
#endif
    (void)bd;
    (void)buf;
    if (n == 0) {
        printf("no GPU plugin built or named\n");
        return 77;
    }
    int ran = 0, rc = 0;
    for (int k = 0; k < n; k++) {
        int r = run_plugin(paths[k], &host);
        if (r == 77)
            continue;
        ran++;
        if (r)
            rc = 1;
    }
    if (!ran && !rc)
        return 77;
    printf("%d checks, %d failures\n", checks, failures);
    return rc || failures ? 1 : 0;
}
