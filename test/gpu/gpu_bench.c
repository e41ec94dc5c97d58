/* GPU benchmarks (make gpu-bench). Everything is measured in the same run and printed as
 * ratios against its peer:
 *   1. host-to-device: rill's batch -> to_device vs cudaMemcpyAsync from pinned and from
 *      pageable memory (goal: rill >= 0.9x the pinned rate);
 *   2. overlap: a consumer loop running a fixed-duration kernel per batch, fed by the image
 *      pipeline (CPU decode/augment -> uint8 batch -> to_device -> normalize on the GPU) vs the
 *      same loop on data already on the device (goals: wait <= 2% of the step, step <= 1.03x);
 *   3. CPU scaling of the image pipeline at 1, 2, 4, 8, 15 threads (goal >= 85% of linear).
 * The image pipeline decodes JPEG/PNG files from an ImageFolder tree when RILL_GPU_CORPUS (or
 * build/data/corpus) exists and rill has JPEG support; otherwise a synthetic uint8 source with
 * a comparable CPU cost per image is used (the output says which).
 * Environment: RILL_GPU_CORPUS, RILL_BENCH_STEP_MS (consumer kernel, default 25),
 * RILL_BENCH_STEPS (default 40). */
#include <sys/stat.h>
#include <unistd.h>

#include "gpu_common.h"

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

static void bench_h2d(void) {
  const int B = 256, R = env_int("RILL_BENCH_H2D_BATCHES", 40);
  const size_t bytes = (size_t)B * IMG_BYTES;
  printf("\n1. host-to-device, batch of %d x 224x224x3 uint8 (%.1f MB), %d batches\n", B, bytes / 1e6, R);
  void *pinned = NULL, *dev = NULL, *pageable = malloc(bytes);
  cudaStream_t s;
  cudaEvent_t e0, e1;
  if (cudaHostAlloc(&pinned, bytes, 0) != cudaSuccess || cudaMalloc(&dev, bytes) != cudaSuccess || !pageable) {
    printf("   skipped: cannot allocate %.1f MB\n", bytes / 1e6);
    return;
  }
  memset(pinned, 1, bytes);
  memset(pageable, 1, bytes);
  cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  double rate[3] = {0};
  void* srcs[2] = {pinned, pageable};
  for (int k = 0; k < 2; k++) {
    cudaMemcpyAsync(dev, srcs[k], bytes, cudaMemcpyHostToDevice, s);
    cudaStreamSynchronize(s);
    double t0 = gpu_now_s();
    for (int r = 0; r < R; r++) cudaMemcpyAsync(dev, srcs[k], bytes, cudaMemcpyHostToDevice, s);
    cudaStreamSynchronize(s);
    rate[k] = (double)bytes * R / (gpu_now_s() - t0) / 1e9;
  }
  /* rill: a batched dataframe of in-memory images (pinned batch buffers) -> to_device */
  rill_error_t err = {0};
  const int64_t n = (int64_t)B * 8;
  rill_array_t* imgs = NULL;
  rill_df_t *df = NULL, *bdf = NULL;
  rill_iter_t* it = NULL;
  rill_stream_t* consumer = NULL;
  int ok = rill_array_new(rill_type_tensor(RILL_UINT8, 3, (int64_t[]){IMG, IMG, 3}), n, &imgs, &err) == RILL_OK;
  if (ok) memset(imgs->data, 7, (size_t)n * IMG_BYTES);
  ok = ok && rill_df_from_arrays((const char* const[]){"img"}, (const rill_array_t* const[]){imgs}, 1, 0, &df,
                                 &err) == RILL_OK;
  ok = ok && rill_df_batch(df, (int[]){0}, 1, B, &(rill_batch_opts_t){.pinned = 1}, &bdf, &err) == RILL_OK;
  int d = ok ? rill_to_device(bdf, "dev", 0, &(rill_to_device_opts_t){.inflight = 3}, &err) : -1;
  ok = d >= 0 && rill_stream_new_cuda(0, &consumer, &err) == RILL_OK;
  ok = ok && rill_iter_new(bdf, &(rill_iter_opts_t){.columns = &d, .ncolumns = 1, .prefetch = 4, .stream = consumer},
                           &it, &err) == RILL_OK;
  if (ok) {
    rill_row_t row;
    for (int w = 0; w < 2 && ok; w++) ok = next_row(it, &row, &err) == RILL_OK;
    rill_stream_synchronize(consumer, &err);
    double t0 = gpu_now_s();
    for (int r = 0; r < R && ok; r++) ok = next_row(it, &row, &err) == RILL_OK;
    ok = ok && rill_stream_synchronize(consumer, &err) == RILL_OK;
    rate[2] = (double)bytes * R / (gpu_now_s() - t0) / 1e9;
  }
  printf("   %-44s %8.2f GB/s  %5.2fx\n", "cudaMemcpyAsync from pinned memory", rate[0], 1.0);
  printf("   %-44s %8.2f GB/s  %5.2fx\n", "cudaMemcpyAsync from pageable memory", rate[1], rate[1] / rate[0]);
  if (ok)
    printf("   %-44s %8.2f GB/s  %5.2fx   (goal >= 0.90x pinned)\n", "rill batch (pinned) -> rill_to_device", rate[2],
           rate[2] / rate[0]);
  else
    printf("   rill batch -> rill_to_device: failed: %s\n", err.message);
  rill_iter_free(it);
  rill_stream_free(consumer);
  rill_df_free(bdf);
  rill_df_free(df);
  rill_array_release(imgs);
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(s);
  cudaFreeHost(pinned);
  cudaFree(dev);
  free(pageable);
}

/* ---------------------------------------------------------------- 2. overlap */

static void bench_overlap(void) {
  const int B = 256, steps = env_int("RILL_BENCH_STEPS", 40), step_ms = env_int("RILL_BENCH_STEP_MS", 25);
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
                                                          .stream = consumer},
                               &it, &err) == RILL_OK;
  void* cs = rill_stream_cuda_handle(consumer);
  double wait = 0, total = 0, base = 0;
  if (ok) {
    rill_row_t row;
    for (int w = 0; w < 3 && ok; w++) ok = next_row(it, &row, &err) == RILL_OK;
    double t0 = gpu_now_s();
    for (int i = 0; i < steps && ok; i++) {
      double tw = gpu_now_s();
      ok = next_row(it, &row, &err) == RILL_OK;
      wait += gpu_now_s() - tw;
      if (!ok) break;
      const rill_array_t* a = rill_row_get(&row, 0);
      rill_gpu_consume(cs, a->data, a->length * 3 * IMG * IMG, acc, cycles);
      cudaStreamSynchronize((cudaStream_t)cs); /* a training loop reading its loss each step */
    }
    total = gpu_now_s() - t0;
    t0 = gpu_now_s();
    for (int i = 0; i < steps; i++) {
      rill_gpu_consume(cs, resident, elems, acc, cycles);
      cudaStreamSynchronize((cudaStream_t)cs);
    }
    base = gpu_now_s() - t0;
  }
  if (ok) {
    rill_iter_stats_t st;
    rill_iter_stats(it, &st);
    printf("   %-44s %8.2f ms\n", "step, data already on the device", 1e3 * base / steps);
    printf("   %-44s %8.2f ms  %5.3fx   (goal <= 1.03x)\n", "step, fed by rill", 1e3 * total / steps, total / base);
    printf("   %-44s %8.2f %%          (goal <= 2%%; rill stats wait %.1f ms in all)\n",
           "time waiting for input / step time", 100.0 * wait / total, st.wait_ns / 1e6);
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

static void bench_scaling(void) {
  const int threads[] = {1, 2, 4, 8, 15};
  const int B = 64;
  rill_error_t err = {0};
  source_t src;
  printf("\n3. CPU scaling of the image pipeline (batches of %d uint8 224x224x3, host only)\n", B);
  if (source_new(B * 24, &src, &err) != RILL_OK) {
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
  int64_t nb = rill_df_rows(bdf);
  if (nb > 24) nb = 24;
  double rate1 = 0;
  printf("   %8s %12s %9s %11s\n", "threads", "images/s", "speedup", "of linear");
  for (size_t k = 0; k < sizeof(threads) / sizeof(threads[0]); k++) {
    rill_iter_t* it = NULL;
    int col = 0;
    if (rill_iter_new(bdf, &(rill_iter_opts_t){.columns = &col, .ncolumns = 1, .threads = threads[k],
                                                .prefetch = 2 * threads[k]},
                      &it, &err) != RILL_OK) {
      printf("   failed: %s\n", err.message);
      break;
    }
    rill_row_t row;
    int64_t images = 0;
    int rc = rill_iter_next(it, &row, &err); /* warm-up batch */
    double t0 = gpu_now_s();
    for (int64_t b = 1; b < nb && rc == RILL_OK; b++) {
      rc = rill_iter_next(it, &row, &err);
      if (rc == RILL_OK) images += rill_row_get(&row, 0)->length;
    }
    double t = gpu_now_s() - t0;
    rill_iter_free(it);
    if (rc < 0) {
      printf("   failed: %s\n", err.message);
      break;
    }
    double rate = images / t;
    if (k == 0) rate1 = rate;
    printf("   %8d %12.0f %8.2fx %10.0f%%\n", threads[k], rate, rate / rate1, 100.0 * rate / rate1 / threads[k]);
  }
  printf("   (goal: >= 85%% of linear)\n");
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
  bench_overlap();
  bench_scaling();
  return 0;
}
