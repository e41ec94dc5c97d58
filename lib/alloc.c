/* Allocation: every byte rill allocates goes through the allocator set here. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "internal.h"

static void* default_alloc(size_t size, size_t alignment, void* ctx) {
  (void)ctx;
  void* p = NULL;
  if (alignment < sizeof(void*)) alignment = sizeof(void*);
  if (posix_memalign(&p, alignment, size ? size : 1) != 0) return NULL;
  return p;
}

static void default_free(void* p, void* ctx) {
  (void)ctx;
  free(p);
}

static rill_allocator_t g_allocator = {default_alloc, default_free, NULL};

/* Each block records the allocator which made it, so that a block is always freed by that
 * allocator, whatever rill_set_allocator did in between: a header just before the caller's
 * pointer (in a slot of RILL_ALIGN bytes, or of SMALL_SLOT bytes and up to RILL_ALIGN -
 * SMALL_ALIGN more for small blocks), with the allocator's own pointer. */
typedef struct block_header {
  void* base;
  void (*free)(void* ptr, void* ctx);
  void* ctx;
} block_header_t;

enum { SMALL_ALIGN = 16, SMALL_SLOT = 32 };
_Static_assert(sizeof(block_header_t) <= SMALL_SLOT && SMALL_SLOT <= RILL_ALIGN, "the block header fits its slot");
_Static_assert(SMALL_SLOT % SMALL_ALIGN == 0, "a small block keeps its alignment");

void rill_set_allocator(const rill_allocator_t* allocator) {
  if (allocator && allocator->alloc && allocator->free)
    g_allocator = *allocator;
  else
    g_allocator = (rill_allocator_t){default_alloc, default_free, NULL};
}

/* A block of `size` bytes at a RILL_ALIGN boundary, asked of the allocator with alignment
 * `align`: a block asked with less is over-allocated by the difference and its caller's
 * pointer rounded up to the boundary. `slot`: the bytes before it, at least (the header). */
static void* alloc_slot(size_t size, size_t slot, size_t align) {
  size_t pad = RILL_ALIGN - align;
  if (size > SIZE_MAX - slot - pad) return NULL;
  rill_allocator_t a = g_allocator;
  uint8_t* base = a.alloc(size + slot + pad, align, a.ctx);
  if (!base) return NULL;
  uint8_t* p = base + slot;
  if (pad) p = (uint8_t*)(((uintptr_t)p + RILL_ALIGN - 1) & ~(uintptr_t)(RILL_ALIGN - 1)); /* within pad */
  block_header_t* h = (block_header_t*)p - 1;
  h->base = base;
  h->free = a.free;
  h->ctx = a.ctx;
  return p;
}

void* rill__alloc(size_t size) { return alloc_slot(size, RILL_ALIGN, RILL_ALIGN); }

void* rill__calloc_small(size_t size) {
  void* p = alloc_slot(size, SMALL_SLOT, SMALL_ALIGN);
  if (p) memset(p, 0, size);
  return p;
}

void rill__free(void* p) {
  if (!p) return;
  const block_header_t* h = (const block_header_t*)p - 1;
  h->free(h->base, h->ctx);
}

void* rill__calloc(size_t n, size_t size) {
  if (size && n > SIZE_MAX / size) return NULL;
  void* p = rill__alloc(n * size);
  if (p) memset(p, 0, n * size);
  return p;
}

void* rill__realloc(void* p, size_t old_size, size_t new_size) {
  void* q = rill__alloc(new_size);
  if (!q) return NULL;
  if (p) {
    memcpy(q, p, old_size < new_size ? old_size : new_size);
    rill__free(p);
  }
  return q;
}

void* rill__grow(void* p, int64_t* cap, int64_t used, int64_t need, size_t size, int64_t first) {
  if (p && need <= *cap) return p;
  int64_t nc = *cap > INT64_MAX / 2 ? INT64_MAX : *cap * 2;
  if (nc < first) nc = first;
  if (nc < need) nc = need;
  if ((size && (uint64_t)nc > SIZE_MAX / size) || used < 0 || used > *cap) return NULL;
  void* q = rill__realloc(p, (size_t)used * size, (size_t)nc * size);
  if (q) *cap = nc;
  return q;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif

void rill__populate(void* p, size_t size) {
  if (!p || size == 0) return;
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  if (page == 0 || (page & (page - 1))) return;
  uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1), hi = ((uintptr_t)p + size) & ~(page - 1);
  if (hi > lo) (void)madvise((void*)lo, hi - lo, MADV_POPULATE_WRITE); /* EINVAL on older kernels: faults as usual */
}

void rill__prefault(void* p, size_t size) {
  if (size >= RILL__PREFAULT_MIN) rill__populate(p, size);
}

char* rill__strdup(const char* s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char* d = rill__alloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

void rill__free_vec(void** v, int64_t n) {
  if (!v) return;
  for (int64_t i = 0; i < n; i++) rill__free(v[i]);
  rill__free(v);
}

void* rill__device_alloc(rill_device_t dev, size_t size) {
  if (dev.type == 0 || dev.type == RILL_DEVICE_CPU) return rill__alloc(size);
  return rill__cuda_alloc(dev, size);
}

void rill__device_free(rill_device_t dev, void* p) {
  if (!p) return;
  if (dev.type == 0 || dev.type == RILL_DEVICE_CPU)
    rill__free(p);
  else
    rill__cuda_free(dev, p);
}
