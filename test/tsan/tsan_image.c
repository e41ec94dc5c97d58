/* ThreadSanitizer stress of the JPEG entropy marks: threads decoding regions of the same
 * files with one shared set of marks per file (walking to new marks while others seek with
 * the ones known), against decodes from the file's start; and a 2-thread image pipeline of
 * two crops of each file, whose operators share the files' verified table and marks across
 * epochs (and the baseline copy of a progressive file, which both workers may make at once
 * in the first epoch), against the same pipeline on the calling thread.
 * Prints "N passed, N failed" last; exits non-zero on a failure. */
#include <pthread.h>
#include <stdio.h>

#include <jpeglib.h>

#include "image_internal.h"
#include "internal.h"
#include "tsan_common.h"

enum { FILES = 3, THREADS = 4, ROUNDS = 40 };

typedef struct file {
  unsigned char* p;
  unsigned long n;
  int w, h, ch;
  rill__jpeg_marks_t* marks;
} file_t;

static file_t files[FILES], prog; /* prog: a progressive file, for the pipeline */

static void encode(file_t* f, int w, int h, int ch, int hs, int vs, unsigned seed, int progressive) {
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr e;
  c.err = jpeg_std_error(&e);
  jpeg_create_compress(&c);
  f->p = NULL, f->n = 0, f->w = w, f->h = h, f->ch = ch;
  jpeg_mem_dest(&c, &f->p, &f->n);
  c.image_width = (JDIMENSION)w, c.image_height = (JDIMENSION)h;
  c.input_components = ch;
  c.in_color_space = ch == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 90, TRUE);
  if (ch == 3) c.comp_info[0].h_samp_factor = hs, c.comp_info[0].v_samp_factor = vs;
  if (progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  unsigned char* row = malloc((size_t)w * ch);
  while (c.next_scanline < c.image_height) {
    for (int i = 0; i < w * ch; i++) {
      seed = seed * 1103515245u + 12345u;
      row[i] = (unsigned char)((i * 7 + (int)c.next_scanline * 3) % 200 + (int)((seed >> 16) % 50));
    }
    JSAMPROW r = row;
    jpeg_write_scanlines(&c, &r, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  free(row);
}

static unsigned char* region(const file_t* f, rill__img_request_t rq, size_t* bytes) {
  rill_error_t err = {0};
  rill__img_info_t info = {RILL__IMG_JPEG, f->w, f->h, f->ch};
  rill__img_out_t plan, out;
  if (rill__img_plan(&info, &rq, &plan, &err) != RILL_OK) return NULL;
  *bytes = (size_t)plan.w * plan.h * plan.channels;
  unsigned char* d = malloc(*bytes);
  if (rill__img_decode(f->p, f->n, &rq, d, *bytes, &out, &err) != RILL_OK) {
    fprintf(stderr, "decode: %s\n", err.message);
    free(d);
    return NULL;
  }
  return d;
}

static void* seeker(void* arg) {
  unsigned rng = (unsigned)(uintptr_t)arg * 2654435761u + 1;
  int* bad = calloc(1, sizeof *bad);
  for (int r = 0; r < ROUNDS; r++) {
    rng = rng * 1103515245u + 12345u;
    file_t* f = &files[(rng >> 20) % FILES];
    rill__img_request_t rq = {.channels = 3, .tail_verified = 1};
    rq.h = 1 + (int)((rng >> 4) % (unsigned)f->h), rq.w = 1 + (int)((rng >> 9) % (unsigned)f->w);
    rq.y = (int)((rng >> 13) % (unsigned)(f->h - rq.h + 1)), rq.x = (int)((rng >> 2) % (unsigned)(f->w - rq.w + 1));
    size_t n1 = 0, n2 = 0;
    unsigned char* want = region(f, rq, &n1);
    rq.marks = f->marks;
    unsigned char* got = region(f, rq, &n2);
    if (!want || !got || n1 != n2 || memcmp(want, got, n1) != 0) ++*bad;
    free(want), free(got);
  }
  return bad;
}

static void test_shared_marks(void) {
  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; i++) pthread_create(&t[i], NULL, seeker, (void*)(uintptr_t)i);
  for (int i = 0; i < THREADS; i++) {
    int* bad;
    pthread_join(t[i], (void**)&bad);
    CHECK(*bad == 0, "thread %d: %d regions differ from decodes from the start", i, *bad);
    free(bad);
  }
  for (int k = 0; k < FILES; k++) CHECK(rill__jpeg_marks_known(files[k].marks) > 0, "file %d: no mark found", k);
}

/* ---- an RRC pipeline (the operator keeps the files' marks) on 2 workers and on the caller */

static unsigned char* run_pipeline(int threads, int epochs, size_t* total) {
  enum { ROWS = 24 };
  rill_error_t err = {0};
  rill_array_t* bin = NULL;
  if (rill_array_new(rill_type_scalar(RILL_BINARY), ROWS, &bin, &err) != RILL_OK) return NULL;
  for (int i = 0; i < ROWS; i++) {
    const file_t* f = i % (FILES + 1) == FILES ? &prog : &files[i % (FILES + 1)];
    rill_array_set_var(bin, i, f->p, (int64_t)f->n, NULL);
  }
  rill_df_t* df = NULL;
  const char* names[1] = {"bytes"};
  const rill_array_t* cols[1] = {bin};
  CHECK_OK(rill_df_from_arrays(names, cols, 1, 0, &df, &err), err);
  int crop = rill_image_random_resized_crop(df, "crop", 0, &(rill_rrc_opts_t){.size = {48, 40}}, &err);
  CHECK(crop >= 0, "%s", err.message);
  int crop2 = rill_image_random_resized_crop(df, "crop2", 0, &(rill_rrc_opts_t){.size = {32, 32}}, &err);
  CHECK(crop2 >= 0, "%s", err.message);
  rill_iter_t* it = NULL;
  CHECK_OK(rill_iter_new(df, &(rill_iter_opts_t){.seed = 5, .threads = threads, .prefetch = 4}, &it, &err), err);
  size_t each1 = 48 * 40 * 3, each = each1 + 32 * 32 * 3, n = 0;
  unsigned char* out = malloc(each * ROWS * (size_t)epochs);
  for (int e = 0; e < epochs; e++) {
    if (e) CHECK_OK(rill_iter_set_epoch(it, e), err);
    rill_row_t row;
    while (rill_iter_next(it, &row, &err) == RILL_OK) {
      const rill_array_t *a = rill_row_get(&row, crop), *b = rill_row_get(&row, crop2);
      if (n < (size_t)ROWS * (size_t)epochs) {
        memcpy(out + n * each, a->data, each1);
        memcpy(out + n * each + each1, b->data, each - each1);
      }
      n++;
    }
  }
  CHECK(n == (size_t)ROWS * (size_t)epochs, "%zu rows", n);
  *total = n * each;
  rill_iter_free(it);
  rill_df_free(df);
  rill_array_release(bin);
  return out;
}

static void test_pipeline(void) {
  size_t n1 = 0, n2 = 0;
  unsigned char* a = run_pipeline(RILL_THREADS_NONE, 4, &n1);
  unsigned char* b = run_pipeline(2, 4, &n2);
  CHECK(a && b && n1 == n2 && memcmp(a, b, n1) == 0, "2-thread crops differ from the caller's");
  free(a), free(b);
}

int main(void) {
  encode(&files[0], 320, 240, 3, 2, 2, 1, 0);
  encode(&files[1], 301, 263, 3, 2, 1, 2, 0);
  encode(&files[2], 200, 150, 1, 1, 1, 3, 0);
  encode(&prog, 280, 210, 3, 2, 2, 4, 1);
  for (int k = 0; k < FILES; k++) {
    files[k].marks = rill__jpeg_marks_new(files[k].p, files[k].n, RILL__JPEG_COL_MARKS_MAX);
    CHECK(files[k].marks != NULL, "file %d: no marks", k);
  }
  if (tsan_fail) return tsan_report();
  test_shared_marks();
  test_pipeline();
  for (int k = 0; k < FILES; k++) rill__free(files[k].marks), free(files[k].p);
  free(prog.p);
  return tsan_report();
}
