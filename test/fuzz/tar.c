/* libFuzzer target: the tar source over any archive bytes. The first byte picks the mode: the
 * rest written to a file as they are (damaged headers, checksums, sizes), or read as a list of
 * members that tar_write.h turns into headers with good checksums (any type, name, size field,
 * pax record or GNU long name, data longer or shorter than the size says), so that the
 * fuzzer gets past the checksum. The archive is read in order on the calling thread and in
 * reverse on two workers: every error has a message, string cells are UTF-8, and each row
 * reads the same (or fails alike) both ways. Typed columns ("cls" as int64, "txt" as
 * string) and renamed ones ("jpg" or "png" as "image") are asked for when the archive has
 * them. Each archive is also opened with a saved index (index_dir) twice, the second open
 * reading what the first saved (the same outcome), and once more after one byte of the saved
 * file was changed with its checksum made right. Any crash, sanitizer report or abort()
 * is a bug. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <errno.h>
#include <limits.h>
#include <sys/stat.h>

#include "rill.h"
#include "rill_addons.h"
#include "rows.h"
#include "internal.h"
#include "tar_index.h"
#include "../tar_write.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

enum { MAX_ROWS = 512 };

typedef struct outcome {
  int64_t n;
  int rc[MAX_ROWS];
  uint64_t hash[MAX_ROWS];
} outcome_t;

static void read_all(rill_df_t* df, int reversed, outcome_t* o) {
  rill_error_t err = {0};
  rill_df_t* view = df;
  int64_t n = rill_df_rows(df);
  o->n = 0;
  if (n > MAX_ROWS) n = MAX_ROWS;
  int64_t back[MAX_ROWS];
  for (int64_t r = 0; r < n; r++) back[r] = reversed ? n - 1 - r : r;
  if (rill_df_take(df, back, n, &view, &err) != RILL_OK) abort();
  rill_iter_t* it = NULL;
  if (rill_iter_new(view, &(rill_iter_opts_t){.threads = reversed ? 2 : RILL_THREADS_NONE}, &it, &err) != RILL_OK)
    abort();
  rill_row_t row;
  int rc;
  /* one row at a time, so that an error is the row's */
  while ((rc = rill_iter_next(it, &row, &err)) != RILL_END) {
    if (rc != RILL_OK && !err.message[0]) abort(); /* every error has a message */
    if (rc != RILL_OK) break;                      /* a raised error ends the iteration */
    int64_t r = back[row.index];
    o->rc[r] = rc;
    o->hash[r] = fuzz_check_row(&row);
    o->n++;
  }
  rill_iter_free(it);
  rill_df_free(view);
}

/* Members from the bytes: [type][flags][name length][name][data length (2 bytes)][data]... */
static void write_members(FILE* f, const uint8_t* d, size_t n) {
  static const char types[] = {'0', '0', '0', '5', 'x', 'L', 'K', 'g', '2', '7', 0, 'S', 'V', 'D'};
  size_t p = 0;
  while (p + 3 <= n) {
    char type = types[d[p] % sizeof types];
    uint8_t flags = d[p + 1];
    size_t nl = d[p + 2];
    p += 3;
    if (p + nl > n) nl = n - p;
    char name[256];
    memcpy(name, d + p, nl);
    name[nl] = 0;
    p += nl;
    size_t dl = p + 2 <= n ? (size_t)(d[p] | d[p + 1] << 8) % 3000 : 0;
    p += p + 2 <= n ? 2 : n - p;
    if (p + dl > n) dl = n - p;
    int64_t said = (int64_t)dl;
    if (flags & 1) said += (flags >> 4) - 8; /* a size field that is not the data's */
    if (said < 0) said = 0;
    uint8_t h[512];
    tw_header(h, name, (flags & 2) ? "pre" : NULL, said, type, (flags >> 2) & 1 ? TW_GNU : TW_USTAR, (flags & 8) != 0);
    fwrite(h, 1, 512, f);
    fwrite(d + p, 1, dl, f);
    static const uint8_t zero[512];
    if (dl % 512) fwrite(zero, 1, 512 - dl % 512, f);
    p += dl;
  }
  if (n % 2) tw_end(f);
}

/* The archive opened with a saved index (index_dir): made by the first open, read by the
 * second, which must give what the first gave; then the index file changed in one byte
 * chosen by the input, its checksum made right again so that the loader's other checks are
 * what refuse it (or a replay of wrong but in-bounds members follows): no crash either way. */
static void saved_index(const char* path, const uint8_t* data, size_t size) {
  char dir[600], real[PATH_MAX], file[PATH_MAX + 128];
  snprintf(dir, sizeof dir, "%s-idx", path);
  if (mkdir(dir, 0700) != 0 && errno != EEXIST) abort();
  static outcome_t a, b;
  int rcs[2];
  char msg[2][sizeof ((rill_error_t*)0)->message];
  for (int k = 0; k < 2; k++) {
    rill_df_t* df = NULL;
    rill_error_t err = {0};
    rcs[k] = rill_df_from_tar(&path, 1, &(rill_tar_opts_t){.index_dir = dir, .on_error = RILL_ON_ERROR_NULL}, &df, &err);
    snprintf(msg[k], sizeof msg[k], "%s", rcs[k] == RILL_OK ? "" : err.message);
    if (rcs[k] == RILL_OK) read_all(df, 0, k ? &b : &a);
    rill_df_free(df);
  }
  if (rcs[0] != rcs[1] || strcmp(msg[0], msg[1]) != 0) abort();
  if (rcs[0] == RILL_OK) {
    if (a.n != b.n) abort();
    for (int64_t r = 0; r < a.n; r++)
      if (a.rc[r] != b.rc[r] || a.hash[r] != b.hash[r]) abort();
  }
  if (realpath(path, real) && rill__tar_index_path(dir, real, file, sizeof file) == RILL_OK) {
    FILE* f = fopen(file, "r+b");
    if (f) {
      static uint8_t buf[1 << 20];
      size_t n = fread(buf, 1, sizeof buf, f);
      if (n > 8 && n < sizeof buf && size >= 3) {
        size_t at = ((size_t)data[size - 1] << 8 | data[size - 2]) % (n - 8);
        buf[at] ^= data[size - 3] ? data[size - 3] : 1;
        uint64_t sum = rill__fnv(RILL__FNV_START, buf, n - 8);
        memcpy(buf + n - 8, &sum, 8);
        rewind(f);
        fwrite(buf, 1, n, f);
      }
      fclose(f);
      rill_df_t* df = NULL;
      rill_error_t err = {0};
      if (rill_df_from_tar(&path, 1, &(rill_tar_opts_t){.index_dir = dir, .on_error = RILL_ON_ERROR_NULL}, &df,
                           &err) == RILL_OK)
        read_all(df, 1, &a);
      else if (!err.message[0])
        abort();
      rill_df_free(df);
      unlink(file);
    }
  }
  rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  char path[512];
  const char* tmp = getenv("TMPDIR");
  snprintf(path, sizeof path, "%s/rill-fuzz-tar-%d.tar", tmp && *tmp ? tmp : "/tmp", (int)getpid());
  FILE* f = fopen(path, "wb");
  if (!f) abort();
  if (data[0] & 1)
    write_members(f, data + 1, size - 1);
  else
    fwrite(data + 1, 1, size - 1, f);
  fclose(f);
  const char* p = path;
  static outcome_t a, b;
  for (int typed = 0; typed < 2; typed++) {
    rill_df_t* df = NULL;
    rill_error_t err = {0};
    rill_tar_column_t cols[4];
    int nc = 0;
    if (typed) { /* the typed columns the plain open found */
      rill_df_t* plain = NULL;
      if (rill_df_from_tar(&p, 1, NULL, &plain, &err) != RILL_OK) break;
      if (rill_df_column(plain, "cls") >= 0) cols[nc++] = (rill_tar_column_t){"cls", RILL_INT64};
      if (rill_df_column(plain, "txt") >= 0) cols[nc++] = (rill_tar_column_t){"TXT", RILL_STRING};
      if (rill_df_column(plain, "jpg") >= 0 || rill_df_column(plain, "png") >= 0) { /* alternatives of one column */
        cols[nc++] = (rill_tar_column_t){"jpg", 0, "image"};
        cols[nc++] = (rill_tar_column_t){"png", RILL_BINARY, "image"};
      }
      rill_df_free(plain);
      if (!nc) break;
    }
    int rc = rill_df_from_tar(&p, 1, &(rill_tar_opts_t){.columns = cols, .ncolumns = nc, .on_error = RILL_ON_ERROR_NULL},
                              &df, &err);
    if (rc != RILL_OK) {
      if (!err.message[0] || df) abort();
      break;
    }
    if (rill_df_ncolumns(df) < 2) abort();
    read_all(df, 0, &a);
    read_all(df, 1, &b);
    int64_t want = rill_df_rows(df) < MAX_ROWS ? rill_df_rows(df) : MAX_ROWS;
    if (a.n != want || b.n != want) abort(); /* nulls, never row errors: the archive did not change */
    for (int64_t r = 0; r < a.n; r++)
      if (a.rc[r] != b.rc[r] || a.hash[r] != b.hash[r]) abort();
    rill_df_free(df);
  }
  saved_index(p, data, size);
  unlink(path);
  return 0;
}
