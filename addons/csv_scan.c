/* CSV record scanning: splitting records into field spans, undoing quotes in a field, and
 * the scans of a chunk of input for record starts (used by the parallel row index). Records
 * are split, and chunks scanned, from 64-byte masks of delimiters, quotes and line breaks
 * (SSE2, or AVX2 where the machine has it) while the quotes follow the simple model; the
 * byte loops and the state machine handle the rest and give the same results. */
#include <string.h>

#include "csv_internal.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#define CSV_SIMD 1
#else
#define CSV_SIMD 0
#endif

/* Bytes ahead of the one being scanned or split that are asked into the cache: the hardware
 * prefetcher stops at each 4 KiB page of the mapping, so a pass over it would wait on memory at
 * every page start. */
#define CSV_AHEAD 1024

/* ------------------------------------------------------------------ records and fields */

/* First position of byte `ch` in [i, end), or end (short quoted fields: no library call). */
static inline int64_t find_byte(const char* d, int64_t i, int64_t end, char ch) {
#if CSV_SIMD
  __m128i v = _mm_set1_epi8(ch);
  for (; i + 16 <= end; i += 16) {
    unsigned m = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128((const __m128i*)(d + i)), v));
    if (m) return i + __builtin_ctz(m);
  }
#endif
  for (; i < end; i++)
    if (d[i] == ch) return i;
  return end;
}

/* First position of byte `a` or `b` in [i, end), or end. */
static inline int64_t find_either(const char* d, int64_t i, int64_t end, char a, char b) {
#if CSV_SIMD
  __m128i va = _mm_set1_epi8(a), vb = _mm_set1_epi8(b);
  for (; i + 16 <= end; i += 16) {
    __m128i v = _mm_loadu_si128((const __m128i*)(d + i));
    unsigned m = (unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, va), _mm_cmpeq_epi8(v, vb)));
    if (m) return i + __builtin_ctz(m);
  }
#endif
  for (; i < end; i++)
    if (d[i] == a || d[i] == b) return i;
  return end;
}

/* Where the quoted field whose text starts at `i` ends: right after its closing quote (doubled
 * quotes and escaped bytes passed over), or -1 when d[i, end) holds none. */
static int64_t quote_end(const char* d, int64_t i, int64_t end, const rill__csv_dialect_t* x) {
  while (i < end) {
    int64_t p = x->esc ? find_either(d, i, end, x->q, x->esc) : find_byte(d, i, end, x->q);
    if (p == end) return -1;
    if (d[p] != x->q) { i = p + 2; continue; } /* an escape: the byte after it is text */
    i = p + 1;
    if (i < end && d[i] == x->q) { i++; continue; } /* a doubled quote */
    return i;
  }
  return -1;
}

#if CSV_SIMD
/* Set bits of a byte, of a 16-bit mask (no popcnt instruction assumed). */
#define POP2(n) n, n + 1, n + 1, n + 2
#define POP4(n) POP2(n), POP2(n + 1), POP2(n + 1), POP2(n + 2)
#define POP6(n) POP4(n), POP4(n + 1), POP4(n + 1), POP4(n + 2)
static const uint8_t pop8[256] = {POP6(0), POP6(1), POP6(1), POP6(2)};
#undef POP2
#undef POP4
#undef POP6
static inline int pop16(unsigned x) { return pop8[x & 0xffu] + pop8[(x >> 8) & 0xffu]; }

/* 16-byte block masks: bit b set when byte b is the delimiter (*dm) / a line break, the
 * quote or the escape character (return; vx: the escape, or the quote again when there is
 * none). */
static inline unsigned block_masks(const char* p, __m128i vdl, __m128i vq, __m128i vx, unsigned* dm) {
  __m128i v = _mm_loadu_si128((const __m128i*)p);
  *dm = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, vdl));
  __m128i st = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, vq), _mm_cmpeq_epi8(v, vx)),
                            _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('\n')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\r'))));
  return (unsigned)_mm_movemask_epi8(st);
}

/* Unquoted bytes from `i` (a field start), 16 at a time while 16 are left before `end`:
 * each delimiter met ends a field (*nf counts them). Stops at the first line break, quote or
 * escape character, or where fewer than 16 bytes are left; returns that position, *fstart the
 * start of the field holding it. */
static int64_t count_unquoted(const char* d, int64_t i, int64_t end, const rill__csv_dialect_t* x, int64_t* nf,
                              int64_t* fstart) {
  __m128i vdl = _mm_set1_epi8(x->dl), vq = _mm_set1_epi8(x->q), vx = _mm_set1_epi8(x->esc ? x->esc : x->q);
  int64_t fs = i;
  for (; i + 16 <= end; i += 16) {
    unsigned dm, stop = block_masks(d + i, vdl, vq, vx, &dm);
    if (stop) dm &= (stop & (0u - stop)) - 1;
    if (dm) {
      *nf += pop16(dm);
      fs = i + (31 - __builtin_clz(dm)) + 1;
    }
    if (stop) {
      *fstart = fs;
      return i + __builtin_ctz(stop);
    }
  }
  *fstart = fs;
  return i;
}
#endif

/* rill__csv_split with 16-byte masks for unquoted fields and byte loops for quoted ones: any
 * record, up to the end of the input. The spans keep their blanks (see trim_spans). */
static int64_t split_bytes(const char* d, int64_t size, int64_t pos, const rill__csv_dialect_t* x, int64_t* sp,
                           int64_t max, int64_t* next) {
  const char dl = x->dl, q = x->q, esc = x->esc;
  int64_t nf = 0, i = pos;
#if CSV_SIMD
  __m128i vdl = _mm_set1_epi8(dl), vq = _mm_set1_epi8(q), vx = _mm_set1_epi8(esc ? esc : q);
#endif
  for (;;) {
    int64_t fs = i;
#if CSV_SIMD
    /* whole unquoted fields from 16-byte masks; a quote or the last bytes go on below */
    for (; i + 16 <= size; i += 16) {
      unsigned dm, stop = block_masks(d + i, vdl, vq, vx, &dm);
      if (stop) dm &= (stop & (0u - stop)) - 1;
      for (; dm; dm &= dm - 1) {
        int64_t e = i + __builtin_ctz(dm);
        if (nf < max) { sp[2 * nf] = fs; sp[2 * nf + 1] = e; }
        nf++;
        fs = e + 1;
      }
      if (stop) {
        i += __builtin_ctz(stop);
        break;
      }
    }
    if (i < fs) i = fs;
    if (i < size && d[i] != q) {
      /* a line break ends the record here; else a literal quote or the tail: bytes below */
      if (d[i] == '\n' || d[i] == '\r') {
        if (nf < max) { sp[2 * nf] = fs; sp[2 * nf + 1] = i; }
        nf++;
        if (d[i] == '\r' && i + 1 < size && d[i + 1] == '\n') i += 2;
        else i++;
        *next = i;
        return nf;
      }
    }
#endif
    int64_t qs = fs; /* where a quote opens the field: its start, or after its blanks (trim) */
    if (x->trim)
      while (qs < size && rill__csv_blank(x, d[qs])) qs++;
    if (qs >= i && qs < size && d[qs] == q) {
      int64_t qe = quote_end(d, qs + 1, size, x);
      i = qe < 0 ? size : qe;
    }
    while (i < size && d[i] != dl && d[i] != '\n' && d[i] != '\r')
      i += esc && d[i] == esc && i + 1 < size ? 2 : 1;
    if (nf < max) { sp[2 * nf] = fs; sp[2 * nf + 1] = i; }
    nf++;
    if (i >= size) { *next = size; return nf; }
    if (d[i] == dl) { i++; continue; }
    if (d[i] == '\r' && i + 1 < size && d[i + 1] == '\n') i += 2;
    else i++;
    *next = i;
    return nf;
  }
}

/* Spans sp[0 .. 2n) without the blanks at their ends (x->trim): a quoted field's closing
 * quote ends the blanks after it. */
static void trim_spans(const char* d, const rill__csv_dialect_t* x, int64_t* sp, int64_t n) {
  for (int64_t k = 0; k < n; k++) {
    int64_t s = sp[2 * k], e = sp[2 * k + 1];
    while (s < e && rill__csv_blank(x, d[s])) s++;
    while (e > s && rill__csv_blank(x, d[e - 1]) && !rill__csv_escaped(d, s, e - 1, x->esc)) e--;
    sp[2 * k] = s;
    sp[2 * k + 1] = e;
  }
}

/* The line break ending the line at `i` (or `end`) when that line is not a record: a comment
 * line, or (trim) a line of blanks; else -1. */
static int64_t skipped_line(const char* d, int64_t i, int64_t end, const rill__csv_dialect_t* x) {
  int comment = x->cm && d[i] == x->cm;
  if (!comment && !(x->trim && rill__csv_blank(x, d[i]))) return -1;
  for (; i < end && d[i] != '\n' && d[i] != '\r'; i++)
    if (!comment && !rill__csv_blank(x, d[i])) return -1;
  return i;
}

int64_t rill__csv_record_start(const char* d, int64_t pos, int64_t end, const rill__csv_dialect_t* x) {
  for (;;) {
    while (pos < end && (d[pos] == '\n' || d[pos] == '\r')) pos++;
    if (pos >= end) return end;
    int64_t e = skipped_line(d, pos, end, x);
    if (e < 0) return pos;
    pos = e;
  }
}

int rill__csv_room(char** scratch, size_t* cap, size_t need) {
  if (*cap >= need) return RILL_OK;
  char* nb = rill__alloc(need);
  if (!nb) return RILL_ENOMEM;
  rill__free(*scratch);
  *scratch = nb;
  *cap = need;
  return RILL_OK;
}

/* rill__csv_unescape of a field whose bytes must change, into *scratch: an escape character
 * (x->esc) gives the byte after it as text (one at the field's end is kept); in a quoted field
 * a doubled quote is one quote and the closing quote ends the quotes (what follows it is kept
 * literally). */
static int unescape_bytes(const char* d, int64_t s, int64_t e, const rill__csv_dialect_t* x, char** scratch,
                          size_t* cap, const char** out, size_t* n) {
  if (rill__csv_room(scratch, cap, (size_t)(e - s)) != RILL_OK) return RILL_ENOMEM;
  char* w = *scratch;
  size_t k = 0;
  int inq = d[s] == x->q;
  for (int64_t i = s + inq; i < e;) {
    char ch = d[i];
    if (x->esc && ch == x->esc && i + 1 < e) {
      w[k++] = d[i + 1];
      i += 2;
    } else if (inq && ch == x->q) {
      if (i + 1 < e && d[i + 1] == x->q) {
        w[k++] = ch;
        i += 2;
      } else { /* the closing quote: what follows is kept literally (escapes still undone) */
        inq = 0;
        i++;
      }
    } else {
      w[k++] = ch;
      i++;
    }
  }
  *out = w;
  *n = k;
  return RILL_OK;
}

/* The text of field [s, e): quotes removed, doubled quotes and escapes undone. Uses *scratch
 * only when the bytes must change. Returns RILL_OK or RILL_ENOMEM. */
int rill__csv_unescape(const char* d, int64_t s, int64_t e, const rill__csv_dialect_t* x, char** scratch, size_t* cap,
                       const char** out, size_t* n) {
  const char q = x->q, esc = x->esc;
  if (esc && s < e && memchr(d + s, esc, (size_t)(e - s))) return unescape_bytes(d, s, e, x, scratch, cap, out, n);
  if (s == e || d[s] != q) { *out = d + s; *n = (size_t)(e - s); return RILL_OK; }
  const char* p = memchr(d + s + 1, q, (size_t)(e - s - 1));
  if (!p) { *out = d + s + 1; *n = (size_t)(e - s - 1); return RILL_OK; } /* unterminated */
  if (p == d + e - 1) { *out = d + s + 1; *n = (size_t)(e - s - 2); return RILL_OK; }
  return unescape_bytes(d, s, e, x, scratch, cap, out, n); /* quotes inside, or text after the closing one */
}

/* 0 when the field [s, e) opens a quote that it never closes (it then ran to the end of the
 * input). */
int rill__csv_quote_closed(const char* d, int64_t s, int64_t e, const rill__csv_dialect_t* x) {
  return s == e || d[s] != x->q || quote_end(d, s + 1, e, x) >= 0;
}

/* ------------------------------------------------------------------ chunk scans */

int rill__csv_vec_grow(rill__csv_vec_t* a) {
  int64_t* v = rill__grow(a->v, &a->cap, a->n, a->cap + 1, sizeof *v, 1024);
  return v ? (a->v = v, RILL_OK) : RILL_ENOMEM;
}

int rill__csv_rows_grow(rill__csv_rows_t* a) {
  uint32_t* v = rill__grow(a->v, &a->cap, a->n, a->cap + 1, sizeof *v, 1024);
  return v ? (a->v = v, RILL_OK) : RILL_ENOMEM;
}

/* Scanner states: between records, at a field start, in an unquoted field, in a quoted
 * field, just after a quote inside a quoted field. */
enum { S_START, S_FIELD, S_UNQ, S_Q, S_QQ };

static int is_nl(char c) { return c == '\n' || c == '\r'; }

void rill__csv_scan_chunk_generic(const char* d, int64_t begin, int64_t end, int in_quotes,
                                  const rill__csv_dialect_t* x, int64_t expected, rill__csv_spec_t* s,
                                  const rill__csv_spec_t* ref) {
  const char dl = x->dl, q = x->q, esc = x->esc;
  int st = in_quotes ? S_Q : S_START;
  int64_t i = begin, rec = -1, nf = 0, j = 0;
  s->rc = RILL_OK;
  s->starts.base = begin;
  s->head_done = 0;
  s->head_nf = 0;
  s->tail_start = -1;
  s->tail_nf = 0;
  while (i < end) {
    char c = d[i];
    switch (st) {
    case S_START: {
      if (is_nl(c)) { i++; break; }
      int64_t skip = skipped_line(d, i, end, x);
      if (skip >= 0) { i = skip; break; }
      if (ref) {
        while (j < ref->starts.n && rill__csv_rows_at(&ref->starts, j) < i) j++;
        if (j < ref->starts.n && rill__csv_rows_at(&ref->starts, j) == i) {
          for (int64_t k = j; k < ref->starts.n && s->rc == RILL_OK; k++)
            s->rc = rill__csv_rows_push(&s->starts, rill__csv_rows_at(&ref->starts, k));
          for (int64_t k = 0; k < ref->bad.n && s->rc == RILL_OK; k += 2)
            if (ref->bad.v[k] >= i) {
              s->rc = rill__csv_vec_push(&s->bad, ref->bad.v[k]);
              if (s->rc == RILL_OK) s->rc = rill__csv_vec_push(&s->bad, ref->bad.v[k + 1]);
            }
          s->end_in_quotes = ref->end_in_quotes;
          s->tail_start = ref->tail_start;
          s->tail_nf = ref->tail_nf;
          return;
        }
      }
      rec = i;
      nf = 1;
      if (rill__csv_rows_push(&s->starts, i) != RILL_OK) { s->rc = RILL_ENOMEM; return; }
      st = S_FIELD;
      break;
    }
    case S_FIELD:
      if (x->trim && rill__csv_blank(x, c)) { i++; break; } /* a quote may still open the field */
      if (esc && c == esc) { i = i + 1 < end ? i + 2 : end; st = S_UNQ; break; } /* the next byte is text */
#if CSV_SIMD
      if (c != q && c != dl && !is_nl(c) && i + 16 <= end) {
        int64_t fs;
        i = count_unquoted(d, i, end, x, &nf, &fs); /* i > fs: c is a plain byte */
        if (i < end && is_nl(d[i])) {
          i++;
          goto record_end;
        }
        int64_t k = fs; /* bytes of the field so far: blanks only (trim) leave it at its start */
        if (x->trim)
          while (k < i && rill__csv_blank(x, d[k])) k++;
        st = k == i ? S_FIELD : S_UNQ;
        break;
      }
#endif
      i++;
      if (c == q) st = S_Q;
      else if (c == dl) nf++;
      else if (is_nl(c)) goto record_end;
      else st = S_UNQ;
      break;
    case S_UNQ:
      while (i < end && d[i] != dl && d[i] != '\n' && d[i] != '\r') i += esc && d[i] == esc && i + 1 < end ? 2 : 1;
      if (i >= end) { i = end; break; }
      c = d[i++];
      if (c == dl) { nf++; st = S_FIELD; break; }
      goto record_end;
    case S_Q: {
      int64_t p = esc ? find_either(d, i, end, q, esc) : find_byte(d, i, end, q);
      if (p == end) { i = end; break; }
      if (d[p] != q) { i = p + 1 < end ? p + 2 : end; break; } /* an escape: the next byte is text */
      i = p + 1;
      st = S_QQ;
      break;
    }
    default: /* S_QQ */
      if (esc && c == esc) { i = i + 1 < end ? i + 2 : end; st = S_UNQ; break; }
      i++;
      if (c == q) st = S_Q;
      else if (c == dl) { nf++; st = S_FIELD; }
      else if (is_nl(c)) goto record_end;
      else st = S_UNQ;
      break;
    }
    continue;
  record_end:
    if (rec < 0) {
      s->head_done = 1;
      s->head_nf = nf;
    } else if (nf != expected) {
      if (rill__csv_vec_push(&s->bad, rec) != RILL_OK || rill__csv_vec_push(&s->bad, nf) != RILL_OK) {
        s->rc = RILL_ENOMEM;
        return;
      }
    }
    st = S_START;
  }
  s->end_in_quotes = st == S_Q;
  if (st == S_Q) {
    if (rec >= 0) {
      s->tail_start = rec;
      s->tail_nf = nf;
    } else {
      s->head_nf = nf; /* the whole chunk is inside the open record */
    }
  } else if (st != S_START) {
    /* the last record, ended by the end of the input */
    if (rec < 0) {
      s->head_done = 1;
      s->head_nf = nf;
    } else if (nf != expected) {
      if (rill__csv_vec_push(&s->bad, rec) != RILL_OK || rill__csv_vec_push(&s->bad, nf) != RILL_OK) s->rc = RILL_ENOMEM;
    }
  }
}

/* ------------------------------------------------------------------ bitmask chunk scans */

/* A chunk scanned from a record start, 64 bytes a step: bit b of each mask stands for byte
 * i + b. Quotes toggle an "inside quotes" mask (a prefix XOR); delimiters and line breaks
 * outside it end fields and records. That model holds while every quote sits where the
 * state machine would also treat it as one: an opening quote at the start of a field (or
 * right after a closing one: a doubled quote), a closing quote followed by a delimiter, a
 * line break, a quote or the end. Anything else (a quote inside an unquoted field, text after
 * a closing quote) makes the scan give up (returns 0) and the state machine scans the chunk.
 * With an escape character, the bytes it escapes are text: they leave the masks before the
 * model sees them. The results are the state machine's: same starts, bad records and tail. */

typedef struct scan_masks {
  uint64_t q, dl, nl, e; /* e: the escape character (computed only where the body wants it) */
} scan_masks_t;

/* Escapes (x->esc): the bytes of a block made text by an escape character before them. Each
 * escape character not itself escaped escapes the next byte (an escaped one is text), so in a
 * run of them every second one is text and the byte after an odd run is; *carry (bit 0) is the
 * first byte of the block escaped by the last byte of the one before, and is set for the next
 * block. The loop runs once per escape character that acts: rare in data. */
static inline uint64_t escaped_bits(uint64_t e, uint64_t* carry) {
  uint64_t out = *carry;
  e &= ~out;
  *carry = 0;
  while (e) {
    int b = __builtin_ctzll(e);
    if (b == 63) {
      *carry = 1;
      break;
    }
    out |= (uint64_t)2 << b;
    e &= ~((uint64_t)3 << b);
  }
  return out;
}

/* Applies the escapes of block m (escapes: a constant where a body is expanded): escaped
 * quotes, delimiters and line breaks are text. */
#define APPLY_ESCAPES(m, ecarry)                                                                       \
  if (escapes && (m.e | ecarry)) {                                                                     \
    uint64_t ex_ = escaped_bits(m.e, &ecarry);                                                         \
    m.q &= ~ex_;                                                                                       \
    m.dl &= ~ex_;                                                                                      \
    m.nl &= ~ex_;                                                                                      \
  }

/* The masks model the dialect's escapes unless trim makes the escape character a blank (the
 * state machine then skips it as one at a field's start). */
static inline int masks_escape(const rill__csv_dialect_t* x) { return x->esc && !(x->trim && rill__csv_blank(x, x->esc)); }

static inline uint64_t prefix_xor(uint64_t x) {
  x ^= x << 1;
  x ^= x << 2;
  x ^= x << 4;
  x ^= x << 8;
  x ^= x << 16;
  x ^= x << 32;
  return x;
}

/* Under trim, what the quote model rejects in the block at d + i may still be what the state
 * machine does: a quote opening a field after blanks (it passes over blanks at a field's start:
 * the bytes before the quote back to the last byte that is not a blank are blanks, and that
 * byte is an unescaped delimiter or line break, or there is none from `lo`, a record start), and
 * blanks after a closing quote (text, as any text there, which the model leaves to the check of
 * the next quote). Checked a byte at a time for the bits of bad_open and bad_cq (the bytes
 * after closing quotes); 1 when every one passes. Such fields are rare outside files written
 * for trim, where this is one short walk per quoted field. */
static int trim_accepts(const char* d, int64_t i, uint64_t bad_open, uint64_t bad_cq, int64_t lo,
                        const rill__csv_dialect_t* x) {
  for (; bad_cq; bad_cq &= bad_cq - 1)
    if (!rill__csv_blank(x, d[i + __builtin_ctzll(bad_cq)])) return 0;
  for (; bad_open; bad_open &= bad_open - 1) {
    int64_t p = i + __builtin_ctzll(bad_open), k = p - 1;
    while (k >= lo && rill__csv_blank(x, d[k])) k--;
    if (k >= lo && ((d[k] != x->dl && d[k] != '\n' && d[k] != '\r') || rill__csv_escaped(d, lo, k, x->esc))) return 0;
  }
  return 1;
}

/* `skips` (a constant where the body is expanded): x has comment lines or trim, so a line may
 * not be a record. Where one starts, the masks start over after its line break, as at a chunk's
 * start (the quotes and escape characters of a comment line have no effect); under trim,
 * quotes after blanks are checked by trim_accepts.
 * `escapes` (a constant): x has an escape character, whose escaped bytes leave the masks (a
 * chunk starts at a record start, so no escape reaches into it). */
#define SCAN_BODY(MASKS, POPCNT)                                                                       \
  const char dl = x->dl, q = x->q, esc = x->esc;                                                       \
  uint64_t ecarry = 0;  /* bit 0: the next block's first byte is escaped */                           \
  uint64_t inq = 0;     /* all ones: inside quotes at the end of the previous block */                 \
  uint64_t prev_nl = 1; /* bit 0: the byte before is a line break outside quotes (or none) */          \
  uint64_t prev_fb = 1; /* bit 0: a quote may open at the next byte */                                 \
  uint64_t prev_cq = 0; /* bit 0: the byte before closed a quote */                                    \
  int64_t dcount = 0, rec = -1, rec_d = 0, restart = -1;                                               \
  s->rc = RILL_OK;                                                                                     \
  s->starts.base = begin;                                                                              \
  s->head_done = 0;                                                                                    \
  s->head_nf = 0;                                                                                      \
  s->tail_start = -1;                                                                                  \
  s->tail_nf = 0;                                                                                      \
  s->end_in_quotes = 0;                                                                                \
  for (int64_t i = begin; i < end; i += 64) {                                                          \
    if (i + CSV_AHEAD < end) __builtin_prefetch(d + i + CSV_AHEAD);                                     \
    scan_masks_t m;                                                                                    \
    uint64_t valid = ~(uint64_t)0;                                                                     \
    if (end - i >= 64) {                                                                               \
      MASKS(d + i, dl, q, esc, escapes, &m);                                                           \
    } else {                                                                                           \
      char tail[64];                                                                                   \
      memset(tail, 0, sizeof tail);                                                                    \
      memcpy(tail, d + i, (size_t)(end - i));                                                          \
      MASKS(tail, dl, q, esc, escapes, &m);                                                            \
      valid = ((uint64_t)1 << (end - i)) - 1;                                                          \
      m.q &= valid;                                                                                    \
      m.dl &= valid;                                                                                   \
      m.nl &= valid;                                                                                   \
      m.e &= valid;                                                                                    \
    }                                                                                                  \
    APPLY_ESCAPES(m, ecarry)                                                                           \
    uint64_t in = inq, cq = 0;                                                                         \
    uint64_t upto = ~(uint64_t)0; /* skips: the model holds before the first bit not here */           \
    if (m.q | inq) {                                                                                   \
      in = prefix_xor(m.q) ^ inq;                                                                      \
      uint64_t open = m.q & in;                                                                        \
      cq = m.q & ~in;                                                                                  \
      uint64_t fb = ((m.dl | m.nl) & ~in) | cq;                                                        \
      uint64_t bad_open = open & ~((fb << 1) | prev_fb);                                               \
      uint64_t bad_cq = ((cq << 1) | prev_cq) & ~(m.dl | m.nl | m.q) & valid;                          \
      if ((bad_open | bad_cq) && !(skips && x->trim && trim_accepts(d, i, bad_open, bad_cq, begin, x))) { \
        if (!skips) return 0; /* else it may be a skipped line's, and the masks start over after it */ \
        upto = ((bad_open | bad_cq) & (0 - (bad_open | bad_cq))) - 1;                                  \
      }                                                                                                \
      prev_fb = fb >> 63;                                                                              \
      inq = (uint64_t)0 - (in >> 63);                                                                  \
    } else {                                                                                           \
      prev_fb = (m.dl | m.nl) >> 63;                                                                   \
    }                                                                                                  \
    prev_cq = cq >> 63;                                                                                \
    uint64_t dout = m.dl & ~in, nout = m.nl & ~in;                                                     \
    uint64_t pn = (nout << 1) | prev_nl;                                                               \
    uint64_t st = pn & ~m.nl & valid, en = nout & ~pn;                                                 \
    prev_nl = nout >> 63;                                                                              \
    for (uint64_t ev = (st | en) & upto; ev; ev &= ev - 1) {                                           \
      int b = __builtin_ctzll(ev);                                                                     \
      uint64_t bit = (uint64_t)1 << b;                                                                 \
      int64_t dpos = dcount + POPCNT(dout & (bit - 1));                                                \
      if (st & bit) {                                                                                  \
        if (skips && (restart = skipped_line(d, i + b, end, x)) >= 0) break; /* not a record */        \
        rec = i + b;                                                                                   \
        rec_d = dpos;                                                                                  \
        if (rill__csv_rows_push(&s->starts, rec) != RILL_OK) { s->rc = RILL_ENOMEM; return 1; }         \
      } else {                                                                                         \
        int64_t nf = dpos - rec_d + 1;                                                                 \
        if (nf != expected && (rill__csv_vec_push(&s->bad, rec) != RILL_OK ||                          \
                               rill__csv_vec_push(&s->bad, nf) != RILL_OK)) {                          \
          s->rc = RILL_ENOMEM;                                                                         \
          return 1;                                                                                    \
        }                                                                                              \
        rec = -1;                                                                                      \
      }                                                                                                \
    }                                                                                                  \
    if (skips && restart >= 0) { /* after the skipped line: a record start, as at a chunk's */        \
      i = restart - 64;                                                                                \
      restart = -1;                                                                                    \
      inq = 0, prev_nl = 1, prev_fb = 1, prev_cq = 0, ecarry = 0;                                      \
      continue;                                                                                        \
    }                                                                                                  \
    if (skips && ~upto) return 0;                                                                      \
    dcount += POPCNT(dout);                                                                            \
  }                                                                                                    \
  if (inq) {                                                                                           \
    s->end_in_quotes = 1;                                                                              \
    s->tail_start = rec;                                                                               \
    s->tail_nf = dcount - rec_d + 1;                                                                   \
  } else if (rec >= 0 && dcount - rec_d + 1 != expected) {                                             \
    if (rill__csv_vec_push(&s->bad, rec) != RILL_OK || rill__csv_vec_push(&s->bad, dcount - rec_d + 1) != RILL_OK) \
      s->rc = RILL_ENOMEM;                                                                             \
  }                                                                                                    \
  return 1;

#if CSV_SIMD
/* The masks of the 64 bytes at p; the escape character's only when `with_esc` (a constant). */
__attribute__((always_inline)) static inline void masks_sse2(const char* p, char dl, char q, char esc, const int with_esc,
                                                             scan_masks_t* m) {
  __m128i vdl = _mm_set1_epi8(dl), vq = _mm_set1_epi8(q), vn = _mm_set1_epi8('\n'), vr = _mm_set1_epi8('\r');
  __m128i ve = _mm_set1_epi8(esc);
  uint64_t mq = 0, md = 0, mn = 0, me = 0;
  for (int k = 0; k < 4; k++) {
    __m128i v = _mm_loadu_si128((const __m128i*)(p + 16 * k));
    mq |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, vq)) << (16 * k);
    md |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, vdl)) << (16 * k);
    mn |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, vn), _mm_cmpeq_epi8(v, vr))) << (16 * k);
    if (with_esc) me |= (uint64_t)(unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, ve)) << (16 * k);
  }
  m->q = mq;
  m->dl = md;
  m->nl = mn;
  m->e = me;
}
#define MASKS_PORTABLE masks_sse2
#else
static inline void masks_bytes(const char* p, char dl, char q, char esc, const int with_esc, scan_masks_t* m) {
  uint64_t mq = 0, md = 0, mn = 0, me = 0;
  for (int k = 0; k < 64; k++) {
    mq |= (uint64_t)(p[k] == q) << k;
    md |= (uint64_t)(p[k] == dl) << k;
    mn |= (uint64_t)(p[k] == '\n' || p[k] == '\r') << k;
    if (with_esc) me |= (uint64_t)(p[k] == esc) << k;
  }
  m->q = mq;
  m->dl = md;
  m->nl = mn;
  m->e = me;
}
#define MASKS_PORTABLE masks_bytes
#endif

__attribute__((always_inline)) static inline int scan_masks_as(const char* d, int64_t begin, int64_t end,
                                                                const rill__csv_dialect_t* x, int64_t expected,
                                                                rill__csv_spec_t* s, const int skips, const int escapes) {
  SCAN_BODY(MASKS_PORTABLE, __builtin_popcountll)
}

/* One body per case: the checks of lines and of escapes are compiled out where x needs none
 * (with an escape character, lines are checked whether x needs it or not). */
#define SCAN_CASES(AS)                                                                                 \
  if (x->esc) return AS(d, begin, end, x, expected, s, 1, 1); /* rare: checks lines too */                 \
  return x->cm || x->trim ? AS(d, begin, end, x, expected, s, 1, 0) : AS(d, begin, end, x, expected, s, 0, 0)

static int scan_chunk_masks(const char* d, int64_t begin, int64_t end, const rill__csv_dialect_t* x,
                            int64_t expected, rill__csv_spec_t* s) {
  SCAN_CASES(scan_masks_as);
}

#if defined(__GNUC__) && defined(__x86_64__) && CSV_SIMD
#include <immintrin.h>
#define CSV_AVX2 1
__attribute__((target("avx2,popcnt,bmi"), always_inline)) static inline void masks_avx2(const char* p, char dl, char q,
                                                                                       char esc, const int with_esc,
                                                                                       scan_masks_t* m) {
  __m256i vdl = _mm256_set1_epi8(dl), vq = _mm256_set1_epi8(q), vn = _mm256_set1_epi8('\n'),
          vr = _mm256_set1_epi8('\r');
  __m256i a = _mm256_loadu_si256((const __m256i*)p), b = _mm256_loadu_si256((const __m256i*)(p + 32));
#define M2(x, y) ((uint64_t)(uint32_t)_mm256_movemask_epi8(x) | ((uint64_t)(uint32_t)_mm256_movemask_epi8(y) << 32))
  m->q = M2(_mm256_cmpeq_epi8(a, vq), _mm256_cmpeq_epi8(b, vq));
  m->dl = M2(_mm256_cmpeq_epi8(a, vdl), _mm256_cmpeq_epi8(b, vdl));
  m->nl = M2(_mm256_or_si256(_mm256_cmpeq_epi8(a, vn), _mm256_cmpeq_epi8(a, vr)),
             _mm256_or_si256(_mm256_cmpeq_epi8(b, vn), _mm256_cmpeq_epi8(b, vr)));
  m->e = 0;
  if (with_esc) {
    __m256i ve = _mm256_set1_epi8(esc);
    m->e = M2(_mm256_cmpeq_epi8(a, ve), _mm256_cmpeq_epi8(b, ve));
  }
#undef M2
}

__attribute__((target("avx2,popcnt,bmi"), always_inline)) static inline int scan_masks_avx2_as(
    const char* d, int64_t begin, int64_t end, const rill__csv_dialect_t* x, int64_t expected, rill__csv_spec_t* s,
    const int skips, const int escapes) {
  SCAN_BODY(masks_avx2, _mm_popcnt_u64)
}

__attribute__((target("avx2,popcnt,bmi"))) static int scan_chunk_masks_avx2(const char* d, int64_t begin,
                                                                           int64_t end, const rill__csv_dialect_t* x,
                                                                           int64_t expected, rill__csv_spec_t* s) {
  SCAN_CASES(scan_masks_avx2_as);
}
#else
#define CSV_AVX2 0
#endif

/* ------------------------------------------------------------------ bitmask record splits */

/* A record split from 64-byte masks with the quote model of the bitmask scan above: quotes
 * toggle "inside quotes" (a prefix XOR), the first line break outside quotes ends the record
 * and the delimiters outside quotes before it end fields. Only the bytes before that line
 * break are checked against the model (quotes opening at a field start or right after a
 * closing quote, a closing quote followed by a delimiter, a line break or a quote; under trim
 * also what trim_accepts passes; escaped bytes are text, as in SCAN_BODY); where it does not
 * hold, or where a step would read past the input, it returns -1 and the byte loop splits the
 * record. Otherwise its spans, count and *next are the byte loop's. */
#define SPLIT_BODY(MASKS)                                                                               \
  const char dl = x->dl, q = x->q, esc = x->esc;                                                        \
  int64_t nf = 0, fs = pos;                                                                             \
  uint64_t inq = 0, prev_fb = 1, prev_cq = 0, ecarry = 0; /* as in SCAN_BODY */                         \
  for (int64_t i = pos; i + 64 <= size; i += 64) {                                                      \
    scan_masks_t m;                                                                                     \
    MASKS(d + i, dl, q, esc, escapes, &m);                                                              \
    APPLY_ESCAPES(m, ecarry)                                                                            \
    uint64_t in = inq, cq = 0, fb;                                                                      \
    if (m.q | inq) in = prefix_xor(m.q) ^ inq;                                                          \
    uint64_t nout = m.nl & ~in;                                                                         \
    uint64_t upto = nout ? (nout & (0 - nout)) - 1 : ~(uint64_t)0; /* the bytes before the record's end */ \
    if (m.q | inq) {                                                                                    \
      uint64_t open = m.q & in;                                                                         \
      cq = m.q & ~in;                                                                                   \
      fb = ((m.dl | m.nl) & ~in) | cq;                                                                  \
      uint64_t bad_open = open & upto & ~((fb << 1) | prev_fb);                                         \
      uint64_t bad_cq = (((cq & upto) << 1) | prev_cq) & ~(m.dl | m.nl | m.q);                          \
      if ((bad_open | bad_cq) && !(x->trim && trim_accepts(d, i, bad_open, bad_cq, pos, x))) return -1; \
    } else {                                                                                            \
      fb = m.dl | m.nl;                                                                                 \
    }                                                                                                   \
    uint64_t dm = m.dl & ~in & upto;                                                                    \
    if (nf + POPCNT(dm) < max) { /* room for these fields and the next */                               \
      for (; dm; dm &= dm - 1) {                                                                        \
        int64_t e = i + __builtin_ctzll(dm);                                                            \
        sp[2 * nf] = fs;                                                                                \
        sp[2 * nf + 1] = e;                                                                             \
        nf++;                                                                                           \
        fs = e + 1;                                                                                     \
      }                                                                                                 \
    } else {                                                                                            \
      for (; dm; dm &= dm - 1) {                                                                        \
        int64_t e = i + __builtin_ctzll(dm);                                                            \
        if (nf < max) {                                                                                 \
          sp[2 * nf] = fs;                                                                              \
          sp[2 * nf + 1] = e;                                                                           \
        }                                                                                               \
        nf++;                                                                                           \
        fs = e + 1;                                                                                     \
      }                                                                                                 \
    }                                                                                                   \
    if (nout) {                                                                                         \
      int64_t e = i + __builtin_ctzll(nout);                                                            \
      if (nf < max) {                                                                                   \
        sp[2 * nf] = fs;                                                                                \
        sp[2 * nf + 1] = e;                                                                             \
      }                                                                                                 \
      *next = d[e] == '\r' && e + 1 < size && d[e + 1] == '\n' ? e + 2 : e + 1;                          \
      return nf + 1;                                                                                    \
    }                                                                                                   \
    prev_fb = fb >> 63;                                                                                 \
    prev_cq = cq >> 63;                                                                                 \
    inq = (uint64_t)0 - (in >> 63);                                                                     \
  }                                                                                                     \
  return -1;

/* Rows split in a call in an order of their own (a shuffled read) wait for memory twice each:
 * for the row's offset in the index, then for its text. The offset of the row
 * 2 * SPLIT_AHEAD_ROWS ahead and the text of the row SPLIT_AHEAD_ROWS ahead are asked for
 * early, so that their waits overlap the splits in between. Not for rows in order (the
 * last one n - 1 after the first): the hardware's own prefetch has them, and the asking cost
 * an in-order read 2-5% of its time. The text CSV_AHEAD bytes past a row's start is asked for
 * in order only: out of order it is another row's, a random access of memory wasted per row
 * (the hardware's prefetch follows a long row by itself). */
enum { SPLIT_AHEAD_ROWS = 8 };

/* Splits rows[0..n) (each row's fields to sp + j * stride, at most `max`; counts to
 * nfields[j]) with SPLIT (a mask split, -1 when it leaves the record to the byte loop). */
#define SPLIT_ROWS_BODY(SPLIT)                                                                          \
  const char* d = c->data;                                                                              \
  const int mesc = masks_escape(&c->dia);                                                               \
  int64_t next;                                                                                         \
  const int in_order = n > 0 && rows[n - 1] - rows[0] == n - 1;                                         \
  const int64_t ahead = in_order ? 0 : n;                                                               \
  for (int64_t j = 0; j < n; j++) {                                                                     \
    if (j + 2 * SPLIT_AHEAD_ROWS < ahead) rill__csv_prefetch_offset(c, rows[j + 2 * SPLIT_AHEAD_ROWS]); \
    if (j + SPLIT_AHEAD_ROWS < ahead) rill__csv_prefetch_row(c, rows[j + SPLIT_AHEAD_ROWS]);            \
    int64_t pos = rill__csv_start(c, rows[j]);                                                          \
    if (in_order && pos + CSV_AHEAD < c->size) __builtin_prefetch(d + pos + CSV_AHEAD);                 \
    int64_t nf = !c->dia.esc ? SPLIT(d, c->size, pos, &c->dia, sp + j * stride, max, &next, 0)            \
                 : mesc ? SPLIT(d, c->size, pos, &c->dia, sp + j * stride, max, &next, 1) : -1;               \
    nfields[j] = nf >= 0 ? nf : split_bytes(d, c->size, pos, &c->dia, sp + j * stride, max, &next);        \
    if (c->dia.trim) trim_spans(d, &c->dia, sp + j * stride, nfields[j] < max ? nfields[j] : max);         \
  }

#if CSV_SIMD
#define POPCNT pop64
static inline int pop64(uint64_t x) { return pop16((unsigned)(x & 0xffff)) + pop16((unsigned)(x >> 16 & 0xffff)) + pop16((unsigned)(x >> 32 & 0xffff)) + pop16((unsigned)(x >> 48)); }
__attribute__((always_inline)) static inline int64_t split_masks(const char* d, int64_t size, int64_t pos,
                                                                 const rill__csv_dialect_t* x, int64_t* sp, int64_t max,
                                                                 int64_t* next, const int escapes) {
  SPLIT_BODY(masks_sse2)
}
static void split_rows_sse2(const rill__csv_t* c, const int64_t* rows, int64_t n, int64_t* sp, int64_t stride,
                            int64_t max, int64_t* nfields) {
  SPLIT_ROWS_BODY(split_masks)
}
#undef POPCNT
#endif

#if CSV_AVX2
#define POPCNT _mm_popcnt_u64
__attribute__((target("avx2,popcnt,bmi"), always_inline)) static inline int64_t split_masks_avx2(const char* d, int64_t size,
                                                                                 int64_t pos,
                                                                                 const rill__csv_dialect_t* x,
                                                                                 int64_t* sp, int64_t max,
                                                                                 int64_t* next, const int escapes) {
  SPLIT_BODY(masks_avx2)
}
__attribute__((target("avx2,popcnt,bmi"))) static void split_rows_avx2(const rill__csv_t* c, const int64_t* rows,
                                                                      int64_t n, int64_t* sp, int64_t stride,
                                                                      int64_t max, int64_t* nfields) {
  SPLIT_ROWS_BODY(split_masks_avx2)
}
__attribute__((target("avx2,popcnt,bmi"))) static int64_t split_one_avx2(const char* d, int64_t size, int64_t pos,
                                                                        const rill__csv_dialect_t* x, int64_t* sp,
                                                                        int64_t max, int64_t* next) {
  return x->esc ? split_masks_avx2(d, size, pos, x, sp, max, next, 1) : split_masks_avx2(d, size, pos, x, sp, max, next, 0);
}
#undef POPCNT
#endif

void rill__csv_split_rows(const rill__csv_t* c, const int64_t* rows, int64_t n, int64_t* sp, int64_t stride,
                          int64_t max, int64_t* nfields, int level) {
  if (level > rill__csv_scan_simd_level()) level = rill__csv_scan_simd_level();
#if CSV_AVX2
  if (level >= 2) {
    split_rows_avx2(c, rows, n, sp, stride, max, nfields);
    return;
  }
#endif
#if CSV_SIMD
  if (level >= 1) {
    split_rows_sse2(c, rows, n, sp, stride, max, nfields);
    return;
  }
#endif
  (void)level;
  int64_t next;
  for (int64_t j = 0; j < n; j++) {
    nfields[j] = split_bytes(c->data, c->size, rill__csv_start(c, rows[j]), &c->dia, sp + j * stride, max, &next);
    if (c->dia.trim) trim_spans(c->data, &c->dia, sp + j * stride, nfields[j] < max ? nfields[j] : max);
  }
}

int64_t rill__csv_split(const char* d, int64_t size, int64_t pos, const rill__csv_dialect_t* x, int64_t* sp,
                        int64_t max, int64_t* next) {
  int64_t nf = -1;
  if (!x->esc || masks_escape(x)) {
#if CSV_AVX2
    if (rill__csv_scan_simd_level() >= 2) nf = split_one_avx2(d, size, pos, x, sp, max, next);
    else
#endif
#if CSV_SIMD
      nf = x->esc ? split_masks(d, size, pos, x, sp, max, next, 1) : split_masks(d, size, pos, x, sp, max, next, 0);
#endif
  }
  if (nf < 0) nf = split_bytes(d, size, pos, x, sp, max, next);
  if (x->trim && sp) trim_spans(d, x, sp, nf < max ? nf : max);
  return nf;
}

int rill__csv_scan_simd_level(void) {
#if CSV_AVX2
  static _Atomic int level = -1;
  int l = atomic_load_explicit(&level, memory_order_relaxed);
  if (l < 0) {
    __builtin_cpu_init();
    l = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt") && __builtin_cpu_supports("bmi") ? 2 : 1;
    atomic_store_explicit(&level, l, memory_order_relaxed);
  }
  return l;
#else
  return 0;
#endif
}

int rill__csv_scan_chunk_masks(const char* d, int64_t begin, int64_t end, const rill__csv_dialect_t* x,
                               int64_t expected, rill__csv_spec_t* s, int level) {
  if (x->esc && !masks_escape(x)) return 0; /* a blank escape character under trim: the state machine's */
#if CSV_AVX2
  if (level >= 2) return scan_chunk_masks_avx2(d, begin, end, x, expected, s);
#endif
  (void)level;
  return scan_chunk_masks(d, begin, end, x, expected, s);
}

void rill__csv_scan_chunk(const char* d, int64_t begin, int64_t end, int in_quotes, const rill__csv_dialect_t* x,
                          int64_t expected, rill__csv_spec_t* s, const rill__csv_spec_t* ref) {
  if (!in_quotes && !ref) {
    if (rill__csv_scan_chunk_masks(d, begin, end, x, expected, s, rill__csv_scan_simd_level())) return;
    s->starts.n = 0; /* a quote or a line the masks do not model: the state machine decides */
    s->starts.far.n = 0;
    s->bad.n = 0;
  }
  rill__csv_scan_chunk_generic(d, begin, end, in_quotes, x, expected, s, ref);
}
