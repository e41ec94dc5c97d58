/* Builds a deterministic ImageNet-like corpus in ImageFolder layout from a few real photos:
 *   mkcorpus OUT_DIR PER_CLASS CLASS=PHOTO [CLASS=PHOTO ...]
 * For each class, PER_CLASS JPEGs OUT_DIR/CLASS/CLASS_NNNN.jpg are cut from the class's photo:
 * a random crop (25-100% of the area, aspect ratio 3/4..4/3), scaled down so that the longer
 * side is 160..500 px, maybe mirrored, encoded at quality 75..95 with 4:2:0, 4:2:2 or 4:4:4
 * chroma subsampling, some progressive. The same arguments always give the same files. */
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

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: mkcorpus OUT_DIR PER_CLASS CLASS=PHOTO...\n");
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
