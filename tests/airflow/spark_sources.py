"""Spark sources for the write operator tests (shipped to the job with ``py_files``)."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

EXTRA_IDS = (1000, 1400)


def extra_rows(spark: SparkSession) -> DataFrame:
    """400 rows shaped like the test dataset (id, label, values), in Spark's own Arrow types."""
    ids = spark.range(*EXTRA_IDS, numPartitions=2)
    return ids.select(
        F.col("id"),
        F.concat(F.lit("extra-"), F.col("id").cast("string")).alias("label"),
        F.array(F.col("id").cast("double"), F.lit(0.5)).alias("values"),
    )


def vector_rows(spark: SparkSession) -> DataFrame:
    """300 rows with two vector columns: ``embedding`` (2 floats) marked as a fixed-size list
    in its Spark metadata (lance-spark's convention), ``other`` (3 floats) left unmarked."""
    ids = spark.range(0, 300, 1, 3)
    return ids.select(
        F.col("id"),
        F.concat(F.lit("new-"), F.col("id").cast("string")).alias("label"),
        F.array(F.col("id").cast("float"), F.lit(0.5).cast("float")).alias(
            "embedding", metadata={"arrow.fixed-size-list.size": 2}),
        F.array(F.lit(1.0), F.lit(2.0), F.col("id").cast("double")).alias("other"),
    )


def slow_rows(spark: SparkSession) -> DataFrame:
    """Never returns in time: the job sits in the driver until it is killed."""
    import time

    time.sleep(600)
    return spark.range(1)


def sleepy_rows(spark: SparkSession) -> DataFrame:
    """Rows that never come in time: the driver and each Python worker write their pid into
    ``$LANCE_TEST_ROOT/pids`` (the worker also its parent's, PySpark's worker daemon), then the
    workers sleep."""
    _note_pid("driver")
    return spark.range(0, 4, 1, 2).mapInArrow(_sleep_in_worker, "id long")


def _sleep_in_worker(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    import time

    _note_pid("worker")
    time.sleep(600)
    yield from batches


def _note_pid(kind: str) -> None:
    folder = pathlib.Path(os.environ["LANCE_TEST_ROOT"]) / "pids"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{kind}-{os.getpid()}").write_text(str(os.getppid()))


def environment_rows(spark: SparkSession) -> DataFrame:
    """The names of the environment variables of the driver and of the Python workers
    (``where``, ``name``), and the application's name (``where="app_name"``)."""
    driver = [("driver", name) for name in sorted(os.environ)] + [("app_name", spark.sparkContext.appName)]
    local = spark.createDataFrame(driver, "where string, name string")
    workers = spark.range(0, 2, 1, 2).mapInArrow(_worker_environment, "where string, name string")
    return local.unionByName(workers)


def _worker_environment(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for _ in batches:
        pass
    names = sorted(os.environ)
    yield pa.RecordBatch.from_pydict({"where": ["worker"] * len(names), "name": names})
