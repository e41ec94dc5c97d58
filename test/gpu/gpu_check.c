/* GPU correctness checks (make gpu-check): streams and events, the normalize kernels against
 * a CPU reference, event ordering between streams without host synchronization, the pinned
 * and device buffer pool, whole pipelines (batch -> to_device -> normalize) under load with
 * checksums, and the Arrow device / DLPack exports of CUDA batches. Prints
 * "N passed, M failed"; exits 1 when a check failed. */
#include "gpu_common.h"

static double g_cyc_ms;

/* ---------------------------------------------------------------- streams and events */

static void check_streams_events(void) {
  rill_error_t err = {0};
  rill_stream_t* s = NULL;
  CHECK_OK(rill_stream_new_cuda(0, &s, &err), err, return);
  CHECK(rill_stream_cuda_handle(s) != NULL, "no handle");
  CHECK(rill_stream_device(s).type == RILL_DEVICE_CUDA && rill_stream_device(s).id == 0, "device");
  void* ev = NULL;
  CHECK_OK(rill__cuda_event_new(0, &ev, &err), err, rill_stream_free(s); return);
  CHECK(rill__cuda_event_query(ev) == 1, "a fresh event counts as completed");
  CHECK(rill_gpu_spin(rill_stream_cuda_handle(s), (long long)(g_cyc_ms * 50)) == 0, "spin");
  CHECK_OK(rill__cuda_event_record(ev, rill_stream_cuda_handle(s), &err), err, (void)0);
  CHECK(rill__cuda_event_query(ev) == 0, "event of a 50 ms kernel completed at once");
  CHECK_OK(rill__event_wait(ev, NULL, &err), err, (void)0);
  CHECK(rill__cuda_event_query(ev) == 1, "event not completed after sync");
  CHECK_OK(rill_stream_synchronize(s, &err), err, (void)0);
  rill__cuda_event_free(ev);
  rill_stream_free(s);
  rill_stream_t* bad = NULL;
  int n = rill_cuda_device_count();
  CHECK(rill_stream_new_cuda(n, &bad, &err) == RILL_ENODEV && strstr(err.message, "no CUDA device") != NULL,
        "device %d beyond the count: %s", n, err.message);
}

/* ---------------------------------------------------------------- kernels vs CPU */

static void check_kernel_case(int n, int h, int w, int c, int half, int chw) {
  size_t img = (size_t)h * w * c, total = img * (size_t)n;
  uint8_t* src = malloc(total);
  uint8_t* mask = malloc((size_t)n);
  float* ref = malloc(img * sizeof(float));
  void* got = malloc(total * 4);
  for (size_t i = 0; i < total; i++) src[i] = (uint8_t)gpu_hash(i * 7 + (size_t)n);
  for (int i = 0; i < n; i++) mask[i] = (uint8_t)(gpu_hash((uint64_t)i) & 1);
  rill_normalize_opts_t o = {.mean = {0.485, 0.456, 0.406, 0.5}, .std = {0.229, 0.224, 0.225, 0.0}};
  float scale[4], bias[4];
  gpu_norm_consts(&o, c, scale, bias);
  rill_device_t dev = {RILL_DEVICE_CUDA, 0};
  uint8_t* dsrc = rill__cuda_alloc(dev, total);
  void* ddst = rill__cuda_alloc(dev, total * 4);
  CHECK(dsrc != NULL && ddst != NULL, "device allocation");
  if (dsrc == NULL || ddst == NULL) goto done;
  CUDA_OK(cudaMemcpy(dsrc, src, total, cudaMemcpyHostToDevice));
  int e = rill__cuda_normalize_launch(dsrc, ddst, n, h, w, c, half, chw, scale, bias, mask, NULL);
  CHECK(e == 0, "launch: %s", cudaGetErrorString((cudaError_t)e));
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(got, ddst, total * (half ? 2 : 4), cudaMemcpyDeviceToHost));
  int64_t bad = 0;
  double maxdiff = 0;
  for (int i = 0; i < n; i++) {
    gpu_ref_normalize(src + (size_t)i * img, h, w, c, mask[i], chw, scale, bias, ref);
    for (size_t k = 0; k < img; k++) {
      size_t at = (size_t)i * img + k;
      float g = half ? gpu_h2f(((uint16_t*)got)[at]) : ((float*)got)[at];
      int exact = half ? ((uint16_t*)got)[at] == gpu_f2h(ref[k]) : g == ref[k];
      if (!exact) bad++;
      /* against the textbook formula (imgops' CPU operator) in double */
      int y, x, ch;
      if (chw) { ch = (int)(k / ((size_t)h * w)); y = (int)(k / w % h); x = (int)(k % w); }
      else { ch = (int)(k % c); x = (int)(k / c % w); y = (int)(k / c / w); }
      int xs = mask[i] ? w - 1 - x : x;
      double sd = o.std[ch] == 0 ? 1.0 : o.std[ch];
      double t = (src[(size_t)i * img + ((size_t)y * w + xs) * c + ch] / 255.0 - o.mean[ch]) / sd;
      double d = fabs((double)g - t);
      if (d > maxdiff) maxdiff = d;
    }
  }
  CHECK(bad == 0, "n=%d %dx%dx%d half=%d chw=%d: %lld values differ from the reference", n, h, w, c,
        half, chw, (long long)bad);
  CHECK(maxdiff <= (half ? 4e-3 : 2e-6), "n=%d half=%d chw=%d: max |gpu - (x/255-mean)/std| = %g", n,
        half, chw, maxdiff);
done:
  rill__cuda_free(dev, dsrc);
  rill__cuda_free(dev, ddst);
  free(src);
  free(mask);
  free(ref);
  free(got);
}

static void check_kernels(void) {
  const int cases[][4] = {{5, 7, 13, 3}, {3, 1, 1, 1}, {33, 16, 9, 4}, {4100, 2, 3, 3}, {2, 224, 224, 3}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
    for (int half = 0; half < 2; half++)
      for (int chw = 0; chw < 2; chw++)
        check_kernel_case(cases[i][0], cases[i][1], cases[i][2], cases[i][3], half, chw);
}

/* ---------------------------------------------------------------- event ordering */

/* Stream A writes a buffer after a long kernel and records an event; stream B waits on the
 * event (no host synchronization) and reads the buffer. B must see A's data. */
static void check_event_ordering(void) {
  rill_error_t err = {0};
  rill_stream_t *a = NULL, *b = NULL;
  CHECK_OK(rill_stream_new_cuda(0, &a, &err), err, return);
  CHECK_OK(rill_stream_new_cuda(0, &b, &err), err, rill_stream_free(a); return);
  const size_t n = (size_t)8 << 20;
  rill_device_t dev = {RILL_DEVICE_CUDA, 0}, pin = {RILL_DEVICE_CUDA_HOST, 0};
  uint8_t* hsrc = rill__cuda_alloc(pin, n);
  uint8_t* hdst = rill__cuda_alloc(pin, n);
  uint8_t* dbuf = rill__cuda_alloc(dev, n);
  void* ev = NULL;
  CHECK(hsrc && hdst && dbuf, "allocation");
  CHECK_OK(rill__cuda_event_new(0, &ev, &err), err, goto done);
  if (!(hsrc && hdst && dbuf)) goto done;
  for (size_t i = 0; i < n; i++) hsrc[i] = (uint8_t)gpu_hash(i);
  memset(hdst, 0, n);
  CUDA_OK(cudaMemset(dbuf, 0, n));
  CUDA_OK(cudaDeviceSynchronize());
  void* sa = rill_stream_cuda_handle(a);
  void* sb = rill_stream_cuda_handle(b);
  CHECK(rill_gpu_spin(sa, (long long)(g_cyc_ms * 200)) == 0, "spin");
  CHECK_OK(rill__cuda_memcpy(dbuf, dev, hsrc, pin, n, sa, &err), err, (void)0);
  CHECK_OK(rill__cuda_event_record(ev, sa, &err), err, (void)0);
  CHECK_OK(rill__event_wait(ev, sb, &err), err, (void)0);
  CHECK_OK(rill__cuda_memcpy(hdst, pin, dbuf, dev, n, sb, &err), err, (void)0);
  CHECK_OK(rill_stream_synchronize(b, &err), err, (void)0);
  CHECK(rill__cuda_event_query(ev) == 1, "B finished before A's event");
  CHECK(memcmp(hdst, hsrc, n) == 0, "stream B read the buffer before stream A wrote it");
done:
  CHECK_OK(rill_stream_synchronize(a, &err), err, (void)0);
  rill__cuda_event_free(ev);
  rill__cuda_free(pin, hsrc);
  rill__cuda_free(pin, hdst);
  rill__cuda_free(dev, dbuf);
  rill_stream_free(a);
  rill_stream_free(b);
}

/* ---------------------------------------------------------------- buffer pool */

static void check_pool_kind(rill_device_t dev) {
  rill_error_t err = {0};
  rill_stream_t* s = NULL;
  CHECK_OK(rill_stream_new_cuda(0, &s, &err), err, return);
  const size_t n = 3u << 20;
  int64_t a0, r0, c0, a1, r1, c1;
  /* start from an empty cache so that the first allocation below is a new block */
  CUDA_OK(cudaDeviceSynchronize());
  rill_cuda_pool_trim();
  void* p = rill__cuda_alloc(dev, n);
  CHECK(p != NULL, "alloc");
  /* the stream still runs when p is freed: p must not be handed out again yet */
  CHECK(rill_gpu_spin(rill_stream_cuda_handle(s), (long long)(g_cyc_ms * 200)) == 0, "spin");
  rill__cuda_free(dev, p);
  rill__cuda_pool_stats(&a0, &r0, &c0);
  void* q = rill__cuda_alloc(dev, n);
  CHECK(q != NULL && q != p, "a block freed under pending work was reused (type %d)", (int)dev.type);
  CHECK_OK(rill_stream_synchronize(s, &err), err, (void)0);
  void* r = rill__cuda_alloc(dev, n - 100); /* same size class */
  rill__cuda_pool_stats(&a1, &r1, &c1);
  CHECK(r == p, "a completed block was not reused (type %d)", (int)dev.type);
  CHECK(r1 == r0 + 1 && a1 == a0 + 1, "stats: allocs %lld->%lld reuses %lld->%lld", (long long)a0,
        (long long)a1, (long long)r0, (long long)r1);
  rill__cuda_free(dev, q);
  rill__cuda_free(dev, r);
  rill_stream_free(s);
  rill_cuda_pool_stats_t st;
  rill_cuda_pool_stats(&st);
  CHECK(st.cached_bytes >= (int64_t)(2 * n), "cached bytes %lld", (long long)st.cached_bytes);
  CHECK(rill_cuda_pool_trim() >= (int64_t)(2 * n), "trim released too little");
}

static void check_pool(void) {
  check_pool_kind((rill_device_t){RILL_DEVICE_CUDA, 0});
  check_pool_kind((rill_device_t){RILL_DEVICE_CUDA_HOST, 0});
}

/* ---------------------------------------------------------------- pipelines */

typedef struct pipe_case {
  int n, h, w, batch;
  int pinned;             /* batch buffers in pinned memory */
  double flip;
  int half, chw;
  int inflight, threads, prefetch;
  int host_consumer;      /* no consumer stream: rill_array_sync on the host */
} pipe_case_t;

typedef struct pipe_result {
  int64_t images, flips, batches, wrong_flips;
  uint64_t checksum;
} pipe_result_t;

static void run_pipeline(const pipe_case_t* pc, uint64_t seed, pipe_result_t* res) {
  rill_error_t err = {0};
  memset(res, 0, sizeof(*res));
  const int c = 3;
  size_t img = (size_t)pc->h * pc->w * c;
  rill_array_t* src = NULL;
  rill_df_t *df = NULL, *bdf = NULL;
  rill_iter_t* it = NULL;
  rill_stream_t* consumer = NULL;
  float *ref = malloc(img * 4), *ref_flip = malloc(img * 4);
  void* host = NULL;
  rill_device_t pin = {RILL_DEVICE_CUDA_HOST, 0};
  CHECK_OK(rill_array_new(rill_type_tensor(RILL_UINT8, 3, (int64_t[]){pc->h, pc->w, c}), pc->n, &src, &err),
           err, goto done);
  for (size_t i = 0; i < img * (size_t)pc->n; i++) ((uint8_t*)src->data)[i] = (uint8_t)gpu_hash(i + 99);
  CHECK_OK(rill_df_from_arrays((const char* const[]){"img"}, (const rill_array_t* const[]){src}, 1, 0, &df,
                               &err), err, goto done);
  CHECK_OK(rill_df_batch(df, (int[]){0}, 1, pc->batch, &(rill_batch_opts_t){.pinned = pc->pinned}, &bdf, &err),
           err, goto done);
  int dcol = rill_to_device(bdf, "dev", 0, &(rill_to_device_opts_t){.inflight = pc->inflight}, &err);
  CHECK(dcol >= 0, "to_device: %s", err.message);
  if (dcol < 0) goto done;
  rill_normalize_opts_t o = {.flip = pc->flip, .mean = {0.485, 0.456, 0.406}, .std = {0.229, 0.224, 0.225},
                             .dtype = pc->half ? RILL_FLOAT16 : RILL_FLOAT32,
                             .layout = pc->chw ? RILL_LAYOUT_CHW : RILL_LAYOUT_HWC};
  int ncol = rill_cuda_normalize(bdf, "x", dcol, &o, 0, &err);
  CHECK(ncol >= 0, "cuda_normalize: %s", err.message);
  if (ncol < 0) goto done;
  float scale[3], bias[3];
  gpu_norm_consts(&o, c, scale, bias);
  if (!pc->host_consumer) CHECK_OK(rill_stream_new_cuda(0, &consumer, &err), err, goto done);
  int cols[2] = {dcol, ncol};
  CHECK_OK(rill_iter_new(bdf, &(rill_iter_opts_t){.columns = cols, .ncolumns = 2, .threads = pc->threads,
                                                   .prefetch = pc->prefetch, .seed = seed, .stream = consumer},
                         &it, &err), err, goto done);
  size_t esize = pc->half ? 2 : 4;
  size_t hcap = (size_t)pc->batch * img * (esize + 1);
  host = rill__cuda_alloc(pin, hcap);
  CHECK(host != NULL, "pinned allocation");
  if (host == NULL) goto done;
  void* cs = rill_stream_cuda_handle(consumer);
  rill_row_t row;
  int rc;
  while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) {
    const rill_array_t* d = rill_row_get(&row, 0);
    const rill_array_t* x = rill_row_get(&row, 1);
    int64_t first = row.index * pc->batch, len = x->length;
    CHECK(d->device.type == RILL_DEVICE_CUDA && x->device.type == RILL_DEVICE_CUDA, "outputs not on the device");
    CHECK(x->event != NULL, "device output without an event");
    CHECK(len == d->length && len == (first + pc->batch <= pc->n ? pc->batch : pc->n - first),
          "batch %lld has %lld cells", (long long)row.index, (long long)len);
    CHECK(x->type.dtype == o.dtype && x->type.ndim == 3 &&
          x->type.shape[0] == (pc->chw ? c : pc->h) && x->type.shape[2] == (pc->chw ? pc->w : c), "type");
    if (pc->host_consumer) {
      CHECK_OK(rill_array_sync(x, &err), err, break);
      CHECK_OK(rill_array_sync(d, &err), err, break);
    }
    /* on the consumer stream: the engine made it wait on the batch's event */
    uint8_t* hx = host;
    uint8_t* hd = (uint8_t*)host + (size_t)len * img * esize;
    CUDA_OK(cudaMemcpyAsync(hx, x->data, (size_t)len * img * esize, cudaMemcpyDeviceToHost, cs));
    CUDA_OK(cudaMemcpyAsync(hd, d->data, (size_t)len * img, cudaMemcpyDeviceToHost, cs));
    CUDA_OK(cs ? cudaStreamSynchronize(cs) : cudaDeviceSynchronize());
    CHECK(memcmp(hd, (uint8_t*)src->data + (size_t)first * img, (size_t)len * img) == 0,
          "to_device batch %lld differs from the source", (long long)row.index);
    for (int64_t i = 0; i < len; i++) {
      const uint8_t* im = (const uint8_t*)src->data + (size_t)(first + i) * img;
      gpu_ref_normalize(im, pc->h, pc->w, c, 0, pc->chw, scale, bias, ref);
      gpu_ref_normalize(im, pc->h, pc->w, c, 1, pc->chw, scale, bias, ref_flip);
      int plain = 1, flipped = 1;
      for (size_t k = 0; k < img && (plain || flipped); k++) {
        size_t at = (size_t)i * img + k;
        if (pc->half) {
          uint16_t g = ((uint16_t*)hx)[at];
          plain &= g == gpu_f2h(ref[k]);
          flipped &= g == gpu_f2h(ref_flip[k]);
        } else {
          float g = ((float*)hx)[at];
          plain &= g == ref[k];
          flipped &= g == ref_flip[k];
        }
      }
      CHECK(plain || flipped, "image %lld matches neither the reference nor its mirror", (long long)(first + i));
      if (!plain && flipped) res->flips++;
      /* the decision comes from the row's own generator (rill_exec_rng of the image) */
      rill_rng_t g = rill_rng_seeded(seed, 0, first + i, ncol);
      int want = pc->flip > 0 && rill_rng_uniform(&g) < pc->flip;
      if (plain != flipped && flipped != want) res->wrong_flips++;
    }
    for (size_t k = 0; k < (size_t)len * img * esize; k++) res->checksum = res->checksum * 1099511628211ULL + hx[k];
    res->images += len;
    res->batches++;
  }
  CHECK(rc == RILL_END, "iteration ended with %d: %s", rc, err.message);
  CHECK(res->images == pc->n, "%lld images of %d", (long long)res->images, pc->n);
  CHECK(res->wrong_flips == 0, "%lld images flipped against rill_rng_seeded(seed, epoch, row, column)",
        (long long)res->wrong_flips);
  rill_iter_stats_t st;
  rill_iter_stats(it, &st);
  if (res->batches > 8)
    CHECK(st.reuses > 0, "no buffer reuse over %lld batches (allocs %lld)", (long long)res->batches,
          (long long)st.allocs);
done:
  rill_iter_free(it);
  rill_stream_free(consumer);
  rill__cuda_free(pin, host);
  rill_df_free(bdf);
  rill_df_free(df);
  rill_array_release(src);
  free(ref);
  free(ref_flip);
}

static void check_pipelines(void) {
  /* many small batches through pinned buffers: reuse under load, checksums, determinism */
  pipe_case_t load = {.n = 2000, .h = 32, .w = 32, .batch = 32, .pinned = 1, .flip = 0.5, .chw = 1,
                      .inflight = 3, .threads = 4, .prefetch = 4};
  pipe_result_t r1, r2, r3;
  run_pipeline(&load, 7, &r1);
  CHECK(r1.flips > 2000 * 0.4 && r1.flips < 2000 * 0.6, "%lld flips of 2000 at p=0.5", (long long)r1.flips);
  load.threads = 1;
  load.prefetch = 8;
  run_pipeline(&load, 7, &r2);
  CHECK(r2.checksum == r1.checksum && r2.flips == r1.flips, "results depend on threads/prefetch");
  run_pipeline(&load, 8, &r3);
  CHECK(r3.checksum != r1.checksum, "another seed gave the same flips");
  /* big pageable batches (chunked pinned staging), float16 HWC, everything flipped */
  pipe_case_t big = {.n = 130, .h = 224, .w = 224, .batch = 64, .pinned = 0, .flip = 1.0, .half = 1,
                     .inflight = 2, .threads = 2, .prefetch = 2};
  run_pipeline(&big, 1, &r1);
  CHECK(r1.flips == 130, "%lld flips at p=1", (long long)r1.flips);
  /* a host consumer (no stream), odd sizes, no flips */
  pipe_case_t host = {.n = 50, .h = 17, .w = 5, .batch = 8, .pinned = 1, .flip = 0.0, .chw = 1, .threads = 2,
                      .host_consumer = 1};
  run_pipeline(&host, 3, &r1);
  CHECK(r1.flips == 0, "%lld flips at p=0", (long long)r1.flips);
}

/* ---------------------------------------------------------------- exports */

static void check_exports(void) {
  rill_error_t err = {0};
  rill_array_t* src = NULL;
  rill_df_t *df = NULL, *bdf = NULL;
  rill_iter_t* it = NULL;
  CHECK_OK(rill_array_new(rill_type_tensor(RILL_UINT8, 3, (int64_t[]){8, 8, 3}), 10, &src, &err), err, return);
  CHECK_OK(rill_df_from_arrays((const char* const[]){"img"}, (const rill_array_t* const[]){src}, 1, 0, &df,
                               &err), err, goto done);
  CHECK_OK(rill_df_batch(df, (int[]){0}, 1, 4, NULL, &bdf, &err), err, goto done);
  int d = rill_to_device(bdf, "dev", 0, NULL, &err);
  int x = rill_cuda_normalize(bdf, "x", d, &(rill_normalize_opts_t){.layout = RILL_LAYOUT_CHW}, 0, &err);
  CHECK(d >= 0 && x >= 0, "%s", err.message);
  if (d < 0 || x < 0) goto done;
  CHECK_OK(rill_iter_new(bdf, &(rill_iter_opts_t){.columns = &x, .ncolumns = 1}, &it, &err), err, goto done);
  rill_row_t row;
  CHECK_OK(rill_iter_next(it, &row, &err), err, goto done);
  const rill_array_t* a = rill_row_get(&row, 0);
  DLManagedTensorVersioned* t = NULL;
  CHECK_OK(rill_array_export_dlpack(a, &t, &err), err, goto done);
  CHECK(t->dl_tensor.device.device_type == kDLCUDA && t->dl_tensor.device.device_id == 0, "DLPack device");
  CHECK(t->dl_tensor.data == a->data && t->dl_tensor.ndim == 4 && t->dl_tensor.shape[0] == 4 &&
        t->dl_tensor.shape[1] == 3 && t->dl_tensor.shape[3] == 8, "DLPack tensor");
  CHECK(t->dl_tensor.dtype.code == kDLFloat && t->dl_tensor.dtype.bits == 32, "DLPack dtype");
  t->deleter(t);
  struct ArrowDeviceArray da;
  struct ArrowSchema sc;
  CHECK_OK(rill_array_export_arrow_device(a, &da, &sc, &err), err, goto done);
  CHECK(da.device_type == ARROW_DEVICE_CUDA && da.device_id == 0, "Arrow device %d/%lld", (int)da.device_type,
        (long long)da.device_id);
  CHECK(da.sync_event != NULL && *(void**)da.sync_event == a->event, "sync_event must point at the event");
  CHECK(da.array.length == 4, "Arrow length");
  /* a consumer stream waits on the exported event, then reads */
  cudaStream_t s;
  CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_OK(cudaStreamWaitEvent(s, *(cudaEvent_t*)da.sync_event, 0));
  CUDA_OK(cudaStreamSynchronize(s));
  CUDA_OK(cudaStreamDestroy(s));
  da.array.release(&da.array);
  sc.release(&sc);
done:
  rill_iter_free(it);
  rill_df_free(bdf);
  rill_df_free(df);
  rill_array_release(src);
}

/* ---------------------------------------------------------------- a caller's stream */

/* A consumer on its own CUDA stream (wrapped with rill_stream_wrap_cuda), slower than the
 * pipeline: each batch is summed by a kernel queued behind a 20 ms spin, and the loop takes
 * the next batch at once. rill must order each batch on that stream without a host wait (when
 * rill_iter_next returns, the step queued for the batch before is still running, for most
 * batches: the host runs ahead by the prefetch depth) and must not reuse a batch's device
 * memory before the queued kernel read it (every sum matches the host's). */
static void check_caller_stream(void) {
  enum { N = 96, H = 32, W = 32, B = 8, NB = N / B };
  const int64_t cell = (int64_t)H * W * 3;
  rill_error_t err = {0};
  cudaStream_t us = NULL;
  CUDA_OK(cudaStreamCreateWithFlags(&us, cudaStreamNonBlocking));
  rill_stream_t *ws = NULL, *legacy = NULL;
  rill_array_t* imgs = NULL;
  rill_df_t *df = NULL, *bdf = NULL;
  rill_iter_t* it = NULL;
  float* acc = NULL;
  CHECK_OK(rill_stream_wrap_cuda(0, us, &ws, &err), err, goto done);
  CHECK(rill_stream_cuda_handle(ws) == (void*)us, "the wrapper's handle is not the caller's stream");
  CHECK(rill_stream_device(ws).type == RILL_DEVICE_CUDA && rill_stream_device(ws).id == 0, "device");
  CHECK_OK(rill_stream_wrap_cuda(0, NULL, &legacy, &err), err, (void)0);
  CHECK(rill_stream_cuda_handle(legacy) != NULL, "the legacy default stream reads as a CPU stream");
  rill_stream_t* bad = NULL;
  CHECK(rill_stream_wrap_cuda(rill_cuda_device_count(), us, &bad, &err) != RILL_OK && bad == NULL,
        "a device that does not exist was accepted");
  CHECK_OK(rill_array_new(rill_type_tensor(RILL_UINT8, 3, (int64_t[]){H, W, 3}), N, &imgs, &err), err, goto done);
  for (int64_t i = 0; i < N * cell; i++) ((uint8_t*)imgs->data)[i] = (uint8_t)gpu_hash((uint64_t)i);
  CHECK_OK(rill_df_from_arrays((const char* const[]){"img"}, (const rill_array_t* const[]){imgs}, 1, 1, &df, &err),
           err, goto done);
  CHECK_OK(rill_df_batch(df, (int[]){0}, 1, B, &(rill_batch_opts_t){.pinned = 1}, &bdf, &err), err, goto done);
  int d = rill_to_device(bdf, "dev", 0, &(rill_to_device_opts_t){.inflight = 2}, &err);
  CHECK(d >= 0, "to_device: %s", err.message);
  rill_normalize_opts_t no = {.mean = {0.5, 0.5, 0.5}, .std = {0.25, 0.25, 0.25}, .layout = RILL_LAYOUT_CHW};
  int x = d >= 0 ? rill_cuda_normalize(bdf, "x", d, &no, 0, &err) : -1;
  CHECK(x >= 0, "cuda_normalize: %s", err.message);
  if (x < 0) goto done;
  CHECK_OK(rill_iter_new(bdf, &(rill_iter_opts_t){.columns = &x, .ncolumns = 1, .prefetch = 2, .threads = 2,
                                                   .stream = ws},
                         &it, &err),
           err, goto done);
  CUDA_OK(cudaMalloc((void**)&acc, NB * sizeof(float)));
  CUDA_OK(cudaMemsetAsync(acc, 0, NB * sizeof(float), us));
  rill_row_t row;
  int nb = 0, ahead = 0, rc;
  cudaEvent_t step_done = NULL;
  CUDA_OK(cudaEventCreateWithFlags(&step_done, cudaEventDisableTiming));
  while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK && nb < NB) {
    if (nb > 0) ahead += cudaEventQuery(step_done) == cudaErrorNotReady;
    const rill_array_t* a = rill_row_get(&row, 0);
    CHECK(rill_gpu_spin(us, (long long)(g_cyc_ms * 20)) == 0, "spin");
    CHECK(rill_gpu_consume(us, a->data, a->length * cell, acc + nb, 0) == 0, "consume");
    CUDA_OK(cudaEventRecord(step_done, us));
    nb++;
  }
  (void)cudaGetLastError(); /* the queries' cudaErrorNotReady */
  CHECK(rc == RILL_END, "iteration ended with %d: %s", rc, err.message);
  CHECK(nb == NB, "%d batches of %d", nb, NB);
  CUDA_OK(cudaStreamSynchronize(us));
  CHECK(ahead >= (NB - 1) / 2, "only %d of %d batches were handed over while the step before ran: "
        "rill_iter_next waited for the consumer's stream", ahead, NB - 1);
  cudaEventDestroy(step_done);
  float got[NB], scale[3], bias[3];
  gpu_norm_consts(&no, 3, scale, bias);
  CUDA_OK(cudaMemcpy(got, acc, sizeof(got), cudaMemcpyDeviceToHost));
  for (int b = 0; b < nb; b++) {
    double want = 0; /* the sum does not depend on the layout: HWC order here */
    for (int64_t i = (int64_t)b * B * cell; i < (int64_t)(b + 1) * B * cell; i++)
      want += ((uint8_t*)imgs->data)[i] * scale[i % 3] + bias[i % 3];
    CHECK(fabs(got[b] - want) <= 1e-4 * (fabs(want) + B * cell), "batch %d: sum %.3f, want %.3f (its memory was "
          "reused before the consumer's queued kernel read it)", b, got[b], want);
  }
done:
  rill_iter_free(it);
  rill_df_free(bdf);
  rill_df_free(df);
  rill_array_release(imgs);
  rill_stream_free(ws);
  rill_stream_free(legacy);
  if (us != NULL) {
    CHECK(cudaStreamQuery(us) == cudaSuccess, "rill_stream_free destroyed the caller's stream");
    cudaStreamDestroy(us);
  }
  cudaFree(acc);
}

int main(void) {
  if (gpu_skip("gpu_check")) return 0;
  g_cyc_ms = rill_gpu_cycles_per_ms();
  printf("gpu_check: %d CUDA device(s)\n", rill_cuda_device_count());
  struct { const char* name; void (*fn)(void); } tests[] = {
      {"streams and events", check_streams_events},
      {"normalize kernels vs CPU reference", check_kernels},
      {"event ordering between streams", check_event_ordering},
      {"buffer pool reuse after events", check_pool},
      {"pipelines under load", check_pipelines},
      {"device exports", check_exports},
      {"consumer on the caller's stream", check_caller_stream},
  };
  for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
    int before = g_fail;
    double t0 = gpu_now_s();
    tests[i].fn();
    printf("  %-40s %s (%.2f s)\n", tests[i].name, g_fail == before ? "ok" : "FAILED", gpu_now_s() - t0);
  }
  printf("gpu_check: %d passed, %d failed\n", g_pass, g_fail);
  return g_fail == 0 ? 0 : 1;
}
