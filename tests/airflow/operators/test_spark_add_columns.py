"""LanceSparkAddColumnsOperator through ``dag.test()`` with real ``spark-submit`` on ``local[2]``;
pylance's ``add_columns`` with the same expressions / functions on identical copies is the oracle.

One run of ``tests/airflow/dags/lance_test_spark_add_columns.py`` is shared by the assertions; a
pandas function, a Spark SQL backfill, a function Spark rejects and a retry after the commit landed
run in a second DAG of that file,
in make stress (``--run-slow``).
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import sys
from typing import Any

import lance as pylance
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from lance_airflow_testing import SparkSubmitSpy, asset_events, connection_env, load_dag, task_instances, xcom_value

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
import spark_udfs  # noqa: E402

SECRET = "S3cr3t-add-columns-never-logged-5b2e"
EXPRESSIONS = {"doubled": "id * 2", "shout": "upper(label)"}
#: the tasks of the second DAG (make stress)
SLOW_TASKS = ("pandas_v22", "backfill_again", "spark_rejects", "retry_after_commit")


def _table(start: int, rows: int) -> pa.Table:
    ids = range(start, start + rows)
    return pa.table({"id": pa.array(ids, pa.int64()), "label": pa.array([f"row-{i}" for i in ids])})


@dataclasses.dataclass
class Run:
    root: pathlib.Path
    versions: dict[str, int]
    dag_run: Any
    tis: dict[str, Any]
    spy: SparkSubmitSpy

    def uri(self, name: str) -> str:
        return str(self.root / f"{name}.lance")

    def failure(self, task_id: str) -> dict[str, Any]:
        return json.loads((self.root / "failures" / f"{task_id}.json").read_text())


def _versioned(root: pathlib.Path, names: tuple[str, ...]) -> dict[str, int]:
    return {name: pylance.dataset(str(root / f"{name}.lance")).version for name in names}


def _v22(uri: Any) -> None:
    pylance.write_dataset(_table(0, 1000), uri("v22"), max_rows_per_file=300, data_storage_version="2.2",
                          enable_stable_row_ids=True)
    pylance.dataset(uri("v22")).delete("id % 7 = 1 OR id BETWEEN 310 AND 320")
    shutil.copytree(uri("v22"), uri("v22_oracle"))


def _scored(uri: str) -> None:
    pylance.write_dataset(_table(0, 400), uri, max_rows_per_file=200)
    pylance.dataset(uri).add_columns(spark_udfs.score, read_columns=["id"])


def _run_dag(root: pathlib.Path, dag_id: str, versions: dict[str, int], spy: SparkSubmitSpy) -> Run:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LANCE_TEST_ROOT", str(root))
        mp.setenv(*connection_env("lance_test", conn_type="lance", host=str(root),
                                  extra={"storage_options": {"aws_secret_access_key": SECRET}}))
        dag_run = load_dag("lance_test_spark_add_columns.py", dag_id).test()
    return Run(root, versions, dag_run, task_instances(dag_run), spy)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, spark_submit_spy: SparkSubmitSpy) -> Run:
    root = tmp_path_factory.mktemp("spark-add-columns")
    uri = lambda name: str(root / f"{name}.lance")  # noqa: E731
    pylance.write_dataset(_table(0, 1000), uri("v20"), max_rows_per_file=250, data_storage_version="2.0")
    pylance.dataset(uri("v20")).delete("id % 9 = 4")
    shutil.copytree(uri("v20"), uri("v20_oracle"))
    _v22(uri)
    _scored(uri("backfill"))
    pylance.write_dataset(_table(400, 200), uri("backfill"), mode="append", max_rows_per_file=100)
    for name in ("staged", "fails", "concurrent"):
        pylance.write_dataset(_table(0, 400), uri(name), max_rows_per_file=100)
    versions = _versioned(root, ("v20", "v22", "backfill", "staged", "fails", "concurrent"))
    return _run_dag(root, "lance_test_spark_add_columns", versions, spark_submit_spy)


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory: pytest.TempPathFactory, spark_submit_spy: SparkSubmitSpy) -> Run:
    """The second DAG (make stress): a pandas function, a Spark SQL backfill, a function Spark rejects,
    a retry after the commit landed."""
    root = tmp_path_factory.mktemp("spark-add-columns-slow")
    uri = lambda name: str(root / f"{name}.lance")  # noqa: E731
    _v22(uri)
    _scored(uri("backfill"))
    for name in ("fails", "retry"):
        pylance.write_dataset(_table(0, 400), uri(name), max_rows_per_file=100)
    return _run_dag(root, "lance_test_spark_add_columns_slow", _versioned(root, ("v22", "backfill", "fails", "retry")),
                    spark_submit_spy)


def test_spark_sql_expressions_equal_pylance_add_columns_on_a_2_0_dataset_with_deletions(run: Run) -> None:
    assert run.tis["sql_v20"].state == "success"
    oracle = pylance.dataset(run.uri("v20_oracle"))
    oracle.add_columns(EXPRESSIONS)
    ours = pylance.dataset(run.uri("v20"))
    assert ours.to_table() == oracle.to_table()
    assert ours.schema == oracle.schema and ours.data_storage_version == "2.0"
    assert ours.count_rows() == 1000 - len(range(4, 1000, 9))
    result = xcom_value(run.dag_run, "sql_v20")
    assert result["operation"] == "merge" and result["columns"] == ["doubled", "shout"]
    assert (result["read_version"], result["version"]) == (run.versions["v20"], ours.version)
    assert result["num_fragments"] == 4 and result["num_rows"] == 1000  # physical rows, deleted ones included
    txn = ours.read_transaction(ours.version)  # pylance's reading of what we committed
    assert type(txn.operation).__name__ == "Merge" and txn.read_version == run.versions["v20"]
    assert ours.version == run.versions["v20"] + 1


def test_functions_equal_pylance_add_columns_on_a_2_2_dataset_with_stable_row_ids(run: Run) -> None:
    assert run.tis["udf_v22"].state == "success"
    oracle = pylance.dataset(run.uri("v22_oracle"))
    oracle.add_columns(spark_udfs.embed, read_columns=["id", "label"])
    ours = pylance.dataset(run.uri("v22"))
    assert ours.schema == oracle.schema
    assert ours.schema.field("embedding").type == pa.list_(pa.float32(), spark_udfs.DIM)
    assert ours.to_table(with_row_id=True) == oracle.to_table(with_row_id=True)
    assert ours.version == run.versions["v22"] + 1


@pytest.mark.slow
def test_a_pandas_function_equals_pylance_add_columns(slow_run: Run) -> None:
    assert slow_run.tis["pandas_v22"].state == "success"
    oracle = pylance.dataset(slow_run.uri("v22_oracle"))
    oracle.add_columns(spark_udfs.score, read_columns=["id"])
    ours = pylance.dataset(slow_run.uri("v22"))
    assert ours.schema == oracle.schema
    assert ours.to_table(with_row_id=True) == oracle.to_table(with_row_id=True)
    assert ours.version == slow_run.versions["v22"] + 1


def test_only_missing_backfills_the_appended_fragments_with_one_data_replacement(run: Run) -> None:
    for task_id in ("backfill", "backfill_nothing"):
        assert run.tis[task_id].state == "success"
    ds = pylance.dataset(run.uri("backfill"))
    table = ds.to_table()
    assert table.num_rows == 600 and table["score"].null_count == 0
    assert table["score"] == pc.multiply(table["id"].cast(pa.float64()), 0.5)
    assert table.schema.field("score").type == pa.float64()
    first = xcom_value(run.dag_run, "backfill")  # the two fragments pylance appended without the column
    assert first["operation"] == "data_replacement" and first["num_fragments"] == 2 and first["num_rows"] == 200
    assert first["version"] == run.versions["backfill"] + 1 == ds.version
    assert type(ds.read_transaction(ds.version).operation).__name__ == "DataReplacement"
    nothing = xcom_value(run.dag_run, "backfill_nothing")
    assert nothing["operation"] == "none" and nothing["version"] == ds.version and nothing["num_fragments"] == 0


@pytest.mark.slow
def test_only_missing_by_spark_sql_backfills_a_fragment_the_core_appended(slow_run: Run) -> None:
    assert slow_run.tis["backfill_again"].state == "success"
    ds = pylance.dataset(slow_run.uri("backfill"))
    table = ds.to_table()
    assert table.num_rows == 450 and table["score"].null_count == 0
    assert table["score"] == pc.multiply(table["id"].cast(pa.float64()), 0.5)
    assert table.schema.field("score").type == pa.float64()
    second = xcom_value(slow_run.dag_run, "backfill_again")  # the fragment our core appended, by Spark SQL
    assert second["operation"] == "data_replacement" and second["num_fragments"] == 1 and second["num_rows"] == 50
    assert second["version"] == slow_run.versions["backfill"] + 2 == ds.version
    assert type(ds.read_transaction(ds.version).operation).__name__ == "DataReplacement"


@pytest.mark.slow
def test_retry_after_the_commit_landed_adds_nothing(slow_run: Run) -> None:
    run = slow_run
    ti = run.tis["retry_after_commit"]
    assert (ti.state, ti.try_number) == ("success", 2)
    ds = pylance.dataset(run.uri("retry"))
    assert ds.version == run.versions["retry"] + 1
    assert ds.schema.names == ["id", "label", "score"]
    assert xcom_value(run.dag_run, "retry_after_commit")["version"] == ds.version
    assert ds.read_transaction(ds.version).transaction_properties["airflow.try_number"] == "1"
    staged = [p.name for p in (run.root / "retry.lance" / "_airflow_staging").glob("*.json")]
    assert len(staged) == 1 and staged[0].endswith(".landed.json")  # the receipt; no staged job result left


def test_retry_before_the_commit_commits_the_staged_result_without_running_spark_again(run: Run) -> None:
    ti = run.tis["retry_before_commit"]
    assert (ti.state, ti.try_number) == ("success", 2)
    ds = pylance.dataset(run.uri("staged"))
    assert ds.version == run.versions["staged"] + 1
    assert ds.to_table()["doubled"] == pc.multiply(ds.to_table()["id"], 2)
    assert ds.read_transaction(ds.version).transaction_properties["airflow.try_number"] == "2"
    runs = [argv for argv in run.spy.calls() if "airflow-lance-retry_before_commit" in argv]
    assert len(runs) == 1  # the second try committed what the first staged
    referenced = {f.path for frag in ds.get_fragments() for f in frag.data_files()}
    assert {p.name for p in (run.root / "staged.lance" / "data").iterdir()} == referenced


def test_a_failing_task_leaves_the_dataset_unchanged(run: Run) -> None:
    assert run.tis["function_fails"].state == "failed"
    assert run.failure("function_fails")["type"] == "LanceSparkJobError"
    assert "injected failure of the add-columns function" in run.failure("function_fails")["message"]
    # a window moves rows between partitions: the writer refuses to store them under the wrong rows
    assert run.tis["window_refused"].state == "failed"
    assert "moved rows" in run.failure("window_refused")["message"]
    ds = pylance.dataset(run.uri("fails"))
    assert ds.version == run.versions["fails"] and ds.schema.names == ["id", "label"]
    assert ds.to_table() == _table(0, 400)


@pytest.mark.slow
def test_a_function_spark_rejects_leaves_the_dataset_unchanged(slow_run: Run) -> None:
    assert slow_run.tis["spark_rejects"].state == "failed"
    failure = slow_run.failure("spark_rejects")
    assert failure["type"] == "LanceSparkJobError"
    ds = pylance.dataset(slow_run.uri("fails"))
    assert ds.version == slow_run.versions["fails"] and ds.schema.names == ["id", "label"]
    assert ds.to_table() == _table(0, 400)


@pytest.mark.parametrize(("task_id", "error", "words"), [
    ("unknown_input", "SchemaEvolutionError", "no_such_column"),
    ("existing_column", "SchemaEvolutionError", "already exist"),
    ("bad_sql", "SchemaEvolutionError", "is not Spark SQL"),
    ("bad_function", "JobSpecError", "package.module:function"),
])
def test_bad_input_is_refused_before_spark_runs(run: Run, task_id: str, error: str, words: str) -> None:
    assert run.tis[task_id].state == "failed"
    failure = run.failure(task_id)
    assert failure["type"] == error and words in failure["message"]


def test_an_append_landing_while_the_job_runs_keeps_its_rows(run: Run) -> None:
    assert run.tis["append_while_running"].state == "success"
    ds = pylance.dataset(run.uri("concurrent"))
    table = ds.to_table()
    assert table.num_rows == 410
    old = table.filter(pc.field("id") < 5000)
    assert old["doubled"] == pc.multiply(old["id"], 2)
    assert table.filter(pc.field("id") >= 5000)["doubled"].null_count == 10
    result = xcom_value(run.dag_run, "append_while_running")
    assert result["read_version"] == run.versions["concurrent"] and result["version"] == ds.version
    assert ds.version == run.versions["concurrent"] + 2  # the append, then our Merge over it
    assert sorted(f.fragment_id for f in ds.get_fragments()) == [0, 1, 2, 3, 4]


def test_spark_ran_only_for_valid_jobs_and_secrets_stay_out(run: Run) -> None:
    slow = [f"airflow-lance-{task_id}" for task_id in SLOW_TASKS]
    calls = [argv for argv in run.spy.calls() if not any(name in argv for name in slow)]
    # sql_v20, udf_v22, backfill, function_fails, retry_before_commit (first try only),
    # window_refused, concurrent
    assert len(calls) == 7
    assert all(SECRET not in " ".join(argv) for argv in calls)
    assert SECRET not in run.spy.output()
    for task_id in ("sql_v20", "udf_v22", "backfill"):
        assert SECRET not in json.dumps(xcom_value(run.dag_run, task_id))
    events = asset_events(f"lance+file://{run.uri('v20')}")
    assert [e["version"] for e in events] == [xcom_value(run.dag_run, "sql_v20")["version"]]


def test_every_new_file_of_a_committed_job_is_referenced(run: Run) -> None:
    for name in ("v20", "v22", "backfill", "concurrent"):
        ds = pylance.dataset(run.uri(name))
        referenced = {f.path for frag in ds.get_fragments() for f in frag.data_files()}
        on_disk = {p.name for p in (run.root / f"{name}.lance" / "data").iterdir()}
        assert on_disk == referenced, name
