/* Stage functions and helpers shared by the engine tests (test_core, test_iter, test_threads). */
#ifndef RILL_ENGINE_TEST_COMMON_H
#define RILL_ENGINE_TEST_COMMON_H

#include <stdatomic.h>

#include "common.h"
#include "tsan/shared_stages.h"

typedef struct counter {
  _Atomic int64_t calls;    /* function calls */
  _Atomic int64_t cells;    /* cells computed */
  _Atomic int64_t inflight; /* calls running now */
  _Atomic int64_t max_inflight;
  int64_t offset;           /* value = input (or row) + offset */
  int64_t fail_row;         /* row id whose cell fails (-1: none) */
  int fail_whole;           /* fail without err->row */
  int fail_positive;        /* return a positive status instead */
  _Atomic int64_t seen[64]; /* per row id: how often computed (rows < 64) */
} counter_t;

static inline void counter_init(counter_t* c, int64_t offset) {
  memset(c, 0, sizeof *c);
  c->offset = offset;
  c->fail_row = -1;
}

static inline void counter_enter(counter_t* c, int64_t n) {
  atomic_fetch_add(&c->calls, 1);
  atomic_fetch_add(&c->cells, n);
  int64_t now = atomic_fetch_add(&c->inflight, 1) + 1;
  int64_t m = atomic_load(&c->max_inflight);
  while (now > m && !atomic_compare_exchange_weak(&c->max_inflight, &m, now)) {
  }
}

static inline int counter_fail(counter_t* c, const int64_t* rows, int64_t i, rill_error_t* err) {
  atomic_fetch_sub(&c->inflight, 1);
  if (c->fail_positive) return 7;
  if (!c->fail_whole) err->row = i;
  return rill_error_set(err, RILL_EFORMAT, "bad value in row %lld", (long long)rows[i]);
}

/* Counts a call of n cells and allocates its int64 output; on failure the call is over. */
static inline int counter_alloc(counter_t* c, rill_exec_t* ex, rill_array_t* out, int64_t n, rill_error_t* err) {
  counter_enter(c, n);
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), n);
  if (r != RILL_OK) {
    atomic_fetch_sub(&c->inflight, 1);
    return rill_error_set(err, r, "alloc failed");
  }
  return RILL_OK;
}

/* The end of the test sources whose cells are their row ids: out = rows[0..n). */
static inline int out_row_ids(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* ex, rill_error_t* err) {
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), n);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc failed");
  for (int64_t i = 0; i < n; i++) ((int64_t*)out->data)[i] = rows[i];
  return RILL_OK;
}

/* Source: int64 cell = row id + offset. */
static inline int src_i64(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* ex, void* ctx,
                   rill_error_t* err) {
  counter_t* c = ctx;
  int r = counter_alloc(c, ex, out, n, err);
  if (r != RILL_OK) return r;
  int64_t* d = out->data;
  for (int64_t i = 0; i < n; i++) {
    if (rows[i] >= 0 && rows[i] < 64) atomic_fetch_add(&c->seen[rows[i]], 1);
    if (rows[i] == c->fail_row) return counter_fail(c, rows, i, err);
    d[i] = rows[i] + c->offset;
  }
  atomic_fetch_sub(&c->inflight, 1);
  return RILL_OK;
}

/* Map: int64 out = sum of int64 inputs + offset. Fails on the cell of row fail_row. */
static inline int map_add(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* ex, void* ctx,
                   rill_error_t* err) {
  counter_t* c = ctx;
  int64_t n = nin > 0 ? in[0]->length : 0;
  int r = counter_alloc(c, ex, out, n, err);
  if (r != RILL_OK) return r;
  int64_t* d = out->data;
  const int64_t* rows = rill_exec_rows(ex);
  for (int64_t i = 0; i < n; i++) {
    if (rows[i] == c->fail_row) return counter_fail(c, rows, i, err);
    int64_t s = c->offset;
    for (int k = 0; k < nin; k++) s += ((const int64_t*)in[k]->data)[i];
    d[i] = s;
  }
  atomic_fetch_sub(&c->inflight, 1);
  return RILL_OK;
}

/* Reduce: int64 sum of the group. */
static inline int red_sum(const rill_array_t* group, rill_array_t* out, rill_exec_t* ex, void* ctx, rill_error_t* err) {
  counter_t* c = ctx;
  counter_enter(c, 1);
  atomic_fetch_sub(&c->inflight, 1);
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), 1);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc failed");
  int64_t s = 0;
  for (int64_t i = 0; i < group->length; i++) s += ((const int64_t*)group->data)[i];
  ((int64_t*)out->data)[0] = s;
  return RILL_OK;
}

static inline rill_stage_opts_t policy(rill_on_error_t p) {
  rill_stage_opts_t o = {0};
  o.on_error = p;
  return o;
}

/* A base dataframe of `rows` rows with source column "src" (row + offset). */
static inline rill_df_t* make_src(int64_t rows, counter_t* c, const rill_stage_opts_t* o) {
  rill_error_t err;
  rill_df_t* df;
  RT_OK(rill_df_new(rows, &df, &err), err);
  int col = rill_df_add_source(df, "src", rill_type_scalar(RILL_INT64), src_i64, c, NULL, o, &err);
  cr_assert_eq(col, 0, "%s", err.message);
  return df;
}

static inline int add_map(rill_df_t* df, const char* name, int input, counter_t* c, const rill_stage_opts_t* o) {
  rill_error_t err;
  int col = rill_df_map(df, name, rill_type_scalar(RILL_INT64), &input, 1, map_add, c, NULL, o, &err);
  cr_assert(col >= 0, "%s", err.message);
  return col;
}

/* An iterator over df (opts may be NULL); fails the test if it cannot be made. */
static inline rill_iter_t* open_iter(rill_df_t* df, const rill_iter_opts_t* o) {
  rill_error_t err;
  rill_iter_t* it;
  RT_OK(rill_iter_new(df, o, &it, &err), err);
  return it;
}

/* A dataframe of batches of `size` rows of column `col` of df (bo may be NULL). */
static inline rill_df_t* batch_of(rill_df_t* df, int col, int64_t size, const rill_batch_opts_t* bo) {
  rill_error_t err;
  rill_df_t* b;
  RT_OK(rill_df_batch(df, &col, 1, size, bo, &b, &err), err);
  return b;
}

/* Asserts that `it` has no row left, then frees it and the dataframes a and b (b may be NULL). */
static inline void end_and_free(rill_iter_t* it, rill_df_t* a, rill_df_t* b) {
  rill_error_t err;
  rill_row_t row;
  int r = rill_iter_next(it, &row, &err);
  cr_assert_eq(r, RILL_END, "expected the end, got %d: %s", r, r < 0 ? err.message : "a row");
  rill_iter_free(it);
  if (b) rill_df_free(b);
  rill_df_free(a);
}

enum { ANY = -1 };

/* Asserts the row accounting of rill_iter_stats; a count given as ANY is not checked. */
static inline void expect_stats(const rill_iter_t* it, int64_t rows, int64_t cells, int64_t skipped, int64_t nulled,
                                int64_t errors) {
  rill_iter_stats_t st;
  rill_iter_stats(it, &st);
  const int64_t got[5] = {st.rows, st.cells, st.skipped, st.nulled, st.errors};
  const int64_t want[5] = {rows, cells, skipped, nulled, errors};
  static const char* const names[5] = {"rows", "cells", "skipped", "nulled", "errors"};
  for (int i = 0; i < 5; i++)
    if (want[i] != ANY)
      cr_assert_eq(got[i], want[i], "stats.%s is %lld, expected %lld", names[i], (long long)got[i], (long long)want[i]);
}

/* A counter of cells = input + offset whose cell of row `fail_row` fails. */
static inline void counter_failing(counter_t* c, int64_t offset, int64_t fail_row) {
  counter_init(c, offset);
  c->fail_row = fail_row;
}

/* Iterates column `col` (row mode, int64 scalars) into vals; returns the row count. Row
 * errors are stored as INT64_MIN. */
static inline int64_t collect(rill_df_t* df, int col, const rill_iter_opts_t* base, int64_t* vals, int64_t max) {
  rill_error_t err;
  rill_iter_t* it;
  rill_iter_opts_t o = {0};
  if (base) o = *base;
  o.columns = &col;
  o.ncolumns = 1;
  RT_OK(rill_iter_new(df, &o, &it, &err), err);
  rill_row_t row;
  int64_t n = 0;
  int r;
  while ((r = rill_iter_next(it, &row, &err)) != RILL_END) {
    cr_assert(n < max, "too many rows");
    if (r < 0) {
      vals[n++] = INT64_MIN;
      continue;
    }
    const rill_array_t* a = rill_row_get(&row, 0);
    cr_assert_eq(a->length, 1);
    vals[n++] = ((const int64_t*)a->data)[0];
  }
  rill_iter_free(it);
  return n;
}

#endif
