/* The public API's argument checks: NULL and out-of-range arguments give RILL_EINVAL with a
 * message (or the documented neutral value) and never a crash; limits that clamp (prefetch,
 * threads); the allocator contract; unknown column names carried into errors. */
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>

#include "engine_common.h"
#include "rill_interop.h"

/* ---------------------------------------------------------------- types */

Test(types, ndim_out_of_range_and_null_type) {
  rill_type_t t = rill_type_scalar(RILL_FLOAT32);
  t.ndim = RILL_MAX_NDIM + 5; /* beyond shape[] */
  char buf[64];
  cr_assert_eq(rill_type_is_fixed(&t), 0);
  cr_assert_eq(rill_type_cell_bytes(&t), -1);
  cr_assert(strstr(rill_type_format(&t, buf, sizeof buf), "invalid ndim"), "%s", buf);
  cr_assert_eq(rill_type_equal(&t, &t), 0);
  t.ndim = -3;
  cr_assert_eq(rill_type_cell_bytes(&t), -1);
  cr_assert(strstr(rill_type_format(&t, buf, sizeof buf), "invalid ndim"), "%s", buf);
  cr_assert_eq(rill_type_is_fixed(NULL), 0);
  cr_assert_eq(rill_type_cell_bytes(NULL), -1);
  cr_assert_eq(rill_type_equal(NULL, &t), 0);
  cr_assert_str_eq(rill_type_format(NULL, buf, sizeof buf), "(null type)");
  cr_assert_null(rill_type_format(&t, NULL, 10));
  rill_error_t err = {0};
  rill_array_t* a = NULL;
  t.ndim = 99;
  RT_FAILS(rill_array_new(t, 1, &a, &err), RILL_EINVAL, "invalid type", err);
  cr_assert_null(a);
}

/* Every dtype's scalar type (taken from a table) and a value that is no dtype (kept as given):
 * the dtype, no dimension, every byte of the shape zero. */
Test(types, scalar_types_of_every_dtype_and_of_no_dtype) {
  const int64_t zero[RILL_MAX_NDIM] = {0};
  int dtypes[] = {0, RILL_BOOL, RILL_INT8, RILL_INT64, RILL_FLOAT32, RILL_STRING, RILL_TIMESTAMP_US,
                  RILL_TIMESTAMP_US + 1, 1000, -1};
  for (size_t i = 0; i < sizeof dtypes / sizeof dtypes[0]; i++) {
    rill_type_t t = rill_type_scalar((rill_dtype_t)dtypes[i]);
    cr_assert_eq((int)t.dtype, dtypes[i]);
    cr_assert_eq(t.ndim, 0, "dtype %d", dtypes[i]);
    cr_assert_eq(memcmp(t.shape, zero, sizeof zero), 0, "dtype %d", dtypes[i]);
  }
  for (int d = RILL_BOOL; d <= RILL_TIMESTAMP_US; d++) {
    rill_type_t t = rill_type_scalar((rill_dtype_t)d);
    cr_assert_eq((int)t.dtype, d);
    cr_assert_neq(strcmp(rill_dtype_name(t.dtype), "invalid"), 0, "dtype %d", d);
    cr_assert(rill_type_equal(&t, &t), "dtype %d", d);
    cr_assert_eq(rill_type_cell_bytes(&t), rill_dtype_size(t.dtype) ? (int64_t)rill_dtype_size(t.dtype) : -1);
  }
  rill_type_t bad = rill_type_scalar((rill_dtype_t)1000);
  char buf[64];
  cr_assert_eq(rill_type_is_fixed(&bad), 0);
  cr_assert_str_eq(rill_type_format(&bad, buf, sizeof buf), "invalid");
}

/* ---------------------------------------------------------------- NULL and out-of-range */

Test(args, null_and_out_of_range_arguments) {
  rill_error_t err = {0};
  rill_array_t* a = NULL;
  rill_df_t* df = NULL;
  rill_iter_t* it = NULL;
  RT_FAILS(rill_array_new(rill_type_scalar(RILL_INT64), 1, NULL, &err), RILL_EINVAL, "out is NULL", err);
  RT_FAILS(rill_array_new(rill_type_scalar(RILL_INT64), -1, &a, &err), RILL_EINVAL, "negative length", err);
  RT_FAILS(rill_array_slice(NULL, 0, 0, &a, &err), RILL_EINVAL, "NULL argument", err);
  RT_FAILS(rill_array_copy(NULL, &a, &err), RILL_EINVAL, "NULL argument", err);
  RT_FAILS(rill_array_sync(NULL, &err), RILL_EINVAL, "NULL array", err);
  RT_FAILS(rill_df_new(-1, &df, &err), RILL_EINVAL, "negative row count", err);
  RT_FAILS(rill_df_new(1, NULL, &err), RILL_EINVAL, "out is NULL", err);
  RT_FAILS(rill_iter_new(NULL, NULL, &it, &err), RILL_EINVAL, "dataframe is NULL", err);
  RT_FAILS(rill_iter_next(NULL, NULL, &err), RILL_EINVAL, "NULL argument", err);
  RT_FAILS(rill_df_from_csv(NULL, NULL, &df, &err), RILL_EINVAL, "required", err);
  RT_FAILS(rill_df_from_files(NULL, 2, NULL, &df, &err), RILL_EINVAL, "required", err);
  RT_FAILS(rill_df_from_image_folder(NULL, NULL, &df, &err), RILL_EINVAL, "required", err);
  RT_FAILS(rill_stream_synchronize(NULL, &err), RILL_EINVAL, "stream is NULL", err);
  /* NULL err is allowed everywhere */
  cr_assert_eq(rill_df_new(-1, &df, NULL), RILL_EINVAL);
  /* queries on NULL give neutral values */
  cr_assert_eq(rill_df_rows(NULL), 0);
  cr_assert_eq(rill_df_ncolumns(NULL), 0);
  cr_assert_eq(rill_df_column(NULL, "x"), RILL_EINVAL);
  cr_assert_null(rill_df_field(NULL, 0));
  cr_assert_eq(rill_array_refcount(NULL), 0);
  cr_assert_eq(rill_array_is_valid(NULL, 0), 0);
  cr_assert_null(rill_array_cell(NULL, 0, NULL));
  cr_assert_eq(rill_rng_u64(NULL), 0);
  cr_assert_eq(rill_iter_seek(NULL, 0), RILL_EINVAL);
  cr_assert_eq(rill_iter_set_epoch(NULL, 0), RILL_EINVAL);
  cr_assert_eq(rill_iter_save(NULL, NULL), RILL_EINVAL);
  cr_assert_eq(rill_iter_restore(NULL, NULL), RILL_EINVAL);
  cr_assert_eq(rill_iter_prefetch(NULL, 1), RILL_EINVAL);
  cr_assert_eq(rill_array_set_null(NULL, 0), RILL_EINVAL);
  cr_assert_eq(rill_array_set_var(NULL, 0, NULL, 0, NULL), RILL_EINVAL);
  cr_assert_eq(rill_array_reserve(NULL, 1), RILL_EINVAL);
  cr_assert_eq(rill_exec_alloc(NULL, NULL, rill_type_scalar(RILL_INT64), 1), RILL_EINVAL);
  cr_assert_eq(rill_array_interchange(NULL, NULL), RILL_EINVAL);
  rill_iter_stats(NULL, NULL);
  rill_iter_free(NULL);
  rill_df_free(NULL);
  rill_array_release(NULL);
  rill_stream_free(NULL);
  /* cells out of range, a NULL shape buffer */
  RT_OK(rill_array_new(rill_type_tensor(RILL_UINT8, 3, (int64_t[]){2, 2, 3}), 2, &a, &err), err);
  cr_assert_eq(rill_array_set_null(a, 2), RILL_EINVAL);
  cr_assert_eq(rill_array_set_null(a, -1), RILL_EINVAL);
  cr_assert_null(rill_array_cell(a, 5, NULL));
  cr_assert_eq(rill_array_cell_shape(a, 0, NULL), 0);
  int64_t shape[RILL_MAX_NDIM];
  cr_assert_eq(rill_array_cell_shape(a, 0, shape), 3);
  rill_array_release(a);
}

/* ---------------------------------------------------------------- null cells */

Test(array, set_null_zeroes_the_cell) {
  rill_error_t err = {0};
  rill_array_t* a;
  RT_OK(rill_array_new(rill_type_tensor(RILL_INT32, 1, (int64_t[]){3}), 4, &a, &err), err);
  memset(a->data, 0xab, (size_t)a->data_size);
  RT_OK(rill_array_set_null(a, 2), err);
  const int32_t* d = a->data;
  for (int i = 0; i < 12; i++) cr_assert_eq(d[i], i / 3 == 2 ? 0 : (int32_t)0xabababab, "value %d", i);
  cr_assert_eq(a->null_count, 1);
  rill_array_release(a);
}

/* A source that writes garbage into every cell and then makes odd rows null. */
static int garbage_source(const int64_t* rows, int64_t n, rill_array_t* out, rill_exec_t* exec, void* ctx,
                          rill_error_t* err) {
  int rc = rill_exec_alloc(exec, out, rill_type_scalar(RILL_INT64), n);
  if (rc < 0) return rill_error_set(err, rc, "alloc");
  for (int64_t i = 0; i < n; i++) {
    ((int64_t*)out->data)[i] = rows[i] % 2 ? (int64_t)0x5555555555555555LL : rows[i];
    if (rows[i] % 2 && (rc = rill_array_set_null(out, i)) < 0) return rill_error_set(err, rc, "null");
  }
  return RILL_OK;
}

Test(array, null_cells_of_a_pipeline_are_zero) {
  rill_error_t err = {0};
  rill_df_t *df, *b;
  RT_OK(rill_df_new(10, &df, &err), err);
  int c = rill_df_add_source(df, "x", rill_type_scalar(RILL_INT64), garbage_source, NULL, NULL,
                             &(rill_stage_opts_t){.nullable = 1}, &err);
  cr_assert(c >= 0, "%s", err.message);
  RT_OK(rill_df_batch(df, &c, 1, 4, NULL, &b, &err), err);
  for (int run = 0; run < 2; run++) {
    rill_iter_t* it;
    RT_OK(rill_iter_new(b, &(rill_iter_opts_t){.threads = run ? 2 : RILL_THREADS_NONE}, &it, &err), err);
    rill_row_t row;
    while (rill_iter_next(it, &row, &err) == RILL_OK) {
      const rill_array_t* a = rill_row_get(&row, 0);
      for (int64_t i = 0; i < a->length; i++) {
        int64_t v = ((const int64_t*)a->data)[i];
        cr_assert_eq(v, (row.index * 4 + i) % 2 ? 0 : row.index * 4 + i, "cell %lld", (long long)i);
      }
    }
    rill_iter_free(it);
  }
  rill_df_free(b);
  rill_df_free(df);
}

/* ---------------------------------------------------------------- prefetch and threads */

Test(iter, huge_prefetch_and_threads_are_clamped, .timeout = 20) {
  counter_t cs;
  counter_init(&cs, 0);
  rill_df_t* df = make_src(10, &cs, &(rill_stage_opts_t){.grain = 1});
  int64_t sizes[][2] = {{INT_MAX, 2}, {1000000, 1000000}, {INT_MAX, INT_MAX}};
  for (int k = 0; k < 3; k++) {
    rill_error_t err = {0};
    rill_iter_t* it;
    RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.prefetch = (int)sizes[k][0], .threads = (int)sizes[k][1]}, &it, &err),
          err);
    rill_row_t row;
    int64_t n = 0;
    while (rill_iter_next(it, &row, &err) == RILL_OK) {
      cr_assert_eq(((const int64_t*)rill_row_get(&row, 0)->data)[0], n);
      n++;
    }
    cr_assert_eq(n, 10);
    rill_iter_free(it);
  }
  rill_df_free(df);
}

/* ---------------------------------------------------------------- allocator */

typedef struct counting {
  _Atomic int64_t allocs, frees;
} counting_t;

static void* counting_alloc(size_t size, size_t align, void* ctx) {
  atomic_fetch_add(&((counting_t*)ctx)->allocs, 1);
  return rt_sys_alloc(size, align);
}
static void counting_free(void* p, void* ctx) {
  atomic_fetch_add(&((counting_t*)ctx)->frees, 1);
  free(p);
}

Test(alloc, blocks_go_back_to_the_allocator_that_made_them) {
  counting_t A = {0}, B = {0};
  rill_error_t err = {0};
  rill_set_allocator(&(rill_allocator_t){counting_alloc, counting_free, &A});
  rill_array_t* a;
  RT_OK(rill_array_new(rill_type_scalar(RILL_STRING), 4, &a, &err), err);
  RT_OK(rill_array_set_var(a, 0, "hello", 5, NULL), err);
  rill_set_allocator(&(rill_allocator_t){counting_alloc, counting_free, &B});
  RT_OK(rill_array_set_var(a, 1, "a longer string that needs more room", 36, NULL), err);
  rill_set_allocator(NULL);
  rill_array_release(a);
  cr_assert(atomic_load(&A.allocs) > 0);
  cr_assert_eq(atomic_load(&A.frees), atomic_load(&A.allocs), "A: %lld allocs, %lld frees",
               (long long)atomic_load(&A.allocs), (long long)atomic_load(&A.frees));
  cr_assert_eq(atomic_load(&B.frees), atomic_load(&B.allocs), "B: %lld allocs, %lld frees",
               (long long)atomic_load(&B.allocs), (long long)atomic_load(&B.frees));
}

/* ---------------------------------------------------------------- unknown column names */

Test(args, unknown_column_name_is_carried_into_errors) {
  rill_error_t err = {0};
  rill_df_t *df, *out = NULL;
  RT_OK(rill_df_new(4, &df, &err), err);
  int bad = rill_df_column(df, "labels");
  cr_assert_eq(bad, RILL_EINVAL);
  RT_FAILS(rill_df_batch(df, &bad, 1, 2, NULL, &out, &err), RILL_EINVAL, "no column named 'labels'", err);
  RT_FAILS(rill_df_filter(df, bad, &out, &err), RILL_EINVAL, "no column named 'labels'", err);
  RT_FAILS(rill_iter_new(df, &(rill_iter_opts_t){.columns = &bad, .ncolumns = 1}, &(rill_iter_t*){0}, &err),
           RILL_EINVAL, "no column named 'labels'", err);
  /* the name is the one of the thread's last failed lookup */
  RT_FAILS(rill_image_flip(df, "f", rill_df_column(df, "img"), 0.5, &err), RILL_EINVAL, "no column named 'img'", err);
  /* an index out of range that did not come from a failed lookup is named by number */
  RT_FAILS(rill_df_filter(df, 7, &out, &err), RILL_EINVAL, "unknown column 7", err);
  /* a lookup on another dataframe is not attributed to this one */
  rill_df_t* other;
  RT_OK(rill_df_new(1, &other, &err), err);
  cr_assert_eq(rill_df_column(other, "zz"), RILL_EINVAL);
  RT_FAILS(rill_df_filter(df, -1, &out, &err), RILL_EINVAL, "unknown column -1 (the dataframe has 0 columns)", err);
  rill_df_free(other);
  rill_df_free(df);
}
