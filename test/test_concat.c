/* rill_df_concat: the rows of several dataframes of sources, one after another. */
#include <time.h>

#include "engine_common.h"

/* An int64 column "v" of values vals[0..n) and a STRING column "s" ("<prefix><value>"); the
 * cells at null_at (-1: none) are null in both. Columns in the order v, s (or s, v). */
static rill_df_t* table(const int64_t* vals, int n, const char* prefix, int null_at, int s_first) {
  rill_error_t err;
  rill_array_t *v, *s;
  RT_OK(rill_array_new(rill_type_scalar(RILL_INT64), n, &v, &err), err);
  RT_OK(rill_array_new(rill_type_scalar(RILL_STRING), n, &s, &err), err);
  for (int i = 0; i < n; i++) {
    char t[32];
    int len = snprintf(t, sizeof t, "%s%lld", prefix, (long long)vals[i]);
    ((int64_t*)v->data)[i] = vals[i];
    RT_OK(rill_array_set_var(s, i, t, i == null_at ? 0 : len, NULL), err);
    if (i == null_at) {
      RT_OK(rill_array_set_null(v, i), err);
      RT_OK(rill_array_set_null(s, i), err);
    }
  }
  const char* names[2] = {"v", "s"};
  const rill_array_t* arrays[2] = {v, s};
  if (s_first) {
    names[0] = "s", names[1] = "v";
    arrays[0] = s, arrays[1] = v;
  }
  rill_df_t* df;
  RT_OK(rill_df_from_arrays(names, arrays, 2, 1, &df, &err), err);
  rill_array_release(v);
  rill_array_release(s);
  return df;
}

/* Checks cell i of the int64 array a and STRING array s against `want` (INT64_MIN: null). */
static void expect_cell(const rill_array_t* a, const rill_array_t* s, int64_t i, int64_t want, const char* prefix) {
  if (want == INT64_MIN) {
    cr_assert(!rill_array_is_valid(a, i) && !rill_array_is_valid(s, i), "cell %lld should be null", (long long)i);
    return;
  }
  cr_assert(rill_array_is_valid(a, i) && rill_array_is_valid(s, i), "cell %lld is null", (long long)i);
  cr_assert_eq(((const int64_t*)a->data)[i], want, "cell %lld: %lld, expected %lld", (long long)i,
               (long long)((const int64_t*)a->data)[i], (long long)want);
  char t[32];
  int len = snprintf(t, sizeof t, "%s%lld", prefix, (long long)want);
  int64_t nb;
  const void* p = rill_array_cell(s, i, &nb);
  cr_assert(nb == len && memcmp(p, t, (size_t)len) == 0, "cell %lld: '%.*s', expected '%s'", (long long)i, (int)nb,
            (const char*)p, t);
}

Test(concat, rows_of_the_parts_in_order_with_nulls_and_strings) {
  rill_error_t err;
  const int64_t a[3] = {10, 11, 12}, b[4] = {20, 21, 22, 23};
  rill_df_t* parts[3] = {table(a, 3, "x", 1, 0), table(NULL, 0, "x", -1, 0), table(b, 4, "x", 3, 1)};
  rill_df_t* cat;
  RT_OK(rill_df_concat(parts, 3, &cat, &err), err);
  const int64_t want[7] = {10, INT64_MIN, 12, 20, 21, 22, INT64_MIN};
  cr_assert_eq(rill_df_rows(cat), 7);
  cr_assert_eq(rill_df_ncolumns(cat), 2);
  cr_assert_str_eq(rill_df_field(cat, 0)->name, "v"); /* part 0's order */
  cr_assert_str_eq(rill_df_field(cat, 1)->name, "s");
  cr_assert(rill_df_field(cat, 0)->nullable && rill_df_field(cat, 1)->nullable);
  /* batches of 1 to 8 rows: calls within a part and across the parts' boundaries, on the
   * caller and on workers */
  for (int64_t bs = 1; bs <= 8; bs++)
    for (int threads = RILL_THREADS_NONE; threads <= 2; threads += 3) {
      rill_df_t* bt;
      int cols[2] = {0, 1};
      RT_OK(rill_df_batch(cat, cols, 2, bs, NULL, &bt, &err), err);
      rill_iter_opts_t o = {.threads = threads, .prefetch = threads > 0 ? 2 : 0};
      rill_iter_t* it = open_iter(bt, &o);
      rill_row_t row;
      int64_t seen = 0;
      while (seen < 7) {
        RT_OK(rill_iter_next(it, &row, &err), err);
        const rill_array_t *x = rill_row_get(&row, 0), *s = rill_row_get(&row, 1);
        for (int64_t i = 0; i < x->length; i++) expect_cell(x, s, i, want[seen + i], "x");
        seen += x->length;
      }
      cr_assert_eq(seen, 7);
      end_and_free(it, bt, NULL);
    }
  /* shuffled: each epoch a permutation of the rows, the cells with them */
  counter_t cs;
  counter_init(&cs, 0);
  rill_df_t *sh, *ids = make_src(7, &cs, NULL), *ids_sh; /* the same permutations over row ids */
  RT_OK(rill_df_shuffle(cat, 5, &sh, &err), err);
  RT_OK(rill_df_shuffle(ids, 5, &ids_sh, &err), err);
  for (int epoch = 0; epoch < 3; epoch++) {
    int64_t perm[7];
    rill_iter_opts_t po = {.epoch = epoch};
    cr_assert_eq(collect(ids_sh, 0, &po, perm, 7), 7);
    int cols[2] = {0, 1};
    rill_df_t* bt;
    RT_OK(rill_df_batch(sh, cols, 2, 7, NULL, &bt, &err), err);
    rill_iter_opts_t o = {.epoch = epoch};
    rill_iter_t* it = open_iter(bt, &o);
    rill_row_t row;
    RT_OK(rill_iter_next(it, &row, &err), err);
    const rill_array_t *x = rill_row_get(&row, 0), *s = rill_row_get(&row, 1);
    cr_assert_eq(x->length, 7);
    int hit[7] = {0};
    for (int64_t i = 0; i < 7; i++) {
      int64_t r = perm[i];
      expect_cell(x, s, i, want[r], "x");
      hit[r]++;
    }
    for (int r = 0; r < 7; r++) cr_assert_eq(hit[r], 1);
    end_and_free(it, bt, NULL);
  }
  rill_df_free(sh);
  rill_df_free(ids_sh);
  rill_df_free(ids);
  /* the parts are frozen: a column added to one would not be in the result */
  RT_FAILS(rill_df_add_source(parts[0], "w", rill_type_scalar(RILL_INT64), src_i64, NULL, NULL, NULL, &err),
           RILL_EINVAL, "already has derived dataframes", err);
  for (int p = 0; p < 3; p++) rill_df_free(parts[p]); /* the result keeps them alive */
  rill_df_t* m;
  RT_OK(rill_df_slice(cat, 2, 3, &m, &err), err);
  int64_t v[8];
  cr_assert_eq(collect(m, 0, NULL, v, 8), 3);
  cr_assert(v[0] == 12 && v[1] == 20 && v[2] == 21);
  rill_df_free(m);
  rill_df_free(cat);
}

/* Source: cell = (the result's row id, from rill_exec_rows) * 1000 + the row id it is given. */
static int src_both_ids(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* ex, void* ctx,
                        rill_error_t* err) {
  counter_t* c = ctx;
  int r = counter_alloc(c, ex, out, n, err);
  if (r != RILL_OK) return r;
  const int64_t* ids = rill_exec_rows(ex);
  for (int64_t i = 0; i < n; i++) ((int64_t*)out->data)[i] = ids[i] * 1000 + rows[i];
  nanosleep(&(struct timespec){0, 50000}, NULL); /* long enough for calls to overlap */
  atomic_fetch_sub(&c->inflight, 1);
  return RILL_OK;
}

Test(concat, sources_get_their_own_rows_and_serial_ones_run_alone) {
  rill_error_t err;
  for (int serial = 0; serial < 2; serial++) {
    /* serial: one row a call on 2 threads, and the parts' CPU_SERIAL sources never overlap;
     * else: calls over rows of both parts on the caller */
    counter_t c0, c1;
    counter_init(&c0, 0);
    counter_init(&c1, 0);
    rill_stage_opts_t so = {.where = serial ? RILL_STAGE_CPU_SERIAL : RILL_STAGE_CPU, .grain = serial};
    rill_df_t* p[2];
    RT_OK(rill_df_new(40, &p[0], &err), err);
    RT_OK(rill_df_new(24, &p[1], &err), err);
    cr_assert_eq(rill_df_add_source(p[0], "id", rill_type_scalar(RILL_INT64), src_both_ids, &c0, NULL, &so, &err), 0);
    cr_assert_eq(rill_df_add_source(p[1], "id", rill_type_scalar(RILL_INT64), src_both_ids, &c1, NULL, &so, &err), 0);
    rill_df_t *cat, *sh;
    RT_OK(rill_df_concat(p, 2, &cat, &err), err);
    RT_OK(rill_df_shuffle(cat, 9, &sh, &err), err);
    int64_t v[64];
    int hit[64] = {0};
    rill_iter_opts_t o = {.threads = serial ? 2 : RILL_THREADS_NONE, .prefetch = serial ? 4 : 0};
    cr_assert_eq(collect(sh, 0, &o, v, 64), 64);
    for (int i = 0; i < 64; i++) {
      int64_t row = v[i] / 1000, local = v[i] % 1000;
      cr_assert(row >= 0 && row < 64, "cell %d: %lld", i, (long long)v[i]);
      cr_assert_eq(local, row < 40 ? row : row - 40, "row %lld was read as row %lld of its part", (long long)row,
                   (long long)local);
      hit[row]++;
    }
    for (int i = 0; i < 64; i++) cr_assert_eq(hit[i], 1);
    cr_assert_eq(atomic_load(&c0.cells), 40);
    cr_assert_eq(atomic_load(&c1.cells), 24);
    if (serial) {
      cr_assert_eq(atomic_load(&c0.max_inflight), 1, "a serial source ran %lld calls at once",
                   (long long)atomic_load(&c0.max_inflight));
      cr_assert_eq(atomic_load(&c1.max_inflight), 1);
    } else {
      cr_assert_lt(atomic_load(&c0.calls), 40, "every call was within one part");
    }
    rill_df_free(sh);
    rill_df_free(cat);
    rill_df_free(p[0]);
    rill_df_free(p[1]);
  }
}

/* Two parts of 3 and 4 rows whose second fails at its row 1 (row 4 of the result) under
 * `policy`; *cat gets the result. */
static void failing_parts(rill_on_error_t pol, counter_t* c0, counter_t* c1, rill_df_t** cat) {
  rill_error_t err;
  rill_stage_opts_t o = policy(pol);
  counter_init(c0, 0);
  counter_failing(c1, 100, 1);
  rill_df_t* p[2] = {make_src(3, c0, &o), make_src(4, c1, &o)};
  RT_OK(rill_df_concat(p, 2, cat, &err), err);
  rill_df_free(p[0]);
  rill_df_free(p[1]);
}

Test(concat, a_failing_cell_is_its_row_of_the_result) {
  rill_error_t err;
  counter_t c0, c1;
  rill_df_t* cat;
  /* RAISE: the row's error, with the part's message; the other rows are read */
  failing_parts(RILL_ON_ERROR_RAISE, &c0, &c1, &cat);
  rill_iter_t* it = open_iter(cat, NULL);
  rill_row_t row;
  for (int64_t r = 0; r < 7; r++) {
    int rc = rill_iter_next(it, &row, &err);
    if (r == 4) {
      cr_assert_eq(rc, RILL_EFORMAT, "row 4: %d", rc);
      cr_assert_eq(err.row, 4);
      cr_assert(strstr(err.message, "bad value in row 1"), "%s", err.message);
      continue;
    }
    RT_OK(rc, err);
    cr_assert_eq(((const int64_t*)rill_row_get(&row, 0)->data)[0], r < 3 ? r : 100 + r - 3);
  }
  end_and_free(it, cat, NULL);
  /* the same through calls over both parts (a shuffle read in one chunk) */
  failing_parts(RILL_ON_ERROR_RAISE, &c0, &c1, &cat);
  rill_df_t* sh;
  RT_OK(rill_df_shuffle(cat, 3, &sh, &err), err);
  int64_t v[8], seen = 0;
  cr_assert_eq(collect(sh, 0, NULL, v, 8), 7);
  for (int i = 0; i < 7; i++) seen += v[i] == INT64_MIN ? 1000 : v[i];
  cr_assert_eq(seen, 0 + 1 + 2 + 100 + 102 + 103 + 1000, "cells %lld", (long long)seen);
  rill_df_free(sh);
  rill_df_free(cat);
  /* SKIP and NULL: the row is dropped, or its cell null, in calls within and across parts */
  for (int pol = RILL_ON_ERROR_SKIP; pol <= RILL_ON_ERROR_NULL; pol++)
    for (int shuffled = 0; shuffled < 2; shuffled++) {
      failing_parts((rill_on_error_t)pol, &c0, &c1, &cat);
      rill_df_t* d = cat;
      if (shuffled) RT_OK(rill_df_shuffle(cat, 3, &d, &err), err);
      rill_df_t* bt = batch_of(d, 0, 7, NULL);
      it = open_iter(bt, NULL);
      RT_OK(rill_iter_next(it, &row, &err), err);
      const rill_array_t* a = rill_row_get(&row, 0);
      int64_t sum = 0, nulls = 0;
      for (int64_t i = 0; i < a->length; i++) {
        if (!rill_array_is_valid(a, i)) nulls++;
        else sum += ((const int64_t*)a->data)[i];
      }
      cr_assert_eq(a->length, pol == RILL_ON_ERROR_SKIP ? 6 : 7, "policy %d shuffled %d: %lld cells", pol, shuffled,
                   (long long)a->length);
      cr_assert_eq(nulls, pol == RILL_ON_ERROR_NULL ? 1 : 0);
      cr_assert_eq(sum, 0 + 1 + 2 + 100 + 102 + 103);
      expect_stats(it, ANY, ANY, pol == RILL_ON_ERROR_SKIP, pol == RILL_ON_ERROR_NULL, 0);
      end_and_free(it, bt, NULL);
      if (shuffled) rill_df_free(d);
      rill_df_free(cat);
    }
}

static int map_one(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* ex, void* ctx,
                   rill_error_t* err) {
  return out_row_ids(rill_exec_rows(ex), in[0]->length, out, ex, err);
}

Test(concat, misuse_is_refused_with_the_part_and_column) {
  rill_error_t err;
  counter_t c0, c1;
  counter_init(&c0, 0);
  counter_init(&c1, 0);
  rill_df_t *a = make_src(3, &c0, NULL), *b = make_src(4, &c1, NULL), *out = (rill_df_t*)&err, *x;
  rill_df_t* two[2] = {a, b};
  RT_FAILS(rill_df_concat(two, 2, NULL, &err), RILL_EINVAL, "rill_df_concat: out is NULL", err);
  RT_FAILS(rill_df_concat(two, 0, &out, &err), RILL_EINVAL, "rill_df_concat: 0 parts (at least 1)", err);
  cr_assert_null(out);
  RT_FAILS(rill_df_concat(NULL, 2, &out, &err), RILL_EINVAL, "rill_df_concat: 2 parts (at least 1)", err);
  RT_FAILS(rill_df_concat((rill_df_t* const[]){a, NULL}, 2, &out, &err), RILL_EINVAL, "part 1 is NULL", err);
  /* a view, a batch */
  RT_OK(rill_df_shuffle(b, 1, &x, &err), err);
  RT_FAILS(rill_df_concat((rill_df_t* const[]){a, x}, 2, &out, &err), RILL_EINVAL,
           "rill_df_concat: part 1 is a derived dataframe (a view, batch or reduce): concatenate the dataframes read "
           "from their sources, then derive from the result",
           err);
  rill_df_free(x);
  x = batch_of(a, 0, 2, NULL);
  RT_FAILS(rill_df_concat(&x, 1, &out, &err), RILL_EINVAL, "part 0 is a derived dataframe", err);
  rill_df_free(x);
  /* a map */
  RT_OK(rill_df_new(2, &x, &err), err);
  cr_assert_eq(rill_df_add_source(x, "src", rill_type_scalar(RILL_INT64), src_i64, &c1, NULL, NULL, &err), 0);
  int in = 0;
  cr_assert_eq(rill_df_map(x, "twice", rill_type_scalar(RILL_INT64), &in, 1, map_one, NULL, NULL, NULL, &err), 1);
  RT_FAILS(rill_df_concat((rill_df_t* const[]){x}, 1, &out, &err), RILL_EINVAL,
           "rill_df_concat: column 'twice' of part 0 is a map, not a source: concatenate the sources, then map the "
           "result",
           err);
  rill_df_free(x);
  /* columns that differ: count, name, type */
  RT_OK(rill_df_new(2, &x, &err), err);
  RT_FAILS(rill_df_concat((rill_df_t* const[]){a, x}, 2, &out, &err), RILL_EINVAL,
           "rill_df_concat: part 1 has 0 columns and part 0 has 1", err);
  cr_assert_eq(rill_df_add_source(x, "other", rill_type_scalar(RILL_INT64), src_i64, &c1, NULL, NULL, &err), 0);
  RT_FAILS(rill_df_concat((rill_df_t* const[]){a, x}, 2, &out, &err), RILL_EINVAL,
           "rill_df_concat: part 1 has no column 'src' (part 0 has)", err);
  rill_df_free(x);
  RT_OK(rill_df_new(2, &x, &err), err);
  cr_assert_eq(rill_df_add_source(x, "src", rill_type_scalar(RILL_FLOAT64), src_i64, &c1, NULL, NULL, &err), 0);
  RT_FAILS(rill_df_concat((rill_df_t* const[]){a, x}, 2, &out, &err), RILL_EINVAL,
           "rill_df_concat: column 'src' is int64 in part 0 and float64 in part 1", err);
  rill_df_free(x);
  /* error handling that differs; a CUDA source */
  rill_stage_opts_t skip = policy(RILL_ON_ERROR_SKIP);
  x = make_src(2, &c1, &skip);
  RT_FAILS(rill_df_concat((rill_df_t* const[]){a, x}, 2, &out, &err), RILL_EINVAL,
           "rill_df_concat: column 'src' of part 1 handles errors by 'skip' and column 'src' of part 0 by 'raise': "
           "the parts' sources must handle errors alike",
           err);
  rill_df_free(x);
  rill_stage_opts_t cuda = {.where = RILL_STAGE_CUDA};
  x = make_src(2, &c1, &cuda);
  RT_FAILS(rill_df_concat((rill_df_t* const[]){a, x}, 2, &out, &err), RILL_ENOTSUP,
           "rill_df_concat: column 'src' of part 1 is computed on a CUDA device", err);
  rill_df_free(x);
  /* more rows than an int64 counts; no columns */
  rill_df_t *big0, *big1;
  RT_OK(rill_df_new(INT64_MAX - 2, &big0, &err), err);
  RT_FAILS(rill_df_concat(&big0, 1, &out, &err), RILL_EINVAL, "rill_df_concat: part 0 has no columns", err);
  cr_assert_eq(rill_df_add_source(big0, "src", rill_type_scalar(RILL_INT64), src_i64, &c1, NULL, NULL, &err), 0);
  big1 = make_src(3, &c1, NULL);
  RT_FAILS(rill_df_concat((rill_df_t* const[]){big0, big1}, 2, &out, &err), RILL_ERANGE,
           "rill_df_concat: the parts hold more than 2^63 rows together", err);
  rill_df_free(big1);
  big1 = make_src(2, &c1, NULL); /* exactly INT64_MAX: fine */
  RT_OK(rill_df_concat((rill_df_t* const[]){big0, big1}, 2, &out, &err), err);
  cr_assert_eq(rill_df_rows(out), INT64_MAX);
  rill_df_t* got[3] = {NULL, NULL, NULL};
  cr_assert_eq(rill_df_concat_parts(out, got, 3), 2);
  cr_assert(got[0] == big0 && got[1] == big1 && !got[2]);
  rill_df_free(out); /* the parts returned are references of their own */
  cr_assert_eq(rill_df_rows(got[0]), INT64_MAX - 2);
  rill_df_free(got[0]);
  rill_df_free(got[1]);
  cr_assert_eq(rill_df_concat_parts(a, got, 3), 0);
  cr_assert_eq(rill_df_concat_parts(NULL, NULL, 0), 0);
  rill_df_free(big0);
  rill_df_free(big1);
  /* the failed calls left the parts unfrozen: columns can still be added */
  cr_assert_eq(rill_df_add_source(b, "more", rill_type_scalar(RILL_INT64), src_i64, &c1, NULL, NULL, &err), 1,
               "%s", err.message);
  rill_df_free(a);
  rill_df_free(b);
}

Test(concat, saved_states_name_the_parts_row_counts) {
  rill_error_t err;
  counter_t c;
  counter_init(&c, 0);
  rill_df_t *p3 = make_src(3, &c, NULL), *p4 = make_src(4, &c, NULL), *ab, *ba, *ab2;
  RT_OK(rill_df_concat((rill_df_t* const[]){p3, p4}, 2, &ab, &err), err);
  RT_OK(rill_df_concat((rill_df_t* const[]){p4, p3}, 2, &ba, &err), err);
  RT_OK(rill_df_concat((rill_df_t* const[]){p3, p4}, 2, &ab2, &err), err);
  rill_iter_t* it = open_iter(ab, NULL);
  rill_row_t row;
  RT_OK(rill_iter_next(it, &row, &err), err);
  rill_iter_state_t st;
  RT_OK(rill_iter_save(it, &st), err);
  rill_iter_free(it);
  it = open_iter(ba, NULL); /* the same rows in all, the same columns: other parts */
  cr_assert_eq(rill_iter_restore(it, &st), RILL_EINVAL);
  rill_iter_free(it);
  it = open_iter(ab2, NULL);
  RT_OK(rill_iter_restore(it, &st), err);
  RT_OK(rill_iter_next(it, &row, &err), err);
  cr_assert_eq(row.index, 1);
  rill_iter_free(it);
  /* a concatenation of concatenations */
  rill_df_t* all;
  RT_OK(rill_df_concat((rill_df_t* const[]){ab, ba, p3}, 3, &all, &err), err);
  int64_t v[20];
  cr_assert_eq(collect(all, 0, NULL, v, 20), 17);
  const int64_t want[17] = {0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 0, 1, 2};
  for (int i = 0; i < 17; i++) cr_assert_eq(v[i], want[i], "row %d: %lld", i, (long long)v[i]);
  rill_df_t* sh;
  RT_OK(rill_df_shuffle(all, 2, &sh, &err), err);
  cr_assert_eq(collect(sh, 0, NULL, v, 20), 17);
  int64_t sum = 0;
  for (int i = 0; i < 17; i++) sum += v[i];
  cr_assert_eq(sum, 3 * 3 + 6 * 2);
  rill_df_free(sh);
  rill_df_free(all);
  rill_df_free(ab);
  rill_df_free(ba);
  rill_df_free(ab2);
  rill_df_free(p3);
  rill_df_free(p4);
}

/* Source: a uint8 cell of shape [row % 5] (none for row 3: a null cell) holding the row id. */
static int src_ragged(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* ex, void* ctx,
                      rill_error_t* err) {
  int64_t shape[1] = {-1};
  int r = rill_exec_alloc(ex, out, rill_type_tensor(RILL_UINT8, 1, shape), n);
  for (int64_t i = 0; r == RILL_OK && i < n; i++) {
    uint8_t b[8];
    int64_t len = rows[i] == 3 ? 0 : rows[i] % 5;
    memset(b, (int)rows[i], sizeof b);
    r = rill_array_set_var(out, i, b, len, &len);
    if (r == RILL_OK && rows[i] == 3) r = rill_array_set_null(out, i);
  }
  return r == RILL_OK ? RILL_OK : rill_error_set(err, r, "cannot set a cell");
}

Test(concat, cells_of_their_own_shapes_keep_them) {
  rill_error_t err;
  int64_t shape[1] = {-1};
  rill_stage_opts_t nullable = {.nullable = 1};
  rill_df_t* p[2];
  for (int k = 0; k < 2; k++) {
    RT_OK(rill_df_new(6 + k, &p[k], &err), err);
    cr_assert_eq(rill_df_add_source(p[k], "r", rill_type_tensor(RILL_UINT8, 1, shape), src_ragged, NULL, NULL,
                                    &nullable, &err),
                 0);
  }
  rill_df_t *cat, *sh, *ids, *ids_sh;
  RT_OK(rill_df_concat(p, 2, &cat, &err), err);
  RT_OK(rill_df_shuffle(cat, 11, &sh, &err), err);
  counter_t cs;
  counter_init(&cs, 0);
  ids = make_src(13, &cs, NULL);
  RT_OK(rill_df_shuffle(ids, 11, &ids_sh, &err), err);
  int64_t perm[13];
  cr_assert_eq(collect(ids_sh, 0, NULL, perm, 13), 13);
  rill_df_t* bt = batch_of(sh, 0, 13, NULL);
  rill_iter_t* it = open_iter(bt, NULL);
  rill_row_t row;
  RT_OK(rill_iter_next(it, &row, &err), err);
  const rill_array_t* a = rill_row_get(&row, 0);
  cr_assert_eq(a->length, 13);
  for (int64_t i = 0; i < 13; i++) {
    int64_t local = perm[i] < 6 ? perm[i] : perm[i] - 6, s[1] = {-7}, nb;
    const uint8_t* c = rill_array_cell(a, i, &nb);
    cr_assert_eq(rill_array_cell_shape(a, i, s), 1);
    if (local == 3) {
      cr_assert(!rill_array_is_valid(a, i), "cell %lld (row %lld) should be null", (long long)i, (long long)perm[i]);
      continue;
    }
    cr_assert(rill_array_is_valid(a, i));
    cr_assert_eq(s[0], local % 5, "cell %lld: shape [%lld], expected [%lld]", (long long)i, (long long)s[0],
                 (long long)(local % 5));
    cr_assert_eq(nb, local % 5);
    for (int64_t j = 0; j < nb; j++) cr_assert_eq(c[j], (uint8_t)local);
  }
  end_and_free(it, bt, NULL);
  rill_df_free(ids_sh);
  rill_df_free(ids);
  rill_df_free(sh);
  rill_df_free(cat);
  rill_df_free(p[0]);
  rill_df_free(p[1]);
}

/* n cells of uint8 [2] holding 2*(base+i), 2*(base+i)+1. */
static rill_array_t* pairs(int n, int base) {
  rill_error_t err;
  rill_array_t* a;
  RT_OK(rill_array_new(rill_type_tensor(RILL_UINT8, 1, (int64_t[]){2}), n, &a, &err), err);
  for (int i = 0; i < 2 * n; i++) ((uint8_t*)a->data)[i] = (uint8_t)(2 * base + i);
  return a;
}

/* Many parts of uneven sizes, some without rows (first, last and between): every row of a
 * shuffled read, in calls over several parts, comes from the part that holds it. */
Test(concat, rows_of_many_uneven_parts_found_in_any_order) {
  enum { NP = 41 };
  rill_df_t* parts[NP];
  int64_t total = 0;
  for (int p = 0; p < NP; p++) {
    int n = p == 0 || p == NP - 1 ? 0 : (p * 7 + 3) % 6 + (p % 10 == 4 ? 40 : 0);
    int64_t vals[64];
    for (int i = 0; i < n; i++) vals[i] = total + i;
    parts[p] = table(vals, n, "r", -1, 0);
    total += n;
  }
  rill_error_t err;
  rill_df_t *cat, *shuffled, *b;
  RT_OK(rill_df_concat(parts, NP, &cat, &err), err);
  cr_assert_eq(rill_df_rows(cat), total);
  RT_OK(rill_df_shuffle(cat, 11, &shuffled, &err), err);
  int cols[2] = {0, 1};
  RT_OK(rill_df_batch(shuffled, cols, 2, 7, NULL, &b, &err), err);
  uint8_t seen[512] = {0};
  cr_assert_leq(total, (int64_t)sizeof seen);
  for (int threads = 0; threads < 2; threads++) {
    memset(seen, 0, sizeof seen);
    rill_iter_t* it;
    RT_OK(rill_iter_new(b, &(rill_iter_opts_t){.threads = threads ? 2 : RILL_THREADS_NONE}, &it, &err), err);
    rill_row_t row;
    int r;
    int64_t n = 0;
    while ((r = rill_iter_next(it, &row, &err)) == RILL_OK) {
      const rill_array_t *v = rill_row_get(&row, 0), *str = rill_row_get(&row, 1);
      for (int64_t i = 0; i < v->length; i++, n++) {
        int64_t x = ((const int64_t*)v->data)[i];
        cr_assert(x >= 0 && x < total && !seen[x], "row %lld seen twice or out of range", (long long)x);
        seen[x] = 1;
        expect_cell(v, str, i, x, "r");
      }
    }
    cr_assert_eq(r, RILL_END, "%s", err.message);
    cr_assert_eq(n, total);
    rill_iter_free(it);
  }
  rill_df_free(b);
  rill_df_free(shuffled);
  rill_df_free(cat);
  for (int p = 0; p < NP; p++) rill_df_free(parts[p]);
}

Test(concat, memory_parts_lend_rows_that_lie_in_one_of_them) {
  rill_error_t err;
  rill_array_t *a = pairs(6, 0), *b = pairs(4, 6);
  const char* names[1] = {"p"};
  rill_df_t* p[2];
  RT_OK(rill_df_from_arrays(names, (const rill_array_t* const[]){a}, 1, 0, &p[0], &err), err);
  RT_OK(rill_df_from_arrays(names, (const rill_array_t* const[]){b}, 1, 0, &p[1], &err), err);
  rill_df_t* cat;
  RT_OK(rill_df_concat(p, 2, &cat, &err), err);
  for (int threads = RILL_THREADS_NONE; threads <= 2; threads += 3) {
    rill_df_t* bt = batch_of(cat, 0, 4, NULL);
    rill_iter_t* it = open_iter(bt, &(rill_iter_opts_t){.threads = threads});
    rill_row_t row;
    /* rows 0-3: part 0's memory; rows 4-7 span both parts: copied; rows 8-9: part 1's */
    const uint8_t* want[3] = {a->data, NULL, (const uint8_t*)b->data + 2 * 2};
    for (int k = 0; k < 3; k++) {
      RT_OK(rill_iter_next(it, &row, &err), err);
      const rill_array_t* x = rill_row_get(&row, 0);
      cr_assert_eq(x->length, k < 2 ? 4 : 2);
      if (want[k]) cr_assert_eq(x->data, (const void*)want[k], "threads %d batch %d was copied", threads, k);
      else cr_assert(x->data != a->data && x->data != b->data);
      for (int64_t i = 0; i < 2 * x->length; i++)
        cr_assert_eq(((const uint8_t*)x->data)[i], (uint8_t)(8 * k + i), "batch %d byte %lld", k, (long long)i);
    }
    end_and_free(it, bt, NULL);
  }
  rill_df_free(cat);
  rill_df_free(p[0]);
  rill_df_free(p[1]);
  rill_array_release(a);
  rill_array_release(b);
}

/* rill_df_concat_columns: the columns of several dataframes with the same rows, side by side. */
Test(concat, columns_side_by_side) {
  rill_error_t err;
  const int64_t a[5] = {10, 11, 12, 13, 14};
  rill_df_t* mem = table(a, 5, "x", 2, 0); /* v, s: memory, row 2 null */
  const char* text = "id,w\n1,a\n2,\n3,c\n4,d\n5,e\n";
  rill_df_t* csv;
  RT_OK(rill_df_from_csv_buffer(text, strlen(text), NULL, &csv, &err), err); /* one source group */
  counter_t cs;
  counter_init(&cs, 0);
  rill_df_t* ser;
  RT_OK(rill_df_new(5, &ser, &err), err);
  cr_assert_eq(rill_df_add_source(ser, "k", rill_type_scalar(RILL_INT64), src_both_ids, &cs, NULL,
                                  &(rill_stage_opts_t){.where = RILL_STAGE_CPU_SERIAL, .grain = 1}, &err),
               0);
  rill_df_t* side;
  RT_OK(rill_df_concat_columns((rill_df_t* const[]){mem, csv, ser}, 3, &side, &err), err);
  rill_df_free(mem); /* the result keeps its parts */
  rill_df_free(csv);
  rill_df_free(ser);
  cr_assert_eq(rill_df_rows(side), 5);
  cr_assert_eq(rill_df_ncolumns(side), 5);
  const char* names[5] = {"v", "s", "id", "w", "k"};
  for (int c = 0; c < 5; c++) cr_assert_str_eq(rill_df_field(side, c)->name, names[c]);
  cr_assert(rill_df_field(side, 0)->nullable && rill_df_field(side, 3)->type.dtype == RILL_STRING);
  for (int threads = RILL_THREADS_NONE; threads <= 2; threads += 3) {
    rill_df_t* bt;
    RT_OK(rill_df_batch(side, (int[]){0, 1, 2, 3, 4}, 5, 2, NULL, &bt, &err), err);
    rill_iter_t* it = open_iter(bt, &(rill_iter_opts_t){.threads = threads, .prefetch = threads > 0 ? 2 : 0});
    rill_row_t row;
    for (int64_t r0 = 0; r0 < 5; r0 += 2) {
      RT_OK(rill_iter_next(it, &row, &err), err);
      const rill_array_t *v = rill_row_get(&row, 0), *s = rill_row_get(&row, 1), *id = rill_row_get(&row, 2),
                         *w = rill_row_get(&row, 3), *k = rill_row_get(&row, 4);
      cr_assert_eq(v->length, r0 < 4 ? 2 : 1);
      for (int64_t i = 0; i < v->length; i++) {
        int64_t r = r0 + i, nb;
        expect_cell(v, s, i, r == 2 ? INT64_MIN : a[r], "x");
        cr_assert_eq(((const int64_t*)id->data)[i], r + 1);
        const char* t = rill_array_cell(w, i, &nb);
        cr_assert(rill_array_is_valid(w, i) && nb == (r == 1 ? 0 : 1) && (r == 1 || t[0] == "a?cde"[r]),
                  "row %lld: w is '%.*s'", (long long)r, (int)nb, t);
        cr_assert_eq(((const int64_t*)k->data)[i], r * 1000 + r, "the serial source is given the result's rows");
      }
    }
    end_and_free(it, bt, NULL);
  }
  cr_assert_eq(atomic_load(&cs.max_inflight), 1, "the serial source ran %lld calls at once",
               (long long)atomic_load(&cs.max_inflight));
  rill_df_free(side);
  /* a column of caller memory still lends its rows: an in-order batch is the caller's buffer */
  rill_array_t* pa = pairs(5, 0);
  rill_df_t *borrowed, *csv2;
  RT_OK(rill_df_from_arrays((const char*[]){"p"}, (const rill_array_t* const[]){pa}, 1, 0, &borrowed, &err), err);
  RT_OK(rill_df_from_csv_buffer(text, strlen(text), NULL, &csv2, &err), err);
  RT_OK(rill_df_concat_columns((rill_df_t* const[]){csv2, borrowed}, 2, &side, &err), err);
  rill_df_t* bt = batch_of(side, 2, 5, NULL);
  rill_iter_t* it = open_iter(bt, NULL);
  rill_row_t row;
  RT_OK(rill_iter_next(it, &row, &err), err);
  cr_assert_eq(rill_row_get(&row, 0)->data, pa->data, "the batch was copied");
  end_and_free(it, bt, NULL);
  rill_df_free(side);
  rill_df_free(borrowed);
  rill_df_free(csv2);
  rill_array_release(pa);
}

/* Each column keeps its source's on_error: a row one part skips is left out of every column. */
Test(concat, side_by_side_columns_keep_their_error_policies) {
  rill_error_t err;
  counter_t c0, c1;
  counter_failing(&c0, 100, 1);
  counter_init(&c1, 0);
  rill_stage_opts_t skip = policy(RILL_ON_ERROR_SKIP), raise = policy(RILL_ON_ERROR_RAISE);
  rill_df_t* p0 = make_src(4, &c0, &skip);
  rill_df_t* p1;
  RT_OK(rill_df_new(4, &p1, &err), err);
  cr_assert_eq(rill_df_add_source(p1, "id", rill_type_scalar(RILL_INT64), src_both_ids, &c1, NULL, &raise, &err), 0);
  rill_df_t* side;
  RT_OK(rill_df_concat_columns((rill_df_t* const[]){p0, p1}, 2, &side, &err), err);
  int64_t v[8];
  cr_assert_eq(collect(side, 0, NULL, v, 8), 3);
  cr_assert(v[0] == 100 && v[1] == 102 && v[2] == 103, "%lld %lld %lld", (long long)v[0], (long long)v[1],
            (long long)v[2]);
  cr_assert_eq(collect(side, 1, NULL, v, 8), 4, "a column alone is read without the other's rows");
  rill_df_t* bt;
  RT_OK(rill_df_batch(side, (int[]){0, 1}, 2, 4, NULL, &bt, &err), err);
  rill_iter_t* it = open_iter(bt, NULL);
  rill_row_t row;
  RT_OK(rill_iter_next(it, &row, &err), err);
  const rill_array_t* id = rill_row_get(&row, 1);
  cr_assert_eq(id->length, 3);
  cr_assert(((const int64_t*)id->data)[1] == 2002, "row 1 is left out of both columns");
  expect_stats(it, ANY, ANY, 1, 0, 0);
  end_and_free(it, bt, NULL);
  /* a part raising: the row's error names the column of the result */
  rill_df_free(side);
  rill_df_free(p0);
  counter_failing(&c0, 100, 2);
  p0 = make_src(4, &c0, &raise);
  RT_OK(rill_df_concat_columns((rill_df_t* const[]){p1, p0}, 2, &side, &err), err);
  it = open_iter(side, NULL);
  for (int r = 0; r < 4; r++) {
    int rc = rill_iter_next(it, &row, &err);
    if (r != 2) {
      RT_OK(rc, err);
      continue;
    }
    cr_assert_eq(rc, RILL_EFORMAT, "row 2: %d", rc);
    cr_assert(err.row == 2 && err.column == 1, "row %lld column %d: %s", (long long)err.row, err.column, err.message);
  }
  end_and_free(it, side, NULL);
  rill_df_free(p0);
  rill_df_free(p1);
}

/* Questions an addon answers about its own columns (rill_csv_bad_rows) reach them through a
 * dataframe of columns side by side, and through views of it. */
Test(concat, side_by_side_columns_are_still_their_sources) {
  rill_error_t err;
  const char* text = "id,w\n1,a\n2\n3,c\n4,d,e\n5,f\n";
  rill_df_t* csv;
  RT_OK(rill_df_from_csv_buffer(text, strlen(text), &(rill_csv_opts_t){.on_bad_row = RILL_ON_ERROR_SKIP}, &csv, &err),
        err);
  const int64_t a[3] = {7, 8, 9};
  rill_df_t *mem = table(a, 3, "x", -1, 0), *side, *sh;
  RT_OK(rill_df_concat_columns((rill_df_t* const[]){mem, csv}, 2, &side, &err), err);
  RT_OK(rill_df_shuffle(side, 2, &sh, &err), err);
  for (int k = 0; k < 2; k++) {
    rill_csv_bad_row_t bad[4];
    cr_assert_eq(rill_csv_bad_rows(k ? sh : side, bad, 4, &err), 2, "%s", err.message);
    cr_assert(bad[0].line == 3 && bad[0].fields == 1 && bad[1].line == 5 && bad[1].fields == 3);
  }
  RT_FAILS((int)rill_csv_bad_rows(mem, NULL, 0, &err), RILL_EINVAL,
           "rill_csv_bad_rows: no column of the dataframe is read from a CSV file", err);
  rill_df_free(sh);
  rill_df_free(side);
  rill_df_free(mem);
  rill_df_free(csv);
}

Test(concat, side_by_side_misuse_is_refused) {
  rill_error_t err;
  const int64_t a[3] = {1, 2, 3};
  rill_df_t *t = table(a, 3, "x", -1, 0), *u = table(a, 2, "y", -1, 1), *side = NULL;
  RT_FAILS(rill_df_concat_columns((rill_df_t* const[]){t, t}, 2, &side, &err), RILL_EINVAL,
           "rill_df_concat_columns: the column name 'v' of part 1 is taken by an earlier part", err);
  cr_assert_null(side);
  RT_FAILS(rill_df_concat_columns((rill_df_t* const[]){t, u}, 2, &side, &err), RILL_EINVAL,
           "rill_df_concat_columns: part 1 has 2 rows and part 0 has 3", err);
  rill_df_t* sh;
  RT_OK(rill_df_shuffle(t, 1, &sh, &err), err);
  RT_FAILS(rill_df_concat_columns((rill_df_t* const[]){sh}, 1, &side, &err), RILL_EINVAL,
           "rill_df_concat_columns: part 0 is a derived dataframe", err);
  rill_df_free(sh);
  counter_t c;
  counter_init(&c, 0);
  rill_df_t* m = make_src(3, &c, NULL);
  add_map(m, "twice", 0, &c, NULL);
  RT_FAILS(rill_df_concat_columns((rill_df_t* const[]){t, m}, 2, &side, &err), RILL_EINVAL,
           "rill_df_concat_columns: column 'twice' of part 1 is a map, not a source", err);
  RT_FAILS(rill_df_concat_columns((rill_df_t* const[]){t, NULL}, 2, &side, &err), RILL_EINVAL,
           "rill_df_concat_columns: part 1 is NULL", err);
  RT_FAILS(rill_df_concat_columns((rill_df_t* const[]){t}, 0, &side, &err), RILL_EINVAL,
           "rill_df_concat_columns: 0 parts", err);
  RT_FAILS(rill_df_concat_columns((rill_df_t* const[]){t}, 1, NULL, &err), RILL_EINVAL,
           "rill_df_concat_columns: out is NULL", err);
  rill_df_t* empty;
  RT_OK(rill_df_new(3, &empty, &err), err);
  RT_FAILS(rill_df_concat_columns((rill_df_t* const[]){empty}, 1, &side, &err), RILL_EINVAL,
           "rill_df_concat_columns: the parts have no columns", err);
  /* a failed call leaves its parts as they were: columns can still be added to them */
  cr_assert(rill_df_add_source(t, "more", rill_type_scalar(RILL_INT64), src_both_ids, &c, NULL, NULL, &err) >= 0,
            "%s", err.message);
  rill_df_free(empty);
  rill_df_free(m);
  rill_df_free(t);
  rill_df_free(u);
}

/* A part's CPU_SERIAL source keeps its own lock through the result: never two calls at once,
 * also while the part is read by an iterator of its own. */
Test(concat, side_by_side_serial_sources_run_alone) {
  rill_error_t err;
  counter_t cs;
  counter_init(&cs, 0);
  rill_df_t *ser, *ids;
  RT_OK(rill_df_new(64, &ser, &err), err);
  cr_assert_eq(rill_df_add_source(ser, "k", rill_type_scalar(RILL_INT64), src_both_ids, &cs, NULL,
                                  &(rill_stage_opts_t){.where = RILL_STAGE_CPU_SERIAL, .grain = 1}, &err),
               0);
  counter_t ci;
  counter_init(&ci, 0);
  RT_OK(rill_df_new(64, &ids, &err), err);
  cr_assert_eq(rill_df_add_source(ids, "id", rill_type_scalar(RILL_INT64), src_both_ids, &ci, NULL,
                                  &(rill_stage_opts_t){.grain = 1}, &err),
               0);
  rill_df_t *side, *sh;
  RT_OK(rill_df_concat_columns((rill_df_t* const[]){ids, ser}, 2, &side, &err), err);
  RT_OK(rill_df_shuffle(side, 5, &sh, &err), err);
  rill_iter_t *a = open_iter(sh, &(rill_iter_opts_t){.threads = 2, .prefetch = 4}),
              *b = open_iter(ser, &(rill_iter_opts_t){.threads = 2, .prefetch = 4});
  rill_row_t row;
  int64_t n = 0;
  for (int ra = RILL_OK, rb = RILL_OK; ra == RILL_OK || rb == RILL_OK;) {
    if (ra == RILL_OK && (ra = rill_iter_next(a, &row, &err)) == RILL_OK) {
      int64_t id = ((const int64_t*)rill_row_get(&row, 0)->data)[0];
      int64_t k = ((const int64_t*)rill_row_get(&row, 1)->data)[0];
      cr_assert_eq(id, k, "row %lld: the columns are of other rows (%lld, %lld)", (long long)n, (long long)id,
                   (long long)k);
      n++;
    }
    if (rb == RILL_OK) rb = rill_iter_next(b, &row, &err);
  }
  cr_assert_eq(n, 64);
  cr_assert_eq(atomic_load(&cs.max_inflight), 1, "the serial source ran %lld calls at once",
               (long long)atomic_load(&cs.max_inflight));
  rill_iter_free(a);
  rill_iter_free(b);
  rill_df_free(sh);
  rill_df_free(side);
  rill_df_free(ser);
  rill_df_free(ids);
}
