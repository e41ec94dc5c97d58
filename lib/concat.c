/* Concatenation (rill_df_concat): a dataframe whose rows are those of its parts one after
 * another. It is a dataframe of sources: one source group over every column, whose function
 * hands each call's rows to the sources of the parts that hold them (row r of the result is
 * row r - first[p] of part p). A call whose rows all lie in one part is passed on with the
 * engine's own output arrays (no copy); a call over several parts fills arrays of its own for
 * each part and copies their cells into place. */
#include <string.h>

#include "addon.h"
#include "stage.h"

typedef struct part {
  rill_df_t* df;
  int* col; /* col[i]: the part's column holding column i of the result */
  /* src[i], grp[i]: that column and its source group (NULL: none), read by every call over
   * the part without a walk through its dataframe (a shuffled batch over many files calls
   * each of them, and their dataframes' blocks are out of the cache by then) */
  const rill__column_t** src;
  const rill__srcgroup_t** grp;
  void** pctx; /* pctx[i]: the ctx of column i's prefetch hook (its source's or group's) */
} part_t;

struct concat;
typedef struct column_ref { /* the context of column i of the result (its lend hook's) */
  struct concat* cc;
  int i;
} column_ref_t;

typedef struct concat {
  int nparts, ncols;
  part_t* parts;
  int64_t* first; /* first[p]: the result's row of part p's row 0; first[nparts]: the rows */
  column_ref_t* refs;
} concat_t;

static void concat_free(void* ctx) {
  concat_t* cc = ctx;
  if (!cc) return;
  for (int p = 0; p < cc->nparts; p++) {
    if (cc->parts[p].df) {
      rill__df_freeze(cc->parts[p].df, -1);
      rill_df_free(cc->parts[p].df);
    }
    rill__free(cc->parts[p].col);
    rill__free(cc->parts[p].src);
    rill__free(cc->parts[p].grp);
    rill__free(cc->parts[p].pctx);
  }
  rill__free(cc->parts);
  rill__free(cc->first);
  rill__free(cc->refs);
  rill__free(cc);
}

/* The part holding row r: the last p with first[p] <= r (a part without rows shares its
 * first[] with the next one, so it is never the last). A shuffled read over many files asks
 * this for every row, in no order a branch predictor can follow: the search halves its range
 * with a conditional move, not a branch. */
static int part_of(const concat_t* cc, int64_t r) {
  const int64_t* first = cc->first;
  int lo = 0, n = cc->nparts;
  while (n > 1) {
    int half = n / 2;
    lo = first[lo + half] <= r ? lo + half : lo;
    n -= half;
  }
  return lo;
}

/* The result's column whose cells part p's column pc holds, or -1. */
static int result_column(const concat_t* cc, int p, int pc) {
  for (int i = 0; i < cc->ncols; i++)
    if (cc->parts[p].col[i] == pc) return i;
  return -1;
}

/* Calls the source of a part's column c, or its group's function (outs: the group's
 * outputs), with rows of the part; a RILL_STAGE_CPU_SERIAL source under the part's own lock
 * (the part may be read elsewhere too). */
static int call_source(const rill__column_t* c, const int64_t* rows, int64_t n, rill_array_t* const* outs,
                       rill_exec_t* exec, rill_error_t* err) {
  pthread_mutex_t* lock = NULL;
  if (c->opts.where == RILL_STAGE_CPU_SERIAL) lock = c->group ? &c->group->serial : (pthread_mutex_t*)&c->serial;
  if (lock) pthread_mutex_lock(lock);
  int rc = c->group ? c->group->fn(rows, n, outs, c->group->n, exec, c->group->ctx, err)
                    : c->source(rows, n, outs[0], exec, c->ctx, err);
  if (lock) pthread_mutex_unlock(lock);
  return rc;
}

/* Fills outs[i] (columns of the result; NULL: not needed) with the cells of part p's rows
 * local[0..k): one call of each source (or source group) of the part that holds a needed
 * column. The error convention of the part's functions, with err->column a column of the
 * result. */
static int fill_part(const concat_t* cc, int p, const int64_t* local, int64_t k, rill_array_t* const* outs,
                     rill_exec_t* exec, rill_error_t* err) {
  const part_t* pt = &cc->parts[p];
  uint8_t done[cc->ncols > 0 ? cc->ncols : 1];
  memset(done, 0, sizeof done);
  for (int i = 0; i < cc->ncols; i++) {
    if (!outs[i] || done[i]) continue;
    const rill__column_t* c = pt->src[i];
    rill_error_clear(err);
    int rc;
    const rill__srcgroup_t* g = pt->grp[i];
    if (g) {
      rill_array_t* gouts[g->n];
      memset(gouts, 0, sizeof gouts);
      for (int j = i; j < cc->ncols; j++) {
        if (!outs[j] || done[j] || pt->grp[j] != g) continue;
        gouts[pt->col[j] - g->first] = outs[j];
        done[j] = 1;
      }
      rc = call_source(c, local, k, gouts, exec, err);
      if (rc != RILL_OK) err->column = err->column >= 0 ? result_column(cc, p, g->first + err->column) : -1;
    } else {
      done[i] = 1;
      rc = call_source(c, local, k, &outs[i], exec, err);
      if (rc != RILL_OK) err->column = i;
    }
    if (rc != RILL_OK) return rc;
  }
  return RILL_OK;
}

/* Whether cells [i, i + r) of a are all valid. */
static int all_valid(const rill_array_t* a, int64_t i, int64_t r) {
  if (!a->validity || a->null_count == 0) return 1;
  for (int64_t t = i; t < i + r; t++)
    if (!rill__bit_get(a->validity, t)) return 0;
  return 1;
}

/* Copies cells [0, k) of dst from cell at[j] of src[sof[j]] (arrays of the same type; a
 * variable-length dst is filled in order). A part's cells are numbered in the order they come
 * (at[j] counts up within each part), so a run of cells of one part (a call in row order that
 * crosses parts) is a block of its array, copied as one. RILL_OK or RILL_ENOMEM. */
static int gather(rill_array_t* dst, rill_array_t* const* src, const int* sof, const int64_t* at, int64_t k,
                  int64_t cell) {
  uint8_t* d = dst->data;
  for (int64_t j = 0, r; j < k; j += r) {
    const rill_array_t* a = src[sof[j]];
    int64_t i = at[j];
    for (r = 1; j + r < k && sof[j + r] == sof[j];) r++;
    int rc = RILL_OK;
    if (cell > 0) { /* fixed cells: the bytes, then the nulls (whose bytes are zeroed) */
      memcpy(d + j * cell, (const uint8_t*)a->data + i * cell, (size_t)(r * cell));
      if (!all_valid(a, i, r))
        for (int64_t t = 0; t < r && rc == RILL_OK; t++)
          if (!rill__bit_get(a->validity, i + t)) rc = rill_array_set_null(dst, j + t);
    } else if (!a->shapes) { /* blocks of valid cells (offsets rebased, bytes in one copy), and the nulls */
      for (int64_t t = 0, e; t < r && rc == RILL_OK; t = e) {
        int nulls = a->validity && a->null_count > 0;
        for (e = t; e < r && (!nulls || rill__bit_get(a->validity, i + e));) e++;
        int64_t base = dst->offsets[j + t], from = a->offsets[i + t], nb = a->offsets[i + e] - from;
        if (e > t && (rc = rill_array_reserve(dst, base + nb)) == RILL_OK) {
          if (nb) memcpy((uint8_t*)dst->data + base, (const uint8_t*)a->data + from, (size_t)nb);
          for (int64_t u = t + 1; u <= e; u++) dst->offsets[j + u] = base + a->offsets[i + u] - from;
          rc = rill__array_var_commit(dst, j + e);
        }
        if (rc == RILL_OK && e < r && (rc = rill_array_set_var(dst, j + e, NULL, 0, NULL)) == RILL_OK)
          rc = rill_array_set_null(dst, j + e++);
      }
    } else { /* cells with shapes of their own, one by one */
      for (int64_t t = 0; t < r && rc == RILL_OK; t++) {
        int valid = !a->validity || rill__bit_get(a->validity, i + t);
        rill__cell_t v;
        rill__cell_view(a, i + t, &v);
        rc = rill_array_set_var(dst, j + t, valid ? v.data : NULL, valid ? v.nbytes : 0, v.shape);
        if (rc == RILL_OK && !valid) rc = rill_array_set_null(dst, j + t);
      }
    }
    if (rc != RILL_OK) return rc;
  }
  return RILL_OK;
}

/* A calling thread's arrays for the parts of its calls over several parts, emptied and kept
 * between calls (a shuffled read of a dataset in many files makes a call per file touched in
 * every batch: arrays of a shared pool cost more in its lock than the call's own work). A
 * call takes the arrays it needs off the stack and puts them back when done, so a part that
 * is itself a concatenation gets arrays of its own. */
typedef struct spare {
  rill_array_t** a;
  int64_t n, cap;
  int64_t bytes; /* the buffers of those arrays together */
} spare_t;

#define SPARE_KEEP_BYTES ((int64_t)256 << 10)  /* an array holding more is freed, not kept */
#define SPARE_KEEP_TOTAL ((int64_t)16 << 20)   /* a thread keeps at most this much */

static void spare_destroy(void* p) {
  spare_t* s = p;
  for (int64_t i = 0; i < s->n; i++) rill_array_release(s->a[i]);
  rill__free(s->a);
}

static const rill__scratch_kind_t spare_kind = {sizeof(spare_t), spare_destroy};

/* A standalone array for a part's cells: a spare one of this thread, or a new one. */
static int spare_take(spare_t* s, rill_array_t** out) {
  if (s && s->n > 0) {
    *out = s->a[--s->n];
    s->bytes -= rill__array_capacity(*out);
    return RILL_OK;
  }
  return rill__array_create(NULL, (rill_device_t){RILL_DEVICE_CPU, 0}, out);
}

/* Gives array a back to this thread's spares, or frees it. */
static void spare_give(spare_t* s, rill_array_t* a) {
  if (!a) return;
  int64_t b;
  if (s && rill__array_recycle(a, SPARE_KEEP_BYTES) && s->bytes + (b = rill__array_capacity(a)) <= SPARE_KEEP_TOTAL) {
    rill_array_t** v = rill__grow(s->a, &s->cap, s->n, s->n + 1, sizeof *v, 64);
    if (v) {
      s->a = v;
      s->a[s->n++] = a;
      s->bytes += b;
      return;
    }
  }
  rill_array_release(a);
}

/* The calls over parts used[0..nu) (part used[u] gets rows local[start[u]..start[u+1])) wait
 * for memory row by row: over 400 CSV files, a call's split of each row waited for its offset
 * in the index, then for its text. Before the call over part u, the parts' prefetch hooks (of
 * the first column asked for) ask for the text of part u + AHEAD_PARTS's rows and for the
 * offsets of part u + 2 * AHEAD_PARTS's, so that those waits overlap the calls between. */
enum { AHEAD_PARTS = 2 };

static int first_asked(const concat_t* cc, rill_array_t* const* outs) {
  int i = 0;
  while (i < cc->ncols && !outs[i]) i++;
  return i;
}

static void prefetch_part(const concat_t* cc, int i, const int* used, int nu, const int64_t* start,
                          const int64_t* local, int u, int step) {
  if (u >= nu || i >= cc->ncols) return;
  const part_t* pt = &cc->parts[used[u]];
  if (pt->src[i]->prefetch) pt->src[i]->prefetch(pt->pctx[i], local + start[u], start[u + 1] - start[u], step);
}

/* A call whose rows lie in several parts: one call per part that holds some of them, into
 * arrays of its own, then the cells copied into outs. A part that fails at one of its cells
 * stops there; the cells of the result before the first such cell (over every part) are kept
 * and that cell is reported. */
static int fill_mixed(const concat_t* cc, const int64_t* rows, int64_t n, rill_array_t* const* outs,
                      rill_exec_t* exec, rill_error_t* err) {
  int np = cc->nparts, nc = cc->ncols, nu = 0;
  int64_t most = n < np ? n : np; /* parts the call can touch */
  rill_array_t* pouts[nc]; /* nc >= 1 */
  int* slot = rill__calloc((size_t)np, sizeof *slot); /* part p: 1 + its index among the parts of the call */
  int* used = rill__alloc(sizeof *used * (size_t)most); /* the parts of the call, in the order met */
  int* sof = rill__alloc(sizeof *sof * (size_t)n);      /* cell i: the index of its part among those */
  int64_t* start = rill__calloc((size_t)most + 1, sizeof *start); /* by part index: [start[u], start[u+1]) */
  int64_t* at = rill__alloc(sizeof *at * (size_t)n);         /* cell i: its index in its part's call */
  int64_t* buf = rill__alloc(sizeof *buf * (size_t)(3 * n)); /* by part: local rows, result rows, cells */
  rill_array_t** tmp = NULL;
  spare_t* spare = rill__scratch(&spare_kind); /* NULL (out of memory): arrays made and freed */
  int rc = RILL_OK;
  int64_t bad = n; /* the first failed cell of the call */
  rill_error_t first_err;
  rill_error_clear(&first_err);
  if (!slot || !used || !sof || !start || !at || !buf) {
    rc = rill_error_set(err, RILL_ENOMEM, "out of memory splitting the rows among the parts");
    goto out;
  }
  /* the cells grouped by part, in their order: a counting sort over the parts they lie in */
  for (int64_t i = 0; i < n; i++) {
    int p = part_of(cc, rows[i]);
    if (!slot[p]) used[nu] = p, slot[p] = ++nu;
    sof[i] = slot[p] - 1;
    at[i] = start[sof[i] + 1]++;
  }
  for (int u = 0; u < nu; u++) start[u + 1] += start[u];
  int64_t *local = buf, *ids = buf + n, *cells = buf + 2 * n;
  for (int64_t i = 0; i < n; i++) {
    int64_t q = start[sof[i]] + at[i];
    local[q] = rows[i] - cc->first[used[sof[i]]];
    ids[q] = exec->rows[i];
    cells[q] = i;
  }
  if (!(tmp = rill__calloc((size_t)nu * (size_t)nc, sizeof *tmp))) {
    rc = rill_error_set(err, RILL_ENOMEM, "out of memory splitting the rows among the parts");
    goto out;
  }
  int pi = first_asked(cc, outs);
  for (int u = 0; u < 2 * AHEAD_PARTS; u++) prefetch_part(cc, pi, used, nu, start, local, u, 0);
  for (int u = 0; u < AHEAD_PARTS; u++) prefetch_part(cc, pi, used, nu, start, local, u, 1);
  for (int u = 0; u < nu && rc == RILL_OK; u++) {
    prefetch_part(cc, pi, used, nu, start, local, u + 2 * AHEAD_PARTS, 0);
    prefetch_part(cc, pi, used, nu, start, local, u + AHEAD_PARTS, 1);
    int64_t b = start[u], k = start[u + 1] - b;
    for (int i = 0; i < nc; i++) {
      pouts[i] = NULL;
      if (!outs[i]) continue;
      if (spare_take(spare, &tmp[u * nc + i]) != RILL_OK) {
        rc = rill_error_set(err, RILL_ENOMEM, "out of memory for a part's cells");
        goto out;
      }
      pouts[i] = tmp[u * nc + i];
    }
    rill_exec_t sub = *exec; /* the result's row ids of these cells: generators stay per row */
    sub.rows = ids + b;
    sub.n = k;
    rill_error_t e;
    int r = fill_part(cc, used[u], local + b, k, pouts, &sub, &e);
    if (r != RILL_OK) {
      int64_t cell = cells[b + (e.row >= 0 && e.row < k ? e.row : 0)]; /* the part's failed cell, in the call */
      if (cell < bad) {
        bad = cell;
        first_err = e;
        first_err.code = r;
      }
    }
  }
  rill_array_t** src = NULL;
  if (rc == RILL_OK && !(src = rill__alloc(sizeof *src * (size_t)nu)))
    rc = rill_error_set(err, RILL_ENOMEM, "out of memory copying the cells");
  for (int i = 0; i < nc && rc == RILL_OK; i++) {
    if (!outs[i]) continue;
    rill_type_t ty = cc->parts[0].src[i]->field.type;
    if ((rc = rill_exec_alloc(exec, outs[i], ty, n)) == RILL_OK) {
      for (int u = 0; u < nu; u++) src[u] = tmp[u * nc + i];
      rc = gather(outs[i], src, sof, at, bad, rill_type_cell_bytes(&ty));
    }
    if (rc != RILL_OK) rill_error_set(err, rc, "out of memory copying the cells");
  }
  rill__free(src);
  if (rc != RILL_OK) goto out;
  if (bad < n) {
    *err = first_err;
    err->row = bad;
    rc = first_err.code;
  }
out:
  if (tmp)
    for (int64_t q = 0; q < (int64_t)nu * nc; q++) spare_give(spare, tmp[q]);
  rill__free(tmp);
  rill__free(buf);
  rill__free(at);
  rill__free(start);
  rill__free(sof);
  rill__free(used);
  rill__free(slot);
  return rc;
}

static int concat_fill(const int64_t* rows, int64_t n, rill_array_t* const* outs, int nouts, rill_exec_t* exec,
                       void* ctx, rill_error_t* err) {
  const concat_t* cc = ctx;
  (void)nouts;
  if (n == 0) return fill_part(cc, 0, rows, 0, outs, exec, err);
  int p = part_of(cc, rows[0]);
  int64_t lo = cc->first[p], hi = cc->first[p + 1];
  int64_t i = 1;
  while (i < n && rows[i] >= lo && rows[i] < hi) i++;
  if (i < n) return fill_mixed(cc, rows, n, outs, exec, err);
  if (lo == 0) return fill_part(cc, p, rows, n, outs, exec, err);
  int64_t* local = rill__alloc(sizeof *local * (size_t)n);
  if (!local) return rill_error_set(err, RILL_ENOMEM, "out of memory for the rows of a part");
  for (int64_t j = 0; j < n; j++) local[j] = rows[j] - lo;
  int rc = fill_part(cc, p, local, n, outs, exec, err);
  rill__free(local);
  return rc;
}

/* Rows [start, start + n) of column i lent by the part that holds them all, when its source
 * lends them (a memory source: no copy through a concatenation either); else RILL_ENOTSUP. */
static int concat_lend(void* ctx, int64_t start, int64_t n, rill_array_t** out) {
  const column_ref_t* ref = ctx;
  const concat_t* cc = ref->cc;
  int p = part_of(cc, start);
  if (start + n > cc->first[p + 1]) return RILL_ENOTSUP;
  const rill__column_t* c = cc->parts[p].src[ref->i];
  if (!c->lend || c->opts.where != RILL_STAGE_CPU) return RILL_ENOTSUP;
  return c->lend(c->ctx, start - cc->first[p], n, out);
}

static const char* policy_name(rill_on_error_t p) {
  return p == RILL_ON_ERROR_SKIP ? "skip" : p == RILL_ON_ERROR_NULL ? "null" : "raise";
}

/* What to do instead, in the messages below: "<verb> the sources<tail>". */
typedef struct instead {
  const char *verb, *tail;
} instead_t;
static const instead_t CONCATENATE = {"concatenate", ""}, SIDE_BY_SIDE = {"put", " side by side"};

/* RILL_EINVAL when part p of `who` is a derived dataframe. */
static int part_is_read(const char* who, instead_t how, const rill_df_t* d, int p, rill_error_t* err) {
  if (!d->parent) return RILL_OK;
  return rill__fail(err, RILL_EINVAL,
                    "%s: part %d is a derived dataframe (a view, batch or reduce): %s the dataframes read from their "
                    "sources%s, then derive from the result",
                    who, p, how.verb, how.tail);
}

/* RILL_EINVAL when column c of part p is not a source, RILL_ENOTSUP when it is computed on a
 * CUDA device. */
static int column_is_source(const char* who, instead_t how, const rill__column_t* c, int p, rill_error_t* err) {
  if (c->kind != RILL__COL_SOURCE)
    return rill__fail(err, RILL_EINVAL,
                      "%s: column '%s' of part %d is a map, not a source: %s the sources%s, then map the result", who,
                      c->field.name, p, how.verb, how.tail);
  if (c->opts.where == RILL_STAGE_CUDA)
    return rill__fail(err, RILL_ENOTSUP, "%s: column '%s' of part %d is computed on a CUDA device", who,
                      c->field.name, p);
  return RILL_OK;
}

/* Checks part p against part 0 and fills its column map; the result's column i is part 0's
 * column i. */
static int match_part(concat_t* cc, int p, rill_error_t* err) {
  static const char who[] = "rill_df_concat";
  const rill_df_t* d = cc->parts[p].df;
  const rill_df_t* d0 = cc->parts[0].df;
  int rc = part_is_read(who, CONCATENATE, d, p, err);
  if (rc != RILL_OK) return rc;
  if (d->ncols != cc->ncols)
    return rill__fail(err, RILL_EINVAL, "%s: part %d has %d columns and part 0 has %d", who, p, d->ncols, cc->ncols);
  const rill__column_t* c00 = d0->cols[0];
  for (int k = 0; k < d->ncols; k++) {
    const rill__column_t* c = d->cols[k];
    if ((rc = column_is_source(who, CONCATENATE, c, p, err)) != RILL_OK) return rc;
    if (c->opts.on_error != c00->opts.on_error)
      return rill__fail(err, RILL_EINVAL,
                        "%s: column '%s' of part %d handles errors by '%s' and column '%s' of part 0 by '%s': the "
                        "parts' sources must handle errors alike",
                        who, c->field.name, p, policy_name(c->opts.on_error), c00->field.name,
                        policy_name(c00->opts.on_error));
  }
  for (int i = 0; i < cc->ncols; i++) {
    const rill_field_t* f0 = &d0->cols[i]->field;
    int k = 0;
    while (k < d->ncols && strcmp(d->cols[k]->field.name, f0->name) != 0) k++;
    if (k == d->ncols)
      return rill__fail(err, RILL_EINVAL, "%s: part %d has no column '%s' (part 0 has)", who, p, f0->name);
    const rill_field_t* f = &d->cols[k]->field;
    if (!rill_type_equal(&f->type, &f0->type)) {
      char t0[96], t1[96];
      return rill__fail(err, RILL_EINVAL, "%s: column '%s' is %s in part 0 and %s in part %d", who, f0->name,
                        rill_type_format(&f0->type, t0, sizeof t0), rill_type_format(&f->type, t1, sizeof t1), p);
    }
    cc->parts[p].col[i] = k;
    cc->parts[p].src[i] = d->cols[k];
    cc->parts[p].grp[i] = d->cols[k]->group;
    cc->parts[p].pctx[i] = d->cols[k]->group ? d->cols[k]->group->ctx : d->cols[k]->ctx;
  }
  return RILL_OK;
}

enum { GRAIN_MAX = 65536 }; /* rows a task of rill__df_concat's spread grain takes at most */

int rill_df_concat(rill_df_t* const* parts, int nparts, rill_df_t** out, rill_error_t* err) {
  return rill__df_concat(parts, nparts, 0, out, err);
}

int rill__df_concat(rill_df_t* const* parts, int nparts, int64_t part_rows, rill_df_t** out, rill_error_t* err) {
  static const char who[] = "rill_df_concat";
  if (!out) return rill__fail(err, RILL_EINVAL, "%s: out is NULL", who);
  *out = NULL;
  if (!parts || nparts < 1) return rill__fail(err, RILL_EINVAL, "%s: %d parts (at least 1)", who, nparts);
  for (int p = 0; p < nparts; p++)
    if (!parts[p]) return rill__fail(err, RILL_EINVAL, "%s: part %d is NULL", who, p);
  if (parts[0]->ncols == 0) return rill__fail(err, RILL_EINVAL, "%s: part 0 has no columns", who);
  concat_t* cc = rill__calloc(1, sizeof *cc);
  if (!cc) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", who);
  cc->ncols = parts[0]->ncols;
  cc->parts = rill__calloc((size_t)nparts, sizeof *cc->parts);
  cc->first = rill__calloc((size_t)nparts + 1, sizeof *cc->first);
  int rc = cc->parts && cc->first ? RILL_OK : rill__fail(err, RILL_ENOMEM, "%s: out of memory", who);
  for (int p = 0; rc == RILL_OK && p < nparts; p++) {
    cc->parts[p].df = parts[p];
    rill__df_retain(parts[p]);
    rill__df_freeze(parts[p], 1); /* columns added later would not be in the result */
    cc->nparts = p + 1;
    part_t* pt = &cc->parts[p];
    pt->col = rill__calloc((size_t)cc->ncols + 1, sizeof *pt->col);
    pt->src = rill__calloc((size_t)cc->ncols + 1, sizeof *pt->src);
    pt->grp = rill__calloc((size_t)cc->ncols + 1, sizeof *pt->grp);
    pt->pctx = rill__calloc((size_t)cc->ncols + 1, sizeof *pt->pctx);
    if (!pt->col || !pt->src || !pt->grp || !pt->pctx)
      rc = rill__fail(err, RILL_ENOMEM, "%s: out of memory", who);
    else rc = match_part(cc, p, err);
    if (rc == RILL_OK && parts[p]->rows > INT64_MAX - cc->first[p])
      rc = rill__fail(err, RILL_ERANGE, "%s: the parts hold more than 2^63 rows together", who);
    if (rc == RILL_OK) cc->first[p + 1] = cc->first[p] + parts[p]->rows;
  }
  if (rc != RILL_OK) {
    concat_free(cc);
    return rc;
  }
  int64_t rows = cc->first[nparts];
  const rill_df_t* d0 = parts[0];
  const char* names[cc->ncols];
  rill_type_t types[cc->ncols];
  int nullable[cc->ncols];
  rill_stage_opts_t o = {.where = RILL_STAGE_CPU, .on_error = d0->cols[0]->opts.on_error};
  for (int i = 0; i < cc->ncols; i++) {
    names[i] = d0->cols[i]->field.name;
    types[i] = d0->cols[i]->field.type;
    nullable[i] = 0;
    for (int p = 0; p < nparts; p++) {
      const rill__column_t* c = cc->parts[p].src[i];
      nullable[i] |= c->field.nullable;
      if (c->opts.grain > o.grain) o.grain = c->opts.grain;
    }
  }
  if (part_rows > 0) { /* tasks of about part_rows rows a part, at most GRAIN_MAX rows */
    int64_t spread = part_rows > GRAIN_MAX / nparts ? GRAIN_MAX : part_rows * nparts;
    if (o.grain < spread) o.grain = spread;
  }
  rill_df_t* df = NULL;
  rc = rill__df_new_source_group(rows, names, types, nullable, cc->ncols, concat_fill, cc, concat_free, &o, &df, err);
  if (rc != RILL_OK) return rc;
  /* columns whose parts all lend their rows lend them too; their own context names them */
  cc->refs = rill__calloc((size_t)cc->ncols, sizeof *cc->refs);
  for (int i = 0; cc->refs && i < cc->ncols; i++) {
    int all = 1;
    for (int p = 0; p < nparts; p++) all &= cc->parts[p].src[i]->lend != NULL;
    cc->refs[i] = (column_ref_t){cc, i};
    if (!all) continue;
    df->cols[i]->ctx = &cc->refs[i];
    df->cols[i]->lend = concat_lend;
  }
  df->kind = RILL__DF_CONCAT;
  df->kept_hash = rill__hash_i64(cc->first, nparts + 1); /* the parts' row counts */
  *out = df;
  return RILL_OK;
}

int rill_df_concat_parts(const rill_df_t* df, rill_df_t** parts, int cap) {
  if (!df || df->kind != RILL__DF_CONCAT) return 0;
  const concat_t* cc = df->cols[0]->group->ctx; /* the group comes first; columns added later follow it */
  for (int p = 0; parts && p < cap && p < cc->nparts; p++) {
    rill__df_retain(cc->parts[p].df);
    parts[p] = cc->parts[p].df;
  }
  return cc->nparts;
}

/* ---------------------------------------------------------------- side by side */

/* A source, or a source group, of a part of rill_df_concat_columns, made a source (group) of
 * the result: called with the result's rows, which are the part's. */
typedef struct piece {
  rill_df_t* part; /* kept alive and frozen */
  const rill__column_t* col; /* the part's column (a group's first) */
  int k;                     /* its index there */
} piece_t;

static void piece_free(void* ctx) {
  piece_t* pc = ctx;
  if (!pc) return;
  rill__df_freeze(pc->part, -1);
  rill_df_free(pc->part);
  rill__free(pc);
}

static int piece_group_fill(const int64_t* rows, int64_t n, rill_array_t* const* outs, int nouts, rill_exec_t* exec,
                            void* ctx, rill_error_t* err) {
  (void)nouts; /* the group's, as in the part: err->column is within the group, as here */
  return call_source(((const piece_t*)ctx)->col, rows, n, outs, exec, err);
}

static int piece_source_fill(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* exec, void* ctx,
                             rill_error_t* err) {
  return call_source(((const piece_t*)ctx)->col, rows, n, &out, exec, err);
}

static int piece_lend(void* ctx, int64_t start, int64_t n, rill_array_t** out) {
  const rill__column_t* c = ((const piece_t*)ctx)->col;
  return c->lend(c->ctx, start, n, out);
}

int rill__df_side_column(const rill__column_t* c, const rill_df_t** part, int* column) {
  const piece_t* pc;
  if (c->group && c->group->fn == piece_group_fill) pc = c->group->ctx;
  else if (!c->group && c->source == piece_source_fill) pc = c->ctx;
  else return 0;
  *part = pc->part;
  *column = pc->k + (c->group ? c->gi : 0);
  return 1;
}

/* Part p's column k (a source, or the first of a source group) added to df as it is there:
 * name(s), type(s), nullability and stage options (CPU_SERIAL kept by the part's lock). */
static int add_piece(rill_df_t* df, rill_df_t* part, int p, int k, rill_error_t* err) {
  static const char who[] = "rill_df_concat_columns";
  const rill__column_t* c = part->cols[k];
  int n = c->group ? c->group->n : 1, rc = column_is_source(who, SIDE_BY_SIDE, c, p, err);
  for (int j = 0; rc == RILL_OK && j < n; j++) { /* the names of the columns it fills are free */
    const char* name = part->cols[k + j]->field.name;
    if (rill_df_column(df, name) >= 0)
      rc = rill__fail(err, RILL_EINVAL, "%s: the column name '%s' of part %d is taken by an earlier part", who, name, p);
  }
  if (rc != RILL_OK) return rc;
  piece_t* pc = rill__calloc(1, sizeof *pc);
  if (!pc) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", who);
  pc->part = part;
  pc->col = c;
  pc->k = k;
  rill__df_retain(part);
  rill__df_freeze(part, 1);
  rill_stage_opts_t o = c->opts;
  if (o.where == RILL_STAGE_CPU_SERIAL) o.where = RILL_STAGE_CPU;
  if (!c->group) {
    o.nullable = c->field.nullable;
    int i = rill_df_add_source(df, c->field.name, c->field.type, piece_source_fill, pc, piece_free, &o, err);
    if (i >= 0 && c->lend && c->opts.where == RILL_STAGE_CPU) df->cols[i]->lend = piece_lend;
    return i < 0 ? i : RILL_OK;
  }
  const rill__srcgroup_t* g = c->group;
  const char* names[g->n];
  rill_type_t types[g->n];
  int nullable[g->n];
  for (int j = 0; j < g->n; j++) {
    const rill__column_t* m = part->cols[g->first + j];
    names[j] = m->field.name;
    types[j] = m->field.type;
    nullable[j] = m->field.nullable;
  }
  int i = rill__df_add_source_group(df, names, types, nullable, g->n, piece_group_fill, pc, piece_free, &o, err);
  return i < 0 ? i : RILL_OK;
}

int rill_df_concat_columns(rill_df_t* const* parts, int nparts, rill_df_t** out, rill_error_t* err) {
  static const char who[] = "rill_df_concat_columns";
  if (!out) return rill__fail(err, RILL_EINVAL, "%s: out is NULL", who);
  *out = NULL;
  if (!parts || nparts < 1) return rill__fail(err, RILL_EINVAL, "%s: %d parts (at least 1)", who, nparts);
  for (int p = 0; p < nparts; p++) {
    if (!parts[p]) return rill__fail(err, RILL_EINVAL, "%s: part %d is NULL", who, p);
    int rc = part_is_read(who, SIDE_BY_SIDE, parts[p], p, err);
    if (rc != RILL_OK) return rc;
    if (parts[p]->rows != parts[0]->rows)
      return rill__fail(err, RILL_EINVAL, "%s: part %d has %lld rows and part 0 has %lld", who, p,
                        (long long)parts[p]->rows, (long long)parts[0]->rows);
  }
  rill_df_t* df = NULL;
  int rc = rill_df_new(parts[0]->rows, &df, err);
  for (int p = 0; rc == RILL_OK && p < nparts; p++)
    for (int k = 0; rc == RILL_OK && k < parts[p]->ncols; k++) {
      const rill__column_t* c = parts[p]->cols[k];
      if (c->group && c->gi > 0) continue; /* added with its group's first column */
      rc = add_piece(df, parts[p], p, k, err);
    }
  if (rc == RILL_OK && df->ncols == 0) rc = rill__fail(err, RILL_EINVAL, "%s: the parts have no columns", who);
  if (rc != RILL_OK) {
    rill_df_free(df);
    return rc;
  }
  *out = df;
  return RILL_OK;
}
