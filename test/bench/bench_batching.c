/* Batching: bytes written into the batch buffer per second by a map stage whose output slot
 * is the batch itself (uint8 NHWC through flip, float32 NCHW through normalize), against
 * memcpy bandwidth of a buffer of the batch's size measured in the same run; and page faults
 * per batch once the pools are warm (getrusage minor faults). The uint8 result is also given
 * against a shuffled gather-copy of the same images (see gather_gbs), and per CPU second
 * (user + sys of the whole process; memcpy's per CPU second of its thread) for a shared machine.
 *
 * usage: bench_batching [images] [batch] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "rill.h"
#include "rill_addons.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_s(void) { /* CPU time of every thread of the process */
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static long minflt(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

static double thread_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* memcpy bandwidth (GB/s written) for `bytes`-sized copies; *per_cpu: per CPU second. */
static double memcpy_gbs(size_t bytes, double* per_cpu) {
  unsigned char* a = malloc(bytes);
  unsigned char* b = malloc(bytes);
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  int reps = 0;
  double t0 = now_s(), c0 = thread_cpu_s(), t;
  do {
    memcpy(reps & 1 ? a : b, reps & 1 ? b : a, bytes);
    reps++;
  } while ((t = now_s() - t0) < 0.5 || reps < 4);
  double c = thread_cpu_s() - c0;
  *per_cpu = c > 0 ? (double)bytes * reps / c / 1e9 : 0;
  volatile unsigned char sink = a[bytes / 2] ^ b[bytes / 3];
  (void)sink;
  free(a);
  free(b);
  return (double)bytes * reps / t / 1e9;
}

/* The same bytes moved by a plain loop: each batch gathers `batch` whole images in shuffled
 * order from the full source array (as big as the dataset, so mostly out of cache) into one
 * batch buffer. This is the peer the flip map competes with when the source is DRAM-bound;
 * memcpy_gbs above is the in-cache bound. */
static double gather_gbs(const uint8_t* src, int n, size_t cell, int batch) {
  uint8_t* dst = malloc(cell * (size_t)batch);
  int* perm = malloc((size_t)n * sizeof *perm);
  if (!dst || !perm) {
    free(dst);
    free(perm);
    return 0;
  }
  memset(dst, 0, cell * (size_t)batch);
  uint32_t s = 7;
  for (int i = 0; i < n; i++) perm[i] = i;
  for (int i = n - 1; i > 0; i--) {
    int j = (int)((s = s * 1664525u + 1013904223u) % (uint32_t)(i + 1)), t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  int64_t bytes = 0;
  double t0 = now_s(), t;
  do {
    for (int i = 0; i + batch <= n; i += batch)
      for (int k = 0; k < batch; k++) memcpy(dst + (size_t)k * cell, src + (size_t)perm[i + k] * cell, cell);
    bytes += (int64_t)(n / batch) * batch * (int64_t)cell;
  } while ((t = now_s() - t0) < 0.5);
  volatile uint8_t sink = dst[cell / 2];
  (void)sink;
  free(dst);
  free(perm);
  return (double)bytes / t / 1e9;
}

typedef struct result {
  double gbs, gbs_cpu, faults_per_batch; /* gbs_cpu: per CPU second of the whole process */
  int64_t allocs_steady;
} result_t;

static int run(rill_df_t* df, int col, int batch, int threads, size_t cell_bytes, result_t* r, rill_error_t* err) {
  rill_df_t* b = NULL;
  rill_iter_t* it = NULL;
  rill_row_t row;
  if (rill_df_batch(df, &col, 1, batch, &(rill_batch_opts_t){.drop_last = 1}, &b, err) < 0) return -1;
  if (rill_iter_new(b, &(rill_iter_opts_t){.prefetch = 2, .threads = threads, .seed = 3}, &it, err) < 0) return -1;
  /* epoch 0 warms the pools */
  while (rill_iter_next(it, &row, err) == RILL_OK) {
  }
  rill_iter_stats_t s0, s1;
  rill_iter_stats(it, &s0);
  long f0 = minflt();
  int64_t batches = 0;
  double t0 = now_s(), c0 = cpu_s(), t = 0;
  for (int e = 1; e <= 3 || t < 1.0; e++) { /* at least 3 epochs and one second */
    rill_iter_set_epoch(it, e);
    int rc;
    while ((rc = rill_iter_next(it, &row, err)) == RILL_OK) batches++;
    if (rc < 0) return rc;
    t = now_s() - t0;
  }
  double c = cpu_s() - c0;
  long f1 = minflt();
  rill_iter_stats(it, &s1);
  r->gbs = (double)batches * batch * cell_bytes / t / 1e9;
  r->gbs_cpu = c > 0 ? (double)batches * batch * cell_bytes / c / 1e9 : 0;
  r->faults_per_batch = batches ? (double)(f1 - f0) / batches : 0;
  r->allocs_steady = s1.allocs - s0.allocs;
  rill_iter_free(it);
  rill_df_free(b);
  return 0;
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 512, batch = argc > 2 ? atoi(argv[2]) : 64;
  rill_error_t err = {0};
  rill_array_t* imgs = NULL;
  if (rill_array_new(rill_type_tensor(RILL_UINT8, 3, (int64_t[]){224, 224, 3}), n, &imgs, &err) < 0) {
    fprintf(stderr, "bench_batching: %s\n", err.message);
    return 1;
  }
  uint32_t s = 1;
  uint8_t* p = imgs->data;
  for (int64_t i = 0; i < (int64_t)n * 224 * 224 * 3; i++) p[i] = (uint8_t)((s = s * 1664525u + 1013904223u) >> 24);
  rill_df_t* df = NULL;
  const char* names[1] = {"img"};
  const rill_array_t* arrays[1] = {imgs};
  if (rill_df_from_arrays(names, arrays, 1, 0, &df, &err) < 0) {
    fprintf(stderr, "bench_batching: %s\n", err.message);
    return 1;
  }
  int flip = rill_image_flip(df, "flip", 0, 0.5, &err);
  int norm = rill_image_normalize(df, "x", 0,
                                  &(rill_normalize_opts_t){.flip = 0.5, .mean = {0.485, 0.456, 0.406},
                                                           .std = {0.229, 0.224, 0.225}, .layout = RILL_LAYOUT_CHW},
                                  &err);
  if (flip < 0 || norm < 0) {
    fprintf(stderr, "bench_batching: %s\n", err.message);
    return 1;
  }
  size_t u8 = 224 * 224 * 3, f32 = u8 * 4;
  double mc_u8_cpu, mc_f32_cpu;
  double mc_u8 = memcpy_gbs(u8 * batch, &mc_u8_cpu), mc_f32 = memcpy_gbs(f32 * batch, &mc_f32_cpu);
  double ga_u8 = gather_gbs(imgs->data, n, u8, batch);
  printf("memcpy_gbs_u8_batch %.2f\nmemcpy_gbs_f32_batch %.2f\n", mc_u8, mc_f32);
  printf("memcpy_gbs_per_cpu_s_u8_batch %.2f\n", mc_u8_cpu);
  printf("gather_memcpy_gbs_u8 %.2f\n", ga_u8);
  for (int threads = 1; threads <= 2; threads++) {
    result_t a, b;
    if (run(df, flip, batch, threads, u8, &a, &err) < 0 || run(df, norm, batch, threads, f32, &b, &err) < 0) {
      fprintf(stderr, "bench_batching: %s\n", err.message);
      return 1;
    }
    printf("batch_u8_nhwc_gbs_%dt %.2f\nratio_u8_vs_memcpy_%dt %.2f\n", threads, a.gbs, threads, a.gbs / mc_u8);
    printf("ratio_u8_vs_gather_memcpy_%dt %.2f\n", threads, ga_u8 > 0 ? a.gbs / ga_u8 : 0);
    printf("batch_u8_nhwc_gbs_per_cpu_s_%dt %.2f\nratio_u8_vs_memcpy_per_cpu_s_%dt %.2f\n", threads, a.gbs_cpu, threads,
           mc_u8_cpu > 0 ? a.gbs_cpu / mc_u8_cpu : 0);
    printf("batch_f32_nchw_gbs_%dt %.2f\nratio_f32_vs_memcpy_%dt %.2f\n", threads, b.gbs, threads, b.gbs / mc_f32);
    printf("faults_per_batch_u8_%dt %.2f\nfaults_per_batch_f32_%dt %.2f\n", threads, a.faults_per_batch, threads,
           b.faults_per_batch);
    printf("steady_allocs_%dt %lld\n", threads, (long long)(a.allocs_steady + b.allocs_steady));
  }
  rill_df_free(df);
  rill_array_release(imgs);
  return 0;
}
