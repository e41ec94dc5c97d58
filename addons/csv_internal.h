/* Text-to-value conversions shared by the CSV and SQLite sources. Not installed. */
#ifndef RILL_CSV_INTERNAL_H
#define RILL_CSV_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "rill.h"

/* Each returns RILL_OK, RILL_EFORMAT (not a value of the type) or RILL_ERANGE (too large). */
int rill__parse_int64(const char* s, size_t n, int64_t* v);
int rill__parse_uint64(const char* s, size_t n, uint64_t* v);
int rill__parse_double(const char* s, size_t n, double* v);
/* "true"/"false" in any case; "1"/"0" too when allow01. */
int rill__parse_bool(const char* s, size_t n, int allow01, uint8_t* v);
/* Stores text `s[0..n)` as cell i of fixed-shape scalar array `out` of dtype `dt`
 * (BOOL, INT8..UINT64, FLOAT32, FLOAT64, TIMESTAMP_US). */
int rill__store_text(rill_array_t* out, int64_t i, rill_dtype_t dt, const char* s, size_t n);
/* 1 when `dt` is a dtype the CSV/SQLite sources can produce. */
int rill__text_dtype_supported(rill_dtype_t dt);

/* Renames repeated names in place ("a", "a" -> "a", "a<sep>1"); names are rill__alloc'ed
 * strings. RILL_OK or RILL_ENOMEM. Linear time. */
int rill__unique_names(char** names, int n, char sep);

#endif /* RILL_CSV_INTERNAL_H */
