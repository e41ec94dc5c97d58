/* Encoders shared by the tests and the fuzz targets that need encoded images, without the
 * test framework (the fuzz targets do not link it): JPEG written to memory with libjpeg, WebP
 * with libwebp. */
#ifndef RILL_TEST_IMAGE_ENC_H
#define RILL_TEST_IMAGE_ENC_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#if RILL_HAVE_JPEG
#include <jpeglib.h>
#endif
#if RILL_HAVE_WEBP
#include <stdlib.h>
#include <string.h>
#include <webp/encode.h>
#endif

/* Encoded bytes (malloc'd). */
typedef struct buf {
  uint8_t* p;
  size_t n;
} buf_t;

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

#if RILL_HAVE_WEBP
/* A WebP of w x h pixels of `ch` channels (3: RGB, 4: RGBA): lossy at `quality` (1..100), or
 * lossless when quality is 0. */
static inline buf_t enc_webp(const uint8_t* px, int w, int h, int ch, int quality) {
  uint8_t* out = NULL;
  size_t n;
  if (quality == 0)
    n = ch == 4 ? WebPEncodeLosslessRGBA(px, w, h, w * 4, &out) : WebPEncodeLosslessRGB(px, w, h, w * 3, &out);
  else
    n = ch == 4 ? WebPEncodeRGBA(px, w, h, w * 4, (float)quality, &out)
                : WebPEncodeRGB(px, w, h, w * 3, (float)quality, &out);
  buf_t b = {malloc(n ? n : 1), n};
  if (n) memcpy(b.p, out, n);
  WebPFree(out);
  return b;
}
#endif

#endif
