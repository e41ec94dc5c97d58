/* Task splitting: the cells of a stage's chunk are cut into `grain`-cell tasks run by the
 * worker threads (the calling thread runs the first one and helps with the rest). The grain
 * is the stage's own, else picked from the last measured cost per row (tasks of about
 * RILL__HANDOFF_NS of work, engine.h). Fixed-shape outputs are written in place by every
 * task; variable-length outputs are filled per task and appended in order once every task
 * finished (in at most four tasks per thread). */
#include "stage.h"

typedef struct split {
  run_t* R;
  int64_t a, b;
  rill__task_t task;
} split_t;

static void split_main(void* arg) {
  split_t* s = arg;
  rill__call_range(s->R, s->a, s->b);
}

typedef struct vsplit {
  run_t sub;
  rill__task_t task;
} vsplit_t;

static void vsplit_main(void* arg) {
  vsplit_t* v = arg;
  rill__call_range(&v->sub, 0, v->sub.n);
}

/* A stage with variable-length outputs split across threads: each task fills its own arrays
 * (fixed outputs are shared: tasks write disjoint cells), then the parts are appended in
 * order to the stage's outputs. */
static void run_var_split(run_t* R, int64_t grain, int64_t ntasks) {
  rill_iter_t* it = R->ch->it;
  int nm = R->nm;
  vsplit_t* vs = rill__calloc((size_t)ntasks, sizeof *vs);
  member_t* ms = rill__calloc((size_t)ntasks * (size_t)nm, sizeof *ms);
  if (!vs || !ms) {
    rill__free(vs);
    rill__free(ms);
    rill__call_range(R, 0, R->n);
    return;
  }
  int64_t made = 0;
  int ok = 1;
  for (; made < ntasks && ok; made++) {
    run_t* s = &vs[made].sub;
    s->ch = R->ch;
    s->fr = R->fr;
    s->c = R->c;
    s->node = R->node;
    s->col = R->col;
    s->rowmode = R->rowmode;
    s->nin = R->nin;
    s->group = R->group;
    for (int i = 0; i < R->nin; i++) s->in[i] = R->in[i];
    s->fail_cell = -1;
    s->top = R;
    s->base = made * grain;
    s->n = (made + 1 == ntasks ? R->n : (made + 1) * grain) - s->base;
    s->out_direct = 1;
    s->nm = nm;
    s->m = ms + made * nm;
    for (int j = 0; j < nm; j++) {
      s->m[j] = R->m[j];
      if (s->m[j].fixed) continue;
      rill_error_t ae;
      if (rill__node_acquire(R->m[j].node, rill__expect_bytes(&R->m[j], s->n), &s->m[j].out, &ae) != RILL_OK) {
        s->m[j].out = NULL;
        ok = 0;
        break;
      }
    }
    vs[made].task.fn = vsplit_main;
    vs[made].task.arg = &vs[made];
  }
  if (!ok) {
    rill__chunk_fail(R->ch, RILL_ENOMEM, "column '%s': out of memory", R->c->field.name);
  } else {
    rill__group_t g = {.pending = 0, .prio = R->ch->prio};
    for (int64_t t = 1; t < ntasks; t++) {
      vs[t].task.group = &g;
      rill__workers_submit(it->workers, &vs[t].task);
    }
    vsplit_main(&vs[0]);
    rill__workers_wait(it->workers, &g, RILL__WAIT_OLDER);
    R->out_direct = 0;
    for (int j = 0; j < nm && !rill__chunk_failed(R->ch); j++) {
      member_t* mb = &R->m[j];
      if (mb->fixed) continue;
      if (rill__array_prepare(mb->out, mb->c->field.type, R->n, false) != RILL_OK) {
        rill__chunk_fail(R->ch, RILL_ENOMEM, "column '%s': out of memory", mb->c->field.name);
        break;
      }
      int64_t total = 0;
      for (int64_t t = 0; t < ntasks; t++) total += vs[t].sub.m[j].out->data_size;
      if (rill_array_reserve(mb->out, total) != RILL_OK)
        rill__chunk_fail(R->ch, RILL_ENOMEM, "column '%s': out of memory", mb->c->field.name);
      for (int64_t t = 0; t < ntasks && !rill__chunk_failed(R->ch); t++)
        if (rill__commit(R, mb, vs[t].sub.m[j].out, vs[t].sub.base, 0, vs[t].sub.n) != RILL_OK) {
          rill__chunk_fail(R->ch, RILL_ENOMEM, "column '%s': out of memory", mb->c->field.name);
          break;
        }
    }
  }
  for (int64_t t = 0; t < made; t++)
    for (int j = 0; j < nm; j++)
      if (!vs[t].sub.m[j].fixed) rill_array_release(vs[t].sub.m[j].out);
  rill__free(ms);
  rill__free(vs);
}

/* Rows per task: the stage's own grain, else about one hand-off's worth of work at the
 * measured cost per row `nspr`; not measured (0) and no probe possible (variable-length
 * outputs): four tasks per thread (of at least 16 rows), so that a thread busy with a later
 * chunk's first task soon comes back to help the first chunk. */
static int64_t pick_grain(run_t* R, int nthreads, int64_t nspr) {
  int64_t g = R->c->opts.grain;
  if (g > 0) return g;
  if (nspr <= 0) {
    int64_t parts = 4 * ((int64_t)nthreads + 1);
    g = (R->n + parts - 1) / parts;
    return g < 16 ? 16 : g;
  }
  g = RILL__HANDOFF_NS / nspr;
  return g < 1 ? 1 : g;
}

/* A stage not measured yet (its iterator's first chunk) whose cells would be split is timed
 * on this thread first: its first cell, and when that took less than PROBE_NS (too little
 * to tell a cheap stage from a first call's one-off costs) the next PROBE_MORE cells too.
 * The cost per row then picks the grain of the other cells, so that a cheap stage is not cut
 * into tasks worth less than their hand-off (the hand-offs of a 1024-row batch of a trivial
 * map cost more than the whole map), while an expensive one is split from its second cell.
 * Fixed-shape outputs only (every task writes its cells in place). Returns the cost per row
 * in ns (0: not probed) and sets *done to the cells computed. */
enum { PROBE_NS = 2000, PROBE_MORE = 63 };

static int64_t probe(run_t* R, int64_t* done) {
  *done = 0;
  if (!R->fixed || R->n < 2 || R->c->opts.grain > 0) return 0;
  int64_t t0 = atomic_load_explicit(&R->ns, memory_order_relaxed);
  int64_t ns = 0;
  for (int64_t k = 1; *done < R->n - 1; k = PROBE_MORE) {
    int64_t b = *done + k < R->n - 1 ? *done + k : R->n - 1; /* leaves a cell to split */
    rill__call_range(R, *done, b);
    *done = b;
    int64_t dt = atomic_load_explicit(&R->ns, memory_order_relaxed) - t0;
    ns = R->scale > 0 ? (int64_t)((double)dt * R->scale) : dt;
    if (ns >= PROBE_NS || k == PROBE_MORE) break;
  }
  ns /= *done;
  return ns > 0 ? ns : 1;
}

void rill__run_cells(run_t* R) {
  rill_iter_t* it = R->ch->it;
  int nthreads = rill__workers_count(it->workers);
  if (R->c->kind == RILL__COL_REDUCE) {
    for (int64_t i = 0; i < R->n && !rill__chunk_failed(R->ch); i++) rill__call_range(R, i, i + 1);
    return;
  }
  /* maps on a batched dataframe receive whole batches */
  int whole = it->batched && R->fr == &R->ch->frames[0];
  if (whole || R->c->opts.where != RILL_STAGE_CPU || nthreads == 0) {
    rill__call_range(R, 0, R->n);
    return;
  }
  int64_t nspr = atomic_load_explicit(&R->node->ns_per_row, memory_order_relaxed);
  /* the usual case of a cheap stage: less than a hand-off's worth of work (no division) */
  int64_t own = R->c->opts.grain;
  if (own > 0 ? R->n <= own : nspr > 0 && R->n <= RILL__HANDOFF_NS / 2 && R->n * nspr <= RILL__HANDOFF_NS) {
    rill__call_range(R, 0, R->n);
    return;
  }
  int64_t a0 = 0; /* cells computed by the probe */
  int64_t coarse = pick_grain(R, nthreads, 0); /* the rule for an unknown cost */
  int64_t grain = nspr > 0       ? pick_grain(R, nthreads, nspr)
                  : R->n <= coarse ? coarse /* one task: nothing to probe */
                                   : pick_grain(R, nthreads, probe(R, &a0));
  /* Never finer than `coarse` after a probe, which preemption may have slowed (a cheap stage
   * would be cut into tasks of a row or two), nor for variable-length outputs: each task
   * fills arrays of its own, appended in order at the end, and cut finer every task would
   * take pooled arrays fit to its few cells that cells of varied sizes (files) keep
   * outgrowing and trimming: an allocation per task in the steady state instead of none. */
  if ((nspr <= 0 || !R->fixed) && grain < coarse) grain = coarse;
  int64_t ntasks = R->n - a0 > grain ? (R->n - a0 + grain - 1) / grain : 1;
  /* parallel call ranges share the run's mutex, made here (a run on one thread has none); set
   * before any task is queued (the queue's mutex publishes it) */
  if (ntasks > 1 && pthread_mutex_init(&R->mu, NULL) != 0) ntasks = 1;
  R->parallel = ntasks > 1;
  if (!R->parallel) {
    rill__call_range(R, a0, R->n);
    return;
  }
  if (!R->fixed) {
    run_var_split(R, grain, ntasks);
  } else {
    split_t* sp = rill__calloc((size_t)ntasks, sizeof *sp);
    if (!sp) {
      rill__call_range(R, a0, R->n);
    } else {
      rill__group_t g = {.pending = 0, .prio = R->ch->prio};
      for (int64_t t = 0; t < ntasks; t++) {
        sp[t].R = R;
        sp[t].a = a0 + t * grain;
        sp[t].b = t + 1 == ntasks ? R->n : a0 + (t + 1) * grain;
        sp[t].task.fn = split_main;
        sp[t].task.arg = &sp[t];
        sp[t].task.group = &g;
        if (t > 0) rill__workers_submit(it->workers, &sp[t].task);
      }
      rill__call_range(R, sp[0].a, sp[0].b);
      rill__workers_wait(it->workers, &g, RILL__WAIT_OLDER);
      rill__free(sp);
    }
  }
  pthread_mutex_destroy(&R->mu);
  R->parallel = 0;
}
