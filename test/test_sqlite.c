/* SQLite source: types, NULLs, parameters, table mode by rowid, errors, fork(). */
#include <dirent.h>
#include <limits.h>
#include <stdint.h>
#include <unistd.h>

#include "common.h"

#if RILL_HAVE_SQLITE
#include <sqlite3.h>

static void exec_sql(sqlite3* db, const char* sql) {
  char* msg = NULL;
  int rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
  cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, msg ? msg : "");
  sqlite3_free(msg);
}

/* An in-memory database made by `sql`; THOUSAND before an INSERT ... SELECT ... FROM c gives it
 * the numbers x = 0..999. */
#define THOUSAND "WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE x < 999) "
static sqlite3* db_of(const char* sql) {
  sqlite3* db = NULL;
  cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
  exec_sql(db, sql);
  return db;
}

static sqlite3* mem_db(void) {
  sqlite3* db = NULL;
  cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
  exec_sql(db, "CREATE TABLE t(i INTEGER, r REAL, s TEXT, b BLOB, flag BOOLEAN, ts TIMESTAMP, x);"
               "INSERT INTO t VALUES (1, 1.5, 'one', x'00ff', 1, '2024-01-02T00:00:00Z', 7);"
               "INSERT INTO t VALUES (NULL, NULL, NULL, NULL, NULL, NULL, NULL);"
               "INSERT INTO t VALUES (-3, 2, '', x'', 0, 86400, 8);");
  return db;
}

static const rill_array_t* next_cell(rill_iter_t* it, rill_row_t* row, int c) {
  rill_error_t err = {0};
  RT_OK(rill_iter_next(it, row, &err), err);
  return rill_row_get(row, c);
}

Test(sqlite, every_type_and_nulls) {
  sqlite3* db = mem_db();
  rill_error_t err = {0};
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_sqlite_db(db, "SELECT * FROM t ORDER BY rowid", NULL, 0, NULL, &df, &err), err);
  cr_assert_eq(rill_df_rows(df), 3);
  rill_dtype_t want[] = {RILL_INT64, RILL_FLOAT64, RILL_STRING, RILL_BINARY, RILL_BOOL, RILL_TIMESTAMP_US, RILL_INT64};
  for (int c = 0; c < 7; c++)
    cr_assert_eq(rill_df_field(df, c)->type.dtype, want[c], "column %d is %s", c,
                 rill_dtype_name(rill_df_field(df, c)->type.dtype));
  cr_assert_str_eq(rill_df_field(df, 2)->name, "s");
  rill_iter_t* it;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE}, &it, &err), err);
  rill_row_t row;
  RT_OK(rill_iter_next(it, &row, &err), err);
  int64_t nb;
  cr_assert_eq(*(const int64_t*)rill_array_cell(rill_row_get(&row, 0), 0, &nb), 1);
  cr_assert_eq(*(const double*)rill_array_cell(rill_row_get(&row, 1), 0, &nb), 1.5);
  const char* s = rill_array_cell(rill_row_get(&row, 2), 0, &nb);
  cr_assert(nb == 3 && memcmp(s, "one", 3) == 0);
  const uint8_t* b = rill_array_cell(rill_row_get(&row, 3), 0, &nb);
  cr_assert(nb == 2 && b[0] == 0 && b[1] == 0xff);
  cr_assert_eq(*(const uint8_t*)rill_array_cell(rill_row_get(&row, 4), 0, &nb), 1);
  cr_assert_eq(*(const int64_t*)rill_array_cell(rill_row_get(&row, 5), 0, &nb), 1704153600000000LL);
  RT_OK(rill_iter_next(it, &row, &err), err);
  for (int c = 0; c < 7; c++) {
    cr_assert_not(rill_array_is_valid(rill_row_get(&row, c), 0), "column %d of the NULL row", c);
    cr_assert_eq(rill_row_get(&row, c)->null_count, 1);
  }
  RT_OK(rill_iter_next(it, &row, &err), err);
  cr_assert_eq(*(const double*)rill_array_cell(rill_row_get(&row, 1), 0, &nb), 2.0, "integer in a REAL column");
  rill_array_cell(rill_row_get(&row, 2), 0, &nb);
  cr_assert_eq(nb, 0);
  cr_assert(rill_array_is_valid(rill_row_get(&row, 2), 0), "empty text is not null");
  cr_assert_eq(*(const int64_t*)rill_array_cell(rill_row_get(&row, 5), 0, &nb), 86400000000LL, "epoch seconds");
  cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
  rill_iter_free(it);
  rill_df_free(df);
  sqlite3_close(db);
}

Test(sqlite, bound_parameters) {
  sqlite3* db = mem_db();
  rill_error_t err = {0};
  rill_df_t* df = NULL;
  rill_sql_param_t p[] = {{.kind = RILL_SQL_INT64, .i = 42},
                          {.kind = RILL_SQL_DOUBLE, .d = 0.25},
                          {.kind = RILL_SQL_TEXT, .bytes = "h\"i", .size = -1},
                          {.kind = RILL_SQL_BLOB, .bytes = "\x01\x02\x03", .size = 3},
                          {.kind = RILL_SQL_NULL}};
  RT_OK(rill_df_from_sqlite_db(db, "SELECT ?1 AS a, ?2 AS b, ?3 AS c, ?4 AS d, ?5 AS e", p, 5, NULL, &df, &err), err);
  cr_assert_eq(rill_df_field(df, 0)->type.dtype, RILL_INT64);
  cr_assert_eq(rill_df_field(df, 1)->type.dtype, RILL_FLOAT64);
  cr_assert_eq(rill_df_field(df, 2)->type.dtype, RILL_STRING);
  cr_assert_eq(rill_df_field(df, 3)->type.dtype, RILL_BINARY);
  rill_iter_t* it;
  RT_OK(rill_iter_new(df, NULL, &it, &err), err);
  rill_row_t row;
  int64_t nb;
  cr_assert_eq(*(const int64_t*)rill_array_cell(next_cell(it, &row, 0), 0, &nb), 42);
  cr_assert_eq(*(const double*)rill_array_cell(rill_row_get(&row, 1), 0, &nb), 0.25);
  const char* s = rill_array_cell(rill_row_get(&row, 2), 0, &nb);
  cr_assert(nb == 3 && memcmp(s, "h\"i", 3) == 0);
  rill_array_cell(rill_row_get(&row, 3), 0, &nb);
  cr_assert_eq(nb, 3);
  cr_assert_not(rill_array_is_valid(rill_row_get(&row, 4), 0));
  rill_iter_free(it);
  rill_df_free(df);

  RT_OK(rill_df_from_sqlite_db(db, "SELECT s FROM t WHERE i > ?", p, 1, NULL, &df, &err), err);
  cr_assert_eq(rill_df_rows(df), 0);
  rill_df_free(df);
  RT_OK(rill_df_from_sqlite_db(db, "SELECT s FROM t WHERE i < ?", (rill_sql_param_t[]){{.kind = RILL_SQL_INT64, .i = 5}}, 1,
                               NULL, &df, &err), err);
  cr_assert_eq(rill_df_rows(df), 2);
  rill_df_free(df);
  RT_FAILS(rill_df_from_sqlite_db(db, "SELECT ?1, ?2", p, 1, NULL, &df, &err), RILL_EINVAL,
           "takes 2 parameters, 1 given", err);
  cr_assert_null(df);
  sqlite3_close(db);
}

Test(sqlite, sql_errors_carry_message_and_sql) {
  sqlite3* db = mem_db();
  rill_error_t err = {0};
  rill_df_t* df = NULL;
  RT_FAILS(rill_df_from_sqlite_db(db, "SELEC i FROM t", NULL, 0, NULL, &df, &err), RILL_ESQL, "syntax error", err);
  cr_assert(strstr(err.message, "SELEC i FROM t"), "%s", err.message);
  RT_FAILS(rill_df_from_sqlite_db(db, "SELECT * FROM missing_table", NULL, 0, NULL, &df, &err), RILL_ESQL,
           "no such table: missing_table", err);
  RT_FAILS(rill_df_from_sqlite_db(db, "missing_table", NULL, 0, NULL, &df, &err), RILL_ESQL,
           "no such table: missing_table", err);
  RT_FAILS(rill_df_from_sqlite_db(db, "SELECT nope FROM t", NULL, 0, NULL, &df, &err), RILL_ESQL,
           "no such column: nope", err);
  RT_FAILS(rill_df_from_sqlite_db(db, "", NULL, 0, NULL, &df, &err), RILL_EINVAL, "empty statement", err);
  RT_FAILS(rill_df_from_sqlite_db(NULL, "SELECT 1", NULL, 0, NULL, &df, &err), RILL_EINVAL, "db is required", err);
  rill_csv_column_t ov = {.name = "zz", .dtype = RILL_INT64};
  RT_FAILS(rill_df_from_sqlite_db(db, "SELECT 1 AS a", NULL, 0, &(rill_sqlite_opts_t){.columns = &ov, .ncolumns = 1}, &df,
                                  &err), RILL_EINVAL, "unknown column 'zz'", err);
  sqlite3_close(db);
}

Test(sqlite, conversion_errors_and_null_policy) {
  sqlite3* db = NULL;
  cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
  exec_sql(db, "CREATE TABLE v(n INTEGER); INSERT INTO v VALUES (1), ('abc'), (2.5), (3);");
  rill_error_t err = {0};
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_sqlite_db(db, "v", NULL, 0, NULL, &df, &err), err);
  rill_iter_t* it;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE, .prefetch = RILL_PREFETCH_NONE}, &it, &err), err);
  rill_row_t row;
  RT_OK(rill_iter_next(it, &row, &err), err);
  RT_FAILS(rill_iter_next(it, &row, &err), RILL_EFORMAT, "row 1, column 'n': cannot convert TEXT 'abc' to int64", err);
  RT_FAILS(rill_iter_next(it, &row, &err), RILL_EFORMAT, "row 2, column 'n': cannot convert REAL value to int64", err);
  RT_OK(rill_iter_next(it, &row, &err), err);
  int64_t nb;
  cr_assert_eq(*(const int64_t*)rill_array_cell(rill_row_get(&row, 0), 0, &nb), 3);
  rill_iter_free(it);
  rill_df_free(df);

  RT_OK(rill_df_from_sqlite_db(db, "SELECT n FROM v", NULL, 0, &(rill_sqlite_opts_t){.on_error = RILL_ON_ERROR_NULL,
                               .columns = &(rill_csv_column_t){.index = 0, .dtype = RILL_INT32}, .ncolumns = 1}, &df, &err), err);
  cr_assert_eq(rill_df_field(df, 0)->type.dtype, RILL_INT32);
  RT_OK(rill_iter_new(df, NULL, &it, &err), err);
  int nulls = 0, n = 0;
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    n++;
    nulls += !rill_array_is_valid(rill_row_get(&row, 0), 0);
  }
  cr_assert_eq(n, 4);
  cr_assert_eq(nulls, 2);
  rill_iter_free(it);
  rill_df_free(df);
  sqlite3_close(db);
}

/* A database file `name` in the test directory, made afresh by `sql`; its path in path. */
static void sql_file_db(char* path, size_t cap, const char* name, const char* sql) {
  snprintf(path, cap, "%s/%s", rt_tmpdir(), name);
  remove(path);
  sqlite3* db = NULL;
  cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
  exec_sql(db, sql);
  sqlite3_close(db);
}

static void make_file_db(const char* path, int rows, int gaps) {
  sqlite3* db = NULL;
  remove(path);
  cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
  exec_sql(db, "CREATE TABLE big(id INTEGER PRIMARY KEY, v INTEGER, name TEXT); BEGIN;");
  sqlite3_stmt* st;
  cr_assert_eq(sqlite3_prepare_v2(db, "INSERT INTO big VALUES (?, ?, ?)", -1, &st, NULL), SQLITE_OK);
  for (int i = 0; i < rows; i++) {
    char name[32];
    snprintf(name, sizeof name, "n%d", i);
    sqlite3_bind_int64(st, 1, gaps ? 10 + 3 * (int64_t)i : 1 + (int64_t)i);
    sqlite3_bind_int64(st, 2, (int64_t)i * 7);
    sqlite3_bind_text(st, 3, name, -1, SQLITE_TRANSIENT);
    cr_assert_eq(sqlite3_step(st), SQLITE_DONE);
    sqlite3_reset(st);
  }
  sqlite3_finalize(st);
  exec_sql(db, "COMMIT;");
  sqlite3_close(db);
}

static void check_table_read(const char* path, int rows, int threads) {
  rill_error_t err = {0};
  rill_df_t *df = NULL, *sh = NULL;
  RT_OK(rill_df_from_sqlite(path, "big", NULL, 0, NULL, &df, &err), err);
  cr_assert_eq(rill_df_rows(df), rows);
  RT_OK(rill_df_shuffle(df, 3, &sh, &err), err);
  rill_iter_t* it;
  RT_OK(rill_iter_new(sh, &(rill_iter_opts_t){.threads = threads, .prefetch = 8}, &it, &err), err);
  rill_row_t row;
  int64_t n = 0, sum = 0, nb;
  int64_t first = -1;
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    int64_t v = *(const int64_t*)rill_array_cell(rill_row_get(&row, 1), 0, &nb);
    const char* name = rill_array_cell(rill_row_get(&row, 2), 0, &nb);
    char want[32];
    int wn = snprintf(want, sizeof want, "n%lld", (long long)(v / 7));
    cr_assert(nb == wn && memcmp(name, want, (size_t)wn) == 0, "row %lld", (long long)row.index);
    if (first < 0) first = v / 7;
    sum += v / 7;
    n++;
  }
  cr_assert_eq(err.code, RILL_OK, "%s", err.message);
  cr_assert_eq(n, rows);
  cr_assert_eq(sum, (int64_t)rows * (rows - 1) / 2);
  cr_assert_neq(first, 0, "shuffled order");
  rill_iter_free(it);
  rill_df_free(sh);
  rill_df_free(df);
}

Test(sqlite, file_table_by_rowid_shuffled_threads) {
  char path[512];
  snprintf(path, sizeof path, "%s/big.db", rt_tmpdir());
  make_file_db(path, 5000, 0);
  check_table_read(path, 5000, 2);
  make_file_db(path, 3000, 1); /* rowids with gaps: the rowid list is used */
  check_table_read(path, 3000, 2);
  check_table_read(path, 3000, RILL_THREADS_NONE);
}

/* Rowids at both ends of the int64 range: their span overflows int64 (a damaged database found
 * it first), and the table is still read by rowid, in rowid order, with the rowid list. */
Test(sqlite, file_table_rowids_spanning_int64) {
  char path[512];
  sql_file_db(path, sizeof path, "span.db",
              "CREATE TABLE t(id INTEGER PRIMARY KEY, v INTEGER);"
              "INSERT INTO t VALUES (-9223372036854775808, 1), (-5083748366770348836, 2), (0, 3),"
              "(6536247900133305773, 4), (9223372036854775807, 5);");
  rill_error_t err = {0};
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_sqlite(path, "t", NULL, 0, NULL, &df, &err), err);
  cr_assert_eq(rill_df_rows(df), 5);
  rill_iter_t* it;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE}, &it, &err), err);
  rill_row_t row;
  int64_t n = 0, nb;
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    cr_assert_eq(*(const int64_t*)rill_array_cell(rill_row_get(&row, 0), 0, &nb), n == 0 ? INT64_MIN : n == 4 ? INT64_MAX
                                                                                   : n == 1 ? -5083748366770348836LL
                                                                                   : n == 2 ? 0 : 6536247900133305773LL);
    cr_assert_eq(*(const int64_t*)rill_array_cell(rill_row_get(&row, 1), 0, &nb), n + 1);
    n++;
  }
  cr_assert_eq(err.code, RILL_OK, "%s", err.message);
  cr_assert_eq(n, 5);
  rill_iter_free(it);
  rill_df_free(df);
  remove(path);
}

/* The descriptors of this process open on the file `path`; -1 when /proc cannot tell. */
static int fds_on(const char* path) {
  char want[PATH_MAX], got[PATH_MAX], link[300];
  DIR* d = realpath(path, want) ? opendir("/proc/self/fd") : NULL;
  if (!d) return -1;
  int n = 0;
  for (struct dirent* e; (e = readdir(d));) {
    if (e->d_name[0] == '.') continue;
    snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
    ssize_t k = readlink(link, got, sizeof got - 1);
    if (k > 0) got[k] = 0, n += strcmp(got, want) == 0;
  }
  closedir(d);
  return n;
}

/* Sums column v / 7 of table big over one pass in rowid order; -1 on an error. */
static int64_t sum_in_order(rill_df_t* df) {
  rill_error_t err = {0};
  rill_iter_t* it;
  if (rill_iter_new(df, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE}, &it, &err) != RILL_OK) return -1;
  rill_row_t row;
  int64_t sum = 0, nb;
  int r;
  while ((r = rill_iter_next(it, &row, &err)) == RILL_OK)
    sum += *(const int64_t*)rill_array_cell(rill_row_get(&row, 1), 0, &nb) / 7;
  rill_iter_free(it);
  return r == RILL_END ? sum : -1;
}

/* fork(): SQLite's connections must not be used across a fork, so the child never uses the
 * one the parent opened: it opens its own (one more descriptor on the file), reads every
 * row, and closes only its own when the dataframe is freed; the parent goes on with its
 * connection. */
Test(sqlite, a_forked_child_opens_its_own_connection) {
  char path[512];
  snprintf(path, sizeof path, "%s/forked.db", rt_tmpdir());
  make_file_db(path, 2000, 0);
  const int64_t all = 2000 * 1999 / 2;
  rill_error_t err = {0};
  rill_df_t* df;
  RT_OK(rill_df_from_sqlite(path, "big", NULL, 0, NULL, &df, &err), err);
  cr_assert_eq(sum_in_order(df), all);
  int parent_fds = fds_on(path);
  if (parent_fds < 0) cr_skip_test("/proc/self/fd cannot be read");
  cr_assert_eq(parent_fds, 1, "the parent's one connection");
  pid_t pid = rt_fork();
  if (pid == 0) {
    int code = 0;
    if (sum_in_order(df) != all) code = 2;
    if (!code && fds_on(path) != 2) code = 3; /* the parent's (left alone) and its own */
    if (!code && sum_in_order(df) != all) code = 4;
    if (!code && fds_on(path) != 2) code = 5; /* its own connection is reused */
    rill_df_free(df);
    if (!code && fds_on(path) != 1) code = 6; /* its own closed, the parent's not touched */
    _exit(code);
  }
  rt_child_passed(pid);
  cr_assert_eq(sum_in_order(df), all);
  cr_assert_eq(fds_on(path), 1);
  rill_df_free(df);
  cr_assert_eq(fds_on(path), 0);
  remove(path);
}

/* Cell r of column x of table w: text of (r * 37) % 300 bytes, NULL, an integer or a real. */
static int w_cell(int64_t r, char* buf) {
  if (r % 11 == 0) return -1;
  if (r % 13 == 0) return snprintf(buf, 64, "%lld", (long long)r * 1000);
  if (r % 17 == 0) return snprintf(buf, 64, "%.17g", (double)r + 0.5);
  int n = (int)((r * 37) % 300);
  memset(buf, 'a' + (int)(r % 26), (size_t)n);
  return n;
}

static void check_w_batches(const char* path, int64_t rows, int shuffled, int threads, int64_t hold) {
  rill_error_t err = {0};
  rill_df_t *df = NULL, *sh = NULL, *b = NULL;
  RT_OK(rill_df_from_sqlite(path, "w", NULL, 0, &(rill_sqlite_opts_t){.table_hold_bytes = hold}, &df, &err), err);
  cr_assert_eq(rill_df_field(df, 2)->type.dtype, RILL_STRING);
  if (shuffled) RT_OK(rill_df_shuffle(df, 5, &sh, &err), err);
  RT_OK(rill_df_batch(shuffled ? sh : df, (int[]){0, 1, 2}, 3, 100, NULL, &b, &err), err);
  rill_iter_t* it;
  RT_OK(rill_iter_new(b, &(rill_iter_opts_t){.threads = threads, .prefetch = 4}, &it, &err), err);
  rill_row_t row;
  int64_t seen = 0, sum = 0;
  char want[400];
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    const rill_array_t *id = rill_row_get(&row, 0), *v = rill_row_get(&row, 1), *x = rill_row_get(&row, 2);
    for (int64_t i = 0; i < id->length; i++) {
      int64_t r = ((const int64_t*)id->data)[i] - 1, nb;
      if (!shuffled) cr_assert_eq(r, seen, "sequential order");
      cr_assert_eq(((const int64_t*)v->data)[i], r * 7);
      int wn = w_cell(r, want);
      const char* got = rill_array_cell(x, i, &nb);
      if (wn < 0) {
        cr_assert_not(rill_array_is_valid(x, i), "row %lld is null", (long long)r);
        cr_assert_eq(nb, 0);
      } else {
        cr_assert(rill_array_is_valid(x, i));
        cr_assert(nb == wn && memcmp(got, want, (size_t)wn) == 0, "row %lld: %lld bytes, want %d", (long long)r,
                  (long long)nb, wn);
      }
      sum += r;
      seen++;
    }
  }
  cr_assert_eq(err.code, RILL_OK, "%s", err.message);
  cr_assert_eq(seen, rows);
  cr_assert_eq(sum, rows * (rows - 1) / 2);
  rill_iter_free(it);
  rill_df_free(b);
  rill_df_free(sh);
  rill_df_free(df);
}

Test(sqlite, table_batches_long_mixed_strings) {
  char path[512];
  snprintf(path, sizeof path, "%s/w.db", rt_tmpdir());
  sqlite3* db = NULL;
  cr_assert_eq(sqlite3_open(path, &db), SQLITE_OK);
  exec_sql(db, "CREATE TABLE w(id INTEGER PRIMARY KEY, v INTEGER, x); BEGIN;");
  sqlite3_stmt* st;
  cr_assert_eq(sqlite3_prepare_v2(db, "INSERT INTO w VALUES (?, ?, ?)", -1, &st, NULL), SQLITE_OK);
  const int64_t rows = 3000;
  char buf[400];
  for (int64_t r = 0; r < rows; r++) {
    sqlite3_bind_int64(st, 1, r + 1);
    sqlite3_bind_int64(st, 2, r * 7);
    int n = w_cell(r, buf);
    if (n < 0) sqlite3_bind_null(st, 3);
    else if (r % 13 == 0) sqlite3_bind_int64(st, 3, r * 1000);
    else if (r % 17 == 0) sqlite3_bind_double(st, 3, (double)r + 0.5);
    else sqlite3_bind_text(st, 3, buf, n, SQLITE_TRANSIENT);
    cr_assert_eq(sqlite3_step(st), SQLITE_DONE);
    sqlite3_reset(st);
  }
  sqlite3_finalize(st);
  exec_sql(db, "COMMIT;");
  sqlite3_close(db);
  /* consecutive rows: one range read converted as it is stepped (strings grow the buffer);
   * shuffled: the table held in memory (the default), point lookups in rowid order
   * scattered back into row order (never held), and a limit that the cells fit but the
   * strings pass (the load stops half-way and point lookups go on) */
  check_w_batches(path, rows, 0, RILL_THREADS_NONE, 0);
  check_w_batches(path, rows, 0, 2, 0);
  for (int threads = RILL_THREADS_NONE; threads <= 2; threads += 2 - RILL_THREADS_NONE) {
    check_w_batches(path, rows, 1, threads, 0);
    check_w_batches(path, rows, 1, threads, -1);
    check_w_batches(path, rows, 1, threads, 200000);
  }
}

/* One shuffled pass over table `big`, then (rows deleted by another connection in between)
 * a second pass over the same dataframe: served from the held copy it still sees every row;
 * read from the database it fails at a missing rowid. */
static void two_passes(const char* path, int64_t hold, int threads, int second_ok) {
  make_file_db(path, 2000, 1);
  rill_error_t err = {0};
  rill_df_t *df = NULL, *sh = NULL;
  RT_OK(rill_df_from_sqlite(path, "big", NULL, 0, &(rill_sqlite_opts_t){.table_hold_bytes = hold}, &df, &err), err);
  RT_OK(rill_df_shuffle(df, 9, &sh, &err), err);
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) {
      sqlite3* w = NULL;
      cr_assert_eq(sqlite3_open(path, &w), SQLITE_OK);
      exec_sql(w, "DELETE FROM big WHERE id % 2 = 0;");
      sqlite3_close(w);
    }
    rill_iter_t* it;
    RT_OK(rill_iter_new(sh, &(rill_iter_opts_t){.threads = threads, .prefetch = 4}, &it, &err), err);
    rill_row_t row;
    int64_t n = 0, sum = 0, nb;
    int rc;
    while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) {
      int64_t v = *(const int64_t*)rill_array_cell(rill_row_get(&row, 1), 0, &nb);
      const char* name = rill_array_cell(rill_row_get(&row, 2), 0, &nb);
      char want[32];
      int wn = snprintf(want, sizeof want, "n%lld", (long long)(v / 7));
      cr_assert(nb == wn && memcmp(name, want, (size_t)wn) == 0, "row %lld", (long long)row.index);
      sum += v / 7;
      n++;
    }
    if (pass == 0 || second_ok) {
      cr_assert_eq(rc, RILL_END, "pass %d: %s", pass, err.message);
      cr_assert_eq(n, 2000);
      cr_assert_eq(sum, 2000 * 1999 / 2);
    } else {
      cr_assert_eq(rc, RILL_ESQL, "pass %d: %d %s", pass, rc, err.message);
      cr_assert(strstr(err.message, "changed while read: rowid") != NULL, "%s", err.message);
    }
    rill_iter_free(it);
  }
  rill_df_free(sh);
  rill_df_free(df);
}

Test(sqlite, table_held_for_shuffled_reads_within_its_limit) {
  char path[512];
  snprintf(path, sizeof path, "%s/held.db", rt_tmpdir());
  two_passes(path, 0, 2, 1);                 /* default limit: held */
  two_passes(path, 0, RILL_THREADS_NONE, 1);
  two_passes(path, 1 << 20, 2, 1);           /* fits 1 MiB */
  two_passes(path, -1, 2, 0);                /* never held */
  two_passes(path, 1000, RILL_THREADS_NONE, 0); /* the cells alone pass the limit */
  two_passes(path, 70000, 2, 0);             /* the cells fit, the names do not */
}

/* A table of several held segments (65536 rows each): a uniform TEXT column (gathered
 * whole) and a mixed one (integers every 1000th row: converted row by row), strings crossing
 * the segments' byte buffers; every row arrives once with its own values. */
Test(sqlite, held_table_of_several_segments) {
  char path[512];
  sql_file_db(path, sizeof path, "segments.db",
              "CREATE TABLE g(id INTEGER PRIMARY KEY, name TEXT, m);"
              "WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE x < 139999) "
              "INSERT INTO g SELECT x + 1, 'n' || x, CASE WHEN x % 1000 = 0 THEN x ELSE 'm' || x END FROM c;");
  const int64_t rows = 140000;
  for (int64_t hold = -1; hold <= 0; hold++) {
    rill_error_t err = {0};
    rill_df_t *df = NULL, *sh = NULL, *b = NULL;
    RT_OK(rill_df_from_sqlite(path, "g", NULL, 0, &(rill_sqlite_opts_t){.table_hold_bytes = hold}, &df, &err), err);
    cr_assert_eq(rill_df_field(df, 2)->type.dtype, RILL_STRING);
    RT_OK(rill_df_shuffle(df, 11, &sh, &err), err);
    RT_OK(rill_df_batch(sh, (int[]){0, 1, 2}, 3, 500, NULL, &b, &err), err);
    rill_iter_t* it;
    RT_OK(rill_iter_new(b, &(rill_iter_opts_t){.threads = 2, .prefetch = 4}, &it, &err), err);
    rill_row_t row;
    uint8_t* seen = calloc((size_t)rows, 1);
    int64_t n = 0;
    while (rill_iter_next(it, &row, &err) == RILL_OK) {
      const rill_array_t *id = rill_row_get(&row, 0), *name = rill_row_get(&row, 1), *m = rill_row_get(&row, 2);
      for (int64_t i = 0; i < id->length; i++) {
        int64_t x = ((const int64_t*)id->data)[i] - 1, nb;
        cr_assert(x >= 0 && x < rows && !seen[x]);
        seen[x] = 1;
        char want[32];
        int wn = snprintf(want, sizeof want, "n%lld", (long long)x);
        const char* got = rill_array_cell(name, i, &nb);
        cr_assert(nb == wn && memcmp(got, want, (size_t)wn) == 0, "row %lld name", (long long)x);
        wn = x % 1000 ? snprintf(want, sizeof want, "m%lld", (long long)x) : snprintf(want, sizeof want, "%lld", (long long)x);
        got = rill_array_cell(m, i, &nb);
        cr_assert(nb == wn && memcmp(got, want, (size_t)wn) == 0, "row %lld m", (long long)x);
        n++;
      }
    }
    cr_assert_eq(err.code, RILL_OK, "%s", err.message);
    cr_assert_eq(n, rows);
    free(seen);
    rill_iter_free(it);
    rill_df_free(b);
    rill_df_free(sh);
    rill_df_free(df);
  }
}

/* An allocator that refuses blocks of one size range: the held copy's records (2000 rows of
 * 32 bytes) or a segment's first bytes (65536), asked for with rill's 64 bytes more. */
static size_t refuse_lo, refuse_hi; /* set while no rill thread runs */
static void* refusing_alloc(size_t size, size_t align, void* ctx) {
  (void)ctx;
  if (size >= refuse_lo && size <= refuse_hi) return NULL;
  return rt_sys_alloc(size, align);
}

/* Out of memory while holding the table is no error: the reads keep to point lookups (the
 * second pass then meets the deleted rows). */
Test(sqlite, held_table_out_of_memory_keeps_point_lookups) {
  char path[512];
  snprintf(path, sizeof path, "%s/oom.db", rt_tmpdir());
  const size_t ranges[2][2] = {{64000, 64000 + 64}, {65536, 65536 + 64}};
  for (int i = 0; i < 2; i++) {
    refuse_lo = ranges[i][0];
    refuse_hi = ranges[i][1];
    rill_set_allocator(&(rill_allocator_t){refusing_alloc, rt_sys_free, NULL});
    two_passes(path, 0, 2, 0);
    rill_set_allocator(NULL);
  }
}

/* Rows deleted between opening and the first out-of-order read: the load finds rowids that
 * no longer match, and the point lookups that follow report the first missing one. */
Test(sqlite, table_changed_before_held_reports_missing_rowid) {
  char path[512];
  snprintf(path, sizeof path, "%s/changed.db", rt_tmpdir());
  make_file_db(path, 1000, 0);
  rill_error_t err = {0};
  rill_df_t *df = NULL, *sh = NULL;
  RT_OK(rill_df_from_sqlite(path, "big", NULL, 0, NULL, &df, &err), err);
  sqlite3* w = NULL;
  cr_assert_eq(sqlite3_open(path, &w), SQLITE_OK);
  exec_sql(w, "DELETE FROM big WHERE id > 500;");
  sqlite3_close(w);
  RT_OK(rill_df_shuffle(df, 2, &sh, &err), err);
  rill_iter_t* it;
  RT_OK(rill_iter_new(sh, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE}, &it, &err), err);
  rill_row_t row;
  int rc;
  while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) {}
  cr_assert_eq(rc, RILL_ESQL, "%d %s", rc, err.message);
  cr_assert(strstr(err.message, "changed while read: rowid") != NULL, "%s", err.message);
  rill_iter_free(it);
  rill_df_free(sh);
  rill_df_free(df);
}

/* Held or not, a value that does not convert fails at its own row (or becomes null); mixed
 * columns convert cell by cell from the held copy, uniform ones are gathered whole. */
Test(sqlite, held_table_conversion_errors_keep_their_row) {
  sqlite3* db = db_of("CREATE TABLE v(n INTEGER, r REAL, s TEXT, b BLOB);" THOUSAND
                      "INSERT INTO v SELECT x, x * 0.5, 's' || x, x'00ff' FROM c;"
                      "UPDATE v SET n = 'abc' WHERE rowid = 701;"); /* row 700 */
  for (int64_t hold = -1; hold <= 0; hold++) {
    for (int policy = 0; policy < 2; policy++) {
      rill_error_t err = {0};
      rill_df_t *df = NULL, *sh = NULL;
      rill_sqlite_opts_t o = {.table_hold_bytes = hold, .on_error = policy ? RILL_ON_ERROR_NULL : RILL_ON_ERROR_RAISE};
      RT_OK(rill_df_from_sqlite_db(db, "v", NULL, 0, &o, &df, &err), err);
      RT_OK(rill_df_shuffle(df, 4, &sh, &err), err);
      rill_iter_t* it;
      RT_OK(rill_iter_new(sh, &(rill_iter_opts_t){.threads = 2}, &it, &err), err);
      rill_row_t row;
      int rc;
      int64_t n = 0, nulls = 0, nb;
      while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) {
        const rill_array_t* a = rill_row_get(&row, 0);
        int64_t x = (int64_t)(*(const double*)rill_array_cell(rill_row_get(&row, 1), 0, &nb) * 2);
        const char* s = rill_array_cell(rill_row_get(&row, 2), 0, &nb);
        char want[16];
        int wn = snprintf(want, sizeof want, "s%lld", (long long)x);
        cr_assert(nb == wn && memcmp(s, want, (size_t)wn) == 0);
        const uint8_t* b = rill_array_cell(rill_row_get(&row, 3), 0, &nb);
        cr_assert(nb == 2 && b[0] == 0 && b[1] == 0xff);
        if (!rill_array_is_valid(a, 0)) {
          nulls++;
          cr_assert_eq(x, 700);
        } else {
          cr_assert_eq(*(const int64_t*)rill_array_cell(a, 0, &nb), x);
        }
        n++;
      }
      if (policy) {
        cr_assert_eq(rc, RILL_END, "%s", err.message);
        cr_assert_eq(n, 1000);
        cr_assert_eq(nulls, 1);
      } else {
        cr_assert_eq(rc, RILL_EFORMAT, "hold %lld: %d %s", (long long)hold, rc, err.message);
        cr_assert(strstr(err.message, "row 700, column 'n': cannot convert TEXT 'abc' to int64") != NULL, "%s",
                  err.message);
      }
      rill_iter_free(it);
      rill_df_free(sh);
      rill_df_free(df);
    }
  }
  sqlite3_close(db);
}

/* STRING cells hold UTF-8: a TEXT (or BLOB) value of other bytes fails its row (RAISE, with
 * row, column and the SQL), drops it (SKIP) or is null (NULL); the same whether the table is
 * read by rowid, held in memory (where a column of TEXT values only is otherwise copied
 * straight) or read through a query; read as BINARY its bytes pass as they are, whatever the
 * encoding option. */
Test(sqlite, text_that_is_not_utf8) {
  sqlite3* db = db_of("CREATE TABLE v(id INTEGER, s TEXT, u TEXT);" THOUSAND
                      "INSERT INTO v SELECT x, 's' || x, 'ok' FROM c;"
                      "UPDATE v SET s = CAST(x'636166e9' AS TEXT) WHERE id = 300;"   /* Latin-1 'cafe' + accent */
                      "UPDATE v SET s = CAST(x'c3a9e282ac' AS TEXT) WHERE id = 301;" /* UTF-8 */
                      "UPDATE v SET u = x'ff' WHERE id = 500;");                      /* a BLOB in a TEXT column */
  const char* sources[] = {"v", "SELECT id, s, u FROM v ORDER BY id"};
  for (int src = 0; src < 2; src++)
    for (int64_t hold = -1; hold <= 0; hold++) {
      if (src == 1 && hold == 0) continue; /* a query is never held */
      rill_error_t err = {0};
      rill_df_t* df = NULL;
      rill_iter_t* it;
      rill_row_t row;
      int64_t n = 0, nb;
      /* RAISE: each bad row fails in its turn, the others come through */
      RT_OK(rill_df_from_sqlite_db(db, sources[src], NULL, 0, &(rill_sqlite_opts_t){.table_hold_bytes = hold}, &df, &err), err);
      cr_assert_eq(rill_df_field(df, 1)->type.dtype, RILL_STRING);
      RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = 2}, &it, &err), err);
      int rc, errors = 0;
      while ((rc = rill_iter_next(it, &row, &err)) != RILL_END) {
        if (rc == RILL_OK) {
          n++;
          continue;
        }
        cr_assert_eq(rc, RILL_EFORMAT);
        cr_assert(strstr(err.message, errors == 0 ? "row 300, column 's': TEXT that is not UTF-8 text (byte 0xE9 at byte 3; for "
                                                    "another encoding see the encoding option, or read the column as "
                                                    "binary) (SQL: "
                                                  : "row 500, column 'u': BLOB that is not UTF-8 text (byte 0xFF at byte 0"),
                  "source %d, hold %lld: %s", src, (long long)hold, err.message);
        errors++;
      }
      cr_assert(errors == 2 && n == 998, "source %d, hold %lld: %d errors, %lld rows", src, (long long)hold, errors,
                (long long)n);
      rill_iter_free(it);
      rill_df_free(df);
      /* NULL and SKIP, shuffled */
      for (int policy = 0; policy < 2; policy++) {
        rill_df_t* sh = NULL;
        RT_OK(rill_df_from_sqlite_db(db, sources[src], NULL, 0, &(rill_sqlite_opts_t){.table_hold_bytes = hold,
                                     .on_error = policy ? RILL_ON_ERROR_SKIP : RILL_ON_ERROR_NULL}, &df, &err), err);
        RT_OK(rill_df_shuffle(df, 9, &sh, &err), err);
        RT_OK(rill_iter_new(sh, &(rill_iter_opts_t){.threads = 2}, &it, &err), err);
        int64_t nulls = 0;
        n = 0;
        while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) {
          int64_t id = *(const int64_t*)rill_array_cell(rill_row_get(&row, 0), 0, &nb);
          const rill_array_t* a = rill_row_get(&row, 1);
          const char* txt = rill_array_cell(a, 0, &nb);
          if (id == 300) {
            cr_assert(!rill_array_is_valid(a, 0) && nb == 0, "an empty null cell");
            nulls++;
          } else if (id == 301) {
            cr_assert(nb == 5 && !memcmp(txt, "\xc3\xa9\xe2\x82\xac", 5));
          } else {
            char want[16];
            int wn = snprintf(want, sizeof want, "s%lld", (long long)id);
            cr_assert(nb == wn && !memcmp(txt, want, (size_t)wn), "id %lld", (long long)id);
          }
          nulls += !rill_array_is_valid(rill_row_get(&row, 2), 0);
          n++;
        }
        cr_assert_eq(rc, RILL_END, "%s", err.message);
        cr_assert(policy ? (n == 998 && nulls == 0) : (n == 1000 && nulls == 2), "policy %d: %lld rows, %lld nulls",
                  policy, (long long)n, (long long)nulls);
        rill_iter_free(it);
        rill_df_free(sh);
        rill_df_free(df);
      }
    }
  /* as BINARY: the bytes as they are, whatever the encoding option says */
  for (int e = 0; e <= RILL_CSV_LATIN1; e++) {
    rill_error_t err = {0};
    rill_df_t* df = NULL;
    RT_OK(rill_df_from_sqlite_db(db, "SELECT s FROM v WHERE id = 300", NULL, 0,
                                 &(rill_sqlite_opts_t){.columns = &(rill_csv_column_t){.index = 0, .dtype = RILL_BINARY},
                                                       .ncolumns = 1, .encoding = (rill_csv_encoding_t)e},
                                 &df, &err),
          err);
    rill_iter_t* it;
    rill_row_t row;
    RT_OK(rill_iter_new(df, NULL, &it, &err), err);
    RT_OK(rill_iter_next(it, &row, &err), err);
    int64_t nb;
    const char* b = rill_array_cell(rill_row_get(&row, 0), 0, &nb);
    cr_assert(nb == 4 && !memcmp(b, "caf\xe9", 4), "encoding %d", e);
    rill_iter_free(it);
    rill_df_free(df);
  }
  sqlite3_close(db);
}

/* The encoding option: TEXT and BLOB bytes read into STRING cells as Latin-1 or as UTF-8 with
 * ill-formed parts replaced by U+FFFD, whether the table is read by rowid, held in memory
 * (where a column of TEXT values is otherwise copied straight: here it must not be) or read
 * through a query; column names too (BINARY cells keep the bytes: text_that_is_not_utf8). */
Test(sqlite, text_of_another_encoding) {
  sqlite3* db = db_of("CREATE TABLE v(id INTEGER, s TEXT, u TEXT, t TEXT);" THOUSAND
                      "INSERT INTO v SELECT x, 's' || x, 'ok', 'ok' FROM c;"
                      "UPDATE v SET t = CAST(x'c3a9' AS TEXT) WHERE id = 302;"       /* UTF-8, all TEXT */
                      "UPDATE v SET s = CAST(x'636166e9' AS TEXT) WHERE id = 300;"   /* Latin-1 'cafe' + accent */
                      "UPDATE v SET s = CAST(x'c3a9e282ac' AS TEXT) WHERE id = 301;" /* UTF-8 */
                      "UPDATE v SET u = x'ff' WHERE id = 500;"                        /* a BLOB in a TEXT column */
                      "CREATE TABLE w(\"caf\xe9\" TEXT, \"\xc3\xa9\" TEXT);"
                      "INSERT INTO w VALUES ('a', 'b');");
  static const struct {
    rill_csv_encoding_t enc;
    const char *s300, *s301, *u500, *t302, *name0, *name1;
  } want[] = {
      {RILL_CSV_LATIN1, "caf\xc3\xa9", "\xc3\x83\xc2\xa9\xc3\xa2\xc2\x82\xc2\xac", "\xc3\xbf", "\xc3\x83\xc2\xa9", "caf\xc3\xa9",
       "\xc3\x83\xc2\xa9"},
      {RILL_CSV_UTF8_LOSSY, "caf\xef\xbf\xbd", "\xc3\xa9\xe2\x82\xac", "\xef\xbf\xbd", "\xc3\xa9", "caf\xef\xbf\xbd",
       "\xc3\xa9"},
  };
  const char* sources[] = {"v", "SELECT id, s, u, t FROM v ORDER BY id"};
  for (int e = 0; e < 2; e++)
    for (int src = 0; src < 2; src++)
      for (int64_t hold = -1; hold <= 0; hold++) {
        if (src == 1 && hold == 0) continue;
        rill_error_t err = {0};
        rill_df_t *df = NULL, *sh = NULL;
        rill_iter_t* it;
        rill_row_t row;
        int64_t nb, n = 0;
        RT_OK(rill_df_from_sqlite_db(db, sources[src], NULL, 0,
                                     &(rill_sqlite_opts_t){.table_hold_bytes = hold, .encoding = want[e].enc}, &df, &err),
              err);
        RT_OK(rill_df_shuffle(df, 5, &sh, &err), err); /* out of order: the table gets held (hold 0) */
        for (int pass = 0; pass < 2; pass++) {
          RT_OK(rill_iter_new(sh, &(rill_iter_opts_t){.threads = 2, .epoch = pass}, &it, &err), err);
          int rc;
          while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) {
            int64_t id = *(const int64_t*)rill_array_cell(rill_row_get(&row, 0), 0, &nb);
            const char* s = rill_array_cell(rill_row_get(&row, 1), 0, &nb);
            char buf[16];
            const char* w = id == 300 ? want[e].s300 : id == 301 ? want[e].s301 : buf;
            if (w == buf) snprintf(buf, sizeof buf, "s%lld", (long long)id);
            cr_assert(nb == (int64_t)strlen(w) && !memcmp(s, w, (size_t)nb), "enc %d, source %d, hold %lld, id %lld: %.*s",
                      e, src, (long long)hold, (long long)id, (int)nb, s);
            const char* u = rill_array_cell(rill_row_get(&row, 2), 0, &nb);
            w = id == 500 ? want[e].u500 : "ok";
            cr_assert(nb == (int64_t)strlen(w) && !memcmp(u, w, (size_t)nb), "enc %d, id %lld", e, (long long)id);
            const char* tt = rill_array_cell(rill_row_get(&row, 3), 0, &nb);
            w = id == 302 ? want[e].t302 : "ok";
            cr_assert(nb == (int64_t)strlen(w) && !memcmp(tt, w, (size_t)nb), "enc %d, source %d, hold %lld, id %lld: %.*s",
                      e, src, (long long)hold, (long long)id, (int)nb, tt);
            n++;
          }
          cr_assert_eq(rc, RILL_END, "%s", err.message);
          rill_iter_free(it);
        }
        cr_assert_eq(n, 2000);
        rill_df_free(sh);
        rill_df_free(df);
      }
  /* column names */
  for (int e = 0; e < 2; e++) {
    rill_error_t err = {0};
    rill_df_t* df = NULL;
    RT_OK(rill_df_from_sqlite_db(db, "w", NULL, 0, &(rill_sqlite_opts_t){.encoding = want[e].enc}, &df, &err), err);
    cr_assert_str_eq(rill_df_field(df, 0)->name, want[e].name0);
    cr_assert_str_eq(rill_df_field(df, 1)->name, want[e].name1);
    rill_df_free(df);
  }
  rill_error_t err = {0};
  rill_df_t* df = NULL;
  cr_assert_eq(rill_df_from_sqlite_db(db, "SELECT * FROM w", NULL, 0, NULL, &df, &err), RILL_EFORMAT);
  cr_assert_str_eq(err.message, "sqlite: the name of column 1 is not UTF-8 text (byte 0xE9 at byte 3; see the "
                                "encoding option) (SQL: SELECT * FROM w)");
  cr_assert_null(df);
  cr_assert_eq(rill_df_from_sqlite_db(db, "w", NULL, 0, &(rill_sqlite_opts_t){.encoding = 3}, &df, &err), RILL_EINVAL);
  cr_assert_str_eq(err.message, "sqlite: unknown encoding 3");
  sqlite3_close(db);
}

/* Empty TEXT and BLOB values (SQLite gives no pointer for an empty BLOB, and a query's rows
 * whose values are all empty hold no bytes): empty strings in STRING columns, a value that
 * does not convert in an INT column, whichever way the rows are read. */
Test(sqlite, empty_text_and_blob_values) {
  sqlite3* db = db_of("CREATE TABLE e(n INT, s TEXT);"
                      "INSERT INTO e VALUES (1, ''), (2, x''), ('', ''), (x'', x'');");
  const char* sources[] = {"e", "SELECT n, s FROM e"};
  for (int src = 0; src < 2; src++) {
    rill_error_t err = {0};
    rill_df_t* df = NULL;
    RT_OK(rill_df_from_sqlite_db(db, sources[src], NULL, 0, &(rill_sqlite_opts_t){.on_error = RILL_ON_ERROR_NULL}, &df,
                                 &err),
          err);
    cr_assert_eq(rill_df_field(df, 0)->type.dtype, RILL_INT64);
    cr_assert_eq(rill_df_field(df, 1)->type.dtype, RILL_STRING);
    rill_iter_t* it;
    RT_OK(rill_iter_new(df, NULL, &it, &err), err);
    rill_row_t row;
    for (int i = 0; i < 4; i++) {
      RT_OK(rill_iter_next(it, &row, &err), err);
      const rill_array_t* n = rill_row_get(&row, 0);
      int64_t nb;
      cr_assert_eq(rill_array_is_valid(n, 0), i < 2, "source %d row %d", src, i);
      if (i < 2) cr_assert_eq(*(const int64_t*)rill_array_cell(n, 0, &nb), i + 1);
      const rill_array_t* t = rill_row_get(&row, 1);
      rill_array_cell(t, 0, &nb);
      cr_assert(rill_array_is_valid(t, 0) && nb == 0, "source %d row %d", src, i);
    }
    cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
    rill_iter_free(it);
    rill_df_free(df);
    /* RAISE names the value */
    RT_OK(rill_df_from_sqlite_db(db, sources[src], NULL, 0, NULL, &df, &err), err);
    RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE, .prefetch = RILL_PREFETCH_NONE}, &it, &err),
          err);
    int rc;
    while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) {}
    cr_assert_eq(rc, RILL_EFORMAT);
    cr_assert(strstr(err.message, "row 2, column 'n': cannot convert TEXT '' to int64"), "%s", err.message);
    rill_iter_free(it);
    rill_df_free(df);
  }
  sqlite3_close(db);
}

Test(sqlite, query_materialised_in_chunks) {
  char path[512];
  snprintf(path, sizeof path, "%s/q.db", rt_tmpdir());
  make_file_db(path, 1000, 0);
  rill_error_t err = {0};
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_sqlite(path, "SELECT v, name FROM big WHERE v % 2 = ?", (rill_sql_param_t[]){{.kind = RILL_SQL_INT64}},
                            1, &(rill_sqlite_opts_t){.chunk_rows = 33}, &df, &err), err);
  cr_assert_eq(rill_df_rows(df), 500);
  rill_iter_t* it;
  RT_OK(rill_iter_new(df, NULL, &it, &err), err);
  rill_row_t row;
  int64_t n = 0, nb;
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    cr_assert_eq(*(const int64_t*)rill_array_cell(rill_row_get(&row, 0), 0, &nb), n * 14);
    n++;
  }
  cr_assert_eq(n, 500);
  rill_iter_free(it);
  rill_df_free(df);
}

Test(sqlite, missing_locked_and_bad_files) {
  rill_error_t err = {0};
  rill_df_t* df = NULL;
  RT_FAILS(rill_df_from_sqlite("/nonexistent/dir/x.db", "SELECT 1", NULL, 0, NULL, &df, &err), RILL_EIO,
           "/nonexistent/dir/x.db: cannot open database: unable to open database file", err);
  char path[512];
  snprintf(path, sizeof path, "%s/locked.db", rt_tmpdir());
  make_file_db(path, 10, 0);
  sqlite3* w = NULL;
  cr_assert_eq(sqlite3_open(path, &w), SQLITE_OK);
  exec_sql(w, "BEGIN EXCLUSIVE; INSERT INTO big VALUES (100, 1, 'x');");
  RT_FAILS(rill_df_from_sqlite(path, "SELECT * FROM big", NULL, 0, NULL, &df, &err), RILL_ESQL, "database is locked", err);
  cr_assert(strstr(err.message, "locked.db"), "%s", err.message);
  exec_sql(w, "ROLLBACK;");
  sqlite3_close(w);
  RT_OK(rill_df_from_sqlite(path, "SELECT * FROM big", NULL, 0, NULL, &df, &err), err);
  cr_assert_eq(rill_df_rows(df), 10);
  rill_df_free(df);

  char bad[512];
  snprintf(bad, sizeof bad, "%s/notadb.db", rt_tmpdir());
  FILE* f = fopen(bad, "w");
  fputs("this is not a database file, just text that is long enough to have a header........", f);
  fclose(f);
  RT_FAILS(rill_df_from_sqlite(bad, "SELECT 1 FROM x", NULL, 0, NULL, &df, &err), RILL_ESQL, "file is not a database", err);
}

Test(sqlite, memory_path_single_connection) {
  rill_error_t err = {0};
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_sqlite(":memory:", "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100) "
                            "SELECT x, x * 0.5 AS half FROM c", NULL, 0, NULL, &df, &err), err);
  cr_assert_eq(rill_df_rows(df), 100);
  cr_assert_eq(rill_df_field(df, 1)->type.dtype, RILL_FLOAT64);
  rill_iter_t* it;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = 2}, &it, &err), err);
  rill_row_t row;
  double sum = 0;
  int64_t nb;
  while (rill_iter_next(it, &row, &err) == RILL_OK) sum += *(const double*)rill_array_cell(rill_row_get(&row, 1), 0, &nb);
  cr_assert_eq(sum, 2525.0);
  rill_df_t* dup = NULL;
  RT_OK(rill_df_from_sqlite(":memory:", "SELECT 1 AS x, 2 AS x", NULL, 0, NULL, &dup, &err), err);
  cr_assert_str_eq(rill_df_field(dup, 1)->name, "x:1");
  rill_df_free(dup);
  rill_iter_free(it);
  rill_df_free(df);
}

/* Null cells are zero bytes even in reused batch buffers; cells nulled under on_error NULL
 * are counted. */
Test(sqlite, null_cells_are_zero_and_counted) {
  sqlite3* db = NULL;
  cr_assert_eq(sqlite3_open(":memory:", &db), SQLITE_OK);
  exec_sql(db, "CREATE TABLE n(v INTEGER, w INTEGER);"
               "INSERT INTO n VALUES (1, 1), (2, 2), (3, 3), (NULL, 'oops');");
  rill_error_t err = {0};
  rill_df_t *df = NULL, *b = NULL;
  RT_OK(rill_df_from_sqlite_db(db, "SELECT v, w FROM n ORDER BY rowid", NULL, 0,
                               &(rill_sqlite_opts_t){.on_error = RILL_ON_ERROR_NULL}, &df, &err),
        err);
  rill_row_t row;
  rill_iter_t* it = rt_second_batch_of_two(df, &b, &row); /* reuses the first batch's buffers */
  for (int c = 0; c < 2; c++) {
    const rill_array_t* a = rill_row_get(&row, c);
    cr_assert(!rill_array_is_valid(a, 1));
    cr_assert_eq(((const int64_t*)a->data)[1], 0, "column %d: null cell holds %lld", c,
                 (long long)((const int64_t*)a->data)[1]);
  }
  rill_iter_stats_t st;
  rill_iter_stats(it, &st);
  cr_assert_eq(st.nulled, 1, "nulled %lld", (long long)st.nulled); /* 'oops'; NULL is a plain null */
  rill_iter_free(it);
  rill_df_free(b);
  rill_df_free(df);
  sqlite3_close(db);
}

#else

Test(sqlite, not_built) {
  rill_error_t err = {0};
  rill_df_t* df = NULL;
  RT_FAILS(rill_df_from_sqlite(":memory:", "SELECT 1", NULL, 0, NULL, &df, &err), RILL_ENOTSUP, "libsqlite3", err);
  RT_FAILS(rill_df_from_sqlite_db(NULL, "SELECT 1", NULL, 0, NULL, &df, &err), RILL_ENOTSUP, "libsqlite3", err);
}

#endif
