"""LanceSparkMergeInsertOperator through ``dag.test()`` with real ``spark-submit`` on ``local[2]``,
each case against pylance's ``merge_insert`` on an identical copy of a dataset pylance wrote
(stable row ids, deletions in place). One run of ``tests/airflow/dags/lance_test_merge_insert.py``
is shared by the assertions; the concurrent delete and the failing job run in a second DAG of that
file, in make stress (``--run-slow``)."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import shutil
import sys
from typing import Any

import lance as pylance
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from lance_airflow_testing import SparkSubmitSpy, connection_env, load_dag, task_instances, xcom_value

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "dags"))
from lance_test_merge_insert import BY_SOURCE, CONDITION, appended_rows  # noqa: E402

NAMES = ("upsert", "conditional", "duplicates", "appended")
SLOW_NAMES = ("conflict", "duplicates")
COUNTS = ("num_inserted_rows", "num_updated_rows", "num_deleted_rows")


#: the upsert's key is uint32 in the dataset and the Parquet source (Spark reads it as bigint)
KEY_TYPES = {"upsert": pa.uint32()}


def _target(n: int = 2000, key_type: pa.DataType = pa.int64()) -> pa.Table:
    ids = list(range(n))
    return pa.table({
        "id": pa.array(ids, key_type),
        "price": pa.array([float(i * 7 % 100) for i in ids]),
        "label": [f"t-{i}" for i in ids],
        "vec": pa.FixedSizeListArray.from_arrays(pa.array([float(i % 3) for i in range(4 * n)], pa.float32()), 4),
    })


def _source(ids: list[int | None], key_type: pa.DataType = pa.int64()) -> pa.Table:
    return pa.table({
        "id": pa.array(ids, key_type),
        "price": pa.array([1000.0 + (i or 0) for i in ids]),
        "label": [f"s-{i}" for i in ids],
        "vec": pa.array([[float((i or 0) % 5)] * 4 for i in ids], pa.list_(pa.float32())),  # as Spark has it
    })


def _partial() -> pa.Table:
    ids = list(range(0, 1000, 2)) + list(range(2000, 2100))
    return pa.table({"id": pa.array(ids, pa.int64()), "price": pa.array([float(i * 13 % 100) for i in ids])})


@dataclasses.dataclass
class MergeRun:
    root: pathlib.Path
    dag_run: Any
    tis: dict[str, Any]
    spy: SparkSubmitSpy

    def uri(self, name: str) -> str:
        return str(self.root / f"{name}.lance")

    def oracle(self, name: str) -> pylance.LanceDataset:
        return pylance.dataset(str(self.root / "oracle" / f"{name}.lance"))

    def source(self, name: str, ds: pylance.LanceDataset) -> pa.Table:
        table = pq.read_table(self.root / f"{name}.parquet")
        return table.cast(pa.schema([ds.schema.field(n) for n in table.column_names]))

    def failure(self, task_id: str) -> dict[str, Any]:
        return json.loads((self.root / "failures" / f"{task_id}.json").read_text())


def _prepare(root: pathlib.Path, names: tuple[str, ...]) -> None:
    for name in names:
        ds = pylance.write_dataset(_target(key_type=KEY_TYPES.get(name, pa.int64())),
                                   str(root / "oracle" / f"{name}.lance"), max_rows_per_file=500,
                                   enable_stable_row_ids=True)
        ds.delete("id IN (7, 1501, 1999)")
        shutil.copytree(root / "oracle" / f"{name}.lance", root / f"{name}.lance")
    pq.write_table(_source([*range(1500, 2500), None], pa.uint32()), root / "upsert.parquet")


def _run_dag(root: pathlib.Path, dag_id: str, spy: SparkSubmitSpy) -> MergeRun:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LANCE_TEST_ROOT", str(root))
        mp.setenv(*connection_env("lance_test", conn_type="lance", host=str(root)))
        dag_run = load_dag("lance_test_merge_insert.py", dag_id).test()
    return MergeRun(root, dag_run, task_instances(dag_run), spy)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, spark_submit_spy: SparkSubmitSpy) -> MergeRun:
    root = tmp_path_factory.mktemp("merge-insert")
    _prepare(root, NAMES)
    pq.write_table(_partial(), root / "partial.parquet")  # the oracle's copy of the Lance source
    pylance.write_dataset(_partial(), str(root / "partial-source.lance"), max_rows_per_file=250)
    pq.write_table(_source([1, 2, 2, 3]), root / "duplicates.parquet")
    return _run_dag(root, "lance_test_merge_insert", spark_submit_spy)


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory: pytest.TempPathFactory, spark_submit_spy: SparkSubmitSpy) -> MergeRun:
    """The second DAG (make stress): a concurrent delete that makes the job run again, a failing job."""
    root = tmp_path_factory.mktemp("merge-insert-slow")
    _prepare(root, SLOW_NAMES)
    return _run_dag(root, "lance_test_merge_insert_slow", spark_submit_spy)


def _rows(ds: pylance.LanceDataset) -> dict[str, list[Any]]:
    return ds.to_table().sort_by([("id", "ascending"), ("label", "ascending")]).to_pydict()


def _row_ids(ds: pylance.LanceDataset) -> dict[int, int]:
    """Row id of each row that existed before the merge (updated rows keep theirs; the ids of
    inserted rows depend on the insertion order)."""
    table = ds.to_table(columns=["id"], with_row_id=True, filter="id < 2000 AND id NOT IN (7, 1501, 1999)")
    return dict(zip(table.column("id").to_pylist(), table.column("_rowid").to_pylist(), strict=True))


def _files(root: pathlib.Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for folder in ("data", "_deletions") if (root / folder).exists()
                  for p in (root / folder).iterdir())


def _spark_runs(run: MergeRun, task_id: str) -> int:
    name = f"airflow-lance-{task_id}"
    return sum(1 for _, argv, _ in run.spy.runs() if name in argv)


def test_upsert_equals_pylance_and_a_retry_after_the_commit_commits_nothing(run: MergeRun) -> None:
    ti = run.tis["upsert"]
    assert (ti.state, ti.try_number) == ("success", 2)
    oracle = run.oracle("upsert")
    expected = oracle.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
        run.source("upsert", oracle))
    result = xcom_value(run.dag_run, "upsert")
    assert {k: result[k] for k in COUNTS} == {k: expected[k] for k in COUNTS}
    assert (result["num_inserted_rows"], result["num_updated_rows"]) == (503, 498)  # 1501 and 1999 were deleted: inserted again
    ours = pylance.dataset(run.uri("upsert"))
    assert (ours.version, result["version"], result["read_version"]) == (3, 3, 2)  # one commit for two tries
    assert ours.schema == run.oracle("upsert").schema and ours.schema.field("id").type == pa.uint32()
    assert _rows(ours) == _rows(run.oracle("upsert"))
    assert _row_ids(ours) == _row_ids(run.oracle("upsert"))  # updated rows kept their row ids
    assert type(ours.read_transaction(3).operation).__name__ == "Update"
    assert _spark_runs(run, "upsert") == 1  # the retry found the landed commit


def test_conditional_update_and_delete_by_source_from_a_partial_lance_source(run: MergeRun) -> None:
    ti = run.tis["conditional"]
    assert (ti.state, ti.try_number) == ("success", 2)
    # the first try failed after the job, before the commit: the retry committed the result it staged
    assert _spark_runs(run, "conditional") == 1
    assert pylance.dataset(run.uri("conditional")).version == 3
    staging = (run.root / "conditional.lance" / "_airflow_staging").rglob("*.json")
    assert [p.name for p in staging if not p.name.endswith(".landed.json")] == []  # committed, then removed
    oracle = run.oracle("conditional")
    expected = (oracle.merge_insert("id").when_matched_update_all(CONDITION).when_not_matched_insert_all()
                .when_not_matched_by_source_delete(BY_SOURCE).execute(run.source("partial", oracle)))
    result = xcom_value(run.dag_run, "conditional")
    assert {k: result[k] for k in COUNTS} == {k: expected[k] for k in COUNTS}
    assert all(result[k] > 0 for k in COUNTS)
    ours = pylance.dataset(run.uri("conditional"))
    assert _rows(ours) == _rows(run.oracle("conditional"))
    assert _row_ids(ours) == _row_ids(run.oracle("conditional"))


def test_duplicate_source_keys_fail_and_change_nothing(run: MergeRun) -> None:
    assert run.tis["duplicates"].state == "failed"
    failure = run.failure("duplicates")
    assert failure["type"] == "LanceSparkJobError"
    assert "AmbiguousMergeInsertError" in failure["message"] and "{'id': 2}" in failure["message"]
    oracle = run.oracle("duplicates")
    with pytest.raises(OSError, match="Ambiguous merge insert"):
        oracle.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
            run.source("duplicates", oracle))
    ours = pylance.dataset(run.uri("duplicates"))
    assert ours.version == 2
    assert _rows(ours) == _rows(run.oracle("duplicates"))
    # detected before anything was written: the same files as the untouched copy
    assert _files(run.root / "duplicates.lance") == _files(run.root / "oracle" / "duplicates.lance")


def test_rows_appended_during_the_job_are_kept(run: MergeRun) -> None:
    assert run.tis["concurrent_append"].state == "success"
    oracle = run.oracle("appended")
    expected = oracle.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
        run.source("upsert", oracle))
    pylance.dataset(oracle.uri).insert(appended_rows())
    result = xcom_value(run.dag_run, "concurrent_append")
    assert {k: result[k] for k in COUNTS} == {k: expected[k] for k in COUNTS}
    ours = pylance.dataset(run.uri("appended"))
    assert (result["read_version"], result["version"], ours.version) == (2, 4, 4)  # rebased over version 3
    assert _rows(ours) == _rows(pylance.dataset(oracle.uri))
    assert _row_ids(ours) == _row_ids(pylance.dataset(oracle.uri))
    assert _spark_runs(run, "concurrent_append") == 1


@pytest.mark.slow
def test_a_concurrent_delete_of_replaced_rows_makes_the_job_run_again(slow_run: MergeRun) -> None:
    run = slow_run
    assert run.tis["concurrent_delete"].state == "success"
    oracle = run.oracle("conflict")
    oracle.delete("id = 1600")
    oracle = pylance.dataset(oracle.uri)
    expected = oracle.merge_insert("id").when_matched_update_all().when_not_matched_insert_all().execute(
        run.source("upsert", oracle))
    result = xcom_value(run.dag_run, "concurrent_delete")
    assert {k: result[k] for k in COUNTS} == {k: expected[k] for k in COUNTS}
    assert (result["read_version"], result["version"]) == (3, 4)
    ours = pylance.dataset(run.uri("conflict"))
    assert _rows(ours) == _rows(pylance.dataset(oracle.uri))
    assert _spark_runs(run, "concurrent_delete") == 2


@pytest.mark.slow
def test_a_failed_job_commits_nothing(slow_run: MergeRun) -> None:
    run = slow_run
    assert run.tis["job_fails"].state == "failed"
    failure = run.failure("job_fails")
    assert failure["type"] == "LanceSparkJobError" and "nothing was committed" in failure["message"]
    assert "PATH_NOT_FOUND" in failure["message"]
    assert pylance.dataset(run.uri("duplicates")).version == 2
