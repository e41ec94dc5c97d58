/* Evaluation of a chunk (consecutive rows of the iterated dataframe) and the execution
 * context handed to stage functions.
 *
 * A chunk keeps one frame per dataframe of the iterated dataframe's ancestry (a chain: each
 * dataframe has at most one parent). A frame holds the row ids of that dataframe for the
 * chunk's cells and the columns computed so far (each (dataframe, column) once per chunk,
 * so a shared input is computed once per row). Frames whose cells correspond one to one
 * share a "level": views share their parent's level, a batched dataframe shares its
 * parent's (its cells are the parent's rows of the batch), a reduce starts a new level
 * below it (k parent cells per cell). Dropping a cell (SKIP, or a RAISE in row mode)
 * compacts every frame of its level in place. See engine.h for the error convention. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

struct run;

struct rill_exec {
  const int64_t* rows;
  int64_t n;
  int64_t first;    /* index of the call's first cell in the stage's cells */
  int64_t epoch;
  uint64_t seed;
  int column;
  int worker;
  rill_stream_t* stream;
  struct run* run;  /* the stage run, for rill__exec_count_nulled */
};

/* ---------------------------------------------------------------- execution context */

rill_rng_t rill_exec_rng(const rill_exec_t* exec, int64_t i) {
  if (!exec) return rill_rng_seeded(0, 0, i, 0);
  int64_t row = (i >= 0 && i < exec->n) ? exec->rows[i] : -1 - i;
  return rill_rng_seeded(exec->seed, exec->epoch, row, exec->column);
}
const int64_t* rill_exec_rows(const rill_exec_t* exec) { return exec ? exec->rows : NULL; }
int64_t rill_exec_epoch(const rill_exec_t* exec) { return exec ? exec->epoch : 0; }
int rill_exec_worker(const rill_exec_t* exec) { return exec ? exec->worker : -1; }
int rill_exec_column(const rill_exec_t* exec) { return exec ? exec->column : -1; }
rill_stream_t* rill_exec_stream(const rill_exec_t* exec) { return exec ? exec->stream : NULL; }
void* rill_exec_cuda_stream(const rill_exec_t* exec) {
  return exec && exec->stream ? rill_stream_cuda_handle(exec->stream) : NULL;
}

int rill_exec_alloc(rill_exec_t* exec, rill_array_t* out, rill_type_t type, int64_t length) {
  (void)exec;
  if (!out || !out->priv || length < 0) return RILL_EINVAL;
  if (out->priv->flags & RILL__ARRAY_SLOT) {
    if (!rill_type_equal(&type, &out->type) || length != out->length) return RILL_EINVAL;
    return RILL_OK;
  }
  if (out->priv->flags & RILL__ARRAY_EXTERNAL) return RILL_EINVAL;
  return rill__array_prepare(out, type, length, false);
}

/* ---------------------------------------------------------------- helpers */


enum { FATE_OK = 0, FATE_NULL, FATE_SKIP, FATE_RAISE };

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

/* Writes the row ids of frame `f` when they were left implied by f->seq. */
static int frame_rows(rill__chunk_t* ch, rill__frame_t* f) {
  if (f->rows_ok) return RILL_OK;
  int64_t n = ch->level_n[f->level];
  if (ensure_i64(&f->rows, &f->rows_cap, n) != RILL_OK) return RILL_ENOMEM;
  /* locals (a store through rows could alias f->seq) and four ids per step: this runs for
   * every row of every chunk */
  int64_t* rows = f->rows;
  const int64_t seq = f->seq;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    rows[i] = seq + i;
    rows[i + 1] = seq + i + 1;
    rows[i + 2] = seq + i + 2;
    rows[i + 3] = seq + i + 3;
  }
  for (; i < n; i++) rows[i] = seq + i;
  f->rows_ok = 1;
  return RILL_OK;
}

/* Row id of cell i of frame `f` (written or implied). */
static inline int64_t frame_row(const rill__frame_t* f, int64_t i) { return f->rows_ok ? f->rows[i] : f->seq + i; }

static const char* col_name(const rill_df_t* df, int c) { return df->cols[c]->field.name; }

/* Records a failure of the whole chunk (the first one wins). */
static void chunk_fail(rill__chunk_t* ch, int code, const char* fmt, ...) RILL_PRINTF(3, 4);
static void chunk_fail(rill__chunk_t* ch, int code, const char* fmt, ...) {
  pthread_mutex_lock(&ch->mu);
  if (ch->rc == RILL_OK) {
    va_list ap;
    va_start(ap, fmt);
    rill__vfail(&ch->err, code, fmt, ap);
    va_end(ap);
    ch->err.row = ch->start;
    ch->err.column = ch->reqcol;
    ch->rc = code;
  }
  pthread_mutex_unlock(&ch->mu);
}

static int chunk_failed(rill__chunk_t* ch) {
  pthread_mutex_lock(&ch->mu);
  int failed = ch->rc != RILL_OK;
  pthread_mutex_unlock(&ch->mu);
  return failed;
}

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
static int compact_level(rill__chunk_t* ch, int level, const uint8_t* keep) {
  int64_t n = ch->level_n[level], m = 0;
  for (int64_t i = 0; i < n; i++) m += keep[i] != 0;
  for (int d = 0; d < ch->nframes; d++) {
    rill__frame_t* f = &ch->frames[d];
    if (f->level != level || !f->df) continue;
    if (frame_rows(ch, f) != RILL_OK) return RILL_ENOMEM;
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

/* ---------------------------------------------------------------- running one stage */

/* One output of a stage run: the stage's own column, or one requested column of a source
 * group (all filled by the same calls). */
typedef struct member {
  rill__column_t* c;
  int col;            /* index in the frame's dataframe */
  int gi;             /* a group's column: its index in the group (outs[gi]) */
  rill__node_t* node;
  int fixed;
  rill_array_t* out;  /* a split variable-length run's part: its own array; else the output */
} member_t;

typedef struct run {
  rill__chunk_t* ch;
  rill__frame_t* fr;
  rill__column_t* c; /* the stage's column (a group: the first requested one): opts, name */
  rill__node_t* node;
  int col;
  int rowmode; /* a RAISE drops the row and records its error (row mode, top level) */
  int64_t n;
  int nin;
  const rill_array_t* child; /* reduce input */
  rill__srcgroup_t* group;   /* a source group's run */
  int nm;                    /* outputs: m[0..nm) */
  member_t* m;
  int fixed;      /* every output has fixed-shape cells */
  int out_direct; /* var outputs: `out` are still the first call's own arrays */
  pthread_mutex_t mu;
  uint8_t* fate;
  int64_t nulled, nfate;
  int fail_rc; /* a RAISE outside row mode: the chunk fails with the first cell's error */
  int64_t fail_cell;
  _Atomic int64_t ns;
  /* a task's part of a split variable-length stage: cells [base, base+n) of `top`, whose
   * fate, counters, errors and mutex are shared; its var outputs are the part's own arrays */
  int64_t base;
  struct run* top;
  member_t m1; /* the one output of a stage that is not a group */
  /* not cleared by run_stage (the large members last): in[i] is read for i < nin only, and
   * fail_err only once fail_rc < 0 */
  const rill_array_t* in[RILL__MAX_INPUTS];
  rill_error_t fail_err;
} run_t;

void rill__exec_count_nulled(rill_exec_t* exec, int64_t n) {
  if (!exec || !exec->run || n <= 0) return;
  run_t* T = exec->run->top;
  pthread_mutex_lock(&T->mu);
  T->nulled += n;
  pthread_mutex_unlock(&T->mu);
}

typedef struct inview {
  rill_array_t arr;
  rill_array_priv_t priv;
  uint8_t* bits;
  rill_array_t* slice;
} inview_t;

static int inview_make(inview_t* v, const rill_array_t* src, int64_t a, int64_t k, const rill_array_t** out) {
  v->bits = NULL;
  v->slice = NULL;
  if (src->offsets) {
    int r = rill_array_slice(src, a, k, &v->slice, NULL);
    *out = v->slice;
    return r;
  }
  memset(&v->priv, 0, sizeof v->priv);
  atomic_init(&v->priv.refs, 1);
  v->priv.flags = RILL__ARRAY_EXTERNAL;
  v->arr = *src;
  v->arr.priv = &v->priv;
  int64_t cb = rill_type_cell_bytes(&src->type);
  v->arr.data = (uint8_t*)src->data + a * (cb > 0 ? cb : 0);
  v->arr.data_size = k * (cb > 0 ? cb : 0);
  v->arr.length = k;
  v->arr.validity = NULL;
  v->arr.null_count = 0;
  if (src->validity && src->null_count > 0) {
    if ((a & 7) == 0) {
      v->arr.validity = src->validity + (a >> 3);
    } else {
      v->bits = rill__calloc((size_t)(k + 7) / 8 + 1, 1);
      if (!v->bits) return RILL_ENOMEM;
      for (int64_t i = 0; i < k; i++)
        if (rill__bit_get(src->validity, a + i)) rill__bit_set(v->bits, i);
      v->arr.validity = v->bits;
    }
    v->arr.null_count = rill__count_nulls(v->arr.validity, k);
  }
  *out = &v->arr;
  return RILL_OK;
}

static void inview_free(inview_t* v) {
  rill__free(v->bits);
  rill_array_release(v->slice);
}

/* The message of a failed cell, naming row and column. */
static void format_cell_error(run_t* R, int64_t idx, const char* stage, const rill_error_t* e, rill_error_t* out) {
  rill__chunk_t* ch = R->ch;
  rill_df_t* top = ch->it->df;
  const char* req = col_name(top, ch->reqcol);
  int64_t row = R->rowmode ? R->fr->rows[idx] : ch->start;
  char where[160];
  if (ch->it->batched)
    snprintf(where, sizeof where, "batch %lld (row %lld)", (long long)ch->start, (long long)R->fr->rows[idx]);
  else
    snprintf(where, sizeof where, "row %lld", (long long)row);
  out->code = e->code;
  out->row = row;
  out->column = ch->reqcol;
  if (strcmp(req, stage) == 0 && R->fr == &ch->frames[0])
    rill_error_set(out, e->code, "%s, column '%s': %s", where, stage, e->message);
  else
    rill_error_set(out, e->code, "%s, column '%s' (stage '%s'): %s", where, req, stage, e->message);
}


/* Applies the stage's on_error to cell idx of the run's outputs. An output whose cell the
 * call did not write (filled NULL, or filled[j] == 0) gets an empty cell (variable cells) or
 * zeros, and under RILL_ON_ERROR_NULL becomes null. */
static void cell_fail(run_t* R, int64_t idx, const rill_error_t* e, const uint8_t* filled) {
  rill__chunk_t* ch = R->ch;
  int policy = R->c->opts.on_error;
  run_t* T = R->top;
  int64_t g = R->base + idx; /* index in the top run's cells (and in shared fixed outputs) */
  int64_t nnull = 0;
  for (int j = 0; j < R->nm; j++) {
    if (filled && filled[j]) continue;
    member_t* mb = &R->m[j];
    if (!mb->fixed) {
      int64_t zeros[RILL_MAX_NDIM] = {0};
      if (rill_array_set_var(mb->out, idx, NULL, 0, zeros) != RILL_OK) {
        chunk_fail(ch, RILL_ENOMEM, "column '%s': out of memory", mb->c->field.name);
        return;
      }
    } else if (rill__device_is_host(mb->out->device)) {
      int64_t cb = rill_type_cell_bytes(&mb->out->type);
      if (cb > 0) memset((uint8_t*)mb->out->data + g * cb, 0, (size_t)cb);
    }
    if (policy != RILL_ON_ERROR_NULL) continue;
    pthread_mutex_lock(&T->mu);
    int r = rill_array_set_null(mb->out, mb->fixed ? g : idx);
    pthread_mutex_unlock(&T->mu);
    if (r != RILL_OK) {
      chunk_fail(ch, RILL_ENOMEM, "column '%s': cannot make cell null (out of memory or device memory)",
                 mb->c->field.name);
      return;
    }
    nnull++;
  }
  pthread_mutex_lock(&T->mu);
  if (policy == RILL_ON_ERROR_NULL) {
    T->nulled += nnull;
    pthread_mutex_unlock(&T->mu);
    return;
  }
  if (!T->fate) {
    T->fate = rill__calloc((size_t)T->n, 1);
    if (!T->fate) {
      pthread_mutex_unlock(&T->mu);
      chunk_fail(ch, RILL_ENOMEM, "column '%s': out of memory", R->c->field.name);
      return;
    }
  }
  T->fate[g] = policy == RILL_ON_ERROR_SKIP ? FATE_SKIP : FATE_RAISE;
  T->nfate++;
  if (policy == RILL_ON_ERROR_RAISE) {
    const char* stage = R->c->field.name;
    if (R->group && e->column >= 0 && e->column < R->group->n)
      stage = R->fr->df->cols[R->group->first + e->column]->field.name;
    if (T->rowmode) {
      pthread_mutex_lock(&ch->mu);
      if (ch->nrerr == ch->rerr_cap) {
        int64_t ncap = ch->rerr_cap ? ch->rerr_cap * 2 : 4;
        rill__rowerr_t* nr = rill__realloc(ch->rerr, sizeof *nr * (size_t)ch->rerr_cap, sizeof *nr * (size_t)ncap);
        if (!nr) {
          pthread_mutex_unlock(&ch->mu);
          pthread_mutex_unlock(&T->mu);
          chunk_fail(ch, RILL_ENOMEM, "column '%s': out of memory", R->c->field.name);
          return;
        }
        ch->rerr = nr;
        ch->rerr_cap = ncap;
      }
      rill__rowerr_t* re = &ch->rerr[ch->nrerr++];
      format_cell_error(T, g, stage, e, &re->err);
      re->row = re->err.row;
      pthread_mutex_unlock(&ch->mu);
    } else if (T->fail_cell < 0 || g < T->fail_cell) {
      T->fail_cell = g;
      T->fail_rc = e->code;
      format_cell_error(T, g, stage, e, &T->fail_err);
    }
  }
  pthread_mutex_unlock(&T->mu);
}

/* Moves cells [s, s+k) of `piece` (a window over a fixed output, or a var array) into the
 * member's output at a+s. */
static int commit(run_t* R, member_t* mb, rill_array_t* piece, int64_t a, int64_t s, int64_t k) {
  if (mb->fixed) {
    if (piece->validity) {
      pthread_mutex_lock(&R->top->mu);
      for (int64_t j = s; j < s + k; j++)
        if (!rill__bit_get(piece->validity, j) && rill_array_set_null(mb->out, R->base + a + j) != RILL_OK) {
          pthread_mutex_unlock(&R->top->mu);
          return RILL_ENOMEM;
        }
      pthread_mutex_unlock(&R->top->mu);
    }
    return RILL_OK;
  }
  for (int64_t j = s; j < s + k; j++) {
    rill__cell_t cv;
    rill__cell_view(piece, j, &cv);
    if (rill_array_set_var(mb->out, a + j, cv.data, cv.nbytes, cv.shape) != RILL_OK) return RILL_ENOMEM;
    if (!cv.valid && rill_array_set_null(mb->out, a + j) != RILL_OK) return RILL_ENOMEM;
  }
  return RILL_OK;
}

static int piece_ok(const member_t* mb, const rill_array_t* piece, int64_t k) {
  return piece->length == k && rill_type_equal(&piece->type, &mb->c->field.type) &&
         (mb->fixed || (piece->offsets && piece->priv->var_cells >= 0));
}

/* Data bytes that k cells of the output are expected to take. */
static int64_t expect_bytes(const member_t* mb, int64_t k) {
  int64_t per = mb->fixed ? rill_type_cell_bytes(&mb->c->field.type) : atomic_load(&mb->node->bytes_per_row);
  int64_t b;
  if (per < 0 || __builtin_mul_overflow(per, k, &b)) return 0;
  return b;
}

/* An array of the node's pool. A device or pinned array may have been handed to a consumer
 * whose CUDA stream still reads it: when the iterator released it, it recorded an event on
 * that stream (iter.c, consumer_fence), and writing into the array again waits for that
 * event: a CUDA stage's stream waits on the device, a host stage waits on the host. Arrays
 * of host pools never carry such an event. `bytes`: the data bytes expected (picks the pooled
 * array whose buffer fits best). */
static int node_acquire(rill__node_t* node, int64_t bytes, rill_array_t** out, rill_error_t* e) {
  if (rill__pool_acquire_fit(node->pool, bytes, out) != RILL_OK) return rill_error_set(e, RILL_ENOMEM, "out of memory");
  rill_array_t* a = *out;
  if (!a->event || a->device.type == 0 || a->device.type == RILL_DEVICE_CPU) return RILL_OK;
  void* stream = node->stream && node->device.type == RILL_DEVICE_CUDA ? rill_stream_cuda_handle(node->stream) : NULL;
  int r = rill__event_wait(a->event, stream, e);
  if (r != RILL_OK) {
    rill_array_release(a);
    *out = NULL;
  }
  return r;
}

/* The arrays one call fills: a window over each fixed output, the output itself or an
 * array of the pool for each variable one. */
typedef struct piece {
  rill_array_t win;
  rill_array_priv_t wpriv;
  rill_array_t* a;
} piece_t;

/* Releases pieces[0..n): windows, and var arrays that are not the member's output. */
static void pieces_release(run_t* R, piece_t* p, int n) {
  for (int j = 0; j < n; j++) {
    if (R->m[j].fixed)
      rill__array_window_release(&p[j].win);
    else if (p[j].a != R->m[j].out)
      rill_array_release(p[j].a);
  }
}

/* Var outputs: after the first call failed, each `out` becomes a fresh array of n cells and
 * the first call's array becomes its piece. */
static int var_detach(run_t* R, piece_t* p) {
  for (int j = 0; j < R->nm; j++) {
    member_t* mb = &R->m[j];
    if (mb->fixed) continue;
    rill_array_t* fresh;
    rill_error_t e;
    if (node_acquire(mb->node, expect_bytes(mb, R->n), &fresh, &e) != RILL_OK) return RILL_ENOMEM;
    if (rill__array_prepare(fresh, mb->c->field.type, R->n, false) != RILL_OK) {
      rill_array_release(fresh);
      return RILL_ENOMEM;
    }
    p[j].a = mb->out;
    mb->out = fresh;
  }
  R->out_direct = 0;
  return RILL_OK;
}

static void call_range(run_t* R, int64_t a, int64_t b);

/* One call of the stage function for cells [a, b); returns the status and fills e. */
static int invoke(run_t* R, int64_t a, int64_t b, piece_t* p, rill_error_t* e) {
  rill__chunk_t* ch = R->ch;
  int64_t k = b - a;
  rill_exec_t ex = {.rows = R->fr->rows + R->base + a, .n = k, .first = a, .epoch = ch->epoch,
                    .seed = ch->it->seed, .column = R->col, .worker = rill__worker_index(),
                    .stream = R->node->stream, .run = R};
  inview_t views[R->nin > 0 ? R->nin : 1];
  const rill_array_t* ins[R->nin > 0 ? R->nin : 1];
  int nv = 0, rc = RILL_OK;
  rill_array_t* group = NULL;
  e->code = 0;
  e->row = -1;
  e->column = -1;
  e->message[0] = '\0';
  if (R->c->kind == RILL__COL_MAP) {
    for (int i = 0; i < R->nin; i++) {
      if (R->top == R && a == 0 && b == R->n) {
        ins[i] = R->in[i];
        continue;
      }
      rc = inview_make(&views[nv], R->in[i], R->base + a, k, &ins[i]);
      nv++;
      if (rc != RILL_OK) break;
    }
  } else if (R->c->kind == RILL__COL_REDUCE) {
    int64_t s = R->fr->goff[a], en = R->fr->goff[a + 1];
    rc = rill_array_slice(R->child, s, en - s, &group, NULL);
  }
  if (rc != RILL_OK) {
    rill_error_set(e, rc, "out of memory preparing the inputs");
  } else {
    pthread_mutex_t* serial = NULL;
    if (R->c->opts.where == RILL_STAGE_CPU_SERIAL) serial = R->group ? &R->group->serial : &R->c->serial;
    if (serial) pthread_mutex_lock(serial);
    int64_t t0 = rill__now_ns();
    if (R->group) {
      int nouts = R->group->n;
      rill_array_t* outs[nouts];
      memset(outs, 0, sizeof outs);
      for (int j = 0; j < R->nm; j++) outs[R->m[j].gi] = p[j].a;
      rc = R->group->fn(ex.rows, k, outs, nouts, &ex, R->group->ctx, e);
    } else if (R->c->kind == RILL__COL_SOURCE) {
      rc = R->c->source(ex.rows, k, p[0].a, &ex, R->c->ctx, e);
    } else if (R->c->kind == RILL__COL_MAP) {
      rc = R->c->map(ins, R->nin, p[0].a, &ex, R->c->ctx, e);
    } else {
      rc = R->c->reduce(group, p[0].a, &ex, R->c->ctx, e);
    }
    int64_t dt = rill__now_ns() - t0;
    if (serial) pthread_mutex_unlock(serial);
    atomic_fetch_add(&R->top->ns, dt);
    atomic_fetch_add(&ch->it->st_compute, dt);
    atomic_fetch_add(&ch->it->st_calls, 1);
    if (rc > 0) {
      rill_error_set(e, RILL_ESTAGE, "the stage function returned status %d", rc);
      rc = RILL_ESTAGE;
    } else if (rc < 0 && (e->code == 0 || !e->message[0])) {
      if (e->code == 0) e->code = rc;
      snprintf(e->message, sizeof e->message, "%s", rill_strerror(rc));
    }
    if (rc < 0) e->code = rc;
    for (int j = 0; rc == RILL_OK && j < R->nm; j++) {
      if (piece_ok(&R->m[j], p[j].a, k)) continue;
      char t1[96], t2[96];
      rill_error_set(e, RILL_ESTAGE, "the stage function produced %lld cells of %s for %lld rows of %s",
                     (long long)p[j].a->length, rill_type_format(&p[j].a->type, t1, sizeof t1), (long long)k,
                     rill_type_format(&R->m[j].c->field.type, t2, sizeof t2));
      e->row = -1;
      e->column = R->group ? R->m[j].gi : -1;
      rc = RILL_ESTAGE;
    }
  }
  if (!R->group) e->column = -1;
  for (int i = 0; i < nv; i++) inview_free(&views[i]);
  rill_array_release(group);
  return rc;
}

static void call_range(run_t* R, int64_t a, int64_t b) {
  int nm = R->nm;
  piece_t one;
  piece_t* p = nm == 1 ? &one : rill__alloc(sizeof *p * (size_t)nm);
  uint8_t* filled = nm == 1 ? NULL : rill__alloc((size_t)nm);
  if (!p || (nm > 1 && !filled)) {
    if (p != &one) rill__free(p);
    rill__free(filled);
    chunk_fail(R->ch, RILL_ENOMEM, "column '%s': out of memory", R->c->field.name);
    return;
  }
  while (a < b && !chunk_failed(R->ch)) {
    int64_t k = b - a;
    int direct = R->out_direct && a == 0 && b == R->n;
    int made = 0;
    for (; made < nm; made++) {
      member_t* mb = &R->m[made];
      if (mb->fixed) {
        rill__array_window(&p[made].win, &p[made].wpriv, mb->out, R->base + a, k);
        p[made].a = &p[made].win;
      } else if (direct) {
        p[made].a = mb->out;
      } else {
        rill_error_t ae;
        int ar = node_acquire(mb->node, expect_bytes(mb, k), &p[made].a, &ae);
        if (ar != RILL_OK) {
          pieces_release(R, p, made);
          chunk_fail(R->ch, ar, "column '%s': %s", mb->c->field.name, ae.message);
          goto out;
        }
      }
    }
    rill_error_t e;
    int rc = invoke(R, a, b, p, &e);
    if (rc == RILL_OK) {
      int cr = RILL_OK;
      for (int j = 0; j < nm && cr == RILL_OK; j++)
        if (p[j].a != R->m[j].out) cr = commit(R, &R->m[j], p[j].a, a, 0, k);
      pieces_release(R, p, nm);
      if (cr != RILL_OK) chunk_fail(R->ch, cr, "column '%s': out of memory", R->c->field.name);
      goto out;
    }
    int64_t i = (e.row >= 0 && e.row < k) ? e.row : -1;
    if (!R->fixed && direct && var_detach(R, p) != RILL_OK) {
      pieces_release(R, p, nm);
      chunk_fail(R->ch, RILL_ENOMEM, "column '%s': out of memory", R->c->field.name);
      goto out;
    }
    int usable = 1;
    for (int j = 0; j < nm; j++)
      usable &= piece_ok(&R->m[j], p[j].a, k) && (R->m[j].fixed || p[j].a->priv->var_cells >= i);
    if (i > 0) {
      if (usable) {
        for (int j = 0; j < nm; j++)
          if (commit(R, &R->m[j], p[j].a, a, 0, i) != RILL_OK) {
            chunk_fail(R->ch, RILL_ENOMEM, "column '%s': out of memory", R->c->field.name);
            break;
          }
      } else {
        call_range(R, a, a + i); /* the function gave nothing usable: recompute the cells before */
      }
    }
    /* a group's NULL policy with the faulty column named: the other columns keep the cell */
    int keep = filled && i >= 0 && usable && R->c->opts.on_error == RILL_ON_ERROR_NULL && e.column >= 0 &&
               !chunk_failed(R->ch);
    for (int j = 0; filled && j < nm; j++) {
      member_t* mb = &R->m[j];
      filled[j] = keep && mb->gi != e.column && (mb->fixed || p[j].a->priv->var_cells > i) &&
                  commit(R, mb, p[j].a, a, i, 1) == RILL_OK;
    }
    pieces_release(R, p, nm);
    if (i < 0) {
      for (int64_t j = a; j < b; j++) cell_fail(R, j, &e, NULL);
      goto out;
    }
    cell_fail(R, a + i, &e, filled);
    a += i + 1;
  }
out:
  if (p != &one) rill__free(p);
  rill__free(filled);
}

typedef struct split {
  run_t* R;
  int64_t a, b;
  rill__task_t task;
} split_t;

static void split_main(void* arg) {
  split_t* s = arg;
  call_range(s->R, s->a, s->b);
}

typedef struct vsplit {
  run_t sub;
  rill__task_t task;
} vsplit_t;

static void vsplit_main(void* arg) {
  vsplit_t* v = arg;
  call_range(&v->sub, 0, v->sub.n);
}

/* A stage with variable-length outputs split across threads: each task fills its own arrays
 * (fixed outputs are shared: tasks write disjoint cells), then the parts are appended in
 * order to the stage's outputs. */
static void run_var_split(run_t* R, int64_t grain, int64_t ntasks) {
  rill_iter_t* it = R->ch->it;
  int nm = R->nm;
  vsplit_t* vs = rill__calloc((size_t)ntasks, sizeof *vs);
  member_t* ms = rill__calloc((size_t)ntasks * (size_t)nm, sizeof *ms);
  if (!vs || !ms) {
    rill__free(vs);
    rill__free(ms);
    call_range(R, 0, R->n);
    return;
  }
  int64_t made = 0;
  int ok = 1;
  for (; made < ntasks && ok; made++) {
    run_t* s = &vs[made].sub;
    s->ch = R->ch;
    s->fr = R->fr;
    s->c = R->c;
    s->node = R->node;
    s->col = R->col;
    s->rowmode = R->rowmode;
    s->nin = R->nin;
    s->group = R->group;
    for (int i = 0; i < R->nin; i++) s->in[i] = R->in[i];
    s->fail_cell = -1;
    s->top = R;
    s->base = made * grain;
    s->n = (made + 1 == ntasks ? R->n : (made + 1) * grain) - s->base;
    s->out_direct = 1;
    s->nm = nm;
    s->m = ms + made * nm;
    for (int j = 0; j < nm; j++) {
      s->m[j] = R->m[j];
      if (s->m[j].fixed) continue;
      rill_error_t ae;
      if (node_acquire(R->m[j].node, expect_bytes(&R->m[j], s->n), &s->m[j].out, &ae) != RILL_OK) {
        s->m[j].out = NULL;
        ok = 0;
        break;
      }
    }
    vs[made].task.fn = vsplit_main;
    vs[made].task.arg = &vs[made];
  }
  if (!ok) {
    chunk_fail(R->ch, RILL_ENOMEM, "column '%s': out of memory", R->c->field.name);
  } else {
    rill__group_t g = {.pending = 0, .prio = R->ch->prio};
    for (int64_t t = 1; t < ntasks; t++) {
      vs[t].task.group = &g;
      rill__workers_submit(it->workers, &vs[t].task);
    }
    vsplit_main(&vs[0]);
    rill__workers_wait(it->workers, &g);
    R->out_direct = 0;
    for (int j = 0; j < nm && !chunk_failed(R->ch); j++) {
      member_t* mb = &R->m[j];
      if (mb->fixed) continue;
      if (rill__array_prepare(mb->out, mb->c->field.type, R->n, false) != RILL_OK) {
        chunk_fail(R->ch, RILL_ENOMEM, "column '%s': out of memory", mb->c->field.name);
        break;
      }
      int64_t total = 0;
      for (int64_t t = 0; t < ntasks; t++) total += vs[t].sub.m[j].out->data_size;
      if (rill_array_reserve(mb->out, total) != RILL_OK)
        chunk_fail(R->ch, RILL_ENOMEM, "column '%s': out of memory", mb->c->field.name);
      for (int64_t t = 0; t < ntasks && !chunk_failed(R->ch); t++)
        if (commit(R, mb, vs[t].sub.m[j].out, vs[t].sub.base, 0, vs[t].sub.n) != RILL_OK) {
          chunk_fail(R->ch, RILL_ENOMEM, "column '%s': out of memory", mb->c->field.name);
          break;
        }
    }
  }
  for (int64_t t = 0; t < made; t++)
    for (int j = 0; j < nm; j++)
      if (!vs[t].sub.m[j].fixed) rill_array_release(vs[t].sub.m[j].out);
  rill__free(ms);
  rill__free(vs);
}

static int64_t pick_grain(run_t* R, int nthreads) {
  int64_t g = R->c->opts.grain;
  if (g > 0) return g;
  int64_t nspr = atomic_load(&R->node->ns_per_row);
  if (nspr <= 0) {
    /* not measured yet (the first chunk): four tasks per thread (of at least 16 rows), so that
     * a thread busy with a later chunk's first task soon comes back to help the first chunk */
    int64_t parts = 4 * ((int64_t)nthreads + 1);
    g = (R->n + parts - 1) / parts;
    return g < 16 ? 16 : g;
  }
  g = 20000 / nspr;                                          /* a task of about 20 us */
  return g < 1 ? 1 : g;
}

static void run_cells(run_t* R) {
  rill_iter_t* it = R->ch->it;
  int nthreads = rill__workers_count(it->workers);
  if (R->c->kind == RILL__COL_REDUCE) {
    for (int64_t i = 0; i < R->n && !chunk_failed(R->ch); i++) call_range(R, i, i + 1);
    return;
  }
  int64_t grain = pick_grain(R, nthreads);
  if (grain < 1) grain = 1;
  /* maps on a batched dataframe receive whole batches */
  int whole = it->batched && R->fr == &R->ch->frames[0];
  int splittable = !whole && R->c->opts.where == RILL_STAGE_CPU && nthreads > 0 && R->n > grain;
  int64_t ntasks = splittable ? (R->n + grain - 1) / grain : 1;
  if (!R->fixed && ntasks > 1) {
    run_var_split(R, grain, ntasks);
    return;
  }
  split_t* sp = ntasks > 1 ? rill__calloc((size_t)ntasks, sizeof *sp) : NULL;
  if (!sp) {
    call_range(R, 0, R->n);
    return;
  }
  rill__group_t g = {.pending = 0, .prio = R->ch->prio};
  for (int64_t t = 0; t < ntasks; t++) {
    sp[t].R = R;
    sp[t].a = t * grain;
    sp[t].b = t + 1 == ntasks ? R->n : (t + 1) * grain;
    sp[t].task.fn = split_main;
    sp[t].task.arg = &sp[t];
    sp[t].task.group = &g;
    if (t > 0) rill__workers_submit(it->workers, &sp[t].task);
  }
  call_range(R, sp[0].a, sp[0].b);
  rill__workers_wait(it->workers, &g);
  rill__free(sp);
}

static int wait_inputs(run_t* R, const rill_array_t* const* in, int nin, rill_error_t* e) {
  void* stream = R->c->opts.where == RILL_STAGE_CUDA ? rill_stream_cuda_handle(R->node->stream) : NULL;
  for (int i = 0; i < nin; i++) {
    if (!in[i]) continue;
    int r = rill__event_wait(in[i]->event, stream, e);
    if (r != RILL_OK) return r;
  }
  return RILL_OK;
}

static const rill_array_t* get_col(rill__chunk_t* ch, int d, int c);

/* A source column whose cells of the chunk are consecutive rows it can lend (col->lend):
 * the lent array becomes the column's value, no buffer is filled and no task is split. NULL
 * when the source is called instead. */
static const rill_array_t* lend_cells(rill__chunk_t* ch, int d, int c, int64_t n) {
  rill__frame_t* fr = &ch->frames[d];
  rill__column_t* col = fr->df->cols[c];
  rill__node_t* node = ch->it->nodemap[d][c];
  if (col->kind != RILL__COL_SOURCE || !col->lend || n <= 0 || col->opts.where != RILL_STAGE_CPU ||
      node->device.type != RILL_DEVICE_CPU || !rill_type_is_fixed(&col->field.type))
    return NULL;
  if (fr->seq < 0) {
    const int64_t* rows = fr->rows;
    if (rows[n - 1] - rows[0] != n - 1) return NULL;
    for (int64_t i = 1; i < n; i++)
      if (rows[i] != rows[i - 1] + 1) return NULL;
  }
  rill_array_t* a = NULL;
  if (col->lend(col->ctx, frame_row(fr, 0), n, &a) != RILL_OK || !a) return NULL;
  if (a->length != n || !rill_type_equal(&a->type, &col->field.type) ||
      (a->device.type != 0 && a->device.type != RILL_DEVICE_CPU) || (a->validity && a->null_count > 0)) {
    rill_array_release(a);
    return NULL;
  }
  fr->vals[c] = a;
  return a;
}

/* The outputs of the stage of column c of frame d: the column itself, or for a source group
 * every column of the group that the iterator needs and that is not computed yet. */
static int run_members(run_t* R, rill__chunk_t* ch, int d, int c) {
  rill__frame_t* fr = &ch->frames[d];
  rill__srcgroup_t* g = fr->df->cols[c]->group;
  R->fixed = 1;
  if (!g) {
    R->m = &R->m1;
    R->nm = 1;
    R->m1 = (member_t){.c = fr->df->cols[c], .col = c, .node = R->node};
  } else {
    R->m = rill__alloc(sizeof *R->m * (size_t)g->n);
    if (!R->m) return RILL_ENOMEM;
    R->group = g;
    R->m[R->nm++] = (member_t){.c = fr->df->cols[c], .col = c, .gi = c - g->first, .node = R->node};
    for (int k = g->first; k < g->first + g->n; k++)
      if (k != c && ch->it->nodemap[d][k] && !fr->vals[k])
        R->m[R->nm++] = (member_t){.c = fr->df->cols[k], .col = k, .gi = k - g->first, .node = ch->it->nodemap[d][k]};
  }
  for (int j = 0; j < R->nm; j++) {
    R->m[j].fixed = rill_type_is_fixed(&R->m[j].c->field.type);
    R->fixed &= R->m[j].fixed;
  }
  return RILL_OK;
}

/* Computes SOURCE/MAP/REDUCE column c of frame d (a source group: with the other columns
 * of the group that the iterator needs); stores it in the frame. */
static const rill_array_t* run_stage(rill__chunk_t* ch, int d, int c) {
  rill__frame_t* fr = &ch->frames[d];
  rill__column_t* col = fr->df->cols[c];
  run_t R;
  memset(&R, 0, offsetof(run_t, in));
  R.ch = ch;
  R.fr = fr;
  R.c = col;
  R.col = c;
  R.node = ch->it->nodemap[d][c];
  R.fail_cell = -1;
  R.top = &R;
  if (col->kind == RILL__COL_MAP) {
    R.nin = col->ninputs;
    for (int i = 0; i < col->ninputs; i++)
      if (!(R.in[i] = get_col(ch, d, col->inputs[i]))) return NULL;
  } else if (col->kind == RILL__COL_REDUCE) {
    if (!(R.child = get_col(ch, d + 1, col->pcol))) return NULL;
  }
  R.n = ch->level_n[fr->level];
  R.rowmode = !ch->it->batched && fr->level == 0;
  const rill_array_t* lent = lend_cells(ch, d, c, R.n);
  if (lent) return lent;
  if (frame_rows(ch, fr) != RILL_OK || run_members(&R, ch, d, c) != RILL_OK) {
    chunk_fail(ch, RILL_ENOMEM, "column '%s': out of memory", col->field.name);
    return NULL;
  }
  rill_error_t e;
  const rill_array_t* child1[1] = {R.child};
  int ok = wait_inputs(&R, R.child ? child1 : R.in, R.child ? 1 : R.nin, &e) == RILL_OK;
  if (!ok) chunk_fail(ch, e.code, "column '%s': %s", col->field.name, e.message);
  int nout = 0; /* outputs acquired */
  for (; ok && nout < R.nm; nout++) {
    member_t* mb = &R.m[nout];
    int ar = node_acquire(mb->node, expect_bytes(mb, R.n), &mb->out, &e);
    if (ar != RILL_OK) {
      chunk_fail(ch, ar, "column '%s': %s", mb->c->field.name, e.message);
      ok = 0;
      break;
    }
    if (mb->fixed || R.n == 0) {
      int r = rill__array_prepare(mb->out, mb->c->field.type, R.n, false);
      if (r != RILL_OK) {
        rill_array_release(mb->out);
        chunk_fail(ch, r, "column '%s': cannot allocate %lld cells (%s)", mb->c->field.name, (long long)R.n,
                   rill_strerror(r));
        ok = 0;
        break;
      }
    }
  }
  if (ok && pthread_mutex_init(&R.mu, NULL) != 0) {
    chunk_fail(ch, RILL_ENOMEM, "column '%s': cannot create a mutex", col->field.name);
    ok = 0;
  }
  if (!ok) {
    for (int j = 0; j < nout; j++) rill_array_release(R.m[j].out);
    if (R.m != &R.m1) rill__free(R.m);
    return NULL;
  }
  R.out_direct = !R.fixed && R.n > 0;
  if (R.n > 0) run_cells(&R);
  pthread_mutex_destroy(&R.mu);
  for (int j = 0; j < R.nm; j++) {
    member_t* mb = &R.m[j];
    if (R.n > 0) {
      int64_t nspr = atomic_load(&R.ns) / R.n;
      atomic_store(&mb->node->ns_per_row, nspr > 0 ? nspr : 1);
      if (!mb->fixed && mb->out->offsets) atomic_store(&mb->node->bytes_per_row, (mb->out->data_size + R.n - 1) / R.n);
    }
    fr->vals[mb->col] = mb->out;
  }
  rill_array_t* out = R.m[0].out;
  if (R.m != &R.m1) rill__free(R.m);
  ch->nulled += R.nulled;
  if (ch->rc == RILL_OK && R.fail_rc < 0) {
    pthread_mutex_lock(&ch->mu);
    if (ch->rc == RILL_OK) {
      ch->rc = R.fail_rc;
      ch->err = R.fail_err;
    }
    pthread_mutex_unlock(&ch->mu);
  }
  if (ch->rc == RILL_OK && col->opts.where == RILL_STAGE_CUDA && R.n > 0) {
    int r = RILL_OK;
    if (!out->event) r = rill__cuda_event_new(R.node->device.id, &out->event, &e);
    if (r == RILL_OK) r = rill__cuda_event_record(out->event, rill_stream_cuda_handle(R.node->stream), &e);
    if (r != RILL_OK) chunk_fail(ch, r, "column '%s': %s", col->field.name, e.message);
  }
  if (ch->rc == RILL_OK && R.nfate > 0) {
    int64_t skipped = 0;
    for (int64_t i = 0; i < R.n; i++) {
      skipped += R.fate[i] == FATE_SKIP;
      R.fate[i] = R.fate[i] == FATE_OK || R.fate[i] == FATE_NULL;
    }
    ch->skipped += skipped;
    if (compact_level(ch, fr->level, R.fate) != RILL_OK)
      chunk_fail(ch, RILL_ENOTSUP, "column '%s': rows cannot be dropped from device arrays", col->field.name);
  }
  rill__free(R.fate);
  return ch->rc == RILL_OK ? out : NULL;
}

/* Batch column with NCHW layout: transposes each [H,W,C] cell to [C,H,W]. */
static const rill_array_t* transpose_col(rill__chunk_t* ch, int c, const rill_array_t* a) {
  rill__column_t* col = ch->frames[0].df->cols[c];
  rill__node_t* node = ch->it->nodemap[0][c];
  if (!rill__device_is_host(a->device)) {
    chunk_fail(ch, RILL_ENOTSUP, "column '%s': NCHW batches of device arrays are not supported", col->field.name);
    return NULL;
  }
  rill_error_t e;
  if (rill__event_wait(a->event, NULL, &e) != RILL_OK) {
    chunk_fail(ch, e.code, "column '%s': %s", col->field.name, e.message);
    return NULL;
  }
  rill_array_t* out;
  int ar = node_acquire(node, a->length * rill_type_cell_bytes(&col->field.type), &out, &e);
  if (ar != RILL_OK) {
    chunk_fail(ch, ar, "column '%s': %s", col->field.name, e.message);
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
    chunk_fail(ch, r, "column '%s': cannot allocate the batch", col->field.name);
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

static const rill_array_t* get_col(rill__chunk_t* ch, int d, int c) {
  rill__frame_t* fr = &ch->frames[d];
  if (fr->vals[c]) return fr->vals[c];
  rill__column_t* col = fr->df->cols[c];
  switch (col->kind) {
    case RILL__COL_PARENT: return get_col(ch, d + 1, c);
    case RILL__COL_BATCH: {
      const rill_array_t* a = get_col(ch, d + 1, col->pcol);
      if (!a || !col->transpose) return a;
      return transpose_col(ch, c, a);
    }
    default: return run_stage(ch, d, c);
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
  if (!ch->frames || !ch->level_n || !ch->cols) return RILL_ENOMEM;
  for (int d = 0; d < it->nchain; d++) {
    ch->frames[d].df = it->chain[d];
    int nc = it->chain[d]->ncols;
    ch->frames[d].vals = rill__calloc((size_t)(nc > 0 ? nc : 1), sizeof *ch->frames[d].vals);
    if (!ch->frames[d].vals) return RILL_ENOMEM;
  }
  return RILL_OK;
}

void rill__chunk_release(rill__chunk_t* ch) {
  if (!ch->cols) return;
  for (int q = 0; q < ch->it->nreq; q++) {
    rill_array_release(ch->cols[q]);
    ch->cols[q] = NULL;
  }
  ch->m = 0;
  ch->nrerr = 0;
  ch->rc = RILL_OK;
}

void rill__chunk_destroy(rill__chunk_t* ch) {
  if (!ch->it) return;
  rill__chunk_release(ch);
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
        int64_t s = frame_row(f, g) * df->k, e = s + df->k;
        if (e > prow) e = prow;
        f->goff[g] = total;
        total += e > s ? e - s : 0;
      }
      f->goff[n] = total;
      if (ensure_i64(&p->rows, &p->rows_cap, total) != RILL_OK) return RILL_ENOMEM;
      for (int64_t g = 0; g < n; g++)
        for (int64_t j = f->goff[g]; j < f->goff[g + 1]; j++) p->rows[j] = frame_row(f, g) * df->k + (j - f->goff[g]);
      p->level = f->level + 1;
      p->seq = f->seq >= 0 ? f->seq * df->k : -1; /* whole groups of consecutive rows */
      ch->level_n[p->level] = total;
    } else {
      if (ensure_i64(&p->rows, &p->rows_cap, n) != RILL_OK) return RILL_ENOMEM;
      for (int64_t i = 0; i < n; i++) p->rows[i] = rill__view_row(df, ch->epoch, frame_row(f, i));
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
  ch->nrerr = 0;
  ch->skipped = ch->nulled = 0;
  ch->m = 0;
  ch->reqcol = it->nreq > 0 ? it->req[0] : 0;
  if (setup_frames(ch) != RILL_OK) {
    chunk_fail(ch, RILL_ENOMEM, "rows %lld..%lld: out of memory", (long long)ch->start, (long long)ch->end - 1);
  } else {
    for (int q = 0; q < it->nreq && ch->rc == RILL_OK; q++) {
      ch->reqcol = it->req[q];
      get_col(ch, 0, it->req[q]);
    }
    if (ch->rc == RILL_OK) {
      for (int q = 0; q < it->nreq; q++) {
        ch->reqcol = it->req[q];
        ch->cols[q] = rill_array_retain(get_col(ch, 0, it->req[q]));
      }
      ch->m = it->batched ? (ch->level_n[0] > 0 || it->nreq == 0) : ch->level_n[0];
      if (!it->batched && frame_rows(ch, &ch->frames[0]) != RILL_OK)
        chunk_fail(ch, RILL_ENOMEM, "rows %lld..%lld: out of memory", (long long)ch->start, (long long)ch->end - 1);
      ch->top = ch->frames[0].rows;
      if (ch->nrerr > 1) qsort(ch->rerr, (size_t)ch->nrerr, sizeof *ch->rerr, cmp_rowerr);
    }
  }
  for (int d = 0; d < ch->nframes; d++) {
    rill__frame_t* f = &ch->frames[d];
    for (int c = 0; c < f->df->ncols; c++) {
      rill_array_release(f->vals[c]);
      f->vals[c] = NULL;
    }
  }
  if (ch->rc != RILL_OK) {
    for (int q = 0; q < it->nreq; q++) {
      rill_array_release(ch->cols[q]);
      ch->cols[q] = NULL;
    }
    ch->m = 0;
    ch->nrerr = 0;
  }
}
