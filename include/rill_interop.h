/* rill interop: hand rill arrays, rows and whole dataframes to other libraries and take
 * theirs.
 *
 *   - The Arrow C Data Interface (ArrowSchema / ArrowArray), the C Stream Interface
 *     (ArrowArrayStream) and the C Device Data Interface (ArrowDeviceArray,
 *     ArrowDeviceArrayStream), each under its standard include guard so that this header
 *     coexists with other producers' copies of the same ABI.
 *   - The DLPack ABI (DLManagedTensorVersioned 1.x and the legacy DLManagedTensor) under
 *     DLPack's own include guard.
 *   - rill's exporters and the Arrow importer.
 *   - Option structs grow by the rule of "Option structs" in rill.h (no _ex functions).
 *
 * Ownership: every export holds a reference on the rill array(s) it exposes (zero-copy), so
 * the consumer may keep the data after the iterator, the dataframe and every other rill
 * object are gone. The release callbacks / deleters drop that reference. They may be called
 * from any thread.
 *
 * Type mapping (Arrow format strings):
 *   BOOL -> "b" (bit-packed on export: a copy; rill stores one byte per value)
 *   INT8..INT64 -> "c" "s" "i" "l";  UINT8..UINT64 -> "C" "S" "I" "L"
 *   FLOAT16 -> "e";  FLOAT32 -> "f";  FLOAT64 -> "g"
 *   BFLOAT16 -> "S" (the raw 16-bit patterns) with field metadata "rill.dtype" = "bfloat16";
 *     Arrow has no bfloat16 type. rill_df_from_arrow reads that metadata back as BFLOAT16.
 *   STRING -> "U" (large_utf8), BINARY -> "Z" (large_binary): zero-copy (int64 offsets)
 *   TIMESTAMP_US -> "tsu:UTC"
 *   fixed-shape tensor cells [d0, d1, ...] -> "+w:N" (N = d0*d1*...) whose child "item" holds
 *     the elements, with the extension "arrow.fixed_shape_tensor" and its metadata
 *     {"shape":[d0,d1,...]} (zero-copy except for BOOL elements)
 *   variable-shape tensor cells -> "arrow.variable_shape_tensor": a struct of
 *     data: list<T> (int32 element offsets: converted) and shape: fixed_size_list<int32>[ndim]
 *     (converted), with metadata {"uniform_shape":[...]} giving the fixed dimensions
 */
#ifndef RILL_INTEROP_H
#define RILL_INTEROP_H

#include <stdint.h>

#include "rill.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ================================================================ Arrow C Data Interface */

#ifndef ARROW_C_DATA_INTERFACE
#define ARROW_C_DATA_INTERFACE

#define ARROW_FLAG_DICTIONARY_ORDERED 1
#define ARROW_FLAG_NULLABLE 2
#define ARROW_FLAG_MAP_KEYS_SORTED 4

struct ArrowSchema {
  /* Array type description */
  const char* format;
  const char* name;
  const char* metadata;
  int64_t flags;
  int64_t n_children;
  struct ArrowSchema** children;
  struct ArrowSchema* dictionary;
  /* Release callback */
  void (*release)(struct ArrowSchema*);
  /* Opaque producer-specific data */
  void* private_data;
};

struct ArrowArray {
  /* Array data description */
  int64_t length;
  int64_t null_count;
  int64_t offset;
  int64_t n_buffers;
  int64_t n_children;
  const void** buffers;
  struct ArrowArray** children;
  struct ArrowArray* dictionary;
  /* Release callback */
  void (*release)(struct ArrowArray*);
  /* Opaque producer-specific data */
  void* private_data;
};

#endif /* ARROW_C_DATA_INTERFACE */

/* ================================================================ Arrow C Device Data Interface */

#ifndef ARROW_C_DEVICE_DATA_INTERFACE
#define ARROW_C_DEVICE_DATA_INTERFACE

/* Device codes: the same values as DLPack's DLDeviceType. */
typedef int32_t ArrowDeviceType;

#define ARROW_DEVICE_CPU 1
#define ARROW_DEVICE_CUDA 2
#define ARROW_DEVICE_CUDA_HOST 3
#define ARROW_DEVICE_OPENCL 4
#define ARROW_DEVICE_VULKAN 7
#define ARROW_DEVICE_METAL 8
#define ARROW_DEVICE_VPI 9
#define ARROW_DEVICE_ROCM 10
#define ARROW_DEVICE_ROCM_HOST 11
#define ARROW_DEVICE_EXT_DEV 12
#define ARROW_DEVICE_CUDA_MANAGED 13
#define ARROW_DEVICE_ONEAPI 14
#define ARROW_DEVICE_WEBGPU 15
#define ARROW_DEVICE_HEXAGON 16

struct ArrowDeviceArray {
  /* the array (its buffers live on the device below) */
  struct ArrowArray array;
  /* which device of that type, or -1 when not applicable (CPU) */
  int64_t device_id;
  ArrowDeviceType device_type;
  /* an event (e.g. a pointer to a cudaEvent_t) the consumer waits on before reading, or NULL */
  void* sync_event;
  /* reserved for future use: must be zero */
  int64_t reserved[3];
};

#endif /* ARROW_C_DEVICE_DATA_INTERFACE */

/* ================================================================ Arrow C Stream Interface */

#ifndef ARROW_C_STREAM_INTERFACE
#define ARROW_C_STREAM_INTERFACE

struct ArrowArrayStream {
  /* The schema of every array of the stream. Returns 0 or an errno-compatible code. */
  int (*get_schema)(struct ArrowArrayStream*, struct ArrowSchema* out);
  /* The next array; out->release == NULL marks the end. Returns 0 or an errno code. */
  int (*get_next)(struct ArrowArrayStream*, struct ArrowArray* out);
  /* Text of the last error (valid until the next call), or NULL. */
  const char* (*get_last_error)(struct ArrowArrayStream*);
  /* Release callback */
  void (*release)(struct ArrowArrayStream*);
  /* Opaque producer-specific data */
  void* private_data;
};

#endif /* ARROW_C_STREAM_INTERFACE */

#ifndef ARROW_C_DEVICE_STREAM_INTERFACE
#define ARROW_C_DEVICE_STREAM_INTERFACE

struct ArrowDeviceArrayStream {
  ArrowDeviceType device_type;
  int (*get_schema)(struct ArrowDeviceArrayStream*, struct ArrowSchema* out);
  int (*get_next)(struct ArrowDeviceArrayStream*, struct ArrowDeviceArray* out);
  const char* (*get_last_error)(struct ArrowDeviceArrayStream*);
  void (*release)(struct ArrowDeviceArrayStream*);
  void* private_data;
};

#endif /* ARROW_C_DEVICE_STREAM_INTERFACE */

/* ================================================================ DLPack */

#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_

#ifndef DLPACK_EXTERN_C
#ifdef __cplusplus
#define DLPACK_EXTERN_C extern "C"
#else
#define DLPACK_EXTERN_C
#endif
#endif

#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 0

#ifndef DLPACK_DLL
#define DLPACK_DLL
#endif

typedef struct {
  uint32_t major;
  uint32_t minor;
} DLPackVersion;

typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U
} DLDataTypeCode;

typedef struct {
  uint8_t code;   /* a DLDataTypeCode */
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

typedef struct {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;     /* in elements; NULL means compact row-major */
  uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensor* self);
} DLManagedTensor;

#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1UL << 2UL)

typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

#endif /* DLPACK_DLPACK_H_ */

/* ================================================================ rill exports */

/* Exports `a` as one Arrow array (see the type mapping at the top of this header).
 * `schema` and `array` are caller-owned structs that this call fills; the caller (or the
 * consumer it hands them to) must call each one's release callback exactly once.
 * Zero-copy except where noted; the export holds a reference on `a`.
 * Returns RILL_OK; RILL_EINVAL for NULL arguments or an array that lives on a CUDA device
 * (use rill_array_export_arrow_device); RILL_ERANGE when a variable-shape array has more
 * than INT32_MAX elements; RILL_ENOMEM. On failure nothing is filled (release == NULL). */
RILL_API int rill_array_export_arrow(const rill_array_t* a, struct ArrowSchema* schema,
                                     struct ArrowArray* array, rill_error_t* err);

/* As rill_array_export_arrow, for arrays on any device: device_type/device_id come from the
 * array (CPU: ARROW_DEVICE_CPU, id -1), sync_event points at the array's cudaEvent_t
 * (a->event) when it has one, else NULL. BOOL and variable-shape arrays on a CUDA device need
 * a conversion on the device: RILL_ENOTSUP. */
RILL_API int rill_array_export_arrow_device(const rill_array_t* a, struct ArrowDeviceArray* out,
                                            struct ArrowSchema* schema, rill_error_t* err);

/* Exports the arrays of `row` (from rill_iter_next) as one record batch: a struct array
 * ("+s") whose children are the row's columns. `df` is the iterated dataframe; `columns`
 * lists the dataframe column index of each row column (the iterator's opts.columns), or
 * NULL when the row holds columns 0..ncolumns-1. Names and nullable flags come from the
 * dataframe's fields. All columns must have the same length. The export holds references:
 * it stays valid after the iterator advances. Returns RILL_OK, RILL_EINVAL, RILL_ENOMEM. */
RILL_API int rill_row_export_arrow(const rill_row_t* row, const rill_df_t* df, const int* columns,
                                   struct ArrowSchema* schema, struct ArrowArray* array,
                                   rill_error_t* err);

/* Deprecated: rill_iter_opts_t.batch_rows replaces these options (option structs grow by
 * the rule of "Option structs" in rill.h, not by _ex functions). */
typedef struct rill_arrow_stream_opts {
  /* Rows per record batch when the dataframe is not batched; 0 = 65536. A batched dataframe
   * (made by rill_df_batch) gives one record batch per batch. */
  int64_t batch_rows;
} rill_arrow_stream_opts_t;

/* The whole dataframe as an Arrow stream of record batches, pulled and computed on demand
 * through an iterator built with `opts` (NULL: defaults; opts->columns selects columns,
 * opts->batch_rows the rows per record batch of a dataframe that is not batched).
 * get_schema works before the first batch. A row that fails makes get_next return EIO and
 * get_last_error the rill message (row, column and cause). The stream holds a reference on
 * the dataframe (it stays valid after rill_df_free). `out` is filled; release it once. */
RILL_API int rill_df_export_stream(rill_df_t* df, const rill_iter_opts_t* opts,
                                   struct ArrowArrayStream* out, rill_error_t* err);
/* Deprecated alias: rill_df_export_stream with opts->batch_rows = sopts->batch_rows (when
 * sopts is not NULL and sopts->batch_rows is not 0). */
RILL_API int rill_df_export_stream_ex(rill_df_t* df, const rill_iter_opts_t* opts,
                                      const rill_arrow_stream_opts_t* sopts,
                                      struct ArrowArrayStream* out, rill_error_t* err);

/* Exports fixed-shape numeric (and BOOL, one byte per value) arrays without nulls as a
 * DLPack 1.x tensor of shape [length, shape...] with shape and strides always filled and
 * byte_offset 0; the device comes from the array. The flags carry
 * DLPACK_FLAG_BITMASK_READ_ONLY: rill's buffers may be shared with other consumers and must
 * not be written. `*out` is owned by the caller: call (*out)->deleter(*out) once.
 * TIMESTAMP_US is exported as int64 microseconds, BFLOAT16 as DLPack's bfloat.
 * Returns RILL_OK; RILL_EINVAL with a message for arrays with nulls, STRING/BINARY arrays,
 * variable shapes or NULL arguments; RILL_ENOMEM. */
RILL_API int rill_array_export_dlpack(const rill_array_t* a, DLManagedTensorVersioned** out,
                                      rill_error_t* err);
/* The same as the legacy (pre-1.0, unversioned) DLManagedTensor. */
RILL_API int rill_array_export_dlpack_legacy(const rill_array_t* a, DLManagedTensor** out,
                                             rill_error_t* err);

/* ================================================================ Arrow import */

/* A dataframe whose source columns hold the data of an Arrow stream of record batches
 * (struct arrays). The stream is consumed and released (also on failure). All batches are
 * read now; the dataframe has the total row count and one rill array per column.
 * Zero-copy: when the stream yields exactly one non-empty batch (and always for
 * rill_df_from_arrow_batch), a column whose layout is rill's is wrapped (rill_array_wrap), not
 * copied, and the imported ArrowArray is released once, after the dataframe and every array
 * that shares its buffers (exports, slices, retained arrays) are gone. The batch must not be
 * written meanwhile. Wrapped, provided the struct has no nulls of its own and the buffers are
 * aligned to their element type:
 *   fixed-width numbers (c s i l C S I L e f g, bfloat16 "S") and "tsu:<tz>", at any offset
 *     (applied to the data pointer) when the column has no validity bitmap, or when its
 *     offset (struct offset + column offset) is a multiple of 8;
 *   U and Z (int64 offsets) whose first offset is 0, under the same bitmap rule;
 *   +w:N of numbers whose child has no nulls (the tensor cells are the child's values).
 * Everything else is copied into fresh 64-byte aligned rill buffers: several batches, bool
 * (bits to bytes), u and z (int32 offsets), views, other timestamp units, U/Z offsets not
 * starting at 0, bitmaps at a bit offset, fixed_size_list children with nulls or of bool,
 * variable_shape_tensor.
 * Formats: c s i l C S I L (ints), e f g (floats), b (bool, unpacked), u U vu (utf8; int32
 * offsets widened, views copied), z Z vz (binary), ts{s,m,u,n}:<any tz> (to microseconds),
 * +w:N of a numeric/bool element (tensor cells [N], or the shape of an
 * arrow.fixed_shape_tensor extension), arrow.variable_shape_tensor of numeric elements
 * (variable cells: dimensions that uniform_shape fixes stay fixed in the type, the others
 * are -1), "S" with "rill.dtype"="bfloat16" metadata.
 * Anything else: RILL_ENOTSUP naming the column and the format string. Nulls are kept
 * (columns with nulls are nullable). Returns RILL_OK, RILL_EINVAL, RILL_ENOTSUP,
 * RILL_EFORMAT (malformed arrays, a stream error: its get_last_error text), RILL_ENOMEM. */
RILL_API int rill_df_from_arrow(struct ArrowArrayStream* stream, rill_df_t** out, rill_error_t* err);
/* The same for one record batch: `schema` must be a struct ("+s"); both are released. */
RILL_API int rill_df_from_arrow_batch(struct ArrowSchema* schema, struct ArrowArray* array,
                                      rill_df_t** out, rill_error_t* err);

#ifdef __cplusplus
}
#endif
#endif /* RILL_INTEROP_H */
