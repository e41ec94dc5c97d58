/* rill: a pull-based streaming dataframe that feeds machine-learning training loops.
 *
 * Core API: errors, types, arrays, dataframes and their operators (map, reduce, batch,
 * shuffle, shard, filter), iterators with background prefetch, streams, the native
 * interchange view and version queries. This header depends on no optional library.
 *
 * Conventions
 *   - Every function that can fail returns an int status: RILL_OK (0) or a negative
 *     RILL_E* code, and fills the caller's rill_error_t (when not NULL) with the code and a
 *     message. Iterators also return RILL_END (1) when exhausted.
 *   - Option structs are zero-initialisable: a zero field means the documented default.
 *     They grow without new functions (no *_ex variants), by one rule (see "Option structs"
 *     below): fields are only appended, zero keeps the earlier behaviour, and each struct
 *     ends with reserved words that later fields take.
 *   - Objects are freed with their *_free function; NULL is a no-op.
 */
#ifndef RILL_H
#define RILL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Option structs (rill_*_opts_t, here and in rill_addons.h and rill_interop.h) grow
 * without new functions:
 *   - Callers zero-initialise them ({0} or designated initialisers); a zero field means the
 *     documented default, and a field added later means "as before" when zero.
 *   - Fields are only appended, never reordered, resized or removed. A struct of these
 *     headers (all but the deprecated rill_arrow_stream_opts_t, which will not grow) ends
 *     with `int64_t reserved[RILL_OPTS_RESERVED]` (must be zero): a new field takes
 *     the first reserved words and the array shrinks by as many, so the struct's size and
 *     the offsets of the fields before it stay the same, and a program built against an
 *     older header passes zeros where the new field lives.
 *   - A capability that needs more than the reserved words gets a new options struct, not
 *     a new variant of the function. The last reserved word of a struct is kept for that:
 *     a pointer to a struct of further options, so a field takes a reserved word only while
 *     another one is left after it. */
#define RILL_OPTS_RESERVED 4

#if defined(__GNUC__)
#define RILL_API __attribute__((visibility("default")))
#define RILL_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define RILL_API
#define RILL_PRINTF(f, a)
#endif

/* ---------------------------------------------------------------- version and features */

#define RILL_VERSION_MAJOR 0
#define RILL_VERSION_MINOR 2
#define RILL_VERSION_PATCH 0
#define RILL_VERSION_STRING "0.2.0"

RILL_API const char* rill_version(void); /* "MAJOR.MINOR.PATCH" of the linked library */

typedef enum rill_feature {
  RILL_FEATURE_CUDA = 1, /* built with the CUDA runtime (a device may still be absent) */
  RILL_FEATURE_JPEG,     /* libjpeg-turbo decoding */
  RILL_FEATURE_PNG,      /* libpng decoding */
  RILL_FEATURE_SQLITE,   /* SQLite source */
  RILL_FEATURE_THREADS,  /* worker threads (always 1 on POSIX builds) */
  RILL_FEATURE_WEBP,     /* libwebp decoding */
  RILL_FEATURE_GZIP,     /* gzip-compressed CSV files (zlib) */
  RILL_FEATURE_ZSTD      /* zstd-compressed CSV files (libzstd) */
} rill_feature_t;

RILL_API int rill_has_feature(rill_feature_t feature); /* 1 or 0 */
RILL_API int rill_cuda_device_count(void);             /* 0 without CUDA or without a device */

/* ---------------------------------------------------------------- errors */

enum {
  RILL_OK = 0,
  RILL_END = 1,         /* iterator exhausted: not an error */
  RILL_EINVAL = -1,     /* wrong API use: bad argument, unknown column, wrong type */
  RILL_ENOMEM = -2,     /* allocation failed; the objects involved stay usable */
  RILL_EIO = -3,        /* a file could not be opened or read */
  RILL_EFORMAT = -4,    /* malformed or corrupt data (CSV, image, ...) */
  RILL_ENOTSUP = -5,    /* valid but unsupported: a type, a format, a missing optional library */
  RILL_ENODEV = -6,     /* no CUDA device, or CUDA support not built in */
  RILL_ERANGE = -7,     /* a value does not fit (integer overflow, pixel limit, ...) */
  RILL_ESQL = -8,       /* SQLite reported an error */
  RILL_ECUDA = -9,      /* the CUDA runtime reported an error */
  RILL_ESTAGE = -10     /* a user stage function failed without giving a code */
};

#define RILL_ERROR_MESSAGE_SIZE 512

typedef struct rill_error {
  int code;        /* RILL_OK or a RILL_E* code */
  int64_t row;     /* row of the iterated dataframe that failed, or -1 */
  int column;      /* column of the iterated dataframe that failed, or -1 */
  char message[RILL_ERROR_MESSAGE_SIZE]; /* what failed and where (file:line, row, column) */
} rill_error_t;

RILL_API const char* rill_strerror(int code); /* static text for a status code */

/* Sets err->code and err->message (printf-style); leaves err->row and err->column as they
 * are, so a stage function may set err->row (the cell index within its call) first.
 * Returns `code`. A NULL err is allowed. Stage functions use it to report failures. */
RILL_API int rill_error_set(rill_error_t* err, int code, const char* fmt, ...) RILL_PRINTF(3, 4);
RILL_API void rill_error_clear(rill_error_t* err); /* code 0, row -1, column -1, "" */

/* ---------------------------------------------------------------- allocation */

/* Every allocation rill makes (objects and buffers) goes through this allocator.
 * alloc returns memory aligned to `alignment` (a power of two, at least 64 for buffers)
 * or NULL; rill then returns RILL_ENOMEM and leaves its objects usable. */
typedef struct rill_allocator {
  void* (*alloc)(size_t size, size_t alignment, void* ctx);
  void (*free)(void* ptr, void* ctx);
  void* ctx;
} rill_allocator_t;

/* Sets the allocator of later allocations (NULL, or one without alloc/free: the default,
 * posix_memalign/free). Each block records the allocator that made it and is always
 * returned to that one: objects and buffers made before a change stay valid and are freed
 * by their own allocator, so an allocator's ctx (and its functions) must stay usable until
 * every block it made is freed. rill asks for 64 bytes more than it uses per block, with an
 * alignment of 64, and for an array's header (small, made and freed often: a row's view, a
 * slice) 80 bytes more with an alignment of 16 (malloc serves those from its per-thread cache).
 * Not thread-safe: call it while no other thread is inside rill. */
RILL_API void rill_set_allocator(const rill_allocator_t* allocator);

/* ---------------------------------------------------------------- types */

typedef enum rill_dtype {                   /* numeric values are not a contract */
  RILL_BOOL = 1,                            /* one byte per value (0/1) */
  RILL_INT8, RILL_INT16, RILL_INT32, RILL_INT64,
  RILL_UINT8, RILL_UINT16, RILL_UINT32, RILL_UINT64,
  RILL_FLOAT16, RILL_BFLOAT16, RILL_FLOAT32, RILL_FLOAT64,
  RILL_STRING,                              /* UTF-8, variable length */
  RILL_BINARY,                              /* bytes, variable length */
  RILL_TIMESTAMP_US                         /* int64 microseconds since the epoch, UTC */
} rill_dtype_t;

typedef enum rill_device_type {             /* codes equal DLPack's and Arrow's */
  RILL_DEVICE_CPU = 1,
  RILL_DEVICE_CUDA = 2,
  RILL_DEVICE_CUDA_HOST = 3                 /* pinned host memory */
} rill_device_type_t;

typedef struct rill_device {
  rill_device_type_t type;                  /* 0 is read as RILL_DEVICE_CPU */
  int id;                                   /* CUDA ordinal; 0 for CPU */
} rill_device_t;

#define RILL_MAX_NDIM 8

typedef struct rill_type {                  /* the type of one cell */
  rill_dtype_t dtype;
  int ndim;                                 /* 0: scalar cell */
  int64_t shape[RILL_MAX_NDIM];             /* -1: the size varies per cell */
} rill_type_t;

RILL_API rill_type_t rill_type_scalar(rill_dtype_t dtype);
RILL_API rill_type_t rill_type_tensor(rill_dtype_t dtype, int ndim, const int64_t* shape);
RILL_API size_t rill_dtype_size(rill_dtype_t dtype);        /* bytes per element; 0 for STRING/BINARY */
RILL_API const char* rill_dtype_name(rill_dtype_t dtype);   /* "int64", "float32", ... */
RILL_API int rill_type_is_fixed(const rill_type_t* type);   /* fixed bytes per cell */
RILL_API int64_t rill_type_cell_bytes(const rill_type_t* type); /* -1 when not fixed */
RILL_API int rill_type_equal(const rill_type_t* a, const rill_type_t* b);
/* Writes "float32[3,224,224]" or "uint8[-1,-1,3]" into buf; returns buf. */
RILL_API char* rill_type_format(const rill_type_t* type, char* buf, size_t size);

/* ---------------------------------------------------------------- arrays */

typedef struct rill_array_priv rill_array_priv_t;

/* `length` cells of one type in Arrow-compatible buffers (64-byte aligned when rill allocated
 * them; wrapped caller or Arrow buffers keep their producer's alignment).
 *   fixed-shape cells (numeric/bool dtypes, no -1 dimension): `data` is the C-contiguous
 *     tensor [length, shape...]; `offsets` and `shapes` are NULL.
 *   STRING / BINARY scalars: `offsets` holds length+1 byte offsets into `data`, offsets[0] == 0.
 *   cells with a -1 dimension: `offsets` holds length+1 byte offsets into `data` and `shapes`
 *     holds length*ndim int64 (the shape of cell i at shapes[i*ndim]).
 *   `validity`: LSB-first bitmap, bit i set = cell i valid; NULL = all valid.
 *   `null_count`: exact. The value bytes of a null fixed-shape cell are zero when rill
 *   produced the array (rill_array_set_null zeroes them); a null variable cell is empty.
 *   Wrapped caller buffers keep whatever they hold.
 * Arrays are reference counted; the fields are read-only except while a stage function
 * fills its output array. */
typedef struct rill_array {
  rill_type_t type;
  int64_t length;
  int64_t null_count;
  uint8_t* validity;
  int64_t* offsets;
  int64_t* shapes;
  void* data;
  int64_t data_size;          /* bytes of `data` in use */
  rill_device_t device;
  void* event;                /* cudaEvent_t recorded when the data is ready, or NULL */
  rill_array_priv_t* priv;
} rill_array_t;

/* A new standalone array of `length` cells: fixed-shape data zero-filled; variable cells get
 * offsets (all zero: empty cells) and, for -1 shapes, zeroed shapes; grow data with
 * rill_array_reserve. Reference count 1. */
RILL_API int rill_array_new(rill_type_t type, int64_t length, rill_array_t** out, rill_error_t* err);

/* Wraps caller buffers without copying (layout as above). `release(ctx)` is called when the
 * last reference goes; it may be NULL when the caller keeps the buffers alive longer than
 * every use. null_count < 0 means "count it". */
RILL_API int rill_array_wrap(rill_type_t type, int64_t length, void* data, int64_t data_size,
                             uint8_t* validity, int64_t null_count, int64_t* offsets,
                             int64_t* shapes, void (*release)(void* ctx), void* ctx,
                             rill_array_t** out, rill_error_t* err);

/* Zero-copy view of cells [start, start+n): shares data, holds a reference on `a`. */
RILL_API int rill_array_slice(const rill_array_t* a, int64_t start, int64_t n, rill_array_t** out,
                              rill_error_t* err);
/* A deep copy into fresh host buffers. */
RILL_API int rill_array_copy(const rill_array_t* a, rill_array_t** out, rill_error_t* err);

RILL_API rill_array_t* rill_array_retain(const rill_array_t* a);  /* returns a */
RILL_API void rill_array_release(const rill_array_t* a);          /* NULL is a no-op */
RILL_API int64_t rill_array_refcount(const rill_array_t* a);

/* Building (only on an array you are filling): */
RILL_API int rill_array_reserve(rill_array_t* a, int64_t data_bytes); /* keeps contents; RILL_ENOMEM */
/* Appends `n` bytes as cell i of a variable-length array (cells are appended in order:
 * i must equal the number of cells already set, and a producer sets every cell, null ones
 * with n = 0). `bytes` NULL reserves the n bytes for the caller to write at
 * rill_array_cell(a, i). For -1 shapes, `shape` gives the cell's shape (ndim values);
 * otherwise it is ignored. */
RILL_API int rill_array_set_var(rill_array_t* a, int64_t i, const void* bytes, int64_t n,
                                const int64_t* shape);
RILL_API int rill_array_set_null(rill_array_t* a, int64_t i);  /* allocates validity on first use */
RILL_API int rill_array_is_valid(const rill_array_t* a, int64_t i);
/* Pointer to cell i's bytes and their count (fixed or variable cells). */
RILL_API const void* rill_array_cell(const rill_array_t* a, int64_t i, int64_t* nbytes);
/* The shape of cell i (the type's shape, or the per-cell shape); returns ndim. */
RILL_API int rill_array_cell_shape(const rill_array_t* a, int64_t i, int64_t* shape);
/* Host-side wait for the array's event (no-op on host arrays). */
RILL_API int rill_array_sync(const rill_array_t* a, rill_error_t* err);
/* Orders the work enqueued later on `cuda_stream` (a cudaStream_t of the array's device; NULL =
 * the legacy default stream) after the array's data is ready; the host does not wait. No-op
 * on arrays without an event (host arrays, data already complete). */
RILL_API int rill_array_stream_wait(const rill_array_t* a, void* cuda_stream, rill_error_t* err);

/* ---------------------------------------------------------------- streams */

typedef struct rill_stream rill_stream_t;

RILL_API rill_stream_t* rill_stream_new_cpu(void);     /* NULL only when out of memory */
/* A CUDA stream on `device`. Without CUDA support or a device: RILL_ENODEV with a message. */
RILL_API int rill_stream_new_cuda(int device, rill_stream_t** out, rill_error_t* err);
/* A rill stream over the caller's CUDA stream `cuda_stream` (a cudaStream_t of `device`, e.g.
 * the training loop's; NULL = the legacy default stream), to give an iterator as its consumer
 * stream (rill_iter_opts_t.stream): batches are then ordered on it with events (no host wait),
 * and their device memory is reused only after the work enqueued on it before the iterator
 * moved past them. rill_stream_free frees the wrapper (after the iterators that use it),
 * never the CUDA stream, which must outlive the wrapper. RILL_EINVAL when the stream belongs
 * to another device; RILL_ENODEV without CUDA or a device. */
RILL_API int rill_stream_wrap_cuda(int device, void* cuda_stream, rill_stream_t** out, rill_error_t* err);
RILL_API void* rill_stream_cuda_handle(const rill_stream_t* s); /* cudaStream_t, NULL for CPU */
RILL_API rill_device_t rill_stream_device(const rill_stream_t* s);
RILL_API int rill_stream_synchronize(rill_stream_t* s, rill_error_t* err);
RILL_API void rill_stream_free(rill_stream_t* s);

/* ---------------------------------------------------------------- dataframes */

typedef struct rill_df rill_df_t;
typedef struct rill_exec rill_exec_t;

typedef struct rill_field {
  const char* name;
  rill_type_t type;
  int nullable;
  rill_device_t device;
} rill_field_t;

typedef enum rill_stage_where {
  RILL_STAGE_CPU = 0,         /* worker threads; rows split across them (fn must be reentrant) */
  RILL_STAGE_CPU_SERIAL,      /* one call at a time, on a worker thread */
  RILL_STAGE_CUDA             /* fn enqueues work on rill_exec_cuda_stream(exec) */
} rill_stage_where_t;

typedef enum rill_on_error {
  RILL_ON_ERROR_RAISE = 0,    /* rill_iter_next returns the error (row, column, message) */
  RILL_ON_ERROR_SKIP,         /* the row is dropped and counted in stats */
  RILL_ON_ERROR_NULL          /* the cell becomes null */
} rill_on_error_t;

typedef struct rill_stage_opts {
  rill_stage_where_t where;
  int64_t grain;              /* rows per task; 0 = the engine picks */
  rill_on_error_t on_error;
  int nullable;               /* the column may hold nulls (set automatically under NULL) */
  int device;                 /* CUDA device of a RILL_STAGE_CUDA stage */
  int64_t reserved[RILL_OPTS_RESERVED]; /* zero (room to grow, see "Option structs") */
} rill_stage_opts_t;

RILL_API int rill_df_new(int64_t rows, rill_df_t** out, rill_error_t* err);
RILL_API void rill_df_free(rill_df_t* df);   /* NULL is a no-op; derived dataframes keep parents alive */
RILL_API int64_t rill_df_rows(const rill_df_t* df);
RILL_API int rill_df_ncolumns(const rill_df_t* df);
/* The index of the column called `name`, or RILL_EINVAL (no such column, NULL argument).
 * A failed lookup is remembered per thread: a function of this thread later given a
 * negative column index for the same dataframe reports "no column named '<name>'" (the
 * last name that failed) along with the index. Thread-safe. */
RILL_API int rill_df_column(const rill_df_t* df, const char* name);
RILL_API const rill_field_t* rill_df_field(const rill_df_t* df, int column); /* NULL if out of range */

/* Stage functions (sources, maps, reduces) and their errors.
 *   Before each call the engine sets err->code = 0, err->row = -1, err->column = -1.
 *   A function that fails returns a negative code (through rill_error_set) and may set
 *   err->row to the index i in [0, n) of the cell at fault; cells before i are kept.
 *   Without err->row the whole call (all its cells) failed. A positive status other than
 *   RILL_OK is reported as RILL_ESTAGE. The engine then applies the stage's on_error:
 *   RAISE: rill_iter_next returns the error for the row of the iterated dataframe
 *     (err->row) and the requested column that needed the stage (err->column), with a
 *     message naming the stage, the row and the function's own message; the next call
 *     continues with the following row (or batch);
 *   NULL: the cell becomes null and the function is called again for the cells after it;
 *   SKIP: the row is dropped (a batch that held it comes out shorter, so batch i still
 *     covers parent rows [i*B, i*B+B)) and the function is called again for the cells
 *     after it.
 *   Functions allocate their output with rill_exec_alloc. With RILL_STAGE_CPU they run
 *   concurrently on different rows and must be reentrant.
 *
 * Adding a column to a dataframe that already has a derived dataframe or an iterator is
 * refused (RILL_EINVAL): add columns first, then derive and iterate. A filter's kept rows
 * are computed once, when it is created (epoch 0), so its row count is fixed. */

/* Source column: fill `out` with the cells of rows[0..n) (row indices of this dataframe). */
typedef int (*rill_source_fn)(const int64_t* rows, int64_t n, rill_array_t* out,
                              rill_exec_t* exec, void* ctx, rill_error_t* err);
RILL_API int rill_df_add_source(rill_df_t* df, const char* name, rill_type_t type, rill_source_fn fn,
                                void* ctx, void (*ctx_free)(void*), const rill_stage_opts_t* opts,
                                rill_error_t* err); /* the new column index, or < 0 */

/* Map: one derived column computed from input columns, for a chunk of rows;
 * in[i]->length == the output length. Same error convention as sources. */
typedef int (*rill_map_fn)(const rill_array_t* const* in, int nin, rill_array_t* out,
                           rill_exec_t* exec, void* ctx, rill_error_t* err);
RILL_API int rill_df_map(rill_df_t* df, const char* name, rill_type_t type, const int* inputs,
                         int ninputs, rill_map_fn fn, void* ctx, void (*ctx_free)(void*),
                         const rill_stage_opts_t* opts, rill_error_t* err); /* column index or < 0 */

/* Reduce: a new dataframe of ceil(rows/k) rows and one column (named like `column`);
 * row i = fn(rows [i*k, min(i*k+k, rows)) of `column`). */
typedef int (*rill_reduce_fn)(const rill_array_t* group, rill_array_t* out /* 1 cell */,
                              rill_exec_t* exec, void* ctx, rill_error_t* err);
RILL_API int rill_df_reduce(rill_df_t* df, int column, int64_t k, rill_type_t type, rill_reduce_fn fn,
                            void* ctx, void (*ctx_free)(void*), rill_df_t** out, rill_error_t* err);

typedef enum rill_layout {
  RILL_LAYOUT_HWC = 0,        /* cells as they are (channels last) */
  RILL_LAYOUT_CHW = 1         /* channels first: a 3-D HWC cell is transposed */
} rill_layout_t;
#define RILL_LAYOUT_NHWC RILL_LAYOUT_HWC
#define RILL_LAYOUT_NCHW RILL_LAYOUT_CHW

typedef struct rill_batch_opts {
  int drop_last;              /* drop a short last batch */
  rill_layout_t layout;       /* NCHW transposes 3-D HWC cells; NHWC keeps cells as they are */
  int pinned;                 /* batch buffers in pinned host memory (CUDA builds) */
  int64_t reserved[RILL_OPTS_RESERVED]; /* zero (room to grow, see "Option structs") */
} rill_batch_opts_t;

/* Batch: a new dataframe whose row i holds rows [i*B, i*B+B) of the chosen columns,
 * stacked into arrays of length <= B (columns keep their names and types). */
RILL_API int rill_df_batch(rill_df_t* df, const int* columns, int ncolumns, int64_t batch,
                           const rill_batch_opts_t* opts, rill_df_t** out, rill_error_t* err);

/* Views: a new dataframe over the same columns (same indices and names) plus any columns
 * mapped onto it later. */
RILL_API int rill_df_shuffle(rill_df_t* df, uint64_t seed, rill_df_t** out, rill_error_t* err);
RILL_API int rill_df_shard(rill_df_t* df, int rank, int world, rill_df_t** out, rill_error_t* err);
RILL_API int rill_df_filter(rill_df_t* df, int column /* BOOL */, rill_df_t** out, rill_error_t* err);
/* Rows by position: rows [start, start + n) (within the rows there are, else RILL_EINVAL), and
 * the rows at rows[0..n) in that order (each in [0, rows); repeats allowed; the list is
 * copied). A split into training and validation rows, or a subset. Over a shuffled parent
 * they are positions in each epoch's order, which changes with the epoch: for a fixed random
 * split, take the rows of a permutation made once. */
RILL_API int rill_df_slice(rill_df_t* df, int64_t start, int64_t n, rill_df_t** out, rill_error_t* err);
RILL_API int rill_df_take(rill_df_t* df, const int64_t* rows, int64_t n, rill_df_t** out, rill_error_t* err);

/* Concatenation: a new dataframe of the rows of parts[0], then those of parts[1], ... (a
 * dataset in several files or tables read as one). The parts hold the same column names (in
 * any order: the result has parts[0]'s order; at least one) with equal types, and are
 * dataframes of sources only: read from files, memory or a database, made by rill_df_new +
 * rill_df_add_source, or concatenations themselves. Maps, views, batches and reduces are
 * derived from the result, not given as parts (RILL_EINVAL, naming the part and column). The
 * parts' sources run on the CPU and handle errors alike (the same on_error: the result's); a
 * column is nullable when it is in any part. The parts are kept alive and frozen (no columns
 * can be added to them). Each cell is read by its part's source, given the part's own row ids
 * (rill_exec_rows and rill_exec_rng still see the result's); a call over rows of several parts
 * is split into one call per part whose cells are then copied into place (rows of one part
 * that a memory source lends are still lent, without a copy). RILL_OK, RILL_EINVAL, RILL_ENOTSUP (a CUDA
 * source), RILL_ERANGE, RILL_ENOMEM. */
RILL_API int rill_df_concat(rill_df_t* const* parts, int nparts, rill_df_t** out, rill_error_t* err);
/* The number of parts of a dataframe made by rill_df_concat (0 for any other dataframe, or
 * NULL), and the first min(that, cap) of them in parts[] (unless NULL) as new references: free
 * each with rill_df_free. (The files of rill_df_from_csv_files, to ask rill_csv_bad_rows.) */
RILL_API int rill_df_concat_parts(const rill_df_t* df, rill_df_t** parts, int cap);
/* Side by side: a new dataframe of the columns of parts[0], then those of parts[1], ... (its row
 * r is row r of every part: features from one source and labels from another, in the same
 * order). The parts have the same number of rows and no column name twice between them, and
 * are dataframes of sources only, as for rill_df_concat (RILL_EINVAL naming the part and
 * column otherwise; RILL_ENOTSUP for a CUDA source). Each column keeps its source's options
 * (on_error, nullability, grain; a CPU_SERIAL source keeps its part's lock) and a source
 * group (a CSV file's, a query's) is still called once for all the columns it fills, and
 * what a source's own functions tell of its columns still holds (rill_csv_bad_rows,
 * rill_image_folder_classes answer for the result and its views). The parts are kept alive
 * and frozen. RILL_OK, RILL_EINVAL, RILL_ENOTSUP, RILL_ENOMEM. */
RILL_API int rill_df_concat_columns(rill_df_t* const* parts, int nparts, rill_df_t** out, rill_error_t* err);

/* ---------------------------------------------------------------- execution context */

typedef struct rill_rng {     /* xoshiro256** state; seeded by the engine */
  uint64_t s[4];
} rill_rng_t;

RILL_API uint64_t rill_rng_u64(rill_rng_t* rng);
RILL_API double rill_rng_uniform(rill_rng_t* rng);                /* [0, 1) */
RILL_API double rill_rng_range(rill_rng_t* rng, double lo, double hi); /* [lo, hi) */
/* A generator for (seed, epoch, row, column): the same four give the same stream. */
RILL_API rill_rng_t rill_rng_seeded(uint64_t seed, int64_t epoch, int64_t row, int64_t column);

/* Generator for cell i of the current call, seeded from (iterator seed, epoch, row id of
 * cell i, column): independent of threads, prefetch depth and call order. */
RILL_API rill_rng_t rill_exec_rng(const rill_exec_t* exec, int64_t i);
RILL_API const int64_t* rill_exec_rows(const rill_exec_t* exec); /* row ids of this call's cells */
RILL_API int64_t rill_exec_epoch(const rill_exec_t* exec);
RILL_API int rill_exec_worker(const rill_exec_t* exec);          /* worker index, -1 = caller */
RILL_API int rill_exec_column(const rill_exec_t* exec);          /* the column being computed */
RILL_API rill_stream_t* rill_exec_stream(const rill_exec_t* exec);
RILL_API void* rill_exec_cuda_stream(const rill_exec_t* exec);   /* cudaStream_t or NULL */
/* Prepares `out` for `length` cells of `type`. Unlike rill_array_new, fixed-shape data is
 * NOT zero-filled (the buffer may come from a pool and hold earlier rows): the stage must
 * write every cell, or make it null with rill_array_set_null, which zeroes the cell's bytes.
 * Variable cells get zeroed offsets (and shapes), as rill_array_new. When the engine has
 * pre-assigned `out` (a slot of a batch buffer), its memory is used: no copy later.
 * Returns RILL_OK, RILL_ENOMEM, or RILL_EINVAL when type/length contradict the slot. */
RILL_API int rill_exec_alloc(rill_exec_t* exec, rill_array_t* out, rill_type_t type, int64_t length);

/* ---------------------------------------------------------------- iterators */

typedef struct rill_iter rill_iter_t;

#define RILL_PREFETCH_NONE (-1)  /* compute each row inside rill_iter_next */
#define RILL_THREADS_NONE (-1)   /* no worker threads: all work on the calling thread */
#define RILL_MAX_THREADS 256     /* larger thread counts are clamped to this */

typedef struct rill_iter_opts {
  const int* columns;         /* columns to produce; NULL = all */
  int ncolumns;
  /* rows computed ahead; 0 = 2; RILL_PREFETCH_NONE = none. Work is prefetched in chunks
   * (one batch of a batched dataframe, or a stage's grain of rows), and never more chunks
   * than the dataframe holds: any value up to INT_MAX is valid and costs at most one
   * in-flight chunk per chunk of the dataframe. */
  int prefetch;
  int threads;                /* worker threads; 0 = one per core this process may use
                                 (its CPU affinity); RILL_THREADS_NONE = none; clamped to
                                 RILL_MAX_THREADS. Waiting for a chunk, the calling thread
                                 helps with its tasks only when threads < those cores. */
  uint64_t seed;              /* seed of rill_exec_rng */
  int64_t epoch;              /* first epoch */
  rill_stream_t* stream;      /* the consumer's stream; NULL = host */
  /* rows per record batch of rill_df_export_stream when the dataframe is not batched;
   * 0 = 65536. A batched dataframe gives one record batch per batch. Iterators ignore it. */
  int64_t batch_rows;
  /* 1: at the end of an epoch, prefetch goes on into the first chunks of epoch + 1 (as many
   * as the prefetch depth allows), so that after rill_iter_set_epoch(it, epoch + 1), which
   * keeps them, the next epoch's first rows are ready or under way instead of starting cold
   * (a training loop's pattern); any other set_epoch, a seek or a restore drops them, and
   * rill_iter_free cancels those not started and waits for the running ones. 0 = prefetch
   * stops at the epoch's last row (a single pass does no work past it). Needs prefetch; the
   * rows are the same either way. */
  int next_epoch;
  int64_t reserved[RILL_OPTS_RESERVED - 2]; /* zero (room to grow, see "Option structs") */
} rill_iter_opts_t;

typedef struct rill_row {
  int64_t index;              /* row of the iterated dataframe */
  int ncolumns;
  const rill_array_t* const* columns; /* borrowed until the next call on the iterator */
} rill_row_t;

typedef struct rill_iter_state { /* O(1) position: restore reproduces the following rows */
  uint64_t seed;
  int64_t epoch;
  int64_t cursor;
  uint64_t fingerprint;       /* of the dataframe and columns; restore checks it */
} rill_iter_state_t;

typedef struct rill_iter_stats {
  int64_t rows;               /* rows handed out (batches for a batched dataframe) */
  int64_t cells;              /* parent rows inside them */
  int64_t skipped;            /* rows dropped under RILL_ON_ERROR_SKIP */
  int64_t nulled;             /* cells nulled under RILL_ON_ERROR_NULL */
  int64_t errors;             /* errors returned under RILL_ON_ERROR_RAISE */
  int64_t wait_ns;            /* time rill_iter_next blocked waiting for data; a chunk it computes
                               * itself in under 10 us is timed one in 8, the others counted at
                               * the last timed chunk's time */
  int64_t compute_ns;         /* time spent inside stage functions (all threads); runs of a stage
                               * under 5 us are timed one in 8, the others counted at the cost per
                               * row of its last timed run */
  int64_t stage_calls;        /* stage function calls */
  int64_t allocs;             /* buffer allocations that missed the pools */
  int64_t reuses;             /* buffer allocations served from the pools */
} rill_iter_stats_t;

RILL_API int rill_iter_new(rill_df_t* df, const rill_iter_opts_t* opts, rill_iter_t** out,
                           rill_error_t* err);
/* RILL_OK (row filled), RILL_END (on every call once exhausted), or < 0: the error of the
 * failing row with err->row/err->column set; the next call continues with the next row. */
RILL_API int rill_iter_next(rill_iter_t* it, rill_row_t* row, rill_error_t* err);
/* 1 when the next rill_iter_next returns at once, computing and waiting for nothing: its row
 * (or error) is one of a chunk the iterator already holds; 0 when it may compute or wait (a
 * chunk's first row, the end), and for NULL. For bindings that give up a lock around
 * rill_iter_next (Python's GIL): such a row takes tens of nanoseconds, less than the lock's
 * release and retake. */
RILL_API int rill_iter_ready(const rill_iter_t* it);
RILL_API const rill_array_t* rill_row_get(const rill_row_t* row, int i); /* borrowed */
/* The calls below take no rill_error_t (their signatures are fixed): when one fails, its
 * message is kept in the iterator and rill_iter_error returns it. */
/* Starts computing the next n rows now (in chunks, rounded up to whole chunks), as far as
 * the iterator's prefetch depth allows (past the epoch's last row: with next_epoch, the next
 * epoch's first rows); prefetch happens anyway after each rill_iter_next, so calling it is
 * optional. RILL_OK, or RILL_EINVAL for n < 0. */
RILL_API int rill_iter_prefetch(rill_iter_t* it, int n);
/* Continues from `row` (0..rows) of the current epoch; drops prefetched rows. RILL_OK or
 * RILL_EINVAL. */
RILL_API int rill_iter_seek(rill_iter_t* it, int64_t row);
/* Starts epoch `epoch` (a new shuffle) at row 0; drops prefetched rows, except those of
 * epoch + 1 started ahead (rill_iter_opts_t.next_epoch) when `epoch` is that one. RILL_OK, or
 * RILL_EINVAL for a NULL iterator. */
RILL_API int rill_iter_set_epoch(rill_iter_t* it, int64_t epoch);
RILL_API int64_t rill_iter_epoch(const rill_iter_t* it);
/* Writes the iterator's position into *st (O(1)). RILL_OK or RILL_EINVAL (st NULL). */
RILL_API int rill_iter_save(const rill_iter_t* it, rill_iter_state_t* st);
/* Continues from a saved position. RILL_EINVAL when st comes from another dataframe or
 * column selection, or its cursor is out of range. */
RILL_API int rill_iter_restore(rill_iter_t* it, const rill_iter_state_t* st);
/* The last failure of rill_iter_prefetch, seek, set_epoch, save or restore on `it` (code
 * and message; its row and column are -1); defined only after one of them failed. Owned by
 * the iterator, valid until its next call. For a NULL iterator: a static error. */
RILL_API const rill_error_t* rill_iter_error(const rill_iter_t* it);
/* Counts since the iterator was made, over all its epochs (set_epoch, seek and restore do not
 * reset them): a count per epoch is the difference of two calls. rows, cells, skipped, nulled
 * and errors count when rows are handed out (rows computed ahead: in their own epoch);
 * compute_ns, stage_calls, allocs and reuses as the work is done. */
RILL_API void rill_iter_stats(const rill_iter_t* it, rill_iter_stats_t* st);
/* After fork(), in the child, an iterator the parent made with worker threads belongs to the
 * parent: next, prefetch, seek, set_epoch and restore fail with RILL_EINVAL ("... made before
 * fork() ..."), and rill_iter_free lets go of its dataframe without waiting for or touching
 * what those threads were doing (its buffers stay the parent's copy-on-write pages). An
 * iterator made with RILL_THREADS_NONE goes on in the child. */
RILL_API void rill_iter_free(rill_iter_t* it);

/* ---------------------------------------------------------------- native interchange view */

/* Mirrors the Python dataframe interchange protocol's Column and Buffer. */
typedef enum rill_interchange_kind {
  RILL_KIND_INT = 0, RILL_KIND_UINT = 1, RILL_KIND_FLOAT = 2, RILL_KIND_BOOL = 20,
  RILL_KIND_STRING = 21, RILL_KIND_DATETIME = 22, RILL_KIND_CATEGORICAL = 23
} rill_interchange_kind_t;

typedef enum rill_interchange_null {
  RILL_NULL_NON_NULLABLE = 0, RILL_NULL_USE_NAN = 1, RILL_NULL_USE_SENTINEL = 2,
  RILL_NULL_USE_BITMASK = 3, RILL_NULL_USE_BYTEMASK = 4
} rill_interchange_null_t;

typedef struct rill_interchange_dtype {
  rill_interchange_kind_t kind;
  int bit_width;
  const char* format;         /* Arrow format string ("l", "u", "tsu:UTC", ...) */
  char endianness;            /* '=' native, '|' not applicable */
} rill_interchange_dtype_t;

typedef struct rill_interchange_buffer {
  const void* ptr;            /* NULL when absent */
  int64_t bufsize;            /* bytes */
  rill_device_t device;
  rill_interchange_dtype_t dtype;
} rill_interchange_buffer_t;

typedef struct rill_interchange_column {
  int64_t size;               /* cells */
  int64_t offset;             /* always 0 */
  rill_interchange_dtype_t dtype;
  rill_interchange_null_t null_kind;
  int64_t null_value;         /* the sentinel, or the mask value that means null (0) */
  int64_t null_count;
  rill_interchange_buffer_t data, validity, offsets;
} rill_interchange_column_t;

/* Fills the view (borrowed: valid while `a` is referenced). BOOL: kind BOOL, bit width 8
 * (one byte per value); STRING: data uint8 + offsets int64 'l'; TIMESTAMP_US: DATETIME
 * 'tsu:UTC'; validity: a bit mask with null_value 0, else non-nullable. BINARY, BFLOAT16 and
 * tensor cells: RILL_ENOTSUP; NULL arguments: RILL_EINVAL. */
RILL_API int rill_array_interchange(const rill_array_t* a, rill_interchange_column_t* out);

#ifdef __cplusplus
}
#endif
#endif /* RILL_H */
