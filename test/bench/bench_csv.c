/* Parse and iterate every row of a CSV file through rill (batches of BATCH rows, default 8192).
 * usage: bench_csv FILE.csv[,FILE.csv...] THREADS [BATCH]  (several files: rill_df_from_csv_files)
 * environment: CSV_SHUFFLE=SEED (rows in a shuffled order), CSV_SPILL_BYTES=N (compressed input
 * whose text passes N bytes goes to a temporary file; default 1 GiB), CSV_GZIP_ZLIB=1 (gzip by
 * zlib's stream alone, as in a build without libdeflate), CSV_TRIM=1 (the trim option), CSV_COMMENT=C (the comment character),
 * CSV_ESCAPE=C (the escape character), CSV_NULL=TEXT (one null value), CSV_DELIMITER=C,
 * CSV_DECIMAL=C, CSV_SLEEP_US=N / CSV_SPIN_US=N (the consumer sleeps / stays busy on its CPU N
 * microseconds after each batch: a training step that blocks on the GPU / computes)
 * prints: rill_csv seconds=S cpu_s=C rows=N rss_mb=M index_s=I nulls=K (cpu_s: user + system CPU
 * seconds of the process, all threads) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "bench_common.h"
#include "rill.h"
#include "rill_addons.h"

extern int64_t rill__csv_spill_bytes; /* the library's knobs (csv_internal.h) */
extern int rill__csv_gzip_zlib_only;

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: bench_csv FILE.csv THREADS\n");
    return 2;
  }
  int threads = atoi(argv[2]);
  int64_t batch = argc > 3 ? atoll(argv[3]) : 8192;
  rill_error_t err = {0};
  rill_df_t *df = NULL, *batches = NULL;
  double t0 = bench_now();
  const char *trim = getenv("CSV_TRIM"), *comment = getenv("CSV_COMMENT"), *escape = getenv("CSV_ESCAPE");
  rill_csv_opts_t o = {.threads = threads, .trim = trim && atoi(trim), .comment = comment ? comment[0] : 0,
                       .escape = escape ? escape[0] : 0};
  const char *delimiter = getenv("CSV_DELIMITER"), *decimal = getenv("CSV_DECIMAL");
  o.delimiter = delimiter ? delimiter[0] : 0;
  o.decimal = decimal ? decimal[0] : 0;
  const char* null_values[2] = {getenv("CSV_NULL"), NULL};
  if (null_values[0]) o.null_values = null_values;
  const char* spill = getenv("CSV_SPILL_BYTES");
  if (spill) rill__csv_spill_bytes = atoll(spill);
  const char* zlib_only = getenv("CSV_GZIP_ZLIB");
  if (zlib_only) rill__csv_gzip_zlib_only = atoi(zlib_only);
  int nfiles = 1;
  for (const char* p = argv[1]; *p; p++) nfiles += *p == ',';
  const char** files = malloc(sizeof *files * (size_t)nfiles);
  nfiles = 0;
  for (char* f = strtok(argv[1], ","); f && files; f = strtok(NULL, ",")) files[nfiles++] = f;
  if (rill_df_from_csv_files(files, nfiles, &o, &df, &err) != RILL_OK) {
    fprintf(stderr, "bench_csv: %s\n", err.message);
    return 1;
  }
  const char* shuffle = getenv("CSV_SHUFFLE");
  if (shuffle) {
    rill_df_t* sh;
    if (rill_df_shuffle(df, strtoull(shuffle, NULL, 10), &sh, &err) != RILL_OK) {
      fprintf(stderr, "bench_csv: %s\n", err.message);
      return 1;
    }
    rill_df_free(df);
    df = sh;
  }
  double t_index = bench_now() - t0;
  int ncols;
  rill_iter_t* it = NULL;
  if (bench_open_batches("bench_csv", df, batch, threads, &batches, &it, &ncols)) return 1;
  rill_row_t row;
  int rc;
  int64_t rows = 0, nulls = 0;
  const char *sleep_us = getenv("CSV_SLEEP_US"), *spin_us = getenv("CSV_SPIN_US");
  long sleep_ns = sleep_us ? atol(sleep_us) * 1000 : 0;
  double spin_s = spin_us ? atof(spin_us) * 1e-6 : 0;
  while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) {
    const rill_array_t* a = rill_row_get(&row, 0);
    rows += a->length;
    for (int c = 0; c < ncols; c++) nulls += rill_row_get(&row, c)->null_count;
    if (sleep_ns > 0) nanosleep(&(struct timespec){sleep_ns / 1000000000, sleep_ns % 1000000000}, NULL);
    for (double until = bench_now() + spin_s; spin_s > 0 && bench_now() < until;) {
    }
  }
  if (rc != RILL_END) {
    fprintf(stderr, "bench_csv: %s\n", err.message);
    return 1;
  }
  double secs = bench_now() - t0;
  char line[256];
  FILE* st = fopen("/proc/self/status", "r");
  while (st && fgets(line, sizeof line, st))
    if (!strncmp(line, "RssAnon", 7) || !strncmp(line, "RssFile", 7)) fprintf(stderr, "%s", line);
  if (st) fclose(st);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  double cpu = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec * 1e-6 + (double)ru.ru_stime.tv_sec +
               ru.ru_stime.tv_usec * 1e-6;
  printf("rill_csv seconds=%.3f cpu_s=%.3f rows=%lld rss_mb=%.1f index_s=%.3f nulls=%lld\n", secs, cpu,
         (long long)rows, bench_max_rss_mb(), t_index, (long long)nulls);
  rill_iter_free(it);
  rill_df_free(batches);
  rill_df_free(df);
  return 0;
}
