/* Arrays: reference-counted, Arrow-compatible buffers, and the pools that recycle them. */
#include <pthread.h>
#include <string.h>

#include "addon.h"

typedef struct array_block {
  rill_array_t array;
  rill_array_priv_t priv;
} array_block_t;

/* A pool's idle arrays: the one released last in `hot`, taken and put back with one atomic
 * exchange (a stage's output usually goes back and comes out again once per chunk), the others
 * in `free_list` under the mutex, most recently released first (`hot` is in effect its head:
 * an array displaced from `hot` goes to the list first). */
struct rill_pool {
  _Atomic int64_t refs;        /* the owner's reference + one per array made by the pool */
  pthread_mutex_t mu;
  _Atomic(rill_array_t*) hot;
  rill_array_t* free_list;
  rill_device_t device;
  _Atomic int closed;          /* set under the mutex; read by releases without it */
  _Atomic int64_t allocs, reuses;
};

int rill__type_valid(const rill_type_t* t) {
  if (t->dtype < RILL_BOOL || t->dtype > RILL_TIMESTAMP_US) return 0;
  if (t->ndim < 0 || t->ndim > RILL_MAX_NDIM) return 0;
  for (int i = 0; i < t->ndim; i++)
    if (t->shape[i] < -1) return 0;
  /* strings and binary are scalars only */
  if ((t->dtype == RILL_STRING || t->dtype == RILL_BINARY) && t->ndim != 0) return 0;
  return 1;
}

static int has_var_shape(const rill_type_t* t) {
  for (int i = 0; i < t->ndim; i++)
    if (t->shape[i] < 0) return 1;
  return 0;
}


int64_t rill__count_nulls(const uint8_t* validity, int64_t length) {
  if (!validity) return 0;
  int64_t valid = 0, full = length >> 3;
  for (int64_t i = 0; i < full; i++) valid += __builtin_popcount(validity[i]);
  for (int64_t i = full << 3; i < length; i++) valid += rill__bit_get(validity, i);
  return length - valid;
}

/* ---------------------------------------------------------------- creation and release */

int rill__array_create(rill_pool_t* pool, rill_device_t device, rill_array_t** out) {
  array_block_t* b = rill__calloc_small(sizeof *b);
  if (!b) return RILL_ENOMEM;
  b->array.priv = &b->priv;
  b->array.device = device.type ? device : (rill_device_t){RILL_DEVICE_CPU, 0};
  atomic_init(&b->priv.refs, 1);
  b->priv.pool = pool;
  if (pool) atomic_fetch_add(&pool->refs, 1);
  *out = &b->array;
  return RILL_OK;
}

static void pool_unref(rill_pool_t* pool);

static void array_destroy(rill_array_t* a) {
  rill_array_priv_t* p = a->priv;
  rill_pool_t* pool = p->pool;
  if (p->parent) rill_array_release(p->parent);
  if (p->release) p->release(p->release_ctx);
  if (a->event) rill__cuda_event_free(a->event);
  rill__device_free(a->device, p->data_buf);
  rill__device_free(a->device, p->validity_buf);
  rill__device_free(a->device, p->offsets_buf);
  rill__device_free(a->device, p->shapes_buf);
  rill__free((array_block_t*)a);
  if (pool) pool_unref(pool);
}

/* A variable-length array going back to its pool keeps its data buffer only when it used a
 * good part of it: otherwise, buffers grown once by a large cell would be kept at that size
 * by every pooled array and resident memory would creep up towards (arrays x largest need). */
#define TRIM_MIN_BYTES (64 << 10)
static void trim_var_buffer(rill_array_t* a) {
  rill_array_priv_t* p = a->priv;
  if (!a->offsets || (p->flags & (RILL__ARRAY_EXTERNAL | RILL__ARRAY_SLOT))) return;
  if (p->data_cap <= TRIM_MIN_BYTES || p->data_cap <= 2 * a->data_size) return;
  rill__device_free(a->device, p->data_buf);
  p->data_buf = NULL;
  p->data_cap = 0;
  a->data = NULL;
  a->data_size = 0;
}

/* An array's state as a fresh one's for its next fill, its buffers kept (trimmed as above). */
static void reset_for_reuse(rill_array_t* a) {
  trim_var_buffer(a);
  a->length = 0;
  a->null_count = 0;
  a->validity = NULL;
  a->priv->var_cells = 0;
  a->priv->next_free = NULL;
}

int64_t rill__array_capacity(const rill_array_t* a) {
  const rill_array_priv_t* p = a->priv;
  return p->data_cap + p->validity_cap + p->offsets_cap + p->shapes_cap;
}

int rill__array_recycle(rill_array_t* a, int64_t most) {
  rill_array_priv_t* p = a->priv;
  if (atomic_load(&p->refs) != 1 || p->pool || p->parent || p->release || a->event ||
      (p->flags & (RILL__ARRAY_EXTERNAL | RILL__ARRAY_SLOT)) || rill__array_capacity(a) > most)
    return 0;
  reset_for_reuse(a);
  return 1;
}

rill_array_t* rill_array_retain(const rill_array_t* a) {
  if (!a) return NULL;
  atomic_fetch_add(&a->priv->refs, 1);
  return (rill_array_t*)a;
}

int64_t rill_array_refcount(const rill_array_t* a) { return a ? atomic_load(&a->priv->refs) : 0; }

void rill_array_release(const rill_array_t* ca) {
  if (!ca) return;
  rill_array_t* a = (rill_array_t*)ca;
  if (atomic_fetch_sub(&a->priv->refs, 1) != 1) return;
  rill_pool_t* pool = a->priv->pool;
  if (pool && !atomic_load(&pool->closed)) {
    reset_for_reuse(a);
    atomic_store_explicit(&a->priv->refs, 0, memory_order_relaxed); /* published by the exchange or the mutex */
    rill_array_t* none = NULL;
    if (atomic_compare_exchange_strong(&pool->hot, &none, a)) {
      /* the pool closing meanwhile (it sets `closed`, then empties `hot`; both sequentially
       * consistent, as are this exchange and load): whoever comes second frees what `hot` holds */
      if (!atomic_load(&pool->closed)) return;
      rill_array_t* h = atomic_exchange(&pool->hot, NULL);
      if (h) array_destroy(h); /* may free the pool: not touched after this */
      return;
    }
    pthread_mutex_lock(&pool->mu);
    if (!atomic_load_explicit(&pool->closed, memory_order_relaxed)) {
      a->priv->next_free = pool->free_list;
      pool->free_list = a;
      pthread_mutex_unlock(&pool->mu);
      return;
    }
    pthread_mutex_unlock(&pool->mu);
  }
  array_destroy(a);
}

/* ---------------------------------------------------------------- pools */

rill_pool_t* rill__pool_new(rill_device_t device) {
  rill_pool_t* pool = rill__calloc(1, sizeof *pool);
  if (!pool) return NULL;
  if (pthread_mutex_init(&pool->mu, NULL) != 0) {
    rill__free(pool);
    return NULL;
  }
  atomic_init(&pool->refs, 1);
  pool->device = device.type ? device : (rill_device_t){RILL_DEVICE_CPU, 0};
  return pool;
}

static void pool_unref(rill_pool_t* pool) {
  if (atomic_fetch_sub(&pool->refs, 1) != 1) return;
  pthread_mutex_destroy(&pool->mu);
  rill__free(pool);
}

void rill__pool_free(rill_pool_t* pool) {
  if (!pool) return;
  pthread_mutex_lock(&pool->mu);
  atomic_store(&pool->closed, 1);
  rill_array_t* list = pool->free_list;
  pool->free_list = NULL;
  pthread_mutex_unlock(&pool->mu);
  rill_array_t* h = atomic_exchange(&pool->hot, NULL);
  if (h) array_destroy(h);
  while (list) {
    rill_array_t* next = list->priv->next_free;
    array_destroy(list); /* drops the array's pool reference */
    list = next;
  }
  pool_unref(pool);
}

/* A close fit: what the list scan below stops at. */
static int close_fit(int64_t cap, int64_t bytes) { return bytes < 0 || (cap >= bytes && cap - bytes <= bytes / 4); }

int rill__pool_acquire_fit(rill_pool_t* pool, int64_t bytes, rill_array_t** out) {
  rill_array_t* h = atomic_exchange(&pool->hot, NULL);
  if (h && close_fit(h->priv->data_cap, bytes)) {
    atomic_store_explicit(&h->priv->refs, 1, memory_order_relaxed); /* ours alone now */
    *out = h;
    return RILL_OK;
  }
  pthread_mutex_lock(&pool->mu);
  if (h) { /* the list's head after all: scanned with the others */
    h->priv->next_free = pool->free_list;
    pool->free_list = h;
  }
  rill_array_t* a = pool->free_list;
  rill_array_t** link = &pool->free_list;
  if (a && bytes >= 0) {
    rill_array_t** best = NULL;   /* the smallest capacity that holds `bytes` */
    rill_array_t** largest = link;
    int seen = 0;                 /* the scan stops at a close fit or after the 64 latest */
    for (rill_array_t** l = link; *l && seen < 64; l = &(*l)->priv->next_free, seen++) {
      int64_t cap = (*l)->priv->data_cap;
      if (cap >= bytes && (!best || cap < (*best)->priv->data_cap)) best = l;
      if (cap > (*largest)->priv->data_cap) largest = l;
      if (best && (*best)->priv->data_cap - bytes <= bytes / 4) break;
    }
    link = best ? best : largest;
    a = *link;
  }
  if (a) *link = a->priv->next_free;
  pthread_mutex_unlock(&pool->mu);
  if (a) {
    a->priv->next_free = NULL;
    atomic_store_explicit(&a->priv->refs, 1, memory_order_relaxed); /* ours alone now */
    *out = a;
    return RILL_OK;
  }
  return rill__array_create(pool, pool->device, out);
}

int rill__pool_acquire(rill_pool_t* pool, rill_array_t** out) { return rill__pool_acquire_fit(pool, -1, out); }

void rill__pool_counts(const rill_pool_t* pool, int64_t* allocs, int64_t* reuses) {
  if (allocs) *allocs = pool ? atomic_load(&((rill_pool_t*)pool)->allocs) : 0;
  if (reuses) *reuses = pool ? atomic_load(&((rill_pool_t*)pool)->reuses) : 0;
}

/* ---------------------------------------------------------------- buffers */

/* Capacities come in classes of a quarter power of two (2^k times 1, 1.25, 1.5, 1.75), so
 * that a recycled buffer fits the next need of about the same size. */
static int64_t size_class(int64_t n) {
  if (n <= 64 || n > (INT64_MAX >> 2)) return n;
  int k = 63 - __builtin_clzll((unsigned long long)n); /* 2^k <= n < 2^(k+1) */
  int64_t step = (int64_t)1 << (k >= 2 ? k - 2 : 0);
  return (n + step - 1) / step * step;
}

/* Makes *buf hold at least `need` bytes. Contents are kept when `keep` bytes > 0. On failure
 * the old buffer stays. Returns 1 when it allocated, 0 when the capacity sufficed, < 0 on
 * failure. */
static int grow(rill_device_t dev, void** buf, int64_t* cap, int64_t need, int64_t keep) {
  if (need <= *cap && *buf) return 0;
  int64_t ncap = keep > 0 && *cap * 2 > need ? *cap * 2 : need;
  if (ncap < 64) ncap = 64;
  ncap = size_class(ncap);
  void* nb = rill__device_alloc(dev, (size_t)ncap);
  if (!nb) return RILL_ENOMEM;
  if (keep > 0 && *buf) {
    if (rill__device_is_host(dev))
      memcpy(nb, *buf, (size_t)keep);
    else if (rill__cuda_memcpy(nb, dev, *buf, dev, (size_t)keep, NULL, NULL) != RILL_OK) {
      rill__device_free(dev, nb);
      return RILL_ENOMEM;
    }
  }
  rill__device_free(dev, *buf);
  *buf = nb;
  *cap = ncap;
  return 1;
}

static int mul_overflow(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }

/* The end of a successful rill__array_prepare. */
static void prepared(rill_array_t* a, const rill_type_t* type, int64_t length, int allocated, int count) {
  rill_array_priv_t* p = a->priv;
  a->type = *type;
  a->length = length;
  a->validity = NULL;
  a->null_count = 0;
  p->var_cells = 0;
  if (p->pool && count) atomic_fetch_add_explicit(allocated ? &p->pool->allocs : &p->pool->reuses, 1, memory_order_relaxed);
}

/* Fixed cells of `cell` bytes (>= 0; the type is valid and fixed): data for `length` cells.
 * `fresh`: as in rill__array_prepare_fixed. */
static int prepare_fixed(rill_array_t* a, int64_t cell, int64_t length, bool zero, int* allocated, int* fresh) {
  rill_array_priv_t* p = a->priv;
  int64_t bytes;
  if (cell < 0 || mul_overflow(cell, length, &bytes)) return RILL_ERANGE;
  void* b = p->data_buf;
  int r = b && bytes <= p->data_cap ? 0 : grow(a->device, &b, &p->data_cap, bytes, 0); /* a pooled array's fits */
  if (r < 0) return r;
  p->data_buf = b;
  *allocated = r;
  /* a fresh buffer of fixed cells is written whole (a batch of images: 150 MB) */
  int big = r == 1 && (a->device.type == 0 || a->device.type == RILL_DEVICE_CPU) && (size_t)bytes >= RILL__PREFAULT_MIN;
  if (big && fresh)
    *fresh = 1;
  else if (big)
    rill__prefault(b, (size_t)bytes);
  if (zero && bytes && rill__device_is_host(a->device)) memset(p->data_buf, 0, (size_t)bytes);
  a->offsets = NULL;
  a->shapes = NULL;
  a->data = p->data_buf;
  a->data_size = bytes;
  return RILL_OK;
}

int rill__array_prepare_fixed(rill_array_t* a, const rill_type_t* type, int64_t cell, int64_t length, int count,
                              int* fresh) {
  if (fresh) *fresh = 0;
  if (length < 0 || (a->priv->flags & (RILL__ARRAY_EXTERNAL | RILL__ARRAY_SLOT))) return RILL_EINVAL;
  int allocated = 0, r = prepare_fixed(a, cell, length, false, &allocated, fresh);
  if (r != RILL_OK) return r;
  prepared(a, type, length, allocated, count);
  return RILL_OK;
}

int rill__array_prepare(rill_array_t* a, rill_type_t type, int64_t length, bool zero) {
  rill_array_priv_t* p = a->priv;
  if (!rill__type_valid(&type) || length < 0 || (p->flags & (RILL__ARRAY_EXTERNAL | RILL__ARRAY_SLOT)))
    return RILL_EINVAL;
  int host = rill__device_is_host(a->device);
  int allocated = 0, r;
  void* b;
  if (rill_type_is_fixed(&type)) {
    if ((r = prepare_fixed(a, rill_type_cell_bytes(&type), length, zero, &allocated, NULL)) != RILL_OK) return r;
  } else {
    if (!host) return RILL_ENOTSUP; /* variable cells live in host memory */
    int64_t obytes, sbytes = 0;
    if (mul_overflow(length + 1, 8, &obytes)) return RILL_ERANGE;
    if (has_var_shape(&type) && mul_overflow(length, (int64_t)type.ndim * 8, &sbytes)) return RILL_ERANGE;
    b = p->offsets_buf;
    if ((r = grow(a->device, &b, &p->offsets_cap, obytes, 0)) < 0) return r;
    p->offsets_buf = b;
    allocated |= r;
    if (sbytes) {
      b = p->shapes_buf;
      if ((r = grow(a->device, &b, &p->shapes_cap, sbytes, 0)) < 0) return r;
      p->shapes_buf = b;
      allocated |= r;
      memset(p->shapes_buf, 0, (size_t)sbytes);
    }
    memset(p->offsets_buf, 0, (size_t)obytes);
    a->offsets = p->offsets_buf;
    a->shapes = sbytes ? p->shapes_buf : NULL;
    a->data = p->data_buf;
    a->data_size = 0;
  }
  prepared(a, &type, length, allocated, 1);
  return RILL_OK;
}

int rill__array_ensure_validity(rill_array_t* a) {
  if (a->validity) return RILL_OK;
  rill_array_priv_t* p = a->priv;
  if (!rill__device_is_host(a->device)) return RILL_ENOTSUP;
  int64_t bytes = (a->length + 7) / 8;
  void* b = p->validity_buf;
  int r = grow(a->device, &b, &p->validity_cap, bytes ? bytes : 1, 0);
  if (r < 0) return r;
  p->validity_buf = b;
  if (r > 0 && p->pool) atomic_fetch_add(&p->pool->allocs, 1);
  memset(p->validity_buf, 0xFF, (size_t)(bytes ? bytes : 1));
  a->validity = p->validity_buf;
  return RILL_OK;
}

/* Field by field rather than two memsets: those compile to `rep stos`, whose start-up cost
 * shows in every call of a cheap stage (one window per fixed output per call). The sizes
 * below (64-bit targets) catch a field added to either struct and not set here. */
#if UINTPTR_MAX == UINT64_MAX
_Static_assert(sizeof(rill_array_priv_t) == 8 * sizeof(int64_t) + 9 * sizeof(void*), "rill__array_window sets every field");
_Static_assert(sizeof(rill_array_t) == sizeof(rill_type_t) + 3 * sizeof(int64_t) + 6 * sizeof(void*) + sizeof(rill_device_t),
               "rill__array_window sets every field");
#endif
void rill__array_window(rill_array_t* win, rill_array_priv_t* wpriv, const rill_array_t* parent,
                        int64_t start, int64_t n) {
  rill__array_window_cells(win, wpriv, parent, rill_type_cell_bytes(&parent->type), start, n);
}

void rill__array_window_cells(rill_array_t* win, rill_array_priv_t* wpriv, const rill_array_t* parent, int64_t cell,
                              int64_t start, int64_t n) {
  atomic_init(&wpriv->refs, 1);
  wpriv->flags = RILL__ARRAY_SLOT;
  wpriv->pool = NULL;
  wpriv->release = NULL;
  wpriv->release_ctx = NULL;
  wpriv->parent = NULL;
  wpriv->data_buf = NULL;
  wpriv->data_cap = 0;
  wpriv->validity_buf = NULL;
  wpriv->validity_cap = 0;
  wpriv->offsets_buf = NULL;
  wpriv->offsets_cap = 0;
  wpriv->shapes_buf = NULL;
  wpriv->shapes_cap = 0;
  wpriv->var_cells = 0;
  wpriv->next_free = NULL;
  wpriv->engine = NULL;
  win->type = parent->type;
  win->length = n;
  win->null_count = 0;
  win->validity = NULL;
  win->offsets = NULL;
  win->shapes = NULL;
  win->data = (uint8_t*)parent->data + start * (cell > 0 ? cell : 0);
  win->data_size = n * (cell > 0 ? cell : 0);
  win->device = parent->device;
  win->event = NULL;
  win->priv = wpriv;
}

void rill__array_window_release(rill_array_t* win) {
  rill__device_free(win->device, win->priv->validity_buf);
  win->priv->validity_buf = NULL;
  win->priv->validity_cap = 0;
  win->validity = NULL;
}

/* ---------------------------------------------------------------- public constructors */

int rill_array_new(rill_type_t type, int64_t length, rill_array_t** out, rill_error_t* err) {
  char tbuf[96];
  if (!out) return rill__fail(err, RILL_EINVAL, "rill_array_new: out is NULL");
  *out = NULL;
  if (!rill__type_valid(&type))
    return rill__fail(err, RILL_EINVAL, "rill_array_new: invalid type %s", rill_type_format(&type, tbuf, sizeof tbuf));
  if (length < 0) return rill__fail(err, RILL_EINVAL, "rill_array_new: negative length %lld", (long long)length);
  rill_array_t* a;
  if (rill__array_create(NULL, (rill_device_t){RILL_DEVICE_CPU, 0}, &a) != RILL_OK)
    return rill__fail(err, RILL_ENOMEM, "rill_array_new: out of memory");
  int r = rill__array_prepare(a, type, length, true);
  if (r != RILL_OK) {
    array_destroy(a);
    return rill__fail(err, r, "rill_array_new: cannot allocate %lld cells of %s", (long long)length,
                      rill_type_format(&type, tbuf, sizeof tbuf));
  }
  *out = a;
  return RILL_OK;
}

int rill_array_wrap(rill_type_t type, int64_t length, void* data, int64_t data_size, uint8_t* validity,
                    int64_t null_count, int64_t* offsets, int64_t* shapes, void (*release)(void* ctx),
                    void* ctx, rill_array_t** out, rill_error_t* err) {
  char tbuf[96];
  if (!out) return rill__fail(err, RILL_EINVAL, "rill_array_wrap: out is NULL");
  *out = NULL;
  if (!rill__type_valid(&type))
    return rill__fail(err, RILL_EINVAL, "rill_array_wrap: invalid type %s", rill_type_format(&type, tbuf, sizeof tbuf));
  if (length < 0) return rill__fail(err, RILL_EINVAL, "rill_array_wrap: negative length");
  int fixed = rill_type_is_fixed(&type);
  if (!fixed && !offsets && length > 0)
    return rill__fail(err, RILL_EINVAL, "rill_array_wrap: %s cells need offsets", rill_type_format(&type, tbuf, sizeof tbuf));
  if (has_var_shape(&type) && !shapes && length > 0)
    return rill__fail(err, RILL_EINVAL, "rill_array_wrap: variable-shape cells need shapes");
  if (!data && length > 0 && (fixed ? rill_type_cell_bytes(&type) > 0 : offsets[length] > 0))
    return rill__fail(err, RILL_EINVAL, "rill_array_wrap: data is NULL");
  if (!fixed && length > 0) {
    if (offsets[0] != 0) return rill__fail(err, RILL_EINVAL, "rill_array_wrap: offsets[0] must be 0");
    for (int64_t i = 0; i < length; i++)
      if (offsets[i + 1] < offsets[i])
        return rill__fail(err, RILL_EINVAL, "rill_array_wrap: offsets decrease at cell %lld", (long long)i);
  }
  rill_array_t* a;
  if (rill__array_create(NULL, (rill_device_t){RILL_DEVICE_CPU, 0}, &a) != RILL_OK)
    return rill__fail(err, RILL_ENOMEM, "rill_array_wrap: out of memory");
  a->priv->flags = RILL__ARRAY_EXTERNAL;
  a->type = type;
  a->length = length;
  a->data = data;
  a->validity = validity;
  a->offsets = fixed ? NULL : offsets;
  a->shapes = has_var_shape(&type) ? shapes : NULL;
  if (fixed)
    a->data_size = data_size > 0 ? data_size : length * rill_type_cell_bytes(&type);
  else
    a->data_size = length > 0 ? offsets[length] : 0;
  a->null_count = !validity ? 0 : null_count >= 0 ? null_count : rill__count_nulls(validity, length);
  a->priv->release = release;
  a->priv->release_ctx = ctx;
  *out = a;
  return RILL_OK;
}

int rill_array_slice(const rill_array_t* a, int64_t start, int64_t n, rill_array_t** out, rill_error_t* err) {
  if (!a || !out) return rill__fail(err, RILL_EINVAL, "rill_array_slice: NULL argument");
  *out = NULL;
  if (start < 0 || n < 0 || start > a->length || n > a->length - start)
    return rill__fail(err, RILL_EINVAL, "rill_array_slice: cells [%lld, %lld) outside an array of %lld",
                      (long long)start, (long long)(start + n), (long long)a->length);
  rill_array_t* s;
  if (rill__array_create(NULL, a->device, &s) != RILL_OK) return rill__fail(err, RILL_ENOMEM, "rill_array_slice: out of memory");
  rill_array_priv_t* p = s->priv;
  p->flags = RILL__ARRAY_EXTERNAL;
  s->type = a->type;
  s->length = n;
  s->event = NULL;
  int fixed = rill_type_is_fixed(&a->type);
  if (fixed) {
    int64_t cell = rill_type_cell_bytes(&a->type);
    s->data = (uint8_t*)a->data + start * cell;
    s->data_size = n * cell;
  } else {
    int64_t base = a->offsets[start];
    p->offsets_buf = rill__alloc((size_t)(n + 1) * 8);
    if (!p->offsets_buf) goto nomem;
    p->offsets_cap = (n + 1) * 8;
    for (int64_t i = 0; i <= n; i++) p->offsets_buf[i] = a->offsets[start + i] - base;
    s->offsets = p->offsets_buf;
    s->data = a->data ? (uint8_t*)a->data + base : NULL;
    s->data_size = a->offsets[start + n] - base;
    if (a->shapes) s->shapes = a->shapes + start * a->type.ndim;
  }
  if (a->validity && a->null_count > 0) {
    if ((start & 7) == 0) {
      s->validity = a->validity + (start >> 3);
    } else {
      p->validity_buf = rill__calloc((size_t)(n + 7) / 8 + 1, 1);
      if (!p->validity_buf) goto nomem;
      p->validity_cap = (n + 7) / 8 + 1;
      for (int64_t i = 0; i < n; i++)
        if (rill__bit_get(a->validity, start + i)) rill__bit_set(p->validity_buf, i);
      s->validity = p->validity_buf;
    }
    s->null_count = rill__count_nulls(s->validity, n);
    if (s->null_count == 0) s->validity = NULL;
  }
  /* owned helper buffers are host memory even for device arrays */
  s->device = a->device;
  if (!rill__device_is_host(a->device) && (p->offsets_buf || p->validity_buf)) {
    rill__free(p->offsets_buf);
    rill__free(p->validity_buf);
    p->offsets_buf = NULL;
    p->validity_buf = NULL;
    rill__free((array_block_t*)s);
    return rill__fail(err, RILL_ENOTSUP, "rill_array_slice: device arrays with offsets or nulls cannot be sliced");
  }
  p->parent = rill_array_retain(a);
  *out = s;
  return RILL_OK;
nomem:
  array_destroy(s);
  return rill__fail(err, RILL_ENOMEM, "rill_array_slice: out of memory");
}

int rill_array_copy(const rill_array_t* a, rill_array_t** out, rill_error_t* err) {
  if (!a || !out) return rill__fail(err, RILL_EINVAL, "rill_array_copy: NULL argument");
  *out = NULL;
  if (!rill__device_is_host(a->device)) return rill__fail(err, RILL_ENOTSUP, "rill_array_copy: the array is in device memory");
  rill_array_t* c;
  int r = rill_array_new(a->type, a->length, &c, err);
  if (r != RILL_OK) return r;
  if (rill_type_is_fixed(&a->type)) {
    if (a->data_size) memcpy(c->data, a->data, (size_t)a->data_size);
  } else {
    if (rill_array_reserve(c, a->data_size) != RILL_OK) goto nomem;
    if (a->data_size) memcpy(c->data, a->data, (size_t)a->data_size);
    memcpy(c->offsets, a->offsets, (size_t)(a->length + 1) * 8);
    if (a->shapes) memcpy(c->shapes, a->shapes, (size_t)(a->length * a->type.ndim) * 8);
    c->data_size = a->data_size;
    c->priv->var_cells = a->length;
  }
  if (a->validity && a->null_count > 0) {
    if (rill__array_ensure_validity(c) != RILL_OK) goto nomem;
    memcpy(c->validity, a->validity, (size_t)(a->length + 7) / 8);
    c->null_count = a->null_count;
  }
  *out = c;
  return RILL_OK;
nomem:
  rill_array_release(c);
  return rill__fail(err, RILL_ENOMEM, "rill_array_copy: out of memory");
}

/* ---------------------------------------------------------------- building */

int rill_array_reserve(rill_array_t* a, int64_t data_bytes) {
  if (!a || data_bytes < 0) return RILL_EINVAL;
  rill_array_priv_t* p = a->priv;
  if (data_bytes <= a->data_size && a->data) return RILL_OK;
  if (p->flags & (RILL__ARRAY_EXTERNAL | RILL__ARRAY_SLOT)) return RILL_EINVAL;
  void* b = p->data_buf;
  int r = grow(a->device, &b, &p->data_cap, data_bytes, a->data_size);
  if (r < 0) return r;
  if (r > 0 && p->pool) atomic_fetch_add(&p->pool->allocs, 1);
  p->data_buf = b;
  a->data = b;
  return RILL_OK;
}

int rill_array_set_var(rill_array_t* a, int64_t i, const void* bytes, int64_t n, const int64_t* shape) {
  if (!a || !a->offsets || n < 0) return RILL_EINVAL;
  rill_array_priv_t* p = a->priv;
  if (i != p->var_cells || i >= a->length) return RILL_EINVAL;
  if (has_var_shape(&a->type) && !shape && n > 0) return RILL_EINVAL;
  int64_t start = a->offsets[i];
  if (p->data_cap < start + n || !a->data) {
    rill_array_priv_t* pp = p;
    void* b = pp->data_buf;
    if (pp->flags & (RILL__ARRAY_EXTERNAL | RILL__ARRAY_SLOT)) return RILL_EINVAL;
    int r = grow(a->device, &b, &pp->data_cap, start + n, start);
    if (r < 0) return r;
    if (r > 0 && pp->pool) atomic_fetch_add(&pp->pool->allocs, 1);
    pp->data_buf = b;
    a->data = b;
  }
  if (bytes && n) memcpy((uint8_t*)a->data + start, bytes, (size_t)n);
  a->offsets[i + 1] = start + n;
  if (a->shapes) {
    for (int d = 0; d < a->type.ndim; d++) a->shapes[i * a->type.ndim + d] = shape ? shape[d] : 0;
  }
  a->data_size = start + n;
  p->var_cells = i + 1;
  return RILL_OK;
}

int rill_array_set_null(rill_array_t* a, int64_t i) {
  if (!a || i < 0 || i >= a->length) return RILL_EINVAL;
  int r = rill__array_ensure_validity(a);
  if (r != RILL_OK) return r;
  if (rill__bit_get(a->validity, i)) {
    rill__bit_clear(a->validity, i);
    a->null_count++;
  }
  /* a null cell's value bytes are zero (buffers from pools hold earlier rows' bytes) */
  int64_t cell = rill_type_cell_bytes(&a->type);
  if (cell > 0 && a->data && rill__device_is_host(a->device) && !(a->priv->flags & RILL__ARRAY_EXTERNAL))
    memset((uint8_t*)a->data + i * cell, 0, (size_t)cell);
  return RILL_OK;
}

int rill_array_is_valid(const rill_array_t* a, int64_t i) {
  if (!a || i < 0 || i >= a->length) return 0;
  return !a->validity || rill__bit_get(a->validity, i);
}

const void* rill_array_cell(const rill_array_t* a, int64_t i, int64_t* nbytes) {
  if (!a || i < 0 || i >= a->length) {
    if (nbytes) *nbytes = 0;
    return NULL;
  }
  if (a->offsets) {
    if (nbytes) *nbytes = a->offsets[i + 1] - a->offsets[i];
    return a->data ? (const uint8_t*)a->data + a->offsets[i] : NULL;
  }
  int64_t cell = rill_type_cell_bytes(&a->type);
  if (nbytes) *nbytes = cell;
  return (const uint8_t*)a->data + i * cell;
}

int rill_array_cell_shape(const rill_array_t* a, int64_t i, int64_t* shape) {
  if (!a || !shape || a->type.ndim < 0 || a->type.ndim > RILL_MAX_NDIM) return 0;
  for (int d = 0; d < a->type.ndim; d++)
    shape[d] = (a->shapes && i >= 0 && i < a->length) ? a->shapes[i * a->type.ndim + d] : a->type.shape[d];
  return a->type.ndim;
}

int rill_array_sync(const rill_array_t* a, rill_error_t* err) {
  if (!a) return rill__fail(err, RILL_EINVAL, "rill_array_sync: NULL array");
  if (!a->event) return RILL_OK;
  return rill__event_wait(a->event, NULL, err);
}

int rill_array_stream_wait(const rill_array_t* a, void* cuda_stream, rill_error_t* err) {
  if (!a) return rill__fail(err, RILL_EINVAL, "rill_array_stream_wait: NULL array");
  if (a->event == NULL) return RILL_OK;
  return rill__event_wait(a->event, cuda_stream != NULL ? cuda_stream : RILL__CUDA_STREAM_LEGACY, err);
}

int rill__array_fence(rill_array_t* a, int device, void* stream, rill_error_t* err) {
  if (!a || a->device.type == 0 || a->device.type == RILL_DEVICE_CPU) return RILL_OK;
  int r = a->event ? RILL_OK : rill__cuda_event_new(device, &a->event, err);
  return r == RILL_OK ? rill__cuda_event_record(a->event, stream, err) : r;
}

/* ---------------------------------------------------------------- addon helpers */

int rill__array_var_commit(rill_array_t* a, int64_t n) {
  if (!a || !a->offsets || rill_type_is_fixed(&a->type) || n < 0 || n > a->length) return RILL_EINVAL;
  a->priv->var_cells = n;
  a->data_size = a->offsets[n];
  return RILL_OK;
}

void rill__cell_view(const rill_array_t* a, int64_t i, rill__cell_t* out) {
  out->data = rill_array_cell(a, i, &out->nbytes);
  out->ndim = a ? rill_array_cell_shape(a, i, out->shape) : 0;
  out->valid = rill_array_is_valid(a, i);
}
