/* Arrow import: a dataframe whose source columns hold the data of Arrow record batches
 * (from pyarrow, pandas, polars or any producer of the C Data / C Stream Interfaces).
 * All batches are read. When there is exactly one batch, each column whose Arrow layout is
 * rill's layout is wrapped without copying (rill_array_wrap) and a shared, reference-counted
 * holder keeps the imported batch alive until the last wrapped array goes. Every other
 * column is copied (converting where rill's layout differs: bit-packed booleans, int32
 * offsets, timestamp units, string views, several batches) into one rill array; the
 * dataframe is made by rill_df_from_arrays. */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "arrow_schema.h"
#include "rill_addons.h"

typedef struct column {
  const char* name;     /* borrowed from the schema (kept until the end) */
  char format[64];      /* for messages */
  rill__arrow_field_t f; /* rill type and Arrow layout */
  int64_t var_cap;      /* RILL__ARROW_VAR_TENSOR: bytes reserved in out */
  rill_array_t* out;
} column_t;

/* The imported batch of a single-batch import, shared by the arrays that wrap its buffers. */
typedef struct holder {
  atomic_int_fast64_t refs;
  struct ArrowArray batch;
} holder_t;

typedef struct import {
  struct ArrowSchema schema;
  holder_t* holder;     /* single batch: owns it (batches[0] is a copy with release NULL) */
  struct ArrowArray* batches;
  int64_t nbatches, cap;
  column_t* cols;
  int64_t ncols;
  int64_t rows;
} import_t;

/* ---------------------------------------------------------------- schema */

static int unsupported(const char* name, const char* format, const char* why, rill_error_t* err) {
  return rill__fail(err, RILL_ENOTSUP, "rill_df_from_arrow: column '%s' has Arrow format \"%s\"%s",
                    name, format, why);
}

static int column_type(const struct ArrowSchema* s, column_t* c, rill_error_t* err) {
  c->name = s->name != NULL ? s->name : "";
  snprintf(c->format, sizeof c->format, "%s", s->format);
  const char* why;
  if (rill__arrow_field_type(s, &c->f, &why) != RILL_OK) return unsupported(c->name, s->format, why, err);
  return RILL_OK;
}

/* ---------------------------------------------------------------- batches */

static void holder_release(void* ctx) {
  holder_t* h = ctx;
  if (atomic_fetch_sub(&h->refs, 1) != 1) return;
  if (h->batch.release != NULL) h->batch.release(&h->batch);
  rill__free(h);
}

static void import_free(import_t* im) {
  for (int64_t i = 0; i < im->nbatches; i++)
    if (im->batches[i].release != NULL) im->batches[i].release(&im->batches[i]);
  rill__free(im->batches);
  if (im->cols != NULL)
    for (int64_t i = 0; i < im->ncols; i++) rill_array_release(im->cols[i].out);
  rill__free(im->cols);
  if (im->holder != NULL) holder_release(im->holder); /* after the columns: the last reference */
  if (im->schema.release != NULL) im->schema.release(&im->schema);
}

static int read_schema(import_t* im, rill_error_t* err) {
  const struct ArrowSchema* s = &im->schema;
  if (s->format == NULL || strcmp(s->format, "+s") != 0)
    return rill__fail(err, RILL_EINVAL,
                      "rill_df_from_arrow: expected a record batch (struct \"+s\"), got format \"%s\"",
                      s->format != NULL ? s->format : "(null)");
  im->ncols = s->n_children;
  if (im->ncols <= 0)
    return rill__fail(err, RILL_EINVAL, "rill_df_from_arrow: the record batch has no columns");
  im->cols = rill__calloc((size_t)im->ncols, sizeof(column_t));
  if (im->cols == NULL) return rill__fail(err, RILL_ENOMEM, "rill_df_from_arrow: out of memory");
  for (int64_t i = 0; i < im->ncols; i++) {
    int rc = column_type(s->children[i], &im->cols[i], err);
    if (rc != RILL_OK) return rc;
  }
  return RILL_OK;
}

/* Takes the batch over (moves the struct). */
static int add_batch(import_t* im, struct ArrowArray* b, rill_error_t* err) {
  if (b->n_children != im->ncols || b->length < 0) {
    b->release(b);
    return rill__fail(err, RILL_EFORMAT,
                      "rill_df_from_arrow: batch %" PRId64 " has %" PRId64 " columns, the schema %" PRId64,
                      im->nbatches, b->n_children, im->ncols);
  }
  for (int64_t i = 0; i < im->ncols; i++) {
    const struct ArrowArray* c = b->children[i];
    if (c == NULL || c->length < b->offset + b->length) {
      b->release(b);
      return rill__fail(err, RILL_EFORMAT,
                        "rill_df_from_arrow: batch %" PRId64 ", column '%s': %" PRId64
                        " values for %" PRId64 " rows", im->nbatches, im->cols[i].name, c->length,
                        b->length);
    }
  }
  if (im->nbatches == im->cap) {
    int64_t cap = im->cap ? im->cap * 2 : 16;
    struct ArrowArray* nb = rill__realloc(im->batches, (size_t)im->cap * sizeof(*nb),
                                          (size_t)cap * sizeof(*nb));
    if (nb == NULL) {
      b->release(b);
      return rill__fail(err, RILL_ENOMEM, "rill_df_from_arrow: out of memory");
    }
    im->batches = nb;
    im->cap = cap;
  }
  im->batches[im->nbatches++] = *b;
  b->release = NULL;
  im->rows += im->batches[im->nbatches - 1].length;
  return RILL_OK;
}

/* ---------------------------------------------------------------- conversion */

static int bit(const void* bits, int64_t i) { return (((const uint8_t*)bits)[i >> 3] >> (i & 7)) & 1; }

/* Entry i of an Arrow offsets buffer: int64 entries when `wide`, int32 otherwise. */
static int64_t offset_at(const void* offsets, int wide, int64_t i) {
  if (wide) { /* memcpy: producers may hand unaligned buffers */
    int64_t v;
    memcpy(&v, (const uint8_t*)offsets + 8 * i, 8);
    return v;
  }
  int32_t v;
  memcpy(&v, (const uint8_t*)offsets + 4 * i, 4);
  return v;
}

static int fail_buffer(const column_t* c, int64_t batch, rill_error_t* err) {
  return rill__fail(err, RILL_EFORMAT, "rill_df_from_arrow: batch %" PRId64
                    ", column '%s' (\"%s\"): a required buffer is missing", batch, c->name, c->format);
}

/* Bytes of view `i` (physical index) of a utf8_view / binary_view array, or NULL with
 * *len = -1 when the view points outside the array's buffers. Null rows read as empty. */
static const uint8_t* view_bytes(const struct ArrowArray* a, int64_t i, int null, int32_t* len) {
  const uint8_t* v = (const uint8_t*)a->buffers[1] + 16 * i;
  int32_t n;
  memcpy(&n, v, 4);
  if (null) n = 0;
  *len = n;
  if (n < 0) {
    *len = -1;
    return NULL;
  }
  if (n <= 12) return v + 4;
  int32_t buf, off;
  memcpy(&buf, v + 8, 4);
  memcpy(&off, v + 12, 4);
  if (buf < 0 || off < 0 || 2 + (int64_t)buf >= a->n_buffers - 1 || a->buffers[2 + buf] == NULL) {
    *len = -1;
    return NULL;
  }
  return (const uint8_t*)a->buffers[2 + buf] + off;
}

/* Declares cells [0, n) of a variable-length column written (offsets, shapes, data). */
static int commit_cells(column_t* c, int64_t n, rill_error_t* err) {
  if (rill__array_var_commit(c->out, n) != RILL_OK)
    return rill__fail(err, RILL_EINVAL, "rill_df_from_arrow: column '%s': cannot commit %" PRId64 " cells", c->name, n);
  return RILL_OK;
}

/* arrow.variable_shape_tensor rows into variable cells (offsets, shapes, data). */
static int copy_vartensor(column_t* c, const struct ArrowArray* a, int64_t start, int64_t n,
                          int64_t dst, rill_error_t* err) {
  rill_array_t* o = c->out;
  int ndim = c->f.type.ndim;
  int64_t es = (int64_t)rill_dtype_size(c->f.type.dtype);
  if (a->n_children != 2 || a->children[0]->n_children != 1 || a->children[1]->n_children != 1)
    return rill__fail(err, RILL_EFORMAT, "rill_df_from_arrow: column '%s': malformed "
                      "arrow.variable_shape_tensor array", c->name);
  const struct ArrowArray* data = a->children[0];
  const struct ArrowArray* item = data->children[0];
  const struct ArrowArray* shp = a->children[1];
  const struct ArrowArray* sitem = shp->children[0];
  if (n > 0 && (data->n_buffers < 2 || data->buffers[1] == NULL || sitem->n_buffers < 2 ||
                sitem->buffers[1] == NULL))
    return rill__fail(err, RILL_EFORMAT, "rill_df_from_arrow: column '%s': a required buffer is "
                      "missing", c->name);
  int64_t pos = o->offsets[dst];
  for (int64_t i = 0; i < n; i++) {
    int64_t row = dst + i, p = start + i;
    int64_t shape[RILL_MAX_NDIM] = {0}, count = 1;
    int valid = rill_array_is_valid(o, row);
    int64_t b = 0, e = 0;
    if (valid) {
      const int32_t* sv = (const int32_t*)sitem->buffers[1] + sitem->offset + (shp->offset + p) * ndim;
      for (int d = 0; d < ndim; d++) {
        shape[d] = sv[d];
        count *= shape[d];
        if (shape[d] < 0 || (c->f.type.shape[d] >= 0 && shape[d] != c->f.type.shape[d]))
          return rill__fail(err, RILL_EFORMAT, "rill_df_from_arrow: column '%s', row %" PRId64
                            ": dimension %d is %" PRId64 ", the type says %" PRId64, c->name, row,
                            d, shape[d], c->f.type.shape[d]);
      }
      int64_t q = data->offset + p;
      if (c->f.large_list) {
        b = ((const int64_t*)data->buffers[1])[q];
        e = ((const int64_t*)data->buffers[1])[q + 1];
      } else {
        b = ((const int32_t*)data->buffers[1])[q];
        e = ((const int32_t*)data->buffers[1])[q + 1];
      }
      if (e - b != count || b < 0 || item->length < item->offset + e)
        return rill__fail(err, RILL_EFORMAT, "rill_df_from_arrow: column '%s', row %" PRId64
                          ": %" PRId64 " elements for its shape of %" PRId64, c->name, row, e - b,
                          count);
      if (count > 0 && (item->n_buffers < 2 || item->buffers[1] == NULL))
        return rill__fail(err, RILL_EFORMAT, "rill_df_from_arrow: column '%s': a required buffer "
                          "is missing", c->name);
    }
    int64_t bytes = count * es * valid;
    if (pos + bytes > c->var_cap) {
      int64_t cap = c->var_cap * 2 > pos + bytes ? c->var_cap * 2 : pos + bytes;
      if (rill_array_reserve(o, cap) != RILL_OK)
        return rill__fail(err, RILL_ENOMEM, "rill_df_from_arrow: out of memory");
      c->var_cap = cap;
    }
    if (bytes > 0)
      memcpy((uint8_t*)o->data + pos, (const uint8_t*)item->buffers[1] + (item->offset + b) * es,
             (size_t)bytes);
    pos += bytes;
    o->offsets[row + 1] = pos;
    if (o->shapes != NULL)
      for (int d = 0; d < ndim; d++) o->shapes[row * ndim + d] = valid ? shape[d] : 0;
  }
  o->data_size = pos;
  return commit_cells(c, dst + n, err);
}

/* Copies rows [0, n) of child `a` (starting at logical index `start` of the child, i.e.
 * after the parent's and the child's offsets) into c->out at row `dst`. `pvalid`/`pstart`:
 * the struct's validity (NULL = all valid). */
static int copy_column(column_t* c, const struct ArrowArray* a, int64_t start, int64_t n,
                       const void* pvalid, int64_t pstart, int64_t dst, int64_t batch,
                       rill_error_t* err) {
  rill_array_t* o = c->out;
  const void* valid = (a->null_count != 0 && a->n_buffers > 0) ? a->buffers[0] : NULL;
  for (int64_t i = 0; i < n; i++) {
    if ((valid != NULL && !bit(valid, start + i)) || (pvalid != NULL && !bit(pvalid, pstart + i))) {
      if (rill_array_set_null(o, dst + i) != RILL_OK)
        return rill__fail(err, RILL_ENOMEM, "rill_df_from_arrow: out of memory");
    }
  }
  if (n == 0) return RILL_OK;
  if (a->n_buffers < 2 || a->buffers[1] == NULL) {
    if (c->f.layout != RILL__ARROW_FIXED_LIST && c->f.layout != RILL__ARROW_VAR_TENSOR) return fail_buffer(c, batch, err);
  }
  switch (c->f.layout) {
  case RILL__ARROW_FIXED: {
    size_t es = rill_dtype_size(c->f.type.dtype);
    memcpy((uint8_t*)o->data + dst * (int64_t)es, (const uint8_t*)a->buffers[1] + start * (int64_t)es,
           (size_t)n * es);
    return RILL_OK;
  }
  case RILL__ARROW_BITS: {
    uint8_t* d = (uint8_t*)o->data + dst;
    for (int64_t i = 0; i < n; i++) d[i] = (uint8_t)bit(a->buffers[1], start + i);
    return RILL_OK;
  }
  case RILL__ARROW_TIMESTAMP: {
    const uint8_t* s = (const uint8_t*)a->buffers[1] + start * 8; /* may be unaligned */
    int64_t* d = (int64_t*)o->data + dst;
    for (int64_t i = 0; i < n; i++) {
      int64_t v;
      memcpy(&v, s + 8 * i, 8);
      if (c->f.ts_div > 1) {
        int64_t q = v / c->f.ts_div;
        if ((v % c->f.ts_div) < 0) q--; /* floor */
        d[i] = q;
      } else if (__builtin_mul_overflow(v, c->f.ts_mul, &d[i])) {
        if (rill_array_is_valid(o, dst + i))
          return rill__fail(err, RILL_ERANGE,
                            "rill_df_from_arrow: column '%s', row %" PRId64
                            ": timestamp %" PRId64 " (\"%s\") overflows microseconds", c->name,
                            dst + i, v, c->format);
        d[i] = 0;
      }
    }
    return RILL_OK;
  }
  case RILL__ARROW_VAR32:
  case RILL__ARROW_VAR64: {
    int64_t base = o->offsets[dst];
    const void* off = a->buffers[1];
    int wide = c->f.layout == RILL__ARROW_VAR64;
    int64_t first = offset_at(off, wide, start), last = offset_at(off, wide, start + n);
    int64_t prev = first;
    for (int64_t i = 1; i <= n; i++) {
      int64_t cur = offset_at(off, wide, start + i);
      if (cur < prev)
        return rill__fail(err, RILL_EFORMAT, "rill_df_from_arrow: column '%s', row %" PRId64
                          ": decreasing offsets", c->name, dst + i - 1);
      o->offsets[dst + i] = base + (cur - first);
      prev = cur;
    }
    if (last > first) {
      if (a->n_buffers < 3 || a->buffers[2] == NULL) return fail_buffer(c, batch, err);
      memcpy((uint8_t*)o->data + base, (const uint8_t*)a->buffers[2] + first, (size_t)(last - first));
    }
    o->data_size = base + (last - first);
    return commit_cells(c, dst + n, err);
  }
  case RILL__ARROW_VIEW: {
    int64_t pos = o->offsets[dst];
    for (int64_t i = 0; i < n; i++) {
      int32_t len;
      const uint8_t* p = view_bytes(a, start + i, !rill_array_is_valid(o, dst + i), &len);
      if (len < 0)
        return rill__fail(err, RILL_EFORMAT, "rill_df_from_arrow: column '%s', row %" PRId64
                          ": a string view points outside its buffers", c->name, dst + i);
      if (pos + len > o->data_size && rill_array_reserve(o, pos + len) != RILL_OK)
        return rill__fail(err, RILL_ENOMEM, "rill_df_from_arrow: out of memory");
      if (len > 0) memcpy((uint8_t*)o->data + pos, p, (size_t)len);
      pos += len;
      o->offsets[dst + i + 1] = pos;
      o->data_size = pos;
    }
    return commit_cells(c, dst + n, err);
  }
  case RILL__ARROW_VAR_TENSOR: return copy_vartensor(c, a, start, n, dst, err);
  case RILL__ARROW_FIXED_LIST: {
    const struct ArrowArray* item = a->children[0];
    int64_t k = c->f.list_size;
    int64_t istart = item->offset + start * k;
    int64_t count = n * k;
    if (item->length < istart - item->offset + count)
      return rill__fail(err, RILL_EFORMAT, "rill_df_from_arrow: batch %" PRId64
                        ", column '%s': the fixed_size_list child is too short", batch, c->name);
    if (count == 0) return RILL_OK;
    if (item->null_count != 0 && item->n_buffers > 0 && item->buffers[0] != NULL) {
      /* elements under a null cell may be null: only valid cells must be complete */
      for (int64_t i = 0; i < count; i++)
        if (!bit(item->buffers[0], istart + i) && rill_array_is_valid(o, dst + i / k))
          return rill__fail(err, RILL_ENOTSUP, "rill_df_from_arrow: column '%s', row %" PRId64
                            ": null elements inside a tensor cell (\"%s\") are not supported",
                            c->name, dst + i / k, c->format);
    }
    if (item->n_buffers < 2 || item->buffers[1] == NULL) return fail_buffer(c, batch, err);
    if (c->f.elem_bits) {
      uint8_t* d = (uint8_t*)o->data + dst * k;
      for (int64_t i = 0; i < count; i++) d[i] = (uint8_t)bit(item->buffers[1], istart + i);
    } else {
      size_t es = rill_dtype_size(c->f.type.dtype);
      memcpy((uint8_t*)o->data + dst * k * (int64_t)es,
             (const uint8_t*)item->buffers[1] + istart * (int64_t)es, (size_t)count * es);
    }
    return RILL_OK;
  }
  }
  return RILL_OK;
}

/* Total value bytes of a variable-length column over all batches. */
static int64_t var_bytes(const import_t* im, int64_t col) {
  int64_t total = 0;
  for (int64_t b = 0; b < im->nbatches; b++) {
    const struct ArrowArray* p = &im->batches[b];
    const struct ArrowArray* a = p->children[col];
    if (p->length == 0 || a->n_buffers < 2 || a->buffers[1] == NULL) continue;
    int64_t start = p->offset + a->offset;
    if (im->cols[col].f.layout == RILL__ARROW_VIEW) {
      for (int64_t i = 0; i < p->length; i++) {
        int32_t len;
        int64_t k = start + i;
        int null = a->null_count != 0 && a->buffers[0] != NULL && !bit(a->buffers[0], k);
        view_bytes(a, k, null, &len);
        if (len > 0) total += len;
      }
    } else {
      int wide = im->cols[col].f.layout == RILL__ARROW_VAR64;
      total += offset_at(a->buffers[1], wide, start + p->length) - offset_at(a->buffers[1], wide, start);
    }
  }
  return total;
}

static int aligned(const void* p, size_t to) { return ((uintptr_t)p % to) == 0; }

/* Wraps column `col` of the single batch without copying when its layout is rill's; leaves
 * c->out NULL (the caller copies) when it is not, or when the column is malformed (the
 * copying path reports that). Returns RILL_OK or the wrap's error. */
static int try_wrap(import_t* im, int64_t col, rill_error_t* err) {
  column_t* c = &im->cols[col];
  const struct ArrowArray* p = &im->batches[0];
  const struct ArrowArray* a = p->children[col];
  int64_t n = p->length, s = p->offset + a->offset;
  if (n == 0 || s < 0) return RILL_OK;
  if (p->null_count != 0 && p->n_buffers > 0 && p->buffers[0] != NULL) return RILL_OK;
  uint8_t* validity = NULL;
  if (a->null_count != 0 && a->n_buffers > 0 && a->buffers[0] != NULL) {
    if (s % 8 != 0) return RILL_OK; /* the bitmap would need shifting */
    validity = (uint8_t*)(uintptr_t)a->buffers[0] + s / 8;
  }
  const uint8_t* data = NULL;
  int64_t* offsets = NULL;
  int64_t size = 0;
  size_t es = rill_dtype_size(c->f.type.dtype);
  switch (c->f.layout) {
  case RILL__ARROW_TIMESTAMP:   /* microseconds only: rill's unit */
  case RILL__ARROW_FIXED:
    if (c->f.ts_mul != 1 || c->f.ts_div != 1) return RILL_OK;
    if (a->n_buffers < 2 || a->buffers[1] == NULL) return RILL_OK;
    data = (const uint8_t*)a->buffers[1] + s * (int64_t)es;
    size = n * (int64_t)es;
    break;
  case RILL__ARROW_VAR64: {
    if (a->n_buffers < 3 || a->buffers[1] == NULL) return RILL_OK;
    const int64_t* off = (const int64_t*)a->buffers[1] + s;
    if (!aligned(off, sizeof(int64_t)) || off[0] != 0) return RILL_OK;
    for (int64_t i = 0; i < n; i++)
      if (off[i + 1] < off[i]) return RILL_OK;
    if (off[n] > 0 && a->buffers[2] == NULL) return RILL_OK;
    offsets = (int64_t*)(uintptr_t)off;
    data = a->buffers[2];
    es = 1;
    break;
  }
  case RILL__ARROW_FIXED_LIST: {
    if (c->f.elem_bits || a->n_children != 1 || a->children == NULL || a->children[0] == NULL)
      return RILL_OK;
    const struct ArrowArray* item = a->children[0];
    int64_t k = c->f.list_size;
    if (item->null_count != 0 && item->n_buffers > 0 && item->buffers[0] != NULL) return RILL_OK;
    if (item->n_buffers < 2 || item->buffers[1] == NULL || item->offset < 0 ||
        item->length < (s + n) * k)
      return RILL_OK;
    data = (const uint8_t*)item->buffers[1] + (item->offset + s * k) * (int64_t)es;
    size = n * k * (int64_t)es;
    break;
  }
  default: return RILL_OK;
  }
  if (data != NULL && !aligned(data, es)) return RILL_OK;
  holder_t* h = im->holder;
  atomic_fetch_add(&h->refs, 1);
  int rc = rill_array_wrap(c->f.type, n, (void*)(uintptr_t)data, size, validity, -1, offsets, NULL,
                           holder_release, h, &c->out, err);
  if (rc != RILL_OK) {
    atomic_fetch_sub(&h->refs, 1); /* never the last: the import holds one */
    c->out = NULL;
  }
  return rc;
}

/* Moves the single batch into a holder (see holder_t). */
static int hold_single_batch(import_t* im, rill_error_t* err) {
  holder_t* h = rill__calloc(1, sizeof *h);
  if (h == NULL) return rill__fail(err, RILL_ENOMEM, "rill_df_from_arrow: out of memory");
  atomic_init(&h->refs, 1);
  h->batch = im->batches[0];
  im->batches[0].release = NULL;
  im->holder = h;
  return RILL_OK;
}

static int build(import_t* im, rill_df_t** out, rill_error_t* err) {
  if (im->nbatches == 1 && im->rows > 0) {
    int rc = hold_single_batch(im, err);
    if (rc != RILL_OK) return rc;
  }
  for (int64_t i = 0; i < im->ncols; i++) {
    column_t* c = &im->cols[i];
    int rc = RILL_OK;
    if (im->holder != NULL) {
      if ((rc = try_wrap(im, i, err)) != RILL_OK) return rc;
      if (c->out != NULL) continue;
    }
    rc = rill_array_new(c->f.type, im->rows, &c->out, err);
    if (rc != RILL_OK) return rc;
    if (c->f.layout == RILL__ARROW_VAR32 || c->f.layout == RILL__ARROW_VAR64 || c->f.layout == RILL__ARROW_VIEW) {
      int64_t bytes = var_bytes(im, i);
      if (bytes < 0)
        return rill__fail(err, RILL_EFORMAT, "rill_df_from_arrow: column '%s': negative offsets",
                          c->name);
      if (rill_array_reserve(c->out, bytes > 0 ? bytes : 1) != RILL_OK)
        return rill__fail(err, RILL_ENOMEM, "rill_df_from_arrow: out of memory for column '%s'",
                          c->name);
    }
    int64_t dst = 0;
    for (int64_t b = 0; b < im->nbatches; b++) {
      const struct ArrowArray* p = &im->batches[b];
      const struct ArrowArray* a = p->children[i];
      const void* pvalid = (p->null_count != 0 && p->n_buffers > 0) ? p->buffers[0] : NULL;
      rc = copy_column(c, a, p->offset + a->offset, p->length, pvalid, p->offset, dst, b, err);
      if (rc != RILL_OK) return rc;
      dst += p->length;
    }
  }
  const char** names = rill__calloc((size_t)im->ncols, sizeof(char*));
  const rill_array_t** arrays = rill__calloc((size_t)im->ncols, sizeof(rill_array_t*));
  if (names == NULL || arrays == NULL) {
    rill__free(names);
    rill__free(arrays);
    return rill__fail(err, RILL_ENOMEM, "rill_df_from_arrow: out of memory");
  }
  for (int64_t i = 0; i < im->ncols; i++) {
    names[i] = im->cols[i].name;
    arrays[i] = im->cols[i].out;
  }
  int rc = rill_df_from_arrays(names, arrays, (int)im->ncols, 0, out, err);
  rill__free(names);
  rill__free(arrays);
  return rc;
}

/* ---------------------------------------------------------------- public */

int rill_df_from_arrow(struct ArrowArrayStream* stream, rill_df_t** out, rill_error_t* err) {
  if (out != NULL) *out = NULL;
  if (stream == NULL || stream->release == NULL || out == NULL) {
    if (stream != NULL && stream->release != NULL) stream->release(stream);
    return rill__fail(err, RILL_EINVAL, "rill_df_from_arrow: NULL or released argument");
  }
  import_t im;
  memset(&im, 0, sizeof im);
  int rc;
  int e = stream->get_schema(stream, &im.schema);
  if (e != 0) {
    const char* msg = stream->get_last_error != NULL ? stream->get_last_error(stream) : NULL;
    rc = rill__fail(err, RILL_EFORMAT, "rill_df_from_arrow: get_schema failed (%d): %s", e,
                    msg != NULL ? msg : "no message");
    im.schema.release = NULL;
    goto done;
  }
  if ((rc = read_schema(&im, err)) != RILL_OK) goto done;
  for (;;) {
    struct ArrowArray b;
    memset(&b, 0, sizeof b);
    e = stream->get_next(stream, &b);
    if (e != 0) {
      const char* msg = stream->get_last_error != NULL ? stream->get_last_error(stream) : NULL;
      rc = rill__fail(err, RILL_EFORMAT, "rill_df_from_arrow: get_next failed after %" PRId64
                      " batches (%d): %s", im.nbatches, e, msg != NULL ? msg : "no message");
      goto done;
    }
    if (b.release == NULL) break;
    if ((rc = add_batch(&im, &b, err)) != RILL_OK) goto done;
  }
  rc = build(&im, out, err);
done:
  import_free(&im);
  stream->release(stream);
  return rc;
}

int rill_df_from_arrow_batch(struct ArrowSchema* schema, struct ArrowArray* array,
                             rill_df_t** out, rill_error_t* err) {
  if (out != NULL) *out = NULL;
  import_t im;
  memset(&im, 0, sizeof im);
  int rc;
  if (schema == NULL || array == NULL || out == NULL || schema->release == NULL ||
      array->release == NULL) {
    if (schema != NULL && schema->release != NULL) schema->release(schema);
    if (array != NULL && array->release != NULL) array->release(array);
    return rill__fail(err, RILL_EINVAL, "rill_df_from_arrow_batch: NULL or released argument");
  }
  im.schema = *schema;
  schema->release = NULL;
  if ((rc = read_schema(&im, err)) != RILL_OK) {
    array->release(array);
    goto done;
  }
  if ((rc = add_batch(&im, array, err)) != RILL_OK) goto done;
  rc = build(&im, out, err);
done:
  import_free(&im);
  return rc;
}
