/* Cost of one rill_iter_next on a trivial in-memory batched pipeline, measured from C: the
 * baseline that bench_python.py compares the Python extension's `next` with.
 * An int64 column of `rows` values (rill_df_from_arrays, borrowed) batched by `batch`, iterated
 * for at least 0.5 s per configuration: no worker threads and no prefetch (every call does the
 * work itself), and the default prefetch with 2 worker threads.
 * usage: bench_next [rows] [batch]
 * Prints "c_next_ns_<config> value" lines. */
#include <stdio.h>
#include <stdlib.h>

#include "bench_common.h"
#include "rill.h"
#include "rill_addons.h"

static double ns_per_next(rill_df_t* df, int64_t batch, int threads, int prefetch, rill_error_t* err) {
  rill_df_t* b = NULL;
  rill_iter_t* it = NULL;
  int col = 0;
  if (rill_df_batch(df, &col, 1, batch, NULL, &b, err) < 0) return -1;
  if (rill_iter_new(b, &(rill_iter_opts_t){.prefetch = prefetch, .threads = threads}, &it, err) < 0) {
    rill_df_free(b);
    return -1;
  }
  rill_row_t row;
  volatile int64_t sink = 0;
  while (rill_iter_next(it, &row, err) == RILL_OK) { /* warm the pools */
  }
  int64_t nexts = 0, e = 1;
  double t0 = bench_now(), t;
  do {
    rill_iter_set_epoch(it, e++);
    while (rill_iter_next(it, &row, err) == RILL_OK) {
      sink += ((const int64_t*)rill_row_get(&row, 0)->data)[0];
      nexts++;
    }
  } while ((t = bench_now() - t0) < 0.5);
  (void)sink;
  rill_iter_free(it);
  rill_df_free(b);
  return nexts ? t * 1e9 / (double)nexts : 0;
}

int main(int argc, char** argv) {
  int64_t rows = argc > 1 ? atoll(argv[1]) : 65536, batch = argc > 2 ? atoll(argv[2]) : 64;
  if (rows < 1 || batch < 1) {
    fprintf(stderr, "usage: bench_next [rows >= 1] [batch >= 1]\n");
    return 2;
  }
  rill_error_t err = {0};
  rill_array_t* v = NULL;
  if (rill_array_new(rill_type_scalar(RILL_INT64), rows, &v, &err) < 0) {
    fprintf(stderr, "bench_next: %s\n", err.message);
    return 1;
  }
  for (int64_t i = 0; i < rows; i++) ((int64_t*)v->data)[i] = i;
  rill_df_t* df = NULL;
  const char* names[1] = {"v"};
  const rill_array_t* arrays[1] = {v};
  if (rill_df_from_arrays(names, arrays, 1, 0, &df, &err) < 0) {
    fprintf(stderr, "bench_next: %s\n", err.message);
    return 1;
  }
  double a = ns_per_next(df, batch, RILL_THREADS_NONE, RILL_PREFETCH_NONE, &err);
  double b = a < 0 ? -1 : ns_per_next(df, batch, 2, 0, &err);
  if (a < 0 || b < 0) {
    fprintf(stderr, "bench_next: %s\n", err.message);
    return 1;
  }
  printf("c_next_ns_inline %.1f\n", a);
  printf("c_next_ns_2threads %.1f\n", b);
  rill_df_free(df);
  rill_array_release(v);
  return 0;
}
