/* `rill head`: print the first rows of a CSV file, of a SQLite query or of the samples of
 * tar archives. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "rill.h"
#include "rill_addons.h"

static const char* head_usage =
    "usage: rill head FILE.csv [FILE.csv ...] [options]\n"
    "       rill head DB.sqlite \"SELECT ...\" | TABLE [options]\n"
    "       rill head SHARD.tar [SHARD.tar ...] [--dtype EXT=TYPE ...] [options]\n"
    "Prints the first rows as an aligned table (nulls shown as NULL). Several CSV files with\n"
    "the same columns are read as one table, one file after another; tar archives give one\n"
    "row per sample (members KEY.EXT: columns key, path and one per extension). A CSV or tar\n"
    "path that names no file is expanded as a brace pattern ('shards/train-{000..009}.tar',\n"
    "'part-{a,b}.csv'), as WebDataset's shard lists are.\n"
    "options:\n"
    "  -n N               rows to print (default 10)\n"
    "  --all              print every row\n"
    "  --format F         table (default), tsv or json (one JSON array per line; the first\n"
    "                     line holds the column names)\n"
    "  --delimiter C      CSV field delimiter (default ','; 'tab' or '\\t' for a tab)\n"
    "  --quote C          CSV quote character (default '\"')\n"
    "  --skip-lines N     leave out the first N lines of the CSV file (a preamble before\n"
    "                     the header), whatever they hold\n"
    "  --no-header        the CSV file has no header row\n"
    "  --no-infer         read every CSV column as a string\n"
    "  --skip-bad-rows    leave out CSV rows with a wrong number of fields\n"
    "  --trim             drop spaces and tabs around CSV fields (a quote after them opens\n"
    "                     a quoted field); skip lines of only spaces and tabs\n"
    "  --comment C        skip CSV lines that start with C (e.g. '#')\n"
    "  --escape C         CSV escape character: C makes the next character text (e.g. '\\')\n"
    "  --null TEXT        read CSV fields equal to TEXT as null (repeatable: --null NA --null ?;\n"
    "                     with --encoding latin-1, UTF-8 TEXT is matched as Latin-1)\n"
    "  --decimal C        decimal separator of CSV floats (e.g. ',' with --delimiter ';')\n"
    "  --dtype EXT=TYPE   read the tar members of extension EXT as TYPE (string, int64,\n"
    "                     float64, bool, ...; default binary, shown in hex); repeatable\n"
    "  --dtype EXT=TYPE   read the tar members of extension EXT as TYPE (string, int64,\n"
    "                     float64, bool, ...; default binary, shown in hex); repeatable\n"
    "  --encoding E       of the CSV text, or of SQLite TEXT values and column names:\n"
    "                     utf-8 (default), utf-8-lossy (ill-formed parts shown as U+FFFD)\n"
    "                     or latin-1\n"
    "  -h, --help         this help\n"
    "exit status: 0 success, 1 error reading the data, 2 usage error\n";

typedef struct sbuf {
  char* p;
  size_t n, cap;
} sbuf_t;

static int sb_put(sbuf_t* b, const char* s, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t nc = b->cap ? b->cap * 2 : 64;
    while (nc < b->n + n + 1) nc *= 2;
    char* np = realloc(b->p, nc);
    if (!np) return -1;
    b->p = np;
    b->cap = nc;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = 0;
  return 0;
}

static int sb_str(sbuf_t* b, const char* s) { return sb_put(b, s, strlen(s)); }

enum { FMT_TABLE, FMT_TSV, FMT_JSON };

static void fmt_double(char* buf, size_t size, double d) {
  if (isnan(d)) { snprintf(buf, size, "NaN"); return; }
  if (isinf(d)) { snprintf(buf, size, d < 0 ? "-Infinity" : "Infinity"); return; }
  for (int prec = 15; prec <= 17; prec++) {
    snprintf(buf, size, "%.*g", prec, d);
    if (strtod(buf, NULL) == d) break;
  }
}

static void fmt_timestamp(char* buf, size_t size, int64_t us) {
  int64_t days = us / 86400000000LL, rem = us % 86400000000LL;
  if (rem < 0) { rem += 86400000000LL; days--; }
  /* civil date from days since 1970-01-01 */
  int64_t z = days + 719468;
  int64_t era = (z >= 0 ? z : z - 146096) / 146097;
  int64_t doe = z - era * 146097;
  int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  int64_t y = yoe + era * 400, doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  int64_t mp = (5 * doy + 2) / 153, d = doy - (153 * mp + 2) / 5 + 1, m = mp + (mp < 10 ? 3 : -9);
  y += m <= 2;
  int64_t secs = rem / 1000000, frac = rem % 1000000;
  int n = snprintf(buf, size, "%04lld-%02lld-%02lldT%02lld:%02lld:%02lld", (long long)y, (long long)m,
                   (long long)d, (long long)(secs / 3600), (long long)(secs / 60 % 60), (long long)(secs % 60));
  if (frac && n > 0 && (size_t)n < size) snprintf(buf + n, size - (size_t)n, ".%06lld", (long long)frac);
}

/* Appends the text of cell i of `a` in format `fmt`. */
static int fmt_cell(sbuf_t* b, const rill_array_t* a, int64_t i, int fmt) {
  char num[64];
  if (!rill_array_is_valid(a, i)) return sb_str(b, fmt == FMT_JSON ? "null" : "NULL");
  int64_t nb = 0;
  const void* p = rill_array_cell(a, i, &nb);
  switch (a->type.dtype) {
  case RILL_BOOL: return sb_str(b, *(const uint8_t*)p ? "true" : "false");
  case RILL_INT8: snprintf(num, sizeof num, "%d", *(const int8_t*)p); break;
  case RILL_INT16: snprintf(num, sizeof num, "%d", *(const int16_t*)p); break;
  case RILL_INT32: snprintf(num, sizeof num, "%d", *(const int32_t*)p); break;
  case RILL_INT64: snprintf(num, sizeof num, "%lld", (long long)*(const int64_t*)p); break;
  case RILL_UINT8: snprintf(num, sizeof num, "%u", *(const uint8_t*)p); break;
  case RILL_UINT16: snprintf(num, sizeof num, "%u", *(const uint16_t*)p); break;
  case RILL_UINT32: snprintf(num, sizeof num, "%u", *(const uint32_t*)p); break;
  case RILL_UINT64: snprintf(num, sizeof num, "%llu", (unsigned long long)*(const uint64_t*)p); break;
  case RILL_FLOAT32: fmt_double(num, sizeof num, *(const float*)p); break;
  case RILL_FLOAT64: fmt_double(num, sizeof num, *(const double*)p); break;
  case RILL_TIMESTAMP_US:
    fmt_timestamp(num + 1, sizeof num - 2, *(const int64_t*)p);
    if (fmt != FMT_JSON) return sb_str(b, num + 1);
    num[0] = '"';
    strcat(num, "\"");
    break;
  case RILL_STRING: case RILL_BINARY: {
    const unsigned char* s = p;
    int bin = a->type.dtype == RILL_BINARY;
    if (fmt == FMT_JSON && sb_str(b, "\"")) return -1;
    if (bin && sb_str(b, "0x")) return -1;
    for (int64_t k = 0; k < nb; k++) {
      unsigned char c = s[k];
      char esc[8];
      if (bin) {
        snprintf(esc, sizeof esc, "%02x", c);
      } else if (c == '\n') {
        strcpy(esc, "\\n");
      } else if (c == '\t') {
        strcpy(esc, "\\t");
      } else if (c == '\r') {
        strcpy(esc, "\\r");
      } else if (c == '\\') {
        strcpy(esc, "\\\\");
      } else if (c == '"' && fmt == FMT_JSON) {
        strcpy(esc, "\\\"");
      } else if (c < 0x20 || c == 0x7f) {
        snprintf(esc, sizeof esc, fmt == FMT_JSON ? "\\u%04x" : "\\x%02x", c);
      } else {
        if (sb_put(b, (const char*)&s[k], 1)) return -1;
        continue;
      }
      if (sb_str(b, esc)) return -1;
    }
    return fmt == FMT_JSON ? sb_str(b, "\"") : 0;
  }
  default:
    snprintf(num, sizeof num, "<%s>", rill_dtype_name(a->type.dtype));
  }
  return sb_str(b, num);
}

static int json_string(sbuf_t* b, const char* s) {
  rill_array_t* a = NULL;
  size_t n = strlen(s);
  if (rill_array_new(rill_type_scalar(RILL_STRING), 1, &a, NULL) != RILL_OK) return -1;
  int rc = rill_array_set_var(a, 0, s, (int64_t)n, NULL) == RILL_OK ? fmt_cell(b, a, 0, FMT_JSON) : -1;
  rill_array_release(a);
  return rc;
}

static int is_sqlite_file(const char* path) {
  /* never wait on a FIFO: anything but a regular file is left to the reader, which refuses it */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return 0;
  struct stat st;
  char magic[16] = {0};
  ssize_t n = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? read(fd, magic, sizeof magic) : -1;
  close(fd);
  return n == (ssize_t)sizeof magic && memcmp(magic, "SQLite format 3", 16) == 0;
}

/* A tar archive: "ustar" at byte 257 (POSIX and GNU headers) or a name ending in .tar. */
static int is_tar_file(const char* path) {
  size_t n = strlen(path);
  if (n > 4 && !strcmp(path + n - 4, ".tar")) return 1;
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return 0;
  struct stat st;
  char magic[5] = {0};
  ssize_t got = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? pread(fd, magic, sizeof magic, 257) : -1;
  close(fd);
  return got == (ssize_t)sizeof magic && memcmp(magic, "ustar", 5) == 0;
}

/* "EXT=TYPE" of --dtype into *col (ext points into the argument): 0, or -1. */
static int parse_tar_dtype(char* v, rill_tar_column_t* col) {
  char* eq = strchr(v, '=');
  if (!eq || eq == v) return -1;
  *eq = 0;
  *col = (rill_tar_column_t){.ext = v};
  for (int d = RILL_BOOL; d <= RILL_TIMESTAMP_US; d++)
    if (!strcmp(eq + 1, rill_dtype_name((rill_dtype_t)d)) || (d == RILL_STRING && !strcmp(eq + 1, "str"))) {
      col->dtype = (rill_dtype_t)d;
      return 0;
    }
  return -1;
}

static int parse_char(const char* v, char* out) {
  if (!strcmp(v, "tab") || !strcmp(v, "\\t")) { *out = '\t'; return 0; }
  if (strlen(v) != 1) return -1;
  *out = v[0];
  return 0;
}

/* Prints the rows as an aligned table with column widths capped at 40. */
static void print_table(int ncols, char** names, char** types, char** cells, int64_t nrows) {
  enum { CAP = 40 };
  int* w = calloc((size_t)ncols, sizeof *w);
  if (!w) return;
  for (int c = 0; c < ncols; c++) {
    w[c] = (int)strlen(names[c]);
    if ((int)strlen(types[c]) > w[c]) w[c] = (int)strlen(types[c]);
    for (int64_t r = 0; r < nrows; r++) {
      int n = (int)strlen(cells[r * ncols + c]);
      if (n > w[c]) w[c] = n;
    }
    if (w[c] > CAP) w[c] = CAP;
  }
  for (int pass = 0; pass < 2; pass++) {
    for (int c = 0; c < ncols; c++)
      printf("%s%-*.*s", c ? " | " : "", w[c], w[c], pass ? types[c] : names[c]);
    printf("\n");
  }
  for (int c = 0; c < ncols; c++) {
    printf("%s", c ? "-+-" : "");
    for (int k = 0; k < w[c]; k++) putchar('-');
  }
  printf("\n");
  for (int64_t r = 0; r < nrows; r++) {
    for (int c = 0; c < ncols; c++) {
      const char* s = cells[r * ncols + c];
      int n = (int)strlen(s);
      if (n > w[c]) printf("%s%.*s...", c ? " | " : "", w[c] - 3, s);
      else printf("%s%-*s", c ? " | " : "", w[c], s);
    }
    printf("\n");
  }
  free(w);
}

/* Names on stderr the rows --skip-bad-rows left out: how many, and the lines of the first. */
static void report_bad_rows(const char* path, const rill_df_t* df, int ncols) {
  enum { SHOWN = 5 };
  rill_csv_bad_row_t bad[SHOWN];
  rill_error_t err = {0};
  int64_t n = rill_csv_bad_rows(df, bad, SHOWN, &err);
  if (n <= 0) return;
  fprintf(stderr, "rill head: %s: left out %lld row%s with a wrong number of fields (%d expected):", path,
          (long long)n, n == 1 ? "" : "s", ncols);
  for (int64_t i = 0; i < n && i < SHOWN; i++)
    fprintf(stderr, "%s line %lld (%lld field%s)", i ? "," : "", (long long)bad[i].line, (long long)bad[i].fields,
            bad[i].fields == 1 ? "" : "s");
  fprintf(stderr, "%s\n", n > SHOWN ? ", ..." : "");
}

/* A --null text for a Latin-1 file. The file's bytes are compared before they are decoded and
 * the arguments come from a UTF-8 terminal, so an argument that is UTF-8 is rewritten in place
 * as Latin-1 (it only shrinks); one that is not UTF-8 is taken as it is (Latin-1 already).
 * -1 for UTF-8 text with a character Latin-1 lacks (above U+00FF). */
static int latin1_arg(char* s) {
  const unsigned char* p = (const unsigned char*)s;
  int wide = 0;
  for (size_t i = 0; p[i];) {
    unsigned c = p[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    int n = c >= 0xC2 && c <= 0xDF ? 1 : c >= 0xE0 && c <= 0xEF ? 2 : c >= 0xF0 && c <= 0xF4 ? 3 : 0;
    unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80, hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
    if (!n) return 0; /* not UTF-8 */
    for (int k = 1; k <= n; k++) /* stops at the terminating NUL, which is below every range */
      if (p[i + k] < (k == 1 ? lo : 0x80) || p[i + k] > (k == 1 ? hi : 0xBF)) return 0;
    wide |= c > 0xC3;
    i += (size_t)n + 1;
  }
  if (wide) return -1;
  char* w = s;
  for (const unsigned char* r = p; *r;) {
    if (*r < 0x80) {
      *w++ = (char)*r++;
    } else {
      *w++ = (char)(((r[0] & 0x1Fu) << 6) | (r[1] & 0x3Fu));
      r += 2;
    }
  }
  *w = 0;
  return 0;
}

int rill_cmd_head(int argc, char** argv) {
  int64_t limit = 10;
  int all = 0, fmt = FMT_TABLE;
  rill_csv_opts_t co = {0};
  const char* nulls[RILL_CSV_NULL_VALUES_MAX + 1] = {0}; /* --null texts, NULL-terminated */
  int nnulls = 0;
  enum { MAX_FILES = 256 };
  const char* pos[MAX_FILES] = {NULL};
  int npos = 0;
  enum { MAX_DTYPES = 32 };
  rill_tar_column_t tar_cols[MAX_DTYPES] = {{0}};
  int ntar_cols = 0;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* val = NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(head_usage, stdout);
      return 0;
    }
#define TAKE(opt)                                                                          \
  (!strcmp(a, opt) ? (i + 1 < argc ? (val = argv[++i], 1) : -1)                            \
   : (!strncmp(a, opt "=", strlen(opt) + 1) ? (val = a + strlen(opt) + 1, 1) : 0))
    int t;
    if ((t = TAKE("-n")) || (t = TAKE("--rows"))) {
      long long n;
      if (t < 0 || rill_cli_count(val, 0, INT64_MAX, &n) < 0) {
        fprintf(stderr, "rill head: -n needs a number of rows\n%s", head_usage);
        return 2;
      }
      limit = n;
    } else if ((t = TAKE("--skip-lines"))) {
      long long n;
      if (t < 0 || rill_cli_count(val, 0, INT64_MAX, &n) < 0) {
        fprintf(stderr, "rill head: --skip-lines needs a number of lines\n");
        return 2;
      }
      co.skip_lines = n;
    } else if ((t = TAKE("--format"))) {
      if (t < 0 || (strcmp(val, "table") && strcmp(val, "tsv") && strcmp(val, "json"))) {
        fprintf(stderr, "rill head: --format must be table, tsv or json\n");
        return 2;
      }
      fmt = !strcmp(val, "table") ? FMT_TABLE : !strcmp(val, "tsv") ? FMT_TSV : FMT_JSON;
    } else if ((t = TAKE("--delimiter")) || (t = TAKE("-d"))) {
      if (t < 0 || parse_char(val, &co.delimiter)) {
        fprintf(stderr, "rill head: --delimiter needs one character\n");
        return 2;
      }
    } else if ((t = TAKE("--quote"))) {
      if (t < 0 || parse_char(val, &co.quote)) {
        fprintf(stderr, "rill head: --quote needs one character\n");
        return 2;
      }
    } else if ((t = TAKE("--comment"))) {
      if (t < 0 || parse_char(val, &co.comment) || !co.comment) {
        fprintf(stderr, "rill head: --comment needs one character\n");
        return 2;
      }
    } else if ((t = TAKE("--decimal"))) {
      if (t < 0 || parse_char(val, &co.decimal) || !co.decimal) {
        fprintf(stderr, "rill head: --decimal needs one character\n");
        return 2;
      }
    } else if ((t = TAKE("--null"))) {
      if (t < 0 || nnulls == RILL_CSV_NULL_VALUES_MAX) {
        fprintf(stderr, "rill head: --null needs a text (at most %d of them)\n", RILL_CSV_NULL_VALUES_MAX);
        return 2;
      }
      nulls[nnulls++] = val;
      co.null_values = nulls;
    } else if ((t = TAKE("--escape"))) {
      if (t < 0 || parse_char(val, &co.escape) || !co.escape) {
        fprintf(stderr, "rill head: --escape needs one character\n");
        return 2;
      }
    } else if ((t = TAKE("--dtype"))) {
      if (t < 0 || ntar_cols == MAX_DTYPES || parse_tar_dtype((char*)val, &tar_cols[ntar_cols]) < 0) {
        fprintf(stderr, "rill head: --dtype needs EXT=TYPE (a type such as string, int64, float64, bool; at most %d)\n",
                MAX_DTYPES);
        return 2;
      }
      ntar_cols++;
    } else if ((t = TAKE("--encoding"))) {
      static const char* const encodings[] = {"utf-8", "utf-8-lossy", "latin-1"}; /* rill_csv_encoding_t's order */
      int e = 0;
      while (t > 0 && e < 3 && strcmp(val, encodings[e])) e++;
      if (t < 0 || e == 3) {
        fprintf(stderr, "rill head: --encoding needs utf-8, utf-8-lossy or latin-1\n");
        return 2;
      }
      co.encoding = (rill_csv_encoding_t)e;
    } else if (!strcmp(a, "--all")) {
      all = 1;
    } else if (!strcmp(a, "--no-header")) {
      co.no_header = 1;
    } else if (!strcmp(a, "--no-infer")) {
      co.no_infer = 1;
    } else if (!strcmp(a, "--trim")) {
      co.trim = 1;
    } else if (!strcmp(a, "--skip-bad-rows")) {
      co.on_bad_row = RILL_ON_ERROR_SKIP;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "rill head: unknown option '%s'\n%s", a, head_usage);
      return 2;
    } else if (npos < MAX_FILES) {
      pos[npos++] = a;
    } else {
      fprintf(stderr, "rill head: too many arguments\n%s", head_usage);
      return 2;
    }
#undef TAKE
  }
  for (int k = 0; k < nnulls && co.encoding == RILL_CSV_LATIN1; k++)
    if (latin1_arg((char*)nulls[k]) < 0) { /* the process's arguments, which are writable */
      fprintf(stderr, "rill head: --null '%s' has a character Latin-1 cannot write (--encoding latin-1)\n", nulls[k]);
      return 2;
    }
  if (npos == 0) {
    fprintf(stderr, "rill head: missing FILE\n%s", head_usage);
    return 2;
  }
  int rc;
  if (!is_sqlite_file(pos[0]) && (rc = rill_cli_expand_paths("head", pos, &npos, MAX_FILES))) return rc;
  rill_error_t err = {0};
  rill_df_t* df = NULL;
  if (is_sqlite_file(pos[0])) {
    if (npos != 2) {
      fprintf(stderr, "rill head: %s is a SQLite database: give %s\n%s", pos[0],
              npos < 2 ? "a query or a table name" : "one query or table name", head_usage);
      return 2;
    }
    rc = rill_df_from_sqlite(pos[0], pos[1], NULL, 0, &(rill_sqlite_opts_t){.encoding = co.encoding}, &df, &err);
  } else if (is_tar_file(pos[0])) {
    rc = rill_df_from_tar(pos, npos, &(rill_tar_opts_t){.columns = tar_cols, .ncolumns = ntar_cols}, &df, &err);
  } else if (ntar_cols) {
    fprintf(stderr, "rill head: --dtype is for tar archives; %s is not one\n", pos[0]);
    return 2;
  } else {
    rc = rill_df_from_csv_files(pos, npos, &co, &df, &err);
  }
  if (rc != RILL_OK) {
    fprintf(stderr, "rill head: %s\n", err.message);
    return 1;
  }
  int ncols = rill_df_ncolumns(df);
  if (co.on_bad_row == RILL_ON_ERROR_SKIP && !is_sqlite_file(pos[0]) && !is_tar_file(pos[0])) {
    rill_df_t* files[MAX_FILES] = {NULL};
    int nf = rill_df_concat_parts(df, files, MAX_FILES);
    for (int f = 0; f < (nf ? nf : 1); f++) report_bad_rows(pos[f], nf ? files[f] : df, ncols);
    for (int f = 0; f < nf; f++) rill_df_free(files[f]);
  }
  int64_t nrows = rill_df_rows(df);
  if (!all && limit < nrows) nrows = limit;
  char** names = calloc((size_t)ncols + 1, sizeof *names);
  char** types = calloc((size_t)ncols + 1, sizeof *types);
  char** cells = calloc((size_t)(nrows * ncols) + 1, sizeof *cells);
  rill_iter_t* it = NULL;
  int status = 0;
  int64_t got = 0;
  if (!names || !types || !cells) {
    fprintf(stderr, "rill head: out of memory\n");
    status = 1;
    goto out;
  }
  for (int c = 0; c < ncols; c++) {
    const rill_field_t* f = rill_df_field(df, c);
    char tb[64];
    names[c] = strdup(f->name);
    types[c] = strdup(rill_type_format(&f->type, tb, sizeof tb));
  }
  if (fmt != FMT_TABLE) {
    sbuf_t b = {0};
    if (fmt == FMT_JSON) sb_str(&b, "[");
    for (int c = 0; c < ncols; c++) {
      if (c) sb_str(&b, fmt == FMT_JSON ? ", " : "\t");
      if (fmt == FMT_JSON) json_string(&b, names[c]);
      else sb_str(&b, names[c]);
    }
    if (fmt == FMT_JSON) sb_str(&b, "]");
    printf("%s\n", b.p ? b.p : "");
    free(b.p);
  }
  rill_iter_opts_t io = {.prefetch = 4};
  if (nrows > 0 && (rc = rill_iter_new(df, &io, &it, &err)) != RILL_OK) {
    fprintf(stderr, "rill head: %s\n", err.message);
    status = 1;
    goto out;
  }
  while (got < nrows) {
    rill_row_t row;
    rc = rill_iter_next(it, &row, &err);
    if (rc == RILL_END) break;
    if (rc != RILL_OK) {
      fprintf(stderr, "rill head: %s\n", err.message);
      status = 1;
      break;
    }
    sbuf_t line = {0};
    if (fmt == FMT_JSON) sb_str(&line, "[");
    for (int c = 0; c < ncols; c++) {
      const rill_array_t* a = rill_row_get(&row, c);
      if (fmt == FMT_TABLE) {
        sbuf_t cell = {0};
        fmt_cell(&cell, a, 0, fmt);
        cells[got * ncols + c] = cell.p ? cell.p : strdup("");
      } else {
        if (c) sb_str(&line, fmt == FMT_JSON ? ", " : "\t");
        fmt_cell(&line, a, 0, fmt);
      }
    }
    if (fmt == FMT_JSON) sb_str(&line, "]");
    if (fmt != FMT_TABLE) printf("%s\n", line.p ? line.p : "");
    free(line.p);
    got++;
  }
  if (fmt == FMT_TABLE) {
    print_table(ncols, names, types, cells, got);
    if (got < rill_df_rows(df) && status == 0)
      printf("(%lld of %lld rows)\n", (long long)got, (long long)rill_df_rows(df));
  }
out:
  rill_iter_free(it);
  if (cells)
    for (int64_t k = 0; k < nrows * ncols; k++) free(cells[k]);
  for (int c = 0; names && c < ncols; c++) free(names[c]);
  for (int c = 0; types && c < ncols; c++) free(types[c]);
  free(cells);
  free(names);
  free(types);
  rill_df_free(df);
  return status;
}
