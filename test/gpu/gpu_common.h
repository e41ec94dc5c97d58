/* Helpers of the GPU test and benchmark programs: plain C checks (no test framework needed on
 * the GPU machine), CUDA error checks, the CPU reference of the normalize operator and the
 * float16 conversions. */
#ifndef RILL_GPU_COMMON_H
#define RILL_GPU_COMMON_H

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "addon.h"
#include "rill.h"
#include "rill_addons.h"
#include "rill_interop.h"

/* library internals used directly (lib/stream_cuda.c, addons/cuda_ops.cu) */
int rill__cuda_normalize_launch(const uint8_t* src, void* dst, int64_t n, int h, int w, int c,
                                int half, int chw, const float* scale, const float* bias,
                                const uint8_t* flip, void* stream);
/* test/gpu/gpu_util.cu */
int rill_gpu_spin(void* stream, long long cycles);
int rill_gpu_consume(void* stream, const float* x, int64_t n, float* acc, long long cycles);
double rill_gpu_cycles_per_ms(void);

static int g_pass __attribute__((unused)), g_fail __attribute__((unused));

#define CHECK(cond, ...)                                                        \
  do {                                                                          \
    if (cond) {                                                                 \
      g_pass++;                                                                 \
    } else {                                                                    \
      g_fail++;                                                                 \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);           \
      fprintf(stderr, __VA_ARGS__);                                             \
      fputc('\n', stderr);                                                      \
    }                                                                           \
  } while (0)

/* A rill call that must succeed; on failure the message is printed and `onfail` runs. */
#define CHECK_OK(call, err, onfail)                                             \
  do {                                                                          \
    int rc_ = (call);                                                           \
    CHECK(rc_ == RILL_OK, "returned %d: %s", rc_, (err).message);               \
    if (rc_ != RILL_OK) { onfail; }                                             \
  } while (0)

#define CUDA_OK(call)                                                           \
  do {                                                                          \
    cudaError_t e_ = (call);                                                    \
    CHECK(e_ == cudaSuccess, "%s", cudaGetErrorString(e_));                     \
  } while (0)

static inline double gpu_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* 1 (and a "skipped" line with the reason) when no CUDA device can be used. */
static inline int gpu_skip(const char* prog) {
  if (rill_cuda_device_count() > 0) return 0;
  rill_error_t err = {0};
  rill_stream_t* s = NULL;
  int rc = rill_stream_new_cuda(0, &s, &err);
  rill_stream_free(s);
  printf("%s: skipped: %s\n", prog, rc == RILL_OK ? "no CUDA device" : err.message);
  return 1;
}

static inline uint64_t gpu_hash(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

/* The same float32 constants as rill_cuda_normalize. */
static inline void gpu_norm_consts(const rill_normalize_opts_t* o, int c, float* scale, float* bias) {
  for (int i = 0; i < c; i++) {
    double sd = o->std[i] == 0.0 ? 1.0 : o->std[i];
    scale[i] = (float)(1.0 / (255.0 * sd));
    bias[i] = (float)(-o->mean[i] / sd);
  }
}

/* CPU reference of one image: out = (float)x * scale + bias, [C,H,W] or [H,W,C]. */
static inline void gpu_ref_normalize(const uint8_t* img, int h, int w, int c, int flip, int chw,
                                     const float* scale, const float* bias, float* out) {
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int ch = 0; ch < c; ch++) {
        int xs = flip ? w - 1 - x : x;
        float v = (float)img[((size_t)y * w + xs) * c + ch] * scale[ch];
        v = v + bias[ch];
        size_t o = chw ? ((size_t)ch * h + y) * w + x : ((size_t)y * w + x) * c + ch;
        out[o] = v;
      }
}

/* float32 -> float16 bits, round to nearest even (as __float2half_rn). */
static inline uint16_t gpu_f2h(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t man = x & 0x7fffffu;
  if (exp == 0xffu) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
  int e = (int)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000u;
    int shift = 14 - e;
    uint32_t h = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (h & 1))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((uint32_t)e << 10) | (man >> 13);
  uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

static inline float gpu_h2f(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, x;
  if (exp == 0) {
    if (man == 0) x = sign;
    else {
      int e = -1;
      do { man <<= 1; e++; } while (!(man & 0x400u));
      x = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    x = sign | 0x7f800000u | (man << 13);
  } else {
    x = sign | ((exp + 127 - 15) << 23) | (man << 13);
  }
  float f;
  memcpy(&f, &x, 4);
  return f;
}

#endif
