"""Spark sources of the Spark Connect tests (shipped to the job with ``py_files``; a source callable
runs in the Connect client, the functions it maps run on the server's Python workers)."""

from __future__ import annotations

import json
import os
import pathlib
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

ROWS_SQL = ("SELECT id, CAST(id * 0.5 AS DOUBLE) AS x, concat('row-', CAST(id AS STRING)) AS name "
            "FROM range(0, 1000, 1, 4)")


def recorded_rows(spark: SparkSession) -> DataFrame:
    """The 1,000 rows of ``ROWS_SQL``; first writes what the client process was started with (its
    environment and command line) to ``<LANCE_CONNECT_TEST_ROOT>/client-<pid>.json``."""
    root = pathlib.Path(os.environ["LANCE_CONNECT_TEST_ROOT"])
    cmdline = pathlib.Path("/proc/self/cmdline").read_bytes().split(b"\0")
    (root / f"client-{os.getpid()}.json").write_text(json.dumps({
        "environ": dict(os.environ), "cmdline": [part.decode(errors="replace") for part in cmdline]}))
    return spark.sql(ROWS_SQL)


def heartbeat_rows(spark: SparkSession) -> DataFrame:
    """1,000 rows in 2 partitions whose tasks (on the server's Python workers) write their
    partition id to ``<LANCE_CONNECT_TEST_ROOT>/beat/<partition>`` every 0.1 s for 120 s before
    passing their rows on: a job that runs until it is interrupted."""
    root = os.environ["LANCE_CONNECT_TEST_ROOT"]
    df = spark.range(0, 1000, 1, 2)

    def beat(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import time

        from pyspark import TaskContext

        folder = pathlib.Path(root) / "beat"
        folder.mkdir(exist_ok=True)
        path = folder / str(TaskContext.get().partitionId())
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            path.write_text(str(time.time()))
            time.sleep(0.1)
        yield from batches

    return df.mapInArrow(beat, df.schema)
