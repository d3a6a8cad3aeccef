"""LanceSparkWriteOperator through ``dag.test()`` with real ``spark-submit`` on ``local[2]``.

One run of ``tests/airflow/dags/lance_test_spark_write.py`` is shared by the assertions:
a refused create, an append whose first try fails after its commit landed, an overwrite whose
first try fails before committing, and a Spark job that fails. (Create and append from Parquet
and SQL sources are exercised by the ingest example, tests/airflow/test_example_dags.py.)
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
from typing import Any

import lance as pylance
import pyarrow as pa
import pyarrow.compute as pc
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

SECRET = "S3cr3t-value-never-logged-7f3a91"


@dataclasses.dataclass
class WriteRun:
    root: pathlib.Path
    base: pa.Table
    dag_run: Any
    tis: dict[str, Any]
    spy: SparkSubmitSpy

    @property
    def uri(self) -> str:
        return str(self.root / "ds.lance")

    def failure(self, task_id: str) -> dict[str, Any]:
        return json.loads((self.root / "failures" / f"{task_id}.json").read_text())


def _base_table() -> pa.Table:
    ids = pa.array(range(1000), pa.int64())
    return pa.table({
        "id": ids,
        "label": pa.array([f"base-{i}" for i in range(1000)]),
        "values": pa.array([[float(i), 0.5] for i in range(1000)], pa.list_(pa.float64())),
    })


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, spark_submit_spy: SparkSubmitSpy) -> WriteRun:
    root = tmp_path_factory.mktemp("spark-write")
    base = _base_table()
    lance.write_dataset(base, str(root / "ds.lance"))
    lance.write_dataset(base, str(root / "cleaned.lance"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("LANCE_TEST_ROOT", str(root))
        mp.setenv(*connection_env("lance_test", conn_type="lance", host=str(root),
                                  extra={"storage_options": {"aws_secret_access_key": SECRET}}))
        dag_run = load_dag("lance_test_spark_write.py", "lance_test_spark_write").test()
    return WriteRun(root, base, dag_run, task_instances(dag_run), spark_submit_spy)


def _rows(table: pa.Table) -> dict[str, list[Any]]:
    """Contents in id order (Spark marks its non-null columns ``not null``: nullability is not compared)."""
    return table.sort_by("id").to_pydict()


def test_create_is_refused_before_spark_runs(run: WriteRun) -> None:
    assert run.tis["create_existing_fails"].state == "failed"
    failure = run.failure("create_existing_fails")
    assert failure["type"] == "DatasetAlreadyExistsError"
    assert "already exists" in failure["message"]


def test_retry_after_the_commit_landed_commits_exactly_once(run: WriteRun) -> None:
    ti = run.tis["append_retry_after_commit"]
    assert (ti.state, ti.try_number) == ("success", 2)
    result = xcom_value(run.dag_run, "append_retry_after_commit")
    assert result == {"uri": run.uri, "mode": "append", "version": 2, "read_version": 1, "num_rows": 400,
                      "num_fragments": result["num_fragments"], "bytes_written": result["bytes_written"]}
    assert result["num_fragments"] >= 1 and result["bytes_written"] > 0
    extra = pylance.dataset(run.uri, version=2).to_table()
    expected = pa.concat_tables([
        run.base,
        pa.table({
            "id": pa.array(range(1000, 1400), pa.int64()),
            "label": pa.array([f"extra-{i}" for i in range(1000, 1400)]),
            "values": pa.array([[float(i), 0.5] for i in range(1000, 1400)], pa.list_(pa.float64())),
        }),
    ])
    assert _rows(extra) == _rows(expected)
    txn = lance.dataset(run.uri).read_transaction(2)
    assert txn is not None and txn.transaction_properties["airflow.try_number"] == "1"


def test_retry_before_the_commit_commits_once_from_the_staged_result(run: WriteRun) -> None:
    ti = run.tis["overwrite_retry_before_commit"]
    assert (ti.state, ti.try_number) == ("success", 2)
    result = xcom_value(run.dag_run, "overwrite_retry_before_commit")
    assert {k: result[k] for k in ("version", "read_version", "num_rows", "num_fragments")} == {
        "version": 3, "read_version": 2, "num_rows": 300, "num_fragments": 3}
    table = pylance.dataset(run.uri, version=3).to_table()
    assert table.schema.names == ["id", "label", "embedding", "other"]
    # vectors: one marked in its Spark metadata, one named in the (templated) fixed_size_lists
    assert table.schema.field("embedding").type.list_size == 2
    assert table.schema.field("other").type == pa.list_(pa.field("element", pa.float64()), 3)
    assert _rows(table) == {"id": list(range(300)), "label": [f"new-{i}" for i in range(300)],
                            "embedding": [[float(i), 0.5] for i in range(300)],
                            "other": [[1.0, 2.0, float(i)] for i in range(300)]}
    txn = lance.dataset(run.uri).read_transaction(3)
    assert txn is not None and txn.kind == "overwrite" and txn.transaction_properties["airflow.try_number"] == "2"


def test_retry_after_a_cleanup_removed_the_committed_version_commits_nothing(run: WriteRun) -> None:
    """The look-back cannot see a version cleanup removed; the commit receipt left in the staging
    area can: the retry returns the first try's result and writes nothing."""
    ti = run.tis["append_retry_after_cleanup"]
    assert (ti.state, ti.try_number) == ("success", 2)
    uri = str(run.root / "cleaned.lance")
    ds = lance.dataset(uri)
    assert [v["version"] for v in ds.versions()] == [3]  # 2 (the append) and 3 (a delete of nothing); 1, 2 removed
    assert pylance.dataset(uri).count_rows() == 1400
    result = xcom_value(run.dag_run, "append_retry_after_cleanup")
    assert (result["version"], result["read_version"], result["num_rows"]) == (2, 1, 400)
    assert list((run.root / "cleaned.lance" / "_airflow_staging").glob("*.landed.json"))


def test_each_write_ran_spark_once_and_left_no_orphan_files(run: WriteRun) -> None:
    # append try 1, overwrite try 1, the failing job, append-after-cleanup try 1: retries reuse the
    # commit, its receipt or the staged result
    assert len(run.spy.calls()) == 4
    ds = lance.dataset(run.uri)
    versions = [ds.checkout_version(v) for v in (1, 2, 3)]
    referenced = {f.path for version in versions for frag in version.get_fragments() for f in frag.data_files()}
    on_disk = {p.name for p in (run.root / "ds.lance" / "data").iterdir()}
    assert on_disk == referenced
    staging = run.root / "ds.lance" / "_airflow_staging"
    assert {p.name.endswith(".landed.json") for p in staging.glob("*.json")} <= {True}  # commit receipts only


def test_failed_spark_job_fails_the_task_and_leaves_the_dataset_unchanged(run: WriteRun) -> None:
    assert run.tis["spark_job_fails"].state == "failed"
    failure = run.failure("spark_job_fails")
    assert failure["type"] == "LanceSparkJobError"
    assert "nothing was committed" in failure["message"]
    assert "PATH_NOT_FOUND" in failure["message"] or "does not exist" in failure["message"]
    assert lance.dataset(run.uri).version == 3
    assert run.dag_run.state == "failed"


def test_asset_events_carry_the_committed_versions(run: WriteRun) -> None:
    extras = asset_events(f"lance+file://{run.uri}")
    assert [(e["version"], e["read_version"], e["num_rows"]) for e in extras] == [(2, 1, 400), (3, 2, 300)]


def test_secrets_stay_out_of_command_lines_output_xcom_and_templates(run: WriteRun) -> None:
    calls = run.spy.calls()
    assert calls and all(SECRET not in " ".join(argv) for argv in calls)
    spec_files = [arg for argv in calls for arg in argv if arg.endswith(".json")]
    assert spec_files and not any(pathlib.Path(p).exists() for p in spec_files)  # private spec files are gone
    assert "airflow-lance job: staged" in run.spy.output() and SECRET not in run.spy.output()
    for task_id in run.tis:
        assert SECRET not in json.dumps(xcom_value(run.dag_run, task_id), default=str)
    assert SECRET not in json.dumps(rendered_fields(run.dag_run), default=str)


def test_first_version_is_untouched(run: WriteRun) -> None:
    assert pc.all(pc.equal(pylance.dataset(run.uri, version=1).to_table().column("id"), run.base.column("id"))).as_py()
