"""Commit benchmark: append latency, open-latest vs version count, delete, side by side with pylance.

Usage: python bench/bench_commits.py [--appends 200] [--versions 200,2000] [--rows 2000000]

* 200 appends of 1,000 rows, each a fresh write_dataset(mode="append") (URI re-opened):
  median and p90 latency per commit, ours vs pylance (format 2.0 for both).
* Open-latest (+ count_rows) on datasets with 200 and 2,000 versions (V2 names).
* delete("id % 10 = 0") on 2M rows (narrow anchor table), ours vs pylance.
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import lance as pylance  # noqa: E402

import airflow_lance.core as ours  # noqa: E402
from anchor_data import anchor_table  # noqa: E402


def batch(start: int, rows: int) -> pa.Table:
    ids = np.arange(start, start + rows, dtype=np.int64)
    return pa.table({"id": ids, "value": pa.array(ids * 0.5), "name": pa.array(np.char.add("n", ids.astype(str)))})


def append_latencies(engine, path: str, appends: int) -> list[float]:
    engine.write_dataset(batch(0, 1000), path, data_storage_version="2.0")
    times = []
    for i in range(appends):
        start = time.perf_counter()
        engine.write_dataset(batch((i + 1) * 1000, 1000), path, mode="append")
        times.append(time.perf_counter() - start)
    return times


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def open_latest(engine, path: str, reps: int = 50) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        engine.dataset(path).count_rows()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def grow_versions(path: str, target: int) -> None:
    ds = ours.dataset(path)
    empty = ours.LanceOperation.Append([])
    version = ds.version
    while version < target:
        version = ours.LanceDataset.commit(path, empty, version).version


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--appends", type=int, default=200)
    parser.add_argument("--versions", default="200,2000")
    parser.add_argument("--rows", type=int, default=2_000_000)
    args = parser.parse_args()
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="lance-commit-bench-"))
    try:
        mine = append_latencies(ours, str(tmp / "ours"), args.appends)
        theirs = append_latencies(pylance, str(tmp / "pylance"), args.appends)
        print(f"append commit latency ({args.appends} x 1,000 rows), median / p90:")
        print(f"  ours    {statistics.median(mine) * 1e3:7.2f} ms / {pct(mine, 90) * 1e3:7.2f} ms")
        print(f"  pylance {statistics.median(theirs) * 1e3:7.2f} ms / {pct(theirs, 90) * 1e3:7.2f} ms")
        print(f"  ratio (pylance / ours, >= 1 means we are faster): {statistics.median(theirs) / statistics.median(mine):.2f}")
        for count in (int(v) for v in args.versions.split(",")):
            path = str(tmp / f"versions-{count}")
            ours.write_dataset(batch(0, 10), path, data_storage_version="2.0")
            grow_versions(path, count)
            print(f"open latest + count_rows at {count} versions: ours {open_latest(ours, path) * 1e3:.2f} ms, "
                  f"pylance {open_latest(pylance, path) * 1e3:.2f} ms")
        table = anchor_table(args.rows, wide=False)
        timings = {}
        for name, engine in (("ours", ours), ("pylance", pylance)):
            runs = []
            for rep in range(3):
                path = str(tmp / f"delete-{name}-{rep}")
                engine.write_dataset(table, path, data_storage_version="2.0")
                ds = engine.dataset(path)
                start = time.perf_counter()
                ds.delete("id % 10 = 0")
                runs.append(time.perf_counter() - start)
                shutil.rmtree(path)
            timings[name] = statistics.median(runs)
        print(f"delete('id % 10 = 0') on {args.rows:,} rows: ours {timings['ours'] * 1e3:.1f} ms, "
              f"pylance {timings['pylance'] * 1e3:.1f} ms, ratio ours/pylance {timings['ours'] / timings['pylance']:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
