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
    df = rill.from_arrow(src)

    def stream_keep():
        table = pa.RecordBatchReader.from_stream(df).read_all()
        assert table.num_rows == ROWS

    def stream_drop():
        rows = 0
        for batch in pa.RecordBatchReader.from_stream(df):
            rows += batch.num_rows
        assert rows == ROWS

    flat = [np.asarray(c.chunk(0)) for c in src.columns]
    dst = [np.empty_like(f) for f in flat]

    def memcpy_warm():
        for f, d in zip(flat, dst):
            np.copyto(d, f)

    def memcpy_fresh():
        return [f.copy() for f in flat]

    def pyarrow_reader():
        rows = 0
        for batch in src.to_reader(max_chunksize=65536):
            rows += batch.num_rows
        assert rows == ROWS

    results = [("rill stream -> pyarrow, batches dropped", best(stream_drop)),
               ("rill stream -> pyarrow, read_all (kept)", best(stream_keep)),
               ("memcpy into reused memory (peer)", best(memcpy_warm)),
               ("memcpy into fresh memory (peer)", best(memcpy_fresh)),
               ("pyarrow's own reader, same batches (peer)", best(pyarrow_reader))]
    print(f"rows={ROWS} columns=5 bytes={nbytes / 1e6:.1f} MB")
    for name, t in results:
        print(f"{name:44s}: {t * 1e3:8.1f} ms  {nbytes / t / 1e9:6.2f} GB/s")
    t_warm = results[2][1]
    t_fresh = results[3][1]
    for name, t in results[:2]:
        print(f"ratio {name} / memcpy: {t_warm / t:.2f}x (reused), {t_fresh / t:.2f}x (fresh)")
    print(f"ratio rill stream (dropped) / pyarrow's own reader: {results[4][1] / results[0][1]:.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
