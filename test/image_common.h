/* Image encoders shared by the tests that need encoded images: JPEG (image_enc.h) and PNG
 * written to memory with libjpeg and libpng, and a helper that writes bytes to a file. */
#ifndef RILL_TEST_IMAGE_COMMON_H
#define RILL_TEST_IMAGE_COMMON_H

#include <setjmp.h>
#include <stdint.h>

#include "common.h"
#include "image_enc.h"

#if RILL_HAVE_PNG
#include <png.h>
#endif

/* Writes n bytes to a new file at path. */
static inline void rt_write_file(const char* path, const void* data, size_t n) {
  FILE* f = fopen(path, "wb");
  cr_assert(f, "cannot create %s", path);
  cr_assert_eq(fwrite(data, 1, n, f), n);
  fclose(f);
}

#if RILL_HAVE_PNG
static inline void png_write_mem(png_structp png, png_bytep data, png_size_t n) {
  buf_t* b = png_get_io_ptr(png);
  b->p = realloc(b->p, b->n + n);
  memcpy(b->p + b->n, data, n);
  b->n += n;
}
static inline void png_flush_mem(png_structp png) { (void)png; }

/* rows: packed samples of `bit_depth` (16-bit big-endian) for the color type. */
static inline buf_t enc_png(const uint8_t* rows, int w, int h, int color, int depth, int interlace,
                            const png_color* pal, int npal, const uint8_t* trns, int ntrns) {
  buf_t b = {0};
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  cr_assert(png && info && !setjmp(png_jmpbuf(png)));
  png_set_write_fn(png, &b, png_write_mem, png_flush_mem);
  png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, color,
               interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (pal) png_set_PLTE(png, info, pal, npal);
  if (trns) png_set_tRNS(png, info, trns, ntrns, NULL);
  png_write_info(png, info);
  int ch = color == 0 || color == 3 ? 1 : color == 4 ? 2 : color == 2 ? 3 : 4;
  size_t rowbytes = ((size_t)w * ch * depth + 7) / 8;
  int passes = png_set_interlace_handling(png);
  for (int p = 0; p < passes; p++)
    for (int y = 0; y < h; y++) png_write_row(png, rows + (size_t)y * rowbytes);
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  return b;
}
#endif

#endif
