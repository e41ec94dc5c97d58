/* Worker threads: a process-wide pool of threads, and per iterator a task queue served by
 * some of them.
 *
 * The pool: threads are started on first need and never end while the process runs: an
 * iterator that asks for k threads (rill__workers_new) takes k parked threads and starts new
 * ones when fewer are parked; freeing its queue parks them again for the next iterator, so
 * an iterator costs no thread start or join after the first. Parked threads, and threads
 * with nothing to do, sleep on their own semaphore (no spinning); a queue keeps its sleeping
 * threads on a stack and wakes one per task, so handing threads over (new and free) wakes
 * nobody. The pool's threads are joined when the process exits (or the library is
 * unloaded); those still serving a live iterator are left to the exit. In the child of a
 * fork() only the forking thread exists: the child's pool starts empty (pthread_atfork), and
 * a queue made before the fork is the parent's (rill__workers_forked): its threads do not
 * exist there, and one of them may have held its mutex at the fork (putting itself to sleep
 * after its last task), so the child never touches it.
 *
 * A queue: tasks ordered by priority (lower first; first in, first out among equal
 * priorities), guarded by one mutex. The iterator gives every chunk a priority that grows
 * with its position, and the tasks a chunk splits off inherit it, so idle workers always
 * pick the work of the oldest chunk first. A queue is served only by its own threads, as
 * many as its iterator asked for, whatever other iterators run at the same time.
 *
 * A thread that waits for a group runs only queued tasks that are at least as urgent as the
 * group (priority <= the group's): the group's own tasks and those of older chunks, not the
 * work of later chunks; otherwise it sleeps. A waiter asked not to help (RILL__WAIT_OWN) runs
 * only the group's own tasks that no thread has started; one allowed any task
 * (RILL__WAIT_ANY: an iterating thread waiting for a cheap chunk) runs the oldest queued task
 * whatever its priority, and sleeps only when the queue is empty.
 *
 * Awake threads: while a RILL__WAIT_ANY waiter (the consumer of cheap chunks) computes tasks,
 * or has left its last wait less than RILL__HELP_LATER_NS ago, at most `lean` of the queue's
 * threads are awake (rill__workers_lean; all of them by default): the consumer takes a
 * worker's core rather than be time-sliced with the workers, which leaves a core idle whenever
 * a worker finds the queue empty while a thread queued behind the consumer on the other core
 * waits. A thread that finds more awake than the limit after a task goes back to sleep, and a
 * submit wakes one only while fewer are awake. Once the consumer has been away longer (a
 * training step that blocks), every thread may work again: the next thread to finish a task,
 * or the next submit, wakes one for the queued tasks. A consumer that spends its time away
 * off the CPU (RILL__WAIT_ANY_OFF: it sleeps or blocks between batches, for less than that)
 * leaves its core free: as it returns, the sleeping threads are woken for the queued tasks,
 * and every thread may work until its next wait. Nested splitting (a chunk task that splits
 * a stage into row tasks and waits for them) cannot deadlock: the waiter runs its own queued
 * tasks itself, and a queue without threads runs everything on the waiting thread.
 *
 * Wake-ups: a submit wakes one sleeping thread of the queue (a thread drains the queue
 * before it sleeps again, so one wake-up per task is enough). When none sleeps, it wakes the
 * group waiters (asleep on `done_cv`, counted) if one of them may run the task (its priority
 * is not above theirs); other waiters are not needed for progress, since every task a waiter
 * waits for is queued where it may take it, or runs on a thread that will finish it. A
 * waiter that does not help (an iterating thread whose workers fill the cores) is not counted
 * there: no submit wakes it. A group reaching zero pending tasks wakes the waiters only, and
 * only when one of them waits for that group (a consumer waiting for the oldest chunk sleeps
 * on while later chunks end). Every sleeper rechecks its condition under the mutex before
 * sleeping, so no wake-up is lost.
 *
 * A waiter of a queue with threads first spins for a moment (WAIT_SPIN_NS, reading a counter
 * that every submit and every finished group advances, without the mutex) before it sleeps:
 * a chunk whose work takes a few microseconds then comes back without a futex sleep and
 * wake-up on either side, while a longer wait costs the waiter almost no CPU. */
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdlib.h>

#include "engine.h"

/* A thread of the pool. Its fields other than `tid` and `wake` are written only while it
 * sleeps (by whoever holds it: the pool, or a queue under its mutex) or by itself under its
 * queue's mutex; a post on `wake` publishes them. */
typedef struct pool_thread {
  pthread_t tid;
  sem_t wake;                /* posted once per wake-up */
  rill__workers_t* w;        /* the queue it serves; NULL: end (process exit) */
  int index;                 /* its worker index in that queue */
  struct pool_thread* next;  /* in the pool's parked list, or in its queue's sleeping stack */
} pool_thread_t;

/* The process-wide pool: parked threads. Its memory is the system's (malloc), not the
 * allocator of rill_set_allocator: it outlives every rill object and any allocator change. */
static struct {
  pthread_mutex_t mu;
  pool_thread_t* parked;
  int exiting;              /* the process exits: threads handed back end */
  _Atomic uint64_t gen;     /* advanced in a fork's child: earlier threads do not exist there */
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER};

static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

struct rill__workers {
  pthread_mutex_t mu;
  pthread_cond_t done_cv;  /* group waiters (and rill__workers_free) sleep here */
  pool_thread_t* sleeping; /* its threads asleep on their semaphore, a stack */
  int nsleeping;
  int lean;                /* threads awake at most while the consumer waits (rill__workers_lean) */
  int64_t away;            /* when the RILL__WAIT_ANY waiter left its last wait, or the queue was
                            * made (CLOCK_MONOTONIC ns); 0 while it waits */
  int away_off;            /* its last wait was RILL__WAIT_ANY_OFF: no limit while it is away */
  int waiting;             /* waiters asleep on done_cv */
  int64_t waiting_prio;    /* >= the priority of every waiter asleep on done_cv */
  rill__task_t* head;
  rill__task_t* tail;
  rill__task_t* last; /* the task inserted last (a hint for runs of equal priority) */
  _Atomic uint64_t events; /* advanced (under mu) by every submit and every finished group */
  int stop;                /* being freed: the last thread to fall asleep wakes the freer */
  int nthreads;
  uint64_t gen;            /* the pool generation its threads belong to */
};

enum { WAIT_SPIN_NS = 2000 };

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

/* Advances the counter that spinning waiters watch. Called with the lock held. */
static void event_locked(rill__workers_t* w) {
  atomic_store_explicit(&w->events, atomic_load_explicit(&w->events, memory_order_relaxed) + 1,
                        memory_order_release);
}

/* Runs `t` without the lock and marks it finished. Called with the lock held. */
static void run_locked(rill__workers_t* w, rill__task_t* t) {
  rill__group_t* g = t->group;
  pthread_mutex_unlock(&w->mu);
  t->fn(t->arg);
  pthread_mutex_lock(&w->mu);
  if (--g->pending == 0) {
    event_locked(w);
    if (g->waiters > 0) pthread_cond_broadcast(&w->done_cv);
  }
}

/* How many of the queue's threads may be awake now (see "Awake threads" above): reads the
 * clock while the waiter is away and the limit is below the thread count, so each caller
 * reads it once and passes it on. Called with the lock held. */
static int limit_locked(rill__workers_t* w) {
  if (w->lean >= w->nthreads || (w->away > 0 && w->away_off)) return w->nthreads;
  return w->away > 0 && rill__now_ns() - w->away > RILL__HELP_LATER_NS ? w->nthreads : w->lean;
}

/* A sleeping thread taken off the stack for a queued task, when `limit` (limit_locked) lets
 * one more be awake; NULL otherwise. The caller posts its semaphore. Called with the lock held. */
static pool_thread_t* wake_locked(rill__workers_t* w, int limit) {
  pool_thread_t* t = w->sleeping;
  if (!t || !w->head || w->nthreads - w->nsleeping >= limit) return NULL;
  w->sleeping = t->next;
  w->nsleeping--;
  return t;
}

static void sem_wait_intr(sem_t* s) {
  while (sem_wait(s) != 0 && errno == EINTR) {
  }
}

static void* thread_main(void* arg) {
  pool_thread_t* t = arg;
  for (;;) {
    sem_wait_intr(&t->wake);
    rill__workers_t* w = t->w;
    if (!w) break;
    worker_index = t->index;
    pthread_mutex_lock(&w->mu);
    /* awake: the threads not asleep on the stack, this one among them */
    /* the limit read once a task: it decides both the wake-up and whether to go on */
    int limit = limit_locked(w);
    for (rill__task_t* task; w->nthreads - w->nsleeping <= limit && (task = pop_locked(w));) {
      run_locked(w, task);
      limit = limit_locked(w);
      pool_thread_t* more = wake_locked(w, limit);
      if (more) sem_post(&more->wake);
    }
    t->next = w->sleeping; /* asleep from here on: the queue may hand it back to the pool */
    w->sleeping = t;
    if (++w->nsleeping == w->nthreads && w->stop) pthread_cond_broadcast(&w->done_cv);
    pthread_mutex_unlock(&w->mu);
    worker_index = -1;
  }
  return NULL;
}

/* Ends a sleeping thread that serves no queue and frees it. */
static void thread_end(pool_thread_t* t) {
  t->w = NULL;
  sem_post(&t->wake);
  pthread_join(t->tid, NULL);
  sem_destroy(&t->wake);
  free(t);
}

/* fork(): the pool's mutex is held across the fork, so the child's copy is consistent. In
 * the child the parent's threads do not exist: their records are left (a queue made before
 * the fork may still list them) and the pool starts empty. */
static void pool_prepare(void) { pthread_mutex_lock(&pool.mu); }
static void pool_parent(void) { pthread_mutex_unlock(&pool.mu); }
static void pool_child(void) {
  pool.parked = NULL;
  atomic_fetch_add(&pool.gen, 1);
  pthread_mutex_unlock(&pool.mu);
}

static void pool_init(void) { pthread_atfork(pool_prepare, pool_parent, pool_child); }

/* At exit (or when the library is unloaded): ends the parked threads. */
__attribute__((destructor)) static void pool_exit(void) {
  pthread_mutex_lock(&pool.mu);
  pool.exiting = 1;
  pool_thread_t* list = pool.parked;
  pool.parked = NULL;
  pthread_mutex_unlock(&pool.mu);
  while (list) {
    pool_thread_t* next = list->next;
    thread_end(list);
    list = next;
  }
}

/* Parks the sleeping threads of `list` in the pool. */
static void pool_park(pool_thread_t* list) {
  if (!list) return;
  pthread_mutex_lock(&pool.mu);
  if (!pool.exiting) {
    pool_thread_t* last = list;
    while (last->next) last = last->next;
    last->next = pool.parked;
    pool.parked = list;
    list = NULL;
  }
  pthread_mutex_unlock(&pool.mu);
  while (list) {
    pool_thread_t* next = list->next;
    thread_end(list);
    list = next;
  }
}

void rill__workers_free(rill__workers_t* w) {
  if (!w) return;
  pthread_mutex_lock(&w->mu);
  w->stop = 1;
  /* every task has finished, but a thread woken for a task that another thread took may not
   * be asleep yet (it will be at once) */
  while (w->nsleeping < w->nthreads) pthread_cond_wait(&w->done_cv, &w->mu);
  pool_thread_t* list = w->sleeping;
  w->sleeping = NULL;
  pthread_mutex_unlock(&w->mu);
  pool_park(list);
  pthread_cond_destroy(&w->done_cv);
  pthread_mutex_destroy(&w->mu);
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
  if (pthread_cond_init(&w->done_cv, NULL) != 0) {
    pthread_mutex_destroy(&w->mu);
    rill__free(w);
    return RILL_ENOMEM;
  }
  atomic_init(&w->events, 0);
  if (nthreads <= 0) {
    *out = w;
    return RILL_OK;
  }
  pthread_once(&pool_once, pool_init);
  /* parked threads first (the queue is not shared yet: its fields need no lock) */
  pthread_mutex_lock(&pool.mu);
  w->gen = atomic_load(&pool.gen);
  while (w->nthreads < nthreads && pool.parked) {
    pool_thread_t* t = pool.parked;
    pool.parked = t->next;
    t->w = w;
    t->index = w->nthreads++;
    t->next = w->sleeping;
    w->sleeping = t;
    w->nsleeping++;
  }
  pthread_mutex_unlock(&pool.mu);
  /* then new ones, which start asleep in the queue */
  while (w->nthreads < nthreads) {
    pool_thread_t* t = malloc(sizeof *t);
    if (!t || sem_init(&t->wake, 0, 0) != 0) {
      free(t);
      rill__workers_free(w);
      return RILL_ENOMEM;
    }
    t->w = w;
    t->index = w->nthreads;
    t->next = w->sleeping;
    if (pthread_create(&t->tid, NULL, thread_main, t) != 0) {
      sem_destroy(&t->wake);
      free(t);
      rill__workers_free(w);
      return RILL_ENOMEM;
    }
    w->sleeping = t;
    w->nsleeping++;
    w->nthreads++;
  }
  w->lean = w->nthreads;
  w->away = rill__now_ns();
  *out = w;
  return RILL_OK;
}

/* Sleeping threads taken off the stack for the queued tasks, one a task, as many as the limit
 * lets be awake; linked by `next` (they still sleep: nobody else reads it until the post).
 * The caller posts them with post_taken after unlocking. Called with the lock held. */
static pool_thread_t* take_for_queued_locked(rill__workers_t* w) {
  pool_thread_t* taken = NULL;
  int queued = 0;
  for (const rill__task_t* t = w->head; t && queued < w->nthreads; t = t->next) queued++;
  int limit = limit_locked(w);
  for (pool_thread_t* t; queued-- > 0 && (t = wake_locked(w, limit));) {
    t->next = taken;
    taken = t;
  }
  return taken;
}

static void post_taken(pool_thread_t* taken) {
  while (taken) {
    pool_thread_t* next = taken->next;
    sem_post(&taken->wake);
    taken = next;
  }
}

void rill__workers_lean(rill__workers_t* w, int lean) {
  if (lean < 1) lean = 1;
  pthread_mutex_lock(&w->mu);
  w->lean = lean;
  pool_thread_t* taken = take_for_queued_locked(w); /* raised: threads for the queued tasks */
  pthread_mutex_unlock(&w->mu);
  post_taken(taken);
}

int rill__workers_count(const rill__workers_t* w) { return w ? w->nthreads : 0; }

int rill__workers_forked(const rill__workers_t* w) {
  return w && w->nthreads > 0 && w->gen != atomic_load_explicit(&pool.gen, memory_order_relaxed);
}

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
  event_locked(w);
  pool_thread_t* wake = wake_locked(w, limit_locked(w));
  if (!wake && w->waiting > 0 && p <= w->waiting_prio) pthread_cond_broadcast(&w->done_cv);
  pthread_mutex_unlock(&w->mu);
  if (wake) sem_post(&wake->wake); /* a pool thread outlives every queue: safe unlocked */
}

/* Spins for at most WAIT_SPIN_NS while w->events still reads `seen`. Without the lock. */
static void spin_while(rill__workers_t* w, uint64_t seen) {
  double scale = rill__clk_start();
  int64_t until = rill__clk_now(scale) + (scale > 0 ? (int64_t)(WAIT_SPIN_NS / scale) : WAIT_SPIN_NS);
  do {
    for (int k = 0; k < 8; k++) cpu_relax();
    if (atomic_load_explicit(&w->events, memory_order_acquire) != seen) return;
  } while (rill__clk_now(scale) < until);
}

void rill__workers_wait(rill__workers_t* w, rill__group_t* group, int help) {
  pthread_mutex_lock(&w->mu);
  int spun = 0, any = help >= RILL__WAIT_ANY;
  if (w->nthreads == 0 && help == RILL__WAIT_OWN) help = RILL__WAIT_OLDER; /* nobody else would run the tasks */
  /* RILL__WAIT_ANY takes any task, and any submit wakes it: its priority reads as the largest */
  int64_t reach = any ? INT64_MAX : group->prio;
  if (any) w->away = 0;
  while (group->pending > 0) {
    /* not helping: still runs the group's own task when no thread has taken it yet */
    rill__task_t* t = help || (w->head && w->head->group == group) ? take_locked(w, reach) : NULL;
    if (t) {
      run_locked(w, t);
      spun = 0; /* the group's other tasks may be about to finish elsewhere */
    } else if (w->nthreads > 0 && !spun) {
      spun = 1;
      uint64_t seen = atomic_load_explicit(&w->events, memory_order_relaxed);
      pthread_mutex_unlock(&w->mu);
      spin_while(w, seen);
      pthread_mutex_lock(&w->mu);
    } else if (help) {
      if (w->waiting++ == 0 || reach > w->waiting_prio) w->waiting_prio = reach;
      group->waiters++;
      pthread_cond_wait(&w->done_cv, &w->mu);
      group->waiters--;
      w->waiting--;
    } else { /* takes no submitted task: only the group's end wakes it */
      group->waiters++;
      pthread_cond_wait(&w->done_cv, &w->mu);
      group->waiters--;
    }
  }
  pool_thread_t* taken = NULL;
  if (any) {
    w->away = rill__now_ns();
    w->away_off = help == RILL__WAIT_ANY_OFF;
    if (w->away_off) taken = take_for_queued_locked(w);
  }
  pthread_mutex_unlock(&w->mu);
  post_taken(taken);
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
  if (n && group->pending == 0) {
    event_locked(w);
    if (group->waiters > 0) pthread_cond_broadcast(&w->done_cv);
  }
  pthread_mutex_unlock(&w->mu);
  return n;
}
