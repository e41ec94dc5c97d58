/* Per-thread scratch state: the one registry the library's files use for state kept per
 * worker thread (decoder objects, temporary buffers). Each thread holds a list of
 * (kind, state) entries; a thread-specific key's destructor frees the list when the thread
 * exits, and an exit handler frees the list of the thread that exits the process. */
#include <pthread.h>
#include <stdlib.h>

#include "addon.h"

typedef struct entry {
  const rill__scratch_kind_t* kind;
  struct entry* next;
  /* the state follows, RILL_ALIGN-aligned */
} entry_t;

#define STATE_OFFSET ((sizeof(entry_t) + RILL_ALIGN - 1) / RILL_ALIGN * RILL_ALIGN)

static pthread_key_t key;
static int key_ok;
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static _Thread_local entry_t* t_list;

static void list_free(entry_t* e) {
  while (e) {
    entry_t* next = e->next;
    if (e->kind->destroy) e->kind->destroy((uint8_t*)e + STATE_OFFSET);
    rill__free(e);
    e = next;
  }
}

static void thread_exit(void* list) {
  list_free(list);
  t_list = NULL;
}

static void process_exit(void) {
  entry_t* list = t_list;
  t_list = NULL;
  if (key_ok) pthread_setspecific(key, NULL);
  list_free(list);
}

static void key_init(void) {
  key_ok = pthread_key_create(&key, thread_exit) == 0;
  if (key_ok) atexit(process_exit);
}

void* rill__scratch(const rill__scratch_kind_t* kind) {
  for (entry_t* e = t_list; e; e = e->next)
    if (e->kind == kind) return (uint8_t*)e + STATE_OFFSET;
  pthread_once(&key_once, key_init);
  if (!key_ok) return NULL;
  entry_t* e = rill__calloc(1, STATE_OFFSET + (kind->size > 0 ? kind->size : 1));
  if (!e) return NULL;
  e->kind = kind;
  e->next = t_list;
  if (pthread_setspecific(key, e) != 0) {
    rill__free(e);
    return NULL;
  }
  t_list = e;
  return (uint8_t*)e + STATE_OFFSET;
}
