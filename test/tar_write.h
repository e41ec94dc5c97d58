/* A tar writer for the tests and the fuzz target, from the POSIX ustar layout (pax and GNU
 * extensions as their headers are specified), without the test framework: headers written
 * field by field so that a test can damage any of them. */
#ifndef RILL_TEST_TAR_WRITE_H
#define RILL_TEST_TAR_WRITE_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

enum { TW_USTAR = 0, TW_GNU = 1, TW_V7 = 2 };

/* v as `width - 1` octal digits and a NUL. */
static inline void tw_octal(uint8_t* dst, int width, uint64_t v) {
  for (int i = width - 2; i >= 0; i--, v >>= 3) dst[i] = (uint8_t)('0' + (v & 7));
  dst[width - 1] = 0;
}

/* A header block for `name` (its first 100 bytes; a ustar prefix when given), `size` bytes of
 * `type` ('0', '5', 'x', 'L', ...), in format `fmt`; base256: the size written as GNU's binary. */
static inline void tw_header(uint8_t h[512], const char* name, const char* prefix, int64_t size, char type, int fmt,
                             int base256) {
  memset(h, 0, 512);
  size_t n = strlen(name);
  memcpy(h, name, n > 100 ? 100 : n);
  memcpy(h + 100, "0000644", 7);
  memcpy(h + 108, "0001750", 7);
  memcpy(h + 116, "0001750", 7);
  if (base256) {
    h[124] = 0x80;
    for (int i = 0; i < 8; i++) h[135 - i] = (uint8_t)((uint64_t)size >> (8 * i));
  } else {
    tw_octal(h + 124, 12, (uint64_t)size);
  }
  memcpy(h + 136, "14717422627", 11);
  h[156] = (uint8_t)type;
  if (fmt == TW_USTAR) {
    memcpy(h + 257, "ustar\0" "00", 8);
    if (prefix) memcpy(h + 345, prefix, strlen(prefix) > 155 ? 155 : strlen(prefix));
  } else if (fmt == TW_GNU) {
    memcpy(h + 257, "ustar  \0", 8);
  }
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (int i = 0; i < 512; i++) sum += h[i];
  tw_octal(h + 148, 7, sum);
  h[155] = ' ';
}

/* Writes a header and its data padded to whole blocks. */
static inline void tw_member(FILE* f, const char* name, const void* data, int64_t size, char type, int fmt) {
  uint8_t h[512];
  tw_header(h, name, NULL, size, type, fmt, 0);
  fwrite(h, 1, 512, f);
  if (size > 0) {
    fwrite(data, 1, (size_t)size, f);
    static const uint8_t zero[512];
    if (size % 512) fwrite(zero, 1, (size_t)(512 - size % 512), f);
  }
}

/* A regular file member. */
static inline void tw_file(FILE* f, const char* name, const void* data, int64_t size) {
  tw_member(f, name, data, size, '0', TW_USTAR);
}

/* A regular file whose name comes from a GNU 'L' header. */
static inline void tw_gnu_long(FILE* f, const char* name, const void* data, int64_t size) {
  tw_member(f, "././@LongLink", name, (int64_t)strlen(name) + 1, 'L', TW_GNU);
  tw_member(f, "short", data, size, '0', TW_GNU);
}

/* A pax 'x' header holding one record "key=value". */
static inline void tw_pax(FILE* f, const char* key, const char* value) {
  char rec[1200];
  size_t body = strlen(key) + strlen(value) + 3; /* ' ', '=', '\n' */
  size_t len = body + 1;
  while ((size_t)snprintf(NULL, 0, "%zu", len) + body != len) len++;
  snprintf(rec, sizeof rec, "%zu %s=%s\n", len, key, value);
  tw_member(f, "PaxHeader/x", rec, (int64_t)len, 'x', TW_USTAR);
}

/* The two zero blocks that end an archive. */
static inline void tw_end(FILE* f) {
  static const uint8_t zero[1024];
  fwrite(zero, 1, sizeof zero, f);
}

#endif
