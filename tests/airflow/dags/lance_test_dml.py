"""Test DAG: LanceUpdateOperator and LanceDeleteOperator, local and on Spark, with retries after
and before the commit, a Spark job that fails and a refused expression (``lance_test_dml``, in
``make stress``); ``lance_test_dml_short`` without the Spark update and the failing job. Paths come from
LANCE_TEST_ROOT, set by the test before parsing."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from airflow_lance.operators.delete import LanceDeleteOperator
from airflow_lance.operators.update import LanceUpdateOperator
from dml_faults import failing_first_try
from lance_airflow_testing import whole_and_short_dags
from spark_write_faults import failure_recorder

ROOT = os.environ.get("LANCE_TEST_ROOT", "/tmp/airflow-lance-test")
SPARK_CONF = {"spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"}
UPDATES = {"price": "price * 2 + 1", "label": "upper(label)"}
WHERE = "id % 3 = 0 OR id > 950"
PREDICATE = "id % 4 = 1 OR label = 'row-10'"

record_failure = failure_recorder(ROOT)
common: dict[str, Any] = {"lance_conn_id": "lance_test", "retry_delay": dt.timedelta(0), "trigger_rule": "all_done"}
spark: dict[str, Any] = {**common, "mode": "spark", "conf": SPARK_CONF}


def _tasks(short: bool) -> list[Any]:
    update_local = failing_first_try(LanceUpdateOperator, "before_commit")(
        task_id="update_local", uri=f"{ROOT}/update_local.lance", updates=UPDATES, where=WHERE, retries=1,
        **common)
    delete_local = LanceDeleteOperator(task_id="delete_local", uri=f"{ROOT}/delete_local.lance",
                                       predicate=PREDICATE, **common)
    delete_spark = failing_first_try(LanceDeleteOperator, "before_commit")(
        task_id="delete_spark", uri=f"{ROOT}/delete_spark.lance", predicate=PREDICATE, retries=1, **spark)
    update_bad_column = LanceUpdateOperator(
        task_id="update_bad_column", uri=f"{ROOT}/untouched.lance", updates={"no_such_column": "1"},
        on_failure_callback=record_failure, **common)
    if short:
        return [update_local, delete_local, delete_spark, update_bad_column]
    update_spark = failing_first_try(LanceUpdateOperator, "after_commit")(
        task_id="update_spark", uri=f"{ROOT}/update_spark.lance", updates=UPDATES, where=WHERE, retries=1,
        num_tasks=2, **spark)
    update_spark_fails = LanceUpdateOperator(
        task_id="update_spark_fails", uri=f"{ROOT}/untouched.lance", updates={"price": "CAST(label AS DOUBLE)"},
        on_failure_callback=record_failure, **spark)
    return [update_local, update_spark, delete_local, delete_spark, update_bad_column, update_spark_fails]


# the whole DAG (three spark-submits) in `make stress`; `make test` runs the short one (one spark-submit:
# the Spark update and a failing Spark job are also run by example_lance_update.py and other operators' tests)
globals().update(whole_and_short_dags("lance_test_dml", _tasks))
