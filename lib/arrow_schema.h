/* The Arrow schema module (not installed): rill types <-> Arrow format strings, field
 * metadata, the arrow.fixed_shape_tensor / arrow.variable_shape_tensor extensions, and schema
 * nodes that own their strings. The export (arrow_export.c), the import (arrow_import.c) and
 * the interchange view (interchange.c) take every format string from here.
 *
 * Mapping (see rill_interop.h):
 *   BOOL "b", INT8..INT64 "c" "s" "i" "l", UINT8..UINT64 "C" "S" "I" "L", FLOAT16 "e",
 *   FLOAT32 "f", FLOAT64 "g", BFLOAT16 "S" + field metadata rill.dtype=bfloat16,
 *   STRING "U" (import also "u", "vu"), BINARY "Z" (import also "z", "vz"),
 *   TIMESTAMP_US "tsu:UTC" (import: "ts{s,m,u,n}:<any time zone>", scaled to microseconds),
 *   fixed-shape tensor cells "+w:N" + arrow.fixed_shape_tensor {"shape":[...]},
 *   variable-shape tensor cells "+s" {data: "+l" (import also "+L"), shape: "+w:ndim" of "i"}
 *   + arrow.variable_shape_tensor {"uniform_shape":[...]}. */
#ifndef RILL_ARROW_SCHEMA_H
#define RILL_ARROW_SCHEMA_H

#include "addon.h"
#include "rill_interop.h"

/* ---- format strings */

/* The format of one element (or scalar cell) of dtype `d`; NULL for an unknown dtype. */
const char* rill__arrow_format(rill_dtype_t d);

/* How the values of an imported Arrow field are laid out, when rill can read them. */
typedef enum rill__arrow_layout {
  RILL__ARROW_FIXED = 1,   /* fixed-width values: rill's layout */
  RILL__ARROW_BITS,        /* bit-packed booleans */
  RILL__ARROW_TIMESTAMP,   /* int64 in the unit of the format (ts_mul / ts_div to microseconds) */
  RILL__ARROW_VAR32,       /* utf8 / binary: int32 offsets */
  RILL__ARROW_VAR64,       /* large_utf8 / large_binary: int64 offsets */
  RILL__ARROW_VIEW,        /* utf8_view / binary_view */
  RILL__ARROW_FIXED_LIST,  /* fixed_size_list of fixed-width or bit elements (tensor cells) */
  RILL__ARROW_VAR_TENSOR   /* arrow.variable_shape_tensor */
} rill__arrow_layout_t;

typedef struct rill__arrow_field {
  rill_type_t type;        /* the rill type of a cell */
  rill__arrow_layout_t layout;
  int64_t ts_mul, ts_div;  /* TIMESTAMP: microseconds = value * ts_mul / ts_div (floor) */
  int64_t list_size;       /* FIXED_LIST: elements per cell */
  int elem_bits;           /* FIXED_LIST: the elements are bit-packed booleans */
  int large_list;          /* VAR_TENSOR: its data child is a large list ("+L") */
} rill__arrow_field_t;

/* The rill type and layout of field `s` (format, metadata and children). RILL_ENOTSUP when rill
 * cannot hold it, with *why set to a static explanation to append to the format (may be ""). */
int rill__arrow_field_type(const struct ArrowSchema* s, rill__arrow_field_t* out, const char** why);

/* ---- field metadata (the C Data Interface's binary encoding) */

/* Encodes n key/value pairs; NULL when out of memory. Freed with rill__free. */
char* rill__arrow_metadata_encode(const char* const* keys, const char* const* values, int n);
/* Copies the value of `key` in `md` (NULL: none) into val (NUL-terminated, truncated to
 * size-1). Returns 1 when found, else 0. */
int rill__arrow_metadata_get(const char* md, const char* key, char* val, size_t size);

/* ---- schema nodes */

/* Fills `s` with a node owning copies of `format` and `name` (NULL: "") and taking `metadata`
 * over (may be NULL), with `n_children` zeroed children (released by the parent, or moved out
 * as the specification allows). On failure frees `metadata`, leaves s->release NULL and
 * returns RILL_ENOMEM. */
int rill__arrow_schema_init(struct ArrowSchema* s, const char* format, const char* name, char* metadata,
                            int64_t flags, int64_t n_children);

/* The schema of a column of cells of type `t` (a valid type; STRING/BINARY only scalar),
 * following the mapping above. RILL_ENOMEM on failure (s->release NULL). */
int rill__arrow_schema_for(const rill_type_t* t, const char* name, int64_t flags, struct ArrowSchema* s);

#endif /* RILL_ARROW_SCHEMA_H */
