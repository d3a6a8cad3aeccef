"""Spark write benchmark: the Lance write job vs Spark's Parquet write vs a mapInArrow pass-through.

Usage: python bench/bench_spark_write.py [--rows N] [--reps 3] [--warmup 1] [--partitions 8] [--variants wide,narrow]
                                         [--formats default,2.0] [--no-buffered] [--json out.json]

One local[2] SparkSession; per variant (the anchor tables of ../shared/performance-anchors.md)
one cached DataFrame, then, median of --reps rounds that run every case once (after --warmup
untimed rounds; cases interleaved so that drifts of the machine hit all alike; dirty pages are
flushed before every run, so no run pays for the writeback of an earlier one):

* ``spark parquet``: ``df.write.parquet`` (Spark's own writer, snappy);
* ``mapInArrow pass-through``: the JVM -> Python Arrow hand-off only, counting rows;
* ``lance job``: what the Spark write job does (``airflow_lance.spark.writer.write_dataframe``:
  executors write fragments, the row count is validated with an Observation) plus the commit,
  in each ``--formats``; on wide data also with the embedding stored as a vector
  (``fixed_size_lists={"embedding": 128}``: the table's own type, which Spark turns into a
  plain array), and the default format once more with buffered writes (``direct_io=false``)
  to show what direct I/O saves;
* ``lance job, direct from Parquet files``: the job's direct ingest (``reader="direct"``) of the
  same table stored as ``--partitions`` Parquet files (row groups of 128Ki rows): the executors
  read the row groups with pyarrow, no JVM row path (issue 20: >= 2x the pass-through, >= 6x
  Spark's Parquet write).

MB/s is Arrow bytes of the table / time. Ratios > 1 mean the Lance job is faster. Targets
(issue 4): >= 0.8x the pass-through, >= 3x Spark's Parquet write on wide data.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import pyarrow as pa
import pyarrow.parquet as pq
from anchor_data import anchor_table

import airflow_lance.core as lance
from airflow_lance.core.write import DEFAULT_STORAGE_VERSION
from airflow_lance.spark.job import choose_reader, run_direct_write
from airflow_lance.spark.spec import SourceSpec, WriteJobSpec, staging_location
from airflow_lance.spark.writer import write_dataframe


def count_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The pass-through: touch every batch, yield only the row count."""
    total = sum(batch.num_rows for batch in batches)
    yield pa.RecordBatch.from_pydict({"n": [total]})


def timed_rounds(cases: dict[str, tuple[Callable[[], object], Callable[[], None] | None]], reps: int,
                 warmup: int = 1) -> dict[str, list[float]]:
    """Run every case once per round, ``warmup`` untimed rounds then ``reps`` timed ones, so that
    slow drifts of the machine (memory, page cache) hit all cases alike. Before every run the
    case's setup runs and dirty pages are flushed (``os.sync``): no run pays for the writeback of
    an earlier one. Returns the timed seconds per case."""
    times: dict[str, list[float]] = {name: [] for name in cases}
    for round_index in range(warmup + reps):
        for name, (fn, setup) in cases.items():
            if setup:
                setup()
            os.sync()
            start = time.perf_counter()
            fn()
            if round_index >= warmup:
                times[name].append(time.perf_counter() - start)
    return times


@dataclasses.dataclass(frozen=True)
class JobVariant:
    """One way of running the Lance job: file format, vectors as fixed-size lists, direct I/O."""

    version: str | None
    vectors: bool = False
    direct_io: str = "auto"

    @property
    def written_format(self) -> str:
        return self.version or DEFAULT_STORAGE_VERSION

    @property
    def label(self) -> str:
        default = " (default)" if self.version is None else ""
        extras = [", embedding as fixed_size_list[128]" if self.vectors else "",
                  ", buffered writes (direct_io=false)" if self.direct_io == "false" else ""]
        return f"format {self.written_format}{default}{''.join(extras)}"


def job_variants(formats: list[str | None], *, wide: bool, buffered: bool) -> list[JobVariant]:
    """Every requested format as the job writes by default; on wide data also the default format
    with the embedding stored as a vector (fixed_size_list, as pylance writes the source table);
    with ``buffered`` the default format once more without direct I/O (what it saves)."""
    variants = [JobVariant(version) for version in formats]
    if wide:
        variants.append(JobVariant(formats[0], vectors=True))
    if buffered:
        variants.append(JobVariant(formats[0], direct_io="false"))
    return variants


def bench_variant(spark, name: str, rows: int, reps: int, partitions: int, formats: list[str | None],
                  tmp: pathlib.Path, warmup: int = 1, buffered: bool = True) -> list[dict]:
    table = anchor_table(rows, wide=(name == "wide"))
    mb = table.nbytes / 1e6
    df = spark.createDataFrame(table).repartition(partitions).cache()
    assert df.count() == rows
    results = []
    parquet_dir = tmp / f"{name}.parquet"

    def passthrough() -> None:
        assert sum(r["n"] for r in df.mapInArrow(count_rows, "n long").collect()) == rows

    def lance_job(uri: str, variant: JobVariant) -> None:
        result = write_dataframe(df, uri=uri, mode="create", storage_options={"direct_io": variant.direct_io},
                                 max_rows_per_file=1024 * 1024, max_bytes_per_file=90 * 1024**3,
                                 data_storage_version=variant.version,
                                 fixed_size_lists={"embedding": 128} if variant.vectors else None)
        assert result.schema is not None
        lance.LanceDataset.commit(uri, lance.LanceOperation.Overwrite(result.schema, list(result.fragments)), 0)

    source_dir = tmp / f"{name}-source.parquet"  # the direct path's input: Parquet files, one per partition
    source_dir.mkdir()
    per_file = -(-rows // partitions)
    for index in range(partitions):
        pq.write_table(table.slice(index * per_file, per_file), source_dir / f"part-{index}.parquet",
                       row_group_size=128 * 1024)
    direct_uri = str(tmp / f"{name}-direct.lance")

    def direct_job() -> None:
        root, staging = staging_location(direct_uri, "bench")
        spec = WriteJobSpec(uri=direct_uri, mode="create", read_version=0, staging_root=root, staging_name=staging,
                            source=SourceSpec.from_fields(path=str(source_dir), format="parquet"),
                            storage_options={}, max_rows_per_file=1024 * 1024, max_bytes_per_file=90 * 1024**3,
                            reader="direct")
        plan = choose_reader(spark, spec)
        assert plan is not None
        result = run_direct_write(spark, spec, plan)
        assert result.schema is not None and result.num_rows == rows
        lance.LanceDataset.commit(direct_uri, lance.LanceOperation.Overwrite(result.schema, list(result.fragments)), 0)

    cases: dict[str, tuple[Callable[[], object], Callable[[], None] | None]] = {
        "lance job, direct from Parquet files (reader='direct', default format)": (
            direct_job, functools.partial(shutil.rmtree, direct_uri, ignore_errors=True)),
        "spark parquet": (lambda: df.write.mode("overwrite").parquet(str(parquet_dir)),
                          lambda: shutil.rmtree(parquet_dir, ignore_errors=True)),
        "mapInArrow pass-through": (passthrough, None),
    }
    jobs: dict[str, tuple[str, JobVariant]] = {}
    for variant in job_variants(formats, wide=(name == "wide"), buffered=buffered):
        uri = str(tmp / f"{name}-{len(jobs)}.lance")
        jobs[variant.label] = (uri, variant)
        cases[f"lance job, {variant.label}"] = (functools.partial(lance_job, uri, variant),
                                                functools.partial(shutil.rmtree, uri, ignore_errors=True))
    times = timed_rounds(cases, reps, warmup)
    median = {case: statistics.median(values) for case, values in times.items()}
    for case, values in times.items():
        results.append({"variant": name, "case": case, "seconds": median[case], "all_seconds": values,
                        "mb_s": mb / median[case], "rows_s": rows / median[case]})
    parquet, through = median["spark parquet"], median["mapInArrow pass-through"]
    direct = median["lance job, direct from Parquet files (reader='direct', default format)"]
    assert lance.dataset(direct_uri).count_rows() == rows
    for ratio, value in (("direct from Parquet files: vs mapInArrow pass-through (x)", through / direct),
                         ("direct from Parquet files: vs spark parquet (x faster)", parquet / direct)):
        results.append({"variant": name, "case": f"ratio: {ratio}", "ratio": value})
    shutil.rmtree(source_dir, ignore_errors=True)
    for label, (uri, variant) in jobs.items():
        job = median[f"lance job, {label}"]
        written = lance.dataset(uri)
        assert written.count_rows() == rows and written.data_storage_version == variant.written_format
        if variant.vectors:
            assert pa.types.is_fixed_size_list(written.schema.field("embedding").type)
        results.append({"variant": name, "case": f"lance dataset, {label}",
                        "fragments": len(written.get_fragments()),
                        "disk_bytes": int(written.versions()[-1]["metadata"]["total_files_size"])})
        for ratio, value in ((f"{label}: vs mapInArrow pass-through (x)", through / job),
                             (f"{label}: vs spark parquet (x faster)", parquet / job)):
            results.append({"variant": name, "case": f"ratio: {ratio}", "ratio": value})
        shutil.rmtree(uri, ignore_errors=True)
    df.unpersist()
    shutil.rmtree(parquet_dir, ignore_errors=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2_000_000)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds before the timed ones")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--variants", default="wide,narrow")
    parser.add_argument("--driver-memory", default="10g")
    parser.add_argument("--formats", default="default,2.0",
                        help="Lance file formats to write: 'default' (the core's, as pylance's) and/or versions")
    parser.add_argument("--no-buffered", action="store_true",
                        help="skip the default format's run with direct_io=false")
    parser.add_argument("--json", type=pathlib.Path)
    args = parser.parse_args()
    formats = [None if f == "default" else f for f in args.formats.split(",")]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]").appName("bench-spark-write")
        .config("spark.driver.memory", args.driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    print(f"spark {spark.version} local[2], rows={args.rows:,}, partitions={args.partitions}, median of {args.reps} "
          f"interleaved rounds after {args.warmup} warm-up round(s), dirty pages flushed before each run")
    all_results = []
    try:
        with tempfile.TemporaryDirectory(prefix="lance-spark-bench-") as tmp:
            for variant in args.variants.split(","):
                results = bench_variant(spark, variant, args.rows, args.reps, args.partitions, formats,
                                        pathlib.Path(tmp), args.warmup, buffered=not args.no_buffered)
                all_results += results
                for row in results:
                    if "ratio" in row:
                        print(f"{variant:7s} {row['case']:90s} {row['ratio']:8.2f}")
                    elif "seconds" in row:
                        spread = "/".join(f"{t:.2f}" for t in row["all_seconds"])
                        print(f"{variant:7s} {row['case']:90s} {row['seconds']:8.2f} s {row['mb_s']:8.1f} MB/s "
                              f"{row['rows_s']:>11,.0f} rows/s  ({spread})")
                    else:
                        print(f"{variant:7s} {row['case']:90s} {row['fragments']} fragments, "
                              f"{row['disk_bytes'] / 1e6:,.1f} MB on disk")
    finally:
        spark.stop()
    if args.json:
        args.json.write_text(json.dumps(all_results, indent=2))


if __name__ == "__main__":
    main()
