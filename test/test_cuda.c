/* CUDA support as seen from a machine of any kind: feature flags, streams, events, copies,
 * the buffer pool, and the CUDA operators' argument checks. On a machine without a device
 * (or a build without CUDA) every CUDA call must fail with RILL_ENODEV and a clear message
 * while CPU pipelines keep working. The checks that need a device live in test/gpu/ (run by
 * `make gpu-check`); the tests here that only make sense without one skip when a device is
 * present. */
#include <math.h>

#include "common.h"
#include "addon.h"

#if RILL_HAVE_CUDA
#define NODEV_TEXT "no CUDA device"
#else
#define NODEV_TEXT "rill was built without CUDA"
#endif

static void skip_if_device(void) {
  if (rill_cuda_device_count() > 0) cr_skip_test("a CUDA device is present: covered by make gpu-check");
}

/* ---------------------------------------------------------------- features */

Test(cuda, feature_flag_matches_build) {
  cr_assert_eq(rill_has_feature(RILL_FEATURE_CUDA), RILL_HAVE_CUDA);
  cr_assert_geq(rill_cuda_device_count(), 0);
#if !RILL_HAVE_CUDA
  cr_assert_eq(rill_cuda_device_count(), 0);
#endif
}

Test(cuda, device_count_zero_without_device) {
  skip_if_device();
  cr_assert_eq(rill_cuda_device_count(), 0);
  cr_assert_eq(rill__cuda_device_count(), 0);
  /* stable across calls */
  cr_assert_eq(rill_cuda_device_count(), 0);
}

/* ---------------------------------------------------------------- streams */

Test(cuda, cpu_stream) {
  rill_error_t err = {0};
  rill_stream_t* s = rill_stream_new_cpu();
  cr_assert_not_null(s);
  cr_assert_null(rill_stream_cuda_handle(s));
  rill_device_t d = rill_stream_device(s);
  cr_assert_eq(d.type, RILL_DEVICE_CPU);
  cr_assert_eq(d.id, 0);
  RT_OK(rill_stream_synchronize(s, &err), err);
  rill_stream_free(s);
  rill_stream_free(NULL);
  cr_assert_null(rill_stream_cuda_handle(NULL));
  cr_assert_eq(rill_stream_device(NULL).type, RILL_DEVICE_CPU);
}

Test(cuda, stream_synchronize_null) {
  rill_error_t err = {0};
  RT_FAILS(rill_stream_synchronize(NULL, &err), RILL_EINVAL, "stream is NULL", err);
  cr_assert_eq(rill_stream_synchronize(NULL, NULL), RILL_EINVAL); /* err may be NULL */
}

Test(cuda, cuda_stream_without_device) {
  skip_if_device();
  rill_error_t err = {0};
  rill_stream_t* s = (rill_stream_t*)&err; /* must be reset to NULL */
  RT_FAILS(rill_stream_new_cuda(0, &s, &err), RILL_ENODEV, NODEV_TEXT, err);
  cr_assert_null(s);
  cr_assert_eq(err.row, -1);
  cr_assert_eq(err.column, -1);
  /* the failure is repeatable and a NULL err is accepted */
  cr_assert_eq(rill_stream_new_cuda(0, &s, NULL), RILL_ENODEV);
  cr_assert_null(s);
  RT_FAILS(rill_stream_new_cuda(3, &s, &err), RILL_ENODEV, NODEV_TEXT, err);
}

Test(cuda, cuda_stream_bad_arguments) {
  rill_error_t err = {0};
  rill_stream_t* s = NULL;
  RT_FAILS(rill_stream_new_cuda(-1, &s, &err), RILL_EINVAL, "invalid CUDA device -1", err);
  cr_assert_null(s);
  RT_FAILS(rill_stream_new_cuda(0, NULL, &err), RILL_EINVAL, "out is NULL", err);
}

Test(cuda, wrapped_stream_without_device) {
  skip_if_device();
  rill_error_t err = {0};
  rill_stream_t* s = (rill_stream_t*)&err; /* must be reset to NULL */
  RT_FAILS(rill_stream_wrap_cuda(0, (void*)0x1234, &s, &err), RILL_ENODEV, NODEV_TEXT, err);
  cr_assert_null(s);
  RT_FAILS(rill_stream_wrap_cuda(0, NULL, &s, &err), RILL_ENODEV, NODEV_TEXT, err); /* legacy default */
  cr_assert_null(s);
}

Test(cuda, wrapped_stream_bad_arguments) {
  rill_error_t err = {0};
  rill_stream_t* s = NULL;
  RT_FAILS(rill_stream_wrap_cuda(-1, NULL, &s, &err), RILL_EINVAL, "invalid CUDA device -1", err);
  cr_assert_null(s);
  RT_FAILS(rill_stream_wrap_cuda(0, NULL, NULL, &err), RILL_EINVAL, "rill_stream_wrap_cuda: out is NULL", err);
  RT_FAILS(rill_stream_wrap_cuda(rill_cuda_device_count(), NULL, &s, &err), RILL_ENODEV, NODEV_TEXT, err);
  cr_assert_null(s);
}

/* An array without an event (host data, complete) orders nothing: no CUDA call is made, so
 * any stream value is accepted, with or without a device. */
Test(cuda, array_stream_wait) {
  rill_error_t err = {0};
  RT_FAILS(rill_array_stream_wait(NULL, NULL, &err), RILL_EINVAL, "rill_array_stream_wait: NULL array", err);
  rill_array_t* a = NULL;
  RT_OK(rill_array_new(rill_type_scalar(RILL_INT32), 4, &a, &err), err);
  cr_assert_null(a->event);
  RT_OK(rill_array_stream_wait(a, NULL, &err), err);
  RT_OK(rill_array_stream_wait(a, (void*)0x1234, &err), err);
  rill_array_release(a);
}

Test(cuda, device_beyond_count) {
  int n = rill_cuda_device_count();
  rill_error_t err = {0};
  rill_stream_t* s = NULL;
  RT_FAILS(rill_stream_new_cuda(n, &s, &err), RILL_ENODEV, NODEV_TEXT, err);
  cr_assert_null(s);
}

/* ---------------------------------------------------------------- internals */

Test(cuda, check_device) {
  rill_error_t err = {0};
  RT_FAILS(rill__cuda_check_device(-2, &err), RILL_EINVAL, "invalid CUDA device -2", err);
  skip_if_device();
  RT_FAILS(rill__cuda_check_device(0, &err), RILL_ENODEV, NODEV_TEXT, err);
}

Test(cuda, allocations_fail_cleanly_without_device) {
  skip_if_device();
  rill_device_t dev = {RILL_DEVICE_CUDA, 0}, pinned = {RILL_DEVICE_CUDA_HOST, 0};
  cr_assert_null(rill__cuda_alloc(dev, 1024));
  cr_assert_null(rill__cuda_alloc(pinned, 1024));
  cr_assert_null(rill__device_alloc(dev, 1024));
  cr_assert_null(rill__device_alloc(pinned, 64));
  /* CPU memory is not this allocator's business */
  cr_assert_null(rill__cuda_alloc((rill_device_t){RILL_DEVICE_CPU, 0}, 64));
  rill__cuda_free(dev, NULL);
  rill__cuda_free(pinned, NULL);
  /* host allocations through the same entry point still work */
  void* p = rill__device_alloc((rill_device_t){RILL_DEVICE_CPU, 0}, 100);
  cr_assert_not_null(p);
  cr_assert_eq((uintptr_t)p % RILL_ALIGN, 0);
  rill__device_free((rill_device_t){RILL_DEVICE_CPU, 0}, p);
  rill_cuda_pool_stats_t st = {.allocs = 7, .reuses = 7, .cached_bytes = 7};
  rill_cuda_pool_stats(&st);
  cr_assert_eq(st.allocs, 0);
  cr_assert_eq(st.reuses, 0);
  cr_assert_eq(st.cached_bytes, 0);
  rill_cuda_pool_stats(NULL);
  cr_assert_eq(rill_cuda_pool_trim(), 0);
}

Test(cuda, events_without_device) {
  skip_if_device();
  rill_error_t err = {0};
  void* ev = &err;
  RT_FAILS(rill__cuda_event_new(0, &ev, &err), RILL_ENODEV, NODEV_TEXT, err);
  cr_assert_null(ev);
  RT_FAILS(rill__cuda_event_new(0, NULL, &err), RILL_EINVAL, "out is NULL", err);
  RT_FAILS(rill__cuda_event_record(NULL, NULL, &err), RILL_EINVAL, "event is NULL", err);
  /* a missing event means "nothing to wait for" */
  RT_OK(rill__event_wait(NULL, NULL, &err), err);
  RT_OK(rill__event_wait(NULL, &err, &err), err);
  cr_assert_eq(rill__cuda_event_query(NULL), 1);
  rill__cuda_event_free(NULL);
}

Test(cuda, host_copies_work_everywhere) {
  rill_error_t err = {0};
  rill_device_t cpu = {RILL_DEVICE_CPU, 0}, pinned = {RILL_DEVICE_CUDA_HOST, 0};
  char src[64], dst[64];
  for (int i = 0; i < 64; i++) src[i] = (char)(i * 3);
  memset(dst, 0, sizeof(dst));
  RT_OK(rill__cuda_memcpy(dst, cpu, src, cpu, sizeof(src), NULL, &err), err);
  cr_assert_arr_eq(dst, src, sizeof(src));
  memset(dst, 0, sizeof(dst));
  /* a zero device type reads as CPU; pinned memory is host memory */
  RT_OK(rill__cuda_memcpy(dst, (rill_device_t){0, 0}, src, pinned, 10, NULL, &err), err);
  cr_assert_arr_eq(dst, src, 10);
  cr_assert_eq(dst[10], 0);
  RT_OK(rill__cuda_memcpy(NULL, cpu, NULL, cpu, 0, NULL, &err), err); /* nothing to copy */
  RT_FAILS(rill__cuda_memcpy(NULL, cpu, src, cpu, 4, NULL, &err), RILL_EINVAL, "NULL buffer", err);
}

Test(cuda, device_copies_without_device) {
  skip_if_device();
  rill_error_t err = {0};
  rill_device_t cpu = {RILL_DEVICE_CPU, 0}, gpu = {RILL_DEVICE_CUDA, 0};
  char a[16] = {1}, b[16] = {0};
  RT_FAILS(rill__cuda_memcpy(b, gpu, a, cpu, sizeof(a), NULL, &err), RILL_ENODEV, NODEV_TEXT, err);
  RT_FAILS(rill__cuda_memcpy(b, cpu, a, gpu, sizeof(a), NULL, &err), RILL_ENODEV, NODEV_TEXT, err);
  cr_assert_eq(b[0], 0, "a failed copy must not write");
}

Test(cuda, host_array_sync_is_noop) {
  rill_error_t err = {0};
  rill_array_t* a = NULL;
  RT_OK(rill_array_new(rill_type_scalar(RILL_INT32), 4, &a, &err), err);
  cr_assert_null(a->event);
  RT_OK(rill_array_sync(a, &err), err);
  rill_array_release(a);
}

/* ---------------------------------------------------------------- dataframes for the operators */

/* A dataframe with columns: "img" uint8[4,6,3] (2 rows, pixel = row*50 + index),
 * "i64" int64, "s" string, "var" uint8[-1,-1,3], "f" float32[2,2,2] (not an image),
 * "big" uint8[2,2,5]. */
static rill_df_t* make_df(void) {
  rill_error_t err = {0};
  rill_array_t* arr[6];
  RT_OK(rill_array_new(rill_type_tensor(RILL_UINT8, 3, (int64_t[]){4, 6, 3}), 2, &arr[0], &err), err);
  uint8_t* px = arr[0]->data;
  for (int i = 0; i < 2 * 72; i++) px[i] = (uint8_t)((i / 72) * 50 + i % 72);
  RT_OK(rill_array_new(rill_type_scalar(RILL_INT64), 2, &arr[1], &err), err);
  ((int64_t*)arr[1]->data)[1] = 5;
  RT_OK(rill_array_new(rill_type_scalar(RILL_STRING), 2, &arr[2], &err), err);
  RT_OK(rill_array_set_var(arr[2], 0, "ab", 2, NULL), err);
  RT_OK(rill_array_set_var(arr[2], 1, "c", 1, NULL), err);
  RT_OK(rill_array_new(rill_type_tensor(RILL_UINT8, 3, (int64_t[]){-1, -1, 3}), 2, &arr[3], &err), err);
  uint8_t pix[12] = {0};
  RT_OK(rill_array_set_var(arr[3], 0, pix, 3, (int64_t[]){1, 1, 3}), err);
  RT_OK(rill_array_set_var(arr[3], 1, pix, 12, (int64_t[]){2, 2, 3}), err);
  RT_OK(rill_array_new(rill_type_tensor(RILL_FLOAT32, 3, (int64_t[]){2, 2, 2}), 2, &arr[4], &err), err);
  RT_OK(rill_array_new(rill_type_tensor(RILL_UINT8, 3, (int64_t[]){2, 2, 5}), 2, &arr[5], &err), err);
  const char* names[6] = {"img", "i64", "s", "var", "f", "big"};
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_arrays(names, (const rill_array_t* const*)arr, 6, 1, &df, &err), err);
  for (int i = 0; i < 6; i++) rill_array_release(arr[i]);
  return df;
}

/* ---------------------------------------------------------------- rill_to_device */

Test(cuda, to_device_argument_errors) {
  rill_error_t err = {0};
  rill_df_t* df = make_df();
  int n = rill_df_ncolumns(df);
  RT_FAILS(rill_to_device(NULL, "x", 0, NULL, &err), RILL_EINVAL, "df is NULL", err);
  RT_FAILS(rill_to_device(df, NULL, 0, NULL, &err), RILL_EINVAL, "name is NULL", err);
  RT_FAILS(rill_to_device(df, "x", 99, NULL, &err), RILL_EINVAL, "unknown column 99", err);
  RT_FAILS(rill_to_device(df, "x", -1, NULL, &err), RILL_EINVAL, "unknown column -1", err);
  RT_FAILS(rill_to_device(df, "x", rill_df_column(df, "s"), NULL, &err), RILL_EINVAL,
           "column 's' has type", err);
  RT_FAILS(rill_to_device(df, "x", rill_df_column(df, "var"), NULL, &err), RILL_EINVAL,
           "only fixed-shape numeric cells", err);
  RT_FAILS(rill_to_device(df, "x", 0, &(rill_to_device_opts_t){.inflight = -1}, &err), RILL_EINVAL,
           "inflight must be in [0, 64], got -1", err);
  RT_FAILS(rill_to_device(df, "x", 0, &(rill_to_device_opts_t){.inflight = 65}, &err), RILL_EINVAL,
           "got 65", err);
  RT_FAILS(rill_to_device(df, "x", 0, &(rill_to_device_opts_t){.device = -3}, &err), RILL_EINVAL,
           "invalid CUDA device -3", err);
  cr_assert_eq(rill_df_ncolumns(df), n, "a failed call must not add a column");
  rill_df_free(df);
}

Test(cuda, to_device_without_device) {
  skip_if_device();
  rill_error_t err = {0};
  rill_df_t* df = make_df();
  int n = rill_df_ncolumns(df);
  RT_FAILS(rill_to_device(df, "x", 0, NULL, &err), RILL_ENODEV, NODEV_TEXT, err);
  RT_FAILS(rill_to_device(df, "y", rill_df_column(df, "i64"), &(rill_to_device_opts_t){.inflight = 4},
                          &err), RILL_ENODEV, NODEV_TEXT, err);
  cr_assert_eq(rill_df_ncolumns(df), n);
  rill_df_free(df);
}

/* ---------------------------------------------------------------- rill_cuda_normalize */

Test(cuda, normalize_argument_errors) {
  rill_error_t err = {0};
  rill_df_t* df = make_df();
  int n = rill_df_ncolumns(df);
  int img = rill_df_column(df, "img");
  RT_FAILS(rill_cuda_normalize(NULL, "x", img, NULL, 0, &err), RILL_EINVAL, "df is NULL", err);
  RT_FAILS(rill_cuda_normalize(df, NULL, img, NULL, 0, &err), RILL_EINVAL, "name is NULL", err);
  RT_FAILS(rill_cuda_normalize(df, "x", 42, NULL, 0, &err), RILL_EINVAL, "unknown column 42", err);
  RT_FAILS(rill_cuda_normalize(df, "x", rill_df_column(df, "f"), NULL, 0, &err), RILL_EINVAL,
           "column 'f' has type float32[2,2,2]; expected uint8[H,W,C]", err);
  RT_FAILS(rill_cuda_normalize(df, "x", rill_df_column(df, "i64"), NULL, 0, &err), RILL_EINVAL,
           "column 'i64' has type", err);
  RT_FAILS(rill_cuda_normalize(df, "x", rill_df_column(df, "var"), NULL, 0, &err), RILL_EINVAL,
           "fixed size", err);
  RT_FAILS(rill_cuda_normalize(df, "x", rill_df_column(df, "big"), NULL, 0, &err), RILL_EINVAL,
           "1 to 4 channels", err);
  RT_FAILS(rill_cuda_normalize(df, "x", img, &(rill_normalize_opts_t){.dtype = RILL_INT32}, 0, &err),
           RILL_EINVAL, "dtype must be float32 or float16, got int32", err);
  RT_FAILS(rill_cuda_normalize(df, "x", img, &(rill_normalize_opts_t){.layout = (rill_layout_t)7}, 0,
                               &err), RILL_EINVAL, "unknown layout 7", err);
  RT_FAILS(rill_cuda_normalize(df, "x", img, &(rill_normalize_opts_t){.flip = 1.5}, 0, &err),
           RILL_EINVAL, "flip must be a probability in [0, 1], got 1.5", err);
  RT_FAILS(rill_cuda_normalize(df, "x", img, &(rill_normalize_opts_t){.flip = NAN}, 0, &err),
           RILL_EINVAL, "flip must be a probability", err);
  RT_FAILS(rill_cuda_normalize(df, "x", img, &(rill_normalize_opts_t){.std = {1, -0.5, 1}}, 0, &err),
           RILL_EINVAL, "channel 1 has mean 0 and std -0.5", err);
  RT_FAILS(rill_cuda_normalize(df, "x", img, &(rill_normalize_opts_t){.mean = {0, 0, INFINITY}}, 0,
                               &err), RILL_EINVAL, "channel 2 has mean inf", err);
  RT_FAILS(rill_cuda_normalize(df, "x", img, NULL, -1, &err), RILL_EINVAL, "invalid CUDA device -1",
           err);
  cr_assert_eq(rill_df_ncolumns(df), n);
  rill_df_free(df);
}

Test(cuda, normalize_without_device) {
  skip_if_device();
  rill_error_t err = {0};
  rill_df_t* df = make_df();
  int img = rill_df_column(df, "img");
  rill_normalize_opts_t o = {.flip = 0.5, .mean = {0.485, 0.456, 0.406}, .std = {0.229, 0.224, 0.225},
                             .dtype = RILL_FLOAT16, .layout = RILL_LAYOUT_CHW};
  RT_FAILS(rill_cuda_normalize(df, "x", img, &o, 0, &err), RILL_ENODEV, NODEV_TEXT, err);
  RT_FAILS(rill_cuda_normalize(df, "x", img, NULL, 0, &err), RILL_ENODEV, NODEV_TEXT, err);
  rill_df_free(df);
}

/* ---------------------------------------------------------------- CPU pipelines unaffected */

static int plus_one(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* exec,
                    void* ctx, rill_error_t* err) {
  int rc = rill_exec_alloc(exec, out, rill_type_scalar(RILL_INT64), in[0]->length);
  if (rc != RILL_OK) return rill_error_set(err, rc, "alloc");
  const int64_t* a = in[0]->data;
  int64_t* o = out->data;
  for (int64_t i = 0; i < in[0]->length; i++) o[i] = a[i] + 1;
  return RILL_OK;
}

Test(cuda, cpu_pipeline_unaffected) {
  rill_error_t err = {0};
  rill_array_t* a = NULL;
  RT_OK(rill_array_new(rill_type_scalar(RILL_INT64), 100, &a, &err), err);
  for (int i = 0; i < 100; i++) ((int64_t*)a->data)[i] = i;
  rill_df_t *df = NULL, *batches = NULL;
  RT_OK(rill_df_from_arrays((const char* const[]){"v"}, (const rill_array_t* const[]){a}, 1, 0, &df,
                            &err), err);
  int v = rill_df_map(df, "v1", rill_type_scalar(RILL_INT64), (int[]){0}, 1, plus_one, NULL, NULL,
                      NULL, &err);
  cr_assert_geq(v, 0, "%s", err.message);
  /* a failed CUDA operator on the same dataframe leaves it usable */
  if (rill_cuda_device_count() == 0)
    cr_assert_eq(rill_to_device(df, "dev", v, NULL, &err), RILL_ENODEV);
  RT_OK(rill_df_batch(df, (int[]){v}, 1, 16, &(rill_batch_opts_t){.pinned = 1}, &batches, &err), err);
  rill_iter_t* it = NULL;
  RT_OK(rill_iter_new(batches, &(rill_iter_opts_t){.threads = 2, .prefetch = 3}, &it, &err), err);
  rill_row_t row;
  int64_t sum = 0, count = 0;
  int rc;
  while ((rc = rill_iter_next(it, &row, &err)) == RILL_OK) {
    const rill_array_t* b = rill_row_get(&row, 0);
    cr_assert(b->device.type == RILL_DEVICE_CPU || b->device.type == RILL_DEVICE_CUDA_HOST);
    RT_OK(rill_array_sync(b, &err), err);
    for (int64_t i = 0; i < b->length; i++) sum += ((const int64_t*)b->data)[i];
    count += b->length;
  }
  cr_assert_eq(rc, RILL_END, "%s", err.message);
  cr_assert_eq(count, 100);
  cr_assert_eq(sum, 5050); /* sum of 1..100 */
  rill_iter_free(it);
  rill_df_free(batches);
  rill_df_free(df);
  rill_array_release(a);
}

static int cuda_stage_fn(const rill_array_t* const* in, int nin, rill_array_t* out, rill_exec_t* exec,
                         void* ctx, rill_error_t* err) {
  *(int*)ctx += 1;
  return rill_error_set(err, RILL_ESTAGE, "must not run without a device");
}

Test(cuda, cuda_stage_fails_at_iter_new_without_device) {
  skip_if_device();
  rill_error_t err = {0};
  rill_array_t* a = NULL;
  RT_OK(rill_array_new(rill_type_scalar(RILL_INT64), 8, &a, &err), err);
  rill_df_t* df = NULL;
  RT_OK(rill_df_from_arrays((const char* const[]){"v"}, (const rill_array_t* const[]){a}, 1, 1, &df,
                            &err), err);
  rill_array_release(a);
  int calls = 0;
  int c = rill_df_map(df, "g", rill_type_scalar(RILL_INT64), (int[]){0}, 1, cuda_stage_fn, &calls, NULL,
                      &(rill_stage_opts_t){.where = RILL_STAGE_CUDA}, &err);
  cr_assert_geq(c, 0, "%s", err.message);
  rill_iter_t* it = NULL;
  RT_FAILS(rill_iter_new(df, &(rill_iter_opts_t){.columns = &c, .ncolumns = 1}, &it, &err), RILL_ENODEV,
           NODEV_TEXT, err);
  cr_assert_null(it);
  cr_assert_eq(calls, 0);
  /* the CPU column of the same dataframe still iterates */
  int v = 0;
  RT_OK(rill_iter_new(df, &(rill_iter_opts_t){.columns = &v, .ncolumns = 1}, &it, &err), err);
  rill_row_t row;
  int n = 0;
  while (rill_iter_next(it, &row, &err) == RILL_OK) n++;
  cr_assert_eq(n, 8);
  rill_iter_free(it);
  rill_df_free(df);
}
