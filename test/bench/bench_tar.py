"""Tar shards (WebDataset layout) read by rill.from_tar against WebDataset, in the same run.

The ImageFolder corpus is written once into shards under $TMPDIR (samples in a fixed random
order, each sample KEY.cls (its label as text) and KEY.jpg, members sorted by name), then:

1. Opening: rill.from_tar indexing every shard against Python's tarfile listing their
   members (tarfile.open + getmembers: headers read, data skipped), and rill.from_tar with
   saved indexes (index_dir); with TAR_COLD=1 (root: the page cache is dropped before each
   open) also both rill opens from a cold page cache. WebDataset keeps no index: it reads
   the shards in sequence.
2. Reading the bytes of every sample: rill shuffled over all shards on 2 worker threads
   (rows of the "jpg" and "cls" columns) against WebDataset's sequential pass (samples of raw
   bytes, one process), MB/s.
3. The training pipeline: shards -> shuffle -> random resized crop 224 -> flip -> normalize
   float32 CHW -> batch 256 with 2 threads: rill from the shards, rill from the ImageFolder
   (the same images), and WebDataset (shuffle buffer 1,000, PIL decode, torchvision
   transforms) in a torch DataLoader with 2 workers; best of two epochs each.

usage: python bench_tar.py CORPUS [--shards 8] [--epochs 2]
Prints "key value" lines, then the ratios. WebDataset missing: its lines are skipped with a
message.
"""
import argparse
import glob
import io
import os
import random
import shutil
import sys
import tarfile
import tempfile
import time

import rill

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
BATCH = 256
SIZE = 224


def report(key, value, fmt="{:.1f}"):
    print(f"{key} {fmt.format(value)}", flush=True)
    return value


def write_shards(corpus, out, nshards):
    """The corpus as nshards tar files in `out`; returns (paths, samples, bytes of jpg)."""
    classes = sorted(d for d in os.listdir(corpus) if os.path.isdir(os.path.join(corpus, d)))
    items = []
    for label, c in enumerate(classes):
        for p in sorted(glob.glob(os.path.join(corpus, c, "*.jp*g"))):
            items.append((p, label))
    random.Random(7).shuffle(items)
    paths, total = [], 0
    per = (len(items) + nshards - 1) // nshards
    for s in range(nshards):
        path = os.path.join(out, f"shard-{s:04d}.tar")
        with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as t:
            for k, (p, label) in enumerate(items[s * per:(s + 1) * per]):
                key = f"{s:04d}{k:06d}"
                for ext, data in (("cls", f"{label}\n".encode()), ("jpg", open(p, "rb").read())):
                    info = tarfile.TarInfo(f"{key}.{ext}")
                    info.size = len(data)
                    info.mtime = 1700000000
                    t.addfile(info, io.BytesIO(data))
                    if ext == "jpg":
                        total += len(data)
        paths.append(path)
    return paths, len(items), total


def best_of(epochs, run):
    best = float("inf")
    for e in range(epochs):
        t0 = time.perf_counter()
        run(e)
        best = min(best, time.perf_counter() - t0)
    return best


def bench_open(paths, epochs, index_dir=None):
    def rill_open(e):
        df = rill.from_tar(paths, dtypes={"cls": "int64"}, index_dir=index_dir)
        assert len(df) > 0

    def tarfile_open(e):
        n = 0
        for p in paths:
            with tarfile.open(p) as t:
                n += len(t.getmembers())
        assert n > 0

    if index_dir is not None:
        rill_open(0)  # saves the indexes
        return best_of(epochs + 1, rill_open), None
    return best_of(epochs + 1, rill_open), best_of(epochs + 1, tarfile_open)


def bench_open_cold(paths, index_dir, runs=2):
    """rill.from_tar from a cold page cache (caches dropped before each open; root only), without
    and with saved indexes: the best of `runs` each, or None where caches cannot be dropped."""
    if not os.access("/proc/sys/vm/drop_caches", os.W_OK):
        return None

    def cold(d):
        best = float("inf")
        for _ in range(runs):
            os.sync()
            with open("/proc/sys/vm/drop_caches", "w") as f:
                f.write("3\n")
            t0 = time.perf_counter()
            assert len(rill.from_tar(paths, dtypes={"cls": "int64"}, index_dir=d)) > 0
            best = min(best, time.perf_counter() - t0)
        return best

    return cold(None), cold(index_dir)


def bench_read(paths, samples, epochs):
    df = rill.from_tar(paths, dtypes={"cls": "int64"})
    it = df.shuffle(3).iter(columns=["jpg", "cls"], threads=2, seed=1)

    def rill_read(e):
        it.set_epoch(e)
        n = 0
        for row in it:
            n += 1
        assert n == samples, n

    r = best_of(epochs, rill_read)
    it.close()
    try:
        import webdataset as wds
    except ImportError as ex:
        print(f"webdataset: not installed ({ex}); skipped")
        return r, None

    def wds_read(e):
        n = 0
        for sample in wds.WebDataset(paths, shardshuffle=False, empty_check=False):
            assert len(sample["jpg"]) > 0
            n += 1
        assert n == samples, n

    return r, best_of(epochs, wds_read)


def rill_pipeline(files, column):
    view = files.shuffle(42)
    img = view.random_resized_crop("img", column, SIZE, on_error="skip")
    x = view.normalize("x", img, mean=MEAN, std=STD, flip=0.5, dtype="float32", layout="chw")
    return view.batch(BATCH, [x, "cls" if column == "jpg" else "label"])


def bench_pipelines(corpus, paths, samples, epochs):
    out = {}
    for name, files, column in (("tar", rill.from_tar(paths, dtypes={"cls": "int64"}), "jpg"),
                                ("folder", rill.from_image_folder(corpus), "bytes")):
        it = rill_pipeline(files, column).iter(prefetch=4, threads=2, seed=1)

        def run(e):
            it.set_epoch(e)
            n = 0
            for row in it:
                n += len(row[0])
            assert n == samples, n

        out[name] = samples / best_of(epochs, run)
        it.close()
    try:
        import torch
        import webdataset as wds
        from torchvision import transforms
    except ImportError as ex:
        print(f"webdataset pipeline: cannot import ({ex}); skipped")
        return out
    tf = transforms.Compose([
        transforms.RandomResizedCrop(SIZE),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(MEAN, STD),
    ])
    ds = (wds.WebDataset(paths, shardshuffle=len(paths), empty_check=False).shuffle(1000).decode("pil")
          .to_tuple("jpg", "cls").map_tuple(tf, lambda c: int(c)))
    torch.manual_seed(1)
    loader = torch.utils.data.DataLoader(ds, batch_size=BATCH, num_workers=2)

    def run(e):
        n = 0
        for x, y in loader:
            assert x.shape[1:] == (3, SIZE, SIZE)
            n += x.shape[0]
        assert n == samples, n

    out["webdataset"] = samples / best_of(epochs, run)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("--shards", type=int, default=8)
    ap.add_argument("--epochs", type=int, default=2)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="rill-bench-tar-")
    try:
        paths, samples, total = write_shards(a.corpus, tmp, a.shards)
        report("tar_samples", samples, "{:d}")
        report("tar_jpg_mb", total / 1e6)
        ro, to = bench_open(paths, a.epochs)
        report("tar_open_ms_rill", ro * 1e3)
        report("tar_open_ms_tarfile", to * 1e3)
        idx = os.path.join(tmp, "index")
        os.mkdir(idx)
        rs, _ = bench_open(paths, a.epochs, idx)
        report("tar_open_ms_rill_saved_index", rs * 1e3)
        cold = bench_open_cold(paths, idx) if os.environ.get("TAR_COLD") == "1" else None
        if cold:
            report("tar_open_cold_ms_rill", cold[0] * 1e3)
            report("tar_open_cold_ms_rill_saved_index", cold[1] * 1e3)
        rr, wr = bench_read(paths, samples, a.epochs)
        report("tar_read_mb_s_rill_2t_shuffled", total / rr / 1e6)
        if wr:
            report("tar_read_mb_s_webdataset_sequential", total / wr / 1e6)
        p = bench_pipelines(a.corpus, paths, samples, a.epochs)
        for k, v in p.items():
            report(f"tar_pipeline_img_s_{k}", v)
        print("ratios:")
        print(f"  open: rill {to / ro:.2f}x tarfile's listing; with saved indexes {ro / rs:.2f}x rill without them")
        if cold:
            print(f"  open from a cold page cache: with saved indexes {cold[0] / cold[1]:.2f}x without them")
        elif os.environ.get("TAR_COLD") != "1":
            print("  open from a cold page cache: not measured (TAR_COLD=1 drops the page cache, as root)")
        else:
            print("  open from a cold page cache: skipped (the page cache cannot be dropped: not root)")
        if wr:
            print(f"  read: rill (shuffled, 2 threads) {wr / rr:.2f}x WebDataset (sequential, 1 process)")
        print(f"  pipeline: rill from shards {p['tar'] / p['folder']:.2f}x rill from the folder")
        if "webdataset" in p:
            print(f"  pipeline: rill from shards {p['tar'] / p['webdataset']:.2f}x WebDataset + torchvision "
                  f"(DataLoader, 2 workers)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
