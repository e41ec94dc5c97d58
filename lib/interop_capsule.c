/* PyCapsule destructors for Python bindings that load librill.so with ctypes.
 *
 * A capsule may be destroyed while a Python exception is pending (a consumer unwinding after
 * a stream error); a destructor written in Python cannot run then, so these are in C. They
 * find the CPython capsule functions in the running process (librill does not link Python)
 * and never touch the interpreter's error state. Capsule payloads are allocated with
 * PyMem_RawMalloc by the binding. */
#include <dlfcn.h>
#include <stddef.h>

#include "internal.h"
#include "rill_interop.h"

typedef int (*is_valid_fn)(void* capsule, const char* name);
typedef void* (*get_pointer_fn)(void* capsule, const char* name);
typedef void (*raw_free_fn)(void* p);

typedef struct py_api {
  is_valid_fn is_valid;
  get_pointer_fn get_pointer;
  raw_free_fn raw_free;
} py_api_t;

/* Called with the GIL held: the lookups are serialised by it. */
static const py_api_t* api(void) {
  static py_api_t a;
  static int resolved;
  if (!resolved) {
    *(void**)&a.is_valid = dlsym(RTLD_DEFAULT, "PyCapsule_IsValid");
    *(void**)&a.get_pointer = dlsym(RTLD_DEFAULT, "PyCapsule_GetPointer");
    *(void**)&a.raw_free = dlsym(RTLD_DEFAULT, "PyMem_RawFree");
    resolved = 1;
  }
  return (a.is_valid && a.get_pointer && a.raw_free) ? &a : NULL;
}

/* The payload of a capsule named `name`, or NULL (renamed by a consumer, or no Python). */
static void* payload(void* capsule, const char* name, const py_api_t** out) {
  const py_api_t* a = api();
  *out = a;
  if (a == NULL || capsule == NULL || !a->is_valid(capsule, name)) return NULL;
  return a->get_pointer(capsule, name);
}

void rill_pycapsule_destroy_schema(void* capsule) {
  const py_api_t* a;
  struct ArrowSchema* s = payload(capsule, "arrow_schema", &a);
  if (s == NULL) return;
  if (s->release != NULL) s->release(s);
  a->raw_free(s);
}

void rill_pycapsule_destroy_array(void* capsule) {
  const py_api_t* a;
  struct ArrowArray* arr = payload(capsule, "arrow_array", &a);
  if (arr == NULL) return;
  if (arr->release != NULL) arr->release(arr);
  a->raw_free(arr);
}

void rill_pycapsule_destroy_stream(void* capsule) {
  const py_api_t* a;
  struct ArrowArrayStream* st = payload(capsule, "arrow_array_stream", &a);
  if (st == NULL) return;
  if (st->release != NULL) st->release(st);
  a->raw_free(st);
}

/* DLPack: a consumer renames the capsule to "used_dltensor..." once it owns the tensor; an
 * unconsumed one still holds it and the deleter runs here. The tensor itself was allocated
 * by rill. */
void rill_pycapsule_destroy_dltensor(void* capsule) {
  const py_api_t* a;
  DLManagedTensor* t = payload(capsule, "dltensor", &a);
  if (t != NULL && t->deleter != NULL) t->deleter(t);
}

void rill_pycapsule_destroy_dltensor_versioned(void* capsule) {
  const py_api_t* a;
  DLManagedTensorVersioned* t = payload(capsule, "dltensor_versioned", &a);
  if (t != NULL && t->deleter != NULL) t->deleter(t);
}
