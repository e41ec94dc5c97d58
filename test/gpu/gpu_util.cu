/* Kernels used by the GPU tests and benchmarks (not part of the library): a kernel that runs
 * for a fixed number of clock cycles, and a consumer that reads a whole batch. */
#include <cuda_runtime_api.h>
#include <stdint.h>

__global__ void spin_kernel(long long cycles, unsigned long long* sink) {
  long long t0 = clock64();
  long long t = t0;
  while (t - t0 < cycles) t = clock64();
  if (sink != nullptr) *sink += (unsigned long long)(t - t0);
}

/* Sums the batch (so the consumer really reads it), then spins: one "training step". */
__global__ void consume_kernel(const float* x, int64_t n, float* acc) {
  float s = 0.0f;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x)
    s += x[i];
  for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(acc, s);
}

extern "C" int rill_gpu_spin(void* stream, long long cycles) {
  spin_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(cycles, nullptr);
  return (int)cudaGetLastError();
}

extern "C" int rill_gpu_consume(void* stream, const float* x, int64_t n, float* acc, long long cycles) {
  consume_kernel<<<256, 256, 0, (cudaStream_t)stream>>>(x, n, acc);
  if (cycles > 0) spin_kernel<<<1, 1, 0, (cudaStream_t)stream>>>(cycles, nullptr);
  return (int)cudaGetLastError();
}

/* Clock cycles per millisecond of spin_kernel, measured with events. */
extern "C" double rill_gpu_cycles_per_ms(void) {
  cudaStream_t s;
  cudaEvent_t a, b;
  cudaStreamCreate(&s);
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  spin_kernel<<<1, 1, 0, s>>>(1000000, nullptr); /* warm up */
  const long long cycles = 50000000;
  cudaEventRecord(a, s);
  spin_kernel<<<1, 1, 0, s>>>(cycles, nullptr);
  cudaEventRecord(b, s);
  cudaEventSynchronize(b);
  float ms = 0.0f;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  cudaStreamDestroy(s);
  return ms > 0.0f ? (double)cycles / ms : 1.5e6;
}
