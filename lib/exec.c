/* The execution context handed to stage functions (rill_exec_t): the rows of the call, the
 * epoch, the worker, the stream, deterministic generators and output allocation. The stage
 * runner (stage.c) fills it for each call. */
#include "stage.h"

/* ---------------------------------------------------------------- execution context */

rill_rng_t rill_exec_rng(const rill_exec_t* exec, int64_t i) {
  return rill__exec_rng_of(exec, i, exec ? exec->column : 0);
}
rill_rng_t rill__exec_rng_of(const rill_exec_t* exec, int64_t i, int column) {
  if (!exec) return rill_rng_seeded(0, 0, i, 0);
  int64_t row = (i >= 0 && i < exec->n) ? exec->rows[i] : -1 - i;
  return rill_rng_seeded(exec->seed, exec->epoch, row, column);
}
const int64_t* rill_exec_rows(const rill_exec_t* exec) { return exec ? exec->rows : NULL; }
int64_t rill_exec_epoch(const rill_exec_t* exec) { return exec ? exec->epoch : 0; }
int rill_exec_worker(const rill_exec_t* exec) { return exec ? exec->worker : -1; }
int rill_exec_column(const rill_exec_t* exec) { return exec ? exec->column : -1; }
rill_stream_t* rill_exec_stream(const rill_exec_t* exec) { return exec ? exec->stream : NULL; }
void* rill_exec_cuda_stream(const rill_exec_t* exec) {
  return exec && exec->stream ? rill_stream_cuda_handle(exec->stream) : NULL;
}

int rill_exec_alloc(rill_exec_t* exec, rill_array_t* out, rill_type_t type, int64_t length) {
  (void)exec;
  if (!out || !out->priv || length < 0) return RILL_EINVAL;
  if (out->priv->flags & RILL__ARRAY_SLOT) {
    if (!rill__type_same(&type, &out->type) || length != out->length) return RILL_EINVAL; /* a window's type is valid */
    return RILL_OK;
  }
  if (out->priv->flags & RILL__ARRAY_EXTERNAL) return RILL_EINVAL;
  return rill__array_prepare(out, type, length, false);
}
