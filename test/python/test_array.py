"""rill.Array: values, numpy views, DLPack, Arrow capsules and lifetimes, checked against
pyarrow (the source of the data and a consumer of the exports), numpy and torch."""
import gc

import numpy as np
import pyarrow as pa
import pytest

import rill

N = 11

NUMERIC = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
           "float16", "float32", "float64"]


def values(dtype, n, nulls=True):
    rng = np.random.default_rng(len(dtype))
    if dtype == "bool":
        v = [bool(x) for x in rng.integers(0, 2, n)]
    elif dtype.startswith(("int", "uint")):
        info = np.iinfo(np.dtype(dtype))
        v = [int(x) for x in rng.integers(info.min, info.max, n, dtype=np.dtype(dtype),
                                          endpoint=True)]
    elif dtype.startswith("float"):
        v = [float(np.dtype(dtype).type(x)) for x in rng.normal(0, 100, n)]
    elif dtype == "string":
        v = [f"s{i}-" + "é" * (i % 4) for i in range(n)]
    elif dtype == "binary":
        v = [bytes(range(i % 6)) for i in range(n)]
    else:  # timestamp microseconds
        v = [int(x) for x in rng.integers(-10**15, 10**15, n)]
    if nulls:
        v = [None if i % 3 == 1 else x for i, x in enumerate(v)]
    return v


def arrow_type(dtype):
    return {"string": pa.large_string(), "binary": pa.large_binary(),
            "timestamp": pa.timestamp("us", "UTC")}.get(dtype) or \
        pa.from_numpy_dtype(np.dtype(dtype))


def batch_of(table, size=None):
    """The first row of rill.from_arrow(table) batched by `size` (all rows by default)."""
    df = rill.from_arrow(table).batch(size or max(table.num_rows, 1))
    return next(iter(df.iter()))


def column(dtype, n=N, nulls=True):
    v = values(dtype, n, nulls)
    if dtype == "float16":  # pyarrow takes half floats only from numpy
        mask = np.array([x is None for x in v])
        src = pa.array(np.array([0.0 if x is None else x for x in v], np.float16), mask=mask)
    else:
        src = pa.array(v, arrow_type(dtype))
    return batch_of(pa.table({"v": src}))["v"], src


def data_address(arr):
    return np.from_dlpack(arr).__array_interface__["data"][0]


@pytest.mark.parametrize("nulls", [False, True])
@pytest.mark.parametrize("dtype", NUMERIC + ["string", "binary", "timestamp"])
def test_values_and_attributes(dtype, nulls):
    a, src = column(dtype, nulls=nulls)
    want = src.cast(pa.int64()).to_pylist() if dtype == "timestamp" else src.to_pylist()
    assert len(a) == N
    assert a.to_pylist() == want
    assert [a[i] for i in range(N)] == want
    assert list(a) == want
    assert a[-1] == want[-1]
    assert a.null_count == src.null_count
    assert [a.is_valid(i) for i in range(N)] == [x is not None for x in want]
    assert a.dtype == ("timestamp[us]" if dtype == "timestamp" else dtype)
    assert a.dtype in rill.DTYPES
    assert a.shape == (N,) and a.cell_shape == ()
    assert a.device == (rill.DEVICE_CPU, 0)
    assert a.name == "v"
    assert a.nbytes > 0
    assert f"name='v'" in repr(a)
    with pytest.raises(IndexError, match="out of range"):
        a[N]
    with pytest.raises(IndexError, match="out of range"):
        a.is_valid(-N - 1)


@pytest.mark.parametrize("dtype", NUMERIC + ["timestamp"])
def test_to_numpy_without_nulls_is_a_read_only_zero_copy_view(dtype):
    a, src = column(dtype, nulls=False)
    got = a.to_numpy()
    assert not got.flags.writeable
    if dtype == "timestamp":
        assert got.dtype == np.dtype("datetime64[us]")
        np.testing.assert_array_equal(got.view("int64"), src.cast(pa.int64()).to_numpy())
    else:
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_array_equal(got, src.to_numpy(zero_copy_only=False))
    # the same memory as the interchange data buffer and the Arrow export
    ptr = a.interchange().get_buffers()["data"][0].ptr
    assert got.__array_interface__["data"][0] == ptr
    if dtype != "bool":  # Arrow bit-packs booleans: a copy
        assert pa.array(a).buffers()[1].address == ptr
    np.testing.assert_array_equal(np.asarray(a), got)


@pytest.mark.parametrize("dtype", NUMERIC)
def test_to_numpy_with_nulls_is_a_masked_copy(dtype):
    a, src = column(dtype)
    got = a.to_numpy()
    assert isinstance(got, np.ma.MaskedArray)
    assert got.mask.tolist() == [x is None for x in src.to_pylist()]
    assert got.dtype == np.dtype(dtype)
    assert got.compressed().tolist() == [x for x in src.to_pylist() if x is not None]
    with pytest.raises(ValueError, match=r"the array has 4 null cells; use to_numpy\(\)"):
        np.asarray(a)


@pytest.mark.parametrize("dtype", ["string", "binary"])
def test_to_numpy_of_variable_cells_is_an_object_array(dtype):
    a, src = column(dtype)
    got = a.to_numpy()
    assert got.dtype == object and got.shape == (N,)
    assert got.tolist() == src.to_pylist()
    with pytest.raises(ValueError, match="cannot be viewed by numpy without a copy"):
        a.__array__(copy=False)


def test_tensor_cells():
    flat = pa.array(np.arange(5 * 6, dtype=np.float32))
    src = pa.FixedSizeListArray.from_arrays(flat, 6)
    src = pa.ExtensionArray.from_storage(pa.fixed_shape_tensor(pa.float32(), [2, 3]), src)
    a = batch_of(pa.table({"t": src}))["t"]
    assert a.shape == (5, 2, 3) and a.cell_shape == (2, 3) and a.dtype == "float32"
    want = np.arange(30, dtype=np.float32).reshape(5, 2, 3)
    np.testing.assert_array_equal(a[4], want[4])
    assert isinstance(a[0], np.ndarray) and a[0].shape == (2, 3)
    np.testing.assert_array_equal(a.to_numpy(), want)
    np.testing.assert_array_equal(np.from_dlpack(a), want)
    back = pa.array(a)
    back.validate(full=True)
    assert back.type.extension_name == "arrow.fixed_shape_tensor"


def test_tensor_cells_with_nulls():
    src = pa.array([[1, 2], None, [5, 6]], pa.list_(pa.int16(), 2))
    a = batch_of(pa.table({"t": src}))["t"]
    assert a.to_pylist()[1] is None
    assert a[2].tolist() == [5, 6]
    got = a.to_numpy()
    assert got.mask.tolist() == [[False, False], [True, True], [False, False]]
    assert got[0].tolist() == [1, 2]
    with pytest.raises(BufferError, match="1 null cells; DLPack cannot express nulls"):
        a.__dlpack__()


def test_variable_shape_cells(variable_shape_table):
    a = batch_of(variable_shape_table)["img"]
    assert a.shape == (3, -1, 3) and a.cell_shape == (-1, 3)
    assert a[0].tolist() == [[1, 2, 3], [4, 5, 6]]
    assert a[1] is None
    assert a[2].tolist() == [[7, 8, 9]]
    objs = a.to_numpy()
    assert objs.dtype == object and objs[1] is None and objs[2].shape == (1, 3)
    with pytest.raises(BufferError, match="cells of variable shape cannot be one DLPack tensor"):
        np.from_dlpack(a)


def test_bfloat16():
    bits = pa.array([0x3F80, 0xC000, None, 0x7F80], pa.uint16())  # 1.0, -2.0, null, inf
    field = pa.field("h", pa.uint16(), metadata={b"rill.dtype": b"bfloat16"})
    a = batch_of(pa.Table.from_arrays([bits], schema=pa.schema([field])))["h"]
    assert a.dtype == "bfloat16"
    assert a.to_pylist() == [1.0, -2.0, None, float("inf")]
    got = a.to_numpy()
    assert got.dtype == np.float32 and got.mask.tolist() == [False, False, True, False]
    assert got[:2].tolist() == [1.0, -2.0]


def test_slices_share_memory():
    a, src = column("int32", nulls=False)
    s = a[3:8]
    assert len(s) == 5 and s.to_pylist() == src.to_pylist()[3:8]
    assert data_address(s) == data_address(a) + 3 * 4
    with pytest.raises(rill.InvalidArgumentError, match="slices take step 1"):
        a[::2]
    n, _ = column("int64")
    assert n[1:4].to_pylist() == [n[1], n[2], n[3]]


def test_dlpack_capsules_versions_and_copy():
    a, src = column("float32", nulls=False)
    legacy = a.__dlpack__()
    assert "dltensor" in repr(legacy) and "versioned" not in repr(legacy)
    assert "dltensor_versioned" in repr(a.__dlpack__(max_version=(1, 0)))
    assert "dltensor_versioned" in repr(a.__dlpack__(max_version=(1, 2)))
    assert "versioned" not in repr(a.__dlpack__(max_version=(0, 8)))
    assert a.__dlpack_device__() == (1, 0)
    assert "dltensor" in repr(a.__dlpack__(dl_device=(1, 0)))
    with pytest.raises(BufferError, match=r"lives on device \(1, 0\); rill does not copy it to "
                                          r"device \(2, 0\)"):
        a.__dlpack__(dl_device=(2, 0))
    view = np.from_dlpack(a)
    copied = np.from_dlpack(_Copy(a))
    assert copied.__array_interface__["data"][0] != view.__array_interface__["data"][0]
    np.testing.assert_array_equal(copied, view)


class _Copy:
    """Asks rill for a copy (versioned capsule so the flags can say so)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None, **kw):
        return self.a.__dlpack__(copy=True)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


def test_dlpack_refusals_are_buffer_errors_with_rills_message():
    a, _ = column("int32")
    with pytest.raises(BufferError, match=r"the array has 4 null cells; DLPack cannot express"):
        np.from_dlpack(a)
    s, _ = column("string", nulls=False)
    with pytest.raises(BufferError, match="string arrays are variable-length and have no DLPack"):
        s.__dlpack__(max_version=(1, 0))
    with pytest.raises(TypeError, match="max_version must be a"):
        s.__dlpack__(max_version=3)


def test_torch_from_dlpack_shares_memory():
    torch = pytest.importorskip("torch")
    a, src = column("int64", nulls=False)
    t = torch.from_dlpack(a)
    assert t.dtype == torch.int64 and tuple(t.shape) == (N,)
    assert t.data_ptr() == data_address(a)
    assert t.tolist() == src.to_pylist()
    f, fsrc = column("float16", nulls=False)
    assert torch.from_dlpack(f).tolist() == fsrc.to_pylist()


def test_cuda_array_interface_is_absent_for_host_arrays():
    a, _ = column("float32")
    assert not hasattr(a, "__cuda_array_interface__")
    with pytest.raises(AttributeError, match=r"the array is not in CUDA memory \(device 1\)"):
        a.__cuda_array_interface__


@pytest.mark.parametrize("dtype", NUMERIC + ["string", "binary", "timestamp"])
def test_arrow_capsules_validate(dtype):
    a, src = column(dtype)
    got = pa.array(a)
    got.validate(full=True)
    assert got.equals(src)
    schema = pa.field(a)
    assert schema.type == src.type


def test_numpy_view_outlives_every_rill_object():
    src = pa.table({"x": pa.array(np.arange(1000, dtype=np.float64))})
    df = rill.from_arrow(src).batch(1000)
    it = df.iter()
    row = next(iter(it))
    arr = row["x"]
    base = arr._refcount
    view = arr.to_numpy()
    tensor_caps = [arr.__dlpack__(), arr.__dlpack__(max_version=(1, 0)), arr.__arrow_c_array__()]
    assert arr._refcount == base + 4
    del tensor_caps
    gc.collect()
    assert arr._refcount == base + 1  # the numpy view
    del row, it, df, arr, src
    gc.collect()
    np.testing.assert_array_equal(view, np.arange(1000, dtype=np.float64))


def test_capsule_destroyed_while_an_exception_is_pending():
    a, _ = column("int32", nulls=False)

    def fails():
        caps = a.__arrow_c_array__()  # noqa: F841  (released while unwinding)
        dl = a.__dlpack__()  # noqa: F841
        raise KeyError("boom")

    base = a._refcount
    for _ in range(3):
        with pytest.raises(KeyError, match="boom"):
            fails()
    gc.collect()
    assert a._refcount == base


def test_arrays_are_not_constructible_and_keep_their_row():
    with pytest.raises(TypeError):
        rill.Array()
    a, src = column("uint8", nulls=False)
    assert a.to_pylist() == src.to_pylist()


@pytest.mark.skipif(rill.cuda_device_count() == 0, reason="no CUDA device")
def test_cuda_arrays_export_through_the_cuda_interfaces():
    df = rill.from_arrow(pa.table({"x": pa.array(np.arange(16, dtype=np.float32))})).batch(16)
    df.to_device("g", "x")
    g = next(iter(df.iter()))["g"]
    assert g.device == (rill.DEVICE_CUDA, 0) and g.__dlpack_device__() == (rill.DEVICE_CUDA, 0)
    cai = g.__cuda_array_interface__
    assert cai["shape"] == (16,) and cai["typestr"] == "<f4" and cai["version"] == 3
    assert cai["data"][0] != 0
    with pytest.raises(rill.NotSupportedError, match="the array is in device memory"):
        g.to_pylist()
    with pytest.raises(BufferError, match=r"lives on device \(2, 0\)"):
        g.__dlpack__(dl_device=(1, 0))
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        t = torch.from_dlpack(g)
        assert t.is_cuda and t.data_ptr() == cai["data"][0]
        assert t.cpu().tolist() == list(range(16))


def test_row_is_a_mapping_of_arrays():
    import collections.abc
    src = pa.table({"a": pa.array([1, None, 3, 4, 5], pa.int32()), "b": ["p", "q", None, "s", "t"]})
    df = rill.from_arrow(src).batch(2)
    rows = list(df.iter())
    row = rows[1]
    assert isinstance(row, rill.Row) and isinstance(row, rill.Batch)
    assert isinstance(row, collections.abc.Mapping)
    assert len(row) == 2 and row.num_columns == 2 and row.index == 1
    assert list(row) == row.keys() == row.columns == ["a", "b"]
    assert [a.to_pylist() for a in row.values()] == [[3, 4], [None, "s"]]
    assert [(k, v.name) for k, v in row.items()] == [("a", "a"), ("b", "b")]
    assert row[0].to_pylist() == row["a"].to_pylist() == row[-2].to_pylist()
    assert {k: v.to_pylist() for k, v in row.to_dict().items()} == {"a": [3, 4], "b": [None, "s"]}
    assert [a.name for a in row.arrays] == ["a", "b"]
    assert dict(row).keys() == {"a", "b"}
    assert "rill.Row(index=1, len=2" in repr(row)
    assert len(rows[2]) == 1  # the short last batch
    rb = pa.record_batch(row)
    rb.validate(full=True)
    assert rb.to_pydict() == {"a": [3, 4], "b": [None, "s"]}
    assert pa.schema(row).names == ["a", "b"]
    # rows keep their arrays after the iterator and dataframe are gone
    keep = rows[0]["b"]
    del rows, row, df
    gc.collect()
    assert keep.to_pylist() == ["p", "q"]
    single = next(iter(rill.from_arrow(src).iter()))
    assert len(single) == 1 and single["a"].to_pylist() == [1]
