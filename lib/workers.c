/* Worker threads: a task queue ordered by priority (lower first; first in, first out among
 * equal priorities), guarded by one mutex and condition variable. The iterator gives every
 * chunk a priority that grows with its position, and the tasks a chunk splits off inherit
 * it, so idle workers always pick the work of the oldest chunk first.
 *
 * A thread that waits for a group runs only queued tasks that are at least as urgent as the
 * group (priority <= the group's): the group's own tasks and those of older chunks, never
 * the work of later chunks; otherwise it sleeps. Nested splitting (a chunk task that splits
 * a stage into row tasks and waits for them) cannot deadlock: the waiter runs its own queued
 * tasks itself, and a pool without threads runs everything on the waiting thread.
 *
 * Wake-ups: idle workers sleep on `work_cv`, group waiters on `done_cv`, and each side counts
 * its sleepers, so nobody is signalled in vain. A submit wakes one idle worker (a worker
 * drains the queue before it sleeps again, so one wake-up per task is enough). When no worker
 * sleeps, it wakes the waiters instead if one of them may run the task (its priority is not
 * above theirs); other waiters are not needed for progress, since every task a waiter waits
 * for is queued where it may take it, or runs on a thread that will finish it. A group
 * reaching zero pending tasks wakes the waiters only. Every sleeper rechecks its condition
 * under the mutex before sleeping, so no wake-up is lost.
 *
 * A waiter of a pool with threads polls a few times (WAIT_SPINS rounds of a short pause,
 * releasing the mutex in between) before it sleeps: a chunk whose work takes microseconds
 * then comes back without a futex sleep and wake-up on either side. The spin is bounded per
 * call, so an oversubscribed machine loses at most a few microseconds per wait. */
#include <pthread.h>

#include "engine.h"

struct rill__workers {
  pthread_mutex_t mu;
  pthread_cond_t work_cv; /* idle workers sleep here */
  pthread_cond_t done_cv; /* group waiters sleep here */
  int idle;               /* workers asleep on work_cv */
  int waiting;            /* waiters asleep on done_cv */
  int64_t waiting_prio;   /* >= the priority of every waiter asleep on done_cv */
  rill__task_t* head;
  rill__task_t* tail;
  rill__task_t* last; /* the task inserted last (a hint for runs of equal priority) */
  int stop;
  int nthreads;
  pthread_t* threads;
};

enum { WAIT_SPINS = 20, SPIN_PAUSES = 64 };

static _Thread_local int worker_index = -1;

/* A hint to the CPU that this thread is spinning (lets a sibling hyperthread run). */
static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

int rill__worker_index(void) { return worker_index; }

typedef struct worker_start {
  rill__workers_t* w;
  int index;
} worker_start_t;

static int64_t prio_of(const rill__task_t* t) { return t->group->prio; }

/* Unlinks `t` (whose predecessor is `prev`, NULL at the head). */
static void unlink_locked(rill__workers_t* w, rill__task_t* prev, rill__task_t* t) {
  if (prev)
    prev->next = t->next;
  else
    w->head = t->next;
  if (w->tail == t) w->tail = prev;
  if (w->last == t) w->last = NULL;
  t->next = NULL;
}

static rill__task_t* pop_locked(rill__workers_t* w) {
  rill__task_t* t = w->head;
  if (t) unlink_locked(w, NULL, t);
  return t;
}

/* The first queued task with priority <= `prio`, removed from the queue; NULL if none. The
 * queue is sorted, so only the head can qualify. */
static rill__task_t* take_locked(rill__workers_t* w, int64_t prio) {
  rill__task_t* t = w->head;
  if (!t || prio_of(t) > prio) return NULL;
  unlink_locked(w, NULL, t);
  return t;
}

/* Runs `t` without the lock and marks it finished. Called with the lock held. */
static void run_locked(rill__workers_t* w, rill__task_t* t) {
  rill__group_t* g = t->group;
  pthread_mutex_unlock(&w->mu);
  t->fn(t->arg);
  pthread_mutex_lock(&w->mu);
  if (--g->pending == 0 && w->waiting > 0) pthread_cond_broadcast(&w->done_cv);
}

static void* worker_main(void* arg) {
  worker_start_t* s = arg;
  rill__workers_t* w = s->w;
  worker_index = s->index;
  rill__free(s);
  pthread_mutex_lock(&w->mu);
  for (;;) {
    rill__task_t* t = pop_locked(w);
    if (t) {
      run_locked(w, t);
      continue;
    }
    if (w->stop) break;
    w->idle++;
    pthread_cond_wait(&w->work_cv, &w->mu);
    w->idle--;
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

void rill__workers_free(rill__workers_t* w) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  w->stop = 1;
  pthread_cond_broadcast(&w->work_cv);
  pthread_mutex_unlock(&w->mu);
  for (int i = 0; i < w->nthreads; i++) pthread_join(w->threads[i], NULL);
  pthread_cond_destroy(&w->done_cv);
  pthread_cond_destroy(&w->work_cv);
  pthread_mutex_destroy(&w->mu);
  rill__free(w->threads);
  rill__free(w);
}

int rill__workers_new(int nthreads, rill__workers_t** out) {
  *out = NULL;
  rill__workers_t* w = rill__calloc(1, sizeof *w);
  if (!w) return RILL_ENOMEM;
  if (pthread_mutex_init(&w->mu, NULL) != 0) {
    rill__free(w);
    return RILL_ENOMEM;
  }
  if (pthread_cond_init(&w->work_cv, NULL) != 0) {
    pthread_mutex_destroy(&w->mu);
    rill__free(w);
    return RILL_ENOMEM;
  }
  if (pthread_cond_init(&w->done_cv, NULL) != 0) {
    pthread_cond_destroy(&w->work_cv);
    pthread_mutex_destroy(&w->mu);
    rill__free(w);
    return RILL_ENOMEM;
  }
  if (nthreads > 0) {
    w->threads = rill__calloc((size_t)nthreads, sizeof *w->threads);
    if (!w->threads) {
      rill__workers_free(w);
      return RILL_ENOMEM;
    }
  }
  for (int i = 0; i < nthreads; i++) {
    worker_start_t* s = rill__alloc(sizeof *s);
    if (!s) {
      rill__workers_free(w);
      return RILL_ENOMEM;
    }
    s->w = w;
    s->index = i;
    if (pthread_create(&w->threads[i], NULL, worker_main, s) != 0) {
      rill__free(s);
      rill__workers_free(w);
      return RILL_ENOMEM;
    }
    w->nthreads = i + 1;
  }
  *out = w;
  return RILL_OK;
}

int rill__workers_count(const rill__workers_t* w) { return w ? w->nthreads : 0; }

void rill__workers_submit(rill__workers_t* w, rill__task_t* task) {
  int64_t p = prio_of(task);
  pthread_mutex_lock(&w->mu);
  task->next = NULL;
  task->group->pending++;
  if (!w->tail || prio_of(w->tail) <= p) { /* the usual case: append */
    if (w->tail)
      w->tail->next = task;
    else
      w->head = task;
    w->tail = task;
  } else {
    rill__task_t* prev = NULL;
    if (w->last && prio_of(w->last) <= p && w->last->next && prio_of(w->last->next) > p) {
      prev = w->last; /* right after the previous task of a run of equal priority */
    } else {
      for (rill__task_t* t = w->head; t && prio_of(t) <= p; t = t->next) prev = t;
    }
    if (prev) {
      task->next = prev->next;
      prev->next = task;
    } else {
      task->next = w->head;
      w->head = task;
    }
  }
  w->last = task;
  if (w->idle > 0)
    pthread_cond_signal(&w->work_cv);
  else if (w->waiting > 0 && p <= w->waiting_prio)
    pthread_cond_broadcast(&w->done_cv);
  pthread_mutex_unlock(&w->mu);
}

void rill__workers_wait(rill__workers_t* w, rill__group_t* group) {
  pthread_mutex_lock(&w->mu);
  int spins = 0;
  while (group->pending > 0) {
    rill__task_t* t = take_locked(w, group->prio);
    if (t) {
      run_locked(w, t);
    } else if (w->nthreads > 0 && spins < WAIT_SPINS) {
      spins++;
      pthread_mutex_unlock(&w->mu);
      for (int k = 0; k < SPIN_PAUSES; k++) cpu_relax();
      pthread_mutex_lock(&w->mu);
    } else {
      if (w->waiting++ == 0 || group->prio > w->waiting_prio) w->waiting_prio = group->prio;
      pthread_cond_wait(&w->done_cv, &w->mu);
      w->waiting--;
    }
  }
  pthread_mutex_unlock(&w->mu);
}

int64_t rill__workers_cancel(rill__workers_t* w, rill__group_t* group) {
  int64_t n = 0;
  pthread_mutex_lock(&w->mu);
  rill__task_t* prev = NULL;
  rill__task_t* t = w->head;
  while (t) {
    rill__task_t* next = t->next;
    if (t->group == group) {
      unlink_locked(w, prev, t);
      group->pending--;
      n++;
    } else {
      prev = t;
    }
    t = next;
  }
  if (n && group->pending == 0 && w->waiting > 0) pthread_cond_broadcast(&w->done_cv);
  pthread_mutex_unlock(&w->mu);
  return n;
}
