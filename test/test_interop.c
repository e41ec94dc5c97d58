/* Interop: Arrow C Data / Device / Stream export, DLPack, the native interchange view and
 * Arrow import. Independent consumers (pyarrow, nanoarrow, numpy, polars, pandas) validate the
 * same exports in test/python. */
#include <errno.h>
#include <stdint.h>

#include "common.h"
#include "rill_interop.h"

/* ---------------------------------------------------------------- helpers */

static rill_array_t* make_i32(int64_t n, int with_nulls) {
  rill_error_t err = {0};
  rill_array_t* a = NULL;
  RT_OK(rill_array_new(rill_type_scalar(RILL_INT32), n, &a, &err), err);
  for (int64_t i = 0; i < n; i++) ((int32_t*)a->data)[i] = (int32_t)(i * 10 - 3);
  if (with_nulls)
    for (int64_t i = 1; i < n; i += 3) cr_assert_eq(rill_array_set_null(a, i), RILL_OK);
  return a;
}

static rill_array_t* make_strings(const char* const* s, int n, rill_dtype_t dtype) {
  rill_error_t err = {0};
  rill_array_t* a = NULL;
  RT_OK(rill_array_new(rill_type_scalar(dtype), n, &a, &err), err);
  for (int i = 0; i < n; i++) {
    if (s[i] == NULL) {
      cr_assert_eq(rill_array_set_var(a, i, "", 0, NULL), RILL_OK);
      cr_assert_eq(rill_array_set_null(a, i), RILL_OK);
    } else {
      cr_assert_eq(rill_array_set_var(a, i, s[i], (int64_t)strlen(s[i]), NULL), RILL_OK);
    }
  }
  return a;
}

/* Value of `key` in binary C Data Interface metadata (into buf), or NULL. */
static const char* md_get(const char* md, const char* key, char* buf, size_t size) {
  if (md == NULL) return NULL;
  int32_t n;
  memcpy(&n, md, 4);
  const char* p = md + 4;
  for (int32_t i = 0; i < n; i++) {
    int32_t kl, vl;
    memcpy(&kl, p, 4);
    const char* k = p + 4;
    p = k + kl;
    memcpy(&vl, p, 4);
    const char* v = p + 4;
    p = v + vl;
    if ((size_t)kl == strlen(key) && memcmp(k, key, (size_t)kl) == 0) {
      size_t m = (size_t)vl < size - 1 ? (size_t)vl : size - 1;
      memcpy(buf, v, m);
      buf[m] = '\0';
      return buf;
    }
  }
  return NULL;
}

static int bitv(const void* bits, int64_t i) { return (((const uint8_t*)bits)[i >> 3] >> (i & 7)) & 1; }

/* ---------------------------------------------------------------- Arrow arrays */

Test(arrow, int32_zero_copy_with_nulls) {
  rill_error_t err = {0};
  rill_array_t* a = make_i32(10, 1);
  struct ArrowSchema s;
  struct ArrowArray arr;
  RT_OK(rill_array_export_arrow(a, &s, &arr, &err), err);
  cr_assert_str_eq(s.format, "i");
  cr_assert(s.flags & ARROW_FLAG_NULLABLE);
  cr_assert_eq(s.n_children, 0);
  cr_assert_eq(arr.length, 10);
  cr_assert_eq(arr.null_count, 3);
  cr_assert_eq(arr.offset, 0);
  cr_assert_eq(arr.n_buffers, 2);
  cr_assert_eq(arr.buffers[1], a->data, "data must be zero-copy");
  cr_assert_eq(arr.buffers[0], a->validity);
  cr_assert_eq(rill_array_refcount(a), 2, "the export holds one reference");
  for (int i = 0; i < 10; i++) cr_assert_eq(bitv(arr.buffers[0], i), i % 3 != 1);
  arr.release(&arr);
  cr_assert_null(arr.release, "release sets itself to NULL");
  s.release(&s);
  cr_assert_null(s.release);
  cr_assert_eq(rill_array_refcount(a), 1);
  rill_array_release(a);
}

Test(arrow, export_outlives_array) {
  rill_error_t err = {0};
  rill_array_t* a = make_i32(1000, 0);
  struct ArrowSchema s;
  struct ArrowArray arr;
  RT_OK(rill_array_export_arrow(a, &s, &arr, &err), err);
  cr_assert_not(s.flags & ARROW_FLAG_NULLABLE);
  cr_assert_eq(arr.null_count, 0);
  cr_assert_null(arr.buffers[0]);
  rill_array_release(a); /* the consumer keeps reading */
  const int32_t* v = arr.buffers[1];
  int64_t sum = 0;
  for (int i = 0; i < 1000; i++) sum += v[i];
  cr_assert_eq(sum, 10 * (999 * 1000 / 2) - 3 * 1000);
  arr.release(&arr);
  s.release(&s);
}

Test(arrow, moved_struct_released_once) {
  rill_error_t err = {0};
  rill_array_t* a = make_i32(4, 0);
  struct ArrowSchema s;
  struct ArrowArray arr;
  RT_OK(rill_array_export_arrow(a, &s, &arr, &err), err);
  struct ArrowArray moved = arr; /* move: the source is marked released */
  arr.release = NULL;
  struct ArrowSchema smoved = s;
  s.release = NULL;
  rill_array_release(a);
  cr_assert_eq(((const int32_t*)moved.buffers[1])[3], 27);
  moved.release(&moved);
  smoved.release(&smoved);
  cr_assert_null(moved.release);
}

Test(arrow, every_primitive_format) {
  static const struct { rill_dtype_t d; const char* f; } cases[] = {
    {RILL_INT8, "c"}, {RILL_INT16, "s"}, {RILL_INT32, "i"}, {RILL_INT64, "l"},
    {RILL_UINT8, "C"}, {RILL_UINT16, "S"}, {RILL_UINT32, "I"}, {RILL_UINT64, "L"},
    {RILL_FLOAT16, "e"}, {RILL_BFLOAT16, "S"}, {RILL_FLOAT32, "f"}, {RILL_FLOAT64, "g"},
    {RILL_TIMESTAMP_US, "tsu:UTC"}, {RILL_BOOL, "b"}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    rill_error_t err = {0};
    rill_array_t* a = NULL;
    RT_OK(rill_array_new(rill_type_scalar(cases[k].d), 5, &a, &err), err);
    struct ArrowSchema s;
    struct ArrowArray arr;
    RT_OK(rill_array_export_arrow(a, &s, &arr, &err), err);
    cr_assert_str_eq(s.format, cases[k].f, "dtype %s", rill_dtype_name(cases[k].d));
    cr_assert_eq(arr.length, 5);
    char buf[64];
    if (cases[k].d == RILL_BFLOAT16)
      cr_assert_str_eq(md_get(s.metadata, "rill.dtype", buf, sizeof buf), "bfloat16");
    else
      cr_assert_null(s.metadata);
    if (cases[k].d != RILL_BOOL) cr_assert_eq(arr.buffers[1], a->data);
    arr.release(&arr);
    s.release(&s);
    rill_array_release(a);
  }
}

Test(arrow, bool_is_bit_packed) {
  rill_error_t err = {0};
  rill_array_t* a = NULL;
  RT_OK(rill_array_new(rill_type_scalar(RILL_BOOL), 13, &a, &err), err);
  for (int i = 0; i < 13; i++) ((uint8_t*)a->data)[i] = (uint8_t)(i % 3 == 0);
  cr_assert_eq(rill_array_set_null(a, 12), RILL_OK);
  struct ArrowSchema s;
  struct ArrowArray arr;
  RT_OK(rill_array_export_arrow(a, &s, &arr, &err), err);
  cr_assert_str_eq(s.format, "b");
  cr_assert_neq(arr.buffers[1], a->data, "bools are packed into a new buffer");
  for (int i = 0; i < 12; i++) cr_assert_eq(bitv(arr.buffers[1], i), i % 3 == 0, "bit %d", i);
  cr_assert_eq(arr.null_count, 1);
  cr_assert_eq(bitv(arr.buffers[0], 12), 0);
  rill_array_release(a);
  arr.release(&arr);
  s.release(&s);
}

Test(arrow, strings_and_binary_zero_copy) {
  rill_error_t err = {0};
  const char* v[] = {"alpha", NULL, "", "δέλτα"};
  for (int k = 0; k < 2; k++) {
    rill_array_t* a = make_strings(v, 4, k ? RILL_BINARY : RILL_STRING);
    struct ArrowSchema s;
    struct ArrowArray arr;
    RT_OK(rill_array_export_arrow(a, &s, &arr, &err), err);
    cr_assert_str_eq(s.format, k ? "Z" : "U");
    cr_assert_eq(arr.n_buffers, 3);
    cr_assert_eq(arr.buffers[1], a->offsets);
    cr_assert_eq(arr.buffers[2], a->data);
    cr_assert_eq(arr.null_count, 1);
    const int64_t* off = arr.buffers[1];
    cr_assert_eq(off[4] - off[3], (int64_t)strlen("δέλτα"));
    cr_assert_eq(memcmp((const char*)arr.buffers[2] + off[0], "alpha", 5), 0);
    rill_array_release(a);
    s.release(&s);
    arr.release(&arr);
  }
}

Test(arrow, empty_arrays_have_valid_buffers) {
  rill_error_t err = {0};
  rill_dtype_t ds[] = {RILL_INT64, RILL_STRING, RILL_BOOL};
  for (int k = 0; k < 3; k++) {
    rill_array_t* a = NULL;
    RT_OK(rill_array_new(rill_type_scalar(ds[k]), 0, &a, &err), err);
    struct ArrowSchema s;
    struct ArrowArray arr;
    RT_OK(rill_array_export_arrow(a, &s, &arr, &err), err);
    cr_assert_eq(arr.length, 0);
    for (int64_t b = 1; b < arr.n_buffers; b++) cr_assert_not_null(arr.buffers[b]);
    if (ds[k] == RILL_STRING) cr_assert_eq(((const int64_t*)arr.buffers[1])[0], 0);
    arr.release(&arr);
    s.release(&s);
    rill_array_release(a);
  }
}

Test(arrow, fixed_shape_tensor) {
  rill_error_t err = {0};
  rill_array_t* a = NULL;
  RT_OK(rill_array_new(rill_type_tensor(RILL_FLOAT32, 2, (int64_t[]){2, 3}), 4, &a, &err), err);
  for (int i = 0; i < 24; i++) ((float*)a->data)[i] = (float)i * 0.5f;
  cr_assert_eq(rill_array_set_null(a, 2), RILL_OK);
  struct ArrowSchema s;
  struct ArrowArray arr;
  RT_OK(rill_array_export_arrow(a, &s, &arr, &err), err);
  cr_assert_str_eq(s.format, "+w:6");
  char buf[128];
  cr_assert_str_eq(md_get(s.metadata, "ARROW:extension:name", buf, sizeof buf),
                   "arrow.fixed_shape_tensor");
  cr_assert_str_eq(md_get(s.metadata, "ARROW:extension:metadata", buf, sizeof buf),
                   "{\"shape\":[2,3]}");
  cr_assert_eq(s.n_children, 1);
  cr_assert_str_eq(s.children[0]->format, "f");
  cr_assert_eq(arr.length, 4);
  cr_assert_eq(arr.null_count, 1);
  cr_assert_eq(arr.n_children, 1);
  cr_assert_eq(arr.children[0]->length, 24);
  cr_assert_eq(arr.children[0]->buffers[1], a->data);
  /* move the child out, release the parent at once, then the child: both valid */
  struct ArrowArray child = *arr.children[0];
  arr.children[0]->release = NULL;
  arr.release(&arr);
  rill_array_release(a);
  cr_assert_float_eq(((const float*)child.buffers[1])[23], 11.5f, 1e-6);
  child.release(&child);
  s.release(&s);
}

Test(arrow, variable_shape_tensor) {
  rill_error_t err = {0};
  rill_array_t* a = NULL;
  RT_OK(rill_array_new(rill_type_tensor(RILL_UINT8, 2, (int64_t[]){-1, 3}), 3, &a, &err), err);
  uint8_t px[12];
  for (int i = 0; i < 12; i++) px[i] = (uint8_t)i;
  RT_OK(rill_array_set_var(a, 0, px, 6, (int64_t[]){2, 3}), err);
  RT_OK(rill_array_set_var(a, 1, NULL, 0, (int64_t[]){0, 3}), err);
  RT_OK(rill_array_set_var(a, 2, px + 6, 6, (int64_t[]){2, 3}), err);
  RT_OK(rill_array_set_null(a, 1), err);
  struct ArrowSchema s;
  struct ArrowArray arr;
  RT_OK(rill_array_export_arrow(a, &s, &arr, &err), err);
  char buf[128];
  cr_assert_str_eq(s.format, "+s");
  cr_assert_str_eq(md_get(s.metadata, "ARROW:extension:name", buf, sizeof buf),
                   "arrow.variable_shape_tensor");
  cr_assert_str_eq(md_get(s.metadata, "ARROW:extension:metadata", buf, sizeof buf),
                   "{\"uniform_shape\":[null,3]}");
  cr_assert_str_eq(s.children[0]->name, "data");
  cr_assert_str_eq(s.children[0]->format, "+l");
  cr_assert_str_eq(s.children[0]->children[0]->format, "C");
  cr_assert_str_eq(s.children[1]->name, "shape");
  cr_assert_str_eq(s.children[1]->format, "+w:2");
  cr_assert_str_eq(s.children[1]->children[0]->format, "i");
  cr_assert_eq(arr.null_count, 1);
  const int32_t* off = arr.children[0]->buffers[1];
  cr_assert_eq(off[0], 0);
  cr_assert_eq(off[1], 6);
  cr_assert_eq(off[2], 6);
  cr_assert_eq(off[3], 12);
  const int32_t* shp = arr.children[1]->children[0]->buffers[1];
  cr_assert_eq(shp[0], 2);
  cr_assert_eq(shp[1], 3);
  cr_assert_eq(shp[4], 2);
  cr_assert_eq(arr.children[0]->children[0]->length, 12);
  rill_array_release(a);
  arr.release(&arr);
  s.release(&s);
}

Test(arrow, null_arguments) {
  rill_error_t err = {0};
  struct ArrowSchema s;
  struct ArrowArray arr;
  RT_FAILS(rill_array_export_arrow(NULL, &s, &arr, &err), RILL_EINVAL, "NULL argument", err);
  cr_assert_null(s.release);
  cr_assert_null(arr.release);
  rill_array_t* a = make_i32(2, 0);
  RT_FAILS(rill_array_export_arrow(a, NULL, &arr, &err), RILL_EINVAL, "NULL argument", err);
  rill_array_release(a);
}

Test(arrow, device_export_cpu) {
  rill_error_t err = {0};
  rill_array_t* a = make_i32(6, 1);
  struct ArrowDeviceArray d;
  struct ArrowSchema s;
  RT_OK(rill_array_export_arrow_device(a, &d, &s, &err), err);
  cr_assert_eq(d.device_type, ARROW_DEVICE_CPU);
  cr_assert_eq(d.device_id, -1);
  cr_assert_null(d.sync_event);
  cr_assert_eq(d.array.buffers[1], a->data);
  cr_assert_eq(d.reserved[0], 0);
  rill_array_release(a);
  d.array.release(&d.array);
  s.release(&s);
  RT_FAILS(rill_array_export_arrow_device(NULL, &d, &s, &err), RILL_EINVAL, "NULL", err);
}

/* Fails the allocation number `fail_at` (counting from 0), then succeeds. */
static int alloc_count, alloc_fail_at;
static void* failing_alloc(size_t size, size_t alignment, void* ctx) {
  (void)ctx;
  if (alloc_count++ == alloc_fail_at) return NULL;
  void* p = NULL;
  if (posix_memalign(&p, alignment < sizeof(void*) ? sizeof(void*) : alignment, size ? size : 1))
    return NULL;
  return p;
}
static void plain_free(void* p, void* ctx) {
  (void)ctx;
  free(p);
}

Test(arrow, allocation_failures_leave_nothing) {
  rill_error_t err = {0};
  rill_array_t* a = NULL;
  RT_OK(rill_array_new(rill_type_tensor(RILL_INT16, 2, (int64_t[]){-1, 2}), 2, &a, &err), err);
  int16_t v[4] = {1, 2, 3, 4};
  RT_OK(rill_array_set_var(a, 0, v, 8, (int64_t[]){2, 2}), err);
  RT_OK(rill_array_set_var(a, 1, v, 4, (int64_t[]){1, 2}), err);
  rill_allocator_t al = {failing_alloc, plain_free, NULL};
  int failures = 0;
  for (alloc_fail_at = 0; alloc_fail_at < 64; alloc_fail_at++) {
    alloc_count = 0;
    rill_set_allocator(&al);
    struct ArrowSchema s;
    struct ArrowArray arr;
    int rc = rill_array_export_arrow(a, &s, &arr, &err);
    rill_set_allocator(NULL);
    if (rc == RILL_OK) {
      arr.release(&arr);
      s.release(&s);
      break;
    }
    failures++;
    cr_assert_eq(rc, RILL_ENOMEM);
    cr_assert(strstr(err.message, "out of memory") != NULL, "%s", err.message);
    cr_assert_null(s.release);
    cr_assert_null(arr.release);
    cr_assert_eq(rill_array_refcount(a), 1, "a failed export holds no reference");
  }
  cr_assert_gt(failures, 5);
  rill_array_release(a);
}

/* ---------------------------------------------------------------- DLPack */

Test(dlpack, versioned_tensor) {
  rill_error_t err = {0};
  rill_array_t* a = NULL;
  RT_OK(rill_array_new(rill_type_tensor(RILL_FLOAT32, 2, (int64_t[]){3, 4}), 5, &a, &err), err);
  DLManagedTensorVersioned* t = NULL;
  RT_OK(rill_array_export_dlpack(a, &t, &err), err);
  cr_assert_eq(t->version.major, 1);
  cr_assert(t->flags & DLPACK_FLAG_BITMASK_READ_ONLY);
  cr_assert_eq(t->dl_tensor.ndim, 3);
  cr_assert_eq(t->dl_tensor.shape[0], 5);
  cr_assert_eq(t->dl_tensor.shape[1], 3);
  cr_assert_eq(t->dl_tensor.shape[2], 4);
  cr_assert_eq(t->dl_tensor.strides[0], 12);
  cr_assert_eq(t->dl_tensor.strides[1], 4);
  cr_assert_eq(t->dl_tensor.strides[2], 1);
  cr_assert_eq(t->dl_tensor.byte_offset, 0);
  cr_assert_eq(t->dl_tensor.dtype.code, kDLFloat);
  cr_assert_eq(t->dl_tensor.dtype.bits, 32);
  cr_assert_eq(t->dl_tensor.dtype.lanes, 1);
  cr_assert_eq(t->dl_tensor.device.device_type, kDLCPU);
  cr_assert_eq(t->dl_tensor.data, a->data);
  cr_assert_eq(rill_array_refcount(a), 2);
  rill_array_release(a);
  ((float*)t->dl_tensor.data)[59] = 1.0f; /* still allocated (ASan checks) */
  t->deleter(t);
}

Test(dlpack, legacy_and_dtypes) {
  rill_error_t err = {0};
  rill_array_t* a = NULL;
  RT_OK(rill_array_new(rill_type_scalar(RILL_BOOL), 7, &a, &err), err);
  DLManagedTensor* t = NULL;
  RT_OK(rill_array_export_dlpack_legacy(a, &t, &err), err);
  cr_assert_eq(t->dl_tensor.ndim, 1);
  cr_assert_eq(t->dl_tensor.shape[0], 7);
  cr_assert_eq(t->dl_tensor.strides[0], 1);
  cr_assert_eq(t->dl_tensor.dtype.code, kDLBool);
  cr_assert_eq(t->dl_tensor.dtype.bits, 8);
  t->deleter(t);
  cr_assert_eq(rill_array_refcount(a), 1);
  rill_array_release(a);
}

Test(dlpack, refuses_what_it_cannot_express) {
  rill_error_t err = {0};
  DLManagedTensorVersioned* t = (DLManagedTensorVersioned*)1;
  rill_array_t* a = make_i32(5, 1);
  RT_FAILS(rill_array_export_dlpack(a, &t, &err), RILL_EINVAL, "null cells", err);
  cr_assert_null(t);
  rill_array_release(a);
  const char* v[] = {"x"};
  a = make_strings(v, 1, RILL_STRING);
  RT_FAILS(rill_array_export_dlpack(a, &t, &err), RILL_EINVAL, "string", err);
  rill_array_release(a);
  RT_OK(rill_array_new(rill_type_tensor(RILL_UINT8, 1, (int64_t[]){-1}), 1, &a, &err), err);
  RT_FAILS(rill_array_export_dlpack(a, &t, &err), RILL_EINVAL, "variable shape", err);
  DLManagedTensor* l = NULL;
  RT_FAILS(rill_array_export_dlpack_legacy(a, &l, &err), RILL_EINVAL, "variable shape", err);
  rill_array_release(a);
  RT_FAILS(rill_array_export_dlpack(NULL, &t, &err), RILL_EINVAL, "NULL argument", err);
}

/* ---------------------------------------------------------------- interchange view */

Test(interchange, every_scalar_kind) {
  rill_array_t* a = make_i32(9, 1);
  rill_interchange_column_t c;
  cr_assert_eq(rill_array_interchange(a, &c), RILL_OK);
  cr_assert_eq(c.size, 9);
  cr_assert_eq(c.dtype.kind, RILL_KIND_INT);
  cr_assert_eq(c.dtype.bit_width, 32);
  cr_assert_str_eq(c.dtype.format, "i");
  cr_assert_eq(c.null_kind, RILL_NULL_USE_BITMASK);
  cr_assert_eq(c.null_value, 0);
  cr_assert_eq(c.null_count, 3);
  cr_assert_eq(c.data.ptr, a->data);
  cr_assert_eq(c.data.bufsize, 36);
  cr_assert_eq(c.validity.ptr, a->validity);
  cr_assert_eq(c.validity.bufsize, 2);
  cr_assert_eq(c.data.device.type, RILL_DEVICE_CPU);
  rill_array_release(a);

  const char* v[] = {"ab", "cde", NULL};
  a = make_strings(v, 3, RILL_STRING);
  cr_assert_eq(rill_array_interchange(a, &c), RILL_OK);
  cr_assert_eq(c.dtype.kind, RILL_KIND_STRING);
  cr_assert_eq(c.offsets.ptr, a->offsets);
  cr_assert_eq(c.offsets.bufsize, 32);
  cr_assert_str_eq(c.offsets.dtype.format, "l");
  cr_assert_eq(c.data.bufsize, 5);
  cr_assert_eq(c.null_count, 1);
  rill_array_release(a);

  rill_error_t err = {0};
  RT_OK(rill_array_new(rill_type_scalar(RILL_TIMESTAMP_US), 2, &a, &err), err);
  cr_assert_eq(rill_array_interchange(a, &c), RILL_OK);
  cr_assert_eq(c.dtype.kind, RILL_KIND_DATETIME);
  cr_assert_str_eq(c.dtype.format, "tsu:UTC");
  cr_assert_eq(c.null_kind, RILL_NULL_NON_NULLABLE);
  rill_array_release(a);

  RT_OK(rill_array_new(rill_type_scalar(RILL_BOOL), 2, &a, &err), err);
  cr_assert_eq(rill_array_interchange(a, &c), RILL_OK);
  cr_assert_eq(c.dtype.kind, RILL_KIND_BOOL);
  cr_assert_eq(c.dtype.bit_width, 8);
  cr_assert_eq(c.data.bufsize, 2);
  rill_array_release(a);
}

Test(interchange, unsupported) {
  rill_error_t err = {0};
  rill_array_t* a = NULL;
  rill_interchange_column_t c;
  RT_OK(rill_array_new(rill_type_tensor(RILL_FLOAT32, 1, (int64_t[]){3}), 2, &a, &err), err);
  cr_assert_eq(rill_array_interchange(a, &c), RILL_ENOTSUP);
  rill_array_release(a);
  RT_OK(rill_array_new(rill_type_scalar(RILL_BINARY), 2, &a, &err), err);
  cr_assert_eq(rill_array_interchange(a, &c), RILL_ENOTSUP);
  rill_array_release(a);
  cr_assert_eq(rill_array_interchange(NULL, &c), RILL_EINVAL);
}

/* ---------------------------------------------------------------- rows and streams */

/* A dataframe of `n` rows: "x" int32 (every 3rd null), "s" strings, "t" float32[2]. */
static rill_df_t* make_df(int64_t n) {
  rill_error_t err = {0};
  rill_array_t* x = make_i32(n, 1);
  rill_array_t* s = NULL;
  RT_OK(rill_array_new(rill_type_scalar(RILL_STRING), n, &s, &err), err);
  for (int64_t i = 0; i < n; i++) {
    char buf[32];
    int len = snprintf(buf, sizeof buf, "row%lld", (long long)i);
    RT_OK(rill_array_set_var(s, i, buf, len, NULL), err);
  }
  rill_array_t* t = NULL;
  RT_OK(rill_array_new(rill_type_tensor(RILL_FLOAT32, 1, (int64_t[]){2}), n, &t, &err), err);
  for (int64_t i = 0; i < 2 * n; i++) ((float*)t->data)[i] = (float)i;
  const char* names[] = {"x", "s", "t"};
  const rill_array_t* arrays[] = {x, s, t};
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_arrays(names, arrays, 3, 0, &df, &err), err);
  rill_array_release(x);
  rill_array_release(s);
  rill_array_release(t);
  return df;
}

Test(stream, batches_schema_and_end) {
  rill_error_t err = {0};
  rill_df_t* df = make_df(10);
  struct ArrowArrayStream st;
  rill_arrow_stream_opts_t so = {.batch_rows = 4};
  RT_OK(rill_df_export_stream_ex(df, NULL, &so, &st, &err), err);
  rill_df_free(df); /* the stream keeps the dataframe alive */
  struct ArrowSchema s;
  cr_assert_eq(st.get_schema(&st, &s), 0);
  cr_assert_str_eq(s.format, "+s");
  cr_assert_eq(s.n_children, 3);
  cr_assert_str_eq(s.children[0]->name, "x");
  cr_assert_str_eq(s.children[0]->format, "i");
  cr_assert(s.children[0]->flags & ARROW_FLAG_NULLABLE);
  cr_assert_str_eq(s.children[1]->format, "U");
  cr_assert_str_eq(s.children[2]->format, "+w:2");
  s.release(&s);
  int64_t lengths[3] = {4, 4, 2}, row = 0;
  struct ArrowArray kept = {0};
  for (int b = 0; b < 3; b++) {
    struct ArrowArray arr;
    cr_assert_eq(st.get_next(&st, &arr), 0, "%s", st.get_last_error(&st));
    cr_assert_not_null(arr.release);
    cr_assert_eq(arr.length, lengths[b]);
    cr_assert_eq(arr.n_children, 3);
    const struct ArrowArray* x = arr.children[0];
    const struct ArrowArray* str = arr.children[1];
    for (int64_t i = 0; i < arr.length; i++, row++) {
      cr_assert_eq(x->buffers[0] == NULL || bitv(x->buffers[0], x->offset + i), row % 3 != 1);
      if (row % 3 != 1) cr_assert_eq(((const int32_t*)x->buffers[1])[x->offset + i], row * 10 - 3);
      const int64_t* off = str->buffers[1];
      char want[32];
      snprintf(want, sizeof want, "row%lld", (long long)row);
      cr_assert_eq(off[i + 1] - off[i], (int64_t)strlen(want));
      cr_assert_eq(memcmp((const char*)str->buffers[2] + off[i], want, strlen(want)), 0);
    }
    if (b == 0) kept = arr; /* a batch kept past the next get_next */
    else arr.release(&arr);
  }
  struct ArrowArray end;
  cr_assert_eq(st.get_next(&st, &end), 0);
  cr_assert_null(end.release, "end of stream");
  st.release(&st);
  cr_assert_null(st.release);
  cr_assert_eq(((const int32_t*)kept.children[0]->buffers[1])[3], 27);
  kept.release(&kept);
}

static int fail_on_row5(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* exec,
                        void* ctx, rill_error_t* err) {
  (void)nin;
  (void)ctx;
  int rc = rill_exec_alloc(exec, out, rill_type_scalar(RILL_INT64), in[0]->length);
  if (rc != RILL_OK) return rc;
  const int64_t* rows = rill_exec_rows(exec);
  for (int64_t i = 0; i < in[0]->length; i++) {
    if (rows[i] == 5) {
      err->row = i;
      return rill_error_set(err, RILL_EFORMAT, "value at row 5 is cursed");
    }
    ((int64_t*)out->data)[i] = rows[i] * 2;
  }
  return RILL_OK;
}

Test(stream, failing_row_reports_through_get_last_error) {
  rill_error_t err = {0};
  rill_df_t* df = make_df(8);
  int in[] = {0};
  int y = rill_df_map(df, "y", rill_type_scalar(RILL_INT64), in, 1, fail_on_row5, NULL, NULL, NULL, &err);
  cr_assert_eq(y, 3, "%s", err.message);
  struct ArrowArrayStream st;
  rill_arrow_stream_opts_t so = {.batch_rows = 4};
  rill_iter_opts_t io = {.columns = (int[]){3}, .ncolumns = 1};
  RT_OK(rill_df_export_stream_ex(df, &io, &so, &st, &err), err);
  struct ArrowSchema s;
  cr_assert_eq(st.get_schema(&st, &s), 0);
  cr_assert_eq(s.n_children, 1);
  cr_assert_str_eq(s.children[0]->name, "y");
  cr_assert_str_eq(s.children[0]->format, "l");
  s.release(&s);
  struct ArrowArray arr;
  cr_assert_eq(st.get_next(&st, &arr), 0);
  cr_assert_eq(((const int64_t*)arr.children[0]->buffers[1])[3], 6);
  arr.release(&arr);
  int rc = st.get_next(&st, &arr);
  cr_assert_neq(rc, 0);
  cr_assert_null(arr.release);
  const char* msg = st.get_last_error(&st);
  cr_assert_not_null(msg);
  cr_assert(strstr(msg, "cursed") != NULL, "%s", msg);
  cr_assert(strstr(msg, "5") != NULL, "%s", msg);
  st.release(&st);
  rill_df_free(df);
}

Test(stream, batched_dataframe_gives_one_batch_per_row) {
  rill_error_t err = {0};
  rill_df_t* df = make_df(7);
  rill_df_t* b = NULL;
  RT_OK(rill_df_batch(df, (int[]){0, 2}, 2, 3, NULL, &b, &err), err);
  struct ArrowArrayStream st;
  RT_OK(rill_df_export_stream(b, NULL, &st, &err), err);
  int64_t total = 0, n = 0;
  for (;;) {
    struct ArrowArray arr;
    cr_assert_eq(st.get_next(&st, &arr), 0);
    if (arr.release == NULL) break;
    cr_assert_eq(arr.n_children, 2);
    cr_assert_eq(arr.length, n < 2 ? 3 : 1);
    total += arr.length;
    n++;
    arr.release(&arr);
  }
  cr_assert_eq(n, 3);
  cr_assert_eq(total, 7);
  st.release(&st);
  rill_df_free(b);
  rill_df_free(df);
}

Test(stream, row_export_and_errors) {
  rill_error_t err = {0};
  rill_df_t* df = make_df(3);
  rill_iter_t* it = NULL;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.columns = (int[]){1, 0}, .ncolumns = 2}, &it, &err), err);
  rill_row_t row;
  RT_OK(rill_iter_next(it, &row, &err), err);
  struct ArrowSchema s;
  struct ArrowArray arr;
  RT_OK(rill_row_export_arrow(&row, df, (int[]){1, 0}, &s, &arr, &err), err);
  cr_assert_str_eq(s.children[0]->name, "s");
  cr_assert_str_eq(s.children[1]->name, "x");
  cr_assert_eq(arr.length, 1);
  rill_iter_free(it);
  rill_df_free(df);
  cr_assert_eq(((const int32_t*)arr.children[1]->buffers[1])[arr.children[1]->offset], -3);
  arr.release(&arr);
  s.release(&s);
  RT_FAILS(rill_row_export_arrow(NULL, NULL, NULL, &s, &arr, &err), RILL_EINVAL, "NULL", err);
  RT_FAILS(rill_df_export_stream(NULL, NULL, NULL, &err), RILL_EINVAL, "NULL", err);
  df = make_df(3);
  struct ArrowArrayStream st;
  RT_FAILS(rill_df_export_stream(df, &(rill_iter_opts_t){.columns = (int[]){7}, .ncolumns = 1}, &st, &err),
           RILL_EINVAL, "column 7 is not in the dataframe", err);
  cr_assert_null(st.release);
  RT_FAILS(rill_df_export_stream_ex(df, NULL, &(rill_arrow_stream_opts_t){.batch_rows = -2}, &st, &err),
           RILL_EINVAL, "negative batch_rows", err);
  rill_df_free(df);
}

/* ---------------------------------------------------------------- import */

/* A hand-made record batch: a utf8 column with int32 offsets, a bool column, a tsn column
 * with a null, sliced with a struct offset of 1. */
static int released_batch, released_schema;
static void rel_array(struct ArrowArray* a) {
  for (int64_t i = 0; i < a->n_children; i++) a->children[i]->release = NULL;
  a->release = NULL;
  released_batch++;
}
static void rel_schema(struct ArrowSchema* s) {
  s->release = NULL;
  released_schema++;
}

static struct ArrowSchema k_fields[4], *k_fieldp[4] = {&k_fields[0], &k_fields[1], &k_fields[2], &k_fields[3]};
static struct ArrowArray k_cols[4], *k_colp[4] = {&k_cols[0], &k_cols[1], &k_cols[2], &k_cols[3]};
static int32_t k_off[5] = {0, 1, 3, 3, 7};
static const char k_chars[] = "abbcccc";
static uint8_t k_bits[1] = {0x0A}; /* 0,1,0,1 */
static uint8_t k_valid[1] = {0x0B}; /* row 2 null */
static int64_t k_ns[4] = {-1500, 2000, 0, 3999};
static const void* k_b0[3], *k_b1[2], *k_b2[2], *k_top[1];

static void make_batch(struct ArrowSchema* s, struct ArrowArray* a, const char* third_format) {
  const char* names[3] = {"name", "flag", "when"};
  const char* fmts[3] = {"u", "b", third_format};
  for (int i = 0; i < 3; i++) {
    k_fields[i] = (struct ArrowSchema){.format = fmts[i], .name = names[i], .flags = ARROW_FLAG_NULLABLE,
                                       .release = rel_schema};
  }
  *s = (struct ArrowSchema){.format = "+s", .name = "", .n_children = 3, .children = k_fieldp,
                            .release = rel_schema};
  k_b0[0] = NULL; k_b0[1] = k_off; k_b0[2] = k_chars;
  k_b1[0] = NULL; k_b1[1] = k_bits;
  k_b2[0] = k_valid; k_b2[1] = k_ns;
  k_cols[0] = (struct ArrowArray){.length = 4, .n_buffers = 3, .buffers = k_b0, .release = rel_array};
  k_cols[1] = (struct ArrowArray){.length = 4, .n_buffers = 2, .buffers = k_b1, .release = rel_array};
  k_cols[2] = (struct ArrowArray){.length = 4, .null_count = 1, .n_buffers = 2, .buffers = k_b2,
                                  .release = rel_array};
  k_top[0] = NULL;
  *a = (struct ArrowArray){.length = 3, .offset = 1, .n_buffers = 1, .n_children = 3,
                           .buffers = k_top, .children = k_colp, .release = rel_array};
}

Test(import, record_batch_conversions) {
  rill_error_t err = {0};
  struct ArrowSchema s;
  struct ArrowArray a;
  make_batch(&s, &a, "tsn:Europe/Paris");
  released_batch = released_schema = 0;
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_arrow_batch(&s, &a, &df, &err), err);
  cr_assert_eq(released_batch, 1);
  cr_assert_eq(released_schema, 1);
  cr_assert_eq(rill_df_rows(df), 3);
  cr_assert_eq(rill_df_field(df, 0)->type.dtype, RILL_STRING);
  cr_assert_eq(rill_df_field(df, 1)->type.dtype, RILL_BOOL);
  cr_assert_eq(rill_df_field(df, 2)->type.dtype, RILL_TIMESTAMP_US);
  rill_iter_t* it = NULL;
  RT_OK(rill_iter_new(df, NULL, &it, &err), err);
  const char* names[3] = {"bb", "", "cccc"};
  uint8_t flags[3] = {1, 0, 1};
  int64_t us[3] = {2, 0, 3};
  for (int r = 0; r < 3; r++) {
    rill_row_t row;
    RT_OK(rill_iter_next(it, &row, &err), err);
    int64_t n = 0;
    const void* p = rill_array_cell(row.columns[0], 0, &n);
    cr_assert_eq(n, (int64_t)strlen(names[r]));
    cr_assert_eq(memcmp(p, names[r], (size_t)n), 0);
    cr_assert_eq(((const uint8_t*)row.columns[1]->data)[0], flags[r]);
    cr_assert_eq(rill_array_is_valid(row.columns[2], 0), r != 1, "row %d", r);
    if (r != 1) cr_assert_eq(((const int64_t*)row.columns[2]->data)[0], us[r]);
  }
  rill_iter_free(it);
  rill_df_free(df);
}

Test(import, unsupported_format_is_named) {
  rill_error_t err = {0};
  struct ArrowSchema s;
  struct ArrowArray a;
  make_batch(&s, &a, "tdD");
  released_batch = released_schema = 0;
  rill_df_t* df = (rill_df_t*)1;
  RT_FAILS(rill_df_from_arrow_batch(&s, &a, &df, &err), RILL_ENOTSUP, "\"tdD\"", err);
  cr_assert(strstr(err.message, "'when'") != NULL, "%s", err.message);
  cr_assert_null(df);
  cr_assert_eq(released_batch, 1, "inputs are released on failure too");
  cr_assert_eq(released_schema, 1);
  RT_FAILS(rill_df_from_arrow(NULL, &df, &err), RILL_EINVAL, "NULL", err);
}

Test(import, stream_round_trip_of_every_type) {
  rill_error_t err = {0};
  int64_t n = 11;
  rill_dtype_t ds[] = {RILL_BOOL, RILL_INT8, RILL_INT16, RILL_INT32, RILL_INT64, RILL_UINT8,
                       RILL_UINT16, RILL_UINT32, RILL_UINT64, RILL_FLOAT16, RILL_BFLOAT16,
                       RILL_FLOAT32, RILL_FLOAT64, RILL_TIMESTAMP_US};
  enum { ND = sizeof ds / sizeof ds[0] };
  rill_array_t* arrays[ND + 3];
  const char* names[ND + 3];
  char namebuf[ND + 3][16];
  for (int k = 0; k < ND; k++) {
    RT_OK(rill_array_new(rill_type_scalar(ds[k]), n, &arrays[k], &err), err);
    size_t es = rill_dtype_size(ds[k]);
    for (int64_t i = 0; i < n * (int64_t)es; i++) ((uint8_t*)arrays[k]->data)[i] = (uint8_t)(i * 7 + k);
    if (ds[k] == RILL_BOOL)
      for (int64_t i = 0; i < n; i++) ((uint8_t*)arrays[k]->data)[i] = (uint8_t)(i % 2);
    if (k % 2) RT_OK(rill_array_set_null(arrays[k], k % n), err);
    snprintf(namebuf[k], 16, "c%d", k);
    names[k] = namebuf[k];
  }
  const char* sv[11] = {"a", "bb", NULL, "", "long string here", "x", "y", "z", "w", "v", "ü"};
  arrays[ND] = make_strings(sv, 11, RILL_STRING);
  arrays[ND + 1] = make_strings(sv, 11, RILL_BINARY);
  RT_OK(rill_array_new(rill_type_tensor(RILL_INT16, 2, (int64_t[]){2, 2}), n, &arrays[ND + 2], &err), err);
  for (int64_t i = 0; i < 4 * n; i++) ((int16_t*)arrays[ND + 2]->data)[i] = (int16_t)(i - 20);
  names[ND] = "str";
  names[ND + 1] = "bin";
  names[ND + 2] = "tensor";
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_arrays(names, (const rill_array_t* const*)arrays, ND + 3, 0, &df, &err), err);
  struct ArrowArrayStream st;
  RT_OK(rill_df_export_stream_ex(df, NULL, &(rill_arrow_stream_opts_t){.batch_rows = 4}, &st, &err), err);
  rill_df_t* back = NULL;
  RT_OK(rill_df_from_arrow(&st, &back, &err), err);
  cr_assert_null(st.release, "the stream is consumed");
  cr_assert_eq(rill_df_rows(back), n);
  cr_assert_eq(rill_df_ncolumns(back), ND + 3);
  rill_iter_t* it = NULL;
  RT_OK(rill_iter_new(back, NULL, &it, &err), err);
  for (int64_t i = 0; i < n; i++) {
    rill_row_t row;
    RT_OK(rill_iter_next(it, &row, &err), err);
    for (int k = 0; k < ND + 3; k++) {
      const rill_array_t* got = row.columns[k];
      cr_assert(rill_type_equal(&got->type, &arrays[k]->type), "column %s", names[k]);
      int valid = rill_array_is_valid(arrays[k], i);
      cr_assert_eq(rill_array_is_valid(got, 0), valid, "column %s row %lld", names[k], (long long)i);
      if (!valid) continue;
      int64_t n1 = 0, n2 = 0;
      const void* p1 = rill_array_cell(got, 0, &n1);
      const void* p2 = rill_array_cell(arrays[k], i, &n2);
      cr_assert_eq(n1, n2, "column %s row %lld", names[k], (long long)i);
      cr_assert_eq(memcmp(p1, p2, (size_t)n1), 0, "column %s row %lld", names[k], (long long)i);
    }
  }
  rill_iter_free(it);
  rill_df_free(back);
  rill_df_free(df);
  for (int k = 0; k < ND + 3; k++) rill_array_release(arrays[k]);
}

Test(import, malformed_batches_are_errors) {
  rill_error_t err = {0};
  struct ArrowSchema s;
  struct ArrowArray a;
  rill_df_t* df = NULL;
  /* a column whose values buffer is missing */
  make_batch(&s, &a, "tsu:");
  k_b1[1] = NULL;
  RT_FAILS(rill_df_from_arrow_batch(&s, &a, &df, &err), RILL_EFORMAT, "required buffer is missing", err);
  cr_assert(strstr(err.message, "'flag'") != NULL, "%s", err.message);
  /* a column shorter than the batch */
  make_batch(&s, &a, "tsu:");
  k_cols[2].length = 2;
  RT_FAILS(rill_df_from_arrow_batch(&s, &a, &df, &err), RILL_EFORMAT, "2 values for 3 rows", err);
  /* decreasing offsets */
  make_batch(&s, &a, "tsu:");
  int32_t bad[5] = {0, 3, 1, 1, 7};
  k_b0[1] = bad;
  RT_FAILS(rill_df_from_arrow_batch(&s, &a, &df, &err), RILL_EFORMAT, "decreasing offsets", err);
  /* not a record batch */
  make_batch(&s, &a, "tsu:");
  s.format = "i";
  RT_FAILS(rill_df_from_arrow_batch(&s, &a, &df, &err), RILL_EINVAL, "expected a record batch", err);
  cr_assert_null(df);
}

/* A stream whose second get_next fails. */
static int bad_calls;
static int bad_get_schema(struct ArrowArrayStream* st, struct ArrowSchema* out) {
  (void)st;
  struct ArrowArray unused;
  make_batch(out, &unused, "tsu:");
  return 0;
}
static int bad_get_next(struct ArrowArrayStream* st, struct ArrowArray* out) {
  (void)st;
  if (bad_calls++ == 0) {
    struct ArrowSchema unused;
    make_batch(&unused, out, "tsu:");
    return 0;
  }
  return EIO;
}
static const char* bad_last_error(struct ArrowArrayStream* st) {
  (void)st;
  return "disk on fire";
}
static void bad_release(struct ArrowArrayStream* st) { st->release = NULL; }

Test(import, stream_errors_carry_the_producer_message) {
  rill_error_t err = {0};
  struct ArrowArrayStream st = {bad_get_schema, bad_get_next, bad_last_error, bad_release, NULL};
  rill_df_t* df = NULL;
  bad_calls = 0;
  RT_FAILS(rill_df_from_arrow(&st, &df, &err), RILL_EFORMAT, "disk on fire", err);
  cr_assert(strstr(err.message, "after 1 batches") != NULL, "%s", err.message);
  cr_assert_null(st.release, "the stream is released on failure");
  cr_assert_null(df);
}

Test(import, variable_shape_tensor_round_trip) {
  rill_error_t err = {0};
  rill_array_t* a = NULL;
  RT_OK(rill_array_new(rill_type_tensor(RILL_INT32, 2, (int64_t[]){-1, 2}), 3, &a, &err), err);
  int32_t v[6] = {1, 2, 3, 4, 5, 6};
  RT_OK(rill_array_set_var(a, 0, v, 16, (int64_t[]){2, 2}), err);
  RT_OK(rill_array_set_var(a, 1, NULL, 0, (int64_t[]){0, 2}), err);
  RT_OK(rill_array_set_var(a, 2, v + 4, 8, (int64_t[]){1, 2}), err);
  RT_OK(rill_array_set_null(a, 1), err);
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_arrays((const char*[]){"m"}, (const rill_array_t*[]){a}, 1, 0, &df, &err), err);
  struct ArrowArrayStream st;
  RT_OK(rill_df_export_stream_ex(df, NULL, &(rill_arrow_stream_opts_t){.batch_rows = 2}, &st, &err), err);
  rill_df_t* back = NULL;
  RT_OK(rill_df_from_arrow(&st, &back, &err), err);
  const rill_field_t* f = rill_df_field(back, 0);
  cr_assert(rill_type_equal(&f->type, &a->type), "uniform_shape keeps the fixed dimension");
  rill_iter_t* it = NULL;
  RT_OK(rill_iter_new(back, NULL, &it, &err), err);
  for (int64_t i = 0; i < 3; i++) {
    rill_row_t row;
    RT_OK(rill_iter_next(it, &row, &err), err);
    cr_assert_eq(rill_array_is_valid(row.columns[0], 0), i != 1);
    if (i == 1) continue;
    int64_t got[2], want[2], n1, n2;
    rill_array_cell_shape(row.columns[0], 0, got);
    rill_array_cell_shape(a, i, want);
    cr_assert_eq(got[0], want[0]);
    cr_assert_eq(got[1], want[1]);
    const void* p1 = rill_array_cell(row.columns[0], 0, &n1);
    const void* p2 = rill_array_cell(a, i, &n2);
    cr_assert_eq(n1, n2);
    cr_assert_eq(memcmp(p1, p2, (size_t)n1), 0);
  }
  rill_iter_free(it);
  rill_df_free(back);
  rill_df_free(df);
  rill_array_release(a);
}

/* A stream of in-memory fixed-width columns without nulls exports slices of the caller's
 * buffers (no copy), even with batches larger than a task and worker threads; a column with
 * nulls is gathered into the batch's own buffer with its validity. */
Test(stream, memory_columns_stream_without_copying) {
  enum { N = 10000, B = 4096 };
  rill_error_t err = {0};
  rill_array_t *v = NULL, *d = NULL, *x = make_i32(N, 1);
  RT_OK(rill_array_new(rill_type_scalar(RILL_INT64), N, &v, &err), err);
  RT_OK(rill_array_new(rill_type_scalar(RILL_FLOAT64), N, &d, &err), err);
  for (int64_t i = 0; i < N; i++) {
    ((int64_t*)v->data)[i] = 3 * i;
    ((double*)d->data)[i] = 0.5 * (double)i;
  }
  const char* names[] = {"v", "d", "x"};
  const rill_array_t* arrays[] = {v, d, x};
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_arrays(names, arrays, 3, 0, &df, &err), err);
  struct ArrowArrayStream st;
  rill_arrow_stream_opts_t so = {.batch_rows = B};
  rill_iter_opts_t io = {.threads = 2, .prefetch = 2};
  RT_OK(rill_df_export_stream_ex(df, &io, &so, &st, &err), err);
  int64_t row = 0;
  for (int b = 0; b < (N + B - 1) / B; b++) {
    struct ArrowArray arr;
    cr_assert_eq(st.get_next(&st, &arr), 0, "%s", st.get_last_error(&st));
    cr_assert_not_null(arr.release);
    cr_assert_eq(arr.length, b < N / B ? B : N % B);
    const struct ArrowArray *cv = arr.children[0], *cd = arr.children[1], *cx = arr.children[2];
    cr_assert_eq((const int64_t*)cv->buffers[1] + cv->offset, (const int64_t*)v->data + row,
                 "batch %d of 'v' was copied", b);
    cr_assert_eq((const double*)cd->buffers[1] + cd->offset, (const double*)d->data + row,
                 "batch %d of 'd' was copied", b);
    cr_assert_eq(cv->null_count, 0);
    const int32_t* xv = (const int32_t*)cx->buffers[1] + cx->offset;
    cr_assert(xv < (const int32_t*)x->data || xv >= (const int32_t*)x->data + N, "a column with nulls is gathered");
    cr_assert_gt(cx->null_count, 0);
    for (int64_t i = 0; i < arr.length; i++, row++) {
      cr_assert_eq(((const int64_t*)cv->buffers[1])[cv->offset + i], 3 * row);
      int valid = bitv(cx->buffers[0], cx->offset + i);
      cr_assert_eq(valid, row % 3 != 1, "row %lld", (long long)row);
      if (valid) cr_assert_eq(xv[i], row * 10 - 3);
    }
    arr.release(&arr);
  }
  cr_assert_eq(row, N);
  struct ArrowArray end;
  cr_assert_eq(st.get_next(&st, &end), 0);
  cr_assert_null(end.release, "end of stream");
  st.release(&st);
  rill_df_free(df);
  rill_array_release(v);
  rill_array_release(d);
  rill_array_release(x);
}
