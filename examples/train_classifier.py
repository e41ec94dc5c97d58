"""Trains a small CNN on an ImageFolder corpus with rill feeding PyTorch on the CPU.

    python3 examples/train_classifier.py [CORPUS] [--steps 300] [--batch 64] [--size 64]
                                         [--threads 2] [--checkpoint ckpt.pt] [--resume ckpt.pt]
                                         [--torch-threads 1]

The input pipeline is rill's: image folder -> shuffle -> random resized crop (decoding only
the crop) -> normalize with random horizontal flip, channels first -> batches, handed to the
training loop as torch tensors without a copy by rill.torch.Loader.

Halfway through (or at --checkpoint-at) the model, the optimizer and the loader's position
are saved mid-epoch to --checkpoint. At the end the run checks that resuming works: a fresh
pipeline, model and optimizer restored from the checkpoint must produce the same next
batches (and the same loss) as the original run did after that step. --resume starts a run
from such a checkpoint instead.
"""
import argparse
import os
import sys
import tempfile
import time

import torch
from torch import nn

import rill
import rill.torch

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
CHECK_BATCHES = 2  # batches compared after the checkpoint


def default_corpus():
    """build/data/corpus of this source tree (made by `make data`)."""
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "..", "build", "data", "corpus")


def make_loader(args):
    """The input pipeline over args.corpus and its loader (batches of (x, label))."""
    files = rill.from_image_folder(args.corpus)
    view = files.shuffle(args.seed)
    img = view.random_resized_crop("img", "bytes", args.size, scale=(0.25, 1.0))
    view.normalize("x", img, mean=MEAN, std=STD, flip=0.5, layout="chw")
    loader = rill.torch.Loader(view, batch_size=args.batch, columns=["x", "label"],
                               output="tuple", drop_last=True, seed=args.seed,
                               threads=args.threads, prefetch=args.prefetch)
    return loader, len(files.classes or [])


def make_model(classes):
    """A small convolutional classifier for any input size."""
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes))


def setup(args):
    """Loader, model and optimizer, all freshly made (deterministic for args.seed)."""
    torch.manual_seed(args.seed)
    loader, classes = make_loader(args)
    model = make_model(classes)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    return loader, model, opt


def train_step(model, opt, x, y):
    """One SGD step; returns the loss."""
    model.train()
    opt.zero_grad(set_to_none=True)
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def batches(loader, start_epoch):
    """The loader's batches over consecutive epochs (resuming a restored pass first)."""
    epoch = start_epoch
    while True:
        loader.set_epoch(epoch)
        yield from loader
        epoch += 1


def save(path, step, model, opt, loader):
    """Writes model, optimizer and loader position (mid-epoch) to path."""
    torch.save({"step": step, "model": model.state_dict(), "optimizer": opt.state_dict(),
                "loader": loader.state_dict()}, path)


def restore(path, model, opt, loader):
    """Loads a checkpoint written by save(); returns (step, epoch to continue)."""
    state = torch.load(path)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["optimizer"])
    loader.load_state_dict(state["loader"])
    return state["step"], state["loader"]["epoch"]


def train(args):
    """The training run; returns the batches and losses that followed the checkpoint."""
    loader, model, opt = setup(args)
    step, epoch = 0, 0
    if args.resume:
        step, epoch = restore(args.resume, model, opt, loader)
        print(f"resumed from {args.resume} at step {step} (epoch {epoch})")
    print(f"{len(loader)} batches of {args.batch} per epoch, images {args.size}x{args.size}, "
          f"{args.threads} rill threads, {torch.get_num_threads()} torch threads")
    after = []          # (x, y, loss) of the batches after the checkpoint
    saved_at = None
    t0, images, tw, window = time.perf_counter(), 0, time.perf_counter(), 0
    for x, y in batches(loader, epoch):
        if step >= args.steps:
            break
        loss = train_step(model, opt, x, y)
        step += 1
        images += x.shape[0]
        window += x.shape[0]
        if saved_at is not None and len(after) < CHECK_BATCHES:
            after.append((x.clone(), y.clone(), loss))
        if step % args.log_every == 0 or step == args.steps:
            now = time.perf_counter()
            print(f"step {step:5d}  epoch {loader.epoch:3d}  loss {loss:.4f}  "
                  f"{window / (now - tw):7.1f} img/s", flush=True)
            tw, window = now, 0
        if step == args.checkpoint_at and not args.resume:
            save(args.checkpoint, step, model, opt, loader)
            saved_at = step
            print(f"checkpoint saved at step {step} (mid-epoch {loader.epoch}, "
                  f"batch {loader.state_dict()['iterator']['cursor']} of {len(loader)}) "
                  f"to {args.checkpoint}")
    dt = time.perf_counter() - t0
    print(f"trained {step} steps, {images} images in {dt:.1f} s: {images / dt:.1f} img/s "
          "(data loading and training together)")
    loader.close()
    return saved_at, after


def check_resume(args, saved_at, after):
    """Restores the checkpoint into fresh objects and compares the next batches and losses."""
    loader, model, opt = setup(args)
    step, epoch = restore(args.checkpoint, model, opt, loader)
    assert step == saved_at
    ok = True
    stream = batches(loader, epoch)
    for i, (x0, y0, loss0) in enumerate(after):
        x, y = next(stream)
        loss = train_step(model, opt, x, y)
        same = torch.equal(x, x0) and torch.equal(y, y0)
        ok = ok and same
        print(f"resume: batch {step + i + 1} {'identical' if same else 'DIFFERENT'}, "
              f"loss {loss:.4f} (original run {loss0:.4f})")
    loader.close()
    if not after:
        print("resume check: skipped (the run ended right after the checkpoint)")
        return True
    print(f"resume check: {'OK' if ok else 'FAILED'} ({len(after)} batches after step {step})")
    return ok


def main():
    """Parses the options, trains, and checks resuming from the mid-epoch checkpoint."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("corpus", nargs="?", default=default_corpus(),
                   help="ImageFolder directory (default: build/data/corpus from `make data`)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=64, help="image side after the random crop")
    p.add_argument("--threads", type=int, default=2, help="rill worker threads")
    p.add_argument("--prefetch", type=int, default=4, help="batches prepared ahead")
    p.add_argument("--torch-threads", type=int, default=1,
                   help="PyTorch's threads (the rill workers use the other cores)")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--log-every", type=int, default=0, help="steps between lines (0: auto)")
    p.add_argument("--checkpoint", default=None,
                   help="where the mid-run checkpoint goes (default: a temporary file)")
    p.add_argument("--checkpoint-at", type=int, default=0, help="step (default: steps / 2)")
    p.add_argument("--resume", default=None, help="continue from this checkpoint")
    args = p.parse_args()
    if not os.path.isdir(args.corpus):
        sys.exit(f"no image folder at {args.corpus} (run `make data`, or pass a directory)")
    args.log_every = args.log_every or max(1, args.steps // 15)
    args.checkpoint_at = args.checkpoint_at or max(1, args.steps // 2)
    torch.set_num_threads(max(1, args.torch_threads))
    tmp = None
    if args.checkpoint is None:
        tmp = tempfile.TemporaryDirectory()
        args.checkpoint = os.path.join(tmp.name, "checkpoint.pt")
    saved_at, after = train(args)
    ok = True
    if saved_at is not None:
        ok = check_resume(args, saved_at, after)
    if tmp is not None:
        tmp.cleanup()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
