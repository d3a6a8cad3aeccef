"""Ingest with Spark into a Lance dataset, wait for the new version, read it back.

generate_samples (two Parquet batches) -> create_dataset (Spark write, mode "create")
-> append_batch (Spark write, mode "append", from a Spark SQL query) -> wait_for_new_version
(LanceVersionSensor, deferred, data changes since the created version) -> report (reads
the dataset through LanceHook and logs its versions and row counts).

Runs as written (``airflow dags test example_lance_ingest``, which is what ``make demo``
does) given:

* a ``lance_default`` connection holding the dataset root, e.g.
  ``AIRFLOW_CONN_LANCE_DEFAULT='{"conn_type": "lance", "host": "file:///tmp/lance-example"}'``;
* a ``spark_default`` connection, e.g.
  ``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}'``;
* ``spark-submit`` on the PATH (``pip install pyspark``) and ``PYSPARK_PYTHON`` naming a
  Python with pyarrow, protobuf, pyroaring and fsspec.

The sample data goes to the ``data_dir`` param (default ``$AIRFLOW_LANCE_EXAMPLE_DATA`` or
``/tmp/lance-example-data``). The dataset must not exist yet (mode "create").
"""

from __future__ import annotations

import datetime as dt
import os
import pathlib
from typing import Any

from airflow.providers.common.compat.sdk import DAG, AssetAlias, Param, task

from airflow_lance.hooks.lance import LanceHook
from airflow_lance.operators.spark_write import LanceSparkWriteOperator
from airflow_lance.sensors.version import LanceVersionSensor

DATASET = "readings.lance"  # below the lance_default connection's dataset root
SPARK_CONF = {"spark.log.level": "WARN", "spark.ui.enabled": "false"}
BATCHES = {"batch_1.parquet": (0, 10_000), "batch_2.parquet": (10_000, 2_500)}

# [START example_lance_ingest]
with DAG(
    dag_id="example_lance_ingest",
    schedule=None,
    start_date=dt.datetime(2025, 1, 1),
    catchup=False,
    params={"data_dir": Param(os.environ.get("AIRFLOW_LANCE_EXAMPLE_DATA", "/tmp/lance-example-data"), type="string")},
    tags=["example", "lance"],
) as dag:

    @task
    def generate_samples(params: dict[str, Any] | None = None) -> list[str]:
        """Write two Parquet batches of sensor readings (id, ts, sensor, reading, embedding)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.parquet as pq

        incoming = pathlib.Path((params or {})["data_dir"]) / "incoming"
        incoming.mkdir(parents=True, exist_ok=True)
        written = []
        for name, (start, rows) in BATCHES.items():
            rng = np.random.default_rng(start)
            table = pa.table({
                "id": pa.array(np.arange(start, start + rows, dtype=np.int64)),
                "ts": pa.array((np.int64(1_700_000_000_000_000) + np.arange(start, start + rows) * 60_000_000)
                               .astype("datetime64[us]")),
                "sensor": pa.array(rng.choice(["alpha", "beta", "gamma"], rows)),
                "reading": pa.array(rng.normal(20.0, 5.0, rows)),
                "embedding": pa.array(list(rng.random((rows, 8), dtype=np.float32))),
            })
            pq.write_table(table, incoming / name)
            written.append(str(incoming / name))
        return written

    create_dataset = LanceSparkWriteOperator(
        task_id="create_dataset",
        uri=DATASET,
        mode="create",
        source_path="{{ params.data_dir }}/incoming/batch_1.parquet",
        max_rows_per_file=4_000,
        conf=SPARK_CONF,
        outlets=[AssetAlias("lance-example-readings")],
    )

    append_batch = LanceSparkWriteOperator(
        task_id="append_batch",
        uri=DATASET,
        mode="append",
        source_sql="SELECT * FROM parquet.`{{ params.data_dir }}/incoming/batch_2.parquet`",
        conf=SPARK_CONF,
        outlets=[AssetAlias("lance-example-readings")],
    )

    wait_for_new_version = LanceVersionSensor(
        task_id="wait_for_new_version",
        uri=DATASET,
        baseline_version="{{ ti.xcom_pull(task_ids='create_dataset')['version'] }}",
        data_changes_only=True,
        deferrable=True,
        poke_interval=10,
        timeout=600,
    )

    @task
    def report() -> dict[str, Any]:
        """Read the dataset through the hook: log every version with its row count."""
        hook = LanceHook()
        ds = hook.get_dataset(DATASET)
        counts = {}
        for entry in hook.list_versions(DATASET):
            counts[str(entry["version"])] = ds.checkout_version(entry["version"]).count_rows()
            print(f"version {entry['version']}: {counts[str(entry['version'])]} rows, "
                  f"{entry['metadata']['total_fragments']} fragments")
        sensors = ds.to_table(columns=["sensor"]).column("sensor").value_counts().to_pylist()
        print("rows per sensor:", {item["values"]: item["counts"] for item in sensors})
        return {"uri": ds.uri, "latest_version": ds.version, "rows_per_version": counts}

    generate_samples() >> create_dataset >> append_batch >> wait_for_new_version >> report()
# [END example_lance_ingest]
