"""Add-columns benchmark: a computed 128-float column for every row, on Spark vs pylance.

Usage: python bench/bench_spark_add_columns.py [--rows 2000000] [--rows-per-file 250000] [--repeats 3]
                                              [--json out.json]

The narrow anchor table (bench/anchor_data.py: id, ts, category, text, score, tags) is written
once by pylance (``--rows-per-file`` rows per fragment). ``--repeats`` rounds, each on fresh copies,
the order of the sides alternating between rounds; the best time of each side is compared:

* ``spark add-columns job``: what ``LanceSparkAddColumnsOperator`` runs, in one local[2]
  SparkSession (already started, a warm-up job run on a small dataset): the ``add_columns`` task job
  (:func:`airflow_lance.spark.tasks.run_task_job`: the driver plans, one Spark task per fragment
  reads ``id`` and ``score``, calls ``bench_add_columns_udf.embed`` and writes the fragment's new
  file) plus the operator's commit (one Merge);
* ``pylance add_columns``: ``LanceDataset.add_columns(embed, read_columns=["id", "score"])`` on
  the copy;
* ``core add_columns``: the same through airflow_lance.core in this process (for reference).

The results are compared in every round (the ``embedding`` columns must be equal). Ratio > 1: Spark is
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
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds; best of each side")
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
    names = {"spark": "spark add-columns job (job + commit)", "pylance": "pylance add_columns",
             "core": "core add_columns (one process)"}
    sides = ["spark", "pylance"] + ([] if args.skip_core else ["core"])
    times: dict[str, list[float]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory(prefix="lance-add-columns-bench-") as tmp:
        base = str(pathlib.Path(tmp) / "base.lance")
        table = anchor_table(args.rows, wide=False)
        pylance.write_dataset(table, base, max_rows_per_file=args.rows_per_file)
        del table
        fragments = len(pylance.dataset(base).get_fragments())
        spark.sparkContext.parallelize(range(4), 2).map(lambda x: x).count()  # warm-up: workers started
        warm = str(pathlib.Path(tmp) / "warm.lance")
        pylance.write_dataset(anchor_table(20_000, wide=False), warm, max_rows_per_file=10_000)
        spark_add_columns(spark, warm)  # warm-up: the job's imports in the Python workers, untimed
        print(f"spark {spark.version} local[2], rows={args.rows:,} in {fragments} fragments, "
              f"{args.repeats} interleaved rounds (best of each)")
        for round_ in range(args.repeats):
            order = sides if round_ % 2 == 0 else sides[::-1]
            copies = {side: str(pathlib.Path(tmp) / f"{side}-{round_}.lance") for side in sides}
            for side in order:
                shutil.copytree(base, copies[side])
                os.sync()
                start = time.perf_counter()
                if side == "spark":
                    spark_add_columns(spark, copies[side])
                elif side == "pylance":
                    pylance.dataset(copies[side]).add_columns(embed, read_columns=["id", "score"])
                else:
                    lance.dataset(copies[side]).add_columns(embed, read_columns=["id", "score"])
                times[side].append(time.perf_counter() - start)
            reference = pylance.dataset(copies["pylance"]).to_table(columns=["embedding"])
            for side in sides:
                if side != "pylance":
                    got = pylance.dataset(copies[side]).to_table(columns=["embedding"])
                    assert got.equals(reference), f"{side} differs from pylance"
            size = int(pylance.dataset(copies["spark"]).versions()[-1]["metadata"]["total_files_size"])
            for path in copies.values():
                shutil.rmtree(path)
    results = {names[side]: min(values) for side, values in times.items()}
    spark.stop()
    for name, seconds in results.items():
        print(f"{name:45s} {seconds:8.2f} s  {args.rows / seconds / 1e6:6.2f} M rows/s")
    ratio = results["pylance add_columns"] / results["spark add-columns job (job + commit)"]
    print(f"{'ratio: pylance / spark (x faster on spark)':45s} {ratio:8.2f}")
    print(f"all runs: " + ", ".join(f"{side} {[round(t, 2) for t in values]}" for side, values in times.items()))
    print(f"dataset after: {size / 1e6:.0f} MB on disk; embedding columns equal in all runs")
    if args.json:
        args.json.write_text(json.dumps({"rows": args.rows, "fragments": fragments, "seconds": results,
                                         "all_runs": times, "repeats": args.repeats,
                                         "ratio_pylance_over_spark": ratio}, indent=2))


if __name__ == "__main__":
    main()
