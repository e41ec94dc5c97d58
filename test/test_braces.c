/* Brace patterns of shard lists (rill_expand_braces): ranges, alternatives, text groups,
 * escapes, every error with its message, allocation failures, and the command-line tool's
 * expansion of shard and CSV paths that name no file. */
#include <stdatomic.h>

#include "common.h"
#include "tar_write.h"

/* The paths of `pattern` joined by spaces into out (asserting success). */
static void joined(const char* pattern, char* out, size_t size) {
  char** p = NULL;
  int64_t n = 0;
  rill_error_t err = {0};
  RT_OK(rill_expand_braces(pattern, &p, &n, &err), err);
  cr_assert(n >= 1 && p);
  out[0] = 0;
  size_t used = 0;
  for (int64_t i = 0; i < n; i++) {
    cr_assert(p[i]);
    int w = snprintf(out + used, size - used, "%s%s", i ? " " : "", p[i]);
    cr_assert(w >= 0 && (size_t)w < size - used, "output too long");
    used += (size_t)w;
  }
  rill_expand_braces_free(p, n);
}

#define EXPANDS(pattern, want)                                              \
  do {                                                                      \
    char got_[4096];                                                        \
    joined(pattern, got_, sizeof got_);                                     \
    cr_assert_str_eq(got_, want, "%s -> '%s', expected '%s'", pattern, got_, want); \
  } while (0)

Test(braces, ranges) {
  EXPANDS("train-{000..003}.tar", "train-000.tar train-001.tar train-002.tar train-003.tar");
  EXPANDS("{8..11}", "8 9 10 11");                  /* no leading zero: no padding */
  EXPANDS("{08..11}", "08 09 10 11");               /* padded to the wider bound */
  EXPANDS("{9..0010}", "0009 0010");
  EXPANDS("{5..1}", "5 4 3 2 1");                   /* down */
  EXPANDS("{0..10..4}", "0 4 8");                   /* a step; the last one need not be M */
  EXPANDS("{10..0..-4}", "10 6 2");                 /* the step's sign is ignored */
  EXPANDS("{-2..2}", "-2 -1 0 1 2");
  EXPANDS("{-05..5..5}", "-05 000 005");
  EXPANDS("{+1..3}", "1 2 3");
  EXPANDS("{7..7}", "7");
  EXPANDS("{a..e}", "a b c d e");
  EXPANDS("{e..a..2}", "e c a");
  EXPANDS("{9223372036854775806..9223372036854775807}", "9223372036854775806 9223372036854775807");
  EXPANDS("{-9223372036854775808..-9223372036854775807}", "-9223372036854775808 -9223372036854775807");
}

Test(braces, alternatives_and_products) {
  EXPANDS("{a,b}{1,2}", "a1 a2 b1 b2"); /* the leftmost group varies slowest */
  EXPANDS("s/{train,val}-{0..1}.tar", "s/train-0.tar s/train-1.tar s/val-0.tar s/val-1.tar");
  EXPANDS("x{,y}z", "xz xyz");          /* an empty alternative */
  EXPANDS("{a,}", "a ");
  EXPANDS("{a,b{1,2}}", "a b1 b2");     /* nested */
  EXPANDS("{{1,2},{3..4}}", "1 2 3 4");
  EXPANDS("{a,{0..2}x}", "a 0x 1x 2x");
  EXPANDS("{1..3}{a..b}{x,y}", "1ax 1ay 1bx 1by 2ax 2ay 2bx 2by 3ax 3ay 3bx 3by");
  EXPANDS("{a,a}", "a a");              /* repeats are kept, as a shell keeps them */
}

Test(braces, text_groups_and_escapes) {
  EXPANDS("plain/path.tar", "plain/path.tar");
  EXPANDS("p{}q", "p{}q");             /* no comma, no range: text */
  EXPANDS("p{x}q", "p{x}q");
  EXPANDS("a{1..}b", "a{1..}b");
  EXPANDS("{a..5}", "{a..5}");         /* a letter and a number */
  EXPANDS("{1..3..x}", "{1..3..x}");
  EXPANDS("{a{1,2}}x{3,4}", "{a1}x3 {a1}x4 {a2}x3 {a2}x4"); /* outer braces text, inner group expanded */
  EXPANDS("\\{a,b\\}", "{a,b}");       /* escaped braces */
  EXPANDS("{a\\,b,c}", "a,b c");       /* an escaped comma */
  EXPANDS("a\\\\b", "a\\b");
  EXPANDS("end\\", "end\\");           /* a backslash at the end stays */
}

/* rill_expand_braces(pattern) fails with code and a message containing needle; out args reset. */
static void fails(const char* pattern, int code, const char* needle) {
  char** p = (char**)1;
  int64_t n = 7;
  rill_error_t err = {0};
  RT_FAILS(rill_expand_braces(pattern, &p, &n, &err), code, needle, err);
  cr_assert(p == NULL && n == 0, "%s: outputs not reset", pattern);
}

Test(braces, errors) {
  fails("{1,2", RILL_EINVAL, "expand_braces: '{1,2': unmatched '{' at character 1");
  fails("shards/a-{0..3.tar", RILL_EINVAL, "unmatched '{' at character 10");
  fails("a}b", RILL_EINVAL, "expand_braces: 'a}b': unmatched '}' at character 2");
  fails("{a,b}}", RILL_EINVAL, "unmatched '}' at character 6");
  fails("{x{y}", RILL_EINVAL, "unmatched '{' at character 1");
  fails("{1..10..0}", RILL_EINVAL, "the range {1..10..0} has a step of 0");
  fails("{1..99999999999999999999}", RILL_EINVAL, "a number of the range {1..99999999999999999999} is out of range");
  fails("{1..9223372036854775808}", RILL_EINVAL, "is out of range");
  fails("{0..1000000}", RILL_EINVAL, "'{0..1000000}' expands to more than 1000000 paths");
  fails("{0..999}{0..999}{0,1}", RILL_EINVAL, "expands to more than 1000000 paths");
  fails("", RILL_EINVAL, "expand_braces: empty pattern");
  /* 33 nested groups with commas */
  char deep[256] = "";
  for (int i = 0; i < 33; i++) strcat(deep, "{a,");
  for (int i = 0; i < 33; i++) strcat(deep, "}");
  fails(deep, RILL_EINVAL, "braces nested more than 32 deep");
  deep[0] = 0; /* 32 levels are fine */
  for (int i = 0; i < 32; i++) strcat(deep, "{a,");
  for (int i = 0; i < 32; i++) strcat(deep, "}");
  char** p;
  int64_t n;
  rill_error_t err = {0};
  RT_OK(rill_expand_braces(deep, &p, &n, &err), err);
  cr_assert_eq(n, 33); /* "a" from each level, "" from the innermost */
  cr_assert_str_eq(p[0], "a");
  cr_assert_str_eq(p[31], "a");
  cr_assert_str_eq(p[32], "");
  rill_expand_braces_free(p, n);
  /* NULL arguments */
  RT_FAILS(rill_expand_braces(NULL, &p, &n, &err), RILL_EINVAL, "expand_braces: NULL argument", err);
  RT_FAILS(rill_expand_braces("a", NULL, &n, &err), RILL_EINVAL, "NULL argument", err);
  RT_FAILS(rill_expand_braces("a", &p, NULL, &err), RILL_EINVAL, "NULL argument", err);
  cr_assert_eq(rill_expand_braces("{", &p, &n, NULL), RILL_EINVAL); /* no error struct */
  rill_expand_braces_free(NULL, 0);
}

/* A pattern of a million paths: all of them, in order. */
Test(braces, the_largest_expansion) {
  char** p;
  int64_t n;
  rill_error_t err = {0};
  RT_OK(rill_expand_braces("s{0..999}-{000..999}", &p, &n, &err), err);
  cr_assert_eq(n, RILL_EXPAND_MAX_PATHS);
  cr_assert_str_eq(p[0], "s0-000");
  cr_assert_str_eq(p[1001], "s1-001");
  cr_assert_str_eq(p[n - 1], "s999-999");
  rill_expand_braces_free(p, n);
}

static _Atomic int64_t fail_at, allocs;
static void* failing_alloc(size_t size, size_t align, void* ctx) {
  (void)ctx;
  return atomic_fetch_add(&allocs, 1) == atomic_load(&fail_at) ? NULL : rt_sys_alloc(size, align);
}

/* Each allocation failing in turn: RILL_ENOMEM, nothing leaked (ASan), outputs reset. */
Test(braces, out_of_memory) {
  int64_t k = 0;
  for (;; k++) {
    atomic_store(&fail_at, k);
    atomic_store(&allocs, 0);
    rill_set_allocator(&(rill_allocator_t){failing_alloc, rt_sys_free, NULL});
    char** p = (char**)1;
    int64_t n = 5;
    rill_error_t err = {0};
    int rc = rill_expand_braces("d/{a,b{1..3}}-{x,y}.tar", &p, &n, &err);
    rill_set_allocator(NULL);
    if (rc == RILL_OK) {
      cr_assert_eq(n, 8);
      cr_assert_str_eq(p[7], "d/b3-y.tar");
      rill_expand_braces_free(p, n);
      break;
    }
    cr_assert_eq(rc, RILL_ENOMEM, "allocation %lld: %d %s", (long long)k, rc, err.message);
    cr_assert(strstr(err.message, "expand_braces: out of memory"), "%s", err.message);
    cr_assert(p == NULL && n == 0);
  }
  cr_assert(k > 10, "only %lld allocations", (long long)k);
}

/* ---------------------------------------------------------------- command-line tool */

static void write_shard(const char* rel, int k) {
  FILE* f = fopen(rt_tpath(rel), "wb");
  cr_assert(f, "cannot create %s", rel);
  char name[32], cls[8];
  snprintf(name, sizeof name, "k%d.cls", k);
  snprintf(cls, sizeof cls, "%d", k * 10);
  tw_file(f, name, cls, (int64_t)strlen(cls));
  tw_end(f);
  fclose(f);
}

/* The front ends' rule for one path: a brace pattern to expand when it holds a '{' and names
 * no file; a file, a folder or a path without braces is read as it is. */
Test(braces, a_path_is_a_pattern_when_it_holds_a_brace_and_names_no_file) {
  cr_assert_eq(rill_path_is_pattern(NULL), 0);
  cr_assert_eq(rill_path_is_pattern(""), 0);
  cr_assert_eq(rill_path_is_pattern(rt_tpath("train-{000..002}.tar")), 1);
  cr_assert_eq(rill_path_is_pattern(rt_tpath("no-brace.tar")), 0, "a missing path without braces is no pattern");
  cr_assert_eq(rill_path_is_pattern("{a,b}"), 1);
  FILE* f = fopen(rt_tpath("odd-{1,2}.csv"), "w");
  cr_assert(f);
  fputs("x\n1\n", f);
  fclose(f);
  cr_assert_eq(rill_path_is_pattern(rt_tpath("odd-{1,2}.csv")), 0, "a file whose name holds braces");
  cr_assert_eq(mkdir(rt_tpath("dir-{a}"), 0700), 0);
  cr_assert_eq(rill_path_is_pattern(rt_tpath("dir-{a}")), 0, "a folder whose name holds braces");
  cr_assert_eq(rill_path_is_pattern(rt_tpath("odd-{1,2}.csv.gz")), 1);
}

/* rill head over a quoted pattern of shards and of CSV files; a path with braces that names
 * a file is that file; bad patterns and missing expansions are errors naming them. */
Test(braces, cli_expands_paths_that_name_no_file) {
  const char* bin = getenv("RILL_BIN");
  if (!bin || !*bin) cr_skip_test("RILL_BIN not set (run through make test)");
  for (int k = 0; k < 3; k++) {
    char rel[32];
    snprintf(rel, sizeof rel, "train-%03d.tar", k);
    write_shard(rel, k);
  }
  const char* out = rt_cmd_expect(0, "key\tpath\tcls\n", "'%s' head '%s' --dtype cls=int64 --format tsv", bin,
                                  rt_tpath("train-{000..002}.tar"));
  cr_assert(strstr(out, "k0\t"), "%s", out);
  cr_assert(strstr(out, "train-001.tar:k1\t10\n"), "%s", out);
  cr_assert(strstr(out, "train-002.tar:k2\t20\n"), "%s", out);
  /* a pattern among plain paths, in place */
  out = rt_cmd_expect(0, NULL, "'%s' head '%s' '%s' --dtype cls=int64 --format tsv", bin, rt_tpath("train-002.tar"),
                      rt_tpath("train-{000,001}.tar"));
  const char *a = strstr(out, "train-002.tar:k2"), *b = strstr(out, "train-000.tar:k0"), *c = strstr(out, "train-001.tar:k1");
  cr_assert(a && b && c && a < b && b < c, "order: %s", out);
  /* a file whose name holds braces is read as it is */
  write_shard("odd-{1,2}.tar", 7);
  rt_cmd_expect(0, "odd-{1,2}.tar:k7\t70\n", "'%s' head '%s' --dtype cls=int64 --format tsv", bin,
                rt_tpath("odd-{1,2}.tar"));
  /* CSV files */
  for (int k = 0; k < 2; k++) {
    FILE* f = fopen(rt_tpath(k ? "part-b.csv" : "part-a.csv"), "w");
    cr_assert(f);
    fprintf(f, "x,y\n%d,v%d\n", k + 1, k);
    fclose(f);
  }
  rt_cmd_expect(0, "x\ty\n1\tv0\n2\tv1\n", "'%s' head '%s' --format tsv", bin, rt_tpath("part-{a,b}.csv"));
  /* errors */
  out = rt_cmd_expect(2, "rill head: expand_braces: '", "'%s' head '%s'", bin, rt_tpath("train-{000..002.tar"));
  cr_assert(strstr(out, "train-{000..002.tar': unmatched '{' at character"), "%s", out);
  rt_cmd_expect(1, "train-003.tar: cannot open: No such file or directory", "'%s' head '%s'", bin,
                rt_tpath("train-{000..003}.tar"));
  rt_cmd_expect(2, "x{0..300}.csv' gives 301 paths, more than the 256 files a command takes", "'%s' head '%s'", bin,
                rt_tpath("x{0..300}.csv"));
  rt_cmd_expect(2, "rill bench images: expand_braces: '", "'%s' bench images '%s'", bin, rt_tpath("train-{0..1"));
  /* the shards were opened: they hold no image */
  rt_cmd_expect(1, "no member of the archives has extension \"jpg\"", "'%s' bench images '%s' --epochs 1", bin,
                rt_tpath("train-{000..001}.tar"));
}
