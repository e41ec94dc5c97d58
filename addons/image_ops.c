/* Image operators: random resized crop (fused with decoding for encoded bytes), resize
 * (bilinear, area), centre crop, horizontal flip, colour jitter, normalize (fused flip,
 * HWC -> CHW, float32/float16). Each is a map column over uint8 HWC cells.
 *
 * Resizing is separable: a horizontal pass over the source rows the output needs into a float
 * buffer, then a vertical pass into uint8, both driven by coefficient tables computed once
 * per image and axis. The vertical pass and the normalize pass have AVX2 versions selected
 * at run time; the portable versions do the same float operations in the same order, so both
 * give identical bytes. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "image_internal.h"
#include "internal.h"
#include "rill_addons.h"

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

/* ---------------------------------------------------------------- per-thread scratch */

typedef struct scratch {
  uint8_t* img;    /* decoded region */
  size_t img_cap;
  float* tmp;      /* horizontal pass output / jitter working copy */
  size_t tmp_cap;
  uint8_t* out;    /* a cell produced before being appended to a variable array */
  size_t out_cap;
  int32_t* idx;    /* coefficient start indices (x then y) */
  size_t idx_cap;
  float* w;        /* coefficient weights (x then y) */
  size_t w_cap;
  const float** rows;
  size_t rows_cap;
  int32_t* hidx;   /* horizontal pass, per output value: source index of tap 0 */
  size_t hidx_cap;
  float* hw;       /* horizontal pass, per output value: weights of taps 0 and 1 */
  size_t hw_cap;
  float* rowf;     /* one source row as floats */
  size_t rowf_cap;
  struct scratch* prev;
  struct scratch* next;
} scratch_t;

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static pthread_key_t g_key;
static int g_key_ok;
static pthread_mutex_t g_list_lock = PTHREAD_MUTEX_INITIALIZER;
static scratch_t* g_list; /* every live thread's scratch (kept reachable) */

static void scratch_destroy(void* p) {
  scratch_t* s = p;
  if (!s) return;
  pthread_mutex_lock(&g_list_lock);
  if (s->prev) s->prev->next = s->next;
  else g_list = s->next;
  if (s->next) s->next->prev = s->prev;
  pthread_mutex_unlock(&g_list_lock);
  rill__free(s->img);
  rill__free(s->tmp);
  rill__free(s->out);
  rill__free(s->idx);
  rill__free(s->w);
  rill__free((void*)s->rows);
  rill__free(s->hidx);
  rill__free(s->hw);
  rill__free(s->rowf);
  rill__free(s);
}

static void key_init(void) { g_key_ok = pthread_key_create(&g_key, scratch_destroy) == 0; }

static scratch_t* scratch_get(void) {
  pthread_once(&g_once, key_init);
  if (!g_key_ok) return NULL;
  scratch_t* s = pthread_getspecific(g_key);
  if (s) return s;
  s = rill__calloc(1, sizeof *s);
  if (!s) return NULL;
  if (pthread_setspecific(g_key, s) != 0) {
    rill__free(s);
    return NULL;
  }
  pthread_mutex_lock(&g_list_lock);
  s->next = g_list;
  if (g_list) g_list->prev = s;
  g_list = s;
  pthread_mutex_unlock(&g_list_lock);
  return s;
}

/* Makes *p hold at least `need` bytes (contents not kept). NULL when out of memory. */
static void* grow(void* pp, size_t* cap, size_t need) {
  void** p = pp;
  if (*p && *cap >= need) return *p;
  rill__free(*p);
  size_t n = need + need / 4 + 64;
  *p = rill__alloc(n);
  *cap = *p ? n : 0;
  return *p;
}

/* ---------------------------------------------------------------- resize kernels */

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
__attribute__((target("avx2"))) static void vpass_avx2(const float* const* rows, const float* w,
                                                       int taps, int64_t n, uint8_t* dst) {
  const __m256 zero = _mm256_setzero_ps(), top = _mm256_set1_ps(255.0f), half = _mm256_set1_ps(0.5f);
  int64_t x = 0;
  for (; x + 8 <= n; x += 8) {
    __m256 acc = _mm256_mul_ps(_mm256_set1_ps(w[0]), _mm256_loadu_ps(rows[0] + x));
    for (int k = 1; k < taps; k++)
      acc = _mm256_add_ps(acc, _mm256_mul_ps(_mm256_set1_ps(w[k]), _mm256_loadu_ps(rows[k] + x)));
    acc = _mm256_min_ps(_mm256_max_ps(acc, zero), top);
    __m256i v = _mm256_cvttps_epi32(_mm256_add_ps(acc, half));
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

/* Resamples the sub-region (fx, fy, fw, fh) (fractional, relative to the window) of the
 * window (x0, y0, w, h) of a C-channel image (row stride in bytes) into dst (out_h x out_w x C,
 * packed). Pixels outside the window are never read. */
static int resize_region(scratch_t* s, const uint8_t* src, int64_t stride, int C, int x0, int y0, int w, int h,
                         double fx, double fy, double fw, double fh, uint8_t* dst, int out_w, int out_h,
                         rill_interp_t interp) {
  if (w == out_w && h == out_h && fx == 0 && fy == 0 && fw == w && fh == h) {
    for (int y = 0; y < h; y++)
      memcpy(dst + (size_t)y * out_w * C, src + (size_t)(y0 + y) * stride + (size_t)x0 * C, (size_t)w * C);
    return RILL_OK;
  }
  int tx = coefs_taps(w, fw, out_w, interp), ty = coefs_taps(h, fh, out_h, interp);
  if (tx > 64 || ty > 64) { /* more than 62x downscaling by area: use bilinear taps */
    interp = RILL_INTERP_BILINEAR;
    tx = coefs_taps(w, fw, out_w, interp);
    ty = coefs_taps(h, fh, out_h, interp);
  }
  size_t nidx = (size_t)out_w + out_h, nw = (size_t)out_w * tx + (size_t)out_h * ty;
  if (!grow(&s->idx, &s->idx_cap, nidx * sizeof(int32_t)) || !grow(&s->w, &s->w_cap, nw * sizeof(float)) ||
      !grow(&s->rows, &s->rows_cap, (size_t)ty * sizeof(float*)))
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
    if (!grow(&s->rowf, &s->rowf_cap, (n_in + 8) * sizeof(float)) ||
        !grow(&s->tmp, &s->tmp_cap, (row_floats + 8) * sizeof(float)))
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
      vpass(&r, &one, 1, (int64_t)row_floats, dst + (size_t)o * row_floats);
    }
    return RILL_OK;
  }
  if (!grow(&s->tmp, &s->tmp_cap, (size_t)(ymax - ymin) * row_floats * sizeof(float))) return RILL_ENOMEM;
#if RILL_IMG_X86
  if (tx == 2 && (C == 3 || C == 4) && simd_on()) {
    if (!grow(&s->rowf, &s->rowf_cap, ((size_t)w * C + 8) * sizeof(float))) return RILL_ENOMEM;
    for (int y = ymin; y < ymax; y++)
      hpass2_px_avx2(src + (size_t)(y0 + y) * stride + (size_t)x0 * C, w * C, C, out_w, &cx, s->rowf,
                     s->tmp + (size_t)(y - ymin) * row_floats);
  } else if (tx == 2 && simd_on()) {
    /* per output value: the index of tap 0 and both weights, in blocks of 8 (wa x8, wb x8) */
    size_t nk = row_floats;
    if (!grow(&s->hidx, &s->hidx_cap, nk * sizeof(int32_t)) ||
        !grow(&s->hw, &s->hw_cap, (nk + 8) * 2 * sizeof(float)) ||
        !grow(&s->rowf, &s->rowf_cap, ((size_t)w * C + 8) * sizeof(float)))
      return RILL_ENOMEM;
    for (size_t k = 0; k < nk; k++) {
      size_t o = k / (size_t)C, blk = (k / 8) * 16, j = k % 8;
      s->hidx[k] = cx.start[o] * C + (int32_t)(k % (size_t)C);
      s->hw[blk + j] = cx.w[2 * o];
      s->hw[blk + 8 + j] = cx.w[2 * o + 1];
    }
    for (int y = ymin; y < ymax; y++)
      hpass2_avx2(src + (size_t)(y0 + y) * stride + (size_t)x0 * C, w * C, C, (int)nk, s->hidx, s->hw, s->rowf,
                  s->tmp + (size_t)(y - ymin) * row_floats);
  } else
#endif
  {
    for (int y = ymin; y < ymax; y++)
      hpass(src + (size_t)(y0 + y) * stride + (size_t)x0 * C, C, out_w, &cx, s->tmp + (size_t)(y - ymin) * row_floats);
  }
  for (int o = 0; o < out_h; o++) {
    for (int k = 0; k < ty; k++) s->rows[k] = s->tmp + (size_t)(cy.start[o] + k - ymin) * row_floats;
    vpass(s->rows, cy.w + (size_t)o * ty, ty, (int64_t)row_floats, dst + (size_t)o * row_floats);
  }
  return RILL_OK;
}

/* ---------------------------------------------------------------- normalize kernels */

typedef struct normk {
  float scale[4], bias[4];
} normk_t;

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

/* One image row: W pixels of C channels -> float32/float16, CHW (plane stride in elements)
 * or HWC; `flip` mirrors the row. */
static void norm_row_c(const uint8_t* src, int W, int C, int flip, const normk_t* k, int f16, int chw,
                       void* dst, int64_t plane) {
  for (int x = 0; x < W; x++) {
    const uint8_t* p = src + (size_t)(flip ? W - 1 - x : x) * C;
    for (int c = 0; c < C; c++) {
      float v = (float)p[c] * k->scale[c] + k->bias[c];
      int64_t o = chw ? c * plane + x : (int64_t)x * C + c;
      if (f16) ((uint16_t*)dst)[o] = f32_to_f16(v);
      else ((float*)dst)[o] = v;
    }
  }
}

#if RILL_IMG_X86
/* CHW, C == 3: eight pixels at a time (deinterleave with pshufb). */
__attribute__((target("avx2,f16c"))) static void norm_row_avx2(const uint8_t* src, int W, int flip,
                                                               const normk_t* k, int f16, void* dst,
                                                               int64_t plane) {
  const __m128i shuf = _mm_setr_epi8(0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11, -1, -1, -1, -1);
  const __m256i rev = _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0);
  const __m256 s0 = _mm256_set1_ps(k->scale[0]), s1 = _mm256_set1_ps(k->scale[1]), s2 = _mm256_set1_ps(k->scale[2]);
  const __m256 b0 = _mm256_set1_ps(k->bias[0]), b1 = _mm256_set1_ps(k->bias[1]), b2 = _mm256_set1_ps(k->bias[2]);
  int x = 0;
  for (; x + 10 <= W; x += 8) {
    __m128i a = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(src + (size_t)x * 3)), shuf);
    __m128i b = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(src + (size_t)x * 3 + 12)), shuf);
    __m128i rg = _mm_unpacklo_epi32(a, b), bx = _mm_unpackhi_epi32(a, b);
    __m256 r = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(rg));
    __m256 g = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(rg, 8)));
    __m256 bl = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bx));
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
    if (f16) {
      uint16_t* d = dst;
      _mm_storeu_si128((__m128i*)(d + o), _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
      _mm_storeu_si128((__m128i*)(d + plane + o), _mm256_cvtps_ph(g, _MM_FROUND_TO_NEAREST_INT));
      _mm_storeu_si128((__m128i*)(d + 2 * plane + o), _mm256_cvtps_ph(bl, _MM_FROUND_TO_NEAREST_INT));
    } else {
      float* d = dst;
      _mm256_storeu_ps(d + o, r);
      _mm256_storeu_ps(d + plane + o, g);
      _mm256_storeu_ps(d + 2 * plane + o, bl);
    }
  }
  for (; x < W; x++) {
    const uint8_t* p = src + (size_t)x * 3;
    int64_t o = flip ? W - 1 - x : x;
    for (int c = 0; c < 3; c++) {
      float v = (float)p[c] * k->scale[c] + k->bias[c];
      if (f16) ((uint16_t*)dst)[c * plane + o] = f32_to_f16(v);
      else ((float*)dst)[c * plane + o] = v;
    }
  }
}
#endif

/* A whole image (H x W x C uint8, packed) to dst. */
static void normalize_image(const uint8_t* src, int H, int W, int C, int flip, const normk_t* k, int f16,
                            int chw, void* dst) {
  size_t es = f16 ? 2 : 4;
  int64_t plane = (int64_t)H * W;
  for (int y = 0; y < H; y++) {
    const uint8_t* row = src + (size_t)y * W * C;
    uint8_t* d = (uint8_t*)dst + (chw ? (size_t)y * W * es : (size_t)y * W * C * es);
#if RILL_IMG_X86
    if (chw && C == 3 && simd_on()) {
      norm_row_avx2(row, W, flip, k, f16, d, plane);
      continue;
    }
#endif
    norm_row_c(row, W, C, flip, k, f16, chw, d, plane);
  }
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

/* ---------------------------------------------------------------- operator state */

typedef enum op_kind { OP_RRC, OP_RESIZE, OP_CCROP, OP_FLIP, OP_JITTER, OP_NORMALIZE } op_kind_t;

typedef struct op {
  op_kind_t kind;
  const char* what;      /* operator name for messages */
  int binary;            /* input cells are encoded bytes (fused decode) */
  int C;                 /* channels */
  int out_h, out_w;      /* fixed output size (0: follows the input) */
  int short_side;        /* resize: the shorter side becomes out_h */
  rill_interp_t interp;
  double scale[2], ratio[2];
  int64_t max_pixels;
  double p;              /* flip probability */
  double jit[3];         /* brightness, contrast, saturation */
  normk_t nk;
  int f16, chw;
  rill_type_t out_type;
  int fixed_out;
} op_t;

typedef struct img {
  const uint8_t* px;
  int w, h;
  int64_t stride;
  double fx, fy, fw, fh; /* the wanted region within the pixels (decoded at a DCT scale) */
  int full_w, full_h;    /* its size at full resolution */
} img_t;

static void path_of(const rill_array_t* paths, int64_t i, char* buf, size_t size) {
  buf[0] = 0;
  if (!paths || !rill_array_is_valid(paths, i)) return;
  int64_t n = 0;
  const char* s = rill_array_cell(paths, i, &n);
  if (s) snprintf(buf, size, "%.*s", (int)(n < 300 ? n : 300), s);
}

/* Reports a failure of cell i: adds the operator and the file name to the message. */
static int cell_fail(rill_error_t* err, int64_t i, const op_t* op, const rill_array_t* paths, int code,
                     const char* msg) {
  if (!err) return code;
  char path[320], text[RILL_ERROR_MESSAGE_SIZE];
  path_of(paths, i, path, sizeof path);
  snprintf(text, sizeof text, "%s", msg);
  err->row = i;
  if (path[0]) return rill_error_set(err, code, "%s: '%s': %s", op->what, path, text);
  return rill_error_set(err, code, "%s: %s", op->what, text);
}

/* The uint8 image in cell i of a uint8 HWC array. */
static int cell_image(const op_t* op, const rill_array_t* a, int64_t i, img_t* im, rill_error_t* err) {
  int64_t nb = 0, shape[RILL_MAX_NDIM];
  const uint8_t* p = rill_array_cell(a, i, &nb);
  int nd = rill_array_cell_shape(a, i, shape);
  if (nd != 3 || shape[2] != op->C || shape[0] < 0 || shape[1] < 0 || shape[0] > INT32_MAX ||
      shape[1] > INT32_MAX || nb != shape[0] * shape[1] * shape[2] || (!p && nb))
    return cell_fail(err, i, op, NULL, RILL_EFORMAT, "cell is not a uint8 HWC image of its column's channels");
  im->px = p;
  im->h = (int)shape[0];
  im->w = (int)shape[1];
  im->stride = shape[1] * shape[2];
  im->fx = im->fy = 0;
  im->fw = im->w;
  im->fh = im->h;
  im->full_w = im->w;
  im->full_h = im->h;
  return RILL_OK;
}

/* Decodes cell i of a BINARY array: the region (x, y, w, h) of the full image (w == 0: all),
 * DCT-scaled while it stays at least min_w x min_h. `pick` (when not NULL) chooses the region
 * from the full size once the header is read. */
typedef void (*pick_fn)(const op_t* op, rill_rng_t* rng, int W, int H, rill__img_request_t* req);

static int decode_cell(const op_t* op, const rill_array_t* a, const rill_array_t* paths, int64_t i, pick_fn pick,
                       rill_rng_t* rng, scratch_t* s, img_t* im, rill_error_t* err) {
  rill_error_t local;
  rill_error_t* e = err ? err : &local;
  int64_t nb = 0;
  const void* buf = rill_array_cell(a, i, &nb);
  rill__img_info_t info;
  int rc;
  if (nb <= 0 || !buf) return cell_fail(err, i, op, paths, RILL_EFORMAT, "empty file (0 bytes)");
  if ((rc = rill__img_probe(buf, (size_t)nb, &info, e)) < 0) return cell_fail(err, i, op, paths, rc, e->message);
  rill__img_request_t req = {.channels = op->C, .max_pixels = op->max_pixels};
  if ((int64_t)info.width * info.height > (op->max_pixels > 0 ? op->max_pixels : RILL__DEFAULT_MAX_PIXELS)) {
    char msg[160];
    snprintf(msg, sizeof msg, "%d x %d pixels exceed the limit of %lld", info.width, info.height,
             (long long)(op->max_pixels > 0 ? op->max_pixels : RILL__DEFAULT_MAX_PIXELS));
    return cell_fail(err, i, op, paths, RILL_ERANGE, msg);
  }
  if (pick) pick(op, rng, info.width, info.height, &req);
  rill__img_out_t plan;
  if ((rc = rill__img_plan(&info, &req, &plan, e)) < 0) return cell_fail(err, i, op, paths, rc, e->message);
  size_t need = (size_t)plan.w * plan.h * plan.channels;
  if (!grow(&s->img, &s->img_cap, need ? need : 1)) return cell_fail(err, i, op, paths, RILL_ENOMEM, "out of memory");
  rill__img_out_t got;
  if ((rc = rill__img_decode(buf, (size_t)nb, &req, s->img, s->img_cap, &got, e)) < 0)
    return cell_fail(err, i, op, paths, rc, e->message);
  if (got.channels != op->C || got.w <= 0 || got.h <= 0 || (size_t)got.w * got.h * got.channels > s->img_cap)
    return cell_fail(err, i, op, paths, RILL_EFORMAT, "decoder returned an unexpected size");
  /* the decoded pixels start at floor(rx * num / d); the wanted region is rx * num / d on */
  int64_t d = got.scale_denom > 0 ? got.scale_denom : 1, num = got.scale_num > 0 ? got.scale_num : 1;
  int rx = req.x, ry = req.y;
  int rw = req.w && req.h ? req.w : info.width, rh = req.w && req.h ? req.h : info.height;
  if (!(req.w && req.h)) rx = ry = 0;
  double sc = (double)num / (double)d;
  im->px = s->img;
  im->w = got.w;
  im->h = got.h;
  im->stride = (int64_t)got.w * got.channels;
  im->fx = (double)(rx * num % d) / (double)d;
  im->fy = (double)(ry * num % d) / (double)d;
  im->fw = rw * sc;
  im->fh = rh * sc;
  if (im->fx + im->fw > got.w) im->fw = got.w - im->fx;
  if (im->fy + im->fh > got.h) im->fh = got.h - im->fy;
  im->full_w = rw;
  im->full_h = rh;
  return RILL_OK;
}

static void pick_rrc(const op_t* op, rill_rng_t* rng, int W, int H, rill__img_request_t* req) {
  rill__rrc_params(rng, W, H, op->scale, op->ratio, &req->x, &req->y, &req->w, &req->h);
  req->min_w = op->out_w;
  req->min_h = op->out_h;
}

static void short_side_size(int w, int h, int target, int* ow, int* oh) {
  if (w <= h) {
    *ow = target;
    *oh = (int)((int64_t)target * h / w);
  } else {
    *oh = target;
    *ow = (int)((int64_t)target * w / h);
  }
  if (*ow < 1) *ow = 1;
  if (*oh < 1) *oh = 1;
}

static void pick_resize(const op_t* op, rill_rng_t* rng, int W, int H, rill__img_request_t* req) {
  (void)rng;
  int ow = op->out_w, oh = op->out_h;
  if (op->short_side) short_side_size(W, H, op->out_h, &ow, &oh);
  req->min_w = ow;
  req->min_h = oh;
}

/* ---------------------------------------------------------------- per-cell work */

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

static void flip_image(const uint8_t* src, int H, int W, int C, int64_t stride, uint8_t* dst) {
  for (int y = 0; y < H; y++) {
    const uint8_t* s = src + (size_t)y * stride;
    uint8_t* d = dst + (size_t)y * W * C;
#if RILL_IMG_X86
    if (C == 3 && simd_on()) {
      flip_row3_avx2(s, W, d);
      continue;
    }
#endif
    flip_row_c(s, W, C, d);
  }
}

static void center_crop_image(const img_t* im, int C, int oh, int ow, uint8_t* dst) {
  /* torchvision: offsets int(round((size - crop) / 2)); smaller images are padded first */
  int sx = (int)lround((im->w - ow) / 2.0), sy = (int)lround((im->h - oh) / 2.0);
  memset(dst, 0, (size_t)oh * ow * C);
  for (int y = 0; y < oh; y++) {
    int iy = sy + y;
    if (iy < 0 || iy >= im->h) continue;
    int x0 = sx < 0 ? -sx : 0, x1 = im->w - sx < ow ? im->w - sx : ow;
    if (x1 > x0)
      memcpy(dst + ((size_t)y * ow + x0) * C, im->px + (size_t)iy * im->stride + (size_t)(sx + x0) * C,
             (size_t)(x1 - x0) * C);
  }
}

static float clamp255(float v) { return v < 0.0f ? 0.0f : (v > 255.0f ? 255.0f : v); }

static void jitter_image(const op_t* op, rill_rng_t* rng, const img_t* im, int C, float* f, uint8_t* dst) {
  int order[3] = {0, 1, 2};
  for (int i = 2; i > 0; i--) { /* random order, like torchvision's randperm */
    int j = (int)(rill_rng_uniform(rng) * (i + 1));
    int t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  float factor[3];
  for (int a = 0; a < 3; a++) {
    double r = op->jit[a];
    factor[a] = r > 0 ? (float)rill_rng_range(rng, r < 1 ? 1 - r : 0, 1 + r) : 1.0f;
  }
  int64_t npx = (int64_t)im->w * im->h;
  int cc = (C == 2 || C == 4) ? C - 1 : C; /* colour channels (alpha kept) */
  for (int y = 0; y < im->h; y++)
    for (int64_t x = 0; x < (int64_t)im->w * C; x++) f[(size_t)y * im->w * C + x] = im->px[(size_t)y * im->stride + x];
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

/* Computes cell i into `dst` (fixed output), or into scratch (variable output; the result's
 * shape in `shape`, bytes returned through *res). */
static int op_cell(const op_t* op, const rill_array_t* a, const rill_array_t* paths, int64_t i,
                   rill_exec_t* exec, scratch_t* s, uint8_t* dst, const uint8_t** res, int64_t* shape,
                   rill_error_t* err) {
  rill_rng_t rng = rill_exec_rng(exec, i);
  int oh = op->out_h, ow = op->out_w;
  img_t im = {0};
  int rc, C = op->C;
  int rx = 0, ry = 0, rw = 0, rh = 0; /* source region */
  if (op->binary) {
    rc = decode_cell(op, a, paths, i, op->kind == OP_RRC ? pick_rrc : pick_resize, &rng, s, &im, err);
    if (rc < 0) return rc;
    rw = im.w;
    rh = im.h;
    if (op->kind == OP_RESIZE && op->short_side) short_side_size(im.full_w, im.full_h, op->out_h, &ow, &oh);
  } else {
    if ((rc = cell_image(op, a, i, &im, err)) < 0) return rc;
    if (op->kind == OP_RRC) {
      if (im.w <= 0 || im.h <= 0) return cell_fail(err, i, op, paths, RILL_EFORMAT, "empty image (0 pixels)");
      rill__rrc_params(&rng, im.w, im.h, op->scale, op->ratio, &rx, &ry, &rw, &rh);
      im.fw = rw;
      im.fh = rh;
    } else {
      rw = im.w;
      rh = im.h;
    }
    if (op->kind == OP_RESIZE && op->short_side) short_side_size(rw, rh, op->out_h, &ow, &oh);
  }
  size_t bytes;
  switch (op->kind) {
    case OP_RRC:
    case OP_RESIZE:
      if (rw <= 0 || rh <= 0) return cell_fail(err, i, op, paths, RILL_EFORMAT, "empty image (0 pixels)");
      if (!dst) {
        bytes = (size_t)ow * oh * C;
        if (!grow(&s->out, &s->out_cap, bytes ? bytes : 1)) return cell_fail(err, i, op, paths, RILL_ENOMEM, "out of memory");
        dst = s->out;
      }
      rc = resize_region(s, im.px, im.stride, C, rx, ry, rw, rh, im.fx, im.fy, im.fw, im.fh, dst, ow, oh,
                         op->interp);
      if (rc < 0) return cell_fail(err, i, op, paths, rc, "out of memory");
      break;
    case OP_CCROP:
      center_crop_image(&im, C, oh, ow, dst);
      break;
    case OP_FLIP:
    case OP_JITTER:
    case OP_NORMALIZE:
      oh = im.h;
      ow = im.w;
      if (!dst) {
        bytes = (size_t)ow * oh * C * (op->kind == OP_NORMALIZE ? (op->f16 ? 2 : 4) : 1);
        if (!grow(&s->out, &s->out_cap, bytes ? bytes : 1)) return cell_fail(err, i, op, paths, RILL_ENOMEM, "out of memory");
        dst = s->out;
      }
      if (op->kind == OP_FLIP) {
        if (op->p > 0 && rill_rng_uniform(&rng) < op->p) flip_image(im.px, oh, ow, C, im.stride, dst);
        else if (im.stride == (int64_t)ow * C)
          memcpy(dst, im.px, (size_t)ow * oh * C); /* contiguous: one copy */
        else
          for (int y = 0; y < oh; y++) memcpy(dst + (size_t)y * ow * C, im.px + (size_t)y * im.stride, (size_t)ow * C);
      } else if (op->kind == OP_JITTER) {
        if (!grow(&s->tmp, &s->tmp_cap, ((size_t)ow * oh * C + 1) * sizeof(float)))
          return cell_fail(err, i, op, paths, RILL_ENOMEM, "out of memory");
        jitter_image(op, &rng, &im, C, s->tmp, dst);
      } else {
        int flip = op->p > 0 && rill_rng_uniform(&rng) < op->p;
        normalize_image(im.px, oh, ow, C, flip, &op->nk, op->f16, op->chw, dst);
      }
      break;
  }
  if (res) {
    *res = dst;
    if (op->kind == OP_NORMALIZE && op->chw) {
      shape[0] = C;
      shape[1] = oh;
      shape[2] = ow;
    } else {
      shape[0] = oh;
      shape[1] = ow;
      shape[2] = C;
    }
  }
  return RILL_OK;
}

static int op_map(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* exec, void* ctx,
                  rill_error_t* err) {
  const op_t* op = ctx;
  const rill_array_t* a = in[0];
  const rill_array_t* paths = nin > 1 ? in[1] : NULL;
  int64_t n = a->length;
  int rc = rill_exec_alloc(exec, out, op->out_type, n);
  if (rc < 0) return rill_error_set(err, rc, "%s: cannot allocate the output of %lld cells", op->what, (long long)n);
  scratch_t* s = scratch_get();
  if (!s) return rill_error_set(err, RILL_ENOMEM, "%s: out of memory", op->what);
  int64_t cell = op->fixed_out ? rill_type_cell_bytes(&op->out_type) : 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t shape[3] = {0, 0, 0};
    if (!rill_array_is_valid(a, i)) {
      if (op->fixed_out) {
        memset((uint8_t*)out->data + i * cell, 0, (size_t)cell);
      } else {
        shape[op->kind == OP_NORMALIZE && op->chw ? 0 : 2] = op->C;
        if ((rc = rill_array_set_var(out, i, NULL, 0, shape)) < 0) goto oom;
      }
      if ((rc = rill_array_set_null(out, i)) < 0) goto oom;
      continue;
    }
    if (op->fixed_out) {
      rc = op_cell(op, a, paths, i, exec, s, (uint8_t*)out->data + i * cell, NULL, NULL, err);
      if (rc < 0) return rc;
    } else {
      const uint8_t* res = NULL;
      rc = op_cell(op, a, paths, i, exec, s, NULL, &res, shape, err);
      if (rc < 0) return rc;
      int64_t nb = shape[0] * shape[1] * shape[2] * (int64_t)rill_dtype_size(op->out_type.dtype);
      if ((rc = rill_array_set_var(out, i, res, nb, shape)) < 0) goto oom;
    }
  }
  return RILL_OK;
oom:
  return rill_error_set(err, rc, "%s: cannot grow the output array", op->what);
}

/* ---------------------------------------------------------------- constructors */

static int check_df(rill_df_t* df, const char* name, int column, const char* what, const rill_field_t** f,
                    rill_error_t* err) {
  if (!df || !name || !*name) return rill__fail(err, RILL_EINVAL, "%s: NULL dataframe or empty name", what);
  *f = rill_df_field(df, column);
  if (!*f) return rill__bad_column(err, what, df, column);
  return RILL_OK;
}

/* Checks that the input is uint8 HWC with known channels (or BINARY when allowed) and fills
 * op->binary and op->C. */
static int check_image_input(op_t* op, const rill_field_t* f, int allow_binary, int channels, rill_error_t* err) {
  char tb[96];
  if (f->type.dtype == RILL_BINARY && f->type.ndim == 0) {
    if (!allow_binary)
      return rill__fail(err, RILL_EINVAL, "%s: column '%s' holds encoded bytes; decode it first", op->what, f->name);
    if (channels != 0 && channels != 1 && channels != 3 && channels != 4)
      return rill__fail(err, RILL_EINVAL, "%s: channels must be 1, 3 or 4 (got %d)", op->what, channels);
    op->binary = 1;
    op->C = channels ? channels : 3;
    return RILL_OK;
  }
  if (f->type.dtype != RILL_UINT8 || f->type.ndim != 3 || f->type.shape[2] < 1 || f->type.shape[2] > 4)
    return rill__fail(err, RILL_EINVAL, "%s: column '%s' has type %s; expected uint8[H,W,C] with C in 1..4%s",
                      op->what, f->name, rill_type_format(&f->type, tb, sizeof tb),
                      allow_binary ? " or binary (encoded image)" : "");
  op->C = (int)f->type.shape[2];
  if (allow_binary && channels != 0 && channels != op->C)
    return rill__fail(err, RILL_EINVAL, "%s: channels = %d but column '%s' has %d", op->what, channels, f->name, op->C);
  return RILL_OK;
}

static int add_map(rill_df_t* df, const char* name, int column, op_t* op, const rill_field_t* f,
                   rill_on_error_t on_error, rill_error_t* err) {
  int inputs[2] = {column, -1}, nin = 1;
  if (op->binary) { /* the file name, for messages */
    int pc = rill_df_column(df, "path");
    const rill_field_t* pf = pc >= 0 ? rill_df_field(df, pc) : NULL;
    if (pf && pf->type.dtype == RILL_STRING && pf->type.ndim == 0 && pc != column) {
      inputs[1] = pc;
      nin = 2;
    }
  }
  op->fixed_out = rill_type_is_fixed(&op->out_type);
  rill_stage_opts_t so = {.where = RILL_STAGE_CPU, .on_error = on_error, .nullable = f->nullable};
  return rill_df_map(df, name, op->out_type, inputs, nin, op_map, op, rill__free, &so, err);
}

static int bad_size(const char* what, int h, int w, rill_error_t* err) {
  return rill__fail(err, RILL_EINVAL, "%s: output size %d x %d must be positive (at most 65535)", what, h, w);
}

static op_t* op_new(op_kind_t kind, const char* what, rill_error_t* err) {
  op_t* op = rill__calloc(1, sizeof *op);
  if (!op) {
    rill__fail(err, RILL_ENOMEM, "%s: out of memory", what);
    return NULL;
  }
  op->kind = kind;
  op->what = what;
  return op;
}

#define OP_FAIL(rc) \
  do {              \
    rill__free(op); \
    return (rc);    \
  } while (0)

int rill_image_random_resized_crop(rill_df_t* df, const char* name, int column, const rill_rrc_opts_t* opts,
                                   rill_error_t* err) {
  static const char* what = "random_resized_crop";
  const rill_field_t* f;
  int rc = check_df(df, name, column, what, &f, err);
  if (rc < 0) return rc;
  if (!opts) return rill__fail(err, RILL_EINVAL, "%s: NULL options (size is required)", what);
  if (opts->size[0] <= 0 || opts->size[1] <= 0 || opts->size[0] > 65535 || opts->size[1] > 65535)
    return bad_size(what, opts->size[0], opts->size[1], err);
  double s0 = opts->scale[0], s1 = opts->scale[1], r0 = opts->ratio[0], r1 = opts->ratio[1];
  if (s0 == 0 && s1 == 0) s0 = 0.08, s1 = 1.0;
  if (r0 == 0 && r1 == 0) r0 = 3.0 / 4.0, r1 = 4.0 / 3.0;
  if (!(s0 > 0 && s0 <= s1 && s1 <= 1.0))
    return rill__fail(err, RILL_EINVAL, "%s: scale range (%g, %g) must satisfy 0 < lo <= hi <= 1", what, s0, s1);
  if (!(r0 > 0 && r0 <= r1 && isfinite(r1)))
    return rill__fail(err, RILL_EINVAL, "%s: ratio range (%g, %g) must satisfy 0 < lo <= hi", what, r0, r1);
  if (opts->interpolation != RILL_INTERP_BILINEAR && opts->interpolation != RILL_INTERP_AREA)
    return rill__fail(err, RILL_EINVAL, "%s: unknown interpolation %d", what, (int)opts->interpolation);
  if (opts->max_pixels < 0) return rill__fail(err, RILL_EINVAL, "%s: negative max_pixels", what);
  op_t* op = op_new(OP_RRC, what, err);
  if (!op) return RILL_ENOMEM;
  if ((rc = check_image_input(op, f, 1, opts->channels, err)) < 0) OP_FAIL(rc);
  op->out_h = opts->size[0];
  op->out_w = opts->size[1];
  op->scale[0] = s0, op->scale[1] = s1, op->ratio[0] = r0, op->ratio[1] = r1;
  op->interp = opts->interpolation;
  op->max_pixels = opts->max_pixels;
  op->out_type = rill_type_tensor(RILL_UINT8, 3, (int64_t[]){op->out_h, op->out_w, op->C});
  return add_map(df, name, column, op, f, opts->on_error, err);
}

int rill_image_resize(rill_df_t* df, const char* name, int column, const rill_resize_opts_t* opts,
                      rill_error_t* err) {
  static const char* what = "resize";
  const rill_field_t* f;
  int rc = check_df(df, name, column, what, &f, err);
  if (rc < 0) return rc;
  if (!opts) return rill__fail(err, RILL_EINVAL, "%s: NULL options (size is required)", what);
  if (opts->size[0] <= 0 || opts->size[1] < 0 || opts->size[0] > 65535 || opts->size[1] > 65535)
    return bad_size(what, opts->size[0], opts->size[1], err);
  if (opts->interpolation != RILL_INTERP_BILINEAR && opts->interpolation != RILL_INTERP_AREA)
    return rill__fail(err, RILL_EINVAL, "%s: unknown interpolation %d", what, (int)opts->interpolation);
  if (opts->max_pixels < 0) return rill__fail(err, RILL_EINVAL, "%s: negative max_pixels", what);
  op_t* op = op_new(OP_RESIZE, what, err);
  if (!op) return RILL_ENOMEM;
  if ((rc = check_image_input(op, f, 1, opts->channels, err)) < 0) OP_FAIL(rc);
  op->out_h = opts->size[0];
  op->out_w = opts->size[1];
  op->short_side = opts->size[1] == 0;
  op->interp = opts->interpolation;
  op->max_pixels = opts->max_pixels;
  op->out_type = op->short_side ? rill_type_tensor(RILL_UINT8, 3, (int64_t[]){-1, -1, op->C})
                                : rill_type_tensor(RILL_UINT8, 3, (int64_t[]){op->out_h, op->out_w, op->C});
  return add_map(df, name, column, op, f, opts->on_error, err);
}

int rill_image_center_crop(rill_df_t* df, const char* name, int column, int height, int width, rill_error_t* err) {
  static const char* what = "center_crop";
  const rill_field_t* f;
  int rc = check_df(df, name, column, what, &f, err);
  if (rc < 0) return rc;
  if (height <= 0 || width <= 0 || height > 65535 || width > 65535) return bad_size(what, height, width, err);
  op_t* op = op_new(OP_CCROP, what, err);
  if (!op) return RILL_ENOMEM;
  if ((rc = check_image_input(op, f, 0, 0, err)) < 0) OP_FAIL(rc);
  op->out_h = height;
  op->out_w = width;
  op->out_type = rill_type_tensor(RILL_UINT8, 3, (int64_t[]){height, width, op->C});
  return add_map(df, name, column, op, f, RILL_ON_ERROR_RAISE, err);
}

int rill_image_flip(rill_df_t* df, const char* name, int column, double p, rill_error_t* err) {
  static const char* what = "flip";
  const rill_field_t* f;
  int rc = check_df(df, name, column, what, &f, err);
  if (rc < 0) return rc;
  if (!(p >= 0 && p <= 1)) return rill__fail(err, RILL_EINVAL, "%s: probability %g is outside [0, 1]", what, p);
  op_t* op = op_new(OP_FLIP, what, err);
  if (!op) return RILL_ENOMEM;
  if ((rc = check_image_input(op, f, 0, 0, err)) < 0) OP_FAIL(rc);
  op->p = p;
  op->out_type = f->type;
  return add_map(df, name, column, op, f, RILL_ON_ERROR_RAISE, err);
}

int rill_image_jitter(rill_df_t* df, const char* name, int column, const rill_jitter_opts_t* opts,
                      rill_error_t* err) {
  static const char* what = "jitter";
  const rill_field_t* f;
  int rc = check_df(df, name, column, what, &f, err);
  if (rc < 0) return rc;
  if (!opts) return rill__fail(err, RILL_EINVAL, "%s: NULL options", what);
  double j[3] = {opts->brightness, opts->contrast, opts->saturation};
  static const char* names[3] = {"brightness", "contrast", "saturation"};
  for (int k = 0; k < 3; k++)
    if (!(j[k] >= 0 && isfinite(j[k])))
      return rill__fail(err, RILL_EINVAL, "%s: %s %g must be a finite value >= 0", what, names[k], j[k]);
  op_t* op = op_new(OP_JITTER, what, err);
  if (!op) return RILL_ENOMEM;
  if ((rc = check_image_input(op, f, 0, 0, err)) < 0) OP_FAIL(rc);
  memcpy(op->jit, j, sizeof j);
  op->out_type = f->type;
  return add_map(df, name, column, op, f, RILL_ON_ERROR_RAISE, err);
}

int rill_image_normalize(rill_df_t* df, const char* name, int column, const rill_normalize_opts_t* opts,
                         rill_error_t* err) {
  static const char* what = "normalize";
  const rill_field_t* f;
  int rc = check_df(df, name, column, what, &f, err);
  if (rc < 0) return rc;
  rill_normalize_opts_t o = opts ? *opts : (rill_normalize_opts_t){0};
  if (!(o.flip >= 0 && o.flip <= 1))
    return rill__fail(err, RILL_EINVAL, "%s: flip probability %g is outside [0, 1]", what, o.flip);
  rill_dtype_t dt = o.dtype ? o.dtype : RILL_FLOAT32;
  if (dt != RILL_FLOAT32 && dt != RILL_FLOAT16)
    return rill__fail(err, RILL_EINVAL, "%s: dtype %s is not supported (float32 or float16)", what, rill_dtype_name(dt));
  if (o.layout != RILL_LAYOUT_HWC && o.layout != RILL_LAYOUT_CHW)
    return rill__fail(err, RILL_EINVAL, "%s: unknown layout %d", what, (int)o.layout);
  op_t* op = op_new(OP_NORMALIZE, what, err);
  if (!op) return RILL_ENOMEM;
  if ((rc = check_image_input(op, f, 0, 0, err)) < 0) OP_FAIL(rc);
  for (int c = 0; c < op->C; c++) {
    double sd = o.std[c] == 0 ? 1.0 : o.std[c];
    if (!isfinite(sd) || !isfinite(o.mean[c])) {
      rill__free(op);
      return rill__fail(err, RILL_EINVAL, "%s: mean/std of channel %d must be finite", what, c);
    }
    op->nk.scale[c] = (float)(1.0 / (255.0 * sd));
    op->nk.bias[c] = (float)(-o.mean[c] / sd);
  }
  op->p = o.flip;
  op->f16 = dt == RILL_FLOAT16;
  op->chw = o.layout == RILL_LAYOUT_CHW;
  int64_t h = f->type.shape[0], w = f->type.shape[1], C = op->C;
  op->out_type = op->chw ? rill_type_tensor(dt, 3, (int64_t[]){C, h, w}) : rill_type_tensor(dt, 3, (int64_t[]){h, w, C});
  return add_map(df, name, column, op, f, RILL_ON_ERROR_RAISE, err);
}
