"""Test DAG: casts on the way in (JSON doubles become float32 vectors), mistakes in casts, and
``rewrite_on_retry`` after a landed commit (the whole DAG in ``make stress``, a short one without
``rewrite_on_retry`` in ``make test``). Paths come from LANCE_TEST_ROOT, set by the test."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from airflow_lance.operators.spark_write import LanceSparkWriteOperator
from lance_airflow_testing import whole_and_short_dags
from spark_write_faults import FailOnFirstTry, failure_recorder

ROOT = os.environ.get("LANCE_TEST_ROOT", "/tmp/airflow-lance-test")
SPARK_CONF = {"spark.ui.enabled": "false", "spark.log.level": "WARN", "spark.sql.shuffle.partitions": "2"}


record_failure = failure_recorder(ROOT)

common: dict[str, Any] = {"lance_conn_id": "lance_test", "conf": SPARK_CONF, "retry_delay": dt.timedelta(0),
                          "source_format": "json", "trigger_rule": "all_done", "on_failure_callback": record_failure}



def _tasks(short: bool) -> list[Any]:
    vectors = LanceSparkWriteOperator(
        task_id="vectors_from_json", uri=f"{ROOT}/vectors.lance", mode="create", source_path=f"{ROOT}/vectors.json",
        fixed_size_lists={"embedding": ["{{ 60 + 4 }}", "float32"]}, cast={"price": "float32"}, **common,
    )
    unknown_type = LanceSparkWriteOperator(
        task_id="unknown_type", uri=f"{ROOT}/vectors.lance", mode="append", source_path=f"{ROOT}/vectors.json",
        cast={"price": "flaot32"}, **common,
    )
    unknown_column = LanceSparkWriteOperator(
        task_id="unknown_column", uri=f"{ROOT}/vectors.lance", mode="append", source_path=f"{ROOT}/vectors.json",
        fixed_size_lists={"embedding": (64, "float32")}, cast={"prize": "float32"}, **common,
    )
    ragged = LanceSparkWriteOperator(
        task_id="ragged_vector", uri=f"{ROOT}/vectors.lance", mode="append", source_path=f"{ROOT}/ragged.json",
        fixed_size_lists={"embedding": (64, "float32")}, cast={"price": "float32"}, **common,
    )
    if short:
        return [vectors, unknown_type, unknown_column, ragged]
    rewrite = FailOnFirstTry(
        task_id="rewrite_on_retry", fail_at="after_commit", uri=f"{ROOT}/rewrite.lance", mode="append",
        source_path=f"{ROOT}/small.json", rewrite_on_retry=True, retries=1, **common,
    )
    return [vectors, unknown_type, unknown_column, ragged, rewrite]


# the whole DAG (four spark-submits) in `make stress`; `make test` runs it without rewrite_on_retry (two)
globals().update(whole_and_short_dags("lance_test_spark_write_casts", _tasks))
