/* Evaluation of a chunk (consecutive rows of the iterated dataframe).
 *
 * A chunk keeps one frame per dataframe of the iterated dataframe's ancestry (a chain: each
 * dataframe has at most one parent). A frame holds the row ids of that dataframe for the
 * chunk's cells and the columns computed so far (each (dataframe, column) once per chunk,
 * so a shared input is computed once per row). Frames whose cells correspond one to one
 * share a "level": views share their parent's level, a batched dataframe shares its
 * parent's (its cells are the parent's rows of the batch), a reduce starts a new level
 * below it (k parent cells per cell). Dropping a cell (SKIP, or a RAISE in row mode)
 * compacts every frame of its level in place (compact.c). Columns are computed on demand
 * by the stage runner (stage.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

static int ensure_i64(int64_t** buf, int64_t* cap, int64_t n) {
  if (n <= *cap && *buf) return RILL_OK;
  int64_t ncap = n > 2 * *cap ? n : 2 * *cap;
  if (ncap < 16) ncap = 16;
  int64_t* nb = rill__alloc(sizeof *nb * (size_t)ncap);
  if (!nb) return RILL_ENOMEM;
  rill__free(*buf);
  *buf = nb;
  *cap = ncap;
  return RILL_OK;
}

/* rows[i] = seq + i for i in [0, n): 32-byte vector stores (two SSE2 stores where AVX2 is
 * missing). This runs for every row of every chunk whose source is called. */
typedef int64_t v4i64 __attribute__((vector_size(32)));
#define IOTA_BODY                                                                     \
  int64_t i = 0;                                                                      \
  if (n >= 16) {                                                                      \
    v4i64 v = {seq, seq + 1, seq + 2, seq + 3};                                       \
    const v4i64 four = {4, 4, 4, 4}, eight = {8, 8, 8, 8}, twelve = {12, 12, 12, 12}; \
    const v4i64 step = {16, 16, 16, 16};                                              \
    for (; i + 16 <= n; i += 16) {                                                    \
      v4i64 a = v, b = v + four, c = v + eight, d = v + twelve;                       \
      __builtin_memcpy(rows + i, &a, sizeof a);                                       \
      __builtin_memcpy(rows + i + 4, &b, sizeof b);                                   \
      __builtin_memcpy(rows + i + 8, &c, sizeof c);                                   \
      __builtin_memcpy(rows + i + 12, &d, sizeof d);                                  \
      v += step;                                                                      \
    }                                                                                 \
  }                                                                                   \
  for (; i < n; i++) rows[i] = seq + i;

static void iota_generic(int64_t* rows, int64_t seq, int64_t n) { IOTA_BODY }
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
__attribute__((target("avx2"))) static void iota_avx2(int64_t* rows, int64_t seq, int64_t n) { IOTA_BODY }
#endif
#undef IOTA_BODY

static void iota(int64_t* rows, int64_t seq, int64_t n) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
  static _Atomic int avx2 = -1; /* -1: not probed yet */
  int have = atomic_load_explicit(&avx2, memory_order_relaxed);
  if (have < 0) {
    __builtin_cpu_init();
    have = __builtin_cpu_supports("avx2") ? 1 : 0;
    atomic_store_explicit(&avx2, have, memory_order_relaxed);
  }
  if (have) {
    iota_avx2(rows, seq, n);
    return;
  }
#endif
  iota_generic(rows, seq, n);
}

/* Writes the row ids of frame `f` when they were left implied by f->seq. */
int rill__frame_rows(rill__chunk_t* ch, rill__frame_t* f) {
  if (f->rows_ok) return RILL_OK;
  int64_t n = ch->level_n[f->level];
  if (ensure_i64(&f->rows, &f->rows_cap, n) != RILL_OK) return RILL_ENOMEM;
  iota(f->rows, f->seq, n);
  f->rows_ok = 1;
  return RILL_OK;
}

/* Records a failure of the whole chunk (the first one wins). */
void rill__chunk_fail(rill__chunk_t* ch, int code, const char* fmt, ...) {
  pthread_mutex_lock(&ch->mu);
  if (ch->rc == RILL_OK) {
    va_list ap;
    va_start(ap, fmt);
    rill__vfail(&ch->err, code, fmt, ap);
    va_end(ap);
    ch->err.row = ch->start;
    ch->err.column = ch->reqcol;
    ch->rc = code;
    atomic_store_explicit(&ch->failed, 1, memory_order_release);
  }
  pthread_mutex_unlock(&ch->mu);
}

const rill_array_t* rill__chunk_column(rill__chunk_t* ch, int d, int c) {
  rill__frame_t* fr = &ch->frames[d];
  if (fr->vals[c]) return fr->vals[c];
  rill__column_t* col = fr->df->cols[c];
  switch (col->kind) {
    case RILL__COL_PARENT: return rill__chunk_column(ch, d + 1, c);
    case RILL__COL_BATCH: {
      const rill_array_t* a = rill__chunk_column(ch, d + 1, col->pcol);
      if (!a || !col->transpose) return a;
      return rill__batch_transpose(ch, c, a);
    }
    default: return rill__run_stage(ch, d, c);
  }
}

/* ---------------------------------------------------------------- chunks */

int rill__chunk_init(rill_iter_t* it, rill__chunk_t* ch) {
  memset(ch, 0, sizeof *ch);
  ch->it = it;
  if (pthread_mutex_init(&ch->mu, NULL) != 0) return RILL_ENOMEM;
  ch->nframes = it->nchain;
  ch->frames = rill__calloc((size_t)it->nchain, sizeof *ch->frames);
  ch->level_n = rill__calloc((size_t)it->nchain + 1, sizeof *ch->level_n);
  ch->cols = rill__calloc((size_t)(it->nreq > 0 ? it->nreq : 1), sizeof *ch->cols);
  ch->spare = rill__calloc((size_t)(it->nnodes > 0 ? it->nnodes : 1), sizeof *ch->spare);
  if (!ch->frames || !ch->level_n || !ch->cols || !ch->spare) return RILL_ENOMEM;
  for (int d = 0; d < it->nchain; d++) {
    ch->frames[d].df = it->chain[d];
    int nc = it->chain[d]->ncols;
    ch->frames[d].vals = rill__calloc((size_t)(nc > 0 ? nc : 1), sizeof *ch->frames[d].vals);
    if (!ch->frames[d].vals) return RILL_ENOMEM;
  }
  return RILL_OK;
}

/* A spare is an array of a host stage's node, filled in place (fixed cells: no variable
 * buffers to trim as the pool does), that only the chunk holds: nothing can take another
 * reference to it meanwhile. Only small buffers stay (SPARE_MAX): a spare is pinned to its slot,
 * while through the pool an intermediate (a 154 MB float batch before its transposition) is
 * shared by every slot that needs one at the time; a chunk that fills more than SPARE_MAX bytes
 * costs far more than the pool's round trip. */
enum { SPARE_MAX = 256 << 10 };

void rill__chunk_drop(rill__chunk_t* ch, rill_array_t* a) {
  if (!a) return;
  rill__node_t* node = a->priv->engine;
  rill_iter_t* it = ch->it;
  if (node && ch->spare && node->index < it->nnodes && it->nodes[node->index] == node && node->fixed &&
      node->device.type == RILL_DEVICE_CPU && !a->event && a->priv->data_cap <= SPARE_MAX &&
      !ch->spare[node->index] && rill_array_refcount(a) == 1) {
    ch->spare[node->index] = a;
    return;
  }
  rill_array_release(a);
}

rill_array_t* rill__chunk_spare(rill__chunk_t* ch, rill__node_t* node, int64_t bytes) {
  rill_array_t* a = ch->spare ? ch->spare[node->index] : NULL;
  if (!a) return NULL;
  ch->spare[node->index] = NULL;
  if (a->priv->data_cap >= bytes) { /* a reuse the pool does not see: counted here, by this thread alone */
    atomic_store_explicit(&ch->spare_reuses, atomic_load_explicit(&ch->spare_reuses, memory_order_relaxed) + 1,
                          memory_order_relaxed);
    return a;
  }
  rill_array_release(a);
  return NULL;
}

void rill__chunk_release(rill__chunk_t* ch) {
  if (!ch->cols) return;
  for (int q = 0; q < ch->it->nreq; q++) {
    rill__chunk_drop(ch, ch->cols[q]);
    ch->cols[q] = NULL;
  }
  ch->m = 0;
  ch->nrerr = 0;
  ch->rc = RILL_OK;
  atomic_store_explicit(&ch->failed, 0, memory_order_relaxed);
}

void rill__chunk_destroy(rill__chunk_t* ch) {
  if (!ch->it) return;
  rill__chunk_release(ch);
  for (int i = 0; ch->spare && i < ch->it->nnodes; i++) rill_array_release(ch->spare[i]);
  rill__free(ch->spare);
  if (ch->frames) {
    for (int d = 0; d < ch->nframes; d++) {
      rill__free(ch->frames[d].vals);
      rill__free(ch->frames[d].rows);
      rill__free(ch->frames[d].goff);
    }
  }
  rill__free(ch->frames);
  rill__free(ch->level_n);
  rill__free(ch->cols);
  rill__free(ch->rerr);
  pthread_mutex_destroy(&ch->mu);
  memset(ch, 0, sizeof *ch);
}

static int setup_frames(rill__chunk_t* ch) {
  rill_iter_t* it = ch->it;
  int d0 = 0;
  for (int d = 0; d < ch->nframes; d++) {
    ch->frames[d].level = 0;
    ch->frames[d].seq = -1;
    ch->frames[d].rows_ok = 1;
  }
  if (it->batched) {
    rill_df_t* b = it->chain[0];
    int64_t s = ch->start * b->batch, e = s + b->batch;
    if (e > b->parent->rows) e = b->parent->rows;
    int64_t n = e > s ? e - s : 0;
    for (int d = 0; d < 2; d++) { /* consecutive rows: written when a stage needs them */
      ch->frames[d].seq = s;
      ch->frames[d].rows_ok = 0;
    }
    ch->level_n[0] = n;
    d0 = 1;
  } else {
    int64_t n = ch->end - ch->start;
    ch->frames[0].seq = ch->start;
    ch->frames[0].rows_ok = 0;
    ch->level_n[0] = n;
  }
  for (int d = d0; d + 1 < ch->nframes; d++) {
    rill__frame_t* f = &ch->frames[d];
    rill__frame_t* p = &ch->frames[d + 1];
    rill_df_t* df = f->df;
    int64_t n = ch->level_n[f->level];
    if (df->kind == RILL__DF_REDUCE) {
      int64_t prow = df->parent->rows, total = 0;
      if (ensure_i64(&f->goff, &f->goff_cap, n + 1) != RILL_OK) return RILL_ENOMEM;
      for (int64_t g = 0; g < n; g++) {
        int64_t s = rill__frame_row(f, g) * df->k, e = s + df->k;
        if (e > prow) e = prow;
        f->goff[g] = total;
        total += e > s ? e - s : 0;
      }
      f->goff[n] = total;
      if (ensure_i64(&p->rows, &p->rows_cap, total) != RILL_OK) return RILL_ENOMEM;
      for (int64_t g = 0; g < n; g++)
        for (int64_t j = f->goff[g]; j < f->goff[g + 1]; j++) p->rows[j] = rill__frame_row(f, g) * df->k + (j - f->goff[g]);
      p->level = f->level + 1;
      p->seq = f->seq >= 0 ? f->seq * df->k : -1; /* whole groups of consecutive rows */
      ch->level_n[p->level] = total;
    } else if (df->kind == RILL__DF_SLICE && f->seq >= 0) { /* consecutive rows stay consecutive */
      p->seq = f->seq + df->offset;
      p->rows_ok = 0;
      p->level = f->level;
    } else {
      if (ensure_i64(&p->rows, &p->rows_cap, n) != RILL_OK) return RILL_ENOMEM;
      for (int64_t i = 0; i < n; i++) p->rows[i] = rill__view_row(df, ch->epoch, rill__frame_row(f, i));
      p->level = f->level;
    }
  }
  return RILL_OK;
}

static int cmp_rowerr(const void* a, const void* b) {
  int64_t x = ((const rill__rowerr_t*)a)->row, y = ((const rill__rowerr_t*)b)->row;
  return x < y ? -1 : x > y;
}

void rill__chunk_eval(rill__chunk_t* ch) {
  rill_iter_t* it = ch->it;
  ch->rc = RILL_OK;
  atomic_store_explicit(&ch->failed, 0, memory_order_relaxed); /* published with the chunk's tasks */
  ch->nrerr = 0;
  ch->skipped = ch->nulled = 0;
  ch->st_ns = ch->st_calls = 0;
  ch->m = 0;
  ch->reqcol = it->nreq > 0 ? it->req[0] : 0;
  if (setup_frames(ch) != RILL_OK) {
    rill__chunk_fail(ch, RILL_ENOMEM, "rows %lld..%lld: out of memory", (long long)ch->start, (long long)ch->end - 1);
  } else {
    for (int q = 0; q < it->nreq && ch->rc == RILL_OK; q++) {
      ch->reqcol = it->req[q];
      rill__chunk_column(ch, 0, it->req[q]);
    }
    if (ch->rc == RILL_OK) {
      for (int q = 0; q < it->nreq; q++) { /* borrowed from the frames until the loop below */
        ch->reqcol = it->req[q];
        ch->cols[q] = (rill_array_t*)rill__chunk_column(ch, 0, it->req[q]);
      }
      ch->m = it->batched ? (ch->level_n[0] > 0 || it->nreq == 0) : ch->level_n[0];
      if (!it->batched && rill__frame_rows(ch, &ch->frames[0]) != RILL_OK)
        rill__chunk_fail(ch, RILL_ENOMEM, "rows %lld..%lld: out of memory", (long long)ch->start, (long long)ch->end - 1);
      ch->top = ch->frames[0].rows;
      if (ch->nrerr > 1) qsort(ch->rerr, (size_t)ch->nrerr, sizeof *ch->rerr, cmp_rowerr);
    }
  }
  if (ch->st_calls) { /* this thread alone writes them now: no locked instruction */
    atomic_store_explicit(&ch->total_ns, atomic_load_explicit(&ch->total_ns, memory_order_relaxed) + ch->st_ns,
                          memory_order_relaxed);
    atomic_store_explicit(&ch->total_calls, atomic_load_explicit(&ch->total_calls, memory_order_relaxed) + ch->st_calls,
                          memory_order_relaxed);
  }
  /* The frames let go of their values. A requested column's value is a frame's: that frame's
   * reference passes to cols[q] (no locked instruction), and a second q with the same value
   * takes one of its own; the chunk drops the others (rill__chunk_drop). */
  uint64_t owned = 0; /* bit q: cols[q] holds a reference (q < 64; the others are retained first) */
  for (int q = 64; q < it->nreq; q++) rill_array_retain(ch->cols[q]);
  for (int d = 0; d < ch->nframes; d++) {
    rill__frame_t* f = &ch->frames[d];
    for (int c = 0; c < f->df->ncols; c++) {
      rill_array_t* v = f->vals[c];
      f->vals[c] = NULL;
      if (!v) continue;
      int passed = 0;
      for (int q = 0; q < it->nreq && q < 64; q++) {
        if (ch->cols[q] != v || (owned >> q & 1)) continue;
        if (passed) rill_array_retain(v);
        passed = 1;
        owned |= (uint64_t)1 << q;
      }
      if (!passed) rill__chunk_drop(ch, v);
    }
  }
  for (int q = 0; q < it->nreq && q < 64; q++) /* NULL (a failure), or not a frame's value (none is) */
    if (!(owned >> q & 1)) rill_array_retain(ch->cols[q]);
  if (ch->rc != RILL_OK) {
    for (int q = 0; q < it->nreq; q++) {
      rill_array_release(ch->cols[q]);
      ch->cols[q] = NULL;
    }
    ch->m = 0;
    ch->nrerr = 0;
  }
}

