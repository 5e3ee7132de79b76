/* dtypes: sizes, safetensors names, half/bfloat16 conversions, shape helpers. */
#include "base/internal.h"
#include <stdio.h>
#include <string.h>

static const struct {
    const char *name;
    size_t size;
} dtype_table[RLX_DTYPE_COUNT] = {
    [RLX_F32] = {"F32", 4}, [RLX_F16] = {"F16", 2}, [RLX_BF16] = {"BF16", 2},
    [RLX_I32] = {"I32", 4}, [RLX_I64] = {"I64", 8}, [RLX_U8] = {"U8", 1},
};

RLX_API size_t rlx_dtype_size(int dtype)
{
    if (dtype < 0 || dtype >= RLX_DTYPE_COUNT) return 0;
    return dtype_table[dtype].size;
}

RLX_API const char *rlx_dtype_name(int dtype)
{
    if (dtype < 0 || dtype >= RLX_DTYPE_COUNT) return "?";
    return dtype_table[dtype].name;
}

RLX_API int rlx_dtype_from_name(const char *name)
{
    if (!name) return -1;
    for (int i = 0; i < RLX_DTYPE_COUNT; i++)
        if (strcmp(name, dtype_table[i].name) == 0) return i;
    return -1;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

RLX_API float rlx_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) return bits_f32(sign | 0x7f800000u | (man << 13)); /* inf / nan */
    if (exp == 0) {
        if (man == 0) return bits_f32(sign);
        /* subnormal: man * 2^-24, exact in f32 */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}

RLX_API uint16_t rlx_f32_to_f16(float f)
{
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t exp = (u >> 23) & 0xffu;
    uint32_t man = u & 0x7fffffu;
    if (exp == 0xff) /* inf stays inf, nan stays a (quiet) nan */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    int e = (int)exp - 127 + 15;
    if (e >= 0x1f) return (uint16_t)(sign | 0x7c00u); /* overflow */
    if (e <= 0) {
        /* subnormal or zero in f16: shift the full mantissa, round to nearest even */
        if (e < -10) return sign;
        uint32_t m = man | 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = 1u << (shift - 1);
        uint32_t r = m >> shift;
        uint32_t rest = m & ((1u << shift) - 1);
        if (rest > half || (rest == half && (r & 1))) r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rest = man & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (r & 1))) r++; /* may carry into inf: right */
    return (uint16_t)(sign | r);
}

RLX_API float rlx_bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }

RLX_API uint16_t rlx_f32_to_bf16(float f)
{
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet nan */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

RLX_API int64_t rlx_shape_numel(const rlx_shape *s)
{
    if (!s) return 0;
    int64_t n = 1;
    for (uint32_t i = 0; i < s->ndim && i < RLX_MAX_DIMS; i++) {
        if (s->dims[i] < 0) return -1;
        if (s->dims[i] != 0 && n > INT64_MAX / s->dims[i]) return -1;
        n *= s->dims[i];
    }
    return n;
}

RLX_API const char *rlx_shape_str(const rlx_shape *s, char *buf, size_t len)
{
    if (!buf || len == 0) return "";
    size_t o = 0;
    int n = snprintf(buf, len, "[");
    o = n > 0 ? (size_t)n : 0;
    for (uint32_t i = 0; s && i < s->ndim && i < RLX_MAX_DIMS && o < len; i++) {
        n = snprintf(buf + o, len - o, "%s%lld", i ? ", " : "", (long long)s->dims[i]);
        if (n < 0) break;
        o += (size_t)n;
    }
    if (o < len) snprintf(buf + o, len - o, "]");
    return buf;
}
