"""A daily Lance pipeline: ingest the day's data with Spark, append late data, maintain, tag.

Per logical date (``{{ ds }}``):

generate_day (the day's sample Parquet: readings and late readings) -> ingest (Spark write,
mode "append": the first day creates the dataset) -> append_late (Spark write, "append",
from a Spark SQL query that drops readings without a value) -> wait_for_late_data
(``LanceVersionSensor``, data changes since the ingest) -> expire_old_tag (deletes the tag of
``keep_daily_tags`` days ago, so cleanup can reclaim its version) -> lance_maintenance (the
maintenance task group: stats -> compact when at least two fragments are small -> cleanup
keeping ``retain_versions`` versions) -> tag_day (tag ``daily-<ds_nodash>`` on the maintained
version, so readers can pin each day's result).

Tags and cleanup: a tagged version is never removed by cleanup, so the last
``keep_daily_tags`` days stay readable through their tags and everything older goes; the
cleanup runs with ``error_if_tagged_old_versions=False`` because those recent tags are
meant to outlive ``retain_versions``. Each write's idempotency key is
``dag_id/run_id/task_id/map_index``: a retry after its commit landed (before the day's
cleanup) finds that commit and adds nothing.

Runs as written (``airflow dags test example_lance_daily_pipeline 2025-01-01``, then the next
dates, or the scheduler with ``catchup``) given:

* a ``lance_default`` connection holding the dataset root, on local disk
  (``AIRFLOW_CONN_LANCE_DEFAULT='{"conn_type": "lance", "host": "file:///tmp/lance-example"}'``)
  or on S3 (``{"conn_type": "lance", "host": "s3://bucket/prefix", "login": "...", "password": "...",
  "extra": {"region": "...", "endpoint": "...", "allow_http": true}}``);
* a ``spark_default`` connection, e.g.
  ``AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type": "spark", "host": "local[2]"}'``;
* ``spark-submit`` on the PATH and ``PYSPARK_PYTHON`` naming a Python with pyarrow, protobuf,
  pyroaring and fsspec (plus s3fs for S3).

The dataset is the ``dataset`` param (a name below the connection's root, default
``daily_readings.lance``); sample data goes to the ``data_dir`` param (default
``$AIRFLOW_LANCE_EXAMPLE_DATA`` or ``/tmp/lance-example-data``), one folder per day.
"""

from __future__ import annotations

import datetime as dt
import os
import pathlib
from typing import Any

from airflow.providers.common.compat.sdk import DAG, AssetAlias, Param, task

from airflow_lance.operators.maintenance import LanceCreateTagOperator, LanceDeleteTagOperator
from airflow_lance.operators.spark_write import LanceSparkWriteOperator
from airflow_lance.sensors.version import LanceVersionSensor
from airflow_lance.task_groups.maintenance import lance_maintenance_task_group

SPARK_CONF = {"spark.log.level": "WARN", "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"}
ROWS_PER_DAY, LATE_ROWS_PER_DAY = 3_000, 600
DAY_DIR = "{{ params.data_dir }}/{{ ds }}"


def day_tables(day: dt.date) -> dict[str, Any]:
    """The day's readings and late readings (ids unique per day; every tenth late reading is null)."""
    import numpy as np
    import pyarrow as pa

    first_id = day.toordinal() * 10_000
    midnight = np.datetime64(day.isoformat(), "us")
    rng = np.random.default_rng(day.toordinal())
    tables = {}
    for name, start, rows in (("readings", 0, ROWS_PER_DAY), ("late", ROWS_PER_DAY, LATE_ROWS_PER_DAY)):
        offsets = np.arange(start, start + rows, dtype=np.int64)
        reading = rng.normal(20.0, 5.0, rows)
        tables[name] = pa.table({
            "id": pa.array(first_id + offsets),
            "ts": pa.array(midnight + offsets * np.timedelta64(20, "s")),
            "sensor": pa.array(rng.choice(["alpha", "beta", "gamma"], rows)),
            "reading": pa.array(reading, mask=(offsets % 10 == 0) if name == "late" else None),
            "embedding": pa.array(list(rng.random((rows, 8), dtype=np.float32))),
        })
    return tables


# [START example_lance_daily_pipeline]
with DAG(
    dag_id="example_lance_daily_pipeline",
    schedule="@daily",
    start_date=dt.datetime(2025, 1, 1),
    catchup=False,
    max_active_runs=1,  # days commit in order; maintenance never runs beside the next day's writes
    default_args={"retries": 2, "retry_delay": dt.timedelta(minutes=2)},
    params={
        "dataset": Param("daily_readings.lance", type="string"),
        "data_dir": Param(os.environ.get("AIRFLOW_LANCE_EXAMPLE_DATA", "/tmp/lance-example-data"), type="string"),
        "target_rows_per_fragment": Param(1_048_576, type="integer", minimum=1),
        "retain_versions": Param(2, type="integer", minimum=1),
        "keep_daily_tags": Param(2, type="integer", minimum=1),
    },
    tags=["example", "lance"],
) as dag:

    @task
    def generate_day(ds: str | None = None, params: dict[str, Any] | None = None) -> dict[str, str]:
        """Write the day's sample Parquet files (stand-ins for the day's landed raw data)."""
        import pyarrow.parquet as pq

        folder = pathlib.Path((params or {})["data_dir"]) / str(ds)
        folder.mkdir(parents=True, exist_ok=True)
        written = {}
        for name, table in day_tables(dt.date.fromisoformat(str(ds))).items():
            pq.write_table(table, folder / f"{name}.parquet")
            written[name] = str(folder / f"{name}.parquet")
        return written

    ingest = LanceSparkWriteOperator(
        task_id="ingest",
        uri="{{ params.dataset }}",
        mode="append",  # creates the dataset on the first day
        source_path=f"{DAY_DIR}/readings.parquet",
        fixed_size_lists={"embedding": 8},
        conf=SPARK_CONF,
        outlets=[AssetAlias("lance-example-daily-readings")],
    )

    append_late = LanceSparkWriteOperator(
        task_id="append_late",
        uri="{{ params.dataset }}",
        mode="append",
        source_sql=f"SELECT * FROM parquet.`{DAY_DIR}/late.parquet` WHERE reading IS NOT NULL",
        conf=SPARK_CONF,
        outlets=[AssetAlias("lance-example-daily-readings")],
    )

    wait_for_late_data = LanceVersionSensor(
        task_id="wait_for_late_data",
        uri="{{ params.dataset }}",
        baseline_version="{{ ti.xcom_pull(task_ids='ingest')['version'] }}",
        data_changes_only=True,
        deferrable=True,
        poke_interval=10,
        timeout=600,
    )

    expire_old_tag = LanceDeleteTagOperator(
        task_id="expire_old_tag",
        uri="{{ params.dataset }}",
        tag="daily-{{ macros.ds_add(ds, -params.keep_daily_tags) | replace('-', '') }}",
        missing_ok=True,
    )

    maintenance = lance_maintenance_task_group(
        uri="{{ params.dataset }}",
        compaction_options={"target_rows_per_fragment": "{{ params.target_rows_per_fragment }}"},
        min_small_fragments=2,
        retain_versions="{{ params.retain_versions }}",
        error_if_tagged_old_versions=False,  # the last keep_daily_tags days are kept on purpose
        outlets=[AssetAlias("lance-example-daily-readings")],
    )

    tag_day = LanceCreateTagOperator(
        task_id="tag_day",
        uri="{{ params.dataset }}",
        tag="daily-{{ ds_nodash }}",
        update_existing=True,  # a re-run of the day moves its tag
        trigger_rule="none_failed",
    )

    generate_day() >> ingest >> append_late >> wait_for_late_data >> expire_old_tag >> maintenance >> tag_day
# [END example_lance_daily_pipeline]
