/* Entropy marks of baseline JPEG files: where runs of MCU rows start in the Huffman-coded
 * data (the byte, the bit in it and the DC predictions of the components there); and the
 * seek that uses them. A sequential JPEG without restart markers can only be entropy-decoded
 * from its first MCU, so a region in the lower rows of an image costs the Huffman decoding of
 * every row above it, in every epoch. With a mark above the region the decoder is given a
 * stream of its own instead: the file's tables and frame header (its height reduced), one
 * synthetic MCU row whose blocks set the DC predictions of the mark and end on the bit where
 * the mark starts, then the file's own bytes from the mark on (not copied). libjpeg decodes
 * that stream to exactly the rows of the original from the mark down, the first one excepted
 * (its chroma context above is the synthetic row).
 *
 * The marks are found as they are needed: a seek below the last mark known walks the rows
 * from there to the mark it wants, recording the marks it passes. That walk costs what
 * libjpeg's skipping of those rows would have cost, so no decode pays more than before, and
 * once a file's upper rows have been walked its regions start at their marks.
 *
 * Nothing here calls libjpeg: image_jpeg.c feeds the stream to it. A file the walk cannot
 * follow exactly as libjpeg does (progressive or arithmetic coding, restart intervals, more
 * than one scan, 12-bit samples, damaged or unusual data) gets no marks of its own; a set of
 * marks may instead hold a baseline copy of it made by image_jpeg.c, and be the copy's. */
#include <limits.h>
#include <stdatomic.h>
#include <string.h>

#include "addon.h"
#include "image_internal.h"

#define MARKS_MAX 16   /* row marks per file: 12 B each */
#define LOOK 13        /* Huffman codes up to this length decode by one table lookup */

typedef struct mark {
  uint32_t at;        /* byte << 3 | bits of that byte the MCUs before used; UINT32_MAX: unusable */
  int16_t dc[3];      /* DC predictions of the scan's components there */
} mark_t;

struct rill__jpeg_marks {
  int32_t width, height;
  uint16_t mcu_rows, mcu_cols;
  uint16_t step;      /* MCU rows from one mark to the next: mark k is at MCU row (k + 1) * step */
  uint16_t count;
  uint8_t ncomp;      /* components of the frame and of its one scan (1 or 3) */
  uint8_t mcu_h, mcu_w; /* image rows and columns per MCU (8 x the largest sampling factors) */
  uint8_t cols_ready; /* the column marks were found (rill__jpeg_marks_walk_all) */
  uint16_t col_step;  /* column marks: every col_step-th MCU of each row */
  uint16_t col_count; /* column marks per row; 0: no room for them */
  uint32_t copy_len;  /* bytes of the JPEG the marks were made for, held after the marks (a
                         file's copy: rill__jpeg_marks_hold); 0: the file's own bytes */
  _Atomic int known;  /* marks found: mark[0, known) (written before `known` is raised) */
  _Atomic int busy;   /* a thread is walking to more marks */
  _Atomic int stuck;  /* a walk failed: no more marks */
  _Atomic uint32_t damaged; /* 1 + the MCU (row * mcu_cols + column) where a walk met a code the
                         tables lack or a DC value out of range; 0: none met */
  mark_t mark[];      /* the row marks at the rows' first MCU; then, when col_step is set, the
                         column marks: MCU (r, k * col_step) at mark[count + r * col_count + k],
                         and after them the end of the data (found by rill__jpeg_marks_walk_all) */
};

/* ---------------------------------------------------------------- headers and tables */

/* A Huffman table as a file defines it, with its codes (for writing pads). */
typedef struct htab {
  int present;
  uint8_t bits[17];          /* codes of each length 1..16 */
  uint8_t vals[256];
  int nvals;
  uint16_t code[256];
  uint8_t len[256];          /* 0: the symbol has no code */
} htab_t;

/* The decoding tables of a Huffman table (derived once per thread: table_cache_t), 19 KB a
 * DC table and 49 KB an AC one: outside jhead_t, which lives on the stack. */
typedef struct hdec {
  int derived, ac;           /* ac: skip and run are made (an AC table) */
  uint8_t bits[17];          /* the table: codes of each length, symbols */
  uint8_t vals[256];
  int nvals;
  int32_t maxcode[18], valoff[17];
  uint16_t look[1 << LOOK];  /* len << 8 | symbol; 0: a longer code (or none) */
  uint16_t skip[1 << LOOK];  /* AC: a code and its value bits within LOOK bits, as the pass
                                uses them: bits to drop | coefficients passed << 5 | SKIP_END
                                (the block ends); 0: decode the symbol */
  uint16_t run[1 << LOOK];   /* AC: the codes with their value bits that fit whole in LOOK
                                bits, as many as fit and pass fewer than 64 coefficients:
                                bits to drop | coefficients passed << 4 | RUN_END (the last
                                code ends the block); 0: none fits */
} hdec_t;

typedef struct jhead {
  int width, height, nf, hmax, vmax;
  int comp_id[3], comp_h[3], comp_v[3];
  int ns, scan_comp[3], td[3], ta[3]; /* scan order: frame component, DC and AC table */
  int dri;
  size_t data;                        /* first byte of the entropy-coded data */
  htab_t dc[4], ac[4];
} jhead_t;

static unsigned be16(const uint8_t* p) { return (unsigned)p[0] << 8 | p[1]; }

/* Canonical codes of a table (JPEG Annex C); 0 when the lengths are over-subscribed. */
static int derive_codes(htab_t* t) {
  memset(t->len, 0, sizeof t->len);
  unsigned code = 0;
  int k = 0;
  for (int l = 1; l <= 16; l++) {
    for (int i = 0; i < t->bits[l]; i++, k++) {
      t->code[t->vals[k]] = (uint16_t)code++;
      t->len[t->vals[k]] = (uint8_t)l;
    }
    if (code > (1u << l)) return 0;
    code <<= 1;
  }
  return 1;
}

#define SKIP_END 0x8000
#define RUN_END 0x8000

static void derive_decode(hdec_t* t) {
  memset(t->look, 0, sizeof t->look);
  if (t->ac) memset(t->skip, 0, sizeof t->skip);
  int32_t code = 0;
  int k = 0;
  for (int l = 1; l <= 16; l++) {
    if (t->bits[l]) {
      t->valoff[l] = k - code;
      for (int i = 0; i < t->bits[l]; i++, k++, code++)
        if (l <= LOOK) {
          int span = 1 << (LOOK - l);
          for (int j = 0; j < span; j++) t->look[(code << (LOOK - l)) | j] = (uint16_t)(l << 8 | t->vals[k]);
          int r = t->vals[k] >> 4, s = t->vals[k] & 15;
          if (t->ac && l + s <= LOOK) {
            uint16_t e = (uint16_t)(l + s) | (uint16_t)((s ? r + 1 : 16) << 5) | (s == 0 && r != 15 ? SKIP_END : 0);
            for (int j = 0; j < span; j++) t->skip[(code << (LOOK - l)) | j] = e;
          }
        }
      t->maxcode[l] = code - 1;
    } else {
      t->maxcode[l] = -1;
    }
    code <<= 1;
  }
  t->maxcode[17] = INT32_MAX;
  t->derived = 1;
  if (!t->ac) return;
  /* the run of whole codes at the top of each window, one code at a time from the one-code
   * table (a code and value no longer than the bits left are decided by them: the window's
   * low bits, zeros here, do not matter) */
  for (int i = 0; i < (1 << LOOK); i++) {
    int used = 0, passed = 0, end = 0;
    while (used < LOOK && !end) {
      uint16_t e = t->skip[(i << used) & ((1 << LOOK) - 1)];
      if (!e || used + (e & 31) > LOOK) break;
      if (!(e & SKIP_END) && passed + ((e >> 5) & 31) > 63) break; /* no block passes more */
      used += e & 31;
      if (e & SKIP_END) end = 1;
      else passed += (e >> 5) & 31;
    }
    t->run[i] = (uint16_t)(used | passed << 4 | (end ? RUN_END : 0));
  }
}

/* Decoding tables derived once per thread for the Huffman tables met last (the files of a
 * dataset mostly share theirs), found by the tables' class, code lengths and symbols. A scan
 * uses at most 6 tables; the entries a walk has found (`*held`, a bit each) are not replaced
 * while it looks up the others, so 8 entries always leave one to replace. */
enum { TABLE_CACHE = 8 };
typedef struct table_cache {
  hdec_t t[TABLE_CACHE];
  unsigned next; /* the entry replaced next */
} table_cache_t;
static const rill__scratch_kind_t cache_kind = {sizeof(table_cache_t), NULL};

/* The decoding tables of t (an AC table when `ac`), from the cache. */
static const hdec_t* derived(const htab_t* t, int ac, table_cache_t* cache, unsigned* held) {
  for (int i = 0; i < TABLE_CACHE; i++) {
    const hdec_t* c = &cache->t[i];
    if (c->derived && c->ac == ac && c->nvals == t->nvals && !memcmp(c->bits, t->bits, sizeof t->bits) &&
        !memcmp(c->vals, t->vals, (size_t)t->nvals)) {
      *held |= 1u << i;
      return c;
    }
  }
  while (*held & 1u << (cache->next % TABLE_CACHE)) cache->next++;
  *held |= 1u << (cache->next % TABLE_CACHE);
  hdec_t* c = &cache->t[cache->next++ % TABLE_CACHE];
  memcpy(c->bits, t->bits, sizeof t->bits);
  memcpy(c->vals, t->vals, (size_t)t->nvals);
  c->nvals = t->nvals, c->ac = ac, c->derived = 0;
  derive_decode(c);
  return c;
}

int rill__jpeg_segment(const uint8_t* p, size_t n, size_t* i, const uint8_t** seg, size_t* seg_len) {
  size_t k = *i;
  if (k + 2 > n || p[k] != 0xFF) return 0;
  while (k + 2 < n && p[k + 1] == 0xFF) k++; /* fill bytes */
  int m = p[k + 1];
  if (m == 0x00 || m == 0xFF) return 0;
  if (m == 0x01 || (m >= 0xD0 && m <= 0xD9)) {
    *seg = p + k + 2, *seg_len = 0, *i = k + 2;
    return m;
  }
  if (k + 4 > n) return 0;
  size_t len = be16(p + k + 2);
  if (len < 2 || k + 2 + len > n) return 0;
  *seg = p + k + 4, *seg_len = len - 2, *i = k + 2 + len;
  return m;
}

/* Reads the segments up to the first scan header. 0: not a file the marks can follow. */
static int parse_head(const uint8_t* p, size_t n, jhead_t* h) {
  memset(h, 0, offsetof(jhead_t, dc));
  for (int i = 0; i < 4; i++) h->dc[i].present = h->ac[i].present = 0;
  if (n < 4 || p[0] != 0xFF || p[1] != 0xD8) return 0;
  size_t i = 2;
  int sof = 0;
  for (;;) {
    const uint8_t* s;
    size_t sl;
    int m = rill__jpeg_segment(p, n, &i, &s, &sl);
    if (m == 0) return 0;
    if (m == 0xC0 || m == 0xC1) {
      if (sof || sl < 6 || s[0] != 8) return 0;
      h->height = (int)be16(s + 1), h->width = (int)be16(s + 3), h->nf = s[5];
      if (h->height < 1 || h->width < 1 || (h->nf != 1 && h->nf != 3) || sl != 6 + 3 * (size_t)h->nf) return 0;
      for (int c = 0; c < h->nf; c++) {
        h->comp_id[c] = s[6 + 3 * c];
        h->comp_h[c] = s[7 + 3 * c] >> 4, h->comp_v[c] = s[7 + 3 * c] & 15;
        if (h->comp_h[c] < 1 || h->comp_h[c] > 4 || h->comp_v[c] < 1 || h->comp_v[c] > 4) return 0;
        if (h->comp_h[c] > h->hmax) h->hmax = h->comp_h[c];
        if (h->comp_v[c] > h->vmax) h->vmax = h->comp_v[c];
      }
      /* one component: libjpeg's MCU is one block whatever the factors; keep to 1x1 */
      if (h->nf == 1 && (h->hmax != 1 || h->vmax != 1)) return 0;
      int blocks = 0;
      for (int c = 0; c < h->nf; c++) blocks += h->comp_h[c] * h->comp_v[c];
      if (blocks > 10) return 0; /* the standard's limit of blocks per MCU (libjpeg's too) */
      sof = 1;
    } else if (m >= 0xC2 && m <= 0xCF && m != 0xC4) {
      return 0; /* progressive, lossless, arithmetic coding */
    } else if (m == 0xC4) {
      size_t k = 0;
      while (k < sl) {
        if (k + 17 > sl) return 0;
        int cls = s[k] >> 4, id = s[k] & 15;
        if (cls > 1 || id > 3) return 0;
        htab_t* t = cls ? &h->ac[id] : &h->dc[id];
        int total = 0;
        t->bits[0] = 0;
        for (int l = 1; l <= 16; l++) total += (t->bits[l] = s[k + l]);
        if (total > 256 || k + 17 + (size_t)total > sl) return 0;
        memcpy(t->vals, s + k + 17, (size_t)total);
        t->nvals = total;
        if (!cls)
          for (int v = 0; v < total; v++)
            if (t->vals[v] > 15) return 0;
        if (!derive_codes(t)) return 0;
        t->present = 1; /* a table may be defined again */
        k += 17 + (size_t)total;
      }
    } else if (m == 0xDD) {
      if (sl < 2) return 0;
      h->dri = (int)be16(s);
    } else if (m == 0xDA) {
      if (!sof || sl < 1) return 0;
      h->ns = s[0];
      if (h->ns != h->nf || sl != 4 + 2 * (size_t)h->ns) return 0;
      for (int c = 0; c < h->ns; c++) {
        int id = s[1 + 2 * c], f = -1;
        for (int j = 0; j < h->nf; j++)
          if (h->comp_id[j] == id) f = j;
        for (int j = 0; j < c; j++)
          if (h->scan_comp[j] == f) f = -1;
        if (f < 0) return 0;
        h->scan_comp[c] = f;
        h->td[c] = s[2 + 2 * c] >> 4, h->ta[c] = s[2 + 2 * c] & 15;
        if (h->td[c] > 3 || h->ta[c] > 3 || !h->dc[h->td[c]].present || !h->ac[h->ta[c]].present) return 0;
      }
      const uint8_t* q = s + 1 + 2 * h->ns;
      if (q[0] != 0 || q[1] != 63 || q[2] != 0) return 0; /* Ss, Se, Ah/Al of a sequential scan */
      h->data = i;
      return h->dri == 0;
    } else if (m == 0xD8 || m == 0xD9 || (m >= 0xD0 && m <= 0xD7) || m == 0xDC || m == 0x01) {
      return 0; /* a second SOI, an early end, a stray restart marker, DNL, TEM */
    }
  }
}

/* ---------------------------------------------------------------- the pass over the data */

/* The bits of the entropy-coded data: a 64-bit buffer (bits first in the top) kept in the
 * pass's locals, refilled from the bytes by `refill`, which returns the new state. */
typedef struct bits {
  uint64_t buf;
  int cnt;
} bits_t;

typedef struct source {
  const uint8_t* p;
  size_t n, pos;          /* next byte to load */
  uint32_t real, fake;    /* data bytes loaded; zero bytes loaded past the data's end */
  int marker;             /* the data ended at a marker (or at the end of the file) */
} source_t;

static inline int has_ff(uint64_t w) {
  uint64_t x = ~w;
  return ((x - 0x0101010101010101ull) & ~x & 0x8080808080808080ull) != 0;
}

/* Loads bytes one at a time until more than 56 bits are buffered (refill's slow path). */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static bits_t refill_bytes(source_t* s, bits_t b) {
  while (b.cnt <= 56) {
    uint64_t v = 0;
    if (!s->marker) {
      if (s->pos >= s->n) {
        s->marker = 1;
      } else if (s->p[s->pos] != 0xFF) {
        s->real++;
        v = s->p[s->pos++];
      } else if (s->pos + 1 < s->n && s->p[s->pos + 1] == 0) {
        s->real++;
        v = 0xFF;
        s->pos += 2;
      } else {
        s->marker = 1;
      }
    }
    if (s->marker) s->fake++;
    b.buf |= v << (56 - b.cnt);
    b.cnt += 8;
  }
  return b;
}

/* Loads bytes until more than 56 bits are buffered; past the data (a marker or the end of
 * the file), zero bytes. */
static inline bits_t refill(source_t* s, bits_t b) {
  if (b.cnt <= 56 && s->pos + 8 <= s->n) {
    uint64_t w;
    memcpy(&w, s->p + s->pos, 8);
    w = __builtin_bswap64(w);
    if (!has_ff(w) && !s->marker) { /* no stuffing, no marker: as many bytes as fit at once */
      int k = (64 - b.cnt) >> 3;
      b.buf |= (w >> (64 - 8 * k)) << (64 - b.cnt - 8 * k);
      s->real += (uint32_t)k;
      s->pos += (size_t)k;
      b.cnt += 8 * k;
      return b;
    }
  }
  return refill_bytes(s, b);
}

#define DROP(b, l) ((b).buf <<= (l), (b).cnt -= (l))

/* The next symbol of t (needs 16 bits buffered); -1 for a code the table lacks. */
static inline int decode(bits_t* b, const hdec_t* t) {
  uint16_t e = t->look[b->buf >> (64 - LOOK)];
  if (e) {
    DROP(*b, e >> 8);
    return e & 0xFF;
  }
  for (int l = LOOK + 1; l <= 16; l++) {
    int32_t code = (int32_t)(b->buf >> (64 - l));
    if (code <= t->maxcode[l]) {
      int k = t->valoff[l] + code;
      if (k < 0 || k >= t->nvals) return -1;
      DROP(*b, l);
      return t->vals[k];
    }
  }
  return -1;
}

/* The bit position reached (the byte in the file << 3 | bits of it used), or UINT32_MAX
 * past the data. The byte is found from the next one to load, back over the data bytes
 * still buffered (a 0x00 after 0xFF is stuffing, not data). */
static uint32_t position(const source_t* s, bits_t b) {
  uint64_t d = ((uint64_t)s->real + s->fake) * 8 - (uint64_t)b.cnt;
  if (d > (uint64_t)s->real * 8) return UINT32_MAX;
  size_t q = s->pos;
  for (uint32_t back = s->real - (uint32_t)(d >> 3); back > 0; back--) {
    q--;
    if (s->p[q] == 0 && q > 0 && s->p[q - 1] == 0xFF) q--;
  }
  uint64_t at = (uint64_t)q << 3 | (d & 7);
  return at < UINT32_MAX ? (uint32_t)at : UINT32_MAX;
}

/* One block as libjpeg reads it (jdhuff.c: a coefficient index may run past 63 on a last
 * run, which libjpeg accepts). 0 on a code the tables lack. */
static inline int walk_block(source_t* src, bits_t* bp, const hdec_t* dc, const hdec_t* ac, int32_t* pred) {
  bits_t b = *bp;
  if (b.cnt < 32) b = refill(src, b);
  int s = decode(&b, dc);
  if (s < 0) return 0;
  if (s) {
    int32_t v = (int32_t)(b.buf >> (64 - s));
    DROP(b, s);
    if (v < (1 << (s - 1))) v -= (1 << s) - 1;
    *pred += v;
    if (*pred > 32767 || *pred < -32768) return 0;
  }
  for (int k = 1; k < 64; k++) {
    if (b.cnt < 32) b = refill(src, b);
    /* the codes at the top of the buffer, all at once when they are all of this block (the
     * coefficients they pass, before an end of block, keep within it) */
    uint16_t u = ac->run[b.buf >> (64 - LOOK)];
    if ((u & 15) && k + ((u >> 4) & 127) < 64) {
      DROP(b, u & 15);
      if (u & RUN_END) break;
      k += ((u >> 4) & 127) - 1;
      continue;
    }
    uint16_t e = ac->skip[b.buf >> (64 - LOOK)];
    if (e) {
      DROP(b, e & 31);
      if (e & SKIP_END) break;
      k += ((e >> 5) & 31) - 1;
      continue;
    }
    int rs = decode(&b, ac);
    if (rs < 0) return 0;
    int r = rs >> 4;
    s = rs & 15;
    if (s) {
      k += r;
      DROP(b, s);
    } else {
      if (r != 15) break;
      k += 15;
    }
  }
  *bp = b;
  return 1;
}

/* MCUs per row and rows of the scan. */
static void mcu_grid(const jhead_t* h, int* mx, int* my) {
  int cw = 8 * h->hmax, ch = 8 * h->vmax;
  *mx = (h->width + cw - 1) / cw;
  *my = (h->height + ch - 1) / ch;
}

/* The scan component of each block of an MCU, in coding order; returns the block count. */
static int mcu_blocks(const jhead_t* h, int* comp) {
  int nb = 0;
  for (int c = 0; c < h->ns; c++) {
    int f = h->scan_comp[c], k = h->nf == 1 ? 1 : h->comp_h[f] * h->comp_v[f];
    for (int j = 0; j < k; j++) comp[nb++] = c;
  }
  return nb;
}

/* Marks in the allocation of m: the row marks and the column marks' room. */
static size_t marks_total(const rill__jpeg_marks_t* m) {
  return (size_t)m->count + (m->col_count ? (size_t)m->mcu_rows * m->col_count + 1 : 0);
}

int rill__jpeg_col_marks_within(int64_t bytes) {
  int64_t k = (bytes - (int64_t)(sizeof(rill__jpeg_marks_t) + MARKS_MAX * sizeof(mark_t))) / (int64_t)sizeof(mark_t);
  return k < 0 ? 0 : k > RILL__JPEG_COL_MARKS_MAX ? RILL__JPEG_COL_MARKS_MAX : (int)k;
}

/* The marks of rill__jpeg_marks_new, with room for `hold` bytes after them. */
static rill__jpeg_marks_t* marks_make(const void* buf, size_t n, int col_marks, size_t hold) {
  jhead_t hd, *h = &hd;
  int mx, my;
  if (n >= (size_t)1 << 29 || !parse_head(buf, n, h)) return NULL;
  mcu_grid(h, &mx, &my);
  if (my < 2) return NULL; /* nothing above a row to skip */
  int step = (my + MARKS_MAX) / (MARKS_MAX + 1), count = (my - 1) / step;
  if (count > MARKS_MAX) count = MARKS_MAX;
  /* column marks every col_step MCUs of a row (two a row, and the data's end, at the least:
   * one a row cuts nothing), as many as col_marks allows */
  int col_step = 0, col_count = 0;
  if (col_marks > RILL__JPEG_COL_MARKS_MAX) col_marks = RILL__JPEG_COL_MARKS_MAX;
  if (mx > 1 && col_marks > 2 * my) {
    col_step = 1;
    while ((int64_t)((mx + col_step - 1) / col_step) * my + 1 > col_marks) col_step++;
    col_count = (mx + col_step - 1) / col_step;
  }
  rill__jpeg_marks_t t = {h->width,        h->height,          (uint16_t)my,   (uint16_t)mx,
                          (uint16_t)step,  (uint16_t)count,    (uint8_t)h->ns, (uint8_t)(8 * h->vmax),
                          (uint8_t)(8 * h->hmax), 0, (uint16_t)col_step, (uint16_t)col_count, (uint32_t)hold,
                          0, 0, 0, 0};
  rill__jpeg_marks_t* m = rill__alloc(sizeof *m + marks_total(&t) * sizeof(mark_t) + hold);
  if (m) *m = t;
  return m;
}

rill__jpeg_marks_t* rill__jpeg_marks_new(const void* buf, size_t n, int col_marks) {
  return marks_make(buf, n, col_marks, 0);
}

/* where the held bytes start */
static uint8_t* held_bytes(const rill__jpeg_marks_t* m) { return (uint8_t*)(m->mark + marks_total(m)); }

rill__jpeg_marks_t* rill__jpeg_marks_hold(const void* buf, size_t n, int col_marks) {
  if (n == 0 || n >= (size_t)1 << 29) return NULL;
  rill__jpeg_marks_t* m = marks_make(buf, n, col_marks, n);
  if (m) memcpy(held_bytes(m), buf, n);
  return m;
}

const uint8_t* rill__jpeg_marks_stream(const rill__jpeg_marks_t* m, size_t* n) {
  if (!m || !m->copy_len) return NULL;
  *n = m->copy_len;
  return held_bytes(m);
}

/* The mark at the walk's position: 0 when the position is past the data. A DC value no 8-bit
 * table can code leaves the mark unusable. */
static int record(mark_t* k, const source_t* src, bits_t b, const jhead_t* h, const int32_t* pred) {
  uint32_t at = position(src, b);
  if (at == UINT32_MAX) return 0;
  int ok = 1;
  for (int c = 0; c < 3; c++) {
    ok &= c >= h->ns || (pred[c] >= -2047 && pred[c] <= 2047);
    k->dc[c] = (int16_t)(c < h->ns ? pred[c] : 0);
  }
  k->at = ok ? at : UINT32_MAX;
  return 1;
}

/* Walks the MCU rows from mark `from` (a usable one, or -1: the data's start) to mark `to`,
 * recording the marks `first` .. `to` (those between `from` and `first` are known); with
 * `all` (from -1 only), on to the end of the data, recording the column marks too. 0 when the
 * walk fails: a code the tables lack or a DC value out of range (damaged data: m->damaged
 * names the MCU), or the data ending before the mark. */
static int walk_marks(rill__jpeg_marks_t* m, jhead_t* h, const uint8_t* buf, size_t n, int from, int first, int to,
                      int all) {
  int mx, my, comp[10];
  mcu_grid(h, &mx, &my);
  int nb = mcu_blocks(h, comp);
  table_cache_t* cache = rill__scratch(&cache_kind);
  if (!cache) return 0; /* out of memory: no marks */
  const hdec_t *dct[3], *act[3];
  unsigned held = 0;
  for (int c = 0; c < h->ns; c++)
    dct[c] = derived(&h->dc[h->td[c]], 0, cache, &held), act[c] = derived(&h->ac[h->ta[c]], 1, cache, &held);
  source_t src = {.p = buf, .n = n, .pos = h->data};
  bits_t b = {0, 0};
  int32_t pred[3] = {0, 0, 0};
  int y = 0, cs = m->col_step;
  mark_t* cols = all ? m->mark + m->count : NULL;
  if (from >= 0) {
    uint32_t at = m->mark[from].at;
    src.pos = at >> 3;
    b = refill(&src, b);
    DROP(b, (int)(at & 7));
    for (int c = 0; c < h->ns; c++) pred[c] = m->mark[from].dc[c];
    y = (from + 1) * m->step;
  }
  for (;; y++) {
    int k = y / m->step - 1;
    if (y % m->step == 0 && k >= first && k <= to) {
      if (!record(&m->mark[k], &src, b, h, pred)) return 0;
      if (k == to && !all) return 1;
    }
    if (y == my) return record(&cols[(size_t)my * m->col_count], &src, b, h, pred);
    for (int x = 0; x < mx; x++) {
      if (cols && x % cs == 0 && !record(&cols[(size_t)y * m->col_count + (size_t)(x / cs)], &src, b, h, pred))
        return 0;
      for (int j = 0; j < nb; j++) {
        int c = comp[j];
        if (!walk_block(&src, &b, dct[c], act[c], &pred[c])) {
          atomic_store_explicit(&m->damaged, (uint32_t)(y * mx + x) + 1, memory_order_relaxed);
          return 0;
        }
      }
    }
  }
}

int rill__jpeg_marks_walk_all(rill__jpeg_marks_t* m, const void* buf, size_t n) {
  jhead_t hd, *h = &hd;
  if (!m->col_count || atomic_load_explicit(&m->known, memory_order_relaxed) || !parse_head(buf, n, h) ||
      h->width != m->width || h->height != m->height || h->ns != m->ncomp)
    return 0;
  if (!walk_marks(m, h, buf, n, -1, 0, m->count - 1, 1)) /* none known: seeks walk to their marks */
    return atomic_load_explicit(&m->damaged, memory_order_relaxed) ? -1 : 0;
  m->cols_ready = 1;
  atomic_store_explicit(&m->known, m->count, memory_order_release);
  /* Intact to the end? The last MCU's byte (its unused bits are padding), then the end marker
   * at once, after fill bytes only: libjpeg would find nothing to complain of there either. */
  const uint8_t* p = buf;
  uint32_t end = m->mark[marks_total(m) - 1].at;
  if (end == UINT32_MAX) return 1;
  size_t i = end >> 3;
  if (end & 7) i += 1 + (p[i] == 0xFF);
  if (i >= n || p[i] != 0xFF) return 1;
  while (i + 1 < n && p[i + 1] == 0xFF) i++;
  return i + 1 < n && p[i + 1] == 0xD9 ? 2 : 1;
}

int rill__jpeg_marks_damaged(const rill__jpeg_marks_t* m, int* row, int* col) {
  uint32_t d = atomic_load_explicit(&((rill__jpeg_marks_t*)m)->damaged, memory_order_relaxed);
  if (!d) return 0;
  *row = (int)((d - 1) / m->mcu_cols), *col = (int)((d - 1) % m->mcu_cols);
  return 1;
}

int rill__jpeg_marks_known(const rill__jpeg_marks_t* m) {
  return atomic_load_explicit(&((rill__jpeg_marks_t*)m)->known, memory_order_acquire);
}

size_t rill__jpeg_marks_bytes(const rill__jpeg_marks_t* m) {
  return m ? sizeof *m + marks_total(m) * sizeof m->mark[0] + m->copy_len : 0;
}

int rill__jpeg_marks_have_columns(const rill__jpeg_marks_t* m) { return m->cols_ready; }

rill__jpeg_marks_t* rill__jpeg_marks_drop_columns(rill__jpeg_marks_t* m) {
  if (!m || !m->col_count) return m;
  size_t old = rill__jpeg_marks_bytes(m);
  const uint8_t* held = held_bytes(m);
  m->col_count = 0, m->col_step = 0, m->cols_ready = 0;
  memmove(held_bytes(m), held, m->copy_len); /* the held bytes follow the row marks */
  rill__jpeg_marks_t* q = rill__realloc(m, old, rill__jpeg_marks_bytes(m));
  return q ? q : m; /* out of memory: the room stays, unused */
}

void rill__jpeg_marks_size(const rill__jpeg_marks_t* m, int* width, int* height, int* channels) {
  *width = m->width, *height = m->height, *channels = m->ncomp;
}

/* ---------------------------------------------------------------- the seek */

typedef struct bitwriter {
  uint8_t* p;
  size_t n;
  uint64_t acc;
  int cnt;     /* bits in acc not yet written (< 8 between calls) */
  size_t bits; /* written in all */
} bitwriter_t;

static void put(bitwriter_t* w, uint32_t v, int len) {
  w->bits += (size_t)len;
  if (!w->p) return; /* counting only */
  w->acc = w->acc << len | (v & ((1u << len) - 1));
  w->cnt += len;
  while (w->cnt >= 8) {
    uint8_t byte = (uint8_t)(w->acc >> (w->cnt - 8));
    w->p[w->n++] = byte;
    if (byte == 0xFF) w->p[w->n++] = 0;
    w->cnt -= 8;
  }
}

static int category(int v) {
  int a = v < 0 ? -v : v, s = 0;
  while (a) s++, a >>= 1;
  return s;
}

/* One extra AC coefficient (run 0, size s, all value bits set) in the first block of a scan
 * component: what the synthetic row uses to end on the mark's bit. */
typedef struct extra {
  int comp, s;
} extra_t;

/* Writes one MCU whose block j codes the DC difference dc[j] (no AC coefficient), the first
 * block of each scan component carrying that component's extras (or counts its bits when
 * w->p is NULL). 0 when a code it needs is missing from the tables. */
static int write_mcu(bitwriter_t* w, const jhead_t* h, const int* comp, int nb, const int32_t* dc, const extra_t* ex,
                     int nex) {
  for (int j = 0; j < nb; j++) {
    int c = comp[j], first = j == 0 || comp[j - 1] != c;
    const htab_t *d = &h->dc[h->td[c]], *a = &h->ac[h->ta[c]];
    int v = dc[j], s = category(v);
    if (s > 15 || !d->len[s]) return 0;
    put(w, d->code[s], d->len[s]);
    if (s) put(w, (uint32_t)(v < 0 ? v + (1 << s) - 1 : v), s);
    if (first)
      for (int e = 0; e < nex; e++)
        if (ex[e].comp == c) {
          put(w, a->code[ex[e].s], a->len[ex[e].s]);
          put(w, (1u << ex[e].s) - 1, ex[e].s);
        }
    if (!a->len[0]) return 0;
    put(w, a->code[0], a->len[0]);
  }
  return 1;
}

/* Writes the synthetic MCU row: its first MCU sets the DC predictions dc and carries the
 * extras (or counts its bits when w->p is NULL). 0 when a code it needs is missing. */
static int synthetic_row(bitwriter_t* w, const jhead_t* h, const int16_t* dc, const extra_t* ex, int nex) {
  int mx, my, comp[10];
  mcu_grid(h, &mx, &my);
  int nb = mcu_blocks(h, comp);
  int32_t first[10], zero[10] = {0};
  for (int j = 0; j < nb; j++) first[j] = j == 0 || comp[j - 1] != comp[j] ? dc[comp[j]] : 0;
  for (int x = 0; x < mx; x++)
    if (!write_mcu(w, h, comp, nb, x ? zero : first, ex, x ? 0 : nex)) return 0;
  return 1;
}

/* Extra coefficients that make `bits` more bits a multiple of 8 plus `want`: a shortest
 * sequence by breadth-first search over the residues mod 8. Returns their count, -1 if none. */
static int align_extras(const jhead_t* h, size_t bits, int want, extra_t* ex) {
  int from[8], by_c[8], by_s[8], queue[8], head = 0, tail = 0;
  for (int r = 0; r < 8; r++) from[r] = -2;
  int r0 = (int)(bits & 7);
  from[r0] = -1;
  queue[tail++] = r0;
  while (head < tail && from[want] == -2) {
    int r = queue[head++];
    for (int c = 0; c < h->ns; c++)
      for (int s = 1; s <= 10; s++) {
        const htab_t* a = &h->ac[h->ta[c]];
        if (!a->len[s]) continue;
        int q = (r + a->len[s] + s) & 7;
        if (from[q] != -2) continue;
        from[q] = r, by_c[q] = c, by_s[q] = s;
        queue[tail++] = q;
      }
  }
  if (from[want] == -2) return -1;
  int k = 0;
  for (int r = want; from[r] != -1; r = from[r]) ex[k++] = (extra_t){by_c[r], by_s[r]};
  return k;
}

/* Writes the segments of the file in p up to its scan into o (the metadata left out), the
 * frame's size set to width x height; returns the bytes written (at most h->data). */
static size_t write_head(uint8_t* o, const uint8_t* p, const jhead_t* h, int width, int height) {
  size_t len = 0, i = 2;
  o[len++] = 0xFF, o[len++] = 0xD8;
  while (i < h->data) {
    while (p[i + 1] == 0xFF) i++;
    int mk = p[i + 1];
    size_t sl = 2 + be16(p + i + 2);
    int keep = !((mk >= 0xE1 && mk <= 0xED) || mk == 0xEF || mk == 0xFE);
    if (keep) {
      memcpy(o + len, p + i, sl);
      if (mk == 0xC0 || mk == 0xC1) {
        o[len + 5] = (uint8_t)((unsigned)height >> 8), o[len + 6] = (uint8_t)height;
        o[len + 7] = (uint8_t)((unsigned)width >> 8), o[len + 8] = (uint8_t)width;
      }
      len += sl;
    }
    i += sl;
  }
  return len;
}

int rill__jpeg_seek(rill__jpeg_marks_t* m, const void* buf, size_t n, int y, int num, int denom, uint8_t** head,
                    size_t* cap, rill__jpeg_seek_t* out) {
  /* the lowest mark whose rows start above row y of the image scaled by num/denom */
  int t = -1;
  for (int i = m->count - 1; i >= 0 && t < 0; i--)
    if ((int64_t)(i + 1) * m->step * m->mcu_h * num < (int64_t)y * denom) t = i;
  if (t < 0) return 0;
  jhead_t hd, *h = &hd;
  const uint8_t* p = buf;
  if (!parse_head(p, n, h) || h->width != m->width || h->height != m->height || h->ns != m->ncomp) return 0;
  int known = atomic_load_explicit(&m->known, memory_order_acquire);
  if (known <= t && !atomic_load_explicit(&m->stuck, memory_order_relaxed) &&
      !atomic_exchange_explicit(&m->busy, 1, memory_order_acquire)) {
    known = atomic_load_explicit(&m->known, memory_order_acquire);
    int from = known - 1; /* the last usable mark known */
    while (from >= 0 && m->mark[from].at == UINT32_MAX) from--;
    if (known <= t) {
      if (walk_marks(m, h, p, n, from, known, t, 0))
        atomic_store_explicit(&m->known, known = t + 1, memory_order_release);
      else
        atomic_store_explicit(&m->stuck, 1, memory_order_relaxed);
    }
    atomic_store_explicit(&m->busy, 0, memory_order_release);
  }
  int k = known - 1 < t ? known - 1 : t;
  while (k >= 0 && m->mark[k].at == UINT32_MAX) k--;
  if (k < 0) return 0;
  size_t at = m->mark[k].at >> 3;
  int bit = (int)(m->mark[k].at & 7);
  if (at >= n) return 0;
  int16_t dc[3];
  memcpy(dc, m->mark[k].dc, sizeof dc);
  /* the synthetic row's length without extras, then the extras that align it */
  extra_t ex[8] = {{0, 0}};
  bitwriter_t w = {0};
  if (!synthetic_row(&w, h, dc, ex, 0)) return 0;
  int nex = align_extras(h, w.bits, bit, ex);
  if (nex < 0) return 0;
  size_t row_bits = w.bits + 32 * (size_t)nex;
  size_t need = h->data + 2 * (row_bits / 8 + 2) + 8;
  if (need > *cap) {
    uint8_t* q = rill__alloc(need);
    if (!q) return RILL_ENOMEM;
    rill__free(*head);
    *head = q, *cap = need;
  }
  int drop = ((k + 1) * m->step - 1) * m->mcu_h; /* rows the synthetic one stands for */
  uint8_t* o = *head;
  size_t len = write_head(o, p, h, m->width, m->height - drop);
  w = (bitwriter_t){.p = o, .n = len};
  if (!synthetic_row(&w, h, dc, ex, nex) || w.cnt != bit) return 0;
  /* the mark's byte: the row's last bits, then the bits the mark starts with */
  size_t rest = at;
  if (bit) {
    uint8_t byte = (uint8_t)((w.acc & ((1u << bit) - 1)) << (8 - bit) | (p[at] & ((1u << (8 - bit)) - 1)));
    o[w.n++] = byte;
    if (byte == 0xFF) o[w.n++] = 0;
    rest = at + 1 + (p[at] == 0xFF);
  }
  if (rest > n) return 0;
  *out = (rill__jpeg_seek_t){w.n, rest, drop};
  return 1;
}

/* ---------------------------------------------------------------- the cut */

/* MCUs a cut row's pad may take: one, or a few where the file's DC table (made for the image)
 * has no code for the difference the pad must set, which is then set in steps. */
#define CUT_PAD_MAX 16

/* The bytes of a cut row beyond those it copies: its `pad` MCUs (each at most 10 blocks of a
 * DC code and value and an end-of-block code: 54 bytes) and up to 8 extra AC codes (26
 * bytes), all stuffed at worst, and the two bytes merged at the span's ends. */
#define CUT_ROW_EXTRA(pad) (2 * ((size_t)(pad) * 54 + 26) + 4)

/* Splits the DC difference d into steps whose categories have codes (bit s of `codes`: the
 * table codes category s): the whole rest where its category has a code, else the largest
 * value of the largest category below it that has one, else the least of the next one above
 * (the rest then changes sign and shrinks). The steps' count (0 for d = 0), -1 when `max`
 * steps do not reach d. */
static int dc_steps(int32_t d, unsigned codes, int32_t* step, int max) {
  int n = 0;
  while (d != 0) {
    if (n == max) return -1;
    int s = category(d), t;
    int32_t a = d < 0 ? -d : d, v;
    if (codes >> s & 1) {
      v = a;
    } else {
      for (t = s - 1; t >= 1 && !(codes >> t & 1); t--) {}
      if (t >= 1) {
        v = ((int32_t)1 << t) - 1;
      } else {
        for (t = s + 1; t <= 11 && !(codes >> t & 1); t++) {}
        if (t > 11) return -1;
        v = (int32_t)1 << (t - 1);
      }
    }
    step[n++] = d < 0 ? -v : v;
    d -= d < 0 ? -v : v;
  }
  return n;
}

/* The blocks of scan component c in an MCU of `nb` blocks (comp: their components). */
static int blocks_of(const int* comp, int nb, int c) {
  int per = 0;
  for (int j = 0; j < nb; j++) per += comp[j] == c;
  return per;
}

/* The steps of dc_steps for scan component c's DC difference d, in `k` MCUs of `nb` blocks
 * (comp: their components); -1 when they do not hold them. */
static int component_steps(const jhead_t* h, const int* comp, int nb, int c, int32_t d, int k, int32_t* step) {
  unsigned codes = 0; /* bit s: the component's DC table codes category s */
  for (int s = 0; s <= 11; s++) codes |= (unsigned)(h->dc[h->td[c]].len[s] != 0) << s;
  return dc_steps(d, codes, step, blocks_of(comp, nb, c) * k);
}

/* A cut row's pad: `k` MCUs whose DC differences sum to diff[c] for each component (in the
 * steps of dc_steps over the component's blocks, in order), the extras in the last one. 0
 * when a code is missing or k MCUs do not hold the steps. */
static int write_pad(bitwriter_t* w, const jhead_t* h, const int* comp, int nb, const int32_t* diff, int k,
                     const extra_t* ex, int nex) {
  int32_t steps[3][10 * CUT_PAD_MAX];
  int nsteps[3] = {0, 0, 0}, used[3] = {0, 0, 0};
  for (int c = 0; c < h->ns; c++)
    if ((nsteps[c] = component_steps(h, comp, nb, c, diff[c], k, steps[c])) < 0) return 0;
  for (int x = 0; x < k; x++) {
    int32_t dcb[10];
    for (int j = 0; j < nb; j++) {
      int c = comp[j];
      dcb[j] = used[c] < nsteps[c] ? steps[c][used[c]] : 0;
      used[c]++;
    }
    if (!write_mcu(w, h, comp, nb, dcb, ex, x == k - 1 ? nex : 0)) return 0;
  }
  return 1;
}

/* The MCUs a cut row's pad takes: the fewest that hold the steps of every component (1 ..
 * CUT_PAD_MAX), 0 when none do. */
static int pad_mcus(const jhead_t* h, const int* comp, int nb, const int32_t* diff) {
  int k = 1;
  for (int c = 0; c < h->ns; c++) {
    int32_t steps[10 * CUT_PAD_MAX];
    int n = component_steps(h, comp, nb, c, diff[c], CUT_PAD_MAX, steps), per = blocks_of(comp, nb, c);
    if (n < 0) return 0;
    if ((n + per - 1) / per > k) k = (n + per - 1) / per;
  }
  return k;
}

/* The marks where row r's span of MCU columns [c0, c1) starts and ends (c1 = the row's
 * length: the next row's first MCU, or the data's end). */
static void row_span(const rill__jpeg_marks_t* m, int r, int c0, int c1, const mark_t** a, const mark_t** e) {
  const mark_t* cols = m->mark + m->count;
  size_t kc = m->col_count, cs = m->col_step;
  *a = &cols[(size_t)r * kc + (size_t)c0 / cs];
  *e = c1 < m->mcu_cols ? &cols[(size_t)r * kc + (size_t)c1 / cs] : &cols[(size_t)(r + 1) * kc];
}

/* Puts bits [from, to) of byte v (bit 0 the highest). */
static void put_bits_of(bitwriter_t* w, unsigned v, int from, int to) {
  if (to > from) put(w, (v >> (8 - to)) & ((1u << (to - from)) - 1), to - from);
}

int rill__jpeg_cut(const rill__jpeg_marks_t* m, const void* buf, size_t n, int x, int y, int w, int h, int sw,
                   int sh, int num, int denom, uint8_t** out, size_t* cap, rill__jpeg_cut_t* cut) {
  if (!m->cols_ready || x <= 0 || w <= 0 || h <= 0) return 0; /* a region at the left edge has no pad column */
  if ((m->mcu_w * num) % denom || (m->mcu_h * num) % denom) return 0;
  int smw = m->mcu_w * num / denom, smh = m->mcu_h * num / denom, mx = m->mcu_cols, my = m->mcu_rows;
  int cs = m->col_step;
  /* the MCUs of the region and one pixel around it (upsampling's context), in whole steps */
  int x1 = x + w < sw ? x + w : sw - 1, y0 = y > 0 ? y - 1 : 0, y1 = y + h < sh ? y + h : sh - 1;
  int m0 = (x - 1) / smw, m1 = x1 / smw;
  if (m1 > mx - 1) m1 = mx - 1;
  int c0 = m0 - m0 % cs, c1 = (m1 / cs + 1) * cs;
  if (c1 > mx) c1 = mx;
  int r0 = y0 / smh, r1 = y1 / smh;
  if (r1 > my - 1) r1 = my - 1;
  if (c0 == 0 && c1 == mx) return 0; /* nothing beside the region to leave out */
  jhead_t hd, *hp = &hd;
  const uint8_t* p = buf;
  if (!parse_head(p, n, hp) || hp->width != m->width || hp->height != m->height || hp->ns != m->ncomp) return 0;
  /* room: the head, each row's bytes with its pad, the end; and the pad's MCUs: as many as
   * the row that needs the most (the frame is one width) */
  int comp[10], nb = mcu_blocks(hp, comp), pad = 1;
  size_t need = hp->data + 16;
  const mark_t *a, *e;
  int32_t pred[3] = {0, 0, 0}; /* the decoder's DC predictions */
  for (int r = r0; r <= r1; r++) {
    row_span(m, r, c0, c1, &a, &e);
    if (a->at == UINT32_MAX || e->at == UINT32_MAX || e->at < a->at || (e->at >> 3) >= n) return 0;
    need += (e->at >> 3) - (a->at >> 3);
    int32_t diff[3] = {0, 0, 0};
    for (int c = 0; c < hp->ns; c++) diff[c] = a->dc[c] - pred[c], pred[c] = e->dc[c];
    int k = pad_mcus(hp, comp, nb, diff);
    if (k == 0) return 0;
    if (k > pad) pad = k;
  }
  need += (size_t)(r1 - r0 + 1) * CUT_ROW_EXTRA(pad);
  int width = (c1 < mx ? (c1 - c0) * m->mcu_w : m->width - c0 * m->mcu_w) + pad * m->mcu_w;
  int height = r1 < my - 1 ? (r1 - r0 + 1) * m->mcu_h : m->height - r0 * m->mcu_h;
  if (width > 65535) return 0;
  if (need > *cap) {
    uint8_t* q = rill__alloc(need);
    if (!q) return RILL_ENOMEM;
    rill__free(*out);
    *out = q, *cap = need;
  }
  bitwriter_t bw = {.p = *out, .n = write_head(*out, p, hp, width, height)};
  for (int c = 0; c < 3; c++) pred[c] = 0;
  for (int r = r0; r <= r1; r++) {
    row_span(m, r, c0, c1, &a, &e);
    /* the pad: sets the predictions the row's first MCU was coded against, and ends on the
     * bit of its byte where that MCU starts */
    int32_t diff[3] = {0, 0, 0};
    for (int c = 0; c < hp->ns; c++) diff[c] = a->dc[c] - pred[c];
    extra_t ex[8];
    bitwriter_t count = {0};
    if (!write_pad(&count, hp, comp, nb, diff, pad, ex, 0)) return 0;
    int at_bit = (int)(a->at & 7), nex = align_extras(hp, count.bits + (size_t)bw.cnt, at_bit, ex);
    if (nex < 0 || !write_pad(&bw, hp, comp, nb, diff, pad, ex, nex) || bw.cnt != at_bit) return 0;
    /* the row's bits, from a to e: the bytes between them as they are in the file */
    size_t ab = a->at >> 3, eb = e->at >> 3;
    int e_bit = (int)(e->at & 7);
    if (eb == ab) {
      put_bits_of(&bw, p[ab], at_bit, e_bit);
    } else {
      size_t from = ab;
      if (at_bit) {
        put_bits_of(&bw, p[ab], at_bit, 8);
        from = ab + 1 + (p[ab] == 0xFF);
      }
      if (eb > from) memcpy(bw.p + bw.n, p + from, eb - from), bw.n += eb - from;
      put_bits_of(&bw, p[eb], 0, e_bit);
    }
    for (int c = 0; c < 3; c++) pred[c] = e->dc[c];
  }
  if (bw.cnt) put(&bw, 0xFF, 8 - bw.cnt); /* fill bits */
  bw.p[bw.n++] = 0xFF, bw.p[bw.n++] = 0xD9;
  *cut = (rill__jpeg_cut_t){bw.n, (c0 - pad) * m->mcu_w, r0 * m->mcu_h, width, height};
  return 1;
}
