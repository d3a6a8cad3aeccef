"""Test DAGs of the Spark job runner: a job outliving its task's ``execution_timeout``, the
environment and application name a job gets, a missing source path, a missing spark-submit.
Paths come from LANCE_TEST_ROOT, set by the test before parsing."""

from __future__ import annotations

import datetime as dt
import os
import pathlib
from typing import Any

from airflow.providers.common.compat.sdk import DAG

from airflow_lance.operators.spark_write import LanceSparkWriteOperator
from spark_write_faults import failure_recorder

ROOT = os.environ.get("LANCE_TEST_ROOT", "/tmp/airflow-lance-test")
DATASET = f"{ROOT}/ds.lance"
SOURCES = str(pathlib.Path(__file__).resolve().parents[1] / "spark_sources.py")
SPARK_CONF = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"}  # log level: the default
TIMEOUT = dt.timedelta(seconds=float(os.environ.get("LANCE_TEST_TIMEOUT", "60")))


record_failure = failure_recorder(ROOT)


common: dict[str, Any] = {"lance_conn_id": "lance_test", "conf": SPARK_CONF, "on_failure_callback": record_failure}
dag_args: dict[str, Any] = {"schedule": None, "start_date": dt.datetime(2025, 1, 1), "catchup": False}

with DAG("lance_test_spark_timeout", **dag_args) as timeout_dag:
    LanceSparkWriteOperator(
        task_id="slow_append", uri=DATASET, mode="append", source_callable="spark_sources:sleepy_rows",
        py_files=SOURCES, execution_timeout=TIMEOUT, **common,
    )

with DAG("lance_test_spark_environment", **dag_args) as environment_dag:
    environment = LanceSparkWriteOperator(
        task_id="environment", uri=f"{ROOT}/environment.lance", mode="create",
        source_callable="spark_sources:environment_rows", py_files=SOURCES,
        spark_submit_kwargs={"env_vars": {"LANCE_TEST_EXTRA": "given"}}, **common,
    )
    missing_source = LanceSparkWriteOperator(
        task_id="missing_source", uri=DATASET, mode="append", source_path="/nonexistent",
        spark_log_level="info", trigger_rule="all_done", **common,
    )
    environment >> missing_source

with DAG("lance_test_spark_submit_missing", **dag_args) as missing_dag:
    LanceSparkWriteOperator(
        task_id="no_spark_submit", uri=DATASET, mode="append", source_sql="SELECT 1 AS id", **common,
    )
