/* libFuzzer target: rill_expand_braces over any pattern (the input up to its first NUL, at
 * most 512 bytes). Checked: a success gives at least one path, each a string; a pattern with
 * no brace and no backslash gives itself alone; a pattern with no backslash gives paths whose
 * characters other than braces, commas, digits, dots, signs and letters all come from the
 * pattern; a failure is RILL_EINVAL or RILL_ENOMEM with a message naming the call. Any crash,
 * sanitizer report or abort() is a bug. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rill.h"
#include "rill_addons.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static int is_range_char(unsigned char c) {
  return c == '-' || c == '+' || (c >= '0' && c <= '9') || (c >= 'A' && c <= 'z');
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 512) return 0;
  char pattern[513];
  memcpy(pattern, data, size);
  pattern[size] = 0;
  char** p = NULL;
  int64_t n = -1;
  rill_error_t err = {0};
  int rc = rill_expand_braces(pattern, &p, &n, &err);
  if (rc != RILL_OK) {
    if ((rc != RILL_EINVAL && rc != RILL_ENOMEM) || err.code != rc) abort();
    if (strncmp(err.message, "expand_braces: ", 15) != 0) abort();
    if (p || n != 0) abort();
    return 0;
  }
  if (n < 1 || n > RILL_EXPAND_MAX_PATHS || !p) abort();
  int plain = !strpbrk(pattern, "{}\\");
  if (plain && (n != 1 || strcmp(p[0], pattern) != 0)) abort();
  if (!strchr(pattern, '\\')) {
    uint8_t in_pattern[256] = {0};
    for (const unsigned char* c = (const unsigned char*)pattern; *c; c++) in_pattern[*c] = 1;
    for (int64_t i = 0; i < n; i++) {
      if (!p[i]) abort();
      for (const unsigned char* c = (const unsigned char*)p[i]; *c; c++)
        if (!in_pattern[*c] && !is_range_char(*c)) abort(); /* only ranges make new characters */
    }
  }
  rill_expand_braces_free(p, n);
  return 0;
}
