/* Full training-input pipeline over an ImageFolder corpus: decode -> random resized crop 224
 * -> flip -> normalize -> batch 256 float32 NCHW, at 1 and 2 threads, against a direct
 * full-size tjDecompress2 loop over the same JPEG files (the ceiling of a plain decode).
 * Also time to the first batch (with its CPU time, the kernel's part of it and page faults,
 * against the mean batch of the rest of epoch 0 and of epoch 1, and against the same batch
 * computed again once its buffers are warm; run 0, batch 256), a training loop's epoch
 * boundaries (next_epoch off and on: the first batch's wait at each new epoch, consumer steps
 * of 1.25 batches' work) and resident memory over epochs.
 *
 * usage: bench_pipeline CORPUS_DIR [epochs_for_rss] [rounds]
 * Each of `rounds` (default 1; environment BATCHES: batch sizes, default "256") measures the
 * pipeline at 1 and 2 threads for each batch size (epoch 0, then epoch 1, the rate printed,
 * and epochs up to LATER_EPOCH, default 3, whose rate is printed as "later": the files' JPEG
 * entropy marks are found over the first epochs). The direct decode runs right before epoch
 * 1, right after it and right after the later epoch, and each ratio is against the mean of
 * the two direct runs around its epoch: the machine may be shared, and its speed can move
 * by tens of percent within a minute. The best of the rounds is printed. CPU time per image (user + sys of the whole process) is printed too.
 * Prints "key value" lines that run_pipeline.sh turns into ratios. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "rill.h"
#include "rill_addons.h"

#if defined(__has_include)
#if __has_include(<turbojpeg.h>)
#include <turbojpeg.h>
#define HAVE_TJ 1
#endif
#endif
#ifndef HAVE_TJ
#define HAVE_TJ 0
#endif

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_s(void) { /* CPU time of every thread of the process */
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double rss_mib(void) {
  FILE* f = fopen("/proc/self/statm", "r");
  long pages = 0, res = 0;
  if (!f) return 0;
  if (fscanf(f, "%ld %ld", &pages, &res) != 2) res = 0;
  fclose(f);
  return (double)res * (double)sysconf(_SC_PAGESIZE) / (1024.0 * 1024.0);
}

typedef struct file {
  unsigned char* buf;
  size_t size;
} file_t;

static int ends_with(const char* s, const char* suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !strcasecmp(s + a - b, suf);
}

/* Reads every JPEG under dir/<class>/ into memory. */
static file_t* load_jpegs(const char* dir, int* count) {
  int cap = 1024, n = 0;
  file_t* f = malloc(sizeof *f * (size_t)cap);
  DIR* d = opendir(dir);
  struct dirent* e;
  while (d && (e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    char sub[4096];
    snprintf(sub, sizeof sub, "%s/%s", dir, e->d_name);
    DIR* s = opendir(sub);
    struct dirent* g;
    while (s && (g = readdir(s))) {
      if (!ends_with(g->d_name, ".jpg") && !ends_with(g->d_name, ".jpeg")) continue;
      char path[8192];
      snprintf(path, sizeof path, "%s/%s", sub, g->d_name);
      FILE* fp = fopen(path, "rb");
      if (!fp) continue;
      fseek(fp, 0, SEEK_END);
      long sz = ftell(fp);
      fseek(fp, 0, SEEK_SET);
      if (sz > 0) {
        if (n == cap) f = realloc(f, sizeof *f * (size_t)(cap *= 2));
        f[n].buf = malloc((size_t)sz);
        f[n].size = fread(f[n].buf, 1, (size_t)sz, fp);
        n++;
      }
      fclose(fp);
    }
    if (s) closedir(s);
  }
  if (d) closedir(d);
  *count = n;
  return f;
}

/* Direct full-size decode of every file, one thread: images/s (and images per CPU second). */
static double direct_decode_rate(file_t* f, int n, double* per_cpu) {
#if HAVE_TJ
  tjhandle h = tjInitDecompress();
  unsigned char* dst = NULL;
  size_t cap = 0;
  int ok = 0;
  double t0 = now_s(), c0 = cpu_s();
  for (int i = 0; i < n; i++) {
    int w, hh, sub, cs;
    if (tjDecompressHeader3(h, f[i].buf, (unsigned long)f[i].size, &w, &hh, &sub, &cs) != 0) continue;
    size_t need = (size_t)w * hh * 3;
    if (need > cap) dst = realloc(dst, cap = need);
    if (tjDecompress2(h, f[i].buf, (unsigned long)f[i].size, dst, w, 0, hh, TJPF_RGB, 0) == 0) ok++;
  }
  double t = now_s() - t0, c = cpu_s() - c0;
  free(dst);
  tjDestroy(h);
  *per_cpu = c > 0 ? ok / c : 0;
  return t > 0 ? ok / t : 0;
#else
  (void)f, (void)n;
  *per_cpu = 0;
  return 0;
#endif
}

typedef struct pipe {
  rill_df_t *files, *view, *batches;
  rill_iter_t* it;
} pipe_t;

static void pipe_free(pipe_t* p) {
  rill_iter_free(p->it);
  rill_df_free(p->batches);
  rill_df_free(p->view);
  rill_df_free(p->files);
}

static int pipe_new(const char* dir, int threads, int batch, int world, int next_epoch, pipe_t* p, rill_error_t* err) {
  memset(p, 0, sizeof *p);
  rill_df_t* sh = NULL;
  if (rill_df_from_image_folder(dir, NULL, &p->files, err) < 0) return -1;
  if (rill_df_shuffle(p->files, 42, &sh, err) < 0) return -1;
  if (world > 1) {
    if (rill_df_shard(sh, 0, world, &p->view, err) < 0) {
      rill_df_free(sh);
      return -1;
    }
    rill_df_free(sh);
  } else {
    p->view = sh;
  }
  int img = rill_image_random_resized_crop(p->view, "img", rill_df_column(p->view, "bytes"),
                                           &(rill_rrc_opts_t){.size = {224, 224}, .on_error = RILL_ON_ERROR_SKIP}, err);
  if (img < 0) return -1;
  int x = rill_image_normalize(p->view, "x", img,
                               &(rill_normalize_opts_t){.flip = 0.5, .mean = {0.485, 0.456, 0.406},
                                                        .std = {0.229, 0.224, 0.225}, .dtype = RILL_FLOAT32,
                                                        .layout = RILL_LAYOUT_CHW},
                               err);
  if (x < 0) return -1;
  if (rill_df_batch(p->view, (int[]){x, rill_df_column(p->view, "label")}, 2, batch, NULL, &p->batches, err) < 0)
    return -1;
  return rill_iter_new(p->batches, &(rill_iter_opts_t){.prefetch = 4, .threads = threads, .seed = 1, .next_epoch = next_epoch},
                       &p->it, err);
}

static long minor_faults(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_minflt;
}

static double sys_s(void) { /* CPU time spent in the kernel (page faults, reads) */
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec * 1e-6;
}

/* What one epoch took: the images pulled, seconds and CPU seconds, and for its first batch
 * the seconds, CPU seconds (and those in the kernel) and minor page faults (the first batch
 * of an iterator touches its fresh buffers), and the batches pulled. */
typedef struct epoch_stats {
  int64_t images, batches;
  double secs, cpu, sys, first, first_cpu, first_sys;
  long first_faults;
} epoch_stats_t;

static int epoch(pipe_t* p, epoch_stats_t* st, rill_error_t* err) {
  rill_row_t row;
  int rc;
  long f0 = minor_faults();
  double t0 = now_s(), c0 = cpu_s(), s0 = sys_s();
  memset(st, 0, sizeof *st);
  st->first = -1;
  while ((rc = rill_iter_next(p->it, &row, err)) == RILL_OK) {
    if (st->first < 0) {
      st->first = now_s() - t0;
      st->first_cpu = cpu_s() - c0;
      st->first_sys = sys_s() - s0;
      st->first_faults = minor_faults() - f0;
    }
    st->images += rill_row_get(&row, 0)->length;
    st->batches++;
  }
  st->secs = now_s() - t0;
  st->cpu = cpu_s() - c0;
  st->sys = sys_s() - s0;
  return rc == RILL_END ? 0 : rc;
}

/* A training loop's epoch boundaries: 2 worker threads, batch 256, a consumer that spends
 * `step_ms` on each batch without the CPU (a GPU step), epochs 1..4 after epoch 0 (which
 * verifies the files, pulled without steps); the time rill_iter_set_epoch + rill_iter_next
 * took at the first batch of epochs 2..4 (epoch 1's follows the step-less epoch 0), the mean
 * wait of the other batches of epochs 1..4, and their seconds. */
typedef struct boundary {
  double first_ms, other_ms, secs;
} boundary_t;

static int boundaries(const char* dir, int next_epoch, double step_ms, boundary_t* b, rill_error_t* err) {
  pipe_t p;
  if (pipe_new(dir, 2, 256, 1, next_epoch, &p, err) < 0) return -1;
  epoch_stats_t es;
  if (epoch(&p, &es, err) < 0) return -1;
  double first = 0, other = 0, t0 = now_s();
  int64_t nother = 0;
  struct timespec step = {0, (long)(step_ms * 1e6)};
  for (int e = 1; e <= 4; e++) {
    rill_row_t row;
    int rc;
    double w0 = now_s();
    rill_iter_set_epoch(p.it, e);
    for (int k = 0; (rc = rill_iter_next(p.it, &row, err)) == RILL_OK; k++) {
      double w = now_s() - w0;
      if (k == 0 && e > 1) first += w;
      else if (k > 0) other += w, nother++;
      nanosleep(&step, NULL);
      w0 = now_s();
    }
    if (rc != RILL_END) return -1;
  }
  b->secs = now_s() - t0;
  b->first_ms = first / 3 * 1e3;
  b->other_ms = nother ? other / (double)nother * 1e3 : 0;
  pipe_free(&p);
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: bench_pipeline CORPUS_DIR [rss_epochs]\n");
    return 2;
  }
  const char* dir = argv[1];
  int rss_epochs = argc > 2 ? atoi(argv[2]) : 10;
  rill_error_t err = {0};
  int nf = 0;
  file_t* files = load_jpegs(dir, &nf);
  if (nf == 0) {
    fprintf(stderr, "bench_pipeline: no JPEG under '%s'\n", dir);
    return 1;
  }
  int rounds = argc > 3 ? atoi(argv[3]) : 1;
  if (rounds < 1) rounds = 1;
  int batches[8], nb = 0;
  const char* bl = getenv("BATCHES");
  for (const char* q = bl && *bl ? bl : "256"; *q && nb < 8;) {
    int b = atoi(q);
    if (b > 0) batches[nb++] = b;
    while (*q && *q != ',') q++;
    if (*q == ',') q++;
  }
  double direct_cpu = 0, direct = 0;
  direct_decode_rate(files, nf < 64 ? nf : 64, &direct_cpu); /* warm up */
  printf("jpeg_files %d\n", nf);
  /* best over rounds, [threads-1][batch] */
  double best[2][8] = {{0}}, best_cpu[2][8] = {{0}}, ratio[2][8] = {{0}}, ratio_cpu[2][8] = {{0}};
  double best_late[2][8] = {{0}}, ratio_late[2][8] = {{0}};
  const char* le = getenv("LATER_EPOCH");
  int later = le && atoi(le) > 1 ? atoi(le) : 3;
  /* the first batch of epoch 0 (batch 256, round 0) against the mean batch of the rest of
   * epoch 0 (which still pays the epoch-0-only work: files read and verified to their end
   * once), of epoch 1 (the steady state, one_batch_work_ms), and the same first batch
   * computed again after epoch 1 (the same images and crops; warm buffers, files verified):
   * batches differ in their images, so this is the first batch's own work */
  double first_ms[2] = {0}, first_cpu_ms[2] = {0}, first_sys_ms[2] = {0}, setup_ms[2] = {0}, e0_batch_ms[2] = {0},
         e1_batch_ms[2] = {0}, again_ms[2] = {0}, again_cpu_ms[2] = {0}, e0_user_ms[2] = {0}, e0_sys_ms[2] = {0};
  long first_faults[2] = {0};
  int64_t images[2] = {0};
  for (int r = 0; r < rounds; r++) {
    for (int k = 0; k < nb; k++)
      for (int threads = 1; threads <= 2; threads++) { /* "1t": the calling thread; "2t": two workers */
        pipe_t p;
        double t0 = now_s();
        if (pipe_new(dir, threads == 1 ? RILL_THREADS_NONE : 2, batches[k], 1, 0, &p, &err) < 0) {
          fprintf(stderr, "bench_pipeline: %s\n", err.message);
          return 1;
        }
        double setup = now_s() - t0;
        int64_t n = 0;
        double rate = 0, rate_cpu = 0, rate_late = 0;
        double dr[3] = {0}, dc[3] = {0}; /* direct decode before epoch 1, after it, after the later one */
        for (int e = 0; e <= later; e++) { /* epoch 0 also warms the page cache and verifies the files */
          epoch_stats_t es;
          if (e == 1) dr[0] = direct_decode_rate(files, nf, &dc[0]);
          if (e) rill_iter_set_epoch(p.it, e);
          if (epoch(&p, &es, &err) < 0) {
            fprintf(stderr, "bench_pipeline: %s\n", err.message);
            return 1;
          }
          n = es.images;
          int t = threads - 1;
          if (e == 0 && batches[k] == 256 && r == 0) {
            first_ms[t] = es.first * 1e3, first_cpu_ms[t] = es.first_cpu * 1e3, first_faults[t] = es.first_faults;
            first_sys_ms[t] = es.first_sys * 1e3;
            setup_ms[t] = setup * 1e3;
            e0_batch_ms[t] = es.batches > 1 ? (es.secs - es.first) / (double)(es.batches - 1) * 1e3 : 0;
            /* the same split of the CPU time of epoch 0's other batches: user space and kernel */
            e0_user_ms[t] = es.batches > 1 ? ((es.cpu - es.sys) - (es.first_cpu - es.first_sys)) / (double)(es.batches - 1) * 1e3 : 0;
            e0_sys_ms[t] = es.batches > 1 ? (es.sys - es.first_sys) / (double)(es.batches - 1) * 1e3 : 0;
          }
          if (e == 1 && batches[k] == 256 && r == 0) e1_batch_ms[t] = es.batches > 0 ? es.secs / (double)es.batches * 1e3 : 0;
          if (e == 1) rate = n / es.secs, rate_cpu = es.cpu > 0 ? n / es.cpu : 0;
          if (e == 1) dr[1] = direct_decode_rate(files, nf, &dc[1]);
          if (e == later) rate_late = n / es.secs;
        }
        dr[2] = direct_decode_rate(files, nf, &dc[2]);
        for (int j = 0; j < 3; j++) {
          if (dr[j] > direct) direct = dr[j];
          if (dc[j] > direct_cpu) direct_cpu = dc[j];
        }
        double d = (dr[0] + dr[1]) / 2, dcpu = (dc[0] + dc[1]) / 2, dl = (dr[1] + dr[2]) / 2;
        if (batches[k] == 256 && r == 0) { /* the first batch again: epoch 0 restarts */
          rill_row_t row;
          rill_iter_set_epoch(p.it, 0);
          double a0 = now_s(), ac0 = cpu_s();
          if (rill_iter_next(p.it, &row, &err) != RILL_OK) {
            fprintf(stderr, "bench_pipeline: %s\n", err.message);
            return 1;
          }
          again_ms[threads - 1] = (now_s() - a0) * 1e3, again_cpu_ms[threads - 1] = (cpu_s() - ac0) * 1e3;
        }
        images[threads - 1] = n;
        pipe_free(&p);
        double q = d > 0 ? rate / (threads * d) : 0, qc = dcpu > 0 ? rate_cpu / dcpu : 0;
        double ql = dl > 0 ? rate_late / (threads * dl) : 0;
        printf("round %d batch %d threads %d: %.1f img/s (%.1f per CPU s), direct %.1f (%.1f per CPU s): %.2fx (per CPU s "
               "%.2fx); epoch %d: %.1f img/s, %.2fx\n",
               r, batches[k], threads, rate, rate_cpu, d, dcpu, q, qc, later, rate_late, ql);
        if (rate_late > best_late[threads - 1][k]) best_late[threads - 1][k] = rate_late;
        if (ql > ratio_late[threads - 1][k]) ratio_late[threads - 1][k] = ql;
        fflush(stdout);
        if (rate > best[threads - 1][k]) best[threads - 1][k] = rate;
        if (rate_cpu > best_cpu[threads - 1][k]) best_cpu[threads - 1][k] = rate_cpu;
        if (q > ratio[threads - 1][k]) ratio[threads - 1][k] = q;
        if (qc > ratio_cpu[threads - 1][k]) ratio_cpu[threads - 1][k] = qc;
      }
  }
  printf("direct_full_decode_1t %.1f\ndirect_full_decode_per_cpu_s %.1f\n", direct, direct_cpu);
  printf("direct_cpu_us_per_image %.0f\n", direct_cpu > 0 ? 1e6 / direct_cpu : 0);
  for (int threads = 1; threads <= 2; threads++) {
    int t = threads - 1;
    printf("first_batch_ms_%dt %.1f\nsetup_ms_%dt %.1f\n", threads, first_ms[t], threads, setup_ms[t]);
    printf("first_batch_cpu_ms_%dt %.1f\nfirst_batch_sys_ms_%dt %.1f\nfirst_batch_page_faults_%dt %ld\n", threads,
           first_cpu_ms[t], threads, first_sys_ms[t], threads, first_faults[t]);
    printf("first_batch_again_ms_%dt %.1f\nfirst_batch_again_cpu_ms_%dt %.1f\n", threads, again_ms[t], threads,
           again_cpu_ms[t]);
    printf("epoch0_batch_work_ms_%dt %.1f\nepoch1_batch_work_ms_%dt %.1f\n", threads, e0_batch_ms[t], threads,
           e1_batch_ms[t]);
    /* The first batch's CPU time in user space against an epoch-0 batch's: what the first
     * batch costs beyond the kernel's first touch of its fresh buffers (sys) */
    double first_user = first_cpu_ms[t] - first_sys_ms[t];
    printf("first_batch_user_ms_%dt %.1f\nepoch0_batch_user_ms_%dt %.1f\nepoch0_batch_sys_ms_%dt %.1f\n", threads,
           first_user, threads, e0_user_ms[t], threads, e0_sys_ms[t]);
    printf("first_batch_user_over_epoch0_ms_%dt %.1f\n", threads, first_user - e0_user_ms[t]);
    printf("pipeline_images_%dt %lld\n", threads, (long long)images[threads - 1]);
    for (int k = 0; k < nb; k++) {
      const char* sfx = "";
      char b[32];
      if (batches[k] != 256) {
        snprintf(b, sizeof b, "_b%d", batches[k]);
        sfx = b;
      }
      int t = threads - 1;
      printf("rill_pipeline_%dt%s %.1f\n", threads, sfx, best[t][k]);
      printf("rill_pipeline_per_cpu_s_%dt%s %.1f\n", threads, sfx, best_cpu[t][k]);
      printf("rill_cpu_us_per_image_%dt%s %.0f\n", threads, sfx, best_cpu[t][k] > 0 ? 1e6 / best_cpu[t][k] : 0);
      printf("ratio_vs_direct_%dt%s %.2f\n", threads, sfx, ratio[t][k]);
      printf("ratio_vs_direct_per_cpu_s_%dt%s %.2f\n", threads, sfx, ratio_cpu[t][k]);
      printf("rill_pipeline_later_%dt%s %.1f\n", threads, sfx, best_late[t][k]);
      printf("ratio_vs_direct_later_%dt%s %.2f\n", threads, sfx, ratio_late[t][k]);
      if (batches[k] == 256) printf("one_batch_work_ms_%dt %.1f\n", threads, best[t][k] > 0 ? 256.0 / best[t][k] * 1e3 : 0);
    }
  }
  for (int i = 0; i < nf; i++) free(files[i].buf);
  free(files);

  /* epoch boundaries: next_epoch off and on, alternated, best of two each; the step is 1.25
   * batches' work at 2 threads, so that the workers keep up inside an epoch */
  double step_ms = e1_batch_ms[1] > 0 ? 1.25 * e1_batch_ms[1] : 80;
  boundary_t bb[2] = {{1e9, 1e9, 1e9}, {1e9, 1e9, 1e9}};
  for (int r = 0; r < 2; r++)
    for (int m = 0; m < 2; m++) {
      boundary_t b;
      if (boundaries(dir, m, step_ms, &b, &err) < 0) {
        fprintf(stderr, "bench_pipeline: %s\n", err.message);
        return 1;
      }
      if (b.secs < bb[m].secs) bb[m] = b;
    }
  printf("epoch_boundary_step_ms %.1f\n", step_ms);
  for (int m = 0; m < 2; m++) {
    const char* name = m ? "ahead" : "cold";
    printf("epoch_boundary_first_wait_ms_%s %.1f\nepoch_boundary_other_wait_ms_%s %.2f\nepoch_boundary_secs_%s %.3f\n",
           name, bb[m].first_ms, name, bb[m].other_ms, name, bb[m].secs);
  }

  /* resident memory over epochs (a quarter of the corpus per epoch keeps this short) */
  pipe_t p;
  if (pipe_new(dir, 2, 256, 4, 0, &p, &err) < 0) {
    fprintf(stderr, "bench_pipeline: %s\n", err.message);
    return 1;
  }
  printf("rss_mib_by_epoch");
  double first_rss = 0, last_rss = 0, warm_rss = 0; /* after epochs 0, last and 3 */
  for (int e = 0; e < rss_epochs; e++) {
    epoch_stats_t es;
    if (e) rill_iter_set_epoch(p.it, e);
    if (epoch(&p, &es, &err) < 0) {
      fprintf(stderr, "\nbench_pipeline: %s\n", err.message);
      return 1;
    }
    last_rss = rss_mib();
    if (e == 0) first_rss = last_rss;
    if (e <= 3) warm_rss = last_rss;
    printf(" %.1f", last_rss);
  }
  printf("\nrss_growth_mib %.1f\nrss_growth_after_epoch3_mib %.1f\n", last_rss - first_rss, last_rss - warm_rss);
  pipe_free(&p);
  return 0;
}
