/* CSV source: the public entry points, options, the header row, type inference and the
 * source group that fills the columns. The input (a memory-mapped file or a buffer) is indexed
 * when opened (csv_index.c: one byte offset per row, built in parallel); cells are parsed when
 * an iterator pulls their rows: one call splits each row once (csv_scan.c) and fills every
 * requested column from the field spans, converting text with text.c. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if RILL_HAVE_ZLIB
#include <zlib.h>
#endif
#if RILL_HAVE_DEFLATE
#include <libdeflate.h>
#endif
#if RILL_HAVE_ZSTD
#include <zstd.h>
#endif

#include "csv_internal.h"
#include "text.h"

#define CSV_DEFAULT_INFER 1000
/* Rows a task of a dataset in several files gives each file (rill__df_concat): a shuffled
 * batch of 8,192 rows over 400 files was cut into 1,024-row tasks, two or three rows a file
 * a call, and the calls cost more than the rows (1.55x faster as one task) */
#define CSV_PART_ROWS 16

/* ------------------------------------------------------------------ the CSV object */

/* Hands the mapped pages inside [a, b) back to the kernel: the mapping is private, read-only
 * and file-backed, so a later access maps them again from the file. Keeps the resident set
 * of a sequential pass small. No-op for buffers. */
void rill__csv_drop(const rill__csv_t* c, int64_t a, int64_t b) {
  if (!c->map) return;
  int64_t page = 4096;
  a = (a + page - 1) & ~(page - 1);
  b &= ~(page - 1);
  if (b > a) madvise((char*)c->map + a, (size_t)(b - a), MADV_DONTNEED);
}

/* ------------------------------------------------------------------ mapped files */

/* A process may hold only so many mappings (Linux: vm.max_map_count, 65,530 by default, shared
 * with its libraries, threads' stacks and large allocations), and a dataset of many CSV files
 * would take one each. The mapped files are listed, most recently mapped first; past the
 * budget, a sweep from the oldest end unmaps files that no call is reading, giving the ones
 * read since the last sweep a second chance (back to the front). A call that finds its file
 * unmapped maps it again from the descriptor it kept (csv_keep_fd), or else by its path: the
 * same file (device and inode), at least as long as when it was opened, or RILL_EIO naming
 * it. While its file stays mapped a call takes no lock:
 * it counts itself in `pins`, then checks `present`; a sweep clears `present`, then checks
 * `pins` (both sequentially consistent, so one of the two sees the other): a mapping is never
 * removed under a call. */
int64_t rill__csv_map_budget = 0;

static struct {
  pthread_mutex_t mu;
  rill__csv_t *newest, *oldest;
  _Atomic int64_t mapped; /* files listed (each mapped); changed under mu */
} g_maps = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int64_t map_budget(void) {
  static _Atomic int64_t sys;
  if (rill__csv_map_budget > 0) return rill__csv_map_budget;
  int64_t b = atomic_load_explicit(&sys, memory_order_relaxed);
  if (!b) {
    long long m = 0;
    FILE* f = fopen("/proc/sys/vm/max_map_count", "re");
    if (f) {
      if (fscanf(f, "%lld", &m) != 1) m = 0;
      fclose(f);
    }
    b = m <= 0 ? 32768 : m / 2 > 64 ? m / 2 : 64;
    atomic_store_explicit(&sys, b, memory_order_relaxed);
  }
  return b;
}

static void unlink_locked(rill__csv_t* c) {
  if (c->newer) c->newer->older = c->older;
  else g_maps.newest = c->older;
  if (c->older) c->older->newer = c->newer;
  else g_maps.oldest = c->newer;
  c->newer = c->older = NULL;
}

/* Puts c between `newer` and `older` (NULL: that end of the list). */
static void insert_locked(rill__csv_t* c, rill__csv_t* newer, rill__csv_t* older) {
  c->newer = newer;
  c->older = older;
  if (newer) newer->older = c;
  else g_maps.newest = c;
  if (older) older->newer = c;
  else g_maps.oldest = c;
}

static void push_locked(rill__csv_t* c) { insert_locked(c, NULL, g_maps.newest); }

/* Lists mapped file c and unmaps others while more than the budget are mapped. */
static void list_locked(rill__csv_t* c) {
  c->listed = 1;
  push_locked(c);
  g_maps.mapped++;
  int64_t budget = map_budget();
  for (int64_t steps = 2 * g_maps.mapped; g_maps.mapped > budget && steps > 0; steps--) {
    rill__csv_t* o = g_maps.oldest;
    unlink_locked(o);
    int keep = atomic_exchange(&o->used, 0) || atomic_load(&o->pins);
    if (!keep) {
      atomic_store(&o->present, 0);
      if (atomic_load(&o->pins)) atomic_store(&o->present, 1), keep = 1; /* a call came in */
    }
    if (keep) {
      push_locked(o);
      continue;
    }
    munmap(o->map, (size_t)o->size);
    o->map = NULL;
    o->data = NULL;
    o->listed = 0;
    g_maps.mapped--;
  }
}

/* Keeps the descriptor of the file c has just mapped, or closes it. With it, the size check
 * before each call is an fstat (a stat of the path costs a walk of the path: 1.3 against
 * 0.45 µs here, for each part of a shuffled read over many files), it sees a shrink through
 * any name, and an unmapped file is mapped again wherever it moved. Only a bounded share of the
 * descriptors the process may hold are kept: a dataset may have more files than that. */
static void csv_keep_fd(rill__csv_t* c, int fd) {
  if (rill__keep_fd()) {
    c->fd = fd;
    return;
  }
  close(fd);
}

static void csv_drop_fd(rill__csv_t* c) {
  if (c->fd < 0) return;
  close(c->fd);
  c->fd = -1;
  rill__unkeep_fd();
}

_Atomic int64_t rill__csv_maps_again;

/* A call has read file c's last row: a pass in row order is done with it. It goes to the
 * oldest end without its second chance, so that a sweep unmaps it before the files a pass has
 * still to read (else an in-order pass over more files than stay mapped would unmap, before
 * their turn, the files left mapped at the end of the open, and map them again). */
static void csv_finished(rill__csv_t* c) {
  pthread_mutex_lock(&g_maps.mu);
  if (c->listed && g_maps.oldest != c) {
    unlink_locked(c);
    insert_locked(c, g_maps.oldest, NULL);
  }
  atomic_store_explicit(&c->used, 0, memory_order_relaxed);
  pthread_mutex_unlock(&g_maps.mu);
}

/* Maps file c again for a call (see above). */
static int remap_locked(rill__csv_t* c, rill_error_t* err) {
  /* without its descriptor, by its path (a FIFO or a device there is refused unread) */
  int fd = c->fd;
  int64_t size;
  char eb[128];
  const char* why = fd >= 0 ? NULL : rill__open_regular(c->watch, &fd, &size, eb, sizeof eb);
  struct stat st;
  if (!why && (fstat(fd, &st) != 0 || st.st_dev != c->dev || st.st_ino != c->ino)) why = "another file has its path now";
  else if (!why && (int64_t)st.st_size < c->size) why = "it is shorter than when it was opened";
  void* m = MAP_FAILED;
  if (!why && (m = mmap(NULL, (size_t)c->size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) why = strerror(errno);
  if (fd >= 0 && fd != c->fd) close(fd);
  if (why)
    return rill_error_set(err, RILL_EIO,
                          "%s: cannot map it again: %s (more CSV files are open than stay mapped at once, %lld: each "
                          "file must stay in place while its dataframe lives)",
                          c->name, why, (long long)map_budget());
  c->map = m;
  c->data = m;
  atomic_store(&c->present, 1);
  atomic_fetch_add_explicit(&rill__csv_maps_again, 1, memory_order_relaxed);
  list_locked(c);
  return RILL_OK;
}

/* fork(): the list's lock is held across it, so that the child's copy is whole and the lock
 * free there (a child reading CSV files must not wait for a thread it does not have). */
static void maps_prepare(void) { pthread_mutex_lock(&g_maps.mu); }
static void maps_release(void) { pthread_mutex_unlock(&g_maps.mu); }
static void maps_init(void) { pthread_atfork(maps_prepare, maps_release, maps_release); }

/* Lists a file mapped by rill_df_from_csv once its dataframe is made. */
static void csv_listed(rill__csv_t* c) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  if (!c->map || !c->watch) return; /* a buffer, or a decompressed text */
  pthread_once(&once, maps_init);
  c->evictable = 1;
  atomic_store(&c->present, 1);
  pthread_mutex_lock(&g_maps.mu);
  list_locked(c);
  pthread_mutex_unlock(&g_maps.mu);
}

/* Keeps c's bytes (c->data) in place for a call, mapping its file again when it was unmapped;
 * each successful pin is followed by one csv_unpin. */
static int csv_pin(rill__csv_t* c, rill_error_t* err) {
  if (!c->evictable) return RILL_OK;
  atomic_fetch_add(&c->pins, 1);
  if (!atomic_load_explicit(&c->used, memory_order_relaxed)) atomic_store_explicit(&c->used, 1, memory_order_relaxed);
  if (atomic_load(&c->present)) return RILL_OK;
  pthread_mutex_lock(&g_maps.mu);
  int rc = atomic_load(&c->present) ? RILL_OK : remap_locked(c, err);
  pthread_mutex_unlock(&g_maps.mu);
  if (rc != RILL_OK) atomic_fetch_sub(&c->pins, 1);
  return rc;
}

static void csv_unpin(rill__csv_t* c) {
  if (c->evictable) atomic_fetch_sub(&c->pins, 1);
}

static void csv_unref(rill__csv_t* c) {
  if (!c || atomic_fetch_sub(&c->refs, 1) != 1) return;
  if (c->evictable) {
    pthread_mutex_lock(&g_maps.mu);
    if (c->listed) {
      unlink_locked(c);
      g_maps.mapped--;
    }
    pthread_mutex_unlock(&g_maps.mu);
  }
  rill__free_columns(c->names, c->types, c->ncols);
  rill__free(c->blocks);
  for (int64_t k = 0; k < c->nheld; k++) rill__free(c->held[k]);
  rill__free(c->held);
  rill__free(c->far);
  rill__free(c->lines);
  rill__free(c->bad);
  rill__free(c->inferred);
  for (int i = 0; i < c->nnulls; i++) rill__free(c->nulls[i]);
  rill__free(c->nulls);
  rill__free(c->null_len);
  if (c->map) munmap(c->map, (size_t)c->size);
  csv_drop_fd(c);
  rill__free(c->watch);
  rill__free(c->owned);
  rill__free(c->name);
  pthread_mutex_destroy(&c->mu);
  rill__free(c);
}

static void csv_unref_ctx(void* p) { csv_unref(p); }

/* ------------------------------------------------------------------ the source group */

/* A calling thread's memory for the calls of every CSV source: the field spans of a block of
 * rows and the unescaped bytes of fields with doubled quotes. */
typedef struct csv_scratch {
  int64_t* spans;             /* rows * ncols * 2 byte offsets: field start, end */
  int64_t spans_cap;
  int64_t* nfields;           /* fields found in each row */
  int64_t nfields_cap;
  char* text;
  size_t text_cap;
  char* num;                  /* a float's text with its decimal separator as '.' */
  size_t num_cap;
} csv_scratch_t;

static void csv_scratch_destroy(void* p) {
  csv_scratch_t* s = p;
  rill__free(s->spans);
  rill__free(s->nfields);
  rill__free(s->text);
  rill__free(s->num);
}

static int is_float(rill_dtype_t dt) { return dt == RILL_FLOAT32 || dt == RILL_FLOAT64; }

/* The text p[0..n) of a float written with c->decimal as the same text with '.' (and a '.'
 * in it as the separator, which then fails to parse), in *buf (grown). RILL_OK or
 * RILL_ENOMEM. */
static int decimal_point(const rill__csv_t* c, const char* p, size_t n, char** buf, size_t* cap) {
  if (rill__csv_room(buf, cap, n + 1) != RILL_OK) return RILL_ENOMEM;
  for (size_t i = 0; i < n; i++) (*buf)[i] = p[i] == c->decimal ? '.' : p[i] == '.' ? c->decimal : p[i];
  return RILL_OK;
}

static const rill__scratch_kind_t csv_scratch_kind = {sizeof(csv_scratch_t), csv_scratch_destroy};

static int grow_i64(int64_t** v, int64_t* cap, int64_t n) {
  if (n <= *cap) return RILL_OK;
  int64_t* nv = rill__alloc((size_t)n * sizeof *nv);
  if (!nv) return RILL_ENOMEM;
  rill__free(*v);
  *v = nv;
  *cap = n;
  return RILL_OK;
}

/* Rows [b0, b0+n) of a call, split into fields. */
typedef struct csv_block {
  const int64_t* rows;        /* the call's rows */
  int64_t b0, n;
  const int64_t* spans;       /* row j of the block: spans + j * ncols * 2 */
  const int64_t* nfields;
  int complete;               /* every row has all the columns' fields (nfields == ncols) */
} csv_block_t;

/* 1 when byte q occurs among p[0..n); `room`: bytes readable from p (8 at a time when they
 * are there). */
static inline int has_byte(const char* p, int64_t n, int64_t room, char q) {
#if RILL_TEXT_SWAR
  if (n <= 16 && room >= 16) {
    const uint64_t ones = 0x0101010101010101ULL, qs = ones * (unsigned char)q;
    for (int64_t k = 0; k < n; k += 8) {
      uint64_t x;
      memcpy(&x, p + k, 8);
      x ^= qs;
      uint64_t z = (x - ones) & ~x & 0x8080808080808080ULL; /* its lowest bit marks the first q */
      if (z && __builtin_ctzll(z) / 8 < n - k) return 1;
    }
    return 0;
  }
#endif
  return n > 0 && memchr(p, q, (size_t)n) != NULL;
}

/* 1 when the text p[0..n) is one of the null values. */
static inline int is_null_text(const rill__csv_t* c, const char* p, size_t n) {
  if (n < c->null_min || n > c->null_max) return 0;
  for (int i = 0; i < c->nnulls; i++)
    if (c->null_len[i] == n && !memcmp(c->nulls[i], p, n)) return 1;
  return 0;
}

/* Cells j0.. of column k of a block as FLOAT64 / INT64 values into `o` (cell 0 of the
 * block), while they are plain: row complete, field unquoted and not empty (nor holding the
 * escape character, nor a null value), value parsed. Returns the first j that is not (or bn):
 * the general path decides about that cell. `complete` (a constant): every row of the block
 * is (b->complete), so no row is checked; `checks` (a constant): c has an escape character or
 * null values. */
static inline __attribute__((always_inline)) int64_t plain_numbers_as(const rill__csv_t* c, const csv_block_t* b,
                                                                      int k, const int dbl, const int complete,
                                                                      const int checks, int64_t j0, int64_t bn,
                                                                      void* o) {
  const char* d = c->data;
  const char qc = c->dia.q;
  const int64_t ncols = c->ncols, stride = ncols * 2, size = c->size;
  const int64_t* nfs = b->nfields;
  const int64_t* sp = b->spans + 2 * k;
  int64_t j = j0;
  for (; j < bn; j++) {
    if (!complete && (nfs[j] > ncols || k >= nfs[j])) break;
    int64_t fs = sp[j * stride], fe = sp[j * stride + 1];
    if (fs == fe || d[fs] == qc) break;
    const char* p = d + fs;
    size_t len = (size_t)(fe - fs);
    if (checks && ((c->dia.esc && has_byte(p, (int64_t)len, size - fs, c->dia.esc)) || is_null_text(c, p, len))) break;
    void* cell = dbl ? (void*)((double*)o + j) : (void*)((int64_t*)o + j);
    if (rill__parse_plain_decimal_with(p, len, size - fs, dbl, c->decimal ? c->decimal : '.', cell)) continue;
    if (dbl && c->decimal) break; /* the general path reads it with its separator as '.' */
    if ((dbl ? rill__parse_double(p, len, cell) : rill__parse_int64(p, len, cell)) != RILL_OK) break;
  }
  return j;
}

static int64_t plain_numbers(const rill__csv_t* c, const csv_block_t* b, int k, rill_dtype_t dt, int64_t j0,
                             int64_t bn, void* o) {
#define PLAIN_NUMBERS(esc)                                                                                          \
  if (b->complete)                                                                                                  \
    return dt == RILL_FLOAT64 ? plain_numbers_as(c, b, k, 1, 1, esc, j0, bn, o)                                     \
                              : plain_numbers_as(c, b, k, 0, 1, esc, j0, bn, o);                                    \
  return dt == RILL_FLOAT64 ? plain_numbers_as(c, b, k, 1, 0, esc, j0, bn, o) : plain_numbers_as(c, b, k, 0, 0, esc, j0, bn, o)
  if (c->dia.esc || c->nnulls) {
    PLAIN_NUMBERS(1);
  }
  PLAIN_NUMBERS(0);
#undef PLAIN_NUMBERS
}

/* Cells j0.. of STRING column k of a block appended at *pos of `out` (offsets of cell 0 of the
 * block at b0), while they are plain: row complete, field unquoted or quoted without quotes
 * inside, no escape character, not a null value. out->data must hold 16 bytes past the
 * block's text (short fields are copied 16 bytes at a time). Returns the first j that is not
 * (or bn): the general path decides about that cell. `complete` and `checks` as for
 * plain_numbers_as. */
static inline __attribute__((always_inline)) int64_t plain_strings_as(const rill__csv_t* c, const csv_block_t* b,
                                                                      int k, const int complete, const int checks,
                                                                      int64_t j0, int64_t bn, rill_array_t* out,
                                                                      int64_t* pos_io) {
  const char* d = c->data;
  const char qc = c->dia.q;
  const int64_t ncols = c->ncols, stride = ncols * 2, size = c->size;
  const int64_t* nfs = b->nfields;
  const int64_t* sp = b->spans + 2 * k;
  int64_t* offs = out->offsets + b->b0 + 1;
  char* o = out->data;
  int64_t pos = *pos_io, j = j0;
  for (; j < bn; j++) {
    if (!complete && (nfs[j] > ncols || k >= nfs[j])) break;
    int64_t fs = sp[j * stride], fe = sp[j * stride + 1];
    if (checks && c->dia.esc && has_byte(d + fs, fe - fs, size - fs, c->dia.esc)) break;
    if (fs < fe && d[fs] == qc) { /* "text" without quotes inside: the bytes between */
      if (fe - fs < 2 || d[fe - 1] != qc || has_byte(d + fs + 1, fe - fs - 2, size - fs - 1, qc)) break;
      fs++;
      fe--;
    }
    if (checks && is_null_text(c, d + fs, (size_t)(fe - fs))) break;
    int64_t len = fe - fs;
    if (len <= 16 && size - fs >= 16) memcpy(o + pos, d + fs, 16);
    else memcpy(o + pos, d + fs, (size_t)len);
    pos += len;
    offs[j] = pos;
  }
  *pos_io = pos;
  return j;
}

static int64_t plain_strings(const rill__csv_t* c, const csv_block_t* b, int k, int64_t j0, int64_t bn,
                             rill_array_t* out, int64_t* pos_io) {
  if (c->dia.esc || c->nnulls)
    return b->complete ? plain_strings_as(c, b, k, 1, 1, j0, bn, out, pos_io)
                       : plain_strings_as(c, b, k, 0, 1, j0, bn, out, pos_io);
  return b->complete ? plain_strings_as(c, b, k, 1, 0, j0, bn, out, pos_io)
                     : plain_strings_as(c, b, k, 0, 0, j0, bn, out, pos_io);
}

/* STRING and BINARY (an override) columns hold their cells' bytes; BINARY ones unchecked. */
static inline int holds_bytes(rill_dtype_t dt) { return dt == RILL_STRING || dt == RILL_BINARY; }

/* 1 when the cells [0, bn) at offs (bytes pos0..pos of d) are each UTF-8: their bytes as one
 * text are, and no cell starts with a continuation byte (every boundary lies between
 * characters). */
static int cells_utf8(const char* d, const int64_t* offs, int64_t bn, int64_t pos0, int64_t pos) {
  if (rill__ascii_only(d + pos0, pos - pos0)) return 1;
  if (rill__utf8_invalid(d + pos0, pos - pos0) >= 0) return 0;
  for (int64_t j = 0; j < bn; j++)
    if (offs[j] < offs[j + 1] && ((unsigned char)d[offs[j]] & 0xC0) == 0x80) return 0;
  return 1;
}

/* The UTF-8 check of STRING cells [0, bn) of block `b`, written from byte pos0 to *pos: at
 * once where cells_utf8 says so, else cell by cell: one that is not UTF-8 fails the call at its row
 * (*at, the message in err); under RILL_ON_ERROR_NULL it becomes an empty null cell instead
 * (the bytes after it move down; *pos follows). */
static int check_utf8(const rill__csv_t* c, const csv_block_t* b, int k, rill_array_t* out, int64_t bn,
                      int64_t pos0, int64_t* pos, int64_t* nulled, int64_t* at, rill_error_t* err) {
  char* d = out->data;
  int64_t* offs = out->offsets + b->b0; /* cell j: [offs[j], offs[j + 1]) */
  if (cells_utf8(d, offs, bn, pos0, *pos)) return RILL_OK;
  int64_t src = offs[0], dst = src;
  for (int64_t j = 0; j < bn; j++) {
    int64_t end = offs[j + 1], len = end - src;
    int64_t bad = rill__utf8_invalid(d + src, len);
    if (bad >= 0) {
      int64_t i = b->b0 + j;
      if (c->on_error != RILL_ON_ERROR_NULL) {
        int64_t line = rill__csv_line((rill__csv_t*)c, rill__csv_start(c, b->rows[i]));
        rill_error_set(err, RILL_EFORMAT,
                       "%s:%lld: column '%s': not UTF-8 text (byte 0x%02X at byte %lld of the field; for another "
                       "encoding see the encoding option, or read the column as binary)",
                       c->name, (long long)line, c->names[k], (unsigned char)d[src + bad], (long long)bad);
        if (err) {
          err->row = i;
          err->column = k;
        }
        *at = i; /* nothing was moved: cells are nulled only under NULL */
        return RILL_EFORMAT;
      }
      if (rill_array_set_null(out, i) != RILL_OK) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
      (*nulled)++;
      len = 0;
    } else if (dst != src) {
      memmove(d + dst, d + src, (size_t)len);
    }
    dst += len;
    src = end;
    offs[j + 1] = dst;
  }
  *pos = dst;
  return RILL_OK;
}

/* Text of another encoding (c->encoding LATIN1 or UTF8_LOSSY) as UTF-8: STRING cells [0, bn)
 * of block `b`, written from byte pos0 to *pos, re-encoded in place (by way of the scratch
 * text; *pos follows). Nothing is done where the bytes are ASCII, or UTF-8 cell by cell under
 * UTF8_LOSSY. */
static int transcode(const rill__csv_t* c, const csv_block_t* b, int k, rill_array_t* out, int64_t bn, int64_t pos0,
                     int64_t* pos, csv_scratch_t* s, rill_error_t* err) {
  int64_t n = *pos - pos0;
  int64_t* offs = out->offsets + b->b0;
  if (c->encoding == RILL_CSV_UTF8_LOSSY && cells_utf8(out->data, offs, bn, pos0, *pos)) return RILL_OK;
  if (c->encoding == RILL_CSV_LATIN1 && rill__ascii_only((char*)out->data + pos0, n)) return RILL_OK;
  if ((size_t)n > s->text_cap) {
    char* t = rill__realloc(s->text, 0, (size_t)n);
    if (!t) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
    s->text = t;
    s->text_cap = (size_t)n;
  }
  memcpy(s->text, (char*)out->data + pos0, (size_t)n);
  int64_t room = pos0 + rill__recode_room(c->encoding, n) + 16;
  int rc = rill_array_reserve(out, room);
  if (rc != RILL_OK)
    return rill__fail(err, rc, "%s: column '%s': cannot reserve %lld bytes", c->name, c->names[k], (long long)room);
  char* d = out->data;
  int64_t w = pos0, start = 0;
  for (int64_t j = 0; j < bn; j++) {
    int64_t end = offs[j + 1] - pos0;
    w += rill__recode(c->encoding, s->text + start, end - start, d + w);
    offs[j + 1] = w;
    start = end;
  }
  *pos = w;
  return RILL_OK;
}

/* Fills the cells of column k for the rows of block `b` before call row `limit`. A string
 * column appends at out->data_size (its bytes so far). Returns RILL_OK; or a value that does
 * not convert, with *at its row in the call and the message in err; or out of memory
 * (*at = -1). Cells nulled under RILL_ON_ERROR_NULL are added to *nulled. */
static int fill_column(rill__csv_t* c, const csv_block_t* b, int k, rill_array_t* out, int64_t limit,
                       csv_scratch_t* s, int64_t* nulled, int64_t* at, rill_error_t* err) {
  rill_dtype_t dt = c->types[k];
  int64_t stride = (int64_t)c->ncols * 2;
  int64_t bn = limit - b->b0 < b->n ? limit - b->b0 : b->n;
  int64_t pos = out->data_size;
  *at = -1;
  int64_t pos0 = pos;
  if (holds_bytes(dt)) {
    /* the raw field spans bound the unescaped bytes: one reservation, then direct writes */
    int64_t bound = 0;
    const int64_t* sp = b->spans + 2 * k;
    if (b->complete)
      for (int64_t j = 0; j < bn; j++) bound += sp[j * stride + 1] - sp[j * stride];
    else
      for (int64_t j = 0; j < bn; j++)
        if (k < b->nfields[j] && b->nfields[j] <= c->ncols) bound += sp[j * stride + 1] - sp[j * stride];
    int rc = rill_array_reserve(out, pos + bound + 16); /* + 16: see plain_strings */
    if (rc != RILL_OK)
      return rill__fail(err, rc, "%s: column '%s': cannot reserve %lld bytes", c->name, c->names[k],
                        (long long)(pos + bound + 16));
  }
  void* plain = dt == RILL_FLOAT64 ? (void*)((double*)out->data + b->b0)
                : dt == RILL_INT64 ? (void*)((int64_t*)out->data + b->b0) : NULL;
  for (int64_t j = 0; j < bn; j++) {
    if (plain && (j = plain_numbers(c, b, k, dt, j, bn, plain)) == bn) break;
    if (holds_bytes(dt) && (j = plain_strings(c, b, k, j, bn, out, &pos)) == bn) break;
    int64_t i = b->b0 + j;
    int64_t nf = b->nfields[j];
    int is_null = nf > c->ncols || k >= nf; /* kept bad rows (policy NULL) */
    const char* txt = NULL;
    size_t len = 0;
    if (!is_null) {
      int64_t fs = b->spans[j * stride + 2 * k], fe = b->spans[j * stride + 2 * k + 1];
      if (rill__csv_unescape(c->data, fs, fe, &c->dia, &s->text, &s->text_cap, &txt, &len) != RILL_OK) {
        out->data_size = pos;
        return rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
      }
      if ((!holds_bytes(dt) && len == 0) || (c->nnulls && is_null_text(c, txt, len))) is_null = 1;
    }
    if (holds_bytes(dt)) {
      if (!is_null && len) {
        memcpy((char*)out->data + pos, txt, len);
        pos += (int64_t)len;
      }
      out->offsets[i + 1] = pos;
    } else if (!is_null) {
      int vrc;
      const char* num = txt; /* a float is parsed with '.' as its separator; messages show it as written */
      if (c->decimal && is_float(dt)) {
        if (decimal_point(c, txt, len, &s->num, &s->num_cap) != RILL_OK)
          return rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
        num = s->num;
      }
      if (dt == RILL_FLOAT64) vrc = rill__parse_double(num, len, (double*)out->data + i);
      else if (dt == RILL_INT64) vrc = rill__parse_int64(txt, len, (int64_t*)out->data + i);
      else vrc = rill__store_text(out, i, dt, num, len);
      if (vrc == RILL_ENOMEM) return rill__fail(err, vrc, "%s: out of memory", c->name);
      if (vrc != RILL_OK) {
        if (c->on_error != RILL_ON_ERROR_NULL) {
          int64_t line = rill__csv_line(c, rill__csv_start(c, b->rows[i]));
          char hint[96] = "";
          if (c->inferred && (c->inferred[k] & 1))
            snprintf(hint, sizeof hint, " (inferred from the first %lld rows: give the column a type, or raise infer_rows)",
                     (long long)c->inferred_rows);
          rill_error_set(err, vrc, "%s:%lld: column '%s': %s '%.*s'%s %s %s%s", c->name, (long long)line,
                         c->names[k], vrc == RILL_ERANGE ? "value" : "cannot parse", (int)(len > 40 ? 40 : len),
                         txt, len > 40 ? "..." : "",
                         vrc == RILL_ERANGE ? (dt == RILL_FLOAT32 || dt == RILL_FLOAT64 ? "is out of range of"
                                                                                          : "does not fit")
                                            : "as",
                         rill_dtype_name(dt), hint);
          if (err) {
            err->row = i;
            err->column = k;
          }
          *at = i;
          return vrc;
        }
        is_null = 1;
        (*nulled)++;
      }
    }
    if (is_null && rill_array_set_null(out, i) != RILL_OK) {
      out->data_size = pos;
      return rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
    }
  }
  if (dt == RILL_STRING) {
    int rc = c->encoding == RILL_CSV_UTF8 ? check_utf8(c, b, k, out, bn, pos0, &pos, nulled, at, err)
                                          : transcode(c, b, k, out, bn, pos0, &pos, s, err);
    out->data_size = pos;
    return rc;
  }
  out->data_size = pos;
  return RILL_OK;
}

/* Kept bad rows (policy NULL) hold null cells: counts those of rows [0, bn) of a block in the
 * requested columns. */
static int64_t bad_row_nulls(const rill__csv_t* c, const csv_block_t* b, int64_t bn, rill_array_t* const* outs) {
  int64_t nulled = 0;
  if (b->complete) return 0;
  for (int64_t j = 0; j < bn; j++) {
    int64_t nf = b->nfields[j];
    if (nf == c->ncols) continue;
    for (int k = 0; k < c->ncols; k++) nulled += outs[k] && (nf > c->ncols || k >= nf);
  }
  return nulled;
}

/* A mapped file that shrank would raise SIGBUS on the first access to a page past its new
 * end: its size is checked before each call touches the mapping, and a shrink is an error
 * naming the file (the file must not change while the dataframe lives). The file is found by
 * the descriptor it kept (csv_keep_fd), or else by its path: a path that no longer names it
 * (the file removed, or replaced by another) leaves the mapping whole. */
static int csv_check_size(const rill__csv_t* c, rill_error_t* err) {
  struct stat st;
  if (c->fd >= 0 ? fstat(c->fd, &st) != 0
                 : !c->watch || stat(c->watch, &st) != 0 || st.st_dev != c->dev || st.st_ino != c->ino)
    return RILL_OK;
  if ((int64_t)st.st_size < c->size)
    return rill_error_set(err, RILL_EIO, "%s: the file shrank from %lld to %lld bytes while it was read "
                          "(a CSV file must not change while its dataframe lives)", c->name,
                          (long long)c->size, (long long)st.st_size);
  return RILL_OK;
}

/* A call of the group, c's bytes in place: splits each row once (in blocks of at most ~1M
 * field spans) and fills every requested column from the spans. A value that does not convert
 * fails the call at the first such cell in row order (lowest column on a tie): every requested
 * cell before that row is filled. */
static int fill_pinned(const int64_t* rows, int64_t n, rill_array_t* const* outs, int nouts, rill_exec_t* exec,
                       rill__csv_t* c, rill_error_t* err) {
  if (nouts != c->ncols)
    return rill__fail(err, RILL_EINVAL, "%s: %d outputs for %d columns", c->name, nouts, c->ncols);
  for (int64_t i = 0; i < n; i++)
    if (rows[i] < 0 || rows[i] >= c->nrows)
      return rill__fail(err, RILL_EINVAL, "%s: row %lld out of range (%lld rows)", c->name,
                        (long long)rows[i], (long long)c->nrows);
  int rc = csv_check_size(c, err);
  if (rc != RILL_OK) return rc;
  for (int k = 0; k < nouts; k++) {
    rill_array_t* out = outs[k];
    if (!out) continue;
    rc = rill_exec_alloc(exec, out, rill_type_scalar(c->types[k]), n);
    if (rc != RILL_OK)
      return rill_error_set(err, rc, "%s: column '%s': cannot allocate %lld cells", c->name, c->names[k],
                            (long long)n);
    if (holds_bytes(c->types[k])) {
      if (!out->offsets) return rill_error_set(err, RILL_EINVAL, "%s: column '%s': no offsets", c->name, c->names[k]);
      out->offsets[0] = 0;
      out->data_size = 0;
    }
  }
  csv_scratch_t* s = rill__scratch(&csv_scratch_kind);
  if (!s) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
  int64_t stride = (int64_t)c->ncols * 2;
  int level = rill__csv_scan_simd_level();
  int64_t blk = ((int64_t)1 << 20) / c->ncols;
  if (blk < 1) blk = 1;
  int64_t fail = n;   /* the first row whose cell did not convert (n: none) */
  int fail_rc = RILL_OK;
  int64_t nulled = 0; /* cells nulled by the on_error / on_bad_row policy NULL */
  for (int64_t b0 = 0; b0 < fail && rc == RILL_OK; b0 += blk) {
    int64_t bn = n - b0 < blk ? n - b0 : blk;
    if (grow_i64(&s->spans, &s->spans_cap, bn * stride + 1) != RILL_OK ||
        grow_i64(&s->nfields, &s->nfields_cap, bn) != RILL_OK) {
      rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
      break;
    }
    rill__csv_split_rows(c, rows + b0, bn, s->spans, stride, c->ncols, s->nfields, level);
    /* a pass moving forward drops the pages well behind it */
    if (c->map) {
      const int64_t keep = 8 << 20, step = 16 << 20;
      int64_t lo = rill__csv_start(c, rows[b0]), mark = atomic_load(&c->drop_mark);
      if (lo - keep > mark + step && atomic_compare_exchange_strong(&c->drop_mark, &mark, lo - keep))
        rill__csv_drop(c, mark, lo - keep);
    }
    csv_block_t b = {.rows = rows, .b0 = b0, .n = bn, .spans = s->spans, .nfields = s->nfields, .complete = 1};
    for (int64_t j = 0; j < bn; j++) b.complete &= s->nfields[j] == c->ncols;
    for (int k = 0; k < nouts && rc == RILL_OK; k++) {
      if (!outs[k]) continue;
      int64_t at;
      int r = fill_column(c, &b, k, outs[k], fail, s, &nulled, &at, err);
      if (r == RILL_OK) continue;
      if (at < 0) rc = r;
      else { /* only earlier rows are looked at from here */
        fail = at;
        fail_rc = r;
      }
    }
    if (rc == RILL_OK) nulled += bad_row_nulls(c, &b, fail - b0 < bn ? fail - b0 : bn, outs);
    /* a pass that has read the last row drops the rest: in a dataset of several files (the
     * parts of a concatenation) the last pages of each would otherwise stay resident */
    if (c->map && rows[b0 + bn - 1] == c->nrows - 1) {
      int64_t mark = atomic_load(&c->drop_mark);
      if (mark < c->size && atomic_compare_exchange_strong(&c->drop_mark, &mark, c->size))
        rill__csv_drop(c, mark, c->size);
      if (c->evictable && atomic_load_explicit(&g_maps.mapped, memory_order_relaxed) >= map_budget())
        csv_finished(c);
    }
  }
  if (rc == RILL_OK) rc = fail_rc;
  for (int k = 0; k < nouts; k++) {
    rill_array_t* out = outs[k];
    if (!out || !holds_bytes(c->types[k])) continue;
    if (rc != RILL_OK) /* the cells after the failing one were not written */
      for (int64_t i = 0; i < n; i++)
        if (out->offsets[i + 1] < out->offsets[i]) out->offsets[i + 1] = out->offsets[i];
    out->data_size = out->offsets[n];
    if (rill__array_var_commit(out, n) != RILL_OK && rc == RILL_OK)
      rc = rill__fail(err, RILL_EINVAL, "%s: column '%s': cannot commit %lld cells", c->name, c->names[k],
                      (long long)n);
  }
  rill__exec_count_nulled(exec, nulled);
  return rc;
}

/* Holds file c mapped when it is (as csv_pin does, without mapping it again or marking it
 * used): 1, to be let go by csv_unpin; 0 when it is not mapped now. */
static int csv_hold_if_mapped(rill__csv_t* c) {
  if (!c->evictable) return 1;
  atomic_fetch_add(&c->pins, 1);
  if (atomic_load(&c->present)) return 1;
  atomic_fetch_sub(&c->pins, 1);
  return 0;
}

/* The group's prefetch hook (rill__prefetch_fn): step 0 the rows' index entries, step 1 the
 * first bytes of their records while the file is held mapped; a file unmapped meanwhile (more
 * files than stay mapped) is left to the call, which maps it again: a hint must not map it,
 * or unmap another. Rows out of range are left to the call too. */
static void csv_prefetch(void* ctx, const int64_t* rows, int64_t n, int step) {
  rill__csv_t* c = ctx;
  if (step != 0 && !csv_hold_if_mapped(c)) return;
  for (int64_t j = 0; j < n; j++) {
    if (rows[j] < 0 || rows[j] >= c->nrows) continue;
    if (step == 0) rill__csv_prefetch_offset(c, rows[j]);
    else rill__csv_prefetch_row(c, rows[j]);
  }
  if (step != 0) csv_unpin(c);
}

/* The group's function: fill_pinned with c's bytes kept in place. */
static int csv_fill(const int64_t* rows, int64_t n, rill_array_t* const* outs, int nouts, rill_exec_t* exec,
                    void* ctx, rill_error_t* err) {
  rill__csv_t* c = ctx;
  int rc = csv_pin(c, err);
  if (rc != RILL_OK) return rc;
  rc = fill_pinned(rows, n, outs, nouts, exec, c, err);
  csv_unpin(c);
  return rc;
}

/* ------------------------------------------------------------------ opening */

enum { T_INT = 1, T_FLOAT = 2, T_BOOL = 4, T_TS = 8, T_ALL = 15 };

static int infer_types(rill__csv_t* c, int64_t limit, rill_error_t* err) {
  int* mask = rill__alloc((size_t)c->ncols * sizeof *mask);
  int* seen = rill__calloc((size_t)c->ncols, sizeof *seen);
  int64_t* sp = rill__alloc((size_t)c->ncols * 2 * sizeof *sp);
  char *scratch = NULL, *num = NULL;
  size_t cap = 0, num_cap = 0;
  int rc = RILL_OK;
  if (!mask || !seen || !sp) {
    rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
    goto done;
  }
  for (int k = 0; k < c->ncols; k++) mask[k] = T_ALL;
  int64_t rows = limit < 0 || limit > c->nrows ? c->nrows : limit;
  for (int64_t r = 0; r < rows; r++) {
    int64_t next;
    int64_t nf = rill__csv_split(c->data, c->size, rill__csv_start(c, r), &c->dia, sp, c->ncols, &next);
    if (nf > c->ncols) continue;
    for (int k = 0; k < nf; k++) {
      if (!mask[k] || c->types[k]) continue;
      const char* s;
      size_t n;
      if (rill__csv_unescape(c->data, sp[2 * k], sp[2 * k + 1], &c->dia, &scratch, &cap, &s, &n) != RILL_OK) {
        rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
        goto done;
      }
      if (n == 0 || is_null_text(c, s, n)) continue;
      seen[k] = 1;
      int m = mask[k];
      int64_t iv;
      double dv;
      uint8_t bv;
      if ((m & T_INT) && rill__parse_int64(s, n, &iv) != RILL_OK) m &= ~T_INT;
      if ((m & T_FLOAT) && !(m & T_INT)) {
        const char* f = s;
        if (c->decimal) {
          if (decimal_point(c, s, n, &num, &num_cap) != RILL_OK) {
            rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
            goto done;
          }
          f = num;
        }
        if (rill__parse_double(f, n, &dv) != RILL_OK) m &= ~T_FLOAT;
      }
      if ((m & T_BOOL) && rill__parse_bool(s, n, 0, &bv) != RILL_OK) m &= ~T_BOOL;
      if ((m & T_TS) && rill_parse_timestamp(s, n, &iv) != RILL_OK) m &= ~T_TS;
      mask[k] = m;
    }
  }
  c->inferred = rill__calloc((size_t)c->ncols, 1);
  if (!c->inferred) {
    rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
    goto done;
  }
  c->inferred_rows = rows;
  for (int k = 0; k < c->ncols; k++) {
    if (c->types[k]) continue;
    int m = seen[k] ? mask[k] : 0;
    c->types[k] = (m & T_INT) ? RILL_INT64 : (m & T_FLOAT) ? RILL_FLOAT64 : (m & T_BOOL) ? RILL_BOOL
                  : (m & T_TS) ? RILL_TIMESTAMP_US : RILL_STRING;
    /* 1: a later row may not fit (its error says where the type came from); 2: no value to
     * infer from (string by default; rill_df_from_csv_files takes the other files' type) */
    c->inferred[k] = (uint8_t)((rows < c->nrows ? 1 : 0) | (seen[k] ? 0 : 2));
  }
done:
  rill__free(mask);
  rill__free(seen);
  rill__free(sp);
  rill__free(scratch);
  rill__free(num);
  return rc;
}

/* Column names from the header record at `pos` (or generated); sets c->ncols and returns the
 * offset where data starts. */
static int read_header(rill__csv_t* c, int64_t pos, int no_header, int64_t* data_begin, rill_error_t* err) {
  pos = rill__csv_record_start(c->data, pos, c->size, &c->dia); /* blank and comment lines go */
  if (pos >= c->size) return rill__fail(err, RILL_EFORMAT, "%s: empty input (no header row)", c->name);
  int64_t next;
  int64_t nf = rill__csv_split(c->data, c->size, pos, &c->dia, NULL, 0, &next);
  if (nf > 100000)
    return rill__fail(err, RILL_EFORMAT, "%s:%lld: too many columns (%lld)", c->name,
                      (long long)rill__csv_line(c, pos), (long long)nf);
  int64_t* sp = rill__alloc((size_t)nf * 2 * sizeof *sp);
  c->names = rill__calloc((size_t)nf, sizeof *c->names);
  c->types = rill__calloc((size_t)nf, sizeof *c->types);
  if (!sp || !c->names || !c->types) {
    rill__free(sp);
    return rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
  }
  c->ncols = (int)nf;
  rill__csv_split(c->data, c->size, pos, &c->dia, sp, nf, &next);
  for (int k = 0; !no_header && k < c->ncols; k++)
    if (!rill__csv_quote_closed(c->data, sp[2 * k], sp[2 * k + 1], &c->dia)) {
      int64_t line = rill__csv_line(c, sp[2 * k]);
      rill__free(sp);
      return rill__fail(err, RILL_EFORMAT, "%s:%lld: unterminated quoted field in the header row (column %d)",
                        c->name, (long long)line, k + 1);
    }
  char* scratch = NULL;
  size_t cap = 0;
  int rc = RILL_OK;
  for (int k = 0; k < c->ncols && rc == RILL_OK; k++) {
    const char* s = NULL;
    size_t n = 0;
    if (!no_header && rill__csv_unescape(c->data, sp[2 * k], sp[2 * k + 1], &c->dia, &scratch, &cap, &s, &n) != RILL_OK) {
      rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
      break;
    }
    int64_t bad;
    c->names[k] = rill__column_name_in(c->encoding, s, n, k, &bad);
    if (bad >= 0) {
      rc = rill__fail(err, RILL_EFORMAT, "%s:%lld: the name of column %d is not UTF-8 text (byte 0x%02X at byte %lld)",
                      c->name, (long long)rill__csv_line(c, sp[2 * k]), k + 1, (unsigned char)s[bad], (long long)bad);
      break;
    }
    if (!c->names[k]) rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
  }
  rill__free(scratch);
  rill__free(sp);
  if (rc == RILL_OK && rill__unique_names(c->names, c->ncols, '.') != RILL_OK)
    rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
  *data_begin = no_header ? pos : next;
  return rc;
}

static int apply_overrides(rill__csv_t* c, const rill_csv_opts_t* o, rill_error_t* err) {
  for (int i = 0; i < o->ncolumns; i++) {
    const rill_csv_column_t* ov = &o->columns[i];
    int k = rill__override_column(ov, c->names, c->ncols, c->name, "file", err);
    if (k < 0) return k;
    if (!rill__text_dtype_supported(ov->dtype) && ov->dtype != RILL_BINARY)
      return rill__fail(err, RILL_ENOTSUP, "%s: column '%s': dtype %s is not supported for CSV",
                        c->name, c->names[k], rill_dtype_name(ov->dtype));
    c->types[k] = ov->dtype;
  }
  return RILL_OK;
}

/* The offset after `lines` physical lines from `pos` (rill__csv_break_at ends one), or -1 when
 * nothing is left after them; *seen: the lines passed (a last line without a line break
 * counts). */
static int64_t skip_lines(const rill__csv_t* c, int64_t pos, int64_t lines, int64_t* seen) {
  int64_t k = 0;
  while (k < lines && pos < c->size) {
    while (pos < c->size && !rill__csv_break_at(c->data, c->size, pos)) pos++;
    if (pos < c->size) pos++;
    k++;
  }
  *seen = k;
  return k < lines || pos >= c->size ? -1 : pos;
}

/* ------------------------------------------------------------------ compressed input */

/* Whether a gzip member (deflate) starts p[0..n). */
static int is_gzip(const uint8_t* p, int64_t n) { return n >= 3 && p[0] == 0x1F && p[1] == 0x8B && p[2] == 8; }

/* The compression format whose magic number starts p[0..n), or NULL. */
static const char* compression_of(const uint8_t* p, int64_t n) {
  if (is_gzip(p, n)) return "gzip";
  if (n >= 4 && !memcmp(p, "\x28\xB5\x2F\xFD", 4)) return "zstd";
  if (n >= 6 && !memcmp(p, "\xFD" "7zXZ\x00", 6)) return "xz";
  if (n >= 10 && !memcmp(p, "BZh", 3) && p[3] >= '1' && p[3] <= '9' &&
      (!memcmp(p + 4, "1AY&SY", 6) || !memcmp(p + 4, "\x17\x72\x45\x38\x50\x90", 6)))
    return "bzip2";
  if (n >= 4 && !memcmp(p, "PK\x03\x04", 4)) return "zip";
  return NULL;
}

int64_t rill__csv_spill_bytes = (int64_t)1 << 30;

#if RILL_HAVE_ZLIB || RILL_HAVE_ZSTD
/* Where a streaming decompression writes the text: a buffer in memory while the text is
 * small; past rill__csv_spill_bytes, an unlinked temporary file (in $TMPDIR, default /tmp)
 * that the buffer is emptied into, and which is then mapped like a CSV file, so that a large
 * compressed file is read with the resident memory of an uncompressed one. */
typedef struct text_sink {
  rill__csv_t* c;
  const char* format; /* "gzip" or "zstd", for messages */
  uint8_t* buf;
  size_t cap, n;      /* buf holds the text's bytes [spilled, spilled + n) */
  int fd;             /* the temporary file, or -1 */
  int64_t spilled;    /* bytes written to it */
} text_sink_t;

static int sink_init(text_sink_t* s, rill__csv_t* c, const char* format, size_t cap, rill_error_t* err) {
  *s = (text_sink_t){.c = c, .format = format, .cap = cap, .fd = -1};
  s->buf = rill__alloc(cap);
  return s->buf ? RILL_OK
                : rill__fail(err, RILL_ENOMEM, "%s: out of memory decompressing the %s data", c->name, format);
}

/* Bytes of text so far. */
static int64_t sink_total(const text_sink_t* s) { return s->spilled + (int64_t)s->n; }

/* Writes buf[0..n) to the temporary file (made on first use) and empties the buffer. */
static int sink_spill(text_sink_t* s, rill_error_t* err) {
  const char* dir = getenv("TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  if (s->fd < 0) {
    s->fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (s->fd < 0) { /* a file system without O_TMPFILE: a named file, unlinked at once */
      char path[4096];
      snprintf(path, sizeof path, "%s/rill-csv-XXXXXX", dir);
      s->fd = mkostemp(path, O_CLOEXEC);
      if (s->fd >= 0) unlink(path);
    }
    if (s->fd < 0)
      return rill__fail(err, RILL_EIO, "%s: cannot make a temporary file in %s for the decompressed text: %s",
                        s->c->name, dir, strerror(errno));
  }
  for (size_t at = 0; at < s->n;) {
    ssize_t w = write(s->fd, s->buf + at, s->n - at);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0)
      return rill__fail(err, RILL_EIO, "%s: cannot write the decompressed text to a temporary file in %s: %s",
                        s->c->name, dir, w < 0 ? strerror(errno) : "no progress");
    at += (size_t)w;
  }
  s->spilled += (int64_t)s->n;
  s->n = 0;
  return RILL_OK;
}

/* Room to write at buf + n: the buffer doubled, or (past the spill size) emptied into the
 * temporary file and kept at 8 MiB from then on. */
static int sink_room(text_sink_t* s, rill_error_t* err) {
  if (s->n < s->cap) return RILL_OK;
  if (s->fd >= 0 || sink_total(s) >= rill__csv_spill_bytes) {
    int rc = sink_spill(s, err);
    size_t keep = (size_t)8 << 20;
    if (rc == RILL_OK && s->cap != keep) {
      uint8_t* nb = rill__realloc(s->buf, 0, keep);
      if (nb) s->buf = nb, s->cap = keep;
    }
    return rc;
  }
  uint8_t* nb = s->cap > SIZE_MAX / 2 ? NULL : rill__realloc(s->buf, s->n, s->cap * 2);
  if (!nb)
    return rill__fail(err, RILL_ENOMEM, "%s: out of memory decompressing the %s data (%lld bytes of text so far)",
                      s->c->name, s->format, (long long)sink_total(s));
  s->buf = nb;
  s->cap *= 2;
  return RILL_OK;
}

/* The end of a decompression that returned rc: on success the text (the buffer, or the
 * temporary file mapped) replaces c->data[0..c->size); otherwise what was made is freed and
 * rc returned. */
static int sink_end(text_sink_t* s, int rc, rill_error_t* err) {
  rill__csv_t* c = s->c;
  if (rc == RILL_OK && s->fd >= 0) rc = sink_spill(s, err);
  void* map = NULL;
  if (rc == RILL_OK && s->fd >= 0 && s->spilled > 0) {
    map = mmap(NULL, (size_t)s->spilled, PROT_READ, MAP_PRIVATE, s->fd, 0);
    if (map == MAP_FAILED) {
      map = NULL;
      rc = rill__fail(err, RILL_EIO, "%s: cannot map the decompressed text: %s", c->name, strerror(errno));
    }
  }
  if (rc != RILL_OK || s->fd >= 0) {
    rill__free(s->buf);
    s->buf = NULL;
  }
  if (rc != RILL_OK) {
    if (s->fd >= 0) close(s->fd);
    return rc;
  }
  if (c->map) munmap(c->map, (size_t)c->size);
  rill__free(c->watch); /* the text read is no longer the file's mapping */
  c->watch = NULL;
  csv_drop_fd(c);
  rill__free(c->owned);
  c->owned = s->buf;
  c->map = map;
  c->data = map ? (const char*)map : (const char*)s->buf;
  c->size = sink_total(s);
  if (s->fd >= 0) close(s->fd); /* the mapping keeps the unlinked file; no one else can change it */
  return c->size ? RILL_OK : rill__fail(err, RILL_EFORMAT, "%s: empty input (no header row)", c->name);
}
#endif

#if RILL_HAVE_ZSTD
/* Decompresses the zstd frames of c->data (one after another; skippable frames are skipped)
 * into an owned buffer that replaces it. The output is first sized by the first frame's
 * content size, within what the input can decompress to here, and grown as needed. */
static int unzstd(rill__csv_t* c, rill_error_t* err) {
  const uint8_t* in = (const uint8_t*)c->data;
  size_t size = (size_t)c->size, ret = 1;
  unsigned long long hint = ZSTD_getFrameContentSize(in, size);
  size_t most = size < SIZE_MAX / 64 ? size * 64 : SIZE_MAX / 2; /* a header may lie (damage) */
  size_t cap = hint != ZSTD_CONTENTSIZE_UNKNOWN && hint != ZSTD_CONTENTSIZE_ERROR && hint >= size
                   ? (hint < most ? (size_t)hint : most)
                   : size * 4;
  if (cap > (size_t)rill__csv_spill_bytes) cap = (size_t)rill__csv_spill_bytes; /* the rest goes to a file */
  text_sink_t s;
  ZSTD_DStream* z = ZSTD_createDStream();
  int rc = z ? sink_init(&s, c, "zstd", cap + 64, err)
             : rill__fail(err, RILL_ENOMEM, "%s: out of memory decompressing the zstd data", c->name);
  if (!z) s = (text_sink_t){.c = c, .fd = -1};
  ZSTD_inBuffer ib = {in, size, 0};
  while (rc == RILL_OK) {
    if ((rc = sink_room(&s, err)) != RILL_OK) break;
    ZSTD_outBuffer ob = {s.buf, s.cap, s.n};
    ret = ZSTD_decompressStream(z, &ob, &ib);
    s.n = ob.pos;
    if (ZSTD_isError(ret))
      rc = rill__fail(err, RILL_EFORMAT, "%s: damaged zstd data near compressed byte %zu (%s)", c->name, ib.pos,
                      ZSTD_getErrorName(ret));
    else if (ib.pos == ib.size && s.n < s.cap) { /* all read, all written */
      if (ret != 0)
        rc = rill__fail(err, RILL_EFORMAT, "%s: the zstd data ends early (a truncated file?) after %lld bytes of text",
                        c->name, (long long)sink_total(&s));
      break;
    }
  }
  ZSTD_freeDStream(z);
  return sink_end(&s, rc, err);
}
#endif

#if RILL_HAVE_ZLIB
/* Whether the gzip data of c ends at `at`: only zero bytes (padding) follow; else *next: a
 * gzip member starts there. */
static int gzip_ends(const rill__csv_t* c, int64_t at, int* next) {
  const uint8_t* p = (const uint8_t*)c->data + at;
  int64_t rest = c->size - at, zeros = 0;
  while (zeros < rest && !p[zeros]) zeros++;
  *next = is_gzip(p, rest);
  return zeros == rest;
}

#if RILL_HAVE_DEFLATE
/* libdeflate's inflate of the whole input (several times zlib's speed): RILL_OK with the
 * text taken, an error, or 1 (no message, the input untouched) for data it refuses, whose
 * fault the zlib pass then names. The output is sized by the last member's length field
 * (exact for one member under 4 GiB, within what the input can inflate to), grown and the
 * member inflated again when short. */
static int inflate_whole(rill__csv_t* c, rill_error_t* err) {
  const uint8_t* in = (const uint8_t*)c->data;
  size_t size = (size_t)c->size, isize = 0;
  if (size >= 4)
    isize = (size_t)in[size - 4] | (size_t)in[size - 3] << 8 | (size_t)in[size - 2] << 16 | (size_t)in[size - 1] << 24;
  /* the length field may lie (damage): deflate inflates no byte to more than 1032 */
  size_t most = size < SIZE_MAX / 1032 ? size * 1032 : SIZE_MAX / 2;
  size_t cap = (isize >= size ? (isize < most ? isize : most) : size * 4) + 64, n = 0, at = 0;
  if (cap > (size_t)rill__csv_spill_bytes) return 1; /* a large text: zlib's stream writes it to a file */
  struct libdeflate_decompressor* d = libdeflate_alloc_decompressor();
  uint8_t* buf = d ? rill__alloc(cap) : NULL;
  int rc = buf ? RILL_OK : rill__fail(err, RILL_ENOMEM, "%s: out of memory inflating the gzip data", c->name);
  while (rc == RILL_OK) {
    size_t used_in = 0, used_out = 0;
    enum libdeflate_result r = libdeflate_gzip_decompress_ex(d, in + at, size - at, buf + n, cap - n, &used_in, &used_out);
    if (r == LIBDEFLATE_INSUFFICIENT_SPACE) {
      uint8_t* nb = cap * 2 > (size_t)rill__csv_spill_bytes ? NULL : rill__realloc(buf, n, cap * 2);
      if (!nb) rc = 1; /* past the spill size (or out of memory): zlib's stream */
      else buf = nb, cap *= 2;
      continue;
    }
    int next;
    if (r != LIBDEFLATE_SUCCESS) rc = 1;
    else if (n += used_out, at += used_in, gzip_ends(c, (int64_t)at, &next)) break;
    else if (!next) rc = 1;
  }
  libdeflate_free_decompressor(d);
  if (rc != RILL_OK) {
    rill__free(buf);
    return rc;
  }
  text_sink_t s = {.c = c, .buf = buf, .cap = cap, .n = n, .fd = -1};
  return sink_end(&s, RILL_OK, err);
}
#endif

/* Inflates the gzip data c->data[0..c->size) (members one after another, as gzip writes
 * them; zero bytes after the last one are padding) into an owned buffer that replaces it;
 * with zlib's stream, which names what is wrong with bad data. */
static int inflate_gzip(rill__csv_t* c, rill_error_t* err) {
  z_stream z;
  memset(&z, 0, sizeof z);
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
  const uint8_t* in = (const uint8_t*)c->data;
  int64_t left = c->size;
  size_t cap = (size_t)(c->size < ((int64_t)1 << 28) ? c->size * 4 : c->size) + 4096;
  if (cap > (size_t)rill__csv_spill_bytes) cap = (size_t)rill__csv_spill_bytes + 4096;
  text_sink_t s;
  int rc = sink_init(&s, c, "gzip", cap, err);
  while (rc == RILL_OK) {
    if ((rc = sink_room(&s, err)) != RILL_OK) break;
    if (z.avail_in == 0 && left > 0) {
      uInt k = left > (int64_t)UINT_MAX ? UINT_MAX : (uInt)left;
      z.next_in = (Bytef*)in, z.avail_in = k;
      in += k, left -= k;
    }
    size_t room = s.cap - s.n > UINT_MAX ? UINT_MAX : s.cap - s.n;
    z.next_out = s.buf + s.n, z.avail_out = (uInt)room;
    int r = inflate(&z, Z_NO_FLUSH);
    s.n += room - z.avail_out;
    int64_t at = c->size - left - (int64_t)z.avail_in; /* compressed bytes read */
    if (r == Z_STREAM_END) {
      int next;
      if (gzip_ends(c, at, &next)) break;
      if (!next) {
        rc = rill__fail(err, RILL_EFORMAT, "%s: bytes that are not gzip data after its end (at compressed byte %lld)",
                        c->name, (long long)at);
        break;
      }
      inflateReset(&z);
    } else if (r == Z_BUF_ERROR && z.avail_out > 0) { /* no progress with room to write: the input ended */
      rc = rill__fail(err, RILL_EFORMAT, "%s: the gzip data ends early (a truncated file?) after %lld bytes of text",
                      c->name, (long long)sink_total(&s));
    } else if (r != Z_OK && r != Z_BUF_ERROR) {
      rc = r == Z_MEM_ERROR ? rill__fail(err, RILL_ENOMEM, "%s: out of memory inflating the gzip data", c->name)
                            : rill__fail(err, RILL_EFORMAT, "%s: damaged gzip data near compressed byte %lld (%s)",
                                         c->name, (long long)at, z.msg ? z.msg : "zlib error");
    }
  }
  inflateEnd(&z);
  return sink_end(&s, rc, err);
}
#endif

int rill__csv_gzip_zlib_only = 0;

/* A compressed input: gzip (libdeflate, zlib) and zstd are decompressed into memory; other formats
 * are refused by name. */
static int decompress(rill__csv_t* c, rill_error_t* err) {
  const char* f = compression_of((const uint8_t*)c->data, c->size);
  if (!f) return RILL_OK;
#if RILL_HAVE_ZLIB
  if (!strcmp(f, "gzip")) {
#if RILL_HAVE_DEFLATE
    int rc = rill__csv_gzip_zlib_only ? 1 : inflate_whole(c, err);
    if (rc <= 0) return rc;
#endif
    return inflate_gzip(c, err);
  }
#endif
#if RILL_HAVE_ZSTD
  if (!strcmp(f, "zstd")) return unzstd(c, err);
#endif
  return rill__fail(err, RILL_ENOTSUP, "%s: the input is %s-compressed: decompress it first (rill reads %s)", c->name,
                    f,
                    RILL_HAVE_ZLIB && RILL_HAVE_ZSTD ? "gzip- and zstd-compressed CSV"
                    : RILL_HAVE_ZLIB                ? "gzip-compressed CSV"
                    : RILL_HAVE_ZSTD                ? "zstd-compressed CSV"
                                                    : "uncompressed CSV only: built without zlib and libzstd");
}

static int csv_frame(rill__csv_t* c, const rill_csv_opts_t* o, rill_df_t** out, rill_error_t* err);

static int csv_open(rill__csv_t* c, const rill_csv_opts_t* o, rill_df_t** out, rill_error_t* err) {
  int rc;
  int64_t pos = 0, data_begin = 0;
  if ((rc = decompress(c, err)) != RILL_OK) return rc;
  if (c->size >= 3 && memcmp(c->data, "\xEF\xBB\xBF", 3) == 0) pos = 3;
  if (o->skip_lines > 0) {
    int64_t seen;
    if ((pos = skip_lines(c, pos, o->skip_lines, &seen)) < 0)
      return rill__fail(err, RILL_EFORMAT, "%s: nothing after the %lld lines skip_lines leaves out (the input has %lld)",
                        c->name, (long long)o->skip_lines, (long long)seen);
  }
  if ((rc = read_header(c, pos, o->no_header, &data_begin, err)) != RILL_OK) return rc;
  if ((rc = rill__csv_build_index(c, data_begin, c->ncols, o, err)) != RILL_OK) return rc;
  if ((rc = apply_overrides(c, o, err)) != RILL_OK) return rc;
  if (o->no_infer)
    for (int k = 0; k < c->ncols; k++)
      if (!c->types[k]) c->types[k] = RILL_STRING;
  if ((rc = infer_types(c, o->infer_rows ? o->infer_rows : CSV_DEFAULT_INFER, err)) != RILL_OK)
    return rc;
  return csv_frame(c, o, out, err);
}

/* A dataframe over CSV input c, indexed and its types decided (c->types). */
static int csv_frame(rill__csv_t* c, const rill_csv_opts_t* o, rill_df_t** out, rill_error_t* err) {
  int rc;
  rill_type_t* types = rill__alloc((size_t)c->ncols * sizeof *types);
  if (!types) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
  int* nullable = rill__alloc((size_t)c->ncols * sizeof *nullable);
  if (!nullable) {
    rill__free(types);
    return rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
  }
  for (int k = 0; k < c->ncols; k++) {
    types[k] = rill_type_scalar(c->types[k]);
    /* an empty field is a null number; a missing field of a short row is null everywhere;
     * text that is not UTF-8 is null under on_error NULL */
    nullable[k] = !holds_bytes(c->types[k]) || c->nnulls || o->on_bad_row == RILL_ON_ERROR_NULL ||
                  (c->types[k] == RILL_STRING && o->on_error == RILL_ON_ERROR_NULL);
  }
  /* tasks of up to 1024 rows (fewer for wide rows) */
  int64_t grain = ((int64_t)1 << 20) / c->ncols;
  rill_stage_opts_t so = {.where = RILL_STAGE_CPU, .on_error = o->on_error,
                          .grain = grain > 1024 ? 1024 : grain < 1 ? 1 : grain};
  atomic_fetch_add(&c->refs, 1);
  rc = rill__df_new_source_group(c->nrows, (const char* const*)c->names, types, nullable, c->ncols, csv_fill, c,
                                 csv_unref_ctx, &so, out, err);
  for (int k = 0; rc == RILL_OK && k < c->ncols; k++) rc = rill__df_set_prefetch(*out, k, csv_prefetch, err);
  if (rc != RILL_OK && *out) {
    rill_df_free(*out);
    *out = NULL;
  }
  rill__free(types);
  rill__free(nullable);
  return rc;
}

/* c->nulls: copies of the NULL-terminated list `v`. */
static int copy_null_values(rill__csv_t* c, const char* const* v, rill_error_t* err) {
  int n = 0;
  while (v && v[n]) {
    if (++n > RILL_CSV_NULL_VALUES_MAX)
      return rill__fail(err, RILL_EINVAL, "%s: more than %d null values", c->name, RILL_CSV_NULL_VALUES_MAX);
  }
  if (!n) return RILL_OK;
  c->nulls = rill__calloc((size_t)n, sizeof *c->nulls);
  c->null_len = rill__calloc((size_t)n, sizeof *c->null_len);
  if (!c->nulls || !c->null_len) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
  for (int i = 0; i < n; i++, c->nnulls++) {
    if (!(c->nulls[i] = rill__strdup(v[i]))) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
    c->null_len[i] = strlen(v[i]);
    if (c->null_len[i] < c->null_min) c->null_min = c->null_len[i];
    if (c->null_len[i] > c->null_max) c->null_max = c->null_len[i];
  }
  return RILL_OK;
}

static int csv_new(const char* name, const rill_csv_opts_t* o, rill__csv_t** out, rill_error_t* err) {
  if (o->delimiter == '\n' || o->delimiter == '\r' || o->quote == '\n' || o->quote == '\r' ||
      (o->delimiter ? o->delimiter : ',') == (o->quote ? o->quote : '"'))
    return rill__fail(err, RILL_EINVAL, "%s: the delimiter and quote must differ and not be line breaks", name);
  if (o->comment && (o->comment == '\n' || o->comment == '\r' || o->comment == (o->delimiter ? o->delimiter : ',') ||
                     o->comment == (o->quote ? o->quote : '"')))
    return rill__fail(err, RILL_EINVAL,
                      "%s: the comment character must differ from the delimiter and the quote and not be a line break",
                      name);
  if (o->trim != 0 && o->trim != 1) return rill__fail(err, RILL_EINVAL, "%s: trim must be 0 or 1 (got %d)", name, o->trim);
  if (o->decimal && o->decimal != '.' &&
      (strchr("\n\r+-0123456789eE", o->decimal) || o->decimal == (o->delimiter ? o->delimiter : ',') ||
       o->decimal == (o->quote ? o->quote : '"') || o->decimal == o->comment || o->decimal == o->escape))
    return rill__fail(err, RILL_EINVAL,
                      "%s: the decimal separator '%c' is the delimiter, the quote, the comment or escape character, a "
                      "line break or a character of numbers",
                      name, o->decimal);
  if (o->escape && (o->escape == '\n' || o->escape == '\r' || o->escape == (o->delimiter ? o->delimiter : ',') ||
                    o->escape == (o->quote ? o->quote : '"') || o->escape == o->comment))
    return rill__fail(err, RILL_EINVAL,
                      "%s: the escape character must differ from the delimiter, the quote and the comment character "
                      "and not be a line break",
                      name);
  if (o->ncolumns < 0 || (o->ncolumns > 0 && !o->columns))
    return rill__fail(err, RILL_EINVAL, "%s: ncolumns %d without columns", name, o->ncolumns);
  if ((unsigned)o->encoding > RILL_CSV_LATIN1)
    return rill__fail(err, RILL_EINVAL, "%s: unknown encoding %d", name, (int)o->encoding);
  if (o->skip_lines < 0)
    return rill__fail(err, RILL_EINVAL, "%s: skip_lines must be 0 or more (got %lld)", name, (long long)o->skip_lines);
  rill__csv_t* c = rill__calloc(1, sizeof *c);
  if (!c) return rill__fail(err, RILL_ENOMEM, "out of memory");
  c->name = rill__strdup(name);
  if (!c->name) {
    rill__free(c);
    return rill__fail(err, RILL_ENOMEM, "out of memory");
  }
  atomic_init(&c->refs, 1);
  c->fd = -1;
  pthread_mutex_init(&c->mu, NULL);
  c->dia = (rill__csv_dialect_t){.dl = o->delimiter ? o->delimiter : ',', .q = o->quote ? o->quote : '"',
                                 .cm = o->comment, .trim = o->trim, .esc = o->escape};
  c->on_error = o->on_error;
  c->encoding = o->encoding;
  c->decimal = o->decimal == '.' ? 0 : o->decimal;
  c->null_min = SIZE_MAX;
  int rc = copy_null_values(c, o->null_values, err);
  if (rc != RILL_OK) {
    csv_unref(c);
    return rc;
  }
  *out = c;
  return RILL_OK;
}

/* Reads `fd` until EOF into c->owned (c->data, c->size). */
static int read_to_end(int fd, rill__csv_t* c, rill_error_t* err) {
  size_t cap = 65536, n = 0;
  char* buf = rill__alloc(cap);
  if (!buf) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
  for (;;) {
    if (n == cap) {
      char* nb = rill__realloc(buf, cap, cap * 2);
      if (!nb) {
        rill__free(buf);
        return rill__fail(err, RILL_ENOMEM, "%s: out of memory reading %zu bytes", c->name, cap * 2);
      }
      buf = nb;
      cap *= 2;
    }
    ssize_t r = read(fd, buf + n, cap - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      int e = errno;
      rill__free(buf);
      return rill__fail(err, RILL_EIO, "%s: read failed: %s", c->name, strerror(e));
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  c->owned = buf;
  c->data = buf;
  c->size = (int64_t)n;
  return RILL_OK;
}

int rill_df_from_csv(const char* path, const rill_csv_opts_t* opts, rill_df_t** out, rill_error_t* err) {
  rill_csv_opts_t o = {0};
  if (opts) o = *opts;
  if (!path || !out) return rill__fail(err, RILL_EINVAL, "rill_df_from_csv: path and out are required");
  *out = NULL;
  rill__csv_t* c;
  int rc = csv_new(path, &o, &c, err);
  if (rc != RILL_OK) return rc;
  char eb[128];
  int fd;
  const char* why = rill__open_regular(path, &fd, &c->size, eb, sizeof eb);
  if (why) {
    rc = rill__fail(err, RILL_EIO, "%s: cannot open: %s", path, why);
    goto fail;
  }
  if (c->size == 0) {
    /* st_size 0: empty, or a file whose size is not known in advance (/proc): read it */
    rc = read_to_end(fd, c, err);
    close(fd);
    if (rc == RILL_OK && c->size == 0) rc = rill__fail(err, RILL_EFORMAT, "%s: empty input (no header row)", path);
    if (rc != RILL_OK) goto fail;
    rc = csv_open(c, &o, out, err);
    goto fail;
  }
  c->map = mmap(NULL, (size_t)c->size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (c->map == MAP_FAILED) {
    c->map = NULL;
    rc = rill__fail(err, RILL_EIO, "%s: cannot map: %s", path, strerror(errno));
    close(fd);
    goto fail;
  }
  /* the file is watched by its path and identity, and by its descriptor only while few files
   * keep one: thousands of files opened at once would exhaust the descriptors a process may
   * hold */
  struct stat st;
  char* real = realpath(path, NULL);
  if (fstat(fd, &st) == 0) {
    c->dev = st.st_dev, c->ino = st.st_ino;
    c->watch = rill__strdup(real ? real : path);
  }
  free(real);
  csv_keep_fd(c, fd);
  c->data = c->map;
  rc = csv_open(c, &o, out, err);
  if (rc == RILL_OK) csv_listed(c);
fail:
  csv_unref(c);
  return rc;
}

/* The column of df called `name`'s type, or NULL. */
static const rill_type_t* type_named(const rill_df_t* df, const char* name) {
  int k = rill_df_column(df, name);
  return k >= 0 ? &rill_df_field(df, k)->type : NULL;
}

/* Whether the type of df's column `name` (read from a CSV file) was inferred from no value: the
 * file had no rows, or only empty or null cells there. */
static int guessed(const rill_df_t* df, const char* name) {
  int k = rill_df_column(df, name);
  if (k < 0 || rill__df_column_fn(df, k) != (rill__fn_t)csv_fill) return 0;
  const rill__csv_t* c = rill__df_column_ctx(df, k);
  return c->inferred && (c->inferred[k] & 2);
}

/* Whether t is a scalar INT64 or FLOAT64: inferred so in one file, they read as FLOAT64 in all. */
static int widens(const rill_type_t* t) {
  return t->ndim == 0 && (t->dtype == RILL_INT64 || t->dtype == RILL_FLOAT64);
}

/* Files opened side by side: each thread takes the next file of the list. */
typedef struct open_job {
  const char* const* paths;
  int n;
  const rill_csv_opts_t* o; /* each file's options (its index pass's threads set) */
  rill_df_t** parts;
  atomic_int next;
  pthread_mutex_t mu;
  int failed, rc; /* the first file of the list that failed so far (n: none), its code */
  rill_error_t err; /* and error */
} open_job_t;

static void* open_worker(void* arg) {
  open_job_t* j = arg;
  for (;;) {
    int p = atomic_fetch_add(&j->next, 1);
    pthread_mutex_lock(&j->mu);
    int stop = p >= j->n || p > j->failed; /* files after a failed one are not needed */
    pthread_mutex_unlock(&j->mu);
    if (stop) return NULL;
    rill_error_t e;
    rill_error_clear(&e);
    int rc = rill_df_from_csv(j->paths[p], j->o, &j->parts[p], &e);
    if (rc == RILL_OK) continue;
    pthread_mutex_lock(&j->mu);
    if (p < j->failed) j->failed = p, j->rc = rc, j->err = e;
    pthread_mutex_unlock(&j->mu);
  }
}

/* Opens paths[0 .. n) into parts: up to o->threads files at a time (0: one per core), the
 * threads left over given to each file's index pass. A failure is the first failing file's
 * in the list whatever the order they were opened in (the caller frees the parts opened). */
static int open_files(const char* const* paths, int n, const rill_csv_opts_t* o, rill_df_t** parts,
                      rill_error_t* err) {
  int threads = o->threads > 0 ? o->threads : rill__ncores(), side = threads < n ? threads : n;
  if (side > 64) side = 64; /* rill__run_threads' most */
  rill_csv_opts_t each = *o;
  each.threads = threads / side;
  open_job_t job = {.paths = paths, .n = n, .o = &each, .parts = parts, .failed = n};
  atomic_init(&job.next, 0);
  pthread_mutex_init(&job.mu, NULL);
  rill__run_threads(side, open_worker, &job);
  pthread_mutex_destroy(&job.mu);
  if (job.failed == n) return RILL_OK;
  if (err) *err = job.err;
  return job.rc;
}

int rill_df_from_csv_files(const char* const* paths, int npaths, const rill_csv_opts_t* opts, rill_df_t** out,
                           rill_error_t* err) {
  static const char who[] = "rill_df_from_csv_files";
  if (!out) return rill__fail(err, RILL_EINVAL, "%s: out is NULL", who);
  *out = NULL;
  if (!paths || npaths < 1) return rill__fail(err, RILL_EINVAL, "%s: %d paths (at least 1)", who, npaths);
  for (int p = 0; p < npaths; p++)
    if (!paths[p]) return rill__fail(err, RILL_EINVAL, "%s: paths[%d] is NULL", who, p);
  rill_csv_opts_t o = {0};
  if (opts) o = *opts;
  rill_df_t** parts = rill__calloc((size_t)npaths, sizeof *parts);
  if (!parts) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", who);
  int rc = open_files(paths, npaths, &o, parts, err);
  /* the same columns in every file (any order) */
  int nc = rc == RILL_OK ? rill_df_ncolumns(parts[0]) : 0;
  for (int p = 1; rc == RILL_OK && p < npaths; p++) {
    if (rill_df_ncolumns(parts[p]) != nc) {
      rc = rill__fail(err, RILL_EFORMAT, "%s has %d columns and %s has %d", paths[p], rill_df_ncolumns(parts[p]),
                      paths[0], nc);
      break;
    }
    for (int k = 0; rc == RILL_OK && k < nc; k++)
      if (!type_named(parts[p], rill_df_field(parts[0], k)->name))
        rc = rill__fail(err, RILL_EFORMAT, "%s has no column '%s' (%s has)", paths[p], rill_df_field(parts[0], k)->name,
                        paths[0]);
  }
  /* one type per column: the files' own, where they had values to infer it from (int64 in one
   * and float64 in another: float64); string where none had */
  rill_dtype_t* want = rill__calloc((size_t)nc + 1, sizeof *want);
  if (rc == RILL_OK && !want) rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory", who);
  for (int k = 0; rc == RILL_OK && k < nc; k++) {
    const char* name = rill_df_field(parts[0], k)->name;
    const rill_type_t* t0 = NULL;
    int p0 = -1;
    want[k] = RILL_STRING;
    for (int p = 0; rc == RILL_OK && p < npaths; p++) {
      const rill_type_t* t = type_named(parts[p], name);
      if (guessed(parts[p], name)) continue;
      if (!t0) {
        t0 = t;
        p0 = p;
        want[k] = t->dtype;
      } else if (!rill_type_equal(t, t0)) {
        if (widens(t) && widens(t0)) {
          want[k] = RILL_FLOAT64;
        } else {
          char s0[96], s1[96];
          rc = rill__fail(err, RILL_EFORMAT,
                          "column '%s' is %s in %s and %s in %s: give its type in the options (columns)", name,
                          rill_type_format(t0, s0, sizeof s0), paths[p0], rill_type_format(t, s1, sizeof s1),
                          paths[p]);
        }
      }
    }
  }
  /* files whose columns take other types (int64 widened to float64, a type taken from the
   * other files): the same input and row index, read with those types */
  for (int p = 0; rc == RILL_OK && p < npaths; p++) {
    rill__csv_t* c = rill__df_column_ctx(parts[p], 0);
    int n = 0;
    for (int k = 0; k < nc; k++) {
      int pk = rill_df_column(parts[p], rill_df_field(parts[0], k)->name);
      if (c->types[pk] != want[k]) c->types[pk] = want[k], n++;
    }
    if (n == 0) continue;
    rill_df_t* again = NULL;
    rc = csv_frame(c, &o, &again, err); /* the old dataframe, never iterated, goes */
    if (rc == RILL_OK) {
      rill_df_free(parts[p]);
      parts[p] = again;
    }
  }
  if (rc == RILL_OK) rc = rill__df_concat(parts, npaths, CSV_PART_ROWS, out, err);
  rill__free(want);
  for (int p = 0; p < npaths; p++) rill_df_free(parts[p]);
  rill__free(parts);
  return rc;
}

int rill_df_from_csv_buffer(const void* data, size_t size, const rill_csv_opts_t* opts,
                            rill_df_t** out, rill_error_t* err) {
  rill_csv_opts_t o = {0};
  if (opts) o = *opts;
  const char* name = o.name ? o.name : "<buffer>";
  if (!out || (!data && size))
    return rill__fail(err, RILL_EINVAL, "rill_df_from_csv_buffer: data and out are required");
  *out = NULL;
  rill__csv_t* c;
  int rc = csv_new(name, &o, &c, err);
  if (rc != RILL_OK) return rc;
  c->size = (int64_t)size;
  if (size == 0) {
    rc = rill__fail(err, RILL_EFORMAT, "%s: empty input (no header row)", name);
  } else if (o.borrow) {
    c->data = data;
  } else if (!(c->owned = rill__alloc(size))) {
    rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory copying %zu bytes", name, size);
  } else {
    memcpy(c->owned, data, size);
    c->data = c->owned;
  }
  if (rc == RILL_OK) rc = csv_open(c, &o, out, err);
  csv_unref(c);
  return rc;
}

int64_t rill_csv_bad_rows(const rill_df_t* df, rill_csv_bad_row_t* rows, int64_t cap, rill_error_t* err) {
  if (!df || cap < 0 || (cap > 0 && !rows))
    return rill__fail(err, RILL_EINVAL, "rill_csv_bad_rows: %s",
                      !df ? "the dataframe is NULL" : cap < 0 ? "cap is negative" : "rows is NULL with cap > 0");
  for (int k = 0; k < rill_df_ncolumns(df); k++) {
    if (rill__df_column_fn(df, k) != (rill__fn_t)csv_fill) continue;
    const rill__csv_t* c = rill__df_column_ctx(df, k);
    int64_t n = c->nbad_kept < cap ? c->nbad_kept : cap;
    if (n > 0) memcpy(rows, c->bad, (size_t)n * sizeof *rows);
    return c->nbad;
  }
  if (rill_df_concat_parts(df, NULL, 0) > 0)
    return rill__fail(err, RILL_EINVAL,
                      "rill_csv_bad_rows: the dataframe is a concatenation: ask each of its parts (rill_df_concat_parts)");
  return rill__fail(err, RILL_EINVAL, "rill_csv_bad_rows: no column of the dataframe is read from a CSV file");
}
