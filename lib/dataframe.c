/* Dataframes: a row count and typed columns (sources and maps), and the derived dataframes
 * made by reduce, batch, shuffle, shard and filter. Dataframes are reference counted: a
 * derived dataframe and an iterator keep their parent alive, so rill_df_free may be called
 * in any order. Once a dataframe has a derived dataframe or an iterator it is frozen:
 * adding a column then returns RILL_EINVAL (add every column first). Nothing is computed
 * here except a filter's kept rows (see rill_df_filter). */
#include <stdio.h>
#include <string.h>

#include "engine.h"

/* ---------------------------------------------------------------- lifetime */

static void column_free(rill__column_t* c) {
  if (!c) return;
  if (c->ctx_free) c->ctx_free(c->ctx);
  if (c->group && --c->group->live == 0) {
    if (c->group->ctx_free) c->group->ctx_free(c->group->ctx);
    pthread_mutex_destroy(&c->group->serial);
    rill__free(c->group);
  }
  rill__free((void*)c->field.name);
  rill__free(c->inputs);
  pthread_mutex_destroy(&c->serial);
  rill__free(c);
}

static void df_destroy(rill_df_t* df) {
  for (int i = 0; i < df->ncols; i++) column_free(df->cols[i]);
  rill__free(df->cols);
  rill__free(df->kept);
  if (df->parent) {
    rill__df_freeze(df->parent, -1);
    rill_df_free(df->parent);
  }
  rill__free(df);
}

void rill__df_retain(rill_df_t* df) { atomic_fetch_add(&df->refs, 1); }
int64_t rill__df_batch_rows(const rill_df_t* df) {
  while (df && rill__df_is_view(df)) df = df->parent;
  return df && df->kind == RILL__DF_BATCH ? df->batch : 0;
}

void rill__df_freeze(rill_df_t* df, int delta) { atomic_fetch_add(&df->frozen, delta); }

void rill_df_free(rill_df_t* df) {
  if (!df) return;
  if (atomic_fetch_sub(&df->refs, 1) == 1) df_destroy(df);
}

static rill_df_t* df_alloc(rill__df_kind_t kind, int64_t rows, rill_df_t* parent) {
  rill_df_t* df = rill__calloc(1, sizeof *df);
  if (!df) return NULL;
  atomic_init(&df->refs, 1);
  atomic_init(&df->frozen, 0);
  df->kind = kind;
  df->rows = rows;
  return df;
}

/* Makes `df` a child of `parent` (reference + freeze). */
static void df_adopt(rill_df_t* df, rill_df_t* parent) {
  df->parent = parent;
  rill__df_retain(parent);
  rill__df_freeze(parent, 1);
}

int rill_df_new(int64_t rows, rill_df_t** out, rill_error_t* err) {
  if (!out) return rill__fail(err, RILL_EINVAL, "rill_df_new: out is NULL");
  *out = NULL;
  if (rows < 0) return rill__fail(err, RILL_EINVAL, "rill_df_new: negative row count %lld", (long long)rows);
  rill_df_t* df = df_alloc(RILL__DF_BASE, rows, NULL);
  if (!df) return rill__fail(err, RILL_ENOMEM, "rill_df_new: out of memory");
  *out = df;
  return RILL_OK;
}

int64_t rill_df_rows(const rill_df_t* df) { return df ? df->rows : 0; }
int rill_df_ncolumns(const rill_df_t* df) { return df ? df->ncols : 0; }

/* The name (and dataframe) of this thread's last failed rill_df_column lookup: a function
 * given the negative index it returned names the column asked for, not just -1. */
static _Thread_local char t_missing[128];
static _Thread_local const rill_df_t* t_missing_df;

int rill_df_column(const rill_df_t* df, const char* name) {
  if (df && name)
    for (int i = 0; i < df->ncols; i++)
      if (strcmp(df->cols[i]->field.name, name) == 0) return i;
  snprintf(t_missing, sizeof t_missing, "%s", name ? name : "(NULL)");
  t_missing_df = df;
  return RILL_EINVAL;
}

int rill__bad_column(rill_error_t* err, const char* who, const rill_df_t* df, int column) {
  int n = df ? df->ncols : 0;
  if (column < 0 && t_missing[0] && t_missing_df == df)
    return rill__fail(err, RILL_EINVAL,
                      "%s: unknown column %d: no column named '%s' (the last failed rill_df_column lookup on "
                      "this dataframe; it has %d columns)", who, column, t_missing, n);
  return rill__fail(err, RILL_EINVAL, "%s: unknown column %d (the dataframe has %d columns)", who, column, n);
}

const rill_field_t* rill_df_field(const rill_df_t* df, int column) {
  if (!df || column < 0 || column >= df->ncols) return NULL;
  return &df->cols[column]->field;
}

/* ---------------------------------------------------------------- columns */

/* A new column appended to df (name copied). The caller fills the rest. */
static int column_append(rill_df_t* df, const char* who, const char* name, rill_type_t type,
                         rill__column_t** out, rill_error_t* err) {
  char tbuf[96];
  if (!name || !*name) return rill__fail(err, RILL_EINVAL, "%s: the column name is empty or NULL", who);
  if (!rill__type_valid(&type))
    return rill__fail(err, RILL_EINVAL, "%s: column '%s' has an invalid type %s", who, name,
                      rill_type_format(&type, tbuf, sizeof tbuf));
  if (rill_df_column(df, name) >= 0)
    return rill__fail(err, RILL_EINVAL, "%s: a column named '%s' already exists", who, name);
  if (df->ncols == df->cap) {
    int ncap = df->cap ? df->cap * 2 : 8;
    rill__column_t** nc = rill__realloc(df->cols, sizeof *nc * (size_t)df->cap, sizeof *nc * (size_t)ncap);
    if (!nc) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", who);
    df->cols = nc;
    df->cap = ncap;
  }
  rill__column_t* c = rill__calloc(1, sizeof *c);
  if (!c) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", who);
  c->field.name = rill__strdup(name);
  if (!c->field.name) {
    rill__free(c);
    return rill__fail(err, RILL_ENOMEM, "%s: out of memory", who);
  }
  if (pthread_mutex_init(&c->serial, NULL) != 0) {
    rill__free((void*)c->field.name);
    rill__free(c);
    return rill__fail(err, RILL_ENOMEM, "%s: cannot create a mutex", who);
  }
  c->field.type = type;
  c->field.device = (rill_device_t){RILL_DEVICE_CPU, 0};
  c->pcol = -1;
  df->cols[df->ncols++] = c;
  *out = c;
  return RILL_OK;
}

static int check_stage(rill_df_t* df, const char* who, int has_fn, const rill_stage_opts_t* o,
                       rill_error_t* err) {
  if (!df) return rill__fail(err, RILL_EINVAL, "%s: the dataframe is NULL", who);
  if (!has_fn) return rill__fail(err, RILL_EINVAL, "%s: the function is NULL", who);
  if (atomic_load(&df->frozen) > 0)
    return rill__fail(err, RILL_EINVAL,
                      "%s: the dataframe already has derived dataframes or iterators; add columns before "
                      "deriving or iterating",
                      who);
  if (o) {
    if (o->where < RILL_STAGE_CPU || o->where > RILL_STAGE_CUDA)
      return rill__fail(err, RILL_EINVAL, "%s: unknown stage placement %d", who, (int)o->where);
    if (o->on_error < RILL_ON_ERROR_RAISE || o->on_error > RILL_ON_ERROR_NULL)
      return rill__fail(err, RILL_EINVAL, "%s: unknown on_error policy %d", who, (int)o->on_error);
    if (o->grain < 0) return rill__fail(err, RILL_EINVAL, "%s: negative grain %lld", who, (long long)o->grain);
    if (o->where == RILL_STAGE_CUDA && o->device < 0)
      return rill__fail(err, RILL_EINVAL, "%s: negative CUDA device %d", who, o->device);
  }
  return RILL_OK;
}

static void stage_setup(rill__column_t* c, const rill_stage_opts_t* o, void* ctx, void (*ctx_free)(void*)) {
  if (o) c->opts = *o;
  c->ctx = ctx;
  c->ctx_free = ctx_free;
  c->field.nullable = c->opts.nullable || c->opts.on_error == RILL_ON_ERROR_NULL;
  if (c->opts.where == RILL_STAGE_CUDA) c->field.device = (rill_device_t){RILL_DEVICE_CUDA, c->opts.device};
}

/* Frees the context of a stage that was not added and returns r, the error: a failed add frees
 * its context exactly once. */
static int drop_ctx(int r, void* ctx, void (*ctx_free)(void*)) {
  if (ctx_free) ctx_free(ctx);
  return r;
}

int rill_df_add_source(rill_df_t* df, const char* name, rill_type_t type, rill_source_fn fn, void* ctx,
                       void (*ctx_free)(void*), const rill_stage_opts_t* opts, rill_error_t* err) {
  rill__column_t* c;
  int r = check_stage(df, "rill_df_add_source", fn != NULL, opts, err);
  if (r == RILL_OK) r = column_append(df, "rill_df_add_source", name, type, &c, err);
  if (r != RILL_OK) return drop_ctx(r, ctx, ctx_free);
  c->kind = RILL__COL_SOURCE;
  c->source = fn;
  stage_setup(c, opts, ctx, ctx_free);
  return df->ncols - 1;
}

int rill__df_add_source_group(rill_df_t* df, const char* const* names, const rill_type_t* types,
                              const int* nullable, int ncolumns,
                              rill__source_group_fn fn, void* ctx, void (*ctx_free)(void*),
                              const rill_stage_opts_t* opts, rill_error_t* err) {
  const char* who = "rill__df_add_source_group";
  int r = check_stage(df, who, fn != NULL, opts, err);
  if (r == RILL_OK && ncolumns < 1) r = rill__fail(err, RILL_EINVAL, "%s: %d columns (at least 1)", who, ncolumns);
  if (r == RILL_OK && (!names || !types)) r = rill__fail(err, RILL_EINVAL, "%s: names or types is NULL", who);
  if (r == RILL_OK && opts && opts->where == RILL_STAGE_CUDA)
    r = rill__fail(err, RILL_EINVAL, "%s: a source group runs on the CPU", who);
  for (int i = 0; r == RILL_OK && i < ncolumns; i++)
    for (int j = 0; r == RILL_OK && j < i; j++)
      if (names[i] && names[j] && strcmp(names[i], names[j]) == 0)
        r = rill__fail(err, RILL_EINVAL, "%s: the column name '%s' appears twice", who, names[i]);
  rill__srcgroup_t* g = NULL;
  if (r == RILL_OK && !(g = rill__calloc(1, sizeof *g))) r = rill__fail(err, RILL_ENOMEM, "%s: out of memory", who);
  if (r == RILL_OK && pthread_mutex_init(&g->serial, NULL) != 0) {
    rill__free(g);
    g = NULL;
    r = rill__fail(err, RILL_ENOMEM, "%s: cannot create a mutex", who);
  }
  int first = df ? df->ncols : 0;
  for (int i = 0; r == RILL_OK && i < ncolumns; i++) {
    rill__column_t* c;
    r = column_append(df, who, names[i], types[i], &c, err);
    if (r != RILL_OK) break;
    c->kind = RILL__COL_SOURCE;
    c->group = g;
    c->gi = i;
    g->live++;
    stage_setup(c, opts, ctx, NULL);
    if (nullable) c->field.nullable = nullable[i] || c->opts.on_error == RILL_ON_ERROR_NULL;
  }
  if (r != RILL_OK) {
    if (g && g->live > 0) { /* take the columns added so far back (the last one frees g) */
      while (df->ncols > first) column_free(df->cols[--df->ncols]);
    } else if (g) {
      pthread_mutex_destroy(&g->serial);
      rill__free(g);
    }
    return drop_ctx(r, ctx, ctx_free);
  }
  g->fn = fn;
  g->ctx = ctx;
  g->ctx_free = ctx_free;
  g->first = first;
  g->n = ncolumns;
  return first;
}

int rill__df_new_source_group(int64_t rows, const char* const* names, const rill_type_t* types,
                              const int* nullable, int ncolumns,
                              rill__source_group_fn fn, void* ctx, void (*ctx_free)(void*),
                              const rill_stage_opts_t* opts, rill_df_t** out, rill_error_t* err) {
  rill_df_t* df = NULL;
  int r = rill_df_new(rows, &df, err);
  if (r != RILL_OK) return drop_ctx(r, ctx, ctx_free);
  r = rill__df_add_source_group(df, names, types, nullable, ncolumns, fn, ctx, ctx_free, opts, err);
  if (r < 0) {
    rill_df_free(df);
    return r;
  }
  *out = df;
  return RILL_OK;
}

/* The column that holds the stage of `column` (a view's column: its parent's, and a column put
 * side by side: its part's, recursively). */
static const rill__column_t* stage_column(const rill_df_t* df, int column) {
  while (df && column >= 0 && column < df->ncols) {
    const rill__column_t* c = df->cols[column];
    if (c->kind == RILL__COL_PARENT) {
      df = df->parent;
      continue;
    }
    if (c->kind != RILL__COL_SOURCE || !rill__df_side_column(c, &df, &column)) return c;
  }
  return NULL;
}

void* rill__df_column_ctx(const rill_df_t* df, int column) {
  const rill__column_t* c = stage_column(df, column);
  return c ? c->ctx : NULL;
}

rill__fn_t rill__df_column_fn(const rill_df_t* df, int column) {
  const rill__column_t* c = stage_column(df, column);
  if (!c) return NULL;
  if (c->kind == RILL__COL_SOURCE) return c->group ? (rill__fn_t)c->group->fn : (rill__fn_t)c->source;
  if (c->kind == RILL__COL_MAP) return (rill__fn_t)c->map;
  return NULL;
}

/* Source `column` of df for a hook's setter `who`, or NULL (err set). */
static rill__column_t* hooked_source(rill_df_t* df, int column, const char* who, rill_error_t* err) {
  if (!df) {
    rill__fail(err, RILL_EINVAL, "%s: the dataframe is NULL", who);
    return NULL;
  }
  if (column < 0 || column >= df->ncols) {
    rill__bad_column(err, who, df, column);
    return NULL;
  }
  rill__column_t* c = df->cols[column];
  if (c->kind != RILL__COL_SOURCE) {
    rill__fail(err, RILL_EINVAL, "%s: column '%s' is not a source of the dataframe", who, c->field.name);
    return NULL;
  }
  return c;
}

int rill__df_set_lend(rill_df_t* df, int column, rill__lend_fn lend, rill_error_t* err) {
  rill__column_t* c = hooked_source(df, column, "rill__df_set_lend", err);
  if (!c) return RILL_EINVAL;
  c->lend = lend;
  return RILL_OK;
}

int rill__df_set_prefetch(rill_df_t* df, int column, rill__prefetch_fn prefetch, rill_error_t* err) {
  rill__column_t* c = hooked_source(df, column, "rill__df_set_prefetch", err);
  if (!c) return RILL_EINVAL;
  c->prefetch = prefetch;
  return RILL_OK;
}

int rill_df_map(rill_df_t* df, const char* name, rill_type_t type, const int* inputs, int ninputs,
                rill_map_fn fn, void* ctx, void (*ctx_free)(void*), const rill_stage_opts_t* opts,
                rill_error_t* err) {
  const char* who = "rill_df_map";
  int r = check_stage(df, who, fn != NULL, opts, err);
  if (r == RILL_OK && (ninputs < 0 || ninputs > RILL__MAX_INPUTS))
    r = rill__fail(err, RILL_EINVAL, "%s: %d inputs (0 to %d allowed)", who, ninputs, RILL__MAX_INPUTS);
  if (r == RILL_OK && ninputs > 0 && !inputs) r = rill__fail(err, RILL_EINVAL, "%s: inputs is NULL", who);
  for (int i = 0; r == RILL_OK && i < ninputs; i++)
    if (inputs[i] < 0 || inputs[i] >= df->ncols)
      r = rill__bad_column(err, who, df, inputs[i]);
  int* in = NULL;
  if (r == RILL_OK && ninputs > 0) {
    in = rill__alloc(sizeof *in * (size_t)ninputs);
    if (!in) r = rill__fail(err, RILL_ENOMEM, "%s: out of memory", who);
  }
  rill__column_t* c;
  if (r == RILL_OK) r = column_append(df, who, name, type, &c, err);
  if (r != RILL_OK) {
    rill__free(in);
    return drop_ctx(r, ctx, ctx_free);
  }
  if (ninputs > 0) memcpy(in, inputs, sizeof *in * (size_t)ninputs);
  c->kind = RILL__COL_MAP;
  c->map = fn;
  c->inputs = in;
  c->ninputs = ninputs;
  stage_setup(c, opts, ctx, ctx_free);
  return df->ncols - 1;
}

/* ---------------------------------------------------------------- derived dataframes */

static int check_parent(rill_df_t* df, const char* who, rill_df_t** out, rill_error_t* err) {
  if (!out) return rill__fail(err, RILL_EINVAL, "%s: out is NULL", who);
  *out = NULL;
  if (!df) return rill__fail(err, RILL_EINVAL, "%s: the dataframe is NULL", who);
  if (df->kind == RILL__DF_BATCH)
    return rill__fail(err, RILL_ENOTSUP, "%s: deriving from a batched dataframe is not supported", who);
  return RILL_OK;
}

/* Copies every column of the parent as a RILL__COL_PARENT column of view `v`. */
static int view_columns(rill_df_t* v, rill_df_t* parent, const char* who, rill_error_t* err) {
  for (int i = 0; i < parent->ncols; i++) {
    rill__column_t* c;
    int r = column_append(v, who, parent->cols[i]->field.name, parent->cols[i]->field.type, &c, err);
    if (r != RILL_OK) return r;
    c->kind = RILL__COL_PARENT;
    c->pcol = i;
    c->field.nullable = parent->cols[i]->field.nullable;
    c->field.device = parent->cols[i]->field.device;
  }
  return RILL_OK;
}

static int make_view(rill_df_t* df, rill__df_kind_t kind, int64_t rows, const char* who, rill_df_t** out,
                     rill_df_t** view, rill_error_t* err) {
  int r = check_parent(df, who, out, err);
  if (r != RILL_OK) return r;
  rill_df_t* v = df_alloc(kind, rows, df);
  if (!v) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", who);
  r = view_columns(v, df, who, err);
  if (r != RILL_OK) {
    df_destroy(v);
    return r;
  }
  *view = v;
  return RILL_OK;
}

int rill_df_shuffle(rill_df_t* df, uint64_t seed, rill_df_t** out, rill_error_t* err) {
  rill_df_t* v;
  int r = make_view(df, RILL__DF_SHUFFLE, df ? df->rows : 0, "rill_df_shuffle", out, &v, err);
  if (r != RILL_OK) return r;
  v->seed = seed;
  df_adopt(v, df);
  *out = v;
  return RILL_OK;
}

int rill_df_shard(rill_df_t* df, int rank, int world, rill_df_t** out, rill_error_t* err) {
  if (out) *out = NULL;
  if (df && (world < 1 || rank < 0 || rank >= world))
    return rill__fail(err, RILL_EINVAL, "rill_df_shard: rank %d of world %d (need 0 <= rank < world)", rank, world);
  int64_t rows = df && rank < df->rows ? (df->rows - rank + world - 1) / world : 0;
  rill_df_t* v;
  int r = make_view(df, RILL__DF_SHARD, rows, "rill_df_shard", out, &v, err);
  if (r != RILL_OK) return r;
  v->rank = rank;
  v->world = world;
  df_adopt(v, df);
  *out = v;
  return RILL_OK;
}

int rill_df_filter(rill_df_t* df, int column, rill_df_t** out, rill_error_t* err) {
  const char* who = "rill_df_filter";
  rill_df_t* v;
  int r = check_parent(df, who, out, err);
  if (r != RILL_OK) return r;
  if (column < 0 || column >= df->ncols)
    return rill__bad_column(err, who, df, column);
  const rill_field_t* f = &df->cols[column]->field;
  if (f->type.dtype != RILL_BOOL || f->type.ndim != 0)
    return rill__fail(err, RILL_EINVAL, "%s: column '%s' is %s, not a scalar bool", who, f->name,
                      rill_dtype_name(f->type.dtype));
  r = make_view(df, RILL__DF_FILTER, 0, who, out, &v, err);
  if (r != RILL_OK) return r;
  /* The kept rows are computed once, now (seed 0, epoch 0): the row count stays fixed. */
  int64_t cap = 64, n = 0;
  int64_t* kept = rill__alloc(sizeof *kept * (size_t)cap);
  rill_iter_t* it = NULL;
  if (!kept) {
    r = rill__fail(err, RILL_ENOMEM, "%s: out of memory", who);
    goto fail;
  }
  rill_iter_opts_t o = {.columns = &column, .ncolumns = 1, .prefetch = RILL_PREFETCH_NONE,
                        .threads = RILL_THREADS_NONE};
  r = rill_iter_new(df, &o, &it, err);
  if (r != RILL_OK) goto fail;
  rill_row_t row;
  while ((r = rill_iter_next(it, &row, err)) == RILL_OK) {
    const rill_array_t* a = rill_row_get(&row, 0);
    if (!rill_array_is_valid(a, 0) || !((const uint8_t*)a->data)[0]) continue;
    if (n == cap) {
      int64_t* nk = rill__realloc(kept, sizeof *kept * (size_t)cap, sizeof *kept * (size_t)cap * 2);
      if (!nk) {
        r = rill__fail(err, RILL_ENOMEM, "%s: out of memory", who);
        goto fail;
      }
      kept = nk;
      cap *= 2;
    }
    kept[n++] = row.index;
  }
  if (r < 0) goto fail;
  rill_iter_free(it);
  v->kept = kept;
  v->rows = n;
  df_adopt(v, df);
  *out = v;
  return RILL_OK;
fail:
  rill_iter_free(it);
  rill__free(kept);
  df_destroy(v);
  return r;
}

int rill_df_slice(rill_df_t* df, int64_t start, int64_t n, rill_df_t** out, rill_error_t* err) {
  const char* who = "rill_df_slice";
  int r = check_parent(df, who, out, err);
  if (r != RILL_OK) return r;
  if (start < 0 || n < 0 || start > df->rows || n > df->rows - start)
    return rill__fail(err, RILL_EINVAL, "%s: %lld rows from row %lld are not within the %lld rows of the dataframe", who,
                      (long long)n, (long long)start, (long long)df->rows);
  rill_df_t* v;
  r = make_view(df, RILL__DF_SLICE, n, who, out, &v, err);
  if (r != RILL_OK) return r;
  v->offset = start;
  df_adopt(v, df);
  *out = v;
  return RILL_OK;
}

int rill_df_take(rill_df_t* df, const int64_t* rows, int64_t n, rill_df_t** out, rill_error_t* err) {
  const char* who = "rill_df_take";
  int r = check_parent(df, who, out, err);
  if (r != RILL_OK) return r;
  if (n < 0 || (n > 0 && !rows))
    return rill__fail(err, RILL_EINVAL, "%s: %lld rows at %p", who, (long long)n, (const void*)rows);
  for (int64_t i = 0; i < n; i++)
    if (rows[i] < 0 || rows[i] >= df->rows)
      return rill__fail(err, RILL_EINVAL, "%s: rows[%lld] is %lld, not a row of the dataframe's %lld", who,
                        (long long)i, (long long)rows[i], (long long)df->rows);
  rill_df_t* v;
  r = make_view(df, RILL__DF_TAKE, n, who, out, &v, err);
  if (r != RILL_OK) return r;
  if (n > 0 && !(v->kept = rill__alloc(sizeof *v->kept * (size_t)n))) {
    df_destroy(v);
    return rill__fail(err, RILL_ENOMEM, "%s: out of memory for %lld rows", who, (long long)n);
  }
  if (n > 0) memcpy(v->kept, rows, sizeof *v->kept * (size_t)n);
  v->kept_hash = rill__hash_i64(rows, n); /* once here, not at each iterator's start */
  df_adopt(v, df);
  *out = v;
  return RILL_OK;
}

int rill_df_batch(rill_df_t* df, const int* columns, int ncolumns, int64_t batch, const rill_batch_opts_t* opts,
                  rill_df_t** out, rill_error_t* err) {
  const char* who = "rill_df_batch";
  int r = check_parent(df, who, out, err);
  if (r != RILL_OK) return r;
  rill_batch_opts_t bo = {0};
  if (opts) bo = *opts;
  if (ncolumns < 1 || !columns) return rill__fail(err, RILL_EINVAL, "%s: no columns chosen", who);
  if (batch < 1) return rill__fail(err, RILL_EINVAL, "%s: batch size %lld (must be >= 1)", who, (long long)batch);
  if (bo.layout != RILL_LAYOUT_HWC && bo.layout != RILL_LAYOUT_CHW)
    return rill__fail(err, RILL_EINVAL, "%s: unknown layout %d", who, (int)bo.layout);
  for (int i = 0; i < ncolumns; i++) {
    if (columns[i] < 0 || columns[i] >= df->ncols)
      return rill__bad_column(err, who, df, columns[i]);
    const rill_type_t* t = &df->cols[columns[i]]->field.type;
    if (bo.layout == RILL_LAYOUT_CHW && t->ndim == 3 && !rill_type_is_fixed(t))
      return rill__fail(err, RILL_ENOTSUP, "%s: column '%s' has variable-shape cells: NCHW needs fixed HWC cells",
                        who, df->cols[columns[i]]->field.name);
  }
  int64_t rows = bo.drop_last ? df->rows / batch : (df->rows + batch - 1) / batch;
  rill_df_t* b = df_alloc(RILL__DF_BATCH, rows, df);
  if (!b) return rill__fail(err, RILL_ENOMEM, "%s: out of memory", who);
  b->batch = batch;
  b->bopts = bo;
  for (int i = 0; i < ncolumns; i++) {
    const rill__column_t* pc = df->cols[columns[i]];
    rill_type_t t = pc->field.type;
    int transpose = bo.layout == RILL_LAYOUT_CHW && t.ndim == 3;
    if (transpose) {
      int64_t h = t.shape[0], w = t.shape[1], ch = t.shape[2];
      t.shape[0] = ch;
      t.shape[1] = h;
      t.shape[2] = w;
    }
    rill__column_t* c;
    r = column_append(b, who, pc->field.name, t, &c, err);
    if (r != RILL_OK) {
      df_destroy(b);
      return r;
    }
    c->kind = RILL__COL_BATCH;
    c->pcol = columns[i];
    c->transpose = transpose;
    c->field.nullable = pc->field.nullable;
    c->field.device = pc->field.device;
  }
  df_adopt(b, df);
  *out = b;
  return RILL_OK;
}

int rill_df_reduce(rill_df_t* df, int column, int64_t k, rill_type_t type, rill_reduce_fn fn, void* ctx,
                   void (*ctx_free)(void*), rill_df_t** out, rill_error_t* err) {
  const char* who = "rill_df_reduce";
  int r = check_parent(df, who, out, err);
  if (r == RILL_OK && !fn) r = rill__fail(err, RILL_EINVAL, "%s: the function is NULL", who);
  if (r == RILL_OK && (column < 0 || column >= df->ncols))
    r = rill__bad_column(err, who, df, column);
  if (r == RILL_OK && k < 1) r = rill__fail(err, RILL_EINVAL, "%s: group size k = %lld (must be >= 1)", who, (long long)k);
  rill_df_t* d = NULL;
  if (r == RILL_OK) {
    d = df_alloc(RILL__DF_REDUCE, (df->rows + k - 1) / k, df);
    if (!d) r = rill__fail(err, RILL_ENOMEM, "%s: out of memory", who);
  }
  rill__column_t* c;
  if (r == RILL_OK) {
    r = column_append(d, who, df->cols[column]->field.name, type, &c, err);
    if (r != RILL_OK) df_destroy(d);
  }
  if (r != RILL_OK) return drop_ctx(r, ctx, ctx_free);
  d->k = k;
  c->kind = RILL__COL_REDUCE;
  c->reduce = fn;
  c->pcol = column;
  stage_setup(c, NULL, ctx, ctx_free);
  df_adopt(d, df);
  *out = d;
  return RILL_OK;
}

/* ---------------------------------------------------------------- row translation */

/* A keyed bijection of [0, n): a 4-round Feistel network on the smallest even number of
 * bits that covers n, with cycle walking back into [0, n). O(1) memory, no per-epoch pass. */
static int64_t permute(uint64_t seed, int64_t epoch, int64_t n, int64_t x) {
  if (n <= 1) return x;
  int bits = 64 - __builtin_clzll((unsigned long long)(n - 1));
  if (bits < 2) bits = 2;
  if (bits & 1) bits++;
  int h = bits / 2;
  uint64_t mask = (1ULL << h) - 1;
  uint64_t key = rill__mix64(seed ^ rill__mix64((uint64_t)epoch + 0x9E3779B97F4A7C15ULL));
  uint64_t v = (uint64_t)x;
  do {
    uint64_t l = v >> h, r = v & mask;
    for (int round = 0; round < 4; round++) {
      uint64_t f = rill__mix64(key + (uint64_t)round * 0xD6E8FEB86659FD93ULL + r) & mask;
      uint64_t nl = r;
      r = l ^ f;
      l = nl;
    }
    v = (l << h) | r;
  } while (v >= (uint64_t)n);
  return (int64_t)v;
}

int64_t rill__view_row(const rill_df_t* df, int64_t epoch, int64_t x) {
  switch (df->kind) {
    case RILL__DF_SHUFFLE: return permute(df->seed, epoch, df->rows, x);
    case RILL__DF_SHARD: return df->rank + x * (int64_t)df->world;
    case RILL__DF_FILTER:
    case RILL__DF_TAKE: return df->kept[x];
    case RILL__DF_SLICE: return df->offset + x;
    default: return x;
  }
}
