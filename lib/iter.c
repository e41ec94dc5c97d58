/* Iterators: a plan of the stages the requested columns need, a ring of prefetch slots
 * (each computes one chunk of consecutive rows on the worker pool), and the hand-out of
 * rows (or batches) in order, with per-row errors, seek, epochs and save/restore.
 *
 * Chunks: a batched dataframe, or one whose ancestry holds a reduce, is computed one row
 * per chunk; otherwise chunks hold up to 256 rows (fewer when a stage asks for a smaller
 * grain) and rill_iter_next hands out length-1 slices of the chunk's arrays. */
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/resource.h>

#include "engine.h"

#define ROW_CHUNK 256

/* ---------------------------------------------------------------- plan */

static int add_node(rill_iter_t* it, int d, int c, int pinned, rill_error_t* err) {
  rill_df_t* df = it->chain[d];
  rill__column_t* col = df->cols[c];
  rill__node_t* n = rill__calloc(1, sizeof *n);
  if (!n) return rill__fail(err, RILL_ENOMEM, "rill_iter_new: out of memory");
  if (it->nnodes % 16 == 0) {
    rill__node_t** nn = rill__realloc(it->nodes, sizeof *nn * (size_t)it->nnodes, sizeof *nn * (size_t)(it->nnodes + 16));
    if (!nn) {
      rill__free(n);
      return rill__fail(err, RILL_ENOMEM, "rill_iter_new: out of memory");
    }
    it->nodes = nn;
  }
  n->index = it->nnodes;
  it->nodes[it->nnodes++] = n;
  it->nodemap[d][c] = n;
  n->df = df;
  n->col = c;
  n->depth = d;
  n->device = (rill_device_t){RILL_DEVICE_CPU, 0};
  n->fixed = rill_type_is_fixed(&col->field.type);
  n->cell = n->fixed ? rill_type_cell_bytes(&col->field.type) : -1;
  if (col->kind != RILL__COL_BATCH && col->opts.where == RILL_STAGE_CUDA) {
    n->device = (rill_device_t){RILL_DEVICE_CUDA, col->opts.device};
    int r = rill_stream_new_cuda(col->opts.device, &n->stream, err);
    if (r != RILL_OK) return r;
  } else if (pinned) {
    n->device = (rill_device_t){RILL_DEVICE_CUDA_HOST, 0};
  }
  n->pool = rill__pool_new(n->device);
  if (!n->pool) return rill__fail(err, RILL_ENOMEM, "rill_iter_new: out of memory");
  return RILL_OK;
}

/* Marks column c of chain[d] and everything it needs. `pinned`: the column's cells become
 * the batches of a batch with pinned = 1 (and a CUDA device exists): its stage allocates
 * pinned host memory. Without a device, pinned batches use ordinary host memory. */
static int need(rill_iter_t* it, int d, int c, int pinned, int64_t* min_grain, rill_error_t* err) {
  rill__node_t* have = it->nodemap[d][c];
  if (have) {
    if (pinned && have->device.type == RILL_DEVICE_CPU) { /* plan time: the pool is still empty */
      rill_pool_t* p = rill__pool_new((rill_device_t){RILL_DEVICE_CUDA_HOST, 0});
      if (!p) return rill__fail(err, RILL_ENOMEM, "rill_iter_new: out of memory");
      rill__pool_free(have->pool);
      have->pool = p;
      have->device = (rill_device_t){RILL_DEVICE_CUDA_HOST, 0};
    }
    return RILL_OK;
  }
  rill__column_t* col = it->chain[d]->cols[c];
  int r = RILL_OK;
  switch (col->kind) {
    case RILL__COL_PARENT: return need(it, d + 1, c, pinned, min_grain, err);
    case RILL__COL_BATCH:
      if (col->transpose && (r = add_node(it, d, c, 0, err)) != RILL_OK) return r;
      pinned = it->chain[d]->bopts.pinned && !col->transpose && rill__cuda_device_count() > 0;
      return need(it, d + 1, col->pcol, pinned, min_grain, err);
    case RILL__COL_SOURCE:
    case RILL__COL_MAP:
    case RILL__COL_REDUCE:
      if ((r = add_node(it, d, c, pinned, err)) != RILL_OK) return r;
      if (col->opts.grain > 0 && col->opts.grain < *min_grain) *min_grain = col->opts.grain;
      if (col->kind == RILL__COL_MAP)
        for (int i = 0; i < col->ninputs && r == RILL_OK; i++) r = need(it, d, col->inputs[i], 0, min_grain, err);
      if (col->kind == RILL__COL_REDUCE) r = need(it, d + 1, col->pcol, 0, min_grain, err);
      return r;
  }
  return RILL_OK;
}

static uint64_t fingerprint(const rill_iter_t* it) {
  uint64_t h = RILL__FNV_START;
  for (int d = 0; d < it->nchain; d++) {
    const rill_df_t* df = it->chain[d];
    int64_t v[8] = {df->kind, df->rows, df->ncols, (int64_t)df->seed, df->rank, df->world, df->batch, df->k};
    h = rill__fnv(h, v, sizeof v);
    int64_t b[2] = {df->bopts.drop_last, df->bopts.layout};
    h = rill__fnv(h, b, sizeof b);
    if (df->kind == RILL__DF_SLICE) h = rill__fnv(h, &df->offset, sizeof df->offset);
    if (df->kind == RILL__DF_TAKE || df->kind == RILL__DF_CONCAT) h = rill__fnv(h, &df->kept_hash, sizeof df->kept_hash);
    for (int c = 0; c < df->ncols; c++) {
      const rill_field_t* f = &df->cols[c]->field;
      h = rill__fnv(h, f->name, strlen(f->name) + 1);
      int64_t t[2] = {f->type.dtype, f->type.ndim};
      h = rill__fnv(h, t, sizeof t);
      h = rill__fnv(h, f->type.shape, sizeof(int64_t) * (size_t)f->type.ndim);
    }
  }
  for (int q = 0; q < it->nreq; q++) h = rill__fnv(h, &it->req[q], sizeof it->req[q]);
  return h;
}

/* ---------------------------------------------------------------- slots */

/* Evaluates a slot's chunk and records how long it took (the hand-off decision): the
 * shorter of the last two chunks' times, so that one chunk slowed by a preemption does not
 * send the next cheap chunks to the workers. Chunks too cheap to hand off are timed at their
 * sampled turns only (rill__timed_turn of the chunk's sequence number): two readings of the
 * clock and a locked exchange are a visible part of a 1 us chunk, and once a timed one takes
 * a hand-off's worth every chunk is timed again. Returns the chunk's time: measured, or for an
 * untimed one the last timed chunk's (the consumer's wait for a chunk it computes itself). */
static int64_t slot_eval(rill__slot_t* s) {
  rill_iter_t* it = s->chunk.it;
  int64_t last = atomic_load_explicit(&it->chunk_last_ns, memory_order_relaxed);
  if (last > 0 && last < RILL__CHUNK_HANDOFF_NS && !rill__timed_turn((uint64_t)s->chunk.prio)) {
    rill__chunk_eval(&s->chunk);
    return last;
  }
  rill__stopwatch_t sw;
  rill__stopwatch_start(&sw);
  rill__chunk_eval(&s->chunk);
  int64_t ns = rill__stopwatch_ns(&sw);
  if (it->nthreads == 0) { /* this thread alone evaluates chunks: no locked instruction */
    atomic_store_explicit(&it->chunk_last_ns, ns, memory_order_relaxed);
    return ns;
  }
  int64_t prev = atomic_exchange_explicit(&it->chunk_last_ns, ns, memory_order_relaxed);
  atomic_store_explicit(&it->chunk_ns, prev > 0 && prev < ns ? prev : ns, memory_order_relaxed);
  return ns;
}

static void slot_main(void* arg) { (void)slot_eval(arg); }

/* Whether the next chunk goes to a worker thread: there are threads, and the last two chunks
 * each took longer than a hand-off (RILL__CHUNK_HANDOFF_NS; or none has been measured yet, or
 * the caller asked for it with rill_iter_prefetch). */
static int worth_a_thread(const rill_iter_t* it, int asked) {
  if (it->ahead == 0 || it->nthreads == 0) return 0;
  if (asked) return 1;
  int64_t ns = atomic_load_explicit(&((rill_iter_t*)it)->chunk_ns, memory_order_relaxed);
  return ns <= 0 || ns >= RILL__CHUNK_HANDOFF_NS;
}

/* Whether the last two chunks each took less than RILL__HELP_LATER_NS (and more than a
 * hand-off: cheaper ones are not sent to the workers at all). For such chunks a sleep of the
 * consumer waiting for one, and its wake-up, cost a large share of the work (CSV batches of
 * 1,024 rows, about 120 us each: some 20 us of CPU a hand-off on the workers' cores, more on a
 * virtual machine), so the consumer computes queued chunks itself while it waits (at most one
 * cheap chunk's delay to the one it waits for), and takes a worker's core for it: where the
 * workers fill the cores, one of them sleeps while the consumer computes (rill__workers_lean)
 * rather than be time-sliced with it (which left a core idle whenever a worker found the
 * queue empty). Once the consumer has been away longer than RILL__HELP_LATER_NS (a training
 * step), every worker works again. */
static int cheap_chunks(const rill_iter_t* it) {
  int64_t ns = atomic_load_explicit(&((rill_iter_t*)it)->chunk_ns, memory_order_relaxed);
  return ns > 0 && ns < RILL__HELP_LATER_NS;
}

/* The workers allowed awake while the consumer computes, for the chunks' cost (cheap_chunks). */
static void set_lean(rill_iter_t* it) {
  if (it->nthreads == 0) return;
  int lean = cheap_chunks(it) && it->nthreads >= it->cores ? it->cores - 1 : it->nthreads;
  if (lean < 1) lean = 1;
  if (lean == it->lean) return;
  it->lean = lean;
  rill__workers_lean(it->workers, lean);
}

static void schedule_upto(rill_iter_t* it, int64_t max, int asked);
/* Starts every chunk the prefetch depth allows. */
static void schedule(rill_iter_t* it) { schedule_upto(it, INT64_MAX, 0); }

static void release_held(rill_iter_t* it) {
  for (int q = 0; q < it->nreq; q++) {
    rill_array_release(it->held[q]);
    it->held[q] = NULL;
  }
}

/* Starts up to `max` more chunks, as many as free slots and remaining rows allow; `asked`:
 * the caller wants them computed now (rill_iter_prefetch), on the workers even when cheap. */
static void schedule_upto(rill_iter_t* it, int64_t max, int asked) {
  set_lean(it);
  for (int64_t started = 0; started < max && it->inflight < it->nslots; started++) {
    if (it->next_start >= it->df->rows) {
      /* the epoch's chunks are all started: go on into the next epoch's first ones, once */
      if (!it->next_epoch || !it->ahead || it->sched_epoch != it->epoch || it->epoch == INT64_MAX || it->df->rows == 0)
        break;
      it->sched_epoch = it->epoch + 1;
      it->next_start = 0;
    }
    rill__slot_t* s = &it->slots[(it->head + it->inflight) % it->nslots];
    s->busy = 1;
    s->done = 0;
    s->chunk.start = it->next_start;
    s->chunk.end = it->next_start + it->chunk_rows;
    if (s->chunk.end > it->df->rows) s->chunk.end = it->df->rows;
    s->chunk.epoch = it->sched_epoch;
    s->chunk.prio = it->seq++;
    it->next_start = s->chunk.end;
    it->inflight++;
    if (worth_a_thread(it, asked)) {
      s->queued = 1;
      s->group.pending = 0;
      s->group.waiters = 0;
      s->group.prio = s->chunk.prio;
      s->task.fn = slot_main;
      s->task.arg = s;
      s->task.group = &s->group;
      rill__workers_submit(it->workers, &s->task);
    }
  }
}

/* Before the chunk's device or pinned arrays go back to their pools, records an event on the
 * consumer's CUDA stream (opts.stream): work the consumer enqueued there may still read
 * them, and the stage that reuses an array waits for the event (exec.c, node_acquire).
 * Host arrays and iterators without a CUDA stream are left alone. When no event can be
 * made or recorded (a CUDA error), reuse cannot be fenced: the array keeps its last event. */
static void consumer_fence(rill_iter_t* it, rill__chunk_t* ch) {
  void* cs = it->stream ? rill_stream_cuda_handle(it->stream) : NULL;
  if (!cs || !ch->cols) return;
  for (int q = 0; q < it->nreq; q++) {
    rill_array_t* a = ch->cols[q];
    if (!a) continue;
    rill_error_t e;
    int dev = a->device.type == RILL_DEVICE_CUDA ? a->device.id : rill_stream_device(it->stream).id;
    (void)rill__array_fence(a, dev, cs, &e);
  }
}

static void slot_finish(rill__slot_t* s, rill_iter_t* it) {
  if (s->queued) {
    rill__workers_cancel(it->workers, &s->group);
    rill__workers_wait(it->workers, &s->group, RILL__WAIT_OLDER);
    s->queued = 0;
  }
  consumer_fence(it, &s->chunk);
  rill__chunk_release(&s->chunk);
  s->busy = 0;
  s->done = 0;
}

/* Lets go of the oldest chunk in flight (the one handed out, if any). */
static void pop_head(rill_iter_t* it) {
  slot_finish(&it->slots[it->head], it);
  it->head = (it->head + 1) % it->nslots;
  it->inflight--;
  it->cur_active = 0;
}

/* Drops every chunk in flight and the rows handed out; the next chunk started is `row` of
 * epoch `epoch`. */
static void drop_all(rill_iter_t* it, int64_t epoch, int64_t row) {
  release_held(it);
  while (it->inflight > 0) pop_head(it);
  it->head = 0;
  it->cur_active = 0;
  it->epoch = it->sched_epoch = epoch;
  it->next_start = it->cursor = row;
}

/* How the consumer waits for a chunk on the workers: it helps with queued work of that chunk
 * and older ones when the workers leave it a core (consumer_helps); and where chunks are cheap
 * it runs the next queued chunk rather than sleep (see cheap_chunks), and, when it spent its
 * last two absences off the CPU, frees the sleeping workers for the next one (see
 * absence_ends). */
static int wait_mode(const rill_iter_t* it) {
  if (cheap_chunks(it)) return it->off_runs >= 2 ? RILL__WAIT_ANY_OFF : RILL__WAIT_ANY;
  return it->consumer_helps ? RILL__WAIT_OLDER : RILL__WAIT_OWN;
}

/* The calling thread's CPU time (ns) and its voluntary context switches (it slept or blocked);
 * 0 on success. */
static int thread_usage(int64_t* cpu_ns, int64_t* sleeps) {
  struct rusage ru;
  if (getrusage(RUSAGE_THREAD, &ru) != 0) return -1;
  *cpu_ns = ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL +
            ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000;
  *sleeps = ru.ru_nvcsw;
  return 0;
}

/* Where cheap chunks keep a worker asleep while the consumer computes (lean below the thread
 * count), the consumer's absences are timed: from the end of one wait for a chunk to the
 * start of the next, by the clock and by its thread's CPU time and voluntary context
 * switches. One of at least a hand-off, with under half of it on the CPU and a sleep in it,
 * was spent sleeping or blocked (a short training step that waits for the GPU): its core was
 * free, and one worker slept through it (a consumer preempted by other work is not counted:
 * the machine has no core to spare then). After two timed absences in a row spent so, the
 * consumer's waits end by waking the sleeping workers (RILL__WAIT_ANY_OFF), so that every
 * worker computes while it is away; one timed absence on the CPU ends that. The thread's
 * usage costs a system call (about 0.2 us here) and a chunk handed to the workers can take
 * only 10 us, so one absence in ABSENCE_EVERY is timed, and only waits for such chunks (a
 * batch of 1,024 int64 rows through a trivial map, computed by the consumer in about 1 us,
 * was 8% slower when every wait counted). */
enum { ABSENCE_EVERY = 4 };

/* As a wait for a chunk on the workers ends: the absence that begins is timed when its turn
 * comes. */
static void absence_begins(rill_iter_t* it) {
  it->left_ns = 0;
  if (it->lean < it->nthreads && ++it->absences % ABSENCE_EVERY == 0 &&
      thread_usage(&it->left_cpu_ns, &it->left_sleeps) == 0)
    it->left_ns = rill__now_ns();
}

/* As the next wait begins: a timed absence spent off the CPU adds to off_runs, any other
 * resets it (and so does a queue without a lean limit: nothing sleeps through an absence). */
static void absence_ends(rill_iter_t* it) {
  if (it->lean >= it->nthreads) {
    it->off_runs = 0;
    return;
  }
  if (it->left_ns <= 0) return;
  int64_t wall = rill__now_ns() - it->left_ns, cpu, sleeps;
  int off = thread_usage(&cpu, &sleeps) == 0;
  /* another thread's usage (an iterator passed between threads): the counts go back, or far */
  int64_t on = cpu - it->left_cpu_ns;
  off = off && on >= 0 && sleeps > it->left_sleeps && wall >= RILL__CHUNK_HANDOFF_NS && on * 2 < wall;
  it->off_runs = off ? it->off_runs + 1 : 0;
}

/* The consumer computes a chunk in slot s, which is not its last one: the buffers its last
 * chunk used (its frames' row ids, its stages' spares) are still in the core's cache, while
 * slot s's were last written a whole ring of chunks ago; when the last slot holds no chunk's
 * results and no worker has it, the two slots trade their buffers. */
static void take_warm(rill_iter_t* it, rill__slot_t* s) {
  int w = it->warm;
  it->warm = (int)(s - it->slots);
  if (w < 0 || w == it->warm) return;
  rill__slot_t* p = &it->slots[w];
  if (p->queued || p->done) return;
  rill__chunk_t *a = &p->chunk, *b = &s->chunk;
  rill_array_t** sp = a->spare;
  a->spare = b->spare;
  b->spare = sp;
  for (int d = 0; d < a->nframes; d++) {
    rill__frame_t *x = &a->frames[d], *y = &b->frames[d], t = *x;
    x->rows = y->rows, x->rows_cap = y->rows_cap, x->goff = y->goff, x->goff_cap = y->goff_cap;
    y->rows = t.rows, y->rows_cap = t.rows_cap, y->goff = t.goff, y->goff_cap = t.goff_cap;
  }
}

/* Waits for slot s's chunk, computing it here when no worker has it; returns the time waited
 * (for a chunk computed here: slot_eval's, an estimate for cheap ones). */
static int64_t wait_slot(rill_iter_t* it, rill__slot_t* s) {
  int64_t ns = 0;
  if (s->queued) {
    rill__stopwatch_t sw;
    rill__stopwatch_start(&sw);
    absence_ends(it);
    rill__workers_wait(it->workers, &s->group, wait_mode(it));
    s->queued = 0;
    absence_begins(it);
    ns = rill__stopwatch_ns(&sw);
  } else if (!s->done) {
    take_warm(it, s);
    ns = slot_eval(s);
  }
  s->done = 1;
  return ns;
}

/* ---------------------------------------------------------------- lifetime */

/* An iterator the parent made with worker threads, in a fork's child: its threads do not
 * exist there, and at the fork they may have held its locks (a queue's, an array pool's) or
 * been half-way through its chunks. The child may only free it. */
#define FORKED_MSG \
  "%s: the iterator was made before fork() with worker threads, which do not exist in this process; free it " \
  "and make a new one"

void rill_iter_free(rill_iter_t* it) {
  if (!it) return;
  if (rill__workers_forked(it->workers)) {
    /* a fork's child: nothing its threads may have been using at the fork is touched (its
     * buffers stay the parent's copy-on-write pages, which cost the child no memory); only
     * the dataframe is let go */
    if (it->df) {
      rill__df_freeze(it->df, -1);
      rill_df_free(it->df);
    }
    return;
  }
  if (it->slots) {
    drop_all(it, it->epoch, 0);
    for (int i = 0; i < it->nslots; i++) rill__chunk_destroy(&it->slots[i].chunk);
  }
  rill__workers_free(it->workers);
  rill__free(it->slots);
  for (int i = 0; i < it->nnodes; i++) {
    rill__pool_free(it->nodes[i]->pool);
    rill_stream_free(it->nodes[i]->stream);
    rill__free(it->nodes[i]);
  }
  rill__free(it->nodes);
  rill__free_vec((void**)it->nodemap, it->nchain);
  rill__free(it->chain);
  rill__free(it->req);
  rill__free(it->held);
  rill__free((void*)it->rowcols);
  if (it->df) {
    rill__df_freeze(it->df, -1);
    rill_df_free(it->df);
  }
  rill__free(it);
}

int rill_iter_new(rill_df_t* df, const rill_iter_opts_t* opts, rill_iter_t** out, rill_error_t* err) {
  const char* who = "rill_iter_new";
  if (!out) return rill__fail(err, RILL_EINVAL, "%s: out is NULL", who);
  *out = NULL;
  if (!df) return rill__fail(err, RILL_EINVAL, "%s: the dataframe is NULL", who);
  rill_iter_opts_t o = {0};
  if (opts) o = *opts;
  if (o.ncolumns < 0 || (o.ncolumns > 0 && !o.columns))
    return rill__fail(err, RILL_EINVAL, "%s: %d columns requested with a NULL list", who, o.ncolumns);
  if (o.columns)
    for (int q = 0; q < o.ncolumns; q++)
      if (o.columns[q] < 0 || o.columns[q] >= df->ncols)
        return rill__bad_column(err, who, df, o.columns[q]);
  if (o.prefetch < RILL_PREFETCH_NONE || o.threads < RILL_THREADS_NONE)
    return rill__fail(err, RILL_EINVAL, "%s: negative prefetch or thread count", who);
  if (o.next_epoch != 0 && o.next_epoch != 1)
    return rill__fail(err, RILL_EINVAL, "%s: next_epoch is %d (0 or 1)", who, o.next_epoch);
  if (o.stream && rill_stream_device(o.stream).type == RILL_DEVICE_CUDA) {
    int r = rill__cuda_check_device(rill_stream_device(o.stream).id, err);
    if (r != RILL_OK) return r;
  }
  rill_iter_t* it = rill__calloc(1, sizeof *it);
  if (!it) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", who);
  it->df = df;
  rill__df_retain(df);
  rill__df_freeze(df, 1);
  it->seed = o.seed;
  it->epoch = it->sched_epoch = o.epoch;
  it->next_epoch = o.next_epoch;
  it->stream = o.stream;
  it->nreq = o.columns ? o.ncolumns : df->ncols;
  int r = RILL_OK;
  size_t nq = (size_t)(it->nreq > 0 ? it->nreq : 1);
  it->req = rill__calloc(nq, sizeof *it->req);
  it->held = rill__calloc(nq, sizeof *it->held);
  it->rowcols = rill__calloc(nq, sizeof *it->rowcols);
  for (const rill_df_t* d = df; d; d = d->parent) it->nchain++;
  it->chain = rill__calloc((size_t)it->nchain, sizeof *it->chain);
  it->nodemap = rill__calloc((size_t)it->nchain, sizeof *it->nodemap);
  if (!it->req || !it->held || !it->rowcols || !it->chain || !it->nodemap) goto nomem;
  for (int q = 0; q < it->nreq; q++) it->req[q] = o.columns ? o.columns[q] : q;
  {
    int d = 0;
    for (rill_df_t* x = df; x; x = x->parent) {
      it->chain[d] = x;
      it->nodemap[d] = rill__calloc((size_t)(x->ncols > 0 ? x->ncols : 1), sizeof **it->nodemap);
      if (!it->nodemap[d]) goto nomem;
      if (x->kind == RILL__DF_REDUCE) it->boundary = 1;
      d++;
    }
  }
  it->batched = df->kind == RILL__DF_BATCH;
  if (it->batched) it->boundary = 1;
  int64_t min_grain = ROW_CHUNK;
  for (int q = 0; q < it->nreq && r == RILL_OK; q++) r = need(it, 0, it->req[q], 0, &min_grain, err);
  if (r != RILL_OK) goto fail;
  it->chunk_rows = it->boundary ? 1 : min_grain;
  /* prefetch: never more chunks ahead than the dataframe has (a huge value costs nothing);
   * threads: at most RILL_MAX_THREADS */
  int64_t prefetch = o.prefetch == 0 ? 2 : o.prefetch == RILL_PREFETCH_NONE ? 0 : o.prefetch;
  int64_t nchunks = (df->rows + it->chunk_rows - 1) / it->chunk_rows;
  int64_t ahead = prefetch == 0 ? 0 : (prefetch + it->chunk_rows - 1) / it->chunk_rows;
  if (ahead > nchunks) ahead = nchunks;
  it->ahead = (int)ahead;
  it->nslots = 1 + it->ahead;
  int cores = it->cores = rill__ncores();
  it->nthreads = o.threads == 0 ? cores : o.threads == RILL_THREADS_NONE ? 0 : o.threads;
  if (it->nthreads > RILL_MAX_THREADS) it->nthreads = RILL_MAX_THREADS;
  /* Waiting for a chunk, the caller helps with the queued tasks only when the workers leave
   * it a core: on a machine they fill, a third thread only preempts a worker midway through
   * a task that the others then wait for (batch 32, 2 threads on 2 cores: 3.5% slower). A
   * chunk that no worker has started yet it still runs itself (no wake-up to wait for). */
  it->consumer_helps = it->nthreads < cores;
  if (rill__workers_new(it->nthreads, &it->workers) != RILL_OK) goto nomem;
  it->lean = it->nthreads;
  it->warm = -1;
  it->slots = rill__calloc((size_t)it->nslots, sizeof *it->slots);
  if (!it->slots) goto nomem;
  for (int i = 0; i < it->nslots; i++)
    if (rill__chunk_init(it, &it->slots[i].chunk) != RILL_OK) goto nomem;
  it->fingerprint = fingerprint(it);
  *out = it;
  return RILL_OK;
nomem:
  r = rill__fail(err, RILL_ENOMEM, "%s: out of memory", who);
fail:
  rill_iter_free(it);
  return r;
}

/* ---------------------------------------------------------------- iteration */

static int sync_columns(rill_iter_t* it, rill__chunk_t* ch, rill_error_t* err) {
  for (int q = 0; q < it->nreq; q++) {
    const rill_array_t* a = ch->cols[q];
    if (!a) continue;
    int r = rill__event_wait(a->event, it->stream ? rill_stream_cuda_handle(it->stream) : NULL, err);
    if (r != RILL_OK) return r;
  }
  return RILL_OK;
}

/* Points row view `v` (made by rill_array_slice, referenced only by the iterator) at cell i
 * of host array `src`, so that row mode allocates nothing per row. */
static int view_rebind(rill_array_t* v, const rill_array_t* src, int64_t i) {
  rill_array_priv_t* p = v->priv;
  /* the array of the last row again (the view holds it: it is the same chunk's), of fixed
   * cells and without nulls: the view's type, size and null state are already its, only the
   * cell moves (the usual row of a chunk: no copy of the type, no cell size computed) */
  if (p->parent == src && !src->offsets && !(src->validity && src->null_count > 0) &&
      src->device.type == RILL_DEVICE_CPU && (p->flags & RILL__ARRAY_EXTERNAL)) {
    v->data = (uint8_t*)src->data + i * v->data_size;
    return RILL_OK;
  }
  if (!(p->flags & RILL__ARRAY_EXTERNAL) || !src->device.type || src->device.type != RILL_DEVICE_CPU ||
      v->device.type != RILL_DEVICE_CPU)
    return RILL_EINVAL;
  if (src->offsets && !p->offsets_buf) {
    p->offsets_buf = rill__alloc(2 * sizeof(int64_t));
    if (!p->offsets_buf) return RILL_ENOMEM;
    p->offsets_cap = 2 * sizeof(int64_t);
  }
  int null = src->validity && src->null_count > 0 && !rill__bit_get(src->validity, i);
  if (null && !p->validity_buf) {
    p->validity_buf = rill__alloc(1);
    if (!p->validity_buf) return RILL_ENOMEM;
    p->validity_cap = 1;
  }
  if (p->parent != src) {
    rill_array_release(p->parent);
    p->parent = rill_array_retain(src);
  }
  v->type = src->type;
  v->length = 1;
  v->event = NULL;
  if (src->offsets) {
    int64_t s = src->offsets[i], e = src->offsets[i + 1];
    p->offsets_buf[0] = 0;
    p->offsets_buf[1] = e - s;
    v->offsets = p->offsets_buf;
    v->data = src->data ? (uint8_t*)src->data + s : NULL;
    v->data_size = e - s;
    v->shapes = src->shapes ? src->shapes + i * src->type.ndim : NULL;
  } else {
    int64_t cb = rill_type_cell_bytes(&src->type);
    v->offsets = NULL;
    v->shapes = NULL;
    v->data = (uint8_t*)src->data + i * cb;
    v->data_size = cb;
  }
  if (null) {
    p->validity_buf[0] = 0;
    v->validity = p->validity_buf;
    v->null_count = 1;
  } else {
    v->validity = NULL;
    v->null_count = 0;
  }
  return RILL_OK;
}

int rill_iter_next(rill_iter_t* it, rill_row_t* row, rill_error_t* err) {
  if (!it || !row) return rill__fail(err, RILL_EINVAL, "rill_iter_next: NULL argument");
  if (rill__workers_forked(it->workers)) return rill__fail(err, RILL_EINVAL, FORKED_MSG, "rill_iter_next");
  for (;;) {
    if (it->cur_active) {
      rill__slot_t* s = &it->slots[it->head];
      rill__chunk_t* ch = &s->chunk;
      if (ch->rc != RILL_OK) {
        int rc = ch->rc;
        if (err) *err = ch->err;
        it->st.errors++;
        it->cursor = ch->end;
        pop_head(it);
        schedule(it);
        return rc;
      }
      int64_t tr = it->pos_r < ch->m ? (it->batched ? ch->start : ch->top[it->pos_r]) : INT64_MAX;
      int64_t te = it->pos_e < ch->nrerr ? ch->rerr[it->pos_e].row : INT64_MAX;
      if (te < tr) {
        if (err) *err = ch->rerr[it->pos_e].err;
        it->pos_e++;
        it->st.errors++;
        it->cursor = te + 1;
        return ch->rerr[it->pos_e - 1].err.code;
      }
      if (tr != INT64_MAX) {
        if (it->batched || it->chunk_rows == 1) {
          for (int q = 0; q < it->nreq; q++) it->rowcols[q] = ch->cols[q];
          it->st.cells += it->batched ? (it->nreq > 0 ? ch->cols[0]->length : 0) : 1;
        } else {
          for (int q = 0; q < it->nreq; q++) {
            if (it->held[q] && rill_array_refcount(it->held[q]) == 1 &&
                view_rebind(it->held[q], ch->cols[q], it->pos_r) == RILL_OK) {
              it->rowcols[q] = it->held[q];
              continue;
            }
            rill_array_release(it->held[q]);
            it->held[q] = NULL;
            if (rill_array_slice(ch->cols[q], it->pos_r, 1, &it->held[q], NULL) != RILL_OK) {
              release_held(it);
              return rill__fail(err, RILL_ENOMEM, "rill_iter_next: out of memory (row %lld)", (long long)tr);
            }
            it->rowcols[q] = it->held[q];
          }
          it->st.cells++;
        }
        it->pos_r++;
        it->st.rows++;
        it->cursor = tr + 1;
        row->index = tr;
        row->ncolumns = it->nreq;
        row->columns = it->rowcols;
        return RILL_OK;
      }
      if (it->cursor < ch->end) it->cursor = ch->end;
      pop_head(it);
    }
    /* Nothing in flight (a new iterator, a seek, a new epoch): the caller waits for the
     * first chunk, so it starts alone and every thread helps with its tasks; the chunks
     * after it are started once it is ready (below), so they do not compete with it. */
    if (it->inflight == 0)
      schedule_upto(it, 1, 0);
    else
      schedule(it);
    /* the epoch is over (the next one's chunks may be running ahead) */
    if (it->inflight == 0 || it->slots[it->head].chunk.epoch != it->epoch) return RILL_END;
    rill__slot_t* s = &it->slots[it->head];
    it->st.wait_ns += wait_slot(it, s);
    it->cur_active = 1;
    it->pos_r = it->pos_e = 0;
    it->st.skipped += s->chunk.skipped;
    it->st.nulled += s->chunk.nulled;
    if (s->chunk.rc == RILL_OK) {
      rill_error_t e;
      int r = sync_columns(it, &s->chunk, &e);
      if (r != RILL_OK) {
        rill__chunk_release(&s->chunk);
        s->chunk.rc = r;
        s->chunk.err = e;
        s->chunk.err.row = s->chunk.start;
      }
    }
    schedule(it);
  }
}

int rill_iter_ready(const rill_iter_t* it) {
  if (!it || !it->cur_active) return 0;
  const rill__chunk_t* ch = &it->slots[it->head].chunk;
  return ch->rc != RILL_OK || it->pos_r < ch->m || it->pos_e < ch->nrerr;
}

const rill_array_t* rill_row_get(const rill_row_t* row, int i) {
  if (!row || i < 0 || i >= row->ncolumns) return NULL;
  return row->columns[i];
}

/* Records the failure of a call that has no err parameter (rill_iter_error reads it). */
static int iter_fail(rill_iter_t* it, int code, const char* fmt, ...) RILL_PRINTF(3, 4);
static int iter_fail(rill_iter_t* it, int code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rill__vfail(&it->last_err, code, fmt, ap);
  va_end(ap);
  return code;
}

static const rill_error_t null_iter_error = {.code = RILL_EINVAL, .row = -1, .column = -1,
                                             .message = "the iterator is NULL"};

const rill_error_t* rill_iter_error(const rill_iter_t* it) { return it ? &it->last_err : &null_iter_error; }

int rill_iter_prefetch(rill_iter_t* it, int n) {
  if (!it) return RILL_EINVAL;
  if (rill__workers_forked(it->workers)) return iter_fail(it, RILL_EINVAL, FORKED_MSG, "rill_iter_prefetch");
  if (n < 0) return iter_fail(it, RILL_EINVAL, "rill_iter_prefetch: negative row count %d", n);
  schedule_upto(it, (n + it->chunk_rows - 1) / it->chunk_rows, 1);
  return RILL_OK;
}

int rill_iter_seek(rill_iter_t* it, int64_t row) {
  if (!it) return RILL_EINVAL;
  if (rill__workers_forked(it->workers)) return iter_fail(it, RILL_EINVAL, FORKED_MSG, "rill_iter_seek");
  if (row < 0 || row > it->df->rows)
    return iter_fail(it, RILL_EINVAL, "rill_iter_seek: row %lld is outside 0..%lld", (long long)row,
                     (long long)it->df->rows);
  drop_all(it, it->epoch, row);
  return RILL_OK;
}

int rill_iter_set_epoch(rill_iter_t* it, int64_t epoch) {
  if (!it) return RILL_EINVAL;
  if (rill__workers_forked(it->workers)) return iter_fail(it, RILL_EINVAL, FORKED_MSG, "rill_iter_set_epoch");
  if (epoch == it->sched_epoch && epoch != it->epoch) {
    /* the next epoch, whose first chunks were started ahead: the current epoch's chunks
     * (at the head of the ring) go, the next epoch's stay in flight */
    release_held(it);
    while (it->inflight > 0 && it->slots[it->head].chunk.epoch != epoch) pop_head(it);
    it->cur_active = 0;
    it->epoch = epoch;
    it->cursor = 0;
    return RILL_OK;
  }
  drop_all(it, epoch, 0);
  return RILL_OK;
}

int64_t rill_iter_epoch(const rill_iter_t* it) { return it ? it->epoch : 0; }

int rill_iter_save(const rill_iter_t* it, rill_iter_state_t* st) {
  if (!it) return RILL_EINVAL;
  if (!st) return iter_fail((rill_iter_t*)it, RILL_EINVAL, "rill_iter_save: the state is NULL");
  st->seed = it->seed;
  st->epoch = it->epoch;
  st->cursor = it->cursor;
  st->fingerprint = it->fingerprint;
  return RILL_OK;
}

int rill_iter_restore(rill_iter_t* it, const rill_iter_state_t* st) {
  if (!it) return RILL_EINVAL;
  if (!st) return iter_fail(it, RILL_EINVAL, "rill_iter_restore: the state is NULL");
  if (rill__workers_forked(it->workers)) return iter_fail(it, RILL_EINVAL, FORKED_MSG, "rill_iter_restore");
  if (st->fingerprint != it->fingerprint)
    return iter_fail(it, RILL_EINVAL,
                     "rill_iter_restore: the state was saved by another pipeline (another dataframe or column "
                     "selection)");
  if (st->cursor < 0 || st->cursor > it->df->rows)
    return iter_fail(it, RILL_EINVAL, "rill_iter_restore: cursor %lld is outside 0..%lld", (long long)st->cursor,
                     (long long)it->df->rows);
  drop_all(it, st->epoch, st->cursor);
  it->seed = st->seed;
  return RILL_OK;
}

void rill_iter_stats(const rill_iter_t* it, rill_iter_stats_t* st) {
  if (!st) return;
  memset(st, 0, sizeof *st);
  if (!it) return;
  *st = it->st;
  st->allocs = st->reuses = 0;
  st->compute_ns = st->stage_calls = 0;
  for (int i = 0; i < it->nslots; i++) {
    rill__chunk_t* ch = &it->slots[i].chunk;
    st->compute_ns += atomic_load_explicit(&ch->total_ns, memory_order_relaxed);
    st->stage_calls += atomic_load_explicit(&ch->total_calls, memory_order_relaxed);
    st->reuses += atomic_load_explicit(&ch->spare_reuses, memory_order_relaxed);
  }
  for (int i = 0; i < it->nnodes; i++) {
    int64_t a, r;
    rill__pool_counts(it->nodes[i]->pool, &a, &r);
    st->allocs += a;
    st->reuses += r;
  }
}
