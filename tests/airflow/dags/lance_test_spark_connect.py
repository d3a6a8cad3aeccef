"""Test DAG: the Spark operators through Spark Connect (the ``spark_connect_test`` connection, conn
type ``spark_connect``, ``sc://127.0.0.1:<port>``; tests/airflow/spark_connect_server.py starts
the server on ``local[2]``).

A create of 1,000 rows in 4 Spark partitions (small files: 100 rows each), an append of 600
rows, a Spark compaction of the 20 fragments, and, independent of these, a create whose
source (shipped with ``py_files``, an artifact) fails partition 1 after its rows were passed
on: the job fails after writing files, nothing is committed. Paths from LANCE_CONNECT_TEST_ROOT.
``lance_test_spark_connect_short`` (the default suite) runs the create and the failing write.
"""

from __future__ import annotations

import datetime as dt
import os
import pathlib
from typing import Any

from airflow.providers.common.compat.sdk import DAG

from airflow_lance.operators.maintenance import LanceCompactFilesOperator
from airflow_lance.operators.spark_write import LanceSparkWriteOperator

ROOT = os.environ.get("LANCE_CONNECT_TEST_ROOT", "/tmp/airflow-lance-connect-test")
SOURCES = str(pathlib.Path(__file__).resolve().parents[1] / "cluster_sources.py")
common: dict[str, Any] = {"lance_conn_id": "lance_test", "spark_conn_id": "spark_connect_test",
                          "conf": {"spark.sql.shuffle.partitions": "2"}}


def rows_sql(start: int, stop: int) -> str:
    return (f"SELECT id, CAST(id * 0.5 AS DOUBLE) AS x, concat('row-', CAST(id AS STRING)) AS name "
            f"FROM range({start}, {stop}, 1, 4)")


def create_task(root: str) -> LanceSparkWriteOperator:
    return LanceSparkWriteOperator(task_id="create", uri=f"{root}/written.lance", mode="create",
                                   source_sql=rows_sql(0, 1000), max_rows_per_file=100, **common)


def failing_task(root: str) -> LanceSparkWriteOperator:
    return LanceSparkWriteOperator(task_id="failing", uri=f"{root}/failed.lance", mode="create",
                                   source_callable="cluster_sources:first_attempt_fails", py_files=SOURCES,
                                   max_rows_per_file=100, **common)


ARGS: dict[str, Any] = {"schedule": None, "start_date": dt.datetime(2025, 1, 1), "catchup": False}

with DAG("lance_test_spark_connect", **ARGS) as dag:
    create = create_task(ROOT)
    append = LanceSparkWriteOperator(task_id="append", uri=f"{ROOT}/written.lance", mode="append",
                                     source_sql=rows_sql(1000, 1600), max_rows_per_file=100, **common)
    compact = LanceCompactFilesOperator(task_id="compact", uri=f"{ROOT}/written.lance", mode="spark",
                                        compaction_options={"target_rows_per_fragment": 800}, **common)
    create >> append >> compact
    failing_task(ROOT)

# the short version (make test): the create and the failing write
with DAG("lance_test_spark_connect_short", **ARGS) as short_dag:
    create_task(f"{ROOT}/short")
    failing_task(f"{ROOT}/short")
