"""Spark read benchmark: ``read_lance`` full scan vs pylance ``to_table`` vs Spark reading Parquet.

Usage: python bench/bench_spark_read.py [--rows 2000000] [--files 8] [--reps 1] [--warmup 0]
                                        [--variant wide] [--json out.json]

The wide anchor table (id, ts, category, text, score, tags, 128-d embedding; bench/anchor_data.py)
is written once by pylance as a Lance dataset (``--files`` fragments) and once by pyarrow as
Parquet (the same number of files, snappy). Then, in one local[2] SparkSession, interleaved
rounds (bench_spark_write.timed_rounds; page cache left warm, as both readers run from it):

* ``read_lance``: ``airflow_lance.spark.read_lance(spark, uri)`` into Spark's ``noop`` sink
  (every row and column reaches the JVM: one Spark task per fragment, read by the core);
* ``spark parquet``: ``spark.read.parquet(dir)`` into the ``noop`` sink (Spark's own reader);
* ``pylance to_table``: ``lance.dataset(uri).to_table()`` in the driver process (pylance's Rust
  reader, all cores).

Ratios > 1 mean ``read_lance`` is faster. Target (issue 18): ``read_lance`` at least as fast as
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

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
from anchor_data import anchor_table  # noqa: E402
from bench_spark_write import timed_rounds  # noqa: E402


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
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--variant", default="wide", choices=["wide", "narrow"])
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
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

            cases = {
                "read_lance": (lambda: noop(read_lance(spark, uri)), None),
                "spark parquet": (lambda: noop(spark.read.parquet(parquet_dir)), None),
                "pylance to_table": (lambda: pylance.dataset(uri).to_table(), None),
            }
            print(f"spark {spark.version} local[2], {args.variant} {rows:,} rows ({mb:,.0f} MB in Arrow), "
                  f"{args.files} fragments / Parquet files, median of {args.reps} round(s) after {args.warmup} "
                  f"warm-up round(s)")
            times = timed_rounds(cases, args.reps, args.warmup)
            median = {case: statistics.median(values) for case, values in times.items()}
            for case, seconds in median.items():
                results.append({"case": case, "seconds": seconds, "mb_s": mb / seconds, "rows_s": rows / seconds})
                print(f"{case:40s} {seconds:8.2f} s {mb / seconds:8.1f} MB/s {rows / seconds:>12,.0f} rows/s")
            for other in ("spark parquet", "pylance to_table"):
                ratio = median[other] / median["read_lance"]
                results.append({"case": f"ratio: read_lance vs {other} (x faster)", "ratio": ratio})
                print(f"ratio: read_lance vs {other:27s} {ratio:8.2f}x")
    finally:
        spark.stop()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
