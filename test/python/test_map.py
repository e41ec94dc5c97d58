"""Python map/reduce callables on rill's worker threads: inputs, outputs, nulls, errors and
threads. Oracles: numpy and pyarrow."""
import threading

import numpy as np
import pyarrow as pa
import pytest

import rill

N = 37


def collect(df, column, **kw):
    """Values of one column over a full iteration (row by row), as Python objects."""
    out = []
    for row in df.iter(columns=[column], **kw):
        out.extend(row[column].to_pylist())
    return out


def table_column(df, name):
    return pa.table(df).column(name).to_pylist()


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                                   "float16", "float32", "float64", "bool"])
def test_map_numeric_with_nulls(dtype):
    rng = np.random.default_rng(1)
    vals = rng.integers(0, 2 if dtype == "bool" else 100, N).astype(dtype)
    mask = np.arange(N) % 5 == 2
    df = rill.from_numpy({"x": np.ma.masked_array(vals, mask=mask)})
    seen = []

    def fn(x):
        seen.append((type(x), x.flags.writeable, x.dtype))
        return x  # a masked array in chunks that have nulls: nulls stay nulls

    df.map("y", fn, "x", dtype, nullable=True)
    got = table_column(df, "y")
    expected = pa.array(vals, mask=mask).to_pylist()
    assert got == expected
    assert all(w is False for _, w, _ in seen)
    assert all(d == np.dtype(dtype) for _, _, d in seen)
    assert any(t is np.ma.MaskedArray for t, _, _ in seen)


def test_map_arithmetic_matches_numpy():
    a = np.arange(N, dtype=np.int64)
    b = np.linspace(0, 1, N)
    df = rill.from_numpy({"a": a, "b": b})
    df.map("c", lambda a, b: a * 2.5 + b, ["a", "b"], "float64")
    df.map("d", lambda a: a.astype(np.int32) - 7, 0, "int32")
    t = pa.table(df)
    np.testing.assert_allclose(t.column("c").to_numpy(), a * 2.5 + b)
    np.testing.assert_array_equal(t.column("d").to_numpy(), a.astype(np.int32) - 7)


def test_map_tensor_cells():
    x = np.arange(N * 6, dtype=np.float32).reshape(N, 2, 3)
    df = rill.from_numpy({"x": x})
    shapes = []

    def fn(v):
        shapes.append(v.shape[1:])
        return v.sum(axis=2)

    df.map("s", fn, "x", "float32", (2,))
    got = np.concatenate([row["s"].to_numpy() for row in df.iter(columns=["s"])])
    np.testing.assert_array_equal(got, x.sum(axis=2))
    assert set(shapes) == {(2, 3)}


def test_map_strings_and_binary_with_nulls():
    words = ["alpha", None, "beta", "", "gamma", None, "δέλτα"] * 5
    df = rill.from_numpy({"w": words})
    df.map("upper", lambda w: [None if s is None else s.upper() for s in w], "w", "string", nullable=True)
    df.map("raw", lambda w: [None if s is None else s.encode() for s in w], "w", "binary", nullable=True)
    df.map("n", lambda w: np.ma.masked_array([0 if s is None else len(s) for s in w],
                                             mask=[s is None for s in w]), "w", "int64", nullable=True)
    t = pa.table(df)
    assert t.column("upper").to_pylist() == [None if s is None else s.upper() for s in words]
    assert t.column("raw").to_pylist() == [None if s is None else s.encode() for s in words]
    assert t.column("n").to_pylist() == [None if s is None else len(s) for s in words]


def test_map_list_result_with_none():
    df = rill.from_numpy({"a": np.arange(N)})
    df.map("b", lambda a: [None if v % 3 == 0 else float(v) for v in a], "a", "float64", nullable=True)
    assert table_column(df, "b") == [None if v % 3 == 0 else float(v) for v in range(N)]


def test_map_timestamp_input():
    ts = np.array(["2024-01-01T00:00:00", "NaT", "2024-03-05T12:30:00.000001"] * 3, dtype="datetime64[us]")
    df = rill.from_numpy({"t": ts})
    kinds = []

    def fn(t):
        kinds.append(np.ma.getdata(t).dtype)
        return np.ma.getdata(t).astype("int64") // 1_000_000

    df.map("sec", fn, "t", "int64")
    got = table_column(df, "sec")
    expected = ts.astype("int64") // 1_000_000
    assert [g for g, v in zip(got, ts) if not np.isnat(v)] == [int(e) for e, v in zip(expected, ts) if not np.isnat(v)]
    assert set(kinds) == {np.dtype("datetime64[us]")}


def test_threads_and_prefetch_match_serial_without_deadlock():
    x = np.arange(500, dtype=np.int64)
    df = rill.from_numpy({"x": x})
    df.map("y", lambda v: v * v + 1, "x", "int64", grain=7)
    serial = collect(df, "y", threads=rill.THREADS_NONE, prefetch=rill.PREFETCH_NONE)
    result = {}

    def run():
        result["v"] = collect(df, "y", threads=2, prefetch=8)

    th = threading.Thread(target=run)
    th.start()
    th.join(60)
    assert not th.is_alive(), "iteration with a Python map on 2 threads deadlocked"
    assert result["v"] == serial == list(x * x + 1)


def test_arrow_consumer_holding_the_gil_does_not_deadlock():
    df = rill.from_numpy({"x": np.arange(300, dtype=np.int64)})
    df.map("y", lambda v: v + 1, "x", "int64", grain=5)
    out = {}
    th = threading.Thread(target=lambda: out.setdefault("t", pa.table(df)))
    th.start()
    th.join(60)
    assert not th.is_alive(), "pa.table over a Python map deadlocked"
    assert out["t"].column("y").to_pylist() == list(range(1, 301))


def fails_on_three(v):
    return np.array([1 // (int(i) - 3) for i in v])


@pytest.mark.parametrize("threads", [rill.THREADS_NONE, 2])
def test_exception_is_reraised_with_row_note(threads):
    df = rill.from_numpy({"x": np.arange(10)})
    df.map("y", fails_on_three, "x", "int64", grain=1)
    it = df.iter(threads=threads)
    rows = []
    with pytest.raises(ZeroDivisionError) as info:
        for row in it:
            rows.append(row.index)
    e = info.value
    assert rows == [0, 1, 2]
    assert e.rill_row == 3 and e.rill_column == "y"
    assert any(n.startswith("rill: row 3, column 'y': python map 'y' raised ZeroDivisionError") for n in e.__notes__)
    assert "pyexc" not in "".join(e.__notes__)
    # the iterator stays usable: the following rows come out
    assert [row.index for row in it] == [4, 5, 6, 7, 8, 9]


def test_exception_under_skip_and_null():
    df = rill.from_numpy({"x": np.arange(10)})
    df.map("skip", fails_on_three, "x", "int64", grain=1, on_error="skip")
    it = df.iter(columns=["skip"])
    assert [r.index for r in it] == [0, 1, 2, 4, 5, 6, 7, 8, 9]
    assert it.stats()["skipped"] == 1
    df2 = rill.from_numpy({"x": np.arange(10)})
    df2.map("nul", fails_on_three, "x", "int64", grain=1, on_error="null")
    assert df2.field("nul").nullable
    assert table_column(df2, "nul")[3] is None
    assert table_column(df2, "nul")[4] == 1


def test_arrow_stream_reports_python_exception():
    df = rill.from_numpy({"x": np.arange(10)})
    df.map("y", fails_on_three, "x", "int64", grain=1)
    with pytest.raises(OSError, match="python map 'y' raised ZeroDivisionError") as info:
        pa.table(df)
    assert "pyexc" not in str(info.value)


@pytest.mark.parametrize("result, message", [
    (lambda v: v[:-1], r"returned an array of shape \(\d+,\) for \d+ rows of int32 \(expected \(\d+,\)\)"),
    (lambda v: v * 0.5, r"returned dtype float64, which does not cast to the column's int32"),
    (lambda v: [None] * len(v), r"returned None for cell 0 of a column that is not nullable"),
    (lambda v: "nope", r"returned an array of shape \(\) for"),
])
def test_wrong_result_is_a_row_error(result, message):
    df = rill.from_numpy({"x": np.arange(6, dtype=np.int32)})
    df.map("y", result, "x", "int32")
    with pytest.raises(rill.StageError, match=message) as info:
        next(iter(df))
    assert info.value.column_name == "y"
    assert info.value.row == 0


def test_wrong_string_result():
    df = rill.from_numpy({"x": ["a", "b"]})
    df.map("y", lambda v: [1, 2], "x", "string")
    with pytest.raises(rill.StageError, match="returned int for cell 0 of a string column"):
        next(iter(df))
    df2 = rill.from_numpy({"x": ["a", "b"]})
    df2.map("y", lambda v: ["a"], "x", "string")
    with pytest.raises(rill.StageError, match=r"returned 1 values for 2 rows"):
        next(iter(df2))


def test_map_argument_errors():
    df = rill.from_numpy({"x": np.arange(4)})
    with pytest.raises(rill.InvalidArgumentError, match=r"unknown dtype 'foo'; valid dtypes: bool, int8, .*float32"):
        df.map("y", lambda v: v, "x", "foo")
    with pytest.raises(rill.InvalidArgumentError, match=r"unknown column 'nope'; columns are: x"):
        df.map("y", lambda v: v, "nope", "int64")
    with pytest.raises(TypeError, match="fn must be callable"):
        df.map("y", 3, "x", "int64")
    with pytest.raises(rill.InvalidArgumentError):
        df.map("x", lambda v: v, "x", "int64")  # duplicate name


def test_map_after_batch_gets_whole_batches():
    df = rill.from_numpy({"x": np.arange(10, dtype=np.float32)})
    b = df.batch(4)
    lengths = []

    def fn(v):
        lengths.append(len(v))
        return v * 10

    b.map("y", fn, "x", "float32")
    got = [row["y"].to_numpy().tolist() for row in b.iter(threads=rill.THREADS_NONE)]
    assert got == [[0, 10, 20, 30], [40, 50, 60, 70], [80, 90]]
    assert sorted(set(lengths)) == [2, 4]


def test_reduce_with_python_callable():
    x = np.arange(10, dtype=np.int64)
    df = rill.from_numpy({"x": x})
    r = df.reduce("x", 3, lambda g: int(g.sum()), "int64")
    assert len(r) == 4
    assert table_column(r, "x") == [3, 12, 21, 9]
    r2 = df.reduce("x", 4, lambda g: np.array([g.min(), g.max()]), "int64", (2,))
    assert [row["x"].to_numpy().tolist() for row in r2] == [[[0, 3]], [[4, 7]], [[8, 9]]]


def test_reduce_exception_is_reraised():
    df = rill.from_numpy({"x": np.arange(6)})
    r = df.reduce("x", 2, lambda g: 1 // 0, "int64")
    with pytest.raises(ZeroDivisionError) as info:
        list(r)
    assert "python reduce 'x' raised ZeroDivisionError" in info.value.__notes__[-1]


def test_callable_is_released_with_the_dataframe():
    import gc
    import weakref

    class Fn:
        def __call__(self, v):
            return v

    fn = Fn()
    ref = weakref.ref(fn)
    df = rill.from_numpy({"x": np.arange(3)})
    df.map("y", fn, "x", "int64")
    del fn
    gc.collect()
    assert ref() is not None
    del df
    gc.collect()
    assert ref() is None
