"""Spark read benchmark: ``read_lance`` full scan vs pylance ``to_table`` vs Spark reading Parquet.

Usage: python bench/bench_spark_read.py [--rows 2000000] [--files 8] [--reps 1] [--warmup 1]
                                        [--variant wide] [--arrow-unchecked] [--json out.json]

The wide anchor table (id, ts, category, text, score, tags, 128-d embedding; bench/anchor_data.py)
is written once by pylance as a Lance dataset (``--files`` fragments) and once by pyarrow as
Parquet (the same number of files, snappy). Then, in one local[2] SparkSession, interleaved
rounds (bench_spark_write.timed_rounds; page cache left warm, as both readers run from it):

* ``read_lance``: ``airflow_lance.spark.read_lance(spark, uri)`` into Spark's ``noop`` sink
  (every row and column reaches the JVM: one Spark task per fragment, read by the core);
* ``spark parquet``: ``spark.read.parquet(dir)`` into the ``noop`` sink (Spark's own reader);
* ``pylance to_table``: ``lance.dataset(uri).to_table()`` in the driver process (pylance's Rust
  reader, all cores).

``--arrow-unchecked`` starts the JVM with Arrow Java's documented speed switches
(``ARROW_ENABLE_UNSAFE_MEMORY_ACCESS=true``, ``ARROW_ENABLE_NULL_CHECK_FOR_GET=false``: no bounds
or null check per value read from an Arrow vector), which only the ``read_lance`` path uses: Spark
turns every row of ``mapInArrow``'s Arrow batches into an ``UnsafeRow`` value by value (128 calls
per embedding), which costs the JVM about as much CPU as Spark's whole Parquet read.

Each case also reports its CPU seconds (the driver process, the Spark JVM and its Python
workers), steadier than wall time on a shared machine. Ratios > 1 mean ``read_lance`` is faster. Target (issue 18): ``read_lance`` at least as fast as
Spark's Parquet read and as pylance's ``to_table`` on one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from anchor_data import anchor_table  # noqa: E402
from bench_spark_write import timed_rounds  # noqa: E402


def _tree_cpu_seconds() -> float:
    """User + system CPU seconds of this process's descendants (the Spark JVM and its Python
    workers, which Spark reuses), from /proc; on a shared machine CPU seconds vary less than
    wall time."""
    clock = os.sysconf("SC_CLK_TCK")
    parents, cpu = {}, {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = pathlib.Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        parents[int(entry)] = int(fields[1])
        cpu[int(entry)] = sum(int(v) for v in fields[11:15]) / clock
    children: dict[int, list[int]] = {}
    for pid, parent in parents.items():
        children.setdefault(parent, []).append(pid)
    total, stack = 0.0, list(children.get(os.getpid(), []))
    while stack:
        pid = stack.pop()
        total += cpu[pid]
        stack.extend(children.get(pid, []))
    return total


def with_cpu(fn, spent: list[float]):
    """``fn`` that appends the CPU seconds of each call to ``spent`` (this process and its
    descendants)."""
    def run() -> None:
        start = _tree_cpu_seconds() + time.process_time()
        fn()
        spent.append(_tree_cpu_seconds() + time.process_time() - start)
    return run


def write_inputs(table: pa.Table, tmp: pathlib.Path, files: int) -> tuple[str, str]:
    import lance as pylance

    rows_per_file = -(-table.num_rows // files)
    uri = str(tmp / "wide.lance")
    pylance.write_dataset(table, uri, max_rows_per_file=rows_per_file)
    parquet_dir = tmp / "wide.parquet"
    parquet_dir.mkdir()
    for index, start in enumerate(range(0, table.num_rows, rows_per_file)):
        pq.write_table(table.slice(start, rows_per_file), parquet_dir / f"part-{index:04d}.parquet",
                       compression="snappy")
    return uri, str(parquet_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first (JVM and Python workers warm)")
    parser.add_argument("--variant", default="wide", choices=["wide", "narrow"])
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--arrow-unchecked", action="store_true",
                        help="JVM without Arrow's per-value bounds and null checks (see above)")
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if args.arrow_unchecked:  # read by Arrow Java when its classes load (the local JVM inherits them)
        os.environ["ARROW_ENABLE_UNSAFE_MEMORY_ACCESS"] = "true"
        os.environ["ARROW_ENABLE_NULL_CHECK_FOR_GET"] = "false"
    import lance as pylance
    from pyspark.sql import SparkSession

    from airflow_lance.spark import read_lance

    table = anchor_table(args.rows, wide=(args.variant == "wide"))
    mb = table.nbytes / 1e6
    spark = (
        SparkSession.builder.master("local[2]").appName("bench-spark-read")
        .config("spark.driver.memory", args.driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    results = []
    try:
        with tempfile.TemporaryDirectory(prefix="lance-spark-read-bench-") as tmp:
            uri, parquet_dir = write_inputs(table, pathlib.Path(tmp), args.files)
            del table
            rows = args.rows
            assert read_lance(spark, uri).count() == rows == spark.read.parquet(parquet_dir).count()

            def noop(df) -> None:
                df.write.format("noop").mode("overwrite").save()

            cpu: dict[str, list[float]] = {"read_lance": [], "spark parquet": [], "pylance to_table": []}
            cases = {
                "read_lance": (with_cpu(lambda: noop(read_lance(spark, uri)), cpu["read_lance"]), None),
                "spark parquet": (with_cpu(lambda: noop(spark.read.parquet(parquet_dir)), cpu["spark parquet"]),
                                  None),
                "pylance to_table": (with_cpu(lambda: pylance.dataset(uri).to_table(), cpu["pylance to_table"]),
                                     None),
            }
            print(f"spark {spark.version} local[2], {args.variant} {rows:,} rows ({mb:,.0f} MB in Arrow), "
                  f"{args.files} fragments / Parquet files{', Arrow unchecked' if args.arrow_unchecked else ''}, median of {args.reps} round(s) after {args.warmup} "
                  f"warm-up round(s)")
            times = timed_rounds(cases, args.reps, args.warmup)
            median = {case: statistics.median(values) for case, values in times.items()}
            cpu_median = {case: statistics.median(values[-len(times[case]):]) for case, values in cpu.items()}
            for case, seconds in median.items():
                results.append({"case": case, "seconds": seconds, "cpu_seconds": cpu_median[case],
                                "mb_s": mb / seconds, "rows_s": rows / seconds})
                print(f"{case:40s} {seconds:8.2f} s {mb / seconds:8.1f} MB/s {rows / seconds:>12,.0f} rows/s "
                      f"{cpu_median[case]:8.2f} CPU s  (all rounds: {' '.join(f'{v:.2f}' for v in times[case])} s)")
            for other in ("spark parquet", "pylance to_table"):
                ratio = median[other] / median["read_lance"]
                cpu_ratio = cpu_median[other] / cpu_median["read_lance"]
                results.append({"case": f"ratio: read_lance vs {other} (x faster)", "ratio": ratio,
                                "cpu_ratio": cpu_ratio})
                print(f"ratio: read_lance vs {other:27s} {ratio:8.2f}x  (CPU seconds: {cpu_ratio:.2f}x)")
    finally:
        spark.stop()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
