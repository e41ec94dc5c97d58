/* The file format of saved tar indexes (see tar_index.h), and their pruning
 * (rill_tar_index_prune). One file per archive, named after a hash of the archive's real path
 * and its base name; every integer little-endian (a file is read the same on any host):
 *
 *   "RILLTIX" 0x01 | u64 version 2
 *   i64 archive size | i64 mtime (ns) | u64 content mark (rill__tar_index_mark)
 *   i64 length of the real path | i64 records | i64 bytes of names
 *   the real path | records x (i64 off, i64 size, i64 name length) | the names
 *   u64 FNV-1a of every byte before it
 *
 * A file that does not match in any part is not used: the archive is walked again and the
 * file written anew (a file of version 1, which held the device and inode, is one). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "addon.h"
#include "tar_index.h"

#define BLOCK RILL__TAR_BLOCK
#define MAGIC "RILLTIX\x01"
#define VERSION 2u
#define HEAD_BYTES (8 + 8 * 7)
#define MAX_NAME RILL__TAR_MAX_META /* as the walk's longest name */

_Atomic int64_t rill__tar_walks;

int rill__tar_log_add(rill__tar_log_t* log, const char* name, int64_t len, int64_t off, int64_t size) {
  rill__tar_rec_t* r = rill__grow(log->recs, &log->cap, log->n, log->n + 1, sizeof *r, 1024);
  if (!r) return RILL_ENOMEM;
  log->recs = r;
  char* nm = rill__grow(log->names, &log->names_cap, log->names_len, log->names_len + (len ? len : 1), 1, 16384);
  if (!nm) return RILL_ENOMEM;
  log->names = nm;
  memcpy(log->names + log->names_len, name, (size_t)len);
  log->names_len += len;
  log->recs[log->n++] = (rill__tar_rec_t){.off = off, .size = size, .name_len = len};
  return RILL_OK;
}

void rill__tar_log_free(rill__tar_log_t* log) {
  rill__free(log->recs);
  rill__free(log->names);
  memset(log, 0, sizeof *log);
}

int rill__tar_index_path(const char* dir, const char* real, char* buf, size_t size) {
  const char* base = strrchr(real, '/');
  base = base ? base + 1 : real;
  char shown[65]; /* the base name's first 64 bytes, for a person listing the folder */
  size_t k = 0;
  for (; base[k] && k < sizeof shown - 1; k++) {
    char ch = base[k];
    shown[k] = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '.' ||
                       ch == '-' || ch == '_'
                   ? ch
                   : '_';
  }
  shown[k] = 0;
  unsigned long long h = (unsigned long long)rill__fnv(RILL__FNV_START, real, strlen(real));
  int n = snprintf(buf, size, "%s/%016llx-%s.rillidx", dir, h, shown);
  return n > 0 && (size_t)n < size ? RILL_OK : RILL_EINVAL;
}

/* Integers are little-endian in the file, whatever the host's order. */
static void put64(uint8_t** p, uint64_t v) {
  for (int i = 0; i < 8; i++) (*p)[i] = (uint8_t)(v >> (8 * i));
  *p += 8;
}

static uint64_t get64(const uint8_t** p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; i++) v |= (uint64_t)(*p)[i] << (8 * i);
  *p += 8;
  return v;
}

int64_t rill__tar_pread(int fd, void* buf, int64_t n, int64_t off) {
  int64_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, (char*)buf + got, (size_t)(n - got), (off_t)(off + got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return -1;
    if (r == 0) break;
    got += r;
  }
  return got;
}

/* n bytes at off, all of them: 0, or -1. */
static int read_at(int fd, void* buf, int64_t n, int64_t off) { return rill__tar_pread(fd, buf, n, off) == n ? 0 : -1; }

int rill__tar_index_mark(const rill__tar_stamp_t* st, const rill__tar_log_t* log, uint64_t* mark) {
  uint8_t block[BLOCK];
  uint64_t h = RILL__FNV_START;
  if (st->size >= BLOCK) {
    if (read_at(st->fd, block, BLOCK, 0) != 0) return -1;
    h = rill__fnv(h, block, BLOCK);
  }
  if (log->n > 0) {
    if (read_at(st->fd, block, BLOCK, log->recs[log->n - 1].off - BLOCK) != 0) return -1;
    h = rill__fnv(h, block, BLOCK);
  }
  *mark = h;
  return 0;
}

/* The file's head (HEAD_BYTES): the fields after its magic and version. 0, or -1 when it is
 * not a head of this version. */
static int parse_head(const uint8_t* buf, int64_t* asize, int64_t* mtime, uint64_t* mark, int64_t* plen, int64_t* nrec,
                      int64_t* nlen) {
  const uint8_t* p = buf + 8;
  if (memcmp(buf, MAGIC, 8) != 0 || get64(&p) != VERSION) return -1;
  *asize = (int64_t)get64(&p), *mtime = (int64_t)get64(&p), *mark = get64(&p);
  *plen = (int64_t)get64(&p), *nrec = (int64_t)get64(&p), *nlen = (int64_t)get64(&p);
  return 0;
}

int rill__tar_index_archive(const char* path, char* buf, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return 0;
  uint8_t head[HEAD_BYTES];
  int64_t asize, mt, plen, nrec, nlen;
  uint64_t mark;
  int ok = read_at(fd, head, HEAD_BYTES, 0) == 0 && parse_head(head, &asize, &mt, &mark, &plen, &nrec, &nlen) == 0 &&
           plen > 0 && (uint64_t)plen < size && read_at(fd, buf, plen, HEAD_BYTES) == 0;
  close(fd);
  if (!ok) return 0;
  buf[plen] = 0;
  return strlen(buf) == (size_t)plen;
}

int rill__tar_index_load(const char* path, const char* real, const rill__tar_stamp_t* st, rill__tar_log_t* log) {
  memset(log, 0, sizeof *log);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return 0;
  struct stat fs;
  int64_t real_len = (int64_t)strlen(real);
  /* the largest file a valid index can be: at most a record per 512 bytes of the archive, and
   * names no longer than a header's fields (256 bytes) or than the archive's own bytes */
  int64_t most = HEAD_BYTES + real_len + 8 + (st->size / BLOCK + 1) * (24 + 256) + st->size;
  if (fstat(fd, &fs) != 0 || !S_ISREG(fs.st_mode) || fs.st_size < HEAD_BYTES + 8 || fs.st_size > most) {
    close(fd);
    return 0;
  }
  int64_t n = (int64_t)fs.st_size;
  uint8_t* buf = rill__alloc((size_t)n);
  if (!buf) {
    close(fd);
    return RILL_ENOMEM;
  }
  int got = read_at(fd, buf, n, 0);
  close(fd);
  int rc = 0;
  const uint8_t* p = buf + n - 8;
  uint64_t sum = get64(&p), mark, want;
  int64_t size, mt, plen, nrec, nlen;
  if (got != 0 || rill__fnv(RILL__FNV_START, buf, (size_t)(n - 8)) != sum ||
      parse_head(buf, &size, &mt, &mark, &plen, &nrec, &nlen) != 0)
    goto done;
  p = buf + HEAD_BYTES;
  if (size != st->size || mt != st->mtime_ns || plen != real_len) goto done;
  if (nrec < 0 || nlen < 0 || nrec > (n - HEAD_BYTES) / 24 || nlen > n ||
      HEAD_BYTES + plen + nrec * 24 + nlen + 8 != n || memcmp(p, real, (size_t)plen) != 0)
    goto done;
  p += plen;
  const uint8_t* names = p + nrec * 24;
  log->recs = rill__alloc((size_t)(nrec ? nrec : 1) * sizeof *log->recs);
  log->names = rill__alloc((size_t)(nlen ? nlen : 1));
  if (!log->recs || !log->names) {
    rill__tar_log_free(log);
    rc = RILL_ENOMEM;
    goto done;
  }
  log->cap = nrec, log->names_cap = nlen; /* rill__tar_log_add below fills them without growing */
  int64_t sum_len = 0, last = 0;
  for (int64_t i = 0; i < nrec; i++) {
    int64_t off = (int64_t)get64(&p), sz = (int64_t)get64(&p), len = (int64_t)get64(&p);
    if (off <= last || off % BLOCK || sz < 0 || sz > size - off || len < 1 || len > MAX_NAME || len > nlen - sum_len) {
      rill__tar_log_free(log);
      goto done;
    }
    if ((rc = rill__tar_log_add(log, (const char*)names + sum_len, len, off, sz)) < 0) {
      rill__tar_log_free(log);
      goto done;
    }
    sum_len += len;
    last = off;
  }
  /* the archive's own bytes last: its first block and its last member's header */
  if (sum_len != nlen || rill__tar_index_mark(st, log, &want) != 0 || want != mark) {
    rill__tar_log_free(log);
    goto done;
  }
  rc = 1;
done:
  rill__free(buf);
  return rc;
}

int rill__tar_index_save(const char* path, const char* real, const rill__tar_stamp_t* st, const rill__tar_log_t* log) {
  int64_t plen = (int64_t)strlen(real), n = HEAD_BYTES + plen + log->n * 24 + log->names_len + 8;
  uint64_t mark;
  if (rill__tar_index_mark(st, log, &mark) != 0) return -1;
  uint8_t* buf = rill__alloc((size_t)n);
  if (!buf) return -1;
  uint8_t* p = buf;
  memcpy(p, MAGIC, 8);
  p += 8;
  put64(&p, VERSION), put64(&p, (uint64_t)st->size), put64(&p, (uint64_t)st->mtime_ns), put64(&p, mark);
  put64(&p, (uint64_t)plen), put64(&p, (uint64_t)log->n), put64(&p, (uint64_t)log->names_len);
  memcpy(p, real, (size_t)plen);
  p += plen;
  for (int64_t i = 0; i < log->n; i++)
    put64(&p, (uint64_t)log->recs[i].off), put64(&p, (uint64_t)log->recs[i].size),
        put64(&p, (uint64_t)log->recs[i].name_len);
  if (log->names_len) memcpy(p, log->names, (size_t)log->names_len);
  p += log->names_len;
  put64(&p, rill__fnv(RILL__FNV_START, buf, (size_t)(n - 8)));
  /* a temporary name of this process and call, in the same folder */
  static _Atomic unsigned long seq;
  char tmp[PATH_MAX + 64];
  int rc = -1;
  if (snprintf(tmp, sizeof tmp, "%s.%ld.%lu.tmp", path, (long)getpid(), (unsigned long)atomic_fetch_add(&seq, 1)) <
      (int)sizeof tmp) {
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) {
      int64_t put = 0;
      while (put < n) {
        ssize_t w = write(fd, buf + put, (size_t)(n - put));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        put += w;
      }
      rc = put == n && close(fd) == 0 && rename(tmp, path) == 0 ? 0 : -1;
      if (put != n) close(fd);
      if (rc < 0) unlink(tmp);
    }
  }
  rill__free(buf);
  return rc;
}

/* ---------------------------------------------------------------- pruning */

enum { TMP_AGE_S = 3600 }; /* a temporary file this old was left by a process that stopped */

/* Whether index file `name` of folder `dir` would be used at an open of its archive: 1, 0,
 * or RILL_ENOMEM. */
static int index_current(const char* dir, const char* name, const char* file) {
  char real[PATH_MAX], want[PATH_MAX + 128];
  if (!rill__tar_index_archive(file, real, sizeof real) || rill__tar_index_path(dir, real, want, sizeof want) != RILL_OK)
    return 0;
  const char* base = strrchr(want, '/');
  if (strcmp(base ? base + 1 : want, name) != 0) return 0; /* not named for its archive: never read */
  char eb[128];
  int fd;
  int64_t size;
  if (rill__open_regular(real, &fd, &size, eb, sizeof eb)) return 0;
  struct stat st;
  int rc = 0;
  if (fstat(fd, &st) == 0) {
    rill__tar_stamp_t stamp = {.size = (int64_t)st.st_size, .mtime_ns = rill__tar_mtime_ns(&st), .fd = fd};
    rill__tar_log_t log;
    rc = rill__tar_index_load(file, real, &stamp, &log);
    rill__tar_log_free(&log);
  }
  close(fd);
  return rc;
}

int rill_tar_index_prune(const char* index_dir, int64_t* kept, int64_t* removed, rill_error_t* err) {
  int64_t nkept = 0, nremoved = 0;
  if (kept) *kept = 0;
  if (removed) *removed = 0;
  if (!index_dir || !index_dir[0]) return rill__fail(err, RILL_EINVAL, "rill_tar_index_prune: no folder given");
  char eb[128];
  DIR* d = opendir(index_dir);
  if (!d)
    return errno == ENOTDIR || errno == ENOENT
               ? rill__fail(err, RILL_EINVAL, "rill_tar_index_prune: index_dir '%s' is not a folder: %s", index_dir,
                            strerror_r(errno, eb, sizeof eb))
               : rill__fail(err, RILL_EIO, "rill_tar_index_prune: cannot list '%s': %s", index_dir,
                            strerror_r(errno, eb, sizeof eb));
  int rc = RILL_OK;
  time_t now = time(NULL);
  for (struct dirent* e; rc == RILL_OK && (errno = 0, e = readdir(d));) {
    const char* name = e->d_name;
    size_t len = strlen(name);
    const char* idx = strstr(name, ".rillidx");
    if (!idx) continue;
    int is_index = idx + 8 == name + len, is_tmp = !is_index && len > 4 && strcmp(name + len - 4, ".tmp") == 0;
    if (!is_index && !is_tmp) continue;
    char file[PATH_MAX + 256];
    if (snprintf(file, sizeof file, "%s/%s", index_dir, name) >= (int)sizeof file) continue;
    struct stat st;
    if (lstat(file, &st) != 0 || !S_ISREG(st.st_mode)) continue; /* gone meanwhile, or not a file rill wrote */
    int drop;
    if (is_tmp) {
      drop = now - st.st_mtim.tv_sec > TMP_AGE_S;
    } else {
      int cur = index_current(index_dir, name, file);
      if (cur < 0) {
        rc = rill__fail(err, RILL_ENOMEM, "rill_tar_index_prune: out of memory reading %s", file);
        break;
      }
      drop = !cur;
      nkept += cur;
    }
    if (!drop) continue;
    if (unlink(file) != 0 && errno != ENOENT) {
      rc = rill__fail(err, RILL_EIO, "rill_tar_index_prune: cannot remove %s: %s", file, strerror_r(errno, eb, sizeof eb));
      break;
    }
    nremoved += is_index; /* a temporary file is not an index */
  }
  if (rc == RILL_OK && errno != 0)
    rc = rill__fail(err, RILL_EIO, "rill_tar_index_prune: cannot list '%s': %s", index_dir, strerror_r(errno, eb, sizeof eb));
  closedir(d);
  if (kept) *kept = nkept;
  if (removed) *removed = nremoved;
  return rc;
}
