/* The native interchange view (rill_array_interchange): the Python dataframe interchange
 * protocol's Column and Buffers over a rill array, without copying.
 *
 * BOOL is kind BOOL with bit width 8 (rill stores one byte per value); STRING is kind STRING with a
 * data buffer of UINT 8 bytes and an offsets buffer of INT 64 ("l"); BINARY has no kind in
 * the protocol and is RILL_ENOTSUP; timestamps are DATETIME "tsu:UTC" over INT 64 data.
 * Tensor cells have no column form in the protocol: RILL_ENOTSUP (export them through Arrow
 * or DLPack). Nulls are a bit mask whose 0 bit means null; arrays without a validity bitmap
 * are non-nullable. */
#include <string.h>

#include "arrow_schema.h"

static rill_interchange_dtype_t dt(rill_interchange_kind_t kind, int bits, const char* format,
                                   char endianness) {
  rill_interchange_dtype_t d = {kind, bits, format, endianness};
  return d;
}

/* The protocol's dtype of a column of dtype d (format strings from the schema module); 0 when
 * the protocol has no kind for it. */
static int column_dtype(rill_dtype_t d, rill_interchange_dtype_t* out) {
  rill_interchange_kind_t kind;
  switch (d) {
  case RILL_BOOL: kind = RILL_KIND_BOOL; break;
  case RILL_INT8: case RILL_INT16: case RILL_INT32: case RILL_INT64: kind = RILL_KIND_INT; break;
  case RILL_UINT8: case RILL_UINT16: case RILL_UINT32: case RILL_UINT64: kind = RILL_KIND_UINT; break;
  case RILL_FLOAT16: case RILL_FLOAT32: case RILL_FLOAT64: kind = RILL_KIND_FLOAT; break;
  case RILL_STRING: kind = RILL_KIND_STRING; break;
  case RILL_TIMESTAMP_US: kind = RILL_KIND_DATETIME; break;
  default: return 0; /* BFLOAT16, BINARY */
  }
  int bits = d == RILL_STRING ? 8 : (int)rill_dtype_size(d) * 8;
  char endianness = (d != RILL_STRING && bits == 8) ? '|' : '=';
  *out = dt(kind, bits, rill__arrow_format(d), endianness);
  return 1;
}

int rill_array_interchange(const rill_array_t* a, rill_interchange_column_t* out) {
  if (a == NULL || out == NULL) return RILL_EINVAL;
  memset(out, 0, sizeof(*out));
  rill_interchange_dtype_t d;
  if (!column_dtype(a->type.dtype, &d)) return RILL_ENOTSUP; /* BFLOAT16, BINARY */
  if (a->type.ndim != 0) return RILL_ENOTSUP;                 /* tensor cells */
  rill_device_t dev = a->device;
  if (dev.type == 0) dev.type = RILL_DEVICE_CPU;
  out->size = a->length;
  out->offset = 0;
  out->dtype = d;
  out->null_count = a->null_count;
  if (a->validity != NULL) {
    out->null_kind = RILL_NULL_USE_BITMASK;
    out->null_value = 0;
    out->validity.ptr = a->validity;
    out->validity.bufsize = (a->length + 7) / 8;
    out->validity.device = dev;
    out->validity.dtype = dt(RILL_KIND_BOOL, 1, rill__arrow_format(RILL_BOOL), '=');
  } else {
    out->null_kind = RILL_NULL_NON_NULLABLE;
    out->null_value = 0;
  }
  out->data.ptr = a->data;
  out->data.device = dev;
  if (a->type.dtype == RILL_STRING) {
    int host = dev.type != RILL_DEVICE_CUDA;
    out->data.bufsize = (host && a->offsets != NULL) ? a->offsets[a->length] : a->data_size;
    out->data.dtype = dt(RILL_KIND_UINT, 8, rill__arrow_format(RILL_UINT8), '=');
    out->offsets.ptr = a->offsets;
    out->offsets.bufsize = a->offsets != NULL ? (a->length + 1) * (int64_t)sizeof(int64_t) : 0;
    out->offsets.device = dev;
    out->offsets.dtype = dt(RILL_KIND_INT, 64, rill__arrow_format(RILL_INT64), '=');
  } else {
    out->data.bufsize = a->length * (int64_t)rill_dtype_size(a->type.dtype);
    out->data.dtype = a->type.dtype == RILL_TIMESTAMP_US ? dt(RILL_KIND_INT, 64, rill__arrow_format(RILL_INT64), '=') : d;
  }
  return RILL_OK;
}
