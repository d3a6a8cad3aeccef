"""Retention: delete the rows older than the retention period with ``LanceDeleteOperator``.

Runs daily on Spark (``mode="spark"``: each Spark task evaluates the predicate over its fragments
and writes their deletion vectors; ``mode="local"`` does it in the worker), committing one version
exactly once (``num_deleted_rows`` in the XCom). The predicate is templated: here, rows whose
``day`` is more than ``retention_days`` (a param) before the run's date.

Runs as written (``airflow dags test example_lance_delete``) given a ``lance_default`` connection
holding the dataset root, e.g.
``AIRFLOW_CONN_LANCE_DEFAULT='{"conn_type": "lance", "host": "file:///tmp/lance-example"}'``,
and a ``spark_default`` connection (``local[*]`` by default).
"""

from __future__ import annotations

import datetime as dt

from airflow.providers.common.compat.sdk import DAG, Param, task

from airflow_lance.operators.delete import LanceDeleteOperator

DATASET = "events.lance"  # below the lance_default connection's dataset root


@task
def seed(uri: str, today: str) -> int:
    """30 days of events (1,000 a day) before ``today``, when the dataset does not exist yet."""
    import numpy as np
    import pyarrow as pa

    import airflow_lance.core as lance
    from airflow_lance.hooks.lance import LanceHook

    hook = LanceHook()
    existing = hook.dataset_or_none(uri)
    if existing is not None:
        return existing.version
    end = np.datetime64(today, "D")
    days = end - np.repeat(np.arange(1, 31), 1_000).astype("timedelta64[D]")
    table = pa.table({"id": pa.array(np.arange(days.size), pa.int64()), "day": pa.array(days)})
    return lance.write_dataset(table, hook.resolve_uri(uri), storage_options=hook.storage_options,
                               max_rows_per_file=10_000).version


# [START example_lance_delete]
with DAG(
    dag_id="example_lance_delete",
    schedule="@daily",
    start_date=dt.datetime(2025, 1, 1),
    catchup=False,
    params={"retention_days": Param(14, type="integer", minimum=0)},
    tags=["example", "lance", "spark"],
) as dag:
    expire = LanceDeleteOperator(
        task_id="expire_old_events",
        uri=DATASET,
        predicate="day < date '{{ macros.ds_add(ds, -params.retention_days) }}'",
        mode="spark",
        conf={"spark.sql.shuffle.partitions": "4"},
    )
    seed(DATASET, "{{ ds }}") >> expire
# [END example_lance_delete]
