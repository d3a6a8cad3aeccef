"""Spark sources of the cluster fault tests (shipped to the job with ``py_files``)."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

ROWS = 3000


def first_attempt_fails(spark: SparkSession) -> DataFrame:
    """3,000 rows in 4 partitions; the first attempt of partition 1 fails in its Python worker after
    passing all its rows on (the write has consumed them), later attempts succeed."""
    df = spark.range(0, ROWS, 1, 4)

    def fail_first_attempt(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        yield from batches
        if context is not None and context.partitionId() == 1 and context.attemptNumber() == 0:
            raise RuntimeError("injected failure of the first attempt of partition 1")

    return df.mapInArrow(fail_first_attempt, df.schema)


def slow_until_released(spark: SparkSession) -> DataFrame:
    """3,000 rows in 4 partitions whose Python workers each write ``<LANCE_CLUSTER_TEST_ROOT>/started/
    <partition>-<attempt>-<pid>`` and then wait until ``<root>/release`` exists (at most 120 s)."""
    import os

    root = os.environ["LANCE_CLUSTER_TEST_ROOT"]
    df = spark.range(0, ROWS, 1, 4)

    def wait_for_release(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pathlib
        import time

        from pyspark import TaskContext

        context = TaskContext.get()
        started = pathlib.Path(root) / "started"
        started.mkdir(exist_ok=True)
        (started / f"{context.partitionId()}-{context.attemptNumber()}-{os.getpid()}").touch()
        deadline = time.monotonic() + 120
        while not (pathlib.Path(root) / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        yield from batches

    return df.mapInArrow(wait_for_release, df.schema)


def slow_first_attempt(spark: SparkSession) -> DataFrame:
    """3,000 rows in 4 partitions; the first attempt of partition 0 passes its rows on (the write
    consumes them) and then waits until a speculative attempt of partition 0 started and at most
    120 s more: Spark's speculation runs a duplicate attempt, which finishes first. Every attempt
    writes ``<LANCE_CLUSTER_TEST_ROOT>/started/<partition>-<attempt>-<pid>``. Rows carry 1 KB of
    padding: a partition's rows (750 KB) exceed the Python worker's output buffer, so the slow
    attempt's rows reach the writer (which writes its files) before it waits."""
    import os

    root = os.environ["LANCE_CLUSTER_TEST_ROOT"]
    df = spark.range(0, ROWS, 1, 4).selectExpr("id", "repeat('x', 1000) AS pad")

    def slow_first(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pathlib
        import time

        from pyspark import TaskContext

        context = TaskContext.get()
        started = pathlib.Path(root) / "started"
        started.mkdir(exist_ok=True)
        (started / f"{context.partitionId()}-{context.attemptNumber()}-{os.getpid()}").touch()
        yield from batches
        if context.partitionId() == 0 and context.attemptNumber() == 0:
            deadline = time.monotonic() + 240
            while not list(started.glob("0-1-*")) and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(min(120.0, max(0.0, deadline - time.monotonic())))

    return df.mapInArrow(slow_first, df.schema)
