"""rill.torch.Loader: zero-copy tensors, outputs, epochs, resuming, sharding, devices and a
training step."""
import gc

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import rill  # noqa: E402
import rill.torch  # noqa: E402
from rill.torch import Loader, to_tensor  # noqa: E402

N = 50  # rows: not a multiple of the batch sizes used


def frame(n=N):
    """x: float32[3] = (i, 2i, 3i), y: int64 = i, s: string, over rows i in [0, n)."""
    i = np.arange(n)
    x = np.stack([i, 2 * i, 3 * i], axis=1).astype(np.float32)
    return rill.from_numpy({"x": x, "y": i.astype(np.int64), "s": [f"r{k}" for k in i]}), x


def ys(loader):
    """The y values of one pass, batch by batch."""
    return [b["y"].tolist() for b in loader]


def test_tensors_share_memory_with_rill_arrays():
    """to_tensor gives a tensor over the rill array's own memory."""
    df, _ = frame()
    batches = df.batch(8, ["x", "y"])
    with batches.iter() as it:
        row = next(it)
        for array in row.arrays:
            t = to_tensor(array)
            view = array.to_numpy()
            assert t.data_ptr() == view.ctypes.data
            assert tuple(t.shape) == tuple(array.shape)
            assert np.array_equal(t.numpy(), view)


def test_loader_tensors_are_views_of_the_batch_buffers():
    """Loader tensors are the batch buffers, and outlive the iterator."""
    df, x = frame()
    loader = Loader(df, batch_size=8, columns=["x", "y"])
    kept = []
    for b in loader:
        t = b["x"]
        assert isinstance(t, torch.Tensor) and t.dtype == torch.float32
        kept.append(t)
    # the tensors stay valid after the iterator moved on and was freed
    loader.close()
    del loader
    gc.collect()
    assert np.array_equal(torch.cat(kept).numpy(), x)
    # and they are the rill batch buffers themselves: the iterator's next batch is written
    # elsewhere while a tensor holds its buffer
    df2, _ = frame()
    batches = df2.batch(8, ["x"])
    loader2 = Loader(batches)
    it = iter(loader2)
    first = next(it)["x"]
    ptr = first.data_ptr()
    second = next(it)["x"]
    assert second.data_ptr() != ptr and first.data_ptr() == ptr
    assert first[0].tolist() == [0.0, 0.0, 0.0] and second[0].tolist() == [8.0, 16.0, 24.0]


def test_writes_through_a_tensor_reach_the_rill_array():
    """A tensor and its rill array are one buffer."""
    df, _ = frame()
    with df.batch(10, ["x"]).iter() as it:
        array = next(it)["x"]
        t = to_tensor(array)
        t[1, 2] = -5.0
        assert array.to_numpy()[1, 2] == -5.0


def test_dict_and_tuple_outputs():
    """Batches as {name: tensor} or tuples in column order; strings stay rill arrays."""
    df, x = frame()
    b = next(iter(Loader(df, batch_size=4)))
    assert list(b) == ["x", "y", "s"]
    assert isinstance(b["x"], torch.Tensor) and b["x"].shape == (4, 3)
    assert b["y"].dtype == torch.int64 and b["y"].tolist() == [0, 1, 2, 3]
    # strings have no tensor form: they pass through as rill arrays
    assert isinstance(b["s"], rill.Array) and b["s"].to_pylist() == ["r0", "r1", "r2", "r3"]
    df2, _ = frame()
    t = next(iter(Loader(df2, batch_size=4, columns=["y", "x"], output="tuple")))
    assert isinstance(t, tuple) and len(t) == 2
    assert t[0].tolist() == [0, 1, 2, 3] and np.array_equal(t[1].numpy(), x[:4])


def test_unbatched_rows_and_batched_dataframes():
    """Single rows without batch_size; batched dataframes iterated as they are."""
    df, x = frame(6)
    rows = list(Loader(df, columns=["x", "y", "s"]))
    assert len(rows) == 6
    assert rows[2]["x"].shape == (3,) and rows[2]["x"].tolist() == x[2].tolist()
    assert rows[2]["y"].shape == () and int(rows[2]["y"]) == 2 and rows[2]["s"] == "r2"
    df2, _ = frame()
    loader = Loader(df2.batch(16, ["y"]))
    assert len(loader) == 4 and sum(ys(loader), []) == list(range(N))


def test_nulls_pass_through_as_arrays():
    """A batch holding nulls gives that column as a rill array."""
    data = np.ma.masked_array(np.arange(8, dtype=np.float64), mask=[0, 1] + [0] * 6)
    df = rill.from_numpy({"v": data})
    first, second = list(Loader(df, batch_size=4))
    assert isinstance(first["v"], rill.Array) and first["v"].null_count == 1
    assert first["v"].to_pylist() == [0.0, None, 2.0, 3.0]
    assert isinstance(second["v"], torch.Tensor) and second["v"].tolist() == [4.0, 5.0, 6.0, 7.0]


def test_len():
    """len() counts the batches of this rank."""
    df, _ = frame()
    assert len(Loader(df, batch_size=8)) == 7
    df, _ = frame()
    assert len(Loader(df, batch_size=8, drop_last=True)) == 6
    df, _ = frame()
    assert len(Loader(df)) == N
    df, _ = frame()
    assert len(Loader(df, batch_size=8, rank=1, world=3)) == 3  # 17 rows of 50


def test_a_pass_prefetches_the_next_epochs_first_batches():
    """At the end of a pass the loader's prefetch goes on into the next epoch; the next pass
    uses those batches (computed once) and gives the same batches as a loader that did not
    run ahead."""
    import collections
    import time
    n = 400
    calls = []  # the y values of each call of the map

    def loader_of(counted):
        df, _ = frame(n)
        if counted is None:
            df.map("y2", lambda y: y, "y", "int64")
        else:
            df.map("y2", lambda y: counted.append(y.tolist()) or time.sleep(0.001) or y, "y", "int64")
        return Loader(df, batch_size=8, shuffle=True, seed=5, columns=["y2"], threads=2, prefetch=4)

    ref = loader_of(None)
    want = [[b["y2"].tolist() for b in ref] for _ in range(3)]
    ref.close()
    loader = loader_of(calls)
    assert [b["y2"].tolist() for b in loader] == want[0]
    end = time.monotonic() + 5
    while sum(map(len, calls)) <= n and time.monotonic() < end:
        time.sleep(0.001)
    assert n < sum(map(len, calls)) <= n + 5 * 8  # epoch 1's first batches, before its pass began
    assert [b["y2"].tolist() for b in loader] == want[1]
    assert loader.epoch == 2
    loader.close()
    # each row of epoch 1's first batch was computed in epochs 0 and 1 only (once in each),
    # and perhaps ahead in epoch 2, whose first batches ran ahead in turn
    seen = collections.Counter(v for c in calls for v in c)
    ahead2 = {v for b in want[2][:5] for v in b}
    for v in want[1][0]:
        assert seen[v] in ((2, 3) if v in ahead2 else (2,)), (v, seen[v])


def test_set_epoch_reshuffles_deterministically():
    """Each epoch has its own permutation, the same for the same seed."""
    df, _ = frame()
    loader = Loader(df, batch_size=8, shuffle=True, seed=3)
    loader.set_epoch(0)
    e0 = ys(loader)
    loader.set_epoch(1)
    e1 = ys(loader)
    assert sorted(sum(e0, [])) == list(range(N)) and sorted(sum(e1, [])) == list(range(N))
    assert e0 != e1
    loader.set_epoch(0)
    assert ys(loader) == e0
    # passes without set_epoch move on to the next epoch, as DataLoader(shuffle=True) does
    assert ys(loader) == e1 and loader.epoch == 2
    # another loader with the same seed gives the same order; another seed does not
    other, _ = frame()
    same = Loader(other, batch_size=8, shuffle=True, seed=3)
    assert ys(same) == e0
    third, _ = frame()
    assert ys(Loader(third, batch_size=8, shuffle=True, seed=4)) != e0


def test_threads_and_prefetch_do_not_change_batches():
    """Threads and prefetch depth change nothing in the batches."""
    runs = []
    for threads, prefetch in ((0, 0), (2, 4), (rill.THREADS_NONE, rill.PREFETCH_NONE)):
        df, _ = frame()
        runs.append(ys(Loader(df, batch_size=8, shuffle=True, seed=1, threads=threads,
                              prefetch=prefetch)))
    assert runs[0] == runs[1] == runs[2]


def test_state_dict_resumes_mid_epoch_exactly():
    """A mid-epoch state gives the rest of the epoch, then the next epoch."""
    df, _ = frame()
    loader = Loader(df, batch_size=8, shuffle=True, seed=11)
    loader.set_epoch(2)
    it = iter(loader)
    head = [next(it)["y"].tolist() for _ in range(3)]
    state = loader.state_dict()
    assert state["epoch"] == 2 and state["iterator"]["cursor"] == 3
    rest = [b["y"].tolist() for b in it]
    following = ys(loader)  # epoch 3
    assert sorted(sum(head + rest, [])) == list(range(N))

    df2, _ = frame()
    resumed = Loader(df2, batch_size=8, shuffle=True, seed=11)
    resumed.load_state_dict(state)
    resumed.set_epoch(2)  # the usual epoch loop keeps a restored pass of that epoch
    assert ys(resumed) == rest
    assert ys(resumed) == following



def test_a_concatenation_of_files_resumes_mid_epoch(tmp_path):
    """A dataset in two CSV files, shuffled across them, resumed from a mid-epoch state."""
    paths = []
    for k, rows in enumerate([range(0, 23), range(23, N)]):
        p = tmp_path / f"part{k}.csv"
        p.write_text("y\n" + "".join(f"{r}\n" for r in rows))
        paths.append(p)
    loader = Loader(rill.from_csv(paths), batch_size=8, shuffle=True, seed=4)
    it = iter(loader)
    head = [next(it)["y"].tolist() for _ in range(2)]
    state = loader.state_dict()
    rest = [b["y"].tolist() for b in it]
    assert sorted(sum(head + rest, [])) == list(range(N))
    assert any(min(b) < 23 <= max(b) for b in head + rest)  # batches hold rows of both files
    resumed = Loader(rill.from_csv(paths), batch_size=8, shuffle=True, seed=4)
    resumed.load_state_dict(state)
    assert [b["y"].tolist() for b in resumed] == rest
    swapped = Loader(rill.from_csv(paths[::-1]), batch_size=8, shuffle=True, seed=4)  # other parts
    swapped.load_state_dict(state)
    with pytest.raises(rill.InvalidArgumentError, match="another dataframe"):
        next(iter(swapped))


def test_state_dict_between_epochs_and_mismatch():
    """A state between epochs starts the next one; another seed is refused."""
    df, _ = frame()
    loader = Loader(df, batch_size=8, shuffle=True, seed=5)
    ys(loader)
    state = loader.state_dict()
    assert state["epoch"] == 1 and state["iterator"] is None
    nxt = ys(loader)
    df2, _ = frame()
    resumed = Loader(df2, batch_size=8, shuffle=True, seed=5)
    resumed.load_state_dict(state)
    assert ys(resumed) == nxt
    df3, _ = frame()
    with pytest.raises(ValueError, match="seed"):
        Loader(df3, batch_size=8, shuffle=True, seed=6).load_state_dict(state)


def test_state_dict_resumes_random_augmentations(corpus):
    """Resuming reproduces random crops and flips bit for bit."""
    def make():
        files = rill.from_image_folder(corpus)
        view = files.shuffle(9)
        img = view.random_resized_crop("img", "bytes", 16)
        view.normalize("x", img, mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25), flip=0.5)
        return Loader(view, batch_size=32, columns=["x", "label"], output="tuple", seed=9,
                      threads=2)

    loader = make()
    it = iter(loader)
    next(it)
    next(it)
    state = loader.state_dict()
    expected = [next(it) for _ in range(2)]
    loader.close()
    resumed = make()
    resumed.load_state_dict(state)
    got = iter(resumed)
    for x0, y0 in expected:
        x, y = next(got)
        assert x.shape == (32, 3, 16, 16) and x.dtype == torch.float32
        assert torch.equal(x, x0) and torch.equal(y, y0)


def test_shards_cover_every_row_once():
    """The shards of every rank together hold each row once per epoch."""
    world = 3
    for epoch in (0, 1):
        seen = []
        for rank in range(world):
            df, _ = frame()
            loader = Loader(df, batch_size=4, shuffle=True, seed=21, rank=rank, world=world)
            loader.set_epoch(epoch)
            got = sum(ys(loader), [])
            assert len(got) in (N // world, N // world + 1)
            seen += got
        assert sorted(seen) == list(range(N))


def test_rank_and_world_come_from_torch_distributed(monkeypatch):
    """An initialised process group gives rank and world."""
    dist = torch.distributed
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    df, _ = frame()
    loader = Loader(df, batch_size=5)
    assert (loader.rank, loader.world) == (1, 2)
    assert sum(ys(loader), []) == list(range(1, N, 2))


def test_argument_errors():
    """Misuse is reported with the reason."""
    df, _ = frame()
    batched = df.batch(8, ["y"])
    with pytest.raises(ValueError, match="shuffle"):
        Loader(batched, shuffle=True)
    with pytest.raises(ValueError, match="shard"):
        Loader(batched, rank=0, world=2)
    df, _ = frame()
    with pytest.raises(rill.InvalidArgumentError, match="nope"):
        Loader(df, batch_size=4, columns=["nope"])
    with pytest.raises(ValueError, match="output"):
        Loader(df, batch_size=4, output="list")
    with pytest.raises(TypeError):
        Loader([1, 2, 3], batch_size=2)


@pytest.mark.skipif(rill.cuda_device_count() > 0, reason="a CUDA device is present")
def test_cuda_device_without_gpu_raises_no_device_error():
    """device="cuda" without a GPU raises rill.NoDeviceError."""
    df, _ = frame()
    with pytest.raises(rill.NoDeviceError, match="cuda"):
        Loader(df, batch_size=8, device="cuda")
    with pytest.raises(rill.NoDeviceError):
        Loader(df, batch_size=8, device=torch.device("cuda", 0))


def test_training_step_consumes_batches():
    """A model trained on the loader's batches learns."""
    torch.manual_seed(0)
    n = 256
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(n, 4)).astype(np.float32)
    labels = (feats[:, 0] + feats[:, 1] > 0).astype(np.int64)
    df = rill.from_numpy({"f": feats, "label": labels})
    loader = Loader(df, batch_size=32, shuffle=True, seed=0, output="tuple")
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for epoch in range(5):
        loader.set_epoch(epoch)
        total = 0.0
        for f, y in loader:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(f), y)
            loss.backward()
            opt.step()
            total += loss.item()
        losses.append(total / len(loader))
    assert losses[-1] < losses[0] * 0.7


def test_which_dtypes_become_tensors():
    """Numeric fixed-shape columns (bool included) are tensors; uint16 and timestamps are not."""
    df = rill.from_numpy({
        "b": np.array([True, False, True, True]),
        "h": np.arange(4, dtype=np.float16),
        "img": np.arange(48, dtype=np.uint8).reshape(4, 2, 2, 3),
        "u": np.arange(4, dtype=np.uint16),
        "t": np.arange(4).astype("datetime64[us]"),
    })
    b = next(iter(Loader(df, batch_size=4)))
    assert b["b"].dtype == torch.bool and b["b"].tolist() == [True, False, True, True]
    assert b["h"].dtype == torch.float16 and b["h"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert b["img"].shape == (4, 2, 2, 3) and b["img"].flatten().tolist() == list(range(48))
    assert isinstance(b["u"], rill.Array) and b["u"].to_pylist() == [0, 1, 2, 3]
    assert isinstance(b["t"], rill.Array) and len(b["t"]) == 4


def test_loader_passes_in_a_forked_child(in_forked_child):
    """A forked child's pass gets an iterator of its own with the same batches; the parent's
    pass, started before the fork, refuses to go on there; the parent goes on."""
    df, _ = frame()
    loader = Loader(df, batch_size=8, shuffle=True, seed=5, threads=2)
    loader.set_epoch(0)
    e0 = ys(loader)
    loader.set_epoch(1)
    e1 = ys(loader)
    loader.set_epoch(0)
    started = iter(loader)
    first = next(started)["y"].tolist()

    def child():
        with pytest.raises(rill.InvalidArgumentError, match=r"made before fork\(\)"):
            next(started)
        loader.set_epoch(1)
        assert ys(loader) == e1

    in_forked_child(child)
    assert [first] + [b["y"].tolist() for b in started] == e0
