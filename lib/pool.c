/* Worker threads: a FIFO task queue guarded by one mutex and condition variable. A thread
 * that waits for a group of tasks runs queued tasks meanwhile, so nested splitting (a chunk
 * task that splits a stage into row tasks and waits for them) never deadlocks, and a pool
 * without threads runs everything on the waiting thread. */
#include <pthread.h>

#include "engine.h"

struct rill__workers {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  rill__task_t* head;
  rill__task_t* tail;
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

static rill__task_t* pop_locked(rill__workers_t* w) {
  rill__task_t* t = w->head;
  if (t) {
    w->head = t->next;
    if (!w->head) w->tail = NULL;
    t->next = NULL;
  }
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
  pthread_mutex_lock(&w->mu);
  task->next = NULL;
  task->group->pending++;
  if (w->tail)
    w->tail->next = task;
  else
    w->head = task;
  w->tail = task;
  pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
}

void rill__workers_wait(rill__workers_t* w, rill__group_t* group) {
  pthread_mutex_lock(&w->mu);
  while (group->pending > 0) {
    rill__task_t* t = pop_locked(w);
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
  rill__task_t** pp = &w->head;
  rill__task_t* prev = NULL;
  while (*pp) {
    rill__task_t* t = *pp;
    if (t->group == group) {
      *pp = t->next;
      t->next = NULL;
      group->pending--;
      n++;
    } else {
      prev = t;
      pp = &t->next;
    }
  }
  w->tail = prev;
  if (n && group->pending == 0) pthread_cond_broadcast(&w->cv);
  pthread_mutex_unlock(&w->mu);
  return n;
}
