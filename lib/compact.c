/* Compaction: dropping cells from a chunk (rows skipped under RILL_ON_ERROR_SKIP, or
 * raised in row mode). Every frame of the cells' level is compacted in place: its row ids
 * and the columns computed so far; a reduce above the level gets its group offsets
 * recounted. Lent arrays get their own copy first: a caller's buffer is never written. */
#include <string.h>

#include "engine.h"

/* Compacts `a` (length n) in place, keeping the cells whose keep[i] is set. */
static inline void move_bit(uint8_t* bits, int64_t from, int64_t to) {
  if (rill__bit_get(bits, from))
    rill__bit_set(bits, to);
  else
    rill__bit_clear(bits, to);
}

static int array_compact(rill_array_t* a, const uint8_t* keep, int64_t n) {
  if (!a || a->length != n) return RILL_OK;
  if (!rill__device_is_host(a->device)) return RILL_ENOTSUP;
  int64_t j = 0;
  int nd = a->type.ndim;
  if (!a->offsets) {
    int64_t cb = rill_type_cell_bytes(&a->type);
    uint8_t* d = a->data;
    for (int64_t i = 0; i < n; i++) {
      if (!keep[i]) continue;
      if (i != j && cb > 0) memmove(d + j * cb, d + i * cb, (size_t)cb);
      if (a->validity) move_bit(a->validity, i, j);
      j++;
    }
    a->data_size = j * (cb > 0 ? cb : 0);
  } else {
    uint8_t* d = a->data;
    int64_t pos = 0;
    for (int64_t i = 0; i < n; i++) {
      int64_t s = a->offsets[i], e = a->offsets[i + 1];
      if (!keep[i]) continue;
      if (e > s && pos != s) memmove(d + pos, d + s, (size_t)(e - s));
      a->offsets[j] = pos;
      pos += e - s;
      if (a->shapes && i != j) memmove(a->shapes + j * nd, a->shapes + i * nd, sizeof(int64_t) * (size_t)nd);
      if (a->validity) move_bit(a->validity, i, j);
      j++;
    }
    a->offsets[j] = pos;
    a->data_size = pos;
    a->priv->var_cells = j;
  }
  a->length = j;
  a->null_count = rill__count_nulls(a->validity, j);
  return RILL_OK;
}

/* A lent slice (lend_cells) about to be changed in place (compaction) first gets its own
 * copy of the data: the caller's buffer is never written. */
static int own_cells(rill_array_t* a) {
  rill_array_priv_t* p = a->priv;
  if (!(p->flags & RILL__ARRAY_EXTERNAL)) return RILL_OK;
  if (a->offsets || p->release || !rill__device_is_host(a->device)) return RILL_ENOTSUP;
  int64_t bytes = a->data_size > 0 ? a->data_size : 0;
  void* nb = rill__alloc((size_t)(bytes > 0 ? bytes : 1));
  if (!nb) return RILL_ENOMEM;
  if (bytes > 0) memcpy(nb, a->data, (size_t)bytes);
  rill__device_free(a->device, p->data_buf);
  p->data_buf = nb;
  p->data_cap = bytes;
  a->data = nb;
  rill_array_release(p->parent);
  p->parent = NULL;
  p->flags &= ~RILL__ARRAY_EXTERNAL;
  return RILL_OK;
}

/* Drops the cells of `level` whose keep[i] is 0 from every frame of the level. */
int rill__compact_level(rill__chunk_t* ch, int level, const uint8_t* keep) {
  int64_t n = ch->level_n[level], m = 0;
  for (int64_t i = 0; i < n; i++) m += keep[i] != 0;
  for (int d = 0; d < ch->nframes; d++) {
    rill__frame_t* f = &ch->frames[d];
    if (f->level != level || !f->df) continue;
    if (rill__frame_rows(ch, f) != RILL_OK) return RILL_ENOMEM;
    int64_t j = 0;
    for (int64_t i = 0; i < n; i++)
      if (keep[i]) f->rows[j++] = f->rows[i];
    if (m != n) f->seq = -1;
    for (int c = 0; c < f->df->ncols; c++) {
      if (!f->vals[c] || f->vals[c]->length != n) continue;
      int r = own_cells(f->vals[c]);
      if (r != RILL_OK) return r;
      if (array_compact(f->vals[c], keep, n) != RILL_OK) return RILL_ENOTSUP;
    }
  }
  for (int d = 0; d + 1 < ch->nframes; d++) {
    rill__frame_t* f = &ch->frames[d];
    if (f->df->kind != RILL__DF_REDUCE || ch->frames[d + 1].level != level) continue;
    int64_t groups = ch->level_n[f->level], cnt = 0, prev = f->goff[0];
    for (int64_t g = 0; g < groups; g++) {
      int64_t s = prev, e = f->goff[g + 1];
      f->goff[g] = cnt;
      for (int64_t i = s; i < e; i++) cnt += keep[i] != 0;
      prev = e;
    }
    f->goff[groups] = cnt;
  }
  ch->level_n[level] = m;
  return RILL_OK;
}

