/* Image decoding shared by the image addons (not installed). Decoders report errors without
 * the file name; the caller adds the row's file name to the message. */
#ifndef RILL_IMAGE_INTERNAL_H
#define RILL_IMAGE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "rill.h"
#include "rill_addons.h"

#define RILL__DEFAULT_MAX_PIXELS 100000000LL /* 100 MP */

typedef enum rill__img_format {
  RILL__IMG_UNKNOWN = 0,
  RILL__IMG_JPEG,
  RILL__IMG_PNG,
  RILL__IMG_WEBP
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
  int tail_verified;             /* JPEG: these exact bytes were decoded once to their end
                                    without error (see rill__img_memo_t): the rows below the
                                    region are not read. 0: they are entropy-decoded and the
                                    file is read to its end marker, so that damaged data is
                                    RILL_EFORMAT whatever the region */
  struct rill__jpeg_marks* marks; /* JPEG, with tail_verified: the entropy marks of these bytes
                                    (found as needed, see rill__jpeg_seek), so that the rows
                                    above the region are not entropy-decoded either */
  struct rill__jpeg_marks** marks_out; /* JPEG, without tail_verified: when not NULL, a new
                                    set of entropy marks for these bytes is returned here (the
                                    caller's; NULL for a file that cannot have them), with
                                    the marks above the region found */
  int col_marks;                 /* JPEG, with marks_out: the column marks the new set may
                                    hold (see rill__jpeg_marks_new; 0: none) */
  int64_t copy_max;              /* JPEG, with marks_out, for a region: a file the marks cannot
                                    follow (progressive or arithmetic coding, restart intervals,
                                    several scans) is re-encoded as a baseline JPEG of the same
                                    coefficients when that copy and its marks fit in these bytes;
                                    the new set then holds the copy, which later decodes read
                                    in place of the file (rill__jpeg_marks_hold). 0: never */
  int padded;                    /* JPEG: the rows may be left wider than the region, as the
                                    decoder writes them (see rill__img_out_t.x and .stride):
                                    no copy of a cropped region; dst must then hold
                                    rill__img_padded_size() bytes. 0: packed rows */
} rill__img_request_t;

/* Columns a padded decode may add to a region: the left edge moved down to an iMCU boundary
 * (at most 4 x 8 pixels) and the one-column margins on both sides. */
#define RILL__IMG_PAD_COLS 40

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
  int x;                         /* the region starts at this column of each row (0 unless
                                    the request was padded) */
  int64_t stride;                /* bytes from one row to the next (w*channels unless padded;
                                    0 from older callers: packed) */
} rill__img_out_t;

/* The bytes a padded decode of the planned region `plan` may need. */
static inline size_t rill__img_padded_size(const rill__img_out_t* plan) {
  return ((size_t)plan->w + RILL__IMG_PAD_COLS) * (size_t)plan->h * (size_t)plan->channels;
}

/* Files whose bytes were verified to their end: a set of 64-bit fingerprints of the bytes
 * (a hash of every byte and the size; never 0), open addressing, lock-free (any thread may
 * look up and add). A file is added only after a decode that read it to its end marker
 * without error, so a damaged file is never in the set and fails in every epoch whatever the
 * region; an intact one skips the rows below later regions, and keeps its entropy marks
 * (JPEG) so that later regions skip the rows above them too. When the table is full a file
 * is simply not remembered (it is verified again): the results never depend on the table. */
typedef struct rill__img_memo {
  _Atomic uint64_t* keys;
  uint64_t mask;                 /* capacity - 1 (a power of two) */
  /* per slot: the file's JPEG entropy marks, or a sentinel for a file without any (NULL
   * until the file is added); set once, freed with the table */
  _Atomic(struct rill__jpeg_marks*)* marks;
  _Atomic int64_t marks_bytes;   /* held by the marks, at most marks_max */
  int64_t marks_max;             /* RILL__IMG_MARKS_MAX_BYTES unless set after init */
  int64_t files;                 /* the files the table was made for */
  _Atomic int64_t added;         /* files added so far */
} rill__img_memo_t;
#define RILL__IMG_MARKS_MAX_BYTES ((int64_t)256 << 20)
/* The fingerprint of n bytes (never 0). */
uint64_t rill__img_fingerprint(const void* buf, size_t n);
/* A table for about `files` files (capacity the next power of two >= 1.5 files, at most
 * 2^22 entries). RILL_ENOMEM when it cannot be allocated. */
int rill__img_memo_init(rill__img_memo_t* m, int64_t files);
void rill__img_memo_free(rill__img_memo_t* m);
/* The slot of a verified file, or -1. */
int64_t rill__img_memo_find(const rill__img_memo_t* m, uint64_t key);
/* Adds a verified file with its JPEG entropy marks (NULL: none), which the table then owns
 * (it frees them when the file is already there, the table is full or the marks would pass
 * marks_max bytes). */
void rill__img_memo_add(rill__img_memo_t* m, uint64_t key, struct rill__jpeg_marks* marks);
/* A file's equal share of marks_max, and the column marks its new marks may hold for all the
 * table's files to keep theirs within it (rill__img_request_t.col_marks, .copy_max). */
int64_t rill__img_memo_share(const rill__img_memo_t* m);
int rill__img_memo_col_marks(const rill__img_memo_t* m);
/* The bytes a new file's copy and its marks may take (rill__img_request_t.copy_max): its
 * share and what the files added so far left of theirs, the shares of the files not added
 * yet set aside. */
int64_t rill__img_memo_copy_room(const rill__img_memo_t* m);
/* The entropy marks kept for the file in `slot`, or NULL. */
struct rill__jpeg_marks* rill__img_memo_marks(const rill__img_memo_t* m, int64_t slot);
/* The verified-file table that image operator `column` of df decodes regions with (a
 * normalize fused with a crop: the crop's), NULL for other columns; one table is shared by
 * the operators over the same column of a dataframe. For tests. */
const void* rill__img_op_table(const rill_df_t* df, int column);

/* ---- JPEG entropy marks (image_jpeg_marks.c; no libjpeg there): where runs of MCU rows
 * start in the entropy-coded data of a baseline Huffman JPEG with one interleaved scan (or
 * one component) and no restart intervals, found as seeks need them. */
typedef struct rill__jpeg_marks rill__jpeg_marks_t;
/* The marker segment at byte *i of a JPEG (after any fill bytes), *i moved past it: returns
 * its marker code, with its parameters in *seg, *seg_len (0 for the markers without any: SOI,
 * EOI, RSTn, TEM); 0 when no marker starts there or the segment runs past n. */
int rill__jpeg_segment(const uint8_t* p, size_t n, size_t* i, const uint8_t** seg, size_t* seg_len);
/* An empty set of marks for the file in buf (its header read), with room for at most
 * `col_marks` column marks (at most RILL__JPEG_COL_MARKS_MAX: one per MCU, or one every few
 * MCUs of a row where they would be more; fewer than two a row and one: none); NULL when the
 * file cannot have marks (or out of memory). Freed with rill__free; thread-safe once shared. */
#define RILL__JPEG_COL_MARKS_MAX 4096
rill__jpeg_marks_t* rill__jpeg_marks_new(const void* buf, size_t n, int col_marks);
/* The same for a JPEG made here (a file's copy: see rill__img_request_t.copy_max), whose n
 * bytes the set holds after its marks (counted by rill__jpeg_marks_bytes, kept by
 * rill__jpeg_marks_drop_columns); NULL as above. */
rill__jpeg_marks_t* rill__jpeg_marks_hold(const void* buf, size_t n, int col_marks);
/* The bytes a set holds (*n of them), or NULL: the marks are for the file's own bytes. */
const uint8_t* rill__jpeg_marks_stream(const rill__jpeg_marks_t* m, size_t* n);
/* The column marks that fit in `bytes` a file with its row marks (0 .. RILL__JPEG_COL_MARKS_MAX). */
int rill__jpeg_col_marks_within(int64_t bytes);
/* Marks found so far (for tests) and the bytes the set holds. */
int rill__jpeg_marks_known(const rill__jpeg_marks_t* m);
size_t rill__jpeg_marks_bytes(const rill__jpeg_marks_t* m);
void rill__jpeg_marks_size(const rill__jpeg_marks_t* m, int* width, int* height, int* channels);
/* Walks a new set of marks through the whole file once, finding every row mark and the
 * column marks (every few MCUs of every row, and the data's end) that cuts need. 2: found,
 * and the file is intact to its end: every block decoded as libjpeg decodes it, and the end
 * marker right after the last MCU (a decode need not read the rows below its region to check
 * them); 1: found; 0: the walk failed or the file has no room for column marks (the row marks
 * are then found by seeks as before); -1: the data is damaged (rill__jpeg_marks_damaged says
 * where). Not thread-safe: for marks not shared yet. */
int rill__jpeg_marks_walk_all(rill__jpeg_marks_t* m, const void* buf, size_t n);
/* 1 when a walk of the marks met a Huffman code the file's tables lack or a DC value out of
 * range (damage libjpeg-turbo's fast Huffman decoder lets pass without a warning), with the
 * MCU's row and column; else 0. */
int rill__jpeg_marks_damaged(const rill__jpeg_marks_t* m, int* row, int* col);
int rill__jpeg_marks_have_columns(const rill__jpeg_marks_t* m);
/* The same marks without the column marks and their room (a smaller allocation: m itself is
 * freed unless out of memory, when m comes back as it was, its column marks unused). */
rill__jpeg_marks_t* rill__jpeg_marks_drop_columns(rill__jpeg_marks_t* m);
/* A cut: a JPEG of the MCU rows and columns around a region and nothing else, made of the
 * file's own entropy-coded bytes. Each MCU row of the cut is a pad (coded here: it sets the
 * DC predictions the row's next MCU was coded against and ends on the bit where that MCU
 * starts in the file; one MCU, or up to 16 where the file's DC tables lack the code of a
 * difference, which is then set in steps they have) followed by the row's span of MCUs,
 * copied. The region and one pixel around it (the context of chroma upsampling) lie in the
 * file's MCUs, so the cut decodes to the same pixels there; the pad columns, left of the
 * span, are never part of the region. */
typedef struct rill__jpeg_cut {
  size_t len;                    /* bytes of the stream */
  int left, top;                 /* full-resolution pixel of the file at the cut's (0, 0): the
                                    cut's first columns are the pad, so left may be < 0 */
  int width, height;             /* the cut's frame */
} rill__jpeg_cut_t;
/* Builds the cut for the region (x, y, w, h) of the image scaled by num/denom to sw x sh, in
 * *out (grown to *cap, rill__alloc'ed). 1: done; 0: no cut serves (no column marks, a region
 * at the left edge or as wide as the image, a code the pad needs missing from the tables):
 * decode otherwise; RILL_ENOMEM. Thread-safe on shared marks. */
int rill__jpeg_cut(const rill__jpeg_marks_t* m, const void* buf, size_t n, int x, int y, int w, int h, int sw,
                   int sh, int num, int denom, uint8_t** out, size_t* cap, rill__jpeg_cut_t* cut);
/* A seek: the stream head[0, head) followed by the file's bytes from `rest` is a JPEG of
 * `drop` fewer rows: its first MCU row is synthetic, and the rows after it are the
 * original's from row drop + (rows of an MCU) on, the first of those excepted (its chroma
 * context above is the synthetic row). */
typedef struct rill__jpeg_seek {
  size_t head, rest;
  int drop;                      /* full-resolution rows */
} rill__jpeg_seek_t;
/* Builds the head of a seek to the lowest mark whose rows start above row y of the image
 * scaled by num/denom, in *head (grown to *cap, rill__alloc'ed). A mark not known yet is
 * walked to first from the last one known (unless another thread is walking this file's
 * marks: then the last known mark serves), which checks the rows walked as libjpeg would.
 * 1: done; 0: no mark serves (none above the row, the walk failed, or the bytes are not the
 * ones the marks were made for; a walk that met damaged data says so in
 * rill__jpeg_marks_damaged): decode from the start; RILL_ENOMEM. */
int rill__jpeg_seek(rill__jpeg_marks_t* m, const void* buf, size_t n, int y, int num, int denom,
                    uint8_t** head, size_t* cap, rill__jpeg_seek_t* out);

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
/* RILL_OK when dst_size bytes hold the region of `geom` in packed rows of `channels`, else
 * RILL_EINVAL saying so (the decoders' check of their destination). */
int rill__img_dst_fits(const rill__img_geom_t* geom, int channels, size_t dst_size, rill_error_t* err);
/* Luma of 8-bit RGB (ITU-R BT.601 weights, the ones JPEG uses for Y). */
static inline uint8_t rill__img_luma(int r, int g, int b) {
  return (uint8_t)((r * 19595 + g * 38470 + b * 7471 + 32768) >> 16);
}

/* Per-format decoders (image_jpeg.c, image_png.c, image_webp.c); same contracts as
 * rill__img_probe and rill__img_decode for data already known to carry the format's
 * signature. Defined only when built with the library (RILL_HAVE_JPEG, RILL_HAVE_PNG,
 * RILL_HAVE_WEBP). */
int rill__jpeg_probe(const void* buf, size_t n, rill__img_info_t* info, rill_error_t* err);
int rill__jpeg_decode(const void* buf, size_t n, const rill__img_request_t* req, uint8_t* dst,
                      size_t dst_size, rill__img_out_t* out, rill_error_t* err);
int rill__png_probe(const void* buf, size_t n, rill__img_info_t* info, rill_error_t* err);
int rill__png_decode(const void* buf, size_t n, const rill__img_request_t* req, uint8_t* dst,
                     size_t dst_size, rill__img_out_t* out, rill_error_t* err);
int rill__webp_probe(const void* buf, size_t n, rill__img_info_t* info, rill_error_t* err);
int rill__webp_decode(const void* buf, size_t n, const rill__img_request_t* req, uint8_t* dst,
                      size_t dst_size, rill__img_out_t* out, rill_error_t* err);

/* ---- pixel kernels of the image operators (image_kernels.c). Images are HWC uint8 with a
 * row stride in bytes; outputs are packed. */

/* Per-thread working memory of the operators: grown on demand, never shrunk. */
typedef struct rill__img_scratch {
  uint8_t* img;    /* decoded region */
  size_t img_cap;
  float* tmp;      /* horizontal pass output / jitter working copy */
  size_t tmp_cap;
  uint8_t* out;    /* a cell produced before being appended to a variable array */
  size_t out_cap;
  int32_t* idx;    /* coefficient start indices (x then y) */
  size_t idx_cap;
  float* w;        /* coefficient weights (x then y) */
  size_t w_cap;
  const float** rows;
  size_t rows_cap;
  int32_t* hidx;   /* horizontal pass, per output value: source index of tap 0 */
  size_t hidx_cap;
  float* hw;       /* horizontal pass, per output value: weights of taps 0 and 1 */
  size_t hw_cap;
  float* rowf;     /* one source row as floats */
  size_t rowf_cap;
  uint8_t* row;    /* one output row of a resize fused with normalize */
  size_t row_cap;
} rill__img_scratch_t;

/* One row of `w` pixels from `sc` channels (1 G, 2 GA, 3 RGB, 4 RGBA) to `dc` (1, 3, 4): gray
 * from RGB by rill__img_luma, alpha 255 where the source has none, dropped where dc has none. */
void rill__img_convert_row(const uint8_t* s, int sc, uint8_t* d, int dc, int w);
/* Makes *pp (a pointer to a buffer pointer) hold at least `need` bytes; contents are not
 * kept. Returns the buffer, or NULL when out of memory. */
void* rill__img_grow(void* pp, size_t* cap, size_t need);
/* Frees the buffers of `s` (not `s`). */
void rill__img_scratch_free(rill__img_scratch_t* s);

/* Resamples the sub-region (fx, fy, fw, fh) (fractional, relative to the window) of the
 * window (x0, y0, w, h) of a C-channel image into dst (out_h x out_w x C). Pixels outside the
 * window are never read. RILL_ENOMEM when the scratch cannot grow. */
int rill__img_resize(rill__img_scratch_t* s, const uint8_t* src, int64_t stride, int C, int x0, int y0, int w,
                     int h, double fx, double fy, double fw, double fh, uint8_t* dst, int out_w, int out_h,
                     rill_interp_t interp);

/* value * scale[c] + bias[c] per channel */
typedef struct rill__img_norm {
  float scale[4], bias[4];
} rill__img_norm_t;
/* rill__img_resize followed by rill__img_normalize of its out_h x out_w x C result into dst
 * (the same bytes), without the uint8 image: each resized row is normalized while it is in
 * the cache. RILL_ENOMEM when the scratch cannot grow. */
int rill__img_resize_normalize(rill__img_scratch_t* s, const uint8_t* src, int64_t stride, int C, int x0, int y0,
                               int w, int h, double fx, double fy, double fw, double fh, int out_w, int out_h,
                               rill_interp_t interp, int flip, const rill__img_norm_t* k, int f16, int chw,
                               void* dst);
/* A packed H x W x C image to float32 (or float16 when f16), CHW when chw else HWC, mirrored
 * when flip. */
void rill__img_normalize(const uint8_t* src, int H, int W, int C, int flip, const rill__img_norm_t* k, int f16,
                         int chw, void* dst);
/* The mirror image (left <-> right). */
void rill__img_flip(const uint8_t* src, int H, int W, int C, int64_t stride, uint8_t* dst);
/* The centred oh x ow crop (zero-padded where the image is smaller), as torchvision. */
void rill__img_center_crop(const uint8_t* px, int w, int h, int64_t stride, int C, int oh, int ow, uint8_t* dst);
/* Brightness, contrast and saturation factors drawn from `rng` within jit[0..2] and applied in
 * a random order, as torchvision's ColorJitter; f: w*h*C floats of working memory. */
void rill__img_jitter(const double jit[3], rill_rng_t* rng, const uint8_t* px, int w, int h, int64_t stride, int C,
                      float* f, uint8_t* dst);
/* RandomResizedCrop.get_params: the crop (x, y, w, h) of a W x H image. */
void rill__rrc_params(rill_rng_t* rng, int W, int H, const double scale[2], const double ratio[2], int* ox,
                      int* oy, int* ow, int* oh);
/* Tests and benchmarks: 0 forces the portable loops, 1 selects the vector loops when the CPU
 * has them. Returns 1 when vector loops are in use afterwards. */
int rill__image_set_simd(int on);
/* Tests and benchmarks: 0 makes rill_image_normalize leave a resize or random resized crop
 * to its own stage instead of computing it (fused) for the operators added afterwards; 1
 * (the default) fuses them. Returns the previous setting. */
int rill__image_set_fuse(int on);

#endif /* RILL_IMAGE_INTERNAL_H */
