"""Test DAG of the cleanup's retry-window warning: a writer with retries that is not upstream of the
maintenance group's cleanup (here gated off, so no Spark runs). The dataset comes from the ``uri``
param, the cleanup's ``older_than`` from ``older_than`` (days; empty: none); connection ``lance_default``."""

from __future__ import annotations

import datetime as dt

from airflow.providers.common.compat.sdk import DAG
from airflow.providers.standard.operators.python import ShortCircuitOperator

from airflow_lance.operators.spark_write import LanceSparkWriteOperator
from airflow_lance.task_groups.maintenance import lance_maintenance_task_group

with DAG("lance_test_cleanup_retry_window", start_date=dt.datetime(2025, 1, 1), schedule=None, catchup=False,
         params={"uri": "", "older_than": ""}) as dag:
    gate = ShortCircuitOperator(task_id="gate", python_callable=lambda: False)
    write = LanceSparkWriteOperator(task_id="write", uri="{{ params.uri }}", source_path="/nonexistent",
                                    mode="append", retries=2, retry_delay=dt.timedelta(minutes=5))
    gate >> write
    lance_maintenance_task_group(uri="{{ params.uri }}", retain_versions=2,
                                 cleanup_older_than="{{ params.older_than }}")
