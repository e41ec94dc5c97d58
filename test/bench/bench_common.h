/* Helpers of the C benchmark programs. */
#ifndef RILL_BENCH_COMMON_H
#define RILL_BENCH_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "rill.h"

/* Monotonic clock in seconds. */
static inline double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Peak resident set of this process in MiB. */
static inline double bench_max_rss_mb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_maxrss / 1024.0;
}

/* Batches every column of df by `batch` rows and opens an iterator over the batches with
 * `threads` workers; *ncols receives the column count. Prints "prog: message" and returns
 * nonzero on failure. */
static inline int bench_open_batches(const char* prog, rill_df_t* df, int64_t batch, int threads, rill_df_t** batches,
                                     rill_iter_t** it, int* ncols) {
  rill_error_t err = {0};
  *ncols = rill_df_ncolumns(df);
  int* cols = malloc(sizeof(int) * (size_t)*ncols);
  if (!cols) {
    fprintf(stderr, "%s: out of memory\n", prog);
    return 1;
  }
  for (int c = 0; c < *ncols; c++) cols[c] = c;
  int rc = rill_df_batch(df, cols, *ncols, batch, NULL, batches, &err);
  free(cols);
  if (rc == RILL_OK) rc = rill_iter_new(*batches, &(rill_iter_opts_t){.threads = threads, .prefetch = 4}, it, &err);
  if (rc != RILL_OK) {
    fprintf(stderr, "%s: %s\n", prog, err.message);
    return 1;
  }
  return 0;
}

#endif
