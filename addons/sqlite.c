/* SQLite source: a query (with bound parameters) or a table as a dataframe.
 *
 * A bare table name is read by rowid on demand: opening counts the rows and, when the rowids
 * are not one contiguous range, keeps the sorted rowid list (8 bytes per row); each pull fetches
 * the rows it needs (a range scan for consecutive rows, point lookups otherwise) on a
 * connection of its own, so concurrent readers never share a connection. Point lookups cost a
 * B-tree descent per row (2.6 us at 1M rows, more as the table grows), ten times a sequential
 * read: once out-of-order pulls have fetched 1/256 of the rows (a shuffled pass), a table that
 * fits `table_hold_bytes` is read once, sequentially, into compact row records in memory
 * (see held_t) and every later pull gathers from there. Any other query is
 * run once at open and its raw values are kept in chunks of `chunk_rows` rows; values are
 * converted to the column types when pulled, so conversion errors carry their row. The columns
 * are one source group: a pull reads its rows once and fills every requested column. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "addon.h"
#include "rill_addons.h"
#include "text.h"

#if RILL_HAVE_SQLITE
#include <sqlite3.h>

#define SQ_DEFAULT_CHUNK 65536
#define SQ_DEFAULT_INFER 1000
/* Page cache of a connection doing point lookups (KiB): a page missing from it costs a
 * read() call (no memory map, see open_db); SQLite's default is 2 MiB. */
#define SQ_POINT_CACHE_MAX_KIB (256 * 1024)
/* Table mode: the held copy's default limit (bytes), and the share of the rows that
 * out-of-order reads fetch by point lookups before the table is held (see held_for). */
#define SQ_DEFAULT_HOLD_MAX ((int64_t)1 << 30)
#define SQ_HOLD_AFTER 256

typedef struct sqval {
  int type;                   /* SQLITE_INTEGER, _FLOAT, _TEXT, _BLOB, _NULL */
  int64_t i;                  /* integer; or byte offset of text/blob in the set's bytes */
  double d;
  int64_t len;
} sqval_t;

/* A table held in memory (table mode, see held_for): a record per row, in row order, with
 * the storage class of each value (a byte each, padded to 8) and then the values (8 bytes
 * each: an INTEGER, the bits of a REAL, or for TEXT and BLOB the position in its segment's
 * bytes of the value's length, 8 bytes, followed by its bytes). Rows are loaded in segments of
 * SQ_SEG_ROWS, concurrently: each segment has bytes of its own. Reading a row out of order
 * touches its record and its bytes, not one place per column. */
#define SQ_SEG_SHIFT 16
#define SQ_SEG_ROWS ((int64_t)1 << SQ_SEG_SHIFT)

typedef struct hbytes {
  char* p;
  int64_t n, cap;
} hbytes_t;

typedef struct held {
  int64_t n, nseg;
  int64_t stride, voff;       /* bytes per record; where its values start */
  uint8_t* rec;               /* n records */
  hbytes_t* bytes;            /* per segment */
  int* uniform;               /* per column: the storage class of every row, 0 when they differ */
  _Atomic int* recode;        /* per column: a TEXT or BLOB value that a STRING cell cannot take
                                 as it is (not UTF-8; under LATIN1, not ASCII) */
  _Atomic int64_t mem;        /* bytes allocated */
  _Atomic int failed;         /* a segment could not be loaded: the copy is dropped */
} held_t;

enum { HOLD_NONE, HOLD_LOADING, HOLD_READY, HOLD_NEVER };

typedef struct rowset {
  int64_t n, cap;             /* rows */
  sqval_t* v;                 /* n * ncols */
  char* bytes;
  int64_t nbytes, bytes_cap;
} rowset_t;

typedef struct conn {
  struct conn* next;
  sqlite3* db;
  sqlite3_stmt* point;        /* table mode: one row by rowid */
  sqlite3_stmt* range;        /* table mode: rows with rowid in [?1, ?2] */
  sqlite3_stmt* begin;        /* BEGIN / COMMIT around the point lookups of one call */
  sqlite3_stmt* commit;
  sqlite3_stmt* load;         /* table mode: rowid, * over a rowid range (holding the table) */
  int busy;
  pid_t pid;                  /* the process that opened db (a file's connection) */
  int big_cache;              /* page cache enlarged for point lookups */
  rowset_t rs;                /* the rows of the call using it (buffers reused) */
  int64_t* order;             /* point lookups: (rowid, row) pairs sorted by rowid, then the */
  int64_t order_cap;          /* position in rs of each requested row */
} conn_t;

typedef struct sq {
  _Atomic int refs;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  char* sql;
  char* path;                 /* NULL: single shared connection */
  sqlite3* shared_db;
  int own_shared;             /* close shared_db when freed */
  int busy_ms;
  int ncols;
  char** names;
  rill_dtype_t* types;
  int64_t nrows;
  rill_on_error_t on_error;
  rill_csv_encoding_t encoding; /* of TEXT values read as STRING, and of column names */
  /* table mode */
  char* table;                /* quoted name, NULL in query mode */
  int64_t rowid_base;
  int64_t* rowids;            /* NULL when rowid = rowid_base + row */
  int64_t cache_kib;          /* page cache of a connection doing point lookups */
  int64_t hold_max;           /* bytes the held copy may take; < 0: never held */
  int hold_state;             /* HOLD_* (under mu) */
  int64_t scattered;          /* rows read by point lookups so far (under mu) */
  struct held* held;          /* the table in memory: being loaded (HOLD_LOADING), or loaded */
  _Atomic int64_t next_seg;   /* the next segment to load */
  _Atomic int64_t segs_done;  /* segments loaded or given up */
  int64_t nseg;
  /* query mode */
  rowset_t* chunks;
  int64_t nchunks, chunk_rows;
  conn_t* conns;
} sq_t;

static void rowset_free(rowset_t* r) {
  rill__free(r->v);
  rill__free(r->bytes);
  memset(r, 0, sizeof *r);
}

/* Value k of the current row of `st` into *v; returns the bytes of a TEXT or BLOB value (valid
 * until the statement moves; "" for an empty one, for which SQLite gives no pointer; NULL with
 * v->len > 0 when SQLite is out of memory), v->len their count. One sqlite3_column_value per
 * value: the sqlite3_value_* accessors skip the per-call statement checks of sqlite3_column_*, and only
 * the accessor of the stored type is called, so nothing is converted or allocated. The
 * statement is used by one thread at a time. */
static const void* read_value(sqlite3_stmt* st, int k, sqval_t* v) {
  sqlite3_value* x = sqlite3_column_value(st, k);
  v->type = sqlite3_value_type(x);
  v->i = 0;
  v->d = 0;
  v->len = 0;
  switch (v->type) {
  case SQLITE_INTEGER: v->i = sqlite3_value_int64(x); return NULL;
  case SQLITE_FLOAT: v->d = sqlite3_value_double(x); return NULL;
  case SQLITE_TEXT: {
    const void* p = sqlite3_value_text(x);
    v->len = sqlite3_value_bytes(x);
    return p || v->len ? p : "";
  }
  case SQLITE_BLOB: {
    const void* p = sqlite3_value_blob(x);
    v->len = sqlite3_value_bytes(x);
    return p || v->len ? p : "";
  }
  default: return NULL;
  }
}

/* Appends the current row of `st` (ncols values). */
static int rowset_add(rowset_t* r, sqlite3_stmt* st, int ncols) {
  sqval_t* nv = rill__grow(r->v, &r->cap, r->n, r->n + 1, (size_t)ncols * sizeof *nv, 64);
  if (!nv) return RILL_ENOMEM;
  r->v = nv;
  sqval_t* row = r->v + r->n * ncols;
  for (int k = 0; k < ncols; k++) {
    sqval_t* v = &row[k];
    const void* p = read_value(st, k, v);
    if (v->type == SQLITE_TEXT || v->type == SQLITE_BLOB) {
      int64_t n = v->len;
      if (!p && n > 0) return RILL_ENOMEM;
      if (r->nbytes + n > r->bytes_cap) {
        char* nb = rill__grow(r->bytes, &r->bytes_cap, r->nbytes, r->nbytes + n, 1, 4096);
        if (!nb) return RILL_ENOMEM;
        r->bytes = nb;
      }
      if (n) memcpy(r->bytes + r->nbytes, p, (size_t)n);
      v->i = r->nbytes;
      v->len = n;
      r->nbytes += n;
    }
  }
  r->n++;
  return RILL_OK;
}

/* 1 for a file's connection opened by another process than `me` (getpid()): the parent,
 * before a fork(). */
static int conn_forked(const sq_t* s, const conn_t* c, pid_t me) { return s->path && c->pid != me; }

/* Frees connection c of s: its statements, and its database unless it is the shared one.
 * A connection the parent process opened before a fork() is not touched in the child
 * (SQLite: a connection must not be used across fork(), and closing it is a use): only
 * rill's own buffers are freed, SQLite's objects stay the parent's pages. */
static void conn_free(const sq_t* s, conn_t* c, pid_t me) {
  if (!conn_forked(s, c, me)) {
    sqlite3_finalize(c->point);
    sqlite3_finalize(c->range);
    sqlite3_finalize(c->begin);
    sqlite3_finalize(c->commit);
    sqlite3_finalize(c->load);
    if (c->db != s->shared_db) sqlite3_close(c->db);
  }
  rill__free(c->order);
  rowset_free(&c->rs);
  rill__free(c);
}

static void held_free(held_t* h) {
  if (!h) return;
  for (int64_t g = 0; g < h->nseg && h->bytes; g++) rill__free(h->bytes[g].p);
  rill__free(h->bytes);
  rill__free(h->rec);
  rill__free(h->uniform);
  rill__free((void*)h->recode);
  rill__free(h);
}

static void sq_unref(sq_t* s) {
  if (!s || atomic_fetch_sub(&s->refs, 1) != 1) return;
  pid_t me = getpid();
  while (s->conns) {
    conn_t* c = s->conns;
    s->conns = c->next;
    conn_free(s, c, me);
  }
  if (s->own_shared) sqlite3_close(s->shared_db);
  for (int64_t k = 0; k < s->nchunks; k++) rowset_free(&s->chunks[k]);
  rill__free(s->chunks);
  rill__free_columns(s->names, s->types, s->ncols);
  rill__free(s->rowids);
  held_free(s->held);
  rill__free(s->table);
  rill__free(s->sql);
  rill__free(s->path);
  pthread_cond_destroy(&s->cv);
  pthread_mutex_destroy(&s->mu);
  rill__free(s);
}

static int sq_fail(rill_error_t* err, int code, sqlite3* db, const char* sql) {
  return rill__fail(err, code, "sqlite: %s (SQL: %.300s)", db ? sqlite3_errmsg(db) : "out of memory", sql);
}

static int open_db(const char* path, int busy_ms, sqlite3** out, rill_error_t* err) {
  sqlite3* db = NULL;
  int rc = sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX, NULL);
  if (rc != SQLITE_OK) {
    int code = rc == SQLITE_CANTOPEN ? RILL_EIO : RILL_ESQL;
    rill__fail(err, code, "%s: cannot open database: %s", path, db ? sqlite3_errmsg(db) : "out of memory");
    sqlite3_close(db);
    return code;
  }
  sqlite3_busy_timeout(db, busy_ms);
  /* No memory map: a database file truncated by another process while it is mapped would
   * raise SIGBUS in the host; with read() SQLite reports the damage as an error instead.
   * (Page misses cost a read() each; SQLite's page cache keeps hot pages.) */
  sqlite3_exec(db, "PRAGMA mmap_size=0", NULL, NULL, NULL);
  *out = db;
  return RILL_OK;
}

/* A free connection (with its statements in table mode): a new one when all are busy, or
 * the shared one once it is free (an in-memory or caller's database has only that one). */
static conn_t* conn_get(sq_t* s, rill_error_t* err) {
  conn_t* forked = NULL;
  pid_t me = getpid();
  pthread_mutex_lock(&s->mu);
  for (;;) {
    conn_t* free_one = NULL;
    for (conn_t** pp = &s->conns; *pp && !free_one;) {
      conn_t* c = *pp;
      if (conn_forked(s, c, me)) { /* the parent's, busy or not: never used here */
        *pp = c->next;
        c->next = forked;
        forked = c;
        continue;
      }
      if (!c->busy) free_one = c;
      pp = &c->next;
    }
    while (forked) {
      conn_t* c = forked;
      forked = c->next;
      conn_free(s, c, me);
    }
    if (free_one) {
      free_one->busy = 1;
      pthread_mutex_unlock(&s->mu);
      return free_one;
    }
    if (!s->path && s->conns) {
      pthread_cond_wait(&s->cv, &s->mu);
      continue;
    }
    break;
  }
  pthread_mutex_unlock(&s->mu);
  conn_t* c = rill__calloc(1, sizeof *c);
  if (!c) {
    rill__fail(err, RILL_ENOMEM, "sqlite: out of memory");
    return NULL;
  }
  if (s->path) {
    if (open_db(s->path, s->busy_ms, &c->db, err) != RILL_OK) {
      rill__free(c);
      return NULL;
    }
    c->pid = me;
  } else {
    c->db = s->shared_db;
  }
  c->busy = 1;
  pthread_mutex_lock(&s->mu);
  c->next = s->conns;
  s->conns = c;
  pthread_mutex_unlock(&s->mu);
  return c;
}

static void conn_put(sq_t* s, conn_t* c) {
  conn_t* drop = NULL;
  pthread_mutex_lock(&s->mu);
  c->busy = 0;
  if (s->hold_state == HOLD_READY && s->path) {
    /* the held copy serves every read: idle connections and their page caches go */
    for (conn_t** pp = &s->conns; *pp;) {
      conn_t* x = *pp;
      if (x->busy) {
        pp = &x->next;
        continue;
      }
      *pp = x->next;
      x->next = drop;
      drop = x;
    }
  }
  pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
  while (drop) {
    conn_t* x = drop;
    drop = x->next;
    conn_free(s, x, getpid());
  }
}

static int64_t rowid_of(const sq_t* s, int64_t row) {
  return s->rowids ? s->rowids[row] : s->rowid_base + row;
}

static const char* sqtype_name(int t) {
  switch (t) {
  case SQLITE_INTEGER: return "INTEGER";
  case SQLITE_FLOAT: return "REAL";
  case SQLITE_TEXT: return "TEXT";
  case SQLITE_BLOB: return "BLOB";
  default: return "NULL";
  }
}

static int store_int(rill_array_t* out, int64_t i, rill_dtype_t dt, int64_t v) {
  switch (dt) {
  case RILL_BOOL: if (v != 0 && v != 1) return RILL_ERANGE; ((uint8_t*)out->data)[i] = (uint8_t)v; return RILL_OK;
  case RILL_INT8: if (v < INT8_MIN || v > INT8_MAX) return RILL_ERANGE; ((int8_t*)out->data)[i] = (int8_t)v; return RILL_OK;
  case RILL_INT16: if (v < INT16_MIN || v > INT16_MAX) return RILL_ERANGE; ((int16_t*)out->data)[i] = (int16_t)v; return RILL_OK;
  case RILL_INT32: if (v < INT32_MIN || v > INT32_MAX) return RILL_ERANGE; ((int32_t*)out->data)[i] = (int32_t)v; return RILL_OK;
  case RILL_INT64: ((int64_t*)out->data)[i] = v; return RILL_OK;
  case RILL_UINT8: if (v < 0 || v > UINT8_MAX) return RILL_ERANGE; ((uint8_t*)out->data)[i] = (uint8_t)v; return RILL_OK;
  case RILL_UINT16: if (v < 0 || v > UINT16_MAX) return RILL_ERANGE; ((uint16_t*)out->data)[i] = (uint16_t)v; return RILL_OK;
  case RILL_UINT32: if (v < 0 || v > (int64_t)UINT32_MAX) return RILL_ERANGE; ((uint32_t*)out->data)[i] = (uint32_t)v; return RILL_OK;
  case RILL_UINT64: if (v < 0) return RILL_ERANGE; ((uint64_t*)out->data)[i] = (uint64_t)v; return RILL_OK;
  case RILL_FLOAT32: ((float*)out->data)[i] = (float)v; return RILL_OK;
  case RILL_FLOAT64: ((double*)out->data)[i] = (double)v; return RILL_OK;
  case RILL_TIMESTAMP_US:
    if (v > INT64_MAX / 1000000 || v < INT64_MIN / 1000000) return RILL_ERANGE;
    ((int64_t*)out->data)[i] = v * 1000000;
    return RILL_OK;
  default: return RILL_ENOTSUP;
  }
}

static int store_double(rill_array_t* out, int64_t i, rill_dtype_t dt, double d) {
  if (dt == RILL_FLOAT64) { ((double*)out->data)[i] = d; return RILL_OK; }
  if (dt == RILL_FLOAT32) { ((float*)out->data)[i] = (float)d; return RILL_OK; }
  if (dt == RILL_TIMESTAMP_US) {
    if (!isfinite(d) || fabs(d) > 9.2e12) return RILL_ERANGE;
    ((int64_t*)out->data)[i] = (int64_t)llround(d * 1e6);
    return RILL_OK;
  }
  if (!isfinite(d) || d != floor(d)) return RILL_EFORMAT;
  if (d < -9.2233720368547758e18 || d >= 9.2233720368547758e18) return RILL_ERANGE;
  return store_int(out, i, dt, (int64_t)d);
}

#define SQ_NUM_TEXT 40 /* bytes reserved for a number written as text */

/* Converts value v (a TEXT or BLOB value's bytes at p) to cell i of out. Variable-length cells are written
 * at *pos of out->data, reserved beforehand. */
static int store_value(rill_array_t* out, int64_t i, rill_dtype_t dt, const sqval_t* v, const char* p,
                       int64_t* pos) {
  if (dt == RILL_STRING || dt == RILL_BINARY) {
    char* dst = (char*)out->data + *pos;
    int n = 0;
    if (v->type == SQLITE_INTEGER) {
      n = snprintf(dst, SQ_NUM_TEXT, "%lld", (long long)v->i);
    } else if (v->type == SQLITE_FLOAT) {
      n = snprintf(dst, SQ_NUM_TEXT, "%.17g", v->d);
    } else if (v->type != SQLITE_NULL) {
      if (v->len) memcpy(dst, p, (size_t)v->len);
      n = (int)v->len;
    }
    *pos += n;
    out->offsets[i + 1] = *pos;
    return v->type == SQLITE_NULL ? rill_array_set_null(out, i) : RILL_OK;
  }
  if (v->type == SQLITE_NULL) return rill_array_set_null(out, i);
  switch (v->type) {
  case SQLITE_INTEGER: return store_int(out, i, dt, v->i);
  case SQLITE_FLOAT: return store_double(out, i, dt, v->d);
  case SQLITE_TEXT: return rill__store_text(out, i, dt, p, (size_t)v->len);
  default: return RILL_EFORMAT;
  }
}

static void sq_unref_ctx(void* p) { sq_unref(p); }

/* The state of one call of sq_fill: where converted rows go. */
typedef struct fill {
  sq_t* s;
  rill_array_t* const* outs;
  int nouts;
  const int64_t* rows;
  int64_t* vcap;              /* per variable-length column: bytes reserved in out->data */
  int64_t nulled;
} fill_t;

/* Converts one row of values (row[k], with the bytes of TEXT/BLOB values at ptrs[k]) into
 * cell i of every requested column. A value that does not convert fails the call at that
 * cell (unless on_error is NULL: the cell becomes null). */
static int put_row(fill_t* f, int64_t i, const sqval_t* row, const char* const* ptrs, rill_error_t* err) {
  sq_t* s = f->s;
  for (int k = 0; k < f->nouts; k++) {
    rill_array_t* out = f->outs[k];
    if (!out) continue;
    rill_dtype_t dt = s->types[k];
    const sqval_t* v = &row[k];
    const char* p = ptrs[k];
    /* string cells hold UTF-8: TEXT or BLOB bytes of another encoding are recoded */
    int text = v->type == SQLITE_TEXT || v->type == SQLITE_BLOB;
    int64_t bad = -1, grow = 0;
    if (dt == RILL_STRING && text && !rill__text_as_is(s->encoding, p, v->len, &bad)) {
      if (s->encoding == RILL_CSV_UTF8) {
        out->offsets[i + 1] = out->data_size;
        if (s->on_error == RILL_ON_ERROR_NULL) {
          if (rill_array_set_null(out, i) != RILL_OK) return rill__fail(err, RILL_ENOMEM, "sqlite: out of memory");
          f->nulled++;
          continue;
        }
        int rc = rill_error_set(err, RILL_EFORMAT,
                                "sqlite: row %lld, column '%s': %s that is not UTF-8 text (byte 0x%02X at byte %lld; "
                                "for another encoding see the encoding option, or read the column as binary) "
                                "(SQL: %.200s)",
                                (long long)f->rows[i], s->names[k], sqtype_name(v->type),
                                (unsigned char)p[bad], (long long)bad, s->sql);
        if (err) {
          err->row = i;
          err->column = k;
        }
        return rc;
      }
      grow = rill__recode_room(s->encoding, v->len) - v->len;
    }
    if (dt == RILL_STRING || dt == RILL_BINARY) {
      int64_t need = out->data_size + (text ? v->len + grow : SQ_NUM_TEXT);
      if (need > f->vcap[k]) {
        int64_t cap = f->vcap[k] * 2 > need ? f->vcap[k] * 2 : need;
        int rc = rill_array_reserve(out, cap);
        if (rc != RILL_OK)
          return rill_error_set(err, rc, "sqlite: column '%s': cannot reserve %lld bytes", s->names[k], (long long)cap);
        f->vcap[k] = cap;
      }
    }
    if (grow) {
      out->data_size += rill__recode(s->encoding, p, v->len, (char*)out->data + out->data_size);
      out->offsets[i + 1] = out->data_size;
      continue;
    }
    int vrc = store_value(out, i, dt, v, p, &out->data_size);
    if (vrc == RILL_OK) continue;
    if (vrc == RILL_ENOMEM) return rill__fail(err, vrc, "sqlite: out of memory");
    if (s->on_error == RILL_ON_ERROR_NULL) {
      if ((vrc = rill_array_set_null(out, i)) != RILL_OK) return rill__fail(err, vrc, "sqlite: out of memory");
      f->nulled++;
      continue;
    }
    int rc;
    if (v->type == SQLITE_TEXT)
      rc = rill_error_set(err, vrc, "sqlite: row %lld, column '%s': cannot convert TEXT '%.*s'%s to %s (SQL: %.200s)",
                          (long long)f->rows[i], s->names[k], (int)(v->len > 40 ? 40 : v->len), p,
                          v->len > 40 ? "..." : "", rill_dtype_name(dt), s->sql);
    else
      rc = rill_error_set(err, vrc, "sqlite: row %lld, column '%s': cannot convert %s value to %s (SQL: %.200s)",
                          (long long)f->rows[i], s->names[k], sqtype_name(v->type), rill_dtype_name(dt), s->sql);
    if (err) {
      err->row = i;
      err->column = k;
    }
    return rc;
  }
  return RILL_OK;
}

/* Converts row `r` of a held rowset into cell i. */
static int put_held_row(fill_t* f, int64_t i, const rowset_t* rs, int64_t r, const char** ptrs, rill_error_t* err) {
  int ncols = f->s->ncols;
  const sqval_t* row = &rs->v[r * ncols];
  for (int k = 0; k < ncols; k++) {
    ptrs[k] = NULL;
    if (row[k].type == SQLITE_TEXT || row[k].type == SQLITE_BLOB)
      ptrs[k] = rs->bytes ? rs->bytes + row[k].i : ""; /* a set of empty values holds no bytes */
  }
  return put_row(f, i, row, ptrs, err);
}

static int prepare_once(conn_t* c, sqlite3_stmt** stp, const char* sql, rill_error_t* err) {
  if (*stp) return RILL_OK;
  if (sqlite3_prepare_v2(c->db, sql, -1, stp, NULL) == SQLITE_OK) return RILL_OK;
  int rc = sq_fail(err, RILL_ESQL, c->db, sql);
  sqlite3_finalize(*stp);
  *stp = NULL;
  return rc;
}

/* Table mode, consecutive rows: one range statement, each row converted straight from the
 * statement into the outputs (no copy of the values in between). */
static int read_range(fill_t* f, conn_t* c, sqval_t* row, const char** ptrs, int64_t n, rill_error_t* err) {
  sq_t* s = f->s;
  char sql[600];
  snprintf(sql, sizeof sql, "SELECT * FROM %s WHERE rowid BETWEEN ?1 AND ?2 ORDER BY rowid", s->table);
  int rc = prepare_once(c, &c->range, sql, err);
  if (rc != RILL_OK) return rc;
  sqlite3_stmt* st = c->range;
  sqlite3_bind_int64(st, 1, rowid_of(s, f->rows[0]));
  sqlite3_bind_int64(st, 2, rowid_of(s, f->rows[n - 1]));
  int64_t got = 0;
  int step = SQLITE_DONE;
  while (rc == RILL_OK && (step = sqlite3_step(st)) == SQLITE_ROW) {
    if (got == n) {
      rc = rill__fail(err, RILL_ESQL, "sqlite: table %s changed while read: rows were added", s->table);
      break;
    }
    for (int k = 0; k < s->ncols; k++) {
      ptrs[k] = read_value(st, k, &row[k]);
      if (!ptrs[k] && row[k].len > 0) rc = rill__fail(err, RILL_ENOMEM, "sqlite: out of memory");
    }
    if (rc == RILL_OK) rc = put_row(f, got++, row, ptrs, err);
  }
  if (rc == RILL_OK && step != SQLITE_DONE)
    rc = rill__fail(err, RILL_ESQL, "sqlite: %s (reading table %s)", sqlite3_errmsg(c->db), s->table);
  else if (rc == RILL_OK && got != n)
    rc = rill__fail(err, RILL_ESQL, "sqlite: table %s changed while read: rowid %lld is missing", s->table,
                    (long long)rowid_of(s, f->rows[got]));
  sqlite3_reset(st);
  return rc;
}

static int cmp_pair(const void* a, const void* b) {
  const int64_t* x = a;
  const int64_t* y = b;
  if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
  return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* Table mode, scattered rows: point lookups in rowid order (neighbouring rows share pages and
 * the B-tree's upper levels stay hot) into c->rs, inside one read transaction; c->order[2n + i]
 * receives the position in c->rs of row i. The connection's page cache is enlarged on its
 * first point lookup: without a memory map a page missing from it costs a read() call. */
static int fetch_points(sq_t* s, conn_t* c, const int64_t* rows, int64_t n, rill_error_t* err) {
  char sql[600];
  snprintf(sql, sizeof sql, "SELECT * FROM %s WHERE rowid = ?1", s->table);
  int rc = prepare_once(c, &c->point, sql, err);
  if (rc == RILL_OK) rc = prepare_once(c, &c->begin, "BEGIN", err);
  if (rc == RILL_OK) rc = prepare_once(c, &c->commit, "COMMIT", err);
  if (rc != RILL_OK) return rc;
  if (!c->big_cache && s->cache_kib > 0) {
    snprintf(sql, sizeof sql, "PRAGMA cache_size=-%lld", (long long)s->cache_kib);
    sqlite3_exec(c->db, sql, NULL, NULL, NULL);
    c->big_cache = 1;
  }
  if (c->order_cap < 3 * n) {
    int64_t* o = rill__realloc(c->order, (size_t)c->order_cap * sizeof *o, (size_t)(3 * n) * sizeof *o);
    if (!o) return rill__fail(err, RILL_ENOMEM, "sqlite: out of memory");
    c->order = o;
    c->order_cap = 3 * n;
  }
  int64_t* pairs = c->order;
  int64_t* pos = c->order + 2 * n;
  for (int64_t i = 0; i < n; i++) {
    pairs[2 * i] = rowid_of(s, rows[i]);
    pairs[2 * i + 1] = i;
  }
  if (n > 1) qsort(pairs, (size_t)n, 2 * sizeof *pairs, cmp_pair);
  c->rs.n = 0;
  c->rs.nbytes = 0;
  sqlite3_stmt* st = c->point;
  /* one read transaction per call: the shared lock is taken once, not once per row */
  int txn = sqlite3_get_autocommit(c->db) && sqlite3_step(c->begin) == SQLITE_DONE;
  sqlite3_reset(c->begin);
  for (int64_t p = 0; p < n && rc == RILL_OK; p++) {
    sqlite3_reset(st);
    sqlite3_bind_int64(st, 1, pairs[2 * p]);
    int step = sqlite3_step(st);
    if (step == SQLITE_ROW) {
      if (rowset_add(&c->rs, st, s->ncols) != RILL_OK) rc = rill__fail(err, RILL_ENOMEM, "sqlite: out of memory");
      pos[pairs[2 * p + 1]] = c->rs.n - 1;
    } else if (step == SQLITE_DONE) {
      rc = rill__fail(err, RILL_ESQL, "sqlite: table %s changed while read: rowid %lld is missing", s->table,
                      (long long)pairs[2 * p]);
    } else {
      rc = rill__fail(err, RILL_ESQL, "sqlite: %s (reading table %s)", sqlite3_errmsg(c->db), s->table);
    }
  }
  sqlite3_reset(st);
  if (txn) {
    sqlite3_step(c->commit);
    sqlite3_reset(c->commit);
  }
  return rc;
}

/* Value k of row r of a held table into *v; returns the bytes of a TEXT or BLOB value. */
static inline const char* held_value(const held_t* h, int k, int64_t r, sqval_t* v) {
  const uint8_t* rec = h->rec + r * h->stride;
  int64_t x;
  memcpy(&x, rec + h->voff + 8 * k, sizeof x);
  v->type = rec[k];
  v->i = 0;
  v->d = 0;
  v->len = 0;
  switch (v->type) {
  case SQLITE_INTEGER: v->i = x; return NULL;
  case SQLITE_FLOAT: memcpy(&v->d, &x, sizeof v->d); return NULL;
  case SQLITE_TEXT:
  case SQLITE_BLOB: {
    const char* p = h->bytes[r >> SQ_SEG_SHIFT].p + x;
    memcpy(&v->len, p, sizeof v->len);
    return p + sizeof v->len;
  }
  default: return NULL;
  }
}

/* Counts `add` bytes against s->hold_max; 0 (nothing counted) when they do not fit. */
static int held_charge(const sq_t* s, held_t* h, int64_t add) {
  if (atomic_fetch_add(&h->mem, add) + add <= s->hold_max) return 1;
  atomic_fetch_sub(&h->mem, add);
  return 0;
}

/* Appends a TEXT or BLOB value (its length, then its bytes) to the bytes of segment g, *at
 * receiving its position; 0 when the copy would pass s->hold_max or memory runs out. */
static int held_add_bytes(const sq_t* s, held_t* h, int64_t g, const void* p, int64_t len, int64_t* at) {
  hbytes_t* b = &h->bytes[g];
  int64_t need = b->n + (int64_t)sizeof len + len;
  if (need > b->cap) {
    int64_t nc = b->cap ? b->cap * 2 : 65536;
    if (nc < need) nc = need;
    if (!held_charge(s, h, nc - b->cap)) { /* near the limit: what is left of it, once */
      nc = b->cap + (s->hold_max - atomic_load(&h->mem));
      if (nc < need || !held_charge(s, h, nc - b->cap)) return 0;
    }
    char* nb = rill__realloc(b->p, (size_t)b->n, (size_t)nc);
    if (!nb) return 0;
    b->p = nb;
    b->cap = nc;
  }
  *at = b->n;
  memcpy(b->p + b->n, &len, sizeof len);
  if (len) memcpy(b->p + b->n + sizeof len, p, (size_t)len);
  b->n = need;
  return 1;
}

/* A held copy of the table with its records allocated (not loaded), or NULL when they alone
 * pass s->hold_max or memory runs out. Large records ask for huge pages: rows are read in
 * random order, and 4 KiB pages would cost a TLB miss on most of them. */
static held_t* held_new(const sq_t* s) {
  int64_t n = s->nrows;
  held_t* h = rill__calloc(1, sizeof *h);
  if (!h) return NULL;
  h->n = n;
  h->nseg = (n + SQ_SEG_ROWS - 1) >> SQ_SEG_SHIFT;
  h->voff = (s->ncols + 7) & ~(int64_t)7;
  h->stride = h->voff + 8 * (int64_t)s->ncols;
  int64_t mem = n * h->stride + h->nseg * (int64_t)sizeof(hbytes_t) + s->ncols * (int64_t)sizeof(int);
  atomic_init(&h->mem, mem);
  atomic_init(&h->failed, 0);
  if (mem > s->hold_max || !(h->rec = rill__alloc((size_t)(n * h->stride))) ||
      !(h->bytes = rill__calloc((size_t)h->nseg, sizeof *h->bytes)) ||
      !(h->uniform = rill__calloc((size_t)s->ncols, sizeof *h->uniform)) ||
      !(h->recode = rill__calloc((size_t)s->ncols, sizeof *h->recode))) {
    held_free(h);
    return NULL;
  }
#ifdef MADV_HUGEPAGE
  uintptr_t lo = ((uintptr_t)h->rec + 4095) & ~(uintptr_t)4095;
  uintptr_t hi = ((uintptr_t)h->rec + (uintptr_t)(n * h->stride)) & ~(uintptr_t)4095;
  if (hi > lo + ((uintptr_t)4 << 20)) madvise((void*)lo, hi - lo, MADV_HUGEPAGE);
#endif
  return h;
}

/* Loads segment g of the held copy with one range statement on connection c; 0 when anything
 * goes wrong: an SQL error, rows that no longer match the rowids found at open, the limit,
 * memory, or another segment failing meanwhile. */
static int held_load_segment(sq_t* s, held_t* h, conn_t* c, int64_t g) {
  int ncols = s->ncols;
  int64_t a = g << SQ_SEG_SHIFT, b = a + SQ_SEG_ROWS < h->n ? a + SQ_SEG_ROWS : h->n;
  char sql[600];
  snprintf(sql, sizeof sql, "SELECT rowid, * FROM %s WHERE rowid BETWEEN ?1 AND ?2 ORDER BY rowid", s->table);
  rill_error_t ignored = {0};
  if (prepare_once(c, &c->load, sql, &ignored) != RILL_OK || sqlite3_column_count(c->load) != ncols + 1) return 0;
  sqlite3_stmt* st = c->load;
  sqlite3_bind_int64(st, 1, rowid_of(s, a));
  sqlite3_bind_int64(st, 2, rowid_of(s, b - 1));
  int64_t r = a;
  int ok = 1, step = SQLITE_DONE;
  while (ok && (step = sqlite3_step(st)) == SQLITE_ROW) {
    if (r == b || sqlite3_column_int64(st, 0) != rowid_of(s, r) ||
        ((r & 1023) == 0 && atomic_load_explicit(&h->failed, memory_order_relaxed))) {
      ok = 0;
      break;
    }
    uint8_t* rec = h->rec + r * h->stride;
    for (int k = 0; k < ncols && ok; k++) {
      sqval_t v;
      const void* p = read_value(st, k + 1, &v);
      int64_t x = 0;
      if (v.type == SQLITE_INTEGER) x = v.i;
      else if (v.type == SQLITE_FLOAT) memcpy(&x, &v.d, sizeof x);
      else if (v.type == SQLITE_TEXT || v.type == SQLITE_BLOB) {
        ok = p && held_add_bytes(s, h, g, p, v.len, &x);
        if (ok && s->types[k] == RILL_STRING && !rill__text_as_is(s->encoding, p, v.len, NULL))
          atomic_store(&h->recode[k], 1);
      }
      rec[k] = (uint8_t)v.type;
      memcpy(rec + h->voff + 8 * k, &x, sizeof x);
    }
    r++;
  }
  sqlite3_reset(st);
  hbytes_t* by = &h->bytes[g];
  if (ok && by->cap > by->n + by->n / 8 + 4096) { /* the doubling's slack back, once per segment */
    char* nb = rill__realloc(by->p, (size_t)by->n, (size_t)by->n);
    if (nb) {
      atomic_fetch_sub(&h->mem, by->cap - by->n);
      by->p = nb;
      by->cap = by->n;
    }
  }
  return ok && step == SQLITE_DONE && r == b;
}

/* Each column's uniform storage class, once every segment is loaded. */
static void held_finish(held_t* h, int ncols) {
  for (int k = 0; k < ncols; k++) {
    int u = h->n > 0 ? h->rec[k] : 0;
    for (int64_t i = 1; i < h->n && u; i++)
      if (h->rec[i * h->stride + k] != u) u = 0;
    h->uniform[k] = u;
  }
}

/* Column k of the requested rows straight from the held records when no cell can fail or be
 * null: every row holds an INTEGER read as int64, a REAL read as float64, or a TEXT or BLOB
 * read as string or binary. Returns 0 (nothing done) for any other column. */
static int held_gather(const sq_t* s, const held_t* h, int k, const int64_t* rows, int64_t n, rill_array_t* out,
                       int* rc, rill_error_t* err) {
  int u = h->uniform[k];
  rill_dtype_t dt = s->types[k];
  const uint8_t* vals = h->rec + h->voff + 8 * k;
  if ((u == SQLITE_INTEGER && dt == RILL_INT64) || (u == SQLITE_FLOAT && dt == RILL_FLOAT64)) {
    char* d = out->data; /* the 8 bytes as they are: int64, or the double's bits */
    for (int64_t i = 0; i < n; i++) memcpy(d + 8 * i, vals + rows[i] * h->stride, 8);
  } else if ((u == SQLITE_TEXT || u == SQLITE_BLOB) &&
             (dt == RILL_BINARY || (dt == RILL_STRING && !atomic_load(&h->recode[k])))) {
    int64_t total = 0, x, len;
    for (int64_t i = 0; i < n; i++) {
      memcpy(&x, vals + rows[i] * h->stride, sizeof x);
      memcpy(&len, h->bytes[rows[i] >> SQ_SEG_SHIFT].p + x, sizeof len);
      total += len;
    }
    out->data_size = 0;
    *rc = rill_array_reserve(out, total > 0 ? total : 1);
    if (*rc != RILL_OK || !out->offsets) {
      *rc = rill_error_set(err, *rc ? *rc : RILL_EINVAL, "sqlite: column '%s': cannot reserve %lld bytes",
                           s->names[k], (long long)total);
      return 1;
    }
    char* d = out->data;
    int64_t pos = 0;
    out->offsets[0] = 0;
    for (int64_t i = 0; i < n; i++) {
      memcpy(&x, vals + rows[i] * h->stride, sizeof x);
      const char* p = h->bytes[rows[i] >> SQ_SEG_SHIFT].p + x;
      memcpy(&len, p, sizeof len);
      if (len) memcpy(d + pos, p + sizeof len, (size_t)len);
      pos += len;
      out->offsets[i + 1] = pos;
    }
    out->data_size = pos;
  } else {
    return 0;
  }
  return 1;
}

/* Table mode: the held copy to read rows from, or NULL for the database. Once out-of-order
 * reads have fetched 1/SQ_HOLD_AFTER of the rows (a shuffled pass is under way), the table is
 * read into memory once, segment by segment in rowid order, by every call that comes while
 * segments are left (each on a connection of its own); a call finding them all taken goes on
 * with point lookups. Every call after the last segment reads from memory. A table that does
 * not fit s->hold_max, or whose load fails, is never tried again. */
static const held_t* held_for(sq_t* s, int64_t n, int scattered) {
  pthread_mutex_lock(&s->mu);
  if (s->hold_state == HOLD_NONE && scattered) {
    s->scattered += n;
    if (s->scattered >= s->nrows / SQ_HOLD_AFTER) {
      s->held = held_new(s);
      s->hold_state = s->held ? HOLD_LOADING : HOLD_NEVER;
      if (s->held) s->nseg = s->held->nseg;
    }
  }
  held_t* h = s->hold_state == HOLD_READY || s->hold_state == HOLD_LOADING ? s->held : NULL;
  int loading = s->hold_state == HOLD_LOADING;
  pthread_mutex_unlock(&s->mu);
  if (!loading) return h;
  /* h stays allocated while this call holds a segment of it: it is dropped only when the
   * last segment is done */
  conn_t* c = NULL;
  int64_t g;
  while ((g = atomic_fetch_add(&s->next_seg, 1)) < s->nseg) {
    if (!c && !atomic_load(&h->failed)) {
      rill_error_t ignored = {0};
      if ((c = conn_get(s, &ignored)) && c->big_cache) {
        sqlite3_exec(c->db, "PRAGMA cache_size=-2000", NULL, NULL, NULL); /* a sequential read needs none */
        c->big_cache = 0;
      }
    }
    if (!c || atomic_load(&h->failed) || !held_load_segment(s, h, c, g)) atomic_store(&h->failed, 1);
    if (atomic_fetch_add(&s->segs_done, 1) + 1 < s->nseg) continue;
    int ok = !atomic_load(&h->failed);
    if (ok) held_finish(h, s->ncols);
    pthread_mutex_lock(&s->mu);
    s->hold_state = ok ? HOLD_READY : HOLD_NEVER;
    if (!ok) s->held = NULL;
    pthread_mutex_unlock(&s->mu);
    if (!ok) held_free(h);
  }
  if (c) conn_put(s, c);
  pthread_mutex_lock(&s->mu);
  h = s->hold_state == HOLD_READY ? s->held : NULL;
  pthread_mutex_unlock(&s->mu);
  return h;
}

/* Reserves the bytes of the variable-length columns: their bound when the values are held
 * (`held`: the requested rows of the held table h, rows idx[0..n) of rs, or the query's
 * chunks when both are NULL), otherwise a first guess that put_row grows. */
static int reserve_var(fill_t* f, int held, const rowset_t* rs, const held_t* h, const int64_t* idx, int64_t n,
                       rill_error_t* err) {
  sq_t* s = f->s;
  for (int k = 0; k < f->nouts; k++) {
    rill_array_t* out = f->outs[k];
    f->vcap[k] = 0;
    if (!out || (s->types[k] != RILL_STRING && s->types[k] != RILL_BINARY)) continue;
    int64_t bound = 0;
    if (held) {
      for (int64_t i = 0; i < n; i++) {
        const sqval_t* v;
        sqval_t hv;
        if (h) {
          held_value(h, k, f->rows[i], &hv);
          v = &hv;
        } else if (rs) v = &rs->v[idx[i] * s->ncols + k];
        else v = &s->chunks[f->rows[i] / s->chunk_rows].v[(f->rows[i] % s->chunk_rows) * s->ncols + k];
        bound += (v->type == SQLITE_TEXT || v->type == SQLITE_BLOB) ? v->len : SQ_NUM_TEXT;
      }
    } else {
      bound = n * 16;
    }
    if (bound < 1) bound = 1;
    out->data_size = 0;
    int rc = rill_array_reserve(out, bound);
    if (rc != RILL_OK || !out->offsets)
      return rill_error_set(err, rc ? rc : RILL_EINVAL, "sqlite: column '%s': cannot reserve %lld bytes", s->names[k],
                            (long long)bound);
    out->offsets[0] = 0;
    f->vcap[k] = bound;
  }
  return RILL_OK;
}

/* The group's function: reads rows[0..n) once (table mode: on a connection of this call's
 * own; consecutive rows with one range statement converted as they are stepped, scattered
 * rows by point lookups in rowid order) and converts the values of every requested column,
 * row by row. A value that does not convert fails the call at that cell (unless on_error is
 * NULL: the cell becomes null); the cells of the rows before it are filled. */
static int sq_fill(const int64_t* rows, int64_t n, rill_array_t* const* outs, int nouts, rill_exec_t* exec,
                   void* ctx, rill_error_t* err) {
  sq_t* s = ctx;
  if (nouts != s->ncols)
    return rill__fail(err, RILL_EINVAL, "sqlite: %d outputs for %d columns", nouts, s->ncols);
  for (int64_t i = 0; i < n; i++)
    if (rows[i] < 0 || rows[i] >= s->nrows)
      return rill__fail(err, RILL_EINVAL, "sqlite: row %lld out of range (%lld rows)", (long long)rows[i],
                        (long long)s->nrows);
  int rc;
  for (int k = 0; k < nouts; k++)
    if (outs[k] && (rc = rill_exec_alloc(exec, outs[k], rill_type_scalar(s->types[k]), n)) != RILL_OK)
      return rill_error_set(err, rc, "sqlite: column '%s': cannot allocate %lld cells", s->names[k], (long long)n);
  if (n == 0) return RILL_OK;
  /* per-column scratch: a row of values, their bytes, reserved sizes */
  enum { SMALL = 32 };
  sqval_t row_small[SMALL];
  const char* ptrs_small[SMALL];
  int64_t vcap_small[SMALL];
  rill_array_t* rest_small[SMALL];
  sqval_t* row = row_small;
  const char** ptrs = ptrs_small;
  int64_t* vcap = vcap_small;
  rill_array_t** rest = rest_small;
  void* scratch = NULL;
  if (s->ncols > SMALL) {
    size_t each = sizeof *row + sizeof *ptrs + sizeof *vcap + sizeof *rest;
    if (!(scratch = rill__alloc((size_t)s->ncols * each))) return rill__fail(err, RILL_ENOMEM, "sqlite: out of memory");
    row = scratch;
    vcap = (int64_t*)(row + s->ncols);
    ptrs = (const char**)(vcap + s->ncols);
    rest = (rill_array_t**)(ptrs + s->ncols);
  }
  fill_t f = {.s = s, .outs = outs, .nouts = nouts, .rows = rows, .vcap = vcap};
  conn_t* c = NULL;
  int consecutive = 1;
  for (int64_t i = 1; i < n && consecutive; i++) consecutive = rows[i] == rows[i - 1] + 1;
  const held_t* h = s->table ? held_for(s, n, !consecutive) : NULL;
  if (!s->table) {
    rc = reserve_var(&f, 1, NULL, NULL, NULL, n, err);
    for (int64_t i = 0; i < n && rc == RILL_OK; i++)
      rc = put_held_row(&f, i, &s->chunks[rows[i] / s->chunk_rows], rows[i] % s->chunk_rows, ptrs, err);
  } else if (h) {
    /* columns that cannot fail are gathered whole; the others go row by row below */
    rc = RILL_OK;
    int nrest = 0;
    for (int k = 0; k < nouts && rc == RILL_OK; k++) {
      rest[k] = outs[k];
      if (outs[k] && held_gather(s, h, k, rows, n, outs[k], &rc, err)) rest[k] = NULL;
      nrest += rest[k] != NULL;
    }
    f.outs = rest;
    if (rc == RILL_OK && nrest) rc = reserve_var(&f, 1, NULL, h, NULL, n, err);
    for (int64_t i = 0; i < n && rc == RILL_OK && nrest; i++) {
      for (int k = 0; k < s->ncols; k++)
        if (rest[k]) ptrs[k] = held_value(h, k, rows[i], &row[k]);
      rc = put_row(&f, i, row, ptrs, err);
    }
  } else if (!(c = conn_get(s, err))) {
    rc = err ? err->code : RILL_ESQL;
  } else if (consecutive) {
    rc = reserve_var(&f, 0, NULL, NULL, NULL, n, err);
    if (rc == RILL_OK) rc = read_range(&f, c, row, ptrs, n, err);
  } else {
    rc = fetch_points(s, c, rows, n, err);
    const int64_t* pos = c->order + 2 * n;
    if (rc == RILL_OK) rc = reserve_var(&f, 1, &c->rs, NULL, pos, n, err);
    for (int64_t i = 0; i < n && rc == RILL_OK; i++) rc = put_held_row(&f, i, &c->rs, pos[i], ptrs, err);
  }
  for (int k = 0; k < nouts; k++) {
    rill_array_t* out = outs[k];
    if (!out || (s->types[k] != RILL_STRING && s->types[k] != RILL_BINARY) || !out->offsets) continue;
    for (int64_t i = 0; i < n; i++)
      if (out->offsets[i + 1] < out->offsets[i]) out->offsets[i + 1] = out->offsets[i]; /* after an error */
    out->data_size = out->offsets[n];
    if (rill__array_var_commit(out, n) != RILL_OK && rc == RILL_OK)
      rc = rill__fail(err, RILL_EINVAL, "sqlite: column '%s': cannot commit %lld cells", s->names[k], (long long)n);
  }
  if (c) conn_put(s, c);
  rill__free(scratch);
  rill__exec_count_nulled(exec, f.nulled);
  return rc;
}

/* ------------------------------------------------------------------ opening */

static int contains_ci(const char* s, const char* w) {
  size_t n = strlen(w);
  for (; *s; s++) {
    size_t k = 0;
    while (k < n && s[k] && (s[k] | 0x20) == (w[k] | 0x20)) k++;
    if (k == n) return 1;
  }
  return 0;
}

/* Type from the declared type; 0 when it must come from the values. */
static rill_dtype_t decl_dtype(const char* decl) {
  if (!decl || !*decl) return 0;
  if (contains_ci(decl, "BOOL")) return RILL_BOOL;
  if (contains_ci(decl, "INT")) return RILL_INT64;
  if (contains_ci(decl, "CHAR") || contains_ci(decl, "CLOB") || contains_ci(decl, "TEXT")) return RILL_STRING;
  if (contains_ci(decl, "BLOB")) return RILL_BINARY;
  if (contains_ci(decl, "REAL") || contains_ci(decl, "FLOA") || contains_ci(decl, "DOUB")) return RILL_FLOAT64;
  if (contains_ci(decl, "DATE") || contains_ci(decl, "TIME")) return RILL_TIMESTAMP_US;
  return 0;
}

/* Type from the values a column holds in a sample. */
static rill_dtype_t value_dtype(const rowset_t* r, int ncols, int k) {
  int seen_int = 0, seen_float = 0, seen_text = 0, seen_blob = 0;
  for (int64_t i = 0; i < r->n; i++) {
    int t = r->v[i * ncols + k].type;
    seen_int |= t == SQLITE_INTEGER;
    seen_float |= t == SQLITE_FLOAT;
    seen_text |= t == SQLITE_TEXT;
    seen_blob |= t == SQLITE_BLOB;
  }
  if (seen_blob) return RILL_BINARY;
  if (seen_text) return RILL_STRING;
  if (seen_float) return RILL_FLOAT64;
  if (seen_int) return RILL_INT64;
  return RILL_STRING;
}

static int is_table_name(const char* sql) {
  if (!sql || !*sql) return 0;
  int dots = 0;
  for (const char* p = sql; *p; p++) {
    char c = *p;
    if (c == '.') {
      if (p == sql || !p[1] || ++dots > 1) return 0;
      continue;
    }
    if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (c >= '0' && c <= '9'))) return 0;
    if (c >= '0' && c <= '9' && (p == sql || p[-1] == '.')) return 0;
  }
  return 1;
}

static int bind_params(sqlite3* db, sqlite3_stmt* st, const rill_sql_param_t* params, int nparams, const char* sql,
                       rill_error_t* err) {
  if (nparams != sqlite3_bind_parameter_count(st))
    return rill__fail(err, RILL_EINVAL, "sqlite: the statement takes %d parameters, %d given (SQL: %.300s)",
                      sqlite3_bind_parameter_count(st), nparams, sql);
  for (int p = 0; p < nparams; p++) {
    const rill_sql_param_t* q = &params[p];
    int rc;
    switch (q->kind) {
    case RILL_SQL_NULL: rc = sqlite3_bind_null(st, p + 1); break;
    case RILL_SQL_INT64: rc = sqlite3_bind_int64(st, p + 1, q->i); break;
    case RILL_SQL_DOUBLE: rc = sqlite3_bind_double(st, p + 1, q->d); break;
    case RILL_SQL_TEXT:
      if (!q->bytes) return rill__fail(err, RILL_EINVAL, "sqlite: parameter %d: NULL text", p + 1);
      rc = sqlite3_bind_text64(st, p + 1, q->bytes, q->size < 0 ? strlen(q->bytes) : (sqlite3_uint64)q->size,
                               SQLITE_TRANSIENT, SQLITE_UTF8);
      break;
    case RILL_SQL_BLOB:
      if (!q->bytes && q->size > 0) return rill__fail(err, RILL_EINVAL, "sqlite: parameter %d: NULL blob", p + 1);
      rc = sqlite3_bind_blob64(st, p + 1, q->bytes ? q->bytes : "", q->size > 0 ? (sqlite3_uint64)q->size : 0,
                               SQLITE_TRANSIENT);
      break;
    default:
      return rill__fail(err, RILL_EINVAL, "sqlite: parameter %d: unknown kind %d", p + 1, (int)q->kind);
    }
    if (rc != SQLITE_OK) return sq_fail(err, RILL_ESQL, db, sql);
  }
  return RILL_OK;
}

/* Column names and declared types from a prepared statement. */
static int read_columns(sq_t* s, sqlite3_stmt* st, rill_error_t* err) {
  s->ncols = sqlite3_column_count(st);
  if (s->ncols == 0) return rill__fail(err, RILL_EINVAL, "sqlite: the statement returns no columns (SQL: %.300s)", s->sql);
  s->names = rill__calloc((size_t)s->ncols, sizeof *s->names);
  s->types = rill__calloc((size_t)s->ncols, sizeof *s->types);
  if (!s->names || !s->types) return rill__fail(err, RILL_ENOMEM, "sqlite: out of memory");
  for (int k = 0; k < s->ncols; k++) {
    const char* nm = sqlite3_column_name(st, k);
    int64_t bad;
    s->names[k] = rill__column_name_in(s->encoding, nm, nm ? strlen(nm) : 0, k, &bad);
    if (bad >= 0)
      return rill__fail(err, RILL_EFORMAT,
                        "sqlite: the name of column %d is not UTF-8 text (byte 0x%02X at byte %lld; see the encoding "
                        "option) (SQL: %.300s)", k + 1, (unsigned char)nm[bad], (long long)bad, s->sql);
    if (!s->names[k]) return rill__fail(err, RILL_ENOMEM, "sqlite: out of memory");
    s->types[k] = decl_dtype(sqlite3_column_decltype(st, k));
  }
  if (rill__unique_names(s->names, s->ncols, ':') != RILL_OK) return rill__fail(err, RILL_ENOMEM, "sqlite: out of memory");
  return RILL_OK;
}

static int apply_overrides(sq_t* s, const rill_sqlite_opts_t* o, rill_error_t* err) {
  for (int i = 0; i < o->ncolumns; i++) {
    const rill_csv_column_t* ov = &o->columns[i];
    int k = rill__override_column(ov, s->names, s->ncols, "sqlite", "result", err);
    if (k < 0) return k;
    if (!rill__text_dtype_supported(ov->dtype) && ov->dtype != RILL_BINARY)
      return rill__fail(err, RILL_ENOTSUP, "sqlite: column '%s': dtype %s is not supported", s->names[k],
                        rill_dtype_name(ov->dtype));
    s->types[k] = ov->dtype;
  }
  return RILL_OK;
}

/* Query mode: runs the statement, keeping every row in chunks. */
static int materialise(sq_t* s, sqlite3* db, sqlite3_stmt* st, rill_error_t* err) {
  int64_t cap = 0;
  int step;
  s->nrows = 0;
  while ((step = sqlite3_step(st)) == SQLITE_ROW) {
    int64_t ch = s->nrows / s->chunk_rows;
    if (ch >= s->nchunks) {
      if (ch >= cap) {
        int64_t was = cap;
        rowset_t* nr = rill__grow(s->chunks, &cap, was, ch + 1, sizeof *nr, 16);
        if (!nr) return rill__fail(err, RILL_ENOMEM, "sqlite: out of memory holding the result");
        memset(nr + was, 0, (size_t)(cap - was) * sizeof *nr);
        s->chunks = nr;
      }
      s->nchunks = ch + 1;
    }
    if (rowset_add(&s->chunks[ch], st, s->ncols) != RILL_OK)
      return rill__fail(err, RILL_ENOMEM, "sqlite: out of memory holding the result");
    s->nrows++;
  }
  if (step != SQLITE_DONE) return sq_fail(err, RILL_ESQL, db, s->sql);
  return RILL_OK;
}

static int64_t pragma_int(sqlite3* db, const char* sql) {
  sqlite3_stmt* st = NULL;
  int64_t v = -1;
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
    v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

/* Table mode: row count and rowid layout. Returns 1 when the table has no rowid. */
static int table_layout(sq_t* s, sqlite3* db, rill_error_t* err) {
  char sql[1200];
  sqlite3_stmt* st = NULL;
  /* three subqueries, not one aggregate: alone, count(*) counts the cells of each page and
   * min/max(rowid) seek one end of the B-tree; together they would step through every row */
  snprintf(sql, sizeof sql, "SELECT (SELECT count(*) FROM %s), (SELECT min(rowid) FROM %s), (SELECT max(rowid) FROM %s)",
           s->table, s->table, s->table);
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
    sqlite3_finalize(st);
    return 1; /* WITHOUT ROWID table (or a view): read it as a query */
  }
  int step = sqlite3_step(st);
  if (step != SQLITE_ROW) {
    int rc = sq_fail(err, RILL_ESQL, db, sql);
    sqlite3_finalize(st);
    return rc;
  }
  s->nrows = sqlite3_column_int64(st, 0);
  int64_t lo = sqlite3_column_int64(st, 1), hi = sqlite3_column_int64(st, 2);
  sqlite3_finalize(st);
  s->rowid_base = lo;
  /* point lookups keep up to the whole database in their connection's page cache, capped */
  int64_t pages = pragma_int(db, "PRAGMA page_count"), page_size = pragma_int(db, "PRAGMA page_size");
  if (pages > 0 && page_size > 0) {
    int64_t kib = pages * (page_size / 1024 + 1) + 1024;
    s->cache_kib = kib < SQ_POINT_CACHE_MAX_KIB ? kib : SQ_POINT_CACHE_MAX_KIB;
  }
  /* dense rowids: no list (the span is taken unsigned: rowids may lie at both ends of int64) */
  if (s->nrows == 0 || (hi >= lo && (uint64_t)hi - (uint64_t)lo == (uint64_t)s->nrows - 1)) return RILL_OK;
  s->rowids = rill__alloc((size_t)s->nrows * sizeof *s->rowids);
  if (!s->rowids) return rill__fail(err, RILL_ENOMEM, "sqlite: out of memory for %lld rowids", (long long)s->nrows);
  snprintf(sql, sizeof sql, "SELECT rowid FROM %s ORDER BY rowid", s->table);
  if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
    sqlite3_finalize(st);
    return sq_fail(err, RILL_ESQL, db, sql);
  }
  int64_t n = 0;
  while ((step = sqlite3_step(st)) == SQLITE_ROW && n < s->nrows) s->rowids[n++] = sqlite3_column_int64(st, 0);
  int rc = RILL_OK;
  if (step != SQLITE_ROW && step != SQLITE_DONE) rc = sq_fail(err, RILL_ESQL, db, sql);
  else if (n != s->nrows) rc = rill__fail(err, RILL_ESQL, "sqlite: table %s changed while opened", s->table);
  sqlite3_finalize(st);
  return rc;
}

static int sq_open(sq_t* s, sqlite3* db, const rill_sql_param_t* params, int nparams, const rill_sqlite_opts_t* o,
                   rill_df_t** out, rill_error_t* err) {
  int rc;
  sqlite3_stmt* st = NULL;
  char quoted[520];
  if (is_table_name(s->sql) && strlen(s->sql) < 240) {
    if (nparams) return rill__fail(err, RILL_EINVAL, "sqlite: a table name takes no parameters (SQL: %s)", s->sql);
    const char* dot = strchr(s->sql, '.');
    if (dot) snprintf(quoted, sizeof quoted, "\"%.*s\".\"%s\"", (int)(dot - s->sql), s->sql, dot + 1);
    else snprintf(quoted, sizeof quoted, "\"%s\"", s->sql);
    s->table = rill__strdup(quoted);
    if (!s->table) return rill__fail(err, RILL_ENOMEM, "sqlite: out of memory");
    char sql[600];
    snprintf(sql, sizeof sql, "SELECT * FROM %s", quoted);
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
      rc = rill__fail(err, RILL_ESQL, "sqlite: %s (SQL: %s)", sqlite3_errmsg(db), s->sql);
      sqlite3_finalize(st);
      return rc;
    }
    rc = table_layout(s, db, err);
    if (rc < 0) { sqlite3_finalize(st); return rc; }
    if (rc == 1) { /* no rowid: materialise */
      rill__free(s->table);
      s->table = NULL;
    }
  } else {
    if (sqlite3_prepare_v2(db, s->sql, -1, &st, NULL) != SQLITE_OK) {
      rc = sq_fail(err, RILL_ESQL, db, s->sql);
      sqlite3_finalize(st);
      return rc;
    }
    if (!st) return rill__fail(err, RILL_EINVAL, "sqlite: empty statement (SQL: %.300s)", s->sql);
    if ((rc = bind_params(db, st, params, nparams, s->sql, err)) != RILL_OK) { sqlite3_finalize(st); return rc; }
  }
  if ((rc = read_columns(s, st, err)) != RILL_OK) { sqlite3_finalize(st); return rc; }
  if ((rc = apply_overrides(s, o, err)) != RILL_OK) { sqlite3_finalize(st); return rc; }
  int64_t infer = o->infer_rows > 0 ? o->infer_rows : SQ_DEFAULT_INFER;
  int need_infer = 0;
  for (int k = 0; k < s->ncols; k++) need_infer |= s->types[k] == 0;
  if (s->table) {
    if (need_infer) {
      rowset_t sample = {0};
      int step;
      while (sample.n < infer && (step = sqlite3_step(st)) == SQLITE_ROW)
        if (rowset_add(&sample, st, s->ncols) != RILL_OK) { rowset_free(&sample); sqlite3_finalize(st); return rill__fail(err, RILL_ENOMEM, "sqlite: out of memory"); }
      for (int k = 0; k < s->ncols; k++)
        if (!s->types[k]) s->types[k] = value_dtype(&sample, s->ncols, k);
      rowset_free(&sample);
    }
  } else {
    rc = materialise(s, db, st, err);
    if (rc != RILL_OK) { sqlite3_finalize(st); return rc; }
    if (need_infer) {
      for (int k = 0; k < s->ncols; k++) {
        if (s->types[k]) continue;
        rowset_t sample = s->nchunks ? s->chunks[0] : (rowset_t){0};
        if (sample.n > infer) sample.n = infer;
        s->types[k] = value_dtype(&sample, s->ncols, k);
      }
    }
  }
  sqlite3_finalize(st);
  rill_type_t* types = rill__alloc((size_t)s->ncols * sizeof *types);
  if (!types) return rill__fail(err, RILL_ENOMEM, "sqlite: out of memory");
  for (int k = 0; k < s->ncols; k++) types[k] = rill_type_scalar(s->types[k]);
  /* table mode fetches whole rows per task (one read transaction each) */
  rill_stage_opts_t so = {.where = RILL_STAGE_CPU, .on_error = o->on_error, .nullable = 1,
                          .grain = s->table ? 256 : 4096};
  atomic_fetch_add(&s->refs, 1);
  rc = rill__df_new_source_group(s->nrows, (const char* const*)s->names, types, NULL, s->ncols, sq_fill, s,
                                 sq_unref_ctx, &so, out, err);
  rill__free(types);
  return rc;
}

static int sq_new(const char* sql, const rill_sqlite_opts_t* o, sq_t** out, rill_error_t* err) {
  if (!sql) return rill__fail(err, RILL_EINVAL, "sqlite: sql is required");
  if (o->ncolumns < 0 || (o->ncolumns > 0 && !o->columns))
    return rill__fail(err, RILL_EINVAL, "sqlite: ncolumns %d without columns", o->ncolumns);
  if ((unsigned)o->encoding > RILL_CSV_LATIN1)
    return rill__fail(err, RILL_EINVAL, "sqlite: unknown encoding %d", (int)o->encoding);
  sq_t* s = rill__calloc(1, sizeof *s);
  if (!s || !(s->sql = rill__strdup(sql))) {
    rill__free(s);
    return rill__fail(err, RILL_ENOMEM, "sqlite: out of memory");
  }
  atomic_init(&s->refs, 1);
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  s->on_error = o->on_error;
  s->encoding = o->encoding;
  s->busy_ms = o->busy_timeout_ms;
  s->chunk_rows = o->chunk_rows > 0 ? o->chunk_rows : SQ_DEFAULT_CHUNK;
  s->hold_max = o->table_hold_bytes ? o->table_hold_bytes : SQ_DEFAULT_HOLD_MAX;
  if (s->hold_max < 0) s->hold_state = HOLD_NEVER;
  *out = s;
  return RILL_OK;
}

/* The checks and setup shared by both entry points: `target` (the path or the db, named
 * `what` in the message) is required; *o receives the options, *s a new source. */
static int sq_begin(const void* target, const char* what, const char* sql, const rill_sql_param_t* params,
                    int nparams, const rill_sqlite_opts_t* opts, rill_sqlite_opts_t* o, sq_t** s, rill_df_t** out,
                    rill_error_t* err) {
  *o = (rill_sqlite_opts_t){0};
  if (opts) *o = *opts;
  if (!out) return rill__fail(err, RILL_EINVAL, "sqlite: out is required");
  *out = NULL;
  if (nparams < 0 || (nparams > 0 && !params)) return rill__fail(err, RILL_EINVAL, "sqlite: %d parameters without params", nparams);
  if (!target) return rill__fail(err, RILL_EINVAL, "sqlite: %s is required", what);
  return sq_new(sql, o, s, err);
}

int rill_df_from_sqlite(const char* path, const char* sql, const rill_sql_param_t* params, int nparams,
                        const rill_sqlite_opts_t* opts, rill_df_t** out, rill_error_t* err) {
  rill_sqlite_opts_t o;
  sq_t* s;
  int rc = sq_begin(path, "path", sql, params, nparams, opts, &o, &s, out, err);
  if (rc != RILL_OK) return rc;
  sqlite3* db = NULL;
  if ((rc = open_db(*path ? path : ":memory:", o.busy_timeout_ms, &db, err)) != RILL_OK) {
    sq_unref(s);
    return rc;
  }
  /* an in-memory database exists only on its one connection */
  int memory = !*path || strcmp(path, ":memory:") == 0 || strstr(path, "mode=memory") || strstr(path, ":memory:");
  if (memory) {
    s->shared_db = db;
    s->own_shared = 1;
  } else if (!(s->path = rill__strdup(path))) {
    sqlite3_close(db);
    sq_unref(s);
    return rill__fail(err, RILL_ENOMEM, "sqlite: out of memory");
  }
  rc = sq_open(s, db, params, nparams, &o, out, err);
  if (rc != RILL_OK && rc != RILL_ENOMEM && rc != RILL_EINVAL && strstr(err ? err->message : "", path) == NULL && err) {
    /* name the database in the message */
    char msg[RILL_ERROR_MESSAGE_SIZE];
    snprintf(msg, sizeof msg, "%s", err->message);
    rill__fail(err, rc, "%s: %s", path, msg);
  }
  if (!memory) sqlite3_close(db);
  sq_unref(s);
  return rc;
}

int rill_df_from_sqlite_db(void* db, const char* sql, const rill_sql_param_t* params, int nparams,
                           const rill_sqlite_opts_t* opts, rill_df_t** out, rill_error_t* err) {
  rill_sqlite_opts_t o;
  sq_t* s;
  int rc = sq_begin(db, "db", sql, params, nparams, opts, &o, &s, out, err);
  if (rc != RILL_OK) return rc;
  s->shared_db = db;
  rc = sq_open(s, db, params, nparams, &o, out, err);
  sq_unref(s);
  return rc;
}

#else /* !RILL_HAVE_SQLITE */

int rill_df_from_sqlite(const char* path, const char* sql, const rill_sql_param_t* params, int nparams,
                        const rill_sqlite_opts_t* opts, rill_df_t** out, rill_error_t* err) {
  (void)path; (void)sql; (void)params; (void)nparams; (void)opts;
  if (out) *out = NULL;
  return rill__fail(err, RILL_ENOTSUP, "SQLite source: built without libsqlite3");
}

int rill_df_from_sqlite_db(void* db, const char* sql, const rill_sql_param_t* params, int nparams,
                           const rill_sqlite_opts_t* opts, rill_df_t** out, rill_error_t* err) {
  (void)db; (void)sql; (void)params; (void)nparams; (void)opts;
  if (out) *out = NULL;
  return rill__fail(err, RILL_ENOTSUP, "SQLite source: built without libsqlite3");
}

#endif
