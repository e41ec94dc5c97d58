/* rill.DataFrame: mirrors rill_df_t. Columns, schema, the operators (map and reduce with a
 * Python callable (pystage.c), batch, shuffle, shard, filter, file reading, image operators,
 * CUDA operators), iterators, Arrow stream exports and the dataframe interchange protocol. */
#include "rillpy.h"

#include <stdlib.h>
#include <string.h>

/* ================================================================ the DataFrame type */

#define DF(o) (((RillDataFrame*)(o))->df)

PyObject* rillpy_df_new(rill_df_t* df, PyObject* keep) {
  RillDataFrame* self = (RillDataFrame*)RillDataFrame_Type.tp_alloc(&RillDataFrame_Type, 0);
  if (!self) {
    Py_BEGIN_ALLOW_THREADS
    rill_df_free(df);
    Py_END_ALLOW_THREADS
    return NULL;
  }
  self->df = df;
  self->keep = PyList_New(0);
  if (!self->keep || (keep && PyList_Append(self->keep, keep) < 0)) {
    Py_DECREF(self);
    return NULL;
  }
  return (PyObject*)self;
}

PyObject* rillpy_df_result(int rc, const rill_error_t* err, rill_df_t* df) {
  if (rc < 0) return rillpy_raise(rc, err);
  return rillpy_df_new(df, NULL);
}

/* The result of an operator that derives a dataframe (rc, err and df from its call): the new
 * dataframe, inheriting the class names of its parent and the batched flag given; or the
 * raised error. */
static PyObject* derived(RillDataFrame* parent, int rc, const rill_error_t* err, rill_df_t* df, int batched) {
  if (rc < 0) return rillpy_raise(rc, err);
  PyObject* o = rillpy_df_new(df, (PyObject*)parent);
  if (!o) return NULL;
  RillDataFrame* d = (RillDataFrame*)o;
  d->classes = Py_XNewRef(parent->classes);
  d->batched = batched;
  return o;
}

static void df_dealloc(RillDataFrame* self) {
  if (self->weakrefs) PyObject_ClearWeakRefs((PyObject*)self);
  rill_df_t* df = self->df;
  self->df = NULL;
  if (df) {
    Py_BEGIN_ALLOW_THREADS
    rill_df_free(df);
    Py_END_ALLOW_THREADS
  }
  Py_CLEAR(self->keep);
  Py_CLEAR(self->classes);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static PyObject* df_tp_new(PyTypeObject* type, PyObject* args, PyObject* kwds) {
  PyErr_SetString(PyExc_TypeError,
                  "rill.DataFrame cannot be created directly; use rill.from_numpy, rill.from_arrow, "
                  "rill.from_csv, rill.from_sqlite, rill.from_files, rill.from_image_folder or rill.from_tar");
  return NULL;
}

static Py_ssize_t df_len(RillDataFrame* self) { return (Py_ssize_t)rill_df_rows(self->df); }

static PyObject* df_num_rows(RillDataFrame* self, void* c) { return PyLong_FromLongLong(rill_df_rows(self->df)); }
static PyObject* df_num_columns(RillDataFrame* self, void* c) { return PyLong_FromLong(rill_df_ncolumns(self->df)); }

PyObject* rillpy_column_list(const rill_df_t* df, const int* columns, int n, int fields) {
  if (!columns) n = rill_df_ncolumns(df);
  PyObject* l = PyList_New(n);
  for (int i = 0; l && i < n; i++) {
    int c = columns ? columns[i] : i;
    const rill_field_t* f = rill_df_field(df, c);
    PyObject* item = !f ? rillpy_invalid("no column %d", c) : fields ? rillpy_field(f) : rillpy_text(f->name);
    if (!item) {
      Py_CLEAR(l);
      break;
    }
    PyList_SET_ITEM(l, i, item);
  }
  return l;
}

static PyObject* df_columns(RillDataFrame* self, void* c) { return rillpy_column_list(self->df, NULL, 0, 0); }
static PyObject* df_schema(RillDataFrame* self, void* c) { return rillpy_column_list(self->df, NULL, 0, 1); }

static PyObject* df_is_batched(RillDataFrame* self, void* c) { return PyBool_FromLong(self->batched); }

static PyObject* df_classes(RillDataFrame* self, void* c) {
  if (!self->classes) Py_RETURN_NONE;
  return PySequence_List(self->classes);
}

/* rill_csv_bad_rows: None for a dataframe without CSV columns (or a batched one), else the
 * count (`which` 0) or the list of (line, fields) of the first ones kept (`which` 1). */
static PyObject* df_bad_rows_of(RillDataFrame* self, int which) {
  rill_csv_bad_row_t* rows = PyMem_Malloc(RILL_CSV_BAD_ROWS_KEPT * sizeof *rows);
  if (!rows) return PyErr_NoMemory();
  rill_error_t err = {0};
  int64_t n = rill_csv_bad_rows(self->df, rows, RILL_CSV_BAD_ROWS_KEPT, &err);
  PyObject* out = NULL;
  if (n < 0) {
    out = Py_NewRef(Py_None);
  } else if (which == 0) {
    out = PyLong_FromLongLong(n);
  } else {
    int64_t kept = n < RILL_CSV_BAD_ROWS_KEPT ? n : RILL_CSV_BAD_ROWS_KEPT;
    out = PyList_New((Py_ssize_t)kept);
    for (int64_t i = 0; out && i < kept; i++) {
      PyObject* t = Py_BuildValue("(LL)", (long long)rows[i].line, (long long)rows[i].fields);
      if (!t) Py_CLEAR(out);
      else PyList_SET_ITEM(out, (Py_ssize_t)i, t);
    }
  }
  PyMem_Free(rows);
  return out;
}

/* rill_df_concat_parts: the parts of a concatenation (each keeps self, and what self keeps,
 * alive), or an empty tuple. */
static PyObject* df_parts(RillDataFrame* self, void* c) {
  int n = rill_df_concat_parts(self->df, NULL, 0);
  PyObject* out = PyTuple_New(n);
  rill_df_t** parts = n > 0 ? PyMem_Calloc((size_t)n, sizeof *parts) : NULL;
  if (!out || (n > 0 && !parts)) {
    Py_XDECREF(out);
    PyMem_Free(parts);
    return PyErr_NoMemory();
  }
  if (n > 0) rill_df_concat_parts(self->df, parts, n);
  for (int i = 0; i < n; i++) {
    PyObject* d = rillpy_df_new(parts[i], (PyObject*)self); /* takes the reference, also on failure */
    parts[i] = NULL;
    if (!d) {
      for (int k = i + 1; k < n; k++) rill_df_free(parts[k]);
      Py_CLEAR(out);
      break;
    }
    ((RillDataFrame*)d)->classes = Py_XNewRef(self->classes);
    PyTuple_SET_ITEM(out, i, d);
  }
  PyMem_Free(parts);
  return out;
}

static PyObject* df_bad_row_count(RillDataFrame* self, void* c) { return df_bad_rows_of(self, 0); }
static PyObject* df_bad_rows(RillDataFrame* self, void* c) { return df_bad_rows_of(self, 1); }

static PyObject* df_field(RillDataFrame* self, PyObject* arg) {
  int col;
  if (rillpy_parse_column(self->df, arg, &col) < 0) return NULL;
  return rillpy_field(rill_df_field(self->df, col));
}

static PyObject* df_column_index(RillDataFrame* self, PyObject* arg) {
  int col;
  if (rillpy_parse_column(self->df, arg, &col) < 0) return NULL;
  return PyLong_FromLong(col);
}

static PyObject* df_repr(RillDataFrame* self) {
  int n = rill_df_ncolumns(self->df);
  PyObject* parts = PyList_New(0);
  for (int i = 0; parts && i < n; i++) {
    const rill_field_t* f = rill_df_field(self->df, i);
    char tb[128];
    if (rillpy_append(parts, PyUnicode_FromFormat("%s: %s%s", f->name, rill_type_format(&f->type, tb, sizeof tb),
                                                  f->nullable ? "?" : "")) < 0)
      Py_CLEAR(parts);
  }
  PyObject* joined = rillpy_join(parts);
  if (!joined) return NULL;
  PyObject* r = PyUnicode_FromFormat("rill.DataFrame(%s%lld rows; %U)", self->batched ? "batched, " : "",
                                     (long long)rill_df_rows(self->df), joined);
  Py_DECREF(joined);
  return r;
}

/* ---------------------------------------------------------------- argument helpers */

static int parse_stage_opts(PyObject* where, long long grain, PyObject* on_error, int nullable,
                            rill_stage_opts_t* o) {
  memset(o, 0, sizeof *o);
  if (rillpy_parse_grain(grain, &o->grain) < 0) return -1;
  o->nullable = nullable;
  if (rillpy_parse_where(where, &o->where) < 0) return -1;
  if (rillpy_parse_on_error(on_error, &o->on_error) < 0) return -1;
  return 0;
}

/* A column index from the column argument (name or index). */
static int column_arg(RillDataFrame* self, PyObject* o, int* col) { return rillpy_parse_column(self->df, o, col); }

/* size: int (both sides, or the shorter side when `short_side`) or (h, w). */
static int parse_size(PyObject* o, int out[2], int short_side) {
  if (PyLong_Check(o)) {
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred()) return -1;
    out[0] = (int)v;
    out[1] = short_side ? 0 : (int)v;
    return 0;
  }
  PyObject* seq = PySequence_Fast(o, "size must be an int or a (height, width) pair");
  if (!seq) return -1;
  if (PySequence_Fast_GET_SIZE(seq) != 2) {
    Py_DECREF(seq);
    rillpy_invalid("size must be an int or a (height, width) pair");
    return -1;
  }
  for (int i = 0; i < 2; i++) {
    long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
    if (v == -1 && PyErr_Occurred()) {
      Py_DECREF(seq);
      return -1;
    }
    out[i] = (int)v;
  }
  Py_DECREF(seq);
  return 0;
}

/* A sequence of at most `max` floats (or one float) into out; returns the count. */
static int parse_doubles(PyObject* o, double* out, int max, const char* what) {
  if (PyFloat_Check(o) || PyLong_Check(o)) {
    out[0] = PyFloat_AsDouble(o);
    return PyErr_Occurred() ? -1 : 1;
  }
  PyObject* seq = PySequence_Fast(o, "expected a sequence of floats");
  if (!seq) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n > max) {
    Py_DECREF(seq);
    rillpy_invalid("%s takes at most %d values, got %zd", what, max, n);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    out[i] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
    if (PyErr_Occurred()) {
      Py_DECREF(seq);
      return -1;
    }
  }
  Py_DECREF(seq);
  return (int)n;
}

/* The indices 0..n-1 of all the columns of df (PyMem; NULL raised). */
static int* all_columns(rill_df_t* df, int* n) {
  *n = rill_df_ncolumns(df);
  int* cols = PyMem_Malloc(sizeof *cols * (size_t)(*n ? *n : 1));
  if (!cols) return (int*)PyErr_NoMemory();
  for (int i = 0; i < *n; i++) cols[i] = i;
  return cols;
}

/* A (min, max) pair of floats into out (NULL or None: out is kept). */
static int parse_range(PyObject* o, double out[2], const char* what) {
  if (!o || o == Py_None) return 0;
  int k = parse_doubles(o, out, 2, what);
  if (k < 0) return -1;
  if (k != 2) {
    rillpy_invalid("%s must be a (min, max) pair", what);
    return -1;
  }
  return 0;
}

/* The options resize and random_resized_crop share, into their fields of either options
 * struct: size (int: both sides, or the shorter side when `short_side`; or (h, w)),
 * interpolation and on_error; and the input column. -1 (raised). */
static int resize_opts(RillDataFrame* self, PyObject* column, int* col, PyObject* size, int short_side,
                       int out_size[2], PyObject* interp, rill_interp_t* interpolation, PyObject* on_error,
                       rill_on_error_t* on_error_out) {
  if (parse_size(size, out_size, short_side) < 0 || rillpy_parse_interp(interp, interpolation) < 0 ||
      rillpy_parse_on_error(on_error, on_error_out) < 0 || column_arg(self, column, col) < 0)
    return -1;
  return 0;
}

/* The result of an operator that adds a column: its index, or the raised error. */
static PyObject* added(int rc, const rill_error_t* err) {
  if (rc < 0) return rillpy_raise(rc, err);
  return PyLong_FromLong(rc);
}

/* ---------------------------------------------------------------- map / reduce */

static PyObject* df_map(RillDataFrame* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"name", "fn", "inputs", "dtype", "shape", "where", "grain", "on_error", "nullable", NULL};
  const char* name;
  PyObject *fn, *inputs, *dtype, *shape = Py_None, *where = Py_None, *on_error = Py_None;
  long long grain = 0;
  int nullable = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sOOO|O$OLOp:map", kwlist, &name, &fn, &inputs, &dtype, &shape,
                                   &where, &grain, &on_error, &nullable))
    return NULL;
  if (!PyCallable_Check(fn)) return PyErr_Format(PyExc_TypeError, "map: fn must be callable, got %s", Py_TYPE(fn)->tp_name);
  rill_type_t type;
  if (rillpy_parse_type(dtype, shape, &type) < 0) return NULL;
  if (type.dtype == RILL_BFLOAT16) return rillpy_invalid("map: a Python callable cannot produce bfloat16 cells");
  rill_stage_opts_t o;
  if (parse_stage_opts(where, grain, on_error, nullable, &o) < 0) return NULL;
  int* cols = NULL;
  int ncols = 0;
  if (PyUnicode_Check(inputs) || PyLong_Check(inputs)) {
    cols = PyMem_Malloc(sizeof *cols);
    if (!cols) return PyErr_NoMemory();
    ncols = 1;
    if (column_arg(self, inputs, &cols[0]) < 0) {
      PyMem_Free(cols);
      return NULL;
    }
  } else if (rillpy_parse_columns(self->df, inputs, &cols, &ncols) < 0) {
    return NULL;
  }
  if (ncols < 1) {
    PyMem_Free(cols);
    return rillpy_invalid("map: at least one input column is required");
  }
  void* c = rillpy_stage_new(fn, name, "map", type, o.nullable, o.on_error);
  if (!c) {
    PyMem_Free(cols);
    return NULL;
  }
  rill_error_t err;
  rill_error_clear(&err);
  int rc = rill_df_map(self->df, name, type, cols, ncols, rillpy_map_fn, c, rillpy_stage_free, &o, &err);
  PyMem_Free(cols);
  return added(rc, &err);
}

static PyObject* df_reduce(RillDataFrame* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"column", "k", "fn", "dtype", "shape", NULL};
  PyObject *column, *fn, *dtype, *shape = Py_None;
  long long k;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OLOO|O:reduce", kwlist, &column, &k, &fn, &dtype, &shape)) return NULL;
  if (!PyCallable_Check(fn))
    return PyErr_Format(PyExc_TypeError, "reduce: fn must be callable, got %s", Py_TYPE(fn)->tp_name);
  int col;
  if (column_arg(self, column, &col) < 0) return NULL;
  rill_type_t type;
  if (rillpy_parse_type(dtype, shape, &type) < 0) return NULL;
  if (type.dtype == RILL_BFLOAT16) return rillpy_invalid("reduce: a Python callable cannot produce bfloat16 cells");
  void* c = rillpy_stage_new(fn, rill_df_field(self->df, col)->name, "reduce", type, 0, RILL_ON_ERROR_RAISE);
  if (!c) return NULL;
  rill_error_t err;
  rill_error_clear(&err);
  rill_df_t* out = NULL;
  int rc = rill_df_reduce(self->df, col, k, type, rillpy_reduce_fn, c, rillpy_stage_free, &out, &err);
  return derived(self, rc, &err, out, 0);
}

/* ---------------------------------------------------------------- derived dataframes */

static PyObject* df_batch(RillDataFrame* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"size", "columns", "drop_last", "layout", "pinned", NULL};
  long long size;
  PyObject *columns = Py_None, *layout = Py_None;
  int drop_last = 0, pinned = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "L|O$pOp:batch", kwlist, &size, &columns, &drop_last, &layout, &pinned))
    return NULL;
  rill_batch_opts_t o = {0};
  o.drop_last = drop_last;
  o.pinned = pinned;
  if (rillpy_parse_layout(layout, &o.layout) < 0) return NULL;
  int* cols = NULL;
  int n = 0;
  if (rillpy_parse_columns(self->df, columns, &cols, &n) < 0) return NULL;
  if (!cols && !(cols = all_columns(self->df, &n))) return NULL;
  rill_error_t err;
  rill_error_clear(&err);
  rill_df_t* out = NULL;
  int rc = rill_df_batch(self->df, cols, n, size, &o, &out, &err);
  PyMem_Free(cols);
  return derived(self, rc, &err, out, 1);
}

static PyObject* df_shuffle(RillDataFrame* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"seed", NULL};
  unsigned long long seed = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|K:shuffle", kwlist, &seed)) return NULL;
  rill_error_t err;
  rill_error_clear(&err);
  rill_df_t* out = NULL;
  int rc = rill_df_shuffle(self->df, (uint64_t)seed, &out, &err);
  return derived(self, rc, &err, out, self->batched);
}

static PyObject* df_shard(RillDataFrame* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"rank", "world", NULL};
  int rank, world;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "ii:shard", kwlist, &rank, &world)) return NULL;
  rill_error_t err;
  rill_error_clear(&err);
  rill_df_t* out = NULL;
  int rc = rill_df_shard(self->df, rank, world, &out, &err);
  return derived(self, rc, &err, out, self->batched);
}

static PyObject* df_filter(RillDataFrame* self, PyObject* arg) {
  int col;
  if (column_arg(self, arg, &col) < 0) return NULL;
  rill_error_t err;
  rill_error_clear(&err);
  rill_df_t* out = NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS /* computes the kept rows (may run Python maps on workers) */
  rc = rill_df_filter(self->df, col, &out, &err);
  Py_END_ALLOW_THREADS
  return derived(self, rc, &err, out, self->batched);
}

/* The rows at positions v[0..n) (Python positions: negative ones count from the end) of self;
 * steals nothing, frees nothing. IndexError for a position outside the rows. */
static PyObject* take_rows(RillDataFrame* self, int64_t* v, Py_ssize_t n, const char* who) {
  int64_t rows = rill_df_rows(self->df);
  for (Py_ssize_t i = 0; i < n; i++) {
    if (v[i] < 0) v[i] += rows;
    if (v[i] < 0 || v[i] >= rows)
      return PyErr_Format(PyExc_IndexError, "%s: index %lld is out of range for %lld rows", who,
                          (long long)(v[i] < 0 ? v[i] - rows : v[i]), (long long)rows);
  }
  rill_error_t err;
  rill_error_clear(&err);
  rill_df_t* out = NULL;
  int rc = rill_df_take(self->df, v, (int64_t)n, &out, &err);
  return derived(self, rc, &err, out, self->batched);
}

static PyObject* df_take(RillDataFrame* self, PyObject* indices) {
  if (PyUnicode_Check(indices) || PyBytes_Check(indices) || PyLong_Check(indices))
    return PyErr_Format(PyExc_TypeError, "take: indices must be a sequence of int, not %s", Py_TYPE(indices)->tp_name);
  if (PyObject_CheckBuffer(indices)) { /* a contiguous 1-d int64 array: copied at once */
    Py_buffer b;
    if (PyObject_GetBuffer(indices, &b, PyBUF_FORMAT | PyBUF_ND) == 0) {
      const char* f = b.format ? b.format : "B";
      if (*f == '@' || *f == '=' || *f == '<') f++;
      PyObject* res = NULL;
      int done = 0;
      if (b.ndim == 1 && b.itemsize == 8 && (*f == 'q' || *f == 'l') && !f[1]) {
        Py_ssize_t n = b.len / 8;
        int64_t* v = PyMem_Malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
        if (v) {
          memcpy(v, b.buf, (size_t)b.len);
          res = take_rows(self, v, n, "take");
          PyMem_Free(v);
        } else {
          PyErr_NoMemory();
        }
        done = 1;
      }
      PyBuffer_Release(&b);
      if (done) return res;
    } else {
      PyErr_Clear(); /* not contiguous: item by item */
    }
  }
  PyObject* seq = PySequence_Fast(indices, "take: indices must be a sequence of int (or a 1-d integer array)");
  if (!seq) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  int64_t* v = PyMem_Malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
  if (!v) {
    Py_DECREF(seq);
    return PyErr_NoMemory();
  }
  PyObject* res = NULL;
  Py_ssize_t i = 0;
  for (; i < n; i++) {
    PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
    const char* tn = Py_TYPE(item)->tp_name;
    if (PyBool_Check(item) || !strcmp(tn, "numpy.bool_") || !strcmp(tn, "numpy.bool")) {
      PyErr_Format(PyExc_TypeError, "take: indices[%zd] is a bool: take wants positions (a mask of rows is filter())",
                   i);
      break;
    }
    PyObject* ix = PyNumber_Index(item); /* int and numpy integers; not float */
    if (!ix) {
      PyErr_Format(PyExc_TypeError, "take: indices[%zd] must be an int, not %s", i, Py_TYPE(item)->tp_name);
      break;
    }
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(ix, &overflow);
    Py_DECREF(ix);
    if (overflow) {
      PyErr_Format(PyExc_IndexError, "take: indices[%zd] is out of range for %lld rows", i,
                   (long long)rill_df_rows(self->df));
      break;
    }
    v[i] = x;
  }
  if (i == n) res = take_rows(self, v, n, "take");
  PyMem_Free(v);
  Py_DECREF(seq);
  return res;
}

/* df[a:b] (a view of those rows) and df[a:b:k] (a take of them). */
static PyObject* df_subscript(RillDataFrame* self, PyObject* key) {
  if (!PySlice_Check(key))
    return PyErr_Format(PyExc_TypeError,
                        "DataFrame rows are chosen by a slice (df[a:b]) or by df.take(indices), not by %s (rows "
                        "are computed when iterated)",
                        Py_TYPE(key)->tp_name);
  Py_ssize_t start, stop, step;
  if (PySlice_Unpack(key, &start, &stop, &step) < 0) return NULL;
  Py_ssize_t n = PySlice_AdjustIndices((Py_ssize_t)rill_df_rows(self->df), &start, &stop, step);
  if (step == 1) {
    rill_error_t err;
    rill_error_clear(&err);
    rill_df_t* out = NULL;
    int rc = rill_df_slice(self->df, start, n, &out, &err);
    return derived(self, rc, &err, out, self->batched);
  }
  int64_t* v = PyMem_Malloc(sizeof *v * (size_t)(n > 0 ? n : 1));
  if (!v) return PyErr_NoMemory();
  for (Py_ssize_t i = 0; i < n; i++) v[i] = (int64_t)start + (int64_t)i * step;
  PyObject* res = take_rows(self, v, n, "DataFrame[]");
  PyMem_Free(v);
  return res;
}

/* ---------------------------------------------------------------- files and images */

static PyObject* df_read_files(RillDataFrame* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"name", "path_column", "on_error", "grain", NULL};
  const char* name;
  PyObject *pcol, *on_error = Py_None;
  long long grain = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|$OL:read_files", kwlist, &name, &pcol, &on_error, &grain))
    return NULL;
  rill_files_opts_t o = {0};
  o.grain = grain;
  int col;
  if (rillpy_parse_on_error(on_error, &o.on_error) < 0 || column_arg(self, pcol, &col) < 0) return NULL;
  rill_error_t err;
  rill_error_clear(&err);
  return added(rill_file_read(self->df, name, col, &o, &err), &err);
}

static PyObject* df_decode(RillDataFrame* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"name", "column", "channels", "max_pixels", "on_error", "grain", "path_column", NULL};
  const char* name;
  const char* path_column = NULL;
  PyObject *column, *on_error = Py_None;
  int channels = 3;
  long long max_pixels = 0, grain = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|$iLOLz:decode", kwlist, &name, &column, &channels, &max_pixels,
                                   &on_error, &grain, &path_column))
    return NULL;
  rill_decode_opts_t o = {0};
  o.channels = channels;
  o.max_pixels = max_pixels;
  o.grain = grain;
  o.path_column = path_column;
  int col;
  if (rillpy_parse_on_error(on_error, &o.on_error) < 0 || column_arg(self, column, &col) < 0) return NULL;
  rill_error_t err;
  rill_error_clear(&err);
  return added(rill_image_decode(self->df, name, col, &o, &err), &err);
}

static PyObject* df_random_resized_crop(RillDataFrame* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"name", "column", "size", "scale", "ratio", "interpolation", "channels", "max_pixels",
                           "on_error", "marks_bytes", NULL};
  const char* name;
  PyObject *column, *size, *scale = NULL, *ratio = NULL, *interp = Py_None, *on_error = Py_None;
  int channels = 3;
  long long max_pixels = 0, marks_bytes = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sOO|$OOOiLOL:random_resized_crop", kwlist, &name, &column, &size,
                                   &scale, &ratio, &interp, &channels, &max_pixels, &on_error, &marks_bytes))
    return NULL;
  rill_rrc_opts_t o = {0};
  o.scale[0] = 0.08;
  o.scale[1] = 1.0;
  o.ratio[0] = 3.0 / 4.0;
  o.ratio[1] = 4.0 / 3.0;
  o.channels = channels;
  o.max_pixels = max_pixels;
  o.marks_bytes = marks_bytes;
  int col;
  if (resize_opts(self, column, &col, size, 0, o.size, interp, &o.interpolation, on_error, &o.on_error) < 0)
    return NULL;
  if (parse_range(scale, o.scale, "scale") < 0 || parse_range(ratio, o.ratio, "ratio") < 0) return NULL;
  rill_error_t err;
  rill_error_clear(&err);
  return added(rill_image_random_resized_crop(self->df, name, col, &o, &err), &err);
}

static PyObject* df_resize(RillDataFrame* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"name", "column", "size", "interpolation", "channels", "max_pixels", "on_error", NULL};
  const char* name;
  PyObject *column, *size, *interp = Py_None, *on_error = Py_None;
  int channels = 3;
  long long max_pixels = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sOO|$OiLO:resize", kwlist, &name, &column, &size, &interp, &channels,
                                   &max_pixels, &on_error))
    return NULL;
  rill_resize_opts_t o = {0};
  o.channels = channels;
  o.max_pixels = max_pixels;
  int col;
  if (resize_opts(self, column, &col, size, 1, o.size, interp, &o.interpolation, on_error, &o.on_error) < 0)
    return NULL;
  rill_error_t err;
  rill_error_clear(&err);
  return added(rill_image_resize(self->df, name, col, &o, &err), &err);
}

static PyObject* df_center_crop(RillDataFrame* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"name", "column", "size", NULL};
  const char* name;
  PyObject *column, *size;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sOO:center_crop", kwlist, &name, &column, &size)) return NULL;
  int hw[2], col;
  if (parse_size(size, hw, 0) < 0 || column_arg(self, column, &col) < 0) return NULL;
  rill_error_t err;
  rill_error_clear(&err);
  return added(rill_image_center_crop(self->df, name, col, hw[0], hw[1], &err), &err);
}

static PyObject* df_flip(RillDataFrame* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"name", "column", "p", NULL};
  const char* name;
  PyObject* column;
  double p = 0.5;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|d:flip", kwlist, &name, &column, &p)) return NULL;
  int col;
  if (column_arg(self, column, &col) < 0) return NULL;
  rill_error_t err;
  rill_error_clear(&err);
  return added(rill_image_flip(self->df, name, col, p, &err), &err);
}

static PyObject* df_jitter(RillDataFrame* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"name", "column", "brightness", "contrast", "saturation", NULL};
  const char* name;
  PyObject* column;
  rill_jitter_opts_t o = {0};
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|$ddd:jitter", kwlist, &name, &column, &o.brightness, &o.contrast,
                                   &o.saturation))
    return NULL;
  int col;
  if (column_arg(self, column, &col) < 0) return NULL;
  rill_error_t err;
  rill_error_clear(&err);
  return added(rill_image_jitter(self->df, name, col, &o, &err), &err);
}

/* Options shared by normalize and cuda_normalize. */
static int normalize_opts(PyObject* mean, PyObject* std, double flip, PyObject* dtype, PyObject* layout,
                          rill_normalize_opts_t* o) {
  memset(o, 0, sizeof *o);
  o->flip = flip;
  o->dtype = RILL_FLOAT32;
  o->layout = RILL_LAYOUT_CHW;
  for (int i = 0; i < 4; i++) o->std[i] = 1.0;
  if (mean && mean != Py_None && parse_doubles(mean, o->mean, 4, "mean") < 0) return -1;
  if (std && std != Py_None && parse_doubles(std, o->std, 4, "std") < 0) return -1;
  if (dtype && dtype != Py_None && rillpy_parse_dtype(dtype, &o->dtype) < 0) return -1;
  if (layout && layout != Py_None && rillpy_parse_layout(layout, &o->layout) < 0) return -1;
  return 0;
}

static PyObject* df_normalize(RillDataFrame* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"name", "column", "mean", "std", "flip", "dtype", "layout", NULL};
  const char* name;
  PyObject *column, *mean = NULL, *std = NULL, *dtype = NULL, *layout = NULL;
  double flip = 0.0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|$OOdOO:normalize", kwlist, &name, &column, &mean, &std, &flip,
                                   &dtype, &layout))
    return NULL;
  rill_normalize_opts_t o;
  int col;
  if (normalize_opts(mean, std, flip, dtype, layout, &o) < 0 || column_arg(self, column, &col) < 0) return NULL;
  rill_error_t err;
  rill_error_clear(&err);
  return added(rill_image_normalize(self->df, name, col, &o, &err), &err);
}

static PyObject* df_one_hot(RillDataFrame* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"name", "column", "classes", "dtype", NULL};
  const char* name;
  PyObject *column, *dtype = NULL;
  long long classes;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sOL|O:one_hot", kwlist, &name, &column, &classes, &dtype)) return NULL;
  rill_dtype_t dt = RILL_FLOAT32;
  int col;
  if ((dtype && dtype != Py_None && rillpy_parse_dtype(dtype, &dt) < 0) || column_arg(self, column, &col) < 0)
    return NULL;
  rill_error_t err;
  rill_error_clear(&err);
  return added(rill_one_hot(self->df, name, col, classes, dt, &err), &err);
}

static PyObject* df_to_device(RillDataFrame* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"name", "column", "device", "inflight", NULL};
  const char* name;
  PyObject* column;
  rill_to_device_opts_t o = {0};
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|$ii:to_device", kwlist, &name, &column, &o.device, &o.inflight))
    return NULL;
  int col;
  if (column_arg(self, column, &col) < 0) return NULL;
  rill_error_t err;
  rill_error_clear(&err);
  int rc;
  Py_BEGIN_ALLOW_THREADS /* may initialise the CUDA runtime */
  rc = rill_to_device(self->df, name, col, &o, &err);
  Py_END_ALLOW_THREADS
  return added(rc, &err);
}

static PyObject* df_cuda_normalize(RillDataFrame* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"name", "column", "mean", "std", "flip", "dtype", "layout", "device", NULL};
  const char* name;
  PyObject *column, *mean = NULL, *std = NULL, *dtype = NULL, *layout = NULL;
  double flip = 0.0;
  int device = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|$OOdOOi:cuda_normalize", kwlist, &name, &column, &mean, &std, &flip,
                                   &dtype, &layout, &device))
    return NULL;
  rill_normalize_opts_t o;
  int col;
  if (normalize_opts(mean, std, flip, dtype, layout, &o) < 0 || column_arg(self, column, &col) < 0) return NULL;
  rill_error_t err;
  rill_error_clear(&err);
  int rc;
  Py_BEGIN_ALLOW_THREADS /* may initialise the CUDA runtime */
  rc = rill_cuda_normalize(self->df, name, col, &o, device, &err);
  Py_END_ALLOW_THREADS
  return added(rc, &err);
}

/* ---------------------------------------------------------------- iteration */

static PyObject* df_iter_method(RillDataFrame* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"columns", "prefetch", "threads", "seed", "epoch", "stream", "next_epoch", NULL};
  PyObject *columns = Py_None, *stream = Py_None;
  int prefetch = 0, threads = 0, next_epoch = 0;
  unsigned long long seed = 0;
  long long epoch = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O$iiKLOp:iter", kwlist, &columns, &prefetch, &threads, &seed,
                                   &epoch, &stream, &next_epoch))
    return NULL;
  return rillpy_iter_new(self, columns, prefetch, threads, (uint64_t)seed, (int64_t)epoch, stream, next_epoch);
}

static PyObject* df_tp_iter(RillDataFrame* self) { return rillpy_iter_new(self, Py_None, 0, 0, 0, 0, NULL, 0); }

/* ---------------------------------------------------------------- Arrow streams */

/* An ArrowArrayStream around rill's: get_schema / get_next / release release the GIL when
 * the calling thread holds it, so a consumer pulling with the GIL held cannot deadlock with
 * a Python map that runs on a worker thread. */
typedef struct gil_stream {
  struct ArrowArrayStream inner;
  char message[RILL_ERROR_MESSAGE_SIZE * 2]; /* the last error without exception tokens */
} gil_stream_t;

static int holds_gil(void) {
#if PY_VERSION_HEX >= 0x030D0000
  return PyGILState_Check() && PyThreadState_GetUnchecked() != NULL;
#else
  return PyGILState_Check() && _PyThreadState_UncheckedGet() != NULL;
#endif
}

static int gs_get_schema(struct ArrowArrayStream* s, struct ArrowSchema* out) {
  gil_stream_t* g = s->private_data;
  int rc;
  if (holds_gil()) {
    Py_BEGIN_ALLOW_THREADS
    rc = g->inner.get_schema(&g->inner, out);
    Py_END_ALLOW_THREADS
  } else {
    rc = g->inner.get_schema(&g->inner, out);
  }
  return rc;
}

static int gs_get_next(struct ArrowArrayStream* s, struct ArrowArray* out) {
  gil_stream_t* g = s->private_data;
  int rc;
  if (holds_gil()) {
    Py_BEGIN_ALLOW_THREADS
    rc = g->inner.get_next(&g->inner, out);
    Py_END_ALLOW_THREADS
  } else {
    rc = g->inner.get_next(&g->inner, out);
  }
  return rc;
}

static const char* gs_get_last_error(struct ArrowArrayStream* s) {
  gil_stream_t* g = s->private_data;
  const char* m = g->inner.get_last_error(&g->inner);
  if (!m) return NULL;
  snprintf(g->message, sizeof g->message, "%s", m);
  char* at = strstr(g->message, " [pyexc:");
  char* end = at ? strchr(at, ']') : NULL;
  if (end) memmove(at, end + 1, strlen(end + 1) + 1);
  return g->message;
}

static void gs_release(struct ArrowArrayStream* s) {
  gil_stream_t* g = s->private_data;
  if (g) {
    if (g->inner.release) {
      if (holds_gil()) {
        Py_BEGIN_ALLOW_THREADS
        g->inner.release(&g->inner);
        Py_END_ALLOW_THREADS
      } else {
        g->inner.release(&g->inner);
      }
    }
    PyMem_RawFree(g);
  }
  s->private_data = NULL;
  s->release = NULL;
}

/* Exports the dataframe as a GIL-aware stream into *out (a PyMem_RawMalloc'ed struct). */
static int export_stream(RillDataFrame* self, const rill_iter_opts_t* io, int64_t batch_rows,
                         struct ArrowArrayStream* out) {
  gil_stream_t* g = PyMem_RawCalloc(1, sizeof *g);
  if (!g) {
    PyErr_NoMemory();
    return -1;
  }
  rill_iter_opts_t o = {0};
  if (io) o = *io;
  o.batch_rows = batch_rows;
  rill_error_t err;
  rill_error_clear(&err);
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = rill_df_export_stream(self->df, &o, &g->inner, &err);
  Py_END_ALLOW_THREADS
  if (rc < 0) {
    PyMem_RawFree(g);
    rillpy_raise(rc, &err);
    return -1;
  }
  out->get_schema = gs_get_schema;
  out->get_next = gs_get_next;
  out->get_last_error = gs_get_last_error;
  out->release = gs_release;
  out->private_data = g;
  return 0;
}

static PyObject* stream_capsule(RillDataFrame* self, const rill_iter_opts_t* io, int64_t batch_rows) {
  struct ArrowArrayStream* s = PyMem_RawCalloc(1, sizeof *s);
  if (!s) return PyErr_NoMemory();
  if (export_stream(self, io, batch_rows, s) < 0) {
    PyMem_RawFree(s);
    return NULL;
  }
  return rillpy_capsule_stream(s);
}

static PyObject* df_arrow_c_stream(RillDataFrame* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"requested_schema", NULL};
  PyObject* requested = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:__arrow_c_stream__", kwlist, &requested)) return NULL;
  rill_iter_opts_t io = {0};
  return stream_capsule(self, &io, 0);
}

static PyObject* df_arrow_c_schema(RillDataFrame* self, PyObject* unused) {
  struct ArrowArrayStream s = {0};
  rill_iter_opts_t io = {0};
  io.prefetch = RILL_PREFETCH_NONE;
  io.threads = RILL_THREADS_NONE;
  if (export_stream(self, &io, 0, &s) < 0) return NULL;
  struct ArrowSchema* schema = PyMem_RawCalloc(1, sizeof *schema);
  if (!schema) {
    s.release(&s);
    return PyErr_NoMemory();
  }
  int rc = s.get_schema(&s, schema);
  if (rc != 0) {
    const char* msg = s.get_last_error(&s);
    PyErr_Format(PyExc_RuntimeError, "__arrow_c_schema__: %s", msg ? msg : "the schema could not be exported");
    s.release(&s);
    PyMem_RawFree(schema);
    return NULL;
  }
  s.release(&s);
  return rillpy_capsule_schema(schema);
}

/* rill.ArrowStream: the object returned by DataFrame.to_arrow_stream. */
typedef struct RillArrowStream {
  PyObject_HEAD
  PyObject* capsule; /* NULL once handed out */
} RillArrowStream;

static void as_dealloc(RillArrowStream* self) {
  Py_CLEAR(self->capsule);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static PyObject* as_arrow_c_stream(RillArrowStream* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"requested_schema", NULL};
  PyObject* requested = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|O:__arrow_c_stream__", kwlist, &requested)) return NULL;
  if (!self->capsule) return rillpy_invalid("this Arrow stream was already consumed");
  PyObject* c = self->capsule;
  self->capsule = NULL;
  return c;
}

static PyMethodDef as_methods[] = {
    {"__arrow_c_stream__", (PyCFunction)(void (*)(void))as_arrow_c_stream, METH_VARARGS | METH_KEYWORDS,
     "__arrow_c_stream__(requested_schema=None) -> PyCapsule\n\n"
     "The stream's 'arrow_array_stream' capsule (the Arrow PyCapsule interface). It can be taken "
     "once; requested_schema is ignored."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject RillArrowStream_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rill.ArrowStream",
    .tp_basicsize = sizeof(RillArrowStream),
    .tp_dealloc = (destructor)as_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A one-shot Arrow stream of a dataframe's record batches (from DataFrame.to_arrow_stream).\n"
              "Hand it to pyarrow.RecordBatchReader.from_stream, polars, nanoarrow, ...",
    .tp_methods = as_methods,
};

static PyObject* df_to_arrow_stream(RillDataFrame* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"columns", "batch_rows", "seed", "threads", "prefetch", NULL};
  PyObject* columns = Py_None;
  long long batch_rows = 0;
  unsigned long long seed = 0;
  int threads = 0, prefetch = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|OLKii:to_arrow_stream", kwlist, &columns, &batch_rows, &seed,
                                   &threads, &prefetch))
    return NULL;
  if (batch_rows < 0) return rillpy_invalid("batch_rows must be >= 0 (0: 65536), got %lld", batch_rows);
  int* cols = NULL;
  int n = 0;
  if (rillpy_parse_columns(self->df, columns, &cols, &n) < 0) return NULL;
  rill_iter_opts_t io = {0};
  io.columns = cols;
  io.ncolumns = n;
  io.seed = seed;
  io.threads = threads;
  io.prefetch = prefetch;
  PyObject* cap = stream_capsule(self, &io, batch_rows);
  PyMem_Free(cols);
  if (!cap) return NULL;
  RillArrowStream* s = PyObject_New(RillArrowStream, &RillArrowStream_Type);
  if (!s) {
    Py_DECREF(cap);
    return NULL;
  }
  s->capsule = cap;
  return (PyObject*)s;
}

/* ---------------------------------------------------------------- interchange */

static PyObject* df_dataframe(RillDataFrame* self, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"nan_as_null", "allow_copy", NULL};
  int nan_as_null = 0, allow_copy = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "|pp:__dataframe__", kwlist, &nan_as_null, &allow_copy)) return NULL;
  PyObject* names = df_columns(self, NULL);
  if (!names) return NULL;
  /* iterate record batches: the dataframe itself when batched, else a temporary batched view */
  PyObject* src = (PyObject*)self;
  Py_INCREF(src);
  if (!self->batched && rill_df_rows(self->df) > 0) {
    int n;
    int* cols = all_columns(self->df, &n);
    if (!cols) {
      Py_DECREF(src);
      Py_DECREF(names);
      return NULL;
    }
    rill_error_t err;
    rill_error_clear(&err);
    rill_df_t* b = NULL;
    int rc = rill_df_batch(self->df, cols, n, 65536, NULL, &b, &err);
    PyMem_Free(cols);
    Py_DECREF(src);
    src = derived(self, rc, &err, b, 1);
    if (!src) {
      Py_DECREF(names);
      return NULL;
    }
  }
  PyObject* chunks = PyList_New(0);
  PyObject* it = chunks ? rillpy_iter_new((RillDataFrame*)src, Py_None, 0, 0, 0, 0, NULL, 0) : NULL;
  Py_DECREF(src);
  if (!it) {
    Py_XDECREF(chunks);
    Py_DECREF(names);
    return NULL;
  }
  PyObject* row;
  while ((row = PyIter_Next(it))) {
    int rc = PyList_Append(chunks, row);
    Py_DECREF(row);
    if (rc < 0) break;
  }
  Py_DECREF(it);
  if (PyErr_Occurred()) {
    Py_DECREF(chunks);
    Py_DECREF(names);
    return NULL;
  }
  PyObject* frame = rillpy_interchange_frame(names, chunks, allow_copy);
  Py_DECREF(chunks);
  Py_DECREF(names);
  return frame;
}

/* ---------------------------------------------------------------- type */

static PyMethodDef df_methods[] = {
    {"field", (PyCFunction)df_field, METH_O,
     "field(column: str | int) -> Field\n\nThe field (name, dtype, shape, nullable, device) of a column."},
    {"column_index", (PyCFunction)df_column_index, METH_O,
     "column_index(column: str | int) -> int\n\nThe index of a column; InvalidArgumentError listing the "
     "columns when it is unknown."},
    {"map", (PyCFunction)(void (*)(void))df_map, METH_VARARGS | METH_KEYWORDS,
     "map(name, fn, inputs, dtype, shape=(), *, where='cpu', grain=0, on_error='raise', nullable=False) -> int\n\n"
     "Adds a column `name` of `dtype` cells of `shape` computed by fn(*inputs) for each chunk of rows, "
     "on worker threads holding the GIL. inputs: a column (name or index) or a sequence of them.\n"
     "fn receives, per input, a read-only numpy array [n, *shape] for fixed-shape numeric columns "
     "(numpy.ma.MaskedArray when the chunk has nulls; a zero-copy view valid during the call: copy it "
     "to keep it) or a list of str / bytes / numpy arrays with None for nulls for string, binary and "
     "variable-shape columns. It returns n cells: an array-like [n, *shape] (castable to dtype under "
     "numpy's same_kind rule; a masked array or None entries give nulls when nullable) or a list of "
     "str / bytes / arrays / None. An exception is re-raised by the iterator with a note naming the "
     "row and column. Returns the new column's index."},
    {"reduce", (PyCFunction)(void (*)(void))df_reduce, METH_VARARGS | METH_KEYWORDS,
     "reduce(column, k, fn, dtype, shape=()) -> DataFrame\n\n"
     "A dataframe of ceil(rows/k) rows: row i = fn(group), the values of rows [i*k, i*k+k) of `column` "
     "(passed as for map), returning one cell of dtype and shape."},
    {"batch", (PyCFunction)(void (*)(void))df_batch, METH_VARARGS | METH_KEYWORDS,
     "batch(size, columns=None, *, drop_last=False, layout='hwc', pinned=False) -> DataFrame\n\n"
     "A batched dataframe whose row i stacks rows [i*size, i*size+size) of the chosen columns (None: all)."},
    {"shuffle", (PyCFunction)(void (*)(void))df_shuffle, METH_VARARGS | METH_KEYWORDS,
     "shuffle(seed=0) -> DataFrame\n\nA view of the rows in a permutation drawn from (seed, epoch)."},
    {"shard", (PyCFunction)(void (*)(void))df_shard, METH_VARARGS | METH_KEYWORDS,
     "shard(rank, world) -> DataFrame\n\nThe rows of shard `rank` among `world` shards."},
    {"filter", (PyCFunction)df_filter, METH_O,
     "filter(column: str | int) -> DataFrame\n\nThe rows whose bool `column` is true (computed now)."},
    {"take", (PyCFunction)df_take, METH_O,
     "take(indices: Sequence[int]) -> DataFrame\n\nThe rows at these positions, in this order (repeats allowed, "
     "negative positions count from the end; a 1-d integer numpy array works). df[a:b] is a slice of rows. "
     "Over a shuffled dataframe they are positions in each epoch's order: for a fixed random split, take the "
     "positions of a permutation made once (e.g. numpy's)."},
    {"read_files", (PyCFunction)(void (*)(void))df_read_files, METH_VARARGS | METH_KEYWORDS,
     "read_files(name, path_column, *, on_error='raise', grain=0) -> int\n\n"
     "Adds a binary column holding the contents of the files named by the string column `path_column`."},
    {"decode", (PyCFunction)(void (*)(void))df_decode, METH_VARARGS | METH_KEYWORDS,
     "decode(name, column, *, channels=3, max_pixels=0, on_error='raise', grain=0, path_column=None) -> int\n\n"
     "Adds a uint8[-1,-1,channels] column of the JPEG/PNG/WebP images decoded from the binary `column`."},
    {"random_resized_crop", (PyCFunction)(void (*)(void))df_random_resized_crop, METH_VARARGS | METH_KEYWORDS,
     "random_resized_crop(name, column, size, *, scale=(0.08, 1.0), ratio=(3/4, 4/3), interpolation='bilinear', "
     "channels=3, max_pixels=0, on_error='raise') -> int\n\n"
     "Adds a uint8[h,w,C] column of random resized crops (size: int or (h, w)) of an image or encoded "
     "image column."},
    {"resize", (PyCFunction)(void (*)(void))df_resize, METH_VARARGS | METH_KEYWORDS,
     "resize(name, column, size, *, interpolation='bilinear', channels=3, max_pixels=0, on_error='raise') -> int\n\n"
     "Adds a resized image column; size: (h, w), or an int giving the shorter side (aspect kept)."},
    {"center_crop", (PyCFunction)(void (*)(void))df_center_crop, METH_VARARGS | METH_KEYWORDS,
     "center_crop(name, column, size) -> int\n\nAdds a centre crop (size: int or (h, w)); smaller images are "
     "zero-padded."},
    {"flip", (PyCFunction)(void (*)(void))df_flip, METH_VARARGS | METH_KEYWORDS,
     "flip(name, column, p=0.5) -> int\n\nAdds a column of the images flipped horizontally with probability p."},
    {"jitter", (PyCFunction)(void (*)(void))df_jitter, METH_VARARGS | METH_KEYWORDS,
     "jitter(name, column, *, brightness=0.0, contrast=0.0, saturation=0.0) -> int\n\nAdds a colour-jittered "
     "image column."},
    {"normalize", (PyCFunction)(void (*)(void))df_normalize, METH_VARARGS | METH_KEYWORDS,
     "normalize(name, column, *, mean=(0, 0, 0), std=(1, 1, 1), flip=0.0, dtype='float32', layout='chw') -> int\n\n"
     "Adds (x / 255 - mean) / std per channel as float32/float16, in CHW or HWC layout, flipped with "
     "probability flip."},
    {"one_hot", (PyCFunction)(void (*)(void))df_one_hot, METH_VARARGS | METH_KEYWORDS,
     "one_hot(name, column, classes, dtype='float32') -> int\n\nAdds the one-hot encoding of an int64 label column."},
    {"to_device", (PyCFunction)(void (*)(void))df_to_device, METH_VARARGS | METH_KEYWORDS,
     "to_device(name, column, *, device=0, inflight=0) -> int\n\nAdds a copy of `column` in CUDA device memory; "
     "NoDeviceError without a device."},
    {"cuda_normalize", (PyCFunction)(void (*)(void))df_cuda_normalize, METH_VARARGS | METH_KEYWORDS,
     "cuda_normalize(name, column, *, mean=(0, 0, 0), std=(1, 1, 1), flip=0.0, dtype='float32', layout='chw', "
     "device=0) -> int\n\nnormalize on the GPU for uint8 images already on the device; NoDeviceError without one."},
    {"iter", (PyCFunction)(void (*)(void))df_iter_method, METH_VARARGS | METH_KEYWORDS,
     "iter(columns=None, *, prefetch=0, threads=0, seed=0, epoch=0, stream=None, next_epoch=False) -> Iterator\n\n"
     "An iterator over the rows (batches) producing `columns` (None: all). prefetch: rows computed ahead "
     "(0: 2, PREFETCH_NONE: none); threads: worker threads (0: one per core, THREADS_NONE: none). "
     "next_epoch: at an epoch's end, prefetch goes on into the next epoch's first rows, which "
     "set_epoch(epoch + 1) keeps (a training loop's first batch of each epoch is then ready). "
     "stream: the CUDA stream that consumes device columns (torch.cuda.Stream, an object with "
     "__cuda_stream__, or an int cudaStream_t, 0 = legacy default): batches are ordered on it with "
     "events (no host wait), and their device memory is reused only after the work queued on it "
     "before the iterator moved past them. Without a stream the host waits for each batch, and "
     "GPU work reading a batch must be complete when the next one is taken."},
    {"to_arrow_stream", (PyCFunction)(void (*)(void))df_to_arrow_stream, METH_VARARGS | METH_KEYWORDS,
     "to_arrow_stream(columns=None, batch_rows=0, seed=0, threads=0, prefetch=0) -> ArrowStream\n\n"
     "A one-shot object with __arrow_c_stream__ over the chosen columns (batch_rows rows per record "
     "batch; 0: 65536; a batched dataframe gives one record batch per batch)."},
    {"__arrow_c_stream__", (PyCFunction)(void (*)(void))df_arrow_c_stream, METH_VARARGS | METH_KEYWORDS,
     "__arrow_c_stream__(requested_schema=None) -> PyCapsule\n\n"
     "The dataframe as an 'arrow_array_stream' capsule of record batches computed while pulled "
     "(requested_schema is ignored)."},
    {"__arrow_c_schema__", (PyCFunction)df_arrow_c_schema, METH_NOARGS,
     "__arrow_c_schema__() -> PyCapsule\n\nThe schema of the dataframe's record batches as an 'arrow_schema' "
     "capsule."},
    {"__dataframe__", (PyCFunction)(void (*)(void))df_dataframe, METH_VARARGS | METH_KEYWORDS,
     "__dataframe__(nan_as_null=False, allow_copy=True) -> interchange DataFrame\n\n"
     "The dataframe interchange protocol object over the record batches (computed now, one chunk per "
     "batch)."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef df_getset[] = {
    {"num_rows", (getter)df_num_rows, NULL, "Rows of the dataframe (batches when batched).", NULL},
    {"num_columns", (getter)df_num_columns, NULL, "Number of columns.", NULL},
    {"columns", (getter)df_columns, NULL, "Column names, in index order (list[str]).", NULL},
    {"schema", (getter)df_schema, NULL, "The fields of the columns (list[Field]).", NULL},
    {"is_batched", (getter)df_is_batched, NULL, "True for a dataframe made by batch() (and views of it).", NULL},
    {"classes", (getter)df_classes, NULL,
     "Class names of an image-folder dataframe (and views derived from it), indexed by label; else None.", NULL},
    {"bad_row_count", (getter)df_bad_row_count, NULL,
     "Rows of the CSV file with a wrong number of fields that on_bad_row='skip' left out (or 'null' kept "
     "with nulls), for a CSV dataframe or an unbatched view of it; else None.", NULL},
    {"bad_rows", (getter)df_bad_rows, NULL,
     "The first of those rows (up to 1024), in file order: list of (line, fields found); else None.", NULL},
    {"parts", (getter)df_parts, NULL,
     "The dataframes a concatenation (concat, or from_csv of several files) reads, in order: a tuple "
     "(empty for any other dataframe). Each file's bad_rows is its part's.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PySequenceMethods df_as_sequence = {.sq_length = (lenfunc)df_len};
static PyMappingMethods df_as_mapping = {.mp_length = (lenfunc)df_len, .mp_subscript = (binaryfunc)df_subscript};

PyTypeObject RillDataFrame_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rill.DataFrame",
    .tp_basicsize = sizeof(RillDataFrame),
    .tp_dealloc = (destructor)df_dealloc,
    .tp_repr = (reprfunc)df_repr,
    .tp_as_sequence = &df_as_sequence,
    .tp_as_mapping = &df_as_mapping,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A pull-based streaming dataframe (rill_df_t): a row count and typed columns computed when an "
              "iterator pulls rows.\n\nMade by rill.from_numpy, from_arrays, from_arrow, from_csv, from_sqlite, "
              "from_files, from_image_folder and by the operators of other dataframes.",
    .tp_weaklistoffset = offsetof(RillDataFrame, weakrefs),
    .tp_iter = (getiterfunc)df_tp_iter,
    .tp_methods = df_methods,
    .tp_getset = df_getset,
    .tp_new = df_tp_new,
};

/* rill.concat(frames, how="vertical"): rill_df_concat (the parts' class names, of image
 * folders, must agree; the result keeps them), or rill_df_concat_columns with
 * how="horizontal" (the result keeps the class names of the one frame that has them). */
static PyObject* py_concat(PyObject* m, PyObject* args, PyObject* kwargs) {
  static char* kw[] = {"frames", "how", NULL};
  PyObject* frames;
  const char* how = "vertical";
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$s:concat", kw, &frames, &how)) return NULL;
  int horizontal = !strcmp(how, "horizontal");
  if (!horizontal && strcmp(how, "vertical"))
    return PyErr_Format(PyExc_ValueError, "concat: how must be 'vertical' or 'horizontal', not '%s'", how);
  if (PyUnicode_Check(frames) || PyBytes_Check(frames) || PyObject_TypeCheck(frames, &RillDataFrame_Type))
    return PyErr_Format(PyExc_TypeError, "concat: frames must be a sequence of DataFrame, not %s",
                        Py_TYPE(frames)->tp_name);
  PyObject* seq = PySequence_Fast(frames, "concat: frames must be a sequence of DataFrame");
  if (!seq) return NULL;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject* res = NULL;
  rill_df_t** parts = NULL;
  if (n == 0 || n > INT32_MAX) {
    PyErr_Format(PyExc_ValueError, "concat: %s", n ? "too many frames" : "no frames to concatenate");
    goto out;
  }
  if (!(parts = PyMem_Calloc((size_t)n, sizeof *parts))) {
    PyErr_NoMemory();
    goto out;
  }
  PyObject* classes = NULL;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
    if (!PyObject_TypeCheck(item, &RillDataFrame_Type)) {
      PyErr_Format(PyExc_TypeError, "concat: frames[%zd] must be a DataFrame, not %s", i, Py_TYPE(item)->tp_name);
      goto out;
    }
    RillDataFrame* d = (RillDataFrame*)item;
    parts[i] = d->df;
    PyObject* c = d->classes ? d->classes : Py_None;
    if (horizontal) { /* the one frame with a label column of classes names them */
      if (!classes || classes == Py_None) classes = c;
      continue;
    }
    if (i == 0) {
      classes = c;
      continue;
    }
    int same = PyObject_RichCompareBool(c, classes, Py_EQ);
    if (same < 0) goto out;
    if (!same) {
      PyErr_Format(PyExc_ValueError,
                   "concat: frames[%zd] has other class names than frames[0] (%R and %R): its labels would "
                   "mean other classes",
                   i, c, classes);
      goto out;
    }
  }
  rill_error_t err;
  rill_error_clear(&err);
  rill_df_t* out = NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = horizontal ? rill_df_concat_columns(parts, (int)n, &out, &err) : rill_df_concat(parts, (int)n, &out, &err);
  Py_END_ALLOW_THREADS
  if (rc < 0) {
    rillpy_raise(rc, &err);
    goto out;
  }
  res = rillpy_df_new(out, NULL);
  if (res) {
    RillDataFrame* r = (RillDataFrame*)res;
    for (Py_ssize_t i = 0; i < n; i++)
      if (PyList_Append(r->keep, PySequence_Fast_GET_ITEM(seq, i)) < 0) {
        Py_CLEAR(res);
        break;
      }
    if (res && classes && classes != Py_None) r->classes = Py_NewRef(classes);
  }
out:
  PyMem_Free(parts);
  Py_DECREF(seq);
  return res;
}

static PyMethodDef dataframe_functions[] = {
    {"concat", (PyCFunction)(void (*)(void))py_concat, METH_VARARGS | METH_KEYWORDS,
     "concat(frames: Sequence[DataFrame], *, how: str = \"vertical\") -> DataFrame\n\n"
     "how=\"vertical\": the rows of frames[0], then those of frames[1], ...: one dataset from several "
     "files or tables. The frames hold the same column names (any order; the result has frames[0]'s) "
     "and types; their sources must handle errors alike (on_error); image folders must have the same "
     "class names.\n"
     "how=\"horizontal\": the columns of frames[0], then those of frames[1], ... side by side: row r of "
     "the result is row r of every frame (features from one source, labels from another, in the same "
     "order). The frames have the same number of rows and no column name twice between them; each "
     "column keeps its own on_error.\n"
     "Either way the frames are read from sources only (from_csv, from_sqlite, from_numpy, from_files, "
     "... or concat): map, shuffle, filter and batch the result."},
    {NULL, NULL, 0, NULL}};

int rillpy_init_dataframe(PyObject* m) {
  if (PyModule_AddFunctions(m, dataframe_functions) < 0) return -1;
  if (PyType_Ready(&RillDataFrame_Type) < 0 || PyType_Ready(&RillArrowStream_Type) < 0) return -1;
  if (PyModule_AddObjectRef(m, "DataFrame", (PyObject*)&RillDataFrame_Type) < 0) return -1;
  if (PyModule_AddObjectRef(m, "ArrowStream", (PyObject*)&RillArrowStream_Type) < 0) return -1;
  return 0;
}
