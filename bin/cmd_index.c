/* rill index: saves the indexes of tar shards in a folder ahead of the runs that open them
 * (rill_tar_opts_t.index_dir), and prunes the folder (rill_tar_index_prune). */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "rill.h"
#include "rill_addons.h"

enum { MAX_SHARDS = 4096 };

static const char USAGE[] =
    "usage: rill index --index-dir DIR [SHARD.tar ...] [--prune]\n"
    "Saves the index of each shard (brace patterns expanded) in folder DIR, where the opens\n"
    "given the same folder (--index-dir of the image commands, index_dir in C and Python) read it\n"
    "instead of the shard's headers; an index already there that is still good is kept.\n"
    "  --prune  then remove from DIR the indexes no open would use: of shards gone or changed,\n"
    "           damaged ones, and temporary files left by a process stopped while saving\n";

int rill_cmd_index(int argc, char** argv) {
  static const char* shards[MAX_SHARDS]; /* one command a process */
  int nshards = 0, prune = 0;
  const char* dir = NULL;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      fputs(USAGE, stdout);
      return 0;
    } else if (!strcmp(a, "--prune")) {
      prune = 1;
    } else if (!strcmp(a, "--index-dir")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "rill index: --index-dir needs a folder\n");
        return 2;
      }
      dir = argv[++i];
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "rill index: unknown option '%s'\n%s", a, USAGE);
      return 2;
    } else if (nshards < MAX_SHARDS) {
      shards[nshards++] = a;
    } else {
      fprintf(stderr, "rill index: more than %d shards\n", MAX_SHARDS);
      return 2;
    }
  }
  if (!dir || (!nshards && !prune)) {
    fprintf(stderr, "rill index: %s\n%s", !dir ? "missing --index-dir DIR" : "give shards, --prune or both", USAGE);
    return 2;
  }
  int rc = rill_cli_expand_paths("index", shards, &nshards, MAX_SHARDS);
  if (rc) return rc;
  rill_error_t err = {0};
  if (nshards) {
    double t0 = rill_cli_now_s();
    rill_df_t* df = NULL;
    if (rill_df_from_tar(shards, nshards, &(rill_tar_opts_t){.index_dir = dir}, &df, &err) < 0) {
      fprintf(stderr, "rill index: %s\n", err.message);
      return 1;
    }
    printf("%d shard%s, %lld samples, indexed in %.1f ms; their indexes are in %s\n", nshards, nshards == 1 ? "" : "s",
           (long long)rill_df_rows(df), (rill_cli_now_s() - t0) * 1e3, dir);
    rill_df_free(df);
  }
  if (prune) {
    int64_t kept = 0, removed = 0;
    if (rill_tar_index_prune(dir, &kept, &removed, &err) < 0) {
      fprintf(stderr, "rill index: %s\n", err.message);
      return 1;
    }
    printf("pruned %s: %lld index%s kept, %lld removed\n", dir, (long long)kept, kept == 1 ? "" : "es",
           (long long)removed);
  }
  return 0;
}
