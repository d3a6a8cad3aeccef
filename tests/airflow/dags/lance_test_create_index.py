"""Test DAGs: LanceCreateIndexOperator, local and on Spark, with retries before and after the
commit, bad input and a failing merge task (``lance_test_create_index``); more index types (IVF_PQ
with num_bits=4 too) and a failing Spark job (``lance_test_create_index_more``, slow). Paths come
from LANCE_TEST_ROOT, set by the test before parsing."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from airflow.providers.common.compat.sdk import DAG

from airflow_lance.operators.create_index import LanceCreateIndexOperator
from dml_faults import failing_first_try
from spark_write_faults import failure_recorder

ROOT = os.environ.get("LANCE_TEST_ROOT", "/tmp/airflow-lance-test")
SPARK_CONF = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"}
PQ = {"num_partitions": 4, "num_sub_vectors": 4}

record_failure = failure_recorder(ROOT)
common: dict[str, Any] = {"lance_conn_id": "lance_test", "retry_delay": dt.timedelta(0), "trigger_rule": "all_done"}
spark: dict[str, Any] = {**common, "mode": "spark", "conf": SPARK_CONF}
refused: dict[str, Any] = {**common, "uri": f"{ROOT}/untouched.lance", "on_failure_callback": record_failure}

with DAG("lance_test_create_index", schedule=None, start_date=dt.datetime(2025, 1, 1), catchup=False) as dag:
    btree_local = LanceCreateIndexOperator(task_id="btree_local", uri=f"{ROOT}/local.lance", column="id",
                                           index_type="BTREE", **common)
    ivf_pq_local = LanceCreateIndexOperator(task_id="ivf_pq_local", uri=f"{ROOT}/local.lance", column="vec",
                                            index_type="IVF_PQ", **PQ, **common)
    btree_spark = failing_first_try(LanceCreateIndexOperator, "before_commit")(
        task_id="btree_spark", uri=f"{ROOT}/spark.lance", column="id", index_type="btree", num_tasks=2,
        retries=1, **spark)
    ivf_pq_spark = failing_first_try(LanceCreateIndexOperator, "after_commit")(
        task_id="ivf_pq_spark", uri=f"{ROOT}/spark.lance", column="vec", index_type="IVF_PQ", retries=1, **PQ,
        **spark)
    unknown_type = LanceCreateIndexOperator(task_id="unknown_type", column="id", index_type="HNSW", **refused)
    missing_column = LanceCreateIndexOperator(task_id="missing_column", column="nope", index_type="BTREE",
                                              **refused)
    wrong_type = LanceCreateIndexOperator(task_id="wrong_type", column="vec", index_type="BITMAP", **refused)
    vector_on_text = LanceCreateIndexOperator(task_id="vector_on_text", column="label", index_type="IVF_FLAT",
                                              mode="spark", **refused)
    exists = LanceCreateIndexOperator(task_id="exists", column="id", index_type="BTREE", mode="spark", **refused)
    # 20 rows: too few to train PQ, pylance 14 commits an empty index; no Spark job runs for it
    empty_pq_spark = LanceCreateIndexOperator(task_id="empty_pq_spark", uri=f"{ROOT}/few.lance", column="vec",
                                              index_type="IVF_PQ", num_sub_vectors=4, **spark)
    # train=False: pylance 14's empty BTREE, written in the worker; no Spark job runs for it
    untrained_spark = LanceCreateIndexOperator(task_id="untrained_spark", uri=f"{ROOT}/untrained.lance",
                                               column="id", index_type="BTREE", train=False, **spark)
    # the store refuses the index files (``_indices`` is a file): the sorted runs are staged, the merge task fails
    merge_fails = LanceCreateIndexOperator(task_id="merge_fails", uri=f"{ROOT}/blocked.lance", column="id",
                                           index_type="BTREE", num_tasks=2, on_failure_callback=record_failure,
                                           **spark)
    (btree_local >> ivf_pq_local >> btree_spark >> ivf_pq_spark >> unknown_type >> missing_column >> wrong_type
     >> vector_on_text >> exists >> empty_pq_spark >> untrained_spark >> merge_fails)

with DAG("lance_test_create_index_more", schedule=None, start_date=dt.datetime(2025, 1, 1),
         catchup=False) as more_dag:
    tasks = []
    for kind, column, extra in (("BITMAP", "label", {}), ("LABEL_LIST", "tags", {}),
                                ("IVF_FLAT", "vec", {"num_partitions": 4, "metric": "cosine"})):
        for mode in ("local", "spark"):
            options = spark if mode == "spark" else common
            tasks.append(LanceCreateIndexOperator(
                task_id=f"{kind.lower()}_{mode}", uri=f"{ROOT}/{mode}.lance", column=column, index_type=kind,
                **extra, **options))
    # IVF_PQ with 4-bit codes (two a byte), local and on Spark
    for mode in ("local", "spark"):
        tasks.append(LanceCreateIndexOperator(
            task_id=f"ivf_pq4_{mode}", uri=f"{ROOT}/pq4_{mode}.lance", column="vec", index_type="IVF_PQ",
            num_partitions=4, num_sub_vectors=8, num_bits=4, **(spark if mode == "spark" else common)))
    # 300 rows, 100 vectors: the Spark job counts too few to train PQ and stages pylance's empty index
    tasks.append(LanceCreateIndexOperator(task_id="sparse_pq_spark", uri=f"{ROOT}/sparse.lance", column="vec",
                                          index_type="IVF_PQ", num_sub_vectors=4, num_tasks=2, **spark))
    # the dataset lost a data file: the executors fail reading it, nothing is committed
    tasks.append(LanceCreateIndexOperator(task_id="spark_fails", uri=f"{ROOT}/broken.lance", column="id",
                                          index_type="BTREE", on_failure_callback=record_failure, **spark))
    for upstream, downstream in zip(tasks, tasks[1:]):
        upstream >> downstream
