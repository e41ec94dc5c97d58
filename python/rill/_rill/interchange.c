/* The Python dataframe interchange protocol (__dataframe__) over rill arrays: a frame of
 * chunks (each chunk one rill.Array per column), its Columns and their Buffers, described by
 * rill_array_interchange. Nothing is copied; every object holds the rill.Array objects it
 * exposes, so the buffers stay valid as long as any of them is referenced. */
#include "rillpy.h"

#include <string.h>

typedef struct Frame {
  PyObject_HEAD
  PyObject* names;    /* tuple of str */
  PyObject* chunks;   /* tuple of tuples of rill.Array (one per column) */
  int allow_copy;
} Frame;

typedef struct Column {
  PyObject_HEAD
  PyObject* name;     /* str or None */
  PyObject* chunks;   /* tuple of rill.Array */
  int allow_copy;
} Column;

typedef struct Buffer {
  PyObject_HEAD
  PyObject* owner;    /* the rill.Array whose memory this is */
  const void* ptr;
  int64_t bufsize;
  rill_device_t device;
} Buffer;

static PyTypeObject Frame_Type;
static PyTypeObject Column_Type;
static PyTypeObject Buffer_Type;

/* The protocol's enums (IntEnum subclasses, equal to their int codes). */
static PyObject* DtypeKind;
static PyObject* ColumnNullType;
static PyObject* DlpackDeviceType;

static PyObject* enum_value(PyObject* cls, long v) {
  PyObject* i = PyLong_FromLong(v);
  if (i == NULL) return NULL;
  PyObject* out = PyObject_CallOneArg(cls, i);
  Py_DECREF(i);
  return out;
}

#define ARR(o) (((RillArray*)(o))->a)

/* ---------------------------------------------------------------- helpers */

/* The interchange view of an array; ENOTSUP raises NotSupportedError naming the column. */
static int column_view(PyObject* array, PyObject* name, rill_interchange_column_t* v) {
  const rill_array_t* a = ARR(array);
  int rc = rill_array_interchange(a, v);
  if (rc == RILL_OK) return 0;
  rill_error_t err;
  rill_error_clear(&err);
  err.code = rc;
  char type[128];
  rill_type_format(&a->type, type, sizeof type);
  const char* n = (name && PyUnicode_Check(name)) ? PyUnicode_AsUTF8(name) : NULL;
  if (n == NULL) PyErr_Clear();
  if (rc == RILL_ENOTSUP)
    snprintf(err.message, sizeof err.message,
             "column '%s': %s cells have no form in the dataframe interchange protocol; "
             "export them through Arrow (__arrow_c_array__) or DLPack", n ? n : "", type);
  else
    snprintf(err.message, sizeof err.message, "column '%s': %s", n ? n : "", rill_strerror(rc));
  rillpy_raise_column(rc, &err, n);
  return -1;
}

static int64_t chunk_length(PyObject* chunk) {
  return PyTuple_GET_SIZE(chunk) > 0 ? ARR(PyTuple_GET_ITEM(chunk, 0))->length : 0;
}

/* Pieces of `chunk` (tuple of arrays) split into k consecutive zero-copy slices, appended to
 * `out`. */
static int split_chunk(PyObject* chunk, PyObject* names, Py_ssize_t k, PyObject* out) {
  int64_t len = chunk_length(chunk);
  int64_t step = k > 0 ? (len + k - 1) / k : len;
  Py_ssize_t ncol = PyTuple_GET_SIZE(chunk);
  for (Py_ssize_t p = 0; p < k; p++) {
    int64_t start = step * p;
    if (start > len) start = len;
    int64_t n = len - start < step ? len - start : step;
    PyObject* piece = PyTuple_New(ncol);
    if (piece == NULL) return -1;
    for (Py_ssize_t c = 0; c < ncol; c++) {
      PyObject* src = PyTuple_GET_ITEM(chunk, c);
      PyObject* name = names ? PyTuple_GET_ITEM(names, c) : ((RillArray*)src)->name;
      PyObject* arr = rillpy_array_slice(ARR(src), start, n, name);
      if (arr == NULL) {
        Py_DECREF(piece);
        return -1;
      }
      PyTuple_SET_ITEM(piece, c, arr);
    }
    int rc = PyList_Append(out, piece);
    Py_DECREF(piece);
    if (rc < 0) return -1;
  }
  return 0;
}

/* n_chunks argument: None -> 1 piece per chunk; else a multiple of `have`. */
static Py_ssize_t pieces_per_chunk(PyObject* n_chunks, Py_ssize_t have) {
  if (n_chunks == Py_None) return 1;
  Py_ssize_t n = PyNumber_AsSsize_t(n_chunks, PyExc_OverflowError);
  if (n == -1 && PyErr_Occurred()) return -1;
  if (have == 0 || n < 1 || n % have != 0) {
    PyErr_Format(PyExc_ValueError, "n_chunks must be a positive multiple of num_chunks() (%zd), "
                 "not %zd", have, n);
    return -1;
  }
  return n / have;
}

/* ---------------------------------------------------------------- Buffer */

static PyObject* buffer_new(PyObject* owner, const rill_interchange_buffer_t* b) {
  Buffer* self = PyObject_New(Buffer, &Buffer_Type);
  if (self == NULL) return NULL;
  self->owner = Py_NewRef(owner);
  self->ptr = b->ptr;
  self->bufsize = b->bufsize;
  self->device = b->device;
  self->device.type = (rill_device_type_t)rillpy_device_type(b->device);
  return (PyObject*)self;
}

static void buffer_dealloc(PyObject* self) {
  Py_XDECREF(((Buffer*)self)->owner);
  PyObject_Free(self);
}

static PyObject* buffer_bufsize(PyObject* self, void* c) {
  return PyLong_FromLongLong(((Buffer*)self)->bufsize);
}

static PyObject* buffer_ptr(PyObject* self, void* c) {
  return PyLong_FromVoidPtr((void*)((Buffer*)self)->ptr);
}

static PyObject* buffer_dlpack(PyObject* self, PyObject* args, PyObject* kwargs) {
  PyErr_SetString(PyExc_NotImplementedError,
                  "rill interchange buffers have no DLPack export; use Array.__dlpack__");
  return NULL;
}

static PyObject* buffer_dlpack_device(PyObject* self, PyObject* unused) {
  Buffer* b = (Buffer*)self;
  PyObject* type = enum_value(DlpackDeviceType, b->device.type);
  if (type == NULL) return NULL;
  return Py_BuildValue("(Ni)", type, b->device.id);
}

static PyObject* buffer_repr(PyObject* self) {
  Buffer* b = (Buffer*)self;
  return PyUnicode_FromFormat("rill.interchange.Buffer(bufsize=%lld, ptr=%p, device=(%d, %d))",
                              (long long)b->bufsize, b->ptr, (int)b->device.type, b->device.id);
}

/* Buffers are immutable views: a copy is the buffer itself (consumers deep-copy containers
 * that hold them). */
static PyObject* buffer_copy(PyObject* self, PyObject* unused) { return Py_NewRef(self); }

static PyMethodDef buffer_methods[] = {
  {"__copy__", buffer_copy, METH_NOARGS, "__copy__() -> Buffer\n\nThe buffer itself (immutable)."},
  {"__deepcopy__", buffer_copy, METH_O,
   "__deepcopy__(memo) -> Buffer\n\nThe buffer itself: the memory is shared, never copied."},
  {"__dlpack__", (PyCFunction)(void (*)(void))buffer_dlpack, METH_VARARGS | METH_KEYWORDS,
   "__dlpack__() -> capsule\n\nNot implemented (NotImplementedError): export the Array "
   "itself."},
  {"__dlpack_device__", buffer_dlpack_device, METH_NOARGS,
   "__dlpack_device__() -> (DlpackDeviceType, device_id)\n\nWhere the buffer lives."},
  {NULL, NULL, 0, NULL},
};

static PyGetSetDef buffer_getset[] = {
  {"bufsize", buffer_bufsize, NULL, "Size of the buffer in bytes.", NULL},
  {"ptr", buffer_ptr, NULL, "Address of the buffer's first byte (int).", NULL},
  {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject Buffer_Type = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "rill.interchange.Buffer",
  .tp_basicsize = sizeof(Buffer),
  .tp_dealloc = buffer_dealloc,
  .tp_repr = buffer_repr,
  .tp_flags = Py_TPFLAGS_DEFAULT,
  .tp_doc = "A contiguous block of memory of a rill array (dataframe interchange protocol "
            "Buffer); keeps the array alive.",
  .tp_methods = buffer_methods,
  .tp_getset = buffer_getset,
};

/* ---------------------------------------------------------------- Column */

/* A Column over `chunks` (tuple of rill.Array, steals the reference); checks every chunk. */
static PyObject* column_new(PyObject* name, PyObject* chunks, int allow_copy) {
  if (chunks == NULL) return NULL;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(chunks); i++) {
    rill_interchange_column_t v;
    if (column_view(PyTuple_GET_ITEM(chunks, i), name, &v) < 0) {
      Py_DECREF(chunks);
      return NULL;
    }
  }
  Column* self = PyObject_New(Column, &Column_Type);
  if (self == NULL) {
    Py_DECREF(chunks);
    return NULL;
  }
  self->name = Py_NewRef(name ? name : Py_None);
  self->chunks = chunks;
  self->allow_copy = allow_copy;
  return (PyObject*)self;
}

PyObject* rillpy_interchange_column(RillArray* a, int allow_copy) {
  return column_new(a->name, PyTuple_Pack(1, (PyObject*)a), allow_copy);
}

#define COL ((Column*)self)

static void column_dealloc(PyObject* self) {
  Py_XDECREF(COL->name);
  Py_XDECREF(COL->chunks);
  PyObject_Free(self);
}

/* The view of the first chunk (the dtype is the same in every chunk). */
static int first_view(PyObject* self, rill_interchange_column_t* v) {
  if (PyTuple_GET_SIZE(COL->chunks) == 0) {
    rillpy_invalid("the column has no chunks");
    return -1;
  }
  return column_view(PyTuple_GET_ITEM(COL->chunks, 0), COL->name, v);
}

static PyObject* dtype_tuple(const rill_interchange_dtype_t* d) {
  PyObject* kind = enum_value(DtypeKind, d->kind);
  if (kind == NULL) return NULL;
  return Py_BuildValue("(NisC)", kind, d->bit_width, d->format ? d->format : "",
                       (int)d->endianness);
}

static PyObject* column_size(PyObject* self, PyObject* unused) {
  int64_t n = 0;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(COL->chunks); i++)
    n += ARR(PyTuple_GET_ITEM(COL->chunks, i))->length;
  return PyLong_FromLongLong(n);
}

static PyObject* column_offset(PyObject* self, void* c) { return PyLong_FromLong(0); }

static PyObject* column_dtype(PyObject* self, void* c) {
  rill_interchange_column_t v;
  if (first_view(self, &v) < 0) return NULL;
  return dtype_tuple(&v.dtype);
}

static PyObject* column_describe_categorical(PyObject* self, void* c) {
  PyErr_SetString(PyExc_TypeError,
                  "describe_categorical only works on a column with categorical dtype");
  return NULL;
}

static PyObject* column_describe_null(PyObject* self, void* c) {
  int masked = 0;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(COL->chunks); i++) {
    rill_interchange_column_t v;
    if (column_view(PyTuple_GET_ITEM(COL->chunks, i), COL->name, &v) < 0) return NULL;
    masked |= v.null_kind == RILL_NULL_USE_BITMASK;
  }
  PyObject* kind = enum_value(ColumnNullType, masked ? RILL_NULL_USE_BITMASK
                                                     : RILL_NULL_NON_NULLABLE);
  if (kind == NULL) return NULL;
  return masked ? Py_BuildValue("(Ni)", kind, 0) : Py_BuildValue("(NO)", kind, Py_None);
}

static PyObject* column_null_count(PyObject* self, void* c) {
  int64_t n = 0;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(COL->chunks); i++)
    n += ARR(PyTuple_GET_ITEM(COL->chunks, i))->null_count;
  return PyLong_FromLongLong(n);
}

static PyObject* empty_metadata(PyObject* self, void* c) { return PyDict_New(); }

static PyObject* column_num_chunks(PyObject* self, PyObject* unused) {
  return PyLong_FromSsize_t(PyTuple_GET_SIZE(COL->chunks));
}

static PyObject* column_get_chunks(PyObject* self, PyObject* args, PyObject* kwargs) {
  static char* kwlist[] = {"n_chunks", NULL};
  PyObject* n_chunks = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:get_chunks", kwlist, &n_chunks)) return NULL;
  Py_ssize_t have = PyTuple_GET_SIZE(COL->chunks);
  Py_ssize_t k = pieces_per_chunk(n_chunks, have);
  if (k < 0) return NULL;
  PyObject* pieces = PyList_New(0);
  if (pieces == NULL) return NULL;
  for (Py_ssize_t i = 0; i < have; i++) {
    PyObject* one = PyTuple_Pack(1, PyTuple_GET_ITEM(COL->chunks, i));
    int rc = one ? (k == 1 ? PyList_Append(pieces, one) : split_chunk(one, NULL, k, pieces)) : -1;
    Py_XDECREF(one);
    if (rc < 0) {
      Py_DECREF(pieces);
      return NULL;
    }
  }
  Py_ssize_t n = PyList_GET_SIZE(pieces);
  PyObject* out = PyList_New(n);
  for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
    PyObject* col = column_new(COL->name, Py_NewRef(PyList_GET_ITEM(pieces, i)), COL->allow_copy);
    if (col == NULL) {
      Py_CLEAR(out);
      break;
    }
    PyList_SET_ITEM(out, i, col);
  }
  Py_DECREF(pieces);
  return out;
}

static PyObject* buffer_pair(PyObject* owner, const rill_interchange_buffer_t* b) {
  if (b->ptr == NULL && b->bufsize == 0 && b->dtype.format == NULL) Py_RETURN_NONE;
  PyObject* buf = buffer_new(owner, b);
  if (buf == NULL) return NULL;
  PyObject* dt = dtype_tuple(&b->dtype);
  if (dt == NULL) {
    Py_DECREF(buf);
    return NULL;
  }
  return Py_BuildValue("(NN)", buf, dt);
}

static PyObject* column_get_buffers(PyObject* self, PyObject* unused) {
  Py_ssize_t have = PyTuple_GET_SIZE(COL->chunks);
  if (have != 1) {
    rill_error_t err;
    rill_error_clear(&err);
    snprintf(err.message, sizeof err.message,
             "get_buffers: the column has %zd chunks and rill does not concatenate them; "
             "take the buffers of each chunk (get_chunks())", have);
    return rillpy_raise(RILL_ENOTSUP, &err);
  }
  PyObject* owner = PyTuple_GET_ITEM(COL->chunks, 0);
  rill_interchange_column_t v;
  if (column_view(owner, COL->name, &v) < 0) return NULL;
  PyObject* data = buffer_pair(owner, &v.data);
  PyObject* validity = v.null_kind == RILL_NULL_USE_BITMASK ? buffer_pair(owner, &v.validity)
                                                            : Py_NewRef(Py_None);
  PyObject* offsets = v.offsets.dtype.format != NULL ? buffer_pair(owner, &v.offsets)
                                                     : Py_NewRef(Py_None);
  if (data == NULL || validity == NULL || offsets == NULL) {
    Py_XDECREF(data);
    Py_XDECREF(validity);
    Py_XDECREF(offsets);
    return NULL;
  }
  return Py_BuildValue("{sNsNsN}", "data", data, "validity", validity, "offsets", offsets);
}

static PyObject* column_repr(PyObject* self) {
  return PyUnicode_FromFormat("rill.interchange.Column(name=%R, chunks=%zd)", COL->name,
                              PyTuple_GET_SIZE(COL->chunks));
}

static PyMethodDef column_methods[] = {
  {"size", column_size, METH_NOARGS, "size() -> int\n\nThe number of cells (all chunks)."},
  {"num_chunks", column_num_chunks, METH_NOARGS, "num_chunks() -> int\n\nThe number of chunks."},
  {"get_chunks", (PyCFunction)(void (*)(void))column_get_chunks, METH_VARARGS | METH_KEYWORDS,
   "get_chunks(n_chunks=None) -> list[Column]\n\nOne single-chunk Column per chunk; n_chunks "
   "(a multiple of num_chunks()) splits each chunk further (zero-copy slices)."},
  {"get_buffers", column_get_buffers, METH_NOARGS,
   "get_buffers() -> dict\n\n{\"data\": (Buffer, dtype), \"validity\": (Buffer, dtype) or None, "
   "\"offsets\": (Buffer, dtype) or None} of a single-chunk column (NotSupportedError for "
   "several chunks: take each chunk's)."},
  {NULL, NULL, 0, NULL},
};

static PyGetSetDef column_getset[] = {
  {"offset", column_offset, NULL, "The offset of the first cell in the buffers (always 0).", NULL},
  {"dtype", column_dtype, NULL, "(DtypeKind, bit width, Arrow format string, endianness).", NULL},
  {"describe_categorical", column_describe_categorical, NULL,
   "TypeError: rill has no categorical columns.", NULL},
  {"describe_null", column_describe_null, NULL,
   "(ColumnNullType, value): a bit mask where 0 means null, or non-nullable (value None).",
   NULL},
  {"null_count", column_null_count, NULL, "The number of null cells.", NULL},
  {"metadata", empty_metadata, NULL, "Column metadata (an empty dict).", NULL},
  {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject Column_Type = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "rill.interchange.Column",
  .tp_basicsize = sizeof(Column),
  .tp_dealloc = column_dealloc,
  .tp_repr = column_repr,
  .tp_flags = Py_TPFLAGS_DEFAULT,
  .tp_doc = "A column of the dataframe interchange protocol over rill arrays (one per chunk).",
  .tp_methods = column_methods,
  .tp_getset = column_getset,
};

/* ---------------------------------------------------------------- Frame */

#define FRAME ((Frame*)self)

/* A frame over `names` (tuple, borrowed) and `chunks` (tuple of tuples, stolen). */
static PyObject* frame_new(PyObject* names, PyObject* chunks, int allow_copy) {
  if (chunks == NULL) return NULL;
  Frame* self = PyObject_New(Frame, &Frame_Type);
  if (self == NULL) {
    Py_DECREF(chunks);
    return NULL;
  }
  self->names = Py_NewRef(names);
  self->chunks = chunks;
  self->allow_copy = allow_copy;
  return (PyObject*)self;
}

/* One chunk (tuple of rill.Array named after `names`) from a rill.Row or a sequence of
 * rill.Array. */
static PyObject* chunk_from(PyObject* o, PyObject* names) {
  Py_ssize_t ncol = PyTuple_GET_SIZE(names);
  PyObject* chunk = PyTuple_New(ncol);
  if (chunk == NULL) return NULL;
  if (PyObject_TypeCheck(o, &RillRow_Type)) {
    RillRow* row = (RillRow*)o;
    if (row->ncolumns != ncol) goto bad;
    for (Py_ssize_t c = 0; c < ncol; c++) {
      PyObject* a = rillpy_array_new(row->arrays[c], PyTuple_GET_ITEM(names, c));
      if (a == NULL) goto fail;
      PyTuple_SET_ITEM(chunk, c, a);
    }
    return chunk;
  }
  PyObject* seq = PySequence_Fast(o, "a chunk is a rill.Row or a sequence of rill.Array");
  if (seq == NULL) goto fail;
  if (PySequence_Fast_GET_SIZE(seq) != ncol) {
    Py_DECREF(seq);
    goto bad;
  }
  for (Py_ssize_t c = 0; c < ncol; c++) {
    PyObject* item = PySequence_Fast_GET_ITEM(seq, c);
    if (!PyObject_TypeCheck(item, &RillArray_Type)) {
      Py_DECREF(seq);
      rillpy_invalid("a chunk holds rill.Array objects, not %s", Py_TYPE(item)->tp_name);
      goto fail;
    }
    PyObject* a = rillpy_array_new(ARR(item), PyTuple_GET_ITEM(names, c));
    if (a == NULL) {
      Py_DECREF(seq);
      goto fail;
    }
    PyTuple_SET_ITEM(chunk, c, a);
  }
  Py_DECREF(seq);
  return chunk;
bad:
  rillpy_invalid("every chunk has one array per column (%zd)", ncol);
fail:
  Py_DECREF(chunk);
  return NULL;
}

PyObject* rillpy_interchange_frame(PyObject* names, PyObject* chunks, int allow_copy) {
  PyObject* tnames = PySequence_Tuple(names);
  if (tnames == NULL) return NULL;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tnames); i++) {
    if (!PyUnicode_Check(PyTuple_GET_ITEM(tnames, i))) {
      Py_DECREF(tnames);
      return rillpy_invalid("column names are str");
    }
  }
  PyObject* seq = PySequence_Fast(chunks, "chunks must be a sequence");
  if (seq == NULL) {
    Py_DECREF(tnames);
    return NULL;
  }
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject* tchunks = PyTuple_New(n);
  for (Py_ssize_t i = 0; tchunks != NULL && i < n; i++) {
    PyObject* chunk = chunk_from(PySequence_Fast_GET_ITEM(seq, i), tnames);
    if (chunk == NULL) {
      Py_CLEAR(tchunks);
      break;
    }
    PyTuple_SET_ITEM(tchunks, i, chunk);
  }
  Py_DECREF(seq);
  PyObject* frame = tchunks ? frame_new(tnames, tchunks, allow_copy) : NULL;
  Py_DECREF(tnames);
  return frame;
}

static void frame_dealloc(PyObject* self) {
  Py_XDECREF(FRAME->names);
  Py_XDECREF(FRAME->chunks);
  PyObject_Free(self);
}

static PyObject* frame_dataframe(PyObject* self, PyObject* args, PyObject* kwargs) {
  static char* kwlist[] = {"nan_as_null", "allow_copy", NULL};
  int nan_as_null = 0, allow_copy = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|pp:__dataframe__", kwlist, &nan_as_null,
                                   &allow_copy))
    return NULL;
  return frame_new(FRAME->names, Py_NewRef(FRAME->chunks), allow_copy);
}

static PyObject* frame_num_columns(PyObject* self, PyObject* unused) {
  return PyLong_FromSsize_t(PyTuple_GET_SIZE(FRAME->names));
}

static PyObject* frame_num_rows(PyObject* self, PyObject* unused) {
  int64_t n = 0;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(FRAME->chunks); i++)
    n += chunk_length(PyTuple_GET_ITEM(FRAME->chunks, i));
  return PyLong_FromLongLong(n);
}

static PyObject* frame_num_chunks(PyObject* self, PyObject* unused) {
  return PyLong_FromSsize_t(PyTuple_GET_SIZE(FRAME->chunks));
}

static PyObject* frame_column_names(PyObject* self, PyObject* unused) {
  return PySequence_List(FRAME->names);
}

static PyObject* frame_column(PyObject* self, Py_ssize_t c) {
  Py_ssize_t n = PyTuple_GET_SIZE(FRAME->chunks);
  PyObject* chunks = PyTuple_New(n);
  if (chunks == NULL) return NULL;
  for (Py_ssize_t i = 0; i < n; i++)
    PyTuple_SET_ITEM(chunks, i, Py_NewRef(PyTuple_GET_ITEM(PyTuple_GET_ITEM(FRAME->chunks, i), c)));
  return column_new(PyTuple_GET_ITEM(FRAME->names, c), chunks, FRAME->allow_copy);
}

static Py_ssize_t frame_index(PyObject* self, PyObject* key) {
  Py_ssize_t ncol = PyTuple_GET_SIZE(FRAME->names);
  if (PyUnicode_Check(key)) return rillpy_find_name(FRAME->names, key, 1);
  Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
  if (i == -1 && PyErr_Occurred()) return -1;
  if (i < 0 || i >= ncol) {
    rillpy_invalid("column index %zd out of range: the frame has %zd columns", i, ncol);
    return -1;
  }
  return i;
}

static PyObject* frame_get_column(PyObject* self, PyObject* arg) {
  if (PyUnicode_Check(arg)) return rillpy_invalid("get_column takes an index; use get_column_by_name");
  Py_ssize_t i = frame_index(self, arg);
  return i < 0 ? NULL : frame_column(self, i);
}

static PyObject* frame_get_column_by_name(PyObject* self, PyObject* arg) {
  if (!PyUnicode_Check(arg)) return rillpy_invalid("get_column_by_name takes a str");
  Py_ssize_t i = frame_index(self, arg);
  return i < 0 ? NULL : frame_column(self, i);
}

static PyObject* frame_get_columns(PyObject* self, PyObject* unused) {
  Py_ssize_t n = PyTuple_GET_SIZE(FRAME->names);
  PyObject* out = PyList_New(n);
  for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
    PyObject* c = frame_column(self, i);
    if (c == NULL) {
      Py_CLEAR(out);
      break;
    }
    PyList_SET_ITEM(out, i, c);
  }
  return out;
}

/* A frame of the given columns (indices or names). */
static PyObject* frame_select(PyObject* self, PyObject* keys, int by_name) {
  PyObject* seq = PySequence_Fast(keys, "select_columns takes a sequence");
  if (seq == NULL) return NULL;
  Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
  Py_ssize_t n = PyTuple_GET_SIZE(FRAME->chunks);
  PyObject* names = PyTuple_New(k);
  PyObject* chunks = PyTuple_New(n);
  for (Py_ssize_t i = 0; chunks != NULL && i < n; i++) {
    PyObject* t = PyTuple_New(k);
    if (t == NULL) Py_CLEAR(chunks);
    else PyTuple_SET_ITEM(chunks, i, t);
  }
  if (names == NULL || chunks == NULL) goto fail;
  for (Py_ssize_t j = 0; j < k; j++) {
    PyObject* key = PySequence_Fast_GET_ITEM(seq, j);
    if (by_name != PyUnicode_Check(key)) {
      rillpy_invalid(by_name ? "select_columns_by_name takes names (str)"
                             : "select_columns takes indices (int)");
      goto fail;
    }
    Py_ssize_t c = frame_index(self, key);
    if (c < 0) goto fail;
    PyTuple_SET_ITEM(names, j, Py_NewRef(PyTuple_GET_ITEM(FRAME->names, c)));
    for (Py_ssize_t i = 0; i < n; i++)
      PyTuple_SET_ITEM(PyTuple_GET_ITEM(chunks, i), j,
                       Py_NewRef(PyTuple_GET_ITEM(PyTuple_GET_ITEM(FRAME->chunks, i), c)));
  }
  Py_DECREF(seq);
  PyObject* out = frame_new(names, chunks, FRAME->allow_copy);
  Py_DECREF(names);
  return out;
fail:
  Py_DECREF(seq);
  Py_XDECREF(names);
  Py_XDECREF(chunks);
  return NULL;
}

static PyObject* frame_select_columns(PyObject* self, PyObject* arg) {
  return frame_select(self, arg, 0);
}

static PyObject* frame_select_columns_by_name(PyObject* self, PyObject* arg) {
  return frame_select(self, arg, 1);
}

static PyObject* frame_get_chunks(PyObject* self, PyObject* args, PyObject* kwargs) {
  static char* kwlist[] = {"n_chunks", NULL};
  PyObject* n_chunks = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:get_chunks", kwlist, &n_chunks)) return NULL;
  Py_ssize_t have = PyTuple_GET_SIZE(FRAME->chunks);
  Py_ssize_t k = pieces_per_chunk(n_chunks, have);
  if (k < 0) return NULL;
  PyObject* pieces = PyList_New(0);
  if (pieces == NULL) return NULL;
  for (Py_ssize_t i = 0; i < have; i++) {
    PyObject* chunk = PyTuple_GET_ITEM(FRAME->chunks, i);
    if ((k == 1 ? PyList_Append(pieces, chunk) : split_chunk(chunk, FRAME->names, k, pieces)) < 0) {
      Py_DECREF(pieces);
      return NULL;
    }
  }
  Py_ssize_t n = PyList_GET_SIZE(pieces);
  PyObject* out = PyList_New(n);
  for (Py_ssize_t i = 0; out != NULL && i < n; i++) {
    PyObject* f = frame_new(FRAME->names, PyTuple_Pack(1, PyList_GET_ITEM(pieces, i)),
                            FRAME->allow_copy);
    if (f == NULL) {
      Py_CLEAR(out);
      break;
    }
    PyList_SET_ITEM(out, i, f);
  }
  Py_DECREF(pieces);
  return out;
}

static PyObject* frame_repr(PyObject* self) {
  return PyUnicode_FromFormat("rill.interchange.DataFrame(columns=%R, chunks=%zd)", FRAME->names,
                              PyTuple_GET_SIZE(FRAME->chunks));
}

static PyMethodDef frame_methods[] = {
  {"__dataframe__", (PyCFunction)(void (*)(void))frame_dataframe, METH_VARARGS | METH_KEYWORDS,
   "__dataframe__(nan_as_null=False, allow_copy=True)\n\nThe frame itself (a new view)."},
  {"num_columns", frame_num_columns, METH_NOARGS, "num_columns() -> int"},
  {"num_rows", frame_num_rows, METH_NOARGS, "num_rows() -> int\n\nRows in all chunks."},
  {"num_chunks", frame_num_chunks, METH_NOARGS, "num_chunks() -> int"},
  {"column_names", frame_column_names, METH_NOARGS, "column_names() -> list[str]"},
  {"get_column", frame_get_column, METH_O, "get_column(i) -> Column\n\nThe column at index i."},
  {"get_column_by_name", frame_get_column_by_name, METH_O,
   "get_column_by_name(name) -> Column\n\nThe column named `name`."},
  {"get_columns", frame_get_columns, METH_NOARGS, "get_columns() -> list[Column]"},
  {"select_columns", frame_select_columns, METH_O,
   "select_columns(indices) -> DataFrame\n\nA frame of the given columns."},
  {"select_columns_by_name", frame_select_columns_by_name, METH_O,
   "select_columns_by_name(names) -> DataFrame\n\nA frame of the named columns."},
  {"get_chunks", (PyCFunction)(void (*)(void))frame_get_chunks, METH_VARARGS | METH_KEYWORDS,
   "get_chunks(n_chunks=None) -> list[DataFrame]\n\nOne single-chunk frame per chunk; n_chunks "
   "(a multiple of num_chunks()) splits each chunk further (zero-copy slices)."},
  {NULL, NULL, 0, NULL},
};

static PyGetSetDef frame_getset[] = {
  {"metadata", empty_metadata, NULL, "Frame metadata (an empty dict).", NULL},
  {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject Frame_Type = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "rill.interchange.DataFrame",
  .tp_basicsize = sizeof(Frame),
  .tp_dealloc = frame_dealloc,
  .tp_repr = frame_repr,
  .tp_flags = Py_TPFLAGS_DEFAULT,
  .tp_doc = "The dataframe interchange protocol object (__dataframe__) over rill arrays: one "
            "chunk per row or batch.",
  .tp_methods = frame_methods,
  .tp_getset = frame_getset,
};

/* ---------------------------------------------------------------- init */

static PyObject* make_enum(PyObject* enum_mod, const char* name, const char* const* names,
                           const long* values, int n) {
  PyObject* members = PyList_New(n);
  for (int i = 0; members != NULL && i < n; i++) {
    PyObject* pair = Py_BuildValue("(sl)", names[i], values[i]);
    if (pair == NULL) {
      Py_CLEAR(members);
      break;
    }
    PyList_SET_ITEM(members, i, pair);
  }
  if (members == NULL) return NULL;
  PyObject* intenum = PyObject_GetAttrString(enum_mod, "IntEnum");
  PyObject* kwargs = Py_BuildValue("{ss}", "module", "rill");
  PyObject* args = Py_BuildValue("(sO)", name, members);
  PyObject* cls = (intenum && kwargs && args) ? PyObject_Call(intenum, args, kwargs) : NULL;
  Py_XDECREF(intenum);
  Py_XDECREF(kwargs);
  Py_XDECREF(args);
  Py_DECREF(members);
  return cls;
}

int rillpy_init_interchange(PyObject* m) {
  if (PyType_Ready(&Buffer_Type) < 0 || PyType_Ready(&Column_Type) < 0 ||
      PyType_Ready(&Frame_Type) < 0)
    return -1;
  PyObject* enum_mod = PyImport_ImportModule("enum");
  if (enum_mod == NULL) return -1;
  static const char* const kinds[] = {"INT", "UINT", "FLOAT", "BOOL", "STRING", "DATETIME",
                                      "CATEGORICAL"};
  static const long kind_values[] = {RILL_KIND_INT, RILL_KIND_UINT, RILL_KIND_FLOAT,
                                     RILL_KIND_BOOL, RILL_KIND_STRING, RILL_KIND_DATETIME,
                                     RILL_KIND_CATEGORICAL};
  static const char* const nulls[] = {"NON_NULLABLE", "USE_NAN", "USE_SENTINEL", "USE_BITMASK",
                                      "USE_BYTEMASK"};
  static const long null_values[] = {RILL_NULL_NON_NULLABLE, RILL_NULL_USE_NAN,
                                     RILL_NULL_USE_SENTINEL, RILL_NULL_USE_BITMASK,
                                     RILL_NULL_USE_BYTEMASK};
  static const char* const devices[] = {"CPU", "CUDA", "CPU_PINNED", "OPENCL", "VULKAN", "METAL",
                                        "VPI", "ROCM"};
  static const long device_values[] = {kDLCPU, kDLCUDA, kDLCUDAHost, kDLOpenCL, kDLVulkan,
                                       kDLMetal, kDLVPI, kDLROCM};
  DtypeKind = make_enum(enum_mod, "DtypeKind", kinds, kind_values, 7);
  ColumnNullType = make_enum(enum_mod, "ColumnNullType", nulls, null_values, 5);
  DlpackDeviceType = make_enum(enum_mod, "DlpackDeviceType", devices, device_values, 8);
  Py_DECREF(enum_mod);
  if (DtypeKind == NULL || ColumnNullType == NULL || DlpackDeviceType == NULL) return -1;
  if (PyModule_AddObjectRef(m, "DtypeKind", DtypeKind) < 0 ||
      PyModule_AddObjectRef(m, "ColumnNullType", ColumnNullType) < 0 ||
      PyModule_AddObjectRef(m, "DlpackDeviceType", DlpackDeviceType) < 0)
    return -1;
  return 0;
}
