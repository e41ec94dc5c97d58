/* The CSV source's shared state and the functions its files share: the parsed file
 * (csv.c), record scanning (csv_scan.c) and the row index (csv_index.c). Not installed. */
#ifndef RILL_CSV_INTERNAL_H
#define RILL_CSV_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>
#include <stdint.h>

#include "addon.h"
#include "rill_addons.h"

/* How an input's records are written (rill_csv_opts_t): the delimiter, the quote, the comment
 * character (0: none; a line that starts with it is not a record), `trim` (spaces and tabs
 * around fields are not part of them, a quote after such blanks opens a quoted field, and a
 * line of blanks is not a record) and the escape character (0: none; it makes the byte after
 * it text, inside quotes or not, a line break too). */
typedef struct rill__csv_dialect {
  char dl, q, cm;
  int trim;
  char esc;
} rill__csv_dialect_t;

/* 1 when the byte at p is escaped: an odd run of escape characters ends right before it (none
 * before `from`). */
static inline int rill__csv_escaped(const char* d, int64_t from, int64_t p, char esc) {
  if (!esc) return 0;
  int64_t k = p;
  while (k > from && d[k - 1] == esc) k--;
  return (p - k) & 1;
}

/* Whether a physical line break ends at byte i of d[0..size): a '\n', or a '\r' not followed
 * by '\n' ("\r\n" is one break, ending at its '\n'). Line numbers in messages
 * (rill__csv_line) and skip_lines count these. */
static inline int rill__csv_break_at(const char* d, int64_t size, int64_t i) {
  return d[i] == '\n' || (d[i] == '\r' && (i + 1 >= size || d[i + 1] != '\n'));
}

/* A blank that `trim` removes: a space or a tab that is not the delimiter. */
static inline int rill__csv_blank(const rill__csv_dialect_t* x, char ch) {
  return (ch == ' ' || ch == '\t') && ch != x->dl;
}

/* A block of rows of the row index (see rill__csv_t.blocks). */
typedef struct rill__csv_block {
  int64_t base;
  const uint32_t* off;
} rill__csv_block_t;

/* An opened CSV input: its bytes, columns and row index. Shared (reference counted) by the
 * dataframe's source group; read-only once opened, except the line checkpoints (under mu)
 * and drop_mark. */
typedef struct rill__csv {
  _Atomic int refs;
  char* name;                 /* the path, or the buffer's name, for messages */
  const char* data;
  int64_t size;
  void* map;                  /* mmap'ed region or NULL */
  char* watch;                /* the mapped file's path, for size checks (its descriptor is not
                                 kept: a dataset of thousands of files), or NULL */
  dev_t dev;                  /* ... and the file it named when mapped */
  ino_t ino;
  int fd;                     /* the mapped file's descriptor, kept while few files hold one
                                 (csv.c, "mapped files"), or -1 */
  /* A mapped file among the process's others (csv.c, "mapped files"): past
   * rill__csv_map_budget of them, one no call reads may be unmapped and mapped again by its
   * path when a call needs it. `present`: map and data are valid; `pins`: calls reading it;
   * `used`: read since the last sweep. The list links are guarded by the mapped files' lock. */
  int evictable;              /* 1: listed when opened (set once, before the dataframe is out) */
  int listed;
  _Atomic int present, pins, used;
  struct rill__csv *newer, *older;
  void* owned;                /* copied buffer or NULL */
  rill__csv_dialect_t dia;
  int ncols;
  char** names;
  rill_dtype_t* types;
  int64_t nrows;
  /* The byte offset of each row's record, 4 bytes a row, in blocks of 1 << RILL__CSV_BLOCK_SHIFT
   * rows: row r starts at blocks[b].base + blocks[b].off[r & mask] (b = r >> shift); an offset
   * that does not fit (a block spanning 4 GiB) reads RILL__CSV_FAR and is kept in `far` as
   * (row, offset) pairs. The offsets lie in the lists that the index pass made (`held`). */
  struct rill__csv_block* blocks;
  uint32_t** held;
  int64_t nheld;
  int64_t* far;
  int64_t nfar;
  rill_on_error_t on_error;
  rill_csv_encoding_t encoding;
  char decimal;               /* the decimal separator of floats when not '.', else 0 */
  uint8_t* inferred;          /* inferred[k]: column k's type was inferred (not overridden) ... */
  int64_t inferred_rows;      /* ... from this many rows */
  char** nulls;               /* null_values: texts read as null cells (copies), nnulls of them */
  size_t* null_len;
  int nnulls;
  size_t null_min, null_max;  /* their shortest and longest lengths */
  pthread_mutex_t mu;         /* guards lines */
  int64_t* lines;             /* lines[k]: physical line at byte k << RILL__CSV_LINE_STEP_SHIFT */
  int64_t nlines;
  _Atomic int64_t drop_mark;  /* mapped bytes below it were handed back to the page cache */
  int64_t nbad;               /* rows with a wrong number of fields (on_bad_row SKIP or NULL) */
  int64_t nbad_kept;          /* of them, the first ones kept in `bad` (RILL_CSV_BAD_ROWS_KEPT at most) */
  rill_csv_bad_row_t* bad;
} rill__csv_t;

#define RILL__CSV_LINE_STEP_SHIFT 16 /* line-number checkpoints every 64 KiB */
#define RILL__CSV_BLOCK_SHIFT 10     /* rows per base offset of the row index: 1024 */
#define RILL__CSV_FAR UINT32_MAX     /* an offset kept aside (see rill__csv_t.far) */
#ifndef RILL__CSV_FAR_AT             /* offsets from here on are kept aside (lowered to test that path) */
#define RILL__CSV_FAR_AT RILL__CSV_FAR
#endif

/* Looks up `key` among the (key, value) pairs p[0..2n), sorted by key (it is there). */
static inline int64_t rill__csv_far(const int64_t* p, int64_t n, int64_t key) {
  int64_t lo = 0, hi = n - 1;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (p[2 * mid] < key) lo = mid + 1;
    else hi = mid;
  }
  return p[2 * lo + 1];
}

/* The byte offset of row r's record. */
static inline int64_t rill__csv_start(const rill__csv_t* c, int64_t r) {
  const rill__csv_block_t* b = &c->blocks[r >> RILL__CSV_BLOCK_SHIFT];
  uint32_t o = b->off[r & (((int64_t)1 << RILL__CSV_BLOCK_SHIFT) - 1)];
  return o != RILL__CSV_FAR ? b->base + o : rill__csv_far(c->far, c->nfar, r);
}

/* Asks for the index entry of row r, and for the first bytes of row r's record, without
 * waiting (a shuffled read waits for memory twice a row: for its offset, then for its text).
 * The second reads c->data: a mapped file's caller holds it mapped (csv_pin). */
static inline void rill__csv_prefetch_offset(const rill__csv_t* c, int64_t r) {
  const rill__csv_block_t* b = &c->blocks[r >> RILL__CSV_BLOCK_SHIFT];
  __builtin_prefetch(b->off + (r & (((int64_t)1 << RILL__CSV_BLOCK_SHIFT) - 1)));
}

static inline void rill__csv_prefetch_row(const rill__csv_t* c, int64_t r) {
  const rill__csv_block_t* b = &c->blocks[r >> RILL__CSV_BLOCK_SHIFT];
  uint32_t o = b->off[r & (((int64_t)1 << RILL__CSV_BLOCK_SHIFT) - 1)];
  if (o != RILL__CSV_FAR) __builtin_prefetch(c->data + b->base + o);
}

/* Hands the mapped pages inside [a, b) back to the kernel (csv.c); no-op for buffers. */
void rill__csv_drop(const rill__csv_t* c, int64_t a, int64_t b);

/* ---- scanning (csv_scan.c) */

/* Splits the record at `pos` of d[0..size) into fields: up to `max` (start, end) byte spans
 * go to `sp` (without the blanks around them under x->trim); returns the number of fields;
 * *next = offset after the record's line end. */
int64_t rill__csv_split(const char* d, int64_t size, int64_t pos, const rill__csv_dialect_t* x, int64_t* sp,
                        int64_t max, int64_t* next);
/* The first record start at or after `pos` (a line start) of d[0..end): line breaks, comment
 * lines and (trim) lines of blanks are passed over; `end` when there is none. */
int64_t rill__csv_record_start(const char* d, int64_t pos, int64_t end, const rill__csv_dialect_t* x);
/* Splits rows[0..n) of c as rill__csv_split does (row j's spans at sp + j * stride, at most
 * `max`; its field count in nfields[j]) at SIMD `level` (0: byte loops only, 1: SSE2 masks,
 * 2: AVX2 masks; a level above the machine's is lowered; with an escape character that trim
 * makes a blank, byte loops at every level). Every level gives the same results. */
void rill__csv_split_rows(const rill__csv_t* c, const int64_t* rows, int64_t n, int64_t* sp, int64_t stride,
                          int64_t max, int64_t* nfields, int level);
/* The text of field [s, e): quotes removed, doubled quotes and escapes undone. Uses *scratch
 * (of *cap bytes, grown with rill__alloc) only when the bytes must change. RILL_OK or
 * RILL_ENOMEM. */
int rill__csv_unescape(const char* d, int64_t s, int64_t e, const rill__csv_dialect_t* x, char** scratch, size_t* cap,
                       const char** out, size_t* n);
/* *scratch with room for `need` bytes (its bytes not kept: grown with rill__alloc). RILL_OK or
 * RILL_ENOMEM. */
int rill__csv_room(char** scratch, size_t* cap, size_t need);
/* 0 when the field [s, e) opens a quote that it never closes (it ran to the end of input). */
int rill__csv_quote_closed(const char* d, int64_t s, int64_t e, const rill__csv_dialect_t* x);

/* A growable list of int64. */
typedef struct rill__csv_vec {
  int64_t* v;
  int64_t n, cap;
} rill__csv_vec_t;
int rill__csv_vec_grow(rill__csv_vec_t* a); /* RILL_OK or RILL_ENOMEM */
static inline int rill__csv_vec_push(rill__csv_vec_t* a, int64_t x) {
  if (a->n == a->cap && rill__csv_vec_grow(a) != RILL_OK) return RILL_ENOMEM;
  a->v[a->n++] = x;
  return RILL_OK;
}

/* Record starts found in a chunk, 4 bytes each: offsets from the chunk's start (`base`);
 * one that does not fit reads RILL__CSV_FAR and is kept in `far` as (index, offset). */
typedef struct rill__csv_rows {
  uint32_t* v;
  int64_t n, cap, base;
  rill__csv_vec_t far;
} rill__csv_rows_t;
int rill__csv_rows_grow(rill__csv_rows_t* a); /* RILL_OK or RILL_ENOMEM */
__attribute__((always_inline)) static inline int rill__csv_rows_push(rill__csv_rows_t* a, int64_t pos) {
  if (a->n == a->cap && rill__csv_rows_grow(a) != RILL_OK) return RILL_ENOMEM;
  uint64_t r = (uint64_t)(pos - a->base);
  if (r >= RILL__CSV_FAR_AT) {
    if (rill__csv_vec_push(&a->far, a->n) != RILL_OK || rill__csv_vec_push(&a->far, pos) != RILL_OK) return RILL_ENOMEM;
    r = RILL__CSV_FAR;
  }
  a->v[a->n++] = (uint32_t)r;
  return RILL_OK;
}
static inline int64_t rill__csv_rows_at(const rill__csv_rows_t* a, int64_t k) {
  return a->v[k] != RILL__CSV_FAR ? a->base + a->v[k] : rill__csv_far(a->far.v, a->far.n / 2, k);
}

/* What a scan of one chunk of the input found. */
typedef struct rill__csv_spec {
  rill__csv_rows_t starts;     /* record starts (starts.base: the chunk's first byte) */
  rill__csv_vec_t bad;         /* pairs: record start, field count (count != expected) */
  int end_in_quotes;           /* chunk ended inside a quoted field */
  int64_t tail_start, tail_nf; /* when it did: the open record's start (-1: before the chunk) and fields */
  int head_done;               /* scan from inside quotes: the record open at the start ended here */
  int64_t head_nf;             /* fields that open record gained in this chunk (beyond its first) */
  int rc;                      /* RILL_OK or RILL_ENOMEM */
} rill__csv_spec_t;

/* Scans d[begin, end) for record starts, from the start of a record or (in_quotes) from
 * inside a quoted field. With `ref` (the scan of the same chunk from a record start), stops
 * when a record starts where one of ref's does and takes ref's results from there. */
void rill__csv_scan_chunk(const char* d, int64_t begin, int64_t end, int in_quotes, const rill__csv_dialect_t* x,
                          int64_t expected, rill__csv_spec_t* s, const rill__csv_spec_t* ref);
/* The state machine alone (rill__csv_scan_chunk uses it from inside quotes, with `ref`, and
 * where the bitmask scan gives up). */
void rill__csv_scan_chunk_generic(const char* d, int64_t begin, int64_t end, int in_quotes,
                                  const rill__csv_dialect_t* x, int64_t expected, rill__csv_spec_t* s,
                                  const rill__csv_spec_t* ref);
/* The bitmask scan from a record start at SIMD `level` (0 portable, 1 SSE2, 2 AVX2; a level
 * above the machine's is lowered): 1 with the results in *s (s->rc), 0 when it gave up
 * (*s then holds partial results; it gives up where the quotes do not follow its model, and
 * at once under trim with a blank escape character). Every level gives the same results. */
int rill__csv_scan_chunk_masks(const char* d, int64_t begin, int64_t end, const rill__csv_dialect_t* x,
                               int64_t expected, rill__csv_spec_t* s, int level);
/* The highest SIMD level this machine runs (see above). */
int rill__csv_scan_simd_level(void);

/* ---- the row index (csv_index.c) */

/* Builds c->starts and c->nrows over [begin, size) in parallel, honouring o->on_bad_row for
 * records without `expected` fields. Errors name the file and line. */
int rill__csv_build_index(rill__csv_t* c, int64_t begin, int64_t expected, const rill_csv_opts_t* o,
                          rill_error_t* err);
/* The 1-based physical line holding byte `off` (checkpoints built on first use). */
int64_t rill__csv_line(rill__csv_t* c, int64_t off);

/* 1: gzip input is inflated by zlib's stream even where libdeflate is built in (tests of
 * that path); 0 (the default): libdeflate first, zlib to name the fault of bad data. */
extern int rill__csv_gzip_zlib_only;
/* Compressed input whose text grows past this many bytes (default 1 GiB) is written to an
 * unlinked temporary file in $TMPDIR and mapped, rather than held in memory (lowered by tests). */
extern int64_t rill__csv_spill_bytes;
/* Mapped CSV files kept mapped at once (0, the default: half of the system's vm.max_map_count,
 * the mappings a process may hold; lowered by tests). Past it, the least recently read file
 * that no call is reading is unmapped until a call needs it again. */
extern int64_t rill__csv_map_budget;
/* Files mapped again after a sweep unmapped them, counted for tests. */
extern _Atomic int64_t rill__csv_maps_again;
/* Index passes made so far (rill__csv_build_index), counted for tests. */
extern _Atomic int64_t rill__csv_index_passes;

#endif /* RILL_CSV_INTERNAL_H */
