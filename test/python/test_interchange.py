"""The dataframe interchange protocol (__dataframe__) of rill rows, batches and dataframes,
consumed by pandas.api.interchange.from_dataframe and pyarrow.interchange.from_dataframe."""
import ctypes
import gc
import warnings

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.interchange as pai
import pytest

import rill

pytestmark = pytest.mark.filterwarnings("ignore:The Dataframe Interchange Protocol is deprecated")

N = 10
NULLS = [i % 3 == 1 for i in range(N)]


def source():
    """One column per supported dtype, every one with nulls."""
    def nullable(v, t):
        return pa.array([None if m else x for x, m in zip(v, NULLS)], t)
    cols = {}
    for t in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        cols[t] = nullable([(i * 37) % 100 for i in range(N)], pa.from_numpy_dtype(np.dtype(t)))
    cols["float32"] = nullable([i / 4 for i in range(N)], pa.float32())
    cols["float64"] = nullable([i * 1.5 - 3 for i in range(N)], pa.float64())
    cols["bool"] = nullable([i % 2 == 0 for i in range(N)], pa.bool_())
    cols["string"] = nullable([f"v{i}" + "ß" * (i % 3) for i in range(N)], pa.large_string())
    cols["ts"] = nullable([i * 10**6 + 7 for i in range(N)], pa.timestamp("us", "UTC"))
    cols["dense"] = pa.array(np.arange(N, dtype=np.int64) * 3)  # no nulls
    return pa.table(cols)


def frame_of(batch_size=None):
    df = rill.from_arrow(source())
    if batch_size is None:
        return df.__dataframe__()
    return df.batch(batch_size).__dataframe__()


def pandas_expected(name):
    col = source().column(name).to_pylist()
    return col


def check_pandas(got, names):
    src = source()
    assert list(got.columns) == names
    for name in names:
        want = src.column(name).to_pylist()
        series = got[name]
        if name == "bool":  # pandas writes None into a numpy bool array as False: nulls are lost
            assert [v for v, w in zip(series, want) if w is not None] == \
                [w for w in want if w is not None]
            continue
        assert series.isna().tolist() == [x is None for x in want], name
        valid = [x for x in want if x is not None]
        if name == "ts":
            assert series.dropna().tolist() == [pd.Timestamp(x) for x in valid]
            assert str(series.dtype) == "datetime64[us, UTC]"
        else:
            assert series.dropna().tolist() == valid, name


@pytest.mark.parametrize("batch_size", [None, 4, 3])
def test_pandas_from_dataframe(batch_size):
    frame = frame_of(batch_size)
    chunks = 1 if batch_size is None else -(-N // batch_size)
    assert frame.num_chunks() == chunks and frame.num_rows() == N
    got = pd.api.interchange.from_dataframe(frame)
    del frame
    gc.collect()
    assert len(got) == N
    check_pandas(got, source().column_names)


def test_pandas_from_a_row_and_a_batch():
    df = rill.from_arrow(source())
    row = next(iter(df.iter()))
    got = pd.api.interchange.from_dataframe(row.__dataframe__())
    assert got["int32"].tolist() == [0] and got["string"].tolist() == ["v0"]
    batch = list(df.batch(4).iter())[1]
    got = pd.api.interchange.from_dataframe(batch)  # a Row has no stream: the protocol is used
    assert got["int64"].isna().tolist() == NULLS[4:8]
    assert got["dense"].tolist() == [12, 15, 18, 21]


@pytest.mark.parametrize("batch_size", [None, 4])
def test_pyarrow_from_dataframe(batch_size):
    names = [n for n in source().column_names if n != "bool"]
    frame = frame_of(batch_size).select_columns_by_name(names)
    got = pai.from_dataframe(frame)
    del frame
    gc.collect()
    got.validate(full=True)
    src = source().select(names)
    for name in names:
        assert got.column(name).to_pylist() == src.column(name).to_pylist(), name


def test_column_description():
    frame = frame_of()
    assert frame.num_columns() == source().num_columns
    assert frame.column_names() == source().column_names
    assert frame.metadata == {}
    col = frame.get_column_by_name("int32")
    assert col.size() == N and col.offset == 0 and col.null_count == 3
    assert col.dtype == (rill.DtypeKind.INT, 32, "i", "=")
    assert col.dtype[0] == 0 and isinstance(col.dtype[0], rill.DtypeKind)
    assert col.describe_null == (rill.ColumnNullType.USE_BITMASK, 0)
    assert col.num_chunks() == 1 and col.metadata == {}
    with pytest.raises(TypeError, match="categorical"):
        col.describe_categorical
    dense = frame.get_column_by_name("dense")
    assert dense.describe_null == (rill.ColumnNullType.NON_NULLABLE, None)
    assert dense.get_buffers()["validity"] is None
    assert frame.get_column_by_name("string").dtype == (rill.DtypeKind.STRING, 8, "U", "=")
    assert frame.get_column_by_name("ts").dtype == (rill.DtypeKind.DATETIME, 64, "tsu:UTC", "=")
    assert frame.get_column_by_name("bool").dtype == (rill.DtypeKind.BOOL, 8, "b", "|")
    assert frame.get_column_by_name("float64").dtype[:2] == (rill.DtypeKind.FLOAT, 64)
    assert [c.dtype[0] for c in frame.get_columns()][:4] == [rill.DtypeKind.INT] * 4
    assert frame.get_column(0).dtype == frame.get_column_by_name("int8").dtype


def test_buffers_are_zero_copy_views():
    batch = next(iter(rill.from_arrow(source()).batch(N).iter()))
    frame = batch.__dataframe__()
    arr = batch["dense"]
    bufs = frame.get_column_by_name("dense").get_buffers()
    data, dtype = bufs["data"]
    assert dtype == (rill.DtypeKind.INT, 64, "l", "=")
    assert data.ptr == np.from_dlpack(arr).__array_interface__["data"][0]
    assert data.bufsize == 8 * N
    assert data.__dlpack_device__() == (rill.DlpackDeviceType.CPU, 0)
    assert "bufsize=80" in repr(data)
    with pytest.raises(NotImplementedError, match="no DLPack export"):
        data.__dlpack__()
    s = frame.get_column_by_name("string").get_buffers()
    sdata, sdtype = s["data"]
    offsets, odtype = s["offsets"]
    validity, vdtype = s["validity"]
    assert sdtype == (rill.DtypeKind.UINT, 8, "C", "=")
    assert odtype == (rill.DtypeKind.INT, 64, "l", "=")
    assert vdtype == (rill.DtypeKind.BOOL, 1, "b", "=")
    assert offsets.bufsize == 8 * (N + 1) and validity.bufsize == 2
    exported = pa.array(batch["string"])  # Arrow shares the same buffers
    assert exported.buffers()[1].address == offsets.ptr
    assert exported.buffers()[2].address == sdata.ptr
    assert exported.buffers()[0].address == validity.ptr
    ts = frame.get_column_by_name("ts").get_buffers()["data"][1]
    assert ts == (rill.DtypeKind.INT, 64, "l", "=")


def test_buffers_outlive_every_rill_object():
    frame = frame_of(N)
    bufs = frame.get_column_by_name("dense").get_buffers()
    data = bufs["data"][0]
    del frame, bufs
    gc.collect()
    view = (ctypes.c_int64 * N).from_address(data.ptr)
    assert list(view) == [3 * i for i in range(N)]


def test_chunks_and_splitting():
    frame = frame_of(4)
    assert frame.num_chunks() == 3
    chunks = frame.get_chunks()
    assert [c.num_rows() for c in chunks] == [4, 4, 2]
    assert all(c.num_chunks() == 1 for c in chunks)
    split = frame.get_chunks(6)
    assert [c.num_rows() for c in split] == [2, 2, 2, 2, 1, 1]
    got = [c.get_column_by_name("dense") for c in split]
    values = []
    for col in got:
        buf = col.get_buffers()["data"][0]
        values += list((ctypes.c_int64 * col.size()).from_address(buf.ptr))
    assert values == [3 * i for i in range(N)]
    # slices keep their nulls
    nulls = [c.get_column_by_name("int16").null_count for c in split]
    assert nulls == [sum(NULLS[i:i + 2]) if i < 8 else sum(NULLS[i:i + 1])
                     for i in (0, 2, 4, 6, 8, 9)]
    pieces = frame.get_column_by_name("int16").get_chunks(3)
    assert [p.size() for p in pieces] == [4, 4, 2]
    with pytest.raises(ValueError, match=r"n_chunks must be a positive multiple of num_chunks\(\) "
                                         r"\(3\), not 4"):
        frame.get_chunks(4)
    multi = frame.get_column_by_name("int16")
    assert multi.num_chunks() == 3 and multi.size() == N and multi.null_count == 3
    with pytest.raises(rill.NotSupportedError, match="the column has 3 chunks and rill does not "
                                                     "concatenate them"):
        multi.get_buffers()


def test_select_columns():
    frame = frame_of()
    sub = frame.select_columns([3, 0])
    assert sub.column_names() == ["int64", "int8"] and sub.num_rows() == N
    sub = frame.select_columns_by_name(["string"])
    assert sub.column_names() == ["string"]
    got = pd.api.interchange.from_dataframe(sub)
    assert got["string"].dropna().tolist()[:2] == ["v0", "v2ßß"]
    with pytest.raises(rill.InvalidArgumentError, match=r"^unknown column 'nope'; columns are: "
                                                        r"int8, int16, "):
        frame.get_column_by_name("nope")
    with pytest.raises(rill.InvalidArgumentError,
                       match=r"^column index 99 out of range: the frame has 14 columns$"):
        frame.get_column(99)
    with pytest.raises(rill.InvalidArgumentError, match="select_columns takes indices"):
        frame.select_columns(["int8"])
    assert frame.__dataframe__().num_rows() == N


@pytest.mark.parametrize("name,table,message", [
    ("bin", pa.table({"bin": pa.array([b"x", None], pa.large_binary())}), "binary"),
    ("t", pa.table({"t": pa.array([[1.0, 2.0], None], pa.list_(pa.float32(), 2))}),
     r"float32\[2\]"),
])
def test_unsupported_columns_raise_not_supported(name, table, message):
    frame = rill.from_arrow(table).__dataframe__()
    assert frame.column_names() == [name]  # the frame itself is fine
    with pytest.raises(rill.NotSupportedError,
                       match=rf"^column '{name}': {message} cells have no form in the dataframe "
                             r"interchange protocol; export them through Arrow") as info:
        frame.get_column_by_name(name)
    assert info.value.column_name == name and info.value.code == rill.ENOTSUP
    with pytest.raises(rill.NotSupportedError):
        pd.api.interchange.from_dataframe(frame)


def test_bfloat16_is_not_supported():
    field = pa.field("h", pa.uint16(), metadata={b"rill.dtype": b"bfloat16"})
    table = pa.Table.from_arrays([pa.array([1, 2], pa.uint16())], schema=pa.schema([field]))
    row = next(iter(rill.from_arrow(table).batch(2).iter()))
    with pytest.raises(rill.NotSupportedError, match=r"^column 'h': bfloat16 cells have no form"):
        row["h"].interchange()


def test_array_interchange_column():
    row = next(iter(rill.from_arrow(source()).batch(N).iter()))
    col = row["float32"].interchange()
    assert col.size() == N and col.null_count == 3 and col.num_chunks() == 1
    data = col.get_buffers()["data"][0]
    got = np.frombuffer((ctypes.c_float * N).from_address(data.ptr), np.float32)
    want = [x if x is not None else None for x in source().column("float32").to_pylist()]
    assert [float(v) for v, w in zip(got, want) if w is not None] == [w for w in want
                                                                      if w is not None]
    assert "float32" in repr(col) or "Column" in repr(col)


def test_empty_columns_and_empty_batches():
    src = pa.table({"x": pa.array([], pa.int64())})
    frame = rill.from_arrow(src).__dataframe__()
    assert frame.num_rows() == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        row_frame = next(iter(rill.from_arrow(pa.table({"x": [1, 2]})).batch(2).iter()))
    got = pd.api.interchange.from_dataframe(row_frame.__dataframe__().get_chunks(2)[1])
    assert got["x"].tolist() == [2]
