/* Engine internals shared by the engine's own files: dataframe.c, concat.c, iter.c, chunk.c,
 * stage.c, tasks.c, batching.c, compact.c, exec.c and workers.c. Addons use addon.h. Not installed.
 *
 * Stage function error convention (sources, maps, reduces):
 *   Before each call the engine sets err->code = 0, err->row = -1, err->column = -1.
 *   A function that fails returns a negative code (through rill_error_set) and may set
 *   err->row to the index i in [0, n) of the cell at fault; cells before i are kept.
 *   Without err->row the whole call (all its cells) failed. A positive status other than
 *   RILL_OK is reported as RILL_ESTAGE. The engine then applies the stage's on_error:
 *   RAISE records the error for the row of the iterated dataframe (err->row) and the
 *   requested column that needed the stage (err->column), with a message naming the
 *   stage, the row and the function's own message; NULL makes the cell null and calls
 *   the function again for the cells after it; SKIP drops the row (a batch that held it
 *   comes out shorter) and calls the function again for the cells after it. */
#ifndef RILL_ENGINE_H
#define RILL_ENGINE_H

#include <pthread.h>

#include "addon.h"

/* ---------------------------------------------------------------- worker pool (workers.c) */

/* The least work worth handing to another thread, in nanoseconds: a hand-off costs a queue
 * round trip and usually a wake-up on each side (microseconds, more on a busy machine). A
 * stage split across threads is cut into tasks of about this much (tasks.c); for whole
 * chunks see RILL__CHUNK_HANDOFF_NS. */
#define RILL__HANDOFF_NS 20000
/* Chunks cheaper than this are computed by the consumer too while it waits, on a worker's
 * core (iter.c, cheap_chunks): a sleep and a wake-up per chunk cost them too much. */
#define RILL__HELP_LATER_NS (50 * RILL__HANDOFF_NS)
/* A chunk that takes longer than this goes to the workers (iter.c, worth_a_thread). Its
 * consumer computes queued chunks itself while it waits (cheap_chunks), so the hand-off is a
 * queue round trip (a microsecond or two a side), without the sleep and wake-up that
 * RILL__HANDOFF_NS prices: CSV batches of 256 rows (15-20 us each) gain 1.4x on 2 cores;
 * chunks of about 5 us (a batch of 1,024 int64 rows through 8 trivial maps) lose. */
#define RILL__CHUNK_HANDOFF_NS (RILL__HANDOFF_NS / 2)

typedef struct rill__group {
  int64_t pending; /* tasks submitted and not finished; guarded by the pool's mutex */
  int64_t prio;    /* priority of the group's tasks: lower runs first (set before submitting) */
  int waiters;     /* threads asleep in rill__workers_wait on this group; guarded by the mutex */
} rill__group_t;

typedef struct rill__task {
  void (*fn)(void* arg);
  void* arg;
  rill__group_t* group;
  struct rill__task* next;
} rill__task_t;

typedef struct rill__workers rill__workers_t;

/* A task queue served by nthreads threads of the process-wide pool (0: none; tasks then run
 * in rill__workers_wait), started when fewer are parked. RILL_OK or RILL_ENOMEM. */
int rill__workers_new(int nthreads, rill__workers_t** out);
/* Frees a queue whose tasks have all finished or been cancelled, and parks its threads for
 * the next queue; NULL is a no-op. Not for a queue rill__workers_forked reports. */
void rill__workers_free(rill__workers_t* w);
int rill__workers_count(const rill__workers_t* w);
/* Lets at most `lean` (>= 1) of the queue's threads be awake while a RILL__WAIT_ANY waiter
 * computes tasks or has just done so (workers.c, "Awake threads"); the others sleep (after
 * the task they run). Starts at the thread count: no limit. */
void rill__workers_lean(rill__workers_t* w, int lean);
/* 1 in the child of a fork() for a queue made before it with threads: they were the
 * parent's. Such a queue must not be used, waited for or freed there (one of its threads
 * may have held its mutex at the fork); 0 otherwise, and for NULL. */
int rill__workers_forked(const rill__workers_t* w);
/* Queues `task` (memory owned by the caller until it has run or been cancelled) behind the
 * queued tasks whose group priority is lower or equal. */
void rill__workers_submit(rill__workers_t* w, rill__task_t* task);
/* How much of the queue a thread waiting for a group runs meanwhile (rill__workers_wait). */
enum {
  RILL__WAIT_OWN = 0,   /* the group's own tasks that no thread has started */
  RILL__WAIT_OLDER = 1, /* queued tasks whose priority is <= the group's: its own and older work */
  RILL__WAIT_ANY = 2,   /* any queued task, later work too (the consumer of cheap chunks: see iter.c) */
  RILL__WAIT_ANY_OFF = 3 /* RILL__WAIT_ANY, and every thread may work from its return until the
                          * caller's next wait (it spends its time away off the CPU: iter.c) */
};
/* Returns once every task of `group` has finished; meanwhile the caller runs the queued tasks
 * that `help` (RILL__WAIT_*) allows (RILL__WAIT_OLDER at least on a queue without threads),
 * and otherwise sleeps. */
void rill__workers_wait(rill__workers_t* w, rill__group_t* group, int help);
/* Removes the queued (not started) tasks of `group`; returns how many. */
int64_t rill__workers_cancel(rill__workers_t* w, rill__group_t* group);
int rill__worker_index(void); /* index of the calling worker thread, -1 elsewhere */

/* ---------------------------------------------------------------- pools (array.c) */


/* ---------------------------------------------------------------- dataframes (dataframe.c) */

typedef enum {
  RILL__DF_BASE = 0,
  RILL__DF_SHUFFLE,
  RILL__DF_SHARD,
  RILL__DF_FILTER,
  RILL__DF_BATCH,
  RILL__DF_REDUCE,
  RILL__DF_SLICE, /* appended: the kinds' values are part of saved iterator states */
  RILL__DF_TAKE,
  RILL__DF_CONCAT /* a dataframe of sources (no parent) whose group reads its parts (concat.c) */
} rill__df_kind_t;

typedef enum {
  RILL__COL_SOURCE = 0,
  RILL__COL_MAP,
  RILL__COL_PARENT, /* a view's copy of the parent column with the same index */
  RILL__COL_BATCH,  /* parent column `pcol` stacked */
  RILL__COL_REDUCE  /* parent column `pcol` reduced by k */
} rill__col_kind_t;

#define RILL__MAX_INPUTS 64

/* Columns filled together by one rill__source_group_fn (rill__df_add_source_group): each
 * member column points to it; the last member freed frees it (and its ctx). */
typedef struct rill__srcgroup {
  rill__source_group_fn fn;
  void* ctx;
  void (*ctx_free)(void*);
  int first, n;           /* the columns first..first+n-1 of the dataframe */
  int live;               /* member columns not freed yet */
  pthread_mutex_t serial; /* RILL_STAGE_CPU_SERIAL: one call at a time */
} rill__srcgroup_t;

typedef struct rill__column {
  rill_field_t field; /* field.name is owned */
  rill__col_kind_t kind;
  rill_source_fn source;
  rill_map_fn map;
  rill_reduce_fn reduce;
  void* ctx;
  void (*ctx_free)(void*);
  rill_stage_opts_t opts;
  int* inputs;
  int ninputs;
  int pcol;
  int transpose; /* batch column: 3-D HWC cells become CHW */
  rill__lend_fn lend; /* source: consecutive rows without a call (NULL: none) */
  rill__prefetch_fn prefetch; /* source: asks for a call's memory ahead of it (NULL: none) */
  rill__srcgroup_t* group; /* source filled with other columns by one call (NULL: none) */
  int gi;                  /* index of the column in its group (outs[gi]) */
  pthread_mutex_t serial;
} rill__column_t;

struct rill_df {
  _Atomic int64_t refs;
  _Atomic int64_t frozen; /* children + iterators: columns can no longer be added */
  rill__df_kind_t kind;
  int64_t rows;
  rill_df_t* parent;
  rill__column_t** cols;
  int ncols, cap;
  uint64_t seed;      /* shuffle */
  int rank, world;    /* shard */
  int64_t* kept;      /* filter: kept parent rows; take: the rows taken */
  int64_t offset;     /* slice: the parent row of row 0 */
  uint64_t kept_hash; /* take: a hash of the rows taken; concat: of the parts' row counts (saved
                       * iterator states name them) */
  int64_t batch;      /* batch */
  rill_batch_opts_t bopts;
  int64_t k;          /* reduce */
};

/* A 64-bit mixer (splitmix64's finalizer): nearby inputs give unrelated outputs. */
static inline uint64_t rill__mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBULL;
  x ^= x >> 31;
  return x;
}
/* Cheap work timed by sampling (a stage's runs: stage.c, run_timed; cheap chunks: iter.c,
 * slot_eval) is timed at turn k (a count of runs or chunks) when this is 1: one turn in
 * RILL__TIMED_EVERY on average, scattered so that no period of the work's costs aligns with
 * the timed turns; turn 0 is always timed. */
#define RILL__TIMED_EVERY 8
static inline int rill__timed_turn(uint64_t k) { return rill__mix64(k) % RILL__TIMED_EVERY == 0; }
/* A hash of v[0..n), for saved iterator states to name a take's rows or a concatenation's
 * parts (df->kept_hash), computed once when the dataframe is made. */
static inline uint64_t rill__hash_i64(const int64_t* v, int64_t n) {
  uint64_t h = (uint64_t)n;
  for (int64_t i = 0; i < n; i++) h = rill__mix64(h ^ (uint64_t)v[i]);
  return h;
}

/* Whether df is a view: a dataframe of some rows of its parent (shuffle/shard/filter/slice/take). */
static inline int rill__df_is_view(const rill_df_t* df) {
  return df->kind == RILL__DF_SHUFFLE || df->kind == RILL__DF_SHARD || df->kind == RILL__DF_FILTER ||
         df->kind == RILL__DF_SLICE || df->kind == RILL__DF_TAKE;
}
/* Row `x` of view `df` (shuffle/shard/filter/slice/take) as a row of its parent, for `epoch`. */
int64_t rill__view_row(const rill_df_t* df, int64_t epoch, int64_t x);
/* Adds `delta` to df's count of children and iterators (columns can be added at 0). */
void rill__df_freeze(rill_df_t* df, int delta);
/* Whether source column c of a side-by-side dataframe (rill_df_concat_columns, concat.c) is a
 * part's column: then *part and *column name it there. */
int rill__df_side_column(const rill__column_t* c, const rill_df_t** part, int* column);

/* ---------------------------------------------------------------- iterators and evaluation */

/* One computed stage (a SOURCE/MAP/REDUCE column, or a transposing BATCH column) of an
 * iterator's plan. */
typedef struct rill__node {
  rill_df_t* df;
  int col;
  int depth;
  int index; /* in the iterator's nodes[] (a chunk's spare[]) */
  rill_pool_t* pool;
  rill_stream_t* stream;     /* CUDA stages */
  rill_device_t device;
  int fixed;                 /* the column's cells have a fixed shape (rill_type_is_fixed) */
  int64_t cell;              /* then their bytes (rill_type_cell_bytes), else -1 */
  _Atomic int64_t ns_per_row; /* measured cost (rising at most 4x per run), picks the grain */
  /* the stage's runs so far, and the time and cells of its last timed one (stage.c, run_timed:
   * cheap runs are timed one in a few, the others' time estimated from it); written without
   * locked instructions by any thread, so a count lost to a race only shifts the sampling */
  _Atomic int64_t runs, timed_ns, timed_rows;
  _Atomic int64_t bytes_per_row; /* variable cells: last measured data bytes per row */
} rill__node_t;

typedef struct rill__frame {
  rill_df_t* df;
  int level;
  int64_t* rows;
  int64_t rows_cap;
  int64_t seq;  /* rows[i] == seq + i for every cell, or -1 when not known */
  int rows_ok;  /* rows is written (else seq >= 0 and rows is written when first needed) */
  rill_array_t** vals;
  int64_t* goff; /* reduce: group g holds child cells [goff[g], goff[g+1]) */
  int64_t goff_cap;
} rill__frame_t;

typedef struct rill__rowerr {
  int64_t row;
  rill_error_t err;
} rill__rowerr_t;

typedef struct rill__chunk {
  struct rill_iter* it;
  rill__frame_t* frames;
  int nframes;
  int64_t* level_n;
  int64_t start, end, epoch;
  int64_t prio;        /* priority of the chunk's tasks (older chunks first) */
  int reqcol;
  rill_array_t** cols; /* results, one per requested column */
  int64_t m;           /* items: surviving rows (row mode) or 1/0 (batched) */
  int64_t* top;        /* top row ids of the m rows (row mode) */
  rill__rowerr_t* rerr;
  int64_t nrerr, rerr_cap;
  pthread_mutex_t mu;  /* guards rerr while stage tasks run */
  _Atomic int failed;  /* rc < 0: read by stage tasks without the mutex */
  int rc;
  rill_error_t err;
  int64_t skipped, nulled;
  int64_t st_ns, st_calls; /* stage time and calls of this evaluation (added to the totals
                            * below once, at its end) */
  /* the slot's chunks so far: stage time and calls, and outputs filled in spares (a reuse the
   * pools do not see); written by the thread evaluating the slot's chunk (one at a time, so
   * without locked instructions), summed over the slots by rill_iter_stats */
  _Atomic int64_t total_ns, total_calls, spare_reuses;
  /* [node index]: an output array of the node's stage that this slot's last chunk let go of
   * while nothing else held it, kept for the slot's next chunk (chunk.c, rill__chunk_drop; a
   * chunk the consumer computes takes the spares of its last one instead: iter.c, take_warm): a
   * cheap stage then skips the pool's round trip, whose locked instructions wait for the
   * stage function's stores to drain (a few percent of a trivial stage's run) */
  rill_array_t** spare;
} rill__chunk_t;

typedef struct rill__slot {
  int busy;    /* holds a scheduled or computed chunk */
  int queued;  /* submitted to the pool */
  int done;    /* computed */
  rill__group_t group;
  rill__task_t task;
  rill__chunk_t chunk;
} rill__slot_t;

struct rill_iter {
  rill_df_t* df;
  int nreq;
  int* req;
  rill_df_t** chain;
  int nchain;
  rill__node_t*** nodemap; /* [depth][column] */
  rill__node_t** nodes;
  int nnodes;
  int batched;  /* the iterated dataframe is batched */
  int boundary; /* one row per chunk */
  int64_t chunk_rows;
  int ahead;
  int nthreads;
  int consumer_helps; /* the caller runs queued tasks while it waits: a core is left to it */
  int cores;          /* the cores the process may use (at creation) */
  int lean;           /* workers awake while the consumer computes (rill__workers_lean; iter.c) */
  int off_runs;       /* the consumer's last timed absences in a row spent mostly off the CPU (iter.c) */
  int64_t absences;   /* its waits for a chunk that ended (one absence in a few is timed) */
  int64_t left_ns, left_cpu_ns, left_sleeps; /* when its last timed absence began, its CPU time and
                                               * voluntary context switches then; left_ns 0: none */
  rill__workers_t* workers;
  rill__slot_t* slots;
  int nslots;
  int head, inflight;
  int64_t next_start;   /* the next chunk to start: its first row, in epoch sched_epoch */
  int64_t sched_epoch;  /* epoch, or epoch + 1 once the epoch's chunks are all started and
                           prefetch went on into the next one (next_epoch) */
  int next_epoch;       /* prefetch may go on into epoch + 1 */
  int64_t seq; /* chunks scheduled so far: the next chunk's priority */
  int warm;     /* the slot whose chunk the consumer computed last (-1: none; iter.c, take_warm) */
  int cur_active;
  int64_t pos_r, pos_e; /* hand-out positions in the current slot */
  int64_t cursor;
  int64_t epoch;
  uint64_t seed;
  uint64_t fingerprint;
  rill_stream_t* stream;
  rill_error_t last_err; /* the last failure of a call without an err (rill_iter_error) */
  rill_array_t** held;      /* slices handed out in row mode */
  const rill_array_t** rowcols;
  /* statistics */
  rill_iter_stats_t st; /* rows, cells, skipped, nulled, errors, wait_ns (the rest: when read) */
  _Atomic int64_t chunk_ns;      /* the shorter of the last two timed chunks' evaluation times (0: none
                                  * yet; kept with worker threads only: it decides hand-offs) */
  _Atomic int64_t chunk_last_ns; /* the last timed chunk's evaluation time (iter.c, slot_eval) */
};

/* ---------------------------------------------------------------- chunks (chunk.c) */

/* Computes chunk->start..end of the iterator's dataframe: chunk->cols, m, top, rerr, or
 * chunk->rc < 0 with chunk->err. */
void rill__chunk_eval(rill__chunk_t* chunk);
/* Drops the chunk's results (its arrays go back to their pools, or stay as its spares). */
void rill__chunk_release(rill__chunk_t* chunk);
/* Lets go of the chunk's reference to `a` (NULL: nothing): an array that a stage of the
 * iterator filled (rill__run_stage) on the host and that nothing else holds stays as the
 * node's spare for the slot's next chunk (or the consumer's: iter.c, take_warm); any other goes
 * back to its pool or is freed. */
void rill__chunk_drop(rill__chunk_t* chunk, rill_array_t* a);
/* The node's spare array (rill__chunk_drop) when its buffer holds `bytes`, taken; else NULL
 * (a spare too small goes back to its pool). */
rill_array_t* rill__chunk_spare(rill__chunk_t* chunk, rill__node_t* node, int64_t bytes);
/* Sets up an empty chunk of iterator `it`. RILL_OK or RILL_ENOMEM (destroy it either way). */
int rill__chunk_init(struct rill_iter* it, rill__chunk_t* chunk);
/* Frees what rill__chunk_init and evaluation allocated; a zeroed chunk is a no-op. */
void rill__chunk_destroy(rill__chunk_t* chunk);
/* Row id of cell i of frame `f` (written or implied). */
static inline int64_t rill__frame_row(const rill__frame_t* f, int64_t i) { return f->rows_ok ? f->rows[i] : f->seq + i; }
/* Writes the row ids of frame `f` when they were left implied by f->seq. RILL_ENOMEM. */
int rill__frame_rows(rill__chunk_t* ch, rill__frame_t* f);
/* Records a failure of the whole chunk (the first one wins). Thread-safe. */
void rill__chunk_fail(rill__chunk_t* ch, int code, const char* fmt, ...) RILL_PRINTF(3, 4);
/* Whether the chunk failed. Thread-safe; called before every call of a stage function: one
 * load, no lock. */
static inline int rill__chunk_failed(rill__chunk_t* ch) { return atomic_load_explicit(&ch->failed, memory_order_acquire); }
/* Column c of frame d of the chunk, computed on first use; NULL when the chunk failed. */
const rill_array_t* rill__chunk_column(rill__chunk_t* ch, int d, int c);

/* stage.c: computes SOURCE/MAP/REDUCE column c of frame d (a source group: with the group's
 * other columns the iterator needs) and stores it in the frame; NULL when the chunk failed. */
const rill_array_t* rill__run_stage(rill__chunk_t* ch, int d, int c);
/* stage.c: an array of the node's pool whose data buffer fits `bytes`, once any consumer
 * still reading it is done (its event). RILL_ENOMEM, or the CUDA error, with e filled. */
int rill__node_acquire(rill__node_t* node, int64_t bytes, rill_array_t** out, rill_error_t* e);
/* compact.c: drops the cells of `level` whose keep[i] is 0 from every frame of the level.
 * RILL_ENOTSUP for device arrays, RILL_ENOMEM. */
int rill__compact_level(rill__chunk_t* ch, int level, const uint8_t* keep);
/* batching.c: batch column c with NCHW layout: each [H,W,C] cell of batch `a` as [C,H,W];
 * stored in frame 0. NULL when the chunk failed. */
const rill_array_t* rill__batch_transpose(rill__chunk_t* ch, int c, const rill_array_t* a);

#endif /* RILL_ENGINE_H */
