/* Image decoding shared by the image addons: format detection by magic bytes, request
 * geometry (region, DCT scale, pixel limit) and the rill_image_decode map. */
#include <stdatomic.h>
#include <string.h>

#include "addon.h"
#include "image_internal.h"
#include "rill_addons.h"

static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

static rill__img_format_t sniff(const uint8_t* p, size_t n, const char** other) {
  *other = NULL;
  if (n >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff) return RILL__IMG_JPEG;
  if (n >= 8 && memcmp(p, png_magic, 8) == 0) return RILL__IMG_PNG;
  if (n >= 12 && memcmp(p, "RIFF", 4) == 0 && memcmp(p + 8, "WEBP", 4) == 0) return RILL__IMG_WEBP;
  if (n >= 4 && memcmp(p, "GIF8", 4) == 0) *other = "GIF";
  else if (n >= 2 && p[0] == 'B' && p[1] == 'M') *other = "BMP";
  else if (n >= 4 && (memcmp(p, "II*\0", 4) == 0 || memcmp(p, "MM\0*", 4) == 0)) *other = "TIFF";
  else if (n >= 12 && memcmp(p + 4, "ftyp", 4) == 0) *other = "HEIF/AVIF";
  return RILL__IMG_UNKNOWN;
}

static int unknown_format(const uint8_t* p, size_t n, rill_error_t* err) {
  const char* other;
  if (n == 0) return rill_error_set(err, RILL_EFORMAT, "empty file");
  sniff(p, n, &other);
  if (other) return rill_error_set(err, RILL_ENOTSUP, "unsupported image format (%s)", other);
  return rill_error_set(err, RILL_ENOTSUP, "unsupported image format (not JPEG, PNG or WebP)");
}

/* The decoder of each format; NULL functions where the library is not built in. */
typedef struct decoder {
  const char* format;
  const char* library;
  int (*probe)(const void* buf, size_t n, rill__img_info_t* info, rill_error_t* err);
  int (*decode)(const void* buf, size_t n, const rill__img_request_t* req, uint8_t* dst, size_t dst_size,
                rill__img_out_t* out, rill_error_t* err);
} decoder_t;

static const decoder_t decoders[] = {
#if RILL_HAVE_JPEG
    [RILL__IMG_JPEG] = {"JPEG", "libjpeg", rill__jpeg_probe, rill__jpeg_decode},
#else
    [RILL__IMG_JPEG] = {"JPEG", "libjpeg", NULL, NULL},
#endif
#if RILL_HAVE_PNG
    [RILL__IMG_PNG] = {"PNG", "libpng", rill__png_probe, rill__png_decode},
#else
    [RILL__IMG_PNG] = {"PNG", "libpng", NULL, NULL},
#endif
#if RILL_HAVE_WEBP
    [RILL__IMG_WEBP] = {"WebP", "libwebp", rill__webp_probe, rill__webp_decode},
#else
    [RILL__IMG_WEBP] = {"WebP", "libwebp", NULL, NULL},
#endif
};

/* The decoder of the data in buf, or NULL with err set (no data, an unknown format or a
 * decoder not built in) and *rc the code. */
static const decoder_t* decoder_of(const void* buf, size_t n, int* rc, rill_error_t* err) {
  const char* other;
  if (!buf && n) {
    *rc = rill_error_set(err, RILL_EINVAL, "image data is NULL");
    return NULL;
  }
  rill__img_format_t f = sniff(buf, n, &other);
  if (f == RILL__IMG_UNKNOWN) {
    *rc = unknown_format(buf, n, err);
    return NULL;
  }
  const decoder_t* d = &decoders[f];
  if (!d->decode) {
    *rc = rill_error_set(err, RILL_ENOTSUP, "%s decoding is not available: built without %s", d->format,
                         d->library);
    return NULL;
  }
  return d;
}

int rill__img_probe(const void* buf, size_t n, rill__img_info_t* info, rill_error_t* err) {
  int rc;
  const decoder_t* d = decoder_of(buf, n, &rc, err);
  return d ? d->probe(buf, n, info, err) : rc;
}

/* ceil(v * num / den) for v >= 0, in 64 bits (v * num can pass INT_MAX) */
static int scaled_up(int v, int num, int den) { return (int)(((int64_t)v * num + den - 1) / den); }

static void region_at(const rill__img_info_t* info, int x, int y, int w, int h, int m, rill__img_geom_t* g) {
  int num = m, den = 8;
  while (num % 2 == 0 && den > 1) num /= 2, den /= 2;
  g->num = num;
  g->denom = den;
  g->sw = scaled_up(info->width, num, den);
  g->sh = scaled_up(info->height, num, den);
  g->x = (int)((int64_t)x * num / den);
  g->y = (int)((int64_t)y * num / den);
  int x1 = scaled_up(x + w, num, den), y1 = scaled_up(y + h, num, den);
  if (x1 > g->sw) x1 = g->sw;
  if (y1 > g->sh) y1 = g->sh;
  g->w = x1 - g->x;
  g->h = y1 - g->y;
}

int rill__img_geometry(const rill__img_info_t* info, const rill__img_request_t* req,
                       rill__img_geom_t* geom, rill_error_t* err) {
  if (req->channels != 1 && req->channels != 3 && req->channels != 4)
    return rill_error_set(err, RILL_EINVAL, "channels must be 1, 3 or 4 (got %d)", req->channels);
  int64_t limit = req->max_pixels > 0 ? req->max_pixels : RILL__DEFAULT_MAX_PIXELS;
  int64_t pixels = (int64_t)info->width * info->height;
  if (info->width <= 0 || info->height <= 0)
    return rill_error_set(err, RILL_EFORMAT, "image of %dx%d pixels", info->width, info->height);
  if (pixels > limit)
    return rill_error_set(err, RILL_ERANGE, "image of %dx%d pixels exceeds the limit of %lld pixels",
                          info->width, info->height, (long long)limit);
  int x = 0, y = 0, w = info->width, h = info->height;
  if (req->w != 0 && req->h != 0) {
    if (req->x < 0 || req->y < 0 || req->w < 0 || req->h < 0 || req->x > info->width - req->w ||
        req->y > info->height - req->h)
      return rill_error_set(err, RILL_EINVAL, "region %dx%d at (%d,%d) is outside the %dx%d image",
                            req->w, req->h, req->x, req->y, info->width, info->height);
    x = req->x, y = req->y, w = req->w, h = req->h;
  }
  if (req->scales & ~RILL__IMG_SCALES_ALL)
    return rill_error_set(err, RILL_EINVAL, "scale mask 0x%x names factors other than 1/8 .. 8/8",
                          (unsigned)req->scales);
  int m = 8; /* the smallest allowed M/8 that keeps the region at least min_w x min_h */
  if (info->format == RILL__IMG_JPEG && (req->min_w > 0 || req->min_h > 0)) {
    int allowed = req->scales ? req->scales : RILL__IMG_SCALES_FAST;
    for (int c = 1; c < 8; c++) {
      if (!(allowed & (1 << c))) continue;
      rill__img_geom_t t;
      region_at(info, x, y, w, h, c, &t);
      if ((req->min_w <= 0 || t.w >= req->min_w) && (req->min_h <= 0 || t.h >= req->min_h)) {
        m = c;
        break;
      }
    }
  }
  region_at(info, x, y, w, h, m, geom);
  return RILL_OK;
}

int rill__img_dst_fits(const rill__img_geom_t* g, int channels, size_t dst_size, rill_error_t* err) {
  if (dst_size >= (size_t)g->w * (size_t)g->h * (size_t)channels) return RILL_OK;
  return rill_error_set(err, RILL_EINVAL, "destination of %zu bytes is smaller than the %dx%dx%d image", dst_size, g->w,
                        g->h, channels);
}

int rill__img_plan(const rill__img_info_t* info, const rill__img_request_t* req,
                   rill__img_out_t* plan, rill_error_t* err) {
  rill__img_geom_t g;
  int rc = rill__img_geometry(info, req, &g, err);
  if (rc < 0) return rc;
  *plan = (rill__img_out_t){g.w, g.h, req->channels, g.denom, g.num, 0, (int64_t)g.w * req->channels};
  return RILL_OK;
}

int rill__img_decode(const void* buf, size_t n, const rill__img_request_t* req, uint8_t* dst,
                     size_t dst_size, rill__img_out_t* out, rill_error_t* err) {
  int rc;
  const decoder_t* d = decoder_of(buf, n, &rc, err);
  return d ? d->decode(buf, n, req, dst, dst_size, out, err) : rc;
}

/* ---------------------------------------------------------------- verified files */

static inline uint64_t rotl64(uint64_t v, int r) { return (v << r) | (v >> (64 - r)); }
static inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

/* Four independent multiply-rotate lanes over 32-byte blocks (several GB/s: ~1% of a
 * decode), folded with the tail and the size and mixed so that every input bit reaches
 * every output bit. */
uint64_t rill__img_fingerprint(const void* buf, size_t n) {
  const uint64_t K1 = 0x9e3779b185ebca87ull, K2 = 0xc2b2ae3d27d4eb4full, K3 = 0x165667b19e3779f9ull;
  const uint8_t* p = buf;
  uint64_t a = K1 + K2, b = K2, c = 0, d = (uint64_t)0 - K1;
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a = rotl64(a + load64(p + i) * K2, 31) * K1;
    b = rotl64(b + load64(p + i + 8) * K2, 31) * K1;
    c = rotl64(c + load64(p + i + 16) * K2, 31) * K1;
    d = rotl64(d + load64(p + i + 24) * K2, 31) * K1;
  }
  uint64_t h = rotl64(a, 1) + rotl64(b, 7) + rotl64(c, 12) + rotl64(d, 18) + (uint64_t)n * K3;
  for (; i + 8 <= n; i += 8) h = rotl64(h ^ (rotl64(load64(p + i) * K2, 31) * K1), 27) * K1 + K3;
  for (; i < n; i++) h = rotl64(h ^ (p[i] * K3), 11) * K1;
  h ^= h >> 33;
  h *= K2;
  h ^= h >> 29;
  h *= K3;
  h ^= h >> 32;
  return h ? h : 1;
}

#define MEMO_MAX_LOG2 22
#define MEMO_PROBES 32

int rill__img_memo_init(rill__img_memo_t* m, int64_t files) {
  uint64_t cap = 64;
  while (cap < (uint64_t)(files > 0 ? files : 0) + (uint64_t)(files > 0 ? files : 0) / 2 &&
         cap < ((uint64_t)1 << MEMO_MAX_LOG2))
    cap *= 2;
  *m = (rill__img_memo_t){rill__calloc((size_t)cap, sizeof *m->keys), 0, rill__calloc((size_t)cap, sizeof *m->marks), 0,
                          RILL__IMG_MARKS_MAX_BYTES, files > 0 ? files : 1, 0};
  if (!m->keys || !m->marks) {
    rill__img_memo_free(m);
    return RILL_ENOMEM;
  }
  m->mask = cap - 1;
  return RILL_OK;
}

int64_t rill__img_memo_share(const rill__img_memo_t* m) { return m->marks_max / (m->files > 0 ? m->files : 1); }

int rill__img_memo_col_marks(const rill__img_memo_t* m) { return rill__jpeg_col_marks_within(rill__img_memo_share(m)); }

int64_t rill__img_memo_copy_room(const rill__img_memo_t* m) {
  int64_t share = rill__img_memo_share(m), later = m->files - atomic_load_explicit(&m->added, memory_order_relaxed) - 1;
  int64_t room = m->marks_max - atomic_load_explicit(&m->marks_bytes, memory_order_relaxed) - (later > 0 ? later : 0) * share;
  return room < 0 ? 0 : room;
}

/* what a slot holds for a file without marks */
static char no_marks;
#define NO_MARKS ((rill__jpeg_marks_t*)(void*)&no_marks)

void rill__img_memo_free(rill__img_memo_t* m) {
  if (m->marks)
    for (uint64_t i = 0; i <= m->mask; i++) {
      rill__jpeg_marks_t* k = atomic_load_explicit(&m->marks[i], memory_order_acquire);
      if (k && k != NO_MARKS) rill__free(k);
    }
  rill__free((void*)m->keys);
  rill__free((void*)m->marks);
  m->keys = NULL;
  m->marks = NULL;
  m->mask = 0;
}

int64_t rill__img_memo_find(const rill__img_memo_t* m, uint64_t key) {
  if (!m->keys) return -1;
  for (uint64_t i = 0; i < MEMO_PROBES; i++) {
    uint64_t slot = (key + i) & m->mask;
    uint64_t k = atomic_load_explicit(&m->keys[slot], memory_order_relaxed);
    if (k == key) return (int64_t)slot;
    if (k == 0) return -1;
  }
  return -1;
}

void rill__img_memo_add(rill__img_memo_t* m, uint64_t key, rill__jpeg_marks_t* marks) {
  /* column marks not found leave their room; over the limit, the row marks alone may fit */
  if (marks && !rill__jpeg_marks_have_columns(marks)) marks = rill__jpeg_marks_drop_columns(marks);
  int64_t bytes = (int64_t)rill__jpeg_marks_bytes(marks);
  while (marks && atomic_fetch_add_explicit(&m->marks_bytes, bytes, memory_order_relaxed) + bytes > m->marks_max) {
    atomic_fetch_sub_explicit(&m->marks_bytes, bytes, memory_order_relaxed);
    if (rill__jpeg_marks_have_columns(marks)) {
      marks = rill__jpeg_marks_drop_columns(marks);
      bytes = (int64_t)rill__jpeg_marks_bytes(marks);
      continue;
    }
    rill__free(marks);
    marks = NULL, bytes = 0;
  }
  for (uint64_t i = 0; m->keys && i < MEMO_PROBES; i++) {
    uint64_t slot = (key + i) & m->mask;
    uint64_t k = atomic_load_explicit(&m->keys[slot], memory_order_relaxed);
    if (k == 0 && atomic_compare_exchange_strong_explicit(&m->keys[slot], &k, key, memory_order_relaxed,
                                                          memory_order_relaxed)) {
      k = key;
      atomic_fetch_add_explicit(&m->added, 1, memory_order_relaxed);
    }
    if (k != key) continue;
    rill__jpeg_marks_t* none = NULL;
    if (atomic_compare_exchange_strong_explicit(&m->marks[slot], &none, marks ? marks : NO_MARKS,
                                                memory_order_release, memory_order_relaxed))
      return;
    break; /* another thread added the same file first */
  }
  if (marks) atomic_fetch_sub_explicit(&m->marks_bytes, bytes, memory_order_relaxed);
  rill__free(marks);
}

rill__jpeg_marks_t* rill__img_memo_marks(const rill__img_memo_t* m, int64_t slot) {
  rill__jpeg_marks_t* k = atomic_load_explicit(&m->marks[slot], memory_order_acquire);
  return k == NO_MARKS ? NULL : k;
}

/* ---------------------------------------------------------------- rill_image_decode */

typedef struct decode_ctx {
  int channels;
  int64_t max_pixels;
} decode_ctx_t;

/* Turns the decoder's error for cell i into the stage's error, naming the cell's file. */
static int cell_error(rill_error_t* err, int64_t i, const rill_array_t* paths, const rill_error_t* e) {
  if (err) err->row = i;
  rill__cell_t path;
  if (paths) rill__cell_view(paths, i, &path);
  if (paths && path.valid) return rill_error_set(err, e->code, "%.*s: %s", (int)path.nbytes, (const char*)path.data, e->message);
  return rill_error_set(err, e->code, "image: %s", e->message);
}

static int decode_map(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* exec,
                      void* ctx, rill_error_t* err) {
  const decode_ctx_t* dc = ctx;
  const rill_array_t* bytes = in[0];
  const rill_array_t* paths = nin > 1 ? in[1] : NULL;
  int64_t n = bytes->length;
  int64_t shape[3] = {-1, -1, dc->channels};
  int rc = rill_exec_alloc(exec, out, rill_type_tensor(RILL_UINT8, 3, shape), n);
  if (rc < 0) return rill_error_set(err, rc, "cannot allocate %lld decoded images", (long long)n);
  rill__img_request_t req = {.channels = dc->channels, .max_pixels = dc->max_pixels};
  rill_error_t e;
  rill_error_clear(&e);

  /* Cell by cell: header, size, then the decode straight into the cell's place. Cells
   * before a failing one stay set (the engine keeps them and calls again after it). */
  for (int64_t i = 0; i < n; i++) {
    int64_t sh[3] = {0, 0, dc->channels};
    if (!rill_array_is_valid(bytes, i)) {
      if ((rc = rill_array_set_var(out, i, NULL, 0, sh)) < 0 || (rc = rill_array_set_null(out, i)) < 0)
        return rill_error_set(err, rc, "out of memory");
      continue;
    }
    rill__cell_t cell;
    rill__cell_view(bytes, i, &cell);
    rill__img_info_t info;
    rill__img_out_t plan, got;
    if ((rc = rill__img_probe(cell.data, (size_t)cell.nbytes, &info, &e)) < 0 ||
        (rc = rill__img_plan(&info, &req, &plan, &e)) < 0)
      return cell_error(err, i, paths, &e);
    sh[0] = plan.h;
    sh[1] = plan.w;
    int64_t size = sh[0] * sh[1] * sh[2];
    if ((rc = rill_array_set_var(out, i, NULL, size, sh)) < 0) {
      if (err) err->row = i;
      return rill_error_set(err, rc, "cannot allocate %lld bytes for a %lldx%lld image", (long long)size,
                            (long long)sh[1], (long long)sh[0]);
    }
    if ((rc = rill__img_decode(cell.data, (size_t)cell.nbytes, &req, (uint8_t*)out->data + out->offsets[i], (size_t)size,
                               &got, &e)) < 0) {
      rill__array_var_commit(out, i); /* takes cell i back: the engine sets it (empty or null) */
      return cell_error(err, i, paths, &e);
    }
  }
  return RILL_OK;
}

int rill_image_decode(rill_df_t* df, const char* name, int bytes_column, const rill_decode_opts_t* opts,
                      rill_error_t* err) {
  rill_decode_opts_t o = opts ? *opts : (rill_decode_opts_t){0};
  if (!df || !name) return rill__fail(err, RILL_EINVAL, "rill_image_decode: df and name are required");
  if (o.channels == 0) o.channels = 3;
  if (o.channels != 1 && o.channels != 3 && o.channels != 4)
    return rill__fail(err, RILL_EINVAL, "rill_image_decode: channels must be 1, 3 or 4 (got %d)", o.channels);
  if (o.max_pixels < 0)
    return rill__fail(err, RILL_EINVAL, "rill_image_decode: max_pixels must be >= 0");
  const rill_field_t* f = rill_df_field(df, bytes_column);
  if (!f) return rill__bad_column(err, "rill_image_decode", df, bytes_column);
  if (f->type.dtype != RILL_BINARY || f->type.ndim != 0)
    return rill__fail(err, RILL_EINVAL, "rill_image_decode: column '%s' is not BINARY", f->name);
  int inputs[2] = {bytes_column, -1};
  int ninputs = 1;
  const char* pname = o.path_column ? o.path_column : "path";
  if (pname[0]) {
    int pc = -1;
    for (int c = 0; c < rill_df_ncolumns(df); c++) {
      const rill_field_t* pf = rill_df_field(df, c);
      if (pf && strcmp(pf->name, pname) == 0) pc = c;
    }
    const rill_field_t* pf = pc >= 0 ? rill_df_field(df, pc) : NULL;
    if (pf && pf->type.dtype == RILL_STRING && pf->type.ndim == 0) {
      inputs[1] = pc;
      ninputs = 2;
    } else if (o.path_column) {
      return rill__fail(err, RILL_EINVAL, "rill_image_decode: no STRING column '%s'", pname);
    }
  }
  decode_ctx_t* ctx = rill__calloc(1, sizeof *ctx);
  if (!ctx) return rill__fail(err, RILL_ENOMEM, "out of memory");
  ctx->channels = o.channels;
  ctx->max_pixels = o.max_pixels;
  int64_t shape[3] = {-1, -1, o.channels};
  rill_stage_opts_t so = {.where = RILL_STAGE_CPU, .grain = o.grain, .on_error = o.on_error,
                          .nullable = f->nullable || o.on_error == RILL_ON_ERROR_NULL};
  return rill_df_map(df, name, rill_type_tensor(RILL_UINT8, 3, shape), inputs, ninputs, decode_map, ctx,
                     rill__free, &so, err);
}
