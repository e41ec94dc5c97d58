/* rill.Array: a Python view of one rill_array_t (holds a reference on it), with its values
 * as Python objects and numpy arrays, and its exports (Arrow PyCapsule interface, DLPack,
 * __cuda_array_interface__, the dataframe interchange protocol). Also the capsule
 * destructors of every export the extension makes. */
#include "rillpy.h"

#include <string.h>

/* ---------------------------------------------------------------- capsules */

/* Releases an unconsumed capsule payload. Each takes the GIL-free path: the release callbacks
 * may free large buffers (callbacks that need Python take the GIL themselves, as they must on
 * rill's worker threads). Arrow payloads are PyMem_RawMalloc'ed and freed here; DLPack tensors
 * are allocated by rill and freed by their deleter. */
static void free_schema(void* p) {
  struct ArrowSchema* s = p;
  if (s->release != NULL) s->release(s);
  PyMem_RawFree(s);
}

static void free_array(void* p) {
  struct ArrowArray* a = p;
  if (a->release != NULL) a->release(a);
  PyMem_RawFree(a);
}

static void free_device_array(void* p) {
  struct ArrowDeviceArray* a = p;
  if (a->array.release != NULL) a->array.release(&a->array);
  PyMem_RawFree(a);
}

static void free_stream(void* p) {
  struct ArrowArrayStream* s = p;
  if (s->release != NULL) s->release(s);
  PyMem_RawFree(s);
}

static void free_dltensor(void* p) {
  DLManagedTensor* m = p;
  if (m->deleter != NULL) m->deleter(m);
}

static void free_dltensor_versioned(void* p) {
  DLManagedTensorVersioned* m = p;
  if (m->deleter != NULL) m->deleter(m);
}

/* Capsule destructors: a capsule a consumer took over was renamed ("used_...") and is left
 * alone; an unconsumed payload is released by `release`, without the GIL. They may run while
 * an exception is pending (a consumer unwinding), so the error indicator is saved and restored
 * around them. */
static void destroy_capsule(PyObject* cap, const char* name, void (*release)(void*)) {
  PyObject *t, *v, *tb;
  PyErr_Fetch(&t, &v, &tb);
  if (PyCapsule_IsValid(cap, name)) {
    void* p = PyCapsule_GetPointer(cap, name);
    Py_BEGIN_ALLOW_THREADS
    release(p);
    Py_END_ALLOW_THREADS
  }
  PyErr_Restore(t, v, tb);
}

static void destroy_schema(PyObject* cap) { destroy_capsule(cap, "arrow_schema", free_schema); }
static void destroy_array(PyObject* cap) { destroy_capsule(cap, "arrow_array", free_array); }
static void destroy_stream(PyObject* cap) { destroy_capsule(cap, "arrow_array_stream", free_stream); }
static void destroy_dltensor(PyObject* cap) { destroy_capsule(cap, "dltensor", free_dltensor); }
static void destroy_device_array(PyObject* cap) {
  destroy_capsule(cap, "arrow_device_array", free_device_array);
}
static void destroy_dltensor_versioned(PyObject* cap) {
  destroy_capsule(cap, "dltensor_versioned", free_dltensor_versioned);
}

/* A capsule owning `payload`; when it cannot be made the payload is released and freed. */
static PyObject* capsule_new(void* payload, const char* name, PyCapsule_Destructor destroy,
                             void (*release)(void*)) {
  PyObject* cap = PyCapsule_New(payload, name, destroy);
  if (cap == NULL) release(payload);
  return cap;
}

PyObject* rillpy_capsule_schema(struct ArrowSchema* s) {
  return capsule_new(s, "arrow_schema", destroy_schema, free_schema);
}

PyObject* rillpy_capsule_array(struct ArrowArray* a) {
  return capsule_new(a, "arrow_array", destroy_array, free_array);
}

PyObject* rillpy_capsule_stream(struct ArrowArrayStream* s) {
  return capsule_new(s, "arrow_array_stream", destroy_stream, free_stream);
}

/* ---------------------------------------------------------------- helpers */

#define SELF ((RillArray*)self)

static int on_cuda(const rill_array_t* a) { return a->device.type == RILL_DEVICE_CUDA; }

static int device_type(const rill_array_t* a) { return rillpy_device_type(a->device); }

/* The numpy type string of an element dtype (NULL: none, e.g. BFLOAT16 or STRING). */
static const char* numpy_typestr(rill_dtype_t d) {
  switch (d) {
    case RILL_BOOL: return "|b1";
    case RILL_INT8: return "|i1";
    case RILL_INT16: return "<i2";
    case RILL_INT32: return "<i4";
    case RILL_INT64: return "<i8";
    case RILL_UINT8: return "|u1";
    case RILL_UINT16: return "<u2";
    case RILL_UINT32: return "<u4";
    case RILL_UINT64: return "<u8";
    case RILL_FLOAT16: return "<f2";
    case RILL_FLOAT32: return "<f4";
    case RILL_FLOAT64: return "<f8";
    case RILL_TIMESTAMP_US: return "<M8[us]";
    default: return NULL;
  }
}

static int is_variable(const rill_array_t* a) {
  if (a->type.dtype == RILL_STRING || a->type.dtype == RILL_BINARY) return 1;
  for (int i = 0; i < a->type.ndim; i++)
    if (a->type.shape[i] < 0) return 1;
  return 0;
}

/* The array, readable from the host: a new reference (the array itself after waiting for its
 * event, or a host copy). NULL with an exception for device memory rill cannot copy. */
static const rill_array_t* host_array(const rill_array_t* a) {
  rill_error_t err;
  rill_error_clear(&err);
  int rc = RILL_OK;
  rill_array_t* copy = NULL;
  Py_BEGIN_ALLOW_THREADS
  rc = rill_array_sync(a, &err);
  if (rc == RILL_OK && on_cuda(a)) rc = rill_array_copy(a, &copy, &err);
  Py_END_ALLOW_THREADS
  if (rc < 0) {
    rillpy_raise(rc, &err);
    return NULL;
  }
  return copy ? copy : rill_array_retain(a);
}

/* A last release that may take long enough to let other Python threads run meanwhile: one
 * that may free a large buffer (its pages unmapped) or device memory. A small array (a row's
 * one-cell view, a batch of a few kilobytes) is released with the GIL held: giving it up and
 * taking it back costs more (two lock round trips a row, some 50 ns). */
enum { RELEASE_WITHOUT_GIL_BYTES = 1 << 20 };

void rillpy_array_release(const rill_array_t* a) {
  if (a == NULL) return;
  if (rill_array_refcount(a) == 1 &&
      (a->data_size >= RELEASE_WITHOUT_GIL_BYTES || (a->device.type != 0 && a->device.type != RILL_DEVICE_CPU))) {
    Py_BEGIN_ALLOW_THREADS
    rill_array_release(a);
    Py_END_ALLOW_THREADS
  } else {
    rill_array_release(a);
  }
}

/* numpy.empty(shape, dtype) */
static PyObject* np_empty(PyObject* shape, const char* dtype) {
  PyObject* np = rillpy_numpy();
  return np ? PyObject_CallMethod(np, "empty", "Os", shape, dtype) : NULL;
}

/* Copies `n` elements of dtype `d` into a writable C-contiguous numpy array `arr`
 * (BFLOAT16 elements become float32). */
static int fill_numpy(PyObject* arr, rill_dtype_t d, const void* src, int64_t n) {
  Py_buffer view;
  if (PyObject_GetBuffer(arr, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) return -1;
  if (d == RILL_BFLOAT16) {
    const uint8_t* s = src;
    float* o = view.buf;
    for (int64_t i = 0; i < n; i++) {
      uint16_t bits;
      memcpy(&bits, s + 2 * i, 2);
      uint32_t w = (uint32_t)bits << 16;
      memcpy(&o[i], &w, 4);
    }
  } else if (n > 0) {
    memcpy(view.buf, src, (size_t)n * rill_dtype_size(d));
  }
  PyBuffer_Release(&view);
  return 0;
}

static const char* element_dtype(rill_dtype_t d) {
  return d == RILL_BFLOAT16 ? "float32" : numpy_typestr(d);
}

/* The Python value of a scalar element. */
static PyObject* scalar_value(rill_dtype_t d, const uint8_t* p) {
  switch (d) {
    case RILL_BOOL: return PyBool_FromLong(p[0] != 0);
    case RILL_INT8: return PyLong_FromLong((int8_t)p[0]);
    case RILL_UINT8: return PyLong_FromLong(p[0]);
    case RILL_INT16: { int16_t v; memcpy(&v, p, 2); return PyLong_FromLong(v); }
    case RILL_UINT16: { uint16_t v; memcpy(&v, p, 2); return PyLong_FromLong(v); }
    case RILL_INT32: { int32_t v; memcpy(&v, p, 4); return PyLong_FromLong(v); }
    case RILL_UINT32: { uint32_t v; memcpy(&v, p, 4); return PyLong_FromUnsignedLong(v); }
    case RILL_INT64: case RILL_TIMESTAMP_US: {
      int64_t v; memcpy(&v, p, 8); return PyLong_FromLongLong(v);
    }
    case RILL_UINT64: { uint64_t v; memcpy(&v, p, 8); return PyLong_FromUnsignedLongLong(v); }
    case RILL_FLOAT16: {
      double v = PyFloat_Unpack2((const char*)p, PY_LITTLE_ENDIAN);
      if (v == -1.0 && PyErr_Occurred()) return NULL;
      return PyFloat_FromDouble(v);
    }
    case RILL_BFLOAT16: {
      uint16_t bits; memcpy(&bits, p, 2);
      uint32_t w = (uint32_t)bits << 16; float f; memcpy(&f, &w, 4);
      return PyFloat_FromDouble(f);
    }
    case RILL_FLOAT32: { float v; memcpy(&v, p, 4); return PyFloat_FromDouble(v); }
    case RILL_FLOAT64: { double v; memcpy(&v, p, 8); return PyFloat_FromDouble(v); }
    default: break;
  }
  PyErr_Format(PyExc_TypeError, "no scalar value for dtype %s", rill_dtype_name(d));
  return NULL;
}

/* The Python value of cell i of a host array (bounds checked by the caller). */
static PyObject* cell_value(const rill_array_t* a, int64_t i) {
  if (!rill_array_is_valid(a, i)) Py_RETURN_NONE;
  int64_t nbytes = 0;
  const uint8_t* p = rill_array_cell(a, i, &nbytes);
  rill_dtype_t d = a->type.dtype;
  if (d == RILL_STRING)
    return PyUnicode_DecodeUTF8((const char*)p, (Py_ssize_t)nbytes, "surrogateescape");
  if (d == RILL_BINARY) return PyBytes_FromStringAndSize((const char*)p, (Py_ssize_t)nbytes);
  if (a->type.ndim == 0) return scalar_value(d, p);
  int64_t shape[RILL_MAX_NDIM];
  int ndim = rill_array_cell_shape(a, i, shape);
  PyObject* t = rillpy_shape_tuple(ndim, shape, 0, 0);
  if (t == NULL) return NULL;
  PyObject* out = np_empty(t, element_dtype(d));
  Py_DECREF(t);
  if (out == NULL) return NULL;
  size_t esize = rill_dtype_size(d);
  if (fill_numpy(out, d, p, esize ? nbytes / (int64_t)esize : 0) < 0) {
    Py_DECREF(out);
    return NULL;
  }
  return out;
}

static int64_t index_arg(const rill_array_t* a, Py_ssize_t i) {
  if (i < 0) i += (Py_ssize_t)a->length;
  if (i < 0 || i >= (Py_ssize_t)a->length) {
    PyErr_SetString(PyExc_IndexError, "rill.Array index out of range");
    return -1;
  }
  return i;
}

/* ---------------------------------------------------------------- object */

PyObject* rillpy_array_new(const rill_array_t* a, PyObject* name) {
  RillArray* self = PyObject_New(RillArray, &RillArray_Type);
  if (self == NULL) return NULL;
  self->a = rill_array_retain(a);
  self->name = name ? Py_NewRef(name) : NULL;
  self->weakrefs = NULL;
  return (PyObject*)self;
}

PyObject* rillpy_array_slice(const rill_array_t* a, int64_t start, int64_t n, PyObject* name) {
  rill_error_t err;
  rill_error_clear(&err);
  rill_array_t* s = NULL;
  int rc = rill_array_slice(a, start, n, &s, &err);
  if (rc < 0) return rillpy_raise(rc, &err);
  PyObject* out = rillpy_array_new(s, name);
  rill_array_release(s);
  return out;
}

static void array_dealloc(PyObject* self) {
  if (SELF->weakrefs != NULL) PyObject_ClearWeakRefs(self);
  rillpy_array_release(SELF->a);
  Py_XDECREF(SELF->name);
  PyObject_Free(self);
}

static Py_ssize_t array_len(PyObject* self) { return (Py_ssize_t)SELF->a->length; }

static PyObject* array_item(PyObject* self, Py_ssize_t i) {
  int64_t k = index_arg(SELF->a, i);
  if (k < 0) return NULL;
  const rill_array_t* h = host_array(SELF->a);
  if (h == NULL) return NULL;
  PyObject* v = cell_value(h, k);
  rillpy_array_release(h);
  return v;
}

static PyObject* array_subscript(PyObject* self, PyObject* key) {
  if (PySlice_Check(key)) {
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(key, &start, &stop, &step) < 0) return NULL;
    Py_ssize_t n = PySlice_AdjustIndices((Py_ssize_t)SELF->a->length, &start, &stop, step);
    if (step != 1) return rillpy_invalid("rill.Array slices take step 1 (got %zd)", step);
    return rillpy_array_slice(SELF->a, start, n, SELF->name);
  }
  Py_ssize_t i = PyNumber_AsSsize_t(key, PyExc_IndexError);
  if (i == -1 && PyErr_Occurred()) return NULL;
  return array_item(self, i);
}

static PyObject* array_repr(PyObject* self) {
  const rill_array_t* a = SELF->a;
  char buf[256];
  rill_type_format(&a->type, buf, sizeof buf);
  const char* dev = device_type(a) == RILL_DEVICE_CUDA ? "cuda"
                    : device_type(a) == RILL_DEVICE_CUDA_HOST ? "cuda_host" : "cpu";
  if (SELF->name != NULL)
    return PyUnicode_FromFormat("rill.Array(name=%R, type=%s, length=%lld, null_count=%lld, "
                                "device=%s:%d)", SELF->name, buf, (long long)a->length,
                                (long long)a->null_count, dev, a->device.id);
  return PyUnicode_FromFormat("rill.Array(type=%s, length=%lld, null_count=%lld, device=%s:%d)",
                              buf, (long long)a->length, (long long)a->null_count, dev,
                              a->device.id);
}

/* ---------------------------------------------------------------- properties */

static PyObject* get_dtype(PyObject* self, void* c) { return rillpy_dtype_name(SELF->a->type.dtype); }

static PyObject* get_shape(PyObject* self, void* c) {
  return rillpy_shape_tuple(SELF->a->type.ndim, SELF->a->type.shape, SELF->a->length, 1);
}

static PyObject* get_cell_shape(PyObject* self, void* c) { return rillpy_type_shape(&SELF->a->type); }

static PyObject* get_null_count(PyObject* self, void* c) {
  return PyLong_FromLongLong(SELF->a->null_count);
}

static PyObject* get_device(PyObject* self, void* c) {
  return Py_BuildValue("(ii)", device_type(SELF->a), SELF->a->device.id);
}

static PyObject* get_name(PyObject* self, void* c) {
  return Py_NewRef(SELF->name ? SELF->name : Py_None);
}

static PyObject* get_nbytes(PyObject* self, void* c) {
  const rill_array_t* a = SELF->a;
  int64_t n = a->data_size;
  if (a->validity != NULL) n += (a->length + 7) / 8;
  if (a->offsets != NULL) n += (a->length + 1) * (int64_t)sizeof(int64_t);
  if (a->shapes != NULL) n += a->length * a->type.ndim * (int64_t)sizeof(int64_t);
  return PyLong_FromLongLong(n);
}

static PyObject* get_refcount(PyObject* self, void* c) {
  return PyLong_FromLongLong(rill_array_refcount(SELF->a));
}

static PyObject* get_cuda_array_interface(PyObject* self, void* c) {
  const rill_array_t* a = SELF->a;
  if (!on_cuda(a))
    return PyErr_Format(PyExc_AttributeError,
                        "__cuda_array_interface__: the array is not in CUDA memory (device %d)",
                        device_type(a));
  const char* typestr = a->type.dtype == RILL_TIMESTAMP_US ? "<i8" : numpy_typestr(a->type.dtype);
  if (typestr == NULL || is_variable(a) || a->null_count > 0)
    return PyErr_Format(PyExc_AttributeError,
                        "__cuda_array_interface__: %s arrays%s have no CUDA array interface",
                        rill_dtype_name(a->type.dtype),
                        a->null_count > 0 ? " with null cells" : "");
  rill_error_t err;
  rill_error_clear(&err);
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = rill_array_sync(a, &err);
  Py_END_ALLOW_THREADS
  if (rc < 0) return rillpy_raise(rc, &err);
  PyObject* shape = rillpy_shape_tuple(a->type.ndim, a->type.shape, a->length, 1);
  if (shape == NULL) return NULL;
  return Py_BuildValue("{sNsss(NO)sOsi}", "shape", shape, "typestr", typestr, "data",
                       PyLong_FromVoidPtr(a->data), Py_True, "strides", Py_None, "version", 3);
}

/* ---------------------------------------------------------------- methods */

static PyObject* array_is_valid(PyObject* self, PyObject* arg) {
  Py_ssize_t i = PyNumber_AsSsize_t(arg, PyExc_IndexError);
  if (i == -1 && PyErr_Occurred()) return NULL;
  int64_t k = index_arg(SELF->a, i);
  if (k < 0) return NULL;
  return PyBool_FromLong(rill_array_is_valid(SELF->a, k));
}

static PyObject* array_to_pylist(PyObject* self, PyObject* unused) {
  const rill_array_t* h = host_array(SELF->a);
  if (h == NULL) return NULL;
  PyObject* list = PyList_New((Py_ssize_t)h->length);
  for (int64_t i = 0; list != NULL && i < h->length; i++) {
    PyObject* v = cell_value(h, i);
    if (v == NULL) {
      Py_CLEAR(list);
      break;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, v);
  }
  rillpy_array_release(h);
  return list;
}

/* numpy.from_dlpack(self), viewed as datetime64[us] for timestamps. */
static PyObject* numpy_zero_copy(PyObject* self) {
  PyObject* np = rillpy_numpy();
  if (np == NULL) return NULL;
  PyObject* out = PyObject_CallMethod(np, "from_dlpack", "O", self);
  if (out != NULL && SELF->a->type.dtype == RILL_TIMESTAMP_US) {
    PyObject* v = PyObject_CallMethod(out, "view", "s", "datetime64[us]");
    Py_DECREF(out);
    out = v;
  }
  return out;
}

/* A numpy object array of the cells' Python values. */
static PyObject* numpy_objects(const rill_array_t* h) {
  PyObject* n = Py_BuildValue("(L)", (long long)h->length);
  if (n == NULL) return NULL;
  PyObject* out = np_empty(n, "O");
  Py_DECREF(n);
  for (int64_t i = 0; out != NULL && i < h->length; i++) {
    PyObject* v = cell_value(h, i);
    if (v == NULL || PySequence_SetItem(out, (Py_ssize_t)i, v) < 0) Py_CLEAR(out);
    Py_XDECREF(v);
  }
  return out;
}

/* A copy of a fixed-shape host array: a numpy array, or a masked array when it has nulls. */
static PyObject* numpy_copy(const rill_array_t* h) {
  PyObject* shape = rillpy_shape_tuple(h->type.ndim, h->type.shape, h->length, 1);
  if (shape == NULL) return NULL;
  PyObject* data = np_empty(shape, element_dtype(h->type.dtype));
  int64_t cell = 1;
  for (int i = 0; i < h->type.ndim; i++) cell *= h->type.shape[i];
  if (data == NULL || fill_numpy(data, h->type.dtype, h->data, h->length * cell) < 0) {
    Py_XDECREF(data);
    Py_DECREF(shape);
    return NULL;
  }
  if (h->null_count == 0) {
    Py_DECREF(shape);
    return data;
  }
  PyObject* mask = np_empty(shape, "?");
  Py_DECREF(shape);
  Py_buffer view;
  if (mask == NULL || PyObject_GetBuffer(mask, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
    Py_XDECREF(mask);
    Py_DECREF(data);
    return NULL;
  }
  uint8_t* m = view.buf;
  for (int64_t i = 0; i < h->length; i++)
    memset(m + i * cell, !rill_array_is_valid(h, i), (size_t)cell);
  PyBuffer_Release(&view);
  PyObject* ma = rillpy_numpy_ma();
  PyObject* out = ma ? PyObject_CallMethod(ma, "masked_array", "OO", data, mask) : NULL;
  Py_DECREF(mask);
  Py_DECREF(data);
  return out;
}

/* Whether numpy can share the array's memory (through DLPack). */
static int numpy_can_share(const rill_array_t* a) {
  return !on_cuda(a) && !is_variable(a) && a->null_count == 0 && a->type.dtype != RILL_BFLOAT16;
}

static PyObject* array_to_numpy(PyObject* self, PyObject* unused) {
  if (numpy_can_share(SELF->a)) return numpy_zero_copy(self);
  const rill_array_t* h = host_array(SELF->a);
  if (h == NULL) return NULL;
  PyObject* out = is_variable(h) ? numpy_objects(h) : numpy_copy(h);
  rillpy_array_release(h);
  return out;
}

static PyObject* array_array(PyObject* self, PyObject* args, PyObject* kwargs) {
  static char* kwlist[] = {"dtype", "copy", NULL};
  PyObject* dtype = Py_None;
  PyObject* copy = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:__array__", kwlist, &dtype, &copy))
    return NULL;
  const rill_array_t* a = SELF->a;
  if (a->null_count > 0 && !is_variable(a)) {
    PyErr_Format(PyExc_ValueError,
                 "the array has %lld null cells; use to_numpy() for a masked array",
                 (long long)a->null_count);
    return NULL;
  }
  int shares = numpy_can_share(a);
  if (copy == Py_False && !shares) {
    PyErr_Format(PyExc_ValueError, "a %s array cannot be viewed by numpy without a copy",
                 rill_dtype_name(a->type.dtype));
    return NULL;
  }
  PyObject* out = array_to_numpy(self, NULL);
  if (out == NULL) return NULL;
  if (dtype != Py_None) {
    PyObject* c = PyObject_CallMethod(out, "astype", "OO", dtype,
                                      copy == Py_True ? Py_True : Py_False);
    Py_DECREF(out);
    return c;
  }
  if (copy == Py_True && shares) {
    PyObject* c = PyObject_CallMethod(out, "copy", NULL);
    Py_DECREF(out);
    return c;
  }
  return out;
}

PyObject* rillpy_arrow_c_array(rillpy_arrow_export_fn export, const void* src, int device) {
  struct ArrowSchema* s = PyMem_RawCalloc(1, sizeof(*s));
  void* arr = PyMem_RawCalloc(1, device ? sizeof(struct ArrowDeviceArray) : sizeof(struct ArrowArray));
  if (s == NULL || arr == NULL) {
    PyMem_RawFree(s);
    PyMem_RawFree(arr);
    return PyErr_NoMemory();
  }
  rill_error_t err;
  rill_error_clear(&err);
  int rc;
  Py_BEGIN_ALLOW_THREADS
  rc = export(src, s, arr, &err);
  Py_END_ALLOW_THREADS
  if (rc < 0) {
    PyMem_RawFree(s);
    PyMem_RawFree(arr);
    return rillpy_raise(rc, &err);
  }
  PyObject* schema_cap = rillpy_capsule_schema(s);
  PyObject* array_cap = device ? capsule_new(arr, "arrow_device_array", destroy_device_array, free_device_array)
                               : rillpy_capsule_array(arr);
  if (schema_cap == NULL || array_cap == NULL) {
    Py_XDECREF(schema_cap);
    Py_XDECREF(array_cap);
    return NULL;
  }
  return Py_BuildValue("(NN)", schema_cap, array_cap);
}

PyObject* rillpy_arrow_c_schema(rillpy_arrow_export_fn export, const void* src) {
  PyObject* pair = rillpy_arrow_c_array(export, src, 0);
  if (pair == NULL) return NULL;
  PyObject* schema = Py_NewRef(PyTuple_GET_ITEM(pair, 0));
  Py_DECREF(pair);
  return schema;
}

static int export_arrow(const void* a, struct ArrowSchema* s, void* arr, rill_error_t* err) {
  return rill_array_export_arrow(a, s, arr, err);
}

static int export_arrow_device(const void* a, struct ArrowSchema* s, void* arr, rill_error_t* err) {
  return rill_array_export_arrow_device(a, arr, s, err);
}

static PyObject* array_arrow_c_array(PyObject* self, PyObject* args, PyObject* kwargs) {
  static char* kwlist[] = {"requested_schema", NULL};
  PyObject* requested = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|O:__arrow_c_array__", kwlist, &requested))
    return NULL;
  return rillpy_arrow_c_array(export_arrow, SELF->a, 0);
}

static PyObject* array_arrow_c_schema(PyObject* self, PyObject* unused) {
  return rillpy_arrow_c_schema(export_arrow, SELF->a);
}

static PyObject* array_arrow_c_device_array(PyObject* self, PyObject* args, PyObject* kwargs) {
  static char* kwlist[] = {"requested_schema", NULL};
  PyObject* requested = Py_None;
  /* Further keywords are reserved by the protocol; they are accepted and ignored. */
  if (args != NULL && PyTuple_GET_SIZE(args) > 1)
    return PyErr_Format(PyExc_TypeError, "__arrow_c_device_array__ takes one positional argument");
  if (args != NULL && PyTuple_GET_SIZE(args) == 1) requested = PyTuple_GET_ITEM(args, 0);
  if (kwargs != NULL) {
    PyObject* r = PyDict_GetItemString(kwargs, kwlist[0]);
    if (r != NULL) requested = r;
  }
  (void)requested;
  return rillpy_arrow_c_array(export_arrow_device, SELF->a, 1);
}

/* (type, id) from a Python pair. */
static int parse_device(PyObject* o, int* type, int* id) {
  if (!PyArg_ParseTuple(o, "ii", type, id)) {
    PyErr_Clear();
    PyErr_Format(PyExc_BufferError, "dl_device must be a (device_type, device_id) pair, not %R", o);
    return -1;
  }
  return 0;
}

static PyObject* buffer_error(const rill_error_t* err) {
  PyErr_SetString(PyExc_BufferError, err->message);
  return NULL;
}

static PyObject* array_dlpack(PyObject* self, PyObject* args, PyObject* kwargs) {
  static char* kwlist[] = {"stream", "max_version", "dl_device", "copy", NULL};
  PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOO:__dlpack__", kwlist, &stream,
                                   &max_version, &dl_device, &copy))
    return NULL;
  int versioned = 0;
  if (max_version != Py_None) {
    int major, minor;
    if (!PyArg_ParseTuple(max_version, "ii", &major, &minor)) {
      PyErr_Clear();
      return PyErr_Format(PyExc_TypeError, "max_version must be a (major, minor) pair, not %R",
                          max_version);
    }
    versioned = major >= 1;
  }
  int want_copy = copy == Py_None ? 0 : PyObject_IsTrue(copy);
  if (want_copy < 0) return NULL;
  const rill_array_t* a = SELF->a;
  if (dl_device != Py_None) {
    int type, id;
    if (parse_device(dl_device, &type, &id) < 0) return NULL;
    if (type != device_type(a) || (type == RILL_DEVICE_CUDA && id != a->device.id))
      return PyErr_Format(PyExc_BufferError,
                          "__dlpack__: the array lives on device (%d, %d); rill does not copy it "
                          "to device (%d, %d)", device_type(a), a->device.id, type, id);
  }
  /* The consumer's stream (DLPack / array API): for CUDA arrays None and 1 name the legacy
   * default stream, 2 the per-thread default stream, -1 asks for no ordering, 0 is refused
   * (ambiguous), and other values are a cudaStream_t. The stream is ordered after the array's
   * data with an event (the host does not wait). Host arrays ignore it; copies wait on the
   * host. */
  int cuda = device_type(a) == RILL_DEVICE_CUDA;
  int order = cuda && !want_copy && a->event != NULL;
  void* cs = NULL; /* the legacy default stream for rill_array_stream_wait */
  if (order && stream != Py_None) {
    if (!PyLong_Check(stream))
      return PyErr_Format(PyExc_TypeError, "__dlpack__: stream must be an int or None, not %R", stream);
    long long v = PyLong_AsLongLong(stream);
    if (v == -1 && PyErr_Occurred()) return NULL;
    if (v == 0)
      return PyErr_Format(PyExc_BufferError,
                          "__dlpack__: stream 0 is ambiguous for CUDA; use 1 (legacy default), "
                          "2 (per-thread default) or the stream's handle");
    if (v == -1) order = 0;
    else if (v != 1) cs = (void*)(uintptr_t)v;
  }
  rill_error_t err;
  rill_error_clear(&err);
  int rc = RILL_OK;
  rill_array_t* fresh = NULL;
  if (want_copy || a->event != NULL) {
    Py_BEGIN_ALLOW_THREADS
    if (order) rc = rill_array_stream_wait(a, cs, &err);
    else if (a->event != NULL && (want_copy || !cuda)) rc = rill_array_sync(a, &err);
    if (rc == RILL_OK && want_copy) rc = rill_array_copy(a, &fresh, &err);
    Py_END_ALLOW_THREADS
    if (rc < 0) return buffer_error(&err);
  }
  const rill_array_t* src = fresh ? fresh : a;
  PyObject* cap = NULL;
  if (versioned) {
    DLManagedTensorVersioned* t = NULL;
    rc = rill_array_export_dlpack(src, &t, &err);
    if (rc == RILL_OK) {
      if (fresh != NULL) {
        t->flags &= ~(uint64_t)DLPACK_FLAG_BITMASK_READ_ONLY;
        t->flags |= DLPACK_FLAG_BITMASK_IS_COPIED;
      }
      cap = capsule_new(t, "dltensor_versioned", destroy_dltensor_versioned, free_dltensor_versioned);
    }
  } else {
    DLManagedTensor* t = NULL;
    rc = rill_array_export_dlpack_legacy(src, &t, &err);
    if (rc == RILL_OK) {
      cap = capsule_new(t, "dltensor", destroy_dltensor, free_dltensor);
    }
  }
  rill_array_release(fresh); /* the export holds its own reference */
  if (rc < 0) return buffer_error(&err);
  return cap;
}

static PyObject* array_dlpack_device(PyObject* self, PyObject* unused) {
  return Py_BuildValue("(ii)", device_type(SELF->a), SELF->a->device.id);
}

static PyObject* array_interchange(PyObject* self, PyObject* unused) {
  return rillpy_interchange_column(SELF, 1);
}

static PyMethodDef array_methods[] = {
  {"is_valid", array_is_valid, METH_O,
   "is_valid(i) -> bool\n\nWhether cell i holds a value (False for a null cell)."},
  {"to_pylist", array_to_pylist, METH_NOARGS,
   "to_pylist() -> list\n\nThe cells as Python values (see __getitem__), None for nulls."},
  {"to_numpy", array_to_numpy, METH_NOARGS,
   "to_numpy() -> numpy.ndarray\n\nThe array as numpy data of shape (len, *cell_shape).\n"
   "Fixed-shape numeric arrays without nulls are shared without a copy, read-only (through "
   "DLPack; timestamps as datetime64[us]). With nulls: a numpy.ma.MaskedArray copy. STRING, "
   "BINARY and variable-shape arrays: an object array of their cells (None for nulls). "
   "BFLOAT16 becomes float32 (a copy)."},
  {"__array__", (PyCFunction)(void (*)(void))array_array, METH_VARARGS | METH_KEYWORDS,
   "__array__(dtype=None, copy=None) -> numpy.ndarray\n\nnumpy's conversion protocol: as "
   "to_numpy(); arrays with null cells are refused (ValueError: use to_numpy()), copy=False "
   "is refused when numpy cannot share the memory."},
  {"__arrow_c_array__", (PyCFunction)(void (*)(void))array_arrow_c_array,
   METH_VARARGS | METH_KEYWORDS,
   "__arrow_c_array__(requested_schema=None) -> (schema capsule, array capsule)\n\nThe Arrow "
   "PyCapsule interface: the array exported through the Arrow C Data Interface (zero-copy "
   "except BOOL). requested_schema is ignored."},
  {"__arrow_c_schema__", array_arrow_c_schema, METH_NOARGS,
   "__arrow_c_schema__() -> schema capsule\n\nThe Arrow type of the array (an "
   "\"arrow_schema\" capsule)."},
  {"__arrow_c_device_array__", (PyCFunction)(void (*)(void))array_arrow_c_device_array,
   METH_VARARGS | METH_KEYWORDS,
   "__arrow_c_device_array__(requested_schema=None, **kwargs) -> (schema, device array)\n\n"
   "The Arrow C Device Data Interface export (arrays on any device; the CUDA event as "
   "sync_event)."},
  {"__dlpack__", (PyCFunction)(void (*)(void))array_dlpack, METH_VARARGS | METH_KEYWORDS,
   "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None) -> capsule\n\n"
   "The DLPack export of a fixed-shape numeric array without nulls, shape (len, "
   "*cell_shape), read-only. A \"dltensor_versioned\" capsule when max_version >= (1, 0), "
   "else a legacy \"dltensor\". copy=True exports a fresh copy. Arrays with nulls, strings "
   "and variable shapes raise BufferError."},
  {"__dlpack_device__", array_dlpack_device, METH_NOARGS,
   "__dlpack_device__() -> (device_type, device_id)\n\nWhere the data lives, as DLPack "
   "codes (1 = CPU, 2 = CUDA, 3 = CUDA host)."},
  {"interchange", array_interchange, METH_NOARGS,
   "interchange() -> Column\n\nThe array as a Column of the dataframe interchange protocol "
   "(one chunk; zero-copy)."},
  {NULL, NULL, 0, NULL},
};

static PyGetSetDef array_getset[] = {
  {"dtype", get_dtype, NULL, "The element dtype name (one of rill.DTYPES).", NULL},
  {"shape", get_shape, NULL, "(len, *cell_shape); -1 where cells differ.", NULL},
  {"cell_shape", get_cell_shape, NULL, "The shape of one cell (() for scalars).", NULL},
  {"null_count", get_null_count, NULL, "The number of null cells.", NULL},
  {"device", get_device, NULL, "(device type, device id) where the data lives.", NULL},
  {"name", get_name, NULL, "The column name, or None.", NULL},
  {"nbytes", get_nbytes, NULL, "Bytes of the array's buffers (data, validity, offsets, shapes).",
   NULL},
  {"_refcount", get_refcount, NULL, "The reference count of the underlying rill array.", NULL},
  {"__cuda_array_interface__", get_cuda_array_interface, NULL,
   "The CUDA Array Interface (version 3) of an array in CUDA memory (waits for its event "
   "first); AttributeError for host arrays.", NULL},
  {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods array_as_sequence = {
  .sq_length = array_len,
  .sq_item = array_item,
};

static PyMappingMethods array_as_mapping = {
  .mp_length = array_len,
  .mp_subscript = array_subscript,
};

PyTypeObject RillArray_Type = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "rill.Array",
  .tp_basicsize = sizeof(RillArray),
  .tp_dealloc = array_dealloc,
  .tp_repr = array_repr,
  .tp_as_sequence = &array_as_sequence,
  .tp_as_mapping = &array_as_mapping,
  .tp_flags = Py_TPFLAGS_DEFAULT,
  .tp_doc = "Array: len cells of one type (a rill_array_t), held by reference.\n\n"
            "a[i] is the Python value of cell i (int, float, bool, str, bytes, timestamps as "
            "int microseconds, tensor cells as numpy arrays, None for nulls); a[i:j] is a "
            "zero-copy slice. Arrays come from iterators (Row) and stay valid after the "
            "iterator moves on. Exports: __arrow_c_array__, __dlpack__, "
            "__cuda_array_interface__, interchange().",
  .tp_weaklistoffset = offsetof(RillArray, weakrefs),
  .tp_methods = array_methods,
  .tp_getset = array_getset,
};

int rillpy_init_array(PyObject* m) {
  if (PyType_Ready(&RillArray_Type) < 0) return -1;
  return PyModule_AddObjectRef(m, "Array", (PyObject*)&RillArray_Type);
}
