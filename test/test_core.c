/* Dataframes and operators: pull, diamond, reduce, batch, shard, shuffle, filter, memory
 * source, API misuse, allocation failure, CUDA stages without a device. */
#include <stdlib.h>

#include "engine_common.h"

Test(core, counting_source_and_map_in_order) {
  counter_t cs, cm;
  counter_init(&cs, 2);
  counter_init(&cm, 1);
  rill_df_t* df = make_src(8, &cs, NULL);
  int m = add_map(df, "plus1", 0, &cm, NULL);
  cr_assert_eq(rill_df_ncolumns(df), 2);
  cr_assert_eq(rill_df_column(df, "plus1"), m);
  cr_assert_str_eq(rill_df_field(df, m)->name, "plus1");
  cr_assert_null(rill_df_field(df, 2));
  rill_error_t err;
  rill_iter_t* it = open_iter(df, NULL);
  rill_row_t row;
  for (int64_t i = 0; i < 8; i++) {
    RT_OK(rill_iter_next(it, &row, &err), err);
    cr_assert_eq(row.index, i);
    cr_assert_eq(row.ncolumns, 2);
    cr_assert_eq(((const int64_t*)rill_row_get(&row, 0)->data)[0], i + 2);
    cr_assert_eq(((const int64_t*)rill_row_get(&row, 1)->data)[0], i + 3);
    cr_assert_null(rill_row_get(&row, 2));
  }
  for (int k = 0; k < 3; k++) cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
  cr_assert_eq(atomic_load(&cs.cells), 8, "source computed %lld cells", (long long)atomic_load(&cs.cells));
  cr_assert_eq(atomic_load(&cm.cells), 8);
  expect_stats(it, 8, 8, ANY, ANY, ANY);
  rill_iter_stats_t st;
  rill_iter_stats(it, &st);
  cr_assert(st.stage_calls >= 2);
  rill_iter_free(it);
  rill_df_free(df);
}

Test(core, diamond_calls_source_once_per_row) {
  counter_t cs, ca, cb, cc;
  counter_init(&cs, 2);
  counter_init(&ca, 1);
  counter_init(&cb, 10);
  counter_init(&cc, 0);
  rill_df_t* df = make_src(8, &cs, NULL);
  int a = add_map(df, "a", 0, &ca, NULL);
  int b = add_map(df, "b", 0, &cb, NULL);
  rill_error_t err;
  int ins[2] = {a, b};
  int c = rill_df_map(df, "c", rill_type_scalar(RILL_INT64), ins, 2, map_add, &cc, NULL, NULL, &err);
  cr_assert_eq(c, 3, "%s", err.message);
  int64_t v[16];
  int64_t n = collect(df, c, NULL, v, 16);
  cr_assert_eq(n, 8);
  for (int64_t i = 0; i < 8; i++) cr_assert_eq(v[i], 2 * (i + 2) + 11);
  cr_assert_eq(atomic_load(&cs.cells), 8);
  for (int i = 0; i < 8; i++) cr_assert_eq(atomic_load(&cs.seen[i]), 1, "row %d computed %lld times", i, (long long)atomic_load(&cs.seen[i]));
  rill_df_free(df);
}

Test(core, iterating_one_column_never_runs_another) {
  counter_t cs, ca, cb;
  counter_init(&cs, 0);
  counter_init(&ca, 1);
  counter_init(&cb, 1);
  rill_df_t* df = make_src(8, &cs, NULL);
  int a = add_map(df, "a", 0, &ca, NULL);
  add_map(df, "b", 0, &cb, NULL);
  int64_t v[16];
  cr_assert_eq(collect(df, a, NULL, v, 16), 8);
  cr_assert_eq(atomic_load(&ca.calls) > 0, 1);
  cr_assert_eq(atomic_load(&cb.calls), 0, "b was computed");
  rill_df_free(df);
}

static void reduce_case(int before, int after, const int64_t* want) {
  counter_t cs, cb, cr, ca;
  counter_init(&cs, 2);
  counter_init(&cb, 1);
  counter_init(&cr, 0);
  counter_init(&ca, 1);
  rill_df_t* df = make_src(8, &cs, NULL);
  int col = before ? add_map(df, "b", 0, &cb, NULL) : 0;
  rill_error_t err;
  rill_df_t* red;
  RT_OK(rill_df_reduce(df, col, 3, rill_type_scalar(RILL_INT64), red_sum, &cr, NULL, &red, &err), err);
  cr_assert_eq(rill_df_rows(red), 3);
  cr_assert_str_eq(rill_df_field(red, 0)->name, before ? "b" : "src");
  int out = 0;
  if (after) out = add_map(red, "a", 0, &ca, NULL);
  rill_df_free(df); /* the reduce keeps its parent alive */
  int64_t v[8];
  cr_assert_eq(collect(red, out, NULL, v, 8), 3);
  for (int i = 0; i < 3; i++) cr_assert_eq(v[i], want[i], "group %d: %lld, want %lld", i, (long long)v[i], (long long)want[i]);
  rill_df_free(red);
}

Test(core, reduce_sum_by_three) {
  reduce_case(0, 0, (const int64_t[]){9, 18, 17});
  reduce_case(1, 0, (const int64_t[]){12, 21, 19});
  reduce_case(0, 1, (const int64_t[]){10, 19, 18});
}

static void batch_lengths(int drop_last, int nwant, const int64_t* lens) {
  counter_t cs;
  counter_init(&cs, 0);
  rill_df_t* df = make_src(5, &cs, NULL);
  rill_error_t err;
  rill_df_t* b;
  int col = 0;
  rill_batch_opts_t bo = {.drop_last = drop_last};
  RT_OK(rill_df_batch(df, &col, 1, 3, &bo, &b, &err), err);
  cr_assert_eq(rill_df_rows(b), nwant);
  rill_iter_t* it = open_iter(b, NULL);
  rill_row_t row;
  int k = 0;
  int r;
  while ((r = rill_iter_next(it, &row, &err)) == RILL_OK) {
    const rill_array_t* a = rill_row_get(&row, 0);
    cr_assert(k < nwant);
    cr_assert_eq(a->length, lens[k]);
    cr_assert_eq(row.index, k);
    for (int64_t i = 0; i < a->length; i++) cr_assert_eq(((const int64_t*)a->data)[i], k * 3 + i);
    k++;
  }
  cr_assert_eq(r, RILL_END);
  cr_assert_eq(k, nwant);
  rill_iter_free(it);
  rill_df_free(b);
  rill_df_free(df);
}

Test(core, batch_five_rows_by_three) {
  batch_lengths(0, 2, (const int64_t[]){3, 2});
  batch_lengths(1, 1, (const int64_t[]){3});
}

static int map_hwc(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* ex, void* ctx,
                   rill_error_t* err) {
  int64_t n = in[0]->length, shape[3] = {2, 3, 4};
  int r = rill_exec_alloc(ex, out, rill_type_tensor(RILL_UINT8, 3, shape), n);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc");
  const int64_t* rows = rill_exec_rows(ex);
  uint8_t* d = out->data;
  for (int64_t i = 0; i < n; i++)
    for (int y = 0; y < 2; y++)
      for (int x = 0; x < 3; x++)
        for (int c = 0; c < 4; c++) d[i * 24 + (y * 3 + x) * 4 + c] = (uint8_t)(rows[i] * 100 + c * 10 + y * 3 + x);
  if (rows[0] == 1 && n > 1) rill_array_set_null(out, 1);
  return RILL_OK;
}

/* Four rows with a nullable 2x3x4 uint8 column "img" made by map_hwc, batched by `size`;
 * *df receives the base dataframe. */
static rill_df_t* hwc_batches(counter_t* cs, int64_t size, const rill_batch_opts_t* bo, rill_df_t** df) {
  counter_init(cs, 0);
  *df = make_src(4, cs, NULL);
  rill_error_t err;
  int64_t shape[3] = {2, 3, 4};
  int in = 0;
  rill_stage_opts_t o = {.nullable = 1};
  int img = rill_df_map(*df, "img", rill_type_tensor(RILL_UINT8, 3, shape), &in, 1, map_hwc, NULL, NULL, &o, &err);
  cr_assert(img >= 0, "%s", err.message);
  return batch_of(*df, img, size, bo);
}

Test(core, batch_nchw_transposes_and_keeps_nulls) {
  counter_t cs;
  rill_df_t* df;
  rill_df_t* b = hwc_batches(&cs, 3, &(rill_batch_opts_t){.layout = RILL_LAYOUT_NCHW}, &df);
  rill_error_t err;
  const rill_field_t* f = rill_df_field(b, 0);
  cr_assert_eq(f->type.shape[0], 4);
  cr_assert_eq(f->type.shape[1], 2);
  cr_assert_eq(f->type.shape[2], 3);
  rill_iter_t* it = open_iter(b, NULL);
  rill_row_t row;
  RT_OK(rill_iter_next(it, &row, &err), err);
  const rill_array_t* a = rill_row_get(&row, 0);
  cr_assert_eq(a->length, 3);
  const uint8_t* d = a->data;
  for (int i = 0; i < 3; i++)
    for (int c = 0; c < 4; c++)
      for (int y = 0; y < 2; y++)
        for (int x = 0; x < 3; x++) cr_assert_eq(d[i * 24 + (c * 2 + y) * 3 + x], i * 100 + c * 10 + y * 3 + x);
  RT_OK(rill_iter_next(it, &row, &err), err);
  cr_assert_eq(rill_row_get(&row, 0)->length, 1);
  end_and_free(it, df, b);
}

Test(core, batch_carries_validity) {
  counter_t cs;
  rill_df_t* df;
  rill_df_t* b = hwc_batches(&cs, 4, NULL, &df);
  rill_error_t err;
  rill_iter_t* it = open_iter(b, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE});
  rill_row_t row;
  RT_OK(rill_iter_next(it, &row, &err), err);
  const rill_array_t* a = rill_row_get(&row, 0);
  cr_assert_eq(a->length, 4);
  /* map_hwc nulls cell 1 of a call starting at row 1; with one call per batch nothing is null */
  cr_assert_eq(a->null_count, 0);
  rill_iter_free(it);
  rill_df_free(b);
  rill_df_free(df);
}

Test(core, shard_is_disjoint_and_complete) {
  counter_t cs;
  counter_init(&cs, 0);
  rill_df_t* df = make_src(10, &cs, NULL);
  int seen[10] = {0};
  int64_t total = 0;
  for (int rank = 0; rank < 3; rank++) {
    rill_error_t err;
    rill_df_t* s;
    RT_OK(rill_df_shard(df, rank, 3, &s, &err), err);
    int64_t v[16];
    int64_t n = collect(s, 0, NULL, v, 16);
    cr_assert_eq(n, rill_df_rows(s));
    cr_assert_eq(n, rank == 0 ? 4 : 3);
    for (int64_t i = 0; i < n; i++) {
      cr_assert_eq(v[i] % 3, rank);
      seen[v[i]]++;
    }
    total += n;
    rill_df_free(s);
  }
  cr_assert_eq(total, 10);
  for (int i = 0; i < 10; i++) cr_assert_eq(seen[i], 1);
  rill_df_free(df);
}

static void perm_of(rill_df_t* sh, int64_t epoch, int64_t* v, int64_t n) {
  rill_iter_opts_t o = {.epoch = epoch};
  cr_assert_eq(collect(sh, 0, &o, v, n), n);
}

Test(core, shuffle_is_a_permutation_per_epoch) {
  counter_t cs;
  counter_init(&cs, 0);
  enum { N = 1000 };
  rill_df_t* df = make_src(N, &cs, NULL);
  rill_error_t err;
  rill_df_t *sh, *sh2, *sh3;
  RT_OK(rill_df_shuffle(df, 42, &sh, &err), err);
  RT_OK(rill_df_shuffle(df, 42, &sh2, &err), err);
  RT_OK(rill_df_shuffle(df, 43, &sh3, &err), err);
  cr_assert_eq(rill_df_rows(sh), N);
  cr_assert_str_eq(rill_df_field(sh, 0)->name, "src");
  static int64_t a[N], b[N], c[N], d[N];
  perm_of(sh, 0, a, N);
  perm_of(sh, 1, b, N);
  perm_of(sh2, 0, c, N);
  perm_of(sh3, 0, d, N);
  static int seen[N];
  memset(seen, 0, sizeof seen);
  int64_t same_epoch = 0, same_seed = 0, in_order = 0;
  for (int i = 0; i < N; i++) {
    cr_assert(a[i] >= 0 && a[i] < N);
    seen[a[i]]++;
    same_epoch += a[i] == b[i];
    same_seed += a[i] == d[i];
    in_order += a[i] == i;
    cr_assert_eq(a[i], c[i], "same seed, same epoch: different permutation");
  }
  for (int i = 0; i < N; i++) cr_assert_eq(seen[i], 1, "row %d appears %d times", i, seen[i]);
  cr_assert(same_epoch < N / 10, "epochs 0 and 1 agree on %lld rows", (long long)same_epoch);
  cr_assert(same_seed < N / 10);
  cr_assert(in_order < N / 10);
  for (int e = 1; e < 2; e++) {
    memset(seen, 0, sizeof seen);
    for (int i = 0; i < N; i++) seen[b[i]]++;
    for (int i = 0; i < N; i++) cr_assert_eq(seen[i], 1);
  }
  rill_df_free(sh);
  rill_df_free(sh2);
  rill_df_free(sh3);
  rill_df_free(df);
}

Test(core, shuffle_small_sizes_are_permutations) {
  for (int64_t n = 0; n <= 9; n++) {
    counter_t cs;
    counter_init(&cs, 0);
    rill_df_t* df = make_src(n, &cs, NULL);
    rill_error_t err;
    rill_df_t* sh;
    RT_OK(rill_df_shuffle(df, 7, &sh, &err), err);
    int64_t v[16];
    int seen[16] = {0};
    cr_assert_eq(collect(sh, 0, NULL, v, 16), n);
    for (int64_t i = 0; i < n; i++) seen[v[i]]++;
    for (int64_t i = 0; i < n; i++) cr_assert_eq(seen[i], 1);
    rill_df_free(sh);
    rill_df_free(df);
  }
}

static int map_even(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* ex, void* ctx,
                    rill_error_t* err) {
  int64_t n = in[0]->length;
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_BOOL), n);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc");
  for (int64_t i = 0; i < n; i++) {
    int64_t v = ((const int64_t*)in[0]->data)[i];
    ((uint8_t*)out->data)[i] = v % 2 == 0;
    if (v == 4) rill_array_set_null(out, i); /* null counts as false */
  }
  return RILL_OK;
}

Test(core, filter_keeps_true_rows) {
  counter_t cs, cm;
  counter_init(&cs, 0);
  counter_init(&cm, 100);
  rill_df_t* df = make_src(10, &cs, NULL);
  rill_error_t err;
  int in = 0;
  rill_stage_opts_t o = {.nullable = 1};
  int even = rill_df_map(df, "even", rill_type_scalar(RILL_BOOL), &in, 1, map_even, NULL, NULL, &o, &err);
  cr_assert(even >= 0);
  rill_df_t* f;
  RT_OK(rill_df_filter(df, even, &f, &err), err);
  cr_assert_eq(rill_df_rows(f), 4);
  int m = add_map(f, "plus100", 0, &cm, NULL);
  cr_assert_eq(m, 2);
  int64_t v[16];
  cr_assert_eq(collect(f, m, NULL, v, 16), 4);
  int64_t want[4] = {100, 102, 106, 108};
  for (int i = 0; i < 4; i++) cr_assert_eq(v[i], want[i]);
  rill_df_free(f);
  /* wrong dtype */
  RT_FAILS(rill_df_filter(df, 0, &f, &err), RILL_EINVAL, "not a scalar bool", err);
  cr_assert_null(f);
  RT_FAILS(rill_df_filter(df, 9, &f, &err), RILL_EINVAL, "unknown column 9", err);
  rill_df_free(df);
}

/* slice and take: rows by position, maps on the view, views of views, a state saved over a
 * take restored only by the same rows, and every misuse named. */
Test(core, slice_and_take_pick_rows_by_position) {
  rill_error_t err;
  rill_df_t *sl, *tk, *tt, *e;
  counter_t cs, cm;
  counter_init(&cs, 0);
  rill_df_t* df = make_src(10, &cs, NULL);
  counter_init(&cm, 100);
  RT_OK(rill_df_slice(df, 3, 5, &sl, &err), err);
  cr_assert_eq(rill_df_rows(sl), 5);
  int m = add_map(sl, "plus100", 0, &cm, NULL);
  int64_t v[32];
  cr_assert_eq(collect(sl, m, NULL, v, 32), 5);
  for (int i = 0; i < 5; i++) cr_assert_eq(v[i], 103 + i);
  for (int threads = RILL_THREADS_NONE; threads <= 2; threads += 3) /* in chunks of one row, on workers too */
    for (int prefetch = 0; prefetch <= 3; prefetch += 3) {
      rill_iter_opts_t o = {.threads = threads, .prefetch = prefetch};
      cr_assert_eq(collect(sl, 0, &o, v, 32), 5);
      for (int i = 0; i < 5; i++) cr_assert_eq(v[i], 3 + i);
    }
  const int64_t rows[6] = {9, 0, 9, 4, 2, 7};
  RT_OK(rill_df_take(df, rows, 6, &tk, &err), err);
  cr_assert_eq(rill_df_rows(tk), 6);
  cr_assert_eq(collect(tk, 0, NULL, v, 32), 6);
  for (int i = 0; i < 6; i++) cr_assert_eq(v[i], rows[i], "row %d", i);
  /* a take of a slice, batched: positions within the slice */
  RT_OK(rill_df_take(sl, (const int64_t[]){4, 0}, 2, &tt, &err), err);
  rill_df_t* b = batch_of(tt, 0, 2, NULL);
  rill_iter_t* it = open_iter(b, NULL);
  rill_row_t row;
  RT_OK(rill_iter_next(it, &row, &err), err);
  const rill_array_t* a = rill_row_get(&row, 0);
  cr_assert_eq(a->length, 2);
  cr_assert_eq(((const int64_t*)a->data)[0], 7);
  cr_assert_eq(((const int64_t*)a->data)[1], 3);
  end_and_free(it, b, tt);
  /* empty views; a slice to the end */
  RT_OK(rill_df_slice(df, 10, 0, &e, &err), err);
  cr_assert_eq(collect(e, 0, NULL, v, 32), 0);
  rill_df_free(e);
  RT_OK(rill_df_take(df, NULL, 0, &e, &err), err);
  cr_assert_eq(rill_df_rows(e), 0);
  rill_df_free(e);
  /* a state saved over one take is refused by a take of other rows of the same length */
  rill_iter_state_t st;
  it = open_iter(tk, NULL);
  RT_OK(rill_iter_next(it, &row, &err), err);
  RT_OK(rill_iter_save(it, &st), err);
  rill_iter_free(it);
  RT_OK(rill_df_take(df, (const int64_t[]){1, 2, 3, 4, 5, 6}, 6, &tt, &err), err);
  it = open_iter(tt, NULL);
  cr_assert_eq(rill_iter_restore(it, &st), RILL_EINVAL);
  rill_iter_free(it);
  rill_df_free(tt);
  RT_OK(rill_df_take(df, rows, 6, &tt, &err), err);
  it = open_iter(tt, NULL);
  RT_OK(rill_iter_restore(it, &st), err);
  RT_OK(rill_iter_next(it, &row, &err), err);
  cr_assert_eq(row.index, 1);
  cr_assert_eq(((const int64_t*)rill_row_get(&row, 0)->data)[0], 0);
  rill_iter_free(it);
  rill_df_free(tt);
  /* misuse */
  RT_FAILS(rill_df_slice(df, 8, 3, &e, &err), RILL_EINVAL,
           "rill_df_slice: 3 rows from row 8 are not within the 10 rows of the dataframe", err);
  cr_assert_null(e);
  RT_FAILS(rill_df_slice(df, -1, 2, &e, &err), RILL_EINVAL, "2 rows from row -1 are not within", err);
  RT_FAILS(rill_df_slice(df, 11, 0, &e, &err), RILL_EINVAL, "0 rows from row 11 are not within", err);
  RT_FAILS(rill_df_slice(df, 2, -1, &e, &err), RILL_EINVAL, "-1 rows from row 2 are not within", err);
  RT_FAILS(rill_df_slice(df, 2, INT64_MAX, &e, &err), RILL_EINVAL, "rows from row 2 are not within", err);
  RT_FAILS(rill_df_take(df, (const int64_t[]){0, 10}, 2, &e, &err), RILL_EINVAL,
           "rill_df_take: rows[1] is 10, not a row of the dataframe's 10", err);
  cr_assert_null(e);
  RT_FAILS(rill_df_take(df, (const int64_t[]){-3}, 1, &e, &err), RILL_EINVAL, "rows[0] is -3, not a row", err);
  RT_FAILS(rill_df_take(df, NULL, 2, &e, &err), RILL_EINVAL, "rill_df_take: 2 rows at", err);
  RT_FAILS(rill_df_take(df, rows, -1, &e, &err), RILL_EINVAL, "rill_df_take: -1 rows at", err);
  RT_FAILS(rill_df_slice(NULL, 0, 0, &e, &err), RILL_EINVAL, "rill_df_slice: the dataframe is NULL", err);
  RT_FAILS(rill_df_take(NULL, rows, 1, &e, &err), RILL_EINVAL, "rill_df_take: the dataframe is NULL", err);
  RT_FAILS(rill_df_slice(df, 0, 1, NULL, &err), RILL_EINVAL, "rill_df_slice: out is NULL", err);
  b = batch_of(df, 0, 4, NULL);
  RT_FAILS(rill_df_slice(b, 0, 1, &e, &err), RILL_ENOTSUP, "rill_df_slice: deriving from a batched dataframe", err);
  RT_FAILS(rill_df_take(b, rows, 1, &e, &err), RILL_ENOTSUP, "rill_df_take: deriving from a batched dataframe", err);
  rill_df_free(b);
  rill_df_free(tk);
  rill_df_free(sl);
  rill_df_free(df);
}

Test(core, filter_reports_errors_of_its_column) {
  counter_t cs;
  counter_failing(&cs, 0, 3);
  rill_df_t* df = make_src(10, &cs, NULL);
  rill_error_t err;
  int in = 0;
  int even = rill_df_map(df, "even", rill_type_scalar(RILL_BOOL), &in, 1, map_even, NULL, NULL, NULL, &err);
  rill_df_t* f;
  RT_FAILS(rill_df_filter(df, even, &f, &err), RILL_EFORMAT, "bad value in row 3", err);
  cr_assert_eq(err.row, 3);
  cr_assert_null(f);
  rill_df_free(df);
}

Test(core, api_misuse_is_einval_with_message) {
  counter_t cs;
  counter_init(&cs, 0);
  rill_error_t err;
  rill_df_t* df;
  RT_FAILS(rill_df_new(-1, &df, &err), RILL_EINVAL, "negative row count", err);
  RT_FAILS(rill_df_new(3, NULL, &err), RILL_EINVAL, "out is NULL", err);
  df = make_src(6, &cs, NULL);
  int bad = 5;
  RT_FAILS(rill_df_map(df, "x", rill_type_scalar(RILL_INT64), &bad, 1, map_add, NULL, NULL, NULL, &err), RILL_EINVAL,
           "unknown column 5", err);
  int zero = 0;
  RT_FAILS(rill_df_map(df, "src", rill_type_scalar(RILL_INT64), &zero, 1, map_add, NULL, NULL, NULL, &err), RILL_EINVAL,
           "already exists", err);
  RT_FAILS(rill_df_map(df, "y", rill_type_scalar(RILL_INT64), &zero, 1, NULL, NULL, NULL, NULL, &err), RILL_EINVAL,
           "function is NULL", err);
  RT_FAILS(rill_df_map(NULL, "y", rill_type_scalar(RILL_INT64), &zero, 1, map_add, NULL, NULL, NULL, &err), RILL_EINVAL,
           "dataframe is NULL", err);
  RT_FAILS(rill_df_map(df, NULL, rill_type_scalar(RILL_INT64), &zero, 1, map_add, NULL, NULL, NULL, &err), RILL_EINVAL,
           "name is empty", err);
  RT_FAILS(rill_df_map(df, "z", rill_type_tensor(RILL_STRING, 1, (int64_t[]){2}), &zero, 1, map_add, NULL, NULL, NULL,
                       &err),
           RILL_EINVAL, "invalid type", err);
  rill_stage_opts_t o = {.on_error = 9};
  RT_FAILS(rill_df_map(df, "w", rill_type_scalar(RILL_INT64), &zero, 1, map_add, NULL, NULL, &o, &err), RILL_EINVAL,
           "on_error", err);
  rill_df_t* r;
  RT_FAILS(rill_df_reduce(df, 0, 0, rill_type_scalar(RILL_INT64), red_sum, NULL, NULL, &r, &err), RILL_EINVAL,
           "k = 0", err);
  RT_FAILS(rill_df_reduce(df, 4, 2, rill_type_scalar(RILL_INT64), red_sum, NULL, NULL, &r, &err), RILL_EINVAL,
           "unknown column 4", err);
  RT_FAILS(rill_df_batch(df, &zero, 1, 0, NULL, &r, &err), RILL_EINVAL, "batch size 0", err);
  RT_FAILS(rill_df_batch(df, &bad, 1, 2, NULL, &r, &err), RILL_EINVAL, "unknown column 5", err);
  RT_FAILS(rill_df_shard(df, 3, 3, &r, &err), RILL_EINVAL, "rank 3 of world 3", err);
  RT_FAILS(rill_df_shard(df, 0, 0, &r, &err), RILL_EINVAL, "rank 0 of world 0", err);
  RT_FAILS(rill_df_shuffle(NULL, 1, &r, &err), RILL_EINVAL, "dataframe is NULL", err);
  cr_assert_eq(rill_df_column(df, "nope"), RILL_EINVAL);
  rill_iter_t* it;
  RT_FAILS(rill_iter_new(df, &(rill_iter_opts_t){.columns = &bad, .ncolumns = 1}, &it, &err), RILL_EINVAL,
           "unknown column 5", err);
  RT_FAILS(rill_iter_new(NULL, NULL, &it, &err), RILL_EINVAL, "dataframe is NULL", err);
  RT_FAILS(rill_iter_next(NULL, NULL, &err), RILL_EINVAL, "NULL argument", err);
  /* a derived dataframe freezes its parent */
  rill_df_t* b;
  RT_OK(rill_df_batch(df, &zero, 1, 2, NULL, &b, &err), err);
  RT_FAILS(rill_df_map(df, "late", rill_type_scalar(RILL_INT64), &zero, 1, map_add, NULL, NULL, NULL, &err), RILL_EINVAL,
           "add columns before deriving", err);
  RT_FAILS(rill_df_shuffle(b, 1, &r, &err), RILL_ENOTSUP, "batched dataframe", err);
  cr_assert_eq(rill_iter_seek(NULL, 0), RILL_EINVAL);
  rill_df_free(b);
  rill_df_free(df);
}

static int ctx_freed;
static void count_free(void* p) {
  (void)p;
  ctx_freed++;
}

Test(core, failed_add_frees_context_once) {
  counter_t cs;
  counter_init(&cs, 0);
  rill_df_t* df = make_src(2, &cs, NULL);
  rill_error_t err;
  int bad = 7;
  ctx_freed = 0;
  cr_assert(rill_df_map(df, "x", rill_type_scalar(RILL_INT64), &bad, 1, map_add, &cs, count_free, NULL, &err) < 0);
  cr_assert_eq(ctx_freed, 1);
  int zero = 0;
  cr_assert(rill_df_map(df, "x", rill_type_scalar(RILL_INT64), &zero, 1, map_add, &cs, count_free, NULL, &err) > 0);
  cr_assert_eq(ctx_freed, 1);
  rill_df_free(df);
  cr_assert_eq(ctx_freed, 2);
}

Test(core, cuda_stage_without_device_is_enodev) {
  if (rill_cuda_device_count() > 0) cr_skip_test("a CUDA device is present");
  counter_t cs;
  counter_init(&cs, 0);
  rill_stage_opts_t o = {.where = RILL_STAGE_CUDA};
  rill_df_t* df = make_src(4, &cs, &o);
  cr_assert_eq(rill_df_field(df, 0)->device.type, RILL_DEVICE_CUDA);
  rill_error_t err;
  rill_iter_t* it;
  int r = rill_iter_new(df, NULL, &it, &err);
  cr_assert_eq(r, RILL_ENODEV, "got %d: %s", r, err.message);
  cr_assert_eq(err.code, RILL_ENODEV);
  cr_assert(strlen(err.message) > 0);
  cr_assert_null(it);
  cr_assert_eq(atomic_load(&cs.calls), 0);
  rill_df_free(df);
}

/* ---------------------------------------------------------------- memory source */

Test(core, from_arrays_every_dtype_borrowed_and_copied) {
  rill_error_t err;
  enum { N = 5 };
  int64_t i64[N] = {1, -2, 3, -4, 5};
  double f64[N] = {0.5, 1.5, 2.5, 3.5, 4.5};
  uint8_t b8[N] = {1, 0, 1, 1, 0};
  int64_t ts[N] = {0, 1000000, 2000000, 3000000, 4000000};
  uint8_t valid = 0x1B; /* row 2 null */
  char text[] = "ab" "" "cde" "f" "gh";
  int64_t toff[N + 1] = {0, 2, 2, 5, 6, 8};
  uint8_t bin[] = {0, 1, 2, 3, 4, 5, 6, 7};
  int64_t boff[N + 1] = {0, 1, 3, 3, 6, 8};
  float ten[N * 2 * 3];
  for (int i = 0; i < N * 6; i++) ten[i] = (float)i;
  uint16_t u16[N] = {1, 2, 3, 4, 65535};
  int8_t s8[N] = {-128, -1, 0, 1, 127};
  uint32_t u32[N] = {7, 8, 9, 10, 11};
  int32_t s32[N] = {-7, 8, -9, 10, -11};
  uint64_t u64[N] = {1, 2, 3, 4, UINT64_MAX};
  int16_t s16[N] = {-1, -2, -3, -4, -5};
  float f32[N] = {1, 2, 3, 4, 5};
  uint16_t f16[N] = {0x3C00, 0x4000, 0x4200, 0x4400, 0x4500};
  uint16_t bf16[N] = {0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0};
  int64_t vshape[N * 1] = {1, 2, 0, 3, 2};
  int64_t voff[N + 1] = {0, 4, 12, 12, 24, 32};
  float vdata[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  rill_array_t* arr[20];
  int na = 0;
  RT_OK(rill_array_wrap(rill_type_scalar(RILL_INT64), N, i64, 0, &valid, -1, NULL, NULL, NULL, NULL, &arr[na++], &err), err);
  RT_OK(rill_array_wrap(rill_type_scalar(RILL_FLOAT64), N, f64, 0, NULL, 0, NULL, NULL, NULL, NULL, &arr[na++], &err), err);
  RT_OK(rill_array_wrap(rill_type_scalar(RILL_BOOL), N, b8, 0, NULL, 0, NULL, NULL, NULL, NULL, &arr[na++], &err), err);
  RT_OK(rill_array_wrap(rill_type_scalar(RILL_TIMESTAMP_US), N, ts, 0, NULL, 0, NULL, NULL, NULL, NULL, &arr[na++], &err), err);
  RT_OK(rill_array_wrap(rill_type_scalar(RILL_STRING), N, text, 0, &valid, -1, toff, NULL, NULL, NULL, &arr[na++], &err), err);
  RT_OK(rill_array_wrap(rill_type_scalar(RILL_BINARY), N, bin, 0, NULL, 0, boff, NULL, NULL, NULL, &arr[na++], &err), err);
  RT_OK(rill_array_wrap(rill_type_tensor(RILL_FLOAT32, 2, (int64_t[]){2, 3}), N, ten, 0, NULL, 0, NULL, NULL, NULL, NULL,
                        &arr[na++], &err),
        err);
  RT_OK(rill_array_wrap(rill_type_scalar(RILL_UINT16), N, u16, 0, NULL, 0, NULL, NULL, NULL, NULL, &arr[na++], &err), err);
  RT_OK(rill_array_wrap(rill_type_scalar(RILL_INT8), N, s8, 0, NULL, 0, NULL, NULL, NULL, NULL, &arr[na++], &err), err);
  RT_OK(rill_array_wrap(rill_type_scalar(RILL_UINT32), N, u32, 0, NULL, 0, NULL, NULL, NULL, NULL, &arr[na++], &err), err);
  RT_OK(rill_array_wrap(rill_type_scalar(RILL_INT32), N, s32, 0, NULL, 0, NULL, NULL, NULL, NULL, &arr[na++], &err), err);
  RT_OK(rill_array_wrap(rill_type_scalar(RILL_UINT64), N, u64, 0, NULL, 0, NULL, NULL, NULL, NULL, &arr[na++], &err), err);
  RT_OK(rill_array_wrap(rill_type_scalar(RILL_INT16), N, s16, 0, NULL, 0, NULL, NULL, NULL, NULL, &arr[na++], &err), err);
  RT_OK(rill_array_wrap(rill_type_scalar(RILL_FLOAT32), N, f32, 0, NULL, 0, NULL, NULL, NULL, NULL, &arr[na++], &err), err);
  RT_OK(rill_array_wrap(rill_type_scalar(RILL_FLOAT16), N, f16, 0, NULL, 0, NULL, NULL, NULL, NULL, &arr[na++], &err), err);
  RT_OK(rill_array_wrap(rill_type_scalar(RILL_BFLOAT16), N, bf16, 0, NULL, 0, NULL, NULL, NULL, NULL, &arr[na++], &err), err);
  RT_OK(rill_array_wrap(rill_type_scalar(RILL_UINT8), N, b8, 0, NULL, 0, NULL, NULL, NULL, NULL, &arr[na++], &err), err);
  RT_OK(rill_array_wrap(rill_type_tensor(RILL_FLOAT32, 1, (int64_t[]){-1}), N, vdata, 0, NULL, 0, voff, vshape, NULL, NULL,
                        &arr[na++], &err),
        err);
  const char* names[20] = {"i64", "f64", "bool", "ts", "text", "bin", "tensor", "u16", "i8", "u32",
                           "i32", "u64", "i16", "f32", "f16", "bf16", "u8", "var"};
  for (int copy = 0; copy <= 1; copy++) {
    rill_df_t* df;
    RT_OK(rill_df_from_arrays(names, (const rill_array_t* const*)arr, na, copy, &df, &err), err);
    cr_assert_eq(rill_df_rows(df), N);
    cr_assert_eq(rill_df_ncolumns(df), na);
    cr_assert(rill_df_field(df, 0)->nullable);
    cr_assert(!rill_df_field(df, 1)->nullable);
    /* iterate shuffled so that rows are gathered out of order */
    rill_df_t* sh;
    RT_OK(rill_df_shuffle(df, 5, &sh, &err), err);
    for (int pass = 0; pass < 2; pass++) {
      rill_df_t* src = pass ? sh : df;
      rill_iter_t* it = open_iter(src, NULL);
      rill_row_t row;
      int64_t rows_seen = 0;
      while (rill_iter_next(it, &row, &err) == RILL_OK) {
        const rill_array_t* a0 = rill_row_get(&row, 0);
        int64_t r = ((const int64_t*)rill_row_get(&row, 0)->data)[0];
        int64_t k = -1;
        for (int64_t j = 0; j < N; j++)
          if (i64[j] == r) k = j;
        if (!rill_array_is_valid(a0, 0)) {
          k = 2;
          cr_assert_eq(a0->null_count, 1);
        }
        cr_assert(k >= 0);
        cr_assert_eq(((const double*)rill_row_get(&row, 1)->data)[0], f64[k]);
        cr_assert_eq(((const uint8_t*)rill_row_get(&row, 2)->data)[0], b8[k]);
        cr_assert_eq(((const int64_t*)rill_row_get(&row, 3)->data)[0], ts[k]);
        int64_t nb;
        const rill_array_t* t = rill_row_get(&row, 4);
        const char* s = rill_array_cell(t, 0, &nb);
        cr_assert_eq(nb, toff[k + 1] - toff[k]);
        cr_assert(nb == 0 || memcmp(s, text + toff[k], (size_t)nb) == 0);
        cr_assert_eq(rill_array_is_valid(t, 0), k != 2);
        const uint8_t* bb = rill_array_cell(rill_row_get(&row, 5), 0, &nb);
        cr_assert_eq(nb, boff[k + 1] - boff[k]);
        cr_assert(nb == 0 || memcmp(bb, bin + boff[k], (size_t)nb) == 0);
        const float* tf = rill_row_get(&row, 6)->data;
        for (int e = 0; e < 6; e++) cr_assert_eq(tf[e], ten[k * 6 + e]);
        cr_assert_eq(((const uint16_t*)rill_row_get(&row, 7)->data)[0], u16[k]);
        cr_assert_eq(((const int8_t*)rill_row_get(&row, 8)->data)[0], s8[k]);
        cr_assert_eq(((const uint32_t*)rill_row_get(&row, 9)->data)[0], u32[k]);
        cr_assert_eq(((const int32_t*)rill_row_get(&row, 10)->data)[0], s32[k]);
        cr_assert_eq(((const uint64_t*)rill_row_get(&row, 11)->data)[0], u64[k]);
        cr_assert_eq(((const int16_t*)rill_row_get(&row, 12)->data)[0], s16[k]);
        cr_assert_eq(((const float*)rill_row_get(&row, 13)->data)[0], f32[k]);
        cr_assert_eq(((const uint16_t*)rill_row_get(&row, 14)->data)[0], f16[k]);
        cr_assert_eq(((const uint16_t*)rill_row_get(&row, 15)->data)[0], bf16[k]);
        const rill_array_t* v = rill_row_get(&row, 17);
        int64_t shp[1];
        rill_array_cell_shape(v, 0, shp);
        cr_assert_eq(shp[0], vshape[k]);
        const float* vf = rill_array_cell(v, 0, &nb);
        cr_assert_eq(nb, vshape[k] * 4);
        for (int64_t e = 0; e < vshape[k]; e++) cr_assert_eq(vf[e], vdata[voff[k] / 4 + e]);
        rows_seen++;
      }
      cr_assert_eq(rows_seen, N);
      rill_iter_free(it);
    }
    rill_df_free(sh);
    rill_df_free(df);
  }
  /* copied columns outlive the caller's arrays; borrowed ones hold a reference */
  rill_df_t* keep;
  RT_OK(rill_df_from_arrays(names, (const rill_array_t* const*)arr, 1, 0, &keep, &err), err);
  cr_assert_eq(rill_array_refcount(arr[0]), 2);
  rill_df_free(keep);
  cr_assert_eq(rill_array_refcount(arr[0]), 1);
  for (int i = 0; i < na; i++) rill_array_release(arr[i]);
}

Test(core, from_arrays_rejects_bad_input) {
  rill_error_t err;
  rill_array_t *a, *b;
  RT_OK(rill_array_new(rill_type_scalar(RILL_INT64), 3, &a, &err), err);
  RT_OK(rill_array_new(rill_type_scalar(RILL_INT64), 4, &b, &err), err);
  const rill_array_t* arrs[2] = {a, b};
  const char* names[2] = {"a", "b"};
  const char* dup[2] = {"a", "a"};
  rill_df_t* df;
  RT_FAILS(rill_df_from_arrays(names, arrs, 2, 0, &df, &err), RILL_EINVAL, "column 'b' has 4 rows", err);
  arrs[1] = a;
  RT_FAILS(rill_df_from_arrays(dup, arrs, 2, 1, &df, &err), RILL_EINVAL, "already exists", err);
  cr_assert_eq(rill_array_refcount(a), 1);
  RT_FAILS(rill_df_from_arrays(NULL, arrs, 2, 0, &df, &err), RILL_EINVAL, "names or arrays is NULL", err);
  RT_OK(rill_df_from_arrays(names, arrs, 0, 0, &df, &err), err);
  cr_assert_eq(rill_df_rows(df), 0);
  rill_df_free(df);
  rill_array_release(a);
  rill_array_release(b);
}

/* ---------------------------------------------------------------- allocation failure */

static _Atomic long alloc_budget = -1; /* allocations left before failing; < 0: unlimited */
static void* failing_alloc(size_t size, size_t alignment, void* ctx) {
  (void)ctx;
  if (atomic_load(&alloc_budget) >= 0 && atomic_fetch_sub(&alloc_budget, 1) <= 0) return NULL;
  return rt_sys_alloc(size, alignment);
}

/* BOOL: the string cell is valid. */
static int map_valid(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* ex, void* ctx,
                     rill_error_t* err) {
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_BOOL), in[0]->length);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc");
  for (int64_t i = 0; i < in[0]->length; i++) ((uint8_t*)out->data)[i] = (uint8_t)rill_array_is_valid(in[0], i);
  return RILL_OK;
}

/* Reduce: the number of valid cells of the group. */
static int count_cells(const rill_array_t* group, rill_array_t* out, rill_exec_t* ex, void* ctx, rill_error_t* err) {
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), 1);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc");
  ((int64_t*)out->data)[0] = group->length - group->null_count;
  return RILL_OK;
}

/* Builds and iterates a pipeline; returns the first failing status (or RILL_OK). */
static int pipeline_once(counter_t* cs, counter_t* cm, int64_t* sum) {
  rill_error_t err;
  rill_df_t *df = NULL, *sh = NULL, *b = NULL;
  rill_iter_t* it = NULL;
  int r = rill_df_new(50, &df, &err);
  if (r == RILL_OK) r = rill_df_add_source(df, "src", rill_type_scalar(RILL_INT64), src_i64, cs, NULL, NULL, &err);
  int in = 0;
  if (r >= 0) r = rill_df_map(df, "m", rill_type_scalar(RILL_INT64), &in, 1, map_add, cm, NULL, NULL, &err);
  if (r >= 0) r = rill_df_shuffle(df, 3, &sh, &err);
  int col = 1;
  if (r >= 0) r = rill_df_batch(sh, &col, 1, 8, NULL, &b, &err);
  if (r >= 0) r = rill_iter_new(b, &(rill_iter_opts_t){.threads = 2, .prefetch = 2}, &it, &err);
  *sum = 0;
  if (r >= 0) {
    rill_row_t row;
    int k;
    while ((k = rill_iter_next(it, &row, &err)) != RILL_END) {
      if (k < 0) {
        if (r >= 0) r = k;
        cr_assert_eq(k, RILL_ENOMEM, "status %d: %s", k, err.message);
        continue;
      }
      const rill_array_t* a = rill_row_get(&row, 0);
      for (int64_t i = 0; i < a->length; i++) *sum += ((const int64_t*)a->data)[i];
    }
  }
  if (r < 0) cr_assert_eq(r, RILL_ENOMEM, "status %d: %s", r, err.message);
  rill_iter_free(it);
  rill_df_free(b);
  rill_df_free(sh);
  rill_df_free(df);
  return r < 0 ? r : RILL_OK;
}

/* Row mode over copied strings, a filter, a shuffle and a reduce. */
static int pipeline_rows_once(int64_t* count) {
  rill_error_t err;
  rill_array_t* a = NULL;
  rill_df_t *df = NULL, *f = NULL, *sh = NULL, *red = NULL;
  rill_iter_t* it = NULL;
  *count = 0;
  int r = rill_array_new(rill_type_scalar(RILL_STRING), 40, &a, &err);
  for (int64_t i = 0; r == RILL_OK && i < 40; i++) {
    char buf[16];
    int len = snprintf(buf, sizeof buf, "s%lld", (long long)i);
    r = rill_array_set_var(a, i, buf, len, NULL);
    if (r == RILL_OK && i % 5 == 0) r = rill_array_set_null(a, i);
  }
  const char* names[1] = {"s"};
  if (r == RILL_OK) r = rill_df_from_arrays(names, (const rill_array_t* const*)&a, 1, 1, &df, &err);
  int in = 0, even = -1;
  if (r == RILL_OK) even = r = rill_df_map(df, "even", rill_type_scalar(RILL_BOOL), &in, 1, map_valid, NULL, NULL, NULL, &err);
  if (r >= 0) r = rill_df_filter(df, even, &f, &err);
  if (r >= 0) r = rill_df_shuffle(f, 9, &sh, &err);
  if (r >= 0) r = rill_df_reduce(sh, 0, 3, rill_type_scalar(RILL_INT64), count_cells, NULL, NULL, &red, &err);
  if (r >= 0) r = rill_iter_new(red, &(rill_iter_opts_t){.threads = 2, .prefetch = 3}, &it, &err);
  if (r >= 0) {
    rill_row_t row;
    int k;
    while ((k = rill_iter_next(it, &row, &err)) != RILL_END) {
      if (k < 0) {
        cr_assert_eq(k, RILL_ENOMEM, "status %d: %s", k, err.message);
        if (r >= 0) r = k;
        continue;
      }
      *count += ((const int64_t*)rill_row_get(&row, 0)->data)[0];
    }
  }
  if (r < 0) cr_assert_eq(r, RILL_ENOMEM, "status %d: %s", r, err.message);
  rill_iter_free(it);
  rill_df_free(red);
  rill_df_free(sh);
  rill_df_free(f);
  rill_df_free(df);
  rill_array_release(a);
  return r < 0 ? r : RILL_OK;
}

/* An allocator that records each request's alignment and counts the blocks out. */
static _Atomic long rec_out, rec_small, rec_large;
static void* recording_alloc(size_t size, size_t alignment, void* ctx) {
  (void)ctx;
  if (alignment == 16) atomic_fetch_add(&rec_small, 1);
  else if (alignment == 64) atomic_fetch_add(&rec_large, 1);
  else cr_assert_fail("an alignment of %zu", alignment);
  void* p = rt_sys_alloc(size, alignment);
  cr_assert(p && (uintptr_t)p % alignment == 0);
  atomic_fetch_add(&rec_out, 1);
  return p;
}
static void recording_free(void* p, void* ctx) {
  atomic_fetch_sub(&rec_out, 1);
  rt_sys_free(p, ctx);
}

/* Arrays' headers (a slice, a row's view: small, made and freed often) are asked with an
 * alignment of 16, which malloc serves from its per-thread cache, and still land on 64 bytes;
 * buffers are asked with 64 (Arrow's alignment); every block goes back to the allocator that
 * made it. */
Test(core, array_headers_are_small_blocks_and_buffers_stay_aligned) {
  rill_set_allocator(&(rill_allocator_t){recording_alloc, recording_free, NULL});
  rill_error_t err;
  rill_array_t* a;
  RT_OK(rill_array_new(rill_type_scalar(RILL_INT64), 100, &a, &err), err);
  cr_assert_eq((uintptr_t)a->data % 64, 0, "the data buffer is 64-byte aligned");
  cr_assert_eq((uintptr_t)a % 64, 0, "a header asked with alignment 16 is aligned to 64 by rill itself");
  long small = atomic_load(&rec_small), large = atomic_load(&rec_large);
  cr_assert(small >= 1 && large >= 1, "header %ld, buffers %ld", small, large);
  rill_array_t* s;
  RT_OK(rill_array_slice(a, 10, 5, &s, &err), err);
  cr_assert_eq(atomic_load(&rec_small), small + 1, "a slice of fixed cells is one small block");
  cr_assert_eq(atomic_load(&rec_large), large);
  cr_assert_eq(((const int64_t*)s->data) - ((const int64_t*)a->data), 10);
  rill_set_allocator(NULL); /* blocks made before go back to the recording allocator */
  rill_array_release(s);
  rill_array_release(a);
  cr_assert_eq(atomic_load(&rec_out), 0, "%ld blocks not freed", atomic_load(&rec_out));
}

Test(core, allocation_failure_in_row_mode_filter_and_reduce) {
  rill_allocator_t al = {failing_alloc, rt_sys_free, NULL};
  rill_set_allocator(&al);
  int64_t count;
  int ok_at = -1;
  for (long n = 0; n < 600; n++) {
    atomic_store(&alloc_budget, n);
    int r = pipeline_rows_once(&count);
    atomic_store(&alloc_budget, -1);
    if (r == RILL_OK) {
      cr_assert_eq(count, 32); /* 40 strings, every 5th null */
      ok_at = (int)n;
      break;
    }
  }
  rill_set_allocator(NULL);
  cr_assert(ok_at > 5, "the pipeline never succeeded: %d", ok_at);
}

Test(core, allocation_failure_is_enomem_everywhere) {
  rill_allocator_t al = {failing_alloc, rt_sys_free, NULL};
  rill_set_allocator(&al);
  counter_t cs, cm;
  counter_init(&cs, 0);
  counter_init(&cm, 1);
  int64_t sum;
  int ok_at = -1;
  for (long n = 0; n < 400; n++) {
    atomic_store(&alloc_budget, n);
    int r = pipeline_once(&cs, &cm, &sum);
    atomic_store(&alloc_budget, -1);
    if (r == RILL_OK) {
      cr_assert_eq(sum, 50 * 49 / 2 + 50);
      ok_at = (int)n;
      break;
    }
  }
  cr_assert(ok_at > 5, "the pipeline never succeeded (or needed no allocation): %d", ok_at);
  /* an iterator survives a failing chunk and continues */
  counter_init(&cs, 0);
  rill_df_t* df = make_src(8, &cs, NULL);
  rill_error_t err;
  rill_iter_t* it;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE, .prefetch = RILL_PREFETCH_NONE}, &it, &err),
        err);
  rill_row_t row;
  atomic_store(&alloc_budget, 0);
  int r = rill_iter_next(it, &row, &err);
  atomic_store(&alloc_budget, -1);
  cr_assert_eq(r, RILL_ENOMEM, "%d %s", r, err.message);
  cr_assert(strstr(err.message, "out of memory") || strstr(err.message, "cannot allocate"), "%s", err.message);
  RT_OK(rill_iter_seek(it, 0), err);
  for (int i = 0; i < 8; i++) {
    RT_OK(rill_iter_next(it, &row, &err), err);
    cr_assert_eq(((const int64_t*)rill_row_get(&row, 0)->data)[0], i);
  }
  rill_iter_free(it);
  rill_df_free(df);
  rill_set_allocator(NULL);
}

Test(core, objects_stay_usable_after_enomem) {
  rill_allocator_t al = {failing_alloc, rt_sys_free, NULL};
  counter_t cs, cm;
  counter_init(&cs, 0);
  counter_init(&cm, 1);
  rill_df_t* df = make_src(10, &cs, NULL);
  rill_error_t err;
  int in = 0;
  rill_set_allocator(&al);
  int failures = 0;
  for (long n = 0; n < 10; n++) {
    atomic_store(&alloc_budget, n);
    int r = rill_df_map(df, "m", rill_type_scalar(RILL_INT64), &in, 1, map_add, &cm, NULL, NULL, &err);
    atomic_store(&alloc_budget, -1);
    if (r >= 0) break;
    cr_assert_eq(r, RILL_ENOMEM);
    cr_assert(strstr(err.message, "out of memory"), "%s", err.message);
    cr_assert_eq(rill_df_ncolumns(df), 1, "a failed map left a column behind");
    failures++;
  }
  rill_set_allocator(NULL);
  cr_assert(failures > 0);
  cr_assert_eq(rill_df_ncolumns(df), 2);
  int64_t v[16];
  cr_assert_eq(collect(df, 1, NULL, v, 16), 10);
  for (int i = 0; i < 10; i++) cr_assert_eq(v[i], i + 1);
  rill_df_free(df);
}

/* Map on a uint8 [2,2] tensor column: int64 out = sum of the cell; fails on row fail_row. */
static int64_t zc_fail_row = -1;
static int map_cellsum(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* ex, void* ctx,
                       rill_error_t* err) {
  int64_t n = in[0]->length;
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), n);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc failed");
  const int64_t* rows = rill_exec_rows(ex);
  const uint8_t* d = in[0]->data;
  for (int64_t i = 0; i < n; i++) {
    if (rows[i] == zc_fail_row) {
      err->row = i;
      return rill_error_set(err, RILL_EFORMAT, "bad cell in row %lld", (long long)rows[i]);
    }
    ((int64_t*)out->data)[i] = d[4 * i] + d[4 * i + 1] + d[4 * i + 2] + d[4 * i + 3];
  }
  return RILL_OK;
}

/* The batches of b (column 0, batches of `batch` of `rows` rows, without nulls), read without
 * worker threads and with two, are slices of the caller's buffer d from cell `first` on. */
static void expect_lent(rill_df_t* b, const uint8_t* d, int64_t first, int64_t rows, int64_t batch) {
  rill_error_t err;
  for (int threads = RILL_THREADS_NONE; threads <= 2; threads += 3) {
    rill_iter_t* it = open_iter(b, &(rill_iter_opts_t){.threads = threads});
    rill_row_t row;
    int64_t k = 0;
    while (rill_iter_next(it, &row, &err) == RILL_OK) {
      const rill_array_t* x = rill_row_get(&row, 0);
      cr_assert_eq(x->length, rows - k * batch < batch ? rows - k * batch : batch);
      cr_assert_eq(x->data, d + (first + k * batch) * 4, "threads %d batch %lld was copied", threads, (long long)k);
      cr_assert_eq(x->null_count, 0);
      k++;
    }
    cr_assert_eq(k, (rows + batch - 1) / batch);
    rill_iter_free(it);
  }
}

/* n cells of uint8 [2, 2] holding the bytes 0, 1, 2, ... (4 a cell). */
static rill_array_t* byte_cells(int n) {
  rill_error_t err;
  rill_array_t* a;
  RT_OK(rill_array_new(rill_type_tensor(RILL_UINT8, 2, (int64_t[]){2, 2}), n, &a, &err), err);
  for (int i = 0; i < n * 4; i++) ((uint8_t*)a->data)[i] = (uint8_t)i;
  return a;
}

Test(core, memory_source_lends_consecutive_rows_without_copying) {
  enum { N = 10, B = 4, CELL = 4 };
  rill_error_t err;
  rill_array_t* a = byte_cells(N);
  uint8_t* d = a->data;
  uint8_t orig[N * CELL];
  memcpy(orig, d, sizeof orig);
  const char* names[1] = {"img"};
  const rill_array_t* arrays[1] = {a};
  rill_df_t* df;
  RT_OK(rill_df_from_arrays(names, arrays, 1, 0, &df, &err), err);
  int in = 0;
  rill_stage_opts_t skip = {.on_error = RILL_ON_ERROR_SKIP};
  int sum = rill_df_map(df, "sum", rill_type_scalar(RILL_INT64), &in, 1, map_cellsum, NULL, NULL, &skip, &err);
  cr_assert_eq(sum, 1, "%s", err.message);
  /* batches of the column alone: slices of the caller's buffer */
  rill_df_t* b;
  RT_OK(rill_df_batch(df, &in, 1, B, NULL, &b, &err), err);
  expect_lent(b, d, 0, N, B);
  rill_df_free(b);
  /* a SKIP in a map of the same rows drops row 5 from the lent cells: the caller's buffer
   * stays untouched and the batch holds rows 4, 6, 7 */
  zc_fail_row = 5;
  int both[2] = {0, sum};
  RT_OK(rill_df_batch(df, both, 2, B, NULL, &b, &err), err);
  rill_iter_t* it = open_iter(b, &(rill_iter_opts_t){.threads = 2, .prefetch = 4});
  rill_row_t row;
  int k = 0;
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    const rill_array_t *x = rill_row_get(&row, 0), *s = rill_row_get(&row, 1);
    int64_t want_rows[3][B] = {{0, 1, 2, 3}, {4, 6, 7, -1}, {8, 9, -1, -1}};
    cr_assert_eq(x->length, k == 0 ? 4 : k == 1 ? 3 : 2);
    cr_assert_eq(s->length, x->length);
    for (int64_t i = 0; i < x->length; i++) {
      int64_t r = want_rows[k][i];
      cr_assert_eq(memcmp((const uint8_t*)x->data + i * CELL, orig + r * CELL, CELL), 0, "batch %d cell %lld", k,
                   (long long)i);
      cr_assert_eq(((const int64_t*)s->data)[i], 16 * r + 6);
    }
    k++;
  }
  cr_assert_eq(k, 3);
  expect_stats(it, ANY, ANY, 1, ANY, ANY);
  rill_iter_free(it);
  rill_df_free(b);
  cr_assert_eq(memcmp(d, orig, sizeof orig), 0, "the caller's buffer was written");
  zc_fail_row = -1;
  /* rows out of order (shuffle) are gathered into the engine's own buffer */
  rill_df_t *sh, *sb;
  RT_OK(rill_df_shuffle(df, 3, &sh, &err), err);
  RT_OK(rill_df_batch(sh, &in, 1, N, NULL, &sb, &err), err);
  RT_OK(rill_iter_new(sb, NULL, &it, &err), err);
  RT_OK(rill_iter_next(it, &row, &err), err);
  const rill_array_t* x = rill_row_get(&row, 0);
  cr_assert_neq(x->data, d);
  int seen[N] = {0};
  for (int i = 0; i < N; i++) seen[((const uint8_t*)x->data)[i * CELL] / CELL]++;
  for (int i = 0; i < N; i++) cr_assert_eq(seen[i], 1);
  rill_iter_free(it);
  rill_df_free(sb);
  rill_df_free(sh);
  rill_df_free(df);
  rill_array_release(a);
}

/* A slice keeps consecutive rows consecutive: its batches of a memory column are still
 * slices of the caller's buffer; a take's rows are gathered. */
Test(core, memory_source_lends_the_rows_of_a_slice) {
  enum { N = 10, B = 4, CELL = 4 };
  rill_error_t err;
  rill_array_t* a = byte_cells(N);
  uint8_t* d = a->data;
  rill_df_t *df, *sl, *tk;
  RT_OK(rill_df_from_arrays((const char*[]){"img"}, (const rill_array_t*[]){a}, 1, 0, &df, &err), err);
  RT_OK(rill_df_slice(df, 3, 6, &sl, &err), err);
  rill_df_t* b = batch_of(sl, 0, B, NULL);
  expect_lent(b, d, 3, 6, B);
  rill_df_free(b);
  RT_OK(rill_df_take(df, (const int64_t[]){8, 1}, 2, &tk, &err), err);
  b = batch_of(tk, 0, 2, NULL);
  rill_iter_t* it = open_iter(b, NULL);
  rill_row_t row;
  RT_OK(rill_iter_next(it, &row, &err), err);
  const uint8_t* x = rill_row_get(&row, 0)->data;
  cr_assert(x[0] == 8 * CELL && x[CELL] == 1 * CELL, "got rows %d and %d", x[0] / CELL, x[CELL] / CELL);
  end_and_free(it, b, tk);
  rill_df_free(sl);
  rill_df_free(df);
  rill_array_release(a);
}

Test(core, memory_source_with_nulls_copies_and_keeps_them) {
  enum { N = 6 };
  rill_error_t err;
  int64_t v[N] = {10, 11, 12, 13, 14, 15};
  uint8_t valid = 0x3B; /* row 2 null */
  rill_array_t* a;
  RT_OK(rill_array_wrap(rill_type_scalar(RILL_INT64), N, v, sizeof v, &valid, 1, NULL, NULL, NULL, NULL, &a, &err), err);
  const char* names[1] = {"v"};
  const rill_array_t* arrays[1] = {a};
  rill_df_t *df, *b;
  RT_OK(rill_df_from_arrays(names, arrays, 1, 0, &df, &err), err);
  int c = 0;
  RT_OK(rill_df_batch(df, &c, 1, 3, NULL, &b, &err), err);
  rill_iter_t* it = open_iter(b, NULL);
  rill_row_t row;
  RT_OK(rill_iter_next(it, &row, &err), err);
  const rill_array_t* x = rill_row_get(&row, 0);
  cr_assert_neq(x->data, (void*)v);
  cr_assert_eq(x->null_count, 1);
  cr_assert(rill_array_is_valid(x, 0) && rill_array_is_valid(x, 1) && !rill_array_is_valid(x, 2));
  cr_assert_eq(((const int64_t*)x->data)[1], 11);
  RT_OK(rill_iter_next(it, &row, &err), err);
  x = rill_row_get(&row, 0);
  cr_assert_eq(x->null_count, 0);
  cr_assert_eq(((const int64_t*)x->data)[2], 15);
  end_and_free(it, df, b);
  rill_array_release(a);
}

static int sum_i64(const rill_array_t* group, rill_array_t* out, rill_exec_t* ex, void* ctx, rill_error_t* err) {
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), 1);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc");
  int64_t s = 0;
  for (int64_t i = 0; i < group->length; i++) s += ((const int64_t*)group->data)[i];
  ((int64_t*)out->data)[0] = s;
  return RILL_OK;
}

/* Batches larger than a task's grain, iterated on worker threads: the lent columns are still
 * slices of the caller's arrays (the stage is not split into copying tasks); a reduce over
 * consecutive rows and a shard (rows not consecutive) read the right cells. */
Test(core, memory_source_lends_large_batches_on_threads) {
  enum { N = 5000, B = 1024 };
  rill_error_t err;
  rill_array_t *a, *f;
  RT_OK(rill_array_new(rill_type_scalar(RILL_INT64), N, &a, &err), err);
  RT_OK(rill_array_new(rill_type_scalar(RILL_FLOAT32), N, &f, &err), err);
  for (int64_t i = 0; i < N; i++) {
    ((int64_t*)a->data)[i] = 7 * i;
    ((float*)f->data)[i] = (float)i / 2;
  }
  const char* names[2] = {"a", "f"};
  const rill_array_t* arrays[2] = {a, f};
  rill_df_t *df, *b;
  RT_OK(rill_df_from_arrays(names, arrays, 2, 0, &df, &err), err);
  int cols[2] = {0, 1};
  RT_OK(rill_df_batch(df, cols, 2, B, NULL, &b, &err), err);
  for (int threads = RILL_THREADS_NONE; threads <= 2; threads += 3) {
    rill_iter_t* it = open_iter(b, &(rill_iter_opts_t){.threads = threads, .prefetch = 3});
    rill_row_t row;
    int k = 0, rc;
    while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) {
      const rill_array_t *x = rill_row_get(&row, 0), *y = rill_row_get(&row, 1);
      int64_t len = k < N / B ? B : N % B;
      cr_assert_eq(x->length, len);
      cr_assert_eq(y->length, len);
      cr_assert_eq(x->data, (const int64_t*)a->data + (int64_t)k * B, "threads %d batch %d of 'a' was copied",
                   threads, k);
      cr_assert_eq(y->data, (const float*)f->data + (int64_t)k * B, "threads %d batch %d of 'f' was copied",
                   threads, k);
      cr_assert_eq(((const int64_t*)x->data)[len - 1], 7 * ((int64_t)k * B + len - 1));
      k++;
    }
    cr_assert_eq(rc, RILL_END, "%s", err.message);
    cr_assert_eq(k, (N + B - 1) / B);
    rill_iter_free(it);
  }
  rill_df_free(b);
  /* a reduce by 3 over consecutive rows: each group sums its own three cells */
  rill_df_t *red, *rb;
  RT_OK(rill_df_reduce(df, 0, 3, rill_type_scalar(RILL_INT64), sum_i64, NULL, NULL, &red, &err), err);
  int rcol = 0;
  RT_OK(rill_df_batch(red, &rcol, 1, 500, NULL, &rb, &err), err);
  rill_iter_t* it = open_iter(rb, &(rill_iter_opts_t){.threads = 2});
  rill_row_t row;
  int64_t groups = 0;
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    const rill_array_t* x = rill_row_get(&row, 0);
    for (int64_t i = 0; i < x->length; i++, groups++) {
      int64_t s = 0;
      for (int64_t r = 3 * groups; r < 3 * groups + 3 && r < N; r++) s += 7 * r;
      cr_assert_eq(((const int64_t*)x->data)[i], s, "group %lld", (long long)groups);
    }
  }
  cr_assert_eq(groups, (N + 2) / 3);
  rill_iter_free(it);
  rill_df_free(rb);
  rill_df_free(red);
  /* a shard takes every other row: the cells are gathered, not lent */
  rill_df_t *sh, *sb;
  RT_OK(rill_df_shard(df, 1, 2, &sh, &err), err);
  RT_OK(rill_df_batch(sh, cols, 1, B, NULL, &sb, &err), err);
  it = open_iter(sb, &(rill_iter_opts_t){.threads = 2});
  int64_t seen = 0;
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    const rill_array_t* x = rill_row_get(&row, 0);
    cr_assert(x->data < a->data || x->data >= (void*)((int64_t*)a->data + N), "a shard batch points into the source");
    for (int64_t i = 0; i < x->length; i++, seen++) cr_assert_eq(((const int64_t*)x->data)[i], 7 * (2 * seen + 1));
  }
  cr_assert_eq(seen, N / 2);
  rill_iter_free(it);
  rill_df_free(sb);
  rill_df_free(sh);
  rill_df_free(df);
  rill_array_release(a);
  rill_array_release(f);
}
