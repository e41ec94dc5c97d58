/* JPEG decoding through libjpeg-turbo's libjpeg API: DCT-domain scaling, crop-aware decoding
 * (jpeg_crop_scanline + jpeg_skip_scanlines), gray/RGB/RGBA output, CMYK and YCCK converted
 * to RGB. Errors and the warnings about damaged data ("Corrupt JPEG data: ...", premature end
 * of file) become RILL_EFORMAT through a setjmp/longjmp error manager, for the whole file
 * whatever the crop; once a file's bytes are verified, a crop starts at an entropy mark
 * (baseline files: a cut or a seek), or is decoded from the file's baseline copy made on its
 * first visit (files the marks cannot follow: progressive ones, ...), or reads each scan only
 * to a few rows below it (progressive files without a copy). Each thread keeps one
 * decompressor, one compressor for copies, and their buffers. */
#include <string.h>

#include "addon.h"
#include "image_internal.h"

#if RILL_HAVE_JPEG

#include <setjmp.h>
#include <stdio.h>

#include <jerror.h>
#include <jpeglib.h>

#define MAX_ROWS 16 /* scanlines asked of libjpeg per call */

typedef struct jpeg_state {
  struct jpeg_decompress_struct cinfo;
  struct jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
  uint8_t* rows;                 /* MAX_ROWS scratch scanlines */
  size_t rows_cap;
  uint8_t* head;                 /* the head of a seek's stream (rill__jpeg_seek) */
  size_t head_cap;
  struct source {                /* the stream: `first`, then `then` (a seek's rest) */
    struct jpeg_source_mgr pub;
    const uint8_t* then;
    size_t then_n;
    int part;                    /* 0: in `first`; 1: in `then`; 2: past the end */
    const uint8_t *next, *end;   /* checked reading (src_set): the rest of the part, in pieces */
    struct cut {                 /* a verified progressive file, its scans cut below the region */
      const uint8_t *base, *next, *end; /* the file; where the next piece of `first` starts */
      const uint32_t* scans;     /* [start, end) of each scan's entropy-coded data, by offset */
      int nscans, at;            /* scans; the first whose data does not end before `next` */
      unsigned need;             /* iMCU rows each scan must decode in full */
      int scan;                  /* input_scan_number of the scan last cut; 0: none yet */
    } cut;                       /* cut.base NULL: `first` is given whole */
  } src;
  uint32_t* scans;               /* the scan table of a cut */
  int64_t scans_cap;             /* in [start, end) pairs */
  int ready;                     /* cinfo was created */
  JHUFF_TBL std_dc[2], std_ac[2]; /* the standard Huffman tables (libjpeg's, see tables_forget) */
  int row_base;                  /* the file's MCU row of the decoded stream's row 0; -1 while
                                    no scan's data is read (for the place named in errors) */
  struct jpeg_compress_struct enc; /* writes copies (copy_make) */
  struct copy_dest {             /* into `copy`, grown up to `max` bytes */
    struct jpeg_destination_mgr pub;
    uint8_t* copy;
    int64_t cap, max;
  } dest;
  int enc_ready;                 /* enc was created */
} jpeg_state_t;

static void state_destroy(void* p) {
  jpeg_state_t* st = p;
  if (st->ready) jpeg_destroy_decompress(&st->cinfo);
  if (st->enc_ready) jpeg_destroy_compress(&st->enc);
  rill__free(st->dest.copy);
  rill__free(st->rows);
  rill__free(st->head);
  rill__free(st->scans);
}

/* ---- the source: bytes in memory in one or two parts. Past the end, like jpeg_mem_src, a
 * premature-end warning (an error here) and an end marker. */
static void src_init(j_decompress_ptr c) { (void)c; }

/* Bytes handed to libjpeg at a time while a cut is armed: it looks at the decoder's progress
 * only between pieces (a smaller piece decodes fewer rows past the cut, at one call each). */
#define CUT_PIECE 64

/* Bytes handed to libjpeg at a time by a checked reading (a file's first visit, not yet walked
 * to its end by rill). libjpeg-turbo takes its fast Huffman path only while 512 bytes a block
 * of an MCU are buffered (jdhuff.c), and that path takes a code its tables lack for a zero
 * without a warning; given under 512 bytes at a time it stays on its checked path, which warns
 * (an error here). The cost was measured at 1-4% of a whole decode. */
#define CHECKED_PIECE 511

/* The next piece of the part being read in pieces, if any is left. */
static int src_piece(struct source* s) {
  if (s->next >= s->end) return 0;
  size_t left = (size_t)(s->end - s->next), piece = left < CHECKED_PIECE ? left : CHECKED_PIECE;
  s->pub.next_input_byte = s->next;
  s->pub.bytes_in_buffer = piece;
  s->next += piece;
  return 1;
}

static boolean src_fill(j_decompress_ptr c) {
  struct source* s = (struct source*)c->src;
  struct cut* k = &s->cut;
  if (src_piece(s)) return TRUE;
  if (s->part == 0 && k->base && k->next < k->end) {
    /* A scan whose data goes on past `need` complete iMCU rows jumps to the marker after its
     * data: libjpeg finds the scan's data ended and leaves the blocks below as they are. */
    while (k->at < k->nscans && k->base + k->scans[2 * k->at + 1] <= k->next) k->at++;
    if (k->at < k->nscans && k->base + k->scans[2 * k->at] <= k->next && c->input_scan_number == k->at + 1 &&
        c->input_iMCU_row >= k->need) {
      k->next = k->base + k->scans[2 * k->at + 1];
      k->scan = c->input_scan_number;
    }
    size_t left = (size_t)(k->end - k->next), piece = left < CUT_PIECE ? left : CUT_PIECE;
    s->pub.next_input_byte = k->next;
    s->pub.bytes_in_buffer = piece;
    k->next += piece;
    return TRUE;
  }
  if (s->part == 0 && s->then_n) {
    s->part = 1;
    s->pub.next_input_byte = s->then;
    s->pub.bytes_in_buffer = s->then_n;
    if (s->end) { /* checked: in pieces too */
      s->next = s->then, s->end = s->then + s->then_n;
      src_piece(s);
    }
    return TRUE;
  }
  static const JOCTET eoi[2] = {0xFF, JPEG_EOI};
  s->part = 2;
  WARNMS(c, JWRN_JPEG_EOF);
  s->pub.next_input_byte = eoi;
  s->pub.bytes_in_buffer = 2;
  return TRUE;
}

static void src_skip(j_decompress_ptr c, long k) {
  struct source* s = (struct source*)c->src;
  while (k > 0 && (size_t)k > s->pub.bytes_in_buffer) {
    k -= (long)s->pub.bytes_in_buffer;
    s->pub.bytes_in_buffer = 0;
    int was = s->part;
    src_fill(c);
    if (was == 2) return;
  }
  if (k > 0) {
    s->pub.next_input_byte += k;
    s->pub.bytes_in_buffer -= (size_t)k;
  }
}

static void src_term(j_decompress_ptr c) { (void)c; }

/* The stream `first`, then `then`; `checked`: handed to libjpeg in pieces (CHECKED_PIECE). A
 * cut (arm_cut) is armed only on bytes given whole. */
static void src_set(jpeg_state_t* st, const uint8_t* first, size_t n, const uint8_t* then, size_t then_n,
                    int checked) {
  struct source* s = &st->src;
  s->pub = (struct jpeg_source_mgr){first, n, src_init, src_fill, src_skip, jpeg_resync_to_restart, src_term};
  s->then = then;
  s->then_n = then_n;
  s->part = 0;
  s->next = s->end = NULL;
  if (checked) {
    s->next = first, s->end = first + n;
    src_piece(s);
  }
  s->cut = (struct cut){0};
  st->row_base = -1;
  st->cinfo.src = &s->pub;
}

/* The entropy-coded data of each scan of the JPEG in buf: [start, end) offsets into
 * st->scans, 2 per scan; and in *smooth whether libjpeg will smooth blocks once every scan is
 * read (some component's coefficients 1..9 left short of full precision, or never sent: the
 * precision each scan's header leaves, as libjpeg tracks it; an unknown component counts as
 * smoothing). Returns the number of scans, 0 when the stream is not laid out as expected or
 * has restart intervals (a cut then does not apply), -1 when out of memory. */
static int scan_table(jpeg_state_t* st, const uint8_t* b, size_t n, int* smooth) {
  if (n < 4 || n > UINT32_MAX || b[0] != 0xFF || b[1] != 0xD8) return 0;
  const j_decompress_ptr c = &st->cinfo;
  int bits[MAX_COMPONENTS][10]; /* the Al each coefficient was last sent with; -1: never */
  memset(bits, 0xFF, sizeof bits);
  *smooth = 0;
  size_t i = 2;
  int count = 0;
  for (;;) {
    const uint8_t* h; /* the segment's parameters */
    size_t len;
    int m = rill__jpeg_segment(b, n, &i, &h, &len);
    if (m == JPEG_EOI) {
      for (int ci = 0; ci < c->num_components && ci < MAX_COMPONENTS; ci++)
        for (int k = 1; k < 10; k++) *smooth |= bits[ci][k] != 0;
      return count;
    }
    if (m == 0 || m == 0xDD /* DRI */ || (m >= JPEG_RST0 && m <= JPEG_RST0 + 7) || m == 0x01 || m == 0xD8) return 0;
    if (m != 0xDA) continue; /* SOS: its data runs to the next marker other than a stuffed 0xFF or RSTn */
    int ns = len >= 1 ? h[0] : 0;
    if (ns < 1 || len != (size_t)(4 + 2 * ns)) return 0;
    int ss = h[1 + 2 * ns], se = h[2 + 2 * ns], al = h[3 + 2 * ns] & 15;
    for (int j = 0; j < ns; j++) {
      int ci = 0;
      while (ci < c->num_components && c->comp_info[ci].component_id != h[1 + 2 * j]) ci++;
      if (ci >= c->num_components || ci >= MAX_COMPONENTS) {
        *smooth = 1;
        continue;
      }
      for (int k = ss; k <= se && k < 10; k++) bits[ci][k] = al;
    }
    size_t start = i;
    for (;;) {
      if (i >= n) return 0;
      const uint8_t* f = memchr(b + i, 0xFF, n - i);
      if (!f || (size_t)(f - b) + 1 >= n) return 0;
      i = (size_t)(f - b);
      uint8_t nx = b[i + 1];
      if (nx == 0x00 || (nx >= JPEG_RST0 && nx <= JPEG_RST0 + 7)) {
        i += 2;
        continue;
      }
      break;
    }
    uint32_t* q = rill__grow(st->scans, &st->scans_cap, count, count + 1, 2 * sizeof *q, 16); /* kept across files */
    if (!q) return -1;
    st->scans = q;
    st->scans[2 * count] = (uint32_t)start;
    st->scans[2 * count + 1] = (uint32_t)i;
    count++;
  }
}

/* one decompressor per thread, from the library's scratch registry */
static const rill__scratch_kind_t state_kind = {sizeof(jpeg_state_t), state_destroy};

static void on_error_exit(j_common_ptr cinfo) {
  jpeg_state_t* st = (jpeg_state_t*)cinfo->client_data;
  cinfo->err->format_message(cinfo, st->message);
  longjmp(st->jump, 1);
}

/* Warnings that mean the entropy-coded data is damaged: libjpeg would go on (padding with
 * gray, resynchronising at the next marker) and report success, hiding a corrupt file. */
static int corrupt_data_warning(int code) {
  switch (code) {
  case JWRN_JPEG_EOF:         /* Premature end of JPEG file */
  case JWRN_EXTRANEOUS_DATA:  /* Corrupt JPEG data: N extraneous bytes before marker */
  case JWRN_HIT_MARKER:       /* Corrupt JPEG data: premature end of data segment */
  case JWRN_HUFF_BAD_CODE:    /* Corrupt JPEG data: bad Huffman code */
  case JWRN_MUST_RESYNC:      /* Corrupt JPEG data: found marker instead of RST */
  case JWRN_NOT_SEQUENTIAL:   /* Invalid SOS parameters for sequential JPEG */
  case JWRN_BOGUS_PROGRESSION: /* Inconsistent progression sequence */
    return 1;
  default:
    return 0;
  }
}

static void on_emit_message(j_common_ptr cinfo, int level) {
  /* Warnings (level -1) about damaged data are errors; the others (unknown JFIF revision,
   * Adobe transform codes, ...) and trace messages are ignored. */
  if (level >= 0) return;
  jpeg_state_t* st = (jpeg_state_t*)cinfo->client_data;
  /* Once a scan was cut below the region (verified bytes), the blocks below `need` rows are
   * no longer decoded from the right data: the cut scan's data seems to end early, and a later
   * refinement scan reads correction bits for the coefficients it finds there, out of step
   * with its data (bad codes, data ending early or late). The rows above are not affected. */
  if (st->src.cut.scan && ((j_decompress_ptr)cinfo)->input_iMCU_row >= st->src.cut.need &&
      corrupt_data_warning(cinfo->err->msg_code))
    return;
  cinfo->err->format_message(cinfo, st->message);
  /* the arithmetic-code warning exists only in some libjpeg builds: known by its text */
  if (corrupt_data_warning(cinfo->err->msg_code) || strstr(st->message, "bad arithmetic code")) {
    if (cinfo->is_decompressor && st->row_base >= 0) { /* the place: the MCU row being read */
      j_decompress_ptr c = (j_decompress_ptr)cinfo;
      size_t k = strlen(st->message);
      int row = st->row_base + (int)c->input_iMCU_row;
      if (c->progressive_mode || c->input_scan_number > 1)
        snprintf(st->message + k, sizeof st->message - k, ", at scan %d, MCU row %d", c->input_scan_number, row);
      else
        snprintf(st->message + k, sizeof st->message - k, ", at MCU row %d", row);
    }
    longjmp(st->jump, 1);
  }
}

static void on_output_message(j_common_ptr cinfo) { (void)cinfo; }

#if defined(__GNUC__)
__attribute__((noinline))
#endif
static jpeg_state_t* state_get(rill_error_t* err) {
  jpeg_state_t* st = rill__scratch(&state_kind);
  if (st && st->ready) return st;
  if (!st) {
    rill_error_set(err, RILL_ENOMEM, "out of memory (JPEG decoder state)");
    return NULL;
  }
  memset(&st->cinfo, 0, sizeof st->cinfo);
  st->cinfo.err = jpeg_std_error(&st->mgr);
  st->mgr.error_exit = on_error_exit;
  st->mgr.emit_message = on_emit_message;
  st->mgr.output_message = on_output_message;
  st->cinfo.client_data = st;
  if (setjmp(st->jump)) { /* jpeg_create_decompress fails only when out of memory */
    rill_error_set(err, RILL_ENOMEM, "out of memory (JPEG decoder state)");
    return NULL;
  }
  jpeg_create_decompress(&st->cinfo);
  /* the standard Huffman tables, as libjpeg's compressor sets them by default */
  struct jpeg_compress_struct e;
  memset(&e, 0, sizeof e);
  e.err = &st->mgr;
  e.client_data = st;
  jpeg_create_compress(&e);
  e.in_color_space = JCS_RGB;
  e.input_components = 3;
  jpeg_set_defaults(&e);
  for (int i = 0; i < 2; i++) st->std_dc[i] = *e.dc_huff_tbl_ptrs[i], st->std_ac[i] = *e.ac_huff_tbl_ptrs[i];
  jpeg_destroy_compress(&e);
  st->ready = 1;
  return st;
}

/* libjpeg keeps the tables of the streams it read before (for abbreviated streams), so a file
 * that lacks one would be decoded with another file's table: whichever the thread decoded
 * last. Before each header the decompressor's tables are put back as a new one has them, in
 * the room they already have: quantization tables all zero (which no table of a file holds;
 * quant_undefined fails a file that used one), Huffman tables 0 and 1 the standard ones
 * (libjpeg-turbo gives a stream without them those, as Motion-JPEG frames need), 2 and 3
 * without codes (any code read with them is bad). */
static void tables_forget(jpeg_state_t* st) {
  j_decompress_ptr c = &st->cinfo;
  for (int i = 0; i < NUM_QUANT_TBLS; i++)
    if (c->quant_tbl_ptrs[i]) memset(c->quant_tbl_ptrs[i]->quantval, 0, sizeof c->quant_tbl_ptrs[i]->quantval);
  for (int i = 0; i < NUM_HUFF_TBLS; i++) {
    JHUFF_TBL none = {{0}, {0}, FALSE};
    if (c->dc_huff_tbl_ptrs[i]) *c->dc_huff_tbl_ptrs[i] = i < 2 ? st->std_dc[i] : none;
    if (c->ac_huff_tbl_ptrs[i]) *c->ac_huff_tbl_ptrs[i] = i < 2 ? st->std_ac[i] : none;
  }
}

/* The header of the stream set, read with the tables of no other stream. */
static void header_read(jpeg_state_t* st) {
  tables_forget(st);
  jpeg_read_header(&st->cinfo, TRUE);
}

/* After the scans began (jpeg_start_decompress, jpeg_read_coefficients): -1 when a component
 * read a quantization table its file does not define (all zero: see tables_forget), else 0
 * and *which is unused. */
static int quant_undefined(j_decompress_ptr c, int* which) {
  for (int ci = 0; ci < c->num_components; ci++) {
    const JQUANT_TBL* q = c->comp_info[ci].quant_table;
    if (!q) continue; /* a component no scan has reached */
    int any = 0;
    for (int k = 0; k < DCTSIZE2; k++) any |= q->quantval[k];
    if (!any) {
      *which = c->comp_info[ci].quant_tbl_no;
      return -1;
    }
  }
  return 0;
}

static int rows_reserve(jpeg_state_t* st, size_t bytes, rill_error_t* err) {
  if (rill__img_grow(&st->rows, &st->rows_cap, bytes)) return RILL_OK;
  return rill_error_set(err, RILL_ENOMEM, "out of memory (%zu bytes of JPEG scanlines)", bytes);
}

/* Stored channels of a JPEG by its color space. */
static int stored_channels(const struct jpeg_decompress_struct* c) { return c->num_components; }

/* CMYK scanline -> RGB / gray / RGBA. Adobe files store inverted CMYK (255 = no ink). */
static void convert_cmyk(const uint8_t* src, uint8_t* dst, int w, int channels, int inverted) {
  for (int i = 0; i < w; i++, src += 4) {
    int c = src[0], m = src[1], y = src[2], k = src[3];
    if (!inverted) {
      c = 255 - c;
      m = 255 - m;
      y = 255 - y;
      k = 255 - k;
    }
    int r = (c * k + 127) / 255, g = (m * k + 127) / 255, b = (y * k + 127) / 255;
    if (channels == 1) {
      *dst++ = rill__img_luma(r, g, b);
    } else {
      dst[0] = (uint8_t)r;
      dst[1] = (uint8_t)g;
      dst[2] = (uint8_t)b;
      if (channels == 4) dst[3] = 255;
      dst += channels;
    }
  }
}

/* A progressive file is read whole by jpeg_start_decompress, every scan to the image's last
 * row. For bytes verified to their end, each scan may stop below the region: at the region's
 * last iMCU row, the next one when the chroma is upsampled vertically (libjpeg's context
 * rows), and when the blocks will be smoothed (a progression that leaves coefficients short
 * of full precision) two more (the smoothing reads two block rows below: one iMCU row of a
 * component sampled once vertically). Arms the cut when that leaves rows out; called after
 * jpeg_read_header, with the output scale set. */
static int arm_cut(jpeg_state_t* st, const uint8_t* buf, size_t n, const rill__img_geom_t* g) {
  j_decompress_ptr c = &st->cinfo;
  if (c->restart_interval) return RILL_OK;
  jpeg_calc_output_dimensions(c);
#if JPEG_LIB_VERSION >= 70
  int rows = c->max_v_samp_factor * c->min_DCT_v_scaled_size;
#else
  int rows = c->max_v_samp_factor * c->min_DCT_scaled_size;
#endif
  if (rows < 1) return RILL_OK;
  unsigned need = (unsigned)((g->y + g->h - 1) / rows) + 1 + (c->max_v_samp_factor > 1);
  if (need >= c->total_iMCU_rows) return RILL_OK;
  int smooth = 0, nscans = scan_table(st, buf, n, &smooth);
  if (nscans <= 0) return nscans < 0 ? RILL_ENOMEM : RILL_OK;
  if (smooth && c->do_block_smoothing) need += 2;
  if (need >= c->total_iMCU_rows) return RILL_OK;
  struct source* s = &st->src;
  const uint8_t* at = s->pub.next_input_byte;
  if (at < buf || at > buf + n) return RILL_OK;
  s->cut = (struct cut){buf, at, buf + n, st->scans, nscans, 0, need, 0};
  /* from here on the rest of the file is handed over in pieces */
  size_t left = s->pub.bytes_in_buffer, piece = left < CUT_PIECE ? left : CUT_PIECE;
  s->pub.bytes_in_buffer = piece;
  s->cut.next = at + piece;
  return RILL_OK;
}

/* ---- copies. A file whose entropy-coded data the marks cannot follow (progressive or
 * arithmetic coding, restart intervals, several scans) is entropy-decoded whole by every
 * region, in every epoch: a progressive file costs more than twice a baseline one. On its
 * first visit its coefficients are read (jpeg_read_coefficients: every scan, to the end
 * marker, with the errors of a decode) and written again as one baseline scan with the
 * standard Huffman tables (jpeg_write_coefficients: the same coefficients, quantization
 * tables, sampling and color space, so every region decodes to the same pixels); the copy
 * then has marks and cuts like any baseline file. Not made where a decode of the file would
 * differ: block smoothing (a progression that leaves coefficients 0..9 short of full
 * precision), color spaces other than YCbCr and gray, other sample precisions. */

static void copy_start(j_compress_ptr c) {
  struct copy_dest* d = (struct copy_dest*)c->dest;
  d->pub.next_output_byte = d->copy;
  d->pub.free_in_buffer = (size_t)(d->cap < d->max ? d->cap : d->max);
}

static boolean copy_more(j_compress_ptr c) {
  struct copy_dest* d = (struct copy_dest*)c->dest;
  int64_t used = d->pub.next_output_byte - d->copy;
  if (used >= d->max) ERREXIT(c, JERR_FILE_WRITE); /* larger than the room for it */
  uint8_t* q = rill__grow(d->copy, &d->cap, used, used + 1, 1, 4096);
  if (!q) ERREXIT(c, JERR_FILE_WRITE);
  d->copy = q;
  d->pub.next_output_byte = q + used;
  d->pub.free_in_buffer = (size_t)((d->cap < d->max ? d->cap : d->max) - used);
  return TRUE;
}

static void copy_end(j_compress_ptr c) { (void)c; }

/* A progressive Huffman file of n bytes that cannot hold its blocks (each costs at least one
 * bit per scan): truncated. After its header. */
static int too_small_for_blocks(j_decompress_ptr c, size_t n) {
  if (!c->progressive_mode || c->arith_code) return 0;
  uint64_t blocks = 0;
  for (int ci = 0; ci < c->num_components; ci++)
    blocks += (uint64_t)c->comp_info[ci].width_in_blocks * c->comp_info[ci].height_in_blocks;
  return (uint64_t)n * 8 < blocks;
}

/* Does the file need a copy, and would the copy decode as the file does? After its header
 * (a truncated file gets none: its decode says so). */
static int copy_wanted(j_decompress_ptr c, size_t n) {
  if (c->data_precision != 8 || c->total_iMCU_rows < 2) return 0;
  if (!(c->progressive_mode || c->arith_code || c->restart_interval || c->comps_in_scan < c->num_components)) return 0;
  if (c->num_components == 1) /* one component: marks need 1x1 sampling */
    return c->jpeg_color_space == JCS_GRAYSCALE && c->comp_info[0].h_samp_factor == 1 &&
           c->comp_info[0].v_samp_factor == 1;
  return c->num_components == 3 && c->jpeg_color_space == JCS_YCbCr && !too_small_for_blocks(c, n);
}

/* 1 when every coefficient read fits the baseline Huffman coding of 8-bit samples (DC within
 * -1024..1023, AC within -1023..1023, as the DCT of 8-bit samples gives): libjpeg-turbo's
 * encoder writes others wrongly without an error, and damaged data (arithmetic coding can
 * carry any 16-bit value) can hold them. */
static int coefs_codable(j_decompress_ptr c, jvirt_barray_ptr* coefs) {
  for (int ci = 0; ci < c->num_components; ci++) {
    const jpeg_component_info* comp = &c->comp_info[ci];
    for (JDIMENSION r = 0; r < comp->height_in_blocks; r++) {
      JBLOCKARRAY row = (*c->mem->access_virt_barray)((j_common_ptr)c, coefs[ci], r, 1, FALSE);
      for (JDIMENSION x = 0; x < comp->width_in_blocks; x++) {
        const JCOEF* b = row[0][x];
        int bad = b[0] < -1024 || b[0] > 1023;
        for (int k = 1; k < DCTSIZE2; k++) bad |= b[k] < -1023 || b[k] > 1023;
        if (bad) return 0;
      }
    }
  }
  return 1;
}

/* The copy of the file in buf with its marks (every column mark that fits in `max` bytes
 * with it), walked and found intact, in *out: 1. 0: no copy (not wanted, larger than max,
 * damaged data, out of memory): the file is decoded as it is, with that decode's errors. */
static int copy_make(jpeg_state_t* st, const uint8_t* buf, size_t n, int64_t max, rill__jpeg_marks_t** out) {
  j_decompress_ptr c = &st->cinfo;
  j_compress_ptr e = &st->enc;
  if (setjmp(st->jump)) {
    if (st->enc_ready) jpeg_abort_compress(e);
    jpeg_abort_decompress(c);
    return 0;
  }
  if (!st->enc_ready) {
    memset(e, 0, sizeof *e);
    e->err = &st->mgr;
    e->client_data = st;
    jpeg_create_compress(e);
    st->dest.pub = (struct jpeg_destination_mgr){NULL, 0, copy_start, copy_more, copy_end};
    st->enc_ready = 1;
  }
  src_set(st, buf, n, NULL, 0, 1);
  header_read(st);
  st->row_base = 0;
  if (!copy_wanted(c, n)) {
    jpeg_abort_decompress(c);
    return 0;
  }
  jvirt_barray_ptr* coefs = jpeg_read_coefficients(c);
  int qt;
  if (quant_undefined(c, &qt) < 0 || !coefs_codable(c, coefs)) { /* the file is decoded as it is */
    jpeg_abort_decompress(c);
    return 0;
  }
  for (int ci = 0; c->progressive_mode && ci < c->num_components; ci++)
    for (int k = 0; k < 10; k++)
      if (c->coef_bits[ci][k] != 0) { /* libjpeg would smooth the blocks */
        jpeg_abort_decompress(c);
        return 0;
      }
  st->dest.max = max;
  int64_t first = (int64_t)(n + n / 4 + 4096);
  if (st->dest.cap < first && st->dest.cap < max) {
    uint8_t* q = rill__grow(st->dest.copy, &st->dest.cap, 0, first < max ? first : max, 1, 4096);
    if (!q) longjmp(st->jump, 1);
    st->dest.copy = q;
  }
  e->dest = &st->dest.pub;
  jpeg_copy_critical_parameters(c, e);
  e->optimize_coding = FALSE; /* the standard tables: every code a cut's pad may need */
  jpeg_write_coefficients(e, coefs);
  jpeg_finish_compress(e);
  jpeg_abort_decompress(c);
  size_t len = (size_t)(st->dest.pub.next_output_byte - st->dest.copy);
  int64_t left = max - (int64_t)len;
  rill__jpeg_marks_t* m = left > 0 ? rill__jpeg_marks_hold(st->dest.copy, len, rill__jpeg_col_marks_within(left)) : NULL;
  size_t held;
  const uint8_t* copy = rill__jpeg_marks_stream(m, &held);
  if (!copy || rill__jpeg_marks_walk_all(m, copy, held) != 2) {
    rill__free(m);
    return 0;
  }
  *out = m;
  return 1;
}

/* The error of a file whose entropy-coded data rill's walk found damaged. libjpeg-turbo's
 * fast Huffman decoder (most of a file's MCUs) takes a code its tables lack for a zero
 * without a warning, so this is said here, the same for every crop of the file. */
static int damaged(rill_error_t* err, int row, int col) {
  return rill_error_set(err, RILL_EFORMAT,
                        "corrupt JPEG data (MCU row %d, column %d: a Huffman code the file's tables lack, or a DC "
                        "value out of range)", row, col);
}

/* Reads the header of the JPEG in buf and, unless `probe` is set (then it receives the
 * header's facts and nothing is decoded), decodes the requested region into dst. libjpeg's
 * errors come back through setjmp, which must stay in this function. */
static int jpeg_run(const void* buf, size_t n, const rill__img_request_t* req, uint8_t* dst, size_t dst_size,
                    rill__img_out_t* out, rill__img_info_t* probe, rill_error_t* err) {
  jpeg_state_t* st = state_get(err);
  if (!st) return RILL_ENOMEM;
  j_decompress_ptr c = &st->cinfo;
  if (setjmp(st->jump)) {
    jpeg_abort_decompress(c);
    return rill_error_set(err, RILL_EFORMAT, "corrupt JPEG %s (%s)", probe ? "header" : "data", st->message);
  }
  rill__img_info_t info;
  rill__img_geom_t g, d; /* g: the region in the image; d: the same in the stream decoded */
  int rc, seek = 0, sw = 0, sh = 0; /* seek: the stream is a seek's (1) or a cut (2), of sw x sh */
  rill__jpeg_seek_t sk = {0};
  rill__jpeg_marks_t* marks = probe ? NULL : req->tail_verified ? req->marks : NULL;
  int verified = !probe && req->tail_verified; /* the entropy-coded data is known to be intact */
  if (!probe && !req->tail_verified && req->marks_out) {
    marks = *req->marks_out; /* made by rill__jpeg_decode */
    /* The first decode of a file finds all its marks at once (the column marks need a walk
     * through every row), unless the whole image is wanted. The walk decodes every block as
     * libjpeg would: when it finds the data intact to the end marker, the check of the
     * file's rows below the region (below) is done already. */
    if (marks && req->w && req->h) verified = rill__jpeg_marks_walk_all(marks, buf, n) == 2;
  }
  if (marks && req->w && req->h) {
    info.format = RILL__IMG_JPEG;
    rill__jpeg_marks_size(marks, &info.width, &info.height, &info.channels);
    if ((rc = rill__img_geometry(&info, req, &g, err)) < 0) return rc;
    d = g;
    rill__jpeg_cut_t ct;
    /* verified bytes: only the MCUs around the region (see rill__jpeg_cut) */
    if (verified && rill__jpeg_marks_have_columns(marks)) {
      rc = rill__jpeg_cut(marks, buf, n, g.x, g.y, g.w, g.h, g.sw, g.sh, g.num, g.denom, &st->head, &st->head_cap,
                          &ct);
      if (rc < 0) return rill_error_set(err, rc, "out of memory (JPEG cut)");
      if (rc == 1) {
        seek = 2, sw = ct.width, sh = ct.height;
        d.x -= ct.left * g.num / g.denom, d.y -= ct.top * g.num / g.denom;
        d.sw = (int)(((int64_t)sw * g.num + g.denom - 1) / g.denom);
        d.sh = (int)(((int64_t)sh * g.num + g.denom - 1) / g.denom);
        src_set(st, st->head, ct.len, NULL, 0, 0);
      }
    }
    /* else start at the last entropy mark above the region (walking to it if it is not known
     * yet: the walk reads those rows in place of libjpeg, and checks them as strictly) */
    if (!seek && req->y > 0) {
      rc = rill__jpeg_seek(marks, buf, n, g.y, g.num, g.denom, &st->head, &st->head_cap, &sk);
      if (rc < 0) return rill_error_set(err, rc, "out of memory (JPEG seek)");
      if (rc == 1) {
        seek = 1, sw = info.width, sh = info.height - sk.drop;
        int drop = (int)((int64_t)sk.drop * g.num / g.denom); /* rows (scaled) above the stream */
        d.y -= drop, d.sh -= drop;
        src_set(st, st->head, sk.head, (const uint8_t*)buf + sk.rest, n - sk.rest, !verified);
      }
    }
  }
  /* damage a walk met (through the file, or to the seek's mark) decides a file's first visit;
   * a file verified then keeps that verdict */
  int bad_row, bad_col;
  if (marks && !req->tail_verified && rill__jpeg_marks_damaged(marks, &bad_row, &bad_col))
    return damaged(err, bad_row, bad_col);
  /* Bytes not known intact to their end are read by libjpeg's checked path (CHECKED_PIECE) */
  if (!seek) src_set(st, buf, n, NULL, 0, !verified);
  header_read(st);
  /* errors name the file's MCU row (a seek's stream starts `drop` rows down; a cut's is
   * verified) */
  st->row_base = seek == 2 ? -1 : seek ? sk.drop / (DCTSIZE * c->max_v_samp_factor) : 0;
  if (seek) {
    if ((int)c->image_width != sw || (int)c->image_height != sh || c->num_components != info.channels ||
        c->progressive_mode) {
      jpeg_abort_decompress(c);
      return rill_error_set(err, RILL_EFORMAT, "JPEG %s produced a %ux%u image, expected %dx%d",
                            seek == 2 ? "cut" : "seek", c->image_width, c->image_height, sw, sh);
    }
  } else {
    info = (rill__img_info_t){RILL__IMG_JPEG, (int)c->image_width, (int)c->image_height, stored_channels(c)};
    if (probe) {
      *probe = info;
      jpeg_abort_decompress(c);
      return RILL_OK;
    }
    if ((rc = rill__img_geometry(&info, req, &g, err)) < 0) {
      jpeg_abort_decompress(c);
      return rc;
    }
    d = g;
  }
  /* A progressive file is decoded into whole-image coefficient buffers allocated (and
   * zeroed) before any data is read. Each block costs at least one Huffman-coded bit per
   * scan, so a file too small for its blocks is truncated: reject it before that cost. */
  if (too_small_for_blocks(c, n)) {
    jpeg_abort_decompress(c);
    return rill_error_set(err, RILL_EFORMAT, "truncated JPEG data (%zu bytes cannot hold a %dx%d progressive image)",
                          n, info.width, info.height);
  }
  int channels = req->channels;
  rc = rill__img_dst_fits(&g, channels, dst_size, err);
  if (rc < 0) {
    jpeg_abort_decompress(c);
    return rc;
  }

  int cmyk = c->jpeg_color_space == JCS_CMYK || c->jpeg_color_space == JCS_YCCK;
  int ocomps;
  if (cmyk) {
    c->out_color_space = JCS_CMYK;
    ocomps = 4;
  } else if (c->num_components != 1 && c->num_components != 3) {
    jpeg_abort_decompress(c);
    return rill_error_set(err, RILL_ENOTSUP, "JPEG with %d color components is not supported",
                          c->num_components);
  } else {
    c->out_color_space = channels == 1 ? JCS_GRAYSCALE : channels == 3 ? JCS_RGB : JCS_EXT_RGBA;
    ocomps = channels;
  }
  c->scale_num = (unsigned)g.num;
  c->scale_denom = (unsigned)g.denom;
  if (req->tail_verified && c->progressive_mode && !c->arith_code && !seek && (rc = arm_cut(st, buf, n, &d)) < 0) {
    jpeg_abort_decompress(c);
    return rill_error_set(err, rc, "out of memory (JPEG scan table)");
  }
  jpeg_start_decompress(c);
  int qt; /* on a file's first visit (a later one's tables are those the first found defined) */
  if (!req->tail_verified && quant_undefined(c, &qt) < 0) {
    jpeg_abort_decompress(c);
    return rill_error_set(err, RILL_EFORMAT, "corrupt JPEG data (quantization table %d is not defined in the file)",
                          qt);
  }
  if ((int)c->output_width != d.sw || (int)c->output_height != d.sh) {
    jpeg_abort_decompress(c);
    return rill_error_set(err, RILL_EFORMAT, "JPEG decoder produced %ux%u pixels, expected %dx%d",
                          c->output_width, c->output_height, d.sw, d.sh);
  }

  /* Crop: libjpeg moves the left edge down to an iMCU boundary; copy out the exact columns.
   * Chroma upsampling replicates the samples at the edges of the decoded range, so the right
   * edge (inside the image) and a left edge on an iMCU boundary are moved out by one column:
   * the region's edge pixels then get their real neighbours and equal those of a
   * whole-image decode. */
  int colskip = 0, cw = d.sw;
  if (d.x > 0 || d.w < d.sw) {
#if JPEG_LIB_VERSION >= 70
    int align = c->min_DCT_h_scaled_size;
#else
    int align = c->min_DCT_scaled_size;
#endif
    if (c->num_components > 1) align *= c->max_h_samp_factor;
    if (align < 1) align = 1;
    int x0 = d.x, x1 = d.x + d.w;
    if (x0 > 0 && x0 % align == 0) x0--;
    if (x1 < d.sw) x1++;
    JDIMENSION xoff = (JDIMENSION)x0, width = (JDIMENSION)(x1 - x0);
    jpeg_crop_scanline(c, &xoff, &width);
    colskip = d.x - (int)xoff;
    cw = (int)width;
  }
  if (d.y > 0 && jpeg_skip_scanlines(c, (JDIMENSION)d.y) != (JDIMENSION)d.y) {
    jpeg_abort_decompress(c);
    return rill_error_set(err, RILL_EFORMAT, "corrupt JPEG data (could not skip %d rows)", g.y);
  }

  /* Rows go straight to dst unless they need converting (CMYK) or cutting (a crop whose
   * columns libjpeg widened, when the caller wants packed rows or the padding would not fit) */
  size_t stride = (size_t)g.w * (size_t)channels;
  int direct = !cmyk && colskip == 0 && cw == g.w;
  if (!cmyk && !direct && req->padded && cw - g.w <= RILL__IMG_PAD_COLS &&
      (size_t)cw * (size_t)g.h * (size_t)channels <= dst_size) {
    direct = 1;
    stride = (size_t)cw * (size_t)channels;
  }
  int xoff = direct ? colskip : 0; /* where the region starts in each row of dst */
  if (!direct && (rc = rows_reserve(st, (size_t)MAX_ROWS * (size_t)cw * (size_t)ocomps, err)) < 0) {
    jpeg_abort_decompress(c);
    return rc;
  }
  JSAMPROW ptrs[MAX_ROWS];
  int row = 0;
  while (row < g.h) {
    int want = g.h - row < MAX_ROWS ? g.h - row : MAX_ROWS;
    for (int k = 0; k < want; k++)
      ptrs[k] = direct ? dst + (size_t)(row + k) * stride
                       : st->rows + (size_t)k * (size_t)cw * (size_t)ocomps;
    int got = (int)jpeg_read_scanlines(c, ptrs, (JDIMENSION)want);
    if (got <= 0) {
      jpeg_abort_decompress(c);
      return rill_error_set(err, RILL_EFORMAT, "corrupt JPEG data (no scanline at row %d)", g.y + row);
    }
    if (!direct) {
      for (int k = 0; k < got; k++) {
        const uint8_t* src = ptrs[k] + (size_t)colskip * (size_t)ocomps;
        uint8_t* d = dst + (size_t)(row + k) * stride;
        if (cmyk)
          convert_cmyk(src, d, g.w, channels, c->saw_Adobe_marker);
        else
          memcpy(d, src, stride);
      }
    }
    row += got;
  }
  /* The rows below a crop are checked too, so that a damaged file fails whatever the crop
   * (the same file in every epoch): they are entropy-decoded without the inverse DCT
   * (jpeg_skip_scanlines), the last one is decoded, and finishing reads to the end marker.
   * Progressive files were read whole by jpeg_start_decompress. Bytes already verified to
   * their end (req->tail_verified, or the first decode's walk through the whole file) cannot
   * fail there: the decoder stops after the region (and does not look for the end marker
   * again: the first check of the file decided), and a progressive file's scans stopped a few
   * rows below it (arm_cut). */
  if (verified) {
    jpeg_abort_decompress(c);
    if (out) *out = (rill__img_out_t){g.w, g.h, channels, g.denom, g.num, xoff, (int64_t)stride};
    return RILL_OK;
  }
  if (c->output_scanline < c->output_height) {
    JDIMENSION left = c->output_height - c->output_scanline;
    if (left > 1 && jpeg_skip_scanlines(c, left - 1) != left - 1) {
      jpeg_abort_decompress(c);
      return rill_error_set(err, RILL_EFORMAT, "corrupt JPEG data (could not skip to the last row)");
    }
    if ((rc = rows_reserve(st, (size_t)cw * (size_t)ocomps, err)) < 0) {
      jpeg_abort_decompress(c);
      return rc;
    }
    JSAMPROW last = st->rows;
    if (jpeg_read_scanlines(c, &last, 1) != 1) {
      jpeg_abort_decompress(c);
      return rill_error_set(err, RILL_EFORMAT, "corrupt JPEG data (no scanline at the last row)");
    }
  }
  jpeg_finish_decompress(c); /* reads to the end marker: a truncated tail is an error */
  if (out) *out = (rill__img_out_t){g.w, g.h, channels, g.denom, g.num, xoff, (int64_t)stride};
  return RILL_OK;
}

/* libjpeg-turbo's fast Huffman path takes 0xFF bytes followed by 0xFF (fill bytes, which the
 * standard allows before markers only) in entropy-coded data for a marker, and leaves the MCU
 * to its checked path with the coefficients it already wrote into the block; the checked path
 * skips them as fill. The two decode such data differently, both without a warning, so a
 * file's verdict and pixels would depend on which path met it. The offset of the first 0xFF
 * of fill bytes before a stuffed zero in the data of any scan, or -1 (also for a file not
 * laid out as expected: libjpeg judges it). */
static int64_t fill_before_stuffing(const uint8_t* p, size_t n) {
  size_t i = 2;
  for (;;) {
    const uint8_t* h;
    size_t len;
    int m = rill__jpeg_segment(p, n, &i, &h, &len);
    if (m == 0 || m == JPEG_EOI) return -1;
    if (m != 0xDA) continue;
    while (i + 1 < n) { /* a scan's data, to the marker after it */
      const uint8_t* q = memchr(p + i, 0xFF, n - 1 - i);
      if (!q) return -1;
      size_t at = (size_t)(q - p), j = at + 1;
      while (j < n && p[j] == 0xFF) j++;
      if (j >= n) return -1;
      if (p[j] == 0x00 && j > at + 1) return (int64_t)at;
      if (p[j] == 0x00 || (p[j] >= JPEG_RST0 && p[j] <= JPEG_RST0 + 7)) { /* a stuffed zero, a restart marker */
        i = j + 1;
        continue;
      }
      i = j - 1; /* the marker after the data */
      break;
    }
  }
}

int rill__jpeg_probe(const void* buf, size_t n, rill__img_info_t* info, rill_error_t* err) {
  return jpeg_run(buf, n, NULL, NULL, 0, NULL, info, err);
}

int rill__jpeg_decode(const void* buf, size_t n, const rill__img_request_t* req, uint8_t* dst,
                      size_t dst_size, rill__img_out_t* out, rill_error_t* err) {
  size_t held;
  const uint8_t* copy = req->tail_verified ? rill__jpeg_marks_stream(req->marks, &held) : NULL;
  if (copy) /* the file's copy, made on its first visit */
    return jpeg_run(copy, held, req, dst, dst_size, out, NULL, err);
  if (!req->tail_verified) { /* a file's first visit, or a decode of bytes not known intact */
    int64_t fill = fill_before_stuffing(buf, n);
    if (fill >= 0)
      return rill_error_set(err, RILL_EFORMAT, "corrupt JPEG data (0xFF fill bytes before a stuffed zero at byte %lld)",
                            (long long)fill);
  }
  if (req->tail_verified || !req->marks_out) return jpeg_run(buf, n, req, dst, dst_size, out, NULL, err);
  /* a file's first visit: its marks, or a copy with marks (whose decode of the region then
   * stands for the file's: the copy was made from a read of every scan to the end marker) */
  rill__jpeg_marks_t* m = *req->marks_out = rill__jpeg_marks_new(buf, n, req->col_marks);
  if (!m && req->w && req->h && req->copy_max > 0) {
    jpeg_state_t* st = state_get(err);
    if (!st) return RILL_ENOMEM;
    if (copy_make(st, buf, n, req->copy_max, &m)) {
      rill__img_request_t r = *req;
      r.tail_verified = 1, r.marks = m, r.marks_out = NULL;
      int rc = rill__jpeg_decode(buf, n, &r, dst, dst_size, out, err); /* decodes the copy */
      if (rc < 0) {
        rill__free(m);
        return rc;
      }
      *req->marks_out = m;
      return rc;
    }
  }
  return jpeg_run(buf, n, req, dst, dst_size, out, NULL, err);
}

#endif
