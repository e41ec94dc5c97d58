"""The Python path of rill (the rill._rill extension and rill.torch.Loader) against the C path
and the Python peers, measured in the same run.

1. Image pipeline (as bench_pipeline.c): image folder -> shuffle -> random resized crop 224
   -> normalize with flip 0.5, float32 CHW -> batch 256, 2 worker threads, prefetch 4; best of
   two epochs (the first warms the page cache). Iterated from Python through the extension
   (rows of rill arrays) and through rill.torch.Loader (torch tensors over DLPack), against
   build/bench/bench_pipeline (C) in img/s. Goal: Python >= 0.95x C.
2. Per-batch overhead: a trivial in-memory batched pipeline (int64 column, batches of 64),
   time per `next` from Python against build/bench/bench_next (C). Goal: <= 20 us more.
3. Peers over the same corpus: torch DataLoader(num_workers=2) + torchvision + PIL
   (bench_pipeline.py, run with the system Python), and when they can be imported NVIDIA DALI
   (CPU pipeline: random crop at decode, resize, mirror and normalize), tf.data
   (decode_and_crop_jpeg, resize, flip, normalize) and SPDL (decode and resize only); each is
   skipped with a message otherwise.

usage: python bench_python.py CORPUS BUILD_DIR [--epochs 2] [--skip-peers]
Prints "key value" lines, then the ratios.
"""
import argparse
import glob
import os
import subprocess
import sys
import time

import numpy as np

import rill

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
BATCH = 256
SIZE = 224
HERE = os.path.dirname(os.path.abspath(__file__))


def key_values(text):
    """{key: float} of the "key value" lines of a benchmark's output."""
    out = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                out[parts[0]] = float(parts[1])
            except ValueError:
                pass
    return out


def report(key, value, fmt="{:.1f}"):
    """Prints one "key value" line and returns the value."""
    print(f"{key} {fmt.format(value)}", flush=True)
    return value


# ------------------------------------------------------------------ image pipeline

def rill_pipeline(corpus, threads=2):
    """The pipeline of bench_pipeline.c, built from Python; returns the batched dataframe."""
    files = rill.from_image_folder(corpus)
    view = files.shuffle(42)
    img = view.random_resized_crop("img", "bytes", SIZE, on_error="skip")
    x = view.normalize("x", img, mean=MEAN, std=STD, flip=0.5, dtype="float32", layout="chw")
    return view.batch(BATCH, [x, "label"])


def best_rate(epochs, run_epoch):
    """Best images/s over `epochs` passes of run_epoch(epoch) -> images: (per wall-clock
    second, per CPU-second of this process's threads)."""
    best = best_cpu = 0.0
    for e in range(epochs):
        t0, c0 = time.perf_counter(), time.process_time()
        n = run_epoch(e)
        best = max(best, n / (time.perf_counter() - t0))
        cpu = time.process_time() - c0
        if cpu > 0:
            best_cpu = max(best_cpu, n / cpu)
    return best, best_cpu


def bench_rill_extension(corpus, epochs):
    """(img/s, img/s per CPU-second) iterating rows of rill arrays (what a framework-free
    loop sees)."""
    batches = rill_pipeline(corpus)
    it = batches.iter(prefetch=4, threads=2, seed=1)

    def run(e):
        it.set_epoch(e)
        n = 0
        for row in it:
            n += len(row)
        return n

    rate = best_rate(epochs, run)
    it.close()
    return rate


def bench_rill_torch(corpus, epochs):
    """(img/s, img/s per CPU-second) through rill.torch.Loader (tensors made with DLPack)."""
    from rill.torch import Loader
    loader = Loader(rill_pipeline(corpus), output="tuple", prefetch=4, threads=2, seed=1)

    def run(e):
        loader.set_epoch(e)
        n = 0
        for x, y in loader:
            n += x.shape[0]
        return n

    rate = best_rate(epochs, run)
    loader.close()
    return rate


# ------------------------------------------------------------------ per-batch overhead

def ns_per_next(it, seconds=0.5):
    """ns per `next` over at least `seconds`, after one warm-up pass."""
    for _ in it:
        pass
    nexts, epoch = 0, 1
    t0 = time.perf_counter()
    while True:
        it.set_epoch(epoch)
        epoch += 1
        for row in it:
            nexts += 1
        t = time.perf_counter() - t0
        if t >= seconds:
            return t * 1e9 / nexts


def bench_next(rows=65536, batch=64):
    """Python ns per next on the pipeline of bench_next.c, and through rill.torch.Loader."""
    out = {}
    values = np.arange(rows, dtype=np.int64)
    for name, threads, prefetch in (("inline", rill.THREADS_NONE, rill.PREFETCH_NONE),
                                    ("2threads", 2, 0)):
        df = rill.from_numpy({"v": values})
        with df.batch(batch).iter(threads=threads, prefetch=prefetch) as it:
            out[name] = ns_per_next(it)
    # rows one by one (an unbatched dataframe), against a Python generator chain over as many
    # values: what a loop over rows costs from Python
    df = rill.from_numpy({"v": values})
    with df.iter(threads=rill.THREADS_NONE) as it:
        out["rows"] = ns_per_next(it)

    def gen_pass():
        n, t0 = 0, time.perf_counter()
        for _ in (v + 1 for v in (i for i in range(rows))):
            n += 1
        return (time.perf_counter() - t0) * 1e9 / n

    gen_pass()
    out["generator"] = min(gen_pass() for _ in range(3))
    try:
        from rill.torch import Loader
    except ImportError:
        return out, None
    df = rill.from_numpy({"v": values})
    loader = Loader(df.batch(batch), output="tuple", threads=rill.THREADS_NONE,
                               prefetch=rill.PREFETCH_NONE)
    for _ in loader:
        pass
    nexts, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.5:
        for (v,) in loader:
            nexts += 1
    loader_ns = (time.perf_counter() - t0) * 1e9 / nexts
    loader.close()
    return out, loader_ns


# ------------------------------------------------------------------ optional peers

def jpeg_files(corpus):
    """(paths, labels) of the ImageFolder corpus, classes sorted by name."""
    classes = sorted(d for d in os.listdir(corpus) if os.path.isdir(os.path.join(corpus, d)))
    paths, labels = [], []
    for k, c in enumerate(classes):
        for p in sorted(glob.glob(os.path.join(corpus, c, "*.jp*g"))):
            paths.append(p)
            labels.append(k)
    return paths, labels


def peer_dali(corpus, epochs):
    """NVIDIA DALI CPU pipeline (device_id=None): readers.file -> decoders.image_random_crop
    -> resize 224 -> crop_mirror_normalize (flip 0.5, CHW float32), 2 threads."""
    from nvidia.dali import fn, pipeline_def, types

    @pipeline_def(batch_size=BATCH, num_threads=2, device_id=None, prefetch_queue_depth=2)
    def pipe():
        jpegs, labels = fn.readers.file(file_root=str(corpus), random_shuffle=True,
                                        name="reader")
        images = fn.decoders.image_random_crop(jpegs, device="cpu", output_type=types.RGB)
        images = fn.resize(images, resize_x=SIZE, resize_y=SIZE)
        images = fn.crop_mirror_normalize(
            images, dtype=types.FLOAT, output_layout="CHW", mirror=fn.random.coin_flip(),
            mean=[m * 255 for m in MEAN], std=[s * 255 for s in STD])
        return images, labels

    p = pipe()
    p.build()
    size = p.epoch_size("reader")

    def run(e):
        n = 0
        while n < size:
            images, _ = p.run()
            n += len(images)
        return n

    return best_rate(epochs, run)[0]


def peer_tf(corpus, epochs):
    """tf.data: read files -> decode_and_crop_jpeg (random crop window) -> resize 224 ->
    flip -> normalize, parallel map on 2 threads, batch 256."""
    import tensorflow as tf
    tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.config.threading.set_intra_op_parallelism_threads(2)
    paths, labels = jpeg_files(corpus)
    mean = tf.constant(MEAN) * 255.0
    std = tf.constant(STD) * 255.0

    def load(path, label):
        data = tf.io.read_file(path)
        shape = tf.image.extract_jpeg_shape(data)
        whole = tf.constant([0.0, 0.0, 1.0, 1.0], dtype=tf.float32, shape=[1, 1, 4])
        box = tf.image.sample_distorted_bounding_box(
            shape, whole, area_range=(0.08, 1.0),
            aspect_ratio_range=(3 / 4, 4 / 3), use_image_if_no_bounding_boxes=True)
        y, x, _ = tf.unstack(box[0])
        h, w, _ = tf.unstack(box[1])
        img = tf.io.decode_and_crop_jpeg(data, tf.stack([y, x, h, w]), channels=3)
        img = tf.image.resize(img, (SIZE, SIZE))
        img = tf.image.random_flip_left_right(img)
        img = tf.transpose((img - mean) / std, (2, 0, 1))
        return img, label

    ds = (tf.data.Dataset.from_tensor_slices((paths, labels)).shuffle(len(paths))
          .map(load, num_parallel_calls=2).batch(BATCH).prefetch(2))

    def run(e):
        return sum(int(x.shape[0]) for x, _ in ds)

    return best_rate(epochs, run)[0]


def peer_spdl(corpus, epochs):
    """SPDL: a pipeline of image decodes (FFmpeg, 2 threads) resized to 224x224 and batched
    into float32 arrays: less work than the others (no random crop, flip or normalization)."""
    import spdl.io
    from spdl.pipeline import PipelineBuilder
    paths, _ = jpeg_files(corpus)

    def decode(path):
        packets = spdl.io.demux_image(path)
        frames = spdl.io.decode_packets(
            packets, filter_desc=spdl.io.get_video_filter_desc(
                scale_width=SIZE, scale_height=SIZE, pix_fmt="rgb24"))
        return frames

    def collate(frames):
        buffer = spdl.io.convert_frames(frames)
        arr = spdl.io.to_numpy(buffer).astype(np.float32)
        return arr

    def run(e):
        order = np.random.default_rng(e).permutation(len(paths))
        pipe = (PipelineBuilder().add_source([paths[i] for i in order])
                .pipe(decode, concurrency=2).aggregate(BATCH).pipe(collate)
                .add_sink(2).build(num_threads=2))
        n = 0
        with pipe.auto_stop():
            for batch in pipe.get_iterator():
                n += batch.shape[0]
        return n

    return best_rate(epochs, run)[0]


def optional_peer(name, module, fn, corpus, epochs):
    """Runs a peer when `module` imports; prints why it was skipped otherwise."""
    try:
        __import__(module)
    except Exception as e:  # not installed, or broken on this machine
        print(f"peer {name}: skipped ({module} cannot be imported: {type(e).__name__}: {e})")
        return None
    try:
        return report(f"peer_{name}", fn(corpus, epochs))
    except Exception as e:
        print(f"peer {name}: failed ({type(e).__name__}: {e})")
        return None


# ------------------------------------------------------------------ main

def main():
    """Runs every measurement and prints the ratios."""
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("build", help="build directory holding bench/bench_pipeline, bench/bench_next")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=2,
                    help="C and Python pipeline runs, interleaved (the best of each counts)")
    ap.add_argument("--skip-peers", action="store_true")
    args = ap.parse_args()

    print(f"rill {rill.__version__} from {os.path.dirname(rill.__file__)}")
    have_torch = True
    try:
        import torch
        del torch
    except ImportError:
        have_torch = False
        print("rill.torch: skipped (torch cannot be imported)")
    # the machine may be shared: interleave the C and Python runs and keep the best of each,
    # per wall-clock second and per CPU-second (which other work on the machine disturbs less)
    best = {}

    def keep(key, value):
        best[key] = max(best.get(key, 0.0), value)

    for _ in range(max(1, args.repeat)):
        c = key_values(subprocess.run([os.path.join(args.build, "bench", "bench_pipeline"),
                                       args.corpus, "0"], check=True, capture_output=True,
                                      text=True).stdout)
        keep("c_pipeline_2t", c.get("rill_pipeline_2t", 0.0))
        keep("c_pipeline_per_cpu_s_2t", c.get("rill_pipeline_per_cpu_s_2t", 0.0))
        wall, cpu = bench_rill_extension(args.corpus, args.epochs)
        keep("python_extension_2t", wall)
        keep("python_extension_per_cpu_s_2t", cpu)
        if have_torch:
            wall, cpu = bench_rill_torch(args.corpus, args.epochs)
            keep("python_rill_torch_2t", wall)
            keep("python_rill_torch_per_cpu_s_2t", cpu)
    for key, value in best.items():
        report(key, value)
    c_rate, ext = best["c_pipeline_2t"], best["python_extension_2t"]
    tor = best.get("python_rill_torch_2t")

    cn = key_values(subprocess.run([os.path.join(args.build, "bench", "bench_next")],
                                   check=True, capture_output=True, text=True).stdout)
    py_next, loader_ns = bench_next()
    for name in ("inline", "2threads"):
        report(f"c_next_ns_{name}", cn.get(f"c_next_ns_{name}", 0.0))
        report(f"python_next_ns_{name}", py_next[name])
    if loader_ns is not None:
        report("python_loader_next_ns_inline", loader_ns)
    report("python_row_ns", py_next["rows"])
    report("python_generator_ns", py_next["generator"])

    peers = {}
    if not args.skip_peers:
        if os.path.exists("/usr/bin/python3"):
            out = subprocess.run(["/usr/bin/python3", os.path.join(HERE, "bench_pipeline.py"),
                                  args.corpus, str(args.epochs)], capture_output=True, text=True)
            kv = key_values(out.stdout)
            if out.returncode == 0 and "dataloader_2w" in kv:
                peers["DataLoader(num_workers=2) + torchvision"] = report(
                    "peer_dataloader_2w", kv["dataloader_2w"])
            else:
                print("peer dataloader: skipped (/usr/bin/python3 lacks torch, torchvision or "
                      f"PIL: {out.stderr.strip().splitlines()[-1:] or ''})")
        for name, module, fn in (("dali_cpu", "nvidia.dali", peer_dali),
                                 ("tf_data", "tensorflow", peer_tf),
                                 ("spdl", "spdl.io", peer_spdl)):
            r = optional_peer(name, module, fn, args.corpus, args.epochs)
            if r is not None:
                peers[name] = r

    def q(a, b):
        return a / b if a and b else 0.0

    print("-- ratios")
    ccpu = best["c_pipeline_per_cpu_s_2t"]
    print(f"Python extension / C pipeline (2 threads):        {q(ext, c_rate):.3f}x "
          f"(per CPU s: {q(best['python_extension_per_cpu_s_2t'], ccpu):.3f}x; goal >= 0.95x)")
    if tor is not None:
        print(f"rill.torch.Loader / C pipeline (2 threads):       {q(tor, c_rate):.3f}x "
              f"(per CPU s: {q(best['python_rill_torch_per_cpu_s_2t'], ccpu):.3f}x; goal >= 0.95x)")
    for name in ("inline", "2threads"):
        over = (py_next[name] - cn.get(f"c_next_ns_{name}", 0.0)) / 1e3
        print(f"per-batch overhead of Python next ({name:8s}):   {over:.2f} us "
              f"({py_next[name] / 1e3:.2f} us vs C {cn.get(f'c_next_ns_{name}', 0.0) / 1e3:.2f} us;"
              " goal <= 20 us)")
    print(f"Python rows one by one (in-memory int64, no threads): {py_next['rows']:.0f} ns a row; "
          f"a generator chain (range -> +1) {py_next['generator']:.0f} ns a value "
          f"({q(py_next['rows'], py_next['generator']):.2f}x its time)")
    if loader_ns is not None:
        over = (loader_ns - cn.get("c_next_ns_inline", 0.0)) / 1e3
        print(f"per-batch overhead of rill.torch.Loader (inline): {over:.2f} us (goal <= 20 us)")
    ours = tor if tor is not None else ext
    for name, rate in peers.items():
        print(f"rill from Python / {name}: {q(ours, rate):.2f}x")


if __name__ == "__main__":
    sys.exit(main())
