/* GPU benchmarks (make gpu-bench). Everything is measured in the same run and printed as
 * ratios against its peer:
 *   1. host-to-device: rill's batches -> to_device vs cudaMemcpyAsync from pinned and from
 *      pageable memory (goal: rill >= 0.9x the pinned rate), for batches gathered from
 *      in-memory images (the host's three passes over memory: read, write, DMA) and for pinned
 *      batches the host does not write (the copy stage alone);
 *   2. overlap: a consumer loop running a fixed-duration kernel per batch, fed by the image
 *      pipeline (CPU decode/augment -> uint8 batch -> to_device -> normalize on the GPU) vs the
 *      same loop on data already on the device, the steps running on across epochs as in
 *      training (goals: wait <= 2% of the step, step <= 1.03x; epoch 0, where rill reads each
 *      file for the first time, is also reported apart);
 *   3. CPU scaling of the image pipeline on 1, 2, 4, 8, 15, 16 cores (worker threads and the
 *      calling thread; goal >= 85% of linear), beside libjpeg's own full decodes in plain
 *      threads on the same files (the machine's scaling for this work) and arithmetic alone
 *      (the cores' clock as more of them work).
 * The image pipeline decodes JPEG/PNG files from an ImageFolder tree when RILL_GPU_CORPUS (or
 * build/data/corpus) exists and rill has JPEG support; otherwise a synthetic uint8 source with
 * a comparable CPU cost per image is used (the output says which).
 * Environment: RILL_GPU_CORPUS, RILL_BENCH_STEP_MS (consumer kernel; default: 50 and 25),
 * RILL_BENCH_STEPS (default 40), RILL_BENCH_H2D_BATCHES (default 120). */
#include <ftw.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gpu_common.h"

/* The scaling benchmark's peer, libjpeg's own decode, is built where its header is (the
 * Makefile links -ljpeg exactly then). */
#if defined(__has_include)
#if __has_include(<jpeglib.h>)
#include <jpeglib.h>
#define GPU_HAVE_JPEGLIB 1
#endif
#endif

#define IMG 224
#define IMG_BYTES ((size_t)IMG * IMG * 3)

static double g_cyc_ms;

static int env_int(const char* name, int dflt) {
  const char* v = getenv(name);
  return v != NULL && atoi(v) > 0 ? atoi(v) : dflt;
}

/* ---------------------------------------------------------------- image sources */

/* Synthetic "decode": fills a 224x224x3 image from a hash of its row, a few ns per byte like
 * a real JPEG decode plus crop. */
static int synth_decode(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* exec,
                        void* ctx, rill_error_t* err) {
  int rc = rill_exec_alloc(exec, out, rill_type_tensor(RILL_UINT8, 3, (int64_t[]){IMG, IMG, 3}), in[0]->length);
  if (rc != RILL_OK) return rill_error_set(err, rc, "synthetic decode: out of memory");
  const int64_t* rows = in[0]->data;
  for (int64_t i = 0; i < in[0]->length; i++) {
    uint8_t* px = (uint8_t*)out->data + (size_t)i * IMG_BYTES;
    uint64_t s = gpu_hash((uint64_t)rows[i] + 1);
    for (size_t k = 0; k < IMG_BYTES; k++) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      px[k] = (uint8_t)(s >> 24);
    }
  }
  return RILL_OK;
}

typedef struct source {
  rill_df_t* dfs[4];
  int ndfs;
  rill_df_t* top;  /* the dataframe whose column `img` holds uint8[224,224,3] */
  int img;
  int64_t rows;
  int real;
  char what[160];
} source_t;

static void source_free(source_t* s) {
  for (int i = 0; i < s->ndfs; i++) rill_df_free(s->dfs[i]);
  memset(s, 0, sizeof(*s));
}

static const char* corpus_dir(void) {
  const char* c = getenv("RILL_GPU_CORPUS");
  if (c == NULL || !*c) c = "build/data/corpus";
  struct stat st;
  return stat(c, &st) == 0 && S_ISDIR(st.st_mode) ? c : NULL;
}

static int source_new(int64_t synthetic_rows, source_t* s, rill_error_t* err) {
  memset(s, 0, sizeof(*s));
  const char* corpus = corpus_dir();
  if (corpus != NULL && rill_has_feature(RILL_FEATURE_JPEG)) {
    rill_df_t *files = NULL, *shuf = NULL;
    int rc = rill_df_from_image_folder(corpus, NULL, &files, err);
    if (rc != RILL_OK) return rc;
    s->dfs[s->ndfs++] = files;
    if ((rc = rill_df_shuffle(files, 42, &shuf, err)) != RILL_OK) return rc;
    s->dfs[s->ndfs++] = shuf;
    s->img = rill_image_random_resized_crop(shuf, "img", rill_df_column(shuf, "bytes"),
                                            &(rill_rrc_opts_t){.size = {IMG, IMG}, .on_error = RILL_ON_ERROR_SKIP},
                                            err);
    if (s->img < 0) return s->img;
    s->top = shuf;
    s->rows = rill_df_rows(shuf);
    s->real = 1;
    snprintf(s->what, sizeof(s->what), "%lld images of %s (decode + random resized crop 224)",
             (long long)s->rows, corpus);
    return RILL_OK;
  }
  rill_array_t* ids = NULL;
  int rc = rill_array_new(rill_type_scalar(RILL_INT64), synthetic_rows, &ids, err);
  if (rc != RILL_OK) return rc;
  for (int64_t i = 0; i < synthetic_rows; i++) ((int64_t*)ids->data)[i] = i;
  rill_df_t* df = NULL;
  rc = rill_df_from_arrays((const char* const[]){"id"}, (const rill_array_t* const[]){ids}, 1, 1, &df, err);
  rill_array_release(ids);
  if (rc != RILL_OK) return rc;
  s->dfs[s->ndfs++] = df;
  s->img = rill_df_map(df, "img", rill_type_tensor(RILL_UINT8, 3, (int64_t[]){IMG, IMG, 3}), (int[]){0}, 1,
                       synth_decode, NULL, NULL, &(rill_stage_opts_t){.grain = 4}, err);
  if (s->img < 0) return s->img;
  s->top = df;
  s->rows = synthetic_rows;
  snprintf(s->what, sizeof(s->what), "synthetic uint8 source, %lld images (no image corpus%s)",
           (long long)synthetic_rows, rill_has_feature(RILL_FEATURE_JPEG) ? "" : " or no JPEG support");
  return RILL_OK;
}

/* Next row, starting a new epoch at the end. */
static int next_row(rill_iter_t* it, rill_row_t* row, rill_error_t* err) {
  int rc = rill_iter_next(it, row, err);
  if (rc == RILL_END) {
    rill_iter_set_epoch(it, rill_iter_epoch(it) + 1);
    rc = rill_iter_next(it, row, err);
  }
  return rc;
}

/* ---------------------------------------------------------------- 1. host to device */

/* A map that claims its batch slot and leaves it as it is: pinned batches the host does not
 * write, so that rill_to_device's copy is measured without the host's memory traffic. */
static int untouched(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* exec, void* ctx,
                     rill_error_t* err) {
  int rc = rill_exec_alloc(exec, out, rill_type_tensor(RILL_UINT8, 3, (int64_t[]){IMG, IMG, 3}), in[0]->length);
  return rc == RILL_OK ? RILL_OK : rill_error_set(err, rc, "untouched: out of memory");
}

/* GB/s of batches of `B` cells of column `col` of `df` gathered into pinned batch buffers and
 * copied by rill_to_device to the device, `R` batches after `W` of warm-up, the consumer on a
 * stream of its own; `to_device` 0: the batches alone (no copy). -1 on failure. */
static double h2d_rill(rill_df_t* df, int col, int B, int W, int R, int to_device, rill_cuda_pool_stats_t* grew,
                       rill_error_t* err) {
  const double bytes = (double)B * IMG_BYTES;
  rill_df_t* bdf = NULL;
  rill_iter_t* it = NULL;
  rill_stream_t* consumer = NULL;
  int ok = rill_df_batch(df, &col, 1, B, &(rill_batch_opts_t){.pinned = 1}, &bdf, err) == RILL_OK;
  int d = 0;
  if (ok && to_device) {
    d = rill_to_device(bdf, "dev", 0, &(rill_to_device_opts_t){.inflight = 3}, err);
    ok = d >= 0 && rill_stream_new_cuda(0, &consumer, err) == RILL_OK;
  }
  ok = ok && rill_iter_new(bdf, &(rill_iter_opts_t){.columns = &d, .ncolumns = 1, .prefetch = 8, .stream = consumer},
                           &it, err) == RILL_OK;
  double rate = -1;
  rill_cuda_pool_stats_t p0 = {0}, p1 = {0};
  if (ok) {
    rill_row_t row;
    /* warm-up: the pool's pinned and device blocks are allocated in the first batches */
    for (int w = 0; w < W && ok; w++) ok = next_row(it, &row, err) == RILL_OK;
    ok = ok && (!consumer || rill_stream_synchronize(consumer, err) == RILL_OK);
    rill_cuda_pool_stats(&p0);
    double t0 = gpu_now_s();
    for (int r = 0; r < R && ok; r++) ok = next_row(it, &row, err) == RILL_OK;
    ok = ok && (!consumer || rill_stream_synchronize(consumer, err) == RILL_OK);
    if (ok) rate = bytes * R / (gpu_now_s() - t0) / 1e9;
    rill_cuda_pool_stats(&p1);
  }
  if (grew != NULL) *grew = (rill_cuda_pool_stats_t){.allocs = p1.allocs - p0.allocs, .reuses = p1.reuses - p0.reuses};
  rill_iter_free(it);
  rill_stream_free(consumer);
  rill_df_free(bdf);
  return rate;
}

static void bench_h2d(void) {
  const int B = 256, R = env_int("RILL_BENCH_H2D_BATCHES", 120), W = 16;
  const size_t bytes = (size_t)B * IMG_BYTES;
  printf("\n1. host-to-device, batch of %d x 224x224x3 uint8 (%.1f MB), %d batches\n", B, bytes / 1e6, R);
  void *pinned = NULL, *dev = NULL, *pageable = malloc(bytes);
  cudaStream_t s;
  if (cudaHostAlloc(&pinned, bytes, 0) != cudaSuccess || cudaMalloc(&dev, bytes) != cudaSuccess || !pageable) {
    printf("   skipped: cannot allocate %.1f MB\n", bytes / 1e6);
    return;
  }
  memset(pinned, 1, bytes);
  memset(pageable, 1, bytes);
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  double rate[2] = {0};
  void* srcs[2] = {pinned, pageable};
  for (int k = 0; k < 2; k++) {
    cudaMemcpyAsync(dev, srcs[k], bytes, cudaMemcpyHostToDevice, s);
    cudaStreamSynchronize(s);
    double t0 = gpu_now_s();
    for (int r = 0; r < R; r++) cudaMemcpyAsync(dev, srcs[k], bytes, cudaMemcpyHostToDevice, s);
    cudaStreamSynchronize(s);
    rate[k] = (double)bytes * R / (gpu_now_s() - t0) / 1e9;
  }
  printf("   %-50s %8.2f GB/s  %5.2fx\n", "cudaMemcpyAsync from pinned memory", rate[0], 1.0);
  printf("   %-50s %8.2f GB/s  %5.2fx\n", "cudaMemcpyAsync from pageable memory", rate[1], rate[1] / rate[0]);
  cudaStreamDestroy(s);
  cudaFreeHost(pinned);
  cudaFree(dev);
  free(pageable);

  /* (a) in-memory images (one epoch: no restart inside the measurement) -> pinned batches ->
   * rill_to_device; the host reads each image and writes it into the batch, the DMA reads
   * the batch: three passes over host memory */
  rill_error_t err = {0};
  const int64_t n = (int64_t)B * (W + R + 1);
  rill_array_t* imgs = NULL;
  rill_df_t* df = NULL;
  rill_cuda_pool_stats_t grew = {0};
  int ok = rill_array_new(rill_type_tensor(RILL_UINT8, 3, (int64_t[]){IMG, IMG, 3}), n, &imgs, &err) == RILL_OK;
  if (ok) memset(imgs->data, 7, (size_t)n * IMG_BYTES);
  ok = ok && rill_df_from_arrays((const char* const[]){"img"}, (const rill_array_t* const[]){imgs}, 1, 0, &df,
                                 &err) == RILL_OK;
  double r = ok ? h2d_rill(df, 0, B, W, R, 1, &grew, &err) : -1;
  if (r > 0)
    printf("   %-50s %8.2f GB/s  %5.2fx   (goal >= 0.90x pinned; CUDA pool: %lld new blocks)\n",
           "in-memory images -> pinned batch -> rill_to_device", r, r / rate[0], (long long)grew.allocs);
  else
    printf("   in-memory images -> rill_to_device: failed: %s\n", err.message);
  double g = r > 0 ? h2d_rill(df, 0, B, W, R, 0, NULL, &err) : -1;
  if (g > 0)
    printf("   %-50s %8.2f GB/s  %5.2fx   (the host's part of the line above, alone)\n",
           "in-memory images -> pinned batch, no copy", g, g / rate[0]);
  rill_df_free(df);
  rill_array_release(imgs);

  /* (b) pinned batches the host does not write -> rill_to_device: the copy stage alone */
  rill_array_t* ids = NULL;
  df = NULL;
  ok = rill_array_new(rill_type_scalar(RILL_INT64), n, &ids, &err) == RILL_OK;
  ok = ok && rill_df_from_arrays((const char* const[]){"id"}, (const rill_array_t* const[]){ids}, 1, 0, &df,
                                 &err) == RILL_OK;
  int c = ok ? rill_df_map(df, "img", rill_type_tensor(RILL_UINT8, 3, (int64_t[]){IMG, IMG, 3}), (int[]){0}, 1,
                           untouched, NULL, NULL, NULL, &err)
             : -1;
  double u = c >= 0 ? h2d_rill(df, c, B, W, R, 1, NULL, &err) : -1;
  if (u > 0)
    printf("   %-50s %8.2f GB/s  %5.2fx   (no host traffic but the DMA's)\n",
           "pinned batches not written -> rill_to_device", u, u / rate[0]);
  else
    printf("   pinned batches not written -> rill_to_device: failed: %s\n", err.message);
  rill_df_free(df);
  rill_array_release(ids);
}

/* ---------------------------------------------------------------- 2. overlap */

static void bench_overlap(int step_ms) {
  const int B = 256, steps = env_int("RILL_BENCH_STEPS", 40);
  const long long cycles = (long long)(g_cyc_ms * step_ms);
  const int64_t elems = (int64_t)B * 3 * IMG * IMG;
  rill_error_t err = {0};
  source_t src;
  printf("\n2. overlap: consumer kernel of %d ms per batch of %d, %d steps\n", step_ms, B, steps);
  if (source_new(B * 6, &src, &err) != RILL_OK) {
    printf("   skipped: cannot build the image source: %s\n", err.message);
    source_free(&src);
    return;
  }
  printf("   input: %s\n", src.what);
  float* acc = NULL;
  float* resident = NULL;
  cudaMalloc((void**)&acc, sizeof(float));
  cudaMalloc((void**)&resident, (size_t)elems * sizeof(float));
  cudaMemset(resident, 0, (size_t)elems * sizeof(float));
  rill_stream_t* consumer = NULL;
  rill_df_t* bdf = NULL;
  rill_iter_t* it = NULL;
  int ok = rill_stream_new_cuda(0, &consumer, &err) == RILL_OK;
  ok = ok && rill_df_batch(src.top, &src.img, 1, B, &(rill_batch_opts_t){.pinned = 1, .drop_last = 1}, &bdf,
                           &err) == RILL_OK;
  int d = ok ? rill_to_device(bdf, "dev", 0, NULL, &err) : -1;
  int x = d >= 0 ? rill_cuda_normalize(bdf, "x", d,
                                       &(rill_normalize_opts_t){.flip = 0.5, .mean = {0.485, 0.456, 0.406},
                                                                .std = {0.229, 0.224, 0.225},
                                                                .layout = RILL_LAYOUT_CHW},
                                       0, &err)
                 : -1;
  ok = x >= 0 && rill_iter_new(bdf, &(rill_iter_opts_t){.columns = &x, .ncolumns = 1, .prefetch = 4,
                                                          .threads = rill__ncores() > 1 ? rill__ncores() - 1 : 1,
                                                          .stream = consumer, .next_epoch = 1},
                               &it, &err) == RILL_OK;
  void* cs = rill_stream_cuda_handle(consumer);
  double wait = 0, total = 0, base = 0, wait_max = 0, boundary = 0, boundary_max = 0;
  double wait0 = 0; /* waits of the steps of epoch 0, whose files rill reads for the first time */
  int64_t nb = ok ? rill_df_rows(bdf) : 0, measured = 0, nboundary = 0, steps0 = 0;
  /* The steps run on across epochs as a training loop's do: with next_epoch, the first
   * batches of an epoch are prefetched at the end of the one before, so the waits at the
   * boundaries count with the others and are also reported on their own (once per epoch,
   * which is 5,000 batches of 256 on ImageNet and a few on the corpus here). */
  const int warm = 3;
  if (ok && nb < 1) {
    ok = 0;
    snprintf(err.message, sizeof(err.message), "the corpus holds fewer than %d images: no batch to measure", B);
  }
  if (ok) {
    rill_row_t row;
    /* warm-up steps as the measured ones: the prefetch queue fills while the consumer works */
    for (int w = 0; w < warm && ok; w++) {
      if (!(ok = next_row(it, &row, &err) == RILL_OK)) break;
      const rill_array_t* a = rill_row_get(&row, 0);
      rill_gpu_consume(cs, a->data, a->length * 3 * IMG * IMG, acc, cycles);
      cudaStreamSynchronize((cudaStream_t)cs);
    }
    double t0 = gpu_now_s();
    while (ok && measured < steps) {
      double tw = gpu_now_s();
      int rc = rill_iter_next(it, &row, &err), at_boundary = rc == RILL_END;
      if (at_boundary) {
        rill_iter_set_epoch(it, rill_iter_epoch(it) + 1);
        rc = rill_iter_next(it, &row, &err);
      }
      double wi = gpu_now_s() - tw;
      if (!(ok = rc == RILL_OK)) break;
      wait += wi;
      if (rill_iter_epoch(it) == 0) {
        wait0 += wi;
        steps0++;
      }
      if (wi > wait_max) wait_max = wi;
      if (at_boundary) {
        nboundary++;
        boundary += wi;
        if (wi > boundary_max) boundary_max = wi;
      }
      const rill_array_t* a = rill_row_get(&row, 0);
      rill_gpu_consume(cs, a->data, a->length * 3 * IMG * IMG, acc, cycles);
      cudaStreamSynchronize((cudaStream_t)cs); /* a training loop reading its loss each step */
      measured++;
    }
    total = gpu_now_s() - t0;
    t0 = gpu_now_s();
    for (int64_t i = 0; i < measured; i++) {
      rill_gpu_consume(cs, resident, elems, acc, cycles);
      cudaStreamSynchronize((cudaStream_t)cs);
    }
    base = gpu_now_s() - t0;
  }
  if (ok) {
    printf("   %-44s %8.2f ms\n", "step, data already on the device", 1e3 * base / measured);
    printf("   %-44s %8.2f ms  %5.3fx   (goal <= 1.03x; %lld steps, epochs of %lld batches)\n",
           "step, fed by rill", 1e3 * total / measured, total / base, (long long)measured, (long long)nb);
    printf("   %-44s %8.2f %%          (goal <= 2%%; longest wait %.2f ms)\n", "time waiting for input / step time",
           100.0 * wait / total, 1e3 * wait_max);
    if (steps0 > 0 && steps0 < measured) {
      double step = total / measured;
      printf("   %-44s %8.2f %% / %.2f %%  (%lld steps of epoch 0, first visits / %lld of later epochs)\n",
             "waiting / step time, epoch 0 / later", 100.0 * wait0 / (step * steps0),
             100.0 * (wait - wait0) / (step * (measured - steps0)), (long long)steps0,
             (long long)(measured - steps0));
    }
    if (nboundary > 0)
      printf("   %-44s %8.2f ms         (mean of %lld epoch starts; longest %.2f ms)\n",
             "first batch of the next epoch waited", 1e3 * boundary / nboundary, (long long)nboundary,
             1e3 * boundary_max);
  } else {
    printf("   failed: %s\n", err.message);
  }
  rill_iter_free(it);
  rill_df_free(bdf);
  rill_stream_free(consumer);
  source_free(&src);
  cudaFree(acc);
  cudaFree(resident);
}

/* ---------------------------------------------------------------- 3. CPU scaling */

/* Images/s of `threads` workers over batched dataframe `bdf` from epoch `epoch` on, over the
 * batches after the first `skip` (the pipeline filling up): whole epochs, on into the next
 * ones (prefetched across the boundary) until at least `min_s` seconds were measured, so that
 * a small corpus on many cores is not timed over a few milliseconds. */
static double scaling_pass(rill_df_t* bdf, int threads, int64_t epoch, int skip, double min_s, rill_error_t* err) {
  rill_iter_t* it = NULL;
  int col = 0;
  if (rill_iter_new(bdf, &(rill_iter_opts_t){.columns = &col, .ncolumns = 1, .threads = threads,
                                              .prefetch = threads > 0 ? 4 * threads : 2, .epoch = epoch,
                                              .next_epoch = 1},
                    &it, err) != RILL_OK)
    return -1;
  rill_row_t row;
  int64_t images = 0, b = 0, b_epoch = 0;
  double t0 = gpu_now_s(), t = 0;
  int rc;
  for (;;) {
    rc = rill_iter_next(it, &row, err);
    if (rc == RILL_END) {
      t = gpu_now_s() - t0;
      if (t >= min_s || images == 0 || b_epoch == 0) break; /* done, or epochs give no batch */
      rill_iter_set_epoch(it, rill_iter_epoch(it) + 1);
      b_epoch = 0;
      continue;
    }
    if (rc != RILL_OK) break;
    b_epoch++;
    if (++b == skip) t0 = gpu_now_s();
    if (b > skip) images += rill_row_get(&row, 0)->length;
  }
  rill_iter_free(it);
  return rc < 0 || images == 0 ? -1 : images / t;
}

#ifdef GPU_HAVE_JPEGLIB
/* ---- the peer: full decodes with libjpeg in plain threads (no rill), the machine's own
 * scaling for this work */

typedef struct jfile {
  unsigned char* data;
  size_t size;
} jfile_t;

static jfile_t* g_jfiles;
static int g_njfiles, g_jcap;

static int collect_jpeg(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)ftw;
  size_t n = strlen(path);
  if (flag != FTW_F || n < 4 || strcmp(path + n - 4, ".jpg") != 0 || st->st_size <= 0 || g_njfiles >= 1000) return 0;
  if (g_njfiles == g_jcap) {
    int cap = g_jcap ? 2 * g_jcap : 256;
    jfile_t* nf = realloc(g_jfiles, sizeof(*nf) * (size_t)cap);
    if (nf == NULL) return 1;
    g_jfiles = nf;
    g_jcap = cap;
  }
  FILE* f = fopen(path, "rb");
  if (f == NULL) return 0;
  unsigned char* d = malloc((size_t)st->st_size);
  if (d != NULL && fread(d, 1, (size_t)st->st_size, f) == (size_t)st->st_size)
    g_jfiles[g_njfiles++] = (jfile_t){d, (size_t)st->st_size};
  else
    free(d);
  fclose(f);
  return 0;
}

typedef struct jwork {
  int first, count;
  pthread_barrier_t* start;
} jwork_t;

static void* jpeg_worker(void* p) {
  jwork_t* w = p;
  struct jpeg_decompress_struct cinfo;
  struct jpeg_error_mgr jerr;
  cinfo.err = jpeg_std_error(&jerr);
  jpeg_create_decompress(&cinfo);
  unsigned char* buf = NULL;
  size_t cap = 0;
  pthread_barrier_wait(w->start);
  for (int i = 0; i < w->count; i++) {
    const jfile_t* f = &g_jfiles[(w->first + i) % g_njfiles];
    jpeg_mem_src(&cinfo, f->data, (unsigned long)f->size);
    jpeg_read_header(&cinfo, TRUE);
    cinfo.out_color_space = JCS_RGB;
    jpeg_start_decompress(&cinfo);
    size_t stride = (size_t)cinfo.output_width * 3, need = stride * cinfo.output_height;
    if (need > cap) {
      free(buf);
      buf = malloc(need);
      cap = need;
    }
    while (cinfo.output_scanline < cinfo.output_height) {
      JSAMPROW rowp = buf + stride * cinfo.output_scanline;
      jpeg_read_scanlines(&cinfo, &rowp, 1);
    }
    jpeg_finish_decompress(&cinfo);
  }
  jpeg_destroy_decompress(&cinfo);
  free(buf);
  return NULL;
}

/* Images/s of `threads` threads decoding `per_thread` files each (different files). */
static double jpeg_direct_rate(int threads, int per_thread) {
  pthread_t tid[64];
  jwork_t w[64];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
  for (int t = 0; t < threads; t++) {
    w[t] = (jwork_t){t * (g_njfiles / threads), per_thread, &start};
    pthread_create(&tid[t], NULL, jpeg_worker, &w[t]);
  }
  pthread_barrier_wait(&start);
  double t0 = gpu_now_s();
  for (int t = 0; t < threads; t++) pthread_join(tid[t], NULL);
  double dt = gpu_now_s() - t0;
  pthread_barrier_destroy(&start);
  return (double)threads * per_thread / dt;
}

static void peer_scaling(const int* cores, int ncores) {
  const char* corpus = corpus_dir();
  if (corpus == NULL || nftw(corpus, collect_jpeg, 32, 0) != 0 || g_njfiles == 0) {
    printf("   peer: skipped (no .jpg files to read)\n");
    return;
  }
  printf("   peer: full libjpeg decodes (RGB) in plain threads, %d files\n", g_njfiles);
  printf("   %6s %12s %9s %11s\n", "cores", "images/s", "speedup", "of linear");
  double r1 = 0;
  for (int k = 0; k < ncores && cores[k] <= rill__ncores() && cores[k] <= 64; k++) {
    double r = jpeg_direct_rate(cores[k], 300);
    if (k == 0) r1 = r;
    printf("   %6d %12.0f %8.2fx %10.0f%%\n", cores[k], r, r / r1, 100.0 * r / r1 / cores[k]);
  }
  for (int i = 0; i < g_njfiles; i++) free(g_jfiles[i].data);
  free(g_jfiles);
  g_jfiles = NULL;
  g_njfiles = g_jcap = 0;
}
#endif

/* ---- the machine's ceiling: arithmetic in registers only (no memory, no shared cache), in
 * plain threads. Where it scales below linear, the cores slow down as more of them work
 * (shared clock and power budget), and no program can scale better. */

static volatile uint64_t g_alu_sink;

typedef struct alu_work {
  long long iters;
  uint64_t out;
  pthread_barrier_t* start;
} alu_work_t;

static void* alu_worker(void* p) {
  alu_work_t* w = p;
  uint64_t a = 0x9e3779b97f4a7c15ULL, b = (uint64_t)(uintptr_t)p | 1;
  pthread_barrier_wait(w->start);
  for (long long i = 0; i < w->iters; i++) {
    a ^= a << 13;
    a ^= a >> 7;
    a ^= a << 17;
    b = b * 6364136223846793005ULL + a;
  }
  w->out = a ^ b;
  return NULL;
}

/* Iterations/s of `threads` threads running `iters` iterations each. */
static double alu_rate(int threads, long long iters) {
  pthread_t tid[64];
  alu_work_t w[64];
  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)threads + 1);
  for (int t = 0; t < threads; t++) {
    w[t] = (alu_work_t){iters, 0, &start};
    pthread_create(&tid[t], NULL, alu_worker, &w[t]);
  }
  pthread_barrier_wait(&start);
  double t0 = gpu_now_s();
  uint64_t sink = 0;
  for (int t = 0; t < threads; t++) {
    pthread_join(tid[t], NULL);
    sink ^= w[t].out;
  }
  double dt = gpu_now_s() - t0;
  pthread_barrier_destroy(&start);
  g_alu_sink = sink; /* the loops' results are used: the compiler keeps them */
  return (double)threads * (double)iters / dt;
}

static void alu_scaling(const int* cores, int ncores) {
  const long long iters = 300000000LL; /* about 0.3 s a thread */
  printf("   peer: arithmetic in registers only, plain threads (the machine's own ceiling)\n");
  printf("   %6s %12s %9s %11s\n", "cores", "M iter/s", "speedup", "of linear");
  double r1 = 0;
  for (int k = 0; k < ncores && cores[k] <= rill__ncores() && cores[k] <= 64; k++) {
    double r = alu_rate(cores[k], iters);
    if (k == 0) r1 = r;
    printf("   %6d %12.0f %8.2fx %10.0f%%\n", cores[k], r / 1e6, r / r1, 100.0 * r / r1 / cores[k]);
  }
}

/* Every thread count decodes the same later epoch of the corpus (its marks made by a warm-up
 * pass first, as in training after epoch 0), so that each count does the same work. */
static void bench_scaling(void) {
  /* cores at work: the iterator's worker threads, and the calling thread, which helps with
   * the tasks while it waits when there are fewer workers than cores (one core: no workers) */
  const int cores[] = {1, 2, 4, 8, 15, 16};
  const int B = 32;
  rill_error_t err = {0};
  source_t src;
  printf("\n3. CPU scaling of the image pipeline (batches of %d uint8 224x224x3, host only)\n", B);
  if (source_new(B * 200, &src, &err) != RILL_OK) {
    printf("   skipped: cannot build the image source: %s\n", err.message);
    source_free(&src);
    return;
  }
  printf("   input: %s; %d cores\n", src.what, rill__ncores());
  rill_df_t* bdf = NULL;
  if (rill_df_batch(src.top, &src.img, 1, B, &(rill_batch_opts_t){.drop_last = 1}, &bdf, &err) != RILL_OK) {
    printf("   failed: %s\n", err.message);
    source_free(&src);
    return;
  }
  double t0 = gpu_now_s();
  double warm = scaling_pass(bdf, rill__ncores(), 0, 0, 0, &err);
  printf("   warm-up: epoch 0 at %d threads, %.0f images/s (%.2f s); %lld batches an epoch\n", rill__ncores(), warm,
         gpu_now_s() - t0, (long long)rill_df_rows(bdf));
  const int64_t nb = rill_df_rows(bdf);
  double rate1 = 0;
  printf("   %6s %8s %12s %9s %11s\n", "cores", "workers", "images/s", "speedup", "of linear");
  for (size_t k = 0; warm > 0 && k < sizeof(cores) / sizeof(cores[0]) && cores[k] <= rill__ncores(); k++) {
    int workers = cores[k] - 1;
    int skip = 1 + cores[k] < nb / 4 ? 1 + cores[k] : (int)(nb / 4); /* the pipeline filling up */
    double rate = scaling_pass(bdf, workers ? workers : RILL_THREADS_NONE, 1, skip, 2.0, &err);
    if (rate < 0) break;
    if (k == 0) rate1 = rate;
    printf("   %6d %8d %12.0f %8.2fx %10.0f%%\n", cores[k], workers, rate, rate / rate1,
           100.0 * rate / rate1 / cores[k]);
  }
  if (err.code < 0) printf("   failed: %s\n", err.message);
  printf("   (goal: >= 85%% of linear)\n");
#ifdef GPU_HAVE_JPEGLIB
  if (src.real) peer_scaling(cores, (int)(sizeof(cores) / sizeof(cores[0])));
#endif
  alu_scaling(cores, (int)(sizeof(cores) / sizeof(cores[0])));
  rill_df_free(bdf);
  source_free(&src);
}

int main(void) {
  if (gpu_skip("gpu_bench")) return 0;
  struct cudaDeviceProp p;
  cudaGetDeviceProperties(&p, 0);
  g_cyc_ms = rill_gpu_cycles_per_ms();
  printf("gpu_bench on %s (%d CUDA device(s)), rill %s\n", p.name, rill_cuda_device_count(), rill_version());
  bench_h2d();
  /* 50 ms: about a ResNet-50 training step of 256 images on an H100/H200 with mixed precision
   * (5,000 images/s); 25 ms: twice that rate, past what 16 cores decode (printed as a stress) */
  if (getenv("RILL_BENCH_STEP_MS") != NULL) {
    bench_overlap(env_int("RILL_BENCH_STEP_MS", 50));
  } else {
    bench_overlap(50);
    bench_overlap(25);
  }
  bench_scaling();
  return 0;
}
