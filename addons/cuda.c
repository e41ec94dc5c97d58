/* CUDA operators: rill_to_device (host batch -> device memory through pinned staging buffers,
 * several copies in flight) and rill_cuda_normalize (uint8 NHWC -> float32/float16 NCHW or
 * NHWC on the GPU, kernels in cuda_ops.cu), plus the public view of the CUDA buffer pool.
 * Both operators are RILL_STAGE_CUDA maps: the engine gives them a stream through
 * rill_exec_cuda_stream and records the output's event after they return. */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "addon.h"
#include "rill_addons.h"

#if RILL_HAVE_CUDA
#include <cuda_runtime_api.h>
/* cuda_ops.cu */
int rill__cuda_normalize_launch(const uint8_t* src, void* dst, int64_t n, int h, int w, int c,
                                int half, int chw, const float* scale, const float* bias,
                                const uint8_t* flip, void* stream);
#endif

/* lib/stream_cuda.c */

#define TO_DEVICE_DEFAULT_INFLIGHT 3
#define TO_DEVICE_MAX_INFLIGHT 64
/* Pageable input is staged in chunks so that the host copy of chunk k+1 overlaps the DMA of
 * chunk k. */
#define STAGE_CHUNK ((size_t)4 << 20)

void rill_cuda_pool_stats(rill_cuda_pool_stats_t* st) {
  if (st == NULL) return;
  memset(st, 0, sizeof(*st));
  rill__cuda_pool_stats(&st->allocs, &st->reuses, &st->cached_bytes);
}

int64_t rill_cuda_pool_trim(void) { return rill__cuda_pool_trim(); }

static const char* column_name(const rill_field_t* f) { return f->name != NULL ? f->name : "?"; }

/* ================================================================ to_device */

typedef struct staging {
  void* pinned;               /* pinned host buffer (CUDA_HOST), capacity `cap` */
  size_t cap;
  void* event[2];             /* per half of `pinned`: recorded after the copy that read it */
  int pending[2];             /* a copy reading that half (or the held input) was enqueued */
  const rill_array_t* held;   /* pinned/device input read in place until event[0] completes */
} staging_t;

typedef struct to_device {
  int device;
  int inflight;
  int next;
  pthread_mutex_t mu;
  staging_t* slots;
} to_device_t;

/* Waits until half `h` of slot `s` may be overwritten: its last copy completed. */
static int half_wait(staging_t* s, int h, rill_error_t* err) {
  if (!s->pending[h]) return RILL_OK;
  int rc = rill__event_wait(s->event[h], NULL, err);
  if (rc != RILL_OK) return rc;
  s->pending[h] = 0;
  if (h == 0) {
    rill_array_release(s->held);
    s->held = NULL;
  }
  return RILL_OK;
}

static void to_device_free(void* p) {
  to_device_t* t = p;
  if (t == NULL) return;
  for (int i = 0; i < t->inflight; i++) {
    staging_t* s = &t->slots[i];
    for (int h = 0; h < 2; h++) {
      if (half_wait(s, h, NULL) != RILL_OK && h == 0) {
        rill_array_release(s->held);
        s->held = NULL;
      }
      rill__cuda_event_free(s->event[h]);
    }
    rill__cuda_free((rill_device_t){RILL_DEVICE_CUDA_HOST, 0}, s->pinned);
  }
  pthread_mutex_destroy(&t->mu);
  rill__free(t->slots);
  rill__free(t);
}

static int to_device_copy(to_device_t* t, const rill_array_t* a, rill_array_t* out, void* stream,
                          rill_error_t* err) {
  size_t bytes = (size_t)a->length * (size_t)rill_type_cell_bytes(&a->type);
  rill_device_t dev = {RILL_DEVICE_CUDA, t->device};
  rill_device_t pinned = {RILL_DEVICE_CUDA_HOST, 0};
  staging_t* s = &t->slots[t->next];
  t->next = (t->next + 1) % t->inflight;
  int rc;
  for (int h = 0; h < 2; h++) {
    if ((rc = half_wait(s, h, err)) != RILL_OK) return rc;
    if (s->event[h] == NULL && (rc = rill__cuda_event_new(t->device, &s->event[h], err)) != RILL_OK)
      return rc;
  }
  if (bytes == 0) return RILL_OK;
  /* Inputs produced on a stream carry an event: the copy starts after it. */
  if ((rc = rill__event_wait(a->event, stream, err)) != RILL_OK) return rc;
  if (a->device.type == RILL_DEVICE_CUDA || a->device.type == RILL_DEVICE_CUDA_HOST) {
    /* Pinned or device input: one DMA straight from it; keep it alive until it completed. */
    if ((rc = rill__cuda_memcpy(out->data, dev, a->data, a->device, bytes, stream, err)) != RILL_OK)
      return rc;
    if ((rc = rill__cuda_event_record(s->event[0], stream, err)) != RILL_OK) return rc;
    s->held = rill_array_retain(a);
    s->pending[0] = 1;
    return RILL_OK;
  }
  /* Pageable input goes through the slot's pinned buffer in two halves: the host copy into
   * one half overlaps the DMA out of the other. */
  size_t need = bytes < 2 * STAGE_CHUNK ? bytes : 2 * STAGE_CHUNK;
  if (s->cap < need) {
    rill__cuda_free(pinned, s->pinned);
    s->cap = 0;
    s->pinned = rill__cuda_alloc(pinned, need);
    if (s->pinned == NULL)
      return rill__fail(err, RILL_ENOMEM, "to_device: cannot allocate %zu bytes of pinned memory", need);
    s->cap = need;
  }
  size_t chunk = bytes <= s->cap ? bytes : s->cap / 2;
  const uint8_t* src = a->data;
  int h = 0;
  for (size_t off = 0; off < bytes; off += chunk, h ^= 1) {
    size_t n = bytes - off < chunk ? bytes - off : chunk;
    uint8_t* buf = (uint8_t*)s->pinned + (size_t)h * chunk;
    if ((rc = half_wait(s, h, err)) != RILL_OK) return rc;
    memcpy(buf, src + off, n);
    rc = rill__cuda_memcpy((uint8_t*)out->data + off, dev, buf, pinned, n, stream, err);
    if (rc != RILL_OK) return rc;
    if ((rc = rill__cuda_event_record(s->event[h], stream, err)) != RILL_OK) return rc;
    s->pending[h] = 1;
  }
  return RILL_OK;
}

static int to_device_fn(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* exec,
                        void* ctx, rill_error_t* err) {
  to_device_t* t = ctx;
  const rill_array_t* a = in[0];
  if (!rill_type_is_fixed(&a->type))
    return rill_error_set(err, RILL_EINVAL, "to_device: cells of variable shape cannot be copied");
  if (a->null_count > 0)
    return rill_error_set(err, RILL_EINVAL,
                          "to_device: the input holds %lld null cells; device arrays carry no "
                          "validity (drop them with RILL_ON_ERROR_SKIP upstream)",
                          (long long)a->null_count);
  void* stream = rill_exec_cuda_stream(exec);
  if (stream == NULL)
    return rill_error_set(err, RILL_EINVAL, "to_device: the stage has no CUDA stream");
  int rc = rill_exec_alloc(exec, out, a->type, a->length);
  if (rc != RILL_OK)
    return rill_error_set(err, rc, "to_device: cannot allocate %lld cells on CUDA device %d",
                          (long long)a->length, t->device);
  if (out->device.type != RILL_DEVICE_CUDA)
    return rill_error_set(err, RILL_EINVAL, "to_device: the output was not placed on a CUDA device");
  pthread_mutex_lock(&t->mu);
  rc = to_device_copy(t, a, out, stream, err);
  pthread_mutex_unlock(&t->mu);
  return rc;
}

int rill_to_device(rill_df_t* df, const char* name, int column, const rill_to_device_opts_t* opts,
                   rill_error_t* err) {
  rill_to_device_opts_t o = opts != NULL ? *opts : (rill_to_device_opts_t){0};
  if (df == NULL || name == NULL)
    return rill__fail(err, RILL_EINVAL, "rill_to_device: %s is NULL", df == NULL ? "df" : "name");
  const rill_field_t* f = rill_df_field(df, column);
  if (f == NULL) return rill__bad_column(err, "rill_to_device", df, column);
  if (!rill_type_is_fixed(&f->type) || rill_dtype_size(f->type.dtype) == 0) {
    char buf[96];
    return rill__fail(err, RILL_EINVAL,
                      "rill_to_device: column '%s' has type %s; only fixed-shape numeric cells "
                      "can be copied to a device", column_name(f), rill_type_format(&f->type, buf, sizeof(buf)));
  }
  if (o.inflight < 0 || o.inflight > TO_DEVICE_MAX_INFLIGHT)
    return rill__fail(err, RILL_EINVAL, "rill_to_device: inflight must be in [0, %d], got %d",
                      TO_DEVICE_MAX_INFLIGHT, o.inflight);
  int rc = rill__cuda_check_device(o.device, err);
  if (rc != RILL_OK) return rc;
  to_device_t* t = rill__calloc(1, sizeof(*t));
  if (t == NULL) return rill__fail(err, RILL_ENOMEM, "rill_to_device: out of memory");
  t->device = o.device;
  t->inflight = o.inflight > 0 ? o.inflight : TO_DEVICE_DEFAULT_INFLIGHT;
  t->slots = rill__calloc((size_t)t->inflight, sizeof(*t->slots));
  if (t->slots == NULL) {
    rill__free(t);
    return rill__fail(err, RILL_ENOMEM, "rill_to_device: out of memory");
  }
  pthread_mutex_init(&t->mu, NULL);
  rill_stage_opts_t so = {.where = RILL_STAGE_CUDA, .device = o.device};
  return rill_df_map(df, name, f->type, &column, 1, to_device_fn, t, to_device_free, &so, err);
}

/* ================================================================ normalize */

typedef struct cuda_norm {
  int device;
  double flip;
  float scale[4], bias[4];
  int h, w, c;
  int half, chw;
  pthread_mutex_t mu;
  uint8_t* mask;              /* per-image flip decisions, reused across calls */
  int64_t mask_cap;
} cuda_norm_t;

static void cuda_norm_free(void* p) {
  cuda_norm_t* t = p;
  if (t == NULL) return;
  pthread_mutex_destroy(&t->mu);
  rill__free(t->mask);
  rill__free(t);
}

static int cuda_norm_fn(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* exec,
                        void* ctx, rill_error_t* err) {
  cuda_norm_t* t = ctx;
  const rill_array_t* a = in[0];
  if (a->device.type != RILL_DEVICE_CUDA)
    return rill_error_set(err, RILL_EINVAL,
                          "cuda_normalize: the input is in host memory; copy it with rill_to_device first");
  if (a->null_count > 0)
    return rill_error_set(err, RILL_EINVAL, "cuda_normalize: the input holds %lld null cells",
                          (long long)a->null_count);
  void* stream = rill_exec_cuda_stream(exec);
  if (stream == NULL)
    return rill_error_set(err, RILL_EINVAL, "cuda_normalize: the stage has no CUDA stream");
  int64_t shape[3] = {t->chw ? t->c : t->h, t->chw ? t->h : t->w, t->chw ? t->w : t->c};
  rill_type_t ot = rill_type_tensor(t->half ? RILL_FLOAT16 : RILL_FLOAT32, 3, shape);
  int rc = rill_exec_alloc(exec, out, ot, a->length);
  if (rc != RILL_OK)
    return rill_error_set(err, rc, "cuda_normalize: cannot allocate %lld cells on CUDA device %d",
                          (long long)a->length, t->device);
  if (out->device.type != RILL_DEVICE_CUDA)
    return rill_error_set(err, RILL_EINVAL, "cuda_normalize: the output was not placed on a CUDA device");
  if (a->length == 0) return RILL_OK;
  if ((rc = rill__event_wait(a->event, stream, err)) != RILL_OK) return rc;
#if RILL_HAVE_CUDA
  pthread_mutex_lock(&t->mu);
  if (t->mask_cap < a->length) {
    uint8_t* m = rill__alloc((size_t)a->length);
    if (m == NULL) {
      pthread_mutex_unlock(&t->mu);
      return rill_error_set(err, RILL_ENOMEM, "cuda_normalize: out of memory");
    }
    rill__free(t->mask);
    t->mask = m;
    t->mask_cap = a->length;
  }
  /* Flips are decided on the host, one draw from each image's own generator (seeded by its
   * row id): independent of batching, threads and prefetch. */
  for (int64_t i = 0; i < a->length; i++) {
    rill_rng_t rng = rill_exec_rng(exec, i);
    t->mask[i] = t->flip > 0 && rill_rng_uniform(&rng) < t->flip;
  }
  cudaError_t e = cudaSetDevice(t->device);
  if (e == cudaSuccess)
    e = (cudaError_t)rill__cuda_normalize_launch(a->data, out->data, a->length, t->h, t->w, t->c,
                                                 t->half, t->chw, t->scale, t->bias, t->mask, stream);
  pthread_mutex_unlock(&t->mu);
  if (e != cudaSuccess)
    return rill_error_set(err, RILL_ECUDA, "cuda_normalize: kernel launch failed: %s (%s)",
                          cudaGetErrorName(e), cudaGetErrorString(e));
  return RILL_OK;
#else
  return rill_error_set(err, RILL_ENODEV, "rill was built without CUDA");
#endif
}

int rill_cuda_normalize(rill_df_t* df, const char* name, int column,
                        const rill_normalize_opts_t* opts, int device, rill_error_t* err) {
  rill_normalize_opts_t o = opts != NULL ? *opts : (rill_normalize_opts_t){0};
  if (df == NULL || name == NULL)
    return rill__fail(err, RILL_EINVAL, "rill_cuda_normalize: %s is NULL", df == NULL ? "df" : "name");
  const rill_field_t* f = rill_df_field(df, column);
  if (f == NULL) return rill__bad_column(err, "rill_cuda_normalize", df, column);
  const rill_type_t* ty = &f->type;
  if (ty->dtype != RILL_UINT8 || ty->ndim != 3 || !rill_type_is_fixed(ty) || ty->shape[2] < 1 ||
      ty->shape[2] > 4) {
    char buf[96];
    return rill__fail(err, RILL_EINVAL,
                      "rill_cuda_normalize: column '%s' has type %s; expected uint8[H,W,C] with a "
                      "fixed size and 1 to 4 channels", column_name(f), rill_type_format(ty, buf, sizeof(buf)));
  }
  if (ty->shape[0] * ty->shape[1] > INT32_MAX)
    return rill__fail(err, RILL_ERANGE, "rill_cuda_normalize: images of %lldx%lld pixels are too large",
                      (long long)ty->shape[0], (long long)ty->shape[1]);
  rill_dtype_t dt = o.dtype == 0 ? RILL_FLOAT32 : o.dtype;
  if (dt != RILL_FLOAT32 && dt != RILL_FLOAT16)
    return rill__fail(err, RILL_EINVAL, "rill_cuda_normalize: dtype must be float32 or float16, got %s",
                      rill_dtype_name(dt));
  if (o.layout != RILL_LAYOUT_HWC && o.layout != RILL_LAYOUT_CHW)
    return rill__fail(err, RILL_EINVAL, "rill_cuda_normalize: unknown layout %d", (int)o.layout);
  if (!(o.flip >= 0.0 && o.flip <= 1.0))
    return rill__fail(err, RILL_EINVAL, "rill_cuda_normalize: flip must be a probability in [0, 1], got %g",
                      o.flip);
  int c = (int)ty->shape[2];
  float scale[4], bias[4];
  for (int i = 0; i < c; i++) {
    double sd = o.std[i] == 0.0 ? 1.0 : o.std[i];
    if (!(sd > 0.0) || !isfinite(sd) || !isfinite(o.mean[i]))
      return rill__fail(err, RILL_EINVAL, "rill_cuda_normalize: channel %d has mean %g and std %g; "
                        "std must be positive and both finite", i, o.mean[i], o.std[i]);
    scale[i] = (float)(1.0 / (255.0 * sd));
    bias[i] = (float)(-o.mean[i] / sd);
  }
  int rc = rill__cuda_check_device(device, err);
  if (rc != RILL_OK) return rc;
  cuda_norm_t* t = rill__calloc(1, sizeof(*t));
  if (t == NULL) return rill__fail(err, RILL_ENOMEM, "rill_cuda_normalize: out of memory");
  t->device = device;
  t->flip = o.flip;
  memcpy(t->scale, scale, sizeof(scale));
  memcpy(t->bias, bias, sizeof(bias));
  t->h = (int)ty->shape[0];
  t->w = (int)ty->shape[1];
  t->c = c;
  t->half = dt == RILL_FLOAT16;
  t->chw = o.layout == RILL_LAYOUT_CHW;
  pthread_mutex_init(&t->mu, NULL);
  int64_t shape[3] = {t->chw ? c : t->h, t->chw ? t->h : t->w, t->chw ? t->w : c};
  rill_stage_opts_t so = {.where = RILL_STAGE_CUDA, .device = device};
  return rill_df_map(df, name, rill_type_tensor(dt, 3, shape), &column, 1, cuda_norm_fn, t,
                     cuda_norm_free, &so, err);
}
