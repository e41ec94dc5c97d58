"""rill's exception hierarchy and argument conversions: every class with its builtin base and
code, the attributes of errors raised by the C library, and the messages of bad arguments."""
import os
import pathlib

import numpy as np
import pyarrow as pa
import pytest

import rill

HIERARCHY = [
    ("InvalidArgumentError", ValueError, "EINVAL"),
    ("RillMemoryError", MemoryError, "ENOMEM"),
    ("RillIOError", OSError, "EIO"),
    ("FormatError", ValueError, "EFORMAT"),
    ("NotSupportedError", NotImplementedError, "ENOTSUP"),
    ("NoDeviceError", RuntimeError, "ENODEV"),
    ("RillRangeError", ValueError, "ERANGE"),
    ("SQLError", RuntimeError, "ESQL"),
    ("CudaError", RuntimeError, "ECUDA"),
    ("StageError", RuntimeError, "ESTAGE"),
]

DTYPE_LIST = ("bool, int8, int16, int32, int64, uint8, uint16, uint32, uint64, float16, "
              "bfloat16, float32, float64, string, binary, timestamp[us]")


@pytest.mark.parametrize("name,builtin,code", HIERARCHY, ids=[h[0] for h in HIERARCHY])
def test_hierarchy(name, builtin, code):
    cls = getattr(rill, name)
    assert issubclass(cls, rill.RillError) and issubclass(cls, builtin)
    assert issubclass(rill.RillError, Exception)
    assert cls.__module__ == "rill" and cls.__doc__
    assert cls.code == getattr(rill, code) < 0
    e = cls("plain message")
    assert str(e) == "plain message"
    assert (e.code, e.row, e.column, e.column_name) == (getattr(rill, code), -1, -1, None)
    with pytest.raises(builtin, match="plain message"):
        raise e


def test_constants_come_from_the_library():
    assert (rill.OK, rill.END) == (0, 1)
    codes = [getattr(rill, h[2]) for h in HIERARCHY]
    assert len(set(codes)) == len(codes)
    texts = {rill.strerror(c) for c in codes}
    assert len(texts) == len(codes)
    assert rill.strerror(rill.EIO) == "input/output error"
    assert rill.DTYPES == tuple(DTYPE_LIST.split(", "))
    assert rill.version() == rill.__version__ == "%d.%d.%d" % tuple(
        int(x) for x in rill.__version__.split("."))
    assert len({rill.ON_ERROR_RAISE, rill.ON_ERROR_SKIP, rill.ON_ERROR_NULL}) == 3
    assert (rill.DEVICE_CPU, rill.DEVICE_CUDA, rill.DEVICE_CUDA_HOST) == (1, 2, 3)  # DLPack's
    assert rill.PREFETCH_NONE < 0 and rill.THREADS_NONE < 0
    for name in ("Array", "Row", "Batch", "Field", "RillError", "DTYPES", "strerror"):
        assert name in rill._rill.__all__
    assert rill.Batch is rill.Row


def test_features_and_cuda_queries():
    for name in ("cuda", "jpeg", "png", "sqlite", "threads", "webp"):
        assert rill.has_feature(name) in (True, False)
    assert rill.has_feature("threads") is True
    with pytest.raises(rill.InvalidArgumentError,
                       match=r"^unknown feature 'gpu'; features are: cuda, jpeg, png, sqlite, "
                             r"threads, webp$"):
        rill.has_feature("gpu")
    n = rill.cuda_device_count()
    assert n >= 0 and (n == 0 or rill.has_feature("cuda"))
    stats = rill.cuda_pool_stats()
    assert set(stats) == {"allocs", "reuses", "cached_bytes"}
    assert all(isinstance(v, int) and v >= 0 for v in stats.values())


def test_io_error_from_the_library(tmp_path):
    missing = tmp_path / "missing.csv"
    with pytest.raises(rill.RillIOError) as info:
        rill.from_csv(missing)  # os.PathLike accepted
    e = info.value
    assert isinstance(e, OSError)
    assert e.code == rill.EIO and e.row == -1 and e.column == -1 and e.column_name is None
    assert str(e) == e.message == f"{missing}: cannot open: No such file or directory"


def test_row_error_carries_row_column_and_name():
    df = rill.from_csv_buffer(b"a,b\n1,2\n3,x\n", dtypes={"b": "int64"})
    with pytest.raises(rill.FormatError) as info:
        list(df.iter())
    e = info.value
    assert (e.code, e.row, e.column, e.column_name) == (rill.EFORMAT, 1, 1, "b")
    assert str(e) == e.message
    assert e.message.endswith("<buffer>:3: column 'b': cannot parse 'x' as int64")


def test_not_supported_from_the_library():
    with pytest.raises(rill.NotSupportedError,
                       match=r"^rill_df_from_arrow: column 'd' has Arrow format \"tdD\"$") as info:
        rill.from_arrow(pa.table({"d": pa.array([1], pa.date32())}))
    assert isinstance(info.value, NotImplementedError) and info.value.code == rill.ENOTSUP


@pytest.fixture
def df():
    return rill.from_arrow(pa.table({"a": pa.array([1, 2, 3]), "b": pa.array([1.0, 2.0, 3.0])}))


def test_unknown_column_lists_the_columns(df):
    with pytest.raises(rill.InvalidArgumentError,
                       match=r"^unknown column 'zz'; columns are: a, b$") as info:
        df.map("y", lambda a: a, ["zz"], "float64")
    assert info.value.code == rill.EINVAL
    with pytest.raises(rill.InvalidArgumentError,
                       match=r"^column index 7 out of range: the dataframe has 2 columns$"):
        df.map("y", lambda a: a, [7], "float64")
    with pytest.raises(rill.InvalidArgumentError,
                       match=r"^a column is given by its name \(str\) or index \(int\), not float$"):
        df.map("y", lambda a: a, [1.5], "float64")


@pytest.mark.parametrize("bad", ["foo", np.complex64, "datetime64[ns]", None])
def test_unknown_dtype_lists_the_dtypes(df, bad):
    with pytest.raises(rill.InvalidArgumentError,
                       match=r"^unknown dtype .*; valid dtypes: " + DTYPE_LIST.replace("[", r"\[")
                       .replace("]", r"\]") + "$") as info:
        df.map("y", lambda a: a, ["a"], bad)
    assert repr(bad) in str(info.value)


@pytest.mark.parametrize("spec,name", [
    ("float32", "float32"), (np.float32, "float32"), (np.dtype("int16"), "int16"),
    ("uint8", "uint8"), (str(np.dtype("uint64")), "uint64"), (np.dtype("datetime64[us]"),
                                                             "timestamp[us]"),
    ("timestamp_us", "timestamp[us]"), ("timestamp[us]", "timestamp[us]"), (bool, "bool"),
    (int, "int64"), (float, "float64"), (str, "string"), (bytes, "binary"),
    (np.bool_, "bool"),
])
def test_dtype_spellings(df, spec, name):
    col = df.map("y", lambda a: a, ["a"], spec)
    assert df.field(col).dtype == name


def test_shape_conversion(df):
    df.map("t", lambda a: np.zeros((len(a), 2, 3), np.float32), ["a"], "float32", shape=(2, 3))
    assert df.field("t").shape == (2, 3)
    df.map("u", lambda a: np.zeros((len(a), 4), np.float32), ["a"], "float32", shape=4)
    assert df.field("u").shape == (4,)
    with pytest.raises(rill.InvalidArgumentError,
                       match=r"^shape \(2, 0\): a dimension is positive, or -1 when it varies"):
        df.map("v", lambda a: a, ["a"], "float32", shape=(2, 0))
    with pytest.raises(rill.InvalidArgumentError, match=r"has 9 dimensions; at most 8"):
        df.map("v", lambda a: a, ["a"], "float32", shape=(1,) * 9)


def test_option_names(df):
    with pytest.raises(rill.InvalidArgumentError,
                       match=r"^unknown on_error 'maybe'; valid values: raise, skip, null$"):
        df.map("y", lambda a: a, ["a"], "float64", on_error="maybe")
    with pytest.raises(rill.InvalidArgumentError,
                       match=r"^unknown where 'gpu'; valid values: cpu, cpu_serial, cuda$"):
        df.map("y", lambda a: a, ["a"], "float64", where="gpu")
    with pytest.raises(rill.InvalidArgumentError,
                       match=r"^unknown layout 'xyz'; valid values: hwc, chw, nhwc, nchw$"):
        df.batch(2, layout="xyz")
    df.map("y", lambda a: a, ["a"], "float64", on_error=rill.ON_ERROR_NULL)
    assert df.batch(2, layout="nchw") is not None


def test_field_is_a_named_struct_sequence(df):
    f = df.field("b")
    assert isinstance(f, rill.Field) and isinstance(f, tuple)
    assert f == ("b", "float64", (), False, (rill.DEVICE_CPU, 0))
    assert (f.name, f.dtype, f.shape, f.nullable, f.device) == tuple(f)


def test_python_exception_in_a_map_keeps_its_type(df):
    def boom(x):
        raise KeyError("cursed")

    df.map("y", boom, ["b"], "float64")
    with pytest.raises(KeyError, match="cursed") as info:
        list(df.iter())
    assert any("column 'y'" in note for note in info.value.__notes__)


def test_row_lookup_errors():
    row = next(iter(rill.from_arrow(pa.table({"a": [1], "b": [2]})).iter()))
    with pytest.raises(rill.InvalidArgumentError, match=r"^unknown column 'q'; columns are: a, b$"):
        row["q"]
    with pytest.raises(rill.InvalidArgumentError,
                       match=r"^column index 5 out of range: the row has 2 columns$"):
        row[5]
    assert row.get("q") is None and "q" not in row and "a" in row


def test_paths_accept_pathlike_and_bytes(tmp_path):
    p = tmp_path / "t.csv"
    p.write_bytes(b"x\n1\n2\n")
    for arg in (p, str(p), os.fsencode(p), pathlib.PurePath(p)):
        assert len(rill.from_csv(arg)) == 2
    with pytest.raises(TypeError):
        rill.from_csv(3.5)
