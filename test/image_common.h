/* Image encoders shared by the tests that need encoded images: JPEG and PNG written to memory
 * with libjpeg and libpng, and a helper that writes bytes to a file. */
#ifndef RILL_TEST_IMAGE_COMMON_H
#define RILL_TEST_IMAGE_COMMON_H

#include <setjmp.h>
#include <stdint.h>

#include "common.h"

#if RILL_HAVE_JPEG
#include <jpeglib.h>
#endif
#if RILL_HAVE_PNG
#include <png.h>
#endif

/* Encoded bytes (malloc'd). */
typedef struct buf {
  uint8_t* p;
  size_t n;
} buf_t;

/* Writes n bytes to a new file at path. */
static inline void rt_write_file(const char* path, const void* data, size_t n) {
  FILE* f = fopen(path, "wb");
  cr_assert(f, "cannot create %s", path);
  cr_assert_eq(fwrite(data, 1, n, f), n);
  fclose(f);
}

#if RILL_HAVE_JPEG
typedef struct jpeg_spec {
  J_COLOR_SPACE in;          /* JCS_RGB, JCS_GRAYSCALE, JCS_CMYK */
  J_COLOR_SPACE store;       /* colorspace in the file (0 = libjpeg's default) */
  int quality, hs, vs, progressive; /* 0: quality 95, 1x1 luma sampling, baseline */
  int restart_rows;          /* a restart marker every this many MCU rows (0: none) */
  int optimize;              /* Huffman tables made for the image (only the codes it uses) */
  int swap_ac;               /* the standard luma AC table with its two 2-bit codes swapped:
                                the same code lengths, other symbols */
} jpeg_spec_t;

static inline buf_t enc_jpeg(const uint8_t* px, int w, int h, jpeg_spec_t s) {
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr e;
  c.err = jpeg_std_error(&e);
  jpeg_create_compress(&c);
  unsigned char* out = NULL;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &out, &size);
  int comps = s.in == JCS_GRAYSCALE ? 1 : s.in == JCS_CMYK ? 4 : 3;
  c.image_width = (JDIMENSION)w;
  c.image_height = (JDIMENSION)h;
  c.input_components = comps;
  c.in_color_space = s.in;
  jpeg_set_defaults(&c);
  if (s.store) jpeg_set_colorspace(&c, s.store);
  jpeg_set_quality(&c, s.quality ? s.quality : 95, TRUE);
  if (comps >= 3) {
    c.comp_info[0].h_samp_factor = s.hs ? s.hs : 1;
    c.comp_info[0].v_samp_factor = s.vs ? s.vs : 1;
  }
  if (s.progressive) jpeg_simple_progression(&c);
  c.restart_in_rows = s.restart_rows;
  c.optimize_coding = s.optimize ? TRUE : FALSE;
  if (s.swap_ac) {
    JHUFF_TBL* t = c.ac_huff_tbl_ptrs[0];
    UINT8 v = t->huffval[0];
    t->huffval[0] = t->huffval[1], t->huffval[1] = v;
  }
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = (JSAMPROW)(px + (size_t)c.next_scanline * w * comps);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  return (buf_t){out, size};
}
#endif

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
