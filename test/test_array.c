/* Arrays, types, errors, allocation and random numbers. */
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common.h"
#include "internal.h"

Test(types, sizes_names_and_format) {
  cr_assert_eq(rill_dtype_size(RILL_BOOL), 1);
  cr_assert_eq(rill_dtype_size(RILL_FLOAT16), 2);
  cr_assert_eq(rill_dtype_size(RILL_TIMESTAMP_US), 8);
  cr_assert_eq(rill_dtype_size(RILL_STRING), 0);
  cr_assert_str_eq(rill_dtype_name(RILL_UINT16), "uint16");
  rill_type_t t = rill_type_tensor(RILL_FLOAT32, 3, (int64_t[]){3, 224, 224});
  char buf[64];
  cr_assert_str_eq(rill_type_format(&t, buf, sizeof buf), "float32[3,224,224]");
  cr_assert_eq(rill_type_cell_bytes(&t), 4 * 3 * 224 * 224);
  rill_type_t v = rill_type_tensor(RILL_UINT8, 3, (int64_t[]){-1, -1, 3});
  cr_assert(!rill_type_is_fixed(&v));
  cr_assert_eq(rill_type_cell_bytes(&v), -1);
  cr_assert(!rill_type_equal(&t, &v));
  rill_type_t s = rill_type_scalar(RILL_STRING);
  cr_assert(!rill_type_is_fixed(&s));
}

Test(errors, strerror_and_set) {
  cr_assert_str_eq(rill_strerror(RILL_ENODEV), "no CUDA device");
  cr_assert_str_eq(rill_strerror(12345), "unknown status");
  rill_error_t err;
  rill_error_clear(&err);
  cr_assert_eq(err.row, -1);
  err.row = 7;
  cr_assert_eq(rill_error_set(&err, RILL_EFORMAT, "bad %s at %d", "cell", 3), RILL_EFORMAT);
  cr_assert_eq(err.code, RILL_EFORMAT);
  cr_assert_eq(err.row, 7, "rill_error_set keeps the row");
  cr_assert_str_eq(err.message, "bad cell at 3");
  cr_assert_eq(rill_error_set(NULL, RILL_EIO, "x"), RILL_EIO);
}

Test(version, matches_header) {
  cr_assert_str_eq(rill_version(), RILL_VERSION_STRING);
  cr_assert_eq(rill_has_feature(RILL_FEATURE_THREADS), 1);
}

/* The layout of every option struct that may grow, on LP64: its size, and where its
 * reserved words begin. A field added later takes reserved words (the size stays); a change
 * here is a change of the ABI (a new minor version before 1.0). The last word stays free for
 * a pointer to a struct of further options ("Option structs" in rill.h). */
#define OPTS_LAYOUT(T, size, at)                                                            \
  do {                                                                                      \
    cr_expect_eq(sizeof(T), (size_t)(size), #T ": %zu bytes", sizeof(T));                   \
    cr_expect_eq(offsetof(T, reserved), (size_t)(at), #T ": reserved at %zu", offsetof(T, reserved)); \
    cr_expect_eq(offsetof(T, reserved) + sizeof(((T*)0)->reserved), sizeof(T), #T ": reserved words end it"); \
    cr_expect_geq(sizeof(((T*)0)->reserved), sizeof(int64_t), #T ": a word kept for further options"); \
  } while (0)

Test(version, option_structs_end_with_reserved_words) {
  cr_assert_eq(sizeof(void*), 8, "the sizes below are LP64's");
  OPTS_LAYOUT(rill_stage_opts_t, 64, 32);
  OPTS_LAYOUT(rill_batch_opts_t, 48, 16);
  OPTS_LAYOUT(rill_iter_opts_t, 80, 64);
  OPTS_LAYOUT(rill_csv_opts_t, 112, 104);
  OPTS_LAYOUT(rill_sqlite_opts_t, 80, 56);
  OPTS_LAYOUT(rill_files_opts_t, 56, 24);
  OPTS_LAYOUT(rill_decode_opts_t, 72, 40);
  OPTS_LAYOUT(rill_rrc_opts_t, 104, 72);
  OPTS_LAYOUT(rill_resize_opts_t, 64, 32);
  OPTS_LAYOUT(rill_jitter_opts_t, 56, 24);
  OPTS_LAYOUT(rill_normalize_opts_t, 112, 80);
  OPTS_LAYOUT(rill_to_device_opts_t, 40, 8);
}

Test(rng, deterministic_and_uniform) {
  rill_rng_t a = rill_rng_seeded(42, 1, 100, 3), b = rill_rng_seeded(42, 1, 100, 3);
  rill_rng_t c = rill_rng_seeded(42, 1, 101, 3), d = rill_rng_seeded(42, 2, 100, 3);
  uint64_t xa = rill_rng_u64(&a);
  cr_assert_eq(xa, rill_rng_u64(&b));
  cr_assert_neq(xa, rill_rng_u64(&c));
  cr_assert_neq(xa, rill_rng_u64(&d));
  double sum = 0;
  for (int i = 0; i < 100000; i++) {
    double u = rill_rng_uniform(&a);
    cr_assert(u >= 0 && u < 1);
    sum += u;
  }
  cr_assert(sum / 100000 > 0.49 && sum / 100000 < 0.51, "mean %f", sum / 100000);
  double r = rill_rng_range(&a, 5, 6);
  cr_assert(r >= 5 && r < 6);
}

Test(array, new_fixed_is_zeroed_and_aligned) {
  rill_error_t err;
  rill_array_t* a;
  RT_OK(rill_array_new(rill_type_tensor(RILL_INT32, 2, (int64_t[]){2, 3}), 5, &a, &err), err);
  cr_assert_eq(a->length, 5);
  cr_assert_eq(a->data_size, 5 * 6 * 4);
  cr_assert_eq((uintptr_t)a->data % 64, 0);
  for (int i = 0; i < 30; i++) cr_assert_eq(((int32_t*)a->data)[i], 0);
  cr_assert_null(a->validity);
  cr_assert_eq(rill_array_refcount(a), 1);
  int64_t nb;
  const int32_t* cell = rill_array_cell(a, 2, &nb);
  cr_assert_eq(nb, 24);
  cr_assert_eq(cell, (int32_t*)a->data + 12);
  int64_t shape[RILL_MAX_NDIM];
  cr_assert_eq(rill_array_cell_shape(a, 0, shape), 2);
  cr_assert_eq(shape[1], 3);
  rill_array_release(a);
}

Test(array, invalid_arguments) {
  rill_error_t err;
  rill_array_t* a;
  RT_FAILS(rill_array_new(rill_type_scalar(RILL_INT8), -1, &a, &err), RILL_EINVAL, "negative length", err);
  RT_FAILS(rill_array_new(rill_type_scalar((rill_dtype_t)99), 1, &a, &err), RILL_EINVAL, "invalid type", err);
  rill_type_t bad = rill_type_tensor(RILL_STRING, 1, (int64_t[]){2});
  RT_FAILS(rill_array_new(bad, 1, &a, &err), RILL_EINVAL, "invalid type", err);
  RT_FAILS(rill_array_wrap(rill_type_scalar(RILL_STRING), 2, "ab", 2, NULL, 0, NULL, NULL, NULL, NULL, &a, &err),
           RILL_EINVAL, "need offsets", err);
  int64_t off[] = {0, 2, 1};
  RT_FAILS(rill_array_wrap(rill_type_scalar(RILL_STRING), 2, "ab", 2, NULL, 0, off, NULL, NULL, NULL, &a, &err),
           RILL_EINVAL, "offsets decrease", err);
}

Test(array, strings_set_var_and_nulls) {
  rill_error_t err;
  rill_array_t* a;
  RT_OK(rill_array_new(rill_type_scalar(RILL_STRING), 4, &a, &err), err);
  const char* words[] = {"alpha", "", NULL, "a much longer string that forces the buffer to grow past sixty-four bytes"};
  for (int i = 0; i < 4; i++) {
    cr_assert_eq(rill_array_set_var(a, i, words[i], words[i] ? (int64_t)strlen(words[i]) : 0, NULL), RILL_OK);
    if (!words[i]) cr_assert_eq(rill_array_set_null(a, i), RILL_OK);
  }
  cr_assert_eq(rill_array_set_var(a, 1, "x", 1, NULL), RILL_EINVAL, "cells are appended in order");
  cr_assert_eq(a->null_count, 1);
  cr_assert(rill_array_is_valid(a, 0) && !rill_array_is_valid(a, 2));
  int64_t n;
  const char* s = rill_array_cell(a, 3, &n);
  cr_assert_eq(n, (int64_t)strlen(words[3]));
  cr_assert(!memcmp(s, words[3], (size_t)n));
  cr_assert_eq(a->offsets[0], 0);
  cr_assert_eq(a->offsets[4], a->data_size);
  /* a second set_null of the same cell does not count twice */
  cr_assert_eq(rill_array_set_null(a, 2), RILL_OK);
  cr_assert_eq(a->null_count, 1);
  cr_assert_eq(rill_array_set_null(a, 9), RILL_EINVAL);
  rill_array_release(a);
}

Test(array, variable_shape_cells) {
  rill_error_t err;
  rill_array_t* a;
  RT_OK(rill_array_new(rill_type_tensor(RILL_UINT8, 3, (int64_t[]){-1, -1, 3}), 2, &a, &err), err);
  uint8_t px[2 * 3 * 3];
  for (int i = 0; i < 18; i++) px[i] = (uint8_t)i;
  cr_assert_eq(rill_array_set_var(a, 0, px, 18, (int64_t[]){2, 3, 3}), RILL_OK);
  cr_assert_eq(rill_array_set_var(a, 1, px, 3, (int64_t[]){1, 1, 3}), RILL_OK);
  int64_t shape[RILL_MAX_NDIM];
  rill_array_cell_shape(a, 0, shape);
  cr_assert(shape[0] == 2 && shape[1] == 3 && shape[2] == 3);
  rill_array_cell_shape(a, 1, shape);
  cr_assert(shape[0] == 1 && shape[1] == 1);
  cr_assert_eq(a->offsets[2], 21);
  cr_assert_eq(rill_array_set_var(a, 2, px, 1, (int64_t[]){1, 1, 1}), RILL_EINVAL, "past the end");
  rill_array_release(a);
}

static int released;
static void on_release(void* ctx) { released += *(int*)ctx; }

Test(array, wrap_borrows_and_releases_once) {
  rill_error_t err;
  int64_t data[5] = {1, 2, 3, 4, 5};
  uint8_t validity = 0x1B; /* cells 2 null */
  int one = 1;
  released = 0;
  rill_array_t* a;
  RT_OK(rill_array_wrap(rill_type_scalar(RILL_INT64), 5, data, 0, &validity, -1, NULL, NULL, on_release, &one, &a, &err), err);
  cr_assert_eq(a->data, data, "no copy");
  cr_assert_eq(a->null_count, 1);
  cr_assert_eq(a->data_size, 40);
  rill_array_retain(a);
  rill_array_release(a);
  cr_assert_eq(released, 0);
  rill_array_release(a);
  cr_assert_eq(released, 1);
}

Test(array, slice_shares_and_keeps_parent) {
  rill_error_t err;
  rill_array_t *a, *s, *t;
  RT_OK(rill_array_new(rill_type_scalar(RILL_INT32), 20, &a, &err), err);
  for (int i = 0; i < 20; i++) ((int32_t*)a->data)[i] = i;
  rill_array_set_null(a, 3);
  rill_array_set_null(a, 10);
  RT_OK(rill_array_slice(a, 3, 9, &s, &err), err);
  cr_assert_eq(s->data, (int32_t*)a->data + 3);
  cr_assert_eq(s->null_count, 2);
  cr_assert(!rill_array_is_valid(s, 0) && !rill_array_is_valid(s, 7) && rill_array_is_valid(s, 1));
  RT_OK(rill_array_slice(a, 8, 4, &t, &err), err);
  cr_assert_eq(t->null_count, 1);
  cr_assert_eq(t->validity, a->validity + 1, "byte-aligned slices share validity");
  rill_array_release(a); /* the slices keep it alive */
  cr_assert_eq(((int32_t*)s->data)[8], 11);
  rill_array_t* u = (rill_array_t*)&u;
  RT_FAILS(rill_array_slice(s, 5, 5, &u, &err), RILL_EINVAL, "outside an array of 9", err);
  cr_assert_null(u, "out is cleared on failure");
  rill_array_release(s);
  rill_array_release(t);
}

Test(array, slice_and_copy_strings) {
  rill_error_t err;
  rill_array_t *a, *s, *c;
  RT_OK(rill_array_new(rill_type_scalar(RILL_BINARY), 3, &a, &err), err);
  rill_array_set_var(a, 0, "xy", 2, NULL);
  rill_array_set_var(a, 1, "abc", 3, NULL);
  rill_array_set_var(a, 2, "", 0, NULL);
  rill_array_set_null(a, 2);
  RT_OK(rill_array_slice(a, 1, 2, &s, &err), err);
  cr_assert_eq(s->offsets[0], 0);
  cr_assert_eq(s->offsets[1], 3);
  cr_assert(!memcmp(s->data, "abc", 3));
  cr_assert_eq(s->null_count, 1);
  RT_OK(rill_array_copy(s, &c, &err), err);
  cr_assert_neq(c->data, s->data);
  cr_assert_eq(c->data_size, 3);
  cr_assert(!memcmp(c->data, "abc", 3));
  cr_assert(!rill_array_is_valid(c, 1));
  rill_array_release(a);
  rill_array_release(s);
  rill_array_release(c);
}

Test(pool, reuses_buffers_after_release) {
  rill_pool_t* pool = rill__pool_new((rill_device_t){RILL_DEVICE_CPU, 0});
  cr_assert_not_null(pool);
  rill_array_t *a, *b;
  cr_assert_eq(rill__pool_acquire(pool, &a), RILL_OK);
  cr_assert_eq(rill__array_prepare(a, rill_type_scalar(RILL_FLOAT32), 1000, false), RILL_OK);
  void* data = a->data;
  rill_array_release(a);
  cr_assert_eq(rill__pool_acquire(pool, &b), RILL_OK);
  cr_assert_eq(b, a, "the returned array is lent again");
  cr_assert_eq(rill__array_prepare(b, rill_type_scalar(RILL_FLOAT32), 500, false), RILL_OK);
  cr_assert_eq(b->data, data, "capacity is reused");
  int64_t allocs, reuses;
  rill__pool_counts(pool, &allocs, &reuses);
  cr_assert_eq(allocs, 1);
  cr_assert_eq(reuses, 1);
  /* the pool may be freed while an array is still out: the array outlives it */
  rill__pool_free(pool);
  ((float*)b->data)[499] = 1.5f;
  rill_array_release(b);
}

/* A standalone array emptied for its holder's next fill keeps its buffers; shared, sliced,
 * pooled or large ones are refused and left as they are. */
Test(pool, recycled_standalone_array_keeps_its_buffers) {
  rill_array_t* a;
  cr_assert_eq(rill__array_create(NULL, (rill_device_t){RILL_DEVICE_CPU, 0}, &a), RILL_OK);
  cr_assert_eq(rill__array_prepare(a, rill_type_scalar(RILL_INT64), 100, false), RILL_OK);
  cr_assert_eq(rill_array_set_null(a, 3), RILL_OK);
  void* data = a->data;
  int64_t cap = rill__array_capacity(a);
  cr_assert_geq(cap, 100 * 8 + 13, "data and validity: %lld bytes", (long long)cap);
  cr_assert_eq(rill__array_recycle(a, cap - 1), 0, "over `most`: refused");
  cr_assert_eq(a->length, 100);
  rill_array_t* extra = rill_array_retain(a);
  cr_assert_eq(rill__array_recycle(a, cap), 0, "shared: refused");
  rill_array_release(extra);
  rill_array_t* s = NULL;
  rill_error_t err = {0};
  RT_OK(rill_array_slice(a, 10, 5, &s, &err), err);
  cr_assert_eq(rill__array_recycle(s, 1 << 20), 0, "a slice: refused");
  rill_array_release(s);
  cr_assert_eq(rill__array_recycle(a, cap), 1);
  cr_assert(a->length == 0 && a->null_count == 0 && a->validity == NULL);
  cr_assert_eq(rill__array_capacity(a), cap, "buffers kept");
  cr_assert_eq(rill__array_prepare(a, rill_type_scalar(RILL_INT64), 50, false), RILL_OK);
  cr_assert_eq(a->data, data, "capacity reused");
  cr_assert(rill_array_is_valid(a, 3), "no null left from the last fill");
  rill_array_release(a);
  rill_pool_t* pool = rill__pool_new((rill_device_t){RILL_DEVICE_CPU, 0});
  cr_assert_eq(rill__pool_acquire(pool, &a), RILL_OK);
  cr_assert_eq(rill__array_recycle(a, 1 << 20), 0, "a pool's: refused");
  rill_array_release(a);
  rill__pool_free(pool);
}

/* Pages of [p, p + n) that are not resident. */
static size_t pages_absent(const void* p, size_t n) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uintptr_t lo = ((uintptr_t)p + page - 1) & ~(uintptr_t)(page - 1), hi = ((uintptr_t)p + n) & ~(uintptr_t)(page - 1);
  size_t np = (hi - lo) / page, absent = 0;
  unsigned char* vec = malloc(np ? np : 1);
  cr_assert_eq(mincore((void*)lo, hi - lo, vec), 0);
  for (size_t i = 0; i < np; i++) absent += !(vec[i] & 1);
  free(vec);
  return absent;
}

/* A fresh buffer of fixed cells (4 MB and more) is mapped in one call, not by a page fault
 * per page when it is written: every page is resident right after prepare. */
Test(pool, large_fresh_fixed_buffer_is_mapped_at_once) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  void* probe = mmap(NULL, 4 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  cr_assert_neq(probe, MAP_FAILED);
  int supported = madvise(probe, 4 * page, 23 /* MADV_POPULATE_WRITE */) == 0;
  munmap(probe, 4 * page);
  if (!supported) cr_skip_test("this kernel has no MADV_POPULATE_WRITE (Linux 5.14)");
  rill_pool_t* pool = rill__pool_new((rill_device_t){RILL_DEVICE_CPU, 0});
  rill_array_t* a;
  cr_assert_eq(rill__pool_acquire(pool, &a), RILL_OK);
  cr_assert_eq(rill__array_prepare(a, rill_type_scalar(RILL_FLOAT32), 4 << 20, false), RILL_OK);
  cr_assert_eq(a->data_size, (int64_t)16 << 20);
  size_t absent = pages_absent(a->data, (size_t)a->data_size);
  cr_assert_eq(absent, 0, "%zu of the 16 MB buffer's pages are not mapped yet", absent);
  ((float*)a->data)[(4 << 20) - 1] = 2.5f;
  rill_array_release(a);
  rill__pool_free(pool);
}

/* The array released last waits in the pool's slot, the others in its list: a request takes
 * the slot's array when it fits closely, else the best fit among all; freeing the pool frees
 * both, and an array released after that is freed (the sanitizers check for leaks). */
Test(pool, fit_takes_the_last_released_array_or_the_best_fit) {
  rill_pool_t* pool = rill__pool_new((rill_device_t){RILL_DEVICE_CPU, 0});
  cr_assert_not_null(pool);
  rill_array_t *small, *big, *got, *other, *late;
  cr_assert_eq(rill__pool_acquire(pool, &small), RILL_OK);
  cr_assert_eq(rill__pool_acquire(pool, &big), RILL_OK);
  cr_assert_eq(rill__array_prepare(small, rill_type_scalar(RILL_INT64), 100, false), RILL_OK);
  cr_assert_eq(rill__array_prepare(big, rill_type_scalar(RILL_INT64), 10000, false), RILL_OK);
  rill_array_release(small); /* into the slot */
  rill_array_release(big);   /* the slot is taken: into the list */
  cr_assert_eq(rill__pool_acquire_fit(pool, 80000, &got), RILL_OK);
  cr_assert_eq(got, big, "the best fit in the list, not the small array of the slot");
  cr_assert_eq(rill_array_refcount(got), 1);
  cr_assert_eq(rill__pool_acquire_fit(pool, 800, &other), RILL_OK);
  cr_assert_eq(other, small, "the small array, moved from the slot to the list, fits");
  rill_array_release(got);   /* slot */
  cr_assert_eq(rill__pool_acquire_fit(pool, 80000, &got), RILL_OK);
  cr_assert_eq(got, big, "a close fit in the slot");
  cr_assert_eq(rill__pool_acquire(pool, &late), RILL_OK); /* nothing idle: a new array */
  cr_assert(late != big && late != small);
  rill_array_release(got);   /* slot */
  rill_array_release(other); /* list */
  rill__pool_free(pool);     /* frees both */
  rill_array_release(late);  /* after the pool: freed, not pooled */
}

static _Atomic int fail_after = -1;
static void* failing_alloc(size_t size, size_t align, void* ctx) {
  (void)ctx;
  if (atomic_load(&fail_after) == 0) return NULL;
  if (atomic_load(&fail_after) > 0) atomic_fetch_sub(&fail_after, 1);
  return rt_sys_alloc(size, align);
}

Test(alloc, failures_give_enomem_and_no_leak) {
  rill_set_allocator(&(rill_allocator_t){failing_alloc, rt_sys_free, NULL});
  rill_error_t err;
  int ok = 0;
  for (int n = 0; n < 10 && !ok; n++) {
    atomic_store(&fail_after, n);
    rill_array_t *a = NULL, *s = NULL;
    int r = rill_array_new(rill_type_scalar(RILL_STRING), 3, &a, &err);
    if (r == RILL_OK) r = rill_array_set_var(a, 0, "hello", 5, NULL);
    if (r == RILL_OK) r = rill_array_set_null(a, 1);
    if (r == RILL_OK) r = rill_array_slice(a, 1, 1, &s, &err);
    if (r == RILL_OK) ok = 1;
    else cr_assert_eq(r, RILL_ENOMEM, "step %d: %d", n, r);
    rill_array_release(s);
    rill_array_release(a);
  }
  atomic_store(&fail_after, -1);
  rill_set_allocator(NULL);
  cr_assert(ok, "succeeds once enough allocations are allowed");
}

/* rill__grow: the block kept while it holds `need`, else doubled (at least `first`, at least
 * `need`) with the used elements copied; failures and sizes that overflow leave it as it was. */
Test(alloc, grow_keeps_used_elements) {
  int64_t cap = 0;
  int32_t* v = rill__grow(NULL, &cap, 0, 1, sizeof *v, 16);
  cr_assert(v && cap == 16, "first block: %lld", (long long)cap);
  for (int i = 0; i < 16; i++) v[i] = i * 7;
  cr_assert_eq(rill__grow(v, &cap, 16, 16, sizeof *v, 16), v, "holds 16: kept");
  int32_t* w = rill__grow(v, &cap, 16, 17, sizeof *v, 16);
  cr_assert(w && cap == 32, "doubled: %lld", (long long)cap);
  for (int i = 0; i < 16; i++) cr_assert_eq(w[i], i * 7, "element %d", i);
  w = rill__grow(w, &cap, 10, 1000, sizeof *w, 16);
  cr_assert(w && cap == 1000, "at least need: %lld", (long long)cap);
  for (int i = 0; i < 10; i++) cr_assert_eq(w[i], i * 7);
  int64_t big = INT64_MAX / 2;
  cr_assert_null(rill__grow(w, &cap, 10, big, 64, 16), "size overflow");
  cr_assert_eq(cap, 1000);
  rill_set_allocator(&(rill_allocator_t){failing_alloc, rt_sys_free, NULL});
  atomic_store(&fail_after, 0);
  cr_assert_null(rill__grow(w, &cap, 10, 2000, sizeof *w, 16), "out of memory");
  atomic_store(&fail_after, -1);
  rill_set_allocator(NULL);
  cr_assert_eq(cap, 1000, "unchanged on failure");
  for (int i = 0; i < 10; i++) cr_assert_eq(w[i], i * 7);
  rill__free(w);
}

Test(pool, best_fit_reuse_by_size) {
  rill_pool_t* pool = rill__pool_new((rill_device_t){RILL_DEVICE_CPU, 0});
  cr_assert_not_null(pool);
  rill_array_t *small, *mid, *big, *got;
  cr_assert_eq(rill__pool_acquire(pool, &small), RILL_OK);
  cr_assert_eq(rill__pool_acquire(pool, &mid), RILL_OK);
  cr_assert_eq(rill__pool_acquire(pool, &big), RILL_OK);
  cr_assert_eq(rill__array_prepare(small, rill_type_scalar(RILL_FLOAT32), 10, false), RILL_OK);
  cr_assert_eq(rill__array_prepare(mid, rill_type_scalar(RILL_FLOAT32), 1000, false), RILL_OK);
  cr_assert_eq(rill__array_prepare(big, rill_type_scalar(RILL_FLOAT32), 100000, false), RILL_OK);
  rill_array_release(big);
  rill_array_release(small);
  rill_array_release(mid); /* returned last: plain acquire would lend this one */
  cr_assert_eq(rill__pool_acquire_fit(pool, 390000, &got), RILL_OK);
  cr_assert_eq(got, big, "the array that holds the request is chosen, not the last returned");
  cr_assert_eq(rill__array_prepare(got, rill_type_scalar(RILL_FLOAT32), 97500, false), RILL_OK);
  int64_t allocs;
  rill__pool_counts(pool, &allocs, NULL);
  cr_assert_eq(allocs, 3, "no new buffer for a request that fits");
  rill_array_release(got);
  cr_assert_eq(rill__pool_acquire_fit(pool, 30, &got), RILL_OK);
  cr_assert_eq(got, small, "the smallest array that holds 30 bytes");
  rill_array_t* other;
  cr_assert_eq(rill__pool_acquire_fit(pool, 100000000, &other), RILL_OK);
  cr_assert_eq(other, big, "nothing holds the request: the largest is lent");
  rill_array_release(got);
  rill_array_release(other);
  rill__pool_free(pool);
}
