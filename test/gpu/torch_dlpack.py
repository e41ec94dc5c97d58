"""torch.from_dlpack consumes rill CUDA batches (run by `make gpu-check`).

Drives librill.so through ctypes: uint8 images -> batch -> rill_to_device -> rill_cuda_normalize
on the GPU, exports each batch with rill_array_export_dlpack_legacy and hands the capsule to
torch. Checks: the tensor is on cuda:0, zero-copy (same pointer), has the right shape and
dtype, equals a numpy reference (each image plain or mirrored), and stays valid after the
iterator moved on (the export holds a reference). The library path comes from RILL_LIB.
"""
import ctypes as C
import os
import sys

import numpy as np
from gpu_checks import Checks
import torch
import torch.utils.dlpack

RILL_UINT8, RILL_INT64, RILL_FLOAT32 = 6, 5, 12
RILL_OK, RILL_END = 0, 1
RILL_LAYOUT_CHW = 1
kDLCUDA = 2
OPTS_RESERVED = 4  # RILL_OPTS_RESERVED: option structs end with this many zero int64s


class Type(C.Structure):
    _fields_ = [("dtype", C.c_int), ("ndim", C.c_int), ("shape", C.c_int64 * 8)]


class Device(C.Structure):
    _fields_ = [("type", C.c_int), ("id", C.c_int)]


class Array(C.Structure):
    _fields_ = [("type", Type), ("length", C.c_int64), ("null_count", C.c_int64),
                ("validity", C.c_void_p), ("offsets", C.c_void_p), ("shapes", C.c_void_p),
                ("data", C.c_void_p), ("data_size", C.c_int64), ("device", Device),
                ("event", C.c_void_p), ("priv", C.c_void_p)]


class Error(C.Structure):
    _fields_ = [("code", C.c_int), ("row", C.c_int64), ("column", C.c_int),
                ("message", C.c_char * 512)]


class BatchOpts(C.Structure):
    _fields_ = [("drop_last", C.c_int), ("layout", C.c_int), ("pinned", C.c_int),
                ("reserved", C.c_int64 * OPTS_RESERVED)]


class ToDeviceOpts(C.Structure):
    _fields_ = [("device", C.c_int), ("inflight", C.c_int),
                ("reserved", C.c_int64 * OPTS_RESERVED)]


class NormalizeOpts(C.Structure):
    _fields_ = [("flip", C.c_double), ("mean", C.c_double * 4), ("std", C.c_double * 4),
                ("dtype", C.c_int), ("layout", C.c_int),
                ("reserved", C.c_int64 * OPTS_RESERVED)]


class IterOpts(C.Structure):
    _fields_ = [("columns", C.POINTER(C.c_int)), ("ncolumns", C.c_int), ("prefetch", C.c_int),
                ("threads", C.c_int), ("seed", C.c_uint64), ("epoch", C.c_int64),
                ("stream", C.c_void_p), ("batch_rows", C.c_int64),
                ("reserved", C.c_int64 * (OPTS_RESERVED - 1))]


class Row(C.Structure):
    _fields_ = [("index", C.c_int64), ("ncolumns", C.c_int), ("columns", C.c_void_p)]


class DLDevice(C.Structure):
    _fields_ = [("device_type", C.c_int32), ("device_id", C.c_int32)]


class DLTensor(C.Structure):
    _fields_ = [("data", C.c_void_p), ("device", DLDevice), ("ndim", C.c_int32),
                ("code", C.c_uint8), ("bits", C.c_uint8), ("lanes", C.c_uint16),
                ("shape", C.POINTER(C.c_int64)), ("strides", C.POINTER(C.c_int64)),
                ("byte_offset", C.c_uint64)]


class DLManagedTensor(C.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", C.c_void_p), ("deleter", C.c_void_p)]


check = Checks()


def main():
    lib = C.CDLL(os.environ["RILL_LIB"])
    lib.rill_cuda_device_count.restype = C.c_int
    if lib.rill_cuda_device_count() == 0:
        print("torch_dlpack: skipped: no CUDA device")
        return 0
    if not torch.cuda.is_available():
        print("torch_dlpack: skipped: torch sees no CUDA device")
        return 0
    lib.rill_type_tensor.restype = Type
    lib.rill_type_tensor.argtypes = [C.c_int, C.c_int, C.POINTER(C.c_int64)]
    lib.rill_array_new.argtypes = [Type, C.c_int64, C.POINTER(C.POINTER(Array)), C.POINTER(Error)]
    lib.rill_df_from_arrays.argtypes = [C.POINTER(C.c_char_p), C.POINTER(C.POINTER(Array)), C.c_int,
                                        C.c_int, C.POINTER(C.c_void_p), C.POINTER(Error)]
    lib.rill_df_batch.argtypes = [C.c_void_p, C.POINTER(C.c_int), C.c_int, C.c_int64,
                                  C.POINTER(BatchOpts), C.POINTER(C.c_void_p), C.POINTER(Error)]
    lib.rill_to_device.argtypes = [C.c_void_p, C.c_char_p, C.c_int, C.POINTER(ToDeviceOpts),
                                   C.POINTER(Error)]
    lib.rill_cuda_normalize.argtypes = [C.c_void_p, C.c_char_p, C.c_int, C.POINTER(NormalizeOpts),
                                        C.c_int, C.POINTER(Error)]
    lib.rill_iter_new.argtypes = [C.c_void_p, C.POINTER(IterOpts), C.POINTER(C.c_void_p),
                                  C.POINTER(Error)]
    lib.rill_iter_next.argtypes = [C.c_void_p, C.POINTER(Row), C.POINTER(Error)]
    lib.rill_row_get.restype = C.POINTER(Array)
    lib.rill_row_get.argtypes = [C.POINTER(Row), C.c_int]
    lib.rill_array_sync.argtypes = [C.POINTER(Array), C.POINTER(Error)]
    lib.rill_array_export_dlpack_legacy.argtypes = [C.POINTER(Array),
                                                    C.POINTER(C.POINTER(DLManagedTensor)),
                                                    C.POINTER(Error)]
    lib.rill_array_release.argtypes = [C.POINTER(Array)]
    lib.rill_iter_free.argtypes = [C.c_void_p]
    lib.rill_df_free.argtypes = [C.c_void_p]
    capsule_new = C.pythonapi.PyCapsule_New
    capsule_new.restype = C.py_object
    capsule_new.argtypes = [C.c_void_p, C.c_char_p, C.c_void_p]

    err = Error()

    def ok(rc, what):
        if rc < 0:
            raise RuntimeError("%s failed (%d): %s" % (what, rc, err.message.decode()))
        return rc

    n, h, w, b = 40, 20, 12, 16
    rng = np.random.default_rng(5)
    images = rng.integers(0, 256, size=(n, h, w, 3), dtype=np.uint8)
    arr = C.POINTER(Array)()
    ok(lib.rill_array_new(lib.rill_type_tensor(RILL_UINT8, 3, (C.c_int64 * 3)(h, w, 3)), n,
                          C.byref(arr), C.byref(err)), "rill_array_new")
    C.memmove(arr.contents.data, images.ctypes.data, images.nbytes)
    df, bdf, it = C.c_void_p(), C.c_void_p(), C.c_void_p()
    ok(lib.rill_df_from_arrays((C.c_char_p * 1)(b"img"), (C.POINTER(Array) * 1)(arr), 1, 1,
                               C.byref(df), C.byref(err)), "rill_df_from_arrays")
    lib.rill_array_release(arr)
    ok(lib.rill_df_batch(df, (C.c_int * 1)(0), 1, b, C.byref(BatchOpts(0, 0, 1)), C.byref(bdf),
                         C.byref(err)), "rill_df_batch")
    d = ok(lib.rill_to_device(bdf, b"dev", 0, C.byref(ToDeviceOpts(0, 2)), C.byref(err)), "rill_to_device")
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    nopts = NormalizeOpts(0.5, (C.c_double * 4)(*mean, 0), (C.c_double * 4)(*std, 0), RILL_FLOAT32,
                          RILL_LAYOUT_CHW)
    x = ok(lib.rill_cuda_normalize(bdf, b"x", d, C.byref(nopts), 0, C.byref(err)), "rill_cuda_normalize")
    cols = (C.c_int * 1)(x)
    ok(lib.rill_iter_new(bdf, C.byref(IterOpts(cols, 1, 2, 2, 11, 0, None)), C.byref(it), C.byref(err)),
       "rill_iter_new")
    ref = ((images.astype(np.float32) / 255.0 - np.array(mean, np.float32)) / np.array(std, np.float32))
    ref = ref.transpose(0, 3, 1, 2)  # NCHW
    ref_flip = ref[:, :, :, ::-1]
    kept = []
    row = Row()
    seen = 0
    while True:
        rc = lib.rill_iter_next(it, C.byref(row), C.byref(err))
        if rc == RILL_END:
            break
        ok(rc, "rill_iter_next")
        a = lib.rill_row_get(C.byref(row), 0)
        ok(lib.rill_array_sync(a, C.byref(err)), "rill_array_sync")
        mt = C.POINTER(DLManagedTensor)()
        ok(lib.rill_array_export_dlpack_legacy(a, C.byref(mt), C.byref(err)), "export_dlpack")
        check(mt.contents.dl_tensor.device.device_type == kDLCUDA, "DLPack device type")
        t = torch.utils.dlpack.from_dlpack(capsule_new(C.cast(mt, C.c_void_p), b"dltensor", None))
        first = row.index * b
        m = a.contents.length
        check(t.is_cuda and t.device.index == 0, "tensor not on cuda:0: %s" % t.device)
        check(t.data_ptr() == a.contents.data, "from_dlpack copied the batch")
        check(tuple(t.shape) == (m, 3, h, w) and t.dtype == torch.float32,
              "shape %s dtype %s" % (tuple(t.shape), t.dtype))
        got = t.cpu().numpy()
        for i in range(m):
            plain = np.allclose(got[i], ref[first + i], atol=2e-6)
            mirrored = np.allclose(got[i], ref_flip[first + i], atol=2e-6)
            check(plain or mirrored, "image %d matches neither reference" % (first + i))
        kept.append((t, got.copy()))
        seen += m
    check(seen == n, "%d images of %d" % (seen, n))
    # the exported tensors survive the iterator: their buffers were not reused
    for t, expect in kept:
        check(np.array_equal(t.cpu().numpy(), expect), "an exported batch changed after the iterator moved on")
    lib.rill_iter_free(it)
    del kept
    torch.cuda.synchronize()
    lib.rill_df_free(bdf)
    lib.rill_df_free(df)
    return check.summary("torch_dlpack")


if __name__ == "__main__":
    sys.exit(main())
