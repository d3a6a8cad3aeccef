"""Import a Kartothek dataset into a Lance dataset, then read it back.

import_one_key (KartothekToLanceOperator: table ``table`` of the Kartothek dataset ``one_key``,
partitioned by ``country``, becomes the Lance dataset ``kartothek/one_key.lance`` in one atomic
commit, the partition column restored with its type, verified against the source) -> report
(reads the dataset through LanceHook and logs its rows per country).

Runs as written (``airflow dags test example_kartothek_import``) given a ``lance_default``
connection holding the dataset root, e.g.
``AIRFLOW_CONN_LANCE_DEFAULT='{"conn_type": "lance", "host": "file:///tmp/lance-example"}'``.
The source is the ``store_uri`` param: by default ``$AIRFLOW_LANCE_KARTOTHEK_STORE`` or the
Kartothek fixtures committed with this repository (made by kartothek 5.3). The ``execution``
param picks where the partitions are read and written: ``local`` (the worker) or ``spark``
(executors of the ``spark_default`` connection, one Spark task per partition). The import is
idempotent: running the DAG again finds it landed and writes nothing.
"""

from __future__ import annotations

import datetime as dt
import os
import pathlib
from typing import Any

from airflow.providers.common.compat.sdk import DAG, AssetAlias, Param, task

from airflow_lance.hooks.lance import LanceHook
from airflow_lance.operators.kartothek import KartothekToLanceOperator

DATASET = "kartothek/one_key.lance"  # below the lance_default connection's dataset root
FIXTURE_STORE = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "kartothek" / "store"

# [START example_kartothek_import]
with DAG(
    dag_id="example_kartothek_import",
    schedule=None,
    start_date=dt.datetime(2025, 1, 1),
    catchup=False,
    params={
        "store_uri": Param(os.environ.get("AIRFLOW_LANCE_KARTOTHEK_STORE", str(FIXTURE_STORE)), type="string"),
        "execution": Param("local", enum=["local", "spark"]),
    },
    tags=["example", "lance", "kartothek"],
) as dag:
    import_one_key = KartothekToLanceOperator(
        task_id="import_one_key",
        store_uri="{{ params.store_uri }}",
        dataset_uuid="one_key",
        table="table",
        target=DATASET,
        mode="overwrite",
        partition_columns="restore",
        max_rows_per_file=10_000,
        verify=True,
        execution="{{ params.execution }}",
        outlets=[AssetAlias("lance-example-kartothek")],
    )

    @task
    def report() -> dict[str, Any]:
        """Read the imported dataset through the hook: log its version and rows per country."""
        ds = LanceHook().get_dataset(DATASET)
        countries = ds.to_table(columns=["country"]).column("country").value_counts().to_pylist()
        rows = {item["values"]: item["counts"] for item in countries}
        print(f"version {ds.version}: {ds.count_rows()} rows; rows per country: {rows}")
        return {"uri": ds.uri, "version": ds.version, "rows": ds.count_rows(), "rows_per_country": rows}

    import_one_key >> report()
# [END example_kartothek_import]
