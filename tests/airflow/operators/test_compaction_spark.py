"""LanceCompactFilesOperator in mode ``spark`` through ``dag.test()`` with real ``spark-submit``
on ``local[2]``: the rewrite tasks run on executors, the worker commits one Rewrite.

One run of ``lance_test_compact_spark`` (tests/airflow/dags/lance_test_maintenance.py): a
dataset of small fragments with deletions (compared with the same compaction done in process
on an identical copy), whose first try fails after the Spark job staged its result and before
the commit (the retry commits that result without running Spark again), and a dataset with a
truncated data file, whose job fails.
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
from typing import Any

import lance as pylance
import pyarrow as pa
import pytest
from lance_airflow_testing import SparkSubmitSpy, asset_events, connection_env, load_dag, task_instances, xcom_value

import airflow_lance.core as lance

SECRET = "S3cr3t-compaction-option-never-logged-0c21"


@dataclasses.dataclass
class CompactionRuns:
    root: pathlib.Path
    expected: pa.Table
    local_metrics: lance.CompactionMetrics
    version_before: int
    dag_run: Any
    broken_version_before: int
    spy: SparkSubmitSpy

    @property
    def uri(self) -> str:
        return str(self.root / "small.lance")


def _small_fragments(uri: str, fragments: int = 12, rows: int = 25) -> None:
    for i in range(fragments):
        ids = range(i * rows, (i + 1) * rows)
        table = pa.table({"id": pa.array(ids, pa.int64()), "name": pa.array([f"row-{j}" for j in ids]),
                          "vector": pa.array([[float(j), -float(j)] for j in ids], pa.list_(pa.float32(), 2))})
        lance.write_dataset(table, uri, mode="create" if i == 0 else "append")
    lance.dataset(uri).delete("id % 7 = 0")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, spark_submit_spy: SparkSubmitSpy) -> CompactionRuns:
    root = tmp_path_factory.mktemp("compact-spark")
    uri = str(root / "small.lance")
    _small_fragments(uri)
    pylance.dataset(uri).create_scalar_index("id", "BTREE")  # remapped by the commit in the worker
    shutil.copytree(uri, root / "local.lance")
    local_metrics = lance.compact_files(str(root / "local.lance"), target_rows_per_fragment=100)
    expected = pylance.dataset(uri).to_table()
    version_before = lance.dataset(uri).version

    broken = str(root / "broken.lance")
    _small_fragments(broken)
    victim = next((pathlib.Path(broken) / "data").iterdir())
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    broken_version_before = lance.dataset(broken).version

    dag = load_dag("lance_test_maintenance.py", "lance_test_compact_spark")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(*connection_env("lance_default", conn_type="lance", host=str(root),
                                  extra={"storage_options": {"aws_secret_access_key": SECRET}}))
        dag_run = dag.test(run_conf={"uri": uri, "broken_uri": broken, "target": 100})
    return CompactionRuns(root, expected, local_metrics, version_before, dag_run, broken_version_before,
                          spark_submit_spy)


@pytest.mark.filterwarnings("ignore:The 'list_indices' method is deprecated:DeprecationWarning")
def test_spark_compaction_keeps_rows_and_order_and_matches_the_local_compaction(runs: CompactionRuns) -> None:
    assert task_instances(runs.dag_run)["compact"].state == "success"
    result = xcom_value(runs.dag_run, "compact")
    assert result["mode"] == "spark" and result["read_version"] == runs.version_before
    after = pylance.dataset(runs.uri)
    # the executors never need fragment ids: the worker reserves them (one version, as pylance does
    # when an index must be remapped) and commits the Rewrite with the remapped index
    assert (result["version"], result["versions_created"]) == (after.version, 2) == (runs.version_before + 2, 2)
    assert after.to_table() == runs.expected  # same rows, same order, deletions materialised
    assert sum(f.count_rows() for f in after.get_fragments()) == runs.expected.num_rows
    assert all(f.deletion_file() is None for f in after.get_fragments())
    local = runs.local_metrics.to_json()
    assert {k: result[k] for k in local} == local
    assert result["fragments_before"] == 12 and result["fragments_after"] == len(after.get_fragments())
    txn = lance.dataset(runs.uri).read_transaction()
    assert txn is not None and txn.kind == "rewrite" and txn.read_version == runs.version_before
    (index,) = after.list_indices()
    assert sorted(index["fragment_ids"]) == [f.fragment_id for f in after.get_fragments()]
    for query in ("id = 50", "id >= 100 AND id < 230", "id > 280"):
        assert "ScalarIndexQuery" in after.scanner(filter=query).explain_plan()
        assert after.to_table(filter=query) == after.to_table(filter=query, use_scalar_index=False)


def test_spark_compaction_emits_the_asset_event_and_leaves_no_staged_result(runs: CompactionRuns) -> None:
    events = asset_events(f"lance+file://{runs.uri}")
    assert [e["version"] for e in events if e.get("mode") == "spark"] == [xcom_value(runs.dag_run, "compact")["version"]]
    assert not list((runs.root / "small.lance" / "_airflow_staging").glob("*.json"))


def test_every_new_file_is_referenced(runs: CompactionRuns) -> None:
    ds = lance.dataset(runs.uri)
    referenced = {f.path for v in (runs.version_before, ds.version) for frag in ds.checkout_version(v).get_fragments()
                  for f in frag.data_files()}
    assert {p.name for p in (runs.root / "small.lance" / "data").iterdir()} == referenced


def test_the_job_ran_on_spark_without_secrets_on_the_command_line(runs: CompactionRuns) -> None:
    calls = runs.spy.calls()
    assert len(calls) == 2 and all(any(a.endswith("airflow_lance.zip") for a in argv) for argv in calls)
    assert all(SECRET not in " ".join(argv) for argv in calls)
    output = runs.spy.output()
    assert "compaction tasks on" in output and "airflow-lance job: staged" in output
    assert SECRET not in output
    assert SECRET not in str(xcom_value(runs.dag_run, "compact"))


def test_failed_spark_job_fails_the_task_and_commits_nothing(runs: CompactionRuns) -> None:
    assert task_instances(runs.dag_run)["compact_broken"].state == "failed"
    assert "airflow-lance job failed: CorruptFileError" in runs.spy.output()
    assert lance.dataset(str(runs.root / "broken.lance")).version == runs.broken_version_before
    assert xcom_value(runs.dag_run, "compact_broken") is None


def test_a_retry_before_the_commit_commits_the_staged_result_without_running_spark_again(
        runs: CompactionRuns) -> None:
    ti = task_instances(runs.dag_run)["compact"]
    assert (ti.state, ti.try_number) == ("success", 2)  # try 1 failed after the job, before the commit
    assert sum(1 for _, argv, _ in runs.spy.runs() if "airflow-lance-compact" in argv) == 1
    after = pylance.dataset(runs.uri)
    assert after.version == runs.version_before + 2  # one compaction (with its index remap), not two
    assert after.to_table() == runs.expected
