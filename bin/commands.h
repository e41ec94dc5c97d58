/* Subcommands of the rill command-line tool. Each returns the process exit code:
 * 0 success, 1 runtime error (the message names the file), 2 usage error. */
#ifndef RILL_BIN_COMMANDS_H
#define RILL_BIN_COMMANDS_H

int rill_cmd_head(int argc, char** argv);         /* bin/cmd_head.c */
int rill_cmd_demo(int argc, char** argv);         /* bin/cmd_image.c */
int rill_cmd_preview(int argc, char** argv);      /* bin/cmd_image.c */
int rill_cmd_bench_images(int argc, char** argv); /* bin/cmd_image.c */

/* A count given as an argument (bin/rill.c): decimal digits only (a sign, blanks, other text,
 * nothing at all and a value outside [lo, hi] are refused). 0, or -1. */
int rill_cli_count(const char* v, long long lo, long long hi, long long* out);

#endif
