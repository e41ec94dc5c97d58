/* Interop: Arrow C Data / Device / Stream export, DLPack, the native interchange view and
 * Arrow import. Independent consumers (pyarrow, nanoarrow, numpy, polars, pandas) validate the
 * same exports in test/python. */
#include <errno.h>
#include <stdint.h>

#include "common.h"
#include "engine.h" /* the source arrays of a dataframe made by rill_df_from_arrays */
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
  return rt_sys_alloc(size, alignment);
}

Test(arrow, allocation_failures_leave_nothing) {
  rill_error_t err = {0};
  rill_array_t* a = NULL;
  RT_OK(rill_array_new(rill_type_tensor(RILL_INT16, 2, (int64_t[]){-1, 2}), 2, &a, &err), err);
  int16_t v[4] = {1, 2, 3, 4};
  RT_OK(rill_array_set_var(a, 0, v, 8, (int64_t[]){2, 2}), err);
  RT_OK(rill_array_set_var(a, 1, v, 4, (int64_t[]){1, 2}), err);
  rill_allocator_t al = {failing_alloc, rt_sys_free, NULL};
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
           RILL_EINVAL, "unknown column 7", err);
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

/* ---------------------------------------------------------------- zero-copy import */

/* The array behind source column `c` of a dataframe made by rill_df_from_arrays. */
static const rill_array_t* source_array(const rill_df_t* df, int c) {
  cr_assert_eq(df->cols[c]->kind, RILL__COL_SOURCE);
  return df->cols[c]->ctx;
}

static int zc_released;
static void zc_release(struct ArrowArray* a) {
  for (int64_t i = 0; i < a->n_children; i++) a->children[i]->release = NULL;
  a->release = NULL;
  zc_released++;
}

enum { ZN = 16, ZC = 7 };
static _Alignas(64) int32_t z_i32[ZN];
static _Alignas(64) int64_t z_i64[ZN];
static _Alignas(64) int64_t z_off64[ZN + 1];
static _Alignas(64) int32_t z_off32[ZN + 1];
static _Alignas(64) char z_chars[2 * ZN];
static _Alignas(64) float z_f32[3 * ZN];
static _Alignas(64) uint8_t z_valid[ZN / 8];  /* row 1 and row 10 null */
static _Alignas(64) uint8_t z_svalid[ZN / 8]; /* row 2 null */
static _Alignas(64) uint8_t z_bits[ZN / 8];
static struct ArrowSchema z_fields[ZC + 1], *z_fieldp[ZC + 1];
static struct ArrowArray z_cols[ZC + 1], *z_colp[ZC + 1];
static const void* z_bufs[ZC + 1][3];
static const void* z_top[1];

/* A record batch of ZN rows: i (int32, nulls), t (tsu), s (large_utf8, a null), v (+w:3
 * float32), b (bool), n (tsn), u (utf8 with int32 offsets). */
static void make_zbatch(struct ArrowSchema* s, struct ArrowArray* a) {
  static const char* names[ZC] = {"i", "t", "s", "v", "b", "n", "u"};
  static const char* fmts[ZC] = {"i", "tsu:", "U", "+w:3", "b", "tsn:", "u"};
  memset(z_valid, 0xFF, sizeof z_valid);
  z_valid[0] &= (uint8_t)~0x02;
  z_valid[1] &= (uint8_t)~0x04;
  memset(z_svalid, 0xFF, sizeof z_svalid);
  z_svalid[0] &= (uint8_t)~0x04;
  memset(z_bits, 0x55, sizeof z_bits);
  int64_t pos = 0;
  for (int i = 0; i < ZN; i++) {
    z_i32[i] = 100 + i;
    z_i64[i] = 1000 * i - 5;
    z_off64[i] = pos;
    z_off32[i] = (int32_t)pos;
    pos += i % 3; /* cell i is i%3 copies of 'a'+i */
    for (int64_t k = z_off64[i]; k < pos; k++) z_chars[k] = (char)('a' + i);
    for (int k = 0; k < 3; k++) z_f32[3 * i + k] = (float)i + 0.25f * (float)k;
  }
  z_off64[ZN] = pos;
  z_off32[ZN] = (int32_t)pos;
  for (int c = 0; c < ZC; c++) {
    z_fields[c] = (struct ArrowSchema){.format = fmts[c], .name = names[c],
                                       .flags = ARROW_FLAG_NULLABLE, .release = rel_schema};
    z_fieldp[c] = &z_fields[c];
    z_colp[c] = &z_cols[c];
    z_cols[c] = (struct ArrowArray){.length = ZN, .n_buffers = 2, .buffers = z_bufs[c],
                                    .release = zc_release};
    z_bufs[c][0] = NULL;
  }
  z_fields[ZC] = (struct ArrowSchema){.format = "f", .name = "item", .release = rel_schema};
  z_fieldp[ZC] = &z_fields[ZC];
  z_fields[3].n_children = 1;
  z_fields[3].children = &z_fieldp[ZC];
  z_cols[ZC] = (struct ArrowArray){.length = 3 * ZN, .n_buffers = 2, .buffers = z_bufs[ZC],
                                   .release = zc_release};
  z_colp[ZC] = &z_cols[ZC];
  z_bufs[ZC][0] = NULL;
  z_bufs[ZC][1] = z_f32;
  z_cols[0].null_count = 2;
  z_bufs[0][0] = z_valid;
  z_bufs[0][1] = z_i32;
  z_bufs[1][1] = z_i64;
  z_cols[2].null_count = -1; /* unknown: rill counts */
  z_cols[2].n_buffers = 3;
  z_bufs[2][0] = z_svalid;
  z_bufs[2][1] = z_off64;
  z_bufs[2][2] = z_chars;
  z_cols[3].n_buffers = 1;
  z_cols[3].n_children = 1;
  z_cols[3].children = &z_colp[ZC];
  z_bufs[4][1] = z_bits;
  z_bufs[5][1] = z_i64;
  z_cols[6].n_buffers = 3;
  z_bufs[6][1] = z_off32;
  z_bufs[6][2] = z_chars;
  *s = (struct ArrowSchema){.format = "+s", .name = "", .n_children = ZC, .children = z_fieldp,
                            .release = rel_schema};
  z_top[0] = NULL;
  *a = (struct ArrowArray){.length = ZN, .n_buffers = 1, .n_children = ZC, .buffers = z_top,
                           .children = z_colp, .release = zc_release};
}

Test(import, single_batch_is_wrapped_and_released_once_after_the_last_user) {
  rill_error_t err = {0};
  struct ArrowSchema s;
  struct ArrowArray a;
  make_zbatch(&s, &a);
  zc_released = released_schema = 0;
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_arrow_batch(&s, &a, &df, &err), err);
  cr_assert_eq(zc_released, 0, "wrapped columns keep the batch alive");
  cr_assert_eq(released_schema, 1);
  cr_assert_null(a.release, "the batch was moved");
  /* zero-copy columns */
  const rill_array_t *ci = source_array(df, 0), *ct = source_array(df, 1), *cs = source_array(df, 2),
                     *cv = source_array(df, 3);
  cr_assert_eq(ci->data, (void*)z_i32);
  cr_assert_eq(ci->validity, z_valid);
  cr_assert_eq(ci->null_count, 2);
  cr_assert_eq(ct->data, (void*)z_i64);
  cr_assert_null(ct->validity);
  cr_assert_eq(cs->data, (void*)z_chars);
  cr_assert_eq(cs->offsets, z_off64);
  cr_assert_eq(cs->validity, z_svalid);
  cr_assert_eq(cs->null_count, 1, "an unknown null count is counted");
  cr_assert_eq(cv->data, (void*)z_f32);
  cr_assert_eq(cv->type.shape[0], 3);
  /* copied columns, converted */
  const rill_array_t *cb = source_array(df, 4), *cn = source_array(df, 5), *cu = source_array(df, 6);
  cr_assert_neq(cb->data, (void*)z_bits);
  cr_assert_neq(cn->data, (void*)z_i64);
  cr_assert_neq(cu->data, (void*)z_chars);
  for (int i = 0; i < ZN; i++) {
    cr_assert_eq(((const uint8_t*)cb->data)[i], i % 2 == 0, "row %d", i);
    int64_t want = z_i64[i] < 0 ? -1 : z_i64[i] / 1000; /* floor of ns / 1000 */
    cr_assert_eq(((const int64_t*)cn->data)[i], want, "row %d", i);
    int64_t nb = 0, ns = 0;
    const char* pu = rill_array_cell(cu, i, &nb);
    const char* ps = rill_array_cell(cs, i, &ns);
    cr_assert_eq(nb, i % 3);
    cr_assert_eq(ns, i % 3);
    cr_assert_eq(ps, z_chars + z_off64[i]);
    cr_assert(nb == 0 || memcmp(pu, ps, (size_t)nb) == 0, "row %d", i);
    cr_assert_eq(rill_array_is_valid(ci, i), i != 1 && i != 10, "row %d", i);
    cr_assert_eq(rill_array_is_valid(cs, i), i != 2, "row %d", i);
  }
  /* a retained array and an exported batch outlive the dataframe */
  const rill_array_t* keep = rill_array_retain(cv);
  struct ArrowArrayStream st;
  rill_arrow_stream_opts_t so = {.batch_rows = ZN};
  RT_OK(rill_df_export_stream_ex(df, NULL, &so, &st, &err), err);
  struct ArrowArray out;
  cr_assert_eq(st.get_next(&st, &out), 0, "%s", st.get_last_error(&st));
  cr_assert_eq(out.length, ZN);
  const struct ArrowArray* et = out.children[1];
  const struct ArrowArray* ev = out.children[3]->children[0];
  cr_assert_eq((const int64_t*)et->buffers[1] + et->offset, z_i64, "tsu is lent through the export");
  cr_assert_eq((const float*)ev->buffers[1] + ev->offset, z_f32, "+w:3 is lent through the export");
  rill_df_free(df);
  cr_assert_eq(zc_released, 0, "the export and the retained array still use the batch");
  st.release(&st);
  cr_assert_eq(zc_released, 0);
  out.release(&out);
  cr_assert_eq(zc_released, 0, "the retained array still uses the batch");
  cr_assert_eq(((const float*)keep->data)[3 * 5 + 2], 5.5f);
  rill_array_release(keep);
  cr_assert_eq(zc_released, 1, "released once, after the last array");
}

Test(import, offsets_decide_between_wrapping_and_copying) {
  rill_error_t err = {0};
  struct ArrowSchema s;
  struct ArrowArray a;
  rill_df_t* df = NULL;
  /* struct offset 8: the bitmap offset is byte-exact, the large_utf8 offsets do not start at 0 */
  make_zbatch(&s, &a);
  a.offset = 8;
  a.length = 8;
  zc_released = 0;
  RT_OK(rill_df_from_arrow_batch(&s, &a, &df, &err), err);
  const rill_array_t *ci = source_array(df, 0), *ct = source_array(df, 1), *cs = source_array(df, 2),
                     *cv = source_array(df, 3);
  cr_assert_eq(ci->data, (void*)(z_i32 + 8));
  cr_assert_eq(ci->validity, z_valid + 1);
  cr_assert_eq(ci->null_count, 1);
  cr_assert_eq(ct->data, (void*)(z_i64 + 8));
  cr_assert_eq(cv->data, (void*)(z_f32 + 24));
  cr_assert_neq(cs->offsets, z_off64 + 8, "offsets not starting at 0 are copied");
  cr_assert_eq(cs->offsets[0], 0);
  for (int i = 0; i < 8; i++) {
    int64_t n = 0;
    const char* p = rill_array_cell(cs, i, &n);
    cr_assert_eq(n, (8 + i) % 3);
    cr_assert(n == 0 || p[0] == (char)('a' + 8 + i), "row %d", i);
    cr_assert_eq(rill_array_is_valid(ci, i), i != 2, "row %d", i);
    cr_assert_eq(((const int32_t*)ci->data)[i], 108 + i);
  }
  rill_df_free(df);
  cr_assert_eq(zc_released, 1);
  /* struct offset 3 and child offset 1: values are wrapped at +4, a shifted bitmap is copied */
  make_zbatch(&s, &a);
  a.offset = 3;
  a.length = 10;
  z_cols[0].offset = 1;
  z_cols[1].offset = 1;
  z_cols[0].length = z_cols[1].length = ZN - 1;
  zc_released = 0;
  RT_OK(rill_df_from_arrow_batch(&s, &a, &df, &err), err);
  ci = source_array(df, 0);
  ct = source_array(df, 1);
  cr_assert_eq(ct->data, (void*)(z_i64 + 4), "offset applied to the data pointer");
  cr_assert(ci->data != (void*)(z_i32 + 4), "a bitmap at bit 4 is not byte-exact: copied");
  cr_assert_eq(ci->null_count, 1);
  for (int i = 0; i < 10; i++) {
    cr_assert_eq(rill_array_is_valid(ci, i), i + 4 != 10, "row %d", i);
    if (i + 4 != 10) cr_assert_eq(((const int32_t*)ci->data)[i], 104 + i);
  }
  rill_df_free(df);
  cr_assert_eq(zc_released, 1);
  /* null elements inside a fixed_size_list child: copied (and accepted under null cells only) */
  make_zbatch(&s, &a);
  static uint8_t item_valid[6];
  memset(item_valid, 0xFF, sizeof item_valid);
  item_valid[0] = 0xFE; /* element 0 of cell 0 */
  z_bufs[ZC][0] = item_valid;
  z_cols[ZC].null_count = 1;
  static uint8_t cell_valid[2] = {0xFE, 0xFF}; /* cell 0 null */
  z_bufs[3][0] = cell_valid;
  z_cols[3].null_count = 1;
  zc_released = 0;
  RT_OK(rill_df_from_arrow_batch(&s, &a, &df, &err), err);
  cv = source_array(df, 3);
  cr_assert_neq(cv->data, (void*)z_f32);
  cr_assert_not(rill_array_is_valid(cv, 0));
  cr_assert_eq(((const float*)cv->data)[3 * 4 + 1], 4.25f);
  rill_df_free(df);
  cr_assert_eq(zc_released, 1);
  /* a misaligned values buffer is copied */
  make_zbatch(&s, &a);
  z_bufs[1][1] = (const char*)z_i64 + 4;
  z_cols[1].length = ZN - 1;
  a.length = ZN - 1;
  RT_OK(rill_df_from_arrow_batch(&s, &a, &df, &err), err);
  ct = source_array(df, 1);
  cr_assert_neq(ct->data, (const void*)((const char*)z_i64 + 4));
  int64_t v;
  memcpy(&v, (const char*)z_i64 + 4, 8);
  cr_assert_eq(((const int64_t*)ct->data)[0], v);
  rill_df_free(df);
}

Test(import, malformed_zero_copy_candidates_fail_and_release_once) {
  rill_error_t err = {0};
  struct ArrowSchema s;
  struct ArrowArray a;
  rill_df_t* df = (rill_df_t*)1;
  make_zbatch(&s, &a);
  int64_t bad[ZN + 1];
  memcpy(bad, z_off64, sizeof bad);
  bad[5] = bad[6] + 1; /* cell 4 longer than the data before cell 5 */
  z_bufs[2][1] = bad;
  zc_released = 0;
  RT_FAILS(rill_df_from_arrow_batch(&s, &a, &df, &err), RILL_EFORMAT, "decreasing offsets", err);
  cr_assert(strstr(err.message, "'s', row 5") != NULL, "%s", err.message);
  cr_assert_null(df);
  cr_assert_eq(zc_released, 1, "the columns wrapped before the failure are released too");
  make_zbatch(&s, &a);
  z_cols[ZC].length = 3 * ZN - 1;
  zc_released = 0;
  RT_FAILS(rill_df_from_arrow_batch(&s, &a, &df, &err), RILL_EFORMAT, "fixed_size_list child is too short",
           err);
  cr_assert(strstr(err.message, "'v'") != NULL, "%s", err.message);
  cr_assert_eq(zc_released, 1);
}

/* A stream serving `n` copies of make_zbatch. */
static int zs_left;
static int zs_schema(struct ArrowArrayStream* st, struct ArrowSchema* out) {
  struct ArrowArray tmp;
  make_zbatch(out, &tmp);
  return 0;
}
static int zs_next(struct ArrowArrayStream* st, struct ArrowArray* out) {
  struct ArrowSchema tmp;
  if (zs_left-- <= 0) {
    out->release = NULL;
    return 0;
  }
  make_zbatch(&tmp, out);
  return 0;
}
static const char* zs_error(struct ArrowArrayStream* st) { return NULL; }
static void zs_release(struct ArrowArrayStream* st) { st->release = NULL; }

Test(import, streams_of_one_batch_are_wrapped_longer_ones_copied) {
  rill_error_t err = {0};
  for (int n = 1; n <= 2; n++) {
    struct ArrowArrayStream st = {.get_schema = zs_schema, .get_next = zs_next,
                                  .get_last_error = zs_error, .release = zs_release};
    zs_left = n;
    zc_released = 0;
    rill_df_t* df = NULL;
    RT_OK(rill_df_from_arrow(&st, &df, &err), err);
    cr_assert_null(st.release);
    cr_assert_eq(rill_df_rows(df), n * ZN);
    const rill_array_t* ct = source_array(df, 1);
    if (n == 1) {
      cr_assert_eq(ct->data, (void*)z_i64);
      cr_assert_eq(zc_released, 0);
    } else {
      cr_assert_neq(ct->data, (void*)z_i64);
      cr_assert_eq(zc_released, 2, "copied batches are released during the import");
      for (int i = 0; i < n * ZN; i++)
        cr_assert_eq(((const int64_t*)ct->data)[i], z_i64[i % ZN]);
    }
    rill_df_free(df);
    cr_assert_eq(zc_released, n);
  }
}
