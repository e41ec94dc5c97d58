/* Stage functions used both by the Criterion engine tests and by the ThreadSanitizer
 * programs; plain C, no test framework. */
#ifndef RILL_TEST_SHARED_STAGES_H
#define RILL_TEST_SHARED_STAGES_H

#include "rill.h"

/* Map: float64 out = int64 input + a uniform draw of the cell's generator. */
static inline int map_rand(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* ex, void* ctx,
                           rill_error_t* err) {
  int64_t n = in[0]->length;
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_FLOAT64), n);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc failed");
  for (int64_t i = 0; i < n; i++) {
    rill_rng_t g = rill_exec_rng(ex, i);
    ((double*)out->data)[i] = (double)((const int64_t*)in[0]->data)[i] + rill_rng_uniform(&g);
  }
  return RILL_OK;
}

#endif
