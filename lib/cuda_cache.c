/* The CUDA block cache: the caching allocator behind pinned host and device memory.
 *
 * Freed pinned and device blocks are kept in a cache keyed by (device, size class). A block
 * freed while rill's CUDA streams may still use it is reused only once every CUDA stream
 * created by rill_stream_new_cuda has passed the point where the block was freed: on free,
 * an event is recorded on each live rill stream (stream_cuda.c keeps their registry), and
 * the block is handed out again only when all of them completed. Built without CUDA, the
 * allocator returns NULL and the controls report an empty cache. */
#include <pthread.h>
#include <stdint.h>

#include "internal.h"

#if RILL_HAVE_CUDA
#include <cuda_runtime_api.h>

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER; /* the cache and its spare events */

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

/* Records an event for block b on CUDA stream `stream` of `device` (device blocks: streams
 * of their device only; pinned blocks: every stream). Called with g_mu held. Without memory
 * for events it waits for the stream instead, so reuse stays safe. */
static void fence_stream(void* ctx, void* stream, int device) {
  block_t* b = ctx;
  if (b->dev.type == RILL_DEVICE_CUDA && device != b->dev.id) return;
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
      if (g_ev_free_dev[j] == device) {
        ev = g_ev_free[j];
        g_ev_free[j] = g_ev_free[g_nev_free - 1];
        g_ev_free_dev[j] = g_ev_free_dev[g_nev_free - 1];
        g_nev_free--;
        break;
      }
    }
    if (ev == NULL) {
      cudaSetDevice(device);
      if (cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) != cudaSuccess) {
        (void)cudaGetLastError();
        ev = NULL;
      }
    }
  }
  if (ev != NULL && cudaEventRecord(ev, (cudaStream_t)stream) == cudaSuccess) {
    b->ev[b->nev] = ev;
    b->ev_dev[b->nev++] = device;
  } else {
    if (ev != NULL) cudaEventDestroy(ev);
    (void)cudaGetLastError();
    cudaStreamSynchronize((cudaStream_t)stream);
  }
}

/* Records an event on every live rill CUDA stream. Called with g_mu held. */
static void block_fence(block_t* b) {
  int cur = 0;
  cudaGetDevice(&cur);
  rill__cuda_streams_each(fence_stream, b);
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

#else /* !RILL_HAVE_CUDA */

void* rill__cuda_alloc(rill_device_t dev, size_t size) { return NULL; }
void rill__cuda_free(rill_device_t dev, void* p) {}

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

