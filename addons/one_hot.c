/* One-hot labels: int64 class indices to [classes] vectors of any numeric dtype (a map
 * column; null labels give null cells, labels outside [0, classes) are RILL_ERANGE). */
#include <string.h>

#include "addon.h"
#include "rill_addons.h"

typedef struct onehot {
  int64_t classes;
  rill_dtype_t dtype;
  rill_type_t out_type;
} onehot_t;

static void put_one(void* base, rill_dtype_t dt, int64_t k) {
  switch (dt) {
    case RILL_FLOAT32: ((float*)base)[k] = 1.0f; break;
    case RILL_FLOAT64: ((double*)base)[k] = 1.0; break;
    case RILL_FLOAT16: ((uint16_t*)base)[k] = 0x3c00; break;
    case RILL_BFLOAT16: ((uint16_t*)base)[k] = 0x3f80; break;
    case RILL_INT8: case RILL_UINT8: case RILL_BOOL: ((uint8_t*)base)[k] = 1; break;
    case RILL_INT16: case RILL_UINT16: ((uint16_t*)base)[k] = 1; break;
    case RILL_INT32: case RILL_UINT32: ((uint32_t*)base)[k] = 1; break;
    default: ((uint64_t*)base)[k] = 1; break;
  }
}

static int onehot_map(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* exec, void* ctx,
                      rill_error_t* err) {
  (void)nin;
  const onehot_t* oh = ctx;
  const rill_array_t* a = in[0];
  int rc = rill_exec_alloc(exec, out, oh->out_type, a->length);
  if (rc < 0) return rill_error_set(err, rc, "one_hot: cannot allocate the output");
  int64_t cell = rill_type_cell_bytes(&oh->out_type);
  const int64_t* labels = a->data;
  for (int64_t i = 0; i < a->length; i++) {
    uint8_t* d = (uint8_t*)out->data + i * cell;
    memset(d, 0, (size_t)cell);
    if (!rill_array_is_valid(a, i)) {
      if ((rc = rill_array_set_null(out, i)) < 0) return rill_error_set(err, rc, "one_hot: out of memory");
      continue;
    }
    int64_t v = labels[i];
    if (v < 0 || v >= oh->classes) {
      if (err) err->row = i;
      return rill_error_set(err, RILL_ERANGE, "one_hot: label %lld is outside [0, %lld)", (long long)v,
                            (long long)oh->classes);
    }
    put_one(d, oh->dtype, v);
  }
  return RILL_OK;
}

int rill_one_hot(rill_df_t* df, const char* name, int column, int64_t classes, rill_dtype_t dtype,
                 rill_error_t* err) {
  static const char* what = "one_hot";
  char tb[96];
  if (!df || !name || !*name) return rill__fail(err, RILL_EINVAL, "%s: NULL dataframe or empty name", what);
  const rill_field_t* f = rill_df_field(df, column);
  if (!f) return rill__bad_column(err, what, df, column);
  if (f->type.dtype != RILL_INT64 || f->type.ndim != 0)
    return rill__fail(err, RILL_EINVAL, "%s: column '%s' has type %s; expected int64 labels", what, f->name,
                      rill_type_format(&f->type, tb, sizeof tb));
  if (classes <= 0 || classes > (1 << 24))
    return rill__fail(err, RILL_EINVAL, "%s: classes %lld must be in [1, 16777216]", what, (long long)classes);
  rill_dtype_t dt = dtype ? dtype : RILL_FLOAT32;
  if (dt == RILL_STRING || dt == RILL_BINARY || dt == RILL_TIMESTAMP_US || rill_dtype_size(dt) == 0)
    return rill__fail(err, RILL_EINVAL, "%s: dtype %s is not numeric", what, rill_dtype_name(dt));
  onehot_t* oh = rill__calloc(1, sizeof *oh);
  if (!oh) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", what);
  oh->classes = classes;
  oh->dtype = dt;
  oh->out_type = rill_type_tensor(dt, 1, &classes);
  rill_stage_opts_t so = {.where = RILL_STAGE_CPU, .nullable = f->nullable};
  return rill_df_map(df, name, oh->out_type, &column, 1, onehot_map, oh, rill__free, &so, err);
}
