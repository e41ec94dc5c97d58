/* The file format of saved tar indexes (see tar_index.h). One file per archive, named after a
 * hash of the archive's real path and its base name, in the host's byte order (a cache of
 * this machine, not an interchange format):
 *
 *   "RILLTIX" 0x01 | u32 0x01020304 (byte order) | u32 version 1
 *   i64 archive size | i64 mtime (ns) | u64 device | u64 inode
 *   i64 length of the real path | i64 records | i64 bytes of names
 *   the real path | records x (i64 off, i64 size, i64 name length) | the names
 *   u64 FNV-1a of every byte before it
 *
 * A file that does not match in any part is not used: the archive is walked again and the
 * file written anew. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "addon.h"
#include "tar_index.h"

#define BLOCK RILL__TAR_BLOCK
#define MAGIC "RILLTIX\x01"
#define VERSION 1u
#define HEAD_BYTES (8 + 4 + 4 + 8 * 7)
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

static void put64(uint8_t** p, uint64_t v) {
  memcpy(*p, &v, 8);
  *p += 8;
}

static uint64_t get64(const uint8_t** p) {
  uint64_t v;
  memcpy(&v, *p, 8);
  *p += 8;
  return v;
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
  int64_t got = 0;
  while (got < n) {
    ssize_t r = pread(fd, buf + got, (size_t)(n - got), got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += r;
  }
  close(fd);
  int rc = 0;
  const uint8_t* p = buf;
  uint32_t order, version;
  uint64_t sum;
  memcpy(&sum, buf + n - 8, 8);
  if (got != n || memcmp(p, MAGIC, 8) != 0 || rill__fnv(RILL__FNV_START, buf, (size_t)(n - 8)) != sum) goto done;
  p += 8;
  memcpy(&order, p, 4), memcpy(&version, p + 4, 4);
  p += 8;
  if (order != 0x01020304u || version != VERSION) goto done;
  int64_t size = (int64_t)get64(&p), mt = (int64_t)get64(&p);
  uint64_t dev = get64(&p), ino = get64(&p);
  int64_t plen = (int64_t)get64(&p), nrec = (int64_t)get64(&p), nlen = (int64_t)get64(&p);
  if (size != st->size || mt != st->mtime_ns || dev != st->dev || ino != st->ino || plen != real_len) goto done;
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
  if (sum_len != nlen) {
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
  uint8_t* buf = rill__alloc((size_t)n);
  if (!buf) return -1;
  uint8_t* p = buf;
  memcpy(p, MAGIC, 8);
  uint32_t order = 0x01020304u, version = VERSION;
  memcpy(p + 8, &order, 4), memcpy(p + 12, &version, 4);
  p += 16;
  put64(&p, (uint64_t)st->size), put64(&p, (uint64_t)st->mtime_ns), put64(&p, st->dev), put64(&p, st->ino);
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
