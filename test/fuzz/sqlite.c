/* libFuzzer target: the SQLite source over any database image, opened read-only in memory
 * (sqlite3_deserialize) and read through rill_df_from_sqlite_db: each of its first tables by
 * rowid with point lookups only and again held in memory (both shuffled), and through a
 * query. Any crash, sanitizer report or abort() is a bug; errors are expected, each with a
 * message. String cells must be UTF-8 and a null string cell empty, whatever the encoding.
 * Where the database passes SQLite's integrity check, the lookups and the held copy must give
 * the same rows, values and errors, as the header promises (in a corrupt one SQLite itself
 * answers a seek and a scan differently: a B-tree whose keys are out of order finds a row by
 * scan and not by rowid). The first byte picks the encoding and the threads. */
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill.h"
#include "rill_addons.h"
#include "rows.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

enum { MAX_ROWS = 4096 };

/* The outcome of each row: its status, and a hash of its cells (bytes, validity). */
typedef struct outcome {
  int64_t n;
  int rc[MAX_ROWS];
  uint64_t hash[MAX_ROWS];
} outcome_t;

static void read_all(rill_df_t* df, int shuffled, int threads, outcome_t* o) {
  rill_error_t err = {0};
  rill_df_t* view = df;
  o->n = 0;
  if (shuffled && rill_df_shuffle(df, 5, &view, &err) != RILL_OK) {
    if (!err.message[0]) abort();
    return;
  }
  rill_iter_t* it = NULL;
  if (rill_iter_new(view, &(rill_iter_opts_t){.threads = threads ? 2 : RILL_THREADS_NONE}, &it, &err) != RILL_OK) {
    if (!err.message[0]) abort();
    if (view != df) rill_df_free(view);
    return;
  }
  rill_row_t row;
  int rc;
  while (o->n < MAX_ROWS && (rc = rill_iter_next(it, &row, &err)) != RILL_END) {
    if (rc != RILL_OK && !err.message[0]) abort(); /* every error has a message */
    o->rc[o->n] = rc;
    o->hash[o->n++] = rc == RILL_OK ? fuzz_check_row(&row) : 0;
  }
  rill_iter_free(it);
  if (view != df) rill_df_free(view);
}

/* Stops statements that run long on a crafted database (they fail with SQLITE_INTERRUPT). */
static int progress(void* steps) { return ++*(int*)steps > 2000; }

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  rill_csv_encoding_t enc = (rill_csv_encoding_t)(data[0] % 3);
  int threads = (data[0] >> 2) & 1;
  data++, size--;
  sqlite3* db = NULL;
  if (sqlite3_open(":memory:", &db) != SQLITE_OK) abort();
  unsigned char* image = sqlite3_malloc64(size);
  if (!image) abort();
  memcpy(image, data, size);
  if (sqlite3_deserialize(db, "main", image, (sqlite3_int64)size, (sqlite3_int64)size,
                          SQLITE_DESERIALIZE_FREEONCLOSE | SQLITE_DESERIALIZE_READONLY) != SQLITE_OK) {
    sqlite3_close(db);
    return 0;
  }
  int steps = 0;
  sqlite3_progress_handler(db, 1000, progress, &steps);
  char names[4][64];
  int ntables = 0;
  sqlite3_stmt* st = NULL;
  if (sqlite3_prepare_v2(db, "SELECT name FROM sqlite_master WHERE type = 'table' LIMIT 4", -1, &st, NULL) == SQLITE_OK)
    while (ntables < 4 && sqlite3_step(st) == SQLITE_ROW) {
      const unsigned char* t = sqlite3_column_text(st, 0);
      if (t && strlen((const char*)t) < sizeof names[0] && !strchr((const char*)t, '"'))
        snprintf(names[ntables++], sizeof names[0], "%s", (const char*)t);
    }
  sqlite3_finalize(st);
  st = NULL;
  int intact = 0;
  if (ntables && sqlite3_prepare_v2(db, "PRAGMA integrity_check", -1, &st, NULL) == SQLITE_OK) {
    const unsigned char* t = sqlite3_step(st) == SQLITE_ROW ? sqlite3_column_text(st, 0) : NULL;
    intact = t && !strcmp((const char*)t, "ok") && sqlite3_step(st) == SQLITE_DONE;
  }
  sqlite3_finalize(st);
  static outcome_t a, b;
  for (int k = 0; k < ntables; k++) {
    rill_error_t err = {0};
    rill_df_t* df = NULL;
    /* by rowid: point lookups only, then held in memory; the same rows either way */
    steps = 0;
    int ra = rill_df_from_sqlite_db(db, names[k], NULL, 0, &(rill_sqlite_opts_t){.encoding = enc, .table_hold_bytes = -1},
                                    &df, &err);
    if (ra != RILL_OK && !err.message[0]) abort();
    if (ra == RILL_OK && rill_df_rows(df) <= MAX_ROWS) {
      steps = -1000000; /* a table that opened is read whole: the outcomes must not depend on a budget */
      read_all(df, 1, threads, &a);
      rill_df_free(df);
      df = NULL;
      if (rill_df_from_sqlite_db(db, names[k], NULL, 0, &(rill_sqlite_opts_t){.encoding = enc}, &df, &err) != RILL_OK)
        abort(); /* it opened a moment ago */
      steps = -1000000;
      read_all(df, 1, threads, &b);
      if (intact && a.n != b.n) abort();
      for (int64_t i = 0; intact && i < a.n; i++)
        if (a.rc[i] != b.rc[i] || (a.rc[i] == RILL_OK && a.hash[i] != b.hash[i])) abort();
    }
    rill_df_free(df);
    df = NULL;
    /* through a query (held in chunks) */
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT * FROM \"%s\"", names[k]);
    steps = 0;
    if (rill_df_from_sqlite_db(db, sql, NULL, 0, &(rill_sqlite_opts_t){.encoding = enc}, &df, &err) == RILL_OK) {
      if (rill_df_rows(df) <= MAX_ROWS) read_all(df, 0, threads, &a);
      rill_df_free(df);
    } else if (!err.message[0]) {
      abort();
    }
  }
  sqlite3_close(db);
  return 0;
}
