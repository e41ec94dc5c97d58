/* Arrow C Stream export of a dataframe: an iterator pulls (and computes) one record batch per
 * get_next call; each batch is exported zero-copy by rill_row_export_arrow and holds its own
 * references, so the consumer may keep it after the stream moves on or is released. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "addon.h"
#include "rill_interop.h"

#define DEFAULT_BATCH_ROWS 65536

typedef struct xstream {
  rill_df_t* keep;        /* the caller's dataframe (a reference) */
  rill_df_t* batched;     /* the batches of `keep` when it was not batched, or NULL */
  rill_df_t* iterated;    /* keep or batched */
  rill_iter_t* it;
  rill_iter_opts_t opts;
  int* columns;           /* columns of `iterated`, one per exported field */
  int ncolumns;
  int64_t batch_rows;
  char last_error[RILL_ERROR_MESSAGE_SIZE + 64];
} xstream_t;

static int errno_of(int code) {
  switch (code) {
  case RILL_ENOMEM: return ENOMEM;
  case RILL_EINVAL: return EINVAL;
  case RILL_ENOTSUP: return ENOSYS;
  default: return EIO;
  }
}

static void set_error(xstream_t* xs, const rill_error_t* e) {
  snprintf(xs->last_error, sizeof xs->last_error, "%s (%s)", e->message, rill_strerror(e->code));
}

static int stream_get_schema(struct ArrowArrayStream* s, struct ArrowSchema* out) {
  xstream_t* xs = s->private_data;
  rill_error_t e;
  rill_error_clear(&e);
  out->release = NULL;
  const rill_array_t** empty = rill__calloc((size_t)(xs->ncolumns > 0 ? xs->ncolumns : 1),
                                            sizeof(*empty));
  if (empty == NULL) {
    snprintf(xs->last_error, sizeof xs->last_error, "out of memory");
    return ENOMEM;
  }
  int rc = RILL_OK;
  for (int i = 0; i < xs->ncolumns && rc == RILL_OK; i++) {
    const rill_field_t* f = rill_df_field(xs->iterated, xs->columns[i]);
    rill_array_t* a = NULL;
    rc = rill_array_new(f->type, 0, &a, &e);
    empty[i] = a;
  }
  struct ArrowArray arr;
  arr.release = NULL;
  if (rc == RILL_OK) {
    rill_row_t row = {0, xs->ncolumns, (const rill_array_t* const*)empty};
    rc = rill_row_export_arrow(&row, xs->iterated, xs->columns, out, &arr, &e);
  }
  if (arr.release != NULL) arr.release(&arr);
  for (int i = 0; i < xs->ncolumns; i++) rill_array_release(empty[i]);
  rill__free(empty);
  if (rc != RILL_OK) {
    set_error(xs, &e);
    return errno_of(rc);
  }
  return 0;
}

static int stream_get_next(struct ArrowArrayStream* s, struct ArrowArray* out) {
  xstream_t* xs = s->private_data;
  rill_error_t e;
  rill_error_clear(&e);
  out->release = NULL;
  int rc = RILL_OK;
  if (xs->it == NULL) rc = rill_iter_new(xs->iterated, &xs->opts, &xs->it, &e);
  rill_row_t row;
  if (rc == RILL_OK) rc = rill_iter_next(xs->it, &row, &e);
  if (rc == RILL_END) return 0; /* out->release == NULL: end of stream */
  if (rc == RILL_OK) {
    struct ArrowSchema schema;
    rc = rill_row_export_arrow(&row, xs->iterated, xs->columns, &schema, out, &e);
    if (rc == RILL_OK) schema.release(&schema);
  }
  if (rc != RILL_OK) {
    set_error(xs, &e);
    return errno_of(rc);
  }
  return 0;
}

static const char* stream_get_last_error(struct ArrowArrayStream* s) {
  xstream_t* xs = s->private_data;
  return xs->last_error[0] != '\0' ? xs->last_error : NULL;
}

static void xstream_free(xstream_t* xs) {
  if (xs == NULL) return;
  rill_iter_free(xs->it);
  rill_df_free(xs->batched);
  rill_df_free(xs->keep);
  rill__free(xs->columns);
  rill__free(xs);
}

static void stream_release(struct ArrowArrayStream* s) {
  if (s == NULL || s->release == NULL) return;
  xstream_free(s->private_data);
  s->private_data = NULL;
  s->release = NULL;
}

int rill_df_export_stream(rill_df_t* df, const rill_iter_opts_t* opts, struct ArrowArrayStream* out,
                          rill_error_t* err) {
  if (out != NULL) out->release = NULL;
  if (df == NULL || out == NULL)
    return rill__fail(err, RILL_EINVAL, "rill_df_export_stream: NULL argument");
  rill_iter_opts_t defaults;
  memset(&defaults, 0, sizeof defaults);
  if (opts == NULL) opts = &defaults;
  int ncol = opts->columns != NULL ? opts->ncolumns : rill_df_ncolumns(df);
  if (ncol <= 0)
    return rill__fail(err, RILL_EINVAL, "rill_df_export_stream: no columns to export");
  for (int i = 0; opts->columns != NULL && i < ncol; i++)
    if (rill_df_field(df, opts->columns[i]) == NULL)
      return rill__bad_column(err, "rill_df_export_stream", df, opts->columns[i]);
  if (opts->batch_rows < 0)
    return rill__fail(err, RILL_EINVAL, "rill_df_export_stream: negative batch_rows %" PRId64, opts->batch_rows);
  xstream_t* xs = rill__calloc(1, sizeof *xs);
  int* cols = rill__calloc((size_t)ncol, sizeof(int));
  if (xs == NULL || cols == NULL) {
    rill__free(xs);
    rill__free(cols);
    return rill__fail(err, RILL_ENOMEM, "rill_df_export_stream: out of memory");
  }
  xs->columns = cols;
  xs->ncolumns = ncol;
  for (int i = 0; i < ncol; i++) cols[i] = opts->columns != NULL ? opts->columns[i] : i;
  xs->batch_rows = opts->batch_rows > 0 ? opts->batch_rows : DEFAULT_BATCH_ROWS;
  rill__df_retain(df);
  xs->keep = df;
  int rc;
  xs->opts = *opts;
  if (rill__df_batch_rows(df) > 0) {
    xs->iterated = xs->keep;
  } else {
    rc = rill_df_batch(xs->keep, cols, ncol, xs->batch_rows, NULL, &xs->batched, err);
    if (rc != RILL_OK) goto fail;
    xs->iterated = xs->batched;
    /* the batched dataframe holds exactly the chosen columns, in order */
    for (int i = 0; i < ncol; i++) cols[i] = i;
    xs->opts.columns = NULL;
    xs->opts.ncolumns = 0;
  }
  if (xs->opts.columns != NULL) xs->opts.columns = xs->columns;
  *out = (struct ArrowArrayStream){.get_schema = stream_get_schema,
                                   .get_next = stream_get_next,
                                   .get_last_error = stream_get_last_error,
                                   .release = stream_release,
                                   .private_data = xs};
  return RILL_OK;
fail:
  xstream_free(xs);
  return rc;
}

int rill_df_export_stream_ex(rill_df_t* df, const rill_iter_opts_t* opts, const rill_arrow_stream_opts_t* sopts,
                             struct ArrowArrayStream* out, rill_error_t* err) {
  rill_iter_opts_t o;
  memset(&o, 0, sizeof o);
  if (opts != NULL) o = *opts;
  if (sopts != NULL && sopts->batch_rows != 0) o.batch_rows = sopts->batch_rows;
  return rill_df_export_stream(df, &o, out, err);
}
