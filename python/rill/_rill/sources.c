/* Module functions that make dataframes from data: numpy arrays and Python sequences, Arrow
 * objects (the Arrow PyCapsule interface), CSV files and buffers, SQLite queries, file lists,
 * image folders and tar archives. */
#include "rillpy.h"

#include <string.h>
#include <strings.h>

/* ================================================================ arrays from Python values */

/* What a borrowed numpy buffer needs to stay alive; freed (GIL taken) when rill releases it. */
typedef struct borrow {
  PyObject* obj;
  Py_buffer view;
  uint8_t* bits;
} borrow_t;

static void borrow_free(void* p) {
  borrow_t* b = p;
  if (!b) return;
  if (!rillpy_is_finalizing()) {
    PyGILState_STATE g = PyGILState_Ensure();
    PyBuffer_Release(&b->view);
    Py_XDECREF(b->obj);
    PyGILState_Release(g);
  }
  PyMem_RawFree(b->bits);
  PyMem_RawFree(b);
}

/* An LSB validity bitmap from per-row null flags (NULL when no row is null). */
static uint8_t* bitmap_from_flags(const char* nulls, int64_t n, int* err) {
  *err = 0;
  int any = 0;
  for (int64_t i = 0; i < n && !any; i++) any = nulls[i] != 0;
  if (!any) return NULL;
  uint8_t* bits = PyMem_RawCalloc((size_t)(n + 7) / 8 + 1, 1);
  if (!bits) {
    *err = 1;
    return NULL;
  }
  for (int64_t i = 0; i < n; i++)
    if (!nulls[i]) bits[i >> 3] |= (uint8_t)(1u << (i & 7));
  return bits;
}

/* A string or binary array (copied) from a sequence of str / bytes / None; `nulls` (may be
 * NULL) marks extra null rows. */
static const rill_array_t* var_array(const char* name, PyObject* seq, const char* nulls) {
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  rill_dtype_t dt = RILL_STRING;
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* v = PySequence_Fast_GET_ITEM(seq, i);
    if (v == Py_None || (nulls && nulls[i])) continue;
    dt = PyUnicode_Check(v) ? RILL_STRING : RILL_BINARY;
    break;
  }
  rill_array_t* a = NULL;
  rill_error_t err;
  rill_error_clear(&err);
  int rc = rill_array_new(rill_type_scalar(dt), n, &a, &err);
  if (rc < 0) {
    rillpy_raise(rc, &err);
    return NULL;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* v = PySequence_Fast_GET_ITEM(seq, i);
    if (v == Py_None || (nulls && nulls[i])) {
      rc = rill_array_set_var(a, i, NULL, 0, NULL);
      if (rc == RILL_OK) rc = rill_array_set_null(a, i);
    } else if (dt == RILL_STRING) {
      Py_ssize_t sz;
      const char* s = PyUnicode_Check(v) ? PyUnicode_AsUTF8AndSize(v, &sz) : NULL;
      if (!s) {
        if (!PyErr_Occurred())
          rillpy_invalid("column '%s': cell %zd is %s; a string column takes str or None", name, i,
                         Py_TYPE(v)->tp_name);
        rill_array_release(a);
        return NULL;
      }
      rc = rill_array_set_var(a, i, s, sz, NULL);
    } else {
      Py_buffer b;
      if (PyUnicode_Check(v) || PyObject_GetBuffer(v, &b, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        rillpy_invalid("column '%s': cell %zd is %s; a binary column takes bytes or None", name, i,
                       Py_TYPE(v)->tp_name);
        rill_array_release(a);
        return NULL;
      }
      rc = rill_array_set_var(a, i, b.buf, b.len, NULL);
      PyBuffer_Release(&b);
    }
    if (rc < 0) {
      rill_array_release(a);
      rillpy_raise(rc, NULL);
      return NULL;
    }
  }
  return a;
}

/* True when a sequence's first non-None item is str or bytes-like (a string/binary column). */
static int seq_is_var(PyObject* seq) {
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* v = PySequence_Fast_GET_ITEM(seq, i);
    if (v == Py_None) continue;
    return PyUnicode_Check(v) || PyBytes_Check(v) || PyByteArray_Check(v);
  }
  return 1; /* all None (or empty): a string column */
}

/* Per-row null flags (bytes object of n) from a numpy mask of any shape [n, ...]. */
static PyObject* row_nulls(PyObject* mask, int64_t n) {
  PyObject* m = PyObject_CallMethod(rillpy_numpy(), "asarray", "Os", mask, "bool");
  if (!m) return NULL;
  PyObject* r = PyObject_CallMethod(m, "reshape", "(Li)", (long long)n, -1);
  Py_DECREF(m);
  if (!r) return NULL;
  PyObject* any = PyObject_CallMethod(r, "any", "i", 1);
  Py_DECREF(r);
  if (!any) return NULL;
  PyObject* b = PyObject_CallMethod(any, "tobytes", NULL);
  Py_DECREF(any);
  return b;
}

/* A rill array over a numeric / bool / datetime64 numpy array (borrowed unless a conversion
 * copied it). `mask`: numpy mask [n, ...] or NULL. */
static const rill_array_t* numeric_array(const char* name, PyObject* arr, PyObject* mask) {
  PyObject* dt = PyObject_GetAttrString(arr, "dtype");
  PyObject* kind = dt ? PyObject_GetAttrString(dt, "kind") : NULL;
  const char* k = kind ? PyUnicode_AsUTF8(kind) : NULL;
  PyObject* nulls = NULL;
  borrow_t* b = NULL;
  const rill_array_t* out = NULL;
  Py_INCREF(arr);
  if (!k) goto done;
  PyObject* ndimo = PyObject_GetAttrString(arr, "ndim");
  long ndim = ndimo ? PyLong_AsLong(ndimo) : -1;
  Py_XDECREF(ndimo);
  if (ndim < 0) goto done;
  if (ndim == 0) {
    rillpy_invalid("column '%s': a 0-d array has no rows (use a 1-d array)", name);
    goto done;
  }
  if (ndim - 1 > RILL_MAX_NDIM) {
    rillpy_invalid("column '%s': cells of %ld dimensions; at most %d", name, ndim - 1, RILL_MAX_NDIM);
    goto done;
  }
  PyObject* shp = PyObject_GetAttrString(arr, "shape");
  if (!shp) goto done;
  int64_t shape[RILL_MAX_NDIM + 1];
  for (long i = 0; i < ndim; i++) shape[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(shp, i));
  Py_DECREF(shp);
  int64_t n = shape[0];
  rill_type_t type;
  if (k[0] == 'M') {
    type = rill_type_tensor(RILL_TIMESTAMP_US, (int)ndim - 1, shape + 1);
    PyObject* us = PyObject_CallMethod(arr, "astype", "s", "datetime64[us]");
    if (!us) goto done;
    Py_SETREF(arr, us);
    PyObject* nat = PyObject_CallMethod(rillpy_numpy(), "isnat", "O", arr); /* NaT is null */
    if (!nat) goto done;
    if (mask) {
      PyObject* both = PyNumber_Or(nat, mask);
      Py_DECREF(nat);
      if (!both) goto done;
      nat = both;
    }
    nulls = row_nulls(nat, n);
    Py_DECREF(nat);
    if (!nulls) goto done;
    PyObject* iv = PyObject_CallMethod(arr, "view", "s", "int64");
    if (!iv) goto done;
    Py_SETREF(arr, iv);
  } else {
    rill_dtype_t d;
    if (k[0] != 'b' && k[0] != 'i' && k[0] != 'u' && k[0] != 'f') {
      PyObject* ds = PyObject_Str(dt);
      rillpy_invalid("column '%s': numpy dtype %s is not supported (numbers, bool, datetime64, str, bytes)", name,
                     ds ? PyUnicode_AsUTF8(ds) : "?");
      Py_XDECREF(ds);
      goto done;
    }
    if (rillpy_parse_dtype(dt, &d) < 0) goto done;
    type = rill_type_tensor(d, (int)ndim - 1, shape + 1);
    if (mask && !(nulls = row_nulls(mask, n))) goto done;
    PyObject* native = PyObject_GetAttrString(dt, "isnative");
    int isnative = native ? PyObject_IsTrue(native) : -1;
    Py_XDECREF(native);
    if (isnative < 0) goto done;
    if (!isnative) {
      PyObject* nd = PyObject_CallMethod(dt, "newbyteorder", "s", "=");
      PyObject* sw = nd ? PyObject_CallMethod(arr, "astype", "O", nd) : NULL;
      Py_XDECREF(nd);
      if (!sw) goto done;
      Py_SETREF(arr, sw);
    }
  }
  PyObject* c = PyObject_CallMethod(rillpy_numpy(), "ascontiguousarray", "O", arr);
  if (!c) goto done;
  Py_SETREF(arr, c);
  b = PyMem_RawCalloc(1, sizeof *b);
  if (!b) {
    PyErr_NoMemory();
    goto done;
  }
  if (PyObject_GetBuffer(arr, &b->view, PyBUF_C_CONTIGUOUS) < 0) {
    PyMem_RawFree(b);
    b = NULL;
    goto done;
  }
  b->obj = Py_NewRef(arr);
  if (nulls) {
    int e;
    b->bits = bitmap_from_flags(PyBytes_AS_STRING(nulls), n, &e);
    if (e) {
      PyErr_NoMemory();
      goto done;
    }
  }
  rill_array_t* a = NULL;
  rill_error_t err;
  rill_error_clear(&err);
  int rc = rill_array_wrap(type, n, b->view.len ? b->view.buf : NULL, b->view.len, b->bits, -1, NULL, NULL,
                           borrow_free, b, &a, &err);
  if (rc < 0) {
    rillpy_raise(rc, &err);
    goto done;
  }
  b = NULL; /* owned by the array */
  out = a;
done:
  if (b) {
    if (b->obj) {
      PyBuffer_Release(&b->view);
      Py_DECREF(b->obj);
    }
    PyMem_RawFree(b->bits);
    PyMem_RawFree(b);
  }
  Py_XDECREF(nulls);
  Py_XDECREF(dt);
  Py_XDECREF(kind);
  Py_DECREF(arr);
  return out;
}

/* A rill array for one column value: a rill.Array, a numpy (masked) array or an array-like
 * (lists of numbers, str, bytes, with None for nulls). New reference. */
static const rill_array_t* column_array(const char* name, PyObject* value) {
  if (PyObject_TypeCheck(value, &RillArray_Type)) return rill_array_retain(((RillArray*)value)->a);
  if (!rillpy_numpy()) return NULL;
  PyObject *data = NULL, *mask = NULL;
  const rill_array_t* out = NULL;
  int masked = rillpy_split_masked(value, &data, &mask);
  if (masked < 0) goto done;
  if (masked) {
    /* data and mask are set */
  } else if (PyList_Check(value) || PyTuple_Check(value)) {
    PyObject* seq = PySequence_Fast(value, "");
    if (!seq) goto done;
    if (seq_is_var(seq)) {
      out = var_array(name, seq, NULL);
      Py_DECREF(seq);
      goto done;
    }
    /* numbers (or nested sequences) with None for nulls */
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject* nulls = PyBytes_FromStringAndSize(NULL, n);
    PyObject* filled = nulls ? PyList_New(n) : NULL;
    PyObject* zero = NULL;
    int any = 0;
    if (!filled) {
      Py_XDECREF(nulls);
      Py_DECREF(seq);
      goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
      PyObject* v = PySequence_Fast_GET_ITEM(seq, i);
      PyBytes_AS_STRING(nulls)[i] = v == Py_None;
      any |= v == Py_None;
      PyList_SET_ITEM(filled, i, Py_NewRef(v));
    }
    if (any) { /* None -> a zero cell shaped like the first valid one */
      for (Py_ssize_t i = 0; i < n && !zero; i++) {
        PyObject* v = PySequence_Fast_GET_ITEM(seq, i);
        if (v != Py_None) zero = PyObject_CallMethod(rillpy_numpy(), "zeros_like", "O", v);
      }
      if (!zero) zero = PyLong_FromLong(0);
      for (Py_ssize_t i = 0; zero && i < n; i++)
        if (PyBytes_AS_STRING(nulls)[i]) PyList_SetItem(filled, i, Py_NewRef(zero));
    }
    Py_DECREF(seq);
    if (any && !zero) {
      Py_DECREF(nulls);
      Py_DECREF(filled);
      goto done;
    }
    Py_XDECREF(zero);
    data = PyObject_CallMethod(rillpy_numpy(), "asarray", "O", filled);
    Py_DECREF(filled);
    if (data && any) {
      PyObject* m = PyObject_CallMethod(rillpy_numpy(), "frombuffer", "Os", nulls, "bool");
      mask = m;
    }
    Py_DECREF(nulls);
    if (!data || (any && !mask)) goto done;
  } else {
    data = PyObject_CallMethod(rillpy_numpy(), "asarray", "O", value);
    if (!data) goto done;
  }
  /* str / bytes / object arrays are string or binary columns */
  PyObject* dt = PyObject_GetAttrString(data, "dtype");
  PyObject* kind = dt ? PyObject_GetAttrString(dt, "kind") : NULL;
  const char* k = kind ? PyUnicode_AsUTF8(kind) : NULL;
  int var = k && (k[0] == 'U' || k[0] == 'S' || k[0] == 'O');
  Py_XDECREF(dt);
  Py_XDECREF(kind);
  if (!k) goto done;
  if (var) {
    PyObject* list = PyObject_CallMethod(data, "tolist", NULL);
    PyObject* seq = list ? PySequence_Fast(list, "a string column must be 1-dimensional") : NULL;
    Py_XDECREF(list);
    if (!seq) goto done;
    PyObject* nulls = NULL;
    if (mask && !(nulls = row_nulls(mask, PySequence_Fast_GET_SIZE(seq)))) {
      Py_DECREF(seq);
      goto done;
    }
    if (k[0] == 'O' && !seq_is_var(seq)) {
      /* an object array of numbers: through the list path (None = null) */
      out = column_array(name, seq);
    } else {
      out = var_array(name, seq, nulls ? PyBytes_AS_STRING(nulls) : NULL);
    }
    Py_XDECREF(nulls);
    Py_DECREF(seq);
    goto done;
  }
  out = numeric_array(name, data, mask);
done:
  Py_XDECREF(data);
  Py_XDECREF(mask);
  return out;
}

/* A dataframe from parallel sequences of names (str) and values. */
static PyObject* df_from_columns(PyObject* names, PyObject* values, int copy) {
  Py_ssize_t n = PySequence_Fast_GET_SIZE(names);
  if (PySequence_Fast_GET_SIZE(values) != n)
    return rillpy_invalid("from_arrays: %zd names for %zd arrays", n, PySequence_Fast_GET_SIZE(values));
  const char** cnames = PyMem_Calloc((size_t)(n ? n : 1), sizeof *cnames);
  const rill_array_t** arrays = PyMem_Calloc((size_t)(n ? n : 1), sizeof *arrays);
  PyObject* result = NULL;
  if (!cnames || !arrays) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* nm = PySequence_Fast_GET_ITEM(names, i);
    if (!PyUnicode_Check(nm)) {
      PyErr_Format(PyExc_TypeError, "column names must be str, got %s", Py_TYPE(nm)->tp_name);
      goto done;
    }
    cnames[i] = PyUnicode_AsUTF8(nm);
    if (!cnames[i]) goto done;
    arrays[i] = column_array(cnames[i], PySequence_Fast_GET_ITEM(values, i));
    if (!arrays[i]) goto done;
  }
  rill_error_t err;
  rill_error_clear(&err);
  rill_df_t* df = NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS /* copies when copy is set */
  rc = rill_df_from_arrays(cnames, arrays, (int)n, copy, &df, &err);
  Py_END_ALLOW_THREADS
  result = rillpy_df_result(rc, &err, df);
done:
  for (Py_ssize_t i = 0; arrays && i < n; i++) rill_array_release(arrays[i]);
  PyMem_Free(arrays);
  PyMem_Free(cnames);
  return result;
}

static PyObject* py_from_numpy(PyObject* m, PyObject* args, PyObject* kw) {
  PyObject* columns = Py_None;
  int copy = 0;
  if (!PyArg_ParseTuple(args, "|O:from_numpy", &columns)) return NULL;
  PyObject* all = PyDict_New();
  if (!all) return NULL;
  if (columns != Py_None && PyDict_Merge(all, columns, 1) < 0) {
    Py_DECREF(all);
    if (PyErr_ExceptionMatches(PyExc_AttributeError) || PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      return PyErr_Format(PyExc_TypeError, "from_numpy: columns must be a mapping of name -> array, got %s",
                          Py_TYPE(columns)->tp_name);
    }
    return NULL;
  }
  if (kw) {
    PyObject* c = PyDict_GetItemString(kw, "copy");
    if (c) {
      copy = PyObject_IsTrue(c);
      if (copy < 0) {
        Py_DECREF(all);
        return NULL;
      }
    }
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    while (PyDict_Next(kw, &pos, &k, &v)) {
      if (PyUnicode_Check(k) && PyUnicode_CompareWithASCIIString(k, "copy") == 0) continue;
      if (PyDict_SetItem(all, k, v) < 0) {
        Py_DECREF(all);
        return NULL;
      }
    }
  }
  PyObject* names = PyDict_Keys(all);
  PyObject* values = names ? PyDict_Values(all) : NULL;
  Py_DECREF(all);
  PyObject* r = values ? df_from_columns(names, values, copy) : NULL;
  Py_XDECREF(names);
  Py_XDECREF(values);
  return r;
}

static PyObject* py_from_arrays(PyObject* m, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"names", "arrays", "copy", NULL};
  PyObject *names, *arrays;
  int copy = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|p:from_arrays", kwlist, &names, &arrays, &copy)) return NULL;
  PyObject* ns = PySequence_Fast(names, "from_arrays: names must be a sequence of str");
  PyObject* as = ns ? PySequence_Fast(arrays, "from_arrays: arrays must be a sequence") : NULL;
  PyObject* r = as ? df_from_columns(ns, as, copy) : NULL;
  Py_XDECREF(ns);
  Py_XDECREF(as);
  return r;
}

/* ================================================================ Arrow */

static PyObject* py_from_arrow(PyObject* m, PyObject* obj) {
  rill_error_t err;
  rill_error_clear(&err);
  rill_df_t* df = NULL;
  int rc;
  if (PyObject_HasAttrString(obj, "__arrow_c_stream__")) {
    PyObject* cap = PyObject_CallMethod(obj, "__arrow_c_stream__", NULL);
    if (!cap) return NULL;
    struct ArrowArrayStream* s = PyCapsule_GetPointer(cap, "arrow_array_stream");
    if (!s) {
      Py_DECREF(cap);
      return NULL;
    }
    if (!s->release) {
      Py_DECREF(cap);
      return rillpy_invalid("from_arrow: the Arrow stream was already consumed");
    }
    struct ArrowArrayStream st = *s;
    s->release = NULL; /* moved: the capsule no longer owns it */
    Py_BEGIN_ALLOW_THREADS
    rc = rill_df_from_arrow(&st, &df, &err);
    Py_END_ALLOW_THREADS
    Py_DECREF(cap);
  } else if (PyObject_HasAttrString(obj, "__arrow_c_array__")) {
    PyObject* pair = PyObject_CallMethod(obj, "__arrow_c_array__", NULL);
    if (!pair) return NULL;
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
      Py_DECREF(pair);
      return PyErr_Format(PyExc_TypeError, "from_arrow: __arrow_c_array__ must return (schema, array) capsules");
    }
    struct ArrowSchema* sp = PyCapsule_GetPointer(PyTuple_GET_ITEM(pair, 0), "arrow_schema");
    struct ArrowArray* ap = sp ? PyCapsule_GetPointer(PyTuple_GET_ITEM(pair, 1), "arrow_array") : NULL;
    if (!ap) {
      Py_DECREF(pair);
      return NULL;
    }
    if (!sp->release || !ap->release) {
      Py_DECREF(pair);
      return rillpy_invalid("from_arrow: the Arrow array was already consumed");
    }
    struct ArrowSchema schema = *sp;
    struct ArrowArray array = *ap;
    sp->release = NULL;
    ap->release = NULL;
    Py_BEGIN_ALLOW_THREADS
    rc = rill_df_from_arrow_batch(&schema, &array, &df, &err);
    Py_END_ALLOW_THREADS
    Py_DECREF(pair);
  } else {
    return PyErr_Format(PyExc_TypeError,
                        "from_arrow: expected an object with __arrow_c_stream__ or __arrow_c_array__ (a pyarrow "
                        "Table or RecordBatch, a polars DataFrame, ...), got %s", Py_TYPE(obj)->tp_name);
  }
  return rillpy_df_result(rc, &err, df);
}

/* ================================================================ sources read from a path */

/* Opens a source at a path: rill_df_from_csv, rill_df_from_file_list, ... */
typedef int (*open_fn)(const char* path, const void* opts, rill_df_t** out, rill_error_t* err);

/* *out = open(path, opts) called without the GIL; path is a str or os.PathLike. 0 / -1 (raised). */
static int open_path(PyObject* path, open_fn open, const void* opts, rill_df_t** out) {
  PyObject* p = rillpy_fspath(path);
  if (!p) return -1;
  rill_error_t err;
  rill_error_clear(&err);
  int rc;
  const char* cp = PyBytes_AS_STRING(p);
  Py_BEGIN_ALLOW_THREADS
  rc = open(cp, opts, out, &err);
  Py_END_ALLOW_THREADS
  Py_DECREF(p);
  return rillpy_check(rc, &err) < 0 ? -1 : 0;
}

/* The paths of list or tuple `seq` (str or os.PathLike) as C strings: *cps (PyMem, n entries)
 * points into the bytes held by the new list *held. 0, or -1 with an exception (both NULL). */
static int encode_paths(PyObject* seq, PyObject** held, const char*** cps) {
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  *held = PyList_New(n);
  *cps = *held ? PyMem_Calloc((size_t)(n ? n : 1), sizeof **cps) : NULL;
  if (!*cps) {
    if (!PyErr_Occurred()) PyErr_NoMemory();
    Py_CLEAR(*held);
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* b = rillpy_fspath(PySequence_Fast_GET_ITEM(seq, i));
    if (!b) {
      PyMem_Free(*cps);
      *cps = NULL;
      Py_CLEAR(*held);
      return -1;
    }
    PyList_SET_ITEM(*held, i, b);
    (*cps)[i] = PyBytes_AS_STRING(b);
  }
  return 0;
}

/* Opens a source over several paths: rill_df_from_csv_files, rill_df_from_files, ... */
typedef int (*open_many_fn)(const char* const* paths, Py_ssize_t n, const void* opts, rill_df_t** out,
                            rill_error_t* err);

/* *out = open(the paths of list or tuple seq, opts) called without the GIL. 0 / -1 (raised). */
static int open_paths(PyObject* seq, open_many_fn open, const void* opts, rill_df_t** out) {
  PyObject* held;
  const char** cp;
  int rc = encode_paths(seq, &held, &cp);
  if (rc == 0) {
    rill_error_t err;
    rill_error_clear(&err);
    int r;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Py_BEGIN_ALLOW_THREADS
    r = open(cp, n, opts, out, &err);
    Py_END_ALLOW_THREADS
    rc = rillpy_check(r, &err) < 0 ? -1 : 0;
  }
  PyMem_Free(cp);
  Py_XDECREF(held);
  return rc;
}

static int open_csv_list(const char* const* paths, Py_ssize_t n, const void* o, rill_df_t** out, rill_error_t* err) {
  return rill_df_from_csv_files(paths, (int)n, o, out, err);
}

static int open_files(const char* const* paths, Py_ssize_t n, const void* o, rill_df_t** out, rill_error_t* err) {
  return rill_df_from_files(paths, (int64_t)n, o, out, err);
}

static int open_tar(const char* const* paths, Py_ssize_t n, const void* o, rill_df_t** out, rill_error_t* err) {
  return rill_df_from_tar(paths, (int)n, o, out, err);
}

static int open_csv(const char* path, const void* o, rill_df_t** out, rill_error_t* err) {
  return rill_df_from_csv(path, o, out, err);
}

static int open_file_list(const char* path, const void* o, rill_df_t** out, rill_error_t* err) {
  return rill_df_from_file_list(path, o, out, err);
}

static int open_image_folder(const char* path, const void* o, rill_df_t** out, rill_error_t* err) {
  return rill_df_from_image_folder(path, o, out, err);
}

/* ================================================================ CSV */

/* dtype overrides {name or index: dtype} -> columns (PyMem); keys must stay alive. */
static int parse_overrides(PyObject* dtypes, rill_csv_column_t** out, int* n) {
  *out = NULL;
  *n = 0;
  if (!dtypes || dtypes == Py_None) return 0;
  if (!PyDict_Check(dtypes)) {
    PyErr_Format(PyExc_TypeError, "dtypes must be a dict of column name or index -> dtype, got %s",
                 Py_TYPE(dtypes)->tp_name);
    return -1;
  }
  Py_ssize_t cnt = PyDict_Size(dtypes);
  rill_csv_column_t* cols = PyMem_Calloc((size_t)(cnt ? cnt : 1), sizeof *cols);
  if (!cols) {
    PyErr_NoMemory();
    return -1;
  }
  Py_ssize_t pos = 0, i = 0;
  PyObject *k, *v;
  while (PyDict_Next(dtypes, &pos, &k, &v)) {
    if (PyUnicode_Check(k)) {
      cols[i].name = PyUnicode_AsUTF8(k);
      if (!cols[i].name) goto fail;
    } else if (PyLong_Check(k)) {
      long idx = PyLong_AsLong(k);
      if (idx < 0 || idx > INT32_MAX) {
        if (!PyErr_Occurred()) rillpy_invalid("dtypes: column index %ld is negative", idx);
        goto fail;
      }
      cols[i].index = (int)idx;
    } else {
      PyErr_Format(PyExc_TypeError, "dtypes keys must be column names (str) or indices (int), got %s",
                   Py_TYPE(k)->tp_name);
      goto fail;
    }
    if (rillpy_parse_dtype(v, &cols[i].dtype) < 0) goto fail;
    i++;
  }
  *out = cols;
  *n = (int)i;
  return 0;
fail:
  PyMem_Free(cols);
  return -1;
}

static int parse_char(PyObject* o, char* out, const char* what) {
  if (!o || o == Py_None) return 0;
  Py_ssize_t sz;
  const char* s = PyUnicode_Check(o) ? PyUnicode_AsUTF8AndSize(o, &sz) : NULL;
  if (!s || sz != 1) {
    PyErr_Clear();
    rillpy_invalid("%s must be a single ASCII character", what);
    return -1;
  }
  *out = s[0];
  return 0;
}

/* The encoding named `e` (NULL: UTF-8), in *out; -1 with ValueError for another name. */
static int parse_encoding(const char* e, rill_csv_encoding_t* out) {
  static const struct {
    const char* name;
    rill_csv_encoding_t enc;
  } names[] = {{"utf-8", RILL_CSV_UTF8},           {"utf8", RILL_CSV_UTF8},
               {"utf-8-lossy", RILL_CSV_UTF8_LOSSY}, {"utf8-lossy", RILL_CSV_UTF8_LOSSY},
               {"latin-1", RILL_CSV_LATIN1},       {"latin1", RILL_CSV_LATIN1},
               {"iso-8859-1", RILL_CSV_LATIN1}};
  *out = RILL_CSV_UTF8;
  if (!e) return 0;
  for (size_t i = 0; i < sizeof names / sizeof *names; i++)
    if (!strcasecmp(e, names[i].name)) {
      *out = names[i].enc;
      return 0;
    }
  PyErr_Format(PyExc_ValueError, "encoding must be 'utf-8', 'utf-8-lossy' or 'latin-1', got '%s'", e);
  return -1;
}

/* null_values (None or a sequence of str or bytes) as a NULL-terminated array in *out (PyMem;
 * NULL for None) whose strings live in *keep (a new reference to hold until the call is done).
 * The file's bytes are compared before they are decoded, so a str is written in the file's
 * encoding `enc` (Latin-1 or UTF-8); bytes are taken as they are. */
static int parse_null_values(PyObject* v, rill_csv_encoding_t enc, const char*** out, PyObject** keep) {
  *out = NULL;
  *keep = NULL;
  if (!v || v == Py_None) return 0;
  if (PyUnicode_Check(v) || PyBytes_Check(v)) {
    PyErr_Format(PyExc_TypeError, "null_values must be a sequence of str, not a %s", Py_TYPE(v)->tp_name);
    return -1;
  }
  PyObject* seq = PySequence_Fast(v, "null_values must be a sequence of str");
  if (!seq) return -1;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  const char** a = PyMem_Calloc((size_t)n + 1, sizeof *a);
  PyObject* held = a ? PyList_New(n) : NULL;
  if (!held) {
    PyMem_Free(a);
    Py_DECREF(seq);
    if (!PyErr_Occurred()) PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
    PyObject* b = NULL;
    if (PyBytes_Check(item)) {
      b = item;
      Py_INCREF(b);
    } else if (PyUnicode_Check(item)) {
      b = enc == RILL_CSV_LATIN1 ? PyUnicode_AsLatin1String(item) : PyUnicode_AsUTF8String(item);
      if (!b && PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "null_values[%zd] ('%U') cannot be written in Latin-1, the file's encoding", i,
                     item);
      }
    } else {
      PyErr_Format(PyExc_TypeError, "null_values[%zd] must be a str or bytes, not %s", i, Py_TYPE(item)->tp_name);
    }
    if (b && (Py_ssize_t)strlen(PyBytes_AS_STRING(b)) != PyBytes_GET_SIZE(b)) {
      PyErr_Format(PyExc_TypeError, "null_values[%zd] must be without NUL characters", i);
      Py_CLEAR(b);
    }
    if (!b) {
      PyMem_Free(a);
      Py_DECREF(held);
      Py_DECREF(seq);
      return -1;
    }
    PyList_SET_ITEM(held, i, b);
    a[i] = PyBytes_AS_STRING(b);
  }
  Py_DECREF(seq);
  *out = a;
  *keep = held;
  return 0;
}

/* Frees what csv_opts made. */
static void csv_opts_free(rill_csv_opts_t* o, rill_csv_column_t* cols, PyObject* keep) {
  PyMem_Free((void*)o->null_values);
  o->null_values = NULL;
  PyMem_Free(cols);
  Py_XDECREF(keep);
}

/* Common options of from_csv / from_csv_buffer. */
static int csv_opts(PyObject* delimiter, PyObject* quote, int header, int infer, PyObject* dtypes,
                    PyObject* on_error, PyObject* on_bad_row, int threads, long long infer_rows,
                    long long chunk_bytes, const char* encoding, int trim, PyObject* comment, PyObject* escape,
                    PyObject* null_values, PyObject* decimal, long long skip_lines, rill_csv_opts_t* o,
                    rill_csv_column_t** cols, PyObject** keep) {
  memset(o, 0, sizeof *o);
  *cols = NULL;
  *keep = NULL;
  if (parse_encoding(encoding, &o->encoding) < 0) return -1;
  o->trim = trim;
  if (parse_char(delimiter, &o->delimiter, "delimiter") < 0 || parse_char(quote, &o->quote, "quote") < 0 ||
      parse_char(comment, &o->comment, "comment") < 0 || parse_char(escape, &o->escape, "escape") < 0 ||
      parse_char(decimal, &o->decimal, "decimal") < 0 ||
      rillpy_parse_on_error(on_error, &o->on_error) < 0 || rillpy_parse_on_error(on_bad_row, &o->on_bad_row) < 0)
    return -1;
  o->no_header = !header;
  o->no_infer = !infer;
  o->threads = threads;
  o->infer_rows = infer_rows;
  o->chunk_bytes = chunk_bytes;
  o->skip_lines = skip_lines;
  const char** nulls;
  if (parse_null_values(null_values, o->encoding, &nulls, keep) < 0) return -1;
  o->null_values = nulls;
  if (parse_overrides(dtypes, cols, &o->ncolumns) < 0) {
    csv_opts_free(o, *cols, *keep);
    return -1;
  }
  o->columns = *cols;
  return 0;
}

/* rill_df_from_csv_files over a list or tuple of paths (str or os.PathLike). 0 / -1 (raised). */
static int open_csv_files(PyObject* paths, const rill_csv_opts_t* o, rill_df_t** out) {
  Py_ssize_t n = PySequence_Fast_GET_SIZE(paths);
  if (n == 0 || n > INT32_MAX) {
    PyErr_Format(PyExc_ValueError, "from_csv: %s", n ? "too many paths" : "an empty list of paths");
    return -1;
  }
  return open_paths(paths, open_csv_list, o, out);
}

static PyObject* brace_paths(PyObject* path);

static PyObject* py_from_csv(PyObject* m, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"path",     "delimiter",  "quote",       "header",   "infer", "dtypes",
                           "on_error", "on_bad_row", "threads",     "infer_rows", "chunk_bytes", "encoding",
                           "trim",     "comment",    "escape",      "null_values", "decimal", "skip_lines", NULL};
  PyObject *path, *delimiter = NULL, *quote = NULL, *dtypes = Py_None, *on_error = Py_None, *on_bad_row = Py_None;
  PyObject *comment = NULL, *escape = NULL, *null_values = NULL, *decimal = NULL, *keep = NULL;
  int header = 1, infer = 1, threads = 0, trim = 0;
  long long infer_rows = 0, chunk_bytes = 0, skip_lines = 0;
  const char* encoding = NULL;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$OOppOOOiLLzpOOOOL:from_csv", kwlist, &path, &delimiter, &quote,
                                   &header, &infer, &dtypes, &on_error, &on_bad_row, &threads, &infer_rows,
                                   &chunk_bytes, &encoding, &trim, &comment, &escape, &null_values, &decimal,
                                   &skip_lines))
    return NULL;
  rill_csv_opts_t o;
  rill_csv_column_t* cols;
  if (csv_opts(delimiter, quote, header, infer, dtypes, on_error, on_bad_row, threads, infer_rows, chunk_bytes,
               encoding, trim, comment, escape, null_values, decimal, skip_lines, &o, &cols, &keep) < 0)
    return NULL;
  rill_df_t* df = NULL;
  /* a list or tuple of paths, a pattern that names no file (its files), or one file (None) */
  PyObject* files = PyList_Check(path) || PyTuple_Check(path) ? Py_NewRef(path) : brace_paths(path);
  int rc = !files ? -1 : files != Py_None ? open_csv_files(files, &o, &df) : open_path(path, open_csv, &o, &df);
  Py_XDECREF(files);
  csv_opts_free(&o, cols, keep);
  return rc < 0 ? NULL : rillpy_df_new(df, NULL);
}

static PyObject* py_from_csv_buffer(PyObject* m, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"data",       "name",    "delimiter",  "quote",       "header",   "infer",
                           "dtypes",     "on_error", "on_bad_row", "threads",    "infer_rows", "chunk_bytes",
                           "encoding",   "trim",    "comment",    "escape",      "null_values", "decimal",
                           "skip_lines", NULL};
  PyObject *data, *delimiter = NULL, *quote = NULL, *dtypes = Py_None, *on_error = Py_None, *on_bad_row = Py_None;
  PyObject *comment = NULL, *escape = NULL, *null_values = NULL, *decimal = NULL, *keep = NULL;
  const char *name = NULL, *encoding = NULL;
  int header = 1, infer = 1, threads = 0, trim = 0;
  long long infer_rows = 0, chunk_bytes = 0, skip_lines = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$zOOppOOOiLLzpOOOOL:from_csv_buffer", kwlist, &data, &name,
                                   &delimiter, &quote, &header, &infer, &dtypes, &on_error, &on_bad_row, &threads,
                                   &infer_rows, &chunk_bytes, &encoding, &trim, &comment, &escape, &null_values,
                                   &decimal, &skip_lines))
    return NULL;
  Py_buffer b;
  if (PyUnicode_Check(data))
    return PyErr_Format(PyExc_TypeError, "from_csv_buffer: data must be bytes-like (encode str first), got str");
  if (PyObject_GetBuffer(data, &b, PyBUF_SIMPLE) < 0) return NULL;
  rill_csv_opts_t o;
  rill_csv_column_t* cols;
  if (csv_opts(delimiter, quote, header, infer, dtypes, on_error, on_bad_row, threads, infer_rows, chunk_bytes,
               encoding, trim, comment, escape, null_values, decimal, skip_lines, &o, &cols, &keep) < 0) {
    PyBuffer_Release(&b);
    return NULL;
  }
  o.name = name;
  rill_error_t err;
  rill_error_clear(&err);
  rill_df_t* df = NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS /* the bytes are copied */
  rc = rill_df_from_csv_buffer(b.buf, (size_t)b.len, &o, &df, &err);
  Py_END_ALLOW_THREADS
  PyBuffer_Release(&b);
  csv_opts_free(&o, cols, keep);
  return rillpy_df_result(rc, &err, df);
}

/* ================================================================ SQLite */

static PyObject* py_from_sqlite(PyObject* m, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"path", "sql", "params", "dtypes", "on_error", "infer_rows", "chunk_rows",
                           "busy_timeout_ms", "table_hold_bytes", "encoding", NULL};
  PyObject *path, *params = NULL, *dtypes = Py_None, *on_error = Py_None;
  const char *sql, *encoding = NULL;
  long long infer_rows = 0, chunk_rows = 0, hold = 0;
  int busy = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "Os|O$OOLLiLz:from_sqlite", kwlist, &path, &sql, &params, &dtypes,
                                   &on_error, &infer_rows, &chunk_rows, &busy, &hold, &encoding))
    return NULL;
  rill_sqlite_opts_t o = {0};
  if (parse_encoding(encoding, &o.encoding) < 0) return NULL;
  o.infer_rows = infer_rows;
  o.chunk_rows = chunk_rows;
  o.busy_timeout_ms = busy;
  o.table_hold_bytes = hold;
  if (rillpy_parse_on_error(on_error, &o.on_error) < 0) return NULL;
  rill_csv_column_t* cols = NULL;
  if (parse_overrides(dtypes, &cols, &o.ncolumns) < 0) return NULL;
  o.columns = cols;
  PyObject* seq = (!params || params == Py_None) ? PyTuple_New(0)
                                                 : PySequence_Fast(params, "from_sqlite: params must be a sequence");
  PyObject* p = NULL;
  rill_sql_param_t* ps = NULL;
  Py_buffer* bufs = NULL;
  Py_ssize_t np_ = 0, nb = 0;
  PyObject* result = NULL;
  if (!seq) goto done;
  np_ = PySequence_Fast_GET_SIZE(seq);
  ps = PyMem_Calloc((size_t)(np_ ? np_ : 1), sizeof *ps);
  bufs = PyMem_Calloc((size_t)(np_ ? np_ : 1), sizeof *bufs);
  if (!ps || !bufs) {
    PyErr_NoMemory();
    goto done;
  }
  for (Py_ssize_t i = 0; i < np_; i++) {
    PyObject* v = PySequence_Fast_GET_ITEM(seq, i);
    if (v == Py_None) {
      ps[i].kind = RILL_SQL_NULL;
    } else if (PyLong_Check(v)) { /* bool included */
      ps[i].kind = RILL_SQL_INT64;
      ps[i].i = PyLong_AsLongLong(v);
      if (PyErr_Occurred()) goto done;
    } else if (PyFloat_Check(v)) {
      ps[i].kind = RILL_SQL_DOUBLE;
      ps[i].d = PyFloat_AS_DOUBLE(v);
    } else if (PyUnicode_Check(v)) {
      Py_ssize_t sz;
      ps[i].kind = RILL_SQL_TEXT;
      ps[i].bytes = PyUnicode_AsUTF8AndSize(v, &sz);
      if (!ps[i].bytes) goto done;
      ps[i].size = sz;
    } else if (PyObject_CheckBuffer(v)) {
      if (PyObject_GetBuffer(v, &bufs[nb], PyBUF_SIMPLE) < 0) goto done;
      ps[i].kind = RILL_SQL_BLOB;
      ps[i].bytes = bufs[nb].buf;
      ps[i].size = bufs[nb].len;
      nb++;
    } else {
      PyErr_Format(PyExc_TypeError, "from_sqlite: parameter %zd is %s; parameters are None, int, float, str or bytes",
                   i + 1, Py_TYPE(v)->tp_name);
      goto done;
    }
  }
  p = rillpy_fspath(path);
  if (!p) goto done;
  rill_error_t err;
  rill_error_clear(&err);
  rill_df_t* df = NULL;
  int rc;
  const char* cp = PyBytes_AS_STRING(p);
  Py_BEGIN_ALLOW_THREADS
  rc = rill_df_from_sqlite(cp, sql, ps, (int)np_, &o, &df, &err);
  Py_END_ALLOW_THREADS
  result = rillpy_df_result(rc, &err, df);
done:
  for (Py_ssize_t i = 0; i < nb; i++) PyBuffer_Release(&bufs[i]);
  PyMem_Free(bufs);
  PyMem_Free(ps);
  PyMem_Free(cols);
  Py_XDECREF(p);
  Py_XDECREF(seq);
  return result;
}

/* ================================================================ files and image folders */

static int files_opts(PyObject* on_error, long long grain, int all_files, rill_files_opts_t* o) {
  memset(o, 0, sizeof *o);
  if (rillpy_parse_grain(grain, &o->grain) < 0) return -1;
  o->all_files = all_files;
  return rillpy_parse_on_error(on_error, &o->on_error);
}

static PyObject* py_from_files(PyObject* m, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"paths", "on_error", "grain", NULL};
  PyObject *paths, *on_error = Py_None;
  long long grain = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$OL:from_files", kwlist, &paths, &on_error, &grain)) return NULL;
  rill_files_opts_t o;
  if (files_opts(on_error, grain, 0, &o) < 0) return NULL;
  if (PyUnicode_Check(paths) || PyBytes_Check(paths))
    return PyErr_Format(PyExc_TypeError, "from_files: paths must be a sequence of paths, not a single path");
  PyObject* seq = PySequence_Fast(paths, "from_files: paths must be a sequence of str or os.PathLike");
  if (!seq) return NULL;
  rill_df_t* df = NULL;
  int rc = open_paths(seq, open_files, &o, &df);
  Py_DECREF(seq);
  return rc < 0 ? NULL : rillpy_df_new(df, NULL);
}

static PyObject* py_from_file_list(PyObject* m, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"list_path", "on_error", "grain", NULL};
  PyObject *path, *on_error = Py_None;
  long long grain = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$OL:from_file_list", kwlist, &path, &on_error, &grain)) return NULL;
  rill_files_opts_t o;
  if (files_opts(on_error, grain, 0, &o) < 0) return NULL;
  rill_df_t* df = NULL;
  if (open_path(path, open_file_list, &o, &df) < 0) return NULL;
  return rillpy_df_new(df, NULL);
}

static PyObject* py_from_image_folder(PyObject* m, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"root", "on_error", "all_files", NULL};
  PyObject *path, *on_error = Py_None;
  int all_files = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$Op:from_image_folder", kwlist, &path, &on_error, &all_files))
    return NULL;
  rill_files_opts_t o;
  if (files_opts(on_error, 0, all_files, &o) < 0) return NULL;
  rill_df_t* df = NULL;
  if (open_path(path, open_image_folder, &o, &df) < 0) return NULL;
  const char* const* names = NULL;
  int count = 0;
  rill_error_t err;
  rill_error_clear(&err);
  int rc = rill_image_folder_classes(df, &names, &count, &err);
  PyObject* classes = rc < 0 ? NULL : PyTuple_New(count);
  for (int i = 0; classes && i < count; i++) {
    PyObject* s = PyUnicode_DecodeFSDefault(names[i]);
    if (!s) {
      Py_CLEAR(classes);
      break;
    }
    PyTuple_SET_ITEM(classes, i, s);
  }
  PyObject* r = rillpy_df_new(df, NULL);
  if (!r || !classes) {
    if (!classes && rc < 0) rillpy_raise(rc, &err);
    Py_XDECREF(r);
    Py_XDECREF(classes);
    return NULL;
  }
  ((RillDataFrame*)r)->classes = classes;
  return r;
}

/* ================================================================ tar archives */

/* dtypes {extension: dtype} -> columns (PyMem), whose ext strings point into the str keys that
 * the new list *keep holds (so they outlive a change to the dict while the GIL is released).
 * 0, or -1 with an exception (*out and *keep NULL). */
/* The str keys (and, for rename, str values) of dict d as UTF-8 kept alive by *keep; `what`
 * names the argument. The entry of key k: found among cols[0..*n) by its text, or added. */
static int tar_dict(PyObject* d, const char* what, int is_rename, rill_tar_column_t* cols, int* n, PyObject* keep) {
  if (!d || d == Py_None) return 0;
  if (!PyDict_Check(d)) {
    PyErr_Format(PyExc_TypeError, "from_tar: %s must be a dict of extension -> %s, got %s", what,
                 is_rename ? "column name" : "dtype", Py_TYPE(d)->tp_name);
    return -1;
  }
  Py_ssize_t pos = 0;
  PyObject *k, *v;
  while (PyDict_Next(d, &pos, &k, &v)) {
    if (!PyUnicode_Check(k) || (is_rename && !PyUnicode_Check(v))) {
      int key = !PyUnicode_Check(k);
      PyErr_Format(PyExc_TypeError, "from_tar: %s %s must be %s, got %s", what, key ? "keys" : "values",
                   key ? "extensions (str, e.g. 'cls')" : "column names (str)", Py_TYPE(key ? k : v)->tp_name);
      return -1;
    }
    const char* ext = PyUnicode_AsUTF8(k);
    if (!ext || PyList_Append(keep, k) < 0) return -1;
    int i = 0;
    while (i < *n && strcmp(cols[i].ext, ext) != 0) i++;
    if (i == *n) cols[(*n)++] = (rill_tar_column_t){.ext = ext};
    if (is_rename) {
      if (!(cols[i].name = PyUnicode_AsUTF8(v)) || PyList_Append(keep, v) < 0) return -1;
    } else if (rillpy_parse_dtype(v, &cols[i].dtype) < 0) {
      return -1;
    }
  }
  return 0;
}

/* The columns of from_tar's dtypes and rename (dicts keyed by extension) -> *out (PyMem,
 * *n entries) whose strings *keep holds. 0 / -1 (raised). */
static int parse_tar_columns(PyObject* dtypes, PyObject* rename, rill_tar_column_t** out, int* n, PyObject** keep) {
  *out = NULL;
  *n = 0;
  Py_ssize_t cnt = (dtypes && PyDict_Check(dtypes) ? PyDict_Size(dtypes) : 0) +
                   (rename && PyDict_Check(rename) ? PyDict_Size(rename) : 0);
  if (cnt > INT32_MAX) {
    rillpy_invalid("from_tar: too many dtypes");
    return -1;
  }
  rill_tar_column_t* cols = PyMem_Calloc((size_t)(cnt ? cnt : 1), sizeof *cols);
  *keep = PyList_New(0);
  if (!cols || !*keep) {
    if (!PyErr_Occurred()) PyErr_NoMemory();
  } else if (tar_dict(dtypes, "dtypes", 0, cols, n, *keep) == 0 && tar_dict(rename, "rename", 1, cols, n, *keep) == 0) {
    *out = cols;
    return 0;
  }
  PyMem_Free(cols);
  Py_CLEAR(*keep);
  *n = 0;
  return -1;
}

/* The paths of brace pattern `b` (bytes) as a new list of bytes (or of str decoded with the
 * file system's encoding, when `as_str`); NULL (raised). */
static PyObject* expand_pattern(PyObject* b, int as_str) {
  char** paths = NULL;
  int64_t n = 0;
  rill_error_t err;
  rill_error_clear(&err);
  if (rillpy_check(rill_expand_braces(PyBytes_AS_STRING(b), &paths, &n, &err), &err) < 0) return NULL;
  PyObject* list = PyList_New((Py_ssize_t)n);
  for (int64_t i = 0; list && i < n; i++) {
    PyObject* item = as_str ? PyUnicode_DecodeFSDefault(paths[i]) : PyBytes_FromString(paths[i]);
    if (!item) Py_CLEAR(list);
    else PyList_SET_ITEM(list, (Py_ssize_t)i, item);
  }
  rill_expand_braces_free(paths, n);
  return list;
}

static PyObject* py_expand_braces(PyObject* m, PyObject* pattern) {
  PyObject* b = rillpy_fspath(pattern);
  if (!b) return NULL;
  PyObject* list = expand_pattern(b, !PyBytes_Check(pattern));
  Py_DECREF(b);
  return list;
}

/* A source's one path: None when it names a file or holds no brace (it is read as it is),
 * else a new list of the paths its braces give ("train-{000..146}.tar", as WebDataset takes
 * shard lists). A new reference, or NULL (raised). */
static PyObject* brace_paths(PyObject* path) {
  PyObject* b = rillpy_fspath(path);
  if (!b) return NULL;
  PyObject* r = rill_path_is_pattern(PyBytes_AS_STRING(b)) ? expand_pattern(b, 0) : Py_NewRef(Py_None);
  Py_DECREF(b);
  return r;
}

/* from_tar's one path as a sequence: itself, or the paths of its brace pattern. */
static PyObject* tar_single(PyObject* path) {
  PyObject* r = brace_paths(path);
  if (r != Py_None) return r;
  Py_DECREF(r);
  return PyTuple_Pack(1, path);
}

static PyObject* py_from_tar(PyObject* m, PyObject* args, PyObject* kw) {
  static char* kwlist[] = {"paths", "dtypes", "rename", "on_error", "grain", "threads", "index_dir", NULL};
  PyObject *paths, *dtypes = Py_None, *rename = Py_None, *on_error = Py_None, *index_dir = Py_None;
  long long grain = 0;
  int threads = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$OOOLiO:from_tar", kwlist, &paths, &dtypes, &rename, &on_error,
                                   &grain, &threads, &index_dir))
    return NULL;
  rill_tar_opts_t o = {.threads = threads};
  if (rillpy_parse_on_error(on_error, &o.on_error) < 0 || rillpy_parse_grain(grain, &o.grain) < 0) return NULL;
  PyObject* dir = index_dir == Py_None ? NULL : rillpy_fspath(index_dir); /* kept until the open returns */
  if (index_dir != Py_None && !dir) return NULL;
  o.index_dir = dir ? PyBytes_AS_STRING(dir) : NULL;
  /* one archive (str, bytes or os.PathLike) or a sequence of them */
  int single = PyUnicode_Check(paths) || PyBytes_Check(paths) || PyObject_HasAttrString(paths, "__fspath__");
  PyObject* seq = single ? tar_single(paths)
                         : PySequence_Fast(paths, "from_tar: paths must be a path or a sequence of str, bytes or "
                                                  "os.PathLike");
  if (!seq) {
    Py_XDECREF(dir);
    return NULL;
  }
  PyObject* keep = NULL;
  rill_tar_column_t* cols = NULL;
  rill_df_t* df = NULL;
  int rc = -1;
  if (PySequence_Fast_GET_SIZE(seq) > INT32_MAX)
    rillpy_invalid("from_tar: too many paths");
  else if (parse_tar_columns(dtypes, rename, &cols, &o.ncolumns, &keep) == 0) {
    o.columns = cols;
    rc = open_paths(seq, open_tar, &o, &df);
  }
  PyMem_Free(cols);
  Py_XDECREF(keep);
  Py_DECREF(seq);
  Py_XDECREF(dir);
  return rc < 0 ? NULL : rillpy_df_new(df, NULL);
}

static PyObject* py_prune_tar_indexes(PyObject* m, PyObject* index_dir) {
  PyObject* dir = rillpy_fspath(index_dir);
  if (!dir) return NULL;
  int64_t kept = 0, removed = 0;
  rill_error_t err;
  rill_error_clear(&err);
  int rc;
  Py_BEGIN_ALLOW_THREADS /* reads every index and stats every archive */
  rc = rill_tar_index_prune(PyBytes_AS_STRING(dir), &kept, &removed, &err);
  Py_END_ALLOW_THREADS
  Py_DECREF(dir);
  if (rillpy_check(rc, &err) < 0) return NULL;
  return Py_BuildValue("(LL)", (long long)kept, (long long)removed);
}

/* ================================================================ registration */

static PyMethodDef source_functions[] = {
    {"from_numpy", (PyCFunction)(void (*)(void))py_from_numpy, METH_VARARGS | METH_KEYWORDS,
     "from_numpy(columns: Mapping[str, array-like] | None = None, *, copy=False, **arrays) -> DataFrame\n\n"
     "A dataframe whose columns are numpy arrays or array-likes (all of one length): 1-d arrays give "
     "scalar cells, N-d arrays fixed-shape tensor cells [n, ...]; masked arrays and None give nulls; "
     "str give string columns, bytes binary ones; datetime64 gives timestamp_us (NaT = null). "
     "copy=False borrows the numpy memory (the dataframe keeps the arrays alive; do not write to them); "
     "copy=True copies."},
    {"from_arrays", (PyCFunction)(void (*)(void))py_from_arrays, METH_VARARGS | METH_KEYWORDS,
     "from_arrays(names: Sequence[str], arrays: Sequence[Array | array-like], copy=False) -> DataFrame\n\n"
     "A dataframe from rill.Array objects or array-likes (as from_numpy), one per name."},
    {"from_arrow", (PyCFunction)py_from_arrow, METH_O,
     "from_arrow(obj) -> DataFrame\n\nA dataframe holding the data of an object with __arrow_c_stream__ "
     "(preferred: pyarrow Table, polars DataFrame, ...) or __arrow_c_array__ (a record batch); "
     "zero-copy where the layout allows."},
    {"from_csv", (PyCFunction)(void (*)(void))py_from_csv, METH_VARARGS | METH_KEYWORDS,
     "from_csv(path, *, delimiter=',', quote='\"', header=True, infer=True, dtypes=None, on_error='raise', "
     "on_bad_row='raise', threads=0, infer_rows=0, chunk_bytes=0, encoding='utf-8', trim=False, comment=None, "
     "escape=None, null_values=None, decimal='.', skip_lines=0) -> DataFrame\n\n"
     "A dataframe over a CSV file (str or os.PathLike), parsed when rows are pulled; a list or tuple of "
     "paths reads their rows one file after another (the same columns in any order; int64 in one file "
     "and float64 in another is float64), and so does a path that names no file and holds braces "
     "('part-{000..009}.csv': the paths of expand_braces). A gzip- or "
     "zstd-compressed file (known by its bytes, not its name) is decompressed first (into memory, or past 1 GiB "
     "of text into a temporary file in $TMPDIR). dtypes: "
     "{column name or index: dtype} overrides of the inferred types ('binary': bytes as they are). "
     "encoding: 'utf-8' (text that is not is a row error, see on_error), 'utf-8-lossy' (ill-formed "
     "parts read as U+FFFD) or 'latin-1'. trim: spaces and tabs around fields and names are dropped "
     "(a quote after them opens a quoted field) and lines of only blanks skipped. comment: lines "
     "starting with this character are skipped. escape: this character makes the next one text (a "
     "quote, the delimiter, a line break, itself), inside quotes or not. null_values: texts that are "
     "null cells in every column (e.g. ['NA', '?']), skipped by type inference; a str is compared in the file's "
     "encoding, bytes as they are. decimal: the decimal "
     "separator of floats (',' for 3,14 with delimiter=';'). skip_lines: lines at the start left out "
     "whatever they hold (a preamble before the header); line numbers in errors still count them."},
    {"from_csv_buffer", (PyCFunction)(void (*)(void))py_from_csv_buffer, METH_VARARGS | METH_KEYWORDS,
     "from_csv_buffer(data, *, name=None, delimiter=',', quote='\"', header=True, infer=True, dtypes=None, "
     "on_error='raise', on_bad_row='raise', threads=0, infer_rows=0, chunk_bytes=0, encoding='utf-8', trim=False, "
     "comment=None, escape=None, null_values=None, decimal='.', skip_lines=0) -> DataFrame\n\n"
     "As from_csv over bytes-like CSV data (copied); name is used in error messages."},
    {"from_sqlite", (PyCFunction)(void (*)(void))py_from_sqlite, METH_VARARGS | METH_KEYWORDS,
     "from_sqlite(path, sql, params=(), *, dtypes=None, on_error='raise', infer_rows=0, chunk_rows=0, "
     "busy_timeout_ms=0, table_hold_bytes=0, encoding='utf-8') -> DataFrame\n\n"
     "A dataframe over the result of `sql` (a query or a table name) on the SQLite database at path "
     "(opened read-only), with ?1, ?2, ... bound to params (None, int, float, str, bytes). "
     "A table name read out of order (shuffled) is held in memory once it fits table_hold_bytes "
     "(0 = 1 GiB, negative = never: every row is a lookup by rowid). encoding: of the bytes of TEXT "
     "values read as str, and of column names: 'utf-8' (other bytes are a row error, see on_error), "
     "'utf-8-lossy' (ill-formed parts read as U+FFFD) or 'latin-1'."},
    {"from_files", (PyCFunction)(void (*)(void))py_from_files, METH_VARARGS | METH_KEYWORDS,
     "from_files(paths: Sequence[str | os.PathLike], *, on_error='raise', grain=0) -> DataFrame\n\n"
     "A dataframe with columns 'path' (string) and 'bytes' (binary, read when pulled)."},
    {"from_file_list", (PyCFunction)(void (*)(void))py_from_file_list, METH_VARARGS | METH_KEYWORDS,
     "from_file_list(list_path, *, on_error='raise', grain=0) -> DataFrame\n\n"
     "As from_files over the paths listed one per line in a text file (relative to its folder)."},
    {"from_image_folder", (PyCFunction)(void (*)(void))py_from_image_folder, METH_VARARGS | METH_KEYWORDS,
     "from_image_folder(root, *, on_error='raise', all_files=False) -> DataFrame\n\n"
     "An ImageFolder tree root/<class>/...: columns 'path', 'bytes', 'label' (int64); the class names "
     "are DataFrame.classes."},
    {"expand_braces", (PyCFunction)py_expand_braces, METH_O,
     "expand_braces(pattern: str | bytes | os.PathLike) -> list[str] | list[bytes]\n\n"
     "The paths a brace pattern stands for, as shells and WebDataset's shard lists expand them: "
     "'{a,b}' alternatives (nested, may be empty), '{N..M}' and '{N..M..STEP}' integer ranges up or down "
     "(zero-padded to the wider bound when either is written with a leading zero: '{000..146}'), "
     "'{a..e}' letter ranges; several groups multiply, the leftmost varying slowest. '{}' and '{x}' are "
     "text; a backslash makes the next character text. No glob and no file is looked at. bytes in, bytes "
     "out. InvalidArgumentError for an unmatched brace (naming its character), a step of 0, more than "
     "1,000,000 paths."},
    {"from_tar", (PyCFunction)(void (*)(void))py_from_tar, METH_VARARGS | METH_KEYWORDS,
     "from_tar(paths: str | bytes | os.PathLike | Sequence[str | bytes | os.PathLike], *, dtypes=None, "
     "rename=None, on_error='raise', grain=0, threads=0, index_dir=None) -> DataFrame\n\n"
     "A dataframe of the samples of WebDataset-style tar archives (shards; one path or a sequence; one path "
     "that names no file is expanded as a brace pattern, 'train-{000..146}.tar', see expand_braces), one "
     "row per sample: the consecutive members DIR/KEY.EXT of one DIR/KEY. Columns 'key' (string), 'path' "
     "(string, 'ARCHIVE:KEY') and one per extension found in any archive, in byte order (lower case; "
     "binary, read when pulled; null where a sample lacks it). The archives (ustar, pax, GNU; not "
     "compressed) are indexed when opened. dtypes: {extension: dtype} ('string' for text, numbers and "
     "bool parsed from the member's text, e.g. {'cls': 'int64'}); an extension no archive holds is an "
     "error. rename: {extension: column name}; extensions given one name are alternatives of one column "
     "({'jpg': 'image', 'png': 'image'}: a sample holds one of them), and an extension named 'key' or 'path' "
     "can be read under another name. on_error: for a member that cannot be read or converted. threads: "
     "archives indexed side by side at open (0: up to 16; 1: the calling thread). index_dir: an existing "
     "folder where each archive's index is saved once made and read back at later opens instead of the "
     "archive's headers, while the archive is unchanged (size, modification time, first block, last member's "
     "header: a copy made with rsync -a or cp -p keeps its index, and machines can share the folder); a damaged or "
     "stale saved index is not used, and none is removed (see prune_tar_indexes)."},
    {"prune_tar_indexes", (PyCFunction)py_prune_tar_indexes, METH_O,
     "prune_tar_indexes(index_dir: str | bytes | os.PathLike) -> tuple[int, int]\n\n"
     "Removes from index_dir (from_tar's) the saved indexes no open would use: of archives gone or changed, "
     "damaged ones, older versions, files not named for their archive, and temporary files over an hour old "
     "that a process stopped while saving left. Other files are not touched. An index belongs to the path it "
     "was saved for: run it where the archives are seen at those paths. Returns (kept, removed), counts of "
     "index files. InvalidArgumentError when index_dir is not a folder, RillIOError when it cannot be listed or "
     "a file cannot be removed."},
    {NULL, NULL, 0, NULL}};

int rillpy_init_sources(PyObject* m) { return PyModule_AddFunctions(m, source_functions); }
