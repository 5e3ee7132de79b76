/* Row kernels: one block per row, reductions in f32 through shared memory (no warp-size
 * assumption, so the same code runs on 32- and 64-wide AMD waves); the specialised
 * rms_norm shuffles within 32 lanes at most, which a 64-wide wave runs as two halves. */
#include "gpu_dtype.h"

#define ROW_THREADS 256

/* Sum (or max) of v over the block; every thread gets the result. */
__device__ static float block_reduce(float v, int is_max)
{
    __shared__ float red[ROW_THREADS];
    red[threadIdx.x] = v;
    __syncthreads();
    for (int w = ROW_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) {
            float o = red[threadIdx.x + w];
            red[threadIdx.x] = is_max ? fmaxf(red[threadIdx.x], o) : red[threadIdx.x] + o;
        }
        __syncthreads();
    }
    float r = red[0];
    __syncthreads(); /* red is reused by the next call */
    return r;
}

/* The sum a + b is stored in sum_out's dtype and the norm reads it back as stored, as a
 * framework that keeps the residual stream in that dtype does. A thread takes its elements
 * RN_KEEP at a time into registers, every load of a tile issued before its first store (a
 * loop that stores between loads waits a memory round trip per element, since sum_out and
 * y may sit on a or b); a row of one tile (up to ROW_THREADS * RN_KEEP) is not read again. */
#define RN_KEEP 16
__global__ static void k_rms_norm(gpu_ten a, gpu_ten b, gpu_ten w, gpu_ten sum_out, gpu_ten y,
                                  int64_t H, float eps, int add_one)
{
    const int64_t base = (int64_t)blockIdx.x * H, tile = (int64_t)ROW_THREADS * RN_KEEP;
    float v[RN_KEEP], ss = 0.0f;
    for (int64_t t0 = 0; t0 < H; t0 += tile) {
#pragma unroll
        for (int k = 0; k < RN_KEEP; k++) {
            int64_t i = t0 + threadIdx.x + (int64_t)k * ROW_THREADS;
            v[k] = i < H ? ldt(a, base + i) : 0.0f;
            if (b.p && i < H)
                v[k] = round_to(sum_out.dt, v[k] + ldt(b, base + i));
        }
#pragma unroll
        for (int k = 0; k < RN_KEEP; k++) {
            int64_t i = t0 + threadIdx.x + (int64_t)k * ROW_THREADS;
            if (i < H) {
                if (b.p)
                    stt(sum_out, base + i, v[k]);
                ss += v[k] * v[k];
            }
        }
    }
    float r = rsqrtf(block_reduce(ss, 0) / (float)H + eps);
    for (int64_t t0 = 0; t0 < H; t0 += tile) {
        float g[RN_KEEP];
#pragma unroll
        for (int k = 0; k < RN_KEEP; k++) {
            int64_t i = t0 + threadIdx.x + (int64_t)k * ROW_THREADS;
            if (H > tile && i < H) /* the tile's values as stored */
                v[k] = b.p ? ldt(sum_out, base + i) : ldt(a, base + i);
            g[k] = i < H ? (add_one ? 1.0f + ldt(w, i) : ldt(w, i)) : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < RN_KEEP; k++) {
            int64_t i = t0 + threadIdx.x + (int64_t)k * ROW_THREADS;
            if (i < H)
                stt(y, base + i, v[k] * r * g[k]);
        }
    }
}

/* Sum over the tpr threads of a row (tpr a power of two up to 32; a lane group of a warp) */
__device__ __forceinline__ static float group_sum(float v, int tpr)
{
    for (int m = tpr / 2; m > 0; m >>= 1)
        v += RLX_SHFL_XOR(v, m, tpr);
    return v;
}

/* k_rms_norm specialised: a, b, sum_out and y in dtype DT, w in WD, H % 8 == 0 and every
 * row 16-byte aligned. Thread t of a row's tpr holds the 8-element packs t + k*tpr
 * (k < RV_KEEP) in registers as loaded or stored, so a row up to tpr*RV_KEEP packs is
 * read once, and every load of a tile is issued before its first store (the aliasing
 * rule of k_rms_norm). BLOCK: one row a block (tpr = blockDim.x, the sum across warps
 * through shared memory); else blockDim.x / tpr rows a block, a row's
 * tpr <= 32 lanes reducing by shuffles only. */
#define RV_KEEP 4
#define RV_ROWS_THREADS 128 /* a block of the several-rows form */
#define RV_MAX_THREADS 512 /* a row's block at most (registers) */
template <int DT, int WD, bool ADD, bool BLOCK>
__global__ static __launch_bounds__(RV_MAX_THREADS) void
k_rms_norm8(const void *a, const void *b, const void *w, void *sum_out, void *y, int64_t rows,
            int64_t H, float eps, int add_one, int tpr)
{
    __shared__ float part[32];
    const int t = BLOCK ? (int)threadIdx.x : (int)threadIdx.x % tpr;
    const int64_t row = BLOCK ? (int64_t)blockIdx.x
                              : (int64_t)blockIdx.x * (blockDim.x / tpr) + threadIdx.x / tpr;
    const bool live = BLOCK || row < rows; /* no early return: every lane shuffles */
    const int64_t base = row * H, G = live ? H / 8 : 0, tile = (int64_t)tpr * RV_KEEP;
    pk8<DT> v[RV_KEEP];
    pk8<WD> gw[RV_KEEP];
    float ss = 0.0f;
    for (int64_t g0 = 0; g0 < G; g0 += tile) {
        pk8<DT> u[ADD ? RV_KEEP : 1];
#pragma unroll
        for (int k = 0; k < RV_KEEP; k++) {
            int64_t gi = g0 + t + (int64_t)k * tpr;
            if (gi < G) {
                v[k] = pk8_load<DT>(a, base + gi * 8);
                if (ADD)
                    u[ADD ? k : 0] = pk8_load<DT>(b, base + gi * 8);
                if (G <= tile) /* one tile: its weights too, off the path after the sum */
                    gw[k] = pk8_load<WD>(w, gi * 8);
            }
        }
#pragma unroll
        for (int k = 0; k < RV_KEEP; k++) {
            int64_t gi = g0 + t + (int64_t)k * tpr;
            if (gi < G) {
                float f[8];
                pk8_unpack<DT>(v[k], f);
                if (ADD) {
                    float e[8];
                    pk8_unpack<DT>(u[ADD ? k : 0], e);
#pragma unroll
                    for (int j = 0; j < 8; j++)
                        f[j] += e[j];
                    v[k] = pk8_pack<DT>(f); /* the sum as stored, and read back as stored */
                    pk8_store<DT>(sum_out, base + gi * 8, v[k]);
                    pk8_unpack<DT>(v[k], f);
                }
#pragma unroll
                for (int j = 0; j < 8; j++)
                    ss += f[j] * f[j];
            }
        }
    }
    ss = group_sum(ss, BLOCK ? 32 : tpr);
    if (BLOCK) {
        const int nw = (int)(blockDim.x + 31) / 32;
        if (threadIdx.x % 32 == 0)
            part[threadIdx.x / 32] = ss;
        __syncthreads();
        ss = 0.0f;
        for (int k = 0; k < nw; k++)
            ss += part[k];
    }
    const float r = rsqrtf(ss / (float)H + eps);
    for (int64_t g0 = 0; g0 < G; g0 += tile) {
#pragma unroll
        for (int k = 0; k < RV_KEEP; k++) {
            int64_t gi = g0 + t + (int64_t)k * tpr;
            if (gi < G && G > tile) { /* the tile's values as stored */
                v[k] = pk8_load<DT>(ADD ? (const void *)sum_out : a, base + gi * 8);
                gw[k] = pk8_load<WD>(w, gi * 8);
            }
        }
#pragma unroll
        for (int k = 0; k < RV_KEEP; k++) {
            int64_t gi = g0 + t + (int64_t)k * tpr;
            if (gi < G) {
                float f[8], g[8];
                pk8_unpack<DT>(v[k], f);
                pk8_unpack<WD>(gw[k], g);
#pragma unroll
                for (int j = 0; j < 8; j++)
                    f[j] = f[j] * r * (add_one ? 1.0f + g[j] : g[j]);
                pk8_store<DT>(y, base + gi * 8, pk8_pack<DT>(f));
            }
        }
    }
}

template <int DT, int WD, bool ADD>
static void rms_norm8(gpuStream_t s, gpu_ten a, gpu_ten b, gpu_ten w, gpu_ten sum_out, gpu_ten y,
                      int64_t rows, int64_t H, float eps, int add_one)
{
    int64_t packs = H / 8, per = (packs + RV_KEEP - 1) / RV_KEEP; /* threads to keep a row */
    if (per <= 32) { /* a lane group per row, several rows a block */
        int tpr = 1;
        while (tpr < per)
            tpr *= 2;
        int64_t rpb = RV_ROWS_THREADS / tpr, blocks = (rows + rpb - 1) / rpb;
        unsigned nt = (unsigned)(rows < rpb ? ((rows * tpr + 31) / 32) * 32 : RV_ROWS_THREADS);
        RLX_LAUNCH((k_rms_norm8<DT, WD, ADD, false>), (unsigned)blocks, nt, 0, s)(
            a.p, b.p, w.p, sum_out.p, y.p, rows, H, eps, add_one, tpr);
    } else { /* a block per row, sized to keep the row (longer rows: tiles read twice) */
        int nt = (int)(per > RV_MAX_THREADS ? RV_MAX_THREADS : (per + 31) / 32 * 32);
        RLX_LAUNCH((k_rms_norm8<DT, WD, ADD, true>), (unsigned)rows, (unsigned)nt, 0, s)(
            a.p, b.p, w.p, sum_out.p, y.p, rows, H, eps, add_one, nt);
    }
}

template <int DT, int WD>
static void rms_norm8_add(gpuStream_t s, gpu_ten a, gpu_ten b, gpu_ten w, gpu_ten sum_out, gpu_ten y,
                          int64_t rows, int64_t H, float eps, int add_one)
{
    if (b.p)
        rms_norm8<DT, WD, true>(s, a, b, w, sum_out, y, rows, H, eps, add_one);
    else
        rms_norm8<DT, WD, false>(s, a, b, w, sum_out, y, rows, H, eps, add_one);
}

template <int DT>
static void rms_norm8_w(gpuStream_t s, gpu_ten a, gpu_ten b, gpu_ten w, gpu_ten sum_out, gpu_ten y,
                        int64_t rows, int64_t H, float eps, int add_one)
{
    if (w.dt == DT)
        rms_norm8_add<DT, DT>(s, a, b, w, sum_out, y, rows, H, eps, add_one);
    else
        rms_norm8_add<DT, GDT_F32>(s, a, b, w, sum_out, y, rows, H, eps, add_one);
}

static bool is_float_dt(int dt) { return dt == GDT_F32 || dt == GDT_F16 || dt == GDT_BF16; }

void gpu_rms_norm(gpuStream_t s, gpu_ten a, gpu_ten b, gpu_ten w, gpu_ten sum_out, gpu_ten y,
                  int64_t rows, int64_t H, float eps, int add_one)
{
    /* 16-byte packs of one dtype (weights in it or f32) where sizes and addresses allow */
    const int dt = a.dt;
    bool vec = rows > 0 && H % 8 == 0 && is_float_dt(dt) && y.dt == dt &&
               (w.dt == dt || w.dt == GDT_F32) && al16(a.p) && al16(y.p) && al16(w.p) &&
               (!b.p || (b.dt == dt && sum_out.dt == dt && al16(b.p) && al16(sum_out.p)));
    if (!vec)
        RLX_LAUNCH(k_rms_norm, (unsigned)rows, ROW_THREADS, 0, s)(a, b, w, sum_out, y, H, eps,
                                                                  add_one);
    else if (dt == GDT_BF16)
        rms_norm8_w<GDT_BF16>(s, a, b, w, sum_out, y, rows, H, eps, add_one);
    else if (dt == GDT_F16)
        rms_norm8_w<GDT_F16>(s, a, b, w, sum_out, y, rows, H, eps, add_one);
    else
        rms_norm8_add<GDT_F32, GDT_F32>(s, a, b, w, sum_out, y, rows, H, eps, add_one);
}

__global__ static void k_layer_norm(gpu_ten x, gpu_ten w, gpu_ten b, gpu_ten y, int64_t H,
                                    float eps)
{
    int64_t base = (int64_t)blockIdx.x * H;
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < H; i += ROW_THREADS)
        s += ldt(x, base + i);
    float mean = block_reduce(s, 0) / (float)H;
    float q = 0.0f;
    for (int64_t i = threadIdx.x; i < H; i += ROW_THREADS) {
        float c = ldt(x, base + i) - mean;
        q += c * c;
    }
    float r = rsqrtf(block_reduce(q, 0) / (float)H + eps);
    for (int64_t i = threadIdx.x; i < H; i += ROW_THREADS)
        stt(y, base + i, (ldt(x, base + i) - mean) * r * ldt(w, i) + ldt(b, i));
}

void gpu_layer_norm(gpuStream_t s, gpu_ten x, gpu_ten w, gpu_ten b, gpu_ten y, int64_t rows,
                    int64_t H, float eps)
{
    RLX_LAUNCH(k_layer_norm, (unsigned)rows, ROW_THREADS, 0, s)(x, w, b, y, H, eps);
}

__global__ static void k_softmax(gpu_ten x, gpu_ten y, int64_t n)
{
    int64_t base = (int64_t)blockIdx.x * n;
    float m = -INFINITY;
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS)
        m = fmaxf(m, ldt(x, base + i));
    m = block_reduce(m, 1);
    float s = 0.0f;
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS)
        s += expf(ldt(x, base + i) - m);
    float inv = 1.0f / block_reduce(s, 0);
    for (int64_t i = threadIdx.x; i < n; i += ROW_THREADS)
        stt(y, base + i, expf(ldt(x, base + i) - m) * inv);
}

void gpu_softmax(gpuStream_t s, gpu_ten x, gpu_ten y, int64_t rows, int64_t n)
{
    RLX_LAUNCH(k_softmax, (unsigned)rows, ROW_THREADS, 0, s)(x, y, n);
}

/* a before b in argmax order: the larger value, the lower index on ties; a NaN never
 * before a number (a row of NaN gives its first index) */
__device__ __forceinline__ static bool am_before(float a, int ia, float b, int ib)
{
    if (a != a)
        return b != b && ia < ib;
    return b != b || a > b || (a == b && ia < ib);
}

/* A row splits over blocks of AM_THREADS threads that each load AM_PER elements at once
 * (one memory round trip in flight, not n / 1024 one after another as a single block
 * waits), at most AM_MAX_BLOCKS a row. Each block leaves its best in part (values, then
 * indices, rows * nb of each); the block that counts itself last in cnt[row] merges them,
 * writes y and puts the counter back to zero for the next launch. The merge order does not
 * matter: am_before compares indices itself. */
#define AM_THREADS 256
#define AM_PER 8
#define AM_MAX_BLOCKS 64

int gpu_argmax_blocks(int64_t n)
{
    int64_t nb = (n + AM_THREADS * AM_PER - 1) / (AM_THREADS * AM_PER);
    return nb < 1 ? 1 : nb > AM_MAX_BLOCKS ? AM_MAX_BLOCKS : (int)nb;
}

/* the block's best (thread 0's on return) */
__device__ static void am_block(float &bv, int &bi)
{
    __shared__ float sv[AM_THREADS];
    __shared__ int si[AM_THREADS];
    sv[threadIdx.x] = bv;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int w = AM_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w && am_before(sv[threadIdx.x + w], si[threadIdx.x + w], sv[threadIdx.x], si[threadIdx.x])) {
            sv[threadIdx.x] = sv[threadIdx.x + w];
            si[threadIdx.x] = si[threadIdx.x + w];
        }
        __syncthreads();
    }
    bv = sv[0];
    bi = si[0];
}

__global__ __launch_bounds__(AM_THREADS) static void k_argmax(gpu_ten x, int32_t *y, int64_t n, float *part,
                                                               unsigned *cnt, gpu_tail tail)
{
    const int nb = (int)gridDim.x, row = (int)blockIdx.y;
    const int64_t len = (n + nb - 1) / nb, lo = (int64_t)blockIdx.x * len, hi = lo + len < n ? lo + len : n;
    const int64_t base = (int64_t)row * n;
    float bv = NAN;
    int bi = 0x7fffffff;
    for (int64_t i0 = lo + threadIdx.x; i0 < hi; i0 += (int64_t)AM_THREADS * AM_PER) {
        float v[AM_PER];
#pragma unroll
        for (int k = 0; k < AM_PER; k++) {
            const int64_t i = i0 + (int64_t)k * AM_THREADS;
            v[k] = i < hi ? ldt(x, base + i) : NAN;
        }
#pragma unroll
        for (int k = 0; k < AM_PER; k++) {
            const int i = (int)(i0 + (int64_t)k * AM_THREADS);
            if (i0 + (int64_t)k * AM_THREADS < hi && am_before(v[k], i, bv, bi)) {
                bv = v[k];
                bi = i;
            }
        }
    }
    am_block(bv, bi);
    if (nb > 1) {
        __shared__ bool last;
        volatile float *pv = part;
        volatile int *pi = (volatile int *)(void *)(part + (size_t)gridDim.y * (size_t)nb);
        if (threadIdx.x == 0) {
            pv[row * nb + blockIdx.x] = bv;
            pi[row * nb + blockIdx.x] = bi;
            __threadfence();
            last = atomicAdd(&cnt[row], 1u) == (unsigned)nb - 1;
        }
        __syncthreads();
        if (!last)
            return;
        __threadfence();
        bv = NAN;
        bi = 0x7fffffff;
        if ((int)threadIdx.x < nb) {
            bv = pv[row * nb + threadIdx.x];
            bi = pi[row * nb + threadIdx.x];
        }
        am_block(bv, bi);
        if (threadIdx.x == 0)
            cnt[row] = 0;
    }
    if (threadIdx.x != 0)
        return;
    y[row] = bi < n ? bi : 0;
    for (int k = 0; k < tail.n; k++) { /* one thread, in program order: each sees the one before */
        const gpu_tail_op &o = tail.op[k];
        if (!o.pos) {
            o.dst[0] = (uint32_t)((int32_t)o.src[0] + o.add);
            continue;
        }
        const int64_t p = o.pos[0];
        if (p < 0 || p >= o.S)
            record_error(tail.err, GPU_ERR_CACHE_ROWS, (int)p, o.node);
        else
            o.dst[p] = o.src[0];
    }
}

void gpu_argmax(gpuStream_t s, gpu_ten x, int32_t *y, int64_t rows, int64_t n, int nb, float *part, unsigned *cnt,
                const gpu_tail *tail)
{
    dim3 grid((unsigned)nb, (unsigned)rows);
    gpu_tail none;
    none.n = 0;
    none.err = NULL;
    RLX_LAUNCH(k_argmax, grid, AM_THREADS, 0, s)(x, y, n, part, cnt, tail ? *tail : none);
}

/* A block per token: the token's angles, their sine and cosine taken once in double
 * (positions reach 1e5 and an f32 angle would lose most of its fraction there) and kept
 * in shared memory RP_CHUNK pairs at a time, then every head's pairs (i, i + half) of them
 * rotated by one thread each, read before either is written (y may be x). VEC: 8
 * consecutive pairs a thread in 16-byte packs of dtype DT (x and y in DT, half % 8 == 0,
 * rows 16-byte aligned); else one pair a thread in any dtypes. A thread's first loads go
 * out before the angles are taken, so the sincos overlaps the memory round trip. */
#define RP_CHUNK 256
#define RP_THREADS 256
__device__ __forceinline__ static void rope_pair(double x1, double x2, double cs, double sn,
                                                 float &o1, float &o2)
{
    o1 = (float)(x1 * cs - x2 * sn);
    o2 = (float)(x2 * cs + x1 * sn);
}

template <int DT, bool VEC>
__global__ static void k_rope_tok(gpu_ten x, const int32_t *pos, gpu_ten inv_freq, gpu_ten y,
                                  int64_t nh, int64_t d, int64_t half, int64_t xs)
{
    __shared__ double cs_s[RP_CHUNK], sn_s[RP_CHUNK];
    const int64_t tb = (int64_t)blockIdx.x * nh * d, xo = (int64_t)blockIdx.x * xs - tb; /* x's row - y's */
    const double p = (double)pos[blockIdx.x];
    constexpr int P = VEC ? 8 : 1; /* pairs a thread */
    for (int64_t c0 = 0; c0 < half; c0 += RP_CHUNK) {
        const int cn = (int)(half - c0 < RP_CHUNK ? half - c0 : RP_CHUNK), cg = cn / P;
        const int64_t items = nh * cg;
        int64_t q = threadIdx.x, e = 0;
        int i0 = 0; /* the pairs' first index in the chunk */
        pk8<VEC ? DT : GDT_F32> lo, hi;
        float x1[P], x2[P];
        auto fetch = [&]() {
            int64_t h = q / cg;
            i0 = (int)(q - h * cg) * P;
            e = tb + h * d + c0 + i0;
            if (VEC) {
                lo = pk8_load<VEC ? DT : GDT_F32>(x.p, xo + e);
                hi = pk8_load<VEC ? DT : GDT_F32>(x.p, xo + e + half);
            } else {
                x1[0] = ldt(x, xo + e);
                x2[0] = ldt(x, xo + e + half);
            }
        };
        if (q < items)
            fetch();
        for (int i = threadIdx.x; i < cn; i += blockDim.x) {
            double th = p * (double)ldt(inv_freq, c0 + i), sn, cs;
            sincos(th, &sn, &cs);
            cs_s[i] = cs;
            sn_s[i] = sn;
        }
        __syncthreads();
        while (q < items) {
            float o1[P], o2[P];
            if (VEC) {
                pk8_unpack<VEC ? DT : GDT_F32>(lo, x1);
                pk8_unpack<VEC ? DT : GDT_F32>(hi, x2);
            }
#pragma unroll
            for (int j = 0; j < P; j++)
                rope_pair(x1[j], x2[j], cs_s[i0 + j], sn_s[i0 + j], o1[j], o2[j]);
            if (VEC) {
                pk8_store<VEC ? DT : GDT_F32>(y.p, e, pk8_pack<VEC ? DT : GDT_F32>(o1));
                pk8_store<VEC ? DT : GDT_F32>(y.p, e + half, pk8_pack<VEC ? DT : GDT_F32>(o2));
            } else {
                stt(y, e, o1[0]);
                stt(y, e + half, o2[0]);
            }
            q += blockDim.x;
            if (q < items)
                fetch();
        }
        __syncthreads(); /* the next chunk's angles go where these were */
    }
    const int64_t rest = d - 2 * half; /* past the rotated part: copied */
    for (int64_t q = threadIdx.x; q < nh * rest; q += blockDim.x) {
        int64_t h = q / rest, e = tb + h * d + 2 * half + (q - h * rest);
        stt(y, e, ldt(x, xo + e));
    }
}

void gpu_rope(gpuStream_t s, gpu_ten x, const int32_t *pos, gpu_ten inv_freq, gpu_ten y,
              int64_t T, int64_t nh, int64_t d, int64_t rot, int64_t xld)
{
    if (T <= 0)
        return;
    const int64_t half = rot / 2, hc = half < RP_CHUNK ? half : RP_CHUNK, xs = xld ? xld : nh * d;
    const int dt = x.dt;
    bool vec = half % 8 == 0 && d % 8 == 0 && xs % 8 == 0 && y.dt == dt && is_float_dt(dt) && al16(x.p) &&
               al16(y.p);
    int64_t items = nh * (vec ? hc / 8 : hc), rest = nh * (d - 2 * half);
    int64_t most = items > rest ? items : rest, nt = (most + 31) / 32 * 32;
    unsigned bt = (unsigned)(nt < 32 ? 32 : nt > RP_THREADS ? RP_THREADS : nt);
    void (*k)(gpu_ten, const int32_t *, gpu_ten, gpu_ten, int64_t, int64_t, int64_t, int64_t) =
        !vec                ? k_rope_tok<GDT_F32, false>
        : dt == GDT_BF16    ? k_rope_tok<GDT_BF16, true>
        : dt == GDT_F16     ? k_rope_tok<GDT_F16, true>
                            : k_rope_tok<GDT_F32, true>;
    RLX_LAUNCH(k, (unsigned)T, bt, 0, s)(x, pos, inv_freq, y, nh, d, half, xs);
}
