/* Text-to-value conversion shared by the CSV and SQLite sources: integers, floats (with an
 * exact fast path), bools, ISO 8601 timestamps (rill_parse_timestamp, public), the rule for
 * which dtypes text converts to, and unique column names. Not installed. */
#ifndef RILL_TEXT_H
#define RILL_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rill.h"
#include "rill_addons.h"

/* Each returns RILL_OK, RILL_EFORMAT (not a value of the type) or RILL_ERANGE (too large);
 * rill__parse_double also RILL_ENOMEM (a long text copied to terminate it). */
int rill__parse_int64(const char* s, size_t n, int64_t* v);
int rill__parse_uint64(const char* s, size_t n, uint64_t* v);
int rill__parse_double(const char* s, size_t n, double* v);
/* "true"/"false" in any case; "1"/"0" too when allow01. */
int rill__parse_bool(const char* s, size_t n, int allow01, uint8_t* v);
/* Stores text `s[0..n)` as cell i of fixed-shape scalar array `out` of dtype `dt`
 * (BOOL, INT8..UINT64, FLOAT32, FLOAT64, TIMESTAMP_US). An empty text is not a value here:
 * the callers decide which texts are null. */
int rill__store_text(rill_array_t* out, int64_t i, rill_dtype_t dt, const char* s, size_t n);
/* 1 when text converts to `dt` (the dtypes above and STRING). */
int rill__text_dtype_supported(rill_dtype_t dt);
/* The offset of the first byte of s[0..n) that does not start a well-formed UTF-8 sequence
 * (Unicode's table of well-formed byte sequences: no overlong forms, surrogates or code
 * points past U+10FFFF; a sequence cut by the end is not well formed), or -1 when all of it
 * is. Texts of 64 bytes or more are checked 32 bytes a step with AVX2 where the CPU has it;
 * otherwise (and to find the place in a text that fails) by an automaton, ASCII runs 16 bytes
 * a step. */
int64_t rill__utf8_invalid(const char* s, int64_t n);
/* The same by the automaton alone (what the vector check is tested against). */
int64_t rill__utf8_invalid_scalar(const char* s, int64_t n);
/* 1 when s[0..n) is ASCII only (32 bytes a step, no branch on the data). */
int rill__ascii_only(const char* s, int64_t n);
/* s[0..n) written as UTF-8 at o (room for 2n bytes), each byte the Latin-1 character of its
 * value; returns the bytes written. */
int64_t rill__latin1_to_utf8(const char* s, int64_t n, char* o);
/* s[0..n) written at o (room for 3n bytes) with each ill-formed part of it replaced by U+FFFD:
 * a maximal start of a well-formed sequence that ends too soon, or else one byte (Unicode's
 * recommended practice, as Python's "replace" error handler); returns the bytes written. */
int64_t rill__utf8_lossy(const char* s, int64_t n, char* o);

/* Text of encoding `enc` (LATIN1 or UTF8_LOSSY) written as UTF-8 at o (room for
 * rill__recode_room(enc, n) bytes): rill__latin1_to_utf8 or rill__utf8_lossy; returns the bytes
 * written. */
int64_t rill__recode(rill_csv_encoding_t enc, const char* s, int64_t n, char* o);
static inline int64_t rill__recode_room(rill_csv_encoding_t enc, int64_t n) { return n * (enc == RILL_CSV_LATIN1 ? 2 : 3); }
/* 1 when text s[0..n) of encoding `enc` is copied as it is into a STRING cell: it is
 * ASCII (LATIN1) or UTF-8 (UTF8, UTF8_LOSSY). *bad (bad may be NULL): under UTF8 the offset
 * of the first byte that is not UTF-8, or -1; under the others -1. */
int rill__text_as_is(rill_csv_encoding_t enc, const char* s, int64_t n, int64_t* bad);

/* Renames repeated names in place ("a", "a" -> "a", "a<sep>1"); names are rill__alloc'ed
 * strings. RILL_OK or RILL_ENOMEM. Linear time. */
int rill__unique_names(char** names, int n, char sep);
/* Frees the column names `names[0..n)` (and the vector) and the dtypes of a source's columns;
 * either may be NULL. */
void rill__free_columns(char** names, rill_dtype_t* types, int n);
/* A rill__alloc'ed copy of the column name `s[0..n)`, or "column_<k>" when it is empty
 * (s may then be NULL); NULL when out of memory. */
char* rill__column_name(const char* s, size_t n, int k);
/* The same for a name of encoding `enc`, made UTF-8 (names go to Arrow schemas). Under UTF8 a
 * name that is not UTF-8 gives NULL with *bad the offset of its first bad byte; otherwise
 * *bad is -1 (NULL then means out of memory). */
char* rill__column_name_in(rill_csv_encoding_t enc, const char* s, size_t n, int k, int64_t* bad);
/* The column that type override `ov` names among `names[0..n)`: its index, or RILL_EINVAL with
 * "<who>: type override for unknown column 'x'" or "... column index i (the <what> has n
 * columns)". */
int rill__override_column(const rill_csv_column_t* ov, char* const* names, int n, const char* who,
                          const char* what, rill_error_t* err);

/* ---- the plain-decimal path, inline for loops over many cells */
#if defined(__GNUC__)
#define RILL__TEXT_INLINE static inline __attribute__((always_inline))
#else
#define RILL__TEXT_INLINE static inline
#endif
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define RILL_TEXT_SWAR 1
/* The value of the `len` (1..8) decimal digits in the low bytes of x (byte 0 first); the
 * bytes above them are ignored; -1 when one of them is not a digit. */
RILL__TEXT_INLINE int64_t rill__swar_word(uint64_t x, size_t len) {
  if (len < 8) x = (x << (8 * (8 - len))) | (0x3030303030303030ULL >> (8 * len)); /* '0'-padded in front */
  const uint64_t hi = 0xF0F0F0F0F0F0F0F0ULL;
  if (((x & hi) | (((x + 0x0606060606060606ULL) & hi) >> 4)) != 0x3333333333333333ULL) return -1;
  x -= 0x3030303030303030ULL;
  x = (x * 10 + (x >> 8)) & 0x00FF00FF00FF00FFULL;
  x = (x * 100 + (x >> 16)) & 0x0000FFFF0000FFFFULL;
  x = (x * 10000 + (x >> 32)) & 0xFFFFFFFFULL;
  return (int64_t)x;
}
/* The value of the `len` (1..8) decimal digits at p, from one 8-byte load (8 bytes must be
 * readable at p); -1 when one of them is not a digit. */
static inline int64_t rill__swar_digits(const char* p, size_t len) {
  uint64_t x;
  memcpy(&x, p, 8);
  return rill__swar_word(x, len);
}
#else
#define RILL_TEXT_SWAR 0
#endif

/* The plain decimal forms [-]digits and [-]digits.digits, up to 8 digits on each side, read
 * 8 bytes at a time, with `point` as the decimal separator ('.' in rill__parse_plain_decimal);
 * 0 when the text is something else (the general parsers decide then). The double is the one
 * the fast path of rill__parse_double gives: same mantissa, same power of ten, one correctly
 * rounded division. `room`: bytes readable from p. */
RILL__TEXT_INLINE int rill__parse_plain_decimal_with(const char* p, size_t len, int64_t room, int want_double,
                                                     char point, void* out) {
#if RILL_TEXT_SWAR
  static const double p10[9] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8};
  static const int64_t i10[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};
  const uint64_t points = 0x0101010101010101ULL * (unsigned char)point;
  size_t neg = p[0] == '-', dot = neg;
  if (len - neg - 1 < 8 && room >= (int64_t)neg + 8) {
    /* 1..8 bytes after the sign: one load; a point among them gives way to a leading '0',
     * leaving at most 8 digits whose value is the mantissa, and the digits after the point
     * the power of ten */
    uint64_t x;
    memcpy(&x, p + neg, 8);
    size_t tl = len - neg, fl = 0;
    if (want_double) {
      uint64_t y = x ^ points;
      uint64_t z = (y - 0x0101010101010101ULL) & ~y & 0x8080808080808080ULL;
      size_t k = z ? (size_t)__builtin_ctzll(z) / 8 : 8; /* the first point */
      if (k < tl) {
        if (tl == 1) return 0; /* the point alone */
        /* the digits before the point move up one byte over it and a '0' leads them: the same
         * value in the same tl bytes (a whole word needs no padding below) */
        uint64_t below = ((uint64_t)1 << (8 * k)) - 1; /* k <= 7 */
        x = (x & ~((below << 8) | 0xFF)) | ((x & below) << 8) | 0x30;
        fl = tl - k - 1;
      }
    }
    int64_t m = rill__swar_word(x, tl);
    if (m < 0) return 0;
    if (!want_double) {
      *(int64_t*)out = neg ? -m : m;
      return 1;
    }
    double v = (double)m / p10[fl];
    *(double*)out = neg ? -v : v;
    return 1;
  }
  if (room >= 8) { /* the first point among the first 8 bytes: lowest zero byte of x ^ points */
    uint64_t x;
    memcpy(&x, p, 8);
    x ^= points;
    uint64_t z = (x - 0x0101010101010101ULL) & ~x & 0x8080808080808080ULL;
    dot = z ? (size_t)__builtin_ctzll(z) / 8 : 8;
    if (dot > len) dot = len;
  }
  while (dot < len && p[dot] != point) dot++;
  size_t il = dot - neg, fl = dot < len ? len - dot - 1 : 0;
  if (il > 8 || fl > 8 || il + fl == 0 || (!want_double && dot < len) || room < (int64_t)(dot + 9)) return 0;
  int64_t ip = il ? rill__swar_digits(p + neg, il) : 0, fp = fl ? rill__swar_digits(p + dot + 1, fl) : 0;
  if (ip < 0 || fp < 0) return 0;
  if (!want_double) {
    *(int64_t*)out = neg ? -ip : ip;
    return 1;
  }
  int64_t m = ip * i10[fl] + fp; /* below 10^16: exact below 2^53 only */
  if (m > ((int64_t)1 << 53)) return 0;
  double x = (double)m / p10[fl];
  *(double*)out = neg ? -x : x;
  return 1;
#else
  (void)p; (void)len; (void)room; (void)want_double; (void)point; (void)out;
  return 0;
#endif
}

RILL__TEXT_INLINE int rill__parse_plain_decimal(const char* p, size_t len, int64_t room, int want_double, void* out) {
  return rill__parse_plain_decimal_with(p, len, room, want_double, '.', out);
}

#endif /* RILL_TEXT_H */
