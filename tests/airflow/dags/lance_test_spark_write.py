"""Test DAG: retries of the Spark write operator (after and before the commit), a failing
Spark job and a refused create. Paths come from LANCE_TEST_ROOT, set by the test before parsing."""

from __future__ import annotations

import datetime as dt
import os
import pathlib
from typing import Any

from airflow.providers.common.compat.sdk import DAG

from airflow_lance.assets.lance import create_asset
from airflow_lance.operators.spark_write import LanceSparkWriteOperator
from spark_write_faults import FailOnFirstTry, failure_recorder

ROOT = os.environ.get("LANCE_TEST_ROOT", "/tmp/airflow-lance-test")
DATASET = f"{ROOT}/ds.lance"
SOURCES = str(pathlib.Path(__file__).resolve().parents[1] / "spark_sources.py")
SPARK_CONF = {"spark.ui.enabled": "false", "spark.log.level": "WARN", "spark.sql.shuffle.partitions": "2"}


record_failure = failure_recorder(ROOT)

common: dict[str, Any] = {"lance_conn_id": "lance_test", "conf": SPARK_CONF, "retry_delay": dt.timedelta(0)}

with DAG("lance_test_spark_write", schedule=None, start_date=dt.datetime(2025, 1, 1), catchup=False) as dag:
    create_existing = LanceSparkWriteOperator(
        task_id="create_existing_fails", uri=DATASET, mode="create", source_sql="SELECT 1 AS id",
        on_failure_callback=record_failure, **common,
    )
    append = FailOnFirstTry(
        task_id="append_retry_after_commit", fail_at="after_commit", uri=DATASET, mode="append",
        source_callable="spark_sources:extra_rows", py_files=SOURCES, retries=1, trigger_rule="all_done",
        **common,
    )
    overwrite = FailOnFirstTry(
        task_id="overwrite_retry_before_commit", fail_at="before_commit", uri="ds.lance", mode="overwrite",
        source_callable="spark_sources:vector_rows", py_files=SOURCES, fixed_size_lists={"other": "{{ 1 + 2 }}"},
        max_rows_per_file=120, retries=1, outlets=[create_asset(uri=DATASET)],
        **common,
    )
    spark_fails = LanceSparkWriteOperator(
        task_id="spark_job_fails", uri=DATASET, mode="append", source_path=f"{ROOT}/no-such-input.parquet",
        trigger_rule="all_done", on_failure_callback=record_failure, **common,
    )
    append_after_cleanup = FailOnFirstTry(
        task_id="append_retry_after_cleanup", fail_at="after_commit_and_cleanup", uri=f"{ROOT}/cleaned.lance",
        mode="append", source_callable="spark_sources:extra_rows", py_files=SOURCES, retries=1,
        trigger_rule="all_done", **common,
    )
    create_existing >> append >> overwrite >> append_after_cleanup >> spark_fails
