/* Export cost of zero-copy Arrow / DLPack exports at 1e3 and 1e7 rows: the cost must not
 * depend on the row count (ratio ~1). BOOL (bit-packed on export: a copy) is the peer that
 * does scale, measured in the same run. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "rill.h"
#include "rill_interop.h"

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static rill_array_t* make(rill_type_t t, int64_t n) {
  rill_error_t err = {0};
  rill_array_t* a = NULL;
  if (rill_array_new(t, n, &a, &err) != RILL_OK) {
    fprintf(stderr, "rill_array_new: %s\n", err.message);
    return NULL;
  }
  if (t.dtype == RILL_STRING) {
    /* filled directly (we own the array being built): 8 bytes per cell */
    if (rill_array_reserve(a, n * 8) != RILL_OK) return NULL;
    for (int64_t i = 0; i < n; i++) {
      memcpy((char*)a->data + i * 8, "abcdefgh", 8);
      a->offsets[i + 1] = (i + 1) * 8;
    }
    a->data_size = n * 8;
  }
  return a;
}

/* Seconds per export+release, averaged over a time budget. */
static double arrow_cost(const rill_array_t* a) {
  int64_t iters = 0;
  double t0 = now(), t;
  do {
    for (int k = 0; k < 100; k++) {
      struct ArrowSchema s;
      struct ArrowArray arr;
      if (rill_array_export_arrow(a, &s, &arr, NULL) != RILL_OK) return -1;
      arr.release(&arr);
      s.release(&s);
    }
    iters += 100;
    t = now();
  } while (t - t0 < 0.2);
  return (t - t0) / (double)iters;
}

static double dlpack_cost(const rill_array_t* a) {
  int64_t iters = 0;
  double t0 = now(), t;
  do {
    for (int k = 0; k < 100; k++) {
      DLManagedTensorVersioned* m = NULL;
      if (rill_array_export_dlpack(a, &m, NULL) != RILL_OK) return -1;
      m->deleter(m);
    }
    iters += 100;
    t = now();
  } while (t - t0 < 0.2);
  return (t - t0) / (double)iters;
}

int main(void) {
  struct { const char* name; rill_type_t type; int dlpack; } cases[] = {
    {"int64", rill_type_scalar(RILL_INT64), 1},
    {"float32", rill_type_scalar(RILL_FLOAT32), 1},
    {"string", rill_type_scalar(RILL_STRING), 0},
    {"float32[3,4] tensor", rill_type_tensor(RILL_FLOAT32, 2, (int64_t[]){3, 4}), 1},
    {"bool (copy: peer)", rill_type_scalar(RILL_BOOL), 0},
  };
  printf("%-22s %-7s %14s %14s %10s\n", "type", "export", "1e3 rows (ns)", "1e7 rows (ns)", "ratio");
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    rill_array_t* small = make(cases[c].type, 1000);
    rill_array_t* large = make(cases[c].type, 10000000);
    if (small == NULL || large == NULL) return 1;
    double s = arrow_cost(small), l = arrow_cost(large);
    printf("%-22s %-7s %14.1f %14.1f %9.2fx\n", cases[c].name, "arrow", s * 1e9, l * 1e9, l / s);
    if (cases[c].dlpack) {
      s = dlpack_cost(small);
      l = dlpack_cost(large);
      printf("%-22s %-7s %14.1f %14.1f %9.2fx\n", cases[c].name, "dlpack", s * 1e9, l * 1e9, l / s);
    }
    rill_array_release(small);
    rill_array_release(large);
  }
  return 0;
}
