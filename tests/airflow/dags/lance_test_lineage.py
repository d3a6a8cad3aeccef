"""Test DAG of the operators' OpenLineage reports: a Spark write from Parquet, a Spark compaction
of the dataset, its stats, a Kartothek import, a version sensor, a local update and a Spark copy of
the dataset (a Lance source); and the same without the Spark compaction and copy, run with
OpenLineage disabled (one spark-submit; in ``make stress``), and its local tasks alone, with a task
checking that a Spark job would get no OpenLineage properties (``make test``). Paths come from LANCE_TEST_ROOT, set by the test
before parsing (the DAG runs in a child process, where OpenLineage is configured)."""

from __future__ import annotations

import datetime as dt
import os
import pathlib

from airflow.providers.common.compat.sdk import DAG, task

from airflow_lance.operators._lineage import with_parent_job_information
from airflow_lance.operators.kartothek import KartothekToLanceOperator
from airflow_lance.operators.maintenance import LanceCompactFilesOperator, LanceDatasetStatsOperator
from airflow_lance.operators.spark_write import LanceSparkWriteOperator
from airflow_lance.operators.update import LanceUpdateOperator
from airflow_lance.sensors.version import LanceVersionSensor

ROOT = os.environ.get("LANCE_TEST_ROOT", "/tmp/airflow-lance-lineage-test")
FIXTURE_STORE = str(pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "kartothek" / "store")
SPARK_CONF = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"}

with DAG("lance_test_lineage", schedule=None, start_date=dt.datetime(2025, 1, 1), catchup=False) as dag:
    write = LanceSparkWriteOperator(task_id="write", uri=f"{ROOT}/ds.lance", mode="append",
                                    source_path=f"{ROOT}/input.parquet", conf=SPARK_CONF)
    compact = LanceCompactFilesOperator(task_id="compact", uri=f"{ROOT}/ds.lance", mode="spark", conf=SPARK_CONF,
                                        compaction_options={"target_rows_per_fragment": 1000})
    stats = LanceDatasetStatsOperator(task_id="stats", uri=f"{ROOT}/ds.lance")
    kartothek = KartothekToLanceOperator(task_id="kartothek", store_uri=FIXTURE_STORE, dataset_uuid="two_keys",
                                         target=f"{ROOT}/two_keys.lance")
    sense = LanceVersionSensor(task_id="sense", uri=f"{ROOT}/ds.lance", baseline_version=1, poke_interval=1,
                               timeout=60)
    update = LanceUpdateOperator(task_id="update", uri=f"{ROOT}/ds.lance", updates={"name": "'x'"}, where="id < 10")
    copy = LanceSparkWriteOperator(task_id="copy", uri=f"{ROOT}/copy.lance", mode="create",
                                   source_lance_uri=f"{ROOT}/ds.lance", conf=SPARK_CONF)
    write >> compact >> stats >> kartothek >> sense >> update >> copy


def _local_tasks() -> list:
    return [
        LanceCompactFilesOperator(task_id="compact", uri=f"{ROOT}/ds.lance",
                                  compaction_options={"target_rows_per_fragment": 1000}),
        LanceDatasetStatsOperator(task_id="stats", uri=f"{ROOT}/ds.lance"),
        KartothekToLanceOperator(task_id="kartothek", store_uri=FIXTURE_STORE, dataset_uuid="two_keys",
                                 target=f"{ROOT}/two_keys.lance"),
        LanceVersionSensor(task_id="sense", uri=f"{ROOT}/ds.lance", baseline_version=1, poke_interval=1, timeout=60),
        LanceUpdateOperator(task_id="update", uri=f"{ROOT}/ds.lance", updates={"name": "'x'"}, where="id < 10"),
    ]


with DAG("lance_test_lineage_disabled", schedule=None, start_date=dt.datetime(2025, 1, 1), catchup=False) as dag2:
    tasks = [LanceSparkWriteOperator(task_id="write", uri=f"{ROOT}/ds.lance", mode="append",
                                     source_path=f"{ROOT}/input.parquet", conf=SPARK_CONF), *_local_tasks()]
    for upstream, downstream in zip(tasks, tasks[1:]):
        upstream >> downstream


with DAG("lance_test_lineage_disabled_local", schedule=None, start_date=dt.datetime(2025, 1, 1),
         catchup=False) as dag3:
    @task(task_id="spark_conf")
    def spark_conf() -> None:
        """What a Spark job of this task would be given: no spark.openlineage.* properties."""
        injected = sorted(k for k in with_parent_job_information(SPARK_CONF) if k.startswith("spark.openlineage."))
        if injected:
            raise AssertionError(f"OpenLineage is disabled, yet the Spark job would get {injected}")

    tasks3 = [*_local_tasks(), spark_conf()]
    for upstream, downstream in zip(tasks3, tasks3[1:]):
        upstream >> downstream
