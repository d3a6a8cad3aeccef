"""Test DAGs: the Spark write operator on S3 (SeaweedFS) through two ``lance`` connections, one
committing with S3 conditional writes (``s3://``), one through a DynamoDB table (``s3+ddb://``).
The connections ``lance_s3`` / ``lance_s3_ddb`` are set by tests/airflow/operators/test_spark_write_s3.py.

``lance_test_spark_write_s3`` (make test) writes through the DynamoDB table; the conditional-write
create and append run every day of the daily pipeline on S3 (tests/airflow/test_daily_pipeline.py)
and here, on their own, in ``lance_test_spark_write_s3_slow`` (make stress)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from airflow.providers.common.compat.sdk import DAG

from airflow_lance.operators.spark_write import LanceSparkWriteOperator

SPARK_CONF = {"spark.ui.enabled": "false", "spark.log.level": "WARN", "spark.sql.shuffle.partitions": "2"}


def rows(start: int, stop: int) -> str:
    return f"SELECT id, CONCAT('event-', CAST(id AS STRING)) AS label FROM range({start}, {stop}, 1, 2)"


common: dict[str, Any] = {"conf": SPARK_CONF, "retry_delay": dt.timedelta(0)}

with DAG("lance_test_spark_write_s3", schedule=None, start_date=dt.datetime(2025, 1, 1), catchup=False) as dag:
    LanceSparkWriteOperator(
        task_id="create_through_dynamodb", uri="events.lance", mode="create", source_sql=rows(0, 300),
        lance_conn_id="lance_s3_ddb", **common,
    )

with DAG("lance_test_spark_write_s3_slow", schedule=None, start_date=dt.datetime(2025, 1, 1),
         catchup=False) as slow_dag:
    create = LanceSparkWriteOperator(
        task_id="create_on_s3", uri="events.lance", mode="create", source_sql=rows(0, 500),
        lance_conn_id="lance_s3", max_rows_per_file=200, **common,
    )
    append = LanceSparkWriteOperator(
        task_id="append_on_s3", uri="events.lance", mode="append", source_sql=rows(500, 800),
        lance_conn_id="lance_s3", **common,
    )
    create >> append
