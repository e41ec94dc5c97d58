/* Builds a deterministic corpus in ImageFolder layout from a few real photos:
 *   mkcorpus [--imagenet] OUT_DIR PER_CLASS CLASS=PHOTO [CLASS=PHOTO ...]
 * For each class, PER_CLASS JPEGs OUT_DIR/CLASS/CLASS_NNNN.jpg are cut from the class's photo.
 * Default: a random crop (25-100% of the area, aspect ratio 3/4..4/3), scaled down so that
 * the longer side is 160..500 px, maybe mirrored, encoded at quality 75..95 with 4:2:0, 4:2:2
 * or 4:4:4 chroma subsampling, some progressive.
 * --imagenet: sizes and file sizes distributed like ImageNet's training set: most images
 * 500x375, 375x500 or 500x333 (some 333x500), 10% smaller (longer side 200..499) and 5%
 * larger (longer side 501..800); a crop of 60-100% of the largest crop of that aspect,
 * resized to the size, with a light sensor-like grain (the photos are smoother than camera
 * pictures, and the grain brings the compressed size to ImageNet's ~110 KB mean), quality
 * 75..95, mostly 4:2:0, a few progressive.
 * The same arguments always give the same files. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jpeglib.h>
#include <png.h>

#ifndef SHARPEN
#define SHARPEN 2.0 /* --imagenet: unsharp-mask amount */
#endif
#ifndef GRAIN
#define GRAIN 24.0 /* --imagenet: grain amplitude */
#endif

typedef struct image {
  int w, h;
  uint8_t* px; /* RGB */
} image_t;

static uint64_t splitmix(uint64_t* s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static double uniform(uint64_t* s) { return (double)(splitmix(s) >> 11) * (1.0 / 9007199254740992.0); }

typedef struct jerr {
  struct jpeg_error_mgr mgr;
  jmp_buf jump;
} jerr_t;
static void jerr_exit(j_common_ptr c) {
  char msg[JMSG_LENGTH_MAX];
  c->err->format_message(c, msg);
  fprintf(stderr, "mkcorpus: libjpeg: %s\n", msg);
  longjmp(((jerr_t*)c->err)->jump, 1);
}

static int load_jpeg(const char* path, image_t* im) {
  FILE* f = fopen(path, "rb");
  if (!f) return -1;
  struct jpeg_decompress_struct c;
  jerr_t e;
  c.err = jpeg_std_error(&e.mgr);
  e.mgr.error_exit = jerr_exit;
  im->px = NULL;
  if (setjmp(e.jump)) {
    jpeg_destroy_decompress(&c);
    fclose(f);
    free(im->px);
    return -1;
  }
  jpeg_create_decompress(&c);
  jpeg_stdio_src(&c, f);
  jpeg_read_header(&c, TRUE);
  c.out_color_space = JCS_RGB;
  jpeg_start_decompress(&c);
  im->w = (int)c.output_width;
  im->h = (int)c.output_height;
  im->px = malloc((size_t)im->w * (size_t)im->h * 3);
  if (!im->px) longjmp(e.jump, 1);
  while (c.output_scanline < c.output_height) {
    JSAMPROW row = im->px + (size_t)c.output_scanline * (size_t)im->w * 3;
    jpeg_read_scanlines(&c, &row, 1);
  }
  jpeg_finish_decompress(&c);
  jpeg_destroy_decompress(&c);
  fclose(f);
  return 0;
}

static int load_png(const char* path, image_t* im) {
  png_image p;
  memset(&p, 0, sizeof p);
  p.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_file(&p, path)) return -1;
  p.format = PNG_FORMAT_RGB;
  im->w = (int)p.width;
  im->h = (int)p.height;
  im->px = malloc(PNG_IMAGE_SIZE(p));
  if (!im->px || !png_image_finish_read(&p, NULL, im->px, 0, NULL)) {
    png_image_free(&p);
    free(im->px);
    return -1;
  }
  return 0;
}

/* Crop (x, y, cw, ch) of src, resized to ow x oh by averaging ss x ss bilinear samples. */
static void crop_resize(const image_t* src, double x, double y, double cw, double ch, int flip, image_t* dst) {
  double sx = cw / dst->w, sy = ch / dst->h;
  int ss = (int)ceil(sx > sy ? sx : sy);
  if (ss < 1) ss = 1;
  for (int oy = 0; oy < dst->h; oy++)
    for (int ox = 0; ox < dst->w; ox++) {
      double acc[3] = {0, 0, 0};
      for (int j = 0; j < ss; j++)
        for (int i = 0; i < ss; i++) {
          double fx = x + (ox + (i + 0.5) / ss) * sx - 0.5, fy = y + (oy + (j + 0.5) / ss) * sy - 0.5;
          if (fx < 0) fx = 0;
          if (fy < 0) fy = 0;
          if (fx > src->w - 1) fx = src->w - 1;
          if (fy > src->h - 1) fy = src->h - 1;
          int x0 = (int)fx, y0 = (int)fy;
          int x1 = x0 + 1 < src->w ? x0 + 1 : x0, y1 = y0 + 1 < src->h ? y0 + 1 : y0;
          double ax = fx - x0, ay = fy - y0;
          for (int k = 0; k < 3; k++) {
            double a = src->px[((size_t)y0 * src->w + x0) * 3 + k], b = src->px[((size_t)y0 * src->w + x1) * 3 + k];
            double c = src->px[((size_t)y1 * src->w + x0) * 3 + k], d = src->px[((size_t)y1 * src->w + x1) * 3 + k];
            acc[k] += (a * (1 - ax) + b * ax) * (1 - ay) + (c * (1 - ax) + d * ax) * ay;
          }
        }
      int tx = flip ? dst->w - 1 - ox : ox;
      for (int k = 0; k < 3; k++) {
        double v = acc[k] / (ss * ss) + 0.5;
        dst->px[((size_t)oy * dst->w + tx) * 3 + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
      }
    }
}

/* Separable triangle-filter resize of the crop (x, y, cw, ch) of src to dst (the filter
 * widens with the downscale factor, so downscaling averages). Faster than crop_resize; used
 * for --imagenet. */
typedef struct taps {
  int* first;
  int* n;
  float* w; /* n[o] weights from first[o], MAXTAPS per output index */
} taps_t;
#define MAXTAPS 16

static void taps_make(int in, double off, double len, int out, taps_t* t) {
  double scale = len / out, support = scale > 1 ? scale : 1;
  t->first = malloc(sizeof(int) * (size_t)out);
  t->n = malloc(sizeof(int) * (size_t)out);
  t->w = calloc((size_t)out * MAXTAPS, sizeof(float));
  for (int o = 0; o < out; o++) {
    double c = off + (o + 0.5) * scale - 0.5;
    int lo = (int)ceil(c - support), hi = (int)floor(c + support);
    if (hi - lo + 1 > MAXTAPS) hi = lo + MAXTAPS - 1;
    double sum = 0, w[MAXTAPS];
    int first = -1, n = 0;
    for (int i = lo; i <= hi; i++) {
      double v = 1 - fabs(i - c) / support;
      if (v <= 0) continue;
      int k = i < 0 ? 0 : i > in - 1 ? in - 1 : i;
      if (first < 0) first = k;
      if (k - first >= MAXTAPS) break;
      if (k - first + 1 > n) {
        for (int z = n; z <= k - first; z++) w[z] = 0;
        n = k - first + 1;
      }
      w[k - first] += v;
      sum += v;
    }
    if (first < 0) first = (int)(c < 0 ? 0 : c > in - 1 ? in - 1 : c), n = 1, w[0] = sum = 1;
    t->first[o] = first;
    t->n[o] = n;
    for (int z = 0; z < n; z++) t->w[(size_t)o * MAXTAPS + z] = (float)(w[z] / sum);
  }
}

static void taps_free(taps_t* t) {
  free(t->first);
  free(t->n);
  free(t->w);
}

static void crop_resize_fast(const image_t* src, double x, double y, double cw, double ch, int flip, image_t* dst) {
  taps_t tx, ty;
  taps_make(src->w, x, cw, dst->w, &tx);
  taps_make(src->h, y, ch, dst->h, &ty);
  float* rows = malloc(sizeof(float) * (size_t)src->h * (size_t)dst->w * 3); /* horizontal pass */
  for (int r = 0; r < src->h; r++) {
    const uint8_t* s = src->px + (size_t)r * src->w * 3;
    float* d = rows + (size_t)r * dst->w * 3;
    for (int o = 0; o < dst->w; o++) {
      const float* w = tx.w + (size_t)o * MAXTAPS;
      const uint8_t* p = s + (size_t)tx.first[o] * 3;
      float a0 = 0, a1 = 0, a2 = 0;
      for (int k = 0; k < tx.n[o]; k++, p += 3) a0 += w[k] * p[0], a1 += w[k] * p[1], a2 += w[k] * p[2];
      int t = flip ? dst->w - 1 - o : o;
      d[3 * t] = a0, d[3 * t + 1] = a1, d[3 * t + 2] = a2;
    }
  }
  for (int o = 0; o < dst->h; o++) {
    uint8_t* d = dst->px + (size_t)o * dst->w * 3;
    const float* w = ty.w + (size_t)o * MAXTAPS;
    for (int i = 0; i < dst->w * 3; i++) {
      float acc = 0;
      for (int k = 0; k < ty.n[o]; k++) acc += w[k] * rows[(size_t)(ty.first[o] + k) * dst->w * 3 + i];
      acc += 0.5f;
      d[i] = (uint8_t)(acc < 0 ? 0 : acc > 255 ? 255 : acc);
    }
  }
  free(rows);
  taps_free(&tx);
  taps_free(&ty);
}

static int save_jpeg(const char* path, const image_t* im, int quality, int hs, int vs, int progressive) {
  FILE* f = fopen(path, "wb");
  if (!f) return -1;
  struct jpeg_compress_struct c;
  jerr_t e;
  c.err = jpeg_std_error(&e.mgr);
  e.mgr.error_exit = jerr_exit;
  if (setjmp(e.jump)) {
    jpeg_destroy_compress(&c);
    fclose(f);
    return -1;
  }
  jpeg_create_compress(&c);
  jpeg_stdio_dest(&c, f);
  c.image_width = (JDIMENSION)im->w;
  c.image_height = (JDIMENSION)im->h;
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, quality, TRUE);
  c.comp_info[0].h_samp_factor = hs;
  c.comp_info[0].v_samp_factor = vs;
  if (progressive) jpeg_simple_progression(&c);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = im->px + (size_t)c.next_scanline * (size_t)im->w * 3;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  return fclose(f) == 0 ? 0 : -1;
}

/* Adds deterministic grain: noise of amplitude `amp` per channel (a rounded bell shape in
 * [-2 amp, 2 amp), standard deviation about 0.58 amp). */
static void add_grain(image_t* im, uint64_t seed, double amp) {
  uint64_t s = seed;
  size_t n = (size_t)im->w * (size_t)im->h * 3;
  int table[1024];
  for (int i = 0; i < 1024; i++) table[i] = (int)floor(((i & 0xff) + (i >> 8) * 255.0 / 3 - 255.0) / 127.5 * amp * 0.75 + 0.5);
  for (size_t i = 0; i < n; i += 6) {
    uint64_t r = splitmix(&s);
    for (size_t k = 0; k < 6 && i + k < n; k++, r >>= 10) {
      int v = im->px[i + k] + table[r & 1023];
      im->px[i + k] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
  }
}

/* Unsharp mask (px + amount * (px - 3x3 box blur)), the sharpening cameras apply. */
static void sharpen(image_t* im, double amount) {
  size_t row = (size_t)im->w * 3, n = row * (size_t)im->h;
  uint8_t* src = malloc(n);
  int* hs = malloc(sizeof(int) * n); /* horizontal sums of 3 */
  if (!src || !hs) {
    free(src);
    free(hs);
    return;
  }
  memcpy(src, im->px, n);
  for (int y = 0; y < im->h; y++)
    for (int x = 0; x < im->w; x++) {
      const uint8_t* r = src + (size_t)y * row;
      size_t l = (size_t)(x > 0 ? x - 1 : 0) * 3, c = (size_t)x * 3, rr = (size_t)(x + 1 < im->w ? x + 1 : x) * 3;
      for (int k = 0; k < 3; k++) hs[(size_t)y * row + c + k] = r[l + k] + r[c + k] + r[rr + k];
    }
  int a = (int)lround(amount * 256);
  for (int y = 0; y < im->h; y++) {
    const int* up = hs + (size_t)(y > 0 ? y - 1 : 0) * row;
    const int* mid = hs + (size_t)y * row;
    const int* dn = hs + (size_t)(y + 1 < im->h ? y + 1 : y) * row;
    for (size_t i = 0; i < row; i++) {
      int c = src[(size_t)y * row + i], sum = up[i] + mid[i] + dn[i];
      int v = c + (a * (9 * c - sum) / 9 + 128) / 256;
      im->px[(size_t)y * row + i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
    }
  }
  free(hs);
  free(src);
}

/* ImageNet-like output size, crop and encoding of image j (see the header comment). */
static void imagenet_params(uint64_t* s, const image_t* src, double* x, double* y, double* cw, double* ch,
                            int* ow, int* oh) {
  double r = uniform(s);
  if (r < 0.55) *ow = 500, *oh = 375;
  else if (r < 0.70) *ow = 375, *oh = 500;
  else if (r < 0.80) *ow = 500, *oh = 333;
  else if (r < 0.85) *ow = 333, *oh = 500;
  else {
    int lo = r < 0.95 ? 200 : 501, hi = r < 0.95 ? 499 : 800;
    int side = lo + (int)((hi - lo + 1) * uniform(s));
    double aspect = exp(log(0.75) + (log(4.0 / 3) - log(0.75)) * uniform(s));
    *ow = aspect >= 1 ? side : (int)lround(side * aspect);
    *oh = aspect >= 1 ? (int)lround(side / aspect) : side;
  }
  double aspect = (double)*ow / *oh; /* the largest crop of this aspect, then 60-100% of its area */
  double mw = src->w, mh = src->w / aspect;
  if (mh > src->h) mh = src->h, mw = src->h * aspect;
  double f = sqrt(0.6 + 0.4 * uniform(s));
  *cw = mw * f;
  *ch = mh * f;
  *x = (src->w - *cw) * uniform(s);
  *y = (src->h - *ch) * uniform(s);
}

int main(int argc, char** argv) {
  int imagenet = argc > 1 && strcmp(argv[1], "--imagenet") == 0;
  if (imagenet) argc--, argv++;
  if (argc < 4) {
    fprintf(stderr, "usage: mkcorpus [--imagenet] OUT_DIR PER_CLASS CLASS=PHOTO...\n");
    return 2;
  }
  const char* out = argv[1];
  int per = atoi(argv[2]);
  if (per <= 0 || (mkdir(out, 0777) != 0 && errno != EEXIST)) {
    fprintf(stderr, "mkcorpus: bad PER_CLASS or cannot create %s\n", out);
    return 2;
  }
  for (int a = 3; a < argc; a++) {
    char* eq = strchr(argv[a], '=');
    if (!eq) {
      fprintf(stderr, "mkcorpus: expected CLASS=PHOTO, got %s\n", argv[a]);
      return 2;
    }
    *eq = 0;
    const char *cls = argv[a], *photo = eq + 1;
    image_t src;
    size_t pl = strlen(photo);
    int is_png = pl > 4 && strcmp(photo + pl - 4, ".png") == 0;
    if ((is_png ? load_png(photo, &src) : load_jpeg(photo, &src)) != 0) {
      fprintf(stderr, "mkcorpus: cannot read %s\n", photo);
      return 1;
    }
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s/%s", out, cls);
    if (mkdir(dir, 0777) != 0 && errno != EEXIST) {
      fprintf(stderr, "mkcorpus: cannot create %s\n", dir);
      return 1;
    }
    for (int j = 0; j < per; j++) {
      uint64_t s = 0x5eedull * 1000003u + (uint64_t)(a - 3) * 100003u + (uint64_t)j;
      if (imagenet) { /* seeded by the class name: the files do not depend on argument order */
        s = 0x1a2b3c4d5e6fULL + (uint64_t)j * 0x9e3779b97f4a7c15ull;
        for (const char* q = cls; *q; q++) s = (s ^ (uint8_t)*q) * 0x100000001b3ull;
        double x, y, cw, ch;
        image_t im = {0, 0, NULL};
        imagenet_params(&s, &src, &x, &y, &cw, &ch, &im.w, &im.h);
        im.px = malloc((size_t)im.w * (size_t)im.h * 3);
        if (!im.px) return 1;
        crop_resize_fast(&src, x, y, cw, ch, uniform(&s) < 0.5, &im);
        sharpen(&im, SHARPEN);
        add_grain(&im, splitmix(&s), GRAIN);
        int quality = 75 + (int)(21 * sqrt(uniform(&s))); /* more of them high, as ImageNet's */
        double r = uniform(&s);
        int hs = r < 0.05 ? 1 : 2, vs = r < 0.08 ? 1 : 2; /* 5% 4:4:4, 3% 4:2:2, 92% 4:2:0 */
        int progressive = uniform(&s) < 0.03;
        snprintf(path, sizeof path, "%s/%s_%04d.jpg", dir, cls, j);
        if (save_jpeg(path, &im, quality, hs, vs, progressive) != 0) {
          fprintf(stderr, "mkcorpus: cannot write %s\n", path);
          return 1;
        }
        free(im.px);
        continue;
      }
      double area = (0.25 + 0.75 * uniform(&s)) * src.w * src.h;
      double aspect = exp(log(0.75) + (log(4.0 / 3) - log(0.75)) * uniform(&s));
      double cw = sqrt(area * aspect), ch = sqrt(area / aspect);
      if (cw > src.w) cw = src.w;
      if (ch > src.h) ch = src.h;
      double x = (src.w - cw) * uniform(&s), y = (src.h - ch) * uniform(&s);
      int side = 160 + (int)(341 * uniform(&s));
      double scale = side / (cw > ch ? cw : ch);
      if (scale > 1) scale = 1;
      image_t im = {(int)lround(cw * scale), (int)lround(ch * scale), NULL};
      if (im.w < 1) im.w = 1;
      if (im.h < 1) im.h = 1;
      im.px = malloc((size_t)im.w * (size_t)im.h * 3);
      if (!im.px) return 1;
      int flip = uniform(&s) < 0.5;
      crop_resize(&src, x, y, cw, ch, flip, &im);
      int quality = 75 + (int)(21 * uniform(&s));
      double r = uniform(&s);
      int hs = r < 0.1 ? 1 : 2, vs = r < 0.2 ? 1 : 2; /* 10% 4:4:4, 10% 4:2:2, 80% 4:2:0 */
      int progressive = uniform(&s) < 0.1;
      snprintf(path, sizeof path, "%s/%s_%04d.jpg", dir, cls, j);
      if (save_jpeg(path, &im, quality, hs, vs, progressive) != 0) {
        fprintf(stderr, "mkcorpus: cannot write %s\n", path);
        return 1;
      }
      free(im.px);
    }
    free(src.px);
  }
  return 0;
}
