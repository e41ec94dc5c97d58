/* Helpers of the ThreadSanitizer programs: plain C (no test framework), a CHECK macro that
 * counts passes and failures, and stage functions that verify their own inputs. */
#ifndef RILL_TSAN_COMMON_H
#define RILL_TSAN_COMMON_H

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill.h"
#include "rill_addons.h"
#include "shared_stages.h"

static int tsan_pass, tsan_fail;

#define CHECK(cond, ...)                                                 \
  do {                                                                   \
    if (cond) {                                                          \
      tsan_pass++;                                                       \
    } else {                                                             \
      tsan_fail++;                                                       \
      fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                      \
      fputc('\n', stderr);                                               \
    }                                                                    \
  } while (0)

#define CHECK_OK(call, err)                                                          \
  do {                                                                               \
    int tsan_rc_ = (call);                                                           \
    CHECK(tsan_rc_ == RILL_OK, "%s returned %d: %s", #call, tsan_rc_, (err).message); \
  } while (0)

/* Prints the summary line and returns the exit status. */
static inline int tsan_report(void) {
  printf("%d passed, %d failed\n", tsan_pass, tsan_fail);
  return tsan_fail ? 1 : 0;
}

typedef struct stage_ctx {
  int64_t fail_mod;            /* rows with row % fail_mod == fail_rem fail (0: none) */
  int64_t fail_rem;
  _Atomic int64_t calls;
  _Atomic int64_t inflight;    /* calls running now */
  _Atomic int64_t overlap;     /* a call started while another ran */
} stage_ctx_t;

static inline int stage_enter(stage_ctx_t* c) {
  atomic_fetch_add(&c->calls, 1);
  if (atomic_fetch_add(&c->inflight, 1) > 0) atomic_fetch_add(&c->overlap, 1);
  return 0;
}

static inline void stage_leave(stage_ctx_t* c) { atomic_fetch_sub(&c->inflight, 1); }

static inline int stage_fails(const stage_ctx_t* c, int64_t row) {
  return c && c->fail_mod > 0 && row % c->fail_mod == c->fail_rem;
}

/* Enters a call and allocates its int64 output of n cells; on failure the call is over. */
static inline int stage_alloc(stage_ctx_t* c, rill_exec_t* ex, rill_array_t* out, int64_t n, rill_error_t* err) {
  stage_enter(c);
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_INT64), n);
  if (r != RILL_OK) {
    stage_leave(c);
    return rill_error_set(err, r, "alloc failed");
  }
  return RILL_OK;
}

/* Source: int64 cell = 3 * row id. */
static inline int tsrc(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* ex, void* ctx,
                       rill_error_t* err) {
  stage_ctx_t* c = ctx;
  int r = stage_alloc(c, ex, out, n, err);
  if (r != RILL_OK) return r;
  for (int64_t i = 0; i < n; i++) {
    if (stage_fails(c, rows[i])) {
      stage_leave(c);
      err->row = i;
      return rill_error_set(err, RILL_EFORMAT, "bad source row %lld", (long long)rows[i]);
    }
    ((int64_t*)out->data)[i] = 3 * rows[i];
  }
  stage_leave(c);
  return RILL_OK;
}

/* Map: int64 out = in + 1; fails on the rows chosen by the context. */
static inline int tplus(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* ex, void* ctx,
                        rill_error_t* err) {
  stage_ctx_t* c = ctx;
  int64_t n = in[0]->length;
  int r = stage_alloc(c, ex, out, n, err);
  if (r != RILL_OK) return r;
  const int64_t* rows = rill_exec_rows(ex);
  for (int64_t i = 0; i < n; i++) {
    if (stage_fails(c, rows[i])) {
      stage_leave(c);
      err->row = i;
      return rill_error_set(err, RILL_EFORMAT, "bad map row %lld", (long long)rows[i]);
    }
    ((int64_t*)out->data)[i] = ((const int64_t*)in[0]->data)[i] + 1;
  }
  stage_leave(c);
  return RILL_OK;
}

/* Map: BOOL out = (in / 3) % 3 != 0 (keeps two rows of three). */
static inline int tkeep(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* ex, void* ctx,
                        rill_error_t* err) {
  int64_t n = in[0]->length;
  int r = rill_exec_alloc(ex, out, rill_type_scalar(RILL_BOOL), n);
  if (r != RILL_OK) return rill_error_set(err, r, "alloc failed");
  for (int64_t i = 0; i < n; i++) ((uint8_t*)out->data)[i] = (((const int64_t*)in[0]->data)[i] / 3) % 3 != 0;
  return RILL_OK;
}

static inline int64_t i64_at(const rill_array_t* a, int64_t i) { return ((const int64_t*)a->data)[i]; }

#endif
