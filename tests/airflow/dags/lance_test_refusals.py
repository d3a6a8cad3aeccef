"""Test DAG: writes that must be refused before any Spark job runs. Each task's connection
(``lance_refuse_<case>``) is set by the test; ROOT (LANCE_TEST_ROOT) receives the failures."""

from __future__ import annotations

import datetime as dt
import json
import os
import pathlib
from typing import Any

from airflow.providers.common.compat.sdk import DAG

from airflow_lance.operators.maintenance import LanceCompactFilesOperator
from airflow_lance.operators.spark_write import LanceSparkWriteOperator

ROOT = os.environ.get("LANCE_TEST_ROOT", "/tmp/airflow-lance-test")
SPARK_CONF = {"spark.ui.enabled": "false", "spark.log.level": "WARN"}
#: Connection cases: a plain-HTTP dataset root, an http:// root with S3 credentials, a misspelt
#: extra key, a wrong secret on SeaweedFS.
WRITE_CASES = ("http", "http_s3_credentials", "typo", "wrong_secret")


def record_failure(context: Any) -> None:
    """Keep the exception of a failed task where the test can read it."""
    exc = context.get("exception")
    folder = pathlib.Path(ROOT) / "failures"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{context['ti'].task_id}.json").write_text(json.dumps({
        "mro": [cls.__name__ for cls in type(exc).__mro__],
        "message": str(exc),
    }))


with DAG("lance_test_refusals", schedule=None, start_date=dt.datetime(2025, 1, 1), catchup=False) as dag:
    for case in WRITE_CASES:
        LanceSparkWriteOperator(
            task_id=f"write_{case}", uri="events.lance", mode="append", source_sql="SELECT 1 AS id",
            lance_conn_id=f"lance_refuse_{case}", conf=SPARK_CONF, on_failure_callback=record_failure,
        )
    LanceCompactFilesOperator(
        task_id="compact_http", uri="events.lance", lance_conn_id="lance_refuse_http",
        on_failure_callback=record_failure,
    )
