"""Peers of bench_engine: the same int64 rows through 1/2/4/8 chained "+1" steps as a
Python generator chain and as torch.utils.data.DataLoader(num_workers=2) (not run when its
row count, the second argument, is 0). Prints lines
"case=<name> maps=<k> rows=<n> ns_row=<ns per row> ns_row_stage=<ns per row per stage>"
(a stage is the source or one step), and for the generator chain cpu_ns_row, the process's
CPU time per row (DataLoader's work is in its worker processes: wall time only)."""
import sys
import time


def plus1(g):
    for x in g:
        yield x + 1


def generator_chain(rows, maps):
    g = iter(range(rows))
    for _ in range(maps):
        g = plus1(g)
    t0, c0 = time.perf_counter_ns(), time.process_time_ns()
    s = 0
    for x in g:
        s += x
    dt, dc = time.perf_counter_ns() - t0, time.process_time_ns() - c0
    assert s == rows * (rows - 1) // 2 + maps * rows
    return dt / rows, dc / rows


def dataloader(rows, maps):
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Ints(Dataset):
        def __len__(self):
            return rows

        def __getitem__(self, i):
            v = i
            for _ in range(maps):
                v = v + 1
            return v

    loader = DataLoader(Ints(), batch_size=1024, num_workers=2)
    t0 = time.perf_counter_ns()
    s = 0
    for batch in loader:
        s += int(torch.sum(batch))
    dt = time.perf_counter_ns() - t0
    assert s == rows * (rows - 1) // 2 + maps * rows
    return dt / rows


def main():
    gen_rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
    dl_rows = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
    for maps in (1, 2, 4, 8):
        runs = [generator_chain(gen_rows, maps) for _ in range(2)]
        ns, cpu = min(r[0] for r in runs), min(r[1] for r in runs)
        print(f"case=generator maps={maps} rows={gen_rows} ns_row={ns:.3f} ns_row_stage={ns / (maps + 1):.3f} "
              f"cpu_ns_row={cpu:.3f}", flush=True)
    if dl_rows <= 0:
        return
    try:
        import torch  # noqa: F401
    except ImportError:
        print("skipped: torch not installed (Debian package python3-torch)", flush=True)
        return
    for maps in (1, 2, 4, 8):
        ns = dataloader(dl_rows, maps)
        print(f"case=dataloader maps={maps} rows={dl_rows} ns_row={ns:.3f} ns_row_stage={ns / (maps + 1):.3f}",
              flush=True)


if __name__ == "__main__":
    main()
