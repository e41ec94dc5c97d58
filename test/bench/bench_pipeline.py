"""Peer of bench_pipeline.c: torch DataLoader (2 workers) with torchvision transforms and
PIL over the same ImageFolder corpus, batches of 256 float32 NCHW.

usage: python3 bench_pipeline.py CORPUS_DIR [epochs]
Prints "key value" lines (images/s of the best epoch)."""
import resource
import sys
import time

import torch
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


def cpu_seconds():
    """CPU time of this process and of its reaped children (the loader's workers)."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


def main():
    root = sys.argv[1]
    epochs = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    tf = transforms.Compose([
        transforms.RandomResizedCrop(224),
        transforms.RandomHorizontalFlip(),
        transforms.ToTensor(),
        transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]),
    ])
    ds = datasets.ImageFolder(root, transform=tf)
    torch.manual_seed(1)
    loader = DataLoader(ds, batch_size=256, shuffle=True, num_workers=2)
    best = 0.0
    best_cpu = 0.0
    for epoch in range(epochs):
        t0 = time.perf_counter()
        c0 = cpu_seconds()
        n = 0
        first = None
        for x, y in loader:
            if first is None:
                first = time.perf_counter() - t0
            assert x.shape[1:] == (3, 224, 224) and x.dtype == torch.float32
            n += x.shape[0]
        dt = time.perf_counter() - t0
        best = max(best, n / dt)
        del x, y
        time.sleep(0.5)  # workers exit at the end of the epoch; let them be reaped
        cpu = cpu_seconds() - c0
        if cpu > 0:
            best_cpu = max(best_cpu, n / cpu)
        if epoch == 0:
            print(f"dataloader_first_batch_ms {first * 1e3:.1f}")
    print(f"dataloader_images {n}")
    print(f"dataloader_2w {best:.1f}")
    print(f"dataloader_per_cpu_s {best_cpu:.1f}")


if __name__ == "__main__":
    main()
