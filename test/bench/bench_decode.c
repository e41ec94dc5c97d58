/* Decode-only benchmark on the real-image corpus (all files in memory, one thread unless
 * said otherwise): rill's decoder (internal call and through a dataframe pipeline) against a
 * direct tjDecompress2 loop (the ceiling) and, when the run script passes its rate, PIL.
 * PNG: rill against a direct libpng simplified-API loop on the corpus re-encoded as PNG.
 * WebP (when built with libwebp): rill against a direct WebPDecodeRGBInto loop on the corpus
 * re-encoded as lossy WebP (libwebp's defaults, quality 80).
 *   bench_decode LIST [--max N] [--pil RATE_IMAGES_PER_S] [--pil-png RATE] [--pil-webp RATE]
 * LIST: a text file with one JPEG path per line. Prints rates and ratios, never asserts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <png.h>
#include <turbojpeg.h>
#if RILL_HAVE_WEBP
#include <webp/decode.h>
#include <webp/encode.h>
#endif

#include "image_internal.h"
#include "rill.h"
#include "rill_addons.h"

typedef struct blob {
  uint8_t* p;
  size_t n;
} blob_t;

static double clock_s(clockid_t id) {
  struct timespec t;
  clock_gettime(id, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static blob_t slurp(const char* path) {
  blob_t b = {0};
  FILE* f = fopen(path, "rb");
  if (!f) return b;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  b.p = malloc(n > 0 ? (size_t)n : 1);
  b.n = fread(b.p, 1, (size_t)n, f);
  fclose(f);
  return b;
}

static blob_t* files;
static blob_t* pngs;
static blob_t* webps;
static int nfiles;
static uint8_t* dst;
static size_t dst_cap;
static double total_pixels;

static void need(size_t n) {
  if (n <= dst_cap) return;
  free(dst);
  dst = malloc(n);
  dst_cap = n;
}

/* ---- the measured loops: each returns 0 or exits on failure */

static void run_tj(const blob_t* set) {
  static tjhandle h;
  if (!h) h = tjInitDecompress();
  for (int i = 0; i < nfiles; i++) {
    int w, hh, ss, cs;
    if (tjDecompressHeader3(h, set[i].p, (unsigned long)set[i].n, &w, &hh, &ss, &cs) != 0 ||
        (need((size_t)w * hh * 3), tjDecompress2(h, set[i].p, (unsigned long)set[i].n, dst, w, 0, hh, TJPF_RGB, 0)) != 0) {
      fprintf(stderr, "tjDecompress2 failed on image %d: %s\n", i, tjGetErrorStr2(h));
      exit(1);
    }
  }
}

static void run_rill_internal(const blob_t* set) {
  rill__img_request_t req = {.channels = 3};
  rill_error_t err = {0};
  for (int i = 0; i < nfiles; i++) {
    rill__img_info_t info;
    rill__img_out_t plan;
    if (rill__img_probe(set[i].p, set[i].n, &info, &err) < 0 || rill__img_plan(&info, &req, &plan, &err) < 0 ||
        (need((size_t)plan.w * plan.h * 3),
         rill__img_decode(set[i].p, set[i].n, &req, dst, dst_cap, &plan, &err)) < 0) {
      fprintf(stderr, "rill decode failed on image %d: %s\n", i, err.message);
      exit(1);
    }
  }
}

static void run_png_simplified(const blob_t* set) {
  for (int i = 0; i < nfiles; i++) {
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&im, set[i].p, set[i].n)) {
      fprintf(stderr, "libpng failed on image %d: %s\n", i, im.message);
      exit(1);
    }
    im.format = PNG_FORMAT_RGB;
    need(PNG_IMAGE_SIZE(im));
    if (!png_image_finish_read(&im, NULL, dst, 0, NULL)) {
      fprintf(stderr, "libpng failed on image %d: %s\n", i, im.message);
      exit(1);
    }
  }
}

#if RILL_HAVE_WEBP
static void run_webp_direct(const blob_t* set) {
  for (int i = 0; i < nfiles; i++) {
    int w, h;
    if (!WebPGetInfo(set[i].p, set[i].n, &w, &h) ||
        (need((size_t)w * h * 3), !WebPDecodeRGBInto(set[i].p, set[i].n, dst, dst_cap, w * 3))) {
      fprintf(stderr, "libwebp failed on image %d\n", i);
      exit(1);
    }
  }
}
#endif

static rill_df_t* pipeline_df;
static int pipeline_col, pipeline_threads;

static void run_rill_pipeline(const blob_t* set) {
  (void)set;
  rill_error_t err = {0};
  rill_iter_t* it;
  if (rill_iter_new(pipeline_df,
                    &(rill_iter_opts_t){.columns = &pipeline_col, .ncolumns = 1, .threads = pipeline_threads,
                                        .prefetch = pipeline_threads > 0 ? 4 * pipeline_threads : RILL_PREFETCH_NONE},
                    &it, &err) < 0) {
    fprintf(stderr, "rill_iter_new: %s\n", err.message);
    exit(1);
  }
  rill_row_t row;
  int rc, n = 0;
  while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) n++;
  if (rc != RILL_END || n != nfiles) {
    fprintf(stderr, "pipeline failed after %d rows: %s\n", n, err.message);
    exit(1);
  }
  rill_iter_free(it);
}

/* The methods of one comparison run in interleaved rounds (one warm-up pass each first) so
 * that a busy machine slows them alike; each rate is the best round, in images per second.
 * Single-thread methods are timed in process CPU time (robust when other processes share
 * the cores); the multi-thread pipeline in wall time. */
typedef struct method {
  void (*fn)(const blob_t*);
  const blob_t* set;
  int threads;                   /* for run_rill_pipeline */
  double best;
} method_t;

static void measure(method_t* m, int nm, int rounds) {
  for (int r = -1; r < rounds; r++)
    for (int k = 0; k < nm; k++) {
      pipeline_threads = m[k].threads;
      clockid_t id = m[k].threads > 0 ? CLOCK_MONOTONIC : CLOCK_PROCESS_CPUTIME_ID;
      double t0 = clock_s(id);
      m[k].fn(m[k].set);
      double t = clock_s(id) - t0;
      if (r < 0) m[k].best = 1e30;
      else if (t < m[k].best) m[k].best = t;
    }
  for (int k = 0; k < nm; k++) m[k].best = nfiles / m[k].best;
}

static rill_df_t* memory_df(const blob_t* set, int* col) {
  rill_error_t err = {0};
  rill_array_t* a;
  if (rill_array_new(rill_type_scalar(RILL_BINARY), nfiles, &a, &err) < 0) exit(1);
  for (int i = 0; i < nfiles; i++) rill_array_set_var(a, i, set[i].p, (int64_t)set[i].n, NULL);
  rill_df_t* df;
  const char* names[] = {"bytes"};
  if (rill_df_from_arrays(names, (const rill_array_t* const*)&a, 1, 0, &df, &err) < 0) {
    fprintf(stderr, "rill_df_from_arrays: %s\n", err.message);
    exit(1);
  }
  rill_array_release(a);
  *col = rill_image_decode(df, "img", 0, &(rill_decode_opts_t){.grain = 8}, &err);
  if (*col < 0) {
    fprintf(stderr, "rill_image_decode: %s\n", err.message);
    exit(1);
  }
  return df;
}

/* A format other than JPEG: its library's direct loop (the ceiling), rill's decoder and the
 * 1-thread pipeline over the same files, and PIL's rate when the run script measured it. */
static void compare_format(const char* fmt, const char* direct, void (*run_direct)(const blob_t*), const blob_t* set,
                           int rounds, double mp, double pil) {
  pipeline_df = memory_df(set, &pipeline_col);
  method_t m[] = {{run_direct, set, 0, 0}, {run_rill_internal, set, 0, 0}, {run_rill_pipeline, set, RILL_THREADS_NONE, 0}};
  measure(m, 3, rounds > 2 ? rounds - 2 : 1);
  rill_df_free(pipeline_df);
  double d = m[0].best, r = m[1].best, p = m[2].best;
  char what[64];
  snprintf(what, sizeof what, "%s %s", fmt, direct);
  printf("  %-44s %8.0f img/s %7.1f MP/s\n", what, d, d * mp);
  snprintf(what, sizeof what, "%s rill decoder (internal call)", fmt);
  printf("  %-44s %8.0f img/s %7.1f MP/s  %.3fx direct\n", what, r, r * mp, r / d);
  snprintf(what, sizeof what, "%s rill pipeline (rill_image_decode)", fmt);
  printf("  %-44s %8.0f img/s %7.1f MP/s  %.3fx direct\n", what, p, p * mp, p / d);
  snprintf(what, sizeof what, "%s PIL", fmt);
  if (pil > 0) printf("  %-44s %8.0f img/s  rill pipeline / PIL: %.2fx\n", what, pil, p / pil);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_decode LIST [--max N] [--pil RATE] [--pil-png RATE] [--pil-webp RATE]\n");
    return 2;
  }
  int max = 1 << 30;
  double pil = 0, pil_png = 0, pil_webp = 0;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--max")) max = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--pil")) pil = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--pil-png")) pil_png = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--pil-webp")) pil_webp = atof(argv[i + 1]);
  }
  FILE* lf = fopen(argv[1], "r");
  if (!lf) {
    fprintf(stderr, "cannot open %s\n", argv[1]);
    return 1;
  }
  char line[4096];
  int cap = 0;
  while (nfiles < max && fgets(line, sizeof line, lf)) {
    line[strcspn(line, "\r\n")] = 0;
    if (!line[0]) continue;
    if (nfiles == cap) files = realloc(files, sizeof *files * (size_t)(cap = cap ? cap * 2 : 256));
    files[nfiles] = slurp(line);
    if (!files[nfiles].n) {
      fprintf(stderr, "cannot read %s\n", line);
      return 1;
    }
    nfiles++;
  }
  fclose(lf);
  /* the same images as PNG and WebP (for their comparisons), pixels counted on the way */
  pngs = calloc((size_t)nfiles, sizeof *pngs);
  webps = calloc((size_t)nfiles, sizeof *webps);
  tjhandle h = tjInitDecompress();
  for (int i = 0; i < nfiles; i++) {
    int w, hh, ss, cs;
    tjDecompressHeader3(h, files[i].p, (unsigned long)files[i].n, &w, &hh, &ss, &cs);
    need((size_t)w * hh * 3);
    tjDecompress2(h, files[i].p, (unsigned long)files[i].n, dst, w, 0, hh, TJPF_RGB, 0);
    total_pixels += (double)w * hh;
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)hh;
    im.format = PNG_FORMAT_RGB;
    png_alloc_size_t size = 0;
    png_image_write_get_memory_size(im, size, 0, dst, 0, NULL);
    pngs[i].p = malloc(size);
    pngs[i].n = size;
    if (!png_image_write_to_memory(&im, pngs[i].p, &pngs[i].n, 0, dst, 0, NULL)) {
      fprintf(stderr, "PNG encode failed: %s\n", im.message);
      return 1;
    }
#if RILL_HAVE_WEBP
    uint8_t* enc = NULL;
    webps[i].n = WebPEncodeRGB(dst, w, hh, w * 3, 80, &enc);
    webps[i].p = malloc(webps[i].n);
    memcpy(webps[i].p, enc, webps[i].n);
    WebPFree(enc);
#endif
  }
  tjDestroy(h);
  double mp = total_pixels / nfiles / 1e6;
  printf("decode benchmark: %d corpus JPEGs, %.3f MP average, 1 thread in CPU time unless noted\n", nfiles, mp);

  int rounds = getenv("DECODE_ROUNDS") ? atoi(getenv("DECODE_ROUNDS")) : 4;
  pipeline_df = memory_df(files, &pipeline_col);
  method_t jm[] = {{run_tj, files, 0, 0},
                   {run_rill_internal, files, 0, 0},
                   {run_rill_pipeline, files, RILL_THREADS_NONE, 0},
                   {run_rill_pipeline, files, 2, 0}};
  measure(jm, 4, rounds);
  rill_df_free(pipeline_df);
  double tj = jm[0].best, ri = jm[1].best, rp = jm[2].best, rp2 = jm[3].best;
  printf("  %-44s %8.0f img/s %7.1f MP/s\n", "JPEG direct tjDecompress2 (ceiling)", tj, tj * mp);
  printf("  %-44s %8.0f img/s %7.1f MP/s  %.3fx direct\n", "JPEG rill decoder (internal call)", ri, ri * mp, ri / tj);
  printf("  %-44s %8.0f img/s %7.1f MP/s  %.3fx direct\n", "JPEG rill pipeline (rill_image_decode)", rp, rp * mp, rp / tj);
  printf("  %-44s %8.0f img/s %7.1f MP/s  %.3fx direct (%.3fx of 2 x direct)\n", "JPEG rill pipeline, 2 threads (wall time)", rp2,
         rp2 * mp, rp2 / tj, rp2 / (2 * tj));
  if (pil > 0) {
    printf("  %-44s %8.0f img/s %7.1f MP/s\n", "JPEG PIL (Image.open + convert RGB)", pil, pil * mp);
    printf("  rill pipeline / PIL: %.2fx   rill decoder / PIL: %.2fx\n", rp / pil, ri / pil);
  }

  compare_format("PNG", "direct libpng png_image_* (ceiling)", run_png_simplified, pngs, rounds, mp, pil_png);
#if RILL_HAVE_WEBP
  compare_format("WebP", "direct WebPDecodeRGBInto (ceiling)", run_webp_direct, webps, rounds, mp, pil_webp);
#else
  printf("  WebP: skipped (rill built without libwebp)\n");
#endif

  for (int i = 0; i < nfiles; i++) free(files[i].p), free(pngs[i].p), free(webps[i].p);
  free(files), free(pngs), free(webps), free(dst);
  return 0;
}
