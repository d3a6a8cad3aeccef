"""Test DAG: the Spark operators against a standalone cluster (the ``spark_cluster`` connection,
``spark://127.0.0.1:<port>``, client deploy mode; tests/airflow/spark_cluster.py starts it).

A write of 3,000 rows in 4 Spark partitions (small files: 250 rows each), a Spark compaction of
its 12 fragments, a Kartothek import on executors, and a write whose Spark task fails on its first
attempt (Spark retries it: ``spark.task.maxFailures``). Paths come from LANCE_CLUSTER_TEST_ROOT;
``python_env_archive`` from LANCE_CLUSTER_TEST_ARCHIVE (empty: none), set before parsing.
"""

from __future__ import annotations

import datetime as dt
import os
import pathlib
from typing import Any

from airflow.providers.common.compat.sdk import DAG

from airflow_lance.operators.kartothek import KartothekToLanceOperator
from airflow_lance.operators.maintenance import LanceCompactFilesOperator
from airflow_lance.operators.spark_write import LanceSparkWriteOperator
from spark_write_faults import failure_recorder

ROOT = os.environ.get("LANCE_CLUSTER_TEST_ROOT", "/tmp/airflow-lance-cluster-test")
SOURCES = str(pathlib.Path(__file__).resolve().parents[1] / "cluster_sources.py")
FIXTURE_STORE = str(pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "kartothek" / "store")
CONF = {"spark.ui.enabled": "false", "spark.log.level": "WARN", "spark.sql.shuffle.partitions": "2",
        "spark.executor.memory": "512m", "spark.scheduler.minRegisteredResourcesRatio": "1.0"}
ROWS_SQL = ("SELECT id, CAST(id * 0.5 AS DOUBLE) AS x, concat('row-', CAST(id AS STRING)) AS name "
            "FROM range(0, 3000, 1, 4)")
common: dict[str, Any] = {"lance_conn_id": "lance_test", "spark_conn_id": "spark_cluster", "conf": CONF}
ARGS: dict[str, Any] = {"schedule": None, "start_date": dt.datetime(2025, 1, 1), "catchup": False,
                        "params": {"uri": f"{ROOT}/env.lance", "archive": "", "python": ""}}

with DAG("lance_test_spark_cluster", **ARGS) as dag:
    write = LanceSparkWriteOperator(task_id="write", uri=f"{ROOT}/written.lance", mode="create",
                                    source_sql=ROWS_SQL, max_rows_per_file=250, **common)
    compact = LanceCompactFilesOperator(task_id="compact", uri=f"{ROOT}/written.lance", mode="spark",
                                        compaction_options={"target_rows_per_fragment": 1500}, **common)
    kartothek = KartothekToLanceOperator(
        task_id="kartothek", store_uri=f"file://{FIXTURE_STORE}", dataset_uuid="two_keys",
        target=f"{ROOT}/two_keys.lance", execution="spark", num_partitions=2, **common)
    retried = LanceSparkWriteOperator(task_id="task_retried", uri=f"{ROOT}/retried.lance", mode="create",
                                      source_callable="cluster_sources:first_attempt_fails", py_files=SOURCES,
                                      **common)
    write >> compact >> kartothek >> retried

# The executors' Python: one lacking packages the job needs (LANCE_CLUSTER_TEST_LACKING_PYTHON; the
# driver keeps the full one), then a packed environment (LANCE_CLUSTER_TEST_ARCHIVE).
with DAG("lance_test_spark_cluster_env", **ARGS) as env_dag:
    lacking = LanceSparkWriteOperator(
        task_id="lacking_python", uri=f"{ROOT}/lacking.lance", mode="create", source_sql=ROWS_SQL,
        lance_conn_id="lance_test", spark_conn_id="spark_cluster",
        conf={**CONF, "spark.pyspark.python": os.environ.get("LANCE_CLUSTER_TEST_LACKING_PYTHON", ""),
              "spark.pyspark.driver.python": os.environ.get("PYSPARK_DRIVER_PYTHON", "")},
        on_failure_callback=failure_recorder(ROOT))
    archive = LanceSparkWriteOperator(
        task_id="packed_env", uri=f"{ROOT}/packed.lance", mode="create", source_sql=ROWS_SQL,
        python_env_archive=os.environ.get("LANCE_CLUSTER_TEST_ARCHIVE", ""), trigger_rule="all_done", **common)
    lacking >> archive

# Faults (tests/airflow/operators/test_spark_cluster_faults.py): the test kills the spark-submit
# driver, or a worker, while the Python tasks wait for <ROOT>/release.
with DAG("lance_test_spark_cluster_faults", **ARGS) as faults_dag:
    LanceSparkWriteOperator(task_id="slow_write", uri=f"{ROOT}/slow.lance", mode="append",
                            source_callable="cluster_sources:slow_until_released", py_files=SOURCES, retries=1,
                            retry_delay=dt.timedelta(0), **common)
