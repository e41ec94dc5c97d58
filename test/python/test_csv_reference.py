"""rill's CSV parse compared with Python's csv module and pyarrow.csv as the reference.

rill is run through its CLI (`rill head --all --format=json`): the first output line holds the
column names, each further line one row as a JSON array.
"""
import csv
import datetime
import json
import math
import os
import pathlib
import subprocess

import pytest

pa = pytest.importorskip("pyarrow")
pacsv = pytest.importorskip("pyarrow.csv")

csv.field_size_limit(1 << 30)
ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "test" / "data" / "csv"
RILL_BIN = os.environ.get("RILL_BIN", str(ROOT / "bin" / "rill"))


def rill_rows(path, *args, check=True):
    proc = subprocess.run([RILL_BIN, "head", str(path), "--all", "--format=json", *args],
                          capture_output=True, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr.decode()
    if proc.returncode != 0:
        return None, None, proc
    lines = proc.stdout.decode("utf-8").splitlines()
    return json.loads(lines[0]), [json.loads(line) for line in lines[1:]], proc


def python_rows(path, delimiter=","):
    with open(path, newline="", encoding="utf-8-sig") as f:
        rows = [r for r in csv.reader(f, delimiter=delimiter) if r]  # rill skips blank lines
    return rows[0], rows[1:]


def arrow_rows(path, names, delimiter=",", skip_bad=False):
    opts = pacsv.ParseOptions(delimiter=delimiter, newlines_in_values=True)
    if skip_bad:
        opts.invalid_row_handler = lambda row: "skip"
    table = pacsv.read_csv(
        path,
        parse_options=opts,
        convert_options=pacsv.ConvertOptions(column_types={n: pa.string() for n in names},
                                             strings_can_be_null=False),
    )
    cols = [table.column(i).to_pylist() for i in range(table.num_columns)]
    return table.column_names, [list(r) for r in zip(*cols)]


def compare_strings(path, delimiter=","):
    args = ["--no-infer"] + ([f"--delimiter={delimiter}"] if delimiter != "," else [])
    names, rows, _ = rill_rows(path, *args)
    py_names, py_rows = python_rows(path, delimiter)
    assert names == py_names
    assert rows == py_rows
    pa_names, pa_rows = arrow_rows(path, py_names, delimiter)
    assert names == pa_names
    assert rows == pa_rows
    return rows


@pytest.mark.parametrize("name", ["quotes.csv", "crlf.csv", "utf8_bom.csv"])
def test_corpus_matches_references(name):
    rows = compare_strings(CORPUS / name)
    assert rows, "the corpus file has rows"


def test_semicolon_delimiter():
    compare_strings(CORPUS / "semicolon.csv", delimiter=";")


def test_short_rows_error_and_skip():
    path = CORPUS / "short_rows.csv"
    _, _, proc = rill_rows(path, check=False)
    assert proc.returncode == 1
    assert b"short_rows.csv:3: expected 3 fields, found 2" in proc.stderr
    names, rows, proc = rill_rows(path, "--no-infer", "--skip-bad-rows")
    # the rows left out are named on stderr, with their lines
    assert proc.stderr.decode() == ("rill head: %s: left out 2 rows with a wrong number of fields "
                                    "(3 expected): line 3 (2 fields), line 5 (1 field)\n" % path)
    py_names, py_rows = python_rows(path)
    assert rows == [r for r in py_rows if len(r) == len(py_names)]
    _, pa_rows = arrow_rows(path, py_names, skip_bad=True)
    assert rows == pa_rows


def test_encodings(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes("name,n\ncaf\u00e9,1\n".encode("latin-1"))
    _, _, proc = rill_rows(path, check=False)
    assert proc.returncode == 1
    assert b"latin1.csv:2: column 'name': not UTF-8 text (byte 0xE9 at byte 3" in proc.stderr
    names, rows, _ = rill_rows(path, "--encoding", "latin-1")
    assert names == ["name", "n"] and rows == [["caf\u00e9", 1]]
    _, rows, _ = rill_rows(path, "--encoding", "utf-8-lossy")
    assert rows == [["caf\ufffd", 1]]
    _, _, proc = rill_rows(path, "--encoding", "cp1252", check=False)
    assert proc.returncode == 2 and b"--encoding needs utf-8, utf-8-lossy or latin-1" in proc.stderr


def test_trim_and_comment(tmp_path):
    path = tmp_path / "padded.csv"
    path.write_text('# from a tool, "quoted\nage, name , score\n 39, "Ann, B" , 1.5 \n  \n#  x\n40,\tBo\t,\n')
    names, rows, _ = rill_rows(path, "--trim", "--comment", "#")
    assert names == ["age", "name", "score"]
    assert rows == [[39, "Ann, B", 1.5], [40, "Bo", None]]
    _, _, proc = rill_rows(path, check=False)
    assert proc.returncode == 1 and b"padded.csv:2: expected 2 fields, found 3" in proc.stderr


def test_escape(tmp_path):
    path = tmp_path / "escaped.csv"
    path.write_bytes(b'id,text\n1,"say \\"hi\\""\n2,a\\,b\\\\\n')
    names, rows, _ = rill_rows(path, "--escape", "\\")
    assert names == ["id", "text"] and rows == [[1, 'say "hi"'], [2, "a,b\\"]]
    with open(path, newline="") as f:
        assert [[int(r[0]), r[1]] for r in list(csv.reader(f, escapechar="\\"))[1:]] == rows


def test_null_values(tmp_path):
    path = tmp_path / "nulls.csv"
    path.write_text("n,s\n1,NA\n?,x\n3,?\n")
    names, rows, _ = rill_rows(path, "--null", "NA", "--null", "?")
    assert rows == [[1, None], [None, "x"], [3, None]]
    _, rows, _ = rill_rows(path)
    assert rows == [["1", "NA"], ["?", "x"], ["3", "?"]]
    # a Latin-1 file: a UTF-8 argument is matched as Latin-1, one that is not UTF-8 as it is
    latin = tmp_path / "latin1_nulls.csv"
    latin.write_bytes("n,s\n1,n\u00e9ant\nn\u00e9ant,x\n".encode("latin-1"))
    for arg in ("n\u00e9ant".encode("utf-8"), b"n\xe9ant"):
        _, rows, _ = rill_rows(latin, "--encoding", "latin-1", "--null", arg)
        assert rows == [[1, None], [None, "x"]]
    _, rows, _ = rill_rows(latin, "--encoding", "latin-1", "--null", "na")
    assert rows == [["1", "n\u00e9ant"], ["n\u00e9ant", "x"]]
    _, _, proc = rill_rows(latin, "--encoding", "latin-1", "--null", "\u20ac", check=False)
    assert proc.returncode == 2
    assert "--null '\u20ac' has a character Latin-1 cannot write".encode() in proc.stderr


def test_decimal(tmp_path):
    path = tmp_path / "eu.csv"
    path.write_text("n;x\n1;3,25\n2;-0,5\n")
    names, rows, _ = rill_rows(path, "--delimiter", ";", "--decimal", ",")
    assert rows == [[1, 3.25], [2, -0.5]]
    _, _, proc = rill_rows(path, "--decimal", ",", check=False)
    assert proc.returncode == 1 and b"the decimal separator ',' is the delimiter" in proc.stderr


def test_skip_lines(tmp_path):
    # a preamble of physical lines, whatever they hold: an open quote, other fields, CRLF, a lone CR
    preamble = 'Station 7 export "v2\nunits: mm, C, %\r\n\r'
    body = 'day,rain,note\n1,0.5,"dry, windy"\n2,12.25,"wet\nthen dry"\n3,,\n'
    path = tmp_path / "report.csv"
    path.write_bytes((preamble + body).encode())
    names, rows, _ = rill_rows(path, "--skip-lines", "3")
    ref = list(csv.reader(body.splitlines(keepends=True)))
    assert names == ref[0]
    assert rows == [[1, 0.5, "dry, windy"], [2, 12.25, "wet\nthen dry"], [3, None, ""]]
    assert [[str(v) if v is not None else "" for v in r] for r in rows] == ref[1:]
    # line numbers count the skipped lines: the bad row is on line 9 of the file
    (tmp_path / "bad.csv").write_bytes((preamble + body + "4,1\n").encode())
    _, _, proc = rill_rows(tmp_path / "bad.csv", "--skip-lines=3", check=False)
    assert proc.returncode == 1 and b"bad.csv:9: expected 3 fields, found 2" in proc.stderr
    _, _, proc = rill_rows(path, "--skip-lines", "99", check=False)
    assert proc.returncode == 1
    assert b"nothing after the 99 lines skip_lines leaves out (the input has 8)" in proc.stderr


def test_gzip_file(tmp_path):
    import gzip
    path = tmp_path / "rain.csv.gz"
    path.write_bytes(gzip.compress(b"day,rain\n1,0.5\n2,\n"))
    names, rows, _ = rill_rows(path)
    assert names == ["day", "rain"] and rows == [[1, 0.5], [2, None]]
    path.write_bytes(gzip.compress(b"day,rain\n1,0.5\n2\n"))
    _, _, proc = rill_rows(path, check=False)
    assert proc.returncode == 1 and b"rain.csv.gz:3: expected 2 fields, found 1" in proc.stderr


@pytest.mark.parametrize("args, message", [
    (["--skip-lines", "-1"], b"--skip-lines needs a number of lines"),
    (["--skip-lines", "two"], b"--skip-lines needs a number of lines"),
    (["--skip-lines="], b"--skip-lines needs a number of lines"),
    (["--skip-lines"], b"--skip-lines needs a number of lines"),
    (["--comment", "##"], b"--comment needs one character"),
    (["--escape"], b"--escape needs one character"),
    (["--null"], b"--null needs a text"),
    (["--decimal", ",,"], b"--decimal needs one character"),
])
def test_dialect_option_usage(tmp_path, args, message):
    path = tmp_path / "a.csv"
    path.write_text("a\n1\n")
    _, _, proc = rill_rows(path, *args, check=False)
    assert proc.returncode == 2 and message in proc.stderr


def test_encodings_sqlite(tmp_path):
    import sqlite3

    db = tmp_path / "legacy.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE p(id INTEGER, name TEXT)")
    con.execute("INSERT INTO p VALUES (1, CAST(? AS TEXT))", ["caf\u00e9".encode("latin-1")])
    con.commit()
    con.close()
    _, _, proc = rill_rows(db, "p", check=False)
    assert proc.returncode == 1
    assert b"row 0, column 'name': TEXT that is not UTF-8 text (byte 0xE9 at byte 3" in proc.stderr
    names, rows, _ = rill_rows(db, "p", "--encoding", "latin-1")
    assert names == ["id", "name"] and rows == [[1, "caf\u00e9"]]
    _, rows, _ = rill_rows(db, "SELECT name FROM p", "--encoding", "utf-8-lossy")
    assert rows == [["caf\ufffd"]]


def test_typed_values_match_pyarrow():
    path = CORPUS / "typed.csv"
    names, rows, _ = rill_rows(path)
    table = pacsv.read_csv(path)
    assert names == table.column_names
    ref = table.to_pylist()
    assert len(rows) == len(ref)
    for got, want in zip(rows, ref):
        for name, value in zip(names, got):
            expect = want[name]
            if name == "s" and expect is None:
                expect = ""  # pyarrow reads an empty string as null; rill keeps ""
            if isinstance(expect, datetime.datetime):
                value = datetime.datetime.fromisoformat(value)
            if isinstance(expect, float) and isinstance(value, float) and math.isnan(expect):
                assert math.isnan(value)
                continue
            assert value == expect, (name, value, expect)


def test_wide_rows(tmp_path):
    path = tmp_path / "wide.csv"
    ncols = 2000
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow([f"c{i}" for i in range(ncols)])
        for r in range(20):
            w.writerow([f"v{r}_{i}" if i % 5 else f"q,\"{r}\"\n{i}" for i in range(ncols)])
    compare_strings(path)


def test_one_megabyte_cell(tmp_path):
    path = tmp_path / "bigcell.csv"
    big = ("abc,\"def\"\n" * 110000)[: 1 << 20]
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([["id", "big"], ["1", big], ["2", "small"]])
    rows = compare_strings(path)
    assert len(rows[0][1]) == 1 << 20


def test_quoted_field_across_parallel_chunk_boundary(tmp_path):
    # rill's index pass cuts files into 8 MiB chunks: put a quoted field with line breaks and
    # text that looks like rows across the 8 MiB and 16 MiB marks.
    path = tmp_path / "boundary.csv"
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["id", "text", "n"])
        size, r = 0, 0
        for mark in (8 << 20, 16 << 20):
            while size < mark - 3000:
                row = [str(r), f"row {r}", str(r * 2)]
                size += len(",".join(row)) + 1
                w.writerow(row)
                r += 1
            tricky = "".join(f"{r}{k},\"fake\"\n" for k in range(400))
            w.writerow([str(r), tricky, "0"])
            size += len(tricky) + 800 + 10
            r += 1
        for _ in range(1000):
            w.writerow([str(r), "tail", "1"])
            r += 1
    assert path.stat().st_size > (16 << 20)
    rows = compare_strings(path)
    assert len(rows) == r


def run_head(*args):
    return subprocess.run([RILL_BIN, "head", *map(str, args)], capture_output=True, timeout=60)



def test_head_cli_reads_several_files_as_one(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    a.write_text("id,name\n1,ann\n2,bob\n")
    b.write_text("name,id\ncy,3\ndee\ned,5\n")
    names, rows, proc = rill_rows(a, b, "--skip-bad-rows")
    assert names == ["id", "name"]
    assert rows == [[1, "ann"], [2, "bob"], [3, "cy"], [5, "ed"]]
    err = proc.stderr.decode()
    assert "b.csv: left out 1 row with a wrong number of fields (2 expected): line 3 (1 field)" in err
    assert "a.csv" not in err
    proc = run_head(a, tmp_path / "missing.csv")
    assert proc.returncode == 1 and b"missing.csv: cannot open" in proc.stderr
    b.write_text("id,label\n3,x\n")
    proc = run_head(a, b)
    assert proc.returncode == 1 and b"b.csv has no column 'name'" in proc.stderr
    db = tmp_path / "t.sqlite"
    import sqlite3
    with sqlite3.connect(db) as con:
        con.execute("CREATE TABLE t(x)")
    proc = run_head(db, "t", "t")
    assert proc.returncode == 2 and b"is a SQLite database: give one query or table name" in proc.stderr


def test_head_cli_table_sqlite_and_errors(tmp_path):
    import sqlite3

    db = tmp_path / "people.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE p(id INTEGER PRIMARY KEY, name TEXT, score REAL)")
    con.executemany("INSERT INTO p VALUES (?, ?, ?)", [(1, "ann", 1.5), (2, None, 2.0), (3, "cy", None)])
    con.commit()
    con.close()
    proc = run_head(db, "SELECT * FROM p ORDER BY id", "-n", "2")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.decode().splitlines()
    assert lines[0].split("|")[0].strip() == "id"
    assert [c.strip() for c in lines[1].split("|")] == ["int64", "string", "float64"]
    assert [c.strip() for c in lines[3].split("|")] == ["1", "ann", "1.5"]
    assert [c.strip() for c in lines[4].split("|")] == ["2", "NULL", "2"]
    assert "(2 of 3 rows)" in lines[-1]
    # a table name reads the table by rowid
    names, rows, _ = rill_rows(db, "p")
    with sqlite3.connect(db) as con:
        assert rows == [list(r) for r in con.execute("SELECT * FROM p ORDER BY rowid")]
    assert names == ["id", "name", "score"]

    proc = run_head(db, "SELECT * FROM nope")
    assert proc.returncode == 1
    assert b"no such table: nope" in proc.stderr and b"people.sqlite" in proc.stderr
    proc = run_head(tmp_path / "missing.csv")
    assert proc.returncode == 1 and b"missing.csv: cannot open" in proc.stderr
    assert run_head().returncode == 2
    assert run_head(CORPUS / "quotes.csv", "-n", "x").returncode == 2
    for bad in ["", "-1", "+2", " 2", "2 ", "99999999999999999999"]:  # one number parser for -n and --skip-lines
        for opt in ["-n", "--skip-lines"]:
            proc = run_head(CORPUS / "quotes.csv", opt, bad)
            assert proc.returncode == 2 and b"needs a number of" in proc.stderr, (opt, bad)
    assert run_head(CORPUS / "quotes.csv", "--bogus").returncode == 2
    proc = run_head("--help")
    assert proc.returncode == 0 and b"usage: rill head" in proc.stdout
    proc = run_head(CORPUS / "quotes.csv", "-n", "3")
    out = proc.stdout.decode().splitlines()
    assert proc.returncode == 0 and len(out) == 3 + 3 + 1
    assert "multi" not in proc.stdout.decode()
