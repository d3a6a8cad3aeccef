"""Test DAG: the Spark operators through Spark Connect (the ``spark_connect_test`` connection, conn
type ``spark_connect``, ``sc://localhost:<port>`` with the server's token as its password;
tests/airflow/spark_connect_server.py starts the server on ``local[2]``, requiring the token).

``lance_test_spark_connect_short`` (the default suite): a create of 1,000 rows in 4 Spark
partitions (4 fragments) from a source shipped with ``py_files`` (it records the
client's environment and command line), an upsert of 200 rows into it (the merge insert's
key-broadcast plan), and a create whose source fails partition 1 after its rows were passed on:
the job fails after writing files, nothing is committed.

``lance_test_spark_connect`` (make stress): the create (small files: 100 rows each), an append
of 600 rows, a Spark compaction of the 20 fragments, the failing create; merge inserts into a dataset the test wrote with pylance
(an upsert, then a conditional update with deletes by source from a partial source: the joined
plan) and one whose job fails; add columns (Spark SQL expressions, then a function) and a failing
function; Spark update and delete, then an update whose job fails; a Kartothek import on the
server's executors; and a write through a connection with a wrong token. Paths from
LANCE_CONNECT_TEST_ROOT.
"""

from __future__ import annotations

import datetime as dt
import os
import pathlib
from typing import Any

from airflow.providers.common.compat.sdk import DAG

from airflow_lance.operators.create_index import LanceCreateIndexOperator
from airflow_lance.operators.delete import LanceDeleteOperator
from airflow_lance.operators.kartothek import KartothekToLanceOperator
from airflow_lance.operators.maintenance import LanceCompactFilesOperator
from airflow_lance.operators.merge_insert import LanceSparkMergeInsertOperator
from airflow_lance.operators.spark_add_columns import LanceSparkAddColumnsOperator
from airflow_lance.operators.spark_write import LanceSparkWriteOperator
from airflow_lance.operators.update import LanceUpdateOperator

ROOT = os.environ.get("LANCE_CONNECT_TEST_ROOT", "/tmp/airflow-lance-connect-test")
TESTS = pathlib.Path(__file__).resolve().parents[1]
SOURCES = str(TESTS / "cluster_sources.py")
CONNECT_SOURCES = str(TESTS / "connect_sources.py")
UDFS = str(TESTS / "spark_udfs.py")
KARTOTHEK_STORE = str(TESTS.parent / "fixtures" / "kartothek" / "store")
common: dict[str, Any] = {"lance_conn_id": "lance_test", "spark_conn_id": "spark_connect_test",
                          "conf": {"spark.sql.shuffle.partitions": "2"}}
#: the upsert's source: ids 900..1099 (100 matched, 100 new) with new values
UPSERT_SQL = ("SELECT id, CAST(id * 2.0 AS DOUBLE) AS x, concat('new-', CAST(id AS STRING)) AS name "
              "FROM range(900, 1100, 1, 2)")
#: the merged dataset's upsert (the test wrote ids 0..1999 with pylance): ids 1500..2499 and id 2600
#: twice (a repeated key that matches nothing: the deletion vectors are written by a second job)
MERGED_UPSERT_SQL = (UPSERT_SQL.replace("range(900, 1100, 1, 2)", "range(1500, 2500, 1, 2)")
                     + " UNION ALL SELECT CAST(2600 AS BIGINT) AS id, CAST(x AS DOUBLE) AS x, 'dup-2600' AS name"
                     " FROM VALUES (1.0), (2.0) AS t(x)")
#: the conditional merge's partial source (no name column): every 7th id of 0..2999, x = 3 id
PARTIAL_SQL = "SELECT id, CAST(id * 3.0 AS DOUBLE) AS x FROM range(0, 3000, 7, 2)"
CONDITION = "source.x > target.x + 100"
BY_SOURCE = "id >= 2400"
EXPRESSIONS = {"doubled": "id * 2", "shout": "upper(name)"}
UPDATES = {"x": "x * 2 + 1", "name": "upper(name)"}
WHERE = "id % 3 = 0 OR id > 950"
PREDICATE = "id % 4 = 1 OR name = 'row-10'"


def create_task(root: str, max_rows_per_file: int | None = 100) -> LanceSparkWriteOperator:
    kwargs = {"max_rows_per_file": max_rows_per_file} if max_rows_per_file else {}
    return LanceSparkWriteOperator(task_id="create", uri=f"{root}/written.lance", mode="create",
                                   source_callable="connect_sources:recorded_rows", py_files=CONNECT_SOURCES,
                                   **kwargs, **common)


def upsert_task(root: str) -> LanceSparkMergeInsertOperator:
    return LanceSparkMergeInsertOperator(task_id="upsert", uri=f"{root}/written.lance", on="id",
                                         source_sql=UPSERT_SQL, **common)


def failing_task(root: str) -> LanceSparkWriteOperator:
    return LanceSparkWriteOperator(task_id="failing", uri=f"{root}/failed.lance", mode="create",
                                   source_callable="cluster_sources:first_attempt_fails", py_files=SOURCES,
                                   max_rows_per_file=100, **common)


def rows_sql(start: int, stop: int) -> str:
    return (f"SELECT id, CAST(id * 0.5 AS DOUBLE) AS x, concat('row-', CAST(id AS STRING)) AS name "
            f"FROM range({start}, {stop}, 1, 4)")


ARGS: dict[str, Any] = {"schedule": None, "start_date": dt.datetime(2025, 1, 1), "catchup": False}

# the short version (make test): the create, the upsert and the failing write
with DAG("lance_test_spark_connect_short", **ARGS) as short_dag:
    # one fragment per Spark partition (4): the upsert's key matching runs a task per fragment
    upsert_task(f"{ROOT}/short") << create_task(f"{ROOT}/short", max_rows_per_file=None)
    failing_task(f"{ROOT}/short")

with DAG("lance_test_spark_connect", **ARGS) as dag:
    create = create_task(ROOT)
    append = LanceSparkWriteOperator(task_id="append", uri=f"{ROOT}/written.lance", mode="append",
                                     source_sql=rows_sql(1000, 1600), max_rows_per_file=100, **common)
    compact = LanceCompactFilesOperator(task_id="compact", uri=f"{ROOT}/written.lance", mode="spark",
                                        compaction_options={"target_rows_per_fragment": 800}, **common)
    create >> append >> compact
    failing_task(ROOT)

    # merge insert: the key-broadcast plan, the joined plan, a failing job
    merge_upsert = LanceSparkMergeInsertOperator(task_id="merge_upsert", uri=f"{ROOT}/merged.lance", on="id",
                                                 source_sql=MERGED_UPSERT_SQL, **common)
    merge_conditional = LanceSparkMergeInsertOperator(
        task_id="merge_conditional", uri=f"{ROOT}/merged.lance", on="id", source_sql=PARTIAL_SQL,
        when_matched_update_all_condition=CONDITION, when_not_matched_by_source_delete=True,
        when_not_matched_by_source_delete_expr=BY_SOURCE, **common)
    merge_upsert >> merge_conditional
    LanceSparkMergeInsertOperator(task_id="merge_fails", uri=f"{ROOT}/merge_fails.lance", on="id",
                                  source_callable="cluster_sources:first_attempt_fails", py_files=SOURCES,
                                  **common)

    # add columns: Spark SQL expressions, a function, a failing function
    add_sql = LanceSparkAddColumnsOperator(task_id="add_sql", uri=f"{ROOT}/columns.lance", expressions=EXPRESSIONS,
                                           **common)
    add_function = LanceSparkAddColumnsOperator(task_id="add_function", uri=f"{ROOT}/columns.lance",
                                                function="spark_udfs:score", input_columns=["id"], py_files=UDFS,
                                                **common)
    add_sql >> add_function
    LanceSparkAddColumnsOperator(task_id="add_fails", uri=f"{ROOT}/add_fails.lance",
                                 function="spark_udfs:fails_on_late_rows", input_columns=["id"], py_files=UDFS,
                                 **common)

    # update and delete on Spark, then an update whose job fails
    update = LanceUpdateOperator(task_id="update", uri=f"{ROOT}/dml.lance", updates=UPDATES, where=WHERE,
                                 mode="spark", num_tasks=2, **common)
    delete = LanceDeleteOperator(task_id="delete", uri=f"{ROOT}/dml.lance", predicate=PREDICATE, mode="spark",
                                 **common)
    update_fails = LanceUpdateOperator(task_id="update_fails", uri=f"{ROOT}/dml.lance",
                                       updates={"x": "CAST(name AS DOUBLE)"}, mode="spark", **common)
    update >> delete >> update_fails

    # a scalar and a vector index built on the Connect server
    index_btree = LanceCreateIndexOperator(task_id="index_btree", uri=f"{ROOT}/indexed.lance", column="x",
                                           index_type="BTREE", mode="spark", **common)
    index_vector = LanceCreateIndexOperator(task_id="index_vector", uri=f"{ROOT}/indexed.lance", column="vec",
                                            index_type="IVF_FLAT", num_partitions=4, mode="spark", **common)
    index_btree >> index_vector

    KartothekToLanceOperator(task_id="kartothek", store_uri=f"file://{KARTOTHEK_STORE}", dataset_uuid="two_keys",
                             target=f"{ROOT}/two_keys.lance", max_rows_per_file=1, num_partitions=3, verify=True,
                             execution="spark", **common)

    LanceSparkWriteOperator(task_id="wrong_token", uri=f"{ROOT}/wrong_token.lance", mode="create",
                            source_sql=rows_sql(0, 10), lance_conn_id="lance_test",
                            spark_conn_id="spark_connect_wrong_token", conf={})
