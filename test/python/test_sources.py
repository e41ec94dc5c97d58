"""Module-level sources: numpy/Python values, Arrow objects, CSV, SQLite, files and image
folders. Oracles: pyarrow, numpy, Python's csv and sqlite3 modules."""
import csv
import gc
import io
import pathlib
import random
import shutil
import sqlite3
import subprocess

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import rill

NUMERIC = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32",
           "float64"]


def values(dtype, n):
    rng = np.random.default_rng(len(dtype))
    if dtype == "bool":
        return rng.integers(0, 2, n).astype(bool)
    if dtype.startswith(("int", "uint")):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    return rng.normal(0, 100, n).astype(dtype)


@pytest.mark.parametrize("dtype", NUMERIC)
@pytest.mark.parametrize("copy", [False, True])
def test_from_numpy_numeric_with_nulls(dtype, copy):
    n = 29
    v = values(dtype, n)
    mask = np.arange(n) % 4 == 1
    df = rill.from_numpy({"x": np.ma.masked_array(v, mask=mask), "plain": v}, copy=copy)
    assert df.field("x").dtype == dtype and df.field("x").nullable
    assert not df.field("plain").nullable
    t = pa.table(df)
    assert t.column("x").to_pylist() == pa.array(v, mask=mask).to_pylist()
    assert t.column("plain").to_pylist() == pa.array(v).to_pylist()


def test_from_numpy_borrows_unless_copy():
    a = np.arange(8, dtype=np.int64)
    borrowed = rill.from_numpy({"a": a})
    copied = rill.from_numpy({"a": a}, copy=True)
    a[0] = 100
    assert pa.table(borrowed).column("a")[0].as_py() == 100
    assert pa.table(copied).column("a")[0].as_py() == 0
    # the dataframe keeps the numpy memory alive
    b = np.arange(5, dtype=np.float64) * 3
    df = rill.from_numpy(x=b)
    del b
    gc.collect()
    assert pa.table(df).column("x").to_pylist() == [0.0, 3.0, 6.0, 9.0, 12.0]


def test_from_numpy_strings_bytes_none_and_kwargs():
    s = ["a", None, "ccc", "", "ü"]
    b = [b"\x00\x01", b"", None, b"xyz", b"\xff"]
    df = rill.from_numpy({"s": s}, b=b, u=np.array(["p", "q", "r", "s", "t"]))
    assert [f.dtype for f in df.schema] == ["string", "binary", "string"]
    t = pa.table(df)
    assert t.column("s").to_pylist() == s
    assert t.column("b").to_pylist() == b
    assert t.column("u").to_pylist() == ["p", "q", "r", "s", "t"]


def test_from_numpy_numbers_with_none_and_tensors():
    df = rill.from_numpy({"n": [1.5, None, 3.0]})
    assert pa.table(df).column("n").to_pylist() == [1.5, None, 3.0]
    x = np.arange(24, dtype=np.int16).reshape(4, 3, 2)
    df = rill.from_numpy({"x": x})
    f = df.field("x")
    assert (f.dtype, f.shape) == ("int16", (3, 2))
    got = np.concatenate([r["x"].to_numpy() for r in df.batch(3)])
    np.testing.assert_array_equal(got, x)
    # non-contiguous and byte-swapped input
    y = np.arange(20, dtype=">i4")[::2]
    assert pa.table(rill.from_numpy({"y": y})).column("y").to_pylist() == list(range(0, 20, 2))


def test_from_numpy_datetime64_with_nat():
    ts = np.array(["2020-01-01T00:00:00", "NaT", "1969-12-31T23:59:59.5"], dtype="datetime64[ms]")
    df = rill.from_numpy({"t": ts})
    assert df.field("t").dtype.startswith("timestamp")
    got = pa.table(df).column("t")
    expected = pa.array(ts.astype("datetime64[us]"), type=pa.timestamp("us"))
    assert got.cast(pa.timestamp("us")).to_pylist() == expected.to_pylist()


def test_from_numpy_errors():
    with pytest.raises(rill.InvalidArgumentError, match=r"column 'b' has 2 rows, column 'a' has 3"):
        rill.from_numpy({"a": np.arange(3), "b": np.arange(2)})
    with pytest.raises(rill.InvalidArgumentError, match=r"numpy dtype complex128 is not supported"):
        rill.from_numpy({"c": np.zeros(3, dtype=complex)})
    with pytest.raises(rill.InvalidArgumentError, match="0-d array"):
        rill.from_numpy({"c": np.float64(1.0)})
    with pytest.raises(rill.InvalidArgumentError, match=r"cell 1 is int; a string column takes str or None"):
        rill.from_numpy({"s": ["a", 1]})
    with pytest.raises(TypeError, match="mapping"):
        rill.from_numpy([1, 2])


def test_from_arrays_with_rill_arrays():
    src = rill.from_numpy({"a": np.arange(6, dtype=np.int32)})
    arr = next(iter(src.batch(6)))["a"]
    df = rill.from_arrays(["a", "b"], [arr, [1.0, 2.0, None, 4.0, 5.0, 6.0]])
    t = pa.table(df)
    assert t.column("a").to_pylist() == list(range(6))
    assert t.column("b").to_pylist() == [1.0, 2.0, None, 4.0, 5.0, 6.0]
    with pytest.raises(rill.InvalidArgumentError, match="2 names for 1 arrays"):
        rill.from_arrays(["a", "b"], [arr])


def test_from_arrow_table_batch_and_polars():
    t = pa.table({"a": pa.array([1, None, 3], pa.int64()), "s": pa.array(["x", "y", None])})
    for obj in (t, t.to_batches()[0], pl.from_arrow(t)):
        df = rill.from_arrow(obj)
        back = pa.table(df)
        assert back.column("a").to_pylist() == [1, None, 3]
        assert back.column("s").to_pylist() == ["x", "y", None]
    with pytest.raises(TypeError, match="__arrow_c_stream__ or __arrow_c_array__"):
        rill.from_arrow(42)
    df = rill.from_arrow(pd.DataFrame({"f": [0.5, 1.5]}).pipe(pa.Table.from_pandas, preserve_index=False))
    assert pa.table(df).column("f").to_pylist() == [0.5, 1.5]


def write_csv(path, rows, **kw):
    with open(path, "w", newline="") as f:
        csv.writer(f, **kw).writerows(rows)


def test_from_csv_matches_python_csv(tmp_path):
    rows = [["id", "name", "score", "ok", "when"],
            ["1", "plain", "1.5", "true", "2024-01-02T03:04:05Z"],
            ["2", "with, comma", "", "false", ""],
            ["3", 'quote "inside"', "-2.25", "", "2024-01-02"],
            ["", "multi\nline", "7", "true", "2023-12-31T23:59:59Z"]]
    p = tmp_path / "data.csv"
    write_csv(p, rows)
    df = rill.from_csv(p)  # os.PathLike
    assert df.columns == rows[0]
    assert [f.dtype for f in df.schema][:4] == ["int64", "string", "float64", "bool"]
    t = pa.table(df)
    with open(p, newline="") as f:
        ref = list(csv.reader(f))[1:]
    assert t.column("name").to_pylist() == [r[1] for r in ref]
    assert t.column("id").to_pylist() == [int(r[0]) if r[0] else None for r in ref]
    assert t.column("score").to_pylist() == [float(r[2]) if r[2] else None for r in ref]
    assert t.column("ok").to_pylist() == [{"true": True, "false": False, "": None}[r[3]] for r in ref]
    assert t.column("when").null_count == 1



def test_from_csv_reads_a_list_of_files_as_one(tmp_path):
    import gzip
    rng = np.random.default_rng(4)
    frames = []
    paths = []
    for k in range(4):
        n = int(rng.integers(0, 40)) if k != 1 else 0  # one file with a header only
        f = pd.DataFrame({"id": np.arange(n) + 100 * k,
                          "score": rng.integers(0, 9, n) if k != 2 else rng.random(n),  # int64 but float64 in one
                          "name": [f"n{k}_{i}" if i % 7 else None for i in range(n)]})
        f = f[["name", "score", "id"]] if k == 3 else f  # columns in another order
        p = tmp_path / f"part{k}.csv"
        f.to_csv(p, index=False)
        if k == 0:
            p = tmp_path / "part0.csv.gz"
            p.write_bytes(gzip.compress(f.to_csv(index=False).encode()))
        frames.append(f[["id", "score", "name"]])
        paths.append(p if k % 2 else str(p))  # os.PathLike and str
    df = rill.from_csv(paths)
    assert df.columns == ["id", "score", "name"]
    assert [f.dtype for f in df.schema] == ["int64", "float64", "string"]
    want = pd.concat(frames, ignore_index=True)
    t = pa.table(df).to_pandas()
    assert t["id"].tolist() == want["id"].tolist()
    assert np.allclose(t["score"].to_numpy(), want["score"].to_numpy())
    assert t["name"].fillna("").tolist() == want["name"].fillna("").tolist()
    assert len(rill.from_csv(tuple(paths[:1]))) == len(frames[0])
    # a bad cell names its file and line
    bad = tmp_path / "bad.csv"
    bad.write_text("id,score,name\n1,2,x\nseven,3,y\n")
    with pytest.raises(rill.FormatError, match=r"bad\.csv:3"):
        list(rill.from_csv([paths[2], bad], dtypes={"id": "int64"}))
    other = tmp_path / "other.csv"
    other.write_text("id,score,label\n1,2,x\n")
    with pytest.raises(rill.FormatError, match=r"other\.csv has no column 'name' \("):
        rill.from_csv([paths[2], other])
    other.write_text("id,score,name\n1,2,2024-01-02\n")
    with pytest.raises(rill.FormatError, match=r"column 'name' is string in .*part2\.csv and timestamp\[us\] in "
                                               r".*other\.csv: give its type"):
        rill.from_csv([paths[2], other])
    assert pa.table(rill.from_csv([paths[2], other], dtypes={"name": "string"})).column("name").to_pylist()[-1] == \
        "2024-01-02"
    # bad rows are left out under on_bad_row="skip", each file's listed by its part
    bad.write_text("id,score,name\n1,2,x\n2,3\n3,4,z\n")
    both = rill.from_csv([paths[2], bad], on_bad_row="skip")
    assert len(both) == len(frames[2]) + 2
    assert [p.bad_rows for p in both.parts] == [[], [(3, 2)]]
    assert both.bad_rows is None  # not a CSV file's own dataframe
    with pytest.raises(ValueError, match="from_csv: an empty list of paths"):
        rill.from_csv([])
    with pytest.raises(TypeError):
        rill.from_csv([paths[2], 3])
    with pytest.raises(rill.RillIOError, match="nonexistent.csv: cannot open"):
        rill.from_csv([paths[2], tmp_path / "nonexistent.csv"])


def test_from_csv_options(tmp_path):
    p = tmp_path / "semi.csv"
    p.write_text("1;'a;b'\n2;'c'\n")
    df = rill.from_csv(str(p), delimiter=";", quote="'", header=False, dtypes={0: "int32", "column_1": "string"})
    assert df.columns == ["column_0", "column_1"]
    assert [f.dtype for f in df.schema] == ["int32", "string"]
    assert pa.table(df).column("column_1").to_pylist() == ["a;b", "c"]
    df = rill.from_csv(str(p), delimiter=";", quote="'", header=False, infer=False)
    assert [f.dtype for f in df.schema] == ["string", "string"]
    with pytest.raises(rill.InvalidArgumentError, match=r"unknown dtype 'int128'; valid dtypes: bool, int8"):
        rill.from_csv(p, dtypes={"a": "int128"})
    with pytest.raises(rill.InvalidArgumentError, match="delimiter must be a single ASCII character"):
        rill.from_csv(p, delimiter=";;")


def test_from_csv_trim_and_comment_give_the_written_values(tmp_path):
    """Values written with random spaces and tabs around them (quoted where they hold blanks at
    their ends, commas, quotes, line breaks or '#'), between comment lines that hold quotes and
    commas and lines of blanks, read back exactly under trim=True, comment='#'; typed columns
    are inferred through the blanks; the parallel index (small chunks, 2 threads) agrees."""
    rnd = random.Random(7)
    words = ["a", "b c", "x,y", 'say "hi"', "two\nlines", "#tag", " pad ", "\tt", "", "crlf\r\nin"]

    def pad():
        return "".join(rnd.choice(" \t") for _ in range(rnd.choice([0, 0, 1, 2, 3])))

    def field(v, force_quote=False):
        needs = force_quote or v != v.strip(" \t") or any(c in v for c in ',"\n\r#') or v == ""
        text = '"' + v.replace('"', '""') + '"' if needs and (force_quote or v != "" or rnd.random() < 0.5) else v
        return pad() + text + pad()

    header = ["id", "word", "score", "flag"]
    lines = ["# written by a test, with \"quotes\", commas", ",".join(field(h) for h in header)]
    want = []
    for i in range(3000):
        r = rnd.random()
        if r < 0.05:
            lines.append("#" + rnd.choice(['', ' a,b,"c', 'x"y"z', ',,,']))
            continue
        if r < 0.08:
            lines.append(pad())
            continue
        w = rnd.choice(words)
        row = [str(i), w, repr(i / 4), rnd.choice(["true", "false"])]
        want.append(row)
        lines.append(",".join([field(row[0]), field(w, force_quote=rnd.random() < 0.2), field(row[2]), field(row[3])]))
    text = ("\r\n" if rnd.random() < 0.5 else "\n").join(lines) + "\n"
    p = tmp_path / "padded.csv"
    p.write_bytes(text.encode())
    df = rill.from_csv(p, trim=True, comment="#")
    assert df.columns == header
    assert [f.dtype for f in df.schema] == ["int64", "string", "float64", "bool"]
    t = pa.table(df)
    assert t.column("id").to_pylist() == [int(r[0]) for r in want]
    assert t.column("word").to_pylist() == [r[1] for r in want]
    assert t.column("score").to_pylist() == [float(r[2]) for r in want]
    assert t.column("flag").to_pylist() == [r[3] == "true" for r in want]
    par = rill.from_csv_buffer(p.read_bytes(), trim=True, comment="#", infer=False, chunk_bytes=4096, threads=2)
    assert pa.table(par).column("word").to_pylist() == [r[1] for r in want]
    # without the options the same file is not read: '#' lines and quotes after blanks are text
    with pytest.raises(rill.FormatError, match=r"padded.csv:\d+: expected \d+ fields, found \d+"):
        rill.from_csv(p)


def test_from_csv_trim_matches_python_skipinitialspace(tmp_path):
    """Python's csv module with skipinitialspace, trailing spaces stripped from its values: the
    same rows as trim=True."""
    text = ' a,  "b,c", "q""d",x\n 1,,  "two\nlines", end\n  "",   z  ,"y" ,\n'
    p = tmp_path / "lead.csv"
    p.write_text(text)
    with open(p, newline="") as f:
        ref = [[v.rstrip(" ") for v in r] for r in csv.reader(f, skipinitialspace=True)]
    assert ref[0] == ["a", "b,c", 'q"d', "x"] and ref[2] == ["", "z", "y", ""]
    t = pa.table(rill.from_csv(p, trim=True, header=False, infer=False))
    assert [list(r) for r in zip(*[c.to_pylist() for c in t.columns])] == ref


def test_from_csv_escape_matches_python_csv(tmp_path):
    """Values holding the delimiter, quotes, backslashes and line breaks written with backslash
    escapes (quoted or not, quotes inside quoted ones escaped or doubled) read back as written,
    and as Python's csv module reads them with escapechar; the parallel index (small chunks)
    agrees."""
    rnd = random.Random(11)
    alphabet = ['a', 'b', ',', '"', '\\', '\n', ' ', 'x']

    def write(v):
        if rnd.random() < 0.5:  # unquoted: every special byte escaped
            return "".join("\\" + ch if ch in ',"\\\n' else ch for ch in v)
        return '"' + "".join(("\\" + ch if rnd.random() < 0.5 else '""') if ch == '"' else
                             "\\" + ch if ch == "\\" else ch for ch in v) + '"'

    want = [["k", "v", "w"]]
    for i in range(2000):
        want.append([str(i)] + ["".join(rnd.choice(alphabet) for _ in range(rnd.randrange(1, 8))) for _ in range(2)])
    text = "\n".join(",".join(write(v) for v in row) for row in want) + "\n"
    p = tmp_path / "escaped.csv"
    p.write_text(text)
    with open(p, newline="") as f:
        ref = list(csv.reader(f, escapechar="\\"))
    assert ref == want
    t = pa.table(rill.from_csv(p, escape="\\", infer=False))
    assert t.column_names == want[0]
    assert [list(r) for r in zip(*[c.to_pylist() for c in t.columns])] == want[1:]
    t = pa.table(rill.from_csv_buffer(text.encode(), escape="\\", infer=False, chunk_bytes=512, threads=2))
    assert [list(r) for r in zip(*[c.to_pylist() for c in t.columns])] == want[1:]
    with pytest.raises(rill.InvalidArgumentError, match="the escape character must differ"):
        rill.from_csv(p, escape='"')


def test_from_csv_null_values_match_pandas(tmp_path):
    """null_values against pandas' na_values (keep_default_na=False): the same nulls in number,
    string and bool columns, over the plain paths and the general one; typed columns are
    inferred through them."""
    rnd = random.Random(5)
    nulls = ["NA", "?", "-999", "n/a"]
    lines = ["i,f,s,b"]
    for r in range(3000):
        def pick(v):
            return rnd.choice(nulls) if rnd.random() < 0.15 else v
        s = pick(rnd.choice(["abc", "x y", "", '"q,r"', "NAN", "na"]))
        lines.append(",".join([pick(str(r)), pick(repr(r / 8)), s, pick(rnd.choice(["true", "false"]))]))
    p = tmp_path / "nulls.csv"
    p.write_text("\n".join(lines) + "\n")
    df = rill.from_csv(p, null_values=nulls)
    assert [f.dtype for f in df.schema] == ["int64", "float64", "string", "bool"]
    t = pa.table(df)
    ref = pd.read_csv(p, na_values=nulls, keep_default_na=False, dtype={"s": str})
    assert t.column("i").to_pylist() == [None if pd.isna(v) else int(v) for v in ref["i"]]
    assert t.column("f").to_pylist() == [None if pd.isna(v) else float(v) for v in ref["f"]]
    assert t.column("b").to_pylist() == [None if pd.isna(v) else bool(v) for v in ref["b"]]
    # pandas reads an empty string field as "" only with keep_default_na=False and no "" listed
    assert t.column("s").to_pylist() == [None if pd.isna(v) else v for v in ref["s"]]
    assert t.column("s").null_count > 300
    with pytest.raises(TypeError, match="null_values must be a sequence of str, not a str"):
        rill.from_csv(p, null_values="NA")
    with pytest.raises(TypeError, match="null_values must be a sequence of str, not a bytes"):
        rill.from_csv(p, null_values=b"NA")
    with pytest.raises(TypeError, match=r"null_values\[1\] must be a str or bytes, not int"):
        rill.from_csv(p, null_values=["NA", 7])
    with pytest.raises(TypeError, match=r"null_values\[0\] must be without NUL characters"):
        rill.from_csv(p, null_values=["N\0A"])
    with pytest.raises(rill.InvalidArgumentError, match="more than 64 null values"):
        rill.from_csv(p, null_values=[str(k) for k in range(65)])


def test_from_csv_expands_a_brace_pattern_that_names_no_file(tmp_path):
    for k in range(3):
        (tmp_path / f"part-{k:02d}.csv").write_text(f"id,name\n{k},n{k}\n{k + 10},m{k}\n")
    df = rill.from_csv(str(tmp_path / "part-{00..02}.csv"))
    assert pa.table(df).column("id").to_pylist() == [0, 10, 1, 11, 2, 12]
    assert len(df.parts) == 3
    assert pa.table(rill.from_csv(tmp_path / "part-{02,00}.csv")).column("name").to_pylist() == ["n2", "m2", "n0", "m0"]
    # a file whose name holds braces is that file; a missing expanded file is named
    (tmp_path / "odd-{1,2}.csv").write_text("id\n7\n")
    assert pa.table(rill.from_csv(str(tmp_path / "odd-{1,2}.csv"))).column("id").to_pylist() == [7]
    with pytest.raises(rill.RillIOError, match=r"part-03\.csv"):
        rill.from_csv(str(tmp_path / "part-{00..03}.csv"))
    with pytest.raises(rill.InvalidArgumentError, match=r"unmatched '\{' at character"):
        rill.from_csv(str(tmp_path / "part-{00..03.csv"))


def test_from_csv_more_files_than_the_process_may_map(tmp_path):
    # a file mapped each would exceed vm.max_map_count: the least recently read are unmapped
    try:
        limit = int(pathlib.Path("/proc/sys/vm/max_map_count").read_text())
    except (OSError, ValueError):
        pytest.skip("no /proc/sys/vm/max_map_count to size the dataset by")
    if limit > 100_000:
        pytest.skip(f"vm.max_map_count is {limit}: more files than this test writes")
    n = limit + 1000
    paths = []
    for i in range(n):
        p = tmp_path / f"s{i:06d}.csv"
        p.write_bytes(b"id,name\n%d,n%d\n" % (i, i % 10))
        paths.append(p)
    df = rill.from_csv(paths)
    assert len(df) == n
    for frame in (df, df.shuffle(3)):
        ids = np.concatenate([b["id"].to_numpy() for b in frame.batch(4096).iter(threads=2)])
        assert len(ids) == n and np.array_equal(np.sort(ids), np.arange(n))
        assert frame is df or not np.array_equal(ids, np.arange(n))
    maps = sum(str(tmp_path) in line for line in pathlib.Path("/proc/self/maps").read_text().splitlines())
    assert maps <= limit // 2, f"{maps} of the files mapped"
    del df
    gc.collect()


def test_from_csv_null_values_in_the_files_encoding(tmp_path):
    # the file's bytes are compared before they are decoded: a str null value is written in the
    # file's encoding, bytes are compared as they are
    p = tmp_path / "latin1_nulls.csv"
    p.write_bytes("name,n\ncaf\u00e9,1\nn\u00e9ant,n\u00e9ant\nok,3\n".encode("latin-1"))
    t = pa.table(rill.from_csv(p, encoding="latin-1", null_values=["n\u00e9ant"]))
    assert t.column("name").to_pylist() == ["caf\u00e9", None, "ok"]
    assert t.column("n").to_pylist() == [1, None, 3]
    assert t.schema.field("n").type == pa.int64()
    raw = pa.table(rill.from_csv(p, encoding="latin-1", null_values=[b"n\xe9ant"]))
    assert raw.equals(t)
    # in a UTF-8 file the same str is its UTF-8 bytes
    u = tmp_path / "utf8_nulls.csv"
    u.write_bytes("name,n\nn\u00e9ant,n\u00e9ant\nok,3\n".encode("utf-8"))
    assert pa.table(rill.from_csv(u, null_values=["n\u00e9ant"])).column("n").to_pylist() == [None, 3]
    # the Latin-1 bytes do not match the UTF-8 file's: the column stays text
    assert pa.table(rill.from_csv(u, null_values=[b"n\xe9ant"])).column("name").to_pylist() == ["n\u00e9ant", "ok"]
    with pytest.raises(ValueError, match=r"null_values\[1\] \('\u20ac'\) cannot be written in Latin-1, the file's encoding"):
        rill.from_csv(p, encoding="latin-1", null_values=["NA", "\u20ac"])
    buf = pa.table(rill.from_csv_buffer(p.read_bytes(), encoding="latin-1", null_values=["n\u00e9ant"]))
    assert buf.equals(t)


@pytest.mark.skipif(not rill.has_feature("gzip"), reason="rill built without zlib")
def test_from_csv_gzip_matches_pandas(tmp_path):
    import gzip
    rnd = random.Random(5)
    lines = ["id,x,name"] + [f"{i},{rnd.uniform(-9, 9):.4f},n{rnd.randrange(50)}" for i in range(5000)]
    text = "\n".join(lines) + "\n"
    p = tmp_path / "table.csv.gz"
    p.write_bytes(gzip.compress(text.encode()))
    t = pa.table(rill.from_csv(p))
    ref = pd.read_csv(p)  # pandas infers gzip from the name
    assert t.column_names == list(ref.columns)
    assert t.column("id").to_pylist() == ref["id"].tolist()
    assert t.column("x").to_pylist() == ref["x"].tolist()
    assert t.column("name").to_pylist() == ref["name"].tolist()
    # the magic number decides, not the name; buffers too
    q = tmp_path / "table.data"
    q.write_bytes(gzip.compress(text.encode()))
    assert pa.table(rill.from_csv(q)).equals(t)
    assert pa.table(rill.from_csv_buffer(gzip.compress(text.encode()))).equals(t)
    with pytest.raises(rill.FormatError, match=r"table\.csv\.gz: the gzip data ends early"):
        rill.from_csv_buffer(p.read_bytes()[:-20], name="table.csv.gz")
    with pytest.raises(rill.NotSupportedError, match=r"the input is xz-compressed: decompress it first"):
        rill.from_csv_buffer(b"\xfd7zXZ\x00" + b"\0" * 20)
    assert rill.has_feature("gzip") is True


@pytest.mark.skipif(not rill.has_feature("zstd"), reason="rill built without libzstd")
@pytest.mark.skipif(shutil.which("zstd") is None, reason="no zstd command to compress with")
def test_from_csv_zstd(tmp_path):
    plain = tmp_path / "t.csv"
    plain.write_text("id,x,s\n" + "".join(f"{i},{i / 8},s{i % 7}\n" for i in range(3000)))
    subprocess.run(["zstd", "-q", "-19", str(plain), "-o", str(tmp_path / "t.csv.zst")], check=True)
    t = pa.table(rill.from_csv(tmp_path / "t.csv.zst"))
    assert t.equals(pa.table(rill.from_csv(plain)))
    assert t.num_rows == 3000 and t.column("x")[-1].as_py() == 2999 / 8
    with pytest.raises(rill.FormatError, match=r"t\.csv\.zst: the zstd data ends early"):
        rill.from_csv_buffer((tmp_path / "t.csv.zst").read_bytes()[:-9], name="t.csv.zst")


def test_from_csv_skip_lines(tmp_path):
    # a preamble before the header (an open quote in it has no effect); line numbers count it
    p = tmp_path / "export.csv"
    p.write_text('Exported by a logger "v2\n\nid,value\n1,2.5\n2,x\n')
    t = pa.table(rill.from_csv(p, skip_lines=2, dtypes={"value": "string"}))
    assert t.column_names == ["id", "value"]
    assert t.column("id").to_pylist() == [1, 2] and t.column("value").to_pylist() == ["2.5", "x"]
    with pytest.raises(rill.FormatError, match=r"export\.csv:5: column 'value': cannot parse 'x' as float64"):
        list(rill.from_csv(p, skip_lines=2, infer_rows=1).iter())
    buf = rill.from_csv_buffer(p.read_bytes(), skip_lines=2, header=False)
    assert pa.table(buf).column("column_0").to_pylist() == ["id", "1", "2"]
    with pytest.raises(rill.FormatError, match=r"<buffer>: nothing after the 5 lines skip_lines leaves out "
                                               r"\(the input has 5\)"):
        rill.from_csv_buffer(p.read_bytes(), skip_lines=5)
    with pytest.raises(rill.InvalidArgumentError, match=r"skip_lines must be 0 or more \(got -1\)"):
        rill.from_csv(p, skip_lines=-1)
    with pytest.raises(TypeError):
        rill.from_csv(p, skip_lines="2")


def test_from_csv_misfit_after_inference_says_where_the_type_came_from():
    data = b"n\n" + b"".join(b"%d\n" % i for i in range(1500)) + b"3.5\n"
    with pytest.raises(rill.FormatError, match=r"<buffer>:1502: column 'n': cannot parse '3.5' as int64 "
                                               r"\(inferred from the first 1000 rows: give the column a type, "
                                               r"or raise infer_rows\)$"):
        list(rill.from_csv_buffer(data).iter())
    t = pa.table(rill.from_csv_buffer(data, infer_rows=-1))
    assert t.column("n").type == pa.float64() and t.column("n")[-1].as_py() == 3.5
    assert pa.table(rill.from_csv_buffer(data, dtypes={"n": "float64"})).num_rows == 1501


def test_from_csv_decimal_comma_matches_pandas(tmp_path):
    rnd = random.Random(3)
    lines = ["n;x;s"]
    for r in range(2000):
        x = rnd.choice([f"{rnd.uniform(-1e4, 1e4):.6f}", f"{rnd.uniform(-1, 1):.3e}", str(rnd.randrange(-99, 99)), ""])
        lines.append(f"{r};{x.replace('.', ',')};t{r},{r}")
    p = tmp_path / "eu.csv"
    p.write_text("\n".join(lines) + "\n")
    t = pa.table(rill.from_csv(p, delimiter=";", decimal=","))
    ref = pd.read_csv(p, sep=";", decimal=",")
    assert t.column("x").type == pa.float64()
    assert t.column("x").to_pylist() == [None if pd.isna(v) else float(v) for v in ref["x"]]
    assert t.column("s").to_pylist() == list(ref["s"])
    with pytest.raises(rill.InvalidArgumentError, match="the decimal separator ',' is the delimiter"):
        rill.from_csv(p, decimal=",")


def test_readme_table_example_prints_what_it_says(root, monkeypatch, capsys):
    """The README's CSV example runs from the project's root and prints what its comments say."""
    text = (root / "README.md").read_text()
    start = text.index("A table written the way many public datasets are")
    code = text[text.index("```python\n", start) + 10:text.index("```", text.index("```python\n", start) + 10)]
    monkeypatch.chdir(root)
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    said = [line.split("# ", 1)[1] for line in code.splitlines() if "print(" in line]
    assert out[0] == said[0]
    assert out[1].startswith(said[1].rstrip(".}").rstrip(", "))
    assert out[2] == "{'age': [28], 'workclass': ['Private'], 'hours': [None], 'employed': [True]}"


def test_from_csv_trim_and_comment_errors(tmp_path):
    with pytest.raises(rill.InvalidArgumentError,
                       match="the comment character must differ from the delimiter and the quote"):
        rill.from_csv_buffer(b"a\n1\n", comment=",")
    with pytest.raises(rill.InvalidArgumentError, match="comment must be a single ASCII character"):
        rill.from_csv_buffer(b"a\n1\n", comment="##")
    with pytest.raises(rill.FormatError, match=r"<buffer>: empty input \(no header row\)"):
        rill.from_csv_buffer(b"# only\n  \n", comment="#", trim=True)


def test_from_csv_errors(tmp_path):
    missing = tmp_path / "missing.csv"
    with pytest.raises(rill.RillIOError, match="missing.csv") as info:
        rill.from_csv(missing)
    assert isinstance(info.value, OSError)
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n3\n4,5\n")
    with pytest.raises(rill.FormatError, match=r"bad\.csv:3") as info:
        rill.from_csv(bad)
    assert isinstance(info.value, ValueError)
    skipped = rill.from_csv(bad, on_bad_row="skip")
    assert pa.table(skipped).column("a").to_pylist() == [1, 4]
    nulled = rill.from_csv(bad, on_bad_row="null")
    assert pa.table(nulled).column("b").to_pylist() == [2, None, 5]
    # the bad rows, left out or nulled, are listed with their lines
    for df in (skipped, nulled, skipped.shuffle(1)):
        assert df.bad_row_count == 1
        assert df.bad_rows == [(3, 1)]
    assert skipped.batch(2).bad_rows is None  # ask the dataframe it batches
    good = rill.from_csv_buffer(b"a,b\n1,2\n", on_bad_row="skip")
    assert (good.bad_row_count, good.bad_rows) == (0, [])
    arrays = rill.from_numpy({"a": np.arange(3)})
    assert (arrays.bad_row_count, arrays.bad_rows) == (None, None)
    many = tmp_path / "many.csv"
    many.write_text("a,b\n" + "".join("%d\n%d,%d\n" % (i, i, i) for i in range(1500)))
    df = rill.from_csv(many, on_bad_row="skip")
    assert df.num_rows == 1500 and df.bad_row_count == 1500
    assert df.bad_rows == [(2 + 2 * i, 1) for i in range(1024)]  # the first 1024 are kept
    typed = tmp_path / "typed.csv"
    typed.write_text("a\n1\nx\n3\n")
    df = rill.from_csv(typed, dtypes={"a": "int64"})
    with pytest.raises(rill.RillError, match=r"typed\.csv:3"):
        list(df)
    df = rill.from_csv(typed, dtypes={"a": "int64"}, on_error="null")
    assert pa.table(df).column("a").to_pylist() == [1, None, 3]


def test_from_csv_text_must_be_utf8(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes(b"name,n\ncaf\xc3\xa9,1\ncaf\xe9,2\nok,3\n")
    with pytest.raises(rill.FormatError, match=r"latin1\.csv:3: column 'name': not UTF-8 text \(byte 0xE9 at byte 3"):
        list(rill.from_csv(path))
    with pytest.raises(OSError, match=r"latin1\.csv:3: column 'name': not UTF-8 text"):  # pyarrow's error
        pa.table(rill.from_csv(path))
    nulled = pa.table(rill.from_csv(path, on_error="null"))
    nulled.validate(full=True)
    assert nulled.column("name").to_pylist() == ["caf\u00e9", None, "ok"]
    skipped = pa.table(rill.from_csv(path, on_error="skip"))
    assert skipped.column("n").to_pylist() == [1, 3]
    raw = pa.table(rill.from_csv(path, dtypes={"name": "binary"}))
    assert raw.column("name").to_pylist() == [b"caf\xc3\xa9", b"caf\xe9", b"ok"]
    assert [b.decode("latin-1") for b in raw.column("name").to_pylist()][1] == "caf\u00e9"


def test_from_csv_encodings_match_python(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes("gr\u00f6\u00dfe,n\ncaf\u00e9,1\n".encode("latin-1"))
    t = pa.table(rill.from_csv(path, encoding="latin-1"))
    assert t.column_names == ["gr\u00f6\u00dfe", "n"]
    assert t.column(0).to_pylist() == ["caf\u00e9"]
    # random fields of characters and ill-formed pieces, quoted, across parallel chunks
    rng = np.random.default_rng(3)
    pieces = [b"a", b"plain ", "\u00e9".encode(), "\u20ac".encode(), "\U0001F600".encode(), b"\x80", b"\xc3",
              b"\xed\xa0\x80", b"\xff", b"\xe2\x82", b"\xf0\x9f\x98", b"\xc0\xaf", b"\xf4\x90\x80\x80"]
    rows = [b"".join(pieces[k] for k in rng.integers(0, len(pieces), rng.integers(0, 12))) for _ in range(3000)]
    data = b"text\n" + b"".join(b'"' + r + b'"\n' for r in rows)
    for encoding, errors in (("utf-8-lossy", "replace"), ("latin-1", "strict")):
        py = "latin-1" if encoding == "latin-1" else "utf-8"
        df = rill.from_csv_buffer(data, encoding=encoding, infer=False, chunk_bytes=4096, threads=2)
        table = pa.table(df)
        table.validate(full=True)
        assert table.column("text").to_pylist() == [r.decode(py, errors) for r in rows], encoding
    with pytest.raises(ValueError, match="encoding must be 'utf-8', 'utf-8-lossy' or 'latin-1', got 'cp1252'"):
        rill.from_csv(path, encoding="cp1252")


def test_from_csv_buffer():
    data = b"x,y\n1,hello\n2,\n"
    df = rill.from_csv_buffer(data)
    t = pa.table(df)
    assert t.column("x").to_pylist() == [1, 2]
    assert t.column("y").to_pylist() == ["hello", ""]
    with pytest.raises(rill.FormatError, match=r"mine:3"):
        rill.from_csv_buffer(bytearray(b"x,y\n1,2\n3\n"), name="mine")
    with pytest.raises(TypeError, match="bytes-like"):
        rill.from_csv_buffer("x,y\n")


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "t.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE t (id INTEGER, name TEXT, score REAL, blob BLOB)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)",
                    [(i, None if i % 3 == 0 else f"n{i}", i / 4 if i % 2 else None, bytes([i]) * (i % 3))
                     for i in range(20)])
    con.commit()
    con.close()
    return path


def test_from_sqlite_matches_sqlite3(db):
    sql = "SELECT id, name, score, blob FROM t WHERE id >= ?1 AND name IS NOT ?2 AND score < ?3 OR blob = ?4"
    params = (3, "n5", 4.0, b"\x07")
    df = rill.from_sqlite(db, sql, params)
    assert [f.dtype for f in df.schema] == ["int64", "string", "float64", "binary"]
    con = sqlite3.connect(db)
    # sqlite3 binds numbered parameters (?1) by name ("1"): a sequence for them is deprecated
    ref = con.execute(sql, {str(i + 1): p for i, p in enumerate(params)}).fetchall()
    t = pa.table(df)
    assert list(zip(*[t.column(c).to_pylist() for c in t.column_names])) == ref
    # a bare table name, NULL parameters
    whole = pa.table(rill.from_sqlite(str(db), "t"))
    assert whole.column("name").to_pylist() == [r[0] for r in con.execute("SELECT name FROM t")]
    got = pa.table(rill.from_sqlite(db, "SELECT ?1 IS NULL AS n, ?2 AS s", [None, "txt"]))
    assert got.column("s").to_pylist() == ["txt"]


def test_from_sqlite_shuffled_table_held_or_looked_up(db):
    # A shuffled table is held in memory by default, looked up row by row with a negative
    # limit or when it does not fit: the same rows in the same order either way.
    con = sqlite3.connect(db)
    ref = sorted(con.execute("SELECT id, name, score, blob FROM t").fetchall())
    got = {}
    for hold in (0, -1, 1, 1 << 20):
        t = pa.table(rill.from_sqlite(db, "t", table_hold_bytes=hold).shuffle(seed=7))
        got[hold] = list(zip(*[t.column(c).to_pylist() for c in t.column_names]))
        assert sorted(got[hold]) == ref
    assert got[0] == got[-1] == got[1] == got[1 << 20]
    assert got[0] != ref
    with pytest.raises(OverflowError):
        rill.from_sqlite(db, "t", table_hold_bytes=1 << 70)


def test_from_sqlite_errors(db, tmp_path):
    with pytest.raises(rill.SQLError, match="no such table: nope"):
        rill.from_sqlite(db, "SELECT * FROM nope")
    with pytest.raises(rill.SQLError, match="syntax error"):
        rill.from_sqlite(db, "SELEC 1")
    with pytest.raises(rill.RillError) as info:
        rill.from_sqlite(tmp_path / "absent.db", "SELECT 1")
    assert isinstance(info.value, (rill.RillIOError, rill.SQLError))
    with pytest.raises(TypeError, match="parameter 1 is list"):
        rill.from_sqlite(db, "SELECT ?1", [[1]])


def test_from_sqlite_encodings_match_python(tmp_path):
    # TEXT values of other bytes than UTF-8 (SQLite stores what it is given): Latin-1 or lossy
    # UTF-8 as Python decodes them, read by rowid, held (shuffled) or through a query; the
    # default fails the row naming it; the column name (UTF-8 here) is decoded the same way
    path = tmp_path / "enc.db"
    raw = [b"plain", "caf\u00e9".encode("latin-1"), "\u00e9\u20ac".encode(), b"\xff\xfe", b"a\xc3", b""]
    con = sqlite3.connect(path)
    con.execute('CREATE TABLE t (id INTEGER, "caf\u00e9" TEXT)')
    con.executemany("INSERT INTO t VALUES (?, CAST(? AS TEXT))", list(enumerate(raw * 50)))
    con.commit()
    con.close()
    for encoding, py, errors in (("latin-1", "latin-1", "strict"), ("utf-8-lossy", "utf-8", "replace")):
        want = [r.decode(py, errors) for r in raw * 50]
        for sql, hold in (("t", -1), ("t", 0), ("SELECT id, \"caf\u00e9\" FROM t", 0)):
            df = rill.from_sqlite(path, sql, encoding=encoding, table_hold_bytes=hold)
            name = df.schema[1].name
            assert name == "caf\u00e9".encode().decode(py, errors), (encoding, name)
            t = pa.table(df.shuffle(seed=3))
            got = dict(zip(t.column("id").to_pylist(), t.column(name).to_pylist()))
            assert [got[i] for i in range(len(want))] == want, (encoding, sql, hold)
    with pytest.raises(rill.FormatError, match=r"row 1, column 'caf\u00e9': TEXT that is not UTF-8 text "
                                               r"\(byte 0xE9 at byte 3; for another encoding see the encoding option"):
        list(rill.from_sqlite(path, "t"))
    nulled = pa.table(rill.from_sqlite(path, "t", on_error="null")).column("caf\u00e9").to_pylist()
    assert nulled[:6] == ["plain", None, "\u00e9\u20ac", None, None, ""]
    with pytest.raises(ValueError, match="encoding must be 'utf-8', 'utf-8-lossy' or 'latin-1', got 'cp1252'"):
        rill.from_sqlite(path, "t", encoding="cp1252")


def test_from_files_and_file_list(tmp_path):
    paths = []
    for i in range(4):
        p = tmp_path / f"f{i}.bin"
        p.write_bytes(bytes(range(i * 10)))
        paths.append(p)
    df = rill.from_files(paths)
    t = pa.table(df)
    assert t.column("path").to_pylist() == [str(p) for p in paths]
    assert t.column("bytes").to_pylist() == [p.read_bytes() for p in paths]
    lst = tmp_path / "list.txt"
    lst.write_text("\n".join(p.name for p in paths) + "\n\n")
    t2 = pa.table(rill.from_file_list(lst))
    assert t2.column("bytes").to_pylist() == [p.read_bytes() for p in paths]
    with pytest.raises(rill.RillIOError):
        rill.from_file_list(tmp_path / "nolist.txt")
    gone = rill.from_files([paths[0], tmp_path / "gone.bin"])
    with pytest.raises(rill.RillIOError, match=r"row 1, column 'bytes'.*gone\.bin: cannot open") as info:
        list(gone)
    assert info.value.row == 1 and info.value.column_name == "bytes"
    with pytest.raises(OSError, match="gone.bin"):  # through the Arrow stream
        pa.table(gone)
    skip = rill.from_files([paths[0], tmp_path / "gone.bin", paths[1]], on_error="skip")
    it = skip.iter()
    assert [r.index for r in it] == [0, 2]
    assert it.stats()["skipped"] == 1
    with pytest.raises(TypeError, match="sequence of paths"):
        rill.from_files("abc")


def test_a_path_holding_a_nul_character_is_refused(tmp_path):
    # cut at the NUL, each path would name a file or folder that opens: the read must not go there
    from PIL import Image
    (tmp_path / "c").mkdir()
    Image.new("RGB", (2, 2)).save(tmp_path / "c" / "0.png")
    write_csv(tmp_path / "a.csv", [["x"], ["1"]])
    (tmp_path / "list.txt").write_text("a.csv\n")
    con = sqlite3.connect(tmp_path / "a.db")
    con.execute("CREATE TABLE t (x INTEGER)")
    con.commit()
    con.close()
    cut = str(tmp_path / "a.csv") + "\0.gz"
    calls = [
        (lambda: rill.from_csv(cut), cut),
        (lambda: rill.from_csv(cut.encode()), cut.encode()),
        (lambda: rill.from_csv([tmp_path / "a.csv", cut]), cut),
        (lambda: rill.from_csv(str(tmp_path / "a.csv\0{1,2}")), str(tmp_path / "a.csv\0{1,2}")),
        (lambda: rill.from_files([tmp_path / "a.csv", cut]), cut),
        (lambda: rill.from_file_list(str(tmp_path / "list.txt") + "\0x"), str(tmp_path / "list.txt") + "\0x"),
        (lambda: rill.from_image_folder(str(tmp_path) + "\0/c"), str(tmp_path) + "\0/c"),
        (lambda: rill.from_sqlite(str(tmp_path / "a.db") + "\0x", "t"), str(tmp_path / "a.db") + "\0x"),
    ]
    for call, path in calls:
        with pytest.raises(rill.InvalidArgumentError) as e:
            call()
        assert str(e.value) == f"the path {path!r} holds a NUL character"
        assert e.value.code == rill.EINVAL
    # the same paths without the NUL's tail open
    assert len(rill.from_csv(tmp_path / "a.csv")) == 1
    assert len(rill.from_image_folder(tmp_path)) == 1
    assert len(rill.from_sqlite(tmp_path / "a.db", "t")) == 0


def test_from_image_folder(tmp_path):
    from PIL import Image
    for cls, color in (("cat", (255, 0, 0)), ("dog", (0, 255, 0))):
        (tmp_path / cls).mkdir()
        for i in range(2):
            Image.new("RGB", (6, 4), color).save(tmp_path / cls / f"{i}.png")
    (tmp_path / "dog" / "notes.txt").write_text("ignored")
    df = rill.from_image_folder(tmp_path)
    assert df.classes == ["cat", "dog"]
    assert df.columns == ["path", "bytes", "label"]
    t = pa.table(df)
    assert t.column("label").to_pylist() == [0, 0, 1, 1]
    assert df.shuffle(1).classes == ["cat", "dog"]
    assert rill.from_numpy({"a": np.arange(2)}).classes is None
    # two folders of the same classes read as one; other classes are refused (labels would lie)
    both = rill.concat([df, rill.from_image_folder(tmp_path)])
    assert both.classes == ["cat", "dog"] and len(both) == 8
    assert pa.table(both).column("label").to_pylist() == [0, 0, 1, 1] * 2
    other = tmp_path / "other"
    (other / "bird").mkdir(parents=True)
    Image.new("RGB", (6, 4)).save(other / "bird" / "0.png")
    with pytest.raises(ValueError, match=r"concat: frames\[1\] has other class names than frames\[0\]"):
        rill.concat([df, rill.from_image_folder(other)])
    with pytest.raises(rill.RillIOError):
        rill.from_image_folder(tmp_path / "missing")
    empty = tmp_path / "empty" / "c"
    empty.mkdir(parents=True)
    with pytest.raises(rill.FormatError):
        rill.from_image_folder(tmp_path / "empty")
