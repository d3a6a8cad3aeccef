"""Add-columns benchmark: a computed 128-float column for every row, on Spark vs pylance.

Usage: python bench/bench_spark_add_columns.py [--rows 2000000] [--rows-per-file 250000] [--json out.json]

The narrow anchor table (bench/anchor_data.py: id, ts, category, text, score, tags) is written
once by pylance (``--rows-per-file`` rows per fragment) and copied. Then, one run each:

* ``spark add-columns job``: what ``LanceSparkAddColumnsOperator`` runs, in one local[2]
  SparkSession (already started, a warm-up job run): the ``add_columns`` task job
  (:func:`airflow_lance.spark.tasks.run_task_job`: the driver plans, one Spark task per fragment
  reads ``id`` and ``score``, calls ``bench_add_columns_udf.embed`` and writes the fragment's new
  file) plus the operator's commit (one Merge);
* ``pylance add_columns``: ``LanceDataset.add_columns(embed, read_columns=["id", "score"])`` on
  the copy;
* ``core add_columns``: the same through airflow_lance.core in this process (for reference).

The three results are compared (the ``embedding`` columns must be equal). Ratio > 1: Spark is
faster. Target (issue 18): at least as fast as pylance on one machine.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
import tempfile
import time

BENCH = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

import lance as pylance  # noqa: E402
from anchor_data import anchor_table  # noqa: E402
from bench_add_columns_udf import embed  # noqa: E402

import airflow_lance.core as lance  # noqa: E402
from airflow_lance.spark.task_spec import TaskJobSpec  # noqa: E402
from airflow_lance.spark.tasks import run_task_job  # noqa: E402


def spark_add_columns(spark, uri: str) -> lance.LanceDataset:  # type: ignore[no-untyped-def]
    ds = lance.dataset(uri)
    spec = TaskJobSpec(kind="add_columns", uri=uri, tasks=tuple({"fragment_id": f.fragment_id}
                                                                for f in ds.get_fragments()),
                       staging_root=uri, staging_name="_airflow_staging/bench.json",
                       params={"read_version": ds.version, "function": "bench_add_columns_udf:embed",
                               "input_columns": ["id", "score"]})
    staged = run_task_job(spark, spec)
    plan = lance.AddColumnsPlan.from_json(staged.info["plan"])
    written = [lance.FragmentMetadata.from_json(r) for r in staged.results]
    operation, version = plan.operation(lance.dataset(uri), written)
    return lance.LanceDataset.commit(uri, operation, version)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--rows-per-file", type=int, default=250_000)
    parser.add_argument("--driver-memory", default="6g")
    parser.add_argument("--skip-core", action="store_true", help="skip the in-process core run")
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join([str(BENCH), str(BENCH.parent), os.environ.get("PYTHONPATH", "")])
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("bench-spark-add-columns")
             .config("spark.driver.memory", args.driver_memory).config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="lance-add-columns-bench-") as tmp:
        base = str(pathlib.Path(tmp) / "base.lance")
        table = anchor_table(args.rows, wide=False)
        pylance.write_dataset(table, base, max_rows_per_file=args.rows_per_file)
        del table
        copies = {name: str(pathlib.Path(tmp) / f"{name}.lance") for name in ("spark", "pylance", "core")}
        for path in copies.values():
            shutil.copytree(base, path)
        fragments = len(pylance.dataset(base).get_fragments())
        spark.sparkContext.parallelize(range(4), 2).map(lambda x: x).count()  # warm-up: workers started
        print(f"spark {spark.version} local[2], rows={args.rows:,} in {fragments} fragments, one run each")

        os.sync()
        start = time.perf_counter()
        spark_add_columns(spark, copies["spark"])
        results["spark add-columns job (job + commit)"] = time.perf_counter() - start

        os.sync()
        start = time.perf_counter()
        pylance.dataset(copies["pylance"]).add_columns(embed, read_columns=["id", "score"])
        results["pylance add_columns"] = time.perf_counter() - start

        if not args.skip_core:
            os.sync()
            start = time.perf_counter()
            lance.dataset(copies["core"]).add_columns(embed, read_columns=["id", "score"])
            results["core add_columns (one process)"] = time.perf_counter() - start

        reference = pylance.dataset(copies["pylance"]).to_table(columns=["embedding"])
        for name in ("spark", *(() if args.skip_core else ("core",))):
            got = pylance.dataset(copies[name]).to_table(columns=["embedding"])
            assert got.equals(reference), f"{name} differs from pylance"
        size = int(pylance.dataset(copies["spark"]).versions()[-1]["metadata"]["total_files_size"])
    spark.stop()
    for name, seconds in results.items():
        print(f"{name:45s} {seconds:8.2f} s  {args.rows / seconds / 1e6:6.2f} M rows/s")
    ratio = results["pylance add_columns"] / results["spark add-columns job (job + commit)"]
    print(f"{'ratio: pylance / spark (x faster on spark)':45s} {ratio:8.2f}")
    print(f"dataset after: {size / 1e6:.0f} MB on disk; embedding columns equal in all runs")
    if args.json:
        args.json.write_text(json.dumps({"rows": args.rows, "fragments": fragments, "seconds": results,
                                         "ratio_pylance_over_spark": ratio}, indent=2))


if __name__ == "__main__":
    main()
