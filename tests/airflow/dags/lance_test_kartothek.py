"""Test DAG: Kartothek imports (a templated import with verification, its no-op re-run, an import
into a dataset named below the connection's root, and a broken source). Paths come from
KARTOTHEK_TEST_ROOT (the target root) and KARTOTHEK_TEST_STORE (a copy of the fixture store
holding a broken dataset), set by the test before parsing."""

from __future__ import annotations

import datetime as dt
import os
import pathlib
from typing import Any

from airflow.providers.common.compat.sdk import DAG, AssetAlias

from airflow_lance.operators.kartothek import KartothekToLanceOperator
from spark_write_faults import failure_recorder

ROOT = os.environ.get("KARTOTHEK_TEST_ROOT", "/tmp/airflow-lance-kartothek-test")
STORE = os.environ.get("KARTOTHEK_TEST_STORE", "/tmp/airflow-lance-kartothek-store")
FIXTURE_STORE = str(pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "kartothek" / "store")
ALIAS = AssetAlias("kartothek-imports")


record_failure = failure_recorder(ROOT)


common: dict[str, Any] = {"lance_conn_id": "lance_test", "trigger_rule": "all_done"}

with DAG("lance_test_kartothek", schedule=None, start_date=dt.datetime(2025, 1, 1), catchup=False,
         params={"uuid": "two_keys"}) as dag:
    first = KartothekToLanceOperator(
        task_id="import_two_keys", store_uri=FIXTURE_STORE, dataset_uuid="{{ params.uuid }}",
        target=f"{ROOT}/two_keys.lance", max_rows_per_file=1, verify=True, **common,
    )
    again = KartothekToLanceOperator(
        task_id="reimport_two_keys", store_uri=FIXTURE_STORE, dataset_uuid="two_keys",
        target=f"{ROOT}/two_keys.lance", mode="overwrite", **common,
    )
    named = KartothekToLanceOperator(
        task_id="import_multi_table_helper", store_uri=f"file://{FIXTURE_STORE}", dataset_uuid="multi_table",
        table="helper", target="helper.lance", partition_columns="drop", outlets=[ALIAS],
        source_storage_options={"token": os.environ.get("KARTOTHEK_TEST_SECRET", "")}, **common,
    )
    broken = KartothekToLanceOperator(
        task_id="import_broken", store_uri=STORE, dataset_uuid="one_key", target=f"{ROOT}/broken.lance",
        on_failure_callback=record_failure, **common,
    )
    create_existing = KartothekToLanceOperator(
        task_id="create_existing", store_uri=FIXTURE_STORE, dataset_uuid="one_key", target=f"{ROOT}/two_keys.lance",
        on_failure_callback=record_failure, **common,
    )
    first >> again >> named >> broken >> create_existing
