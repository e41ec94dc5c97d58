/* The stage runner's state, shared by the runner (stage.c), its task splitting (tasks.c)
 * and the execution context (exec.c). Engine only; not installed. */
#ifndef RILL_STAGE_H
#define RILL_STAGE_H

#include "engine.h"

struct run;

/* The execution context of one call of a stage function. */
struct rill_exec {
  const int64_t* rows;
  int64_t n;
  int64_t first;    /* index of the call's first cell in the stage's cells */
  int64_t epoch;
  uint64_t seed;
  int column;
  int worker;
  rill_stream_t* stream;
  struct run* run;  /* the stage run, for rill__exec_count_nulled */
};

/* One output of a stage run: the stage's own column, or one requested column of a source
 * group (all filled by the same calls). */
typedef struct member {
  rill__column_t* c;
  int col;            /* index in the frame's dataframe */
  int gi;             /* a group's column: its index in the group (outs[gi]) */
  rill__node_t* node;
  int fixed;
  int64_t cell;       /* fixed: bytes per cell (rill_type_cell_bytes) */
  int fresh;          /* fixed: the output's buffer is fresh and not mapped yet (a first batch's):
                       * each call maps the part it writes, on its own thread (rill__call_range) */
  rill_array_t* out;  /* a split variable-length run's part: its own array; else the output */
} member_t;

typedef struct run {
  rill__chunk_t* ch;
  rill__frame_t* fr;
  rill__column_t* c; /* the stage's column (a group: the first requested one): opts, name */
  rill__node_t* node;
  int col;
  int rowmode; /* a RAISE drops the row and records its error (row mode, top level) */
  int64_t n;
  int nin;
  const rill_array_t* child; /* reduce input */
  rill__srcgroup_t* group;   /* a source group's run */
  int nm;                    /* outputs: m[0..nm) */
  member_t* m;
  int fixed;      /* every output has fixed-shape cells */
  int out_direct; /* var outputs: `out` are still the first call's own arrays */
  pthread_mutex_t mu; /* made by tasks.c for a parallel run only (see `parallel`) */
  uint8_t* fate;
  int64_t nulled, nfate;
  int fail_rc; /* a RAISE outside row mode: the chunk fails with the first cell's error */
  int64_t fail_cell;
  int timed;             /* the calls are timed (else their time is estimated: run_timed) */
  double scale;          /* the run's clock (clock.h): ns per tick, or 0 for CLOCK_MONOTONIC */
  _Atomic int64_t ns;    /* time spent in the stage function, summed over the run's calls, in
                          * the run's clock (ticks or ns) until the run ends */
  _Atomic int64_t calls; /* calls of the stage function */
  int parallel;          /* call ranges of the run may run at once (tasks.c): ns and calls are
                          * added with atomic read-modify-writes, else with plain loads/stores */
  /* a task's part of a split variable-length stage: cells [base, base+n) of `top`, whose
   * fate, counters, errors and mutex are shared; its var outputs are the part's own arrays */
  int64_t base;
  struct run* top;
  member_t m1; /* the one output of a stage that is not a group */
  /* not cleared by run_stage (the large members last): in[i] is read for i < nin only, and
   * fail_err only once fail_rc < 0 */
  const rill_array_t* in[RILL__MAX_INPUTS];
  rill_error_t fail_err;
} run_t;

/* Calls the stage function for cells [a, b) of run R (several calls when cells fail) and
 * applies the stage's on_error to the failed cells. */
void rill__call_range(run_t* R, int64_t a, int64_t b);
/* Moves cells [s, s+k) of `piece` (a window over a fixed output, or a var array) into the
 * output of member mb at a+s. RILL_OK or RILL_ENOMEM. */
int rill__commit(run_t* R, member_t* mb, rill_array_t* piece, int64_t a, int64_t s, int64_t k);
/* Data bytes that k cells of mb's output are expected to take (0: unknown). */
int64_t rill__expect_bytes(const member_t* mb, int64_t k);
/* tasks.c: computes every cell of R, split into tasks on the worker threads when it pays. */
void rill__run_cells(run_t* R);

#endif /* RILL_STAGE_H */
