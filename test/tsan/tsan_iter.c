/* ThreadSanitizer stress of the worker pool and iterators: filtered + shuffled + batched
 * pipelines with prefetch 8 on 2-4 threads (and the same output as without threads), two
 * iterators over one dataframe on two threads, a CPU_SERIAL stage, iterators freed while
 * work is in flight, cheap chunks shared with the waiting consumer. Prints "N passed, N
 * failed" last; exits non-zero on a failure. */
#include <pthread.h>
#include <unistd.h>

#include "../tar_write.h"
#include "tsan_common.h"

enum { N = 3000, B = 32 };

typedef struct pipeline {
  stage_ctx_t src_ctx, plus_ctx;
  rill_df_t *base, *filt, *shuf, *batch;
  int plus, rand;
} pipeline_t;

static void pipeline_make(pipeline_t* p) {
  rill_error_t err;
  memset(p, 0, sizeof *p);
  CHECK_OK(rill_df_new(N, &p->base, &err), err);
  rill_stage_opts_t g64 = {.grain = 64}, g50 = {.grain = 50};
  int src = rill_df_add_source(p->base, "src", rill_type_scalar(RILL_INT64), tsrc, &p->src_ctx, NULL, NULL, &err);
  p->plus = rill_df_map(p->base, "plus", rill_type_scalar(RILL_INT64), &src, 1, tplus, &p->plus_ctx, NULL, &g64, &err);
  p->rand = rill_df_map(p->base, "rand", rill_type_scalar(RILL_FLOAT64), &src, 1, map_rand, NULL, NULL, &g50, &err);
  int keep = rill_df_map(p->base, "keep", rill_type_scalar(RILL_BOOL), &src, 1, tkeep, NULL, NULL, NULL, &err);
  CHECK(src == 0 && p->plus == 1 && p->rand == 2 && keep == 3, "columns %d %d %d %d: %s", src, p->plus, p->rand,
        keep, err.message);
  CHECK_OK(rill_df_filter(p->base, keep, &p->filt, &err), err);
  CHECK_OK(rill_df_shuffle(p->filt, 7, &p->shuf, &err), err);
  int cols[2] = {p->plus, p->rand};
  CHECK_OK(rill_df_batch(p->shuf, cols, 2, B, NULL, &p->batch, &err), err);
}

static void pipeline_free(pipeline_t* p) {
  rill_df_free(p->batch);
  rill_df_free(p->shuf);
  rill_df_free(p->filt);
  rill_df_free(p->base);
}

/* Iterates (batched or row mode) two epochs; stores plus and rand values in order. With
 * next_epoch, epoch 2's first chunks run ahead at the end of epoch 1, and epoch 3's are in
 * flight when the iterator is freed. */
static int64_t run(pipeline_t* p, int batched, int threads, int prefetch, int next_epoch, int64_t* plus, double* rnd) {
  rill_error_t err;
  rill_iter_t* it;
  int cols[2] = {p->plus, p->rand};
  rill_iter_opts_t o = {.threads = threads, .prefetch = prefetch, .seed = 11, .epoch = 1, .next_epoch = next_epoch};
  if (batched) {
    cols[0] = 0;
    cols[1] = 1;
  }
  o.columns = cols;
  o.ncolumns = 2;
  if (rill_iter_new(batched ? p->batch : p->shuf, &o, &it, &err) != RILL_OK) {
    CHECK(0, "rill_iter_new: %s", err.message);
    return 0;
  }
  int64_t n = 0;
  for (int e = 1; e <= 2; e++) {
    CHECK_OK(rill_iter_set_epoch(it, e), err);
    rill_row_t row;
    int r;
    while ((r = rill_iter_next(it, &row, &err)) == RILL_OK) {
      const rill_array_t* a = rill_row_get(&row, 0);
      const rill_array_t* b = rill_row_get(&row, 1);
      for (int64_t i = 0; i < a->length; i++) {
        plus[n] = i64_at(a, i);
        rnd[n] = ((const double*)b->data)[i];
        n++;
      }
    }
    CHECK(r == RILL_END, "threads %d: iteration ended with %d: %s", threads, r, err.message);
  }
  rill_iter_free(it);
  return n;
}

static void test_pipelines(void) {
  static int64_t ref_plus[2 * N], got_plus[2 * N];
  static double ref_rand[2 * N], got_rand[2 * N];
  pipeline_t p;
  pipeline_make(&p);
  int64_t kept = 0, sum = 0;
  for (int64_t r = 0; r < N; r++)
    if (r % 3 != 0) {
      kept++;
      sum += 3 * r + 1;
    }
  for (int batched = 0; batched <= 1; batched++) {
    int64_t n = run(&p, batched, RILL_THREADS_NONE, RILL_PREFETCH_NONE, 0, ref_plus, ref_rand);
    CHECK(n == 2 * kept, "reference: %lld values, expected %lld", (long long)n, (long long)(2 * kept));
    int64_t s = 0;
    for (int64_t i = 0; i < n; i++) s += ref_plus[i];
    CHECK(s == 2 * sum, "reference sum %lld, expected %lld", (long long)s, (long long)(2 * sum));
    /* threads, prefetch, next_epoch */
    int configs[6][3] = {{2, 8, 0}, {3, 8, 0}, {4, 8, 0}, {4, 64, 0}, {2, 8, 1}, {4, 64, 1}};
    for (int c = 0; c < 6; c++) {
      int64_t m = run(&p, batched, configs[c][0], configs[c][1], configs[c][2], got_plus, got_rand);
      CHECK(m == n, "batched %d threads %d: %lld values, expected %lld", batched, configs[c][0], (long long)m,
            (long long)n);
      int64_t bad = 0;
      for (int64_t i = 0; i < m && i < n; i++) bad += got_plus[i] != ref_plus[i] || got_rand[i] != ref_rand[i];
      CHECK(bad == 0, "batched %d threads %d prefetch %d next_epoch %d: %lld values differ from the reference",
            batched, configs[c][0], configs[c][1], configs[c][2], (long long)bad);
    }
  }
  pipeline_free(&p);
}

/* ---- two iterators over the same dataframe on two threads */

typedef struct two {
  pipeline_t* p;
  int64_t n, sum;
  int rc;
} two_t;

static void* two_main(void* arg) {
  two_t* t = arg;
  rill_error_t err;
  rill_iter_t* it;
  int col = t->p->plus;
  t->rc = rill_iter_new(t->p->shuf, &(rill_iter_opts_t){.threads = 2, .prefetch = 8, .columns = &col, .ncolumns = 1},
                        &it, &err);
  if (t->rc != RILL_OK) return NULL;
  rill_row_t row;
  while ((t->rc = rill_iter_next(it, &row, &err)) == RILL_OK) {
    t->n++;
    t->sum += i64_at(rill_row_get(&row, 0), 0);
  }
  rill_iter_free(it);
  return NULL;
}

static void test_two_iterators(void) {
  pipeline_t p;
  pipeline_make(&p);
  two_t t[2] = {{.p = &p}, {.p = &p}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) CHECK(pthread_create(&th[i], NULL, two_main, &t[i]) == 0, "pthread_create %d", i);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  int64_t kept = 0, sum = 0;
  for (int64_t r = 0; r < N; r++)
    if (r % 3 != 0) {
      kept++;
      sum += 3 * r + 1;
    }
  for (int i = 0; i < 2; i++) {
    CHECK(t[i].rc == RILL_END, "iterator %d ended with %d", i, t[i].rc);
    CHECK(t[i].n == kept && t[i].sum == sum, "iterator %d: %lld rows sum %lld, expected %lld sum %lld", i,
          (long long)t[i].n, (long long)t[i].sum, (long long)kept, (long long)sum);
  }
  pipeline_free(&p);
}

/* ---- CPU_SERIAL stage: one call at a time even with 4 threads and prefetch */

static void test_serial(void) {
  rill_error_t err;
  rill_df_t* df;
  stage_ctx_t sc = {0}, mc = {0};
  CHECK_OK(rill_df_new(N, &df, &err), err);
  rill_stage_opts_t serial = {.where = RILL_STAGE_CPU_SERIAL, .grain = 16};
  int src = rill_df_add_source(df, "src", rill_type_scalar(RILL_INT64), tsrc, &sc, NULL, &serial, &err);
  int plus = rill_df_map(df, "plus", rill_type_scalar(RILL_INT64), &src, 1, tplus, &mc, NULL, &serial, &err);
  CHECK(src == 0 && plus == 1, "columns %d %d: %s", src, plus, err.message);
  rill_iter_t* it;
  CHECK_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = 4, .prefetch = 128}, &it, &err), err);
  rill_row_t row;
  int64_t n = 0, bad = 0;
  while (rill_iter_next(it, &row, &err) == RILL_OK) {
    bad += i64_at(rill_row_get(&row, 1), 0) != 3 * n + 1;
    n++;
  }
  rill_iter_free(it);
  CHECK(n == N && bad == 0, "%lld rows, %lld wrong", (long long)n, (long long)bad);
  CHECK(atomic_load(&sc.overlap) == 0 && atomic_load(&mc.overlap) == 0, "serial stages overlapped %lld/%lld times",
        (long long)atomic_load(&sc.overlap), (long long)atomic_load(&mc.overlap));
  CHECK(atomic_load(&sc.calls) >= N / 16, "%lld source calls", (long long)atomic_load(&sc.calls));
  rill_df_free(df);
}

/* Column 0 (int64) of df summed over a shuffled read in batches of B on 4 threads, prefetch
 * 8 (its other columns read too); *n: the rows read. */
static int64_t shuffled_sum(rill_df_t* df, uint64_t seed, int64_t* n) {
  rill_error_t err;
  rill_df_t *sh = NULL, *b = NULL;
  rill_iter_t* it = NULL;
  int cols[8], nc = rill_df_ncolumns(df) < 8 ? rill_df_ncolumns(df) : 8;
  for (int c = 0; c < nc; c++) cols[c] = c;
  CHECK_OK(rill_df_shuffle(df, seed, &sh, &err), err);
  CHECK_OK(rill_df_batch(sh, cols, nc, B, NULL, &b, &err), err);
  CHECK_OK(rill_iter_new(b, &(rill_iter_opts_t){.threads = 4, .prefetch = 8}, &it, &err), err);
  rill_row_t row;
  int64_t sum = 0;
  *n = 0;
  while (it && rill_iter_next(it, &row, &err) == RILL_OK) {
    const rill_array_t* a = rill_row_get(&row, 0);
    for (int64_t i = 0; i < a->length; i++) sum += i64_at(a, i);
    *n += a->length;
  }
  rill_iter_free(it);
  rill_df_free(b);
  rill_df_free(sh);
  return sum;
}

/* ---- a concatenation read shuffled on workers: its calls split among the parts' serial
 * sources, whose calls never overlap */
static void test_concat(void) {
  rill_error_t err;
  enum { P = 3 };
  stage_ctx_t sc[P] = {{0}};
  rill_df_t *parts[P], *cat;
  rill_stage_opts_t serial = {.where = RILL_STAGE_CPU_SERIAL, .grain = 16};
  for (int p = 0; p < P; p++) {
    CHECK_OK(rill_df_new(N / P, &parts[p], &err), err);
    int c = rill_df_add_source(parts[p], "src", rill_type_scalar(RILL_INT64), tsrc, &sc[p], NULL, &serial, &err);
    CHECK(c == 0, "column %d: %s", c, err.message);
  }
  CHECK_OK(rill_df_concat(parts, P, &cat, &err), err);
  int64_t n = 0, sum = shuffled_sum(cat, 7, &n);
  int64_t k = N / P;
  CHECK(n == P * k && sum == P * 3 * (k * (k - 1) / 2), "%lld rows, sum %lld", (long long)n, (long long)sum);
  for (int p = 0; p < P; p++)
    CHECK(atomic_load(&sc[p].overlap) == 0, "part %d's serial source overlapped %lld times", p,
          (long long)atomic_load(&sc[p].overlap));
  /* the concatenation beside a column of its own (side by side), shuffled on workers: the
   * parts' serial sources still never overlap */
  stage_ctx_t oc = {0};
  rill_df_t *other, *side;
  CHECK_OK(rill_df_new(N / P * P, &other, &err), err);
  int c = rill_df_add_source(other, "other", rill_type_scalar(RILL_INT64), tsrc, &oc, NULL, NULL, &err);
  CHECK(c == 0, "column %d: %s", c, err.message);
  CHECK_OK(rill_df_concat_columns((rill_df_t* const[]){other, cat}, 2, &side, &err), err);
  int64_t sn = 0, ssum = side ? shuffled_sum(side, 11, &sn) : 0;
  CHECK(sn == P * k && ssum == 3 * (P * k * (P * k - 1) / 2), "side by side: %lld rows, sum %lld", (long long)sn,
        (long long)ssum);
  for (int p = 0; p < P; p++)
    CHECK(atomic_load(&sc[p].overlap) == 0, "side by side: part %d's serial source overlapped %lld times", p,
          (long long)atomic_load(&sc[p].overlap));
  rill_df_free(side);
  rill_df_free(other);
  rill_df_free(cat);
  for (int p = 0; p < P; p++) rill_df_free(parts[p]);
}

extern int64_t rill__csv_map_budget; /* the library's knob (csv_internal.h) */

/* CSV files opened side by side (rill_df_from_csv_files on 4 threads), one failing among
 * them, then read shuffled in batches on 4 threads, also with only 3 of them mapped at once */
static void test_csv_files(void) {
  enum { F = 12, R = 200 };
  rill_error_t err;
  char paths[F][512];
  const char* p[F];
  const char* tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  for (int f = 0; f < F; f++) {
    snprintf(paths[f], sizeof paths[f], "%s/rill-tsan-%d-%d.csv", tmp, (int)getpid(), f);
    p[f] = paths[f];
    FILE* fp = fopen(paths[f], "wb");
    CHECK(fp != NULL, "cannot write %s", paths[f]);
    if (!fp) return;
    fprintf(fp, "id,name\n");
    for (int r = 0; r < R; r++) fprintf(fp, "%d,n%d\n", f * R + r, r);
    fclose(fp);
  }
  rill_df_t* df;
  CHECK_OK(rill_df_from_csv_files(p, F, &(rill_csv_opts_t){.threads = 4}, &df, &err), err);
  int64_t n = 0, sum = shuffled_sum(df, 3, &n);
  CHECK(n == F * R && sum == (int64_t)F * R * (F * R - 1) / 2, "%lld rows, sum %lld", (long long)n, (long long)sum);
  rill_df_free(df);
  /* more files than stay mapped: calls on 4 threads map files again while others unmap them */
  rill__csv_map_budget = 3;
  CHECK_OK(rill_df_from_csv_files(p, F, &(rill_csv_opts_t){.threads = 4}, &df, &err), err);
  for (uint64_t seed = 5; df && seed < 8; seed++) {
    sum = shuffled_sum(df, seed, &n);
    CHECK(n == F * R && sum == (int64_t)F * R * (F * R - 1) / 2, "3 mapped at once: %lld rows, sum %lld", (long long)n,
          (long long)sum);
  }
  rill_df_free(df);
  rill__csv_map_budget = 0;
  FILE* fp = fopen(paths[3], "wb"); /* a row with three fields */
  if (fp) fprintf(fp, "id,name\n1,a,b\n"), fclose(fp);
  df = NULL;
  int rc = rill_df_from_csv_files(p, F, &(rill_csv_opts_t){.threads = 4}, &df, &err);
  CHECK(rc == RILL_EFORMAT && df == NULL && strstr(err.message, "-3.csv:2"), "%d: %s", rc, err.message);
  for (int f = 0; f < F; f++) remove(paths[f]);
}

/* Tar shards read shuffled in batches on 4 threads: every call opens its archives and preads
 * its members (the index is shared, read-only); the labels parsed from text sum right. */
static void test_tar_shards(void) {
  enum { S = 4, K = 150 };
  rill_error_t err;
  char paths[S][512];
  const char* p[S];
  const char* tmp = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  for (int s = 0; s < S; s++) {
    snprintf(paths[s], sizeof paths[s], "%s/rill-tsan-%d-%d.tar", tmp, (int)getpid(), s);
    p[s] = paths[s];
    FILE* f = fopen(paths[s], "wb");
    CHECK(f != NULL, "cannot write %s", paths[s]);
    if (!f) return;
    for (int k = 0; k < K; k++) {
      char name[64], text[32], data[300];
      int n = snprintf(text, sizeof text, "%d\n", s * K + k);
      snprintf(name, sizeof name, "%05d.cls", s * K + k);
      tw_file(f, name, text, n);
      memset(data, 'a' + k % 26, sizeof data);
      snprintf(name, sizeof name, "%05d.bin", s * K + k);
      tw_file(f, name, data, 1 + k % 300);
    }
    tw_end(f);
    fclose(f);
  }
  rill_df_t *df = NULL, *sh = NULL, *b = NULL;
  CHECK_OK(rill_df_from_tar(p, S, &(rill_tar_opts_t){.columns = (rill_tar_column_t[]){{"cls", RILL_INT64, NULL}},
                                                     .ncolumns = 1},
                            &df, &err),
           err);
  int cls = df ? rill_df_column(df, "cls") : -1, bin = df ? rill_df_column(df, "bin") : -1;
  CHECK(cls >= 0 && bin >= 0, "columns %d %d", cls, bin);
  for (uint64_t seed = 1; df && cls >= 0 && seed < 4; seed++) {
    rill_iter_t* it = NULL;
    CHECK_OK(rill_df_shuffle(df, seed, &sh, &err), err);
    CHECK_OK(rill_df_batch(sh, (int[]){cls, bin}, 2, B, NULL, &b, &err), err);
    CHECK_OK(rill_iter_new(b, &(rill_iter_opts_t){.threads = 4, .prefetch = 8}, &it, &err), err);
    rill_row_t row;
    int64_t sum = 0, n = 0, bytes = 0;
    while (it && rill_iter_next(it, &row, &err) == RILL_OK) {
      const rill_array_t* a = rill_row_get(&row, 0);
      for (int64_t i = 0; i < a->length; i++) sum += i64_at(a, i);
      n += a->length;
      bytes += rill_row_get(&row, 1)->data_size;
    }
    int64_t want_bytes = 0;
    for (int k = 0; k < K; k++) want_bytes += 1 + k % 300;
    CHECK(n == S * K && sum == (int64_t)S * K * (S * K - 1) / 2 && bytes == S * want_bytes,
          "tar: %lld rows, sum %lld, %lld bytes", (long long)n, (long long)sum, (long long)bytes);
    rill_iter_free(it);
    rill_df_free(b);
    rill_df_free(sh);
  }
  rill_df_free(df);
  for (int s = 0; s < S; s++) remove(paths[s]);
}

/* ---- iterators freed while their chunks are being computed */

static void test_free_in_flight(void) {
  pipeline_t p;
  pipeline_make(&p);
  rill_error_t err;
  for (int k = 0; k < 24; k++) {
    rill_iter_t* it;
    int threads = 2 + k % 3;
    rill_df_t* df = k % 2 ? p.batch : p.shuf;
    CHECK_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = threads, .prefetch = 8 + 56 * (k % 2 == 0)}, &it, &err),
             err);
    if (k % 3 == 0) {
      CHECK(rill_iter_prefetch(it, 8) == RILL_OK, "prefetch");
    } else {
      rill_row_t row;
      for (int i = 0; i < k % 5 + 1; i++) CHECK_OK(rill_iter_next(it, &row, &err), err);
    }
    rill_iter_free(it); /* chunks may still be running on the workers */
  }
  pipeline_free(&p);
}

/* ---- cheap chunks: batches of about 150 us each, so the consumer computes queued chunks
 * while it waits and one worker sleeps meanwhile; a consumer away for 2 ms now and then (every
 * worker works again), then asleep 100 us after every batch (its waits end by waking the
 * sleeping worker), a seek, and an iterator freed with chunks queued */

enum { CHEAP_B = 64, CHEAP_N = 96 };

static int src_cheap(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* ex, void* ctx,
                     rill_error_t* err) {
  (void)ctx;
  rt_spin_ns(150000);
  int rc = rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), n);
  if (rc != RILL_OK) return rill_error_set(err, rc, "alloc");
  for (int64_t i = 0; i < n; i++) ((int64_t*)out->data)[i] = rows[i];
  return RILL_OK;
}

static void test_cheap_chunks(void) {
  rill_error_t err;
  rill_df_t *df, *b;
  CHECK_OK(rill_df_new(CHEAP_N * CHEAP_B, &df, &err), err);
  int col = rill_df_add_source(df, "s", rill_type_scalar(RILL_INT64), src_cheap, NULL, NULL,
                               &(rill_stage_opts_t){.grain = CHEAP_B}, &err);
  CHECK(col == 0, "add_source: %s", err.message);
  CHECK_OK(rill_df_batch(df, &col, 1, CHEAP_B, NULL, &b, &err), err);
  for (int threads = 2; threads <= 4; threads += 2) {
    rill_iter_t* it;
    CHECK_OK(rill_iter_new(b, &(rill_iter_opts_t){.threads = threads, .prefetch = 8}, &it, &err), err);
    rill_row_t row;
    for (int64_t i = 0; i < CHEAP_N; i++) {
      if (i == CHEAP_N / 2) CHECK(rill_iter_seek(it, i) == RILL_OK, "seek");
      if (i % 16 == 15) nanosleep(&(struct timespec){0, 2000000}, NULL);
      else if (i >= CHEAP_N / 2) nanosleep(&(struct timespec){0, 100000}, NULL);
      CHECK_OK(rill_iter_next(it, &row, &err), err);
      const rill_array_t* a = rill_row_get(&row, 0);
      CHECK(a->length == CHEAP_B && ((const int64_t*)a->data)[0] == i * CHEAP_B &&
                ((const int64_t*)a->data)[CHEAP_B - 1] == i * CHEAP_B + CHEAP_B - 1,
            "batch %lld", (long long)i);
    }
    CHECK(rill_iter_next(it, &row, &err) == RILL_END, "end");
    CHECK(rill_iter_seek(it, 8) == RILL_OK, "seek");
    CHECK_OK(rill_iter_next(it, &row, &err), err);
    rill_iter_free(it); /* chunks queued and running */
  }
  rill_df_free(b);
  rill_df_free(df);
}

/* ---- memory source lending its cells to batches while a map drops rows (SKIP) */

static int tsum4(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* ex, void* ctx,
                 rill_error_t* err) {
  int64_t n = in[0]->length;
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), n);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc failed");
  const int64_t* rows = rill_exec_rows(ex);
  const int32_t* d = in[0]->data;
  for (int64_t i = 0; i < n; i++) {
    if (rows[i] % 13 == 5) {
      err->row = i;
      return rill_error_set(err, RILL_EFORMAT, "row %lld rejected", (long long)rows[i]);
    }
    ((int64_t*)out->data)[i] = (int64_t)d[4 * i] + d[4 * i + 3];
  }
  return RILL_OK;
}

static void test_memory_lending(void) {
  enum { M = 4096, MB = 64 };
  rill_error_t err;
  rill_array_t* a;
  CHECK_OK(rill_array_new(rill_type_tensor(RILL_INT32, 1, (int64_t[]){4}), M, &a, &err), err);
  int32_t* d = a->data;
  for (int i = 0; i < 4 * M; i++) d[i] = i;
  const char* names[1] = {"v"};
  const rill_array_t* arrays[1] = {a};
  rill_df_t *df, *b;
  CHECK_OK(rill_df_from_arrays(names, arrays, 1, 0, &df, &err), err);
  int in = 0;
  rill_stage_opts_t skip = {.on_error = RILL_ON_ERROR_SKIP};
  int s = rill_df_map(df, "s", rill_type_scalar(RILL_INT64), &in, 1, tsum4, NULL, NULL, &skip, &err);
  int cols[2] = {0, s};
  CHECK_OK(rill_df_batch(df, cols, 2, MB, NULL, &b, &err), err);
  for (int threads = 2; threads <= 4; threads++) {
    rill_iter_t* it;
    CHECK_OK(rill_iter_new(b, &(rill_iter_opts_t){.threads = threads, .prefetch = 8}, &it, &err), err);
    rill_row_t row;
    int64_t n = 0, bad = 0;
    while (rill_iter_next(it, &row, &err) == RILL_OK) {
      const rill_array_t *x = rill_row_get(&row, 0), *y = rill_row_get(&row, 1);
      for (int64_t i = 0; i < x->length; i++) {
        const int32_t* c = (const int32_t*)x->data + 4 * i;
        bad += c[0] / 4 % 13 == 5 || (int64_t)c[0] + c[3] != ((const int64_t*)y->data)[i];
      }
      n += x->length;
    }
    int64_t want = 0;
    for (int64_t r = 0; r < M; r++) want += r % 13 != 5;
    CHECK(n == want && bad == 0, "threads %d: %lld rows (want %lld), %lld wrong", threads, (long long)n,
          (long long)want, (long long)bad);
    rill_iter_free(it);
  }
  int64_t changed = 0;
  for (int i = 0; i < 4 * M; i++) changed += d[i] != i;
  CHECK(changed == 0, "%lld values of the caller's buffer changed", (long long)changed);
  rill_df_free(b);
  rill_df_free(df);
  rill_array_release(a);
}

int main(void) {
  for (int rep = 0; rep < 3; rep++) {
    test_pipelines();
    test_two_iterators();
    test_serial();
    test_concat();
    test_csv_files();
    test_tar_shards();
    test_free_in_flight();
    test_memory_lending();
    test_cheap_chunks();
  }
  return tsan_report();
}
