/* Image operators: each against a simple reference written here, the vector loops against
 * the portable ones, random resized crop parameters and determinism, the crop fused with
 * decoding against decode-then-crop, bad encoded images, wrong column types, batching. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "image_common.h"

#include "image_internal.h" /* rill__image_set_simd, rill__rrc_params */
#include "internal.h"       /* rill__free */

/* ---------------------------------------------------------------- helpers */

static uint32_t lcg(uint32_t* s) {
  *s = *s * 1664525u + 1013904223u;
  return *s >> 8;
}

/* n random images H x W x C (fixed shape). */
static rill_array_t* random_images(int64_t n, int H, int W, int C, uint32_t seed) {
  rill_error_t err = {0};
  rill_array_t* a = NULL;
  RT_OK(rill_array_new(rill_type_tensor(RILL_UINT8, 3, (int64_t[]){H, W, C}), n, &a, &err), err);
  uint8_t* p = a->data;
  for (int64_t i = 0; i < n * H * W * C; i++) p[i] = (uint8_t)lcg(&seed);
  return a;
}

/* A smooth colour gradient (compresses well and survives JPEG). */
static void gradient(uint8_t* p, int H, int W, int C) {
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++)
      for (int c = 0; c < C; c++)
        p[((size_t)y * W + x) * C + c] = (uint8_t)(c == 0 ? x * 255 / (W - 1) : c == 1 ? y * 255 / (H - 1) : (x + y) * 255 / (W + H - 2));
}

static rill_df_t* df_of(const char* name, const rill_array_t* a) {
  rill_error_t err = {0};
  rill_df_t* df = NULL;
  const char* names[1] = {name};
  const rill_array_t* arrays[1] = {a};
  RT_OK(rill_df_from_arrays(names, arrays, 1, 1, &df, &err), err);
  return df;
}

/* Pulls column `col` of every row; returns deep copies (caller releases). */
static rill_array_t** collect(rill_df_t* df, int col, uint64_t seed, int threads) {
  rill_error_t err = {0};
  rill_iter_t* it = NULL;
  rill_row_t row;
  int64_t n = rill_df_rows(df);
  rill_array_t** out = calloc((size_t)n + 1, sizeof *out);
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.columns = &col, .ncolumns = 1, .seed = seed, .threads = threads}, &it,
                      &err),
        err);
  int64_t k = 0, rc;
  while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) {
    cr_assert_lt(k, n);
    RT_OK(rill_array_copy(rill_row_get(&row, 0), &out[k], &err), err);
    k++;
  }
  cr_assert_eq(rc, RILL_END, "iteration failed: %s", err.message);
  cr_assert_eq(k, n);
  rill_iter_free(it);
  return out;
}

static void release_all(rill_array_t** a, int64_t n) {
  for (int64_t i = 0; i < n; i++) rill_array_release(a[i]);
  free(a);
}

static float half_to_float(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  float v = e == 0 ? ldexpf((float)m, -24) : e == 31 ? INFINITY : ldexpf((float)(m | 1024), e - 25);
  return (h & 0x8000) ? -v : v;
}

/* Naive bilinear (half-pixel centres, edge clamp) of one output sample. */
static double ref_bilinear(const uint8_t* src, int H, int W, int C, int oy, int ox, int c, int OH, int OW) {
  double sy = (oy + 0.5) * H / OH - 0.5, sx = (ox + 0.5) * W / OW - 0.5;
  if (sy < 0) sy = 0;
  if (sx < 0) sx = 0;
  if (sy > H - 1) sy = H - 1;
  if (sx > W - 1) sx = W - 1;
  int y0 = (int)sy, x0 = (int)sx, y1 = y0 + 1 < H ? y0 + 1 : H - 1, x1 = x0 + 1 < W ? x0 + 1 : W - 1;
  double fy = sy - y0, fx = sx - x0;
#define PX(y, x) ((double)src[((size_t)(y) * W + (x)) * C + c])
  return (1 - fy) * ((1 - fx) * PX(y0, x0) + fx * PX(y0, x1)) + fy * ((1 - fx) * PX(y1, x0) + fx * PX(y1, x1));
#undef PX
}

/* ---------------------------------------------------------------- resize */

static void check_resize(int H, int W, int OH, int OW) {
  rill_error_t err = {0};
  rill_array_t* a = random_images(3, H, W, 3, 7u + (uint32_t)H);
  rill_df_t* df = df_of("img", a);
  int col = rill_image_resize(df, "small", 0, &(rill_resize_opts_t){.size = {OH, OW}}, &err);
  cr_assert_geq(col, 0, "%s", err.message);
  char tb[64];
  rill_type_format(&rill_df_field(df, col)->type, tb, sizeof tb);
  char want[64];
  snprintf(want, sizeof want, "uint8[%d,%d,3]", OH, OW);
  cr_assert_str_eq(tb, want);
  rill_array_t** got = collect(df, col, 1, 2);
  for (int i = 0; i < 3; i++) {
    const uint8_t* src = (const uint8_t*)a->data + (size_t)i * H * W * 3;
    const uint8_t* out = got[i]->data;
    for (int y = 0; y < OH; y++)
      for (int x = 0; x < OW; x++)
        for (int c = 0; c < 3; c++) {
          double r = ref_bilinear(src, H, W, 3, y, x, c, OH, OW);
          double d = fabs(out[((size_t)y * OW + x) * 3 + c] - r);
          cr_assert_leq(d, 0.51 + 1e-3, "image %d (%d,%d,%d): got %d, reference %.3f", i, y, x, c,
                        out[((size_t)y * OW + x) * 3 + c], r);
        }
  }
  release_all(got, 3);
  rill_df_free(df);
  rill_array_release(a);
}

Test(image_ops, resize_bilinear_matches_naive_formula) {
  check_resize(37, 53, 20, 30); /* down */
  check_resize(17, 11, 40, 29); /* up */
  check_resize(24, 24, 24, 24); /* identity */
  check_resize(1, 9, 4, 5);     /* one source row */
}

Test(image_ops, resize_area_is_box_average) {
  rill_error_t err = {0};
  rill_array_t* a = random_images(2, 40, 60, 3, 99);
  rill_df_t* df = df_of("img", a);
  int col = rill_image_resize(df, "small", 0, &(rill_resize_opts_t){.size = {10, 15}, .interpolation = RILL_INTERP_AREA},
                              &err);
  cr_assert_geq(col, 0, "%s", err.message);
  rill_array_t** got = collect(df, col, 1, 2);
  for (int i = 0; i < 2; i++) {
    const uint8_t* src = (const uint8_t*)a->data + (size_t)i * 40 * 60 * 3;
    for (int y = 0; y < 10; y++)
      for (int x = 0; x < 15; x++)
        for (int c = 0; c < 3; c++) {
          double sum = 0;
          for (int dy = 0; dy < 4; dy++)
            for (int dx = 0; dx < 4; dx++) sum += src[((size_t)(4 * y + dy) * 60 + 4 * x + dx) * 3 + c];
          int v = ((const uint8_t*)got[i]->data)[((size_t)y * 15 + x) * 3 + c];
          cr_assert_leq(fabs(v - sum / 16), 0.51, "(%d,%d,%d): %d vs %.2f", y, x, c, v, sum / 16);
        }
  }
  release_all(got, 2);
  rill_df_free(df);
  rill_array_release(a);
}

/* A tall area downscale (2,000 rows to 100: 21 vertical taps) equals the box average, and the
 * rows passed horizontally are kept in a ring of one row per tap, not one per source row. */
Test(image_ops, resize_area_keeps_one_row_per_tap) {
  enum { SH = 2000, SW = 48, OH = 100, OW = 24, C = 3 };
  uint8_t* src = malloc((size_t)SH * SW * C);
  uint8_t* out = malloc((size_t)OH * OW * C);
  uint32_t seed = 5;
  for (size_t i = 0; i < (size_t)SH * SW * C; i++) src[i] = (uint8_t)(lcg(&seed) >> 24);
  rill__img_scratch_t s = {0};
  cr_assert_eq(rill__img_resize(&s, src, SW * C, C, 0, 0, SW, SH, 0, 0, SW, SH, out, OW, OH, RILL_INTERP_AREA), RILL_OK);
  for (int y = 0; y < OH; y++)
    for (int x = 0; x < OW; x++)
      for (int c = 0; c < C; c++) {
        double sum = 0;
        for (int dy = 0; dy < 20; dy++)
          for (int dx = 0; dx < 2; dx++) sum += src[((size_t)(20 * y + dy) * SW + 2 * x + dx) * C + c];
        int v = out[((size_t)y * OW + x) * C + c];
        cr_assert_leq(fabs(v - sum / 40), 0.51, "(%d,%d,%d): %d vs %.2f", y, x, c, v, sum / 40);
      }
  size_t row = (size_t)OW * C * sizeof(float), taps = SH / OH + 1;
  cr_assert_leq(s.tmp_cap, taps * row * 5 / 4 + 64, "scratch of %zu bytes for %zu taps of %zu-byte rows", s.tmp_cap, taps,
                row); /* rill__img_grow keeps a quarter more */
  rill__img_scratch_free(&s);
  free(src);
  free(out);
}

Test(image_ops, resize_shorter_side_keeps_aspect) {
  rill_error_t err = {0};
  rill_array_t* a = random_images(1, 30, 60, 1, 5);
  rill_df_t* df = df_of("img", a);
  int col = rill_image_resize(df, "r", 0, &(rill_resize_opts_t){.size = {15, 0}}, &err);
  cr_assert_geq(col, 0, "%s", err.message);
  rill_array_t** got = collect(df, col, 1, 2);
  int64_t shape[3];
  cr_assert_eq(rill_array_cell_shape(got[0], 0, shape), 3);
  cr_assert_eq(shape[0], 15);
  cr_assert_eq(shape[1], 30);
  cr_assert_eq(shape[2], 1);
  int64_t nb = 0;
  rill_array_cell(got[0], 0, &nb);
  cr_assert_eq(nb, 15 * 30);
  release_all(got, 1);
  rill_df_free(df);
  rill_array_release(a);
}

/* ---------------------------------------------------------------- normalize, flip, crop */

static const double MEAN[3] = {0.485, 0.456, 0.406}, STD[3] = {0.229, 0.224, 0.225};

Test(image_ops, normalize_chw_float32_exact) {
  rill_error_t err = {0};
  int H = 5, W = 37; /* odd width: vector body and scalar tail */
  rill_array_t* a = random_images(2, H, W, 3, 11);
  rill_df_t* df = df_of("img", a);
  int col = rill_image_normalize(df, "x", 0,
                                 &(rill_normalize_opts_t){.mean = {MEAN[0], MEAN[1], MEAN[2]},
                                                          .std = {STD[0], STD[1], STD[2]},
                                                          .layout = RILL_LAYOUT_CHW},
                                 &err);
  cr_assert_geq(col, 0, "%s", err.message);
  char tb[64];
  cr_assert_str_eq(rill_type_format(&rill_df_field(df, col)->type, tb, sizeof tb), "float32[3,5,37]");
  rill_array_t** got = collect(df, col, 3, 2);
  for (int i = 0; i < 2; i++) {
    const uint8_t* src = (const uint8_t*)a->data + (size_t)i * H * W * 3;
    const float* out = got[i]->data;
    for (int c = 0; c < 3; c++) {
      float scale = (float)(1.0 / (255.0 * STD[c])), bias = (float)(-MEAN[c] / STD[c]);
      for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
          uint8_t v = src[((size_t)y * W + x) * 3 + c];
          float want = (float)v * scale + bias;
          float o = out[(size_t)c * H * W + (size_t)y * W + x];
          cr_assert(o == want, "c%d (%d,%d): %.9g vs %.9g", c, y, x, o, want);
          cr_assert_leq(fabs(o - (v / 255.0 - MEAN[c]) / STD[c]), 1e-5);
        }
    }
  }
  release_all(got, 2);
  rill_df_free(df);
  rill_array_release(a);
}

Test(image_ops, normalize_float16_hwc_and_defaults) {
  rill_error_t err = {0};
  rill_array_t* a = random_images(1, 3, 7, 4, 13);
  rill_df_t* df = df_of("img", a);
  int c16 = rill_image_normalize(df, "h", 0, &(rill_normalize_opts_t){.dtype = RILL_FLOAT16}, &err);
  cr_assert_geq(c16, 0, "%s", err.message);
  char tb[64];
  cr_assert_str_eq(rill_type_format(&rill_df_field(df, c16)->type, tb, sizeof tb), "float16[3,7,4]");
  rill_array_t** got = collect(df, c16, 1, 2);
  const uint16_t* h = got[0]->data;
  const uint8_t* src = a->data;
  for (int k = 0; k < 3 * 7 * 4; k++) {
    double want = src[k] / 255.0; /* zero options: mean 0, std 1 */
    cr_assert_leq(fabs(half_to_float(h[k]) - want), want * 1e-3 + 1e-7, "%d: %g vs %g", k, half_to_float(h[k]), want);
  }
  release_all(got, 1);
  rill_df_free(df);
  rill_array_release(a);
}

Test(image_ops, normalize_flip_fused) {
  rill_error_t err = {0};
  int n = 64, H = 2, W = 19;
  rill_array_t* a = random_images(n, H, W, 3, 17);
  rill_df_t* df = df_of("img", a);
  int plain = rill_image_normalize(df, "p", 0, &(rill_normalize_opts_t){.layout = RILL_LAYOUT_CHW}, &err);
  int flipped = rill_image_normalize(df, "f", 0, &(rill_normalize_opts_t){.flip = 0.5, .layout = RILL_LAYOUT_CHW}, &err);
  cr_assert_geq(flipped, 0, "%s", err.message);
  rill_array_t** p = collect(df, plain, 5, 2);
  rill_array_t** f = collect(df, flipped, 5, 2);
  rill_array_t** f2 = collect(df, flipped, 5, 1);
  int nflip = 0;
  for (int i = 0; i < n; i++) {
    const float* pp = p[i]->data;
    const float* ff = f[i]->data;
    cr_assert(memcmp(ff, f2[i]->data, sizeof(float) * 3 * H * W) == 0, "row %d differs between runs", i);
    int same = memcmp(pp, ff, sizeof(float) * 3 * H * W) == 0, mirrored = 1;
    for (int c = 0; c < 3; c++)
      for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
          if (ff[(c * H + y) * W + x] != pp[(c * H + y) * W + (W - 1 - x)]) mirrored = 0;
    cr_assert(same || mirrored, "row %d is neither the image nor its mirror", i);
    nflip += mirrored && !same;
  }
  cr_assert(nflip > 10 && nflip < 54, "flipped %d of 64 with p = 0.5", nflip);
  release_all(p, n);
  release_all(f, n);
  release_all(f2, n);
  rill_df_free(df);
  rill_array_release(a);
}

Test(image_ops, flip_probability_and_mirror) {
  rill_error_t err = {0};
  int n = 40, H = 3, W = 5, C = 2;
  rill_array_t* a = random_images(n, H, W, C, 23);
  rill_df_t* df = df_of("img", a);
  int always = rill_image_flip(df, "a", 0, 1.0, &err);
  int never = rill_image_flip(df, "n", 0, 0.0, &err);
  cr_assert_geq(never, 0, "%s", err.message);
  rill_array_t** fa = collect(df, always, 1, 2);
  rill_array_t** fn = collect(df, never, 1, 2);
  for (int i = 0; i < n; i++) {
    const uint8_t* src = (const uint8_t*)a->data + (size_t)i * H * W * C;
    cr_assert(memcmp(fn[i]->data, src, (size_t)H * W * C) == 0);
    for (int y = 0; y < H; y++)
      for (int x = 0; x < W; x++)
        for (int c = 0; c < C; c++)
          cr_assert_eq(((uint8_t*)fa[i]->data)[(y * W + x) * C + c], src[(y * W + (W - 1 - x)) * C + c]);
  }
  release_all(fa, n);
  release_all(fn, n);
  rill_df_free(df);
  rill_array_release(a);
}

/* Three-channel rows (the vector path, reading rows ahead of the one it flips) of widths
 * around its 5-pixel step and of a training crop, in images taller than the read-ahead. */
Test(image_ops, flip_three_channel_rows_of_every_width) {
  rill_error_t err = {0};
  const int widths[] = {1, 2, 4, 5, 6, 7, 10, 11, 16, 31, 224};
  for (size_t k = 0; k < sizeof widths / sizeof widths[0]; k++) {
    int n = 3, H = 9, W = widths[k], C = 3;
    rill_array_t* a = random_images(n, H, W, C, 31 + (int)k);
    rill_df_t* df = df_of("img", a);
    int always = rill_image_flip(df, "a", 0, 1.0, &err);
    cr_assert_geq(always, 0, "%s", err.message);
    rill_array_t** fa = collect(df, always, 1, 2);
    for (int i = 0; i < n; i++) {
      const uint8_t* src = (const uint8_t*)a->data + (size_t)i * H * W * C;
      const uint8_t* got = fa[i]->data;
      for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
          for (int c = 0; c < C; c++)
            cr_assert_eq(got[(y * W + x) * C + c], src[(y * W + (W - 1 - x)) * C + c], "width %d, image %d, (%d, %d, %d)",
                         W, i, y, x, c);
    }
    release_all(fa, n);
    rill_df_free(df);
    rill_array_release(a);
  }
}

Test(image_ops, center_crop_and_pad) {
  rill_error_t err = {0};
  rill_array_t* a = random_images(1, 10, 12, 3, 29);
  rill_df_t* df = df_of("img", a);
  int crop = rill_image_center_crop(df, "c", 0, 4, 6, &err);
  int pad = rill_image_center_crop(df, "p", 0, 14, 12, &err);
  cr_assert_geq(pad, 0, "%s", err.message);
  rill_array_t** c = collect(df, crop, 1, 2);
  rill_array_t** p = collect(df, pad, 1, 2);
  const uint8_t* src = a->data;
  for (int y = 0; y < 4; y++)
    cr_assert(memcmp((uint8_t*)c[0]->data + y * 6 * 3, src + ((3 + y) * 12 + 3) * 3, 18) == 0, "row %d", y);
  const uint8_t* pp = p[0]->data;
  for (int y = 0; y < 14; y++) {
    if (y < 2 || y >= 12) {
      for (int k = 0; k < 36; k++) cr_assert_eq(pp[y * 36 + k], 0, "padding row %d", y);
    } else {
      cr_assert(memcmp(pp + y * 36, src + (y - 2) * 36, 36) == 0, "row %d", y);
    }
  }
  release_all(c, 1);
  release_all(p, 1);
  rill_df_free(df);
  rill_array_release(a);
}

/* torchvision's offsets: int(round(margin / 2)) with halves to even, and a smaller image
 * padded first by (crop - size) // 2 */
Test(image_ops, center_crop_odd_margins_match_torchvision) {
  rill_error_t err = {0};
  rill_array_t* a = random_images(1, 11, 9, 3, 37); /* 11 high, 9 wide */
  rill_df_t* df = df_of("img", a);
  int crop = rill_image_center_crop(df, "c", 0, 4, 4, &err); /* margins 7 (3.5 -> 4), 5 (2.5 -> 2) */
  int pad = rill_image_center_crop(df, "p", 0, 14, 12, &err); /* pads 3 // 2 = 1 above, 3 // 2 = 1 left */
  cr_assert_geq(pad, 0, "%s", err.message);
  rill_array_t** c = collect(df, crop, 1, 2);
  rill_array_t** p = collect(df, pad, 1, 2);
  const uint8_t* src = a->data;
  for (int y = 0; y < 4; y++)
    cr_assert(memcmp((uint8_t*)c[0]->data + y * 4 * 3, src + ((4 + y) * 9 + 2) * 3, 12) == 0, "row %d", y);
  const uint8_t* pp = p[0]->data;
  for (int y = 0; y < 14; y++)
    for (int x = 0; x < 12; x++)
      for (int k = 0; k < 3; k++) {
        int iy = y - 1, ix = x - 1;
        int want = iy >= 0 && iy < 11 && ix >= 0 && ix < 9 ? src[(iy * 9 + ix) * 3 + k] : 0;
        cr_assert_eq(pp[(y * 12 + x) * 3 + k], want, "pixel (%d, %d)", y, x);
      }
  release_all(c, 1);
  release_all(p, 1);
  rill_df_free(df);
  rill_array_release(a);
}

/* ---------------------------------------------------------------- vector == portable */

Test(image_ops, simd_equals_portable) {
  rill_error_t err = {0};
  int n = 6;
  rill_array_t* a = random_images(n, 41, 67, 3, 31);
  rill_df_t* df = df_of("img", a);
  int cols[7];
  cols[5] = rill_image_flip(df, "flip", 0, 0.5, &err);
  /* taller: the two-tap vertical pass (16, 8 and single values a step) */
  cols[6] = rill_image_resize(df, "ru", 0, &(rill_resize_opts_t){.size = {70, 53}}, &err);
  cols[0] = rill_image_resize(df, "r", 0, &(rill_resize_opts_t){.size = {23, 45}}, &err);
  cols[1] = rill_image_resize(df, "ra", 0, &(rill_resize_opts_t){.size = {13, 19}, .interpolation = RILL_INTERP_AREA}, &err);
  cols[2] = rill_image_normalize(df, "n32", 0,
                                 &(rill_normalize_opts_t){.flip = 0.5, .mean = {0.5, 0.4, 0.3}, .std = {0.2, 0.3, 0.25},
                                                          .layout = RILL_LAYOUT_CHW},
                                 &err);
  cols[3] = rill_image_normalize(df, "n16", 0,
                                 &(rill_normalize_opts_t){.flip = 0.5, .mean = {0.5, 0.4, 0.3}, .std = {0.002, 0.3, 0.25},
                                                          .dtype = RILL_FLOAT16, .layout = RILL_LAYOUT_CHW},
                                 &err);
  cols[4] = rill_image_random_resized_crop(df, "rrc", 0, &(rill_rrc_opts_t){.size = {32, 32}}, &err);
  for (int k = 0; k < 7; k++) cr_assert_geq(cols[k], 0, "%s", err.message);
  int have = rill__image_set_simd(1);
  if (!have) cr_log_warn("no AVX2 on this CPU: comparing the portable loops with themselves");
  for (int k = 0; k < 7; k++) {
    rill__image_set_simd(1);
    rill_array_t** v = collect(df, cols[k], 9, 2);
    rill__image_set_simd(0);
    rill_array_t** s = collect(df, cols[k], 9, 2);
    for (int i = 0; i < n; i++) {
      int64_t nv = 0, ns = 0;
      const void* pv = rill_array_cell(v[i], 0, &nv);
      const void* ps = rill_array_cell(s[i], 0, &ns);
      cr_assert_eq(nv, ns);
      cr_assert(memcmp(pv, ps, (size_t)nv) == 0, "column %d row %d: vector and portable loops differ", k, i);
    }
    release_all(v, n);
    release_all(s, n);
  }
  rill__image_set_simd(1);
  rill_df_free(df);
  rill_array_release(a);
}

/* Training-sized outputs (every store, the last eight pixels of a row included, and rows of a
 * width that is not a multiple of eight): the vector loop gives the same values as the portable
 * loop, aligned or not, flipped or not, and writes nothing past the output. */
Test(image_ops, normalize_large_equals_portable) {
  rill__img_norm_t k = {{0.017f, 0.0175f, 0.0174f, 0}, {-2.1f, -2.03f, -1.8f, 0}};
  int sizes[3][2] = {{224, 224}, {200, 328}, {224, 220}}; /* H, W: W % 8 != 0 in the last */
  for (int z = 0; z < 3; z++) {
    int H = sizes[z][0], W = sizes[z][1];
    size_t n = (size_t)H * W * 3;
    uint8_t* src = malloc(n);
    for (size_t i = 0; i < n; i++) src[i] = (uint8_t)(i * 2654435761u >> 13);
    void* want = aligned_alloc(64, n * 4 + 64);
    void* got = aligned_alloc(64, n * 4 + 64);
    for (int f16 = 0; f16 < 2; f16++)
      for (int flip = 0; flip < 2; flip++)
        for (int shift = 0; shift < 2; shift++) { /* shift: a destination off the vector alignment */
          size_t es = f16 ? 2 : 4, off = shift ? es : 0;
          rill__image_set_simd(0);
          rill__img_normalize(src, H, W, 3, flip, &k, f16, 1, want);
          rill__image_set_simd(1);
          memset(got, 0xa5, n * 4 + 64);
          rill__img_normalize(src, H, W, 3, flip, &k, f16, 1, (uint8_t*)got + off);
          cr_assert(memcmp((uint8_t*)got + off, want, n * es) == 0, "%dx%d f16 %d flip %d shift %d differ", H, W,
                    f16, flip, shift);
          cr_assert_eq(((uint8_t*)got)[off + n * es], 0xa5, "written past the output");
        }
    free(src), free(want), free(got);
  }
  rill__image_set_simd(1);
}

/* Resizes of 4- and 1-channel images, down and up, odd and even widths (the two-pixel and
 * one-pixel steps of the horizontal pass): vector loops equal the portable ones. */
Test(image_ops, simd_resize_equals_portable_rgba_gray) {
  rill_error_t err = {0};
  int sizes[4][2] = {{23, 45}, {70, 53}, {19, 6}, {88, 90}};
  for (int C = 1; C <= 4; C += 3) {
    rill_array_t* a = random_images(3, 41, 67, C, 77 + C);
    rill_df_t* df = df_of("img", a);
    for (int z = 0; z < 4; z++) {
      char name[16];
      snprintf(name, sizeof name, "r%d", z);
      int col = rill_image_resize(df, name, 0, &(rill_resize_opts_t){.size = {sizes[z][0], sizes[z][1]}}, &err);
      cr_assert_geq(col, 0, "%s", err.message);
      rill__image_set_simd(1);
      rill_array_t** v = collect(df, col, 9, 1);
      rill__image_set_simd(0);
      rill_array_t** s = collect(df, col, 9, 1);
      for (int i = 0; i < 3; i++) {
        int64_t nv = 0, ns = 0;
        const void* pv = rill_array_cell(v[i], 0, &nv);
        const void* ps = rill_array_cell(s[i], 0, &ns);
        cr_assert_eq(nv, (int64_t)sizes[z][0] * sizes[z][1] * C);
        cr_assert_eq(nv, ns);
        cr_assert(memcmp(pv, ps, (size_t)nv) == 0, "C %d size %dx%d row %d: vector and portable loops differ", C,
                  sizes[z][0], sizes[z][1], i);
      }
      release_all(v, 3);
      release_all(s, 3);
    }
    rill__image_set_simd(1);
    rill_df_free(df);
    rill_array_release(a);
  }
}

/* ---------------------------------------------------------------- one-hot */

Test(image_ops, one_hot_labels_nulls_and_range) {
  rill_error_t err = {0};
  rill_array_t* lab = NULL;
  RT_OK(rill_array_new(rill_type_scalar(RILL_INT64), 4, &lab, &err), err);
  int64_t* v = lab->data;
  v[0] = 2, v[1] = 0, v[2] = 0, v[3] = 4;
  RT_OK(rill_array_set_null(lab, 2), err);
  rill_df_t* df = df_of("label", lab);
  int col = rill_one_hot(df, "y", 0, 5, 0, &err);
  cr_assert_geq(col, 0, "%s", err.message);
  rill_array_t** got = collect(df, col, 1, 2);
  const int want[4] = {2, 0, -1, 4};
  for (int i = 0; i < 4; i++) {
    const float* f = got[i]->data;
    cr_assert_eq(rill_array_is_valid(got[i], 0), want[i] >= 0, "row %d validity", i);
    for (int k = 0; k < 5; k++) cr_assert_eq(f[k], k == want[i] ? 1.0f : 0.0f, "row %d class %d", i, k);
  }
  release_all(got, 4);
  int small = rill_one_hot(df, "y3", 0, 3, RILL_UINT8, &err);
  cr_assert_geq(small, 0, "%s", err.message);
  rill_iter_t* it = NULL;
  rill_row_t row;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.columns = &small, .ncolumns = 1, .threads = RILL_THREADS_NONE}, &it, &err),
        err);
  RT_OK(rill_iter_next(it, &row, &err), err);
  cr_assert_eq(((const uint8_t*)rill_row_get(&row, 0)->data)[2], 1);
  RT_OK(rill_iter_next(it, &row, &err), err);
  RT_OK(rill_iter_next(it, &row, &err), err);
  RT_FAILS(rill_iter_next(it, &row, &err), RILL_ERANGE, "label 4 is outside [0, 3)", err);
  cr_assert_eq(err.row, 3);
  rill_iter_free(it);
  RT_FAILS(rill_one_hot(df, "z", 0, 0, 0, &err), RILL_EINVAL, "classes 0", err);
  RT_FAILS(rill_one_hot(df, "z", 0, 3, RILL_STRING, &err), RILL_EINVAL, "not numeric", err);
  rill_df_free(df);
  rill_array_release(lab);
}

/* ---------------------------------------------------------------- jitter */

Test(image_ops, jitter_factors_in_range) {
  rill_error_t err = {0};
  int n = 30, H = 4, W = 6;
  rill_array_t* a = NULL;
  RT_OK(rill_array_new(rill_type_tensor(RILL_UINT8, 3, (int64_t[]){H, W, 3}), n, &a, &err), err);
  uint8_t* p = a->data;
  for (int64_t k = 0; k < (int64_t)n * H * W * 3; k++) p[k] = (uint8_t)(60 + k % 40); /* no clamping at 1.5x */
  rill_df_t* df = df_of("img", a);
  int bright = rill_image_jitter(df, "b", 0, &(rill_jitter_opts_t){.brightness = 0.5}, &err);
  int sat = rill_image_jitter(df, "s", 0, &(rill_jitter_opts_t){.saturation = 0.9}, &err);
  int con = rill_image_jitter(df, "c", 0, &(rill_jitter_opts_t){.contrast = 0.4}, &err);
  cr_assert_geq(con, 0, "%s", err.message);
  rill_array_t** b = collect(df, bright, 4, 2);
  rill_array_t** c = collect(df, con, 4, 2);
  double lo = 9, hi = 0;
  for (int i = 0; i < n; i++) {
    const uint8_t* src = p + (size_t)i * H * W * 3;
    const uint8_t* o = b[i]->data;
    double f = (double)o[0] / src[0];
    for (int k = 0; k < H * W * 3; k++)
      cr_assert_leq(fabs(o[k] - src[k] * f), 1.6, "row %d: one brightness factor for all pixels", i);
    lo = fmin(lo, f), hi = fmax(hi, f);
    /* contrast keeps the mean grey level (up to rounding) */
    double m0 = 0, m1 = 0;
    for (int k = 0; k < H * W * 3; k++) m0 += src[k], m1 += ((const uint8_t*)c[i]->data)[k];
    cr_assert_leq(fabs(m0 - m1) / (H * W * 3), 1.0, "row %d: contrast moved the mean", i);
  }
  cr_assert(lo >= 0.5 - 0.02 && hi <= 1.5 + 0.02, "brightness factors in [%g, %g]", lo, hi);
  cr_assert(hi - lo > 0.3, "factors do not vary: [%g, %g]", lo, hi);
  release_all(b, n);
  release_all(c, n);
  /* a grey image stays grey under saturation */
  for (int64_t k = 0; k < (int64_t)n * H * W; k++) p[3 * k] = p[3 * k + 1] = p[3 * k + 2] = (uint8_t)(k * 7);
  rill_df_free(df);
  df = df_of("img", a);
  sat = rill_image_jitter(df, "s", 0, &(rill_jitter_opts_t){.saturation = 0.9}, &err);
  rill_array_t** s = collect(df, sat, 4, 2);
  for (int i = 0; i < n; i++) {
    const uint8_t* o = s[i]->data;
    for (int k = 0; k < H * W; k++) cr_assert(abs(o[3 * k] - o[3 * k + 1]) <= 1 && abs(o[3 * k] - o[3 * k + 2]) <= 1);
  }
  release_all(s, n);
  RT_FAILS(rill_image_jitter(df, "x", 0, &(rill_jitter_opts_t){.contrast = -1}, &err), RILL_EINVAL, "contrast", err);
  rill_df_free(df);
  rill_array_release(a);
}

/* ---------------------------------------------------------------- random resized crop */

Test(image_ops, rrc_params_in_ranges_and_deterministic) {
  const double scale[2] = {0.08, 1.0}, ratio[2] = {3.0 / 4.0, 4.0 / 3.0};
  for (int k = 0; k < 2000; k++) {
    int W = 50 + k % 450, H = 50 + (k * 7) % 450;
    rill_rng_t r1 = rill_rng_seeded(1, 0, k, 3), r2 = rill_rng_seeded(1, 0, k, 3);
    int x, y, w, h, x2, y2, w2, h2;
    rill__rrc_params(&r1, W, H, scale, ratio, &x, &y, &w, &h);
    rill__rrc_params(&r2, W, H, scale, ratio, &x2, &y2, &w2, &h2);
    cr_assert(x == x2 && y == y2 && w == w2 && h == h2, "not deterministic");
    cr_assert(x >= 0 && y >= 0 && w >= 1 && h >= 1 && x + w <= W && y + h <= H, "crop outside the image");
    double area = (double)w * h / ((double)W * H), ar = (double)w / h;
    /* rounding w and h to integers moves area and aspect a little */
    double tol_a = (w + h + 1.0) / ((double)W * H);
    if (!(area >= scale[0] - tol_a && area <= scale[1] + tol_a && ar >= ratio[0] * (1 - 1.0 / h) - 1.0 / h &&
          ar <= ratio[1] * (1 + 1.0 / h) + 1.0 / h)) {
      /* the fallback: the whole image, cut to the ratio range, centred */
      cr_assert(x == (W - w) / 2 && y == (H - h) / 2, "k=%d: %dx%d crop %d,%d %dx%d out of range", k, W, H, x, y, w, h);
    }
  }
  /* a very wide image always falls back to a centred 4:3 crop */
  rill_rng_t r = rill_rng_seeded(2, 0, 0, 0);
  int x, y, w, h;
  rill__rrc_params(&r, 1000, 10, (double[]){0.9, 1.0}, ratio, &x, &y, &w, &h);
  cr_assert(w == 13 && h == 10 && x == (1000 - 13) / 2 && y == 0, "fallback %d,%d %dx%d", x, y, w, h);
  /* and a very tall one to a centred 3:4 crop */
  rill__rrc_params(&r, 10, 1000, (double[]){0.9, 1.0}, ratio, &x, &y, &w, &h);
  cr_assert(w == 10 && h == 13 && x == 0 && y == (1000 - 13) / 2, "fallback %d,%d %dx%d", x, y, w, h);
}

Test(image_ops, rrc_on_pixels_shape_and_seed) {
  rill_error_t err = {0};
  int n = 8;
  rill_array_t* a = random_images(n, 60, 80, 3, 37);
  memset(a->data, 77, 60 * 80 * 3); /* image 0 uniform */
  rill_df_t* df = df_of("img", a);
  int col = rill_image_random_resized_crop(df, "crop", 0, &(rill_rrc_opts_t){.size = {24, 32}}, &err);
  cr_assert_geq(col, 0, "%s", err.message);
  char tb[64];
  cr_assert_str_eq(rill_type_format(&rill_df_field(df, col)->type, tb, sizeof tb), "uint8[24,32,3]");
  rill_array_t** s1 = collect(df, col, 42, 2);
  rill_array_t** s1b = collect(df, col, 42, RILL_THREADS_NONE);
  rill_array_t** s2 = collect(df, col, 43, 2);
  int differ = 0;
  for (int i = 0; i < n; i++) {
    cr_assert(memcmp(s1[i]->data, s1b[i]->data, 24 * 32 * 3) == 0, "row %d depends on threads", i);
    differ += memcmp(s1[i]->data, s2[i]->data, 24 * 32 * 3) != 0;
  }
  cr_assert_geq(differ, n - 2, "another seed gives other crops");
  for (int k = 0; k < 24 * 32 * 3; k++) cr_assert_eq(((uint8_t*)s1[0]->data)[k], 77);
  release_all(s1, n);
  release_all(s1b, n);
  release_all(s2, n);
  rill_df_free(df);
  rill_array_release(a);
}

/* ---------------------------------------------------------------- argument errors */

Test(image_ops, wrong_types_and_options) {
  rill_error_t err = {0};
  rill_array_t* lab = NULL;
  RT_OK(rill_array_new(rill_type_scalar(RILL_INT64), 2, &lab, &err), err);
  rill_array_t* img = random_images(2, 4, 4, 3, 1);
  rill_array_t* bin = NULL;
  RT_OK(rill_array_new(rill_type_scalar(RILL_BINARY), 2, &bin, &err), err);
  RT_OK(rill_array_set_var(bin, 0, "x", 1, NULL), err);
  RT_OK(rill_array_set_var(bin, 1, "y", 1, NULL), err);
  const char* names[3] = {"label", "img", "bytes"};
  const rill_array_t* arrays[3] = {lab, img, bin};
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_arrays(names, arrays, 3, 1, &df, &err), err);
  RT_FAILS(rill_image_random_resized_crop(df, "a", 0, &(rill_rrc_opts_t){.size = {8, 8}}, &err), RILL_EINVAL,
           "expected uint8[H,W,C]", err);
  RT_FAILS(rill_image_random_resized_crop(df, "a", 1, &(rill_rrc_opts_t){.size = {0, 8}}, &err), RILL_EINVAL,
           "must be positive", err);
  RT_FAILS(rill_image_random_resized_crop(df, "a", 1, NULL, &err), RILL_EINVAL, "NULL options", err);
  RT_FAILS(rill_image_random_resized_crop(df, "a", 1, &(rill_rrc_opts_t){.size = {8, 8}, .scale = {0.5, 0.2}}, &err),
           RILL_EINVAL, "scale range", err);
  RT_FAILS(rill_image_random_resized_crop(df, "a", 2, &(rill_rrc_opts_t){.size = {8, 8}, .channels = 2}, &err),
           RILL_EINVAL, "channels must be 1, 3 or 4", err);
  RT_FAILS(rill_image_random_resized_crop(df, "a", 9, &(rill_rrc_opts_t){.size = {8, 8}}, &err), RILL_EINVAL,
           "unknown column 9", err);
  RT_FAILS(rill_image_normalize(df, "n", 2, NULL, &err), RILL_EINVAL, "decode it first", err);
  RT_FAILS(rill_image_normalize(df, "n", 1, &(rill_normalize_opts_t){.dtype = RILL_INT32}, &err), RILL_EINVAL,
           "float32 or float16", err);
  RT_FAILS(rill_image_flip(df, "f", 1, 1.5, &err), RILL_EINVAL, "outside [0, 1]", err);
  RT_FAILS(rill_image_flip(df, "f", 0, 0.5, &err), RILL_EINVAL, "'label' has type int64", err);
  RT_FAILS(rill_image_center_crop(df, "c", 1, -1, 3, &err), RILL_EINVAL, "must be positive", err);
  RT_FAILS(rill_image_resize(NULL, "r", 1, &(rill_resize_opts_t){.size = {2, 2}}, &err), RILL_EINVAL, "NULL dataframe",
           err);
  RT_FAILS(rill_one_hot(df, "o", 1, 3, 0, &err), RILL_EINVAL, "expected int64 labels", err);
  cr_assert_eq(rill_df_ncolumns(df), 3, "failed calls add no column");
  rill_df_free(df);
  rill_array_release(lab);
  rill_array_release(img);
  rill_array_release(bin);
}

Test(image_ops, null_cells_stay_null) {
  rill_error_t err = {0};
  rill_array_t* a = random_images(3, 4, 5, 3, 41);
  RT_OK(rill_array_set_null(a, 1), err);
  rill_df_t* df = df_of("img", a);
  int x = rill_image_normalize(df, "x", 0, &(rill_normalize_opts_t){.layout = RILL_LAYOUT_CHW}, &err);
  int f = rill_image_flip(df, "f", 0, 0.5, &err);
  int r = rill_image_random_resized_crop(df, "r", 0, &(rill_rrc_opts_t){.size = {3, 3}}, &err);
  cr_assert_geq(r, 0, "%s", err.message);
  int cols[3] = {x, f, r};
  for (int k = 0; k < 3; k++) {
    rill_array_t** got = collect(df, cols[k], 1, 2);
    cr_assert(rill_array_is_valid(got[0], 0) && !rill_array_is_valid(got[1], 0) && rill_array_is_valid(got[2], 0),
              "column %d", k);
    cr_assert_eq(got[1]->null_count, 1);
    release_all(got, 3);
  }
  rill_df_free(df);
  rill_array_release(a);
}

/* ---------------------------------------------------------------- batching */

Test(image_ops, batched_normalize_writes_into_batch_buffer) {
  rill_error_t err = {0};
  int n = 64, B = 8;
  rill_array_t* a = random_images(n, 16, 16, 3, 43);
  rill_df_t* df = df_of("img", a);
  int crop = rill_image_random_resized_crop(df, "c", 0, &(rill_rrc_opts_t){.size = {12, 12}}, &err);
  int x = rill_image_normalize(df, "x", crop,
                               &(rill_normalize_opts_t){.flip = 0.5, .mean = {0.5, 0.5, 0.5}, .std = {0.5, 0.5, 0.5},
                                                        .layout = RILL_LAYOUT_CHW},
                               &err);
  cr_assert_geq(x, 0, "%s", err.message);
  rill_array_t** single = collect(df, x, 7, 2);
  rill_df_t* batches = NULL;
  RT_OK(rill_df_batch(df, &x, 1, B, NULL, &batches, &err), err);
  rill_iter_t* it = NULL;
  rill_row_t row;
  RT_OK(rill_iter_new(batches, &(rill_iter_opts_t){.seed = 7, .threads = 2, .prefetch = 2}, &it, &err), err);
  rill_iter_stats_t st;
  int64_t allocs_after_first = -1;
  const void* seen[64];
  int nseen = 0, epochs = 6;
  for (int epoch = 0; epoch < epochs; epoch++) {
    if (epoch) RT_OK(rill_iter_set_epoch(it, epoch), err);
    for (int b = 0; b < n / B; b++) {
      RT_OK(rill_iter_next(it, &row, &err), err);
      const rill_array_t* t = rill_row_get(&row, 0);
      cr_assert_eq(t->length, B);
      char tb[64];
      cr_assert_str_eq(rill_type_format(&t->type, tb, sizeof tb), "float32[3,12,12]");
      if (epoch == 0)
        for (int i = 0; i < B; i++)
          cr_assert(memcmp((const float*)t->data + (size_t)i * 3 * 12 * 12, single[b * B + i]->data, 4 * 3 * 12 * 12) == 0,
                    "batch %d row %d differs from the unbatched row", b, i);
      int known = 0;
      for (int k = 0; k < nseen; k++) known |= seen[k] == t->data;
      if (!known && nseen < 64) seen[nseen++] = t->data;
    }
    cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
    rill_iter_stats(it, &st);
    if (epoch == 0) allocs_after_first = st.allocs;
  }
  rill_iter_stats(it, &st);
  /* 48 batches of 3 arrays each (source, crop, normalize-into-batch): the buffers come from
   * the pools; how many exist depends only on how many are in flight at once (timing), never
   * on the number of batches */
  cr_assert_leq(st.allocs, 16, "%lld buffer allocations for %d batches (first epoch: %lld)", (long long)st.allocs,
                epochs * (n / B), (long long)allocs_after_first);
  cr_assert_gt(st.reuses, (epochs - 1) * (n / B));
  cr_assert_leq(nseen, 12, "%d distinct batch buffers for %d batches", nseen, epochs * (n / B));
  rill_iter_free(it);
  rill_df_free(batches);
  release_all(single, n);
  rill_df_free(df);
  rill_array_release(a);
}

/* ---------------------------------------------------------------- encoded images */

#if RILL_HAVE_JPEG
static uint8_t* decode_jpeg(const unsigned char* buf, unsigned long size, int* W, int* H) {
  struct jpeg_decompress_struct d;
  struct jpeg_error_mgr jerr;
  d.err = jpeg_std_error(&jerr);
  jpeg_create_decompress(&d);
  jpeg_mem_src(&d, buf, size);
  jpeg_read_header(&d, TRUE);
  d.out_color_space = JCS_RGB;
  jpeg_start_decompress(&d);
  *W = (int)d.output_width;
  *H = (int)d.output_height;
  uint8_t* px = malloc((size_t)*W * *H * 3);
  while (d.output_scanline < d.output_height) {
    JSAMPROW r = px + (size_t)d.output_scanline * *W * 3;
    jpeg_read_scanlines(&d, &r, 1);
  }
  jpeg_finish_decompress(&d);
  jpeg_destroy_decompress(&d);
  return px;
}
#endif

static rill_array_t* binary_array(int n, const void* const* bufs, const int64_t* sizes, rill_dtype_t dt) {
  rill_error_t err = {0};
  rill_array_t* a = NULL;
  RT_OK(rill_array_new(rill_type_scalar(dt), n, &a, &err), err);
  for (int i = 0; i < n; i++) RT_OK(rill_array_set_var(a, i, bufs[i], sizes[i], NULL), err);
  return a;
}

/* The crop fused with decoding equals decoding the whole image and then cropping: the same
 * (seed, row, column) gives the same crop in both dataframes. */
Test(image_ops, fused_jpeg_crop_matches_decode_then_crop) {
#if !RILL_HAVE_JPEG
  cr_skip_test("built without libjpeg");
#else
  rill_error_t err = {0};
  int W = 640, H = 480, n = 6;
  uint8_t* px = malloc((size_t)W * H * 3);
  gradient(px, H, W, 3);
  buf_t enc = enc_jpeg(px, W, H, (jpeg_spec_t){.in = JCS_RGB, .quality = 95, .hs = 2, .vs = 2});
  unsigned char* jpg = enc.p;
  unsigned long size = (unsigned long)enc.n;
  int dw = 0, dh = 0;
  uint8_t* dec = decode_jpeg(jpg, size, &dw, &dh);
  cr_assert(dw == W && dh == H);
  const void* bufs[6];
  int64_t sizes[6];
  for (int i = 0; i < n; i++) bufs[i] = jpg, sizes[i] = (int64_t)size;
  rill_array_t* bin = binary_array(n, bufs, sizes, RILL_BINARY);
  rill_array_t* pix = NULL;
  RT_OK(rill_array_new(rill_type_tensor(RILL_UINT8, 3, (int64_t[]){H, W, 3}), n, &pix, &err), err);
  for (int i = 0; i < n; i++) memcpy((uint8_t*)pix->data + (size_t)i * W * H * 3, dec, (size_t)W * H * 3);
  rill_df_t* d1 = df_of("bytes", bin);
  rill_df_t* d2 = df_of("img", pix);
  /* small crops (scale 0.05-0.2) to 64x64: the fused decode is DCT-scaled and cropped */
  rill_rrc_opts_t o = {.size = {64, 64}, .scale = {0.05, 0.2}};
  int c1 = rill_image_random_resized_crop(d1, "crop", 0, &o, &err);
  int c2 = rill_image_random_resized_crop(d2, "crop", 0, &o, &err);
  cr_assert(c1 >= 0 && c1 == c2, "%s", err.message);
  rill_array_t** f = collect(d1, c1, 11, 2);
  rill_array_t** r = collect(d2, c2, 11, 2);
  for (int i = 0; i < n; i++) {
    const uint8_t* a = f[i]->data;
    const uint8_t* b = r[i]->data;
    double sum = 0;
    int worst = 0;
    for (int k = 0; k < 64 * 64 * 3; k++) {
      int d = abs(a[k] - b[k]);
      sum += d;
      worst = d > worst ? d : worst;
    }
    cr_assert_leq(sum / (64 * 64 * 3), 3.0, "row %d: mean difference %.2f", i, sum / (64 * 64 * 3));
    cr_assert_leq(worst, 24, "row %d: largest difference %d", i, worst);
  }
  release_all(f, n);
  release_all(r, n);
  rill_df_free(d1);
  rill_df_free(d2);
  rill_array_release(bin);
  rill_array_release(pix);
  free(dec);
  free(jpg);
  free(px);
#endif
}

#if RILL_HAVE_JPEG
/* n textured JPEGs of three sizes and samplings (progressive ones when `progressive`: every
 * odd one), as a binary column; enc receives the encodings (the caller frees them). */
enum { TEXTURED = 9 };
static rill_array_t* textured_jpegs(buf_t enc[TEXTURED], unsigned seed0, int progressive) {
  int sizes[3][4] = {{300, 200, 2, 2}, {257, 311, 2, 1}, {200, 150, 1, 1}};
  const void* bufs[TEXTURED];
  int64_t lens[TEXTURED];
  for (int i = 0; i < TEXTURED; i++) {
    int W = sizes[i % 3][0], H = sizes[i % 3][1];
    uint8_t* px = malloc((size_t)W * H * 3);
    gradient(px, H, W, 3);
    unsigned seed = (unsigned)i + seed0;
    for (size_t k = 0; k < (size_t)W * H * 3; k++) { /* texture: coefficients of every size */
      seed = seed * 1103515245u + 12345u;
      px[k] = (uint8_t)(px[k] / 2 + (seed >> 17) % 128);
    }
    enc[i] = enc_jpeg(px, W, H, (jpeg_spec_t){.in = JCS_RGB, .quality = 90, .hs = sizes[i % 3][2],
                                              .vs = sizes[i % 3][3], .progressive = progressive && i % 2});
    bufs[i] = enc[i].p, lens[i] = (int64_t)enc[i].n;
    free(px);
  }
  return binary_array(TEXTURED, bufs, lens, RILL_BINARY);
}

/* The dataframe of image_ops::multi_crop_shares_one_verified_table: three crops of column 0 of
 * `bin`, the last two normalized; their columns (the normalized ones) in cols. */
static rill_df_t* multi_crop_df(const rill_array_t* bin, int cols[3]) {
  rill_error_t err = {0};
  rill_df_t* df = df_of("bytes", bin);
  rill_rrc_opts_t a = {.size = {40, 32}, .scale = {0.1, 0.6}}, b = {.size = {24, 24}, .scale = {0.05, 0.3}},
                  c = {.size = {48, 40}, .scale = {0.3, 1.0}};
  rill_normalize_opts_t n = {.mean = {0.5, 0.5, 0.5}, .std = {0.25, 0.25, 0.25}, .dtype = RILL_FLOAT32,
                             .layout = RILL_LAYOUT_CHW};
  cols[0] = rill_image_random_resized_crop(df, "a", 0, &a, &err);
  int cb = rill_image_random_resized_crop(df, "b", 0, &b, &err);
  cols[1] = rill_image_normalize(df, "bx", cb, &n, &err);
  int cc = rill_image_random_resized_crop(df, "c", 0, &c, &err);
  cols[2] = rill_image_normalize(df, "cx", cc, &n, &err);
  cr_assert(cols[0] >= 0 && cb >= 0 && cols[1] >= 0 && cc >= 0 && cols[2] >= 0, "%s", err.message);
  return df;
}

/* All the crops of one epoch of an RRC pipeline over `files`, on `threads` workers. */
static uint8_t* epoch_crops(rill_df_t* df, int col, int epoch, int threads, size_t each, int64_t rows) {
  rill_error_t err = {0};
  rill_iter_t* it = NULL;
  rill_row_t row;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.seed = 3, .threads = threads, .prefetch = 2}, &it, &err), err);
  RT_OK(rill_iter_set_epoch(it, epoch), err);
  uint8_t* out = malloc(each * (size_t)rows);
  int64_t n = 0;
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    cr_assert_lt(n, rows);
    memcpy(out + each * (size_t)n++, rill_row_get(&row, col)->data, each);
  }
  cr_assert_eq(err.code, RILL_OK, "%s", err.message);
  cr_assert_eq(n, rows);
  rill_iter_free(it);
  return out;
}
#endif

/* The fused crop keeps each file's entropy marks across the epochs of an iterator (later
 * crops start at the mark above them instead of decoding the rows above): every epoch's crops
 * equal those of a new pipeline, whose operator has seen no file yet. */
Test(image_ops, fused_jpeg_crops_equal_with_marks_kept_across_epochs) {
#if !RILL_HAVE_JPEG
  cr_skip_test("built without libjpeg");
#else
  rill_error_t err = {0};
  enum { N = TEXTURED };
  buf_t enc[N];
  rill_array_t* bin = textured_jpegs(enc, 1, 0);
  rill_rrc_opts_t o = {.size = {40, 32}, .scale = {0.1, 0.6}};
  size_t each = 40 * 32 * 3;
  rill_df_t* kept = df_of("bytes", bin);
  int col = rill_image_random_resized_crop(kept, "crop", 0, &o, &err);
  cr_assert_geq(col, 0, "%s", err.message);
  rill_iter_t* it = NULL;
  rill_row_t row;
  RT_OK(rill_iter_new(kept, &(rill_iter_opts_t){.seed = 3, .threads = 2, .prefetch = 2}, &it, &err), err);
  for (int e = 0; e < 5; e++) {
    if (e) RT_OK(rill_iter_set_epoch(it, e), err);
    uint8_t* got = malloc(each * N);
    for (int i = 0; i < N; i++) {
      RT_OK(rill_iter_next(it, &row, &err), err);
      memcpy(got + each * (size_t)i, rill_row_get(&row, col)->data, each);
    }
    cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
    rill_df_t* fresh = df_of("bytes", bin);
    cr_assert_eq(rill_image_random_resized_crop(fresh, "crop", 0, &o, &err), col);
    uint8_t* want = epoch_crops(fresh, col, e, RILL_THREADS_NONE, each, N);
    for (int i = 0; i < N; i++)
      cr_assert(memcmp(got + each * (size_t)i, want + each * (size_t)i, each) == 0,
                "epoch %d row %d: the crop differs from a new pipeline's", e, i);
    free(got), free(want);
    rill_df_free(fresh);
  }
  rill_iter_free(it);
  rill_df_free(kept);
  rill_array_release(bin);
  for (int i = 0; i < N; i++) free(enc[i].p);
#endif
}

/* Several crops of each file (multi-crop training), two of them normalized (fused): the
 * operators over one column share one verified-file table (each file checked once, its marks
 * found once), and every epoch's crops still equal those of new pipelines that have seen no
 * file yet; baseline files (marks) and progressive ones (scans cut below the crop). */
Test(image_ops, multi_crop_shares_one_verified_table) {
#if !RILL_HAVE_JPEG
  cr_skip_test("built without libjpeg");
#else
  int cols[3];
  buf_t enc[TEXTURED];
  rill_array_t* bin = textured_jpegs(enc, 7, 1);
  rill_df_t* kept = multi_crop_df(bin, cols);
  const void* table = rill__img_op_table(kept, cols[0]);
  cr_assert_not_null(table);
  for (int c = 1; c <= rill_df_ncolumns(kept) - 1; c++)
    cr_assert_eq(rill__img_op_table(kept, c), table, "column %d has a table of its own", c);
  cr_assert_null(rill__img_op_table(kept, 0), "the bytes column is no image operator");
  size_t each[3] = {40 * 32 * 3, 24 * 24 * 3 * 4, 48 * 40 * 3 * 4};
  rill_error_t err = {0};
  rill_iter_t* it = NULL;
  rill_row_t row;
  RT_OK(rill_iter_new(kept, &(rill_iter_opts_t){.seed = 3, .threads = 2, .prefetch = 2}, &it, &err), err);
  for (int e = 0; e < 4; e++) {
    if (e) RT_OK(rill_iter_set_epoch(it, e), err);
    uint8_t* got[3];
    for (int k = 0; k < 3; k++) got[k] = malloc(each[k] * TEXTURED);
    for (int i = 0; i < TEXTURED; i++) {
      RT_OK(rill_iter_next(it, &row, &err), err);
      for (int k = 0; k < 3; k++) memcpy(got[k] + each[k] * (size_t)i, rill_row_get(&row, cols[k])->data, each[k]);
    }
    cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
    for (int k = 0; k < 3; k++) {
      int fc[3];
      rill_df_t* fresh = multi_crop_df(bin, fc);
      cr_assert_neq(rill__img_op_table(fresh, fc[0]), table, "a new dataframe has a table of its own");
      uint8_t* want = epoch_crops(fresh, fc[k], e, RILL_THREADS_NONE, each[k], TEXTURED);
      for (int i = 0; i < TEXTURED; i++)
        cr_assert(memcmp(got[k] + each[k] * (size_t)i, want + each[k] * (size_t)i, each[k]) == 0,
                  "epoch %d row %d crop %d: differs from a new pipeline's", e, i, k);
      free(want), free(got[k]);
      rill_df_free(fresh);
    }
  }
  rill_iter_free(it);
  rill_df_free(kept);
  rill_array_release(bin);
  for (int i = 0; i < TEXTURED; i++) free(enc[i].p);
#endif
}

/* The crops of epoch e from a pipeline like o's without marks or copies (marks_bytes < 0),
 * which decodes the files themselves. */
static uint8_t* own_crops(const rill_array_t* bin, rill_rrc_opts_t o, int col, int e, size_t each) {
  rill_error_t err = {0};
  rill_df_t* plain = df_of("bytes", bin);
  o.marks_bytes = -1;
  cr_assert_eq(rill_image_random_resized_crop(plain, "a", 0, &o, &err), col, "%s", err.message);
  uint8_t* want = epoch_crops(plain, col, e, RILL_THREADS_NONE, each, TEXTURED);
  rill_df_free(plain);
  return want;
}

/* The bytes of the copy the table keeps for a file (0: none). */
static size_t kept_copy(const rill__img_memo_t* memo, const buf_t* f) {
  int64_t slot = rill__img_memo_find(memo, rill__img_fingerprint(f->p, f->n));
  size_t held = 0;
  return slot >= 0 && rill__jpeg_marks_stream(rill__img_memo_marks(memo, slot), &held) ? held : 0;
}

/* Progressive files get baseline copies kept with their marks (within each file's share of
 * marks_bytes): every epoch's crops equal those of a pipeline without marks or copies
 * (marks_bytes < 0), which decodes the files themselves; with room for row marks only, no
 * copies and the same crops. */
Test(image_ops, progressive_files_are_copied_once) {
#if !RILL_HAVE_JPEG
  cr_skip_test("built without libjpeg");
#else
  buf_t enc[TEXTURED];
  rill_array_t* bin = textured_jpegs(enc, 5, 1);
  size_t each = 40 * 32 * 3;
  int64_t asks[] = {0, 9 * 300};
  for (int a = 0; a < 2; a++) {
    rill_error_t err = {0};
    rill_df_t* df = df_of("bytes", bin);
    rill_rrc_opts_t o = {.size = {40, 32}, .scale = {0.1, 0.6}, .marks_bytes = asks[a]};
    int col = rill_image_random_resized_crop(df, "a", 0, &o, &err);
    cr_assert_geq(col, 0, "%s", err.message);
    const rill__img_memo_t* memo = rill__img_op_table(df, col);
    for (int e = 0; e < 3; e++) {
      uint8_t* got = epoch_crops(df, col, e, 2, each, TEXTURED);
      uint8_t* want = own_crops(bin, o, col, e, each);
      for (int i = 0; i < TEXTURED; i++)
        cr_assert(memcmp(got + each * (size_t)i, want + each * (size_t)i, each) == 0,
                  "marks_bytes %lld, epoch %d row %d: the crop differs from the files' own", (long long)asks[a], e, i);
      free(got), free(want);
    }
    int64_t copies = 0;
    for (int i = 0; i < TEXTURED; i++) {
      cr_assert_geq(rill__img_memo_find(memo, rill__img_fingerprint(enc[i].p, enc[i].n)), 0, "file %d was not verified", i);
      size_t held = kept_copy(memo, &enc[i]);
      cr_assert_eq(held > 0, a == 0 && i % 2, "marks_bytes %lld, file %d: copy of %zu bytes", (long long)asks[a], i, held);
      copies += (int64_t)held;
    }
    cr_assert_gt(atomic_load(&memo->marks_bytes), copies, "the copies are not counted");
    cr_assert_leq(atomic_load(&memo->marks_bytes), memo->marks_max);
    rill_df_free(df);
  }
  rill_array_release(bin);
  for (int i = 0; i < TEXTURED; i++) free(enc[i].p);
#endif
}

/* A limit whose equal share holds no copy still gives copies from what the files before
 * them left of their shares (one thread: the files in order), within the limit; the crops
 * are the files' own. */
Test(image_ops, copies_take_what_earlier_files_left) {
#if !RILL_HAVE_JPEG
  cr_skip_test("built without libjpeg");
#else
  buf_t enc[TEXTURED];
  rill_array_t* bin = textured_jpegs(enc, 9, 1);
  size_t each = 40 * 32 * 3;
  int64_t smallest = INT64_MAX; /* the bytes of the smallest copy */
  for (int i = 1; i < TEXTURED; i += 2) {
    rill__img_info_t info;
    rill_error_t err = {0};
    RT_OK(rill__img_probe(enc[i].p, enc[i].n, &info, &err), err);
    rill__jpeg_marks_t* m = NULL;
    rill__img_request_t rq = {.channels = 3, .x = 10, .y = 10, .w = 40, .h = 40, .marks_out = &m, .copy_max = 1 << 24};
    uint8_t* px = malloc(40 * 40 * 3);
    RT_OK(rill__img_decode(enc[i].p, enc[i].n, &rq, px, 40 * 40 * 3, NULL, &err), err);
    cr_assert_not_null(m, "file %d: no copy", i);
    size_t held = 0;
    cr_assert_not_null(rill__jpeg_marks_stream(m, &held));
    if ((int64_t)held < smallest) smallest = (int64_t)held;
    rill__free(m), free(px);
  }
  rill_error_t err = {0};
  rill_df_t* df = df_of("bytes", bin);
  rill_rrc_opts_t o = {.size = {40, 32}, .scale = {0.1, 0.6}, .marks_bytes = (smallest - 1) * TEXTURED};
  int col = rill_image_random_resized_crop(df, "a", 0, &o, &err);
  cr_assert_geq(col, 0, "%s", err.message);
  const rill__img_memo_t* memo = rill__img_op_table(df, col);
  cr_assert_lt(rill__img_memo_share(memo), smallest, "a share holds a copy");
  for (int e = 0; e < 2; e++) {
    uint8_t* got = epoch_crops(df, col, e, RILL_THREADS_NONE, each, TEXTURED);
    uint8_t* want = own_crops(bin, o, col, e, each);
    cr_assert(memcmp(got, want, each * TEXTURED) == 0, "epoch %d: the crops differ from the files' own", e);
    free(got), free(want);
  }
  int copies = 0;
  for (int i = 0; i < TEXTURED; i++) copies += kept_copy(memo, &enc[i]) > 0;
  cr_assert_gt(copies, 0, "no copy from the room the baseline files left");
  cr_assert_leq(atomic_load(&memo->marks_bytes), memo->marks_max);
  rill_df_free(df);
  rill_array_release(bin);
  for (int i = 0; i < TEXTURED; i++) free(enc[i].p);
#endif
}

/* marks_bytes bounds the memory of the files' entropy marks (shared by the crops over one
 * column: the largest asked for holds); none at all (< 0) or little room (row marks only)
 * changes no pixel, only the work per crop. */
Test(image_ops, fused_crop_marks_memory_is_bounded) {
#if !RILL_HAVE_JPEG
  cr_skip_test("built without libjpeg");
#else
  buf_t enc[TEXTURED];
  rill_array_t* bin = textured_jpegs(enc, 11, 0);
  int64_t asks[] = {0, -1, 9 * 300, 1 << 20}; /* default; none; row marks only; room for all */
  int64_t limit[] = {(int64_t)256 << 20, 0, 9 * 300, 1 << 20};
  size_t each = 40 * 32 * 3;
  uint8_t* first = NULL;
  int64_t held[4];
  for (int a = 0; a < 4; a++) {
    rill_error_t err = {0};
    rill_df_t* df = df_of("bytes", bin);
    rill_rrc_opts_t o = {.size = {40, 32}, .scale = {0.1, 0.6}, .marks_bytes = asks[a]};
    int col = rill_image_random_resized_crop(df, "a", 0, &o, &err);
    cr_assert_geq(col, 0, "%s", err.message);
    const rill__img_memo_t* memo = rill__img_op_table(df, col); /* the shared table starts with it */
    cr_assert_not_null(memo);
    cr_assert_eq(memo->marks_max, limit[a], "marks_bytes %lld: limit %lld", (long long)asks[a],
                 (long long)memo->marks_max);
    uint8_t* e0 = epoch_crops(df, col, 0, RILL_THREADS_NONE, each, TEXTURED);
    held[a] = atomic_load(&memo->marks_bytes);
    cr_assert_leq(held[a], limit[a]);
    uint8_t* e1 = epoch_crops(df, col, 1, RILL_THREADS_NONE, each, TEXTURED);
    uint8_t* e2 = epoch_crops(df, col, 2, RILL_THREADS_NONE, each, TEXTURED);
    if (!first) {
      first = malloc(each * TEXTURED * 3);
      memcpy(first, e0, each * TEXTURED), memcpy(first + each * TEXTURED, e1, each * TEXTURED);
      memcpy(first + 2 * each * TEXTURED, e2, each * TEXTURED);
    } else {
      cr_assert(memcmp(first, e0, each * TEXTURED) == 0, "marks_bytes %lld: epoch 0 differs", (long long)asks[a]);
      cr_assert(memcmp(first + each * TEXTURED, e1, each * TEXTURED) == 0, "marks_bytes %lld: epoch 1 differs",
                (long long)asks[a]);
      cr_assert(memcmp(first + 2 * each * TEXTURED, e2, each * TEXTURED) == 0, "marks_bytes %lld: epoch 2 differs",
                (long long)asks[a]);
    }
    /* a second crop of the column asking for more raises the shared limit; one asking for
     * less leaves it */
    rill_df_t* two = df_of("bytes", bin);
    rill_rrc_opts_t more = {.size = {24, 24}, .marks_bytes = (int64_t)1 << 30};
    int c2 = rill_image_random_resized_crop(two, "a", 0, &o, &err);
    cr_assert_geq(rill_image_random_resized_crop(two, "b", 0, &more, &err), 0, "%s", err.message);
    cr_assert_geq(rill_image_random_resized_crop(two, "c", 0, &o, &err), 0, "%s", err.message);
    const rill__img_memo_t* shared = rill__img_op_table(two, c2);
    cr_assert_eq(shared->marks_max, asks[a] > (int64_t)1 << 30 ? asks[a] : (int64_t)1 << 30);
    rill_df_free(two);
    free(e0), free(e1), free(e2);
    rill_df_free(df);
  }
  cr_assert_eq(held[1], 0, "no marks kept with marks_bytes < 0");
  cr_assert(held[2] > 0 && held[2] <= 9 * 300, "row marks only: %lld bytes", (long long)held[2]);
  cr_assert_gt(held[0], 9 * 2000, "column marks kept by default: %lld bytes", (long long)held[0]);
  cr_assert_eq(held[3], held[0], "the same marks with room for all");
  free(first);
  rill_array_release(bin);
  for (int i = 0; i < TEXTURED; i++) free(enc[i].p);
#endif
}

Test(image_ops, fused_png_crop_is_exact) {
#if !RILL_HAVE_PNG
  cr_skip_test("built without libpng");
#else
  rill_error_t err = {0};
  int W = 97, H = 71, n = 4;
  uint8_t* px = malloc((size_t)W * H * 3);
  uint32_t seed = 3;
  for (int k = 0; k < W * H * 3; k++) px[k] = (uint8_t)lcg(&seed);
  buf_t enc = enc_png(px, W, H, PNG_COLOR_TYPE_RGB, 8, 0, NULL, 0, NULL, 0);
  void* png = enc.p;
  size_t size = enc.n;
  const void* bufs[4] = {png, png, png, png};
  int64_t sizes[4] = {(int64_t)size, (int64_t)size, (int64_t)size, (int64_t)size};
  rill_array_t* bin = binary_array(n, bufs, sizes, RILL_BINARY);
  rill_array_t* pix = NULL;
  RT_OK(rill_array_new(rill_type_tensor(RILL_UINT8, 3, (int64_t[]){H, W, 3}), n, &pix, &err), err);
  for (int i = 0; i < n; i++) memcpy((uint8_t*)pix->data + (size_t)i * W * H * 3, px, (size_t)W * H * 3);
  rill_df_t* d1 = df_of("bytes", bin);
  rill_df_t* d2 = df_of("img", pix);
  rill_rrc_opts_t o = {.size = {20, 30}};
  int c1 = rill_image_random_resized_crop(d1, "crop", 0, &o, &err);
  int c2 = rill_image_random_resized_crop(d2, "crop", 0, &o, &err);
  cr_assert(c1 >= 0 && c1 == c2, "%s", err.message);
  rill_array_t** f = collect(d1, c1, 5, 2);
  rill_array_t** r = collect(d2, c2, 5, 2);
  for (int i = 0; i < n; i++) cr_assert(memcmp(f[i]->data, r[i]->data, 20 * 30 * 3) == 0, "row %d", i);
  release_all(f, n);
  release_all(r, n);
  rill_df_free(d1);
  rill_df_free(d2);
  rill_array_release(bin);
  rill_array_release(pix);
  free(png);
  free(px);
#endif
}

/* Bad encoded images: an error naming the row and the file under RAISE, dropped and counted
 * under SKIP. */
__attribute__((unused)) static rill_df_t* bad_files_df(rill_array_t** keep, void** jpg_out) {
  rill_error_t err = {0};
  uint8_t px[32 * 24 * 3];
  gradient(px, 24, 32, 3);
  unsigned long size = 0;
  void* jpg = NULL;
#if RILL_HAVE_JPEG
  buf_t enc = enc_jpeg(px, 32, 24, (jpeg_spec_t){.in = JCS_RGB, .quality = 90, .hs = 2, .vs = 2});
  jpg = enc.p;
  size = (unsigned long)enc.n;
#endif
  *jpg_out = jpg;
  static const char junk[64] = "this is not an image at all, only some text bytes....";
  /* rows: good, empty, junk, truncated JPEG, good, huge PNG header */
  static const unsigned char huge_png[33] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0, 13, 'I', 'H', 'D', 'R',
                                             0, 0, 0xfd, 0xe8, 0, 0, 0xfd, 0xe8, 8, 2, 0, 0, 0, 0, 0, 0, 0};
  const void* bufs[6] = {jpg, "", junk, jpg, jpg, huge_png};
  int64_t sizes[6] = {(int64_t)size, 0, 64, (int64_t)size / 2, (int64_t)size, 33};
  const void* names[6] = {"good0.jpg", "empty.jpg", "junk.jpg", "cut.jpg", "good4.jpg", "huge.png"};
  int64_t nlen[6];
  for (int i = 0; i < 6; i++) nlen[i] = (int64_t)strlen(names[i]);
  keep[0] = binary_array(6, names, nlen, RILL_STRING);
  keep[1] = binary_array(6, bufs, sizes, RILL_BINARY);
  const char* cn[2] = {"path", "bytes"};
  const rill_array_t* arrays[2] = {keep[0], keep[1]};
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_arrays(cn, arrays, 2, 1, &df, &err), err);
  return df;
}

#if RILL_HAVE_JPEG && RILL_HAVE_PNG
/* The rows of bad_files_df through a random resized crop, alone or under a normalize fused
 * with it (whose errors are the crop's), on 2 threads. RAISE: each bad file fails its row
 * with the crop's name, the file and the reason; SKIP: the rows are dropped and counted. */
static void bad_files_run(int skip, int fused) {
  rill_error_t err = {0};
  rill_array_t* keep[2];
  void* jpg;
  rill_df_t* df = bad_files_df(keep, &jpg);
  int col = rill_image_random_resized_crop(
      df, "crop", 1,
      &(rill_rrc_opts_t){.size = {16, 16}, .on_error = skip ? RILL_ON_ERROR_SKIP : RILL_ON_ERROR_RAISE}, &err);
  cr_assert_geq(col, 0, "%s", err.message);
  if (fused) {
    col = rill_image_normalize(df, "x", col, &(rill_normalize_opts_t){.flip = 0.5, .layout = RILL_LAYOUT_CHW}, &err);
    cr_assert_geq(col, 0, "%s", err.message);
  }
  rill_iter_t* it = NULL;
  rill_row_t row;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.columns = &col, .ncolumns = 1, .threads = 2}, &it, &err), err);
  if (skip) {
    int64_t rows[6], k = 0;
    int rc;
    while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) rows[k++] = row.index;
    cr_assert_eq(rc, RILL_END, "%s", err.message);
    cr_assert_eq(k, 2);
    cr_assert(rows[0] == 0 && rows[1] == 4);
    rill_iter_stats_t st;
    rill_iter_stats(it, &st);
    cr_assert_eq(st.skipped, 4);
  } else {
    RT_OK(rill_iter_next(it, &row, &err), err);
    RT_FAILS(rill_iter_next(it, &row, &err), RILL_EFORMAT, "random_resized_crop: 'empty.jpg'", err);
    cr_assert_eq(err.row, 1);
    cr_assert(strstr(err.message, "0 bytes"), "%s", err.message);
    int rc = rill_iter_next(it, &row, &err);
    cr_assert(rc == RILL_EFORMAT || rc == RILL_ENOTSUP, "junk: %d %s", rc, err.message);
    cr_assert(strstr(err.message, "random_resized_crop: 'junk.jpg'"), "%s", err.message);
    cr_assert_eq(err.row, 2);
    RT_FAILS(rill_iter_next(it, &row, &err), RILL_EFORMAT, "random_resized_crop: 'cut.jpg'", err);
    cr_assert_eq(err.row, 3);
    RT_OK(rill_iter_next(it, &row, &err), err);
    RT_FAILS(rill_iter_next(it, &row, &err), RILL_ERANGE, "huge.png", err);
    cr_assert(strstr(err.message, "65000 x 65000"), "%s", err.message);
    cr_assert_eq(err.row, 5);
    cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
  }
  rill_iter_free(it);
  rill_df_free(df);
  rill_array_release(keep[0]);
  rill_array_release(keep[1]);
  free(jpg);
}
#endif

Test(image_ops, bad_images_raise_with_row_and_file) {
#if !RILL_HAVE_JPEG || !RILL_HAVE_PNG
  cr_skip_test("built without libjpeg or libpng");
#else
  bad_files_run(0, 0);
#endif
}

Test(image_ops, bad_images_skipped_and_counted) {
#if !RILL_HAVE_JPEG || !RILL_HAVE_PNG
  cr_skip_test("built without libjpeg or libpng");
#else
  bad_files_run(1, 0);
#endif
}

/* Decoded images of varying size (rill_image_decode: uint8[-1,-1,3]) through the operators:
 * the crop equals the crop fused with decoding; flip and normalize keep per-cell shapes. */
Test(image_ops, variable_shape_cells) {
#if !RILL_HAVE_PNG
  cr_skip_test("built without libpng");
#else
  rill_error_t err = {0};
  int n = 3, Ws[3] = {40, 23, 64}, Hs[3] = {30, 51, 17};
  void* pngs[3];
  int64_t sizes[3];
  uint32_t seed = 9;
  for (int i = 0; i < n; i++) {
    uint8_t* px = malloc((size_t)Ws[i] * Hs[i] * 3);
    for (int k = 0; k < Ws[i] * Hs[i] * 3; k++) px[k] = (uint8_t)lcg(&seed);
    buf_t enc = enc_png(px, Ws[i], Hs[i], PNG_COLOR_TYPE_RGB, 8, 0, NULL, 0, NULL, 0);
    pngs[i] = enc.p;
    sizes[i] = (int64_t)enc.n;
    free(px);
  }
  rill_array_t* bin = binary_array(n, (const void* const*)pngs, sizes, RILL_BINARY);
  rill_df_t* df = df_of("bytes", bin);
  int dec = rill_image_decode(df, "img", 0, NULL, &err);
  cr_assert_geq(dec, 0, "%s", err.message);
  /* both crops take their randomness from column index 2 of their own dataframe */
  int crop_dec = rill_image_random_resized_crop(df, "crop", dec, &(rill_rrc_opts_t){.size = {9, 11}}, &err);
  cr_assert_eq(crop_dec, 2, "%s", err.message);
  rill_df_t* df2 = df_of("bytes", bin);
  cr_assert_eq(rill_image_flip(df2, "refused", 0, 0.0, &err), RILL_EINVAL); /* encoded bytes */
  /* a column at index 1 so that the fused crop gets index 2 like the unfused one */
  cr_assert_eq(rill_image_random_resized_crop(df2, "filler", 0, &(rill_rrc_opts_t){.size = {1, 1}}, &err), 1);
  int crop_fused = rill_image_random_resized_crop(df2, "crop", 0, &(rill_rrc_opts_t){.size = {9, 11}}, &err);
  cr_assert_eq(crop_fused, 2, "%s", err.message);
  int flip = rill_image_flip(df, "flip", dec, 1.0, &err);
  int norm = rill_image_normalize(df, "x", dec, &(rill_normalize_opts_t){.layout = RILL_LAYOUT_CHW}, &err);
  cr_assert_geq(norm, 0, "%s", err.message);
  char tb[64];
  cr_assert_str_eq(rill_type_format(&rill_df_field(df, flip)->type, tb, sizeof tb), "uint8[-1,-1,3]");
  cr_assert_str_eq(rill_type_format(&rill_df_field(df, norm)->type, tb, sizeof tb), "float32[3,-1,-1]");
  rill_array_t** a = collect(df, crop_dec, 8, 2);
  rill_array_t** b = collect(df2, crop_fused, 8, 2);
  rill_array_t** d = collect(df, dec, 8, 2);
  rill_array_t** f = collect(df, flip, 8, 2);
  rill_array_t** x = collect(df, norm, 8, 2);
  for (int i = 0; i < n; i++) {
    cr_assert(memcmp(a[i]->data, b[i]->data, 9 * 11 * 3) == 0, "row %d: fused and unfused crops differ", i);
    int64_t sd[3], sf[3], sx[3], nb = 0;
    rill_array_cell_shape(d[i], 0, sd);
    rill_array_cell_shape(f[i], 0, sf);
    rill_array_cell_shape(x[i], 0, sx);
    cr_assert(sd[0] == Hs[i] && sd[1] == Ws[i] && sd[2] == 3);
    cr_assert(sf[0] == Hs[i] && sf[1] == Ws[i] && sf[2] == 3);
    cr_assert(sx[0] == 3 && sx[1] == Hs[i] && sx[2] == Ws[i]);
    const uint8_t* pd = rill_array_cell(d[i], 0, &nb);
    const uint8_t* pf = rill_array_cell(f[i], 0, &nb);
    cr_assert_eq(nb, (int64_t)Ws[i] * Hs[i] * 3);
    const float* px = rill_array_cell(x[i], 0, &nb);
    cr_assert_eq(nb, (int64_t)Ws[i] * Hs[i] * 3 * 4);
    int W = Ws[i], H = Hs[i];
    for (int y = 0; y < H; y++)
      for (int xx = 0; xx < W; xx++)
        for (int c = 0; c < 3; c++) {
          cr_assert_eq(pf[(y * W + xx) * 3 + c], pd[(y * W + (W - 1 - xx)) * 3 + c]);
          cr_assert_float_eq(px[(c * H + y) * W + xx], pd[(y * W + xx) * 3 + c] / 255.0f, 1e-6);
        }
  }
  release_all(a, n);
  release_all(b, n);
  release_all(d, n);
  release_all(f, n);
  release_all(x, n);
  rill_df_free(df);
  rill_df_free(df2);
  rill_array_release(bin);
  for (int i = 0; i < n; i++) free(pngs[i]);
#endif
}

/* ---------------------------------------------------------------- command-line tool */

Test(image_ops, cli_demo_preview_bench) {
#if !RILL_HAVE_JPEG || !RILL_HAVE_PNG
  cr_skip_test("built without libjpeg or libpng");
#else
  const char* bin = getenv("RILL_BIN");
  if (!bin || !*bin) cr_skip_test("RILL_BIN not set (run through make test)");
  char dir[512], path[1024], cmd[4096], out[8192];
  snprintf(dir, sizeof dir, "%s/folder", rt_tmpdir());
  const char* classes[2] = {"ant", "bee"};
  uint8_t px[48 * 40 * 3];
  for (int c = 0; c < 2; c++) {
    snprintf(path, sizeof path, "%s/%s", dir, classes[c]);
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
    cr_assert_eq(system(cmd), 0);
    for (int i = 0; i < 3; i++) {
      gradient(px, 40, 48, 3);
      for (int k = 0; k < 48 * 40 * 3; k += 3) px[k] = (uint8_t)(px[k] / (c + i + 1));
      buf_t jpg = enc_jpeg(px, 48, 40, (jpeg_spec_t){.in = JCS_RGB, .quality = 90, .hs = 2, .vs = 2});
      snprintf(path, sizeof path, "%s/%s/%d.jpg", dir, classes[c], i);
      rt_write_file(path, jpg.p, jpg.n);
      free(jpg.p);
    }
  }
  snprintf(path, sizeof path, "%s/bee/broken.jpg", dir);
  FILE* f = fopen(path, "wb");
  cr_assert(f && fwrite("\xff\xd8\xff\xe0garbage", 1, 11, f) == 11);
  fclose(f);

  /* preview: a PNG grid of one batch (the broken file is skipped) */
  snprintf(cmd, sizeof cmd, "'%s' preview '%s' -o '%s/grid.png' --size 32 --batch 7 --seed 3 2>&1", bin, dir, rt_tmpdir());
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 0, "%s", out);
  cr_assert(strstr(out, "6 images of 32x32"), "%s", out);
  snprintf(path, sizeof path, "%s/grid.png", rt_tmpdir());
  png_image img;
  memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  cr_assert(png_image_begin_read_from_file(&img, path), "%s", img.message);
  cr_assert_eq(img.width, 3 * 34 + 2); /* ceil(sqrt(6)) = 3 columns of 32 + 2 px */
  cr_assert_eq(img.height, 2 * 34 + 2);
  png_image_free(&img);

  /* demo on the folder, bench images */
  snprintf(cmd, sizeof cmd, "cd '%s' && '%s' demo '%s' --size 32 --batch 4 --threads 1 2>&1", rt_tmpdir(), bin, dir);
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 0, "%s", out);
  cr_assert(strstr(out, "6 images in 2 batches") && strstr(out, "1 skipped") && strstr(out, "images/s"), "%s", out);
  cr_assert(strstr(out, "bee/broken.jpg") && strstr(out, "written in"), "skipped images are named: %s", out);
  snprintf(path, sizeof path, "%s/preview.png", rt_tmpdir());
  cr_assert(fopen(path, "rb") != NULL, "demo wrote no preview.png");
  /* each epoch counts its own images and skipped files, back to back (prefetched across the
   * epochs' ends) or cold */
  const char* modes[] = {"", " --cold-epochs"};
  const char* said[] = {"epochs back to back (prefetched across)", "epochs cold"};
  for (int m = 0; m < 2; m++) {
    snprintf(cmd, sizeof cmd, "'%s' bench images '%s' --epochs 3 --batch 4 --size 32 --threads 2%s 2>&1", bin, dir,
             modes[m]);
    cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 0, "%s", out);
    cr_assert(strstr(out, said[m]) && strstr(out, "RSS"), "%s", out);
    for (int e = 0; e < 3; e++) {
      char line[64];
      snprintf(line, sizeof line, "epoch %d: 6 images", e);
      const char* at = strstr(out, line);
      cr_assert(at, "%s missing: %s", line, out);
      const char* sk = strstr(at, "skipped ");
      cr_assert(sk && atoi(sk + 8) == 1, "epoch %d skipped one file: %s", e, out);
    }
  }

  /* usage errors: exit 2; runtime errors: exit 1 naming the file; --help: exit 0 */
  snprintf(cmd, sizeof cmd, "'%s' preview '%s' 2>&1", bin, dir);
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 2, "%s", out);
  cr_assert(strstr(out, "missing -o FILE"), "%s", out);
  snprintf(cmd, sizeof cmd, "'%s' bench images '%s' --threads many 2>&1", bin, dir);
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 2, "%s", out);
  cr_assert(strstr(out, "--threads needs an integer"), "%s", out);
  for (int k = 0; k < 3; k++) { /* digits only, as rill head's counts: no sign, no blanks */
    static const char* bad[3] = {"' 8'", "+8", "8x"};
    snprintf(cmd, sizeof cmd, "'%s' preview '%s' -o '%s/g.png' --batch %s 2>&1", bin, dir, rt_tmpdir(), bad[k]);
    cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 2, "%s", out);
    cr_assert(strstr(out, "--batch needs an integer in [1, 65536], got '"), "%s", out);
  }
  snprintf(cmd, sizeof cmd, "'%s' demo '%s' --bogus 2>&1", bin, dir);
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 2, "%s", out);
  snprintf(cmd, sizeof cmd, "'%s' demo '%s' --epochs 2 2>&1", bin, dir); /* one pass: bench's options only */
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 2, "%s", out);
  cr_assert(strstr(out, "unknown option '--epochs'"), "%s", out);
  snprintf(cmd, sizeof cmd, "'%s' demo '%s/missing' 2>&1", bin, dir);
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 1, "%s", out);
  cr_assert(strstr(out, "/missing") && strstr(out, "No such file"), "%s", out);
  snprintf(cmd, sizeof cmd, "'%s' preview '%s' -o '%s/no/such/dir/g.png' --size 16 2>&1", bin, dir, rt_tmpdir());
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 1, "%s", out);
  cr_assert(strstr(out, "cannot write") && strstr(out, "no/such/dir/g.png"), "%s", out);
  snprintf(cmd, sizeof cmd, "'%s' demo --help 2>&1", bin);
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 0, "%s", out);
  cr_assert(strstr(out, "usage: rill demo"), "%s", out);
  snprintf(cmd, sizeof cmd, "'%s' bench images --help 2>&1", bin);
  cr_assert_eq(rt_run_cmd(cmd, out, sizeof out), 0, "%s", out);
  cr_assert(strstr(out, "usage: rill bench images"), "%s", out);
#endif
}

#if RILL_HAVE_JPEG
/* Crop of a random resized crop in every epoch: a file with damaged scan data fails in every
 * epoch (the damage is below every crop), while the intact file, verified once, then has
 * the rows below its crops skipped and gives the same pixels as a fresh pipeline. */
static rill_df_t* damaged_df(rill_array_t** keep, buf_t* good, buf_t* bad, rill_error_t* err, int* col) {
  const void* bufs[2] = {good->p, bad->p};
  int64_t sizes[2] = {(int64_t)good->n, (int64_t)bad->n};
  keep[0] = binary_array(2, bufs, sizes, RILL_BINARY);
  const char* cn[1] = {"bytes"};
  const rill_array_t* arrays[1] = {keep[0]};
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_arrays(cn, arrays, 1, 1, &df, err), *err);
  *col = rill_image_random_resized_crop(
      df, "crop", 0, &(rill_rrc_opts_t){.size = {8, 8}, .scale = {0.05, 0.1}, .on_error = RILL_ON_ERROR_NULL}, err);
  cr_assert_geq(*col, 0, "%s", err->message);
  return df;
}
#endif

Test(image_ops, damaged_scan_data_fails_in_every_epoch_after_verified_files) {
#if !RILL_HAVE_JPEG
  cr_skip_test("built without libjpeg");
#else
  rill_error_t err = {0};
  enum { W = 64, H = 256 };
  uint8_t* px = malloc((size_t)W * H * 3);
  gradient(px, H, W, 3);
  buf_t good = enc_jpeg(px, W, H, (jpeg_spec_t){.in = JCS_RGB, .quality = 90, .hs = 2, .vs = 2});
  buf_t bad = {malloc(good.n + 100), good.n + 100};
  memcpy(bad.p, good.p, good.n - 2);
  memset(bad.p + good.n - 2, 0x55, 100); /* garbage in the scan before the end marker */
  bad.p[bad.n - 2] = 0xff, bad.p[bad.n - 1] = 0xd9;
  rill_array_t *keep, *keep_fresh;
  int col, col_fresh;
  rill_df_t* df = damaged_df(&keep, &good, &bad, &err, &col);
  rill_iter_t* it = NULL;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.columns = &col, .ncolumns = 1, .seed = 3}, &it, &err), err);
  for (int e = 0; e < 6; e++) {
    rill_df_t* fresh = damaged_df(&keep_fresh, &good, &bad, &err, &col_fresh);
    rill_iter_t* fit = NULL;
    RT_OK(rill_iter_new(fresh, &(rill_iter_opts_t){.columns = &col_fresh, .ncolumns = 1, .seed = 3}, &fit, &err),
          err);
    RT_OK(rill_iter_set_epoch(fit, e), err);
    if (e) RT_OK(rill_iter_set_epoch(it, e), err);
    for (int r = 0; r < 2; r++) {
      rill_row_t row, frow;
      RT_OK(rill_iter_next(it, &row, &err), err);
      RT_OK(rill_iter_next(fit, &frow, &err), err);
      const rill_array_t *a = rill_row_get(&row, 0), *f = rill_row_get(&frow, 0);
      cr_assert_eq(rill_array_is_valid(a, 0), r == 0, "epoch %d row %d", e, r);
      cr_assert_eq(rill_array_is_valid(f, 0), r == 0, "epoch %d row %d (fresh)", e, r);
      if (r == 0) cr_assert(memcmp(a->data, f->data, 8 * 8 * 3) == 0, "epoch %d: pixels differ", e);
    }
    rill_iter_free(fit);
    rill_df_free(fresh);
    rill_array_release(keep_fresh);
  }
  rill_iter_free(it);
  rill_df_free(df);
  rill_array_release(keep);
  free(bad.p);
  free(good.p);
  free(px);
#endif
}

/* ---------------------------------------------------------------- resize fused with normalize */

/* The fused kernel against the two it replaces (resize into a uint8 image, then normalize
 * it): the same bytes for 1, 3 and 4 channels, odd sizes, windows at the image's edges with
 * fractional regions, up- and downscaling, both interpolations, flip, float16, both layouts,
 * a misaligned destination and an aligned one, a large output (144 x 152 float32 CHW), the
 * identity size (no resampling), portable and vector loops; nothing written past the end. */
Test(image_ops, resize_normalize_kernel_matches_resize_then_normalize) {
  enum { SW = 53, SH = 41, GUARD = 64 };
  rill__img_scratch_t s = {0};
  const rill__img_norm_t k = {{0.017f, 0.0171f, 0.0172f, 0.5f}, {-2.1f, -2.0f, -1.8f, 0.25f}};
  /* windows (x0, y0, w, h) and regions (fx, fy, fw, fh) within them */
  const int win[4][4] = {{0, 0, SW, SH}, {20, 9, SW - 20, SH - 9}, {0, 30, 17, SH - 30}, {5, 3, 24, 16}};
  const double reg[4][4] = {{0, 0, SW, SH}, {0.25, 0.5, SW - 20 - 0.75, SH - 9 - 0.5}, {0, 0, 17, SH - 30},
                            {0, 0, 24, 16}};
  /* (h, w); 144 x 152: a large output, 3 channels only; the last: window 3's size */
  const int outs[5][2] = {{37, 23}, {8, 64}, {13, 160}, {144, 152}, {16, 24}};
  int have = rill__image_set_simd(1);
  /* one pair of destinations, 64-byte aligned, for the largest output */
  size_t cap = (size_t)144 * 152 * 4 * 4 + 64 + GUARD;
  uint8_t* want = aligned_alloc(64, cap);
  uint8_t* got = aligned_alloc(64, cap);
  for (int C = 1; C <= 4; C++) {
    if (C == 2) continue;
    uint8_t* src = malloc((size_t)SW * SH * C);
    uint32_t seed = 77u + (uint32_t)C;
    for (int i = 0; i < SW * SH * C; i++) src[i] = (uint8_t)lcg(&seed);
    for (int simd = 0; simd <= have; simd++) {
      rill__image_set_simd(simd);
      for (int wi = 0; wi < 4; wi++)
        for (int oi = 0; oi < 5; oi++) {
          if ((oi == 4) != (wi == 3)) continue; /* the identity size only with its window */
          if (oi == 3 && C != 3) continue;      /* the large output: 3 channels only */
          int OH = outs[oi][0], OW = outs[oi][1];
          uint8_t* u8 = malloc((size_t)OH * OW * C);
          for (int interp = 0; interp < 2; interp++)
            for (int f16 = 0; f16 <= 1; f16++)
              for (int chw = 0; chw <= 1; chw++)
                for (int flip = 0; flip <= 1; flip++)
                  for (int mis = 0; mis <= 1; mis++) {
                    rill_interp_t ip = interp ? RILL_INTERP_AREA : RILL_INTERP_BILINEAR;
                    size_t bytes = (size_t)OH * OW * C * (f16 ? 2 : 4);
                    size_t total = bytes + 64 + GUARD;
                    size_t off = mis ? 4 : 0;
                    memset(want, 0xab, total);
                    memset(got, 0xab, total);
                    cr_assert_eq(rill__img_resize(&s, src, (int64_t)SW * C, C, win[wi][0], win[wi][1], win[wi][2],
                                                  win[wi][3], reg[wi][0], reg[wi][1], reg[wi][2], reg[wi][3], u8, OW,
                                                  OH, ip),
                                 RILL_OK);
                    rill__img_normalize(u8, OH, OW, C, flip, &k, f16, chw, want + off);
                    cr_assert_eq(rill__img_resize_normalize(&s, src, (int64_t)SW * C, C, win[wi][0], win[wi][1],
                                                            win[wi][2], win[wi][3], reg[wi][0], reg[wi][1], reg[wi][2],
                                                            reg[wi][3], OW, OH, ip, flip, &k, f16, chw, got + off),
                                 RILL_OK);
                    cr_assert(memcmp(want, got, total) == 0,
                              "C %d simd %d window %d out %dx%d interp %d f16 %d chw %d flip %d misaligned %d", C, simd,
                              wi, OH, OW, interp, f16, chw, flip, mis);
                    for (size_t g = off + bytes; g < total; g++)
                      cr_assert_eq(got[g], 0xab, "written past the end (C %d out %dx%d)", C, OH, OW);
                  }
          free(u8);
        }
    }
    free(src);
  }
  rill__image_set_simd(1);
  rill__img_scratch_free(&s);
  free(want);
  free(got);
}

/* A training-sized downscale (a 3-channel window of 301 x 263 to 224 x 224, and to 224 x 220,
 * whose rows are not a multiple of eight pixels): the blend-then-resample path of every
 * output row; and the same window narrowed but heightened (to 300 x 224 and 300 x 220: the
 * planar path with two-load blocks); the same bytes as
 * resizing to uint8 and then normalizing, float32 and float16, flipped or not, aligned or
 * not. */
Test(image_ops, resize_normalize_downscale_matches_resize_then_normalize) {
  enum { SW = 320, SH = 280, GUARD = 64 };
  rill__img_scratch_t s = {0};
  const rill__img_norm_t k = {{0.0171f, 0.0175f, 0.0174f, 0}, {-2.1179f, -2.0357f, -1.8044f, 0}};
  uint8_t* src = malloc((size_t)SW * SH * 3);
  uint32_t seed = 991;
  for (int i = 0; i < SW * SH * 3; i++) src[i] = (uint8_t)lcg(&seed);
  const int ows[2] = {224, 220}, ohs[2] = {224, 300};
  size_t cap = (size_t)300 * 224 * 3 * 4 + 64 + GUARD;
  uint8_t* want = aligned_alloc(64, cap);
  uint8_t* got = aligned_alloc(64, cap);
  uint8_t* u8 = malloc((size_t)300 * 224 * 3);
  int have = rill__image_set_simd(1);
  for (int z = 0; z < 4; z++)
    for (int f16 = 0; f16 <= 1; f16++)
      for (int flip = 0; flip <= 1; flip++)
        for (int mis = 0; mis <= 1; mis++) {
          int OW = ows[z % 2], OH = ohs[z / 2];
          size_t bytes = (size_t)OH * OW * 3 * (f16 ? 2 : 4), total = bytes + 64 + GUARD, off = mis ? 4 : 0;
          memset(want, 0xab, total);
          memset(got, 0xab, total);
          cr_assert_eq(rill__img_resize(&s, src, SW * 3, 3, 11, 7, 301, 263, 0.5, 0.25, 300.0, 262.5, u8, OW, OH,
                                        RILL_INTERP_BILINEAR),
                       RILL_OK);
          rill__img_normalize(u8, OH, OW, 3, flip, &k, f16, 1, want + off);
          cr_assert_eq(rill__img_resize_normalize(&s, src, SW * 3, 3, 11, 7, 301, 263, 0.5, 0.25, 300.0, 262.5, OW, OH,
                                                  RILL_INTERP_BILINEAR, flip, &k, f16, 1, got + off),
                       RILL_OK);
          cr_assert(memcmp(want, got, total) == 0, "out %dx%d f16 %d flip %d misaligned %d (simd %d)", OH, OW, f16,
                    flip, mis, have);
        }
  rill__img_scratch_free(&s);
  free(src);
  free(u8);
  free(want);
  free(got);
}

/* Random shapes through the fused 3-channel CHW kernels: source windows of 1-120 pixels
 * each way, fractional regions, outputs of 1-160 (so blocks of eight outputs span 0-31
 * source pixels, on both sides of the planar paths' 8 and 16), both interpolations, flip,
 * float16, aligned or not; sources of random bytes, of the two extremes only (0 and 255), or
 * all 255 (the fused vector loops round without the uint8 path's clamp, so the ends of the
 * range must come out the same). Each source image is allocated to its exact size, so a read
 * past it is seen by AddressSanitizer; the bytes must equal resize-then-normalize and nothing
 * may be written past the output. */
Test(image_ops, resize_normalize_random_shapes_match_resize_then_normalize) {
  enum { GUARD = 64, CASES = 400 };
  rill__img_scratch_t s = {0};
  const rill__img_norm_t k = {{0.0171f, 0.0175f, 0.0174f, 0}, {-2.1179f, -2.0357f, -1.8044f, 0}};
  size_t cap = (size_t)160 * 160 * 3 * 4 + 64 + GUARD;
  uint8_t* want = aligned_alloc(64, cap);
  uint8_t* got = aligned_alloc(64, cap);
  uint8_t* u8 = malloc((size_t)160 * 160 * 3);
  uint32_t seed = 4242;
  int have = rill__image_set_simd(1);
  for (int t = 0; t < CASES; t++) {
    int SW = 1 + (int)(lcg(&seed) % 120), SH = 1 + (int)(lcg(&seed) % 120);
    int w = 1 + (int)(lcg(&seed) % (uint32_t)SW), h = 1 + (int)(lcg(&seed) % (uint32_t)SH);
    int x0 = (int)(lcg(&seed) % (uint32_t)(SW - w + 1)), y0 = (int)(lcg(&seed) % (uint32_t)(SH - h + 1));
    if (lcg(&seed) % 2) x0 = SW - w, y0 = SH - h; /* half the windows end at the image's last byte */
    double fx = (lcg(&seed) % 4) * 0.25 * (w > 1), fy = (lcg(&seed) % 4) * 0.25 * (h > 1);
    double fw = w - fx - (lcg(&seed) % 3) * 0.25 * (w > 1), fh = h - fy - (lcg(&seed) % 3) * 0.25 * (h > 1);
    if (fw <= 0) fw = w - fx;
    if (fh <= 0) fh = h - fy;
    int OW = 1 + (int)(lcg(&seed) % 160), OH = 1 + (int)(lcg(&seed) % 160);
    rill_interp_t ip = lcg(&seed) % 2 ? RILL_INTERP_AREA : RILL_INTERP_BILINEAR;
    int flip = (int)(lcg(&seed) % 2), f16 = (int)(lcg(&seed) % 2), mis = (int)(lcg(&seed) % 2);
    rill__image_set_simd(t % 4 == 3 ? 0 : have);
    uint8_t* src = malloc((size_t)SW * SH * 3);
    for (int i = 0; i < SW * SH * 3; i++) {
      uint32_t r = lcg(&seed);
      src[i] = t % 3 == 0 ? (uint8_t)r : t % 3 == 1 ? (uint8_t)(r >> 7 & 1 ? 255 : 0) : 255;
    }
    size_t bytes = (size_t)OH * OW * 3 * (f16 ? 2 : 4), total = bytes + 64 + GUARD, off = mis ? 4 : 0;
    memset(want, 0xab, total);
    memset(got, 0xab, total);
    cr_assert_eq(rill__img_resize(&s, src, (int64_t)SW * 3, 3, x0, y0, w, h, fx, fy, fw, fh, u8, OW, OH, ip), RILL_OK);
    rill__img_normalize(u8, OH, OW, 3, flip, &k, f16, 1, want + off);
    cr_assert_eq(rill__img_resize_normalize(&s, src, (int64_t)SW * 3, 3, x0, y0, w, h, fx, fy, fw, fh, OW, OH, ip, flip,
                                            &k, f16, 1, got + off),
                 RILL_OK);
    cr_assert(memcmp(want, got, total) == 0,
              "case %d: %dx%d image, window (%d,%d) %dx%d, region (%g,%g) %gx%g -> %dx%d interp %d flip %d f16 %d mis %d", t,
              SW, SH, x0, y0, w, h, fx, fy, fw, fh, OW, OH, (int)ip, flip, f16, mis);
    free(src);
  }
  rill__image_set_simd(have);
  rill__img_scratch_free(&s);
  free(u8);
  free(want);
  free(got);
}

/* One dataframe of the pipeline: source column `src` of encoded bytes (with paths) or uint8
 * images, resample (random resized crop or resize) to OH x OW, normalize; fused unless
 * rill__image_set_fuse(0) was called. Returns the normalize column. */
typedef struct fuse_case {
  int kind;          /* 0: JPEG 4:2:0, 1: JPEG 4:4:4, 2: progressive JPEG 4:2:0, 3: PNG, 4: uint8 images */
  int C, rrc, OH, OW;
  rill_interp_t interp;
  double flip;
  rill_dtype_t dtype;
  rill_layout_t layout;
} fuse_case_t;

static int fuse_pipeline(rill_df_t* df, const fuse_case_t* fc, int* resample) {
  rill_error_t err = {0};
  int src = rill_df_column(df, fc->kind == 4 ? "img" : "bytes");
  if (fc->rrc)
    *resample = rill_image_random_resized_crop(
        df, "r", src, &(rill_rrc_opts_t){.size = {fc->OH, fc->OW}, .interpolation = fc->interp, .channels = fc->kind == 4 ? 0 : fc->C},
        &err);
  else
    *resample = rill_image_resize(
        df, "r", src, &(rill_resize_opts_t){.size = {fc->OH, fc->OW}, .interpolation = fc->interp, .channels = fc->kind == 4 ? 0 : fc->C},
        &err);
  cr_assert_geq(*resample, 0, "%s", err.message);
  int x = rill_image_normalize(df, "x", *resample,
                               &(rill_normalize_opts_t){.flip = fc->flip, .mean = {0.485, 0.456, 0.406, 0.5},
                                                        .std = {0.229, 0.224, 0.225, 0.25}, .dtype = fc->dtype,
                                                        .layout = fc->layout},
                               &err);
  cr_assert_geq(x, 0, "%s", err.message);
  return x;
}

/* Normalize over a resample computes both itself (rill_image_normalize fuses them): the
 * results equal those of the two stages, unbatched and batched, with 0 and 2 threads, for
 * JPEG (4:2:0, 4:4:4, progressive, gray, RGBA), PNG and uint8 inputs; the resample's column
 * keeps its own results. */
Test(image_ops, normalize_fused_with_resample_matches_two_stages) {
  enum { N = 7, W = 83, H = 61 };
  const fuse_case_t cases[] = {
      {0, 3, 1, 24, 24, RILL_INTERP_BILINEAR, 0.5, RILL_FLOAT32, RILL_LAYOUT_CHW},
      {1, 3, 1, 17, 13, RILL_INTERP_AREA, 1.0, RILL_FLOAT16, RILL_LAYOUT_CHW},
      {2, 3, 1, 40, 32, RILL_INTERP_BILINEAR, 0.5, RILL_FLOAT32, RILL_LAYOUT_HWC},
      {0, 1, 1, 15, 21, RILL_INTERP_BILINEAR, 0.5, RILL_FLOAT32, RILL_LAYOUT_CHW},
      {0, 4, 0, 30, 50, RILL_INTERP_AREA, 0.5, RILL_FLOAT16, RILL_LAYOUT_HWC},
      {2, 3, 0, 160, 160, RILL_INTERP_BILINEAR, 0.5, RILL_FLOAT32, RILL_LAYOUT_CHW},
      {3, 3, 1, 19, 23, RILL_INTERP_BILINEAR, 0.5, RILL_FLOAT32, RILL_LAYOUT_CHW},
      {4, 3, 1, 24, 16, RILL_INTERP_BILINEAR, 0.5, RILL_FLOAT32, RILL_LAYOUT_CHW},
      {4, 1, 0, 9, 31, RILL_INTERP_AREA, 0.0, RILL_FLOAT16, RILL_LAYOUT_HWC},
      {4, 4, 1, 12, 12, RILL_INTERP_BILINEAR, 1.0, RILL_FLOAT32, RILL_LAYOUT_CHW},
  };
  rill_error_t err = {0};
  uint8_t* px = malloc((size_t)W * H * 3);
  uint32_t seed = 21;
  gradient(px, H, W, 3);
  for (int i = 0; i < W * H * 3; i++) px[i] = (uint8_t)(px[i] / 2 + (lcg(&seed) & 63)); /* texture */
  for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
    const fuse_case_t* fc = &cases[ci];
#if !RILL_HAVE_JPEG
    if (fc->kind <= 2) continue;
#endif
#if !RILL_HAVE_PNG
    if (fc->kind == 3) continue;
#endif
    rill_array_t *col = NULL, *paths = NULL;
    buf_t enc[N] = {{0}};
    if (fc->kind == 4) {
      col = random_images(N, H, W, fc->C, 30u + (uint32_t)ci);
    } else {
      const void* bufs[N];
      int64_t sizes[N];
      const void* names[N];
      int64_t nlen[N];
      char name[N][24];
      for (int i = 0; i < N; i++) {
        for (int k = 0; k < W * H * 3; k++) px[k] = (uint8_t)(px[k] + 13 * i);
#if RILL_HAVE_JPEG
        if (fc->kind <= 2)
          enc[i] = enc_jpeg(px, W, H, (jpeg_spec_t){.in = JCS_RGB, .quality = 85, .hs = fc->kind == 1 ? 1 : 2,
                                                    .vs = fc->kind == 1 ? 1 : 2, .progressive = fc->kind == 2});
#endif
#if RILL_HAVE_PNG
        if (fc->kind == 3) enc[i] = enc_png(px, W, H, PNG_COLOR_TYPE_RGB, 8, 0, NULL, 0, NULL, 0);
#endif
        bufs[i] = enc[i].p;
        sizes[i] = (int64_t)enc[i].n;
        snprintf(name[i], sizeof name[i], "f%d.img", i);
        names[i] = name[i];
        nlen[i] = (int64_t)strlen(name[i]);
      }
      col = binary_array(N, bufs, sizes, RILL_BINARY);
      paths = binary_array(N, names, nlen, RILL_STRING);
    }
    rill_df_t* df[2];
    int x[2], r[2];
    for (int f = 0; f < 2; f++) {
      const char* cn[2] = {fc->kind == 4 ? "img" : "bytes", "path"};
      const rill_array_t* arrays[2] = {col, paths};
      RT_OK(rill_df_from_arrays(cn, arrays, paths ? 2 : 1, 1, &df[f], &err), err);
      int was = rill__image_set_fuse(f == 0);
      x[f] = fuse_pipeline(df[f], fc, &r[f]);
      rill__image_set_fuse(was);
      cr_assert(x[f] == x[0] && r[f] == r[0]); /* the same columns: the same generators */
    }
    size_t cell = (size_t)fc->OH * fc->OW * fc->C * rill_dtype_size(fc->dtype);
    for (int threads = 0; threads <= 2; threads += 2) {
      int th = threads ? threads : RILL_THREADS_NONE;
      rill_array_t** fused = collect(df[0], x[0], 9, th);
      rill_array_t** plain = collect(df[1], x[1], 9, th);
      rill_array_t** crop_f = collect(df[0], r[0], 9, th);
      rill_array_t** crop_p = collect(df[1], r[1], 9, th);
      for (int i = 0; i < N; i++) {
        cr_assert(memcmp(fused[i]->data, plain[i]->data, cell) == 0, "case %zu row %d threads %d: fused differs", ci, i,
                  threads);
        cr_assert(memcmp(crop_f[i]->data, crop_p[i]->data, (size_t)fc->OH * fc->OW * fc->C) == 0, "case %zu row %d", ci,
                  i);
      }
      /* batched: the fused stage writes into the batch's slots */
      rill_df_t* b = NULL;
      RT_OK(rill_df_batch(df[0], &x[0], 1, 3, NULL, &b, &err), err);
      rill_iter_t* it = NULL;
      RT_OK(rill_iter_new(b, &(rill_iter_opts_t){.seed = 9, .threads = th}, &it, &err), err);
      rill_row_t row;
      int seen = 0, rc;
      while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) {
        const rill_array_t* t = rill_row_get(&row, 0);
        for (int64_t j = 0; j < t->length; j++, seen++)
          cr_assert(memcmp((const uint8_t*)t->data + (size_t)j * cell, plain[seen]->data, cell) == 0,
                    "case %zu batched row %d", ci, seen);
      }
      cr_assert_eq(rc, RILL_END, "%s", err.message);
      cr_assert_eq(seen, N);
      rill_iter_free(it);
      rill_df_free(b);
      release_all(fused, N);
      release_all(plain, N);
      release_all(crop_f, N);
      release_all(crop_p, N);
    }
    for (int f = 0; f < 2; f++) rill_df_free(df[f]);
    rill_array_release(col);
    rill_array_release(paths);
    for (int i = 0; i < N; i++) free(enc[i].p);
  }
  free(px);
}

/* Errors of a normalize fused with a random resized crop are the crop's: its name, the file
 * and the row under RAISE; the rows dropped and counted under SKIP. */
Test(image_ops, normalize_fused_with_crop_reports_bad_images) {
#if !RILL_HAVE_JPEG || !RILL_HAVE_PNG
  cr_skip_test("built without libjpeg or libpng");
#else
  bad_files_run(0, 1);
  bad_files_run(1, 1);
#endif
}
