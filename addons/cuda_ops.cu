/* GPU image operators: uint8 NHWC -> float32/float16 NCHW or NHWC, normalized with per-channel
 * mean/std and an optional per-image horizontal flip. Compiled by nvcc only in CUDA builds;
 * addons/cuda.c holds the stage logic and calls the launchers below.
 *
 * out = (float)x * scale[c] + bias[c], with scale = 1 / (255 * std) and bias = -mean / std,
 * rounded exactly like the host (no fused multiply-add), so a host reference computing the
 * same two float operations matches bit for bit. */
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <stdint.h>

#define RILL_CUDA_MAX_CHANNELS 4
#define RILL_CUDA_FLIP_WORDS 128 /* images per launch: 32 * 128 */

struct norm_params {
  float scale[RILL_CUDA_MAX_CHANNELS];
  float bias[RILL_CUDA_MAX_CHANNELS];
  uint32_t flip[RILL_CUDA_FLIP_WORDS]; /* bit i: image i of this launch is mirrored */
  int h, w, c;
};

__device__ __forceinline__ void store(float* out, int64_t i, float v) { out[i] = v; }
__device__ __forceinline__ void store(__half* out, int64_t i, float v) { out[i] = __float2half_rn(v); }

__device__ __forceinline__ float norm(uint8_t x, float scale, float bias) {
  return __fadd_rn(__fmul_rn((float)x, scale), bias);
}

/* One (image, channel) plane per blockIdx.y; threads stride over the h*w pixels. */
template <typename T>
__global__ void normalize_chw(const uint8_t* __restrict__ src, T* __restrict__ dst, norm_params p) {
  const int plane = blockIdx.y;
  const int img = plane / p.c, ch = plane % p.c;
  const int hw = p.h * p.w;
  const bool flip = (p.flip[img >> 5] >> (img & 31)) & 1u;
  const uint8_t* s = src + (int64_t)img * hw * p.c;
  T* d = dst + (int64_t)plane * hw;
  const float scale = p.scale[ch], bias = p.bias[ch];
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < hw; i += gridDim.x * blockDim.x) {
    const int y = i / p.w, x = i - y * p.w;
    const int xs = flip ? p.w - 1 - x : x;
    store(d, i, norm(s[((int64_t)y * p.w + xs) * p.c + ch], scale, bias));
  }
}

/* One image per blockIdx.y; each thread writes all channels of one pixel. */
template <typename T>
__global__ void normalize_hwc(const uint8_t* __restrict__ src, T* __restrict__ dst, norm_params p) {
  const int img = blockIdx.y;
  const int hw = p.h * p.w;
  const bool flip = (p.flip[img >> 5] >> (img & 31)) & 1u;
  const uint8_t* s = src + (int64_t)img * hw * p.c;
  T* d = dst + (int64_t)img * hw * p.c;
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < hw; i += gridDim.x * blockDim.x) {
    const int y = i / p.w, x = i - y * p.w;
    const int xs = flip ? p.w - 1 - x : x;
    const uint8_t* px = s + ((int64_t)y * p.w + xs) * p.c;
    for (int ch = 0; ch < p.c; ch++) store(d, (int64_t)i * p.c + ch, norm(px[ch], p.scale[ch], p.bias[ch]));
  }
}

/* Launches the normalize kernels for n images of h*w*c uint8 on `stream` (the current device
 * must be the stream's). half: float16 output; chw: channels-first output. flip: n bytes on the
 * host, nonzero = mirror that image. Returns a cudaError_t value (0 = launched). */
extern "C" int rill__cuda_normalize_launch(const uint8_t* src, void* dst, int64_t n, int h, int w,
                                           int c, int half, int chw, const float* scale,
                                           const float* bias, const uint8_t* flip, void* stream) {
  if (n <= 0 || h <= 0 || w <= 0) return (int)cudaSuccess;
  if (c <= 0 || c > RILL_CUDA_MAX_CHANNELS) return (int)cudaErrorInvalidValue;
  cudaStream_t st = (cudaStream_t)stream;
  const int64_t img_elems = (int64_t)h * w * c;
  const int64_t per_launch = 32 * RILL_CUDA_FLIP_WORDS;
  const int threads = 256;
  int64_t blocks_x = ((int64_t)h * w + threads - 1) / threads;
  if (blocks_x > 1024) blocks_x = 1024;
  for (int64_t first = 0; first < n; first += per_launch) {
    const int64_t m = n - first < per_launch ? n - first : per_launch;
    norm_params p;
    for (int ch = 0; ch < RILL_CUDA_MAX_CHANNELS; ch++) {
      p.scale[ch] = ch < c ? scale[ch] : 0.0f;
      p.bias[ch] = ch < c ? bias[ch] : 0.0f;
    }
    for (int k = 0; k < RILL_CUDA_FLIP_WORDS; k++) p.flip[k] = 0;
    for (int64_t i = 0; i < m; i++)
      if (flip != NULL && flip[first + i]) p.flip[i >> 5] |= 1u << (i & 31);
    p.h = h;
    p.w = w;
    p.c = c;
    const uint8_t* s = src + first * img_elems;
    dim3 grid((unsigned)blocks_x, (unsigned)(chw ? m * c : m));
    if (half) {
      __half* d = (__half*)dst + first * img_elems;
      if (chw) normalize_chw<__half><<<grid, threads, 0, st>>>(s, d, p);
      else normalize_hwc<__half><<<grid, threads, 0, st>>>(s, d, p);
    } else {
      float* d = (float*)dst + first * img_elems;
      if (chw) normalize_chw<float><<<grid, threads, 0, st>>>(s, d, p);
      else normalize_hwc<float><<<grid, threads, 0, st>>>(s, d, p);
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return (int)e;
  }
  return (int)cudaSuccess;
}
