"""PyTorch training loops fed by rill: :class:`Loader`.

A :class:`Loader` iterates a rill :class:`~rill.DataFrame` and hands out batches of
``torch.Tensor`` made without a copy (DLPack), wherever a ``torch.utils.data.DataLoader``
would be used::

    import rill, rill.torch
    files = rill.from_image_folder("train/")
    view = files.shuffle(42)
    img = view.random_resized_crop("img", "bytes", 224)
    view.normalize("x", img, mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225), flip=0.5)
    loader = rill.torch.Loader(view, batch_size=256, columns=["x", "label"], output="tuple")
    for epoch in range(10):
        loader.set_epoch(epoch)
        for x, y in loader:          # x: float32 [256, 3, 224, 224], y: int64 [256]
            ...

What a batch holds:

* columns with fixed-shape numeric cells (bool, int8..int64, uint8, float16, bfloat16,
  float32, float64) become tensors that share memory with the rill batch buffers (the buffer
  goes back to its pool when the tensor is freed); a batch whose column holds nulls gives that
  column as a :class:`rill.Array` instead;
* other columns (strings, binary, timestamps, uint16/32/64, cells whose shape varies) pass
  through as :class:`rill.Array` (``to_pylist()``, ``to_numpy()``, Arrow and DLPack exports);
* without batching (an unbatched dataframe and no ``batch_size``) each item holds one row:
  tensors of the cell's shape, and plain Python values for the pass-through columns.

Epochs: each new pass over the loader uses the next epoch (a new shuffle permutation and new
random augmentations); :meth:`Loader.set_epoch` chooses it explicitly, as with a
``DistributedSampler``. Randomness depends only on (seed, epoch, row), never on threads or
prefetch depth, so :meth:`Loader.state_dict` / :meth:`Loader.load_state_dict` resume a pass
exactly where it stopped. At the end of a pass the loader's prefetch goes on into the next
epoch's first batches (``DataFrame.iter(next_epoch=True)``), so the next pass, when it is that
epoch, starts with them ready instead of waiting for its first batch; a pass of another epoch
drops them.

fork(): a loader can be used in a child process (``multiprocessing`` with the fork start
method): the child's first pass makes an iterator of its own (the parent's worker threads do
not exist there); a pass the parent had started cannot go on in the child.

Distributed training: when ``torch.distributed`` is initialised (or ``rank``/``world`` are
given), every rank shuffles with the same seed and then takes its shard (rows ``rank``,
``rank + world``, ...), so the ranks together see every row exactly once per epoch. Give
every rank the same ``seed``.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import torch

import rill

__all__ = ["Loader", "to_tensor", "TENSOR_DTYPES"]

#: rill dtypes that become tensors (fixed-shape cells, no nulls in the batch).
TENSOR_DTYPES = frozenset(["bool", "int8", "int16", "int32", "int64", "uint8", "float16",
                           "bfloat16", "float32", "float64"])

_STATE_VERSION = 1


def _from_dlpack(array: Any) -> torch.Tensor:
    """A tensor over `array`'s memory through DLPack: the protocol objects of recent PyTorch
    (``torch.from_dlpack``, which may ask for a versioned capsule), else the legacy
    ``DLManagedTensor`` capsule."""
    from_dlpack = getattr(torch, "from_dlpack", None)
    if from_dlpack is not None:
        return from_dlpack(array)
    return torch.utils.dlpack.from_dlpack(array.__dlpack__())


def to_tensor(array: "rill.Array") -> torch.Tensor:
    """Returns a tensor sharing memory with `array` (a rill.Array of fixed-shape numeric cells
    without nulls): shape ``array.shape``, on the array's device. Raises TypeError for arrays
    a tensor cannot hold (strings, nulls, varying shapes, dtypes PyTorch lacks)."""
    if array.dtype not in TENSOR_DTYPES:
        raise TypeError(f"a {array.dtype} array has no tensor form")
    if any(d < 0 for d in array.shape):
        raise TypeError("an array whose cells vary in shape has no tensor form")
    if array.null_count:
        raise TypeError(f"the array holds {array.null_count} nulls; no tensor form")
    try:
        return _from_dlpack(array)
    except (RuntimeError, TypeError, BufferError):
        if array.dtype != "bool":
            raise
        # PyTorch builds older than DLPack's bool code: view the bytes as uint8 (same memory)
        import numpy as np
        data = np.asarray(array).view(np.uint8)
        return torch.from_numpy(data.copy()).bool()


def _distributed() -> Tuple[int, int]:
    """(rank, world) of the initialised default process group, else (0, 1)."""
    dist = getattr(torch, "distributed", None)
    if dist is not None and dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _cuda_ordinal(device: Union[str, int, torch.device, None]) -> Optional[int]:
    """The CUDA ordinal a device argument names, or None for the host."""
    if device is None:
        return None
    if isinstance(device, int):
        return device
    d = torch.device(device)
    if d.type == "cpu":
        return None
    if d.type != "cuda":
        raise ValueError(f"device {device!r}: rill moves batches to 'cuda' devices only")
    return d.index or 0


def _no_device_error(ordinal: int) -> Exception:
    """A rill.NoDeviceError explaining why CUDA device `ordinal` cannot be used."""
    if not rill.has_feature("cuda"):
        why = "rill was built without CUDA (no nvcc when it was compiled)"
    else:
        count = rill.cuda_device_count()
        why = ("no CUDA device is visible" if count == 0
               else f"only {count} CUDA device(s) are visible")
    msg = (f"rill.torch.Loader(device='cuda:{ordinal}'): {why}; "
           "leave device unset to get batches in host memory")
    err = rill.NoDeviceError(msg)
    for key, value in (("code", rill.ENODEV), ("row", -1), ("column", -1),
                       ("column_name", None), ("message", msg)):
        try:
            setattr(err, key, value)
        except AttributeError:
            pass
    return err


class Loader:
    """Batches of a rill DataFrame as torch tensors, for training loops.

    Args:
      df: the dataframe. Unbatched: the loader shuffles (``shuffle=True``), shards and batches
        it (``batch_size``) itself; without ``batch_size`` it yields single rows. Batched
        (made by ``DataFrame.batch``): iterated as it is (then ``shuffle`` must be False and
        the world size 1; shuffle and shard before batching instead). Columns cannot be added
        to `df` once the loader exists (rill refuses columns on a dataframe something derives
        from).
      batch_size: rows per batch when `df` is unbatched.
      columns: the columns to emit, by name (default: every column).
      output: ``"dict"`` (``{name: tensor}``, the default) or ``"tuple"`` (in `columns` order).
      shuffle: shuffle the rows with `seed` (a new permutation each epoch) before sharding.
      seed: the seed of the shuffle and of random augmentations (rill's per-row generators);
        share it between ranks.
      drop_last: drop a short last batch.
      layout: ``"hwc"`` or ``"chw"``: how 3-D image cells are stacked (see DataFrame.batch).
      rank, world: this process's shard; by default taken from ``torch.distributed`` when it
        is initialised, else 0 and 1.
      prefetch: batches computed ahead (0: rill's default of 2).
      threads: worker threads (0: one per core).
      device: ``None``/``"cpu"`` (host memory) or ``"cuda"``/``"cuda:N"``: numeric columns are
        copied to the GPU by rill's to_device operator, several batches in flight (pinned
        host batches). Raises rill.NoDeviceError when there is no such device. The batches
        are ordered on the CUDA stream current when the first pass starts (the training
        loop's): the host never waits for them, and a batch's memory is reused only after
        the work queued on that stream before the next batch was taken.
      epoch: the epoch of the first pass.

    ``len(loader)`` is the number of batches per epoch (of this rank). Iterating starts a pass
    over the next epoch (or resumes the pass restored by :meth:`load_state_dict`). One pass
    runs at a time: starting a new one ends the previous iterator.
    """

    def __init__(self, df: "rill.DataFrame", batch_size: Optional[int] = None, *,
                 columns: Optional[Sequence[str]] = None, output: str = "dict",
                 shuffle: bool = False, seed: int = 0, drop_last: bool = False,
                 layout: str = "hwc", rank: Optional[int] = None, world: Optional[int] = None,
                 prefetch: int = 0, threads: int = 0,
                 device: Union[str, int, torch.device, None] = None, epoch: int = 0) -> None:
        if not isinstance(df, rill.DataFrame):
            raise TypeError(f"Loader takes a rill.DataFrame, not {type(df).__name__}")
        if output not in ("dict", "tuple"):
            raise ValueError(f"output must be 'dict' or 'tuple', not {output!r}")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
            raise ValueError(f"batch_size must be a positive int, not {batch_size!r}")
        if (rank is None) != (world is None):
            raise ValueError("give both rank and world, or neither")
        if rank is None or world is None:
            rank, world = _distributed()
        if world < 1 or not 0 <= rank < world:
            raise ValueError(f"rank {rank} of world {world}: need 0 <= rank < world")
        ordinal = _cuda_ordinal(device)
        if ordinal is not None and (not rill.has_feature("cuda")
                                    or rill.cuda_device_count() <= ordinal):
            raise _no_device_error(ordinal)

        self.dataset = df
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.shuffle = shuffle
        self.seed = int(seed)
        self.rank, self.world = rank, world
        self.output = output
        self.prefetch, self.threads = prefetch, threads
        self.device = torch.device("cuda", ordinal) if ordinal is not None else torch.device("cpu")
        names = list(df.columns) if columns is None else [str(c) for c in columns]
        if not names:
            raise ValueError("no columns to emit")
        for n in names:
            df.column_index(n)  # unknown names raise rill.InvalidArgumentError listing columns
        self.columns: List[str] = names

        if df.is_batched:
            if batch_size is not None:
                raise ValueError("the dataframe is already batched; leave batch_size unset")
            if shuffle:
                raise ValueError("a batched dataframe cannot be shuffled: shuffle before "
                                 "batching, or pass the unbatched dataframe and batch_size")
            if world > 1:
                raise ValueError(f"a batched dataframe cannot be sharded (rank {rank} of "
                                 f"{world}): pass the unbatched dataframe and batch_size")
            frame = df
            self._batched = True
        else:
            frame = df
            if shuffle:
                frame = frame.shuffle(self.seed)
            if world > 1:
                frame = frame.shard(rank, world)
            if batch_size is not None:
                frame = frame.batch(batch_size, names, drop_last=drop_last, layout=layout,
                                    pinned=ordinal is not None)
            self._batched = batch_size is not None

        # numeric fixed-shape columns: tensors (on the GPU through to_device when asked)
        emit = []
        self._tensor_columns = []
        for n in names:
            f = frame.field(n)
            numeric = f.dtype in TENSOR_DTYPES and all(d >= 0 for d in f.shape)
            source = n
            if numeric and ordinal is not None:
                source = f"{n}@cuda:{ordinal}"
                frame.to_device(source, n, device=ordinal)
            emit.append(source)
            if numeric:
                self._tensor_columns.append(n)
        self._frame = frame
        self._emit = emit
        self._tensor = [n in self._tensor_columns for n in names]
        self._it: Any = None
        self._it_pid = 0  # the process that made _it
        self._next_epoch = int(epoch)
        self._epoch = int(epoch)
        self._pending: Optional[Dict[str, Any]] = None
        self._active = False
        self._generation = 0

    # ------------------------------------------------------------------ sizes and epochs

    def __len__(self) -> int:
        """Batches (rows without batching) per epoch for this rank."""
        return len(self._frame)

    @property
    def epoch(self) -> int:
        """The epoch of the current pass (or of the next one when none is running)."""
        return self._epoch if self._active else self._next_epoch

    @property
    def dataframe(self) -> "rill.DataFrame":
        """The dataframe the loader iterates (shuffled, sharded and batched as asked)."""
        return self._frame

    def set_epoch(self, epoch: int) -> None:
        """Makes the next pass use `epoch` (its shuffle permutation and augmentations). A pass
        restored by load_state_dict is kept when it belongs to that epoch."""
        epoch = int(epoch)
        if self._pending is not None and self._pending["epoch"] != epoch:
            self._pending = None
        self._next_epoch = epoch

    # ------------------------------------------------------------------ iteration

    def _iterator(self) -> Any:
        if self._it is not None and self._it_pid != os.getpid():
            # made by the parent before a fork(): its worker threads are the parent's, so a
            # child's pass gets an iterator of its own (closing the old one waits for nothing)
            self._it.close()
            self._it = None
        if self._it is None:
            # device batches are ordered on the stream that is current now (the training
            # loop's), with events: no host wait, and their memory is reused only after the
            # work queued there before the loader moved past them
            stream = torch.cuda.current_stream(self.device) if self.device.type == "cuda" else None
            self._it = self._frame.iter(self._emit, prefetch=self.prefetch,
                                        threads=self.threads, seed=self.seed,
                                        epoch=self._next_epoch, stream=stream, next_epoch=True)
            self._it_pid = os.getpid()
        return self._it

    def __iter__(self) -> Iterator[Union[Dict[str, Any], Tuple[Any, ...]]]:
        """Starts a pass (the next epoch, or the one restored by load_state_dict) and returns
        an iterator over its batches."""
        it = self._iterator()
        pending, self._pending = self._pending, None
        if pending is not None and pending["iterator"] is not None:
            it.load_state_dict(pending["iterator"])
            epoch = pending["epoch"]
        else:
            epoch = pending["epoch"] if pending is not None else self._next_epoch
            it.set_epoch(epoch)
        self._epoch = epoch
        self._next_epoch = epoch + 1
        self._active = True
        self._generation += 1
        return self._batches(it, self._generation)

    def _batches(self, it: Any, generation: int) -> Iterator[Any]:
        convert = self._convert
        while True:
            if generation != self._generation:
                return  # a newer pass took the iterator over
            try:
                row = next(it)
            except StopIteration:
                if generation == self._generation:
                    self._active = False
                return
            yield convert(row)

    def _convert(self, row: Any) -> Union[Dict[str, Any], Tuple[Any, ...]]:
        values = []
        batched = self._batched
        for array, is_tensor in zip(row.arrays, self._tensor):
            if is_tensor and not array.null_count:
                t = _from_dlpack(array) if array.dtype != "bool" else to_tensor(array)
                values.append(t if batched else t[0])
            else:
                values.append(array if batched else array[0])
        if self.output == "tuple":
            return tuple(values)
        return dict(zip(self.columns, values))

    def close(self) -> None:
        """Frees the iterator and its worker threads (a later pass creates them again)."""
        self._generation += 1
        self._active = False
        if self._it is not None:
            self._it.close()
            self._it = None

    def __del__(self) -> None:
        """Frees the iterator with the loader."""
        try:
            self.close()
        except Exception:
            pass

    # ------------------------------------------------------------------ checkpoints

    def state_dict(self) -> Dict[str, Any]:
        """The loader's position, to save with the model and optimizer: the epoch and, in the
        middle of a pass, the iterator's position (seed, epoch, cursor, fingerprint).
        load_state_dict of it on a loader built the same way resumes with the same batches."""
        if self._pending is not None:
            return dict(self._pending)
        state: Dict[str, Any] = {"version": _STATE_VERSION, "seed": self.seed,
                                 "rank": self.rank, "world": self.world,
                                 "batch_size": self.batch_size}
        if self._active and self._it is not None:
            state["epoch"] = self._epoch
            state["iterator"] = dict(self._it.state_dict())
        else:
            state["epoch"] = self._next_epoch
            state["iterator"] = None
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restores a position saved by state_dict: the next pass resumes there (the rest of
        the saved epoch, then the following epochs). Raises ValueError when the state belongs
        to a loader of another seed, shard or batch size (rill checks the pipeline's
        fingerprint when the pass starts)."""
        if state.get("version") != _STATE_VERSION:
            raise ValueError(f"unknown loader state version {state.get('version')!r}")
        for key in ("seed", "rank", "world", "batch_size"):
            if state.get(key) != getattr(self, key):
                raise ValueError(f"the state was saved with {key}={state.get(key)!r}, "
                                 f"this loader has {key}={getattr(self, key)!r}")
        self.close()
        self._pending = {k: state[k] for k in
                         ("version", "seed", "rank", "world", "batch_size", "epoch")}
        self._pending["iterator"] = dict(state["iterator"]) if state.get("iterator") else None
        self._next_epoch = int(state["epoch"])

    def __repr__(self) -> str:
        """Batches, columns, batch size, shard and device."""
        return (f"rill.torch.Loader({len(self)} batches, columns={self.columns}, "
                f"batch_size={self.batch_size}, rank={self.rank}/{self.world}, "
                f"device={self.device})")
