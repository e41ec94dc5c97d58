/* rill addons: sources (memory, CSV, SQLite, files, images) and operators (image decode and
 * augmentation, normalize, one-hot, to-device). An addon whose library was not found at build
 * time still links and returns RILL_ENOTSUP with a message naming the missing library.
 * Option structs grow by the rule of "Option structs" in rill.h (append only, zero keeps the
 * earlier behaviour; no _ex functions): each ends with `int64_t reserved[RILL_OPTS_RESERVED]`
 * (zero), from which a new field takes its words, so sizes and offsets stay the same. */
#ifndef RILL_ADDONS_H
#define RILL_ADDONS_H

#include "rill.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ================================================================ memory */

/* A dataframe whose source columns are the given arrays (all of one length). With copy = 0
 * the arrays are referenced (rill_array_wrap borrows caller buffers without copying);
 * with copy = 1 they are deep-copied. Columns are nullable when their array has a validity
 * bitmap. */
RILL_API int rill_df_from_arrays(const char* const* names, const rill_array_t* const* arrays,
                                 int ncolumns, int copy, rill_df_t** out, rill_error_t* err);

/* ================================================================ CSV */

/* A column type override: by name (when `name` is not NULL) or by 0-based index. */
typedef struct rill_csv_column {
  const char* name;           /* header name; NULL: use `index` */
  int index;                  /* 0-based column index when name is NULL */
  rill_dtype_t dtype;         /* BOOL, INT8..UINT64, FLOAT32, FLOAT64, STRING, TIMESTAMP_US */
} rill_csv_column_t;

/* Options of the CSV source (zero = defaults).
 * Parsing follows RFC 4180 (quoted fields, doubled quotes, line breaks inside quotes, CRLF or
 * LF line ends, a last line without a line end); a UTF-8 byte order mark is skipped; blank
 * lines are skipped (and comment lines and, under trim, lines of blanks: see the options). A
 * quote inside an unquoted field, and characters after a closing quote, are kept literally
 * (as Python's csv module does). */
/* The encoding of a CSV file's text (its string cells and header names; rill's text is UTF-8),
 * and of a SQLite source's TEXT values (rill_sqlite_opts_t.encoding). */
typedef enum rill_csv_encoding {
  RILL_CSV_UTF8 = 0,          /* UTF-8: other bytes are an error (on_error decides; a name: the open fails) */
  RILL_CSV_UTF8_LOSSY,        /* UTF-8, each ill-formed part (its longest start of a character) read as U+FFFD */
  RILL_CSV_LATIN1             /* ISO-8859-1: each byte is the character of its value */
} rill_csv_encoding_t;

typedef struct rill_csv_opts {
  char delimiter;             /* 0 = ',' */
  char quote;                 /* 0 = '"' */
  /* Column names come from the header row (quotes removed). An empty name becomes
   * column_<k> (k = the 0-based column index); a name seen before gets a suffix .1, .2, ...
   * (the first unused one: a,a,a.1 -> a, a.1, a.1.1). An unterminated quote in the header
   * row is RILL_EFORMAT naming file:line. */
  int no_header;              /* 1: the first row is data; columns are named column_0, ... */
  int no_infer;               /* 1: every column not overridden is STRING */
  const rill_csv_column_t* columns; /* type overrides (borrowed for the call) */
  int ncolumns;
  /* A value that does not fit its column's type: RAISE (error naming file, line, column),
   * SKIP (the row is dropped by the iterator) or NULL (the cell becomes null). */
  rill_on_error_t on_error;
  /* A row with too few or too many fields, found when the file is opened: RAISE (the open
   * fails naming the line), SKIP (the row is left out of the dataframe) or NULL (missing
   * fields are null; a row with too many fields becomes all nulls); rill_csv_bad_rows
   * lists them. */
  rill_on_error_t on_bad_row;
  int threads;                /* threads of the index pass (rill_df_from_csv_files: of the
                                 files opened side by side, and their index passes); 0 = one
                                 per core */
  int64_t infer_rows;         /* rows sampled for type inference; 0 = 1000; < 0 = all */
  int64_t chunk_bytes;        /* bytes per parallel index chunk; 0 = 8 MiB */
  int borrow;                 /* rill_df_from_csv_buffer: 1 = use the caller's memory (compressed
                                 data is decompressed into memory of its own) */
  const char* name;           /* name of a buffer in messages; NULL = "<buffer>" */
  rill_csv_encoding_t encoding; /* of the text; 0 = UTF-8 (a BINARY override reads bytes as they are) */
  /* 1: spaces and tabs (not the delimiter) around each field and header name are not part
   * of it (" 42 ," is 42; a quote after them opens a quoted field: a, "b, c" has two
   * fields), and a line of only spaces and tabs is skipped like a blank line. Inside quotes
   * they are kept. 0 = as written (Python's csv module: skipinitialspace, on both sides). */
  int trim;
  /* A line whose first character is this one (outside a quoted field) is not a record: it is
   * skipped like a blank line, before the header too; quotes and escape characters in it
   * have no effect. 0 = none (a comment mid-line is text). It cannot be the delimiter, the
   * quote or a line break. */
  char comment;
  /* 0 = none. This character makes the byte after it text, inside quotes or not: a quote, the
   * delimiter, a line break, itself (a\,b is "a,b"; "say \"hi\"" is say "hi"); it is
   * removed (one at the very end of the input is kept). Doubled quotes still work. It cannot
   * be the delimiter, the quote, the comment character or a line break. */
  char escape;
  /* The decimal separator of FLOAT32 / FLOAT64 values (and of those inferred): ',' for files
   * written as 3,14 (the delimiter then another character, ';' mostly); a '.' in such a value
   * makes it fail. No thousands separators. 0 = '.'. It cannot be the delimiter, the quote,
   * the comment or escape character, a line break or a digit, sign or exponent letter. */
  char decimal;
  /* Texts that are null cells, in every column (strings too), quoted or not, compared after
   * quotes, escapes and trim are undone ("NA", "?", "-999"; "" makes empty STRING cells null):
   * a NULL-terminated list of at most RILL_CSV_NULL_VALUES_MAX, copied when the file is
   * opened. They are skipped by type inference. NULL = none (an empty field is still null in
   * non-string columns). */
  const char* const* null_values;
  /* Lines at the start of the input (after a byte order mark) that are not read at all: a
   * preamble before the header row (or before the data under no_header). Physical lines (a
   * line break is '\n', "\r\n" or a lone '\r'): quotes, comment and escape characters in
   * them have no effect. Line numbers in messages count them. An input with no more lines
   * than this is RILL_EFORMAT. 0 = none; negative is RILL_EINVAL. */
  int64_t skip_lines;
  int64_t reserved[RILL_OPTS_RESERVED - 3]; /* zero (room to grow, see "Option structs" in rill.h) */
} rill_csv_opts_t;

#define RILL_CSV_NULL_VALUES_MAX 64

/* A dataframe over a CSV file: one source column per field, typed by inference over the
 * first `infer_rows` rows (int64, float64, bool, ISO 8601 timestamp -> TIMESTAMP_US, else
 * string) unless overridden. An empty field is null in non-string columns; in a STRING
 * column it is the empty string (a STRING cell is null only for a missing field of a bad
 * row kept under on_bad_row NULL, or under on_error NULL). Cells nulled by on_error or
 * on_bad_row NULL are counted in rill_iter_stats' `nulled`.
 * Only a regular file is read: a FIFO, a device or a folder is RILL_EIO naming the path
 * (never a wait). A file whose size reads as 0 (those of /proc) is read until EOF into
 * memory. Otherwise the file is memory-mapped; opening builds an index of row starts (one int64 per row, found
 * in parallel chunks; about twice that while it is built: 80 MB per 10 million rows), and
 * cells are parsed only when an iterator pulls their rows, so a file larger than memory can be
 * read (mapped pages a forward pass has left behind are handed back to the page cache).
 * The file must not change while the dataframe lives. A file that shrinks is noticed (its
 * size is checked before each call reads the mapping) and the iterator returns RILL_EIO
 * naming the file, rather than the process dying of SIGBUS; a shrink that lands during the
 * call that is reading the mapped bytes cannot be caught this way (with prefetch, worker
 * threads read ahead of the caller: a shrink at any moment can meet such a call). The file
 * keeps its descriptor for that check while the CSV files holding one are fewer than an
 * eighth of the process's soft RLIMIT_NOFILE (1,024 at most): a dataset may have more files
 * than a process may hold descriptors. Past that, a file is found by its path: once the path
 * names another file, or none (replaced or removed), the mapping holds the file that was
 * opened and its rows are read whole, but a shrink of it through another name is not seen.
 * A process may hold only so many mappings (Linux's vm.max_map_count, 65,530 by default, for
 * everything in it): once more CSV files are mapped than half of that, the least recently
 * read file that no call is reading is unmapped, and mapped again when a call needs its rows
 * (70,000 files were read so): from its descriptor, or by its path, where it
 * must then still be: removed, replaced or shorter, the call fails with RILL_EIO naming the
 * file and why.
 * Columns may be computed concurrently (RILL_STAGE_CPU).
 * gzip- and zstd-compressed input (known by its magic number, file or buffer;
 * RILL_FEATURE_GZIP, RILL_FEATURE_ZSTD) is decompressed first and its text read as above (line
 * numbers are the text's): into memory, or, past 1 GiB of text, into an unlinked temporary file
 * in $TMPDIR (default /tmp) that is then mapped like a CSV file (RILL_EIO naming the folder
 * when it cannot be written: no space left, say); damaged or truncated data is RILL_EFORMAT. xz, bzip2
 * and zip input (and a format the build lacks its library for) is RILL_ENOTSUP naming it.
 * Returns RILL_OK, RILL_EIO (open/map failed), RILL_EFORMAT (empty input, unterminated
 * quote, bad row under RAISE: the message names file and 1-based line), RILL_EINVAL (bad
 * options, unknown override), RILL_ENOTSUP (override dtype, compression), RILL_ENOMEM.
 * Free with rill_df_free. */
RILL_API int rill_df_from_csv(const char* path, const rill_csv_opts_t* opts, rill_df_t** out,
                              rill_error_t* err);
/* As rill_df_from_csv over `size` bytes in memory: copied, unless opts->borrow is set (then
 * `data` must stay valid and unchanged while the dataframe and its iterators live). */
RILL_API int rill_df_from_csv_buffer(const void* data, size_t size, const rill_csv_opts_t* opts,
                                     rill_df_t** out, rill_error_t* err);
/* Several CSV files with the same columns (in any order) as one dataframe: their rows one file
 * after another (rill_df_concat of rill_df_from_csv of each, with the same options). A column
 * whose type was inferred as int64 in one file and float64 in another is float64 in all (those
 * files are read again with that type given), and one a file had no value to infer from (no
 * rows, only empty or null cells) takes the other files' type; any other difference of types is
 * RILL_EFORMAT naming the column and the two files (give the column's type in opts->columns),
 * as is a file with other columns. Type overrides by index apply to each file's own column at
 * that index: give them by name when the files' orders differ. Messages about a cell or row
 * name its file and line. rill_csv_bad_rows answers for each file's own dataframe
 * (rill_df_concat_parts), not for the result. The files are opened side by side on up to
 * opts->threads threads (0: one per core; 1: one after another), each file's index pass given
 * the threads left over. A batch is cut into tasks of at least 16 rows a file (up to 65,536
 * rows a task; 1,024 for a single file), so that a shuffled batch hands each file a few rows
 * a call rather than one. Returns as rill_df_from_csv (when several files fail, the error of
 * the first of them in `paths`), or RILL_EINVAL (no paths, a NULL path). */
RILL_API int rill_df_from_csv_files(const char* const* paths, int npaths, const rill_csv_opts_t* opts,
                                    rill_df_t** out, rill_error_t* err);
/* A row of a CSV file with too few or too many fields. */
typedef struct rill_csv_bad_row {
  int64_t line;               /* 1-based physical line where the record starts */
  int64_t fields;             /* fields found (the header, or the first row, has the count expected) */
} rill_csv_bad_row_t;

#define RILL_CSV_BAD_ROWS_KEPT 1024 /* bad rows whose lines a CSV dataframe keeps: the first ones */

/* The rows with a wrong number of fields of the CSV file under `df` that on_bad_row SKIP
 * left out, or NULL kept with nulls (RAISE never opens such a file). `df` is a dataframe read
 * from a CSV file or buffer, a view of one (shuffle, shard, filter) or one with columns added
 * (the file of its first CSV column answers); a batched dataframe does not (ask the one it
 * batches). Returns how many bad rows there were (0 when none) and copies the first
 * min(count, cap, RILL_CSV_BAD_ROWS_KEPT), in file order, into rows (NULL when cap is 0).
 * RILL_EINVAL (< 0, with a message) when no column of df is read from a CSV file, cap < 0,
 * or rows is NULL with cap > 0. Thread-safe. */
RILL_API int64_t rill_csv_bad_rows(const rill_df_t* df, rill_csv_bad_row_t* rows, int64_t cap,
                                   rill_error_t* err);

/* Parses an ISO 8601 timestamp (YYYY-MM-DD[(T| )HH:MM[:SS[.fraction]]][Z|+HH:MM|-HH:MM|+HHMM])
 * into microseconds since the epoch, UTC. Returns RILL_OK or RILL_EFORMAT. */
RILL_API int rill_parse_timestamp(const char* s, size_t n, int64_t* us);

/* ================================================================ SQLite */

typedef enum rill_sql_kind {
  RILL_SQL_NULL = 0, RILL_SQL_INT64, RILL_SQL_DOUBLE, RILL_SQL_TEXT, RILL_SQL_BLOB
} rill_sql_kind_t;

/* A bound parameter (?1, ?2, ... in order). Text and blob bytes are copied at the call. */
typedef struct rill_sql_param {
  rill_sql_kind_t kind;
  int64_t i;                  /* RILL_SQL_INT64 */
  double d;                   /* RILL_SQL_DOUBLE */
  const void* bytes;          /* RILL_SQL_TEXT / RILL_SQL_BLOB */
  int64_t size;               /* bytes; < 0 for NUL-terminated text */
} rill_sql_param_t;

typedef struct rill_sqlite_opts {
  const rill_csv_column_t* columns; /* type overrides by name or index (borrowed) */
  int ncolumns;
  rill_on_error_t on_error;   /* a value that does not convert to its column's type */
  int64_t infer_rows;         /* rows sampled for columns without a declared type; 0 = 1000 */
  int64_t chunk_rows;         /* rows per materialised chunk; 0 = 65536 */
  int busy_timeout_ms;        /* wait on a locked database; 0 = fail at once */
  int64_t table_hold_bytes;   /* table mode: most bytes the table may take held in memory for
                                 out-of-order reads (see below); 0 = 1 GiB; < 0 = never */
  /* The encoding of the bytes of TEXT (and BLOB) values read into STRING columns, and of
   * column names. SQLite hands text over as it was stored, and nothing makes a program store
   * UTF-8: 0 = UTF-8 (other bytes are a value that does not convert, see on_error; a column
   * name: the open fails); RILL_CSV_UTF8_LOSSY and RILL_CSV_LATIN1 as for CSV. BINARY columns
   * get the bytes as they are. */
  rill_csv_encoding_t encoding;
  int64_t reserved[RILL_OPTS_RESERVED - 1]; /* zero (room to grow, see "Option structs" in rill.h) */
} rill_sqlite_opts_t;

/* A dataframe over the result of `sql` (with `nparams` bound parameters) on the SQLite
 * database at `path` (opened read-only; "file:" URIs allowed). Column types come from the
 * declared types (INT -> int64, REAL/FLOA/DOUB -> float64, TEXT/CHAR/CLOB -> string,
 * BLOB -> binary, BOOL -> bool, DATE/TIME -> timestamp_us) and, without one, from the values
 * of the first `infer_rows` rows. NULL -> null; BLOB -> binary.
 * When `sql` is a bare table name the table is read by rowid on demand (in chunks, one
 * connection per concurrent reader), so memory stays bounded and shuffled access over a large
 * table works; any other query is run once and its result held in chunks.
 * Reading a table out of order (a shuffle) costs a B-tree lookup per row; so once such reads
 * have fetched 1/256 of the rows, the table is read once, sequentially (in segments of 65536
 * rows, by every reader that comes meanwhile), into memory, and later reads gather from there.
 * The held copy takes 8 bytes per value plus ncols rounded up to 8 per row, plus 8 + its
 * length per TEXT or BLOB value (1M rows of 4 columns, one short string: 57 MB), is kept
 * until the dataframe is freed, and is a snapshot: later changes to the table are not seen.
 * A table whose copy would pass `table_hold_bytes` (checked before and while loading), or
 * whose load fails, keeps the point lookups (which then report any error with its row).
 * Reads in rowid order never hold the table. Row order, values and errors are the same either
 * way, in a database that passes SQLite's integrity check (in a corrupt one SQLite can answer
 * a scan and a seek differently: a B-tree whose keys are out of order yields a row to the
 * held copy's scan that a lookup by its rowid does not find).
 * The database is read with read() calls, not memory-mapped (PRAGMA mmap_size = 0), so a
 * file truncated by another process gives an SQLite error (RILL_ESQL) rather than SIGBUS.
 * Cells nulled under on_error NULL are counted in rill_iter_stats' `nulled`.
 * After fork(), the child opens connections of its own to the file (an SQLite connection
 * must not be used across a fork): those the parent opened are neither used nor closed there.
 * Errors: RILL_ESQL with sqlite3_errmsg and the SQL text (bad SQL, missing table, locked
 * database), RILL_EIO (the file cannot be opened), RILL_EINVAL, RILL_ENOMEM; RILL_ENOTSUP when
 * built without libsqlite3. Free with rill_df_free. */
RILL_API int rill_df_from_sqlite(const char* path, const char* sql, const rill_sql_param_t* params,
                                 int nparams, const rill_sqlite_opts_t* opts, rill_df_t** out,
                                 rill_error_t* err);
/* The same over an open `sqlite3*` handle (borrowed: it must outlive the dataframe; rill
 * serialises its own use of it with a mutex; across a fork() it is the caller's to manage). */
RILL_API int rill_df_from_sqlite_db(void* db, const char* sql, const rill_sql_param_t* params,
                                    int nparams, const rill_sqlite_opts_t* opts, rill_df_t** out,
                                    rill_error_t* err);

/* ================================================================ files and images */

/* ---- files and decode */

/* Options of the file sources and of rill_file_read. Zero = defaults. */
typedef struct rill_files_opts {
  rill_on_error_t on_error;   /* a file that cannot be read (RILL_EIO naming the path) */
  int64_t grain;              /* rows per task of the "bytes" column; 0 = the engine picks */
  int all_files;              /* rill_df_from_image_folder: accept every file, not only
                                 .jpg .jpeg .png .webp (case-insensitive) */
  int64_t reserved[RILL_OPTS_RESERVED]; /* zero (room to grow, see "Option structs" in rill.h) */
} rill_files_opts_t;

/* A dataframe of n rows over the given files: "path" (STRING, the paths as given) and
 * "bytes" (BINARY, each file's contents, read when a row is pulled; a file that cannot be
 * read is RILL_EIO with its path and the system's reason, handled by opts->on_error).
 * Only regular files are read: a FIFO, socket, device or folder is such an error (never a
 * wait). A file is read to its end: one whose size reads as 0 (those of /proc) included.
 * The paths are copied. opts may be NULL. Free with rill_df_free. */
RILL_API int rill_df_from_files(const char* const* paths, int64_t n, const rill_files_opts_t* opts,
                                rill_df_t** out, rill_error_t* err);

/* As rill_df_from_files over the paths listed in a text file, one per line (empty lines are
 * skipped, a trailing CR is dropped). Relative paths are resolved against the folder of
 * `list_path`. RILL_EIO when the list cannot be read (or is not a regular file). */
RILL_API int rill_df_from_file_list(const char* list_path, const rill_files_opts_t* opts,
                                    rill_df_t** out, rill_error_t* err);

/* Map: a BINARY column `name` holding the contents of the files named by the STRING column
 * `path_column` (e.g. a CSV column of paths). A null path gives a null cell. Returns the new
 * column index, or < 0. */
RILL_API int rill_file_read(rill_df_t* df, const char* name, int path_column,
                            const rill_files_opts_t* opts, rill_error_t* err);

/* An ImageFolder tree: root/<class>/.../<file>. Classes are the sub-folders of root (hidden
 * ones skipped) in byte order, labelled 0..K-1; files are found recursively and sorted by
 * path within each class. Columns: "path" (STRING, root/class/file), "bytes" (BINARY, read
 * on demand), "label" (INT64). RILL_EIO when root cannot be read, RILL_EFORMAT when it holds
 * no image file. The class names: rill_image_folder_classes.
 * Symbolic links are followed, and each folder is walked once (folders are told apart by
 * device and inode): a link to a folder already met (a loop, a link to an ancestor, to the
 * root or into another class) adds nothing, and a class folder that is the same folder as
 * an earlier class is not a class. A link to a file is a row of its own (under the path
 * through the link), even when the file is also listed under another name. A file that is
 * not a regular file (a FIFO named x.jpg) is listed and fails when read (opts->on_error). */
RILL_API int rill_df_from_image_folder(const char* root, const rill_files_opts_t* opts,
                                       rill_df_t** out, rill_error_t* err);

/* The class names of a dataframe made by rill_df_from_image_folder: names[label] for labels
 * 0..count-1. Borrowed: valid while `df` lives. RILL_EINVAL for any other dataframe (a
 * shuffled or batched view included: ask the folder's dataframe). Thread-safe. */
RILL_API int rill_image_folder_classes(const rill_df_t* df, const char* const** names, int* count,
                                       rill_error_t* err);

/* ---- tar archives (WebDataset-style shards)
 * A dataframe of the samples stored in tar archives ("shards"), one row per sample. A member
 * named DIR/KEY.EXT (EXT: everything after the first dot of the name's last part) belongs to
 * sample DIR/KEY and to the column named EXT in lower case; the members of one sample must be
 * consecutive in their archive, as WebDataset writes them (a key met again after other
 * samples is RILL_EFORMAT: an archive written unsorted, `tar -cf x.tar *.jpg *.cls`, would
 * otherwise give every sample twice, half empty; `tar --sort=name` writes them together).
 * The same key in two archives is two samples. Columns: "key" (STRING, DIR/KEY), "path" (STRING, "ARCHIVE:KEY", which image
 * decode errors name) and one column per extension found in any archive, in byte order of
 * the names, BINARY (the member's bytes) unless opts->columns says otherwise; a sample
 * without that member has a null cell there. Samples follow the archives' order, then their
 * order in each archive.
 * The archives are indexed when opened (or read from the indexes saved in opts->index_dir),
 * side by side on threads (each member's header read,
 * its data skipped; the errors of the first archive in order that fails are told): POSIX
 * ustar, pax (path and size records: long names, members over 8 GiB) and GNU tar (long
 * names, base-256 sizes) headers, every header's checksum checked. Members are read when a
 * row is pulled (one pread into the cell). An archive keeps the descriptor it was indexed
 * from while the process keeps fewer than an eighth of its soft RLIMIT_NOFILE (at most 1,024,
 * shared with the CSV files' kept descriptors), so it is read even once its path is removed
 * or replaced; past that it is opened by its path for each call and must still be the file
 * indexed (same device and inode). Either way a change in place (size or modification time)
 * is RILL_EIO "the archive changed since it was indexed". Skipped, as WebDataset skips them: directories, links,
 * devices, FIFOs, and files whose name's last part has no dot or starts with one.
 * Errors at open, each naming the archive and the byte offset of the header: RILL_EIO (cannot
 * be read, not a regular file), RILL_EFORMAT (a header whose checksum fails, a member whose
 * data runs past the end of the file, a pax record that cannot be read, a name that is not
 * UTF-8, two members of one sample with the same extension, a sample's members apart, an
 * extension named "key" or "path"), RILL_ENOTSUP (a gzip-, bzip2-, xz- or zstd-compressed archive: decompress it
 * first, members must be read in place; GNU sparse and multi-volume members). The archive
 * ends at its first all-zero block or at the end of the file after a whole member. */
typedef struct rill_tar_column {
  const char* ext;            /* an extension (compared without case) */
  rill_dtype_t dtype;         /* 0 or BINARY (the member's bytes), STRING (UTF-8 text), or BOOL,
                                 INT8..UINT64, FLOAT32, FLOAT64, TIMESTAMP_US parsed from the
                                 member's text (ASCII spaces and line ends around it dropped:
                                 "3\n" is 3) */
  const char* name;           /* the column's name (NULL: the extension). Several extensions
                                 given one name are alternatives of one column (of one dtype):
                                 {"jpg", 0, "image"}, {"png", 0, "image"} reads a dataset whose
                                 samples hold either; a sample holding two of them is
                                 RILL_EFORMAT. Also a way to read an extension named "key" or
                                 "path". */
} rill_tar_column_t;

typedef struct rill_tar_opts {
  rill_on_error_t on_error;   /* a member that cannot be read or converted (RILL_EIO or
                                 RILL_EFORMAT naming ARCHIVE:MEMBER) */
  const rill_tar_column_t* columns; /* dtypes and names of extensions (borrowed for the
                                 call); an extension no archive holds is RILL_EINVAL (a typo),
                                 unless another one given the same name is found */
  int ncolumns;
  int64_t grain;              /* rows per task of the member columns; 0 = the engine picks */
  int threads;                /* archives indexed side by side at open: 0 = up to 16 (reading
                                 headers waits on the disk: more threads than cores help a
                                 cold one), 1 = the calling thread only */
  const char* index_dir;      /* NULL: every archive is indexed from its headers at each open.
                                 A folder (existing; RILL_EINVAL otherwise): each archive's
                                 index is saved there once made (a file of ~24 bytes a member
                                 plus its name, named after the archive's real path, written
                                 whole through a rename: processes opening the same shards
                                 at once are safe), and read back at later opens instead of
                                 the archive's headers while the archive keeps its size,
                                 modification time, first block and last member's header
                                 (not its device or inode: a copy made with rsync -a or
                                 cp -p keeps its index, and machines sharing the folder over
                                 a network file system share the indexes; integers are
                                 little-endian, the same on every host); a saved index that
                                 does not match, or is damaged, is not used (the archive is
                                 indexed again and the file rewritten). The same checks and
                                 errors either way; a folder that cannot be written to only
                                 loses the saving. Nothing is removed by itself: see
                                 rill_tar_index_prune. */
  int64_t reserved[RILL_OPTS_RESERVED - 1]; /* zero (room to grow, see "Option structs" in rill.h) */
} rill_tar_opts_t;

/* The samples of the `npaths` archives (at least one; paths copied). opts may be NULL.
 * RILL_EINVAL for bad arguments. Free with rill_df_free. */
RILL_API int rill_df_from_tar(const char* const* paths, int npaths, const rill_tar_opts_t* opts,
                              rill_df_t** out, rill_error_t* err);

/* Removes from folder index_dir (rill_tar_opts_t.index_dir) the saved indexes that no open
 * would use: an index whose archive is gone or changed (size, modification time, first
 * block or last member's header), a damaged one, one of an older version of the format, a
 * file not named for its archive; and the temporary files that a process stopped while
 * saving left behind (over an hour old). Other files are not touched. An index is kept by
 * the path it was saved for (the archive's real path): run this on a machine that sees the
 * archives there, since the index of an archive it does not see is removed. *kept, *removed
 * (each may be NULL): the index files kept and removed. RILL_OK; RILL_EINVAL (index_dir is
 * NULL, empty or not a folder), RILL_EIO (it cannot be listed, or a file cannot be removed:
 * named in the message), RILL_ENOMEM. */
RILL_API int rill_tar_index_prune(const char* index_dir, int64_t* kept, int64_t* removed, rill_error_t* err);

/* ---- brace patterns of shard lists
 * The paths a brace pattern stands for, as shells and WebDataset's shard lists expand
 * "train-{000000..000146}.tar": a group {A,B,...} gives each alternative in turn (each one
 * expanded in its turn: groups nest, an alternative may be empty); {N..M} and {N..M..STEP}
 * give the integers from N to M, up or down, every STEP (its sign ignored), zero-padded to the
 * wider bound's width when either bound is written with a leading zero ({8..10} is 8 9 10,
 * {08..10} is 08 09 10); {a..e} gives the ASCII characters from one letter to the other. The
 * groups of a pattern multiply, the leftmost varying slowest. A group with no comma at its
 * top level that is no range ({}, {x}) is text, braces and all; a backslash makes the next
 * character text (\{, \, and \\) and is dropped. No glob (*, ?) is expanded, and no file is
 * looked at. *paths: *count (>= 1) strings (owned: free with rill_expand_braces_free);
 * NULL and 0 on error. RILL_EINVAL: a NULL argument, an empty pattern, a brace without its
 * match (naming the character: "unmatched '{' at character 7"), a range step of 0 or a bound
 * outside int64, groups nested more than 32 deep, more than RILL_EXPAND_MAX_PATHS paths or
 * 256 MiB of them; RILL_ENOMEM. Thread-safe. */
#define RILL_EXPAND_MAX_PATHS 1000000
RILL_API int rill_expand_braces(const char* pattern, char*** paths, int64_t* count, rill_error_t* err);
/* Frees what rill_expand_braces gave (NULL is a no-op). */
RILL_API void rill_expand_braces_free(char** paths, int64_t count);
/* 1 when a front end should expand `path` with rill_expand_braces: it holds a '{' and names
 * no file (the rule the command-line tool and the Python module's from_csv and from_tar apply
 * to a path they are given, so "odd-{1,2}.tar" is read as it is where that file exists);
 * 0 otherwise, and for NULL. Looks at the file system (stat). */
RILL_API int rill_path_is_pattern(const char* path);

/* Options of rill_image_decode. Zero = defaults. */
typedef struct rill_decode_opts {
  int channels;               /* 0 or 3: RGB; 1: gray; 4: RGBA (alpha 255 where the file has none) */
  int64_t max_pixels;         /* images with more pixels: RILL_ERANGE before any decoding;
                                 0 = 100,000,000 */
  rill_on_error_t on_error;   /* bad images: RILL_EFORMAT (corrupt, truncated, empty),
                                 RILL_ENOTSUP (not JPEG/PNG/WebP, an animated WebP, decoder not
                                 built), RILL_ERANGE */
  int64_t grain;              /* rows per task; 0 = the engine picks */
  const char* path_column;    /* STRING column named in error messages; NULL = "path" when the
                                 dataframe has one; "" = none */
  int64_t reserved[RILL_OPTS_RESERVED]; /* zero (room to grow, see "Option structs" in rill.h) */
} rill_decode_opts_t;

/* Map: decodes the JPEG, PNG or WebP images of the BINARY column `bytes_column` (the format
 * comes from the magic bytes, never from a file name) into uint8 cells of shape [-1, -1, C]
 * (HWC, C = opts->channels). Gray and CMYK JPEGs, palette / 16-bit / gray / alpha PNGs and
 * lossy / lossless / alpha WebPs are converted (an animated WebP is RILL_ENOTSUP; a crop of a
 * WebP, as of a PNG, decodes the rows down to its last one, not the file to its end). A null
 * input cell gives a null cell. Runs on worker threads. Errors name the
 * row's file (see path_column). A JPEG whose compressed data is damaged (libjpeg's "Corrupt
 * JPEG data: ..." warnings, a premature end) is RILL_EFORMAT even though libjpeg could
 * still produce pixels. This holds for the fused-decode operators too, whatever the crop:
 * rows below a crop region are entropy-decoded (without the inverse DCT) and the file read to
 * its end marker, so a damaged file fails in every epoch, not only in those whose random crop
 * reaches the damage. A fused-decode operator remembers (a 64-bit hash of every byte, and the
 * size) the files it has read to their end without error, and for those bytes stops after
 * the crop: a file is remembered only once fully verified, so a damaged file is checked, and
 * fails, every time; changed bytes are a different file. The memory is 8 bytes per slot, 1.5
 * slots per row of the operator's dataframe (at most 32 MiB); files beyond it are verified
 * every time. Returns the new column index, or < 0. */
RILL_API int rill_image_decode(rill_df_t* df, const char* name, int bytes_column,
                               const rill_decode_opts_t* opts, rill_error_t* err);

/* ---- image operators
 * Each operator adds one derived column (rill_df_map) to `df` and returns its index, or a
 * negative code (RILL_EINVAL with a message for a bad argument, an unknown column or a
 * column of the wrong type). Image cells are uint8 HWC: fixed [H,W,C] or variable
 * [-1,-1,C] (C known). Operators marked "fused decode" also take a BINARY column of encoded
 * JPEG/PNG/WebP bytes and decode only what they need; decode errors name the row and, when `df`
 * has a STRING column named "path", the file. Null input cells give null output cells.
 * All randomness comes from rill_exec_rng: results depend on (seed, epoch, row, column)
 * only. The stages run on worker threads; the operators are reentrant. */

typedef enum rill_interp {
  RILL_INTERP_BILINEAR = 0,   /* 2x2 taps, half-pixel centres (default) */
  RILL_INTERP_AREA = 1        /* box filter (pixel-area average) when downscaling; bilinear up */
} rill_interp_t;

typedef struct rill_rrc_opts {
  int size[2];                /* output (height, width); required */
  double scale[2];            /* range of the crop's area fraction; {0,0} = {0.08, 1} */
  double ratio[2];            /* range of the crop's aspect w/h; {0,0} = {3/4, 4/3} */
  rill_interp_t interpolation;
  int channels;               /* BINARY input: 1, 3 (0 = 3) or 4 */
  int64_t max_pixels;         /* BINARY input: larger images are RILL_ERANGE; 0 = 100 MP */
  rill_on_error_t on_error;   /* for rows whose image cannot be decoded */
  int64_t marks_bytes;        /* BINARY input: memory the JPEG entropy marks of the files, and
                                 the baseline copies of progressive ones, may take (see the
                                 README; an equal share per file; shared by the crops over the
                                 same column, the largest asked for holds): 0 = 256 MB, < 0:
                                 none */
  int64_t reserved[RILL_OPTS_RESERVED]; /* zero (room to grow, see "Option structs" in rill.h) */
} rill_rrc_opts_t;

/* Random resized crop (torchvision's RandomResizedCrop): samples an area fraction in
 * `scale` and a log-uniform aspect ratio in `ratio` up to 10 times, falling back to a
 * centre crop; the crop is resized to `size`. Output uint8[h,w,C]. Fused decode: the JPEG is
 * decoded for the crop region only, DCT-scaled down while it stays at least `size`. */
RILL_API int rill_image_random_resized_crop(rill_df_t* df, const char* name, int column,
                                            const rill_rrc_opts_t* opts, rill_error_t* err);

typedef struct rill_resize_opts {
  int size[2];                /* (height, width); width 0: the shorter side becomes height,
                                 keeping the aspect ratio (output uint8[-1,-1,C]) */
  rill_interp_t interpolation;
  int channels;               /* BINARY input: 1, 3 (0 = 3) or 4 */
  int64_t max_pixels;         /* BINARY input: 0 = 100 MP */
  rill_on_error_t on_error;
  int64_t reserved[RILL_OPTS_RESERVED]; /* zero (room to grow, see "Option structs" in rill.h) */
} rill_resize_opts_t;

/* Resize (bilinear or area). Output uint8[h,w,C] (or [-1,-1,C], see size). Fused decode. */
RILL_API int rill_image_resize(rill_df_t* df, const char* name, int column,
                               const rill_resize_opts_t* opts, rill_error_t* err);

/* Centre crop to height x width; smaller images are padded with zeros (torchvision's rule).
 * Output uint8[height,width,C]. */
RILL_API int rill_image_center_crop(rill_df_t* df, const char* name, int column, int height,
                                    int width, rill_error_t* err);

/* Horizontal flip with probability p in [0, 1]. Same type as the input. */
RILL_API int rill_image_flip(rill_df_t* df, const char* name, int column, double p,
                             rill_error_t* err);

typedef struct rill_jitter_opts {
  double brightness;          /* factor uniform in [max(0, 1-b), 1+b]; 0 = unchanged */
  double contrast;            /* blend with the mean grey level, same range rule */
  double saturation;          /* blend with the pixel's grey level, same range rule */
  int64_t reserved[RILL_OPTS_RESERVED]; /* zero (room to grow, see "Option structs" in rill.h) */
} rill_jitter_opts_t;

/* Colour jitter like torchvision's ColorJitter (without hue): the three adjustments are
 * applied in a random order, each clamped to [0, 255]. Alpha is kept. Same type as input. */
RILL_API int rill_image_jitter(rill_df_t* df, const char* name, int column,
                               const rill_jitter_opts_t* opts, rill_error_t* err);

typedef struct rill_normalize_opts {
  double flip;                /* probability of a horizontal flip, fused into the pass */
  double mean[4];             /* per channel, in [0, 1] units (0 = 0) */
  double std[4];              /* per channel (0 = 1) */
  rill_dtype_t dtype;         /* RILL_FLOAT32 (0 = this) or RILL_FLOAT16 */
  rill_layout_t layout;       /* RILL_LAYOUT_CHW: output [C,H,W]; RILL_LAYOUT_HWC: [H,W,C] */
  int64_t reserved[RILL_OPTS_RESERVED]; /* zero (room to grow, see "Option structs" in rill.h) */
} rill_normalize_opts_t;

/* (x / 255 - mean) / std per channel, to float32/float16, optionally HWC -> CHW and flipped,
 * in one pass over the image. Output dtype[C,H,W] or dtype[H,W,C] (-1 where the input varies). */
RILL_API int rill_image_normalize(rill_df_t* df, const char* name, int column,
                                  const rill_normalize_opts_t* opts, rill_error_t* err);

/* One-hot encoding of an int64 label column into dtype[classes] (0 = RILL_FLOAT32; any
 * numeric dtype or BOOL). A label outside [0, classes) is RILL_ERANGE for its row. */
RILL_API int rill_one_hot(rill_df_t* df, const char* name, int column, int64_t classes,
                          rill_dtype_t dtype, rill_error_t* err);

/* ================================================================ CUDA */

/* Both operators below are RILL_STAGE_CUDA maps: they run on the stage's CUDA stream, their
 * output lives in device memory and carries an event (rill_array_t.event) recorded when it is
 * ready. Built without CUDA they return RILL_ENODEV "rill was built without CUDA"; on a
 * machine without a device, RILL_ENODEV "no CUDA device: <CUDA's reason>". */

typedef struct rill_to_device_opts {
  int device;                 /* CUDA ordinal (0 = the first device) */
  int inflight;               /* copies in flight at once, each with its own pinned staging
                               * buffer (0 = 3; at most 64) */
  int64_t reserved[RILL_OPTS_RESERVED]; /* zero (room to grow, see "Option structs" in rill.h) */
} rill_to_device_opts_t;

/* Adds a column `name` holding `column`'s cells (or batches) copied into device memory with
 * cudaMemcpyAsync. Pinned inputs (batches built with rill_batch_opts_t.pinned, or arrays
 * already on the device) are copied in place; pageable ones go through pinned staging buffers
 * whose host copy overlaps the DMA. A staging buffer is reused only once its copy completed.
 * The column must have fixed-shape numeric cells (RILL_EINVAL otherwise); a chunk with null
 * cells fails with RILL_EINVAL (device arrays carry no validity). opts NULL = defaults.
 * Returns the new column index, or < 0. */
RILL_API int rill_to_device(rill_df_t* df, const char* name, int column,
                            const rill_to_device_opts_t* opts, rill_error_t* err);

/* rill_image_normalize on the GPU: uint8[H,W,C] cells (C in 1..4) already on `device`
 * (from rill_to_device) become (x / 255 - mean) / std as float32 or float16, in [C,H,W]
 * (RILL_LAYOUT_CHW) or [H,W,C] layout, each image mirrored with probability opts->flip.
 * Image i is flipped when the first draw of rill_exec_rng(exec, i) (its row's generator)
 * is below opts->flip: reproducible per (seed, epoch, row) whatever the threads, prefetch or
 * batch size. Computed as x * (1 / (255 std)) + (-mean / std) in float32 without fused
 * multiply-add: within 2e-6 of the exact value (float16: rounded from that). A chunk with
 * null cells fails with RILL_EINVAL. opts NULL = defaults. Returns the new
 * column index, or < 0 (RILL_EINVAL for a wrong input type or option, with a message). */
RILL_API int rill_cuda_normalize(rill_df_t* df, const char* name, int column,
                                 const rill_normalize_opts_t* opts, int device, rill_error_t* err);

typedef struct rill_cuda_pool_stats {
  int64_t allocs;             /* pinned/device blocks obtained from the driver */
  int64_t reuses;             /* requests served from freed blocks */
  int64_t cached_bytes;       /* bytes of freed blocks kept for reuse */
} rill_cuda_pool_stats_t;

/* Counters of the pinned and device buffer pool (process-wide; thread-safe). Freed blocks
 * are reused only after every CUDA stream made by rill_stream_new_cuda has passed the point
 * where they were freed. All zero without CUDA. */
RILL_API void rill_cuda_pool_stats(rill_cuda_pool_stats_t* st);
/* Gives cached blocks whose pending work completed back to the driver; returns their bytes. */
RILL_API int64_t rill_cuda_pool_trim(void);

#ifdef __cplusplus
}
#endif
#endif /* RILL_ADDONS_H */
