/* Streams (CPU and CUDA), CUDA events, copies, and the caching allocator for pinned host and
 * device memory.
 *
 * Built without CUDA (RILL_HAVE_CUDA=0), or run on a machine without a device, every call
 * that needs CUDA fails with RILL_ENODEV and a message; CPU streams and host-to-host copies
 * keep working.
 *
 * The allocator keeps freed pinned and device blocks in a cache keyed by (device, size
 * class). A block freed while rill's CUDA streams may still use it is reused only once every
 * CUDA stream created by rill_stream_new_cuda has passed the point where the block was
 * freed: on free, an event is recorded on each live rill stream, and the block is handed out
 * again only when all of them completed. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#if RILL_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

struct rill_stream {
  rill_device_t device;
  void* handle; /* cudaStream_t for CUDA streams, NULL for CPU */
};

/* ---------------------------------------------------------------- CPU streams */

rill_stream_t* rill_stream_new_cpu(void) {
  rill_stream_t* s = rill__calloc(1, sizeof(*s));
  if (s == NULL) return NULL;
  s->device = (rill_device_t){RILL_DEVICE_CPU, 0};
  return s;
}

void* rill_stream_cuda_handle(const rill_stream_t* s) { return s != NULL ? s->handle : NULL; }

rill_device_t rill_stream_device(const rill_stream_t* s) {
  if (s == NULL) return (rill_device_t){RILL_DEVICE_CPU, 0};
  return s->device;
}

#if !RILL_HAVE_CUDA

/* ---------------------------------------------------------------- built without CUDA */

#define NO_CUDA "rill was built without CUDA"

int rill__cuda_device_count(void) { return 0; }

int rill__cuda_check_device(int device, rill_error_t* err) {
  if (device < 0) return rill__fail(err, RILL_EINVAL, "invalid CUDA device %d", device);
  return rill__fail(err, RILL_ENODEV, NO_CUDA);
}

int rill_stream_new_cuda(int device, rill_stream_t** out, rill_error_t* err) {
  if (out == NULL) return rill__fail(err, RILL_EINVAL, "rill_stream_new_cuda: out is NULL");
  *out = NULL;
  return rill__cuda_check_device(device, err);
}

int rill_stream_synchronize(rill_stream_t* s, rill_error_t* err) {
  if (s == NULL) return rill__fail(err, RILL_EINVAL, "rill_stream_synchronize: stream is NULL");
  return RILL_OK; /* CPU streams do no asynchronous work */
}

void rill_stream_free(rill_stream_t* s) { rill__free(s); }

void* rill__cuda_alloc(rill_device_t dev, size_t size) { return NULL; }
void rill__cuda_free(rill_device_t dev, void* p) {}

int rill__cuda_event_new(int device, void** event, rill_error_t* err) {
  if (event == NULL) return rill__fail(err, RILL_EINVAL, "cuda event: out is NULL");
  *event = NULL;
  return rill__cuda_check_device(device, err);
}

int rill__cuda_event_record(void* event, void* stream, rill_error_t* err) {
  if (event == NULL) return rill__fail(err, RILL_EINVAL, "cuda event: event is NULL");
  return rill__fail(err, RILL_ENODEV, NO_CUDA);
}

static int stream_wait_event(void* stream, void* event, rill_error_t* err) {
  if (event == NULL) return RILL_OK;
  return rill__fail(err, RILL_ENODEV, NO_CUDA);
}

static int event_sync(void* event, rill_error_t* err) {
  if (event == NULL) return RILL_OK;
  return rill__fail(err, RILL_ENODEV, NO_CUDA);
}

int rill__cuda_event_query(void* event) { return event == NULL ? 1 : RILL_ENODEV; }
void rill__cuda_event_free(void* event) {}


int rill__cuda_memcpy(void* dst, rill_device_t dst_dev, const void* src, rill_device_t src_dev,
                      size_t size, void* stream, rill_error_t* err) {
  if (size == 0) return RILL_OK;
  if (dst == NULL || src == NULL) return rill__fail(err, RILL_EINVAL, "copy: NULL buffer");
  if (!rill__device_is_host(dst_dev) || !rill__device_is_host(src_dev) || stream != NULL)
    return rill__fail(err, RILL_ENODEV, NO_CUDA);
  memmove(dst, src, size);
  return RILL_OK;
}

#else /* RILL_HAVE_CUDA */

/* ---------------------------------------------------------------- errors and devices */

static int is_nodev(cudaError_t e) {
  return e == cudaErrorNoDevice || e == cudaErrorInsufficientDriver ||
         e == cudaErrorInvalidDevice || e == cudaErrorDevicesUnavailable ||
         e == cudaErrorSystemDriverMismatch || e == cudaErrorCompatNotSupportedOnDevice;
}

/* Turns a CUDA error into RILL_ENODEV (no usable device) or RILL_ECUDA with its name. */
static int cuda_fail(rill_error_t* err, cudaError_t e, const char* what) {
  (void)cudaGetLastError(); /* clear a non-sticky error so the next call starts clean */
  if (is_nodev(e))
    return rill__fail(err, RILL_ENODEV, "no CUDA device: %s (%s)", cudaGetErrorString(e), what);
  return rill__fail(err, RILL_ECUDA, "%s failed: %s (%s)", what, cudaGetErrorName(e),
                    cudaGetErrorString(e));
}

static pthread_once_t g_count_once = PTHREAD_ONCE_INIT;
static int g_count;
static cudaError_t g_count_error;

static void count_devices(void) {
  int n = 0;
  g_count_error = cudaGetDeviceCount(&n);
  g_count = g_count_error == cudaSuccess ? n : 0;
  if (g_count_error == cudaSuccess && n == 0) g_count_error = cudaErrorNoDevice;
  (void)cudaGetLastError();
}

int rill__cuda_device_count(void) {
  pthread_once(&g_count_once, count_devices);
  return g_count;
}

int rill__cuda_check_device(int device, rill_error_t* err) {
  if (device < 0) return rill__fail(err, RILL_EINVAL, "invalid CUDA device %d", device);
  pthread_once(&g_count_once, count_devices);
  if (g_count == 0) {
    const char* hint = g_count_error == cudaErrorInsufficientDriver
                         ? " (no NVIDIA driver, or one older than rill's CUDA runtime)" : "";
    return rill__fail(err, RILL_ENODEV, "no CUDA device: %s%s", cudaGetErrorString(g_count_error), hint);
  }
  if (device >= g_count)
    return rill__fail(err, RILL_ENODEV, "no CUDA device %d: the machine has %d", device, g_count);
  return RILL_OK;
}

static int set_device(int device, rill_error_t* err) {
  int rc = rill__cuda_check_device(device, err);
  if (rc != RILL_OK) return rc;
  cudaError_t e = cudaSetDevice(device);
  return e == cudaSuccess ? RILL_OK : cuda_fail(err, e, "cudaSetDevice");
}

/* ---------------------------------------------------------------- stream registry */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* registry, events, block cache */
static rill_stream_t** g_streams;
static int g_nstreams, g_streams_cap;

static int registry_add(rill_stream_t* s) {
  pthread_mutex_lock(&g_mu);
  int rc = RILL_OK;
  if (g_nstreams == g_streams_cap) {
    int cap = g_streams_cap ? 2 * g_streams_cap : 8;
    void* p = rill__realloc(g_streams, sizeof(*g_streams) * (size_t)g_streams_cap,
                            sizeof(*g_streams) * (size_t)cap);
    if (p == NULL) rc = RILL_ENOMEM;
    else { g_streams = p; g_streams_cap = cap; }
  }
  if (rc == RILL_OK) g_streams[g_nstreams++] = s;
  pthread_mutex_unlock(&g_mu);
  return rc;
}

static void registry_remove(rill_stream_t* s) {
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < g_nstreams; i++)
    if (g_streams[i] == s) { g_streams[i] = g_streams[--g_nstreams]; break; }
  pthread_mutex_unlock(&g_mu);
}

/* ---------------------------------------------------------------- streams */

int rill_stream_new_cuda(int device, rill_stream_t** out, rill_error_t* err) {
  if (out == NULL) return rill__fail(err, RILL_EINVAL, "rill_stream_new_cuda: out is NULL");
  *out = NULL;
  int rc = set_device(device, err);
  if (rc != RILL_OK) return rc;
  rill_stream_t* s = rill__calloc(1, sizeof(*s));
  if (s == NULL) return rill__fail(err, RILL_ENOMEM, "out of memory creating a CUDA stream");
  cudaStream_t cs;
  cudaError_t e = cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    rill__free(s);
    return cuda_fail(err, e, "cudaStreamCreateWithFlags");
  }
  s->device = (rill_device_t){RILL_DEVICE_CUDA, device};
  s->handle = cs;
  if (registry_add(s) != RILL_OK) {
    cudaStreamDestroy(cs);
    rill__free(s);
    return rill__fail(err, RILL_ENOMEM, "out of memory creating a CUDA stream");
  }
  *out = s;
  return RILL_OK;
}

int rill_stream_synchronize(rill_stream_t* s, rill_error_t* err) {
  if (s == NULL) return rill__fail(err, RILL_EINVAL, "rill_stream_synchronize: stream is NULL");
  if (s->handle == NULL) return RILL_OK;
  cudaError_t e = cudaStreamSynchronize((cudaStream_t)s->handle);
  return e == cudaSuccess ? RILL_OK : cuda_fail(err, e, "cudaStreamSynchronize");
}

void rill_stream_free(rill_stream_t* s) {
  if (s == NULL) return;
  if (s->handle != NULL) {
    registry_remove(s);
    /* Pending work completes before the stream's resources go (CUDA's documented behaviour
     * for cudaStreamDestroy); blocks that recorded events on it keep valid events. */
    cudaStreamDestroy((cudaStream_t)s->handle);
  }
  rill__free(s);
}

/* ---------------------------------------------------------------- events */

int rill__cuda_event_new(int device, void** event, rill_error_t* err) {
  if (event == NULL) return rill__fail(err, RILL_EINVAL, "cuda event: out is NULL");
  *event = NULL;
  int rc = set_device(device, err);
  if (rc != RILL_OK) return rc;
  cudaEvent_t ev;
  cudaError_t e = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (e != cudaSuccess) return cuda_fail(err, e, "cudaEventCreateWithFlags");
  *event = ev;
  return RILL_OK;
}

int rill__cuda_event_record(void* event, void* stream, rill_error_t* err) {
  if (event == NULL) return rill__fail(err, RILL_EINVAL, "cuda event: event is NULL");
  cudaError_t e = cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream);
  return e == cudaSuccess ? RILL_OK : cuda_fail(err, e, "cudaEventRecord");
}

static int stream_wait_event(void* stream, void* event, rill_error_t* err) {
  if (event == NULL) return RILL_OK;
  cudaError_t e = cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0);
  return e == cudaSuccess ? RILL_OK : cuda_fail(err, e, "cudaStreamWaitEvent");
}

static int event_sync(void* event, rill_error_t* err) {
  if (event == NULL) return RILL_OK;
  cudaError_t e = cudaEventSynchronize((cudaEvent_t)event);
  return e == cudaSuccess ? RILL_OK : cuda_fail(err, e, "cudaEventSynchronize");
}

int rill__cuda_event_query(void* event) {
  if (event == NULL) return 1;
  cudaError_t e = cudaEventQuery((cudaEvent_t)event);
  if (e == cudaSuccess) return 1;
  if (e == cudaErrorNotReady) return 0;
  (void)cudaGetLastError();
  return is_nodev(e) ? RILL_ENODEV : RILL_ECUDA;
}

void rill__cuda_event_free(void* event) {
  if (event != NULL) cudaEventDestroy((cudaEvent_t)event);
}

/* ---------------------------------------------------------------- copies */


int rill__cuda_memcpy(void* dst, rill_device_t dst_dev, const void* src, rill_device_t src_dev,
                      size_t size, void* stream, rill_error_t* err) {
  if (size == 0) return RILL_OK;
  if (dst == NULL || src == NULL) return rill__fail(err, RILL_EINVAL, "copy: NULL buffer");
  if (rill__device_is_host(dst_dev) && rill__device_is_host(src_dev) && stream == NULL) {
    memmove(dst, src, size);
    return RILL_OK;
  }
  int dev = dst_dev.type == RILL_DEVICE_CUDA ? dst_dev.id
          : src_dev.type == RILL_DEVICE_CUDA ? src_dev.id : 0;
  int rc = set_device(dev, err);
  if (rc != RILL_OK) return rc;
  cudaError_t e = stream != NULL
                    ? cudaMemcpyAsync(dst, src, size, cudaMemcpyDefault, (cudaStream_t)stream)
                    : cudaMemcpy(dst, src, size, cudaMemcpyDefault);
  return e == cudaSuccess ? RILL_OK : cuda_fail(err, e, stream ? "cudaMemcpyAsync" : "cudaMemcpy");
}

/* ---------------------------------------------------------------- caching allocator */

typedef struct block {
  void* p;
  size_t size;            /* the size class actually allocated */
  rill_device_t dev;
  int nev;                /* events that must complete before reuse */
  int ev_cap;
  cudaEvent_t* ev;
  int* ev_dev;            /* device of each event (to return it to its free list) */
  struct block* next;
} block_t;

#define NBUCKETS 256
#define CACHE_MAX_BYTES ((size_t)4 << 30) /* cached blocks beyond this are given back */
static block_t* g_live[NBUCKETS];   /* blocks handed out, by pointer */
static block_t* g_cached;           /* blocks freed, waiting for reuse */
static cudaEvent_t* g_ev_free;      /* spare events (any device; device kept alongside) */
static int* g_ev_free_dev;
static int g_nev_free, g_ev_free_cap;
static int64_t g_stat_allocs, g_stat_reuses;
static size_t g_cached_bytes;

static size_t live_bucket(const void* p) { return ((uintptr_t)p >> 9) % NBUCKETS; }

/* Rounds a request up to its size class: 512 B steps below 1 MiB, 2 MiB steps above. */
static size_t size_class(size_t size) {
  if (size == 0) size = 1;
  if (size <= ((size_t)1 << 20)) return (size + 511) & ~(size_t)511;
  size_t step = (size_t)2 << 20;
  return (size + step - 1) / step * step;
}

static int same_dev(rill_device_t a, rill_device_t b) {
  if (a.type != b.type) return 0;
  return a.type == RILL_DEVICE_CUDA_HOST || a.id == b.id;
}

/* Called with g_mu held. 1 when every event of the block completed (events go back). */
static int block_ready(block_t* b) {
  while (b->nev > 0) {
    int i = b->nev - 1;
    cudaError_t e = cudaEventQuery(b->ev[i]);
    if (e == cudaErrorNotReady) return 0;
    if (e != cudaSuccess) (void)cudaGetLastError();
    if (g_nev_free == g_ev_free_cap) {
      int cap = g_ev_free_cap ? 2 * g_ev_free_cap : 32;
      cudaEvent_t* ne = rill__realloc(g_ev_free, sizeof(*ne) * (size_t)g_ev_free_cap,
                                      sizeof(*ne) * (size_t)cap);
      if (ne != NULL) g_ev_free = ne;
      int* nd = ne ? rill__realloc(g_ev_free_dev, sizeof(*nd) * (size_t)g_ev_free_cap,
                                   sizeof(*nd) * (size_t)cap) : NULL;
      if (nd != NULL) { g_ev_free_dev = nd; g_ev_free_cap = cap; }
    }
    if (g_nev_free < g_ev_free_cap) {
      g_ev_free[g_nev_free] = b->ev[i];
      g_ev_free_dev[g_nev_free++] = b->ev_dev[i];
    } else {
      cudaEventDestroy(b->ev[i]);
    }
    b->nev--;
  }
  return 1;
}

static void block_destroy(block_t* b) {
  int cur = 0;
  cudaGetDevice(&cur);
  if (b->dev.type == RILL_DEVICE_CUDA) {
    cudaSetDevice(b->dev.id);
    cudaFree(b->p);
  } else {
    cudaFreeHost(b->p);
  }
  for (int i = 0; i < b->nev; i++) cudaEventDestroy(b->ev[i]);
  cudaSetDevice(cur);
  rill__free(b->ev);
  rill__free(b->ev_dev);
  rill__free(b);
}

/* Frees the cached blocks whose events completed.
 * Called with g_mu held. Returns the bytes released. */
static size_t trim_locked(void) {
  size_t freed = 0;
  block_t** pp = &g_cached;
  while (*pp != NULL) {
    block_t* b = *pp;
    if (block_ready(b)) {
      *pp = b->next;
      freed += b->size;
      g_cached_bytes -= b->size;
      block_destroy(b);
    } else {
      pp = &b->next;
    }
  }
  return freed;
}

void* rill__cuda_alloc(rill_device_t dev, size_t size) {
  if (dev.type != RILL_DEVICE_CUDA && dev.type != RILL_DEVICE_CUDA_HOST) return NULL;
  int id = dev.type == RILL_DEVICE_CUDA ? dev.id : 0;
  if (rill__cuda_check_device(id, NULL) != RILL_OK) return NULL;
  size_t cls = size_class(size);
  pthread_mutex_lock(&g_mu);
  block_t* b = NULL;
  for (block_t** pp = &g_cached; *pp != NULL; pp = &(*pp)->next) {
    if ((*pp)->size == cls && same_dev((*pp)->dev, dev) && block_ready(*pp)) {
      b = *pp;
      *pp = b->next;
      g_cached_bytes -= b->size;
      g_stat_reuses++;
      break;
    }
  }
  if (b == NULL) {
    b = rill__calloc(1, sizeof(*b));
    if (b == NULL) { pthread_mutex_unlock(&g_mu); return NULL; }
    b->dev = dev;
    b->size = cls;
    int cur = 0;
    cudaGetDevice(&cur);
    cudaError_t e = cudaErrorMemoryAllocation;
    for (int attempt = 0; attempt < 2; attempt++) {
      if (dev.type == RILL_DEVICE_CUDA) {
        cudaSetDevice(dev.id);
        e = cudaMalloc(&b->p, cls);
      } else {
        e = cudaHostAlloc(&b->p, cls, cudaHostAllocPortable);
      }
      if (e == cudaSuccess) break;
      (void)cudaGetLastError();
      if (e != cudaErrorMemoryAllocation || g_cached == NULL) break;
      trim_locked(); /* give cached blocks back to the driver and try once more */
    }
    cudaSetDevice(cur);
    if (e != cudaSuccess) {
      rill__free(b);
      pthread_mutex_unlock(&g_mu);
      return NULL;
    }
    g_stat_allocs++;
  }
  size_t k = live_bucket(b->p);
  b->next = g_live[k];
  g_live[k] = b;
  pthread_mutex_unlock(&g_mu);
  return b->p;
}

/* Records an event on every live rill CUDA stream (device blocks: streams of that device;
 * pinned blocks: all streams). Called with g_mu held. Without memory for events it waits
 * for those streams instead, so reuse stays safe. */
static void block_fence(block_t* b) {
  int cur = 0;
  cudaGetDevice(&cur);
  for (int i = 0; i < g_nstreams; i++) {
    rill_stream_t* s = g_streams[i];
    if (b->dev.type == RILL_DEVICE_CUDA && s->device.id != b->dev.id) continue;
    if (b->nev == b->ev_cap) {
      int cap = b->ev_cap ? 2 * b->ev_cap : 4;
      cudaEvent_t* ne = rill__realloc(b->ev, sizeof(*ne) * (size_t)b->ev_cap, sizeof(*ne) * (size_t)cap);
      if (ne != NULL) b->ev = ne;
      int* nd = ne ? rill__realloc(b->ev_dev, sizeof(*nd) * (size_t)b->ev_cap, sizeof(*nd) * (size_t)cap) : NULL;
      if (nd != NULL) { b->ev_dev = nd; b->ev_cap = cap; }
    }
    cudaEvent_t ev = NULL;
    if (b->nev < b->ev_cap) {
      for (int j = g_nev_free - 1; j >= 0; j--) {
        if (g_ev_free_dev[j] == s->device.id) {
          ev = g_ev_free[j];
          g_ev_free[j] = g_ev_free[g_nev_free - 1];
          g_ev_free_dev[j] = g_ev_free_dev[g_nev_free - 1];
          g_nev_free--;
          break;
        }
      }
      if (ev == NULL) {
        cudaSetDevice(s->device.id);
        if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
          (void)cudaGetLastError();
          ev = NULL;
        }
      }
    }
    if (ev != NULL && cudaEventRecord(ev, (cudaStream_t)s->handle) == cudaSuccess) {
      b->ev[b->nev] = ev;
      b->ev_dev[b->nev++] = s->device.id;
    } else {
      if (ev != NULL) cudaEventDestroy(ev);
      (void)cudaGetLastError();
      cudaStreamSynchronize((cudaStream_t)s->handle);
    }
  }
  cudaSetDevice(cur);
}

void rill__cuda_free(rill_device_t dev, void* p) {
  if (p == NULL) return;
  pthread_mutex_lock(&g_mu);
  size_t k = live_bucket(p);
  block_t* b = NULL;
  for (block_t** pp = &g_live[k]; *pp != NULL; pp = &(*pp)->next) {
    if ((*pp)->p == p) {
      b = *pp;
      *pp = b->next;
      break;
    }
  }
  if (b != NULL) {
    block_fence(b);
    b->next = g_cached;
    g_cached = b;
    g_cached_bytes += b->size;
    /* Sizes that stopped being asked for would otherwise stay cached forever. */
    if (g_cached_bytes > CACHE_MAX_BYTES) trim_locked();
  }
  pthread_mutex_unlock(&g_mu);
  /* A pointer rill did not hand out is ignored: freeing it would corrupt the driver. */
}

#endif /* RILL_HAVE_CUDA */

/* ---------------------------------------------------------------- public pool controls */

void rill__cuda_pool_stats(int64_t* allocs, int64_t* reuses, int64_t* cached_bytes) {
#if RILL_HAVE_CUDA
  pthread_mutex_lock(&g_mu);
  if (allocs) *allocs = g_stat_allocs;
  if (reuses) *reuses = g_stat_reuses;
  if (cached_bytes) *cached_bytes = (int64_t)g_cached_bytes;
  pthread_mutex_unlock(&g_mu);
#else
  if (allocs) *allocs = 0;
  if (reuses) *reuses = 0;
  if (cached_bytes) *cached_bytes = 0;
#endif
}

int64_t rill__cuda_pool_trim(void) {
#if RILL_HAVE_CUDA
  pthread_mutex_lock(&g_mu);
  size_t freed = trim_locked();
  pthread_mutex_unlock(&g_mu);
  return (int64_t)freed;
#else
  return 0;
#endif
}

/* ---------------------------------------------------------------- waiting on events */

int rill__event_wait(void* event, void* stream, rill_error_t* err) {
  if (event == NULL) return RILL_OK;
  return stream != NULL ? stream_wait_event(stream, event, err) : event_sync(event, err);
}
