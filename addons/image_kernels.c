/* Pixel kernels of the image operators: separable resize (bilinear, area) of a region,
 * normalize (scale and bias per channel, fused flip, HWC -> CHW, float32/float16), flip,
 * centre crop, colour jitter, and the random-resized-crop sampling.
 *
 * Resizing is separable: a horizontal pass over the source rows the output needs into a float
 * buffer, then a vertical pass into uint8, both driven by coefficient tables computed once
 * per image and axis. A resize followed by normalize hands each resized uint8 row to the
 * normalize kernel while it is in the cache (rill__img_resize_normalize) instead of writing
 * and reading back the whole uint8 image. The vertical pass and the normalize pass have AVX2
 * versions selected at run time; the portable versions do the same float operations in the same order, so both
 * give identical bytes. */
#include <math.h>
#include <string.h>

#include "addon.h"
#include "image_internal.h"

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define RILL_IMG_X86 1
#include <cpuid.h>
#include <immintrin.h>
#else
#define RILL_IMG_X86 0
#endif

/* ---------------------------------------------------------------- SIMD selection */

static _Atomic int g_simd = -1; /* -1: not probed yet; 0: portable; 1: AVX2+FMA+F16C */

static int simd_detect(void) {
#if RILL_IMG_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  __builtin_cpu_init();
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 29))) return 0; /* F16C */
  return __builtin_cpu_supports("avx2");
#else
  return 0;
#endif
}

static int simd_on(void) {
  int s = atomic_load_explicit(&g_simd, memory_order_relaxed);
  if (s < 0) {
    s = simd_detect();
    atomic_store_explicit(&g_simd, s, memory_order_relaxed);
  }
  return s;
}

/* Internal (tests and benchmarks): 0 forces the portable loops, 1 selects the vector loops
 * when the CPU has them. Returns 1 when vector loops are in use afterwards. */
int rill__image_set_simd(int on) {
  int s = on ? simd_detect() : 0;
  atomic_store_explicit(&g_simd, s, memory_order_relaxed);
  return s;
}

/* ---------------------------------------------------------------- channel conversion */

void rill__img_convert_row(const uint8_t* s, int sc, uint8_t* d, int dc, int w) {
  if (sc == dc) {
    memcpy(d, s, (size_t)w * (size_t)sc);
    return;
  }
  for (int i = 0; i < w; i++, s += sc, d += dc) {
    int r, g, b, a = 255;
    if (sc <= 2) {
      r = g = b = s[0];
      if (sc == 2) a = s[1];
    } else {
      r = s[0], g = s[1], b = s[2];
      if (sc == 4) a = s[3];
    }
    if (dc == 1) {
      d[0] = sc <= 2 ? (uint8_t)r : rill__img_luma(r, g, b);
    } else {
      d[0] = (uint8_t)r, d[1] = (uint8_t)g, d[2] = (uint8_t)b;
      if (dc == 4) d[3] = (uint8_t)a;
    }
  }
}

/* ---------------------------------------------------------------- scratch memory */

void* rill__img_grow(void* pp, size_t* cap, size_t need) {
  void** p = pp;
  if (*p && *cap >= need) return *p;
  rill__free(*p);
  size_t n = need + need / 4 + 64;
  *p = rill__alloc(n);
  *cap = *p ? n : 0;
  return *p;
}

void rill__img_scratch_free(rill__img_scratch_t* s) {
  rill__free(s->img);
  rill__free(s->tmp);
  rill__free(s->out);
  rill__free(s->idx);
  rill__free(s->w);
  rill__free((void*)s->rows);
  rill__free(s->hidx);
  rill__free(s->hw);
  rill__free(s->rowf);
  rill__free(s->row);
}

/* ---------------------------------------------------------------- resize */

typedef struct coefs {
  int32_t* start;  /* first source index of each output index (within the region) */
  float* w;        /* taps weights per output index */
  int taps;
} coefs_t;

/* Weights for resampling the source interval [off, off + len) of a row of `in` pixels to
 * `out` pixels: out entries of start indices and out*taps weights. Samples are clamped to the
 * interval, so resampling a region equals cropping it first and resampling the crop. */
static int coefs_taps(int in, double len, int out, rill_interp_t interp) {
  if (interp == RILL_INTERP_AREA && len > out) {
    int t = (int)ceil(len / out) + 1;
    return t < in ? t : in;
  }
  return in >= 2 ? 2 : 1;
}

static void coefs_fill(int in, double off, double len, int out, rill_interp_t interp, int taps, int32_t* start,
                       float* w) {
  double scale = len / out, lo_clamp = off > 0 ? off : 0, hi_clamp = off + len - 1;
  if (hi_clamp > in - 1) hi_clamp = in - 1;
  if (hi_clamp < lo_clamp) hi_clamp = lo_clamp;
  for (int o = 0; o < out; o++) {
    float* wo = w + (size_t)o * taps;
    for (int k = 0; k < taps; k++) wo[k] = 0.0f;
    if (interp == RILL_INTERP_AREA && len > out) {
      double lo = off + o * scale, hi = lo + scale, sum = 0;
      int s = (int)floor(lo);
      if (s + taps > in) s = in - taps;
      if (s < 0) s = 0;
      double a[64];
      for (int k = 0; k < taps && k < 64; k++) {
        double px = s + k, v = (hi < px + 1 ? hi : px + 1) - (lo > px ? lo : px);
        a[k] = v > 0 ? v : 0;
        sum += a[k];
      }
      for (int k = 0; k < taps && k < 64; k++) wo[k] = sum > 0 ? (float)(a[k] / sum) : (k == 0 ? 1.0f : 0.0f);
      start[o] = s;
    } else if (taps == 1) {
      start[o] = 0;
      wo[0] = 1.0f;
    } else {
      double src = off + (o + 0.5) * scale - 0.5;
      if (src < lo_clamp) src = lo_clamp;
      if (src > hi_clamp) src = hi_clamp;
      int i0 = (int)floor(src);
      double f = src - i0;
      if (i0 >= in - 1) {
        i0 = in - 2;
        f = 1.0;
      }
      start[o] = i0;
      wo[0] = (float)(1.0 - f);
      wo[1] = (float)f;
    }
  }
}

/* Horizontal pass: one source row (C channels) to out_w*C floats. */
static void hpass(const uint8_t* src, int C, int out_w, const coefs_t* cx, float* dst) {
  int taps = cx->taps;
  if (taps == 2 && C == 3) {
    for (int o = 0; o < out_w; o++) {
      const uint8_t* p = src + (size_t)cx->start[o] * 3;
      float w0 = cx->w[2 * o], w1 = cx->w[2 * o + 1];
      dst[3 * o + 0] = w0 * p[0] + w1 * p[3];
      dst[3 * o + 1] = w0 * p[1] + w1 * p[4];
      dst[3 * o + 2] = w0 * p[2] + w1 * p[5];
    }
    return;
  }
  for (int o = 0; o < out_w; o++) {
    const uint8_t* p = src + (size_t)cx->start[o] * C;
    const float* w = cx->w + (size_t)o * taps;
    for (int c = 0; c < C; c++) {
      float acc = w[0] * p[c];
      for (int k = 1; k < taps; k++) acc = acc + w[k] * p[k * C + c];
      dst[o * C + c] = acc;
    }
  }
}

#if RILL_IMG_X86
/* Two-tap horizontal pass with gathers: the row is widened to floats once, then each output
 * value is wa[k] * row[idx[k]] + wb[k] * row[idx[k] + C] (the same operations, in the same
 * order, as hpass). */
__attribute__((target("avx2"))) static void hpass2_avx2(const uint8_t* src, int n_in, int C, int n_out,
                                                        const int32_t* idx, const float* wab, float* rowf,
                                                        float* dst) {
  int x = 0;
  for (; x + 8 <= n_in; x += 8)
    _mm256_storeu_ps(rowf + x, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(src + x)))));
  for (; x < n_in; x++) rowf[x] = src[x];
  const __m256i cv = _mm256_set1_epi32(C);
  int k = 0;
  for (; k + 8 <= n_out; k += 8) {
    __m256i i0 = _mm256_loadu_si256((const __m256i*)(idx + k));
    __m256 a = _mm256_i32gather_ps(rowf, i0, 4);
    __m256 b = _mm256_i32gather_ps(rowf, _mm256_add_epi32(i0, cv), 4);
    __m256 wa = _mm256_loadu_ps(wab + 2 * (size_t)k), wb = _mm256_loadu_ps(wab + 2 * (size_t)k + 8);
    _mm256_storeu_ps(dst + k, _mm256_add_ps(_mm256_mul_ps(wa, a), _mm256_mul_ps(wb, b)));
  }
  for (; k < n_out; k++) {
    size_t blk = (size_t)(k / 8) * 16, j = (size_t)(k % 8);
    dst[k] = wab[blk + j] * rowf[idx[k]] + wab[blk + 8 + j] * rowf[idx[k] + C];
  }
}
#endif

#if RILL_IMG_X86
/* Two-tap horizontal pass for 3 or 4 channels without gathers, from a row of floats: each
 * output pixel is w0 * px[i] + w1 * px[i + 1] on four lanes (the same operations, in the same
 * order, as hpass and hpass_f). A 3-channel pixel's fourth lane is rewritten by the next
 * pixel; the last one is done lane by lane so that nothing past the row is written. rowf
 * holds n_in + 4 floats, the last four zero (read, never used, by the last 3-channel load). */
__attribute__((target("avx2"))) static void hpass2_pxf_avx2(const float* rowf, int C, int out_w, const coefs_t* cx,
                                                            float* dst) {
  int simd_end = C == 4 ? out_w : out_w - 1;
  const int32_t* start = cx->start;
  const float* w = cx->w;
  int o = 0;
  /* Two pixels a step, one in each half: the weights (w0, w1 of pixel o, then of o + 1) are
   * spread over their halves. Three channels are packed by a permute to six floats; the two
   * left over land on pixel o + 2, which a later step writes. */
  const __m256i sel0 = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2), sel1 = _mm256_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3);
  const __m256i pack3 = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 3, 7);
  int pair_end = C == 4 ? out_w - 1 : out_w - 2;
  for (; o < pair_end; o += 2) {
    const float* p = rowf + (size_t)start[o] * (size_t)C;
    const float* q = rowf + (size_t)start[o + 1] * (size_t)C;
    __m256 a = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p)), _mm_loadu_ps(q), 1);
    __m256 b = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p + C)), _mm_loadu_ps(q + C), 1);
    __m256 ww = _mm256_castps128_ps256(_mm_loadu_ps(w + 2 * (size_t)o));
    __m256 w0 = _mm256_permutevar8x32_ps(ww, sel0), w1 = _mm256_permutevar8x32_ps(ww, sel1);
    __m256 r = _mm256_add_ps(_mm256_mul_ps(w0, a), _mm256_mul_ps(w1, b));
    if (C == 3) r = _mm256_permutevar8x32_ps(r, pack3);
    _mm256_storeu_ps(dst + (size_t)o * (size_t)C, r);
  }
  for (; o < simd_end; o++) {
    const float* p = rowf + (size_t)start[o] * (size_t)C;
    __m128 a = _mm_loadu_ps(p), b = _mm_loadu_ps(p + C);
    __m128 r = _mm_add_ps(_mm_mul_ps(_mm_set1_ps(w[2 * o]), a), _mm_mul_ps(_mm_set1_ps(w[2 * o + 1]), b));
    _mm_storeu_ps(dst + (size_t)o * (size_t)C, r);
  }
  for (; o < out_w; o++) {
    const float* p = rowf + (size_t)start[o] * (size_t)C;
    for (int c = 0; c < C; c++) dst[(size_t)o * C + c] = w[2 * o] * p[c] + w[2 * o + 1] * p[C + c];
  }
}

/* The same from a uint8 row (n_in samples), widened to floats in rowf first. */
__attribute__((target("avx2"))) static void hpass2_px_avx2(const uint8_t* src, int n_in, int C, int out_w,
                                                           const coefs_t* cx, float* rowf, float* dst) {
  int x = 0;
  for (; x + 8 <= n_in; x += 8)
    _mm256_storeu_ps(rowf + x, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(src + x)))));
  for (; x < n_in; x++) rowf[x] = src[x];
  for (int k = 0; k < 4; k++) rowf[n_in + k] = 0.0f;
  hpass2_pxf_avx2(rowf, C, out_w, cx, dst);
}

/* out[x] = wa * a[x] + wb * b[x] for two uint8 rows (the operations of vblend_c). */
__attribute__((target("avx2"))) static void vblend_avx2(const uint8_t* a, const uint8_t* b, float wa, float wb,
                                                        int n, float* out) {
  const __m256 va = _mm256_set1_ps(wa), vb = _mm256_set1_ps(wb);
  int x = 0;
  for (; x + 8 <= n; x += 8) {
    __m256 fa = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(a + x))));
    __m256 fb = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i*)(b + x))));
    _mm256_storeu_ps(out + x, _mm256_add_ps(_mm256_mul_ps(va, fa), _mm256_mul_ps(vb, fb)));
  }
  for (; x < n; x++) out[x] = wa * a[x] + wb * b[x];
}
#endif

/* Vertical blend of two uint8 rows into floats. */
static void vblend_c(const uint8_t* a, const uint8_t* b, float wa, float wb, int n, float* out) {
  for (int x = 0; x < n; x++) out[x] = wa * a[x] + wb * b[x];
}

/* Two-tap horizontal pass from a row of floats (C channels) to out_w*C floats. */
static void hpass_f(const float* row, int C, int out_w, const coefs_t* cx, float* dst) {
  for (int o = 0; o < out_w; o++) {
    const float* p = row + (size_t)cx->start[o] * C;
    float w0 = cx->w[2 * o], w1 = cx->w[2 * o + 1];
    for (int c = 0; c < C; c++) dst[(size_t)o * C + c] = w0 * p[c] + w1 * p[C + c];
  }
}

static inline uint8_t to_u8(float v) {
  if (v < 0.0f) v = 0.0f;
  if (v > 255.0f) v = 255.0f;
  return (uint8_t)(int)(v + 0.5f);
}

/* Vertical pass: out[x] = sum_k w[k] * rows[k][x], rounded and clamped to uint8. */
static void vpass_c(const float* const* rows, const float* w, int taps, int64_t n, uint8_t* dst) {
  for (int64_t x = 0; x < n; x++) {
    float acc = w[0] * rows[0][x];
    for (int k = 1; k < taps; k++) acc = acc + w[k] * rows[k][x];
    dst[x] = to_u8(acc);
  }
}

#if RILL_IMG_X86
/* Eight values clamped to [0, 255] and rounded as to_u8, as int32. */
__attribute__((target("avx2"))) static inline __m256i round8_avx2(__m256 acc) {
  acc = _mm256_min_ps(_mm256_max_ps(acc, _mm256_setzero_ps()), _mm256_set1_ps(255.0f));
  return _mm256_cvttps_epi32(_mm256_add_ps(acc, _mm256_set1_ps(0.5f)));
}

/* Eight sums of one or two taps (r1 NULL: one). */
__attribute__((target("avx2"))) static inline __m256 vacc12_avx2(const float* r0, const float* r1, __m256 w0,
                                                                  __m256 w1, int64_t x) {
  __m256 acc = _mm256_mul_ps(w0, _mm256_loadu_ps(r0 + x));
  if (r1) acc = _mm256_add_ps(acc, _mm256_mul_ps(w1, _mm256_loadu_ps(r1 + x)));
  return acc;
}

/* The same sums clamped to [0, 255] and rounded (as to_u8) to int32. */
__attribute__((target("avx2"))) static inline __m256i vsum12_avx2(const float* r0, const float* r1, __m256 w0,
                                                                   __m256 w1, int64_t x) {
  return round8_avx2(vacc12_avx2(r0, r1, w0, w1, x));
}

/* The same sums rounded as to_u8, as floats (the value the normalize scales), without the
 * clamp: every resample weight is at least 0 and the weights of an output sum to 1 (to
 * within float rounding), so a pass over values in [0, 255] stays in [0, 255 + 1e-4] and
 * floor(v + 0.5) is the clamped (int)(v + 0.5f) of to_u8. Two instructions fewer than a
 * clamp and a round trip through int32: the fused resample 2-5% faster. */
__attribute__((target("avx2"))) static inline __m256 vsum12f_avx2(const float* r0, const float* r1, __m256 w0,
                                                                   __m256 w1, int64_t x) {
  return _mm256_floor_ps(_mm256_add_ps(vacc12_avx2(r0, r1, w0, w1, x), _mm256_set1_ps(0.5f)));
}

/* The vertical pass of one or two taps (every bilinear resize), sixteen values a step, with
 * the rows and weights in registers (the generic loop reloads them after every store: the
 * uint8 output may alias them). The same operations per value as vpass_c. */
__attribute__((target("avx2"))) static void vpass12_avx2(const float* const* rows, const float* w, int taps,
                                                         int64_t n, uint8_t* dst) {
  const float* r0 = rows[0];
  const float* r1 = taps == 2 ? rows[1] : NULL;
  const __m256 w0 = _mm256_set1_ps(w[0]), w1 = _mm256_set1_ps(taps == 2 ? w[1] : 0.0f);
  int64_t x = 0;
  for (; x + 16 <= n; x += 16) {
    __m256i a = vsum12_avx2(r0, r1, w0, w1, x), b = vsum12_avx2(r0, r1, w0, w1, x + 8);
    __m256i p16 = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xd8); /* a0..7, b0..7 as uint16 */
    __m128i p8 = _mm_packus_epi16(_mm256_castsi256_si128(p16), _mm256_extracti128_si256(p16, 1));
    _mm_storeu_si128((__m128i*)(dst + x), p8);
  }
  for (; x + 8 <= n; x += 8) {
    __m256i v = vsum12_avx2(r0, r1, w0, w1, x);
    __m128i p16 = _mm_packus_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    _mm_storel_epi64((__m128i*)(dst + x), _mm_packus_epi16(p16, p16));
  }
  if (x < n) {
    const float* tail[2] = {r0 + x, r1 ? r1 + x : NULL};
    vpass_c(tail, w, taps, n - x, dst + x);
  }
}

__attribute__((target("avx2"))) static void vpass_avx2(const float* const* rows, const float* w,
                                                       int taps, int64_t n, uint8_t* dst) {
  if (taps <= 2) {
    vpass12_avx2(rows, w, taps, n, dst);
    return;
  }
  int64_t x = 0;
  for (; x + 8 <= n; x += 8) {
    __m256 acc = _mm256_mul_ps(_mm256_set1_ps(w[0]), _mm256_loadu_ps(rows[0] + x));
    for (int k = 1; k < taps; k++)
      acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(w[k]), _mm256_loadu_ps(rows[k] + x)));
    __m256i v = round8_avx2(acc);
    __m256i p16 = _mm256_packus_epi32(v, v);
    __m256i p8 = _mm256_packus_epi16(p16, p16);
    __m128i lo = _mm256_castsi256_si128(p8), hi = _mm256_extracti128_si256(p8, 1);
    _mm_storel_epi64((__m128i*)(dst + x), _mm_unpacklo_epi32(lo, hi));
  }
  if (x < n) {
    const float* tail[64];
    int t = taps < 64 ? taps : 64;
    for (int k = 0; k < t; k++) tail[k] = rows[k] + x;
    vpass_c(tail, w, t, n - x, dst + x);
  }
}
#endif

static void vpass(const float* const* rows, const float* w, int taps, int64_t n, uint8_t* dst) {
#if RILL_IMG_X86
  if (simd_on() && taps <= 64) {
    vpass_avx2(rows, w, taps, n, dst);
    return;
  }
#endif
  vpass_c(rows, w, taps, n, dst);
}

/* ---------------------------------------------------------------- normalize kernels */

/* float -> IEEE half, round to nearest even (the same results as F16C's vcvtps2ph). */
static uint16_t f32_to_f16(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  uint32_t sign = (x >> 16) & 0x8000u, ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
  if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* >= 65520 rounds to infinity */
  if (ax < 0x38800000u) {                                    /* below 2^-14: subnormal half */
    if (ax < 0x33000000u) return (uint16_t)sign;             /* <= 2^-25 rounds to zero */
    uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u, shift = 126 - e;
    uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (r & 1))) r++;
    return (uint16_t)(sign | r);
  }
  uint32_t r = (((ax >> 23) - 112) << 10) | ((ax >> 13) & 0x3ffu), rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++;
  return (uint16_t)(sign | r);
}

/* v as element i of a float32 or float16 array. */
static inline void store1(void* dst, int64_t i, float v, int f16) {
  if (f16) ((uint16_t*)dst)[i] = f32_to_f16(v);
  else ((float*)dst)[i] = v;
}

/* One image row: W pixels of C channels -> float32/float16, CHW (plane stride in elements)
 * or HWC; `flip` mirrors the row. */
static void norm_row_c(const uint8_t* src, int W, int C, int flip, const rill__img_norm_t* k, int f16, int chw,
                       void* dst, int64_t plane) {
  for (int x = 0; x < W; x++) {
    const uint8_t* p = src + (size_t)(flip ? W - 1 - x : x) * C;
    for (int c = 0; c < C; c++) {
      float v = (float)p[c] * k->scale[c] + k->bias[c];
      int64_t o = chw ? c * plane + x : (int64_t)x * C + c;
      store1(dst, o, v, f16);
    }
  }
}

#if RILL_IMG_X86
/* Stores of the CHW normalize: plain stores, not streaming ones. A streaming store bypasses
 * the caches and saves the read for ownership of each line, but it holds its line's fill
 * buffer until the line reaches memory; one core's streaming stores then run at 7.1 GB/s here
 * against 8.6 GB/s for plain ones, on one core or two at once, and the normalize of a
 * 224x224 float32 image takes 124 us with them against 88 us without (test/bench/README.md). */
__attribute__((target("avx2,f16c"))) static inline void store8_ps(float* d, __m256 v) { _mm256_storeu_ps(d, v); }
__attribute__((target("avx2,f16c"))) static inline void store8_ph(uint16_t* d, __m256 v) {
  _mm_storeu_si128((__m128i*)d, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}

/* Eight pixels of three channels at element o of each of the planes of a CHW image. */
__attribute__((target("avx2,f16c"))) static inline void store3x8(void* dst, int64_t plane, int64_t o, __m256 r,
                                                                 __m256 g, __m256 b, int f16) {
  if (f16) {
    uint16_t* d = dst;
    store8_ph(d + o, r);
    store8_ph(d + plane + o, g);
    store8_ph(d + 2 * plane + o, b);
  } else {
    float* d = dst;
    store8_ps(d + o, r);
    store8_ps(d + plane + o, g);
    store8_ps(d + 2 * plane + o, b);
  }
}

/* Eight pixels (24 bytes from p, 28 read) as three vectors of R, G and B values. */
__attribute__((target("avx2"))) static inline void px8_avx2(const uint8_t* p, __m256* r, __m256* g, __m256* b) {
  const __m128i shuf = _mm_setr_epi8(0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11, -1, -1, -1, -1);
  __m128i lo = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)p), shuf);
  __m128i hi = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(p + 12)), shuf);
  __m128i rg = _mm_unpacklo_epi32(lo, hi), bx = _mm_unpackhi_epi32(lo, hi);
  *r = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(rg));
  *g = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(rg, 8)));
  *b = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bx));
}

/* CHW, C == 3: eight pixels at a time (deinterleave with pshufb). */
__attribute__((target("avx2,f16c"))) static void norm_row_avx2(const uint8_t* src, int W, int flip,
                                                               const rill__img_norm_t* k, int f16, void* dst,
                                                               int64_t plane) {
  const __m256i rev = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  const __m256 s0 = _mm256_set1_ps(k->scale[0]), s1 = _mm256_set1_ps(k->scale[1]), s2 = _mm256_set1_ps(k->scale[2]);
  const __m256 b0 = _mm256_set1_ps(k->bias[0]), b1 = _mm256_set1_ps(k->bias[1]), b2 = _mm256_set1_ps(k->bias[2]);
  int x = 0;
  for (; x + 10 <= W; x += 8) { /* the loads read 28 bytes from pixel x: within the row */
    const uint8_t* p = src + (size_t)x * 3;
    __m256 r, g, bl;
    px8_avx2(p, &r, &g, &bl);
    r = _mm256_add_ps(_mm256_mul_ps(r, s0), b0);
    g = _mm256_add_ps(_mm256_mul_ps(g, s1), b1);
    bl = _mm256_add_ps(_mm256_mul_ps(bl, s2), b2);
    int64_t o = x;
    if (flip) {
      r = _mm256_permutevar8x32_ps(r, rev);
      g = _mm256_permutevar8x32_ps(g, rev);
      bl = _mm256_permutevar8x32_ps(bl, rev);
      o = W - 8 - x;
    }
    store3x8(dst, plane, o, r, g, bl, f16);
  }
  for (; x < W; x++) {
    const uint8_t* p = src + (size_t)x * 3;
    int64_t o = flip ? W - 1 - x : x;
    for (int c = 0; c < 3; c++) {
      float v = (float)p[c] * k->scale[c] + k->bias[c];
      store1(dst, c * plane + o, v, f16);
    }
  }
}
#endif

/* A float image being written row by row: its size and layout, and for 3 channels the scale
 * and bias of 24 interleaved values (eight pixels) in their lanes' channel pattern. */
typedef struct norm_dst {
  int H, W, C, flip, f16, chw;
  const rill__img_norm_t* k;
  void* dst;
  float scale24[24], bias24[24];
} norm_dst_t;

#if RILL_IMG_X86
/* The vertical pass of one or two taps and the normalize of its row in one loop, for 3
 * channels into CHW planes: per eight pixels, the 24 interleaved values of each source row
 * are blended, rounded to uint8 values (kept as floats), scaled and biased with the channel
 * pattern of their lanes, then split into three planes by two blends and a permute. The same
 * operations per value as vpass12_avx2 followed by norm_row_avx2, so the same bytes, without
 * the uint8 row between them; the stores are spread over the arithmetic instead of coming in
 * one burst per row. Output row y of the CHW image `nd`; r1 NULL: one tap. Stores as
 * norm_row_avx2. */
__attribute__((target("avx2,f16c"))) static void vnorm_row_avx2(const norm_dst_t* nd, int y, const float* r0,
                                                                const float* r1, float wa, float wb) {
  const __m256 w0 = _mm256_set1_ps(wa), w1 = _mm256_set1_ps(wb);
  const int W = nd->W, flip = nd->flip, f16 = nd->f16;
  const rill__img_norm_t* k = nd->k;
  const int64_t plane = (int64_t)nd->H * W;
  void* dst = (uint8_t*)nd->dst + (size_t)y * (size_t)W * (f16 ? 2 : 4);
  __m256 s[3], b[3];
  for (int j = 0; j < 3; j++) {
    s[j] = _mm256_loadu_ps(nd->scale24 + 8 * j);
    b[j] = _mm256_loadu_ps(nd->bias24 + 8 * j);
  }
  /* lanes of each channel after the blends, in pixel order (reversed when flipped) */
  const __m256i pr = flip ? _mm256_setr_epi32(5, 2, 7, 4, 1, 6, 3, 0) : _mm256_setr_epi32(0, 3, 6, 1, 4, 7, 2, 5);
  const __m256i pg = flip ? _mm256_setr_epi32(6, 3, 0, 5, 2, 7, 4, 1) : _mm256_setr_epi32(1, 4, 7, 2, 5, 0, 3, 6);
  const __m256i pb = flip ? _mm256_setr_epi32(7, 4, 1, 6, 3, 0, 5, 2) : _mm256_setr_epi32(2, 5, 0, 3, 6, 1, 4, 7);
  int x = 0;
  for (; x + 8 <= W; x += 8) {
    __m256 v[3];
    for (int j = 0; j < 3; j++) {
      __m256 u = vsum12f_avx2(r0, r1, w0, w1, (int64_t)x * 3 + 8 * j);
      v[j] = _mm256_add_ps(_mm256_mul_ps(u, s[j]), b[j]);
    }
    /* v0 = R0 G0 B0 R1 G1 B1 R2 G2, v1 = B2 R3 G3 B3 R4 G4 B4 R5, v2 = G5 B5 R6 G6 B6 R7 G7 B7 */
    __m256 r = _mm256_permutevar8x32_ps(_mm256_blend_ps(_mm256_blend_ps(v[0], v[1], 0x92), v[2], 0x24), pr);
    __m256 g = _mm256_permutevar8x32_ps(_mm256_blend_ps(_mm256_blend_ps(v[0], v[1], 0x24), v[2], 0x49), pg);
    __m256 bl = _mm256_permutevar8x32_ps(_mm256_blend_ps(_mm256_blend_ps(v[0], v[1], 0x49), v[2], 0x92), pb);
    int64_t o = flip ? W - 8 - x : x;
    store3x8(dst, plane, o, r, g, bl, f16);
  }
  for (; x < W; x++) {
    int64_t o = flip ? W - 1 - x : x;
    for (int c = 0; c < 3; c++) {
      size_t at = (size_t)x * 3 + (size_t)c;
      float acc = wa * r0[at];
      if (r1) acc = acc + wb * r1[at];
      float v = (float)to_u8(acc) * k->scale[c] + k->bias[c];
      store1(dst, c * plane + o, v, f16);
    }
  }
}
#endif

#if RILL_IMG_X86
/* Planar two-tap resampling for the 3-channel CHW normalize. Each source row is split into
 * three float planes; each block of eight outputs of a plane reads its two taps from 8-float
 * loads at the block's first tap (start[8j]) and start[8j] + 1 through one permute index per
 * block (start[8j + l] - start[8j]): one load each when the indices stay below 8 (rows
 * widened), two and a blend when they stay below 16 (narrowed up to about twofold). The
 * arithmetic per value is that of hpass2_px_avx2, vpass12_avx2 and norm_row_avx2, so the
 * bytes are the same; no shuffles of interleaved pixels. (Where the
 * output has fewer rows than the source, blending two source rows per output row first,
 * the interleaved path with vnorm_row_avx2 measured faster: that path stays.) */

/* The window of taps every block of eight outputs fits in: 8, 16, or 0 (wider). */
static int hperm_span(const coefs_t* cx, int out_w) {
  int span = 8;
  for (int j = 0; j < out_w; j += 8) {
    int last = j + 7 < out_w ? j + 7 : out_w - 1, d = cx->start[last] - cx->start[j];
    if (d > 15) return 0;
    if (d > 7) span = 16;
  }
  return span;
}

/* For the block of eight outputs from output j (a multiple of 8): the permute indices
 * (idx[j + l]) and the weights of both taps (w[2j + l], w[2j + 8 + l]); lanes past out_w
 * read tap 0 with weight 0. */
static void hperm_fill(const coefs_t* cx, int out_w, int32_t* idx, float* w) {
  for (int j = 0; j < out_w; j += 8)
    for (int l = 0; l < 8; l++) {
      int o = j + l, in = o < out_w;
      idx[j + l] = in ? cx->start[o] - cx->start[j] : 0;
      w[2 * j + l] = in ? cx->w[2 * o] : 0.0f;
      w[2 * j + 8 + l] = in ? cx->w[2 * o + 1] : 0.0f;
    }
}

/* One uint8 RGB row of n pixels into three float planes of `pstride` floats, each plane's n
 * values followed by 24 zeros. */
__attribute__((target("avx2"))) static void split3_avx2(const uint8_t* src, int n, float* planes, size_t pstride) {
  float* pl[3] = {planes, planes + pstride, planes + 2 * pstride};
  int x = 0;
  for (; x + 10 <= n; x += 8) { /* the loads read 28 bytes from pixel x: within the row */
    __m256 v[3];
    px8_avx2(src + (size_t)x * 3, &v[0], &v[1], &v[2]);
    for (int c = 0; c < 3; c++) _mm256_storeu_ps(pl[c] + x, v[c]);
  }
  for (; x < n; x++)
    for (int c = 0; c < 3; c++) pl[c][x] = src[(size_t)x * 3 + (size_t)c];
  for (int c = 0; c < 3; c++)
    for (int k = 0; k < 24; k++) pl[c][n + k] = 0.0f;
}

/* The horizontal pass of one plane: out_w outputs (rounded up to 8) from `plane`, whose
 * blocks fit in `span` (8 or 16) taps. */
__attribute__((target("avx2"))) static void hperm_avx2(const float* plane, int out_w, const int32_t* start,
                                                       const int32_t* idx, const float* w, int span, float* dst) {
  const __m256i seven = _mm256_set1_epi32(7);
  for (int j = 0; j < out_w; j += 8) {
    const float* p = plane + start[j];
    __m256i ix = _mm256_loadu_si256((const __m256i*)(idx + j));
    __m256 a = _mm256_permutevar8x32_ps(_mm256_loadu_ps(p), ix);
    __m256 b = _mm256_permutevar8x32_ps(_mm256_loadu_ps(p + 1), ix);
    if (span > 8) { /* lanes whose index is 8..15 take the next eight taps */
      __m256 hi = _mm256_castsi256_ps(_mm256_cmpgt_epi32(ix, seven));
      a = _mm256_blendv_ps(a, _mm256_permutevar8x32_ps(_mm256_loadu_ps(p + 8), ix), hi);
      b = _mm256_blendv_ps(b, _mm256_permutevar8x32_ps(_mm256_loadu_ps(p + 9), ix), hi);
    }
    __m256 r = _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(w + 2 * j), a), _mm256_mul_ps(_mm256_loadu_ps(w + 2 * j + 8), b));
    _mm256_storeu_ps(dst + j, r);
  }
}

/* Output row y of the CHW image `nd` from two rows of planes (r0, r1: three planes of
 * `pstride` floats each) with weights wa, wb: rounded to uint8 values and normalized. */
__attribute__((target("avx2,f16c"))) static void vnorm_planes_avx2(const norm_dst_t* nd, int y, const float* r0,
                                                                   const float* r1, float wa, float wb,
                                                                   size_t pstride) {
  const __m256 w0 = _mm256_set1_ps(wa), w1 = _mm256_set1_ps(wb);
  const __m256i rev = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  int W = nd->W, flip = nd->flip;
  int64_t plane = (int64_t)nd->H * W;
  size_t es = nd->f16 ? 2 : 4;
  for (int c = 0; c < 3; c++) {
    const float* a = r0 + (size_t)c * pstride;
    const float* b = r1 + (size_t)c * pstride;
    const __m256 sc = _mm256_set1_ps(nd->k->scale[c]), bi = _mm256_set1_ps(nd->k->bias[c]);
    uint8_t* row = (uint8_t*)nd->dst + ((size_t)c * (size_t)plane + (size_t)y * (size_t)W) * es;
    int x = 0;
    for (; x + 8 <= W; x += 8) {
      __m256 u = vsum12f_avx2(a, b, w0, w1, x);
      __m256 v = _mm256_add_ps(_mm256_mul_ps(u, sc), bi);
      int64_t o = x;
      if (flip) {
        v = _mm256_permutevar8x32_ps(v, rev);
        o = W - 8 - x;
      }
      if (nd->f16) store8_ph((uint16_t*)row + o, v);
      else store8_ps((float*)row + o, v);
    }
    for (; x < W; x++) {
      float acc = wa * a[x];
      acc = acc + wb * b[x];
      float v = (float)to_u8(acc) * nd->k->scale[c] + nd->k->bias[c];
      int64_t o = flip ? W - 1 - x : x;
      store1(row, o, v, nd->f16);
    }
  }
}
#endif

static void norm_dst_init(norm_dst_t* nd, int H, int W, int C, int flip, const rill__img_norm_t* k, int f16, int chw,
                          void* dst) {
  *nd = (norm_dst_t){.H = H, .W = W, .C = C, .flip = flip, .f16 = f16, .chw = chw, .k = k, .dst = dst};
  if (C == 3)
    for (int l = 0; l < 24; l++) {
      nd->scale24[l] = k->scale[l % 3];
      nd->bias24[l] = k->bias[l % 3];
    }
}

/* Row y (W x C uint8, packed) of the image. */
static void norm_row(const norm_dst_t* nd, int y, const uint8_t* row) {
  size_t es = nd->f16 ? 2 : 4;
  int64_t plane = (int64_t)nd->H * nd->W;
  uint8_t* d = (uint8_t*)nd->dst + (nd->chw ? (size_t)y * nd->W * es : (size_t)y * nd->W * nd->C * es);
#if RILL_IMG_X86
  if (nd->chw && nd->C == 3 && simd_on()) {
    norm_row_avx2(row, nd->W, nd->flip, nd->k, nd->f16, d, plane);
    return;
  }
#endif
  norm_row_c(row, nd->W, nd->C, nd->flip, nd->k, nd->f16, nd->chw, d, plane);
}

/* A whole image (H x W x C uint8, packed) to dst. */
void rill__img_normalize(const uint8_t* src, int H, int W, int C, int flip, const rill__img_norm_t* k, int f16,
                         int chw, void* dst) {
  norm_dst_t nd;
  norm_dst_init(&nd, H, W, C, flip, k, f16, chw, dst);
  for (int y = 0; y < H; y++) norm_row(&nd, y, src + (size_t)y * W * C);
}

/* ---------------------------------------------------------------- resize, fused with normalize */

/* Where the rows of a resize go: packed uint8 rows (u8), or each row normalized into a float
 * image as rill__img_normalize does with the whole uint8 result (the same bytes), from one
 * uint8 row of scratch that stays in the cache. */
typedef struct rows_out {
  uint8_t* u8;                   /* packed uint8 output; NULL: normalize */
  uint8_t* row;                  /* normalize: one row of uint8 values */
  norm_dst_t nd;
} rows_out_t;

static uint8_t* row_at(rows_out_t* ro, int y) {
  return ro->u8 ? ro->u8 + (size_t)y * ro->nd.W * ro->nd.C : ro->row;
}

static void row_done(rows_out_t* ro, int y, const uint8_t* row) {
  if (!ro->u8) norm_row(&ro->nd, y, row);
}

/* Output row y: the vertical pass of `taps` float rows with weights w, to uint8 and on to
 * `ro` (3-channel CHW normalize of one or two taps: both in one loop). */
static void out_row(rows_out_t* ro, int y, const float* const* rows, const float* w, int taps) {
  const norm_dst_t* nd = &ro->nd;
#if RILL_IMG_X86
  if (!ro->u8 && nd->chw && nd->C == 3 && taps <= 2 && simd_on()) {
    vnorm_row_avx2(nd, y, rows[0], taps == 2 ? rows[1] : NULL, w[0], taps == 2 ? w[1] : 0.0f);
    return;
  }
#endif
  uint8_t* d = row_at(ro, y);
  vpass(rows, w, taps, (int64_t)nd->W * nd->C, d);
  row_done(ro, y, d);
}

#if RILL_IMG_X86
/* resize_rows for a two-tap resample with at least as many output rows as source rows,
 * whose blocks of eight outputs fit in `span` taps (hperm_span), into a 3-channel CHW
 * normalize: each source row passed once into planes, then each output row from two. */
static int resize_planes(rill__img_scratch_t* s, const uint8_t* src, int64_t stride, int x0, int y0, int w,
                         const coefs_t* cx, const coefs_t* cy, int ymin, int out_w, int out_h, int span,
                         const norm_dst_t* nd) {
  size_t P = ((size_t)out_w + 7) & ~(size_t)7, ps = ((size_t)w + 31) & ~(size_t)7; /* floats per plane row */
  if (!rill__img_grow(&s->tmp, &s->tmp_cap, 2 * 3 * P * sizeof(float)) ||
      !rill__img_grow(&s->rowf, &s->rowf_cap, 3 * ps * sizeof(float)) ||
      !rill__img_grow(&s->hidx, &s->hidx_cap, P * sizeof(int32_t)) ||
      !rill__img_grow(&s->hw, &s->hw_cap, 2 * P * sizeof(float)))
    return RILL_ENOMEM;
  hperm_fill(cx, out_w, s->hidx, s->hw);
  int y = ymin; /* source rows [ymin, y) have been passed; row r's planes are in slot r % 2 */
  for (int o = 0; o < out_h; o++) {
    /* the horizontal passes of the rows this output row needs, right before it */
    for (int need = cy->start[o] + 2; y < need; y++) {
      split3_avx2(src + (size_t)(y0 + y) * stride + (size_t)x0 * 3, w, s->rowf, ps);
      float* t = s->tmp + (size_t)(y & 1) * 3 * P;
      for (int c = 0; c < 3; c++)
        hperm_avx2(s->rowf + (size_t)c * ps, out_w, cx->start, s->hidx, s->hw, span, t + (size_t)c * P);
    }
    const float* r0 = s->tmp + (size_t)(cy->start[o] & 1) * 3 * P;
    const float* r1 = s->tmp + (size_t)((cy->start[o] + 1) & 1) * 3 * P;
    vnorm_planes_avx2(nd, o, r0, r1, cy->w[2 * o], cy->w[2 * o + 1], P);
  }
  return RILL_OK;
}
#endif

/* Resamples the sub-region (fx, fy, fw, fh) (fractional, relative to the window) of the
 * window (x0, y0, w, h) of a C-channel image (row stride in bytes) into out_h rows of
 * out_w x C uint8 values, handed to `ro` one by one. Pixels outside the window are never
 * read. */
static int resize_rows(rill__img_scratch_t* s, const uint8_t* src, int64_t stride, int C, int x0, int y0, int w, int h,
                       double fx, double fy, double fw, double fh, int out_w, int out_h, rill_interp_t interp,
                       rows_out_t* ro) {
  if (w == out_w && h == out_h && fx == 0 && fy == 0 && fw == w && fh == h) {
    for (int y = 0; y < h; y++) {
      const uint8_t* row = src + (size_t)(y0 + y) * stride + (size_t)x0 * C;
      if (ro->u8) memcpy(ro->u8 + (size_t)y * out_w * C, row, (size_t)w * C);
      else row_done(ro, y, row);
    }
    return RILL_OK;
  }
  int tx = coefs_taps(w, fw, out_w, interp), ty = coefs_taps(h, fh, out_h, interp);
  if (tx > 64 || ty > 64) { /* more than 62x downscaling by area: use bilinear taps */
    interp = RILL_INTERP_BILINEAR;
    tx = coefs_taps(w, fw, out_w, interp);
    ty = coefs_taps(h, fh, out_h, interp);
  }
  size_t nidx = (size_t)out_w + out_h, nw = (size_t)out_w * tx + (size_t)out_h * ty;
  if (!rill__img_grow(&s->idx, &s->idx_cap, nidx * sizeof(int32_t)) || !rill__img_grow(&s->w, &s->w_cap, nw * sizeof(float)) ||
      !rill__img_grow(&s->rows, &s->rows_cap, (size_t)ty * sizeof(float*)))
    return RILL_ENOMEM;
  coefs_t cx = {s->idx, s->w, tx}, cy = {s->idx + out_w, s->w + (size_t)out_w * tx, ty};
  coefs_fill(w, fx, fw, out_w, interp, tx, cx.start, cx.w);
  coefs_fill(h, fy, fh, out_h, interp, ty, cy.start, cy.w);
  int ymin = cy.start[0], ymax = cy.start[out_h - 1] + ty; /* rows [ymin, ymax) are needed */
  size_t row_floats = (size_t)out_w * C;
  if (tx == 2 && ty == 2 && ymax - ymin > out_h) {
    /* Fewer output rows than source rows: blend the two source rows of each output row
     * first, then resample that one row horizontally (one horizontal pass per output row
     * instead of one per source row). */
    size_t n_in = (size_t)w * C;
    if (!rill__img_grow(&s->rowf, &s->rowf_cap, (n_in + 8) * sizeof(float)) ||
        !rill__img_grow(&s->tmp, &s->tmp_cap, (row_floats + 8) * sizeof(float)))
      return RILL_ENOMEM;
    for (int k = 0; k < 4; k++) s->rowf[n_in + k] = 0.0f;
    const float one = 1.0f;
    for (int o = 0; o < out_h; o++) {
      const uint8_t* a = src + (size_t)(y0 + cy.start[o]) * stride + (size_t)x0 * C;
      const float* wy = cy.w + (size_t)o * 2;
#if RILL_IMG_X86
      if (simd_on()) {
        vblend_avx2(a, a + stride, wy[0], wy[1], (int)n_in, s->rowf);
        if (C == 3 || C == 4) hpass2_pxf_avx2(s->rowf, C, out_w, &cx, s->tmp);
        else hpass_f(s->rowf, C, out_w, &cx, s->tmp);
      } else
#endif
      {
        vblend_c(a, a + stride, wy[0], wy[1], (int)n_in, s->rowf);
        hpass_f(s->rowf, C, out_w, &cx, s->tmp);
      }
      const float* r = s->tmp;
      out_row(ro, o, &r, &one, 1);
    }
    return RILL_OK;
  }
#if RILL_IMG_X86
  if (!ro->u8 && ro->nd.chw && C == 3 && tx == 2 && ty == 2 && simd_on()) {
    int span = hperm_span(&cx, out_w);
    if (span) return resize_planes(s, src, stride, x0, y0, w, &cx, &cy, ymin, out_w, out_h, span, &ro->nd);
  }
#endif
  if (!rill__img_grow(&s->tmp, &s->tmp_cap, (size_t)ty * row_floats * sizeof(float))) return RILL_ENOMEM;
  enum { H_ANY, H_PX, H_GATHER } how = H_ANY;
#if RILL_IMG_X86
  if (tx == 2 && (C == 3 || C == 4) && simd_on()) {
    if (!rill__img_grow(&s->rowf, &s->rowf_cap, ((size_t)w * C + 8) * sizeof(float))) return RILL_ENOMEM;
    how = H_PX;
  } else if (tx == 2 && simd_on()) {
    /* per output value: the index of tap 0 and both weights, in blocks of 8 (wa x8, wb x8) */
    size_t nk = row_floats;
    if (!rill__img_grow(&s->hidx, &s->hidx_cap, nk * sizeof(int32_t)) ||
        !rill__img_grow(&s->hw, &s->hw_cap, (nk + 8) * 2 * sizeof(float)) ||
        !rill__img_grow(&s->rowf, &s->rowf_cap, ((size_t)w * C + 8) * sizeof(float)))
      return RILL_ENOMEM;
    for (size_t k = 0; k < nk; k++) {
      size_t o = k / (size_t)C, blk = (k / 8) * 16, j = k % 8;
      s->hidx[k] = cx.start[o] * C + (int32_t)(k % (size_t)C);
      s->hw[blk + j] = cx.w[2 * o];
      s->hw[blk + 8 + j] = cx.w[2 * o + 1];
    }
    how = H_GATHER;
  }
#endif
  /* Each source row's horizontal pass right before the first output row that reads it, into
   * a ring of ty rows (row r in slot (r - ymin) % ty): an output row reads the ty rows from
   * its first tap on, the last ty passed, still in the cache. */
  int y = ymin; /* source rows [ymin, y) have been passed */
  for (int o = 0; o < out_h; o++) {
    for (int need = cy.start[o] + ty; y < need; y++) {
      const uint8_t* in = src + (size_t)(y0 + y) * stride + (size_t)x0 * C;
      float* t = s->tmp + (size_t)((y - ymin) % ty) * row_floats;
      if (how == H_ANY) hpass(in, C, out_w, &cx, t);
#if RILL_IMG_X86
      else if (how == H_PX) hpass2_px_avx2(in, w * C, C, out_w, &cx, s->rowf, t);
      else hpass2_avx2(in, w * C, C, (int)row_floats, s->hidx, s->hw, s->rowf, t);
#endif
    }
    for (int k = 0; k < ty; k++) s->rows[k] = s->tmp + (size_t)((cy.start[o] + k - ymin) % ty) * row_floats;
    out_row(ro, o, s->rows, cy.w + (size_t)o * ty, ty);
  }
  return RILL_OK;
}

int rill__img_resize(rill__img_scratch_t* s, const uint8_t* src, int64_t stride, int C, int x0, int y0, int w, int h,
                     double fx, double fy, double fw, double fh, uint8_t* dst, int out_w, int out_h,
                     rill_interp_t interp) {
  rows_out_t ro = {.u8 = dst, .nd = {.H = out_h, .W = out_w, .C = C}};
  return resize_rows(s, src, stride, C, x0, y0, w, h, fx, fy, fw, fh, out_w, out_h, interp, &ro);
}

int rill__img_resize_normalize(rill__img_scratch_t* s, const uint8_t* src, int64_t stride, int C, int x0, int y0,
                               int w, int h, double fx, double fy, double fw, double fh, int out_w, int out_h,
                               rill_interp_t interp, int flip, const rill__img_norm_t* k, int f16, int chw,
                               void* dst) {
  if (!rill__img_grow(&s->row, &s->row_cap, (size_t)out_w * C + 32)) return RILL_ENOMEM;
  rows_out_t ro = {.row = s->row};
  norm_dst_init(&ro.nd, out_h, out_w, C, flip, k, f16, chw, dst);
  return resize_rows(s, src, stride, C, x0, y0, w, h, fx, fy, fw, fh, out_w, out_h, interp, &ro);
}

/* ---------------------------------------------------------------- flip, centre crop, jitter */

static void flip_row_c(const uint8_t* s, int W, int C, uint8_t* d) {
  if (C == 3) {
    for (int x = 0; x < W; x++) {
      const uint8_t* p = s + (size_t)(W - 1 - x) * 3;
      d[3 * x] = p[0];
      d[3 * x + 1] = p[1];
      d[3 * x + 2] = p[2];
    }
  } else {
    for (int x = 0; x < W; x++) memcpy(d + (size_t)x * C, s + (size_t)(W - 1 - x) * C, (size_t)C);
  }
}

#if RILL_IMG_X86
/* C == 3: five pixels per 16-byte shuffle. The load starts one byte before the five source
 * pixels and the 16th stored byte is rewritten by the next step, so nothing outside the
 * row is touched. */
__attribute__((target("avx2"))) static void flip_row3_avx2(const uint8_t* s, int W, uint8_t* d) {
  const __m128i rev = _mm_setr_epi8(13, 14, 15, 10, 11, 12, 7, 8, 9, 4, 5, 6, 1, 2, 3, -1);
  int x = 0;
  for (; x + 6 <= W; x += 5) {
    __m128i v = _mm_loadu_si128((const __m128i*)(s + (size_t)(W - 5 - x) * 3 - 1));
    _mm_storeu_si128((__m128i*)(d + (size_t)x * 3), _mm_shuffle_epi8(v, rev));
  }
  for (; x < W; x++) {
    const uint8_t* p = s + (size_t)(W - 1 - x) * 3;
    d[3 * x] = p[0];
    d[3 * x + 1] = p[1];
    d[3 * x + 2] = p[2];
  }
}
#endif

/* Rows read ahead of the flip. A row is read from its end to its start, which the hardware
 * prefetchers do not follow: a source in DRAM (a dataset larger than the cache) otherwise
 * flips at a third of memcpy's speed. */
#define FLIP_PREFETCH_ROWS 4

void rill__img_flip(const uint8_t* src, int H, int W, int C, int64_t stride, uint8_t* dst) {
  const size_t row_bytes = (size_t)W * C;
  for (int y = 0; y < H; y++) {
    const uint8_t* s = src + (size_t)y * stride;
    uint8_t* d = dst + (size_t)y * W * C;
    if (y + FLIP_PREFETCH_ROWS < H) {
      const uint8_t* ahead = s + (size_t)FLIP_PREFETCH_ROWS * stride;
      for (size_t b = 0; b < row_bytes; b += 64) __builtin_prefetch(ahead + b, 0, 3);
    }
#if RILL_IMG_X86
    if (C == 3 && simd_on()) {
      flip_row3_avx2(s, W, d);
      continue;
    }
#endif
    flip_row_c(s, W, C, d);
  }
}

/* torchvision's offset of a centre crop: int(round((size - crop) / 2)), Python's round taking
 * halves to even (rint in the default rounding mode); a smaller image is padded first by
 * (crop - size) // 2 before it, so it starts that far into the crop. */
static int center_offset(int size, int crop) {
  return size >= crop ? (int)rint((size - crop) / 2.0) : -((crop - size) / 2);
}

void rill__img_center_crop(const uint8_t* px, int w, int h, int64_t stride, int C, int oh, int ow, uint8_t* dst) {
  int sx = center_offset(w, ow), sy = center_offset(h, oh);
  memset(dst, 0, (size_t)oh * ow * C);
  for (int y = 0; y < oh; y++) {
    int iy = sy + y;
    if (iy < 0 || iy >= h) continue;
    int x0 = sx < 0 ? -sx : 0, x1 = w - sx < ow ? w - sx : ow;
    if (x1 > x0)
      memcpy(dst + ((size_t)y * ow + x0) * C, px + (size_t)iy * stride + (size_t)(sx + x0) * C,
             (size_t)(x1 - x0) * C);
  }
}

static float clamp255(float v) { return v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v); }

void rill__img_jitter(const double jit[3], rill_rng_t* rng, const uint8_t* px, int w, int h, int64_t stride, int C,
                      float* f, uint8_t* dst) {
  int order[3] = {0, 1, 2};
  for (int i = 2; i > 0; i--) { /* random order, like torchvision's randperm */
    int j = (int)(rill_rng_uniform(rng) * (i + 1));
    int t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  float factor[3];
  for (int a = 0; a < 3; a++) {
    double r = jit[a];
    factor[a] = r > 0 ? (float)rill_rng_range(rng, r < 1 ? 1 - r : 0, 1 + r) : 1.0f;
  }
  int64_t npx = (int64_t)w * h;
  int cc = (C == 2 || C == 4) ? C - 1 : C; /* colour channels (alpha kept) */
  for (int y = 0; y < h; y++)
    for (int64_t x = 0; x < (int64_t)w * C; x++) f[(size_t)y * w * C + x] = px[(size_t)y * stride + x];
  for (int a = 0; a < 3; a++) {
    int kind = order[a];
    float fa = factor[kind];
    if (fa == 1.0f) continue;
    if (kind == 0) { /* brightness */
      for (int64_t p = 0; p < npx; p++)
        for (int c = 0; c < cc; c++) f[p * C + c] = clamp255(f[p * C + c] * fa);
    } else if (kind == 1) { /* contrast: blend with the mean grey */
      double sum = 0;
      for (int64_t p = 0; p < npx; p++) {
        const float* q = f + p * C;
        sum += cc >= 3 ? 0.299f * q[0] + 0.587f * q[1] + 0.114f * q[2] : q[0];
      }
      float mean = npx ? (float)(sum / npx) : 0.0f;
      for (int64_t p = 0; p < npx; p++)
        for (int c = 0; c < cc; c++) f[p * C + c] = clamp255(fa * f[p * C + c] + (1.0f - fa) * mean);
    } else if (cc >= 3) { /* saturation: blend with the pixel's grey */
      for (int64_t p = 0; p < npx; p++) {
        float* q = f + p * C;
        float g = 0.299f * q[0] + 0.587f * q[1] + 0.114f * q[2];
        for (int c = 0; c < 3; c++) q[c] = clamp255(fa * q[c] + (1.0f - fa) * g);
      }
    }
  }
  for (int64_t p = 0; p < npx * C; p++) dst[p] = (uint8_t)(int)(f[p] + 0.5f);
}

/* ---------------------------------------------------------------- torchvision-style sampling */

/* RandomResizedCrop.get_params: the crop (x, y, w, h) of a W x H image. */
void rill__rrc_params(rill_rng_t* rng, int W, int H, const double scale[2], const double ratio[2], int* ox,
                      int* oy, int* ow, int* oh) {
  double area = (double)W * H, lr0 = log(ratio[0]), lr1 = log(ratio[1]);
  for (int attempt = 0; attempt < 10; attempt++) {
    double target = area * rill_rng_range(rng, scale[0], scale[1]);
    double ar = exp(rill_rng_range(rng, lr0, lr1));
    int w = (int)lround(sqrt(target * ar)), h = (int)lround(sqrt(target / ar));
    if (w > 0 && h > 0 && w <= W && h <= H) {
      int y = (int)(rill_rng_uniform(rng) * (H - h + 1));
      int x = (int)(rill_rng_uniform(rng) * (W - w + 1));
      *ox = x;
      *oy = y;
      *ow = w;
      *oh = h;
      return;
    }
  }
  double in_ratio = (double)W / H;
  int w = W, h = H;
  double rmin = ratio[0] < ratio[1] ? ratio[0] : ratio[1], rmax = ratio[0] < ratio[1] ? ratio[1] : ratio[0];
  if (in_ratio < rmin) h = (int)lround(w / rmin);
  else if (in_ratio > rmax) w = (int)lround(h * rmax);
  if (w < 1) w = 1;
  if (h < 1) h = 1;
  if (w > W) w = W;
  if (h > H) h = H;
  *ox = (W - w) / 2;
  *oy = (H - h) / 2;
  *ow = w;
  *oh = h;
}
