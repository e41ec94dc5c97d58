/* Internal declarations shared by the library's files. Not installed. */
#ifndef RILL_INTERNAL_H
#define RILL_INTERNAL_H

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "clock.h"
#include "rill.h"

#define RILL_ALIGN 64

/* ---- allocation (through rill_set_allocator) */
void* rill__alloc(size_t size);               /* 64-byte aligned; NULL on failure */
void* rill__calloc(size_t n, size_t size);    /* zeroed; NULL on failure or overflow */
/* A zeroed block for a small object made and freed often (an array's header: a row's view, a
 * slice), 64-byte aligned like any block but asked of the allocator with an alignment of 16
 * (and 48 bytes more, to align it itself): the default allocator then serves it from malloc's
 * per-thread cache, where an aligned request takes the heap's lock. Freed by rill__free. */
void* rill__calloc_small(size_t size);
void* rill__realloc(void* p, size_t old_size, size_t new_size); /* copies old_size bytes */
/* Block p of *cap elements of `size` bytes, the first `used` in use, made to hold at least
 * `need` (> 0) elements: p itself when it does; else a block of max(need, 2 x *cap, first)
 * elements with the used ones copied (p freed, *cap updated). NULL when out of memory (p and
 * *cap unchanged) or when the size overflows. */
void* rill__grow(void* p, int64_t* cap, int64_t used, int64_t need, size_t size, int64_t first);
void rill__free(void* p);
char* rill__strdup(const char* s);
/* Maps the pages of a fresh host block that is about to be written whole, in one call
 * (Linux's MADV_POPULATE_WRITE), instead of a page fault per page; blocks under
 * RILL__PREFAULT_MIN, and kernels without it, are left to fault page by page. */
#define RILL__PREFAULT_MIN ((size_t)4 << 20)
void rill__prefault(void* p, size_t size);
/* rill__prefault for any size: the pages wholly inside [p, p + size) (a part of a block whose
 * other parts other threads write meanwhile: the pages it shares with them fault as usual). */
void rill__populate(void* p, size_t size);
/* Frees v[0..n) and then v itself (v may be NULL). */
void rill__free_vec(void** v, int64_t n);

/* ---- errors */
/* Sets code and message and resets row/column to -1 (for API-level failures). */
int rill__fail(rill_error_t* err, int code, const char* fmt, ...) RILL_PRINTF(3, 4);
int rill__vfail(rill_error_t* err, int code, const char* fmt, va_list ap);
/* RILL_EINVAL "<who>: unknown column ...": for a negative index, the name of this thread's
 * last failed rill_df_column lookup when there was one, else the index. */
int rill__bad_column(rill_error_t* err, const char* who, const rill_df_t* df, int column);
/* Opens `path` for reading if it is a regular file, without blocking on a FIFO or a device.
 * Returns NULL with *fd (>= 0, close-on-exec, blocking reads) and *size (st_size: a hint,
 * 0 for files of /proc) set, or the reason it cannot be read (written into buf, or static). */
const char* rill__open_regular(const char* path, int* fd, int64_t* size, char* buf, size_t bufsize);
/* Input descriptors kept open across calls (mapped CSV files, tar archives) share one budget
 * for the process: an eighth of the soft RLIMIT_NOFILE, at most 1,024 (rill__kept_fd_budget
 * >= 0 sets it: tests), so that a dataset may have more files than the process may open.
 * rill__keep_fd: 1 when one more may be kept (it is counted), else 0; rill__unkeep_fd when a
 * kept one is closed. Thread-safe. */
extern int64_t rill__kept_fd_budget;
int rill__keep_fd(void);
void rill__unkeep_fd(void);
int rill__ncores(void);
/* Runs fn(arg) on the calling thread and on nthreads - 1 more (at most 64 in all; fewer when
 * threads cannot be made), and returns when all have returned: the workers of a job take its
 * pieces from a shared counter (a source's parallel open or index pass). */
void rill__run_threads(int nthreads, void* (*fn)(void*), void* arg);

/* ---- memory on devices: host (aligned), pinned host and CUDA device memory.
 * Pinned and device memory come from stream_cuda.c; without CUDA they fail (NULL). */
static inline int rill__device_is_host(rill_device_t d) {
  return d.type == 0 || d.type == RILL_DEVICE_CPU || d.type == RILL_DEVICE_CUDA_HOST;
}
void* rill__device_alloc(rill_device_t dev, size_t size);
void rill__device_free(rill_device_t dev, void* p);

/* ---- stages: a source or map that nulls cells itself under RILL_ON_ERROR_NULL counts them
 * here (rill_iter_stats' `nulled`). */
void rill__exec_count_nulled(rill_exec_t* exec, int64_t n);

/* ---- types */
int rill__type_valid(const rill_type_t* t); /* dtype known, 0..8 dims, strings scalar */
/* rill_type_equal where at least one of a, b is valid (its ndim bounds the shape read): for
 * the per-call checks of the stage runner, inline. */
static inline int rill__type_same(const rill_type_t* a, const rill_type_t* b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return 0;
  return 1;
}

/* ---- arrays */
enum {
  RILL__ARRAY_SLOT = 1,       /* pre-assigned window: rill_exec_alloc keeps its memory */
  RILL__ARRAY_EXTERNAL = 2    /* buffers belong to someone else (wrap / slice) */
};

typedef struct rill_pool rill_pool_t;

struct rill_array_priv {
  _Atomic int64_t refs;
  int flags;
  rill_pool_t* pool;          /* the array returns there at refs == 0; NULL: freed */
  void (*release)(void* ctx); /* wrapped external buffers */
  void* release_ctx;
  const rill_array_t* parent; /* slices hold a reference on their parent */
  /* owned buffers and their capacities in bytes (reused across pool round trips) */
  void* data_buf;
  int64_t data_cap;
  uint8_t* validity_buf;
  int64_t validity_cap;
  int64_t* offsets_buf;
  int64_t offsets_cap;
  int64_t* shapes_buf;
  int64_t shapes_cap;
  int64_t var_cells;          /* cells appended by rill_array_set_var */
  rill_array_t* next_free;    /* pool free list */
  void* engine;               /* for the engine's own bookkeeping */
};

/* A new empty array (length 0, no buffers) bound to `pool` (NULL = standalone), refs = 1. */
int rill__array_create(rill_pool_t* pool, rill_device_t device, rill_array_t** out);
/* Empties standalone array `a` (refs 1, buffers of its own) for another fill by its holder,
 * keeping its buffers as a pool would; 0 (a untouched) when it is not worth keeping: shared,
 * borrowed or a slice, or buffers of more than `most` bytes together. */
int rill__array_recycle(rill_array_t* a, int64_t most);
/* The bytes of the buffers `a` owns (their capacities). */
int64_t rill__array_capacity(const rill_array_t* a);
/* Sizes the array's buffers for `length` cells of `type` reusing capacity: fixed cells get
 * length*cell_bytes data (zeroed when `zero`), variable cells get offsets (zeroed) and shapes;
 * validity is dropped (all valid) and null_count set to 0. RILL_ENOMEM on failure (the array
 * keeps its previous buffers). */
int rill__array_prepare(rill_array_t* a, rill_type_t type, int64_t length, bool zero);
/* Makes `win` a window over cells [start, start+n) of fixed-shape `parent` (whose buffers
 * stay owned by the parent): data points into the parent, validity is the window's own
 * (allocated by set_null on demand), flags = RILL__ARRAY_SLOT. `win` is not reference
 * counted (priv points to `wpriv`, supplied by the caller). */
void rill__array_window(rill_array_t* win, rill_array_priv_t* wpriv, const rill_array_t* parent,
                        int64_t start, int64_t n);
/* rill__array_window and, for a fixed-shape `type`, rill__array_prepare (not zeroed) with the
 * cells' size in bytes given (`cell`: rill_type_cell_bytes of the type, which the stage runner
 * computes once per stage run rather than once per call). */
void rill__array_window_cells(rill_array_t* win, rill_array_priv_t* wpriv, const rill_array_t* parent, int64_t cell,
                              int64_t start, int64_t n);
/* Makes `a` an array of `length` cells of fixed-shape `type` (`cell` bytes each), not zeroed,
 * keeping its buffer when it holds them. `count`: its pool counts the allocation or reuse (the
 * iterator's statistics; 0 for an engine chunk's spare, which the chunk counts). `fresh`:
 * NULL, or where to leave a fresh host buffer of RILL__PREFAULT_MIN or more unmapped and say
 * so (1; else 0): the caller then populates the parts it writes (rill__populate), on the
 * threads that write them. */
int rill__array_prepare_fixed(rill_array_t* a, const rill_type_t* type, int64_t cell, int64_t length, int count,
                              int* fresh);
/* Frees what a window owns (its validity bitmap); the parent's buffers are untouched. */
void rill__array_window_release(rill_array_t* win);
/* Ensures a validity bitmap exists for `a` (all valid). */
int rill__array_ensure_validity(rill_array_t* a);
int64_t rill__count_nulls(const uint8_t* validity, int64_t length);
/* FNV-1a over p[0..n), continuing from h (RILL__FNV_START to begin): the keys of hash tables
 * (column names, tar keys) and the fingerprint of saved iterator states. */
#define RILL__FNV_START 0xCBF29CE484222325ULL
static inline uint64_t rill__fnv(uint64_t h, const void* p, size_t n) {
  const uint8_t* b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001B3ULL;
  return h;
}

static inline int rill__bit_get(const uint8_t* bits, int64_t i) { return (bits[i >> 3] >> (i & 7)) & 1; }
static inline void rill__bit_set(uint8_t* bits, int64_t i) { bits[i >> 3] |= (uint8_t)(1u << (i & 7)); }
static inline void rill__bit_clear(uint8_t* bits, int64_t i) { bits[i >> 3] &= (uint8_t)~(1u << (i & 7)); }

/* ---- pools of arrays: reuse buffers once the last reference is gone */
rill_pool_t* rill__pool_new(rill_device_t device);
/* Drops the owner's reference: the pool is freed once every array it lent has come back. */
void rill__pool_free(rill_pool_t* pool);
/* An array of the pool (a returned one when available), refs = 1, length 0. */
int rill__pool_acquire(rill_pool_t* pool, rill_array_t** out);
/* An array of `pool` whose data buffer best fits `bytes`: of the 64 arrays returned last,
 * the first one within a quarter above `bytes`, else the one with the smallest capacity that
 * holds them, else the one with the largest capacity; a new one when the pool holds none.
 * bytes < 0: the array returned last. */
int rill__pool_acquire_fit(rill_pool_t* pool, int64_t bytes, rill_array_t** out);
void rill__pool_counts(const rill_pool_t* pool, int64_t* allocs, int64_t* reuses);

/* ---- CUDA (lib/stream_cuda.c). Built without CUDA, or run without a device, every
 * function that can fail returns RILL_ENODEV with a message (allocators return NULL). */
int rill__cuda_device_count(void);                       /* 0 without CUDA or device */
int rill__cuda_check_device(int device, rill_error_t* err); /* RILL_OK or RILL_ENODEV */
/* cuda_cache.c: CUDA device or pinned host memory from the block cache (NULL on failure);
 * a block freed is reused once the CUDA streams that may use it passed the free. */
void* rill__cuda_alloc(rill_device_t dev, size_t size);
void rill__cuda_free(rill_device_t dev, void* p);
int rill__cuda_event_new(int device, void** event, rill_error_t* err);
int rill__cuda_event_record(void* event, void* stream, rill_error_t* err);
/* lib/array.c: records device or pinned array `a`'s event (made on `device` when it has
 * none; left NULL when that fails) on CUDA stream `stream`: the work enqueued there so far
 * reads the array, and the next writer of its memory waits for the event
 * (rill__node_acquire). Host arrays: nothing. */
int rill__array_fence(rill_array_t* a, int device, void* stream, rill_error_t* err);
int rill__cuda_event_query(void* event);                 /* 1 done, 0 pending, < 0 error */
void rill__cuda_event_free(void* event);
/* Calls fn(ctx, stream, device) for every live stream made by rill_stream_new_cuda (the
 * registry is locked meanwhile: fn must not create or free streams). CUDA builds only. */
void rill__cuda_streams_each(void (*fn)(void* ctx, void* stream, int device), void* ctx);
/* The block cache's counters: blocks allocated from CUDA, reused, and bytes held. */
void rill__cuda_pool_stats(int64_t* allocs, int64_t* reuses, int64_t* cached_bytes);
/* Gives cached blocks whose events completed back to CUDA; returns the bytes freed. */
int64_t rill__cuda_pool_trim(void);
/* Copies between host/pinned/device memory, async on `stream` (NULL: synchronous). */
int rill__cuda_memcpy(void* dst, rill_device_t dst_dev, const void* src, rill_device_t src_dev,
                      size_t size, void* stream, rill_error_t* err);

#endif /* RILL_INTERNAL_H */
