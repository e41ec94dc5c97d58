/* Subcommands of the rill command-line tool. Each returns the process exit code:
 * 0 success, 1 runtime error (the message names the file), 2 usage error. */
#ifndef RILL_BIN_COMMANDS_H
#define RILL_BIN_COMMANDS_H

int rill_cmd_head(int argc, char** argv);         /* bin/cmd_head.c */
int rill_cmd_demo(int argc, char** argv);         /* bin/cmd_image.c */
int rill_cmd_preview(int argc, char** argv);      /* bin/cmd_image.c */
int rill_cmd_bench_images(int argc, char** argv); /* bin/cmd_image.c */
int rill_cmd_index(int argc, char** argv);        /* bin/cmd_index.c */

/* Seconds on the monotonic clock (bin/rill.c): the commands' timings. */
double rill_cli_now_s(void);

/* A count given as an argument (bin/rill.c): decimal digits only (a sign, blanks, other text,
 * nothing at all and a value outside [lo, hi] are refused). 0, or -1. */
int rill_cli_count(const char* v, long long lo, long long hi, long long* out);

/* The positional paths list[0..*n) with each one that names no file and holds a brace
 * replaced by the paths of its brace pattern (rill_expand_braces: "shards/train-{000..009}.tar"
 * quoted, or from a shell without brace expansion), at most `max` in all (list has room for
 * them). 0, or 2 with the reason printed (a bad pattern, too many paths). The paths stay
 * valid until the process exits. */
int rill_cli_expand_paths(const char* cmd, const char** list, int* n, int max);

#endif
