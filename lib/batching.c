/* Batching: a batched dataframe's cells are the parent's rows of the batch (the parent's
 * stages write each row straight into its slot of the batch, see chunk.c), so stacking costs
 * nothing; what remains here is the NCHW layout, which transposes each [H,W,C] cell of the
 * stacked batch to [C,H,W] into an array of the batch column's pool. */
#include <string.h>

#include "engine.h"

/* Batch column with NCHW layout: transposes each [H,W,C] cell to [C,H,W]. */
const rill_array_t* rill__batch_transpose(rill__chunk_t* ch, int c, const rill_array_t* a) {
  rill__column_t* col = ch->frames[0].df->cols[c];
  rill__node_t* node = ch->it->nodemap[0][c];
  if (!rill__device_is_host(a->device)) {
    rill__chunk_fail(ch, RILL_ENOTSUP, "column '%s': NCHW batches of device arrays are not supported", col->field.name);
    return NULL;
  }
  rill_error_t e;
  if (rill__event_wait(a->event, NULL, &e) != RILL_OK) {
    rill__chunk_fail(ch, e.code, "column '%s': %s", col->field.name, e.message);
    return NULL;
  }
  rill_array_t* out;
  int ar = rill__node_acquire(node, a->length * rill_type_cell_bytes(&col->field.type), &out, &e);
  if (ar != RILL_OK) {
    rill__chunk_fail(ch, ar, "column '%s': %s", col->field.name, e.message);
    return NULL;
  }
  int r = rill__array_prepare(out, col->field.type, a->length, false);
  if (r == RILL_OK && a->validity && a->null_count > 0) {
    r = rill__array_ensure_validity(out);
    if (r == RILL_OK) {
      memcpy(out->validity, a->validity, (size_t)(a->length + 7) / 8);
      out->null_count = a->null_count;
    }
  }
  if (r != RILL_OK) {
    rill_array_release(out);
    rill__chunk_fail(ch, r, "column '%s': cannot allocate the batch", col->field.name);
    return NULL;
  }
  int64_t h = a->type.shape[0], w = a->type.shape[1], cc = a->type.shape[2];
  size_t es = rill_dtype_size(a->type.dtype);
  int64_t cell = h * w * cc;
  for (int64_t i = 0; i < a->length; i++) {
    const uint8_t* s = (const uint8_t*)a->data + (size_t)(i * cell) * es;
    uint8_t* dst = (uint8_t*)out->data + (size_t)(i * cell) * es;
    for (int64_t y = 0; y < h; y++)
      for (int64_t x = 0; x < w; x++)
        for (int64_t z = 0; z < cc; z++)
          memcpy(dst + (size_t)((z * h + y) * w + x) * es, s + (size_t)((y * w + x) * cc + z) * es, es);
  }
  ch->frames[0].vals[c] = out;
  return out;
}

