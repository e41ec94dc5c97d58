"""rill.Iterator: rows, epochs, seek, resumable state, stats, close. Oracles: numpy."""
import numpy as np
import pytest

import rill

N = 50


def ids(it, n=None):
    out = []
    for row in it:
        out.extend(row["i"].to_pylist())
        if n is not None and len(out) >= n:
            break
    return out


def pipeline(seed=7, batch=None):
    df = rill.from_numpy({"i": np.arange(N, dtype=np.int64), "f": np.arange(N, dtype=np.float32) / 2})
    s = df.shuffle(seed)
    return s.batch(batch) if batch else s


def test_rows_len_columns_and_values():
    df = rill.from_numpy({"i": np.arange(N), "s": [str(v) if v % 4 else None for v in range(N)]})
    it = df.iter()
    assert len(it) == N
    assert it.columns == ["i", "s"]
    assert it.epoch == 0
    rows = list(it)
    assert [r.index for r in rows] == list(range(N))
    assert [r["s"].to_pylist()[0] for r in rows] == [str(v) if v % 4 else None for v in range(N)]
    assert list(it) == []  # exhausted stays exhausted
    it2 = df.iter(columns=["s"])
    assert it2.columns == ["s"]
    assert next(it2).columns == ["s"]


def test_rows_outlive_their_iterator_with_their_names():
    # the rows of an iterator share its tuple of names and keep the cells they were given
    import gc
    df = rill.from_numpy({"i": np.arange(10, dtype=np.int64), "s": [f"v{k}" for k in range(10)]})
    it = df.iter(columns=["s", "i"], threads=rill.THREADS_NONE)
    rows = [next(it) for _ in range(4)]
    del it
    gc.collect()
    for k, r in enumerate(rows):
        assert r.columns == ["s", "i"]
        assert list(r) == ["s", "i"]
        assert "i" in r and "x" not in r
        assert r["i"].to_pylist() == [k]
        assert r["s"].to_pylist() == [f"v{k}"]
        assert r.to_dict()["i"].to_pylist() == [k]


def test_iter_unknown_column():
    df = rill.from_numpy({"i": np.arange(3)})
    with pytest.raises(rill.InvalidArgumentError, match=r"unknown column 'x'; columns are: i"):
        df.iter(columns=["x"])


def test_shuffle_is_a_permutation_and_set_epoch_reshuffles():
    it = pipeline().iter(threads=2)
    e0 = ids(it)
    assert sorted(e0) == list(range(N)) and e0 != list(range(N))
    it.set_epoch(1)
    assert it.epoch == 1
    e1 = ids(it)
    assert sorted(e1) == list(range(N)) and e1 != e0
    it.set_epoch(0)
    assert ids(it) == e0  # epochs are reproducible
    assert ids(pipeline().iter(epoch=1, threads=rill.THREADS_NONE)) == e1


def counted_pipeline(calls):
    """pipeline(batch=10) with a map that takes 2 ms a call and counts its calls."""
    import time

    def slow(i):
        calls.append(len(i))
        time.sleep(0.002)
        return i * 2

    df = rill.from_numpy({"i": np.arange(N, dtype=np.int64)})
    s = df.shuffle(7)
    s.map("twice", slow, "i", "int64")
    return s.batch(10)


def wait_for(pred, seconds=5.0):
    import time
    end = time.monotonic() + seconds
    while not pred() and time.monotonic() < end:
        time.sleep(0.001)


def test_next_epoch_prefetches_into_the_following_epoch():
    calls = []
    want = [ids(counted_pipeline([]).iter(epoch=e, threads=rill.THREADS_NONE)) for e in range(3)]
    it = counted_pipeline(calls).iter(prefetch=30, threads=2, next_epoch=True)
    assert ids(it) == want[0]
    assert list(it) == []  # the epoch is over
    assert it.epoch == 0
    wait_for(lambda: sum(calls) > N)  # batches of epoch 1 computed before set_epoch
    assert N < sum(calls) <= 2 * N
    it.set_epoch(1)  # keeps them: every row of epoch 1 computed once
    assert ids(it) == want[1]
    wait_for(lambda: sum(calls) > 2 * N)
    assert sum(calls) > 2 * N
    it.set_epoch(0)  # not the next epoch: what ran ahead is dropped
    assert ids(it) == want[0]
    it.set_epoch(1)
    assert ids(it, 10) == want[1][:10]
    it.set_epoch(2)  # in the middle of epoch 1: starts at row 0
    assert ids(it) == want[2]


def test_next_epoch_is_off_by_default():
    import time
    calls = []
    it = counted_pipeline(calls).iter(prefetch=30, threads=2)
    assert len(ids(it)) == N
    time.sleep(0.05)
    assert sum(calls) == N  # a single pass computes nothing past its end
    it.set_epoch(1)
    assert sorted(ids(it)) == list(range(N))
    assert sum(calls) == 2 * N


def test_seek():
    it = pipeline().iter()
    full = ids(it)
    it.seek(20)
    assert ids(it) == full[20:]
    it.seek(N)
    assert ids(it) == []
    with pytest.raises(rill.InvalidArgumentError, match=r"seek\(51\)"):
        it.seek(N + 1)
    with pytest.raises(rill.InvalidArgumentError):
        it.seek(-1)


@pytest.mark.parametrize("batch", [None, 8])
def test_state_dict_resume_mid_epoch(batch):
    it = pipeline(batch=batch).iter(seed=3, epoch=2, prefetch=4)
    first = [next(it) for _ in range(3)]
    state = it.state_dict()
    assert set(state) == {"seed", "epoch", "cursor", "fingerprint"}
    assert state["epoch"] == 2 and state["cursor"] == 3 and state["seed"] == 3
    rest = [r["i"].to_pylist() for r in it]
    fresh = pipeline(batch=batch).iter()
    fresh.load_state_dict(state)
    assert fresh.epoch == 2
    assert [r["i"].to_pylist() for r in fresh] == rest
    assert first  # the saved position was mid-epoch


def test_load_state_dict_from_another_pipeline():
    it = pipeline().iter()
    other = rill.from_numpy({"z": np.arange(5)}).iter()
    with pytest.raises(rill.InvalidArgumentError, match="saved by another pipeline"):
        it.load_state_dict(other.state_dict())
    bad = it.state_dict()
    bad["cursor"] = N + 10
    with pytest.raises(rill.InvalidArgumentError, match=r"cursor 60 is outside 0\.\.50"):
        it.load_state_dict(bad)
    with pytest.raises(rill.InvalidArgumentError, match="the state has no 'seed'"):
        it.load_state_dict({})


def test_stats_count_rows_and_skipped():
    df = rill.from_numpy({"x": np.arange(20)})
    df.map("y", lambda v: np.array([1 // (int(i) % 7) for i in v]), "x", "int64", grain=1, on_error="skip")
    it = df.iter()
    got = [r.index for r in it]
    assert got == [i for i in range(20) if i % 7]
    st = it.stats()
    assert set(st) == {"rows", "cells", "skipped", "nulled", "errors", "wait_ns", "compute_ns", "stage_calls",
                       "allocs", "reuses"}
    assert st["skipped"] == 3 and st["rows"] == 17 and st["errors"] == 0
    assert st["stage_calls"] >= 20


def test_prefetch_call_and_batched_len():
    it = pipeline(batch=8).iter()
    assert len(it) == 7
    it.prefetch(2)
    batches = [r["i"].to_pylist() for r in it]
    assert [len(b) for b in batches] == [8] * 6 + [2]
    with pytest.raises(rill.InvalidArgumentError):
        it.prefetch(-1)


def test_close_and_context_manager():
    df = rill.from_numpy({"i": np.arange(5)})
    with df.iter() as it:
        assert next(it).index == 0
    assert it.closed
    for call in (lambda: next(it), lambda: it.seek(0), lambda: it.set_epoch(1), it.stats, it.state_dict,
                 lambda: it.load_state_dict({"seed": 0, "epoch": 0, "cursor": 0, "fingerprint": 0}),
                 lambda: it.epoch):
        with pytest.raises(rill.InvalidArgumentError, match="the iterator is closed"):
            call()
    it.close()  # closing twice is fine
    with pytest.raises(TypeError):
        rill.Iterator()


def test_rows_stay_valid_after_iterator_is_gone():
    df = rill.from_numpy({"i": np.arange(10)})
    it = df.iter()
    rows = list(it)
    it.close()
    del it, df
    assert [r["i"].to_pylist()[0] for r in rows] == list(range(10))


def test_dunder_iter_and_repr():
    df = rill.from_numpy({"i": np.arange(4)})
    assert [r.index for r in df] == [0, 1, 2, 3]
    it = iter(df)
    assert isinstance(it, rill.Iterator)
    assert "4 rows" in repr(it)


def test_fork_child_refuses_the_parents_threaded_iterator(in_forked_child):
    it = pipeline().iter(threads=2)
    first = ids(it, 10)
    solo = pipeline().iter(threads=rill.THREADS_NONE)
    assert len(ids(solo, 10)) == 10

    def child():
        with pytest.raises(rill.InvalidArgumentError, match=r"made before fork\(\)"):
            next(it)
        it.close()  # at once: nothing of the parent's threads is waited for
        assert ids(solo) == ids(pipeline().iter(threads=rill.THREADS_NONE))[10:]
        assert sorted(ids(pipeline().iter(threads=2))) == list(range(N))

    in_forked_child(child)
    assert sorted(first + ids(it)) == list(range(N))
