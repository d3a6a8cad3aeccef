"""LanceUpdateOperator and LanceDeleteOperator through ``dag.test()`` (``local`` and real
``spark-submit`` on ``local[2]``), each against pylance's ``update`` / ``delete`` on an
identical copy of a dataset pylance wrote (stable row ids, a deletion already in place).

One run of ``tests/airflow/dags/lance_test_dml.py`` (its short DAG; the whole DAG in ``make stress``)
is shared by the assertions."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
from typing import Any

import lance as pylance
import pyarrow as pa
import pytest
from lance_airflow_testing import SparkSubmitSpy, connection_env, load_dag, task_instances, xcom_value

UPDATES = {"price": "price * 2 + 1", "label": "upper(label)"}
WHERE = "id % 3 = 0 OR id > 950"
PREDICATE = "id % 4 = 1 OR label = 'row-10'"
NAMES = ("update_local", "update_spark", "delete_local", "delete_spark", "untouched")


def _table(n: int) -> pa.Table:
    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "price": pa.array([i * 0.5 for i in range(n)], pa.float64()),
        "label": pa.array([f"row-{i}" for i in range(n)]),
        "vec": pa.FixedSizeListArray.from_arrays(pa.array([float(i % 7) for i in range(4 * n)], pa.float32()), 4),
    })


@dataclasses.dataclass
class DmlRun:
    root: pathlib.Path
    dag_run: Any
    tis: dict[str, Any]
    spark_calls: list[list[str]]  # the command lines of this DAG run's spark-submits

    def uri(self, name: str) -> str:
        return str(self.root / f"{name}.lance")

    def oracle(self, name: str) -> str:
        return str(self.root / "oracle" / f"{name}.lance")

    def failure(self, task_id: str) -> dict[str, Any]:
        return json.loads((self.root / "failures" / f"{task_id}.json").read_text())


def _run_dag(root: pathlib.Path, spy: SparkSubmitSpy, dag_id: str) -> DmlRun:
    for name in NAMES:
        ds = pylance.write_dataset(_table(1000), str(root / "oracle" / f"{name}.lance"), max_rows_per_file=300,
                                   enable_stable_row_ids=True)
        ds.delete("id IN (3, 400, 999)")
        shutil.copytree(root / "oracle" / f"{name}.lance", root / f"{name}.lance")
    calls_before = len(spy.runs())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LANCE_TEST_ROOT", str(root))
        mp.setenv(*connection_env("lance_test", conn_type="lance", host=str(root)))
        dag_run = load_dag("lance_test_dml.py", dag_id).test()
    return DmlRun(root, dag_run, task_instances(dag_run), [argv for _, argv, _ in spy.runs()][calls_before:])


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, spark_submit_spy: SparkSubmitSpy) -> DmlRun:
    """The short DAG: local update and delete, a Spark delete, a refused column (one spark-submit)."""
    return _run_dag(tmp_path_factory.mktemp("dml"), spark_submit_spy, "lance_test_dml_short")


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory, spark_submit_spy: SparkSubmitSpy) -> DmlRun:
    """The whole DAG, adding a Spark update retried after its commit and a failing Spark job."""
    return _run_dag(tmp_path_factory.mktemp("dml-full"), spark_submit_spy, "lance_test_dml")


def _contents(uri: str) -> dict[str, list[Any]]:
    """Rows (with their stable row ids) in id order."""
    return pylance.dataset(uri).to_table(with_row_id=True).sort_by("id").to_pydict()


@pytest.mark.parametrize(("task_id", "dag"), [("update_local", "run"),
                                              pytest.param("update_spark", "full_run", marks=pytest.mark.slow)])
def test_update_equals_pylance_update(request: pytest.FixtureRequest, task_id: str, dag: str) -> None:
    run: DmlRun = request.getfixturevalue(dag)
    ti = run.tis[task_id]
    assert (ti.state, ti.try_number) == ("success", 2)
    expected = pylance.dataset(run.oracle(task_id)).update(UPDATES, where=WHERE)
    result = xcom_value(run.dag_run, task_id)
    assert result["num_rows_updated"] == expected["num_rows_updated"] == 364
    assert (result["version"], result["read_version"], result["mode"]) == (3, 2, task_id.split("_")[1])
    # the same rows, values and row ids (updated rows keep theirs), one version (a retry commits nothing)
    assert _contents(run.uri(task_id)) == _contents(run.oracle(task_id))
    assert pylance.dataset(run.uri(task_id)).version == pylance.dataset(run.oracle(task_id)).version == 3
    ours = pylance.dataset(run.uri(task_id))
    assert ours.to_table(columns=["id"], filter="label LIKE 'ROW-%'").num_rows == 364


@pytest.mark.parametrize("task_id", ["delete_local", "delete_spark"])
def test_delete_equals_pylance_delete(run: DmlRun, task_id: str) -> None:
    assert run.tis[task_id].state == "success"
    before = pylance.dataset(run.oracle(task_id)).count_rows()
    pylance.dataset(run.oracle(task_id)).delete(PREDICATE)
    expected = before - pylance.dataset(run.oracle(task_id)).count_rows()
    assert xcom_value(run.dag_run, task_id)["num_deleted_rows"] == expected == 250 + 1
    assert _contents(run.uri(task_id)) == _contents(run.oracle(task_id))
    ours, theirs = pylance.dataset(run.uri(task_id)), pylance.dataset(run.oracle(task_id))
    assert ours.version == theirs.version == 3
    assert len(ours.get_fragments()) == len(theirs.get_fragments())


def test_spark_jobs_ran_only_where_needed(run: DmlRun) -> None:
    # delete_spark once (its first try failed after the job, before the commit: the retry commits the
    # result it staged); the local tasks never
    specs = [next(a for a in argv if a.endswith(".json")) for argv in run.spark_calls]
    assert [pathlib.Path(s).name.split("-")[1] for s in specs] == ["delete"], run.spark_calls
    assert run.tis["delete_spark"].try_number == 2


@pytest.mark.slow
def test_spark_jobs_of_the_whole_dag_ran_only_where_needed(full_run: DmlRun) -> None:
    run = full_run
    # update_spark once (its retry finds the landed commit), delete_spark once (its first try failed
    # after the job, before the commit: the retry commits the result it staged), update_spark_fails
    # once; the local tasks never
    specs = [next(a for a in argv if a.endswith(".json")) for argv in run.spark_calls]
    assert [pathlib.Path(s).name.split("-")[1] for s in specs] == ["update", "delete", "update"]
    assert run.tis["delete_spark"].try_number == 2


def test_bad_column_fails_before_anything_is_written(run: DmlRun) -> None:
    assert run.tis["update_bad_column"].state == "failed"
    failure = run.failure("update_bad_column")
    assert failure["type"] == "InvalidInputError" and "no_such_column" in failure["message"]
    assert pylance.dataset(run.uri("untouched")).version == 2
    assert _contents(run.uri("untouched")) == _contents(run.oracle("untouched"))


@pytest.mark.slow
def test_failed_spark_job_commits_nothing(full_run: DmlRun) -> None:
    run = full_run
    assert run.tis["update_spark_fails"].state == "failed"
    failure = run.failure("update_spark_fails")
    assert failure["type"] == "LanceSparkJobError" and "nothing was committed" in failure["message"]
    assert pylance.dataset(run.uri("untouched")).version == 2
    assert _contents(run.uri("untouched")) == _contents(run.oracle("untouched"))
