/* Streams (CPU and CUDA), CUDA events, waits on events and copies. Pinned host and device
 * memory come from the block cache (cuda_cache.c), which fences freed blocks with events on
 * the live CUDA streams registered here.
 *
 * Built without CUDA (RILL_HAVE_CUDA=0), or run on a machine without a device, every call
 * that needs CUDA fails with RILL_ENODEV and a message; CPU streams and host-to-host copies
 * keep working. */
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
  int borrowed; /* rill_stream_wrap_cuda: the caller's stream, never destroyed here */
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

int rill_stream_wrap_cuda(int device, void* cuda_stream, rill_stream_t** out, rill_error_t* err) {
  if (out == NULL) return rill__fail(err, RILL_EINVAL, "rill_stream_wrap_cuda: out is NULL");
  *out = NULL;
  return rill__cuda_check_device(device, err);
}

int rill_stream_synchronize(rill_stream_t* s, rill_error_t* err) {
  if (s == NULL) return rill__fail(err, RILL_EINVAL, "rill_stream_synchronize: stream is NULL");
  return RILL_OK; /* CPU streams do no asynchronous work */
}

void rill_stream_free(rill_stream_t* s) { rill__free(s); }


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

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* the registry */
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

void rill__cuda_streams_each(void (*fn)(void* ctx, void* stream, int device), void* ctx) {
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < g_nstreams; i++) fn(ctx, g_streams[i]->handle, g_streams[i]->device.id);
  pthread_mutex_unlock(&g_mu);
}

static void registry_remove(rill_stream_t* s) {
  pthread_mutex_lock(&g_mu);
  for (int i = 0; i < g_nstreams; i++)
    if (g_streams[i] == s) { g_streams[i] = g_streams[--g_nstreams]; break; }
  pthread_mutex_unlock(&g_mu);
}

/* ---------------------------------------------------------------- streams */

/* A rill_stream_t over CUDA stream `cs` of `device`, in the registry, in *out (`borrowed`:
 * the caller's, never destroyed here). RILL_ENOMEM (with `what` in the message) leaves cs
 * to the caller. */
static int stream_add(int device, cudaStream_t cs, int borrowed, const char* what, rill_stream_t** out,
                      rill_error_t* err) {
  rill_stream_t* s = rill__calloc(1, sizeof(*s));
  if (s == NULL) return rill__fail(err, RILL_ENOMEM, "out of memory %s", what);
  s->device = (rill_device_t){RILL_DEVICE_CUDA, device};
  s->handle = cs;
  s->borrowed = borrowed;
  if (registry_add(s) != RILL_OK) {
    rill__free(s);
    return rill__fail(err, RILL_ENOMEM, "out of memory %s", what);
  }
  *out = s;
  return RILL_OK;
}

int rill_stream_new_cuda(int device, rill_stream_t** out, rill_error_t* err) {
  if (out == NULL) return rill__fail(err, RILL_EINVAL, "rill_stream_new_cuda: out is NULL");
  *out = NULL;
  int rc = set_device(device, err);
  if (rc != RILL_OK) return rc;
  cudaStream_t cs;
  cudaError_t e = cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking);
  if (e != cudaSuccess) return cuda_fail(err, e, "cudaStreamCreateWithFlags");
  rc = stream_add(device, cs, 0, "creating a CUDA stream", out, err);
  if (rc != RILL_OK) cudaStreamDestroy(cs);
  return rc;
}

int rill_stream_wrap_cuda(int device, void* cuda_stream, rill_stream_t** out, rill_error_t* err) {
  if (out == NULL) return rill__fail(err, RILL_EINVAL, "rill_stream_wrap_cuda: out is NULL");
  *out = NULL;
  int rc = set_device(device, err);
  if (rc != RILL_OK) return rc;
  /* NULL names the legacy default stream: its own handle keeps it apart from CPU streams */
  cudaStream_t cs = cuda_stream != NULL ? (cudaStream_t)cuda_stream : cudaStreamLegacy;
#if CUDART_VERSION >= 12080
  if (cs != cudaStreamLegacy && cs != cudaStreamPerThread) {
    int d = -1;
    cudaError_t e = cudaStreamGetDevice(cs, &d);
    if (e != cudaSuccess) return cuda_fail(err, e, "rill_stream_wrap_cuda: cudaStreamGetDevice");
    if (d != device)
      return rill__fail(err, RILL_EINVAL, "rill_stream_wrap_cuda: the stream belongs to CUDA device %d, not %d",
                        d, device);
  }
#endif
  return stream_add(device, cs, 1, "wrapping a CUDA stream", out, err);
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
    if (!s->borrowed) cudaStreamDestroy((cudaStream_t)s->handle);
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

#endif /* RILL_HAVE_CUDA */

/* ---------------------------------------------------------------- waiting on events */

int rill__event_wait(void* event, void* stream, rill_error_t* err) {
  if (event == NULL) return RILL_OK;
  return stream != NULL ? stream_wait_event(stream, event, err) : event_sync(event, err);
}
