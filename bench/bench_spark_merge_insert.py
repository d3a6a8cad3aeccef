"""Merge insert on Spark vs pylance's ``merge_insert``: 200k changed + 100k new rows into 2M.

Usage: python bench/bench_spark_merge_insert.py [--rows 2000000] [--changed 200000] [--new 100000]
                                                [--partitions N] [--repeats 3] [--submit]
                                                [--json out.json]

Two identical copies of a ``--rows`` dataset (``id`` int64, ``value`` float64, ``label`` string,
``embedding`` fixed_size_list<float32>[16]; 1M-row fragments, as pylance writes by default), and a
Parquet source with ``--changed`` existing ids spread over the table and ``--new`` new ones.
``--repeats`` interleaved rounds on fresh copies (after an untimed warm-up of the Spark session
on a small dataset); the best time of each side is compared:

* ``spark``: the merge-insert job (``airflow_lance.spark.merge_insert.run_merge_insert`` in a
  ``local[2]`` session: read the target's keys and row addresses, join, write the new fragments and
  deletion vectors on the executors) plus the operator's commit of the ``Update``;
* ``pylance``: ``pq.read_table(source)`` then ``merge_insert("id").when_matched_update_all()
  .when_not_matched_insert_all().execute(...)``.

Both results are checked equal in every round (counts and the sorted table). Ratio > 1: Spark is
faster. ``--submit`` also times an empty ``spark-submit`` (JVM start, session, one task, stop): the
fixed cost the operator adds to the job.
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

import lance as pylance
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import airflow_lance.core as lance
from airflow_lance.spark.merge_insert import run_merge_insert
from airflow_lance.spark.merge_insert_spec import MergeInsertJobSpec
from airflow_lance.spark.spec import SourceSpec

DIM = 16


def make_table(ids: np.ndarray, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    values = rng.random(ids.size)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "value": pa.array(values),
        "label": pa.array(np.char.add("label-", (ids % 100_000).astype(str)).astype(object)),
        "embedding": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.random(ids.size * DIM, dtype=np.float32)), DIM),
    })


def spark_merge(spark, uri: str, source: str, root: str, partitions: int | None) -> dict[str, int]:  # noqa: ANN001
    ds = lance.dataset(uri)
    spec = MergeInsertJobSpec(uri=uri, read_version=ds.version, source=SourceSpec.from_fields(path=source),
                              on=("id",), staging_root=root, staging_name="staged.json", num_partitions=partitions)
    result = run_merge_insert(spark, spec)
    lance.LanceDataset.commit(uri, lance.LanceOperation.Update(
        removed_fragment_ids=list(result.removed_fragment_ids), updated_fragments=list(result.updated_fragments),
        new_fragments=list(result.new_fragments),
        fields_for_preserving_frag_bitmap=list(result.fields_for_preserving_frag_bitmap)), ds.version)
    return result.counts


def spark_submit_seconds(root: str) -> float:
    """Seconds of a spark-submit (local[2]) whose job only starts a session and stops: the fixed
    cost the operator pays on top of the job."""
    import subprocess

    script = pathlib.Path(root) / "noop_job.py"
    script.write_text("from pyspark.sql import SparkSession\n"
                      "spark = SparkSession.builder.getOrCreate()\n"
                      "spark.sparkContext.parallelize(range(2), 2).count()\n"
                      "spark.stop()\n")
    submit = pathlib.Path(sys.executable).parent / "spark-submit"
    start = time.perf_counter()
    subprocess.run([str(submit), "--master", "local[2]", "--conf", "spark.ui.enabled=false", str(script)],
                   check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--changed", type=int, default=200_000)
    parser.add_argument("--new", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3, help="interleaved rounds; best of each side")
    parser.add_argument("--rows-per-file", type=int, default=1024 * 1024)
    parser.add_argument("--submit", action="store_true", help="also time an empty spark-submit (fixed cost)")
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(pathlib.Path(__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")])
    from pyspark.sql import SparkSession

    root = tempfile.mkdtemp(prefix="bench-merge-insert-")
    try:
        base = f"{root}/base.lance"
        lance.write_dataset(make_table(np.arange(args.rows), 1), base, max_rows_per_file=args.rows_per_file)
        rng = np.random.default_rng(2)
        changed = np.sort(rng.choice(args.rows, args.changed, replace=False))
        ids = np.concatenate([changed, np.arange(args.rows, args.rows + args.new)])
        source = f"{root}/source.parquet"
        pq.write_table(make_table(ids, 3), source)
        warm = f"{root}/warm.lance"
        lance.write_dataset(make_table(np.arange(10_000), 4), warm)
        pq.write_table(make_table(np.arange(5_000, 15_000), 5), f"{root}/warm.parquet")

        spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
                 .config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "4").config("spark.driver.memory", "4g").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        spark_merge(spark, warm, f"{root}/warm.parquet", root, args.partitions)  # warm-up, untimed

        times: dict[str, list[float]] = {"spark": [], "pylance": []}
        for round_ in range(args.repeats):
            order = ("spark", "pylance") if round_ % 2 == 0 else ("pylance", "spark")
            for side in order:
                uri = f"{root}/{side}-{round_}.lance"
                shutil.copytree(base, uri)
                os.sync()
                start = time.perf_counter()
                if side == "spark":
                    spark_counts = spark_merge(spark, uri, source, root, args.partitions)
                else:
                    table = pq.read_table(source)
                    pylance_counts = pylance.dataset(uri).merge_insert("id").when_matched_update_all() \
                        .when_not_matched_insert_all().execute(table)
                times[side].append(time.perf_counter() - start)
            ours, theirs = f"{root}/spark-{round_}.lance", f"{root}/pylance-{round_}.lance"
            assert {k: pylance_counts[k] for k in spark_counts} == spark_counts, (spark_counts, pylance_counts)
            assert pylance.dataset(ours).to_table().sort_by("id").equals(
                pylance.dataset(theirs).to_table().sort_by("id"))
            shutil.rmtree(ours)
            shutil.rmtree(theirs)
        spark.stop()
        submit = spark_submit_seconds(root) if args.submit else None

        spark_seconds, pylance_seconds = min(times["spark"]), min(times["pylance"])
        result = {"rows": args.rows, "changed": args.changed, "new": args.new, "counts": spark_counts,
                  "repeats": args.repeats, "spark_seconds": [round(t, 2) for t in times["spark"]],
                  "pylance_seconds": [round(t, 2) for t in times["pylance"]],
                  "ratio_pylance_over_spark": round(pylance_seconds / spark_seconds, 2),
                  "empty_spark_submit_seconds": None if submit is None else round(submit, 2)}
        print(f"merge insert of {args.changed:,} changed + {args.new:,} new rows into {args.rows:,} "
              f"(best of {args.repeats}, interleaved): spark job {spark_seconds:.2f} s, "
              f"pylance {pylance_seconds:.2f} s, "
              f"ratio {pylance_seconds / spark_seconds:.2f}x (>1: Spark faster); results equal")
        print(f"  all runs: spark {result['spark_seconds']}, pylance {result['pylance_seconds']}")
        if submit is not None:
            print(f"  an empty spark-submit (JVM, session, one task, stop): {submit:.2f} s; "
                  f"job + spark-submit {spark_seconds + submit:.2f} s, "
                  f"ratio {pylance_seconds / (spark_seconds + submit):.2f}x")
        if args.json:
            pathlib.Path(args.json).write_text(json.dumps(result, indent=2))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
