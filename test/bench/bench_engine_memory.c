/* Batching a memory column (rill_df_from_arrays, uint8 224x224x3 cells) without maps:
 * GB/s of batches handed out, against memcpy of the same batch bytes measured in this run.
 * Consecutive rows are lent by the memory source (zero copy); a shuffled order gathers.
 * usage: bench_engine_memory [images] [batch] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "rill.h"
#include "rill_addons.h"

static double memcpy_gbs(size_t bytes) {
  unsigned char* a = malloc(bytes);
  unsigned char* b = malloc(bytes);
  if (!a || !b) return 0;
  memset(a, 1, bytes);
  memset(b, 2, bytes);
  int reps = 0;
  double t0 = bench_now(), t;
  do {
    memcpy(b, a, bytes);
    a[reps % bytes] ^= b[bytes / 2];
    reps++;
  } while ((t = bench_now() - t0) < 0.3);
  volatile unsigned char sink = b[bytes / 3];
  (void)sink;
  free(a);
  free(b);
  return (double)bytes * reps / t / 1e9;
}

/* Iterates batches of `df` for at least 0.5 s; returns GB/s of batch bytes. */
static double run(rill_df_t* df, int batch, int threads, size_t cell, rill_error_t* err) {
  rill_df_t* b = NULL;
  rill_iter_t* it = NULL;
  int col = 0;
  if (rill_df_batch(df, &col, 1, batch, &(rill_batch_opts_t){.drop_last = 1}, &b, err) < 0) return -1;
  if (rill_iter_new(b, &(rill_iter_opts_t){.prefetch = 2, .threads = threads}, &it, err) < 0) return -1;
  rill_row_t row;
  int64_t batches = 0;
  volatile unsigned sink = 0;
  while (rill_iter_next(it, &row, err) == RILL_OK) { /* warm the pools */
  }
  double t0 = bench_now(), t;
  int64_t e = 1;
  do {
    rill_iter_set_epoch(it, e++);
    while (rill_iter_next(it, &row, err) == RILL_OK) {
      const rill_array_t* a = rill_row_get(&row, 0);
      sink += ((const unsigned char*)a->data)[a->data_size - 1]; /* touch the batch */
      batches++;
    }
  } while ((t = bench_now() - t0) < 0.5);
  (void)sink;
  rill_iter_free(it);
  rill_df_free(b);
  return (double)batches * batch * cell / t / 1e9;
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 512, batch = argc > 2 ? atoi(argv[2]) : 64;
  if (n < 1 || batch < 1 || batch > n) {
    fprintf(stderr, "usage: bench_engine_memory [images >= 1] [batch in 1..images]\n");
    return 2;
  }
  rill_error_t err = {0};
  rill_array_t* imgs = NULL;
  if (rill_array_new(rill_type_tensor(RILL_UINT8, 3, (int64_t[]){224, 224, 3}), n, &imgs, &err) < 0) {
    fprintf(stderr, "bench_engine_memory: %s\n", err.message);
    return 1;
  }
  memset(imgs->data, 7, (size_t)imgs->data_size);
  rill_df_t *df = NULL, *sh = NULL;
  const char* names[1] = {"img"};
  const rill_array_t* arrays[1] = {imgs};
  if (rill_df_from_arrays(names, arrays, 1, 0, &df, &err) < 0 || rill_df_shuffle(df, 1, &sh, &err) < 0) {
    fprintf(stderr, "bench_engine_memory: %s\n", err.message);
    return 1;
  }
  size_t cell = 224 * 224 * 3;
  double mc = memcpy_gbs(cell * (size_t)batch);
  printf("memcpy_gbs %.2f\n", mc);
  for (int threads = 1; threads <= 2; threads++) {
    double seq = run(df, batch, threads, cell, &err), shuf = run(sh, batch, threads, cell, &err);
    if (seq < 0 || shuf < 0) {
      fprintf(stderr, "bench_engine_memory: %s\n", err.message);
      return 1;
    }
    printf("memory_batch_u8_gbs_%dt %.2f ratio_vs_memcpy %.2f\n", threads, seq, seq / mc);
    printf("memory_batch_u8_shuffled_gbs_%dt %.2f ratio_vs_memcpy %.2f\n", threads, shuf, shuf / mc);
  }
  rill_df_free(sh);
  rill_df_free(df);
  rill_array_release(imgs);
  return 0;
}
