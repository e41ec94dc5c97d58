/* Image decoding: JPEG, PNG and WebP images encoded here from known patterns, the decoder's
 * conversions, DCT scaling, crop-aware decoding, bad data, and the rill_image_decode map
 * under each on_error policy. Real-image variants are used when the data script has run. */
#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <sys/stat.h>

#include "image_common.h"
#include "image_internal.h"
#include "internal.h" /* rill__free */

#if RILL_HAVE_JPEG && RILL_HAVE_PNG
#include <zlib.h>

/* ---------------------------------------------------------------- test patterns */

static uint8_t pattern(int x, int y, int c) {
  double v = 128 + 90 * sin(x / 9.0 + c * 1.7) * cos(y / 13.0 - c * 0.6) + 20 * sin((x + y) / 29.0);
  return (uint8_t)lround(v < 0 ? 0 : v > 255 ? 255 : v);
}

static uint8_t* make_pixels(int w, int h, int ch) {
  uint8_t* p = malloc((size_t)w * h * ch);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < ch; c++) p[((size_t)y * w + x) * ch + c] = pattern(x, y, c);
  return p;
}

/* ---------------------------------------------------------------- decoding helpers */

static uint8_t* decode(const buf_t* b, rill__img_request_t req, rill__img_out_t* out, rill_error_t* err,
                       int* rc) {
  rill__img_info_t info;
  rill__img_out_t plan;
  *rc = rill__img_probe(b->p, b->n, &info, err);
  if (*rc < 0) return NULL;
  *rc = rill__img_plan(&info, &req, &plan, err);
  if (*rc < 0) return NULL;
  size_t size = (size_t)plan.w * plan.h * plan.channels;
  uint8_t* dst = malloc(size ? size : 1);
  *rc = rill__img_decode(b->p, b->n, &req, dst, size, out, err);
  if (*rc < 0) {
    free(dst);
    return NULL;
  }
  cr_assert_eq(out->w, plan.w);
  cr_assert_eq(out->h, plan.h);
  cr_assert_eq(out->scale_denom, plan.scale_denom);
  cr_assert_eq(out->scale_num, plan.scale_num);
  return dst;
}

static uint8_t* decode_ok(const buf_t* b, rill__img_request_t req, rill__img_out_t* out) {
  rill_error_t err = {0};
  int rc;
  uint8_t* d = decode(b, req, out, &err, &rc);
  cr_assert_eq(rc, RILL_OK, "decode failed (%d): %s", rc, err.message);
  return d;
}

/* mean and max absolute difference */
static void diff(const uint8_t* a, const uint8_t* b, size_t n, double* mean, int* max) {
  double s = 0;
  int m = 0;
  for (size_t i = 0; i < n; i++) {
    int d = abs((int)a[i] - (int)b[i]);
    s += d;
    if (d > m) m = d;
  }
  *mean = n ? s / n : 0;
  *max = m;
}

#define RGB(c) ((rill__img_request_t){.channels = (c)})

/* ---------------------------------------------------------------- JPEG */

Test(jpeg, rgb_matches_pattern) {
  uint8_t* px = make_pixels(97, 61, 3);
  buf_t b = enc_jpeg(px, 97, 61, (jpeg_spec_t){.in = JCS_RGB});
  rill__img_info_t info;
  rill_error_t err = {0};
  RT_OK(rill__img_probe(b.p, b.n, &info, &err), err);
  cr_assert_eq(info.format, RILL__IMG_JPEG);
  cr_assert_eq(info.width, 97);
  cr_assert_eq(info.height, 61);
  cr_assert_eq(info.channels, 3);
  rill__img_out_t o;
  uint8_t* d = decode_ok(&b, RGB(3), &o);
  cr_assert_eq(o.w, 97);
  cr_assert_eq(o.h, 61);
  cr_assert_eq(o.channels, 3);
  cr_assert_eq(o.scale_denom, 1);
  double mean;
  int max;
  diff(d, px, 97 * 61 * 3, &mean, &max);
  cr_assert(mean < 1.5 && max < 16, "mean %.2f max %d", mean, max);
  free(d);
  free(px);
  free(b.p);
}

Test(jpeg, rgba_and_gray_outputs) {
  uint8_t* px = make_pixels(64, 48, 3);
  buf_t b = enc_jpeg(px, 64, 48, (jpeg_spec_t){.in = JCS_RGB, .hs = 2, .vs = 2});
  rill__img_out_t o;
  uint8_t* rgb = decode_ok(&b, RGB(3), &o);
  uint8_t* rgba = decode_ok(&b, RGB(4), &o);
  cr_assert_eq(o.channels, 4);
  uint8_t* gray = decode_ok(&b, RGB(1), &o);
  cr_assert_eq(o.channels, 1);
  for (int i = 0; i < 64 * 48; i++) {
    cr_assert_eq(rgba[i * 4 + 3], 255);
    cr_assert(memcmp(rgba + i * 4, rgb + i * 3, 3) == 0, "pixel %d differs between RGB and RGBA", i);
    int l = rill__img_luma(rgb[i * 3], rgb[i * 3 + 1], rgb[i * 3 + 2]);
    cr_assert(abs(l - gray[i]) <= 3, "pixel %d: gray %d, luma of RGB %d", i, gray[i], l);
  }
  free(rgb), free(rgba), free(gray), free(px), free(b.p);
}

Test(jpeg, grayscale_file_to_rgb) {
  uint8_t* px = make_pixels(50, 40, 1);
  buf_t b = enc_jpeg(px, 50, 40, (jpeg_spec_t){.in = JCS_GRAYSCALE});
  rill__img_info_t info;
  rill_error_t err = {0};
  RT_OK(rill__img_probe(b.p, b.n, &info, &err), err);
  cr_assert_eq(info.channels, 1);
  rill__img_out_t o;
  uint8_t* rgb = decode_ok(&b, RGB(3), &o);
  uint8_t* g = decode_ok(&b, RGB(1), &o);
  double mean;
  int max;
  diff(g, px, 50 * 40, &mean, &max);
  cr_assert(mean < 1.5 && max < 12, "mean %.2f max %d", mean, max);
  for (int i = 0; i < 50 * 40; i++) {
    cr_assert_eq(rgb[i * 3], g[i]);
    cr_assert_eq(rgb[i * 3 + 1], g[i]);
    cr_assert_eq(rgb[i * 3 + 2], g[i]);
  }
  free(rgb), free(g), free(px), free(b.p);
}

/* Adobe CMYK stores inverted ink: C' = R, M' = G, Y' = B, K' = 255 means RGB (R, G, B). */
static void cmyk_case(J_COLOR_SPACE store, int k) {
  int w = 40, h = 32;
  uint8_t* rgb = make_pixels(w, h, 3);
  uint8_t* cmyk = malloc((size_t)w * h * 4);
  uint8_t* want = malloc((size_t)w * h * 3);
  for (int i = 0; i < w * h; i++) {
    for (int c = 0; c < 3; c++) {
      cmyk[i * 4 + c] = rgb[i * 3 + c];
      want[i * 3 + c] = (uint8_t)((rgb[i * 3 + c] * k + 127) / 255);
    }
    cmyk[i * 4 + 3] = (uint8_t)k;
  }
  buf_t b = enc_jpeg(cmyk, w, h, (jpeg_spec_t){.in = JCS_CMYK, .store = store});
  rill__img_info_t info;
  rill_error_t err = {0};
  RT_OK(rill__img_probe(b.p, b.n, &info, &err), err);
  cr_assert_eq(info.channels, 4);
  rill__img_out_t o;
  uint8_t* d = decode_ok(&b, RGB(3), &o);
  double mean;
  int max;
  diff(d, want, (size_t)w * h * 3, &mean, &max);
  cr_assert(mean < 2.5 && max < 24, "store %d k %d: mean %.2f max %d", store, k, mean, max);
  uint8_t* g = decode_ok(&b, RGB(1), &o);
  for (int i = 0; i < w * h; i++)
    cr_assert_eq(g[i], rill__img_luma(d[i * 3], d[i * 3 + 1], d[i * 3 + 2]));
  free(g), free(d), free(b.p), free(want), free(cmyk), free(rgb);
}

Test(jpeg, cmyk_adobe_inverted) { cmyk_case(JCS_CMYK, 255); cmyk_case(JCS_CMYK, 160); }
Test(jpeg, ycck_adobe_inverted) { cmyk_case(JCS_YCCK, 255); cmyk_case(JCS_YCCK, 100); }

Test(jpeg, progressive_equals_baseline) {
  uint8_t* px = make_pixels(120, 90, 3);
  buf_t a = enc_jpeg(px, 120, 90, (jpeg_spec_t){.in = JCS_RGB, .hs = 2, .vs = 2, .quality = 85});
  buf_t p = enc_jpeg(px, 120, 90, (jpeg_spec_t){.in = JCS_RGB, .hs = 2, .vs = 2, .quality = 85, .progressive = 1});
  cr_assert(a.n != p.n || memcmp(a.p, p.p, a.n) != 0);
  rill__img_out_t o;
  uint8_t* da = decode_ok(&a, RGB(3), &o);
  uint8_t* dp = decode_ok(&p, RGB(3), &o);
  cr_assert(memcmp(da, dp, 120 * 90 * 3) == 0);
  free(da), free(dp), free(a.p), free(p.p), free(px);
}

Test(jpeg, dct_scaling_sizes) {
  uint8_t* px = make_pixels(201, 121, 3);
  buf_t b = enc_jpeg(px, 201, 121, (jpeg_spec_t){.in = JCS_RGB, .hs = 2, .vs = 2});
  rill__img_info_t info;
  rill_error_t err = {0};
  RT_OK(rill__img_probe(b.p, b.n, &info, &err), err);
  struct { int mw, mh, denom, w, h; } cases[] = {
      {0, 0, 1, 201, 121},   {26, 16, 8, 26, 16},  {27, 16, 4, 51, 31}, {50, 0, 4, 51, 31},
      {0, 31, 4, 51, 31},    {52, 10, 2, 101, 61}, {150, 10, 1, 201, 121}, {300, 300, 1, 201, 121}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    rill__img_request_t req = {.channels = 3, .min_w = cases[i].mw, .min_h = cases[i].mh};
    rill__img_out_t plan, o;
    RT_OK(rill__img_plan(&info, &req, &plan, &err), err);
    cr_assert_eq(plan.scale_denom, cases[i].denom, "case %zu: denom %d", i, plan.scale_denom);
    cr_assert_eq(plan.w, cases[i].w, "case %zu: w %d", i, plan.w);
    cr_assert_eq(plan.h, cases[i].h, "case %zu: h %d", i, plan.h);
    uint8_t* d = decode_ok(&b, req, &o);
    /* a scaled pixel is close to the mean of the block it covers */
    int dn = plan.scale_denom, cx = plan.w / 2, cy = plan.h / 2;
    for (int c = 0; c < 3; c++) {
      double s = 0;
      int cnt = 0;
      for (int y = cy * dn; y < cy * dn + dn && y < 121; y++)
        for (int x = cx * dn; x < cx * dn + dn && x < 201; x++, cnt++) s += px[((size_t)y * 201 + x) * 3 + c];
      cr_assert(fabs(s / cnt - d[((size_t)cy * plan.w + cx) * 3 + c]) < 12, "case %zu channel %d", i, c);
    }
    free(d);
  }
  /* PNG is never DCT-scaled */
  buf_t pb = enc_png(px, 201, 121, PNG_COLOR_TYPE_RGB, 8, 0, NULL, 0, NULL, 0);
  RT_OK(rill__img_probe(pb.p, pb.n, &info, &err), err);
  rill__img_out_t plan;
  RT_OK(rill__img_plan(&info, &(rill__img_request_t){.channels = 3, .min_w = 10, .min_h = 10}, &plan, &err), err);
  cr_assert_eq(plan.scale_denom, 1);
  cr_assert_eq(plan.w, 201);
  free(pb.p), free(b.p), free(px);
}

static void crop_case(int hs, int vs, int progressive, int x, int y, int w, int h, int min_w, int* maxdiff) {
  int W = 173, H = 131;
  uint8_t* px = make_pixels(W, H, 3);
  buf_t b = enc_jpeg(px, W, H, (jpeg_spec_t){.in = JCS_RGB, .hs = hs, .vs = vs, .progressive = progressive});
  rill__img_out_t full, part;
  /* the full image at the scale the region gets */
  rill__img_request_t rq = {.channels = 3, .x = x, .y = y, .w = w, .h = h, .min_w = min_w, .min_h = 1};
  uint8_t* p = decode_ok(&b, rq, &part);
  int d = part.scale_denom;
  rill__img_request_t fr = {.channels = 3};
  rill__img_info_t info;
  rill_error_t err = {0};
  RT_OK(rill__img_probe(b.p, b.n, &info, &err), err);
  uint8_t* f;
  if (d == 1) {
    f = decode_ok(&b, fr, &full);
  } else {
    /* min size equal to the scaled image selects the same denominator for the whole image */
    fr.min_w = (W + d - 1) / d;
    fr.min_h = 1;
    f = decode_ok(&b, fr, &full);
    cr_assert_eq(full.scale_denom, d);
  }
  cr_assert_eq(part.w, (x + w + d - 1) / d - x / d);
  cr_assert_eq(part.h, (y + h + d - 1) / d - y / d);
  int m = 0;
  for (int r = 0; r < part.h; r++)
    for (int c = 0; c < part.w * 3; c++) {
      int a = p[(size_t)r * part.w * 3 + c], e = f[((size_t)(r + y / d) * full.w + x / d) * 3 + c];
      if (abs(a - e) > m) m = abs(a - e);
    }
  *maxdiff = m;
  free(p), free(f), free(b.p), free(px);
}

Test(jpeg, crop_equals_full_decode_region) {
  int m;
  crop_case(1, 1, 0, 37, 21, 50, 40, 0, &m);
  cr_assert_eq(m, 0, "4:4:4 crop differs by %d", m);
  crop_case(2, 2, 0, 37, 21, 50, 40, 0, &m);
  cr_assert_eq(m, 0, "4:2:0 crop differs by %d", m);
  crop_case(2, 1, 1, 64, 0, 90, 131, 0, &m);
  cr_assert_eq(m, 0, "4:2:2 progressive crop differs by %d", m);
  crop_case(2, 2, 0, 0, 50, 173, 30, 0, &m); /* full rows: skip_scanlines only */
  cr_assert_eq(m, 0, "row crop differs by %d", m);
  crop_case(2, 2, 0, 100, 70, 73, 61, 0, &m); /* bottom-right corner */
  cr_assert_eq(m, 0, "corner crop differs by %d", m);
  crop_case(2, 2, 0, 40, 30, 120, 80, 30, &m); /* scaled by 1/4 */
  cr_assert_eq(m, 0, "scaled crop differs by %d", m);
}

/* A padded request decodes the region into the rows libjpeg writes: the region starts at
 * column o.x of rows o.stride bytes apart, with the pixels of the packed decode. */
static void padded_case(const buf_t* b, rill__img_request_t rq, int* shifted) {
  rill__img_out_t packed, o, plan;
  rill__img_info_t info;
  rill_error_t err = {0};
  uint8_t* want = decode_ok(b, rq, &packed);
  RT_OK(rill__img_probe(b->p, b->n, &info, &err), err);
  rq.padded = 1;
  RT_OK(rill__img_plan(&info, &rq, &plan, &err), err);
  size_t size = rill__img_padded_size(&plan);
  cr_assert_geq(size, (size_t)plan.w * plan.h * plan.channels);
  uint8_t* dst = malloc(size);
  RT_OK(rill__img_decode(b->p, b->n, &rq, dst, size, &o, &err), err);
  int C = rq.channels;
  cr_assert_eq(o.w, packed.w);
  cr_assert_eq(o.h, packed.h);
  cr_assert_eq(o.scale_denom, packed.scale_denom);
  cr_assert_geq(o.x, 0);
  cr_assert_leq(o.x, RILL__IMG_PAD_COLS);
  cr_assert_geq(o.stride, (int64_t)(o.x + o.w) * C);
  cr_assert_leq(o.stride, (int64_t)(o.w + RILL__IMG_PAD_COLS) * C);
  cr_assert_leq((size_t)o.stride * (size_t)o.h, size);
  for (int r = 0; r < o.h; r++)
    cr_assert(memcmp(dst + (size_t)r * (size_t)o.stride + (size_t)o.x * C, want + (size_t)r * o.w * C,
                     (size_t)o.w * C) == 0,
              "region (%d, %d) %dx%d: row %d differs from the packed decode", rq.x, rq.y, rq.w, rq.h, r);
  if (o.x > 0 || o.stride != (int64_t)o.w * C) ++*shifted;
  /* a destination with no room for the padding gets packed rows */
  size_t tight = (size_t)plan.w * plan.h * plan.channels;
  RT_OK(rill__img_decode(b->p, b->n, &rq, dst, tight, &o, &err), err);
  cr_assert_eq(o.x, 0);
  cr_assert_eq(o.stride, (int64_t)o.w * C);
  cr_assert(memcmp(dst, want, tight) == 0, "packed fallback differs");
  free(dst), free(want);
}

Test(jpeg, padded_crop_equals_packed_crop) {
  int W = 173, H = 131, shifted = 0;
  uint8_t* px = make_pixels(W, H, 3);
  int sampling[4][3] = {{1, 1, 0}, {2, 2, 0}, {2, 1, 1}, {2, 2, 1}};
  int regions[6][4] = {{37, 21, 50, 40},   {0, 0, 60, 60},   {16, 8, 48, 30},
                        {100, 70, 73, 61}, {5, 0, 168, 131}, {0, 50, 173, 30}};
  for (int s = 0; s < 4; s++) {
    buf_t b = enc_jpeg(px, W, H, (jpeg_spec_t){.in = JCS_RGB, .hs = sampling[s][0], .vs = sampling[s][1],
                                               .progressive = sampling[s][2]});
    for (int r = 0; r < 6; r++)
      for (int ch = 1; ch <= 4; ch++) {
        if (ch == 2) continue;
        rill__img_request_t rq = {.channels = ch, .x = regions[r][0], .y = regions[r][1], .w = regions[r][2],
                                  .h = regions[r][3]};
        padded_case(&b, rq, &shifted);
        rq.min_w = rq.w / 4; /* DCT-scaled */
        rq.min_h = 1;
        padded_case(&b, rq, &shifted);
        rq.tail_verified = 1; /* the rows below the region are not read */
        padded_case(&b, rq, &shifted);
      }
    padded_case(&b, RGB(3), &shifted); /* whole image: packed */
    free(b.p);
  }
  cr_assert_gt(shifted, 0, "no region was left in padded rows");
  /* CMYK is converted row by row: always packed */
  uint8_t* cmyk = malloc((size_t)W * H * 4);
  for (int i = 0; i < W * H; i++) {
    memcpy(cmyk + i * 4, px + i * 3, 3);
    cmyk[i * 4 + 3] = 200;
  }
  buf_t b = enc_jpeg(cmyk, W, H, (jpeg_spec_t){.in = JCS_CMYK, .store = JCS_YCCK});
  int before = shifted;
  padded_case(&b, (rill__img_request_t){.channels = 3, .x = 37, .y = 21, .w = 50, .h = 40}, &shifted);
  cr_assert_eq(shifted, before, "a CMYK region was not packed");
  free(b.p), free(cmyk), free(px);
}

/* libjpeg's own decode of the whole image at M/8 (the reference for the scaled decodes) */
static uint8_t* libjpeg_scaled(const buf_t* b, int m, int* w, int* h) {
  struct jpeg_decompress_struct c;
  struct jpeg_error_mgr e;
  c.err = jpeg_std_error(&e);
  jpeg_create_decompress(&c);
  jpeg_mem_src(&c, b->p, (unsigned long)b->n);
  jpeg_read_header(&c, TRUE);
  c.out_color_space = JCS_RGB;
  c.scale_num = (unsigned)m;
  c.scale_denom = 8;
  jpeg_start_decompress(&c);
  *w = (int)c.output_width;
  *h = (int)c.output_height;
  uint8_t* px = malloc((size_t)*w * *h * 3);
  while (c.output_scanline < c.output_height) {
    JSAMPROW row = px + (size_t)c.output_scanline * *w * 3;
    jpeg_read_scanlines(&c, &row, 1);
  }
  jpeg_finish_decompress(&c);
  jpeg_destroy_decompress(&c);
  return px;
}

Test(jpeg, m8_scaling_sizes_and_pixels) {
  int W = 203, H = 117;
  uint8_t* px = make_pixels(W, H, 3);
  buf_t b = enc_jpeg(px, W, H, (jpeg_spec_t){.in = JCS_RGB, .hs = 2, .vs = 2, .quality = 90});
  rill__img_info_t info;
  rill_error_t err = {0};
  RT_OK(rill__img_probe(b.p, b.n, &info, &err), err);
  static const int nums[9] = {0, 1, 1, 3, 1, 5, 3, 7, 1}, dens[9] = {0, 8, 4, 8, 2, 8, 4, 8, 1};
  for (int m = 1; m <= 8; m++) {
    /* only M/8 allowed: the whole image comes out at M/8, as libjpeg sizes and decodes it */
    rill__img_request_t req = {.channels = 3, .min_w = 1, .min_h = 1, .scales = 1 << m};
    rill__img_out_t plan, o;
    RT_OK(rill__img_plan(&info, &req, &plan, &err), err);
    cr_assert_eq(plan.scale_num, nums[m], "M=%d: num %d", m, plan.scale_num);
    cr_assert_eq(plan.scale_denom, dens[m], "M=%d: denom %d", m, plan.scale_denom);
    cr_assert_eq(plan.w, (W * m + 7) / 8, "M=%d: w %d", m, plan.w);
    cr_assert_eq(plan.h, (H * m + 7) / 8, "M=%d: h %d", m, plan.h);
    int rw, rh;
    uint8_t* ref = libjpeg_scaled(&b, m, &rw, &rh);
    cr_assert(rw == plan.w && rh == plan.h, "M=%d: libjpeg gives %dx%d, plan %dx%d", m, rw, rh, plan.w, plan.h);
    uint8_t* d = decode_ok(&b, req, &o);
    cr_assert(memcmp(d, ref, (size_t)rw * rh * 3) == 0, "M=%d: pixels differ from libjpeg's scaled decode", m);
    free(d), free(ref);
  }
  free(b.p), free(px);
}

Test(jpeg, m8_scale_choice) {
  int W = 400, H = 300;
  uint8_t* px = make_pixels(W, H, 3);
  buf_t b = enc_jpeg(px, W, H, (jpeg_spec_t){.in = JCS_RGB, .hs = 2, .vs = 2});
  rill__img_info_t info;
  rill_error_t err = {0};
  RT_OK(rill__img_probe(b.p, b.n, &info, &err), err);
  struct { int mw, mh, scales, num, den; } cases[] = {
      /* default set: 1/8, 1/4, 1/2, 1 */
      {224, 224, 0, 1, 1}, {200, 150, 0, 1, 2}, {201, 150, 0, 1, 1}, {50, 0, 0, 1, 8}, {51, 0, 0, 1, 4},
      /* every M/8 allowed: the smallest M whose region stays at least min_w x min_h */
      {224, 224, RILL__IMG_SCALES_ALL, 3, 4}, {224, 150, RILL__IMG_SCALES_ALL, 5, 8},
      {250, 100, RILL__IMG_SCALES_ALL, 5, 8}, {251, 100, RILL__IMG_SCALES_ALL, 3, 4},
      {301, 200, RILL__IMG_SCALES_ALL, 7, 8}, {301, 263, RILL__IMG_SCALES_ALL, 7, 8},
      {301, 264, RILL__IMG_SCALES_ALL, 1, 1},
      {150, 112, RILL__IMG_SCALES_ALL, 3, 8}, {151, 100, RILL__IMG_SCALES_ALL, 1, 2},
      {350, 10, RILL__IMG_SCALES_ALL, 7, 8}, {351, 10, RILL__IMG_SCALES_ALL, 1, 1},
      /* a set without 1/2: the next allowed factor up */
      {200, 150, RILL__IMG_SCALES_ALL & ~(1 << 4), 5, 8}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    rill__img_request_t req = {.channels = 3, .min_w = cases[i].mw, .min_h = cases[i].mh, .scales = cases[i].scales};
    rill__img_out_t plan;
    RT_OK(rill__img_plan(&info, &req, &plan, &err), err);
    cr_assert(plan.scale_num == cases[i].num && plan.scale_denom == cases[i].den, "case %zu: %d/%d, want %d/%d", i,
              plan.scale_num, plan.scale_denom, cases[i].num, cases[i].den);
    cr_assert(plan.w >= cases[i].mw && plan.h >= cases[i].mh, "case %zu: %dx%d", i, plan.w, plan.h);
  }
  free(b.p), free(px);
}

/* A region decoded at M/8 equals that region of libjpeg's whole-image decode at M/8. */
static void m8_crop_case(int hs, int vs, int progressive, int m, int x, int y, int w, int h, int* maxdiff) {
  int W = 211, H = 157;
  uint8_t* px = make_pixels(W, H, 3);
  buf_t b = enc_jpeg(px, W, H, (jpeg_spec_t){.in = JCS_RGB, .hs = hs, .vs = vs, .progressive = progressive});
  rill__img_request_t rq = {.channels = 3, .x = x, .y = y, .w = w, .h = h, .min_w = 1, .min_h = 1, .scales = 1 << m};
  rill__img_out_t part;
  uint8_t* p = decode_ok(&b, rq, &part);
  int fw, fh;
  uint8_t* f = libjpeg_scaled(&b, m, &fw, &fh);
  int sx = x * m / 8, sy = y * m / 8;
  int ex = ((x + w) * m + 7) / 8, ey = ((y + h) * m + 7) / 8;
  cr_assert_eq(part.w, (ex < fw ? ex : fw) - sx, "M=%d: region width %d", m, part.w);
  cr_assert_eq(part.h, (ey < fh ? ey : fh) - sy, "M=%d: region height %d", m, part.h);
  int mx = 0;
  for (int r = 0; r < part.h; r++)
    for (int c = 0; c < part.w * 3; c++) {
      int a = p[(size_t)r * part.w * 3 + c], e = f[((size_t)(r + sy) * fw + sx) * 3 + c];
      if (abs(a - e) > mx) mx = abs(a - e);
    }
  *maxdiff = mx;
  free(p), free(f), free(b.p), free(px);
}

Test(jpeg, m8_crop_equals_scaled_full_decode) {
  /* exact, including regions whose edges fall on iMCU boundaries (x = 64: the decoder then
   * asks libjpeg for a neighbour column so that chroma upsampling sees the real pixels) */
  for (int m = 1; m <= 8; m++) {
    int d;
    m8_crop_case(1, 1, 0, m, 37, 21, 90, 70, &d);
    cr_assert_eq(d, 0, "4:4:4 M=%d crop differs by %d", m, d);
    m8_crop_case(2, 2, 0, m, 45, 33, 101, 80, &d);
    cr_assert_eq(d, 0, "4:2:0 M=%d crop differs by %d", m, d);
    m8_crop_case(2, 2, 0, m, 64, 32, 64, 80, &d);
    cr_assert_eq(d, 0, "4:2:0 M=%d iMCU-aligned crop differs by %d", m, d);
    m8_crop_case(2, 1, 1, m, 64, 0, 120, 157, &d);
    cr_assert_eq(d, 0, "4:2:2 progressive M=%d crop differs by %d", m, d);
    m8_crop_case(2, 2, 0, m, 130, 90, 81, 67, &d); /* bottom-right corner */
    cr_assert_eq(d, 0, "4:2:0 M=%d corner crop differs by %d", m, d);
  }
  /* left and right edges on, next to and between iMCU boundaries */
  static const int xs[] = {15, 16, 17, 31, 32, 33, 48}, ws[] = {31, 32, 33, 47};
  for (int m = 4; m <= 8; m += 4)
    for (size_t i = 0; i < sizeof xs / sizeof xs[0]; i++)
      for (size_t j = 0; j < sizeof ws / sizeof ws[0]; j++) {
        int d1, d2;
        m8_crop_case(2, 2, 0, m, xs[i], 8, ws[j], 40, &d1);
        m8_crop_case(2, 1, 0, m, xs[i], 8, ws[j], 40, &d2);
        cr_assert(d1 == 0 && d2 == 0, "M=%d x=%d w=%d: 4:2:0 differs by %d, 4:2:2 by %d", m, xs[i], ws[j], d1, d2);
      }
}

/* A scaled region also stays close to the same region of the full-resolution image. */
Test(jpeg, m8_crop_close_to_source_pixels) {
  int W = 240, H = 180;
  uint8_t* px = make_pixels(W, H, 3);
  buf_t b = enc_jpeg(px, W, H, (jpeg_spec_t){.in = JCS_RGB, .quality = 95});
  for (int m = 3; m <= 7; m++) {
    rill__img_request_t rq = {.channels = 3, .x = 40, .y = 24, .w = 160, .h = 128, .min_w = 1, .min_h = 1,
                              .scales = 1 << m};
    rill__img_out_t o;
    uint8_t* p = decode_ok(&b, rq, &o);
    double sc = m / 8.0, total = 0;
    int n = 0;
    /* each scaled pixel against the source pixel under its centre */
    for (int r = 1; r < o.h - 1; r++)
      for (int c = 1; c < o.w - 1; c++) {
        int sx = (int)((40 * m / 8 + c + 0.5) / sc), sy = (int)((24 * m / 8 + r + 0.5) / sc);
        for (int k = 0; k < 3; k++, n++)
          total += abs((int)p[((size_t)r * o.w + c) * 3 + k] - (int)px[((size_t)sy * W + sx) * 3 + k]);
      }
    cr_assert(total / n < 6.0, "M=%d: mean difference %.2f from the source", m, total / n);
    free(p);
  }
  free(b.p), free(px);
}

Test(jpeg, truncated_is_format_error) {
  uint8_t* px = make_pixels(80, 80, 3);
  for (int prog = 0; prog < 2; prog++) {
    buf_t b = enc_jpeg(px, 80, 80, (jpeg_spec_t){.in = JCS_RGB, .progressive = prog});
    rill_error_t err = {0};
    int rc;
    rill__img_out_t o;
    buf_t t = {b.p, b.n * 6 / 10};
    cr_assert_null(decode(&t, RGB(3), &o, &err, &rc));
    cr_assert_eq(rc, RILL_EFORMAT, "progressive %d: rc %d %s", prog, rc, err.message);
    cr_assert(strstr(err.message, "Premature end of JPEG file"), "%s", err.message);
    t.n = b.n - 2; /* only the end marker missing */
    cr_assert_null(decode(&t, RGB(3), &o, &err, &rc));
    cr_assert_eq(rc, RILL_EFORMAT);
    t.n = 40; /* inside the header */
    cr_assert_null(decode(&t, RGB(3), &o, &err, &rc));
    cr_assert_eq(rc, RILL_EFORMAT);
    cr_assert(strstr(err.message, "JPEG"), "%s", err.message);
    /* the decoder stays usable after errors */
    uint8_t* d = decode_ok(&b, RGB(3), &o);
    free(d);
    free(b.p);
  }
  free(px);
}

Test(jpeg, garbage_after_magic) {
  uint8_t junk[4096];
  uint64_t s = 12345;
  for (int round = 0; round < 200; round++) {
    for (size_t i = 0; i < sizeof junk; i++) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      junk[i] = (uint8_t)(s >> 56);
    }
    junk[0] = 0xff, junk[1] = 0xd8, junk[2] = 0xff;
    rill_error_t err = {0};
    int rc;
    rill__img_out_t o;
    buf_t b = {junk, (size_t)(16 + round * 20)};
    uint8_t* d = decode(&b, RGB(3), &o, &err, &rc);
    cr_assert_null(d);
    cr_assert(rc == RILL_EFORMAT || rc == RILL_ERANGE || rc == RILL_ENOTSUP, "rc %d", rc);
    cr_assert(err.message[0]);
  }
}

/* A JPEG with junk bytes between its scan data and the end marker: libjpeg warns "Corrupt
 * JPEG data: N extraneous bytes before marker 0xd9" and would decode it. It is a format
 * error for every request, a crop that ends above the damage included. */
Test(jpeg, corrupt_scan_data_fails_whatever_the_crop) {
  uint8_t* px = make_pixels(96, 96, 3);
  buf_t b = enc_jpeg(px, 96, 96, (jpeg_spec_t){.in = JCS_RGB, .hs = 2, .vs = 2});
  cr_assert(b.n > 2 && b.p[b.n - 2] == 0xff && b.p[b.n - 1] == 0xd9);
  buf_t bad = {malloc(b.n + 100), b.n + 100};
  memcpy(bad.p, b.p, b.n - 2);
  memset(bad.p + b.n - 2, 0x55, 100);
  bad.p[bad.n - 2] = 0xff, bad.p[bad.n - 1] = 0xd9;
  rill__img_request_t reqs[] = {
      RGB(3),
      {.channels = 3, .x = 0, .y = 0, .w = 96, .h = 16},  /* the top rows only */
      {.channels = 3, .x = 40, .y = 8, .w = 20, .h = 20}, /* a small crop */
      {.channels = 1, .x = 0, .y = 0, .w = 32, .h = 32, .min_w = 8, .min_h = 8, .scales = 0x1fe}, /* scaled */
  };
  for (size_t k = 0; k < sizeof reqs / sizeof reqs[0]; k++) {
    rill_error_t err = {0};
    int rc;
    rill__img_out_t o;
    cr_assert_null(decode(&bad, reqs[k], &o, &err, &rc), "request %zu decoded a corrupt file", k);
    cr_assert_eq(rc, RILL_EFORMAT, "request %zu: %d %s", k, rc, err.message);
    cr_assert(strstr(err.message, "Corrupt JPEG data"), "%s", err.message);
    free(decode_ok(&b, reqs[k], &o)); /* the intact file decodes with the same request */
  }
  free(bad.p);
  free(b.p);
  free(px);
}

/* Patches the SOF0 size of a JPEG. */
static void jpeg_set_size(buf_t* b, int w, int h) {
  for (size_t i = 2; i + 9 < b->n; i++)
    if (b->p[i] == 0xff && (b->p[i + 1] == 0xc0 || b->p[i + 1] == 0xc2)) {
      b->p[i + 5] = (uint8_t)(h >> 8), b->p[i + 6] = (uint8_t)h;
      b->p[i + 7] = (uint8_t)(w >> 8), b->p[i + 8] = (uint8_t)w;
      return;
    }
  cr_assert_fail("no SOF marker");
}

Test(limits, huge_header_is_range_error) {
  uint8_t* px = make_pixels(16, 16, 3);
  buf_t j = enc_jpeg(px, 16, 16, (jpeg_spec_t){.in = JCS_RGB});
  jpeg_set_size(&j, 65000, 65000);
  buf_t p = enc_png(px, 16, 16, PNG_COLOR_TYPE_RGB, 8, 0, NULL, 0, NULL, 0);
  p.p[16] = 0, p.p[17] = 0, p.p[18] = 0xfd, p.p[19] = 0xe8; /* width 65000 */
  p.p[20] = 0, p.p[21] = 0, p.p[22] = 0xfd, p.p[23] = 0xe8; /* height 65000 */
  uint32_t crc = (uint32_t)crc32(0, p.p + 12, 17);
  p.p[29] = (uint8_t)(crc >> 24), p.p[30] = (uint8_t)(crc >> 16), p.p[31] = (uint8_t)(crc >> 8), p.p[32] = (uint8_t)crc;
  buf_t* bs[2] = {&j, &p};
  for (int k = 0; k < 2; k++) {
    rill_error_t err = {0};
    rill__img_info_t info;
    RT_OK(rill__img_probe(bs[k]->p, bs[k]->n, &info, &err), err);
    cr_assert_eq(info.width, 65000);
    rill__img_out_t plan;
    RT_FAILS(rill__img_plan(&info, &RGB(3), &plan, &err), RILL_ERANGE, "65000x65000", err);
    cr_assert(strstr(err.message, "100000000"), "%s", err.message);
    uint8_t dst[16];
    RT_FAILS(rill__img_decode(bs[k]->p, bs[k]->n, &RGB(3), dst, sizeof dst, &plan, &err), RILL_ERANGE,
             "exceeds the limit", err);
  }
  /* a lower limit on a real image */
  rill_error_t err = {0};
  uint8_t dst[16 * 16 * 3];
  rill__img_out_t o;
  buf_t ok = enc_jpeg(px, 16, 16, (jpeg_spec_t){.in = JCS_RGB});
  RT_FAILS(rill__img_decode(ok.p, ok.n, &(rill__img_request_t){.channels = 3, .max_pixels = 255}, dst,
                            sizeof dst, &o, &err),
           RILL_ERANGE, "limit of 255 pixels", err);
  RT_OK(rill__img_decode(ok.p, ok.n, &(rill__img_request_t){.channels = 3, .max_pixels = 256}, dst, sizeof dst,
                         &o, &err),
        err);
  free(ok.p), free(j.p), free(p.p), free(px);
}

Test(limits, progressive_header_larger_than_its_data) {
  uint8_t* px = make_pixels(64, 64, 3);
  buf_t b = enc_jpeg(px, 64, 64, (jpeg_spec_t){.in = JCS_RGB, .hs = 2, .vs = 2, .progressive = 1});
  jpeg_set_size(&b, 8000, 8000); /* 64 MP: under the pixel limit, far more blocks than bytes */
  rill_error_t err = {0};
  rill__img_info_t info;
  rill__img_out_t plan, o;
  RT_OK(rill__img_probe(b.p, b.n, &info, &err), err);
  RT_OK(rill__img_plan(&info, &RGB(3), &plan, &err), err);
  uint8_t dst[16];
  RT_FAILS(rill__img_decode(b.p, b.n, &RGB(3), dst, sizeof dst, &o, &err), RILL_EFORMAT,
           "cannot hold a 8000x8000 progressive image", err);
  free(b.p), free(px);
}

Test(limits, bad_requests) {
  uint8_t* px = make_pixels(20, 10, 3);
  buf_t b = enc_png(px, 20, 10, PNG_COLOR_TYPE_RGB, 8, 0, NULL, 0, NULL, 0);
  rill_error_t err = {0};
  rill__img_info_t info;
  rill__img_out_t o;
  uint8_t dst[20 * 10 * 4];
  RT_OK(rill__img_probe(b.p, b.n, &info, &err), err);
  RT_FAILS(rill__img_plan(&info, &RGB(2), &o, &err), RILL_EINVAL, "channels must be 1, 3 or 4", err);
  RT_FAILS(rill__img_plan(&info, &((rill__img_request_t){.channels = 3, .x = 15, .w = 6, .h = 2}), &o, &err),
           RILL_EINVAL, "outside the 20x10 image", err);
  RT_FAILS(rill__img_plan(&info, &((rill__img_request_t){.channels = 3, .x = -1, .w = 6, .h = 2}), &o, &err),
           RILL_EINVAL, "outside", err);
  RT_FAILS(rill__img_decode(b.p, b.n, &RGB(3), dst, 20 * 10 * 3 - 1, &o, &err), RILL_EINVAL, "smaller", err);
  buf_t j = enc_jpeg(px, 20, 10, (jpeg_spec_t){.in = JCS_RGB});
  RT_FAILS(rill__img_decode(j.p, j.n, &RGB(3), dst, 10, &o, &err), RILL_EINVAL, "smaller", err);
  /* scale masks may name M/8 for M = 1..8 only */
  RT_FAILS(rill__img_plan(&info, &((rill__img_request_t){.channels = 3, .min_w = 4, .scales = 1}), &o, &err),
           RILL_EINVAL, "scale mask 0x1 names factors other than 1/8 .. 8/8", err);
  RT_FAILS(rill__img_decode(j.p, j.n, &((rill__img_request_t){.channels = 3, .min_w = 4, .scales = 1 << 9}), dst,
                            sizeof dst, &o, &err),
           RILL_EINVAL, "scale mask 0x200", err);
  free(j.p), free(b.p), free(px);
}

Test(formats, empty_unknown_and_other_formats) {
  rill_error_t err = {0};
  rill__img_info_t info;
  uint8_t dst[16];
  rill__img_out_t o;
  RT_FAILS(rill__img_probe("", 0, &info, &err), RILL_EFORMAT, "empty file", err);
  RT_FAILS(rill__img_decode("", 0, &RGB(3), dst, sizeof dst, &o, &err), RILL_EFORMAT, "empty file", err);
  const char gif[] = "GIF89a\x10\0\x10\0\0\0\0";
  RT_FAILS(rill__img_probe(gif, sizeof gif, &info, &err), RILL_ENOTSUP, "unsupported image format (GIF)", err);
  const char bmp[] = "BM\x36\0\0\0\0\0\0\0\x36\0\0\0";
  RT_FAILS(rill__img_decode(bmp, sizeof bmp, &RGB(3), dst, sizeof dst, &o, &err), RILL_ENOTSUP,
           "unsupported image format (BMP)", err);
  const char webp[] = "RIFF\0\0\0\0WEBPVP8 ";
  if (RILL_HAVE_WEBP)
    RT_FAILS(rill__img_probe(webp, sizeof webp, &info, &err), RILL_EFORMAT, "corrupt WebP header", err);
  else
    RT_FAILS(rill__img_probe(webp, sizeof webp, &info, &err), RILL_ENOTSUP,
             "WebP decoding is not available: built without libwebp", err);
  const char text[] = "hello, this is not an image";
  RT_FAILS(rill__img_probe(text, sizeof text, &info, &err), RILL_ENOTSUP, "unsupported image format", err);
  const uint8_t short_png[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0};
  RT_FAILS(rill__img_probe(short_png, sizeof short_png, &info, &err), RILL_EFORMAT, "corrupt PNG header", err);
}

/* ---------------------------------------------------------------- PNG */

Test(png, rgb_rgba_gray_exact) {
  int w = 33, h = 17;
  uint8_t* rgb = make_pixels(w, h, 3);
  uint8_t* rgba = make_pixels(w, h, 4);
  uint8_t* g = make_pixels(w, h, 1);
  uint8_t* ga = make_pixels(w, h, 2);
  buf_t b3 = enc_png(rgb, w, h, PNG_COLOR_TYPE_RGB, 8, 0, NULL, 0, NULL, 0);
  buf_t b4 = enc_png(rgba, w, h, PNG_COLOR_TYPE_RGBA, 8, 0, NULL, 0, NULL, 0);
  buf_t b1 = enc_png(g, w, h, PNG_COLOR_TYPE_GRAY, 8, 0, NULL, 0, NULL, 0);
  buf_t b2 = enc_png(ga, w, h, PNG_COLOR_TYPE_GRAY_ALPHA, 8, 0, NULL, 0, NULL, 0);
  rill__img_out_t o;
  uint8_t* d = decode_ok(&b3, RGB(3), &o);
  cr_assert(memcmp(d, rgb, (size_t)w * h * 3) == 0);
  free(d);
  d = decode_ok(&b4, RGB(4), &o);
  cr_assert(memcmp(d, rgba, (size_t)w * h * 4) == 0);
  free(d);
  d = decode_ok(&b4, RGB(3), &o); /* alpha dropped */
  for (int i = 0; i < w * h; i++) cr_assert(memcmp(d + i * 3, rgba + i * 4, 3) == 0);
  free(d);
  d = decode_ok(&b3, RGB(1), &o);
  for (int i = 0; i < w * h; i++) cr_assert_eq(d[i], rill__img_luma(rgb[i * 3], rgb[i * 3 + 1], rgb[i * 3 + 2]));
  free(d);
  d = decode_ok(&b3, RGB(4), &o);
  for (int i = 0; i < w * h; i++) cr_assert(memcmp(d + i * 4, rgb + i * 3, 3) == 0 && d[i * 4 + 3] == 255);
  free(d);
  d = decode_ok(&b1, RGB(3), &o);
  for (int i = 0; i < w * h; i++) cr_assert(d[i * 3] == g[i] && d[i * 3 + 1] == g[i] && d[i * 3 + 2] == g[i]);
  free(d);
  d = decode_ok(&b1, RGB(1), &o);
  cr_assert(memcmp(d, g, (size_t)w * h) == 0);
  free(d);
  d = decode_ok(&b2, RGB(4), &o);
  for (int i = 0; i < w * h; i++)
    cr_assert(d[i * 4] == ga[i * 2] && d[i * 4 + 2] == ga[i * 2] && d[i * 4 + 3] == ga[i * 2 + 1]);
  free(d);
  d = decode_ok(&b2, RGB(1), &o);
  for (int i = 0; i < w * h; i++) cr_assert_eq(d[i], ga[i * 2]);
  free(d);
  rill__img_info_t info;
  rill_error_t err = {0};
  RT_OK(rill__img_probe(b2.p, b2.n, &info, &err), err);
  cr_assert_eq(info.channels, 2);
  cr_assert_eq(info.format, RILL__IMG_PNG);
  free(b1.p), free(b2.p), free(b3.p), free(b4.p), free(rgb), free(rgba), free(g), free(ga);
}

Test(png, palette_trns_16bit_lowbit) {
  int w = 20, h = 9;
  png_color pal[4] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {10, 20, 30}};
  uint8_t trns[4] = {255, 128, 0, 255};
  uint8_t idx[20 * 9];
  for (int i = 0; i < w * h; i++) idx[i] = (uint8_t)(i % 4);
  buf_t p = enc_png(idx, w, h, PNG_COLOR_TYPE_PALETTE, 8, 0, pal, 4, trns, 4);
  rill__img_out_t o;
  uint8_t* d = decode_ok(&p, RGB(4), &o);
  for (int i = 0; i < w * h; i++) {
    const png_color* c = &pal[i % 4];
    cr_assert(d[i * 4] == c->red && d[i * 4 + 1] == c->green && d[i * 4 + 2] == c->blue, "pixel %d", i);
    cr_assert_eq(d[i * 4 + 3], trns[i % 4]);
  }
  free(d);
  d = decode_ok(&p, RGB(3), &o);
  for (int i = 0; i < w * h; i++) cr_assert_eq(d[i * 3 + 1], pal[i % 4].green);
  free(d);
  free(p.p);
  /* 16-bit RGB: v * 257 scales back to v exactly */
  uint8_t* v8 = make_pixels(w, h, 3);
  uint8_t* v16 = malloc((size_t)w * h * 6);
  for (int i = 0; i < w * h * 3; i++) v16[i * 2] = v16[i * 2 + 1] = v8[i];
  buf_t b16 = enc_png(v16, w, h, PNG_COLOR_TYPE_RGB, 16, 0, NULL, 0, NULL, 0);
  d = decode_ok(&b16, RGB(3), &o);
  cr_assert(memcmp(d, v8, (size_t)w * h * 3) == 0);
  free(d), free(b16.p), free(v16), free(v8);
  /* 1-bit gray: 0 and 255 */
  uint8_t bits[3 * 9];
  for (int i = 0; i < 27; i++) bits[i] = 0xa5;
  buf_t b1 = enc_png(bits, w, h, PNG_COLOR_TYPE_GRAY, 1, 0, NULL, 0, NULL, 0);
  d = decode_ok(&b1, RGB(1), &o);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++) cr_assert_eq(d[y * w + x], ((0xa5 >> (7 - x % 8)) & 1) ? 255 : 0);
  free(d), free(b1.p);
  /* gray with tRNS: the transparent level gets alpha 0 */
  uint8_t gl[20 * 9];
  for (int i = 0; i < w * h; i++) gl[i] = (uint8_t)(i % 3 * 100);
  png_color_16 tc = {.gray = 100};
  buf_t bt = {0};
  {
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    png_set_write_fn(png, &bt, png_write_mem, png_flush_mem);
    png_set_IHDR(png, info, w, h, 8, PNG_COLOR_TYPE_GRAY, 0, 0, 0);
    png_set_tRNS(png, info, NULL, 0, &tc);
    png_write_info(png, info);
    for (int y = 0; y < h; y++) png_write_row(png, gl + y * w);
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
  }
  d = decode_ok(&bt, RGB(4), &o);
  for (int i = 0; i < w * h; i++) cr_assert_eq(d[i * 4 + 3], gl[i] == 100 ? 0 : 255);
  free(d), free(bt.p);
}

Test(png, region_equals_full_decode) {
  int w = 71, h = 53;
  uint8_t* px = make_pixels(w, h, 4);
  for (int il = 0; il < 2; il++) {
    buf_t b = enc_png(px, w, h, PNG_COLOR_TYPE_RGBA, 8, il, NULL, 0, NULL, 0);
    rill__img_out_t o;
    int regions[][4] = {{0, 0, 71, 53}, {5, 7, 30, 20}, {0, 10, 71, 5}, {70, 52, 1, 1}, {40, 0, 31, 53}};
    for (int c = 1; c <= 4; c += (c == 1 ? 2 : 1)) {
      uint8_t* f = decode_ok(&b, RGB(c), &o);
      for (size_t r = 0; r < sizeof regions / sizeof regions[0]; r++) {
        int* g = regions[r];
        uint8_t* p =
            decode_ok(&b, (rill__img_request_t){.channels = c, .x = g[0], .y = g[1], .w = g[2], .h = g[3]}, &o);
        cr_assert(o.w == g[2] && o.h == g[3]);
        for (int y = 0; y < g[3]; y++)
          cr_assert(memcmp(p + (size_t)y * g[2] * c, f + ((size_t)(y + g[1]) * w + g[0]) * c, (size_t)g[2] * c) == 0,
                    "interlace %d channels %d region %zu row %d", il, c, r, y);
        free(p);
      }
      free(f);
    }
    free(b.p);
  }
  free(px);
}

Test(png, corrupt_data) {
  int w = 40, h = 30;
  uint8_t* px = make_pixels(w, h, 3);
  buf_t b = enc_png(px, w, h, PNG_COLOR_TYPE_RGB, 8, 0, NULL, 0, NULL, 0);
  rill_error_t err = {0};
  rill__img_out_t o;
  int rc;
  buf_t t = {b.p, b.n / 2};
  cr_assert_null(decode(&t, RGB(3), &o, &err, &rc));
  cr_assert_eq(rc, RILL_EFORMAT);
  cr_assert(strstr(err.message, "corrupt PNG data"), "%s", err.message);
  t.n = b.n - 12; /* IEND missing */
  cr_assert_null(decode(&t, RGB(3), &o, &err, &rc));
  cr_assert_eq(rc, RILL_EFORMAT, "%s", err.message);
  /* a flipped bit in the IDAT payload: CRC error */
  uint8_t* c = malloc(b.n);
  memcpy(c, b.p, b.n);
  c[60] ^= 0x10;
  buf_t cb = {c, b.n};
  cr_assert_null(decode(&cb, RGB(3), &o, &err, &rc));
  cr_assert_eq(rc, RILL_EFORMAT);
  /* and it still decodes a good file */
  uint8_t* d = decode_ok(&b, RGB(3), &o);
  cr_assert(memcmp(d, px, (size_t)w * h * 3) == 0);
  free(d), free(c), free(b.p), free(px);
}

/* ---------------------------------------------------------------- WebP */

#if RILL_HAVE_WEBP
#include <webp/decode.h>

static uint8_t* textured_pixels(int w, int h, int ch, unsigned seed); /* below */

/* The kinds of WebP the tests encode: lossy and lossless, without and with alpha. */
static const struct {
  int ch, quality;
  const char* name;
} webp_kinds[] = {{3, 80, "lossy"}, {4, 80, "lossy+alpha"}, {3, 0, "lossless"}, {4, 0, "lossless+alpha"}};

/* Textured colours; a smooth alpha, which libwebp codes with a prediction filter (never 0 in
 * a lossless file, whose encoding would change the colours of transparent pixels). */
static buf_t webp_of(int k, int w, int h, uint8_t** px) {
  int ch = webp_kinds[k].ch;
  *px = textured_pixels(w, h, ch, 7u + (unsigned)k);
  for (int y = 0; ch == 4 && y < h; y++)
    for (int x = 0; x < w; x++)
      (*px)[((size_t)y * w + x) * 4 + 3] = (uint8_t)(webp_kinds[k].quality ? x * 5 + y * 3 : 1 + (x * 5 + y * 3) % 255);
  return enc_webp(*px, w, h, ch, webp_kinds[k].quality);
}

/* Whole decodes give libwebp's own pixels (RGB, RGBA with 255 where the file has no alpha,
 * gray as the BT.601 luma of them); lossless ones the source pixels. */
Test(webp, whole_decodes_match_libwebp) {
  int w = 97, h = 61;
  for (int k = 0; k < 4; k++) {
    uint8_t* px;
    buf_t b = webp_of(k, w, h, &px);
    rill__img_info_t info;
    rill_error_t err = {0};
    RT_OK(rill__img_probe(b.p, b.n, &info, &err), err);
    cr_assert(info.format == RILL__IMG_WEBP && info.width == w && info.height == h && info.channels == webp_kinds[k].ch,
              "%s: %dx%d %d", webp_kinds[k].name, info.width, info.height, info.channels);
    int rw, rh;
    uint8_t* ref3 = WebPDecodeRGB(b.p, b.n, &rw, &rh);
    uint8_t* ref4 = WebPDecodeRGBA(b.p, b.n, &rw, &rh);
    cr_assert(ref3 && ref4 && rw == w && rh == h);
    rill__img_out_t o;
    uint8_t* d3 = decode_ok(&b, RGB(3), &o);
    cr_assert(o.w == w && o.h == h && o.channels == 3 && o.stride == w * 3 && o.scale_denom == 1);
    cr_assert(memcmp(d3, ref3, (size_t)w * h * 3) == 0, "%s: RGB", webp_kinds[k].name);
    uint8_t* d4 = decode_ok(&b, RGB(4), &o);
    cr_assert(memcmp(d4, ref4, (size_t)w * h * 4) == 0, "%s: RGBA", webp_kinds[k].name);
    uint8_t* d1 = decode_ok(&b, RGB(1), &o);
    for (int i = 0; i < w * h; i++)
      cr_assert_eq(d1[i], rill__img_luma(ref3[3 * i], ref3[3 * i + 1], ref3[3 * i + 2]), "%s: gray %d", webp_kinds[k].name, i);
    if (webp_kinds[k].quality == 0) { /* lossless: the source */
      cr_assert(memcmp(webp_kinds[k].ch == 4 ? d4 : d3, px, (size_t)w * h * webp_kinds[k].ch) == 0, "%s",
                webp_kinds[k].name);
    } else { /* lossy: near the source */
      double mean;
      int max;
      uint8_t* src3 = webp_kinds[k].ch == 3 ? px : malloc((size_t)w * h * 3);
      if (src3 != px)
        for (int i = 0; i < w * h; i++) memcpy(src3 + 3 * i, px + 4 * i, 3);
      diff(d3, src3, (size_t)w * h * 3, &mean, &max);
      cr_assert(mean < 12, "%s: mean difference %.2f from the source", webp_kinds[k].name, mean);
      if (src3 != px) free(src3);
    }
    for (int i = 0; webp_kinds[k].ch == 3 && i < w * h; i++) cr_assert_eq(d4[4 * i + 3], 255);
    WebPFree(ref3), WebPFree(ref4);
    free(d1), free(d3), free(d4), free(b.p), free(px);
  }
}

/* A region gives exactly the pixels of the whole decode there, for every kind, channel count
 * and place: at the image's edges, on odd coordinates (libwebp crops from even ones), and
 * for lossy images with alpha (whose cropped alpha libwebp misplaces unless the crop starts
 * at the top row). */
Test(webp, regions_equal_whole_decode) {
  int w = 97, h = 61;
  unsigned seed = 11;
  for (int k = 0; k < 4; k++) {
    uint8_t* px;
    buf_t b = webp_of(k, w, h, &px);
    for (int c = 1; c <= 4; c += c == 1 ? 2 : 1) {
      rill__img_out_t o;
      uint8_t* f = decode_ok(&b, RGB(c), &o);
      for (int r = 0; r < 120; r++) {
        int g[4];
        static const int fixed[][4] = {{0, 0, 1, 1}, {96, 60, 1, 1}, {1, 1, 95, 59}, {0, 30, 97, 31}, {3, 5, 2, 2}};
        if (r < 5) {
          memcpy(g, fixed[r], sizeof g);
        } else {
          seed = seed * 1103515245u + 12345u;
          g[2] = 1 + (int)((seed >> 8) % (unsigned)w), g[3] = 1 + (int)((seed >> 20) % (unsigned)h);
          seed = seed * 1103515245u + 12345u;
          g[0] = (int)((seed >> 8) % (unsigned)(w - g[2] + 1)), g[1] = (int)((seed >> 20) % (unsigned)(h - g[3] + 1));
        }
        uint8_t* p =
            decode_ok(&b, (rill__img_request_t){.channels = c, .x = g[0], .y = g[1], .w = g[2], .h = g[3]}, &o);
        cr_assert(o.w == g[2] && o.h == g[3] && o.stride == (int64_t)g[2] * c);
        for (int y = 0; y < g[3]; y++)
          cr_assert(memcmp(p + (size_t)y * g[2] * c, f + ((size_t)(y + g[1]) * w + g[0]) * c, (size_t)g[2] * c) == 0,
                    "%s, %d channels, region %dx%d at (%d,%d): row %d differs", webp_kinds[k].name, c, g[2], g[3],
                    g[0], g[1], y);
        free(p);
      }
      free(f);
    }
    free(b.p), free(px);
  }
}

Test(webp, bad_files) {
  int w = 40, h = 30;
  uint8_t* px;
  buf_t b = webp_of(0, w, h, &px);
  rill_error_t err = {0};
  rill__img_out_t o;
  int rc;
  /* cut in its header, then in its data */
  buf_t t = {b.p, 16};
  cr_assert_null(decode(&t, RGB(3), &o, &err, &rc));
  cr_assert(rc == RILL_EFORMAT && strstr(err.message, "corrupt WebP header (truncated)"), "%d %s", rc, err.message);
  t.n = b.n - 10;
  cr_assert_null(decode(&t, RGB(3), &o, &err, &rc));
  cr_assert(rc == RILL_EFORMAT && strstr(err.message, "corrupt WebP data (truncated)"), "%d %s", rc, err.message);
  /* lossless data made invalid: a bitstream error */
  uint8_t* lpx;
  buf_t l = webp_of(2, w, h, &lpx);
  memset(l.p + 26, 0xff, l.n - 26); /* its entropy codes (the header ends at byte 25) */
  cr_assert_null(decode(&l, RGB(3), &o, &err, &rc));
  cr_assert(rc == RILL_EFORMAT && strstr(err.message, "corrupt WebP data (bitstream error)"), "%d %s", rc, err.message);
  /* an animation: its extended header says so */
  const uint8_t anim[] = {'R', 'I', 'F', 'F', 22, 0, 0, 0, 'W', 'E', 'B', 'P', 'V', 'P', '8', 'X', 10, 0, 0, 0,
                          0x02, 0, 0, 0, 9, 0, 0, 9, 0, 0};
  rill__img_info_t info;
  RT_FAILS(rill__img_probe(anim, sizeof anim, &info, &err), RILL_ENOTSUP, "animated WebP is not supported", err);
  uint8_t dst[40 * 30 * 4];
  RT_FAILS(rill__img_decode(anim, sizeof anim, &RGB(3), dst, sizeof dst, &o, &err), RILL_ENOTSUP, "animated WebP", err);
  /* the pixel limit, a region outside the image, a destination too small */
  RT_FAILS(rill__img_decode(b.p, b.n, &(rill__img_request_t){.channels = 3, .max_pixels = 40 * 30 - 1}, dst,
                            sizeof dst, &o, &err),
           RILL_ERANGE, "image of 40x30 pixels exceeds the limit of 1199 pixels", err);
  RT_FAILS(rill__img_decode(b.p, b.n, &(rill__img_request_t){.channels = 3, .x = 30, .y = 0, .w = 11, .h = 5}, dst,
                            sizeof dst, &o, &err),
           RILL_EINVAL, "region 11x5 at (30,0) is outside the 40x30 image", err);
  RT_FAILS(rill__img_decode(b.p, b.n, &RGB(4), dst, 40 * 30 * 3, &o, &err), RILL_EINVAL,
           "destination of 3600 bytes is smaller than the 40x30x4 image", err);
  RT_FAILS(rill__img_decode(b.p, b.n, &RGB(2), dst, sizeof dst, &o, &err), RILL_EINVAL, "channels must be 1, 3 or 4", err);
  free(b.p), free(l.p), free(px), free(lpx);
}
#endif

/* ---------------------------------------------------------------- mutated files */

/* Bit flips, byte changes and cuts of valid files: every result is a clean status. */
static void mutate_all(const buf_t* good, int rounds, uint64_t seed) {
  uint8_t* m = malloc(good->n);
  uint8_t dst[96 * 64 * 4];
  int ok = 0, bad = 0;
  for (int r = 0; r < rounds; r++) {
    memcpy(m, good->p, good->n);
    size_t n = good->n;
    int edits = 1 + r % 4;
    for (int e = 0; e < edits && n > 3; e++) {
      seed = seed * 6364136223846793005ull + 1442695040888963407ull;
      size_t at = 2 + (size_t)(seed >> 33) % (n - 2); /* keep the signature's first bytes */
      int kind = (int)(seed >> 20) % 3;
      if (kind == 0) m[at] ^= (uint8_t)(1u << ((seed >> 8) & 7));
      else if (kind == 1) m[at] = (uint8_t)(seed >> 40);
      else n = at;
    }
    rill_error_t err = {0};
    rill__img_out_t o;
    int c = 1 + (r % 3 == 0 ? 0 : r % 3 == 1 ? 2 : 3);
    int rc = rill__img_decode(m, n, &(rill__img_request_t){.channels = c, .max_pixels = 96 * 64}, dst,
                              (size_t)96 * 64 * c, &o, &err);
    cr_assert(rc == RILL_OK || rc == RILL_EFORMAT || rc == RILL_ERANGE || rc == RILL_ENOTSUP ||
                  rc == RILL_EINVAL,
              "round %d: rc %d", r, rc);
    if (rc == RILL_OK) {
      ok++;
      cr_assert(o.w > 0 && o.h > 0 && (size_t)o.w * o.h * c <= sizeof dst);
    } else {
      bad++;
      cr_assert(err.message[0], "round %d: no message", r);
    }
  }
  cr_assert(bad > 0);
  free(m);
}

Test(robustness, mutated_jpeg_and_png) {
  uint8_t* px = make_pixels(96, 64, 3);
  buf_t a = enc_jpeg(px, 96, 64, (jpeg_spec_t){.in = JCS_RGB, .hs = 2, .vs = 2});
  buf_t b = enc_jpeg(px, 96, 64, (jpeg_spec_t){.in = JCS_RGB, .progressive = 1});
  buf_t c = enc_png(px, 96, 64, PNG_COLOR_TYPE_RGB, 8, 1, NULL, 0, NULL, 0);
  mutate_all(&a, 600, 1);
  mutate_all(&b, 600, 2);
  mutate_all(&c, 600, 3);
#if RILL_HAVE_WEBP
  buf_t d = enc_webp(px, 96, 64, 3, 70), e = enc_webp(px, 96, 64, 3, 0);
  mutate_all(&d, 600, 4);
  mutate_all(&e, 600, 5);
  free(d.p), free(e.p);
#endif
  free(a.p), free(b.p), free(c.p), free(px);
}

/* ---------------------------------------------------------------- JPEG entropy marks */

/* A photo-like test image: smooth shapes, edges and noise, so that the entropy-coded data has
 * coefficients of every size and the MCU rows start at every bit of a byte. */
static uint8_t* textured_pixels(int w, int h, int ch, unsigned seed) {
  uint8_t* p = malloc((size_t)w * h * ch);
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int c = 0; c < ch; c++) {
        seed = seed * 1103515245u + 12345u;
        int v = pattern(x, y, c) + (int)((seed >> 16) % 41) - 20 + ((x / 23 + y / 17) % 3 == 0 ? 60 : 0);
        p[((size_t)y * w + x) * ch + c] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
      }
  return p;
}

/* A region decoded from the file's start (rows above it entropy-decoded by libjpeg) */
static uint8_t* plain_region(const buf_t* b, rill__img_request_t rq, rill__img_out_t* o) {
  rq.marks = NULL, rq.marks_out = NULL, rq.tail_verified = 1;
  return decode_ok(b, rq, o);
}

static size_t out_bytes(const rill__img_out_t* o) { return (size_t)o->w * (size_t)o->h * (size_t)o->channels; }

/* Seeks to a mark and the walks to the marks give the pixels of a decode from the start,
 * for every sampling, size, scale, channel count and region; in the first epoch (marks made
 * by the decode that checks the file) and in later ones (marks kept). */
Test(jpeg_marks, seek_decodes_the_same_pixels) {
  struct {
    int w, h, gray, hs, vs, q;
  } cases[] = {{173, 131, 0, 1, 1, 95}, {173, 131, 0, 2, 2, 75}, {301, 263, 0, 2, 1, 90}, {96, 300, 0, 1, 2, 85},
               {200, 150, 1, 0, 0, 100}, {500, 375, 0, 2, 2, 92}, {257, 513, 0, 2, 2, 60}, {64, 64, 0, 2, 2, 100}};
  unsigned rng = 7;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int W = cases[k].w, H = cases[k].h, ch = cases[k].gray ? 1 : 3;
    uint8_t* px = textured_pixels(W, H, ch, (unsigned)k + 1);
    buf_t b = enc_jpeg(px, W, H, (jpeg_spec_t){.in = ch == 1 ? JCS_GRAYSCALE : JCS_RGB, .quality = cases[k].q,
                                               .hs = cases[k].hs, .vs = cases[k].vs});
    rill__jpeg_marks_t* m = rill__jpeg_marks_new(b.p, b.n, RILL__JPEG_COL_MARKS_MAX);
    cr_assert_not_null(m, "case %zu: no marks for a baseline file", k);
    cr_assert_eq(rill__jpeg_marks_known(m), 0, "marks are found only as seeks need them");
    int seeks = 0;
    for (int r = 0; r < 40; r++) {
      rng = rng * 1103515245u + 12345u;
      rill__img_request_t rq = {.channels = (r % 5 == 4) ? 1 : 3};
      rq.h = 1 + (int)((rng >> 8) % (unsigned)H), rq.w = 1 + (int)((rng >> 4) % (unsigned)W);
      rq.y = (int)((rng >> 12) % (unsigned)(H - rq.h + 1)), rq.x = (int)((rng >> 3) % (unsigned)(W - rq.w + 1));
      if (r % 3 == 1) rq.min_w = rq.w / 3 + 1, rq.min_h = rq.h / 3 + 1;
      if (r % 6 == 2) rq.min_w = rq.w / 5 + 1, rq.min_h = rq.h / 7 + 1, rq.scales = RILL__IMG_SCALES_ALL;
      rill__img_out_t o1, o2, o3;
      uint8_t* want = plain_region(&b, rq, &o1);
      /* later epochs: the file verified, the marks kept from earlier regions */
      rill__img_request_t later = rq;
      later.tail_verified = 1, later.marks = m;
      uint8_t* got = decode_ok(&b, later, &o2);
      cr_assert(o1.w == o2.w && o1.h == o2.h && memcmp(want, got, out_bytes(&o1)) == 0,
                "case %zu region (%d,%d) %dx%d at %d/%d: the seek's pixels differ", k, rq.x, rq.y, rq.w, rq.h,
                o1.scale_num, o1.scale_denom);
      /* the first epoch: new marks, the file checked to its end */
      rill__jpeg_marks_t* fresh = NULL;
      rill__img_request_t first = rq;
      first.marks_out = &fresh;
      first.col_marks = r % 2 ? RILL__JPEG_COL_MARKS_MAX : 0; /* a walk through the file, or to the mark */
      uint8_t* got0 = decode_ok(&b, first, &o3);
      cr_assert_not_null(fresh);
      cr_assert(memcmp(want, got0, out_bytes(&o1)) == 0, "case %zu region (%d,%d) %dx%d: first-epoch seek differs", k,
                rq.x, rq.y, rq.w, rq.h);
      /* did the decode start at a mark? (the same choice rill__jpeg_seek makes) */
      uint8_t* head = NULL;
      size_t cap = 0;
      rill__jpeg_seek_t sk;
      rill__img_info_t info = {RILL__IMG_JPEG, W, H, ch};
      rill__img_geom_t g;
      RT_OK(rill__img_geometry(&info, &rq, &g, &(rill_error_t){0}), (rill_error_t){0});
      if (rq.y > 0 && rill__jpeg_seek(m, b.p, b.n, g.y, g.num, g.denom, &head, &cap, &sk) == 1) {
        seeks++;
        cr_assert_gt(sk.head, 0);
        cr_assert(sk.rest > 0 && sk.rest <= b.n);
        cr_assert_eq(sk.drop % 8, 0, "whole MCU rows are dropped");
      }
      rill__free(head);
      rill__free(fresh);
      free(want), free(got), free(got0);
    }
    cr_assert_gt(seeks, 8, "case %zu: only %d of 40 regions started at a mark", k, seeks);
    cr_assert_gt(rill__jpeg_marks_known(m), 0);
    rill__free(m);
    free(b.p), free(px);
  }
}

/* A cut (the MCUs around a region, each row behind a pad MCU) decodes to the pixels of a
 * decode from the start, for every sampling, size, scale, channel count and region, with the
 * standard Huffman tables and with tables made for the image (which lack some DC codes a pad
 * may need: then no cut, and the seek serves). */
Test(jpeg_marks, cut_decodes_the_same_pixels) {
  struct {
    int w, h, gray, hs, vs, q, opt;
  } cases[] = {{173, 131, 0, 1, 1, 95, 0}, {173, 131, 0, 2, 2, 75, 1}, {301, 263, 0, 2, 1, 90, 0},
               {96, 300, 0, 1, 2, 85, 1},  {200, 150, 1, 0, 0, 100, 0}, {500, 375, 0, 2, 2, 92, 0},
               {257, 513, 0, 2, 2, 60, 1}, {64, 64, 0, 2, 2, 100, 0},   {500, 375, 0, 2, 2, 80, 1},
               {33, 700, 0, 2, 2, 90, 0}};
  unsigned rng = 11;
  int all_cuts = 0;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int W = cases[k].w, H = cases[k].h, ch = cases[k].gray ? 1 : 3;
    uint8_t* px = textured_pixels(W, H, ch, (unsigned)k + 5);
    buf_t b = enc_jpeg(px, W, H, (jpeg_spec_t){.in = ch == 1 ? JCS_GRAYSCALE : JCS_RGB, .quality = cases[k].q,
                                               .hs = cases[k].hs, .vs = cases[k].vs, .optimize = cases[k].opt});
    /* a mark at every MCU, and (less room) every few MCUs of a row: the cut then starts and
     * ends at the marks around the region's MCUs */
    int my = (H + 8 * (cases[k].vs ? cases[k].vs : 1) - 1) / (8 * (cases[k].vs ? cases[k].vs : 1)); /* MCU rows */
    const int budgets[] = {RILL__JPEG_COL_MARKS_MAX, 4 * my + 1, 2 * my + 1}; /* 1, about mx/4, mx/2 MCUs apart */
    for (int bi = 0; bi < 3; bi++) {
    rill__jpeg_marks_t* m = rill__jpeg_marks_new(b.p, b.n, budgets[bi]);
    cr_assert_not_null(m, "case %zu: no marks for a baseline file", k);
    cr_assert_eq(rill__jpeg_marks_walk_all(m, b.p, b.n), 2, "case %zu: the walk through the file failed", k);
    cr_assert(rill__jpeg_marks_have_columns(m));
    cr_assert_eq(rill__jpeg_marks_walk_all(m, b.p, b.n), 0, "a second walk of marks already found");
    cr_assert_leq(rill__jpeg_marks_bytes(m), rill__jpeg_marks_bytes(NULL) + 48 + (16 + (size_t)budgets[bi]) * 12,
                  "case %zu: %zu bytes of marks for room for %d column marks", k, rill__jpeg_marks_bytes(m), budgets[bi]);
    int cuts = 0;
    for (int r = 0; r < 30; r++) {
      rng = rng * 1103515245u + 12345u;
      rill__img_request_t rq = {.channels = (r % 5 == 4) ? 1 : 3};
      rq.h = 1 + (int)((rng >> 8) % (unsigned)H), rq.w = 1 + (int)((rng >> 4) % (unsigned)W);
      if (r % 4 == 0) rq.w = 1 + rq.w / 3; /* narrow regions: most of each row left out */
      rq.y = (int)((rng >> 12) % (unsigned)(H - rq.h + 1)), rq.x = (int)((rng >> 3) % (unsigned)(W - rq.w + 1));
      if (r % 10 == 7) rq.x = W - rq.w; /* at the right edge */
      if (r % 10 == 8) rq.y = H - rq.h; /* at the bottom */
      if (r % 10 == 9) rq.x = 1;        /* one column from the left edge */
      if (r % 3 == 1) rq.min_w = rq.w / 3 + 1, rq.min_h = rq.h / 3 + 1;
      if (r % 6 == 2) rq.min_w = rq.w / 5 + 1, rq.min_h = rq.h / 7 + 1, rq.scales = RILL__IMG_SCALES_ALL;
      rill__img_out_t o1, o2;
      uint8_t* want = plain_region(&b, rq, &o1);
      rill__img_request_t later = rq;
      later.tail_verified = 1, later.marks = m;
      uint8_t* got = decode_ok(&b, later, &o2);
      cr_assert(o1.w == o2.w && o1.h == o2.h && o1.x == o2.x && memcmp(want, got, out_bytes(&o1)) == 0,
                "case %zu region (%d,%d) %dx%d at %d/%d: the cut's pixels differ", k, rq.x, rq.y, rq.w, rq.h,
                o1.scale_num, o1.scale_denom);
      /* was it a cut? (the same call the decode makes) */
      rill__img_info_t info = {RILL__IMG_JPEG, W, H, ch};
      rill__img_geom_t g;
      RT_OK(rill__img_geometry(&info, &rq, &g, &(rill_error_t){0}), (rill_error_t){0});
      uint8_t* head = NULL;
      size_t cap = 0;
      rill__jpeg_cut_t ct;
      int rc = rill__jpeg_cut(m, b.p, b.n, g.x, g.y, g.w, g.h, g.sw, g.sh, g.num, g.denom, &head, &cap, &ct);
      cr_assert(rc == 0 || rc == 1, "case %zu: cut rc %d", k, rc);
      /* with a mark at every MCU, a region away from the left edge and narrower than half the
       * image is always cut, whatever the tables (optimized ones lack most DC codes: the pad
       * then takes a few MCUs) */
      if (bi == 0 && g.num == g.denom && g.x > 0 && 2 * g.w < g.sw)
        cr_assert_eq(rc, 1, "case %zu region (%d,%d) %dx%d: not cut", k, rq.x, rq.y, rq.w, rq.h);
      if (rc == 1) {
        cuts++;
        cr_assert(ct.len > 0 && ct.len <= cap);
        cr_assert(ct.width <= W + 4 * 16 && ct.height <= H, "case %zu: a cut of %dx%d", k, ct.width, ct.height);
        cr_assert_eq(ct.left % 8, 0, "whole MCU columns are left out");
        cr_assert_eq(ct.top % 8, 0, "whole MCU rows are left out");
        cr_assert(head[0] == 0xff && head[1] == 0xd8 && head[ct.len - 2] == 0xff && head[ct.len - 1] == 0xd9);
      }
      if (g.x == 0) cr_assert_eq(rc, 0, "a region at the left edge has no pad column");
      rill__free(head);
      free(want), free(got);
    }
    if (W >= 96) cr_assert_gt(cuts, 5, "case %zu, %d column marks: only %d of 30 regions cut", k, budgets[bi], cuts);
    all_cuts += cuts;
    rill__free(m);
    }
    free(b.p), free(px);
  }
  cr_assert_gt(all_cuts, 400);
}

/* A smooth image's optimized tables code only the small DC differences its neighbouring blocks
 * have, while a cut's pad must set the difference between the end of one row's span and the
 * start of the next (far apart on a gradient): the pad then takes a few MCUs, each coding a
 * step the tables have. Every region away from the left edge is cut, to the same pixels. */
Test(jpeg_marks, cut_pads_take_steps_where_the_tables_lack_codes) {
  int W = 640, H = 240;
  uint8_t* px = malloc((size_t)W * H * 3);
  for (int y = 0; y < H; y++) /* flat on the left (differences of 0), then a gradient */
    for (int x = 0; x < W; x++) {
      uint8_t* q = px + ((size_t)y * W + x) * 3;
      int g = x < W / 4 ? 0 : (x - W / 4) * 240 / W;
      q[0] = (uint8_t)(60 + g), q[1] = (uint8_t)(200 - g / 2), q[2] = (uint8_t)(90 + (g + y) / 3);
    }
  buf_t b = enc_jpeg(px, W, H, (jpeg_spec_t){.in = JCS_RGB, .quality = 90, .hs = 2, .vs = 2, .optimize = 1});
  rill__jpeg_marks_t* m = rill__jpeg_marks_new(b.p, b.n, RILL__JPEG_COL_MARKS_MAX);
  cr_assert_eq(rill__jpeg_marks_walk_all(m, b.p, b.n), 2);
  int wide_pads = 0;
  for (int r = 0; r < 24; r++) {
    rill__img_request_t rq = {.channels = 3, .x = 17 + r * 23, .y = 5 + r * 7, .w = 40 + r * 3, .h = 30 + r};
    if (rq.x + rq.w > W) rq.x = W - rq.w;
    rill__img_out_t o1, o2;
    uint8_t* want = plain_region(&b, rq, &o1);
    rill__img_request_t later = rq;
    later.tail_verified = 1, later.marks = m;
    uint8_t* got = decode_ok(&b, later, &o2);
    cr_assert(memcmp(want, got, out_bytes(&o1)) == 0, "region %d: the cut's pixels differ", r);
    uint8_t* head = NULL;
    size_t cap = 0;
    rill__jpeg_cut_t ct;
    cr_assert_eq(rill__jpeg_cut(m, b.p, b.n, rq.x, rq.y, rq.w, rq.h, W, H, 1, 1, &head, &cap, &ct), 1, "region %d: not cut", r);
    int pad = (rq.x - 1) / 16 - ct.left / 16; /* MCUs left of the span */
    cr_assert(pad >= 1 && pad <= 8, "region %d: a pad of %d MCUs", r, pad);
    wide_pads += pad > 1;
    rill__free(head), free(want), free(got);
  }
  cr_assert_gt(wide_pads, 0, "no pad took more than one MCU: the tables code every difference");
  rill__free(m);
  free(b.p), free(px);
}

/* The walk keeps the decoding tables of the Huffman tables it met last, per thread (8 of
 * them): two files whose tables have the same code lengths but other symbols each get their
 * own, and a walk that finds some of its tables kept does not lose them to the others it
 * derives (standard tables; the same with the luma AC table's symbols swapped, which finds 3
 * of its 4 kept and derives the fourth right after a file with 4 tables of its own). */
Test(jpeg_marks, walk_tables_are_told_apart_by_their_symbols) {
  uint8_t* px = textured_pixels(240, 176, 3, 15);
  buf_t f[3];
  for (int k = 0; k < 3; k++)
    f[k] = enc_jpeg(px, 240, 176, (jpeg_spec_t){.in = JCS_RGB, .quality = 90, .hs = 2, .vs = 2, .swap_ac = k == 1,
                                                .optimize = k == 2});
  cr_assert(f[0].n != f[1].n || memcmp(f[0].p, f[1].p, f[0].n) != 0);
  rill__img_request_t rq = {.channels = 3, .x = 70, .y = 50, .w = 90, .h = 80};
  static const int order[] = {0, 2, 1};
  for (int round = 0; round < 3; round++)
    for (int i = 0; i < 3; i++) {
      int k = order[i];
      rill__jpeg_marks_t* m = rill__jpeg_marks_new(f[k].p, f[k].n, RILL__JPEG_COL_MARKS_MAX);
      cr_assert_eq(rill__jpeg_marks_walk_all(m, f[k].p, f[k].n), 2, "file %d, round %d: the walk failed", k, round);
      rill__img_out_t o1, o2;
      uint8_t* want = plain_region(&f[k], rq, &o1);
      rill__img_request_t later = rq;
      later.tail_verified = 1, later.marks = m;
      uint8_t* got = decode_ok(&f[k], later, &o2);
      cr_assert(memcmp(want, got, out_bytes(&o1)) == 0, "file %d, round %d: the cut's pixels differ", k, round);
      free(want), free(got);
      rill__free(m);
    }
  free(f[0].p), free(f[1].p), free(f[2].p), free(px);
}

/* The room for column marks: what a file may hold within a memory limit, and none when it
 * would not hold a mark per row (the walk then leaves the row marks to seeks, as before). */
Test(jpeg_marks, column_marks_within_their_room) {
  cr_assert_eq(rill__jpeg_col_marks_within(0), 0);
  cr_assert_eq(rill__jpeg_col_marks_within(200), 0, "not even the row marks fit");
  cr_assert_eq(rill__jpeg_col_marks_within((int64_t)1 << 30), RILL__JPEG_COL_MARKS_MAX);
  int k = rill__jpeg_col_marks_within(64 << 10);
  cr_assert(k > 4000 && k <= RILL__JPEG_COL_MARKS_MAX, "%d", k);
  cr_assert_eq(rill__jpeg_col_marks_within(3000) + 1, rill__jpeg_col_marks_within(3012), "12 bytes a mark");
  rill__img_memo_t memo;
  RT_OK(rill__img_memo_init(&memo, 1000), (rill_error_t){0});
  cr_assert_eq(rill__img_memo_col_marks(&memo), rill__jpeg_col_marks_within(RILL__IMG_MARKS_MAX_BYTES / 1000));
  memo.marks_max = 1000 * 3012;
  cr_assert_eq(rill__img_memo_col_marks(&memo), rill__jpeg_col_marks_within(3012), "the limit shared by the files");
  memo.marks_max = 0;
  cr_assert_eq(rill__img_memo_col_marks(&memo), 0);
  rill__img_memo_free(&memo);

  uint8_t* px = textured_pixels(500, 375, 3, 14); /* 4:2:0: 32 x 24 MCUs */
  buf_t b = enc_jpeg(px, 500, 375, (jpeg_spec_t){.in = JCS_RGB, .quality = 85, .hs = 2, .vs = 2});
  rill__jpeg_marks_t* rows = rill__jpeg_marks_new(b.p, b.n, 0);
  size_t row_bytes = rill__jpeg_marks_bytes(rows);
  /* a mark per row, two per row + the end need 49; every 8 MCUs 97; one per MCU 769 */
  int room[] = {24, 48, 49, 100, 769, 5000};
  size_t want[] = {0, 0, 49, 97, 769, 769};
  int left[] = {0, 0, -16, -16, 16, 16}; /* the region's MCUs: columns 2 .. 8 (x 39 .. 140) */
  for (int i = 0; i < 6; i++) {
    rill__jpeg_marks_t* m = rill__jpeg_marks_new(b.p, b.n, room[i]);
    cr_assert_eq(rill__jpeg_marks_bytes(m), row_bytes + want[i] * 12, "room %d: %zu bytes", room[i],
                 rill__jpeg_marks_bytes(m));
    cr_assert_eq(rill__jpeg_marks_walk_all(m, b.p, b.n), want[i] ? 2 : 0, "room %d", room[i]);
    cr_assert_eq(rill__jpeg_marks_have_columns(m), want[i] > 0);
    uint8_t* head = NULL;
    size_t cap = 0;
    rill__jpeg_cut_t ct;
    int rc = rill__jpeg_cut(m, b.p, b.n, 40, 100, 100, 90, 500, 375, 1, 1, &head, &cap, &ct);
    cr_assert_eq(rc, want[i] ? 1 : 0, "room %d: cut %d", room[i], rc);
    if (rc == 1) cr_assert_eq(ct.left, left[i], "room %d: left %d", room[i], ct.left);
    rill__free(head);
    rill__free(m);
  }
  rill__free(rows);
  free(b.p), free(px);
}

/* Marks are walked to as regions need them, never past the one a region needs. */
Test(jpeg_marks, found_as_needed) {
  int W = 500, H = 375; /* 4:2:0: 24 MCU rows of 16 rows, a mark every 2 MCU rows (32 rows) */
  uint8_t* px = textured_pixels(W, H, 3, 3);
  buf_t b = enc_jpeg(px, W, H, (jpeg_spec_t){.in = JCS_RGB, .quality = 90, .hs = 2, .vs = 2});
  rill__jpeg_marks_t* m = rill__jpeg_marks_new(b.p, b.n, RILL__JPEG_COL_MARKS_MAX);
  cr_assert_not_null(m);
  struct {
    int y, known;
  } steps[] = {{10, 0}, {32, 0}, {33, 1}, {100, 3}, {50, 3}, {300, 9}, {374, 11}, {0, 11}, {200, 11}};
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    rill__img_request_t rq = {.channels = 3, .x = 17, .y = steps[i].y, .w = 100, .h = 1};
    rill__img_out_t o1, o2;
    uint8_t* want = plain_region(&b, rq, &o1);
    rq.tail_verified = 1, rq.marks = m;
    uint8_t* got = decode_ok(&b, rq, &o2);
    cr_assert(memcmp(want, got, out_bytes(&o1)) == 0, "row %d differs", steps[i].y);
    cr_assert_eq(rill__jpeg_marks_known(m), steps[i].known, "after a region at row %d: %d marks known, expected %d",
                 steps[i].y, rill__jpeg_marks_known(m), steps[i].known);
    free(want), free(got);
  }
  rill__free(m);
  free(b.p), free(px);
}

/* Files the walk cannot follow as libjpeg does have no marks and decode as before. */
Test(jpeg_marks, files_without_marks) {
  int W = 120, H = 90;
  uint8_t* px = textured_pixels(W, H, 3, 5);
  uint8_t* cmyk = malloc((size_t)W * H * 4);
  for (int i = 0; i < W * H; i++) memcpy(cmyk + i * 4, px + i * 3, 3), cmyk[i * 4 + 3] = 90;
  buf_t files[] = {
      enc_jpeg(px, W, H, (jpeg_spec_t){.in = JCS_RGB, .progressive = 1}),
      enc_jpeg(px, W, H, (jpeg_spec_t){.in = JCS_RGB, .hs = 2, .vs = 2, .restart_rows = 1}),
      enc_jpeg(px, W, 8, (jpeg_spec_t){.in = JCS_RGB}), /* one MCU row: nothing above a row */
      enc_jpeg(cmyk, W, H, (jpeg_spec_t){.in = JCS_CMYK}),
  };
  const char* what[] = {"progressive", "restart intervals", "one MCU row", "CMYK"};
  for (size_t k = 0; k < sizeof files / sizeof files[0]; k++) {
    cr_assert_null(rill__jpeg_marks_new(files[k].p, files[k].n, RILL__JPEG_COL_MARKS_MAX), "%s: marks", what[k]);
    int h = k == 2 ? 8 : H;
    rill__img_request_t rq = {.channels = 3, .x = 10, .y = h / 2, .w = 50, .h = h / 2};
    rill__jpeg_marks_t* out = (rill__jpeg_marks_t*)&rq; /* overwritten with NULL */
    rq.marks_out = &out;
    rill__img_out_t o;
    free(decode_ok(&files[k], rq, &o));
    cr_assert_null(out, "%s: marks returned", what[k]);
    free(files[k].p);
  }
  /* not JPEG data, or a header cut short */
  cr_assert_null(rill__jpeg_marks_new("\xff\xd8\xff\xe0", 4, RILL__JPEG_COL_MARKS_MAX));
  cr_assert_null(rill__jpeg_marks_new("GIF89a..", 8, RILL__JPEG_COL_MARKS_MAX));
  buf_t b = enc_jpeg(px, W, H, (jpeg_spec_t){.in = JCS_RGB});
  for (size_t cut = 0; cut < 300 && cut < b.n; cut += 7) {
    rill__jpeg_marks_t* m = rill__jpeg_marks_new(b.p, cut, RILL__JPEG_COL_MARKS_MAX);
    cr_assert_null(m, "a file cut at byte %zu has marks", cut);
  }
  free(b.p), free(px), free(cmyk);
}

/* The verified-file table owns the marks it is given: kept once per file, freed when the file
 * is there already or when they would pass the table's limit (ASan checks that nothing leaks
 * and nothing is freed twice). */
Test(jpeg_marks, verified_table_keeps_marks_within_its_limit) {
  uint8_t* px = textured_pixels(160, 120, 3, 11);
  buf_t b = enc_jpeg(px, 160, 120, (jpeg_spec_t){.in = JCS_RGB, .hs = 2, .vs = 2});
  rill__img_memo_t memo;
  RT_OK(rill__img_memo_init(&memo, 10), (rill_error_t){0});
  rill__jpeg_marks_t* one = rill__jpeg_marks_new(b.p, b.n, 0); /* row marks only */
  cr_assert_not_null(one);
  size_t each = rill__jpeg_marks_bytes(one);
  cr_assert_gt(each, 0);
  memo.marks_max = (int64_t)each * 2; /* room for two sets */
  cr_assert_eq(rill__img_memo_find(&memo, 11), -1);
  rill__img_memo_add(&memo, 11, one);
  int64_t slot = rill__img_memo_find(&memo, 11);
  cr_assert_geq(slot, 0);
  cr_assert_eq(rill__img_memo_marks(&memo, slot), one, "the marks given are kept");
  rill__img_memo_add(&memo, 11, rill__jpeg_marks_new(b.p, b.n, 0)); /* the same file again: freed */
  cr_assert_eq(rill__img_memo_marks(&memo, rill__img_memo_find(&memo, 11)), one);
  rill__img_memo_add(&memo, 22, rill__jpeg_marks_new(b.p, b.n, 0));
  cr_assert_not_null(rill__img_memo_marks(&memo, rill__img_memo_find(&memo, 22)));
  rill__img_memo_add(&memo, 33, rill__jpeg_marks_new(b.p, b.n, 0)); /* past the limit: no marks */
  int64_t s3 = rill__img_memo_find(&memo, 33);
  cr_assert_geq(s3, 0, "the file is verified all the same");
  cr_assert_null(rill__img_memo_marks(&memo, s3));
  cr_assert_eq(atomic_load(&memo.marks_bytes), (int64_t)each * 2);
  rill__img_memo_add(&memo, 44, NULL); /* a file without marks */
  cr_assert_null(rill__img_memo_marks(&memo, rill__img_memo_find(&memo, 44)));
  rill__img_memo_free(&memo);
  free(b.p), free(px);
}

/* The first decode's walk through the file stands for libjpeg's check of the rows below the
 * region only when the data ends right at the end marker: junk before the marker, a missing
 * end or damage leave the check to libjpeg, with its outcome. */
Test(jpeg_marks, walk_checks_the_end_of_the_data) {
  uint8_t* px = textured_pixels(200, 160, 3, 13);
  buf_t b = enc_jpeg(px, 200, 160, (jpeg_spec_t){.in = JCS_RGB, .quality = 85, .hs = 2, .vs = 2});
  cr_assert(b.p[b.n - 2] == 0xff && b.p[b.n - 1] == 0xd9);
  rill__img_request_t rq = {.channels = 3, .x = 50, .y = 20, .w = 80, .h = 60};
  rill__img_out_t o;
  uint8_t* want = plain_region(&b, rq, &o);
  struct {
    const char* what;
    const char* insert; /* before the end marker */
    size_t len, cut;    /* bytes inserted; bytes cut from the end */
    int walk, ok;       /* walk_all's result; whether the first decode succeeds */
  } cases[] = {{"intact", "", 0, 0, 2, 1},
               {"30 junk bytes before the end marker", "junk junk junk junk junk junk", 30, 0, 1, 0},
               {"a comment segment before the end marker", "\xff\xfe\x00\x05" "abc", 7, 0, 1, 1},
               {"no end marker", "", 0, 2, 1, 0},
               {"the last 40 bytes missing", "", 0, 40, 0, 0}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    buf_t f = {malloc(b.n + cases[k].len), 0};
    memcpy(f.p, b.p, b.n - 2);
    memcpy(f.p + b.n - 2, cases[k].insert, cases[k].len);
    memcpy(f.p + b.n - 2 + cases[k].len, "\xff\xd9", 2);
    f.n = b.n + cases[k].len - cases[k].cut;
    rill__jpeg_marks_t* m = rill__jpeg_marks_new(f.p, f.n, RILL__JPEG_COL_MARKS_MAX);
    cr_assert_not_null(m, "%s", cases[k].what);
    cr_assert_eq(rill__jpeg_marks_walk_all(m, f.p, f.n), cases[k].walk, "%s", cases[k].what);
    rill__free(m);
    for (int marks = 0; marks < 2; marks++) { /* the first decode, without marks and with */
      rill__jpeg_marks_t* out = NULL;
      rill__img_request_t first = rq;
      first.marks_out = marks ? &out : NULL;
      first.col_marks = RILL__JPEG_COL_MARKS_MAX;
      rill_error_t err = {0};
      int rc;
      uint8_t* got = decode(&f, first, &o, &err, &rc);
      if (cases[k].ok) {
        cr_assert_not_null(got, "%s (marks %d): %s", cases[k].what, marks, err.message);
        cr_assert(memcmp(want, got, out_bytes(&o)) == 0, "%s (marks %d): pixels differ", cases[k].what, marks);
      } else {
        cr_assert_null(got, "%s (marks %d) decoded", cases[k].what, marks);
        cr_assert_eq(rc, RILL_EFORMAT, "%s: %s", cases[k].what, err.message);
        cr_assert(strstr(err.message, "JPEG"), "%s", err.message);
      }
      free(got);
      rill__free(out);
    }
    free(f.p);
  }
  free(want), free(b.p), free(px);
}

/* A Huffman code the tables lack (sixteen 1-bits, which no table codes) in the middle of the
 * data: libjpeg-turbo's fast decoder takes it for a zero without a warning; rill's walk and
 * libjpeg's checked path (the data given in pieces) do not. With the column marks (one walk
 * through the file) the first decode fails naming the MCU wherever its crop lies (above the
 * damage, around it, below it); without them, the walk to the crop's rows or libjpeg reading
 * the rest names the MCU row; so does a whole-image decode, with or without marks. */
Test(jpeg_marks, damaged_huffman_data_fails_whatever_the_crop) {
  uint8_t* px = textured_pixels(320, 240, 3, 29);
  buf_t b = enc_jpeg(px, 320, 240, (jpeg_spec_t){.in = JCS_RGB, .quality = 90, .hs = 2, .vs = 2});
  size_t sos = 0;
  for (size_t i = 2; i + 1 < b.n && !sos; i++)
    if (b.p[i] == 0xff && b.p[i + 1] == 0xda) sos = i + 2 + ((size_t)b.p[i + 2] << 8 | b.p[i + 3]);
  cr_assert(sos > 0);
  size_t at = sos + (b.n - sos) / 2; /* about MCU row 7 of 15 */
  cr_assert_gt(b.n - at, 6 * 512 + 24, "libjpeg's fast path must be in use at the damage");
  while (b.p[at - 1] == 0xff || b.p[at] == 0xff) at++;
  for (int k = 0; k < 12; k++) b.p[at + 2 * k] = 0xff, b.p[at + 2 * k + 1] = 0x00; /* 12 data bytes of ones */
  int bad_row = -1, bad_col = -1;
  rill__jpeg_marks_t* m = rill__jpeg_marks_new(b.p, b.n, RILL__JPEG_COL_MARKS_MAX);
  cr_assert_eq(rill__jpeg_marks_walk_all(m, b.p, b.n), -1);
  cr_assert(rill__jpeg_marks_damaged(m, &bad_row, &bad_col));
  cr_assert(bad_row >= 4 && bad_row <= 11 && bad_col >= 0 && bad_col < 20, "MCU (%d, %d)", bad_row, bad_col);
  rill__free(m);
  char walked[96], checked[96];
  snprintf(walked, sizeof walked, "corrupt JPEG data (MCU row %d, column %d: a Huffman code", bad_row, bad_col);
  snprintf(checked, sizeof checked, "corrupt JPEG data (Corrupt JPEG data: bad Huffman code, at MCU row %d)",
           bad_row);
  const int ys[] = {0, 100, 200, -1}; /* the region's top: above the damage, around it, below it; whole image */
  for (int way = 0; way < 3; way++) /* marks with columns, marks without, no marks (a one-off decode) */
    for (size_t i = 0; i < sizeof ys / sizeof *ys; i++) {
      rill__jpeg_marks_t* out = NULL;
      rill__img_request_t rq = {.channels = 3, .x = 40, .y = ys[i], .w = 100, .h = 40,
                                .marks_out = way < 2 ? &out : NULL, .col_marks = way == 0 ? RILL__JPEG_COL_MARKS_MAX : 0};
      if (ys[i] < 0) rq.x = rq.y = rq.w = rq.h = 0;
      rill__img_out_t o;
      rill_error_t err = {0};
      int rc;
      uint8_t* got = decode(&b, rq, &o, &err, &rc);
      cr_assert_null(got, "way %d, y %d: decoded", way, ys[i]);
      cr_assert_eq(rc, RILL_EFORMAT);
      /* a walk met the damage: through the file (with columns, for a region) or to the crop */
      int by_walk = ys[i] >= 0 && way < 2 && (way == 0 || ys[i] > 100);
      cr_assert(strstr(err.message, by_walk ? walked : checked), "way %d, y %d: %s", way, ys[i], err.message);
      free(got);
      rill__free(out);
    }
  free(b.p), free(px);
}

/* Fill bytes (0xFF) are allowed before markers only: libjpeg-turbo's fast path takes 0xFF 0xFF
 * 0x00 in entropy-coded data for a marker (and leaves coefficients it wrote in the block), its
 * checked path for fill and a stuffed 0xFF; the two decode it differently without a warning,
 * so the first visit fails such a file, whatever the region. Fill before a real marker (the
 * end marker here) stays accepted. */
Test(jpeg, fill_bytes_before_a_stuffed_zero_fail) {
  uint8_t* px = textured_pixels(160, 120, 3, 33);
  buf_t b = enc_jpeg(px, 160, 120, (jpeg_spec_t){.in = JCS_RGB, .quality = 95});
  size_t sos = 0, stuffed = 0;
  for (size_t i = 2; i + 1 < b.n && !sos; i++)
    if (b.p[i] == 0xff && b.p[i + 1] == 0xda) sos = i + 2 + ((size_t)b.p[i + 2] << 8 | b.p[i + 3]);
  for (size_t i = sos + (b.n - sos) / 2; i + 1 < b.n && !stuffed; i++)
    if (b.p[i] == 0xff && b.p[i + 1] == 0x00) stuffed = i;
  cr_assert(sos > 0 && stuffed > 0, "no stuffed zero in the second half of the data");
  buf_t f = {malloc(b.n + 1), b.n + 1}; /* one more 0xFF before the stuffed pair */
  memcpy(f.p, b.p, stuffed);
  f.p[stuffed] = 0xff;
  memcpy(f.p + stuffed + 1, b.p + stuffed, b.n - stuffed);
  char want[96];
  snprintf(want, sizeof want, "corrupt JPEG data (0xFF fill bytes before a stuffed zero at byte %zu)", stuffed);
  rill__img_request_t whole = {.channels = 3}, crop = {.channels = 3, .x = 8, .y = 8, .w = 40, .h = 24};
  for (int way = 0; way < 4; way++) {
    rill__jpeg_marks_t* m = NULL;
    rill__img_request_t rq = way & 1 ? crop : whole;
    if (way & 2) rq.marks_out = &m, rq.col_marks = RILL__JPEG_COL_MARKS_MAX;
    rill__img_out_t o;
    rill_error_t err = {0};
    int rc;
    uint8_t* got = decode(&f, rq, &o, &err, &rc);
    cr_assert_null(got, "way %d: decoded", way);
    cr_assert_eq(rc, RILL_EFORMAT);
    cr_assert_str_eq(err.message, want);
    cr_assert_null(m);
  }
  buf_t end = {malloc(b.n + 2), b.n + 2}; /* two fill bytes before the end marker */
  memcpy(end.p, b.p, b.n - 2);
  memcpy(end.p + b.n - 2, "\xff\xff\xff\xd9", 4);
  rill__img_out_t o1, o2;
  uint8_t *x = decode_ok(&b, whole, &o1), *y = decode_ok(&end, whole, &o2);
  cr_assert(memcmp(x, y, (size_t)160 * 120 * 3) == 0);
  free(x), free(y), free(end.p), free(f.p), free(b.p), free(px);
}

/* The JPEG in b without its marker segments of type `marker` (DQT 0xDB, DHT 0xC4). */
static buf_t without_segments(const buf_t* b, uint8_t marker) {
  buf_t o = {malloc(b->n), 2};
  memcpy(o.p, b->p, 2);
  size_t i = 2;
  while (i + 4 <= b->n && b->p[i] == 0xff && b->p[i + 1] != 0xda) {
    size_t len = 2 + ((size_t)b->p[i + 2] << 8 | b->p[i + 3]);
    if (b->p[i + 1] != marker) memcpy(o.p + o.n, b->p + i, len), o.n += len;
    i += len;
  }
  memcpy(o.p + o.n, b->p + i, b->n - i);
  o.n += b->n - i;
  return o;
}

/* libjpeg keeps the tables of the streams a decompressor read before; a file decodes as if it
 * were the thread's first all the same. Without its quantization tables it fails, after a
 * file that had some too; without its Huffman tables (Motion-JPEG frames) it is decoded with
 * the standard ones, as by a new decompressor, also after a file whose own tables differ. */
Test(jpeg, tables_of_files_decoded_before_are_not_used) {
  uint8_t* px = textured_pixels(96, 64, 3, 31);
  buf_t std = enc_jpeg(px, 96, 64, (jpeg_spec_t){.in = JCS_RGB, .hs = 2, .vs = 2});
  buf_t opt = enc_jpeg(px, 96, 64, (jpeg_spec_t){.in = JCS_RGB, .hs = 2, .vs = 2, .quality = 60, .optimize = 1});
  buf_t no_dqt = without_segments(&std, 0xdb), no_dht = without_segments(&std, 0xc4);
  cr_assert(no_dqt.n < std.n && no_dht.n < std.n);
  rill__img_request_t whole = {.channels = 3}, crop = {.channels = 3, .x = 16, .y = 24, .w = 40, .h = 32};
  rill__img_out_t o;
  uint8_t* want = decode_ok(&std, whole, &o);
  for (int before = 0; before < 2; before++) /* after a file with the standard tables, or its own */
    for (int region = 0; region < 2; region++) {
      uint8_t* prior = decode_ok(before ? &opt : &std, whole, &o);
      free(prior);
      rill_error_t err = {0};
      int rc;
      uint8_t* got = decode(&no_dqt, region ? crop : whole, &o, &err, &rc);
      cr_assert_null(got, "before %d, region %d: decoded with another file's quantization tables", before, region);
      cr_assert_eq(rc, RILL_EFORMAT);
      cr_assert(strstr(err.message, "uantization table") && strstr(err.message, "not defined"), "%s", err.message);
      got = decode_ok(&no_dht, whole, &o);
      cr_assert(memcmp(got, want, (size_t)96 * 64 * 3) == 0, "before %d: not the standard tables' pixels", before);
      free(got);
    }
  free(want), free(std.p), free(opt.p), free(no_dqt.p), free(no_dht.p), free(px);
}

/* Column marks (a few KB a file) give way first: over the table's limit a file keeps its row
 * marks without them, and marks whose columns were never found keep no room for them. */
Test(jpeg_marks, verified_table_drops_column_marks_first) {
  uint8_t* px = textured_pixels(320, 240, 3, 12);
  buf_t b = enc_jpeg(px, 320, 240, (jpeg_spec_t){.in = JCS_RGB, .hs = 2, .vs = 2});
  rill__jpeg_marks_t* rows = rill__jpeg_marks_drop_columns(rill__jpeg_marks_new(b.p, b.n, RILL__JPEG_COL_MARKS_MAX));
  size_t without = rill__jpeg_marks_bytes(rows);
  rill__free(rows);
  rill__jpeg_marks_t* a = rill__jpeg_marks_new(b.p, b.n, RILL__JPEG_COL_MARKS_MAX);
  cr_assert_eq(rill__jpeg_marks_walk_all(a, b.p, b.n), 2);
  size_t with = rill__jpeg_marks_bytes(a);
  cr_assert_gt(with, 4 * without, "%zu bytes with the column marks, %zu without", with, without);
  rill__img_memo_t memo;
  RT_OK(rill__img_memo_init(&memo, 10), (rill_error_t){0});
  memo.marks_max = (int64_t)(with + without);
  rill__img_memo_add(&memo, 1, a);
  const rill__jpeg_marks_t* kept = rill__img_memo_marks(&memo, rill__img_memo_find(&memo, 1));
  cr_assert_eq(kept, a);
  cr_assert(rill__jpeg_marks_have_columns(kept), "within the limit: kept with its column marks");
  rill__jpeg_marks_t* c = rill__jpeg_marks_new(b.p, b.n, RILL__JPEG_COL_MARKS_MAX);
  cr_assert_eq(rill__jpeg_marks_walk_all(c, b.p, b.n), 2);
  rill__img_memo_add(&memo, 2, c);
  kept = rill__img_memo_marks(&memo, rill__img_memo_find(&memo, 2));
  cr_assert_not_null(kept, "over the limit with columns: the row marks still fit");
  cr_assert(!rill__jpeg_marks_have_columns(kept));
  cr_assert_eq(rill__jpeg_marks_bytes(kept), without);
  cr_assert_eq(atomic_load(&memo.marks_bytes), (int64_t)(with + without));
  rill__img_memo_add(&memo, 3, rill__jpeg_marks_new(b.p, b.n, RILL__JPEG_COL_MARKS_MAX)); /* columns never found, and full */
  cr_assert_null(rill__img_memo_marks(&memo, rill__img_memo_find(&memo, 3)));
  cr_assert_eq(atomic_load(&memo.marks_bytes), (int64_t)(with + without));
  /* the marks kept without columns still seek: a region below the top decodes as from the start */
  rill__img_request_t rq = {.channels = 3, .x = 40, .y = 150, .w = 100, .h = 60};
  rill__img_out_t o1, o2;
  uint8_t* want = plain_region(&b, rq, &o1);
  rq.tail_verified = 1, rq.marks = (rill__jpeg_marks_t*)kept;
  uint8_t* got = decode_ok(&b, rq, &o2);
  cr_assert(memcmp(want, got, out_bytes(&o1)) == 0);
  free(want), free(got);
  rill__img_memo_free(&memo);
  free(b.p), free(px);
}

/* A damaged file fails in the first epoch whatever the region, with marks as without: damage
 * above the region (where the walk reads instead of libjpeg) and below it. */
Test(jpeg_marks, damage_fails_whatever_the_region) {
  int W = 256, H = 256;
  uint8_t* px = textured_pixels(W, H, 3, 9);
  buf_t b = enc_jpeg(px, W, H, (jpeg_spec_t){.in = JCS_RGB, .quality = 90, .hs = 2, .vs = 2});
  size_t sos = 0;
  for (size_t i = 2; i + 1 < b.n && !sos; i++)
    if (b.p[i] == 0xff && b.p[i + 1] == 0xda) sos = i + 2 + ((size_t)b.p[i + 2] << 8 | b.p[i + 3]);
  cr_assert_gt(sos, 0);
  double where[] = {0.1, 0.8}; /* into the top rows; into the bottom rows */
  for (int d = 0; d < 2; d++) {
    size_t at = sos + (size_t)((double)(b.n - 2 - sos) * where[d]);
    buf_t bad = {malloc(b.n + 64), b.n + 64};
    memcpy(bad.p, b.p, at);
    memset(bad.p + at, 0x3c, 64); /* junk bits: the entropy decoding goes astray from here */
    memcpy(bad.p + at + 64, b.p + at, b.n - at);
    rill__img_request_t rq = {.channels = 3, .x = 30, .y = 120, .w = 100, .h = 40};
    for (int marks = 0; marks < 3; marks++) { /* none; row marks; column marks too */
      rill__jpeg_marks_t* out = NULL;
      rq.marks_out = marks ? &out : NULL;
      rq.col_marks = marks == 2 ? RILL__JPEG_COL_MARKS_MAX : 0;
      rill_error_t err = {0};
      int rc;
      rill__img_out_t o;
      cr_assert_null(decode(&bad, rq, &o, &err, &rc), "damage at %.0f%% decoded (marks %d)", where[d] * 100, marks);
      cr_assert_eq(rc, RILL_EFORMAT, "damage at %.0f%%: %d %s", where[d] * 100, rc, err.message);
      cr_assert(strstr(err.message, "orrupt JPEG data"), "%s", err.message);
      rill__free(out);
    }
    free(bad.p);
  }
  free(b.p), free(px);
}

/* ---------------------------------------------------------------- progressive files, cut below the region */

/* The entropy-coded data of each scan of a JPEG: [start, end) offsets, 2 per scan. */
static int test_scans(const buf_t* b, size_t* at, int max) {
  int n = 0;
  size_t i = 2;
  while (i + 3 < b->n && n < max) {
    cr_assert_eq(b->p[i], 0xff, "marker expected at %zu", i);
    uint8_t m = b->p[i + 1];
    if (m == 0xd9) break;
    i += 2 + ((size_t)b->p[i + 2] << 8 | b->p[i + 3]);
    if (m != 0xda) continue;
    at[2 * n] = i;
    while (i + 1 < b->n && !(b->p[i] == 0xff && b->p[i + 1] != 0 && (b->p[i + 1] & 0xf8) != 0xd0)) i++;
    at[2 * n + 1] = i;
    n++;
  }
  return n;
}

/* The JPEG in b written again with arithmetic coding, one AC coefficient of its first chroma
 * component set to -3000: beyond what 8-bit samples give (and what baseline Huffman coding
 * can hold), as damaged data can decode to; libjpeg decodes it without a complaint. */
static buf_t with_wide_coefficient(const buf_t* b) {
  struct jpeg_decompress_struct d;
  struct jpeg_compress_struct c;
  struct jpeg_error_mgr e1, e2;
  d.err = jpeg_std_error(&e1);
  jpeg_create_decompress(&d);
  jpeg_mem_src(&d, b->p, (unsigned long)b->n);
  jpeg_read_header(&d, TRUE);
  jvirt_barray_ptr* coefs = jpeg_read_coefficients(&d);
  JBLOCKARRAY row = (*d.mem->access_virt_barray)((j_common_ptr)&d, coefs[1], 2, 1, TRUE);
  row[0][3][1] = -3000;
  c.err = jpeg_std_error(&e2);
  jpeg_create_compress(&c);
  unsigned char* out = NULL;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &out, &size);
  jpeg_copy_critical_parameters(&d, &c);
  c.arith_code = TRUE;
  jpeg_write_coefficients(&c, coefs);
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  jpeg_destroy_decompress(&d);
  buf_t o = {malloc(size), size};
  memcpy(o.p, out, size);
  free(out);
  return o;
}

/* The file's first `scans` scans and its end marker: a valid file whose progression stops
 * short of full precision (libjpeg then smooths the blocks, reading rows below each one). */
static buf_t first_scans(const buf_t* b, int scans) {
  size_t at[128];
  int n = test_scans(b, at, 64);
  cr_assert_gt(n, scans);
  size_t end = at[2 * (scans - 1) + 1];
  buf_t t = {malloc(end + 2), end + 2};
  memcpy(t.p, b->p, end);
  t.p[end] = 0xff, t.p[end + 1] = 0xd9;
  return t;
}

/* A region of a progressive file decoded with its bytes verified (each scan cut a few iMCU
 * rows below the region) equals the one decoded with the whole file read, for every sampling,
 * scale, channel count and region; for progressions stopped early (block smoothing) and with
 * restart intervals (no cut) too. */
Test(jpeg_progressive_cut, regions_equal_whole_reads) {
  struct {
    int w, h, gray, hs, vs, q, restart;
  } cases[] = {{173, 131, 0, 1, 1, 95, 0}, {301, 263, 0, 2, 2, 75, 0}, {301, 263, 0, 2, 1, 90, 0},
               {96, 300, 0, 1, 2, 85, 0},  {200, 150, 1, 0, 0, 100, 0}, {500, 375, 0, 2, 2, 92, 0},
               {257, 513, 0, 2, 2, 60, 0}, {64, 64, 0, 2, 2, 100, 0},  {300, 400, 0, 2, 2, 90, 2}};
  unsigned rng = 11;
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int W = cases[k].w, H = cases[k].h, ch = cases[k].gray ? 1 : 3;
    uint8_t* px = textured_pixels(W, H, ch, (unsigned)k + 5);
    buf_t whole = enc_jpeg(px, W, H, (jpeg_spec_t){.in = ch == 1 ? JCS_GRAYSCALE : JCS_RGB, .quality = cases[k].q,
                                                   .hs = cases[k].hs, .vs = cases[k].vs, .progressive = 1,
                                                   .restart_rows = cases[k].restart});
    /* every case whole; odd ones also stopped after 2 or 4 scans, even ones after 3 or 5 */
    for (int v = 0; v < 3; v++) {
    buf_t b = v == 0 ? whole : first_scans(&whole, 2 + (int)(k % 2 == 0) + 2 * (v - 1));
    for (int r = 0; r < 40; r++) {
      rng = rng * 1103515245u + 12345u;
      rill__img_request_t rq = {.channels = r % 5 == 4 ? 1 : r % 7 == 3 ? 4 : 3};
      rq.h = 1 + (int)((rng >> 8) % (unsigned)(r % 2 ? H : H / 3 + 1)), rq.w = 1 + (int)((rng >> 4) % (unsigned)W);
      rq.y = (int)((rng >> 12) % (unsigned)(H - rq.h + 1)), rq.x = (int)((rng >> 3) % (unsigned)(W - rq.w + 1));
      if (r % 3 == 1) rq.min_w = rq.w / 3 + 1, rq.min_h = rq.h / 3 + 1;
      if (r % 6 == 2) rq.min_w = rq.w / 5 + 1, rq.min_h = rq.h / 7 + 1, rq.scales = RILL__IMG_SCALES_ALL;
      rill__img_out_t o1, o2;
      uint8_t* want = decode_ok(&b, rq, &o1);
      rill__img_request_t cut = rq;
      cut.tail_verified = 1;
      uint8_t* got = decode_ok(&b, cut, &o2);
      cr_assert(o1.w == o2.w && o1.h == o2.h && memcmp(want, got, out_bytes(&o1)) == 0,
                "case %zu/%d region (%d,%d) %dx%d at %d/%d, %d channels: the cut decode differs", k, v, rq.x, rq.y,
                rq.w, rq.h, o1.scale_num, o1.scale_denom, rq.channels);
      free(want), free(got);
    }
    if (v) free(b.p);
    }
    free(whole.p), free(px);
  }
}

/* The rows below the cut are not read: junk written over the end of each scan's data fails
 * the decode that reads the whole file, and leaves a region at the top of the verified file
 * as it was. */
Test(jpeg_progressive_cut, rows_below_are_not_read) {
  int W = 320, H = 1600;
  uint8_t* px = textured_pixels(W, H, 3, 21);
  buf_t b = enc_jpeg(px, W, H, (jpeg_spec_t){.in = JCS_RGB, .quality = 90, .hs = 2, .vs = 2, .progressive = 1});
  size_t at[64];
  int n = test_scans(&b, at, 32);
  cr_assert_geq(n, 6, "%d scans", n);
  buf_t bad = {malloc(b.n), b.n};
  memcpy(bad.p, b.p, b.n);
  int junked = 0;
  for (int k = 0; k < n; k++) {
    size_t len = at[2 * k + 1] - at[2 * k];
    if (len < 8192) continue;
    memset(bad.p + at[2 * k + 1] - len / 2, 0x3c, len / 2); /* the scan's second half: rows 800 and on */
    junked++;
  }
  cr_assert_geq(junked, 3);
  rill__img_request_t rq = {.channels = 3, .x = 40, .y = 16, .w = 200, .h = 200};
  rill__img_out_t o1, o2;
  rill_error_t err = {0};
  int rc;
  cr_assert_null(decode(&bad, rq, &o1, &err, &rc), "junk in the scans decoded");
  cr_assert_eq(rc, RILL_EFORMAT, "%d %s", rc, err.message);
  cr_assert(strstr(err.message, "orrupt JPEG data"), "%s", err.message);
  uint8_t* want = decode_ok(&b, rq, &o1);
  rq.tail_verified = 1;
  uint8_t* got = decode_ok(&bad, rq, &o2);
  cr_assert(memcmp(want, got, out_bytes(&o1)) == 0, "the region above the junk differs");
  /* a region reaching into the junk reads it */
  rq.y = 900;
  err = (rill_error_t){0};
  uint8_t* deep = decode(&bad, rq, &o2, &err, &rc);
  uint8_t* clean = decode_ok(&b, rq, &o1);
  cr_assert(deep == NULL || memcmp(deep, clean, out_bytes(&o1)) != 0, "a region below the junk decoded as clean");
  free(deep), free(clean), free(want), free(got);
  free(bad.p), free(b.p), free(px);
}

/* ---------------------------------------------------------------- copies of files marks cannot follow */

/* A region decoded from the file itself, checked to its end (no marks, no copy). */
static uint8_t* original_region(const buf_t* b, rill__img_request_t rq, rill__img_out_t* o) {
  rq.marks = NULL, rq.marks_out = NULL, rq.tail_verified = 0, rq.copy_max = 0;
  return decode_ok(b, rq, o);
}

/* A file's first visit with `copy_max` bytes for a copy: the region, and the new marks in *m
 * (NULL: none). */
static uint8_t* first_visit(const buf_t* b, rill__img_request_t rq, int64_t copy_max, rill__jpeg_marks_t** m,
                            rill__img_out_t* o) {
  *m = NULL;
  rq.marks = NULL, rq.marks_out = m, rq.tail_verified = 0, rq.col_marks = RILL__JPEG_COL_MARKS_MAX;
  rq.copy_max = copy_max;
  return decode_ok(b, rq, o);
}

/* The regions of a file with a copy: 30 random ones (DCT-scaled, gray and RGBA ones among
 * them, at every edge) decoded through the copy equal those decoded from the file. */
static void copy_regions_equal(const buf_t* b, const rill__jpeg_marks_t* m, int W, int H, unsigned rng,
                               const char* what) {
  for (int r = 0; r < 30; r++) {
    rng = rng * 1103515245u + 12345u;
    rill__img_request_t rq = {.channels = r % 5 == 4 ? 1 : r % 7 == 3 ? 4 : 3};
    rq.h = 1 + (int)((rng >> 8) % (unsigned)(r % 2 ? H : H / 3 + 1)), rq.w = 1 + (int)((rng >> 4) % (unsigned)W);
    rq.y = (int)((rng >> 12) % (unsigned)(H - rq.h + 1)), rq.x = (int)((rng >> 3) % (unsigned)(W - rq.w + 1));
    if (r % 9 == 5) rq.x = W - rq.w, rq.y = H - rq.h;
    if (r % 9 == 6) rq.x = 0;
    if (r % 3 == 1) rq.min_w = rq.w / 3 + 1, rq.min_h = rq.h / 3 + 1;
    if (r % 6 == 2) rq.min_w = rq.w / 5 + 1, rq.min_h = rq.h / 7 + 1, rq.scales = RILL__IMG_SCALES_ALL;
    rill__img_out_t o1, o2;
    uint8_t* want = original_region(b, rq, &o1);
    rill__img_request_t later = rq;
    later.tail_verified = 1, later.marks = (rill__jpeg_marks_t*)m;
    uint8_t* got = decode_ok(b, later, &o2);
    cr_assert(o1.w == o2.w && o1.h == o2.h && memcmp(want, got, out_bytes(&o1)) == 0,
              "%s: region (%d,%d) %dx%d at %d/%d, %d channels: the copy's pixels differ", what, rq.x, rq.y, rq.w,
              rq.h, o1.scale_num, o1.scale_denom, rq.channels);
    free(want), free(got);
  }
}

/* Files the marks cannot follow (progressive, restart intervals, both) get a baseline copy on
 * their first visit: the first region and every later one decode to the pixels of the file
 * itself, for every sampling, scale and channel count; the copy has column marks (cuts). */
Test(jpeg_copy, copies_decode_the_same_pixels) {
  struct {
    int w, h, gray, hs, vs, q, progressive, restart;
  } cases[] = {{300, 200, 0, 2, 2, 90, 1, 0}, {257, 311, 0, 2, 1, 85, 1, 0}, {200, 150, 0, 1, 1, 95, 1, 0},
               {173, 131, 1, 0, 0, 90, 1, 0}, {96, 300, 0, 1, 2, 80, 1, 0},  {301, 263, 0, 2, 2, 90, 0, 1},
               {500, 375, 0, 2, 2, 75, 1, 2}, {64, 64, 0, 2, 2, 100, 1, 0}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    int W = cases[k].w, H = cases[k].h, ch = cases[k].gray ? 1 : 3;
    uint8_t* px = textured_pixels(W, H, ch, (unsigned)k + 40);
    buf_t b = enc_jpeg(px, W, H, (jpeg_spec_t){.in = ch == 1 ? JCS_GRAYSCALE : JCS_RGB, .quality = cases[k].q,
                                               .hs = cases[k].hs, .vs = cases[k].vs,
                                               .progressive = cases[k].progressive, .restart_rows = cases[k].restart});
    cr_assert_null(rill__jpeg_marks_new(b.p, b.n, RILL__JPEG_COL_MARKS_MAX), "case %zu has marks of its own", k);
    rill__img_request_t rq = {.channels = 3, .x = W / 4, .y = H / 3, .w = W / 2, .h = H / 3};
    rill__img_out_t o1, o2;
    rill__jpeg_marks_t* m;
    uint8_t* got = first_visit(&b, rq, 1 << 24, &m, &o2);
    uint8_t* want = original_region(&b, rq, &o1);
    cr_assert(memcmp(want, got, out_bytes(&o1)) == 0, "case %zu: the first region differs", k);
    free(want), free(got);
    size_t held = 0;
    const uint8_t* copy = rill__jpeg_marks_stream(m, &held);
    cr_assert_not_null(copy, "case %zu: no copy", k);
    cr_assert(rill__jpeg_marks_have_columns(m), "case %zu: the copy has no column marks", k);
    cr_assert_geq(rill__jpeg_marks_bytes(m), held + 16, "case %zu: the copy's bytes are not counted", k);
    cr_assert(copy[0] == 0xff && copy[1] == 0xd8 && copy[held - 2] == 0xff && copy[held - 1] == 0xd9);
    buf_t cb = {(uint8_t*)copy, held};
    rill__img_info_t ia, ib;
    rill_error_t err = {0};
    RT_OK(rill__img_probe(b.p, b.n, &ia, &err), err);
    RT_OK(rill__img_probe(cb.p, cb.n, &ib, &err), err);
    cr_assert(ia.width == ib.width && ia.height == ib.height && ia.channels == ib.channels);
    rill__jpeg_marks_t* own = rill__jpeg_marks_new(cb.p, cb.n, 0);
    cr_assert_not_null(own, "case %zu: the copy is no baseline file with one scan", k);
    rill__free(own);
    char what[32];
    snprintf(what, sizeof what, "case %zu", k);
    copy_regions_equal(&b, m, W, H, (unsigned)k * 7 + 1, what);
    /* without its column marks (over the memory limit) the copy stays: regions seek */
    rill__jpeg_marks_t* rows = rill__jpeg_marks_drop_columns(m);
    size_t held2 = 0;
    const uint8_t* copy2 = rill__jpeg_marks_stream(rows, &held2);
    cr_assert(copy2 && held2 == held, "case %zu: the copy was lost with the column marks", k);
    snprintf(what, sizeof what, "case %zu, row marks", k);
    copy_regions_equal(&b, rows, W, H, (unsigned)k * 5 + 3, what);
    rill__free(rows);
    free(b.p), free(px);
  }
}

/* No copy where it would not serve or would decode otherwise: a baseline file (marks of its
 * own), no room or too little, a progression stopped early (libjpeg smooths its blocks), CMYK;
 * their pixels are the file's all the same. A damaged file fails its first visit with the
 * error of a decode without copies, and leaves no marks. */
Test(jpeg_copy, no_copy_where_it_would_not_serve) {
  int W = 240, H = 176;
  uint8_t* px = textured_pixels(W, H, 3, 61);
  buf_t prog = enc_jpeg(px, W, H, (jpeg_spec_t){.in = JCS_RGB, .quality = 90, .hs = 2, .vs = 2, .progressive = 1});
  buf_t base = enc_jpeg(px, W, H, (jpeg_spec_t){.in = JCS_RGB, .quality = 90, .hs = 2, .vs = 2});
  buf_t early = first_scans(&prog, 3);
  uint8_t* px4 = textured_pixels(W, H, 4, 62);
  buf_t cmyk = enc_jpeg(px4, W, H, (jpeg_spec_t){.in = JCS_CMYK, .progressive = 1});
  buf_t wide = with_wide_coefficient(&base);
  rill__img_request_t rq = {.channels = 3, .x = 50, .y = 40, .w = 120, .h = 90};
  struct {
    const buf_t* b;
    int64_t room;
    int marks; /* 0: none; 1: marks without a copy; 2: a copy */
    const char* what;
  } cases[] = {{&prog, 1 << 24, 2, "progressive"},      {&prog, 0, 0, "no room"},
               {&prog, 2000, 0, "too little room"},      {&base, 1 << 24, 1, "baseline"},
               {&early, 1 << 24, 0, "stopped early"},    {&cmyk, 1 << 24, 0, "CMYK"},
               {&wide, 1 << 24, 0, "a coefficient no 8-bit baseline file holds"}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    rill__img_out_t o1, o2;
    rill__jpeg_marks_t* m;
    uint8_t* got = first_visit(cases[k].b, rq, cases[k].room, &m, &o2);
    uint8_t* want = original_region(cases[k].b, rq, &o1);
    cr_assert(memcmp(want, got, out_bytes(&o1)) == 0, "%s: the region differs", cases[k].what);
    size_t held;
    int kind = m == NULL ? 0 : rill__jpeg_marks_stream(m, &held) ? 2 : 1;
    cr_assert_eq(kind, cases[k].marks, "%s: marks %d, expected %d", cases[k].what, kind, cases[k].marks);
    free(want), free(got);
    rill__free(m);
  }
  /* damage in the middle of the scans: the same error with room for a copy as without */
  size_t at[64];
  int n = test_scans(&prog, at, 32);
  cr_assert_geq(n, 4);
  buf_t bad = {malloc(prog.n), prog.n};
  memcpy(bad.p, prog.p, prog.n);
  memset(bad.p + (at[2] + at[3]) / 2, 0xff, 24);
  rill_error_t e1 = {0}, e2 = {0};
  int rc1, rc2;
  rill__img_out_t o;
  rill__jpeg_marks_t* m = NULL;
  rill__img_request_t with = rq, without = rq;
  with.marks_out = &m, with.col_marks = RILL__JPEG_COL_MARKS_MAX, with.copy_max = 1 << 24;
  cr_assert_null(decode(&bad, with, &o, &e1, &rc1));
  cr_assert_null(decode(&bad, without, &o, &e2, &rc2));
  cr_assert_eq(rc1, RILL_EFORMAT, "%d %s", rc1, e1.message);
  cr_assert_eq(rc2, RILL_EFORMAT);
  cr_assert_str_eq(e1.message, e2.message);
  cr_assert_null(m, "a damaged file got marks");
  free(bad.p), free(early.p), free(cmyk.p), free(wide.p), free(prog.p), free(base.p), free(px), free(px4);
}

/* The room for a copy: the file's share and what the files added before it left of theirs,
 * the shares of the files not added yet set aside. */
Test(jpeg_copy, room_is_the_share_and_what_earlier_files_left) {
  uint8_t* px = textured_pixels(240, 176, 3, 63);
  buf_t b = enc_jpeg(px, 240, 176, (jpeg_spec_t){.in = JCS_RGB, .quality = 90, .hs = 2, .vs = 2});
  rill__img_memo_t memo;
  RT_OK(rill__img_memo_init(&memo, 4), (rill_error_t){0});
  memo.marks_max = 4000;
  cr_assert_eq(rill__img_memo_share(&memo), 1000);
  cr_assert_eq(rill__img_memo_copy_room(&memo), 1000, "no file added: the share");
  rill__jpeg_marks_t* rows = rill__jpeg_marks_new(b.p, b.n, 0);
  int64_t used = (int64_t)rill__jpeg_marks_bytes(rows);
  cr_assert(used > 0 && used < 1000, "%lld", (long long)used);
  rill__img_memo_add(&memo, 11, rows);
  cr_assert_eq(rill__img_memo_copy_room(&memo), 2000 - used, "one share and what the first file left of its");
  rill__img_memo_add(&memo, 11, NULL); /* the same file again: not counted twice */
  cr_assert_eq(rill__img_memo_copy_room(&memo), 2000 - used);
  rill__img_memo_add(&memo, 22, NULL);
  cr_assert_eq(rill__img_memo_copy_room(&memo), 3000 - used);
  rill__img_memo_add(&memo, 33, NULL);
  rill__img_memo_add(&memo, 44, NULL);
  cr_assert_eq(rill__img_memo_copy_room(&memo), 4000 - used, "every file added: what is left");
  memo.marks_max = 0;
  cr_assert_eq(rill__img_memo_copy_room(&memo), 0);
  rill__img_memo_free(&memo);
  free(b.p), free(px);
}

/* ---------------------------------------------------------------- real images */

static const char* data_dir(void) {
  static char d[1024];
  snprintf(d, sizeof d, "%s/build/data/variants", rt_root());
  struct stat st;
  return stat(d, &st) == 0 ? d : NULL;
}

static buf_t slurp(const char* path) {
  FILE* f = fopen(path, "rb");
  cr_assert(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  buf_t b = {malloc(n ? (size_t)n : 1), (size_t)n};
  cr_assert_eq(fread(b.p, 1, b.n, f), b.n);
  fclose(f);
  return b;
}

Test(real, jpeg_variants_match_reference) {
  const char* dir = data_dir();
  if (!dir) cr_skip_test("real images absent: run test/data/get_images.sh");
  char path[1200];
  snprintf(path, sizeof path, "%s/video-001.png", dir);
  buf_t ref = slurp(path);
  rill__img_out_t ro;
  uint8_t* r = decode_ok(&ref, RGB(3), &ro);
  const char* names[] = {"video-001.jpeg", "video-001.progressive.jpeg", "video-001.q50.420.jpeg",
                         "video-001.q50.422.jpeg", "video-001.q50.440.jpeg", "video-001.q50.444.jpeg",
                         "video-001.q50.410.jpeg", "video-001.q50.411.progressive.jpeg", "video-001.rgb.jpeg",
                         "video-001.separate.dc.progression.progressive.jpeg", "video-001.221212.jpeg"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    buf_t b = slurp(path);
    rill__img_out_t o;
    uint8_t* d = decode_ok(&b, RGB(3), &o);
    cr_assert(o.w == ro.w && o.h == ro.h, "%s: %dx%d", names[i], o.w, o.h);
    double mean;
    int max;
    diff(d, r, (size_t)o.w * o.h * 3, &mean, &max);
    cr_assert(mean < 8, "%s: mean difference %.2f from the reference", names[i], mean);
    free(d), free(b.p);
  }
  /* CMYK (Adobe, inverted): the reference is another decoder's RGB rendering of the file */
  snprintf(path, sizeof path, "%s/video-001.cmyk.png", dir);
  buf_t cref = slurp(path);
  snprintf(path, sizeof path, "%s/video-001.cmyk.jpeg", dir);
  buf_t cj = slurp(path);
  rill__img_out_t co;
  uint8_t* cr = decode_ok(&cref, RGB(3), &co);
  uint8_t* cd = decode_ok(&cj, RGB(3), &co);
  double cmean;
  int cmax;
  diff(cd, cr, (size_t)co.w * co.h * 3, &cmean, &cmax);
  cr_assert(cmean < 1.0, "CMYK: mean difference %.2f from the reference", cmean);
  free(cr), free(cd), free(cref.p), free(cj.p);
  /* a progressive file that ends (with its end marker) before the last scans is valid: the
   * image has less detail, as another decoder renders it */
  snprintf(path, sizeof path, "%s/video-001.progressive.truncated.jpeg", dir);
  buf_t t = slurp(path);
  snprintf(path, sizeof path, "%s/video-001.progressive.truncated.png", dir);
  buf_t tref = slurp(path);
  rill__img_out_t o;
  uint8_t* td = decode_ok(&t, RGB(3), &o);
  uint8_t* tr = decode_ok(&tref, RGB(3), &o);
  diff(td, tr, (size_t)o.w * o.h * 3, &cmean, &cmax);
  cr_assert(cmean < 3.0, "truncated progressive: mean difference %.2f", cmean);
  free(td), free(tr), free(tref.p);
  /* cut inside a scan: an error */
  rill_error_t err = {0};
  int rc;
  buf_t cut = {t.p, t.n - 100};
  cr_assert_null(decode(&cut, RGB(3), &o, &err, &rc));
  cr_assert_eq(rc, RILL_EFORMAT, "%s", err.message);
  snprintf(path, sizeof path, "%s/video-005.gray.q50.2x2.progressive.jpeg", dir);
  buf_t g = slurp(path);
  uint8_t* gd = decode_ok(&g, RGB(3), &o);
  for (int i = 0; i < o.w * o.h; i++) cr_assert(gd[i * 3] == gd[i * 3 + 1] && gd[i * 3] == gd[i * 3 + 2]);
  free(gd), free(g.p), free(t.p), free(r), free(ref.p);
}

/* The real progressive variants get copies whose regions decode as the files do; the gray
 * file sampled 2x2 (libjpeg's one-block MCU: no marks for its copy either) and the progression
 * stopped early (smoothed) get none, with their pixels unchanged. */
Test(real, progressive_variants_copied) {
  const char* dir = data_dir();
  if (!dir) cr_skip_test("real images absent: run test/data/get_images.sh");
  const char* names[] = {"video-001.progressive.jpeg",         "video-001.q50.410.progressive.jpeg",
                         "video-001.q50.411.progressive.jpeg", "video-001.q50.420.progressive.jpeg",
                         "video-001.q50.422.progressive.jpeg", "video-001.q50.440.progressive.jpeg",
                         "video-001.q50.444.progressive.jpeg", "video-001.separate.dc.progression.progressive.jpeg",
                         "video-005.gray.q50.progressive.jpeg", "video-005.gray.q50.2x2.progressive.jpeg",
                         "video-001.progressive.truncated.jpeg"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    char path[1200];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    buf_t b = slurp(path);
    rill__img_info_t info;
    rill_error_t err = {0};
    RT_OK(rill__img_probe(b.p, b.n, &info, &err), err);
    rill__img_request_t rq = {.channels = 3, .x = info.width / 5, .y = info.height / 4, .w = info.width / 2,
                              .h = info.height / 2};
    rill__img_out_t o1, o2;
    rill__jpeg_marks_t* m;
    uint8_t* got = first_visit(&b, rq, 1 << 24, &m, &o2);
    uint8_t* want = original_region(&b, rq, &o1);
    cr_assert(memcmp(want, got, out_bytes(&o1)) == 0, "%s: the first region differs", names[i]);
    size_t held;
    int copied = rill__jpeg_marks_stream(m, &held) != NULL;
    cr_assert_eq(copied, i < 9, "%s: copy %d", names[i], copied);
    if (copied) copy_regions_equal(&b, m, info.width, info.height, (unsigned)i + 17, names[i]);
    rill__free(m);
    free(want), free(got), free(b.p);
  }
}

Test(real, pngsuite) {
  const char* dir = data_dir();
  if (!dir) cr_skip_test("real images absent: run test/data/get_images.sh");
  /* basn*: every color type and bit depth; 32x32 (the -31 ones 31x31) */
  const char* names[] = {"basn0g01", "basn0g02", "basn0g04", "basn0g08", "basn0g16", "basn2c08", "basn2c16",
                         "basn3p01", "basn3p02", "basn3p04", "basn3p08", "basn4a08", "basn4a16", "basn6a08",
                         "basn6a16", "ftbbn3p08", "ftp0n3p08", "basn3p04-31i"};
  char path[1200];
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    snprintf(path, sizeof path, "%s/pngsuite/%s.png", dir, names[i]);
    buf_t b = slurp(path);
    for (int c = 1; c <= 4; c += (c == 1 ? 2 : 1)) {
      rill__img_out_t o;
      uint8_t* d = decode_ok(&b, RGB(c), &o);
      int side = strstr(names[i], "-31") ? 31 : 32;
      cr_assert(o.w == side && o.h == side, "%s: %dx%d", names[i], o.w, o.h);
      free(d);
    }
    free(b.p);
  }
  const char* bad[] = {"invalid-crc32.png", "invalid-noend.png", "invalid-trunc.png", "invalid-zlib.png"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, bad[i]);
    buf_t b = slurp(path);
    rill_error_t err = {0};
    int rc;
    rill__img_out_t o;
    cr_assert_null(decode(&b, RGB(3), &o, &err, &rc), "%s decoded", bad[i]);
    cr_assert_eq(rc, RILL_EFORMAT, "%s: %d %s", bad[i], rc, err.message);
    free(b.p);
  }
}

#else
/* Built without libjpeg or libpng: the missing decoder says so. */
Test(decode, not_built) {
  rill_error_t err = {0};
  rill__img_info_t info;
  uint8_t dst[16];
  rill__img_out_t o;
  const uint8_t j[] = {0xff, 0xd8, 0xff, 0xe0, 0, 0};
  const uint8_t p[] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R',
                       0, 0, 0, 1, 0, 0, 0, 1, 8, 2, 0, 0, 0, 0, 0, 0, 0};
  if (!RILL_HAVE_JPEG) {
    RT_FAILS(rill__img_probe(j, sizeof j, &info, &err), RILL_ENOTSUP, "built without libjpeg", err);
    RT_FAILS(rill__img_decode(j, sizeof j, &(rill__img_request_t){.channels = 3}, dst, sizeof dst, &o, &err),
             RILL_ENOTSUP, "built without libjpeg", err);
  }
  if (!RILL_HAVE_PNG) {
    RT_FAILS(rill__img_probe(p, sizeof p, &info, &err), RILL_ENOTSUP, "built without libpng", err);
    RT_FAILS(rill__img_decode(p, sizeof p, &(rill__img_request_t){.channels = 3}, dst, sizeof dst, &o, &err),
             RILL_ENOTSUP, "built without libpng", err);
  }
  RT_FAILS(rill__img_probe("", 0, &info, &err), RILL_EFORMAT, "empty file", err);
}
#endif
