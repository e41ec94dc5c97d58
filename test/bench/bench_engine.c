/* Engine overhead: int64 rows from a source through 1/2/4/8 chained "+1" maps, iterated in
 * row mode and in batched mode (B = 1024), with worker threads and without, against a plain
 * C loop doing the same arithmetic over 1024-row buffers in the same run. Also the latency
 * of the first row of a trivial pipeline.
 *
 * Output: one line per measurement, "key=value" fields, read by run_engine.sh:
 *   case=rill mode=batched threads=none maps=4 rows=N ns_row=.. ns_row_stage=.. cpu_ns_row=..
 *   case=cloop maps=4 rows=N ns_row=.. ns_row_stage=.. cpu_ns_row=..
 *   case=first_row us=..
 * A stage is the source or one map (maps + 1 stages). ns_row: wall time; cpu_ns_row: the
 * process's CPU time (every thread's), which a machine busy with other work inflates less.
 * Each figure is the best of REPS runs (argument 3, default 5). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rill.h"

/* The hot loops' functions start on 64-byte boundaries: their alignment then does not move
 * with what is linked before them (a few PLT entries more in a new library version shifted
 * them and changed these loops' speed by up to 50% on a Zen 4 machine). */
#define HOT __attribute__((aligned(64), noinline))

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

typedef struct timing {
  double wall, cpu; /* ns per row */
} timing_t;

static void keep_best(timing_t* best, timing_t t) {
  if (t.wall < best->wall) best->wall = t.wall;
  if (t.cpu < best->cpu) best->cpu = t.cpu;
}

HOT static int src(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* ex, void* ctx, rill_error_t* err) {
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), n);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc");
  int64_t* d = out->data;
  for (int64_t i = 0; i < n; i++) d[i] = rows[i];
  return RILL_OK;
}

HOT static int plus1(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* ex, void* ctx,
                 rill_error_t* err) {
  int64_t n = in[0]->length;
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), n);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc");
  const int64_t* s = in[0]->data;
  int64_t* d = out->data;
  for (int64_t i = 0; i < n; i++) d[i] = s[i] + 1;
  return RILL_OK;
}

static void die(const char* what, const rill_error_t* err) {
  fprintf(stderr, "bench_engine: %s: %s\n", what, err->message);
  exit(1);
}

/* Builds source -> maps x "+1" (-> batch B when B > 0); returns the dataframe to iterate. */
static rill_df_t* build(int64_t rows, int maps, int64_t batch, rill_df_t** base) {
  rill_error_t err;
  rill_df_t* df;
  if (rill_df_new(rows, &df, &err) != RILL_OK) die("df_new", &err);
  int col = rill_df_add_source(df, "x0", rill_type_scalar(RILL_INT64), src, NULL, NULL, NULL, &err);
  if (col < 0) die("add_source", &err);
  for (int m = 0; m < maps; m++) {
    char name[16];
    snprintf(name, sizeof name, "x%d", m + 1);
    col = rill_df_map(df, name, rill_type_scalar(RILL_INT64), &col, 1, plus1, NULL, NULL, NULL, &err);
    if (col < 0) die("map", &err);
  }
  *base = df;
  if (batch <= 0) return df;
  rill_df_t* b;
  if (rill_df_batch(df, &col, 1, batch, NULL, &b, &err) != RILL_OK) die("batch", &err);
  return b;
}

HOT static timing_t run_rill(int64_t rows, int maps, int64_t batch, int threads, int64_t* check) {
  rill_df_t* base;
  rill_df_t* df = build(rows, maps, batch, &base);
  int col = batch > 0 ? 0 : maps;
  rill_error_t err;
  rill_iter_t* it;
  rill_iter_opts_t o = {.columns = &col, .ncolumns = 1, .threads = threads, .prefetch = batch > 0 ? 4 : 256};
  int64_t t0 = now_ns(), c0 = cpu_ns();
  if (rill_iter_new(df, &o, &it, &err) != RILL_OK) die("iter_new", &err);
  rill_row_t row;
  int64_t sum = 0;
  int r;
  while ((r = rill_iter_next(it, &row, &err)) == RILL_OK) {
    const rill_array_t* a = rill_row_get(&row, 0);
    const int64_t* d = a->data;
    for (int64_t i = 0; i < a->length; i++) sum += d[i];
  }
  if (r != RILL_END) die("iter_next", &err);
  timing_t t = {(double)(now_ns() - t0) / (double)rows, (double)(cpu_ns() - c0) / (double)rows};
  rill_iter_free(it);
  if (df != base) rill_df_free(df);
  rill_df_free(base);
  *check = sum;
  return t;
}

HOT static timing_t run_cloop(int64_t rows, int maps, int64_t* check) {
  enum { B = 1024 };
  int64_t* buf[9];
  for (int m = 0; m <= maps; m++) buf[m] = aligned_alloc(64, B * sizeof(int64_t));
  int64_t t0 = now_ns(), c0 = cpu_ns();
  int64_t sum = 0;
  for (int64_t s = 0; s < rows; s += B) {
    int64_t n = rows - s < B ? rows - s : B;
    for (int64_t i = 0; i < n; i++) buf[0][i] = s + i;
    for (int m = 1; m <= maps; m++)
      for (int64_t i = 0; i < n; i++) buf[m][i] = buf[m - 1][i] + 1;
    for (int64_t i = 0; i < n; i++) sum += buf[maps][i];
    __asm__ volatile("" : : "r"(buf[maps]) : "memory");
  }
  timing_t t = {(double)(now_ns() - t0) / (double)rows, (double)(cpu_ns() - c0) / (double)rows};
  for (int m = 0; m <= maps; m++) free(buf[m]);
  *check = sum;
  return t;
}

static double best(double a, double b) { return a < b ? a : b; }

int main(int argc, char** argv) {
  int64_t batched_rows = argc > 1 ? atoll(argv[1]) : (1 << 22);
  int64_t row_rows = argc > 2 ? atoll(argv[2]) : 200000;
  int reps = argc > 3 ? atoi(argv[3]) : 5;
  if (reps < 1) reps = 1;
  const int maps_list[4] = {1, 2, 4, 8};
  for (int k = 0; k < 4; k++) {
    int maps = maps_list[k];
    int64_t want = batched_rows * (batched_rows - 1) / 2 + (int64_t)maps * batched_rows, got;
    timing_t c = {1e30, 1e30};
    for (int rep = 0; rep < reps; rep++) keep_best(&c, run_cloop(batched_rows, maps, &got));
    if (got != want) fprintf(stderr, "bench_engine: C loop checksum mismatch\n");
    printf("case=cloop maps=%d rows=%lld ns_row=%.3f ns_row_stage=%.3f cpu_ns_row=%.3f\n", maps, (long long)batched_rows,
           c.wall, c.wall / (maps + 1), c.cpu);
    for (int mode = 0; mode < 2; mode++) {
      int64_t rows = mode ? batched_rows : row_rows;
      int64_t want_m = rows * (rows - 1) / 2 + (int64_t)maps * rows;
      for (int th = 0; th < 2; th++) {
        int threads = th ? 0 : RILL_THREADS_NONE;
        timing_t t = {1e30, 1e30};
        for (int rep = 0; rep < reps; rep++) {
          keep_best(&t, run_rill(rows, maps, mode ? 1024 : 0, threads, &got));
          if (got != want_m) {
            fprintf(stderr, "bench_engine: checksum mismatch (%lld != %lld)\n", (long long)got, (long long)want_m);
            return 1;
          }
        }
        printf("case=rill mode=%s threads=%s maps=%d rows=%lld ns_row=%.3f ns_row_stage=%.3f cpu_ns_row=%.3f\n",
               mode ? "batched" : "row", th ? "cores" : "none", maps, (long long)rows, t.wall, t.wall / (maps + 1), t.cpu);
      }
    }
  }
  /* first row of a trivial pipeline: build, open, first row */
  double first = 1e30;
  for (int rep = 0; rep < 20; rep++) {
    int64_t t0 = now_ns();
    rill_df_t* base;
    rill_df_t* df = build(1000, 1, 0, &base);
    rill_error_t err;
    rill_iter_t* it;
    if (rill_iter_new(df, NULL, &it, &err) != RILL_OK) die("iter_new", &err);
    rill_row_t row;
    if (rill_iter_next(it, &row, &err) != RILL_OK) die("iter_next", &err);
    double us = (double)(now_ns() - t0) / 1000.0;
    first = best(first, us);
    rill_iter_free(it);
    rill_df_free(base);
  }
  printf("case=first_row us=%.1f\n", first);
  fflush(stdout);
  return 0;
}
