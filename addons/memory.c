/* Memory source: a dataframe whose columns are caller arrays (referenced or deep-copied). */
#include <string.h>

#include "addon.h"
#include "rill_addons.h"

/* Gathers the cells of `rows` from the column's array into `out`. Consecutive rows of a
 * fixed-shape column without nulls never get here: the engine takes them from memory_lend
 * without a copy. */
static int memory_source(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* exec, void* ctx,
                         rill_error_t* err) {
  const rill_array_t* a = ctx;
  int r = rill_exec_alloc(exec, out, a->type, n);
  if (r != RILL_OK) return rill_error_set(err, r, "cannot allocate %lld cells", (long long)n);
  if (rill_type_is_fixed(&a->type)) {
    int64_t cb = rill_type_cell_bytes(&a->type);
    uint8_t* dst = out->data;
    const uint8_t* src = a->data;
    int64_t i = 0;
    while (i < n) {
      int64_t j = i + 1;
      while (j < n && rows[j] == rows[j - 1] + 1) j++; /* a run of consecutive rows: one copy */
      if (cb > 0) memcpy(dst + i * cb, src + rows[i] * cb, (size_t)((j - i) * cb));
      i = j;
    }
  } else {
    for (int64_t i = 0; i < n; i++) {
      int64_t nb, shape[RILL_MAX_NDIM] = {0};
      const void* p = rill_array_cell(a, rows[i], &nb);
      if (a->shapes) rill_array_cell_shape(a, rows[i], shape);
      r = rill_array_set_var(out, i, p, nb, shape);
      if (r != RILL_OK) return rill_error_set(err, r, "cannot store cell of row %lld", (long long)rows[i]);
    }
  }
  if (a->validity && a->null_count > 0) {
    for (int64_t i = 0; i < n; i++) {
      if (rill__bit_get(a->validity, rows[i])) continue;
      r = rill_array_set_null(out, i);
      if (r != RILL_OK) return rill_error_set(err, r, "cannot mark row %lld null", (long long)rows[i]);
    }
  }
  return RILL_OK;
}

/* The zero-copy path (rill__lend_fn): consecutive rows of a fixed-shape host column without
 * nulls are a slice of the caller's array. */
static int memory_lend(void* ctx, int64_t start, int64_t n, rill_array_t** out) {
  const rill_array_t* a = ctx;
  *out = NULL;
  if (!rill_type_is_fixed(&a->type) || (a->device.type != 0 && a->device.type != RILL_DEVICE_CPU) ||
      (a->validity && a->null_count > 0))
    return RILL_ENOTSUP;
  return rill_array_slice(a, start, n, out, NULL);
}

static void release_array(void* ctx) { rill_array_release(ctx); }

int rill_df_from_arrays(const char* const* names, const rill_array_t* const* arrays, int ncolumns, int copy,
                        rill_df_t** out, rill_error_t* err) {
  const char* who = "rill_df_from_arrays";
  if (!out) return rill__fail(err, RILL_EINVAL, "%s: out is NULL", who);
  *out = NULL;
  if (ncolumns < 0) return rill__fail(err, RILL_EINVAL, "%s: negative column count %d", who, ncolumns);
  if (ncolumns > 0 && (!names || !arrays)) return rill__fail(err, RILL_EINVAL, "%s: names or arrays is NULL", who);
  int64_t rows = 0;
  for (int c = 0; c < ncolumns; c++) {
    const rill_array_t* a = arrays[c];
    if (!a) return rill__fail(err, RILL_EINVAL, "%s: array %d is NULL", who, c);
    if (!names[c]) return rill__fail(err, RILL_EINVAL, "%s: name %d is NULL", who, c);
    if (a->device.type != 0 && a->device.type != RILL_DEVICE_CPU && a->device.type != RILL_DEVICE_CUDA_HOST)
      return rill__fail(err, RILL_ENOTSUP, "%s: column '%s' is in device memory", who, names[c]);
    if (c == 0) rows = a->length;
    if (a->length != rows)
      return rill__fail(err, RILL_EINVAL, "%s: column '%s' has %lld rows, column '%s' has %lld", who, names[c],
                        (long long)a->length, names[0], (long long)rows);
  }
  rill_df_t* df;
  int r = rill_df_new(rows, &df, err);
  if (r != RILL_OK) return r;
  for (int c = 0; c < ncolumns; c++) {
    rill_array_t* a;
    if (copy) {
      r = rill_array_copy(arrays[c], &a, err);
      if (r != RILL_OK) {
        rill_df_free(df);
        return r;
      }
    } else {
      a = rill_array_retain(arrays[c]);
    }
    rill_stage_opts_t o = {.nullable = a->validity != NULL};
    r = rill_df_add_source(df, names[c], a->type, memory_source, a, release_array, &o, err);
    if (r < 0) {
      rill_df_free(df);
      return r;
    }
    r = rill__df_set_lend(df, r, memory_lend, err);
    if (r != RILL_OK) {
      rill_df_free(df);
      return r;
    }
  }
  *out = df;
  return RILL_OK;
}
