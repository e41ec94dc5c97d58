"""rill.from_tar: WebDataset-style tar shards (ustar, GNU and pax headers), typed member
columns, errors at open and when rows are pulled, image decoding and shuffled shards.
Oracles: Python's tarfile module (which writes the archives and reads them back), PIL."""
import bz2
import datetime
import gzip
import io
import lzma
import os
import random
import re
import tarfile

import numpy as np
import pyarrow as pa
import pytest
from PIL import Image

import rill

FORMATS = {"ustar": tarfile.USTAR_FORMAT, "gnu": tarfile.GNU_FORMAT, "pax": tarfile.PAX_FORMAT}
KINDS = {"fifo": tarfile.FIFOTYPE, "chr": tarfile.CHRTYPE, "blk": tarfile.BLKTYPE, "sym": tarfile.SYMTYPE,
         "link": tarfile.LNKTYPE}


def write_tar(path, members, fmt=tarfile.PAX_FORMAT, encoding="utf-8", **kw):
    """Writes the archive `path` from (name, spec): bytes (a file), "dir" (a directory), "fifo",
    "chr", "blk" (devices) or ("sym" or "link", target) (a symbolic or hard link). Returns the
    TarInfo of every member as tarfile reads them back (offset: the first header of the
    member, offset_data: its data)."""
    with tarfile.open(path, "w", format=fmt, encoding=encoding, **kw) as tf:
        for name, spec in members:
            info = tarfile.TarInfo(name)
            info.mtime = 1_700_000_000
            if spec == "dir":
                info.type = tarfile.DIRTYPE
                info.mode = 0o755
                tf.addfile(info)
            elif spec in KINDS:
                info.type = KINDS[spec]
                tf.addfile(info)
            elif isinstance(spec, tuple):
                info.type = KINDS[spec[0]]
                info.linkname = spec[1]
                tf.addfile(info)
            else:
                info.size = len(spec)
                tf.addfile(info, io.BytesIO(spec))
    with tarfile.open(path, "r", encoding=encoding) as tf:
        return tf.getmembers()


def table(df):
    t = pa.table(df)
    return {name: t.column(name).to_pylist() for name in t.column_names}


def patch_header(buf, header, field, length, value):
    """Writes `value` (padded with NULs) into a field of the 512-byte header at `header` and
    recomputes the header's checksum, as tar does."""
    buf[header + field:header + field + length] = value.ljust(length, b"\0")
    buf[header + 148:header + 156] = b" " * 8
    buf[header + 148:header + 155] = b"%06o\0" % sum(buf[header:header + 512])


# ---------------------------------------------------------------- layout of samples and columns

LONG_DIR = "d" * 120                     # ustar: prefix field; GNU: ././@LongLink; pax: path record
LONG_KEY = "k" * 110                     # a last part over 100 bytes: no ustar split helps


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_samples_keys_paths_and_bytes_in_every_format(tmp_path, fmt):
    shard = tmp_path / f"shard-{fmt}.tar"
    members = [
        ("top", "dir"),
        ("top/s0.jpg", b"\xff\xd8jpeg-0"),
        ("top/s0.cls", b"3\n"),
        ("top/s0.txt", b"hello"),
        ("top/s1.jpg", b"\xff\xd8jpeg-1"),       # no .cls, no .txt: null cells
        ("top/s1.TXT", b"upper"),                # extensions are lower-cased
        ("README", b"no extension: skipped"),
        ("top/.hidden.txt", b"starts with a dot: skipped"),
        ("top/link.jpg", ("sym", "s0.jpg")),      # links, devices, FIFOs: skipped
        ("top/hard.jpg", ("link", "top/s0.jpg")),
        ("top/dev.jpg", "chr"),
        ("top/blk.jpg", "blk"),
        ("top/pipe.jpg", "fifo"),
        (f"{LONG_DIR}/s2.cls", b" 7 "),
        (f"{LONG_DIR}/s2.seg.png", b"\x89PNG-2"),  # everything after the first dot
        ("v1.0/s3.txt", b""),                    # a dot in a folder name is no extension; empty member
    ]
    if fmt != "ustar":
        members += [(f"{LONG_DIR}/link.txt", ("sym", "t" * 150)),  # GNU: a long link name record
                    (f"{LONG_DIR}/{LONG_KEY}.txt", b"long name")]
    infos = write_tar(shard, members, FORMATS[fmt])
    assert [i.name for i in infos] == [m[0] for m in members]  # tarfile reads back what it wrote
    df = rill.from_tar(shard)
    assert df.columns == ["key", "path", "cls", "jpg", "seg.png", "txt"]
    assert [df.field(c).dtype for c in df.columns] == ["string"] * 2 + ["binary"] * 4
    assert [df.field(c).nullable for c in df.columns] == [False, False, True, True, True, True]
    keys = ["top/s0", "top/s1", f"{LONG_DIR}/s2", "v1.0/s3"]
    want = {"key": keys,
            "path": [f"{shard}:{k}" for k in keys],
            "cls": [b"3\n", None, b" 7 ", None],
            "jpg": [b"\xff\xd8jpeg-0", b"\xff\xd8jpeg-1", None, None],
            "seg.png": [None, None, b"\x89PNG-2", None],
            "txt": [b"hello", b"upper", None, b""]}
    if fmt != "ustar":
        k = f"{LONG_DIR}/{LONG_KEY}"
        want["key"].append(k)
        want["path"].append(f"{shard}:{k}")
        want["txt"].append(b"long name")
        for c in ("cls", "jpg", "seg.png"):
            want[c].append(None)
    assert len(df) == len(want["key"])
    assert table(df) == want
    # row by row, with one row per task of the member columns, the same cells
    rows = list(rill.from_tar([shard], grain=1).iter(threads=2))
    assert [r.index for r in rows] == list(range(len(want["key"])))
    assert [r["txt"].to_pylist()[0] for r in rows] == want["txt"]
    assert [r["key"].to_pylist()[0] for r in rows] == want["key"]


def test_skipped_members_do_not_split_a_sample(tmp_path):
    # as WebDataset groups the files it keeps: a link, a file without extension, a folder or a
    # hidden file between two members of a sample leaves them one sample
    shard = tmp_path / "mid.tar"
    write_tar(shard, [("a.jpg", b"J"), ("a.lnk", ("sym", "x")), ("README", b"r"), ("d", "dir"), (".h.txt", b"h"),
                      ("a.cls", b"1"), ("b.cls", b"2")], tarfile.GNU_FORMAT)
    assert table(rill.from_tar(shard)) == {"key": ["a", "b"], "path": [f"{shard}:{k}" for k in "ab"],
                                           "cls": [b"1", b"2"], "jpg": [b"J", None]}


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_members_of_a_sample_apart_are_a_format_error(tmp_path, fmt):
    # an archive written unsorted (tar -cf x.tar *.jpg *.cls) would give every sample twice
    shard = tmp_path / "apart.tar"
    infos = write_tar(shard, [("x/a.jpg", b"1"), ("x/b.jpg", b"2"), ("x/a.cls", b"3"), ("x/b.cls", b"4")],
                      FORMATS[fmt])
    with pytest.raises(rill.FormatError,
                       match=f"^{re.escape(str(shard))}: byte {infos[2].offset}: member \"x/a.cls\": sample \"x/a\" "
                             r"has members earlier in the archive, not next to this one \(a sample's members must be "
                             r"consecutive: write the archive sorted by name, e\.g\. tar --sort=name\)$"):
        rill.from_tar(shard)
    # the same key in two archives is two samples
    other = tmp_path / "other.tar"
    write_tar(other, [("x/a.jpg", b"5"), ("x/a.cls", b"6")], FORMATS[fmt])
    assert table(rill.from_tar([other, other])) == {"key": ["x/a", "x/a"], "path": [f"{other}:x/a"] * 2,
                                                    "cls": [b"6", b"6"], "jpg": [b"5", b"5"]}


def test_pax_non_ascii_names_and_global_header(tmp_path):
    shard = tmp_path / "unicode.tar"
    name = "caf\u00e9/\u65e5\u672c-\u00fc"
    infos = write_tar(shard, [(f"{name}.txt", b"utf-8"), (f"{name}.json", b"{}"), ("plain/a.txt", b"a")],
                      tarfile.PAX_FORMAT, pax_headers={"comment": "a global pax header"})
    assert infos[0].name == f"{name}.txt"
    with open(shard, "rb") as f:
        head = f.read(512)
    assert head[156:157] == b"g"  # tarfile wrote a global header first
    got = table(rill.from_tar(str(shard)))
    assert got == {"key": [name, "plain/a"], "path": [f"{shard}:{name}", f"{shard}:plain/a"],
                   "json": [b"{}", None], "txt": [b"utf-8", b"a"]}
    # ustar holds UTF-8 bytes in its name field as they are
    raw = tmp_path / "unicode-ustar.tar"
    write_tar(raw, [(f"{name}.txt", b"u")], tarfile.USTAR_FORMAT, encoding="utf-8")
    assert table(rill.from_tar(raw))["key"] == [name]


def test_name_that_is_not_utf8_is_a_format_error(tmp_path):
    shard = tmp_path / "latin1.tar"
    write_tar(shard, [("ok.txt", b"x"), ("caf\u00e9.txt", b"y")], tarfile.GNU_FORMAT, encoding="latin-1")
    assert b"caf\xe9.txt" in shard.read_bytes()
    with pytest.raises(rill.FormatError, match=rf"^{re.escape(str(shard))}: byte 1024: member name \"caf\" is not "
                                              r"UTF-8 text \(byte 0xE9 at byte 3\): rename it$"):
        rill.from_tar(shard)


def test_pax_size_record_and_gnu_base256_size(tmp_path):
    data = bytes(range(256)) * 3
    # pax: the size record holds the size, the ustar field 0
    pax = tmp_path / "pax-size.tar"
    with tarfile.open(pax, "w", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo("a/x.bin")
        info.size = len(data)
        info.pax_headers = {"size": str(len(data))}
        tf.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("a/y.bin")
        info.size = 3
        tf.addfile(info, io.BytesIO(b"end"))
    buf = bytearray(pax.read_bytes())
    with tarfile.open(fileobj=io.BytesIO(bytes(buf))) as tf:
        header = tf.getmembers()[0].offset_data - 512
    patch_header(buf, header, 124, 12, b"00000000000")
    pax.write_bytes(buf)
    with tarfile.open(pax) as tf:  # Python reads it as rill should
        assert [(m.name, m.size) for m in tf.getmembers()] == [("a/x.bin", len(data)), ("a/y.bin", 3)]
    assert table(rill.from_tar(pax))["bin"] == [data, b"end"]
    # GNU: a base-256 size field
    gnu = tmp_path / "gnu-size.tar"
    infos = write_tar(gnu, [("a/x.bin", data), ("a/y.bin", b"end")], tarfile.GNU_FORMAT)
    buf = bytearray(gnu.read_bytes())
    patch_header(buf, infos[0].offset, 124, 12, b"\x80" + len(data).to_bytes(11, "big"))
    gnu.write_bytes(buf)
    with tarfile.open(gnu) as tf:
        assert [m.size for m in tf.getmembers()] == [len(data), 3]
    assert table(rill.from_tar(gnu))["bin"] == [data, b"end"]


def test_archive_without_end_blocks_and_empty_archive(tmp_path):
    shard = tmp_path / "a.tar"
    infos = write_tar(shard, [("s0.txt", b"abc"), ("s1.txt", b"x" * 600)], tarfile.USTAR_FORMAT)
    full = shard.read_bytes()
    end = infos[-1].offset_data + 1024  # 600 bytes padded to two blocks
    assert len(full) > end and full[end:] == b"\0" * (len(full) - end)
    cut = tmp_path / "no-end.tar"
    cut.write_bytes(full[:end])
    assert table(rill.from_tar(cut))["txt"] == [b"abc", b"x" * 600]
    empty = tmp_path / "empty.tar"
    write_tar(empty, [], tarfile.USTAR_FORMAT)
    nothing = rill.from_tar(empty)
    assert nothing.columns == ["key", "path"] and len(nothing) == 0
    both = rill.from_tar((empty, shard, empty))
    assert table(both) == {"key": ["s0", "s1"], "path": [f"{shard}:s0", f"{shard}:s1"],
                           "txt": [b"abc", b"x" * 600]}


def test_several_archives_in_order_and_path_kinds(tmp_path, monkeypatch):
    paths = []
    for a in range(3):
        p = tmp_path / f"shard-{a:02d}.tar"
        members = [(f"s{a}{i}.cls", str(10 * a + i).encode()) for i in range(4)]
        if a == 1:
            members.append(("s14.json", b"{}"))  # an extension only one archive has
        write_tar(p, members, list(FORMATS.values())[a])
        paths.append(p)
    want_keys = [f"s{a}{i}" for a in range(3) for i in range(4)]
    want_keys.insert(8, "s14")
    for given in (paths, tuple(str(p) for p in paths), [os.fsencode(p) for p in paths]):
        df = rill.from_tar(given, dtypes={"cls": "int64"})
        got = table(df)
        assert df.columns == ["key", "path", "cls", "json"]
        assert got["key"] == want_keys
        assert got["path"] == [f"{p}:{k}" for p in paths for k in want_keys if k[1] == p.name[7]]
        assert got["cls"] == [10 * a + i for a in range(3) for i in range(4)][:8] + [None] + \
            [20 + i for i in range(4)]
        assert got["json"] == [None] * 8 + [b"{}"] + [None] * 4
    assert table(rill.from_tar(os.fsencode(paths[0])))["key"] == want_keys[:4]
    # "path" holds the archive as it was given
    monkeypatch.chdir(tmp_path)
    assert table(rill.from_tar("shard-02.tar"))["path"] == [f"shard-02.tar:s2{i}" for i in range(4)]


@pytest.mark.parametrize("typeflag", [b"\0", b"7", b"V", b"Z"])
def test_other_type_flags_as_tarfile_reads_them(tmp_path, typeflag):
    # old regular files ('\0') and contiguous files ('7') are files; a volume label ('V') and an
    # unknown type are skipped (with their data), as tarfile's isreg() says, which WebDataset uses
    shard = tmp_path / "types.tar"
    infos = write_tar(shard, [("a.txt", b"A"), ("b.txt", b"B" * 700), ("c.txt", b"C")], tarfile.GNU_FORMAT)
    buf = bytearray(shard.read_bytes())
    patch_header(buf, infos[1].offset, 156, 1, typeflag)
    shard.write_bytes(buf)
    with tarfile.open(shard) as tf:
        files = [m for m in tf.getmembers() if m.isreg()]
        want = [(m.name, tf.extractfile(m).read()) for m in files]
    assert len(want) == (3 if typeflag in (b"\0", b"7") else 2)
    got = table(rill.from_tar(shard))
    assert list(zip(got["key"], got["txt"])) == [(name[:-4], data) for name, data in want]


def test_fork_child_reads_the_archive(tmp_path, in_forked_child):
    shard = tmp_path / "fork.tar"
    write_tar(shard, [(f"s{i:02d}.cls", str(i).encode()) for i in range(40)], tarfile.USTAR_FORMAT)
    df = rill.from_tar(shard, dtypes={"cls": "int32"})
    assert sum(r["cls"].to_pylist()[0] for r in df.iter(threads=2)) == 780

    def child():
        assert sum(r["cls"].to_pylist()[0] for r in df.iter(threads=2)) == 780

    in_forked_child(child)


# ---------------------------------------------------------------- typed columns

def test_dtypes_parse_member_text(tmp_path):
    shard = tmp_path / "typed.tar"
    write_tar(shard, [("a.cls", b"3\n"), ("a.txt", "caf\u00e9 \n".encode()), ("a.score", b" 2.5\r\n"),
                      ("a.ok", b"true"), ("a.when", b"2024-01-02T03:04:05.5"),
                      ("b.cls", b"\t-12\t"), ("b.score", b"1e3"), ("b.ok", b"0"),
                      ("c.txt", b"only text")], tarfile.GNU_FORMAT)
    # extensions in any case, dtypes in any spelling
    df = rill.from_tar(shard, dtypes={"CLS": "int64", "txt": str, "score": np.float32, "ok": "bool",
                                      "when": "timestamp[us]"})
    assert df.columns == ["key", "path", "cls", "ok", "score", "txt", "when"]
    assert [df.field(c).dtype for c in df.columns] == ["string", "string", "int64", "bool", "float32", "string",
                                                       "timestamp[us]"]
    got = table(df)
    when = got.pop("when")
    assert got == {"key": ["a", "b", "c"], "path": [f"{shard}:{k}" for k in "abc"], "cls": [3, -12, None],
                   "ok": [True, False, None], "score": [2.5, 1000.0, None],
                   "txt": ["caf\u00e9 \n", None, "only text"]}  # text is kept as it is
    assert [w and w.replace(tzinfo=None) for w in when] == [datetime.datetime(2024, 1, 2, 3, 4, 5, 500000), None, None]
    again = table(rill.from_tar(shard, dtypes={"cls": "int8", "txt": "binary"}))
    assert again["cls"] == [3, -12, None]
    assert again["txt"] == ["caf\u00e9 \n".encode(), None, b"only text"]
    assert again["score"] == [b" 2.5\r\n", b"1e3", None]


@pytest.fixture
def bad_cls(tmp_path):
    shard = tmp_path / "bad.tar"
    write_tar(shard, [("s0.cls", b"1"), ("s0.jpg", b"j0"), ("s1.cls", b"x7"), ("s1.jpg", b"j1"),
                      ("s2.cls", b"2\n"), ("s2.jpg", b"j2")], tarfile.USTAR_FORMAT)
    return shard


def test_member_that_does_not_convert_raises_naming_the_member(bad_cls):
    df = rill.from_tar(bad_cls, dtypes={"cls": "int64"})
    assert not df.field("cls").nullable
    it = df.iter()
    assert next(it)["cls"].to_pylist() == [1]
    with pytest.raises(rill.FormatError, match=rf"^row 1, column 'cls': {re.escape(str(bad_cls))}:s1\.cls: "
                                               r"\"x7\" is not a value of type int64$") as info:
        next(it)
    assert info.value.row == 1 and info.value.column_name == "cls"
    assert next(it)["cls"].to_pylist() == [2]
    with pytest.raises(OSError, match=rf"{re.escape(str(bad_cls))}:s1\.cls"):  # through the Arrow stream
        pa.table(df)


@pytest.mark.parametrize("dtype,data,error,message", [
    ("int8", b"300", rill.RillRangeError, '"300" is not in the range of int8'),
    ("uint8", b"-1", rill.RillRangeError, '"-1" is not in the range of uint8'),
    ("float32", b"1e50", rill.RillRangeError, '"1e50" is not in the range of float32'),
    ("int64", b"", rill.FormatError, "holds no int64 (an empty text)"),
    ("int64", b"0x10", rill.FormatError, '"0x10" is not a value of type int64'),
    ("bool", b"yes", rill.FormatError, '"yes" is not a value of type bool'),
    ("string", b"ok\xff", rill.FormatError, "not UTF-8 text (byte 0xFF at byte 2)"),
    ("int64", b"\xff1\\", rill.FormatError, '"\\xFF1\\x5C" is not a value of type int64'),  # bytes shown escaped
])
def test_conversion_errors(tmp_path, dtype, data, error, message):
    shard = tmp_path / "conv.tar"
    write_tar(shard, [("a.x", b"1"), ("b.x", data)], tarfile.PAX_FORMAT)
    it = rill.from_tar(shard, dtypes={"x": dtype}).iter()
    assert next(it)["x"].to_pylist() == (["1"] if dtype == "string" else [True] if dtype == "bool" else [1])
    expected = f"row 1, column 'x': {shard}:b.x: {message}"
    with pytest.raises(error, match=f"^{re.escape(expected)}$"):
        next(it)


def test_member_that_does_not_convert_skip_and_null(bad_cls):
    skip = rill.from_tar(bad_cls, dtypes={"cls": "int64"}, on_error="skip")
    it = skip.iter()
    rows = list(it)
    assert [r.index for r in rows] == [0, 2]
    assert [r["cls"].to_pylist()[0] for r in rows] == [1, 2]
    assert it.stats()["skipped"] == 1
    null = rill.from_tar(bad_cls, dtypes={"cls": "int64"}, on_error=rill.ON_ERROR_NULL)
    assert null.field("cls").nullable
    it = null.iter()
    rows = list(it)
    assert [r["cls"].to_pylist()[0] for r in rows] == [1, None, 2]
    assert [r["jpg"].to_pylist()[0] for r in rows] == [b"j0", b"j1", b"j2"]
    assert it.stats()["nulled"] == 1


def test_dtypes_errors(tmp_path, bad_cls):
    with pytest.raises(rill.InvalidArgumentError,
                       match=r"^rill_df_from_tar: columns\[1\]: no member of the archives has extension \"txt\"$"):
        rill.from_tar(bad_cls, dtypes={"cls": "int64", "txt": "string"})  # a typo, most likely
    with pytest.raises(rill.InvalidArgumentError,
                       match=r"^rill_df_from_tar: columns\[0\] \(\"cls\"\): a member cannot be read as float16"):
        rill.from_tar(bad_cls, dtypes={"cls": "float16"})
    with pytest.raises(TypeError, match="dtypes must be a dict of extension -> dtype, got list"):
        rill.from_tar(bad_cls, dtypes=[("cls", "int64")])
    with pytest.raises(TypeError, match=r"dtypes keys must be extensions \(str, e\.g\. 'cls'\), got int"):
        rill.from_tar(bad_cls, dtypes={0: "int64"})
    with pytest.raises(rill.InvalidArgumentError, match="unknown dtype 'int65'; valid dtypes: bool, int8"):
        rill.from_tar(bad_cls, dtypes={"cls": "int65"})
    with pytest.raises(rill.InvalidArgumentError, match=r"unknown on_error 'ignore'; valid values: raise, skip, null"):
        rill.from_tar(bad_cls, on_error="ignore")
    with pytest.raises(rill.InvalidArgumentError, match=r"grain must be >= 0 \(0: the engine picks\), got -1"):
        rill.from_tar(bad_cls, grain=-1)
    with pytest.raises(TypeError, match="from_tar: paths must be a path or a sequence of str, bytes or os.PathLike"):
        rill.from_tar(3)
    with pytest.raises(TypeError, match="expected str, bytes or os.PathLike object, not int"):
        rill.from_tar([bad_cls, 3])
    with pytest.raises(rill.InvalidArgumentError, match=r"^rill_df_from_tar: paths, npaths >= 1 and out are required$"):
        rill.from_tar([])  # an empty glob, most likely
    with pytest.raises(rill.InvalidArgumentError, match=r"^rill_df_from_tar: threads must be >= 0 \(0: up to 16\)$"):
        rill.from_tar(bad_cls, threads=-1)


# ---------------------------------------------------------------- errors at open

def test_missing_path_and_folder_are_io_errors(tmp_path):
    missing = tmp_path / "missing.tar"
    with pytest.raises(rill.RillIOError, match=f"^{re.escape(str(missing))}: cannot open: No such file or directory$"):
        rill.from_tar(missing)
    with pytest.raises(rill.RillIOError, match=f"^{re.escape(str(tmp_path))}: cannot open: not a regular file"):
        rill.from_tar(tmp_path)


def test_truncated_archives_are_format_errors(tmp_path):
    shard = tmp_path / "cut.tar"
    infos = write_tar(shard, [("s0.txt", b"first"), ("s1.bin", bytes(2000))], tarfile.USTAR_FORMAT)
    assert infos[1].offset == 1024
    full = shard.read_bytes()
    shard.write_bytes(full[:infos[1].offset_data + 700])  # in the middle of s1.bin's data
    with pytest.raises(rill.FormatError, match=f"^{re.escape(str(shard))}: byte 1024: member \"s1.bin\" holds 2000 "
                                               "bytes but the archive ends 700 bytes after its header: the archive "
                                               "is truncated$"):
        rill.from_tar(shard)
    shard.write_bytes(full[:infos[1].offset + 300])  # a header cut short
    with pytest.raises(rill.FormatError, match=f"^{re.escape(str(shard))}: byte 1024: a partial header of 300 bytes: "
                                               "the archive is truncated$"):
        rill.from_tar(shard)
    # pax: a size record past the end of the file
    big = tmp_path / "big.tar"
    with tarfile.open(big, "w", format=tarfile.PAX_FORMAT) as tf:
        info = tarfile.TarInfo("a.bin")
        info.size = 1
        info.pax_headers = {"size": str(10 ** 10)}
        tf.addfile(info, io.BytesIO(b"A"))
    with pytest.raises(rill.FormatError, match=f"^{re.escape(str(big))}: byte 1024: member \"a.bin\" holds "
                                               "10000000000 bytes but the archive ends"):
        rill.from_tar(big)


@pytest.mark.parametrize("fmt", list(FORMATS))
def test_header_checksum_is_checked(tmp_path, fmt):
    shard = tmp_path / "sum.tar"
    infos = write_tar(shard, [("s0.txt", b"first"), (f"{LONG_DIR}/s1.txt", b"second")], FORMATS[fmt])
    good = shard.read_bytes()
    for header in (0, infos[1].offset, infos[1].offset_data - 512):  # long-name records included
        buf = bytearray(good)
        buf[header + 100] ^= 0x01  # a mode bit: only the checksum can tell
        shard.write_bytes(buf)
        with pytest.raises(tarfile.InvalidHeaderError, match="bad checksum"):  # Python agrees
            tarfile.TarInfo.frombuf(bytes(buf[header:header + 512]), "utf-8", "surrogateescape")
        what = "not a tar archive" if header == 0 else "not a tar header: the archive is damaged"
        with pytest.raises(rill.FormatError, match=f"^{re.escape(str(shard))}: byte {header}: {what} "
                                                   r"\(its checksum does not match its bytes\)$"):
            rill.from_tar(shard)


def test_pax_record_that_cannot_be_read(tmp_path):
    shard = tmp_path / "pax.tar"
    write_tar(shard, [(f"{LONG_DIR}/a.txt", b"A"), ("b.txt", b"B")], tarfile.PAX_FORMAT)
    good = shard.read_bytes()
    found = re.match(rb"(\d+) path=", good[512:])
    assert found and found.group(1) == b"136"
    for length in (b"999", b"000", b"1x6"):
        shard.write_bytes(good[:512] + length + good[515:])
        with pytest.raises(rill.FormatError, match=f"^{re.escape(str(shard))}: byte 0: pax record 0 bytes into the "
                                                   "extended header cannot be read"):
            rill.from_tar(shard)


@pytest.mark.parametrize("typeflag,what", [(b"S", "GNU sparse"), (b"M", "GNU multi-volume")])
def test_gnu_sparse_and_multivolume_are_not_supported(tmp_path, typeflag, what):
    shard = tmp_path / "gnu.tar"
    infos = write_tar(shard, [("a.txt", b"A"), ("b.txt", b"B"), ("c.txt", b"C")], tarfile.GNU_FORMAT)
    buf = bytearray(shard.read_bytes())
    patch_header(buf, infos[1].offset, 156, 1, typeflag)
    shard.write_bytes(buf)
    with pytest.raises(rill.NotSupportedError,
                       match=f"^{re.escape(str(shard))}: byte {infos[1].offset}: a {what} member \\(not supported\\)$"):
        rill.from_tar(shard)


@pytest.mark.parametrize("codec", ["gzip", "bzip2", "xz", "zstd"])
def test_compressed_archives_are_not_supported(tmp_path, codec):
    plain = tmp_path / "a.tar"
    write_tar(plain, [("s0.bin", random.Random(1).randbytes(5000))], tarfile.USTAR_FORMAT)
    compress = {"gzip": gzip.compress, "bzip2": bz2.compress, "xz": lzma.compress,
                # a zstd frame: the magic number is what tells it (no zstd module in the standard library)
                "zstd": lambda b: b"\x28\xb5\x2f\xfd" + bytes(len(b))}[codec]
    packed = tmp_path / "gz-named.tar"  # known by its bytes, not its name
    packed.write_bytes(compress(plain.read_bytes()))
    assert packed.stat().st_size > 512
    with pytest.raises(rill.NotSupportedError,
                       match=f"^{re.escape(str(packed))}: a {codec}-compressed archive: members are read in place, "
                             "so decompress it first"):
        rill.from_tar([plain, packed])


def test_small_gzip_archive_is_not_supported_either(tmp_path):
    # one small member: the whole .tar.gz is shorter than a tar header
    plain = tmp_path / "a.tar"
    write_tar(plain, [("s0.txt", b"x")], tarfile.USTAR_FORMAT)
    gz = tmp_path / "a.tar.gz"
    gz.write_bytes(gzip.compress(plain.read_bytes()))
    assert gz.stat().st_size < 512
    with pytest.raises(rill.NotSupportedError, match=f"^{re.escape(str(gz))}: a gzip-compressed archive"):
        rill.from_tar(gz)


def test_duplicate_extension_in_a_sample(tmp_path):
    shard = tmp_path / "dup.tar"
    infos = write_tar(shard, [("s0.jpg", b"a"), ("s0.cls", b"1"), ("s0.jpg", b"b")], tarfile.PAX_FORMAT)
    with pytest.raises(rill.FormatError, match=f"^{re.escape(str(shard))}: byte {infos[2].offset}: member \"s0.jpg\": "
                                               "sample \"s0\" already has a member with extension \"jpg\"$"):
        rill.from_tar(shard)
    case = tmp_path / "case.tar"
    infos = write_tar(case, [("s0.jpg", b"a"), ("s0.JPG", b"b")], tarfile.PAX_FORMAT)
    with pytest.raises(rill.FormatError, match=f"^{re.escape(str(case))}: byte {infos[1].offset}: member \"s0.JPG\": "
                                               "sample \"s0\" already has a member with extension \"jpg\"$"):
        rill.from_tar(case)


@pytest.mark.parametrize("ext", ["key", "path", "KEY"])
def test_extension_named_like_a_fixed_column(tmp_path, ext):
    shard = tmp_path / "named.tar"
    infos = write_tar(shard, [("s0.txt", b"a"), (f"s0.{ext}", b"b")], tarfile.USTAR_FORMAT)
    with pytest.raises(rill.FormatError, match=f"^{re.escape(str(shard))}: byte {infos[1].offset}: member \"s0.{ext}\": "
                                               r"its extension names a column the source makes itself \(key, path\)"):
        rill.from_tar(shard)

    renamed = rill.from_tar(shard, rename={ext.lower(): "other"}, dtypes={ext.lower(): "string"})
    assert renamed.columns == ["key", "path", "other", "txt"]
    assert table(renamed)["other"] == ["b"]


def test_rename_makes_alternative_extensions_one_column(tmp_path):
    shard = tmp_path / "mixed.tar"
    write_tar(shard, [("a.jpg", b"J"), ("a.cls", b"0"), ("b.PNG", b"P"), ("b.cls", b"1"), ("c.cls", b"2")],
              tarfile.PAX_FORMAT)
    df = rill.from_tar(shard, rename={"jpg": "image", "png": "image", "webp": "image"}, dtypes={"cls": "int64"})
    assert df.columns == ["key", "path", "cls", "image"]
    t = table(df)
    assert t["image"] == [b"J", b"P", None] and t["cls"] == [0, 1, 2]
    with pytest.raises(rill.InvalidArgumentError, match=r"no member of the archives has extension \"gif\" \(nor any "
                                                        r"other extension given its name\)$"):
        rill.from_tar(shard, rename={"gif": "image"})
    with pytest.raises(rill.InvalidArgumentError, match=r"make one column \"image\" of two types \(string, binary\)"):
        rill.from_tar(shard, rename={"jpg": "image", "png": "image"}, dtypes={"png": "string"})
    with pytest.raises(rill.InvalidArgumentError, match=r"columns\[0\]\.name \"key\": the source makes that column "
                                                        r"itself \(key, path\)$"):
        rill.from_tar(shard, rename={"jpg": "key"})
    with pytest.raises(TypeError, match=r"^from_tar: rename values must be column names \(str\), got int$"):
        rill.from_tar(shard, rename={"jpg": 3})
    both = tmp_path / "both.tar"
    infos = write_tar(both, [("a.jpg", b"J"), ("a.png", b"P")], tarfile.USTAR_FORMAT)
    with pytest.raises(rill.FormatError, match=f"byte {infos[1].offset}: member \"a.png\": sample \"a\" already has "
                                               r"a member for column \"image\" \(the extensions given that name are "
                                               r"alternatives: one a sample\)$"):
        rill.from_tar(both, rename={"jpg": "image", "png": "image"})


# ---------------------------------------------------------------- an archive that changes

CHANGED = "the archive changed since it was indexed (its size or modification time): open it again"


def test_archive_replaced_or_changed_after_indexing(tmp_path):
    shard = tmp_path / "live.tar"
    write_tar(shard, [("s0.txt", b"aaaa"), ("s1.txt", b"bbbb")], tarfile.USTAR_FORMAT)
    original = shard.read_bytes()
    # replaced by another file (another inode) of the same size and time
    df = rill.from_tar(shard)
    st = shard.stat()
    other = tmp_path / "other.tar"
    other.write_bytes(original.replace(b"bbbb", b"BBBB"))
    os.utime(other, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(other, shard)
    # the archive keeps the descriptor it was indexed from: the file indexed is still read
    assert table(df)["txt"] == [b"aaaa", b"bbbb"]
    # the same file written again in place: a new modification time
    df = rill.from_tar(shard)
    st = shard.stat()
    with open(shard, "r+b") as f:
        f.write(f.read())
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    with pytest.raises(rill.RillIOError, match=re.escape(CHANGED)):
        list(df.iter())
    # a longer file
    df = rill.from_tar(shard)
    with open(shard, "ab") as f:
        f.write(bytes(512))
    with pytest.raises(rill.RillIOError, match=re.escape(CHANGED)):
        list(df.iter())
    # members are read when pulled: bytes changed with size and time kept are the new bytes
    df = rill.from_tar(shard)
    st = shard.stat()
    with open(shard, "r+b") as f:
        data = f.read()
        f.seek(data.index(b"BBBB"))
        f.write(b"cccc")
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert table(df)["txt"] == [b"aaaa", b"cccc"]
    shard.unlink()  # removed: still read from the descriptor kept
    assert table(df)["txt"] == [b"aaaa", b"cccc"]


def test_changed_archive_under_skip_and_null(tmp_path):
    shard = tmp_path / "live.tar"
    write_tar(shard, [("s0.txt", b"aaaa"), ("s1.txt", b"bbbb")], tarfile.GNU_FORMAT)
    skip = rill.from_tar(shard, on_error="skip")
    null = rill.from_tar(shard, on_error="null")
    st = shard.stat()
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    it = skip.iter()
    assert list(it) == [] and it.stats()["skipped"] == 2
    it = null.iter()
    rows = list(it)
    assert [(r["key"].to_pylist()[0], r["txt"].to_pylist()[0]) for r in rows] == [("s0", None), ("s1", None)]
    assert it.stats()["nulled"] == 2


# ---------------------------------------------------------------- with the image operators

def jpeg(arr):
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def write_image_shards(tmp_path, nshards, per_shard, fmt=tarfile.GNU_FORMAT):
    """Shards of samples {jpg, cls}; returns (paths, {key: (jpeg bytes, label)})."""
    rng = np.random.default_rng(11)
    paths, samples = [], {}
    for s in range(nshards):
        members = []
        for i in range(per_shard):
            key = f"images/{s:02d}/{i:04d}"
            data = jpeg(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8))
            label = s * per_shard + i
            samples[key] = (data, label)
            members += [(f"{key}.jpg", data), (f"{key}.cls", f"{label}\n".encode())]
        p = tmp_path / f"train-{s:04d}.tar"
        write_tar(p, members, fmt)
        paths.append(p)
    return paths, samples


@pytest.mark.skipif(not rill.has_feature("jpeg"), reason="rill built without libjpeg")
def test_jpeg_members_decoded_and_batched(tmp_path):
    paths, samples = write_image_shards(tmp_path, 2, 5)
    df = rill.from_tar(paths, dtypes={"cls": "int64"})
    df.decode("img", "jpg")
    df.center_crop("crop", "img", 8)
    batches = list(df.batch(4, ["crop", "cls"]).iter(threads=2, prefetch=2))
    assert [b["crop"].to_numpy().shape for b in batches] == [(4, 8, 8, 3), (4, 8, 8, 3), (2, 8, 8, 3)]
    labels = np.concatenate([b["cls"].to_numpy() for b in batches])
    assert labels.tolist() == list(range(10))
    pixels = np.concatenate([b["crop"].to_numpy() for b in batches])
    by_label = {label: data for data, label in samples.values()}
    for label, got in zip(labels, pixels):
        np.testing.assert_array_equal(got, np.asarray(Image.open(io.BytesIO(by_label[label])).convert("RGB")))


@pytest.mark.skipif(not rill.has_feature("jpeg"), reason="rill built without libjpeg")
def test_bad_jpeg_member_names_archive_and_key(tmp_path):
    good = jpeg(np.zeros((8, 8, 3), np.uint8))
    shard = tmp_path / "imgs.tar"
    write_tar(shard, [("a/ok.jpg", good), ("a/cut.jpg", good[:len(good) // 2])], tarfile.PAX_FORMAT)
    df = rill.from_tar(shard)
    df.decode("img", "jpg")
    it = df.iter(columns=["img"])
    assert np.asarray(next(it)["img"].to_pylist()[0]).shape == (8, 8, 3)
    with pytest.raises(rill.FormatError, match=f"^row 1, column 'img': .*{re.escape(str(shard))}:a/cut\\b"):
        next(it)


@pytest.mark.skipif(not rill.has_feature("jpeg"), reason="rill built without libjpeg")
def test_shards_indexed_on_one_thread_or_many_give_the_same_rows(tmp_path):
    paths, samples = write_image_shards(tmp_path, 6, 5)
    one = table(rill.from_tar(paths, dtypes={"cls": "int64"}, threads=1))
    many = table(rill.from_tar(paths, dtypes={"cls": "int64"}, threads=6))
    assert one == many
    assert one["key"] == sorted(samples)  # shards in order, samples in order within each
    assert one["cls"] == [samples[k][1] for k in one["key"]]


@pytest.mark.skipif(not rill.has_feature("jpeg"), reason="rill built without libjpeg")
def test_shuffled_shards_every_sample_once_per_epoch(tmp_path):
    paths, samples = write_image_shards(tmp_path, 4, 6, tarfile.PAX_FORMAT)
    df = rill.from_tar(paths, dtypes={"cls": "int64"}).shuffle(13)
    df.random_resized_crop("img", "jpg", 4)
    orders = []
    for epoch in range(3):
        keys, labels = [], []
        for row in df.iter(columns=["key", "cls", "img"], epoch=epoch, threads=2):
            keys += row["key"].to_pylist()
            labels += row["cls"].to_pylist()
            assert row["img"].to_numpy().shape == (1, 4, 4, 3)
        assert sorted(keys) == sorted(samples) and len(keys) == len(samples) == 24
        assert labels == [samples[k][1] for k in keys]
        orders.append(keys)
    assert orders[0] != sorted(samples)
    assert orders[0] != orders[1] != orders[2]
    again = [r["key"].to_pylist()[0] for r in df.iter(columns=["key"], epoch=1)]
    assert again == orders[1]  # an epoch's order depends on (seed, epoch) only


# ---------------------------------------------------------------- brace patterns of shard lists

BASH_PATTERNS = ["train-{000..012}.tar", "{8..11}", "{08..11}", "{9..0010}", "{5..1}", "{0..10..4}",
                 "{10..0..-4}", "{-2..2}", "{a..e}", "{e..a..2}", "{a,b}{1,2}", "s/{train,val}-{0..1}.tar",
                 "x{,y}z", "{a,b{1,2}}", "{{1,2},{3..4}}", "{a,{0..2}x}", "{1..3}{a..b}{x,y}", "{a,a}",
                 "p{}q", "p{x}q", "a{1..}b", "{a..5}", "{a{1,2}}x{3,4}", "plain.tar",
                 "{0..3}/{0..3}/{a,b,c}.{tar,tgz}"]


@pytest.mark.parametrize("pattern", BASH_PATTERNS)
def test_expand_braces_as_bash_expands(pattern):
    import subprocess
    want = subprocess.run(["bash", "-c", "printf '%s\\n' " + pattern], check=True, capture_output=True,
                          text=True).stdout.splitlines()
    assert rill.expand_braces(pattern) == want


def test_expand_braces_types_and_escapes(tmp_path):
    import pathlib
    assert rill.expand_braces(b"a{0..1}") == [b"a0", b"a1"]
    assert rill.expand_braces(pathlib.Path("d/{x,y}.tar")) == ["d/x.tar", "d/y.tar"]
    assert rill.expand_braces("caf\u00e9-{1,2}") == ["caf\u00e9-1", "caf\u00e9-2"]
    assert rill.expand_braces(r"\{a,b\}") == ["{a,b}"]
    assert rill.expand_braces(r"{a\,b,c}") == ["a,b", "c"]
    assert len(rill.expand_braces("s{0..999}-{000..999}")) == 1_000_000
    with pytest.raises(TypeError):
        rill.expand_braces(3)


@pytest.mark.parametrize("pattern,message", [
    ("{1,2", "expand_braces: '{1,2': unmatched '{' at character 1"),
    ("a}b", "expand_braces: 'a}b': unmatched '}' at character 2"),
    ("{1..10..0}", "the range {1..10..0} has a step of 0"),
    ("{1..99999999999999999999}", "a number of the range {1..99999999999999999999} is out of range"),
    ("{0..1000000}", "'{0..1000000}' expands to more than 1000000 paths"),
    ("", "expand_braces: empty pattern"),
    ("a\0{1,2}", "the path 'a\\x00{1,2}' holds a NUL character"),
])
def test_expand_braces_errors(pattern, message):
    with pytest.raises(rill.InvalidArgumentError) as e:
        rill.expand_braces(pattern)
    assert message in str(e.value)
    assert e.value.code == rill.EINVAL


def write_shards(tmp_path, names):
    for k, name in enumerate(names):
        write_tar(tmp_path / name, [(f"s{k}/x.cls", str(k).encode()), (f"s{k}/x.txt", name.encode())])


def test_from_tar_expands_a_pattern(tmp_path):
    names = [f"train-{k:03d}.tar" for k in range(12)]
    write_shards(tmp_path, names)
    got = rill.from_tar(str(tmp_path / "train-{000..011}.tar"), dtypes={"cls": "int64", "txt": "string"})
    want = rill.from_tar([str(tmp_path / n) for n in names], dtypes={"cls": "int64", "txt": "string"})
    assert table(got) == table(want)
    assert table(got)["cls"] == list(range(12))
    assert table(got)["path"][11] == str(tmp_path / "train-011.tar") + ":s11/x"
    # bytes and os.PathLike patterns, alternatives in any order
    got = rill.from_tar(os.fsencode(tmp_path) + b"/train-{002,000}.tar", dtypes={"cls": "int64"})
    assert table(got)["cls"] == [2, 0]
    got = rill.from_tar(tmp_path / "train-00{1..3..2}.tar", dtypes={"cls": "int64"})
    assert table(got)["cls"] == [1, 3]


def test_from_tar_patterns_name_files_first(tmp_path):
    # a file whose name holds braces is read as it is; a list's items are never expanded
    write_shards(tmp_path, ["odd-{1,2}.tar", "odd-1.tar"])
    assert table(rill.from_tar(str(tmp_path / "odd-{1,2}.tar"), dtypes={"cls": "int64"}))["cls"] == [0]
    with pytest.raises(rill.RillIOError, match=r"odd-\{0,1\}\.tar: cannot open"):
        rill.from_tar([str(tmp_path / "odd-{0,1}.tar")])
    # a pattern naming a shard that is not there: the error names the expanded path
    with pytest.raises(rill.RillIOError, match=r"odd-2\.tar: cannot open: No such file"):
        rill.from_tar(str(tmp_path / "odd-{1..2}.tar"))
    with pytest.raises(rill.InvalidArgumentError, match=r"unmatched '\{' at character"):
        rill.from_tar(str(tmp_path / "odd-{1..2.tar"))


# ---------------------------------------------------------------- saved indexes (index_dir)

def test_from_tar_saves_and_reads_back_indexes(tmp_path):
    names = [f"train-{k}.tar" for k in range(3)]
    write_shards(tmp_path, names)
    idx = tmp_path / "idx"
    idx.mkdir()
    pattern = str(tmp_path / "train-{0..2}.tar")
    plain = table(rill.from_tar(pattern, dtypes={"cls": "int64"}))
    first = table(rill.from_tar(pattern, dtypes={"cls": "int64"}, index_dir=idx))
    saved = sorted(p.name for p in idx.iterdir())
    assert len(saved) == 3 and all(p.endswith(".rillidx") for p in saved)
    assert all(any(f"-{n}.rillidx" in p for p in saved) for n in names)
    mtimes = {p.name: p.stat().st_mtime_ns for p in idx.iterdir()}
    again = table(rill.from_tar(pattern, dtypes={"cls": "int64"}, index_dir=str(idx).encode()))
    assert plain == first == again
    assert {p.name: p.stat().st_mtime_ns for p in idx.iterdir()} == mtimes  # read, not rewritten
    # an archive rewritten with another sample: its index is made again, the others kept
    write_tar(tmp_path / "train-1.tar", [("s1/x.cls", b"1"), ("s1/x.txt", b"t"), ("s9/x.cls", b"9")])
    changed = table(rill.from_tar(pattern, dtypes={"cls": "int64"}, index_dir=idx))
    assert changed["cls"] == [0, 1, 9, 2]
    assert changed == table(rill.from_tar(pattern, dtypes={"cls": "int64"}))
    now = {p.name: p.stat().st_mtime_ns for p in idx.iterdir()}
    assert sum(now[k] != mtimes[k] for k in now) == 1


def test_from_tar_index_dir_errors(tmp_path):
    write_shards(tmp_path, ["a.tar"])
    with pytest.raises(rill.InvalidArgumentError, match=r"index_dir '.*nowhere' is not a folder: No such file"):
        rill.from_tar(str(tmp_path / "a.tar"), index_dir=tmp_path / "nowhere")
    with pytest.raises(rill.InvalidArgumentError, match=r"a\.tar' is not a folder"):
        rill.from_tar(str(tmp_path / "a.tar"), index_dir=tmp_path / "a.tar")
    with pytest.raises(TypeError):
        rill.from_tar(str(tmp_path / "a.tar"), index_dir=3)
    # a NUL would end the C string: the index would be saved in tmp_path, the archive read is a.tar
    with pytest.raises(rill.InvalidArgumentError, match=r"the path '.*\\x00idx' holds a NUL character"):
        rill.from_tar(str(tmp_path / "a.tar"), index_dir=str(tmp_path) + "\0idx")
    for paths in (str(tmp_path / "a.tar") + "\0x", [str(tmp_path / "a.tar") + "\0x"]):
        with pytest.raises(rill.InvalidArgumentError, match=r"a\.tar\\x00x' holds a NUL character"):
            rill.from_tar(paths)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar"]
    # a damaged saved index is not used
    idx = tmp_path / "idx"
    idx.mkdir()
    want = table(rill.from_tar(str(tmp_path / "a.tar"), index_dir=idx))
    (f,) = idx.iterdir()
    f.write_bytes(b"garbage" + f.read_bytes()[7:])
    assert table(rill.from_tar(str(tmp_path / "a.tar"), index_dir=idx)) == want


def test_prune_tar_indexes_removes_what_no_open_would_use(tmp_path):
    write_shards(tmp_path, ["a.tar", "b.tar"])
    idx = tmp_path / "idx"
    idx.mkdir()
    paths = [str(tmp_path / "a.tar"), str(tmp_path / "b.tar")]
    want = table(rill.from_tar(paths, index_dir=idx))
    assert rill.prune_tar_indexes(idx) == (2, 0)
    (tmp_path / "b.tar").unlink()
    (idx / "notes.txt").write_text("kept")
    (idx / "0000000000000000-x.tar.rillidx").write_bytes(b"RILLTIX\x01garbage")
    assert rill.prune_tar_indexes(str(idx).encode()) == (1, 2)
    left = sorted(p.name for p in idx.iterdir())
    assert len(left) == 2 and left[0].endswith("-a.tar.rillidx") and left[1] == "notes.txt"
    assert (idx / "notes.txt").read_text() == "kept"
    # a.tar's index is still the one read: its file is not rewritten
    (a_index,) = [p for p in idx.iterdir() if p.suffix == ".rillidx"]
    mtime = a_index.stat().st_mtime_ns
    assert table(rill.from_tar(paths[0], index_dir=idx))["key"] == \
        [k for k, p in zip(want["key"], want["path"]) if p.startswith(paths[0])]
    assert a_index.stat().st_mtime_ns == mtime
    with pytest.raises(rill.InvalidArgumentError, match=r"index_dir '.*nowhere' is not a folder"):
        rill.prune_tar_indexes(tmp_path / "nowhere")
    with pytest.raises(TypeError):
        rill.prune_tar_indexes(3)
    with pytest.raises(rill.InvalidArgumentError, match=r"the path '.*\\x00/elsewhere' holds a NUL character"):
        rill.prune_tar_indexes(str(idx) + "\0/elsewhere")
