/* Tar archives as datasets (rill_df_from_tar): samples grouped by key, one column per
 * extension, typed members, the header formats (ustar, pax, GNU, V7), damaged and
 * compressed archives, archives changed after the open, images decoded from members. */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "image_common.h"
#include "tar_index.h"
#include "tar_write.h"

static FILE* create(const char* rel) {
  FILE* f = fopen(rt_tpath(rel), "wb");
  cr_assert(f, "cannot create %s", rel);
  return f;
}

#define MAXR 64
#define MAXC 8

/* Every row of df (all columns, in row order whatever the iteration order): each cell's
 * validity and text (up to 63 bytes) or int64 value. */
typedef struct table {
  int64_t rows;
  int ncols;
  char names[MAXC][32];
  int valid[MAXR][MAXC];
  char text[MAXR][MAXC][64];
  int64_t len[MAXR][MAXC];
  int64_t num[MAXR][MAXC];
} table_t;

/* reversed: the rows taken in reverse order (reads out of order) */
static void read_all(rill_df_t* df, int threads, int reversed, table_t* t) {
  memset(t, 0, sizeof *t);
  rill_error_t err = {0};
  rill_df_t* view = df;
  int64_t n = rill_df_rows(df), back[MAXR];
  cr_assert(n <= MAXR);
  for (int64_t r = 0; r < n; r++) back[r] = n - 1 - r;
  if (reversed) RT_OK(rill_df_take(df, back, n, &view, &err), err);
  t->ncols = rill_df_ncolumns(view);
  cr_assert(t->ncols <= MAXC);
  for (int c = 0; c < t->ncols; c++) snprintf(t->names[c], sizeof t->names[c], "%s", rill_df_field(view, c)->name);
  rill_iter_t* it = NULL;
  RT_OK(rill_iter_new(view, &(rill_iter_opts_t){.threads = threads}, &it, &err), err);
  int seen[MAXR] = {0};
  rill_row_t row;
  int rc;
  while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) {
    int64_t r = row.index;
    if (reversed) r = back[r];
    cr_assert(r >= 0 && r < MAXR, "row %lld", (long long)r);
    cr_assert_eq(seen[r], 0, "row %lld twice", (long long)r);
    seen[r] = 1;
    t->rows++;
    for (int c = 0; c < t->ncols; c++) {
      const rill_array_t* a = rill_row_get(&row, c);
      t->valid[r][c] = rill_array_is_valid(a, 0);
      int64_t nb = 0;
      const void* cell = rill_array_cell(a, 0, &nb);
      t->len[r][c] = nb;
      if (a->type.dtype == RILL_STRING || a->type.dtype == RILL_BINARY)
        memcpy(t->text[r][c], cell, nb < 63 ? (size_t)nb : 63);
      else if (a->type.dtype == RILL_INT64)
        memcpy(&t->num[r][c], cell, 8);
    }
  }
  cr_assert_eq(rc, RILL_END, "%d: %s", rc, err.message);
  rill_iter_free(it);
  if (view != df) rill_df_free(view);
}

static int col(const table_t* t, const char* name) {
  for (int c = 0; c < t->ncols; c++)
    if (strcmp(t->names[c], name) == 0) return c;
  cr_assert_fail("no column %s", name);
  return -1;
}

/* The first error of iterating every column of df (one thread), its row in *row. */
static int first_error(rill_df_t* df, rill_error_t* err) {
  rill_iter_t* it = NULL;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE}, &it, err), *err);
  rill_row_t row;
  int rc;
  while ((rc = rill_iter_next(it, &row, err)) == RILL_OK) {
  }
  rill_iter_free(it);
  return rc;
}

/* Two archives: samples 000 (cls, jpg, json), 001 (cls, jpg: no json), sub/002 (jpg), and in
 * the second 003 (cls, jpg); a folder, a README (no dot), a hidden file and a name ending in
 * a dot are skipped. */
static void write_two(void) {
  FILE* f = create("a.tar");
  tw_member(f, "sub", NULL, 0, '5', TW_USTAR);
  tw_file(f, "000.jpg", "jpeg-0", 6);
  tw_file(f, "000.CLS", "3\n", 2);
  tw_file(f, "000.json", "{\"a\":1}", 7);
  tw_file(f, "README", "text", 4);
  tw_file(f, "001.jpg", "jpeg-1", 6);
  tw_file(f, "001.cls", " 12 ", 4);
  tw_file(f, ".hidden.txt", "h", 1);
  tw_file(f, "dot.", "d", 1);
  tw_file(f, "sub/002.jpg", "jpeg-2", 6);
  tw_end(f);
  fclose(f);
  f = create("b.tar");
  tw_file(f, "003.cls", "-7", 2);
  tw_file(f, "003.jpg", "", 0);
  tw_end(f);
  fclose(f);
}

/* a.tar and b.tar as they are, opened with o (may be NULL). */
static rill_df_t* open_ab(const rill_tar_opts_t* o) {
  const char* paths[] = {rt_tpath("a.tar"), rt_tpath("b.tar")};
  rill_df_t* df = NULL;
  rill_error_t err = {0};
  RT_OK(rill_df_from_tar(paths, 2, o, &df, &err), err);
  return df;
}

/* write_two's archives opened with o (may be NULL). */
static rill_df_t* open_two(const rill_tar_opts_t* o) {
  write_two();
  return open_ab(o);
}

Test(tar, samples_grouped_by_key_one_column_per_extension) {
  rill_df_t* df = open_two(NULL);
  const char* a_tar = rt_tpath("a.tar");
  const char* b_tar = rt_tpath("b.tar");
  cr_assert_eq(rill_df_rows(df), 4);
  const char* want_cols[] = {"key", "path", "cls", "jpg", "json"};
  cr_assert_eq(rill_df_ncolumns(df), 5);
  for (int c = 0; c < 5; c++) cr_assert_str_eq(rill_df_field(df, c)->name, want_cols[c]);
  for (int threads = RILL_THREADS_NONE; threads <= 2; threads += 2 - RILL_THREADS_NONE) {
    for (int reversed = 0; reversed < 2; reversed++) {
      table_t t;
      read_all(df, threads, reversed, &t);
      cr_assert_eq(t.rows, 4);
      const char* keys[] = {"000", "001", "sub/002", "003"};
      const char* jpg[] = {"jpeg-0", "jpeg-1", "jpeg-2", ""};
      for (int r = 0; r < 4; r++) {
        cr_assert_str_eq(t.text[r][col(&t, "key")], keys[r]);
        char p[1100];
        snprintf(p, sizeof p, "%s:%s", r < 3 ? a_tar : b_tar, keys[r]);
        cr_assert_eq(strncmp(t.text[r][col(&t, "path")], p, 63), 0, "%s", t.text[r][1]);
        cr_assert(t.valid[r][col(&t, "jpg")]);
        cr_assert_str_eq(t.text[r][col(&t, "jpg")], jpg[r]);
      }
      int cls = col(&t, "cls"), json = col(&t, "json");
      cr_assert_str_eq(t.text[0][cls], "3\n"); /* binary: the bytes as stored */
      cr_assert_str_eq(t.text[1][cls], " 12 ");
      cr_assert_not(t.valid[2][cls]);
      cr_assert_eq(t.len[2][cls], 0);
      cr_assert_str_eq(t.text[3][cls], "-7");
      cr_assert_str_eq(t.text[0][json], "{\"a\":1}");
      for (int r = 1; r < 4; r++) cr_assert_not(t.valid[r][json], "row %d", r);
    }
  }
  rill_df_free(df);
}

Test(tar, typed_members_parsed_from_their_text) {
  rill_tar_column_t cols[] = {{"CLS", RILL_INT64}, {"json", RILL_STRING}};
  rill_df_t* df = open_two(&(rill_tar_opts_t){.columns = cols, .ncolumns = 2});
  cr_assert_eq(rill_df_field(df, 2)->type.dtype, RILL_INT64);
  cr_assert_eq(rill_df_field(df, 4)->type.dtype, RILL_STRING);
  cr_assert_eq(rill_df_field(df, 3)->type.dtype, RILL_BINARY);
  table_t t;
  read_all(df, 2, 0, &t);
  int cls = col(&t, "cls");
  int64_t want[] = {3, 12, 0, -7};
  for (int r = 0; r < 4; r++) {
    cr_assert_eq(t.valid[r][cls], r != 2);
    cr_assert_eq(t.num[r][cls], want[r], "row %d: %lld", r, (long long)t.num[r][cls]);
  }
  cr_assert_str_eq(t.text[0][col(&t, "json")], "{\"a\":1}");
  rill_df_free(df);
}

/* One archive whose member 001.cls holds `bad` (a typed column) */
static rill_df_t* bad_cls(const char* bad, rill_on_error_t on_error, rill_dtype_t dt) {
  FILE* f = create("bad.tar");
  tw_file(f, "000.cls", "1", 1);
  tw_file(f, "001.cls", bad, (int64_t)strlen(bad));
  tw_file(f, "002.cls", "2", 1);
  tw_end(f);
  fclose(f);
  const char* p = rt_tpath("bad.tar");
  rill_df_t* df = NULL;
  rill_error_t err = {0};
  rill_tar_column_t cols[] = {{"cls", dt}};
  RT_OK(rill_df_from_tar(&p, 1, &(rill_tar_opts_t){.columns = cols, .ncolumns = 1, .on_error = on_error}, &df, &err),
        err);
  return df;
}

/* Member 001.cls holding `text` read as dt fails with `code` and a message holding `needle`,
 * at row 1. */
static void bad_cls_fails(const char* text, rill_dtype_t dt, int code, const char* needle) {
  rill_df_t* df = bad_cls(text, RILL_ON_ERROR_RAISE, dt);
  rill_error_t err = {0};
  cr_assert_eq(first_error(df, &err), code, "%s", err.message);
  cr_assert(strstr(err.message, needle), "'%s' lacks '%s'", err.message, needle);
  cr_assert_eq(err.row, 1);
  rill_df_free(df);
}

Test(tar, a_member_that_is_not_its_type_fails_naming_archive_and_member) {
  char want[1200];
  snprintf(want, sizeof want, "%s:001.cls: \"x1\" is not a value of type int64", rt_tpath("bad.tar"));
  bad_cls_fails("x1", RILL_INT64, RILL_EFORMAT, want);
  bad_cls_fails("\xff" "1\\", RILL_INT64, RILL_EFORMAT, "001.cls: \"\\xFF1\\x5C\" is not a value of type int64");
  bad_cls_fails("\n \n", RILL_INT64, RILL_EFORMAT, "001.cls: holds no int64 (an empty text)");
  bad_cls_fails("300", RILL_INT8, RILL_ERANGE, "001.cls: \"300\" is not in the range of int8");
  char long_text[400];
  memset(long_text, '1', sizeof long_text - 1);
  long_text[sizeof long_text - 1] = 0;
  bad_cls_fails(long_text, RILL_INT64, RILL_EFORMAT, "001.cls: 399 bytes are not int64 text (at most 256)");
  bad_cls_fails("caf\xC3", RILL_STRING, RILL_EFORMAT, "001.cls: not UTF-8 text (byte 0xC3 at byte 3)");

  /* skip drops the row; null makes the cell null */
  rill_df_t* df = bad_cls("x1", RILL_ON_ERROR_SKIP, RILL_INT64);
  table_t t;
  read_all(df, 2, 0, &t);
  cr_assert_eq(t.rows, 2);
  cr_assert_eq(t.num[0][2], 1);
  cr_assert_eq(t.num[2][2], 2);
  rill_df_free(df);
  df = bad_cls("caf\xC3", RILL_ON_ERROR_NULL, RILL_STRING);
  read_all(df, 2, 0, &t);
  cr_assert_eq(t.rows, 3);
  cr_assert(t.valid[0][2] && !t.valid[1][2] && t.valid[2][2]);
  cr_assert_str_eq(t.text[2][2], "2");
  rill_df_free(df);
}

Test(tar, long_names_from_pax_gnu_and_ustar_prefix_and_large_size_fields) {
  char longdir[300];
  memset(longdir, 'd', 150);
  strcpy(longdir + 150, "/sample");
  char name[400];
  FILE* f = create("long.tar");
  snprintf(name, sizeof name, "%s.jpg", longdir);
  tw_gnu_long(f, name, "gnu", 3);
  snprintf(name, sizeof name, "%s.txt", longdir);
  tw_pax(f, "path", name);
  tw_file(f, "ignored-short-name.bin", "pax", 3);
  /* ustar prefix + name */
  uint8_t h[512];
  tw_header(h, "p.jpg", "pre/fix", 4, '0', TW_USTAR, 0);
  fwrite(h, 1, 512, f);
  fwrite("pfx!", 1, 4, f);
  static const uint8_t zero[512];
  fwrite(zero, 1, 508, f);
  /* a base-256 size field, and a pax size overriding the header's */
  tw_header(h, "q.jpg", NULL, 5, '0', TW_GNU, 1);
  fwrite(h, 1, 512, f);
  fwrite("b256!", 1, 5, f);
  fwrite(zero, 1, 507, f);
  tw_pax(f, "size", "6");
  tw_header(h, "q.cls", NULL, 0, '0', TW_USTAR, 0);
  fwrite(h, 1, 512, f);
  fwrite("sixsix", 1, 6, f);
  fwrite(zero, 1, 506, f);
  /* a V7 header (no magic) */
  tw_member(f, "v7.jpg", "old", 3, '0', TW_V7);
  tw_end(f);
  fclose(f);
  const char* p = rt_tpath("long.tar");
  rill_df_t* df = NULL;
  rill_error_t err = {0};
  RT_OK(rill_df_from_tar(&p, 1, NULL, &df, &err), err);
  table_t t;
  read_all(df, 2, 0, &t);
  cr_assert_eq(t.rows, 4, "%lld rows", (long long)t.rows);
  cr_assert_eq(strncmp(t.text[0][col(&t, "key")], longdir, 63), 0);
  cr_assert_str_eq(t.text[0][col(&t, "jpg")], "gnu");
  cr_assert_str_eq(t.text[0][col(&t, "txt")], "pax");
  cr_assert_str_eq(t.text[1][col(&t, "key")], "pre/fix/p");
  cr_assert_str_eq(t.text[1][col(&t, "jpg")], "pfx!");
  cr_assert_str_eq(t.text[2][col(&t, "key")], "q");
  cr_assert_str_eq(t.text[2][col(&t, "jpg")], "b256!");
  cr_assert_str_eq(t.text[2][col(&t, "cls")], "sixsix");
  cr_assert_str_eq(t.text[3][col(&t, "key")], "v7");
  cr_assert_str_eq(t.text[3][col(&t, "jpg")], "old");
  rill_df_free(df);
}

Test(tar, archive_ends_at_zero_block_or_end_of_file) {
  FILE* f = create("end.tar");
  tw_file(f, "a.jpg", "1", 1);
  tw_file(f, "b.jpg", "2", 1);
  tw_file(f, "b.cls", "3", 1);
  fclose(f); /* no end blocks */
  f = create("after.tar");
  tw_file(f, "a.jpg", "4", 1); /* a key of another archive: a sample of its own */
  tw_end(f);
  fputs("anything after the end blocks is not read", f);
  fclose(f);
  f = create("empty.tar");
  fclose(f);
  const char* paths[] = {rt_tpath("end.tar"), rt_tpath("empty.tar"), rt_tpath("after.tar")};
  rill_df_t* df = NULL;
  rill_error_t err = {0};
  RT_OK(rill_df_from_tar(paths, 3, NULL, &df, &err), err);
  table_t t;
  read_all(df, 2, 0, &t);
  cr_assert_eq(t.rows, 3);
  const char* keys[] = {"a", "b", "a"};
  const char* jpg[] = {"1", "2", "4"};
  for (int r = 0; r < 3; r++) {
    cr_assert_str_eq(t.text[r][0], keys[r]);
    cr_assert_str_eq(t.text[r][col(&t, "jpg")], jpg[r]);
  }
  cr_assert(!t.valid[0][col(&t, "cls")] && t.valid[1][col(&t, "cls")] && !t.valid[2][col(&t, "cls")]);
  rill_df_free(df);
  RT_OK(rill_df_from_tar(paths + 1, 1, NULL, &df, &err), err);
  cr_assert_eq(rill_df_rows(df), 0);
  cr_assert_eq(rill_df_ncolumns(df), 2);
  rill_df_free(df);
}

/* Opening `rel` fails with code and a message holding the archive's path and `needle`. */
static void open_fails(const char* rel, int code, const char* needle) {
  const char* p = rt_tpath(rel);
  rill_df_t* df = (rill_df_t*)1;
  rill_error_t err = {0};
  RT_FAILS(rill_df_from_tar(&p, 1, NULL, &df, &err), code, needle, err);
  cr_assert(strstr(err.message, p), "%s", err.message);
  cr_assert_null(df);
}

/* An archive `rel` of a pax record key=value and a member 000.jpg. */
static void pax_then_member(const char* rel, const char* key, const char* value) {
  FILE* f = create(rel);
  tw_pax(f, key, value);
  tw_file(f, "000.jpg", "x", 1);
  fclose(f);
}

Test(tar, damaged_and_unsupported_archives_fail_at_open_with_their_place) {
  FILE* f;
  open_fails("missing.tar", RILL_EIO, "cannot open: No such file or directory");
  mkdir(rt_tpath("dir.tar"), 0777);
  open_fails("dir.tar", RILL_EIO, "not a regular file");
  f = create("gz.tar.gz");
  fwrite("\x1f\x8b\x08\x00\x00\x00\x00\x00", 1, 8, f);
  for (int i = 0; i < 600; i++) fputc(i, f);
  fclose(f);
  open_fails("gz.tar.gz", RILL_ENOTSUP, "a gzip-compressed archive: members are read in place, so decompress it first");
  f = create("small.tar.gz"); /* smaller than a block */
  fwrite("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 1, 10, f);
  fclose(f);
  open_fails("small.tar.gz", RILL_ENOTSUP, "a gzip-compressed archive: members are read in place, so decompress it "
             "first (gzip -d)");
  f = create("zst.tar.zst");
  fwrite("\x28\xb5\x2f\xfd", 1, 4, f);
  for (int i = 0; i < 600; i++) fputc(i, f);
  fclose(f);
  open_fails("zst.tar.zst", RILL_ENOTSUP, "a zstd-compressed archive");
  f = create("text.tar");
  for (int i = 0; i < 1024; i++) fputc('a' + i % 26, f);
  fclose(f);
  open_fails("text.tar", RILL_EFORMAT, "byte 0: not a tar archive (its checksum does not match its bytes)");

  /* a header damaged after the first member */
  f = create("damaged.tar");
  tw_file(f, "000.jpg", "x", 1);
  long at = ftell(f);
  tw_file(f, "001.jpg", "y", 1);
  tw_end(f);
  fseek(f, at + 10, SEEK_SET);
  fputc('Z', f);
  fclose(f);
  open_fails("damaged.tar", RILL_EFORMAT, "byte 1024: not a tar header: the archive is damaged");

  /* cut inside the second member's data, or inside its header */
  uint8_t big[3000];
  memset(big, 7, sizeof big);
  f = create("cut.tar");
  tw_file(f, "000.jpg", "x", 1);
  tw_file(f, "001.jpg", big, sizeof big);
  fclose(f);
  cr_assert_eq(truncate(rt_tpath("cut.tar"), 1024 + 512 + 2000), 0);
  open_fails("cut.tar", RILL_EFORMAT,
             "byte 1024: member \"001.jpg\" holds 3000 bytes but the archive ends 2000 bytes after its header: the "
             "archive is truncated");
  cr_assert_eq(truncate(rt_tpath("cut.tar"), 1024 + 100), 0);
  open_fails("cut.tar", RILL_EFORMAT, "byte 1024: a partial header of 100 bytes: the archive is truncated");

  f = create("dup.tar");
  tw_file(f, "000.jpg", "x", 1);
  tw_file(f, "000.JPG", "y", 1);
  fclose(f);
  open_fails("dup.tar", RILL_EFORMAT, "byte 1024: member \"000.JPG\": sample \"000\" already has a member with "
             "extension \"jpg\"");
  f = create("unsorted.tar"); /* tar -cf x.tar *.jpg *.cls */
  for (int k = 0; k < 300; k++) {
    char name[32];
    snprintf(name, sizeof name, "%03d.jpg", k);
    tw_file(f, name, "x", 1);
  }
  tw_file(f, "000.cls", "0", 1);
  fclose(f);
  open_fails("unsorted.tar", RILL_EFORMAT,
             "byte 307200: member \"000.cls\": sample \"000\" has members earlier in the archive, not next to this "
             "one (a sample's members must be consecutive: write the archive sorted by name, e.g. tar --sort=name)");
  f = create("reserved.tar");
  tw_file(f, "000.Path", "x", 1);
  fclose(f);
  open_fails("reserved.tar", RILL_EFORMAT, "member \"000.Path\": its extension names a column the source makes "
             "itself (key, path): give its column another name (rill_tar_column_t.name)");
  f = create("latin1.tar");
  tw_file(f, "caf\xe9.jpg", "x", 1);
  fclose(f);
  open_fails("latin1.tar", RILL_EFORMAT, "byte 0: member name \"caf\" is not UTF-8 text (byte 0xE9 at byte 3)");
  f = create("pax.tar");
  tw_member(f, "PaxHeader/x", "9 pathx\n", 8, 'x', TW_USTAR);
  tw_file(f, "000.jpg", "x", 1);
  fclose(f);
  open_fails("pax.tar", RILL_EFORMAT, "byte 0: pax record 0 bytes into the extended header cannot be read");
  pax_then_member("paxsize.tar", "size", "12x");
  open_fails("paxsize.tar", RILL_EFORMAT, "byte 0: pax size \"12x\" is not a size");
  f = create("sparse.tar");
  tw_member(f, "000.jpg", "x", 1, 'S', TW_GNU);
  fclose(f);
  open_fails("sparse.tar", RILL_ENOTSUP, "byte 0: a GNU sparse member (not supported)");
  pax_then_member("paxsparse.tar", "GNU.sparse.major", "1");
  open_fails("paxsparse.tar", RILL_ENOTSUP, "a GNU sparse member (not supported: archive it without --sparse)");
  uint8_t h[512];
  tw_header(h, "000.jpg", NULL, 1, '0', TW_USTAR, 0);
  memcpy(h + 124, "12x4", 4); /* a size that is not octal, with a checksum that matches */
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; i++) sum += h[i];
  tw_octal(h + 148, 7, sum);
  f = create("size.tar");
  fwrite(h, 1, 512, f);
  fclose(f);
  open_fails("size.tar", RILL_EFORMAT, "byte 0: the header's size field cannot be read");
}

/* Archives indexed side by side: the same dataframe on one thread or many, and the error of
 * the first damaged archive in order whichever thread finds one first. */
Test(tar, archives_indexed_side_by_side_merge_in_order) {
  enum { A = 12 };
  char rel[32], name[32], text[32];
  const char* paths[A];
  for (int a = 0; a < A; a++) {
    snprintf(rel, sizeof rel, "side%02d.tar", a);
    FILE* f = create(rel);
    for (int k = 0; k < 40 + a; k++) { /* the same keys in every archive: samples of their own */
      snprintf(name, sizeof name, "%03d.%s", k, a % 3 ? "cls" : "CLS");
      int n = snprintf(text, sizeof text, "%d", a * 1000 + k);
      tw_file(f, name, text, n);
      if (k % 2) {
        snprintf(name, sizeof name, "%03d.ext%d", k, a % 4);
        tw_file(f, name, "x", 1);
      }
    }
    tw_end(f);
    fclose(f);
    paths[a] = strdup(rt_tpath(rel));
  }
  rill_df_t* one = NULL;
  rill_error_t err = {0};
  RT_OK(rill_df_from_tar(paths, A, &(rill_tar_opts_t){.threads = 1}, &one, &err), err);
  for (int threads = 0; threads <= 12; threads += 4) {
    rill_df_t* df = NULL;
    RT_OK(rill_df_from_tar(paths, A, &(rill_tar_opts_t){.threads = threads, .columns = (rill_tar_column_t[]){{"cls", RILL_INT64, NULL}},
                                                        .ncolumns = 1},
                           &df, &err),
          err);
    cr_assert_eq(rill_df_rows(df), rill_df_rows(one));
    cr_assert_eq(rill_df_ncolumns(df), 7); /* key, path, cls, ext0..ext3 */
    rill_iter_t* it = NULL;
    RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = 2}, &it, &err), err);
    rill_row_t row;
    int64_t r = 0;
    while (rill_iter_next(it, &row, &err) == RILL_OK) {
      int64_t a = 0, k = r;
      while (k >= 40 + a) k -= 40 + a, a++;
      cr_assert_eq(*(const int64_t*)rill_array_cell(rill_row_get(&row, 2), 0, NULL), a * 1000 + k, "row %lld",
                   (long long)r);
      cr_assert_eq(rill_array_is_valid(rill_row_get(&row, 3 + a % 4), 0), k % 2 == 1, "row %lld", (long long)r);
      r++;
    }
    cr_assert_eq(r, rill_df_rows(one));
    rill_iter_free(it);
    rill_df_free(df);
  }
  rill_df_free(one);
  /* archives 5 and 9 damaged, 5 after 20,000 members (found later than 9's): archive 5's
   * error, every time */
  FILE* f = fopen(paths[5], "wb");
  for (int k = 0; k < 20000; k++) {
    snprintf(name, sizeof name, "%05d.cls", k);
    tw_file(f, name, "1", 1);
  }
  uint8_t h[512];
  tw_header(h, "x.cls", NULL, 1, '0', TW_USTAR, 0);
  h[3] = '#';
  fwrite(h, 1, 512, f);
  fclose(f);
  f = fopen(paths[9], "r+b");
  fseek(f, 512 * 6 + 3, SEEK_SET);
  fputc('#', f);
  fclose(f);
  for (int round = 0; round < 10; round++) {
    rill_df_t* df = NULL;
    RT_FAILS(rill_df_from_tar(paths, A, &(rill_tar_opts_t){.threads = 4}, &df, &err), RILL_EFORMAT,
             "side05.tar: byte 20480000: not a tar header: the archive is damaged", err);
    cr_assert_null(df);
  }
  RT_FAILS(rill_df_from_tar(paths, A, &(rill_tar_opts_t){.threads = -1}, &one, &err), RILL_EINVAL,
           "threads must be >= 0", err);
  for (int a = 0; a < A; a++) free((void*)paths[a]);
}

Test(tar, bad_arguments_and_dtypes) {
  write_two();
  const char* paths[] = {rt_tpath("a.tar"), NULL};
  rill_df_t* df = NULL;
  rill_error_t err = {0};
  RT_FAILS(rill_df_from_tar(paths, 2, NULL, &df, &err), RILL_EINVAL, "rill_df_from_tar: path 1 is NULL", err);
  RT_FAILS(rill_df_from_tar(paths, -1, NULL, &df, &err), RILL_EINVAL, "npaths >= 1", err);
  RT_FAILS(rill_df_from_tar(paths, 0, NULL, &df, &err), RILL_EINVAL, "npaths >= 1", err);
  RT_FAILS(rill_df_from_tar(paths, 1, NULL, NULL, &err), RILL_EINVAL, "out are required", err);
  RT_FAILS(rill_df_from_tar(paths, 1, &(rill_tar_opts_t){.ncolumns = 1}, &df, &err), RILL_EINVAL,
           "columns must hold ncolumns >= 0 entries", err);
  rill_tar_column_t typo[] = {{"clss", RILL_INT64}};
  RT_FAILS(rill_df_from_tar(paths, 1, &(rill_tar_opts_t){.columns = typo, .ncolumns = 1}, &df, &err), RILL_EINVAL,
           "columns[0]: no member of the archives has extension \"clss\"", err);
  rill_tar_column_t twice[] = {{"cls", RILL_INT64}, {"CLS", RILL_INT32}};
  RT_FAILS(rill_df_from_tar(paths, 1, &(rill_tar_opts_t){.columns = twice, .ncolumns = 2}, &df, &err), RILL_EINVAL,
           "columns[0] and columns[1] both name extension \"CLS\"", err);
  rill_tar_column_t half[] = {{"cls", RILL_FLOAT16}};
  RT_FAILS(rill_df_from_tar(paths, 1, &(rill_tar_opts_t){.columns = half, .ncolumns = 1}, &df, &err), RILL_EINVAL,
           "columns[0] (\"cls\"): a member cannot be read as float16", err);
  rill_tar_column_t noext[] = {{NULL, RILL_INT64}};
  RT_FAILS(rill_df_from_tar(paths, 1, &(rill_tar_opts_t){.columns = noext, .ncolumns = 1}, &df, &err), RILL_EINVAL,
           "columns[0].ext must be an extension (\"cls\", \"seg.png\"), not NULL", err);
  rill_tar_column_t badname[] = {{"cls", 0, "path"}};
  RT_FAILS(rill_df_from_tar(paths, 1, &(rill_tar_opts_t){.columns = badname, .ncolumns = 1}, &df, &err), RILL_EINVAL,
           "columns[0].name \"path\": the source makes that column itself (key, path)", err);
  rill_tar_column_t twotypes[] = {{"jpg", 0, "image"}, {"png", RILL_STRING, "image"}};
  RT_FAILS(rill_df_from_tar(paths, 1, &(rill_tar_opts_t){.columns = twotypes, .ncolumns = 2}, &df, &err), RILL_EINVAL,
           "columns[0] and columns[1] make one column \"image\" of two types (binary, string)", err);
  rill_tar_column_t onto[] = {{"cls", RILL_INT64}, {"txt", RILL_STRING, "cls"}};
  RT_FAILS(rill_df_from_tar(paths, 1, &(rill_tar_opts_t){.columns = onto, .ncolumns = 2}, &df, &err), RILL_EINVAL,
           "columns[0] and columns[1] make one column \"cls\" of two types (int64, string)", err);
}

extern int64_t rill__kept_fd_budget; /* the library's knob (lib/internal.h) */

Test(tar, an_archive_changed_after_the_open_is_an_error_not_wrong_bytes) {
  for (int kept = 1; kept >= 0; kept--) {
    rill__kept_fd_budget = kept ? -1 : 0;
    write_two();
    const char* p = rt_tpath("a.tar");
    rill_df_t* df = NULL;
    rill_error_t err = {0};
    RT_OK(rill_df_from_tar(&p, 1, NULL, &df, &err), err);
    /* the same size, a later modification time: changed in place */
    struct timespec ts[2] = {{0, UTIME_OMIT}, {time(NULL) + 100, 0}};
    cr_assert_eq(utimensat(AT_FDCWD, p, ts, 0), 0);
    char want[1200];
    snprintf(want, sizeof want, "%s: the archive changed since it was indexed (%s)", p,
             kept ? "its size or modification time" : "another file, size or modification time");
    cr_assert_eq(first_error(df, &err), RILL_EIO);
    cr_assert(strstr(err.message, want), "%s", err.message);
    /* the path and key columns still read: they hold no member */
    rill_iter_t* it = NULL;
    RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.columns = (int[]){0, 1}, .ncolumns = 2}, &it, &err), err);
    rill_row_t row;
    int rows = 0, rc;
    while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) rows++;
    cr_assert_eq(rc, RILL_END, "%s", err.message);
    cr_assert_eq(rows, 3);
    rill_iter_free(it);
    rill_df_free(df);
    /* removed, or replaced by another file: with its descriptor kept the archive indexed is
     * still read; by its path, an error */
    RT_OK(rill_df_from_tar(&p, 1, NULL, &df, &err), err);
    cr_assert_eq(unlink(p), 0);
    if (kept) {
      table_t t;
      read_all(df, 2, 1, &t);
      cr_assert_eq(t.rows, 3);
      cr_assert_str_eq(t.text[1][col(&t, "jpg")], "jpeg-1");
    } else {
      cr_assert_eq(first_error(df, &err), RILL_EIO);
      cr_assert(strstr(err.message, "cannot open: No such file or directory"), "%s", err.message);
    }
    FILE* f = create("a.tar");
    tw_file(f, "001.jpg", "other", 5);
    tw_end(f);
    fclose(f);
    if (kept) {
      table_t t;
      read_all(df, 2, 0, &t);
      cr_assert_str_eq(t.text[0][col(&t, "jpg")], "jpeg-0");
    } else {
      cr_assert_eq(first_error(df, &err), RILL_EIO);
      cr_assert(strstr(err.message, want), "%s", err.message);
    }
    rill_df_free(df);
  }
  /* a budget of one kept descriptor: the first archive keeps it, the second is read by path
   * (indexed one after the other: side by side, whichever archive's index ends first would
   * take the descriptor) */
  rill__kept_fd_budget = 1;
  write_two();
  const char* paths[] = {rt_tpath("a.tar"), rt_tpath("b.tar")};
  rill_df_t* df = NULL;
  rill_error_t err = {0};
  RT_OK(rill_df_from_tar(paths, 2, &(rill_tar_opts_t){.threads = 1}, &df, &err), err);
  cr_assert_eq(unlink(paths[0]), 0);
  cr_assert_eq(unlink(paths[1]), 0);
  cr_assert_eq(first_error(df, &err), RILL_EIO);
  cr_assert_eq(err.row, 3, "%lld: %s", (long long)err.row, err.message); /* rows 0-2 from the kept a.tar */
  cr_assert(strstr(err.message, "b.tar: cannot open: No such file or directory"), "%s", err.message);
  rill_df_free(df); /* gives its descriptor back: the next dataframe keeps one again */
  write_two();
  RT_OK(rill_df_from_tar(paths, 1, NULL, &df, &err), err);
  cr_assert_eq(unlink(paths[0]), 0);
  table_t t;
  read_all(df, 2, 0, &t);
  cr_assert_eq(t.rows, 3);
  rill_df_free(df);
  rill__kept_fd_budget = -1;
}

/* Extensions given one name are alternatives of one column (jpg or png); a name also reads an
 * extension the source's own columns would clash with. */
Test(tar, alternative_extensions_named_as_one_column) {
  FILE* f = create("mixed.tar");
  tw_file(f, "a.jpg", "J", 1);
  tw_file(f, "a.key", "k-a", 3);
  tw_file(f, "b.PNG", "P", 1);
  tw_file(f, "c.cls", "1", 1); /* neither */
  tw_end(f);
  fclose(f);
  const char* p = rt_tpath("mixed.tar");
  rill_df_t* df = NULL;
  rill_error_t err = {0};
  rill_tar_column_t cols[] = {{"jpg", 0, "image"}, {"png", RILL_BINARY, "image"}, {"webp", 0, "image"},
                              {"key", RILL_STRING, "key_text"}};
  RT_OK(rill_df_from_tar(&p, 1, &(rill_tar_opts_t){.columns = cols, .ncolumns = 4}, &df, &err), err);
  table_t t;
  read_all(df, 2, 1, &t);
  cr_assert_eq(t.ncols, 5);
  const char* names[] = {"key", "path", "cls", "image", "key_text"};
  for (int c = 0; c < 5; c++) cr_assert_str_eq(t.names[c], names[c]);
  cr_assert_eq(rill_df_field(df, 4)->type.dtype, RILL_STRING);
  cr_assert_str_eq(t.text[0][3], "J");
  cr_assert_str_eq(t.text[1][3], "P");
  cr_assert_not(t.valid[2][3]);
  cr_assert_str_eq(t.text[0][4], "k-a");
  cr_assert_not(t.valid[1][4]);
  rill_df_free(df);
  /* every alternative missing: a typo */
  rill_tar_column_t none[] = {{"jpeg", 0, "image"}, {"gif", 0, "image"}, {"key", 0, "key_text"}};
  RT_FAILS(rill_df_from_tar(&p, 1, &(rill_tar_opts_t){.columns = none, .ncolumns = 3}, &df, &err), RILL_EINVAL,
           "columns[0]: no member of the archives has extension \"jpeg\" (nor any other extension given its name)",
           err);
  /* a member of a named column fails under its own name, as written */
  f = create("num.tar");
  tw_file(f, "a.int", "5", 1);
  tw_file(f, "b.INT", "x", 1);
  fclose(f);
  p = rt_tpath("num.tar");
  RT_OK(rill_df_from_tar(&p, 1, &(rill_tar_opts_t){.columns = (rill_tar_column_t[]){{"int", RILL_INT64, "num"}},
                                                   .ncolumns = 1},
                         &df, &err),
        err);
  cr_assert_eq(first_error(df, &err), RILL_EFORMAT);
  cr_assert(strstr(err.message, "num.tar:b.INT: \"x\" is not a value of type int64"), "%s", err.message);
  rill_df_free(df);
  /* a sample holding two alternatives */
  f = create("both.tar");
  tw_file(f, "a.jpg", "J", 1);
  tw_file(f, "a.png", "P", 1);
  fclose(f);
  p = rt_tpath("both.tar");
  RT_FAILS(rill_df_from_tar(&p, 1, &(rill_tar_opts_t){.columns = cols, .ncolumns = 2}, &df, &err), RILL_EFORMAT,
           "byte 1024: member \"a.png\": sample \"a\" already has a member for column \"image\" (the extensions given "
           "that name are alternatives: one a sample)", err);
}

/* Archives written by GNU tar in each of its formats read the same samples. */
Test(tar, archives_of_gnu_tar_in_each_format) {
  char dir[1100], cmd[4000], longname[300];
  snprintf(dir, sizeof dir, "%s/tree", rt_tmpdir());
  mkdir(dir, 0777);
  memset(longname, 'n', 120);
  longname[120] = 0;
  for (int k = 0; k < 3; k++) {
    char path[1500];
    snprintf(path, sizeof path, "%s/%s%d.jpg", dir, longname, k);
    FILE* f = fopen(path, "wb");
    cr_assert(f);
    fprintf(f, "image %d", k);
    fclose(f);
    snprintf(path, sizeof path, "%s/%s%d.cls", dir, longname, k);
    f = fopen(path, "wb");
    fprintf(f, "%d\n", 10 + k);
    fclose(f);
  }
  const char* formats[] = {"gnu", "pax", "oldgnu"};
  for (int i = 0; i < 3; i++) {
    char out[1200];
    snprintf(out, sizeof out, "%s/%s.tar", rt_tmpdir(), formats[i]);
    /* sorted names, so that each sample's members are next to each other */
    snprintf(cmd, sizeof cmd, "cd '%s' && tar --format=%s --sort=name -cf '%s' .", dir, formats[i], out);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    const char* p = out;
    rill_df_t* df = NULL;
    rill_error_t err = {0};
    RT_OK(rill_df_from_tar(&p, 1, &(rill_tar_opts_t){.columns = (rill_tar_column_t[]){{"cls", RILL_INT64}}, .ncolumns = 1},
                           &df, &err),
          err);
    table_t t;
    read_all(df, 2, 1, &t);
    cr_assert_eq(t.rows, 3, "%s: %lld rows", formats[i], (long long)t.rows);
    for (int k = 0; k < 3; k++) {
      char key[400], img[32];
      snprintf(key, sizeof key, "./%s%d", longname, k);
      cr_assert_eq(strncmp(t.text[k][col(&t, "key")], key, 63), 0, "%s: %s", formats[i], t.text[k][0]);
      cr_assert_eq(t.len[k][col(&t, "key")], (int64_t)strlen(key));
      snprintf(img, sizeof img, "image %d", k);
      cr_assert_str_eq(t.text[k][col(&t, "jpg")], img);
      cr_assert_eq(t.num[k][col(&t, "cls")], 10 + k);
    }
    rill_df_free(df);
  }
}

#if RILL_HAVE_JPEG
Test(tar, jpeg_members_decoded_and_a_damaged_one_named_by_its_sample) {
  uint8_t px[16 * 16 * 3];
  for (int i = 0; i < (int)sizeof px; i++) px[i] = (uint8_t)(i * 7);
  buf_t j = enc_jpeg(px, 16, 16, (jpeg_spec_t){.in = JCS_RGB});
  FILE* f = create("img.tar");
  char name[32];
  for (int k = 0; k < 6; k++) {
    snprintf(name, sizeof name, "s%d.jpg", k);
    tw_file(f, name, j.p, k == 4 ? (int64_t)j.n / 2 : (int64_t)j.n);
    snprintf(name, sizeof name, "s%d.cls", k);
    tw_file(f, name, k % 2 ? "1" : "0", 1);
  }
  tw_end(f);
  fclose(f);
  free(j.p);
  const char* p = rt_tpath("img.tar");
  rill_df_t* df = NULL;
  rill_error_t err = {0};
  RT_OK(rill_df_from_tar(&p, 1, &(rill_tar_opts_t){.columns = (rill_tar_column_t[]){{"cls", RILL_INT64}}, .ncolumns = 1},
                         &df, &err),
        err);
  int img = rill_image_decode(df, "img", rill_df_column(df, "jpg"), NULL, &err);
  cr_assert_geq(img, 0, "%s", err.message);
  rill_iter_t* it = NULL;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.columns = (int[]){img, rill_df_column(df, "cls")}, .ncolumns = 2,
                                              .threads = RILL_THREADS_NONE},
                      &it, &err),
        err);
  rill_row_t row;
  int rc, rows = 0;
  while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) {
    const rill_array_t* x = rill_row_get(&row, 0);
    const rill_array_t* y = rill_row_get(&row, 1);
    int64_t shape[3], nb;
    rill_array_cell_shape(x, 0, shape);
    cr_assert(shape[0] == 16 && shape[1] == 16 && shape[2] == 3);
    const uint8_t* q = rill_array_cell(x, 0, &nb);
    int far = 0;
    for (int i = 0; i < (int)sizeof px; i++) far += abs((int)q[i] - (int)px[i]) > 60;
    cr_assert_lt(far, (int)sizeof px / 10, "row %lld: %d pixels far from the encoded ones", (long long)row.index, far);
    cr_assert_eq(*(const int64_t*)rill_array_cell(y, 0, NULL), row.index % 2);
    rows++;
  }
  char want[1200];
  snprintf(want, sizeof want, "%s:s4", p);
  cr_assert_eq(rc, RILL_EFORMAT, "%d: %s", rc, err.message);
  cr_assert(strstr(err.message, want), "%s", err.message);
  cr_assert_eq(rows, 4);
  rill_iter_free(it);
  rill_df_free(df);
}
#endif

/* ---------------------------------------------------------------- saved indexes */

/* Makes folder rel of the test folder; its path into buf (rt_tpath's buffers rotate). */
static void make_folder(char* buf, size_t size, const char* rel) {
  snprintf(buf, size, "%s", rt_tpath(rel));
  cr_assert_eq(mkdir(buf, 0755), 0, "mkdir %s", buf);
}

/* The .rillidx files in folder dir. */
static int count_index_files(const char* dir) {
  DIR* d = opendir(dir);
  cr_assert(d, "cannot list %s", dir);
  int n = 0;
  for (struct dirent* e; (e = readdir(d));) n += strstr(e->d_name, ".rillidx") != NULL;
  closedir(d);
  return n;
}

/* The saved index file of archive rel (under the test folder) in folder dir. */
static const char* index_file(const char* dir, const char* rel) {
  static char file[PATH_MAX + 128];
  char real[PATH_MAX];
  cr_assert(realpath(rt_tpath(rel), real), "realpath %s", rel);
  cr_assert_eq(rill__tar_index_path(dir, real, file, sizeof file), RILL_OK);
  return file;
}

/* The rows of write_two's archives opened with o, and the walks it took. */
static int64_t rows_of_ab(const rill_tar_opts_t* o, table_t* t) {
  int64_t w0 = atomic_load(&rill__tar_walks);
  rill_df_t* df = open_ab(o);
  int64_t walks = atomic_load(&rill__tar_walks) - w0;
  read_all(df, 2, 0, t);
  rill_df_free(df);
  return walks;
}

Test(tar, saved_indexes_are_read_back_instead_of_the_headers) {
  write_two();
  char dir[PATH_MAX];
  make_folder(dir, sizeof dir, "idx");
  static table_t plain, saved, again;
  rill_tar_column_t cols[] = {{"cls", RILL_INT64, NULL}, {"json", RILL_STRING, NULL}};
  rill_tar_opts_t o = {.columns = cols, .ncolumns = 2}, oi = {.columns = cols, .ncolumns = 2, .index_dir = dir};
  cr_assert_eq(rows_of_ab(&o, &plain), 2);
  cr_assert_eq(rows_of_ab(&oi, &saved), 2, "the first open with index_dir walks and saves");
  cr_assert_eq(count_index_files(dir), 2);
  cr_assert_eq(rows_of_ab(&oi, &again), 0, "the second one reads the saved indexes");
  cr_assert(memcmp(&plain, &saved, sizeof plain) == 0 && memcmp(&plain, &again, sizeof plain) == 0);
  cr_assert_eq(plain.rows, 4);
  /* other columns' options over the same saved indexes: typed, renamed */
  rill_tar_column_t ren[] = {{"jpg", 0, "image"}, {"cls", RILL_INT64, "label"}};
  rill_tar_opts_t r = {.columns = ren, .ncolumns = 2}, ri = {.columns = ren, .ncolumns = 2, .index_dir = dir};
  cr_assert_eq(rows_of_ab(&r, &plain), 2);
  cr_assert_eq(rows_of_ab(&ri, &again), 0);
  cr_assert(memcmp(&plain, &again, sizeof plain) == 0);
  cr_assert_str_eq(again.names[2], "image");
  /* an archive changed after its index was saved is walked again, and its index rewritten */
  FILE* f = create("b.tar");
  tw_file(f, "003.cls", "-7", 2);
  tw_file(f, "003.jpg", "", 0);
  tw_file(f, "004.cls", "5", 1);
  tw_end(f);
  fclose(f);
  cr_assert_eq(rows_of_ab(&o, &plain), 2);
  cr_assert_eq(plain.rows, 5);
  cr_assert_eq(rows_of_ab(&oi, &saved), 1, "b.tar changed: walked again");
  cr_assert_eq(rows_of_ab(&oi, &again), 0, "and saved again");
  cr_assert(memcmp(&plain, &saved, sizeof plain) == 0 && memcmp(&plain, &again, sizeof plain) == 0);
  cr_assert_eq(count_index_files(dir), 2);
}

/* A saved index that is damaged, cut short, of another archive or of another version of the
 * archive is not used: the archive is walked again, the rows are the same, the file rewritten. */
Test(tar, damaged_or_foreign_saved_indexes_are_not_used) {
  write_two();
  char dir[PATH_MAX];
  make_folder(dir, sizeof dir, "idx");
  static table_t plain, got;
  rill_tar_opts_t o = {0}, oi = {.index_dir = dir};
  rows_of_ab(&o, &plain);
  cr_assert_eq(rows_of_ab(&oi, &got), 2);
  char fa[PATH_MAX + 128], fb[PATH_MAX + 128];
  snprintf(fa, sizeof fa, "%s", index_file(dir, "a.tar"));
  snprintf(fb, sizeof fb, "%s", index_file(dir, "b.tar"));
  struct stat st;
  cr_assert_eq(stat(fa, &st), 0, "a.tar's index saved as %s", fa);
  for (int64_t at = 0; at < st.st_size; at += st.st_size / 7 + 1) { /* one byte changed, anywhere */
    int fd = open(fa, O_RDWR);
    uint8_t byte;
    cr_assert_eq(pread(fd, &byte, 1, at), 1);
    byte ^= 0x20;
    cr_assert_eq(pwrite(fd, &byte, 1, at), 1);
    close(fd);
    cr_assert_eq(rows_of_ab(&oi, &got), 1, "byte %lld changed: a.tar walked again", (long long)at);
    cr_assert(memcmp(&plain, &got, sizeof plain) == 0);
  }
  cr_assert_eq(truncate(fa, st.st_size - 9), 0);
  cr_assert_eq(rows_of_ab(&oi, &got), 1, "a saved index cut short");
  cr_assert(memcmp(&plain, &got, sizeof plain) == 0);
  cr_assert_eq(truncate(fa, 0), 0);
  cr_assert_eq(rows_of_ab(&oi, &got), 1, "an empty file");
  /* b.tar's index under a.tar's name: not the same archive */
  char cmd[2 * PATH_MAX + 300], out[256];
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", fb, fa);
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 0);
  cr_assert_eq(rows_of_ab(&oi, &got), 1, "another archive's index");
  cr_assert(memcmp(&plain, &got, sizeof plain) == 0);
  cr_assert_eq(rows_of_ab(&oi, &got), 0);
  /* a folder where the index file would go: it cannot be saved, and the open still works */
  cr_assert_eq(unlink(fb), 0);
  cr_assert_eq(mkdir(fb, 0755), 0);
  cr_assert_eq(rows_of_ab(&oi, &got), 1);
  cr_assert_eq(rows_of_ab(&oi, &got), 1, "walked each time");
  cr_assert(memcmp(&plain, &got, sizeof plain) == 0);
  cr_assert_eq(count_index_files(dir), 2, "no temporary file left");
}

/* A saved index gives the errors a walk gives: its members go through the same checks. */
Test(tar, saved_indexes_give_the_errors_of_a_walk) {
  FILE* f = create("alt.tar");
  tw_file(f, "000.jpg", "j", 1);
  tw_file(f, "000.png", "p", 1);
  tw_end(f);
  fclose(f);
  char dir[PATH_MAX];
  make_folder(dir, sizeof dir, "idx");
  const char* paths[] = {rt_tpath("alt.tar")};
  rill_df_t* df = NULL;
  rill_error_t err = {0}, err2 = {0};
  RT_OK(rill_df_from_tar(paths, 1, &(rill_tar_opts_t){.index_dir = dir}, &df, &err), err); /* saved */
  rill_df_free(df);
  rill_tar_column_t alt[] = {{"jpg", 0, "image"}, {"png", 0, "image"}};
  int64_t w0 = atomic_load(&rill__tar_walks);
  RT_FAILS(rill_df_from_tar(paths, 1, &(rill_tar_opts_t){.columns = alt, .ncolumns = 2, .index_dir = dir}, &df, &err),
           RILL_EFORMAT, "sample \"000\" already has a member for column \"image\"", err);
  cr_assert_eq(atomic_load(&rill__tar_walks), w0, "from the saved index");
  RT_FAILS(rill_df_from_tar(paths, 1, &(rill_tar_opts_t){.columns = alt, .ncolumns = 2}, &df, &err2), RILL_EFORMAT,
           "already has a member", err2);
  cr_assert_str_eq(err.message, err2.message);
  /* index_dir must be a folder */
  RT_FAILS(rill_df_from_tar(paths, 1, &(rill_tar_opts_t){.index_dir = rt_tpath("none")}, &df, &err), RILL_EINVAL,
           "index_dir '", err);
  cr_assert(strstr(err.message, "none' is not a folder: No such file or directory"), "%s", err.message);
  RT_FAILS(rill_df_from_tar(paths, 1, &(rill_tar_opts_t){.index_dir = paths[0]}, &df, &err), RILL_EINVAL,
           "alt.tar' is not a folder", err);
  RT_FAILS(rill_df_from_tar(paths, 1, &(rill_tar_opts_t){.index_dir = ""}, &df, &err), RILL_EINVAL,
           "index_dir '' is not a folder", err);
}

/* Writes b.tar again with members `first` and `last` (names of write_two's sizes) and gives
 * it back its modification time: the same size and time, other headers. */
static void rewrite_b(const char* first, const char* last, const struct stat* was) {
  FILE* f = create("b.tar");
  tw_file(f, first, "-7", 2);
  tw_file(f, last, "", 0);
  tw_end(f);
  fclose(f);
  struct stat now;
  cr_assert_eq(stat(rt_tpath("b.tar"), &now), 0);
  cr_assert_eq(now.st_size, was->st_size);
  struct timespec t[2] = {was->st_atim, was->st_mtim};
  cr_assert_eq(utimensat(AT_FDCWD, rt_tpath("b.tar"), t, 0), 0);
}

/* An index is of the archive's bytes, not of its inode: a copy with the same time keeps it; an
 * archive of the same size and time whose first block or last member's header differs does
 * not. Its integers are little-endian. */
Test(tar, saved_indexes_follow_the_archives_bytes_not_its_inode) {
  write_two();
  char dir[PATH_MAX];
  make_folder(dir, sizeof dir, "idx");
  static table_t plain, got;
  rill_tar_opts_t o = {0}, oi = {.index_dir = dir};
  cr_assert_eq(rows_of_ab(&oi, &got), 2);
  /* the head: magic, version 2 and the archive's size, little-endian */
  struct stat sb;
  cr_assert_eq(stat(rt_tpath("b.tar"), &sb), 0);
  uint8_t head[24];
  int fd = open(index_file(dir, "b.tar"), O_RDONLY);
  cr_assert_eq(pread(fd, head, sizeof head, 0), (ssize_t)sizeof head);
  close(fd);
  cr_assert(memcmp(head, "RILLTIX\x01\x02\0\0\0\0\0\0\0", 16) == 0);
  uint64_t size = 0;
  for (int i = 0; i < 8; i++) size |= (uint64_t)head[16 + i] << (8 * i);
  cr_assert_eq(size, (uint64_t)sb.st_size);
  /* b.tar replaced by a copy of itself (another inode), its time kept */
  char cmd[2 * PATH_MAX + 64], out[256];
  snprintf(cmd, sizeof cmd, "cp -p '%s' '%s.new' && mv '%s.new' '%s'", rt_tpath("b.tar"), rt_tpath("b.tar"),
           rt_tpath("b.tar"), rt_tpath("b.tar"));
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 0, "%s", out);
  struct stat sc;
  cr_assert_eq(stat(rt_tpath("b.tar"), &sc), 0);
  cr_assert_neq(sc.st_ino, sb.st_ino);
  cr_assert_eq(rows_of_ab(&oi, &got), 0, "a copy keeps its index");
  /* the same size and time, another last member: the index would name the wrong column */
  rewrite_b("003.cls", "003.png", &sb);
  cr_assert_eq(rows_of_ab(&o, &plain), 2);
  cr_assert_str_eq(plain.names[plain.ncols - 1], "png");
  cr_assert_eq(rows_of_ab(&oi, &got), 1, "the last member's header changed: walked again");
  cr_assert(memcmp(&plain, &got, sizeof plain) == 0);
  /* and another first member */
  rewrite_b("003.txt", "003.png", &sb);
  cr_assert_eq(rows_of_ab(&o, &plain), 2);
  cr_assert_eq(rows_of_ab(&oi, &got), 1, "the first block changed: walked again");
  cr_assert(memcmp(&plain, &got, sizeof plain) == 0);
  cr_assert_eq(rows_of_ab(&oi, &got), 0);
}

/* rill_tar_index_prune removes what no open would use and keeps the rest. */
Test(tar, pruning_removes_the_indexes_no_open_would_use) {
  write_two();
  FILE* f = create("c.tar");
  tw_file(f, "009.cls", "1", 1);
  tw_end(f);
  fclose(f);
  char dir[PATH_MAX], cmd[3 * PATH_MAX], out[256];
  make_folder(dir, sizeof dir, "idx");
  const char* paths[] = {rt_tpath("a.tar"), rt_tpath("b.tar"), rt_tpath("c.tar")};
  rill_df_t* df = NULL;
  rill_error_t err = {0};
  RT_OK(rill_df_from_tar(paths, 3, &(rill_tar_opts_t){.index_dir = dir}, &df, &err), err);
  rill_df_free(df);
  cr_assert_eq(count_index_files(dir), 3);
  int64_t kept = -1, removed = -1;
  RT_OK(rill_tar_index_prune(dir, &kept, &removed, &err), err);
  cr_assert(kept == 3 && removed == 0, "kept %lld removed %lld", (long long)kept, (long long)removed);
  /* b.tar gone, c.tar changed, a.tar's index also under a name not its own, a file of an
   * older version, temporary files old and new, and files rill did not write */
  cr_assert_eq(unlink(rt_tpath("b.tar")), 0);
  f = create("c.tar");
  tw_file(f, "009.cls", "22", 2);
  tw_end(f);
  fclose(f);
  char fa[PATH_MAX + 128], misnamed[PATH_MAX + 64], old[PATH_MAX + 64], tmp_old[PATH_MAX + 160],
      tmp_new[PATH_MAX + 160], other[PATH_MAX + 64], folder[PATH_MAX + 64];
  snprintf(fa, sizeof fa, "%s", index_file(dir, "a.tar"));
  snprintf(misnamed, sizeof misnamed, "%s/0000000000000000-a.tar.rillidx", dir);
  snprintf(old, sizeof old, "%s/0123456789abcdef-old.tar.rillidx", dir);
  snprintf(tmp_old, sizeof tmp_old, "%s.77.0.tmp", fa);
  snprintf(tmp_new, sizeof tmp_new, "%s.78.0.tmp", fa);
  snprintf(other, sizeof other, "%s/notes.txt", dir);
  snprintf(folder, sizeof folder, "%s/sub.rillidx", dir);
  snprintf(cmd, sizeof cmd, "cp '%s' '%s'", fa, misnamed);
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 0, "%s", out);
  const char* small[] = {old, tmp_old, tmp_new, other};
  for (int i = 0; i < 4; i++) {
    FILE* w = fopen(small[i], "wb");
    cr_assert(w);
    fputs(i == 0 ? "RILLTIX\x01\x01\x02\x03\x04\x01\0\0\0" : "x", w);
    fclose(w);
  }
  struct timespec t[2] = {{.tv_sec = time(NULL) - 7200}, {.tv_sec = time(NULL) - 7200}};
  cr_assert_eq(utimensat(AT_FDCWD, tmp_old, t, 0), 0);
  cr_assert_eq(mkdir(folder, 0755), 0);
  RT_OK(rill_tar_index_prune(dir, &kept, &removed, &err), err);
  cr_assert(kept == 1 && removed == 4, "kept %lld removed %lld", (long long)kept, (long long)removed);
  struct stat st;
  cr_assert_eq(stat(fa, &st), 0, "a.tar's index kept");
  cr_assert_neq(stat(misnamed, &st), 0);
  cr_assert_neq(stat(old, &st), 0);
  cr_assert_neq(stat(tmp_old, &st), 0, "a temporary file over an hour old removed");
  cr_assert_eq(stat(tmp_new, &st), 0, "a recent one kept: its process may be saving");
  cr_assert_eq(stat(other, &st), 0);
  cr_assert_eq(stat(folder, &st), 0);
  cr_assert_eq(count_index_files(dir), 3, "a.tar's index, the recent temporary file and the folder");
  /* a.tar's index is still read, and c.tar's is saved again */
  int64_t w0 = atomic_load(&rill__tar_walks);
  const char* ac[] = {rt_tpath("a.tar"), rt_tpath("c.tar")};
  RT_OK(rill_df_from_tar(ac, 2, &(rill_tar_opts_t){.index_dir = dir}, &df, &err), err);
  rill_df_free(df);
  cr_assert_eq(atomic_load(&rill__tar_walks) - w0, 1, "only c.tar walked");
  RT_OK(rill_tar_index_prune(dir, NULL, NULL, &err), err);
  RT_OK(rill_tar_index_prune(dir, &kept, &removed, &err), err);
  cr_assert(kept == 2 && removed == 0, "kept %lld removed %lld", (long long)kept, (long long)removed);
  /* bad arguments */
  RT_FAILS(rill_tar_index_prune(NULL, &kept, &removed, &err), RILL_EINVAL, "no folder given", err);
  cr_assert(kept == 0 && removed == 0);
  RT_FAILS(rill_tar_index_prune("", NULL, NULL, &err), RILL_EINVAL, "no folder given", err);
  RT_FAILS(rill_tar_index_prune(rt_tpath("none"), NULL, NULL, &err), RILL_EINVAL, "none' is not a folder: No such file",
           err);
  RT_FAILS(rill_tar_index_prune(rt_tpath("a.tar"), NULL, NULL, &err), RILL_EINVAL, "a.tar' is not a folder: Not a directory",
           err);
}

/* ---------------------------------------------------------------- command-line tool */

/* rill index: saves the indexes of shards ahead (brace patterns expanded), then prunes. */
Test(tar, cli_index_saves_ahead_and_prunes) {
  const char* bin = getenv("RILL_BIN");
  if (!bin || !*bin) cr_skip_test("RILL_BIN not set (run through make test)");
  write_two();
  char idx[PATH_MAX], pattern[PATH_MAX];
  make_folder(idx, sizeof idx, "cli-idx");
  snprintf(pattern, sizeof pattern, "%s/{a,b}.tar", rt_tmpdir());
  rt_cmd_expect(0, "2 shards, 4 samples, indexed in", "'%s' index --index-dir '%s' '%s'", bin, idx, pattern);
  cr_assert_eq(count_index_files(idx), 2);
  static table_t got;
  cr_assert_eq(rows_of_ab(&(rill_tar_opts_t){.index_dir = idx}, &got), 0, "read from the indexes the command saved");
  cr_assert_eq(unlink(rt_tpath("b.tar")), 0);
  rt_cmd_expect(0, "1 index kept, 1 removed", "'%s' index --index-dir '%s' --prune", bin, idx);
  cr_assert_eq(count_index_files(idx), 1);
  rt_cmd_expect(1, "is not a folder", "'%s' index --index-dir '%s' '%s'", bin, rt_tpath("none"), rt_tpath("a.tar"));
  rt_cmd_expect(1, "rill index: ", "'%s' index --index-dir '%s' '%s'", bin, idx, rt_tpath("b.tar"));
  rt_cmd_expect(1, "rill index: rill_tar_index_prune: index_dir '", "'%s' index --index-dir '%s' --prune", bin,
                rt_tpath("none"));
  rt_cmd_expect(2, "missing --index-dir DIR", "'%s' index '%s'", bin, rt_tpath("a.tar"));
  rt_cmd_expect(2, "give shards, --prune or both", "'%s' index --index-dir '%s'", bin, idx);
  rt_cmd_expect(2, "unknown option '--bogus'", "'%s' index --index-dir '%s' --bogus", bin, idx);
  rt_cmd_expect(0, "usage: rill index --index-dir DIR", "'%s' index --help", bin);
}

/* rill head over shards (typed with --dtype), and rill bench images / demo / preview over
 * shards whose samples hold .jpg or .png images, a damaged one skipped and named. */
Test(tar, cli_head_and_image_commands_over_shards) {
  const char* bin = getenv("RILL_BIN");
  if (!bin || !*bin) cr_skip_test("RILL_BIN not set (run through make test)");
  char cmd[4096], out[16384];
  write_two();
  snprintf(cmd, sizeof cmd, "'%s' head '%s' '%s' --dtype cls=int64 --dtype json=string --format tsv 2>&1", bin,
           rt_tpath("a.tar"), rt_tpath("b.tar"));
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 0, "%s", out);
  cr_assert(strstr(out, "key\tpath\tcls\tjpg\tjson\n"), "%s", out);
  cr_assert(strstr(out, "\t12\t0x6a7065672d31\tNULL\n"), "%s", out); /* 001: cls " 12 ", jpg "jpeg-1" */
  cr_assert(strstr(out, "\t3\t0x6a7065672d30\t{\"a\":1}\n"), "%s", out);
  snprintf(cmd, sizeof cmd, "'%s' head '%s' --dtype cls=int65 2>&1", bin, rt_tpath("a.tar"));
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 2, "%s", out);
  cr_assert(strstr(out, "--dtype needs EXT=TYPE"), "%s", out);
  snprintf(cmd, sizeof cmd, "'%s' head '%s' --dtype clss=int64 2>&1", bin, rt_tpath("a.tar"));
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 1, "%s", out);
  cr_assert(strstr(out, "no member of the archives has extension \"clss\""), "%s", out);
#if RILL_HAVE_JPEG && RILL_HAVE_PNG
  uint8_t px[40 * 48 * 3];
  for (int i = 0; i < (int)sizeof px; i++) px[i] = (uint8_t)(i * 13);
  buf_t j = enc_jpeg(px, 48, 40, (jpeg_spec_t){.in = JCS_RGB});
  buf_t png = enc_png(px, 48, 40, PNG_COLOR_TYPE_RGB, 8, 0, NULL, 0, NULL, 0);
  for (int s = 0; s < 2; s++) {
    char rel[32], name[32];
    snprintf(rel, sizeof rel, "img%d.tar", s);
    FILE* f = create(rel);
    for (int k = 0; k < 5; k++) {
      int broken = s == 1 && k == 2;
      snprintf(name, sizeof name, "%d%02d.%s", s, k, k % 2 ? "png" : "jpg");
      if (broken) tw_file(f, name, "\xff\xd8\xff\xe0garbage", 11);
      else if (k % 2) tw_file(f, name, png.p, (int64_t)png.n);
      else tw_file(f, name, j.p, (int64_t)j.n);
      snprintf(name, sizeof name, "%d%02d.cls", s, k);
      tw_file(f, name, "1", 1);
    }
    tw_end(f);
    fclose(f);
  }
  free(j.p);
  free(png.p);
  snprintf(cmd, sizeof cmd, "'%s' bench images '%s' '%s' --size 32 --batch 4 --epochs 2 --threads 2 2>&1", bin,
           rt_tpath("img0.tar"), rt_tpath("img1.tar"));
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 0, "%s", out);
  cr_assert(strstr(out, "10 images, batch 4"), "%s", out);
  cr_assert(strstr(out, "setup (shard index + plan)"), "%s", out);
  cr_assert(strstr(out, "epoch 1: 9 images"), "%s", out);
  cr_assert(strstr(out, "skipped 1"), "%s", out);
  /* saved indexes: made by the first run, read by the second */
  char idx[PATH_MAX];
  make_folder(idx, sizeof idx, "cli-idx");
  for (int run = 0; run < 2; run++) {
    rt_cmd_expect(0, "epoch 0: 9 images", "'%s' bench images '%s' '%s' --size 32 --batch 4 --epochs 1 --index-dir '%s'",
                  bin, rt_tpath("img0.tar"), rt_tpath("img1.tar"), idx);
    cr_assert_eq(count_index_files(idx), 2);
  }
  rt_cmd_expect(1, "index_dir '", "'%s' preview '%s' -o '%s' --index-dir '%s'", bin, rt_tpath("img0.tar"),
                rt_tpath("grid.png"), rt_tpath("no-such-folder"));
  rt_cmd_expect(2, "--index-dir is for tar shards, not an ImageFolder tree", "'%s' demo '%s' --index-dir '%s'", bin,
                idx, idx);
  rt_cmd_expect(2, "rill bench images: --index-dir needs a folder", "'%s' bench images '%s' --index-dir", bin,
                rt_tpath("img0.tar"));
  snprintf(cmd, sizeof cmd, "cd '%s' && '%s' demo '%s' '%s' --size 32 --batch 4 2>&1", rt_tmpdir(), bin,
           rt_tpath("img0.tar"), rt_tpath("img1.tar"));
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 0, "%s", out);
  cr_assert(strstr(out, "9 images in 3 batches"), "%s", out);
  cr_assert(strstr(out, "img1.tar:102"), "the skipped sample named: %s", out);
  snprintf(cmd, sizeof cmd, "'%s' preview '%s' -o '%s' --size 32 --batch 5 2>&1", bin, rt_tpath("img0.tar"),
           rt_tpath("grid.png"));
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 0, "%s", out);
  cr_assert(strstr(out, "5 images of 32x32"), "%s", out);
  /* a folder among shards; a shard that is not a tar archive */
  snprintf(cmd, sizeof cmd, "'%s' demo '%s' '%s' 2>&1", bin, rt_tmpdir(), rt_tpath("img0.tar"));
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 2, "%s", out);
  cr_assert(strstr(out, "is a folder: give one ImageFolder tree, or tar shards"), "%s", out);
  snprintf(cmd, sizeof cmd, "'%s' bench images '%s' '%s' 2>&1", bin, rt_tpath("img0.tar"), rt_tpath("grid.png"));
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 1, "%s", out);
  cr_assert(strstr(out, "grid.png: byte 0: not a tar archive"), "%s", out);
#endif
}
