"""Test DAG: Kartothek imports on Spark executors (``execution="spark"``): a partitioned import
with verification spread over three Spark tasks whose first try fails after the Spark job staged its
result, before the commit (the retry commits that result without running Spark), its no-op re-run,
and a dataset with an empty partition. The target root comes from KARTOTHEK_TEST_ROOT, the source option from
KARTOTHEK_TEST_SECRET (both set by the test before parsing)."""

from __future__ import annotations

import datetime as dt
import os
import pathlib
from typing import Any

from airflow.providers.common.compat.sdk import DAG

from airflow_lance.operators.kartothek import KartothekToLanceOperator
from dml_faults import failing_first_try_after

ROOT = os.environ.get("KARTOTHEK_TEST_ROOT", "/tmp/airflow-lance-kartothek-spark-test")
FIXTURE_STORE = str(pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "kartothek" / "store")

common: dict[str, Any] = {
    "lance_conn_id": "lance_test",
    "execution": "spark",
    "conf": {"spark.ui.enabled": "false", "spark.log.level": "WARN"},
    "source_storage_options": {"token": os.environ.get("KARTOTHEK_TEST_SECRET", "")},
}

with DAG("lance_test_kartothek_spark", schedule=None, start_date=dt.datetime(2025, 1, 1), catchup=False) as dag:
    first = failing_first_try_after(KartothekToLanceOperator, "_write_on_spark")(
        task_id="import_two_keys", store_uri=f"file://{FIXTURE_STORE}", dataset_uuid="two_keys",
        target=f"{ROOT}/two_keys.lance", max_rows_per_file=1, num_partitions=3, verify=True, retries=1,
        retry_delay=dt.timedelta(0), **common,
    )
    again = KartothekToLanceOperator(
        task_id="reimport_two_keys", store_uri=f"file://{FIXTURE_STORE}", dataset_uuid="two_keys",
        target=f"{ROOT}/two_keys.lance", mode="overwrite", **common,
    )
    empty = KartothekToLanceOperator(
        task_id="import_empty_partition", store_uri=f"file://{FIXTURE_STORE}", dataset_uuid="empty_partition",
        target="empty_partition.lance", verify=True, **common,
    )
    first >> again >> empty
