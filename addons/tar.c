/* Tar archives as datasets (WebDataset-style shards): one row per sample, one column per
 * member extension.
 *
 * Opening indexes every archive: each header is read (from a small window, so the headers of
 * a sample's small members cost one read), checked and its data skipped; a member gets its
 * sample, its column and the place and size of its data. Under index_dir the members a walk
 * met are saved (tar_index.c) and a later open replays them through the same add_member
 * instead of walking, while the archive is unchanged. The archives are indexed side by side
 * on threads (a cold disk answers several reads at once), each into an index of its own, and
 * merged in order. Pulling a row reads each member with one pread straight into its cell, from
 * the descriptor the archive was indexed from (kept while the process's budget of kept
 * descriptors allows) or else from the archive opened again by its path (once per run of rows
 * from one archive in a call); either way an fstat first checks that it is the file indexed,
 * unchanged.
 *
 * Formats (POSIX.1-2001 ustar and pax, GNU tar): a header is a 512-byte block; name (100
 * bytes) and, for "ustar\0" headers, a prefix (155 bytes) joined by '/'; size as octal text or,
 * GNU's, base-256 (first byte's high bit set); the checksum is the sum of the header's bytes
 * with its own field read as spaces (unsigned, or signed as some old writers made it). A pax
 * 'x' header's records ("LEN key=value\n") override the next member's path and size; GNU 'L'
 * holds the next member's long name. Data follows in whole blocks; link, device, folder and
 * FIFO headers have none, whatever their size field says. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "addon.h"
#include "rill_addons.h"
#include "tar_index.h"
#include "text.h"

#define BLOCK RILL__TAR_BLOCK
#define WINDOW 16384                  /* bytes read at once while walking headers */
#define MAX_META RILL__TAR_MAX_META
#define MAX_TEXT 256                  /* a typed member's text (a number, a time) */

typedef struct archive {
  char* path;
  int64_t path_len;
  int fd;                             /* the descriptor the index was read from, kept (rill__keep_fd), or -1 */
  int64_t size, mtime_ns;
  uint64_t dev, ino;
} archive_t;

typedef struct member {
  int32_t col;
  int32_t ext;                        /* its extension as written, in ext_names (error messages) */
  int64_t off, size;
} member_t;

typedef struct tar_ctx {
  _Atomic int refs;
  archive_t* archives;
  int narchives;
  int64_t nsamples;
  int32_t* sample_archive;            /* nsamples: each sample's archive (an archive's own part has none) */
  int64_t* key_off;                   /* nsamples + 1 offsets into keys */
  char* keys;
  int64_t* first;                     /* nsamples + 1: the sample's members are members[first[s]..first[s+1]) */
  member_t* members;
  int64_t nmembers;
  int ncols;
  char** col_names;                   /* in byte order */
  char** ext_names;                   /* the members' extensions as written */
  int next_names;
  rill_dtype_t* col_dtypes;
  int64_t* col_count;                 /* samples holding the column */
} tar_ctx_t;

/* Frees the index of c (samples, keys, members, names): the dataframe's, or an archive's part. */
static void index_free(tar_ctx_t* c) {
  rill__free(c->sample_archive);
  rill__free(c->key_off);
  rill__free(c->keys);
  rill__free(c->first);
  rill__free(c->members);
  rill__free_vec((void**)c->col_names, c->ncols);
  rill__free_vec((void**)c->ext_names, c->next_names);
}

static void ctx_unref(void* p) {
  tar_ctx_t* c = p;
  if (!c || atomic_fetch_sub(&c->refs, 1) != 1) return;
  for (int i = 0; i < c->narchives; i++) {
    rill__free(c->archives[i].path);
    if (c->archives[i].fd >= 0) {
      close(c->archives[i].fd);
      rill__unkeep_fd();
    }
  }
  rill__free(c->archives);
  index_free(c);
  rill__free(c->col_dtypes);
  rill__free(c->col_count);
  rill__free(c);
}

/* A member column's context: the archives' and which column. */
typedef struct col_ctx {
  tar_ctx_t* tar;
  int col;
} col_ctx_t;

static void col_free(void* p) {
  col_ctx_t* cc = p;
  if (!cc) return;
  ctx_unref(cc->tar);
  rill__free(cc);
}

/* ---------------------------------------------------------------- reading */


/* A descriptor of archive a for a call's reads: its kept one, or one opened by its path
 * (*opened = 1: the caller closes it); either must still be the file indexed, unchanged.
 * < 0 with a message naming the archive. */
static int open_archive(const archive_t* a, int* opened, rill_error_t* err) {
  int fd = a->fd;
  *opened = 0;
  if (fd < 0) {
    char eb[128];
    int64_t size;
    const char* why = rill__open_regular(a->path, &fd, &size, eb, sizeof eb);
    if (why) return rill_error_set(err, RILL_EIO, "%s: cannot open: %s", a->path, why);
    *opened = 1;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_dev != a->dev || (uint64_t)st.st_ino != a->ino ||
      (int64_t)st.st_size != a->size || rill__tar_mtime_ns(&st) != a->mtime_ns) {
    if (*opened) close(fd);
    *opened = 0;
    return rill_error_set(err, RILL_EIO,
                          "%s: the archive changed since it was indexed (%s): open it again", a->path,
                          a->fd >= 0 ? "its size or modification time" : "another file, size or modification time");
  }
  return fd;
}

/* ---------------------------------------------------------------- sources */

static int alloc_cells(rill_exec_t* exec, rill_array_t* out, rill_dtype_t dtype, int64_t n, rill_error_t* err) {
  int rc = rill_exec_alloc(exec, out, rill_type_scalar(dtype), n);
  return rc < 0 ? rill_error_set(err, rc, "cannot allocate %lld cells", (long long)n) : RILL_OK;
}

static int key_source(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* exec, void* ctx,
                      rill_error_t* err) {
  const tar_ctx_t* c = ctx;
  int rc = alloc_cells(exec, out, RILL_STRING, n, err);
  for (int64_t i = 0; rc == RILL_OK && i < n; i++) {
    int64_t s = rows[i];
    if ((rc = rill_array_set_var(out, i, c->keys + c->key_off[s], c->key_off[s + 1] - c->key_off[s], NULL)) < 0)
      rc = rill_error_set(err, rc, "cannot allocate key cells");
  }
  return rc;
}

/* "ARCHIVE:KEY" */
static int path_source(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* exec, void* ctx,
                       rill_error_t* err) {
  const tar_ctx_t* c = ctx;
  int rc = alloc_cells(exec, out, RILL_STRING, n, err);
  for (int64_t i = 0; rc == RILL_OK && i < n; i++) {
    int64_t s = rows[i], kn = c->key_off[s + 1] - c->key_off[s];
    const archive_t* ar = &c->archives[c->sample_archive[s]];
    const char* ap = ar->path;
    int64_t an = ar->path_len;
    if ((rc = rill_array_set_var(out, i, NULL, an + 1 + kn, NULL)) < 0) {
      rc = rill_error_set(err, rc, "cannot allocate path cells");
      break;
    }
    char* d = (char*)out->data + out->offsets[i];
    memcpy(d, ap, (size_t)an);
    d[an] = ':';
    memcpy(d + an + 1, c->keys + c->key_off[s], (size_t)kn);
  }
  return rc;
}

static const member_t* find_member(const tar_ctx_t* c, int64_t s, int col) {
  for (int64_t m = c->first[s]; m < c->first[s + 1]; m++)
    if (c->members[m].col == col) return &c->members[m];
  return NULL;
}

/* Fails cell i (a row error: err->row = i) with "ARCHIVE:KEY.EXT: ..." (m: sample s's member) */
static int member_error(const tar_ctx_t* c, const member_t* m, int64_t s, int64_t i, int code, const char* what,
                        rill_error_t* err) {
  if (err) err->row = i;
  return rill_error_set(err, code, "%s:%.*s.%s: %s", c->archives[c->sample_archive[s]].path,
                        (int)(c->key_off[s + 1] - c->key_off[s]), c->keys + c->key_off[s], c->ext_names[m->ext], what);
}

/* Takes back variable cell i, set by rill_array_set_var but not filled. */
static void take_back(rill_array_t* out, int64_t i) {
  out->offsets[i + 1] = out->offsets[i];
  out->data_size = out->offsets[i];
  rill__array_var_commit(out, i);
}

static int is_space(char ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r'); }

static int member_source(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* exec, void* ctx,
                         rill_error_t* err) {
  const col_ctx_t* cc = ctx;
  const tar_ctx_t* c = cc->tar;
  rill_dtype_t dt = c->col_dtypes[cc->col];
  int var = dt == RILL_BINARY || dt == RILL_STRING;
  int rc = alloc_cells(exec, out, dt, n, err);
  if (rc < 0) return rc;
  if (var) { /* the call's bytes reserved at once */
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
      const member_t* m = find_member(c, rows[i], cc->col);
      if (m && m->size < INT64_MAX / 2 - total) total += m->size;
    }
    if (total > 0) (void)rill_array_reserve(out, total);
  }
  int fd = -1, open_at = -1, opened = 0; /* the archive open, which, and whether this call opened it */
  char msg[256];
  for (int64_t i = 0; rc == RILL_OK && i < n; i++) {
    int64_t s = rows[i];
    const member_t* m = find_member(c, s, cc->col);
    if (!m) {
      if ((var && (rc = rill_array_set_var(out, i, NULL, 0, NULL)) < 0) || (rc = rill_array_set_null(out, i)) < 0)
        rc = rill_error_set(err, rc, "cannot allocate null cells");
      continue;
    }
    int a = c->sample_archive[s];
    if (a != open_at) {
      if (opened) close(fd);
      open_at = -1;
      if ((fd = open_archive(&c->archives[a], &opened, err)) < 0) {
        if (err) err->row = i;
        return fd;
      }
      open_at = a;
    }
    char text[MAX_TEXT];
    char* dst = text;
    if (var) {
      if ((rc = rill_array_set_var(out, i, NULL, m->size, NULL)) < 0) {
        snprintf(msg, sizeof msg, "cannot allocate %lld bytes", (long long)m->size);
        rc = member_error(c, m, s, i, rc, msg, err);
        break;
      }
      dst = (char*)out->data + out->offsets[i];
    } else if (m->size > MAX_TEXT) {
      snprintf(msg, sizeof msg, "%lld bytes are not %s text (at most %d)", (long long)m->size,
               rill_dtype_name(dt), MAX_TEXT);
      rc = member_error(c, m, s, i, RILL_EFORMAT, msg, err);
      break;
    }
    int64_t got = rill__tar_pread(fd, dst, m->size, m->off);
    if (got != m->size) {
      if (got < 0)
        snprintf(msg, sizeof msg, "cannot read: %s", strerror_r(errno, (char[96]){0}, 96));
      else
        snprintf(msg, sizeof msg, "the archive ends %lld bytes into the member's %lld", (long long)got,
                 (long long)m->size);
      if (var) take_back(out, i);
      rc = member_error(c, m, s, i, RILL_EIO, msg, err);
      break;
    }
    if (dt == RILL_BINARY) continue;
    if (dt == RILL_STRING) {
      int64_t bad = rill__utf8_invalid(dst, m->size);
      if (bad >= 0) {
        snprintf(msg, sizeof msg, "not UTF-8 text (byte 0x%02X at byte %lld)", (unsigned char)dst[bad], (long long)bad);
        take_back(out, i);
        rc = member_error(c, m, s, i, RILL_EFORMAT, msg, err);
      }
      continue;
    }
    size_t lo = 0, hi = (size_t)m->size;
    while (lo < hi && is_space(text[lo])) lo++;
    while (hi > lo && is_space(text[hi - 1])) hi--;
    int r = hi > lo ? rill__store_text(out, i, dt, text + lo, hi - lo) : RILL_EFORMAT;
    if (r < 0) {
      char shown[4 * 40 + 4];
      size_t k = 0;
      for (size_t j = lo; j < hi && j < lo + 40; j++) { /* bytes that are not printable ASCII as \xHH */
        unsigned char ch = (unsigned char)text[j];
        if (ch >= 0x20 && ch < 0x7f && ch != '\\') shown[k++] = (char)ch;
        else k += (size_t)snprintf(shown + k, sizeof shown - k, "\\x%02X", ch);
      }
      shown[k] = 0;
      if (hi == lo)
        snprintf(msg, sizeof msg, "holds no %s (an empty text)", rill_dtype_name(dt));
      else
        snprintf(msg, sizeof msg, "\"%s%s\" is not %s %s", shown, hi - lo > 40 ? "..." : "",
                 r == RILL_ERANGE ? "in the range of" : "a value of type", rill_dtype_name(dt));
      rc = member_error(c, m, s, i, r == RILL_ERANGE ? RILL_ERANGE : RILL_EFORMAT, msg, err);
    }
  }
  if (opened) close(fd);
  return rc;
}

/* ---------------------------------------------------------------- indexing */

/* A set of names (column names, extensions), ids in order of arrival; the names array and its
 * count are the context's (*names, *n). */
typedef struct strset {
  char*** names;
  int* n;
  int64_t cap;
  int32_t* slots;                     /* open addressing over ids + 1 (0 = empty) */
  int64_t nslots;
} strset_t;

typedef struct builder {
  tar_ctx_t* c;
  const rill_tar_opts_t* o;           /* the caller's columns (checked) */
  int64_t* hits;                      /* members of each of o->columns' extensions */
  int64_t cap_first, cap_key_off, cap_members, cap_keys, key_bytes;
  strset_t cols, exts;                /* into c->col_names, c->ext_names */
  int64_t* key_slots;                 /* the archive's samples + 1 by key (0 = empty) */
  int64_t nkey_slots, nkeys;
} builder_t;

/* The id of name str[0..n) in set t, added when new: >= 0, or RILL_ENOMEM. */
static int strset_id(strset_t* t, const char* str, size_t n) {
  int count = *t->n;
  if ((int64_t)(count + 1) * 2 > t->nslots) { /* grow and rehash */
    int64_t ns = t->nslots ? t->nslots * 2 : 64;
    int32_t* slots = rill__calloc((size_t)ns, sizeof *slots);
    if (!slots) return RILL_ENOMEM;
    for (int k = 0; k < count; k++) {
      uint64_t h = rill__fnv(RILL__FNV_START, (*t->names)[k], strlen((*t->names)[k])) & (uint64_t)(ns - 1);
      while (slots[h]) h = (h + 1) & (uint64_t)(ns - 1);
      slots[h] = k + 1;
    }
    rill__free(t->slots);
    t->slots = slots;
    t->nslots = ns;
  }
  uint64_t h = rill__fnv(RILL__FNV_START, str, n) & (uint64_t)(t->nslots - 1);
  for (; t->slots[h]; h = (h + 1) & (uint64_t)(t->nslots - 1)) {
    const char* name = (*t->names)[t->slots[h] - 1];
    if (strlen(name) == n && memcmp(name, str, n) == 0) return t->slots[h] - 1;
  }
  char** names = rill__grow(*t->names, &t->cap, count, count + 1, sizeof *names, 8);
  if (!names) return RILL_ENOMEM;
  *t->names = names;
  char* name = rill__alloc(n + 1);
  if (!name) return RILL_ENOMEM;
  memcpy(name, str, n);
  name[n] = 0;
  names[count] = name;
  t->slots[h] = count + 1;
  return (*t->n)++;
}

/* Whether key k[0..n) names a sample of the archive walked (its samples are in key_slots),
 * else adds sample s under it: 1, 0, or RILL_ENOMEM. */
static int key_seen(builder_t* b, const char* k, int64_t n, int64_t s) {
  tar_ctx_t* c = b->c;
  if ((b->nkeys + 1) * 2 > b->nkey_slots) {
    int64_t ns = b->nkey_slots ? b->nkey_slots * 2 : 1024;
    int64_t* slots = rill__calloc((size_t)ns, sizeof *slots);
    if (!slots) return RILL_ENOMEM;
    for (int64_t i = 0; i < b->nkey_slots; i++) {
      int64_t t = b->key_slots[i] - 1;
      if (t < 0) continue;
      size_t kn = (size_t)(c->key_off[t + 1] - c->key_off[t]);
      uint64_t h = rill__fnv(RILL__FNV_START, c->keys + c->key_off[t], kn) & (uint64_t)(ns - 1);
      while (slots[h]) h = (h + 1) & (uint64_t)(ns - 1);
      slots[h] = t + 1;
    }
    rill__free(b->key_slots);
    b->key_slots = slots;
    b->nkey_slots = ns;
  }
  uint64_t h = rill__fnv(RILL__FNV_START, k, (size_t)n) & (uint64_t)(b->nkey_slots - 1);
  for (; b->key_slots[h]; h = (h + 1) & (uint64_t)(b->nkey_slots - 1)) {
    int64_t t = b->key_slots[h] - 1;
    if (c->key_off[t + 1] - c->key_off[t] == n && memcmp(c->keys + c->key_off[t], k, (size_t)n) == 0) return 1;
  }
  b->key_slots[h] = s + 1;
  b->nkeys++;
  return 0;
}

/* Octal text of a header field (leading spaces, then digits, then NULs or spaces), or GNU's
 * base-256 (first byte's high bit set): 0 and the value, or -1. */
static int parse_number(const uint8_t* f, int len, int64_t* v) {
  uint64_t x = 0;
  if (f[0] & 0x80) {
    if (f[0] & 0x40) return -1; /* negative */
    x = f[0] & 0x3f;
    for (int i = 1; i < len; i++) {
      if (x > (uint64_t)INT64_MAX >> 8) return -1;
      x = x << 8 | f[i];
    }
    *v = (int64_t)x;
    return 0;
  }
  int i = 0;
  while (i < len && f[i] == ' ') i++;
  int digits = 0;
  for (; i < len && f[i] >= '0' && f[i] <= '7'; i++, digits++) {
    if (x > (uint64_t)INT64_MAX >> 3) return -1;
    x = x << 3 | (uint64_t)(f[i] - '0');
  }
  for (; i < len; i++)
    if (f[i] != ' ' && f[i] != 0) return -1;
  if (!digits) return -1;
  *v = (int64_t)x;
  return 0;
}

static int checksum_ok(const uint8_t* h) {
  int64_t stored;
  if (parse_number(h + 148, 8, &stored) < 0) return 0;
  int64_t u = 0, s = 0;
  for (int i = 0; i < BLOCK; i++) {
    int inside = i >= 148 && i < 156;
    u += inside ? ' ' : h[i];
    s += inside ? ' ' : (signed char)h[i];
  }
  return stored == u || stored == s;
}

static const char* compression(const uint8_t* h, int64_t n) {
  if (n >= 2 && h[0] == 0x1f && h[1] == 0x8b) return "gzip";
  if (n >= 3 && memcmp(h, "BZh", 3) == 0) return "bzip2";
  if (n >= 6 && memcmp(h, "\xfd" "7zXZ\0", 6) == 0) return "xz";
  if (n >= 4 && memcmp(h, "\x28\xb5\x2f\xfd", 4) == 0) return "zstd";
  return NULL;
}

static int compressed(const char* path, const char* how, rill_error_t* err) {
  return rill__fail(err, RILL_ENOTSUP, "%s: a %s-compressed archive: members are read in place, so decompress it first "
                    "(%s -d)", path, how, how);
}

/* One archive being walked. */
typedef struct walk {
  builder_t* b;
  const char* path;
  int fd;
  int64_t size;
  uint8_t* win;
  int64_t win_at, win_len;
  char* name;                         /* the next member's name from a pax or GNU header, or NULL */
  int64_t name_len, pax_size;         /* pax_size: the next member's size from a pax header, or -1 */
  int64_t last_sample;                /* the archive's last sample (a member of the same key joins it), or -1 */
  rill__tar_log_t* log;               /* the members met, for a saved index (index_dir), or NULL */
} walk_t;

/* The header block at pos (pos + BLOCK <= size), from the window: RILL_OK and *h, or < 0. */
static int header_at(walk_t* w, int64_t pos, const uint8_t** h, rill_error_t* err) {
  if (pos < w->win_at || pos + BLOCK > w->win_at + w->win_len) {
    int64_t n = w->size - pos < WINDOW ? w->size - pos : WINDOW;
    int64_t got = rill__tar_pread(w->fd, w->win, n, pos);
    if (got < BLOCK) {
      char eb[96];
      return rill__fail(err, RILL_EIO, "%s: cannot read the header at byte %lld: %s", w->path, (long long)pos,
                        got < 0 ? strerror_r(errno, eb, sizeof eb) : "the file shrank while it was read");
    }
    w->win_at = pos;
    w->win_len = got;
  }
  *h = w->win + (pos - w->win_at);
  return RILL_OK;
}

/* The data of a pax or GNU header (size bytes at pos) into a new NUL-terminated buffer *d:
 * RILL_OK, or < 0. */
static int read_meta(walk_t* w, int64_t pos, int64_t size, int64_t hpos, char** d, rill_error_t* err) {
  if (size > MAX_META)
    return rill__fail(err, RILL_EFORMAT, "%s: byte %lld: an extended header of %lld bytes (at most %lld): the archive "
                      "is damaged", w->path, (long long)hpos, (long long)size, (long long)MAX_META);
  if (!(*d = rill__alloc((size_t)size + 1))) return rill__fail(err, RILL_ENOMEM, "out of memory");
  int64_t got = rill__tar_pread(w->fd, *d, size, pos);
  if (got != size) {
    char eb[96];
    rill__free(*d);
    *d = NULL;
    return rill__fail(err, RILL_EIO, "%s: cannot read the extended header at byte %lld: %s", w->path, (long long)hpos,
                      got < 0 ? strerror_r(errno, eb, sizeof eb) : "the file shrank while it was read");
  }
  (*d)[size] = 0;
  return RILL_OK;
}

static void set_name(walk_t* w, char* name, int64_t len) {
  rill__free(w->name);
  w->name = name;
  w->name_len = len;
}

/* A pax 'x' header's records: path and size kept for the next member. */
static int parse_pax(walk_t* w, char* d, int64_t size, int64_t hpos, rill_error_t* err) {
  int64_t p = 0;
  while (p < size) {
    int64_t len = 0, q = p;
    while (q < size && d[q] >= '0' && d[q] <= '9' && len < MAX_META) len = len * 10 + (d[q++] - '0');
    if (q == p || q >= size || d[q] != ' ' || len <= q - p + 1 || len > size - p || d[p + len - 1] != '\n')
      return rill__fail(err, RILL_EFORMAT, "%s: byte %lld: pax record %lld bytes into the extended header cannot be "
                        "read (\"LENGTH key=value\\n\" expected)", w->path, (long long)hpos, (long long)p);
    char *key = d + q + 1, *end = d + p + len - 1;
    char* eq = memchr(key, '=', (size_t)(end - key));
    if (!eq)
      return rill__fail(err, RILL_EFORMAT, "%s: byte %lld: pax record %lld bytes into the extended header has no '='",
                        w->path, (long long)hpos, (long long)p);
    size_t kn = (size_t)(eq - key);
    char* val = eq + 1;
    int64_t vn = end - val;
    if (kn == 4 && memcmp(key, "path", 4) == 0) {
      char* name = rill__alloc((size_t)vn + 1);
      if (!name) return rill__fail(err, RILL_ENOMEM, "out of memory");
      memcpy(name, val, (size_t)vn);
      name[vn] = 0;
      set_name(w, name, vn);
    } else if (kn == 4 && memcmp(key, "size", 4) == 0) {
      int64_t v = 0;
      int ok = vn > 0 && vn <= 18;
      for (int64_t k = 0; ok && k < vn; k++) ok = val[k] >= '0' && val[k] <= '9', v = v * 10 + (val[k] - '0');
      if (!ok)
        return rill__fail(err, RILL_EFORMAT, "%s: byte %lld: pax size \"%.*s\" is not a size", w->path,
                          (long long)hpos, (int)(vn > 40 ? 40 : vn), val);
      w->pax_size = v;
    } else if (kn > 11 && memcmp(key, "GNU.sparse.", 11) == 0) {
      return rill__fail(err, RILL_ENOTSUP, "%s: byte %lld: a GNU sparse member (not supported: archive it without "
                        "--sparse)", w->path, (long long)hpos);
    }
    p += len;
  }
  return RILL_OK;
}

/* Adds member name[0..len) (data at off, size bytes) to its sample. */
static int add_member(walk_t* w, const char* name, int64_t len, int64_t off, int64_t size, int64_t hpos,
                      rill_error_t* err) {
  builder_t* b = w->b;
  tar_ctx_t* c = b->c;
  if (memchr(name, 0, (size_t)len))
    return rill__fail(err, RILL_EFORMAT, "%s: byte %lld: a member name holding a NUL byte", w->path, (long long)hpos);
  int64_t bad = rill__utf8_invalid(name, len);
  if (bad >= 0)
    return rill__fail(err, RILL_EFORMAT, "%s: byte %lld: member name \"%.*s\" is not UTF-8 text (byte 0x%02X at byte "
                      "%lld): rename it", w->path, (long long)hpos, (int)bad, name, (unsigned char)name[bad],
                      (long long)bad);
  int64_t base = len;
  while (base > 0 && name[base - 1] != '/') base--;
  const char* dot = memchr(name + base, '.', (size_t)(len - base));
  if (!dot || dot == name + base || dot == name + len - 1) return RILL_OK; /* not part of a sample */
  int64_t klen = dot - name;
  size_t elen = (size_t)(name + len - dot - 1);
  char ext[256];
  if (elen >= sizeof ext)
    return rill__fail(err, RILL_EFORMAT, "%s: byte %lld: member \"%.*s\": an extension of %zu bytes (at most %zu)",
                      w->path, (long long)hpos, (int)(len > 200 ? 200 : len), name, elen, sizeof ext - 1);
  for (size_t k = 0; k < elen; k++) ext[k] = (char)(dot[1 + k] >= 'A' && dot[1 + k] <= 'Z' ? dot[1 + k] + 32 : dot[1 + k]);
  ext[elen] = 0;
  /* the column: the extension, or the name the caller gives it */
  const char* cname = ext;
  int renamed = 0;
  for (int i = 0; i < b->o->ncolumns; i++)
    if (strcasecmp(b->o->columns[i].ext, ext) == 0) {
      b->hits[i]++;
      if (b->o->columns[i].name) cname = b->o->columns[i].name, renamed = 1;
      break;
    }
  if (!renamed && (strcmp(ext, "key") == 0 || strcmp(ext, "path") == 0))
    return rill__fail(err, RILL_EFORMAT, "%s: byte %lld: member \"%.*s\": its extension names a column the source "
                      "makes itself (key, path): give its column another name (rill_tar_column_t.name)", w->path,
                      (long long)hpos, (int)len, name);
  int col = strset_id(&b->cols, cname, strlen(cname)), ext_id = strset_id(&b->exts, dot + 1, elen);
  if (col < 0 || ext_id < 0) return rill__fail(err, RILL_ENOMEM, "out of memory");
  /* the same key as the archive's last sample joins it */
  int64_t s = w->last_sample;
  if (s < 0 || c->key_off[s + 1] - c->key_off[s] != klen || memcmp(c->keys + c->key_off[s], name, (size_t)klen) != 0) {
    s = c->nsamples;
    int64_t* first = rill__grow(c->first, &b->cap_first, s + 1, s + 2, sizeof *first, 1024);
    if (first) c->first = first;
    int64_t* ko = first ? rill__grow(c->key_off, &b->cap_key_off, s + 1, s + 2, sizeof *ko, 1024) : NULL;
    if (ko) c->key_off = ko;
    char* keys = ko ? rill__grow(c->keys, &b->cap_keys, b->key_bytes, b->key_bytes + klen, 1, 4096) : NULL;
    if (!keys) return rill__fail(err, RILL_ENOMEM, "out of memory");
    c->keys = keys;
    memcpy(c->keys + b->key_bytes, name, (size_t)klen);
    b->key_bytes += klen;
    c->first[s] = c->nmembers;
    c->key_off[s + 1] = b->key_bytes;
    int seen = key_seen(b, name, klen, s);
    if (seen < 0) return rill__fail(err, RILL_ENOMEM, "out of memory");
    if (seen)
      return rill__fail(err, RILL_EFORMAT, "%s: byte %lld: member \"%.*s\": sample \"%.*s\" has members earlier in the "
                        "archive, not next to this one (a sample's members must be consecutive: write the archive "
                        "sorted by name, e.g. tar --sort=name)", w->path, (long long)hpos, (int)len, name, (int)klen,
                        name);
    c->nsamples++;
    w->last_sample = s;
  } else {
    for (int64_t m = c->first[s]; m < c->nmembers; m++)
      if (c->members[m].col == col)
        return rill__fail(err, RILL_EFORMAT, "%s: byte %lld: member \"%.*s\": sample \"%.*s\" already has a member "
                          "%s \"%s\"%s", w->path, (long long)hpos, (int)len, name, (int)klen, name,
                          renamed ? "for column" : "with extension", c->col_names[col],
                          renamed ? " (the extensions given that name are alternatives: one a sample)" : "");
  }
  member_t* ms = rill__grow(c->members, &b->cap_members, c->nmembers, c->nmembers + 1, sizeof *ms, 1024);
  if (!ms) return rill__fail(err, RILL_ENOMEM, "out of memory");
  c->members = ms;
  c->members[c->nmembers++] = (member_t){.col = col, .ext = ext_id, .off = off, .size = size};
  return RILL_OK;
}

/* Walks archive w->path, adding its members. */
static int walk_archive(walk_t* w, rill_error_t* err) {
  int64_t pos = 0;
  while (pos < w->size) {
    if (w->size - pos < BLOCK && pos == 0) { /* a compressed archive smaller than a block */
      uint8_t head[8];
      int64_t got = rill__tar_pread(w->fd, head, w->size < 8 ? w->size : 8, 0);
      const char* z = got > 0 ? compression(head, got) : NULL;
      if (z) return compressed(w->path, z, err);
    }
    if (w->size - pos < BLOCK)
      return rill__fail(err, RILL_EFORMAT, "%s: byte %lld: a partial header of %lld bytes: the archive is truncated",
                        w->path, (long long)pos, (long long)(w->size - pos));
    const uint8_t* h = NULL;
    int rc = header_at(w, pos, &h, err);
    if (rc < 0) return rc;
    int zero = 1;
    for (int i = 0; zero && i < BLOCK; i++) zero = h[i] == 0;
    if (zero) return RILL_OK; /* the end-of-archive blocks */
    if (!checksum_ok(h)) {
      const char* z = pos == 0 ? compression(h, w->win_len) : NULL;
      if (z) return compressed(w->path, z, err);
      return rill__fail(err, RILL_EFORMAT, "%s: byte %lld: %s (its checksum does not match its bytes)", w->path,
                        (long long)pos, pos == 0 ? "not a tar archive" : "not a tar header: the archive is damaged");
    }
    char type = (char)h[156];
    int64_t size;
    if (parse_number(h + 124, 12, &size) < 0) {
      if (type >= '1' && type <= '6') size = 0; /* no data follows these: their size is not read */
      else
        return rill__fail(err, RILL_EFORMAT, "%s: byte %lld: the header's size field cannot be read: the archive is "
                          "damaged", w->path, (long long)pos);
    }
    int has_data = !(type >= '1' && type <= '6');
    if (has_data && w->pax_size >= 0 && type != 'x' && type != 'g' && type != 'L' && type != 'K') size = w->pax_size;
    int64_t data = pos + BLOCK, blocks = has_data ? (size + BLOCK - 1) / BLOCK * BLOCK : 0;
    if (has_data && size > w->size - data) {
      char nm[101];
      memcpy(nm, h, 100);
      nm[100] = 0;
      return rill__fail(err, RILL_EFORMAT, "%s: byte %lld: member \"%s\" holds %lld bytes but the archive ends %lld "
                        "bytes after its header: the archive is truncated", w->path, (long long)pos,
                        w->name ? w->name : nm, (long long)size, (long long)(w->size - data));
    }
    if (type == 'x' || type == 'L') {
      char* d;
      if ((rc = read_meta(w, data, size, pos, &d, err)) < 0) return rc;
      if (type == 'x') {
        rc = parse_pax(w, d, size, pos, err);
        rill__free(d);
      } else {
        int64_t n = size;
        while (n > 0 && d[n - 1] == 0) n--;
        set_name(w, d, n);
      }
      if (rc < 0) return rc;
      pos = data + blocks;
      continue;
    }
    if (type == 'K' || type == 'g') { /* a link's long target, pax globals: nothing a sample uses */
      pos = data + blocks;
      continue;
    }
    if (type == 'S' || type == 'M')
      return rill__fail(err, RILL_ENOTSUP, "%s: byte %lld: a GNU %s member (not supported)", w->path, (long long)pos,
                        type == 'S' ? "sparse" : "multi-volume");
    if (type == '0' || type == 0 || type == '7') {
      char nm[256 + 2];
      const char* name = w->name;
      int64_t len = w->name_len;
      if (!name) {
        size_t n = strnlen((const char*)h, 100), pn = 0;
        if (memcmp(h + 257, "ustar\0", 6) == 0) pn = strnlen((const char*)h + 345, 155);
        if (pn) {
          memcpy(nm, h + 345, pn);
          nm[pn++] = '/';
        }
        memcpy(nm + pn, h, n);
        name = nm;
        len = (int64_t)(pn + n);
      }
      rc = add_member(w, name, len, data, size, pos, err);
      if (rc == RILL_OK && w->log && rill__tar_log_add(w->log, name, len, data, size) < 0)
        rc = rill__fail(err, RILL_ENOMEM, "out of memory");
    }
    set_name(w, NULL, 0); /* a long name or pax record is the next header's only */
    w->pax_size = -1;
    if (rc < 0) return rc;
    pos = data + blocks;
  }
  return RILL_OK; /* the end of the file after a whole member (no end blocks) */
}

/* Sorts the columns by name and renumbers the members' columns. */
static int sort_columns(tar_ctx_t* c) {
  int n = c->ncols;
  int* order = rill__alloc((size_t)(n ? n : 1) * sizeof *order);
  int* rank = rill__alloc((size_t)(n ? n : 1) * sizeof *rank);
  char** names = rill__alloc((size_t)(n ? n : 1) * sizeof *names);
  if (!order || !rank || !names) {
    rill__free(order);
    rill__free(rank);
    rill__free(names);
    return RILL_ENOMEM;
  }
  for (int i = 0; i < n; i++) order[i] = i;
  for (int i = 1; i < n; i++) /* insertion sort: a handful of extensions */
    for (int j = i; j > 0 && strcmp(c->col_names[order[j - 1]], c->col_names[order[j]]) > 0; j--) {
      int t = order[j];
      order[j] = order[j - 1];
      order[j - 1] = t;
    }
  for (int i = 0; i < n; i++) {
    rank[order[i]] = i;
    names[i] = c->col_names[order[i]];
  }
  for (int64_t m = 0; m < c->nmembers; m++) c->members[m].col = rank[c->members[m].col];
  rill__free(c->col_names);
  c->col_names = names;
  rill__free(order);
  rill__free(rank);
  return RILL_OK;
}

/* One archive's index, made on any thread: its own samples, members, keys and names (in a
 * context of its own), merged into the dataframe's in archive order. */
typedef struct part {
  tar_ctx_t c;
  int64_t* hits;                      /* members of each of the caller's extensions */
  int rc;
  rill_error_t err;
} part_t;

typedef struct index_job {
  tar_ctx_t* c;                       /* archives[] filled by the workers (one each) */
  const rill_tar_opts_t* o;
  part_t* parts;
  int npaths;
  _Atomic int next, first_failed;     /* the next archive; the lowest that failed (npaths: none) */
} index_job_t;

static void part_free(part_t* p) {
  index_free(&p->c);
  rill__free(p->hits);
}

/* Walks the archive of w (fstat'ed into ar), or replays the members of its saved index when
 * job->o->index_dir holds one made for this archive as it is now; a walk under index_dir saves
 * what it found (a failure to save is not an error: the next open walks again). */
static int index_or_walk(index_job_t* job, walk_t* w, const archive_t* ar, rill_error_t* err) {
  const char* dir = job->o->index_dir;
  char real[PATH_MAX], file[PATH_MAX + 128];
  if (!dir || !realpath(ar->path, real) || rill__tar_index_path(dir, real, file, sizeof file) < 0) {
    atomic_fetch_add(&rill__tar_walks, 1);
    return walk_archive(w, err);
  }
  rill__tar_stamp_t stamp = {.size = ar->size, .mtime_ns = ar->mtime_ns, .fd = w->fd};
  rill__tar_log_t log;
  int got = rill__tar_index_load(file, real, &stamp, &log);
  if (got < 0) return rill__fail(err, RILL_ENOMEM, "out of memory");
  int rc = RILL_OK;
  if (got) { /* the members as the walk met them: the same checks, samples and errors */
    for (int64_t i = 0, name = 0; rc == RILL_OK && i < log.n; name += log.recs[i++].name_len)
      rc = add_member(w, log.names + name, log.recs[i].name_len, log.recs[i].off, log.recs[i].size,
                      log.recs[i].off - BLOCK, err);
  } else {
    atomic_fetch_add(&rill__tar_walks, 1);
    w->log = &log;
    rc = walk_archive(w, err);
    w->log = NULL;
    if (rc == RILL_OK) (void)rill__tar_index_save(file, real, &stamp, &log);
  }
  rill__tar_log_free(&log);
  return rc;
}

/* Indexes archive a (its path already in c->archives[a]) into part p: RILL_OK, or < 0 with
 * p->err set. */
static int index_one(index_job_t* job, int a, part_t* p, uint8_t* win) {
  archive_t* ar = &job->c->archives[a];
  tar_ctx_t* pc = &p->c;
  rill_error_t* err = &p->err;
  builder_t b = {.c = pc, .o = job->o, .cols = {.names = &pc->col_names, .n = &pc->ncols},
                 .exts = {.names = &pc->ext_names, .n = &pc->next_names}, .cap_first = 2, .cap_key_off = 2};
  b.hits = p->hits = rill__calloc((size_t)(job->o->ncolumns ? job->o->ncolumns : 1), sizeof *p->hits);
  pc->key_off = rill__calloc(2, sizeof *pc->key_off);
  pc->first = rill__calloc(2, sizeof *pc->first);
  if (!p->hits || !pc->key_off || !pc->first) return rill__fail(err, RILL_ENOMEM, "out of memory");
  char eb[128];
  walk_t w = {.b = &b, .path = ar->path, .win = win, .win_at = -1, .pax_size = -1, .last_sample = -1};
  const char* why = rill__open_regular(ar->path, &w.fd, &w.size, eb, sizeof eb);
  if (why) return rill__fail(err, RILL_EIO, "%s: cannot open: %s", ar->path, why);
  struct stat st;
  int rc = RILL_OK;
  if (fstat(w.fd, &st) != 0) {
    rc = rill__fail(err, RILL_EIO, "%s: cannot stat: %s", ar->path, strerror_r(errno, eb, sizeof eb));
  } else {
    ar->size = w.size = (int64_t)st.st_size;
    ar->dev = (uint64_t)st.st_dev;
    ar->ino = (uint64_t)st.st_ino;
    ar->mtime_ns = rill__tar_mtime_ns(&st);
    rc = index_or_walk(job, &w, ar, err);
  }
  set_name(&w, NULL, 0);
  rill__free(b.cols.slots);
  rill__free(b.exts.slots);
  rill__free(b.key_slots);
  if (rc == RILL_OK && rill__keep_fd())
    ar->fd = w.fd; /* read from it: a replaced archive is still the file indexed */
  else
    close(w.fd);
  if (rc == RILL_OK) pc->first[pc->nsamples] = pc->nmembers;
  return rc;
}

static void* index_worker(void* arg) {
  index_job_t* job = arg;
  uint8_t* win = rill__alloc(WINDOW);
  for (;;) {
    int a = atomic_fetch_add(&job->next, 1);
    if (a >= job->npaths) break;
    part_t* p = &job->parts[a];
    if (a > atomic_load(&job->first_failed)) continue; /* an earlier archive failed: its error is the one told */
    p->rc = win ? index_one(job, a, p, win) : rill__fail(&p->err, RILL_ENOMEM, "out of memory");
    int f = atomic_load(&job->first_failed);
    while (p->rc < 0 && a < f && !atomic_compare_exchange_weak(&job->first_failed, &f, a)) {
    }
  }
  rill__free(win);
  return NULL;
}

/* Appends part p (archive a) to c: its samples, keys and members, its names mapped to c's. */
static int merge_part(tar_ctx_t* c, builder_t* b, const part_t* p, int a) {
  const tar_ctx_t* pc = &p->c;
  int32_t* cols = rill__alloc((size_t)(pc->ncols ? pc->ncols : 1) * sizeof *cols);
  int32_t* exts = rill__alloc((size_t)(pc->next_names ? pc->next_names : 1) * sizeof *exts);
  int rc = cols && exts ? RILL_OK : RILL_ENOMEM;
  for (int k = 0; rc == RILL_OK && k < pc->ncols; k++)
    if ((cols[k] = strset_id(&b->cols, pc->col_names[k], strlen(pc->col_names[k]))) < 0) rc = RILL_ENOMEM;
  for (int k = 0; rc == RILL_OK && k < pc->next_names; k++)
    if ((exts[k] = strset_id(&b->exts, pc->ext_names[k], strlen(pc->ext_names[k]))) < 0) rc = RILL_ENOMEM;
  int64_t s0 = c->nsamples, m0 = c->nmembers, k0 = b->key_bytes, kb = pc->key_off[pc->nsamples];
  for (int64_t s = 0; rc == RILL_OK && s < pc->nsamples; s++) {
    c->sample_archive[s0 + s] = a;
    c->first[s0 + s] = m0 + pc->first[s];
    c->key_off[s0 + s + 1] = k0 + pc->key_off[s + 1];
  }
  for (int64_t m = 0; rc == RILL_OK && m < pc->nmembers; m++) {
    member_t x = pc->members[m];
    x.col = cols[x.col];
    x.ext = exts[x.ext];
    c->members[m0 + m] = x;
  }
  if (rc == RILL_OK) {
    if (kb) memcpy(c->keys + k0, pc->keys, (size_t)kb);
    b->key_bytes += kb;
    c->nsamples += pc->nsamples;
    c->nmembers += pc->nmembers;
  }
  rill__free(cols);
  rill__free(exts);
  return rc;
}

/* Indexes the archives on up to `threads` threads (0: up to 16), then merges them in order
 * into c; hits[i]: the members of the caller's extension i. The error of the first archive
 * (in order) that failed. */
static int index_archives(const char* const* paths, int npaths, int threads, builder_t* b, rill_error_t* err) {
  tar_ctx_t* c = b->c;
  for (int a = 0; a < npaths; a++) {
    c->archives[a].fd = -1;
    if (!(c->archives[a].path = rill__strdup(paths[a]))) return rill__fail(err, RILL_ENOMEM, "out of memory");
    c->archives[a].path_len = (int64_t)strlen(paths[a]);
    c->narchives = a + 1;
  }
  index_job_t job = {.c = c, .o = b->o, .npaths = npaths};
  atomic_init(&job.next, 0);
  atomic_init(&job.first_failed, npaths);
  if (!(job.parts = rill__calloc((size_t)npaths, sizeof *job.parts))) return rill__fail(err, RILL_ENOMEM, "out of memory");
  int nt = threads > 0 ? threads : 16; /* reading headers waits on the disk more than it computes */
  rill__run_threads(nt < npaths ? nt : npaths, index_worker, &job);
  int rc = RILL_OK, f = atomic_load(&job.first_failed);
  if (f < npaths) {
    rc = job.parts[f].rc;
    if (err) *err = job.parts[f].err;
  }
  /* the merged arrays, allocated once */
  int64_t ns = 0, nm = 0, nk = 0;
  for (int a = 0; rc == RILL_OK && a < npaths; a++) {
    ns += job.parts[a].c.nsamples;
    nm += job.parts[a].c.nmembers;
    nk += job.parts[a].c.key_off[job.parts[a].c.nsamples];
  }
  if (rc == RILL_OK) {
    c->sample_archive = rill__alloc((size_t)(ns ? ns : 1) * sizeof *c->sample_archive);
    c->first = rill__alloc((size_t)(ns + 1) * sizeof *c->first);
    c->key_off = rill__alloc((size_t)(ns + 1) * sizeof *c->key_off);
    c->keys = rill__alloc((size_t)(nk ? nk : 1));
    c->members = rill__alloc((size_t)(nm ? nm : 1) * sizeof *c->members);
    if (!c->sample_archive || !c->first || !c->key_off || !c->keys || !c->members)
      rc = rill__fail(err, RILL_ENOMEM, "out of memory");
    else
      c->key_off[0] = 0;
  }
  for (int a = 0; rc == RILL_OK && a < npaths; a++) {
    if (merge_part(c, b, &job.parts[a], a) < 0) rc = rill__fail(err, RILL_ENOMEM, "out of memory");
    for (int i = 0; rc == RILL_OK && i < b->o->ncolumns; i++) b->hits[i] += job.parts[a].hits[i];
  }
  if (rc == RILL_OK) c->first[c->nsamples] = c->nmembers;
  for (int a = 0; a < npaths; a++) part_free(&job.parts[a]);
  rill__free(job.parts);
  return rc;
}

/* ---------------------------------------------------------------- the dataframe */

static rill_dtype_t entry_dtype(const rill_tar_column_t* tc) { return tc->dtype ? tc->dtype : RILL_BINARY; }

/* Whether entry tc makes column `col`: named so, or (without a name) its extension in lower
 * case is col. */
static int makes_column(const rill_tar_column_t* tc, const char* col) {
  if (tc->name) return strcmp(tc->name, col) == 0;
  size_t n = strlen(col);
  if (strlen(tc->ext) != n) return 0;
  for (size_t k = 0; k < n; k++)
    if (tc->ext[k] != col[k] && !(tc->ext[k] >= 'A' && tc->ext[k] <= 'Z' && tc->ext[k] + 32 == col[k])) return 0;
  return 1;
}

/* The column an entry names: its name, or its extension (as given). */
static const char* entry_column(const rill_tar_column_t* tc) { return tc->name ? tc->name : tc->ext; }

/* RILL_EINVAL for columns the caller got wrong (before any archive is read). */
static int check_columns(const rill_tar_opts_t* o, rill_error_t* err) {
  for (int i = 0; i < o->ncolumns; i++) {
    const rill_tar_column_t* tc = &o->columns[i];
    if (!tc->ext || !tc->ext[0] || strchr(tc->ext, '/'))
      return rill__fail(err, RILL_EINVAL, "rill_df_from_tar: columns[%d].ext must be an extension (\"cls\", "
                        "\"seg.png\"), not %s", i, tc->ext ? "empty or a path" : "NULL");
    rill_dtype_t dt = entry_dtype(tc);
    if (dt != RILL_BINARY && dt != RILL_STRING && !rill__text_dtype_supported(dt))
      return rill__fail(err, RILL_EINVAL, "rill_df_from_tar: columns[%d] (\"%s\"): a member cannot be read as %s "
                        "(binary, string, bool, integers, floats or timestamp_us)", i, tc->ext, rill_dtype_name(dt));
    if (tc->name && (!tc->name[0] || !strcmp(tc->name, "key") || !strcmp(tc->name, "path")))
      return rill__fail(err, RILL_EINVAL, "rill_df_from_tar: columns[%d].name \"%s\": %s", i, tc->name,
                        tc->name[0] ? "the source makes that column itself (key, path)" : "an empty name");
    for (int j = 0; j < i; j++) {
      const rill_tar_column_t* tj = &o->columns[j];
      if (strcasecmp(tj->ext, tc->ext) == 0)
        return rill__fail(err, RILL_EINVAL, "rill_df_from_tar: columns[%d] and columns[%d] both name extension \"%s\"",
                          j, i, tc->ext);
      if ((tc->name ? makes_column(tj, tc->name) : tj->name && makes_column(tc, tj->name)) && entry_dtype(tj) != dt)
        return rill__fail(err, RILL_EINVAL, "rill_df_from_tar: columns[%d] and columns[%d] make one column \"%s\" of "
                          "two types (%s, %s)", j, i, entry_column(tc), rill_dtype_name(entry_dtype(tj)),
                          rill_dtype_name(dt));
    }
  }
  return RILL_OK;
}

/* The columns' types, and an entry whose extension no archive holds (a typo, most likely:
 * RILL_EINVAL; an extension given a name may be missing while another one of that name is
 * found). */
static int apply_dtypes(tar_ctx_t* c, const rill_tar_opts_t* o, const int64_t* hits, rill_error_t* err) {
  c->col_dtypes = rill__alloc((size_t)(c->ncols ? c->ncols : 1) * sizeof *c->col_dtypes);
  c->col_count = rill__calloc((size_t)(c->ncols ? c->ncols : 1), sizeof *c->col_count);
  if (!c->col_dtypes || !c->col_count) return rill__fail(err, RILL_ENOMEM, "out of memory");
  for (int k = 0; k < c->ncols; k++) c->col_dtypes[k] = RILL_BINARY;
  for (int64_t m = 0; m < c->nmembers; m++) c->col_count[c->members[m].col]++;
  for (int i = 0; i < o->ncolumns; i++) {
    const rill_tar_column_t* tc = &o->columns[i];
    int found = -1;
    for (int k = 0; k < c->ncols && found < 0; k++)
      if (makes_column(tc, c->col_names[k])) found = k;
    if (!hits[i] && (found < 0 || !tc->name))
      return rill__fail(err, RILL_EINVAL, "rill_df_from_tar: columns[%d]: no member of the archives has extension "
                        "\"%s\"%s", i, tc->ext, tc->name ? " (nor any other extension given its name)" : "");
    if (found >= 0) c->col_dtypes[found] = entry_dtype(tc);
  }
  return RILL_OK;
}

static int build_df(tar_ctx_t* c, const rill_tar_opts_t* o, rill_df_t** out, rill_error_t* err) {
  rill_df_t* df = NULL;
  int rc = rill_df_new(c->nsamples, &df, err);
  rill_stage_opts_t plain = {.where = RILL_STAGE_CPU};
  if (rc >= 0) {
    atomic_fetch_add(&c->refs, 1);
    rc = rill_df_add_source(df, "key", rill_type_scalar(RILL_STRING), key_source, c, ctx_unref, &plain, err);
  }
  if (rc >= 0) {
    atomic_fetch_add(&c->refs, 1);
    rc = rill_df_add_source(df, "path", rill_type_scalar(RILL_STRING), path_source, c, ctx_unref, &plain, err);
  }
  for (int k = 0; rc >= 0 && k < c->ncols; k++) {
    col_ctx_t* cc = rill__alloc(sizeof *cc);
    if (!cc) {
      rc = rill__fail(err, RILL_ENOMEM, "out of memory");
      break;
    }
    atomic_fetch_add(&c->refs, 1);
    *cc = (col_ctx_t){.tar = c, .col = k};
    rill_stage_opts_t io = {.where = RILL_STAGE_CPU, .grain = o->grain, .on_error = o->on_error,
                            .nullable = c->col_count[k] < c->nsamples || o->on_error == RILL_ON_ERROR_NULL};
    rc = rill_df_add_source(df, c->col_names[k], rill_type_scalar(c->col_dtypes[k]), member_source, cc, col_free, &io,
                            err);
  }
  if (rc < 0) {
    rill_df_free(df);
    return rc;
  }
  *out = df;
  return RILL_OK;
}

int rill_df_from_tar(const char* const* paths, int npaths, const rill_tar_opts_t* opts, rill_df_t** out,
                     rill_error_t* err) {
  if (!out || npaths < 1 || !paths)
    return rill__fail(err, RILL_EINVAL, "rill_df_from_tar: paths, npaths >= 1 and out are required");
  *out = NULL;
  rill_tar_opts_t o = opts ? *opts : (rill_tar_opts_t){0};
  if (o.ncolumns < 0 || (o.ncolumns > 0 && !o.columns))
    return rill__fail(err, RILL_EINVAL, "rill_df_from_tar: columns must hold ncolumns >= 0 entries");
  if (o.threads < 0) return rill__fail(err, RILL_EINVAL, "rill_df_from_tar: threads must be >= 0 (0: up to 16)");
  if (o.index_dir) {
    struct stat ds;
    int missing = o.index_dir[0] && stat(o.index_dir, &ds) != 0;
    char eb[96];
    if (!o.index_dir[0] || missing || !S_ISDIR(ds.st_mode))
      return rill__fail(err, RILL_EINVAL, "rill_df_from_tar: index_dir '%s' is not a folder%s%s", o.index_dir,
                        missing ? ": " : "", missing ? strerror_r(errno, eb, sizeof eb) : "");
  }
  int rc = check_columns(&o, err);
  if (rc < 0) return rc;
  for (int a = 0; a < npaths; a++)
    if (!paths[a]) return rill__fail(err, RILL_EINVAL, "rill_df_from_tar: path %d is NULL", a);
  tar_ctx_t* c = rill__calloc(1, sizeof *c);
  if (!c) return rill__fail(err, RILL_ENOMEM, "out of memory");
  atomic_init(&c->refs, 1);
  builder_t b = {.c = c, .o = &o, .cols = {.names = &c->col_names, .n = &c->ncols},
                 .exts = {.names = &c->ext_names, .n = &c->next_names}};
  c->archives = rill__calloc((size_t)npaths, sizeof *c->archives);
  b.hits = rill__calloc((size_t)(o.ncolumns ? o.ncolumns : 1), sizeof *b.hits);
  if (!c->archives || !b.hits) rc = rill__fail(err, RILL_ENOMEM, "out of memory");
  if (rc == RILL_OK) rc = index_archives(paths, npaths, o.threads, &b, err);
  rill__free(b.cols.slots);
  rill__free(b.exts.slots);
  if (rc == RILL_OK && sort_columns(c) < 0) rc = rill__fail(err, RILL_ENOMEM, "out of memory");
  if (rc == RILL_OK) rc = apply_dtypes(c, &o, b.hits, err);
  rill__free(b.hits);
  if (rc == RILL_OK) rc = build_df(c, &o, out, err);
  ctx_unref(c);
  return rc;
}
