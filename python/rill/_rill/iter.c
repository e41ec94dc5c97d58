/* rill.Iterator: mirrors rill_iter_t. Rows (rill.Row), epochs, seeking, prefetch, statistics
 * and resumable state. Every call that can wait on worker threads runs without the GIL. */
#include "rillpy.h"

#include <string.h>

typedef struct RillIterator {
  PyObject_HEAD
  RillDataFrame* df;     /* the iterated dataframe (strong reference) */
  rill_iter_t* it;       /* NULL once closed */
  int* columns;          /* dataframe column of each row column (PyMem), NULL = all */
  int ncolumns;
  int busy;              /* a call without the GIL is running on it */
  PyObject* names;       /* the rows' column names (a tuple, shared by every row) */
  rill_stream_t* stream; /* the consumer's CUDA stream (a wrapper), or NULL */
  PyObject* stream_obj;  /* the Python object that named it (kept alive with the iterator) */
  PyObject* weakrefs;
} RillIterator;

/* Checks the iterator is open and not in use by another thread; marks it busy. */
static int enter(RillIterator* self) {
  if (!self->it) {
    rillpy_invalid("the iterator is closed");
    return -1;
  }
  if (self->busy) {
    rillpy_invalid("the iterator is in use by another thread (one iterator per consumer thread)");
    return -1;
  }
  self->busy = 1;
  return 0;
}

/* An integer attribute of `o`, or -1 with no exception when it has none. */
static long long int_attr(PyObject* o, const char* name) {
  PyObject* v = PyObject_GetAttrString(o, name);
  if (v == NULL) {
    PyErr_Clear();
    return -1;
  }
  long long r = PyLong_Check(v) ? PyLong_AsLongLong(v) : -1;
  Py_DECREF(v);
  if (r == -1 && PyErr_Occurred()) PyErr_Clear();
  return r;
}

/* The CUDA stream and device that `stream` names: an int (a cudaStream_t; 0 = the legacy
 * default stream; device 0), or an object with __cuda_stream__() (the CUDA stream protocol),
 * `cuda_stream` (torch.cuda.Stream) or `ptr` (cupy), its device from `device.index` or
 * `device_id`. -1 with TypeError otherwise. */
static int parse_stream(PyObject* stream, void** handle, int* device) {
  *device = 0;
  long long h = -1;
  if (PyLong_Check(stream)) {
    h = PyLong_AsLongLong(stream);
    if (h == -1 && PyErr_Occurred()) return -1;
  } else {
    PyObject* proto = PyObject_HasAttrString(stream, "__cuda_stream__")
                          ? PyObject_CallMethod(stream, "__cuda_stream__", NULL) : NULL;
    if (proto != NULL) {
      if (PyTuple_Check(proto) && PyTuple_GET_SIZE(proto) == 2 && PyLong_Check(PyTuple_GET_ITEM(proto, 1)))
        h = PyLong_AsLongLong(PyTuple_GET_ITEM(proto, 1));
      Py_DECREF(proto);
      if (h == -1 && PyErr_Occurred()) return -1;
    } else if (PyErr_Occurred()) {
      return -1;
    }
    if (h < 0) h = int_attr(stream, "cuda_stream");
    if (h < 0) h = int_attr(stream, "ptr");
    PyObject* dev = PyObject_GetAttrString(stream, "device");
    if (dev != NULL) {
      long long i = int_attr(dev, "index");
      if (i < 0 && PyLong_Check(dev)) i = PyLong_AsLongLong(dev);
      if (i >= 0) *device = (int)i;
      Py_DECREF(dev);
    }
    PyErr_Clear();
    long long d = int_attr(stream, "device_id");
    if (d >= 0) *device = (int)d;
  }
  if (h < 0) {
    PyErr_Format(PyExc_TypeError,
                 "stream must be a CUDA stream: an int (cudaStream_t) or an object with "
                 "__cuda_stream__, cuda_stream (torch.cuda.Stream) or ptr (cupy), not %R", stream);
    return -1;
  }
  *handle = (void*)(uintptr_t)h;
  return 0;
}

PyObject* rillpy_iter_new(RillDataFrame* df, PyObject* columns, int prefetch, int threads, uint64_t seed,
                          int64_t epoch, PyObject* stream, int next_epoch) {
  int* cols = NULL;
  int n = 0;
  void* handle = NULL;
  int device = 0;
  if (stream != NULL && stream != Py_None && parse_stream(stream, &handle, &device) < 0) return NULL;
  if (rillpy_parse_columns(df->df, columns, &cols, &n) < 0) return NULL;
  RillIterator* self = PyObject_New(RillIterator, &RillIterator_Type);
  if (!self) {
    PyMem_Free(cols);
    return NULL;
  }
  self->df = (RillDataFrame*)Py_NewRef((PyObject*)df);
  self->it = NULL;
  self->columns = cols;
  self->ncolumns = n;
  self->busy = 0;
  self->stream = NULL;
  self->stream_obj = NULL;
  self->weakrefs = NULL;
  self->names = rillpy_row_names(df->df, cols, n);
  if (!self->names) {
    Py_DECREF(self);
    return NULL;
  }
  rill_error_t err;
  rill_error_clear(&err);
  if (stream != NULL && stream != Py_None) {
    int rc = rill_stream_wrap_cuda(device, handle, &self->stream, &err);
    if (rc < 0) {
      Py_DECREF(self);
      return rillpy_raise(rc, &err);
    }
    self->stream_obj = Py_NewRef(stream);
  }
  rill_iter_opts_t o = {0};
  o.columns = cols;
  o.ncolumns = n;
  o.prefetch = prefetch;
  o.threads = threads;
  o.seed = seed;
  o.epoch = epoch;
  o.stream = self->stream;
  o.next_epoch = next_epoch;
  rill_iter_t* it = NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = rill_iter_new(df->df, &o, &it, &err);
  Py_END_ALLOW_THREADS
  if (rc < 0) {
    Py_DECREF(self);
    return rillpy_raise(rc, &err);
  }
  self->it = it;
  return (PyObject*)self;
}

static void close_it(RillIterator* self) {
  rill_iter_t* it = self->it;
  self->it = NULL;
  if (it) {
    Py_BEGIN_ALLOW_THREADS
    rill_iter_free(it);
    Py_END_ALLOW_THREADS
  }
  /* after the iterator: its last batches were fenced on the stream when it let them go */
  rill_stream_free(self->stream);
  self->stream = NULL;
  Py_CLEAR(self->stream_obj);
}

static void iter_dealloc(RillIterator* self) {
  if (self->weakrefs) PyObject_ClearWeakRefs((PyObject*)self);
  close_it(self);
  PyMem_Free(self->columns);
  Py_CLEAR(self->names);
  Py_CLEAR(self->df);
  Py_TYPE(self)->tp_free((PyObject*)self);
}

static PyObject* iter_tp_new(PyTypeObject* type, PyObject* args, PyObject* kwds) {
  PyErr_SetString(PyExc_TypeError, "rill.Iterator cannot be created directly; use DataFrame.iter()");
  return NULL;
}

static PyObject* iter_self(PyObject* self) { return Py_NewRef(self); }

static PyObject* iter_next(RillIterator* self) {
  if (enter(self) < 0) return NULL;
  rill_row_t row;
  rill_error_t err;
  rill_error_clear(&err);
  int rc;
  /* a row the iterator holds is quicker to take than giving up the GIL and taking it back */
  PyThreadState* ts = rill_iter_ready(self->it) ? NULL : PyEval_SaveThread();
  rc = rill_iter_next(self->it, &row, &err);
  if (ts) PyEval_RestoreThread(ts);
  PyObject* r;
  if (rc == RILL_END)
    r = NULL; /* StopIteration */
  else if (rc < 0)
    r = rillpy_raise_row_error(rc, &err, self->df->df);
  else
    r = rillpy_row_new(self->df, &row, self->columns, self->names);
  self->busy = 0;
  return r;
}

static Py_ssize_t iter_len(RillIterator* self) { return (Py_ssize_t)rill_df_rows(self->df->df); }

static PyObject* iter_epoch(RillIterator* self, void* c) {
  if (!self->it) return rillpy_invalid("the iterator is closed");
  return PyLong_FromLongLong(rill_iter_epoch(self->it));
}

static PyObject* iter_columns(RillIterator* self, void* c) {
  return rillpy_column_list(self->df->df, self->columns, self->ncolumns, 0);
}

static PyObject* iter_dataframe(RillIterator* self, void* c) { return Py_NewRef((PyObject*)self->df); }

static PyObject* iter_closed(RillIterator* self, void* c) { return PyBool_FromLong(self->it == NULL); }

/* Raises the error of the iterator's last failed call (rill_iter_error) as the exception of
 * `rc`, its message prefixed with the Python call `what`. */
static PyObject* raise_iter_error(RillIterator* self, int rc, const char* what) {
  const rill_error_t* last = rill_iter_error(self->it);
  rill_error_t e = *last;
  rill_error_set(&e, rc, "%s: %s", what, last->message);
  return rillpy_raise(rc, &e);
}

static PyObject* iter_set_epoch(RillIterator* self, PyObject* arg) {
  long long e = PyLong_AsLongLong(arg);
  if (e == -1 && PyErr_Occurred()) return NULL;
  if (enter(self) < 0) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = rill_iter_set_epoch(self->it, (int64_t)e);
  Py_END_ALLOW_THREADS
  self->busy = 0;
  if (rc < 0) {
    char what[48];
    snprintf(what, sizeof what, "set_epoch(%lld)", e);
    return raise_iter_error(self, rc, what);
  }
  Py_RETURN_NONE;
}

static PyObject* iter_seek(RillIterator* self, PyObject* arg) {
  long long row = PyLong_AsLongLong(arg);
  if (row == -1 && PyErr_Occurred()) return NULL;
  if (enter(self) < 0) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = rill_iter_seek(self->it, (int64_t)row);
  Py_END_ALLOW_THREADS
  self->busy = 0;
  if (rc < 0) {
    char what[48];
    snprintf(what, sizeof what, "seek(%lld)", row);
    return raise_iter_error(self, rc, what);
  }
  Py_RETURN_NONE;
}

static PyObject* iter_prefetch(RillIterator* self, PyObject* arg) {
  long n = PyLong_AsLong(arg);
  if (n == -1 && PyErr_Occurred()) return NULL;
  if (n < 0 || n > INT32_MAX) return rillpy_invalid("prefetch(%ld): n must be >= 0", n);
  if (enter(self) < 0) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = rill_iter_prefetch(self->it, (int)n);
  Py_END_ALLOW_THREADS
  self->busy = 0;
  if (rc < 0) {
    char what[48];
    snprintf(what, sizeof what, "prefetch(%ld)", n);
    return raise_iter_error(self, rc, what);
  }
  Py_RETURN_NONE;
}

/* d[k] = v, stealing v (NULL: -1 with its exception). */
static int dict_set(PyObject* d, const char* k, PyObject* v) {
  if (!v) return -1;
  int rc = PyDict_SetItemString(d, k, v);
  Py_DECREF(v);
  return rc;
}

static int dict_set_i64(PyObject* d, const char* k, long long v) { return dict_set(d, k, PyLong_FromLongLong(v)); }

static int dict_set_u64(PyObject* d, const char* k, unsigned long long v) {
  return dict_set(d, k, PyLong_FromUnsignedLongLong(v));
}

static PyObject* iter_stats(RillIterator* self, PyObject* unused) {
  if (!self->it) return rillpy_invalid("the iterator is closed");
  rill_iter_stats_t st;
  rill_iter_stats(self->it, &st);
  PyObject* d = PyDict_New();
  if (!d) return NULL;
  if (dict_set_i64(d, "rows", st.rows) < 0 || dict_set_i64(d, "cells", st.cells) < 0 ||
      dict_set_i64(d, "skipped", st.skipped) < 0 || dict_set_i64(d, "nulled", st.nulled) < 0 ||
      dict_set_i64(d, "errors", st.errors) < 0 || dict_set_i64(d, "wait_ns", st.wait_ns) < 0 ||
      dict_set_i64(d, "compute_ns", st.compute_ns) < 0 || dict_set_i64(d, "stage_calls", st.stage_calls) < 0 ||
      dict_set_i64(d, "allocs", st.allocs) < 0 || dict_set_i64(d, "reuses", st.reuses) < 0) {
    Py_DECREF(d);
    return NULL;
  }
  return d;
}

static PyObject* iter_state_dict(RillIterator* self, PyObject* unused) {
  if (!self->it) return rillpy_invalid("the iterator is closed");
  rill_iter_state_t st;
  int rc = rill_iter_save(self->it, &st);
  if (rc < 0) return raise_iter_error(self, rc, "state_dict");
  PyObject* d = PyDict_New();
  if (!d) return NULL;
  if (dict_set_u64(d, "seed", st.seed) < 0 || dict_set_i64(d, "epoch", st.epoch) < 0 ||
      dict_set_i64(d, "cursor", st.cursor) < 0 || dict_set_u64(d, "fingerprint", st.fingerprint) < 0) {
    Py_DECREF(d);
    return NULL;
  }
  return d;
}

/* An integer item of a state dict. */
static int state_item(PyObject* d, const char* key, int is_unsigned, unsigned long long* u, long long* s) {
  PyObject* v = PyMapping_GetItemString(d, key);
  if (!v) {
    if (PyErr_ExceptionMatches(PyExc_KeyError) || PyErr_ExceptionMatches(PyExc_TypeError)) {
      PyErr_Clear();
      rillpy_invalid("load_state_dict: the state has no '%s' (expected the keys seed, epoch, cursor, "
                     "fingerprint from state_dict())", key);
    }
    return -1;
  }
  if (is_unsigned)
    *u = PyLong_AsUnsignedLongLong(v);
  else
    *s = PyLong_AsLongLong(v);
  Py_DECREF(v);
  return PyErr_Occurred() ? -1 : 0;
}

static PyObject* iter_load_state_dict(RillIterator* self, PyObject* d) {
  rill_iter_state_t st;
  unsigned long long seed, fp;
  long long epoch, cursor;
  if (state_item(d, "seed", 1, &seed, NULL) < 0 || state_item(d, "epoch", 0, NULL, &epoch) < 0 ||
      state_item(d, "cursor", 0, NULL, &cursor) < 0 || state_item(d, "fingerprint", 1, &fp, NULL) < 0)
    return NULL;
  st.seed = seed;
  st.epoch = epoch;
  st.cursor = cursor;
  st.fingerprint = fp;
  if (enter(self) < 0) return NULL;
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = rill_iter_restore(self->it, &st);
  Py_END_ALLOW_THREADS
  self->busy = 0;
  if (rc < 0) return raise_iter_error(self, rc, "load_state_dict");
  Py_RETURN_NONE;
}

static PyObject* iter_close(RillIterator* self, PyObject* unused) {
  if (self->busy) return rillpy_invalid("the iterator is in use by another thread");
  close_it(self);
  Py_RETURN_NONE;
}

static PyObject* iter_enter(RillIterator* self, PyObject* unused) {
  if (!self->it) return rillpy_invalid("the iterator is closed");
  return Py_NewRef((PyObject*)self);
}

static PyObject* iter_exit(RillIterator* self, PyObject* args) {
  if (!self->busy) close_it(self);
  Py_RETURN_FALSE;
}

static PyObject* iter_repr(RillIterator* self) {
  if (!self->it)
    return PyUnicode_FromFormat("rill.Iterator(closed, %lld rows)", (long long)rill_df_rows(self->df->df));
  return PyUnicode_FromFormat("rill.Iterator(%lld rows, epoch %lld)", (long long)rill_df_rows(self->df->df),
                              (long long)rill_iter_epoch(self->it));
}

static PyMethodDef iter_methods[] = {
    {"set_epoch", (PyCFunction)iter_set_epoch, METH_O,
     "set_epoch(epoch: int) -> None\n\nStarts epoch `epoch` (a new shuffle permutation) from its first row."},
    {"seek", (PyCFunction)iter_seek, METH_O,
     "seek(row: int) -> None\n\nContinues from `row` (0..len) of the current epoch; drops prefetched rows."},
    {"prefetch", (PyCFunction)iter_prefetch, METH_O,
     "prefetch(n: int) -> None\n\nStarts computing rows ahead now (prefetch is automatic; this is optional)."},
    {"stats", (PyCFunction)iter_stats, METH_NOARGS,
     "stats() -> dict\n\nCounters: rows, cells, skipped, nulled, errors, wait_ns, compute_ns, stage_calls, "
     "allocs, reuses."},
    {"state_dict", (PyCFunction)iter_state_dict, METH_NOARGS,
     "state_dict() -> dict\n\nThe position {'seed', 'epoch', 'cursor', 'fingerprint'}: load_state_dict on an "
     "iterator of the same pipeline reproduces the following rows."},
    {"load_state_dict", (PyCFunction)iter_load_state_dict, METH_O,
     "load_state_dict(state: Mapping) -> None\n\nRestores a position from state_dict(); InvalidArgumentError "
     "for a state of another pipeline."},
    {"close", (PyCFunction)iter_close, METH_NOARGS,
     "close() -> None\n\nStops the workers and frees the iterator; later calls raise InvalidArgumentError."},
    {"__enter__", (PyCFunction)iter_enter, METH_NOARGS, "__enter__() -> Iterator\n\nThe iterator itself."},
    {"__exit__", (PyCFunction)iter_exit, METH_VARARGS, "__exit__(*exc_info) -> bool\n\nCloses the iterator."},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef iter_getset[] = {
    {"epoch", (getter)iter_epoch, NULL, "The current epoch (int).", NULL},
    {"columns", (getter)iter_columns, NULL, "Names of the columns each row holds (list[str]).", NULL},
    {"dataframe", (getter)iter_dataframe, NULL, "The iterated DataFrame.", NULL},
    {"closed", (getter)iter_closed, NULL, "True once close() was called.", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PySequenceMethods iter_as_sequence = {.sq_length = (lenfunc)iter_len};

PyTypeObject RillIterator_Type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "rill.Iterator",
    .tp_basicsize = sizeof(RillIterator),
    .tp_dealloc = (destructor)iter_dealloc,
    .tp_repr = (reprfunc)iter_repr,
    .tp_as_sequence = &iter_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "An iterator over a DataFrame's rows (rill_iter_t), computing rows ahead on worker threads.\n\n"
              "Yields rill.Row objects (batches for a batched dataframe). Not thread-safe: one iterator per "
              "consumer thread. Also a context manager that closes it.",
    .tp_weaklistoffset = offsetof(RillIterator, weakrefs),
    .tp_iter = iter_self,
    .tp_iternext = (iternextfunc)iter_next,
    .tp_methods = iter_methods,
    .tp_getset = iter_getset,
    .tp_new = iter_tp_new,
};

int rillpy_init_iter(PyObject* m) {
  if (PyType_Ready(&RillIterator_Type) < 0) return -1;
  return PyModule_AddObjectRef(m, "Iterator", (PyObject*)&RillIterator_Type);
}
