"""The rill Python package feeding PyTorch on a GPU (run by `make gpu-check` when `rill` and
`torch` import). Checks, each against a numpy reference computed on the host:

1. to_device + cuda_normalize batches reach torch through DLPack on cuda:0 without a copy
   (the tensor's pointer is the array's) and hold the right values (each image plain or
   mirrored).
2. A consumer slower than the pipeline, on the default stream and on a stream of its own
   given to iter(stream=...): each batch is read by kernels queued behind a long GPU sleep,
   and the batch is dropped at once (as a training loop drops its inputs). rill must not hand
   that device memory to a later batch before the queued kernels read it: every sum must
   match the reference.
3. Taking a batch does not wait for the consumer's queued work (no host synchronisation):
   when next() returns a batch, the step queued for the batch before is still running on the
   GPU for most batches (the host runs ahead by the prefetch depth; it is held back only by
   the memory of batches the GPU has not finished reading).
4. rill.torch.Loader(device="cuda") gives the same batches as the host loader, also when its
   consumer is slow (the same check as 2 through the loader).
Prints "torch_rill: N passed, N failed"; exits 1 on a failure.
"""
import sys
import time

import numpy as np
from gpu_checks import Checks
import rill
import rill.torch
import torch

check = Checks()


MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def reference(images):
    ref = (images.astype(np.float32) / 255.0 - np.array(MEAN, np.float32)) / np.array(STD, np.float32)
    return ref.transpose(0, 3, 1, 2)  # NCHW


def pipeline(images, b, flip, inflight=0):
    df = rill.from_numpy(img=images)
    bdf = df.batch(b, ["img"], pinned=True)
    bdf.to_device("dev", "img", inflight=inflight)
    bdf.cuda_normalize("x", "dev", mean=MEAN, std=STD, flip=flip)
    return df, bdf


def cycles_per_ms():
    """GPU clock cycles a millisecond (torch.cuda._sleep spins for cycles)."""
    torch.cuda._sleep(100_000_000)  # the clock rises from idle first
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    return 10_000_000 / start.elapsed_time(end)


def zero_copy_values():
    n, h, w, b = 40, 20, 12, 16
    images = np.random.default_rng(5).integers(0, 256, size=(n, h, w, 3), dtype=np.uint8)
    ref = reference(images)
    _df, bdf = pipeline(images, b, flip=0.5)
    seen, kept = 0, []
    for row in bdf.iter(["x"], prefetch=2, threads=2, seed=11):
        a = row["x"]
        t = torch.from_dlpack(a)
        check(t.is_cuda and t.device.index == 0, f"tensor on {t.device}, not cuda:0")
        check(t.data_ptr() == a.__cuda_array_interface__["data"][0], "from_dlpack copied the batch")
        check(tuple(t.shape) == (len(a), 3, h, w) and t.dtype == torch.float32,
              f"shape {tuple(t.shape)} dtype {t.dtype}")
        got = t.cpu().numpy()
        first = row.index * b
        for i in range(len(a)):
            ok = (np.allclose(got[i], ref[first + i], atol=2e-6)
                  or np.allclose(got[i], ref[first + i][:, :, ::-1], atol=2e-6))
            check(ok, f"image {first + i} matches neither reference")
        kept.append((t, got.copy()))
        seen += len(a)
    check(seen == n, f"{seen} images of {n}")
    for t, expect in kept:
        check(np.array_equal(t.cpu().numpy(), expect), "a kept batch changed after the iterator moved on")


def run_slow(tensors, b, cyc_ms):
    """Queues a 30 ms GPU sleep and then a read of each batch (its per-image sums) on the
    current stream, dropping the batch at once. Returns the sums, how many batches were taken
    while the step before was still running, and the host's and the GPU's times."""
    sums, ahead, step_done = [], 0, None
    t0 = time.perf_counter()
    for t in tensors:
        if step_done is not None:
            ahead += not step_done.query()                 # the host did not wait for the step
        torch.cuda._sleep(int(30 * cyc_ms))              # a long step before the batch is read
        sums.append(t.reshape(b, -1).double().sum(dim=1))
        step_done = torch.cuda.Event()
        step_done.record()
        del t                                              # the loop lets go of its input
    queued = time.perf_counter() - t0
    torch.cuda.synchronize()
    return torch.stack(sums).cpu().numpy(), ahead, queued, time.perf_counter() - t0


def judge(where, got, want, ahead, queued, total):
    bad = [i for i in range(len(want)) if not np.allclose(got[i], want[i], rtol=1e-5)]
    check(not bad, f"{where}: batches {bad} were overwritten before the queued kernels read them "
                   f"(rill reused their device memory too early)")
    steps = len(want) - 1
    check(ahead >= steps // 2, f"{where}: only {ahead} of {steps} batches were handed over while the "
                               f"step before was running: next() waited for the GPU")
    print(f"   {where}: {ahead} of {steps} batches taken while the previous step ran; handed over "
          f"in {queued * 1e3:.1f} ms, GPU done after {total * 1e3:.1f} ms")


def slow_consumer(cyc_ms, use_stream):
    """Check 2 (and 3) through DataFrame.iter(stream=...)."""
    n, h, w, b = 24 * 8, 64, 64, 8
    images = np.random.default_rng(7).integers(0, 256, size=(n, h, w, 3), dtype=np.uint8)
    want = reference(images).reshape(n // b, b, -1).astype(np.float64).sum(axis=2)
    _df, bdf = pipeline(images, b, flip=0.0, inflight=2)
    stream = torch.cuda.Stream() if use_stream else torch.cuda.current_stream()
    with torch.cuda.stream(stream):
        it = bdf.iter(["x"], prefetch=2, threads=2, stream=stream)
        got, ahead, queued, total = run_slow((torch.from_dlpack(row["x"]) for row in it), b, cyc_ms)
    judge("consumer on " + ("its own stream" if use_stream else "the current stream"), got, want, ahead,
          queued, total)


def loader_on_cuda():
    n, h, w = 48, 16, 16
    rng = np.random.default_rng(3)
    images = rng.integers(0, 256, size=(n, h, w, 3), dtype=np.uint8)
    labels = np.arange(n, dtype=np.int64)
    host = rill.torch.Loader(rill.from_numpy(img=images, label=labels), batch_size=16, shuffle=True,
                             seed=4)
    dev = rill.torch.Loader(rill.from_numpy(img=images, label=labels), batch_size=16, shuffle=True,
                            seed=4, device="cuda")
    nb = 0
    for a, g in zip(host, dev):
        nb += 1
        for k in ("img", "label"):
            check(g[k].is_cuda, f"Loader(device='cuda') gave {k} on {g[k].device}")
            check(torch.equal(a[k], g[k].cpu()), f"Loader batch {nb} column {k} differs from the host's")
    check(nb == 3, f"{nb} batches of 3")


def loader_slow_consumer(cyc_ms):
    n, h, w, b = 16 * 8, 64, 64, 8
    images = np.random.default_rng(9).integers(0, 256, size=(n, h, w, 3), dtype=np.uint8)
    want = images.reshape(n // b, b, -1).astype(np.float64).sum(axis=2)
    loader = rill.torch.Loader(rill.from_numpy(img=images), batch_size=b, device="cuda", threads=2)
    got, ahead, queued, total = run_slow((batch["img"] for batch in loader), b, cyc_ms)
    judge("Loader(device='cuda')", got, want, ahead, queued, total)


def main():
    if not rill.has_feature("cuda") or rill.cuda_device_count() == 0:
        print("torch_rill: skipped: rill sees no CUDA device")
        return 0
    if not torch.cuda.is_available():
        print("torch_rill: skipped: torch sees no CUDA device")
        return 0
    cyc = cycles_per_ms()
    for name, fn in (("zero_copy_values", zero_copy_values),
                     ("slow_consumer(current stream)", lambda: slow_consumer(cyc, False)),
                     ("slow_consumer(own stream)", lambda: slow_consumer(cyc, True)),
                     ("loader_on_cuda", loader_on_cuda),
                     ("loader_slow_consumer", lambda: loader_slow_consumer(cyc))):
        try:
            fn()
        except Exception as e:  # a failure of one check must not hide the others
            check(False, f"{name} raised {type(e).__name__}: {e}")
    torch.cuda.synchronize()
    return check.summary("torch_rill")


if __name__ == "__main__":
    sys.exit(main())
