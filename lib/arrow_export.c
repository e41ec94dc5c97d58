/* Arrow C Data Interface and C Device Data Interface export of rill arrays and rows. Schemas
 * come from the schema module (arrow_schema.c); this file builds the arrays.
 *
 * Every exported array node (parent or child) owns one private block holding its buffer
 * pointer table, its children structs, a reference on the rill array whose buffers it exposes
 * and any buffer it had to convert (bit-packed BOOL, int32 offsets and shapes of
 * variable-shape tensors). Children live inside their parent's block and have their own
 * release callbacks, so a consumer may move a child out (the parent then skips it) as the
 * specification allows. */
#include <inttypes.h>
#include <string.h>

#include "arrow_schema.h"

/* Buffers of empty arrays still get a valid, aligned, readable address. */
static _Alignas(64) const int64_t zero_buffer[8];

/* ---------------------------------------------------------------- array nodes */

typedef struct anode {
  const rill_array_t* ref;  /* the rill array whose buffers are exposed (a reference) */
  void* owned[2];           /* converted buffers */
  const void* buffers[3];
  struct ArrowArray** child_ptrs;
  struct ArrowArray* children;
  int64_t n_children;
} anode_t;

static void anode_free(anode_t* node);

static void array_release(struct ArrowArray* a) {
  if (a == NULL || a->release == NULL) return;
  anode_free(a->private_data);
  a->private_data = NULL;
  a->release = NULL;
}

/* Frees `node` (NULL: nothing) with its converted buffers, releasing the children set up so far
 * and the reference. */
static void anode_free(anode_t* node) {
  if (node == NULL) return;
  for (int64_t i = 0; i < node->n_children; i++)
    if (node->children[i].release != NULL) node->children[i].release(&node->children[i]);
  rill__free(node->owned[0]);
  rill__free(node->owned[1]);
  rill__free(node->child_ptrs);
  rill__free(node->children);
  rill_array_release(node->ref);
  rill__free(node);
}

static int array_init(struct ArrowArray* a, const rill_array_t* ref, int64_t length,
                      int64_t null_count, int64_t n_buffers, int64_t n_children) {
  memset(a, 0, sizeof(*a));
  anode_t* node = rill__calloc(1, sizeof(*node));
  if (node == NULL) return RILL_ENOMEM;
  if (n_children > 0) {
    node->child_ptrs = rill__calloc((size_t)n_children, sizeof(*node->child_ptrs));
    node->children = rill__calloc((size_t)n_children, sizeof(*node->children));
    if (node->child_ptrs == NULL || node->children == NULL) {
      anode_free(node);
      return RILL_ENOMEM;
    }
  }
  node->n_children = n_children;
  for (int64_t i = 0; i < n_children; i++) node->child_ptrs[i] = &node->children[i];
  node->ref = ref != NULL ? rill_array_retain(ref) : NULL;
  a->length = length;
  a->null_count = null_count;
  a->offset = 0;
  a->n_buffers = n_buffers;
  a->n_children = n_children;
  a->buffers = node->buffers;
  a->children = n_children > 0 ? node->child_ptrs : NULL;
  a->dictionary = NULL;
  a->private_data = node;
  a->release = array_release;
  return RILL_OK;
}

static anode_t* node_of(struct ArrowArray* a) { return a->private_data; }

/* ---------------------------------------------------------------- columns */

/* Bit-packs `n` one-byte booleans (nonzero = true). */
static uint8_t* pack_bools(const uint8_t* bytes, int64_t n) {
  int64_t nbytes = (n + 7) / 8;
  uint8_t* bits = rill__calloc((size_t)(nbytes > 0 ? nbytes : 1), 1);
  if (bits == NULL) return NULL;
  for (int64_t i = 0; i < n; i++)
    if (bytes[i]) bits[i >> 3] |= (uint8_t)(1u << (i & 7));
  return bits;
}

static int type_is_var_shape(const rill_type_t* t) {
  for (int i = 0; i < t->ndim; i++)
    if (t->shape[i] < 0) return 1;
  return 0;
}

typedef struct export_ctx {
  int on_device;   /* buffers are not host-accessible: no conversion possible */
  rill_error_t* err;
} export_ctx_t;

static int nomem(const export_ctx_t* cx, const char* name, struct ArrowArray* arr) {
  if (arr != NULL && arr->release != NULL) arr->release(arr);
  return rill__fail(cx->err, RILL_ENOMEM, "out of memory exporting column '%s'", name);
}

/* A flat primitive array ("item" children and scalar columns): `n` elements of dtype `d` at
 * `data`. BOOL bytes are packed (a copy). `validity` may be NULL. */
static int export_flat(const export_ctx_t* cx, const rill_array_t* ref, rill_dtype_t d,
                       const void* data, int64_t n, const uint8_t* validity, int64_t null_count,
                       const char* name, struct ArrowArray* arr) {
  if (d == RILL_BOOL && cx->on_device)
    return rill__fail(cx->err, RILL_ENOTSUP,
                      "column '%s': BOOL arrays on a CUDA device cannot be bit-packed for Arrow",
                      name);
  if (array_init(arr, ref, n, null_count, 2, 0) != RILL_OK) return nomem(cx, name, NULL);
  anode_t* node = node_of(arr);
  node->buffers[0] = null_count > 0 ? validity : NULL;
  if (d == RILL_BOOL) {
    node->owned[0] = pack_bools(data != NULL ? data : (const void*)zero_buffer, data != NULL ? n : 0);
    if (node->owned[0] == NULL) return nomem(cx, name, arr);
    node->buffers[1] = node->owned[0];
  } else {
    node->buffers[1] = data != NULL ? data : (const void*)zero_buffer;
  }
  return RILL_OK;
}

/* Fixed-shape tensor cells: fixed_size_list whose child holds every element. */
static int export_fixed_tensor(const export_ctx_t* cx, const rill_array_t* a, const char* name,
                               struct ArrowArray* arr) {
  int64_t cell = 1;
  for (int i = 0; i < a->type.ndim; i++) cell *= a->type.shape[i];
  if (array_init(arr, a, a->length, a->null_count > 0 ? a->null_count : 0, 1, 1) != RILL_OK)
    return nomem(cx, name, NULL);
  node_of(arr)->buffers[0] = a->null_count > 0 ? a->validity : NULL;
  int rc = export_flat(cx, a, a->type.dtype, a->data, a->length * cell, NULL, 0, name, arr->children[0]);
  if (rc != RILL_OK) arr->release(arr);
  return rc;
}

/* Variable-shape tensor cells: struct<data: list<T>, shape: fixed_size_list<int32>[ndim]>
 * (int32 offsets and shapes are converted copies). */
static int export_var_tensor(const export_ctx_t* cx, const rill_array_t* a, const char* name,
                             struct ArrowArray* arr) {
  if (cx->on_device)
    return rill__fail(cx->err, RILL_ENOTSUP,
                      "column '%s': variable-shape cells on a CUDA device cannot be exported "
                      "(their offsets need a conversion)", name);
  const rill_type_t* t = &a->type;
  int ndim = t->ndim;
  size_t esize = rill_dtype_size(t->dtype);
  int64_t n = a->length;
  int64_t total_bytes = (n > 0 && a->offsets != NULL) ? a->offsets[n] : 0;
  int64_t total = esize > 0 ? total_bytes / (int64_t)esize : 0;
  if (esize == 0 || total > INT32_MAX || n * ndim > INT32_MAX)
    return rill__fail(cx->err, esize == 0 ? RILL_ENOTSUP : RILL_ERANGE,
                      esize == 0 ? "column '%s': variable-shape cells of strings are not supported"
                                 : "column '%s': too many elements for arrow.variable_shape_tensor "
                                   "(int32 list offsets)", name);
  for (int64_t i = 0; i < n * ndim; i++)
    if (a->shapes != NULL && a->shapes[i] > INT32_MAX)
      return rill__fail(cx->err, RILL_ERANGE, "column '%s': a dimension exceeds int32", name);
  if (array_init(arr, a, n, a->null_count > 0 ? a->null_count : 0, 1, 2) != RILL_OK)
    return nomem(cx, name, NULL);
  node_of(arr)->buffers[0] = a->null_count > 0 ? a->validity : NULL;
  struct ArrowArray* ad = arr->children[0];
  struct ArrowArray* as = arr->children[1];
  if (array_init(ad, NULL, n, 0, 2, 1) != RILL_OK || array_init(as, NULL, n, 0, 1, 1) != RILL_OK ||
      array_init(as->children[0], NULL, n * ndim, 0, 2, 0) != RILL_OK)
    return nomem(cx, name, arr);
  /* list<T>: int32 element offsets */
  int32_t* offs = rill__alloc((size_t)(n + 1) * sizeof(int32_t));
  int32_t* shp = rill__alloc((size_t)(n * ndim > 0 ? n * ndim : 1) * sizeof(int32_t));
  node_of(ad)->owned[0] = offs;
  node_of(as->children[0])->owned[0] = shp;
  if (offs == NULL || shp == NULL) return nomem(cx, name, arr);
  for (int64_t i = 0; i <= n; i++)
    offs[i] = (a->offsets != NULL) ? (int32_t)(a->offsets[i] / (int64_t)esize) : 0;
  for (int64_t i = 0; i < n * ndim; i++) shp[i] = (int32_t)(a->shapes != NULL ? a->shapes[i] : 0);
  node_of(ad)->buffers[1] = offs;
  node_of(as->children[0])->buffers[1] = shp;
  int rc = export_flat(cx, a, t->dtype, a->data, total, NULL, 0, name, ad->children[0]);
  if (rc != RILL_OK) arr->release(arr);
  return rc;
}

/* The array of one column (its schema comes from rill__arrow_schema_for). */
static int export_column_array(const export_ctx_t* cx, const rill_array_t* a, const char* name,
                               int64_t null_count, struct ArrowArray* arr) {
  const rill_type_t* t = &a->type;
  if (t->ndim == 0) {
    if (t->dtype == RILL_STRING || t->dtype == RILL_BINARY) {
      if (array_init(arr, a, a->length, null_count, 3, 0) != RILL_OK) return nomem(cx, name, NULL);
      anode_t* node = node_of(arr);
      node->buffers[0] = null_count > 0 ? a->validity : NULL;
      node->buffers[1] = a->offsets != NULL ? (const void*)a->offsets : (const void*)zero_buffer;
      node->buffers[2] = a->data != NULL ? a->data : (const void*)zero_buffer;
      return RILL_OK;
    }
    return export_flat(cx, a, t->dtype, a->data, a->length, a->validity, null_count, name, arr);
  }
  if (type_is_var_shape(t)) return export_var_tensor(cx, a, name, arr);
  return export_fixed_tensor(cx, a, name, arr);
}

/* Exports one column. `nullable`: the field may hold nulls (schema flag). */
static int export_column(const export_ctx_t* cx, const rill_array_t* a, const char* name,
                         int nullable, struct ArrowSchema* s, struct ArrowArray* arr) {
  const rill_type_t* t = &a->type;
  if (rill__arrow_format(t->dtype) == NULL)
    return rill__fail(cx->err, RILL_EINVAL, "column '%s': unknown dtype %d", name, (int)t->dtype);
  if (t->ndim < 0 || t->ndim > RILL_MAX_NDIM)
    return rill__fail(cx->err, RILL_EINVAL, "column '%s': bad ndim %d", name, t->ndim);
  if (t->ndim > 0 && (t->dtype == RILL_STRING || t->dtype == RILL_BINARY))
    return rill__fail(cx->err, RILL_ENOTSUP,
                      "column '%s': tensor cells of %s cannot be exported to Arrow", name,
                      rill_dtype_name(t->dtype));
  int64_t flags = (nullable || a->null_count > 0) ? ARROW_FLAG_NULLABLE : 0;
  int64_t null_count = (a->null_count > 0 && a->validity != NULL) ? a->null_count : 0;
  int rc = export_column_array(cx, a, name, null_count, arr);
  if (rc != RILL_OK) return rc;
  if (rill__arrow_schema_for(t, name, flags, s) != RILL_OK) return nomem(cx, name, arr);
  return RILL_OK;
}

int rill_array_export_arrow(const rill_array_t* a, struct ArrowSchema* schema,
                            struct ArrowArray* array, rill_error_t* err) {
  if (schema != NULL) schema->release = NULL;
  if (array != NULL) array->release = NULL;
  if (a == NULL || schema == NULL || array == NULL)
    return rill__fail(err, RILL_EINVAL, "rill_array_export_arrow: NULL argument");
  if (a->device.type == RILL_DEVICE_CUDA)
    return rill__fail(err, RILL_EINVAL,
                      "rill_array_export_arrow: the array lives on CUDA device %d; use "
                      "rill_array_export_arrow_device", a->device.id);
  export_ctx_t cx = {0, err};
  return export_column(&cx, a, "", a->null_count > 0, schema, array);
}

int rill_array_export_arrow_device(const rill_array_t* a, struct ArrowDeviceArray* out,
                                   struct ArrowSchema* schema, rill_error_t* err) {
  if (schema != NULL) schema->release = NULL;
  if (out != NULL) memset(out, 0, sizeof(*out));
  if (a == NULL || schema == NULL || out == NULL)
    return rill__fail(err, RILL_EINVAL, "rill_array_export_arrow_device: NULL argument");
  export_ctx_t cx = {a->device.type == RILL_DEVICE_CUDA, err};
  int rc = export_column(&cx, a, "", a->null_count > 0, schema, &out->array);
  if (rc != RILL_OK) return rc;
  switch (a->device.type) {
  case RILL_DEVICE_CUDA:
    out->device_type = ARROW_DEVICE_CUDA;
    out->device_id = a->device.id;
    break;
  case RILL_DEVICE_CUDA_HOST:
    out->device_type = ARROW_DEVICE_CUDA_HOST;
    out->device_id = a->device.id;
    break;
  default:
    out->device_type = ARROW_DEVICE_CPU;
    out->device_id = -1;
    break;
  }
  /* The event object lives in the array, which the export keeps alive. */
  out->sync_event = a->event != NULL ? (void*)&((rill_array_t*)a)->event : NULL;
  return RILL_OK;
}

int rill_row_export_arrow(const rill_row_t* row, const rill_df_t* df, const int* columns,
                          struct ArrowSchema* schema, struct ArrowArray* array,
                          rill_error_t* err) {
  if (schema != NULL) schema->release = NULL;
  if (array != NULL) array->release = NULL;
  if (row == NULL || df == NULL || schema == NULL || array == NULL)
    return rill__fail(err, RILL_EINVAL, "rill_row_export_arrow: NULL argument");
  int n = row->ncolumns;
  if (n < 0 || (n > 0 && row->columns == NULL))
    return rill__fail(err, RILL_EINVAL, "rill_row_export_arrow: the row holds no columns");
  int64_t length = 0;
  for (int i = 0; i < n; i++) {
    int col = columns != NULL ? columns[i] : i;
    const rill_field_t* f = rill_df_field(df, col);
    const rill_array_t* a = row->columns[i];
    if (f == NULL)
      return rill__bad_column(err, "rill_row_export_arrow", df, col);
    if (a == NULL)
      return rill__fail(err, RILL_EINVAL, "rill_row_export_arrow: column '%s' has no array",
                        f->name);
    if (a->device.type == RILL_DEVICE_CUDA)
      return rill__fail(err, RILL_EINVAL,
                        "rill_row_export_arrow: column '%s' lives on CUDA device %d", f->name,
                        a->device.id);
    if (i == 0) length = a->length;
    else if (a->length != length)
      return rill__fail(err, RILL_EINVAL,
                        "rill_row_export_arrow: column '%s' has %" PRId64 " cells, expected %" PRId64,
                        f->name, a->length, length);
  }
  export_ctx_t cx = {0, err};
  if (rill__arrow_schema_init(schema, "+s", "", NULL, 0, n) != RILL_OK)
    return rill__fail(err, RILL_ENOMEM, "out of memory exporting a row");
  if (array_init(array, NULL, length, 0, 1, n) != RILL_OK) {
    schema->release(schema);
    return rill__fail(err, RILL_ENOMEM, "out of memory exporting a row");
  }
  for (int i = 0; i < n; i++) {
    const rill_field_t* f = rill_df_field(df, columns != NULL ? columns[i] : i);
    int rc = export_column(&cx, row->columns[i], f->name, f->nullable, schema->children[i],
                           array->children[i]);
    if (rc != RILL_OK) {
      array->release(array);
      schema->release(schema);
      return rc;
    }
  }
  return RILL_OK;
}
