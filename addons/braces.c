/* Brace patterns of shard lists (rill_expand_braces): "train-{000..146}.tar" as shells and
 * WebDataset's shard lists expand them. The pattern is read left to right: literal text is
 * appended to every path so far, a group multiplies them by its items (alternatives, each
 * expanded in turn, or a range), so the recursion is as deep as the groups are nested, not
 * as long as the pattern. Backslash escapes are kept while groups are found and removed at
 * the end. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "addon.h"
#include "rill_addons.h"

enum { MAX_DEPTH = 32 };
#define MAX_BYTES ((int64_t)256 << 20) /* all the paths together */

typedef struct strvec {
  char** s;
  int64_t n, cap, bytes;
} strvec_t;

typedef struct expander {
  const char* pattern;
  rill_error_t* err;
} expander_t;

static void vec_free(strvec_t* v) {
  for (int64_t i = 0; i < v->n; i++) rill__free(v->s[i]);
  rill__free(v->s);
  memset(v, 0, sizeof *v);
}

/* Each function returns 0 (or, where it says, 1) or the error code, with err set. */
static int too_many(expander_t* x, int64_t n, int64_t bytes) {
  if (n > RILL_EXPAND_MAX_PATHS)
    return rill__fail(x->err, RILL_EINVAL, "expand_braces: '%s' expands to more than %d paths", x->pattern,
                      RILL_EXPAND_MAX_PATHS);
  if (bytes > MAX_BYTES)
    return rill__fail(x->err, RILL_EINVAL, "expand_braces: '%s' expands to more than %lld MiB of paths", x->pattern,
                      (long long)(MAX_BYTES >> 20));
  return 0;
}

/* Appends a + b (lengths na, nb) to v. */
static int vec_push(expander_t* x, strvec_t* v, const char* a, size_t na, const char* b, size_t nb) {
  int rc = too_many(x, v->n + 1, v->bytes + (int64_t)(na + nb + 1));
  if (rc < 0) return rc;
  if (v->n == v->cap) {
    char** s = rill__grow(v->s, &v->cap, v->n, v->n + 1, sizeof *s, 16);
    if (!s) return rill__fail(x->err, RILL_ENOMEM, "expand_braces: out of memory");
    v->s = s;
  }
  char* p = rill__alloc(na + nb + 1);
  if (!p) return rill__fail(x->err, RILL_ENOMEM, "expand_braces: out of memory");
  memcpy(p, a, na);
  memcpy(p + na, b, nb);
  p[na + nb] = 0;
  v->s[v->n++] = p;
  v->bytes += (int64_t)(na + nb + 1);
  return 0;
}

/* The index of the '}' closing the '{' at s[open], or -1 (escaped braces do not count). */
static int64_t closing(const char* s, int64_t open, int64_t end) {
  int depth = 0;
  for (int64_t i = open; i < end; i++) {
    if (s[i] == '\\' && i + 1 < end) i++;
    else if (s[i] == '{') depth++;
    else if (s[i] == '}' && --depth == 0) return i;
  }
  return -1;
}

/* A range's bound: an integer (sign, digits) filling s[0..n), or one ASCII letter. */
static int parse_bound(const char* s, int64_t n, long long* v, int* letter, int* width, int* padded) {
  if (n <= 0) return -1;
  if (n == 1 && ((s[0] >= 'a' && s[0] <= 'z') || (s[0] >= 'A' && s[0] <= 'Z'))) {
    *v = s[0], *letter = 1, *width = 1, *padded = 0;
    return 0;
  }
  *letter = 0, *width = (int)n, *padded = 0;
  int64_t i = n > 0 && (s[0] == '-' || s[0] == '+');
  if (i == n) return -1;
  for (int64_t k = i; k < n; k++)
    if (s[k] < '0' || s[k] > '9') return -1;
  if (n > 20) return -2; /* digits past int64 */
  char buf[24];
  memcpy(buf, s, (size_t)n);
  buf[n] = 0;
  errno = 0;
  *v = strtoll(buf, NULL, 10);
  if (errno) return -2;
  *padded = n - i > 1 && s[i] == '0';
  return 0;
}

/* s[0..n) as a range "A..B" or "A..B..STEP": 1 and its items in *items, 0 when it is not a
 * range. */
static int range_items(expander_t* x, const char* s, int64_t n, strvec_t* items) {
  const char* dots = NULL;
  for (int64_t i = 0; i + 1 < n; i++)
    if (s[i] == '.' && s[i + 1] == '.') {
      dots = s + i;
      break;
    }
  if (!dots) return 0;
  const char* b = dots + 2;
  const char* end = s + n;
  const char* dots2 = NULL;
  for (const char* p = b; p + 1 < end; p++)
    if (p[0] == '.' && p[1] == '.') {
      dots2 = p;
      break;
    }
  const char* bend = dots2 ? dots2 : end;
  long long lo, hi, step = 1;
  int la, lb, wa, wb, pa, pb, ls, ws, ps;
  int ra = parse_bound(s, dots - s, &lo, &la, &wa, &pa), rb = parse_bound(b, bend - b, &hi, &lb, &wb, &pb);
  int rs = dots2 ? parse_bound(dots2 + 2, end - dots2 - 2, &step, &ls, &ws, &ps) : 0;
  if (ra == -1 || rb == -1 || rs == -1) return 0;
  if (ra == 0 && rb == 0 && (la != lb || (dots2 && rs == 0 && ls))) return 0; /* a letter and a number */
  if (ra == -2 || rb == -2 || rs == -2)
    return rill__fail(x->err, RILL_EINVAL, "expand_braces: '%s': a number of the range {%.*s} is out of range",
                      x->pattern, (int)n, s);
  if (step == 0)
    return rill__fail(x->err, RILL_EINVAL, "expand_braces: '%s': the range {%.*s} has a step of 0", x->pattern, (int)n,
                      s);
  unsigned long long ustep = step < 0 ? 0ull - (unsigned long long)step : (unsigned long long)step;
  unsigned long long span = lo <= hi ? (unsigned long long)hi - (unsigned long long)lo
                                     : (unsigned long long)lo - (unsigned long long)hi;
  unsigned long long count = span / ustep + 1;
  if (count > RILL_EXPAND_MAX_PATHS) return too_many(x, RILL_EXPAND_MAX_PATHS + 1, 0);
  int width = pa || pb ? (wa > wb ? wa : wb) : 0;
  for (unsigned long long k = 0; k < count; k++) {
    long long v = lo <= hi ? (long long)((unsigned long long)lo + k * ustep) : (long long)((unsigned long long)lo - k * ustep);
    char buf[32];
    int len = la ? snprintf(buf, sizeof buf, "%c", (char)v) : snprintf(buf, sizeof buf, "%0*lld", width, v);
    int rc = vec_push(x, items, buf, (size_t)len, "", 0);
    if (rc < 0) return rc;
  }
  return 1;
}

static int expand(expander_t* x, const char* s, int64_t n, int depth, strvec_t* out);

/* The items of the group s[open..close] into *items: 1, or 0 when it is no group (no comma
 * at its top level and no range: its braces are text). */
static int group_items(expander_t* x, const char* s, int64_t open, int64_t close, int depth, strvec_t* items) {
  const char* c = s + open + 1;
  int64_t n = close - open - 1;
  int64_t commas = 0;
  int d = 0;
  for (int64_t i = 0; i < n; i++) {
    if (c[i] == '\\' && i + 1 < n) i++;
    else if (c[i] == '{') d++;
    else if (c[i] == '}') d--;
    else if (c[i] == ',' && d == 0) commas++;
  }
  if (!commas) return range_items(x, c, n, items);
  if (depth >= MAX_DEPTH)
    return rill__fail(x->err, RILL_EINVAL, "expand_braces: '%s': braces nested more than %d deep", x->pattern,
                      MAX_DEPTH);
  int64_t start = 0;
  d = 0;
  for (int64_t i = 0; i <= n; i++) {
    if (i < n && c[i] == '\\' && i + 1 < n) {
      i++;
      continue;
    }
    if (i < n && c[i] == '{') d++;
    else if (i < n && c[i] == '}') d--;
    else if (i == n || (c[i] == ',' && d == 0)) {
      strvec_t alt = {0};
      int rc = expand(x, c + start, i - start, depth + 1, &alt);
      for (int64_t k = 0; rc == 0 && k < alt.n; k++) rc = vec_push(x, items, alt.s[k], strlen(alt.s[k]), "", 0);
      vec_free(&alt);
      if (rc < 0) return rc;
      start = i + 1;
    }
  }
  return 1;
}

/* Every path so far times every item: *v becomes {p + it : p in v, it in items}. */
static int product(expander_t* x, strvec_t* v, const strvec_t* items) {
  if (v->n * items->n > RILL_EXPAND_MAX_PATHS) return too_many(x, RILL_EXPAND_MAX_PATHS + 1, 0);
  strvec_t next = {0};
  int rc = 0;
  for (int64_t i = 0; rc == 0 && i < v->n; i++)
    for (int64_t k = 0; rc == 0 && k < items->n; k++)
      rc = vec_push(x, &next, v->s[i], strlen(v->s[i]), items->s[k], strlen(items->s[k]));
  if (rc < 0) {
    vec_free(&next);
    return rc;
  }
  vec_free(v);
  *v = next;
  return 0;
}

/* Appends s[0..n) to every path of v. */
static int append(expander_t* x, strvec_t* v, const char* s, int64_t n) {
  if (!n) return 0;
  strvec_t tail = {0};
  int rc = vec_push(x, &tail, s, (size_t)n, "", 0);
  if (rc == 0) rc = product(x, v, &tail);
  vec_free(&tail);
  return rc;
}

/* The paths of s[0..n) (escapes still in them) into *out. */
static int expand(expander_t* x, const char* s, int64_t n, int depth, strvec_t* out) {
  memset(out, 0, sizeof *out);
  int rc = vec_push(x, out, "", 0, "", 0);
  if (rc < 0) {
    vec_free(out);
    return rc;
  }
  int64_t lit = 0; /* start of the literal text not yet appended */
  for (int64_t i = 0; i < n; i++) {
    if (s[i] == '\\' && i + 1 < n) {
      i++;
      continue;
    }
    if (s[i] != '{') continue;
    int64_t close = closing(s, i, n);
    if (close < 0) continue; /* unmatched within this part: text */
    strvec_t items = {0};
    int g = group_items(x, s, i, close, depth, &items);
    if (g == 1) {
      g = append(x, out, s + lit, i - lit);
      if (g == 0) g = product(x, out, &items);
      lit = close + 1;
      i = close;
    }
    vec_free(&items);
    if (g < 0) {
      vec_free(out);
      return g;
    }
  }
  if ((rc = append(x, out, s + lit, n - lit)) < 0) vec_free(out);
  return rc;
}

/* Drops the backslash of each escape in place. */
static void unescape(char* p) {
  char* w = p;
  for (; *p; p++) {
    if (*p == '\\' && p[1]) p++;
    *w++ = *p;
  }
  *w = 0;
}

int rill_expand_braces(const char* pattern, char*** paths, int64_t* count, rill_error_t* err) {
  if (paths) *paths = NULL;
  if (count) *count = 0;
  if (!pattern || !paths || !count) return rill__fail(err, RILL_EINVAL, "expand_braces: NULL argument");
  if (!*pattern) return rill__fail(err, RILL_EINVAL, "expand_braces: empty pattern");
  size_t len = strlen(pattern);
  if (len > INT32_MAX) return rill__fail(err, RILL_EINVAL, "expand_braces: pattern too long");
  /* every brace must be matched: a stray one is a typo more often than a name */
  int64_t depth = 0, first_open = -1;
  for (size_t i = 0; i < len; i++) {
    if (pattern[i] == '\\' && i + 1 < len) {
      i++;
    } else if (pattern[i] == '{') {
      if (depth++ == 0) first_open = (int64_t)i;
    } else if (pattern[i] == '}') {
      if (depth == 0)
        return rill__fail(err, RILL_EINVAL, "expand_braces: '%s': unmatched '}' at character %zu", pattern, i + 1);
      depth--;
    }
  }
  if (depth)
    return rill__fail(err, RILL_EINVAL, "expand_braces: '%s': unmatched '{' at character %lld", pattern,
                      (long long)first_open + 1);
  expander_t x = {pattern, err};
  strvec_t v;
  int rc = expand(&x, pattern, (int64_t)len, 0, &v);
  if (rc < 0) return rc;
  for (int64_t i = 0; i < v.n; i++) unescape(v.s[i]);
  *paths = v.s;
  *count = v.n;
  return RILL_OK;
}

void rill_expand_braces_free(char** paths, int64_t count) { rill__free_vec((void**)paths, count); }

int rill_path_is_pattern(const char* path) {
  struct stat st;
  return path && strchr(path, '{') && stat(path, &st) != 0;
}
