"""Test DAG: LanceSparkMergeInsertOperator on real spark-submit: an upsert on a uint32 key from a
Parquet source (Spark reads the key as bigint) whose first try fails after the commit, a conditional
update with deletes by source from a partial Lance source whose first try fails after the job and
before the commit (the retry commits the staged result), duplicate source keys and a concurrent
append; in ``lance_test_merge_insert_slow`` (make stress) a concurrent delete of rows the merge
replaces (a retryable conflict) and a failing Spark job. Paths
come from LANCE_TEST_ROOT, set by the test."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

import pyarrow as pa
from airflow.providers.common.compat.sdk import DAG

import airflow_lance.core as lance
from airflow_lance.operators.merge_insert import LanceSparkMergeInsertOperator
from dml_faults import failing_first_try, with_concurrent_commit
from spark_write_faults import failure_recorder

ROOT = os.environ.get("LANCE_TEST_ROOT", "/tmp/airflow-lance-test")
SPARK_CONF = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"}
CONDITION = "source.price > target.price"
BY_SOURCE = "id >= 1800"


def appended_rows() -> pa.Table:
    """What the concurrent writer appends."""
    ids = list(range(5000, 5100))
    return pa.table({"id": pa.array(ids, pa.int64()), "price": pa.array([1.5] * 100), "label": [f"c-{i}" for i in ids],
                     "vec": pa.FixedSizeListArray.from_arrays(pa.array([3.0] * 400, pa.float32()), 4)})


def append_concurrently(uri: str) -> None:
    lance.dataset(uri).insert(appended_rows())


def delete_concurrently(uri: str) -> None:
    lance.dataset(uri).delete("id = 1600")  # a row the merge replaces: both delete it


record_failure = failure_recorder(ROOT)
common: dict[str, Any] = {"lance_conn_id": "lance_test", "conf": SPARK_CONF, "retry_delay": dt.timedelta(0),
                          "trigger_rule": "all_done", "on": "id"}

with DAG("lance_test_merge_insert", schedule=None, start_date=dt.datetime(2025, 1, 1), catchup=False) as dag:
    upsert = failing_first_try(LanceSparkMergeInsertOperator, "after_commit")(
        task_id="upsert", uri=f"{ROOT}/upsert.lance", source_path=f"{ROOT}/upsert.parquet", retries=1, **common)
    conditional = failing_first_try(LanceSparkMergeInsertOperator, "before_commit")(
        task_id="conditional", retries=1, uri=f"{ROOT}/conditional.lance", source_lance_uri=f"{ROOT}/partial-source.lance",
        when_matched_update_all_condition=CONDITION, when_not_matched_by_source_delete=True,
        when_not_matched_by_source_delete_expr=BY_SOURCE, **common)
    duplicates = LanceSparkMergeInsertOperator(
        task_id="duplicates", uri=f"{ROOT}/duplicates.lance", source_path=f"{ROOT}/duplicates.parquet",
        on_failure_callback=record_failure, **common)
    concurrent_append = with_concurrent_commit(LanceSparkMergeInsertOperator, append_concurrently)(
        task_id="concurrent_append", uri=f"{ROOT}/appended.lance", source_path=f"{ROOT}/upsert.parquet", **common)
    upsert >> conditional >> duplicates >> concurrent_append

# make stress (tests marked slow): a concurrent delete that makes the job run again, a failing job
# (the update operator's test covers a failing Spark job in make test)
with DAG("lance_test_merge_insert_slow", schedule=None, start_date=dt.datetime(2025, 1, 1), catchup=False) as slow:
    concurrent_delete = with_concurrent_commit(LanceSparkMergeInsertOperator, delete_concurrently)(
        task_id="concurrent_delete", uri=f"{ROOT}/conflict.lance", source_path=f"{ROOT}/upsert.parquet", **common)
    job_fails = LanceSparkMergeInsertOperator(
        task_id="job_fails", uri=f"{ROOT}/duplicates.lance", source_path=f"{ROOT}/no-such-source.parquet",
        on_failure_callback=record_failure, **common)
    concurrent_delete >> job_fails
