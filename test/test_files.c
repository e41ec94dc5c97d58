/* File sources (list of paths, list file, STRING column of paths, ImageFolder) and the
 * rill_image_decode map through the engine: good and bad files under RAISE, SKIP and NULL. */
#include <errno.h>
#include <ftw.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "image_common.h"

/* ---------------------------------------------------------------- helpers */

static int remove_entry(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

/* Removes this test's temporary directory. */
static void cleanup(void) { nftw(rt_tmpdir(), remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

static void mkdirs(const char* rel) {
  char p[1024];
  snprintf(p, sizeof p, "%s/%s", rt_tmpdir(), rel);
  for (char* s = p + strlen(rt_tmpdir()) + 1; *s; s++)
    if (*s == '/') {
      *s = 0;
      mkdir(p, 0777);
      *s = '/';
    }
  mkdir(p, 0777);
}

/* Iterates `col` of df (one row at a time, 2 worker threads). Returns rows seen; codes[i] and
 * msgs[i] get each next() result. */
typedef struct step {
  int rc;
  int64_t row, index;
  char msg[RILL_ERROR_MESSAGE_SIZE];
  int valid;
  int64_t shape[3];
  int64_t nbytes;
  uint8_t first[8];
} step_t;

static int iterate(rill_df_t* df, int col, step_t* steps, int max, rill_iter_stats_t* stats) {
  rill_error_t err = {0};
  rill_iter_t* it = NULL;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.columns = &col, .ncolumns = 1, .threads = 2}, &it, &err), err);
  int k = 0;
  for (;;) {
    rill_row_t row;
    rill_error_clear(&err);
    int rc = rill_iter_next(it, &row, &err);
    if (rc == RILL_END) break;
    cr_assert(k < max, "too many rows");
    step_t* s = &steps[k++];
    memset(s, 0, sizeof *s);
    s->rc = rc;
    s->row = err.row;
    snprintf(s->msg, sizeof s->msg, "%s", err.message);
    if (rc == RILL_OK) {
      const rill_array_t* a = rill_row_get(&row, 0);
      cr_assert_eq(a->length, 1);
      s->index = row.index;
      s->valid = rill_array_is_valid(a, 0);
      const void* cell = rill_array_cell(a, 0, &s->nbytes);
      if (a->type.ndim == 3) rill_array_cell_shape(a, 0, s->shape);
      memcpy(s->first, cell, s->nbytes < 8 ? (size_t)s->nbytes : 8);
    }
  }
  if (stats) rill_iter_stats(it, stats);
  rill_iter_free(it);
  return k;
}

/* ---------------------------------------------------------------- file lists */

Test(files, from_files_reads_bytes_on_demand, .fini = cleanup) {
  rt_write_file(rt_tpath("a.bin"), "hello", 5);
  rt_write_file(rt_tpath("b.bin"), "", 0);
  rt_write_file(rt_tpath("c.bin"), "\0\1\2world", 8);
  const char* paths[] = {rt_tpath("a.bin"), rt_tpath("b.bin"), rt_tpath("c.bin")};
  rill_error_t err = {0};
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_files(paths, 3, NULL, &df, &err), err);
  cr_assert_eq(rill_df_rows(df), 3);
  cr_assert_eq(rill_df_ncolumns(df), 2);
  int pc = rill_df_column(df, "path"), bc = rill_df_column(df, "bytes");
  cr_assert_eq(rill_df_field(df, pc)->type.dtype, RILL_STRING);
  cr_assert_eq(rill_df_field(df, bc)->type.dtype, RILL_BINARY);
  /* the file changes after the dataframe was made: bytes are read when pulled */
  rt_write_file(rt_tpath("a.bin"), "HELLO!", 6);
  rill_iter_t* it;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE}, &it, &err), err);
  const char* want[] = {"HELLO!", "", "\0\1\2world"};
  int64_t wantn[] = {6, 0, 8};
  for (int i = 0; i < 3; i++) {
    rill_row_t row;
    RT_OK(rill_iter_next(it, &row, &err), err);
    int64_t n;
    const char* p = rill_array_cell(rill_row_get(&row, pc), 0, &n);
    cr_assert_eq(n, (int64_t)strlen(paths[i]));
    cr_assert(memcmp(p, paths[i], (size_t)n) == 0);
    const void* b = rill_array_cell(rill_row_get(&row, bc), 0, &n);
    cr_assert_eq(n, wantn[i]);
    cr_assert(memcmp(b, want[i], (size_t)n) == 0);
  }
  rill_row_t row;
  cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
  rill_iter_free(it);
  rill_df_free(df);
}

/* An allocator that counts the blocks of at least `big` bytes. */
typedef struct big_blocks {
  size_t big;
  _Atomic int64_t n;
  _Atomic size_t largest;
} big_blocks_t;

static void* big_alloc(size_t size, size_t align, void* ctx) {
  big_blocks_t* b = ctx;
  if (size >= b->big) {
    atomic_fetch_add(&b->n, 1);
    if (size > atomic_load(&b->largest)) atomic_store(&b->largest, size);
  }
  return rt_sys_alloc(size, align);
}

/* Reads every row of the "bytes" column of df (one chunk: 32 rows, on the calling thread)
 * and checks each file's contents: file i holds sizes[i] bytes of (i + k) & 0xff. */
static void read_all_files(rill_iter_t* it, const int64_t* sizes) {
  rill_error_t err = {0};
  rill_row_t row;
  for (int i = 0; i < 32; i++) {
    RT_OK(rill_iter_next(it, &row, &err), err);
    int64_t n = 0;
    const uint8_t* b = rill_array_cell(rill_row_get(&row, 0), 0, &n);
    cr_assert_eq(n, sizes[i], "file %d: %lld bytes, expected %lld", i, (long long)n, (long long)sizes[i]);
    for (int64_t k = 0; k < n; k++) cr_assert_eq(b[k], (uint8_t)((i + k) & 0xff), "file %d byte %lld", i, (long long)k);
  }
  cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
}

/* read_all_files under an allocator that counts blocks of 16 KiB or more: the 32 files of
 * the chunk (`total` bytes) must take exactly one such block, at least `total` long. */
static void read_all_files_in_one_block(rill_iter_t* it, const int64_t* sizes, int64_t total, const char* who) {
  big_blocks_t bb = {.big = 16 << 10};
  rill_set_allocator(&(rill_allocator_t){big_alloc, rt_sys_free, &bb});
  read_all_files(it, sizes);
  rill_set_allocator(NULL);
  cr_assert_eq(atomic_load(&bb.n), 1, "%s: %lld blocks of 16 KiB or more for the chunk's files", who,
               (long long)atomic_load(&bb.n));
  cr_assert_geq(atomic_load(&bb.largest), (size_t)total);
}

static void write_sized(int i, int64_t size) {
  uint8_t* d = malloc((size_t)size + 1);
  for (int64_t k = 0; k < size; k++) d[k] = (uint8_t)((i + k) & 0xff);
  char name[32];
  snprintf(name, sizeof name, "f%02d.bin", i);
  rt_write_file(rt_tpath(name), d, (size_t)size);
  free(d);
}

/* The bytes of a call's files are reserved at once: one buffer for the chunk's 32 files
 * instead of one per doubling; files that grew or shrank since their size was learnt are
 * still read whole. The same for rill_file_read over a column of paths. */
Test(files, bytes_of_a_call_are_reserved_once, .fini = cleanup) {
  int64_t sizes[32], total = 0;
  const char* paths[32];
  char names[32][1024];
  for (int i = 0; i < 32; i++) {
    sizes[i] = 20000 + 100 * i;
    total += sizes[i];
    write_sized(i, sizes[i]);
    snprintf(names[i], sizeof names[i], "%s/f%02d.bin", rt_tmpdir(), i);
    paths[i] = names[i];
  }
  rill_error_t err = {0};
  rill_df_t* df;
  RT_OK(rill_df_from_files(paths, 32, NULL, &df, &err), err);
  int bc = rill_df_column(df, "bytes");
  rill_iter_t* it;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.columns = &bc, .ncolumns = 1, .threads = RILL_THREADS_NONE}, &it, &err),
        err);
  read_all_files_in_one_block(it, sizes, total, "file source");
  /* one file grows past its remembered size, another shrinks: read whole all the same */
  sizes[3] = 90000;
  sizes[5] = 10;
  write_sized(3, sizes[3]);
  write_sized(5, sizes[5]);
  for (int epoch = 1; epoch <= 2; epoch++) {
    RT_OK(rill_iter_set_epoch(it, epoch), err);
    read_all_files(it, sizes);
  }
  /* under 2 worker threads (cells split across tasks) too */
  rill_iter_free(it);
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.columns = &bc, .ncolumns = 1, .threads = 2}, &it, &err), err);
  read_all_files(it, sizes);
  rill_iter_free(it);
  rill_df_free(df);

  /* rill_file_read over a STRING column of the same paths reserves a call's files at once */
  total = 0;
  for (int i = 0; i < 32; i++) total += sizes[i];
  rill_array_t* a;
  RT_OK(rill_array_new(rill_type_scalar(RILL_STRING), 32, &a, &err), err);
  for (int i = 0; i < 32; i++) RT_OK(rill_array_set_var(a, i, paths[i], (int64_t)strlen(paths[i]), NULL), err);
  const char* names_col[] = {"file"};
  RT_OK(rill_df_from_arrays(names_col, (const rill_array_t* const*)&a, 1, 1, &df, &err), err);
  rill_array_release(a);
  int rc = rill_file_read(df, "data", 0, NULL, &err);
  cr_assert_geq(rc, 0, "%s", err.message);
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.columns = &rc, .ncolumns = 1, .threads = RILL_THREADS_NONE}, &it, &err),
        err);
  read_all_files_in_one_block(it, sizes, total, "rill_file_read");
  rill_iter_free(it);
  rill_df_free(df);
}

Test(files, missing_file_under_each_policy, .fini = cleanup) {
  rt_write_file(rt_tpath("m0.bin"), "zero", 4);
  rt_write_file(rt_tpath("m2.bin"), "two", 3);
  mkdirs("adir");
  const char* paths[] = {rt_tpath("m0.bin"), rt_tpath("nope/missing.bin"), rt_tpath("m2.bin"), rt_tpath("adir")};
  rill_error_t err = {0};
  rill_df_t* df;
  step_t s[8];
  rill_iter_stats_t st;
  /* RAISE: the error names the file and the system's reason; the iterator goes on */
  RT_OK(rill_df_from_files(paths, 4, NULL, &df, &err), err);
  int n = iterate(df, rill_df_column(df, "bytes"), s, 8, &st);
  cr_assert_eq(n, 4);
  cr_assert_eq(s[0].rc, RILL_OK);
  cr_assert_eq(s[1].rc, RILL_EIO);
  cr_assert_eq(s[1].row, 1);
  cr_assert(strstr(s[1].msg, "nope/missing.bin") && strstr(s[1].msg, "No such file or directory"), "%s",
            s[1].msg);
  cr_assert_eq(s[2].rc, RILL_OK);
  cr_assert_eq(s[2].nbytes, 3);
  cr_assert_eq(s[3].rc, RILL_EIO);
  cr_assert(strstr(s[3].msg, "adir") && strstr(s[3].msg, "Is a directory"), "%s", s[3].msg);
  cr_assert_eq(st.errors, 2);
  rill_df_free(df);
  /* SKIP: dropped and counted */
  RT_OK(rill_df_from_files(paths, 4, &(rill_files_opts_t){.on_error = RILL_ON_ERROR_SKIP}, &df, &err), err);
  n = iterate(df, rill_df_column(df, "bytes"), s, 8, &st);
  cr_assert_eq(n, 2);
  cr_assert(s[0].rc == RILL_OK && s[0].index == 0 && s[0].nbytes == 4);
  cr_assert(s[1].rc == RILL_OK && s[1].index == 2 && memcmp(s[1].first, "two", 3) == 0);
  cr_assert_eq(st.skipped, 2);
  rill_df_free(df);
  /* NULL: a null cell */
  RT_OK(rill_df_from_files(paths, 4, &(rill_files_opts_t){.on_error = RILL_ON_ERROR_NULL}, &df, &err), err);
  n = iterate(df, rill_df_column(df, "bytes"), s, 8, &st);
  cr_assert_eq(n, 4);
  cr_assert(s[0].valid && !s[1].valid && s[2].valid && !s[3].valid);
  cr_assert_eq(st.nulled, 2);
  rill_df_free(df);
}

Test(files, bad_arguments, .fini = cleanup) {
  rill_error_t err = {0};
  rill_df_t* df = NULL;
  const char* paths[] = {"a", NULL};
  RT_FAILS(rill_df_from_files(paths, 2, NULL, &df, &err), RILL_EINVAL, "path 1 is NULL", err);
  RT_FAILS(rill_df_from_files(NULL, 2, NULL, &df, &err), RILL_EINVAL, "required", err);
  RT_FAILS(rill_df_from_file_list(rt_tpath("no-such-list.txt"), NULL, &df, &err), RILL_EIO, "no-such-list.txt", err);
  cr_assert(strstr(err.message, "No such file"), "%s", err.message);
  RT_FAILS(rill_df_from_image_folder(rt_tpath("no-such-root"), NULL, &df, &err), RILL_EIO, "no-such-root", err);
  RT_OK(rill_df_from_files(paths, 1, NULL, &df, &err), err);
  RT_FAILS(rill_file_read(df, "x", rill_df_column(df, "bytes"), NULL, &err), RILL_EINVAL, "is not STRING", err);
  RT_FAILS(rill_file_read(df, "x", 99, NULL, &err), RILL_EINVAL, "unknown column 99", err);
  RT_FAILS(rill_image_decode(df, "img", rill_df_column(df, "path"), NULL, &err), RILL_EINVAL, "is not BINARY", err);
  RT_FAILS(rill_image_decode(df, "img", rill_df_column(df, "bytes"), &(rill_decode_opts_t){.channels = 2}, &err),
           RILL_EINVAL, "channels must be 1, 3 or 4", err);
  RT_FAILS(rill_image_decode(df, "img", rill_df_column(df, "bytes"), &(rill_decode_opts_t){.path_column = "nope"},
                             &err),
           RILL_EINVAL, "no STRING column 'nope'", err);
  const char* const* names;
  int count;
  RT_FAILS(rill_image_folder_classes(df, &names, &count, &err), RILL_EINVAL, "rill_df_from_image_folder", err);
  rill_df_free(df);
}

Test(files, list_file_resolves_relative_paths, .fini = cleanup) {
  mkdirs("lst/sub");
  rt_write_file(rt_tpath("lst/sub/one.txt"), "1", 1);
  rt_write_file(rt_tpath("lst/two.txt"), "22", 2);
  rt_write_file(rt_tpath("abs.txt"), "333", 3);
  char list[2048];
  snprintf(list, sizeof list, "sub/one.txt\r\n\n%s\ntwo.txt", rt_tpath("abs.txt"));
  rt_write_file(rt_tpath("lst/files.txt"), list, strlen(list));
  rill_error_t err = {0};
  rill_df_t* df;
  RT_OK(rill_df_from_file_list(rt_tpath("lst/files.txt"), NULL, &df, &err), err);
  cr_assert_eq(rill_df_rows(df), 3);
  step_t s[4];
  int n = iterate(df, rill_df_column(df, "bytes"), s, 4, NULL);
  cr_assert_eq(n, 3);
  cr_assert(s[0].rc == RILL_OK && s[0].nbytes == 1);
  cr_assert(s[1].rc == RILL_OK && s[1].nbytes == 3);
  cr_assert(s[2].rc == RILL_OK && s[2].nbytes == 2);
  n = iterate(df, rill_df_column(df, "path"), s, 4, NULL);
  cr_assert(memcmp(s[0].first, rt_tpath("lst/sub/one.txt"), 8) == 0);
  rill_df_free(df);
  /* an empty list is an empty dataframe */
  rt_write_file(rt_tpath("empty.txt"), "\n\n", 2);
  RT_OK(rill_df_from_file_list(rt_tpath("empty.txt"), NULL, &df, &err), err);
  cr_assert_eq(rill_df_rows(df), 0);
  rill_df_free(df);
}

Test(files, file_read_map_over_a_string_column, .fini = cleanup) {
  rt_write_file(rt_tpath("r1.bin"), "abc", 3);
  rill_error_t err = {0};
  rill_array_t* a;
  RT_OK(rill_array_new(rill_type_scalar(RILL_STRING), 3, &a, &err), err);
  const char* p = rt_tpath("r1.bin");
  RT_OK(rill_array_set_var(a, 0, p, (int64_t)strlen(p), NULL), err);
  RT_OK(rill_array_set_var(a, 1, NULL, 0, NULL), err);
  RT_OK(rill_array_set_null(a, 1), err);
  const char* q = rt_tpath("r-missing.bin");
  RT_OK(rill_array_set_var(a, 2, q, (int64_t)strlen(q), NULL), err);
  rill_df_t* df;
  const char* names[] = {"file"};
  RT_OK(rill_df_from_arrays(names, (const rill_array_t* const*)&a, 1, 1, &df, &err), err);
  rill_array_release(a);
  int col = rill_file_read(df, "data", 0, NULL, &err);
  cr_assert(col >= 0, "%s", err.message);
  step_t s[4];
  int n = iterate(df, col, s, 4, NULL);
  cr_assert_eq(n, 3);
  cr_assert(s[0].rc == RILL_OK && s[0].valid && s[0].nbytes == 3 && memcmp(s[0].first, "abc", 3) == 0);
  cr_assert(s[1].rc == RILL_OK && !s[1].valid);
  cr_assert_eq(s[2].rc, RILL_EIO);
  cr_assert_eq(s[2].row, 2);
  cr_assert(strstr(s[2].msg, "r-missing.bin: cannot open: No such file or directory"), "%s", s[2].msg);
  rill_df_free(df);
}

/* ---------------------------------------------------------------- ImageFolder */

Test(folder, classes_labels_and_sorting, .fini = cleanup) {
  mkdirs("root/b_dogs/nested");
  mkdirs("root/a_cats");
  mkdirs("root/.hidden");
  mkdirs("root/c_empty");
  rt_write_file(rt_tpath("root/b_dogs/z.JPG"), "1", 1);
  rt_write_file(rt_tpath("root/b_dogs/a.png"), "2", 1);
  rt_write_file(rt_tpath("root/b_dogs/nested/m.jpeg"), "3", 1);
  rt_write_file(rt_tpath("root/b_dogs/notes.txt"), "4", 1);
  rt_write_file(rt_tpath("root/a_cats/k.jpg"), "5", 1);
  rt_write_file(rt_tpath("root/a_cats/.x.jpg"), "6", 1);
  rt_write_file(rt_tpath("root/.hidden/h.jpg"), "7", 1);
  rt_write_file(rt_tpath("root/top.jpg"), "8", 1);
  rt_write_file(rt_tpath("root/b_dogs/w.WebP"), "9", 1);
  rill_error_t err = {0};
  rill_df_t* df;
  RT_OK(rill_df_from_image_folder(rt_tpath("root"), NULL, &df, &err), err);
  cr_assert_eq(rill_df_rows(df), 5);
  cr_assert_eq(rill_df_ncolumns(df), 3);
  int lc = rill_df_column(df, "label");
  cr_assert_eq(rill_df_field(df, lc)->type.dtype, RILL_INT64);
  const char* const* names;
  int count;
  RT_OK(rill_image_folder_classes(df, &names, &count, &err), err);
  cr_assert_eq(count, 3);
  cr_assert_str_eq(names[0], "a_cats");
  cr_assert_str_eq(names[1], "b_dogs");
  cr_assert_str_eq(names[2], "c_empty");
  rill_iter_t* it;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE}, &it, &err), err);
  const char* want[] = {"root/a_cats/k.jpg", "root/b_dogs/a.png", "root/b_dogs/nested/m.jpeg", "root/b_dogs/w.WebP",
                        "root/b_dogs/z.JPG"};
  int64_t labels[] = {0, 1, 1, 1, 1};
  for (int i = 0; i < 5; i++) {
    rill_row_t row;
    RT_OK(rill_iter_next(it, &row, &err), err);
    int64_t n;
    const char* p = rill_array_cell(rill_row_get(&row, rill_df_column(df, "path")), 0, &n);
    const char* w = rt_tpath(want[i]);
    cr_assert(n == (int64_t)strlen(w) && memcmp(p, w, (size_t)n) == 0, "row %d: %.*s", i, (int)n, p);
    cr_assert_eq(((const int64_t*)rill_row_get(&row, lc)->data)[0], labels[i]);
  }
  rill_iter_free(it);
  rill_df_free(df);
  /* every file */
  RT_OK(rill_df_from_image_folder(rt_tpath("root"), &(rill_files_opts_t){.all_files = 1}, &df, &err), err);
  cr_assert_eq(rill_df_rows(df), 6);
  rill_df_free(df);
  /* a root without images */
  mkdirs("bare/x");
  rt_write_file(rt_tpath("bare/x/readme.txt"), "r", 1);
  RT_FAILS(rill_df_from_image_folder(rt_tpath("bare"), NULL, &df, &err), RILL_EFORMAT,
           "no image files in class sub-folders (.jpg .jpeg .png .webp)", err);
}

/* ---------------------------------------------------------------- decoding through the engine */


/* ---------------------------------------------------------------- special files */

/* Ends the test process if a call blocks (an open() waiting on a FIFO never returns). */
static void guard(unsigned seconds) { alarm(seconds); }

/* Paths and class names are text: a name that is not UTF-8 (Linux allows any bytes) is an
 * error naming it when the dataframe is made, never a string cell of other bytes. */
Test(folder, names_must_be_utf8, .fini = cleanup) {
  mkdirs("ok/cats");
  rt_write_file(rt_tpath("ok/cats/caf\xc3\xa9.jpg"), "1", 1);
  rill_error_t err = {0};
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_image_folder(rt_tpath("ok"), NULL, &df, &err), err);
  cr_assert_eq(rill_df_rows(df), 1);
  rill_df_free(df);
  rt_write_file(rt_tpath("ok/cats/caf\xe9.jpg"), "2", 1);
  RT_FAILS(rill_df_from_image_folder(rt_tpath("ok"), NULL, &df, &err), RILL_EFORMAT,
           "/ok/cats/caf\xe9.jpg: the path is not UTF-8 text (byte 0xE9 at byte", err);
  cr_assert_null(df);
  mkdirs("cls/gr\xf6n");
  rt_write_file(rt_tpath("cls/gr\xf6n/x.jpg"), "3", 1);
  RT_FAILS(rill_df_from_image_folder(rt_tpath("cls"), NULL, &df, &err), RILL_EFORMAT,
           "gr\xf6n: the class name is not UTF-8 text (byte 0xF6 at byte 2); paths and class names are text: rename it",
           err);
  const char* paths[] = {"a.jpg", "b\xff.jpg"};
  RT_FAILS(rill_df_from_files(paths, 2, NULL, &df, &err), RILL_EFORMAT,
           "b\xff.jpg: the path is not UTF-8 text (byte 0xFF at byte 1)", err);
}

Test(files, fifo_is_a_row_error_not_a_wait, .fini = cleanup, .timeout = 10) {
  guard(8);
  mkdirs("ff/cls");
  cr_assert_eq(mkfifo(rt_tpath("ff/cls/x.jpg"), 0600), 0);
  rill_error_t err = {0};
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_image_folder(rt_tpath("ff"), NULL, &df, &err), err);
  cr_assert_eq(rill_df_rows(df), 1);
  step_t steps[2];
  int n = iterate(df, rill_df_column(df, "bytes"), steps, 2, NULL);
  cr_assert_eq(n, 1);
  cr_assert_eq(steps[0].rc, RILL_EIO, "%d %s", steps[0].rc, steps[0].msg);
  cr_assert(strstr(steps[0].msg, "x.jpg") && strstr(steps[0].msg, "not a regular file"), "%s", steps[0].msg);
  rill_df_free(df);
  /* a list file that is a FIFO */
  cr_assert_eq(mkfifo(rt_tpath("list.txt"), 0600), 0);
  RT_FAILS(rill_df_from_file_list(rt_tpath("list.txt"), NULL, &df, &err), RILL_EIO, "not a regular file", err);
  cr_assert(strstr(err.message, "list.txt"), "%s", err.message);
  /* `rill head` on a FIFO fails at once */
  const char* bin = getenv("RILL_BIN");
  if (bin && *bin) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' head '%s' 2>&1", bin, rt_tpath("list.txt"));
    FILE* f = popen(cmd, "r");
    cr_assert(f);
    char out[4096] = {0};
    size_t got = fread(out, 1, sizeof out - 1, f);
    out[got] = 0;
    int st = pclose(f);
    cr_assert_neq(st, 0, "%s", out);
    cr_assert(strstr(out, "not a regular file"), "%s", out);
  }
  alarm(0);
}

Test(files, zero_size_proc_file_is_read_to_eof, .fini = cleanup) {
  struct stat st;
  if (stat("/proc/self/status", &st) != 0) cr_skip_test("no /proc");
  cr_assert_eq(st.st_size, 0, "/proc reports its size as 0");
  const char* paths[] = {"/proc/self/status"};
  rill_error_t err = {0};
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_files(paths, 1, NULL, &df, &err), err);
  step_t steps[1];
  cr_assert_eq(iterate(df, rill_df_column(df, "bytes"), steps, 1, NULL), 1);
  cr_assert_eq(steps[0].rc, RILL_OK, "%s", steps[0].msg);
  cr_assert(steps[0].nbytes > 100, "read %lld bytes", (long long)steps[0].nbytes);
  cr_assert(memcmp(steps[0].first, "Name:", 5) == 0);
  rill_df_free(df);
}

Test(folder, symlinks_are_walked_once, .fini = cleanup, .timeout = 10) {
  guard(8);
  mkdirs("lk/a/deep");
  mkdirs("lk/c");
  rt_write_file(rt_tpath("lk/a/x.png"), "x", 1);
  rt_write_file(rt_tpath("lk/a/deep/y.png"), "y", 1);
  rt_write_file(rt_tpath("lk/c/z.png"), "z", 1);
  cr_assert_eq(symlink("..", rt_tpath("lk/a/deep/up")), 0);      /* a loop through an ancestor */
  cr_assert_eq(symlink(".", rt_tpath("lk/a/self")), 0);          /* a loop on itself */
  cr_assert_eq(symlink(rt_tpath("lk"), rt_tpath("lk/a/root")), 0);  /* the root */
  cr_assert_eq(symlink(rt_tpath("lk/c"), rt_tpath("lk/a/toc")), 0); /* another class */
  cr_assert_eq(symlink("a", rt_tpath("lk/b")), 0);               /* a class that is another class */
  cr_assert_eq(symlink("z.png", rt_tpath("lk/c/w.png")), 0);     /* a link to a file: a row */
  mkdirs("out1/o");
  mkdirs("out2");
  rt_write_file(rt_tpath("out1/o/q.png"), "q", 1);
  rt_write_file(rt_tpath("out2/r.png"), "r", 1);
  cr_assert_eq(symlink(rt_tpath("out1"), rt_tpath("lk/d")), 0);     /* a class kept elsewhere */
  cr_assert_eq(symlink(rt_tpath("out2"), rt_tpath("lk/a/more")), 0); /* a class's folder kept elsewhere */
  rill_error_t err = {0};
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_image_folder(rt_tpath("lk"), NULL, &df, &err), err);
  const char* const* names;
  int count;
  RT_OK(rill_image_folder_classes(df, &names, &count, &err), err);
  cr_assert_eq(count, 3, "classes: %d", count);
  cr_assert_str_eq(names[0], "a");
  cr_assert_str_eq(names[1], "c");
  cr_assert_str_eq(names[2], "d");
  cr_assert_eq(rill_df_rows(df), 6, "rows: %lld", (long long)rill_df_rows(df)); /* y, r, x; w, z; q */
  rill_iter_t* it;
  RT_OK(rill_iter_new(df, NULL, &it, &err), err);
  const char* want[6] = {"lk/a/deep/y.png", "lk/a/more/r.png", "lk/a/x.png", "lk/c/w.png", "lk/c/z.png", "lk/d/o/q.png"};
  rill_row_t row;
  for (int r = 0; r < 6; r++) {
    RT_OK(rill_iter_next(it, &row, &err), err);
    int64_t len;
    const char* path = rill_array_cell(rill_row_get(&row, 0), 0, &len);
    cr_assert(len >= (int64_t)strlen(want[r]) && !memcmp(path + len - strlen(want[r]), want[r], strlen(want[r])),
              "row %d: %.*s", r, (int)len, path);
  }
  rill_iter_free(it);
  rill_df_free(df);
  alarm(0);
}

#if RILL_HAVE_JPEG && RILL_HAVE_PNG

static uint8_t px_at(int x, int y, int c) { return (uint8_t)((x * 7 + y * 3 + c * 50) & 0xff); }

static uint8_t* make_px(int w, int h) {
  uint8_t* px = malloc((size_t)w * h * 3);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int k = 0; k < 3; k++) px[((size_t)y * w + x) * 3 + k] = px_at(x, y, k);
  return px;
}

/* libjpeg's defaults: quality 75, 2x2 luma sampling */
static void write_jpeg(const char* path, int w, int h, int cut_percent, int big) {
  uint8_t* px = make_px(w, h);
  buf_t b = enc_jpeg(px, w, h, (jpeg_spec_t){.in = JCS_RGB, .quality = 75, .hs = 2, .vs = 2});
  free(px);
  uint8_t* out = b.p;
  size_t size = b.n;
  if (big)
    for (size_t i = 2; i + 9 < size; i++)
      if (out[i] == 0xff && out[i + 1] == 0xc0) {
        out[i + 5] = 0xfd, out[i + 6] = 0xe8, out[i + 7] = 0xfd, out[i + 8] = 0xe8; /* 65000 x 65000 */
        break;
      }
  rt_write_file(path, out, cut_percent ? size * (size_t)cut_percent / 100 : size);
  free(out);
}

static void write_png(const char* path, int w, int h) {
  uint8_t* px = make_px(w, h);
  buf_t b = enc_png(px, w, h, PNG_COLOR_TYPE_RGB, 8, 0, NULL, 0, NULL, 0);
  free(px);
  rt_write_file(path, b.p, b.n);
  free(b.p);
}

/* good.jpg, empty.jpg, trunc.jpg, png-named.jpg, random.jpg, huge.jpg, anim.jpg (GIF) */
static const char* const bad_names[] = {"good.jpg", "empty.jpg", "trunc.jpg", "png-named.jpg",
                                        "random.jpg", "huge.jpg", "anim.jpg"};

static rill_df_t* bad_set(const rill_decode_opts_t* dopts, int* col) {
  mkdirs("imgs");
  write_jpeg(rt_tpath("imgs/good.jpg"), 40, 30, 0, 0);
  rt_write_file(rt_tpath("imgs/empty.jpg"), "", 0);
  write_jpeg(rt_tpath("imgs/trunc.jpg"), 64, 64, 60, 0);
  write_png(rt_tpath("imgs/png-named.jpg"), 20, 10);
  uint8_t junk[3000];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)(i * 2654435761u >> 13);
  rt_write_file(rt_tpath("imgs/random.jpg"), junk, sizeof junk);
  write_jpeg(rt_tpath("imgs/huge.jpg"), 16, 16, 0, 1);
  rt_write_file(rt_tpath("imgs/anim.jpg"), "GIF89a\x01\0\x01\0\0\0\0;", 14);
  const char* paths[7];
  for (int i = 0; i < 7; i++) {
    static char b[7][1024];
    snprintf(b[i], sizeof b[i], "%s/imgs/%s", rt_tmpdir(), bad_names[i]);
    paths[i] = b[i];
  }
  rill_error_t err = {0};
  rill_df_t* df;
  RT_OK(rill_df_from_files(paths, 7, NULL, &df, &err), err);
  *col = rill_image_decode(df, "img", rill_df_column(df, "bytes"), dopts, &err);
  cr_assert(*col >= 0, "%s", err.message);
  return df;
}

Test(decode_map, raise_names_row_and_file, .fini = cleanup) {
  int col;
  rill_df_t* df = bad_set(NULL, &col);
  const rill_field_t* f = rill_df_field(df, col);
  cr_assert_eq(f->type.dtype, RILL_UINT8);
  cr_assert_eq(f->type.ndim, 3);
  cr_assert(f->type.shape[0] == -1 && f->type.shape[1] == -1 && f->type.shape[2] == 3);
  step_t s[8];
  rill_iter_stats_t st;
  int n = iterate(df, col, s, 8, &st);
  cr_assert_eq(n, 7);
  cr_assert_eq(s[0].rc, RILL_OK);
  cr_assert(s[0].shape[0] == 30 && s[0].shape[1] == 40 && s[0].shape[2] == 3);
  cr_assert_eq(s[0].nbytes, 30 * 40 * 3);
  cr_assert(abs((int)s[0].first[0] - px_at(0, 0, 0)) <= 3 && abs((int)s[0].first[4] - px_at(1, 0, 1)) <= 3);
  struct { int rc; const char* what; } want[] = {{RILL_OK, NULL},
                                                  {RILL_EFORMAT, "empty.jpg: empty file"},
                                                  {RILL_EFORMAT, "trunc.jpg: corrupt JPEG data (Premature end"},
                                                  {RILL_OK, NULL},
                                                  {RILL_ENOTSUP, "random.jpg: unsupported image format"},
                                                  {RILL_ERANGE, "huge.jpg: image of 65000x65000 pixels exceeds"},
                                                  {RILL_ENOTSUP, "anim.jpg: unsupported image format (GIF)"}};
  for (int i = 1; i < 7; i++) {
    cr_assert_eq(s[i].rc, want[i].rc, "row %d: rc %d (%s)", i, s[i].rc, s[i].msg);
    if (want[i].what) {
      cr_assert_eq(s[i].row, i);
      cr_assert(strstr(s[i].msg, want[i].what), "row %d: '%s' lacks '%s'", i, s[i].msg, want[i].what);
      cr_assert(strstr(s[i].msg, "row "), "%s", s[i].msg);
    }
  }
  /* the PNG named .jpg decodes exactly */
  cr_assert(s[3].shape[0] == 10 && s[3].shape[1] == 20);
  for (int k = 0; k < 8; k++) cr_assert_eq(s[3].first[k], px_at(k / 3, 0, k % 3));
  cr_assert_eq(st.errors, 5);
  rill_df_free(df);
}

Test(decode_map, skip_drops_and_counts, .fini = cleanup) {
  int col;
  rill_df_t* df = bad_set(&(rill_decode_opts_t){.on_error = RILL_ON_ERROR_SKIP}, &col);
  step_t s[8];
  rill_iter_stats_t st;
  int n = iterate(df, col, s, 8, &st);
  cr_assert_eq(n, 2);
  cr_assert(s[0].rc == RILL_OK && s[0].index == 0);
  cr_assert(s[1].rc == RILL_OK && s[1].index == 3);
  cr_assert_eq(st.skipped, 5);
  rill_df_free(df);
}

Test(decode_map, null_policy_and_channels, .fini = cleanup) {
  int col;
  rill_df_t* df = bad_set(&(rill_decode_opts_t){.on_error = RILL_ON_ERROR_NULL, .channels = 4}, &col);
  cr_assert(rill_df_field(df, col)->nullable);
  step_t s[8];
  rill_iter_stats_t st;
  int n = iterate(df, col, s, 8, &st);
  cr_assert_eq(n, 7);
  int valid[] = {1, 0, 0, 1, 0, 0, 0};
  for (int i = 0; i < 7; i++) cr_assert_eq(s[i].valid, valid[i], "row %d", i);
  cr_assert_eq(s[3].shape[2], 4);
  cr_assert_eq(s[3].first[3], 255);
  cr_assert_eq(st.nulled, 5);
  rill_df_free(df);
  df = bad_set(&(rill_decode_opts_t){.on_error = RILL_ON_ERROR_SKIP, .channels = 1, .max_pixels = 1000}, &col);
  n = iterate(df, col, s, 8, &st);
  cr_assert_eq(n, 1); /* 40x30 = 1200 pixels is over the limit now; the 20x10 PNG is not */
  cr_assert(s[0].index == 3 && s[0].shape[0] == 10 && s[0].shape[1] == 20 && s[0].shape[2] == 1);
  rill_df_free(df);
}

/* The training pipeline over an ImageFolder of JPEGs of several sizes (and one truncated
 * file): folder -> shuffle -> random resized crop 16 -> normalize with flip, float32 CHW ->
 * batch 8. Returns the batched dataframe (the others are freed with it). */
static rill_df_t* crop_batches(rill_on_error_t on_error) {
  mkdirs("tree/a");
  mkdirs("tree/b");
  for (int i = 0; i < 20; i++) {
    char name[64];
    snprintf(name, sizeof name, "tree/%c/%02d.jpg", i % 2 ? 'b' : 'a', i);
    write_jpeg(rt_tpath(name), 24 + 7 * i, 20 + 5 * (i % 7), 0, 0);
  }
  write_jpeg(rt_tpath("tree/b/trunc.jpg"), 64, 64, 60, 0);
  rill_error_t err = {0};
  rill_df_t *files, *sh, *b;
  RT_OK(rill_df_from_image_folder(rt_tpath("tree"), NULL, &files, &err), err);
  RT_OK(rill_df_shuffle(files, 3, &sh, &err), err);
  rill_df_free(files);
  int img = rill_image_random_resized_crop(sh, "img", rill_df_column(sh, "bytes"),
                                           &(rill_rrc_opts_t){.size = {16, 16}, .on_error = on_error}, &err);
  cr_assert(img >= 0, "%s", err.message);
  int x = rill_image_normalize(sh, "x", img,
                               &(rill_normalize_opts_t){.flip = 0.5, .mean = {0.5, 0.4, 0.3}, .std = {0.2, 0.2, 0.2},
                                                        .dtype = RILL_FLOAT32, .layout = RILL_LAYOUT_CHW},
                               &err);
  cr_assert(x >= 0, "%s", err.message);
  RT_OK(rill_df_batch(sh, (int[]){x, rill_df_column(sh, "label")}, 2, 8, NULL, &b, &err), err);
  rill_df_free(sh);
  return b;
}

/* A batch's images and labels, copied. */
typedef struct batch_copy {
  int64_t n;
  float x[8 * 3 * 16 * 16];
  int64_t label[8];
} batch_copy_t;

static void copy_batch(const rill_row_t* row, batch_copy_t* c) {
  const rill_array_t* x = rill_row_get(row, 0);
  c->n = x->length;
  cr_assert(c->n > 0 && c->n <= 8);
  memcpy(c->x, x->data, (size_t)c->n * 3 * 16 * 16 * sizeof(float));
  memcpy(c->label, rill_row_get(row, 1)->data, (size_t)c->n * sizeof(int64_t));
}

static void same_batch(const batch_copy_t* a, const batch_copy_t* b) {
  cr_assert_eq(a->n, b->n);
  cr_assert(memcmp(a->x, b->x, (size_t)a->n * 3 * 16 * 16 * sizeof(float)) == 0, "pixels differ");
  cr_assert(memcmp(a->label, b->label, (size_t)a->n * sizeof(int64_t)) == 0, "labels differ");
}

/* The first batch of a new iterator (fresh buffers, files not yet verified or sized) holds the
 * same values as that batch computed again with warm buffers, and as on 2 worker threads. */
Test(pipeline, first_batch_is_the_same_cold_or_warm, .fini = cleanup) {
  rill_df_t* b = crop_batches(RILL_ON_ERROR_SKIP);
  rill_error_t err = {0};
  rill_iter_t* it;
  rill_row_t row;
  static batch_copy_t cold, warm, threaded;
  RT_OK(rill_iter_new(b, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE, .prefetch = 4, .seed = 9}, &it, &err),
        err);
  RT_OK(rill_iter_next(it, &row, &err), err);
  copy_batch(&row, &cold);
  int64_t rows = cold.n;
  while (rill_iter_next(it, &row, &err) == RILL_OK) rows += rill_row_get(&row, 0)->length;
  cr_assert_eq(rows, 20, "the truncated file is skipped, the 20 others are read");
  RT_OK(rill_iter_set_epoch(it, 0), err);
  RT_OK(rill_iter_next(it, &row, &err), err);
  copy_batch(&row, &warm);
  same_batch(&cold, &warm);
  rill_iter_free(it);
  RT_OK(rill_iter_new(b, &(rill_iter_opts_t){.threads = 2, .prefetch = 4, .seed = 9}, &it, &err), err);
  RT_OK(rill_iter_next(it, &row, &err), err);
  copy_batch(&row, &threaded);
  same_batch(&cold, &threaded);
  rill_iter_free(it);
  rill_df_free(b);
}

/* Under RAISE, the batch holding the truncated file fails naming the file; the others come. */
Test(pipeline, corrupt_file_in_a_batch_is_named, .fini = cleanup) {
  rill_df_t* b = crop_batches(RILL_ON_ERROR_RAISE);
  rill_error_t err = {0};
  rill_iter_t* it;
  rill_row_t row;
  RT_OK(rill_iter_new(b, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE, .prefetch = 4, .seed = 9}, &it, &err),
        err);
  int ok = 0, failed = 0, rc;
  while ((rc = rill_iter_next(it, &row, &err)) != RILL_END) {
    if (rc == RILL_OK) {
      ok++;
      continue;
    }
    failed++;
    cr_assert_eq(rc, RILL_EFORMAT, "%d: %s", rc, err.message);
    cr_assert(strstr(err.message, "trunc.jpg") && strstr(err.message, "corrupt JPEG data"), "%s", err.message);
  }
  cr_assert_eq(failed, 1);
  cr_assert_eq(ok, 2, "21 rows in batches of 8: 3 batches, one of them fails");
  rill_iter_free(it);
  rill_df_free(b);
}

Test(decode_map, real_corpus_through_image_folder, .fini = cleanup) {
  char root[1024];
  snprintf(root, sizeof root, "%s/build/data/corpus", rt_root());
  struct stat sb;
  if (stat(root, &sb) != 0) cr_skip_test("real-image corpus absent: run test/data/get_images.sh");
  rill_error_t err = {0};
  rill_df_t* df;
  RT_OK(rill_df_from_image_folder(root, NULL, &df, &err), err);
  const char* const* names;
  int count;
  RT_OK(rill_image_folder_classes(df, &names, &count, &err), err);
  cr_assert_eq(count, 10);
  cr_assert(rill_df_rows(df) >= 100);
  rill_df_t* sh;
  RT_OK(rill_df_shuffle(df, 7, &sh, &err), err);
  int col = rill_image_decode(sh, "img", rill_df_column(sh, "bytes"), NULL, &err);
  cr_assert(col >= 0, "%s", err.message);
  int cols[2] = {col, rill_df_column(sh, "label")};
  rill_iter_t* it;
  RT_OK(rill_iter_new(sh, &(rill_iter_opts_t){.columns = cols, .ncolumns = 2, .threads = 2, .prefetch = 8}, &it,
                      &err),
        err);
  for (int i = 0; i < 64; i++) {
    rill_row_t row;
    RT_OK(rill_iter_next(it, &row, &err), err);
    int64_t shape[3];
    rill_array_cell_shape(rill_row_get(&row, 0), 0, shape);
    cr_assert(shape[0] >= 16 && shape[0] <= 500 && shape[1] >= 16 && shape[1] <= 500 && shape[2] == 3);
    int64_t label = ((const int64_t*)rill_row_get(&row, 1)->data)[0];
    cr_assert(label >= 0 && label < 10);
  }
  rill_iter_free(it);
  rill_df_free(sh);
  rill_df_free(df);
}

#endif
