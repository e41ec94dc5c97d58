/* CSV source: RFC 4180 parsing over a memory-mapped file or a buffer, a parallel index of
 * row starts built when the file is opened, type inference over a sample, and cells parsed
 * lazily when an iterator pulls their rows.
 *
 * Index pass: the input is cut into chunks whose boundaries sit just after a '\n'. At such a
 * point the parser is either at the start of a record or inside a quoted field, so each chunk
 * is scanned twice (speculatively) from both states, in parallel; the second scan stops as
 * soon as it starts a record where the first one did (from there they agree). Stitching the
 * chunks in order picks, for each, the scan that matches the state the previous chunk ended
 * in. The index holds one int64 (byte offset) per row. */
#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"
#include "rill_addons.h"
#include "text.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#define CSV_SIMD 1
#else
#define CSV_SIMD 0
#endif

#define CSV_DEFAULT_INFER 1000
#define CSV_DEFAULT_CHUNK (8 << 20)
#define CSV_LINE_STEP_SHIFT 16 /* line-number checkpoints every 64 KiB */

/* ------------------------------------------------------------------ the CSV object */

/* The fields of the rows of one call, split once and shared by the calls of the other
 * columns on the same rows (read-only once ready). */
typedef struct csv_cache {
  struct csv_cache* next;
  int users;                  /* calls reading or filling it */
  int ready;                  /* filled */
  int64_t n, cap;             /* rows held (-1: invalid) / capacity */
  int64_t* rows;              /* the key: row ids of the call that filled it */
  int64_t* spans;             /* n * ncols * 2 byte offsets: field start, end */
  int64_t* nfields;           /* fields found in each row */
} csv_cache_t;

typedef struct csv {
  _Atomic int refs;
  char* name;
  const char* data;
  int64_t size;
  void* map;                  /* mmap'ed region or NULL */
  int fd;                     /* the mapped file (size checks), or -1 */
  void* owned;                /* copied buffer or NULL */
  char delim, quote;
  int ncols;
  char** names;
  rill_dtype_t* types;
  int64_t nrows;
  int64_t* starts;
  rill_on_error_t on_error;
  pthread_mutex_t mu;
  pthread_cond_t cv;          /* a cache became ready */
  int waiters;                /* threads waiting on cv */
  csv_cache_t* caches;
  int64_t* lines;             /* lines[k]: physical line at byte k << CSV_LINE_STEP_SHIFT */
  int64_t nlines;
  _Atomic int64_t drop_mark;  /* mapped bytes below it were handed back to the page cache */
} csv_t;

/* Hands the mapped pages inside [a, b) back to the kernel: the mapping is private, read-only
 * and file-backed, so a later access maps them again from the file. Keeps the resident set
 * of a sequential pass small. No-op for buffers. */
static void csv_drop(const csv_t* c, int64_t a, int64_t b) {
  if (!c->map) return;
  int64_t page = 4096;
  a = (a + page - 1) & ~(page - 1);
  b &= ~(page - 1);
  if (b > a) madvise((char*)c->map + a, (size_t)(b - a), MADV_DONTNEED);
}

static void csv_unref(csv_t* c) {
  if (!c || atomic_fetch_sub(&c->refs, 1) != 1) return;
  while (c->caches) {
    csv_cache_t* k = c->caches;
    c->caches = k->next;
    rill__free(k->rows);
    rill__free(k->spans);
    rill__free(k->nfields);
    rill__free(k);
  }
  rill__free_vec((void**)c->names, c->ncols);
  rill__free(c->types);
  rill__free(c->starts);
  rill__free(c->lines);
  if (c->map) munmap(c->map, (size_t)c->size);
  if (c->fd >= 0) close(c->fd);
  rill__free(c->owned);
  rill__free(c->name);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  rill__free(c);
}

/* Counts physical line breaks ('\n', "\r\n" or a lone '\r') in [a, b). */
static int64_t count_breaks(const char* d, int64_t size, int64_t a, int64_t b) {
  int64_t n = 0;
  for (int64_t i = a; i < b; i++) {
    char ch = d[i];
    if (ch == '\n') n++;
    else if (ch == '\r' && (i + 1 >= size || d[i + 1] != '\n')) n++;
  }
  return n;
}

/* The 1-based physical line holding byte `off`. Builds checkpoints on first use. */
static int64_t csv_line(csv_t* c, int64_t off) {
  pthread_mutex_lock(&c->mu);
  if (!c->lines) {
    int64_t n = (c->size >> CSV_LINE_STEP_SHIFT) + 1;
    int64_t* l = rill__alloc((size_t)n * sizeof *l);
    if (l) {
      l[0] = 1;
      for (int64_t k = 1; k < n; k++)
        l[k] = l[k - 1] + count_breaks(c->data, c->size, (k - 1) << CSV_LINE_STEP_SHIFT,
                                       k << CSV_LINE_STEP_SHIFT);
      c->lines = l;
      c->nlines = n;
    }
  }
  pthread_mutex_unlock(&c->mu);
  if (!c->lines) return 1 + count_breaks(c->data, c->size, 0, off);
  int64_t k = off >> CSV_LINE_STEP_SHIFT;
  if (k >= c->nlines) k = c->nlines - 1;
  return c->lines[k] + count_breaks(c->data, c->size, k << CSV_LINE_STEP_SHIFT, off);
}

/* First position of byte `ch` in [i, end), or end (short quoted fields: no library call). */
static inline int64_t find_byte(const char* d, int64_t i, int64_t end, char ch) {
#if CSV_SIMD
  __m128i v = _mm_set1_epi8(ch);
  for (; i + 16 <= end; i += 16) {
    unsigned m = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i*)(d + i)), v));
    if (m) return i + __builtin_ctz(m);
  }
#endif
  for (; i < end; i++)
    if (d[i] == ch) return i;
  return end;
}

#if CSV_SIMD
/* Set bits of a byte, of a 16-bit mask (no popcnt instruction assumed). */
#define POP2(n) n, n + 1, n + 1, n + 2
#define POP4(n) POP2(n), POP2(n + 1), POP2(n + 1), POP2(n + 2)
#define POP6(n) POP4(n), POP4(n + 1), POP4(n + 1), POP4(n + 2)
static const uint8_t pop8[256] = {POP6(0), POP6(1), POP6(1), POP6(2)};
#undef POP2
#undef POP4
#undef POP6
static inline int pop16(unsigned x) { return pop8[x & 0xffu] + pop8[(x >> 8) & 0xffu]; }

/* 16-byte block masks: bit b set when byte b is the delimiter (*dm) / a line break or the
 * quote (return). */
static inline unsigned block_masks(const char* p, __m128i vdl, __m128i vq, unsigned* dm) {
  __m128i v = _mm_loadu_si128((const __m128i*)p);
  *dm = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, vdl));
  __m128i st = _mm_or_si128(_mm_cmpeq_epi8(v, vq),
                            _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\n')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\r'))));
  return (unsigned)_mm_movemask_epi8(st);
}

/* Unquoted bytes from `i` (a field start), 16 at a time while 16 are left before `end`:
 * each delimiter met ends a field (*nf counts them). Stops at the first line break or quote,
 * or where fewer than 16 bytes are left; returns that position, *fstart the start of the
 * field holding it. */
static int64_t count_unquoted(const char* d, int64_t i, int64_t end, char dl, char q, int64_t* nf,
                              int64_t* fstart) {
  __m128i vdl = _mm_set1_epi8(dl), vq = _mm_set1_epi8(q);
  int64_t fs = i;
  for (; i + 16 <= end; i += 16) {
    unsigned dm, stop = block_masks(d + i, vdl, vq, &dm);
    if (stop) dm &= (stop & (0u - stop)) - 1;
    if (dm) {
      *nf += pop16(dm);
      fs = i + (31 - __builtin_clz(dm)) + 1;
    }
    if (stop) {
      *fstart = fs;
      return i + __builtin_ctz(stop);
    }
  }
  *fstart = fs;
  return i;
}
#endif

/* Splits the record at `pos` into fields: up to `max` (start, end) byte spans go to `sp`;
 * returns the number of fields; *next = offset after the record's line end. */
static int64_t split_record(const char* d, int64_t size, int64_t pos, char dl, char q, int64_t* sp,
                            int64_t max, int64_t* next) {
  int64_t nf = 0, i = pos;
#if CSV_SIMD
  __m128i vdl = _mm_set1_epi8(dl), vq = _mm_set1_epi8(q);
#endif
  for (;;) {
    int64_t fs = i;
#if CSV_SIMD
    /* whole unquoted fields from 16-byte masks; a quote or the last bytes go on below */
    for (; i + 16 <= size; i += 16) {
      unsigned dm, stop = block_masks(d + i, vdl, vq, &dm);
      if (stop) dm &= (stop & (0u - stop)) - 1;
      for (; dm; dm &= dm - 1) {
        int64_t e = i + __builtin_ctz(dm);
        if (nf < max) { sp[2 * nf] = fs; sp[2 * nf + 1] = e; }
        nf++;
        fs = e + 1;
      }
      if (stop) {
        i += __builtin_ctz(stop);
        break;
      }
    }
    if (i < fs) i = fs;
    if (i < size && d[i] != q) {
      /* a line break ends the record here; else a literal quote or the tail: bytes below */
      if (d[i] == '\n' || d[i] == '\r') {
        if (nf < max) { sp[2 * nf] = fs; sp[2 * nf + 1] = i; }
        nf++;
        if (d[i] == '\r' && i + 1 < size && d[i + 1] == '\n') i += 2;
        else i++;
        *next = i;
        return nf;
      }
    }
#endif
    if (i == fs && i < size && d[i] == q) {
      i++;
      for (;;) {
        int64_t p = find_byte(d, i, size, q);
        if (p == size) { i = size; break; }
        i = p + 1;
        if (i < size && d[i] == q) { i++; continue; }
        break;
      }
    }
    while (i < size && d[i] != dl && d[i] != '\n' && d[i] != '\r') i++;
    if (nf < max) { sp[2 * nf] = fs; sp[2 * nf + 1] = i; }
    nf++;
    if (i >= size) { *next = size; return nf; }
    if (d[i] == dl) { i++; continue; }
    if (d[i] == '\r' && i + 1 < size && d[i + 1] == '\n') i += 2;
    else i++;
    *next = i;
    return nf;
  }
}

/* The text of field [s, e): quotes removed and doubled quotes undone. Uses *scratch only
 * when the bytes must change. Returns RILL_OK or RILL_ENOMEM. */
static int unescape(const char* d, int64_t s, int64_t e, char q, char** scratch, size_t* cap,
                    const char** out, size_t* n) {
  if (s == e || d[s] != q) { *out = d + s; *n = (size_t)(e - s); return RILL_OK; }
  const char* p = memchr(d + s + 1, q, (size_t)(e - s - 1));
  if (!p) { *out = d + s + 1; *n = (size_t)(e - s - 1); return RILL_OK; } /* unterminated */
  if (p == d + e - 1) { *out = d + s + 1; *n = (size_t)(e - s - 2); return RILL_OK; }
  size_t need = (size_t)(e - s);
  if (*cap < need) {
    char* nb = rill__alloc(need);
    if (!nb) return RILL_ENOMEM;
    rill__free(*scratch);
    *scratch = nb;
    *cap = need;
  }
  char* w = *scratch;
  size_t k = 0;
  int64_t i = s + 1;
  while (i < e) {
    if (d[i] == q) {
      if (i + 1 < e && d[i + 1] == q) { w[k++] = q; i += 2; continue; }
      i++; /* closing quote: what follows is kept literally */
      while (i < e) w[k++] = d[i++];
      break;
    }
    w[k++] = d[i++];
  }
  *out = w;
  *n = k;
  return RILL_OK;
}

/* ------------------------------------------------------------------ index pass */

typedef struct vec {
  int64_t* v;
  int64_t n, cap;
} vec_t;

static int vec_grow(vec_t* a) {
  int64_t nc = a->cap ? a->cap * 2 : 1024;
  int64_t* nv = rill__realloc(a->v, (size_t)a->n * sizeof *nv, (size_t)nc * sizeof *nv);
  if (!nv) return RILL_ENOMEM;
  a->v = nv;
  a->cap = nc;
  return RILL_OK;
}

static inline int vec_push(vec_t* a, int64_t x) {
  if (a->n == a->cap && vec_grow(a) != RILL_OK) return RILL_ENOMEM;
  a->v[a->n++] = x;
  return RILL_OK;
}

typedef struct spec {
  vec_t starts;               /* record start offsets */
  vec_t bad;                  /* pairs: record start, field count (count != expected) */
  int end_in_quotes;          /* chunk ended inside a quoted field */
  int64_t tail_start, tail_nf; /* when it did: the open record's start (-1: before the chunk) and fields */
  int head_done;              /* scan from inside quotes: the record open at the start ended here */
  int64_t head_nf;            /* fields that open record gained in this chunk (beyond its first) */
  int rc;
} spec_t;

enum { S_START, S_FIELD, S_UNQ, S_Q, S_QQ };

static int is_nl(char c) { return c == '\n' || c == '\r'; }

/* Scans [begin, end) from `state`. With `ref` (the scan of the same chunk from S_START),
 * stops when a record starts where one of ref's does and takes ref's results from there. */
static void scan_chunk(const char* d, int64_t begin, int64_t end, int state, char dl, char q,
                       int64_t expected, spec_t* s, const spec_t* ref) {
  int st = state;
  int64_t i = begin, rec = -1, nf = 0, j = 0;
  s->rc = RILL_OK;
  s->head_done = 0;
  s->head_nf = 0;
  s->tail_start = -1;
  s->tail_nf = 0;
  while (i < end) {
    char c = d[i];
    switch (st) {
    case S_START:
      if (is_nl(c)) { i++; break; }
      if (ref) {
        while (j < ref->starts.n && ref->starts.v[j] < i) j++;
        if (j < ref->starts.n && ref->starts.v[j] == i) {
          for (int64_t k = j; k < ref->starts.n && s->rc == RILL_OK; k++)
            s->rc = vec_push(&s->starts, ref->starts.v[k]);
          for (int64_t k = 0; k < ref->bad.n && s->rc == RILL_OK; k += 2)
            if (ref->bad.v[k] >= i) {
              s->rc = vec_push(&s->bad, ref->bad.v[k]);
              if (s->rc == RILL_OK) s->rc = vec_push(&s->bad, ref->bad.v[k + 1]);
            }
          s->end_in_quotes = ref->end_in_quotes;
          s->tail_start = ref->tail_start;
          s->tail_nf = ref->tail_nf;
          return;
        }
      }
      rec = i;
      nf = 1;
      if (vec_push(&s->starts, i) != RILL_OK) { s->rc = RILL_ENOMEM; return; }
      st = S_FIELD;
      break;
    case S_FIELD:
#if CSV_SIMD
      if (c != q && c != dl && !is_nl(c) && i + 16 <= end) {
        int64_t fs;
        i = count_unquoted(d, i, end, dl, q, &nf, &fs); /* i > fs: c is a plain byte */
        if (i < end && is_nl(d[i])) {
          i++;
          goto record_end;
        }
        st = i == fs ? S_FIELD : S_UNQ;
        break;
      }
#endif
      i++;
      if (c == q) st = S_Q;
      else if (c == dl) nf++;
      else if (is_nl(c)) goto record_end;
      else st = S_UNQ;
      break;
    case S_UNQ:
      while (i < end && d[i] != dl && d[i] != '\n' && d[i] != '\r') i++;
      if (i == end) break;
      c = d[i++];
      if (c == dl) { nf++; st = S_FIELD; break; }
      goto record_end;
    case S_Q: {
      int64_t p = find_byte(d, i, end, q);
      if (p == end) { i = end; break; }
      i = p + 1;
      st = S_QQ;
      break;
    }
    default: /* S_QQ */
      i++;
      if (c == q) st = S_Q;
      else if (c == dl) { nf++; st = S_FIELD; }
      else if (is_nl(c)) goto record_end;
      else st = S_UNQ;
      break;
    }
    continue;
  record_end:
    if (rec < 0) {
      s->head_done = 1;
      s->head_nf = nf;
    } else if (nf != expected) {
      if (vec_push(&s->bad, rec) != RILL_OK || vec_push(&s->bad, nf) != RILL_OK) {
        s->rc = RILL_ENOMEM;
        return;
      }
    }
    st = S_START;
  }
  s->end_in_quotes = st == S_Q;
  if (st == S_Q) {
    if (rec >= 0) {
      s->tail_start = rec;
      s->tail_nf = nf;
    } else {
      s->head_nf = nf; /* the whole chunk is inside the open record */
    }
  } else if (st != S_START) {
    /* the last record, ended by the end of the input */
    if (rec < 0) {
      s->head_done = 1;
      s->head_nf = nf;
    } else if (nf != expected) {
      if (vec_push(&s->bad, rec) != RILL_OK || vec_push(&s->bad, nf) != RILL_OK) s->rc = RILL_ENOMEM;
    }
  }
}

typedef struct index_job {
  const csv_t* csv;
  const char* d;
  int64_t* bounds;            /* nchunks + 1 */
  int64_t nchunks;
  char dl, q;
  int64_t expected;
  spec_t* out;                /* scan from the start of a record */
  int64_t sample, sample_lines; /* bytes and line breaks of a leading sample: sizes the row lists */
  _Atomic int64_t next;
} index_job_t;

static void* index_worker(void* arg) {
  index_job_t* job = arg;
  for (;;) {
    int64_t k = atomic_fetch_add(&job->next, 1);
    if (k >= job->nchunks) break;
    int64_t b = job->bounds[k], e = job->bounds[k + 1];
    /* room for the rows the sample predicts (plus 1/16), at most half the chunk's bytes: the
     * list then rarely grows by copying; small guesses are left to the usual growth */
    vec_t* st = &job->out[k].starts;
    if (job->sample > 0 && job->sample_lines > 0) {
      int64_t est = (int64_t)((double)(e - b) * (double)job->sample_lines / (double)job->sample);
      est += est / 16;
      if (est > (e - b) / 16) est = (e - b) / 16;
      if (est > 1024 && est > st->cap && (st->v = rill__alloc((size_t)est * sizeof *st->v)) != NULL)
        st->cap = est;
    }
    scan_chunk(job->d, b, e, S_START, job->dl, job->q, job->expected, &job->out[k], NULL);
    csv_drop(job->csv, b, e);
  }
  return NULL;
}

/* Builds c->starts over [begin, size) honouring the bad-row policy. */
static int build_index(csv_t* c, int64_t begin, int64_t expected, const rill_csv_opts_t* o,
                       rill_error_t* err) {
  int64_t chunk = o->chunk_bytes > 0 ? o->chunk_bytes : CSV_DEFAULT_CHUNK;
  int64_t span = c->size - begin;
  int64_t maxchunks = span / chunk + 2;
  int64_t* bounds = rill__alloc((size_t)(maxchunks + 1) * sizeof *bounds);
  if (!bounds) return rill__fail(err, RILL_ENOMEM, "%s: out of memory for the row index", c->name);
  int64_t nch = 0;
  bounds[0] = begin;
  for (int64_t pos = begin; pos < c->size;) {
    int64_t nominal = pos + chunk;
    int64_t b = c->size;
    if (nominal < c->size) {
      const char* p = memchr(c->data + nominal, '\n', (size_t)(c->size - nominal));
      b = p ? p - c->data + 1 : c->size;
    }
    bounds[++nch] = b;
    pos = b;
  }
  spec_t* out = rill__calloc((size_t)(nch ? nch : 1), sizeof *out);
  spec_t* in = rill__calloc((size_t)(nch ? nch : 1), sizeof *in);
  int rc = RILL_OK;
  if (!out || !in) {
    rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory for the row index", c->name);
    goto done;
  }
  index_job_t job = {.csv = c, .d = c->data, .bounds = bounds, .nchunks = nch, .dl = c->delim,
                     .q = c->quote, .expected = expected, .out = out};
  job.sample = span < ((int64_t)1 << 20) ? span : ((int64_t)1 << 20);
  for (const char *p = c->data + begin, *pe = p + job.sample; p < pe && (p = memchr(p, '\n', (size_t)(pe - p))); p++)
    job.sample_lines++;
  atomic_init(&job.next, 0);
  int nthreads = o->threads > 0 ? o->threads : rill__ncores();
  if (nthreads > nch) nthreads = (int)nch;
  if (nthreads > 64) nthreads = 64;
  pthread_t tids[64];
  int started = 0;
  for (int t = 1; t < nthreads; t++) {
    if (pthread_create(&tids[started], NULL, index_worker, &job) != 0) break;
    started++;
  }
  index_worker(&job);
  for (int t = 0; t < started; t++) pthread_join(tids[t], NULL);

  /* stitch: pick each chunk's scan from the state the previous one ended in */
  int64_t total = 0, nbad = 0;
  int inq = 0;
  int64_t open_start = -1, open_nf = 0; /* a record spanning chunk boundaries */
  vec_t xbad = {0};                     /* bad records that span chunks: start, fields */
  spec_t** pick = rill__calloc((size_t)(nch ? nch : 1), sizeof *pick);
  if (!pick) {
    rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory for the row index", c->name);
    goto done;
  }
  for (int64_t k = 0; k < nch; k++) {
    /* the previous chunk ended inside quotes: rescan this one from there (rare, so done here
     * rather than for every chunk up front) */
    if (inq && out[k].rc == RILL_OK)
      scan_chunk(c->data, bounds[k], bounds[k + 1], S_Q, c->delim, c->quote, expected, &in[k], &out[k]);
    spec_t* s = inq ? &in[k] : &out[k];
    if (out[k].rc != RILL_OK || s->rc != RILL_OK) {
      rill__free(pick);
      rill__free(xbad.v);
      rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory for the row index", c->name);
      goto done;
    }
    if (inq) {
      open_nf += s->head_nf;
      if (s->head_done) {
        if (open_nf != expected && (vec_push(&xbad, open_start) != RILL_OK || vec_push(&xbad, open_nf) != RILL_OK)) {
          rill__free(pick);
          rill__free(xbad.v);
          rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory for the row index", c->name);
          goto done;
        }
        open_start = -1;
      }
    }
    if (s->end_in_quotes && s->tail_start >= 0) {
      open_start = s->tail_start;
      open_nf = s->tail_nf;
    }
    pick[k] = s;
    total += s->starts.n;
    nbad += s->bad.n / 2;
    inq = s->end_in_quotes;
  }
  nbad += xbad.n / 2;
  if (inq) {
    int64_t last = -1;
    for (int64_t k = nch - 1; k >= 0 && last < 0; k--)
      if (pick[k]->starts.n) last = pick[k]->starts.v[pick[k]->starts.n - 1];
    rill__free(pick);
    rill__free(xbad.v);
    rc = rill__fail(err, RILL_EFORMAT, "%s:%lld: unterminated quoted field", c->name,
                    (long long)csv_line(c, last < 0 ? begin : last));
    goto done;
  }
  if (nbad && o->on_bad_row == RILL_ON_ERROR_RAISE) {
    int64_t at = xbad.n ? xbad.v[0] : INT64_MAX, nf = xbad.n ? xbad.v[1] : 0;
    for (int64_t k = 0; k < nch; k++)
      if (pick[k]->bad.n && pick[k]->bad.v[0] < at) {
        at = pick[k]->bad.v[0];
        nf = pick[k]->bad.v[1];
        break;
      }
    rill__free(pick);
    rill__free(xbad.v);
    rc = rill__fail(err, RILL_EFORMAT, "%s:%lld: expected %lld fields, found %lld", c->name,
                    (long long)csv_line(c, at), (long long)expected, (long long)nf);
    goto done;
  }
  int skip = o->on_bad_row == RILL_ON_ERROR_SKIP;
  int64_t keep = skip ? total - nbad : total;
  c->starts = rill__alloc((size_t)(keep ? keep : 1) * sizeof *c->starts);
  if (!c->starts) {
    rill__free(pick);
    rill__free(xbad.v);
    rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory for the row index (%lld rows)", c->name,
                    (long long)keep);
    goto done;
  }
  int64_t w = 0, x = 0;
  for (int64_t k = 0; k < nch; k++) {
    spec_t* s = pick[k];
    if (!skip || (!s->bad.n && (x >= xbad.n || (s->starts.n && xbad.v[x] > s->starts.v[s->starts.n - 1])))) {
      if (s->starts.n) memcpy(c->starts + w, s->starts.v, (size_t)s->starts.n * sizeof *c->starts);
      w += s->starts.n;
    } else {
      int64_t b = 0;
      for (int64_t r = 0; r < s->starts.n; r++) {
        if (b < s->bad.n && s->bad.v[b] == s->starts.v[r]) { b += 2; continue; }
        while (x < xbad.n && xbad.v[x] < s->starts.v[r]) x += 2;
        if (x < xbad.n && xbad.v[x] == s->starts.v[r]) { x += 2; continue; }
        c->starts[w++] = s->starts.v[r];
      }
    }
    rill__free(s->starts.v);
    s->starts.v = NULL;
  }
  c->nrows = w;
  rill__free(pick);
  rill__free(xbad.v);
done:
  for (int64_t k = 0; out && in && k < nch; k++) {
    rill__free(out[k].starts.v);
    rill__free(out[k].bad.v);
    rill__free(in[k].starts.v);
    rill__free(in[k].bad.v);
  }
  rill__free(out);
  rill__free(in);
  rill__free(bounds);
  return rc;
}

/* ------------------------------------------------------------------ row cache and decoding */

/* A cache holding rows[0..n): *hit = 1 when already filled (wait for a fill in progress),
 * else a claimed entry keyed by `rows` that the caller fills and publishes. */
static csv_cache_t* cache_get(csv_t* c, const int64_t* rows, int64_t n, int* hit) {
  *hit = 0;
  pthread_mutex_lock(&c->mu);
  for (;;) {
    int filling = 0;
    csv_cache_t* free_one = NULL;
    for (csv_cache_t* k = c->caches; k; k = k->next) {
      if (k->n == n && memcmp(k->rows, rows, (size_t)n * sizeof *rows) == 0) {
        if (k->ready) {
          k->users++;
          *hit = 1;
          pthread_mutex_unlock(&c->mu);
          return k;
        }
        filling = 1;
      }
      if (!free_one && k->users == 0) free_one = k;
    }
    if (filling) {
      c->waiters++;
      pthread_cond_wait(&c->cv, &c->mu);
      c->waiters--;
      continue;
    }
    if (!free_one) {
      free_one = rill__calloc(1, sizeof *free_one);
      if (!free_one) break;
      free_one->n = -1;
      free_one->next = c->caches;
      c->caches = free_one;
    }
    csv_cache_t* k = free_one;
    k->n = -1;
    k->ready = 0;
    if (n > k->cap) {
      int64_t* nr = rill__alloc((size_t)n * sizeof *nr);
      int64_t* ns = rill__alloc((size_t)n * (size_t)c->ncols * 2 * sizeof *ns + 1);
      int64_t* nn = rill__alloc((size_t)n * sizeof *nn);
      if (!nr || !ns || !nn) {
        rill__free(nr); rill__free(ns); rill__free(nn);
        break;
      }
      rill__free(k->rows); rill__free(k->spans); rill__free(k->nfields);
      k->rows = nr; k->spans = ns; k->nfields = nn; k->cap = n;
    }
    memcpy(k->rows, rows, (size_t)n * sizeof *rows);
    k->n = n;
    k->users = 1;
    pthread_mutex_unlock(&c->mu);
    return k;
  }
  pthread_mutex_unlock(&c->mu);
  return NULL;
}

static void cache_put(csv_t* c, csv_cache_t* k) {
  pthread_mutex_lock(&c->mu);
  k->users--;
  pthread_mutex_unlock(&c->mu);
}

/* Splits the rows of a claimed cache and publishes it. */
static void cache_fill(csv_t* c, csv_cache_t* k) {
  int64_t stride = (int64_t)c->ncols * 2;
  for (int64_t i = 0; i < k->n; i++) {
    int64_t next;
    k->nfields[i] = split_record(c->data, c->size, c->starts[k->rows[i]], c->delim, c->quote,
                                 k->spans + i * stride, c->ncols, &next);
  }
  /* a pass moving forward drops the pages well behind it */
  if (c->map && k->n > 0) {
    const int64_t keep = 16 << 20, step = 64 << 20;
    int64_t lo = c->starts[k->rows[0]], mark = atomic_load(&c->drop_mark);
    if (lo - keep > mark + step && atomic_compare_exchange_strong(&c->drop_mark, &mark, lo - keep))
      csv_drop(c, mark, lo - keep);
  }
  pthread_mutex_lock(&c->mu);
  k->ready = 1;
  if (c->waiters) pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

typedef struct csv_col {
  csv_t* csv;
  int k;
} csv_col_t;

static void csv_col_free(void* p) {
  csv_col_t* col = p;
  if (!col) return;
  csv_unref(col->csv);
  rill__free(col);
}

/* Cells j0.. of column k of a ready cache as FLOAT64 / INT64 values into `o` (cell 0 of the
 * block), while they are plain: row complete, field unquoted and not empty, value parsed.
 * Returns the first j that is not (or bn): the general path decides about that cell. */
static int64_t plain_numbers(const csv_t* c, const csv_cache_t* cache, int k, rill_dtype_t dt, int64_t j0,
                             int64_t bn, void* o) {
  const char* d = c->data;
  const char qc = c->quote;
  const int64_t ncols = c->ncols, stride = ncols * 2, size = c->size;
  const int64_t* nfs = cache->nfields;
  const int64_t* sp = cache->spans + 2 * k;
  const int dbl = dt == RILL_FLOAT64;
  int64_t j = j0;
  for (; j < bn; j++) {
    int64_t nf = nfs[j];
    if (nf > ncols || k >= nf) break;
    int64_t fs = sp[j * stride], fe = sp[j * stride + 1];
    if (fs == fe || d[fs] == qc) break;
    const char* p = d + fs;
    size_t len = (size_t)(fe - fs);
    void* cell = dbl ? (void*)((double*)o + j) : (void*)((int64_t*)o + j);
    if (rill__parse_plain_decimal(p, len, size - fs, dbl, cell)) continue;
    if ((dbl ? rill__parse_double(p, len, cell) : rill__parse_int64(p, len, cell)) != RILL_OK) break;
  }
  return j;
}

/* A mapped file that shrank would raise SIGBUS on the first access to a page past its new
 * end: its size is checked before each call touches the mapping, and a shrink is an error
 * naming the file (the file must not change while the dataframe lives). */
static int csv_check_size(const csv_t* c, rill_error_t* err) {
  if (c->fd < 0) return RILL_OK;
  struct stat st;
  if (fstat(c->fd, &st) != 0)
    return rill_error_set(err, RILL_EIO, "%s: cannot check the file: %s", c->name, strerror(errno));
  if ((int64_t)st.st_size < c->size)
    return rill_error_set(err, RILL_EIO, "%s: the file shrank from %lld to %lld bytes while it was read "
                          "(a CSV file must not change while its dataframe lives)", c->name,
                          (long long)c->size, (long long)st.st_size);
  return RILL_OK;
}

static int csv_source(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* exec,
                      void* ctx, rill_error_t* err) {
  csv_col_t* col = ctx;
  csv_t* c = col->csv;
  int k = col->k;
  rill_dtype_t dt = c->types[k];
  for (int64_t i = 0; i < n; i++)
    if (rows[i] < 0 || rows[i] >= c->nrows)
      return rill__fail(err, RILL_EINVAL, "%s: row %lld out of range (%lld rows)", c->name,
                        (long long)rows[i], (long long)c->nrows);
  int rc = csv_check_size(c, err);
  if (rc != RILL_OK) return rc;
  rc = rill_exec_alloc(exec, out, rill_type_scalar(dt), n);
  if (rc != RILL_OK) return rill_error_set(err, rc, "%s: column '%s': cannot allocate %lld cells",
                                           c->name, c->names[k], (long long)n);
  char* scratch = NULL; /* unescaped bytes of fields with doubled quotes */
  size_t scratch_cap = 0;
  int64_t stride = (int64_t)c->ncols * 2;
  int64_t pos = 0; /* string bytes written */
  int64_t nulled = 0; /* cells nulled by the on_error / on_bad_row policy NULL */
  if (dt == RILL_STRING) {
    if (!out->offsets) return rill_error_set(err, RILL_EINVAL, "%s: column '%s': no offsets", c->name, c->names[k]);
    out->offsets[0] = 0;
  }
  /* rows go through the cache in blocks of at most ~1M field spans (16 MB) */
  int64_t blk = ((int64_t)1 << 20) / c->ncols;
  if (blk < 1) blk = 1;
  rc = RILL_OK;
  for (int64_t b0 = 0; b0 < n && rc == RILL_OK; b0 += blk) {
    int64_t bn = n - b0 < blk ? n - b0 : blk;
    int hit;
    csv_cache_t* cache = cache_get(c, rows + b0, bn, &hit);
    if (!cache) {
      rc = rill_error_set(err, RILL_ENOMEM, "%s: out of memory", c->name);
      break;
    }
    if (!hit) cache_fill(c, cache);
    if (dt == RILL_STRING) {
      /* the raw field spans bound the unescaped bytes: one reservation, then direct writes */
      int64_t bound = 0;
      for (int64_t j = 0; j < bn; j++)
        if (k < cache->nfields[j] && cache->nfields[j] <= c->ncols)
          bound += cache->spans[j * stride + 2 * k + 1] - cache->spans[j * stride + 2 * k];
      out->data_size = pos; /* reserve keeps the bytes in use */
      if ((rc = rill_array_reserve(out, pos + bound > 0 ? pos + bound : 1)) != RILL_OK) {
        cache_put(c, cache);
        rc = rill_error_set(err, rc, "%s: column '%s': cannot reserve %lld bytes", c->name, c->names[k],
                            (long long)(pos + bound));
        break;
      }
    }
    void* plain = dt == RILL_FLOAT64 ? (void*)((double*)out->data + b0)
                  : dt == RILL_INT64 ? (void*)((int64_t*)out->data + b0) : NULL;
    for (int64_t j = 0; j < bn && rc == RILL_OK; j++) {
      if (plain && (j = plain_numbers(c, cache, k, dt, j, bn, plain)) == bn) break;
      int64_t i = b0 + j;
      int64_t nf = cache->nfields[j];
      int is_null = nf > c->ncols || k >= nf; /* kept bad rows (policy NULL) */
      if (is_null) nulled++;
      const char* s = NULL;
      size_t len = 0;
      if (!is_null) {
        int64_t fs = cache->spans[j * stride + 2 * k], fe = cache->spans[j * stride + 2 * k + 1];
        if (fs == fe || c->data[fs] != c->quote) { /* unquoted: the bytes as they are */
          s = c->data + fs;
          len = (size_t)(fe - fs);
        } else if (unescape(c->data, fs, fe, c->quote, &scratch, &scratch_cap, &s, &len) != RILL_OK) {
          rc = rill_error_set(err, RILL_ENOMEM, "%s: out of memory", c->name);
          break;
        }
        if (dt != RILL_STRING && len == 0) is_null = 1;
      }
      if (dt == RILL_STRING) {
        if (!is_null && len) {
          memcpy((char*)out->data + pos, s, len);
          pos += (int64_t)len;
        }
        out->offsets[i + 1] = pos;
      } else if (!is_null) {
        int vrc;
        if (dt == RILL_FLOAT64) vrc = rill__parse_double(s, len, (double*)out->data + i);
        else if (dt == RILL_INT64) vrc = rill__parse_int64(s, len, (int64_t*)out->data + i);
        else vrc = rill__store_text(out, i, dt, s, len);
        if (vrc == RILL_ENOMEM) {
          rc = rill_error_set(err, vrc, "%s: out of memory", c->name);
          break;
        }
        if (vrc != RILL_OK) {
          if (c->on_error == RILL_ON_ERROR_NULL) {
            is_null = 1;
            nulled++;
          } else {
            int64_t line = csv_line(c, c->starts[rows[i]]);
            if (err) err->row = i;
            rc = rill_error_set(err, vrc, "%s:%lld: column '%s': %s '%.*s'%s %s %s", c->name,
                                (long long)line, c->names[k],
                                vrc == RILL_ERANGE ? "value" : "cannot parse",
                                (int)(len > 40 ? 40 : len), s, len > 40 ? "..." : "",
                                vrc == RILL_ERANGE ? (dt == RILL_FLOAT32 || dt == RILL_FLOAT64
                                                          ? "is out of range of" : "does not fit")
                                                   : "as",
                                rill_dtype_name(dt));
            break;
          }
        }
      }
      if (is_null && (rc = rill_array_set_null(out, i)) != RILL_OK) {
        rc = rill_error_set(err, rc, "%s: out of memory", c->name);
        break;
      }
    }
    cache_put(c, cache);
  }
  if (dt == RILL_STRING) {
    if (rc != RILL_OK) /* the cells after the failing one were not written */
      for (int64_t i = 0; i < n; i++)
        if (out->offsets[i + 1] < out->offsets[i]) out->offsets[i + 1] = out->offsets[i];
    out->data_size = out->offsets[n];
    out->priv->var_cells = n;
  }
  rill__free(scratch);
  rill__exec_count_nulled(exec, nulled);
  return rc;
}

/* ------------------------------------------------------------------ opening */

enum { T_INT = 1, T_FLOAT = 2, T_BOOL = 4, T_TS = 8, T_ALL = 15 };

static int infer_types(csv_t* c, int64_t limit, rill_error_t* err) {
  int* mask = rill__alloc((size_t)c->ncols * sizeof *mask);
  int* seen = rill__calloc((size_t)c->ncols, sizeof *seen);
  int64_t* sp = rill__alloc((size_t)c->ncols * 2 * sizeof *sp);
  char* scratch = NULL;
  size_t cap = 0;
  int rc = RILL_OK;
  if (!mask || !seen || !sp) {
    rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
    goto done;
  }
  for (int k = 0; k < c->ncols; k++) mask[k] = T_ALL;
  int64_t rows = limit < 0 || limit > c->nrows ? c->nrows : limit;
  for (int64_t r = 0; r < rows; r++) {
    int64_t next;
    int64_t nf = split_record(c->data, c->size, c->starts[r], c->delim, c->quote, sp, c->ncols, &next);
    if (nf > c->ncols) continue;
    for (int k = 0; k < nf; k++) {
      if (!mask[k] || c->types[k]) continue;
      const char* s;
      size_t n;
      if (unescape(c->data, sp[2 * k], sp[2 * k + 1], c->quote, &scratch, &cap, &s, &n) != RILL_OK) {
        rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
        goto done;
      }
      if (n == 0) continue;
      seen[k] = 1;
      int m = mask[k];
      int64_t iv;
      double dv;
      uint8_t bv;
      if ((m & T_INT) && rill__parse_int64(s, n, &iv) != RILL_OK) m &= ~T_INT;
      if ((m & T_FLOAT) && !(m & T_INT) && rill__parse_double(s, n, &dv) != RILL_OK) m &= ~T_FLOAT;
      if ((m & T_BOOL) && rill__parse_bool(s, n, 0, &bv) != RILL_OK) m &= ~T_BOOL;
      if ((m & T_TS) && rill_parse_timestamp(s, n, &iv) != RILL_OK) m &= ~T_TS;
      mask[k] = m;
    }
  }
  for (int k = 0; k < c->ncols; k++) {
    if (c->types[k]) continue;
    int m = seen[k] ? mask[k] : 0;
    c->types[k] = (m & T_INT) ? RILL_INT64 : (m & T_FLOAT) ? RILL_FLOAT64 : (m & T_BOOL) ? RILL_BOOL
                  : (m & T_TS) ? RILL_TIMESTAMP_US : RILL_STRING;
  }
done:
  rill__free(mask);
  rill__free(seen);
  rill__free(sp);
  rill__free(scratch);
  return rc;
}

/* 0 when the field [s, e) opens a quote that it never closes (it then ran to the end of the
 * input). */
static int quote_closed(const char* d, int64_t s, int64_t e, char q) {
  if (s == e || d[s] != q) return 1;
  for (int64_t i = s + 1; i < e;) {
    const char* p = memchr(d + i, q, (size_t)(e - i));
    if (!p) return 0;
    i = p - d + 1;
    if (i < e && d[i] == q) { i++; continue; } /* a doubled quote */
    return 1;
  }
  return 0;
}

/* Column names from the header record at `pos` (or generated); sets c->ncols and returns the
 * offset where data starts. */
static int read_header(csv_t* c, int64_t pos, int no_header, int64_t* data_begin, rill_error_t* err) {
  while (pos < c->size && is_nl(c->data[pos])) pos++;
  if (pos >= c->size) return rill__fail(err, RILL_EFORMAT, "%s: empty input (no header row)", c->name);
  int64_t next;
  int64_t nf = split_record(c->data, c->size, pos, c->delim, c->quote, NULL, 0, &next);
  if (nf > 100000)
    return rill__fail(err, RILL_EFORMAT, "%s:%lld: too many columns (%lld)", c->name,
                      (long long)csv_line(c, pos), (long long)nf);
  int64_t* sp = rill__alloc((size_t)nf * 2 * sizeof *sp);
  c->names = rill__calloc((size_t)nf, sizeof *c->names);
  c->types = rill__calloc((size_t)nf, sizeof *c->types);
  if (!sp || !c->names || !c->types) {
    rill__free(sp);
    return rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
  }
  c->ncols = (int)nf;
  split_record(c->data, c->size, pos, c->delim, c->quote, sp, nf, &next);
  for (int k = 0; !no_header && k < c->ncols; k++)
    if (!quote_closed(c->data, sp[2 * k], sp[2 * k + 1], c->quote)) {
      int64_t line = csv_line(c, sp[2 * k]);
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
    if (!no_header && unescape(c->data, sp[2 * k], sp[2 * k + 1], c->quote, &scratch, &cap, &s, &n) != RILL_OK) {
      rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
      break;
    }
    char base[64];
    if (no_header || n == 0) {
      snprintf(base, sizeof base, "column_%d", k);
      s = base;
      n = strlen(base);
    }
    char* name = rill__alloc(n + 1);
    if (!name) { rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name); break; }
    memcpy(name, s, n);
    name[n] = 0;
    c->names[k] = name;
  }
  rill__free(scratch);
  rill__free(sp);
  if (rc == RILL_OK && rill__unique_names(c->names, c->ncols, '.') != RILL_OK)
    rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
  *data_begin = no_header ? pos : next;
  return rc;
}

static int apply_overrides(csv_t* c, const rill_csv_opts_t* o, rill_error_t* err) {
  for (int i = 0; i < o->ncolumns; i++) {
    const rill_csv_column_t* ov = &o->columns[i];
    int k = -1;
    if (ov->name) {
      for (int j = 0; j < c->ncols && k < 0; j++)
        if (strcmp(c->names[j], ov->name) == 0) k = j;
      if (k < 0)
        return rill__fail(err, RILL_EINVAL, "%s: type override for unknown column '%s'", c->name,
                          ov->name);
    } else {
      if (ov->index < 0 || ov->index >= c->ncols)
        return rill__fail(err, RILL_EINVAL, "%s: type override for column index %d (the file has %d columns)",
                          c->name, ov->index, c->ncols);
      k = ov->index;
    }
    if (!rill__text_dtype_supported(ov->dtype))
      return rill__fail(err, RILL_ENOTSUP, "%s: column '%s': dtype %s is not supported for CSV",
                        c->name, c->names[k], rill_dtype_name(ov->dtype));
    c->types[k] = ov->dtype;
  }
  return RILL_OK;
}

static int csv_open(csv_t* c, const rill_csv_opts_t* o, rill_df_t** out, rill_error_t* err) {
  int rc;
  int64_t pos = 0, data_begin = 0;
  if (c->size >= 3 && memcmp(c->data, "\xEF\xBB\xBF", 3) == 0) pos = 3;
  if ((rc = read_header(c, pos, o->no_header, &data_begin, err)) != RILL_OK) return rc;
  if ((rc = build_index(c, data_begin, c->ncols, o, err)) != RILL_OK) return rc;
  if ((rc = apply_overrides(c, o, err)) != RILL_OK) return rc;
  if (o->no_infer)
    for (int k = 0; k < c->ncols; k++)
      if (!c->types[k]) c->types[k] = RILL_STRING;
  if ((rc = infer_types(c, o->infer_rows ? o->infer_rows : CSV_DEFAULT_INFER, err)) != RILL_OK)
    return rc;
  rill_df_t* df = NULL;
  if ((rc = rill_df_new(c->nrows, &df, err)) != RILL_OK) return rc;
  for (int k = 0; k < c->ncols; k++) {
    csv_col_t* col = rill__alloc(sizeof *col);
    if (!col) {
      rill_df_free(df);
      return rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
    }
    atomic_fetch_add(&c->refs, 1);
    col->csv = c;
    col->k = k;
    /* tasks of up to 1024 rows (fewer for wide rows): a task's rows are split once and shared
     * by every column */
    int64_t grain = ((int64_t)1 << 20) / c->ncols;
    rill_stage_opts_t so = {.where = RILL_STAGE_CPU, .on_error = o->on_error,
                            .grain = grain > 1024 ? 1024 : grain < 1 ? 1 : grain};
    so.nullable = c->types[k] != RILL_STRING || o->on_error == RILL_ON_ERROR_NULL ||
                  o->on_bad_row == RILL_ON_ERROR_NULL;
    rc = rill_df_add_source(df, c->names[k], rill_type_scalar(c->types[k]), csv_source, col,
                            csv_col_free, &so, err);
    if (rc < 0) {
      rill_df_free(df);
      return rc;
    }
  }
  *out = df;
  return RILL_OK;
}

static int csv_new(const char* name, const rill_csv_opts_t* o, csv_t** out, rill_error_t* err) {
  if (o->delimiter == '\n' || o->delimiter == '\r' || o->quote == '\n' || o->quote == '\r' ||
      (o->delimiter ? o->delimiter : ',') == (o->quote ? o->quote : '"'))
    return rill__fail(err, RILL_EINVAL, "%s: the delimiter and quote must differ and not be line breaks", name);
  if (o->ncolumns < 0 || (o->ncolumns > 0 && !o->columns))
    return rill__fail(err, RILL_EINVAL, "%s: ncolumns %d without columns", name, o->ncolumns);
  csv_t* c = rill__calloc(1, sizeof *c);
  if (!c) return rill__fail(err, RILL_ENOMEM, "out of memory");
  c->name = rill__strdup(name);
  if (!c->name) {
    rill__free(c);
    return rill__fail(err, RILL_ENOMEM, "out of memory");
  }
  atomic_init(&c->refs, 1);
  c->fd = -1;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  c->delim = o->delimiter ? o->delimiter : ',';
  c->quote = o->quote ? o->quote : '"';
  c->on_error = o->on_error;
  *out = c;
  return RILL_OK;
}

/* Reads `fd` until EOF into c->owned (c->data, c->size). */
static int read_to_end(int fd, csv_t* c, rill_error_t* err) {
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
  csv_t* c;
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
  c->fd = fd; /* kept to notice a file that shrinks while it is read */
  c->data = c->map;
  rc = csv_open(c, &o, out, err);
fail:
  csv_unref(c);
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
  csv_t* c;
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
