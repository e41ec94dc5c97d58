"""Peers for the CSV and SQLite benchmarks (run one measurement per process so that the
peak memory is its own).

  gen-csv PATH MB        write a synthetic CSV of mixed columns (ints, floats, quoted strings)
  gen-sqlite PATH ROWS   write a SQLite table t(id INTEGER PRIMARY KEY, a INTEGER, b REAL, s TEXT)
  pandas-csv PATH | pyarrow-csv PATH THREADS | polars-csv PATH THREADS | duckdb-csv PATH THREADS
  split-csv PATH N       split a CSV into N files of consecutive rows (PATH.0.csv, ...), each with
                         the header; prints their paths joined by commas
  pandas-csv-files PATHS | polars-csv-files PATHS THREADS
                         read the comma-separated files as one table (pandas.concat of read_csv;
                         polars.scan_csv of the list, collected)
  sqlite-loop PATH | pandas-sql PATH       read every row of t in shuffled order
  duckdb-sqlite PATH THREADS BATCH         read every row of t in order with DuckDB's sqlite_scan,
                                           streamed as Arrow record batches of BATCH rows
Each measurement prints: NAME seconds=S cpu_s=C rows=N rss_mb=M (CPU seconds of the process, user
and system, over the measurement), or NAME
skipped: WHY when the peer is not installed.
"""
import os
import random
import resource
import sqlite3
import sys
import time


_cpu0 = 0.0


def csv_start():
    """The wall clock at the start of a CSV measurement (its CPU time is counted from here too)."""
    global _cpu0
    _cpu0 = cpu_now()
    return time.perf_counter()


def report(name, t0, rows):
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"{name} seconds={time.perf_counter() - t0:.3f} cpu_s={cpu_now() - _cpu0:.3f} rows={rows} rss_mb={rss:.1f}")


def gen_csv(path, mb):
    rnd = random.Random(1)
    words = ["alpha", "beta", "gam,ma", 'say "hi"', "delta", "e", "zeta eta", "theta"]
    target = int(mb) << 20
    with open(path, "w", newline="") as f:
        f.write("id,count,price,ratio,name,tag\n")
        size, i, buf = 0, 0, []
        while size < target:
            w = words[rnd.randrange(len(words))]
            name = '"' + w.replace('"', '""') + '"' if ("," in w or '"' in w) else w
            line = f"{i},{rnd.randrange(1000000)},{rnd.random() * 1000:.4f},{rnd.random():.6f},{name},t{i % 97}\n"
            buf.append(line)
            size += len(line)
            i += 1
            if len(buf) == 100000:
                f.write("".join(buf))
                buf.clear()
        f.write("".join(buf))


# ---------------------------------------------------------------- SQLite peers

def report_sqlite(name, t0, c0, rows):
    ru = resource.getrusage(resource.RUSAGE_SELF)
    cpu = ru.ru_utime + ru.ru_stime - c0
    print(f"{name} seconds={time.perf_counter() - t0:.3f} cpu_s={cpu:.3f} rows={rows} "
          f"rss_mb={ru.ru_maxrss / 1024.0:.1f}")


def cpu_now():
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def duckdb_connect(threads):
    """A DuckDB connection with the sqlite extension loaded, or None (with the reason printed)
    when duckdb or its extension is not available."""
    try:
        import duckdb
    except ImportError as e:
        print(f"duckdb_sqlite_scan skipped: cannot import duckdb ({e})")
        return None
    config = {"threads": int(threads)}
    try:  # the extension as a Python package (duckdb-ext-sqlite), when installed
        import os
        import duckdb_ext
        config["extension_directory"] = os.path.join(list(duckdb_ext.__path__)[0], "extensions")
    except ImportError:
        pass
    con = duckdb.connect(config=config)
    try:
        con.execute("LOAD sqlite")
    except Exception:
        try:
            con.execute("INSTALL sqlite")
            con.execute("LOAD sqlite")
        except Exception as e:
            print(f"duckdb_sqlite_scan skipped: no sqlite extension for duckdb {duckdb.__version__} "
                  f"({str(e).splitlines()[0]})")
            return None
    return con


def duckdb_sqlite(path, threads, batch):
    con = duckdb_connect(threads)
    if con is None:
        return
    t0, c0 = time.perf_counter(), cpu_now()
    reader = con.execute("SELECT * FROM sqlite_scan(?, 't')", [path]).fetch_record_batch(int(batch))
    rows = total = 0
    for rb in reader:
        rows += rb.num_rows
        total += rb.column(0).to_numpy(zero_copy_only=False).sum()
    report_sqlite("duckdb_sqlite_scan", t0, c0, rows)


def gen_sqlite(path, rows):
    db = sqlite3.connect(path)
    db.execute("DROP TABLE IF EXISTS t")
    db.execute("CREATE TABLE t(id INTEGER PRIMARY KEY, a INTEGER, b REAL, s TEXT)")
    db.executemany("INSERT INTO t VALUES (?, ?, ?, ?)",
                   ((i, i * 7, i * 0.5, f"row{i}") for i in range(1, int(rows) + 1)))
    db.commit()
    db.close()


def import_polars(threads, what):
    """polars using `threads` threads (read when it is imported), or None after printing that
    `what` is skipped."""
    os.environ["POLARS_MAX_THREADS"] = threads
    try:
        import polars as pl
    except ImportError as e:
        print(f"{what} skipped: {e}")
        return None
    return pl


def main():
    cmd, path = sys.argv[1], sys.argv[2]
    if cmd == "gen-csv":
        gen_csv(path, sys.argv[3])
    elif cmd == "gen-sqlite":
        gen_sqlite(path, sys.argv[3])
    elif cmd == "pandas-csv":
        import pandas as pd
        t0 = csv_start()
        df = pd.read_csv(path)
        report("pandas.read_csv", t0, len(df))
    elif cmd == "pyarrow-csv":
        import pyarrow as pa
        import pyarrow.csv as pacsv
        pa.set_cpu_count(int(sys.argv[3]))
        pa.set_io_thread_count(int(sys.argv[3]))
        t0 = csv_start()
        table = pacsv.read_csv(path)
        report("pyarrow.csv.read_csv", t0, table.num_rows)
    elif cmd == "polars-csv":
        pl = import_polars(sys.argv[3], "polars.read_csv")
        if not pl:
            return
        t0 = csv_start()
        df = pl.read_csv(path)
        report("polars.read_csv", t0, df.height)
    elif cmd == "split-csv":
        with open(path, newline="") as f:
            header = f.readline()
            lines = f.readlines()
        n = int(sys.argv[3])
        out = []
        for k in range(n):
            part = f"{path}.{k}.csv"
            with open(part, "w", newline="") as g:
                g.write(header)
                g.writelines(lines[k * len(lines) // n:(k + 1) * len(lines) // n])
            out.append(part)
        print(",".join(out))
    elif cmd == "pandas-csv-files":
        import pandas as pd
        t0 = csv_start()
        df = pd.concat([pd.read_csv(p) for p in path.split(",")], ignore_index=True)
        report("pandas.concat(read_csv)", t0, len(df))
    elif cmd == "polars-csv-files":
        pl = import_polars(sys.argv[3], "polars.scan_csv")
        if not pl:
            return
        t0 = csv_start()
        df = pl.scan_csv(path.split(",")).collect()
        report("polars.scan_csv(files)", t0, df.height)
    elif cmd == "polars-csv-shuffled":
        # a training loop's shuffled batches from polars: the file(s) read whole, then each
        # batch gathered by a permutation (argv: paths joined by commas, threads, batch rows)
        pl = import_polars(sys.argv[3], "polars shuffled")
        if not pl:
            return
        import numpy as np
        batch = int(sys.argv[4])
        t0 = csv_start()
        paths = path.split(",")
        df = pl.read_csv(paths[0]) if len(paths) == 1 else pl.scan_csv(paths).collect()
        perm = np.random.default_rng(1).permutation(df.height)
        rows = 0
        for start in range(0, df.height, batch):
            rows += df[perm[start:start + batch]].height
        report("polars.read_csv+gather" if len(paths) == 1 else "polars.scan_csv(files)+gather", t0, rows)
    elif cmd == "duckdb-csv":
        try:
            import duckdb
        except ImportError as e:
            print(f"duckdb.read_csv skipped: {e}")
            return
        t0 = csv_start()
        con = duckdb.connect()
        con.execute(f"SET threads TO {int(sys.argv[3])}")
        table = con.read_csv(path).fetch_arrow_table()  # every cell parsed into columns
        report("duckdb.read_csv", t0, table.num_rows)
    elif cmd == "duckdb-sqlite":
        duckdb_sqlite(path, sys.argv[3], sys.argv[4])
    elif cmd == "sqlite-loop":
        t0, c0 = time.perf_counter(), cpu_now()
        db = sqlite3.connect(path)
        n = db.execute("SELECT count(*) FROM t").fetchone()[0]
        order = list(range(1, n + 1))
        random.Random(1).shuffle(order)
        cur = db.cursor()
        total = 0
        for rid in order:
            row = cur.execute("SELECT * FROM t WHERE rowid = ?", (rid,)).fetchone()
            total += row[1]
        report_sqlite("python_sqlite3_loop", t0, c0, n)
    elif cmd == "pandas-sql":
        import numpy as np
        import pandas as pd
        t0, c0 = time.perf_counter(), cpu_now()
        db = sqlite3.connect(path)
        df = pd.read_sql("SELECT * FROM t", db)
        perm = np.random.default_rng(1).permutation(len(df))
        rows = 0
        for start in range(0, len(df), 1024):
            rows += len(df.iloc[perm[start:start + 1024]])
        report_sqlite("pandas.read_sql", t0, c0, rows)
    else:
        sys.exit(f"unknown command {cmd}")


if __name__ == "__main__":
    main()
