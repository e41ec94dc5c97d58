/* Read every row of a SQLite table through rill (by rowid, on demand), in shuffled or
 * sequential order, batched by BATCH rows over THREADS worker threads. HOLD_BYTES is the
 * source's table_hold_bytes (0: the default limit; -1: never held, point lookups only).
 * usage: bench_sqlite DB TABLE THREADS [BATCH] [shuffled|sequential] [HOLD_BYTES]
 * prints: rill_sqlite_ORDER seconds=S cpu_s=C rows=N rss_mb=M checksum=X */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "rill.h"
#include "rill_addons.h"

static double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
         (double)ru.ru_stime.tv_usec * 1e-6;
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: bench_sqlite DB TABLE THREADS [BATCH] [shuffled|sequential] [HOLD_BYTES]\n");
    return 2;
  }
  int threads = atoi(argv[3]);
  int64_t batch = argc > 4 ? atoll(argv[4]) : 1024;
  const char* order = argc > 5 ? argv[5] : "shuffled";
  int shuffled = strcmp(order, "sequential") != 0;
  rill_sqlite_opts_t opts = {.table_hold_bytes = argc > 6 ? atoll(argv[6]) : 0};
  rill_error_t err = {0};
  rill_df_t *df = NULL, *sh = NULL, *batches = NULL;
  double t0 = bench_now(), c0 = cpu_seconds();
  if (rill_df_from_sqlite(argv[1], argv[2], NULL, 0, &opts, &df, &err) != RILL_OK ||
      (shuffled && rill_df_shuffle(df, 1, &sh, &err) != RILL_OK)) {
    fprintf(stderr, "bench_sqlite: %s\n", err.message);
    return 1;
  }
  int ncols;
  rill_iter_t* it = NULL;
  if (bench_open_batches("bench_sqlite", shuffled ? sh : df, batch, threads, &batches, &it, &ncols)) return 1;
  rill_row_t row;
  int rc;
  int64_t rows = 0, sum = 0;
  while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) {
    const rill_array_t* a = rill_row_get(&row, 0);
    for (int64_t i = 0; i < a->length; i++) sum += ((const int64_t*)a->data)[i];
    rows += a->length;
  }
  if (rc != RILL_END) {
    fprintf(stderr, "bench_sqlite: %s\n", err.message);
    return 1;
  }
  double secs = bench_now() - t0, cpu = cpu_seconds() - c0;
  printf("rill_sqlite_%s seconds=%.3f cpu_s=%.3f rows=%lld rss_mb=%.1f checksum=%lld\n", shuffled ? "shuffled" : "sequential",
         secs, cpu, (long long)rows, bench_max_rss_mb(), (long long)sum);
  rill_iter_free(it);
  rill_df_free(batches);
  rill_df_free(sh);
  rill_df_free(df);
  return 0;
}
