/* The addon interface (lib/addon.h): source groups, lend hooks, column contexts, variable
 * outputs written directly, cell views, per-thread scratch state and event waits. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "addon.h"
#include "common.h"

/* ---------------------------------------------------------------- a three-column group */

/* Columns: a (int64 = row), s (string "r<row>"), f (float64 = row / 2). */
typedef struct grp {
  _Atomic int64_t calls;
  _Atomic int64_t filled[3]; /* cells asked of each column */
  int64_t fail_row;          /* row whose cell fails (-1: none) */
  int fail_col;              /* the column at fault (-1: all) */
  int freed;
  /* prefetch hook (grp_prefetch): seen[row] 0 -> 1 (step 0) -> 2 (step 1) -> 3 (filled) when
   * set; a step out of that order counts in misordered, a row filled without being asked for
   * (a call over one part's rows only) in unasked */
  uint8_t* seen;
  _Atomic int64_t prefetched[2];
  _Atomic int64_t misordered, unasked;
} grp_t;

static int grp_fn(const int64_t* rows, int64_t n, rill_array_t* const* outs, int nouts, rill_exec_t* exec,
                  void* ctx, rill_error_t* err) {
  grp_t* g = ctx;
  cr_assert_eq(nouts, 3);
  atomic_fetch_add(&g->calls, 1);
  for (int64_t i = 0; g->seen && i < n; i++) {
    uint8_t s = g->seen[rows[i]];
    if (s == 0) atomic_fetch_add(&g->unasked, 1);
    else if (s != 2) atomic_fetch_add(&g->misordered, 1);
    g->seen[rows[i]] = 3;
  }
  for (int j = 0; j < 3; j++)
    if (outs[j]) atomic_fetch_add(&g->filled[j], n);
  int r = RILL_OK;
  if (outs[0]) r = rill_exec_alloc(exec, outs[0], rill_type_scalar(RILL_INT64), n);
  if (r == RILL_OK && outs[1]) r = rill_exec_alloc(exec, outs[1], rill_type_scalar(RILL_STRING), n);
  if (r == RILL_OK && outs[2]) r = rill_exec_alloc(exec, outs[2], rill_type_scalar(RILL_FLOAT64), n);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc");
  for (int64_t i = 0; i < n; i++) {
    int fail = rows[i] == g->fail_row;
    if (outs[0] && !(fail && (g->fail_col == 0 || g->fail_col < 0))) ((int64_t*)outs[0]->data)[i] = rows[i];
    if (outs[2] && !(fail && (g->fail_col == 2 || g->fail_col < 0))) ((double*)outs[2]->data)[i] = rows[i] / 2.0;
    if (outs[1] && !(fail && (g->fail_col == 1 || g->fail_col < 0))) {
      char b[32];
      int len = snprintf(b, sizeof b, "r%lld", (long long)rows[i]);
      if (rill_array_set_var(outs[1], i, b, len, NULL) != RILL_OK) return rill_error_set(err, RILL_ENOMEM, "set_var");
    }
    if (fail) {
      err->row = i;
      err->column = g->fail_col;
      return rill_error_set(err, RILL_EFORMAT, "bad row %lld", (long long)rows[i]);
    }
  }
  return RILL_OK;
}

static void grp_free(void* ctx) { ((grp_t*)ctx)->freed++; }

static rill_df_t* grp_df(grp_t* g, int64_t rows, rill_on_error_t policy, int64_t grain) {
  memset(g, 0, sizeof *g);
  g->fail_row = -1;
  rill_error_t err = {0};
  rill_df_t* df;
  RT_OK(rill_df_new(rows, &df, &err), err);
  const char* names[3] = {"a", "s", "f"};
  rill_type_t types[3] = {rill_type_scalar(RILL_INT64), rill_type_scalar(RILL_STRING), rill_type_scalar(RILL_FLOAT64)};
  rill_stage_opts_t o = {.on_error = policy, .grain = grain};
  int first = rill__df_add_source_group(df, names, types, NULL, 3, grp_fn, g, grp_free, &o, &err);
  cr_assert_eq(first, 0, "%s", err.message);
  cr_assert_eq(rill_df_ncolumns(df), 3);
  return df;
}

/* Iterates columns cols of df (row mode), checking each row's cells against the group's
 * values; returns the rows seen (their ids in seen[]). */
static int64_t grp_check(rill_df_t* df, const int* cols, int ncols, int threads, int64_t* seen, int64_t nseen) {
  rill_error_t err = {0};
  rill_iter_t* it;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.columns = cols, .ncolumns = ncols, .threads = threads}, &it, &err),
        err);
  rill_row_t row;
  int64_t m = 0;
  int rc;
  while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) {
    int64_t r = row.index;
    if (m < nseen) seen[m] = r;
    m++;
    for (int q = 0; q < ncols; q++) {
      const rill_array_t* a = rill_row_get(&row, q);
      cr_assert_eq(a->length, 1);
      if (!rill_array_is_valid(a, 0)) continue;
      if (cols[q] == 0) cr_assert_eq(((const int64_t*)a->data)[0], r);
      if (cols[q] == 2) cr_assert_eq(((const double*)a->data)[0], r / 2.0);
      if (cols[q] == 1) {
        char b[32];
        int len = snprintf(b, sizeof b, "r%lld", (long long)r);
        rill__cell_t cv;
        rill__cell_view(a, 0, &cv);
        cr_assert_eq(cv.nbytes, len);
        cr_assert(memcmp(cv.data, b, (size_t)len) == 0);
      }
    }
  }
  cr_assert_eq(rc, RILL_END, "%d: %s", rc, err.message);
  rill_iter_free(it);
  return m;
}

Test(addon, group_fills_requested_columns_in_one_call) {
  grp_t g;
  rill_df_t* df = grp_df(&g, 1000, RILL_ON_ERROR_RAISE, 0);
  int64_t seen[1];
  cr_assert_eq(grp_check(df, (int[]){0, 1}, 2, RILL_THREADS_NONE, seen, 0), 1000);
  cr_assert_eq(atomic_load(&g.filled[0]), 1000);
  cr_assert_eq(atomic_load(&g.filled[1]), 1000);
  cr_assert_eq(atomic_load(&g.filled[2]), 0, "an unrequested column was computed");
  int64_t calls = atomic_load(&g.calls);
  cr_assert(calls >= 1 && calls <= 1000 / 16, "%lld calls: one per chunk expected", (long long)calls);
  rill_df_free(df);
  cr_assert_eq(g.freed, 1, "ctx freed once");
}

Test(addon, group_split_across_threads_and_batched) {
  grp_t g;
  rill_df_t* df = grp_df(&g, 5000, RILL_ON_ERROR_RAISE, 64);
  int64_t seen[1];
  cr_assert_eq(grp_check(df, (int[]){2, 1, 0}, 3, 4, seen, 0), 5000);
  rill_df_t* b;
  rill_error_t err = {0};
  RT_OK(rill_df_batch(df, (int[]){1, 2}, 2, 1000, NULL, &b, &err), err);
  rill_iter_t* it;
  RT_OK(rill_iter_new(b, &(rill_iter_opts_t){.threads = 3}, &it, &err), err);
  rill_row_t row;
  int64_t batches = 0;
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    const rill_array_t* s = rill_row_get(&row, 0);
    const rill_array_t* f = rill_row_get(&row, 1);
    cr_assert_eq(s->length, 1000);
    for (int64_t i = 0; i < s->length; i++) {
      int64_t r = row.index * 1000 + i;
      char buf[32];
      int len = snprintf(buf, sizeof buf, "r%lld", (long long)r);
      rill__cell_t cv;
      rill__cell_view(s, i, &cv);
      cr_assert(cv.valid && cv.nbytes == len && memcmp(cv.data, buf, (size_t)len) == 0, "row %lld", (long long)r);
      cr_assert_eq(((const double*)f->data)[i], r / 2.0);
    }
    batches++;
  }
  cr_assert_eq(batches, 5);
  rill_iter_free(it);
  rill_df_free(b);
  rill_df_free(df);
}

Test(addon, group_skip_drops_the_row_from_every_column) {
  for (int threads = RILL_THREADS_NONE; threads <= 2; threads += 2 - RILL_THREADS_NONE) {
    grp_t g;
    rill_df_t* df = grp_df(&g, 300, RILL_ON_ERROR_SKIP, 32);
    g.fail_row = 77;
    g.fail_col = 1;
    int64_t seen[300];
    cr_assert_eq(grp_check(df, (int[]){0, 1, 2}, 3, threads, seen, 300), 299);
    for (int64_t i = 0; i < 299; i++) cr_assert_eq(seen[i], i < 77 ? i : i + 1);
    rill_df_free(df);
  }
}

Test(addon, group_null_nulls_the_faulty_cell_only) {
  grp_t g;
  rill_df_t* df = grp_df(&g, 100, RILL_ON_ERROR_NULL, 0);
  g.fail_row = 40;
  g.fail_col = 1;
  rill_error_t err = {0};
  rill_iter_t* it;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE}, &it, &err), err);
  rill_row_t row;
  int64_t n = 0;
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    int bad = row.index == 40;
    cr_assert_eq(rill_array_is_valid(rill_row_get(&row, 0), 0), 1);
    cr_assert_eq(rill_array_is_valid(rill_row_get(&row, 1), 0), !bad, "row %lld", (long long)row.index);
    cr_assert_eq(rill_array_is_valid(rill_row_get(&row, 2), 0), 1);
    if (bad) cr_assert_eq(((const int64_t*)rill_row_get(&row, 0)->data)[0], 40);
    n++;
  }
  cr_assert_eq(n, 100);
  rill_iter_stats_t st;
  rill_iter_stats(it, &st);
  cr_assert_eq(st.nulled, 1);
  rill_iter_free(it);
  rill_df_free(df);

  /* err->column = -1: every requested column's cell becomes null */
  df = grp_df(&g, 100, RILL_ON_ERROR_NULL, 0);
  g.fail_row = 40;
  g.fail_col = -1;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.columns = (int[]){0, 1}, .ncolumns = 2, .threads = 2}, &it, &err),
        err);
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    int bad = row.index == 40;
    cr_assert_eq(rill_array_is_valid(rill_row_get(&row, 0), 0), !bad);
    cr_assert_eq(rill_array_is_valid(rill_row_get(&row, 1), 0), !bad);
  }
  rill_iter_stats(it, &st);
  cr_assert_eq(st.nulled, 2);
  rill_iter_free(it);
  rill_df_free(df);
}

Test(addon, group_raise_reports_row_column_and_message) {
  grp_t g;
  rill_df_t* df = grp_df(&g, 50, RILL_ON_ERROR_RAISE, 0);
  g.fail_row = 9;
  g.fail_col = 2;
  rill_error_t err = {0};
  rill_iter_t* it;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.columns = (int[]){0, 2}, .ncolumns = 2}, &it, &err), err);
  rill_row_t row;
  int64_t n = 0;
  int rc;
  while ((rc = rill_iter_next(it, &row, &err)) != RILL_END) {
    if (rc == RILL_OK) {
      cr_assert_neq(row.index, 9);
      n++;
      continue;
    }
    cr_assert_eq(rc, RILL_EFORMAT);
    cr_assert_eq(err.row, 9);
    cr_assert(strstr(err.message, "row 9") && strstr(err.message, "bad row 9") && strstr(err.message, "'f'"), "%s",
              err.message);
  }
  cr_assert_eq(n, 49);
  rill_iter_free(it);
  rill_df_free(df);
}

Test(addon, group_argument_errors) {
  rill_error_t err = {0};
  rill_df_t* df;
  RT_OK(rill_df_new(4, &df, &err), err);
  grp_t g = {0};
  const char* names[2] = {"x", "x"};
  rill_type_t types[2] = {rill_type_scalar(RILL_INT64), rill_type_scalar(RILL_INT64)};
  RT_FAILS(rill__df_add_source_group(df, names, types, NULL, 2, grp_fn, &g, grp_free, NULL, &err), RILL_EINVAL,
           "appears twice", err);
  cr_assert_eq(g.freed, 1);
  RT_FAILS(rill__df_add_source_group(df, names, types, NULL, 1, grp_fn, &g, grp_free,
                                     &(rill_stage_opts_t){.where = RILL_STAGE_CUDA}, &err),
           RILL_EINVAL, "runs on the CPU", err);
  cr_assert_eq(g.freed, 2);
  RT_FAILS(rill__df_add_source_group(df, names, types, NULL, 0, grp_fn, &g, grp_free, NULL, &err), RILL_EINVAL,
           "0 columns", err);
  cr_assert_eq(g.freed, 3);
  /* a name taken by an existing column: the columns added so far are taken back */
  RT_OK(rill__df_add_source_group(df, (const char*[]){"y"}, types, NULL, 1, grp_fn, &g, NULL, NULL, &err) == 0 ? RILL_OK
                                                                                                       : -1,
        err);
  RT_FAILS(rill__df_add_source_group(df, (const char*[]){"z", "y"}, types, NULL, 2, grp_fn, &g, grp_free, NULL, &err),
           RILL_EINVAL, "already exists", err);
  cr_assert_eq(g.freed, 4);
  cr_assert_eq(rill_df_ncolumns(df), 1);
  cr_assert_eq(rill__df_column_fn(df, 0), (rill__fn_t)grp_fn);
  cr_assert_eq(rill__df_column_ctx(df, 0), &g);
  rill_df_free(df);
}

/* ---------------------------------------------------------------- lend, ctx, fn */

static int one_source(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* exec, void* ctx,
                      rill_error_t* err) {
  int r = rill_exec_alloc(exec, out, rill_type_scalar(RILL_INT64), n);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc");
  for (int64_t i = 0; i < n; i++) ((int64_t*)out->data)[i] = rows[i];
  return RILL_OK;
}

static int copy_map(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* exec, void* ctx,
                    rill_error_t* err) {
  int r = rill_exec_alloc(exec, out, in[0]->type, in[0]->length);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc");
  memcpy(out->data, in[0]->data, (size_t)in[0]->data_size);
  return RILL_OK;
}

static void grp_prefetch(void* ctx, const int64_t* rows, int64_t n, int step) {
  grp_t* g = ctx;
  cr_assert(step == 0 || step == 1, "step %d", step);
  for (int64_t i = 0; i < n; i++) {
    if (g->seen[rows[i]] != step) atomic_fetch_add(&g->misordered, 1);
    g->seen[rows[i]] = (uint8_t)(step + 1);
  }
  atomic_fetch_add(&g->prefetched[step], n);
}

/* A shuffled read over three parts in batches: each batch's call over several parts asks each
 * part's hook for step 0, then step 1 of its rows before the part's call over them (every
 * row of every part, once each, in that order), and the cells are the parts' own. With worker
 * threads a batch may be cut into tasks, and a task over one part's rows asks nothing (its
 * part is called at once): there the order is checked, not the count. */
Test(addon, prefetch_hooks_are_asked_ahead_of_each_parts_call) {
  rill_error_t err = {0};
  enum { NP = 3, ROWS = 40, B = 12 };
  for (int threads = 0; threads < 2; threads++) {
    grp_t g[NP];
    uint8_t seen[NP][ROWS];
    rill_df_t* parts[NP];
    for (int p = 0; p < NP; p++) {
      parts[p] = grp_df(&g[p], ROWS, RILL_ON_ERROR_RAISE, 0);
      memset(seen[p], 0, sizeof seen[p]);
      g[p].seen = seen[p];
      for (int k = 0; k < 3; k++) RT_OK(rill__df_set_prefetch(parts[p], k, grp_prefetch, &err), err);
    }
    rill_df_t *cat, *sh, *b;
    RT_OK(rill_df_concat(parts, NP, &cat, &err), err);
    RT_OK(rill_df_shuffle(cat, 7, &sh, &err), err);
    RT_OK(rill_df_batch(sh, (int[]){0, 2}, 2, B, NULL, &b, &err), err);
    rill_iter_t* it;
    RT_OK(rill_iter_new(b, &(rill_iter_opts_t){.threads = threads ? 2 : RILL_THREADS_NONE}, &it, &err), err);
    rill_row_t row;
    int64_t n = 0;
    int rc;
    while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) {
      const rill_array_t *a = rill_row_get(&row, 0), *f = rill_row_get(&row, 1);
      for (int64_t i = 0; i < a->length; i++)
        cr_assert_eq(((const double*)f->data)[i], ((const int64_t*)a->data)[i] / 2.0);
      n += a->length;
    }
    cr_assert_eq(rc, RILL_END, "%s", err.message);
    cr_assert_eq(n, NP * ROWS);
    rill_iter_free(it);
    int64_t asked = 0;
    for (int p = 0; p < NP; p++) {
      cr_assert_eq(atomic_load(&g[p].misordered), 0, "part %d: a row filled or asked for out of order", p);
      int64_t unasked = atomic_load(&g[p].unasked);
      cr_assert_eq(atomic_load(&g[p].prefetched[0]) + unasked, ROWS, "part %d", p);
      cr_assert_eq(atomic_load(&g[p].prefetched[1]) + unasked, ROWS, "part %d", p);
      if (!threads) cr_assert_eq(unasked, 0, "part %d: %lld rows filled without being asked for", p, (long long)unasked);
      asked += atomic_load(&g[p].prefetched[1]);
      for (int r = 0; r < ROWS; r++) cr_assert_eq(seen[p][r], 3, "part %d row %d", p, r);
    }
    cr_assert_gt(asked, 0);
    rill_df_free(b);
    rill_df_free(sh);
    rill_df_free(cat);
    for (int p = 0; p < NP; p++) rill_df_free(parts[p]);
  }
  rill_df_t* df;
  RT_OK(rill_df_new(4, &df, &err), err);
  int s = rill_df_add_source(df, "s", rill_type_scalar(RILL_INT64), one_source, NULL, NULL, NULL, &err);
  int m = rill_df_map(df, "m", rill_type_scalar(RILL_INT64), &s, 1, copy_map, NULL, NULL, NULL, &err);
  RT_FAILS(rill__df_set_prefetch(df, m, grp_prefetch, &err), RILL_EINVAL, "'m' is not a source", err);
  RT_FAILS(rill__df_set_prefetch(df, 9, grp_prefetch, &err), RILL_EINVAL, "unknown column 9", err);
  RT_FAILS(rill__df_set_prefetch(NULL, 0, grp_prefetch, &err), RILL_EINVAL, "the dataframe is NULL", err);
  rill_df_free(df);
}

static _Atomic int lends;
static int lend_ones(void* ctx, int64_t start, int64_t n, rill_array_t** out) {
  atomic_fetch_add(&lends, 1);
  rill_array_t* a;
  if (rill_array_new(rill_type_scalar(RILL_INT64), n, &a, NULL) != RILL_OK) return RILL_ENOMEM;
  for (int64_t i = 0; i < n; i++) ((int64_t*)a->data)[i] = 1000 + start + i;
  *out = a;
  return RILL_OK;
}

Test(addon, lend_hook_and_column_context) {
  rill_error_t err = {0};
  rill_df_t *df, *sh;
  int ctx_src = 1, ctx_map = 2;
  RT_OK(rill_df_new(64, &df, &err), err);
  int s = rill_df_add_source(df, "s", rill_type_scalar(RILL_INT64), one_source, &ctx_src, NULL, NULL, &err);
  int m = rill_df_map(df, "m", rill_type_scalar(RILL_INT64), &s, 1, copy_map, &ctx_map, NULL, NULL, &err);
  cr_assert(s == 0 && m == 1);
  RT_FAILS(rill__df_set_lend(df, m, lend_ones, &err), RILL_EINVAL, "'m' is not a source", err);
  RT_FAILS(rill__df_set_lend(df, 7, lend_ones, &err), RILL_EINVAL, "unknown column 7", err);
  RT_OK(rill__df_set_lend(df, s, lend_ones, &err), err);
  cr_assert_eq(rill__df_column_ctx(df, s), &ctx_src);
  cr_assert_eq(rill__df_column_ctx(df, m), &ctx_map);
  cr_assert_eq(rill__df_column_fn(df, s), (rill__fn_t)one_source);
  cr_assert_eq(rill__df_column_fn(df, m), (rill__fn_t)copy_map);
  cr_assert_null(rill__df_column_ctx(df, 5));
  cr_assert_null(rill__df_column_fn(df, -1));
  RT_OK(rill_df_shuffle(df, 3, &sh, &err), err);
  cr_assert_eq(rill__df_column_ctx(sh, m), &ctx_map, "a view's column: its parent's ctx");
  cr_assert_eq(rill__df_column_fn(sh, s), (rill__fn_t)one_source);
  cr_assert_eq(rill__df_batch_rows(sh), 0);
  rill_iter_t* it;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE}, &it, &err), err);
  rill_row_t row;
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    cr_assert_eq(((const int64_t*)rill_row_get(&row, 0)->data)[0], 1000 + row.index);
    cr_assert_eq(((const int64_t*)rill_row_get(&row, 1)->data)[0], 1000 + row.index);
  }
  cr_assert(atomic_load(&lends) > 0);
  rill_iter_free(it);
  rill_df_t* b;
  RT_OK(rill_df_batch(df, (int[]){0}, 1, 16, NULL, &b, &err), err);
  cr_assert_eq(rill__df_batch_rows(b), 16);
  rill_df_free(b);
  rill_df_free(sh);
  rill_df_free(df);
}

/* ---------------------------------------------------------------- arrays */

Test(addon, var_commit_and_cell_view) {
  rill_error_t err = {0};
  rill_array_t* a;
  RT_OK(rill_array_new(rill_type_scalar(RILL_STRING), 3, &a, &err), err);
  RT_OK(rill_array_reserve(a, 16), err);
  memcpy(a->data, "abcde", 5);
  a->offsets[0] = 0;
  a->offsets[1] = 2;
  a->offsets[2] = 5;
  cr_assert_eq(rill__array_var_commit(a, 2), RILL_OK);
  cr_assert_eq(a->data_size, 5);
  RT_OK(rill_array_set_var(a, 2, "xyz", 3, NULL), err);
  rill__cell_t cv;
  rill__cell_view(a, 1, &cv);
  cr_assert(cv.valid && cv.nbytes == 3 && memcmp(cv.data, "cde", 3) == 0 && cv.ndim == 0);
  rill__cell_view(a, 2, &cv);
  cr_assert(cv.nbytes == 3 && memcmp(cv.data, "xyz", 3) == 0);
  /* truncation: cell 2 taken back, then appended again */
  cr_assert_eq(rill__array_var_commit(a, 1), RILL_OK);
  cr_assert_eq(a->data_size, 2);
  cr_assert_eq(rill_array_set_var(a, 2, "q", 1, NULL), RILL_EINVAL, "cell 1 comes next");
  RT_OK(rill_array_set_var(a, 1, "q", 1, NULL), err);
  RT_OK(rill_array_set_null(a, 1), err);
  rill__cell_view(a, 1, &cv);
  cr_assert_eq(cv.valid, 0);
  rill__cell_view(a, 7, &cv);
  cr_assert(cv.data == NULL && cv.nbytes == 0 && !cv.valid);
  cr_assert_eq(rill__array_var_commit(a, 4), RILL_EINVAL);
  cr_assert_eq(rill__array_var_commit(a, -1), RILL_EINVAL);
  rill_array_release(a);

  rill_type_t t = {.dtype = RILL_UINT8, .ndim = 2, .shape = {2, 3}};
  RT_OK(rill_array_new(t, 2, &a, &err), err);
  cr_assert_eq(rill__array_var_commit(a, 1), RILL_EINVAL, "fixed-shape array");
  rill__cell_view(a, 1, &cv);
  cr_assert(cv.valid && cv.nbytes == 6 && cv.ndim == 2 && cv.shape[0] == 2 && cv.shape[1] == 3);
  cr_assert_eq(cv.data, (const uint8_t*)a->data + 6);
  rill_array_release(a);
}

/* ---------------------------------------------------------------- scratch */

typedef struct scr {
  int64_t uses;
  void* owned;
} scr_t;
static _Atomic int scr_destroyed;
static void scr_destroy(void* p) {
  scr_t* s = p;
  rill__free(s->owned);
  atomic_fetch_add(&scr_destroyed, 1);
}
static const rill__scratch_kind_t scr_kind = {sizeof(scr_t), scr_destroy};
static const rill__scratch_kind_t big_kind = {1 << 16, NULL};

static void* scr_thread(void* arg) {
  scr_t* s = rill__scratch(&scr_kind);
  if (!s || s->uses != 0) return NULL;
  s->uses++;
  s->owned = rill__alloc(100);
  scr_t* again = rill__scratch(&scr_kind);
  uint8_t* big = rill__scratch(&big_kind);
  for (int i = 0; i < (1 << 16); i++)
    if (big[i]) return NULL;
  *(void**)arg = s;
  return again == s && again->uses == 1 && ((uintptr_t)big % RILL_ALIGN) == 0 ? s : NULL;
}

Test(addon, scratch_per_thread_state) {
  void* mine = rill__scratch(&scr_kind);
  cr_assert_not_null(mine);
  cr_assert_eq(rill__scratch(&scr_kind), mine);
  cr_assert_neq(rill__scratch(&big_kind), mine);
  void* theirs[2] = {NULL, NULL};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) cr_assert_eq(pthread_create(&th[i], NULL, scr_thread, &theirs[i]), 0);
  for (int i = 0; i < 2; i++) {
    void* ret;
    pthread_join(th[i], &ret);
    cr_assert_not_null(ret, "thread %d saw wrong state", i);
  }
  cr_assert_neq(theirs[0], mine);
  cr_assert_eq(atomic_load(&scr_destroyed), 2, "destroyed when each thread exits");
}

/* ---------------------------------------------------------------- events */

Test(addon, event_wait_null_event_is_ready) {
  rill_error_t err = {0};
  RT_OK(rill__event_wait(NULL, NULL, &err), err);
  RT_OK(rill__event_wait(NULL, (void*)&err, &err), err);
  if (rill__cuda_device_count() == 0) return;
  void* ev;
  RT_OK(rill__cuda_event_new(0, &ev, &err), err);
  RT_OK(rill__cuda_event_record(ev, NULL, &err), err);
  RT_OK(rill__event_wait(ev, NULL, &err), err);
  rill__cuda_event_free(ev);
}
