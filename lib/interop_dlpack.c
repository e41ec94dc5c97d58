/* DLPack export of fixed-shape arrays: one allocation holds the managed tensor, its shape
 * and strides; the manager context is a reference on the rill array. */
#include <inttypes.h>
#include <string.h>

#include "internal.h"
#include "rill_interop.h"

typedef struct dl_holder {
  DLManagedTensorVersioned versioned;
  DLManagedTensor legacy;
  const rill_array_t* ref;
  int64_t shape[RILL_MAX_NDIM + 1];
  int64_t strides[RILL_MAX_NDIM + 1];
} dl_holder_t;

static void holder_free(dl_holder_t* h) {
  rill_array_release(h->ref);
  rill__free(h);
}

static void delete_versioned(DLManagedTensorVersioned* self) {
  if (self != NULL) holder_free(self->manager_ctx);
}

static void delete_legacy(DLManagedTensor* self) {
  if (self != NULL) holder_free(self->manager_ctx);
}

static int dl_dtype(rill_dtype_t d, DLDataType* out) {
  out->lanes = 1;
  switch (d) {
  case RILL_BOOL: out->code = kDLBool; out->bits = 8; return 1;
  case RILL_INT8: out->code = kDLInt; out->bits = 8; return 1;
  case RILL_INT16: out->code = kDLInt; out->bits = 16; return 1;
  case RILL_INT32: out->code = kDLInt; out->bits = 32; return 1;
  case RILL_INT64: case RILL_TIMESTAMP_US: out->code = kDLInt; out->bits = 64; return 1;
  case RILL_UINT8: out->code = kDLUInt; out->bits = 8; return 1;
  case RILL_UINT16: out->code = kDLUInt; out->bits = 16; return 1;
  case RILL_UINT32: out->code = kDLUInt; out->bits = 32; return 1;
  case RILL_UINT64: out->code = kDLUInt; out->bits = 64; return 1;
  case RILL_FLOAT16: out->code = kDLFloat; out->bits = 16; return 1;
  case RILL_BFLOAT16: out->code = kDLBfloat; out->bits = 16; return 1;
  case RILL_FLOAT32: out->code = kDLFloat; out->bits = 32; return 1;
  case RILL_FLOAT64: out->code = kDLFloat; out->bits = 64; return 1;
  case RILL_STRING: case RILL_BINARY: return 0;
  }
  return 0;
}

/* Checks `a` and makes a holder with both managed forms (versioned and legacy) filled in, then
 * hands out the one asked for: exactly one of `versioned` and `legacy` is non-NULL for a
 * well-formed call (both NULL: the caller passed out = NULL). The pointer handed out is NULL on
 * failure. */
static int export_holder(const rill_array_t* a, const char* fn, DLManagedTensorVersioned** versioned,
                         DLManagedTensor** legacy, rill_error_t* err) {
  if (versioned != NULL) *versioned = NULL;
  if (legacy != NULL) *legacy = NULL;
  if (a == NULL || (versioned == NULL && legacy == NULL))
    return rill__fail(err, RILL_EINVAL, "%s: NULL argument", fn);
  DLDataType dt;
  if (!dl_dtype(a->type.dtype, &dt))
    return rill__fail(err, RILL_EINVAL, "%s: %s arrays are variable-length and have no DLPack form",
                      fn, rill_dtype_name(a->type.dtype));
  if (a->type.ndim < 0 || a->type.ndim > RILL_MAX_NDIM)
    return rill__fail(err, RILL_EINVAL, "%s: bad ndim %d", fn, a->type.ndim);
  for (int i = 0; i < a->type.ndim; i++)
    if (a->type.shape[i] < 0)
      return rill__fail(err, RILL_EINVAL,
                        "%s: cells of variable shape cannot be one DLPack tensor", fn);
  if (a->null_count > 0)
    return rill__fail(err, RILL_EINVAL,
                      "%s: the array has %" PRId64 " null cells; DLPack cannot express nulls", fn,
                      a->null_count);
  dl_holder_t* h = rill__calloc(1, sizeof(*h));
  if (h == NULL) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", fn);
  int ndim = a->type.ndim + 1;
  h->shape[0] = a->length;
  for (int i = 1; i < ndim; i++) h->shape[i] = a->type.shape[i - 1];
  int64_t stride = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    h->strides[i] = stride;
    stride *= h->shape[i] > 0 ? h->shape[i] : 1;
  }
  DLTensor* t = &h->versioned.dl_tensor;
  static _Alignas(64) const int64_t empty[8];
  t->data = a->data != NULL ? a->data : (void*)empty;
  switch (a->device.type) {
  case RILL_DEVICE_CUDA: t->device.device_type = kDLCUDA; t->device.device_id = a->device.id; break;
  case RILL_DEVICE_CUDA_HOST: t->device.device_type = kDLCUDAHost; t->device.device_id = 0; break;
  default: t->device.device_type = kDLCPU; t->device.device_id = 0; break;
  }
  t->ndim = ndim;
  t->dtype = dt;
  t->shape = h->shape;
  t->strides = h->strides;
  t->byte_offset = 0;
  h->versioned.version.major = DLPACK_MAJOR_VERSION;
  h->versioned.version.minor = DLPACK_MINOR_VERSION;
  h->versioned.manager_ctx = h;
  h->versioned.deleter = delete_versioned;
  h->versioned.flags = DLPACK_FLAG_BITMASK_READ_ONLY;
  h->legacy.dl_tensor = *t;
  h->legacy.manager_ctx = h;
  h->legacy.deleter = delete_legacy;
  h->ref = rill_array_retain(a);
  if (versioned != NULL) *versioned = &h->versioned;
  else *legacy = &h->legacy;
  return RILL_OK;
}

int rill_array_export_dlpack(const rill_array_t* a, DLManagedTensorVersioned** out,
                             rill_error_t* err) {
  return export_holder(a, "rill_array_export_dlpack", out, NULL, err);
}

int rill_array_export_dlpack_legacy(const rill_array_t* a, DLManagedTensor** out,
                                    rill_error_t* err) {
  return export_holder(a, "rill_array_export_dlpack_legacy", NULL, out, err);
}
