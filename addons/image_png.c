/* PNG decoding through libpng: palette, low bit depths, 16-bit, gray+alpha and tRNS are
 * expanded to 8-bit gray/GA/RGB/RGBA by libpng and converted to the requested channels here.
 * A region is decoded by reading rows up to its last one and copying its columns (interlaced
 * images are decoded whole into scratch memory first). libpng errors longjmp back here and
 * become RILL_EFORMAT. libpng's own allocations come from a per-thread arena that is reset
 * after each image, so the steady state does not call malloc. */
#include <string.h>

#include "addon.h"
#include "image_internal.h"

#if RILL_HAVE_PNG

#include <png.h>
#include <stdio.h>

static uint32_t be32(const uint8_t* p) {
  return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* The header without libpng: signature, then IHDR (the first chunk). */
static int parse_ihdr(const void* buf, size_t n, rill__img_info_t* info, rill_error_t* err) {
  const uint8_t* p = buf;
  if (n < 33 || memcmp(p + 12, "IHDR", 4) != 0 || be32(p + 8) != 13)
    return rill_error_set(err, RILL_EFORMAT, "corrupt PNG header (no IHDR chunk)");
  uint32_t w = be32(p + 16), h = be32(p + 20);
  int color = p[25];
  if (w == 0 || h == 0 || w > 0x7fffffffu || h > 0x7fffffffu)
    return rill_error_set(err, RILL_EFORMAT, "corrupt PNG header (size %ux%u)", w, h);
  int ch;
  switch (color) {
    case 0: ch = 1; break;
    case 2: ch = 3; break;
    case 3: ch = 3; break;
    case 4: ch = 2; break;
    case 6: ch = 4; break;
    default: return rill_error_set(err, RILL_EFORMAT, "corrupt PNG header (color type %d)", color);
  }
  info->format = RILL__IMG_PNG;
  info->width = (int)w;
  info->height = (int)h;
  info->channels = ch;
  return RILL_OK;
}

#define ARENA_SIZE (512 * 1024)
#define ARENA_ALIGN 16

typedef struct png_state {
  uint8_t* arena;                /* bump allocator for libpng, reset per image */
  size_t arena_used;
  uint8_t* scratch;              /* rows or, for interlaced images, the whole image */
  size_t scratch_cap;
  char message[256];
  const uint8_t* src;            /* the file being read */
  size_t src_size, src_pos;
} png_state_t;

static void state_destroy(void* p) {
  png_state_t* st = p;
  rill__free(st->arena);
  rill__free(st->scratch);
}

/* one arena and scratch buffer per thread, from the library's scratch registry */
static const rill__scratch_kind_t state_kind = {sizeof(png_state_t), state_destroy};

static png_state_t* state_get(rill_error_t* err) {
  png_state_t* st = rill__scratch(&state_kind);
  if (st && !st->arena) st->arena = rill__alloc(ARENA_SIZE);
  if (!st || !st->arena) {
    rill_error_set(err, RILL_ENOMEM, "out of memory (PNG decoder state)");
    return NULL;
  }
  return st;
}

static png_voidp arena_malloc(png_structp png, png_alloc_size_t size) {
  png_state_t* st = png_get_mem_ptr(png);
  size_t at = (st->arena_used + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1);
  if (size <= ARENA_SIZE && at + size <= ARENA_SIZE) {
    st->arena_used = at + size;
    return st->arena + at;
  }
  return rill__alloc(size ? size : 1); /* large or overflowing requests: the real allocator */
}

static void arena_free(png_structp png, png_voidp ptr) {
  png_state_t* st = png_get_mem_ptr(png);
  uint8_t* p = ptr;
  if (!p || (p >= st->arena && p < st->arena + ARENA_SIZE)) return;
  rill__free(p);
}

static void on_error(png_structp png, png_const_charp msg) {
  png_state_t* st = png_get_error_ptr(png);
  snprintf(st->message, sizeof st->message, "%s", msg);
  png_longjmp(png, 1);
}

static void on_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

static void on_read(png_structp png, png_bytep data, png_size_t length) {
  png_state_t* st = png_get_io_ptr(png);
  if (length > st->src_size - st->src_pos) png_error(png, "truncated PNG data");
  memcpy(data, st->src + st->src_pos, length);
  st->src_pos += length;
}

static int scratch_reserve(png_state_t* st, size_t bytes, rill_error_t* err) {
  if (rill__img_grow(&st->scratch, &st->scratch_cap, bytes)) return RILL_OK;
  return rill_error_set(err, RILL_ENOMEM, "out of memory (%zu bytes of PNG scratch)", bytes);
}

int rill__png_probe(const void* buf, size_t n, rill__img_info_t* info, rill_error_t* err) {
  return parse_ihdr(buf, n, info, err);
}

/* Chunks that do not affect pixels; skipped so that metadata cannot cost time or memory. */
static const png_byte ignored_chunks[] = {
    't', 'E', 'X', 't', 0, 'z', 'T', 'X', 't', 0, 'i', 'T', 'X', 't', 0, 't', 'I', 'M', 'E', 0,
    'i', 'C', 'C', 'P', 0, 's', 'P', 'L', 'T', 0, 'e', 'X', 'I', 'f', 0, 'h', 'I', 'S', 'T', 0};

int rill__png_decode(const void* buf, size_t n, const rill__img_request_t* req, uint8_t* dst,
                     size_t dst_size, rill__img_out_t* out, rill_error_t* err) {
  rill__img_info_t info;
  int rc = parse_ihdr(buf, n, &info, err);
  if (rc < 0) return rc;
  rill__img_geom_t g;
  int channels = req->channels;
  if ((rc = rill__img_geometry(&info, req, &g, err)) < 0 || (rc = rill__img_dst_fits(&g, channels, dst_size, err)) < 0)
    return rc;
  size_t stride = (size_t)g.w * (size_t)channels;

  png_state_t* st = state_get(err);
  if (!st) return RILL_ENOMEM;
  st->arena_used = 0;
  st->src = buf;
  st->src_size = n;
  st->src_pos = 0;
  st->message[0] = 0;
  png_structp png = png_create_read_struct_2(PNG_LIBPNG_VER_STRING, st, on_error, on_warning, st,
                                             arena_malloc, arena_free);
  if (!png) return rill_error_set(err, RILL_ENOMEM, "out of memory (PNG decoder)");
  png_infop pinfo = png_create_info_struct(png);
  if (!pinfo) {
    png_destroy_read_struct(&png, NULL, NULL);
    return rill_error_set(err, RILL_ENOMEM, "out of memory (PNG decoder)");
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &pinfo, NULL);
    return rill_error_set(err, RILL_EFORMAT, "corrupt PNG data (%s)", st->message);
  }
  png_set_read_fn(png, st, on_read);
  png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, ignored_chunks,
                              (int)(sizeof ignored_chunks / 5));
  png_read_info(png, pinfo);
  png_set_expand(png);            /* palette -> RGB, gray < 8 bits -> 8 bits, tRNS -> alpha */
  png_set_scale_16(png);          /* 16-bit samples -> 8-bit, rounded */
  int passes = png_set_interlace_handling(png);
  png_read_update_info(png, pinfo);
  int sc = png_get_channels(png, pinfo);
  size_t rowbytes = png_get_rowbytes(png, pinfo);
  if (png_get_bit_depth(png, pinfo) != 8 || sc < 1 || sc > 4 || rowbytes != (size_t)info.width * (size_t)sc)
    png_error(png, "unexpected pixel layout after expansion");

  int direct = sc == channels && g.x == 0 && g.w == info.width;
  if (passes > 1) {
    /* Interlaced: every pass touches every row, so decode the image whole. */
    if ((rc = scratch_reserve(st, rowbytes * (size_t)info.height, err)) < 0) {
      png_destroy_read_struct(&png, &pinfo, NULL);
      return rc;
    }
    for (int p = 0; p < passes; p++)
      for (int y = 0; y < info.height; y++) png_read_row(png, st->scratch + (size_t)y * rowbytes, NULL);
    for (int y = 0; y < g.h; y++)
      rill__img_convert_row(st->scratch + (size_t)(g.y + y) * rowbytes + (size_t)g.x * (size_t)sc, sc,
                  dst + (size_t)y * stride, channels, g.w);
  } else {
    if (!direct && (rc = scratch_reserve(st, rowbytes, err)) < 0) {
      png_destroy_read_struct(&png, &pinfo, NULL);
      return rc;
    }
    for (int y = 0; y < g.y + g.h; y++) {
      int in = y >= g.y;
      /* rows above the region go to scratch (or to the first destination row, rewritten) */
      uint8_t* row = direct ? dst + (size_t)(in ? y - g.y : 0) * stride : st->scratch;
      png_read_row(png, row, NULL);
      if (in && !direct)
        rill__img_convert_row(row + (size_t)g.x * (size_t)sc, sc, dst + (size_t)(y - g.y) * stride, channels, g.w);
    }
  }
  if (g.y + g.h == info.height) png_read_end(png, NULL); /* whole file read: check its end */
  png_destroy_read_struct(&png, &pinfo, NULL);
  if (out) *out = (rill__img_out_t){g.w, g.h, channels, 1, 1, 0, (int64_t)g.w * channels};
  return RILL_OK;
}

#endif
