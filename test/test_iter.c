/* Iterators: prefetch and seek, epochs, save/restore, row errors (RAISE, SKIP, NULL),
 * statistics. */
#include <time.h>

#include "engine_common.h"

static void wait_calls(counter_t* c, int64_t want) {
  for (int i = 0; i < 2000 && atomic_load(&c->cells) < want; i++) nanosleep(&(struct timespec){0, 1000000}, NULL);
}

Test(iter, seek_zero_recomputes_only_what_was_dropped) {
  counter_t cs;
  counter_init(&cs, 2);
  rill_stage_opts_t o = {.grain = 1}; /* one row per chunk */
  rill_df_t* df = make_src(8, &cs, &o);
  rill_error_t err;
  rill_iter_t* it = open_iter(df, &(rill_iter_opts_t){.prefetch = 3, .threads = 2});
  rill_row_t row;
  RT_OK(rill_iter_next(it, &row, &err), err);
  RT_OK(rill_iter_next(it, &row, &err), err);
  cr_assert_eq(((const int64_t*)rill_row_get(&row, 0)->data)[0], 3);
  wait_calls(&cs, 5); /* rows 0..4: two consumed, three prefetched */
  RT_OK(rill_iter_seek(it, 0), err);
  int64_t before = atomic_load(&cs.cells);
  cr_assert(before >= 2 && before <= 5, "computed %lld rows before the seek", (long long)before);
  for (int i = 0; i < 8; i++) cr_assert_eq(atomic_load(&cs.seen[i]), i < before ? 1 : 0);
  for (int64_t i = 0; i < 8; i++) {
    RT_OK(rill_iter_next(it, &row, &err), err);
    cr_assert_eq(row.index, i);
    cr_assert_eq(((const int64_t*)rill_row_get(&row, 0)->data)[0], i + 2);
  }
  cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
  /* after the seek each row was computed exactly once more */
  cr_assert_eq(atomic_load(&cs.cells), before + 8);
  for (int i = 0; i < 8; i++) cr_assert_eq(atomic_load(&cs.seen[i]), i < before ? 2 : 1);
  /* seek to the middle and past the end */
  RT_OK(rill_iter_seek(it, 6), err);
  RT_OK(rill_iter_next(it, &row, &err), err);
  cr_assert_eq(row.index, 6);
  RT_OK(rill_iter_seek(it, 8), err);
  cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
  cr_assert_eq(rill_iter_seek(it, 9), RILL_EINVAL);
  cr_assert_eq(rill_iter_seek(it, -1), RILL_EINVAL);
  rill_iter_free(it);
  rill_df_free(df);
}

Test(iter, prefetch_none_computes_on_demand) {
  counter_t cs;
  counter_init(&cs, 0);
  rill_stage_opts_t o = {.grain = 1};
  rill_df_t* df = make_src(8, &cs, &o);
  rill_error_t err;
  rill_iter_t* it = open_iter(df, &(rill_iter_opts_t){.prefetch = RILL_PREFETCH_NONE, .threads = 2});
  rill_row_t row;
  for (int i = 0; i < 3; i++) RT_OK(rill_iter_next(it, &row, &err), err);
  cr_assert_eq(atomic_load(&cs.cells), 3);
  rill_iter_free(it);
  rill_df_free(df);
}

Test(iter, epochs_save_and_restore) {
  counter_t cs, cm;
  counter_init(&cs, 0);
  rill_df_t* df = make_src(40, &cs, NULL);
  rill_error_t err;
  int in = 0;
  int r = rill_df_map(df, "r", rill_type_scalar(RILL_FLOAT64), &in, 1, map_rand, NULL, NULL, NULL, &err);
  cr_assert_eq(r, 1);
  (void)cm;
  rill_df_t* sh;
  RT_OK(rill_df_shuffle(df, 9, &sh, &err), err);
  rill_iter_t* it = open_iter(sh, &(rill_iter_opts_t){.seed = 77, .columns = &r, .ncolumns = 1});
  cr_assert_eq(rill_iter_epoch(it), 0);
  rill_row_t row;
  double first[40], second[40];
  for (int i = 0; i < 40; i++) {
    RT_OK(rill_iter_next(it, &row, &err), err);
    first[i] = ((const double*)rill_row_get(&row, 0)->data)[0];
  }
  cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
  RT_OK(rill_iter_set_epoch(it, 1), err);
  cr_assert_eq(rill_iter_epoch(it), 1);
  for (int i = 0; i < 17; i++) {
    RT_OK(rill_iter_next(it, &row, &err), err);
    second[i] = ((const double*)rill_row_get(&row, 0)->data)[0];
  }
  rill_iter_state_t st;
  RT_OK(rill_iter_save(it, &st), err);
  cr_assert_eq(st.epoch, 1);
  cr_assert_eq(st.cursor, 17);
  cr_assert_eq(st.seed, 77);
  for (int i = 17; i < 40; i++) {
    RT_OK(rill_iter_next(it, &row, &err), err);
    second[i] = ((const double*)rill_row_get(&row, 0)->data)[0];
  }
  int same = 0;
  for (int i = 0; i < 40; i++) same += first[i] == second[i];
  cr_assert(same < 4, "epochs 0 and 1 gave %d equal rows", same);
  /* a fresh iterator restored from the state reproduces the rest of epoch 1 */
  rill_iter_t* it2;
  RT_OK(rill_iter_new(sh, &(rill_iter_opts_t){.columns = &r, .ncolumns = 1, .threads = 1, .prefetch = 5}, &it2, &err),
        err);
  RT_OK(rill_iter_restore(it2, &st), err);
  for (int i = 17; i < 40; i++) {
    RT_OK(rill_iter_next(it2, &row, &err), err);
    cr_assert_eq(row.index, i);
    cr_assert_eq(((const double*)rill_row_get(&row, 0)->data)[0], second[i], "row %d differs after restore", i);
  }
  cr_assert_eq(rill_iter_next(it2, &row, &err), RILL_END);
  /* a state of another pipeline is refused */
  rill_iter_t* other = open_iter(df, NULL);
  cr_assert_eq(rill_iter_restore(other, &st), RILL_EINVAL);
  rill_iter_state_t bad = st;
  bad.cursor = 41;
  cr_assert_eq(rill_iter_restore(it2, &bad), RILL_EINVAL);
  rill_iter_free(other);
  rill_iter_free(it2);
  rill_iter_free(it);
  rill_df_free(sh);
  rill_df_free(df);
}

Test(iter, raise_reports_row_column_message_and_continues) {
  counter_t cs, cm;
  counter_failing(&cs, 2, 5);
  counter_init(&cm, 1);
  rill_df_t* df = make_src(8, &cs, NULL);
  int m = add_map(df, "plus1", 0, &cm, NULL);
  rill_error_t err;
  rill_iter_t* it = open_iter(df, &(rill_iter_opts_t){.columns = &m, .ncolumns = 1});
  rill_row_t row;
  for (int64_t i = 0; i < 8; i++) {
    int r = rill_iter_next(it, &row, &err);
    if (i == 5) {
      cr_assert_eq(r, RILL_EFORMAT);
      cr_assert_eq(err.code, RILL_EFORMAT);
      cr_assert_eq(err.row, 5);
      cr_assert_eq(err.column, m);
      cr_assert(strstr(err.message, "row 5"), "%s", err.message);
      cr_assert(strstr(err.message, "'plus1'"), "%s", err.message);
      cr_assert(strstr(err.message, "stage 'src'"), "%s", err.message);
      cr_assert(strstr(err.message, "bad value in row 5"), "%s", err.message);
      continue;
    }
    cr_assert_eq(r, RILL_OK, "row %lld: %s", (long long)i, err.message);
    cr_assert_eq(row.index, i);
    cr_assert_eq(((const int64_t*)rill_row_get(&row, 0)->data)[0], i + 3);
  }
  cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
  expect_stats(it, 7, ANY, ANY, ANY, 1);
  rill_iter_free(it);
  rill_df_free(df);
}

Test(iter, raise_without_row_fails_every_row_of_the_call) {
  counter_t cs;
  counter_failing(&cs, 0, 2);
  cs.fail_whole = 1;
  rill_stage_opts_t o = {.grain = 4};
  rill_df_t* df = make_src(8, &cs, &o);
  rill_error_t err;
  rill_iter_t* it = open_iter(df, NULL);
  rill_row_t row;
  for (int64_t i = 0; i < 8; i++) {
    int r = rill_iter_next(it, &row, &err);
    if (i < 4) {
      cr_assert_eq(r, RILL_EFORMAT);
      cr_assert_eq(err.row, i);
      cr_assert_eq(err.column, 0);
      cr_assert(strstr(err.message, "bad value in row 2"), "%s", err.message);
    } else {
      RT_OK(r, err);
      cr_assert_eq(row.index, i);
    }
  }
  end_and_free(it, df, NULL);
}

Test(iter, positive_status_is_estage) {
  counter_t cs;
  counter_failing(&cs, 0, 1);
  cs.fail_positive = 1;
  rill_df_t* df = make_src(3, &cs, NULL);
  rill_error_t err;
  rill_iter_t* it = open_iter(df, NULL);
  rill_row_t row;
  /* no err->row: the whole call (rows 0..2) failed, each row reports it */
  for (int64_t i = 0; i < 3; i++) {
    int r = rill_iter_next(it, &row, &err);
    cr_assert_eq(r, RILL_ESTAGE);
    cr_assert_eq(err.code, RILL_ESTAGE);
    cr_assert(strstr(err.message, "returned status 7"), "%s", err.message);
    cr_assert_eq(err.row, i);
  }
  end_and_free(it, df, NULL);
}

Test(iter, skip_drops_the_row_and_counts_it) {
  counter_t cs, cm;
  counter_init(&cs, 0);
  counter_failing(&cm, 1, 3);
  rill_df_t* df = make_src(8, &cs, NULL);
  rill_stage_opts_t skip = policy(RILL_ON_ERROR_SKIP);
  int m = add_map(df, "m", 0, &cm, &skip);
  int64_t v[16];
  rill_error_t err;
  rill_iter_t* it = open_iter(df, NULL);
  rill_row_t row;
  int64_t n = 0;
  int r;
  while ((r = rill_iter_next(it, &row, &err)) == RILL_OK) {
    cr_assert_eq(((const int64_t*)rill_row_get(&row, 0)->data)[0], row.index);
    v[n++] = ((const int64_t*)rill_row_get(&row, m)->data)[0];
    cr_assert_neq(row.index, 3);
  }
  cr_assert_eq(r, RILL_END);
  cr_assert_eq(n, 7);
  int64_t want[7] = {1, 2, 3, 5, 6, 7, 8};
  for (int i = 0; i < 7; i++) cr_assert_eq(v[i], want[i]);
  expect_stats(it, 7, ANY, 1, ANY, ANY);
  /* the map was called again for the cells after the failing one only */
  cr_assert_eq(atomic_load(&cm.cells), 8 + 4);
  rill_iter_free(it);
  rill_df_free(df);
}

Test(iter, skip_inside_a_batch_gives_a_shorter_batch) {
  counter_t cs;
  counter_failing(&cs, 0, 4);
  rill_stage_opts_t skip = policy(RILL_ON_ERROR_SKIP);
  rill_df_t* df = make_src(9, &cs, &skip);
  rill_error_t err;
  rill_df_t* b = batch_of(df, 0, 3, NULL);
  rill_iter_t* it = open_iter(b, NULL);
  rill_row_t row;
  int64_t lens[3], k = 0;
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    const rill_array_t* a = rill_row_get(&row, 0);
    lens[k] = a->length;
    if (k == 1) {
      cr_assert_eq(((const int64_t*)a->data)[0], 3);
      cr_assert_eq(((const int64_t*)a->data)[1], 5);
    }
    k++;
  }
  cr_assert_eq(k, 3);
  cr_assert_eq(lens[0], 3);
  cr_assert_eq(lens[1], 2);
  cr_assert_eq(lens[2], 3);
  expect_stats(it, 3, 8, 1, ANY, ANY);
  rill_iter_free(it);
  rill_df_free(b);
  rill_df_free(df);
}

Test(iter, raise_inside_a_batch_fails_that_batch_only) {
  counter_t cs;
  counter_failing(&cs, 0, 4);
  rill_df_t* df = make_src(9, &cs, NULL);
  rill_error_t err;
  rill_df_t* b = batch_of(df, 0, 3, NULL);
  rill_iter_t* it = open_iter(b, NULL);
  rill_row_t row;
  RT_OK(rill_iter_next(it, &row, &err), err);
  cr_assert_eq(rill_iter_next(it, &row, &err), RILL_EFORMAT);
  cr_assert_eq(err.row, 1);
  cr_assert_eq(err.column, 0);
  cr_assert(strstr(err.message, "batch 1 (row 4)"), "%s", err.message);
  RT_OK(rill_iter_next(it, &row, &err), err);
  cr_assert_eq(row.index, 2);
  cr_assert_eq(((const int64_t*)rill_row_get(&row, 0)->data)[0], 6);
  end_and_free(it, df, b);
}

Test(iter, null_policy_makes_the_cell_null) {
  counter_t cs, cm;
  counter_init(&cs, 0);
  counter_failing(&cm, 10, 2);
  rill_df_t* df = make_src(6, &cs, NULL);
  rill_stage_opts_t np = policy(RILL_ON_ERROR_NULL);
  int m = add_map(df, "m", 0, &cm, &np);
  cr_assert(rill_df_field(df, m)->nullable);
  rill_error_t err;
  rill_iter_t* it = open_iter(df, &(rill_iter_opts_t){.columns = &m, .ncolumns = 1});
  rill_row_t row;
  for (int64_t i = 0; i < 6; i++) {
    RT_OK(rill_iter_next(it, &row, &err), err);
    const rill_array_t* a = rill_row_get(&row, 0);
    if (i == 2) {
      cr_assert_eq(rill_array_is_valid(a, 0), 0);
      cr_assert_eq(a->null_count, 1);
    } else {
      cr_assert_eq(rill_array_is_valid(a, 0), 1);
      cr_assert_eq(((const int64_t*)a->data)[0], i + 10);
    }
  }
  expect_stats(it, ANY, ANY, 0, 1, 0);
  rill_iter_free(it);
  rill_df_free(df);
}

/* STRING map: "v<value>", fails on rows listed in ctx. */
static int map_str(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* ex, void* ctx,
                   rill_error_t* err) {
  counter_t* c = ctx;
  int64_t n = in[0]->length;
  counter_enter(c, n);
  atomic_fetch_sub(&c->inflight, 1);
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_STRING), n);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc");
  const int64_t* rows = rill_exec_rows(ex);
  for (int64_t i = 0; i < n; i++) {
    if (rows[i] == c->fail_row || rows[i] == c->offset) {
      err->row = i;
      return rill_error_set(err, RILL_EFORMAT, "cannot format row %lld", (long long)rows[i]);
    }
    char buf[32];
    int len = snprintf(buf, sizeof buf, "v%lld", (long long)((const int64_t*)in[0]->data)[i]);
    r = rill_array_set_var(out, i, buf, len, NULL);
    if (r != RILL_OK) return rill_error_set(err, r, "set_var");
  }
  return RILL_OK;
}

static void string_policy(rill_on_error_t p) {
  counter_t cs, cm;
  counter_init(&cs, 0);
  counter_failing(&cm, 5, 1); /* rows 1 and 5 fail */
  rill_df_t* df = make_src(8, &cs, NULL);
  rill_error_t err;
  int in = 0;
  rill_stage_opts_t o = policy(p);
  int m = rill_df_map(df, "s", rill_type_scalar(RILL_STRING), &in, 1, map_str, &cm, NULL, &o, &err);
  cr_assert_eq(m, 1, "%s", err.message);
  int col = m;
  rill_df_t* b;
  RT_OK(rill_df_batch(df, &col, 1, 8, NULL, &b, &err), err);
  rill_iter_t* it = open_iter(b, NULL);
  rill_row_t row;
  int r = rill_iter_next(it, &row, &err);
  if (p == RILL_ON_ERROR_RAISE) {
    cr_assert_eq(r, RILL_EFORMAT);
    cr_assert(strstr(err.message, "cannot format row 1"), "%s", err.message);
    cr_assert_eq(err.row, 0);
  } else {
    RT_OK(r, err);
    const rill_array_t* a = rill_row_get(&row, 0);
    cr_assert_eq(a->length, p == RILL_ON_ERROR_SKIP ? 6 : 8);
    int64_t k = 0;
    for (int64_t i = 0; i < 8; i++) {
      int bad = i == 1 || i == 5;
      if (bad && p == RILL_ON_ERROR_SKIP) continue;
      int64_t nb;
      const char* s = rill_array_cell(a, k, &nb);
      if (bad) {
        cr_assert_eq(rill_array_is_valid(a, k), 0);
        cr_assert_eq(nb, 0);
      } else {
        char want[32];
        snprintf(want, sizeof want, "v%lld", (long long)i);
        cr_assert_eq(nb, (int64_t)strlen(want));
        cr_assert(memcmp(s, want, (size_t)nb) == 0);
        cr_assert(rill_array_is_valid(a, k));
      }
      k++;
    }
    cr_assert_eq(a->null_count, p == RILL_ON_ERROR_NULL ? 2 : 0);
  }
  end_and_free(it, df, b);
}

Test(iter, string_outputs_under_each_policy) {
  string_policy(RILL_ON_ERROR_RAISE);
  string_policy(RILL_ON_ERROR_SKIP);
  string_policy(RILL_ON_ERROR_NULL);
}

Test(iter, map_on_a_batch_receives_whole_batches) {
  counter_t cs, cm;
  counter_init(&cs, 0);
  counter_init(&cm, 1000);
  rill_df_t* df = make_src(10, &cs, NULL);
  rill_error_t err;
  rill_df_t* b = batch_of(df, 0, 4, NULL);
  int m = add_map(b, "shifted", 0, &cm, NULL);
  cr_assert_eq(m, 1);
  rill_iter_t* it = open_iter(b, NULL);
  rill_row_t row;
  int64_t k = 0;
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    const rill_array_t* a = rill_row_get(&row, 1);
    cr_assert_eq(a->length, k < 2 ? 4 : 2);
    for (int64_t i = 0; i < a->length; i++) cr_assert_eq(((const int64_t*)a->data)[i], 1000 + k * 4 + i);
    k++;
  }
  cr_assert_eq(k, 3);
  cr_assert_eq(atomic_load(&cm.calls), 3);
  rill_iter_free(it);
  rill_df_free(b);
  rill_df_free(df);
}

Test(iter, stats_and_buffer_reuse) {
  counter_t cs, cm;
  counter_init(&cs, 0);
  counter_init(&cm, 1);
  rill_df_t* df = make_src(4096, &cs, NULL);
  add_map(df, "m", 0, &cm, NULL);
  rill_error_t err;
  rill_df_t* b = batch_of(df, 1, 64, NULL);
  rill_iter_t* it = open_iter(b, &(rill_iter_opts_t){.threads = 2, .prefetch = 4});
  rill_row_t row;
  int64_t sum = 0;
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    const rill_array_t* a = rill_row_get(&row, 0);
    for (int64_t i = 0; i < a->length; i++) sum += ((const int64_t*)a->data)[i];
  }
  cr_assert_eq(sum, 4096LL * 4095 / 2 + 4096);
  expect_stats(it, 64, 4096, ANY, ANY, ANY);
  rill_iter_stats_t st;
  rill_iter_stats(it, &st);
  cr_assert(st.stage_calls >= 128);
  cr_assert(st.compute_ns > 0);
  cr_assert(st.wait_ns >= 0);
  cr_assert(st.reuses > st.allocs, "allocs %lld reuses %lld", (long long)st.allocs, (long long)st.reuses);
  rill_iter_free(it);
  rill_df_free(b);
  rill_df_free(df);
}

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* How long the spinning map lasts a call (at least), by batch of 8 rows. */
typedef struct spin {
  int64_t (*ns)(int64_t batch);
} spin_t;

static int64_t spin_50us(int64_t batch) { return 50000; }

/* 200 us in batches 0-50, nothing much in batches 51-249, 50 us in batches 250-299. */
static int64_t spin_phases(int64_t batch) { return batch <= 50 ? 200000 : batch >= 250 ? 50000 : 0; }

/* A map that copies its input and spins (CLOCK_MONOTONIC) as long as ctx (a spin_t) says. */
static int map_spin(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* ex, void* ctx,
                    rill_error_t* err) {
  int64_t t0 = mono_ns();
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), in[0]->length);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc");
  memcpy(out->data, in[0]->data, (size_t)in[0]->length * sizeof(int64_t));
  int64_t spin = ((const spin_t*)ctx)->ns(in[0]->length > 0 ? ((const int64_t*)in[0]->data)[0] / 8 : 0);
  while (mono_ns() - t0 < spin) {
  }
  return RILL_OK;
}

/* Iterates 300 batches of 8 rows of the source through the spinning map (2 worker threads or
 * none), checks every row; returns the iterator's statistics at the end and sets *wall to the
 * time from rill_iter_new to the end. */
static rill_iter_stats_t spin_run(const spin_t* spin, int threads, int64_t* wall) {
  counter_t cs;
  counter_init(&cs, 0);
  rill_df_t* df = make_src(300 * 8, &cs, NULL);
  rill_error_t err;
  int in = 0;
  int m = rill_df_map(df, "spin", rill_type_scalar(RILL_INT64), &in, 1, map_spin, (void*)spin, NULL, NULL, &err);
  cr_assert_eq(m, 1, "%s", err.message);
  rill_df_t* b = batch_of(df, m, 8, NULL);
  int64_t t0 = mono_ns();
  rill_iter_t* it = open_iter(b, &(rill_iter_opts_t){.threads = threads ? 2 : RILL_THREADS_NONE});
  rill_row_t row;
  int64_t n = 0, sum = 0;
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    const rill_array_t* a = rill_row_get(&row, 0);
    for (int64_t i = 0; i < a->length; i++) sum += ((const int64_t*)a->data)[i];
    n++;
  }
  *wall = mono_ns() - t0;
  cr_assert_eq(n, 300);
  cr_assert_eq(sum, 2400LL * 2399 / 2);
  rill_iter_stats_t st;
  rill_iter_stats(it, &st);
  rill_iter_free(it);
  rill_df_free(b);
  rill_df_free(df);
  return st;
}

/* compute_ns is the time spent inside stage functions, whichever clock the engine times them
 * with (and before and after that clock's rate is known): at least the 50 us each spinning
 * call lasts, at most the wall time of the whole iteration (no worker threads). The bounds
 * allow 1% for the conversion of the engine's clock to nanoseconds. */
Test(iter, compute_ns_is_stage_time) {
  const spin_t spin = {spin_50us};
  for (int round = 0; round < 2; round++) {
    int64_t wall;
    rill_iter_stats_t st = spin_run(&spin, 0, &wall);
    cr_assert_eq(st.stage_calls, 600); /* the source and the map, once per batch */
    cr_assert(st.compute_ns >= 300 * 50000LL * 99 / 100, "round %d: compute_ns %lld for 300 calls of >= 50 us", round,
              (long long)st.compute_ns);
    cr_assert(st.compute_ns <= wall * 101 / 100, "round %d: compute_ns %lld, wall %lld", round,
              (long long)st.compute_ns, (long long)wall);
  }
}

/* Runs of a cheap stage are timed one in a few and the others count the cost of the last
 * timed one; a run whose estimate is not cheap is timed. So a stage that turns cheap is timed
 * exactly until it does (no run is counted at the old, high cost: compute_ns stays within the
 * wall time), and one that turns expensive is counted at its cost after at most a few runs at
 * the cheap estimate (8 allowed below). Without threads the map's runs are in batch order (the
 * scattered timed runs are then those of the engine's fixed sequence); with two workers the
 * lower bound must hold too. The consumer's waits for the chunks it computes itself follow the
 * same rule (wait_ns, without threads); with workers it waits less, never longer than the
 * whole iteration. */
Test(iter, compute_ns_and_wait_ns_follow_a_stage_whose_cost_changes) {
  const spin_t spin = {spin_phases};
  for (int threads = 0; threads < 2; threads++) {
    int64_t wall;
    rill_iter_stats_t st = spin_run(&spin, threads, &wall);
    /* the source and the map, once per batch; with workers the spinning map's runs are split
     * into calls of fewer rows (each lasting as long) */
    if (threads)
      cr_assert_geq(st.stage_calls, 600, "%lld calls", (long long)st.stage_calls);
    else
      cr_assert_eq(st.stage_calls, 600, "%lld calls", (long long)st.stage_calls);
    int64_t least = (51 * 200000LL + 42 * 50000LL) * 99 / 100;
    cr_assert_geq(st.compute_ns, least, "threads %d: compute_ns %lld, at least %lld", threads,
                  (long long)st.compute_ns, (long long)least);
    if (!threads) { /* with workers, stages on two threads may add up to more than the wall time */
      cr_assert_leq(st.compute_ns, wall * 101 / 100, "compute_ns %lld, wall %lld", (long long)st.compute_ns,
                    (long long)wall);
      cr_assert_geq(st.wait_ns, least, "wait_ns %lld, at least %lld", (long long)st.wait_ns, (long long)least);
    }
    cr_assert_leq(st.wait_ns, wall * 101 / 100, "threads %d: wait_ns %lld, wall %lld", threads, (long long)st.wait_ns,
                  (long long)wall);
  }
}

/* Batches of `size` rows of both columns of a source (cells: their row ids) and a map adding
 * 1 to it, over nbatches * size rows; *df: the base dataframe (cs, cm: the stages' counters,
 * which must outlive it). */
static rill_df_t* both_columns_batched(int64_t nbatches, int64_t size, counter_t* cs, counter_t* cm, rill_df_t** df) {
  counter_init(cs, 0);
  counter_init(cm, 1);
  *df = make_src(nbatches * size, cs, NULL);
  int cols[2] = {0, add_map(*df, "m", 0, cm, NULL)};
  rill_error_t err;
  rill_df_t* b;
  RT_OK(rill_df_batch(*df, cols, 2, size, NULL, &b, &err), err);
  return b;
}

/* A stage's output that nothing holds any more stays with the slot that computed it and is
 * filled again by the slot's next chunk (rill__chunk_drop); one the consumer keeps is never
 * written again. Every third batch of both columns (the source, which the map also reads, and
 * the map) is kept past the iterator's end; the others are let go and their arrays reused:
 * at most one array a column for each kept batch and each batch in flight is allocated (128
 * without reuse). */
Test(iter, kept_batches_stay_intact_while_the_others_are_reused) {
  for (int threads = 0; threads < 2; threads++) {
    counter_t cs, cm;
    rill_df_t* df;
    rill_df_t* b = both_columns_batched(64, 16, &cs, &cm, &df);
    rill_error_t err;
    rill_iter_t* it = open_iter(b, &(rill_iter_opts_t){.threads = threads ? 2 : RILL_THREADS_NONE, .prefetch = 4});
    const rill_array_t* kept[22][2];
    int nk = 0;
    rill_row_t row;
    for (int i = 0; i < 64; i++) {
      RT_OK(rill_iter_next(it, &row, &err), err);
      for (int q = 0; q < 2; q++) {
        const rill_array_t* a = rill_row_get(&row, q);
        cr_assert_eq(a->length, 16);
        for (int64_t j = 0; j < 16; j++)
          cr_assert_eq(((const int64_t*)a->data)[j], i * 16 + j + q, "threads %d, batch %d, column %d, cell %lld",
                       threads, i, q, (long long)j);
      }
      if (i % 3 == 0) {
        for (int q = 0; q < 2; q++) kept[nk][q] = rill_array_retain(rill_row_get(&row, q));
        nk++;
      }
    }
    cr_assert_eq(nk, 22);
    rill_iter_stats_t st;
    rill_iter_stats(it, &st);
    cr_assert_leq(st.allocs, 2 * (22 + 8), "threads %d: %lld allocations", threads, (long long)st.allocs);
    cr_assert_geq(st.reuses, 128 - st.allocs, "threads %d: %lld reuses", threads, (long long)st.reuses);
    end_and_free(it, df, b);
    for (int k = 0; k < nk; k++)
      for (int q = 0; q < 2; q++) {
        for (int64_t j = 0; j < 16; j++)
          cr_assert_eq(((const int64_t*)kept[k][q]->data)[j], k * 3 * 16 + j + q,
                       "threads %d: kept batch %d, column %d, cell %lld written again", threads, k * 3, q, (long long)j);
        rill_array_release(kept[k][q]);
      }
  }
}

/* Without workers the consumer computes each chunk itself, in the slot the ring gives it; the
 * buffers of its last chunk (still in its core's cache) move to that slot with it: each batch
 * let go is written again by the next one, and the whole iteration allocates one buffer a
 * stage (a ring of 5 slots, each with its own, would make 10 and hand out 5 buffers in turn). */
Test(iter, the_consumer_fills_again_the_buffers_of_its_last_chunk) {
  counter_t cs, cm;
  rill_df_t* df;
  rill_df_t* b = both_columns_batched(32, 16, &cs, &cm, &df);
  rill_error_t err;
  int req = 1;
  rill_iter_t* it =
      open_iter(b, &(rill_iter_opts_t){.columns = &req, .ncolumns = 1, .threads = RILL_THREADS_NONE, .prefetch = 4});
  const void* last = NULL;
  rill_row_t row;
  for (int i = 0; i < 32; i++) {
    RT_OK(rill_iter_next(it, &row, &err), err);
    const rill_array_t* a = rill_row_get(&row, 0);
    for (int64_t j = 0; j < 16; j++) cr_assert_eq(((const int64_t*)a->data)[j], i * 16 + j + 1, "batch %d, cell %lld", i, (long long)j);
    if (i > 0) cr_assert_eq(a->data, last, "batch %d is not in the buffer of batch %d", i, i - 1);
    last = a->data;
  }
  rill_iter_stats_t st;
  rill_iter_stats(it, &st);
  cr_assert_eq(st.allocs, 2, "%lld allocations", (long long)st.allocs);
  end_and_free(it, df, b);
}

/* A batch a SKIP shortened leaves shortened arrays behind: without workers the consumer's next
 * batch fills those same buffers (take_warm), and comes out whole, with every cell its own. */
Test(iter, the_batch_after_a_shortened_one_is_whole) {
  counter_t cs, cm;
  counter_failing(&cs, 0, 4);
  counter_init(&cm, 1);
  rill_stage_opts_t skip = policy(RILL_ON_ERROR_SKIP);
  rill_df_t* df = make_src(12, &cs, &skip);
  int cols[2] = {0, add_map(df, "m", 0, &cm, NULL)};
  rill_error_t err;
  rill_df_t* b;
  RT_OK(rill_df_batch(df, cols, 2, 3, NULL, &b, &err), err);
  rill_iter_t* it = open_iter(b, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE, .prefetch = 2});
  static const int64_t want[4][3] = {{0, 1, 2}, {3, 5, -1}, {6, 7, 8}, {9, 10, 11}};
  rill_row_t row;
  for (int i = 0; i < 4; i++) {
    RT_OK(rill_iter_next(it, &row, &err), err);
    for (int q = 0; q < 2; q++) {
      const rill_array_t* a = rill_row_get(&row, q);
      cr_assert_eq(a->length, i == 1 ? 2 : 3, "batch %d, column %d: %lld cells", i, q, (long long)a->length);
      cr_assert_eq(a->null_count, 0, "batch %d, column %d", i, q);
      for (int64_t j = 0; j < a->length; j++)
        cr_assert_eq(((const int64_t*)a->data)[j], want[i][j] + q, "batch %d, column %d, cell %lld", i, q, (long long)j);
    }
  }
  expect_stats(it, 4, 11, 1, 0, 0);
  end_and_free(it, df, b);
}

/* Source: a 64 KB uint8 cell per row, every byte the row id's low byte. */
static int src_64k(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* ex, void* ctx, rill_error_t* err) {
  int64_t shape[1] = {65536};
  int r = rill_exec_alloc(ex, out, rill_type_tensor(RILL_UINT8, 1, shape), n);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc");
  for (int64_t i = 0; i < n; i++) memset((uint8_t*)out->data + i * 65536, (int)(rows[i] & 0xff), 65536);
  return RILL_OK;
}

/* Map: the sum of a 64 KB cell's bytes. */
static int map_sum_64k(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* ex, void* ctx,
                       rill_error_t* err) {
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), in[0]->length);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc");
  for (int64_t i = 0; i < in[0]->length; i++) {
    int64_t sum = 0;
    for (int64_t j = 0; j < 65536; j++) sum += ((const uint8_t*)in[0]->data)[i * 65536 + j];
    ((int64_t*)out->data)[i] = sum;
  }
  return RILL_OK;
}

/* A large intermediate (the source's 512 KB a batch, which only the map reads) goes back to
 * its pool at the end of each chunk's evaluation and is shared by every slot: without workers
 * one buffer serves all 32 batches. Only small outputs stay with their slot (here the map's
 * 64 bytes; at most one a slot, 5 with prefetch 4): 6 allocations at most; an intermediate
 * pinned to each slot would make 10. */
Test(iter, a_large_intermediate_is_shared_by_the_slots) {
  rill_error_t err;
  rill_df_t *df, *b;
  RT_OK(rill_df_new(32 * 8, &df, &err), err);
  int64_t shape[1] = {65536};
  int s = rill_df_add_source(df, "s", rill_type_tensor(RILL_UINT8, 1, shape), src_64k, NULL, NULL, NULL, &err);
  cr_assert_eq(s, 0, "%s", err.message);
  int m = rill_df_map(df, "sum", rill_type_scalar(RILL_INT64), &s, 1, map_sum_64k, NULL, NULL, NULL, &err);
  cr_assert_eq(m, 1, "%s", err.message);
  RT_OK(rill_df_batch(df, &m, 1, 8, NULL, &b, &err), err);
  rill_iter_t* it = open_iter(b, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE, .prefetch = 4});
  rill_row_t row;
  for (int i = 0; i < 32; i++) {
    RT_OK(rill_iter_next(it, &row, &err), err);
    const rill_array_t* a = rill_row_get(&row, 0);
    for (int64_t j = 0; j < 8; j++)
      cr_assert_eq(((const int64_t*)a->data)[j], ((i * 8 + j) & 0xff) * 65536LL, "batch %d, row %lld", i, (long long)j);
  }
  rill_iter_stats_t st;
  rill_iter_stats(it, &st);
  cr_assert_leq(st.allocs, 6, "%lld allocations (reuses %lld)", (long long)st.allocs, (long long)st.reuses);
  cr_assert_geq(st.reuses, 2 * 32 - 6, "%lld reuses", (long long)st.reuses);
  end_and_free(it, df, b);
}

/* Map: its input, with the cells of rows 0, 16, 32, ... null (the first of every other batch of 8). */
static int map_null_every_16(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* ex, void* ctx,
                             rill_error_t* err) {
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), in[0]->length);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc");
  const int64_t* rows = rill_exec_rows(ex);
  for (int64_t i = 0; i < in[0]->length; i++) {
    ((int64_t*)out->data)[i] = ((const int64_t*)in[0]->data)[i];
    if (rows[i] % 16 == 0 && (r = rill_array_set_null(out, i)) != RILL_OK) return rill_error_set(err, r, "set_null");
  }
  return RILL_OK;
}

/* A spare filled again starts with every cell valid: batches with a null alternate with
 * batches without, and a spare is filled again by the next chunk its slot computes (with 2
 * workers and 3 slots, prefetch 2) or by the consumer's next chunk (without workers), so a null
 * left from the chunk before would show. */
Test(iter, a_spare_filled_again_keeps_no_null_of_its_last_chunk) {
  for (int threads = 0; threads < 2; threads++) {
    counter_t cs;
    counter_init(&cs, 0);
    rill_df_t* df = make_src(24 * 8, &cs, NULL);
    rill_error_t err;
    int in = 0;
    int m = rill_df_map(df, "n", rill_type_scalar(RILL_INT64), &in, 1, map_null_every_16, NULL, NULL, NULL, &err);
    cr_assert_eq(m, 1, "%s", err.message);
    rill_df_t* b = batch_of(df, m, 8, NULL);
    rill_iter_t* it = open_iter(b, &(rill_iter_opts_t){.threads = threads ? 2 : RILL_THREADS_NONE, .prefetch = 2});
    rill_row_t row;
    for (int i = 0; i < 24; i++) {
      RT_OK(rill_iter_next(it, &row, &err), err);
      const rill_array_t* a = rill_row_get(&row, 0);
      cr_assert_eq(a->null_count, i % 2 == 0, "threads %d, batch %d: %lld nulls", threads, i, (long long)a->null_count);
      for (int64_t j = 0; j < 8; j++) {
        int valid = !a->validity || ((a->validity[j >> 3] >> (j & 7)) & 1);
        cr_assert_eq(valid, !(j == 0 && i % 2 == 0), "threads %d, batch %d, cell %lld", threads, i, (long long)j);
        if (valid) cr_assert_eq(((const int64_t*)a->data)[j], i * 8 + j);
      }
    }
    end_and_free(it, df, b);
  }
}

/* A column requested twice is one array handed out under both indexes; each holds its own
 * reference (the chunk's frame passes its reference to the first, the second takes one), so
 * batches kept through either index, or both, outlive the iterator intact, and nothing leaks
 * (AddressSanitizer's leak check in make check-asan). */
Test(iter, a_column_requested_twice_is_kept_through_either_index) {
  counter_t cs, cm;
  rill_df_t* df;
  rill_df_t* b = both_columns_batched(8, 16, &cs, &cm, &df);
  rill_error_t err;
  int req[3] = {1, 0, 1};
  rill_iter_t* it = open_iter(b, &(rill_iter_opts_t){.columns = req, .ncolumns = 3, .threads = RILL_THREADS_NONE});
  const rill_array_t* kept[8];
  rill_row_t row;
  for (int i = 0; i < 8; i++) {
    RT_OK(rill_iter_next(it, &row, &err), err);
    cr_assert_eq(rill_row_get(&row, 0), rill_row_get(&row, 2), "batch %d: one array under both indexes", i);
    kept[i] = rill_array_retain(rill_row_get(&row, i % 2 ? 0 : 2));
    if (i % 4 == 0) rill_array_retain(kept[i]); /* kept twice: released twice below */
  }
  end_and_free(it, df, b);
  for (int i = 0; i < 8; i++) {
    for (int64_t j = 0; j < 16; j++)
      cr_assert_eq(((const int64_t*)kept[i]->data)[j], i * 16 + j + 1, "batch %d, cell %lld", i, (long long)j);
    if (i % 4 == 0) rill_array_release(kept[i]);
    rill_array_release(kept[i]);
  }
}

/* Row mode hands out one view per requested column, pointed at each row's cell in turn: a
 * source of int64 cells (null at rows 3, 10, 17, ... up to row 40, and at 47, the last of its
 * chunk, then none), int32[3] tensors and strings, in chunks of 16 rows (some with nulls, some
 * without, a last short one): every
 * row's cells, lengths, sizes and null state. A row kept past the next call (retained) keeps
 * its cell while later rows get a view of their own. */
static int src_nulls(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* ex, void* ctx,
                     rill_error_t* err) {
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), n);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc");
  for (int64_t i = 0; i < n; i++) {
    ((int64_t*)out->data)[i] = rows[i] * 10;
    if (((rows[i] < 40 && rows[i] % 7 == 3) || rows[i] == 47) && rill_array_set_null(out, i) != RILL_OK)
      return rill_error_set(err, RILL_ENOMEM, "null");
  }
  return RILL_OK;
}
static int src_vec3(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* ex, void* ctx,
                    rill_error_t* err) {
  int r = rill_exec_alloc(ex, out, rill_type_tensor(RILL_INT32, 1, (int64_t[]){3}), n);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc");
  for (int64_t i = 0; i < 3 * n; i++) ((int32_t*)out->data)[i] = (int32_t)(rows[i / 3] * 3 + i % 3);
  return RILL_OK;
}
static int src_text(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* ex, void* ctx,
                    rill_error_t* err) {
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_STRING), n);
  for (int64_t i = 0; r == RILL_OK && i < n; i++) {
    char s[32];
    int len = snprintf(s, sizeof s, "row-%lld", (long long)rows[i]);
    r = rill_array_set_var(out, i, s, len, NULL);
  }
  return r == RILL_OK ? RILL_OK : rill_error_set(err, r, "text");
}

Test(iter, row_views_follow_each_row_across_chunks_with_and_without_nulls) {
  enum { N = 70 };
  rill_error_t err;
  rill_df_t* df;
  RT_OK(rill_df_new(N, &df, &err), err);
  rill_stage_opts_t o = {.grain = 16, .nullable = 1};
  cr_assert_eq(rill_df_add_source(df, "x", rill_type_scalar(RILL_INT64), src_nulls, NULL, NULL, &o, &err), 0);
  cr_assert_eq(rill_df_add_source(df, "v", rill_type_tensor(RILL_INT32, 1, (int64_t[]){3}), src_vec3, NULL, NULL, &o,
                                  &err), 1);
  cr_assert_eq(rill_df_add_source(df, "s", rill_type_scalar(RILL_STRING), src_text, NULL, NULL, &o, &err), 2);
  for (int threads = 0; threads < 2; threads++) {
    rill_iter_t* it = open_iter(df, &(rill_iter_opts_t){.threads = threads ? 2 : RILL_THREADS_NONE, .prefetch = 40});
    rill_row_t row;
    const rill_array_t* kept = NULL;
    for (int64_t i = 0; i < N; i++) {
      RT_OK(rill_iter_next(it, &row, &err), err);
      cr_assert_eq(row.index, i);
      const rill_array_t *x = rill_row_get(&row, 0), *v = rill_row_get(&row, 1), *s = rill_row_get(&row, 2);
      cr_assert(x->length == 1 && v->length == 1 && s->length == 1, "row %lld", (long long)i);
      cr_assert_eq(x->data_size, 8, "row %lld", (long long)i);
      cr_assert_eq(v->data_size, 12, "row %lld", (long long)i);
      cr_assert(v->type.ndim == 1 && v->type.shape[0] == 3 && v->type.dtype == RILL_INT32);
      int null = (i < 40 && i % 7 == 3) || i == 47;
      cr_assert_eq(x->null_count, null, "row %lld: null_count %lld", (long long)i, (long long)x->null_count);
      cr_assert_eq(rill_array_is_valid(x, 0), !null, "row %lld", (long long)i);
      if (!null) cr_assert_eq(((const int64_t*)x->data)[0], i * 10, "row %lld", (long long)i);
      for (int k = 0; k < 3; k++) cr_assert_eq(((const int32_t*)v->data)[k], i * 3 + k, "row %lld", (long long)i);
      char want[32];
      int len = snprintf(want, sizeof want, "row-%lld", (long long)i);
      cr_assert(s->offsets && s->offsets[1] - s->offsets[0] == len &&
                    memcmp((const char*)s->data + s->offsets[0], want, (size_t)len) == 0,
                "row %lld: string", (long long)i);
      if (i == 20) kept = rill_array_retain(v); /* a row of a chunk without nulls, kept */
      if (i == 21) cr_assert_neq(v, kept, "a kept row's view is not pointed at the next row");
    }
    cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
    cr_assert(kept);
    for (int k = 0; k < 3; k++) cr_assert_eq(((const int32_t*)kept->data)[k], 60 + k, "the kept row 20 changed");
    rill_iter_free(it);
    cr_assert_eq(((const int32_t*)kept->data)[1], 61, "the kept row 20 outlives its iterator");
    rill_array_release(kept);
  }
  rill_df_free(df);
}

/* rill_iter_ready: 1 exactly while the next call hands out a row (or an error) of a chunk the
 * iterator holds; 0 before the first row, at a chunk's end, at the end, and for NULL. Row mode
 * in chunks of 4 rows, row 7 failing under RAISE (an error after its chunk's last row), then batches of
 * 4 (one chunk a batch) with the batch of row 9 failing (an error that is the whole chunk). */
Test(iter, ready_says_whether_the_next_row_is_held) {
  cr_assert_eq(rill_iter_ready(NULL), 0);
  counter_t cs;
  counter_failing(&cs, 0, 7);
  rill_stage_opts_t o = {.grain = 4};
  rill_df_t* df = make_src(10, &cs, &o);
  rill_error_t err;
  rill_row_t row;
  rill_iter_t* it = open_iter(df, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE, .prefetch = 8});
  cr_assert_eq(rill_iter_ready(it), 0, "before the first row");
  /* rows 0-3, 4-7 (row 7's error last), 8-9 */
  const int want[11] = {1, 1, 1, 0, 1, 1, 1, 0, 1, 0, 0}; /* after each call */
  int rows = 0, errors = 0;
  for (int k = 0; k < 11; k++) {
    int r = rill_iter_next(it, &row, &err);
    if (k == 10) {
      cr_assert_eq(r, RILL_END);
    } else if (k == 7) {
      cr_assert_eq(r, RILL_EFORMAT, "call %d: %d", k, r);
      cr_assert_eq(err.row, 7);
      errors++;
    } else {
      RT_OK(r, err);
      rows++;
    }
    cr_assert_eq(rill_iter_ready(it), want[k], "after call %d (%s)", k, k == 10 ? "the end" : "a row");
  }
  cr_assert(rows == 9 && errors == 1);
  cr_assert_eq(rill_iter_ready(it), 0, "at the end");
  rill_iter_free(it);
  /* batched: each chunk is one batch, handed out in one call */
  rill_df_t* b = batch_of(df, 0, 4, NULL);
  counter_failing(&cs, 0, 9);
  it = open_iter(b, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE, .prefetch = 8});
  RT_OK(rill_iter_next(it, &row, &err), err);
  cr_assert_eq(rill_iter_ready(it), 0, "a batch handed out: its chunk is done");
  RT_OK(rill_iter_next(it, &row, &err), err);
  cr_assert_eq(rill_iter_next(it, &row, &err), RILL_EFORMAT);
  cr_assert_eq(rill_iter_ready(it), 0);
  end_and_free(it, df, b);
}

Test(iter, rows_may_be_kept_after_next) {
  counter_t cs;
  counter_init(&cs, 0);
  rill_df_t* df = make_src(100, &cs, NULL);
  rill_error_t err;
  rill_iter_t* it = open_iter(df, NULL);
  rill_row_t row;
  const rill_array_t* kept[100];
  for (int i = 0; i < 100; i++) {
    RT_OK(rill_iter_next(it, &row, &err), err);
    kept[i] = rill_array_retain(rill_row_get(&row, 0));
  }
  rill_iter_free(it);
  rill_df_free(df);
  for (int i = 0; i < 100; i++) {
    cr_assert_eq(((const int64_t*)kept[i]->data)[0], i);
    rill_array_release(kept[i]);
  }
}

Test(iter, view_maps_and_reduce_of_shuffle) {
  counter_t cs, cm, cr;
  counter_init(&cs, 0);
  counter_init(&cm, 1);
  counter_init(&cr, 0);
  rill_df_t* df = make_src(30, &cs, NULL);
  rill_error_t err;
  rill_df_t *sh, *red;
  RT_OK(rill_df_shuffle(df, 1, &sh, &err), err);
  int m = add_map(sh, "m", 0, &cm, NULL);
  cr_assert_eq(m, 1);
  RT_OK(rill_df_reduce(sh, m, 4, rill_type_scalar(RILL_INT64), red_sum, &cr, NULL, &red, &err), err);
  cr_assert_eq(rill_df_rows(red), 8);
  int64_t v[8];
  cr_assert_eq(collect(red, 0, NULL, v, 8), 8);
  int64_t total = 0;
  for (int i = 0; i < 8; i++) total += v[i];
  cr_assert_eq(total, 30 * 29 / 2 + 30);
  rill_df_free(red);
  rill_df_free(sh);
  rill_df_free(df);
}

Test(iter, shuffle_of_a_reduce_permutes_groups) {
  counter_t cs, cr;
  counter_init(&cs, 2);
  counter_init(&cr, 0);
  rill_df_t* df = make_src(8, &cs, NULL);
  rill_error_t err;
  rill_df_t *red, *sh;
  RT_OK(rill_df_reduce(df, 0, 3, rill_type_scalar(RILL_INT64), red_sum, &cr, NULL, &red, &err), err);
  RT_OK(rill_df_shuffle(red, 4, &sh, &err), err);
  int64_t v[4];
  cr_assert_eq(collect(sh, 0, NULL, v, 4), 3);
  int seen9 = 0, seen18 = 0, seen17 = 0;
  for (int i = 0; i < 3; i++) {
    seen9 += v[i] == 9;
    seen18 += v[i] == 18;
    seen17 += v[i] == 17;
  }
  cr_assert(seen9 == 1 && seen18 == 1 && seen17 == 1, "%lld %lld %lld", (long long)v[0], (long long)v[1],
            (long long)v[2]);
  rill_df_free(sh);
  rill_df_free(red);
  rill_df_free(df);
}

static _Atomic int64_t ctx_epoch = -1, ctx_column = -1, ctx_bad_worker = 0;
static int map_exec(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* ex, void* ctx,
                    rill_error_t* err) {
  atomic_store(&ctx_epoch, rill_exec_epoch(ex));
  atomic_store(&ctx_column, rill_exec_column(ex));
  int w = rill_exec_worker(ex);
  if (w < -1 || w >= 3) atomic_store(&ctx_bad_worker, 1);
  if (rill_exec_stream(ex) != NULL || rill_exec_cuda_stream(ex) != NULL) atomic_store(&ctx_bad_worker, 1);
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), in[0]->length);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc");
  /* a wrong length is refused for a pre-assigned slot */
  if (rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), in[0]->length + 1) != RILL_EINVAL)
    atomic_store(&ctx_bad_worker, 1);
  const int64_t* rows = rill_exec_rows(ex);
  for (int64_t i = 0; i < in[0]->length; i++) ((int64_t*)out->data)[i] = rows[i] * 10;
  return RILL_OK;
}

Test(iter, execution_context_fields) {
  counter_t cs;
  counter_init(&cs, 0);
  rill_df_t* df = make_src(300, &cs, NULL);
  rill_error_t err;
  int in = 0;
  rill_stage_opts_t o = {.grain = 50};
  int m = rill_df_map(df, "m", rill_type_scalar(RILL_INT64), &in, 1, map_exec, NULL, NULL, &o, &err);
  rill_df_t* sh;
  RT_OK(rill_df_shuffle(df, 2, &sh, &err), err);
  int64_t v[300];
  rill_iter_opts_t io = {.epoch = 6, .threads = 3};
  cr_assert_eq(collect(sh, m, &io, v, 300), 300);
  cr_assert_eq(atomic_load(&ctx_epoch), 6);
  cr_assert_eq(atomic_load(&ctx_column), m);
  cr_assert_eq(atomic_load(&ctx_bad_worker), 0);
  int seen[300] = {0};
  for (int i = 0; i < 300; i++) {
    cr_assert_eq(v[i] % 10, 0);
    seen[v[i] / 10]++;
  }
  for (int i = 0; i < 300; i++) cr_assert_eq(seen[i], 1);
  rill_df_free(sh);
  rill_df_free(df);
}

/* Map on a batched dataframe: cell = the first draw of rill_exec_rng for the cell; also
 * checks that the call's row ids are the batched dataframe's parent rows. */
static _Atomic int64_t rng_bad_rows = 0;
static int map_rng_u64(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* ex, void* ctx,
                       rill_error_t* err) {
  int64_t n = in[0]->length;
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_UINT64), n);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc failed");
  const int64_t* rows = rill_exec_rows(ex);
  for (int64_t i = 0; i < n; i++) {
    if (rows[i] != ((const int64_t*)in[0]->data)[i]) atomic_store(&rng_bad_rows, 1);
    rill_rng_t g = rill_exec_rng(ex, i);
    ((uint64_t*)out->data)[i] = rill_rng_u64(&g);
  }
  return RILL_OK;
}

Test(iter, rng_of_a_map_on_a_batch_follows_the_parent_rows) {
  enum { N = 22, B = 4 };
  counter_t cs;
  counter_failing(&cs, 0, 5); /* skipped: batch 1 holds parent rows 4, 6, 7 */
  rill_stage_opts_t so = policy(RILL_ON_ERROR_SKIP);
  rill_df_t* df = make_src(N, &cs, &so);
  rill_error_t err;
  int col = 0;
  rill_df_t* b = batch_of(df, col, B, NULL);
  int m = rill_df_map(b, "draw", rill_type_scalar(RILL_UINT64), &col, 1, map_rng_u64, NULL, NULL, NULL, &err);
  cr_assert_eq(m, 1, "%s", err.message);
  for (int threads = RILL_THREADS_NONE; threads <= 2; threads += 3) {
    rill_iter_t* it = open_iter(b, &(rill_iter_opts_t){.threads = threads, .seed = 9, .epoch = 3});
    rill_row_t row;
    uint64_t seen[N];
    int64_t n = 0, batch = 0;
    while (rill_iter_next(it, &row, &err) == RILL_OK) {
      const rill_array_t* rows = rill_row_get(&row, 0);
      const rill_array_t* draws = rill_row_get(&row, 1);
      cr_assert_eq(draws->length, rows->length);
      cr_assert_eq(rows->length, batch == 1 ? B - 1 : batch == N / B ? N % B : B);
      for (int64_t i = 0; i < rows->length; i++) {
        int64_t r = ((const int64_t*)rows->data)[i];
        cr_assert_eq(r, batch * B + i + (batch == 1 && i >= 1), "batch %lld cell %lld holds row %lld",
                     (long long)batch, (long long)i, (long long)r);
        rill_rng_t want = rill_rng_seeded(9, 3, r, m);
        uint64_t got = ((const uint64_t*)draws->data)[i];
        cr_assert_eq(got, rill_rng_u64(&want), "batch %lld cell %lld (row %lld): not the row's stream",
                     (long long)batch, (long long)i, (long long)r);
        for (int64_t j = 0; j < n; j++) cr_assert_neq(seen[j], got, "row %lld repeats a draw", (long long)r);
        seen[n++] = got;
      }
      batch++;
    }
    cr_assert_eq(batch, (N + B - 1) / B);
    cr_assert_eq(n, N - 1);
    rill_iter_free(it);
  }
  cr_assert_eq(atomic_load(&rng_bad_rows), 0, "rill_exec_rows differs from the batch's parent rows");
  rill_df_free(b);
  rill_df_free(df);
}

/* A STRING source whose cells vary in length from row to row (1 to 300 bytes). */
static int src_varstr(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* ex, void* ctx,
                      rill_error_t* err) {
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_STRING), n);
  if (r != RILL_OK) return rill_error_set(err, r, "varstr: out of memory");
  char buf[320];
  for (int64_t i = 0; i < n; i++) {
    int len = 1 + (int)((rows[i] * 7919) % 300);
    for (int k = 0; k < len; k++) buf[k] = (char)('a' + (rows[i] + k) % 26);
    r = rill_array_set_var(out, i, buf, len, NULL);
    if (r != RILL_OK) return rill_error_set(err, r, "varstr: out of memory");
  }
  return RILL_OK;
}

Test(iter, variable_length_buffers_are_reused_across_epochs) {
  rill_error_t err;
  rill_df_t *df, *sh, *b;
  RT_OK(rill_df_new(3000, &df, &err), err);
  cr_assert_geq(rill_df_add_source(df, "s", rill_type_scalar(RILL_STRING), src_varstr, NULL, NULL,
                                   &(rill_stage_opts_t){.grain = 64}, &err), 0, "%s", err.message);
  RT_OK(rill_df_shuffle(df, 5, &sh, &err), err);
  b = batch_of(sh, 0, 256, NULL);
  rill_iter_t* it = open_iter(b, &(rill_iter_opts_t){.threads = 2, .prefetch = 4});
  uint64_t sum0 = 0;
  int64_t reuses_before = -1, allocs_after_2 = -1, reuses_after_2 = -1;
  for (int64_t epoch = 0; epoch < 10; epoch++) {
    RT_OK(rill_iter_set_epoch(it, epoch), err);
    rill_row_t row;
    uint64_t sum = 0;
    int64_t cells = 0;
    int rc;
    while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) {
      const rill_array_t* a = rill_row_get(&row, 0);
      for (int64_t i = 0; i < a->length; i++) {
        int64_t nb;
        const unsigned char* p = rill_array_cell(a, i, &nb);
        for (int64_t k = 0; k < nb; k++) sum += p[k] * (uint64_t)(k + 1);
        sum += (uint64_t)nb;
      }
      cells += a->length;
    }
    cr_assert_eq(rc, RILL_END, "epoch %lld: %d %s", (long long)epoch, rc, err.message);
    cr_assert_eq(cells, 3000);
    if (epoch == 0) sum0 = sum;
    cr_assert_eq(sum, sum0, "epoch %lld: the same cells in another order give the same sum", (long long)epoch);
    rill_iter_stats_t st;
    rill_iter_stats(it, &st);
    cr_assert_gt(st.reuses, reuses_before, "epoch %lld reuses pooled buffers", (long long)epoch);
    reuses_before = st.reuses;
    if (epoch == 2) {
      allocs_after_2 = st.allocs;
      reuses_after_2 = st.reuses;
    }
    if (epoch == 9)
      cr_assert_lt(2 * (st.allocs - allocs_after_2), st.reuses - reuses_after_2,
                   "after warm-up the pools serve most buffers: %lld allocations, %lld reuses",
                   (long long)(st.allocs - allocs_after_2), (long long)(st.reuses - reuses_after_2));
  }
  rill_iter_free(it);
  rill_df_free(b);
  rill_df_free(sh);
  rill_df_free(df);
}

/* rill_iter_prefetch(n) starts about n rows (whole chunks), not the whole prefetch depth. */
Test(iter, prefetch_starts_n_rows) {
  counter_t c;
  counter_init(&c, 0);
  rill_df_t* df = make_src(256 * 8, &c, NULL);
  rill_error_t err = {0};
  rill_iter_t* it;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.prefetch = 256 * 6, .threads = 2}, &it, &err), err);
  RT_OK(rill_iter_prefetch(it, 1), *rill_iter_error(it));
  for (int i = 0; i < 2000 && atomic_load(&c.cells) < 256; i++) nanosleep(&(struct timespec){0, 1000000}, NULL);
  nanosleep(&(struct timespec){0, 20000000}, NULL);
  cr_assert_eq(atomic_load(&c.cells), 256, "one chunk started, %lld cells computed", (long long)atomic_load(&c.cells));
  RT_OK(rill_iter_prefetch(it, 257), *rill_iter_error(it)); /* two more chunks */
  for (int i = 0; i < 2000 && atomic_load(&c.cells) < 3 * 256; i++) nanosleep(&(struct timespec){0, 1000000}, NULL);
  nanosleep(&(struct timespec){0, 20000000}, NULL);
  cr_assert_eq(atomic_load(&c.cells), 3 * 256);
  RT_OK(rill_iter_prefetch(it, 0), *rill_iter_error(it));
  rill_row_t row;
  int64_t n = 0;
  while (rill_iter_next(it, &row, &err) == RILL_OK) n++;
  cr_assert_eq(n, 256 * 8);
  cr_assert_eq(atomic_load(&c.cells), 256 * 8, "every row computed once");
  rill_iter_free(it);
  rill_df_free(df);
}

/* Calls without an err parameter leave their message in rill_iter_error. */
Test(iter, error_of_calls_without_err) {
  counter_t c, c2;
  counter_init(&c, 0);
  counter_init(&c2, 0);
  rill_df_t* df = make_src(10, &c, NULL);
  rill_error_t err = {0};
  rill_df_t* df2 = make_src(12, &c2, NULL);
  rill_iter_t *it, *other;
  RT_OK(rill_iter_new(df, NULL, &it, &err), err);
  RT_OK(rill_iter_new(df2, NULL, &other, &err), err);
  const rill_error_t* e = rill_iter_error(it);
  cr_assert_eq(rill_iter_seek(it, 11), RILL_EINVAL);
  cr_assert(e->code == RILL_EINVAL && strstr(e->message, "rill_iter_seek: row 11 is outside 0..10"), "%s", e->message);
  cr_assert_eq(rill_iter_prefetch(it, -3), RILL_EINVAL);
  cr_assert(strstr(e->message, "rill_iter_prefetch: negative row count -3"), "%s", e->message);
  cr_assert_eq(rill_iter_save(it, NULL), RILL_EINVAL);
  cr_assert(strstr(e->message, "rill_iter_save: the state is NULL"), "%s", e->message);
  cr_assert_eq(rill_iter_restore(it, NULL), RILL_EINVAL);
  cr_assert(strstr(e->message, "rill_iter_restore: the state is NULL"), "%s", e->message);
  rill_iter_state_t st;
  RT_OK(rill_iter_save(it, &st), *e);
  st.cursor = 99;
  cr_assert_eq(rill_iter_restore(it, &st), RILL_EINVAL);
  cr_assert(strstr(e->message, "cursor 99 is outside 0..10"), "%s", e->message);
  RT_OK(rill_iter_save(other, &st), err);
  cr_assert_eq(rill_iter_restore(it, &st), RILL_EINVAL);
  cr_assert(strstr(e->message, "another dataframe or column selection"), "%s", e->message);
  cr_assert_eq(rill_iter_set_epoch(NULL, 1), RILL_EINVAL);
  cr_assert(rill_iter_error(NULL)->code == RILL_EINVAL && strstr(rill_iter_error(NULL)->message, "NULL"));
  rill_iter_free(other);
  rill_iter_free(it);
  rill_df_free(df2);
  rill_df_free(df);
}

/* A source that records, for the first batch of a cold start (rows [first, first + 8)),
 * how many of its rows are done, and counts the calls for other rows that began before. */
typedef struct cold_start {
  _Atomic int64_t first;      /* first row of the batch the consumer waits for */
  _Atomic int64_t first_done; /* its rows computed */
  _Atomic int64_t early;      /* calls for other rows begun before it was done */
  _Atomic int64_t calls;
} cold_start_t;

static int src_cold(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* ex, void* ctx, rill_error_t* err) {
  cold_start_t* c = ctx;
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), n);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc failed");
  atomic_fetch_add(&c->calls, 1);
  int64_t f = atomic_load(&c->first);
  int mine = rows[0] >= f && rows[0] < f + 8;
  if (!mine && atomic_load(&c->first_done) < 8) atomic_fetch_add(&c->early, 1);
  if (mine) nanosleep(&(struct timespec){0, 2000000}, NULL); /* 2 ms: time for others to start */
  for (int64_t i = 0; i < n; i++) ((int64_t*)out->data)[i] = rows[i];
  if (mine) atomic_fetch_add(&c->first_done, n);
  return RILL_OK;
}

/* Reads batches from..7 of the cold-start pipeline (8 rows each), then its end. */
static void cold_read_rest(rill_iter_t* it, int64_t from) {
  rill_error_t err;
  rill_row_t row;
  for (int64_t k = from; k < 8; k++) {
    RT_OK(rill_iter_next(it, &row, &err), err);
    cr_assert_eq(row.index, k);
    cr_assert_eq(((const int64_t*)rill_row_get(&row, 0)->data)[0], k * 8);
  }
  cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
}

/* With nothing in flight (a new iterator, a seek, a new epoch) the batch the consumer waits
 * for is computed before any prefetched one begins: every thread helps with it. */
Test(iter, first_batch_of_a_cold_start_is_computed_alone) {
  cold_start_t c = {0};
  rill_error_t err;
  rill_df_t* df;
  RT_OK(rill_df_new(64, &df, &err), err);
  rill_stage_opts_t o = {.grain = 2}; /* four tasks per batch of 8 */
  cr_assert_eq(rill_df_add_source(df, "v", rill_type_scalar(RILL_INT64), src_cold, &c, NULL, &o, &err), 0, "%s",
               err.message);
  rill_df_t* b = batch_of(df, 0, 8, NULL);
  rill_iter_t* it = open_iter(b, &(rill_iter_opts_t){.prefetch = 4, .threads = 2});
  rill_row_t row;
  RT_OK(rill_iter_next(it, &row, &err), err);
  cr_assert_eq(row.index, 0);
  cr_assert_eq(((const int64_t*)rill_row_get(&row, 0)->data)[7], 7);
  cr_assert_eq(atomic_load(&c.first_done), 8);
  cr_assert_eq(atomic_load(&c.early), 0, "%lld calls for later batches began before the first batch was ready",
               (long long)atomic_load(&c.early));
  /* the prefetched batches follow */
  cold_read_rest(it, 1);
  cr_assert_eq(atomic_load(&c.calls), 32, "each row computed once");
  /* a seek is a cold start too */
  atomic_store(&c.first, 40);
  atomic_store(&c.first_done, 0);
  RT_OK(rill_iter_seek(it, 5), *rill_iter_error(it));
  RT_OK(rill_iter_next(it, &row, &err), err);
  cr_assert_eq(row.index, 5);
  cr_assert_eq(atomic_load(&c.early), 0);
  /* drain the batches prefetched after the seek, so none is in flight when the counters reset */
  cold_read_rest(it, 6);
  /* and so is a new epoch */
  atomic_store(&c.first, 0);
  atomic_store(&c.first_done, 0);
  RT_OK(rill_iter_set_epoch(it, 1), *rill_iter_error(it));
  RT_OK(rill_iter_next(it, &row, &err), err);
  cr_assert_eq(row.index, 0);
  cr_assert_eq(atomic_load(&c.early), 0);
  rill_iter_free(it);
  rill_df_free(b);
  rill_df_free(df);
}

/* A row error of a stage beneath a shuffle or shard view comes in its place among the
 * iterated rows, with the iterated row in err.row (the stage's own row in the message). */
Test(iter, raise_beneath_a_view_reports_the_iterated_row) {
  for (int v = 0; v < 3; v++) {
    counter_t cs;
    counter_failing(&cs, 0, 10); /* base row 10 fails; cells are base row ids */
    rill_stage_opts_t o = {.grain = 4};
    rill_df_t* df = make_src(32, &cs, &o);
    rill_error_t err;
    rill_df_t* view;
    if (v == 0) RT_OK(rill_df_shuffle(df, 3, &view, &err), err);
    else if (v == 1) RT_OK(rill_df_shard(df, 0, 2, &view, &err), err); /* rows 0, 2, ..., 10 is its 6th */
    else {
      rill_df_t* sh;
      RT_OK(rill_df_shuffle(df, 4, &sh, &err), err);
      RT_OK(rill_df_shard(sh, 1, 3, &view, &err), err);
      rill_df_free(sh);
    }
    int64_t n = rill_df_rows(view);
    for (int threads = 0; threads < 2; threads++) {
      rill_iter_t* it = open_iter(view, &(rill_iter_opts_t){.threads = threads ? 2 : RILL_THREADS_NONE});
      rill_row_t row;
      int64_t got = 0, errors = 0, expect = 0;
      for (int64_t i = 0; i < n; i++) {
        int rc = rill_iter_next(it, &row, &err);
        if (rc == RILL_EFORMAT) {
          errors++;
          cr_assert_eq(err.row, i, "view %d: the error came at row %lld with err.row %lld", v, (long long)i,
                       (long long)err.row);
          char want[64];
          snprintf(want, sizeof want, "row %lld (the stage's row 10)", (long long)i);
          cr_assert(strstr(err.message, want) && strstr(err.message, "bad value in row 10"), "%s", err.message);
          continue;
        }
        RT_OK(rc, err);
        cr_assert_eq(row.index, i, "view %d: row %lld came at %lld", v, (long long)row.index, (long long)i);
        cr_assert_neq(((const int64_t*)rill_row_get(&row, 0)->data)[0], 10);
        got++;
      }
      cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
      /* whether base row 10 is in the view: a pass without the failure says */
      cs.fail_row = -1;
      rill_iter_t* ref = open_iter(view, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE});
      while (rill_iter_next(ref, &row, &err) == RILL_OK) expect += ((const int64_t*)rill_row_get(&row, 0)->data)[0] == 10;
      rill_iter_free(ref);
      cs.fail_row = 10;
      cr_assert_eq(errors, expect, "view %d: %lld errors", v, (long long)errors);
      cr_assert_eq(got + errors, n);
      rill_iter_free(it);
    }
    rill_df_free(view);
    rill_df_free(df);
  }
}

/* The same after an earlier stage dropped a row (SKIP): the cells were compacted, and the
 * error still names the iterated row it stands for. */
Test(iter, raise_after_a_skip_beneath_a_shuffle) {
  counter_t cs, cm;
  counter_failing(&cs, 0, 3);  /* the source skips base row 3 */
  counter_failing(&cm, 0, 10); /* the map fails on base row 10 */
  rill_stage_opts_t skip = {.on_error = RILL_ON_ERROR_SKIP};
  rill_df_t* df = make_src(32, &cs, &skip);
  add_map(df, "m", 0, &cm, NULL);
  rill_error_t err;
  rill_df_t* sh;
  RT_OK(rill_df_shuffle(df, 3, &sh, &err), err);
  /* the base row of each iterated row, from a pass without failures */
  cs.fail_row = cm.fail_row = -1;
  int64_t base[32];
  rill_iter_t* ref = open_iter(sh, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE});
  rill_row_t row;
  for (int i = 0; i < 32; i++) {
    RT_OK(rill_iter_next(ref, &row, &err), err);
    base[i] = ((const int64_t*)rill_row_get(&row, 0)->data)[0];
  }
  rill_iter_free(ref);
  cs.fail_row = 3;
  cm.fail_row = 10;
  rill_iter_t* it = open_iter(sh, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE});
  int64_t errors = 0;
  for (int64_t i = 0; i < 32; i++) {
    if (base[i] == 3) continue; /* skipped: never handed out */
    int rc = rill_iter_next(it, &row, &err);
    if (base[i] == 10) {
      cr_assert_eq(rc, RILL_EFORMAT, "row %lld: %d", (long long)i, rc);
      cr_assert_eq(err.row, i);
      char want[64];
      snprintf(want, sizeof want, "row %lld (the stage's row 10)", (long long)i);
      cr_assert(strstr(err.message, want), "%s", err.message);
      errors++;
      continue;
    }
    RT_OK(rc, err);
    cr_assert_eq(row.index, i);
    cr_assert_eq(((const int64_t*)rill_row_get(&row, 1)->data)[0], base[i]);
  }
  cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
  cr_assert_eq(errors, 1);
  expect_stats(it, 30, ANY, 1, ANY, 1);
  rill_iter_free(it);
  rill_df_free(sh);
  rill_df_free(df);
}

/* ---- next_epoch: prefetch past the end of an epoch into the next one */

/* A source whose cell is row id * 100 + epoch, counting its cells per epoch (0..7) and
 * failing on one (epoch, row) under RILL_ON_ERROR_RAISE. */
typedef struct by_epoch {
  _Atomic int64_t cells[8];
  int64_t fail_epoch, fail_row;
  int slow; /* each call takes 1 ms: chunks worth a worker thread */
} by_epoch_t;

static int src_epoch(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* ex, void* ctx, rill_error_t* err) {
  by_epoch_t* c = ctx;
  int64_t e = rill_exec_epoch(ex);
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), n);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc failed");
  if (e >= 0 && e < 8) atomic_fetch_add(&c->cells[e], n);
  if (c->slow) nanosleep(&(struct timespec){0, 1000000}, NULL);
  for (int64_t i = 0; i < n; i++) {
    if (e == c->fail_epoch && rows[i] == c->fail_row) {
      err->row = i;
      return rill_error_set(err, RILL_EFORMAT, "bad row %lld of epoch %lld", (long long)rows[i], (long long)e);
    }
    ((int64_t*)out->data)[i] = rows[i] * 100 + e;
  }
  return RILL_OK;
}

/* 64 rows in chunks of 8 (grain), shuffled with seed 5. */
static rill_df_t* epoch_frame(by_epoch_t* c, rill_df_t** base) {
  memset(c, 0, sizeof *c);
  c->fail_epoch = -1;
  rill_error_t err;
  RT_OK(rill_df_new(64, base, &err), err);
  rill_stage_opts_t o = {.grain = 8};
  cr_assert_eq(rill_df_add_source(*base, "v", rill_type_scalar(RILL_INT64), src_epoch, c, NULL, &o, &err), 0, "%s",
               err.message);
  rill_df_t* sh;
  RT_OK(rill_df_shuffle(*base, 5, &sh, &err), err);
  return sh;
}

/* The values of rows [from, 64) of `epoch` from an iterator without next_epoch. */
static void epoch_reference(rill_df_t* df, int64_t epoch, int64_t* want) {
  rill_error_t err;
  rill_iter_t* it = open_iter(df, &(rill_iter_opts_t){.epoch = epoch, .threads = RILL_THREADS_NONE});
  rill_row_t row;
  for (int i = 0; i < 64; i++) {
    RT_OK(rill_iter_next(it, &row, &err), err);
    want[i] = ((const int64_t*)rill_row_get(&row, 0)->data)[0];
    cr_assert_eq(want[i] % 100, epoch);
  }
  cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
  rill_iter_free(it);
}

/* Reads rows [from, to) of the iterator's current epoch and checks them against `want`. */
static void expect_rows(rill_iter_t* it, const int64_t* want, int64_t from, int64_t to) {
  rill_error_t err;
  rill_row_t row;
  for (int64_t i = from; i < to; i++) {
    RT_OK(rill_iter_next(it, &row, &err), err);
    cr_assert_eq(row.index, i);
    cr_assert_eq(((const int64_t*)rill_row_get(&row, 0)->data)[0], want[i], "row %lld: %lld, want %lld", (long long)i,
                 (long long)((const int64_t*)rill_row_get(&row, 0)->data)[0], (long long)want[i]);
  }
}

static void wait_cells(_Atomic int64_t* cells, int64_t want) {
  for (int i = 0; i < 2000 && atomic_load(cells) < want; i++) nanosleep(&(struct timespec){0, 1000000}, NULL);
}

Test(iter, next_epoch_runs_ahead_and_set_epoch_keeps_it) {
  by_epoch_t c;
  rill_df_t* base;
  rill_df_t* sh = epoch_frame(&c, &base);
  int64_t want[8][64];
  for (int e = 0; e < 8; e++) epoch_reference(sh, e, want[e]);
  for (int e = 0; e < 8; e++) atomic_store(&c.cells[e], 0);
  c.slow = 1;
  rill_error_t err;
  rill_row_t row;
  /* prefetch 24 rows: 3 chunks ahead, 4 slots */
  rill_iter_t* it = open_iter(sh, &(rill_iter_opts_t){.prefetch = 24, .threads = 2, .next_epoch = 1});
  expect_rows(it, want[0], 0, 64);
  for (int k = 0; k < 3; k++) cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END, "the epoch is over");
  cr_assert_eq(rill_iter_epoch(it), 0);
  /* the next epoch's first chunks were started before set_epoch: the four slots' worth */
  wait_cells(&c.cells[1], 32);
  nanosleep(&(struct timespec){0, 20000000}, NULL);
  cr_assert_eq(atomic_load(&c.cells[1]), 32, "%lld rows of epoch 1 computed ahead", (long long)atomic_load(&c.cells[1]));
  cr_assert_eq(atomic_load(&c.cells[0]), 64);
  /* set_epoch(1) keeps them: each row of epoch 1 is computed once */
  RT_OK(rill_iter_set_epoch(it, 1), *rill_iter_error(it));
  cr_assert_eq(rill_iter_epoch(it), 1);
  expect_rows(it, want[1], 0, 64);
  cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
  cr_assert_eq(atomic_load(&c.cells[1]), 64, "epoch 1 computed %lld cells", (long long)atomic_load(&c.cells[1]));
  rill_iter_state_t st;
  RT_OK(rill_iter_save(it, &st), err);
  cr_assert(st.epoch == 1 && st.cursor == 64, "saved epoch %lld cursor %lld", (long long)st.epoch,
            (long long)st.cursor);
  /* another epoch than the next one drops what ran ahead (epoch 2) and starts cold */
  wait_cells(&c.cells[2], 8);
  RT_OK(rill_iter_set_epoch(it, 5), *rill_iter_error(it));
  int64_t ahead2 = atomic_load(&c.cells[2]);
  cr_assert(ahead2 >= 8 && ahead2 <= 32, "%lld rows of epoch 2", (long long)ahead2);
  expect_rows(it, want[5], 0, 10);
  /* set_epoch(next) in the middle of an epoch: nothing ran ahead yet, it starts at row 0 */
  RT_OK(rill_iter_set_epoch(it, 6), *rill_iter_error(it));
  expect_rows(it, want[6], 0, 64);
  cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
  cr_assert_eq(atomic_load(&c.cells[2]), ahead2, "epoch 2 went on after it was dropped");
  /* a seek after the end (epoch 7 running ahead) stays in the current epoch */
  RT_OK(rill_iter_seek(it, 60), *rill_iter_error(it));
  expect_rows(it, want[6], 60, 64);
  cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
  /* so does set_epoch of the same epoch: it starts over */
  RT_OK(rill_iter_set_epoch(it, 6), *rill_iter_error(it));
  expect_rows(it, want[6], 0, 30);
  RT_OK(rill_iter_save(it, &st), err);
  expect_rows(it, want[6], 30, 64);
  cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
  /* and a restore */
  RT_OK(rill_iter_restore(it, &st), *rill_iter_error(it));
  cr_assert_eq(rill_iter_epoch(it), 6);
  expect_rows(it, want[6], 30, 64);
  cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
  /* the run-ahead epoch 7, after all of that, is still the right one */
  RT_OK(rill_iter_set_epoch(it, 7), *rill_iter_error(it));
  expect_rows(it, want[7], 0, 64);
  cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
  rill_iter_free(it); /* with epoch 8's chunks in flight */
  rill_df_free(sh);
  rill_df_free(base);
}

Test(iter, next_epoch_is_off_by_default_and_checked) {
  by_epoch_t c;
  rill_df_t* base;
  rill_df_t* sh = epoch_frame(&c, &base);
  rill_error_t err;
  rill_row_t row;
  c.slow = 1;
  rill_iter_t* it = open_iter(sh, &(rill_iter_opts_t){.prefetch = 24, .threads = 2});
  int64_t n = 0;
  while (rill_iter_next(it, &row, &err) == RILL_OK) n++;
  cr_assert_eq(n, 64);
  nanosleep(&(struct timespec){0, 30000000}, NULL);
  cr_assert_eq(atomic_load(&c.cells[1]), 0, "a single pass computed %lld rows past its end",
               (long long)atomic_load(&c.cells[1]));
  cr_assert_eq(atomic_load(&c.cells[0]), 64);
  rill_iter_free(it);
  /* only 0 and 1 */
  rill_iter_t* bad = NULL;
  cr_assert_eq(rill_iter_new(sh, &(rill_iter_opts_t){.next_epoch = 2}, &bad, &err), RILL_EINVAL);
  cr_assert(strstr(err.message, "rill_iter_new: next_epoch is 2 (0 or 1)"), "%s", err.message);
  cr_assert_null(bad);
  cr_assert_eq(rill_iter_new(sh, &(rill_iter_opts_t){.next_epoch = -1}, &bad, &err), RILL_EINVAL);
  cr_assert_null(bad);
  /* without prefetch nothing runs ahead; without threads nothing is computed ahead */
  int64_t want[64];
  epoch_reference(sh, 1, want);
  rill_iter_opts_t modes[2] = {{.prefetch = RILL_PREFETCH_NONE, .threads = 2, .next_epoch = 1},
                               {.prefetch = 24, .threads = RILL_THREADS_NONE, .next_epoch = 1}};
  for (int m = 0; m < 2; m++) {
    for (int e = 0; e < 8; e++) atomic_store(&c.cells[e], 0);
    it = open_iter(sh, &modes[m]);
    while (rill_iter_next(it, &row, &err) == RILL_OK) {
    }
    nanosleep(&(struct timespec){0, 20000000}, NULL);
    cr_assert_eq(atomic_load(&c.cells[1]), 0, "mode %d: %lld rows computed ahead", m, (long long)atomic_load(&c.cells[1]));
    RT_OK(rill_iter_set_epoch(it, 1), *rill_iter_error(it));
    expect_rows(it, want, 0, 64);
    cr_assert_eq(atomic_load(&c.cells[1]), 64);
    rill_iter_free(it);
  }
  rill_df_free(sh);
  rill_df_free(base);
}

/* A row that fails in a chunk computed ahead is reported in its own epoch, at its row, once. */
Test(iter, next_epoch_error_of_a_chunk_run_ahead) {
  by_epoch_t c;
  rill_df_t* base;
  rill_df_t* sh = epoch_frame(&c, &base);
  int64_t want[64];
  epoch_reference(sh, 1, want);
  int64_t bad_row = -1; /* the view row whose parent row fails in epoch 1: the 3rd of epoch 1 */
  c.fail_epoch = 1;
  c.fail_row = want[2] / 100;
  rill_error_t err;
  rill_row_t row;
  c.slow = 1;
  rill_iter_t* it = open_iter(sh, &(rill_iter_opts_t){.prefetch = 24, .threads = 2, .next_epoch = 1});
  int64_t n = 0;
  int rc;
  while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) n++;
  cr_assert_eq(rc, RILL_END, "epoch 0 ended with %d: %s", rc, err.message);
  cr_assert_eq(n, 64);
  wait_cells(&c.cells[1], 8);
  RT_OK(rill_iter_set_epoch(it, 1), *rill_iter_error(it));
  expect_rows(it, want, 0, 2);
  rc = rill_iter_next(it, &row, &err);
  cr_assert_eq(rc, RILL_EFORMAT, "row 2 of epoch 1: %d (%s), index %lld", rc, err.message, (long long)row.index);
  bad_row = err.row;
  cr_assert_eq(bad_row, 2, "error at row %lld", (long long)bad_row);
  char msg[96];
  snprintf(msg, sizeof msg, "row 2 (the stage's row %lld), column 'v' (stage 'v'): bad row %lld of epoch 1", (long long)c.fail_row,
           (long long)c.fail_row);
  cr_assert(strstr(err.message, msg), "%s", err.message);
  expect_rows(it, want, 3, 64);
  cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
  rill_iter_stats_t st;
  rill_iter_stats(it, &st);
  cr_assert_eq(st.errors, 1);
  rill_iter_free(it);
  rill_df_free(sh);
  rill_df_free(base);
}

/* An empty dataframe has nothing to run ahead into. */
Test(iter, next_epoch_of_an_empty_dataframe) {
  rill_error_t err;
  rill_df_t* df;
  RT_OK(rill_df_new(0, &df, &err), err);
  by_epoch_t c = {0};
  cr_assert_eq(rill_df_add_source(df, "v", rill_type_scalar(RILL_INT64), src_epoch, &c, NULL, NULL, &err), 0);
  rill_iter_t* it = open_iter(df, &(rill_iter_opts_t){.prefetch = 4, .threads = 2, .next_epoch = 1});
  rill_row_t row;
  for (int e = 0; e < 3; e++) {
    cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
    cr_assert_eq(rill_iter_next(it, &row, &err), RILL_END);
    RT_OK(rill_iter_set_epoch(it, e + 1), *rill_iter_error(it));
  }
  rill_iter_free(it);
  rill_df_free(df);
}
