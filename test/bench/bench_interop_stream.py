"""A 10-million-row, 5-column rill dataframe streamed into pyarrow (Arrow C Stream,
record batches computed on demand by rill's iterator) against memcpy bandwidth measured in the
same run on the same bytes."""
import os
import sys
import time

import numpy as np
import pyarrow as pa

import rill

ROWS = int(os.environ.get("ROWS", 10_000_000))
REPEAT = 3


def best(fn):
    times = []
    for _ in range(REPEAT):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    rng = np.random.default_rng(0)
    src = pa.table({
        "a": pa.array(np.arange(ROWS, dtype=np.int64)),
        "b": pa.array(rng.random(ROWS)),
        "c": pa.array(rng.random(ROWS, dtype=np.float32)),
        "d": pa.array(rng.integers(0, 1 << 30, ROWS, dtype=np.int32)),
        "e": pa.array(rng.integers(0, 255, ROWS, dtype=np.uint8)),
    })
    nbytes = sum(c.nbytes for c in src.columns)
    df = rill.DataFrame.from_arrow(src)

    def stream():
        table = pa.RecordBatchReader.from_stream(df).read_all()
        assert table.num_rows == ROWS

    flat = [np.asarray(c.chunk(0)) for c in src.columns]
    dst = [np.empty_like(f) for f in flat]

    def memcpy():
        for f, d in zip(flat, dst):
            np.copyto(d, f)

    t_stream = best(stream)
    t_copy = best(memcpy)
    bw_stream = nbytes / t_stream / 1e9
    bw_copy = nbytes / t_copy / 1e9
    print(f"rows={ROWS} columns=5 bytes={nbytes / 1e6:.1f} MB")
    print(f"rill stream -> pyarrow : {t_stream * 1e3:8.1f} ms  {bw_stream:6.2f} GB/s")
    print(f"memcpy (numpy copyto)  : {t_copy * 1e3:8.1f} ms  {bw_copy:6.2f} GB/s")
    print(f"ratio stream/memcpy bandwidth: {bw_stream / bw_copy:.2f}x (target >= 0.8x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
