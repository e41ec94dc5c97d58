/* The internal API for addons: what sources, operators (the addons) and the interchange
 * files (lib/interop_*, lib/arrow_*) may use of the engine. They include this header
 * (which includes internal.h), never engine.h: only the engine's own files know how
 * dataframes, iterators and stage runs are laid out, and `make check-boundary` fails when
 * another file includes engine.h or writes the engine's private fields. Not installed. */
#ifndef RILL_ADDON_H
#define RILL_ADDON_H

#include "internal.h"

/* ---- lending rows without a copy
 * A source's zero-copy path: a new reference to an array holding the cells of rows
 * [start, start+n) (fixed-shape, host memory, no nulls, the column's type), which the engine
 * never writes into; RILL_ENOTSUP when the source cannot lend them (it is then called). */
typedef int (*rill__lend_fn)(void* ctx, int64_t start, int64_t n, rill_array_t** out);
/* Gives source `column` of `df` a lend hook (called with the column's ctx). RILL_EINVAL
 * (with a message) when the column is not a source of df. Not thread-safe: call it while
 * building the dataframe. */
int rill__df_set_lend(rill_df_t* df, int column, rill__lend_fn lend, rill_error_t* err);

/* ---- asking for a call's memory ahead of it
 * A source's hint: it asks for the memory that a call over rows[0..n) reads first, without
 * waiting for it. Step 0 asks for what tells where the rows lie (an index), step 1, called
 * after step 0 with the same rows, for the rows themselves. A caller that calls many sources
 * a few rows each (rill_df_concat in a shuffled read over many files) calls both steps for
 * all of them first, so that their waits for memory overlap instead of each call waiting in
 * turn. Called with the ctx of the column's source (a column of a source group: the group's),
 * on any thread, concurrently with calls; it must change nothing a call or a result sees. */
typedef void (*rill__prefetch_fn)(void* ctx, const int64_t* rows, int64_t n, int step);
/* Gives source `column` of `df` a prefetch hook. RILL_EINVAL (with a message) when the column
 * is not a source of df. Not thread-safe: call it while building the dataframe. */
int rill__df_set_prefetch(rill_df_t* df, int column, rill__prefetch_fn prefetch, rill_error_t* err);

/* ---- a column's context: the ctx given to rill_df_add_source / rill_df_map /
 * rill__df_add_source_group for `column` of df (a view's column: its parent's; a column put
 * side by side by rill_df_concat_columns: its part's), or NULL. */
void* rill__df_column_ctx(const rill_df_t* df, int column);
/* rill_df_concat, with tasks of at least part_rows rows for each part (0: the parts' own
 * grain), at most 65,536: a reader of many files whose rows are cheap (CSV) then hands each
 * part a few rows a call in a shuffled read, not one, when a batch is larger than a task. */
int rill__df_concat(rill_df_t* const* parts, int nparts, int64_t part_rows, rill_df_t** out, rill_error_t* err);
/* Any function pointer (ISO C converts function pointers only to function pointer types):
 * compare with (rill__fn_t)my_function. */
typedef void (*rill__fn_t)(void);
/* The function of a source or map column (a group's rill__source_group_fn for its columns;
 * a view's column: its parent's; a column side by side: its part's), to recognise one's own
 * columns; NULL for other columns. */
rill__fn_t rill__df_column_fn(const rill_df_t* df, int column);

/* ---- another column's generator: what rill_exec_rng(exec, i) gives in a call of the stage of
 * `column` (same seed, epoch and row), for an operator that computes a column it fused with
 * its own. */
rill_rng_t rill__exec_rng_of(const rill_exec_t* exec, int64_t i, int column);

/* ---- dataframe references (exports that outlive the caller's handle) */
/* A new reference to df, dropped with rill_df_free. Thread-safe. */
void rill__df_retain(rill_df_t* df);
/* Rows per batch when the rows of df are batches (made by rill_df_batch, or a shuffle, shard
 * or filter of such a dataframe), else 0. */
int64_t rill__df_batch_rows(const rill_df_t* df);

/* ---- variable-length outputs
 * Declares that cells [0, n) of a variable-length array (STRING/BINARY or -1 shapes) being
 * filled were written directly (offsets[0..n], shapes, data): later rill_array_set_var calls
 * append cell n. With n smaller than the cells set so far it truncates the array to n cells
 * (data_size follows offsets[n]). RILL_EINVAL for a fixed-shape array or n out of range. */
int rill__array_var_commit(rill_array_t* a, int64_t n);

/* ---- multi-column sources: one call fills the cells of rows[0..n) for several columns
 * (CSV fields, SQLite result columns). outs[i] corresponds to column first+i of the group; it
 * is NULL when no iterator needs that column in this chunk (skip it; never compute it).
 * Each non-NULL outs[i] is filled as a rill_source_fn fills its `out` (rill_exec_alloc with the
 * column's type, or rill_array_set_var...). Error convention as for rill_source_fn; in
 * addition err->column may name the group column at fault (0..nouts-1, -1 = all). The
 * group's opts->on_error applies to the row: RAISE reports it for the requested column, SKIP
 * drops the row from every column of the group, NULL makes the faulty cell null (every
 * column's cell when err->column is -1) and calls fn again for the rows after it. */
typedef int (*rill__source_group_fn)(const int64_t* rows, int64_t n, rill_array_t* const* outs, int nouts,
                                     rill_exec_t* exec, void* ctx, rill_error_t* err);
/* Adds `ncolumns` source columns named names[i] of types[i], filled together by fn.
 * nullable[i] says whether column i may hold nulls (NULL: opts->nullable for every column;
 * on_error NULL makes every column nullable). ctx (freed once with ctx_free, also on failure)
 * is shared by the group. opts->where must be a CPU placement. Returns the index of the first
 * column (the others follow), or < 0 with a message in err. */
int rill__df_add_source_group(rill_df_t* df, const char* const* names, const rill_type_t* types,
                              const int* nullable, int ncolumns,
                              rill__source_group_fn fn, void* ctx, void (*ctx_free)(void*),
                              const rill_stage_opts_t* opts, rill_error_t* err);
/* A new dataframe of `rows` rows holding one such group (arguments as above): RILL_OK with the
 * dataframe in *out (the caller frees it), or < 0 with a message in err; ctx is freed once
 * with ctx_free either way, as above. */
int rill__df_new_source_group(int64_t rows, const char* const* names, const rill_type_t* types,
                              const int* nullable, int ncolumns,
                              rill__source_group_fn fn, void* ctx, void (*ctx_free)(void*),
                              const rill_stage_opts_t* opts, rill_df_t** out, rill_error_t* err);

/* ---- per-worker scratch memory (one registry for the whole library)
 * State of one kind per thread, created zeroed on first use and destroyed when the thread
 * exits (or at process exit for the main thread). */
typedef struct rill__scratch_kind {
  size_t size;                  /* bytes of state, zeroed when created */
  void (*destroy)(void* state); /* frees what the state owns (not the state); may be NULL */
} rill__scratch_kind_t;
/* The calling thread's state of `kind` (kind has static storage), or NULL out of memory. */
void* rill__scratch(const rill__scratch_kind_t* kind);

/* ---- cell views: one way to view cell i of an array (pointer + bytes + shape) */
typedef struct rill__cell {
  const void* data; /* the cell's bytes (NULL for an empty variable cell or i out of range) */
  int64_t nbytes;   /* bytes of the cell */
  int ndim;         /* dimensions of the cell (the type's) */
  int64_t shape[RILL_MAX_NDIM]; /* the cell's own shape (per-cell shapes for -1 dimensions) */
  int valid;        /* 0 for a null cell or i out of range */
} rill__cell_t;
/* Fills *out with a view of cell i of host array a (borrowed: valid while a is unchanged). */
void rill__cell_view(const rill_array_t* a, int64_t i, rill__cell_t* out);

/* ---- waiting on a CUDA event: makes `stream` wait for `event` when `stream` is a CUDA
 * stream, else waits on the host. A NULL event is ready. RILL_OK, or the CUDA error
 * (RILL_ECUDA / RILL_ENODEV) with its name in err. */
int rill__event_wait(void* event, void* stream, rill_error_t* err);
/* CUDA's handle of the legacy default stream (cudaStreamLegacy), for files without its headers. */
#define RILL__CUDA_STREAM_LEGACY ((void*)0x1)

#endif /* RILL_ADDON_H */
