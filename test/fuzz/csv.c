/* libFuzzer target: the CSV source must never crash on any input, its text cells must be
 * UTF-8 (and the vector UTF-8 check agree with the automaton on the input's bytes), the
 * parallel index must agree with the sequential one, the bitmask chunk scan (every SIMD level) with the state
 * machine, and the mask record splits (every level) with the byte loop. The first byte picks
 * the options, the input's size the encoding, whether fields are trimmed, '#' lines comments,
 * '\\' an escape character, "", "0", "NA" null values, ',' the decimal separator and the lines
 * skipped at the start (0, 1 or 2), and whether compressed input's text goes through a
 * temporary file. The two reads, concatenated and shuffled, give the same
 * rows, and so does the input written to a file and opened twice with one file mapped at once. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rill.h"
#include "rill_addons.h"
#include "csv_internal.h"
#include "rows.h"
#include "text.h"

/* The hash of cell i of every column (fuzz_check_row's, for a batch). */
static uint64_t cell_hash(const rill_row_t* row, int64_t i) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int c = 0; c < row->ncolumns; c++) {
    const rill_array_t* a = rill_row_get(row, c);
    int64_t nb = 0;
    const uint8_t* p = rill_array_cell(a, i, &nb);
    int valid = rill_array_is_valid(a, i);
    h = fuzz_mix(h, &valid, sizeof valid);
    if (valid) h = fuzz_mix(h, p, (size_t)nb);
  }
  return h;
}

/* Reads every row of df (one at a time), checking each; returns the sum of the rows' hashes (a
 * digest that does not depend on their order), the rows read in *n and the failed ones in
 * *failed. */
static uint64_t touch_all(rill_df_t* df, int64_t* n, int64_t* failed) {
  rill_error_t err = {0};
  rill_iter_t* it = NULL;
  uint64_t sum = 0;
  *n = *failed = 0;
  if (rill_iter_new(df, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE, .prefetch = RILL_PREFETCH_NONE}, &it, &err) !=
      RILL_OK)
    abort();
  rill_row_t row;
  int rc;
  while ((rc = rill_iter_next(it, &row, &err)) != RILL_END) {
    if (rc != RILL_OK) {
      if (err.message[0] == 0) abort(); /* every error has a message */
      ++*failed;
      continue;
    }
    sum += fuzz_check_row(&row);
    ++*n;
  }
  rill_iter_free(it);
  return sum;
}

/* The two dataframes read as one (rill_df_concat), shuffled and in batches of 7 (calls whose
 * rows lie in both parts): the same rows as each read alone. */
static void same_concat(rill_df_t* a, rill_df_t* b, uint64_t want, int64_t nwant) {
  rill_error_t err = {0};
  rill_df_t *cat = NULL, *sh = NULL, *bt = NULL;
  if (rill_df_concat((rill_df_t* const[]){a, b}, 2, &cat, &err) != RILL_OK) abort();
  if (rill_df_shuffle(cat, 1, &sh, &err) != RILL_OK) abort();
  int nc = rill_df_ncolumns(cat), cols[nc];
  for (int c = 0; c < nc; c++) cols[c] = c;
  if (rill_df_batch(sh, cols, nc, 7, NULL, &bt, &err) != RILL_OK) abort();
  rill_iter_t* it = NULL;
  if (rill_iter_new(bt, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE}, &it, &err) != RILL_OK) abort();
  rill_row_t row;
  uint64_t sum = 0;
  int64_t n = 0;
  int rc;
  while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) {
    int64_t len = rill_row_get(&row, 0)->length;
    for (int64_t i = 0; i < len; i++) sum += cell_hash(&row, i);
    n += len;
  }
  if (rc != RILL_END || sum != want || n != nwant) abort();
  rill_iter_free(it);
  rill_df_free(bt);
  rill_df_free(sh);
  rill_df_free(cat);
}

static void free_spec(rill__csv_spec_t* s) {
  rill__free(s->starts.v);
  rill__free(s->starts.far.v);
  rill__free(s->bad.v);
}

static void same_scan(const char* d, int64_t n, const rill__csv_dialect_t* x) {
  rill__csv_spec_t ref = {0};
  rill__csv_scan_chunk_generic(d, 0, n, 0, x, 3, &ref, NULL);
  for (int level = 0; level <= 2; level++) {
    rill__csv_spec_t s = {0};
    if (rill__csv_scan_chunk_masks(d, 0, n, x, 3, &s, level)) {
      if (s.rc != ref.rc || s.starts.n != ref.starts.n || s.bad.n != ref.bad.n || s.end_in_quotes != ref.end_in_quotes ||
          s.tail_start != ref.tail_start || s.tail_nf != ref.tail_nf)
        abort();
      for (int64_t k = 0; k < s.starts.n; k++)
        if (rill__csv_rows_at(&s.starts, k) != rill__csv_rows_at(&ref.starts, k)) abort();
      for (int64_t k = 0; k < s.bad.n; k++)
        if (s.bad.v[k] != ref.bad.v[k]) abort();
    }
    free_spec(&s);
  }
  free_spec(&ref);
}

/* Records split from position 0 and after each of the first line breaks, at every SIMD level,
 * give the byte loop's counts and spans (at most 4 kept a record). */
static void same_split(const char* d, int64_t n, const rill__csv_dialect_t* x) {
  enum { ROWS = 64, MAXF = 4 };
  if (n <= 0) return;
  int64_t rows[ROWS], nr = 0;
  uint32_t off[ROWS];
  for (int64_t i = 0; i < n && nr < ROWS; i++)
    if (i == 0 || d[i - 1] == '\n') {
      rows[nr] = nr;
      off[nr++] = (uint32_t)i;
    }
  rill__csv_t c = {.data = d, .size = n, .dia = *x, .blocks = &(rill__csv_block_t){0, off}};
  int64_t sp[3][ROWS * 2 * MAXF], nf[3][ROWS];
  for (int level = 0; level <= 2; level++) {
    memset(sp[level], 0, sizeof sp[level]);
    rill__csv_split_rows(&c, rows, nr, sp[level], 2 * MAXF, MAXF, nf[level], level);
  }
  for (int level = 1; level <= 2; level++)
    if (memcmp(nf[level], nf[0], (size_t)nr * sizeof **nf) != 0 || memcmp(sp[level], sp[0], sizeof sp[0]) != 0) abort();
}

/* The input as a file, opened twice with one CSV file mapped at once (each part a call reads
 * is mapped again, from its descriptor or, without one, by its path): concatenated, shuffled
 * and batched, the same rows as the buffer's. */
static void same_from_files(const uint8_t* data, size_t size, const rill_csv_opts_t* o, uint64_t want, int64_t nwant) {
  char path[512];
  const char* tmp = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/rill-fuzz-csv-%d.csv", tmp && *tmp ? tmp : "/tmp", (int)getpid());
  FILE* f = fopen(path, "wb");
  if (!f) return;
  size_t wrote = fwrite(data, 1, size, f);
  if (fclose(f) != 0 || wrote != size) {
    remove(path);
    return;
  }
  int64_t maps = rill__csv_map_budget, fds = rill__kept_fd_budget;
  rill__csv_map_budget = 1;
  rill__kept_fd_budget = size % 8 ? -1 : 0;
  rill_csv_opts_t fo = *o;
  fo.borrow = 0;
  rill_error_t err = {0};
  rill_df_t *a = NULL, *b = NULL;
  if (rill_df_from_csv(path, &fo, &a, &err) != RILL_OK || rill_df_from_csv(path, &fo, &b, &err) != RILL_OK) abort();
  same_concat(a, b, want, nwant);
  rill_df_free(a);
  rill_df_free(b);
  rill__csv_map_budget = maps;
  rill__kept_fd_budget = fds;
  remove(path);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  for (size_t at = 0; at < 4 && at < size; at++) /* the vector UTF-8 check, at four alignments */
    if (rill__utf8_invalid((const char*)data + at, (int64_t)(size - at)) !=
        rill__utf8_invalid_scalar((const char*)data + at, (int64_t)(size - at)))
      abort();
  uint8_t f = data[0];
  rill_csv_opts_t o = {0};
  o.delimiter = (f & 1) ? ';' : ',';
  o.no_header = (f >> 1) & 1;
  o.no_infer = (f >> 2) & 1;
  o.on_bad_row = (rill_on_error_t)(((f >> 3) & 3) % 3);
  o.on_error = (rill_on_error_t)(((f >> 5) & 3) % 3);
  o.infer_rows = (f & 0x80) ? 2 : 0;
  o.encoding = (rill_csv_encoding_t)(size % 3); /* the first byte's bits are all taken */
  o.trim = (int)(size / 3 % 2);
  o.comment = size / 6 % 2 ? '#' : 0;
  o.escape = size / 12 % 2 ? '\\' : 0;
  static const char* const nulls[] = {"", "0", "NA", NULL};
  o.null_values = size / 24 % 2 ? nulls : NULL;
  o.decimal = (f & 1) && size / 48 % 2 ? ',' : 0; /* with ';' as the delimiter */
  o.skip_lines = (int64_t)(size / 96 % 3);
  rill__csv_spill_bytes = size / 288 % 2 ? 64 : (int64_t)1 << 30; /* compressed text through a temporary file */
  o.threads = 1;
  o.chunk_bytes = 1 << 30;
  const rill__csv_dialect_t x = {o.delimiter, '"', o.comment, o.trim, o.escape};
  same_scan((const char*)data + 1, (int64_t)size - 1, &x);
  same_split((const char*)data + 1, (int64_t)size - 1, &x);
  rill_error_t err = {0};
  rill_df_t* seq = NULL;
  o.borrow = 1; /* libFuzzer's buffer itself: a read outside it is caught */
  int rc1 = rill_df_from_csv_buffer(data + 1, size - 1, &o, &seq, &err);
  o.borrow = 0;
  if (rc1 != RILL_OK && err.message[0] == 0) abort();
  o.threads = 3;
  o.chunk_bytes = 5;
  rill_df_t* par = NULL;
  int rc2 = rill_df_from_csv_buffer(data + 1, size - 1, &o, &par, &err);
  if (rc1 != rc2) abort(); /* parallel and sequential index disagree */
  if (rc1 == RILL_OK) {
    if (rill_df_rows(seq) != rill_df_rows(par) || rill_df_ncolumns(seq) != rill_df_ncolumns(par)) abort();
    /* the same bad rows, in file order, none with the expected field count */
    rill_csv_bad_row_t a[8], b[8];
    int64_t na = rill_csv_bad_rows(seq, a, 8, &err), nb = rill_csv_bad_rows(par, b, 8, &err);
    if (na < 0 || na != nb || memcmp(a, b, (size_t)(na < 8 ? na : 8) * sizeof *a) != 0) abort();
    if (o.on_bad_row == RILL_ON_ERROR_RAISE && na != 0) abort();
    for (int64_t i = 0; i < na && i < 8; i++)
      if (a[i].fields == rill_df_ncolumns(seq) || (i && a[i].line <= a[i - 1].line) || a[i].line <= o.skip_lines)
        abort();
    int64_t n1, n2, f1, f2;
    uint64_t h1 = touch_all(par, &n1, &f1);
    uint64_t h2 = touch_all(seq, &n2, &f2); /* the cells of the borrowed buffer */
    if (h1 != h2 || n1 != n2 || f1 != f2) abort();
    if (f1 == 0 && rill_df_ncolumns(seq) > 0) {
      same_concat(seq, par, h1 + h2, n1 + n2);
      if (size % 4 == 0) same_from_files(data + 1, size - 1, &o, h1 + h2, n1 + n2);
    }
  }
  rill_df_free(seq);
  rill_df_free(par);
  return 0;
}
