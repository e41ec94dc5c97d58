/* The rill._rill module: the exception hierarchy (RillError and one subclass per error code),
 * the conversions every other file uses (dtypes, option names, columns, paths, fields), the
 * constants of the C headers and the module-level queries (version, features, CUDA). */
#include "rillpy.h"

#include <stdarg.h>
#include <string.h>

/* ---------------------------------------------------------------- exceptions */

static PyObject* RillError;

/* One subclass per error code: name, second base, code, docstring. */
typedef struct error_def {
  const char* name;   /* qualified: "rill.X" */
  int code;
  const char* doc;
  PyObject* cls;
} error_def_t;

static error_def_t error_defs[] = {
  {"rill.InvalidArgumentError", RILL_EINVAL,
   "Wrong use of the API: a bad argument, an unknown column, a wrong type (EINVAL).", NULL},
  {"rill.RillMemoryError", RILL_ENOMEM, "An allocation failed (ENOMEM).", NULL},
  {"rill.RillIOError", RILL_EIO, "A file could not be opened or read (EIO).", NULL},
  {"rill.FormatError", RILL_EFORMAT, "Malformed or corrupt data: CSV, images, ... (EFORMAT).",
   NULL},
  {"rill.NotSupportedError", RILL_ENOTSUP,
   "Valid but unsupported: a type, a format, a library rill was built without (ENOTSUP).", NULL},
  {"rill.NoDeviceError", RILL_ENODEV, "No CUDA device, or CUDA support not built in (ENODEV).",
   NULL},
  {"rill.RillRangeError", RILL_ERANGE,
   "A value does not fit: an integer overflow, a pixel limit, ... (ERANGE).", NULL},
  {"rill.SQLError", RILL_ESQL, "SQLite reported an error (ESQL).", NULL},
  {"rill.CudaError", RILL_ECUDA, "The CUDA runtime reported an error (ECUDA).", NULL},
  {"rill.StageError", RILL_ESTAGE, "A stage function failed without giving a code (ESTAGE).",
   NULL},
};
#define NERRORS ((int)(sizeof(error_defs) / sizeof(error_defs[0])))

/* The builtin second base of each subclass (looked up at init: not constant expressions). */
static PyObject* error_builtin_base(int code) {
  switch (code) {
    case RILL_EINVAL: case RILL_EFORMAT: case RILL_ERANGE: return PyExc_ValueError;
    case RILL_ENOMEM: return PyExc_MemoryError;
    case RILL_EIO: return PyExc_OSError;
    case RILL_ENOTSUP: return PyExc_NotImplementedError;
    default: return PyExc_RuntimeError;
  }
}

PyObject* rillpy_error_class(int code) {
  for (int i = 0; i < NERRORS; i++)
    if (error_defs[i].code == code) return error_defs[i].cls;
  return RillError;
}

/* Class-level defaults, so that an exception raised from Python code has every attribute. */
static int set_error_defaults(PyObject* cls, int code) {
  PyObject* c = PyLong_FromLong(code);
  PyObject* m1 = PyLong_FromLong(-1);
  PyObject* empty = PyUnicode_FromString("");
  int rc = -1;
  if (c && m1 && empty && PyObject_SetAttrString(cls, "code", c) == 0 &&
      PyObject_SetAttrString(cls, "row", m1) == 0 &&
      PyObject_SetAttrString(cls, "column", m1) == 0 &&
      PyObject_SetAttrString(cls, "column_name", Py_None) == 0 &&
      PyObject_SetAttrString(cls, "message", empty) == 0)
    rc = 0;
  Py_XDECREF(c);
  Py_XDECREF(m1);
  Py_XDECREF(empty);
  return rc;
}

/* Builds the exception instance and sets it; always returns NULL. */
static PyObject* raise_with(int code, PyObject* message, int64_t row, int column,
                            const char* column_name) {
  PyObject* cls = rillpy_error_class(code);
  if (message == NULL) return NULL;
  PyObject* exc = PyObject_CallOneArg(cls, message);
  if (exc == NULL) {
    Py_DECREF(message);
    return NULL;
  }
  PyObject* c = PyLong_FromLong(code);
  PyObject* r = PyLong_FromLongLong(row);
  PyObject* col = PyLong_FromLong(column);
  PyObject* name = column_name ? rillpy_text(column_name) : Py_NewRef(Py_None);
  int ok = c && r && col && name && PyObject_SetAttrString(exc, "code", c) == 0 &&
           PyObject_SetAttrString(exc, "row", r) == 0 &&
           PyObject_SetAttrString(exc, "column", col) == 0 &&
           PyObject_SetAttrString(exc, "column_name", name) == 0 &&
           PyObject_SetAttrString(exc, "message", message) == 0;
  Py_XDECREF(c);
  Py_XDECREF(r);
  Py_XDECREF(col);
  Py_XDECREF(name);
  Py_DECREF(message);
  if (ok) PyErr_SetObject(cls, exc);
  Py_DECREF(exc);
  return NULL;
}

PyObject* rillpy_text(const char* s) { return PyUnicode_DecodeUTF8(s, (Py_ssize_t)strlen(s), "replace"); }

static PyObject* error_message(int code, const rill_error_t* err) {
  return rillpy_text((err != NULL && err->message[0] != '\0') ? err->message : rill_strerror(code));
}

PyObject* rillpy_raise_column(int code, const rill_error_t* err, const char* column_name) {
  return raise_with(code, error_message(code, err), err ? err->row : -1,
                    err ? err->column : -1, column_name);
}

PyObject* rillpy_raise(int code, const rill_error_t* err) {
  return rillpy_raise_column(code, err, NULL);
}

int rillpy_check(int rc, const rill_error_t* err) {
  if (rc < 0) {
    rillpy_raise(rc, err);
    return -1;
  }
  return rc;
}

PyObject* rillpy_invalid(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  PyObject* msg = PyUnicode_FromFormatV(fmt, ap);
  va_end(ap);
  return raise_with(RILL_EINVAL, msg, -1, -1, NULL);
}

/* ---------------------------------------------------------------- helpers */

int rillpy_append(PyObject* list, PyObject* item) {
  if (item == NULL) return -1;
  int rc = PyList_Append(list, item);
  Py_DECREF(item);
  return rc;
}

PyObject* rillpy_join(PyObject* parts) {
  if (parts == NULL) return NULL;
  PyObject* sep = PyUnicode_FromString(", ");
  PyObject* out = sep ? PyUnicode_Join(sep, parts) : NULL;
  Py_XDECREF(sep);
  Py_DECREF(parts);
  return out;
}

int rillpy_is_finalizing(void) {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing();
#else
  return _Py_IsFinalizing();
#endif
}

static PyObject* numpy_mod;    /* numpy, imported on first use */
static PyObject* numpy_ma_mod; /* numpy.ma */

PyObject* rillpy_numpy(void) {
  if (numpy_mod == NULL) numpy_mod = PyImport_ImportModule("numpy");
  return numpy_mod;
}

PyObject* rillpy_numpy_ma(void) {
  if (numpy_ma_mod == NULL) numpy_ma_mod = PyImport_ImportModule("numpy.ma");
  return numpy_ma_mod;
}

int rillpy_split_masked(PyObject* o, PyObject** data, PyObject** mask) {
  *data = *mask = NULL;
  PyObject* ma = rillpy_numpy_ma();
  PyObject* macls = ma ? PyObject_GetAttrString(ma, "MaskedArray") : NULL;
  if (macls == NULL) return -1;
  int masked = PyObject_IsInstance(o, macls);
  Py_DECREF(macls);
  if (masked <= 0) return masked;
  *data = PyObject_CallMethod(ma, "getdata", "O", o);
  *mask = *data ? PyObject_CallMethod(ma, "getmaskarray", "O", o) : NULL;
  if (*mask == NULL) {
    Py_CLEAR(*data);
    return -1;
  }
  return 1;
}

/* ---------------------------------------------------------------- conversions */

/* "bool, int8, ..., timestamp_us" */
static PyObject* dtype_list(void) {
  PyObject* parts = PyList_New(0);
  for (int d = RILL_BOOL; parts != NULL && d <= RILL_TIMESTAMP_US; d++)
    if (rillpy_append(parts, PyUnicode_FromString(rill_dtype_name((rill_dtype_t)d))) < 0) Py_CLEAR(parts);
  return rillpy_join(parts);
}

static int bad_dtype(PyObject* o) {
  PyObject* valid = dtype_list();
  if (valid == NULL) return -1;
  rillpy_invalid("unknown dtype %R; valid dtypes: %U", o, valid);
  Py_DECREF(valid);
  return -1;
}

static int dtype_from_name(const char* s, rill_dtype_t* out) {
  for (int d = RILL_BOOL; d <= RILL_TIMESTAMP_US; d++) {
    if (strcmp(s, rill_dtype_name((rill_dtype_t)d)) == 0) {
      *out = (rill_dtype_t)d;
      return 1;
    }
  }
  if (strcmp(s, "datetime64[us]") == 0 || strcmp(s, "timestamp_us") == 0 ||
      strcmp(s, "M8[us]") == 0) {
    *out = RILL_TIMESTAMP_US;
    return 1;
  }
  return 0;
}

/* A numpy dtype (or anything numpy.dtype() accepts) through its kind and item size. */
static int dtype_from_numpy(PyObject* o, rill_dtype_t* out) {
  PyObject* np = rillpy_numpy();
  if (np == NULL) {
    PyErr_Clear();
    return 0;
  }
  PyObject* dt = PyObject_CallMethod(np, "dtype", "O", o);
  if (dt == NULL) {
    PyErr_Clear();
    return 0;
  }
  PyObject* kind = PyObject_GetAttrString(dt, "kind");
  PyObject* size = PyObject_GetAttrString(dt, "itemsize");
  PyObject* str = PyObject_Str(dt);
  int found = 0;
  if (kind && size && str && PyUnicode_Check(kind) && PyUnicode_Check(str)) {
    const char* k = PyUnicode_AsUTF8(kind);
    const char* s = PyUnicode_AsUTF8(str);
    long bytes = PyLong_AsLong(size);
    if (k && s && !PyErr_Occurred()) {
      static const rill_dtype_t ints[] = {RILL_INT8, RILL_INT16, 0, RILL_INT32, 0, 0, 0, RILL_INT64};
      static const rill_dtype_t uints[] = {RILL_UINT8, RILL_UINT16, 0, RILL_UINT32, 0, 0, 0,
                                           RILL_UINT64};
      static const rill_dtype_t floats[] = {0, RILL_FLOAT16, 0, RILL_FLOAT32, 0, 0, 0, RILL_FLOAT64};
      rill_dtype_t d = 0;
      if (bytes >= 1 && bytes <= 8) {
        if (k[0] == 'i') d = ints[bytes - 1];
        else if (k[0] == 'u') d = uints[bytes - 1];
        else if (k[0] == 'f') d = floats[bytes - 1];
      }
      if (k[0] == 'b') d = RILL_BOOL;
      else if (k[0] == 'U') d = RILL_STRING;
      else if (k[0] == 'S') d = RILL_BINARY;
      else if (k[0] == 'M' && strcmp(s, "datetime64[us]") == 0) d = RILL_TIMESTAMP_US;
      if (d != 0) {
        *out = d;
        found = 1;
      }
    }
  }
  PyErr_Clear();
  Py_XDECREF(kind);
  Py_XDECREF(size);
  Py_XDECREF(str);
  Py_DECREF(dt);
  return found;
}

int rillpy_parse_dtype(PyObject* o, rill_dtype_t* out) {
  if (o == NULL || o == Py_None) return bad_dtype(o ? o : Py_None);
  if (PyUnicode_Check(o)) {
    const char* s = PyUnicode_AsUTF8(o);
    if (s == NULL) return -1;
    if (dtype_from_name(s, out)) return 0;
    return bad_dtype(o);
  }
  if (o == (PyObject*)&PyUnicode_Type) { *out = RILL_STRING; return 0; }
  if (o == (PyObject*)&PyBytes_Type) { *out = RILL_BINARY; return 0; }
  if (o == (PyObject*)&PyBool_Type) { *out = RILL_BOOL; return 0; }
  if (o == (PyObject*)&PyLong_Type) { *out = RILL_INT64; return 0; }
  if (o == (PyObject*)&PyFloat_Type) { *out = RILL_FLOAT64; return 0; }
  if (dtype_from_numpy(o, out)) return 0;
  return bad_dtype(o);
}

int rillpy_parse_type(PyObject* dtype, PyObject* shape, rill_type_t* out) {
  rill_dtype_t d;
  if (rillpy_parse_dtype(dtype, &d) < 0) return -1;
  int64_t dims[RILL_MAX_NDIM];
  int ndim = 0;
  if (shape != NULL && shape != Py_None) {
    if (PyLong_Check(shape)) {
      dims[0] = PyLong_AsLongLong(shape);
      if (dims[0] == -1 && PyErr_Occurred()) return -1;
      ndim = 1;
    } else {
      PyObject* seq = PySequence_Fast(shape, "shape must be an int or a sequence of int");
      if (seq == NULL) return -1;
      Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
      if (n > RILL_MAX_NDIM) {
        Py_DECREF(seq);
        rillpy_invalid("shape %R has %zd dimensions; at most %d are supported", shape, n,
                       RILL_MAX_NDIM);
        return -1;
      }
      for (Py_ssize_t i = 0; i < n; i++) {
        PyObject* item = PySequence_Fast_GET_ITEM(seq, i);
        if (!PyLong_Check(item)) {
          Py_DECREF(seq);
          rillpy_invalid("shape %R: dimensions must be int", shape);
          return -1;
        }
        dims[i] = PyLong_AsLongLong(item);
        if (dims[i] == -1 && PyErr_Occurred()) {
          Py_DECREF(seq);
          return -1;
        }
      }
      ndim = (int)n;
      Py_DECREF(seq);
    }
    for (int i = 0; i < ndim; i++) {
      if (dims[i] < 1 && dims[i] != -1) {
        rillpy_invalid("shape %R: a dimension is positive, or -1 when it varies per cell", shape);
        return -1;
      }
    }
  }
  *out = ndim == 0 ? rill_type_scalar(d) : rill_type_tensor(d, ndim, dims);
  return 0;
}

int rillpy_parse_grain(long long grain, int64_t* out) {
  if (grain < 0) {
    rillpy_invalid("grain must be >= 0 (0: the engine picks), got %lld", grain);
    return -1;
  }
  *out = grain;
  return 0;
}

/* An option given as one of `names` (its index is the value) or as a valid int. */
static int parse_choice(PyObject* o, const char* what, const char* const* names, const int* values,
                        int n, int* out) {
  if (o == NULL || o == Py_None) {
    *out = values[0];
    return 0;
  }
  if (PyUnicode_Check(o)) {
    const char* s = PyUnicode_AsUTF8(o);
    if (s == NULL) return -1;
    for (int i = 0; i < n; i++) {
      if (strcmp(s, names[i]) == 0) {
        *out = values[i];
        return 0;
      }
    }
  } else if (PyLong_Check(o) && !PyBool_Check(o)) {
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred()) return -1;
    for (int i = 0; i < n; i++) {
      if (values[i] == v) {
        *out = values[i];
        return 0;
      }
    }
  }
  PyObject* parts = PyList_New(0);
  for (int i = 0; parts != NULL && i < n; i++)
    if (rillpy_append(parts, PyUnicode_FromString(names[i])) < 0) Py_CLEAR(parts);
  PyObject* valid = rillpy_join(parts);
  if (valid == NULL) return -1;
  rillpy_invalid("unknown %s %R; valid values: %U", what, o, valid);
  Py_DECREF(valid);
  return -1;
}

int rillpy_parse_on_error(PyObject* o, rill_on_error_t* out) {
  static const char* const names[] = {"raise", "skip", "null"};
  static const int values[] = {RILL_ON_ERROR_RAISE, RILL_ON_ERROR_SKIP, RILL_ON_ERROR_NULL};
  int v;
  if (parse_choice(o, "on_error", names, values, 3, &v) < 0) return -1;
  *out = (rill_on_error_t)v;
  return 0;
}

int rillpy_parse_layout(PyObject* o, rill_layout_t* out) {
  static const char* const names[] = {"hwc", "chw", "nhwc", "nchw"};
  static const int values[] = {RILL_LAYOUT_HWC, RILL_LAYOUT_CHW, RILL_LAYOUT_NHWC,
                               RILL_LAYOUT_NCHW};
  int v;
  if (parse_choice(o, "layout", names, values, 4, &v) < 0) return -1;
  *out = (rill_layout_t)v;
  return 0;
}

int rillpy_parse_interp(PyObject* o, rill_interp_t* out) {
  static const char* const names[] = {"bilinear", "area"};
  static const int values[] = {RILL_INTERP_BILINEAR, RILL_INTERP_AREA};
  int v;
  if (parse_choice(o, "interpolation", names, values, 2, &v) < 0) return -1;
  *out = (rill_interp_t)v;
  return 0;
}

int rillpy_parse_where(PyObject* o, rill_stage_where_t* out) {
  static const char* const names[] = {"cpu", "cpu_serial", "cuda"};
  static const int values[] = {RILL_STAGE_CPU, RILL_STAGE_CPU_SERIAL, RILL_STAGE_CUDA};
  int v;
  if (parse_choice(o, "where", names, values, 3, &v) < 0) return -1;
  *out = (rill_stage_where_t)v;
  return 0;
}

PyObject* rillpy_unknown_column(PyObject* key, PyObject* names) {
  PyObject* joined = rillpy_join(names);
  if (joined == NULL) return NULL;
  rillpy_invalid("unknown column %R; columns are: %U", key, joined);
  Py_DECREF(joined);
  return NULL;
}

Py_ssize_t rillpy_find_name(PyObject* names, PyObject* key, int raise_) {
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(names); i++) {
    int eq = PyUnicode_Compare(PyTuple_GET_ITEM(names, i), key);
    if (eq == -1 && PyErr_Occurred()) return -1;
    if (eq == 0) return i;
  }
  if (raise_) rillpy_unknown_column(key, Py_NewRef(names));
  return -1;
}

int rillpy_parse_column(rill_df_t* df, PyObject* o, int* out) {
  int n = rill_df_ncolumns(df);
  if (PyUnicode_Check(o)) {
    const char* s = PyUnicode_AsUTF8(o);
    if (s == NULL) return -1;
    int c = rill_df_column(df, s);
    if (c >= 0) {
      *out = c;
      return 0;
    }
    rillpy_unknown_column(o, rillpy_column_list(df, NULL, 0, 0));
    return -1;
  }
  if (PyLong_Check(o) && !PyBool_Check(o)) {
    long v = PyLong_AsLong(o);
    if (v == -1 && PyErr_Occurred()) {
      if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
      PyErr_Clear();
      v = n;
    }
    if (v < 0 || v >= n) {
      rillpy_invalid("column index %R out of range: the dataframe has %d columns", o, n);
      return -1;
    }
    *out = (int)v;
    return 0;
  }
  rillpy_invalid("a column is given by its name (str) or index (int), not %s",
                 Py_TYPE(o)->tp_name);
  return -1;
}

int rillpy_parse_columns(rill_df_t* df, PyObject* o, int** out, int* n) {
  *out = NULL;
  *n = 0;
  if (o == NULL || o == Py_None) return 0;
  if (PyUnicode_Check(o) || PyLong_Check(o)) {
    int* cols = PyMem_Malloc(sizeof(int));
    if (cols == NULL) {
      PyErr_NoMemory();
      return -1;
    }
    if (rillpy_parse_column(df, o, cols) < 0) {
      PyMem_Free(cols);
      return -1;
    }
    *out = cols;
    *n = 1;
    return 0;
  }
  PyObject* seq = PySequence_Fast(o, "columns must be a name, an index or a sequence of them");
  if (seq == NULL) return -1;
  Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
  if (len > INT_MAX) {
    Py_DECREF(seq);
    rillpy_invalid("too many columns");
    return -1;
  }
  int* cols = PyMem_Malloc(sizeof(int) * (size_t)(len > 0 ? len : 1));
  if (cols == NULL) {
    Py_DECREF(seq);
    PyErr_NoMemory();
    return -1;
  }
  for (Py_ssize_t i = 0; i < len; i++) {
    if (rillpy_parse_column(df, PySequence_Fast_GET_ITEM(seq, i), &cols[i]) < 0) {
      PyMem_Free(cols);
      Py_DECREF(seq);
      return -1;
    }
  }
  Py_DECREF(seq);
  *out = cols;
  *n = (int)len;
  return 0;
}

PyObject* rillpy_fspath(PyObject* o) {
  PyObject* p = PyOS_FSPath(o);
  if (p == NULL) return NULL;
  PyObject* b = PyBytes_Check(p) ? Py_NewRef(p) : PyUnicode_EncodeFSDefault(p);
  if (b && memchr(PyBytes_AS_STRING(b), 0, (size_t)PyBytes_GET_SIZE(b))) { /* the C string would end there */
    Py_CLEAR(b);
    rillpy_invalid("the path %R holds a NUL character", p);
  }
  Py_DECREF(p);
  return b;
}

PyObject* rillpy_dtype_name(rill_dtype_t dtype) {
  const char* s = rill_dtype_name(dtype);
  return PyUnicode_FromString(s ? s : "unknown");
}

PyObject* rillpy_shape_tuple(int ndim, const int64_t* shape, int64_t lead, int with_lead) {
  int k = with_lead ? 1 : 0;
  PyObject* t = PyTuple_New(ndim + k);
  if (t == NULL) return NULL;
  if (with_lead) PyTuple_SET_ITEM(t, 0, PyLong_FromLongLong(lead));
  for (int i = 0; i < ndim; i++) PyTuple_SET_ITEM(t, i + k, PyLong_FromLongLong(shape[i]));
  for (int i = 0; i < ndim + k; i++) {
    if (PyTuple_GET_ITEM(t, i) == NULL) {
      Py_DECREF(t);
      return NULL;
    }
  }
  return t;
}

PyObject* rillpy_type_shape(const rill_type_t* t) { return rillpy_shape_tuple(t->ndim, t->shape, 0, 0); }

static PyTypeObject FieldType;

static PyStructSequence_Field field_fields[] = {
  {"name", "the column name (str)"},
  {"dtype", "the element dtype name (str, one of rill.DTYPES)"},
  {"shape", "the cell shape (tuple of int; () for scalars, -1 where it varies per cell)"},
  {"nullable", "whether the column may hold nulls (bool)"},
  {"device", "(device type, device id) where the column's data lives"},
  {NULL, NULL},
};

static PyStructSequence_Desc field_desc = {
  "rill.Field",
  "Field(name, dtype, shape, nullable, device): the description of one dataframe column.",
  field_fields, 5,
};

PyObject* rillpy_field(const rill_field_t* f) {
  PyObject* out = PyStructSequence_New(&FieldType);
  if (out == NULL) return NULL;
  PyObject* items[5] = {
    rillpy_text(f->name),
    rillpy_dtype_name(f->type.dtype),
    rillpy_type_shape(&f->type),
    PyBool_FromLong(f->nullable),
    Py_BuildValue("(ii)", rillpy_device_type(f->device), f->device.id),
  };
  int ok = 1;
  for (int i = 0; i < 5; i++) {
    if (items[i] == NULL) ok = 0;
    PyStructSequence_SetItem(out, i, items[i] ? items[i] : Py_NewRef(Py_None));
  }
  if (!ok) {
    Py_DECREF(out);
    return NULL;
  }
  return out;
}

/* ---------------------------------------------------------------- module functions */

static PyObject* mod_version(PyObject* self, PyObject* unused) {
  return PyUnicode_FromString(rill_version());
}

static PyObject* mod_strerror(PyObject* self, PyObject* arg) {
  long code = PyLong_AsLong(arg);
  if (code == -1 && PyErr_Occurred()) return NULL;
  if (code < INT_MIN || code > INT_MAX) code = INT_MIN;
  return PyUnicode_FromString(rill_strerror((int)code));
}

static const struct {
  const char* name;
  rill_feature_t feature;
} features[] = {
  {"cuda", RILL_FEATURE_CUDA}, {"jpeg", RILL_FEATURE_JPEG}, {"png", RILL_FEATURE_PNG},
  {"sqlite", RILL_FEATURE_SQLITE}, {"threads", RILL_FEATURE_THREADS}, {"webp", RILL_FEATURE_WEBP},
  {"gzip", RILL_FEATURE_GZIP}, {"zstd", RILL_FEATURE_ZSTD},
};

static PyObject* mod_has_feature(PyObject* self, PyObject* arg) {
  const char* name = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
  if (name == NULL && PyErr_Occurred()) return NULL;
  for (size_t i = 0; name && i < sizeof(features) / sizeof(features[0]); i++)
    if (strcmp(name, features[i].name) == 0) return PyBool_FromLong(rill_has_feature(features[i].feature));
  return rillpy_invalid("unknown feature %R; features are: cuda, jpeg, png, sqlite, threads, webp", arg);
}

static PyObject* mod_cuda_device_count(PyObject* self, PyObject* unused) {
  int n;
  Py_BEGIN_ALLOW_THREADS
  n = rill_cuda_device_count();
  Py_END_ALLOW_THREADS
  return PyLong_FromLong(n);
}

static PyObject* mod_cuda_pool_stats(PyObject* self, PyObject* unused) {
  rill_cuda_pool_stats_t st;
  memset(&st, 0, sizeof st);
  Py_BEGIN_ALLOW_THREADS
  rill_cuda_pool_stats(&st);
  Py_END_ALLOW_THREADS
  return Py_BuildValue("{sLsLsL}", "allocs", (long long)st.allocs, "reuses", (long long)st.reuses,
                       "cached_bytes", (long long)st.cached_bytes);
}

static PyMethodDef module_methods[] = {
  {"version", mod_version, METH_NOARGS,
   "version() -> str\n\nThe version of the linked rill library (\"MAJOR.MINOR.PATCH\")."},
  {"strerror", mod_strerror, METH_O,
   "strerror(code) -> str\n\nThe static text of a rill status code (rill.OK, rill.EINVAL, ...)."},
  {"has_feature", mod_has_feature, METH_O,
   "has_feature(name) -> bool\n\nWhether rill was built with a feature: \"cuda\", \"jpeg\", "
   "\"png\", \"sqlite\", \"threads\", \"webp\", \"gzip\" or \"zstd\" (compressed CSV files). CUDA support does not imply a device: see "
   "cuda_device_count()."},
  {"cuda_device_count", mod_cuda_device_count, METH_NOARGS,
   "cuda_device_count() -> int\n\nThe number of CUDA devices (0 without CUDA support or a "
   "device)."},
  {"cuda_pool_stats", mod_cuda_pool_stats, METH_NOARGS,
   "cuda_pool_stats() -> dict\n\nCounters of the process-wide pinned/device buffer pool: "
   "allocs, reuses, cached_bytes (all zero without CUDA)."},
  {NULL, NULL, 0, NULL},
};

/* ---------------------------------------------------------------- init */

/* PyModule_AddObjectRef that steals `value` (also on failure). */
static int add_steal(PyObject* m, const char* name, PyObject* value) {
  int rc = value ? PyModule_AddObjectRef(m, name, value) : -1;
  Py_XDECREF(value);
  return rc;
}

static int add_int(PyObject* m, const char* name, long value) {
  return PyModule_AddIntConstant(m, name, value);
}

int rillpy_init_errors(PyObject* m) {
  PyObject* dict = PyDict_New();
  if (dict == NULL) return -1;
  PyObject* doc = PyUnicode_FromString(
      "Base class of rill's errors. Attributes: code (a rill.E* status), row (the failing row "
      "of the iterated dataframe, or -1), column (its column index, or -1), column_name (str "
      "or None), message (str; str(e) == e.message).");
  if (doc == NULL || PyDict_SetItemString(dict, "__doc__", doc) < 0) {
    Py_XDECREF(doc);
    Py_DECREF(dict);
    return -1;
  }
  Py_DECREF(doc);
  RillError = PyErr_NewException("rill.RillError", PyExc_Exception, dict);
  Py_DECREF(dict);
  if (RillError == NULL || set_error_defaults(RillError, RILL_ESTAGE) < 0) return -1;
  if (PyModule_AddObjectRef(m, "RillError", RillError) < 0) return -1;
  for (int i = 0; i < NERRORS; i++) {
    error_def_t* e = &error_defs[i];
    PyObject* bases = PyTuple_Pack(2, RillError, error_builtin_base(e->code));
    if (bases == NULL) return -1;
    e->cls = PyErr_NewExceptionWithDoc(e->name, e->doc, bases, NULL);
    Py_DECREF(bases);
    if (e->cls == NULL || set_error_defaults(e->cls, e->code) < 0) return -1;
    if (PyModule_AddObjectRef(m, strchr(e->name, '.') + 1, e->cls) < 0) return -1;
  }

  if (FieldType.tp_name == NULL && PyStructSequence_InitType2(&FieldType, &field_desc) < 0)
    return -1;
  if (PyModule_AddObjectRef(m, "Field", (PyObject*)&FieldType) < 0) return -1;

  /* constants */
  if (add_int(m, "OK", RILL_OK) || add_int(m, "END", RILL_END) ||
      add_int(m, "EINVAL", RILL_EINVAL) || add_int(m, "ENOMEM", RILL_ENOMEM) ||
      add_int(m, "EIO", RILL_EIO) || add_int(m, "EFORMAT", RILL_EFORMAT) ||
      add_int(m, "ENOTSUP", RILL_ENOTSUP) || add_int(m, "ENODEV", RILL_ENODEV) ||
      add_int(m, "ERANGE", RILL_ERANGE) || add_int(m, "ESQL", RILL_ESQL) ||
      add_int(m, "ECUDA", RILL_ECUDA) || add_int(m, "ESTAGE", RILL_ESTAGE) ||
      add_int(m, "ON_ERROR_RAISE", RILL_ON_ERROR_RAISE) ||
      add_int(m, "ON_ERROR_SKIP", RILL_ON_ERROR_SKIP) ||
      add_int(m, "ON_ERROR_NULL", RILL_ON_ERROR_NULL) ||
      add_int(m, "LAYOUT_HWC", RILL_LAYOUT_HWC) || add_int(m, "LAYOUT_CHW", RILL_LAYOUT_CHW) ||
      add_int(m, "LAYOUT_NHWC", RILL_LAYOUT_NHWC) || add_int(m, "LAYOUT_NCHW", RILL_LAYOUT_NCHW) ||
      add_int(m, "INTERP_BILINEAR", RILL_INTERP_BILINEAR) ||
      add_int(m, "INTERP_AREA", RILL_INTERP_AREA) || add_int(m, "STAGE_CPU", RILL_STAGE_CPU) ||
      add_int(m, "STAGE_CPU_SERIAL", RILL_STAGE_CPU_SERIAL) ||
      add_int(m, "STAGE_CUDA", RILL_STAGE_CUDA) || add_int(m, "DEVICE_CPU", RILL_DEVICE_CPU) ||
      add_int(m, "DEVICE_CUDA", RILL_DEVICE_CUDA) ||
      add_int(m, "DEVICE_CUDA_HOST", RILL_DEVICE_CUDA_HOST) ||
      add_int(m, "PREFETCH_NONE", RILL_PREFETCH_NONE) ||
      add_int(m, "THREADS_NONE", RILL_THREADS_NONE) ||
      add_int(m, "MAX_NDIM", RILL_MAX_NDIM))
    return -1;

  PyObject* dtypes = PyTuple_New(RILL_TIMESTAMP_US - RILL_BOOL + 1);
  if (dtypes == NULL) return -1;
  for (int d = RILL_BOOL; d <= RILL_TIMESTAMP_US; d++) {
    PyObject* s = rillpy_dtype_name((rill_dtype_t)d);
    if (s == NULL) {
      Py_DECREF(dtypes);
      return -1;
    }
    PyTuple_SET_ITEM(dtypes, d - RILL_BOOL, s);
  }
  if (add_steal(m, "DTYPES", dtypes) < 0) return -1;
  if (PyModule_AddStringConstant(m, "__version__", rill_version()) < 0) return -1;
  return PyModule_AddFunctions(m, module_methods);
}

/* __all__: every public name the files registered. */
static int add_all(PyObject* m) {
  PyObject* dict = PyModule_GetDict(m);
  PyObject* names = PyList_New(0);
  if (names == NULL) return -1;
  PyObject* key;
  PyObject* value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &key, &value)) {
    if (!PyUnicode_Check(key) || PyUnicode_READ_CHAR(key, 0) == '_') continue;
    if (PyList_Append(names, key) < 0) {
      Py_DECREF(names);
      return -1;
    }
  }
  if (PyList_Sort(names) < 0) {
    Py_DECREF(names);
    return -1;
  }
  return add_steal(m, "__all__", names);
}

static struct PyModuleDef rill_module = {
  PyModuleDef_HEAD_INIT,
  "rill._rill",
  "rill: a pull-based streaming dataframe that feeds machine-learning training loops.\n\n"
  "The compiled core of the rill package; import it as `rill`.",
  -1,
  NULL,
  NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rill(void) {
  PyObject* m = PyModule_Create(&rill_module);
  if (m == NULL) return NULL;
  if (rillpy_init_errors(m) < 0 || rillpy_init_array(m) < 0 || rillpy_init_row(m) < 0 ||
      rillpy_init_interchange(m) < 0 || rillpy_init_dataframe(m) < 0 ||
      rillpy_init_sources(m) < 0 || rillpy_init_iter(m) < 0 || add_all(m) < 0) {
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
