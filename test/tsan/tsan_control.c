/* ThreadSanitizer stress of iterator control while chunks are prefetched on 2-4 threads:
 * seek and set_epoch mid-stream, SKIP / NULL / RAISE errors mid-stream, save/restore into a
 * second iterator, a reduce under prefetch. Prints "N passed, N failed" last; exits non-zero
 * on a failure. */
#include "tsan_common.h"

enum { N = 2000 };

/* base: src (3*row), plus (src + 1, may fail); returns the base dataframe. */
static rill_df_t* make_base(stage_ctx_t* sc, stage_ctx_t* pc, rill_on_error_t src_policy, rill_on_error_t plus_policy) {
  rill_error_t err;
  rill_df_t* df = NULL;
  CHECK_OK(rill_df_new(N, &df, &err), err);
  rill_stage_opts_t so = {.on_error = src_policy, .grain = 32}, po = {.on_error = plus_policy, .grain = 24};
  int src = rill_df_add_source(df, "src", rill_type_scalar(RILL_INT64), tsrc, sc, NULL, &so, &err);
  int plus = rill_df_map(df, "plus", rill_type_scalar(RILL_INT64), &src, 1, tplus, pc, NULL, &po, &err);
  CHECK(src == 0 && plus == 1, "columns %d %d: %s", src, plus, err.message);
  return df;
}

static void test_seek_and_epochs(void) {
  stage_ctx_t sc = {0}, pc = {0};
  rill_df_t* base = make_base(&sc, &pc, RILL_ON_ERROR_RAISE, RILL_ON_ERROR_RAISE);
  rill_df_t* sh;
  rill_error_t err;
  CHECK_OK(rill_df_shuffle(base, 5, &sh, &err), err);
  for (int threads = 2; threads <= 4; threads++) {
    rill_iter_t *it, *ref;
    int col = 1;
    rill_iter_opts_t o = {.threads = threads, .prefetch = 8 * 32, .columns = &col, .ncolumns = 1};
    CHECK_OK(rill_iter_new(sh, &o, &it, &err), err);
    rill_iter_opts_t ro = {.threads = RILL_THREADS_NONE, .prefetch = RILL_PREFETCH_NONE, .columns = &col,
                           .ncolumns = 1};
    CHECK_OK(rill_iter_new(sh, &ro, &ref, &err), err);
    uint64_t x = 88172645463325252ULL + (uint64_t)threads;
    for (int step = 0; step < 40; step++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      rill_row_t row, rrow;
      if (step % 7 == 3) {
        int64_t e = (int64_t)(x % 5);
        CHECK_OK(rill_iter_set_epoch(it, e), err);
        CHECK_OK(rill_iter_set_epoch(ref, e), err);
      } else {
        int64_t pos = (int64_t)(x % N);
        CHECK(rill_iter_seek(it, pos) == RILL_OK && rill_iter_seek(ref, pos) == RILL_OK, "seek %lld", (long long)pos);
      }
      int k = 1 + (int)(x % 97);
      for (int i = 0; i < k; i++) {
        int a = rill_iter_next(it, &row, &err);
        int b = rill_iter_next(ref, &rrow, &err);
        CHECK(a == b, "step %d: status %d vs reference %d", step, a, b);
        if (a != RILL_OK || b != RILL_OK) break;
        CHECK(row.index == rrow.index && i64_at(rill_row_get(&row, 0), 0) == i64_at(rill_row_get(&rrow, 0), 0),
              "step %d: row %lld differs from the reference", step, (long long)row.index);
      }
    }
    rill_iter_free(it);
    rill_iter_free(ref);
  }
  rill_df_free(sh);
  rill_df_free(base);
}

static void test_errors(void) {
  rill_error_t err;
  /* SKIP in the source: rows 7, 57, 107, ... are dropped */
  {
    stage_ctx_t sc = {.fail_mod = 50, .fail_rem = 7}, pc = {0};
    rill_df_t* df = make_base(&sc, &pc, RILL_ON_ERROR_SKIP, RILL_ON_ERROR_RAISE);
    rill_iter_t* it;
    CHECK_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = 3, .prefetch = 8 * 32}, &it, &err), err);
    rill_row_t row;
    int64_t n = 0, bad = 0;
    while (rill_iter_next(it, &row, &err) == RILL_OK) {
      n++;
      bad += row.index % 50 == 7 || i64_at(rill_row_get(&row, 1), 0) != 3 * row.index + 1;
    }
    rill_iter_stats_t st;
    rill_iter_stats(it, &st);
    CHECK(n == N - N / 50 && bad == 0, "skip: %lld rows, %lld wrong", (long long)n, (long long)bad);
    CHECK(st.skipped == N / 50, "skip: %lld counted", (long long)st.skipped);
    rill_iter_free(it);
    rill_df_free(df);
  }
  /* NULL in the map: rows 3, 43, 83, ... are null */
  {
    stage_ctx_t sc = {0}, pc = {.fail_mod = 40, .fail_rem = 3};
    rill_df_t* df = make_base(&sc, &pc, RILL_ON_ERROR_RAISE, RILL_ON_ERROR_NULL);
    rill_iter_t* it;
    CHECK_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = 4, .prefetch = 8 * 24}, &it, &err), err);
    rill_row_t row;
    int64_t n = 0, nulls = 0, bad = 0;
    while (rill_iter_next(it, &row, &err) == RILL_OK) {
      const rill_array_t* a = rill_row_get(&row, 1);
      int null = !rill_array_is_valid(a, 0);
      nulls += null;
      bad += null != (row.index % 40 == 3) || (!null && i64_at(a, 0) != 3 * row.index + 1);
      n++;
    }
    CHECK(n == N && nulls == N / 40 && bad == 0, "null: %lld rows, %lld nulls, %lld wrong", (long long)n,
          (long long)nulls, (long long)bad);
    rill_iter_free(it);
    rill_df_free(df);
  }
  /* RAISE in the map: next returns the error for rows 11, 71, ... and goes on */
  {
    stage_ctx_t sc = {0}, pc = {.fail_mod = 60, .fail_rem = 11};
    rill_df_t* df = make_base(&sc, &pc, RILL_ON_ERROR_RAISE, RILL_ON_ERROR_RAISE);
    rill_iter_t* it;
    CHECK_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = 2, .prefetch = 8 * 24}, &it, &err), err);
    rill_row_t row;
    int64_t n = 0, errors = 0, bad = 0, expect = 0;
    int r;
    while ((r = rill_iter_next(it, &row, &err)) != RILL_END) {
      if (r == RILL_OK) {
        n++;
        bad += row.index % 60 == 11;
        continue;
      }
      errors++;
      char want[64];
      snprintf(want, sizeof want, "bad map row %lld", (long long)(expect * 60 + 11));
      bad += r != RILL_EFORMAT || err.code != RILL_EFORMAT || err.row != expect * 60 + 11 || err.column != 1 ||
             !strstr(err.message, want) || !strstr(err.message, "plus");
      expect++;
    }
    int64_t want_errors = (N - 11 + 59) / 60;
    CHECK(n == N - want_errors && errors == want_errors && bad == 0, "raise: %lld rows, %lld errors, %lld wrong",
          (long long)n, (long long)errors, (long long)bad);
    rill_iter_free(it);
    rill_df_free(df);
  }
}

static void test_save_restore(void) {
  stage_ctx_t sc = {0}, pc = {0};
  rill_df_t* base = make_base(&sc, &pc, RILL_ON_ERROR_RAISE, RILL_ON_ERROR_RAISE);
  rill_df_t *sh, *b;
  rill_error_t err;
  CHECK_OK(rill_df_shuffle(base, 9, &sh, &err), err);
  int col = 1;
  CHECK_OK(rill_df_batch(sh, &col, 1, 16, NULL, &b, &err), err);
  for (int k = 0; k < 6; k++) {
    rill_iter_t *a, *c;
    CHECK_OK(rill_iter_new(b, &(rill_iter_opts_t){.threads = 2 + k % 3, .prefetch = 8, .epoch = k}, &a, &err), err);
    rill_row_t row;
    for (int i = 0; i < 5 + 3 * k; i++) CHECK_OK(rill_iter_next(a, &row, &err), err);
    rill_iter_state_t st;
    CHECK_OK(rill_iter_save(a, &st), err);
    CHECK_OK(rill_iter_new(b, &(rill_iter_opts_t){.threads = 4 - k % 3, .prefetch = 8}, &c, &err), err);
    CHECK_OK(rill_iter_restore(c, &st), err);
    for (int i = 0; i < 20; i++) {
      rill_row_t rc;
      int x = rill_iter_next(a, &row, &err), y = rill_iter_next(c, &rc, &err);
      CHECK(x == RILL_OK && y == RILL_OK, "restore %d: %d %d", k, x, y);
      if (x != RILL_OK || y != RILL_OK) break;
      const rill_array_t *p = rill_row_get(&row, 0), *q = rill_row_get(&rc, 0);
      CHECK(p->length == q->length && memcmp(p->data, q->data, (size_t)p->length * 8) == 0,
            "restore %d: batch %d differs", k, i);
    }
    rill_iter_free(a);
    rill_iter_free(c);
  }
  rill_df_free(b);
  rill_df_free(sh);
  rill_df_free(base);
}

static int tsum(const rill_array_t* group, rill_array_t* out, rill_exec_t* ex, void* ctx, rill_error_t* err) {
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), 1);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc failed");
  int64_t s = 0;
  for (int64_t i = 0; i < group->length; i++) s += i64_at(group, i);
  ((int64_t*)out->data)[0] = s;
  return RILL_OK;
}

static void test_reduce(void) {
  stage_ctx_t sc = {0}, pc = {0};
  rill_df_t* base = make_base(&sc, &pc, RILL_ON_ERROR_RAISE, RILL_ON_ERROR_RAISE);
  rill_df_t* red;
  rill_error_t err;
  CHECK_OK(rill_df_reduce(base, 1, 7, rill_type_scalar(RILL_INT64), tsum, NULL, NULL, &red, &err), err);
  rill_iter_t* it;
  CHECK_OK(rill_iter_new(red, &(rill_iter_opts_t){.threads = 3, .prefetch = 8}, &it, &err), err);
  rill_row_t row;
  int64_t g = 0, bad = 0;
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    int64_t want = 0;
    for (int64_t r = g * 7; r < g * 7 + 7 && r < N; r++) want += 3 * r + 1;
    bad += i64_at(rill_row_get(&row, 0), 0) != want;
    g++;
  }
  CHECK(g == (N + 6) / 7 && bad == 0, "reduce: %lld groups, %lld wrong", (long long)g, (long long)bad);
  rill_iter_free(it);
  rill_df_free(red);
  rill_df_free(base);
}

int main(void) {
  for (int rep = 0; rep < 3; rep++) {
    test_seek_and_epochs();
    test_errors();
    test_save_restore();
    test_reduce();
  }
  return tsan_report();
}
