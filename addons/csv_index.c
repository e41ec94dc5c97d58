/* The CSV row index: the byte offset of every record, found by a parallel pass when the
 * input is opened, and line-number checkpoints for messages.
 *
 * The input is cut into chunks whose boundaries sit just after a '\n' (one that an escape
 * character does not make text). At such a point the parser is either at the start of a
 * record or inside a quoted field, so each chunk is scanned
 * from the start-of-record state on worker threads; a chunk that follows one ending inside
 * quotes is scanned again from the quoted state while stitching (rare), and that second scan
 * stops as soon as it starts a record where the first one did (from there they agree).
 * Stitching the chunks in order picks, for each, the scan that matches the state the previous
 * chunk ended in. The index is those scans' lists of record starts, 4 bytes a row, in blocks
 * of rows (see rill__csv_t.blocks); only blocks that span chunks are copied. */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "csv_internal.h"

#define CSV_DEFAULT_CHUNK (8 << 20)

/* ------------------------------------------------------------------ line numbers */

/* Counts the physical line breaks that end in [a, b). */
static int64_t count_breaks(const char* d, int64_t size, int64_t a, int64_t b) {
  int64_t n = 0;
  for (int64_t i = a; i < b; i++) n += rill__csv_break_at(d, size, i);
  return n;
}


int64_t rill__csv_line(rill__csv_t* c, int64_t off) {
  pthread_mutex_lock(&c->mu);
  if (!c->lines) {
    int64_t n = (c->size >> RILL__CSV_LINE_STEP_SHIFT) + 1;
    int64_t* l = rill__alloc((size_t)n * sizeof *l);
    if (l) {
      l[0] = 1;
      for (int64_t k = 1; k < n; k++)
        l[k] = l[k - 1] + count_breaks(c->data, c->size, (k - 1) << RILL__CSV_LINE_STEP_SHIFT,
                                       k << RILL__CSV_LINE_STEP_SHIFT);
      c->lines = l;
      c->nlines = n;
    }
  }
  pthread_mutex_unlock(&c->mu);
  if (!c->lines) return 1 + count_breaks(c->data, c->size, 0, off);
  int64_t k = off >> RILL__CSV_LINE_STEP_SHIFT;
  if (k >= c->nlines) k = c->nlines - 1;
  return c->lines[k] + count_breaks(c->data, c->size, k << RILL__CSV_LINE_STEP_SHIFT, off);
}

/* ------------------------------------------------------------------ the parallel pass */

typedef struct index_job {
  const rill__csv_t* csv;
  const char* d;
  int64_t* bounds;            /* nchunks + 1 */
  int64_t nchunks;
  const rill__csv_dialect_t* dia;
  int64_t expected;
  rill__csv_spec_t* out;                /* scan from the start of a record */
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
    rill__csv_rows_t* st = &job->out[k].starts;
    if (job->sample > 0 && job->sample_lines > 0) {
      int64_t est = (int64_t)((double)(e - b) * (double)job->sample_lines / (double)job->sample);
      est += est / 16;
      if (est > (e - b) / 16) est = (e - b) / 16;
      if (est > 1024 && est > st->cap && (st->v = rill__alloc((size_t)est * sizeof *st->v)) != NULL)
        st->cap = est;
    }
    rill__csv_scan_chunk(job->d, b, e, 0, job->dia, job->expected, &job->out[k], NULL);
    rill__csv_drop(job->csv, b, e);
  }
  return NULL;
}


/* Chunk k's starts without the bad records (its own, and those of `xbad` from *x on, which
 * holds the bad records that span chunks): a new list in place of the old. */
static int drop_bad(rill__csv_spec_t* s, const rill__csv_vec_t* xbad, int64_t* x) {
  int64_t n = s->starts.n;
  if (n == 0) return RILL_OK;
  int64_t hi = rill__csv_rows_at(&s->starts, n - 1);
  while (*x < xbad->n && xbad->v[*x] < rill__csv_rows_at(&s->starts, 0)) *x += 2;
  if (!s->bad.n && !(*x < xbad->n && xbad->v[*x] <= hi)) return RILL_OK;
  rill__csv_rows_t kept = {.base = s->starts.base};
  int64_t b = 0;
  for (int64_t r = 0; r < n; r++) {
    int64_t pos = rill__csv_rows_at(&s->starts, r);
    if (b < s->bad.n && s->bad.v[b] == pos) { b += 2; continue; }
    while (*x < xbad->n && xbad->v[*x] < pos) *x += 2;
    if (*x < xbad->n && xbad->v[*x] == pos) { *x += 2; continue; }
    if (rill__csv_rows_push(&kept, pos) != RILL_OK) {
      rill__free(kept.v);
      rill__free(kept.far.v);
      return RILL_ENOMEM;
    }
  }
  rill__free(s->starts.v);
  rill__free(s->starts.far.v);
  s->starts = kept;
  return RILL_OK;
}

/* The row index from the picked scans of the chunks: rows are numbered in chunk order, and a
 * block of rows that lies inside one chunk points into that chunk's list of starts (kept, not
 * copied: no second pass over the rows and no fresh memory for them); a block that spans
 * chunks, or whose chunk keeps offsets aside, is copied into c->held[0]. With `skip`, bad
 * records are first dropped from the chunks that hold them. The lists kept move to c->held. */
static int place_rows(rill__csv_t* c, rill__csv_spec_t** pick, int64_t nch, const rill__csv_vec_t* xbad, int skip,
                      rill_error_t* err) {
  const int64_t bsize = (int64_t)1 << RILL__CSV_BLOCK_SHIFT;
  int64_t x = 0, nrows = 0, ncopy = 0;
  int64_t* first = rill__alloc((size_t)(nch + 1) * sizeof *first); /* first[k]: chunk k's first row */
  char* kept = rill__calloc((size_t)nch + 1, 1);                     /* kept[k]: a block points into chunk k */
  if (!first || !kept) goto nomem;
  for (int64_t k = 0; k < nch; k++) {
    if (skip && drop_bad(pick[k], xbad, &x) != RILL_OK) goto nomem;
    first[k] = nrows;
    nrows += pick[k]->starts.n;
  }
  first[nch] = nrows;
  /* block b holds rows [b * bsize, b * bsize + len): inside chunk k, or copied */
#define BLOCK_AT(b, k, r0, len, direct)                                                             \
  int64_t r0 = (b) << RILL__CSV_BLOCK_SHIFT, len = nrows - r0 < bsize ? nrows - r0 : bsize;        \
  while (first[(k) + 1] <= r0) (k)++;                                                              \
  int direct = pick[k]->starts.far.n == 0 && r0 + len <= first[(k) + 1]
  for (int64_t b = 0, k = 0; b << RILL__CSV_BLOCK_SHIFT < nrows; b++) {
    BLOCK_AT(b, k, r0, len, direct);
    if (direct) kept[k] = 1;
    else ncopy++;
  }
  for (int64_t k = 0; k < nch; k++) { /* a list grown by doubling may be half empty: trimmed */
    rill__csv_rows_t* st = &pick[k]->starts;
    if (kept[k] && st->cap - st->n > st->n / 8) {
      uint32_t* v = rill__realloc(st->v, (size_t)st->n * sizeof *v, (size_t)st->n * sizeof *v);
      if (v) {
        st->v = v;
        st->cap = st->n;
      }
    }
  }
  c->blocks = rill__calloc((size_t)(nrows >> RILL__CSV_BLOCK_SHIFT) + 1, sizeof *c->blocks);
  c->held = rill__calloc((size_t)nch + 1, sizeof *c->held);
  uint32_t* side = ncopy ? rill__alloc((size_t)(ncopy << RILL__CSV_BLOCK_SHIFT) * sizeof *side) : NULL;
  if (!c->blocks || !c->held || (ncopy && !side)) {
    rill__free(side);
    goto nomem;
  }
  c->held[c->nheld++] = side;
  rill__csv_vec_t far = {0};
  for (int64_t b = 0, k = 0, w = 0; b << RILL__CSV_BLOCK_SHIFT < nrows; b++) {
    BLOCK_AT(b, k, r0, len, direct);
    const rill__csv_rows_t* st = &pick[k]->starts;
    if (direct) {
      c->blocks[b].base = st->base;
      c->blocks[b].off = st->v + (r0 - first[k]);
      continue;
    }
    uint32_t* o = side + (w++ << RILL__CSV_BLOCK_SHIFT);
    int64_t base = rill__csv_rows_at(st, r0 - first[k]);
    c->blocks[b].base = base;
    c->blocks[b].off = o;
    for (int64_t i = 0, kk = k; i < len; i++) {
      while (first[kk + 1] <= r0 + i) kk++;
      int64_t pos = rill__csv_rows_at(&pick[kk]->starts, r0 + i - first[kk]);
      uint64_t d = (uint64_t)(pos - base);
      if (d >= RILL__CSV_FAR_AT) {
        if (rill__csv_vec_push(&far, r0 + i) != RILL_OK || rill__csv_vec_push(&far, pos) != RILL_OK) {
          c->far = far.v; /* freed with c */
          goto nomem;
        }
        d = RILL__CSV_FAR;
      }
      o[i] = (uint32_t)d;
    }
  }
#undef BLOCK_AT
  for (int64_t k = 0; k < nch; k++)
    if (kept[k]) {
      c->held[c->nheld++] = pick[k]->starts.v;
      pick[k]->starts.v = NULL;
    }
  c->far = far.v;
  c->nfar = far.n / 2;
  c->nrows = nrows;
  rill__free(first);
  rill__free(kept);
  return RILL_OK;
nomem:
  rill__free(first);
  rill__free(kept);
  return rill__fail(err, RILL_ENOMEM, "%s: out of memory for the row index (%lld rows)", c->name, (long long)nrows);
}

/* Keeps the number of bad rows and the lines of the first RILL_CSV_BAD_ROWS_KEPT, in file
 * order, for rill_csv_bad_rows. The chunks' lists (pairs: record start, fields) are each in
 * file order and so is their concatenation; `xbad` (records spanning chunks) is merged in. */
static int keep_bad_rows(rill__csv_t* c, rill__csv_spec_t* const* pick, int64_t nch, const rill__csv_vec_t* xbad,
                         int64_t nbad, rill_error_t* err) {
  int64_t keep = nbad < RILL_CSV_BAD_ROWS_KEPT ? nbad : RILL_CSV_BAD_ROWS_KEPT;
  c->bad = rill__alloc((size_t)keep * sizeof *c->bad);
  if (!c->bad) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", c->name);
  int64_t k = 0, i = 0, x = 0;
  for (int64_t n = 0; n < keep; n++) {
    while (k < nch && i >= pick[k]->bad.n) k++, i = 0;
    int from_x = x < xbad->n && (k >= nch || xbad->v[x] < pick[k]->bad.v[i]);
    if (!from_x && k >= nch) break; /* fewer pairs than counted: not expected */
    const int64_t* pair = from_x ? xbad->v + x : pick[k]->bad.v + i;
    c->bad[n] = (rill_csv_bad_row_t){.line = rill__csv_line(c, pair[0]), .fields = pair[1]};
    c->nbad_kept = n + 1;
    if (from_x) x += 2;
    else i += 2;
  }
  c->nbad = nbad;
  return RILL_OK;
}

_Atomic int64_t rill__csv_index_passes = 0;

int rill__csv_build_index(rill__csv_t* c, int64_t begin, int64_t expected, const rill_csv_opts_t* o,
                          rill_error_t* err) {
  atomic_fetch_add(&rill__csv_index_passes, 1);
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
    /* after a line break that no escape character makes text */
    for (int64_t from = nominal; from < c->size;) {
      const char* p = memchr(c->data + from, '\n', (size_t)(c->size - from));
      if (!p) break;
      from = p - c->data + 1;
      if (!rill__csv_escaped(c->data, pos, from - 1, c->dia.esc)) {
        b = from;
        break;
      }
    }
    bounds[++nch] = b;
    /* finding the boundary mapped the pages around it; where the page cache holds large
     * folios (a file another program read with read()) a touch maps a whole folio, up to
     * 2 MB, so the boundaries of a 1 GB file kept 260 MB resident until their chunks were
     * scanned. Handed back at once (the chunk's scan maps them again): nothing else is
     * being read while the boundaries are found. */
    const int64_t around = 4 << 20;
    rill__csv_drop(c, nominal - around > begin ? nominal - around : begin, b + around < c->size ? b + around : c->size);
    pos = b;
  }
  rill__csv_spec_t* out = rill__calloc((size_t)(nch ? nch : 1), sizeof *out);
  rill__csv_spec_t* in = rill__calloc((size_t)(nch ? nch : 1), sizeof *in);
  int rc = RILL_OK;
  if (!out || !in) {
    rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory for the row index", c->name);
    goto done;
  }
  index_job_t job = {.csv = c, .d = c->data, .bounds = bounds, .nchunks = nch, .dia = &c->dia,
                     .expected = expected, .out = out};
  /* a file of one chunk needs no guess: its list grows as it is scanned (a small file's
   * lines would be read once more for nothing) */
  job.sample = nch < 2 ? 0 : span < ((int64_t)1 << 20) ? span : ((int64_t)1 << 20);
  for (const char *p = c->data + begin, *pe = p + job.sample; p < pe && (p = memchr(p, '\n', (size_t)(pe - p))); p++)
    job.sample_lines++;
  atomic_init(&job.next, 0);
  int nthreads = o->threads > 0 ? o->threads : rill__ncores();
  rill__run_threads(nthreads < nch ? nthreads : (int)nch, index_worker, &job);

  /* stitch: pick each chunk's scan from the state the previous one ended in */
  int64_t nbad = 0;
  int inq = 0;
  int64_t open_start = -1, open_nf = 0; /* a record spanning chunk boundaries */
  rill__csv_vec_t xbad = {0};                     /* bad records that span chunks: start, fields */
  rill__csv_spec_t** pick = rill__calloc((size_t)(nch ? nch : 1), sizeof *pick);
  if (!pick) {
    rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory for the row index", c->name);
    goto done;
  }
  for (int64_t k = 0; k < nch; k++) {
    /* the previous chunk ended inside quotes: rescan this one from there (rare, so done here
     * rather than for every chunk up front) */
    if (inq && out[k].rc == RILL_OK)
      rill__csv_scan_chunk(c->data, bounds[k], bounds[k + 1], 1, &c->dia, expected, &in[k], &out[k]);
    rill__csv_spec_t* s = inq ? &in[k] : &out[k];
    if (out[k].rc != RILL_OK || s->rc != RILL_OK) {
      rill__free(pick);
      rill__free(xbad.v);
      rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory for the row index", c->name);
      goto done;
    }
    if (inq) {
      open_nf += s->head_nf;
      if (s->head_done) {
        if (open_nf != expected && (rill__csv_vec_push(&xbad, open_start) != RILL_OK || rill__csv_vec_push(&xbad, open_nf) != RILL_OK)) {
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
    nbad += s->bad.n / 2;
    inq = s->end_in_quotes;
  }
  nbad += xbad.n / 2;
  if (inq) {
    int64_t last = -1;
    for (int64_t k = nch - 1; k >= 0 && last < 0; k--)
      if (pick[k]->starts.n) last = rill__csv_rows_at(&pick[k]->starts, pick[k]->starts.n - 1);
    rill__free(pick);
    rill__free(xbad.v);
    rc = rill__fail(err, RILL_EFORMAT, "%s:%lld: unterminated quoted field", c->name,
                    (long long)rill__csv_line(c, last < 0 ? begin : last));
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
                    (long long)rill__csv_line(c, at), (long long)expected, (long long)nf);
    goto done;
  }
  rc = place_rows(c, pick, nch, &xbad, o->on_bad_row == RILL_ON_ERROR_SKIP && nbad, err);
  if (rc == RILL_OK && nbad) rc = keep_bad_rows(c, pick, nch, &xbad, nbad, err);
  rill__free(pick);
  rill__free(xbad.v);
done:
  for (int64_t k = 0; out && in && k < nch; k++) {
    rill__free(out[k].starts.v);
    rill__free(out[k].starts.far.v);
    rill__free(out[k].bad.v);
    rill__free(in[k].starts.v);
    rill__free(in[k].starts.far.v);
    rill__free(in[k].bad.v);
  }
  rill__free(out);
  rill__free(in);
  rill__free(bounds);
  return rc;
}
