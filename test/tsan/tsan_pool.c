/* ThreadSanitizer stress of the process-wide worker pool: threads reused by later iterators
 * and grown for larger ones, iterators made, used (errors, seeks, epochs) and freed on
 * several threads at once, some with work in flight, a fork() (and the parent's pool after
 * it), and an exit with threads parked and an iterator still open. Prints "N passed, N
 * failed" last; exits non-zero on a failure. */
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tsan_common.h"

enum { ROWS = 64 };
static const int64_t ROWS_SUM = ROWS * (ROWS - 1) / 2;

/* Iterates a source that sleeps 50 us per row with `threads` workers; checks the rows and the
 * worker indices. Returns the calls that ran on worker threads. */
static int64_t pool_run(int threads) {
  worker_seen_t seen = {.sleep_ns = 50000, .max_worker = -1};
  int64_t sum = worker_sum(ROWS, 1, threads, &seen);
  CHECK(sum == ROWS_SUM, "%d threads: sum %lld", threads, (long long)sum);
  CHECK(atomic_load(&seen.max_worker) < threads, "%d threads: a call ran on worker %d", threads,
        atomic_load(&seen.max_worker));
  return atomic_load(&seen.on_workers);
}

/* ---- parked threads are reused; an iterator that asks for more grows the pool */

static void test_reuse_and_growth(int n0) {
  int64_t on_workers = pool_run(2);
  CHECK(rt_thread_count() == n0 + 2, "after a 2-thread iterator: %d threads, %d before", rt_thread_count(), n0);
  for (int i = 0; i < 5; i++) on_workers += pool_run(2);
  CHECK(rt_thread_count() == n0 + 2, "after six 2-thread iterators: %d threads, %d before", rt_thread_count(), n0);
  CHECK(on_workers > 0, "no call ran on a worker thread");
  pool_run(4);
  CHECK(rt_thread_count() == n0 + 4, "after a 4-thread iterator: %d threads, %d before", rt_thread_count(), n0);
  pool_run(1);
  pool_run(3);
  CHECK(rt_thread_count() == n0 + 4, "after 1- and 3-thread iterators: %d threads, %d before", rt_thread_count(), n0);
}

/* ---- iterators made and freed on several threads at once */

typedef struct churn {
  int id;
  int bad;
} churn_t;

static void* churn_main(void* arg) {
  churn_t* c = arg;
  rill_error_t err;
  for (int i = 0; i < 8; i++) {
    int threads = 1 + (c->id + i) % 3;
    stage_ctx_t sc = {.fail_mod = 97, .fail_rem = 13}, pc = {0};
    rill_df_t* df;
    if (rill_df_new(400, &df, &err) != RILL_OK) {
      c->bad++;
      continue;
    }
    rill_stage_opts_t g = {.grain = 5 + i};
    int src = rill_df_add_source(df, "src", rill_type_scalar(RILL_INT64), tsrc, &sc, NULL, &g, &err);
    int plus = rill_df_map(df, "plus", rill_type_scalar(RILL_INT64), &src, 1, tplus, &pc, NULL, &g, &err);
    rill_iter_t* it;
    if (plus != 1 || rill_iter_new(df, &(rill_iter_opts_t){.threads = threads, .prefetch = 40}, &it, &err) != RILL_OK) {
      c->bad++;
      rill_df_free(df);
      continue;
    }
    rill_row_t row;
    int r;
    int64_t n = 0, errors = 0;
    if (i % 3 == 2) { /* a seek and a new epoch with work in flight, then freed with work in flight */
      c->bad += rill_iter_next(it, &row, &err) != RILL_OK;
      c->bad += rill_iter_seek(it, 300) != RILL_OK;
      c->bad += rill_iter_next(it, &row, &err) != RILL_OK || row.index != 300 || i64_at(rill_row_get(&row, 1), 0) != 901;
      c->bad += rill_iter_set_epoch(it, 1) != RILL_OK;
      c->bad += rill_iter_next(it, &row, &err) != RILL_OK || row.index != 0;
    } else {
      while ((r = rill_iter_next(it, &row, &err)) != RILL_END) {
        if (r == RILL_OK) {
          c->bad += i64_at(rill_row_get(&row, 1), 0) != 3 * row.index + 1;
          n++;
        } else {
          c->bad += err.row % 97 != 13 || r != RILL_EFORMAT;
          errors++;
        }
      }
      c->bad += n != 400 - 4 || errors != 4; /* rows 13, 110, 207, 304 fail */
    }
    rill_iter_free(it);
    rill_df_free(df);
  }
  return NULL;
}

static void test_churn(int n0) {
  enum { NT = 4 };
  pthread_t th[NT];
  churn_t c[NT];
  for (int i = 0; i < NT; i++) {
    c[i] = (churn_t){.id = i};
    CHECK(pthread_create(&th[i], NULL, churn_main, &c[i]) == 0, "pthread_create %d", i);
  }
  for (int i = 0; i < NT; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < NT; i++) CHECK(c[i].bad == 0, "consumer %d: %d checks failed", i, c[i].bad);
  int pooled = rt_thread_count() - n0;
  CHECK(pooled >= 4 && pooled <= NT * 3, "%d pool threads after the churn", pooled);
}

/* ---- fork(): an iterator made before the fork is freed in the child; the parent's pool goes on */

static void test_fork(void) {
  rill_error_t err;
  worker_seen_t seen = {.max_worker = -1};
  rill_df_t* df;
  CHECK_OK(rill_df_new(50, &df, &err), err);
  CHECK(rill_df_add_source(df, "w", rill_type_scalar(RILL_INT64), src_worker, &seen, NULL, NULL, &err) == 0, "%s",
        err.message);
  rill_iter_t* kept;
  CHECK_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = 2}, &kept, &err), err);
  rill_row_t row;
  while (rill_iter_next(kept, &row, &err) == RILL_OK) {
  }
  fflush(NULL);
  pid_t pid = fork();
  CHECK(pid >= 0, "fork failed");
  if (pid == 0) {
    /* ThreadSanitizer stops checking in the child of a multi-threaded process, and its
     * runtime may hold its own locks there (its allocator's: a child that allocates can hang
     * in it): the child only frees the parent's iterator, which touches no lock, allocation
     * or thread of the parent's. What a child does with rill is tested in test_threads.c. */
    alarm(60);
    rill_iter_free(kept); /* must not wait for the parent's threads */
    _exit(0);
  }
  int status = 0;
  CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
  CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child ended with status %#x", status);
  rill_iter_free(kept);
  pool_run(2);
  rill_df_free(df);
}

static void* nothing(void* arg) { return arg; }

int main(void) {
  /* the sanitizer starts a thread of its own with the first thread: count it in n0 */
  pthread_t first;
  if (pthread_create(&first, NULL, nothing, NULL) == 0) pthread_join(first, NULL);
  int n0 = rt_thread_count();
  if (n0 < 0) {
    printf("skipped: /proc/self/task cannot be read\n");
    return 0;
  }
  test_reuse_and_growth(n0);
  test_churn(n0);
  test_fork();
  /* exit with parked threads and an iterator whose threads still serve it: the exit ends the
   * parked ones and leaves the others to the process's end, without waiting for them */
  rill_error_t err;
  rill_df_t* df;
  worker_seen_t seen = {.max_worker = -1};
  CHECK_OK(rill_df_new(10, &df, &err), err);
  rill_df_add_source(df, "w", rill_type_scalar(RILL_INT64), src_worker, &seen, NULL, NULL, &err);
  rill_iter_t* left_open;
  CHECK_OK(rill_iter_new(df, &(rill_iter_opts_t){.threads = 2}, &left_open, &err), err);
  (void)left_open;
  return tsan_report();
}
