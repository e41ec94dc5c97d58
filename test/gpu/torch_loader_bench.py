"""Images/s into a GPU training loop on a many-core machine (run by `make gpu-bench` when torch
and the rill package import): rill against torch's DataLoader with torchvision, same corpus,
same machine, same run, printed as ratios.

Every loader gives float32 [256, 3, 224, 224] batches on cuda:0 of random resized crops of
224, flipped with probability 0.5 and normalized with ImageNet's mean and std:

  rill, host normalize     rill.torch.Loader(device="cuda") over decode -> random resized
                           crop -> normalize (CPU) -> batch; to_device copies the float32
                           batches (the README's quick start with device="cuda")
  rill, GPU normalize      uint8 batches (pinned) -> to_device -> cuda_normalize, iterated on
                           torch's current stream (a quarter of the bytes cross the bus)
  DataLoader + torchvision DataLoader(num_workers=W, pin_memory=True) over ImageFolder with
                           RandomResizedCrop, RandomHorizontalFlip, ToTensor, Normalize (PIL),
                           then .cuda(non_blocking=True)

W worker threads (rill) or processes (DataLoader): the cores less one by default. Each loader
runs `epochs` passes; the best pass after the first is reported (the first is rill's walk
over files it has not seen, and the page cache filling).

usage: python3 torch_loader_bench.py CORPUS [--workers W] [--epochs 3]
"""
import argparse
import importlib.util
import os
import sys
import time

import torch

import rill
import rill.torch

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
BATCH = 256


def timed_passes(epochs, one_pass):
    """[(images, seconds)] of `epochs` calls of one_pass(epoch), the GPU synchronised at each end."""
    out = []
    for e in range(epochs):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        n = one_pass(e)
        torch.cuda.synchronize()
        out.append((n, time.perf_counter() - t0))
    return out


def consume(x):
    """What the training step needs of a batch here: that it is on the GPU, as expected."""
    assert x.is_cuda and x.dtype == torch.float32 and tuple(x.shape[1:]) == (3, 224, 224), (x.device, x.shape)
    return x.shape[0]


def rill_host_normalize(corpus, workers, epochs):
    files = rill.from_image_folder(corpus)
    view = files.shuffle(42)
    img = view.random_resized_crop("img", "bytes", 224, on_error="skip")
    view.normalize("x", img, mean=MEAN, std=STD, flip=0.5, dtype="float32", layout="chw")
    loader = rill.torch.Loader(view, batch_size=BATCH, columns=["x", "label"], output="tuple",
                               threads=workers, prefetch=4, device="cuda", seed=1)

    def one_pass(e):
        loader.set_epoch(e)
        return sum(consume(x) for x, _y in loader)

    try:
        return timed_passes(epochs, one_pass)
    finally:
        loader.close()


def rill_gpu_normalize(corpus, workers, epochs):
    files = rill.from_image_folder(corpus)
    view = files.shuffle(42)
    view.random_resized_crop("img", "bytes", 224, on_error="skip")
    bdf = view.batch(BATCH, ["img", "label"], pinned=True)
    bdf.to_device("dev", "img")
    bdf.cuda_normalize("x", "dev", mean=MEAN, std=STD, flip=0.5)
    stream = torch.cuda.current_stream()
    it = bdf.iter(["x"], prefetch=4, threads=workers, seed=1, stream=stream, next_epoch=True)

    def one_pass(e):
        it.set_epoch(e)
        return sum(consume(torch.from_dlpack(row["x"])) for row in it)

    try:
        return timed_passes(epochs, one_pass)
    finally:
        it.close()


def dataloader(corpus, workers, epochs):
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms
    tf = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize(MEAN, STD),
    ])
    ds = datasets.ImageFolder(corpus, transform=tf)
    torch.manual_seed(1)
    loader = DataLoader(ds, batch_size=BATCH, shuffle=True, num_workers=workers, pin_memory=True,
                        persistent_workers=True, prefetch_factor=4)

    def one_pass(e):
        n = 0
        for x, y in loader:
            n += consume(x.cuda(non_blocking=True))
            y.cuda(non_blocking=True)
        return n

    return timed_passes(epochs, one_pass)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    ap.add_argument("--epochs", type=int, default=3)
    a = ap.parse_args()
    if not torch.cuda.is_available() or rill.cuda_device_count() == 0:
        print("torch_loader_bench: skipped: no CUDA device")
        return 0
    print(f"torch_loader_bench: {torch.cuda.get_device_name(0)}, {os.cpu_count()} cores, "
          f"{a.workers} workers, corpus {a.corpus}, {a.epochs} passes each")
    runs = [("rill.torch.Loader, host normalize", rill_host_normalize),
            ("rill, GPU normalize (cuda_normalize)", rill_gpu_normalize)]
    if importlib.util.find_spec("torchvision") is not None:
        runs.append(("DataLoader + torchvision", dataloader))
    else:
        print("   DataLoader + torchvision: skipped: torchvision cannot be imported")
    rates = {}
    for name, fn in runs:
        try:
            passes = fn(a.corpus, a.workers, a.epochs)
        except Exception as e:  # one loader failing must not hide the others
            print(f"   {name}: failed: {type(e).__name__}: {e}")
            continue
        later = passes[1:] or passes
        n, t = max(later, key=lambda p: p[0] / p[1])
        rates[name] = n / t
        print(f"   {name:40s} {n / t:9.0f} img/s   (passes: " +
              ", ".join(f"{pn / pt:.0f}" for pn, pt in passes) + ")", flush=True)
    peer = rates.get("DataLoader + torchvision")
    if peer:
        for name, r in rates.items():
            if name != "DataLoader + torchvision":
                print(f"   {name} / DataLoader + torchvision: {r / peer:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
