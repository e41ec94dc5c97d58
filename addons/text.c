/* Text-to-value conversion shared by the CSV and SQLite sources: integers, floats (a fast
 * exact path, strtod otherwise), bools, ISO 8601 timestamps, storing a text as a cell of a
 * given dtype, and making column names unique. */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "rill_addons.h"
#include "text.h"

/* ------------------------------------------------------------------ numbers and bools */

int rill__parse_uint64(const char* s, size_t n, uint64_t* v) {
  size_t i = 0;
  if (n > 0 && s[0] == '+') i = 1;
  if (i == n) return RILL_EFORMAT;
  uint64_t acc = 0;
  if (n - i <= 19) { /* at most 19 digits cannot overflow */
    for (; i < n; i++) {
      unsigned d = (unsigned)((unsigned char)s[i] - '0');
      if (d > 9) return RILL_EFORMAT;
      acc = acc * 10 + d;
    }
    *v = acc;
    return RILL_OK;
  }
  int over = 0;
  for (; i < n; i++) {
    unsigned d = (unsigned)((unsigned char)s[i] - '0');
    if (d > 9) return RILL_EFORMAT;
    if (acc > (UINT64_MAX - d) / 10) over = 1;
    else acc = acc * 10 + d;
  }
  if (over) return RILL_ERANGE;
  *v = acc;
  return RILL_OK;
}

int rill__parse_int64(const char* s, size_t n, int64_t* v) {
  int neg = n > 0 && s[0] == '-';
  if (neg && n > 1 && s[1] == '+') return RILL_EFORMAT;
  uint64_t acc;
  int rc = rill__parse_uint64(s + neg, n - (size_t)neg, &acc);
  if (rc != RILL_OK) return rc;
  if (neg) {
    if (acc > (uint64_t)INT64_MAX + 1) return RILL_ERANGE;
    *v = acc == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)acc;
  } else {
    if (acc > (uint64_t)INT64_MAX) return RILL_ERANGE;
    *v = (int64_t)acc;
  }
  return RILL_OK;
}

static int ieq(const char* s, size_t n, const char* lit) {
  size_t m = strlen(lit);
  if (n != m) return 0;
  for (size_t i = 0; i < n; i++) {
    char c = s[i];
    if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
    if (c != lit[i]) return 0;
  }
  return 1;
}

int rill__parse_double(const char* s, size_t n, double* v) {
  if (n == 0) return RILL_EFORMAT;
  size_t i = (s[0] == '+' || s[0] == '-') ? 1 : 0;
  /* Clinger's fast path: a mantissa below 2^53 and a power of ten up to 22 give the correctly
   * rounded result with one multiplication or division. It accepts only [sign] digits [. digits]
   * [e [sign] digits], which the checks below would pass too; anything else goes on to them. */
  static const double p10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  {
    const char *p = s + i, *e = s + n, *q;
    uint64_t m = 0;
    for (q = p; p < e && (unsigned)(*p - '0') <= 9; p++) m = m * 10 + (uint64_t)(*p - '0');
    int nd = (int)(p - q), scale = 0;
    if (p < e && *p == '.') {
      p++;
      for (q = p; p < e && (unsigned)(*p - '0') <= 9; p++) m = m * 10 + (uint64_t)(*p - '0');
      scale = (int)(p - q);
      nd += scale;
    }
    int ex = 0, ok = nd > 0 && nd <= 19; /* 19 digits cannot overflow m */
    if (ok && p < e && (*p == 'e' || *p == 'E')) {
      p++;
      int eneg = p < e && *p == '-';
      if (p < e && (*p == '-' || *p == '+')) p++;
      int ed = 0;
      for (; p < e && (unsigned)(*p - '0') <= 9 && ed < 4; p++, ed++) ex = ex * 10 + (*p - '0');
      if (ed == 0) ok = 0;
      if (eneg) ex = -ex;
    }
    int e10 = ex - scale;
    if (ok && p == e && m <= (1ULL << 53) && e10 >= -22 && e10 <= 22) {
      double x = (double)m;
      x = e10 < 0 ? x / p10[-e10] : x * p10[e10];
      *v = s[0] == '-' ? -x : x;
      return RILL_OK;
    }
  }
  const char* w = s + i;
  size_t wn = n - i;
  if (wn >= 3 && (w[0] == 'n' || w[0] == 'N' || w[0] == 'i' || w[0] == 'I') &&
      (ieq(w, wn, "nan") || ieq(w, wn, "inf") || ieq(w, wn, "infinity"))) {
    double x = (w[0] == 'n' || w[0] == 'N') ? NAN : INFINITY;
    *v = s[0] == '-' ? -x : x;
    return RILL_OK;
  }
  int digits = 0;
  for (size_t k = i; k < n; k++) {
    char c = s[k];
    if (c >= '0' && c <= '9') digits = 1;
    else if (c != '.' && c != 'e' && c != 'E' && c != '+' && c != '-') return RILL_EFORMAT;
  }
  if (!digits) return RILL_EFORMAT;
  char small[64];
  char* buf = small;
  if (n >= sizeof small) {
    buf = rill__alloc(n + 1);
    if (!buf) return RILL_ENOMEM;
  }
  memcpy(buf, s, n);
  buf[n] = 0;
  char* end = NULL;
  errno = 0;
  double x = strtod(buf, &end);
  int rc = RILL_OK;
  if (end != buf + n) rc = RILL_EFORMAT;
  else if (errno == ERANGE && isinf(x)) rc = RILL_ERANGE;
  if (buf != small) rill__free(buf);
  if (rc == RILL_OK) *v = x;
  return rc;
}

int rill__parse_bool(const char* s, size_t n, int allow01, uint8_t* v) {
  if (ieq(s, n, "true")) { *v = 1; return RILL_OK; }
  if (ieq(s, n, "false")) { *v = 0; return RILL_OK; }
  if (allow01 && n == 1 && (s[0] == '0' || s[0] == '1')) { *v = (uint8_t)(s[0] == '1'); return RILL_OK; }
  return RILL_EFORMAT;
}

/* ------------------------------------------------------------------ timestamps */

static int digits_at(const char* s, size_t n, size_t at, int count, int* out) {
  if (at + (size_t)count > n) return 0;
  int v = 0;
  for (int k = 0; k < count; k++) {
    unsigned d = (unsigned)((unsigned char)s[at + (size_t)k] - '0');
    if (d > 9) return 0;
    v = v * 10 + (int)d;
  }
  *out = v;
  return 1;
}

static int64_t days_from_civil(int64_t y, int m, int d) {
  y -= m <= 2;
  int64_t era = (y >= 0 ? y : y - 399) / 400;
  int64_t yoe = y - era * 400;
  int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

int rill_parse_timestamp(const char* s, size_t n, int64_t* us) {
  int y, mo, d, h = 0, mi = 0, sec = 0;
  if (!s || !us) return RILL_EFORMAT;
  if (!digits_at(s, n, 0, 4, &y) || n < 10 || s[4] != '-' || !digits_at(s, n, 5, 2, &mo) ||
      s[7] != '-' || !digits_at(s, n, 8, 2, &d))
    return RILL_EFORMAT;
  static const int mdays[12] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1]) return RILL_EFORMAT;
  int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  if (mo == 2 && d == 29 && !leap) return RILL_EFORMAT;
  size_t i = 10;
  int64_t frac = 0;
  if (i < n && (s[i] == 'T' || s[i] == ' ')) {
    if (!digits_at(s, n, i + 1, 2, &h) || i + 3 >= n || s[i + 3] != ':' ||
        !digits_at(s, n, i + 4, 2, &mi))
      return RILL_EFORMAT;
    i += 6;
    if (i < n && s[i] == ':') {
      if (!digits_at(s, n, i + 1, 2, &sec)) return RILL_EFORMAT;
      i += 3;
      if (i < n && (s[i] == '.' || s[i] == ',')) {
        i++;
        int nd = 0;
        while (i < n && s[i] >= '0' && s[i] <= '9') {
          if (nd < 6) frac = frac * 10 + (s[i] - '0');
          nd++;
          i++;
        }
        if (nd == 0) return RILL_EFORMAT;
        for (int k = nd; k < 6; k++) frac *= 10;
      }
    }
    if (h > 23 || mi > 59 || sec > 59) return RILL_EFORMAT;
  }
  int64_t tz = 0;
  if (i < n && (s[i] == 'Z' || s[i] == 'z')) {
    i++;
  } else if (i < n && (s[i] == '+' || s[i] == '-') && i > 10) {
    int th, tm = 0;
    int sign = s[i] == '-' ? -1 : 1;
    if (!digits_at(s, n, i + 1, 2, &th)) return RILL_EFORMAT;
    i += 3;
    if (i < n && s[i] == ':') {
      if (!digits_at(s, n, i + 1, 2, &tm)) return RILL_EFORMAT;
      i += 3;
    } else if (i < n) {
      if (!digits_at(s, n, i, 2, &tm)) return RILL_EFORMAT;
      i += 2;
    }
    if (th > 23 || tm > 59) return RILL_EFORMAT;
    tz = sign * (th * 3600 + tm * 60);
  }
  if (i != n) return RILL_EFORMAT;
  int64_t secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - tz;
  *us = secs * 1000000 + frac;
  return RILL_OK;
}

/* ------------------------------------------------------------------ cells */

/* UTF-8 as an automaton over byte classes, from Unicode's table of well-formed sequences.
 * Classes: 0 ASCII; 1 80..8F, 2 90..9F, 3 A0..BF (continuations); 4 C2..DF; 5 E0; 6 E1..EC and
 * EE..EF; 7 ED; 8 F0; 9 F1..F3; 10 F4; 11 C0, C1, F5..FF (never in UTF-8). States: 0 between
 * characters; 1, 2, 3 continuations to go; 4 after E0 (A0..BF next), 5 after ED (80..9F next),
 * 6 after F0 (90..BF next), 7 after F4 (80..8F next); 8 not UTF-8 (absorbing). A class's row
 * holds the next state of each state s at bits 6s.. (as 6 x state, the shift for the next
 * byte): one shift per byte. */
static const uint8_t utf8_class[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 00..0F */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 10..1F */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 20..2F */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 30..3F */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 40..4F */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 50..5F */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 60..6F */
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, /* 70..7F */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 80..8F */
    2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, /* 90..9F */
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, /* A0..AF */
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, /* B0..BF */
    11, 11, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, /* C0..CF */
    4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, /* D0..DF */
    5, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 7, 6, 6, /* E0..EF */
    8, 9, 9, 9, 10, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11, /* F0..FF */
};

#define U8_ROW(s0, s1, s2, s3, s4, s5, s6, s7)                                                         \
  ((uint64_t)(6 * (s0)) | (uint64_t)(6 * (s1)) << 6 | (uint64_t)(6 * (s2)) << 12 | (uint64_t)(6 * (s3)) << 18 | \
   (uint64_t)(6 * (s4)) << 24 | (uint64_t)(6 * (s5)) << 30 | (uint64_t)(6 * (s6)) << 36 |                   \
   (uint64_t)(6 * (s7)) << 42 | (uint64_t)(6 * 8) << 48)
static const uint64_t utf8_next[12] = {
    /* from state:   0  1  2  3  4  5  6  7 */
    U8_ROW(0, 8, 8, 8, 8, 8, 8, 8), /* ASCII */
    U8_ROW(8, 0, 1, 2, 8, 1, 8, 2), /* 80..8F */
    U8_ROW(8, 0, 1, 2, 8, 1, 2, 8), /* 90..9F */
    U8_ROW(8, 0, 1, 2, 1, 8, 2, 8), /* A0..BF */
    U8_ROW(1, 8, 8, 8, 8, 8, 8, 8), /* C2..DF */
    U8_ROW(4, 8, 8, 8, 8, 8, 8, 8), /* E0 */
    U8_ROW(2, 8, 8, 8, 8, 8, 8, 8), /* E1..EC, EE..EF */
    U8_ROW(5, 8, 8, 8, 8, 8, 8, 8), /* ED */
    U8_ROW(6, 8, 8, 8, 8, 8, 8, 8), /* F0 */
    U8_ROW(3, 8, 8, 8, 8, 8, 8, 8), /* F1..F3 */
    U8_ROW(7, 8, 8, 8, 8, 8, 8, 8), /* F4 */
    U8_ROW(8, 8, 8, 8, 8, 8, 8, 8), /* C0, C1, F5..FF */
};
#undef U8_ROW
enum { U8_OK = 0, U8_BAD = 6 * 8 };

static inline unsigned utf8_step(unsigned st, unsigned char c) {
  return (unsigned)(utf8_next[utf8_class[c]] >> st) & 63;
}

/* Where the first sequence of p[0..n) that is not UTF-8 starts (p[0..n) is known not to be). */
static int64_t utf8_first_bad(const unsigned char* p, int64_t n) {
  unsigned st = U8_OK;
  int64_t start = 0;
  for (int64_t i = 0; i < n && st != U8_BAD; i++) {
    st = utf8_step(st, p[i]);
    if (st == U8_OK) start = i + 1;
  }
  return start;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define RILL_UTF8_AVX2 1

/* The same check 32 bytes at a time with AVX2, from the byte pairs (previous byte, byte) in the
 * manner of Keiser and Lemire's "Validating UTF-8 In Less Than One Instruction Per Byte"
 * (2021). Each bit below is a kind of bad pair; three 16-entry tables, indexed by the
 * previous byte's high nibble, its low nibble and the byte's high nibble, each hold the bits
 * whose pairs that nibble can be part of, so their AND holds the pair's faults:
 *   0x01 a lead byte (C0..FF) then no continuation     0x02 ASCII then a continuation
 *   0x04 E0 then 80..9F (overlong)                      0x08 F4..FF then 90..BF (too large)
 *   0x10 ED then A0..BF (a surrogate)                   0x20 C0 or C1 then a continuation
 *   0x40 F0 or F5..FF then 80..8F (overlong, too large) 0x80 a continuation then another
 * Two continuations in a row are right exactly where the byte two back is a lead of three or
 * four bytes (E0..FF) or the byte three back one of four (F0..FF): that condition, as 0x80,
 * is XORed in. A sequence cut by the end meets the zero bytes that pad the last block. */
static const int8_t u8_prev_hi[16] = {0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02,
                                      (int8_t)0x80, (int8_t)0x80, (int8_t)0x80, (int8_t)0x80,
                                      0x21, 0x01, 0x15, 0x49};
static const int8_t u8_prev_lo[16] = {(int8_t)0xE7, (int8_t)0xA3, (int8_t)0x83, (int8_t)0x83,
                                      (int8_t)0x8B, (int8_t)0xCB, (int8_t)0xCB, (int8_t)0xCB,
                                      (int8_t)0xCB, (int8_t)0xCB, (int8_t)0xCB, (int8_t)0xCB,
                                      (int8_t)0xCB, (int8_t)0xDB, (int8_t)0xCB, (int8_t)0xCB};
static const int8_t u8_cur_hi[16] = {0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01,
                                     (int8_t)0xE6, (int8_t)0xAE, (int8_t)0xBA, (int8_t)0xBA,
                                     0x01, 0x01, 0x01, 0x01};

__attribute__((target("avx2"))) static inline __m256i u8_table(const int8_t* t) {
  __m128i h = _mm_loadu_si128((const __m128i*)(const void*)t);
  return _mm256_broadcastsi128_si256(h);
}

/* The faults of the 32 bytes `cur`, `prev` the 32 before them. */
__attribute__((target("avx2"))) static inline __m256i u8_faults(__m256i cur, __m256i prev, __m256i t1, __m256i t2,
                                                                __m256i t3) {
  const __m256i nib = _mm256_set1_epi8(0x0F);
  __m256i pp = _mm256_permute2x128_si256(prev, cur, 0x21); /* prev's high half, cur's low half */
  __m256i p1 = _mm256_alignr_epi8(cur, pp, 15), p2 = _mm256_alignr_epi8(cur, pp, 14),
          p3 = _mm256_alignr_epi8(cur, pp, 13);
  __m256i bad = _mm256_and_si256(
      _mm256_and_si256(_mm256_shuffle_epi8(t1, _mm256_and_si256(_mm256_srli_epi16(p1, 4), nib)),
                       _mm256_shuffle_epi8(t2, _mm256_and_si256(p1, nib))),
      _mm256_shuffle_epi8(t3, _mm256_and_si256(_mm256_srli_epi16(cur, 4), nib)));
  __m256i lead = _mm256_or_si256(_mm256_subs_epu8(p2, _mm256_set1_epi8((char)0xDF)),
                                 _mm256_subs_epu8(p3, _mm256_set1_epi8((char)0xEF))); /* 1..0x20 where one is */
  __m256i must = _mm256_and_si256(_mm256_cmpgt_epi8(lead, _mm256_setzero_si256()), _mm256_set1_epi8((char)0x80));
  return _mm256_xor_si256(bad, must);
}

/* 1 when p[0..n) is UTF-8. */
__attribute__((target("avx2"))) static int utf8_valid_avx2(const unsigned char* p, int64_t n) {
  const __m256i t1 = u8_table(u8_prev_hi), t2 = u8_table(u8_prev_lo), t3 = u8_table(u8_cur_hi);
  /* an ASCII block after `prev`: a fault only where prev ends inside a sequence */
  const __m256i last = _mm256_setr_epi8(-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1,
                                        -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, (char)0xEF, (char)0xDF, (char)0xBF);
  __m256i prev = _mm256_setzero_si256(), bad = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i cur = _mm256_loadu_si256((const __m256i*)(const void*)(p + i));
    if (_mm256_movemask_epi8(cur) == 0)
      bad = _mm256_or_si256(bad, _mm256_subs_epu8(prev, last));
    else
      bad = _mm256_or_si256(bad, u8_faults(cur, prev, t1, t2, t3));
    prev = cur;
  }
  unsigned char tail[32] = {0}; /* the rest, padded with zeros (a block of zeros when none) */
  memcpy(tail, p + i, (size_t)(n - i));
  bad = _mm256_or_si256(bad, u8_faults(_mm256_loadu_si256((const __m256i*)(const void*)tail), prev, t1, t2, t3));
  return _mm256_testz_si256(bad, bad);
}
#endif

int64_t rill__utf8_invalid(const char* s, int64_t n) {
#if RILL_UTF8_AVX2
  const unsigned char* p = (const unsigned char*)s;
  if (n >= 64 && __builtin_cpu_supports("avx2")) return utf8_valid_avx2(p, n) ? -1 : utf8_first_bad(p, n);
#endif
  return rill__utf8_invalid_scalar(s, n);
}

int64_t rill__utf8_invalid_scalar(const char* s, int64_t n) {
  const unsigned char* p = (const unsigned char*)s;
  unsigned st = U8_OK;
  int64_t i = 0;
  while (i + 16 <= n) {
    uint64_t x, y;
    memcpy(&x, p + i, 8);
    memcpy(&y, p + i + 8, 8);
    if (st == U8_OK && !((x | y) & 0x8080808080808080ULL)) { /* 16 ASCII bytes between characters */
      i += 16;
      continue;
    }
    for (int64_t e = i + 16; i < e; i += 4) {
      st = utf8_step(st, p[i]);
      st = utf8_step(st, p[i + 1]);
      st = utf8_step(st, p[i + 2]);
      st = utf8_step(st, p[i + 3]);
    }
    if (st == U8_BAD) break; /* absorbing: no need to read on */
  }
  for (; i < n && st != U8_BAD; i++) st = utf8_step(st, p[i]);
  return st == U8_OK ? -1 : utf8_first_bad(p, n);
}

int rill__ascii_only(const char* s, int64_t n) {
  uint64_t acc = 0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    uint64_t w[4];
    memcpy(w, s + i, sizeof w);
    acc |= w[0] | w[1] | w[2] | w[3];
  }
  for (; i < n; i++) acc |= (unsigned char)s[i];
  return !(acc & 0x8080808080808080ULL);
}

int64_t rill__latin1_to_utf8(const char* s, int64_t n, char* o) {
  int64_t w = 0;
  for (int64_t i = 0; i < n; i++) {
    unsigned char b = (unsigned char)s[i];
    if (b < 0x80) {
      o[w++] = (char)b;
    } else {
      o[w++] = (char)(0xC0 | b >> 6);
      o[w++] = (char)(0x80 | (b & 0x3F));
    }
  }
  return w;
}

int64_t rill__utf8_lossy(const char* s, int64_t n, char* o) {
  const unsigned char* p = (const unsigned char*)s;
  int64_t w = 0, i = 0;
  while (i < n) {
    unsigned st = utf8_step(U8_OK, p[i]);
    int64_t j = i + 1;
    while (st != U8_OK && st != U8_BAD && j < n) { /* the longest start of a character */
      unsigned next = utf8_step(st, p[j]);
      if (next == U8_BAD) break;
      st = next;
      j++;
    }
    if (st == U8_OK) {
      memcpy(o + w, p + i, (size_t)(j - i));
      w += j - i;
    } else {
      memcpy(o + w, "\xEF\xBF\xBD", 3);
      w += 3;
    }
    i = j;
  }
  return w;
}

int rill__text_dtype_supported(rill_dtype_t dt) {
  switch (dt) {
  case RILL_BOOL: case RILL_INT8: case RILL_INT16: case RILL_INT32: case RILL_INT64:
  case RILL_UINT8: case RILL_UINT16: case RILL_UINT32: case RILL_UINT64:
  case RILL_FLOAT32: case RILL_FLOAT64: case RILL_STRING: case RILL_TIMESTAMP_US:
    return 1;
  default:
    return 0;
  }
}

int rill__store_text(rill_array_t* out, int64_t i, rill_dtype_t dt, const char* s, size_t n) {
  int64_t iv;
  uint64_t uv;
  double dv;
  int rc;
  switch (dt) {
  case RILL_BOOL: {
    uint8_t b;
    rc = rill__parse_bool(s, n, 1, &b);
    if (rc == RILL_OK) ((uint8_t*)out->data)[i] = b;
    return rc;
  }
  case RILL_INT8: case RILL_INT16: case RILL_INT32: case RILL_INT64:
    rc = rill__parse_int64(s, n, &iv);
    if (rc != RILL_OK) return rc;
    if (dt == RILL_INT8) {
      if (iv < INT8_MIN || iv > INT8_MAX) return RILL_ERANGE;
      ((int8_t*)out->data)[i] = (int8_t)iv;
    } else if (dt == RILL_INT16) {
      if (iv < INT16_MIN || iv > INT16_MAX) return RILL_ERANGE;
      ((int16_t*)out->data)[i] = (int16_t)iv;
    } else if (dt == RILL_INT32) {
      if (iv < INT32_MIN || iv > INT32_MAX) return RILL_ERANGE;
      ((int32_t*)out->data)[i] = (int32_t)iv;
    } else {
      ((int64_t*)out->data)[i] = iv;
    }
    return RILL_OK;
  case RILL_UINT8: case RILL_UINT16: case RILL_UINT32: case RILL_UINT64:
    if (n > 0 && s[0] == '-') {
      rc = rill__parse_int64(s, n, &iv);
      return rc == RILL_OK ? (iv == 0 ? RILL_EFORMAT : RILL_ERANGE) : rc;
    }
    rc = rill__parse_uint64(s, n, &uv);
    if (rc != RILL_OK) return rc;
    if (dt == RILL_UINT8) {
      if (uv > UINT8_MAX) return RILL_ERANGE;
      ((uint8_t*)out->data)[i] = (uint8_t)uv;
    } else if (dt == RILL_UINT16) {
      if (uv > UINT16_MAX) return RILL_ERANGE;
      ((uint16_t*)out->data)[i] = (uint16_t)uv;
    } else if (dt == RILL_UINT32) {
      if (uv > UINT32_MAX) return RILL_ERANGE;
      ((uint32_t*)out->data)[i] = (uint32_t)uv;
    } else {
      ((uint64_t*)out->data)[i] = uv;
    }
    return RILL_OK;
  case RILL_FLOAT32:
    rc = rill__parse_double(s, n, &dv);
    if (rc != RILL_OK) return rc;
    if (isfinite(dv) && fabs(dv) > FLT_MAX) return RILL_ERANGE;
    ((float*)out->data)[i] = (float)dv;
    return RILL_OK;
  case RILL_FLOAT64:
    rc = rill__parse_double(s, n, &dv);
    if (rc == RILL_OK) ((double*)out->data)[i] = dv;
    return rc;
  case RILL_TIMESTAMP_US:
    rc = rill_parse_timestamp(s, n, &iv);
    if (rc == RILL_OK) ((int64_t*)out->data)[i] = iv;
    return rc;
  default:
    return RILL_ENOTSUP;
  }
}

/* ------------------------------------------------------------------ column names */

typedef struct name_slot {
  const char* s;
  int next_dup;
} name_slot_t;

static name_slot_t* name_find(name_slot_t* t, size_t mask, const char* s) {
  for (size_t i = rill__fnv(RILL__FNV_START, s, strlen(s)) & mask;; i = (i + 1) & mask)
    if (!t[i].s || strcmp(t[i].s, s) == 0) return &t[i];
}

void rill__free_columns(char** names, rill_dtype_t* types, int n) {
  rill__free_vec((void**)names, n);
  rill__free(types);
}

int rill__unique_names(char** names, int n, char sep) {
  size_t cap = 16;
  while (cap < (size_t)n * 4 + 4) cap *= 2;
  name_slot_t* t = rill__calloc(cap, sizeof *t);
  if (!t) return RILL_ENOMEM;
  int rc = RILL_OK;
  for (int k = 0; k < n && rc == RILL_OK; k++) {
    name_slot_t* slot = name_find(t, cap - 1, names[k]);
    if (slot->s) {
      name_slot_t* base = slot;
      size_t len = strlen(names[k]);
      char* fresh = rill__alloc(len + 16);
      if (!fresh) { rc = RILL_ENOMEM; break; }
      for (;;) {
        snprintf(fresh, len + 16, "%s%c%d", names[k], sep, ++base->next_dup);
        slot = name_find(t, cap - 1, fresh);
        if (!slot->s) break;
      }
      rill__free(names[k]);
      names[k] = fresh;
    }
    slot->s = names[k];
  }
  rill__free(t);
  return rc;
}

char* rill__column_name(const char* s, size_t n, int k) {
  char base[64];
  if (n == 0) {
    snprintf(base, sizeof base, "column_%d", k);
    s = base;
    n = strlen(base);
  }
  char* name = rill__alloc(n + 1);
  if (!name) return NULL;
  memcpy(name, s, n);
  name[n] = 0;
  return name;
}

char* rill__column_name_in(rill_csv_encoding_t enc, const char* s, size_t n, int k, int64_t* bad) {
  *bad = -1;
  if (rill__text_as_is(enc, s, (int64_t)n, bad)) return rill__column_name(s, n, k);
  if (enc == RILL_CSV_UTF8) return NULL;
  char* t = rill__alloc((size_t)rill__recode_room(enc, (int64_t)n));
  if (!t) return NULL;
  char* name = rill__column_name(t, (size_t)rill__recode(enc, s, (int64_t)n, t), k);
  rill__free(t);
  return name;
}

int64_t rill__recode(rill_csv_encoding_t enc, const char* s, int64_t n, char* o) {
  return enc == RILL_CSV_LATIN1 ? rill__latin1_to_utf8(s, n, o) : rill__utf8_lossy(s, n, o);
}

int rill__text_as_is(rill_csv_encoding_t enc, const char* s, int64_t n, int64_t* bad) {
  if (enc == RILL_CSV_LATIN1) return rill__ascii_only(s, n);
  int64_t b = rill__utf8_invalid(s, n);
  if (bad) *bad = enc == RILL_CSV_UTF8 ? b : -1;
  return b < 0;
}

int rill__override_column(const rill_csv_column_t* ov, char* const* names, int n, const char* who,
                          const char* what, rill_error_t* err) {
  if (ov->name) {
    for (int j = 0; j < n; j++)
      if (strcmp(names[j], ov->name) == 0) return j;
    return rill__fail(err, RILL_EINVAL, "%s: type override for unknown column '%s'", who, ov->name);
  }
  if (ov->index < 0 || ov->index >= n)
    return rill__fail(err, RILL_EINVAL, "%s: type override for column index %d (the %s has %d columns)", who,
                      ov->index, what, n);
  return ov->index;
}
