"""rill's exports checked by independent consumers: pyarrow (full validation), nanoarrow
(full validation), numpy (DLPack), polars and pandas (through Arrow)."""
import gc

import numpy as np
import nanoarrow as na
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import rill

N = 53  # rows: not a multiple of the batch size

# (name, pyarrow input type, type rill exports)
TYPES = [
    ("bool", pa.bool_(), pa.bool_()),
    ("int8", pa.int8(), pa.int8()),
    ("int16", pa.int16(), pa.int16()),
    ("int32", pa.int32(), pa.int32()),
    ("int64", pa.int64(), pa.int64()),
    ("uint8", pa.uint8(), pa.uint8()),
    ("uint16", pa.uint16(), pa.uint16()),
    ("uint32", pa.uint32(), pa.uint32()),
    ("uint64", pa.uint64(), pa.uint64()),
    ("float16", pa.float16(), pa.float16()),
    ("float32", pa.float32(), pa.float32()),
    ("float64", pa.float64(), pa.float64()),
    ("string", pa.string(), pa.large_string()),
    ("large_string", pa.large_string(), pa.large_string()),
    ("binary", pa.binary(), pa.large_binary()),
    ("large_binary", pa.large_binary(), pa.large_binary()),
    ("ts_ns", pa.timestamp("ns", "UTC"), pa.timestamp("us", "UTC")),
    ("ts_s", pa.timestamp("s"), pa.timestamp("us", "UTC")),
    ("tensor", pa.list_(pa.float32(), 6), pa.fixed_shape_tensor(pa.float32(), [6])),
]


def values(name, n, nulls):
    rng = np.random.default_rng(len(name))
    if name == "bool":
        v = [bool(x) for x in rng.integers(0, 2, n)]
    elif name.startswith(("int", "uint")):
        info = np.iinfo(np.dtype(name))
        v = [int(x) for x in rng.integers(info.min, info.max, n, dtype=np.dtype(name), endpoint=True)]
    elif name.startswith("float"):
        v = [float(np.dtype(name).type(x)) for x in rng.normal(0, 100, n)]
        if name == "float16":  # pyarrow takes half floats only as numpy scalars
            v = [np.float16(x) for x in v]
    elif name.endswith("string"):
        v = [f"s{i}-" + "é" * (i % 5) for i in range(n)]
    elif name.endswith("binary"):
        v = [bytes(range(i % 7)) for i in range(n)]
    elif name == "ts_ns":
        v = [int(x) * 1000 for x in rng.integers(-10**15, 10**15, n)]
    elif name == "ts_s":
        v = [int(x) for x in rng.integers(-10**9, 10**9, n)]
    else:
        v = [[float(np.float32(i + j / 4)) for j in range(6)] for i in range(n)]
    if nulls:
        v = [None if i % 4 == 1 else x for i, x in enumerate(v)]
    return v


def source_table(name, in_type, n, nulls):
    return pa.table({"id": pa.array(np.arange(n), pa.int64()),
                     "keep": pa.array([i % 3 != 0 for i in range(n)], pa.bool_()),
                     "v": pa.array(values(name, n, nulls), in_type)})


def plain(arr):
    """Chunked or plain array without its extension type."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    return arr.storage if isinstance(arr, pa.ExtensionArray) else arr


def validate_nanoarrow(c_array):
    """nanoarrow's default validation of the whole tree (view), then every leaf array
    rebuilt buffer by buffer with its full validation (nanoarrow does not fully validate
    nested arrays itself)."""
    view = c_array.view()
    if c_array.n_children:
        for i in range(c_array.n_children):
            validate_nanoarrow(c_array.child(i))
        return
    na.c_array_from_buffers(c_array.schema, c_array.length, list(view.buffers),
                            c_array.null_count, c_array.offset, validation_level="full")


def derived(df, variant):
    if variant == "plain":
        return df
    if variant == "batched":
        return df.batch(7)
    if variant == "shuffled":
        return df.shuffle(11)
    if variant == "filtered":
        return df.filter("keep")
    if variant == "shuffled_batched":
        return df.shuffle(5).batch(8)
    raise ValueError(variant)


def expected_ids(n, variant):
    ids = np.arange(n)
    return ids[ids % 3 != 0] if variant == "filtered" else ids


@pytest.mark.parametrize("variant", ["plain", "batched", "shuffled", "filtered", "shuffled_batched"])
@pytest.mark.parametrize("nulls", [False, True])
@pytest.mark.parametrize("name,in_type,out_type", TYPES, ids=[t[0] for t in TYPES])
def test_stream_to_pyarrow(name, in_type, out_type, nulls, variant):
    src = source_table(name, in_type, N, nulls)
    df = derived(rill.from_arrow(src), variant)
    reader = pa.RecordBatchReader.from_stream(df)
    assert reader.schema.field("v").type == out_type
    batches = list(reader)
    for b in batches:
        b.validate(full=True)
    table = pa.Table.from_batches(batches, reader.schema)
    del df, reader, batches
    gc.collect()  # the export outlives every rill object
    ids = table.column("id").to_numpy()
    assert sorted(ids.tolist()) == expected_ids(N, variant).tolist()
    order = np.argsort(ids)
    got = plain(table["v"]).take(pa.array(order))
    want = plain(src["v"]).take(pa.array(np.sort(ids)))
    want = want.cast(plain(pa.array([], out_type)).type)
    assert got.equals(want)
    assert got.null_count == want.null_count


@pytest.mark.parametrize("name,in_type,out_type", TYPES, ids=[t[0] for t in TYPES])
def test_nanoarrow_full_validation(name, in_type, out_type):
    df = rill.from_arrow(source_table(name, in_type, N, True)).batch(10)
    stream = na.c_array_stream(df)
    total = 0
    for arr in stream:
        validate_nanoarrow(arr)
        total += arr.length
    assert total == N
    # per-column export of one batch
    batch = next(iter(df.iter()))
    col = na.c_array(batch["v"])
    validate_nanoarrow(col)
    assert col.length == 10


@pytest.mark.parametrize("name,in_type,out_type", TYPES[:12], ids=[t[0] for t in TYPES[:12]])
def test_batch_and_column_capsules(name, in_type, out_type):
    src = source_table(name, in_type, N, True)
    df = rill.from_arrow(src).batch(16)
    batches = list(df.iter())
    assert [len(b) for b in batches] == [16, 16, 16, 5]
    rb = pa.record_batch(batches[1])
    rb.validate(full=True)
    assert rb["v"].equals(src["v"].chunk(0).slice(16, 16).cast(out_type))
    col = pa.array(batches[3]["v"])
    col.validate(full=True)
    assert col.equals(src["v"].chunk(0).slice(48, 5).cast(out_type))
    assert pa.schema(batches[0]).field("v").type == out_type


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint16", "float16", "float32",
                                   "float64", "bool"])
def test_numpy_from_dlpack(dtype):
    arr = pa.array(values(dtype, N, False), pa.from_numpy_dtype(np.dtype(dtype)))
    df = rill.from_arrow(pa.table({"v": arr})).batch(20)
    got = [np.from_dlpack(b[0]) for b in df.iter()]
    del df
    gc.collect()
    assert [g.shape for g in got] == [(20,), (20,), (13,)]
    assert not got[0].flags.writeable  # rill marks its buffers read-only
    np.testing.assert_array_equal(np.concatenate(got), arr.to_numpy(zero_copy_only=False))


def test_dlpack_tensor_and_legacy():
    src = source_table("tensor", pa.list_(pa.float32(), 6), 9, False)
    df = rill.from_arrow(src).batch(4)
    b = next(iter(df.iter()))
    t = np.from_dlpack(b["v"])
    assert t.shape == (4, 6) and t.dtype == np.float32
    np.testing.assert_array_equal(t[3], np.arange(6, dtype=np.float32) / 4 + 3)
    legacy = b["v"].__dlpack__()  # no max_version: the unversioned capsule
    assert "dltensor" in repr(legacy)
    assert b["v"].__dlpack_device__() == (1, 0)


def test_dlpack_refuses_nulls_and_strings():
    df = rill.from_arrow(pa.table({"a": pa.array([1, None, 3], pa.int32()),
                                             "s": pa.array(["x", "y", "z"])})).batch(3)
    b = next(iter(df.iter()))
    with pytest.raises(BufferError, match="null cells"):
        np.from_dlpack(b["a"])
    with pytest.raises(BufferError, match="string"):
        b["s"].__dlpack__(max_version=(1, 0))


def test_fixed_shape_tensor_extension():
    df = rill.from_arrow(source_table("tensor", pa.list_(pa.float32(), 6), 5, False))
    table = pa.table(df)
    t = table["v"].type
    assert isinstance(t, pa.FixedShapeTensorType)
    assert t.shape == [6]
    nd = table["v"].combine_chunks().to_numpy_ndarray()
    assert nd.shape == (5, 6)


def test_polars_and_pandas():
    src = pa.table({"x": pa.array([1.5, None, 3.0, 4.25], pa.float64()),
                    "s": pa.array(["a", "b", None, "dd"]),
                    "t": pa.array([0, 10**6, None, 5], pa.timestamp("us", "UTC"))})
    df = rill.from_arrow(src)
    pdf = pa.table(df).to_pandas()
    assert pdf["x"].isna().tolist() == [False, True, False, False]
    assert pdf["s"].tolist()[:2] == ["a", "b"] and pd.isna(pdf["s"][2])
    assert str(pdf["t"].dtype).startswith("datetime64[us, UTC]")
    assert pdf["t"][1] == pd.Timestamp(1, unit="s", tz="UTC")
    pldf = pl.from_arrow(pa.table(df))
    assert pldf["x"].to_list() == [1.5, None, 3.0, 4.25]
    assert pldf["s"].to_list() == ["a", "b", None, "dd"]
    direct = pl.DataFrame(df)  # polars reads __arrow_c_stream__ itself
    assert direct.equals(pldf)


def test_round_trip_with_map():
    src = pa.table({"x": pa.array(np.arange(1000, dtype=np.float64)),
                    "k": pa.array(np.arange(1000) % 7, pa.int32())})
    df = rill.from_arrow(src)
    df.map("y", lambda x, k: x * 2 + k, ["x", "k"], "float64")
    got = pa.table(df.shuffle(3))
    got = got.sort_by("x")
    want = src.append_column("y", pa.array(np.arange(1000) * 2.0 + np.arange(1000) % 7))
    assert got.column_names == want.column_names
    for name in want.column_names:
        assert got.column(name).equals(want.column(name)), name
    # source columns without nulls are exported as non-nullable fields
    assert not got.schema.field("y").nullable


def test_failing_row_reaches_the_consumer():
    src = pa.table({"x": pa.array(np.arange(100, dtype=np.float64))})
    df = rill.from_arrow(src)

    def boom(x):
        if (x == 42).any():
            raise ValueError("forty-two is cursed")
        return x

    df.map("y", boom, ["x"], "float64")
    with pytest.raises(Exception, match="forty-two is cursed"):
        pa.table(df)


def test_empty():
    src = pa.table({"x": pa.array([], pa.int64()), "s": pa.array([], pa.string())})
    df = rill.from_arrow(src)
    assert len(df) == 0
    table = pa.table(df)
    assert table.num_rows == 0
    assert table.schema.field("s").type == pa.large_string()
    assert pl.from_arrow(table).shape == (0, 2)


def test_import_rejects_unsupported_types():
    with pytest.raises(rill.RillError, match=r"'d'.*\"tdD\""):
        rill.from_arrow(pa.table({"d": pa.array([1], pa.date32())}))
    with pytest.raises(rill.RillError, match=r"\+l"):
        rill.from_arrow(pa.table({"l": pa.array([[1]], pa.list_(pa.int64()))}))


def test_import_from_polars_multiple_chunks():
    reader = pa.RecordBatchReader.from_batches(
        pa.schema([("a", pa.int64())]),
        [pa.record_batch([pa.array([1, 2])], ["a"]), pa.record_batch([pa.array([None, 4])], ["a"])])
    df = rill.from_arrow(reader)
    assert pa.table(df)["a"].to_pylist() == [1, 2, None, 4]
    pl_df = pl.DataFrame({"u": [1, 2, 3], "s": ["x", None, "z"]})
    back = pl.from_arrow(pa.table(rill.from_arrow(pl_df)))
    assert back["u"].to_list() == [1, 2, 3] and back["s"].to_list() == ["x", None, "z"]


def test_variable_shape_tensor_round_trip(variable_shape_table):
    src = variable_shape_table
    df = rill.from_arrow(src)
    assert df.field(0).shape == (-1, 3) and df.field(0).dtype == "uint8"
    for variant in (df, df.batch(2)):
        table = pa.table(variant)
        col = table.column("img").combine_chunks()
        col.validate(full=True)
        # pyarrow 25 knows the canonical type (a C++ extension type: BaseExtensionType, not
        # the Python-defined ExtensionType); older ones keep the extension on the field
        if isinstance(col.type, pa.BaseExtensionType):
            assert col.type.extension_name == "arrow.variable_shape_tensor"
            assert col.type.storage_type == src.schema.field("img").type
            col = col.storage
        else:
            meta = table.schema.field("img").metadata
            assert meta[b"ARROW:extension:name"] == b"arrow.variable_shape_tensor"
            assert meta[b"ARROW:extension:metadata"] == b'{"uniform_shape":[null,3]}'
        assert col.to_pylist() == [{"data": [1, 2, 3, 4, 5, 6], "shape": [2, 3]}, None,
                                           {"data": [7, 8, 9], "shape": [1, 3]}]
    with pytest.raises(BufferError, match="variable shape"):
        np.from_dlpack(next(iter(df.batch(2).iter()))[0])


@pytest.mark.parametrize("variant", ["plain", "batched", "filtered"])
@pytest.mark.parametrize("name,in_type,out_type", TYPES, ids=[t[0] for t in TYPES])
def test_empty_every_type(name, in_type, out_type, variant):
    df = derived(rill.from_arrow(source_table(name, in_type, 0, False)), variant)
    reader = pa.RecordBatchReader.from_stream(df)
    assert reader.schema.field("v").type == out_type
    table = reader.read_all()
    table.validate(full=True)
    assert table.num_rows == 0


def test_bfloat16_round_trip():
    bits = pa.array([0x3F80, 0xC000, None, 0x7F80], pa.uint16())  # 1.0, -2.0, null, inf
    field = pa.field("h", pa.uint16(), metadata={b"rill.dtype": b"bfloat16"})
    df = rill.from_arrow(pa.Table.from_arrays([bits], schema=pa.schema([field])))
    assert df.field(0).dtype == "bfloat16"
    table = pa.table(df)
    assert table.schema.field("h").metadata == {b"rill.dtype": b"bfloat16"}
    assert table.column("h").to_pylist() == [0x3F80, 0xC000, None, 0x7F80]


def test_unconsumed_capsules_release_their_reference():
    df = rill.from_arrow(pa.table({"x": pa.array(np.arange(8.0))})).batch(8)
    col = next(iter(df.iter()))[0]
    base = col._refcount
    caps = [col.__dlpack__(max_version=(1, 0)), col.__dlpack__(), col.__arrow_c_array__()]
    assert col._refcount == base + 3
    del caps
    gc.collect()
    assert col._refcount == base
    consumed = np.from_dlpack(col)  # the consumer now owns one reference
    assert col._refcount == base + 1
    del consumed
    gc.collect()
    assert col._refcount == base
    stream = df.__arrow_c_stream__()  # never consumed: released by the capsule
    del stream


@pytest.mark.filterwarnings("ignore:The Dataframe Interchange Protocol is deprecated")
def test_dataframe_interchange_protocol_for_older_consumers():
    import pandas as pd
    import pyarrow as pa
    table = pa.table({"x": pa.array([1, None, 3], pa.int64()), "s": ["a", "b", None]})
    df = rill.from_arrow(table)
    got = pd.api.interchange.from_dataframe(df)
    assert got["x"].isna().tolist() == [False, True, False]
    assert got["x"].dropna().tolist() == [1.0, 3.0]
    assert got["s"].tolist()[:2] == ["a", "b"]
    batch = next(iter(df.batch(2).iter()))
    assert pd.api.interchange.from_dataframe(batch)["x"].tolist()[0] == 1


def test_cuda_array_interface_is_absent_for_host_columns():
    import pyarrow as pa
    df = rill.from_arrow(pa.table({"x": pa.array([1.0, 2.0], pa.float32())}))
    col = next(iter(df.batch(2).iter()))[0]
    assert not hasattr(col, "__cuda_array_interface__")
    with pytest.raises(AttributeError, match="not in CUDA memory"):
        col.__cuda_array_interface__


class _Batches:
    """Exports a rill dataframe as a stream of `rows`-row batches."""

    def __init__(self, df, rows):
        self.df, self.rows = df, rows

    def __arrow_c_stream__(self, requested_schema=None):
        return self.df.to_arrow_stream(batch_rows=self.rows).__arrow_c_stream__(requested_schema)


def test_single_batch_import_shares_buffers_and_outlives_the_table():
    import pyarrow.compute as pc
    n = 1_000_000
    base = pa.total_allocated_bytes()
    src = pa.table({
        "i": pc.multiply(pa.array(np.arange(n, dtype=np.int64)), 3),       # pool-allocated
        "f": pc.divide(pa.array(np.arange(n, dtype=np.float64)), 4.0),
        "t": pc.cast(pc.multiply(pa.array(np.arange(n, dtype=np.int64)), 7), pa.timestamp("us")),
    })
    assert all(c.num_chunks == 1 for c in src.columns)
    held = pa.total_allocated_bytes() - base
    assert held >= 3 * 8 * n
    addrs = {name: src.column(name).chunks[0].buffers()[1].address for name in ("i", "f", "t")}
    df = rill.from_arrow(src)
    del src
    gc.collect()
    # rill still holds the imported batch: pyarrow's memory is not freed
    assert pa.total_allocated_bytes() - base >= held
    rows = 1 << 16
    out = pa.table(_Batches(df, rows))
    assert out.num_rows == n
    for name in ("i", "f", "t"):
        col = out.column(name)
        width = 8
        start = 0
        for chunk in col.chunks:
            buf = chunk.buffers()[1]
            assert buf.address + chunk.offset * width == addrs[name] + start * width, \
                f"column {name}: rows {start}.. were copied"
            start += len(chunk)
        assert start == n
    del df
    gc.collect()
    assert pa.total_allocated_bytes() - base >= held, "the exported batches still share the data"
    ids = np.arange(n, dtype=np.int64)
    assert np.array_equal(out.column("i").to_numpy(), ids * 3)
    assert np.array_equal(out.column("f").to_numpy(), ids / 4.0)
    assert np.array_equal(out.column("t").cast(pa.int64()).to_numpy(), ids * 7)
    del out, col, chunk, buf
    gc.collect()
    assert pa.total_allocated_bytes() - base < held, "released after the last user"


def test_import_zero_copy_cases_keep_values_and_nulls():
    strings = pa.array(["ab", None, "", "xyz"] * 5, pa.large_string())
    tensors = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(60, dtype=np.float32)), 3)
    ints = pa.array([1, None, 3, 4] * 5, pa.int32())
    src = pa.table({"s": strings, "v": tensors, "i": ints})
    df = rill.from_arrow(src.slice(8, 12))  # offsets 8: a byte-exact bitmap
    del src
    gc.collect()
    back = pa.table(df)
    assert back["s"].to_pylist() == (["ab", None, "", "xyz"] * 3)
    assert back.column("i").to_pylist() == ([1, None, 3, 4] * 3)
    assert back["v"].combine_chunks().storage.flatten().to_numpy().tolist() == \
        np.arange(24, 60, dtype=np.float32).tolist()
    sliced = rill.from_arrow(pa.table({"i": ints}).slice(3, 6))  # copied: bit offset 3
    assert pa.table(sliced).column("i").to_pylist() == [4, 1, None, 3, 4, 1]
