"""Reusing a task job's staged result on retry (compaction, Kartothek import, update, delete), without
Spark: the result an earlier try staged is reused only for the very same job (spec digest, one result
per task) and only while every file it names exists; otherwise the job has to run again. The
retries through ``dag.test()`` and spark-submit are in test_compaction_spark.py,
test_kartothek_spark.py and test_update_delete.py."""

from __future__ import annotations

import dataclasses
import pathlib

import pyarrow as pa
import pytest

import airflow_lance.core as lance
from airflow_lance.operators._spark_submit import reusable_task_result
from airflow_lance.operators.maintenance import _rewritten_fragments
from airflow_lance.spark.spec import staging_location
from airflow_lance.spark.task_spec import TaskJobResult, TaskJobSpec


@dataclasses.dataclass
class Staged:
    uri: str
    spec: TaskJobSpec
    result: TaskJobResult


@pytest.fixture
def staged(tmp_path: pathlib.Path) -> Staged:
    """A compaction whose tasks ran (their files written, nothing committed) and whose result is staged."""
    uri = str(tmp_path / "small.lance")
    for i in range(4):
        lance.write_dataset(pa.table({"id": pa.array(range(i * 10, i * 10 + 10), pa.int64())}), uri,
                            mode="create" if i == 0 else "append")
    ds = lance.dataset(uri)
    plan = lance.Compaction.plan(ds, lance.CompactionOptions.build({"target_rows_per_fragment": 100}))
    root, name = staging_location(uri, "compaction/dag/run/task/-1")
    spec = TaskJobSpec(kind="compaction", uri=uri, tasks=tuple(t.to_json() for t in plan.tasks),
                       staging_root=root, staging_name=name)
    result = TaskJobResult(spec.digest(), tuple(t.execute(ds).to_json() for t in plan.tasks), 0.1)
    result.save(root, name, {})
    return Staged(uri, spec, result)


def test_the_staged_result_of_the_same_job_is_reused_while_its_files_exist(staged: Staged) -> None:
    assert reusable_task_result(staged.spec, _rewritten_fragments) == staged.result
    assert lance.dataset(staged.uri).version == 4  # nothing committed


def test_a_staged_result_whose_files_are_gone_is_not_reused(staged: Staged, caplog: pytest.LogCaptureFixture) -> None:
    (written,) = [f for r in staged.result.results for f in _rewritten_fragments(r)]
    (pathlib.Path(staged.uri) / "data" / written.files[0].path).unlink()
    assert reusable_task_result(staged.spec, _rewritten_fragments) is None
    assert "1 of its files are missing" in caplog.text and written.files[0].path in caplog.text


def test_a_result_staged_for_another_job_or_incomplete_is_not_reused(staged: Staged) -> None:
    other = dataclasses.replace(staged.spec, params={"read_version": 3})  # another plan: another digest
    assert reusable_task_result(other, _rewritten_fragments) is None
    TaskJobResult(staged.spec.digest(), (), 0.1).save(staged.spec.staging_root, staged.spec.staging_name, {})
    assert reusable_task_result(staged.spec, _rewritten_fragments) is None  # no result for the task
    TaskJobResult.discard(staged.spec.staging_root, staged.spec.staging_name, {})
    assert reusable_task_result(staged.spec, _rewritten_fragments) is None  # nothing staged
