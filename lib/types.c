/* Types, version and feature queries. */
#include <stdio.h>
#include <string.h>

#include "internal.h"

const char* rill_version(void) { return RILL_VERSION_STRING; }

int rill_has_feature(rill_feature_t feature) {
  switch (feature) {
    case RILL_FEATURE_CUDA: return RILL_HAVE_CUDA;
    case RILL_FEATURE_JPEG: return RILL_HAVE_JPEG;
    case RILL_FEATURE_PNG: return RILL_HAVE_PNG;
    case RILL_FEATURE_SQLITE: return RILL_HAVE_SQLITE;
    case RILL_FEATURE_THREADS: return 1;
    case RILL_FEATURE_WEBP: return RILL_HAVE_WEBP;
    case RILL_FEATURE_GZIP: return RILL_HAVE_ZLIB;
    case RILL_FEATURE_ZSTD: return RILL_HAVE_ZSTD;
  }
  return 0;
}

int rill_cuda_device_count(void) { return rill__cuda_device_count(); }

size_t rill_dtype_size(rill_dtype_t dtype) {
  switch (dtype) {
    case RILL_BOOL: case RILL_INT8: case RILL_UINT8: return 1;
    case RILL_INT16: case RILL_UINT16: case RILL_FLOAT16: case RILL_BFLOAT16: return 2;
    case RILL_INT32: case RILL_UINT32: case RILL_FLOAT32: return 4;
    case RILL_INT64: case RILL_UINT64: case RILL_FLOAT64: case RILL_TIMESTAMP_US: return 8;
    case RILL_STRING: case RILL_BINARY: return 0;
  }
  return 0;
}

const char* rill_dtype_name(rill_dtype_t dtype) {
  switch (dtype) {
    case RILL_BOOL: return "bool";
    case RILL_INT8: return "int8";
    case RILL_INT16: return "int16";
    case RILL_INT32: return "int32";
    case RILL_INT64: return "int64";
    case RILL_UINT8: return "uint8";
    case RILL_UINT16: return "uint16";
    case RILL_UINT32: return "uint32";
    case RILL_UINT64: return "uint64";
    case RILL_FLOAT16: return "float16";
    case RILL_BFLOAT16: return "bfloat16";
    case RILL_FLOAT32: return "float32";
    case RILL_FLOAT64: return "float64";
    case RILL_STRING: return "string";
    case RILL_BINARY: return "binary";
    case RILL_TIMESTAMP_US: return "timestamp[us]";
  }
  return "invalid";
}

/* Stage functions call this once per call and pass the result on by value, so its stores must
 * forward to the caller's copy. Built in place, the type is a 4-byte store of the dtype and
 * 16-byte stores from byte 4; the caller copies it with 16-byte loads from byte 0, none of
 * which lies within one store, and each waits for the stores to reach the cache (7-8 ns a call
 * measured here). A copy of a whole prebuilt type stores 16 bytes at a time from byte 0. */
#define SCALAR(d) [d] = {.dtype = d}
static const rill_type_t scalar_types[RILL_TIMESTAMP_US + 1] = {
  SCALAR(RILL_BOOL),    SCALAR(RILL_INT8),    SCALAR(RILL_INT16),   SCALAR(RILL_INT32),   SCALAR(RILL_INT64),
  SCALAR(RILL_UINT8),   SCALAR(RILL_UINT16),  SCALAR(RILL_UINT32),  SCALAR(RILL_UINT64),  SCALAR(RILL_FLOAT16),
  SCALAR(RILL_BFLOAT16), SCALAR(RILL_FLOAT32), SCALAR(RILL_FLOAT64), SCALAR(RILL_STRING), SCALAR(RILL_BINARY),
  SCALAR(RILL_TIMESTAMP_US),
};
#undef SCALAR

rill_type_t rill_type_scalar(rill_dtype_t dtype) {
  if ((unsigned)dtype < sizeof scalar_types / sizeof scalar_types[0]) return scalar_types[dtype];
  return (rill_type_t){.dtype = dtype}; /* not a dtype: kept as given, refused where it is used */
}

rill_type_t rill_type_tensor(rill_dtype_t dtype, int ndim, const int64_t* shape) {
  rill_type_t t = rill_type_scalar(dtype);
  if (ndim < 0) ndim = 0;
  if (ndim > RILL_MAX_NDIM) ndim = RILL_MAX_NDIM;
  t.ndim = ndim;
  for (int i = 0; i < ndim; i++) t.shape[i] = shape ? shape[i] : -1;
  return t;
}

static int ndim_ok(const rill_type_t* type) { return type->ndim >= 0 && type->ndim <= RILL_MAX_NDIM; }

int rill_type_is_fixed(const rill_type_t* type) {
  if (!type || !ndim_ok(type) || rill_dtype_size(type->dtype) == 0) return 0;
  for (int i = 0; i < type->ndim; i++)
    if (type->shape[i] < 0) return 0;
  return 1;
}

int64_t rill_type_cell_bytes(const rill_type_t* type) {
  if (!rill_type_is_fixed(type)) return -1;
  int64_t n = (int64_t)rill_dtype_size(type->dtype);
  for (int i = 0; i < type->ndim; i++) {
    if (type->shape[i] && n > INT64_MAX / type->shape[i]) return -1;
    n *= type->shape[i];
  }
  return n;
}

int rill_type_equal(const rill_type_t* a, const rill_type_t* b) {
  if (!a || !b || !ndim_ok(a) || !ndim_ok(b)) return 0;
  return rill__type_same(a, b);
}

char* rill_type_format(const rill_type_t* type, char* buf, size_t size) {
  if (!buf || size == 0) return buf;
  if (!type) {
    snprintf(buf, size, "(null type)");
    return buf;
  }
  if (!ndim_ok(type)) {
    snprintf(buf, size, "%s[invalid ndim %d]", rill_dtype_name(type->dtype), type->ndim);
    return buf;
  }
  size_t len = (size_t)snprintf(buf, size, "%s", rill_dtype_name(type->dtype));
  if (type->ndim > 0 && len < size) {
    for (int i = 0; i < type->ndim && len < size; i++)
      len += (size_t)snprintf(buf + len, size - len, "%c%lld", i ? ',' : '[', (long long)type->shape[i]);
    if (len < size) snprintf(buf + len, size - len, "]");
  }
  return buf;
}
