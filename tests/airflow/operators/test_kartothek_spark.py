"""KartothekToLanceOperator with ``execution="spark"`` through ``dag.test()`` and real
``spark-submit`` on ``local[2]``: partitions are read and written on executors, the worker
validates, plans and commits (tests/airflow/dags/lance_test_kartothek_spark.py)."""

from __future__ import annotations

import dataclasses
import json
import pathlib
import sys
from typing import Any

import lance as pylance
import pytest
from lance_airflow_testing import (
    SparkSubmitSpy,
    asset_events,
    connection_env,
    load_dag,
    rendered_fields,
    task_instances,
    xcom_value,
)

import airflow_lance.core as lance

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from kartothek_fixtures import STORE, as_expected, ground_truth, kartothek_read  # noqa: E402

SECRET = "S3cr3t-kartothek-spark-option-never-logged-9d4e"


@dataclasses.dataclass
class SparkImportRun:
    root: pathlib.Path
    dag_run: Any
    tis: dict[str, Any]
    spy: SparkSubmitSpy


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, spark_submit_spy: SparkSubmitSpy) -> SparkImportRun:
    root = tmp_path_factory.mktemp("kartothek-spark")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KARTOTHEK_TEST_ROOT", str(root))
        mp.setenv("KARTOTHEK_TEST_SECRET", SECRET)
        mp.setenv(*connection_env("lance_test", conn_type="lance", host=str(root)))
        dag_run = load_dag("lance_test_kartothek_spark.py", "lance_test_kartothek_spark").test()
    return SparkImportRun(root, dag_run, task_instances(dag_run), spark_submit_spy)


def test_spark_import_reads_back_with_pylance_equal_to_the_kartothek_data(run: SparkImportRun) -> None:
    assert run.tis["import_two_keys"].state == "success"
    ds = pylance.dataset(str(run.root / "two_keys.lance"))
    assert ds.version == 1
    data = as_expected(ds.to_table(), ds.schema)
    assert data.equals(as_expected(ground_truth("two_keys", "table"), ds.schema))
    assert data.equals(as_expected(kartothek_read("two_keys", "table"), ds.schema))
    assert all(f.count_rows() <= 1 for f in ds.get_fragments())  # max_rows_per_file=1


def test_a_retry_before_the_commit_commits_the_staged_result_without_running_spark_again(
        run: SparkImportRun) -> None:
    ti = run.tis["import_two_keys"]
    assert (ti.state, ti.try_number) == ("success", 2)  # try 1 failed after the job, before the commit
    assert sum(1 for _, argv, _ in run.spy.runs() if "airflow-lance-import_two_keys" in argv) == 1
    ds = lance.dataset(str(run.root / "two_keys.lance"))
    assert ds.version == 1
    referenced = {f.path for fragment in ds.get_fragments() for f in fragment.data_files()}
    assert {p.name for p in (run.root / "two_keys.lance" / "data").iterdir()} == referenced  # written once


def test_spark_import_equals_the_in_process_import(run: SparkImportRun, tmp_path: pathlib.Path) -> None:
    local = lance.import_kartothek(f"file://{STORE}", "two_keys", "table", str(tmp_path / "local.lance"),
                                   max_rows_per_file=1)
    result = xcom_value(run.dag_run, "import_two_keys")
    assert result["execution"] == "spark" and result["already_imported"] is False
    for key, local_key in (("partitions", "partitions"), ("empty_partitions", "empty_partitions"),
                           ("rows", "rows"), ("fragments", "fragments"), ("bytes", "bytes_written")):
        assert result[key] == getattr(local, local_key), key
    assert result["verification"]["ok"] and result["verification"]["differences"] == []
    ours = lance.dataset(str(run.root / "two_keys.lance"))
    theirs = lance.dataset(str(tmp_path / "local.lance"))
    assert ours.to_table().equals(theirs.to_table())  # same partition order, same rows
    assert ours.schema.metadata[b"kartothek.dataset_uuid"] == b"two_keys"
    txn = ours.read_transaction()
    assert txn is not None and txn.transaction_properties[lance.IDEMPOTENCY_KEY].startswith("kartothek-import-")


def test_reimport_on_spark_is_a_no_op_without_a_spark_job(run: SparkImportRun) -> None:
    assert run.tis["reimport_two_keys"].state == "success"
    result = xcom_value(run.dag_run, "reimport_two_keys")
    assert result["already_imported"] is True and result["version"] == 1
    assert len(pylance.dataset(str(run.root / "two_keys.lance")).versions()) == 1
    events = asset_events(f"lance+file://{run.root / 'two_keys.lance'}")
    assert [(e["version"], e["already_imported"]) for e in events] == [(1, False), (1, True)]


def test_empty_partition_dataset_on_spark(run: SparkImportRun) -> None:
    assert run.tis["import_empty_partition"].state == "success"
    result = xcom_value(run.dag_run, "import_empty_partition")
    assert result["empty_partitions"] >= 1 and result["verification"]["ok"]
    ds = pylance.dataset(str(run.root / "empty_partition.lance"))
    expected = ground_truth("empty_partition", "table")
    assert as_expected(ds.to_table(), ds.schema).equals(as_expected(expected, ds.schema))


def test_one_spark_job_per_import_and_no_secret_anywhere(run: SparkImportRun) -> None:
    calls = run.spy.calls()
    assert len(calls) == 2  # two_keys and empty_partition; the re-run found the import landed
    assert all(SECRET not in " ".join(argv) for argv in calls)
    output = run.spy.output()
    assert "(12 partitions in 3 Spark tasks)" in output and "airflow-lance job: staged 3 task results" in output
    assert SECRET not in output
    for task_id in run.tis:
        assert SECRET not in json.dumps(xcom_value(run.dag_run, task_id), default=str)
    assert SECRET not in json.dumps(rendered_fields(run.dag_run), default=str)
    for target in ("two_keys.lance", "empty_partition.lance"):
        assert not list((run.root / target / "_airflow_staging").glob("*.json"))
