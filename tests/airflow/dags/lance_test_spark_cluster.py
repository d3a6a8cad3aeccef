"""Test DAG: the Spark operators against a standalone cluster (the ``spark_cluster`` connection,
``spark://127.0.0.1:<port>``, client deploy mode; tests/airflow/spark_cluster.py starts it).

A write of 3,000 rows in 4 Spark partitions (small files: 250 rows each), a Spark compaction of
its 12 fragments, and a Kartothek import on executors. Paths come from LANCE_CLUSTER_TEST_ROOT;
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

ROOT = os.environ.get("LANCE_CLUSTER_TEST_ROOT", "/tmp/airflow-lance-cluster-test")
FIXTURE_STORE = str(pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "kartothek" / "store")
CONF = {"spark.ui.enabled": "false", "spark.log.level": "WARN", "spark.sql.shuffle.partitions": "2",
        "spark.executor.memory": "512m"}
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
    write >> compact >> kartothek
