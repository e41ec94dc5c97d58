/* libFuzzer target for the image decoders: probe, plan and decode arbitrary bytes as JPEG,
 * PNG or WebP, whole and as a region (packed and padded), with every output channel count;
 * WebP regions, which must give the pixels of a whole decode there; and JPEG
 * regions through the entropy marks (made by the decode that checks the file, then kept:
 * seeks and cuts; or a baseline copy of a file the marks cannot follow, with its marks),
 * which must give the outcome and the pixels of a decode from the file's start; and regions
 * of verified progressive files, their scans cut below the region, which must give the
 * pixels of a whole read. Any crash,
 * leak, sanitizer report or abort() is a bug; errors are expected. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "image_internal.h"
#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

/* A region of the lower half decoded from the file's start, then the first-epoch way (marks
 * made, the rows above walked), then with the marks kept at several rows. */
static void marks_case(const uint8_t* data, size_t size, const rill__img_info_t* info) {
  rill_error_t err;
  rill__img_request_t req = {.channels = 3, .max_pixels = 1 << 22, .x = info->width / 4, .y = info->height / 2,
                             .w = info->width / 2, .h = info->height - info->height / 2};
  rill__img_out_t plan, out;
  if (rill__img_plan(info, &req, &plan, &err) != RILL_OK) return;
  size_t bytes = (size_t)plan.w * (size_t)plan.h * 3;
  uint8_t *a = malloc(bytes ? bytes : 1), *b = malloc(bytes ? bytes : 1);
  if (!a || !b) abort();
  int ra = rill__img_decode(data, size, &req, a, bytes, &out, &err);
  rill__jpeg_marks_t* m = NULL;
  req.marks_out = &m;
  req.col_marks = info->width % 2 ? RILL__JPEG_COL_MARKS_MAX : 0; /* with a walk through the file or not */
  req.copy_max = info->height % 2 ? (int64_t)1 << 22 : 0; /* a file the marks cannot follow: copied or not */
  int rb = rill__img_decode(data, size, &req, b, bytes, &out, &err);
  /* The same outcome: a damaged file never passes for having marks. The exceptions are
   * libjpeg's own: a few junk bytes before the end marker are seen or not depending on how
   * far its bit reader had read ahead, which differs between the two streams; and a DC value
   * out of range, which rill's walk fails and libjpeg lets through (never the other way
   * round; a code the tables lack fails both: a decode from the file's start reads it by
   * libjpeg's checked path). */
  if ((ra == RILL_OK) != (rb == RILL_OK) && !strstr(err.message, "extraneous bytes") &&
      !(ra == RILL_OK && strstr(err.message, "a Huffman code the file's tables lack")))
    abort();
  if (ra == RILL_OK && rb == RILL_OK && memcmp(a, b, bytes) != 0) abort();
  if (ra == RILL_OK && rb == RILL_OK && m) {
    /* the file is verified: regions with the marks kept (cuts where they were all found; the
     * copy's regions for a copied file) */
    req.marks_out = NULL;
    for (int k = 1; k <= 3; k++) {
      req.y = info->height * k / 4, req.h = info->height - req.y;
      req.x = info->width * k / 7, req.w = info->width / (k + 1);
      if (rill__img_plan(info, &req, &plan, &err) != RILL_OK) continue;
      size_t n = (size_t)plan.w * (size_t)plan.h * 3;
      if (n > bytes) continue;
      req.tail_verified = 1, req.marks = NULL;
      int r1 = rill__img_decode(data, size, &req, a, bytes, &out, &err);
      req.marks = m;
      int r2 = rill__img_decode(data, size, &req, b, bytes, &out, &err);
      if (r1 != r2 || (r1 == RILL_OK && memcmp(a, b, n) != 0)) abort();
    }
  }
  if (ra == RILL_OK && rb == RILL_OK && !m) { /* verified, without marks (progressive, ...): regions */
    req.marks_out = NULL;                      /* above the bottom, scans cut below them */
    for (int k = 0; k < 3; k++) {
      req.y = info->height * k / 8, req.h = info->height / 4 + 1;
      if (rill__img_plan(info, &req, &plan, &err) != RILL_OK) continue;
      size_t n = (size_t)plan.w * (size_t)plan.h * 3;
      if (n > bytes) continue;
      req.tail_verified = 0;
      int r1 = rill__img_decode(data, size, &req, a, bytes, &out, &err);
      req.tail_verified = 1;
      int r2 = rill__img_decode(data, size, &req, b, bytes, &out, &err);
      if (r1 == RILL_OK && (r2 != RILL_OK || memcmp(a, b, n) != 0)) abort();
    }
  }
  rill__free(m);
  free(a), free(b);
}

/* A WebP region on odd coordinates, RGBA and gray: where the whole image decodes, the region
 * decodes too, to the same pixels. */
static void webp_case(const uint8_t* data, size_t size, const rill__img_info_t* info) {
  for (int c = 1; c <= 4; c += 3) {
    rill_error_t err;
    rill__img_request_t whole = {.channels = c, .max_pixels = 1 << 22};
    rill__img_request_t part = {.channels = c, .max_pixels = 1 << 22, .x = info->width / 3 | 1,
                                .y = info->height / 3 | 1};
    if (part.x >= info->width || part.y >= info->height) return;
    part.w = (info->width - part.x + 1) / 2, part.h = (info->height - part.y + 1) / 2;
    size_t wb = (size_t)info->width * (size_t)info->height * (size_t)c, pb = (size_t)part.w * (size_t)part.h * (size_t)c;
    uint8_t *a = malloc(wb), *b = malloc(pb ? pb : 1);
    rill__img_out_t out;
    if (!a || !b) abort();
    if (rill__img_decode(data, size, &whole, a, wb, &out, &err) == RILL_OK) {
      if (rill__img_decode(data, size, &part, b, pb, &out, &err) != RILL_OK) abort();
      for (int y = 0; y < part.h; y++)
        if (memcmp(b + (size_t)y * part.w * c, a + ((size_t)(part.y + y) * info->width + part.x) * c,
                   (size_t)part.w * c) != 0)
          abort();
    }
    free(a), free(b);
  }
}

#if RILL_HAVE_JPEG
#include "../image_enc.h"

/* Before each input the thread's decoder reads the same other JPEG (its own optimized Huffman
 * tables, quality 30): libjpeg keeps the tables of the stream it read last, so what a decode
 * may inherit is the same for every input and never the previous input's (a finding replays
 * alone), and an input that lacks a table meets tables that are not its own. */
static void prime(void) {
  static buf_t jpg;
  static uint8_t px[48 * 32 * 3];
  if (!jpg.p) {
    for (int y = 0; y < 32; y++)
      for (int i = 0; i < 48 * 3; i++) px[y * 48 * 3 + i] = (uint8_t)(i * 7 + y * 13);
    jpg = enc_jpeg(px, 48, 32, (jpeg_spec_t){.in = JCS_RGB, .quality = 30, .hs = 2, .vs = 2, .optimize = 1});
  }
  rill__img_request_t req = {.channels = 3};
  rill__img_out_t out;
  rill_error_t err;
  if (rill__img_decode(jpg.p, jpg.n, &req, px, sizeof px, &out, &err) != RILL_OK) abort();
}
#else
static void prime(void) {}
#endif

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  rill_error_t err;
  rill_error_clear(&err);
  prime();
  rill__img_info_t info;
  if (rill__img_probe(data, size, &info, &err) != RILL_OK) return 0;
  static const int channels[] = {1, 3, 4, 3};
  for (int k = 0; k < 4; k++) {
    rill__img_request_t req = {.channels = channels[k], .max_pixels = 1 << 22, .padded = k == 3};
    if (k >= 2 && info.width > 2 && info.height > 2) {
      /* a region and a DCT-scaled decode, derived from the input's own size */
      req.x = info.width / 3;
      req.y = info.height / 3;
      req.w = info.width - req.x;
      req.h = info.height - req.y;
      req.min_w = req.w / 4 + 1;
      req.min_h = req.h / 4 + 1;
    }
    rill__img_out_t plan, out;
    if (rill__img_plan(&info, &req, &plan, &err) != RILL_OK) continue;
    size_t bytes = req.padded ? rill__img_padded_size(&plan) : (size_t)plan.w * (size_t)plan.h * (size_t)plan.channels;
    uint8_t* dst = malloc(bytes ? bytes : 1);
    if (!dst) return 0;
    if (rill__img_decode(data, size, &req, dst, bytes, &out, &err) == RILL_OK) {
      if (out.w != plan.w || out.h != plan.h || out.channels != plan.channels) abort();
      if (out.x < 0 || out.stride < (int64_t)(out.x + out.w) * out.channels ||
          (size_t)out.stride * (size_t)out.h > bytes || (!req.padded && out.x != 0))
        abort();
    }
    free(dst);
  }
  if (info.format == RILL__IMG_JPEG && info.width > 2 && info.height > 2 &&
      (int64_t)info.width * info.height <= (1 << 22))
    marks_case(data, size, &info);
  if (info.format == RILL__IMG_WEBP && (int64_t)info.width * info.height <= (1 << 22)) webp_case(data, size, &info);
  return 0;
}
