/* Stage functions used both by the Criterion engine tests and by the ThreadSanitizer
 * programs; plain C, no test framework. */
#ifndef RILL_TEST_SHARED_STAGES_H
#define RILL_TEST_SHARED_STAGES_H

#include <dirent.h>
#include <stdatomic.h>
#include <time.h>

#include "rill.h"

/* Map: float64 out = int64 input + a uniform draw of the cell's generator. */
static inline int map_rand(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* ex, void* ctx,
                           rill_error_t* err) {
  int64_t n = in[0]->length;
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_FLOAT64), n);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc failed");
  for (int64_t i = 0; i < n; i++) {
    rill_rng_t g = rill_exec_rng(ex, i);
    ((double*)out->data)[i] = (double)((const int64_t*)in[0]->data)[i] + rill_rng_uniform(&g);
  }
  return RILL_OK;
}

/* Keeps the calling thread busy on its CPU for `ns` nanoseconds (a stage of a known cost). */
static inline void rt_spin_ns(int64_t ns) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do clock_gettime(CLOCK_MONOTONIC, &t);
  while ((t.tv_sec - t0.tv_sec) * 1000000000LL + (t.tv_nsec - t0.tv_nsec) < ns);
}

/* Threads of this process (entries of /proc/self/task), or -1 where it cannot be read. */
static inline int rt_thread_count(void) {
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  for (struct dirent* e; (e = readdir(d));)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

/* What src_worker saw: calls, calls made on worker threads, the highest worker index. */
typedef struct worker_seen {
  int64_t sleep_ns; /* per call */
  _Atomic int64_t calls, on_workers;
  _Atomic int max_worker;
} worker_seen_t;

/* Source: int64 cell = row id; records which thread ran the call (rill_exec_worker). */
static inline int src_worker(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* ex, void* ctx,
                             rill_error_t* err) {
  worker_seen_t* s = ctx;
  int w = rill_exec_worker(ex);
  atomic_fetch_add(&s->calls, 1);
  if (w >= 0) atomic_fetch_add(&s->on_workers, 1);
  for (int m = atomic_load(&s->max_worker); w > m && !atomic_compare_exchange_weak(&s->max_worker, &m, w);) {
  }
  if (s->sleep_ns > 0) nanosleep(&(struct timespec){0, (long)s->sleep_ns}, NULL);
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), n);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc failed");
  for (int64_t i = 0; i < n; i++) ((int64_t*)out->data)[i] = rows[i];
  return RILL_OK;
}

/* Iterates rows 0..rows-1 of a src_worker source (one split task per `grain` rows) with
 * `threads` workers and prefetch 4; returns the sum of the cells, or -1 on an error. */
static inline int64_t worker_sum(int64_t rows, int64_t grain, int threads, worker_seen_t* seen) {
  rill_error_t err;
  rill_df_t* df;
  if (rill_df_new(rows, &df, &err) != RILL_OK) return -1;
  rill_stage_opts_t o = {.grain = grain};
  int64_t sum = -1;
  rill_iter_t* it = NULL;
  if (rill_df_add_source(df, "w", rill_type_scalar(RILL_INT64), src_worker, seen, NULL, &o, &err) == 0 &&
      rill_iter_new(df, &(rill_iter_opts_t){.threads = threads, .prefetch = 4}, &it, &err) == RILL_OK) {
    rill_row_t row;
    int r;
    sum = 0;
    while ((r = rill_iter_next(it, &row, &err)) == RILL_OK) sum += ((const int64_t*)rill_row_get(&row, 0)->data)[0];
    if (r != RILL_END) sum = -1;
  }
  rill_iter_free(it);
  rill_df_free(df);
  return sum;
}

#endif
