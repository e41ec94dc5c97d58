/* Python callables as rill stages (map and reduce): the stage function runs on rill's worker
 * threads, takes the GIL, turns its input arrays into numpy arrays / lists, calls the
 * callable and copies the result into the output array. A Python exception is kept in a
 * bounded registry under a token written into the rill error message, so that iteration can
 * re-raise the very exception object (rillpy_raise_row_error). */
#include "rillpy.h"

#include <stdlib.h>
#include <string.h>

/* ================================================================ numpy helpers */

/* The numpy dtype name that holds a rill dtype's values (bfloat16: its raw 16 bits). */
static const char* np_dtype_name(rill_dtype_t d) {
  switch (d) {
    case RILL_BFLOAT16: return "uint16";
    case RILL_TIMESTAMP_US: return "datetime64[us]";
    case RILL_STRING:
    case RILL_BINARY: return "object";
    default: return rill_dtype_name(d);
  }
}

static int is_var_type(const rill_type_t* t) {
  return t->dtype == RILL_STRING || t->dtype == RILL_BINARY || !rill_type_is_fixed(t);
}

/* A read-only numpy view [shape] of `nbytes` bytes at `ptr` (valid while the memory is). */
static PyObject* np_view(const void* ptr, int64_t nbytes, rill_dtype_t dtype, PyObject* shape) {
  static const char empty[1];
  PyObject* mv = PyMemoryView_FromMemory((char*)(ptr ? ptr : empty), ptr ? (Py_ssize_t)nbytes : 0,
                                         PyBUF_READ);
  if (!mv) return NULL;
  PyObject* flat = PyObject_CallMethod(rillpy_numpy(), "frombuffer", "Os", mv, np_dtype_name(dtype));
  Py_DECREF(mv);
  if (!flat) return NULL;
  PyObject* arr = PyObject_CallMethod(flat, "reshape", "O", shape);
  Py_DECREF(flat);
  if (arr && dtype == RILL_BFLOAT16) { /* the 16 bits are the high half of a float32 */
    PyObject* wide = PyObject_CallMethod(arr, "astype", "s", "uint32");
    Py_DECREF(arr);
    if (!wide) return NULL;
    PyObject* sixteen = PyLong_FromLong(16);
    PyObject* shifted = sixteen ? PyNumber_Lshift(wide, sixteen) : NULL;
    Py_XDECREF(sixteen);
    Py_DECREF(wide);
    if (!shifted) return NULL;
    arr = PyObject_CallMethod(shifted, "view", "s", "float32");
    Py_DECREF(shifted);
  }
  return arr;
}

/* The Python value of an input array for a callable: a numpy array [n, ...] (masked when it
 * has nulls) for fixed-shape numeric cells, else a list of str / bytes / numpy arrays with
 * None for nulls. Fixed-shape arrays are zero-copy views valid during the call. */
static PyObject* input_value(const rill_array_t* a) {
  if (a->device.type == RILL_DEVICE_CUDA) {
    PyErr_SetString(PyExc_RuntimeError, "the input array lives on a CUDA device; Python callables take host arrays");
    return NULL;
  }
  int64_t n = a->length;
  const rill_type_t* t = &a->type;
  if (!is_var_type(t)) {
    PyObject* shape = rillpy_shape_tuple(t->ndim, t->shape, n, 1);
    if (!shape) return NULL;
    PyObject* arr = np_view(a->data, n * rill_type_cell_bytes(t), t->dtype, shape);
    if (!arr || a->null_count == 0 || !a->validity) {
      Py_DECREF(shape);
      return arr;
    }
    /* per-cell null flags broadcast over the cell's elements */
    PyObject* flags = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)n);
    if (!flags) goto fail_masked;
    char* f = PyBytes_AS_STRING(flags);
    for (int64_t i = 0; i < n; i++) f[i] = !rill_array_is_valid(a, i);
    PyObject* m1 = PyObject_CallMethod(rillpy_numpy(), "frombuffer", "Os", flags, "bool");
    Py_DECREF(flags);
    if (!m1) goto fail_masked;
    int64_t ones[RILL_MAX_NDIM];
    for (int i = 0; i < t->ndim; i++) ones[i] = 1;
    PyObject* mshape = rillpy_shape_tuple(t->ndim, ones, n, 1);
    PyObject* m2 = mshape ? PyObject_CallMethod(m1, "reshape", "O", mshape) : NULL;
    Py_XDECREF(mshape);
    Py_DECREF(m1);
    PyObject* mask = m2 ? PyObject_CallMethod(rillpy_numpy(), "broadcast_to", "OO", m2, shape) : NULL;
    Py_XDECREF(m2);
    if (!mask) goto fail_masked;
    PyObject* ma = rillpy_numpy_ma() ? PyObject_CallMethod(rillpy_numpy_ma(), "MaskedArray", "OO", arr, mask) : NULL;
    Py_DECREF(mask);
    Py_DECREF(arr);
    Py_DECREF(shape);
    return ma;
  fail_masked:
    Py_DECREF(arr);
    Py_DECREF(shape);
    return NULL;
  }
  PyObject* list = PyList_New((Py_ssize_t)n);
  if (!list) return NULL;
  for (int64_t i = 0; i < n; i++) {
    PyObject* v;
    if (!rill_array_is_valid(a, i)) {
      v = Py_NewRef(Py_None);
    } else {
      int64_t nb = 0;
      const void* p = rill_array_cell(a, i, &nb);
      if (t->dtype == RILL_STRING) {
        v = PyUnicode_DecodeUTF8(p ? p : "", (Py_ssize_t)nb, "strict");
      } else if (t->dtype == RILL_BINARY) {
        v = PyBytes_FromStringAndSize(p, (Py_ssize_t)nb);
      } else {
        int64_t cs[RILL_MAX_NDIM];
        int nd = rill_array_cell_shape(a, i, cs);
        PyObject* sh = PyTuple_New(nd);
        if (!sh) {
          Py_DECREF(list);
          return NULL;
        }
        for (int d = 0; d < nd; d++) PyTuple_SET_ITEM(sh, d, PyLong_FromLongLong(cs[d]));
        v = np_view(p, nb, t->dtype, sh);
        Py_DECREF(sh);
      }
    }
    if (!v) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, v);
  }
  return list;
}

/* ================================================================ exception registry */

#define PYEXC_KEEP 1024

static PyObject* pyexc_registry; /* dict token -> exception, insertion-ordered */
static long long pyexc_next = 1;

/* Stores the exception object and its traceback under a new token; returns the token or 0
 * (none stored). */
static long long pyexc_store(PyObject* exc, PyObject* tb) {
  if (!pyexc_registry) {
    pyexc_registry = PyDict_New();
    if (!pyexc_registry) return 0;
  }
  long long tok = pyexc_next++;
  PyObject* key = PyLong_FromLongLong(tok);
  if (!key) return 0;
  PyObject* entry = Py_BuildValue("(OO)", exc, tb ? tb : Py_None);
  int rc = entry ? PyDict_SetItem(pyexc_registry, key, entry) : -1;
  Py_XDECREF(entry);
  Py_DECREF(key);
  if (rc < 0) return 0;
  while (PyDict_Size(pyexc_registry) > PYEXC_KEEP) { /* drop the oldest */
    Py_ssize_t pos = 0;
    PyObject *k, *v;
    if (!PyDict_Next(pyexc_registry, &pos, &k, &v)) break;
    Py_INCREF(k);
    PyDict_DelItem(pyexc_registry, k);
    Py_DECREF(k);
  }
  return tok;
}

/* The exception stored under the token in `msg` (new reference or NULL), with its original
 * traceback restored, and the message without the token in `clean`. The entry stays: every
 * row of a failed call reports the same exception. */
static PyObject* pyexc_take(const char* msg, char* clean, size_t size) {
  snprintf(clean, size, "%s", msg);
  char* at = strstr(clean, " [pyexc:");
  if (!at) return NULL;
  long long tok = strtoll(at + 8, NULL, 10);
  char* end = strchr(at + 1, ']');
  if (end) memmove(at, end + 1, strlen(end + 1) + 1);
  if (!pyexc_registry || tok <= 0) return NULL;
  PyObject* key = PyLong_FromLongLong(tok);
  if (!key) {
    PyErr_Clear();
    return NULL;
  }
  PyObject* entry = PyDict_GetItemWithError(pyexc_registry, key);
  PyObject* exc = NULL;
  if (entry && PyTuple_Check(entry) && PyTuple_GET_SIZE(entry) == 2) {
    exc = Py_NewRef(PyTuple_GET_ITEM(entry, 0));
    PyObject* tb = PyTuple_GET_ITEM(entry, 1);
    PyException_SetTraceback(exc, tb);
  }
  PyErr_Clear();
  Py_DECREF(key);
  return exc;
}

static PyObject* pyexc_note_prefix(void) {
  static PyObject* prefix;
  if (!prefix) prefix = PyUnicode_InternFromString("rill: ");
  return prefix;
}

PyObject* rillpy_raise_row_error(int rc, const rill_error_t* err, const rill_df_t* df) {
  rill_error_t e = *err;
  if (e.code == 0) e.code = rc;
  PyObject* exc = pyexc_take(err->message, e.message, sizeof e.message);
  const rill_field_t* f = (df && e.column >= 0) ? rill_df_field(df, e.column) : NULL;
  const char* col = f ? f->name : NULL;
  if (!exc) return rillpy_raise_column(rc, &e, col);
  /* rill's message names the row and column already ("row R, column 'c': ...") */
  PyObject* note = strncmp(e.message, "row ", 4) == 0 || strncmp(e.message, "batch ", 6) == 0
                       ? PyUnicode_FromFormat("rill: %s", e.message)
                       : PyUnicode_FromFormat("rill: row %lld, column '%s': %s", (long long)e.row,
                                              col ? col : "?", e.message);
  /* one rill note at a time: the same exception may be reported for several rows */
  PyObject* notes = PyObject_GetAttrString(exc, "__notes__");
  if (notes && PyList_Check(notes)) {
    for (Py_ssize_t i = PyList_GET_SIZE(notes) - 1; i >= 0; i--) {
      PyObject* it = PyList_GET_ITEM(notes, i);
      if (PyUnicode_Check(it) && PyUnicode_Tailmatch(it, pyexc_note_prefix(), 0, 6, -1) == 1)
        PySequence_DelItem(notes, i);
    }
  }
  Py_XDECREF(notes);
  PyErr_Clear();
  if (note) {
    PyObject* r = PyObject_CallMethod(exc, "add_note", "O", note);
    Py_XDECREF(r);
    Py_DECREF(note);
  }
  PyErr_Clear();
  PyObject* row = PyLong_FromLongLong((long long)e.row);
  if (row) {
    PyObject_SetAttrString(exc, "rill_row", row);
    Py_DECREF(row);
  }
  PyObject* cname = col ? PyUnicode_FromString(col) : Py_NewRef(Py_None);
  if (cname) {
    PyObject_SetAttrString(exc, "rill_column", cname);
    Py_DECREF(cname);
  }
  PyErr_Clear();
  PyErr_SetObject((PyObject*)Py_TYPE(exc), exc);
  Py_DECREF(exc);
  return NULL;
}

/* ================================================================ Python stage functions */

typedef struct pystage {
  PyObject* fn;
  char* name;               /* the column's name, for messages */
  const char* what;         /* "map" or "reduce" */
  rill_type_t type;
  int nullable;
  rill_on_error_t on_error;
} pystage_t;

void rillpy_stage_free(void* p) {
  pystage_t* c = p;
  if (!c) return;
  if (c->fn && !rillpy_is_finalizing()) {
    PyGILState_STATE g = PyGILState_Ensure();
    Py_DECREF(c->fn);
    PyGILState_Release(g);
  }
  free(c->name);
  free(c);
}

/* A failed call: the pending Python exception becomes a stage error (kept in the registry
 * under RAISE, so iteration re-raises the same object). */
static int stage_pyerror(pystage_t* c, rill_error_t* err) {
  PyObject *type, *value, *tb;
  PyErr_Fetch(&type, &value, &tb);
  PyErr_NormalizeException(&type, &value, &tb);
  if (value && tb) PyException_SetTraceback(value, tb);
  const char* tname = type ? ((PyTypeObject*)type)->tp_name : "exception";
  const char* dot = strrchr(tname, '.');
  if (dot) tname = dot + 1;
  PyObject* s = value ? PyObject_Str(value) : NULL;
  const char* text = s ? PyUnicode_AsUTF8(s) : NULL;
  if (!text) {
    PyErr_Clear();
    text = "";
  }
  long long tok = (c->on_error == RILL_ON_ERROR_RAISE && value) ? pyexc_store(value, tb) : 0;
  PyErr_Clear();
  if (tok > 0)
    rill_error_set(err, RILL_ESTAGE, "python %s '%s' raised %s: %.200s [pyexc:%lld]", c->what, c->name, tname,
                   text, tok);
  else
    rill_error_set(err, RILL_ESTAGE, "python %s '%s' raised %s: %.200s", c->what, c->name, tname, text);
  Py_XDECREF(s);
  Py_XDECREF(type);
  Py_XDECREF(value);
  Py_XDECREF(tb);
  return RILL_ESTAGE;
}

/* Fixed-shape result (n cells of c->type) into `out`. */
static int result_fixed(pystage_t* c, PyObject* res, int64_t n, rill_array_t* out, rill_exec_t* exec,
                        rill_error_t* err) {
  const rill_type_t* t = &c->type;
  PyObject *data = NULL, *maskobj = NULL, *conv = NULL, *shape = NULL, *tdtype = NULL;
  char* nulls = NULL;
  int rc = RILL_ESTAGE;
  Py_buffer view = {0}, mview = {0};
  int have_view = 0, have_mview = 0;

  if (PyList_Check(res) || PyTuple_Check(res)) {
    Py_ssize_t len = PySequence_Fast_GET_SIZE(res);
    if (len != n) {
      rill_error_set(err, RILL_ESTAGE, "python %s '%s' returned %zd values for %lld rows", c->what, c->name, len,
                     (long long)n);
      goto done;
    }
    PyObject* filled = PyList_New(len);
    if (!filled) goto pyfail;
    PyObject* zero = NULL;
    for (Py_ssize_t i = 0; i < len; i++) {
      PyObject* v = PySequence_Fast_GET_ITEM(res, i);
      if (v == Py_None) {
        if (!c->nullable) {
          Py_DECREF(filled);
          Py_XDECREF(zero);
          rill_error_set(err, RILL_ESTAGE,
                         "python %s '%s' returned None for cell %zd of a column that is not nullable "
                         "(pass nullable=True)", c->what, c->name, i);
          goto done;
        }
        if (!nulls && !(nulls = calloc((size_t)n, 1))) {
          Py_DECREF(filled);
          Py_XDECREF(zero);
          rill_error_set(err, RILL_ENOMEM, "out of memory");
          rc = RILL_ENOMEM;
          goto done;
        }
        nulls[i] = 1;
        if (!zero) {
          PyObject* cs = rillpy_type_shape(t);
          zero = cs ? PyObject_CallMethod(rillpy_numpy(), "zeros", "Os", cs, np_dtype_name(t->dtype)) : NULL;
          Py_XDECREF(cs);
          if (!zero) {
            Py_DECREF(filled);
            goto pyfail;
          }
        }
        v = zero;
      }
      PyList_SET_ITEM(filled, i, Py_NewRef(v));
    }
    Py_XDECREF(zero);
    data = PyObject_CallMethod(rillpy_numpy(), "asarray", "O", filled);
    Py_DECREF(filled);
    if (!data) goto pyfail;
  } else {
    PyObject* m = NULL;
    int masked = rillpy_split_masked(res, &data, &m);
    if (masked < 0) goto pyfail;
    if (masked) {
      /* a cell is null when any of its elements is masked */
      PyObject* mr = PyObject_CallMethod(m, "reshape", "(Li)", (long long)n, -1);
      Py_DECREF(m);
      if (!mr) {
        PyErr_Clear();
        maskobj = NULL; /* the shape check below reports it */
      } else {
        maskobj = PyObject_CallMethod(mr, "any", "i", 1);
        Py_DECREF(mr);
        if (!maskobj) goto pyfail;
      }
    } else {
      data = PyObject_CallMethod(rillpy_numpy(), "asarray", "O", res);
      if (!data) goto pyfail;
    }
  }
  /* shape */
  shape = rillpy_shape_tuple(t->ndim, t->shape, n, 1);
  if (!shape) goto pyfail;
  PyObject* got = PyObject_GetAttrString(data, "shape");
  if (!got) goto pyfail;
  int same = PyObject_RichCompareBool(got, shape, Py_EQ);
  if (same != 1) {
    PyObject* gs = PyObject_Repr(got);
    PyObject* es = PyObject_Repr(shape);
    char tb[96];
    rill_error_set(err, RILL_ESTAGE, "python %s '%s' returned an array of shape %s for %lld rows of %s (expected %s)",
                   c->what, c->name, gs ? PyUnicode_AsUTF8(gs) : "?", (long long)n,
                   rill_type_format(t, tb, sizeof tb), es ? PyUnicode_AsUTF8(es) : "?");
    Py_XDECREF(gs);
    Py_XDECREF(es);
    Py_DECREF(got);
    PyErr_Clear();
    goto done;
  }
  Py_DECREF(got);
  /* dtype */
  PyObject* dt = PyObject_GetAttrString(data, "dtype");
  if (!dt) goto pyfail;
  PyObject* kind = PyObject_GetAttrString(dt, "kind");
  const char* k = kind ? PyUnicode_AsUTF8(kind) : NULL;
  if (!k) {
    Py_DECREF(dt);
    Py_XDECREF(kind);
    goto pyfail;
  }
  int ok;
  if (t->dtype == RILL_TIMESTAMP_US) {
    ok = (k[0] == 'M' || k[0] == 'i' || k[0] == 'u');
    tdtype = PyUnicode_FromString(k[0] == 'M' ? "datetime64[us]" : "int64");
  } else {
    tdtype = PyUnicode_FromString(np_dtype_name(t->dtype));
    PyObject* r = tdtype ? PyObject_CallMethod(rillpy_numpy(), "can_cast", "OOs", dt, tdtype, "same_kind") : NULL;
    ok = r ? PyObject_IsTrue(r) : -1;
    Py_XDECREF(r);
  }
  if (ok < 0 || !tdtype) {
    Py_DECREF(dt);
    Py_DECREF(kind);
    goto pyfail;
  }
  if (!ok) {
    PyObject* ds = PyObject_Str(dt);
    rill_error_set(err, RILL_ESTAGE,
                   "python %s '%s' returned dtype %s, which does not cast to the column's %s "
                   "(numpy same_kind rule)", c->what, c->name, ds ? PyUnicode_AsUTF8(ds) : "?",
                   rill_dtype_name(t->dtype));
    Py_XDECREF(ds);
    Py_DECREF(dt);
    Py_DECREF(kind);
    PyErr_Clear();
    goto done;
  }
  Py_DECREF(dt);
  Py_DECREF(kind);
  conv = PyObject_CallMethod(rillpy_numpy(), "ascontiguousarray", "OO", data, tdtype);
  if (!conv) goto pyfail;
  if (t->dtype == RILL_TIMESTAMP_US) {
    PyObject* v = PyObject_CallMethod(conv, "view", "s", "int64");
    Py_DECREF(conv);
    conv = v;
    if (!conv) goto pyfail;
  }
  if (PyObject_GetBuffer(conv, &view, PyBUF_C_CONTIGUOUS) < 0) goto pyfail;
  have_view = 1;
  if (maskobj) {
    PyObject* mc = PyObject_CallMethod(rillpy_numpy(), "ascontiguousarray", "Os", maskobj, "bool");
    if (!mc) goto pyfail;
    Py_DECREF(maskobj);
    maskobj = mc;
    if (PyObject_GetBuffer(maskobj, &mview, PyBUF_C_CONTIGUOUS) < 0) goto pyfail;
    have_mview = 1;
    if (mview.len != n) {
      rill_error_set(err, RILL_ESTAGE, "python %s '%s': mask of %zd cells for %lld rows", c->what, c->name,
                     mview.len, (long long)n);
      goto done;
    }
    const char* mb = mview.buf;
    for (int64_t i = 0; i < n; i++) {
      if (!mb[i]) continue;
      if (!c->nullable) {
        rill_error_set(err, RILL_ESTAGE,
                       "python %s '%s' returned a masked (null) cell %lld for a column that is not nullable "
                       "(pass nullable=True)", c->what, c->name, (long long)i);
        goto done;
      }
      if (!nulls && !(nulls = calloc((size_t)n, 1))) {
        rc = rill_error_set(err, RILL_ENOMEM, "out of memory");
        goto done;
      }
      nulls[i] = 1;
    }
  }
  rc = rill_exec_alloc(exec, out, *t, n);
  if (rc != RILL_OK) {
    rill_error_set(err, rc, "python %s '%s': could not allocate the output (%s)", c->what, c->name,
                   rill_strerror(rc));
    goto done;
  }
  if (view.len > 0) memcpy(out->data, view.buf, (size_t)view.len);
  for (int64_t i = 0; nulls && i < n; i++)
    if (nulls[i] && (rc = rill_array_set_null(out, i)) != RILL_OK) {
      rill_error_set(err, rc, "python %s '%s': could not mark a null cell", c->what, c->name);
      goto done;
    }
  rc = RILL_OK;
  goto done;
pyfail:
  rc = stage_pyerror(c, err);
done:
  if (have_view) PyBuffer_Release(&view);
  if (have_mview) PyBuffer_Release(&mview);
  Py_XDECREF(data);
  Py_XDECREF(maskobj);
  Py_XDECREF(conv);
  Py_XDECREF(shape);
  Py_XDECREF(tdtype);
  free(nulls);
  return rc;
}

/* Variable cells (string, binary, variable-shape tensors) into `out`, cell by cell. */
static int result_var(pystage_t* c, PyObject* res, int64_t n, rill_array_t* out, rill_exec_t* exec,
                      rill_error_t* err) {
  const rill_type_t* t = &c->type;
  PyObject* seq = PySequence_Fast(res, "");
  if (!seq) {
    PyErr_Clear();
    return rill_error_set(err, RILL_ESTAGE, "python %s '%s' returned %s; expected a list of %lld values",
                          c->what, c->name, Py_TYPE(res)->tp_name, (long long)n);
  }
  Py_ssize_t len = PySequence_Fast_GET_SIZE(seq);
  if (len != n) {
    Py_DECREF(seq);
    return rill_error_set(err, RILL_ESTAGE, "python %s '%s' returned %zd values for %lld rows", c->what, c->name,
                          len, (long long)n);
  }
  int rc = rill_exec_alloc(exec, out, *t, n);
  if (rc != RILL_OK) {
    Py_DECREF(seq);
    return rill_error_set(err, rc, "python %s '%s': could not allocate the output (%s)", c->what, c->name,
                          rill_strerror(rc));
  }
  int64_t zeros[RILL_MAX_NDIM] = {0};
  for (Py_ssize_t i = 0; i < len; i++) {
    PyObject* v = PySequence_Fast_GET_ITEM(seq, i);
    if (v == Py_None) {
      if (!c->nullable) {
        rc = rill_error_set(err, RILL_ESTAGE,
                            "python %s '%s' returned None for cell %zd of a column that is not nullable "
                            "(pass nullable=True)", c->what, c->name, i);
        goto fail;
      }
      if ((rc = rill_array_set_var(out, i, NULL, 0, zeros)) != RILL_OK ||
          (rc = rill_array_set_null(out, i)) != RILL_OK) {
        rill_error_set(err, rc, "python %s '%s': out of memory", c->what, c->name);
        goto fail;
      }
      continue;
    }
    if (t->dtype == RILL_STRING) {
      Py_ssize_t sz;
      const char* s = PyUnicode_Check(v) ? PyUnicode_AsUTF8AndSize(v, &sz) : NULL;
      if (!s) {
        PyErr_Clear();
        rc = rill_error_set(err, RILL_ESTAGE, "python %s '%s' returned %s for cell %zd of a string column "
                            "(expected str or None)", c->what, c->name, Py_TYPE(v)->tp_name, i);
        goto fail;
      }
      rc = rill_array_set_var(out, i, s, sz, NULL);
    } else if (t->dtype == RILL_BINARY) {
      Py_buffer b;
      if (PyUnicode_Check(v) || PyObject_GetBuffer(v, &b, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        rc = rill_error_set(err, RILL_ESTAGE, "python %s '%s' returned %s for cell %zd of a binary column "
                            "(expected bytes or None)", c->what, c->name, Py_TYPE(v)->tp_name, i);
        goto fail;
      }
      rc = rill_array_set_var(out, i, b.buf, b.len, NULL);
      PyBuffer_Release(&b);
    } else {
      PyObject* tname = PyUnicode_FromString(np_dtype_name(t->dtype));
      PyObject* arr = PyObject_CallMethod(rillpy_numpy(), "asarray", "O", v);
      PyObject* dt = arr ? PyObject_GetAttrString(arr, "dtype") : NULL;
      PyObject* can = (dt && tname) ? PyObject_CallMethod(rillpy_numpy(), "can_cast", "OOs", dt, tname, "same_kind") : NULL;
      int ok = can ? PyObject_IsTrue(can) : 0;
      PyObject* conv = ok == 1 ? PyObject_CallMethod(rillpy_numpy(), "ascontiguousarray", "OO", arr, tname) : NULL;
      Py_XDECREF(tname);
      Py_XDECREF(arr);
      Py_XDECREF(dt);
      Py_XDECREF(can);
      Py_buffer b;
      if (!conv || PyObject_GetBuffer(conv, &b, PyBUF_C_CONTIGUOUS | PyBUF_ND) < 0) {
        Py_XDECREF(conv);
        PyErr_Clear();
        rc = rill_error_set(err, RILL_ESTAGE, "python %s '%s' returned a value for cell %zd that is not an array "
                            "castable to %s", c->what, c->name, i, rill_dtype_name(t->dtype));
        goto fail;
      }
      int shape_ok = b.ndim == t->ndim;
      int64_t cs[RILL_MAX_NDIM];
      for (int d = 0; shape_ok && d < t->ndim; d++) {
        cs[d] = b.shape[d];
        if (t->shape[d] >= 0 && t->shape[d] != cs[d]) shape_ok = 0;
      }
      if (!shape_ok) {
        char tb[96];
        PyBuffer_Release(&b);
        Py_DECREF(conv);
        rc = rill_error_set(err, RILL_ESTAGE, "python %s '%s' returned a cell %zd whose shape does not fit %s",
                            c->what, c->name, i, rill_type_format(t, tb, sizeof tb));
        goto fail;
      }
      rc = rill_array_set_var(out, i, b.buf, b.len, cs);
      PyBuffer_Release(&b);
      Py_DECREF(conv);
    }
    if (rc != RILL_OK) {
      rill_error_set(err, rc, "python %s '%s': could not store cell %zd (%s)", c->what, c->name, i,
                     rill_strerror(rc));
      goto fail;
    }
  }
  Py_DECREF(seq);
  return RILL_OK;
fail:
  Py_DECREF(seq);
  return rc < 0 ? rc : RILL_ESTAGE;
}

static int result_store(pystage_t* c, PyObject* res, int64_t n, rill_array_t* out, rill_exec_t* exec,
                        rill_error_t* err) {
  return is_var_type(&c->type) ? result_var(c, res, n, out, exec, err) : result_fixed(c, res, n, out, exec, err);
}

int rillpy_map_fn(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* exec, void* ctx,
                  rill_error_t* err) {
  pystage_t* c = ctx;
  PyGILState_STATE g = PyGILState_Ensure();
  int rc;
  int64_t n = nin > 0 ? in[0]->length : 0;
  PyObject* args = PyTuple_New(nin);
  if (!args) {
    rc = stage_pyerror(c, err);
    goto out;
  }
  for (int i = 0; i < nin; i++) {
    PyObject* v = input_value(in[i]);
    if (!v) {
      Py_DECREF(args);
      rc = stage_pyerror(c, err);
      goto out;
    }
    PyTuple_SET_ITEM(args, i, v);
  }
  PyObject* res = PyObject_Call(c->fn, args, NULL);
  Py_DECREF(args);
  if (!res) {
    rc = stage_pyerror(c, err);
    goto out;
  }
  rc = result_store(c, res, n, out, exec, err);
  Py_DECREF(res);
out:
  PyGILState_Release(g);
  return rc;
}

int rillpy_reduce_fn(const rill_array_t* group, rill_array_t* out, rill_exec_t* exec, void* ctx,
                     rill_error_t* err) {
  pystage_t* c = ctx;
  PyGILState_STATE g = PyGILState_Ensure();
  int rc;
  PyObject* v = input_value(group);
  PyObject* res = v ? PyObject_CallOneArg(c->fn, v) : NULL;
  Py_XDECREF(v);
  if (!res) {
    rc = stage_pyerror(c, err);
  } else {
    PyObject* one = PyList_New(1);
    if (!one) {
      Py_DECREF(res);
      rc = stage_pyerror(c, err);
    } else {
      PyList_SET_ITEM(one, 0, res);
      rc = result_store(c, one, 1, out, exec, err);
      Py_DECREF(one);
    }
  }
  PyGILState_Release(g);
  return rc;
}

void* rillpy_stage_new(PyObject* fn, const char* name, const char* what, rill_type_t type, int nullable,
                       rill_on_error_t on_error) {
  pystage_t* c = calloc(1, sizeof *c);
  char* nm = strdup(name);
  if (!c || !nm) {
    free(c);
    free(nm);
    PyErr_NoMemory();
    return NULL;
  }
  c->fn = Py_NewRef(fn);
  c->name = nm;
  c->what = what;
  c->type = type;
  c->nullable = nullable || on_error == RILL_ON_ERROR_NULL;
  c->on_error = on_error;
  return c;
}

