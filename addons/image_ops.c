/* Image operators: random resized crop and resize (both fused with decoding for encoded
 * bytes), centre crop, horizontal flip, colour jitter and normalize (fused flip, HWC -> CHW,
 * float32/float16). Each is a map column over uint8 HWC cells.
 *
 * Every operator is a class (op_class_t): how it checks its options, its output type, whether
 * it can decode encoded bytes itself (and which region it needs then), its output size and
 * its per-image kernel (image_kernels.c does the pixel work). One map function runs them all:
 * it fetches each cell's image (decoded or not), calls the class and stores the result. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "addon.h"
#include "image_internal.h"
#include "rill_addons.h"

/* ---------------------------------------------------------------- per-thread scratch */

static void scratch_destroy(void* state) { rill__img_scratch_free(state); }

static const rill__scratch_kind_t scratch_kind = {sizeof(rill__img_scratch_t), scratch_destroy};

/* ---------------------------------------------------------------- operators */

typedef struct op op_t;

/* The image of one cell: pixels, the window (x0, y0, rw, rh) of them the operator works on,
 * and within that window the wanted region (fx, fy, fw, fh) (fractional when the pixels were
 * decoded at a DCT scale). */
typedef struct img {
  const uint8_t* px;
  int w, h;
  int64_t stride;
  int x0, y0, rw, rh;
  double fx, fy, fw, fh;
  int full_w, full_h;    /* the region's size at full resolution */
} img_t;

typedef struct op_class {
  const char* what;      /* the operator's name in messages */
  size_t size;           /* bytes of the operator's state (an op_t first) */
  /* Checks the options and keeps them in op (before the input is checked). */
  int (*validate)(op_t* op, const void* opts, rill_error_t* err);
  /* Sets op->out_type (and what depends on the input) once op->C is known. */
  int (*output)(op_t* op, const rill_field_t* in, const void* opts, rill_error_t* err);
  /* Fused decode: chooses the region and the smallest DCT scale of encoded bytes from the
   * full image size. NULL: the operator takes decoded images only. */
  void (*pick)(const op_t* op, rill_rng_t* rng, int W, int H, rill__img_request_t* req);
  /* On decoded input: narrows the window (a random crop). NULL: the whole image. */
  int (*window)(const op_t* op, rill_rng_t* rng, img_t* im, const char** why);
  /* The output size of one image. */
  void (*out_size)(const op_t* op, const img_t* im, int* oh, int* ow);
  /* Writes the image's result (oh x ow) to dst; on failure returns the code with *why. */
  int (*kernel)(const op_t* op, const img_t* im, rill_rng_t* rng, rill__img_scratch_t* s, uint8_t* dst, int oh,
                int ow, const char** why);
} op_class_t;

/* The files verified to their end (rill__img_memo_t), shared by every operator that decodes
 * regions of the same column of a dataframe (several crops of each file, as multi-crop
 * training takes; a normalize fused with its crop): each file is checked once, and its
 * entropy marks found once, for all of them. The fingerprints are of the bytes, so sharing
 * changes no result. */
typedef struct shared_memo {
  rill__img_memo_t memo;
  _Atomic int refs;
} shared_memo_t;

static shared_memo_t* memo_retain(shared_memo_t* m) {
  if (m) atomic_fetch_add_explicit(&m->refs, 1, memory_order_relaxed);
  return m;
}

static void memo_release(shared_memo_t* m) {
  if (m && atomic_fetch_sub_explicit(&m->refs, 1, memory_order_acq_rel) == 1) {
    rill__img_memo_free(&m->memo);
    rill__free(m);
  }
}

struct op {
  const op_class_t* cls;
  int binary;            /* input cells are encoded bytes (fused decode) */
  int channels;          /* channels the options ask for (0: the input's, 3 for encoded bytes) */
  int C;                 /* channels */
  int chw;               /* output cells are C x H x W (else H x W x C) */
  int64_t max_pixels;    /* fused decode: pixel limit (0: the default) */
  int64_t marks_bytes;   /* fused crop: memory for the files' entropy marks (rill_rrc_opts_t) */
  rill_on_error_t on_error;
  rill_type_t out_type;
  int fixed_out;
  shared_memo_t* verified; /* fused decode of regions: files verified to their end (see decode_cell) */
  int column;            /* the operator's column (its generator's), once added */
  int in_col, path_col;  /* the map's input columns (path_col -1: none) */
};

/* Adds the map column of operator class `cls` with its options `opts` over `column` (below). */
static int op_add(rill_df_t* df, const char* name, int column, const op_class_t* cls, const void* opts,
                  rill_error_t* err);

static void path_of(const rill_array_t* paths, int64_t i, char* buf, size_t size) {
  buf[0] = 0;
  if (!paths) return;
  rill__cell_t c;
  rill__cell_view(paths, i, &c);
  if (c.valid && c.data) snprintf(buf, size, "%.*s", (int)(c.nbytes < 300 ? c.nbytes : 300), (const char*)c.data);
}

/* Reports a failure of cell i: adds the operator and the file name to the message. */
static int cell_fail(rill_error_t* err, int64_t i, const op_t* op, const rill_array_t* paths, int code,
                     const char* msg) {
  if (!err) return code;
  char path[320], text[RILL_ERROR_MESSAGE_SIZE];
  path_of(paths, i, path, sizeof path);
  snprintf(text, sizeof text, "%s", msg);
  err->row = i;
  if (path[0]) return rill_error_set(err, code, "%s: '%s': %s", op->cls->what, path, text);
  return rill_error_set(err, code, "%s: %s", op->cls->what, text);
}

/* The uint8 image in cell i of a uint8 HWC array. */
static int cell_image(const op_t* op, const rill_array_t* a, int64_t i, img_t* im, rill_error_t* err) {
  rill__cell_t c;
  rill__cell_view(a, i, &c);
  const uint8_t* p = c.data;
  const int64_t* shape = c.shape;
  int64_t nb = c.nbytes;
  if (c.ndim != 3 || shape[2] != op->C || shape[0] < 0 || shape[1] < 0 || shape[0] > INT32_MAX ||
      shape[1] > INT32_MAX || nb != shape[0] * shape[1] * shape[2] || (!p && nb))
    return cell_fail(err, i, op, NULL, RILL_EFORMAT, "cell is not a uint8 HWC image of its column's channels");
  im->px = p;
  im->h = (int)shape[0];
  im->w = (int)shape[1];
  im->stride = shape[1] * shape[2];
  im->fx = im->fy = 0;
  im->fw = im->w;
  im->fh = im->h;
  im->x0 = im->y0 = 0;
  im->rw = im->w;
  im->rh = im->h;
  im->full_w = im->w;
  im->full_h = im->h;
  return RILL_OK;
}

/* Decodes cell i of a BINARY array: the region the class picks from the full size once the
 * header is read, DCT-scaled while it stays at least min_w x min_h. */
static int decode_cell(const op_t* op, const rill_array_t* a, const rill_array_t* paths, int64_t i, rill_rng_t* rng,
                       rill__img_scratch_t* s, img_t* im, rill_error_t* err) {
  rill_error_t local;
  rill_error_t* e = err ? err : &local;
  rill__cell_t c;
  rill__cell_view(a, i, &c);
  const void* buf = c.data;
  int64_t nb = c.nbytes;
  rill__img_info_t info;
  int rc;
  if (nb <= 0 || !buf) return cell_fail(err, i, op, paths, RILL_EFORMAT, "empty file (0 bytes)");
  if ((rc = rill__img_probe(buf, (size_t)nb, &info, e)) < 0) return cell_fail(err, i, op, paths, rc, e->message);
  /* padded: a cropped region stays in the rows libjpeg writes (the window below skips the
   * columns around it) instead of being copied out of them */
  rill__img_request_t req = {.channels = op->C, .max_pixels = op->max_pixels, .padded = 1};
  if ((int64_t)info.width * info.height > (op->max_pixels > 0 ? op->max_pixels : RILL__DEFAULT_MAX_PIXELS)) {
    char msg[160];
    snprintf(msg, sizeof msg, "%d x %d pixels exceed the limit of %lld", info.width, info.height,
             (long long)(op->max_pixels > 0 ? op->max_pixels : RILL__DEFAULT_MAX_PIXELS));
    return cell_fail(err, i, op, paths, RILL_ERANGE, msg);
  }
  op->cls->pick(op, rng, info.width, info.height, &req);
  /* A JPEG region smaller than the image leaves blocks that only the damage check reads:
   * once these bytes have been read to their end without error, later regions skip them.
   * The file's entropy marks, made on its first visit (with the column marks its share of
   * the table's memory allows) and kept here, let a region be decoded from a cut of the file
   * to the MCUs around it, or start at the mark above it, instead of entropy-decoding every
   * block above and beside it. A file the marks cannot follow (a progressive one, say) is
   * re-encoded once as a baseline copy of the same coefficients, kept with its marks when
   * both fit in the file's share and what the files before it left of theirs. */
  uint64_t key = 0;
  rill__jpeg_marks_t* marks = NULL;
  if (info.format == RILL__IMG_JPEG && req.w && req.h &&
      (req.y > 0 || req.y + req.h < info.height || req.x > 0 || req.x + req.w < info.width) && op->verified) {
    key = rill__img_fingerprint(buf, (size_t)nb);
    int64_t slot = rill__img_memo_find(&op->verified->memo, key);
    req.tail_verified = slot >= 0;
    if (slot >= 0) req.marks = rill__img_memo_marks(&op->verified->memo, slot);
    else {
      req.marks_out = &marks, req.col_marks = rill__img_memo_col_marks(&op->verified->memo);
      req.copy_max = rill__img_memo_copy_room(&op->verified->memo);
    }
  }
  rill__img_out_t plan;
  if ((rc = rill__img_plan(&info, &req, &plan, e)) < 0) return cell_fail(err, i, op, paths, rc, e->message);
  size_t need = rill__img_padded_size(&plan);
  if (!rill__img_grow(&s->img, &s->img_cap, need ? need : 1)) return cell_fail(err, i, op, paths, RILL_ENOMEM, "out of memory");
  rill__img_out_t got;
  if ((rc = rill__img_decode(buf, (size_t)nb, &req, s->img, s->img_cap, &got, e)) < 0) {
    rill__free(marks);
    return cell_fail(err, i, op, paths, rc, e->message);
  }
  if (key && !req.tail_verified) rill__img_memo_add(&op->verified->memo, key, marks);
  int64_t stride = got.stride ? got.stride : (int64_t)got.w * got.channels;
  if (got.channels != op->C || got.w <= 0 || got.h <= 0 || got.x < 0 ||
      stride < (int64_t)(got.x + got.w) * got.channels || (size_t)stride * (size_t)got.h > s->img_cap)
    return cell_fail(err, i, op, paths, RILL_EFORMAT, "decoder returned an unexpected size");
  /* the decoded pixels start at floor(rx * num / d); the wanted region is rx * num / d on */
  int64_t d = got.scale_denom > 0 ? got.scale_denom : 1, num = got.scale_num > 0 ? got.scale_num : 1;
  int rx = req.x, ry = req.y;
  int rw = req.w && req.h ? req.w : info.width, rh = req.w && req.h ? req.h : info.height;
  if (!(req.w && req.h)) rx = ry = 0;
  double sc = (double)num / (double)d;
  im->px = s->img;
  im->w = got.x + got.w;
  im->h = got.h;
  im->stride = stride;
  im->fx = (double)(rx * num % d) / (double)d;
  im->fy = (double)(ry * num % d) / (double)d;
  im->fw = rw * sc;
  im->fh = rh * sc;
  if (im->fx + im->fw > got.w) im->fw = got.w - im->fx;
  if (im->fy + im->fh > got.h) im->fh = got.h - im->fy;
  im->x0 = got.x;
  im->y0 = 0;
  im->rw = got.w;
  im->rh = got.h;
  im->full_w = rw;
  im->full_h = rh;
  return RILL_OK;
}

/* ---------------------------------------------------------------- resample: random resized crop, resize */

typedef struct resample {
  op_t op;
  int out_h, out_w;      /* output size (resize with short_side: out_h is the shorter side) */
  int short_side;
  rill_interp_t interp;
  double scale[2], ratio[2];
} resample_t;

static int bad_size(const char* what, int h, int w, rill_error_t* err) {
  return rill__fail(err, RILL_EINVAL, "%s: output size %d x %d must be positive (at most 65535)", what, h, w);
}

static int rrc_validate(op_t* op, const void* opts, rill_error_t* err) {
  const rill_rrc_opts_t* o = opts;
  const char* what = op->cls->what;
  if (!o) return rill__fail(err, RILL_EINVAL, "%s: NULL options (size is required)", what);
  if (o->size[0] <= 0 || o->size[1] <= 0 || o->size[0] > 65535 || o->size[1] > 65535)
    return bad_size(what, o->size[0], o->size[1], err);
  double s0 = o->scale[0], s1 = o->scale[1], r0 = o->ratio[0], r1 = o->ratio[1];
  if (s0 == 0 && s1 == 0) s0 = 0.08, s1 = 1.0;
  if (r0 == 0 && r1 == 0) r0 = 3.0 / 4.0, r1 = 4.0 / 3.0;
  if (!(s0 > 0 && s0 <= s1 && s1 <= 1.0))
    return rill__fail(err, RILL_EINVAL, "%s: scale range (%g, %g) must satisfy 0 < lo <= hi <= 1", what, s0, s1);
  if (!(r0 > 0 && r0 <= r1 && isfinite(r1)))
    return rill__fail(err, RILL_EINVAL, "%s: ratio range (%g, %g) must satisfy 0 < lo <= hi", what, r0, r1);
  if (o->interpolation != RILL_INTERP_BILINEAR && o->interpolation != RILL_INTERP_AREA)
    return rill__fail(err, RILL_EINVAL, "%s: unknown interpolation %d", what, (int)o->interpolation);
  if (o->max_pixels < 0) return rill__fail(err, RILL_EINVAL, "%s: negative max_pixels", what);
  resample_t* r = (resample_t*)op;
  r->out_h = o->size[0];
  r->out_w = o->size[1];
  r->scale[0] = s0, r->scale[1] = s1, r->ratio[0] = r0, r->ratio[1] = r1;
  r->interp = o->interpolation;
  op->max_pixels = o->max_pixels;
  op->marks_bytes = o->marks_bytes;
  op->channels = o->channels;
  op->on_error = o->on_error;
  return RILL_OK;
}

static int resize_validate(op_t* op, const void* opts, rill_error_t* err) {
  const rill_resize_opts_t* o = opts;
  const char* what = op->cls->what;
  if (!o) return rill__fail(err, RILL_EINVAL, "%s: NULL options (size is required)", what);
  if (o->size[0] <= 0 || o->size[1] < 0 || o->size[0] > 65535 || o->size[1] > 65535)
    return bad_size(what, o->size[0], o->size[1], err);
  if (o->interpolation != RILL_INTERP_BILINEAR && o->interpolation != RILL_INTERP_AREA)
    return rill__fail(err, RILL_EINVAL, "%s: unknown interpolation %d", what, (int)o->interpolation);
  if (o->max_pixels < 0) return rill__fail(err, RILL_EINVAL, "%s: negative max_pixels", what);
  resample_t* r = (resample_t*)op;
  r->out_h = o->size[0];
  r->out_w = o->size[1];
  r->short_side = o->size[1] == 0;
  r->interp = o->interpolation;
  op->max_pixels = o->max_pixels;
  op->channels = o->channels;
  op->on_error = o->on_error;
  return RILL_OK;
}

/* uint8 [out_h, out_w, C], or [-1, -1, C] when the size follows the input's aspect */
static int resample_output(op_t* op, const rill_field_t* in, const void* opts, rill_error_t* err) {
  const resample_t* r = (const resample_t*)op;
  op->out_type = r->short_side ? rill_type_tensor(RILL_UINT8, 3, (int64_t[]){-1, -1, op->C})
                               : rill_type_tensor(RILL_UINT8, 3, (int64_t[]){r->out_h, r->out_w, op->C});
  return RILL_OK;
}

static void short_side_size(int w, int h, int target, int* ow, int* oh) {
  if (w <= h) {
    *ow = target;
    *oh = (int)((int64_t)target * h / w);
  } else {
    *oh = target;
    *ow = (int)((int64_t)target * w / h);
  }
  if (*ow < 1) *ow = 1;
  if (*oh < 1) *oh = 1;
}

static void resample_size(const op_t* op, const img_t* im, int* oh, int* ow) {
  const resample_t* r = (const resample_t*)op;
  *oh = r->out_h;
  *ow = r->out_w;
  if (r->short_side) short_side_size(im->full_w, im->full_h, r->out_h, ow, oh);
}

static int resample_kernel(const op_t* op, const img_t* im, rill_rng_t* rng, rill__img_scratch_t* s, uint8_t* dst,
                           int oh, int ow, const char** why) {
  (void)rng;
  if (im->rw <= 0 || im->rh <= 0) {
    *why = "empty image (0 pixels)";
    return RILL_EFORMAT;
  }
  int rc = rill__img_resize(s, im->px, im->stride, op->C, im->x0, im->y0, im->rw, im->rh, im->fx, im->fy, im->fw,
                            im->fh, dst, ow, oh, ((const resample_t*)op)->interp);
  if (rc < 0) *why = "out of memory";
  return rc;
}

static void resize_pick(const op_t* op, rill_rng_t* rng, int W, int H, rill__img_request_t* req) {
  (void)rng;
  int ow, oh;
  img_t full = {.full_w = W, .full_h = H};
  resample_size(op, &full, &oh, &ow);
  req->min_w = ow;
  req->min_h = oh;
}

static const op_class_t RESIZE = {.what = "resize", .size = sizeof(resample_t), .validate = resize_validate,
                                  .output = resample_output, .pick = resize_pick, .out_size = resample_size,
                                  .kernel = resample_kernel};

int rill_image_resize(rill_df_t* df, const char* name, int column, const rill_resize_opts_t* opts,
                      rill_error_t* err) {
  return op_add(df, name, column, &RESIZE, opts, err);
}

static void rrc_pick(const op_t* op, rill_rng_t* rng, int W, int H, rill__img_request_t* req) {
  const resample_t* r = (const resample_t*)op;
  rill__rrc_params(rng, W, H, r->scale, r->ratio, &req->x, &req->y, &req->w, &req->h);
  req->min_w = r->out_w;
  req->min_h = r->out_h;
}

static int rrc_window(const op_t* op, rill_rng_t* rng, img_t* im, const char** why) {
  const resample_t* r = (const resample_t*)op;
  if (im->w <= 0 || im->h <= 0) {
    *why = "empty image (0 pixels)";
    return RILL_EFORMAT;
  }
  rill__rrc_params(rng, im->w, im->h, r->scale, r->ratio, &im->x0, &im->y0, &im->rw, &im->rh);
  im->fw = im->rw;
  im->fh = im->rh;
  return RILL_OK;
}

static const op_class_t RRC = {.what = "random_resized_crop", .size = sizeof(resample_t), .validate = rrc_validate,
                               .output = resample_output, .pick = rrc_pick, .window = rrc_window,
                               .out_size = resample_size, .kernel = resample_kernel};

int rill_image_random_resized_crop(rill_df_t* df, const char* name, int column, const rill_rrc_opts_t* opts,
                                   rill_error_t* err) {
  return op_add(df, name, column, &RRC, opts, err);
}

/* ---------------------------------------------------------------- centre crop */

typedef struct ccrop {
  op_t op;
  int out_h, out_w;
} ccrop_t;

typedef struct ccrop_args {
  int height, width;
} ccrop_args_t;

static int ccrop_validate(op_t* op, const void* opts, rill_error_t* err) {
  const ccrop_args_t* o = opts;
  if (o->height <= 0 || o->width <= 0 || o->height > 65535 || o->width > 65535)
    return bad_size(op->cls->what, o->height, o->width, err);
  ((ccrop_t*)op)->out_h = o->height;
  ((ccrop_t*)op)->out_w = o->width;
  return RILL_OK;
}

static int ccrop_output(op_t* op, const rill_field_t* in, const void* opts, rill_error_t* err) {
  const ccrop_t* c = (const ccrop_t*)op;
  op->out_type = rill_type_tensor(RILL_UINT8, 3, (int64_t[]){c->out_h, c->out_w, op->C});
  return RILL_OK;
}

static void ccrop_size(const op_t* op, const img_t* im, int* oh, int* ow) {
  *oh = ((const ccrop_t*)op)->out_h;
  *ow = ((const ccrop_t*)op)->out_w;
}

static int ccrop_kernel(const op_t* op, const img_t* im, rill_rng_t* rng, rill__img_scratch_t* s, uint8_t* dst,
                        int oh, int ow, const char** why) {
  rill__img_center_crop(im->px, im->w, im->h, im->stride, op->C, oh, ow, dst);
  return RILL_OK;
}

static const op_class_t CENTER_CROP = {.what = "center_crop", .size = sizeof(ccrop_t), .validate = ccrop_validate,
                                       .output = ccrop_output, .out_size = ccrop_size, .kernel = ccrop_kernel};

int rill_image_center_crop(rill_df_t* df, const char* name, int column, int height, int width, rill_error_t* err) {
  ccrop_args_t args = {height, width};
  return op_add(df, name, column, &CENTER_CROP, &args, err);
}

/* ---------------------------------------------------------------- same-size operators */

/* the output type of flip and jitter: the input's */
static int same_output(op_t* op, const rill_field_t* in, const void* opts, rill_error_t* err) {
  op->out_type = in->type;
  return RILL_OK;
}

static void same_size(const op_t* op, const img_t* im, int* oh, int* ow) {
  *oh = im->h;
  *ow = im->w;
}

typedef struct flip {
  op_t op;
  double p;
} flip_t;

static int flip_validate(op_t* op, const void* opts, rill_error_t* err) {
  double p = *(const double*)opts;
  if (!(p >= 0 && p <= 1)) return rill__fail(err, RILL_EINVAL, "%s: probability %g is outside [0, 1]", op->cls->what, p);
  ((flip_t*)op)->p = p;
  return RILL_OK;
}

static int flip_kernel(const op_t* op, const img_t* im, rill_rng_t* rng, rill__img_scratch_t* s, uint8_t* dst,
                       int oh, int ow, const char** why) {
  double p = ((const flip_t*)op)->p;
  int C = op->C;
  if (p > 0 && rill_rng_uniform(rng) < p) rill__img_flip(im->px, oh, ow, C, im->stride, dst);
  else if (im->stride == (int64_t)ow * C)
    memcpy(dst, im->px, (size_t)ow * oh * C); /* contiguous: one copy */
  else
    for (int y = 0; y < oh; y++) memcpy(dst + (size_t)y * ow * C, im->px + (size_t)y * im->stride, (size_t)ow * C);
  return RILL_OK;
}

static const op_class_t FLIP = {.what = "flip", .size = sizeof(flip_t), .validate = flip_validate,
                                .output = same_output, .out_size = same_size, .kernel = flip_kernel};

int rill_image_flip(rill_df_t* df, const char* name, int column, double p, rill_error_t* err) {
  return op_add(df, name, column, &FLIP, &p, err);
}

typedef struct jitter {
  op_t op;
  double jit[3];         /* brightness, contrast, saturation */
} jitter_t;

static int jitter_validate(op_t* op, const void* opts, rill_error_t* err) {
  const rill_jitter_opts_t* o = opts;
  const char* what = op->cls->what;
  if (!o) return rill__fail(err, RILL_EINVAL, "%s: NULL options", what);
  double j[3] = {o->brightness, o->contrast, o->saturation};
  static const char* names[3] = {"brightness", "contrast", "saturation"};
  for (int k = 0; k < 3; k++)
    if (!(j[k] >= 0 && isfinite(j[k])))
      return rill__fail(err, RILL_EINVAL, "%s: %s %g must be a finite value >= 0", what, names[k], j[k]);
  memcpy(((jitter_t*)op)->jit, j, sizeof j);
  return RILL_OK;
}

static int jitter_kernel(const op_t* op, const img_t* im, rill_rng_t* rng, rill__img_scratch_t* s, uint8_t* dst,
                         int oh, int ow, const char** why) {
  if (!rill__img_grow(&s->tmp, &s->tmp_cap, ((size_t)ow * oh * op->C + 1) * sizeof(float))) {
    *why = "out of memory";
    return RILL_ENOMEM;
  }
  rill__img_jitter(((const jitter_t*)op)->jit, rng, im->px, im->w, im->h, im->stride, op->C, s->tmp, dst);
  return RILL_OK;
}

static const op_class_t JITTER = {.what = "jitter", .size = sizeof(jitter_t), .validate = jitter_validate,
                                  .output = same_output, .out_size = same_size, .kernel = jitter_kernel};

int rill_image_jitter(rill_df_t* df, const char* name, int column, const rill_jitter_opts_t* opts,
                      rill_error_t* err) {
  return op_add(df, name, column, &JITTER, opts, err);
}

typedef struct normalize {
  op_t op;
  rill__img_norm_t nk;
  double p;              /* flip probability */
  int f16;
  resample_t* pre;       /* a resize or random resized crop fused into this operator (see
                            fuse_resample), or NULL */
} normalize_t;

static int normalize_validate(op_t* op, const void* opts, rill_error_t* err) {
  rill_normalize_opts_t o = opts ? *(const rill_normalize_opts_t*)opts : (rill_normalize_opts_t){0};
  const char* what = op->cls->what;
  if (!(o.flip >= 0 && o.flip <= 1))
    return rill__fail(err, RILL_EINVAL, "%s: flip probability %g is outside [0, 1]", what, o.flip);
  rill_dtype_t dt = o.dtype ? o.dtype : RILL_FLOAT32;
  if (dt != RILL_FLOAT32 && dt != RILL_FLOAT16)
    return rill__fail(err, RILL_EINVAL, "%s: dtype %s is not supported (float32 or float16)", what, rill_dtype_name(dt));
  if (o.layout != RILL_LAYOUT_HWC && o.layout != RILL_LAYOUT_CHW)
    return rill__fail(err, RILL_EINVAL, "%s: unknown layout %d", what, (int)o.layout);
  normalize_t* n = (normalize_t*)op;
  n->p = o.flip;
  n->f16 = dt == RILL_FLOAT16;
  op->chw = o.layout == RILL_LAYOUT_CHW;
  return RILL_OK;
}

static int normalize_output(op_t* op, const rill_field_t* in, const void* opts, rill_error_t* err) {
  rill_normalize_opts_t o = opts ? *(const rill_normalize_opts_t*)opts : (rill_normalize_opts_t){0};
  normalize_t* n = (normalize_t*)op;
  for (int c = 0; c < op->C; c++) {
    double sd = o.std[c] == 0 ? 1.0 : o.std[c];
    if (!isfinite(sd) || !isfinite(o.mean[c]))
      return rill__fail(err, RILL_EINVAL, "%s: mean/std of channel %d must be finite", op->cls->what, c);
    n->nk.scale[c] = (float)(1.0 / (255.0 * sd));
    n->nk.bias[c] = (float)(-o.mean[c] / sd);
  }
  rill_dtype_t dt = n->f16 ? RILL_FLOAT16 : RILL_FLOAT32;
  int64_t h = in->type.shape[0], w = in->type.shape[1], C = op->C;
  op->out_type = op->chw ? rill_type_tensor(dt, 3, (int64_t[]){C, h, w}) : rill_type_tensor(dt, 3, (int64_t[]){h, w, C});
  return RILL_OK;
}

static int normalize_kernel(const op_t* op, const img_t* im, rill_rng_t* rng, rill__img_scratch_t* s, uint8_t* dst,
                            int oh, int ow, const char** why) {
  const normalize_t* n = (const normalize_t*)op;
  int flip = n->p > 0 && rill_rng_uniform(rng) < n->p;
  rill__img_normalize(im->px, oh, ow, op->C, flip, &n->nk, n->f16, op->chw, dst);
  return RILL_OK;
}

static const op_class_t NORMALIZE;

/* The resample operator fused into op, or NULL. */
static const resample_t* fused_pre(const op_t* op) {
  return op->cls == &NORMALIZE ? ((const normalize_t*)op)->pre : NULL;
}

static const op_class_t NORMALIZE = {.what = "normalize", .size = sizeof(normalize_t), .validate = normalize_validate,
                                     .output = normalize_output, .out_size = same_size, .kernel = normalize_kernel};

int rill_image_normalize(rill_df_t* df, const char* name, int column, const rill_normalize_opts_t* opts,
                         rill_error_t* err) {
  return op_add(df, name, column, &NORMALIZE, opts, err);
}

/* ---------------------------------------------------------------- the map */

static void cell_shape(const op_t* op, int oh, int ow, int64_t* shape) {
  shape[0] = op->chw ? op->C : oh;
  shape[1] = op->chw ? oh : ow;
  shape[2] = op->chw ? ow : op->C;
}

/* The image of cell i that op works on: decoded (fused decode) or the cell's, narrowed by the
 * class's window. */
static int fetch_image(const op_t* op, const rill_array_t* a, const rill_array_t* paths, int64_t i, rill_rng_t* rng,
                       rill__img_scratch_t* s, img_t* im, rill_error_t* err) {
  const char* why = "";
  int rc = op->binary ? decode_cell(op, a, paths, i, rng, s, im, err) : cell_image(op, a, i, im, err);
  if (rc < 0) return rc;
  if (!op->binary && op->cls->window && (rc = op->cls->window(op, rng, im, &why)) < 0)
    return cell_fail(err, i, op, paths, rc, why);
  return RILL_OK;
}

/* Cell i of a normalize with a fused resample `pre` (fixed output, into dst): the resample's
 * image and window from its own generator, as the resample's column would have drawn them,
 * then the resized rows normalized one by one; errors are reported as the resample's. */
static int fused_cell(const op_t* op, const resample_t* pre, const rill_array_t* a, const rill_array_t* paths,
                      int64_t i, rill_exec_t* exec, rill__img_scratch_t* s, uint8_t* dst, rill_error_t* err) {
  const normalize_t* n = (const normalize_t*)op;
  rill_rng_t rng = rill__exec_rng_of(exec, i, pre->op.column);
  img_t im = {0};
  int rc = fetch_image(&pre->op, a, paths, i, &rng, s, &im, err);
  if (rc < 0) return rc;
  if (im.rw <= 0 || im.rh <= 0) return cell_fail(err, i, &pre->op, paths, RILL_EFORMAT, "empty image (0 pixels)");
  rill_rng_t own = rill_exec_rng(exec, i);
  int flip = n->p > 0 && rill_rng_uniform(&own) < n->p;
  rc = rill__img_resize_normalize(s, im.px, im.stride, op->C, im.x0, im.y0, im.rw, im.rh, im.fx, im.fy, im.fw, im.fh,
                                  pre->out_w, pre->out_h, pre->interp, flip, &n->nk, n->f16, op->chw, dst);
  if (rc < 0) return cell_fail(err, i, &pre->op, paths, rc, "out of memory");
  return RILL_OK;
}

/* Computes cell i into `dst` (fixed output), or into scratch (variable output; the result's
 * shape in `shape`, bytes returned through *res). */
static int op_cell(const op_t* op, const rill_array_t* a, const rill_array_t* paths, int64_t i, rill_exec_t* exec,
                   rill__img_scratch_t* s, uint8_t* dst, const uint8_t** res, int64_t* shape, rill_error_t* err) {
  const resample_t* pre = fused_pre(op);
  if (pre) return fused_cell(op, pre, a, paths, i, exec, s, dst, err);
  const op_class_t* cls = op->cls;
  rill_rng_t rng = rill_exec_rng(exec, i);
  img_t im = {0};
  const char* why = "";
  int rc = fetch_image(op, a, paths, i, &rng, s, &im, err);
  if (rc < 0) return rc;
  int oh, ow;
  cls->out_size(op, &im, &oh, &ow);
  if (!dst) {
    size_t bytes = (size_t)ow * oh * op->C * rill_dtype_size(op->out_type.dtype);
    if (!rill__img_grow(&s->out, &s->out_cap, bytes ? bytes : 1))
      return cell_fail(err, i, op, paths, RILL_ENOMEM, "out of memory");
    dst = s->out;
  }
  if ((rc = cls->kernel(op, &im, &rng, s, dst, oh, ow, &why)) < 0) return cell_fail(err, i, op, paths, rc, why);
  if (res) {
    *res = dst;
    cell_shape(op, oh, ow, shape);
  }
  return RILL_OK;
}

static int op_map(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* exec, void* ctx,
                  rill_error_t* err) {
  const op_t* op = ctx;
  const char* what = op->cls->what;
  const rill_array_t* a = in[0];
  const rill_array_t* paths = nin > 1 ? in[1] : NULL;
  int64_t n = a->length;
  int rc = rill_exec_alloc(exec, out, op->out_type, n);
  if (rc < 0) return rill_error_set(err, rc, "%s: cannot allocate the output of %lld cells", what, (long long)n);
  rill__img_scratch_t* s = rill__scratch(&scratch_kind);
  if (!s) return rill_error_set(err, RILL_ENOMEM, "%s: out of memory", what);
  int64_t cell = op->fixed_out ? rill_type_cell_bytes(&op->out_type) : 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t shape[3] = {0, 0, 0};
    if (!rill_array_is_valid(a, i)) {
      if (op->fixed_out) {
        memset((uint8_t*)out->data + i * cell, 0, (size_t)cell);
      } else {
        cell_shape(op, 0, 0, shape);
        if ((rc = rill_array_set_var(out, i, NULL, 0, shape)) < 0) goto oom;
      }
      if ((rc = rill_array_set_null(out, i)) < 0) goto oom;
      continue;
    }
    if (op->fixed_out) {
      rc = op_cell(op, a, paths, i, exec, s, (uint8_t*)out->data + i * cell, NULL, NULL, err);
      if (rc < 0) return rc;
    } else {
      const uint8_t* res = NULL;
      rc = op_cell(op, a, paths, i, exec, s, NULL, &res, shape, err);
      if (rc < 0) return rc;
      int64_t nb = shape[0] * shape[1] * shape[2] * (int64_t)rill_dtype_size(op->out_type.dtype);
      if ((rc = rill_array_set_var(out, i, res, nb, shape)) < 0) goto oom;
    }
  }
  return RILL_OK;
oom:
  return rill_error_set(err, rc, "%s: cannot grow the output array", what);
}

/* ---------------------------------------------------------------- constructors */

static int check_df(rill_df_t* df, const char* name, int column, const char* what, const rill_field_t** f,
                    rill_error_t* err) {
  if (!df || !name || !*name) return rill__fail(err, RILL_EINVAL, "%s: NULL dataframe or empty name", what);
  *f = rill_df_field(df, column);
  if (!*f) return rill__bad_column(err, what, df, column);
  return RILL_OK;
}

/* Checks that the input is uint8 HWC with known channels (or BINARY when allowed) and fills
 * op->binary and op->C. */
static int check_image_input(op_t* op, const rill_field_t* f, int allow_binary, int channels, rill_error_t* err) {
  char tb[96];
  if (f->type.dtype == RILL_BINARY && f->type.ndim == 0) {
    if (!allow_binary)
      return rill__fail(err, RILL_EINVAL, "%s: column '%s' holds encoded bytes; decode it first", op->cls->what, f->name);
    if (channels != 0 && channels != 1 && channels != 3 && channels != 4)
      return rill__fail(err, RILL_EINVAL, "%s: channels must be 1, 3 or 4 (got %d)", op->cls->what, channels);
    op->binary = 1;
    op->C = channels ? channels : 3;
    return RILL_OK;
  }
  if (f->type.dtype != RILL_UINT8 || f->type.ndim != 3 || f->type.shape[2] < 1 || f->type.shape[2] > 4)
    return rill__fail(err, RILL_EINVAL, "%s: column '%s' has type %s; expected uint8[H,W,C] with C in 1..4%s",
                      op->cls->what, f->name, rill_type_format(&f->type, tb, sizeof tb),
                      allow_binary ? " or binary (encoded image)" : "");
  op->C = (int)f->type.shape[2];
  if (allow_binary && channels != 0 && channels != op->C)
    return rill__fail(err, RILL_EINVAL, "%s: channels = %d but column '%s' has %d", op->cls->what, channels, f->name, op->C);
  return RILL_OK;
}

static void op_free(void* p) {
  op_t* op = p;
  resample_t* pre = (resample_t*)fused_pre(op);
  if (pre) op_free(pre);
  memo_release(op->verified);
  rill__free(op);
}

static _Atomic int g_fuse = 1;

int rill__image_set_fuse(int on) { return atomic_exchange(&g_fuse, on ? 1 : 0); }

/* Normalize over a fixed-size resize or random resized crop of this file: the normalize
 * computes the resample itself from the resample's input, handing each resized row to the
 * normalize kernel while it is in the cache, and writes the floats straight into its output
 * (a batch slot when batched). The results are those of the two stages (the resample's
 * generator is its column's); the resample's column is then computed only when something
 * else asks for it. Leaves n->pre NULL when `column` is no such operator. */
static int fuse_resample(normalize_t* n, rill_df_t* df, int column, rill_error_t* err) {
  if (!atomic_load(&g_fuse) || rill__df_column_fn(df, column) != (rill__fn_t)op_map) return RILL_OK;
  const op_t* src = rill__df_column_ctx(df, column);
  if (!src || (src->cls != &RRC && src->cls != &RESIZE) || !src->fixed_out || src->C != n->op.C) return RILL_OK;
  resample_t* pre = rill__alloc(sizeof *pre);
  if (!pre) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", n->op.cls->what);
  memcpy(pre, src, sizeof *pre);
  memo_retain(pre->op.verified);
  n->pre = pre;
  return RILL_OK;
}

/* The operator that decodes column `column` of df (a normalize fused with a crop: the
 * crop's), or NULL when the column is no image operator's. */
static const op_t* decoding_op(const rill_df_t* df, int column) {
  if (rill__df_column_fn(df, column) != (rill__fn_t)op_map) return NULL;
  const op_t* o = rill__df_column_ctx(df, column);
  const resample_t* pre = o ? fused_pre(o) : NULL;
  return pre ? &pre->op : o;
}

/* The verified-file table of the operators decoding regions of `column` of df: an existing
 * operator's (retained), else a new one; its marks may take the largest of the memory its
 * operators ask for (marks_bytes as in rill_rrc_opts_t). Columns are added before anything
 * iterates the dataframe, so no decode reads marks_max while it changes. */
static int memo_for(rill_df_t* df, int column, int64_t marks_bytes, shared_memo_t** out) {
  int64_t want = marks_bytes > 0 ? marks_bytes : marks_bytes < 0 ? 0 : RILL__IMG_MARKS_MAX_BYTES;
  for (int c = 0, n = rill_df_ncolumns(df); c < n; c++) {
    const op_t* o = decoding_op(df, c);
    if (o && o->verified && o->in_col == column) {
      *out = memo_retain(o->verified);
      if (want > (*out)->memo.marks_max) (*out)->memo.marks_max = want;
      return RILL_OK;
    }
  }
  shared_memo_t* m = rill__alloc(sizeof *m);
  if (!m || rill__img_memo_init(&m->memo, rill_df_rows(df)) < 0) {
    rill__free(m);
    return RILL_ENOMEM;
  }
  m->memo.marks_max = want;
  atomic_init(&m->refs, 1);
  *out = m;
  return RILL_OK;
}

const void* rill__img_op_table(const rill_df_t* df, int column) {
  const op_t* o = decoding_op(df, column);
  return o ? o->verified : NULL;
}

/* Adds the map column of operator class `cls` with its options `opts` over `column`. */
static int op_add(rill_df_t* df, const char* name, int column, const op_class_t* cls, const void* opts,
                  rill_error_t* err) {
  const rill_field_t* f;
  int rc = check_df(df, name, column, cls->what, &f, err);
  if (rc < 0) return rc;
  op_t* op = rill__calloc(1, cls->size);
  if (!op) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", cls->what);
  op->cls = cls;
  op->on_error = RILL_ON_ERROR_RAISE;
  if ((rc = cls->validate(op, opts, err)) < 0 || (rc = check_image_input(op, f, cls->pick != NULL, op->channels, err)) < 0 ||
      (rc = cls->output(op, f, opts, err)) < 0) {
    rill__free(op);
    return rc;
  }
  int inputs[2] = {column, -1}, nin = 1;
  if (op->binary) { /* the file name, for messages */
    int pc = rill_df_column(df, "path");
    const rill_field_t* pf = pc >= 0 ? rill_df_field(df, pc) : NULL;
    if (pf && pf->type.dtype == RILL_STRING && pf->type.ndim == 0 && pc != column) {
      inputs[1] = pc;
      nin = 2;
    }
  }
  op->fixed_out = rill_type_is_fixed(&op->out_type);
  /* files verified to their end, for operators that decode a region of them */
  if (op->binary && cls->pick == rrc_pick && (rc = memo_for(df, column, op->marks_bytes, &op->verified)) < 0) {
    rill__free(op);
    return rill__fail(err, rc, "%s: out of memory", cls->what);
  }
  op->in_col = column;
  op->path_col = nin > 1 ? inputs[1] : -1;
  rill_stage_opts_t so = {.where = RILL_STAGE_CPU, .on_error = op->on_error, .nullable = f->nullable};
  if (cls == &NORMALIZE && (rc = fuse_resample((normalize_t*)op, df, column, err)) < 0) {
    op_free(op);
    return rc;
  }
  const resample_t* pre = fused_pre(op);
  if (pre) { /* the resample's inputs and error handling */
    inputs[0] = pre->op.in_col;
    inputs[1] = pre->op.path_col;
    nin = pre->op.path_col >= 0 ? 2 : 1;
    so.on_error = pre->op.on_error;
  }
  rc = rill_df_map(df, name, op->out_type, inputs, nin, op_map, op, op_free, &so, err);
  if (rc >= 0) op->column = rc;
  return rc;
}
