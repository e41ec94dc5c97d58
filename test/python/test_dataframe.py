"""rill.DataFrame: properties, derived dataframes, image operators, CUDA operators without a
device, Arrow and interchange exports. Oracles: numpy, PIL, pyarrow, pandas."""
import io

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from PIL import Image

import rill


def png(arr):
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="PNG")
    return buf.getvalue()


def jpeg(arr, progressive=False, quality=95):
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="JPEG", quality=quality, progressive=progressive)
    return buf.getvalue()


def webp(arr, **kw):
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, format="WEBP", **kw)
    return buf.getvalue()


def images(n=5):
    rng = np.random.default_rng(0)
    return [rng.integers(0, 256, (6 + 2 * i, 10 - 2 * i, 3), dtype=np.uint8) for i in range(n)]  # even margins for centre crops


def test_properties_and_repr():
    df = rill.from_numpy({"a": np.arange(4), "b": np.ma.masked_array(np.ones((4, 2), np.float32),
                                                                      mask=np.zeros((4, 2)))})
    assert len(df) == df.num_rows == 4
    assert df.num_columns == 2 and df.columns == ["a", "b"]
    f = df.field("b")
    assert (f.name, f.dtype, f.shape) == ("b", "float32", (2,))
    assert df.field(0) == df.schema[0]
    assert df.column_index("b") == 1 and df.column_index(1) == 1
    assert not df.is_batched
    assert repr(df) == "rill.DataFrame(4 rows; a: int64, b: float32[2])"
    with pytest.raises(rill.InvalidArgumentError, match=r"unknown column 'zz'; columns are: a, b"):
        df.column_index("zz")
    with pytest.raises(rill.InvalidArgumentError):
        df.field(7)
    with pytest.raises(TypeError):
        rill.DataFrame()


def test_batch_shuffle_shard_filter():
    x = np.arange(10)
    df = rill.from_numpy({"x": x, "keep": x % 3 == 0})
    b = df.batch(4, ["x"], drop_last=True)
    assert b.is_batched and len(b) == 2 and b.columns == ["x"]
    assert "batched" in repr(b)
    assert [r["x"].to_numpy().tolist() for r in b] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert len(df.batch(4)) == 3
    s = df.shuffle(5)
    got = pa.table(s).column("x").to_pylist()
    assert sorted(got) == list(range(10)) and got != list(range(10))
    shards = [pa.table(df.shard(r, 3)).column("x").to_pylist() for r in range(3)]
    assert sorted(sum(shards, [])) == list(range(10))
    assert pa.table(df.filter("keep")).column("x").to_pylist() == [0, 3, 6, 9]
    with pytest.raises(rill.InvalidArgumentError):
        df.filter("x")  # not a bool column
    with pytest.raises(rill.InvalidArgumentError):
        df.shard(3, 3)
    with pytest.raises(rill.InvalidArgumentError):
        df.batch(0)
    with pytest.raises(rill.InvalidArgumentError, match="unknown layout"):
        df.batch(2, layout="diagonal")


def test_slices_and_take_match_python_and_numpy_indexing():
    n = 23
    x = np.arange(n) * 10
    df = rill.from_numpy({"x": x, "s": [f"r{i}" for i in range(n)]})
    rows = list(range(n))
    for key in [slice(None), slice(5, 9), slice(-4, None), slice(None, -20), slice(7, 3), slice(30, 40),
                slice(None, None, 3), slice(20, 2, -5), slice(None, None, -1), slice(-100, 100)]:
        view = df[key]
        assert len(view) == len(rows[key]), key
        assert pa.table(view).column("x").to_pylist() == list(x[key]), key
    # a view of a view, batched, with a map on it
    part = df[3:][::2]
    sq = part.map("y", lambda v: v // 10, ["x"], "int64")
    assert [r["y"].to_pylist() for r in part.batch(4, [sq])] == [[3, 5, 7, 9], [11, 13, 15, 17], [19, 21]]
    idx = [4, 0, -1, 4]
    assert pa.table(df.take(idx)).column("s").to_pylist() == ["r4", "r0", "r22", "r4"]
    perm = np.random.default_rng(1).permutation(n)  # int64: copied at once
    assert pa.table(df.take(perm)).column("x").to_pylist() == list(x[perm])
    assert pa.table(df.take(perm[::2])).column("x").to_pylist() == list(x[perm[::2]])  # strided: item by item
    assert pa.table(df.take(perm.astype(np.int32))).column("x").to_pylist() == list(x[perm])
    assert len(df.take([])) == 0
    # a fixed random split: disjoint, complete, the same in every epoch (unlike shuffle()[:k])
    train, val = df.take(perm[:18]), df.take(perm[18:])
    got = [pa.table(d).column("x").to_pylist() for d in (train, val)]
    assert sorted(got[0] + got[1]) == list(x)
    assert [r["x"][0] for r in train.batch(18).iter(epoch=3)] == [x[perm[0]]]
    with pytest.raises(IndexError, match=r"take: index 23 is out of range for 23 rows"):
        df.take([0, 23])
    with pytest.raises(IndexError, match=r"take: index -24 is out of range for 23 rows"):
        df.take([-24])
    with pytest.raises(IndexError, match=r"take: index 99 is out of range"):
        df.take(np.array([1, 99]))
    with pytest.raises(IndexError, match=r"take: indices\[0\] is out of range for 23 rows"):
        df.take([2**70])
    with pytest.raises(TypeError, match=r"take: indices\[1\] must be an int, not float"):
        df.take([1, 2.0])
    with pytest.raises(TypeError, match=r"take: indices\[0\] is a bool: take wants positions"):
        df.take([True, False])
    with pytest.raises(TypeError, match=r"take: indices\[0\] is a bool"):
        df.take(np.ones(n, bool))
    with pytest.raises(TypeError, match=r"take: indices must be a sequence of int, not int"):
        df.take(3)
    with pytest.raises(TypeError, match=r"take: indices must be a sequence of int, not str"):
        df.take("12")
    with pytest.raises(TypeError, match=r"DataFrame rows are chosen by a slice \(df\[a:b\]\) or by df.take"):
        df[3]
    with pytest.raises(TypeError, match=r"not by str"):
        df["x"]
    with pytest.raises(ValueError, match="slice step cannot be zero"):
        df[::0]
    # null cells keep their places through a slice and a take
    m = np.ma.masked_array(np.arange(6, dtype=np.float32), mask=[0, 1, 0, 0, 1, 0])
    nd = rill.from_numpy({"v": m, "s": ["a", None, "c", "d", None, "f"]})
    assert pa.table(nd[1:5]).column("v").to_pylist() == [None, 2.0, 3.0, None]
    assert pa.table(nd.take([4, 0, 1])).column("s").to_pylist() == [None, "a", None]
    assert [r["v"].to_pylist() for r in nd.take([5, 4, 1, 2]).batch(2)] == [[5.0, None], [None, 2.0]]
    b = df.batch(4)
    with pytest.raises(rill.NotSupportedError, match="deriving from a batched dataframe"):
        b[1:]
    with pytest.raises(rill.NotSupportedError, match="deriving from a batched dataframe"):
        b.take([0])



def test_concat_reads_the_frames_rows_one_after_another(tmp_path):
    a = rill.from_numpy({"x": np.arange(4), "s": ["a", None, "c", "d"]})
    b = rill.from_numpy({"s": ["e", "f"], "x": np.arange(10, 12)})  # the same columns, another order
    sql = tmp_path / "t.db"
    import sqlite3
    with sqlite3.connect(sql) as con:
        con.execute("create table t (x integer, s text)")
        con.executemany("insert into t values (?, ?)", [(20, "g"), (None, "h"), (22, None)])
    c = rill.from_sqlite(str(sql), "select x, s from t", dtypes={"x": "int64", "s": "string"})
    cat = rill.concat([a, b, c])
    assert len(cat) == 9 and cat.columns == ["x", "s"]
    want = pd.concat([pd.DataFrame({"x": [0, 1, 2, 3], "s": ["a", None, "c", "d"]}),
                      pd.DataFrame({"x": [10, 11], "s": ["e", "f"]}),
                      pd.DataFrame({"x": [20, None, 22], "s": ["g", "h", None]})], ignore_index=True)
    got = pa.table(cat).to_pandas()
    assert got["x"].tolist()[:6] == want["x"].tolist()[:6]
    assert got["x"].isna().tolist() == want["x"].isna().tolist()
    assert got["s"].tolist() == want["s"].tolist()
    # derived from the result: a map, a shuffle, batches across the frames' boundaries
    y = cat.map("y", lambda v: v * 2, ["x"], "int64", on_error="null")
    assert [r["y"].to_pylist() for r in cat.batch(5, [y])] == [[0, 2, 4, 6, 20], [22, 40, None, 44]]
    sh = cat.shuffle(seed=3)
    got = pa.table(sh).column("s").to_pylist()
    assert sorted(v for v in got if v) == ["a", "c", "d", "e", "f", "g", "h"] and got.count(None) == 2
    # the frames stay usable, and the result keeps them alive
    assert [len(p) for p in cat.parts] == [4, 2, 3] and a.parts == ()
    del a, b, c
    assert pa.table(cat[6:]).column("s").to_pylist() == ["g", "h", None]
    # misuse
    d = rill.from_numpy({"x": np.arange(2)})
    with pytest.raises(rill.InvalidArgumentError, match=r"rill_df_concat: part 1 has 1 columns and part 0 has 2"):
        rill.concat([rill.from_numpy({"x": np.arange(1), "s": ["a"]}), d])
    with pytest.raises(rill.InvalidArgumentError, match=r"column 'x' is int64 in part 0 and float64 in part 1"):
        rill.concat([d, rill.from_numpy({"x": np.zeros(2)})])
    with pytest.raises(rill.InvalidArgumentError, match=r"part 1 is a derived dataframe"):
        rill.concat([d, d.shuffle()])
    with pytest.raises(rill.InvalidArgumentError, match=r"column 'y' of part 0 is a map, not a source"):
        rill.concat([cat])
    with pytest.raises(ValueError, match="concat: no frames to concatenate"):
        rill.concat([])
    with pytest.raises(TypeError, match=r"concat: frames\[1\] must be a DataFrame, not int"):
        rill.concat([d, 3])
    with pytest.raises(TypeError, match="concat: frames must be a sequence of DataFrame, not rill.DataFrame"):
        rill.concat(d)
    dd = rill.concat([d, d])
    assert pa.table(dd).column("x").to_pylist() == [0, 1, 0, 1]
    with pytest.raises(rill.InvalidArgumentError, match="already has derived dataframes"):
        d.map("z", lambda v: v, ["x"], "int64")  # a part is frozen

def test_concat_horizontal_puts_the_frames_columns_side_by_side(tmp_path):
    feats = np.arange(12, dtype=np.float32).reshape(4, 3)
    f = rill.from_numpy({"feat": feats})
    csv = tmp_path / "labels.csv"
    csv.write_text("label,name\n1,a\n0,\nx,c\n1,d\n")  # row 2's label is not an int
    lab = rill.from_csv(str(csv), dtypes={"label": "int64"}, on_error="skip")
    side = rill.concat([f, lab], how="horizontal")
    assert side.columns == ["feat", "label", "name"] and len(side) == 4
    rows = [(r["feat"].to_numpy().tolist(), r["label"].to_pylist(), r["name"].to_pylist()) for r in side.batch(4)]
    # row 2 is skipped by the CSV's policy, in every column
    assert rows == [([feats[0].tolist(), feats[1].tolist(), feats[3].tolist()], [1, 0, 1], ["a", "", "d"])]
    want = pd.concat([pd.DataFrame({"k": [0, 1, 2, 3]}), pd.DataFrame({"m": ["p", "q", "r", "s"]})], axis=1)
    ab = rill.concat([rill.from_numpy({"k": np.arange(4)}), rill.from_numpy({"m": ["p", "q", "r", "s"]})],
                     how="horizontal")
    assert pa.table(ab).to_pandas().equals(want)
    sh = ab.shuffle(seed=1)
    got = pa.table(sh).to_pandas()
    assert sorted(zip(got["k"], got["m"])) == list(zip(want["k"], want["m"]))  # rows stay whole
    with pytest.raises(rill.InvalidArgumentError, match="the column name 'k' of part 1 is taken by an earlier part"):
        rill.concat([ab, ab], how="horizontal")
    with pytest.raises(rill.InvalidArgumentError, match="part 1 has 3 rows and part 0 has 4"):
        rill.concat([f, rill.from_numpy({"z": np.arange(3)})], how="horizontal")
    with pytest.raises(ValueError, match="concat: how must be 'vertical' or 'horizontal', not 'diagonal'"):
        rill.concat([f], how="diagonal")
    # a CSV frame's rows left out under on_bad_row="skip" are still its own to tell
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n3\n4,5\n6,7\n")
    bf = rill.from_csv(str(bad), on_bad_row="skip")
    both = rill.concat([rill.from_numpy({"z": np.arange(3)}), bf], how="horizontal")
    assert both.bad_row_count == 1 and both.bad_rows == [(3, 1)]
    assert both.shuffle(1).bad_row_count == 1
    # an image folder beside features: the result keeps the folder's class names
    for cls in ("cat", "dog"):
        (tmp_path / "imgs" / cls).mkdir(parents=True)
        for i in range(2):
            (tmp_path / "imgs" / cls / f"{i}.png").write_bytes(b"not decoded here")
    folder = rill.from_image_folder(str(tmp_path / "imgs"))
    both = rill.concat([f, folder], how="horizontal")
    assert both.classes == ["cat", "dog"] and both.columns == ["feat", "path", "bytes", "label"]
    assert [r["label"].to_pylist() for r in both.batch(4, ["label"])] == [[0, 0, 1, 1]]


def test_adding_columns_after_deriving_is_refused():
    df = rill.from_numpy({"x": np.arange(3)})
    s = df.shuffle(1)
    with pytest.raises(rill.InvalidArgumentError, match="already has derived dataframes"):
        df.map("y", lambda v: v, "x", "int64")
    assert len(s) == 3


def test_arrow_stream_schema_and_to_arrow_stream():
    df = rill.from_numpy({"a": np.arange(100, dtype=np.int32), "s": [str(i) for i in range(100)]})
    schema = pa.schema(df)
    assert schema.names == ["a", "s"]
    assert schema.field("a").type == pa.int32() and schema.field("s").type == pa.large_string()
    t = pa.table(df)
    t.validate(full=True)
    assert t.column("a").to_pylist() == list(range(100))
    reader = pa.RecordBatchReader.from_stream(df.to_arrow_stream(["s"], batch_rows=30))
    batches = list(reader)
    assert [b.num_rows for b in batches] == [30, 30, 30, 10]
    assert batches[0].schema.names == ["s"]
    s = df.to_arrow_stream()
    s.__arrow_c_stream__()
    with pytest.raises(rill.InvalidArgumentError, match="already consumed"):
        s.__arrow_c_stream__()
    # a batched dataframe gives one record batch per batch
    assert [b.num_rows for b in pa.RecordBatchReader.from_stream(df.batch(40))] == [40, 40, 20]


def test_dataframe_interchange_with_pandas():
    v = np.arange(7, dtype=np.float64)
    df = rill.from_numpy({"v": np.ma.masked_array(v, mask=v == 3), "i": np.arange(7, dtype=np.int64)})
    pdf = pd.api.interchange.from_dataframe(df)
    assert pdf["i"].tolist() == list(range(7))
    assert np.isnan(pdf["v"][3]) and pdf["v"][4] == 4.0
    ix = df.__dataframe__()
    assert ix.num_rows() == 7 and list(ix.column_names()) == ["v", "i"]
    df.map("j", lambda i: i + 1, "i", "int64")  # the temporary batched view was released


def test_decode_and_image_operators_match_pil_and_numpy():
    imgs = images()
    df = rill.from_numpy({"bytes": [png(a) for a in imgs], "label": np.arange(5) % 3})
    dec = df.decode("img", "bytes")
    assert df.field(dec).dtype == "uint8" and df.field(dec).shape == (-1, -1, 3)
    df.flip("flipped", "img", p=1.0)
    df.center_crop("crop", "img", 4)
    df.resize("small", "img", (3, 5))
    df.resize("short", "img", 4)
    df.normalize("x", "crop", mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3))
    df.one_hot("y", "label", 3)
    df.jitter("j", "crop", brightness=0.5)
    df.random_resized_crop("rrc", "bytes", (5, 5), scale=(0.5, 1.0))
    rows = list(df.iter(seed=1))
    for a, row in zip(imgs, rows):
        got = row["img"].to_pylist()[0]
        np.testing.assert_array_equal(got, np.asarray(Image.open(io.BytesIO(png(a)))))
        np.testing.assert_array_equal(row["flipped"].to_pylist()[0], a[:, ::-1])
        h, w = a.shape[:2]
        top, left = (h - 4) // 2, (w - 4) // 2
        crop = a[top:top + 4, left:left + 4] if h >= 4 and w >= 4 else None
        if crop is not None:
            np.testing.assert_array_equal(row["crop"].to_numpy()[0], crop)
            ref = ((crop / 255.0 - np.array([0.5, 0.4, 0.3])) / np.array([0.2, 0.25, 0.3])).transpose(2, 0, 1)
            np.testing.assert_allclose(row["x"].to_numpy()[0], ref, atol=1e-5)
        assert row["small"].to_numpy().shape == (1, 3, 5, 3)
        assert min(row["short"].to_pylist()[0].shape[:2]) == 4
        assert row["rrc"].to_numpy().shape == (1, 5, 5, 3)
        assert row["j"].to_numpy().shape == (1, 4, 4, 3)
    labels = np.arange(5) % 3
    np.testing.assert_array_equal(np.concatenate([r["y"].to_numpy() for r in rows]), np.eye(3, dtype=np.float32)[labels])
    again = [r["rrc"].to_numpy() for r in df.iter(seed=1, columns=["rrc"], threads=2)]
    np.testing.assert_array_equal(np.concatenate(again), np.concatenate([r["rrc"].to_numpy() for r in rows]))


@pytest.mark.skipif(not rill.has_feature("webp"), reason="rill built without libwebp")
def test_webp_decodes_and_fused_operators_match_png_and_pil(tmp_path):
    # lossless WebP holds a PNG's pixels exactly: every operator gives the same bytes from
    # either; a lossy one decodes to libwebp's pixels, which PIL shows too
    rng = np.random.default_rng(3)
    y, x = np.mgrid[0:45, 0:67]
    photo = np.stack([x * 3 + y, x * y // 9, 128 + 90 * np.sin(x / 5.0)], -1).astype(np.uint8)
    imgs = images() + [photo, rng.integers(0, 256, (33, 41, 3), dtype=np.uint8)]
    rgba = np.concatenate([photo, (1 + (x * 5 + y * 3) % 255).astype(np.uint8)[..., None]], -1)
    outputs = {}
    for name, encode in (("png", png), ("webp", lambda a: webp(a, lossless=True, exact=True))):
        df = rill.from_numpy({"bytes": [encode(a) for a in imgs]})
        df.decode("img", "bytes")
        df.random_resized_crop("rrc", "bytes", (9, 7), scale=(0.2, 1.0))
        df.resize("small", "bytes", (5, 6))
        df.random_resized_crop("rrc2", "bytes", 8)
        df.normalize("x", "rrc2", mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3), flip=0.5)
        outputs[name] = [{c: r[c].to_numpy() if c != "img" else np.asarray(r[c].to_pylist()[0], np.uint8)
                          for c in ("img", "rrc", "small", "x")} for e in range(2) for r in df.iter(seed=4, epoch=e)]
    assert len(outputs["png"]) == len(outputs["webp"]) == 2 * len(imgs)
    for a, b in zip(outputs["png"], outputs["webp"]):
        for c in a:
            np.testing.assert_array_equal(a[c], b[c], err_msg=c)
    for a, got in zip(imgs, outputs["webp"][:len(imgs)]):
        np.testing.assert_array_equal(got["img"], a)
    lossy = [webp(a, quality=70) for a in imgs] + [webp(rgba, quality=70), webp(rgba, lossless=True, exact=True)]
    df = rill.from_numpy({"bytes": lossy})
    df.decode("rgb", "bytes")
    df.decode("rgba", "bytes", channels=4)
    rows = list(df.iter())
    assert len(rows) == len(lossy)
    for data, row in zip(lossy, rows):
        with Image.open(io.BytesIO(data)) as im:
            ref = np.asarray(im.convert("RGBA"))
        np.testing.assert_array_equal(np.asarray(row["rgba"].to_pylist()[0], np.uint8), ref)
        np.testing.assert_array_equal(np.asarray(row["rgb"].to_pylist()[0], np.uint8), ref[..., :3])
    np.testing.assert_array_equal(np.asarray(rows[-1]["rgba"].to_pylist()[0], np.uint8), rgba)
    # a damaged file names its row; an animation is refused; a folder lists .webp files
    bad = rill.from_numpy({"path": ["ok.webp", "cut.webp"], "bytes": [lossy[0], lossy[5][: len(lossy[5]) - 40]]})
    bad.decode("img", "bytes")
    it = bad.iter()
    next(it)
    with pytest.raises(rill.FormatError, match=r"row 1, column 'img'.*cut\.webp.*corrupt WebP data \(truncated\)"):
        next(it)
    frames = [Image.fromarray(photo), Image.fromarray(photo[::-1].copy())]
    anim = io.BytesIO()
    frames[0].save(anim, format="WEBP", save_all=True, append_images=frames[1:], duration=50)
    moving = rill.from_numpy({"bytes": [anim.getvalue()]})
    moving.decode("img", "bytes")
    with pytest.raises(rill.NotSupportedError, match="row 0, column 'img'.*animated WebP is not supported"):
        list(moving.iter())
    (tmp_path / "cls").mkdir()
    (tmp_path / "cls" / "a.webp").write_bytes(lossy[0])
    (tmp_path / "cls" / "b.txt").write_bytes(b"x")
    assert pa.table(rill.from_image_folder(tmp_path)).column("path").to_pylist() == [str(tmp_path / "cls" / "a.webp")]


def test_image_pipeline_batched_jpeg_folder(tmp_path):
    for c in ("a", "b"):
        (tmp_path / c).mkdir()
        for i in range(3):
            (tmp_path / c / f"{i}.jpg").write_bytes(jpeg(images(1)[0]))
    files = rill.from_image_folder(tmp_path)
    s = files.shuffle(3)
    s.random_resized_crop("img", "bytes", 8)
    s.normalize("x", "img", mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), flip=0.5)
    b = s.batch(4, ["x", "label"])
    assert b.classes == ["a", "b"]
    out = list(b.iter(prefetch=2, threads=2))
    assert [r["x"].to_numpy().shape for r in out] == [(4, 3, 8, 8), (2, 3, 8, 8)]
    assert sorted(np.concatenate([r["label"].to_numpy() for r in out]).tolist()) == [0, 0, 0, 1, 1, 1]


def test_random_resized_crop_marks_bytes():
    # the memory for the JPEG entropy marks (and the baseline copies of progressive files)
    # changes the work per crop, never the pixels
    rng = np.random.default_rng(5)
    photos = [jpeg((rng.integers(0, 256, (120 + 16 * i, 160, 3)) // 32 * 32).astype(np.uint8), progressive=i % 2 == 1)
              for i in range(6)]
    assert b"\xff\xc2" in photos[1] and b"\xff\xc2" not in photos[0]
    crops = []
    for marks_bytes in (0, -1, 1 << 20):
        df = rill.from_numpy({"bytes": photos})
        df.random_resized_crop("img", "bytes", 24, scale=(0.1, 0.5), marks_bytes=marks_bytes)
        crops.append([np.concatenate([r["img"].to_numpy() for r in df.iter(seed=7, epoch=e)]) for e in range(3)])
    for other in crops[1:]:
        for a, b in zip(crops[0], other):
            np.testing.assert_array_equal(a, b)
    df = rill.from_numpy({"bytes": photos})
    with pytest.raises(TypeError):
        df.random_resized_crop("img", "bytes", 24, marks_bytes="1 GB")


@pytest.mark.parametrize("policy", ["raise", "skip", "null"])
def test_corrupt_image(policy):
    good = png(images(1)[0])
    corrupt = good[:40]  # truncated PNG
    df = rill.from_numpy({"path": ["good.png", "bad.png", "good2.png"], "bytes": [good, corrupt, good]})
    df.decode("img", "bytes", on_error=policy)
    it = df.iter(columns=["img"])
    if policy == "raise":
        assert next(it).index == 0
        with pytest.raises(rill.FormatError, match=r"row 1, column 'img'.*bad\.png") as info:
            next(it)
        assert info.value.row == 1 and info.value.column_name == "img"
        assert next(it).index == 2
    elif policy == "skip":
        assert [r.index for r in it] == [0, 2]
        assert it.stats()["skipped"] == 1
    else:
        assert df.field("img").nullable
        cells = [r["img"].to_pylist()[0] for r in it]
        assert cells[1] is None and cells[0] is not None
        assert it.stats()["nulled"] == 1


def damaged_jpeg():
    """A 320x240 photo-like JPEG with 96 1-bits (a Huffman code no table has) in the middle of
    its data, where libjpeg-turbo's fast path takes it for a zero without a warning (and, for
    this file, decodes the rest without one either)."""
    rng = np.random.default_rng(3)
    y, x = np.mgrid[0:240, 0:320]
    a = np.stack([(x + y) % 256, (3 * x) % 256, (2 * y) % 256], axis=2) + rng.integers(0, 40, (240, 320, 3))
    b = bytearray(jpeg(np.clip(a, 0, 255).astype(np.uint8), quality=75))
    sos = b.index(b"\xff\xda")
    start = sos + 2 + (b[sos + 2] << 8 | b[sos + 3])
    at = (start + len(b)) // 2
    while b[at - 1] == 0xFF or b[at] == 0xFF:
        at += 1
    b[at:at + 24] = b"\xff\x00" * 12
    assert len(b) - at > 6 * 512
    return bytes(b)


@pytest.mark.parametrize("op", ["decode", "crop", "crop_without_marks"])
def test_damaged_jpeg_data_fails_in_every_epoch(op):
    good = jpeg(images(1)[0])
    df = rill.from_numpy({"path": ["good.jpg", "bad.jpg", "good2.jpg"], "bytes": [good, damaged_jpeg(), good]})
    if op == "decode":
        df.decode("img", "bytes", on_error="skip")
    else:
        df.random_resized_crop("img", "bytes", 16, scale=(0.05, 0.1), on_error="skip",
                               marks_bytes=-1 if op == "crop_without_marks" else 0)
    it = df.iter(columns=["img"], threads=2)
    for epoch in range(3):  # the same verdict in every epoch, whatever the crop
        it.set_epoch(epoch)
        assert [r.index for r in it] == [0, 2]
        assert it.stats()["skipped"] == epoch + 1
    strict = rill.from_numpy({"path": ["bad.jpg"], "bytes": [damaged_jpeg()]})
    strict.decode("img", "bytes")
    with pytest.raises(rill.FormatError, match=r"row 0, column 'img'.*bad\.jpg: corrupt JPEG data "
                       r"\(Corrupt JPEG data: bad Huffman code, at MCU row \d+\)"):
        list(strict.iter())


def test_operator_argument_errors():
    df = rill.from_numpy({"b": [b"x"], "n": np.arange(1)})
    with pytest.raises(rill.InvalidArgumentError, match="unknown column 'nope'"):
        df.decode("img", "nope")
    with pytest.raises(rill.InvalidArgumentError, match="unknown on_error"):
        df.decode("img", "b", on_error="explode")
    with pytest.raises(rill.InvalidArgumentError):
        df.flip("f", "n")  # not an image column
    with pytest.raises(rill.InvalidArgumentError, match="size must be an int or a"):
        df.center_crop("c", "b", (1, 2, 3))
    with pytest.raises(rill.InvalidArgumentError, match="mean takes at most 4 values"):
        df.normalize("x", "b", mean=(0, 0, 0, 0, 0))


@pytest.mark.skipif(rill.cuda_device_count() > 0, reason="a CUDA device is present")
def test_cuda_operators_without_a_device():
    df = rill.from_numpy({"x": np.zeros((2, 4, 4, 3), np.uint8)})
    with pytest.raises(rill.NoDeviceError) as info:
        df.to_device("d", "x")
    assert isinstance(info.value, RuntimeError)
    msg = str(info.value)
    assert msg.startswith("no CUDA device") or msg == "rill was built without CUDA"
    assert info.value.code == rill.ENODEV
    with pytest.raises(rill.NoDeviceError, match="CUDA"):
        df.cuda_normalize("n", "x", mean=(0.5,) * 3, std=(0.5,) * 3)


class _TorchLikeStream:
    """What rill reads of a torch.cuda.Stream: its handle and its device's index."""
    cuda_stream = 0x1234

    class device:
        index = 0


@pytest.mark.skipif(rill.cuda_device_count() > 0, reason="a CUDA device is present")
def test_iter_consumer_stream_without_a_device():
    df = rill.from_numpy({"x": np.arange(6)})
    for stream in (0, 0x1234, _TorchLikeStream()):
        with pytest.raises(rill.NoDeviceError) as info:
            df.iter(stream=stream)
        msg = str(info.value)
        assert msg.startswith("no CUDA device") or msg == "rill was built without CUDA"
    # no stream: a host consumer, as before
    assert [r["x"][0] for r in df.iter(stream=None)] == list(range(6))


def test_iter_consumer_stream_must_name_a_cuda_stream():
    df = rill.from_numpy({"x": np.arange(3)})
    for bad in ("cuda", 1.5, object(), -3):
        with pytest.raises(TypeError, match=r"^stream must be a CUDA stream: an int \(cudaStream_t\) or an "
                                            r"object with __cuda_stream__"):
            df.iter(stream=bad)
