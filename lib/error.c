/* Status codes, error reporting and small platform helpers. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

const char* rill_strerror(int code) {
  switch (code) {
    case RILL_OK: return "ok";
    case RILL_END: return "end of data";
    case RILL_EINVAL: return "invalid argument";
    case RILL_ENOMEM: return "out of memory";
    case RILL_EIO: return "input/output error";
    case RILL_EFORMAT: return "malformed data";
    case RILL_ENOTSUP: return "not supported";
    case RILL_ENODEV: return "no CUDA device";
    case RILL_ERANGE: return "value out of range";
    case RILL_ESQL: return "SQLite error";
    case RILL_ECUDA: return "CUDA error";
    case RILL_ESTAGE: return "stage function failed";
    default: return "unknown status";
  }
}

void rill_error_clear(rill_error_t* err) {
  if (!err) return;
  err->code = RILL_OK;
  err->row = -1;
  err->column = -1;
  err->message[0] = '\0';
}

static void format_message(rill_error_t* err, const char* fmt, va_list ap) {
  if (fmt)
    vsnprintf(err->message, sizeof err->message, fmt, ap);
  else
    snprintf(err->message, sizeof err->message, "%s", rill_strerror(err->code));
}

int rill_error_set(rill_error_t* err, int code, const char* fmt, ...) {
  if (!err) return code;
  err->code = code;
  va_list ap;
  va_start(ap, fmt);
  format_message(err, fmt, ap);
  va_end(ap);
  return code;
}

int rill__vfail(rill_error_t* err, int code, const char* fmt, va_list ap) {
  if (!err) return code;
  err->code = code;
  err->row = -1;
  err->column = -1;
  format_message(err, fmt, ap);
  return code;
}

int rill__fail(rill_error_t* err, int code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  rill__vfail(err, code, fmt, ap);
  va_end(ap);
  return code;
}

int rill__ncores(void) { /* the cores this process may run on (taskset, cgroup cpusets) */
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (int)n : 1;
}

void rill__run_threads(int nthreads, void* (*fn)(void*), void* arg) {
  pthread_t tids[64];
  int started = 0;
  for (int t = 1; t < nthreads && t < 64 && pthread_create(&tids[started], NULL, fn, arg) == 0; t++) started++;
  fn(arg);
  for (int t = 0; t < started; t++) pthread_join(tids[t], NULL);
}

int64_t rill__kept_fd_budget = -1;
static _Atomic int64_t g_kept_fds;

int rill__keep_fd(void) {
  int64_t budget = rill__kept_fd_budget;
  if (budget < 0) {
    struct rlimit r;
    budget = getrlimit(RLIMIT_NOFILE, &r) != 0 || r.rlim_cur == RLIM_INFINITY || r.rlim_cur / 8 > 1024
                 ? 1024
                 : (int64_t)r.rlim_cur / 8;
  }
  if (atomic_fetch_add(&g_kept_fds, 1) < budget) return 1;
  atomic_fetch_sub(&g_kept_fds, 1);
  return 0;
}

void rill__unkeep_fd(void) { atomic_fetch_sub(&g_kept_fds, 1); }

const char* rill__open_regular(const char* path, int* fd_out, int64_t* size, char* buf, size_t bufsize) {
  *fd_out = -1;
  /* O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return strerror_r(errno, buf, bufsize);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int e = errno;
    close(fd);
    return strerror_r(e, buf, bufsize);
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    snprintf(buf, bufsize, "not a regular file (%s)",
             S_ISDIR(st.st_mode) ? "Is a directory" : S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISSOCK(st.st_mode) ? "a socket"
             : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device" : "not a file");
    return buf;
  }
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    int e = errno;
    close(fd);
    return strerror_r(e, buf, bufsize);
  }
  *fd_out = fd;
  *size = (int64_t)st.st_size;
  return NULL;
}
