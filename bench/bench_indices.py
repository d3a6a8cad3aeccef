"""Scalar index build benchmark: ``create_scalar_index`` ours vs pylance 14 on identical copies.

Usage: python bench/bench_indices.py [--rows 10000000] [--reps 3] [--spark]

The source (an int64 column with ~rows/10 distinct values, a low-cardinality int32 column, 1M-row
files, format 2.2) is written once by pylance and copied for every run; runs alternate ours and
pylance. Prints the best time of each and the ratio ours / pylance (target: <= 2), and checks that
pylance answers the same query through both indices. ``--spark`` adds a third side: the
operator's Spark job (``airflow_lance.spark.create_index``, one task per fragment) in an in-process
``local[2]`` session plus the ``CreateIndex`` commit, ratio spark / pylance. Its timed region: the
Spark job (executors read, sort and stage their runs; one merge task reads them back, merges and
writes the index files; the driver writes the staged result) and the commit. Not in it, printed once before the runs as
"Spark start-up": the JVM, the session and the Python workers (the operator's spark-submit pays
about that, plus the submit's own JVM, once per job; pylance has no such cost).
"""

from __future__ import annotations

import argparse
import pathlib
import shutil
import tempfile
import time

import lance as pylance
import numpy as np
import pyarrow as pa

import airflow_lance.core as ours

CASES = [("v", "BTREE"), ("c", "BITMAP")]


def spark_session():  # noqa: ANN201 - pyspark is optional for the other sides
    import os
    import sys

    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    start = time.perf_counter()
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.log.level", "WARN").getOrCreate())
    # start the Python workers (one per slot) too: the operator's spark-submit pays this once per job
    spark.sparkContext.parallelize(range(2), 2).mapPartitions(lambda items: [sum(items)]).collect()
    print(f"Spark start-up (JVM, local[2] session, Python workers; not in the timed runs): "
          f"{time.perf_counter() - start:.2f} s", flush=True)
    return spark


def spark_create_index(spark, path: str, params: dict) -> None:  # noqa: ANN001
    """The operator's Spark mode without spark-submit: the create_index task job, then the commit."""
    from airflow_lance.spark.task_spec import TaskJobSpec
    from airflow_lance.spark.tasks import run_task_job

    ds = ours.dataset(path)
    spec = TaskJobSpec(kind="create_index", uri=path, tasks=tuple((f.fragment_id,) for f in ds.get_fragments()),
                       staging_root=path, staging_name="_airflow_staging/bench.json",
                       params={"read_version": ds.version, "replace": False, **params})
    staged = run_task_job(spark, spec)
    checked = ours.check_index(ds, **{k: v for k, v in params.items() if k != "seed"})
    operation = ours.LanceOperation.CreateIndex(new_indices=[ours.decode_index(staged.info["index"])],
                                                removed_indices=checked.removed)
    ours.LanceDataset.commit(path, operation, ds.version)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--spark", action="store_true")
    args = parser.parse_args()
    spark = spark_session() if args.spark else None
    rng = np.random.default_rng(0)
    table = pa.table({"v": rng.integers(0, max(1, args.rows // 10), args.rows),
                      "c": rng.integers(0, 100, args.rows).astype(np.int32)})
    with tempfile.TemporaryDirectory() as tmp:
        work = pathlib.Path(tmp)
        source = str(work / "source")
        pylance.write_dataset(table, source, max_rows_per_file=1_000_000)
        for column, index_type in CASES:
            sides = [("ours", ours), ("pylance", pylance), *([("spark", None)] if spark else [])]
            best = {name: float("inf") for name, _ in sides}
            for rep in range(args.reps):
                for name, lib in sides:
                    path = str(work / f"{name}-{rep}")
                    shutil.rmtree(path, ignore_errors=True)
                    shutil.copytree(source, path)
                    start = time.perf_counter()
                    if lib is None:
                        spark_create_index(spark, path, {"column": column, "index_type": index_type})
                    else:
                        lib.dataset(path).create_scalar_index(column, index_type)
                    best[name] = min(best[name], time.perf_counter() - start)
                    flt = f"{column} = 7"
                    count = pylance.dataset(path).count_rows(flt)
                    assert count == pylance.dataset(source).count_rows(flt), (name, count)
            spark_text = (f"; spark job + commit {best['spark']:.2f} s, ratio {best['spark'] / best['pylance']:.2f}"
                          if spark else "")
            print(f"{index_type} on {args.rows} rows: ours {best['ours']:.2f} s, pylance {best['pylance']:.2f} s, "
                  f"ratio {best['ours'] / best['pylance']:.2f}{spark_text}")


if __name__ == "__main__":
    main()
