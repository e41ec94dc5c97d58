/* The checks every fuzz target makes of a row the engine handed out: each cell's bytes are
 * read (so a sanitizer sees a bad one), string cells are UTF-8 and a null string cell is
 * empty. Returns a hash of the row (validity and bytes of each cell) for targets that compare
 * two reads. No test framework: a failed check is abort(). */
#ifndef RILL_FUZZ_ROWS_H
#define RILL_FUZZ_ROWS_H

#include <stdint.h>
#include <stdlib.h>

#include "rill.h"
#include "text.h"

static inline uint64_t fuzz_mix(uint64_t h, const void* p, size_t n) {
  const uint8_t* b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static inline uint64_t fuzz_check_row(const rill_row_t* row) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int c = 0; c < row->ncolumns; c++) {
    const rill_array_t* a = rill_row_get(row, c);
    int64_t nb = 0;
    const uint8_t* p = rill_array_cell(a, 0, &nb);
    int valid = rill_array_is_valid(a, 0);
    if (a->type.dtype == RILL_STRING && rill__utf8_invalid((const char*)p, nb) >= 0) abort(); /* text is UTF-8 */
    if (a->type.dtype == RILL_STRING && !valid && nb != 0) abort();                        /* a null is empty */
    h = fuzz_mix(h, &valid, sizeof valid);
    if (valid) h = fuzz_mix(h, p, (size_t)nb);
  }
  return h;
}

#endif
