"""Test DAG of LanceSparkAddColumnsOperator: Spark SQL expressions and functions on 2.0 and 2.2
datasets (with deletions, stable row ids), a backfill of appended fragments, a retry after the
commit landed, a failing function, an append landing while the job runs, and refusals before
Spark runs; ``lance_test_spark_add_columns_slow`` (make stress): a pandas function, a Spark SQL
backfill of a fragment the core appended, a function Spark rejects. Paths come from LANCE_TEST_ROOT,
set by the test before parsing."""

from __future__ import annotations

import datetime as dt
import os
import pathlib
from typing import Any

import lance as pylance
import pyarrow as pa

from airflow.providers.common.compat.sdk import DAG, task

import airflow_lance.core as lance

from airflow_lance.operators.spark_add_columns import LanceSparkAddColumnsOperator
from spark_write_faults import failure_recorder

ROOT = os.environ.get("LANCE_TEST_ROOT", "/tmp/airflow-lance-test")
UDFS = str(pathlib.Path(__file__).resolve().parents[1] / "spark_udfs.py")
SPARK_CONF = {"spark.ui.enabled": "false", "spark.log.level": "WARN"}
EXPRESSIONS = {"doubled": "id * 2", "shout": "upper(label)"}
#: rows a concurrent writer appends while the add-columns job runs
APPENDED = pa.table({"id": pa.array(range(5000, 5010), pa.int64()), "label": [f"late-{i}" for i in range(10)]})

record_failure = failure_recorder(ROOT)
common: dict[str, Any] = {"lance_conn_id": "lance_test", "conf": SPARK_CONF, "retry_delay": dt.timedelta(0),
                          "trigger_rule": "all_done", "on_failure_callback": record_failure}


class FailAfterCommit(LanceSparkAddColumnsOperator):
    """Fails its first try right after the commit landed (fault injection)."""

    def _commit(self, spec, staged, key, context):  # type: ignore[no-untyped-def]
        summary = super()._commit(spec, staged, key, context)
        if context["ti"].try_number == 1:
            raise RuntimeError("injected failure after the commit")
        return summary


class FailBeforeCommit(LanceSparkAddColumnsOperator):
    """Fails its first try after the Spark job staged its result, before the commit (fault injection)."""

    def _commit(self, spec, staged, key, context):  # type: ignore[no-untyped-def]
        if context["ti"].try_number == 1:
            raise RuntimeError("injected failure before the commit")
        return super()._commit(spec, staged, key, context)


class AppendWhileRunning(LanceSparkAddColumnsOperator):
    """Another writer (pylance) appends rows after the Spark job read the dataset, before the commit."""

    def _run_job(self, spec):  # type: ignore[no-untyped-def]
        staged = super()._run_job(spec)
        pylance.write_dataset(APPENDED, spec.uri, mode="append")
        return staged


with DAG("lance_test_spark_add_columns", schedule=None, start_date=dt.datetime(2025, 1, 1), catchup=False) as dag:
    sql_v20 = LanceSparkAddColumnsOperator(task_id="sql_v20", uri=f"{ROOT}/v20.lance", expressions=EXPRESSIONS,
                                           **common)
    udf_v22 = LanceSparkAddColumnsOperator(task_id="udf_v22", uri="v22.lance", function="spark_udfs:embed",
                                           input_columns=["id", "label"], py_files=UDFS, **common)
    backfill = LanceSparkAddColumnsOperator(task_id="backfill", uri=f"{ROOT}/backfill.lance",
                                            function="spark_udfs:score", output_schema={"score": "float64"},
                                            input_columns=["id"], only_missing=True, py_files=UDFS, **common)
    backfill_nothing = LanceSparkAddColumnsOperator(task_id="backfill_nothing", uri=f"{ROOT}/backfill.lance",
                                                    expressions={"score": "id * 0.5"}, only_missing=True, **common)
    retry_staged = FailBeforeCommit(task_id="retry_before_commit", uri=f"{ROOT}/staged.lance",
                                    expressions={"doubled": "id * 2"}, retries=1, **common)
    fails = LanceSparkAddColumnsOperator(task_id="function_fails", uri=f"{ROOT}/fails.lance",
                                         function="spark_udfs:fails_on_late_rows", input_columns=["id"],
                                         py_files=UDFS, **common)
    concurrent = AppendWhileRunning(task_id="append_while_running", uri=f"{ROOT}/concurrent.lance",
                                    expressions={"doubled": "id * 2"}, **common)
    unknown_input = LanceSparkAddColumnsOperator(task_id="unknown_input", uri=f"{ROOT}/fails.lance",
                                                 expressions={"x": "no_such_column + 1"}, **common)
    existing = LanceSparkAddColumnsOperator(task_id="existing_column", uri=f"{ROOT}/fails.lance",
                                            expressions={"label": "upper(label)"}, **common)
    bad_sql = LanceSparkAddColumnsOperator(task_id="bad_sql", uri=f"{ROOT}/fails.lance",
                                           expressions={"x": "id +* 2"}, **common)
    bad_function = LanceSparkAddColumnsOperator(task_id="bad_function", uri=f"{ROOT}/fails.lance",
                                                function="no_module_function", **common)
    window_refused = LanceSparkAddColumnsOperator(task_id="window_refused", uri=f"{ROOT}/fails.lance",
                                                  expressions={"x": "sum(id) OVER ()"}, **common)
    (unknown_input >> existing >> bad_sql >> bad_function >> sql_v20 >> udf_v22 >> backfill >> backfill_nothing
     >> retry_staged >> fails >> window_refused >> concurrent)

# make stress (tests marked slow): a pandas function, a Spark SQL backfill of a fragment the core
# appended (a decimal cast to the column's double), a function Spark rejects, a retry after the
# commit landed
with DAG("lance_test_spark_add_columns_slow", schedule=None, start_date=dt.datetime(2025, 1, 1),
         catchup=False) as slow:
    pandas_v22 = LanceSparkAddColumnsOperator(task_id="pandas_v22", uri="v22.lance", function="spark_udfs:score_pandas",
                                              function_input="pandas", input_columns=["id"],
                                              output_schema={"score": "float64"}, py_files=UDFS, **common)

    @task(task_id="append_without_score")
    def append_without_score() -> None:
        """New rows written without the score column (their fragment lacks it)."""
        lance.write_dataset(pa.table({"id": pa.array(range(600, 650), pa.int64()),
                                      "label": [f"row-{i}" for i in range(600, 650)]}),
                            f"{ROOT}/backfill.lance", mode="append")

    backfill_again = LanceSparkAddColumnsOperator(task_id="backfill_again", uri=f"{ROOT}/backfill.lance",
                                                  # a decimal, cast to the column's double
                                                  expressions={"score": "id * 0.5"},
                                                  only_missing=True, **common)
    spark_rejects = LanceSparkAddColumnsOperator(task_id="spark_rejects", uri=f"{ROOT}/fails.lance",
                                                 expressions={"x": "no_such_function(id)"}, **common)
    retry = FailAfterCommit(task_id="retry_after_commit", uri=f"{ROOT}/retry.lance", function="spark_udfs:score",
                            input_columns=["id"], py_files=UDFS, retries=1, **common)
    pandas_v22 >> append_without_score() >> backfill_again >> spark_rejects >> retry
