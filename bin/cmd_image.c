/* rill demo, rill preview and rill bench images: the training-input pipeline over an
 * ImageFolder tree or tar shards (decode fused with random resized crop, flip, normalize,
 * batch), with a progress bar, a throughput report and a PNG grid of one augmented batch. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#if RILL_HAVE_PNG
#include <png.h>
#endif

#include "commands.h"
#include "rill.h"
#include "rill_addons.h"

#define DEFAULT_CORPUS "build/data/corpus"

static const double MEAN[3] = {0.485, 0.456, 0.406}, STD[3] = {0.229, 0.224, 0.225};

enum { MAX_SHARDS = 4096 };

typedef struct opts {
  const char* dir;   /* an ImageFolder tree, or the first of the tar shards */
  const char** shards;
  int nshards;       /* > 0: dir and the rest are tar shards (a file, not a folder) */
  const char* out;   /* PNG grid */
  int size, batch, threads, epochs, prefetch;
  int cold;          /* bench: each epoch from a stopped pipeline (no prefetch across epochs) */
  const char* index_dir; /* shards: saved indexes (rill_tar_opts_t.index_dir), or NULL */
  uint64_t seed;
} opts_t;

typedef struct pipeline {
  rill_df_t *files, *shuffled, *batches;
  rill_iter_t* it;
  int64_t images;
  int paths;         /* column of the batches with the paths, or -1 */
} pipeline_t;

static double rss_mib(void) {
  FILE* f = fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (!f) return 0;
  if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  fclose(f);
  return (double)resident * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

/* ---------------------------------------------------------------- arguments */

static int parse_int(const char* cmd, const char* name, const char* v, int lo, int hi, int* out) {
  long long x;
  if (rill_cli_count(v, lo, hi, &x) < 0) {
    fprintf(stderr, "rill %s: %s needs an integer in [%d, %d], got '%s'\n", cmd, name, lo, hi, v ? v : "");
    return 2;
  }
  *out = (int)x;
  return 0;
}

/* Parses argv[1..]: options and one positional folder or tar shards; `allow_runs` 1 takes --threads,
 * 2 also the options of repeated runs (--epochs, --prefetch, --cold-epochs). Returns 0, 2
 * (usage error) or -1 (--help printed). */
static int parse(const char* cmd, int argc, char** argv, opts_t* o, int allow_out, int allow_runs, const char* usage) {
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    int rc = 0;
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(usage, stdout);
      return -1;
    } else if (allow_out && (!strcmp(a, "-o") || !strcmp(a, "--output"))) {
      if (!v) {
        fprintf(stderr, "rill %s: %s needs a file name\n", cmd, a);
        return 2;
      }
      o->out = v;
      i++;
    } else if (!strcmp(a, "--size")) {
      rc = parse_int(cmd, a, v, 8, 4096, &o->size), i++;
    } else if (!strcmp(a, "--batch")) {
      rc = parse_int(cmd, a, v, 1, 65536, &o->batch), i++;
    } else if (!strcmp(a, "--seed")) {
      int s = 0;
      rc = parse_int(cmd, a, v, 0, 2147483647, &s), i++;
      o->seed = (uint64_t)s;
    } else if (allow_runs && !strcmp(a, "--threads")) {
      rc = parse_int(cmd, a, v, 0, 1024, &o->threads), i++;
    } else if (allow_runs > 1 && !strcmp(a, "--epochs")) {
      rc = parse_int(cmd, a, v, 1, 1000000, &o->epochs), i++;
    } else if (allow_runs > 1 && !strcmp(a, "--prefetch")) {
      rc = parse_int(cmd, a, v, 1, 1024, &o->prefetch), i++;
    } else if (allow_runs > 1 && !strcmp(a, "--cold-epochs")) {
      o->cold = 1;
    } else if (!strcmp(a, "--index-dir")) {
      if (!v) {
        fprintf(stderr, "rill %s: --index-dir needs a folder\n", cmd);
        return 2;
      }
      o->index_dir = v;
      i++;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "rill %s: unknown option '%s'\n%s", cmd, a, usage);
      return 2;
    } else if (o->nshards < MAX_SHARDS) {
      static const char* list[MAX_SHARDS]; /* one command a process */
      o->shards = list;
      o->shards[o->nshards++] = a;
      o->dir = o->shards[0];
    } else {
      fprintf(stderr, "rill %s: more than %d shards\n%s", cmd, MAX_SHARDS, usage);
      return 2;
    }
    if (rc) return rc;
  }
  return 0;
}

/* ---------------------------------------------------------------- pipeline */

static void pipeline_free(pipeline_t* p) {
  rill_iter_free(p->it);
  rill_df_free(p->batches);
  rill_df_free(p->shuffled);
  rill_df_free(p->files);
  memset(p, 0, sizeof *p);
}

/* The positional arguments: one folder, or tar shards (files; o->nshards stays > 0). */
static int check_dir(const char* cmd, opts_t* o, int is_default) {
  struct stat st;
  int rc = o->nshards > 0 ? rill_cli_expand_paths(cmd, o->shards, &o->nshards, MAX_SHARDS) : 0;
  if (rc) return rc;
  if (o->nshards > 0) o->dir = o->shards[0];
  const char* dir = o->dir;
  if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode)) {
    if (o->nshards <= 1 && o->index_dir) {
      fprintf(stderr, "rill %s: --index-dir is for tar shards, not an ImageFolder tree\n", cmd);
      return 2;
    }
    if (o->nshards <= 1) {
      o->nshards = 0;
      return 0;
    }
    fprintf(stderr, "rill %s: '%s' is a folder: give one ImageFolder tree, or tar shards\n", cmd, dir);
    return 2;
  }
  if (o->nshards > 0 && stat(dir, &st) == 0 && S_ISREG(st.st_mode)) return 0; /* tar shards: checked when opened */
  if (is_default)
    fprintf(stderr,
            "rill %s: the image corpus '%s' does not exist; build it with `make data` (from the source tree), "
            "or pass a folder with one sub-folder of images per class\n",
            cmd, dir);
  else
    fprintf(stderr, "rill %s: '%s': %s\n", cmd, dir, stat(dir, &st) == 0 ? "not a directory" : strerror(errno));
  return 1;
}

/* parse() for a command that needs DIR (and -o FILE when with_out), then check_dir(): 0 to go
 * on, < 0 after --help, else the exit status. */
static int parse_dir_command(const char* cmd, int argc, char** argv, opts_t* o, int with_out, int allow_runs,
                             const char* usage) {
  int rc = parse(cmd, argc, argv, o, with_out, allow_runs, usage);
  if (rc) return rc;
  if (!o->dir || (with_out && !o->out)) {
    fprintf(stderr, "rill %s: %s\n%s", cmd, !o->dir ? "missing DIR" : "missing -o FILE", usage);
    return 2;
  }
  return check_dir(cmd, o, 0);
}

/* The images of tar shards: members .jpg, .jpeg, .png or .webp, one a sample, as "bytes". */
static const rill_tar_column_t SHARD_IMAGES[] = {
    {"jpg", RILL_BINARY, "bytes"}, {"jpeg", RILL_BINARY, "bytes"}, {"png", RILL_BINARY, "bytes"},
    {"webp", RILL_BINARY, "bytes"}};

/* ImageFolder or tar shards -> shuffle -> random resized crop (fused decode) -> normalize +
 * flip -> batch. */
static int pipeline_new(const char* cmd, const opts_t* o, pipeline_t* p) {
  rill_error_t err = {0};
  memset(p, 0, sizeof *p);
  if (o->nshards ? rill_df_from_tar(o->shards, o->nshards,
                                    &(rill_tar_opts_t){.columns = SHARD_IMAGES, .ncolumns = 4, .index_dir = o->index_dir},
                                    &p->files, &err) < 0
                 : rill_df_from_image_folder(o->dir, NULL, &p->files, &err) < 0)
    goto fail;
  p->images = rill_df_rows(p->files);
  if (rill_df_shuffle(p->files, o->seed, &p->shuffled, &err) < 0) goto fail;
  int bytes = rill_df_column(p->shuffled, "bytes"), label = o->nshards ? 0 : rill_df_column(p->shuffled, "label");
  int img = rill_image_random_resized_crop(
      p->shuffled, "img", bytes,
      &(rill_rrc_opts_t){.size = {o->size, o->size}, .on_error = RILL_ON_ERROR_SKIP}, &err);
  if (img < 0) goto fail;
  int x = rill_image_normalize(p->shuffled, "x", img,
                               &(rill_normalize_opts_t){.flip = 0.5,
                                                        .mean = {MEAN[0], MEAN[1], MEAN[2]},
                                                        .std = {STD[0], STD[1], STD[2]},
                                                        .dtype = RILL_FLOAT32,
                                                        .layout = RILL_LAYOUT_CHW},
                               &err);
  if (x < 0) goto fail;
  int path = rill_df_column(p->shuffled, "path");
  if (path < 0 || label < 0 || bytes < 0) goto fail;
  /* the paths ride along so that a run can tell which images were skipped (shards: no labels) */
  int cols[3] = {x, label, path}, nc = 3;
  if (o->nshards) cols[1] = path, nc = 2;
  if (rill_df_batch(p->shuffled, cols, nc, o->batch, NULL, &p->batches, &err) < 0) goto fail;
  p->paths = nc - 1;
  /* several epochs: the prefetch runs on into the next one, as in a training loop */
  rill_iter_opts_t io = {.prefetch = o->prefetch ? o->prefetch : 4, .threads = o->threads, .seed = o->seed,
                         .next_epoch = o->epochs > 1 && !o->cold};
  if (rill_iter_new(p->batches, &io, &p->it, &err) < 0) goto fail;
  return 0;
fail:
  fprintf(stderr, "rill %s: %s\n", cmd, err.message[0] ? err.message : rill_strerror(err.code));
  pipeline_free(p);
  return 1;
}

/* Parses a command over an ImageFolder tree and builds its pipeline into p (*setup_s: the
 * seconds the pipeline took to build, when not NULL). Returns -1 when p is ready, else the exit
 * status (0 after --help). */
static int dir_pipeline(const char* cmd, int argc, char** argv, opts_t* o, int with_out, int allow_runs,
                        const char* usage, pipeline_t* p, double* setup_s) {
  int rc = parse_dir_command(cmd, argc, argv, o, with_out, allow_runs, usage);
  if (rc) return rc < 0 ? 0 : rc;
  double t0 = rill_cli_now_s();
  if (pipeline_new(cmd, o, p)) return 1;
  if (setup_s) *setup_s = rill_cli_now_s() - t0;
  return -1;
}

/* ---------------------------------------------------------------- progress bar */

typedef struct progress {
  int tty;
  double start, last;
  int64_t total;
} progress_t;

static void progress_start(progress_t* pr, int64_t total) {
  pr->tty = isatty(STDERR_FILENO);
  pr->start = pr->last = rill_cli_now_s();
  pr->total = total;
}

static void progress_show(progress_t* pr, int64_t done, int final) {
  double t = rill_cli_now_s();
  if (!final && t - pr->last < (pr->tty ? 0.1 : 2.0)) return;
  pr->last = t;
  double el = t - pr->start, rate = el > 0 ? done / el : 0;
  double eta = rate > 0 ? (pr->total - done) / rate : 0;
  int pct = pr->total ? (int)(100 * done / pr->total) : 100;
  if (pr->tty) {
    char bar[31];
    int fill = pct * 30 / 100;
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    fprintf(stderr, "\r[%s] %3d%% %lld/%lld images  %.0f images/s  ETA %.0fs   ", bar, pct, (long long)done,
            (long long)pr->total, rate, eta);
    if (final) fputc('\n', stderr);
  } else {
    fprintf(stderr, "%lld/%lld images (%d%%), %.0f images/s, ETA %.0fs\n", (long long)done, (long long)pr->total, pct,
            rate, eta);
  }
  fflush(stderr);
}

/* ---------------------------------------------------------------- preview grid */

/* Denormalizes a float32 [n,3,S,S] batch into an RGB grid. */
static uint8_t* grid_from_batch(const rill_array_t* t, int* gw, int* gh) {
  int64_t n = t->length;
  if (t->type.ndim != 3 || t->type.dtype != RILL_FLOAT32 || t->type.shape[0] != 3 || n < 1) return NULL;
  int S = (int)t->type.shape[1], SW = (int)t->type.shape[2], pad = 2;
  int cols = (int)ceil(sqrt((double)n)), rows = (int)((n + cols - 1) / cols);
  *gw = cols * (SW + pad) + pad;
  *gh = rows * (S + pad) + pad;
  uint8_t* g = malloc((size_t)*gw * *gh * 3);
  if (!g) return NULL;
  memset(g, 40, (size_t)*gw * *gh * 3);
  const float* f = t->data;
  for (int64_t i = 0; i < n; i++) {
    if (!rill_array_is_valid(t, i)) continue;
    int ox = pad + (int)(i % cols) * (SW + pad), oy = pad + (int)(i / cols) * (S + pad);
    const float* img = f + (size_t)i * 3 * S * SW;
    for (int c = 0; c < 3; c++)
      for (int y = 0; y < S; y++)
        for (int x = 0; x < SW; x++) {
          double v = (img[((size_t)c * S + y) * SW + x] * STD[c] + MEAN[c]) * 255.0;
          v = v < 0 ? 0 : v > 255 ? 255 : v;
          g[((size_t)(oy + y) * *gw + ox + x) * 3 + c] = (uint8_t)(v + 0.5);
        }
  }
  return g;
}

static int write_png(const char* cmd, const char* path, const uint8_t* px, int w, int h) {
#if RILL_HAVE_PNG
  png_image img;
  memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  img.width = (png_uint_32)w;
  img.height = (png_uint_32)h;
  img.format = PNG_FORMAT_RGB;
  if (!png_image_write_to_file(&img, path, 0, px, 0, NULL)) {
    fprintf(stderr, "rill %s: cannot write '%s': %s\n", cmd, path, img.message[0] ? img.message : strerror(errno));
    png_image_free(&img);
    return 1;
  }
  return 0;
#else
  (void)px, (void)w, (void)h;
  fprintf(stderr, "rill %s: cannot write '%s': rill was built without libpng\n", cmd, path);
  return 1;
#endif
}

static int save_grid(const char* cmd, const char* path, const rill_array_t* batch) {
  int gw = 0, gh = 0;
  uint8_t* g = grid_from_batch(batch, &gw, &gh);
  if (!g) {
    fprintf(stderr, "rill %s: cannot make the preview grid (out of memory or empty batch)\n", cmd);
    return 1;
  }
  int rc = write_png(cmd, path, g, gw, gh);
  free(g);
  return rc;
}

/* ---------------------------------------------------------------- runs */

typedef struct run_result {
  int64_t images, batches, skipped;
  double seconds, first_batch_s;
  const rill_array_t* first;  /* the first batch (a reference), when asked for */
  char** seen;                /* paths of the images delivered, when asked for */
  int64_t nseen;
} run_result_t;

static void run_result_free(run_result_t* r) {
  rill_array_release(r->first);
  for (int64_t i = 0; i < r->nseen; i++) free(r->seen[i]);
  free(r->seen);
  memset(r, 0, sizeof *r);
}

/* Pulls every batch of one epoch and times only that. With `keep_first` the first batch is
 * kept (referenced) for a preview written afterwards; with `keep_paths` the paths of the
 * images delivered are collected. */
static int run_epoch(const char* cmd, pipeline_t* p, progress_t* pr, int64_t done_before, int keep_first,
                     int keep_paths, run_result_t* r) {
  rill_error_t err = {0};
  rill_row_t row;
  int rc;
  memset(r, 0, sizeof *r);
  r->first_batch_s = -1;
  if (keep_paths && !(r->seen = malloc(sizeof *r->seen * (size_t)(p->images > 0 ? p->images : 1)))) {
    fprintf(stderr, "rill %s: out of memory\n", cmd);
    return 1;
  }
  rill_iter_stats_t st;
  rill_iter_stats(p->it, &st);
  int64_t skipped_before = st.skipped; /* the iterator's counts run over all epochs */
  double t0 = rill_cli_now_s();
  while ((rc = rill_iter_next(p->it, &row, &err)) == RILL_OK) {
    const rill_array_t* t = rill_row_get(&row, 0);
    if (r->first_batch_s < 0) r->first_batch_s = rill_cli_now_s() - t0;
    if (keep_first && r->batches == 0) r->first = rill_array_retain(t);
    const rill_array_t* paths = keep_paths ? rill_row_get(&row, p->paths) : NULL;
    for (int64_t i = 0; paths && i < paths->length && r->nseen < p->images; i++) {
      int64_t n;
      const char* s = rill_array_cell(paths, i, &n);
      if ((r->seen[r->nseen] = malloc((size_t)n + 1)) == NULL) continue;
      memcpy(r->seen[r->nseen], s, (size_t)n);
      r->seen[r->nseen++][n] = 0;
    }
    r->images += t->length;
    r->batches++;
    if (pr) progress_show(pr, done_before + r->images, 0);
  }
  r->seconds = rill_cli_now_s() - t0;
  if (rc < 0) {
    if (pr && pr->tty) fputc('\n', stderr);
    fprintf(stderr, "rill %s: %s\n", cmd, err.message[0] ? err.message : rill_strerror(rc));
    return 1;
  }
  rill_iter_stats(p->it, &st);
  r->skipped = st.skipped - skipped_before;
  return 0;
}

static int cmp_str(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

/* Prints the images of the folder that the run did not deliver, each with the reason
 * (decoded again on its own to get the error). */
static void print_skipped(const char* cmd, pipeline_t* p, run_result_t* r) {
  if (r->skipped <= 0) return;
  qsort(r->seen, (size_t)r->nseen, sizeof *r->seen, cmp_str);
  rill_error_t err = {0};
  rill_iter_t* it = NULL;
  int col = rill_df_column(p->files, "path");
  int64_t printed = 0;
  if (rill_iter_new(p->files, &(rill_iter_opts_t){.columns = &col, .ncolumns = 1, .threads = RILL_THREADS_NONE},
                    &it, &err) < 0)
    return;
  fprintf(stderr, "rill %s: %lld image(s) skipped:\n", cmd, (long long)r->skipped);
  rill_row_t row;
  while (rill_iter_next(it, &row, &err) == RILL_OK && printed < 50) {
    int64_t n;
    const char* s = rill_array_cell(rill_row_get(&row, 0), 0, &n);
    char* path = strndup(s, (size_t)n);
    if (!path) break;
    if (!bsearch(&path, r->seen, (size_t)r->nseen, sizeof *r->seen, cmp_str)) {
      /* the reason: decode the file alone */
      rill_df_t* one = NULL;
      rill_error_t e = {0};
      const char* why = "could not be read";
      int ok = rill_df_from_files((const char* const*)&path, 1, NULL, &one, &e) == RILL_OK;
      int img = ok ? rill_image_decode(one, "img", rill_df_column(one, "bytes"), NULL, &e) : -1;
      rill_iter_t* it1 = NULL;
      rill_row_t r1;
      if (img >= 0 && rill_iter_new(one, &(rill_iter_opts_t){.columns = &img, .ncolumns = 1,
                                                             .threads = RILL_THREADS_NONE}, &it1, &e) == RILL_OK &&
          rill_iter_next(it1, &r1, &e) < 0)
        why = e.message;
      const char* at = strstr(why, path); /* the message from the file's name on */
      if (at) fprintf(stderr, "  %s\n", at);
      else fprintf(stderr, "  %s: %s\n", path, why);
      rill_iter_free(it1);
      rill_df_free(one);
      printed++;
    }
    free(path);
  }
  if (printed < r->skipped) fprintf(stderr, "  ... and %lld more\n", (long long)(r->skipped - printed));
  rill_iter_free(it);
}

static const char* DEMO_USAGE =
    "usage: rill demo [DIR | SHARD.tar ...] [--size N] [--batch B] [--threads T] [--seed S] [-o preview.png]\n"
    "                 [--index-dir DIR]\n"
    "\n"
    "Runs the training-input pipeline over an ImageFolder tree (DIR/<class>/<image>; default\n"
    "" DEFAULT_CORPUS ", made by `make data`) or over tar shards in WebDataset's layout (each\n"
    "sample's image a KEY.jpg, .jpeg, .png or .webp member): decode fused with a random resized crop to NxN\n"
    "(default 224), random horizontal flip, normalize to float32 CHW, batches of B (default 64).\n"
    "Shows progress, prints the throughput and writes a grid of the first augmented batch to\n"
    "preview.png (or -o FILE). The rate printed is the pipeline's (the preview is written\n"
    "afterwards and timed apart). Unreadable images are skipped and listed by name.\n"
    "A shard path that names no file is expanded as a brace pattern ('shards/train-{000..009}.tar').\n"
    "Exit status: 0 ok, 1 runtime error, 2 usage error.\n";

int rill_cmd_demo(int argc, char** argv) {
  opts_t o = {.size = 224, .batch = 64, .seed = 42, .out = "preview.png", .epochs = 1};
  int rc = parse("demo", argc, argv, &o, 1, 1, DEMO_USAGE);
  if (rc) return rc < 0 ? 0 : rc;
  int is_default = !o.dir;
  if (!o.dir) o.dir = DEFAULT_CORPUS;
  if ((rc = check_dir("demo", &o, is_default))) return rc;
  pipeline_t p;
  double t0 = rill_cli_now_s();
  if (pipeline_new("demo", &o, &p)) return 1;
  double setup = rill_cli_now_s() - t0;
  fprintf(stderr, "rill demo: %lld images in '%s' -> random resized crop %d, flip, normalize, batches of %d\n",
          (long long)p.images, o.dir, o.size, o.batch);
  progress_t pr;
  progress_start(&pr, p.images);
  run_result_t r;
  rc = run_epoch("demo", &p, &pr, 0, 1, 1, &r);
  if (!rc) {
    progress_show(&pr, r.images, 1);
    print_skipped("demo", &p, &r);
    printf("%lld images in %lld batches of %d x 3 x %d x %d float32: %.2f s, %.0f images/s "
           "(first batch after %.0f ms; %s %.0f ms; %lld skipped)\n",
           (long long)r.images, (long long)r.batches, o.batch, o.size, o.size, r.seconds,
           r.seconds > 0 ? r.images / r.seconds : 0, r.first_batch_s * 1e3, o.nshards ? "shard index" : "folder scan",
           setup * 1e3, (long long)r.skipped);
    if (r.first) {
      double tp = rill_cli_now_s();
      rc = save_grid("demo", o.out, r.first);
      if (!rc) printf("preview of the first batch: %s (written in %.0f ms)\n", o.out, (rill_cli_now_s() - tp) * 1e3);
    }
  }
  run_result_free(&r);
  pipeline_free(&p);
  return rc;
}

static const char* PREVIEW_USAGE =
    "usage: rill preview DIR | SHARD.tar ... -o grid.png [--size N] [--batch B] [--seed S] [--index-dir DIR]\n"
    "\n"
    "Writes a PNG grid of one augmented batch (random resized crop NxN, default 224; random\n"
    "flip; normalized then denormalized for display) of the ImageFolder tree DIR or of tar\n"
    "shards (images as KEY.jpg, .jpeg, .png or .webp members). B images\n"
    "(default 16); the same seed gives the same grid. A shard path that names no file is\n"
    "expanded as a brace pattern ('shards/train-{000..009}.tar').\n"
    "Exit status: 0 ok, 1 runtime error, 2 usage error.\n";

int rill_cmd_preview(int argc, char** argv) {
  opts_t o = {.size = 224, .batch = 16, .seed = 42, .epochs = 1};
  pipeline_t p;
  int rc = dir_pipeline("preview", argc, argv, &o, 1, 0, PREVIEW_USAGE, &p, NULL);
  if (rc >= 0) return rc;
  rill_error_t err = {0};
  rill_row_t row;
  rc = rill_iter_next(p.it, &row, &err);
  if (rc == RILL_OK) {
    rc = save_grid("preview", o.out, rill_row_get(&row, 0));
    if (!rc) printf("%s: %lld images of %dx%d\n", o.out, (long long)rill_row_get(&row, 0)->length, o.size, o.size);
  } else {
    fprintf(stderr, "rill preview: %s\n", rc == RILL_END ? "no image could be read" : err.message);
    rc = 1;
  }
  pipeline_free(&p);
  return rc;
}

static const char* BENCH_USAGE =
    "usage: rill bench images DIR | SHARD.tar ... [--threads N] [--batch B] [--epochs E] [--size S] [--prefetch P]\n"
    "                             [--cold-epochs] [--index-dir DIR]\n"
    "\n"
    "Measures the training-input pipeline (decode + random resized crop S (224) + flip +\n"
    "normalize float32 CHW + batch B (256)) over the ImageFolder tree DIR, or over tar shards\n"
    "(images as KEY.jpg, .jpeg, .png or .webp members; a path that names no file is expanded\n"
    "as a brace pattern, 'shards/train-{000..009}.tar'), for E epochs (3):\n"
    "images/s per epoch, time to the first batch, images skipped and resident memory after\n"
    "each epoch. The epochs run back to back and the prefetch goes on across their ends, as in\n"
    "a training loop (rill.torch.Loader); --cold-epochs starts each epoch from a stopped pipeline.\n"
    "--index-dir DIR keeps the shards' indexes in folder DIR: made at the first open, read back at\n"
    "later ones instead of every header (the setup line shows the difference).\n"
    "Threads 0 (default) = one per core.\n"
    "Exit status: 0 ok, 1 runtime error, 2 usage error.\n";

int rill_cmd_bench_images(int argc, char** argv) {
  opts_t o = {.size = 224, .batch = 256, .seed = 1, .epochs = 3};
  pipeline_t p;
  double setup;
  int rc = dir_pipeline("bench images", argc, argv, &o, 0, 2, BENCH_USAGE, &p, &setup);
  if (rc >= 0) return rc;
  rc = 0;
  printf("rill bench images: %lld images, batch %d, size %d, threads %d (0 = per core), epochs %s\n",
         (long long)p.images, o.batch, o.size, o.threads,
         o.epochs == 1 ? "1" : o.cold ? "cold (each from a stopped pipeline)" : "back to back (prefetched across)");
  double best = 0;
  for (int e = 0; e < o.epochs && !rc; e++) {
    if (e > 0 && rill_iter_set_epoch(p.it, e) < 0) {
      fprintf(stderr, "rill bench images: cannot start epoch %d\n", e);
      rc = 1;
      break;
    }
    run_result_t r;
    rc = run_epoch("bench images", &p, NULL, 0, 0, 0, &r);
    if (rc) {
      run_result_free(&r);
      break;
    }
    double ips = r.seconds > 0 ? r.images / r.seconds : 0;
    best = ips > best ? ips : best;
    printf("epoch %d: %lld images in %.3f s = %.1f images/s; first batch %.1f ms%s; RSS %.1f MiB; skipped %lld\n", e,
           (long long)r.images, r.seconds, ips, r.first_batch_s * 1e3, e == 0 ? " (+ setup)" : "", rss_mib(),
           (long long)r.skipped);
    if (e == 0) printf("setup (%s + plan): %.1f ms\n", o.nshards ? "shard index" : "folder scan", setup * 1e3);
    run_result_free(&r);
  }
  if (!rc) printf("best: %.1f images/s\n", best);
  pipeline_free(&p);
  return rc;
}
