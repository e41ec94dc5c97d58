/* Worker threads: determinism across thread counts and prefetch depths, stages split
 * across threads, serial stages, several iterators at once. Also run under ThreadSanitizer
 * (make tsan). */
#include <pthread.h>

#include "engine_common.h"

enum { NROWS = 3000 };

/* Iterates a shuffled pipeline with a random map (row mode or batched) and returns the
 * values in order. */
static void random_run(int threads, int prefetch, int batched, double* out) {
  counter_t cs;
  counter_init(&cs, 0);
  rill_df_t* df = make_src(NROWS, &cs, NULL);
  rill_error_t err;
  int in = 0;
  rill_stage_opts_t o = {.grain = 128};
  int r = rill_df_map(df, "r", rill_type_scalar(RILL_FLOAT64), &in, 1, map_rand, NULL, NULL, &o, &err);
  cr_assert_eq(r, 1, "%s", err.message);
  rill_df_t *sh, *top;
  RT_OK(rill_df_shuffle(df, 11, &sh, &err), err);
  if (batched) {
    RT_OK(rill_df_batch(sh, &r, 1, 512, NULL, &top, &err), err);
  } else {
    top = sh;
  }
  rill_iter_t* it;
  int col = batched ? 0 : r;
  RT_OK(rill_iter_new(top, &(rill_iter_opts_t){.threads = threads, .prefetch = prefetch, .seed = 5, .epoch = 2,
                                               .columns = &col, .ncolumns = 1},
                      &it, &err),
        err);
  rill_row_t row;
  int64_t n = 0;
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    const rill_array_t* a = rill_row_get(&row, 0);
    for (int64_t i = 0; i < a->length; i++) out[n++] = ((const double*)a->data)[i];
  }
  cr_assert_eq(n, NROWS);
  rill_iter_free(it);
  if (batched) rill_df_free(top);
  rill_df_free(sh);
  rill_df_free(df);
}

Test(threads, random_maps_do_not_depend_on_threads_or_prefetch) {
  static double ref[NROWS], got[NROWS];
  for (int batched = 0; batched <= 1; batched++) {
    random_run(RILL_THREADS_NONE, RILL_PREFETCH_NONE, batched, ref);
    int configs[4][2] = {{1, RILL_PREFETCH_NONE}, {4, 8}, {1, 8}, {4, RILL_PREFETCH_NONE}};
    for (int c = 0; c < 4; c++) {
      random_run(configs[c][0], configs[c][1], batched, got);
      for (int i = 0; i < NROWS; i++)
        cr_assert_eq(got[i], ref[i], "batched %d, threads %d, prefetch %d: row %d differs", batched, configs[c][0],
                     configs[c][1], i);
    }
  }
  /* and the values are random: not all equal to their integer part */
  int frac = 0;
  for (int i = 0; i < NROWS; i++) frac += ref[i] != (double)(int64_t)ref[i];
  cr_assert(frac > NROWS / 2);
}

Test(threads, split_stage_with_skips_and_nulls) {
  counter_t cs, cm, cn;
  counter_init(&cs, 0);
  counter_init(&cm, 1);
  counter_init(&cn, 0);
  cm.fail_row = 700;
  cn.fail_row = 1500;
  rill_stage_opts_t src_o = {.grain = 100};
  rill_df_t* df = make_src(4000, &cs, &src_o);
  rill_stage_opts_t skip = {.on_error = RILL_ON_ERROR_SKIP, .grain = 100};
  int m = add_map(df, "m", 0, &cm, &skip);
  rill_stage_opts_t nul = {.on_error = RILL_ON_ERROR_NULL, .grain = 130};
  int k = add_map(df, "k", m, &cn, &nul);
  rill_error_t err;
  int cols[2] = {m, k};
  rill_df_t* b;
  RT_OK(rill_df_batch(df, cols, 2, 1000, NULL, &b, &err), err);
  rill_iter_t* it;
  RT_OK(rill_iter_new(b, &(rill_iter_opts_t){.threads = 3, .prefetch = 4}, &it, &err), err);
  rill_row_t row;
  int64_t batch = 0;
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    const rill_array_t* a = rill_row_get(&row, 0);
    const rill_array_t* c = rill_row_get(&row, 1);
    cr_assert_eq(a->length, batch == 0 ? 999 : 1000);
    cr_assert_eq(c->length, a->length);
    cr_assert_eq(c->null_count, batch == 1 ? 1 : 0);
    int64_t j = 0;
    for (int64_t r = batch * 1000; r < batch * 1000 + 1000; r++) {
      if (r == 700) continue;
      cr_assert_eq(((const int64_t*)a->data)[j], r + 1, "batch %lld cell %lld", (long long)batch, (long long)j);
      if (r == 1500) {
        cr_assert_eq(rill_array_is_valid(c, j), 0);
      } else {
        cr_assert(rill_array_is_valid(c, j));
        cr_assert_eq(((const int64_t*)c->data)[j], r + 1);
      }
      j++;
    }
    batch++;
  }
  cr_assert_eq(batch, 4);
  rill_iter_stats_t st;
  rill_iter_stats(it, &st);
  cr_assert_eq(st.skipped, 1);
  cr_assert_eq(st.nulled, 1);
  cr_assert_eq(st.cells, 3999);
  rill_iter_free(it);
  rill_df_free(b);
  rill_df_free(df);
}

Test(threads, serial_stage_runs_one_call_at_a_time) {
  counter_t cs, cm;
  counter_init(&cs, 0);
  counter_init(&cm, 0);
  rill_stage_opts_t o = {.where = RILL_STAGE_CPU_SERIAL, .grain = 1};
  rill_df_t* df = make_src(300, &cs, NULL);
  add_map(df, "m", 0, &cm, &o);
  rill_error_t err;
  rill_iter_t* it;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = 4, .prefetch = 16}, &it, &err), err);
  rill_row_t row;
  int64_t n = 0;
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    cr_assert_eq(((const int64_t*)rill_row_get(&row, 1)->data)[0], n);
    n++;
  }
  cr_assert_eq(n, 300);
  cr_assert_eq(atomic_load(&cm.max_inflight), 1);
  rill_iter_free(it);
  rill_df_free(df);
}

typedef struct job {
  rill_df_t* df;
  int64_t sum;
} job_t;

static void* consume(void* arg) {
  job_t* j = arg;
  rill_error_t err;
  rill_iter_t* it;
  if (rill_iter_new(j->df, &(rill_iter_opts_t){.threads = 2, .prefetch = 3}, &it, &err) != RILL_OK) return NULL;
  rill_row_t row;
  while (rill_iter_next(it, &row, &err) == RILL_OK) j->sum += ((const int64_t*)rill_row_get(&row, 1)->data)[0];
  rill_iter_free(it);
  return NULL;
}

Test(threads, iterators_on_several_threads) {
  counter_t cs, cm;
  counter_init(&cs, 0);
  counter_init(&cm, 1);
  rill_df_t* df = make_src(2000, &cs, NULL);
  add_map(df, "m", 0, &cm, NULL);
  pthread_t th[3];
  job_t jobs[3];
  for (int i = 0; i < 3; i++) {
    jobs[i] = (job_t){df, 0};
    cr_assert_eq(pthread_create(&th[i], NULL, consume, &jobs[i]), 0);
  }
  for (int i = 0; i < 3; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 3; i++) cr_assert_eq(jobs[i].sum, 2000LL * 1999 / 2 + 2000);
  rill_df_free(df);
}

Test(threads, free_while_prefetching_and_early_seek) {
  counter_t cs;
  counter_init(&cs, 0);
  rill_stage_opts_t o = {.grain = 7};
  rill_df_t* df = make_src(5000, &cs, &o);
  rill_error_t err;
  for (int round = 0; round < 20; round++) {
    rill_iter_t* it;
    RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = 3, .prefetch = 40}, &it, &err), err);
    rill_row_t row;
    RT_OK(rill_iter_next(it, &row, &err), err);
    if (round % 2) {
      RT_OK(rill_iter_seek(it, 4000), err);
      RT_OK(rill_iter_next(it, &row, &err), err);
      cr_assert_eq(row.index, 4000);
      cr_assert_eq(((const int64_t*)rill_row_get(&row, 0)->data)[0], 4000);
    }
    rill_iter_free(it); /* with work still queued and running */
  }
  rill_df_free(df);
}
