"""Python bindings of rill: a thin ctypes layer over librill.so.

Every Python type mirrors a C type; ctypes releases the GIL around each C call. Objects
implement the Arrow PyCapsule interface (``__arrow_c_stream__``, ``__arrow_c_array__``,
``__arrow_c_schema__``) and DLPack (``__dlpack__``, ``__dlpack_device__``), so pyarrow,
polars, pandas (through pyarrow), nanoarrow and numpy consume rill data without a copy::

    import pyarrow as pa, numpy as np, rill
    df = rill.DataFrame.from_arrow(pa.table({"x": np.arange(10.0), "y": list("abcdefghij")}))
    batches = df.batch(4)
    for batch in batches.iter():
        rb = pa.record_batch(batch)          # zero-copy record batch
        x = np.from_dlpack(batch.column(0))  # zero-copy read-only numpy array
    table = pa.table(df)                     # the whole dataframe as an Arrow stream

The library is found through the RILL_LIB environment variable, else next to this package.
"""

import ctypes
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_int, c_int64, c_uint8,
                    c_uint64, c_void_p)

__all__ = ["DataFrame", "Iterator", "Batch", "Column", "RillError", "DTYPES", "library"]

# ------------------------------------------------------------------ library


def _find_library():
    env = os.environ.get("RILL_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for cand in (os.path.join(here, "librill.so"),
                 os.path.join(here, "..", "..", "lib", "librill.so")):
        if os.path.exists(cand):
            return cand
    return "librill.so"


library = ctypes.CDLL(_find_library())

MAX_NDIM = 8
DTYPES = {"bool": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "uint8": 6, "uint16": 7,
          "uint32": 8, "uint64": 9, "float16": 10, "bfloat16": 11, "float32": 12,
          "float64": 13, "string": 14, "binary": 15, "timestamp_us": 16}
_DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
_NUMPY_NAMES = {"bool": "bool", "timestamp_us": "int64"}
_TYPESTR = {"bool": "|b1", "int8": "|i1", "int16": "<i2", "int32": "<i4", "int64": "<i8",
            "uint8": "|u1", "uint16": "<u2", "uint32": "<u4", "uint64": "<u8", "float16": "<f2",
            "float32": "<f4", "float64": "<f8", "timestamp_us": "<M8[us]"}


class RillError(RuntimeError):
    """A rill call failed: `code` is the RILL_E* status, the text is rill's message."""

    def __init__(self, code, message):
        super().__init__(f"{message} (code {code})")
        self.code = code


class _Error(Structure):
    _fields_ = [("code", c_int), ("row", c_int64), ("column", c_int),
                ("message", c_char * 512)]


class _Type(Structure):
    _fields_ = [("dtype", c_int), ("ndim", c_int), ("shape", c_int64 * MAX_NDIM)]


class _Device(Structure):
    _fields_ = [("type", c_int), ("id", c_int)]


class _Array(Structure):
    _fields_ = [("type", _Type), ("length", c_int64), ("null_count", c_int64),
                ("validity", c_void_p), ("offsets", c_void_p), ("shapes", c_void_p),
                ("data", c_void_p), ("data_size", c_int64), ("device", _Device),
                ("event", c_void_p), ("priv", c_void_p)]


class _Field(Structure):
    _fields_ = [("name", c_char_p), ("type", _Type), ("nullable", c_int), ("device", _Device)]


class _IterOpts(Structure):
    _fields_ = [("columns", POINTER(c_int)), ("ncolumns", c_int), ("prefetch", c_int),
                ("threads", c_int), ("seed", c_uint64), ("epoch", c_int64),
                ("stream", c_void_p)]


class _Row(Structure):
    _fields_ = [("index", c_int64), ("ncolumns", c_int), ("columns", POINTER(c_void_p))]


class _StageOpts(Structure):
    _fields_ = [("where", c_int), ("grain", c_int64), ("on_error", c_int), ("nullable", c_int),
                ("device", c_int)]


class _StreamOpts(Structure):
    _fields_ = [("batch_rows", c_int64)]


# Sizes of the ABI structs (capsule payloads are allocated here and freed by the capsule).
_SCHEMA_SIZE = 72        # struct ArrowSchema
_ARRAY_SIZE = 80         # struct ArrowArray
_STREAM_SIZE = 40        # struct ArrowArrayStream

_MAP_FN = CFUNCTYPE(c_int, POINTER(POINTER(_Array)), c_int, POINTER(_Array), c_void_p, c_void_p,
                    POINTER(_Error))
_CTX_FREE = CFUNCTYPE(None, c_void_p)


def _sig(name, restype, *argtypes):
    fn = getattr(library, name)
    fn.restype = restype
    fn.argtypes = list(argtypes)
    return fn


_E = POINTER(_Error)
_df_free = _sig("rill_df_free", None, c_void_p)
_df_rows = _sig("rill_df_rows", c_int64, c_void_p)
_df_ncolumns = _sig("rill_df_ncolumns", c_int, c_void_p)
_df_column = _sig("rill_df_column", c_int, c_void_p, c_char_p)
_df_field = _sig("rill_df_field", POINTER(_Field), c_void_p, c_int)
_df_batch = _sig("rill_df_batch", c_int, c_void_p, POINTER(c_int), c_int, c_int64, c_void_p,
                 POINTER(c_void_p), _E)
_df_shuffle = _sig("rill_df_shuffle", c_int, c_void_p, c_uint64, POINTER(c_void_p), _E)
_df_shard = _sig("rill_df_shard", c_int, c_void_p, c_int, c_int, POINTER(c_void_p), _E)
_df_filter = _sig("rill_df_filter", c_int, c_void_p, c_int, POINTER(c_void_p), _E)
_df_map = _sig("rill_df_map", c_int, c_void_p, c_char_p, _Type, POINTER(c_int), c_int, _MAP_FN,
               c_void_p, _CTX_FREE, POINTER(_StageOpts), _E)
_df_from_arrow = _sig("rill_df_from_arrow", c_int, c_void_p, POINTER(c_void_p), _E)
_df_export_stream = _sig("rill_df_export_stream_ex", c_int, c_void_p, POINTER(_IterOpts),
                         POINTER(_StreamOpts), c_void_p, _E)
_iter_new = _sig("rill_iter_new", c_int, c_void_p, POINTER(_IterOpts), POINTER(c_void_p), _E)
_iter_next = _sig("rill_iter_next", c_int, c_void_p, POINTER(_Row), _E)
_iter_free = _sig("rill_iter_free", None, c_void_p)
_array_retain = _sig("rill_array_retain", c_void_p, c_void_p)
_array_release = _sig("rill_array_release", None, c_void_p)
_array_sync = _sig("rill_array_sync", c_int, c_void_p, _E)
_array_export_arrow = _sig("rill_array_export_arrow", c_int, c_void_p, c_void_p, c_void_p, _E)
_row_export_arrow = _sig("rill_row_export_arrow", c_int, POINTER(_Row), c_void_p,
                         POINTER(c_int), c_void_p, c_void_p, _E)
_export_dlpack = _sig("rill_array_export_dlpack", c_int, c_void_p, POINTER(c_void_p), _E)
_export_dlpack_legacy = _sig("rill_array_export_dlpack_legacy", c_int, c_void_p,
                             POINTER(c_void_p), _E)
_exec_alloc = _sig("rill_exec_alloc", c_int, c_void_p, POINTER(_Array), _Type, c_int64)
_exec_rows = _sig("rill_exec_rows", POINTER(c_int64), c_void_p)
_version = _sig("rill_version", c_char_p)

__version__ = _version().decode()


def _check(rc, err):
    if rc < 0:
        raise RillError(rc, err.message.decode(errors="replace"))
    return rc


# ------------------------------------------------------------------ capsules

_py = ctypes.pythonapi
_py.PyCapsule_New.restype = ctypes.py_object
_DESTRUCTOR = CFUNCTYPE(None, c_void_p)
_py.PyCapsule_New.argtypes = [c_void_p, c_char_p, _DESTRUCTOR]
_py.PyCapsule_GetPointer.restype = c_void_p
_py.PyCapsule_GetPointer.argtypes = [c_void_p, c_char_p]
_py.PyCapsule_IsValid.restype = c_int
_py.PyCapsule_IsValid.argtypes = [c_void_p, c_char_p]
_py.PyMem_RawMalloc.restype = c_void_p
_py.PyMem_RawMalloc.argtypes = [ctypes.c_size_t]
_py.PyMem_RawFree.restype = None
_py.PyMem_RawFree.argtypes = [c_void_p]

_NAMES = {n: ctypes.create_string_buffer(n) for n in
          (b"arrow_schema", b"arrow_array", b"arrow_array_stream", b"dltensor",
           b"dltensor_versioned")}
# Destructors in C (include/rill_interop.h): they release an unconsumed payload and are safe
# while a Python exception is pending (a consumer unwinding after a stream error).
_DESTRUCTORS = {
    b"arrow_schema": library.rill_pycapsule_destroy_schema,
    b"arrow_array": library.rill_pycapsule_destroy_array,
    b"arrow_array_stream": library.rill_pycapsule_destroy_stream,
    b"dltensor": library.rill_pycapsule_destroy_dltensor,
    b"dltensor_versioned": library.rill_pycapsule_destroy_dltensor_versioned,
}
_DESTRUCTORS = {k: ctypes.cast(v, _DESTRUCTOR) for k, v in _DESTRUCTORS.items()}


def _alloc(size):
    ptr = _py.PyMem_RawMalloc(size)
    if not ptr:
        raise MemoryError()
    ctypes.memset(ptr, 0, size)
    return ptr


def _capsule(ptr, name):
    return _py.PyCapsule_New(ptr, _NAMES[name], _DESTRUCTORS[name])


def _export_pair(export):
    """Calls export(schema_ptr, array_ptr, err) and wraps both in capsules."""
    schema, array = _alloc(_SCHEMA_SIZE), _alloc(_ARRAY_SIZE)
    err = _Error()
    rc = export(schema, array, ctypes.byref(err))
    if rc < 0:
        _py.PyMem_RawFree(schema)
        _py.PyMem_RawFree(array)
        _check(rc, err)
    return _capsule(schema, b"arrow_schema"), _capsule(array, b"arrow_array")


def _iter_opts(columns, prefetch, threads, seed):
    opts = _IterOpts()
    keep = None
    if columns is not None:
        keep = (c_int * len(columns))(*columns)
        opts.columns = keep
        opts.ncolumns = len(columns)
    opts.prefetch = prefetch
    opts.threads = threads
    opts.seed = seed
    return opts, keep


# ------------------------------------------------------------------ objects


class DataFrame:
    """A rill dataframe (rill_df_t). Operators return new dataframes; nothing is computed
    until an iterator or an export pulls rows."""

    def __init__(self, handle, keep=()):
        self._h = handle
        self._keep = list(keep)   # Python objects the C side calls back into

    def __del__(self):
        if getattr(self, "_h", None):
            _df_free(self._h)
            self._h = None

    @classmethod
    def from_arrow(cls, data):
        """Imports anything with __arrow_c_stream__ (pyarrow Table/RecordBatchReader, polars
        DataFrame, ...) with rill_df_from_arrow: a single record batch is shared without
        copying where its layout allows (see rill_interop.h); several batches are copied."""
        if not hasattr(data, "__arrow_c_stream__"):
            raise TypeError("expected an object with __arrow_c_stream__")
        capsule = data.__arrow_c_stream__()
        # take the stream over: rill_df_from_arrow releases it; the capsule then sees
        # release == NULL and only frees its memory
        ptr = _py.PyCapsule_GetPointer(ctypes.c_void_p(id(capsule)), _NAMES[b"arrow_array_stream"])
        out, err = c_void_p(), _Error()
        _check(_df_from_arrow(ptr, ctypes.byref(out), ctypes.byref(err)), err)
        return cls(out.value)

    def __len__(self):
        return _df_rows(self._h)

    @property
    def num_rows(self):
        return _df_rows(self._h)

    @property
    def columns(self):
        return [_df_field(self._h, i).contents.name.decode() for i in range(_df_ncolumns(self._h))]

    def field(self, i):
        f = _df_field(self._h, i).contents
        return {"name": f.name.decode(), "dtype": _DTYPE_NAMES[f.type.dtype],
                "shape": tuple(f.type.shape[:f.type.ndim]), "nullable": bool(f.nullable)}

    def column_index(self, name):
        i = _df_column(self._h, name.encode())
        if i < 0:
            raise KeyError(name)
        return i

    def _derive(self, fn, *args):
        out, err = c_void_p(), _Error()
        _check(fn(self._h, *args, ctypes.byref(out), ctypes.byref(err)), err)
        return DataFrame(out.value, self._keep + [self])

    def batch(self, size, columns=None, drop_last=False):
        cols = list(range(_df_ncolumns(self._h))) if columns is None else \
            [self.column_index(c) if isinstance(c, str) else c for c in columns]
        arr = (c_int * len(cols))(*cols)
        if drop_last:
            opts = (c_int * 3)(1, 0, 0)
            return self._derive(_df_batch, arr, len(cols), size, ctypes.cast(opts, c_void_p))
        return self._derive(_df_batch, arr, len(cols), size, None)

    def shuffle(self, seed):
        return self._derive(_df_shuffle, seed)

    def shard(self, rank, world):
        return self._derive(_df_shard, rank, world)

    def filter(self, column):
        if isinstance(column, str):
            column = self.column_index(column)
        return self._derive(_df_filter, column)

    def map(self, name, dtype, inputs, fn):
        """Adds a derived numeric column computed by `fn(*numpy_arrays) -> numpy array`
        (inputs: fixed-shape numeric columns; the function runs on worker threads under the
        GIL; an exception becomes the row error). Returns the new column index."""
        import numpy as np
        ins = [self.column_index(c) if isinstance(c, str) else c for c in inputs]
        t = _Type(DTYPES[dtype], 0)
        np_out = np.dtype(_NUMPY_NAMES.get(dtype, dtype))

        def call(in_arrays, nin, out, exec_, ctx, err):
            try:
                cols = [_as_numpy(in_arrays[i].contents) for i in range(nin)]
                n = in_arrays[0].contents.length if nin else 0
                res = np.ascontiguousarray(fn(*cols), dtype=np_out)
                if res.shape[0] != n:
                    raise ValueError(f"map returned {res.shape[0]} values for {n} rows")
                rc = _exec_alloc(exec_, out, t, n)
                if rc < 0:
                    return rc
                if n:
                    ctypes.memmove(out.contents.data, res.ctypes.data, res.nbytes)
                return 0
            except Exception as e:  # reported as the row's error
                msg = f"{type(e).__name__}: {e}".encode()[:500]
                err.contents.code = -10
                err.contents.message = msg
                return -10

        cb = _MAP_FN(call)
        arr = (c_int * len(ins))(*ins)
        err = _Error()
        rc = _df_map(self._h, name.encode(), t, arr, len(ins), cb, None, _CTX_FREE(0), None,
                     ctypes.byref(err))
        _check(rc, err)
        self._keep.append(cb)
        return rc

    def iter(self, columns=None, prefetch=0, threads=0, seed=0):
        return Iterator(self, columns, prefetch, threads, seed)

    __iter__ = iter

    def __arrow_c_stream__(self, requested_schema=None, columns=None, batch_rows=0, seed=0):
        """The dataframe as an ArrowArrayStream capsule (record batches computed on demand).
        `requested_schema` is ignored (rill exports its own types)."""
        ptr = _alloc(_STREAM_SIZE)
        opts, keep = _iter_opts(columns, 0, 0, seed)
        sopts = _StreamOpts(batch_rows)
        err = _Error()
        rc = _df_export_stream(self._h, ctypes.byref(opts), ctypes.byref(sopts), ptr,
                               ctypes.byref(err))
        del keep
        if rc < 0:
            _py.PyMem_RawFree(ptr)
            _check(rc, err)
        return _capsule(ptr, b"arrow_array_stream")

    def __dataframe__(self, nan_as_null=False, allow_copy=True):
        """The dataframe interchange protocol, for consumers that predate the Arrow
        PyCapsule interface (served by pyarrow over the Arrow stream of this dataframe)."""
        import pyarrow as pa
        return pa.table(self).__dataframe__(nan_as_null=nan_as_null, allow_copy=allow_copy)


def _as_numpy(a):
    """A numpy view (no copy) of a fixed-shape host array; valid while `a` is referenced."""
    import numpy as np
    name = _DTYPE_NAMES[a.type.dtype]
    if name in ("string", "binary", "bfloat16"):
        raise TypeError(f"no numpy view of {name} arrays")
    shape = (a.length,) + tuple(a.type.shape[:a.type.ndim])
    if any(d < 0 for d in shape):
        raise TypeError("no numpy view of variable-shape cells")
    dt = np.dtype(_NUMPY_NAMES.get(name, name))
    n = int(np.prod(shape)) if shape else 0
    if n == 0 or not a.data:
        return np.zeros(shape, dtype=dt)
    buf = (c_uint8 * (n * dt.itemsize)).from_address(a.data)
    return np.frombuffer(buf, dtype=dt).reshape(shape)


class Iterator:
    """An iterator (rill_iter_t) over a dataframe; yields Batch objects."""

    def __init__(self, df, columns=None, prefetch=0, threads=0, seed=0):
        self._df = df
        self._h = None
        cols = None if columns is None else \
            [df.column_index(c) if isinstance(c, str) else c for c in columns]
        self._columns = cols if cols is not None else list(range(_df_ncolumns(df._h)))
        opts, keep = _iter_opts(cols, prefetch, threads, seed)
        out, err = c_void_p(), _Error()
        _check(_iter_new(df._h, ctypes.byref(opts), ctypes.byref(out), ctypes.byref(err)), err)
        self._h = out.value

    def __del__(self):
        if getattr(self, "_h", None):
            _iter_free(self._h)
            self._h = None

    def __iter__(self):
        return self

    def __next__(self):
        row, err = _Row(), _Error()
        rc = _iter_next(self._h, ctypes.byref(row), ctypes.byref(err))
        if rc == 1:
            raise StopIteration
        _check(rc, err)
        ptrs = [row.columns[i] for i in range(row.ncolumns)]
        return Batch(self._df, self._columns, ptrs, row.index)


class Column:
    """One rill array (a reference): Arrow array and DLPack tensor without a copy."""

    def __init__(self, ptr):
        self._p = _array_retain(ptr)

    def __del__(self):
        if getattr(self, "_p", None):
            _array_release(self._p)
            self._p = None

    @property
    def _a(self):
        return _Array.from_address(self._p)

    def __len__(self):
        return self._a.length

    @property
    def dtype(self):
        return _DTYPE_NAMES[self._a.type.dtype]

    @property
    def null_count(self):
        return self._a.null_count

    def __arrow_c_array__(self, requested_schema=None):
        return _export_pair(lambda s, a, e: _array_export_arrow(self._p, s, a, e))

    def __arrow_c_schema__(self):
        schema, _ = self.__arrow_c_array__()
        return schema

    def __dlpack_device__(self):
        d = self._a.device
        return (d.type or 1, d.id if d.type in (2, 3) else 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if copy:
            raise BufferError("rill exports its buffers without copying (copy=True unsupported)")
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"the array lives on {self.__dlpack_device__()}, not {dl_device}")
        out, err = c_void_p(), _Error()
        if max_version is not None and max_version[0] >= 1:
            _check(_export_dlpack(self._p, ctypes.byref(out), ctypes.byref(err)), err)
            name = b"dltensor_versioned"
        else:
            _check(_export_dlpack_legacy(self._p, ctypes.byref(out), ctypes.byref(err)), err)
            name = b"dltensor"
        return _py.PyCapsule_New(out.value, _NAMES[name], _DESTRUCTORS[name])

    @property
    def __cuda_array_interface__(self):
        """CUDA Array Interface (version 3) of a column in CUDA device memory: fixed-shape
        numeric cells without nulls. The array's event is waited for on the host first, so
        the consumer may use the data on any stream. Absent (AttributeError) otherwise."""
        a = self._a
        if a.device.type != 2:
            raise AttributeError("__cuda_array_interface__: the array is not in CUDA memory")
        name = _DTYPE_NAMES[a.type.dtype]
        if name not in _TYPESTR:
            raise AttributeError(f"__cuda_array_interface__: no typestr for {name}")
        shape = (a.length,) + tuple(a.type.shape[i] for i in range(a.type.ndim))
        if any(d < 0 for d in shape) or a.null_count:
            raise AttributeError("__cuda_array_interface__: variable shapes or nulls")
        err = _Error()
        _check(_array_sync(self._p, ctypes.byref(err)), err)
        return {"shape": shape, "typestr": _TYPESTR[name], "data": (a.data or 0, True),
                "version": 3, "strides": None, "stream": None}

    def to_numpy(self):
        """A read-only numpy view (no copy) that keeps this column alive."""
        import numpy as np
        return np.from_dlpack(self)


class Batch:
    """One row of an iterator: for a batched dataframe, a record batch of up to B rows.
    Holds references on its arrays, so it stays valid after the iterator moves on."""

    def __init__(self, df, columns, ptrs, index):
        self._df = df
        self._columns = list(columns)
        self.columns = [Column(p) for p in ptrs]
        self.index = index

    def __len__(self):
        return len(self.columns[0]) if self.columns else 0

    def column(self, i):
        if isinstance(i, str):
            i = self._columns.index(self._df.column_index(i))
        return self.columns[i]

    def __arrow_c_array__(self, requested_schema=None):
        n = len(self.columns)
        ptrs = (c_void_p * n)(*[c._p for c in self.columns])
        row = _Row(self.index, n, ptrs)
        cols = (c_int * n)(*self._columns)
        return _export_pair(lambda s, a, e: _row_export_arrow(ctypes.byref(row), self._df._h,
                                                               cols, s, a, e))

    def __arrow_c_schema__(self):
        schema, _ = self.__arrow_c_array__()
        return schema

    def __dataframe__(self, nan_as_null=False, allow_copy=True):
        """The dataframe interchange protocol, for consumers that predate the Arrow
        PyCapsule interface (served by pyarrow over this batch's zero-copy arrays)."""
        import pyarrow as pa
        table = pa.Table.from_batches([pa.record_batch(self)])
        return table.__dataframe__(nan_as_null=nan_as_null, allow_copy=allow_copy)
