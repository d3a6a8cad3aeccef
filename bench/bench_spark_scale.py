"""Scale benchmark: an N GB write (ids and 256-float32 embeddings) through LanceSparkWriteOperator on
local[2] and on a standalone cluster (a master and two workers on this machine), with the peak RSS
of the driver JVM, the PySpark driver, executor JVMs and Python workers (sampled from /proc every
0.5 s); then the first --compare-gb of the same files written by both the operator and Spark's own
Parquet write, in the same run. The source: N GB of Parquet files generated with numpy before the
writes (not timed).

Usage: python bench/bench_spark_scale.py [--gb 8] [--files 32] [--compare-gb 1] [--where local,cluster]

It runs ``tests/airflow/operators/test_spark_scale.py``'s 8 GB test (the same code, the same
assertions: exact ids, a sample of embeddings checked against values recomputed there, the RSS
bound) and prints one line per case. Needs about 2.2x the size free on the temporary directory's
disk (the source, then one copy at a time). Ratios > 1: the Lance
write is faster.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=8.0)
    parser.add_argument("--files", type=int, default=32)
    parser.add_argument("--compare-gb", type=float, default=1.0)
    parser.add_argument("--where", default="local,cluster")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = pathlib.Path(tmp) / "report.jsonl"
        env = {**os.environ, "LANCE_SCALE_GB": str(args.gb), "LANCE_SCALE_FILES": str(args.files),
               "LANCE_SCALE_COMPARE_GB": str(args.compare_gb),
               "LANCE_SCALE_REPORT": str(report), "PYTHONPATH": str(ROOT)}
        test = "tests/airflow/operators/test_spark_scale.py::test_an_8_gb_write_stays_under_the_memory_bound_and_beats"
        tests = [f"{test}_spark_parquet[{where}]" for where in args.where.split(",")]
        command = [sys.executable, "-m", "pytest", "-q", "--run-slow", "-p", "no:cacheprovider", *tests]
        status = subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
        for line in report.read_text().splitlines() if report.exists() else []:
            r = json.loads(line)
            source, lance, compare = r["source"], r["lance"], r["compare"]

            def rss(run):  # type: ignore[no-untyped-def]
                return ", ".join(f"{k} {v['peak_rss_mib']} MiB (x{v['processes']})" for k, v in run["rss"].items())

            arrow = source["arrow_bytes"]
            print(f"{r['where']}: {arrow / 1e9:.2f} GB Arrow ({source['rows']:,} rows, {source['files']} Parquet "
                  f"files, {source['bytes'] / 1e9:.2f} GB, generated in {source['seconds']:.0f} s) -> Lance "
                  f"{lance['bytes'] / 1e9:.2f} GB in {lance['job_seconds']:.1f} s ({arrow / 1e6 / lance['job_seconds']:.0f}"
                  f" MB/s, task {lance['task_seconds']:.0f} s, reading {lance['reader']}); peak RSS: {rss(lance)}")
            c_lance, c_parquet, c_arrow = compare["lance"], compare["parquet"], compare["arrow_bytes"]
            print(f"  same run, the first {compare['files']} files ({c_arrow / 1e9:.2f} GB, {compare['rows']:,} rows): "
                  f"Lance {c_lance['job_seconds']:.1f} s ({c_arrow / 1e6 / c_lance['job_seconds']:.0f} MB/s), Spark "
                  f"Parquet {c_parquet['bytes'] / 1e9:.2f} GB in {c_parquet['job_seconds']:.1f} s "
                  f"({c_arrow / 1e6 / c_parquet['job_seconds']:.1f} MB/s): Lance {compare['lance_speedup_vs_parquet']}x "
                  f"faster; peak RSS Lance: {rss(c_lance)}; Parquet: {rss(c_parquet)}")
        sys.exit(status)


if __name__ == "__main__":
    main()
