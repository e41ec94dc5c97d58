/* Helpers shared by the C tests (Criterion). */
#ifndef RILL_TEST_COMMON_H
#define RILL_TEST_COMMON_H

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill.h"
#include "rill_addons.h"

/* Asserts that `call` returned RILL_OK, printing rill's message otherwise. */
#define RT_OK(call, err)                                                                     \
  do {                                                                                       \
    int rt_status_ = (call);                                                                 \
    cr_assert_eq(rt_status_, RILL_OK, "%s returned %d (%s): %s", #call, rt_status_,          \
                 rill_strerror(rt_status_), (err).message);                                  \
  } while (0)

/* Asserts that `call` returned `code` and that the message contains `needle`. */
#define RT_FAILS(call, want, needle, err)                                                    \
  do {                                                                                       \
    int rt_status_ = (call);                                                                 \
    cr_assert_eq(rt_status_, (want), "%s returned %d, expected %d; message: %s", #call,      \
                 rt_status_, (want), (err).message);                                         \
    cr_assert((err).code == (want), "err.code %d, expected %d", (err).code, (want));         \
    cr_assert(strstr((err).message, (needle)) != NULL, "message '%s' lacks '%s'",            \
              (err).message, (needle));                                                      \
  } while (0)

/* The repository root (tests read test/data from there). */
static inline const char* rt_root(void) {
  const char* r = getenv("RILL_TEST_ROOT");
  return r && *r ? r : ".";
}

/* A temporary directory unique to this process, created on first use. */
static inline const char* rt_tmpdir(void) {
  static char dir[256];
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/rill-test-XXXXXX");
    if (!mkdtemp(dir)) cr_assert_fail("mkdtemp failed");
  }
  return dir;
}

#endif
