/* Image decoding shared by the image addons (not installed). Decoders report errors without
 * the file name; the caller adds the row's file name to the message. */
#ifndef RILL_IMAGE_INTERNAL_H
#define RILL_IMAGE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "rill.h"

#define RILL__DEFAULT_MAX_PIXELS 100000000LL /* 100 MP */

typedef enum rill__img_format {
  RILL__IMG_UNKNOWN = 0,
  RILL__IMG_JPEG,
  RILL__IMG_PNG
} rill__img_format_t;

typedef struct rill__img_info {
  rill__img_format_t format;
  int width, height;             /* full resolution */
  int channels;                  /* components stored in the file (1, 3, 4; CMYK = 4; 2 for a
                                    gray+alpha PNG; a palette PNG says 3) */
} rill__img_info_t;

/* What to decode: a region of the full-resolution image, converted to `channels`. */
typedef struct rill__img_request {
  int channels;                  /* 1 (gray), 3 (RGB), 4 (RGBA) */
  int64_t max_pixels;            /* width*height above this: RILL_ERANGE; 0 = the default */
  int x, y, w, h;                /* region in full-resolution pixels; w == 0 or h == 0: whole image */
  int min_w, min_h;              /* JPEG: DCT-scale by the smallest allowed M/8 (see `scales`)
                                    that keeps the scaled region at least min_w x min_h; both 0:
                                    no scaling */
  int scales;                    /* JPEG: the allowed factors M/8 as a bit mask (bit M set: M/8
                                    allowed, M = 1..8; 1/1 is always allowed); 0: the default
                                    RILL__IMG_SCALES_FAST */
} rill__img_request_t;

/* Scale factor sets for rill__img_request_t.scales. libjpeg-turbo has SIMD IDCTs only for the
 * factors 1/8, 1/4, 1/2 and 1 (at 1/2 the chroma of a 4:2:0 file needs no upsampling); the
 * other M/8 use portable scaled IDCTs (14x14 for the chroma at 7/8) that cost more time than
 * the pixels they save, so the default leaves them out. */
#define RILL__IMG_SCALES_FAST ((1 << 1) | (1 << 2) | (1 << 4) | (1 << 8))
#define RILL__IMG_SCALES_ALL 0x1fe

/* The decoded region: HWC uint8, rows packed (stride w*channels). */
typedef struct rill__img_out {
  int w, h, channels;
  int scale_denom;               /* 1, 2, 4 or 8: the region was decoded at scale_num/scale_denom */
  int scale_num;                 /* the reduced fraction of M/8 (1/1, 1/2, 3/8, 3/4, 7/8, ...);
                                    1 for every power-of-two scale (0 from older callers: 1) */
} rill__img_out_t;

/* Reads the header only: format, size, channels. RILL_EFORMAT for data that is no image or a
 * corrupt header, RILL_ENOTSUP for other formats or decoders not built in. */
int rill__img_probe(const void* buf, size_t n, rill__img_info_t* info, rill_error_t* err);

/* The size the decode of `req` will produce (checks the region and the pixel limit). */
int rill__img_plan(const rill__img_info_t* info, const rill__img_request_t* req,
                   rill__img_out_t* plan, rill_error_t* err);

/* Decodes the request into dst (at least plan.w*plan.h*plan.channels bytes, `dst_size`).
 * Thread-safe; reuses per-thread scratch memory (no allocation per image in the steady
 * state). Corrupt or truncated data: RILL_EFORMAT; never a crash or a longjmp leak. */
int rill__img_decode(const void* buf, size_t n, const rill__img_request_t* req, uint8_t* dst,
                     size_t dst_size, rill__img_out_t* out, rill_error_t* err);

/* ---- shared between image_decode.c and the per-format decoders (additions to the contract
 * above; the functions above keep their meaning). */

/* The geometry of a request: the scale and the region in scaled pixels. */
typedef struct rill__img_geom {
  int num, denom;                /* the scale num/denom = M/8 reduced (1/1 when not scaled) */
  int sw, sh;                    /* the whole image scaled, as libjpeg computes it:
                                    ceil(width*num/denom) x ceil(height*num/denom) */
  int x, y, w, h;                /* the region scaled: floor(x*num/denom) .. ceil((x+w)*num/denom) */
} rill__img_geom_t;

/* Checks the request against the image (region inside it, channels, pixel limit: RILL_EINVAL /
 * RILL_ERANGE) and computes the geometry (DCT scaling only for JPEG). */
int rill__img_geometry(const rill__img_info_t* info, const rill__img_request_t* req,
                       rill__img_geom_t* geom, rill_error_t* err);
/* Luma of 8-bit RGB (ITU-R BT.601 weights, the ones JPEG uses for Y). */
static inline uint8_t rill__img_luma(int r, int g, int b) {
  return (uint8_t)((r * 19595 + g * 38470 + b * 7471 + 32768) >> 16);
}

/* Per-format decoders (image_jpeg.c, image_png.c); same contracts as rill__img_probe and
 * rill__img_decode for data already known to carry the format's signature. */
int rill__jpeg_probe(const void* buf, size_t n, rill__img_info_t* info, rill_error_t* err);
int rill__jpeg_decode(const void* buf, size_t n, const rill__img_request_t* req, uint8_t* dst,
                      size_t dst_size, rill__img_out_t* out, rill_error_t* err);
int rill__png_probe(const void* buf, size_t n, rill__img_info_t* info, rill_error_t* err);
int rill__png_decode(const void* buf, size_t n, const rill__img_request_t* req, uint8_t* dst,
                     size_t dst_size, rill__img_out_t* out, rill_error_t* err);

#endif /* RILL_IMAGE_INTERNAL_H */
