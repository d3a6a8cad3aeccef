"""The task job contract (compaction and Kartothek import on executors) without Spark: spec
validation, JSON round trips, digests, staging, the driver's re-planning checks, and how a job
failure is reported."""

from __future__ import annotations

import pathlib
import sys

import pyarrow as pa
import pytest

import airflow_lance.core as lance
from airflow_lance.spark.job import describe_failure, parse_spec, read_spec
from airflow_lance.spark.spec import JobSpecError, WriteJobSpec
from airflow_lance.spark.task_spec import TaskJobResult, TaskJobSpec, split_evenly
from airflow_lance.spark.tasks import execute_compaction_task, plan_import

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

from kartothek_fixtures import STORE  # noqa: E402

SECRET = "shh-task-spec-5521"


def _compaction_spec(**overrides: object) -> TaskJobSpec:
    fields: dict[str, object] = {
        "kind": "compaction", "uri": "s3://bucket/ds.lance", "tasks": ({"read_version": 3, "fragments": []},),
        "staging_root": "s3://bucket/ds.lance", "staging_name": "_airflow_staging/k.json",
        "storage_options": {"aws_secret_access_key": SECRET},
    }
    fields.update(overrides)
    return TaskJobSpec(**fields)  # type: ignore[arg-type]


def _kartothek_params(**overrides: object) -> dict[str, object]:
    params: dict[str, object] = {"store_uri": str(STORE), "dataset_uuid": "two_keys", "table": "table",
                                 "mode": "create", "partition_columns": "restore", "max_rows_per_file": 10,
                                 "max_bytes_per_file": 1 << 30, "idempotency_key": "k"}
    params.update(overrides)
    return params


def test_round_trip_digest_and_secret_free_repr() -> None:
    spec = _compaction_spec()
    assert TaskJobSpec.from_json(spec.to_json()) == spec
    assert parse_spec(spec.to_json()) == spec
    assert SECRET not in repr(spec) and SECRET not in spec.describe()
    assert _compaction_spec(storage_options={}, staging_name="other.json").digest() == spec.digest()
    assert _compaction_spec(tasks=({"read_version": 4, "fragments": []},)).digest() != spec.digest()
    kartothek = TaskJobSpec(kind="kartothek_import", uri="/t", tasks=(("a", "b"), ("c",)), staging_root="/t",
                            staging_name="x.json", params=_kartothek_params(),
                            source_storage_options={"token": SECRET})
    assert TaskJobSpec.from_json(kartothek.to_json()) == kartothek
    assert kartothek.digest() == TaskJobSpec.from_json(
        kartothek.to_json().replace(SECRET, "different")).digest()
    assert "3 partitions in 2 Spark tasks" in kartothek.describe()


def test_write_specs_still_parse_as_write_specs() -> None:
    from airflow_lance.spark.spec import SourceSpec

    write = WriteJobSpec(uri="/d", mode="create", source=SourceSpec.from_fields(sql="SELECT 1"), read_version=0,
                         staging_root="/d", staging_name="s.json")
    assert parse_spec(write.to_json()) == write


@pytest.mark.parametrize(("overrides", "message"), [
    ({"kind": "vacuum"}, "job must be one of"),
    ({"tasks": ()}, "non-empty"),
    ({"tasks": ("not an object",)}, "must be objects"),
    ({"staging_name": ""}, "staging location"),
    ({"kind": "kartothek_import", "tasks": (("a",),)}, "needs params"),
    ({"kind": "kartothek_import", "tasks": ((1,),), "params": _kartothek_params()}, "lists of partition labels"),
])
def test_bad_specs_raise_a_typed_error(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(JobSpecError, match=message):
        _compaction_spec(**overrides)


def test_malformed_documents_raise_a_typed_error(tmp_path: pathlib.Path) -> None:
    with pytest.raises(JobSpecError, match="operator and job differ"):
        parse_spec('{"job": "compaction", "spec_version": 99}')
    with pytest.raises(JobSpecError, match="lacks 'uri'"):
        parse_spec('{"job": "compaction", "spec_version": 1, "tasks": []}')
    with pytest.raises(JobSpecError, match="not JSON"):
        parse_spec("{")
    path = tmp_path / "spec.json"
    path.write_text(_compaction_spec().to_json())
    assert read_spec(str(path)) == _compaction_spec()
    with pytest.raises(JobSpecError, match="malformed"):
        TaskJobResult.from_json('{"spec_digest": "d", "results": {}, "elapsed_seconds": 1}')


def test_staged_result_round_trip(tmp_path: pathlib.Path) -> None:
    result = TaskJobResult("digest", ({"a": 1}, {"b": [2]}), 1.5, {"already_imported_version": 3})
    root = str(tmp_path / "ds.lance")
    assert TaskJobResult.load(root, "_airflow_staging/x.json", {}) is None
    result.save(root, "_airflow_staging/x.json", {})
    assert TaskJobResult.load(root, "_airflow_staging/x.json", {}) == result
    TaskJobResult.discard(root, "_airflow_staging/x.json", {})
    assert TaskJobResult.load(root, "_airflow_staging/x.json", {}) is None


@pytest.mark.parametrize(("items", "parts", "expected"), [
    (["a", "b", "c", "d", "e"], 2, [["a", "b", "c"], ["d", "e"]]),
    (["a", "b"], None, [["a"], ["b"]]),
    (["a", "b"], 5, [["a"], ["b"]]),
    (["a", "b", "c"], 1, [["a", "b", "c"]]),
    ([], 3, []),
])
def test_split_evenly_keeps_order(items: list[str], parts: int | None, expected: list[list[str]]) -> None:
    assert split_evenly(items, parts) == expected


def test_executor_compaction_task_matches_the_core(tmp_path: pathlib.Path) -> None:
    uri = str(tmp_path / "ds.lance")
    for i in range(4):
        lance.write_dataset(pa.table({"id": list(range(i * 10, i * 10 + 10))}), uri, mode="create" if i == 0 else "append")
    plan = lance.Compaction.plan(uri, target_rows_per_fragment=100)
    results = [execute_compaction_task(task.to_json(), uri=uri, storage_options={}) for task in plan.tasks]
    metrics = lance.Compaction.commit(uri, results)
    assert (metrics.fragments_removed, metrics.fragments_added) == (4, 1)
    assert lance.dataset(uri).to_table().column("id").to_pylist() == list(range(40))


def test_discard_removes_the_files_of_uncommitted_results(tmp_path: pathlib.Path) -> None:
    uri = str(tmp_path / "ds.lance")
    for i in range(3):
        lance.write_dataset(pa.table({"id": [i]}), uri, mode="create" if i == 0 else "append")
    before = {p.name for p in (tmp_path / "ds.lance" / "data").iterdir()}
    plan = lance.Compaction.plan(uri, target_rows_per_fragment=100)
    results = [task.execute(uri) for task in plan.tasks]
    assert {p.name for p in (tmp_path / "ds.lance" / "data").iterdir()} != before
    assert lance.Compaction.discard(uri, [r.to_json() for r in results]) == 1
    assert {p.name for p in (tmp_path / "ds.lance" / "data").iterdir()} == before
    assert lance.dataset(uri).count_rows() == 3


def test_driver_refuses_an_import_whose_source_changed_or_whose_labels_differ(tmp_path: pathlib.Path) -> None:
    plan = lance.plan_kartothek_import(STORE, "two_keys", "table", str(tmp_path / "t.lance"))
    assert isinstance(plan, lance.KartothekImportPlan)
    labels = [p.label for p in plan.source.partitions]

    def spec(**params: object) -> TaskJobSpec:
        return TaskJobSpec(kind="kartothek_import", uri=str(tmp_path / "t.lance"), tasks=(tuple(labels),),
                           staging_root=str(tmp_path), staging_name="s.json",
                           params=_kartothek_params(idempotency_key=plan.idempotency_key, **params))

    assert isinstance(plan_import(spec()), lance.KartothekImportPlan)
    with pytest.raises(JobSpecError, match="changed after the operator planned"):
        plan_import(TaskJobSpec(**{**spec().__dict__, "params": _kartothek_params()}))
    with pytest.raises(JobSpecError, match="partition labels"):
        plan_import(TaskJobSpec(**{**spec().__dict__, "tasks": (tuple(labels[1:]),)}))


def test_partitions_written_json_round_trip(tmp_path: pathlib.Path) -> None:
    plan = lance.plan_kartothek_import(STORE, "two_keys", "table", str(tmp_path / "t.lance"))
    assert isinstance(plan, lance.KartothekImportPlan)
    written = lance.write_kartothek_partitions(plan, [plan.source.partitions[0].label])
    assert lance.PartitionsWritten.from_json(written.to_json()) == written
    with pytest.raises(lance.InvalidInputError, match="malformed"):
        lance.PartitionsWritten.from_json({"fragments": "x"})


def test_job_failures_name_the_lance_error_raised_on_an_executor() -> None:
    wrapped = RuntimeError(
        "An exception was thrown from the Python worker. Please see the stack trace below.\n"
        "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
        "airflow_lance.core.errors.CorruptFileError: data/x.lance: file has 797 bytes, expected 1595\n"
    )
    assert describe_failure(wrapped) == "CorruptFileError: data/x.lance: file has 797 bytes, expected 1595 " \
                                        "(on an executor)"
    assert describe_failure(JobSpecError("bad spec\nmore")) == "JobSpecError: bad spec"
