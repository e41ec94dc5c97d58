/* rill.Row (also rill.Batch): one row handed out by an iterator (a rill_row_t), as a read-only
 * mapping from column name to rill.Array. It holds a reference on every array and on the
 * dataframe, so it stays valid after the iterator moves on. */
#include "rillpy.h"

#include <string.h>

#define SELF ((RillRow*)self)

PyObject* rillpy_row_names(const rill_df_t* df, const int* columns, int n) {
  PyObject* list = rillpy_column_list(df, columns, n, 0);
  PyObject* names = list ? PyList_AsTuple(list) : NULL;
  Py_XDECREF(list);
  return names;
}

PyObject* rillpy_row_new(RillDataFrame* df, const rill_row_t* row, const int* columns, PyObject* names) {
  int n = row->ncolumns;
  if (PyTuple_GET_SIZE(names) != n) return rillpy_invalid("a row of %d columns for %zd names", n, PyTuple_GET_SIZE(names));
  RillRow* self = PyObject_New(RillRow, &RillRow_Type);
  if (self == NULL) return NULL;
  self->df = (RillDataFrame*)Py_NewRef((PyObject*)df);
  self->index = row->index;
  self->ncolumns = 0;
  /* one block: the arrays, then the columns */
  self->arrays = PyMem_Malloc((sizeof(*self->arrays) + sizeof(int)) * (size_t)(n > 0 ? n : 1));
  self->names = Py_NewRef(names);
  if (self->arrays == NULL) {
    Py_DECREF(self);
    return PyErr_NoMemory();
  }
  self->columns = (int*)(self->arrays + n);
  for (int i = 0; i < n; i++) {
    self->columns[i] = columns ? columns[i] : i;
    self->arrays[i] = rill_array_retain(rill_row_get(row, i));
    self->ncolumns = i + 1;
  }
  return (PyObject*)self;
}

static void row_dealloc(PyObject* self) {
  for (int i = 0; SELF->arrays != NULL && i < SELF->ncolumns; i++) rillpy_array_release(SELF->arrays[i]);
  PyMem_Free(SELF->arrays);
  Py_XDECREF(SELF->names);
  Py_XDECREF((PyObject*)SELF->df);
  PyObject_Free(self);
}

/* The position of a column given by name or index, or -1 with an exception raised (`raise_`)
 * or not. */
static int row_position(PyObject* self, PyObject* key, int raise_) {
  if (PyUnicode_Check(key)) return (int)rillpy_find_name(SELF->names, key, raise_);
  if (PyLong_Check(key) && !PyBool_Check(key)) {
    Py_ssize_t i = PyLong_AsSsize_t(key);
    if (i == -1 && PyErr_Occurred()) {
      if (!raise_) PyErr_Clear();
      return -1;
    }
    if (i < 0) i += SELF->ncolumns;
    if (i >= 0 && i < SELF->ncolumns) return (int)i;
    if (raise_)
      rillpy_invalid("column index %R out of range: the row has %d columns", key, SELF->ncolumns);
    return -1;
  }
  if (raise_)
    rillpy_invalid("a column is given by its name (str) or index (int), not %s",
                   Py_TYPE(key)->tp_name);
  return -1;
}

static PyObject* row_array(PyObject* self, int i) {
  return rillpy_array_new(SELF->arrays[i], PyTuple_GET_ITEM(SELF->names, i));
}

static PyObject* row_subscript(PyObject* self, PyObject* key) {
  int i = row_position(self, key, 1);
  return i < 0 ? NULL : row_array(self, i);
}

static Py_ssize_t row_len(PyObject* self) {
  return SELF->ncolumns > 0 ? (Py_ssize_t)SELF->arrays[0]->length : 0;
}

static int row_contains(PyObject* self, PyObject* key) {
  if (!PyUnicode_Check(key)) return 0;
  int i = row_position(self, key, 0);
  if (i < 0 && PyErr_Occurred()) return -1;
  return i >= 0;
}

static PyObject* row_iter(PyObject* self) { return PyObject_GetIter(SELF->names); }

static PyObject* row_repr(PyObject* self) {
  return PyUnicode_FromFormat("rill.Row(index=%lld, len=%zd, columns=%R)",
                              (long long)SELF->index, row_len(self), SELF->names);
}

/* ---------------------------------------------------------------- methods */

static PyObject* row_values(PyObject* self, PyObject* unused) {
  PyObject* list = PyList_New(SELF->ncolumns);
  for (int i = 0; list != NULL && i < SELF->ncolumns; i++) {
    PyObject* a = row_array(self, i);
    if (a == NULL) {
      Py_CLEAR(list);
      break;
    }
    PyList_SET_ITEM(list, i, a);
  }
  return list;
}

static PyObject* row_keys(PyObject* self, PyObject* unused) { return PySequence_List(SELF->names); }

static PyObject* row_items(PyObject* self, PyObject* unused) {
  PyObject* list = PyList_New(SELF->ncolumns);
  for (int i = 0; list != NULL && i < SELF->ncolumns; i++) {
    PyObject* a = row_array(self, i);
    PyObject* pair = a ? PyTuple_Pack(2, PyTuple_GET_ITEM(SELF->names, i), a) : NULL;
    Py_XDECREF(a);
    if (pair == NULL) {
      Py_CLEAR(list);
      break;
    }
    PyList_SET_ITEM(list, i, pair);
  }
  return list;
}

static PyObject* row_to_dict(PyObject* self, PyObject* unused) {
  PyObject* d = PyDict_New();
  for (int i = 0; d != NULL && i < SELF->ncolumns; i++) {
    PyObject* a = row_array(self, i);
    if (a == NULL || PyDict_SetItem(d, PyTuple_GET_ITEM(SELF->names, i), a) < 0) Py_CLEAR(d);
    Py_XDECREF(a);
  }
  return d;
}

static PyObject* row_get(PyObject* self, PyObject* args) {
  PyObject* key;
  PyObject* dflt = Py_None;
  if (!PyArg_ParseTuple(args, "O|O:get", &key, &dflt)) return NULL;
  int i = row_position(self, key, 0);
  if (i < 0) {
    if (PyErr_Occurred()) return NULL;
    return Py_NewRef(dflt);
  }
  return row_array(self, i);
}

static int export_row(const void* self, struct ArrowSchema* s, void* arr, rill_error_t* err) {
  const RillRow* r = self;
  rill_row_t row = {r->index, r->ncolumns, r->arrays};
  return rill_row_export_arrow(&row, r->df->df, r->columns, s, arr, err);
}

static PyObject* row_arrow_c_array(PyObject* self, PyObject* args, PyObject* kwargs) {
  static char* kwlist[] = {"requested_schema", NULL};
  PyObject* requested = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:__arrow_c_array__", kwlist, &requested))
    return NULL;
  return rillpy_arrow_c_array(export_row, self, 0);
}

static PyObject* row_arrow_c_schema(PyObject* self, PyObject* unused) {
  return rillpy_arrow_c_schema(export_row, self);
}

static PyObject* row_dataframe(PyObject* self, PyObject* args, PyObject* kwargs) {
  static char* kwlist[] = {"nan_as_null", "allow_copy", NULL};
  int nan_as_null = 0, allow_copy = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|pp:__dataframe__", kwlist, &nan_as_null,
                                   &allow_copy))
    return NULL;
  PyObject* chunks = PyList_New(1);
  if (chunks == NULL) return NULL;
  PyList_SET_ITEM(chunks, 0, Py_NewRef(self));
  PyObject* frame = rillpy_interchange_frame(SELF->names, chunks, allow_copy);
  Py_DECREF(chunks);
  return frame;
}

static PyObject* get_index(PyObject* self, void* c) { return PyLong_FromLongLong(SELF->index); }
static PyObject* get_num_columns(PyObject* self, void* c) { return PyLong_FromLong(SELF->ncolumns); }
static PyObject* get_columns(PyObject* self, void* c) { return PySequence_List(SELF->names); }
static PyObject* get_arrays(PyObject* self, void* c) { return row_values(self, NULL); }

static PyMethodDef row_methods[] = {
  {"keys", row_keys, METH_NOARGS, "keys() -> list[str]\n\nThe column names, in order."},
  {"values", row_values, METH_NOARGS, "values() -> list[Array]\n\nThe arrays, in column order."},
  {"items", row_items, METH_NOARGS, "items() -> list[(str, Array)]\n\n(name, array) pairs."},
  {"get", row_get, METH_VARARGS,
   "get(column, default=None) -> Array\n\nThe array of a column (name or index), or default."},
  {"to_dict", row_to_dict, METH_NOARGS, "to_dict() -> dict[str, Array]\n\nA dict of the arrays."},
  {"__arrow_c_array__", (PyCFunction)(void (*)(void))row_arrow_c_array,
   METH_VARARGS | METH_KEYWORDS,
   "__arrow_c_array__(requested_schema=None) -> (schema capsule, array capsule)\n\nThe row as "
   "one Arrow record batch (a struct array of its columns; zero-copy where the layout "
   "allows). requested_schema is ignored."},
  {"__arrow_c_schema__", row_arrow_c_schema, METH_NOARGS,
   "__arrow_c_schema__() -> schema capsule\n\nThe Arrow schema of the row (a struct)."},
  {"__dataframe__", (PyCFunction)(void (*)(void))row_dataframe, METH_VARARGS | METH_KEYWORDS,
   "__dataframe__(nan_as_null=False, allow_copy=True)\n\nThe dataframe interchange protocol "
   "object of the row (one chunk; zero-copy)."},
  {NULL, NULL, 0, NULL},
};

static PyGetSetDef row_getset[] = {
  {"index", get_index, NULL, "The row of the iterated dataframe (the batch number when batched).",
   NULL},
  {"num_columns", get_num_columns, NULL, "The number of columns.", NULL},
  {"columns", get_columns, NULL, "The column names.", NULL},
  {"arrays", get_arrays, NULL, "The arrays, in column order.", NULL},
  {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods row_as_sequence = {
  .sq_contains = row_contains,
};

static PyMappingMethods row_as_mapping = {
  .mp_length = row_len,
  .mp_subscript = row_subscript,
};

PyTypeObject RillRow_Type = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "rill.Row",
  .tp_basicsize = sizeof(RillRow),
  .tp_dealloc = row_dealloc,
  .tp_repr = row_repr,
  .tp_as_sequence = &row_as_sequence,
  .tp_as_mapping = &row_as_mapping,
  .tp_iter = row_iter,
  .tp_flags = Py_TPFLAGS_DEFAULT,
  .tp_doc = "Row (alias Batch): one row from an iterator, a read-only mapping from column name "
            "to Array.\n\nrow[name] or row[i] is an Array; iterating yields the column names; "
            "len(row) is the number of cells (rows in a batch, 1 otherwise). The row keeps its "
            "arrays alive after the iterator moves on. Exports: __arrow_c_array__ (a record "
            "batch), __dataframe__.",
  .tp_methods = row_methods,
  .tp_getset = row_getset,
};

int rillpy_init_row(PyObject* m) {
  if (PyType_Ready(&RillRow_Type) < 0) return -1;
  if (PyModule_AddObjectRef(m, "Row", (PyObject*)&RillRow_Type) < 0) return -1;
  if (PyModule_AddObjectRef(m, "Batch", (PyObject*)&RillRow_Type) < 0) return -1;
  /* Registered as a collections.abc.Mapping (it implements the protocol natively). */
  PyObject* abc = PyImport_ImportModule("collections.abc");
  if (abc == NULL) return -1;
  PyObject* mapping = PyObject_GetAttrString(abc, "Mapping");
  Py_DECREF(abc);
  if (mapping == NULL) return -1;
  PyObject* r = PyObject_CallMethod(mapping, "register", "O", (PyObject*)&RillRow_Type);
  Py_DECREF(mapping);
  if (r == NULL) return -1;
  Py_DECREF(r);
  return 0;
}
