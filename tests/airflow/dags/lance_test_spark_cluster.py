"""Test DAG: the Spark operators against a standalone cluster (the ``spark_cluster`` connection,
``spark://127.0.0.1:<port>``, client deploy mode; tests/airflow/spark_cluster.py starts it).

A write of 3,000 rows in 4 Spark partitions (small files: 250 rows each), a Spark compaction of
its 12 fragments, a write whose Spark task
fails on its first attempt (Spark retries it: ``spark.task.maxFailures``); in make stress also a
column added by a Spark SQL expression (one task per fragment), a merge insert updating 500 rows
and inserting 500, and a Kartothek import on executors. Paths come from LANCE_CLUSTER_TEST_ROOT;
``python_env_archive`` from LANCE_CLUSTER_TEST_ARCHIVE (empty: none), set before parsing.
"""

from __future__ import annotations

import datetime as dt
import os
import pathlib
from typing import Any

from airflow.providers.common.compat.sdk import DAG, chain

from airflow_lance.operators.kartothek import KartothekToLanceOperator
from airflow_lance.operators.maintenance import LanceCompactFilesOperator
from airflow_lance.operators.merge_insert import LanceSparkMergeInsertOperator
from airflow_lance.operators.spark_add_columns import LanceSparkAddColumnsOperator
from airflow_lance.operators.spark_write import LanceSparkWriteOperator
from spark_write_faults import failure_recorder

ROOT = os.environ.get("LANCE_CLUSTER_TEST_ROOT", "/tmp/airflow-lance-cluster-test")
SOURCES = str(pathlib.Path(__file__).resolve().parents[1] / "cluster_sources.py")
FIXTURE_STORE = str(pathlib.Path(__file__).resolve().parents[2] / "fixtures" / "kartothek" / "store")
CONF = {"spark.ui.enabled": "false", "spark.log.level": "WARN", "spark.sql.shuffle.partitions": "2",
        "spark.executor.memory": "512m", "spark.scheduler.minRegisteredResourcesRatio": "1.0"}
#: ids 2,500-3,499: 500 rows of the written dataset updated, 500 inserted
UPSERT_SQL = ("SELECT id, CAST(id * -1.0 AS DOUBLE) AS x, concat('new-', CAST(id AS STRING)) AS name, "
              "CAST(id * -2.0 AS DOUBLE) AS x2 FROM range(2500, 3500, 1, 2)")
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
    full: list[Any] = []
    if os.environ.get("LANCE_CLUSTER_TEST_FULL") == "1":  # make stress: three more applications on the cluster
        full = [LanceSparkAddColumnsOperator(task_id="add_columns", uri=f"{ROOT}/written.lance",
                                             expressions={"x2": "x * 2"}, **common),
                LanceSparkMergeInsertOperator(task_id="merge_insert", uri=f"{ROOT}/written.lance", on="id",
                                              source_sql=UPSERT_SQL, num_partitions=2, **common),
                KartothekToLanceOperator(task_id="kartothek", store_uri=f"file://{FIXTURE_STORE}",
                                         dataset_uuid="two_keys", target=f"{ROOT}/two_keys.lance",
                                         execution="spark", num_partitions=2, **common)]
    retried = LanceSparkWriteOperator(task_id="task_retried", uri=f"{ROOT}/retried.lance", mode="create",
                                      source_callable="cluster_sources:first_attempt_fails", py_files=SOURCES,
                                      **common)
    chain(write, compact, *full, retried)

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

# The Airflow task process killed between the Spark job's end and the commit
# (tests/airflow/operators/test_spark_cluster_faults.py runs this DAG in a child process, kills it
# when a staged result appears, and runs it again with the same logical date and run id).
# dag.test() recreates the DAG run each time (every task at try 1 again), so the key is given: the
# default key's value, which makes a first try look for its landed commit as a retry always does.
KEY = "{{ dag.dag_id }}/{{ run_id }}/{{ task.task_id }}/{{ ti.map_index }}"
with DAG("lance_test_spark_cluster_kill", **ARGS) as kill_dag:
    LanceSparkWriteOperator(task_id="write", uri=f"{ROOT}/killed.lance", mode="create", source_sql=ROWS_SQL,
                            idempotency_key=KEY, **common) >> LanceSparkMergeInsertOperator(
        task_id="merge_insert", uri=f"{ROOT}/killed.lance", on="id", num_partitions=2,
        source_sql="SELECT id, x, name FROM (" + UPSERT_SQL + ")", idempotency_key=KEY, **common)

# Speculative execution: partition 0's first attempt is slow; Spark runs a duplicate attempt
# (the faults test's cluster has its workers on two loopback addresses: Spark never runs a
# speculative copy on the host of the attempt it duplicates).
SPECULATION = {"spark.speculation": "true", "spark.speculation.interval": "100ms",
               "spark.speculation.multiplier": "1.5", "spark.speculation.quantile": "0.5",
               "spark.speculation.minTaskRuntime": "1s",
               # batches of 100 rows: the slow attempt's rows reach its writer before it waits
               "spark.sql.execution.arrow.maxRecordsPerBatch": "100"}
with DAG("lance_test_spark_cluster_speculation", **ARGS) as speculation_dag:
    LanceSparkWriteOperator(task_id="speculated", uri=f"{ROOT}/speculated.lance", mode="create",
                            source_callable="cluster_sources:slow_first_attempt", py_files=SOURCES,
                            max_rows_per_file=250, lance_conn_id="lance_test", spark_conn_id="spark_cluster",
                            conf={**CONF, **SPECULATION})
