/* File sources: a list of paths (memory or a text file), an ImageFolder tree (class =
 * sub-folder, int64 labels, class names) and a map that reads the files named by a STRING
 * column. File contents are read on demand straight into the output array; the file sources
 * reserve the bytes of a call's files at once (their sizes, learnt by stat the first time
 * and remembered), so that the array's buffer is allocated once instead of grown file by
 * file (each growth a copy into fresh memory). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "addon.h"
#include "rill_addons.h"
#include "text.h"

#define MAX_DEPTH 32 /* folder nesting followed under a class (guards symlink loops) */

/* ---------------------------------------------------------------- growable lists */

typedef struct strlist {
  char** items;
  int64_t n, cap;
} strlist_t;

static int strlist_push(strlist_t* l, char* s) {
  if (!s) return RILL_ENOMEM;
  char** p = rill__grow(l->items, &l->cap, l->n, l->n + 1, sizeof *p, 16);
  if (!p) {
    rill__free(s);
    return RILL_ENOMEM;
  }
  l->items = p;
  l->items[l->n++] = s;
  return RILL_OK;
}

static void strlist_free(strlist_t* l) {
  rill__free_vec((void**)l->items, l->n);
  *l = (strlist_t){0};
}

static char* join(const char* a, const char* b) {
  size_t la = strlen(a), lb = strlen(b);
  int slash = la > 0 && a[la - 1] != '/';
  char* s = rill__alloc(la + (size_t)slash + lb + 1);
  if (!s) return NULL;
  memcpy(s, a, la);
  if (slash) s[la] = '/';
  memcpy(s + la + slash, b, lb + 1);
  return s;
}

static const char* sys_error(int e, char* buf, size_t size) {
  /* GNU strerror_r returns the message (maybe not in buf) */
  return strerror_r(e, buf, size);
}

/* ---------------------------------------------------------------- shared context */

typedef struct files_ctx {
  _Atomic int refs;
  int64_t n;
  char** paths;                  /* n NUL-terminated paths */
  int64_t* lens;
  _Atomic int64_t* sizes;        /* n size hints: bytes + 1 of the file when last seen; 0 = not known */
  int64_t* labels;               /* ImageFolder: n labels; NULL otherwise */
  char** classes;
  int nclasses;
} files_ctx_t;

static void ctx_unref(void* p) {
  files_ctx_t* c = p;
  if (!c || atomic_fetch_sub(&c->refs, 1) != 1) return;
  rill__free_vec((void**)c->paths, c->n);
  rill__free(c->lens);
  rill__free((void*)c->sizes);
  rill__free(c->labels);
  rill__free_vec((void**)c->classes, c->nclasses);
  rill__free(c);
}

/* ---------------------------------------------------------------- reading files */

/* Reads the file `path` as cell i of the BINARY array `out` (cells before i already set).
 * Only regular files are read (a FIFO or a device is an error, never a wait). st_size is a
 * hint: a file that reports 0 (those of /proc) is read until EOF; one that shrank since is
 * kept as it is now. */
static int read_cell(rill_array_t* out, int64_t i, const char* path, rill_error_t* err) {
  char eb[128];
  int fd;
  int64_t size;
  const char* why = rill__open_regular(path, &fd, &size, eb, sizeof eb);
  if (why) {
    if (err) err->row = i;
    return rill_error_set(err, RILL_EIO, "%s: cannot open: %s", path, why);
  }
  int rc = rill_array_set_var(out, i, NULL, size, NULL);
  if (rc < 0) {
    close(fd);
    if (err) err->row = i;
    return rill_error_set(err, rc, "%s: cannot allocate %lld bytes", path, (long long)size);
  }
  int64_t start = out->offsets[i], cap = size, got = 0;
  for (;;) {
    if (got == cap) {
      if (size > 0) break;            /* st_size bytes read */
      cap = cap ? cap * 2 : 65536;     /* size unknown: read until EOF */
      out->data_size = start + got;    /* reserve keeps these bytes */
      if ((rc = rill_array_reserve(out, start + cap)) < 0) {
        close(fd);
        out->offsets[i + 1] = start; /* take the cell back: the engine sets it */
        rill__array_var_commit(out, i);
        if (err) err->row = i;
        return rill_error_set(err, rc, "%s: cannot allocate %lld bytes", path, (long long)cap);
      }
    }
    ssize_t r = read(fd, (uint8_t*)out->data + start + got, (size_t)(cap - got));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      close(fd);
      out->offsets[i + 1] = start; /* take the cell back: the engine sets it */
      rill__array_var_commit(out, i);
      if (err) err->row = i;
      return rill_error_set(err, RILL_EIO, "%s: read failed: %s", path, sys_error(e, eb, sizeof eb));
    }
    if (r == 0) break; /* EOF (a file that shrank since fstat keeps what it holds now) */
    got += r;
  }
  close(fd);
  out->offsets[i + 1] = start + got;
  out->data_size = start + got;
  return RILL_OK;
}

/* Prepares `out` for n cells of dtype; a failure names what the cells are. */
static int alloc_cells(rill_exec_t* exec, rill_array_t* out, rill_dtype_t dtype, int64_t n, const char* what,
                       rill_error_t* err) {
  int rc = rill_exec_alloc(exec, out, rill_type_scalar(dtype), n);
  return rc < 0 ? rill_error_set(err, rc, "cannot allocate %lld %s", (long long)n, what) : RILL_OK;
}

static int path_source(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* exec, void* ctx,
                       rill_error_t* err) {
  const files_ctx_t* c = ctx;
  int rc = alloc_cells(exec, out, RILL_STRING, n, "paths", err);
  for (int64_t i = 0; rc == RILL_OK && i < n; i++)
    if ((rc = rill_array_set_var(out, i, c->paths[rows[i]], c->lens[rows[i]], NULL)) < 0)
      rc = rill_error_set(err, rc, "cannot allocate path cells");
  return rc;
}

/* The size of file `row` as last seen (stat the first time it is asked for: a file that cannot
 * be stat-ed counts 0 and is not remembered; reading it reports why). A hint only: the file
 * may have changed since. */
static int64_t size_hint(files_ctx_t* c, int64_t row) {
  int64_t v = atomic_load_explicit(&c->sizes[row], memory_order_relaxed);
  if (v > 0) return v - 1;
  struct stat st;
  if (stat(c->paths[row], &st) != 0 || !S_ISREG(st.st_mode) || st.st_size < 0 || st.st_size >= INT64_MAX / 2) return 0;
  atomic_store_explicit(&c->sizes[row], (int64_t)st.st_size + 1, memory_order_relaxed);
  return (int64_t)st.st_size;
}

/* total + s, both >= 0, saturating at INT64_MAX / 2 (a reservation that large fails and the
 * cells then grow one by one) */
static int64_t add_size(int64_t total, int64_t s) { return s > INT64_MAX / 2 - total ? INT64_MAX / 2 : total + s; }

static int bytes_source(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* exec, void* ctx,
                        rill_error_t* err) {
  files_ctx_t* c = ctx;
  int rc = alloc_cells(exec, out, RILL_BINARY, n, "file cells", err);
  if (rc < 0) return rc;
  /* the files' bytes reserved at once (a reuse of the pooled buffer when it is large enough);
   * if that fails, the cells grow one by one and a file that cannot fit names itself */
  int64_t total = 0;
  for (int64_t i = 0; i < n; i++) {
    total = add_size(total, size_hint(c, rows[i]));
  }
  if (total > 0) (void)rill_array_reserve(out, total);
  for (int64_t i = 0; rc == RILL_OK && i < n; i++) {
    rc = read_cell(out, i, c->paths[rows[i]], err);
    if (rc == RILL_OK)
      atomic_store_explicit(&c->sizes[rows[i]], out->offsets[i + 1] - out->offsets[i] + 1, memory_order_relaxed);
  }
  return rc;
}

static int label_source(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* exec, void* ctx,
                        rill_error_t* err) {
  const int64_t* labels = ((const files_ctx_t*)ctx)->labels;
  int rc = alloc_cells(exec, out, RILL_INT64, n, "labels", err);
  if (rc < 0) return rc;
  int64_t* d = out->data;
  for (int64_t i = 0; i < n; i++) d[i] = labels[rows[i]];
  return RILL_OK;
}

/* RILL_EFORMAT naming the first path or class name of c that is not UTF-8 (the path column
 * and the class names are text), else RILL_OK. */
static int check_names(const files_ctx_t* c, rill_error_t* err) {
  for (int64_t i = 0; i < c->nclasses + c->n; i++) { /* the class names first: paths hold them */
    int cls = i < c->nclasses;
    const char* s = cls ? c->classes[i] : c->paths[i - c->nclasses];
    int64_t bad = rill__utf8_invalid(s, cls ? (int64_t)strlen(s) : c->lens[i - c->nclasses]);
    if (bad >= 0)
      return rill__fail(err, RILL_EFORMAT, "%s: the %s is not UTF-8 text (byte 0x%02X at byte %lld); paths and class "
                        "names are text: rename it", s, cls ? "class name" : "path", (unsigned char)s[bad],
                        (long long)bad);
  }
  return RILL_OK;
}

/* Builds the dataframe over c (which it consumes: c is unreferenced on every path). */
static int build_df(files_ctx_t* c, const rill_files_opts_t* opts, rill_df_t** out, rill_error_t* err) {
  rill_files_opts_t o = opts ? *opts : (rill_files_opts_t){0};
  rill_df_t* df = NULL;
  int rc = check_names(c, err);
  if (rc < 0) {
    ctx_unref(c);
    return rc;
  }
  rc = rill_df_new(c->n, &df, err);
  if (rc < 0) {
    ctx_unref(c);
    return rc;
  }
  rill_stage_opts_t plain = {.where = RILL_STAGE_CPU};
  rill_stage_opts_t io = {.where = RILL_STAGE_CPU, .grain = o.grain, .on_error = o.on_error,
                          .nullable = o.on_error == RILL_ON_ERROR_NULL};
  atomic_fetch_add(&c->refs, 1);
  rc = rill_df_add_source(df, "path", rill_type_scalar(RILL_STRING), path_source, c, ctx_unref, &plain, err);
  if (rc >= 0) {
    atomic_fetch_add(&c->refs, 1);
    rc = rill_df_add_source(df, "bytes", rill_type_scalar(RILL_BINARY), bytes_source, c, ctx_unref, &io, err);
  }
  if (rc >= 0 && c->labels) {
    atomic_fetch_add(&c->refs, 1);
    rc = rill_df_add_source(df, "label", rill_type_scalar(RILL_INT64), label_source, c, ctx_unref, &plain, err);
  }
  if (rc < 0) {
    rill_df_free(df);
    ctx_unref(c);
    return rc;
  }
  ctx_unref(c);
  *out = df;
  return RILL_OK;
}

/* A context over the paths of `l` (taken over: l is emptied). */
static files_ctx_t* ctx_from_list(strlist_t* l) {
  files_ctx_t* c = rill__calloc(1, sizeof *c);
  if (!c) return NULL;
  atomic_init(&c->refs, 1);
  c->paths = l->items;
  c->n = l->n;
  *l = (strlist_t){0};
  c->lens = rill__calloc(c->n ? (size_t)c->n : 1, sizeof *c->lens);
  c->sizes = rill__alloc((c->n ? (size_t)c->n : 1) * sizeof *c->sizes);
  if (!c->lens || !c->sizes) {
    ctx_unref(c);
    return NULL;
  }
  for (int64_t i = 0; i < c->n; i++) atomic_init(&c->sizes[i], 0);
  for (int64_t i = 0; i < c->n; i++) c->lens[i] = (int64_t)strlen(c->paths[i]);
  return c;
}

int rill_df_from_files(const char* const* paths, int64_t n, const rill_files_opts_t* opts, rill_df_t** out,
                       rill_error_t* err) {
  if (!out || n < 0 || (n > 0 && !paths))
    return rill__fail(err, RILL_EINVAL, "rill_df_from_files: paths, n >= 0 and out are required");
  *out = NULL;
  strlist_t l = {0};
  for (int64_t i = 0; i < n; i++) {
    if (!paths[i]) {
      strlist_free(&l);
      return rill__fail(err, RILL_EINVAL, "rill_df_from_files: path %lld is NULL", (long long)i);
    }
    if (strlist_push(&l, rill__strdup(paths[i])) < 0) {
      strlist_free(&l);
      return rill__fail(err, RILL_ENOMEM, "out of memory");
    }
  }
  files_ctx_t* c = ctx_from_list(&l);
  if (!c) {
    strlist_free(&l);
    return rill__fail(err, RILL_ENOMEM, "out of memory");
  }
  return build_df(c, opts, out, err);
}

/* Reads a whole (small) text file until EOF (a regular file only: a FIFO is an error). */
static int slurp(const char* path, char** data, size_t* size, rill_error_t* err) {
  char eb[128];
  int fd;
  int64_t hint;
  const char* why = rill__open_regular(path, &fd, &hint, eb, sizeof eb);
  if (why) return rill__fail(err, RILL_EIO, "%s: cannot open: %s", path, why);
  size_t cap = 4096, n = 0;
  char* buf = rill__alloc(cap);
  int bad = 0;
  while (buf) {
    if (n + 1 >= cap) {
      char* nb = rill__realloc(buf, cap, cap * 2);
      if (!nb) {
        rill__free(buf);
        buf = NULL;
        break;
      }
      buf = nb;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + n, cap - n - 1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) bad = errno;
    if (r <= 0) break;
    n += (size_t)r;
  }
  close(fd);
  if (!buf) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", path);
  if (bad) {
    rill__free(buf);
    return rill__fail(err, RILL_EIO, "%s: read failed: %s", path, sys_error(bad, eb, sizeof eb));
  }
  buf[n] = 0;
  *data = buf;
  *size = n;
  return RILL_OK;
}

int rill_df_from_file_list(const char* list_path, const rill_files_opts_t* opts, rill_df_t** out,
                           rill_error_t* err) {
  if (!list_path || !out) return rill__fail(err, RILL_EINVAL, "rill_df_from_file_list: list_path and out are required");
  *out = NULL;
  char* text = NULL;
  size_t size = 0;
  int rc = slurp(list_path, &text, &size, err);
  if (rc < 0) return rc;
  /* the folder of the list, for relative entries */
  const char* slash = strrchr(list_path, '/');
  char* dir = NULL;
  if (slash) {
    size_t dl = (size_t)(slash - list_path) + 1;
    dir = rill__alloc(dl + 1);
    if (!dir) {
      rill__free(text);
      return rill__fail(err, RILL_ENOMEM, "out of memory");
    }
    memcpy(dir, list_path, dl);
    dir[dl] = 0;
  }
  strlist_t l = {0};
  int64_t line = 0;
  for (char* p = text; p < text + size;) {
    char* e = memchr(p, '\n', (size_t)(text + size - p));
    if (!e) e = text + size;
    line++;
    size_t len = (size_t)(e - p);
    if (len > 0 && p[len - 1] == '\r') len--;
    if (len > 0) {
      if (memchr(p, 0, len)) {
        strlist_free(&l);
        rill__free(text);
        rill__free(dir);
        return rill__fail(err, RILL_EFORMAT, "%s:%lld: NUL byte in path", list_path, (long long)line);
      }
      p[len] = 0;
      char* s = p[0] != '/' && dir ? join(dir, p) : rill__strdup(p);
      if (strlist_push(&l, s) < 0) {
        strlist_free(&l);
        rill__free(text);
        rill__free(dir);
        return rill__fail(err, RILL_ENOMEM, "out of memory");
      }
    }
    p = e + 1;
  }
  rill__free(text);
  rill__free(dir);
  files_ctx_t* c = ctx_from_list(&l);
  if (!c) {
    strlist_free(&l);
    return rill__fail(err, RILL_ENOMEM, "out of memory");
  }
  return build_df(c, opts, out, err);
}

/* ---------------------------------------------------------------- rill_file_read */

/* Cell i of the STRING column `paths` as a NUL-terminated path in buf; 0 when the cell is null,
 * does not fit or holds a NUL byte. */
static int cell_path(const rill_array_t* paths, int64_t i, char* buf, size_t cap) {
  if (!rill_array_is_valid(paths, i)) return 0;
  int64_t len = 0;
  const char* p = rill_array_cell(paths, i, &len);
  if (len >= (int64_t)cap || memchr(p, 0, (size_t)len)) return 0;
  memcpy(buf, p, (size_t)len);
  buf[len] = 0;
  return 1;
}

static int read_map(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* exec, void* ctx,
                    rill_error_t* err) {
  const rill_array_t* paths = in[0];
  int64_t n = paths->length;
  int rc = rill_exec_alloc(exec, out, rill_type_scalar(RILL_BINARY), n);
  if (rc < 0) return rill_error_set(err, rc, "cannot allocate %lld file cells", (long long)n);
  char path[4096];
  /* the files' bytes reserved at once (sizes by stat; a path that cannot be read counts 0 and
   * names itself below), so that the cells take one allocation rather than one per doubling */
  int64_t total = 0;
  for (int64_t i = 0; i < n; i++) {
    struct stat st;
    if (cell_path(paths, i, path, sizeof path) && stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
      total = add_size(total, st.st_size);
  }
  if (total > 0) (void)rill_array_reserve(out, total);
  for (int64_t i = 0; i < n; i++) {
    if (!rill_array_is_valid(paths, i)) {
      if ((rc = rill_array_set_var(out, i, NULL, 0, NULL)) < 0 || (rc = rill_array_set_null(out, i)) < 0)
        return rill_error_set(err, rc, "out of memory");
      continue;
    }
    if (!cell_path(paths, i, path, sizeof path)) {
      int64_t len = 0;
      const char* p = rill_array_cell(paths, i, &len);
      if (err) err->row = i;
      return rill_error_set(err, RILL_EIO, "%.*s: cannot open: %s", (int)(len > 200 ? 200 : len), p,
                            len >= (int64_t)sizeof path ? "path too long" : "NUL byte in path");
    }
    if ((rc = read_cell(out, i, path, err)) < 0) return rc;
  }
  return RILL_OK;
}

int rill_file_read(rill_df_t* df, const char* name, int path_column, const rill_files_opts_t* opts,
                   rill_error_t* err) {
  rill_files_opts_t o = opts ? *opts : (rill_files_opts_t){0};
  if (!df || !name) return rill__fail(err, RILL_EINVAL, "rill_file_read: df and name are required");
  const rill_field_t* f = rill_df_field(df, path_column);
  if (!f) return rill__bad_column(err, "rill_file_read", df, path_column);
  if (f->type.dtype != RILL_STRING || f->type.ndim != 0)
    return rill__fail(err, RILL_EINVAL, "rill_file_read: column '%s' is not STRING", f->name);
  rill_stage_opts_t so = {.where = RILL_STAGE_CPU, .grain = o.grain, .on_error = o.on_error,
                          .nullable = f->nullable || o.on_error == RILL_ON_ERROR_NULL};
  return rill_df_map(df, name, rill_type_scalar(RILL_BINARY), &path_column, 1, read_map, NULL, NULL, &so, err);
}

/* ---------------------------------------------------------------- ImageFolder */

static int is_image_name(const char* name) {
  const char* dot = strrchr(name, '.');
  return dot && (strcasecmp(dot, ".jpg") == 0 || strcasecmp(dot, ".jpeg") == 0 || strcasecmp(dot, ".png") == 0 ||
                 strcasecmp(dot, ".webp") == 0);
}

/* Whether an entry a folder listing typed so may be a folder (or a link to one): only those
 * are looked at again (stat), not the files: a folder of a million images is listed without a
 * million more system calls. */
static int maybe_dir(unsigned char type) { return type == DT_DIR || type == DT_LNK || type == DT_UNKNOWN; }

static int cmp_listed(const void* a, const void* b) {
  return strcmp(*(char* const*)a + 1, *(char* const*)b + 1);
}

/* The names in `dir` (hidden ones skipped), sorted; each one is preceded by a byte that says
 * whether it may be a folder ('d') or is not ('-'), as the listing typed it. */
static int list_dir(const char* dir, strlist_t* names, rill_error_t* err) {
  char eb[128];
  DIR* d = opendir(dir);
  if (!d) return rill__fail(err, RILL_EIO, "%s: cannot open folder: %s", dir, sys_error(errno, eb, sizeof eb));
  struct dirent* e;
  int rc = RILL_OK;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    size_t len = strlen(e->d_name);
    char* s = rill__alloc(len + 2);
    if (s) {
      s[0] = maybe_dir(e->d_type) ? 'd' : '-';
      memcpy(s + 1, e->d_name, len + 1);
    }
    if ((rc = strlist_push(names, s)) < 0) {
      rc = rill__fail(err, RILL_ENOMEM, "out of memory");
      break;
    }
  }
  closedir(d);
  if (rc < 0) return rc;
  if (names->n > 1) qsort(names->items, (size_t)names->n, sizeof(char*), cmp_listed);
  return RILL_OK;
}

/* Folders already met, by (device, inode): each folder is walked once, so symbolic links
 * that loop, or point at an ancestor or another class, add nothing. */
typedef struct dirset {
  uint64_t* keys; /* pairs dev, ino; (0, 0) = empty */
  int64_t n, cap;
} dirset_t;

static uint64_t dir_hash(uint64_t dev, uint64_t ino) {
  uint64_t h = (dev * 0x9E3779B97F4A7C15ULL) ^ (ino + 0x632BE59BD9B4E019ULL);
  return h ^ (h >> 31);
}

/* 1 when (dev, ino) is new (and now recorded), 0 when already met, < 0 out of memory. */
static int dirset_add(dirset_t* d, uint64_t dev, uint64_t ino) {
  if (dev == 0 && ino == 0) ino = 1; /* (0, 0) marks empty slots */
  if ((d->n + 1) * 2 > d->cap) {
    int64_t ncap = d->cap ? d->cap * 2 : 64;
    uint64_t* nk = rill__calloc((size_t)ncap * 2, sizeof *nk);
    if (!nk) return RILL_ENOMEM;
    for (int64_t k = 0; k < d->cap; k++) {
      uint64_t kd = d->keys[2 * k], ki = d->keys[2 * k + 1];
      if (!kd && !ki) continue;
      int64_t j = (int64_t)(dir_hash(kd, ki) & (uint64_t)(ncap - 1));
      while (nk[2 * j] || nk[2 * j + 1]) j = (j + 1) & (ncap - 1);
      nk[2 * j] = kd;
      nk[2 * j + 1] = ki;
    }
    rill__free(d->keys);
    d->keys = nk;
    d->cap = ncap;
  }
  int64_t j = (int64_t)(dir_hash(dev, ino) & (uint64_t)(d->cap - 1));
  for (; d->keys[2 * j] || d->keys[2 * j + 1]; j = (j + 1) & (d->cap - 1))
    if (d->keys[2 * j] == dev && d->keys[2 * j + 1] == ino) return 0;
  d->keys[2 * j] = dev;
  d->keys[2 * j + 1] = ino;
  d->n++;
  return 1;
}

/* 1 and the folder's identity when `path` is (or links to) a folder, else 0. */
static int is_dir(const char* path, uint64_t* dev, uint64_t* ino) {
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
  *dev = (uint64_t)st.st_dev;
  *ino = (uint64_t)st.st_ino;
  return 1;
}

/* Appends the files under `dir` (recursively, sorted by path) to `files`; sub-folders met
 * before (in `seen`) are not entered again. */
static int walk(const char* dir, int depth, int all, dirset_t* seen, strlist_t* files, rill_error_t* err) {
  strlist_t names = {0};
  int rc = list_dir(dir, &names, err);
  for (int64_t i = 0; rc >= 0 && i < names.n; i++) {
    const char* name = names.items[i] + 1;
    char* p = join(dir, name);
    if (!p) {
      rc = rill__fail(err, RILL_ENOMEM, "out of memory");
      break;
    }
    uint64_t dev, ino;
    if (names.items[i][0] == 'd' && is_dir(p, &dev, &ino)) {
      int fresh = dirset_add(seen, dev, ino);
      if (fresh < 0) rc = rill__fail(err, RILL_ENOMEM, "out of memory");
      else if (fresh && depth < MAX_DEPTH) rc = walk(p, depth + 1, all, seen, files, err);
      rill__free(p);
    } else if (all || is_image_name(name)) {
      if (strlist_push(files, p) < 0) rc = rill__fail(err, RILL_ENOMEM, "out of memory");
    } else {
      rill__free(p);
    }
  }
  strlist_free(&names);
  return rc;
}

int rill_df_from_image_folder(const char* root, const rill_files_opts_t* opts, rill_df_t** out,
                              rill_error_t* err) {
  if (!root || !out) return rill__fail(err, RILL_EINVAL, "rill_df_from_image_folder: root and out are required");
  *out = NULL;
  int all = opts && opts->all_files;
  strlist_t entries = {0}, classes = {0}, files = {0}, class_paths = {0};
  dirset_t seen = {0};
  int64_t* labels = NULL;
  int64_t labels_cap = 0;
  uint64_t dev, ino;
  int rc = list_dir(root, &entries, err);
  if (rc >= 0 && is_dir(root, &dev, &ino) && dirset_add(&seen, dev, ino) < 0)
    rc = rill__fail(err, RILL_ENOMEM, "out of memory");
  /* the classes first, so that a link inside one class to another class is not followed */
  for (int64_t i = 0; rc >= 0 && i < entries.n; i++) {
    char* p = join(root, entries.items[i] + 1);
    if (!p) {
      rc = rill__fail(err, RILL_ENOMEM, "out of memory");
      break;
    }
    int fresh = entries.items[i][0] == 'd' && is_dir(p, &dev, &ino) ? dirset_add(&seen, dev, ino) : 0;
    if (fresh < 0) {
      rc = rill__fail(err, RILL_ENOMEM, "out of memory");
      rill__free(p);
    } else if (fresh) {
      if (strlist_push(&class_paths, p) < 0 || strlist_push(&classes, rill__strdup(entries.items[i] + 1)) < 0)
        rc = rill__fail(err, RILL_ENOMEM, "out of memory");
    } else {
      rill__free(p);
    }
  }
  for (int64_t c = 0; rc >= 0 && c < class_paths.n; c++) {
    int64_t before = files.n;
    rc = walk(class_paths.items[c], 1, all, &seen, &files, err);
    if (rc >= 0 && files.n > labels_cap) {
      int64_t ncap = files.cap;
      int64_t* nl = rill__realloc(labels, (size_t)labels_cap * sizeof *nl, (size_t)ncap * sizeof *nl);
      if (!nl) rc = rill__fail(err, RILL_ENOMEM, "out of memory");
      else labels = nl, labels_cap = ncap;
    }
    for (int64_t k = before; rc >= 0 && k < files.n; k++) labels[k] = c;
  }
  strlist_free(&entries);
  strlist_free(&class_paths);
  rill__free(seen.keys);
  if (rc >= 0 && classes.n > 0x7fffffff) rc = rill__fail(err, RILL_ERANGE, "%s: too many classes", root);
  if (rc >= 0 && files.n == 0)
    rc = rill__fail(err, RILL_EFORMAT, "%s: no image files in class sub-folders (%s)", root,
                    all ? "any file" : ".jpg .jpeg .png .webp");
  if (rc < 0) {
    strlist_free(&classes);
    strlist_free(&files);
    rill__free(labels);
    return rc;
  }
  files_ctx_t* c = ctx_from_list(&files);
  if (!c) {
    strlist_free(&classes);
    strlist_free(&files);
    rill__free(labels);
    return rill__fail(err, RILL_ENOMEM, "out of memory");
  }
  c->labels = labels;
  c->classes = classes.items;
  c->nclasses = (int)classes.n;
  return build_df(c, opts, out, err);
}

int rill_image_folder_classes(const rill_df_t* df, const char* const** names, int* count, rill_error_t* err) {
  if (!df || !names || !count)
    return rill__fail(err, RILL_EINVAL, "rill_image_folder_classes: df, names and count are required");
  /* the folder's "label" column is a source whose context holds the class names */
  int label = rill_df_column(df, "label");
  if (label < 0 || rill__df_column_fn(df, label) != (rill__fn_t)label_source)
    return rill__fail(err, RILL_EINVAL, "rill_image_folder_classes: not a dataframe made by rill_df_from_image_folder");
  const files_ctx_t* c = rill__df_column_ctx(df, label);
  *names = (const char* const*)c->classes;
  *count = c->nclasses;
  return RILL_OK;
}
