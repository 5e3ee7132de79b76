/* Elementwise, lookup and layout kernels: one thread per element, grid-stride loops; float
 * operands in any of f32/f16/bf16 (gpu_dtype.h), layout ops on 2- or 4-byte elements. */
#include "gpu_dtype.h"

#include <string.h>

#define PW_THREADS 256

static unsigned pw_blocks(int64_t n)
{
    int64_t b = (n + PW_THREADS - 1) / PW_THREADS;
    if (b < 1)
        b = 1;
    return (unsigned)(b > 65535 * 8 ? 65535 * 8 : b);
}

#define GRID_STRIDE(i, n)                                                                     \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                \
         i += (int64_t)gridDim.x * blockDim.x)

__device__ static inline float gelu_tanh_f(float x)
{
    const float c = 0.7978845608028654f; /* sqrt(2/pi) */
    return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

__global__ static void k_unary(int op, gpu_ten x, gpu_ten y, int64_t n, float p)
{
    GRID_STRIDE(i, n)
    {
        float v = ldt(x, i), r;
        switch (op) {
        case GU_SCALE: r = v * p; break;
        case GU_ADD_SCALAR: r = v + p; break;
        case GU_SILU: r = silu_f(v); break;
        case GU_GELU: r = 0.5f * v * (1.0f + erff(v * 0.7071067811865476f)); break;
        case GU_GELU_TANH: r = gelu_tanh_f(v); break;
        case GU_TANH: r = tanhf(v); break;
        default: r = p * tanhf(v / p); break; /* GU_SOFTCAP */
        }
        stt(y, i, r);
    }
}

void gpu_unary_t(gpuStream_t s, int op, gpu_ten x, gpu_ten y, int64_t n, float p)
{
    RLX_LAUNCH(k_unary, pw_blocks(n), PW_THREADS, 0, s)(op, x, y, n, p);
}

__device__ static inline float binary_f(int op, float u, float v)
{
    switch (op) {
    case GB_ADD: return u + v;
    case GB_SUB: return u - v;
    case GB_MUL: return u * v;
    case GB_SWIGLU: return silu_f(u) * v;
    default: return gelu_tanh_f(u) * v; /* GB_GEGLU_TANH */
    }
}

__global__ static void k_up_scatter(gpu_up_batch b)
{
    const int k = threadIdx.x / GPU_UP_BYTES, i = threadIdx.x % GPU_UP_BYTES;
    if (k < b.n && i < b.e[k].bytes)
        ((unsigned char *)b.e[k].dst)[i] = b.e[k].b[i];
}

void gpu_up_scatter(gpuStream_t s, const gpu_up_batch *b)
{
    RLX_LAUNCH(k_up_scatter, 1, GPU_UP_N * GPU_UP_BYTES, 0, s)(*b);
}

__global__ static void k_add_i32(const int32_t *x, int32_t *y, int64_t n, int32_t v)
{
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = x[i] + v;
}

void gpu_add_i32(gpuStream_t s, const int32_t *x, int32_t *y, int64_t n, int32_t v)
{
    RLX_LAUNCH(k_add_i32, (unsigned)((n + 255) / 256), 256, 0, s)(x, y, n, v);
}

__global__ static void k_binary(int op, gpu_ten a, gpu_ten b, gpu_ten y, int64_t n, int64_t nb)
{
    GRID_STRIDE(i, n) stt(y, i, binary_f(op, ldt(a, i), ldt(b, nb == n ? i : i % nb)));
}

/* k_binary without broadcast, a and b in dtype DA and y in DY known here: 8 elements a
 * thread in 16-byte packs (addresses 16-byte aligned), the last n % 8 one each */
template <int OP, int DA, int DY>
__global__ static void k_binary8(const void *a, const void *b, void *y, int64_t n)
{
    const int64_t n8 = n / 8, i0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (int64_t g = i0; g < n8; g += (int64_t)gridDim.x * blockDim.x) {
        float u[8], v[8], r[8];
        pk8_unpack<DA>(pk8_load<DA>(a, g * 8), u);
        pk8_unpack<DA>(pk8_load<DA>(b, g * 8), v);
#pragma unroll
        for (int j = 0; j < 8; j++)
            r[j] = binary_f(OP, u[j], v[j]);
        pk8_store<DY>(y, g * 8, pk8_pack<DY>(r));
    }
    const int64_t e = n8 * 8 + i0;
    if (e < n)
        st_dt<DY>(y, e, binary_f(OP, ld_dt<DA>(a, e), ld_dt<DA>(b, e)));
}

template <int DA, int DY>
static void binary8(gpuStream_t s, int op, gpu_ten a, gpu_ten b, gpu_ten y, int64_t n)
{
    void (*k)(const void *, const void *, void *, int64_t) =
        op == GB_ADD      ? k_binary8<GB_ADD, DA, DY>
        : op == GB_SUB    ? k_binary8<GB_SUB, DA, DY>
        : op == GB_MUL    ? k_binary8<GB_MUL, DA, DY>
        : op == GB_SWIGLU ? k_binary8<GB_SWIGLU, DA, DY>
                          : k_binary8<GB_GEGLU_TANH, DA, DY>;
    RLX_LAUNCH(k, pw_blocks(n / 8), PW_THREADS, 0, s)(a.p, b.p, y.p, n);
}

void gpu_binary_t(gpuStream_t s, int op, gpu_ten a, gpu_ten b, gpu_ten y, int64_t n, int64_t nb)
{
    /* no broadcast, a and b of one dtype, y in it or (f32 inputs) 16-bit: 16-byte packs */
    bool vec = n == nb && n > 0 && a.dt == b.dt && al16(a.p) && al16(b.p) && al16(y.p) &&
               op >= GB_ADD && op <= GB_GEGLU_TANH;
    int da = a.dt, dy = y.dt;
    if (vec && da == GDT_BF16 && dy == GDT_BF16)
        binary8<GDT_BF16, GDT_BF16>(s, op, a, b, y, n);
    else if (vec && da == GDT_F16 && dy == GDT_F16)
        binary8<GDT_F16, GDT_F16>(s, op, a, b, y, n);
    else if (vec && da == GDT_F32 && dy == GDT_F32)
        binary8<GDT_F32, GDT_F32>(s, op, a, b, y, n);
    else if (vec && da == GDT_F32 && dy == GDT_BF16)
        binary8<GDT_F32, GDT_BF16>(s, op, a, b, y, n);
    else if (vec && da == GDT_F32 && dy == GDT_F16)
        binary8<GDT_F32, GDT_F16>(s, op, a, b, y, n);
    else
        RLX_LAUNCH(k_binary, pw_blocks(n), PW_THREADS, 0, s)(op, a, b, y, n, nb);
}

__global__ static void k_cast(gpu_ten x, gpu_ten y, int64_t n)
{
    GRID_STRIDE(i, n)
    {
        if (x.dt == GDT_I32 && y.dt == GDT_I32)
            ((int32_t *)y.p)[i] = ((const int32_t *)x.p)[i];
        else if (x.dt == GDT_I32)
            stt(y, i, (float)((const int32_t *)x.p)[i]);
        else if (y.dt == GDT_I32)
            ((int32_t *)y.p)[i] = (int32_t)ldt(x, i); /* truncation, as C */
        else
            stt(y, i, ldt(x, i));
    }
}

void gpu_cast_t(gpuStream_t s, gpu_ten x, gpu_ten y, int64_t n)
{
    RLX_LAUNCH(k_cast, pw_blocks(n), PW_THREADS, 0, s)(x, y, n);
}

__global__ static void k_bias_cast(gpu_ten x, gpu_ten bias, gpu_ten y, int64_t total, int64_t n)
{
    GRID_STRIDE(i, total) stt(y, i, ldt(x, i) + (bias.p ? ldt(bias, i % n) : 0.0f));
}

void gpu_bias_cast(gpuStream_t s, gpu_ten x, gpu_ten bias, gpu_ten y, int64_t rows, int64_t n)
{
    RLX_LAUNCH(k_bias_cast, pw_blocks(rows * n), PW_THREADS, 0, s)(x, bias, y, rows * n, n);
}

__global__ static void k_embedding(gpu_ten table, const int32_t *ids, gpu_ten y, int64_t T,
                                   int64_t V, int64_t H, int *err, int node)
{
    GRID_STRIDE(i, T * H)
    {
        int64_t t = i / H, h = i - t * H;
        int32_t id = ids[t];
        if (id < 0 || id >= V) {
            if (h == 0)
                record_error(err, GPU_ERR_EMBED_ID, id, node);
            stt(y, i, 0.0f);
        } else {
            stt(y, i, ldt(table, (int64_t)id * H + h));
        }
    }
}

void gpu_embedding(gpuStream_t s, gpu_ten table, const int32_t *ids, gpu_ten y, int64_t T,
                   int64_t V, int64_t H, int *err, int node)
{
    RLX_LAUNCH(k_embedding, pw_blocks(T * H), PW_THREADS, 0, s)(table, ids, y, T, V, H, err,
                                                                 node);
}

template <typename E>
__global__ static void k_cache_write(E *cache, const E *x, const int32_t *pos, int64_t S,
                                     int64_t T, int64_t row, int *err, int node)
{
    int64_t p = pos[0];
    if (p < 0 || p + T > S) {
        if (blockIdx.x == 0 && threadIdx.x == 0)
            record_error(err, GPU_ERR_CACHE_ROWS, (int)p, node);
        return;
    }
    GRID_STRIDE(i, T * row) cache[p * row + i] = x[i];
}

void gpu_cache_write(gpuStream_t s, void *cache, const void *x, const int32_t *pos, int64_t S,
                     int64_t T, int64_t row_elems, int esize, int *err, int node)
{
    if (esize == 2)
        RLX_LAUNCH(k_cache_write<uint16_t>, pw_blocks(T * row_elems), PW_THREADS, 0, s)(
            (uint16_t *)cache, (const uint16_t *)x, pos, S, T, row_elems, err, node);
    else
        RLX_LAUNCH(k_cache_write<uint32_t>, pw_blocks(T * row_elems), PW_THREADS, 0, s)(
            (uint32_t *)cache, (const uint32_t *)x, pos, S, T, row_elems, err, node);
}

/* Rope and cache writes of one attention step in one launch (blockIdx.y picks the job):
 * a rope job rotates x into y (as k_rope) and, with a cache, stores the same values in rows
 * cpos[0].. of the cache; a copy job (no inv_freq) only writes x into the cache. x's rows
 * may be xld apart (a column range of the q/k/v GEMM's product). */
/* the rotation of element i (< rot/2) of job j's row t: the same double arithmetic before
 * and after the wait, so both give the same bits */
__device__ static void rc_angle(const gpu_rc_job &j, int64_t t, int64_t i, double *sn, double *cs)
{
    sincos((double)j.rpos[t] * (double)ldt(j.inv_freq, i), sn, cs);
}

__global__ static void k_rope_cache(gpu_rc_jobs jb, int *err)
{
    RLX_PDL_TRIGGER(); /* decode attention may launch now */
    const gpu_rc_job &j = jb.j[blockIdx.y];
    const int64_t d = j.d, half = j.rot / 2, n = j.T * j.nh * d;
    /* the angle of the thread's first element from inputs fixed before the step, computed
     * while the kernel before finishes (its double sincos is a long chain) */
    const int64_t e0 = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    double sn0 = 0.0, cs0 = 1.0;
    bool have0 = false;
    if (j.early && j.inv_freq.p && e0 < n && e0 % d < 2 * half) {
        const int64_t c = e0 % d, i = c < half ? c : c - half;
        rc_angle(j, e0 / (j.nh * d), i, &sn0, &cs0);
        have0 = true;
    }
    RLX_PDL_WAIT(); /* x comes from the kernel before */
    int64_t p = j.cache.p ? j.cpos[0] : 0;
    bool to_cache = j.cache.p != NULL;
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) /* the first bad write, as in order */
        for (int i = 0; i < jb.n; i++) {
            const gpu_rc_job &o = jb.j[i];
            int64_t q = o.cache.p ? o.cpos[0] : 0;
            if (o.cache.p && (q < 0 || q + o.T > o.S)) {
                record_error(err, GPU_ERR_CACHE_ROWS, (int)q, o.node);
                break;
            }
        }
    if (to_cache && (p < 0 || p + j.T > j.S)) {
        to_cache = false;
        if (!j.inv_freq.p)
            return;
    }
    const int64_t xpad = j.xld ? j.xld - j.nh * d : 0; /* x's row stride past its nh * d */
    GRID_STRIDE(e, n)
    {
        float v;
        int64_t c = e % d, t = e / (j.nh * d), xe = e + t * xpad, row = xe - c;
        if (!j.inv_freq.p || c >= 2 * half) {
            v = ldt(j.x, xe);
        } else {
            int64_t i = c < half ? c : c - half;
            double sn = sn0, cs = cs0;
            if (!have0 || e != e0)
                rc_angle(j, t, i, &sn, &cs);
            double x1 = ldt(j.x, row + i), x2 = ldt(j.x, row + i + half);
            v = (float)(c < half ? x1 * cs - x2 * sn : x2 * cs + x1 * sn);
        }
        if (j.y.p)
            stt(j.y, e, v);
        if (to_cache)
            stt(j.cache, p * j.nh * d + e, v);
    }
}

void gpu_rope_cache(gpuStream_t s, const gpu_rc_job *jobs, int n, int *err)
{
    gpu_rc_jobs jb;
    memset(&jb, 0, sizeof jb);
    int64_t most = 1;
    for (int i = 0; i < n && i < GPU_RC_JOBS; i++) {
        jb.j[i] = jobs[i];
        jb.n = i + 1;
        if (jobs[i].T * jobs[i].nh * jobs[i].d > most)
            most = jobs[i].T * jobs[i].nh * jobs[i].d;
    }
    dim3 g(pw_blocks(most), (unsigned)(n < GPU_RC_JOBS ? n : GPU_RC_JOBS));
    rlx_launch_pdl(rlx_pdl_on(0), k_rope_cache, g, dim3(PW_THREADS), 0, s, jb, err);
}

template <typename E> __global__ static void k_transpose(const E *x, E *y, int64_t n, gpu_perm p)
{
    GRID_STRIDE(i, n)
    {
        int64_t rem = i, src = 0;
        for (int a = p.ndim - 1; a >= 0; a--) {
            int64_t c = rem % p.out_dims[a];
            rem /= p.out_dims[a];
            src += c * p.in_strides[a];
        }
        y[i] = x[src];
    }
}

void gpu_transpose(gpuStream_t s, const void *x, void *y, int64_t n, const gpu_perm *p, int esize)
{
    if (esize == 2)
        RLX_LAUNCH(k_transpose<uint16_t>, pw_blocks(n), PW_THREADS, 0, s)((const uint16_t *)x,
                                                                         (uint16_t *)y, n, *p);
    else
        RLX_LAUNCH(k_transpose<uint32_t>, pw_blocks(n), PW_THREADS, 0, s)((const uint32_t *)x,
                                                                         (uint32_t *)y, n, *p);
}

template <typename E>
__global__ static void k_concat(const E *a, const E *b, E *y, int64_t outer, int64_t ia, int64_t ib)
{
    int64_t io = ia + ib;
    GRID_STRIDE(i, outer * io)
    {
        int64_t o = i / io, r = i - o * io;
        y[i] = r < ia ? a[o * ia + r] : b[o * ib + (r - ia)];
    }
}

void gpu_concat(gpuStream_t s, const void *a, const void *b, void *y, int64_t outer, int64_t ia,
                int64_t ib, int esize)
{
    if (esize == 2)
        RLX_LAUNCH(k_concat<uint16_t>, pw_blocks(outer * (ia + ib)), PW_THREADS, 0, s)(
            (const uint16_t *)a, (const uint16_t *)b, (uint16_t *)y, outer, ia, ib);
    else
        RLX_LAUNCH(k_concat<uint32_t>, pw_blocks(outer * (ia + ib)), PW_THREADS, 0, s)(
            (const uint32_t *)a, (const uint32_t *)b, (uint32_t *)y, outer, ia, ib);
}

template <typename E>
__global__ static void k_slice(const E *x, E *y, int64_t outer, int64_t in_inner,
                               int64_t start_off, int64_t out_inner)
{
    GRID_STRIDE(i, outer * out_inner)
    {
        int64_t o = i / out_inner, r = i - o * out_inner;
        y[i] = x[o * in_inner + start_off + r];
    }
}

void gpu_slice(gpuStream_t s, const void *x, void *y, int64_t outer, int64_t in_inner,
               int64_t start_off, int64_t out_inner, int esize)
{
    if (esize == 2)
        RLX_LAUNCH(k_slice<uint16_t>, pw_blocks(outer * out_inner), PW_THREADS, 0, s)(
            (const uint16_t *)x, (uint16_t *)y, outer, in_inner, start_off, out_inner);
    else
        RLX_LAUNCH(k_slice<uint32_t>, pw_blocks(outer * out_inner), PW_THREADS, 0, s)(
            (const uint32_t *)x, (uint32_t *)y, outer, in_inner, start_off, out_inner);
}

template <typename E>
__global__ static void k_take_row(const E *x, const int32_t *row, E *y, int64_t T, int64_t n)
{
    int64_t t = row[0] < 0 ? 0 : row[0] >= T ? T - 1 : row[0];
    GRID_STRIDE(i, n) y[i] = x[t * n + i];
}

void gpu_take_row(gpuStream_t s, const void *x, const int32_t *row, void *y, int64_t T, int64_t n,
                  int esize)
{
    if (esize == 2)
        RLX_LAUNCH(k_take_row<uint16_t>, pw_blocks(n), PW_THREADS, 0, s)((const uint16_t *)x, row,
                                                                         (uint16_t *)y, T, n);
    else
        RLX_LAUNCH(k_take_row<uint32_t>, pw_blocks(n), PW_THREADS, 0, s)((const uint32_t *)x, row,
                                                                         (uint32_t *)y, T, n);
}
