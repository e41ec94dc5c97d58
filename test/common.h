/* Helpers shared by the C tests (Criterion). */
#ifndef RILL_TEST_COMMON_H
#define RILL_TEST_COMMON_H

#include <criterion/criterion.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rill.h"
#include "rill_addons.h"

/* Asserts that `call` returned RILL_OK, printing rill's message otherwise. */
#define RT_OK(call, err)                                                                     \
  do {                                                                                       \
    int rt_status_ = (call);                                                                 \
    cr_assert_eq(rt_status_, RILL_OK, "%s returned %d (%s): %s", #call, rt_status_,          \
                 rill_strerror(rt_status_), (err).message);                                  \
  } while (0)

/* Asserts that `call` returned `code` and that the message contains `needle`. */
#define RT_FAILS(call, want, needle, err)                                                    \
  do {                                                                                       \
    int rt_status_ = (call);                                                                 \
    cr_assert_eq(rt_status_, (want), "%s returned %d, expected %d; message: %s", #call,      \
                 rt_status_, (want), (err).message);                                         \
    cr_assert((err).code == (want), "err.code %d, expected %d", (err).code, (want));         \
    cr_assert(strstr((err).message, (needle)) != NULL, "message '%s' lacks '%s'",            \
              (err).message, (needle));                                                      \
  } while (0)

/* The system's memory for test allocators (rill_set_allocator) that count or refuse blocks:
 * an aligned block, or NULL; and its release. */
static inline void* rt_sys_alloc(size_t size, size_t align) {
  void* p = NULL;
  return posix_memalign(&p, align < sizeof(void*) ? sizeof(void*) : align, size ? size : 1) ? NULL : p;
}
static inline void rt_sys_free(void* p, void* ctx) {
  (void)ctx;
  free(p);
}

/* Batches of 2 rows of columns 0 and 1 of df (*b), iterated on the calling thread without
 * prefetch and advanced to the second batch (*row), whose buffers are the first batch's,
 * reused. Returns the iterator. */
static inline rill_iter_t* rt_second_batch_of_two(rill_df_t* df, rill_df_t** b, rill_row_t* row) {
  rill_error_t err = {0};
  RT_OK(rill_df_batch(df, (int[]){0, 1}, 2, 2, NULL, b, &err), err);
  rill_iter_t* it;
  RT_OK(rill_iter_new(*b, &(rill_iter_opts_t){.threads = RILL_THREADS_NONE, .prefetch = RILL_PREFETCH_NONE}, &it, &err),
        err);
  RT_OK(rill_iter_next(it, row, &err), err);
  RT_OK(rill_iter_next(it, row, &err), err);
  return it;
}

/* fork() for a test whose child checks what it can and _exits with 0 or the number of the
 * check that failed (Criterion's assertions belong to the parent): the child has 30 s
 * before an alarm ends it, so that a hang fails the test instead of blocking it. */
static inline pid_t rt_fork(void) {
  fflush(NULL);
  pid_t pid = fork();
  cr_assert_neq(pid, -1, "fork failed");
  if (pid == 0) alarm(30);
  return pid;
}

/* Waits for the child of rt_fork; fails unless it exited with 0. */
static inline void rt_child_passed(pid_t pid) {
  int status = 0;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFEXITED(status), "the child did not exit (signal %d)", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  cr_assert_eq(WEXITSTATUS(status), 0, "the child failed with code %d", WEXITSTATUS(status));
}

/* The repository root (tests read test/data from there). */
static inline const char* rt_root(void) {
  const char* r = getenv("RILL_TEST_ROOT");
  return r && *r ? r : ".";
}

/* Removes the temporary directory of rt_tmpdir (at exit). */
static int rt_remove_entry_(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st; (void)flag; (void)ftw;
  remove(path);
  return 0;
}
static char rt_tmpdir_path_[256];
static void rt_tmpdir_cleanup_(void) {
  if (rt_tmpdir_path_[0]) nftw(rt_tmpdir_path_, rt_remove_entry_, 16, FTW_DEPTH | FTW_PHYS);
}

/* A temporary directory unique to this process under $TMPDIR (default /tmp), created on
 * first use and removed with its contents when the process exits. */
static inline const char* rt_tmpdir(void) {
  if (!rt_tmpdir_path_[0]) {
    const char* t = getenv("TMPDIR");
    snprintf(rt_tmpdir_path_, sizeof rt_tmpdir_path_, "%s/rill-test-XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(rt_tmpdir_path_)) {
      rt_tmpdir_path_[0] = 0;
      cr_assert_fail("mkdtemp failed");
    }
    atexit(rt_tmpdir_cleanup_);
  }
  return rt_tmpdir_path_;
}

/* Runs a shell command, its output (up to size - 1 bytes) into out: its exit status, or -1. */
static inline int rt_run_cmd(const char* cmd, char* out, size_t size) {
  FILE* p = popen(cmd, "r");
  cr_assert(p, "popen %s", cmd);
  size_t n = fread(out, 1, size - 1, p);
  out[n] = 0;
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Runs the shell command printf'd from fmt with its standard error joined to its output,
 * asserts its exit status and that the output holds `needle` (NULL: anything); returns the
 * output (a static buffer, valid until the next call). */
static inline const char* rt_cmd_expect(int status, const char* needle, const char* fmt, ...) {
  static char cmd[8192], out[65536];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(cmd, sizeof cmd - 8, fmt, ap);
  va_end(ap);
  cr_assert(n > 0 && (size_t)n < sizeof cmd - 8, "command too long");
  strcat(cmd, " 2>&1");
  int got = rt_run_cmd(cmd, out, sizeof out);
  cr_assert_eq(got, status, "%s: exit status %d, expected %d: %s", cmd, got, status, out);
  cr_assert(!needle || strstr(out, needle), "%s: output lacks '%s': %s", cmd, needle, out);
  return out;
}

/* rel under rt_tmpdir(), in one of 8 rotating buffers (valid until 8 more calls). */
static inline char* rt_tpath(const char* rel) {
  static char bufs[8][1024];
  static int k;
  char* b = bufs[k++ % 8];
  snprintf(b, sizeof bufs[0], "%s/%s", rt_tmpdir(), rel);
  return b;
}

#endif
