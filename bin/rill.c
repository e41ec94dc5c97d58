/* rill: command-line front end. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commands.h"
#include "rill.h"
#include "rill_addons.h"

int rill_cli_count(const char* v, long long lo, long long hi, long long* out) {
  if (!v || *v < '0' || *v > '9') return -1;
  char* end;
  errno = 0;
  long long n = strtoll(v, &end, 10);
  if (*end || errno == ERANGE || n < lo || n > hi) return -1;
  *out = n;
  return 0;
}

/* What rill_cli_expand_paths expanded, freed at exit. */
static struct {
  char** paths;
  int64_t n;
} *expanded;
static int nexpanded;

static void free_expanded(void) {
  for (int i = 0; i < nexpanded; i++) rill_expand_braces_free(expanded[i].paths, expanded[i].n);
  free(expanded);
  expanded = NULL, nexpanded = 0;
}

double rill_cli_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int rill_cli_expand_paths(const char* cmd, const char** list, int* n, int max) {
  for (int i = 0; i < *n; i++) {
    if (!rill_path_is_pattern(list[i])) continue;
    char** p;
    int64_t k;
    rill_error_t err = {0};
    if (rill_expand_braces(list[i], &p, &k, &err) < 0) {
      fprintf(stderr, "rill %s: %s\n", cmd, err.message);
      return 2;
    }
    void* grown = *n - 1 + k <= max ? realloc(expanded, (size_t)(nexpanded + 1) * sizeof *expanded) : NULL;
    if (!grown) {
      if (*n - 1 + k > max)
        fprintf(stderr, "rill %s: '%s' gives %lld paths, more than the %d files a command takes\n", cmd, list[i],
                (long long)k, max);
      else
        fprintf(stderr, "rill %s: out of memory\n", cmd);
      rill_expand_braces_free(p, k);
      return 2;
    }
    if (!nexpanded) atexit(free_expanded);
    expanded = grown;
    expanded[nexpanded].paths = p, expanded[nexpanded++].n = k;
    memmove(list + i + k, list + i + 1, (size_t)(*n - i - 1) * sizeof *list);
    for (int64_t j = 0; j < k; j++) list[i + j] = p[j];
    *n += (int)k - 1;
    i += (int)k - 1;
  }
  return 0;
}

static void usage(FILE* f) {
  fprintf(f,
          "usage: rill <command> [options]\n"
          "\n"
          "commands:\n"
          "  demo [DIR]                 run the image training pipeline on a corpus, write preview.png\n"
          "  preview DIR -o FILE.png    write a grid of one augmented batch\n"
          "  bench images DIR           measure the image pipeline (images/s)\n"
          "  head FILE.csv              print the first rows of a CSV file\n"
          "  head DB.sqlite \"SELECT ..\" print the first rows of a query\n"
          "  index --index-dir DIR ...  save the indexes of tar shards ahead, prune them\n"
          "  info                       version, built-in features, CUDA devices\n"
          "  help                       this text\n"
          "\n"
          "Run 'rill <command> --help' for the options of a command.\n");
}

static int cmd_info(int argc, char** argv) {
  if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    printf("usage: rill info\nPrints the version, the features built in and the CUDA devices.\n");
    return 0;
  }
  if (argc > 1) {
    fprintf(stderr, "rill info: unexpected argument '%s'\n", argv[1]);
    return 2;
  }
  printf("rill %s\n", rill_version());
  printf("features:\n");
  printf("  jpeg    %s\n", rill_has_feature(RILL_FEATURE_JPEG) ? "yes (libjpeg-turbo)" : "no");
  printf("  png     %s\n", rill_has_feature(RILL_FEATURE_PNG) ? "yes (libpng)" : "no");
  printf("  webp    %s\n", rill_has_feature(RILL_FEATURE_WEBP) ? "yes (libwebp)" : "no");
  printf("  sqlite  %s\n", rill_has_feature(RILL_FEATURE_SQLITE) ? "yes" : "no");
  printf("  gzip    %s\n", rill_has_feature(RILL_FEATURE_GZIP) ? "yes (zlib: gzip-compressed CSV files)" : "no");
  printf("  zstd    %s\n", rill_has_feature(RILL_FEATURE_ZSTD) ? "yes (libzstd: zstd-compressed CSV files)" : "no");
  printf("  cuda    %s\n", rill_has_feature(RILL_FEATURE_CUDA) ? "yes (CUDA runtime)" : "no (built without CUDA)");
  int n = rill_cuda_device_count();
  printf("cuda devices: %d\n", n);
  if (rill_has_feature(RILL_FEATURE_CUDA) && n == 0) {
    rill_stream_t* s = NULL;
    rill_error_t err;
    rill_error_clear(&err);
    if (rill_stream_new_cuda(0, &s, &err) != RILL_OK) printf("  (%s)\n", err.message);
    rill_stream_free(s);
  }
  return 0;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  const char* cmd = argv[1];
  if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(cmd, "--version") || !strcmp(cmd, "version")) {
    printf("rill %s\n", rill_version());
    return 0;
  }
  if (!strcmp(cmd, "info")) return cmd_info(argc - 1, argv + 1);
  if (!strcmp(cmd, "head")) return rill_cmd_head(argc - 1, argv + 1);
  if (!strcmp(cmd, "demo")) return rill_cmd_demo(argc - 1, argv + 1);
  if (!strcmp(cmd, "preview")) return rill_cmd_preview(argc - 1, argv + 1);
  if (!strcmp(cmd, "index")) return rill_cmd_index(argc - 1, argv + 1);
  if (!strcmp(cmd, "bench")) {
    if (argc >= 3 && !strcmp(argv[2], "images")) return rill_cmd_bench_images(argc - 2, argv + 2);
    fprintf(stderr, "rill bench: expected 'images' (rill bench images DIR)\n");
    return 2;
  }
  fprintf(stderr, "rill: unknown command '%s'\n", cmd);
  usage(stderr);
  return 2;
}
