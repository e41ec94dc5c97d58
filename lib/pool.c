/* Worker threads: a task queue ordered by priority (lower first; first in, first out among
 * equal priorities), guarded by one mutex and condition variable. The iterator gives every
 * chunk a priority that grows with its position, and the tasks a chunk splits off inherit
 * it, so idle workers always pick the work of the oldest chunk first.
 *
 * A thread that waits for a group runs only queued tasks that are at least as urgent as the
 * group (priority <= the group's): the group's own tasks and those of older chunks, never
 * the work of later chunks; otherwise it sleeps. Nested splitting (a chunk task that splits
 * a stage into row tasks and waits for them) cannot deadlock: the waiter runs its own queued
 * tasks itself, and a pool without threads runs everything on the waiting thread. */
#include <pthread.h>

#include "engine.h"

struct rill__workers {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  rill__task_t* head;
  rill__task_t* tail;
  rill__task_t* last; /* the task inserted last (a hint for runs of equal priority) */
  int stop;
  int nthreads;
  pthread_t* threads;
};

static _Thread_local int worker_index = -1;

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
  if (--g->pending == 0) pthread_cond_broadcast(&w->cv);
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
    pthread_cond_wait(&w->cv, &w->mu);
  }
  pthread_mutex_unlock(&w->mu);
  return NULL;
}

void rill__workers_free(rill__workers_t* w) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  w->stop = 1;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  for (int i = 0; i < w->nthreads; i++) pthread_join(w->threads[i], NULL);
  pthread_cond_destroy(&w->cv);
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
  if (pthread_cond_init(&w->cv, NULL) != 0) {
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
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

void rill__workers_wait(rill__workers_t* w, rill__group_t* group) {
  pthread_mutex_lock(&w->mu);
  while (group->pending > 0) {
    rill__task_t* t = take_locked(w, group->prio);
    if (t)
      run_locked(w, t);
    else
      pthread_cond_wait(&w->cv, &w->mu);
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
  if (n && group->pending == 0) pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return n;
}
