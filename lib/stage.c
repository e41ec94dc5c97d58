/* The stage runner: runs one stage (a source, map or reduce column, or a source group's
 * columns together) for the cells of a chunk, and applies its error policy.
 *
 * A call of the stage function fills `pieces`: windows over fixed-shape outputs (the cells
 * are written in place) or arrays of variable cells that are appended to the output. A
 * failed cell (err->row) keeps the cells before it, gets the stage's on_error (RAISE records
 * the row's error, SKIP marks the row to be dropped, NULL makes the cell null) and the
 * function is called again for the cells after it. See engine.h for the error convention
 * and tasks.c for how the cells are split across worker threads. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "stage.h"

enum { FATE_OK = 0, FATE_NULL, FATE_SKIP, FATE_RAISE };

static const char* col_name(const rill_df_t* df, int c) { return df->cols[c]->field.name; }

/* The run's mutex guards what its call ranges share (fate, counters, fixed outputs' validity)
 * when they run at once; a run on one thread has no mutex (tasks.c makes it). */
static inline void run_lock(run_t* T) {
  if (T->parallel) pthread_mutex_lock(&T->mu);
}
static inline void run_unlock(run_t* T) {
  if (T->parallel) pthread_mutex_unlock(&T->mu);
}

void rill__exec_count_nulled(rill_exec_t* exec, int64_t n) {
  if (!exec || !exec->run || n <= 0) return;
  run_t* T = exec->run->top;
  run_lock(T);
  T->nulled += n;
  run_unlock(T);
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

/* Whether column `col` of `df` is `target` or passes its cells on unchanged (a view's or a
 * batch's column over it). */
static int column_reaches(const rill_df_t* df, int col, const rill__column_t* target) {
  while (df && col >= 0 && col < df->ncols) {
    const rill__column_t* c = df->cols[col];
    if (c == target) return 1;
    if (c->kind == RILL__COL_BATCH) col = c->pcol;
    else if (c->kind != RILL__COL_PARENT) return 0;
    df = df->parent;
  }
  return 0;
}

/* The requested column to blame for a failed cell: for a source group whose function named
 * the column at fault, the requested column that carries it; else the column being computed. */
static int blamed_column(run_t* R, const rill_error_t* e) {
  rill__chunk_t* ch = R->ch;
  if (!R->group || e->column < 0 || e->column >= R->group->n) return ch->reqcol;
  const rill__column_t* target = R->fr->df->cols[R->group->first + e->column];
  for (int q = 0; q < ch->it->nreq; q++)
    if (column_reaches(ch->it->df, ch->it->req[q], target)) return ch->it->req[q];
  return ch->reqcol;
}

/* The message of a failed cell, naming row and column. */
static void format_cell_error(run_t* R, int64_t idx, const char* stage, const rill_error_t* e, rill_error_t* out) {
  rill__chunk_t* ch = R->ch;
  rill_df_t* top = ch->it->df;
  int reqcol = blamed_column(R, e);
  const char* req = col_name(top, reqcol);
  /* the iterated dataframe's row: level-0 frames hold their cells in the same order, so the
   * top frame's cell idx is this cell's row there (the stage's own frame, under a shuffle,
   * shard or filter view, numbers its rows otherwise) */
  int64_t row = R->rowmode ? rill__frame_row(&ch->frames[0], idx) : ch->start;
  char where[160];
  if (ch->it->batched)
    snprintf(where, sizeof where, "batch %lld (row %lld)", (long long)ch->start, (long long)R->fr->rows[idx]);
  else if (R->rowmode && R->fr->rows[idx] != row)
    snprintf(where, sizeof where, "row %lld (the stage's row %lld)", (long long)row, (long long)R->fr->rows[idx]);
  else
    snprintf(where, sizeof where, "row %lld", (long long)row);
  out->code = e->code;
  out->row = row;
  out->column = reqcol;
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
        rill__chunk_fail(ch, RILL_ENOMEM, "column '%s': out of memory", mb->c->field.name);
        return;
      }
    } else if (rill__device_is_host(mb->out->device)) {
      int64_t cb = rill_type_cell_bytes(&mb->out->type);
      if (cb > 0) memset((uint8_t*)mb->out->data + g * cb, 0, (size_t)cb);
    }
    if (policy != RILL_ON_ERROR_NULL) continue;
    run_lock(T);
    int r = rill_array_set_null(mb->out, mb->fixed ? g : idx);
    run_unlock(T);
    if (r != RILL_OK) {
      rill__chunk_fail(ch, RILL_ENOMEM, "column '%s': cannot make cell null (out of memory or device memory)",
                 mb->c->field.name);
      return;
    }
    nnull++;
  }
  run_lock(T);
  if (policy == RILL_ON_ERROR_NULL) {
    T->nulled += nnull;
    run_unlock(T);
    return;
  }
  if (!T->fate) {
    T->fate = rill__calloc((size_t)T->n, 1);
    if (!T->fate) {
      run_unlock(T);
      rill__chunk_fail(ch, RILL_ENOMEM, "column '%s': out of memory", R->c->field.name);
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
          run_unlock(T);
          rill__chunk_fail(ch, RILL_ENOMEM, "column '%s': out of memory", R->c->field.name);
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
  run_unlock(T);
}

/* Moves cells [s, s+k) of `piece` (a window over a fixed output, or a var array) into the
 * member's output at a+s. */
int rill__commit(run_t* R, member_t* mb, rill_array_t* piece, int64_t a, int64_t s, int64_t k) {
  if (mb->fixed) {
    if (piece->validity) {
      run_lock(R->top);
      for (int64_t j = s; j < s + k; j++)
        if (!rill__bit_get(piece->validity, j) && rill_array_set_null(mb->out, R->base + a + j) != RILL_OK) {
          run_unlock(R->top);
          return RILL_ENOMEM;
        }
      run_unlock(R->top);
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
  return piece->length == k && rill__type_same(&piece->type, &mb->c->field.type) && /* the column's is valid */
         (mb->fixed || (piece->offsets && piece->priv->var_cells >= 0));
}

/* Data bytes that k cells of the output are expected to take. */
int64_t rill__expect_bytes(const member_t* mb, int64_t k) {
  int64_t per = mb->fixed ? mb->cell : atomic_load_explicit(&mb->node->bytes_per_row, memory_order_relaxed);
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
int rill__node_acquire(rill__node_t* node, int64_t bytes, rill_array_t** out, rill_error_t* e) {
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
    if (R->m[j].fixed) {
      if (p[j].wpriv.validity_buf) rill__array_window_release(&p[j].win); /* else it owns nothing */
    }
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
    if (rill__node_acquire(mb->node, rill__expect_bytes(mb, R->n), &fresh, &e) != RILL_OK) return RILL_ENOMEM;
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

/* One call of the stage function for cells [a, b); returns the status and fills e, and adds
 * the time the function took (the run's clock) to *spent. */
static int invoke(run_t* R, int64_t a, int64_t b, piece_t* p, rill_error_t* e, int64_t* spent) {
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
    const double scale = R->top->scale;
    const int timed = R->top->timed;
    int64_t t0 = timed ? rill__clk_now(scale) : 0;
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
    int64_t dt = timed ? rill__clk_now(scale) - t0 : 0;
    if (serial) pthread_mutex_unlock(serial);
    *spent += dt > 0 ? dt : 0; /* a thread moved to a CPU whose counter lags: not negative */
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

enum { POPULATE_PART_MIN = 64 << 10 };

void rill__call_range(run_t* R, int64_t a, int64_t b) {
  int nm = R->nm;
  piece_t one;
  piece_t* p = nm == 1 ? &one : rill__alloc(sizeof *p * (size_t)nm);
  uint8_t* filled = nm == 1 ? NULL : rill__alloc((size_t)nm);
  if (!p || (nm > 1 && !filled)) {
    if (p != &one) rill__free(p);
    rill__free(filled);
    rill__chunk_fail(R->ch, RILL_ENOMEM, "column '%s': out of memory", R->c->field.name);
    return;
  }
  int64_t spent = 0, calls = 0; /* added to the top run once, not per call */
  while (a < b && !rill__chunk_failed(R->ch)) {
    int64_t k = b - a;
    int direct = R->out_direct && a == 0 && b == R->n;
    int made = 0;
    for (; made < nm; made++) {
      member_t* mb = &R->m[made];
      if (mb->fixed) {
        rill__array_window_cells(&p[made].win, &p[made].wpriv, mb->out, mb->cell, R->base + a, k);
        p[made].a = &p[made].win;
        /* a fresh buffer is mapped by the calls that write it, in parallel where the stage is
         * split (a 154 MB batch takes tens of ms); small parts fault page by page */
        if (mb->fresh && k * mb->cell >= POPULATE_PART_MIN) rill__populate(p[made].win.data, (size_t)(k * mb->cell));
      } else if (direct) {
        p[made].a = mb->out;
      } else {
        rill_error_t ae;
        int ar = rill__node_acquire(mb->node, rill__expect_bytes(mb, k), &p[made].a, &ae);
        if (ar != RILL_OK) {
          pieces_release(R, p, made);
          rill__chunk_fail(R->ch, ar, "column '%s': %s", mb->c->field.name, ae.message);
          goto out;
        }
      }
    }
    rill_error_t e;
    int rc = invoke(R, a, b, p, &e, &spent);
    calls++;
    if (rc == RILL_OK) {
      int cr = RILL_OK;
      for (int j = 0; j < nm && cr == RILL_OK; j++)
        if (p[j].a != R->m[j].out && (!R->m[j].fixed || p[j].a->validity)) /* else nothing to move */
          cr = rill__commit(R, &R->m[j], p[j].a, a, 0, k);
      pieces_release(R, p, nm);
      if (cr != RILL_OK) rill__chunk_fail(R->ch, cr, "column '%s': out of memory", R->c->field.name);
      goto out;
    }
    int64_t i = (e.row >= 0 && e.row < k) ? e.row : -1;
    if (!R->fixed && direct && var_detach(R, p) != RILL_OK) {
      pieces_release(R, p, nm);
      rill__chunk_fail(R->ch, RILL_ENOMEM, "column '%s': out of memory", R->c->field.name);
      goto out;
    }
    int usable = 1;
    for (int j = 0; j < nm; j++)
      usable &= piece_ok(&R->m[j], p[j].a, k) && (R->m[j].fixed || p[j].a->priv->var_cells >= i);
    if (i > 0) {
      if (usable) {
        for (int j = 0; j < nm; j++)
          if (rill__commit(R, &R->m[j], p[j].a, a, 0, i) != RILL_OK) {
            rill__chunk_fail(R->ch, RILL_ENOMEM, "column '%s': out of memory", R->c->field.name);
            break;
          }
      } else {
        rill__call_range(R, a, a + i); /* the function gave nothing usable: recompute the cells before */
      }
    }
    /* a group's NULL policy with the faulty column named: the other columns keep the cell */
    int keep = filled && i >= 0 && usable && R->c->opts.on_error == RILL_ON_ERROR_NULL && e.column >= 0 &&
               !rill__chunk_failed(R->ch);
    for (int j = 0; filled && j < nm; j++) {
      member_t* mb = &R->m[j];
      filled[j] = keep && mb->gi != e.column && (mb->fixed || p[j].a->priv->var_cells > i) &&
                  rill__commit(R, mb, p[j].a, a, i, 1) == RILL_OK;
    }
    pieces_release(R, p, nm);
    if (i < 0) {
      for (int64_t j = a; j < b; j++) cell_fail(R, j, &e, NULL);
      goto out;
    }
    cell_fail(R, a + i, &e, filled);
    a += i + 1;
  }
out:;
  run_t* T = R->top;
  if (calls && T->parallel) {
    atomic_fetch_add_explicit(&T->ns, spent, memory_order_relaxed);
    atomic_fetch_add_explicit(&T->calls, calls, memory_order_relaxed);
  } else if (calls) { /* the run's only thread: no locked instruction */
    atomic_store_explicit(&T->ns, atomic_load_explicit(&T->ns, memory_order_relaxed) + spent, memory_order_relaxed);
    atomic_store_explicit(&T->calls, atomic_load_explicit(&T->calls, memory_order_relaxed) + calls,
                          memory_order_relaxed);
  }
  if (p != &one) rill__free(p);
  rill__free(filled);
}

/* After a CUDA stage enqueued its work: that work reads the stage's device and pinned inputs
 * on the stage's stream, later than the host lets go of them. An input of a pool goes back to
 * it when the chunk drops its values, and the stage that writes into it next waits for its
 * event (rill__node_acquire): the event is recorded again here, behind the reads, as the
 * iterator does for its consumer's stream (iter.c, consumer_fence). Without it a copy to the
 * device could overwrite an input that a stage held back on the GPU (waiting for a slow
 * consumer) had not read yet. Lent arrays (no pool) are never written again. The stage
 * waited for the input's previous event (wait_inputs), so the new one comes after it. */
static int fence_inputs(run_t* R, rill_error_t* e) {
  void* stream = rill_stream_cuda_handle(R->node->stream);
  if (!stream) return RILL_OK;
  for (int i = 0; i < R->nin; i++) {
    rill_array_t* a = (rill_array_t*)R->in[i];
    while (a && a->priv->parent) a = (rill_array_t*)a->priv->parent; /* a slice: its owner */
    if (!a || !a->priv->pool) continue;
    int r = rill__array_fence(a, R->node->device.id, stream, e);
    if (r != RILL_OK) return r;
  }
  return RILL_OK;
}

static int wait_inputs(run_t* R, const rill_array_t* const* in, int nin, rill_error_t* e) {
  void* stream = R->c->opts.where == RILL_STAGE_CUDA ? rill_stream_cuda_handle(R->node->stream) : NULL;
  for (int i = 0; i < nin; i++) {
    if (!in[i] || !in[i]->event) continue;
    int r = rill__event_wait(in[i]->event, stream, e);
    if (r != RILL_OK) return r;
  }
  return RILL_OK;
}

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
  if (col->lend(col->ctx, rill__frame_row(fr, 0), n, &a) != RILL_OK || !a) return NULL;
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
    member_t* mb = &R->m[j];
    mb->fixed = mb->node->fixed; /* the column's type, known since the plan */
    mb->cell = mb->node->cell;
    R->fixed &= mb->fixed;
  }
  return RILL_OK;
}

/* Whether the calls of a run of `node` over n cells are timed. Timing a call reads the clock
 * twice (the time-stamp counter: some 10-20 ns a reading on a virtual machine, a visible part
 * of a trivial stage's run over a batch of 1,024 int64 rows). A run whose cost, estimated from
 * the stage's last timed run, is under UNTIMED_RUN_NS is timed at its sampled turns only
 * (rill__timed_turn of the stage's run count: one in 8 on average, scattered); the others
 * count the estimate (compute_ns). A stage that turns expensive is noticed at its next
 * timed run, and from then on every run is timed; one that turns cheap is timed until a run
 * shows it. A stage's first run is timed (tasks.c probes the cost of a stage not measured
 * yet; later splits read the measured cost per row, ns_per_row, which only timed runs set).
 * Threads running the stage at once may lose a count or pair one run's time with another's
 * cells: the sampling shifts, nothing more. */
enum { UNTIMED_RUN_NS = RILL__HANDOFF_NS / 4 };

static int run_timed(rill__node_t* node, int64_t n) {
  int64_t runs = atomic_load_explicit(&node->runs, memory_order_relaxed);
  atomic_store_explicit(&node->runs, runs + 1, memory_order_relaxed);
  if (rill__timed_turn((uint64_t)runs)) return 1;
  int64_t rows = atomic_load_explicit(&node->timed_rows, memory_order_relaxed);
  int64_t ns = atomic_load_explicit(&node->timed_ns, memory_order_relaxed);
  return rows <= 0 || (double)ns * (double)n >= (double)UNTIMED_RUN_NS * (double)rows;
}

/* Computes SOURCE/MAP/REDUCE column c of frame d (a source group: with the other columns
 * of the group that the iterator needs); stores it in the frame. */
const rill_array_t* rill__run_stage(rill__chunk_t* ch, int d, int c) {
  rill__frame_t* fr = &ch->frames[d];
  rill__column_t* col = fr->df->cols[c];
  /* field by field: a memset of the run's first few hundred bytes compiles to `rep stos`,
   * whose start-up cost is a visible part of a cheap stage's */
  run_t R;
  R.ch = ch;
  R.fr = fr;
  R.c = col;
  R.node = ch->it->nodemap[d][c];
  R.col = c;
  R.rowmode = 0;
  R.n = 0;
  R.nin = 0;
  R.child = NULL;
  R.group = NULL;
  R.nm = 0;
  R.m = NULL;
  R.fixed = 0;
  R.out_direct = 0;
  R.fate = NULL;
  R.nulled = R.nfate = 0;
  R.fail_rc = 0;
  R.fail_cell = -1;
  R.scale = rill__clk_start();
  atomic_init(&R.ns, 0);
  atomic_init(&R.calls, 0);
  R.parallel = 0;
  R.base = 0;
  R.top = &R;
  if (col->kind == RILL__COL_MAP) {
    R.nin = col->ninputs;
    for (int i = 0; i < col->ninputs; i++)
      if (!(R.in[i] = rill__chunk_column(ch, d, col->inputs[i]))) return NULL;
  } else if (col->kind == RILL__COL_REDUCE) {
    if (!(R.child = rill__chunk_column(ch, d + 1, col->pcol))) return NULL;
  }
  R.n = ch->level_n[fr->level];
  R.rowmode = !ch->it->batched && fr->level == 0;
  const rill_array_t* lent = lend_cells(ch, d, c, R.n);
  if (lent) return lent;
  if (rill__frame_rows(ch, fr) != RILL_OK || run_members(&R, ch, d, c) != RILL_OK) {
    rill__chunk_fail(ch, RILL_ENOMEM, "column '%s': out of memory", col->field.name);
    return NULL;
  }
  rill_error_t e;
  const rill_array_t* child1[1] = {R.child};
  int ok = wait_inputs(&R, R.child ? child1 : R.in, R.child ? 1 : R.nin, &e) == RILL_OK;
  if (!ok) rill__chunk_fail(ch, e.code, "column '%s': %s", col->field.name, e.message);
  int nout = 0; /* outputs acquired */
  for (; ok && nout < R.nm; nout++) {
    member_t* mb = &R.m[nout];
    int64_t bytes = rill__expect_bytes(mb, R.n);
    mb->out = mb->fixed ? rill__chunk_spare(ch, mb->node, bytes) : NULL;
    int spare = mb->out != NULL;
    int ar = spare ? RILL_OK : rill__node_acquire(mb->node, bytes, &mb->out, &e);
    if (ar == RILL_OK) mb->out->priv->engine = mb->node; /* may become the chunk's spare (rill__chunk_drop) */
    if (ar != RILL_OK) {
      rill__chunk_fail(ch, ar, "column '%s': %s", mb->c->field.name, e.message);
      ok = 0;
      break;
    }
    if (mb->fixed || R.n == 0) {
      int r = mb->fixed ? rill__array_prepare_fixed(mb->out, &mb->c->field.type, mb->cell, R.n, !spare, &mb->fresh)
                        : rill__array_prepare(mb->out, mb->c->field.type, R.n, false);
      if (r != RILL_OK) {
        rill_array_release(mb->out);
        rill__chunk_fail(ch, r, "column '%s': cannot allocate %lld cells (%s)", mb->c->field.name, (long long)R.n,
                   rill_strerror(r));
        ok = 0;
        break;
      }
    }
  }
  if (!ok) {
    for (int j = 0; j < nout; j++) rill_array_release(R.m[j].out);
    if (R.m != &R.m1) rill__free(R.m);
    return NULL;
  }
  R.out_direct = !R.fixed && R.n > 0;
  R.timed = R.n > 0 && run_timed(R.node, R.n);
  if (R.n > 0) rill__run_cells(&R);
  int64_t ns = atomic_load_explicit(&R.ns, memory_order_relaxed);
  if (!R.timed) { /* the last timed run's cost, for as many cells (no division: batches of a size) */
    int64_t rows = atomic_load_explicit(&R.node->timed_rows, memory_order_relaxed);
    ns = atomic_load_explicit(&R.node->timed_ns, memory_order_relaxed);
    if (rows != R.n) ns = rows > 0 ? (int64_t)((double)ns * (double)R.n / (double)rows) : 0;
  } else if (R.scale > 0) {
    ns = (int64_t)((double)ns * R.scale);
  } else {
    rill__clk_refresh(rill__clk_ticks()); /* the first rate (chunks measure it again: rill__stopwatch_ns) */
  }
  if (R.timed) {
    atomic_store_explicit(&R.node->timed_ns, ns, memory_order_relaxed);
    atomic_store_explicit(&R.node->timed_rows, R.n, memory_order_relaxed);
  }
  /* the chunk adds them to its slot's totals once, at its end */
  ch->st_ns += ns;
  ch->st_calls += atomic_load_explicit(&R.calls, memory_order_relaxed);
  for (int j = 0; j < R.nm; j++) {
    member_t* mb = &R.m[j];
    if (R.timed) { /* hints read by later runs: no ordering needed */
      /* the cost per row falls at once but rises at most fourfold per run: one run slowed by
       * preemption (milliseconds on a busy machine) would otherwise cut the next chunk of a
       * cheap stage into hundreds of tasks worth less than their hand-off (tasks.c) */
      int64_t nspr = ns / R.n, was = atomic_load_explicit(&mb->node->ns_per_row, memory_order_relaxed);
      if (was > 0 && nspr > 4 * was) nspr = 4 * was;
      atomic_store_explicit(&mb->node->ns_per_row, nspr > 0 ? nspr : 1, memory_order_relaxed);
      if (!mb->fixed && mb->out->offsets)
        atomic_store_explicit(&mb->node->bytes_per_row, (mb->out->data_size + R.n - 1) / R.n, memory_order_relaxed);
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
      atomic_store_explicit(&ch->failed, 1, memory_order_release);
    }
    pthread_mutex_unlock(&ch->mu);
  }
  if (ch->rc == RILL_OK && col->opts.where == RILL_STAGE_CUDA && R.n > 0) {
    int r = RILL_OK;
    if (!out->event) r = rill__cuda_event_new(R.node->device.id, &out->event, &e);
    if (r == RILL_OK) r = rill__cuda_event_record(out->event, rill_stream_cuda_handle(R.node->stream), &e);
    if (r == RILL_OK) r = fence_inputs(&R, &e);
    if (r != RILL_OK) rill__chunk_fail(ch, r, "column '%s': %s", col->field.name, e.message);
  }
  if (ch->rc == RILL_OK && R.nfate > 0) {
    int64_t skipped = 0;
    for (int64_t i = 0; i < R.n; i++) {
      skipped += R.fate[i] == FATE_SKIP;
      R.fate[i] = R.fate[i] == FATE_OK || R.fate[i] == FATE_NULL;
    }
    ch->skipped += skipped;
    if (rill__compact_level(ch, fr->level, R.fate) != RILL_OK)
      rill__chunk_fail(ch, RILL_ENOTSUP, "column '%s': rows cannot be dropped from device arrays", col->field.name);
  }
  if (R.fate) rill__free(R.fate);
  return ch->rc == RILL_OK ? out : NULL;
}

