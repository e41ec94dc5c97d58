/* Internal header of the rill CPython extension (rill._rill): the object layouts and the
 * conversions shared by its files. Every Python type mirrors a C type:
 *   DataFrame <-> rill_df_t, Iterator <-> rill_iter_t, Row <-> rill_row_t,
 *   Array <-> rill_array_t, RillError (and subclasses) <-> rill_error_t.
 * The extension holds no logic beyond argument checking and conversion; the GIL is released
 * around every C call that can block or compute. */
#ifndef RILLPY_H
#define RILLPY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "rill.h"
#include "rill_addons.h"
#include "rill_interop.h"

/* ---------------------------------------------------------------- objects */

/* rill.DataFrame: owns one reference on `df`. `keep` is a list of Python objects the C side
 * borrows (numpy buffers of from_numpy, the source object of from_arrow...); callables of
 * map/reduce are owned by their stage context instead (freed by ctx_free). */
typedef struct RillDataFrame {
  PyObject_HEAD
  rill_df_t* df;
  PyObject* keep;         /* list */
  PyObject* classes;      /* list of class names (image folders) or NULL */
  PyObject* weakrefs;
  int batched;            /* made by batch() (or a view of such a dataframe) */
} RillDataFrame;

/* rill.Array: one reference on `a`. */
typedef struct RillArray {
  PyObject_HEAD
  const rill_array_t* a;
  PyObject* name;         /* str or NULL */
  PyObject* weakrefs;
} RillArray;

/* rill.Row (alias rill.Batch): one row handed out by an iterator; holds a reference on each
 * array, so it stays valid after the iterator moves on. */
typedef struct RillRow {
  PyObject_HEAD
  RillDataFrame* df;      /* the iterated dataframe (strong reference) */
  int64_t index;
  int ncolumns;
  int* columns;           /* dataframe column index of each array (in the block of `arrays`) */
  const rill_array_t** arrays; /* retained (PyMem: the arrays, then the columns) */
  PyObject* names;        /* tuple of str (the iterator's, shared) */
} RillRow;

extern PyTypeObject RillDataFrame_Type;
extern PyTypeObject RillIterator_Type;
extern PyTypeObject RillRow_Type;
extern PyTypeObject RillArray_Type;

/* Registers each file's types and functions on the module (0 or -1 with an exception). */
int rillpy_init_errors(PyObject* m);      /* module.c */
int rillpy_init_array(PyObject* m);       /* array.c */
int rillpy_init_row(PyObject* m);         /* row.c */
int rillpy_init_interchange(PyObject* m); /* interchange.c */
int rillpy_init_dataframe(PyObject* m);   /* dataframe.c */
int rillpy_init_sources(PyObject* m);     /* sources.c */
int rillpy_init_iter(PyObject* m);        /* iter.c */

/* ---------------------------------------------------------------- errors (module.c) */

/* Raises the exception class of `code` (RillError subclasses) with err's message, row and
 * column (err may be NULL: rill_strerror is used). Returns NULL. */
PyObject* rillpy_raise(int code, const rill_error_t* err);
/* As rillpy_raise, naming the column: sets e.column_name. */
PyObject* rillpy_raise_column(int code, const rill_error_t* err, const char* column_name);
/* rc < 0: raises and returns -1; else returns rc. */
int rillpy_check(int rc, const rill_error_t* err);
/* The exception class of a code (borrowed). */
PyObject* rillpy_error_class(int code);
/* Raises InvalidArgumentError with a formatted message; returns NULL. */
PyObject* rillpy_invalid(const char* fmt, ...);

/* ---------------------------------------------------------------- helpers (module.c) */

/* Appends `item` to the list, stealing it; a NULL item (a failed constructor) returns -1 with
 * its exception. 0 or -1 (raised). */
int rillpy_append(PyObject* list, PyObject* item);
/* ", ".join(parts) as a new str; steals `parts` (a sequence of str; NULL: returns NULL with the
 * pending exception). */
PyObject* rillpy_join(PyObject* parts);
/* Raises InvalidArgumentError "unknown column KEY; columns are: ..." listing `names` (a
 * sequence of str, stolen; NULL: its exception stays). Returns NULL. */
PyObject* rillpy_unknown_column(PyObject* key, PyObject* names);
/* The position of the str `key` in the tuple of str `names`; -1 when absent (with
 * rillpy_unknown_column raised when `raise_` is set) or when comparing raised. */
Py_ssize_t rillpy_find_name(PyObject* names, PyObject* key, int raise_);
/* Whether the interpreter is shutting down: callbacks run on rill's threads (release
 * callbacks, ctx_free) must not take the GIL then. Callable without the GIL. */
int rillpy_is_finalizing(void);
/* numpy and numpy.ma, imported on first use (borrowed references; NULL with an exception). */
PyObject* rillpy_numpy(void);
PyObject* rillpy_numpy_ma(void);
/* Whether `o` is a numpy masked array: 1 with *data and *mask set to new references to its
 * data and its full boolean mask (numpy.ma.getdata, getmaskarray), 0 (both NULL), or -1
 * (raised; both NULL). */
int rillpy_split_masked(PyObject* o, PyObject** data, PyObject** mask);
/* The DLPack device type of a rill device (0, unset, is the CPU). */
static inline int rillpy_device_type(rill_device_t d) {
  return d.type == 0 ? RILL_DEVICE_CPU : (int)d.type;
}

/* ---------------------------------------------------------------- conversions (module.c) */

/* dtype from a name in rill.DTYPES, a numpy dtype or type, or their str(); 0 / -1 (raised). */
int rillpy_parse_dtype(PyObject* o, rill_dtype_t* out);
/* A cell type from a dtype and a shape (None, int or sequence of int; -1 = varies). */
int rillpy_parse_type(PyObject* dtype, PyObject* shape, rill_type_t* out);
int rillpy_parse_on_error(PyObject* o, rill_on_error_t* out);   /* None = raise */
int rillpy_parse_layout(PyObject* o, rill_layout_t* out);       /* None = hwc */
int rillpy_parse_interp(PyObject* o, rill_interp_t* out);       /* None = bilinear */
int rillpy_parse_where(PyObject* o, rill_stage_where_t* out);   /* None = cpu */
/* The rows-per-task `grain` of a stage option (>= 0; 0: the engine picks); 0 / -1 (raised). */
int rillpy_parse_grain(long long grain, int64_t* out);
/* A column of df from its name or index; unknown -> InvalidArgumentError listing names. */
int rillpy_parse_column(rill_df_t* df, PyObject* o, int* out);
/* A list of columns (None -> all when `all` is set, else NULL/0). *out is PyMem; free it. */
int rillpy_parse_columns(rill_df_t* df, PyObject* o, int** out, int* n);
/* A filesystem path (str, bytes or os.PathLike) as a new bytes object, or NULL (raised);
 * InvalidArgumentError for a path holding a NUL character, which the C string would end at. */
PyObject* rillpy_fspath(PyObject* o);
/* Python views of C values. */
PyObject* rillpy_dtype_name(rill_dtype_t dtype);  /* new str */
PyObject* rillpy_type_shape(const rill_type_t* t); /* new tuple of the cell shape */
/* A new tuple (lead, *shape) when `with_lead`, else tuple(shape); NULL (raised). */
PyObject* rillpy_shape_tuple(int ndim, const int64_t* shape, int64_t lead, int with_lead);
PyObject* rillpy_field(const rill_field_t* f);     /* new rill.Field */
/* Text of the library (column names, messages) as a new str: UTF-8, each ill-formed part
 * read as U+FFFD (names are not checked as UTF-8 in C), so listing them never fails. */
PyObject* rillpy_text(const char* s);

/* ---------------------------------------------------------------- arrays (array.c) */

/* A new rill.Array holding one more reference on `a` (name may be NULL). */
PyObject* rillpy_array_new(const rill_array_t* a, PyObject* name);
/* Capsules of the Arrow PyCapsule interface and DLPack with their destructors (payloads are
 * PyMem_RawMalloc'ed; each destructor releases an unconsumed payload). NULL on failure
 * (the payload is then released and freed). */
PyObject* rillpy_capsule_schema(struct ArrowSchema* s);
PyObject* rillpy_capsule_array(struct ArrowArray* a);
PyObject* rillpy_capsule_stream(struct ArrowArrayStream* s);
/* Fills an ArrowSchema and an ArrowArray (an ArrowDeviceArray for a device export) from `src`;
 * called without the GIL. Returns a rill status (err set on failure). */
typedef int (*rillpy_arrow_export_fn)(const void* src, struct ArrowSchema* schema, void* array,
                                      rill_error_t* err);
/* The (schema capsule, array capsule) pair of the Arrow PyCapsule interface: __arrow_c_array__,
 * or __arrow_c_device_array__ when `device` ("arrow_device_array" capsule). `export` fills
 * structs this allocates; NULL (raised) when it fails. */
PyObject* rillpy_arrow_c_array(rillpy_arrow_export_fn export, const void* src, int device);
/* The schema capsule of that export (__arrow_c_schema__). */
PyObject* rillpy_arrow_c_schema(rillpy_arrow_export_fn export, const void* src);
/* A new rill.Array over rows [start, start + n) of `a` (zero-copy), named `name` (may be NULL). */
PyObject* rillpy_array_slice(const rill_array_t* a, int64_t start, int64_t n, PyObject* name);
/* rill_array_release, without the GIL when it may free a large or device buffer (the last
 * reference to an array of 1 MiB or more, or on a device). */
void rillpy_array_release(const rill_array_t* a);

/* ---------------------------------------------------------------- rows (row.c) */

/* A new rill.Row over `row` (from rill_iter_next); `columns` gives the dataframe column of
 * each of its arrays (NULL = 0..n-1). Retains the arrays, and shares `names` (the iterator's
 * tuple of rillpy_row_names). */
PyObject* rillpy_row_new(RillDataFrame* df, const rill_row_t* row, const int* columns, PyObject* names);
/* The names of the n columns (NULL: all of df's) as a new tuple of str (rillpy_column_list's
 * names), for rillpy_row_new. */
PyObject* rillpy_row_names(const rill_df_t* df, const int* columns, int n);

/* ---------------------------------------------------------------- interchange (interchange.c) */

/* The dataframe interchange protocol object over `chunks` (a list of rill.Row with the same
 * columns; an empty list with `names` gives an empty frame). */
PyObject* rillpy_interchange_frame(PyObject* names, PyObject* chunks, int allow_copy);
/* The protocol Column of one array (one chunk). */
PyObject* rillpy_interchange_column(RillArray* a, int allow_copy);

/* ---------------------------------------------------------------- dataframes (dataframe.c) */

/* A new rill.DataFrame owning `df` (steals the reference); `keep` (may be NULL) is appended to
 * its keep-alive list. On failure frees df and returns NULL. */
PyObject* rillpy_df_new(rill_df_t* df, PyObject* keep);
/* The result of a call that makes a dataframe (rc, err and df from the call): the raised
 * error when rc < 0, else rillpy_df_new(df, NULL). */
PyObject* rillpy_df_result(int rc, const rill_error_t* err, rill_df_t* df);
/* The names (new list of str) or, when `fields`, the rill.Field objects of the columns of df
 * given by `columns` (n of them; NULL: all the columns, n is ignored). NULL (raised). */
PyObject* rillpy_column_list(const rill_df_t* df, const int* columns, int n, int fields);
/* Raises the error of a failed row (rill_iter_next, rc < 0) on the iterated dataframe df:
 * the exception a Python map/reduce raised when the message carries its token (with a note
 * naming row and column, and attributes rill_row / rill_column), else the RillError of rc
 * naming the column. Returns NULL. */
PyObject* rillpy_raise_row_error(int rc, const rill_error_t* err, const rill_df_t* df); /* pystage.c */

/* ---------------------------------------------------------------- iterators (iter.c) */

/* A new rill.Iterator over df producing `columns` (None = all; names or indices);
 * next_epoch: rill_iter_opts_t.next_epoch. */
PyObject* rillpy_iter_new(RillDataFrame* df, PyObject* columns, int prefetch, int threads, uint64_t seed,
                          int64_t epoch, PyObject* stream, int next_epoch);

/* ---------------------------------------------------------------- Python stages (pystage.c) */

/* The context of a map or reduce stage calling the Python callable `fn` (strong reference)
 * for the column `name`; free it with rillpy_stage_free (also its ctx_free). NULL (raised). */
void* rillpy_stage_new(PyObject* fn, const char* name, const char* what, rill_type_t type, int nullable,
                       rill_on_error_t on_error);
void rillpy_stage_free(void* ctx);
/* The rill_map_fn / rill_reduce_fn that call a stage context's callable. */
int rillpy_map_fn(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* exec, void* ctx,
                  rill_error_t* err);
int rillpy_reduce_fn(const rill_array_t* group, rill_array_t* out, rill_exec_t* exec, void* ctx,
                     rill_error_t* err);

#endif /* RILLPY_H */
